# Timer messages (rocketstore.services.timer): the put's properties, the units' deliver times, the copies
# Part of rocketstore.format._codec: included by cext/_codec.pyx, whose imports and
# constants it uses.


__all__ += ["timer_properties", "timer_units", "timer_copies", "timer_copy_rows"]

from cpython.bytearray cimport PyByteArray_GET_SIZE, PyByteArray_Resize

cdef enum:
    _PREFETCH_AHEAD = 24        # timer_copies reads records this many ahead of the one it builds,
    _PREFETCH_BYTES = 512       # up to this much of each
    _TIMER_MAX_PIECES = 64      # a record with more properties is left to the careful path
    _TIMER_MAX_DIGITS = 18      # a longer decimal may not fit an int64: the careful path parses it

cdef inline Py_ssize_t _decimal(char *out, int64_t value) noexcept:
    """Write ``str(value)`` to ``out`` (room for 20 bytes); returns its length."""
    cdef char tmp[20]
    cdef Py_ssize_t n = 0, k = 0
    cdef uint64_t v = <uint64_t>value
    if value < 0:
        v = <uint64_t>0 - v
        out[k] = 45   # '-'
        k += 1
    while True:
        tmp[n] = <char>(48 + v % 10)   # '0' + digit
        n += 1
        v //= 10
        if v == 0:
            break
    while n:
        n -= 1
        out[k] = tmp[n]
        k += 1
    return k


cdef inline bint _plain_text(const char *p, Py_ssize_t n) noexcept:
    """Whether UTF-8 text can be a property name or value as it is: not empty, no separator."""
    return n > 0 and memchr(p, 1, <size_t>n) == NULL and memchr(p, 2, <size_t>n) == NULL


def timer_properties(name, value, deliver, topic, queue_id):
    """The encoded properties of a timer put with no other properties:
    ``encode_properties({name: str(value), "TIMER_OUT_MS": str(deliver), "REAL_TOPIC": topic,
    "REAL_QID": str(queue_id)})``, built in one buffer; any other shape is the pure twin's."""
    cdef long long v = 0, d = 0, q = 0
    cdef int o1 = 0, o2 = 0, o3 = 0
    cdef Py_ssize_t name_len = 0, topic_len = 0, total
    cdef const char *name_p
    cdef const char *topic_p
    cdef char *p
    cdef bytes out
    if (type(name) is not str or type(topic) is not str or type(value) is not int
            or type(deliver) is not int or type(queue_id) is not int):
        return _timer_properties_slow(name, value, deliver, topic, queue_id)
    v = PyLong_AsLongLongAndOverflow(value, &o1)
    d = PyLong_AsLongLongAndOverflow(deliver, &o2)
    q = PyLong_AsLongLongAndOverflow(queue_id, &o3)
    try:
        name_p = PyUnicode_AsUTF8AndSize(name, &name_len)
        topic_p = PyUnicode_AsUTF8AndSize(topic, &topic_len)
    except UnicodeEncodeError:
        return _timer_properties_slow(name, value, deliver, topic, queue_id)
    if o1 or o2 or o3 or not _plain_text(name_p, name_len) or not _plain_text(topic_p, topic_len):
        return _timer_properties_slow(name, value, deliver, topic, queue_id)
    total = name_len + 1 + 20 + 14 + 20 + 12 + topic_len + 10 + 20 + 1   # an upper bound
    if total > RS_MAX_PROPERTIES_LENGTH:
        return _timer_properties_slow(name, value, deliver, topic, queue_id)
    out = PyBytes_FromStringAndSize(NULL, total)
    p = PyBytes_AS_STRING(out)
    memcpy(p, name_p, name_len)
    p += name_len
    p[0] = 1
    p += 1
    p += _decimal(p, v)
    memcpy(p, b"\x02TIMER_OUT_MS\x01", 14)
    p += 14
    p += _decimal(p, d)
    memcpy(p, b"\x02REAL_TOPIC\x01", 12)
    p += 12
    memcpy(p, topic_p, topic_len)
    p += topic_len
    memcpy(p, b"\x02REAL_QID\x01", 10)
    p += 10
    p += _decimal(p, q)
    p[0] = 2
    p += 1
    return out[:p - PyBytes_AS_STRING(out)]


