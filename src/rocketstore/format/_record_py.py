"""The record codec's pure twin: Java hashes, properties, one record encoded and decoded
(the layout table is rocketstore.format._codec_py's docstring).
"""

from __future__ import annotations

import struct
import sys
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from rocketstore.errors import (
    CorruptRecordError,
    InvalidMessageError,
    InvalidTopicError,
    PropertiesTooLargeError,
)
from rocketstore.message import Message, MessageExt, host_from_bytes, host_to_bytes

# ---- magic codes and flags (§1.1, §1.2) ----
MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB
MAGIC_BLANK = -875286124  # 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8  # TOTALSIZE + MAGICCODE of the BLANK record

SYSFLAG_COMPRESSED = 0x001
SYSFLAG_MULTI_TAGS = 0x002
SYSFLAG_TRANSACTION_MASK = 0x00C
TRANSACTION_NOT_TYPE = 0x000
TRANSACTION_PREPARED_TYPE = 0x004
TRANSACTION_COMMIT_TYPE = 0x008
TRANSACTION_ROLLBACK_TYPE = 0x00C
SYSFLAG_BORNHOST_V6 = 0x010
SYSFLAG_STOREHOST_V6 = 0x020
SYSFLAG_NEED_UNWRAP = 0x040
SYSFLAG_INNER_BATCH = 0x080
SYSFLAG_COMPRESSION_MASK = 0x700

MAX_TOPIC_LENGTH = 127  # V1 topic length is a signed byte
MAX_TOPIC_LENGTH_V2 = 32767
MAX_PROPERTIES_LENGTH = 32767  # signed short

# ---- sizes and fixed positions (V1, IPv4), each derived from the one before ----
INT_SIZE = 4
LONG_SIZE = 8
HOST_V4_LENGTH = 4
HOST_V6_LENGTH = 16
HOST_V6_EXTRA_LENGTH = HOST_V6_LENGTH - HOST_V4_LENGTH  # 12
TOPIC_LENGTH_SIZE = 1
TOPIC_LENGTH_SIZE_V2 = 2
PROPERTIES_LENGTH_SIZE = 2

POS_TOTAL_SIZE = 0
POS_MAGIC = POS_TOTAL_SIZE + INT_SIZE  # 4
POS_BODY_CRC = POS_MAGIC + INT_SIZE  # 8
POS_QUEUE_ID = POS_BODY_CRC + INT_SIZE  # 12
POS_FLAG = POS_QUEUE_ID + INT_SIZE  # 16
POS_QUEUE_OFFSET = POS_FLAG + INT_SIZE  # 20
POS_PHYSICAL_OFFSET = POS_QUEUE_OFFSET + LONG_SIZE  # 28
POS_SYSFLAG = POS_PHYSICAL_OFFSET + LONG_SIZE  # 36
POS_BORN_TIMESTAMP = POS_SYSFLAG + INT_SIZE  # 40
POS_BORN_HOST = POS_BORN_TIMESTAMP + LONG_SIZE  # 48
POS_STORE_TIMESTAMP = POS_BORN_HOST + HOST_V4_LENGTH + INT_SIZE  # 56
POS_STORE_HOST = POS_STORE_TIMESTAMP + LONG_SIZE  # 64
POS_RECONSUME_TIMES = POS_STORE_HOST + HOST_V4_LENGTH + INT_SIZE  # 72
POS_PREPARED_TRANSACTION_OFFSET = POS_RECONSUME_TIMES + INT_SIZE  # 76
POS_BODY_LENGTH = POS_PREPARED_TRANSACTION_OFFSET + LONG_SIZE  # 84
POS_BODY = POS_BODY_LENGTH + INT_SIZE  # 88
RECORD_FIXED_LENGTH = POS_BODY + TOPIC_LENGTH_SIZE + PROPERTIES_LENGTH_SIZE  # 91

# ---- why a scan stopped (decode_batch) / why decode_record raised (CorruptRecordError.reason) ----
STOP_LIMIT = 0  # reached `end` exactly, or max_records
STOP_BLANK = 1  # BLANK end-of-file record at stop_pos
STOP_END = 2  # fewer than 8 bytes, or no record magic (zero-filled space)
STOP_TRUNCATED = 3  # TOTALSIZE or an inner length runs past the end of the data
STOP_CORRUPT = 4  # inconsistent lengths
STOP_BAD_CRC = 5  # body CRC mismatch

