# Many records under one lock: put_batch, put_many, a timer pass's copies (put_copies) and
# a batch of plain Messages, each validated whole before its first byte.
# Part of rocketstore.log._store: included by cext/_store.pyx, whose imports and
# constants it uses.

cdef enum:
    _COPY_ROW_HEAD = 40     # the head of a row of the codec's timer_copy_rows (put_copies)


cdef struct _CopyIn:
    # one copy put_copies appends: its fields, checked, and its body and properties
    const uint8_t *body
    const uint8_t *props
    int32_t body_len, props_len, crc, flag, sys_flag, reconsume, qid, topic
    int64_t born
    bint has_key


cdef inline int32_t _rle32(const uint8_t *p) noexcept:
    return <int32_t>(<uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24))


cdef struct _PlainRow:
    const uint8_t *body
    int64_t born
    int64_t props_at
    int32_t body_len
    int32_t props_len
    int32_t queue_id
    int32_t flag
    int32_t crc


cdef object _put_batch(CommitLogCore core, topic, bodies, lengths, properties, int queue_id, int32_t flag,
                       int64_t born_timestamp, int32_t sys_flag, int wait):
    """CommitLogCore.put_batch."""
    cdef _Topic t
    cdef int qid
    cdef Py_ssize_t n, i
    cdef Py_buffer whole, pview
    cdef bint have_whole = False, have_p = False
    cdef const uint8_t *pp = NULL
    cdef Py_ssize_t plen = 0
    cdef int64_t[::1] lens_view
    cdef int64_t[::1] starts
    cdef int64_t[::1] c_offsets, c_qoffsets, c_times
    cdef int32_t[::1] c_sizes
    cdef int32_t[::1] crcs
    cdef uint8_t[:, ::1] uniq
    cdef list copies = None
    cdef PutResult scratch
    cdef int64_t end = 0, total = 0
    cdef Py_buffer *bufs = NULL
    cdef Py_ssize_t nbufs = 0
    cdef int uniq_len = core._uniq_prefix_len + 6
    cdef const uint8_t *bp
    cdef int64_t blen, length
    cdef int64_t[::1] rec_lens
    _check_open(core)
    if rs_serve_waiting() > 0:  # a joined writer's call waits for the GIL (serve.h)
        with nogil:
            rs_serve_yield()
    if core._refusal is not None:
        return _not_stored(core, SERVICE_NOT_AVAILABLE, _refused(core), wait, -1)
    t = _topic(core, topic)
    if sys_flag & RS_SYSFLAG_TRANSACTION_MASK:
        raise InvalidMessageError("a batch may not be transactional (spec §1.7)")

    if properties is not None:
        PyObject_GetBuffer(properties, &pview, PyBUF_SIMPLE)
        have_p = True
        pp = <const uint8_t *>pview.buf
        plen = pview.len
    try:
        if plen > RS_MAX_PROPERTIES_LENGTH:
            raise PropertiesTooLargeError(
                f"properties are {plen} bytes encoded; the limit is {RS_MAX_PROPERTIES_LENGTH}")
        if lengths is not None:
            lens_arr = batch_lengths(lengths)
            n = lens_arr.shape[0]
            lens_view = lens_arr
            bodies = contiguous(bodies, "bodies")
            PyObject_GetBuffer(bodies, &whole, PyBUF_SIMPLE)
            have_whole = True
            starts_arr = np.empty(n, dtype=np.int64)
            starts = starts_arr
            for i in range(n):
                if lens_view[i] < 0:
                    raise InvalidMessageError(f"lengths[{i}] is negative")
                starts[i] = total
                total += lens_view[i]
            if total != whole.len:
                raise InvalidMessageError(
                    f"lengths sum to {total} but the bodies buffer holds {whole.len} bytes")
        else:
            if not isinstance(bodies, (list, tuple)):
                bodies = list(bodies)
            n = len(bodies)
            bufs = <Py_buffer *>malloc(sizeof(Py_buffer) * max(n, 1))
            if bufs == NULL:
                raise MemoryError()
            lens_arr = np.empty(n, dtype=np.int64)
            lens_view = lens_arr
            for i in range(n):
                item = bodies[i]
                if not PyBytes_CheckExact(item):
                    copied = contiguous(item, "an item of bodies")
                    if copied is not item:     # kept alive with the batch's buffers
                        copies = [] if copies is None else copies
                        copies.append(copied)
                        item = copied
                PyObject_GetBuffer(item, &bufs[i], PyBUF_SIMPLE)
                nbufs += 1
                lens_view[i] = bufs[i].len

        # Validate everything before the first byte is written.
        if plen + 9 + 2 * uniq_len + 1 + _prop_crc_extra(core, NULL, 0, False) > RS_MAX_PROPERTIES_LENGTH:
            raise PropertiesTooLargeError("properties plus UNIQ_KEY exceed 32767 bytes")
        rec_lens_arr = np.empty(n, dtype=np.int64)
        rec_lens = rec_lens_arr
        for i in range(n):
            blen = lens_view[i]
            if blen > core._max_message_size:
                raise MessageTooLargeError(
                    f"bodies[{i}] of {blen} bytes exceeds max_message_size {core._max_message_size}")
            length = rs_record_length(
                <int32_t>blen, len(t.name),
                <int32_t>(plen + 9 + 2 * uniq_len + 1 + _prop_crc_extra(core, NULL, 0, False)),
                sys_flag | core._host_sysflag, RS_MAGIC_V1)
            if length < 0 or length > core._max_message_size or length + RS_END_FILE_MIN_BLANK > core._file_size:
                raise MessageTooLargeError(
                    f"record {i} exceeds max_message_size {core._max_message_size}"
                    if length <= core._max_message_size else
                    f"record {i} of {length} bytes cannot fit a {core._file_size}-byte segment")
            rec_lens[i] = length
        if plen + 9 + 2 * uniq_len + 1 + _prop_crc_extra(core, NULL, 0, False) > RS_MAX_PROPERTIES_LENGTH:
            raise PropertiesTooLargeError("properties plus UNIQ_KEY exceed 32767 bytes")
        qid = _choose_queue(core, t, queue_id)

        crcs_arr = np.empty(n, dtype=np.int32)
        crcs = crcs_arr
        for i in range(n):
            bp = <const uint8_t *>whole.buf + starts[i] if have_whole else <const uint8_t *>bufs[i].buf
            crcs[i] = rs_body_crc(bp, lens_view[i])

        res = BatchPutResult.__new__(BatchPutResult)
        offsets_arr = np.empty(n, dtype=np.int64)
        qoff_arr = np.empty(n, dtype=np.int64)
        times_arr = np.empty(n, dtype=np.int64)
        sizes_arr = np.empty(n, dtype=np.int32)
        uniq_arr = np.empty((n, uniq_len), dtype=np.uint8)
        c_offsets = offsets_arr
        c_qoffsets = qoff_arr
        c_times = times_arr
        c_sizes = sizes_arr
        if n:
            uniq = uniq_arr
        scratch = PutResult.__new__(PutResult)
        _lock_append(core)
        try:
            _check_open(core)
            refused = _reserve_or_refuse(core, rec_lens, wait, -1)
            if refused is not None:
                return refused
            (<BatchPutResult>res).first_queue_offset = t.next_offsets[qid]
            for i in range(n):
                bp = <const uint8_t *>whole.buf + starts[i] if have_whole else <const uint8_t *>bufs[i].buf
                end = _append(core, t, qid, bp, <int32_t>lens_view[i], crcs[i], pp, <int32_t>plen,
                              None, flag, born_timestamp, sys_flag, 0, 0, scratch)
                c_offsets[i] = scratch.commitlog_offset
                c_sizes[i] = scratch.size
                c_qoffsets[i] = scratch.queue_offset
                c_times[i] = scratch.store_timestamp
                memcpy(&uniq[i, 0], scratch._uniq_raw, uniq_len)
        finally:
            _unlock_append(core)
    finally:
        if have_p:
            PyBuffer_Release(&pview)
        if have_whole:
            PyBuffer_Release(&whole)
        for i in range(nbufs):
            PyBuffer_Release(&bufs[i])
        free(bufs)

    cdef BatchPutResult br = <BatchPutResult>res
    br._status = PUT_OK
    br.topic = topic
    br.queue_id = qid
    br.commitlog_offsets = offsets_arr
    br.sizes = sizes_arr
    br.queue_offsets = qoff_arr
    br.store_timestamps = times_arr
    br._uniq_raw = uniq_arr
    br._host = core._store_host
    br._port = core._store_port
    if n == 0:
        return br
    return _finish(core, br, end, wait)


