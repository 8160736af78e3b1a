# cython: language_level=3, embedsignature=True
"""IndexFile slot chaining (compiled twin of rocketstore._index_py).

The format and the put / chain-walk code live in cext/index.h (plain C on the mapped bytes); this
module wraps them for Python with the same names, exceptions and messages as the pure-Python twin,
whose docstring carries the layout table.
"""

from cpython.buffer cimport (PyBUF_SIMPLE, PyBUF_STRIDES, PyBUF_WRITABLE, PyBuffer_IsContiguous,
                             PyBuffer_Release, PyObject_CheckBuffer, PyObject_GetBuffer)
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.unicode cimport PyUnicode_DATA, PyUnicode_GET_LENGTH, PyUnicode_KIND
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, INT64_MAX, INT64_MIN
from libc.string cimport memset

from _index cimport *
# The record-batch row layouts and the UTF-8 Java hash, declared once with the codec (cext/record.h):
# plain C declarations, so this module does not import rocketstore._codec.
from _codec cimport rs_batch_row, rs_java_hash_utf8_update, rs_keyref_row

import operator as _operator

import numpy as _np

from rocketstore.errors import CorruptRecordError, StoreConfigError, StoreReadOnlyError
# Not hot paths: one definition, shared with the pure twin.
from rocketstore._index_py import index_file_name, parse_index_file_name
# The dtypes of put_refs' tables: numpy dtypes compare by layout, so the pure twin's are the compiled
# twin's (rocketstore._codec checks its C structs against them at import).
from rocketstore._codec_py import KEYREF_DTYPE, RECORD_DTYPE

cdef extern from *:
    """
    /* PyUnicode_KIND/DATA need a "ready" string; 3.12+ has only ready strings and deprecates READY. */
    #if PY_VERSION_HEX < 0x030C0000
    #define rs_index_unicode_ready(o) PyUnicode_READY(o)
    #else
    #define rs_index_unicode_ready(o) 0
    #endif
    """
    int rs_index_unicode_ready(object o) except -1

__all__ = [
    "IndexFile", "index_file_size", "select_files", "index_file_name", "parse_index_file_name",
    "HEADER_SIZE", "HASH_SLOT_SIZE", "INDEX_ITEM_SIZE", "DEFAULT_SLOT_COUNT", "DEFAULT_INDEX_COUNT",
    "rebuild_slots",
]

# ---- constants, from index.h ----
POS_BEGIN_TIMESTAMP = RS_INDEX_POS_BEGIN_TIMESTAMP
POS_END_TIMESTAMP = RS_INDEX_POS_END_TIMESTAMP
POS_BEGIN_PHY_OFFSET = RS_INDEX_POS_BEGIN_PHY_OFFSET
POS_END_PHY_OFFSET = RS_INDEX_POS_END_PHY_OFFSET
POS_HASH_SLOT_COUNT = RS_INDEX_POS_HASH_SLOT_COUNT
POS_INDEX_COUNT = RS_INDEX_POS_INDEX_COUNT
HEADER_SIZE = RS_INDEX_HEADER_SIZE
HASH_SLOT_SIZE = RS_INDEX_HASH_SLOT_SIZE
ITEM_POS_KEY_HASH = RS_INDEX_ITEM_POS_KEY_HASH
ITEM_POS_PHY_OFFSET = RS_INDEX_ITEM_POS_PHY_OFFSET
ITEM_POS_TIME_DIFF = RS_INDEX_ITEM_POS_TIME_DIFF
ITEM_POS_PREV_INDEX = RS_INDEX_ITEM_POS_PREV_INDEX
INDEX_ITEM_SIZE = RS_INDEX_INDEX_ITEM_SIZE
DEFAULT_SLOT_COUNT = RS_INDEX_DEFAULT_SLOT_COUNT
DEFAULT_INDEX_COUNT = RS_INDEX_DEFAULT_INDEX_COUNT
INVALID_INDEX = RS_INDEX_INVALID_INDEX
MAX_TIME_DIFF = RS_INDEX_MAX_TIME_DIFF

# select() collects phyOffsets from C in batches of this many.
cdef enum:
    _SELECT_BATCH = 64

# put_refs: from this many keys on it runs without the GIL; why a key failed its check.
cdef enum:
    _NOGIL_PUT_KEYS = 64
    _BAD_RECORD = 1
    _BAD_POSITION = 2
    _BAD_OFFSET = 3
    _BAD_TOPIC = 4
    _BAD_KEY = 5

