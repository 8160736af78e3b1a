# Included by _codec.pyx and _scan.pyx (each compiles its own copy): the checks of a buffer, a
# range and a RECORD_DTYPE table, the error for a span outside the buffer, and the scan loop that
# decodes records into rs_batch_row tables, and the strict UTF-8 check of properties (the field checks
# and the timer kernels use it). Uses _np and CorruptRecordError of the including module.

from cpython.buffer cimport (PyBUF_STRIDES, PyBuffer_IsContiguous, PyBuffer_Release, PyObject_CheckBuffer,
                             PyObject_GetBuffer)
from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.string cimport memcpy, memset


cdef int _get_readable(object buffer, Py_buffer *view) except -1:
    if not PyObject_CheckBuffer(buffer):
        raise TypeError(f"buffer must be a bytes-like object, not {type(buffer).__name__}")
    PyObject_GetBuffer(buffer, view, PyBUF_STRIDES)
    if not PyBuffer_IsContiguous(view, b'C'):
        PyBuffer_Release(view)
        raise TypeError("buffer must be C-contiguous")
    return 0


cdef _check_range(start, end, Py_ssize_t size):
    for name, value in (("start", start), ("end", end)):
        if not isinstance(value, int):
            raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if start < 0 or start > end or end > size:
        raise ValueError(f"range [{start}, {end}) is out of bounds for a buffer of {size} bytes")


cdef int64_t _scan_end(object start, object end, object max_records, Py_ssize_t length) except -1:
    """Where a scan of a ``length``-byte buffer from ``start`` ends (``end``, None: the buffer's
    end), after checking the range and that ``max_records`` is an int (decode_batch's arguments)."""
    if end is None:
        end = length
    _check_range(start, end, length)
    if not isinstance(max_records, int):
        raise TypeError(f"max_records must be an int, not {type(max_records).__name__}")
    return end


cdef int64_t _scan_rows(const uint8_t *base, int64_t *pos_io, int64_t end, rs_batch_row *rows,
                        int64_t room, int64_t limit, int check_crc, int *reason,
                        int64_t placed) noexcept nogil:
    """Decode records from base[*pos_io] until end, limit rows (-1: none) or room runs out.
    ``placed`` >= 0: the CommitLog offset of base[0]; a record whose PHYSICALOFFSET is not
    ``placed`` + its position stops the scan there, as a corrupt one does."""
    cdef int64_t n = 0, pos = pos_io[0], rc
    cdef rs_record rec
    cdef rs_batch_row *row
    while True:
        if pos >= end or n == limit:
            reason[0] = _STOP_LIMIT
            break
        rc = rs_decode_record(base + pos, end - pos, &rec, check_crc)
        if rc <= 0:
            reason[0] = <int>(1 - rc)
            break
        if placed >= 0 and rec.physical_offset != placed + pos:
            reason[0] = _STOP_CORRUPT   # a record copied here from elsewhere
            break
        if n >= room:   # decoded again after the array grows
            reason[0] = _STOP_NEED_ROOM
            break
        row = &rows[n]
        memset(row, 0, sizeof(rs_batch_row))   # zeroed padding: arrays compare bytewise
        row.position = pos
        row.size = rec.total_size
        row.magic = rec.magic
        row.body_crc = rec.body_crc
        row.queue_id = rec.queue_id
        row.flag = rec.flag
        row.queue_offset = rec.queue_offset
        row.physical_offset = rec.physical_offset
        row.sys_flag = rec.sys_flag
        row.born_timestamp = rec.born_timestamp
        memcpy(row.born_host, rec.born_host, 16)
        row.born_port = rec.born_port
        row.store_timestamp = rec.store_timestamp
        memcpy(row.store_host, rec.store_host, 16)
        row.store_port = rec.store_port
        row.reconsume_times = rec.reconsume_times
        row.prepared_transaction_offset = rec.prepared_transaction_offset
        row.body_pos = rec.body - base
        row.body_len = rec.body_len
        row.topic_pos = rec.topic - base
        row.topic_len = rec.topic_len
        row.properties_pos = rec.properties - base
        row.properties_len = rec.properties_len
        n += 1
        pos += rc
    pos_io[0] = pos
    return n


cdef object _check_table(str name, object table, object dtype, str dtype_name):
    """``table`` as a C-contiguous 1-D array of exactly ``dtype`` (TypeError otherwise)."""
    if not isinstance(table, _np.ndarray) or table.ndim != 1 or table.dtype != dtype:
        raise TypeError(f"{name} must be a one-dimensional numpy array of {dtype_name}")
    return _np.ascontiguousarray(table)


cdef object _outside(object i, object position, str what, object start, object length, object size):
    # Python ints: start + length may not fit an int64
    err = CorruptRecordError(f"record {i} at position {position}: its {what} bytes [{start}, "
                             f"{start + length}) lie outside the buffer of {size} bytes")
    err.reason = _STOP_CORRUPT
    err.position = position
    return err


cdef bint _utf8_ok(const uint8_t *p, int64_t n) noexcept nogil:
    """Strict UTF-8, as Python's decoder has it (no overlongs, surrogates or > U+10FFFF)."""
    cdef int64_t i = 0, k
    cdef uint8_t c, lo, hi
    cdef int need
    cdef uint64_t word, seen = 0
    while i + 8 <= n:               # all ASCII (the usual case): one OR per 8 bytes
        memcpy(&word, p + i, 8)
        seen |= word
        i += 8
    while i < n:
        seen |= p[i]
        i += 1
    if not (seen & 0x8080808080808080ULL):
        return 1
    i = 0
    while i < n:
        if i + 8 <= n:
            memcpy(&word, p + i, 8)
            if not (word & 0x8080808080808080ULL):
                i += 8
                continue
        c = p[i]
        if c < 0x80:
            i += 1
            continue
        lo, hi = 0x80, 0xBF
        if c < 0xC2:
            return 0
        elif c < 0xE0:
            need = 1
        elif c < 0xF0:
            need = 2
            if c == 0xE0:
                lo = 0xA0
            elif c == 0xED:
                hi = 0x9F
        elif c < 0xF5:
            need = 3
            if c == 0xF0:
                lo = 0x90
            elif c == 0xF4:
                hi = 0x8F
        else:
            return 0
        if need >= n - i:
            return 0
        if p[i + 1] < lo or p[i + 1] > hi:
            return 0
        for k in range(2, need + 1):
            if p[i + k] < 0x80 or p[i + k] > 0xBF:
                return 0
        i += need + 1
    return 1
