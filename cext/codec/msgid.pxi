# Message ids (§3): string work, kept as close to the pure twin as the compiler allows
# Part of rocketstore.format._codec: included by cext/_codec.pyx, whose imports and
# constants it uses.


def _host_raw(host):
    if isinstance(host, str):
        try:
            return host_to_bytes(host)
        except ValueError:
            raise InvalidMessageError(f"{host!r} is not an IPv4 or IPv6 address") from None
    if isinstance(host, (bytes, bytearray, memoryview)) and len(host) in (RS_HOST_V4_LENGTH, RS_HOST_V6_LENGTH):
        return bytes(host)
    raise InvalidMessageError(f"host must be address text or 4 or 16 bytes, not {host!r}")


def make_offset_msg_id(host_bytes, port, offset):
    """offsetMsgId (§3.1): store address, int port and long offset as upper-case hex (32 or 56 chars)."""
    raw = _host_raw(host_bytes)
    _check_int(port, "port", INT32_MIN, INT32_MAX)
    _check_int(offset, "offset", INT64_MIN, INT64_MAX)
    return (raw + port.to_bytes(4, "big", signed=True) + offset.to_bytes(8, "big", signed=True)).hex().upper()


cdef bytes _unhex(s, str what):
    if not isinstance(s, str):
        raise InvalidMessageIdError(f"{what} must be a str, not {type(s).__name__}")
    if len(s) not in (32, 56):
        raise InvalidMessageIdError(f"{what} {s!r} is not 32 or 56 hex characters long")
    cdef Py_UCS4 ch
    for ch in <str>s:
        if not (u'0' <= ch <= u'9' or u'a' <= ch <= u'f' or u'A' <= ch <= u'F'):
            raise InvalidMessageIdError(f"{what} {s!r} is not hexadecimal")
    return bytes.fromhex(s)


cdef inline int _hex_value(Py_UCS4 ch) noexcept:
    cdef uint32_t c = <uint32_t>ch
    if 48 <= c <= 57:        # 0-9
        return <int>(c - 48)
    if 97 <= c <= 102:       # a-f
        return <int>(c - 87)
    if 65 <= c <= 70:        # A-F
        return <int>(c - 55)
    return -1


def parse_offset_msg_id(s):
    """``(host_bytes, port, offset)`` of an offsetMsgId; InvalidMessageIdError if malformed."""
    cdef uint8_t raw[28]
    cdef Py_ssize_t n, i, ip_len
    cdef int hi, lo
    cdef uint64_t offset = 0
    cdef uint32_t port = 0
    if type(s) is not str or len(<str>s) not in (32, 56):
        raw_b = _unhex(s, "offsetMsgId")   # says what is wrong
    else:
        n = len(<str>s) // 2
        for i in range(n):
            hi = _hex_value((<str>s)[2 * i])
            lo = _hex_value((<str>s)[2 * i + 1])
            if hi < 0 or lo < 0:
                _unhex(s, "offsetMsgId")   # raises, saying what is wrong
            raw[i] = <uint8_t>(hi * 16 + lo)
        raw_b = PyBytes_FromStringAndSize(<const char *>raw, n)
    ip_len = len(raw_b) - 12
    for i in range(4):
        port = (port << 8) | <uint8_t>raw_b[ip_len + i]
    for i in range(8):
        offset = (offset << 8) | <uint8_t>raw_b[ip_len + 4 + i]
    return raw_b[:ip_len], <int32_t>port, <int64_t>offset


def make_uniq_key(ip_bytes, pid, loader_hash, time_ms, counter, month_start_ms):
    """UNIQ_KEY (§3.2): ip, pid (16 bits), class-loader hash, ms since month start (32 bits), counter."""
    raw = _host_raw(ip_bytes)
    for name, value in (("pid", pid), ("loader_hash", loader_hash), ("time_ms", time_ms),
                        ("counter", counter), ("month_start_ms", month_start_ms)):
        _check_int(value, name, INT64_MIN, INT64_MAX)
    span = (time_ms - month_start_ms) & 0xFFFFFFFF
    if span >= 0x80000000 and span - (1 << 32) > -1000000:
        span = 0   # 5.x: a clock stepped back by less than 1000 s counts as the month start
    return (raw + (pid & 0xFFFF).to_bytes(2, "big") + (loader_hash & 0xFFFFFFFF).to_bytes(4, "big")
            + span.to_bytes(4, "big") + (counter & 0xFFFF).to_bytes(2, "big")).hex().upper()


def uniq_key_time(key, now_ms, month_start_fn=None):
    """getNearlyTimeFromID: the creation time a UNIQ_KEY encodes, as seen at ``now_ms``.

    ``month_start_fn(ms)`` gives the start of the month containing ``ms`` (default: local time).
    """
    raw = _unhex(key, "UNIQ_KEY")
    ip_len = len(raw) - 12
    span = int.from_bytes(raw[ip_len + 6:ip_len + 10], "big")
    month_start = month_start_fn or _month_start
    base = month_start(now_ms)
    if base + span >= now_ms:
        base = month_start(base - 1)
    return base + span
