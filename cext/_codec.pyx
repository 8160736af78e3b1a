# cython: language_level=3, embedsignature=True
"""CommitLog record codec, Java hashes and message ids (compiled twin of rocketstore.format._codec_py).

The format itself is written down once, in cext/record.h; this module wraps it for Python with the
same names, exceptions and messages as the pure-Python twin (whose docstring carries the layout table).
The kernels over a stretch of records (queue keys and ranges, field checks, verify's and recovery's
scans) are rocketstore.format._scan's.
"""

cimport cython
from cpython.buffer cimport (PyBUF_SIMPLE, PyBUF_STRIDES, PyBUF_WRITABLE, PyBuffer_IsContiguous,
                             PyBuffer_Release, PyObject_CheckBuffer, PyObject_GetBuffer)
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_SetItem
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from libc.stdint cimport (int32_t, int64_t, uint8_t, uint32_t, uint64_t, INT32_MIN, INT32_MAX, INT64_MIN,
                          INT64_MAX)
from libc.string cimport memchr, memcmp, memcpy, memset

# record.h's API and the batch-row struct, declared once in _codec.pxd (next to this file).
from _codec cimport *
# index.h's walk (the IndexFile format, declared once in _index.pxd): key lookups walk the
# index files' maps here, as rocketstore.queues._index.select_files does
from _index cimport (rs_index_t, rs_index_walk_t, rs_index_walk_start, rs_index_walk_next, rs_index_header_i64,
                     rs_index_file_size, rs_index_java_hash_update, rs_index_hash_of_java,
                     RS_INDEX_POS_BEGIN_TIMESTAMP,
                     RS_INDEX_POS_END_TIMESTAMP, RS_INDEX_INVALID_INDEX)
from cpython.unicode cimport PyUnicode_DATA, PyUnicode_GET_LENGTH, PyUnicode_KIND

import operator as _operator
from rocketstore.base._clock import month_start as _month_start, now_ms as _now_ms
from rocketstore.base.compression import inflate as _inflate
from collections.abc import Mapping as _Mapping

import numpy as _np

# the rare shapes of a put's properties (a mapping, bad input): one copy, the pure twin's
from rocketstore.format._codec_py import put_properties as _put_properties_slow
# a properties mapping checked and encoded (the argument checks and the error each case raises:
# one copy, the pure twin's; the hot paths that encode properties are the put's own, below and in
# rocketstore.log._store)
from rocketstore.format._codec_py import encode_properties
from rocketstore.format._codec_py import _topic_bytes as _topic_bytes_slow
from rocketstore.format._codec_py import timer_properties as _timer_properties_slow
from rocketstore.errors import (CorruptRecordError, InvalidMessageError, InvalidMessageIdError,
                                PropertiesTooLargeError)
from rocketstore import message as _message_mod
from rocketstore.status import GetMessageStatus as _GetMessageStatus
from rocketstore.message import MessageExt as _PyMessageExt, host_from_bytes, host_to_bytes

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

cdef extern from "Python.h":
    object PyUnicode_DecodeUTF8(const char *s, Py_ssize_t size, const char *errors)
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL
    void PyObject_GC_Track(object op)
    void PyObject_GC_UnTrack(object op)
    int PyObject_GC_IsTracked(object op)

__all__ = [
    "java_hash", "java_hash_bytes", "tags_code", "index_key_hash", "body_crc",
    "encode_properties", "put_properties", "plain_message_items", "decode_properties", "record_length",
    "encode_record", "encode_record_into", "encode_blank_into", "decode_record",
    "decode_batch", "record_from_row", "messages_from_rows", "row_messages", "MessageExt", "pull_units",
    "segment_messages", "queue_message", "queue_messages", "record_at", "message_by_id", "key_messages", "key_lookup",
    "unique_lookup", "FastReads", "FastRLock",
    "PULL_END", "PULL_FULL", "PULL_OUTSIDE", "PULL_DAMAGED",
    "dispatch_info", "property_pieces",
    "make_offset_msg_id", "parse_offset_msg_id", "make_uniq_key", "uniq_key_time",
    "RECORD_DTYPE", "DISPATCH_DTYPE", "KEYREF_DTYPE", "PIECE_DTYPE", "SCHEDULE_TOPIC", "DEFAULT_DELAY_LEVELS_MS",
]

# ---- constants, from record.h ----
MAGIC_V1 = RS_MAGIC_V1
MAGIC_V2 = RS_MAGIC_V2
MAGIC_BLANK = RS_MAGIC_BLANK
END_FILE_MIN_BLANK_LENGTH = RS_END_FILE_MIN_BLANK

SYSFLAG_COMPRESSED = RS_SYSFLAG_COMPRESSED
SYSFLAG_MULTI_TAGS = RS_SYSFLAG_MULTI_TAGS
SYSFLAG_TRANSACTION_MASK = RS_SYSFLAG_TRANSACTION_MASK
TRANSACTION_NOT_TYPE = RS_TRANSACTION_NOT_TYPE
TRANSACTION_PREPARED_TYPE = RS_TRANSACTION_PREPARED_TYPE
TRANSACTION_COMMIT_TYPE = RS_TRANSACTION_COMMIT_TYPE
TRANSACTION_ROLLBACK_TYPE = RS_TRANSACTION_ROLLBACK_TYPE
SYSFLAG_BORNHOST_V6 = RS_SYSFLAG_BORNHOST_V6
SYSFLAG_STOREHOST_V6 = RS_SYSFLAG_STOREHOST_V6
SYSFLAG_NEED_UNWRAP = RS_SYSFLAG_NEED_UNWRAP
SYSFLAG_INNER_BATCH = RS_SYSFLAG_INNER_BATCH
SYSFLAG_COMPRESSION_MASK = RS_SYSFLAG_COMPRESSION_MASK

MAX_TOPIC_LENGTH = RS_MAX_TOPIC_LENGTH
MAX_TOPIC_LENGTH_V2 = RS_MAX_TOPIC_LENGTH_V2
MAX_PROPERTIES_LENGTH = RS_MAX_PROPERTIES_LENGTH

INT_SIZE = RS_INT_SIZE
LONG_SIZE = RS_LONG_SIZE
HOST_V4_LENGTH = RS_HOST_V4_LENGTH
HOST_V6_LENGTH = RS_HOST_V6_LENGTH
HOST_V6_EXTRA_LENGTH = RS_HOST_V6_EXTRA
TOPIC_LENGTH_SIZE = RS_TOPIC_LEN_SIZE
TOPIC_LENGTH_SIZE_V2 = RS_TOPIC_LEN_SIZE_V2
PROPERTIES_LENGTH_SIZE = RS_PROPERTIES_LEN_SIZE

POS_TOTAL_SIZE = RS_POS_TOTAL_SIZE
POS_MAGIC = RS_POS_MAGIC
POS_BODY_CRC = RS_POS_BODY_CRC
POS_QUEUE_ID = RS_POS_QUEUE_ID
POS_FLAG = RS_POS_FLAG
POS_QUEUE_OFFSET = RS_POS_QUEUE_OFFSET
POS_PHYSICAL_OFFSET = RS_POS_PHYSICAL_OFFSET
POS_SYSFLAG = RS_POS_SYSFLAG
POS_BORN_TIMESTAMP = RS_POS_BORN_TIMESTAMP
POS_BORN_HOST = RS_POS_BORN_HOST
POS_STORE_TIMESTAMP = RS_POS_STORE_TIMESTAMP
POS_STORE_HOST = RS_POS_STORE_HOST
POS_RECONSUME_TIMES = RS_POS_RECONSUME_TIMES
POS_PREPARED_TRANSACTION_OFFSET = RS_POS_PREPARED_TRANSACTION_OFFSET
POS_BODY_LENGTH = RS_POS_BODY_LENGTH
POS_BODY = RS_POS_BODY
RECORD_FIXED_LENGTH = RS_RECORD_FIXED_LENGTH

STOP_LIMIT = 0
STOP_BLANK = 1
STOP_END = 2
STOP_TRUNCATED = 3
STOP_CORRUPT = 4
STOP_BAD_CRC = 5

# why decode_record raised, in words: the pure twin's table (the STOP_* values are the same)
from rocketstore.format._codec_py import _MESSAGES

RECORD_DTYPE = _np.dtype([
    ("position", "=i8"), ("size", "=i4"), ("magic", "=i4"), ("body_crc", "=i4"),
    ("queue_id", "=i4"), ("flag", "=i4"), ("queue_offset", "=i8"), ("physical_offset", "=i8"),
    ("sys_flag", "=i4"), ("born_timestamp", "=i8"), ("born_host", "S16"), ("born_port", "=i4"),
    ("store_timestamp", "=i8"), ("store_host", "S16"), ("store_port", "=i4"),
    ("reconsume_times", "=i4"), ("prepared_transaction_offset", "=i8"),
    ("body_pos", "=i8"), ("body_len", "=i4"), ("topic_pos", "=i8"), ("topic_len", "=i4"),
    ("properties_pos", "=i8"), ("properties_len", "=i4"),
], align=True)


DISPATCH_DTYPE = _np.dtype([("tags_code", "=i8"), ("tags_pos", "=i8"), ("tags_len", "=i4"),
                            ("delay_level", "=i4")], align=True)
KEYREF_DTYPE = _np.dtype([("key_pos", "=i8"), ("key_len", "=i4"), ("record", "=i4")], align=True)
PIECE_DTYPE = _np.dtype([("name_pos", "=i8"), ("value_pos", "=i8"), ("name_len", "=i4"),
                         ("value_len", "=i4")], align=True)

SCHEDULE_TOPIC = RS_SCHEDULE_TOPIC[:RS_SCHEDULE_TOPIC_LEN].decode("ascii")
DEFAULT_DELAY_LEVELS_MS = (1000, 5000, 10000, 30000, 60000, 120000, 180000, 240000, 300000, 360000,
                           420000, 480000, 540000, 600000, 1200000, 1800000, 3600000, 7200000)