_MESSAGES = {
    STOP_BLANK: "BLANK end-of-file record at position {pos}",
    STOP_END: "end of data at position {pos}: no record magic",
    STOP_TRUNCATED: "truncated record at position {pos}: it runs past the end of the data",
    STOP_CORRUPT: "corrupt record at position {pos}: inconsistent lengths",
    STOP_BAD_CRC: "corrupt record at position {pos}: body CRC mismatch",
}

#: One row per record found by decode_batch; native-endian, naturally aligned (the compiled
#: twin fills it from a C struct of the same layout). Positions are relative to the buffer.
RECORD_DTYPE = np.dtype(
    [
        ("position", "=i8"),
        ("size", "=i4"),
        ("magic", "=i4"),
        ("body_crc", "=i4"),
        ("queue_id", "=i4"),
        ("flag", "=i4"),
        ("queue_offset", "=i8"),
        ("physical_offset", "=i8"),
        ("sys_flag", "=i4"),
        ("born_timestamp", "=i8"),
        ("born_host", "S16"),
        ("born_port", "=i4"),
        ("store_timestamp", "=i8"),
        ("store_host", "S16"),
        ("store_port", "=i4"),
        ("reconsume_times", "=i4"),
        ("prepared_transaction_offset", "=i8"),
        ("body_pos", "=i8"),
        ("body_len", "=i4"),
        ("topic_pos", "=i8"),
        ("topic_len", "=i4"),
        ("properties_pos", "=i8"),
        ("properties_len", "=i4"),
    ],
    align=True,
)

#: The fields of a record row dispatch reads, in this order: dispatch_few's rows (the pure twin
#: reads them from the record rows) and the dispatcher's one-record path (by their places in a
#: row's ``tolist()``).
DISPATCH_ROW_FIELDS = (
    "position",
    "size",
    "queue_id",
    "queue_offset",
    "sys_flag",
    "store_timestamp",
    "topic_pos",
    "topic_len",
)

#: One row per record of dispatch_info: what the ConsumeQueue unit needs beyond the record row.
#: ``tags_pos``/``tags_len`` locate the TAGS value in the buffer (-1/0 when absent); ``delay_level``
#: is the DELAY property as Integer.parseInt reads it (0 when absent or unparseable).
DISPATCH_DTYPE = np.dtype(
    [("tags_code", "=i8"), ("tags_pos", "=i8"), ("tags_len", "=i4"), ("delay_level", "=i4")], align=True
)
#: One index key of a record (dispatch_info): its bytes in the buffer and the record's row number.
KEYREF_DTYPE = np.dtype([("key_pos", "=i8"), ("key_len", "=i4"), ("record", "=i4")], align=True)
#: One kept properties piece (property_pieces): where its name and value lie in the buffer.
PIECE_DTYPE = np.dtype(
    [("name_pos", "=i8"), ("value_pos", "=i8"), ("name_len", "=i4"), ("value_len", "=i4")], align=True
)

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # TopicValidator.RMQ_SYS_SCHEDULE_TOPIC
#: messageDelayLevel "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h", level n at [n - 1]
DEFAULT_DELAY_LEVELS_MS = (
    1000,
    5000,
    10000,
    30000,
    60000,
    120000,
    180000,
    240000,
    300000,
    360000,
    420000,
    480000,
    540000,
    600000,
    1200000,
    1800000,
    3600000,
    7200000,
)

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_PROP_CRC_NAME = np.frombuffer(b"__CRC32#\x01", dtype=np.uint8)  # a record CRC property (§1.6)
_PROP_CRC_LENGTH = len(_PROP_CRC_NAME) + 10 + 1
_PROP_CRC_NAME_LENGTH = len(_PROP_CRC_NAME)
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

