# The record codec: Java hashes, properties, encoding and decoding one record.
# Part of rocketstore.format._codec: included by cext/_codec.pyx, whose imports and
# constants it uses.

# Java hashes

def java_hash(s):
    """Java ``String.hashCode`` of ``s``: over UTF-16 code units, as a signed int32."""
    cdef uint32_t h = 0, u
    cdef Py_UCS4 ch
    if not isinstance(s, str):
        raise TypeError(f"java_hash expects str, not {type(s).__name__}")
    for ch in <str>s:
        u = <uint32_t>ch
        if u >= 0x10000u:
            u -= 0x10000u
            h = 31u * h + (0xD800u | (u >> 10))
            h = 31u * h + (0xDC00u | (u & 0x3FFu))
        else:
            h = 31u * h + u
    return <int32_t>h


def java_hash_bytes(data):
    """``java_hash`` of UTF-8 bytes (invalid bytes count as ``surrogateescape`` decodes them)."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return rs_java_hash_utf8(<const uint8_t *>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)


def tags_code(tags):
    """The ConsumeQueue tagsCode of a TAGS value: its Java hash, sign-extended; 0 for none/empty."""
    if tags is None or tags == "":
        return 0
    return java_hash(tags)


def index_key_hash(key):
    """IndexFile key hash: ``abs(key.hashCode())``, with Integer.MIN_VALUE giving 0 (§5.2)."""
    cdef int32_t h = java_hash(key)
    if h == INT32_MIN:
        return 0
    return -h if h < 0 else h


def body_crc(body):
    """The BODYCRC of a body: ``crc32(body) & 0x7FFFFFFF`` (0 for an empty body)."""
    cdef Py_buffer view
    PyObject_GetBuffer(body, &view, PyBUF_SIMPLE)
    try:
        return rs_body_crc(<const uint8_t *>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)


# ---------------------------------------------------------------------------------------------
# Properties

cdef object _plain_value(object value):
    """value if it is a non-empty str without a separator, else None (the slow path decides)."""
    cdef Py_UCS4 ch
    if type(value) is not str or not value:
        return None
    for ch in <str>value:
        if ch == 1 or ch == 2:
            return None
    return value


def put_properties(tags, keys, properties):
    """The properties of a put (see rocketstore.format._record_py.put_properties): plain str tags, keys
    and a dict of plain str properties are encoded here, in the pure twin's order; every other
    shape (and every error) is the pure twin's."""
    cdef list parts
    cdef bint have_tags = False, have_keys = False
    cdef object uniq = None
    cdef int wait = -1
    if properties is not None and type(properties) is not dict:
        return _put_properties_slow(tags, keys, properties)
    if keys is not None and type(keys) is not str:
        if type(keys) in (list, tuple) and all(type(k) is str for k in keys):
            keys = " ".join(keys)
        else:
            return _put_properties_slow(tags, keys, properties)
    if (tags is not None and _plain_value(tags) is None) or (keys is not None and _plain_value(keys) is None):
        return _put_properties_slow(tags, keys, properties)
    parts = []
    if properties:
        for key, value in (<dict>properties).items():
            if _plain_value(key) is None or _plain_value(value) is None:
                return _put_properties_slow(tags, keys, properties)
            if tags is not None and key == "TAGS":
                value, have_tags = tags, True       # replaced where it stands, as dict(...)["TAGS"] = tags
            elif keys is not None and key == "KEYS":
                value, have_keys = keys, True
            elif key == "UNIQ_KEY":
                uniq = value
            elif key == "WAIT" and value == "false":
                wait = 0
            parts.append(key)
            parts.append("\x01")
            parts.append(value)
            parts.append("\x02")
    if tags is not None and not have_tags:
        parts.append("TAGS\x01")
        parts.append(tags)
        parts.append("\x02")
    if keys is not None and not have_keys:
        parts.append("KEYS\x01")
        parts.append(keys)
        parts.append("\x02")
    try:
        data = "".join(parts).encode("utf-8")
    except UnicodeEncodeError:
        return _put_properties_slow(tags, keys, properties)
    if len(data) > RS_MAX_PROPERTIES_LENGTH:
        return _put_properties_slow(tags, keys, properties)
    return data, uniq, wait