if sizeof(rs_keyref_row) != KEYREF_DTYPE.itemsize or sizeof(rs_batch_row) != RECORD_DTYPE.itemsize:
    raise ImportError("rs_keyref_row / rs_batch_row do not match KEYREF_DTYPE / RECORD_DTYPE")


def index_file_size(slots=DEFAULT_SLOT_COUNT, items=DEFAULT_INDEX_COUNT):
    """Bytes of an index file: ``40 + 4*slots + 20*items`` (420,000,040 for the defaults)."""
    return HEADER_SIZE + slots * HASH_SLOT_SIZE + items * INDEX_ITEM_SIZE


cdef int32_t _key_hash(object key) except -1:
    if not isinstance(key, str):
        raise TypeError(f"index key must be str, not {type(key).__name__}")
    rs_index_unicode_ready(key)
    # the kinds are 1, 2 and 4: the bytes per code point
    return rs_index_key_hash(PyUnicode_DATA(key), <int>PyUnicode_KIND(key), PyUnicode_GET_LENGTH(key))


cdef object _check_table(str name, object table, object dtype, str dtype_name):
    """``table`` as a C-contiguous 1-D array of exactly ``dtype`` (TypeError otherwise)."""
    if not isinstance(table, _np.ndarray) or table.ndim != 1 or table.dtype != dtype:
        raise TypeError(f"{name} must be a one-dimensional numpy array of {dtype_name}")
    return _np.ascontiguousarray(table)


cdef int _get_readable(object buffer, Py_buffer *view) except -1:
    if not PyObject_CheckBuffer(buffer):
        raise TypeError(f"buffer must be a bytes-like object, not {type(buffer).__name__}")
    PyObject_GetBuffer(buffer, view, PyBUF_STRIDES)
    if not PyBuffer_IsContiguous(view, b'C'):
        PyBuffer_Release(view)
        raise TypeError("buffer must be C-contiguous")
    return 0


cdef int64_t _i64(str name, object value) except? -1:
    value = _operator.index(value)
    if not INT64_MIN <= value <= INT64_MAX:
        raise OverflowError(f"{name} {value} does not fit a Java long")
    return value


cdef int64_t _check_refs(int64_t size, const rs_batch_row *rows, int64_t nrows, const rs_keyref_row *keys,
                         int64_t start, int64_t n, int64_t base_offset, int *why) noexcept nogil:
    """The first key of keys[start..n) that names no record, or whose record's position or topic,
    or its own bytes, lie outside base[0..size) (*why says which), or -1 when all are fine."""
    cdef int64_t k
    cdef const rs_keyref_row *key
    cdef const rs_batch_row *r
    for k in range(start, n):
        key = &keys[k]
        if key.record < 0 or key.record >= nrows:
            why[0] = _BAD_RECORD
            return k
        r = &rows[key.record]
        if r.position < 0 or r.position >= size:
            why[0] = _BAD_POSITION
            return k
        if base_offset > 0 and r.position > INT64_MAX - base_offset:
            why[0] = _BAD_OFFSET
            return k
        if r.topic_pos < 0 or r.topic_len < 0 or r.topic_pos > size - r.topic_len:
            why[0] = _BAD_TOPIC
            return k
        if key.key_pos < 0 or key.key_len < 0 or key.key_pos > size - key.key_len:
            why[0] = _BAD_KEY
            return k
    return -1


cdef int64_t _put_refs(rs_index_t *ix, const uint8_t *base, const rs_batch_row *rows,
                       const rs_keyref_row *keys, int64_t start, int64_t n, int64_t base_offset) noexcept nogil:
    """Store keys[start..n) (all checked by _check_refs); return the first one the full file refused, or n.
    The hash of topic "#" key runs over the topic, '#' and the key where they lie, once per record."""
    cdef int64_t k, record = -1
    cdef uint32_t topic_hash = 0, h
    cdef const rs_keyref_row *key
    cdef const rs_batch_row *r = NULL
    for k in range(start, n):
        key = &keys[k]
        if key.record != record:
            record = key.record
            r = &rows[record]
            topic_hash = 31u * rs_java_hash_utf8_update(0, base + r.topic_pos, r.topic_len) + <uint32_t>b'#'
        h = rs_java_hash_utf8_update(topic_hash, base + key.key_pos, key.key_len)
        if not rs_index_put(ix, rs_index_hash_of_java(<int32_t>h), base_offset + r.position, r.store_timestamp):
            return k
    return n


