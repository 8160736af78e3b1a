"""CommitLog record codec, Java hashes and message ids: the pure-Python twin of ``rocketstore.format._codec``.

Both twins have the same public names, raise the same exceptions with the same messages, and
produce identical bytes and arrays; tests/test_codec_properties.py checks that they do. The kernels
over a stretch of records (queue keys and ranges, field checks, verify's and recovery's scans) are
in :mod:`rocketstore.format._scan_py`.

CommitLog record (spec §1.1), V1 magic, IPv4 hosts; all integers big-endian, signed:

=====  ==========  ======  ===========================================================
 #      position    size    field
=====  ==========  ======  ===========================================================
  1     0           4       TOTALSIZE: length of the whole record
  2     4           4       MAGICCODE: V1 0xDAA320A7 (V2 0xDAA320AB: 2-byte topic length)
  3     8           4       BODYCRC: crc32(body) & 0x7FFFFFFF, 0 for an empty body
  4     12          4       QUEUEID
  5     16          4       FLAG
  6     20          8       QUEUEOFFSET
  7     28          8       PHYSICALOFFSET: CommitLog offset of the record's first byte
  8     36          4       SYSFLAG (0x10: born host IPv6, 0x20: store host IPv6)
  9     40          8       BORNTIMESTAMP
 10     48          8       BORNHOST: 4 address bytes + int port (IPv6: 16 + 4)
 11     56          8       STORETIMESTAMP         (+12 from here if the born host is IPv6)
 12     64          8       STOREHOST: as BORNHOST (IPv6 when SYSFLAG 0x20)
 13     72          4       RECONSUMETIMES         (+12 per IPv6 host from here)
 14     76          8       PREPAREDTRANSACTIONOFFSET
 15     84          4 + B   BODY: int length B, then B bytes
 16     88+B        1 + T   TOPIC: signed-byte length T (V2: signed short), then T bytes UTF-8
 17     89+B+T      2 + P   PROPERTIES: signed-short length P, then P bytes (§2)
=====  ==========  ======  ===========================================================

``TOTALSIZE = 91 + B + T + P``, plus 12 per IPv6 host and 1 for V2. Encoding always writes V1;
decoding reads V1 and V2. A BLANK end-of-file record is 8 header bytes (``maxBlank``,
``0xCBD43194``) followed by don't-care filler up to the end of the segment.

Text: topics and properties are UTF-8. Decoding uses ``errors="surrogateescape"`` so that any
bytes decode without raising (a topic re-encodes with the same handler to the same bytes;
:func:`encode_properties` refuses such escapes, as Java would read them back as U+FFFD: pass
raw bytes to write invalid UTF-8); valid UTF-8, which every Java writer produces, decodes
exactly as Java would. Java hashes are
over UTF-16 code units (lone surrogates count as themselves), so ``java_hash`` of such an
escaped string equals ``java_hash_bytes`` of the raw bytes.
"""

from __future__ import annotations

import heapq
import operator
import re
import struct
import sys
import threading
import weakref
import zlib
from collections.abc import Iterator, Mapping
from itertools import repeat
from types import MappingProxyType
from typing import Any, Optional

import numpy as np

from rocketstore.base._clock import month_start as _month_start
from rocketstore.base._clock import now_ms
from rocketstore.errors import (
    CorruptRecordError,
    InvalidMessageError,
    InvalidMessageIdError,
    InvalidTopicError,
    PropertiesTooLargeError,
    StoreClosedError,
)
from rocketstore.format.units import PLACEHOLDER_SIZE as _PLACEHOLDER_SIZE
from rocketstore.message import Message, MessageExt, host_from_bytes, host_to_bytes, make_offset_msg_id
from rocketstore.message import host_raw as _host_raw
from rocketstore.status import GetMessageStatus

__all__ = [
    "java_hash",
    "java_hash_bytes",
    "tags_code",
    "index_key_hash",
    "body_crc",
    "encode_properties",
    "put_properties",
    "plain_message_items",
    "decode_properties",
    "record_length",
    "encode_record",
    "encode_record_into",
    "encode_blank_into",
    "decode_record",
    "decode_batch",
    "record_from_row",
    "messages_from_rows",
    "row_messages",
    "MessageExt",
    "pull_units",
    "segment_messages",
    "queue_message",
    "queue_messages",
    "record_at",
    "message_by_id",
    "key_messages",
    "key_lookup",
    "unique_lookup",
    "FastReads",
    "FastRLock",
    "PULL_END",
    "PULL_FULL",
    "PULL_OUTSIDE",
    "PULL_DAMAGED",
    "dispatch_info",
    "property_pieces",
    "make_offset_msg_id",
    "parse_offset_msg_id",
    "make_uniq_key",
    "uniq_key_time",
    "RECORD_DTYPE",
    "DISPATCH_DTYPE",
    "KEYREF_DTYPE",
    "PIECE_DTYPE",
    "SCHEDULE_TOPIC",
    "DEFAULT_DELAY_LEVELS_MS",
]

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
        carried = _prop_crc_carried(buf, pos + total, props_len)
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


