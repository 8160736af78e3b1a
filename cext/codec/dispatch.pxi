# Dispatch (§2 tagsCode and DELAY, §5.2 index keys): what the ConsumeQueues and the index need
# Part of rocketstore.format._codec: included by cext/_codec.pyx, whose imports and
# constants it uses.

from cpython.buffer cimport PyBUF_C_CONTIGUOUS, PyBUF_FORMAT
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM


# Where a record's index keys lie in the buffer, kept between dispatch_info's two passes.
cdef struct _key_spans:
    int64_t uniq_key_pos
    int64_t keys_pos
    int32_t uniq_key_len     # 0: no UNIQ_KEY
    int32_t keys_len         # 0: no KEYS

cdef enum:
    # From this many records on, dispatch_info scans without the GIL (every buffer stays pinned).
    _NOGIL_DISPATCH_RECORDS = 64


def _delay_table(delay_levels_ms):
    """The delay table as a list of Java longs: level n is at [n - 1]."""
    if isinstance(delay_levels_ms, (str, bytes, bytearray, memoryview, _Mapping)):
        raise TypeError(f"delay_levels_ms must be a sequence of ints, not {type(delay_levels_ms).__name__}")
    try:
        items = tuple(delay_levels_ms)
    except TypeError:
        raise TypeError(f"delay_levels_ms must be a sequence of ints, "
                        f"not {type(delay_levels_ms).__name__}") from None
    table = []
    for level, value in enumerate(items, 1):
        try:
            value = _operator.index(value)
        except TypeError:
            raise TypeError(f"delay level {level} must be an int (ms), not {type(value).__name__}") from None
        if not INT64_MIN <= value <= INT64_MAX:
            raise ValueError(f"delay level {level} is {value} ms, which does not fit a Java long")
        table.append(value)
    return table


cdef int64_t _dispatch_scan(const uint8_t *base, int64_t size, const rs_batch_row *rows, int64_t n,
                            const int64_t *delays, int64_t max_level, rs_dispatch_row *info,
                            _key_spans *spans, int64_t *bad, int *what) noexcept nogil:
    """Pass 1: fill info[0..n) and spans[0..n); return how many index keys the records hold, or
    -1 with *bad the first record whose topic or properties (*what) lie outside base[0..size)."""
    cdef int64_t i, count = 0, level_ms
    cdef const rs_batch_row *r
    cdef const uint8_t *props
    cdef rs_dispatch_row *out
    cdef rs_dispatch_props found
    cdef int32_t level
    for i in range(n):
        r = &rows[i]
        if r.topic_pos < 0 or r.topic_len < 0 or r.topic_pos > size - r.topic_len:
            bad[0] = i
            what[0] = _OUTSIDE_TOPIC
            return -1
        if r.properties_pos < 0 or r.properties_len < 0 or r.properties_pos > size - r.properties_len:
            bad[0] = i
            what[0] = _OUTSIDE_PROPERTIES
            return -1
        props = base + r.properties_pos
        rs_dispatch_properties(props, r.properties_len, &found)
        out = &info[i]
        out.tags_code = 0
        out.tags_pos = -1
        out.tags_len = 0
        out.delay_level = 0
        if found.tags_pos >= 0:
            out.tags_pos = r.properties_pos + found.tags_pos
            out.tags_len = found.tags_len
            out.tags_code = rs_java_hash_utf8(props + found.tags_pos, found.tags_len)
        if found.delay_pos >= 0 and rs_parse_java_int(props + found.delay_pos, found.delay_len, &level):
            out.delay_level = level
            if (r.topic_len == RS_SCHEDULE_TOPIC_LEN
                    and memcmp(base + r.topic_pos, RS_SCHEDULE_TOPIC, RS_SCHEDULE_TOPIC_LEN) == 0):
                level_ms = level if level < max_level else max_level
                if level_ms > 0:   # Java long arithmetic wraps
                    out.tags_code = <int64_t>(<uint64_t>r.store_timestamp + <uint64_t>delays[level_ms - 1])
        # every field set, so pass 2 never forms a pointer from uninitialized memory
        spans[i].uniq_key_pos = 0
        spans[i].keys_pos = 0
        spans[i].uniq_key_len = 0
        spans[i].keys_len = 0
        if found.uniq_key_pos >= 0:
            spans[i].uniq_key_pos = r.properties_pos + found.uniq_key_pos
            spans[i].uniq_key_len = found.uniq_key_len
            count += 1
        if found.keys_pos >= 0:
            spans[i].keys_pos = r.properties_pos + found.keys_pos
            spans[i].keys_len = found.keys_len
            count += rs_count_key_tokens(props + found.keys_pos, found.keys_len)
    return count