cdef object _bad_ref(int why, int64_t k, const rs_keyref_row *keys, const rs_batch_row *rows, int64_t nrows,
                     int64_t base_offset, int64_t size):
    """The exception for key k, which failed _check_refs' check ``why`` (the pure twin's messages)."""
    cdef const rs_keyref_row *key = &keys[k]
    cdef int64_t row = key.record
    if why == _BAD_RECORD:
        return CorruptRecordError(f"key {k} names record {row}; there are {nrows} records")
    cdef const rs_batch_row *r = &rows[row]
    # Python ints from here: a start plus a length may not fit an int64
    cdef object topic_pos = r.topic_pos, key_pos = key.key_pos
    if why == _BAD_POSITION:
        return CorruptRecordError(f"key {k}: record {row} at position {r.position} lies outside "
                                  f"the buffer of {size} bytes")
    if why == _BAD_OFFSET:
        return OverflowError(f"key {k}: CommitLog offset {base_offset} + {r.position} does not fit "
                             f"a Java long")
    if why == _BAD_TOPIC:
        return CorruptRecordError(f"key {k}: the topic bytes [{topic_pos}, {topic_pos + r.topic_len}) "
                                  f"of record {row} lie outside the buffer of {size} bytes")
    return CorruptRecordError(f"key {k}: its bytes [{key_pos}, {key_pos + key.key_len}) lie "
                              f"outside the buffer of {size} bytes")


cdef int32_t _count_arg(str name, object value) except -1:
    value = _operator.index(value)
    if not 1 <= value <= 0x7FFFFFFF:
        raise StoreConfigError(f"{name} must be in 1..{0x7FFFFFFF}, got {value}")
    return <int32_t>value