cdef _check_layout(str struct_name, dict offsets, Py_ssize_t size, object dtype, str dtype_name):
    expected = {name: dtype.fields[name][1] for name in dtype.names}
    if offsets != expected or size != dtype.itemsize:
        raise ImportError(f"{struct_name} layout {offsets} (size {size}) does not match "
                          f"{dtype_name} {expected} (itemsize {dtype.itemsize})")


cdef _check_row_layouts():
    """decode_batch and dispatch_info write C structs straight into numpy arrays: prove they match."""
    cdef rs_batch_row row
    cdef rs_dispatch_row info
    cdef rs_keyref_row key
    cdef rs_piece_row piece
    cdef char *base = <char *>&row
    _check_layout("rs_batch_row", {
        "position": <char *>&row.position - base, "size": <char *>&row.size - base,
        "magic": <char *>&row.magic - base, "body_crc": <char *>&row.body_crc - base,
        "queue_id": <char *>&row.queue_id - base, "flag": <char *>&row.flag - base,
        "queue_offset": <char *>&row.queue_offset - base,
        "physical_offset": <char *>&row.physical_offset - base,
        "sys_flag": <char *>&row.sys_flag - base, "born_timestamp": <char *>&row.born_timestamp - base,
        "born_host": <char *>&row.born_host[0] - base, "born_port": <char *>&row.born_port - base,
        "store_timestamp": <char *>&row.store_timestamp - base,
        "store_host": <char *>&row.store_host[0] - base, "store_port": <char *>&row.store_port - base,
        "reconsume_times": <char *>&row.reconsume_times - base,
        "prepared_transaction_offset": <char *>&row.prepared_transaction_offset - base,
        "body_pos": <char *>&row.body_pos - base, "body_len": <char *>&row.body_len - base,
        "topic_pos": <char *>&row.topic_pos - base, "topic_len": <char *>&row.topic_len - base,
        "properties_pos": <char *>&row.properties_pos - base,
        "properties_len": <char *>&row.properties_len - base,
    }, sizeof(rs_batch_row), RECORD_DTYPE, "RECORD_DTYPE")
    base = <char *>&info
    _check_layout("rs_dispatch_row", {
        "tags_code": <char *>&info.tags_code - base, "tags_pos": <char *>&info.tags_pos - base,
        "tags_len": <char *>&info.tags_len - base, "delay_level": <char *>&info.delay_level - base,
    }, sizeof(rs_dispatch_row), DISPATCH_DTYPE, "DISPATCH_DTYPE")
    base = <char *>&key
    _check_layout("rs_keyref_row", {
        "key_pos": <char *>&key.key_pos - base, "key_len": <char *>&key.key_len - base,
        "record": <char *>&key.record - base,
    }, sizeof(rs_keyref_row), KEYREF_DTYPE, "KEYREF_DTYPE")
    base = <char *>&piece
    _check_layout("rs_piece_row", {
        "name_pos": <char *>&piece.name_pos - base, "value_pos": <char *>&piece.value_pos - base,
        "name_len": <char *>&piece.name_len - base, "value_len": <char *>&piece.value_len - base,
    }, sizeof(rs_piece_row), PIECE_DTYPE, "PIECE_DTYPE")


_check_row_layouts()

# Above this many bytes decode_batch scans without the GIL (the buffer stays pinned meanwhile).
cdef enum:
    _NOGIL_SCAN_BYTES = 65536


# ---------------------------------------------------------------------------------------------
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
    """The properties of a put (see rocketstore.format._codec_py.put_properties): plain str tags, keys
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


# The buffer, range and table checks and the scan loop decode_batch and the stretch kernels of
# rocketstore.format._scan share: written once, in rows.pxi, and compiled into each module.
include "rows.pxi"


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


# ---------------------------------------------------------------------------------------------
# The compiled message: a record's fixed fields in C, the rest decoded when first asked for

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
    """The MessageExt of every row of a decode_batch array (see rocketstore.format._codec_py)."""
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
    rocketstore.format._codec_py.segment_messages)."""
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


# ---------------------------------------------------------------------------------------------
# Dispatch (§2 tagsCode and DELAY, §5.2 index keys): what the ConsumeQueues and the index need

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
    rocketstore.format._codec_py.dispatch_info). Large batches are scanned without the GIL; ``buffer``
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


# ---------------------------------------------------------------------------------------------
# Message ids (§3): string work, kept as close to the pure twin as the compiler allows


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


# ---------------------------------------------------------------------------------------------
# Reading what ConsumeQueue units point at, checked (pull_units: one call per segment of a pull)

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
    """One step of a pull over ConsumeQueue units (see the pure twin, rocketstore.format._codec_py.pull_units)."""
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


# ---------------------------------------------------------------------------------------------
# Lookups in one call: a message by queue position, the messages an index lookup found

# ---- Small helpers of the point reads: a power of two's shift, a record's prefetch ----

cdef extern from *:
    """
    #define rs_ctz64(x) ((int)__builtin_ctzll(x))
    """
    int rs_ctz64(uint64_t x) noexcept nogil   # x != 0


cdef extern from *:
    void __builtin_prefetch(const void *addr) noexcept nogil


cdef enum:
    _RECORD_GUESS = 320   # a record's length before its header is read (128-byte body, a key: ~300)


cdef inline void _prefetch_record(const uint8_t *base, int64_t pos, int64_t size, int64_t readable) noexcept:
    """Start loading every cache line of base[pos:pos + size] (within ``readable``) at once: a
    random read's record misses the caches, and the decoder reads its lines one after another
    (header, body for the CRC, topic and properties), each a miss of its own otherwise."""
    cdef int64_t line, end = pos + size
    if end > readable:
        end = readable
    line = pos & ~(<int64_t>63)
    while line < end:
        __builtin_prefetch(base + line)
        line += 64


include "state.pxi"


cdef class FastRLock   # defined with the POP service's code below


@cython.cdivision(True)   # offset - first >= 0 and size > 0: C's division is the floor
cdef MappedState _segment_of(list files, int64_t offset, int64_t *start):
    """The file of ``files`` (a SegmentTable's: of one size, ascending, without gaps) that
    holds ``offset``, or None; ``start`` gets where it starts."""
    cdef Py_ssize_t n
    cdef int64_t first, size, k
    cdef MappedState head, mf
    if files is None:
        return None
    n = len(files)
    if n == 0:
        return None
    o = files[0]
    if not _is_mapped(o):
        return None
    head = <MappedState>o
    first = head.file_from_offset
    size = head.file_size
    if size <= 0 or offset < first:
        return None
    if size & (size - 1) == 0:   # a power of two (a CommitLog segment): a shift, not a division
        k = (offset - first) >> rs_ctz64(<uint64_t>size)
    else:
        k = (offset - first) // size
    if k >= n:
        return None
    o = files[k]
    if not _is_mapped(o):
        return None
    mf = <MappedState>o
    start[0] = first + k * size
    if mf.file_from_offset != start[0] or mf.file_size != size:   # not one run of equal files
        return None
    return mf


cdef inline list _files_of(object segments):
    """The files of ``segments`` (a SegmentTable), or None."""
    if _is_segments(segments):
        return (<SegmentTable>segments).files
    return None


cdef object _utf8_holder(str text):
    """What holds the UTF-8 bytes (surrogateescape) of ``text``: ``text`` itself when its own
    cached UTF-8 is them (no escapes), else their encoding; None when it does not encode (such
    text is no record's). :func:`_utf8_of` gives the bytes."""
    try:
        PyUnicode_AsUTF8AndSize(text, NULL)
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return None


cdef const uint8_t *_utf8_of(object holder, Py_ssize_t *size) except NULL:
    if type(holder) is bytes:
        size[0] = PyBytes_GET_SIZE(holder)
        return <const uint8_t *>PyBytes_AS_STRING(holder)
    return <const uint8_t *>PyUnicode_AsUTF8AndSize(holder, size)


cdef int64_t _readable(MappedState mf, int64_t start, object core) except -1:
    """How much of segment ``mf`` (starting at ``start``) holds complete records (see the pure
    twin)."""
    cdef int64_t end
    if core is None:
        end = mf.wrote_position
    else:
        end = <int64_t>core.wrote_offset - start
    return 0 if end < 0 else (mf.file_size if end > mf.file_size else end)


cdef bint _mapped(MappedState mf, int64_t readable, Py_buffer *view) except -1:
    """Export ``mf``'s map into ``view`` (True), or False once it is closed or shorter than
    ``readable``; the caller releases a True export."""
    mm = mf.mm
    if mm is None:
        return False
    try:
        PyObject_GetBuffer(mm, view, PyBUF_SIMPLE)
    except ValueError:   # closed by another thread since it was read
        return False
    if view.len < readable:
        PyBuffer_Release(view)
        return False
    return True


