"""RocketMQ 5.x's inner batch records (docs/format.md §1.7): the messages of one batch put in
one CommitLog record, as a ``queue.type=BatchCQ`` topic stores them.

The record's sysFlag has ``INNER_BATCH`` | ``NEED_UNWRAP``, its properties ``INNER_NUM`` (the
count) and ``INNER_BASE`` (the first message's queue offset), and its body is the messages in
RocketMQ's batch encoding (``MessageDecoder.encodeMessages``: per message total size, magic, body
CRC, flag, body length, body, properties length, properties). Reading (:func:`inner_messages`,
:func:`inner_spans`, :func:`unwrap_rows`) hands each message out on its own, as RocketMQ's client
unwraps it; writing (:class:`InnerBatchWriter`, :func:`encode_inner_batch`) makes what 5.3.3's
producer and broker write, properties in ``java.util.HashMap`` order. The queue files that index
these records are rocketstore.queues.batchcq's.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Optional

import numpy as np

from rocketstore.base._clock import month_bounds
from rocketstore.base.compression import COMPRESSED_FLAG, COMPRESSION_TYPE_MASK
from rocketstore.errors import CorruptRecordError, InvalidMessageError
from rocketstore.format._codec_py import java_hash
from rocketstore.message import MessageExt

__all__ = [
    "PROPERTY_INNER_BASE",
    "PROPERTY_INNER_NUM",
    "SYSFLAG_INNER_BATCH",
    "SYSFLAG_NEED_UNWRAP",
    "InnerBatchWriter",
    "batch_bodies",
    "encode_inner_batch",
    "inner_batch_properties",
    "inner_count",
    "inner_messages",
    "inner_spans",
    "java_map_order",
    "java_properties",
    "unwrap_rows",
]

SYSFLAG_NEED_UNWRAP = 0x040


SYSFLAG_INNER_BATCH = 0x080


PROPERTY_INNER_NUM = "INNER_NUM"


PROPERTY_INNER_BASE = "INNER_BASE"


_INNER_HEAD = struct.Struct(">iiiii")  # totalSize, magicCode, bodyCRC, flag, bodyLen


_PROPS_LEN = struct.Struct(">h")


_LOOPBACK = bytes((127, 0, 0, 1))


def inner_count(msg: MessageExt) -> int:
    """How many queue offsets ``msg``'s record takes in a BatchConsumeQueue."""
    if msg.sys_flag & SYSFLAG_INNER_BATCH:
        try:
            count = int((msg.properties or {}).get(PROPERTY_INNER_NUM, ""))
        except ValueError:
            count = 0
        if count <= 0:
            raise CorruptRecordError(
                f"inner batch record at {msg.commitlog_offset} has no valid {PROPERTY_INNER_NUM} property"
            )
        return count
    return 1


def _properties(raw: bytes) -> dict[str, str]:
    """RocketMQ's ``string2messageProperties``: ``name\\x01value\\x02`` pairs."""
    found: dict[str, str] = {}
    for item in raw.decode("utf-8", "surrogateescape").split("\x02"):
        name, sep, value = item.partition("\x01")
        if sep:
            found[name] = value
    return found


#: sysFlag's compressed bit and compression type (rocketstore.base.compression)
_COMPRESSION_BITS = COMPRESSED_FLAG | COMPRESSION_TYPE_MASK


def inner_messages(msg: MessageExt) -> list[MessageExt]:
    """The messages of ``msg``'s record as a RocketMQ client unwraps them: an inner batch's
    messages at queue offsets ``msg.queue_offset + i``; any other record as it is. Raises
    :class:`CorruptRecordError` when the body does not hold whole messages."""
    if not (msg.sys_flag & SYSFLAG_INNER_BATCH and msg.sys_flag & SYSFLAG_NEED_UNWRAP):
        return [msg]
    body = bytes(msg.body)
    out: list[MessageExt] = []
    for total, body_crc, flag, at, body_len, props_at, props_len in inner_spans(
        body, 0, len(body), msg.commitlog_offset
    ):
        inner_body = body[at : at + body_len]
        out.append(
            MessageExt(
                size=total,
                magic=msg.magic,
                body_crc=body_crc,
                queue_id=msg.queue_id,
                flag=flag,
                queue_offset=msg.queue_offset + len(out),
                commitlog_offset=msg.commitlog_offset,
                sys_flag=msg.sys_flag & ~_COMPRESSION_BITS,  # the outer body was inflated
                born_timestamp=msg.born_timestamp,
                born_host=msg.born_host,
                store_timestamp=msg.store_timestamp,
                store_host=msg.store_host,
                reconsume_times=msg.reconsume_times,
                prepared_transaction_offset=msg.prepared_transaction_offset,
                body=inner_body,
                topic=msg.topic,
                properties=_properties(body[props_at : props_at + props_len]),
            )
        )
    return out