cdef class IndexFile:
    """One index file over ``buffer`` (exactly ``index_file_size(slot_count, index_count)`` bytes).

    A read-only buffer allows queries only. The buffer stays exported until :meth:`release`.
    """

    # The export pins the buffer: while held, ix.base stays valid (the map cannot be closed or
    # resized), so every method may use it without re-checking anything but `held`.
    cdef Py_buffer _view
    cdef bint _held
    cdef bint _writable
    cdef rs_index_t _ix

    def __init__(self, buffer, slot_count=DEFAULT_SLOT_COUNT, index_count=DEFAULT_INDEX_COUNT):
        cdef int32_t slots = _count_arg("slot_count", slot_count)
        cdef int32_t items = _count_arg("index_count", index_count)
        cdef int64_t size = rs_index_file_size(slots, items)
        cdef Py_ssize_t nbytes
        self.release()
        PyObject_GetBuffer(buffer, &self._view, PyBUF_SIMPLE)
        if self._view.len != size:
            nbytes = self._view.len
            PyBuffer_Release(&self._view)
            raise StoreConfigError(f"index file buffer is {nbytes} bytes, expected {size} "
                                   f"for {slots} slots and {items} items")
        self._held = True
        self._writable = not self._view.readonly
        self._ix.base = <uint8_t *>self._view.buf
        self._ix.len = self._view.len
        self._ix.slot_num = slots
        self._ix.index_num = items

    def __dealloc__(self):
        if self._held:
            PyBuffer_Release(&self._view)
            self._held = False

    # ---- lifetime ----

    def release(self):
        """Stop using the buffer and drop the export, so its map can be closed; idempotent."""
        if self._held:
            self._held = False
            self._ix.base = NULL
            self._ix.len = 0
            PyBuffer_Release(&self._view)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.release()

    cdef inline int _check(self) except -1:
        if not self._held:
            raise ValueError("IndexFile is released")
        return 0

    cdef inline int _check_writable(self) except -1:
        self._check()
        if not self._writable:
            raise StoreReadOnlyError("index file buffer is read-only")
        return 0

    def __repr__(self):
        if not self._held:
            return f"<IndexFile slots={self._ix.slot_num} items={self._ix.index_num} released>"
        return (f"<IndexFile slots={self._ix.slot_num} items={self._ix.index_num} "
                f"index_count={self.index_count}>")

    # ---- configuration and header ----

    @property
    def slot_num(self):
        """Slots in the table (Java ``hashSlotNum``), as configured."""
        return self._ix.slot_num

    @property
    def index_num(self):
        """Items the file has room for, item 0 included (Java ``indexNum``), as configured."""
        return self._ix.index_num

    @property
    def writable(self):
        """Whether the buffer accepts puts."""
        return self._writable

    @property
    def begin_timestamp(self):
        self._check()
        return rs_index_header_i64(&self._ix, RS_INDEX_POS_BEGIN_TIMESTAMP)

    @property
    def end_timestamp(self):
        self._check()
        return rs_index_header_i64(&self._ix, RS_INDEX_POS_END_TIMESTAMP)

    @property
    def begin_phy_offset(self):
        self._check()
        return rs_index_header_i64(&self._ix, RS_INDEX_POS_BEGIN_PHY_OFFSET)

    @property
    def end_phy_offset(self):
        self._check()
        return rs_index_header_i64(&self._ix, RS_INDEX_POS_END_PHY_OFFSET)

    @property
    def hash_slot_count(self):
        self._check()
        return rs_index_header_i32(&self._ix, RS_INDEX_POS_HASH_SLOT_COUNT)

    @property
    def index_count(self):
        """The next item number: 1 for an empty file (a header value <= 0 reads as 1)."""
        self._check()
        return rs_index_count(&self._ix)

    @property
    def is_full(self):
        self._check()
        return bool(rs_index_is_full(&self._ix))

    def init_from(self, prev):
        """Start where ``prev`` (the previous, full file) ended: begin = end = its end values (§5.4).

        Like Java, each pair is set only when the previous value is > 0.
        """
        self._check_writable()
        cdef int64_t end_phy = prev.end_phy_offset
        cdef int64_t end_ts = prev.end_timestamp
        if end_phy > 0:
            rs_index_put_i64(self._ix.base + RS_INDEX_POS_BEGIN_PHY_OFFSET, end_phy)
            rs_index_put_i64(self._ix.base + RS_INDEX_POS_END_PHY_OFFSET, end_phy)
        if end_ts > 0:
            rs_index_put_i64(self._ix.base + RS_INDEX_POS_BEGIN_TIMESTAMP, end_ts)
            rs_index_put_i64(self._ix.base + RS_INDEX_POS_END_TIMESTAMP, end_ts)

    def is_time_matched(self, int64_t begin, int64_t end):
        """Whether ``[begin, end]`` overlaps the file's time range (Java ``isTimeMatched``)."""
        self._check()
        cdef int64_t file_begin = rs_index_header_i64(&self._ix, RS_INDEX_POS_BEGIN_TIMESTAMP)
        cdef int64_t file_end = rs_index_header_i64(&self._ix, RS_INDEX_POS_END_TIMESTAMP)
        return ((begin < file_begin and end > file_end)
                or file_begin <= begin <= file_end
                or file_begin <= end <= file_end)

    # ---- putKey ----

    def put_key(self, key, int64_t phy_offset, int64_t store_timestamp):
        """Index ``key`` for the record at ``phy_offset``; False when the file is full (§5.3)."""
        self._check_writable()
        return bool(rs_index_put(&self._ix, _key_hash(key), phy_offset, store_timestamp))

    def put_keys(self, keys, int64_t phy_offset, int64_t store_timestamp):
        """Index several keys of one record in order; returns how many fit (stops when full).

        Every key is checked before the first is stored, so a bad key stores none.
        """
        self._check_writable()
        cdef object seq = keys if type(keys) is list or type(keys) is tuple else list(keys)
        cdef Py_ssize_t i, n
        cdef object key
        cdef bint is_list = type(seq) is list
        for key in seq:
            if not isinstance(key, str):
                raise TypeError(f"index key must be str, not {type(key).__name__}")
        n = PyList_GET_SIZE(seq) if is_list else PyTuple_GET_SIZE(seq)
        for i in range(n):
            key = <object>(PyList_GET_ITEM(seq, i) if is_list else PyTuple_GET_ITEM(seq, i))
            if not rs_index_put(&self._ix, _key_hash(key), phy_offset, store_timestamp):
                return i
        return n

    def put_refs(self, buffer, records, keys, base_offset, start=0):
        """Index ``keys[start:]`` as ``put_key`` would, key by key; returns where the file filled.

        ``records`` (RECORD_DTYPE, from the codec's ``decode_batch``) and ``keys`` (KEYREF_DTYPE,
        from its ``dispatch_info``) locate their bytes in ``buffer``, which starts at CommitLog
        offset ``base_offset``. Key ``k`` is stored as ``put_key(topic + "#" + key,
        base_offset + records[k.record].position, records[k.record].store_timestamp)``.
        Returns the index in ``keys`` of the first key not stored because the file is full, or
        ``len(keys)`` when all were stored.

        Every key from ``start`` on is checked before the first is stored, so bad input stores
        nothing: a record number outside ``records``, or a position, topic or key outside
        ``buffer`` raises CorruptRecordError; an offset beyond a Java long, OverflowError.
        Large batches run without the GIL, with every buffer (this file's too) pinned.
        """
        cdef Py_buffer src, rec_view, key_view, pin
        cdef int64_t offset, first, n, nrows, bad, stored
        cdef int why = 0
        cdef rs_index_t ix
        cdef const rs_batch_row *rows
        cdef const rs_keyref_row *refs
        self._check_writable()
        records = _check_table("records", records, RECORD_DTYPE, "RECORD_DTYPE")
        keys = _check_table("keys", keys, KEYREF_DTYPE, "KEYREF_DTYPE")
        offset = _i64("base_offset", base_offset)
        start = _operator.index(start)
        n = len(keys)
        if not 0 <= start <= n:
            raise ValueError(f"start {start} is out of range for {n} keys")
        first = start
        nrows = len(records)
        _get_readable(buffer, &src)
        try:
            PyObject_GetBuffer(records, &rec_view, PyBUF_SIMPLE)
            try:
                PyObject_GetBuffer(keys, &key_view, PyBUF_SIMPLE)
                try:
                    rows = <const rs_batch_row *>rec_view.buf
                    refs = <const rs_keyref_row *>key_view.buf
                    if n - first < _NOGIL_PUT_KEYS:
                        bad = _check_refs(src.len, rows, nrows, refs, first, n, offset, &why)
                        if bad < 0:
                            stored = _put_refs(&self._ix, <const uint8_t *>src.buf, rows, refs, first, n, offset)
                    else:
                        # A second export of the map pins it through the nogil block even if another
                        # thread calls release() meanwhile.
                        PyObject_GetBuffer(self._view.obj, &pin, PyBUF_WRITABLE)
                        try:
                            ix = self._ix
                            if <uint8_t *>pin.buf != ix.base or pin.len != ix.len:
                                raise ValueError("index file buffer moved")   # pragma: no cover
                            with nogil:
                                bad = _check_refs(src.len, rows, nrows, refs, first, n, offset, &why)
                                if bad < 0:
                                    stored = _put_refs(&ix, <const uint8_t *>src.buf, rows, refs, first, n, offset)
                        finally:
                            PyBuffer_Release(&pin)
                    if bad >= 0:
                        raise _bad_ref(why, bad, refs, rows, nrows, offset, src.len)
                    return stored
                finally:
                    PyBuffer_Release(&key_view)
            finally:
                PyBuffer_Release(&rec_view)
        finally:
            PyBuffer_Release(&src)

    # ---- selectPhyOffset ----

    def select(self, key, int64_t max_num, int64_t begin, int64_t end):
        """Up to ``max_num`` phyOffsets of items whose key hash equals ``key``'s, stored within
        ``[begin, end]`` (ms), newest first (Java ``selectPhyOffset``, §5.5).

        Only hashes are compared: the caller re-checks the real key. A corrupt slot or chain
        (pointer out of range, a cycle) ends the walk.
        """
        self._check()
        cdef list found = []
        _walk(&self._ix, _key_hash(key), begin, end, max_num, found)
        return found