cdef object _put_many(CommitLogCore core, list items, int wait):
    """CommitLogCore.put_many."""
    cdef Py_ssize_t n = len(items), i
    cdef list topics = [], qids = [], crcs = [], results = []
    cdef _Topic t
    cdef int64_t end = 0
    cdef bytes body, props
    cdef int64_t[::1] rec_lens
    _check_open(core)
    if rs_serve_waiting() > 0:  # a joined writer's call waits for the GIL (serve.h)
        with nogil:
            rs_serve_yield()
    if core._refusal is not None:
        return _not_stored(core, SERVICE_NOT_AVAILABLE, _refused(core), wait, n)
    rec_lens_arr = np.empty(n, dtype=np.int64)
    rec_lens = rec_lens_arr
    for i in range(n):
        item = items[i]
        topic, body, props, queue_id, flag, born_ts, sys_flag, reconsume, unique_key = item
        t = _topic(core, topic)
        topics.append(t)
        qids.append(_choose_queue(core, t, queue_id))
        if len(body) > core._max_message_size:
            raise MessageTooLargeError(
                f"message {i}: body of {len(body)} bytes exceeds max_message_size {core._max_message_size}")
        extra = 0 if unique_key is not None else 9 + 2 * (core._uniq_prefix_len + 6) + 1
        extra += _prop_crc_extra(core, <const uint8_t *>PyBytes_AS_STRING(props), len(props),
                                 unique_key is not None)
        if len(props) + extra > RS_MAX_PROPERTIES_LENGTH:
            raise PropertiesTooLargeError(f"message {i}: properties exceed 32767 bytes")
        length = rs_record_length(len(body), len(t.name), len(props) + extra,
                                  sys_flag | core._host_sysflag, RS_MAGIC_V1)
        if length < 0 or length > core._max_message_size:
            raise MessageTooLargeError(f"message {i}: record exceeds max_message_size {core._max_message_size}")
        if length + RS_END_FILE_MIN_BLANK > core._file_size:
            raise MessageTooLargeError(
                f"message {i}: record of {length} bytes cannot fit a {core._file_size}-byte segment")
        rec_lens[i] = length
        crcs.append(rs_body_crc(<const uint8_t *>PyBytes_AS_STRING(body), len(body)))
    _check_open(core)
    _lock_append(core)
    try:
        _check_open(core)
        refused = _reserve_or_refuse(core, rec_lens, wait, n)
        if refused is not None:
            return refused
        for i in range(n):
            topic, body, props, queue_id, flag, born_ts, sys_flag, reconsume, unique_key = items[i]
            r = PutResult.__new__(PutResult)
            end = _append(core, <_Topic>topics[i], qids[i], <const uint8_t *>PyBytes_AS_STRING(body),
                          len(body), crcs[i], <const uint8_t *>PyBytes_AS_STRING(props), len(props),
                          unique_key, flag, born_ts, sys_flag, reconsume, 0, <PutResult>r)
            results.append(r)
    finally:
        _unlock_append(core)
    return _finish_many(core, results, end, wait)