cdef struct _Piece:
    int64_t name_pos, value_pos
    int32_t name_len, value_len


cdef Py_ssize_t _pieces(const uint8_t *data, int64_t n, _Piece *out, Py_ssize_t room) noexcept:
    """The pieces of a properties string into ``out``, when every piece is one that
    decode_properties keeps (the trailing empty one aside) and there are at most ``room``;
    else -1 (the careful path decides)."""
    cdef int64_t i = 0, end, sep
    cdef const uint8_t *hit
    cdef Py_ssize_t k = 0
    while i < n:
        hit = <const uint8_t *>memchr(data + i, 2, <size_t>(n - i))
        end = (hit - data) if hit != NULL else n
        hit = <const uint8_t *>memchr(data + i, 1, <size_t>(end - i))
        if hit == NULL or k == room:
            return -1
        sep = hit - data
        if not (i < sep < end - 1):
            return -1
        out[k].name_pos = i
        out[k].name_len = <int32_t>(sep - i)
        out[k].value_pos = sep + 1
        out[k].value_len = <int32_t>(end - sep - 1)
        k += 1
        i = end + 1
    return k


cdef inline bint _named(const uint8_t *data, _Piece *piece, const char *name, Py_ssize_t n) noexcept:
    return piece.name_len == n and memcmp(data + piece.name_pos, name, <size_t>n) == 0


cdef int64_t _digits(const uint8_t *p, int32_t n, int max_digits) noexcept:
    """A decimal of 1 .. max_digits ASCII digits (no sign), or -1."""
    cdef int64_t v = 0
    cdef int32_t i
    if n <= 0 or n > max_digits:
        return -1
    for i in range(n):
        if p[i] < 48 or p[i] > 57:   # not '0' .. '9'
            return -1
        v = v * 10 + (p[i] - 48)
    return v


cdef class _SegmentReader:
    """The CommitLog segment last read, kept exported while a call reads records in order."""
    cdef Py_buffer view
    cdef bint held
    cdef int64_t start, readable
    cdef list files
    cdef object core

    cdef int record(self, int64_t offset, rs_record *rec) except -1:
        """Decode (CRC checked) the record at ``offset`` into ``rec``: 1, or 0 when this cannot
        (not in a mapped segment, not a whole valid record)."""
        cdef int64_t start = 0, pos
        cdef MappedState seg
        if offset < 0:
            return 0
        if not (self.held and self.start <= offset < self.start + self.readable):
            self.release()
            seg = _segment_of(self.files, offset, &start)
            if seg is None:
                return 0
            self.readable = _readable(seg, start, self.core)
            self.start = start
            if not _mapped(seg, self.readable, &self.view):
                return 0
            self.held = True
        pos = offset - self.start
        if pos >= self.readable:
            return 0
        return 1 if rs_decode_record(<const uint8_t *>self.view.buf + pos, self.readable - pos, rec, 1) > 0 else 0

    cdef inline void prefetch(self, int64_t offset) noexcept:
        """Start loading the head of the record at ``offset`` if it is in the segment held."""
        cdef int64_t pos = offset - self.start
        if self.held and 0 <= pos < self.readable:
            _prefetch_record(<const uint8_t *>self.view.buf, pos, _PREFETCH_BYTES, self.readable)

    cdef void release(self) noexcept:
        if self.held:
            PyBuffer_Release(&self.view)
            self.held = False

    def __dealloc__(self):
        self.release()


cdef _SegmentReader _reader(segments, core):
    cdef _SegmentReader r = _SegmentReader.__new__(_SegmentReader)
    r.files = _files_of(segments)
    if r.files is None:
        raise TypeError("segments must be a SegmentTable")
    r.core = core
    return r


