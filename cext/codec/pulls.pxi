# Reading what ConsumeQueue units point at, checked (pull_units: one call per segment of a pull)
# Part of rocketstore.format._codec: included by cext/_codec.pyx, whose imports and
# constants it uses.


cdef object _unit_message(const uint8_t *base, Py_ssize_t n, object zc_view, int64_t pos, int64_t offset,
                          int64_t size, int64_t queue_offset, const uint8_t *topic, Py_ssize_t topic_len,
                          int32_t queue_id, object tags):
    cdef rs_record rec
    cdef rs_dispatch_props found
    cdef int64_t rc
    if pos < 0 or pos >= n or size <= 0:
        return None
    rc = rs_decode_record(base + pos, n - pos, &rec, 1)
    if (rc <= 0 or rec.total_size != size or rec.queue_id != queue_id or rec.queue_offset != queue_offset
            or rec.physical_offset != offset or rec.topic_len != topic_len
            or memcmp(rec.topic, topic, <size_t>topic_len) != 0):
        return None
    if tags is not None:
        rs_dispatch_properties(rec.properties, rec.properties_len, &found)
        if found.tags_pos < 0 or _utf8(rec.properties + found.tags_pos, found.tags_len) not in tags:
            return False
    return _message(zc_view, base, pos, &rec)


cdef enum:
    _CQ_UNIT = 20
    _PLACEHOLDER_SIZE = 0x7FFFFFFF
    _PULL_END = 0         # no unit left
    _PULL_FULL = 1        # ``want`` messages taken
    _PULL_OUTSIDE = 2     # the unit at stop is a candidate whose record is not in this segment
    _PULL_DAMAGED = 3     # the unit at stop does not point at its own record


def pull_units(buffer, file_from, file_size, units, start, want, first_queue_offset, topic, queue_id,
               codes=None, tags=None, *, copy_body=True):
    """One step of a pull over ConsumeQueue units (see the pure twin, rocketstore.format._messages_py.pull_units)."""
    cdef Py_buffer view, table
    cdef const uint8_t *seg = NULL
    cdef const uint8_t *u
    cdef Py_ssize_t seg_len = 0, n, i
    cdef int64_t lo = _check_int(file_from, "file_from", 0, INT64_MAX)
    cdef int64_t seg_size = _check_int(file_size, "file_size", 0, INT64_MAX)
    cdef int64_t first = _check_int(first_queue_offset, "first_queue_offset", 0, INT64_MAX)
    cdef int64_t left = _check_int(want, "want", 0, INT64_MAX)
    cdef int32_t qid = <int32_t>_check_int(queue_id, "queue_id", INT32_MIN, INT32_MAX)
    cdef int64_t offset, size, code
    cdef int32_t code32
    cdef int32_t *wanted = NULL
    cdef Py_ssize_t ncodes = 0, k
    cdef bint ok
    cdef bytes topic_b = _topic_bytes(topic, RS_MAX_TOPIC_LENGTH_V2)
    cdef list messages = [], taken = []
    cdef int kind = _PULL_END
    if not isinstance(units, _np.ndarray) or units.ndim != 1 or units.dtype.itemsize != _CQ_UNIT:
        raise TypeError("units must be a one-dimensional array of CQ_UNIT_DTYPE")
    if tags is not None and not isinstance(tags, (set, frozenset)):
        raise TypeError(f"tags must be a set or None, not {type(tags).__name__}")
    i = _check_int(start, "start", 0, INT64_MAX)
    zc_view = None
    if buffer is not None:
        zc_view = None if copy_body else _zero_copy_view(buffer)
        _get_readable(buffer if copy_body else zc_view, &view)
        seg = <const uint8_t *>view.buf
        seg_len = view.len
    try:
        if codes is not None:
            ncodes = len(codes)
            wanted = <int32_t *>PyMem_Malloc(max(1, ncodes) * sizeof(int32_t))
            if wanted == NULL:
                raise MemoryError()
            for k in range(ncodes):
                wanted[k] = <int32_t>_check_int(codes[k], "code", INT32_MIN, INT32_MAX)
        units = _np.ascontiguousarray(units)
        PyObject_GetBuffer(units, &table, PyBUF_SIMPLE)
        try:
            n = table.len // _CQ_UNIT
            while True:
                if i >= n:
                    kind = _PULL_END
                    break
                if left <= 0:
                    kind = _PULL_FULL
                    break
                u = <const uint8_t *>table.buf + i * _CQ_UNIT
                offset = _be64(u)
                size = _be32(u + 8)
                if offset == 0 and size == _PLACEHOLDER_SIZE:
                    i += 1
                    continue
                if wanted != NULL:
                    code = _be64(u + 12)
                    if code > -2147483649:   # not an extended tagsCode (those always pass)
                        code32 = <int32_t>code
                        ok = False
                        for k in range(ncodes):
                            if wanted[k] == code32:
                                ok = True
                                break
                        if not ok:
                            i += 1
                            continue
                if offset < 0 or size <= 0:
                    kind = _PULL_DAMAGED
                    break
                if seg == NULL or offset < lo or offset - lo >= seg_size:
                    kind = _PULL_OUTSIDE
                    break
                m = _unit_message(seg, seg_len, zc_view, offset - lo, offset, size, first + i,
                                  <const uint8_t *>PyBytes_AS_STRING(topic_b), PyBytes_GET_SIZE(topic_b), qid, tags)
                if m is None:
                    kind = _PULL_DAMAGED
                    break
                i += 1
                if m is False:
                    continue
                messages.append(m)
                taken.append(i - 1)
                left -= 1
        finally:
            PyBuffer_Release(&table)
    finally:
        PyMem_Free(wanted)
        if seg != NULL:
            PyBuffer_Release(&view)
    return messages, taken, i, kind


PULL_END = _PULL_END
PULL_FULL = _PULL_FULL
PULL_OUTSIDE = _PULL_OUTSIDE
PULL_DAMAGED = _PULL_DAMAGED