_HEAD = struct.Struct(">ii")
_FIXED = struct.Struct(">iiiqqiq")  # BODYCRC .. BORNTIMESTAMP (positions 8..47)
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")
_PORT_TS = struct.Struct(">iq")
_TAIL = struct.Struct(">iiqi")  # store port, reconsume, prepared offset, body length
_ENC_HEAD = struct.Struct(">iiiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP
_UTF16_NATIVE = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"


# ---------------------------------------------------------------------------------------------
# Java hashes (§2, §5.2)


def java_hash(s: str) -> int:
    """Java ``String.hashCode`` of ``s``: over UTF-16 code units, as a signed int32."""
    if not isinstance(s, str):
        raise TypeError(f"java_hash expects str, not {type(s).__name__}")
    h = 0
    if s.isascii():
        for u in s.encode("ascii"):
            h = (31 * h + u) & 0xFFFFFFFF
    else:
        for u in memoryview(s.encode(_UTF16_NATIVE, "surrogatepass")).cast("H"):
            h = (31 * h + u) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_hash_bytes(data) -> int:
    """``java_hash`` of UTF-8 bytes (invalid bytes count as ``surrogateescape`` decodes them)."""
    return java_hash(bytes(data).decode("utf-8", "surrogateescape"))


def tags_code(tags: str | None) -> int:
    """The ConsumeQueue tagsCode of a TAGS value: its Java hash, sign-extended; 0 for none/empty."""
    if tags is None or tags == "":
        return 0
    return java_hash(tags)


def index_key_hash(key: str) -> int:
    """IndexFile key hash: ``abs(key.hashCode())``, with Integer.MIN_VALUE giving 0 (§5.2)."""
    h = java_hash(key)
    return 0 if h == _INT32_MIN else abs(h)


def body_crc(body) -> int:
    """The BODYCRC of a body: ``crc32(body) & 0x7FFFFFFF`` (0 for an empty body)."""
    return zlib.crc32(body) & 0x7FFFFFFF


# ---------------------------------------------------------------------------------------------
# Properties (§2)


def encode_properties(props: Mapping) -> bytes:
    """``name\\x01value\\x02`` for every entry, UTF-8 encoded.

    A value must be a non-empty str: Java's parser (``string2messageProperties``) drops a piece
    with an empty value, so an empty value (or a ``None``, which Java's ``putUserProperty``
    refuses) raises InvalidMessageError rather than being stored as something that reads back
    different; so does text that is not valid UTF-8 (a lone surrogate, which Java would read
    back as U+FFFD).
    """
    if not isinstance(props, Mapping):
        raise InvalidMessageError(f"properties must be a mapping, not {type(props).__name__}")
    parts = []
    for key, value in props.items():
        if not isinstance(key, str):
            raise InvalidMessageError(f"property name {key!r} is not a str")
        if not key:
            raise InvalidMessageError("property name is empty")
        if not isinstance(value, str):
            raise InvalidMessageError(f"property {key!r} has a {type(value).__name__} value, not a str")
        if not value:
            raise InvalidMessageError(
                f"property {key!r} has an empty value, which RocketMQ's format "
                "cannot carry (it would read back as absent)"
            )
        if "\x01" in key or "\x02" in key or "\x01" in value or "\x02" in value:
            raise InvalidMessageError(f"property {key!r} contains a separator character (\\x01 or \\x02)")
        parts.append(key)
        parts.append("\x01")
        parts.append(value)
        parts.append("\x02")
    try:
        data = "".join(parts).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: Java would read back U+FFFD
        raise InvalidMessageError("properties are not encodable as UTF-8") from None
    if len(data) > MAX_PROPERTIES_LENGTH:
        raise PropertiesTooLargeError(
            f"properties are {len(data)} bytes long; the limit is {MAX_PROPERTIES_LENGTH}"
        )
    return data


def put_properties(tags, keys, properties) -> tuple:
    """The properties of a put: ``(encoded properties, the caller's UNIQ_KEY or None, -1, or 0
    when the WAIT property is "false")``. ``properties`` is copied, then TAGS and KEYS (a str
    or a list or tuple of str, joined by spaces) are set. Errors as encode_properties'."""
    props = dict(properties) if properties else {}
    if tags is not None:
        props["TAGS"] = tags
    if keys is not None:
        if not isinstance(keys, str):
            if not isinstance(keys, (list, tuple)) or not all(isinstance(k, str) for k in keys):
                raise InvalidMessageError("keys must be a str or a list or tuple of str")
            keys = " ".join(keys)
        props["KEYS"] = keys
    wait = 0 if props.get("WAIT") == "false" else -1
    return encode_properties(props), props.get("UNIQ_KEY"), wait


def plain_message_items(messages, user_topics, message_types=None) -> tuple[list, list]:
    """The core's put items of the plain messages of a ``put_messages`` batch, checked in one
    call: a :class:`rocketstore.Message` of a topic in ``user_topics`` (already checked), bytes
    body, no properties, sys_flag and reconsume_times 0, queue id, flag and born timestamp in
    range; tags and keys as :func:`put_properties` takes them. Returns ``(items, slow)``: an item
    tuple per message, None where a message is not plain, and the indices of those (the caller
    checks them one by one). ``message_types``: the exact Message classes read as plain (None:
    :class:`rocketstore.message.Message`; a store passes both twins' classes)."""
    types = (Message,) if message_types is None else tuple(message_types)
    items: list = []
    slow: list = []
    for i, m in enumerate(messages):
        if type(m) in types:
            topic, body, qid, flag, born = m.topic, m.body, m.queue_id, m.flag, m.born_timestamp
            if (
                type(topic) is str
                and topic in user_topics
                and m.properties is None
                and type(body) is bytes
                and type(qid) is int
                and -1 <= qid <= _INT32_MAX
                and type(flag) is int
                and _INT32_MIN <= flag <= _INT32_MAX
                and type(born) is int
                and _INT64_MIN <= born <= _INT64_MAX
                and m.sys_flag == 0
                and m.reconsume_times == 0
            ):
                if m.tags is None and m.keys is None:
                    items.append((topic, body, b"", qid, flag, born, 0, 0, None))
                else:
                    props, unique_key, _wait = put_properties(m.tags, m.keys, None)
                    items.append((topic, body, props, qid, flag, born, 0, 0, unique_key))
                continue
        items.append(None)
        slow.append(i)
    return items, slow


def decode_properties(data) -> dict:
    """Parse a properties string with RocketMQ 5.x's lenient rule; never raises on bytes.

    A piece between 0x02 separators is kept when its first 0x01 has a non-empty name before it and
    a non-empty value after it (the value may contain 0x01); a later duplicate name wins.
    """
    props = {}
    for piece in bytes(data).split(b"\x02"):
        i = piece.find(b"\x01")
        if 0 < i < len(piece) - 1:
            props[piece[:i].decode("utf-8", "surrogateescape")] = piece[i + 1 :].decode(
                "utf-8", "surrogateescape"
            )
    return props


# ---------------------------------------------------------------------------------------------
# Encoding


def _length(body_len, topic_len, properties_len, sys_flag, magic):
    """The C rs_record_length: -1 when a length is out of range."""
    if magic == MAGIC_V1:
        max_topic = MAX_TOPIC_LENGTH
    elif magic == MAGIC_V2:
        max_topic = MAX_TOPIC_LENGTH_V2
    else:
        return -1
    if (
        body_len < 0
        or body_len > _INT32_MAX
        or topic_len < 0
        or topic_len > max_topic
        or properties_len < 0
        or properties_len > MAX_PROPERTIES_LENGTH
    ):
        return -1
    n = RECORD_FIXED_LENGTH + body_len + topic_len + properties_len
    if sys_flag & SYSFLAG_BORNHOST_V6:
        n += HOST_V6_EXTRA_LENGTH
    if sys_flag & SYSFLAG_STOREHOST_V6:
        n += HOST_V6_EXTRA_LENGTH
    if magic == MAGIC_V2:
        n += TOPIC_LENGTH_SIZE_V2 - TOPIC_LENGTH_SIZE
    return -1 if n > _INT32_MAX else n


def record_length(
    body_len: int, topic_len: int, properties_len: int, sys_flag: int = 0, magic: int = MAGIC_V1
) -> int:
    """``91 + B + T + P`` (+12 per IPv6 host in ``sys_flag``, +1 for V2 magic)."""
    n = _length(
        _check_int(body_len, "body_len", _INT32_MIN, _INT32_MAX),
        _check_int(topic_len, "topic_len", _INT32_MIN, _INT32_MAX),
        _check_int(properties_len, "properties_len", _INT32_MIN, _INT32_MAX),
        _check_int(sys_flag, "sys_flag", _INT32_MIN, _INT32_MAX),
        _check_int(magic, "magic", _INT32_MIN, _INT32_MAX),
    )
    if n < 0:
        raise InvalidMessageError(
            f"no record has body length {body_len}, topic length {topic_len} and "
            f"properties length {properties_len} (magic {magic})"
        )
    return n


def _check_int(value, name, lo, hi):
    if not isinstance(value, int):
        raise InvalidMessageError(f"{name} must be an int, not {type(value).__name__}")
    if value < lo or value > hi:
        raise InvalidMessageError(f"{name} {value} is out of range [{lo}, {hi}]")
    return value


def _topic_bytes(topic, limit=MAX_TOPIC_LENGTH):
    """``topic`` in UTF-8; ``limit``: MAX_TOPIC_LENGTH for a put, MAX_TOPIC_LENGTH_V2 for a read
    (a 5.x store holds ``%RETRY%`` topics longer than a V1 record can)."""
    if isinstance(topic, str):
        try:
            data = topic.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            raise InvalidTopicError(f"topic {topic!r} is not encodable as UTF-8") from None
    elif isinstance(topic, (bytes, bytearray, memoryview)):
        data = bytes(topic)
    else:
        raise InvalidTopicError(f"topic must be str or bytes, not {type(topic).__name__}")
    if not data:
        raise InvalidTopicError("topic is empty")
    if len(data) > limit:
        raise InvalidTopicError(f"topic is {len(data)} bytes long in UTF-8; the limit is {limit}")
    return data


def _properties_bytes(properties):
    if properties is None:
        return b""
    if isinstance(properties, (bytes, bytearray, memoryview)):
        data = bytes(properties)
        if len(data) > MAX_PROPERTIES_LENGTH:
            raise PropertiesTooLargeError(
                f"properties are {len(data)} bytes long; the limit is {MAX_PROPERTIES_LENGTH}"
            )
        return data
    if isinstance(properties, Mapping):
        return encode_properties(properties)
    raise InvalidMessageError(f"properties must be bytes or a mapping, not {type(properties).__name__}")


def _body_view(body):
    try:
        view = memoryview(body)
    except TypeError:
        view = None
    if view is None or not view.c_contiguous:
        raise InvalidMessageError(f"body must be a contiguous bytes-like object, not {type(body).__name__}")
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def _host(host, name):
    try:
        ip, port = host
    except (TypeError, ValueError):
        raise InvalidMessageError(f"{name} must be an (ip, port) pair") from None
    if isinstance(ip, str):
        try:
            raw = host_to_bytes(ip)
        except ValueError:
            raise InvalidMessageError(f"{name} {ip!r} is not an IPv4 or IPv6 address") from None
    elif isinstance(ip, (bytes, bytearray, memoryview)) and len(ip) in (HOST_V4_LENGTH, HOST_V6_LENGTH):
        raw = bytes(ip)
    else:
        raise InvalidMessageError(f"{name} address must be text or 4 or 16 bytes, not {ip!r}")
    return raw, _check_int(port, name + " port", _INT32_MIN, _INT32_MAX)


def _prepare(
    topic,
    body,
    properties,
    queue_id,
    flag,
    queue_offset,
    physical_offset,
    sys_flag,
    born_timestamp,
    born_host,
    store_timestamp,
    store_host,
    reconsume_times,
    prepared_transaction_offset,
    body_crc,
):
    """Validate every field (in this order, as the compiled twin does) and pack the header."""
    topic_b = _topic_bytes(topic)
    props_b = _properties_bytes(properties)
    body_v = _body_view(body)
    _check_int(queue_id, "queue_id", _INT32_MIN, _INT32_MAX)
    _check_int(flag, "flag", _INT32_MIN, _INT32_MAX)
    _check_int(queue_offset, "queue_offset", _INT64_MIN, _INT64_MAX)
    _check_int(physical_offset, "physical_offset", _INT64_MIN, _INT64_MAX)
    _check_int(sys_flag, "sys_flag", _INT32_MIN, _INT32_MAX)
    _check_int(born_timestamp, "born_timestamp", _INT64_MIN, _INT64_MAX)
    born_ip, born_port = _host(born_host, "born_host")
    _check_int(store_timestamp, "store_timestamp", _INT64_MIN, _INT64_MAX)
    store_ip, store_port = _host(store_host, "store_host")
    _check_int(reconsume_times, "reconsume_times", _INT32_MIN, _INT32_MAX)
    _check_int(prepared_transaction_offset, "prepared_transaction_offset", _INT64_MIN, _INT64_MAX)
    if body_crc is not None:
        _check_int(body_crc, "body_crc", _INT32_MIN, _INT32_MAX)
    if len(born_ip) == HOST_V6_LENGTH:
        sys_flag |= SYSFLAG_BORNHOST_V6
    elif sys_flag & SYSFLAG_BORNHOST_V6:
        raise InvalidMessageError("sys_flag says the born host is IPv6 but its address is IPv4")
    if len(store_ip) == HOST_V6_LENGTH:
        sys_flag |= SYSFLAG_STOREHOST_V6
    elif sys_flag & SYSFLAG_STOREHOST_V6:
        raise InvalidMessageError("sys_flag says the store host is IPv6 but its address is IPv4")
    body_len = body_v.nbytes
    n = _length(body_len, len(topic_b), len(props_b), sys_flag, MAGIC_V1)
    if n < 0:
        raise InvalidMessageError(f"a record with a {body_len}-byte body is too long for a Java int")
    if body_crc is None:
        body_crc = zlib.crc32(body_v) & 0x7FFFFFFF if body_len else 0
    parts = (
        _ENC_HEAD.pack(
            n, MAGIC_V1, body_crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_timestamp
        ),
        born_ip,
        _PORT_TS.pack(born_port, store_timestamp),
        store_ip,
        _TAIL.pack(store_port, reconsume_times, prepared_transaction_offset, body_len),
        body_v,
        bytes((len(topic_b),)),
        topic_b,
        _SHORT.pack(len(props_b)),
        props_b,
    )
    return n, parts


def encode_record(
    *,
    topic,
    body,
    properties=b"",
    queue_id=0,
    flag=0,
    queue_offset=0,
    physical_offset=0,
    sys_flag=0,
    born_timestamp=0,
    born_host=("127.0.0.1", 0),
    store_timestamp=0,
    store_host=("127.0.0.1", 10911),
    reconsume_times=0,
    prepared_transaction_offset=0,
    body_crc=None,
) -> bytes:
    """One V1 CommitLog record as bytes. ``body_crc=None`` computes the masked CRC.

    IPv6 hosts set sysFlag 0x10 / 0x20 themselves; a v6 bit for an IPv4 address raises
    InvalidMessageError. Hosts are ``(ip, port)`` with ip as text or 4/16 raw bytes.
    """
    _, parts = _prepare(
        topic,
        body,
        properties,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
        born_host,
        store_timestamp,
        store_host,
        reconsume_times,
        prepared_transaction_offset,
        body_crc,
    )
    return b"".join(parts)


def _writable_view(buffer):
    try:
        view = memoryview(buffer)
    except TypeError:
        raise TypeError(f"buffer must be a writable bytes-like object, not {type(buffer).__name__}") from None
    if view.readonly:
        raise TypeError("buffer is read-only")
    if not view.c_contiguous:
        raise TypeError("buffer must be C-contiguous")
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def _readable_view(buffer):
    try:
        view = memoryview(buffer)
    except TypeError:
        raise TypeError(f"buffer must be a bytes-like object, not {type(buffer).__name__}") from None
    if not view.c_contiguous:
        raise TypeError("buffer must be C-contiguous")
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def _check_pos(pos, size):
    if not isinstance(pos, int):
        raise TypeError(f"pos must be an int, not {type(pos).__name__}")
    if pos < 0 or pos > size:
        raise ValueError(f"pos {pos} is out of range for a buffer of {size} bytes")


def encode_record_into(
    buffer,
    pos,
    *,
    topic,
    body,
    properties=b"",
    queue_id=0,
    flag=0,
    queue_offset=0,
    physical_offset=0,
    sys_flag=0,
    born_timestamp=0,
    born_host=("127.0.0.1", 0),
    store_timestamp=0,
    store_host=("127.0.0.1", 10911),
    reconsume_times=0,
    prepared_transaction_offset=0,
    body_crc=None,
) -> int:
    """Write one record (same keywords as :func:`encode_record`) into ``buffer`` at ``pos``.

    Returns the record length. Raises ValueError("buffer too small: ...") if it does not fit;
    nothing is written when anything raises.
    """
    view = _writable_view(buffer)
    _check_pos(pos, view.nbytes)
    n, parts = _prepare(
        topic,
        body,
        properties,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
        born_host,
        store_timestamp,
        store_host,
        reconsume_times,
        prepared_transaction_offset,
        body_crc,
    )
    if n > view.nbytes - pos:
        raise ValueError(
            f"buffer too small: the record needs {n} bytes at position {pos}, {view.nbytes - pos} available"
        )
    at = pos
    for part in parts:
        size = len(part) if not isinstance(part, memoryview) else part.nbytes
        view[at : at + size] = part
        at += size
    return n


def encode_blank_into(buffer, pos: int, max_blank: int) -> int:
    """Write the 8-byte BLANK header (``max_blank``, MAGIC_BLANK) at ``pos``; returns 8."""
    view = _writable_view(buffer)
    _check_pos(pos, view.nbytes)
    _check_int(max_blank, "max_blank", _INT32_MIN, _INT32_MAX)
    if view.nbytes - pos < END_FILE_MIN_BLANK_LENGTH:
        raise ValueError(
            f"buffer too small: the BLANK record needs {END_FILE_MIN_BLANK_LENGTH} bytes "
            f"at position {pos}, {view.nbytes - pos} available"
        )
    _HEAD.pack_into(view, pos, max_blank, MAGIC_BLANK)
    return END_FILE_MIN_BLANK_LENGTH


# ---------------------------------------------------------------------------------------------
# Decoding


def _parse(buf, pos, end, check_crc):  # noqa: C901 (the pure twin reads a record field by field, as record.h does)
    """Decode the record at buf[pos:end], step for step as rs_decode_record does.

    Returns (None, row) for a record, row being RECORD_DTYPE's fields in order; otherwise
    (stop_reason, total_size or None).
    """
    avail = end - pos
    if avail < END_FILE_MIN_BLANK_LENGTH:
        return STOP_END, None
    total, magic = _HEAD.unpack_from(buf, pos)
    if magic == MAGIC_BLANK:
        return STOP_BLANK, total
    if magic != MAGIC_V1 and magic != MAGIC_V2:
        return STOP_END, total
    if total < RECORD_FIXED_LENGTH:
        return STOP_CORRUPT, total
    if total > avail:
        return STOP_TRUNCATED, total
    crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts = _FIXED.unpack_from(
        buf, pos + POS_BODY_CRC
    )
    born_len = HOST_V6_LENGTH if sys_flag & SYSFLAG_BORNHOST_V6 else HOST_V4_LENGTH
    store_len = HOST_V6_LENGTH if sys_flag & SYSFLAG_STOREHOST_V6 else HOST_V4_LENGTH
    p = POS_BORN_HOST
    if p + born_len + INT_SIZE + LONG_SIZE + store_len + INT_SIZE + INT_SIZE + LONG_SIZE + INT_SIZE > avail:
        return STOP_TRUNCATED, total
    born_host = bytes(buf[pos + p : pos + p + born_len])
    p += born_len
    born_port, store_ts = _PORT_TS.unpack_from(buf, pos + p)
    p += INT_SIZE + LONG_SIZE
    store_host = bytes(buf[pos + p : pos + p + store_len])
    p += store_len
    store_port, reconsume, prepared, body_len = _TAIL.unpack_from(buf, pos + p)
    p += INT_SIZE + INT_SIZE + LONG_SIZE + INT_SIZE
    if body_len < 0:
        return STOP_CORRUPT, total
    if body_len > avail - p:
        return STOP_TRUNCATED, total
    body_pos = pos + p
    p += body_len
    if magic == MAGIC_V2:
        if avail - p < TOPIC_LENGTH_SIZE_V2:
            return STOP_TRUNCATED, total
        topic_len = _SHORT.unpack_from(buf, pos + p)[0]
        p += TOPIC_LENGTH_SIZE_V2
    else:
        if avail - p < TOPIC_LENGTH_SIZE:
            return STOP_TRUNCATED, total
        topic_len = buf[pos + p]
        if topic_len > 127:
            topic_len -= 256
        p += TOPIC_LENGTH_SIZE
    if topic_len < 0:
        return STOP_CORRUPT, total
    if topic_len > avail - p:
        return STOP_TRUNCATED, total
    topic_pos = pos + p
    p += topic_len
    if avail - p < PROPERTIES_LENGTH_SIZE:
        return STOP_TRUNCATED, total
    props_len = _SHORT.unpack_from(buf, pos + p)[0]
    p += PROPERTIES_LENGTH_SIZE
    if props_len < 0:
        return STOP_CORRUPT, total
    if props_len > avail - p:
        return STOP_TRUNCATED, total
    props_pos = pos + p
    p += props_len
    if p != total:
        return STOP_CORRUPT, total
    if check_crc:
        # a record that carries the whole-record CRC is checked by it alone, as record.h does
        end = pos + total
        carried = (  # rs_prop_crc_carried (record.h): ends in the __CRC32# property (§1.6)
            props_len >= _PROP_CRC_LENGTH
            and buf[end - 1] == 2
            and buf[end - _PROP_CRC_LENGTH : end - _PROP_CRC_LENGTH + _PROP_CRC_NAME_LENGTH]
            == b"__CRC32#\x01"
        )
        if (
            not _prop_crc_ok(buf, pos, total)
            if carried
            else body_len > 0 and zlib.crc32(buf[body_pos : body_pos + body_len]) & 0x7FFFFFFF != crc
        ):
            return STOP_BAD_CRC, total
    return None, (
        pos,
        total,
        magic,
        crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_ts,
        born_host,
        born_port,
        store_ts,
        store_host,
        store_port,
        reconsume,
        prepared,
        body_pos,
        body_len,
        topic_pos,
        topic_len,
        props_pos,
        props_len,
    )


def _prop_crc_ok(buf, pos, total):
    """rs_prop_crc_ok: whether the digits of the __CRC32# property ending the record of
    ``total`` bytes at ``buf[pos:]`` are the CRC of the bytes before it."""
    tail = pos + total - _PROP_CRC_LENGTH
    digits = bytes(buf[tail + _PROP_CRC_NAME_LENGTH : pos + total - 1])
    if not all(0x30 <= d <= 0x39 for d in digits):
        return False
    return int(digits[::-1]) == zlib.crc32(buf[pos:tail]) & 0x7FFFFFFF


def _corrupt(reason, pos, total):
    msg = _MESSAGES[reason].format(pos=pos)
    if reason == STOP_BLANK:
        msg += f" (length {total})"
    err = CorruptRecordError(msg)
    err.reason = reason
    err.position = pos
    return err


def _message(buf, row, copy_body):
    (
        pos,
        total,
        magic,
        crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_ts,
        born_host,
        born_port,
        store_ts,
        store_host,
        store_port,
        reconsume,
        prepared,
        body_pos,
        body_len,
        topic_pos,
        topic_len,
        props_pos,
        props_len,
    ) = row
    m = MessageExt.__new__(MessageExt)
    m.size = total
    m.magic = magic
    m.body_crc = crc
    m.queue_id = queue_id
    m.flag = flag
    m.queue_offset = queue_offset
    m.commitlog_offset = physical_offset
    m.sys_flag = sys_flag
    m.born_timestamp = born_ts
    m.born_host = (host_from_bytes(born_host), born_port)
    m.store_timestamp = store_ts
    m.store_host = (host_from_bytes(store_host), store_port)
    m.reconsume_times = reconsume
    m.prepared_transaction_offset = prepared
    if copy_body:
        m.body = bytes(buf[body_pos : body_pos + body_len])
    else:
        m.body = buf.toreadonly()[body_pos : body_pos + body_len]
    m.topic = bytes(buf[topic_pos : topic_pos + topic_len]).decode("utf-8", "surrogateescape")
    m.properties = decode_properties(buf[props_pos : props_pos + props_len])
    return m


def decode_record(
    buffer, pos: int = 0, *, check_crc: bool = True, copy_body: bool = True, end: int | None = None
) -> MessageExt:
    """Decode the record at ``buffer[pos:end]`` (``end`` None: the whole buffer) into a MessageExt.

    Raises CorruptRecordError (with ``.reason``, a STOP_* code, and ``.position``) when there is
    no valid record there, including a BLANK. ``copy_body=False`` gives a read-only memoryview
    into ``buffer`` as the body, which keeps ``buffer`` exported (an mmap cannot close) while it lives.
    """
    buf = _readable_view(buffer)
    stop = buf.nbytes
    if end is not None:
        if not isinstance(end, int):
            raise TypeError(f"end must be an int, not {type(end).__name__}")
        if end < 0 or end > stop:
            raise ValueError(f"end {end} is out of range for a buffer of {stop} bytes")
        stop = end
    _check_pos(pos, stop)
    reason, row = _parse(buf, pos, stop, check_crc)
    if reason is not None:
        raise _corrupt(reason, pos, row)
    return _message(buf, row, copy_body)


def decode_batch(
    buffer,
    start: int = 0,
    end: int | None = None,
    *,
    check_crc: bool = True,
    max_records: int = -1,
    base: int | None = None,
):
    """Scan consecutive records in ``buffer[start:end]`` into a RECORD_DTYPE array.

    Returns ``(rows, stop_pos, stop_reason)``: the scan stops at ``end`` or after ``max_records``
    (STOP_LIMIT; negative means no limit), or at the first position that is not a valid record
    (STOP_BLANK, STOP_END, STOP_TRUNCATED, STOP_CORRUPT, STOP_BAD_CRC); ``stop_pos`` is there.
    ``base``: the CommitLog offset of ``buffer[0]``; a record whose PHYSICALOFFSET is not
    ``base`` + its position (a whole record copied there) stops the scan as STOP_CORRUPT.
    """
    placed = -1 if base is None else _check_int(base, "base", 0, _INT64_MAX)
    buf = _readable_view(buffer)
    size = buf.nbytes
    if end is None:
        end = size
    _check_range(start, end, size)
    if not isinstance(max_records, int):
        raise TypeError(f"max_records must be an int, not {type(max_records).__name__}")
    rows: list[tuple[Any, ...]] = []
    pos = start
    reason = STOP_LIMIT
    while pos < end and len(rows) != max_records:
        stop, row = _parse(buf, pos, end, check_crc)
        if stop is None and placed >= 0 and row[7] != placed + pos:
            stop = STOP_CORRUPT  # a record copied here from elsewhere
        if stop is not None:
            reason = stop
            break
        rows.append(row)
        pos += row[1]
    table = np.zeros(len(rows), dtype=RECORD_DTYPE)  # zeroed padding: arrays compare bytewise
    if rows:
        table[:] = rows
    return table, pos, reason


def _check_range(start, end, size):
    for name, value in (("start", start), ("end", end)):
        if not isinstance(value, int):
            raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if start < 0 or start > end or end > size:
        raise ValueError(f"range [{start}, {end}) is out of bounds for a buffer of {size} bytes")