cdef inline void _wbe64(uint8_t *p, int64_t v) noexcept nogil:
    cdef uint64_t u = <uint64_t>v
    cdef int k
    for k in range(8):
        p[k] = <uint8_t>(u >> (56 - 8 * k))


cdef inline void _wbe32(uint8_t *p, int32_t v) noexcept nogil:
    cdef uint32_t u = <uint32_t>v
    p[0] = <uint8_t>(u >> 24)
    p[1] = <uint8_t>(u >> 16)
    p[2] = <uint8_t>(u >> 8)
    p[3] = <uint8_t>u


cdef int _timer_unit_facts(const uint8_t *props, int32_t n, int32_t *topic_hash,
                           int64_t *out_ms) noexcept:
    """What a timer log unit takes from its record, in one pass over its properties: the magic
    (MAGIC_DEFAULT, with MAGIC_DELETE when it names TIMER_DEL_UNIQKEY), in ``topic_hash`` Java's
    hashCode of REAL_TOPIC (0 when there is none) and in ``out_ms`` its TIMER_OUT_MS as the
    timer service reads it (0 when there is none, -1 when it is not plain digits); -1 when
    REAL_TOPIC is not ASCII (the careful path hashes it). Each the last piece of its name
    decode_properties keeps."""
    cdef int64_t i = 0, end, sep, k, v
    cdef const uint8_t *hit
    cdef int64_t found_pos = -1, found_len = 0, ms_pos = -1
    cdef int32_t ms_len = 0
    cdef int magic = 1
    cdef uint32_t h = 0
    while i <= n:
        hit = <const uint8_t *>memchr(props + i, 2, <size_t>(n - i)) if i < n else NULL
        end = (hit - props) if hit != NULL else n
        if end - i >= 3:
            hit = <const uint8_t *>memchr(props + i, 1, <size_t>(end - i))
            if hit != NULL:
                sep = hit - props
                if i < sep < end - 1:
                    if sep - i == 10 and memcmp(props + i, b"REAL_TOPIC", 10) == 0:
                        found_pos = sep + 1
                        found_len = end - sep - 1
                    elif sep - i == 17 and memcmp(props + i, b"TIMER_DEL_UNIQKEY", 17) == 0:
                        magic = 1 | 4
                    elif sep - i == 12 and memcmp(props + i, b"TIMER_OUT_MS", 12) == 0:
                        ms_pos = sep + 1
                        ms_len = <int32_t>(end - sep - 1)
        i = end + 1
    out_ms[0] = 0
    if ms_pos >= 0:
        v = _digits(props + ms_pos, ms_len, _TIMER_MAX_DIGITS)
        out_ms[0] = v if v >= 0 else -1
    for k in range(found_len):
        if props[found_pos + k] >= 0x80:
            return -1
        h = 31 * h + props[found_pos + k]
    topic_hash[0] = <int32_t>h
    return magic


cdef enum:
    _TIMER_FACT = 28  # the bytes timer_units appends to ``facts`` per unit


