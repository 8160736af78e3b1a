# The append path of one record: the checks, UNIQ_KEY, the record encoded into the segment
# (BLANK rule, CRC32 property), put's work and an inner batch record.
# Part of rocketstore.log._store: included by cext/_store.pyx, whose imports and
# constants it uses.

cdef bint _bytes_view(object data, Py_buffer *view, const uint8_t **ptr, Py_ssize_t *size) except -1:
    """Point ``ptr``/``size`` at the bytes of ``data``: a bytes object's own, else an export into
    ``view``; True when there is an export (the caller releases it)."""
    if PyBytes_CheckExact(data):
        ptr[0] = <const uint8_t *>PyBytes_AS_STRING(data)
        size[0] = PyBytes_GET_SIZE(data)
        return False
    PyObject_GetBuffer(data, view, PyBUF_SIMPLE)
    ptr[0] = <const uint8_t *>view.buf
    size[0] = view.len
    return True


cdef int _check_open(CommitLogCore core) except -1:
    if core._closed:
        core._raise_closed()
    if core._fork_gen != rs_fork_generation:
        core._refuse_forked()
    return 0


cdef int _closed_error(CommitLogCore core) except -1:
    if core._share != NULL and not core._share_owner:
        # a joined process's own appender, closed (a takeover, the owner gone) after its
        # caller looked at it: the caller puts another way
        raise StaleTable("this process's shared appender is closed")
    raise StoreClosedError("the store is closed")


cdef int _forked_error(CommitLogCore core) except -1:
    raise StoreClosedError(
        f"this store was opened by process {core._opener} before it forked: open it again in "
        "this process (it then joins the writing process)")


cdef object _refused(CommitLogCore core):
    core.refused_puts += 1
    return core._refusal


cdef object _not_stored(CommitLogCore core, int status, object cause, int wait, Py_ssize_t n):
    """A put that wrote nothing: raise its PutError, or (``wait`` WAIT_FUTURE) return a
    future that raises it (a list of ``n`` of them when ``n`` >= 0, for put_many)."""
    cdef PutFuture fut
    error = not_stored(PutStatus(status), cause)
    error.__cause__ = cause.with_traceback(None)
    if wait != 2:
        raise error
    fut = PutFuture.__new__(PutFuture)
    fut._core = core
    fut.target = -1
    fut._resolved = True
    fut._error = error
    return fut if n < 0 else [fut] * n


cdef int64_t _month_bounds(CommitLogCore core, int64_t now) except -1:
    start, nxt = month_bounds(now)
    core._month_start = start
    core._month_next = nxt
    return 0


cdef inline int _make_uniq(CommitLogCore core, int64_t now, uint8_t *raw) except -1:
    """UNIQ_KEY raw bytes (spec §3.2): prefix, ms since month start (u32), counter (u16)."""
    if now >= core._month_next or now < core._month_start:
        core._month_roll(now)
    cdef int n = core._uniq_prefix_len
    cdef int64_t span = now - core._month_start
    memcpy(raw, core._uniq_prefix, n)
    cdef uint32_t s = <uint32_t>(span if span > 0 else 0)
    raw[n] = s >> 24
    raw[n + 1] = (s >> 16) & 0xFF
    raw[n + 2] = (s >> 8) & 0xFF
    raw[n + 3] = s & 0xFF
    cdef uint16_t c = <uint16_t>core._uniq_counter
    core._uniq_counter += 1
    raw[n + 4] = c >> 8
    raw[n + 5] = c & 0xFF
    return n + 6


cdef inline int _prop_crc_extra(CommitLogCore core, const uint8_t *props, Py_ssize_t props_len,
                                bint have_unique_key) noexcept:
    """Bytes the §1.6 CRC32 property adds (0 unless append_prop_crc): 20, plus a 0x02 when
    the final properties do not end in one (a generated UNIQ_KEY does)."""
    if not core.append_prop_crc:
        return 0
    return PROP_CRC_LENGTH + (have_unique_key and props_len > 0 and props[props_len - 1] != 2)


