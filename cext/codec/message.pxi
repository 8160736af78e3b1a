# The compiled message: a record's fixed fields in C, the rest decoded when first asked for
# Part of rocketstore.format._codec: included by cext/_codec.pyx, whose imports and
# constants it uses.


cdef tuple _FIELDS = _message_mod.MESSAGE_FIELDS
cdef object _MV_CAST = memoryview


# A freelist spares malloc and free for the objects a read makes and drops (a freed object's
# memory is kept for the next one; nothing else about its lifetime changes).
@cython.freelist(32)
cdef class MessageExt:
    """A record as stored in the CommitLog (compiled twin of :class:`rocketstore.MessageExt`).

    The fixed-width fields are C integers; ``body``, ``topic``, ``properties`` and the hosts are
    decoded from the record's bytes on first access and kept. The record is a private copy, or
    (zero-copy reads) a read-only view of the segment map that this object keeps alive.
    ``isinstance(m, rocketstore.MessageExt)`` is true, and it compares equal to the pure twin's
    message for the same record.
    """

    cdef public int32_t size
    cdef public int32_t magic
    cdef public int32_t body_crc
    cdef public int32_t queue_id
    cdef public int32_t flag
    cdef public int64_t queue_offset
    cdef public int64_t commitlog_offset
    cdef public int32_t sys_flag
    cdef public int64_t born_timestamp
    cdef public int64_t store_timestamp
    cdef public int32_t reconsume_times
    cdef public int64_t prepared_transaction_offset
    cdef object _owner          # bytes (a copy of the record) or a read-only memoryview (zero copy)
    cdef const uint8_t *_p      # the record's first byte, inside _owner's buffer
    cdef bint _zero_copy
    cdef int64_t _rec_pos       # zero copy: where the record starts in _owner
    cdef int32_t _body_off, _body_len, _topic_off, _topic_len, _props_off, _props_len
    cdef int32_t _born_port, _store_port
    cdef uint8_t _born_raw[16]
    cdef uint8_t _store_raw[16]
    cdef object _body, _topic, _props, _born, _store   # decoded (or assigned) values; None: not yet
    cdef object _stored         # the body field's bytes when assigned; None: the record's
    cdef bint _store_assigned

    def __init__(self, *args, **kwargs):
        raise TypeError("MessageExt objects are made by reading a store, not constructed")

    cdef object _record_body(self):
        """The body field's bytes in the record (a view of them after a zero-copy read)."""
        if self._stored is not None:
            return self._stored
        if self._zero_copy:
            start = self._rec_pos + self._body_off
            return self._owner[start:start + self._body_len]
        return PyBytes_FromStringAndSize(<const char *>self._p + self._body_off, self._body_len)

    @property
    def body(self):
        """The body the producer sent: inflated when sysFlag bit 0 says it is compressed."""
        if self._body is None:
            if self.sys_flag & 1:
                self._body = _inflate(self._record_body(), self.sys_flag)
            else:
                self._body = self._record_body()
        return self._body

    @body.setter
    def body(self, value):
        _track(self)
        self._stored = value
        self._body = None

    @property
    def stored_body(self):
        """The body field's bytes as stored (the compressed bytes of a compressed body)."""
        if self.sys_flag & 1:
            return self._record_body()
        return self.body

    @property
    def topic(self):
        if self._topic is None:
            self._topic = _utf8(self._p + self._topic_off, self._topic_len)
        return self._topic

    @topic.setter
    def topic(self, value):
        _track(self)
        self._topic = value

    @property
    def properties(self):
        if self._props is None:
            _track(self)   # the caller may put anything in the dict, this message too
            self._props = _decode_properties(self._p + self._props_off, self._props_len)
        return self._props

    @properties.setter
    def properties(self, value):
        _track(self)
        self._props = value

    @property
    def born_host(self):
        if self._born is None:
            self._born = (_host_text(self._born_raw, _host_len(self.sys_flag, RS_SYSFLAG_BORNHOST_V6)),
                          self._born_port)
        return self._born

    @born_host.setter
    def born_host(self, value):
        _track(self)
        self._born = value

    @property
    def store_host(self):
        if self._store is None:
            self._store = (_host_text(self._store_raw, _host_len(self.sys_flag, RS_SYSFLAG_STOREHOST_V6)),
                           self._store_port)
        return self._store

    @store_host.setter
    def store_host(self, value):
        _track(self)
        self._store = value
        self._store_assigned = True

    cdef object _property(self, const char *name, int which):
        cdef rs_dispatch_props found
        if self._props is not None:
            return (<object>self._props).get(name.decode("ascii")) if self._props else None
        rs_dispatch_properties(self._p + self._props_off, self._props_len, &found)
        if which == 0 and found.tags_pos >= 0:
            return _utf8(self._p + self._props_off + found.tags_pos, found.tags_len)
        if which == 1 and found.keys_pos >= 0:
            return _utf8(self._p + self._props_off + found.keys_pos, found.keys_len)
        if which == 2 and found.uniq_key_pos >= 0:
            return _utf8(self._p + self._props_off + found.uniq_key_pos, found.uniq_key_len)
        return None

    @property
    def tags(self):
        return self._property(b"TAGS", 0)

    @property
    def keys(self):
        return self._property(b"KEYS", 1)

    @property
    def unique_key(self):
        return self._property(b"UNIQ_KEY", 2)

    @property
    def msg_id(self):
        """The offsetMsgId: store host, port and commitlog offset as upper-case hex (§3.1)."""
        cdef uint8_t raw[28]
        cdef char text[56]
        cdef int32_t n, i
        cdef uint64_t off = <uint64_t>self.commitlog_offset
        cdef uint32_t port
        if self._store_assigned:
            host, port_obj = self._store
            return make_offset_msg_id(host_to_bytes(host), port_obj, self.commitlog_offset)
        n = _host_len(self.sys_flag, RS_SYSFLAG_STOREHOST_V6)
        memcpy(raw, self._store_raw, <size_t>n)
        port = <uint32_t>self._store_port
        for i in range(4):
            raw[n + i] = <uint8_t>(port >> (24 - 8 * i))
        for i in range(8):
            raw[n + 4 + i] = <uint8_t>(off >> (56 - 8 * i))
        n += 12
        for i in range(n):
            text[2 * i] = b"0123456789ABCDEF"[raw[i] >> 4]
            text[2 * i + 1] = b"0123456789ABCDEF"[raw[i] & 15]
        return PyUnicode_DecodeUTF8(text, 2 * n, NULL)

    def as_dict(self):
        return {name: getattr(self, name) for name in _FIELDS}

    def __reduce__(self):
        fields = {name: getattr(self, name) for name in _FIELDS if name != "body"}
        fields["body"] = bytes(self.stored_body)
        return (_message_from_fields, (fields,))

    def __eq__(self, other):
        if not isinstance(other, _PyMessageExt):
            return NotImplemented
        for name in _FIELDS:
            if name == "body":
                if bytes(self.stored_body) != bytes(other.stored_body):
                    return False
            elif getattr(self, name) != getattr(other, name):
                return False
        return True

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None   # mutable, compared by value: unhashable, as the pure twin's

    def __repr__(self):
        body = bytes(self.stored_body[:32])
        return (f"MessageExt(topic={self.topic!r}, queue_id={self.queue_id}, "
                f"queue_offset={self.queue_offset}, commitlog_offset={self.commitlog_offset}, "
                f"size={self.size}, body={body!r})")