def timer_units(units, first_queue_offset, segments, core, facts=None):
    """``(deliver ms, queue offset, CommitLog offset)`` of the timer queue's ``units`` (a
    CQ_UNIT_DTYPE array starting at ``first_queue_offset``; placeholders left out) and the
    indices of those whose deliver ms is None: their record could not be read here, or its
    TIMER_OUT_MS is not plain digits; the careful path reads those (see the pure twin).
    ``facts``, a bytearray, gains per unit what a timer log unit holds (see the pure twin)."""
    cdef Py_buffer table
    cdef const uint8_t *u
    cdef Py_ssize_t n, i, k = 0
    cdef int64_t first = _check_int(first_queue_offset, "first_queue_offset", 0, INT64_MAX)
    cdef int64_t offset, size
    cdef int32_t topic_hash
    cdef int64_t ms
    cdef int magic
    cdef rs_record rec
    cdef list out = [], careful = []
    cdef _SegmentReader reader = _reader(segments, core)
    cdef bytearray more = None
    cdef uint8_t *f = NULL
    if not isinstance(units, _np.ndarray) or units.ndim != 1 or units.dtype.itemsize != _CQ_UNIT:
        raise TypeError("units must be a one-dimensional array of CQ_UNIT_DTYPE")
    if facts is not None and type(facts) is not bytearray:
        raise TypeError("facts must be a bytearray or None")
    units = _np.ascontiguousarray(units)
    PyObject_GetBuffer(units, &table, PyBUF_SIMPLE)
    try:
        n = table.len // _CQ_UNIT
        if facts is not None:
            more = bytearray(n * _TIMER_FACT)
            f = <uint8_t *>PyByteArray_AS_STRING(more)
        for i in range(n):
            u = <const uint8_t *>table.buf + i * _CQ_UNIT
            offset = _be64(u)
            size = _be32(u + 8)
            if offset == 0 and size == _PLACEHOLDER_SIZE:
                continue
            deliver = None
            magic = -1
            topic_hash = 0
            ms = 0
            if reader.record(offset, &rec):   # (the one walk of the properties, with or without facts)
                magic = _timer_unit_facts(rec.properties, rec.properties_len, &topic_hash, &ms)
                if ms >= 0:
                    deliver = ms
                else:
                    ms = 0
            if deliver is None or (f != NULL and magic < 0):
                careful.append(len(out))
            if f != NULL:
                _wbe64(f + k * _TIMER_FACT, ms)
                _wbe64(f + k * _TIMER_FACT + 8, offset)
                _wbe32(f + k * _TIMER_FACT + 16, <int32_t>size)
                _wbe32(f + k * _TIMER_FACT + 20, topic_hash)
                _wbe32(f + k * _TIMER_FACT + 24, magic if magic > 0 else 1)
                k += 1
            out.append((deliver, first + i, offset))
    finally:
        PyBuffer_Release(&table)
        reader.release()
    if more is not None:
        facts += more[: k * _TIMER_FACT]
    return out, careful


cdef bytes _TIMER_TOPIC = b"rmq_sys_wheel_timer"


