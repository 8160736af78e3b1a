"""Message types shared by both twins.

:class:`Message` is what a producer hands to ``put``; :class:`MessageExt` is a record as stored
in the CommitLog (what decoding returns). Hosts are ``(ip_text, port)`` tuples; ``ip_text`` is
dotted IPv4 or compressed IPv6, as :func:`socket.inet_ntop` renders it.
"""

from __future__ import annotations

import re
import socket
from abc import ABCMeta
from collections.abc import Mapping
from typing import Any, Optional, Union

from rocketstore.base.compression import COMPRESSED_FLAG, inflate
from rocketstore.errors import InvalidMessageError, InvalidTopicError, SystemTopicError

__all__ = [
    "Message",
    "MessageExt",
    "MESSAGE_FIELDS",
    "host_to_bytes",
    "host_from_bytes",
    "validate_topic",
    "is_valid_topic",
    "is_stored_topic",
    "validate_stored_topic",
    "is_system_topic",
    "check_user_topic",
    "MAX_TOPIC_LENGTH",
    "MAX_RETRY_TOPIC_LENGTH",
    "PROPERTY_KEYS",
    "PROPERTY_TAGS",
    "PROPERTY_UNIQ_KEY",
    "PROPERTY_WAIT",
    "PROPERTY_DELAY",
    "PROPERTY_TIMER_DELIVER_MS",
    "PROPERTY_TIMER_DELAY_SEC",
    "PROPERTY_TIMER_DELAY_MS",
    "SPECIAL_PROPERTIES",
    "SYSFLAG_HOSTS_V6",
]

#: sysFlag's BORNHOST_V6 | STOREHOST_V6 bits: a copy of a record (a delayed message delivered, a
#: committed transaction, a timer's) leaves them out, as the append core sets its own hosts'.
SYSFLAG_HOSTS_V6 = 0x010 | 0x020

PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_WAIT = "WAIT"
PROPERTY_DELAY = "DELAY"
#: The properties that make a put a timer message (MessageConst; rocketstore.services.timer).
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
#: Property names a put gives a meaning: a delay or a timer, ``WAIT``, the caller's own
#: ``UNIQ_KEY``, and ``TAGS`` and ``KEYS`` (which ``tags=`` and ``keys=`` replace where they stand).
#: A properties dict holding one takes the general path (both twins' ``keyed_properties``).
SPECIAL_PROPERTIES = frozenset(
    (
        PROPERTY_DELAY,
        PROPERTY_TIMER_DELIVER_MS,
        PROPERTY_TIMER_DELAY_SEC,
        PROPERTY_TIMER_DELAY_MS,
        PROPERTY_WAIT,
        PROPERTY_UNIQ_KEY,
        PROPERTY_TAGS,
        PROPERTY_KEYS,
    )
)


#: RocketMQ's topic rule (TopicValidator): 1..127 characters of ``[%|a-zA-Z0-9_-]``.
MAX_TOPIC_LENGTH = 127
_TOPIC_CHARS = re.compile(r"[%|a-zA-Z0-9_-]+")


def is_valid_topic(topic: object) -> bool:
    return (
        isinstance(topic, str)
        and 0 < len(topic) <= MAX_TOPIC_LENGTH
        and _TOPIC_CHARS.fullmatch(topic) is not None
    )


#: A RocketMQ 5.x broker takes a ``%RETRY%`` topic (a consumer group's) up to 255 bytes, the
#: length a directory name may have (HookUtils.checkBeforePutMessage): a V2 record (2-byte topic
#: length) holds it, and its ConsumeQueue lives under ``consumequeue/<topic>/`` like any other.
MAX_RETRY_TOPIC_LENGTH = 255
_RETRY_PREFIX = "%RETRY%"


def is_stored_topic(topic: object) -> bool:
    """Whether a store may hold ``topic``'s queue: a valid topic, or a ``%RETRY%`` topic of at
    most :data:`MAX_RETRY_TOPIC_LENGTH` characters of the same set (RocketMQ 5.x)."""
    if is_valid_topic(topic):
        return True
    return (
        isinstance(topic, str)
        and topic.startswith(_RETRY_PREFIX)
        and len(topic.encode("utf-8")) <= MAX_RETRY_TOPIC_LENGTH
        and _TOPIC_CHARS.fullmatch(topic) is not None
    )


def validate_stored_topic(topic: object) -> str:
    """``topic`` if a store may hold its queue (:func:`is_stored_topic`), else InvalidTopicError."""
    if isinstance(topic, str) and topic.startswith(_RETRY_PREFIX) and is_stored_topic(topic):
        return topic
    return validate_topic(topic)