_message_mod.MessageExt.register(MessageExt)


cdef inline int _track(MessageExt m) except -1:
    """Let the garbage collector see ``m`` from now on (see _message)."""
    if not PyObject_GC_IsTracked(m):
        PyObject_GC_Track(m)
    return 0


def _message_from_fields(fields):
    """A compiled MessageExt holding ``fields`` (as ``as_dict()`` gives them): unpickling."""
    cdef MessageExt m = MessageExt.__new__(MessageExt)
    m._owner = b""
    m._p = <const uint8_t *>PyBytes_AS_STRING(m._owner)
    for name in _FIELDS:
        setattr(m, name, fields[name])
    m._store_assigned = True
    return m


cdef MessageExt _message(object zc_view, const uint8_t *base, int64_t pos, const rs_record *r):
    """The message for the decoded record r at base[pos] (r's pointers point into base[pos ..
    pos + r.total_size)): a private copy of the record, or with zc_view (a read-only 'B'
    memoryview whose buffer starts at base) a zero-copy one that keeps zc_view alive."""
    cdef MessageExt m = MessageExt.__new__(MessageExt)
    cdef const uint8_t *rec = base + pos
    if zc_view is None:
        m._owner = PyBytes_FromStringAndSize(<const char *>rec, r.total_size)
        m._p = <const uint8_t *>PyBytes_AS_STRING(m._owner)
        # No reference cycle can pass through this message until a setter or the properties
        # getter runs (each tracks it again): it holds only its private bytes, and what its
        # getters make of them (bytes, str, tuples of str and int), none of which can refer
        # back to it. So the collector need not visit it; a program that keeps many messages
        # pays no collection work for them. (A zero-copy message holds a view of a buffer that
        # may be anything: it stays tracked.)
        PyObject_GC_UnTrack(m)
    else:
        m._owner = zc_view
        m._p = rec
        m._zero_copy = True
        m._rec_pos = pos
    m.size = r.total_size
    m.magic = r.magic
    m.body_crc = r.body_crc
    m.queue_id = r.queue_id
    m.flag = r.flag
    m.queue_offset = r.queue_offset
    m.commitlog_offset = r.physical_offset
    m.sys_flag = r.sys_flag
    m.born_timestamp = r.born_timestamp
    memcpy(m._born_raw, r.born_host, 16)
    m._born_port = r.born_port
    m.store_timestamp = r.store_timestamp
    memcpy(m._store_raw, r.store_host, 16)
    m._store_port = r.store_port
    m.reconsume_times = r.reconsume_times
    m.prepared_transaction_offset = r.prepared_transaction_offset
    m._body_off = <int32_t>(r.body - rec)
    m._body_len = r.body_len
    m._topic_off = <int32_t>(r.topic - rec)
    m._topic_len = r.topic_len
    m._props_off = <int32_t>(r.properties - rec)
    m._props_len = r.properties_len
    return m