cdef int64_t _walk(rs_index_t *ix, int32_t key_hash, int64_t begin, int64_t end, int64_t limit,
                   list found) except -1:
    """Append to ``found`` up to ``limit`` phyOffsets of the items of ``key_hash`` stored within
    ``[begin, end]``, newest first (one file's walk); how many."""
    cdef rs_index_walk_t walk
    cdef int64_t out[_SELECT_BATCH]
    cdef int64_t got, i, added = 0
    rs_index_walk_start(ix, &walk, key_hash, begin, end)
    while added < limit and walk.cur != RS_INDEX_INVALID_INDEX:
        got = rs_index_walk_next(ix, &walk, out, min(limit - added, _SELECT_BATCH))
        for i in range(got):
            found.append(out[i])
        added += got
    return added


def select_files(files, key, max_num, begin, end):
    """§5.5 ``queryOffset`` over ``files`` in one call (see the pure twin,
    rocketstore._index_py.select_files)."""
    cdef int32_t key_hash = _key_hash(key)
    cdef int64_t left = max_num if type(max_num) is int else _operator.index(max_num)
    cdef int64_t lo = begin, hi = end, file_begin, file_end
    cdef Py_ssize_t i, n = len(files)
    cdef IndexFile ix
    cdef list found = []
    last_timestamp = last_phy_offset = 0
    for i in range(n - 1, -1, -1):
        ix = files[i].index
        ix._check()
        if i == n - 1:
            last_timestamp = rs_index_header_i64(&ix._ix, RS_INDEX_POS_END_TIMESTAMP)
            last_phy_offset = rs_index_header_i64(&ix._ix, RS_INDEX_POS_END_PHY_OFFSET)
        if left <= 0:
            break
        file_begin = rs_index_header_i64(&ix._ix, RS_INDEX_POS_BEGIN_TIMESTAMP)
        file_end = rs_index_header_i64(&ix._ix, RS_INDEX_POS_END_TIMESTAMP)
        if (lo < file_begin and hi > file_end) or file_begin <= lo <= file_end or file_begin <= hi <= file_end:
            left -= _walk(&ix._ix, key_hash, lo, hi, left, found)
        if file_begin < lo or left <= 0:
            break
    found.sort()
    return found, last_timestamp, last_phy_offset