cdef inline str _utf8(const uint8_t *p, Py_ssize_t n):
    return PyUnicode_DecodeUTF8(<const char *>p, n, "surrogateescape")


cdef dict _decode_properties(const uint8_t *data, Py_ssize_t n):
    cdef dict props = {}
    cdef Py_ssize_t i = 0, end, sep
    cdef const uint8_t *hit
    while i <= n:
        hit = <const uint8_t *>memchr(data + i, 2, <size_t>(n - i)) if i < n else NULL
        end = (hit - data) if hit != NULL else n
        if end - i >= 3:
            hit = <const uint8_t *>memchr(data + i, 1, <size_t>(end - i))
            if hit != NULL:
                sep = hit - data
                if i < sep < end - 1:
                    PyDict_SetItem(props, _utf8(data + i, sep - i), _utf8(data + sep + 1, end - sep - 1))
        i = end + 1
    return props


def decode_properties(data):
    """Parse a properties string with RocketMQ 5.x's lenient rule; never raises on bytes.

    A piece between 0x02 separators is kept when its first 0x01 has a non-empty name before it and
    a non-empty value after it (the value may contain 0x01); a later duplicate name wins.
    """
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return _decode_properties(<const uint8_t *>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)


# ---------------------------------------------------------------------------------------------
# Encoding

cdef int64_t _check_int(object value, str name, int64_t lo, int64_t hi) except? -1:
    cdef int overflow = 0
    cdef long long x
    if not isinstance(value, int):
        raise InvalidMessageError(f"{name} must be an int, not {type(value).__name__}")
    x = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow != 0 or x < lo or x > hi:
        raise InvalidMessageError(f"{name} {value} is out of range [{lo}, {hi}]")
    return x


def record_length(body_len, topic_len, properties_len, sys_flag=0, magic=RS_MAGIC_V1):
    """``91 + B + T + P`` (+12 per IPv6 host in ``sys_flag``, +1 for V2 magic)."""
    cdef int64_t n = rs_record_length(
        <int32_t>_check_int(body_len, "body_len", INT32_MIN, INT32_MAX),
        <int32_t>_check_int(topic_len, "topic_len", INT32_MIN, INT32_MAX),
        <int32_t>_check_int(properties_len, "properties_len", INT32_MIN, INT32_MAX),
        <int32_t>_check_int(sys_flag, "sys_flag", INT32_MIN, INT32_MAX),
        <int32_t>_check_int(magic, "magic", INT32_MIN, INT32_MAX))
    if n < 0:
        raise InvalidMessageError(
            f"no record has body length {body_len}, topic length {topic_len} and "
            f"properties length {properties_len} (magic {magic})")
    return n


cdef bytes _topic_bytes(topic, Py_ssize_t limit=RS_MAX_TOPIC_LENGTH):
    """A plain str topic's UTF-8 bytes; every other shape, and every error, the pure twin's.
    ``limit``: RS_MAX_TOPIC_LENGTH for a put, RS_MAX_TOPIC_LENGTH_V2 for a read."""
    cdef const char *text
    cdef Py_ssize_t n
    if type(topic) is str:
        try:
            text = PyUnicode_AsUTF8AndSize(topic, &n)
        except UnicodeEncodeError:   # a lone surrogate: the pure twin escapes it or refuses it
            return _topic_bytes_slow(topic, limit)
        if 0 < n <= limit:
            return PyBytes_FromStringAndSize(text, n)
    return _topic_bytes_slow(topic, limit)


cdef bytes _properties_bytes(properties):
    cdef bytes data
    if properties is None:
        return b""
    if isinstance(properties, (bytes, bytearray, memoryview)):
        data = bytes(properties)
        if len(data) > RS_MAX_PROPERTIES_LENGTH:
            raise PropertiesTooLargeError(
                f"properties are {len(data)} bytes long; the limit is {RS_MAX_PROPERTIES_LENGTH}")
        return data
    if isinstance(properties, _Mapping):
        return encode_properties(properties)
    raise InvalidMessageError(f"properties must be bytes or a mapping, not {type(properties).__name__}")