cdef object _zero_copy_view(object buffer):
    """A read-only one-dimensional 'B' memoryview of buffer (which it keeps exported)."""
    view = memoryview(buffer)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view.toreadonly()


def decode_record(buffer, pos=0, *, check_crc=True, copy_body=True, end=None):
    """Decode the record at ``buffer[pos:end]`` (``end`` None: the whole buffer) into a MessageExt.

    Raises CorruptRecordError (with ``.reason``, a STOP_* code, and ``.position``) when there is
    no valid record there, including a BLANK. ``copy_body=False`` gives a read-only memoryview
    into ``buffer`` as the body, which keeps ``buffer`` exported (an mmap cannot close) while it lives.
    """
    cdef Py_buffer view
    cdef rs_record rec
    cdef int64_t at, rc, stop
    zc_view = None
    _get_readable(buffer, &view)
    if not copy_body:   # decode from the view the message keeps: its pointers stay valid
        PyBuffer_Release(&view)
        zc_view = _zero_copy_view(buffer)
        _get_readable(zc_view, &view)
    try:
        stop = view.len if end is None else _check_end(end, view.len)
        at = _check_pos(pos, stop)
        rc = rs_decode_record(<const uint8_t *>view.buf + at, stop - at, &rec, 1 if check_crc else 0)
        if rc <= 0:
            raise _corrupt(<int>(1 - rc), pos, rec.total_size)
        return _message(zc_view, <const uint8_t *>view.buf, at, &rec)
    finally:
        PyBuffer_Release(&view)