cdef int64_t _append(CommitLogCore core, _Topic t, int queue_id, const uint8_t *body, int32_t body_len,
                     int32_t body_crc, const uint8_t *props, int32_t props_len,
                     object unique_key, int32_t flag, int64_t born_ts, int32_t sys_flag,
                     int32_t reconsume, int64_t prepared_offset, PutResult out) except -1:
    """Append one record (append lock held). Fills ``out``; returns the end offset."""
    cdef rs_record r
    cdef int uniq_len = 0
    cdef int32_t total_props = props_len
    cdef int64_t length, now, remaining, end
    cdef bint consumes_offset
    cdef int tx
    cdef int crc_extra = _prop_crc_extra(core, props, props_len, unique_key is not None)
    cdef int32_t at
    cdef uint8_t *rec
    if unique_key is None:
        uniq_len = core._uniq_prefix_len + 6
        total_props += UNIQ_NAME_LEN + 2 * uniq_len + 1
    total_props += crc_extra
    if total_props > RS_MAX_PROPERTIES_LENGTH:
        raise PropertiesTooLargeError(
            f"properties are {total_props} bytes encoded; the limit is {RS_MAX_PROPERTIES_LENGTH}")
    sys_flag |= core._host_sysflag
    length = rs_record_length(body_len, len(t.name), total_props, sys_flag, RS_MAGIC_V1)
    if length < 0 or length > core._max_message_size or length + RS_END_FILE_MIN_BLANK > core._file_size:
        raise MessageTooLargeError(
            "record fields out of range" if length < 0 else
            f"record of {length} bytes exceeds max_message_size {core._max_message_size}"
            if length > core._max_message_size else
            f"record of {length} bytes cannot fit a {core._file_size}-byte segment")

    now = _now_ms()
    if now < core._last_store_ts:
        now = core._last_store_ts     # store timestamps never decrease in file order
    core._last_store_ts = now
    if uniq_len:
        _make_uniq(core, now, out._uniq_raw)
        out._uniq_len = uniq_len
        if props_len:
            memcpy(core._props, props, props_len)
        _write_uniq_property(core, core._props + props_len, out._uniq_raw, uniq_len)
        props = core._props
    else:
        out._unique_key = unique_key
    if crc_extra:       # the reserved 20 bytes (and a 0x02 before them if needed)
        at = total_props - crc_extra
        if props != core._props:
            if at:
                memcpy(core._props, props, at)
            props = core._props
        if crc_extra > PROP_CRC_LENGTH:
            core._props[at] = 2
            at += 1
        memcpy(core._props + at, rs_prop_crc_reserved, PROP_CRC_LENGTH)

    while True:
        if core._base == NULL:
            core._roll_segment()
        remaining = core._file_size - core._pos
        if length + RS_END_FILE_MIN_BLANK <= remaining:
            break
        # BLANK rule (§1.4): the record does not fit with 8 bytes to spare; end the file.
        _ensure_populated(core, RS_END_FILE_MIN_BLANK)
        rs_encode_blank(core._base + core._pos, <int32_t>remaining)
        core._pos = core._file_size
        rs_flusher_publish(core._flusher, core._file_from + core._file_size)
        core._base = NULL

    _ensure_populated(core, length)
    tx = sys_flag & RS_SYSFLAG_TRANSACTION_MASK
    consumes_offset = tx != RS_TRANSACTION_PREPARED_TYPE and tx != RS_TRANSACTION_ROLLBACK_TYPE
    r.body_crc = body_crc
    r.queue_id = queue_id
    r.flag = flag
    r.queue_offset = t.next_offsets[queue_id] if consumes_offset else 0
    r.physical_offset = core._file_from + core._pos
    r.sys_flag = sys_flag
    r.born_timestamp = born_ts if born_ts > 0 else now
    memcpy(r.born_host, core._born_host_raw, 16)
    r.born_port = core._born_port
    r.store_timestamp = now
    memcpy(r.store_host, core._store_host_raw, 16)
    r.store_port = core._store_port
    r.reconsume_times = reconsume
    r.prepared_transaction_offset = prepared_offset
    r.body = body
    r.body_len = body_len
    r.topic = <const uint8_t *>PyBytes_AS_STRING(t.name)
    r.topic_len = <int32_t>PyBytes_GET_SIZE(t.name)
    r.properties = props
    r.properties_len = total_props
    rec = core._base + core._pos
    if rs_encode_record(rec, core._file_size - core._pos, &r) != length:
        raise SegmentError("internal error: record does not fit the checked space")
    if crc_extra:       # over the whole record as written, but its last 20 bytes (§1.6)
        _prop_crc_digits(rs_body_crc(rec, length - PROP_CRC_LENGTH),
                         rec + length - PROP_CRC_LENGTH + PROP_CRC_NAME_LENGTH)
    core._pos += length
    end = core._file_from + core._pos
    rs_flusher_publish(core._flusher, end)
    core._live_dirty |= (<uint64_t>1) << t.slot
    if consumes_offset:
        t.next_offsets[queue_id] += 1
        if t.committed != NULL:     # published with the end when the append lock goes
            if t.dirty_hi < 0:
                core._dirty.append(t)
                t.dirty_lo = t.dirty_hi = queue_id
            elif queue_id < t.dirty_lo:
                t.dirty_lo = queue_id
            elif queue_id > t.dirty_hi:
                t.dirty_hi = queue_id
    core.puts += 1

    out._status = PUT_OK
    out.commitlog_offset = r.physical_offset
    out.size = <int32_t>length
    out.queue_id = queue_id
    out.queue_offset = r.queue_offset
    out.store_timestamp = now
    out._host = core._store_host
    out._port = core._store_port
    return end


cdef inline void _write_uniq_property(CommitLogCore core, uint8_t *p, const uint8_t *raw, int n) noexcept:
    """The UNIQ_KEY property of raw[0:n], which starts with the core's prefix: that part's hex
    is the core's, written once at its start (a third of a put's encoding work, else)."""
    cdef int k = core._uniq_prefix_len
    memcpy(p, rs_uniq_property_name, UNIQ_NAME_LEN)
    p += UNIQ_NAME_LEN
    memcpy(p, core._uniq_prefix_hex, 2 * k)
    _hex_into(<char *>p + 2 * k, raw + k, n - k)
    p[2 * n] = 2