def inner_spans(
    buffer: Any, start: int, end: int, where: int
) -> list[tuple[int, int, int, int, int, int, int]]:
    """The messages of an inner batch's body ``buffer[start:end]`` in RocketMQ's batch encoding:
    ``(total size, body CRC, flag, body position, body length, properties position, properties
    length)`` each, positions in ``buffer``. Raises :class:`CorruptRecordError` (naming CommitLog
    offset ``where``) when the body does not hold whole messages."""
    out = []
    pos = start
    while pos < end:
        if end - pos < _INNER_HEAD.size:
            raise CorruptRecordError(f"inner batch at {where}: a message is cut at {pos - start}")
        total, _magic, body_crc, flag, body_len = _INNER_HEAD.unpack_from(buffer, pos)
        at = pos + _INNER_HEAD.size
        if body_len < 0 or at + body_len + 2 > end:
            raise CorruptRecordError(f"inner batch at {where}: a message's body overruns at {pos - start}")
        (props_len,) = _PROPS_LEN.unpack_from(buffer, at + body_len)
        props_at = at + body_len + 2
        if props_len < 0 or props_at + props_len > end or total != props_at + props_len - pos:
            raise CorruptRecordError(f"inner batch at {where}: a message's length is wrong at {pos - start}")
        out.append((total, body_crc, flag, at, body_len, props_at, props_len))
        pos = props_at + props_len
    return out


def unwrap_rows(view: Any, rows: np.ndarray, segment_start: int) -> np.ndarray:
    """``rows`` (``RECORD_DTYPE`` over ``view``, a CommitLog segment from ``segment_start``) with
    each inner batch's row replaced by one row per message, as a RocketMQ client unwraps it: the
    record's fields, queue offset ``base + i``, and the message's own flag, body CRC, body and
    properties (their positions in ``view``). ``rows`` itself when it holds no inner batch.
    Raises :class:`CorruptRecordError` for an inner batch whose body is compressed (its messages
    are no spans of ``view``: get_message reads them) or does not hold whole messages."""
    flags = rows["sys_flag"]
    batch = ((flags & SYSFLAG_INNER_BATCH) != 0) & ((flags & SYSFLAG_NEED_UNWRAP) != 0)
    if not batch.any():
        return rows
    out = []
    for row, is_batch in zip(rows, batch.tolist()):
        if not is_batch:
            out.append(row)
            continue
        where = segment_start + int(row["position"])
        if int(row["sys_flag"]) & _COMPRESSION_BITS:
            raise CorruptRecordError(
                f"inner batch at {where} has a compressed body: its messages are no spans of the "
                "CommitLog (read them with get_message)"
            )
        at = int(row["body_pos"])
        base = int(row["queue_offset"])
        for i, (_total, body_crc, flag, body_at, body_len, props_at, props_len) in enumerate(
            inner_spans(view, at, at + int(row["body_len"]), where)
        ):
            one = row.copy()
            one["queue_offset"] = base + i
            one["flag"], one["body_crc"] = flag, body_crc
            one["body_pos"], one["body_len"] = body_at, body_len
            one["properties_pos"], one["properties_len"] = props_at, props_len
            out.append(one)
    return np.array(out, dtype=rows.dtype)


def java_map_order(names: Iterable[str]) -> list[str]:
    """``names`` in the order a ``java.util.HashMap`` holding them iterates: by bucket
    (``h ^ (h >>> 16)`` of ``String.hashCode``, masked by a table of 16 doubled while more than
    3/4 full), the given order within a bucket. RocketMQ writes a properties string in this
    order (``messageProperties2String`` over a HashMap)."""
    names = list(names)
    size = 16
    while len(names) > size * 3 // 4:
        size *= 2

    def bucket(name: str) -> int:
        h = java_hash(name) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (size - 1)

    return sorted(names, key=bucket)


