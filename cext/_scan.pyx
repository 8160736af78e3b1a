# cython: language_level=3, embedsignature=True
"""Kernels over a stretch of CommitLog records: queue keys and per-queue offset ranges, the
field cross-checks, verify's and recovery's one-pass scans, the ConsumeQueue unit check
(compiled twin of rocketstore.format._scan_py).

The records are decoded by the scan loop decode_batch uses (rows.pxi, compiled into both modules),
and every function here works on a whole table or stretch in one call.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t, INT64_MAX
from libc.stdlib cimport free as _free, realloc as _realloc
from libc.string cimport memcmp, memset

# record.h's API and the batch-row struct, declared once in _codec.pxd
from _codec cimport *

import numpy as _np

from rocketstore.format._codec import RECORD_DTYPE
from rocketstore.errors import CorruptRecordError
from rocketstore.format.units import CQ_UNIT_DTYPE as _CQ_UNIT_DTYPE

include "rows.pxi"

ctypedef int64_t (*_scan_rows_fn)(const uint8_t *, int64_t *, int64_t, rs_batch_row *, int64_t, int64_t, int,
                                  int *, int64_t) noexcept nogil
# verify_scan and recover_scan call the scan loop through this pointer, which keeps it out of line
# as the codec's copy is (inlined into their loops, verify_scan measured about 2 % slower).
cdef _scan_rows_fn _scan_rows_out_of_line = _scan_rows

__all__ = [
    "queue_keys", "same_queues", "queue_ranges", "verify_scan", "recover_scan",
    "record_digests", "check_units",
    "UNIT_OK", "UNIT_BAD", "UNIT_LOST",
    "SCAN_NOT_CONSUMABLE", "SCAN_IMPLAUSIBLE_QUEUE_OFFSET",
    "field_problems", "BAD_TOPIC", "BAD_PROPERTIES_UTF8", "BAD_PHYSICAL_OFFSET", "BAD_NO_BLANK_ROOM",
    "BAD_SYSFLAG", "BAD_PREPARED_OFFSET", "BAD_PROP_CRC",
]

cdef enum:
    _BAD_TOPIC = 1
    _BAD_PROPERTIES_UTF8 = 2
    _BAD_PHYSICAL_OFFSET = 4
    _BAD_NO_BLANK_ROOM = 8
    _BAD_SYSFLAG = 16
    _BAD_PREPARED_OFFSET = 32
    _BAD_PROP_CRC = 64


# ---------------------------------------------------------------------------------------------
# Queue keys: records grouped by (topic, queue id) without a Python step per record

cdef int64_t _queue_keys(const uint8_t *base, int64_t size, const rs_batch_row *rows, int64_t n,
                         uint64_t *keys) noexcept nogil:
    """FNV-1a 64 of each record's topic bytes, then of its queue id; -1 or the first bad row."""
    cdef int64_t i
    for i in range(n):
        if rows[i].topic_pos < 0 or rows[i].topic_len < 0 or rows[i].topic_pos > size - rows[i].topic_len:
            return i
        keys[i] = _queue_key_of(base + rows[i].topic_pos, rows[i].topic_len, rows[i].queue_id)
    return -1


def queue_keys(buffer, records):
    """One uint64 per record of ``records`` (RECORD_DTYPE, decoded from ``buffer``): FNV-1a 64
    over its topic bytes, then its queue id (as uint32). Records of one (topic, queue id) get
    one key; check a grouping made from them with :func:`same_queues`. A topic outside
    ``buffer`` raises CorruptRecordError."""
    cdef Py_buffer src, rec_view, keys_view
    cdef int64_t n, bad
    cdef const rs_batch_row *rows
    records = _check_table("records", records, RECORD_DTYPE, "RECORD_DTYPE")
    n = len(records)
    keys = _np.empty(n, dtype=_np.uint64)
    _get_readable(buffer, &src)
    try:
        PyObject_GetBuffer(records, &rec_view, PyBUF_SIMPLE)
        try:
            PyObject_GetBuffer(keys, &keys_view, PyBUF_WRITABLE)
            try:
                rows = <const rs_batch_row *>rec_view.buf
                with nogil:
                    bad = _queue_keys(<const uint8_t *>src.buf, src.len, rows, n, <uint64_t *>keys_view.buf)
                if bad >= 0:
                    raise _outside(bad, rows[bad].position, "topic", rows[bad].topic_pos,
                                   rows[bad].topic_len, src.len)
            finally:
                PyBuffer_Release(&keys_view)
        finally:
            PyBuffer_Release(&rec_view)
    finally:
        PyBuffer_Release(&src)
    return keys


# ---------------------------------------------------------------------------------------------
# Field cross-checks and verify's scan: what a record's fields must agree with