# (ip text) -> raw address bytes; producers reuse a handful of hosts, so parsing each once pays
cdef dict _HOST_CACHE = {}


cdef bytes _host_raw_text(str ip, str name):
    cdef object raw = _HOST_CACHE.get(ip)
    if raw is None:
        try:
            raw = host_to_bytes(ip)
        except ValueError:
            raise InvalidMessageError(f"{name} {ip!r} is not an IPv4 or IPv6 address") from None
        if len(_HOST_CACHE) >= 4096:
            _HOST_CACHE.clear()
        _HOST_CACHE[ip] = raw
    return <bytes>raw


cdef int32_t _host(object host, str name, uint8_t *out, int32_t *port_out) except -1:
    """Fill out[0..16) with the address (zero-padded) and *port_out; return the address length."""
    try:
        ip, port = host
    except (TypeError, ValueError):
        raise InvalidMessageError(f"{name} must be an (ip, port) pair") from None
    if isinstance(ip, str):
        raw = _host_raw_text(ip, name)
    elif isinstance(ip, (bytes, bytearray, memoryview)) and len(ip) in (RS_HOST_V4_LENGTH, RS_HOST_V6_LENGTH):
        raw = bytes(ip)
    else:
        raise InvalidMessageError(f"{name} address must be text or 4 or 16 bytes, not {ip!r}")
    port_out[0] = <int32_t>_check_int(port, name + " port", INT32_MIN, INT32_MAX)
    memset(out, 0, 16)
    memcpy(out, PyBytes_AS_STRING(raw), <size_t>PyBytes_GET_SIZE(raw))
    return <int32_t>PyBytes_GET_SIZE(raw)


cdef class _Prepared:
    """A validated record: the rs_record plus the objects its pointers borrow from."""
    cdef rs_record rec
    cdef int64_t length
    cdef bytes topic_b
    cdef bytes props_b
    cdef Py_buffer body_view
    cdef bint has_body_view

    def __dealloc__(self):
        if self.has_body_view:
            PyBuffer_Release(&self.body_view)