def java_properties(properties: Mapping[str, str]) -> bytes:
    """``properties`` as RocketMQ's ``messageProperties2String`` writes a HashMap of them:
    ``name\x01value\x02`` in :func:`java_map_order`."""
    return "".join(f"{n}\x01{properties[n]}\x02" for n in java_map_order(properties)).encode("utf-8")


def encode_inner_batch(messages: Iterable[tuple[int, bytes, Mapping[str, str]]]) -> bytes:
    """The body of an inner batch record as 5.3.3's producer encodes its messages
    (``MessageDecoder.encodeMessages``: per message int totalSize, int magic 0, int bodyCRC 0,
    int flag, int bodyLen, body, short propertiesLength, properties) from ``(flag, body,
    properties)`` of each, the properties in :func:`java_properties`' order."""
    out = bytearray()
    for flag, body, properties in messages:
        props = java_properties(properties)
        if len(props) > 0x7FFF:
            raise ValueError(f"a message's properties are {len(props)} bytes; the limit is 32767")
        out += _INNER_HEAD.pack(_INNER_HEAD.size + len(body) + 2 + len(props), 0, 0, flag, len(body))
        out += body
        out += _PROPS_LEN.pack(len(props))
        out += props
    return bytes(out)


def inner_batch_properties(base: int, count: int, unique_key: str, properties: Mapping[str, str]) -> bytes:
    """The properties string of an inner batch record of ``count`` messages at queue offset
    ``base``, as 5.3.3's broker writes it: ``properties`` (the batch's own, e.g. ``CLUSTER``,
    ``WAIT``) with ``UNIQ_KEY``, ``INNER_NUM`` and ``INNER_BASE``, in HashMap order (a
    ``__CRC32#`` property, when the store writes one, goes after them)."""
    return java_properties(
        # (the producer's UNIQ_KEY first: it goes before a property of the same bucket)
        {"UNIQ_KEY": unique_key, **properties, PROPERTY_INNER_NUM: str(count), PROPERTY_INNER_BASE: str(base)}
    )


def batch_bodies(bodies: Any, lengths: Any = None) -> list[bytes]:
    """put_batch's ``bodies`` (a sequence of bytes-like, or one buffer cut by ``lengths``) as a
    list of bytes."""
    if lengths is None:
        return [bytes(b) for b in bodies]
    buf = memoryview(bodies).cast("B")
    out, pos = [], 0
    for n in np.asarray(lengths, dtype=np.int64).tolist():
        if n < 0 or pos + n > len(buf):
            raise InvalidMessageError("lengths run past the end of the bodies' buffer")
        out.append(bytes(buf[pos : pos + n]))
        pos += n
    if pos != len(buf):
        raise InvalidMessageError(f"lengths add up to {pos} bytes, the buffer holds {len(buf)}")
    return out