def validate_topic(topic: object) -> str:
    """``topic`` if it follows RocketMQ's topic rule, else InvalidTopicError saying why."""
    if not isinstance(topic, str):
        raise InvalidTopicError(f"topic must be a str, not {type(topic).__name__}")
    if not topic:
        raise InvalidTopicError("topic is empty")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidTopicError(f"topic is {len(topic)} characters; the limit is {MAX_TOPIC_LENGTH}")
    if _TOPIC_CHARS.fullmatch(topic) is None:
        raise InvalidTopicError(f"topic {topic!r} has characters outside [%|a-zA-Z0-9_-]")
    return topic


#: Topics only the broker writes to (TopicValidator's not-allowed-send set and system prefixes,
#: MixAll's retry and dead-letter prefixes); rocketstore's own puts reach them internally.
SYSTEM_TOPICS = frozenset(
    {"SCHEDULE_TOPIC_XXXX", "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC"}
)
SYSTEM_TOPIC_PREFIXES = ("RMQ_SYS_", "rmq_sys_", "%RETRY%", "%DLQ%")


def is_system_topic(topic: object) -> bool:
    """Whether ``topic`` is one of RocketMQ's system topics (a user may read, not put to it)."""
    return isinstance(topic, str) and (topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIXES))


def check_user_topic(topic: object) -> None:
    """Raise SystemTopicError if a user's put names a system topic (other checks: the core's)."""
    if is_system_topic(topic):
        raise SystemTopicError(
            f"topic {topic!r} is a RocketMQ system topic: only the store writes to it "
            "(delay_level, send_back); reading it is allowed"
        )


def host_to_bytes(ip: str) -> bytes:
    """4 address bytes for IPv4 text, 16 for IPv6 text (raises ValueError otherwise)."""
    try:
        return socket.inet_pton(socket.AF_INET, ip)
    except OSError:
        pass
    try:
        return socket.inet_pton(socket.AF_INET6, ip)
    except OSError:
        raise ValueError(f"not an IPv4 or IPv6 address: {ip!r}") from None


def host_from_bytes(raw: bytes) -> str:
    """Text form of 4 (IPv4) or 16 (IPv6) address bytes."""
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, bytes(raw))


def host_raw(host: object) -> bytes:
    """The 4 (IPv4) or 16 (IPv6) address bytes of ``host``: address text, or those bytes
    themselves; InvalidMessageError for anything else."""
    if isinstance(host, str):
        try:
            return host_to_bytes(host)
        except ValueError:
            raise InvalidMessageError(f"{host!r} is not an IPv4 or IPv6 address") from None
    if isinstance(host, (bytes, bytearray, memoryview)) and len(host) in (4, 16):
        return bytes(host)
    raise InvalidMessageError(f"host must be address text or 4 or 16 bytes, not {host!r}")


def _check_signed(value: object, name: str, bits: int) -> int:
    if not isinstance(value, int):
        raise InvalidMessageError(f"{name} must be an int, not {type(value).__name__}")
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if value < lo or value > hi:
        raise InvalidMessageError(f"{name} {value} is out of range [{lo}, {hi}]")
    return value


def make_offset_msg_id(host_bytes: object, port: int, offset: int) -> str:
    """offsetMsgId (§3.1): store address, int port and long offset as upper-case hex (32 or 56 chars)."""
    raw = host_raw(host_bytes)
    _check_signed(port, "port", 32)
    _check_signed(offset, "offset", 64)
    return (raw + port.to_bytes(4, "big", signed=True) + offset.to_bytes(8, "big", signed=True)).hex().upper()


class Message:
    """A message to store: topic, body, and optional tags, keys, properties, flag, queue."""

    __slots__ = (
        "topic",
        "body",
        "tags",
        "keys",
        "properties",
        "flag",
        "queue_id",
        "born_timestamp",
        "reconsume_times",
        "sys_flag",
    )

    def __init__(
        self,
        topic: str,
        body: Union[bytes, bytearray, memoryview],
        tags: Optional[str] = None,
        keys: Optional[str | list[str] | tuple[str, ...]] = None,
        properties: Optional[Mapping[str, str]] = None,
        flag: int = 0,
        queue_id: int = -1,
        born_timestamp: int = 0,
        reconsume_times: int = 0,
        sys_flag: int = 0,
    ) -> None:
        self.topic = topic
        self.body = body
        self.tags = tags
        self.keys = keys
        self.properties = properties
        self.flag = flag
        self.queue_id = queue_id
        self.born_timestamp = born_timestamp
        self.reconsume_times = reconsume_times
        self.sys_flag = sys_flag

    def __repr__(self) -> str:
        return (
            f"Message(topic={self.topic!r}, body={bytes(self.body[:32])!r}"
            f"{'...' if len(self.body) > 32 else ''}, tags={self.tags!r}, keys={self.keys!r})"
        )