#: field_problems flags, one bit per check a record fails
BAD_TOPIC = 1               # empty, or a byte outside [%|a-zA-Z0-9_-]
BAD_PROPERTIES_UTF8 = 2     # properties not valid UTF-8
BAD_PHYSICAL_OFFSET = 4     # PHYSICALOFFSET is not base + position
BAD_NO_BLANK_ROOM = 8       # fewer than 8 bytes of the segment left after the record (§1.4)
BAD_SYSFLAG = 16            # sysFlag bits RocketMQ does not define, or compression type 4..7
BAD_PREPARED_OFFSET = 32    # PREPAREDTRANSACTIONOFFSET neither 0 nor an earlier record's offset
BAD_PROP_CRC = 64           # a trailing __CRC32# property (§1.6) that does not match the record

cdef uint8_t _TOPIC_BYTE[256]
memset(_TOPIC_BYTE, 0, 256)
for _c in list(b"%|-_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"):
    _TOPIC_BYTE[<int>_c] = 1

cdef const char *_PROP_CRC_NAME = b"__CRC32#\x01"
cdef enum:
    _PROP_CRC_NAME_LEN = 9
    _PROP_CRC_LEN = 20
    _KNOWN_SYSFLAG_BITS = 0x7FF


cdef uint8_t _prop_crc_flag(const uint8_t *rec, int64_t size, int32_t props_len) noexcept nogil:
    """BAD_PROP_CRC when the record ends in a __CRC32# property whose CRC does not match."""
    cdef const uint8_t *tail = rec + size - _PROP_CRC_LEN
    cdef int64_t expected = 0, scale = 1
    cdef int k
    if props_len < _PROP_CRC_LEN or rec[size - 1] != 2 or \
            memcmp(tail, _PROP_CRC_NAME, _PROP_CRC_NAME_LEN) != 0:
        return 0
    for k in range(10):
        if tail[_PROP_CRC_NAME_LEN + k] < 0x30 or tail[_PROP_CRC_NAME_LEN + k] > 0x39:
            return _BAD_PROP_CRC
        expected += (tail[_PROP_CRC_NAME_LEN + k] - 0x30) * scale
        scale *= 10
    return 0 if expected == rs_body_crc(rec, size - _PROP_CRC_LEN) else _BAD_PROP_CRC


cdef int64_t _field_problems(const uint8_t *buf, int64_t size, const rs_batch_row *rows, int64_t n,
                             int64_t base, int64_t segment_size, uint8_t *out, uint64_t *keys,
                             int *what) noexcept nogil:
    """Fill ``out`` (see field_problems); -1, or the first row that lies outside ``buf``."""
    cdef int64_t i, j
    cdef uint8_t flags
    cdef uint32_t sys_flag
    cdef const rs_batch_row *r
    for i in range(n):
        r = &rows[i]
        if r.position < 0 or r.size < 0 or r.position > size - r.size:
            what[0] = _OUTSIDE_RECORD
            return i
        if r.topic_pos < 0 or r.topic_len < 0 or r.topic_pos > size - r.topic_len:
            what[0] = _OUTSIDE_TOPIC
            return i
        if r.properties_pos < 0 or r.properties_len < 0 or r.properties_pos > size - r.properties_len:
            what[0] = _OUTSIDE_PROPERTIES
            return i
        keys[i] = _queue_key_of(buf + r.topic_pos, r.topic_len, r.queue_id)
        flags = _BAD_TOPIC if r.topic_len == 0 else 0
        for j in range(r.topic_len):
            if not _TOPIC_BYTE[buf[r.topic_pos + j]]:
                flags = _BAD_TOPIC
                break
        if not _utf8_ok(buf + r.properties_pos, r.properties_len):
            flags |= _BAD_PROPERTIES_UTF8
        if r.physical_offset != base + r.position:
            flags |= _BAD_PHYSICAL_OFFSET
        if r.position + r.size > segment_size - RS_END_FILE_MIN_BLANK:
            flags |= _BAD_NO_BLANK_ROOM
        sys_flag = <uint32_t>r.sys_flag
        if (sys_flag & ~(<uint32_t>_KNOWN_SYSFLAG_BITS)) or ((sys_flag >> 8) & 7) > 3:
            flags |= _BAD_SYSFLAG
        if r.prepared_transaction_offset != 0 and (r.prepared_transaction_offset < 0
                                                   or r.prepared_transaction_offset >= base + r.position):
            flags |= _BAD_PREPARED_OFFSET
        flags |= _prop_crc_flag(buf + r.position, r.size, r.properties_len)
        out[i] = flags
    return -1