cdef object _put_one(CommitLogCore core, topic, body, const uint8_t *pp, Py_ssize_t plen, int queue_id,
                     int32_t flag, int64_t born_timestamp, int32_t sys_flag, int32_t reconsume_times,
                     int64_t prepared_transaction_offset, unique_key, int wait):
    """put()'s work, with the encoded properties at ``pp`` (``plen`` bytes, kept by the caller)."""
    cdef Py_buffer bview
    cdef const uint8_t *bp
    cdef Py_ssize_t blen
    cdef bint have_b = False
    cdef int32_t crc
    cdef int64_t end
    cdef _Topic t
    cdef int qid
    _check_open(core)
    if rs_serve_waiting() > 0:  # a joined writer's call waits for the GIL (serve.h)
        with nogil:
            rs_serve_yield()
    if core._refusal is not None:
        return _not_stored(core, SERVICE_NOT_AVAILABLE, _refused(core), wait, -1)
    t = _topic(core, topic)
    qid = _choose_queue(core, t, queue_id)
    if not PyBytes_CheckExact(body):
        body = contiguous(body)        # a strided view: copied (PyBUF_SIMPLE needs contiguity)
    have_b = _bytes_view(body, &bview, &bp, &blen)
    try:
        if blen > core._max_message_size or plen > RS_MAX_PROPERTIES_LENGTH:
            if plen > RS_MAX_PROPERTIES_LENGTH:
                raise PropertiesTooLargeError(
                    f"properties are {plen} bytes encoded; the limit is {RS_MAX_PROPERTIES_LENGTH}")
            raise MessageTooLargeError(
                f"body of {blen} bytes exceeds max_message_size {core._max_message_size}")
        if blen >= 65536:
            with nogil:
                crc = rs_body_crc(bp, blen)
        else:
            crc = rs_body_crc(bp, blen)
        result = PutResult.__new__(PutResult)
        _lock_append(core)
        try:
            _check_open(core)
            end = _append(core, t, qid, bp, <int32_t>blen, crc, pp, <int32_t>plen, unique_key,
                          flag, born_timestamp, sys_flag, reconsume_times,
                          prepared_transaction_offset, <PutResult>result)
        except SegmentError as exc:
            # No segment space (creation, mapping or page reservation failed): nothing of this
            # record was written. RocketMQ answers CREATE_MAPEDFILE_FAILED; so do we.
            return _not_stored(core, CREATE_MAPPED_FILE_FAILED, exc, wait, -1)
        finally:
            _unlock_append(core)
    finally:
        if have_b:
            PyBuffer_Release(&bview)
    return _finish(core, result, end, wait)


cdef object _put_inner_batch(CommitLogCore core, topic, body, bytes props_before, bytes props_after, int queue_id,
                             int count, unique_key, int64_t born_timestamp, int wait):
    """CommitLogCore.put_inner_batch."""
    cdef _Topic t
    cdef int qid
    cdef int64_t end, base
    cdef int32_t crc
    cdef bytes data, props
    _check_open(core)
    if count < 1 or count > 0x7FFF:
        raise ValueError(f"an inner batch holds 1 to 32767 messages, not {count}")
    if core._refusal is not None:
        return _not_stored(core, SERVICE_NOT_AVAILABLE, _refused(core), wait, -1)
    t = _topic(core, topic)
    qid = _choose_queue(core, t, queue_id)
    data = bytes(body)
    if PyBytes_GET_SIZE(data) > core._max_message_size:
        raise MessageTooLargeError(
            f"body of {PyBytes_GET_SIZE(data)} bytes exceeds max_message_size {core._max_message_size}")
    crc = rs_body_crc(<const uint8_t *>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
    result = PutResult.__new__(PutResult)
    _lock_append(core)
    try:
        _check_open(core)
        base = t.next_offsets[qid]
        props = props_before + str(base).encode("ascii") + props_after
        if PyBytes_GET_SIZE(props) > RS_MAX_PROPERTIES_LENGTH:
            raise PropertiesTooLargeError(
                f"properties are {PyBytes_GET_SIZE(props)} bytes encoded; the limit is "
                f"{RS_MAX_PROPERTIES_LENGTH}")
        end = _append(core, t, qid, <const uint8_t *>PyBytes_AS_STRING(data),
                      <int32_t>PyBytes_GET_SIZE(data), crc,
                      <const uint8_t *>PyBytes_AS_STRING(props), <int32_t>PyBytes_GET_SIZE(props),
                      unique_key, 0, born_timestamp, SYSFLAG_INNER_BATCH, 0, 0, <PutResult>result)
        t.next_offsets[qid] += count - 1  # (_append moved it by one; published at the release)
    except SegmentError as exc:
        return _not_stored(core, CREATE_MAPPED_FILE_FAILED, exc, wait, -1)
    finally:
        _unlock_append(core)
    return _finish(core, result, end, wait)