class InnerBatchWriter:
    """Puts into a BatchCQ topic's queue as 5.3.3's producer and broker write a batch there: one
    inner batch record (sysFlag INNER_BATCH | NEED_UNWRAP) whose body is the messages in the
    producer's batch encoding, each with its own UNIQ_KEY (and WAIT, TAGS, its properties), and
    whose properties are the batch's UNIQ_KEY, CLUSTER, WAIT, INNER_NUM and INNER_BASE (the
    queue offset of its first message, set under the append lock by the core's
    ``put_inner_batch``), all in java.util.HashMap order. ``codec`` makes the client-style
    UNIQ_KEYs (``make_uniq_key``); ``cluster`` is the broker cluster name the record carries."""

    def __init__(self, codec: Any, cluster: str, clock: Callable[[], int]) -> None:
        self._codec = codec
        self._cluster = cluster
        self._clock = clock
        self._loader_hash = int.from_bytes(os.urandom(4), "big")
        self._counter = 0
        self._lock = threading.Lock()

    def new_id(self) -> str:
        """A client-style UNIQ_KEY: loopback address, pid, a random part, time and a counter."""
        now = self._clock()
        with self._lock:
            self._counter = (self._counter + 1) & 0xFFFF
            counter = self._counter
        key: str = self._codec.make_uniq_key(
            _LOOPBACK, os.getpid(), self._loader_hash, now, counter, month_bounds(now)[0]
        )
        return key

    def record_properties(self, count: int) -> tuple[bytes, bytes, str]:
        """``(properties before the INNER_BASE value, after it, the batch's UNIQ_KEY)`` of an
        inner batch record of ``count`` messages: UNIQ_KEY, CLUSTER, WAIT, INNER_NUM and
        INNER_BASE in HashMap order, as 5.3.3's broker writes them."""
        unique_key = self.new_id()
        names = {
            "UNIQ_KEY": unique_key,
            "CLUSTER": self._cluster,
            "WAIT": "true",
            PROPERTY_INNER_NUM: str(count),
            PROPERTY_INNER_BASE: "",
        }
        before: list[str] = []
        after: list[str] = []
        part = before
        for name in java_map_order(names):
            if name == PROPERTY_INNER_BASE:
                before.append(f"{name}\x01")
                part = after
                after.append("\x02")
            else:
                part.append(f"{name}\x01{names[name]}\x02")
        return "".join(before).encode("utf-8"), "".join(after).encode("utf-8"), unique_key

    def put_messages(self, core: Any, messages: list[Any], wait: int) -> Any:
        """put_messages into a BatchCQ topic: ``messages`` (:class:`rocketstore.Message`, all of
        that topic and one queue id) as one inner batch record, each with its own flag, body,
        tags, keys and properties, as a 5.x producer's ``send(Collection<Message>)``. Its
        PutResult (message ``i`` at ``queue_offset + i``) or PutFuture."""
        topics = {m.topic for m in messages}
        queue_ids = {m.queue_id for m in messages}
        if len(topics) != 1 or len(queue_ids) != 1:
            raise InvalidMessageError(
                "messages to a BatchCQ topic are put as one batch record: all of one topic and one queue_id"
            )
        items = []
        for m in messages:
            if m.sys_flag or m.reconsume_times or m.born_timestamp:
                raise InvalidMessageError(
                    "a BatchCQ batch's messages take no sys_flag, reconsume_times or born_timestamp"
                )
            props: dict[str, str] = {}
            if m.tags is not None:
                props["TAGS"] = m.tags
            if m.keys is not None:
                props["KEYS"] = m.keys if isinstance(m.keys, str) else " ".join(m.keys)
            props["WAIT"] = "true"
            user = dict(m.properties or {})
            if "DELAY" in user or "UNIQ_KEY" in user or any(k.startswith("TIMER_") for k in user):
                raise InvalidMessageError(
                    "a BatchCQ batch's messages cannot be delayed, timed or carry a UNIQ_KEY"
                )
            props.update(user)
            items.append((int(m.flag), bytes(m.body), props))
        return self.put_items(core, topics.pop(), items, queue_ids.pop(), wait)

    def put_items(
        self, core: Any, topic: str, items: list[tuple[int, bytes, dict[str, str]]], queue_id: int, wait: int
    ) -> Any:
        """One inner batch record of ``items`` ``(flag, body, properties)`` (each message's
        UNIQ_KEY added) through ``core.put_inner_batch``."""
        if not items:
            raise InvalidMessageError("a batch needs at least one message")
        body = encode_inner_batch((flag, b, {**props, "UNIQ_KEY": self.new_id()}) for flag, b, props in items)
        before, after, unique_key = self.record_properties(len(items))
        return core.put_inner_batch(topic, body, before, after, queue_id, len(items), unique_key, 0, wait)

    def put(
        self,
        core: Any,
        topic: str,
        bodies: list[bytes],
        tags: Optional[str],
        properties: Optional[Mapping[str, str]],
        queue_id: int,
        wait: int,
        flag: int = 0,
    ) -> Any:
        """One inner batch record of ``bodies`` into (``topic``, ``queue_id``; -1: the core's
        choice) through ``core.put_inner_batch``: its PutResult (queue offset the first
        message's; message ``i`` is at ``queue_offset + i``) or PutFuture."""
        own: dict[str, str] = {}
        if tags is not None:
            own["TAGS"] = tags
        own["WAIT"] = "true"
        own.update(properties or {})
        return self.put_items(core, topic, [(flag, b, own) for b in bodies], queue_id, wait)