cdef _Prepared _prepare(topic, body, properties, queue_id, flag, queue_offset, physical_offset,
                        sys_flag, born_timestamp, born_host, store_timestamp, store_host,
                        reconsume_times, prepared_transaction_offset, body_crc):
    """Validate every field, in the pure twin's order and with its messages, into an rs_record."""
    cdef _Prepared p = _Prepared.__new__(_Prepared)
    cdef rs_record *r = &p.rec
    cdef int32_t born_len, store_len, sflag
    cdef Py_ssize_t body_len
    memset(r, 0, sizeof(rs_record))
    p.topic_b = _topic_bytes(topic)
    p.props_b = _properties_bytes(properties)
    if PyObject_CheckBuffer(body):
        try:
            PyObject_GetBuffer(body, &p.body_view, PyBUF_SIMPLE)
            p.has_body_view = True
        except (TypeError, BufferError):
            pass
    if not p.has_body_view:
        raise InvalidMessageError(f"body must be a contiguous bytes-like object, not {type(body).__name__}")
    r.queue_id = <int32_t>_check_int(queue_id, "queue_id", INT32_MIN, INT32_MAX)
    r.flag = <int32_t>_check_int(flag, "flag", INT32_MIN, INT32_MAX)
    r.queue_offset = _check_int(queue_offset, "queue_offset", INT64_MIN, INT64_MAX)
    r.physical_offset = _check_int(physical_offset, "physical_offset", INT64_MIN, INT64_MAX)
    sflag = <int32_t>_check_int(sys_flag, "sys_flag", INT32_MIN, INT32_MAX)
    r.born_timestamp = _check_int(born_timestamp, "born_timestamp", INT64_MIN, INT64_MAX)
    born_len = _host(born_host, "born_host", r.born_host, &r.born_port)
    r.store_timestamp = _check_int(store_timestamp, "store_timestamp", INT64_MIN, INT64_MAX)
    store_len = _host(store_host, "store_host", r.store_host, &r.store_port)
    r.reconsume_times = <int32_t>_check_int(reconsume_times, "reconsume_times", INT32_MIN, INT32_MAX)
    r.prepared_transaction_offset = _check_int(prepared_transaction_offset, "prepared_transaction_offset",
                                               INT64_MIN, INT64_MAX)
    if body_crc is not None:
        r.body_crc = <int32_t>_check_int(body_crc, "body_crc", INT32_MIN, INT32_MAX)
    if born_len == RS_HOST_V6_LENGTH:
        sflag |= RS_SYSFLAG_BORNHOST_V6
    elif sflag & RS_SYSFLAG_BORNHOST_V6:
        raise InvalidMessageError("sys_flag says the born host is IPv6 but its address is IPv4")
    if store_len == RS_HOST_V6_LENGTH:
        sflag |= RS_SYSFLAG_STOREHOST_V6
    elif sflag & RS_SYSFLAG_STOREHOST_V6:
        raise InvalidMessageError("sys_flag says the store host is IPv6 but its address is IPv4")
    r.sys_flag = sflag
    body_len = p.body_view.len
    p.length = -1
    if body_len <= INT32_MAX:
        p.length = rs_record_length(<int32_t>body_len, <int32_t>len(p.topic_b), <int32_t>len(p.props_b),
                                    sflag, RS_MAGIC_V1)
    if p.length < 0:
        raise InvalidMessageError(f"a record with a {body_len}-byte body is too long for a Java int")
    r.body = <const uint8_t *>p.body_view.buf
    r.body_len = <int32_t>body_len
    r.topic = <const uint8_t *>PyBytes_AS_STRING(p.topic_b)
    r.topic_len = <int32_t>len(p.topic_b)
    r.properties = <const uint8_t *>PyBytes_AS_STRING(p.props_b)
    r.properties_len = <int32_t>len(p.props_b)
    if body_crc is None:
        r.body_crc = rs_body_crc(r.body, r.body_len)
    return p


def encode_record(*, topic, body, properties=b"", queue_id=0, flag=0, queue_offset=0,
                  physical_offset=0, sys_flag=0, born_timestamp=0, born_host=("127.0.0.1", 0),
                  store_timestamp=0, store_host=("127.0.0.1", 10911), reconsume_times=0,
                  prepared_transaction_offset=0, body_crc=None):
    """One V1 CommitLog record as bytes. ``body_crc=None`` computes the masked CRC.

    IPv6 hosts set sysFlag 0x10 / 0x20 themselves; a v6 bit for an IPv4 address raises
    InvalidMessageError. Hosts are ``(ip, port)`` with ip as text or 4/16 raw bytes.
    """
    cdef _Prepared p = _prepare(topic, body, properties, queue_id, flag, queue_offset, physical_offset,
                                sys_flag, born_timestamp, born_host, store_timestamp, store_host,
                                reconsume_times, prepared_transaction_offset, body_crc)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, p.length)
    if rs_encode_record(<uint8_t *>PyBytes_AS_STRING(out), p.length, &p.rec) != p.length:
        raise AssertionError("rs_encode_record disagrees with rs_record_length")
    return out


cdef int _get_writable(object buffer, Py_buffer *view) except -1:
    if not PyObject_CheckBuffer(buffer):
        raise TypeError(f"buffer must be a writable bytes-like object, not {type(buffer).__name__}")
    PyObject_GetBuffer(buffer, view, PyBUF_STRIDES)
    if view.readonly:
        PyBuffer_Release(view)
        raise TypeError("buffer is read-only")
    if not PyBuffer_IsContiguous(view, b'C'):
        PyBuffer_Release(view)
        raise TypeError("buffer must be C-contiguous")
    return 0


cdef int64_t _check_end(object end, Py_ssize_t size) except -1:
    if not isinstance(end, int):
        raise TypeError(f"end must be an int, not {type(end).__name__}")
    if end < 0 or end > size:
        raise ValueError(f"end {end} is out of range for a buffer of {size} bytes")
    return end