def field_problems(buffer, records, int64_t base=0, int64_t segment_size=INT64_MAX):
    """One uint8 per record of ``records`` (RECORD_DTYPE, decoded from ``buffer``, which starts
    at CommitLog offset ``base`` and is a segment of ``segment_size`` bytes): the BAD_* bits of
    the cross-checks the record fails, 0 for none (what :meth:`MessageStore.verify` checks
    beyond lengths and the body CRC); and the records' :func:`queue_keys`, from the same pass.
    A record, topic or properties outside ``buffer`` raises CorruptRecordError."""
    cdef Py_buffer src, rec_view, out_view, keys_view
    cdef int64_t n, bad
    cdef int what = 0
    cdef const rs_batch_row *rows
    records = _check_table("records", records, RECORD_DTYPE, "RECORD_DTYPE")
    n = len(records)
    flags = _np.zeros(n, dtype=_np.uint8)
    keys = _np.zeros(n, dtype=_np.uint64)
    _get_readable(buffer, &src)
    try:
        PyObject_GetBuffer(records, &rec_view, PyBUF_SIMPLE)
        try:
            PyObject_GetBuffer(flags, &out_view, PyBUF_WRITABLE)
            PyObject_GetBuffer(keys, &keys_view, PyBUF_WRITABLE)
            try:
                rows = <const rs_batch_row *>rec_view.buf
                with nogil:
                    bad = _field_problems(<const uint8_t *>src.buf, src.len, rows, n, base, segment_size,
                                          <uint8_t *>out_view.buf, <uint64_t *>keys_view.buf, &what)
                if bad >= 0:
                    if what == _OUTSIDE_RECORD:
                        raise _outside(bad, rows[bad].position, "record", rows[bad].position,
                                       rows[bad].size, src.len)
                    if what == _OUTSIDE_TOPIC:
                        raise _outside(bad, rows[bad].position, "topic", rows[bad].topic_pos,
                                       rows[bad].topic_len, src.len)
                    raise _outside(bad, rows[bad].position, "properties", rows[bad].properties_pos,
                                   rows[bad].properties_len, src.len)
            finally:
                PyBuffer_Release(&keys_view)
                PyBuffer_Release(&out_view)
        finally:
            PyBuffer_Release(&rec_view)
    finally:
        PyBuffer_Release(&src)
    return flags, keys


cdef enum:
    _SCAN_NOT_CONSUMABLE = 1
    _SCAN_IMPLAUSIBLE_QUEUE_OFFSET = 2
    _SCAN_ROWS = 256  # rows decoded at a time by verify_scan: one small table, reused, in cache

SCAN_NOT_CONSUMABLE = _SCAN_NOT_CONSUMABLE  # verify_scan: PREPARED or ROLLBACK (no ConsumeQueue unit)
SCAN_IMPLAUSIBLE_QUEUE_OFFSET = _SCAN_IMPLAUSIBLE_QUEUE_OFFSET  # a queue offset no CommitLog holds

cdef int64_t _verify_rows(const uint8_t *buf, int64_t size, const rs_batch_row *rows, int64_t n,
                          int64_t base, int64_t segment_size, int64_t *offsets, int32_t *sizes,
                          int32_t *queue_ids, int64_t *queue_offsets, uint64_t *keys, int64_t *stamps,
                          uint8_t *flags, uint8_t *units, int *what) noexcept nogil:
    """verify_scan's columns for ``n`` decoded rows; -1, or the first row outside ``buf``."""
    cdef int64_t i, bad, at, q
    cdef uint32_t tx
    cdef bint consumable
    bad = _field_problems(buf, size, rows, n, base, segment_size, flags, keys, what)
    if bad >= 0:
        return bad
    for i in range(n):
        at = base + rows[i].position
        q = rows[i].queue_offset
        offsets[i] = at
        sizes[i] = rows[i].size
        queue_ids[i] = rows[i].queue_id
        queue_offsets[i] = q
        stamps[i] = rows[i].store_timestamp
        tx = <uint32_t>rows[i].sys_flag & RS_SYSFLAG_TRANSACTION_MASK
        consumable = tx != RS_TRANSACTION_PREPARED_TYPE and tx != RS_TRANSACTION_ROLLBACK_TYPE
        units[i] = 0 if consumable else _SCAN_NOT_CONSUMABLE
        if q < 0 or at < 0 or q > at // RS_RECORD_FIXED_LENGTH:
            units[i] |= _SCAN_IMPLAUSIBLE_QUEUE_OFFSET
    return -1


cdef tuple _scan_columns(Py_ssize_t n):
    return (_np.empty(n, dtype=_np.int64), _np.empty(n, dtype=_np.int32), _np.empty(n, dtype=_np.int32),
            _np.empty(n, dtype=_np.int64), _np.empty(n, dtype=_np.uint64), _np.empty(n, dtype=_np.int64),
            _np.empty(n, dtype=_np.uint8), _np.empty(n, dtype=_np.uint8))