cdef int64_t _dispatch_keys(const uint8_t *base, const _key_spans *spans, int64_t n, rs_keyref_row *out,
                            int64_t cap) noexcept nogil:
    """Pass 2: write the index keys of records 0..n-1 (UNIQ_KEY, then each KEYS token) to out,
    at most cap of them (pass 1 counted exactly that many); return how many were written."""
    cdef int64_t i, k = 0, j, first
    cdef const uint8_t *value
    for i in range(n):
        if spans[i].uniq_key_len > 0 and k < cap:
            out[k].key_pos = spans[i].uniq_key_pos
            out[k].key_len = spans[i].uniq_key_len
            out[k].record = <int32_t>i
            k += 1
        value = base + spans[i].keys_pos
        j = 0
        while j < spans[i].keys_len:
            if value[j] == RS_KEY_SEPARATOR:
                j += 1
                continue
            first = j
            while j < spans[i].keys_len and value[j] != RS_KEY_SEPARATOR:
                j += 1
            if k < cap:
                out[k].key_pos = spans[i].keys_pos + first
                out[k].key_len = <int32_t>(j - first)
                out[k].record = <int32_t>i
                k += 1
    return k


def dispatch_info(buffer, records, delay_levels_ms=DEFAULT_DELAY_LEVELS_MS):
    """``(info, keys)``: what dispatch needs from each record of ``records`` (see the pure twin,
    rocketstore.format._dispatch_py.dispatch_info). Large batches are scanned without the GIL; ``buffer``
    and ``records`` stay exported meanwhile."""
    cdef Py_buffer src, rec_view, info_view, keys_view
    cdef int64_t n, count, written, bad = -1, max_level, i
    cdef int what = 0
    cdef int64_t *delays = NULL
    cdef _key_spans *spans = NULL
    cdef const rs_batch_row *rows
    cdef const rs_batch_row *r
    records = _check_table("records", records, RECORD_DTYPE, "RECORD_DTYPE")
    table = _delay_table(delay_levels_ms)
    max_level = len(table)
    _get_readable(buffer, &src)
    try:
        n = len(records)
        if n > INT32_MAX:
            raise ValueError(f"{n} records are too many for one call (at most {INT32_MAX})")
        delays = <int64_t *>PyMem_Malloc(<size_t>(max_level if max_level > 0 else 1) * sizeof(int64_t))
        spans = <_key_spans *>PyMem_Malloc(<size_t>(n if n > 0 else 1) * sizeof(_key_spans))
        if delays == NULL or spans == NULL:
            raise MemoryError()
        for i in range(max_level):
            delays[i] = table[i]
        info = _np.empty(n, dtype=DISPATCH_DTYPE)   # _dispatch_scan writes every field of each row
        PyObject_GetBuffer(records, &rec_view, PyBUF_SIMPLE)
        try:
            PyObject_GetBuffer(info, &info_view, PyBUF_WRITABLE)
            try:
                rows = <const rs_batch_row *>rec_view.buf
                if n >= _NOGIL_DISPATCH_RECORDS:
                    with nogil:
                        count = _dispatch_scan(<const uint8_t *>src.buf, src.len, rows, n, delays, max_level,
                                               <rs_dispatch_row *>info_view.buf, spans, &bad, &what)
                else:
                    count = _dispatch_scan(<const uint8_t *>src.buf, src.len, rows, n, delays, max_level,
                                           <rs_dispatch_row *>info_view.buf, spans, &bad, &what)
                if count < 0:
                    r = &rows[bad]
                    if what == _OUTSIDE_TOPIC:
                        raise _outside(bad, r.position, "topic", r.topic_pos, r.topic_len, src.len)
                    raise _outside(bad, r.position, "properties", r.properties_pos, r.properties_len, src.len)
            finally:
                PyBuffer_Release(&info_view)
        finally:
            PyBuffer_Release(&rec_view)
        keys = _np.empty(count, dtype=KEYREF_DTYPE)   # _dispatch_keys writes every field of each row
        PyObject_GetBuffer(keys, &keys_view, PyBUF_WRITABLE)
        try:
            if count >= _NOGIL_DISPATCH_RECORDS:
                with nogil:
                    written = _dispatch_keys(<const uint8_t *>src.buf, spans, n,
                                             <rs_keyref_row *>keys_view.buf, count)
            else:
                written = _dispatch_keys(<const uint8_t *>src.buf, spans, n, <rs_keyref_row *>keys_view.buf, count)
        finally:
            PyBuffer_Release(&keys_view)
        if written != count:
            raise AssertionError("dispatch_info found a different number of keys in its second pass")
        return info, keys
    finally:
        PyMem_Free(spans)
        PyMem_Free(delays)
        PyBuffer_Release(&src)