cdef class _CopyShape:
    """What timer_copies learned from the last record's property names (a producer's records
    share them): which piece is which, the kept ones and their order; and its REAL_TOPIC."""
    cdef bytes sig                     # the names, each followed by \x01; b"" when none yet
    cdef Py_ssize_t npieces, kept_n
    cdef int32_t kept[_TIMER_MAX_PIECES]
    cdef int32_t order[_TIMER_MAX_PIECES + 1]
    cdef int real_topic_i, real_qid_i, out_ms_i, uniq_i
    cdef bytes topic_raw               # the last REAL_TOPIC value and what real_topic() gave
    cdef object topic_found

    cdef bint same(self, const uint8_t *props, _Piece *pieces, Py_ssize_t n) noexcept:
        """Whether ``pieces`` have the names of the last shape, in order."""
        cdef const char *p
        cdef Py_ssize_t k, at = 0, size
        if self.sig is None or n != self.npieces:
            return False
        p = PyBytes_AS_STRING(self.sig)
        size = PyBytes_GET_SIZE(self.sig)
        for k in range(n):
            if (at + pieces[k].name_len >= size or p[at + pieces[k].name_len] != 1
                    or memcmp(p + at, props + pieces[k].name_pos, pieces[k].name_len) != 0):
                return False
            at += pieces[k].name_len + 1
        return at == size

    cdef int learn(self, const uint8_t *props, _Piece *pieces, Py_ssize_t n, dict orders,
                   object order_of) except -1:
        """Take the shape of ``pieces``: 1, or 0 when the careful path decides (a name twice, a
        name not UTF-8, TIMER_DEQUEUE_MS already there, REAL_TOPIC, REAL_QID or TIMER_OUT_MS
        missing)."""
        cdef Py_ssize_t k, j, total = 0
        cdef char *p
        self.sig = None
        self.real_topic_i = self.real_qid_i = self.out_ms_i = self.uniq_i = -1
        self.kept_n = 0
        for k in range(n):
            for j in range(k):   # a name twice: decode_properties keeps the last; careful path
                if (pieces[j].name_len == pieces[k].name_len and memcmp(
                        props + pieces[j].name_pos, props + pieces[k].name_pos, pieces[k].name_len) == 0):
                    return 0
            if (not _utf8_ok(props + pieces[k].name_pos, pieces[k].name_len)
                    or _named(props, &pieces[k], "TIMER_DEQUEUE_MS", 16)):
                return 0
            if _named(props, &pieces[k], "REAL_TOPIC", 10):
                self.real_topic_i = k
            elif _named(props, &pieces[k], "REAL_QID", 8):
                self.real_qid_i = k
            elif not _named(props, &pieces[k], "__CRC32#", 8):
                if _named(props, &pieces[k], "TIMER_OUT_MS", 12):
                    self.out_ms_i = k
                elif _named(props, &pieces[k], "UNIQ_KEY", 8):
                    self.uniq_i = k
                self.kept[self.kept_n] = <int32_t>k
                self.kept_n += 1
            total += pieces[k].name_len + 1
        if self.real_topic_i < 0 or self.real_qid_i < 0 or self.out_ms_i < 0:
            return 0
        # the kept names, in order, \x01-joined (no name holds \x01): the key of their order
        key_len = 0
        for k in range(self.kept_n):
            key_len += pieces[self.kept[k]].name_len + 1
        key = PyBytes_FromStringAndSize(NULL, key_len)
        p = PyBytes_AS_STRING(key)
        for k in range(self.kept_n):
            memcpy(p, props + pieces[self.kept[k]].name_pos, pieces[self.kept[k]].name_len)
            p += pieces[self.kept[k]].name_len
            p[0] = 1
            p += 1
        order = orders.get(key)
        if order is None:
            if len(orders) >= 4096:
                orders.clear()
            order = order_of(tuple(_utf8(props + pieces[self.kept[k]].name_pos, pieces[self.kept[k]].name_len)
                                   for k in range(self.kept_n)))
            orders[key] = order
        # checked whether computed or cached: the copy is written by these indices
        if type(order) is not tuple or len(<tuple>order) != self.kept_n + 1:
            raise ValueError("order_of must give a tuple of one index per name and one more")
        seen = set()
        for item in <tuple>order:
            if type(item) is not int or not 0 <= item <= self.kept_n or item in seen:
                raise ValueError("order_of must give each index once (a permutation)")
            seen.add(item)
        for k in range(self.kept_n + 1):
            self.order[k] = <int32_t>(<tuple>order)[k]
        sig = PyBytes_FromStringAndSize(NULL, total)
        p = PyBytes_AS_STRING(sig)
        for k in range(n):
            memcpy(p, props + pieces[k].name_pos, pieces[k].name_len)
            p += pieces[k].name_len
            p[0] = 1
            p += 1
        self.sig = sig
        self.npieces = n
        return 1

    cdef object topic(self, const uint8_t *raw, int32_t n, object real_topic):
        """real_topic(raw) (remembered for the last REAL_TOPIC value)."""
        if (self.topic_raw is not None and PyBytes_GET_SIZE(self.topic_raw) == n
                and memcmp(PyBytes_AS_STRING(self.topic_raw), raw, n) == 0):
            return self.topic_found
        self.topic_raw = PyBytes_FromStringAndSize(<const char *>raw, n)
        self.topic_found = None
        self.topic_found = real_topic(self.topic_raw)
        return self.topic_found


cdef enum:
    _COPY_ROW = 40   # the head of a row of timer_copy_rows (see there)