cdef object _put_copy_rows(CommitLogCore core, rows, list topics, list items):
    """CommitLogCore.put_copies."""
    cdef Py_buffer view
    _check_open(core)
    if rs_serve_waiting() > 0:  # a joined writer's call waits for the GIL (serve.h)
        with nogil:
            rs_serve_yield()
    if core._refusal is not None:
        return _not_stored(core, SERVICE_NOT_AVAILABLE, _refused(core), 0, -1)
    PyObject_GetBuffer(rows, &view, PyBUF_SIMPLE)
    try:
        return _put_copies(core, <const uint8_t *>view.buf, view.len, topics, items)
    finally:
        PyBuffer_Release(&view)


cdef object _put_copies(CommitLogCore core, const uint8_t *buf, Py_ssize_t size, list topics, list items):
    cdef Py_ssize_t at = 0, n = 0, m = 0, i, used = 0
    cdef int64_t body_len, props_len, length, end = 0
    cdef int32_t ti
    cdef int extra
    cdef _CopyIn *ins = NULL
    cdef _CopyIn *c
    cdef int64_t[::1] rec_lens
    cdef list tops, keep = []
    cdef _Topic t
    cdef bytes body, props
    cdef PutResult scratch
    while at < size:    # the rows' layout, checked before any is read
        if size - at < _COPY_ROW_HEAD:
            raise ValueError("rows end in a torn row")
        body_len = _rle32(buf + at + 20)
        props_len = _rle32(buf + at + 24)
        if body_len < 0 or props_len < 0 or body_len + props_len > size - at - _COPY_ROW_HEAD:
            raise ValueError(f"row {n}: its lengths overrun the rows")
        at += _COPY_ROW_HEAD + body_len + props_len
        n += 1
    tops = [_topic(core, name) for name in topics]
    ins = <_CopyIn *>PyMem_Malloc(max(n, 1) * sizeof(_CopyIn))
    if ins == NULL:
        raise MemoryError()
    try:
        rec_lens_arr = np.empty(n, dtype=np.int64)
        rec_lens = rec_lens_arr
        at = 0
        for i in range(n):
            c = &ins[m]
            ti = _rle32(buf + at)
            body_len = _rle32(buf + at + 20)
            props_len = _rle32(buf + at + 24)
            if ti == -1:    # the careful path's copy, or none
                if used == len(items):
                    raise ValueError("fewer items than rows that stand for one")
                item = items[used]
                used += 1
                at += _COPY_ROW_HEAD + body_len + props_len
                if item is None:
                    continue
                topic, body, props, queue_id, flag, born_ts, sys_flag, reconsume, unique_key = item
                keep.append(body)
                keep.append(props)
                c.topic = len(tops)
                tops.append(_topic(core, topic))
                c.qid, c.flag, c.born, c.sys_flag, c.reconsume = queue_id, flag, born_ts, sys_flag, reconsume
                c.body = <const uint8_t *>PyBytes_AS_STRING(body)
                c.body_len = <int32_t>min(PyBytes_GET_SIZE(body), INT32_MAX)
                c.props = <const uint8_t *>PyBytes_AS_STRING(props)
                c.props_len = <int32_t>min(PyBytes_GET_SIZE(props), INT32_MAX)
                c.has_key = unique_key is not None
            else:
                if ti < 0 or ti >= len(topics):
                    raise ValueError(f"row {i}: topic {ti} is not one of the {len(topics)} topics")
                c.topic = ti
                c.qid = _rle32(buf + at + 4)
                c.flag = _rle32(buf + at + 8)
                c.sys_flag = _rle32(buf + at + 12)
                c.reconsume = _rle32(buf + at + 16)
                c.has_key = _rle32(buf + at + 28) != 0
                c.born = <int64_t>((<uint64_t><uint32_t>_rle32(buf + at + 32))
                                   | (<uint64_t><uint32_t>_rle32(buf + at + 36) << 32))
                c.body = buf + at + _COPY_ROW_HEAD
                c.body_len = <int32_t>body_len
                c.props = c.body + body_len
                c.props_len = <int32_t>props_len
                at += _COPY_ROW_HEAD + body_len + props_len
            # put_many's checks
            t = <_Topic>tops[c.topic]
            c.qid = _choose_queue(core, t, c.qid)
            if c.body_len > core._max_message_size:
                raise MessageTooLargeError(
                    f"copy {i}: body of {c.body_len} bytes exceeds max_message_size {core._max_message_size}")
            extra = 0 if c.has_key else 9 + 2 * (core._uniq_prefix_len + 6) + 1
            extra += _prop_crc_extra(core, c.props, c.props_len, c.has_key)
            if c.props_len + extra > RS_MAX_PROPERTIES_LENGTH:
                raise PropertiesTooLargeError(f"copy {i}: properties exceed 32767 bytes")
            length = rs_record_length(c.body_len, len(t.name), c.props_len + extra,
                                      c.sys_flag | core._host_sysflag, RS_MAGIC_V1)
            if length < 0 or length > core._max_message_size:
                raise MessageTooLargeError(f"copy {i}: record exceeds max_message_size {core._max_message_size}")
            if length + RS_END_FILE_MIN_BLANK > core._file_size:
                raise MessageTooLargeError(
                    f"copy {i}: record of {length} bytes cannot fit a {core._file_size}-byte segment")
            rec_lens[m] = length
            c.crc = rs_body_crc(c.body, c.body_len)
            m += 1
        if used != len(items):
            raise ValueError("more items than rows that stand for one")
        scratch = PutResult.__new__(PutResult)
        _check_open(core)
        _lock_append(core)
        try:
            _check_open(core)
            refused = _reserve_or_refuse(core, rec_lens[:m], 0, -1)
            if refused is not None:
                return refused
            for i in range(m):
                c = &ins[i]
                end = _append(core, <_Topic>tops[c.topic], c.qid, c.body, c.body_len, c.crc, c.props,
                              c.props_len, True if c.has_key else None, c.flag, c.born, c.sys_flag,
                              c.reconsume, 0, scratch)
        finally:
            _unlock_append(core)
    finally:
        PyMem_Free(ins)
    return m, end