cdef enum:
    # At most this many records dispatch_few hands back (its rows sit on the stack).
    _FEW_RECORDS_MAX = 16


def dispatch_few(buffer, int64_t start, int64_t end, delays, int64_t max_records):
    """What dispatch needs of each record of ``buffer[start:end]``, when that stretch holds at most
    ``max_records`` (0 .. 16) whole records before its end or the first position holding none;
    None when it holds more (the batch path, :func:`decode_batch` and :func:`dispatch_info`,
    serves those, faster per record). See the pure twin
    (rocketstore.format._codec_py.dispatch_few): ``(stop, reason, rows)``, ``stop`` and ``reason``
    as ``decode_batch(buffer, start, end, check_crc=False)`` gives them, ``rows`` a tuple of
    ``(position, size, queue_id, queue_offset, sys_flag, store_timestamp, topic, tags_code, keys)``
    per record. ``delays``: the delay table as a one-dimensional int64 numpy array."""
    cdef Py_buffer src, table
    cdef rs_batch_row rows[_FEW_RECORDS_MAX + 1]
    cdef rs_dispatch_row info
    cdef _key_spans spans
    cdef const rs_batch_row *r
    cdef const uint8_t *data
    cdef int64_t pos = start, n, i, keys, bad = -1
    cdef int reason = _STOP_LIMIT, what = 0
    if not 0 <= max_records <= _FEW_RECORDS_MAX:
        raise ValueError(f"max_records must be in [0, {_FEW_RECORDS_MAX}], not {max_records}")
    if type(delays) is not _np.ndarray:
        raise TypeError("delays must be a one-dimensional numpy array of int64")
    _get_readable(buffer, &src)
    memset(&table, 0, sizeof(Py_buffer))   # PyBuffer_Release: a no-op until the table is exported
    try:
        PyObject_GetBuffer(delays, &table, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS)
        if not _int64_vector(&table):
            raise TypeError("delays must be a one-dimensional numpy array of int64")
        if start < 0 or start > end or end > src.len:
            raise ValueError(f"range [{start}, {end}) is out of bounds for a buffer of {src.len} bytes")
        data = <const uint8_t *>src.buf
        n = _scan_rows(data, &pos, end, rows, max_records + 1, max_records + 1, 0, &reason, -1)
        if n > max_records:
            return None
        out = PyTuple_New(n)
        for i in range(n):
            r = &rows[i]
            keys = _dispatch_scan(data, src.len, r, 1, <const int64_t *>table.buf, table.shape[0],
                                  &info, &spans, &bad, &what)
            if keys < 0:
                if what == _OUTSIDE_TOPIC:
                    raise _outside(i, r.position, "topic", r.topic_pos, r.topic_len, src.len)
                raise _outside(i, r.position, "properties", r.properties_pos, r.properties_len, src.len)
            row = _few_row(r, data, info.tags_code, keys)
            Py_INCREF(row)   # PyTuple_SET_ITEM steals it
            PyTuple_SET_ITEM(out, i, row)
        return pos, reason, out
    finally:
        PyBuffer_Release(&table)
        PyBuffer_Release(&src)