cdef class _CopyRows:
    """The rows timer_copy_rows builds into the caller's bytearray ``out`` (its size is the room
    it has; it grows, never shrinks, so that its memory serves pass after pass), and the topics
    they name."""
    cdef bytearray out
    cdef Py_ssize_t len
    cdef list topics
    cdef dict index
    cdef object last_topic
    cdef int32_t last_index

    cdef uint8_t *grow(self, Py_ssize_t need) except NULL:
        """Room for ``need`` more bytes at the end (``len`` is moved past them)."""
        cdef Py_ssize_t size = PyByteArray_GET_SIZE(self.out)
        cdef uint8_t *at
        if self.len + need > size:
            PyByteArray_Resize(self.out, max(2 * size, self.len + need, 1 << 16))
        at = <uint8_t *>PyByteArray_AS_STRING(self.out) + self.len
        self.len += need
        return at

    cdef int32_t topic_index(self, object topic) except -1:
        """The index of ``topic`` (a str) in ``topics``, added when new."""
        if topic is self.last_topic:
            return self.last_index
        found = self.index.get(topic)
        if found is None:
            found = len(self.topics)
            self.topics.append(topic)
            self.index[topic] = found
        self.last_topic, self.last_index = topic, <int32_t>found
        return self.last_index


cdef inline void _wle32(uint8_t *p, int32_t v) noexcept:
    cdef uint32_t u = <uint32_t>v
    p[0] = <uint8_t>u
    p[1] = <uint8_t>(u >> 8)
    p[2] = <uint8_t>(u >> 16)
    p[3] = <uint8_t>(u >> 24)


cdef inline void _wle64(uint8_t *p, int64_t v) noexcept:
    _wle32(p, <int32_t>(<uint64_t>v & 0xFFFFFFFF))
    _wle32(p + 4, <int32_t>(<uint64_t>v >> 32))


cdef inline void _copy_head(uint8_t *p, int32_t topic, int32_t qid, int32_t flag, int32_t sys_flag,
                            int32_t reconsume, int32_t body_len, int32_t props_len, int32_t has_key,
                            int64_t born) noexcept:
    _wle32(p, topic)
    _wle32(p + 4, qid)
    _wle32(p + 8, flag)
    _wle32(p + 12, sys_flag)
    _wle32(p + 16, reconsume)
    _wle32(p + 20, body_len)
    _wle32(p + 24, props_len)
    _wle32(p + 28, has_key)
    _wle64(p + 32, born)


