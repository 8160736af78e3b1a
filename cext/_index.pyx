# cython: language_level=3, embedsignature=True
"""IndexFile slot chaining (compiled twin of rocketstore.queues._index_py).

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
from libc.stdlib cimport calloc as _calloc, free as _free

from _index cimport *
# The record-batch row layouts and the UTF-8 Java hash, declared once with the codec (cext/record.h):
# plain C declarations, so this module does not import rocketstore.format._codec.
from _codec cimport rs_batch_row, rs_java_hash_utf8_update, rs_keyref_row

import operator as _operator

import numpy as _np

from rocketstore.errors import CorruptRecordError, StoreConfigError, StoreReadOnlyError
# Not hot paths: one definition, shared with the pure twin.
from rocketstore.queues._index_py import index_file_name, parse_index_file_name
# The dtypes of put_refs' tables: numpy dtypes compare by layout, so the pure twin's are the compiled
# twin's (rocketstore.format._codec checks its C structs against them at import).
from rocketstore.format._record_py import KEYREF_DTYPE, RECORD_DTYPE

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
    rocketstore.queues._index_py.select_files)."""
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
    none. One pass over the items; what an abnormal open's roll back to a resume point needs.

    The table is computed aside and only the slots that differ are written, so the pages whose
    slots are right already stay clean (a roll back undoes only what came after the resume
    point). Returns ``(lo, hi)``: the byte range of ``buffer`` that was written (``lo == hi``:
    none), what needs an msync."""
    cdef Py_buffer view
    cdef uint8_t *base
    cdef const uint8_t *item
    cdef uint8_t *slot
    cdef int32_t *heads
    cdef int64_t items_start, i, at, lo = 0, hi = 0
    cdef int32_t h
    cdef uint32_t stored
    if slot_count <= 0 or count < 1:
        raise ValueError(f"slot_count {slot_count} and count {count} must be positive")
    if not PyObject_CheckBuffer(buffer):
        raise TypeError(f"buffer must be a writable bytes-like object, not {type(buffer).__name__}")
    try:
        PyObject_GetBuffer(buffer, &view, PyBUF_WRITABLE)
    except BufferError:
        raise TypeError("buffer is read-only") from None
    heads = NULL
    try:
        items_start = RS_INDEX_HEADER_SIZE + slot_count * RS_INDEX_HASH_SLOT_SIZE
        if slot_count > (view.len - RS_INDEX_HEADER_SIZE) // RS_INDEX_HASH_SLOT_SIZE or \
                count > (view.len - items_start) // RS_INDEX_INDEX_ITEM_SIZE:
            raise ValueError(f"{slot_count} slots and {count} items do not fit in {view.len} bytes")
        heads = <int32_t *>_calloc(<size_t>slot_count, sizeof(int32_t))
        if heads == NULL:
            raise MemoryError()
        base = <uint8_t *>view.buf
        with nogil:
            for i in range(1, count):   # ascending: the newest item of a slot is written last
                item = base + items_start + i * RS_INDEX_INDEX_ITEM_SIZE + RS_INDEX_ITEM_POS_KEY_HASH
                h = <int32_t>((<uint32_t>item[0] << 24) | (<uint32_t>item[1] << 16) | (<uint32_t>item[2] << 8)
                              | <uint32_t>item[3])
                at = h % slot_count
                if at < 0:
                    at += slot_count   # as numpy's (and Python's) modulo: never a negative slot
                heads[at] = <int32_t>i
            for at in range(slot_count):
                slot = base + RS_INDEX_HEADER_SIZE + at * RS_INDEX_HASH_SLOT_SIZE
                stored = (<uint32_t>slot[0] << 24) | (<uint32_t>slot[1] << 16) | (<uint32_t>slot[2] << 8) \
                    | <uint32_t>slot[3]
                if stored == <uint32_t>heads[at]:
                    continue
                i = heads[at]
                slot[0] = (i >> 24) & 0xFF
                slot[1] = (i >> 16) & 0xFF
                slot[2] = (i >> 8) & 0xFF
                slot[3] = i & 0xFF
                if hi == 0:
                    lo = slot - base
                hi = slot - base + RS_INDEX_HASH_SLOT_SIZE
    finally:
        _free(heads)
        PyBuffer_Release(&view)
    return lo, hi


# ==== fused dispatch: CommitLog records -> ConsumeQueue units + index items, one C pass ====
#
# dispatch_fused() carries the common case of rocketstore.queues.dispatch.Dispatcher._dispatch (records
# appended in order at the end of queues it was handed, keys into the last index file's reserved
# room) without a decode table, a per-chunk grouping or a Python object per record. It stops
# *before* any record that needs more (a damaged or blank position, a queue it was not handed or
# whose end is elsewhere, a full file or reservation, a queue offset plausible() refuses, a record
# the index may hold already), and the general path dispatches that one; so the files it writes are
# byte for byte those of the general path.

from _codec cimport (rs_record, rs_decode_record, rs_dispatch_props, rs_dispatch_properties,
                     rs_parse_java_int, rs_java_hash_utf8, RS_SCHEDULE_TOPIC, RS_SCHEDULE_TOPIC_LEN,
                     RS_KEY_SEPARATOR, RS_SYSFLAG_TRANSACTION_MASK, RS_TRANSACTION_PREPARED_TYPE,
                     RS_TRANSACTION_ROLLBACK_TYPE, RS_RECORD_FIXED_LENGTH)
from libc.string cimport memcmp, memcpy
from libc.stdint cimport uint64_t, INT32_MIN, INT32_MAX

cdef extern from "index.h" nogil:
    int64_t rs_index_item_pos(const rs_index_t *ix, int32_t n)
    int64_t rs_index_slot_pos(const rs_index_t *ix, int32_t key_hash)
    int rs_index_put_at(rs_index_t *ix, int32_t key_hash, int64_t slot_pos, int64_t phy_offset,
                        int64_t store_timestamp)

cdef extern from *:
    void __builtin_prefetch(const void *addr, int rw) noexcept nogil
from cpython.mem cimport PyMem_Malloc, PyMem_Free

#: why dispatch_fused stopped: its range's end or its record limit; no whole record at the stop
#: position (the general path's decode says why); the record there needs the general path; its
#: unit or keys need more of their file allocated (ask the windows again)
FUSED_DONE = 0
FUSED_UNDECODED = 1
FUSED_GENERAL = 2
FUSED_ROOM = 3

#: columns of dispatch_fused's queue table (int64, one row per queue): where the topic's bytes lie
#: in the names blob, the queue id, the queue offset of the unit at byte 0 of the unit buffer, the
#: write position (bytes, in and out) in its last file, the end of the room it may write there
#: (bytes), and, out: start + size of its last unit and how many units it wrote
FQ_TOPIC_POS, FQ_TOPIC_LEN, FQ_QUEUE_ID, FQ_FIRST_UNIT, FQ_WRITE_POS, FQ_LIMIT, FQ_MAX_PHYSIC, FQ_WRITTEN = range(8)
#: and: how many of ``units`` are this queue's files (its last ones, oldest first: the last is where
#: units are appended, those before serve a re-dispatch's comparisons), and the units of a file
FQ_FILES, FQ_UNITS_PER_FILE = 8, 9
FQ_COLUMNS = 10

cdef enum:
    _FQ_TOPIC_POS = 0
    _FQ_TOPIC_LEN = 1
    _FQ_QUEUE_ID = 2
    _FQ_FIRST_UNIT = 3
    _FQ_WRITE_POS = 4
    _FQ_LIMIT = 5
    _FQ_MAX_PHYSIC = 6
    _FQ_WRITTEN = 7
    _FQ_FILES = 8
    _FQ_UNITS_PER_FILE = 9
    _FQ_COLUMNS = 10
    _CQ_UNIT_SIZE = 20

ctypedef struct _fused_queue:
    const uint8_t *topic
    int64_t topic_len
    int32_t queue_id
    int64_t next_offset      # the queue offset the next unit must carry
    uint8_t *units           # the last file's map: appends go there
    int64_t units_len
    const uint8_t **files    # the queue's last files, oldest first (the last is units)
    int64_t nfiles
    int64_t first_unit       # queue offset of the first unit of files[0]
    int64_t units_per_file
    int64_t write_pos
    int64_t limit
    int64_t max_physic
    int64_t written


cdef inline uint64_t _fused_hash(const uint8_t *topic, int64_t n, int32_t queue_id) noexcept nogil:
    cdef uint64_t h = 1469598103934665603ULL ^ <uint32_t>queue_id
    cdef int64_t i
    for i in range(n):
        h = (h ^ topic[i]) * 1099511628211ULL
    return h ^ (h >> 29)


cdef inline uint32_t _fused_java_hash(uint32_t h, const uint8_t *s, int64_t n) noexcept nogil:
    """rs_java_hash_utf8_update(h, s, n), eight ASCII bytes a step: h * 31**8 + the bytes' terms
    (mod 2**32) breaks the multiply chain a byte at a time is. From the first block holding a
    non-ASCII byte on, the byte-wise hash (the boundary follows an ASCII byte: no UTF-8
    sequence spans it)."""
    cdef int64_t i = 0
    cdef uint64_t word
    while i + 8 <= n:
        memcpy(&word, s + i, 8)
        if word & 0x8080808080808080ULL:
            break
        h = (h * 0x94446F01u   # 31**8 mod 2**32, then 31**7 .. 31**0 for the bytes in order
             + s[i] * 0x67E12CDFu + s[i + 1] * 0x34E63B41u + s[i + 2] * 0x1B4D89Fu
             + s[i + 3] * 0xE1781u + s[i + 4] * 0x745Fu + s[i + 5] * 0x3C1u
             + s[i + 6] * 31u + s[i + 7])
        i += 8
    return rs_java_hash_utf8_update(h, s + i, n - i)


# The index puts of a pass wait in a ring of _KEY_RING keys, their hash slots prefetched: a slot
# is a random 4 bytes of a 20 MB table, a cache miss that stalled the pass (two thirds of its time
# on one load), and the ring lets a few dozen of them overlap. Puts leave the ring in order, so
# the index file is byte for byte the same; the pass counts the waiting keys as stored.
cdef enum:
    _KEY_RING = 32       # a power of two

ctypedef struct _key_ring:
    int32_t hash[_KEY_RING]
    int64_t slot[_KEY_RING]      # rs_index_slot_pos of the hash: computed once, for the prefetch
    int64_t phy[_KEY_RING]
    int64_t ts[_KEY_RING]
    int head
    int n


cdef inline void _ring_put_first(_key_ring *r, rs_index_t *ix) noexcept nogil:
    rs_index_put_at(ix, r.hash[r.head], r.slot[r.head], r.phy[r.head], r.ts[r.head])
    r.head = (r.head + 1) & (_KEY_RING - 1)
    r.n -= 1


cdef inline void _ring_push(_key_ring *r, rs_index_t *ix, int32_t key_hash, int64_t phy, int64_t ts) noexcept nogil:
    """Queue one key for rs_index_put (every check it needs already passed), putting the oldest
    first when the ring is full."""
    cdef int at
    cdef int64_t slot_pos = rs_index_slot_pos(ix, key_hash)
    if slot_pos >= 0:
        __builtin_prefetch(ix.base + slot_pos, 1)
    if r.n == _KEY_RING:
        _ring_put_first(r, ix)
    at = (r.head + r.n) & (_KEY_RING - 1)
    r.hash[at] = key_hash
    r.slot[at] = slot_pos
    r.phy[at] = phy
    r.ts[at] = ts
    r.n += 1


cdef inline void _fused_put_unit(uint8_t *p, int64_t phy, int32_t size, int64_t tags) noexcept nogil:
    cdef int i
    for i in range(8):
        p[i] = <uint8_t>((<uint64_t>phy >> (56 - 8 * i)) & 0xFF)
    for i in range(4):
        p[8 + i] = <uint8_t>((<uint32_t>size >> (24 - 8 * i)) & 0xFF)
    for i in range(8):
        p[12 + i] = <uint8_t>((<uint64_t>tags >> (56 - 8 * i)) & 0xFF)


cdef int64_t _fused_run(const uint8_t *src, int64_t pos, int64_t hi, int64_t base, int64_t max_records,
                        _fused_queue *queues, const int32_t *slots, uint64_t mask,
                        rs_index_t *ix, int64_t index_limit, const int64_t *delays, int64_t max_level,
                        int64_t *out_pos, int64_t *out_ts, int *reason) noexcept nogil:
    """Dispatch the records of src[pos..hi) (src is CommitLog offset base); returns how many."""
    cdef int64_t n = 0, rc, phy, tags_code, level_ms, at, j, first, key_count, count, end_phy
    cdef int64_t ts = out_ts[0]
    cdef rs_record rec
    cdef rs_dispatch_props found
    cdef int32_t tx, level, slot
    cdef uint64_t h
    cdef uint32_t topic_hash, kh
    cdef _fused_queue *q
    cdef const uint8_t *props
    cdef const uint8_t *value
    cdef _key_ring ring
    ring.head = 0
    ring.n = 0
    reason[0] = 0
    while pos < hi and n < max_records:
        rc = rs_decode_record(src + pos, hi - pos, &rec, 0)
        if rc <= 0:
            reason[0] = 1
            break
        phy = base + pos
        # plausible(): a queue offset no CommitLog can hold is logged by the general path
        if rec.queue_offset < 0 or rec.queue_offset > phy // RS_RECORD_FIXED_LENGTH:
            reason[0] = 2
            break
        tx = rec.sys_flag & RS_SYSFLAG_TRANSACTION_MASK
        props = rec.properties
        rs_dispatch_properties(props, rec.properties_len, &found)
        tags_code = 0
        if found.tags_pos >= 0:
            tags_code = rs_java_hash_utf8(props + found.tags_pos, found.tags_len)
        if found.delay_pos >= 0 and rs_parse_java_int(props + found.delay_pos, found.delay_len, &level):
            if (rec.topic_len == RS_SCHEDULE_TOPIC_LEN
                    and memcmp(rec.topic, RS_SCHEDULE_TOPIC, RS_SCHEDULE_TOPIC_LEN) == 0):
                level_ms = level if level < max_level else max_level
                if level_ms > 0:   # Java long arithmetic wraps
                    tags_code = <int64_t>(<uint64_t>rec.store_timestamp + <uint64_t>delays[level_ms - 1])
        q = NULL
        if tx != RS_TRANSACTION_PREPARED_TYPE and tx != RS_TRANSACTION_ROLLBACK_TYPE:
            h = _fused_hash(rec.topic, rec.topic_len, rec.queue_id)
            while True:
                slot = slots[h & mask]
                if slot < 0:
                    break
                q = &queues[slot]
                if (q.queue_id == rec.queue_id and q.topic_len == rec.topic_len
                        and memcmp(q.topic, rec.topic, <size_t>rec.topic_len) == 0):
                    break
                q = NULL
                h += 1
            if q == NULL:
                reason[0] = 2
                break
            if rec.queue_offset < q.next_offset:
                # a re-dispatch (recovery without a checkpoint): a unit already pointing at this
                # record is left alone; any other (or one in a file not at hand) is the general
                # path's to compare, rewrite and report
                at = rec.queue_offset - q.first_unit
                if at < 0 or at // q.units_per_file >= q.nfiles:
                    reason[0] = 2
                    break
                j = at // q.units_per_file
                value = q.files[j] + (at - j * q.units_per_file) * _CQ_UNIT_SIZE
                if (rs_index_get_i64(value) != phy
                        or rs_index_get_i32(value + 8) != rec.total_size):
                    reason[0] = 2
                    break
                q = NULL   # nothing to write
            elif rec.queue_offset != q.next_offset:
                reason[0] = 2
                break
            elif q.write_pos + _CQ_UNIT_SIZE > q.limit:
                reason[0] = 3
                break
        key_count = 0
        if tx != RS_TRANSACTION_ROLLBACK_TYPE:
            if found.uniq_key_pos >= 0:
                key_count = 1
            if found.keys_pos >= 0:
                value = props + found.keys_pos
                for j in range(found.keys_len):
                    if value[j] != RS_KEY_SEPARATOR and (j == 0 or value[j - 1] != RS_KEY_SEPARATOR):
                        key_count += 1
        if key_count:
            if ix == NULL:
                reason[0] = 2
                break
            count = rs_index_count(ix) + ring.n
            # (with keys in the ring, the header's end lies below them, so below this record too)
            end_phy = rs_index_header_i64(ix, RS_INDEX_POS_END_PHY_OFFSET)
            # IndexService._already_indexed: the general path skips such a record's keys
            if phy < end_phy or (phy == end_phy and count > 1 and count < ix.index_num):
                key_count = 0
            elif (count + key_count > ix.index_num
                    or rs_index_item_pos(ix, <int32_t>(count + key_count - 1)) < 0):
                reason[0] = 2
                break
            elif count + key_count > index_limit:
                reason[0] = 3
                break
        # every check passed: write the unit, then the keys (which can no longer be refused)
        if q != NULL:
            _fused_put_unit(q.units + q.write_pos, phy, rec.total_size, tags_code)
            q.write_pos += _CQ_UNIT_SIZE
            q.next_offset += 1
            q.max_physic = phy + rec.total_size
            q.written += 1
        if key_count:
            topic_hash = 31u * _fused_java_hash(0, rec.topic, rec.topic_len) + <uint32_t>b'#'
            if found.uniq_key_pos >= 0:
                kh = _fused_java_hash(topic_hash, props + found.uniq_key_pos, found.uniq_key_len)
                _ring_push(&ring, ix, rs_index_hash_of_java(<int32_t>kh), phy, rec.store_timestamp)
            if found.keys_pos >= 0:
                value = props + found.keys_pos
                j = 0
                while j < found.keys_len:
                    if value[j] == RS_KEY_SEPARATOR:
                        j += 1
                        continue
                    first = j
                    while j < found.keys_len and value[j] != RS_KEY_SEPARATOR:
                        j += 1
                    kh = _fused_java_hash(topic_hash, value + first, j - first)
                    _ring_push(&ring, ix, rs_index_hash_of_java(<int32_t>kh), phy, rec.store_timestamp)
        ts = rec.store_timestamp
        n += 1
        pos += rc
    while ring.n:
        _ring_put_first(&ring, ix)
    out_pos[0] = pos
    out_ts[0] = ts
    return n


def dispatch_fused(buffer, int64_t lo, int64_t hi, int64_t base_offset, int64_t max_records, names,
                   table, units, IndexFile index, int64_t index_limit, delays):
    """Dispatch the records of ``buffer[lo:hi]`` (``buffer`` starts at CommitLog offset
    ``base_offset``) into the queues of ``table`` and into ``index``, as far as the fast case goes.

    ``table`` (int64, ``FQ_COLUMNS`` columns, one row per queue, C-contiguous) locates each queue's
    topic bytes in ``names``; ``units`` holds each queue's last ``FQ_FILES`` files in turn (writable
    buffers of ``FQ_UNITS_PER_FILE`` units each, oldest first, the first holding queue offset
    ``FQ_FIRST_UNIT``); the next unit goes into the last one at ``FQ_WRITE_POS``, within
    ``FQ_LIMIT``. On return each row's write position, max physic offset and units written are
    updated. A record whose unit lies below the end is compared with the unit there: the same
    record, and it is left alone. ``index`` (or None: a record with keys then stops the run) takes
    the keys while its item count stays within ``index_limit``. ``delays``: the delay table (ms,
    level n at n - 1).

    Returns ``(stop, reason, records, last_store_timestamp)``: the scan stopped at ``stop`` (a
    position in ``buffer``) with ``reason`` FUSED_DONE (``hi`` or ``max_records`` reached),
    FUSED_UNDECODED (no whole record there), FUSED_GENERAL (that record needs the general
    dispatch) or FUSED_ROOM (its unit or keys need more of their file allocated); ``records``
    were dispatched (``last_store_timestamp`` of the last, 0 for none).
    """
    cdef Py_buffer src, names_view, table_view, pin
    cdef Py_buffer *unit_views = NULL
    cdef const uint8_t **file_bases = NULL
    cdef _fused_queue *queues = NULL
    cdef int32_t *slots = NULL
    cdef int64_t *delay_table = NULL
    cdef int64_t nq, nunits, i, k, f, first_file, nslots, max_level, stop = lo, ts = 0, done = 0
    cdef int64_t file_bytes
    cdef int64_t *row
    cdef uint64_t h, mask
    cdef int reason = 0
    cdef int64_t held = 0
    cdef bint have_index = index is not None
    cdef bint pinned = False
    cdef rs_index_t ix
    if not isinstance(table, _np.ndarray) or table.dtype != _np.int64 or table.ndim != 2 \
            or table.shape[1] != _FQ_COLUMNS or not table.flags.c_contiguous:
        raise TypeError("table must be a C-contiguous int64 array of FQ_COLUMNS columns")
    nq = table.shape[0]
    units = list(units)
    nunits = len(units)
    if max_records < 0:
        raise ValueError("max_records must not be negative")
    delay_list = _np.asarray(delays, dtype=_np.int64).reshape(-1)
    max_level = len(delay_list)
    _get_readable(buffer, &src)
    try:
        if not 0 <= lo <= hi <= src.len:
            raise ValueError(f"range [{lo}, {hi}) is out of bounds for a buffer of {src.len} bytes")
        if base_offset < 0 or base_offset > INT64_MAX - src.len:
            raise OverflowError(f"base offset {base_offset} does not fit a Java long")
        _get_readable(names, &names_view)
        try:
            PyObject_GetBuffer(table, &table_view, PyBUF_WRITABLE)
            try:
                nslots = 4
                while nslots < 2 * nq:
                    nslots *= 2
                mask = <uint64_t>(nslots - 1)
                unit_views = <Py_buffer *>PyMem_Malloc(<size_t>(nunits if nunits else 1) * sizeof(Py_buffer))
                file_bases = <const uint8_t **>PyMem_Malloc(<size_t>(nunits if nunits else 1) * sizeof(uint8_t *))
                queues = <_fused_queue *>PyMem_Malloc(<size_t>(nq if nq else 1) * sizeof(_fused_queue))
                slots = <int32_t *>PyMem_Malloc(<size_t>nslots * sizeof(int32_t))
                delay_table = <int64_t *>PyMem_Malloc(<size_t>(max_level if max_level else 1) * sizeof(int64_t))
                if (unit_views == NULL or file_bases == NULL or queues == NULL or slots == NULL
                        or delay_table == NULL):
                    raise MemoryError()
                for i in range(max_level):
                    delay_table[i] = delay_list[i]
                for i in range(nslots):
                    slots[i] = -1
                try:
                    for i in range(nunits):
                        PyObject_GetBuffer(units[i], &unit_views[i], PyBUF_WRITABLE)
                        held += 1
                        file_bases[i] = <const uint8_t *>unit_views[i].buf
                    first_file = 0
                    for i in range(nq):
                        row = <int64_t *>table_view.buf + i * _FQ_COLUMNS
                        if (row[_FQ_TOPIC_POS] < 0 or row[_FQ_TOPIC_LEN] < 0
                                or row[_FQ_TOPIC_POS] > names_view.len - row[_FQ_TOPIC_LEN]):
                            raise ValueError(f"queue {i}: its topic lies outside the names")
                        if not INT32_MIN <= row[_FQ_QUEUE_ID] <= INT32_MAX:
                            raise ValueError(f"queue {i}: queue id {row[_FQ_QUEUE_ID]} is not an int")
                        if row[_FQ_FILES] < 1 or row[_FQ_FILES] > nunits - first_file:
                            raise ValueError(f"queue {i}: {row[_FQ_FILES]} files, {nunits - first_file} "
                                             f"buffers left")
                        if row[_FQ_UNITS_PER_FILE] < 1 or row[_FQ_UNITS_PER_FILE] > INT64_MAX // _CQ_UNIT_SIZE:
                            raise ValueError(f"queue {i}: {row[_FQ_UNITS_PER_FILE]} units per file")
                        file_bytes = row[_FQ_UNITS_PER_FILE] * _CQ_UNIT_SIZE
                        for f in range(first_file, first_file + row[_FQ_FILES]):
                            if unit_views[f].len < file_bytes:
                                raise ValueError(f"queue {i}: a file of {unit_views[f].len} bytes, not {file_bytes}")
                        f = first_file + row[_FQ_FILES] - 1   # the last file: appends
                        if (row[_FQ_WRITE_POS] < 0 or row[_FQ_WRITE_POS] % _CQ_UNIT_SIZE
                                or row[_FQ_LIMIT] < row[_FQ_WRITE_POS] or row[_FQ_LIMIT] > file_bytes
                                or row[_FQ_FIRST_UNIT] < 0
                                or row[_FQ_FIRST_UNIT] > ((INT64_MAX - file_bytes) // _CQ_UNIT_SIZE
                                                          - row[_FQ_FILES] * row[_FQ_UNITS_PER_FILE])):
                            raise ValueError(f"queue {i}: write position {row[_FQ_WRITE_POS]} and limit "
                                             f"{row[_FQ_LIMIT]} do not fit its {file_bytes}-byte file")
                        queues[i].topic = <const uint8_t *>names_view.buf + row[_FQ_TOPIC_POS]
                        queues[i].topic_len = row[_FQ_TOPIC_LEN]
                        queues[i].queue_id = <int32_t>row[_FQ_QUEUE_ID]
                        queues[i].files = file_bases + first_file
                        queues[i].nfiles = row[_FQ_FILES]
                        queues[i].units_per_file = row[_FQ_UNITS_PER_FILE]
                        queues[i].first_unit = row[_FQ_FIRST_UNIT]
                        queues[i].units = <uint8_t *>unit_views[f].buf
                        queues[i].units_len = file_bytes
                        queues[i].write_pos = row[_FQ_WRITE_POS]
                        queues[i].limit = row[_FQ_LIMIT]
                        queues[i].next_offset = (row[_FQ_FIRST_UNIT] + (row[_FQ_FILES] - 1) * row[_FQ_UNITS_PER_FILE]
                                                 + row[_FQ_WRITE_POS] // _CQ_UNIT_SIZE)
                        queues[i].max_physic = row[_FQ_MAX_PHYSIC]
                        queues[i].written = 0
                        first_file += row[_FQ_FILES]
                        h = _fused_hash(queues[i].topic, queues[i].topic_len, queues[i].queue_id)
                        while slots[h & mask] >= 0:
                            k = slots[h & mask]
                            if (queues[k].queue_id == queues[i].queue_id and queues[k].topic_len == queues[i].topic_len
                                    and memcmp(queues[k].topic, queues[i].topic, <size_t>queues[i].topic_len) == 0):
                                raise ValueError(f"queue {i} is in the table twice")
                            h += 1
                        slots[h & mask] = <int32_t>i
                    if first_file != nunits:
                        raise ValueError(f"{nunits} unit buffers for {first_file} files")
                    if have_index:
                        index._check_writable()
                        # a second export pins the map even if another thread calls release()
                        PyObject_GetBuffer(index._view.obj, &pin, PyBUF_WRITABLE)
                        pinned = True
                        ix = index._ix
                        if <uint8_t *>pin.buf != ix.base or pin.len != ix.len:
                            raise ValueError("index file buffer moved")   # pragma: no cover
                    with nogil:
                        done = _fused_run(<const uint8_t *>src.buf, lo, hi, base_offset, max_records, queues, slots,
                                          mask, &ix if have_index else NULL, index_limit, delay_table, max_level,
                                          &stop, &ts, &reason)
                    for i in range(nq):
                        row = <int64_t *>table_view.buf + i * _FQ_COLUMNS
                        row[_FQ_WRITE_POS] = queues[i].write_pos
                        row[_FQ_MAX_PHYSIC] = queues[i].max_physic
                        row[_FQ_WRITTEN] = queues[i].written
                finally:
                    if pinned:
                        PyBuffer_Release(&pin)
                    for i in range(held):
                        PyBuffer_Release(&unit_views[i])
            finally:
                PyMem_Free(unit_views)
                PyMem_Free(file_bases)
                PyMem_Free(queues)
                PyMem_Free(slots)
                PyMem_Free(delay_table)
                PyBuffer_Release(&table_view)
        finally:
            PyBuffer_Release(&names_view)
    finally:
        PyBuffer_Release(&src)
    return stop, reason, done, ts