def _prop_crc_carried(buf, end, props_len):
    """rs_prop_crc_carried: whether the record ending at ``buf[end]`` (its properties
    ``props_len`` bytes) ends in the __CRC32# property's name and 0x02 (§1.6)."""
    tail = end - _PROP_CRC_LENGTH
    return (
        props_len >= _PROP_CRC_LENGTH
        and buf[end - 1] == 2
        and buf[tail : tail + _PROP_CRC_NAME_LENGTH] == b"__CRC32#\x01"
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


def messages_from_rows(buffer, rows, *, copy_body: bool = True) -> list[MessageExt]:
    """The MessageExt of every row of a :func:`decode_batch` array over the same ``buffer``, as a
    list (no re-check of the CRC; ValueError if a row points outside ``buffer``)."""
    if not isinstance(rows, np.ndarray) or rows.ndim != 1 or rows.dtype != RECORD_DTYPE:
        raise TypeError("rows must be a one-dimensional numpy array of RECORD_DTYPE")
    return [record_from_row(buffer, row, copy_body=copy_body) for row in rows]


class _SegmentMessages:
    """The iterator segment_messages returns: one MessageExt per record, decoded as it is asked
    for; ``stop`` is where the next record starts (or the scan stopped), ``reason`` -1 until the
    iterator is exhausted, then the STOP_* code decode_batch would give there."""

    def __init__(self, buf: Any, start: int, end: int, check_crc: bool, copy_body: bool, base: int = -1):
        self._buf: Any = buf
        self._end = end
        self._base = base
        self._check_crc = check_crc
        self._copy_body = copy_body
        self.stop = start
        self.reason = -1

    def __iter__(self) -> _SegmentMessages:
        return self

    def __next__(self) -> MessageExt:
        if self._buf is None:
            raise StopIteration
        pos = self.stop
        if pos >= self._end:
            self.reason, self._buf = STOP_LIMIT, None
            raise StopIteration
        reason, row = _parse(self._buf, pos, self._end, self._check_crc)
        if reason is None and self._base >= 0 and row[7] != self._base + pos:
            reason = STOP_CORRUPT  # a record copied here from elsewhere: not the one stored here
        if reason is not None:
            self.reason, self._buf = reason, None
            raise StopIteration
        self.stop = pos + row[1]
        return _message(self._buf, row, self._copy_body)


def segment_messages(
    buffer,
    start: int = 0,
    end: int | None = None,
    *,
    check_crc: bool = True,
    copy_body: bool = True,
    base: int | None = None,
) -> _SegmentMessages:
    """The records of ``buffer[start:end]`` as messages, decoded one by one as they are asked
    for (what :func:`decode_batch`'s rows give through :func:`row_messages`, without the
    table). The iterator stops at ``end`` or at the first position that is not a valid record;
    then its ``stop`` and ``reason`` are decode_batch's ``stop_pos`` and ``stop_reason``.

    ``base``: the CommitLog offset of ``buffer[0]``; a record whose PHYSICALOFFSET is not
    ``base`` + its position (a whole record copied there from elsewhere) stops the iterator as
    a corrupt one does (STOP_CORRUPT), as :func:`record_at` refuses it. None: not checked."""
    buf = _readable_view(buffer)
    if end is None:
        end = buf.nbytes
    _check_range(start, end, buf.nbytes)
    if base is None:
        base = -1
    else:
        _check_int(base, "base", 0, _INT64_MAX)
    return _SegmentMessages(buf, start, end, check_crc, copy_body, base)


def row_messages(buffer, rows, *, copy_body: bool = True) -> Iterator[MessageExt]:
    """:func:`messages_from_rows` as an iterator: each message is made when it is asked for."""
    if not isinstance(rows, np.ndarray) or rows.ndim != 1 or rows.dtype != RECORD_DTYPE:
        raise TypeError("rows must be a one-dimensional numpy array of RECORD_DTYPE")
    return (record_from_row(buffer, row, copy_body=copy_body) for row in rows)


def _unit_message(buf, pos, offset, size, queue_offset, topic_b, qid, tags, copy_body):
    """The message at ``buf[pos:]`` if it is a whole, CRC-valid record of this size, topic, queue
    id and queue offset whose PHYSICALOFFSET is ``offset``, else None; with ``tags`` (a set of
    str), ``False`` for a message whose TAGS is not in it."""
    if not (0 <= pos < buf.nbytes and size > 0):
        return None
    reason, row = _parse(buf, pos, buf.nbytes, True)
    if (
        reason is not None
        or row[1] != size
        or row[4] != qid
        or row[6] != queue_offset
        or row[7] != offset
        or bytes(buf[row[19] : row[19] + row[20]]) != topic_b
    ):
        return None
    m = _message(buf, row, copy_body)
    if tags is not None and m.tags not in tags:
        return False
    return m


def record_from_row(buffer, row, *, copy_body: bool = True) -> MessageExt:
    """The MessageExt for one row of :func:`decode_batch` over the same ``buffer`` (no re-check)."""
    buf = _readable_view(buffer)
    sys_flag = int(row["sys_flag"])
    born_len = HOST_V6_LENGTH if sys_flag & SYSFLAG_BORNHOST_V6 else HOST_V4_LENGTH
    store_len = HOST_V6_LENGTH if sys_flag & SYSFLAG_STOREHOST_V6 else HOST_V4_LENGTH
    body_pos, body_len = int(row["body_pos"]), int(row["body_len"])
    topic_pos, topic_len = int(row["topic_pos"]), int(row["topic_len"])
    props_pos, props_len = int(row["properties_pos"]), int(row["properties_len"])
    pos, size = int(row["position"]), int(row["size"])
    end = pos + size
    if size <= 0 or pos < 0 or end > buf.nbytes:
        raise ValueError("row does not describe a record inside this buffer")
    for start, length in ((body_pos, body_len), (topic_pos, topic_len), (props_pos, props_len)):
        if start < pos or length < 0 or start + length > end:
            raise ValueError("row does not describe a record inside this buffer")
    fields = (
        int(row["position"]),
        int(row["size"]),
        int(row["magic"]),
        int(row["body_crc"]),
        int(row["queue_id"]),
        int(row["flag"]),
        int(row["queue_offset"]),
        int(row["physical_offset"]),
        sys_flag,
        int(row["born_timestamp"]),
        bytes(row["born_host"]).ljust(HOST_V6_LENGTH, b"\0")[:born_len],
        int(row["born_port"]),
        int(row["store_timestamp"]),
        bytes(row["store_host"]).ljust(HOST_V6_LENGTH, b"\0")[:store_len],
        int(row["store_port"]),
        int(row["reconsume_times"]),
        int(row["prepared_transaction_offset"]),
        body_pos,
        body_len,
        topic_pos,
        topic_len,
        props_pos,
        props_len,
    )
    return _message(buf, fields, copy_body)


# ---------------------------------------------------------------------------------------------
# Dispatch (§2 tagsCode and DELAY, §5.2 index keys): what the ConsumeQueues and the index need

_SCHEDULE_TOPIC_BYTES = SCHEDULE_TOPIC.encode("ascii")
_DISPATCH_PROPERTIES = {b"TAGS": 0, b"KEYS": 1, b"UNIQ_KEY": 2, b"DELAY": 3}
_JAVA_INT = re.compile(rb"[+-]?[0-9]+")  # Integer.parseInt, ASCII digits only
_KEY_SEPARATOR = b" "  # MessageConst.KEY_SEPARATOR


def _check_table(name, table, dtype, dtype_name):
    """``table`` as a 1-D array of exactly ``dtype`` (TypeError otherwise)."""
    if not isinstance(table, np.ndarray) or table.ndim != 1 or table.dtype != dtype:
        raise TypeError(f"{name} must be a one-dimensional numpy array of {dtype_name}")
    return table


def _delay_table(delay_levels_ms) -> list:
    """The delay table as a list of Java longs: level n is at [n - 1]."""
    if isinstance(delay_levels_ms, (str, bytes, bytearray, memoryview, Mapping)):
        raise TypeError(f"delay_levels_ms must be a sequence of ints, not {type(delay_levels_ms).__name__}")
    try:
        items = tuple(delay_levels_ms)
    except TypeError:
        raise TypeError(
            f"delay_levels_ms must be a sequence of ints, not {type(delay_levels_ms).__name__}"
        ) from None
    table = []
    for level, value in enumerate(items, 1):
        try:
            value = operator.index(value)
        except TypeError:
            raise TypeError(f"delay level {level} must be an int (ms), not {type(value).__name__}") from None
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError(f"delay level {level} is {value} ms, which does not fit a Java long")
        table.append(value)
    return table


def _outside(i, position, what, start, length, size):
    err = CorruptRecordError(
        f"record {i} at position {position}: its {what} bytes [{start}, "
        f"{start + length}) lie outside the buffer of {size} bytes"
    )
    err.reason = STOP_CORRUPT
    err.position = position
    return err


def _java_int(data):
    """``Integer.parseInt`` of ASCII text, or None where Java would throw NumberFormatException."""
    if _JAVA_INT.fullmatch(data) is None:
        return None
    value = int(data)
    return value if _INT32_MIN <= value <= _INT32_MAX else None


def _dispatch_properties(data):
    """The (offset, length) in ``data`` of the TAGS, KEYS, UNIQ_KEY and DELAY values, each None
    when absent: the pieces :func:`decode_properties` keeps, a later duplicate winning."""
    found: list[Optional[tuple[int, int]]] = [None, None, None, None]
    at = 0
    for piece in data.split(b"\x02"):
        sep = piece.find(b"\x01")
        if 0 < sep < len(piece) - 1:
            which = _DISPATCH_PROPERTIES.get(piece[:sep])
            if which is not None:
                found[which] = (at + sep + 1, len(piece) - sep - 1)
        at += len(piece) + 1
    return found


def property_pieces(buffer, records):
    """Every properties piece of ``records`` (RECORD_DTYPE, decoded from ``buffer``) that
    :func:`decode_properties` keeps, duplicates included, in record order.

    Returns ``(pieces, counts)``: ``pieces`` (PIECE_DTYPE) locates each piece's name and value
    in ``buffer``; ``counts`` (int32, one per record) says how many pieces each record has.
    A record whose properties lie outside ``buffer`` raises CorruptRecordError.
    """
    _check_table("records", records, RECORD_DTYPE, "RECORD_DTYPE")
    buf = _readable_view(buffer)
    try:
        size = buf.nbytes
        n = len(records)
        positions = records["position"].tolist()
        props_pos, props_len = records["properties_pos"].tolist(), records["properties_len"].tolist()
        counts = np.zeros(n, dtype=np.int32)
        found = []
        for i in range(n):
            pp, pl = props_pos[i], props_len[i]
            if pp < 0 or pl < 0 or pp + pl > size:
                raise _outside(i, positions[i], "properties", pp, pl, size)
            at = pp
            for piece in bytes(buf[pp : pp + pl]).split(b"\x02"):
                sep = piece.find(b"\x01")
                if 0 < sep < len(piece) - 1:
                    found.append((at, at + sep + 1, sep, len(piece) - sep - 1))
                    counts[i] += 1
                at += len(piece) + 1
    finally:
        buf.release()
    pieces = np.zeros(len(found), dtype=PIECE_DTYPE)
    if found:
        pieces[:] = found
    return pieces, counts


def dispatch_info(buffer, records, delay_levels_ms=DEFAULT_DELAY_LEVELS_MS):  # noqa: C901 (one pass over a chunk's rows, as the compiled twin's loop)
    """What dispatch needs from each record of ``records`` (RECORD_DTYPE, decoded from ``buffer``).

    Returns ``(info, keys)``. ``info`` (DISPATCH_DTYPE, one row per record) holds the tagsCode
    (§2: Java hash of TAGS, 0 without one; for SCHEDULE_TOPIC_XXXX with a DELAY level clamped to
    ``len(delay_levels_ms)`` and > 0, storeTimestamp + that level's delay), where the TAGS value
    lies in ``buffer``, and the DELAY value as Integer.parseInt reads it (0 when absent or not a
    number). ``keys`` (KEYREF_DTYPE, in record order) locates each record's index keys (§5.2):
    its UNIQ_KEY, then each non-empty token of KEYS split on single spaces; no transaction
    filtering. Properties are read as :func:`decode_properties` reads them.

    A record whose topic or properties lie outside ``buffer`` raises CorruptRecordError.
    """
    _check_table("records", records, RECORD_DTYPE, "RECORD_DTYPE")
    table = _delay_table(delay_levels_ms)
    max_level = len(table)
    buf = _readable_view(buffer)
    try:
        size = buf.nbytes
        n = len(records)
        if n > _INT32_MAX:
            raise ValueError(f"{n} records are too many for one call (at most {_INT32_MAX})")
        positions = records["position"].tolist()
        store_timestamps = records["store_timestamp"].tolist()
        topic_pos, topic_len = records["topic_pos"].tolist(), records["topic_len"].tolist()
        props_pos, props_len = records["properties_pos"].tolist(), records["properties_len"].tolist()
        tags_code, tags_pos, tags_len, delay_level = [0] * n, [-1] * n, [0] * n, [0] * n
        keys = []
        for i in range(n):
            tp, tl, pp, pl = topic_pos[i], topic_len[i], props_pos[i], props_len[i]
            if tp < 0 or tl < 0 or tp + tl > size:
                raise _outside(i, positions[i], "topic", tp, tl, size)
            if pp < 0 or pl < 0 or pp + pl > size:
                raise _outside(i, positions[i], "properties", pp, pl, size)
            data = bytes(buf[pp : pp + pl])
            tags, keys_value, uniq, delay = _dispatch_properties(data)
            if tags is not None:
                tags_pos[i], tags_len[i] = pp + tags[0], tags[1]
                tags_code[i] = java_hash_bytes(data[tags[0] : tags[0] + tags[1]])
            if delay is not None:
                level = _java_int(data[delay[0] : delay[0] + delay[1]])
                if level is not None:
                    delay_level[i] = level
                    if buf[tp : tp + tl] == _SCHEDULE_TOPIC_BYTES:
                        level = min(level, max_level)
                        if level > 0:
                            tags_code[i] = _wrap64(store_timestamps[i] + table[level - 1])
            if uniq is not None:
                keys.append((pp + uniq[0], uniq[1], i))
            if keys_value is not None:
                at, end = keys_value[0], keys_value[0] + keys_value[1]
                for token in data[at:end].split(_KEY_SEPARATOR):
                    if token:
                        keys.append((pp + at, len(token), i))
                    at += len(token) + 1
    finally:
        buf.release()
    info = np.zeros(n, dtype=DISPATCH_DTYPE)
    if n:
        info["tags_code"] = tags_code
        info["tags_pos"] = tags_pos
        info["tags_len"] = tags_len
        info["delay_level"] = delay_level
    refs = np.zeros(len(keys), dtype=KEYREF_DTYPE)
    if keys:
        refs[:] = keys
    return info, refs


def _wrap64(value: int) -> int:
    """Java long arithmetic: wrap to a signed 64-bit value."""
    return ((value - _INT64_MIN) & 0xFFFFFFFFFFFFFFFF) + _INT64_MIN


# ---------------------------------------------------------------------------------------------
# Message ids (§3)


_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def _unhex(s, what):
    if not isinstance(s, str):
        raise InvalidMessageIdError(f"{what} must be a str, not {type(s).__name__}")
    if len(s) not in (32, 56):
        raise InvalidMessageIdError(f"{what} {s!r} is not 32 or 56 hex characters long")
    if not s.isascii() or not all(c in _HEX_DIGITS for c in s):
        raise InvalidMessageIdError(f"{what} {s!r} is not hexadecimal")
    return bytes.fromhex(s)


def parse_offset_msg_id(s: str):
    """``(host_bytes, port, offset)`` of an offsetMsgId; InvalidMessageIdError if malformed."""
    raw = _unhex(s, "offsetMsgId")
    ip_len = len(raw) - 12
    return (
        raw[:ip_len],
        int.from_bytes(raw[ip_len : ip_len + 4], "big", signed=True),
        int.from_bytes(raw[ip_len + 4 :], "big", signed=True),
    )


def make_uniq_key(
    ip_bytes, pid: int, loader_hash: int, time_ms: int, counter: int, month_start_ms: int
) -> str:
    """UNIQ_KEY (§3.2): ip, pid (16 bits), class-loader hash, ms since month start (32 bits), counter."""
    raw = _host_raw(ip_bytes)
    for name, value in (
        ("pid", pid),
        ("loader_hash", loader_hash),
        ("time_ms", time_ms),
        ("counter", counter),
        ("month_start_ms", month_start_ms),
    ):
        _check_int(value, name, _INT64_MIN, _INT64_MAX)
    span = (time_ms - month_start_ms) & 0xFFFFFFFF
    if span >= 0x80000000 and span - (1 << 32) > -1000000:
        span = 0  # 5.x: a clock stepped back by less than 1000 s counts as the month start
    return (
        (
            raw
            + (pid & 0xFFFF).to_bytes(2, "big")
            + (loader_hash & 0xFFFFFFFF).to_bytes(4, "big")
            + span.to_bytes(4, "big")
            + (counter & 0xFFFF).to_bytes(2, "big")
        )
        .hex()
        .upper()
    )


def uniq_key_time(key: str, now_ms: int, month_start_fn=None) -> int:
    """getNearlyTimeFromID: the creation time a UNIQ_KEY encodes, as seen at ``now_ms``.

    ``month_start_fn(ms)`` gives the start of the month containing ``ms`` (default: local time).
    """
    raw = _unhex(key, "UNIQ_KEY")
    ip_len = len(raw) - 12
    span = int.from_bytes(raw[ip_len + 6 : ip_len + 10], "big")
    month_start = month_start_fn or _month_start
    base = month_start(now_ms)
    if base + span >= now_ms:
        base = month_start(base - 1)
    return base + span


PULL_END = 0  # no unit left
PULL_FULL = 1  # ``want`` messages taken
PULL_OUTSIDE = 2  # the unit at stop is a candidate whose record is not in this segment
PULL_DAMAGED = 3  # the unit at stop does not point at its own record
_CQ_UNIT = 20
_EXT_TAGS_CODE_MAX = -(1 << 31) - 1


def pull_units(
    buffer,
    file_from,
    file_size,
    units,
    start,
    want,
    first_queue_offset,
    topic,
    queue_id,
    codes=None,
    tags=None,
    *,
    copy_body=True,
):
    """One step of a pull (consume.get_message) over ConsumeQueue ``units`` (a one-dimensional
    CQ_UNIT_DTYPE array; unit i has queue offset ``first_queue_offset + i``), from index ``start``.

    Placeholders and units whose tagsCode is not in ``codes`` (a tuple of Java int tag hashes;
    None: every unit; extended tagsCodes always pass) are skipped. Every other unit's record is
    read from ``buffer``, the readable part of the CommitLog segment that starts at ``file_from``
    and is ``file_size`` long (``buffer`` None: no segment yet), and checked
    (a whole, CRC-valid record of this size, topic, queue id and queue offset whose PHYSICALOFFSET
    is the unit's); a message whose TAGS is not in ``tags`` (a set, or None) is skipped.

    Returns ``(messages, taken, stop, kind)``: the messages, the unit indices they came from, and
    where and why it stopped: PULL_END (stop = len(units)), PULL_FULL (``want`` taken; stop after
    the last), PULL_OUTSIDE (the unit at stop lies outside this segment or below it: the caller
    finds its segment and goes on from stop) or PULL_DAMAGED (the unit at stop is not its record).
    """
    lo = _check_int(file_from, "file_from", 0, _INT64_MAX)
    seg_size = _check_int(file_size, "file_size", 0, _INT64_MAX)
    first = _check_int(first_queue_offset, "first_queue_offset", 0, _INT64_MAX)
    left = _check_int(want, "want", 0, _INT64_MAX)
    qid = _check_int(queue_id, "queue_id", _INT32_MIN, _INT32_MAX)
    topic_b = _topic_bytes(topic, MAX_TOPIC_LENGTH_V2)
    if not isinstance(units, np.ndarray) or units.ndim != 1 or units.dtype.itemsize != _CQ_UNIT:
        raise TypeError("units must be a one-dimensional array of CQ_UNIT_DTYPE")
    if tags is not None and not isinstance(tags, (set, frozenset)):
        raise TypeError(f"tags must be a set or None, not {type(tags).__name__}")
    i = _check_int(start, "start", 0, _INT64_MAX)
    wanted = None if codes is None else {_check_int(c, "code", _INT32_MIN, _INT32_MAX) for c in codes}
    buf = None if buffer is None else _readable_view(buffer)
    raw = np.ascontiguousarray(units).view(np.uint8).tobytes()
    n = len(raw) // _CQ_UNIT
    messages: list = []
    taken: list = []
    while True:
        if i >= n:
            kind = PULL_END
            break
        if left <= 0:
            kind = PULL_FULL
            break
        offset, size, code = struct.unpack_from(">qiq", raw, i * _CQ_UNIT)
        if offset == 0 and size == _PLACEHOLDER_SIZE:
            i += 1
            continue
        if wanted is not None and code > _EXT_TAGS_CODE_MAX:
            code32 = ((code + (1 << 31)) % (1 << 32)) - (1 << 31)
            if code32 not in wanted:
                i += 1
                continue
        if offset < 0 or size <= 0:
            kind = PULL_DAMAGED
            break
        if buf is None or offset < lo or offset - lo >= seg_size:
            kind = PULL_OUTSIDE
            break
        m = _unit_message(buf, offset - lo, offset, size, first + i, topic_b, qid, tags, copy_body)
        if m is None:
            kind = PULL_DAMAGED
            break
        i += 1
        if m is False:
            continue
        messages.append(m)
        taken.append(i - 1)
        left -= 1
    return messages, taken, i, kind


# ---------------------------------------------------------------------------------------------
# Lookups in one call: a message by queue position, the messages an index lookup found


# ---- The hot state the point reads read (the twins of the compiled classes) ----
#
# Segment, queue and index management is Python's (mapped_file, consumequeue, dispatch,
# indexservice); what the one-call reads need of each managed object is a field of one of these
# classes, which the managing class extends (the compiled twins keep them in C, where the
# compiled reads read them directly).

__all__ += [
    "MappedState",
    "SegmentTable",
    "QueueState",
    "QueueTable",
    "DispatchState",
    "IndexState",
    "IndexFileState",
    "PullResult",
]


class MappedState:
    """What a read needs of one mapped file (mapped_file.MappedFile extends it): its map
    (``mm``, None once closed), where it starts (``file_from_offset``), its size and how much of
    it is written (``wrote_position``)."""

    __slots__ = ("mm", "file_from_offset", "file_size", "wrote_position")


class SegmentTable:
    """The files of a directory of equal segments, ascending, without gaps
    (mapped_file.MappedFileQueue extends it): ``files``, a list of :class:`MappedState`."""

    __slots__ = ("files",)

    def __init__(self) -> None:
        self.files: list[Any] = []


class QueueState:
    """What a read needs of one ConsumeQueue (consumequeue.ConsumeQueue extends it): its unit
    files (``_files``), the byte offset its units start at (``_min_logic``) and its ``holes``
    (a non-empty list: the careful path rebuilds them first)."""

    __slots__ = ("holes", "_min_logic", "_files")


class QueueTable:
    """The queues of a store by (topic, queue id) (consumequeue.ConsumeQueueStore and
    dispatch.TailQueueStore extend it). ``_queues`` is a read-only view: the table changes
    through :meth:`_put_queue` and :meth:`_take_queues` only (the compiled twin keeps a lookup
    cache they empty)."""

    __slots__ = ("_table", "_queues")

    def __init__(self) -> None:
        self._table: dict[Any, Any] = {}
        self._queues: Mapping[Any, Any] = MappingProxyType(self._table)

    def _put_queue(self, key: Any, queue: Any) -> None:
        """``_queues[key] = queue``."""
        self._table[key] = queue

    def _take_queues(self) -> list[Any]:
        """Empty the table; its queues, in table order."""
        queues = list(self._table.values())
        self._table.clear()
        return queues


class DispatchState:
    """What a read needs of the Dispatcher (dispatch.Dispatcher extends it) to see that nothing
    waits to be dispatched: the append core whose ``wrote_offset`` it catches up with
    (``end_core``, None: ask it), how far it dispatched (``offset``), and, for a reader that
    indexes lazily (``_index_lazily``), how far it indexed (``indexed``)."""

    __slots__ = ("end_core", "offset", "indexed", "_index_lazily")


class IndexState:
    """What a key lookup needs of an IndexService (indexservice.IndexService extends it): its
    lock, whether it is closed, its index twin module, its files (a list of
    :class:`IndexFileState`) and their geometry."""

    __slots__ = ("_lock", "_closed", "_index", "_files", "slot_count", "index_count")

    def __init__(self) -> None:
        self._files: list[Any] = []


class IndexFileState:
    """One index file's map (indexservice.MappedIndexFile extends it): ``mapped``, a
    :class:`MappedState`."""

    __slots__ = ("mapped",)


class PullResult:
    """The fields of consume.GetMessageResult (which extends it)."""

    __slots__ = (
        "status",
        "next_begin_offset",
        "min_offset",
        "max_offset",
        "messages",
        "_units",
        "_queue_offsets",
    )


def _segment_of(files, offset):
    """The file of ``files`` (a list of MappedFile of one size, ascending, without gaps) that
    holds ``offset``, or None."""
    if type(files) is not list or not files:
        return None
    head = files[0]
    first, size = head.file_from_offset, head.file_size
    if size <= 0 or offset < first:
        return None
    k = (offset - first) // size
    if k >= len(files) or files[k].file_from_offset != first + k * size:
        return None  # past the last, or not one run of equal files: the careful path
    return files[k]


def _readable(mf, core):
    """How much of segment ``mf`` holds complete records: up to ``core.wrote_offset`` (a
    writable store's append core), or its ``wrote_position`` (``core`` None: read-only)."""
    if core is None:
        return max(0, min(mf.file_size, mf.wrote_position))
    return max(0, min(mf.file_size, core.wrote_offset - mf.file_from_offset))


def _mapped(mf, readable):
    """A view of the first ``readable`` bytes of ``mf``'s map, or None once it is closed."""
    mm = mf.mm
    if mm is None:
        return None
    try:
        view = memoryview(mm)
    except ValueError:  # closed by another thread since it was read
        return None
    return view[:readable] if readable <= view.nbytes else None


def _queue_of(queues, topic, queue_id):
    """The queue (topic, queue_id) of a store's ConsumeQueueStore or TailQueueStore ``queues``,
    or None: no such queue, or one with holes (the careful path rebuilds it first)."""
    table = getattr(queues, "_queues", None)  # (a QueueTable's, of either twin)
    if not isinstance(table, Mapping):
        return None
    cq = table.get((topic, queue_id))
    return None if cq is None or cq.holes else cq


def _unit_file(cq, offset, n):
    """``(file, pos)``: the file of ConsumeQueue ``cq`` that holds the ``n`` written units from
    queue ``offset`` and where the first starts in it; None before the queue's start, or when
    they are not all written in one file (a pull that would go on in the next file is the
    careful path's)."""
    byte = offset * _CQ_UNIT
    if byte < cq.min_logic_offset:
        return None
    mf = _segment_of(cq.files, byte)
    if mf is None:
        return None
    pos = byte - mf.file_from_offset
    return None if (mf.wrote_position - pos) // _CQ_UNIT < n else (mf, pos)


def _record_view(segments, core, offset):
    """``(view, pos)``: the readable part of the segment holding CommitLog ``offset`` and where
    ``offset`` lies in it; None when no segment holds it readable, or it is closed."""
    seg = _segment_of(segments.files, offset)
    if seg is None:
        return None
    pos = offset - seg.file_from_offset
    readable = _readable(seg, core)
    if pos >= readable:
        return None
    buf = _mapped(seg, readable)
    return None if buf is None else (buf, pos)


def _queue_unit(queues, topic, queue_id, queue_offset):
    """(commitlog offset, size) of the unit at ``queue_offset`` of (topic, queue_id) in its file,
    or None (see :func:`queue_message`)."""
    cq = _queue_of(queues, topic, queue_id)
    if cq is None:
        return None
    if hasattr(cq, "_tail"):  # a read-only store's TailQueue: units on disk, then in memory
        lowest, start, cq = cq.known_min_offset, cq.tail_start, cq.disk
        if cq is None or lowest is None or start is None or not lowest <= queue_offset < start or cq.holes:
            return None  # not on disk: the careful path reads the memory tail
    found = _unit_file(cq, queue_offset, 1)
    if found is None:
        return None
    mf, pos = found
    view = _mapped(mf, pos + _CQ_UNIT)
    if view is None:
        return None
    offset, size, _code = struct.unpack_from(">qiq", view, pos)
    del view
    if offset < 0 or size <= 0 or (offset == 0 and size == _PLACEHOLDER_SIZE):
        return None
    return offset, size


def queue_message(queues, topic, queue_id, queue_offset, segments, core):
    """The message at ``queue_offset`` of (topic, queue_id), read and checked in one call: the
    unit in its ConsumeQueue file, then its record, which must be a whole, CRC-valid record of the
    unit's size, topic, queue id and queue offset whose PHYSICALOFFSET is the unit's (the checks
    of QueueGuard.unit_message).

    ``queues`` is the store's ConsumeQueueStore (a read-only store's TailQueueStore: the units on
    disk only), ``segments`` the CommitLog's MappedFileQueue and ``core`` its append core (what is
    readable; None: a read-only store, see :func:`_readable`). None whenever the careful
    path must decide: no such queue or unit, a queue with holes, a placeholder, a unit that does
    not point at its record, a segment gone or closed. That path then raises, repairs or reads,
    as it always did; this one never raises for a store's state.
    """
    if type(topic) is not str or type(queue_id) is not int or type(queue_offset) is not int:
        return None
    if not (0 <= queue_offset <= _INT64_MAX // _CQ_UNIT and _INT32_MIN <= queue_id <= _INT32_MAX):
        return None
    unit = _queue_unit(queues, topic, queue_id, queue_offset)
    if unit is None:
        return None
    offset, size = unit
    at = _record_view(segments, core, offset)
    if at is None:
        return None
    buf, pos = at
    try:
        topic_b = _topic_bytes(topic, MAX_TOPIC_LENGTH_V2)
    except InvalidTopicError:
        return None
    m = _unit_message(buf, pos, offset, size, queue_offset, topic_b, queue_id, None, True)
    return None if m is False else m


def _queue_run(queues, topic, queue_id, offset, max_msgs):
    """``(units, min_offset, max_offset)`` for :func:`queue_messages`: the run of up to
    ``max_msgs`` units from ``offset`` in one ConsumeQueue file (or a read-only store's memory
    tail) as bytes, or None when the careful path must decide."""
    cq = _queue_of(queues, topic, queue_id)
    if cq is None:
        return None
    lo, hi = cq.min_offset, cq.max_offset
    if not lo <= offset < hi:
        return None  # a bound status: the careful path says which
    n = min(max_msgs, hi - offset)
    if hasattr(cq, "_tail"):  # a read-only store's TailQueue: units on disk, then in memory
        start, tail = cq.tail_start, cq.tail
        if start is None:
            return None
        if offset >= start:
            at = (offset - start) * _CQ_UNIT
            return bytes(memoryview(tail).cast("B")[at : at + n * _CQ_UNIT]), lo, hi
        cq = cq.disk
        if cq is None or cq.holes or offset + n > start:
            return None  # no disk queue, or a pull from disk into memory: the careful path
    found = _unit_file(cq, offset, n)
    if found is None:
        return None
    mf, pos = found
    view = _mapped(mf, pos + n * _CQ_UNIT)
    if view is None:
        return None
    return bytes(view[pos:]), lo, hi


def queue_messages(queues, topic, queue_id, offset, max_msgs, segments, core):
    """A pull of every message from ``offset`` of (topic, queue_id), up to ``max_msgs``, in one
    call: ``(messages, units, min_offset, max_offset)``, with ``units`` the units read (bytes, in
    ConsumeQueue layout). Every unit is checked as :func:`queue_message` checks one. None
    whenever the careful path (``consume.get_message``) must decide: no such queue, an offset
    outside it, holes, a placeholder, a unit that does not point at its record, a pull that
    goes on into the next ConsumeQueue file, a segment gone or closed; it never raises for a
    store's state. ``queues``, ``segments`` and ``core`` as for :func:`queue_message`."""
    if (
        type(topic) is not str
        or type(queue_id) is not int
        or type(offset) is not int
        or type(max_msgs) is not int
    ):
        return None
    if not (
        0 <= offset <= _INT64_MAX // _CQ_UNIT
        and _INT32_MIN <= queue_id <= _INT32_MAX
        and 0 < max_msgs <= _INT64_MAX
    ):
        return None
    run = _queue_run(queues, topic, queue_id, offset, max_msgs)
    if run is None:
        return None
    units, lo, hi = run
    try:
        topic_b = _topic_bytes(topic, MAX_TOPIC_LENGTH_V2)
    except InvalidTopicError:
        return None
    messages = []
    seg = buf = None
    for i in range(len(units) // _CQ_UNIT):
        at, size, _code = struct.unpack_from(">qiq", units, i * _CQ_UNIT)
        if at < 0 or size <= 0 or (at == 0 and size == _PLACEHOLDER_SIZE):
            return None
        if seg is None or not seg.file_from_offset <= at < seg.file_from_offset + seg.file_size:
            seg = _segment_of(segments.files, at)
            if seg is None:
                return None
            buf = _mapped(seg, _readable(seg, core))
            if buf is None:
                return None
        m = _unit_message(buf, at - seg.file_from_offset, at, size, offset + i, topic_b, queue_id, None, True)
        if not m:
            return None
        messages.append(m)
    return messages, units, lo, hi


def record_at(segments, core, offset):
    """The message of the whole, CRC-valid record starting at CommitLog ``offset`` (its
    PHYSICALOFFSET saying so), read in one call; ``segments`` and ``core`` as for
    :func:`queue_message`. None whenever the careful path (``CommitLog.read``) must decide: not
    an int, no such record, a segment gone or closed. It never raises for a store's state."""
    if type(offset) is not int or not 0 <= offset <= _INT64_MAX:
        return None
    at = _record_view(segments, core, offset)
    if at is None:
        return None
    buf, pos = at
    reason, row = _parse(buf, pos, buf.nbytes, True)
    if reason is not None or row[7] != offset:
        return None
    return _message(buf, row, True)


def message_by_id(segments, core, msg_id):
    """The message whose offsetMsgId (§3.1) is ``msg_id``, read in one call: the record at the
    offset the id names, whose own id (store host, port and offset) must be ``msg_id``. None
    whenever the careful path (``MessageStore.get_by_msg_id``) must decide: a malformed id, no
    such record, another host's id."""
    if type(msg_id) is not str or len(msg_id) not in (32, 56):
        return None
    tail = msg_id[-16:]
    if not all(c in _HEX_DIGITS for c in tail):
        return None
    m = record_at(segments, core, int(tail, 16))
    if m is None or m.msg_id != msg_id.upper():
        return None
    return m


def key_messages(offsets, segments, core, topic, key, begin, end, limit, unique):
    """The messages at the CommitLog ``offsets`` (an index lookup's candidates, ascending; one
    offset listed twice is read once) that
    are whole, CRC-valid records of ``topic`` stored within ``[begin, end]`` (ms) whose UNIQ_KEY
    is ``key`` (``unique``) or whose UNIQ_KEY or one of whose KEYS is ``key``; at most ``limit``.

    ``segments`` is the CommitLog's MappedFileQueue and ``core`` its append core (None: a
    read-only store, whose segments are readable up to their ``wrote_position``). An offset
    that holds no such record (retention deleted it, recovery cut it, a hash collision) is
    skipped. None when a segment is closed under the lookup: the caller reads one by one.
    """
    if type(topic) is not str or type(key) is not str:
        raise TypeError("topic and key must be str")
    begin = _check_int(begin, "begin", _INT64_MIN, _INT64_MAX)
    end = _check_int(end, "end", _INT64_MIN, _INT64_MAX)
    limit = _check_int(limit, "limit", 0, _INT64_MAX)
    files = segments.files
    found: list = []
    previous = None
    for offset in offsets:
        if len(found) >= limit:
            break
        offset = _check_int(offset, "offset", _INT64_MIN, _INT64_MAX)
        if offset == previous:
            continue  # indexed twice under this key (a KEYS entry and the UNIQ_KEY): read once
        previous = offset
        seg = _segment_of(files, offset)
        if seg is None:
            continue
        pos = offset - seg.file_from_offset
        readable = _readable(seg, core)
        if pos >= readable:
            continue
        buf = _mapped(seg, readable)
        if buf is None:
            return None
        reason, row = _parse(buf, pos, readable, True)
        if reason is not None or row[7] != offset:  # a record moved here names another place
            continue
        m = _message(buf, row, True)
        if m.topic != topic or not begin <= m.store_timestamp <= end:
            continue
        if m.unique_key == key or (not unique and m.keys is not None and key in m.keys.split(" ")):
            found.append(m)
    return found


def key_lookup(services, segments, core, topic, key, max_num, begin, end, cap, dispatcher=None):
    """``MessageStore.query_by_key`` in one call: ``dispatcher.catch_up(index=True)`` first (a
    Dispatcher, or None: none), unless its ``end_core`` shows nothing waits; then the walk of each index service's files under its
    lock (``services``, a tuple; None entries are skipped; each its index twin's ``select_files``,
    for at most ``max(max_num, cap)`` candidates stored within ``[begin - 1 s, end + 1 s]``: the
    index keeps whole seconds), then :func:`key_messages` of them all, ascending, at most ``max_num``.

    None whenever the careful path must decide: an argument it checks (``topic`` or ``key`` not a
    non-empty str, ``max_num`` not an int in ``[1, 2**63 - 1]``, ``begin`` or ``end`` not one in
    ``[0, 2**63 - 1]``; ``end`` None is the largest), a closed service or segment.
    """
    if type(topic) is not str or type(key) is not str or not topic or not key or type(services) is not tuple:
        return None
    if end is None:
        end = _INT64_MAX
    if type(max_num) is not int or type(begin) is not int or type(end) is not int or type(cap) is not int:
        return None
    if (
        not 1 <= max_num <= _INT64_MAX
        or not 0 <= begin <= _INT64_MAX
        or not 0 <= end <= _INT64_MAX
        or not 0 <= cap <= _INT64_MAX
    ):
        return None
    _index_catch_up(dispatcher)
    walk = max(max_num, cap)
    offsets = _index_walk(services, topic, key, walk, max(0, begin - 1000), min(_INT64_MAX, end + 1000))
    if offsets is None:
        return None
    return key_messages(offsets, segments, core, topic, key, begin, end, max_num, False)


def _index_catch_up(dispatcher) -> None:
    """``dispatcher.catch_up(index=True)`` (a Dispatcher, or None: none), unless its
    ``end_core`` shows nothing waits."""
    if dispatcher is not None:
        end_core = dispatcher.end_core
        offset = dispatcher.offset
        if (
            end_core is None
            or offset < end_core.wrote_offset
            or (dispatcher.index_lazily and dispatcher.indexed < offset)
        ):
            dispatcher.catch_up(index=True)


def _index_walk(services, topic, key, cap, lo, hi) -> Optional[list[int]]:
    """The candidates each index service of ``services`` (a tuple; None entries skipped) holds
    under ``topic#key`` stored within ``[lo, hi]`` (ms), at most ``cap`` a service, walked under
    its lock, ascending; None: a closed service."""
    offsets: list[int] = []
    for service in services:
        if service is None:
            continue
        found = service.walk_key(topic + "#" + key, cap, lo, hi)
        if found is None:
            return None
        offsets += found
    if len(services) > 1:
        offsets.sort()
    return offsets


def unique_lookup(services, segments, core, topic, key, cap, dispatcher, now):
    """``MessageStore.query_by_unique_key`` in one call: the catch-up of :func:`key_lookup`, then
    the index walk (:func:`key_lookup`'s, for ``cap`` candidates) from the creation time the id
    encodes at ``now`` (:func:`uniq_key_time`, less a second), and over all time when that
    finds nothing; each hit's topic and UNIQ_KEY re-checked (:func:`key_messages`); the first
    stored of the hits. None when the careful path must decide: ``topic`` or ``key`` not a
    non-empty str, a closed service or segment, and nothing found (it says so)."""
    if type(topic) is not str or type(key) is not str or not topic or not key or type(services) is not tuple:
        return None
    if type(cap) is not int or not 0 <= cap <= _INT64_MAX:
        return None
    _index_catch_up(dispatcher)
    begins = [0]
    try:
        begins.insert(0, max(0, uniq_key_time(key, now) - 1000))
    except (InvalidMessageIdError, ValueError):
        pass  # not a RocketMQ-made id: no time hint
    for begin in begins:
        offsets = _index_walk(services, topic, key, cap, begin, _INT64_MAX)
        if offsets is None:
            return None
        hits = key_messages(offsets, segments, core, topic, key, _INT64_MIN, _INT64_MAX, len(offsets), True)
        if hits is None:
            return None
        if hits:
            return min(hits, key=operator.attrgetter("store_timestamp"))
    return None


# ---------------------------------------------------------------------------------------------
# Timer messages (rocketstore.services.timer): the put's properties, the units' deliver times, the copies

__all__ += ["timer_properties", "timer_units", "timer_copies", "timer_copy_rows"]

_TIMER_DIGITS = re.compile(r"[0-9]{1,18}")


class FastReads:
    """An open store's point reads, each in one call of this module (the twin of the compiled
    FastReads): rocketstore.store puts these bound methods over the class's ``read``,
    ``get_by_msg_id``, ``get_by_queue_offset``, ``query_by_key``, ``query_by_unique_key`` and
    ``get_message`` (a pull from a given offset, no tags, no wait) while the store is open and
    follows no other process, and an owning store's ``commit_offset`` over the class's (given
    ``offsets``, its ConsumerOffsetTable). What a fast call cannot answer (None), a keyword it does not
    take, or a closed store runs the class's method (the careful path). ``follower``: a read-only
    store's :class:`~rocketstore.processes.live.Follower`, whose ``follow()`` each call runs first (False:
    the class's method, which opens the store again)."""

    def __init__(
        self,
        store_ref,
        cls,
        queues,
        segments,
        core,
        services,
        dispatcher,
        cap,
        follower=None,
        *,
        result_type,
        offsets=None,
    ):
        self._result_type = result_type  # what get_message returns: consume.GetMessageResult
        #: an owning store's ConsumerOffsetTable, which commit_offset commits to (None: the
        #: class's method, which says why not)
        self._offsets = offsets
        self._follower = follower
        self._store = store_ref  # weak: the store's dict holds these methods
        self._cls = cls
        self._queues = queues
        self._segments = segments
        self._core = core
        self._services = services
        self._dispatcher = dispatcher
        self._cap = cap
        self.open = True
        #: calls answered here, and calls handed to the class's method
        self.fast_calls = 0
        self.careful_calls = 0

    def _current(self) -> bool:
        """True unless this store follows a writer that opened the store since (the class's
        method opens it again): a following store's ``follow()``, run first as its methods do."""
        return self._follower is None or self._follower.follow() is True

    def _owner(self):
        store = self._store()
        if store is None:
            raise StoreClosedError("the store is closed")
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
            hits = key_lookup(
                self._services,
                self._segments,
                self._core,
                topic,
                key,
                max_num,
                begin,
                end,
                self._cap,
                self._dispatcher,
            )
            if hits is not None:
                self.fast_calls += 1
                return hits
        self.careful_calls += 1
        return self._cls.query_by_key(self._owner(), topic, key, max_num, begin, end)

    def commit_offset(self, group, topic, queue_id, offset):
        """Record ``offset`` as ``group``'s next offset to consume in (topic, queue_id); see
        :meth:`rocketstore.MessageStore.commit_offset`. Names the class's method takes as they
        are (a non-empty str without '@'), a queue id in 0 .. 2**31-1 and an offset in
        0 .. 2**63-1, all plain ints, go to the table's ``commit_key`` (the compiled twin sets
        a queue the table has, moving forward, itself, under the table's lock); anything else
        is the class's method's, with its errors."""
        if (
            self.open
            and self._offsets is not None
            and type(group) is str
            and type(topic) is str
            and group
            and topic
            and "@" not in group
            and "@" not in topic
            and type(queue_id) is int
            and 0 <= queue_id <= _INT32_MAX
            and type(offset) is int
            and 0 <= offset <= _INT64_MAX
        ):
            self.fast_calls += 1
            self._offsets.commit_key(self._offsets.key(topic, group), queue_id, offset)
            return None
        self.careful_calls += 1
        return self._cls.commit_offset(self._owner(), group, topic, queue_id, offset)

    def get_message(self, group, topic, queue_id, offset=None, max_msgs=32, tags=None, *, wait=None):
        """Pull messages of one queue; see :meth:`rocketstore.MessageStore.get_message`."""
        if (
            self.open
            and wait is None
            and offset is not None
            and tags is None
            and type(group) is str
            and group
            and self._current()
        ):
            self._dispatcher.catch_up()  # as the class's quick pull does first
            got = queue_messages(self._queues, topic, queue_id, offset, max_msgs, self._segments, self._core)
            if got is not None:
                messages, units, lo, hi = got
                self.fast_calls += 1
                return self._result_type(
                    GetMessageStatus.FOUND, offset + len(messages), lo, hi, messages, units, offset
                )
        self.careful_calls += 1
        return self._cls.get_message(self._owner(), group, topic, queue_id, offset, max_msgs, tags, wait=wait)

    def query_by_unique_key(self, topic, unique_key):
        """A message by its UNIQ_KEY; see :meth:`rocketstore.MessageStore.query_by_unique_key`."""
        if self.open and self._current():
            msg = unique_lookup(
                self._services,
                self._segments,
                self._core,
                topic,
                unique_key,
                self._cap,
                self._dispatcher,
                now_ms(),
            )
            if msg is not None:
                self.fast_calls += 1
                return msg
        self.careful_calls += 1
        return self._cls.query_by_unique_key(self._owner(), topic, unique_key)


def timer_properties(name, value, deliver, topic, queue_id) -> bytes:
    """The encoded properties of a timer put with no other properties (rocketstore.services.timer):
    the timer property, TIMER_OUT_MS, REAL_TOPIC and REAL_QID, in that order."""
    return encode_properties(
        {name: str(value), "TIMER_OUT_MS": str(deliver), "REAL_TOPIC": topic, "REAL_QID": str(queue_id)}
    )


#: timer_units' ``facts`` per unit: deliver ms, offsetPy (longs), sizePy, the hash of REAL_TOPIC,
#: the magic (ints), big-endian
_TIMER_FACT = struct.Struct(">qqiii")


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed int."""
    h = 0
    for (unit,) in struct.iter_unpack(">H", text.encode("utf-16-be", "surrogatepass")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def timer_units(units, first_queue_offset, segments, core, facts=None) -> tuple[list, list]:
    """``(deliver ms, queue offset, CommitLog offset)`` of the timer queue's ``units`` (a
    CQ_UNIT_DTYPE array whose first unit has queue offset ``first_queue_offset``; placeholders
    left out), and the indices of those whose deliver ms is None.

    The deliver ms is the record's TIMER_OUT_MS (0 when it has none) when the record is read
    here: the segment holding it is found by arithmetic (see :func:`queue_message`) and the
    record is whole and CRC-valid, and the value is 1 .. 18 ASCII digits. Else it is None, and
    the caller's careful path reads the record (the timer service's ``commitlog.read``).

    ``facts`` (a bytearray, or None) gains per unit what RocketMQ 5.x's timer log unit holds of
    it (``_TIMER_FACT``): the deliver ms (0 for a careful one), its CommitLog offset and size,
    Java's hashCode of its REAL_TOPIC (0 when it has none) and the magic (1, or 5 when it names
    TIMER_DEL_UNIQKEY: a recall). A unit whose REAL_TOPIC is not ASCII is careful too: the
    caller's careful path fills in its facts."""
    first = _check_int(first_queue_offset, "first_queue_offset", 0, _INT64_MAX)
    if not isinstance(units, np.ndarray) or units.ndim != 1 or units.dtype.itemsize != _CQ_UNIT:
        raise TypeError("units must be a one-dimensional array of CQ_UNIT_DTYPE")
    if facts is not None and type(facts) is not bytearray:
        raise TypeError("facts must be a bytearray or None")
    raw = np.ascontiguousarray(units).tobytes()
    out: list = []
    careful: list = []
    files = segments.files
    for i in range(len(raw) // _CQ_UNIT):
        offset, size, _code = struct.unpack_from(">qiq", raw, i * _CQ_UNIT)
        if offset == 0 and size == _PLACEHOLDER_SIZE:
            continue
        deliver = None
        topic_hash, magic = 0, -1
        props = _timer_record_properties(files, core, offset)
        if props is not None:
            text = props.get("TIMER_OUT_MS")
            if text is None:
                deliver = 0
            elif _TIMER_DIGITS.fullmatch(text):
                deliver = int(text)
            topic = props.get("REAL_TOPIC")
            if topic is None or topic.isascii():
                topic_hash = java_string_hash(topic) if topic is not None else 0
                magic = 5 if "TIMER_DEL_UNIQKEY" in props else 1
        if deliver is None or (facts is not None and magic < 0):
            careful.append(len(out))
        if facts is not None:
            facts += _TIMER_FACT.pack(deliver or 0, offset, size, topic_hash, max(magic, 1))
        out.append((deliver, first + i, offset))
    return out, careful


def _timer_record_properties(files, core, offset) -> Optional[dict]:
    """The properties of the whole, CRC-valid record at ``offset``, or None (see timer_units)."""
    seg = _segment_of(files, offset) if offset >= 0 else None
    if seg is None:
        return None
    readable = _readable(seg, core)
    pos = offset - seg.file_from_offset
    view = _mapped(seg, readable) if pos < readable else None
    if view is None:
        return None
    try:
        return decode_record(view, pos).properties
    except CorruptRecordError:
        return None


def timer_copies(
    offsets, segments, core, dequeue_ms, real_topic, orders, order_of, room
) -> tuple[list, list]:
    """The ``put_many`` items of the copies a timer pass puts for the records at ``offsets``, with
    None where the caller's careful path (the timer service's ``_copy``) decides, and the indices
    of those None. The compiled
    twin builds the copy of a record of the usual shape (REAL_TOPIC, REAL_QID and TIMER_OUT_MS
    in plain digits, each property once, every piece one decode_properties keeps, nothing that
    would not encode, REAL_TOPIC a topic by ``real_topic(raw)`` and REAL_QID one of its queues,
    a copy within ``room``'s longest record); this twin leaves every record to the careful path,
    which gives the same copies."""
    _check_int(dequeue_ms, "dequeue_ms", _INT64_MIN, _INT64_MAX)
    if type(orders) is not dict:
        raise TypeError("orders must be a dict")
    out: list = []
    for offset in offsets:
        _check_int(offset, "offset", _INT64_MIN, _INT64_MAX)
        out.append(None)
    return out, list(range(len(out)))


def timer_copy_rows(
    offsets, segments, core, dequeue_ms, real_topic, orders, order_of, room, out
) -> tuple[int, list, list]:
    """:func:`timer_copies` as rows for the append core's ``put_copies``, written into the
    bytearray ``out`` from its start (grown as needed, never shrunk: its size is room, not
    rows): ``(the length of the rows, topics, careful)``. One row per offset, each a 40-byte head of little-endian fields (topic, an index
    into ``topics``; queue id; flag; sysFlag; reconsume times; body length; properties length;
    1 when the properties hold the UNIQ_KEY, else 0, all int32; born timestamp, int64), then
    the body and the encoded properties; the row of an index in ``careful`` is a head alone with
    topic -1 (the careful path's copy goes there). The compiled twin builds the rows of the
    records timer_copies builds; this twin, like its timer_copies, leaves every record to the
    careful path."""
    if type(out) is not bytearray:
        raise TypeError("out must be a bytearray")
    _none, careful = timer_copies(offsets, segments, core, dequeue_ms, real_topic, orders, order_of, room)
    rows = _CAREFUL_ROW * len(careful)
    if len(out) < len(rows):
        out.extend(bytes(len(rows) - len(out)))
    out[: len(rows)] = rows
    return len(rows), [], careful


_CAREFUL_ROW = struct.pack("<iiiiiiiiq", -1, 0, 0, 0, 0, 0, 0, 0, 0)

# ---- acknowledgement per message (POP): one ack in one call (rocketstore.services.pop) ----

__all__ += [
    "PopLane",
    "PopAcker",
    "POP_SNAPSHOT_CHECK_EVERY",
    "receipt_handles",
    "checkpoint_run",
    "reconsume_times",
    "received_rows",
]


def receipt_handles(prefix: str, offsets: list[int], numbers: tuple[int, ...]) -> list[str]:
    """The receipt handles ``"<prefix> <offset> <delivery number>"`` of one lane's messages
    (rocketstore.services.pop.Received.handles)."""
    if len(numbers) != len(offsets):
        raise ValueError("offsets and numbers differ in length")
    return [f"{prefix} {o} {n}" for o, n in zip(offsets, numbers)]


class PopLane:
    """The POP state of one (group, topic, queue id) (rocketstore.services.pop): every queue offset below
    ``next`` is acknowledged unless it is in ``inflight`` ({offset: (visible again at, delivery
    number)}); ``committed`` is the lowest offset not acknowledged; ``heap`` holds (deadline,
    sequence, offsets, delivery numbers) of the checkpoints, stale entries included (checked on
    use). ``key`` is the group's key in consumerOffset.json (``topic@group``)."""

    __slots__ = (
        "group",
        "topic",
        "queue_id",
        "prefix",
        "key",
        "committed",
        "next",
        "inflight",
        "heap",
        "ack_head",
        "ack_tail",
    )

    def __init__(self, group: str, topic: str, queue_id: int, start: int, key: str) -> None:
        self.group = group
        self.topic = topic
        self.queue_id = queue_id
        self.prefix = f"{group} {topic} {queue_id}"  # of its receipt handles
        self.key = key
        self.committed = start
        self.next = start
        self.inflight: dict[int, tuple[int, int]] = {}
        self.heap: list[tuple[int, int, tuple[int, ...], tuple[int, ...]]] = []
        # the acknowledgement of one offset o is ack_head + str(o) + ack_tail (PopAcker): the
        # record rocketstore.services.pop._ACK_RANGE_JSON makes with n 1 (tests/test_pop_ack.py)
        self.ack_head = ('{"c":"%s","n":1,"q":%d,"so":' % (group, queue_id)).encode()
        self.ack_tail = (',"t":"%s"}' % topic).encode()

    def compact(self) -> None:
        """Drop the heap's entries (and entries' offsets) no longer in flight under them:
        acknowledged messages would otherwise stay referenced until their deadline. Called when
        the heap holds more than twice as many entries as there are messages in flight, so
        its cost is spread over the receives that grew it."""
        inflight = self.inflight
        if not inflight:
            self.heap = []  # nothing in flight: no entry keeps anything
            return
        live = []
        for entry in self.heap:
            deadline, seq, offsets, numbers = entry
            keep = [(o, n) for o, n in zip(offsets, numbers) if inflight.get(o) == (deadline, n)]
            if len(keep) == len(offsets):
                live.append(entry)
            elif keep:
                live.append((deadline, seq, tuple(o for o, _n in keep), tuple(n for _o, n in keep)))
        heapq.heapify(live)
        self.heap = live

    def take_run(
        self, want: int, deadline: int, seq: int
    ) -> tuple[list[int], tuple[int, ...], tuple[int, int]]:
        """Hand out the ``want`` offsets from ``next`` on, each first delivered (number 0) until
        ``deadline``: each is put in flight under one ``(deadline, 0)`` stamp, one heap entry
        ``(deadline, seq, offsets, numbers)`` is pushed, and ``next`` moves past them (what
        rocketstore.services.pop's ``_apply_ck`` does for such a checkpoint). Returns (offsets, numbers,
        stamp); ``committed`` is left to the caller (:meth:`advance`)."""
        if want <= 0:
            raise ValueError("a run hands out at least one offset")
        start = self.next
        stamp = (deadline, 0)
        offsets = list(range(start, start + want))
        numbers = (0,) * want
        self.inflight.update(dict.fromkeys(offsets, stamp))
        self.next = start + want
        heapq.heappush(self.heap, (deadline, seq, tuple(offsets), numbers))
        return offsets, numbers, stamp

    def advance(self) -> bool:
        """Move ``committed`` up to the lowest un-acked offset; True if it moved."""
        before = self.committed
        if not self.inflight:
            self.committed = self.next
        else:
            inflight = self.inflight
            c = self.committed
            while c < self.next and c not in inflight:
                c += 1
            self.committed = c
        return self.committed != before


#: The compiled acker looks whether the periodic POP snapshot is due (its ``periodic``) once
#: every this many acks it does itself (a snapshot is written at most every
#: ``pop_snapshot_interval_ms``; checking the clock per ack would cost as much as the rest of the
#: ack's bookkeeping).
POP_SNAPSHOT_CHECK_EVERY = 64


class PopAcker:
    """``PopService.ack``: ``PopAcker(service, received_type, careful, periodic, lock, offsets,
    commitlog).ack(handle)``
    is ``careful(service, handle)`` (``PopService.ack_handle``: the one ack, every case, written
    once in rocketstore.services.pop, which looks at the periodic snapshot itself), while the service
    lives and until ``closed`` is set (then StoreClosedError). The compiled twin does the common
    case itself, with no Python frame, calling ``periodic(service)`` (the snapshot check) once
    every ``POP_SNAPSHOT_CHECK_EVERY`` of those, and hands this one everything else. It holds
    the service weakly (the service holds it)."""

    __slots__ = ("_service_ref", "_careful", "closed")

    def __init__(
        self,
        service: Any,
        received_type: Any,
        careful: Any,
        periodic: Any,
        lock: Any = None,
        offsets: Any = None,
        commitlog: Any = None,
    ) -> None:
        # (``lock``, ``offsets`` and ``commitlog``: the service's, which the compiled twin's
        # common case takes; this one hands every ack to ``careful``)
        self._service_ref = weakref.ref(service)
        self._careful = careful
        # set by the service's close: from then on every ack raises StoreClosedError (a caller
        # may still hold this bound method, installed as the store's ``ack``)
        self.closed = False

    def ack(self, handle: Any) -> bool:
        """Acknowledge one received message; see :meth:`rocketstore.MessageStore.ack`."""
        service = self._service_ref()
        if service is None or self.closed:
            raise StoreClosedError("the store is closed")
        return bool(self._careful(service, handle))


#: The record :func:`checkpoint_run` makes (rocketstore.services.pop's ``_dumps`` of that checkpoint).
_CK_RUN_JSON = '{"b":%d,"c":"%s","it":%d,"n":%d,"nx":%d,"pt":%d,"q":%d,"so":%d,"t":"%s"}'


def checkpoint_run(
    committed: int,
    group: str,
    invisible: int,
    count: int,
    nxt: int,
    now: int,
    queue_id: int,
    start: int,
    topic: str,
) -> bytes:
    """The ``ck`` record of a receive's common run (rocketstore.services.pop): ``count`` offsets from
    ``start``, every delivery number 0, handed out at ``now`` for ``invisible`` ms, the lane's
    lowest un-acked offset ``committed`` and next offset ``nxt`` after it; the bytes
    rocketstore.services.pop's general encoder writes for that checkpoint (tests/test_pop_ack.py)."""
    return (_CK_RUN_JSON % (committed, group, invisible, count, nxt, now, queue_id, start, topic)).encode()


def reconsume_times(messages: list[Any]) -> list[int]:
    """Each message's ``reconsume_times`` (a receive's, rocketstore.services.pop.PopService.receive_run);
    TypeError, before anything is read, if one is not a MessageExt."""
    for m in messages:
        if not isinstance(m, MessageExt):
            raise TypeError(f"the quick pull gave a {type(m).__name__}, not a MessageExt")
    return [m.reconsume_times for m in messages]


def received_rows(cls: type, messages: list[Any], handles: list[str], times: list[int]) -> list[Any]:
    """The rows ``cls(message, handle, reconsume times)`` of one receive
    (rocketstore.services.pop.Received's iteration), each made by ``tuple.__new__`` straight (a
    NamedTuple's own ``__new__`` is a Python frame per row). ``cls``: a tuple subclass with
    ``__slots__ = ()`` (TypeError otherwise); ValueError if the lists differ in length."""
    if not len(handles) == len(times) == len(messages):
        raise ValueError("messages, handles and times differ in length")
    if cls.__base__ is not tuple or cls.__dict__.get("__slots__", None) != ():
        raise TypeError(f"{cls.__name__} is not a namedtuple-like subclass of tuple")
    return list(map(tuple.__new__, repeat(cls), zip(messages, handles, times)))


def FastRLock() -> Any:
    """The POP service's and the offsets table's reentrant lock: ``threading.RLock`` here (the
    compiled twin is a pthread mutex that skips RLock's argument parsing and clock read)."""
    return threading.RLock()