cdef object _timer_copies(offsets, segments, core, dequeue_ms, real_topic, orders, order_of, room,
                          _CopyRows rows):
    """timer_copies (``rows`` None) or timer_copy_rows (the rows appended to ``rows``): the
    copies, as put_many items or rows, and the indices the careful path decides."""
    cdef _Piece pieces[_TIMER_MAX_PIECES]
    cdef Py_ssize_t npieces, k, j, total, topic_len = 0
    cdef rs_record rec
    cdef int64_t offset, qid, length
    cdef int64_t deq = _check_int(dequeue_ms, "dequeue_ms", INT64_MIN, INT64_MAX)
    cdef int64_t host_extra = _check_int(room[0], "host bytes", 0, 1 << 20)
    cdef int64_t uniq_extra = _check_int(room[1], "UNIQ_KEY bytes", 0, 1 << 20)
    cdef int64_t longest = _check_int(room[2], "longest record", 0, INT64_MAX)
    cdef const uint8_t *props
    cdef char deq_text[24]
    cdef Py_ssize_t deq_len = _decimal(deq_text, deq)
    cdef char *p
    cdef uint8_t *row
    cdef list out = None, careful = []
    cdef bytes raw
    cdef bint fit
    cdef _CopyShape shape = _CopyShape.__new__(_CopyShape)
    cdef _SegmentReader reader = _reader(segments, core)
    cdef Py_ssize_t index = 0, n, ahead
    cdef int64_t *wanted = NULL
    if type(orders) is not dict:
        raise TypeError("orders must be a dict")
    if not isinstance(offsets, (list, tuple)):
        offsets = list(offsets)
    n = len(offsets)
    wanted = <int64_t *>PyMem_Malloc(max(n, 1) * sizeof(int64_t))
    if wanted == NULL:
        raise MemoryError()
    try:
        for index in range(n):
            wanted[index] = _check_int(offsets[index], "offset", INT64_MIN, INT64_MAX)
        # The copies are built in the order put_many / put_copies write them, so their records
        # are read in key order, scattered over the CommitLog: each is prefetched a few records
        # ahead. (Reading them in CommitLog order instead measured slower as items, put_many
        # then walking objects scattered in memory, and no faster as rows, put in key order
        # after: a sort and a copy of each.)
        if rows is None:
            out = [None] * n
        for index in range(n):
            offset = wanted[index]
            for ahead in range(index + _PREFETCH_AHEAD, min(n, index + _PREFETCH_AHEAD + 1)):
                reader.prefetch(wanted[ahead])
            fit = False
            if (reader.record(offset, &rec) and rec.topic_len == 19
                    and memcmp(rec.topic, PyBytes_AS_STRING(_TIMER_TOPIC), 19) == 0):
                props = rec.properties
                npieces = _pieces(props, rec.properties_len, pieces, _TIMER_MAX_PIECES)
                fit = npieces > 0 and (shape.same(props, pieces, npieces)
                                       or shape.learn(props, pieces, npieces, orders, order_of))
            if fit:
                for k in range(npieces):   # a value that would not encode as it is
                    if (memchr(props + pieces[k].value_pos, 1, pieces[k].value_len) != NULL
                            or not _utf8_ok(props + pieces[k].value_pos, pieces[k].value_len)):
                        fit = False
                        break
            if fit:
                fit = _digits(props + pieces[shape.out_ms_i].value_pos, pieces[shape.out_ms_i].value_len,
                              _TIMER_MAX_DIGITS) >= 0
                qid = _digits(props + pieces[shape.real_qid_i].value_pos, pieces[shape.real_qid_i].value_len, 9)
                fit = fit and qid >= 0
            if fit:
                found = shape.topic(props + pieces[shape.real_topic_i].value_pos,
                                    pieces[shape.real_topic_i].value_len, real_topic)
                fit = found is not None and qid < <int64_t>found[1]
            if fit:
                topic = found[0]
                total = 18 + deq_len
                for k in range(shape.kept_n):
                    total += pieces[shape.kept[k]].name_len + pieces[shape.kept[k]].value_len + 2
                PyUnicode_AsUTF8AndSize(topic, &topic_len)
                length = (91 + rec.body_len + topic_len + total + host_extra
                          + (0 if shape.uniq_i >= 0 else uniq_extra))
                fit = total <= RS_MAX_PROPERTIES_LENGTH and length <= longest
            if not fit:
                careful.append(index)
                if rows is not None:   # a row that stands for the careful path's copy
                    _copy_head(rows.grow(_COPY_ROW), -1, 0, 0, 0, 0, 0, 0, 0, 0)
                continue
            if rows is not None:
                row = rows.grow(_COPY_ROW + rec.body_len + total)
                _copy_head(row, rows.topic_index(topic), <int32_t>qid, rec.flag,
                           rec.sys_flag & ~(RS_SYSFLAG_BORNHOST_V6 | RS_SYSFLAG_STOREHOST_V6),
                           rec.reconsume_times, rec.body_len, <int32_t>total, shape.uniq_i >= 0,
                           rec.born_timestamp)
                memcpy(row + _COPY_ROW, rec.body, rec.body_len)
                _copy_properties(<char *>row + _COPY_ROW + rec.body_len, shape, pieces, props,
                                 deq_text, deq_len)
                continue
            raw = PyBytes_FromStringAndSize(NULL, total)
            _copy_properties(PyBytes_AS_STRING(raw), shape, pieces, props, deq_text, deq_len)
            unique_key = None
            if shape.uniq_i >= 0:
                unique_key = _utf8(props + pieces[shape.uniq_i].value_pos, pieces[shape.uniq_i].value_len)
            out[index] = (
                topic,
                PyBytes_FromStringAndSize(<const char *>rec.body, rec.body_len),
                raw,
                <int32_t>qid,
                rec.flag,
                rec.born_timestamp,
                rec.sys_flag & ~(RS_SYSFLAG_BORNHOST_V6 | RS_SYSFLAG_STOREHOST_V6),
                rec.reconsume_times,
                unique_key,
            )
    finally:
        PyMem_Free(wanted)
        reader.release()
    return out, careful