cdef tuple _few_row(const rs_batch_row *r, const uint8_t *data, int64_t tags_code, int64_t keys):
    """One row of dispatch_few's answer (built apart: Cython takes minutes over this tuple inside
    dispatch_few's try/finally)."""
    return (r.position, r.size, r.queue_id, r.queue_offset, r.sys_flag, r.store_timestamp,
            PyUnicode_DecodeUTF8(<const char *>data + r.topic_pos, r.topic_len, "surrogateescape"),
            tags_code, keys)


cdef bint _int64_vector(const Py_buffer *view) noexcept:
    """Whether ``view`` is one dimension of native int64 ("q", or "l" where a long is 8 bytes)."""
    if view.ndim != 1 or view.itemsize != 8 or view.format == NULL or view.format[1] != 0:
        return False
    return view.format[0] == b"q" or (view.format[0] == b"l" and sizeof(long) == 8)


cdef int64_t _count_pieces(const uint8_t *base, int64_t size, const rs_batch_row *rows, int64_t n,
                           int32_t *counts, int64_t *bad) noexcept nogil:
    """Pass 1 of property_pieces: kept pieces per record; -1 with *bad the first record whose
    properties lie outside base[0..size)."""
    cdef int64_t i, total = 0, k
    for i in range(n):
        if rows[i].properties_pos < 0 or rows[i].properties_len < 0 \
                or rows[i].properties_pos > size - rows[i].properties_len:
            bad[0] = i
            return -1
        k = rs_property_pieces(base + rows[i].properties_pos, rows[i].properties_len, 0, NULL, 0)
        counts[i] = <int32_t>k
        total += k
    return total


cdef int64_t _fill_pieces(const uint8_t *base, const rs_batch_row *rows, int64_t n, rs_piece_row *out,
                          int64_t cap) noexcept nogil:
    """Pass 2: write the pieces (at most cap, the count of pass 1); returns how many."""
    cdef int64_t i, k = 0
    for i in range(n):
        k += rs_property_pieces(base + rows[i].properties_pos, rows[i].properties_len,
                                rows[i].properties_pos, out + k, cap - k)
        if k > cap:
            return k
    return k


def property_pieces(buffer, records):
    """Every properties piece of ``records`` (RECORD_DTYPE, decoded from ``buffer``) that
    :func:`decode_properties` keeps, duplicates included, in record order.

    Returns ``(pieces, counts)``: ``pieces`` (PIECE_DTYPE) locates each piece's name and value
    in ``buffer``; ``counts`` (int32, one per record) says how many pieces each record has, so
    the pieces of record ``i`` follow those of records ``0..i-1``. Columnar readers (the Spark
    source) build a properties map from them without a Python object per message. A record
    whose properties lie outside ``buffer`` raises CorruptRecordError; the scan runs without the
    GIL, ``buffer`` and ``records`` stay exported meanwhile.
    """
    cdef Py_buffer src, rec_view, counts_view, out_view
    cdef int64_t n, total, written, bad = -1
    cdef const rs_batch_row *rows
    records = _check_table("records", records, RECORD_DTYPE, "RECORD_DTYPE")
    n = len(records)
    counts = _np.empty(n, dtype=_np.int32)
    _get_readable(buffer, &src)
    try:
        PyObject_GetBuffer(records, &rec_view, PyBUF_SIMPLE)
        try:
            rows = <const rs_batch_row *>rec_view.buf
            PyObject_GetBuffer(counts, &counts_view, PyBUF_WRITABLE)
            try:
                with nogil:
                    total = _count_pieces(<const uint8_t *>src.buf, src.len, rows, n,
                                          <int32_t *>counts_view.buf, &bad)
            finally:
                PyBuffer_Release(&counts_view)
            if total < 0:
                raise _outside(bad, rows[bad].position, "properties", rows[bad].properties_pos,
                               rows[bad].properties_len, src.len)
            pieces = _np.empty(total, dtype=PIECE_DTYPE)   # _fill_pieces writes every field
            PyObject_GetBuffer(pieces, &out_view, PyBUF_WRITABLE)
            try:
                with nogil:
                    written = _fill_pieces(<const uint8_t *>src.buf, rows, n, <rs_piece_row *>out_view.buf,
                                           total)
            finally:
                PyBuffer_Release(&out_view)
            if written != total:
                raise AssertionError("property_pieces found a different number of pieces in its second pass")
        finally:
            PyBuffer_Release(&rec_view)
    finally:
        PyBuffer_Release(&src)
    return pieces, counts