#: The fields of a MessageExt, in the order of :meth:`MessageExt.as_dict`.
MESSAGE_FIELDS = (
    "size",
    "magic",
    "body_crc",
    "queue_id",
    "flag",
    "queue_offset",
    "commitlog_offset",
    "sys_flag",
    "born_timestamp",
    "born_host",
    "store_timestamp",
    "store_host",
    "reconsume_times",
    "prepared_transaction_offset",
    "body",
    "topic",
    "properties",
)


class MessageExt(metaclass=ABCMeta):
    """A record as stored in the CommitLog (RocketMQ's MessageExt), as decoding returns it.

    ``body`` is ``bytes`` unless a zero-copy read was asked for, in which case it is a read-only
    memoryview into the segment map that keeps the map alive while it exists.

    This class is the pure-Python twin's message; the compiled build hands out
    ``rocketstore.format._codec.MessageExt``, which decodes ``body``, ``topic``, ``properties`` and the
    hosts on first access. Both are instances of this class (an ABC the compiled one registers
    with), have the same attributes, compare equal for the same record, and pickle (a zero-copy
    body pickles as bytes).
    """

    __slots__ = (*(n for n in MESSAGE_FIELDS if n != "body"), "stored_body", "_inflated")

    size: int  #: the record's length in bytes (TOTALSIZE)
    magic: int  #: MAGICCODE (V1 or V2)
    body_crc: int  #: BODYCRC
    queue_id: int
    flag: int
    queue_offset: int  #: the message's position in its ConsumeQueue
    commitlog_offset: int  #: PHYSICALOFFSET: where the record starts
    sys_flag: int
    born_timestamp: int  #: ms since the epoch, set by the producer
    born_host: tuple[str, int]  #: (ip text, port)
    store_timestamp: int  #: ms since the epoch, set by the store
    store_host: tuple[str, int]  #: (ip text, port)
    reconsume_times: int
    prepared_transaction_offset: int
    #: the body field's bytes as stored: the compressed bytes of a compressed body (sysFlag bit
    #: 0), else the body itself (a read-only memoryview after a zero-copy read)
    stored_body: Union[bytes, memoryview]
    _inflated: Optional[bytes]
    topic: str
    properties: dict[str, str]  #: empty when the record has none

    def __init__(self, **fields: Any) -> None:
        for name in MESSAGE_FIELDS:  # (``body`` through its setter: the stored bytes)
            setattr(self, name, fields.get(name))

    @property
    def body(self) -> Union[bytes, memoryview]:
        """The body the producer sent: ``stored_body`` inflated when sysFlag says it is
        compressed (rocketstore.base.compression), else ``stored_body`` itself."""
        if not self.sys_flag & COMPRESSED_FLAG:
            return self.stored_body
        if self._inflated is None:
            self._inflated = inflate(self.stored_body, self.sys_flag)
        return self._inflated

    @body.setter
    def body(self, value: Union[bytes, memoryview]) -> None:
        """Set the stored bytes (compressed ones, when sysFlag says the body is compressed)."""
        self.stored_body = value
        self._inflated = None

    @property
    def tags(self) -> Optional[str]:
        return self.properties.get(PROPERTY_TAGS) if self.properties else None

    @property
    def keys(self) -> Optional[str]:
        return self.properties.get(PROPERTY_KEYS) if self.properties else None

    @property
    def unique_key(self) -> Optional[str]:
        return self.properties.get(PROPERTY_UNIQ_KEY) if self.properties else None

    @property
    def msg_id(self) -> str:
        """The offsetMsgId: store host, port and commitlog offset as upper-case hex (§3.1)."""
        host, port = self.store_host
        return make_offset_msg_id(host_to_bytes(host), port, self.commitlog_offset)

    def as_dict(self) -> dict[str, Any]:
        """The fields (MESSAGE_FIELDS) as a dict."""
        return {name: getattr(self, name) for name in MESSAGE_FIELDS}

    def __reduce__(self) -> tuple[Any, ...]:
        fields = {name: getattr(self, name) for name in MESSAGE_FIELDS if name != "body"}
        fields["body"] = bytes(self.stored_body)
        return (_message_from_fields, (fields,))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageExt):
            return NotImplemented
        return all(
            bytes(self.stored_body) == bytes(other.stored_body)
            if n == "body"
            else getattr(self, n) == getattr(other, n)
            for n in MESSAGE_FIELDS
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value: unhashable

    def __repr__(self) -> str:
        return (
            f"MessageExt(topic={self.topic!r}, queue_id={self.queue_id}, "
            f"queue_offset={self.queue_offset}, commitlog_offset={self.commitlog_offset}, "
            f"size={self.size}, body={bytes(self.stored_body[:32])!r})"
        )


def _message_from_fields(fields: dict[str, Any]) -> MessageExt:
    """A MessageExt holding ``fields`` (as ``as_dict()`` gives them): unpickling."""
    m = MessageExt.__new__(MessageExt)
    for name in MESSAGE_FIELDS:
        setattr(m, name, fields[name])
    return m