cdef void _copy_properties(char *p, _CopyShape shape, _Piece *pieces, const uint8_t *props,
                           const char *deq_text, Py_ssize_t deq_len) noexcept:
    """Write a copy's properties (the kept pieces and TIMER_DEQUEUE_MS, in the shape's order) at
    ``p``, which has room for them (the ``total`` _timer_copies counted)."""
    cdef Py_ssize_t j, k
    for j in range(shape.kept_n + 1):
        if shape.order[j] == shape.kept_n:
            memcpy(p, b"TIMER_DEQUEUE_MS\x01", 17)
            p += 17
            memcpy(p, deq_text, deq_len)
            p += deq_len
        else:
            k = shape.kept[shape.order[j]]
            memcpy(p, props + pieces[k].name_pos, pieces[k].name_len)
            p += pieces[k].name_len
            p[0] = 1
            p += 1
            memcpy(p, props + pieces[k].value_pos, pieces[k].value_len)
            p += pieces[k].value_len
        p[0] = 2
        p += 1


def timer_copies(offsets, segments, core, dequeue_ms, real_topic, orders, order_of, room):
    """The ``put_many`` items of the copies a timer pass puts for the records at ``offsets``
    (the timer service's ``_copy``: REAL_TOPIC / REAL_QID restored and left out with a CRC32
    property, TIMER_DEQUEUE_MS added, the rest kept in the order of a Java ``HashMap``), and
    the indices of the None among them: the careful path decides those (see the pure twin).
    ``real_topic(raw)`` gives ``(topic, its queue count)`` for REAL_TOPIC bytes, or None;
    ``orders`` caches ``order_of(names)``, the HashMap order of the kept names plus
    TIMER_DEQUEUE_MS (indices); ``room`` is ``(host bytes, a generated UNIQ_KEY's bytes, the
    longest record allowed)``."""
    return _timer_copies(offsets, segments, core, dequeue_ms, real_topic, orders, order_of, room, None)


def timer_copy_rows(offsets, segments, core, dequeue_ms, real_topic, orders, order_of, room, out):
    """:func:`timer_copies` as rows for the append core's ``put_copies`` (no Python object per
    copy), written into the bytearray ``out`` from its start: ``(the length of the rows,
    topics, careful)``. ``out`` grows as needed and is never shrunk (its size is room, not
    rows: a caller passing the same one each time reuses its memory). One row per offset, in
    order, each a 40-byte head of little-endian fields (topic, an index into ``topics``, the
    copies' topic names; queue id; flag; sysFlag; reconsume times; body length; properties
    length; 1 when the properties hold the UNIQ_KEY, 0 when the core generates one, all int32;
    born timestamp, int64), then the body and the encoded properties. The row of an index in
    ``careful`` is a head alone with topic -1: the careful path's copy (or no copy) goes there."""
    cdef _CopyRows rows = _CopyRows.__new__(_CopyRows)
    if type(out) is not bytearray:
        raise TypeError("out must be a bytearray")
    rows.out = out
    rows.topics = []
    rows.index = {}
    rows.last_index = -1
    _, careful = _timer_copies(offsets, segments, core, dequeue_ms, real_topic, orders, order_of, room, rows)
    return rows.len, rows.topics, careful
