# Lookups in one call: a message by queue position, the messages an index lookup found
# Part of rocketstore.format._codec: included by cext/_codec.pyx, whose imports and
# constants it uses.


# ---- Small helpers of the point reads: a power of two's shift, a record's prefetch ----

cdef extern from *:
    """
    #define rs_ctz64(x) ((int)__builtin_ctzll(x))
    """
    int rs_ctz64(uint64_t x) noexcept nogil   # x != 0


cdef extern from *:
    void __builtin_prefetch(const void *addr) noexcept nogil


cdef enum:
    _RECORD_GUESS = 320   # a record's length before its header is read (128-byte body, a key: ~300)


cdef inline void _prefetch_record(const uint8_t *base, int64_t pos, int64_t size, int64_t readable) noexcept:
    """Start loading every cache line of base[pos:pos + size] (within ``readable``) at once: a
    random read's record misses the caches, and the decoder reads its lines one after another
    (header, body for the CRC, topic and properties), each a miss of its own otherwise."""
    cdef int64_t line, end = pos + size
    if end > readable:
        end = readable
    line = pos & ~(<int64_t>63)
    while line < end:
        __builtin_prefetch(base + line)
        line += 64


@cython.cdivision(True)   # offset - first >= 0 and size > 0: C's division is the floor
cdef MappedState _segment_of(list files, int64_t offset, int64_t *start):
    """The file of ``files`` (a SegmentTable's: of one size, ascending, without gaps) that
    holds ``offset``, or None; ``start`` gets where it starts."""
    cdef Py_ssize_t n
    cdef int64_t first, size, k
    cdef MappedState head, mf
    if files is None:
        return None
    n = len(files)
    if n == 0:
        return None
    o = files[0]
    if not _is_mapped(o):
        return None
    head = <MappedState>o
    first = head.file_from_offset
    size = head.file_size
    if size <= 0 or offset < first:
        return None
    if size & (size - 1) == 0:   # a power of two (a CommitLog segment): a shift, not a division
        k = (offset - first) >> rs_ctz64(<uint64_t>size)
    else:
        k = (offset - first) // size
    if k >= n:
        return None
    o = files[k]
    if not _is_mapped(o):
        return None
    mf = <MappedState>o
    start[0] = first + k * size
    if mf.file_from_offset != start[0] or mf.file_size != size:   # not one run of equal files
        return None
    return mf


cdef inline list _files_of(object segments):
    """The files of ``segments`` (a SegmentTable), or None."""
    if _is_segments(segments):
        return (<SegmentTable>segments).files
    return None


cdef object _utf8_holder(str text):
    """What holds the UTF-8 bytes (surrogateescape) of ``text``: ``text`` itself when its own
    cached UTF-8 is them (no escapes), else their encoding; None when it does not encode (such
    text is no record's). :func:`_utf8_of` gives the bytes."""
    try:
        PyUnicode_AsUTF8AndSize(text, NULL)
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return None


cdef const uint8_t *_utf8_of(object holder, Py_ssize_t *size) except NULL:
    if type(holder) is bytes:
        size[0] = PyBytes_GET_SIZE(holder)
        return <const uint8_t *>PyBytes_AS_STRING(holder)
    return <const uint8_t *>PyUnicode_AsUTF8AndSize(holder, size)


cdef int64_t _readable(MappedState mf, int64_t start, object core) except -1:
    """How much of segment ``mf`` (starting at ``start``) holds complete records (see the pure
    twin)."""
    cdef int64_t end
    if core is None:
        end = mf.wrote_position
    else:
        end = <int64_t>core.wrote_offset - start
    return 0 if end < 0 else (mf.file_size if end > mf.file_size else end)


cdef bint _mapped(MappedState mf, int64_t readable, Py_buffer *view) except -1:
    """Export ``mf``'s map into ``view`` (True), or False once it is closed or shorter than
    ``readable``; the caller releases a True export."""
    mm = mf.mm
    if mm is None:
        return False
    try:
        PyObject_GetBuffer(mm, view, PyBUF_SIMPLE)
    except ValueError:   # closed by another thread since it was read
        return False
    if view.len < readable:
        PyBuffer_Release(view)
        return False
    return True