cdef object _put_plain_messages(CommitLogCore core, list messages, user_topics, int wait):
    """CommitLogCore.put_plain_messages."""
    cdef Py_ssize_t n = len(messages), i, at = 0, cap = 0, plen
    cdef _PlainRow *rows = NULL
    cdef uint8_t *props = NULL
    cdef uint8_t *grown
    cdef int64_t x = 0
    cdef int64_t end = 0, length
    cdef int64_t[::1] rec_lens
    cdef int extra
    cdef list keep, topics, results
    cdef _Topic t
    cdef PutResult r
    cdef _PlainRow *row
    cdef Message cm
    if n == 0:
        return None
    _check_open(core)
    if rs_serve_waiting() > 0:  # a joined writer's call waits for the GIL (serve.h)
        with nogil:
            rs_serve_yield()
    if core._refusal is not None:
        return None
    rows = <_PlainRow *>PyMem_Malloc(n * sizeof(_PlainRow))
    if rows == NULL:
        raise MemoryError()
    keep = [None] * (2 * n)     # every topic and body read, alive until the records are written
    try:
        # 1. every message plain? Its fields read, checked, its properties encoded into one
        #    buffer (nothing here lets another thread run: what is read is what gets written)
        for i in range(n):
            m = messages[i]
            row = &rows[i]
            if type(m) is Message and (<Message>m)._unset == 0:
                cm = <Message>m
                topic, body, props_of, tags, keys = cm._topic, cm._body, cm._properties, cm._tags, cm._keys
                queue_id, flag, born = cm._queue_id, cm._flag, cm._born_timestamp
                sys_flag, reconsume = cm._sys_flag, cm._reconsume_times
            elif type(m) is _PLAIN_MESSAGE:
                try:
                    topic, body, props_of, tags, keys = m.topic, m.body, m.properties, m.tags, m.keys
                    queue_id, flag, born = m.queue_id, m.flag, m.born_timestamp
                    sys_flag, reconsume = m.sys_flag, m.reconsume_times
                except AttributeError:      # a field left unset
                    return None
            else:       # (a subclass may read its fields its own way)
                return None
            if not PyUnicode_CheckExact(topic) or not PySet_Contains(user_topics, topic):
                return None
            if not PyBytes_CheckExact(body) or PyBytes_GET_SIZE(body) > core._max_message_size:
                return None
            keep[2 * i] = topic
            keep[2 * i + 1] = body
            row.body = <const uint8_t *>PyBytes_AS_STRING(body)
            row.body_len = <int32_t>PyBytes_GET_SIZE(body)
            if not _int_in(queue_id, -1, INT32_MAX, &x):
                return None
            row.queue_id = <int32_t>x
            if not _int_in(flag, INT32_MIN, INT32_MAX, &x):
                return None
            row.flag = <int32_t>x
            if not _int_in(born, INT64_MIN, INT64_MAX, &row.born):
                return None
            if not _int_in(sys_flag, 0, 0, &x) or not _int_in(reconsume, 0, 0, &x):
                return None
            plen = _props_length(tags, keys, props_of)
            if plen < 0:
                return None
            if at + plen > cap:
                cap = max(2 * cap, at + plen, 64 * n)
                grown = <uint8_t *>PyMem_Realloc(props, cap)
                if grown == NULL:
                    raise MemoryError()
                props = grown
            row.props_at = at
            row.props_len = <int32_t>_props_write(tags, keys, props_of, props + at)
            at += plen
        # 2. their topics, queues and record lengths, in put_many's order and with its errors
        rec_lens_arr = np.empty(n, dtype=np.int64)
        rec_lens = rec_lens_arr
        topics = [None] * n
        extra = UNIQ_NAME_LEN + 2 * (core._uniq_prefix_len + 6) + 1   # the UNIQ_KEY generated
        for i in range(n):
            row = &rows[i]
            t = _topic(core, keep[2 * i])
            topics[i] = t
            row.queue_id = _choose_queue(core, t, row.queue_id)
            plen = row.props_len + extra + _prop_crc_extra(core, props + row.props_at, row.props_len, False)
            length = rs_record_length(row.body_len, len(t.name), <int32_t>plen,
                                      core._host_sysflag, RS_MAGIC_V1)
            if (plen > RS_MAX_PROPERTIES_LENGTH or length < 0 or length > core._max_message_size
                    or length + RS_END_FILE_MIN_BLANK > core._file_size):
                return None
            rec_lens[i] = length
            row.crc = rs_body_crc(row.body, row.body_len)
        # 3. stored whole or not at all, as put_many
        results = [None] * n
        _check_open(core)
        _lock_append(core)
        try:
            _check_open(core)
            refused = _reserve_or_refuse(core, rec_lens, wait, n)
            if refused is not None:
                return refused
            for i in range(n):
                row = &rows[i]
                r = PutResult.__new__(PutResult)
                end = _append(core, <_Topic>topics[i], row.queue_id, row.body, row.body_len, row.crc,
                              props + row.props_at, row.props_len, None, row.flag, row.born,
                              0, 0, 0, r)
                results[i] = r
        finally:
            _unlock_append(core)
    finally:
        PyMem_Free(rows)
        PyMem_Free(props)
    return _finish_many(core, results, end, wait)