def decode_batch(buffer, start=0, end=None, *, check_crc=True, max_records=-1, base=None):
    """Scan consecutive records in ``buffer[start:end]`` into a RECORD_DTYPE array.

    Returns ``(rows, stop_pos, stop_reason)``: the scan stops at ``end`` or after ``max_records``
    (STOP_LIMIT; negative means no limit), or at the first position that is not a valid record
    (STOP_BLANK, STOP_END, STOP_TRUNCATED, STOP_CORRUPT, STOP_BAD_CRC); ``stop_pos`` is there.
    ``base``: the CommitLog offset of ``buffer[0]``; a record whose PHYSICALOFFSET is not
    ``base`` + its position (a whole record copied there) stops the scan as STOP_CORRUPT.
    The scan runs without the GIL for large ranges; ``buffer`` stays exported (pinned) meanwhile.
    """
    cdef int64_t placed = -1 if base is None else _check_int(base, "base", 0, INT64_MAX)
    cdef Py_buffer src, dst
    cdef int64_t pos, start_pos, c_end, limit, bound, cap, n = 0, got
    cdef int reason = _STOP_LIMIT, crc = 1 if check_crc else 0
    cdef const uint8_t *data
    _get_readable(buffer, &src)
    try:
        c_end = _scan_end(start, end, max_records, src.len)
        pos = start
        start_pos = pos
        data = <const uint8_t *>src.buf
        # every record is at least RECORD_FIXED_LENGTH bytes: no scan finds more rows than bound.
        # A max_records above bound can never be reached, so it is no limit: clamping it to bound
        # would stop the scan after `bound` records with STOP_LIMIT where the next position holds
        # a BLANK or the end of data (the pure twin, and recovery, need that reason).
        bound = (c_end - pos) // RS_RECORD_FIXED_LENGTH
        limit = -1
        if 0 <= max_records <= bound:
            limit = max_records
            bound = limit
        cap = min(bound, 1024)
        rows = _np.empty(cap, dtype=RECORD_DTYPE)   # _scan writes every byte of each row it fills
        while True:
            PyObject_GetBuffer(rows, &dst, PyBUF_WRITABLE)
            try:
                if c_end - pos >= _NOGIL_SCAN_BYTES:
                    with nogil:
                        got = _scan_rows(data, &pos, c_end, <rs_batch_row *>dst.buf + n, cap - n,
                                         -1 if limit < 0 else limit - n, crc, &reason, placed)
                else:
                    got = _scan_rows(data, &pos, c_end, <rs_batch_row *>dst.buf + n, cap - n,
                                     -1 if limit < 0 else limit - n, crc, &reason, placed)
            finally:
                PyBuffer_Release(&dst)
            n += got
            if reason != _STOP_NEED_ROOM:
                break
            if cap >= bound:
                raise AssertionError("decode_batch found more records than fit in its range")
            # grow once to what the rest of the range holds at the mean record size so far
            # (+1/8), and at least double, so a large scan reallocates O(1) times, not O(log n)
            cap = min(bound, max(cap * 2, n + (c_end - pos) * n // (pos - start_pos) * 9 // 8 + 16))
            grown = _np.empty(cap, dtype=RECORD_DTYPE)
            # bytewise, padding included (a structured assignment copies only the fields)
            grown.view(_np.uint8)[:n * sizeof(rs_batch_row)] = rows.view(_np.uint8)[:n * sizeof(rs_batch_row)]
            rows = grown
        if n != cap:
            rows.resize(n, refcheck=False)   # shrinks in place: no view of rows exists yet
        return rows, pos, reason
    finally:
        PyBuffer_Release(&src)


cdef int _row_record(const rs_batch_row *row, const uint8_t *base, Py_ssize_t n, rs_record *r) except -1:
    """Fill r from a decode_batch row over base[0 .. n): ValueError unless the row's record and
    its body, topic and properties lie inside that buffer."""
    cdef int64_t pos = row.position, end
    # compared without a sum that could overflow: hostile rows hold any int64
    if row.size <= 0 or pos < 0 or pos > n or row.size > n - pos:
        raise ValueError("row does not describe a record inside this buffer")
    end = pos + row.size
    if (row.body_len < 0 or row.body_pos < pos or row.body_pos > end or row.body_len > end - row.body_pos
            or row.topic_len < 0 or row.topic_pos < pos or row.topic_pos > end
            or row.topic_len > end - row.topic_pos
            or row.properties_len < 0 or row.properties_pos < pos or row.properties_pos > end
            or row.properties_len > end - row.properties_pos):
        raise ValueError("row does not describe a record inside this buffer")
    r.total_size = row.size
    r.magic = row.magic
    r.body_crc = row.body_crc
    r.queue_id = row.queue_id
    r.flag = row.flag
    r.queue_offset = row.queue_offset
    r.physical_offset = row.physical_offset
    r.sys_flag = row.sys_flag
    r.born_timestamp = row.born_timestamp
    memcpy(r.born_host, row.born_host, 16)
    r.born_port = row.born_port
    r.store_timestamp = row.store_timestamp
    memcpy(r.store_host, row.store_host, 16)
    r.store_port = row.store_port
    r.reconsume_times = row.reconsume_times
    r.prepared_transaction_offset = row.prepared_transaction_offset
    r.body = base + row.body_pos
    r.body_len = row.body_len
    r.topic = base + row.topic_pos
    r.topic_len = row.topic_len
    r.properties = base + row.properties_pos
    r.properties_len = row.properties_len
    return 0


cdef list _rows_messages(object buffer, object rows, bint copy_body):
    cdef Py_buffer view, table
    cdef rs_record rec
    cdef const rs_batch_row *row
    cdef Py_ssize_t i, count
    cdef list out = []
    zc_view = None if copy_body else _zero_copy_view(buffer)
    _get_readable(buffer if copy_body else zc_view, &view)
    try:
        PyObject_GetBuffer(rows, &table, PyBUF_SIMPLE)
        try:
            count = table.len // <Py_ssize_t>sizeof(rs_batch_row)
            row = <const rs_batch_row *>table.buf
            for i in range(count):
                _row_record(&row[i], <const uint8_t *>view.buf, view.len, &rec)
                out.append(_message(zc_view, <const uint8_t *>view.buf, row[i].position, &rec))
        finally:
            PyBuffer_Release(&table)
    finally:
        PyBuffer_Release(&view)
    return out


def record_from_row(buffer, row, *, copy_body=True):
    """The MessageExt for one row of :func:`decode_batch` over the same ``buffer`` (no re-check)."""
    table = _np.zeros(1, dtype=RECORD_DTYPE)
    if isinstance(row, _np.void) and row.dtype == RECORD_DTYPE:
        table[0] = row
    else:
        for name in RECORD_DTYPE.names:
            table[name][0] = row[name]
    return _rows_messages(buffer, table, copy_body)[0]


def messages_from_rows(buffer, rows, *, copy_body=True):
    """The MessageExt of every row of a decode_batch array (see rocketstore.format._messages_py)."""
    if not isinstance(rows, _np.ndarray) or rows.ndim != 1 or rows.dtype != RECORD_DTYPE:
        raise TypeError("rows must be a one-dimensional numpy array of RECORD_DTYPE")
    return _rows_messages(buffer, _np.ascontiguousarray(rows), copy_body)


cdef class _RowMessages:
    """The iterator row_messages returns: one MessageExt per row, made as it is asked for."""

    cdef object _zc_view, _pinned, _rows
    cdef Py_buffer _view, _table
    cdef bint _held
    cdef Py_ssize_t _i, _n

    def __iter__(self):
        return self

    def __next__(self):
        cdef rs_record rec
        cdef const rs_batch_row *row
        if not self._held or self._i >= self._n:
            self._release()
            raise StopIteration
        row = <const rs_batch_row *>self._table.buf + self._i
        self._i += 1
        _row_record(row, <const uint8_t *>self._view.buf, self._view.len, &rec)
        return _message(self._zc_view, <const uint8_t *>self._view.buf, row.position, &rec)

    cdef void _release(self) noexcept:
        if self._held:
            self._held = False
            PyBuffer_Release(&self._table)
            PyBuffer_Release(&self._view)
        self._zc_view = self._pinned = self._rows = None

    def __dealloc__(self):
        if self._held:
            PyBuffer_Release(&self._table)
            PyBuffer_Release(&self._view)


cdef class _SegmentMessages:
    """The iterator segment_messages returns: one MessageExt per record, decoded as it is asked
    for; ``stop`` is where the next record starts (or the scan stopped), ``reason`` -1 until the
    iterator is exhausted, then the STOP_* code decode_batch would give there."""

    cdef object _zc_view, _pinned
    cdef Py_buffer _view
    cdef bint _held
    cdef int _check_crc
    cdef int64_t _end, _base
    cdef readonly int64_t stop
    cdef readonly int reason

    def __iter__(self):
        return self

    def __next__(self):
        cdef rs_record rec
        cdef int64_t pos = self.stop, rc
        if not self._held:
            raise StopIteration
        if pos >= self._end:
            self._finish(_STOP_LIMIT)
            raise StopIteration
        rc = rs_decode_record(<const uint8_t *>self._view.buf + pos, self._end - pos, &rec, self._check_crc)
        if rc <= 0:
            self._finish(<int>(1 - rc))
            raise StopIteration
        if self._base >= 0 and rec.physical_offset != self._base + pos:
            self._finish(_STOP_CORRUPT)   # a record copied here from elsewhere: not the one stored here
            raise StopIteration
        self.stop = pos + rc
        return _message(self._zc_view, <const uint8_t *>self._view.buf, pos, &rec)

    cdef void _finish(self, int reason) noexcept:
        self.reason = reason
        if self._held:
            self._held = False
            PyBuffer_Release(&self._view)
        self._zc_view = self._pinned = None

    def __dealloc__(self):
        if self._held:
            PyBuffer_Release(&self._view)


def segment_messages(buffer, start=0, end=None, *, check_crc=True, copy_body=True, base=None):
    """The records of ``buffer[start:end]`` as messages, decoded one by one as they are asked for,
    with the iterator's ``stop`` and ``reason`` at the end (see the pure twin,
    rocketstore.format._messages_py.segment_messages)."""
    cdef int64_t c_base = -1 if base is None else _check_int(base, "base", 0, INT64_MAX)
    cdef _SegmentMessages it = _SegmentMessages.__new__(_SegmentMessages)
    it._zc_view = None if copy_body else _zero_copy_view(buffer)
    it._pinned = buffer if copy_body else it._zc_view
    _get_readable(it._pinned, &it._view)
    try:
        if end is None:
            end = it._view.len
        _check_range(start, end, it._view.len)
    except BaseException:
        PyBuffer_Release(&it._view)
        raise
    it._held = True
    it._check_crc = 1 if check_crc else 0
    it._base = c_base
    it.stop = start
    it._end = end
    it.reason = -1
    return it


def row_messages(buffer, rows, *, copy_body=True):
    """:func:`messages_from_rows` as an iterator: each message is made when it is asked for."""
    if not isinstance(rows, _np.ndarray) or rows.ndim != 1 or rows.dtype != RECORD_DTYPE:
        raise TypeError("rows must be a one-dimensional numpy array of RECORD_DTYPE")
    cdef _RowMessages it = _RowMessages.__new__(_RowMessages)
    it._rows = _np.ascontiguousarray(rows)
    it._zc_view = None if copy_body else _zero_copy_view(buffer)
    it._pinned = buffer if copy_body else it._zc_view
    _get_readable(it._pinned, &it._view)
    try:
        PyObject_GetBuffer(it._rows, &it._table, PyBUF_SIMPLE)
    except BaseException:
        PyBuffer_Release(&it._view)
        raise
    it._held = True
    it._n = it._table.len // <Py_ssize_t>sizeof(rs_batch_row)
    return it