def verify_scan(buffer, start=0, end=None, *, int64_t base=0, int64_t segment_size=INT64_MAX,
                max_records=-1):
    """decode_batch with CRCs checked and field_problems in one pass, as columns (see the pure
    twin, rocketstore.format._scan_py.verify_scan). The records are decoded into a small table that stays
    in cache; the scan runs without the GIL, ``buffer`` exported (pinned) meanwhile."""
    cdef Py_buffer src
    cdef int64_t pos, start_pos, c_end, limit, bound, cap, n = 0, got, room, bad = -1, i
    cdef int reason = _STOP_LIMIT, what = 0
    cdef const uint8_t *p
    cdef rs_batch_row *tmp
    cdef int64_t[::1] c_off, c_qoff, c_ts
    cdef int32_t[::1] c_size, c_qid
    cdef uint64_t[::1] c_key
    cdef uint8_t[::1] c_flag, c_unit
    _get_readable(buffer, &src)
    tmp = <rs_batch_row *>PyMem_Malloc(_SCAN_ROWS * sizeof(rs_batch_row))
    if tmp == NULL:
        PyBuffer_Release(&src)
        raise MemoryError()
    try:
        c_end = _scan_end(start, end, max_records, src.len)
        pos = start
        start_pos = pos
        p = <const uint8_t *>src.buf
        bound = (c_end - pos) // RS_RECORD_FIXED_LENGTH   # as decode_batch: no more rows than this
        limit = -1
        if 0 <= max_records <= bound:
            limit = max_records
            bound = limit
        cap = min(bound, 4096)
        cols = _scan_columns(max(cap, 1))
        while True:
            c_off, c_size, c_qid, c_qoff, c_key, c_ts, c_flag, c_unit = cols
            with nogil:
                while True:
                    room = min(<int64_t>_SCAN_ROWS, cap - n)
                    got = _scan_rows_out_of_line(p, &pos, c_end, tmp, room, -1 if limit < 0 else limit - n, 1, &reason,
                                                 -1)
                    if got > 0:
                        bad = _verify_rows(p, src.len, tmp, got, base, segment_size, &c_off[n], &c_size[n],
                                           &c_qid[n], &c_qoff[n], &c_key[n], &c_ts[n], &c_flag[n],
                                           &c_unit[n], &what)
                        if bad >= 0:
                            break
                        n += got
                    if reason != _STOP_NEED_ROOM or n >= cap:
                        break
            if bad >= 0:   # cannot happen: _scan's rows lie inside the buffer
                raise CorruptRecordError(f"record {n + bad} at {tmp[bad].position} lies outside the buffer")
            if reason != _STOP_NEED_ROOM:
                break
            if cap >= bound:
                raise AssertionError("verify_scan found more records than fit in its range")
            # as decode_batch: grow once to what the rest of the range holds at the mean size so far
            cap = min(bound, max(cap * 2, n + (c_end - pos) * n // max(pos - start_pos, 1) * 9 // 8 + 16))
            grown = _scan_columns(cap)
            for i in range(8):
                grown[i][:n] = cols[i][:n]
            cols = grown
        return tuple(c[:n] if n != len(c) else c for c in cols), pos, reason
    finally:
        PyMem_Free(tmp)
        PyBuffer_Release(&src)


# ---------------------------------------------------------------------------------------------
# ConsumeQueue units checked against the records verify found

UNIT_OK, UNIT_BAD, UNIT_LOST = 0, 1, 2   # check_units' verdicts
DEF _NO_UNIT_SALT = 0x9E3779B97F4A7C15     # record_digests: a record that gets no unit
DEF _PLACEHOLDER_SIZE = 0x7FFFFFFF          # consumequeue.PLACEHOLDER_SIZE


cdef inline uint64_t _mix64(uint64_t z) noexcept nogil:
    """splitmix64's finalizer."""
    z = (z ^ (z >> 30)) * <uint64_t>0xBF58476D1CE4E5B9ULL
    z = (z ^ (z >> 27)) * <uint64_t>0x94D049BB133111EBULL
    return z ^ (z >> 31)


cdef inline uint64_t _unit_digest(uint64_t key, int32_t queue_id, int64_t queue_offset,
                                  int32_t size) noexcept nogil:
    cdef uint64_t inner = _mix64((<uint64_t><uint32_t>queue_id << 32) | <uint64_t><uint32_t>size)
    inner = _mix64(<uint64_t>queue_offset ^ inner)
    return _mix64(key ^ inner)


def record_digests(queue_ids, queue_offsets, sizes, keys, units):
    """One uint64 per record (verify_scan's columns): a 64-bit digest of its queue key, queue
    id, queue offset and size, which :func:`check_units` checks each ConsumeQueue unit against.
    A record whose ``units`` entry is not 0 (verify_scan's: it gets no unit) has a salted
    digest, which no unit's matches (but by a 64-bit collision, as the queue key's own)."""
    cdef const int32_t[::1] qid_v = _np.ascontiguousarray(queue_ids, dtype=_np.int32)
    cdef const int64_t[::1] qoff_v = _np.ascontiguousarray(queue_offsets, dtype=_np.int64)
    cdef const int32_t[::1] size_v = _np.ascontiguousarray(sizes, dtype=_np.int32)
    cdef const uint64_t[::1] key_v = _np.ascontiguousarray(keys, dtype=_np.uint64)
    cdef const uint8_t[::1] unit_v = _np.ascontiguousarray(units, dtype=_np.uint8)
    cdef Py_ssize_t n = qid_v.shape[0], i
    if not (qoff_v.shape[0] == size_v.shape[0] == key_v.shape[0] == unit_v.shape[0] == n):
        raise ValueError("the records' columns differ in length")
    out = _np.empty(n, dtype=_np.uint64)
    cdef uint64_t[::1] d = out
    with nogil:
        for i in range(n):
            d[i] = _unit_digest(key_v[i], qid_v[i], qoff_v[i], size_v[i])
            if unit_v[i]:
                d[i] ^= <uint64_t>_NO_UNIT_SALT
    return out


cdef inline int64_t _lower_bound(const int64_t *a, int64_t lo, int64_t hi, int64_t x) noexcept nogil:
    """The first index in [lo, hi) of sorted ``a`` whose value is not below x (hi: none)."""
    cdef int64_t at
    while lo < hi:
        at = lo + (hi - lo) // 2
        if a[at] < x:
            lo = at + 1
        else:
            hi = at
    return lo


cdef inline bint _sorted_has(const int64_t *a, int64_t n, int64_t x) noexcept nogil:
    cdef int64_t at = _lower_bound(a, 0, n, x)
    return at < n and a[at] == x


cdef void _check_units(const int64_t *positions, const uint64_t *digests, int64_t n, const uint8_t *units,
                       int64_t m, int32_t queue_id, uint64_t key, int64_t first, const int64_t *damaged,
                       int64_t n_damaged, int64_t low, uint8_t *out) noexcept nogil:
    """check_units' loop: each unit's record found by a search that starts where the previous
    unit's was (a queue's units ascend: usually a step or two forward), else by bisection."""
    cdef int64_t i, lo = 0, hi, step, at, x
    cdef int32_t size
    cdef bint ok
    for i in range(m):
        x = <int64_t>_be64(units + i * 20)
        size = <int32_t>_be32(units + i * 20 + 8)
        if x == 0 and size == _PLACEHOLDER_SIZE:
            out[i] = 2
            continue
        if lo >= n or (n > 0 and positions[lo] > x):
            lo = 0   # units out of order (damage): search from the start
        step = 1     # gallop forward from lo, then bisect [lo, hi)
        hi = lo + 1
        while hi < n and positions[hi] < x:
            lo = hi
            step *= 2
            hi = lo + step
        if hi > n:
            hi = n
        lo = _lower_bound(positions, lo, hi, x)
        at = lo
        ok = at < n and positions[at] == x and digests[at] == _unit_digest(key, queue_id, first + i, size)
        out[i] = 0 if ok or x < low or _sorted_has(damaged, n_damaged, x) else 1


def check_units(positions, digests, units, int32_t queue_id, key, int64_t first_queue_offset, damaged,
                int64_t low):
    """UNIT_OK, UNIT_BAD or UNIT_LOST for each ConsumeQueue unit of ``units`` (see the pure twin,
    rocketstore.format._scan_py.check_units), in one walk without the GIL: each unit's record is found by
    a search that starts where the previous unit's was."""
    cdef const int64_t[::1] pos_v = _np.ascontiguousarray(positions, dtype=_np.int64)
    cdef const uint64_t[::1] dig_v = _np.ascontiguousarray(digests, dtype=_np.uint64)
    cdef const int64_t[::1] bad_v = _np.ascontiguousarray(damaged, dtype=_np.int64)
    cdef int64_t n = pos_v.shape[0], m, n_bad = bad_v.shape[0]
    cdef uint64_t c_key = <uint64_t>key
    cdef const uint8_t[::1] raw
    if dig_v.shape[0] != n:
        raise ValueError(f"{dig_v.shape[0]} digests for {n} records")
    if not isinstance(units, _np.ndarray) or units.dtype != _CQ_UNIT_DTYPE or units.ndim != 1:
        raise ValueError("units must be a 1-d array of CQ_UNIT_DTYPE")
    m = len(units)
    out = _np.zeros(m, dtype=_np.uint8)
    if m == 0:
        return out
    raw = _np.ascontiguousarray(units).view(_np.uint8)
    cdef uint8_t[::1] o = out
    with nogil:
        _check_units(&pos_v[0] if n else NULL, &dig_v[0] if n else NULL, n, &raw[0], m, queue_id, c_key,
                     first_queue_offset, &bad_v[0] if n_bad else NULL, n_bad, low, &o[0])
    return out


# ---------------------------------------------------------------------------------------------
# Grouping by queue: a grouping by key checked, each queue's offset range

def same_queues(buffer, records, representatives):
    """True when every record ``i`` has the topic bytes and queue id of record
    ``representatives[i]`` (int64 row numbers into ``records``). Out-of-range row numbers raise
    IndexError; a topic outside ``buffer`` raises CorruptRecordError."""
    cdef Py_buffer src, rec_view
    cdef int64_t n, i, r
    cdef const rs_batch_row *rows
    cdef const int64_t[::1] reps
    records = _check_table("records", records, RECORD_DTYPE, "RECORD_DTYPE")
    reps = _np.ascontiguousarray(representatives, dtype=_np.int64)
    n = len(records)
    if reps.shape[0] != n:
        raise ValueError(f"{reps.shape[0]} representatives for {n} records")
    for i in range(n):
        if reps[i] < 0 or reps[i] >= n:
            raise IndexError(f"representative {reps[i]} of record {i} is not a row of the {n} records")
    _get_readable(buffer, &src)
    try:
        PyObject_GetBuffer(records, &rec_view, PyBUF_SIMPLE)
        try:
            rows = <const rs_batch_row *>rec_view.buf
            for i in range(n):
                if rows[i].topic_pos < 0 or rows[i].topic_len < 0 or \
                        rows[i].topic_pos > src.len - rows[i].topic_len:
                    raise _outside(i, rows[i].position, "topic", rows[i].topic_pos, rows[i].topic_len,
                                   src.len)
            for i in range(n):
                r = reps[i]
                if rows[i].queue_id != rows[r].queue_id or rows[i].topic_len != rows[r].topic_len:
                    return False
                if memcmp(<const uint8_t *>src.buf + rows[i].topic_pos,
                          <const uint8_t *>src.buf + rows[r].topic_pos, rows[i].topic_len) != 0:
                    return False
            return True
        finally:
            PyBuffer_Release(&rec_view)
    finally:
        PyBuffer_Release(&src)


cdef int64_t _queue_ranges(const uint8_t *base, int64_t size, const rs_batch_row *rows, int64_t n,
                           const uint64_t *keys, int64_t *table, uint64_t mask, int64_t *first,
                           int64_t *low, int64_t *high, int64_t *groups, bint units_only,
                           int64_t commitlog_base) noexcept nogil:
    """Group rows by key in an open-addressing table (``mask + 1`` slots, all -1, more than
    ``n``): ``first``/``low``/``high`` per group, in order of first appearance, the count in
    ``groups``; ``units_only``: only rows that get a ConsumeQueue unit (see queue_ranges, whose
    ``base`` is ``commitlog_base``). -1 when done, -2 when two queues share a key, -3 - i when
    row i's topic lies outside ``base[0 .. size)``."""
    cdef int64_t i, g = 0, r, q, at
    cdef uint64_t slot
    cdef uint32_t tx
    for i in range(n):
        if rows[i].topic_pos < 0 or rows[i].topic_len < 0 or rows[i].topic_pos > size - rows[i].topic_len:
            return -3 - i
    for i in range(n):
        q = rows[i].queue_offset
        if units_only:  # as dispatch.consumable and dispatch.plausible
            tx = <uint32_t>rows[i].sys_flag & RS_SYSFLAG_TRANSACTION_MASK
            if tx == RS_TRANSACTION_PREPARED_TYPE or tx == RS_TRANSACTION_ROLLBACK_TYPE:
                continue
            at = commitlog_base + rows[i].position
            if q < 0 or at < 0 or q > at // RS_RECORD_FIXED_LENGTH:
                continue
        slot = keys[i] & mask
        while True:
            r = table[slot]
            if r < 0:
                table[slot] = g
                first[g] = i
                low[g] = q
                high[g] = q
                g += 1
                break
            if keys[first[r]] == keys[i]:
                if (rows[first[r]].queue_id != rows[i].queue_id or rows[first[r]].topic_len != rows[i].topic_len
                        or memcmp(base + rows[first[r]].topic_pos, base + rows[i].topic_pos,
                                  rows[i].topic_len) != 0):
                    return -2
                if q < low[r]:
                    low[r] = q
                if q > high[r]:
                    high[r] = q
                break
            slot = (slot + 1) & mask
    groups[0] = g
    return -1


def queue_ranges(buffer, records, keys, base=None):
    """``(first, low, high)`` of each (topic, queue id) among ``records``, in one pass without a
    sort (see the pure twin, rocketstore.format._scan_py.queue_ranges); None when two queues share a
    key."""
    cdef Py_buffer src, rec_view
    cdef int64_t n, bad, groups = 0
    cdef uint64_t cap = 16
    cdef bint units_only = base is not None
    cdef int64_t c_base = 0 if base is None else base
    cdef const rs_batch_row *rows
    cdef const uint64_t[::1] k
    cdef int64_t[::1] table, first, low, high
    records = _check_table("records", records, RECORD_DTYPE, "RECORD_DTYPE")
    k = _np.ascontiguousarray(keys, dtype=_np.uint64)
    n = len(records)
    if k.shape[0] != n:
        raise ValueError(f"{k.shape[0]} keys for {n} records")
    while cap < 2 * <uint64_t>n:
        cap *= 2
    table_a = _np.full(cap, -1, dtype=_np.int64)
    first_a, low_a, high_a = (_np.empty(max(n, 1), dtype=_np.int64) for _ in range(3))
    table, first, low, high = table_a, first_a, low_a, high_a
    _get_readable(buffer, &src)
    try:
        PyObject_GetBuffer(records, &rec_view, PyBUF_SIMPLE)
        try:
            rows = <const rs_batch_row *>rec_view.buf
            if n == 0:
                bad = -1
            else:
                with nogil:
                    bad = _queue_ranges(<const uint8_t *>src.buf, src.len, rows, n, &k[0], &table[0],
                                        cap - 1, &first[0], &low[0], &high[0], &groups, units_only,
                                        c_base)
            if bad <= -3:
                bad = -3 - bad
                raise _outside(bad, rows[bad].position, "topic", rows[bad].topic_pos, rows[bad].topic_len,
                               src.len)
        finally:
            PyBuffer_Release(&rec_view)
    finally:
        PyBuffer_Release(&src)
    if bad == -2:
        return None
    return first_a[:groups].copy(), low_a[:groups].copy(), high_a[:groups].copy()


# ---- recovery scan at disk speed: one call decodes, checks and groups a stretch of records ----
# What CommitLog.recover needs of each chunk, without a RECORD_DTYPE table: the
# records are decoded into a small table that stays in cache (as verify_scan does), the crash's
# torn-field check and the per-queue offset ranges are taken from it in the same pass.


cdef struct _RecoverGroup:
    uint64_t key
    int64_t topic_pos
    int32_t topic_len
    int32_t queue_id
    int64_t low
    int64_t high


cdef struct _RecoverRanges:
    _RecoverGroup *groups
    int64_t count
    int64_t room
    int64_t *table    # open addressing: index into groups, -1 empty; mask + 1 slots
    uint64_t mask
    bint collided     # two queues share a key: the caller groups exactly instead


cdef int _ranges_grow(_RecoverRanges *r) noexcept nogil:
    """Double the groups' room and the table (rehashed); -1 when out of memory."""
    cdef int64_t room = 16 if r.room == 0 else r.room * 2
    cdef uint64_t slots = <uint64_t>room * 2, slot
    cdef int64_t i
    cdef int64_t *table
    cdef _RecoverGroup *groups = <_RecoverGroup *>_realloc(r.groups, room * sizeof(_RecoverGroup))
    if groups == NULL:
        return -1
    r.groups = groups
    r.room = room
    table = <int64_t *>_realloc(r.table, slots * sizeof(int64_t))
    if table == NULL:
        return -1
    r.table = table
    r.mask = slots - 1
    for slot in range(slots):
        table[slot] = -1
    for i in range(r.count):
        slot = groups[i].key & r.mask
        while table[slot] >= 0:
            slot = (slot + 1) & r.mask
        table[slot] = i
    return 0


cdef int _ranges_add(_RecoverRanges *r, const uint8_t *buf, const rs_batch_row *row, uint64_t key,
                     int64_t commitlog_base) noexcept nogil:
    """Count ``row`` in its queue's range if it gets a ConsumeQueue unit (queue_ranges with a
    base); -1 when out of memory. The row's topic lies inside ``buf`` (checked by the caller)."""
    cdef uint32_t tx = <uint32_t>row.sys_flag & RS_SYSFLAG_TRANSACTION_MASK
    cdef int64_t q = row.queue_offset, at = commitlog_base + row.position, g
    cdef uint64_t slot
    cdef _RecoverGroup *grp
    if tx == RS_TRANSACTION_PREPARED_TYPE or tx == RS_TRANSACTION_ROLLBACK_TYPE:
        return 0
    if q < 0 or at < 0 or q > at // RS_RECORD_FIXED_LENGTH:
        return 0
    if r.collided:
        return 0
    if r.count >= r.room:
        if _ranges_grow(r) < 0:
            return -1
    slot = key & r.mask
    while True:
        g = r.table[slot]
        if g < 0:
            grp = &r.groups[r.count]
            grp.key = key
            grp.topic_pos = row.topic_pos
            grp.topic_len = row.topic_len
            grp.queue_id = row.queue_id
            grp.low = q
            grp.high = q
            r.table[slot] = r.count
            r.count += 1
            return 0
        grp = &r.groups[g]
        if grp.key == key:
            if (grp.queue_id != row.queue_id or grp.topic_len != row.topic_len
                    or memcmp(buf + grp.topic_pos, buf + row.topic_pos, row.topic_len) != 0):
                r.collided = True
                return 0
            if q < grp.low:
                grp.low = q
            if q > grp.high:
                grp.high = q
            return 0
        slot = (slot + 1) & r.mask


cdef enum:
    _RECOVER_OK = 0
    _RECOVER_NO_MEMORY = 1
    _RECOVER_OUTSIDE = 2   # cannot happen: _scan's rows lie inside the buffer
    _RECOVER_TORN_STOP = 4   # the stop reason of a torn record: STOP_CORRUPT (checked below)

assert <int>_RECOVER_TORN_STOP == <int>_STOP_CORRUPT


cdef int _recover_rows(const uint8_t *buf, int64_t size, rs_batch_row *rows, int64_t *got_io,
                       int64_t base, int64_t segment_size, int64_t torn_from, int torn_mask,
                       uint8_t *flags, uint64_t *keys, _RecoverRanges *ranges, bint *torn) noexcept nogil:
    """The torn-field check of rows at or past ``torn_from`` (the first torn row ends the rows:
    ``got_io`` is cut there and ``torn`` set), then the rows' queue keys and ranges."""
    cdef int64_t got = got_io[0], first = got, i, bad
    cdef int what = 0
    if torn_mask:
        first = 0
        while first < got and rows[first].position < torn_from:
            first += 1
        if first < got:
            # computes the keys of rows first .. got too (one pass over their topics)
            bad = _field_problems(buf, size, rows + first, got - first, base, segment_size, flags,
                                  keys + first, &what)
            if bad >= 0:
                return _RECOVER_OUTSIDE
            for i in range(first, got):
                if flags[i - first] & torn_mask:
                    got_io[0] = got = i
                    torn[0] = True
                    break
    # the keys of the rows the torn-field check did not see
    if _queue_keys(buf, size, rows, min(first, got), keys) >= 0:
        return _RECOVER_OUTSIDE
    for i in range(got):
        if _ranges_add(ranges, buf, &rows[i], keys[i], base) < 0:
            return _RECOVER_NO_MEMORY
    return _RECOVER_OK


def recover_scan(buffer, start=0, end=None, *, int64_t base=0, int64_t segment_size=INT64_MAX,
                 int64_t torn_from=INT64_MAX, int torn_mask=0, max_records=-1):
    """What recovery needs of ``buffer[start:end]`` in one pass: ``(count, stop, reason, torn,
    ranges)`` (see the pure twin, rocketstore.format._scan_py.recover_scan). The records are decoded
    into a small table that stays in cache, and the torn-field check and each queue's range are
    taken from it in the same pass; the scan runs without the GIL, ``buffer`` exported (pinned)
    meanwhile."""
    cdef Py_buffer src
    cdef int64_t pos, c_end, limit, bound, n = 0, got, i
    cdef int reason = _STOP_LIMIT, status = _RECOVER_OK
    cdef bint torn = False
    cdef const uint8_t *p
    cdef rs_batch_row *tmp = NULL
    cdef uint8_t *flags = NULL
    cdef uint64_t *keys = NULL
    cdef _RecoverRanges ranges
    memset(&ranges, 0, sizeof(ranges))
    _get_readable(buffer, &src)
    try:
        c_end = _scan_end(start, end, max_records, src.len)
        pos = start
        p = <const uint8_t *>src.buf
        bound = (c_end - pos) // RS_RECORD_FIXED_LENGTH   # as decode_batch: no more rows than this
        limit = -1
        if 0 <= max_records <= bound:
            limit = max_records
        tmp = <rs_batch_row *>PyMem_Malloc(_SCAN_ROWS * sizeof(rs_batch_row))
        flags = <uint8_t *>PyMem_Malloc(_SCAN_ROWS)
        keys = <uint64_t *>PyMem_Malloc(_SCAN_ROWS * sizeof(uint64_t))
        if tmp == NULL or flags == NULL or keys == NULL:
            raise MemoryError()
        with nogil:
            while True:
                got = _scan_rows_out_of_line(p, &pos, c_end, tmp, _SCAN_ROWS, -1 if limit < 0 else limit - n, 1,
                                             &reason, -1)
                if got > 0:
                    status = _recover_rows(p, src.len, tmp, &got, base, segment_size, torn_from,
                                           torn_mask, flags, keys, &ranges, &torn)
                    if status != _RECOVER_OK:
                        break
                    n += got
                    if torn:
                        pos = tmp[got].position
                        reason = _RECOVER_TORN_STOP
                        break
                if reason != _STOP_NEED_ROOM:
                    break
        if status == _RECOVER_NO_MEMORY:
            raise MemoryError()
        if status == _RECOVER_OUTSIDE:
            raise CorruptRecordError(f"a record near position {pos} lies outside the buffer")
        out = None
        if not ranges.collided:
            out = [(ranges.groups[i].topic_pos, ranges.groups[i].topic_len, ranges.groups[i].queue_id,
                    ranges.groups[i].low, ranges.groups[i].high) for i in range(ranges.count)]
        return n, pos, reason, torn, out
    finally:
        _free(ranges.groups)
        _free(ranges.table)
        PyMem_Free(keys)
        PyMem_Free(flags)
        PyMem_Free(tmp)
        PyBuffer_Release(&src)