cpdef object queue_message(queues, topic, queue_id, queue_offset, segments, core):
    """The message at ``queue_offset`` of (topic, queue_id), read and checked in one call (see the
    pure twin, rocketstore.format._lookups_py.queue_message); None: the careful path decides."""
    cdef Py_buffer view
    cdef const uint8_t *u
    cdef const uint8_t *t
    cdef int64_t qo = 0, qid = 0, start = 0, pos = 0, offset, size, readable
    cdef Py_ssize_t t_len = 0
    cdef int64_t lowest = 0, below = 0
    cdef MappedState mf, seg
    if (type(topic) is not str or not _plain_int(queue_id, INT32_MIN, &qid) or qid > INT32_MAX
            or not _plain_int(queue_offset, 0, &qo) or qo > INT64_MAX // _CQ_UNIT):
        return None
    found = _queue_of(queues, topic, queue_id, qid)
    if found is None:
        return None
    if not _is_queue(found):   # a read-only store's TailQueue: units on disk, then in memory
        if (not hasattr(found, "_tail") or not _plain_int(found._min, 0, &lowest)
                or not _plain_int(found._start, 0, &below)):
            return None
        found = found.disk
        if not _is_queue(found) or not lowest <= qo < below or (<QueueState>found).holes:
            return None   # not on disk: the careful path reads the memory tail
    mf = _unit_file(<QueueState>found, qo, 1, &pos)
    if mf is None:
        return None
    if not _mapped(mf, pos + _CQ_UNIT, &view):
        return None
    u = <const uint8_t *>view.buf + pos
    offset = _be64(u)
    size = _be32(u + 8)
    PyBuffer_Release(&view)
    if offset < 0 or size <= 0 or (offset == 0 and size == _PLACEHOLDER_SIZE):
        return None
    seg = _segment_of(_files_of(segments), offset, &start)
    if seg is None:
        return None
    pos = offset - start
    readable = _readable(seg, start, core)
    if pos >= readable:
        return None
    keep = _utf8_holder(topic)
    if keep is None or not _mapped(seg, readable, &view):
        return None
    t = _utf8_of(keep, &t_len)
    _prefetch_record(<const uint8_t *>view.buf, pos, size, readable)
    try:
        return _unit_message(<const uint8_t *>view.buf, readable, None, pos, offset, size, qo, t, t_len,
                             <int32_t>qid, None)
    finally:
        PyBuffer_Release(&view)


cdef object _queue_run(object queues, str topic, object queue_id, int64_t qid, int64_t offset, int64_t max_msgs):
    """(units as bytes, min_offset, max_offset) for queue_messages, or None (see the pure twin)."""
    cdef Py_buffer view
    cdef int64_t lo = 0, hi = 0, n, at, tail_start = 0
    cq = _queue_of(queues, topic, queue_id, qid)
    if cq is None:
        return None
    if _is_queue(cq):
        if not _queue_bounds(<QueueState>cq, &lo, &hi):
            return None
    elif not _plain_int(cq.min_offset, 0, &lo) or not _plain_int(cq.max_offset, 0, &hi):
        return None
    if not lo <= offset < hi:
        return None   # a bound status: the careful path says which
    n = hi - offset if hi - offset < max_msgs else max_msgs
    if not _is_queue(cq):   # a read-only store's TailQueue: units on disk, then in memory
        if not hasattr(cq, "_tail") or not _plain_int(cq._start, 0, &tail_start):
            return None
        if offset < tail_start:
            disk = cq.disk
            if not _is_queue(disk) or (<QueueState>disk).holes or offset + n > tail_start:
                return None   # no disk queue, or a pull from disk into memory: the careful path
            return _disk_run(<QueueState>disk, offset, n, lo, hi)
        tail = cq._tail
        if not isinstance(tail, _np.ndarray) or not tail.flags.c_contiguous or tail.itemsize != _CQ_UNIT:
            return None
        PyObject_GetBuffer(tail, &view, PyBUF_SIMPLE)
        try:
            at = (offset - tail_start) * _CQ_UNIT
            if at < 0 or at + n * _CQ_UNIT > view.len:
                return None
            units = PyBytes_FromStringAndSize(<const char *>view.buf + at, n * _CQ_UNIT)
        finally:
            PyBuffer_Release(&view)
        return units, lo, hi
    return _disk_run(<QueueState>cq, offset, n, lo, hi)


cdef bint _queue_bounds(QueueState cq, int64_t *lo, int64_t *hi) except -1:
    """ConsumeQueue ``cq``'s ``min_offset`` and ``max_offset`` (its properties' arithmetic on the
    fields it extends: ``_min_logic``, and the end of what its last file holds) into ``lo`` and
    ``hi``, read here rather than through two Python properties; False when they are not plain
    (no file table, a file that is not a mapped one, a negative position)."""
    cdef list files
    cdef MappedState last
    cdef int64_t end = 0
    if cq._files is None or cq._min_logic < 0:
        return False
    files = cq._files.files
    if files is None:
        return False
    if len(files):
        o = files[len(files) - 1]
        if not _is_mapped(o):
            return False
        last = <MappedState>o
        end = last.file_from_offset + last.wrote_position
        if end < 0 or last.file_from_offset < 0 or last.wrote_position < 0:
            return False
    lo[0] = cq._min_logic // _CQ_UNIT
    hi[0] = end // _CQ_UNIT
    return True


cdef object _queue_of(object queues, str topic, object queue_id, int64_t qid):
    """The queue (topic, queue_id) of a store's QueueTable ``queues`` (a ConsumeQueueStore or a
    TailQueueStore), or None: no such queue, or one with holes (the careful path rebuilds it
    first). ``qid``: ``queue_id``, a plain int."""
    if not _is_table(queues):
        return None
    cq = (<QueueTable>queues).find(topic, queue_id, qid)
    if cq is None:
        return None
    if _is_queue(cq):
        if (<QueueState>cq).holes:
            return None
    elif cq.holes:
        return None
    return cq


cdef MappedState _unit_file(QueueState cq, int64_t offset, int64_t n, int64_t *pos):
    """The file of ConsumeQueue ``cq`` that holds the ``n`` written units from queue ``offset``
    (``pos``: where the first starts in it), or None: before the queue's start, not one file,
    not all written yet (a pull that would go on in the next file is the careful path's)."""
    cdef int64_t start = 0, byte = offset * _CQ_UNIT
    cdef MappedState mf
    if byte < cq._min_logic or cq._files is None:
        return None
    mf = _segment_of(cq._files.files, byte, &start)
    if mf is None:
        return None
    pos[0] = byte - start
    if (mf.wrote_position - pos[0]) // _CQ_UNIT < n:
        return None
    return mf


cdef object _disk_run(QueueState cq, int64_t offset, int64_t n, object lo, object hi):
    """_queue_run's units read from a ConsumeQueue's file, or None."""
    cdef Py_buffer view
    cdef int64_t pos = 0
    cdef MappedState mf
    mf = _unit_file(cq, offset, n, &pos)
    if mf is None:
        return None
    if not _mapped(mf, pos + n * _CQ_UNIT, &view):
        return None
    try:
        units = PyBytes_FromStringAndSize(<const char *>view.buf + pos, n * _CQ_UNIT)
    finally:
        PyBuffer_Release(&view)
    return units, lo, hi


def queue_messages(queues, topic, queue_id, offset, max_msgs, segments, core):
    """A pull of every message from ``offset`` of (topic, queue_id), up to ``max_msgs``, in one
    call (see the pure twin, rocketstore.format._lookups_py.queue_messages); None: the careful path
    decides."""
    cdef Py_buffer view
    cdef const uint8_t *u
    cdef const uint8_t *t
    cdef int64_t qo = 0, qid = 0, want = 0, start = 0, seg_start = 0, seg_end = 0, readable = 0
    cdef int64_t at, size, i, n
    cdef Py_ssize_t t_len = 0
    cdef bint mapped = False
    cdef list messages = []
    cdef MappedState seg
    if (type(topic) is not str or not _plain_int(queue_id, INT32_MIN, &qid) or qid > INT32_MAX
            or not _plain_int(offset, 0, &qo) or qo > INT64_MAX // _CQ_UNIT
            or not _plain_int(max_msgs, 1, &want)):
        return None
    run = _queue_run(queues, topic, queue_id, qid, qo, want)
    if run is None:
        return None
    units, lo, hi = run
    keep = _utf8_holder(topic)
    if keep is None:
        return None
    t = _utf8_of(keep, &t_len)
    n = PyBytes_GET_SIZE(units) // _CQ_UNIT
    try:
        for i in range(n):
            u = <const uint8_t *>PyBytes_AS_STRING(units) + i * _CQ_UNIT
            at = _be64(u)
            size = _be32(u + 8)
            if at < 0 or size <= 0 or (at == 0 and size == _PLACEHOLDER_SIZE):
                return None
            if not mapped or at < seg_start or at >= seg_end:
                if mapped:
                    PyBuffer_Release(&view)
                    mapped = False
                seg = _segment_of(_files_of(segments), at, &start)
                if seg is None:
                    return None
                readable = _readable(seg, start, core)
                if not _mapped(seg, readable, &view):
                    return None
                mapped = True
                seg_start, seg_end = start, start + seg.file_size
            m = _unit_message(<const uint8_t *>view.buf, readable, None, at - seg_start, at, size, qo + i,
                              t, t_len, <int32_t>qid, None)
            if m is None:
                return None
            messages.append(m)
    finally:
        if mapped:
            PyBuffer_Release(&view)
    return messages, units, lo, hi


cdef object _record_at(object segments, object core, int64_t offset):
    """The message of the whole, CRC-valid record starting at CommitLog ``offset``, or None."""
    cdef Py_buffer view
    cdef rs_record rec
    cdef int64_t start = 0, pos, readable, rc
    cdef MappedState seg
    seg = _segment_of(_files_of(segments), offset, &start)
    if seg is None:
        return None
    pos = offset - start
    readable = _readable(seg, start, core)
    if pos >= readable or not _mapped(seg, readable, &view):
        return None
    _prefetch_record(<const uint8_t *>view.buf, pos, _RECORD_GUESS, readable)
    try:
        rc = rs_decode_record(<const uint8_t *>view.buf + pos, readable - pos, &rec, 1)
        if rc <= 0 or rec.physical_offset != offset:
            return None
        return _message(None, <const uint8_t *>view.buf, pos, &rec)
    finally:
        PyBuffer_Release(&view)


cpdef object record_at(segments, core, offset):
    """The message at CommitLog ``offset`` in one call (see the pure twin,
    rocketstore.format._lookups_py.record_at); None: the careful path decides."""
    cdef int64_t at = 0
    if not _plain_int(offset, 0, &at):
        return None
    return _record_at(segments, core, at)


cpdef object message_by_id(segments, core, msg_id):
    """The message whose offsetMsgId is ``msg_id``, in one call (see the pure twin,
    rocketstore.format._lookups_py.message_by_id); None: the careful path decides."""
    cdef uint64_t offset = 0
    cdef uint8_t raw[28]          # host, port, offset: what the id's hex digits spell
    cdef Py_ssize_t n, i
    cdef int hi, lo
    cdef int32_t host_len
    cdef MessageExt m
    if type(msg_id) is not str or len(<str>msg_id) not in (32, 56):
        return None
    n = len(<str>msg_id)
    for i in range(n // 2):
        hi = _hex_value((<str>msg_id)[2 * i])
        lo = _hex_value((<str>msg_id)[2 * i + 1])
        if hi < 0 or lo < 0:
            return None
        raw[i] = <uint8_t>(hi << 4 | lo)
    for i in range(n // 2 - 8, n // 2):   # the last 8 bytes: the offset
        offset = (offset << 8) | raw[i]
    if offset > <uint64_t>INT64_MAX:
        return None
    found = _record_at(segments, core, <int64_t>offset)
    if found is None:
        return None
    # the id must be the record's own (its msg_id, compared as the careful path does, without
    # formatting it): the same store host (of the id's length) and port
    m = <MessageExt>found
    host_len = _host_len(m.sys_flag, RS_SYSFLAG_STOREHOST_V6)
    if (n != 2 * (host_len + 12) or memcmp(raw, m._store_raw, <size_t>host_len) != 0
            or raw[host_len] != <uint8_t>(<uint32_t>m._store_port >> 24)
            or raw[host_len + 1] != <uint8_t>(<uint32_t>m._store_port >> 16)
            or raw[host_len + 2] != <uint8_t>(<uint32_t>m._store_port >> 8)
            or raw[host_len + 3] != <uint8_t>(<uint32_t>m._store_port)):
        return None
    return m


cdef bint _has_piece(const uint8_t *p, int64_t n, const uint8_t *want, Py_ssize_t want_len) noexcept nogil:
    """Whether one of the space-separated pieces of p[0:n] is want[0:want_len] (a KEYS value:
    UTF-8 never has the byte 0x20 inside a character, so this is ``want in value.split(" ")``)."""
    cdef int64_t start = 0, i
    for i in range(n + 1):
        if i == n or p[i] == 0x20:
            if i - start == want_len and memcmp(p + start, want, <size_t>want_len) == 0:
                return True
            start = i + 1
    return False


cdef object _IN_ARRAY = object()   # _index_walk's answer: in the caller's array


cdef object _key_messages(object offsets, const int64_t *candidates, Py_ssize_t count, list files, object core,
                          str topic, str key, int64_t lo, int64_t hi, int64_t left, bint by_unique):
    """key_messages' loop (see the pure twin) over ``offsets`` (Python ints), or when it is
    ``_IN_ARRAY`` over ``candidates[:count]`` (an index walk's, in C). The record's topic and keys
    are compared as the UTF-8 (surrogateescape) bytes of ``topic`` and ``key``, which is comparing
    the text the message decodes them to; a message is made for a hit only."""
    cdef Py_buffer view
    cdef rs_record rec
    cdef rs_dispatch_props props
    cdef int64_t offset, pos, readable, rc, previous = -1
    cdef bint first = True, hit
    cdef list found = []
    cdef Py_ssize_t t_len = 0, k_len = 0
    cdef int64_t start = 0
    cdef const uint8_t *t
    cdef const uint8_t *k
    cdef Py_ssize_t j
    cdef bint in_array
    cdef MappedState seg
    keep_t = _utf8_holder(topic)
    keep_k = _utf8_holder(key)
    if keep_t is None or keep_k is None:   # no record decodes to such text
        return found
    t = _utf8_of(keep_t, &t_len)
    k = _utf8_of(keep_k, &k_len)
    in_array = offsets is _IN_ARRAY
    if not in_array:
        if type(offsets) is not list:
            offsets = list(offsets)
        count = len(<list>offsets)
    for j in range(count):
        if left <= 0:
            break
        if in_array:
            offset = candidates[j]
        else:
            offset = _check_int((<list>offsets)[j], "offset", INT64_MIN, INT64_MAX)
        if offset == previous and not first:
            continue   # indexed twice under this key (a KEYS entry and the UNIQ_KEY): read once
        previous = offset
        first = False
        seg = _segment_of(files, offset, &start)
        if seg is None:
            continue
        pos = offset - start
        readable = _readable(seg, start, core)
        if pos >= readable:
            continue
        if not _mapped(seg, readable, &view):
            return None
        _prefetch_record(<const uint8_t *>view.buf, pos, _RECORD_GUESS, readable)
        try:
            rc = rs_decode_record(<const uint8_t *>view.buf + pos, readable - pos, &rec, 1)
            if (rc <= 0 or rec.physical_offset != offset   # a record moved here names another place
                    or rec.store_timestamp < lo or rec.store_timestamp > hi or rec.topic_len != t_len
                    or memcmp(rec.topic, t, <size_t>t_len) != 0):
                continue
            rs_dispatch_properties(rec.properties, rec.properties_len, &props)
            hit = (props.uniq_key_pos >= 0 and props.uniq_key_len == k_len
                   and memcmp(rec.properties + props.uniq_key_pos, k, <size_t>k_len) == 0)
            if not hit and not by_unique and props.keys_pos >= 0:
                hit = _has_piece(rec.properties + props.keys_pos, props.keys_len, k, k_len)
            if hit:
                found.append(_message(None, <const uint8_t *>view.buf, pos, &rec))
                left -= 1
        finally:
            PyBuffer_Release(&view)
    return found


def key_messages(offsets, segments, core, topic, key, begin, end, limit, unique):
    """The messages of ``topic`` under ``key`` at the CommitLog ``offsets`` an index lookup found,
    each re-checked (see the pure twin, rocketstore.format._lookups_py.key_messages)."""
    if type(topic) is not str or type(key) is not str:
        raise TypeError("topic and key must be str")
    cdef int64_t lo = _check_int(begin, "begin", INT64_MIN, INT64_MAX)
    cdef int64_t hi = _check_int(end, "end", INT64_MIN, INT64_MAX)
    cdef int64_t left = _check_int(limit, "limit", 0, INT64_MAX)
    files = _files_of(segments)
    if files is None:
        raise TypeError("segments must be a SegmentTable")
    return _key_messages(offsets, NULL, 0, files, core, topic, key, lo, hi, left, unique)


cdef bint _plain_int(object value, int64_t lo, int64_t *out):
    """``value`` (an int, not a bool nor a subclass) in ``[lo, INT64_MAX]`` into ``out``: True, else
    False."""
    cdef int overflow = 0
    cdef long long x
    if type(value) is not int:
        return False
    x = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow != 0 or x < lo:
        return False
    out[0] = x
    return True


cdef object _INT64_MAX = INT64_MAX   # made once: the usual end of a lookup's window


cpdef object key_lookup(services, segments, core, topic, key, max_num, begin, end, cap, dispatcher=None):
    """``MessageStore.query_by_key`` in one call: the index walk of each service under its lock,
    then the re-check and decode of each hit (see the pure twin, rocketstore.format._lookups_py.key_lookup);
    None: the careful path decides."""
    cdef int64_t lo = 0, hi = INT64_MAX, most = 0, limit = 0
    cdef int64_t found[2 * _WALK_ROOM]
    cdef Py_ssize_t count = 0
    if (type(topic) is not str or type(key) is not str or not topic or not key
            or type(services) is not tuple):
        return None
    if (not _plain_int(max_num, 1, &limit) or not _plain_int(begin, 0, &lo)
            or not (end is None or _plain_int(end, 0, &hi)) or not _plain_int(cap, 0, &most)):
        return None
    if limit > most:   # walk for the candidates asked, past the usual cap (collisions are dropped later)
        cap = max_num
    _index_catch_up(dispatcher)
    offsets = _index_walk(<tuple>services, topic, key, cap, 0 if lo < 1000 else lo - 1000,
                          INT64_MAX if hi > INT64_MAX - 1000 else hi + 1000, found, &count)
    if offsets is None:
        return None
    files = _files_of(segments)
    if files is None:
        return None
    return _key_messages(offsets, found, count, files, core, topic, key, lo, hi, limit, False)


cdef int _index_catch_up(object dispatcher) except -1:
    """``dispatcher.catch_up(index=True)`` unless its ``end_core`` shows nothing waits."""
    cdef DispatchState d
    if dispatcher is None:
        return 0
    if not _is_dispatch(dispatcher):
        dispatcher.catch_up(index=True)
        return 0
    d = <DispatchState>dispatcher
    end_core = d.end_core
    if end_core is None or d.offset < <int64_t>end_core.wrote_offset or (d._index_lazily and d.indexed < d.offset):
        dispatcher.catch_up(index=True)
    return 0


cdef int _queue_catch_up(object dispatcher) except -1:
    """``dispatcher.catch_up()`` (what the class's quick pull does first) unless its
    ``end_core`` shows nothing waits."""
    cdef DispatchState d
    if not _is_dispatch(dispatcher):
        dispatcher.catch_up()
        return 0
    d = <DispatchState>dispatcher
    end_core = d.end_core
    if end_core is None or d.offset < <int64_t>end_core.wrote_offset:
        dispatcher.catch_up()
    return 0


cdef enum:
    _WALK_ROOM = 256   # the candidates a service's walk collects in C; a larger cap: select_files


cdef Py_ssize_t _walk_files(IndexState service, int32_t key_hash, int64_t lo, int64_t hi, int64_t most,
                            int64_t *out) except -2:
    """``select_files(service._files, key, most, lo, hi)[0]`` (unsorted) into ``out`` (room for
    ``most``), walked over each file's map here (index.h's walk, as the compiled select_files
    walks it): how many; -1 when it cannot (a file closed, or not of the service's geometry):
    the caller calls select_files."""
    cdef int64_t slots = 0, items = 0, left = most, file_begin, file_end, got
    cdef Py_ssize_t i, found = 0
    cdef Py_buffer view
    cdef rs_index_t ix
    cdef rs_index_walk_t walk
    cdef list files = service._files
    slots = service.slot_count
    items = service.index_count
    if files is None or not 1 <= slots <= INT32_MAX or not 2 <= items <= INT32_MAX:
        return -1
    for i in range(len(files) - 1, -1, -1):   # newest first, as select_files
        if left <= 0:
            break
        f = files[i]
        if not _is_index_file(f):
            return -1
        mapped = (<IndexFileState>f).mapped
        if not _is_mapped(mapped):
            return -1
        mm = (<MappedState>mapped).mm
        if mm is None:
            return -1
        try:
            PyObject_GetBuffer(mm, &view, PyBUF_SIMPLE)   # pinned for the walk
        except (ValueError, BufferError, TypeError):
            return -1
        try:
            if view.len != rs_index_file_size(slots, items):
                return -1
            ix.base = <uint8_t *>view.buf
            ix.len = view.len
            ix.slot_num = <int32_t>slots
            ix.index_num = <int32_t>items
            file_begin = rs_index_header_i64(&ix, RS_INDEX_POS_BEGIN_TIMESTAMP)
            file_end = rs_index_header_i64(&ix, RS_INDEX_POS_END_TIMESTAMP)
            if (lo < file_begin and hi > file_end) or file_begin <= lo <= file_end or file_begin <= hi <= file_end:
                rs_index_walk_start(&ix, &walk, key_hash, lo, hi)
                while left > 0 and walk.cur != RS_INDEX_INVALID_INDEX:
                    got = rs_index_walk_next(&ix, &walk, out + found, left)
                    found += got
                    left -= got
        finally:
            PyBuffer_Release(&view)
        if file_begin < lo or left <= 0:
            break
    return found


cdef object _index_walk(tuple services, str topic, str key, object cap, int64_t lo, int64_t hi,
                        int64_t *found_c, Py_ssize_t *count):
    """The candidates each index service holds under ``topic#key`` stored within ``[lo, hi]``
    (ms), at most ``cap`` a service, walked under its lock, ascending; None: a closed service.
    Each service's files are walked here (:func:`_walk_files`) when ``cap`` is at most
    ``_WALK_ROOM``: then the answer is ``_IN_ARRAY``, the candidates ``found_c[:count]`` (room
    for ``2 * _WALK_ROOM``); else (or when that cannot) a list, by the services' ``select_files``."""
    cdef int64_t most = 0, v
    cdef Py_ssize_t i, j, n = 0, got
    cdef int32_t key_hash = 0
    cdef IndexState state
    cdef bint fast, in_c
    cdef list offsets = None
    cdef uint32_t h
    in_c = _plain_int(cap, 0, &most) and most <= _WALK_ROOM and len(services) <= 2
    name = None   # topic#key, made only for a select_files call
    if in_c:   # the hash of topic#key over its parts: no string made
        rs_index_unicode_ready(topic)
        rs_index_unicode_ready(key)
        h = rs_index_java_hash_update(0, PyUnicode_DATA(topic), <int>PyUnicode_KIND(topic),
                                      PyUnicode_GET_LENGTH(topic))
        h = 31u * h + <uint32_t>35   # "#"
        h = rs_index_java_hash_update(h, PyUnicode_DATA(key), <int>PyUnicode_KIND(key), PyUnicode_GET_LENGTH(key))
        key_hash = rs_index_hash_of_java(<int32_t>h)
    for i in range(len(services)):
        service = services[i]
        if service is None:
            continue
        if not _is_index(service):
            return None
        state = <IndexState>service
        lock = state._lock
        fast = type(lock) is FastRLock   # taken without a method call
        if fast:
            (<FastRLock>lock).take(True)
        else:
            lock.acquire()
        try:
            if state._closed:
                return None
            got = _walk_files(state, key_hash, lo, hi, most, found_c + n) if in_c else -1
            if got < 0:
                if name is None:
                    name = topic + "#" + key
                found = state._index.select_files(state._files, name, cap, lo, hi)[0]
        finally:
            if fast:
                (<FastRLock>lock).give()
            else:
                lock.release()
        if got >= 0:
            n += got
            continue
        # select_files' list: the C candidates so far join it
        if offsets is None:
            offsets = [found_c[j] for j in range(n)]
            n = 0
        offsets = offsets + found
        offsets.sort()
    if offsets is not None:
        if n:
            offsets = offsets + [found_c[j] for j in range(n)]
            offsets.sort()
        return offsets
    for i in range(1, n):   # a few candidates (at most 2 * _WALK_ROOM): insertion sort, ascending
        v = found_c[i]
        j = i - 1
        while j >= 0 and found_c[j] > v:
            found_c[j + 1] = found_c[j]
            j -= 1
        found_c[j + 1] = v
    count[0] = n
    return _IN_ARRAY


cdef object _stored_at = _operator.attrgetter("store_timestamp")


cpdef object unique_lookup(services, segments, core, topic, key, cap, dispatcher, now):
    """``MessageStore.query_by_unique_key`` in one call: the catch-up of :func:`key_lookup`, then
    the index walk from the creation time the id encodes (less a second), and over all time when
    that finds nothing, each hit's topic and UNIQ_KEY re-checked; the first stored of the hits
    (see the pure twin). None when the careful path must decide: an argument it checks, a
    closed service or segment, and nothing found (it says so)."""
    cdef int64_t most = 0, begin
    cdef int64_t found[2 * _WALK_ROOM]
    cdef Py_ssize_t count = 0
    if (type(topic) is not str or type(key) is not str or not topic or not key
            or type(services) is not tuple or not _plain_int(cap, 0, &most)):
        return None
    _index_catch_up(dispatcher)
    begins = [0]
    try:
        begin = uniq_key_time(key, now) - 1000
        begins.insert(0, 0 if begin < 0 else begin)
    except (InvalidMessageIdError, ValueError):
        pass   # not a RocketMQ-made id: no time hint
    for begin in begins:
        offsets = _index_walk(<tuple>services, topic, key, cap, begin, INT64_MAX, found, &count)
        if offsets is None:
            return None
        files = _files_of(segments)
        if files is None:
            return None
        # every hit (no more than the candidates)
        hits = _key_messages(offsets, found, count, files, core, topic, key, INT64_MIN, INT64_MAX, INT64_MAX, True)
        if hits is None:
            return None
        if hits:
            return min(hits, key=_stored_at)
    return None