cdef int64_t _check_pos(object pos, Py_ssize_t size) except -1:
    if not isinstance(pos, int):
        raise TypeError(f"pos must be an int, not {type(pos).__name__}")
    if pos < 0 or pos > size:
        raise ValueError(f"pos {pos} is out of range for a buffer of {size} bytes")
    return pos


def encode_record_into(buffer, pos, *, topic, body, properties=b"", queue_id=0, flag=0, queue_offset=0,
                       physical_offset=0, sys_flag=0, born_timestamp=0, born_host=("127.0.0.1", 0),
                       store_timestamp=0, store_host=("127.0.0.1", 10911), reconsume_times=0,
                       prepared_transaction_offset=0, body_crc=None):
    """Write one record (same keywords as :func:`encode_record`) into ``buffer`` at ``pos``.

    Returns the record length. Raises ValueError("buffer too small: ...") if it does not fit;
    nothing is written when anything raises.
    """
    cdef Py_buffer view
    cdef int64_t at
    cdef _Prepared p
    _get_writable(buffer, &view)
    try:
        at = _check_pos(pos, view.len)
        p = _prepare(topic, body, properties, queue_id, flag, queue_offset, physical_offset, sys_flag,
                     born_timestamp, born_host, store_timestamp, store_host, reconsume_times,
                     prepared_transaction_offset, body_crc)
        if p.length > view.len - at:
            raise ValueError(f"buffer too small: the record needs {p.length} bytes at position {pos}, "
                             f"{view.len - at} available")
        if rs_encode_record(<uint8_t *>view.buf + at, view.len - at, &p.rec) != p.length:
            raise AssertionError("rs_encode_record disagrees with rs_record_length")
        return p.length
    finally:
        PyBuffer_Release(&view)


def encode_blank_into(buffer, pos, max_blank):
    """Write the 8-byte BLANK header (``max_blank``, MAGIC_BLANK) at ``pos``; returns 8."""
    cdef Py_buffer view
    cdef int64_t at
    cdef int32_t blank
    _get_writable(buffer, &view)
    try:
        at = _check_pos(pos, view.len)
        blank = <int32_t>_check_int(max_blank, "max_blank", INT32_MIN, INT32_MAX)
        if view.len - at < RS_END_FILE_MIN_BLANK:
            raise ValueError(f"buffer too small: the BLANK record needs {RS_END_FILE_MIN_BLANK} bytes "
                             f"at position {pos}, {view.len - at} available")
        rs_encode_blank(<uint8_t *>view.buf + at, blank)
        return RS_END_FILE_MIN_BLANK
    finally:
        PyBuffer_Release(&view)


# ---------------------------------------------------------------------------------------------
# Decoding

cdef dict _V4_TEXT = {}   # IPv4 address as uint32 -> dotted text


cdef object _host_text(const uint8_t *raw, int32_t length):
    cdef uint32_t key
    if length != RS_HOST_V4_LENGTH:
        return host_from_bytes(PyBytes_FromStringAndSize(<const char *>raw, length))
    key = (<uint32_t>raw[0] << 24) | (<uint32_t>raw[1] << 16) | (<uint32_t>raw[2] << 8) | raw[3]
    text = _V4_TEXT.get(key)
    if text is None:
        text = f"{raw[0]}.{raw[1]}.{raw[2]}.{raw[3]}"
        if len(_V4_TEXT) >= 4096:
            _V4_TEXT.clear()
        _V4_TEXT[key] = text
    return text


cdef inline int32_t _host_len(int32_t sys_flag, int32_t bit) noexcept nogil:
    return RS_HOST_V6_LENGTH if sys_flag & bit else RS_HOST_V4_LENGTH


cdef object _corrupt(int reason, object pos, int32_t total):
    msg = _MESSAGES[reason].format(pos=pos)
    if reason == _STOP_BLANK:
        msg += f" (length {total})"
    err = CorruptRecordError(msg)
    err.reason = reason
    err.position = pos
    return err