def rebuild_slots(buffer, int64_t slot_count, int64_t count):
    """Rewrite the slot table of the index file held in ``buffer`` (writable: header,
    ``slot_count`` slots, then items) from its items 1 .. ``count - 1``: each slot holds the
    number of the newest item whose key hash maps to it (Java's ``keyHash % slotNum``), 0 for
    none. One pass over the items; what an abnormal open's roll back to a resume point needs."""
    cdef Py_buffer view
    cdef uint8_t *base
    cdef const uint8_t *item
    cdef uint8_t *slot
    cdef int64_t items_start, i, at
    cdef int32_t h
    if slot_count <= 0 or count < 1:
        raise ValueError(f"slot_count {slot_count} and count {count} must be positive")
    if not PyObject_CheckBuffer(buffer):
        raise TypeError(f"buffer must be a writable bytes-like object, not {type(buffer).__name__}")
    try:
        PyObject_GetBuffer(buffer, &view, PyBUF_WRITABLE)
    except BufferError:
        raise TypeError("buffer is read-only") from None
    try:
        items_start = RS_INDEX_HEADER_SIZE + slot_count * RS_INDEX_HASH_SLOT_SIZE
        if slot_count > (view.len - RS_INDEX_HEADER_SIZE) // RS_INDEX_HASH_SLOT_SIZE or \
                count > (view.len - items_start) // RS_INDEX_INDEX_ITEM_SIZE:
            raise ValueError(f"{slot_count} slots and {count} items do not fit in {view.len} bytes")
        base = <uint8_t *>view.buf
        with nogil:
            memset(base + RS_INDEX_HEADER_SIZE, 0, slot_count * RS_INDEX_HASH_SLOT_SIZE)
            for i in range(1, count):   # ascending: the newest item of a slot is written last
                item = base + items_start + i * RS_INDEX_INDEX_ITEM_SIZE + RS_INDEX_ITEM_POS_KEY_HASH
                h = <int32_t>((<uint32_t>item[0] << 24) | (<uint32_t>item[1] << 16) | (<uint32_t>item[2] << 8)
                              | <uint32_t>item[3])
                at = h % slot_count
                if at < 0:
                    at += slot_count   # as numpy's (and Python's) modulo: never a negative slot
                slot = base + RS_INDEX_HEADER_SIZE + at * RS_INDEX_HASH_SLOT_SIZE
                slot[0] = (i >> 24) & 0xFF
                slot[1] = (i >> 16) & 0xFF
                slot[2] = (i >> 8) & 0xFF
                slot[3] = i & 0xFF
    finally:
        PyBuffer_Release(&view)