cpdef object queue_message(queues, topic, queue_id, queue_offset, segments, core):
    """The message at ``queue_offset`` of (topic, queue_id), read and checked in one call (see the
    pure twin, rocketstore.format._codec_py.queue_message); None: the careful path decides."""
    cdef Py_buffer view
    cdef const uint8_t *u
    cdef const uint8_t *t
    cdef int64_t qo = 0, qid = 0, start = 0, pos = 0, offset, size, readable
    cdef Py_ssize_t t_len = 0
    cdef int64_t lowest = 0, below = 0
    cdef MappedState mf, seg
    if (type(topic) is not str or not _plain_int(queue_id, INT32_MIN, &qid) or qid > INT32_MAX
            or not _plain_int(queue_offset, 0, &qo) or qo > INT64_MAX // _CQ_UNIT):
        return None
    found = _queue_of(queues, topic, queue_id, qid)
    if found is None:
        return None
    if not _is_queue(found):   # a read-only store's TailQueue: units on disk, then in memory
        if (not hasattr(found, "_tail") or not _plain_int(found._min, 0, &lowest)
                or not _plain_int(found._start, 0, &below)):
            return None
        found = found.disk
        if not _is_queue(found) or not lowest <= qo < below or (<QueueState>found).holes:
            return None   # not on disk: the careful path reads the memory tail
    mf = _unit_file(<QueueState>found, qo, 1, &pos)
    if mf is None:
        return None
    if not _mapped(mf, pos + _CQ_UNIT, &view):
        return None
    u = <const uint8_t *>view.buf + pos
    offset = _be64(u)
    size = _be32(u + 8)
    PyBuffer_Release(&view)
    if offset < 0 or size <= 0 or (offset == 0 and size == _PLACEHOLDER_SIZE):
        return None
    seg = _segment_of(_files_of(segments), offset, &start)
    if seg is None:
        return None
    pos = offset - start
    readable = _readable(seg, start, core)
    if pos >= readable:
        return None
    keep = _utf8_holder(topic)
    if keep is None or not _mapped(seg, readable, &view):
        return None
    t = _utf8_of(keep, &t_len)
    _prefetch_record(<const uint8_t *>view.buf, pos, size, readable)
    try:
        return _unit_message(<const uint8_t *>view.buf, readable, None, pos, offset, size, qo, t, t_len,
                             <int32_t>qid, None)
    finally:
        PyBuffer_Release(&view)


cdef object _queue_run(object queues, str topic, object queue_id, int64_t qid, int64_t offset, int64_t max_msgs):
    """(units as bytes, min_offset, max_offset) for queue_messages, or None (see the pure twin)."""
    cdef Py_buffer view
    cdef int64_t lo = 0, hi = 0, n, at, tail_start = 0
    cq = _queue_of(queues, topic, queue_id, qid)
    if cq is None:
        return None
    if _is_queue(cq):
        if not _queue_bounds(<QueueState>cq, &lo, &hi):
            return None
    elif not _plain_int(cq.min_offset, 0, &lo) or not _plain_int(cq.max_offset, 0, &hi):
        return None
    if not lo <= offset < hi:
        return None   # a bound status: the careful path says which
    n = hi - offset if hi - offset < max_msgs else max_msgs
    if not _is_queue(cq):   # a read-only store's TailQueue: units on disk, then in memory
        if not hasattr(cq, "_tail") or not _plain_int(cq._start, 0, &tail_start):
            return None
        if offset < tail_start:
            disk = cq.disk
            if not _is_queue(disk) or (<QueueState>disk).holes or offset + n > tail_start:
                return None   # no disk queue, or a pull from disk into memory: the careful path
            return _disk_run(<QueueState>disk, offset, n, lo, hi)
        tail = cq._tail
        if not isinstance(tail, _np.ndarray) or not tail.flags.c_contiguous or tail.itemsize != _CQ_UNIT:
            return None
        PyObject_GetBuffer(tail, &view, PyBUF_SIMPLE)
        try:
            at = (offset - tail_start) * _CQ_UNIT
            if at < 0 or at + n * _CQ_UNIT > view.len:
                return None
            units = PyBytes_FromStringAndSize(<const char *>view.buf + at, n * _CQ_UNIT)
        finally:
            PyBuffer_Release(&view)
        return units, lo, hi
    return _disk_run(<QueueState>cq, offset, n, lo, hi)


cdef bint _queue_bounds(QueueState cq, int64_t *lo, int64_t *hi) except -1:
    """ConsumeQueue ``cq``'s ``min_offset`` and ``max_offset`` (its properties' arithmetic on the
    fields it extends: ``_min_logic``, and the end of what its last file holds) into ``lo`` and
    ``hi``, read here rather than through two Python properties; False when they are not plain
    (no file table, a file that is not a mapped one, a negative position)."""
    cdef list files
    cdef MappedState last
    cdef int64_t end = 0
    if cq._files is None or cq._min_logic < 0:
        return False
    files = cq._files.files
    if files is None:
        return False
    if len(files):
        o = files[len(files) - 1]
        if not _is_mapped(o):
            return False
        last = <MappedState>o
        end = last.file_from_offset + last.wrote_position
        if end < 0 or last.file_from_offset < 0 or last.wrote_position < 0:
            return False
    lo[0] = cq._min_logic // _CQ_UNIT
    hi[0] = end // _CQ_UNIT
    return True


cdef object _queue_of(object queues, str topic, object queue_id, int64_t qid):
    """The queue (topic, queue_id) of a store's QueueTable ``queues`` (a ConsumeQueueStore or a
    TailQueueStore), or None: no such queue, or one with holes (the careful path rebuilds it
    first). ``qid``: ``queue_id``, a plain int."""
    if not _is_table(queues):
        return None
    cq = (<QueueTable>queues).find(topic, queue_id, qid)
    if cq is None:
        return None
    if _is_queue(cq):
        if (<QueueState>cq).holes:
            return None
    elif cq.holes:
        return None
    return cq


cdef MappedState _unit_file(QueueState cq, int64_t offset, int64_t n, int64_t *pos):
    """The file of ConsumeQueue ``cq`` that holds the ``n`` written units from queue ``offset``
    (``pos``: where the first starts in it), or None: before the queue's start, not one file,
    not all written yet (a pull that would go on in the next file is the careful path's)."""
    cdef int64_t start = 0, byte = offset * _CQ_UNIT
    cdef MappedState mf
    if byte < cq._min_logic or cq._files is None:
        return None
    mf = _segment_of(cq._files.files, byte, &start)
    if mf is None:
        return None
    pos[0] = byte - start
    if (mf.wrote_position - pos[0]) // _CQ_UNIT < n:
        return None
    return mf


cdef object _disk_run(QueueState cq, int64_t offset, int64_t n, object lo, object hi):
    """_queue_run's units read from a ConsumeQueue's file, or None."""
    cdef Py_buffer view
    cdef int64_t pos = 0
    cdef MappedState mf
    mf = _unit_file(cq, offset, n, &pos)
    if mf is None:
        return None
    if not _mapped(mf, pos + n * _CQ_UNIT, &view):
        return None
    try:
        units = PyBytes_FromStringAndSize(<const char *>view.buf + pos, n * _CQ_UNIT)
    finally:
        PyBuffer_Release(&view)
    return units, lo, hi


def queue_messages(queues, topic, queue_id, offset, max_msgs, segments, core):
    """A pull of every message from ``offset`` of (topic, queue_id), up to ``max_msgs``, in one
    call (see the pure twin, rocketstore.format._codec_py.queue_messages); None: the careful path
    decides."""
    cdef Py_buffer view
    cdef const uint8_t *u
    cdef const uint8_t *t
    cdef int64_t qo = 0, qid = 0, want = 0, start = 0, seg_start = 0, seg_end = 0, readable = 0
    cdef int64_t at, size, i, n
    cdef Py_ssize_t t_len = 0
    cdef bint mapped = False
    cdef list messages = []
    cdef MappedState seg
    if (type(topic) is not str or not _plain_int(queue_id, INT32_MIN, &qid) or qid > INT32_MAX
            or not _plain_int(offset, 0, &qo) or qo > INT64_MAX // _CQ_UNIT
            or not _plain_int(max_msgs, 1, &want)):
        return None
    run = _queue_run(queues, topic, queue_id, qid, qo, want)
    if run is None:
        return None
    units, lo, hi = run
    keep = _utf8_holder(topic)
    if keep is None:
        return None
    t = _utf8_of(keep, &t_len)
    n = PyBytes_GET_SIZE(units) // _CQ_UNIT
    try:
        for i in range(n):
            u = <const uint8_t *>PyBytes_AS_STRING(units) + i * _CQ_UNIT
            at = _be64(u)
            size = _be32(u + 8)
            if at < 0 or size <= 0 or (at == 0 and size == _PLACEHOLDER_SIZE):
                return None
            if not mapped or at < seg_start or at >= seg_end:
                if mapped:
                    PyBuffer_Release(&view)
                    mapped = False
                seg = _segment_of(_files_of(segments), at, &start)
                if seg is None:
                    return None
                readable = _readable(seg, start, core)
                if not _mapped(seg, readable, &view):
                    return None
                mapped = True
                seg_start, seg_end = start, start + seg.file_size
            m = _unit_message(<const uint8_t *>view.buf, readable, None, at - seg_start, at, size, qo + i,
                              t, t_len, <int32_t>qid, None)
            if m is None:
                return None
            messages.append(m)
    finally:
        if mapped:
            PyBuffer_Release(&view)
    return messages, units, lo, hi


cdef object _record_at(object segments, object core, int64_t offset):
    """The message of the whole, CRC-valid record starting at CommitLog ``offset``, or None."""
    cdef Py_buffer view
    cdef rs_record rec
    cdef int64_t start = 0, pos, readable, rc
    cdef MappedState seg
    seg = _segment_of(_files_of(segments), offset, &start)
    if seg is None:
        return None
    pos = offset - start
    readable = _readable(seg, start, core)
    if pos >= readable or not _mapped(seg, readable, &view):
        return None
    _prefetch_record(<const uint8_t *>view.buf, pos, _RECORD_GUESS, readable)
    try:
        rc = rs_decode_record(<const uint8_t *>view.buf + pos, readable - pos, &rec, 1)
        if rc <= 0 or rec.physical_offset != offset:
            return None
        return _message(None, <const uint8_t *>view.buf, pos, &rec)
    finally:
        PyBuffer_Release(&view)


cpdef object record_at(segments, core, offset):
    """The message at CommitLog ``offset`` in one call (see the pure twin,
    rocketstore.format._codec_py.record_at); None: the careful path decides."""
    cdef int64_t at = 0
    if not _plain_int(offset, 0, &at):
        return None
    return _record_at(segments, core, at)


cpdef object message_by_id(segments, core, msg_id):
    """The message whose offsetMsgId is ``msg_id``, in one call (see the pure twin,
    rocketstore.format._codec_py.message_by_id); None: the careful path decides."""
    cdef uint64_t offset = 0
    cdef uint8_t raw[28]          # host, port, offset: what the id's hex digits spell
    cdef Py_ssize_t n, i
    cdef int hi, lo
    cdef int32_t host_len
    cdef MessageExt m
    if type(msg_id) is not str or len(<str>msg_id) not in (32, 56):
        return None
    n = len(<str>msg_id)
    for i in range(n // 2):
        hi = _hex_value((<str>msg_id)[2 * i])
        lo = _hex_value((<str>msg_id)[2 * i + 1])
        if hi < 0 or lo < 0:
            return None
        raw[i] = <uint8_t>(hi << 4 | lo)
    for i in range(n // 2 - 8, n // 2):   # the last 8 bytes: the offset
        offset = (offset << 8) | raw[i]
    if offset > <uint64_t>INT64_MAX:
        return None
    found = _record_at(segments, core, <int64_t>offset)
    if found is None:
        return None
    # the id must be the record's own (its msg_id, compared as the careful path does, without
    # formatting it): the same store host (of the id's length) and port
    m = <MessageExt>found
    host_len = _host_len(m.sys_flag, RS_SYSFLAG_STOREHOST_V6)
    if (n != 2 * (host_len + 12) or memcmp(raw, m._store_raw, <size_t>host_len) != 0
            or raw[host_len] != <uint8_t>(<uint32_t>m._store_port >> 24)
            or raw[host_len + 1] != <uint8_t>(<uint32_t>m._store_port >> 16)
            or raw[host_len + 2] != <uint8_t>(<uint32_t>m._store_port >> 8)
            or raw[host_len + 3] != <uint8_t>(<uint32_t>m._store_port)):
        return None
    return m


cdef bint _has_piece(const uint8_t *p, int64_t n, const uint8_t *want, Py_ssize_t want_len) noexcept nogil:
    """Whether one of the space-separated pieces of p[0:n] is want[0:want_len] (a KEYS value:
    UTF-8 never has the byte 0x20 inside a character, so this is ``want in value.split(" ")``)."""
    cdef int64_t start = 0, i
    for i in range(n + 1):
        if i == n or p[i] == 0x20:
            if i - start == want_len and memcmp(p + start, want, <size_t>want_len) == 0:
                return True
            start = i + 1
    return False


cdef object _IN_ARRAY = object()   # _index_walk's answer: in the caller's array


cdef object _key_messages(object offsets, const int64_t *candidates, Py_ssize_t count, list files, object core,
                          str topic, str key, int64_t lo, int64_t hi, int64_t left, bint by_unique):
    """key_messages' loop (see the pure twin) over ``offsets`` (Python ints), or when it is
    ``_IN_ARRAY`` over ``candidates[:count]`` (an index walk's, in C). The record's topic and keys
    are compared as the UTF-8 (surrogateescape) bytes of ``topic`` and ``key``, which is comparing
    the text the message decodes them to; a message is made for a hit only."""
    cdef Py_buffer view
    cdef rs_record rec
    cdef rs_dispatch_props props
    cdef int64_t offset, pos, readable, rc, previous = -1
    cdef bint first = True, hit
    cdef list found = []
    cdef Py_ssize_t t_len = 0, k_len = 0
    cdef int64_t start = 0
    cdef const uint8_t *t
    cdef const uint8_t *k
    cdef Py_ssize_t j
    cdef bint in_array
    cdef MappedState seg
    keep_t = _utf8_holder(topic)
    keep_k = _utf8_holder(key)
    if keep_t is None or keep_k is None:   # no record decodes to such text
        return found
    t = _utf8_of(keep_t, &t_len)
    k = _utf8_of(keep_k, &k_len)
    in_array = offsets is _IN_ARRAY
    if not in_array:
        if type(offsets) is not list:
            offsets = list(offsets)
        count = len(<list>offsets)
    for j in range(count):
        if left <= 0:
            break
        if in_array:
            offset = candidates[j]
        else:
            offset = _check_int((<list>offsets)[j], "offset", INT64_MIN, INT64_MAX)
        if offset == previous and not first:
            continue   # indexed twice under this key (a KEYS entry and the UNIQ_KEY): read once
        previous = offset
        first = False
        seg = _segment_of(files, offset, &start)
        if seg is None:
            continue
        pos = offset - start
        readable = _readable(seg, start, core)
        if pos >= readable:
            continue
        if not _mapped(seg, readable, &view):
            return None
        _prefetch_record(<const uint8_t *>view.buf, pos, _RECORD_GUESS, readable)
        try:
            rc = rs_decode_record(<const uint8_t *>view.buf + pos, readable - pos, &rec, 1)
            if (rc <= 0 or rec.physical_offset != offset   # a record moved here names another place
                    or rec.store_timestamp < lo or rec.store_timestamp > hi or rec.topic_len != t_len
                    or memcmp(rec.topic, t, <size_t>t_len) != 0):
                continue
            rs_dispatch_properties(rec.properties, rec.properties_len, &props)
            hit = (props.uniq_key_pos >= 0 and props.uniq_key_len == k_len
                   and memcmp(rec.properties + props.uniq_key_pos, k, <size_t>k_len) == 0)
            if not hit and not by_unique and props.keys_pos >= 0:
                hit = _has_piece(rec.properties + props.keys_pos, props.keys_len, k, k_len)
            if hit:
                found.append(_message(None, <const uint8_t *>view.buf, pos, &rec))
                left -= 1
        finally:
            PyBuffer_Release(&view)
    return found


def key_messages(offsets, segments, core, topic, key, begin, end, limit, unique):
    """The messages of ``topic`` under ``key`` at the CommitLog ``offsets`` an index lookup found,
    each re-checked (see the pure twin, rocketstore.format._codec_py.key_messages)."""
    if type(topic) is not str or type(key) is not str:
        raise TypeError("topic and key must be str")
    cdef int64_t lo = _check_int(begin, "begin", INT64_MIN, INT64_MAX)
    cdef int64_t hi = _check_int(end, "end", INT64_MIN, INT64_MAX)
    cdef int64_t left = _check_int(limit, "limit", 0, INT64_MAX)
    files = _files_of(segments)
    if files is None:
        raise TypeError("segments must be a SegmentTable")
    return _key_messages(offsets, NULL, 0, files, core, topic, key, lo, hi, left, unique)


cdef bint _plain_int(object value, int64_t lo, int64_t *out):
    """``value`` (an int, not a bool nor a subclass) in ``[lo, INT64_MAX]`` into ``out``: True, else
    False."""
    cdef int overflow = 0
    cdef long long x
    if type(value) is not int:
        return False
    x = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow != 0 or x < lo:
        return False
    out[0] = x
    return True


cdef object _INT64_MAX = INT64_MAX   # made once: the usual end of a lookup's window


cpdef object key_lookup(services, segments, core, topic, key, max_num, begin, end, cap, dispatcher=None):
    """``MessageStore.query_by_key`` in one call: the index walk of each service under its lock,
    then the re-check and decode of each hit (see the pure twin, rocketstore.format._codec_py.key_lookup);
    None: the careful path decides."""
    cdef int64_t lo = 0, hi = INT64_MAX, most = 0, limit = 0
    cdef int64_t found[2 * _WALK_ROOM]
    cdef Py_ssize_t count = 0
    if (type(topic) is not str or type(key) is not str or not topic or not key
            or type(services) is not tuple):
        return None
    if (not _plain_int(max_num, 1, &limit) or not _plain_int(begin, 0, &lo)
            or not (end is None or _plain_int(end, 0, &hi)) or not _plain_int(cap, 0, &most)):
        return None
    if limit > most:   # walk for the candidates asked, past the usual cap (collisions are dropped later)
        cap = max_num
    _index_catch_up(dispatcher)
    offsets = _index_walk(<tuple>services, topic, key, cap, 0 if lo < 1000 else lo - 1000,
                          INT64_MAX if hi > INT64_MAX - 1000 else hi + 1000, found, &count)
    if offsets is None:
        return None
    files = _files_of(segments)
    if files is None:
        return None
    return _key_messages(offsets, found, count, files, core, topic, key, lo, hi, limit, False)


cdef int _index_catch_up(object dispatcher) except -1:
    """``dispatcher.catch_up(index=True)`` unless its ``end_core`` shows nothing waits."""
    cdef DispatchState d
    if dispatcher is None:
        return 0
    if not _is_dispatch(dispatcher):
        dispatcher.catch_up(index=True)
        return 0
    d = <DispatchState>dispatcher
    end_core = d.end_core
    if end_core is None or d.offset < <int64_t>end_core.wrote_offset or (d._index_lazily and d.indexed < d.offset):
        dispatcher.catch_up(index=True)
    return 0


cdef int _queue_catch_up(object dispatcher) except -1:
    """``dispatcher.catch_up()`` (what the class's quick pull does first) unless its
    ``end_core`` shows nothing waits."""
    cdef DispatchState d
    if not _is_dispatch(dispatcher):
        dispatcher.catch_up()
        return 0
    d = <DispatchState>dispatcher
    end_core = d.end_core
    if end_core is None or d.offset < <int64_t>end_core.wrote_offset:
        dispatcher.catch_up()
    return 0


cdef enum:
    _WALK_ROOM = 256   # the candidates a service's walk collects in C; a larger cap: select_files


cdef Py_ssize_t _walk_files(IndexState service, int32_t key_hash, int64_t lo, int64_t hi, int64_t most,
                            int64_t *out) except -2:
    """``select_files(service._files, key, most, lo, hi)[0]`` (unsorted) into ``out`` (room for
    ``most``), walked over each file's map here (index.h's walk, as the compiled select_files
    walks it): how many; -1 when it cannot (a file closed, or not of the service's geometry):
    the caller calls select_files."""
    cdef int64_t slots = 0, items = 0, left = most, file_begin, file_end, got
    cdef Py_ssize_t i, found = 0
    cdef Py_buffer view
    cdef rs_index_t ix
    cdef rs_index_walk_t walk
    cdef list files = service._files
    slots = service.slot_count
    items = service.index_count
    if files is None or not 1 <= slots <= INT32_MAX or not 2 <= items <= INT32_MAX:
        return -1
    for i in range(len(files) - 1, -1, -1):   # newest first, as select_files
        if left <= 0:
            break
        f = files[i]
        if not _is_index_file(f):
            return -1
        mapped = (<IndexFileState>f).mapped
        if not _is_mapped(mapped):
            return -1
        mm = (<MappedState>mapped).mm
        if mm is None:
            return -1
        try:
            PyObject_GetBuffer(mm, &view, PyBUF_SIMPLE)   # pinned for the walk
        except (ValueError, BufferError, TypeError):
            return -1
        try:
            if view.len != rs_index_file_size(slots, items):
                return -1
            ix.base = <uint8_t *>view.buf
            ix.len = view.len
            ix.slot_num = <int32_t>slots
            ix.index_num = <int32_t>items
            file_begin = rs_index_header_i64(&ix, RS_INDEX_POS_BEGIN_TIMESTAMP)
            file_end = rs_index_header_i64(&ix, RS_INDEX_POS_END_TIMESTAMP)
            if (lo < file_begin and hi > file_end) or file_begin <= lo <= file_end or file_begin <= hi <= file_end:
                rs_index_walk_start(&ix, &walk, key_hash, lo, hi)
                while left > 0 and walk.cur != RS_INDEX_INVALID_INDEX:
                    got = rs_index_walk_next(&ix, &walk, out + found, left)
                    found += got
                    left -= got
        finally:
            PyBuffer_Release(&view)
        if file_begin < lo or left <= 0:
            break
    return found


cdef object _index_walk(tuple services, str topic, str key, object cap, int64_t lo, int64_t hi,
                        int64_t *found_c, Py_ssize_t *count):
    """The candidates each index service holds under ``topic#key`` stored within ``[lo, hi]``
    (ms), at most ``cap`` a service, walked under its lock, ascending; None: a closed service.
    Each service's files are walked here (:func:`_walk_files`) when ``cap`` is at most
    ``_WALK_ROOM``: then the answer is ``_IN_ARRAY``, the candidates ``found_c[:count]`` (room
    for ``2 * _WALK_ROOM``); else (or when that cannot) a list, by the services' ``select_files``."""
    cdef int64_t most = 0, v
    cdef Py_ssize_t i, j, n = 0, got
    cdef int32_t key_hash = 0
    cdef IndexState state
    cdef bint fast, in_c
    cdef list offsets = None
    cdef uint32_t h
    in_c = _plain_int(cap, 0, &most) and most <= _WALK_ROOM and len(services) <= 2
    name = None   # topic#key, made only for a select_files call
    if in_c:   # the hash of topic#key over its parts: no string made
        rs_index_unicode_ready(topic)
        rs_index_unicode_ready(key)
        h = rs_index_java_hash_update(0, PyUnicode_DATA(topic), <int>PyUnicode_KIND(topic),
                                      PyUnicode_GET_LENGTH(topic))
        h = 31u * h + <uint32_t>35   # "#"
        h = rs_index_java_hash_update(h, PyUnicode_DATA(key), <int>PyUnicode_KIND(key), PyUnicode_GET_LENGTH(key))
        key_hash = rs_index_hash_of_java(<int32_t>h)
    for i in range(len(services)):
        service = services[i]
        if service is None:
            continue
        if not _is_index(service):
            return None
        state = <IndexState>service
        lock = state._lock
        fast = type(lock) is FastRLock   # taken without a method call
        if fast:
            (<FastRLock>lock).take(True)
        else:
            lock.acquire()
        try:
            if state._closed:
                return None
            got = _walk_files(state, key_hash, lo, hi, most, found_c + n) if in_c else -1
            if got < 0:
                if name is None:
                    name = topic + "#" + key
                found = state._index.select_files(state._files, name, cap, lo, hi)[0]
        finally:
            if fast:
                (<FastRLock>lock).give()
            else:
                lock.release()
        if got >= 0:
            n += got
            continue
        # select_files' list: the C candidates so far join it
        if offsets is None:
            offsets = [found_c[j] for j in range(n)]
            n = 0
        offsets = offsets + found
        offsets.sort()
    if offsets is not None:
        if n:
            offsets = offsets + [found_c[j] for j in range(n)]
            offsets.sort()
        return offsets
    for i in range(1, n):   # a few candidates (at most 2 * _WALK_ROOM): insertion sort, ascending
        v = found_c[i]
        j = i - 1
        while j >= 0 and found_c[j] > v:
            found_c[j + 1] = found_c[j]
            j -= 1
        found_c[j + 1] = v
    count[0] = n
    return _IN_ARRAY


cdef object _stored_at = _operator.attrgetter("store_timestamp")


cpdef object unique_lookup(services, segments, core, topic, key, cap, dispatcher, now):
    """``MessageStore.query_by_unique_key`` in one call: the catch-up of :func:`key_lookup`, then
    the index walk from the creation time the id encodes (less a second), and over all time when
    that finds nothing, each hit's topic and UNIQ_KEY re-checked; the first stored of the hits
    (see the pure twin). None when the careful path must decide: an argument it checks, a
    closed service or segment, and nothing found (it says so)."""
    cdef int64_t most = 0, begin
    cdef int64_t found[2 * _WALK_ROOM]
    cdef Py_ssize_t count = 0
    if (type(topic) is not str or type(key) is not str or not topic or not key
            or type(services) is not tuple or not _plain_int(cap, 0, &most)):
        return None
    _index_catch_up(dispatcher)
    begins = [0]
    try:
        begin = uniq_key_time(key, now) - 1000
        begins.insert(0, 0 if begin < 0 else begin)
    except (InvalidMessageIdError, ValueError):
        pass   # not a RocketMQ-made id: no time hint
    for begin in begins:
        offsets = _index_walk(<tuple>services, topic, key, cap, begin, INT64_MAX, found, &count)
        if offsets is None:
            return None
        files = _files_of(segments)
        if files is None:
            return None
        # every hit (no more than the candidates)
        hits = _key_messages(offsets, found, count, files, core, topic, key, INT64_MIN, INT64_MAX, INT64_MAX, True)
        if hits is None:
            return None
        if hits:
            return min(hits, key=_stored_at)
    return None


# GetMessageStatus.FOUND, looked up once: an enum member read from its class costs about as
# much as the rest of a one-message pull's result (EnumType's attribute lookup)
cdef object _FOUND = _GetMessageStatus.FOUND


cdef object _pull_result(type result_type, object next_begin, object lo, object hi, object messages,
                         object units, object first):
    """``result_type(FOUND, next_begin, lo, hi, messages, units, first)`` (what the class's
    quick pull returns), its PullResult fields filled here."""
    cdef PullResult result
    result = PullResult.__new__(result_type)
    result.status = _FOUND
    result.next_begin_offset = next_begin
    result.min_offset = lo
    result.max_offset = hi
    result.messages = messages
    result._units = units
    result._queue_offsets = first
    return result


cdef enum:
    _OFFSET_KEYS_KEPT = 4096    # FastReads remembers the offset keys of this many groups at most

cdef class FastReads:
    """An open store's point reads, each one compiled call: rocketstore.store puts these bound
    methods over the class's ``read``, ``get_by_msg_id``, ``get_by_queue_offset``,
    ``query_by_key``, ``query_by_unique_key`` and ``get_message`` (a pull from a given offset,
    no tags, no wait: units, records and messages in one call, the result's slots set in
    place) while the store is open and follows no other process, and an owning store's
    ``commit_offset`` over the class's (given ``offsets``, its ConsumerOffsetTable). What a fast call
    cannot answer (None), a keyword it does not take, or a closed store runs the class's method
    (the careful path), so results and errors are the class's. See the pure twin."""
    cdef object _store          # a weak reference: the store's dict holds these methods
    cdef object _cls
    cdef object _queues, _segments, _core, _services, _dispatcher, _cap, _follower
    cdef type _result_type
    cdef object _offsets            # an owning store's ConsumerOffsetTable (else None: commits are careful)
    cdef FastRLock _offsets_lock    # its lock when that is a FastRLock
    cdef dict _offset_keys          # {group: {topic: the table's key}} of names checked here
    cdef public bint open
    # calls answered here, and calls handed to the class's method: what shows (tests, a
    # benchmark) that the compiled path is the one taken
    cdef readonly unsigned long long fast_calls, careful_calls

    def __init__(self, store_ref, cls, queues, segments, core, services, dispatcher, cap, follower=None, *,
                 result_type, offsets=None):
        if not issubclass(result_type, PullResult):
            raise TypeError(f"result_type must extend this codec's PullResult, not {result_type!r}")
        self._result_type = result_type
        self._offsets = offsets
        self._offsets_lock = None
        if offsets is not None and type(offsets.lock) is FastRLock:
            self._offsets_lock = <FastRLock>offsets.lock
        self._offset_keys = {}
        self._follower = follower
        self._store = store_ref
        self._cls = cls
        self._queues = queues
        self._segments = segments
        self._core = core
        self._services = services
        self._dispatcher = dispatcher
        self._cap = cap
        self.open = True

    cdef bint _current(self) except -1:
        """True unless this store follows a writer that opened the store since (the class's
        method opens it again): a following store's ``follow()``, run first as its methods do."""
        return self._follower is None or self._follower.follow() is True

    cdef object _owner(self):
        store = self._store()
        if store is None:
            raise _StoreClosedError("the store is closed")
        return store

    def read(self, commitlog_offset, *, zero_copy=False):
        """Read one message by CommitLog offset; see :meth:`rocketstore.MessageStore.read`."""
        if self.open and self._current() and zero_copy is False:
            msg = record_at(self._segments, self._core, commitlog_offset)
            if msg is not None:
                self.fast_calls += 1
                return msg
        self.careful_calls += 1
        return self._cls.read(self._owner(), commitlog_offset, zero_copy=zero_copy)

    def get_by_msg_id(self, msg_id, *, zero_copy=False):
        """Read one message by its msgId; see :meth:`rocketstore.MessageStore.get_by_msg_id`."""
        if self.open and self._current() and zero_copy is False:
            msg = message_by_id(self._segments, self._core, msg_id)
            if msg is not None:
                self.fast_calls += 1
                return msg
        self.careful_calls += 1
        return self._cls.get_by_msg_id(self._owner(), msg_id, zero_copy=zero_copy)

    def get_by_queue_offset(self, topic, queue_id, queue_offset):
        """Read one message by queue position; see
        :meth:`rocketstore.MessageStore.get_by_queue_offset`."""
        if self.open and self._current():
            msg = queue_message(self._queues, topic, queue_id, queue_offset, self._segments, self._core)
            if msg is not None:
                self.fast_calls += 1
                return msg
        self.careful_calls += 1
        return self._cls.get_by_queue_offset(self._owner(), topic, queue_id, queue_offset)

    def query_by_key(self, topic, key, max_num=32, begin=0, end=None):
        """Messages of a topic by key; see :meth:`rocketstore.MessageStore.query_by_key`."""
        if self.open and self._current():
            hits = key_lookup(self._services, self._segments, self._core, topic, key, max_num, begin, end,
                              self._cap, self._dispatcher)
            if hits is not None:
                self.fast_calls += 1
                return hits
        self.careful_calls += 1
        return self._cls.query_by_key(self._owner(), topic, key, max_num, begin, end)

    def get_message(self, group, topic, queue_id, offset=None, max_msgs=32, tags=None, *, wait=None):
        """Pull messages of one queue; see :meth:`rocketstore.MessageStore.get_message`."""
        if (self.open and wait is None and offset is not None and tags is None and type(group) is str and group
                and self._current()):
            _queue_catch_up(self._dispatcher)
            got = queue_messages(self._queues, topic, queue_id, offset, max_msgs, self._segments, self._core)
            if got is not None:
                messages, units, lo, hi = <tuple>got
                self.fast_calls += 1
                return _pull_result(self._result_type, offset + len(<list>messages), lo, hi, messages, units,
                                    offset)
        self.careful_calls += 1
        return self._cls.get_message(self._owner(), group, topic, queue_id, offset, max_msgs, tags, wait=wait)

    cdef object _offset_key(self, object group, object topic):
        """The offsets table's key of (topic, group) when both are names the class's method takes
        as they are (a non-empty str without '@'), else None; remembered once made."""
        cdef object by_topic, key
        if type(group) is not str or type(topic) is not str:
            return None
        by_topic = self._offset_keys.get(group)
        if by_topic is not None:
            key = (<dict>by_topic).get(topic)
            if key is not None:
                return key
        if not group or not topic or "@" in <str>group or "@" in <str>topic:
            return None
        key = self._offsets.key(topic, group)
        if type(key) is not str:
            return None
        if len(self._offset_keys) >= _OFFSET_KEYS_KEPT:
            self._offset_keys.clear()
        if by_topic is None:
            by_topic = self._offset_keys[group] = {}
        (<dict>by_topic)[topic] = key
        return key

    def commit_offset(self, group, topic, queue_id, offset):
        """Record ``offset`` as ``group``'s next offset to consume in (topic, queue_id); see
        :meth:`rocketstore.MessageStore.commit_offset`."""
        cdef int64_t qid = 0, at = 0
        cdef FastRLock lock = self._offsets_lock
        cdef object key, table, offsets, previous
        cdef bint done = False
        if (self.open and self._offsets is not None and _plain_int(queue_id, 0, &qid) and qid <= INT32_MAX
                and _plain_int(offset, 0, &at)):
            key = self._offset_key(group, topic)
            if key is not None:
                self.fast_calls += 1
                if lock is not None:
                    # the common case as ConsumerOffsetTable.commit_key does it: a queue the table
                    # has, moving forward
                    lock.take(True)
                    try:
                        table = self._offsets.table
                        if type(table) is dict:
                            offsets = (<dict>table).get(key)
                            if type(offsets) is dict:
                                previous = (<dict>offsets).get(queue_id)
                                if type(previous) is int and previous <= offset:
                                    (<dict>offsets)[queue_id] = offset
                                    self._offsets.dirty = True
                                    done = True
                    finally:
                        lock.give()
                if not done:
                    self._offsets.commit_key(key, queue_id, offset)  # new, or a move back: logged
                return None
        self.careful_calls += 1
        return self._cls.commit_offset(self._owner(), group, topic, queue_id, offset)

    def query_by_unique_key(self, topic, unique_key):
        """A message by its UNIQ_KEY; see :meth:`rocketstore.MessageStore.query_by_unique_key`."""
        if self.open and self._current():
            msg = unique_lookup(self._services, self._segments, self._core, topic, unique_key, self._cap,
                                self._dispatcher, _now_ms())
            if msg is not None:
                self.fast_calls += 1
                return msg
        self.careful_calls += 1
        return self._cls.query_by_unique_key(self._owner(), topic, unique_key)


def plain_message_items(messages, user_topics, message_types=None):
    """The core's put items of a put_messages batch's plain messages (see rocketstore.format._codec_py)."""
    cdef list items = [], slow = []
    cdef Py_ssize_t i = 0
    cdef object qid, flag, born, tags, keys
    cdef object message_type = _message_mod.Message, other_type = _message_mod.Message
    if message_types is not None:
        message_type, other_type = (tuple(message_types) * 2)[:2]
    for m in messages:
        if type(m) is message_type or type(m) is other_type:
            topic = m.topic
            body = m.body
            qid = m.queue_id
            flag = m.flag
            born = m.born_timestamp
            if (type(topic) is str and topic in user_topics and m.properties is None and type(body) is bytes
                    and type(qid) is int and -1 <= qid <= INT32_MAX
                    and type(flag) is int and INT32_MIN <= flag <= INT32_MAX
                    and type(born) is int and INT64_MIN <= born <= INT64_MAX
                    and m.sys_flag == 0 and m.reconsume_times == 0):
                tags = m.tags
                keys = m.keys
                if tags is None and keys is None:
                    items.append((topic, body, b"", qid, flag, born, 0, 0, None))
                else:
                    props, unique_key, _wait = put_properties(tags, keys, None)
                    items.append((topic, body, props, qid, flag, born, 0, 0, unique_key))
                i += 1
                continue
        items.append(None)
        slow.append(i)
        i += 1
    return items, slow


# ---------------------------------------------------------------------------------------------
# Timer messages (rocketstore.services.timer): the put's properties, the units' deliver times, the copies

__all__ += ["timer_properties", "timer_units", "timer_copies"]

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


cdef object _timer_out_ms(const uint8_t *props, int32_t n):
    """The record's TIMER_OUT_MS as the timer service reads it (the last piece of that name that
    decode_properties keeps; 0 when there is none), or None when it is not plain digits."""
    cdef int64_t i = 0, end, sep, v
    cdef const uint8_t *hit
    cdef int64_t found_pos = -1
    cdef int32_t found_len = 0
    while i <= n:
        hit = <const uint8_t *>memchr(props + i, 2, <size_t>(n - i)) if i < n else NULL
        end = (hit - props) if hit != NULL else n
        if end - i >= 3:
            hit = <const uint8_t *>memchr(props + i, 1, <size_t>(end - i))
            if hit != NULL:
                sep = hit - props
                if (i < sep < end - 1 and sep - i == 12
                        and memcmp(props + i, b"TIMER_OUT_MS", 12) == 0):
                    found_pos = sep + 1
                    found_len = <int32_t>(end - sep - 1)
        i = end + 1
    if found_pos < 0:
        return 0
    v = _digits(props + found_pos, found_len, _TIMER_MAX_DIGITS)
    return None if v < 0 else v


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
    hashCode of REAL_TOPIC (0 when there is none) and in ``out_ms`` its TIMER_OUT_MS as
    _timer_out_ms reads it (0 when there is none, -1 when it is not plain digits); -1 when
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
            if reader.record(offset, &rec):
                if f == NULL:
                    deliver = _timer_out_ms(rec.properties, rec.properties_len)
                else:
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


def timer_copies(offsets, segments, core, dequeue_ms, real_topic, orders, order_of, room):
    """The ``put_many`` items of the copies a timer pass puts for the records at ``offsets``
    (the timer service's ``_copy``: REAL_TOPIC / REAL_QID restored and left out with a CRC32
    property, TIMER_DEQUEUE_MS added, the rest kept in the order of a Java ``HashMap``), and
    the indices of the None among them: the careful path decides those (see the pure twin).
    ``real_topic(raw)`` gives ``(topic, its queue count)`` for REAL_TOPIC bytes, or None;
    ``orders`` caches ``order_of(names)``, the HashMap order of the kept names plus
    TIMER_DEQUEUE_MS (indices); ``room`` is ``(host bytes, a generated UNIQ_KEY's bytes, the
    longest record allowed)``."""
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
    cdef list out, careful = []
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
        # The copies are built in the order put_many writes them, so their records are read in
        # key order, scattered over the CommitLog: each is prefetched a few records ahead.
        # (Reading them in CommitLog order instead measured slower: put_many then walks
        # objects scattered in memory.)
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
                continue
            raw = PyBytes_FromStringAndSize(NULL, total)
            p = PyBytes_AS_STRING(raw)
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


# ---- acknowledgement per message (POP): one ack in one call (rocketstore.services.pop) ----

__all__ += [
    "PopLane", "PopAcker", "POP_SNAPSHOT_CHECK_EVERY", "receipt_handles", "checkpoint_run", "reconsume_times",
    "received_rows",
]

cdef extern from "Python.h":
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    void *PyUnicode_DATA(object o)
    bint PyUnicode_IS_ASCII(object o)

import heapq as _heapq
import weakref as _weakref

from cpython.weakref cimport PyWeakref_GetObject
from rocketstore.errors import StoreClosedError as _StoreClosedError

from rocketstore.errors import FlushTimeoutError as _FlushTimeoutError

#: (the pure twin's docstring) once every this many single acks, the snapshot check
POP_SNAPSHOT_CHECK_EVERY = 64

cdef enum:
    _ACK_MAX_DIGITS = 18        # a longer decimal may not fit an int64: int() parses it


cdef inline Py_ssize_t _ack_digits(const char *text, Py_ssize_t end, int64_t *value) noexcept:
    """Read the run of ASCII digits ending just before ``end`` (1 to _ACK_MAX_DIGITS of them,
    preceded by a space at the returned index); -1 when ``text[:end]`` does not end that way."""
    cdef Py_ssize_t i = end
    cdef int64_t v = 0, scale = 1
    while i > 0 and 48 <= text[i - 1] <= 57:
        i -= 1
        if end - i > _ACK_MAX_DIGITS:
            return -1
        v += (text[i] - 48) * scale
        scale *= 10
    if i == end or i == 0 or text[i - 1] != 32:
        return -1
    value[0] = v
    return i - 1


cdef class PopLane:
    """(the pure twin's docstring, rocketstore.format._codec_py.PopLane) The compiled twin keeps
    ``committed`` and ``next`` as C integers, which its PopAcker reads and sets directly."""

    cdef public str group, topic, prefix, key
    cdef public int queue_id
    cdef public int64_t committed, next
    cdef public dict inflight
    cdef public list heap
    cdef public bytes ack_head, ack_tail

    def __init__(self, str group, str topic, int queue_id, int64_t start, str key):
        self.group = group
        self.topic = topic
        self.queue_id = queue_id
        self.prefix = f"{group} {topic} {queue_id}"
        self.key = key
        self.committed = start
        self.next = start
        self.inflight = {}
        self.heap = []
        self.ack_head = ('{"c":"%s","n":1,"q":%d,"so":' % (group, queue_id)).encode()
        self.ack_tail = (',"t":"%s"}' % topic).encode()

    def compact(self):
        """(the pure twin's docstring) The compiled twin compares each offset's in-flight
        (deadline, number) with the entry's field by field, making no tuple."""
        cdef dict inflight = self.inflight
        cdef list live = [], keep_o, keep_n
        cdef tuple entry, offsets, numbers
        cdef object deadline, now
        cdef Py_ssize_t i, n
        if not inflight:
            self.heap = []
            return
        for e in self.heap:
            entry = <tuple?>e
            deadline, offsets, numbers = entry[0], <tuple?>entry[2], <tuple?>entry[3]
            n = len(offsets)
            if len(numbers) != n:
                raise ValueError("a heap entry's offsets and numbers differ in length")
            keep_o = []
            keep_n = []
            for i in range(n):
                now = inflight.get(offsets[i])
                if now is not None and (<tuple?>now)[0] == deadline and (<tuple>now)[1] == numbers[i]:
                    keep_o.append(offsets[i])
                    keep_n.append(numbers[i])
            if len(keep_o) == n:
                live.append(entry)
            elif keep_o:
                live.append((deadline, entry[1], tuple(keep_o), tuple(keep_n)))
        _heapq.heapify(live)
        self.heap = live

    def take_run(self, Py_ssize_t want, int64_t deadline, object seq):
        """(the pure twin's docstring) The compiled twin fills the map in one C loop."""
        cdef int64_t start = self.next, o
        cdef Py_ssize_t i
        cdef list offsets
        cdef dict inflight = self.inflight
        cdef tuple stamp, numbers
        cdef object key
        if want <= 0:
            raise ValueError("a run hands out at least one offset")
        stamp = (deadline, 0)
        offsets = [None] * want
        for i in range(want):
            o = start + i
            key = o
            offsets[i] = key
            inflight[key] = stamp
        numbers = (0,) * want
        self.next = start + want
        _heapq.heappush(self.heap, (deadline, seq, tuple(offsets), numbers))
        return offsets, numbers, stamp

    def advance(self):
        """(the pure twin's docstring)"""
        cdef int64_t before = self.committed, c
        cdef dict inflight = self.inflight
        if not inflight:
            self.committed = self.next
        else:
            c = self.committed
            while c < self.next and c not in inflight:
                c += 1
            self.committed = c
        return self.committed != before


# ---------------------------------------------------------------------------------------------
# FastRLock: the POP service's and the offsets table's reentrant lock (an ack takes each once)

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    int pthread_mutex_init(pthread_mutex_t *m, const void *attr)
    int pthread_mutex_destroy(pthread_mutex_t *m)
    int pthread_mutex_lock(pthread_mutex_t *m)
    int pthread_mutex_trylock(pthread_mutex_t *m)
    int pthread_mutex_unlock(pthread_mutex_t *m)

# A wait for a mutex of at most ``timeout`` seconds, timed on the monotonic clock (a step of the
# wall clock neither cuts it short nor stretches it): 0 once held, else an errno.
cdef extern from *:
    """
    #include <errno.h>
    #include <pthread.h>
    #include <time.h>
    static int rs_mutex_lock_for(pthread_mutex_t *m, double timeout) {
        struct timespec until;
        double whole = (double)(long)timeout;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += (long)whole;
        until.tv_nsec += (long)((timeout - whole) * 1e9);
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec += 1;
            until.tv_nsec -= 1000000000L;
        }
    #if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 30))
        return pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &until);
    #else
        for (;;) {   /* no clocked wait here: try, and sleep 50 us between tries */
            struct timespec now, nap = {0, 50000};
            int rc = pthread_mutex_trylock(m);
            if (rc != EBUSY)
                return rc;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (now.tv_sec > until.tv_sec || (now.tv_sec == until.tv_sec && now.tv_nsec >= until.tv_nsec))
                return ETIMEDOUT;
            nanosleep(&nap, NULL);
        }
    #endif
    }
    """
    int rs_mutex_lock_for(pthread_mutex_t *m, double timeout) nogil

cdef extern from "pythread.h":
    unsigned long PyThread_get_thread_ident()


cdef class FastRLock:
    """A reentrant lock with ``threading.RLock``'s ``acquire(blocking=True)``, ``release()`` and
    context manager, for locks taken on every single ack: Python 3.11's RLock parses its
    arguments and reads the monotonic clock on every acquire (about 100 ns a round trip from C);
    this one tries its mutex first and, only when another thread holds it, waits with the GIL
    released. Its owner and count are only read and written with the GIL held. (The pure twin
    is ``threading.RLock`` itself.)"""
    cdef pthread_mutex_t _mutex
    cdef unsigned long _owner
    cdef Py_ssize_t _count

    def __cinit__(self):
        if pthread_mutex_init(&self._mutex, NULL) != 0:
            raise MemoryError("cannot make a mutex")

    def __dealloc__(self):
        pthread_mutex_destroy(&self._mutex)

    cdef bint take(self, bint blocking, double timeout=-1) except -1:
        cdef unsigned long me = PyThread_get_thread_ident()
        cdef int rc = 0
        if self._count and self._owner == me:
            self._count += 1
            return True
        if pthread_mutex_trylock(&self._mutex) != 0:
            if not blocking:
                return False
            if timeout < 0:
                with nogil:
                    pthread_mutex_lock(&self._mutex)
            else:
                with nogil:
                    rc = rs_mutex_lock_for(&self._mutex, timeout)
                if rc != 0:
                    return False
        self._owner = me
        self._count = 1
        return True

    cdef int give(self) except -1:
        if not self._count or self._owner != PyThread_get_thread_ident():
            raise RuntimeError("cannot release un-acquired lock")
        self._count -= 1
        if not self._count:
            self._owner = 0
            pthread_mutex_unlock(&self._mutex)
        return 0

    def acquire(self, blocking=True, timeout=-1):
        """As ``threading.RLock.acquire``: True once held, False when not (non-blocking, or
        ``timeout`` seconds passed)."""
        cdef double seconds = timeout
        if not blocking and seconds != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        if seconds < 0 and seconds != -1:
            raise ValueError("timeout value must be a non-negative number")
        return self.take(bool(blocking), seconds)

    def release(self):
        self.give()

    def __enter__(self):
        return self.take(True)

    def __exit__(self, *exc):
        self.give()

    def _is_owned(self):
        return bool(self._count) and self._owner == PyThread_get_thread_ident()


cdef object _CAREFUL = object()   # PopAcker._ack: this ack is the careful one's


cdef class PopAcker:
    """(the pure twin's docstring, rocketstore.format._codec_py.PopAcker) The compiled twin does the
    common case itself, under the service's lock when that is a FastRLock: a handle (a str, or
    a ``received_type``) that ends in two runs of plain digits, of a lane of the service's
    ``by_prefix`` that handed that offset out, still under that delivery, once the revive
    topic exists and the open has replayed everything. It writes the ``bAck`` record of that
    one offset (the lane's ``ack_head`` + the offset's digits + ``ack_tail``: what
    ``PopService._finish`` writes for it) through the CommitLog core's ``put``, and applies it
    as ``_finish`` does (the lane's in-flight map and lowest un-acked offset, the group's
    committed offset set as ``ConsumerOffsetTable.commit_key`` sets it, under the table's lock,
    the heap's compaction), then, every ``POP_SNAPSHOT_CHECK_EVERY``-th such ack while the
    service writes periodic snapshots, calls ``periodic(service)``. Every other call goes to
    ``careful`` before anything is written: other handles, an unknown lane, a message finished
    or handed out again; so both twins give the same answer and raise the same errors for the
    same handles."""

    cdef object _service_ref, _careful, _periodic, _received_type
    cdef int _countdown
    cdef object _by_prefix, _commitlog, _topic, _props, _offsets
    cdef FastRLock _lock, _offsets_lock   # the same locks when they are FastRLocks (else None)
    cdef int64_t _compact_slack
    # the lane of the last handle (lanes stay in the service's by_prefix for good): a handle
    # of the same lane is matched by comparing its prefix's bytes, not sliced and looked up
    cdef PopLane _last
    # flags of the service that only ever go one way, read until they have: the revive topic
    # exists (topic_ready), the open has replayed everything (not loading)
    cdef bint _ready, _loaded, _snapshots
    cdef public bint closed

    def __init__(self, service, received_type, careful, periodic, lock, offsets, commitlog):
        self._service_ref = _weakref.ref(service)  # the service holds this: no cycle
        self._careful, self._periodic = careful, periodic
        self._received_type = received_type
        self._countdown = POP_SNAPSHOT_CHECK_EVERY
        self._lock = lock if type(lock) is FastRLock else None
        self._offsets = offsets
        self._offsets_lock = offsets.lock if type(offsets.lock) is FastRLock else None
        self._by_prefix = service.by_prefix
        self._commitlog = commitlog
        self._topic, self._props = service.topic, service.ack_props
        self._compact_slack = service.COMPACT_SLACK
        self._last = None
        self._ready = self._loaded = False
        self._snapshots = bool(service.snapshot_interval_ms)  # set once, at the service's start

    def ack(self, handle):
        """Acknowledge one received message; see :meth:`rocketstore.MessageStore.ack`."""
        cdef object service = <object>PyWeakref_GetObject(self._service_ref)
        cdef FastRLock lock = self._lock
        if service is None or self.closed:
            raise _StoreClosedError("the store is closed")
        if lock is None:
            return self._careful(service, handle)
        lock.take(True)
        try:
            timeout = self._ack(service, handle)
        finally:
            lock.give()
        if timeout is None:
            return True
        if timeout is _CAREFUL:
            return self._careful(service, handle)
        raise timeout  # acknowledged, but not confirmed durable

    cdef object _ack(self, service, handle):
        """None: acknowledged; _CAREFUL: nothing done, the careful ack decides; else the put's
        FlushTimeoutError (the record is stored and applied)."""
        cdef object found = None, prefix, now, result, timeout = None
        cdef PopLane lane
        cdef dict inflight
        cdef bytes head, tail, body
        cdef const char *text
        cdef const char *last_text
        cdef char *p
        cdef char digits[24]
        cdef Py_ssize_t size = 0, i_number, i_offset, nd, k, last_size = 0
        cdef int64_t offset = 0, number = 0, committed, nxt
        if type(handle) is not str:
            if not isinstance(handle, self._received_type):
                return _CAREFUL
            handle = handle.handle
            if type(handle) is not str:
                return _CAREFUL
        if not self._ready:
            if not service.topic_ready:
                return _CAREFUL
            self._ready = True
        if not self._loaded:
            if service.loading:
                return _CAREFUL
            self._loaded = True
        try:
            text = PyUnicode_AsUTF8AndSize(handle, &size)
        except UnicodeError:
            return _CAREFUL
        i_number = _ack_digits(text, size, &number)
        if i_number <= 0:
            return _CAREFUL
        i_offset = _ack_digits(text, i_number, &offset)
        if i_offset < 0:
            return _CAREFUL
        if self._last is not None:
            last_text = PyUnicode_AsUTF8AndSize(self._last.prefix, &last_size)
            if last_size == i_offset and memcmp(text, last_text, i_offset) == 0:
                found = self._last
        if found is None:
            # the bytes after i_offset are ASCII: one character each
            prefix = handle[:len(handle) - (size - i_offset)]
            found = (<dict>self._by_prefix).get(prefix)
            if found is None:
                return _CAREFUL
            self._last = <PopLane?>found
        lane = <PopLane>found
        if offset >= lane.next:
            return _CAREFUL
        inflight = lane.inflight
        now = inflight.get(offset)
        if now is None or (<tuple?>now)[1] != number:
            return _CAREFUL
        head, tail = lane.ack_head, lane.ack_tail
        nd = 0
        k = offset
        while True:
            digits[nd] = <char>(48 + k % 10)
            nd += 1
            k //= 10
            if k == 0:
                break
        body = PyBytes_FromStringAndSize(NULL, len(head) + nd + len(tail))
        p = PyBytes_AS_STRING(body)
        memcpy(p, PyBytes_AS_STRING(head), len(head))
        p += len(head)
        while nd:
            nd -= 1
            p[0] = digits[nd]
            p += 1
        memcpy(p, PyBytes_AS_STRING(tail), len(tail))
        try:
            result = self._commitlog.core.put(self._topic, body, self._props, 0)  # the rest: defaults (0, None, -1)
        except _FlushTimeoutError as exc:  # stored; its flush did not confirm: apply, then return it
            timeout = exc
            result = exc.result
        service.log_next = result.queue_offset + 1
        del inflight[offset]
        committed = lane.committed
        if offset == committed or not inflight:
            nxt = lane.next
            if not inflight:
                committed = nxt
            else:
                while committed < nxt and committed not in inflight:
                    committed += 1
            if committed != lane.committed:
                lane.committed = committed
                self._commit(lane, committed)
        if len(lane.heap) > 2 * len(inflight) + self._compact_slack:
            lane.compact()
        if self._snapshots:
            self._countdown -= 1
            if self._countdown <= 0:
                self._countdown = POP_SNAPSHOT_CHECK_EVERY
                self._periodic(service)
        return timeout

    cdef _commit(self, PopLane lane, int64_t committed):
        cdef object previous, queue_id = lane.queue_id
        cdef dict offsets
        cdef FastRLock fast = self._offsets_lock
        if fast is not None:
            fast.take(True)
            try:
                offsets = (<dict>self._offsets.table).get(lane.key)
                if offsets is not None:
                    previous = offsets.get(queue_id)
                    if previous is not None and previous <= committed:
                        offsets[queue_id] = committed
                        self._offsets.dirty = True
                        return
            finally:
                fast.give()
        self._offsets.commit_key(lane.key, queue_id, committed)  # new, or a move back: logged


def receipt_handles(str prefix, list offsets, tuple numbers):
    """(the pure twin's docstring) The compiled twin writes each handle of an ASCII prefix and
    non-negative offsets and numbers into its str directly."""
    cdef Py_ssize_t n = len(offsets), i, plen, k
    cdef list out
    cdef object handle
    cdef char *p
    cdef char digits[48]
    cdef int64_t o, d
    if len(numbers) != n:
        raise ValueError("offsets and numbers differ in length")
    if not PyUnicode_IS_ASCII(prefix):
        return [f"{prefix} {o_} {n_}" for o_, n_ in zip(offsets, numbers)]
    plen = len(prefix)
    out = [None] * n
    for i in range(n):
        o = offsets[i]
        d = numbers[i]
        if o < 0 or d < 0:
            out[i] = f"{prefix} {offsets[i]} {numbers[i]}"
            continue
        digits[0] = 32
        k = 1 + _decimal(digits + 1, o)
        digits[k] = 32
        k += 1 + _decimal(digits + k + 1, d)
        handle = PyUnicode_New(plen + k, 127)
        p = <char *>PyUnicode_DATA(handle)
        memcpy(p, PyUnicode_DATA(prefix), plen)
        memcpy(p + plen, digits, k)
        out[i] = handle
    return out


cdef inline char *_put_text(char *p, const char *text, Py_ssize_t n) noexcept:
    memcpy(p, text, n)
    return p + n


cdef inline char *_put_decimal(char *p, const char *label, Py_ssize_t n, int64_t value) noexcept:
    memcpy(p, label, n)
    return p + n + _decimal(p + n, value)


def checkpoint_run(int64_t committed, str group, int64_t invisible, int64_t count, int64_t nxt,
                   int64_t now, int64_t queue_id, int64_t start, str topic):
    """(the pure twin's docstring) The compiled twin writes the digits and the names' UTF-8
    into one bytes object."""
    cdef Py_ssize_t glen = 0, tlen = 0
    cdef const char *g = PyUnicode_AsUTF8AndSize(group, &glen)
    cdef const char *t = PyUnicode_AsUTF8AndSize(topic, &tlen)
    # the labels' 54 bytes, the names, and at most 20 bytes for each of the seven numbers
    cdef char *buf = <char *>PyMem_Malloc(54 + glen + tlen + 7 * 20)
    cdef char *p
    if buf == NULL:
        raise MemoryError()
    try:
        p = _put_decimal(buf, b'{"b":', 5, committed)
        p = _put_text(p, b',"c":"', 6)
        p = _put_text(p, g, glen)
        p = _put_decimal(p, b'","it":', 7, invisible)
        p = _put_decimal(p, b',"n":', 5, count)
        p = _put_decimal(p, b',"nx":', 6, nxt)
        p = _put_decimal(p, b',"pt":', 6, now)
        p = _put_decimal(p, b',"q":', 5, queue_id)
        p = _put_decimal(p, b',"so":', 6, start)
        p = _put_text(p, b',"t":"', 6)
        p = _put_text(p, t, tlen)
        p = _put_text(p, b'"}', 2)
        return PyBytes_FromStringAndSize(buf, p - buf)
    finally:
        PyMem_Free(buf)


def reconsume_times(list messages):
    """(the pure twin's docstring) The compiled twin reads each MessageExt's C field."""
    cdef Py_ssize_t n = len(messages), i
    cdef list out = [None] * n
    for i in range(n):
        o = messages[i]
        if not isinstance(o, MessageExt):
            raise TypeError(f"the quick pull gave a {type(o).__name__}, not a MessageExt")
    for i in range(n):
        out[i] = (<MessageExt>messages[i]).reconsume_times
    return out


cdef extern from "Python.h":
    ctypedef struct PyTypeObject:
        pass
    object PyType_GenericAlloc(PyTypeObject *type, Py_ssize_t nitems)
    void PyTuple_SET_ITEM(object p, Py_ssize_t pos, object o)


def received_rows(type cls, list messages, list handles, list times):
    """(the pure twin's docstring, rocketstore.format._codec_py.received_rows) The compiled twin
    allocates each row as ``tuple.__new__`` does for a subclass with no ``__dict__`` and fills
    its three items, with no argument tuple in between."""
    cdef Py_ssize_t n = len(messages), i
    cdef list out
    cdef object row
    if len(handles) != n or len(times) != n:
        raise ValueError("messages, handles and times differ in length")
    if cls.__base__ is not tuple or cls.__dict__.get("__slots__", None) != ():
        raise TypeError(f"{cls.__name__} is not a namedtuple-like subclass of tuple")
    out = [None] * n
    for i in range(n):
        row = PyType_GenericAlloc(<PyTypeObject *>cls, 3)
        m, h, t = messages[i], handles[i], times[i]
        Py_INCREF(m)
        PyTuple_SET_ITEM(row, 0, m)
        Py_INCREF(h)
        PyTuple_SET_ITEM(row, 1, h)
        Py_INCREF(t)
        PyTuple_SET_ITEM(row, 2, t)
        out[i] = row
    return out
