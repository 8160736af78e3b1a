"""The careful path of every put of a store that appends in this process: :class:`Putter`.

The facade's hot puts go straight into the append core (the implementation's ``PutFront``);
what those cannot take (a Message, a delayed or timer put, properties that are not the plain
shape, a compressed body, a bad argument, a closed or read-only store) comes here. A putter checks
the arguments, rewrites a delayed or timed put into its system topic (rocketstore.services.schedule,
rocketstore.services.timer), encodes the properties and calls the core; it holds the parts of one
open (the store makes a new one at each), and asks the store, through the callables it was given,
whether it is closed or writable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional, Union, cast

from rocketstore._impl import MESSAGE_TYPES
from rocketstore.base._checks import INT32_MAX, INT32_MIN, check_int, check_mapping, check_put_ints
from rocketstore.base.compression import CODECS, deflate, sys_flag_bits
from rocketstore.errors import InvalidMessageError, InvalidTimerError, KeyRequiredError
from rocketstore.message import PROPERTY_DELAY, Message, check_user_topic
from rocketstore.queues.innerbatch import batch_bodies
from rocketstore.services.timer import TIMER_PROPERTIES, is_timer_put

if TYPE_CHECKING:  # the compiled twins have the same classes (see the .pyi stubs)
    from rocketstore.log._store_py import BatchPutResult, PutFuture, PutResult
    from rocketstore.log.commitlog import AppendCore

__all__ = ["Putter", "check_mapping", "WAIT_FUTURE"]

#: A message body: bytes or anything with the buffer protocol.
Body = Union[bytes, bytearray, memoryview]
#: ``keys=``: one string of space-separated keys, or a sequence of keys.
Keys = Union[str, Sequence[str], None]
#: Properties that make a put delayed or timed (rocketstore.services.schedule, rocketstore.services.timer).
_SCHEDULING = frozenset({PROPERTY_DELAY, *TIMER_PROPERTIES})
_INT32_MIN, _INT32_MAX = INT32_MIN, INT32_MAX
WAIT_FUTURE = 2  # the core's wait argument for a PutFuture (both twins' WAIT_FUTURE)
#: A timer put's (deliver_at_ms, delay_ms), or None.
Timer = Optional[tuple[Optional[int], Optional[int]]]


def wait_mode(durable: Optional[bool], wait_override: int) -> int:
    """The core's wait argument: -1 lets the core apply the store's flush_disk_type."""
    if durable is not None:
        return 1 if durable else 0
    return wait_override


class Putter:
    """The careful path of a store's puts, over the parts of one open: ``core`` (the append
    core, or the stand-in of a read-only, closed or forked store, whose calls raise why),
    ``codec``, ``user_topics`` (the user topics a put was checked for: the set the store's
    ``PutFront`` reads), ``timer`` and ``schedule`` (the services a timed or delayed put is
    rewritten by; None when not running), ``check_writable(store)`` (raises unless the store is
    open for writing), ``closed(store)``, ``batch`` (the BatchConsumeQueues, or None: a batch
    into a ``queue.type=BatchCQ`` topic is one inner batch record) and ``topics`` (the topic
    table, rocketstore.services.topics.Topics: a put of one message without keys to a compacted
    topic is refused, :meth:`check_keyed`; such a topic is never in ``user_topics`` but in
    ``keyed`` once checked, which the ``PutFront`` reads too: a put of it whose keys are plainly
    there takes the one call, every other comes here).

    Each put is called with the store it puts for first, as the store's role calls the careful
    path: an owner's role holds these methods themselves (its ``PutFront`` hands them what it
    cannot take in one call), so the careful path costs no frame more than the facade's own."""

    __slots__ = (
        "core",
        "codec",
        "user_topics",
        "timer",
        "schedule",
        "batch",
        "topics",
        "keyed",
        "_check_writable",
        "_closed",
    )

    core: AppendCore

    def __init__(
        self,
        core: AppendCore,
        codec: Any,
        user_topics: set[str],
        timer: Any,
        schedule: Any,
        check_writable: Callable[[Any], None],
        closed: Callable[[Any], bool],
        batch: Any = None,
        topics: Any = None,
    ) -> None:
        self.core, self.codec, self.user_topics = core, codec, user_topics
        self.topics = topics
        #: the compacted topics a put was checked for (the others are in ``user_topics``)
        self.keyed: set[str] = set()
        if topics is not None:
            topics.checked = (user_topics, self.keyed)  # a topic whose attributes change: again
        self.timer, self.schedule = timer, schedule
        self.batch = batch  # the BatchConsumeQueues (rocketstore.queues.batchcq), whose topics' batches are inner batch records
        self._check_writable, self._closed = check_writable, closed

    def _properties(
        self,
        tags: Optional[str],
        keys: Keys,
        properties: Optional[Mapping[str, str]],
    ) -> tuple[Optional[bytes], Optional[str], int]:
        """(encoded properties, the caller's UNIQ_KEY or None, wait override or -1)."""
        found: tuple[Optional[bytes], Optional[str], int] = self.codec.put_properties(tags, keys, properties)
        return found

    def put(
        self,
        store: Any,
        topic: str | Message,
        body: Optional[Body] = None,
        *,
        tags: Optional[str] = None,
        keys: Keys = None,
        properties: Optional[Mapping[str, str]] = None,
        queue_id: int = -1,
        flag: int = 0,
        durable: Optional[bool] = None,
        delay_level: Optional[int] = None,
        deliver_at_ms: Optional[int] = None,
        delay_ms: Optional[int] = None,
        compress: Optional[str] = None,
    ) -> PutResult:
        """``MessageStore.put``'s careful path (the facade's ``PutFront`` takes the common
        shapes in one call and hands every other here): the core's own one-call shapes first,
        then a timer's or a delayed put's, then the general path."""
        if compress is not None:
            return self._put_compressed(
                store,
                topic,
                body,
                compress,
                tags,
                keys,
                properties,
                queue_id,
                flag,
                durable,
                delay_level,
                deliver_at_ms,
                delay_ms,
            )
        if topic.__class__ is not str or topic not in self.user_topics:
            if topic.__class__ is not str or topic not in self.keyed:
                self.check_user_topic(topic)
            self.check_keyed(topic, keys, properties)
        if (
            type(queue_id) is not int
            or type(flag) is not int
            or not -1 <= queue_id <= _INT32_MAX
            or not _INT32_MIN <= flag <= _INT32_MAX
        ):
            queue_id, flag = check_put_ints(queue_id, flag)
        timer = None if deliver_at_ms is None and delay_ms is None else (deliver_at_ms, delay_ms)
        if (
            tags is None
            and keys is None
            and properties is None
            and body is not None
            and delay_level is None
            and timer is None
        ):
            # the hot path: one call into the core (-1: the store's flush_disk_type decides)
            return self.core.put(
                topic,
                body,
                None,
                queue_id,
                flag,
                0,
                0,
                0,
                0,
                None,
                -1 if durable is None else (1 if durable else 0),
            )
        if body is not None and delay_level is None and timer is None:
            # tags, keys and plain properties: encoded in the core (None: not the plain shape,
            # e.g. a DELAY or WAIT property, a mapping that is not a dict; see below)
            done = self.core.put_keyed(
                topic,
                body,
                tags,
                keys,
                queue_id,
                flag,
                -1 if durable is None else (1 if durable else 0),
                properties,
            )
            if done is not None:
                return done
        if (
            tags is None
            and keys is None
            and properties is None
            and body is not None
            and not self._closed(store)
        ):
            # a timer or delayed put's own hot path (rocketstore.services.timer, rocketstore.services.schedule);
            # anything else (both, a read-only store) is the general path's to refuse
            wait = -1 if durable is None else (1 if durable else 0)
            if delay_level is None and self.timer is not None:
                timed: Optional[PutResult] = self.timer.put(
                    self.core, topic, body, queue_id, flag, wait, deliver_at_ms, delay_ms
                )
                if timed is not None:  # None: not a plain int, the general path decides
                    return timed
            elif delay_level is not None and timer is None and self.schedule is not None:
                delayed: PutResult = self.schedule.put(
                    self.core, topic, body, queue_id, flag, wait, delay_level
                )
                return delayed
        if body is None:
            return cast("PutResult", self.put_message(store, topic, durable, 0, delay_level, timer))
        return cast(
            "PutResult",
            self._put(
                store,
                cast(str, topic),
                body,
                tags,
                keys,
                properties,
                queue_id,
                flag,
                durable,
                0,
                delay_level,
                timer,
            ),
        )

    def _put_compressed(
        self,
        store: Any,
        topic: Any,
        body: Optional[Body],
        compress: str,
        tags: Optional[str],
        keys: Keys,
        properties: Optional[Mapping[str, str]],
        queue_id: int,
        flag: int,
        durable: Optional[bool],
        delay_level: Optional[int],
        deliver_at_ms: Optional[int],
        delay_ms: Optional[int],
    ) -> PutResult:
        """A put whose body is compressed first, as a RocketMQ producer compresses it: the
        stored bytes are ``compress``'s, and sysFlag says which (rocketstore.base.compression)."""
        if not isinstance(compress, str) or compress not in CODECS:
            raise InvalidMessageError(f"compress must be one of {sorted(CODECS)}, not {compress!r}")
        if isinstance(topic, MESSAGE_TYPES):
            raise InvalidMessageError(
                "put(message, compress=...): compress the Message's body and set its sys_flag"
            )
        if body is None:
            raise TypeError("body is required")
        self.check_user_topic(topic)
        self.check_keyed(topic, keys, properties)
        message = Message(
            topic,
            deflate(memoryview(body), compress),
            tags=tags,
            keys=keys if keys is None or isinstance(keys, str) else list(keys),
            properties=properties,
            queue_id=queue_id,
            flag=flag,
            sys_flag=sys_flag_bits(compress),
        )
        timer = None if deliver_at_ms is None and delay_ms is None else (deliver_at_ms, delay_ms)
        return cast("PutResult", self.put_message(store, message, durable, 0, delay_level, timer))

    def put_pipelined(
        self,
        store: Any,
        topic: str | Message,
        body: Optional[Body] = None,
        *,
        tags: Optional[str] = None,
        keys: Keys = None,
        properties: Optional[Mapping[str, str]] = None,
        queue_id: int = -1,
        flag: int = 0,
        delay_level: Optional[int] = None,
        deliver_at_ms: Optional[int] = None,
        delay_ms: Optional[int] = None,
    ) -> PutFuture:
        """``MessageStore.put_pipelined``'s careful path: :meth:`put` with a future."""
        self.check_user_topic(topic)
        self.check_keyed(topic, keys, properties)
        timer = None if deliver_at_ms is None and delay_ms is None else (deliver_at_ms, delay_ms)
        if body is None:
            return cast("PutFuture", self.put_message(store, topic, True, WAIT_FUTURE, delay_level, timer))
        queue_id, flag = check_put_ints(queue_id, flag)
        return cast(
            "PutFuture",
            self._put(
                store,
                cast(str, topic),
                body,
                tags,
                keys,
                properties,
                queue_id,
                flag,
                True,
                WAIT_FUTURE,
                delay_level,
                timer,
            ),
        )

    def check_user_topic(self, topic: object) -> None:
        """SystemTopicError if a user's put (``topic`` a str or a Message) names a system topic;
        the store's own puts into them (delay, send_back) do not come through here."""
        name = topic.topic if isinstance(topic, MESSAGE_TYPES) else topic
        check_user_topic(name)
        if name.__class__ is not str or name in self.user_topics or name in self.keyed:
            return
        topics = self.topics
        if topics is None:
            if len(self.user_topics) < 65536:
                self.user_topics.add(name)
            return
        # under the table's lock: a change of the topic's attributes (which takes it out of
        # these sets) comes before the look or after the add, never between
        with topics.lock:
            if topics.compacted(name):
                self.keyed.add(name)  # (as many as there are compacted topics)
            elif len(self.user_topics) < 65536:
                self.user_topics.add(name)

    def check_keyed(self, topic: object, keys: Keys = None, properties: Any = None) -> None:
        """KeyRequiredError if a put of one message (``topic`` a str with ``keys`` and
        ``properties``, or a Message) goes to a compacted topic without keys: RocketMQ 5.x's
        SendMessageProcessor refuses a send whose ``KEYS`` is blank to a
        ``cleanup.policy=COMPACTION`` topic (MESSAGE_ILLEGAL, "Required message key is
        missing"). A batch is not checked: the broker's batch send is not."""
        name = topic
        if isinstance(topic, MESSAGE_TYPES):
            name, keys, properties = topic.topic, topic.keys, topic.properties
        if name.__class__ is not str or name not in self.keyed:  # (check_user_topic came first)
            return
        if keys is None:
            value = properties.get("KEYS") if isinstance(properties, Mapping) else None
        elif isinstance(keys, str):
            value = keys
        else:  # a sequence of keys (one that is not is the general path's to refuse)
            value = (
                " ".join(k for k in keys if isinstance(k, str)) if isinstance(keys, (list, tuple)) else "?"
            )
        if not isinstance(value, str) or not value.strip():
            raise KeyRequiredError(
                f"Required message key is missing: topic {name!r} is compacted "
                "(cleanup.policy=COMPACTION), and a put of one message needs keys"
            )

    def _put(
        self,
        store: Any,
        topic: str,
        body: Body,
        tags: Optional[str],
        keys: Keys,
        properties: Optional[Mapping[str, str]],
        queue_id: int,
        flag: int,
        durable: Optional[bool],
        mode: int,
        delay_level: Optional[int] = None,
        timer: Timer = None,
    ) -> Any:
        """One put through the core; ``mode`` WAIT_FUTURE for a future, else 0 (by ``durable``)."""
        check_mapping(properties)
        if (
            delay_level is not None
            or timer is not None
            or (properties and _SCHEDULING.intersection(properties))
        ):
            topic, queue_id, properties = self._delayed(
                store, topic, queue_id, properties, delay_level, timer
            )
        if tags is None and keys is None and properties is None:
            props, unique_key, wait = None, None, -1
        else:
            props, unique_key, wait = self._properties(tags, keys, properties)
        return self.core.put(
            topic, body, props, queue_id, flag, 0, 0, 0, 0, unique_key, mode or wait_mode(durable, wait)
        )

    def message_item(
        self,
        store: Any,
        m: Message,
        delay_level: Optional[int] = None,
        timer: Timer = None,
    ) -> tuple[Any, ...]:
        """The core's item of Message ``m`` (every field checked; rewritten if delayed or
        timed), and the wait its WAIT property asks for."""
        if not isinstance(m, MESSAGE_TYPES):
            if isinstance(m, str):
                raise TypeError(
                    f"body must be bytes-like (bytes, bytearray, ...), not None: put({m!r}, body)"
                )
            raise TypeError(f"expected a Message, or a topic and a body, not {type(m).__name__}")
        topic, properties = m.topic, check_mapping(m.properties)
        queue_id, flag = check_put_ints(m.queue_id, m.flag)
        born = check_int("born_timestamp", m.born_timestamp)
        sys_flag = check_int("sys_flag", m.sys_flag, INT32_MIN, INT32_MAX)
        if sys_flag & ~0x7FF or (sys_flag >> 8) & 7 > 3:
            # bits RocketMQ does not define, or a compression type that does not exist:
            # verify() would report the record
            raise InvalidMessageError(f"sys_flag {sys_flag:#x} has bits RocketMQ does not define")
        reconsume = check_int("reconsume_times", m.reconsume_times, INT32_MIN, INT32_MAX)
        if (
            delay_level is not None
            or timer is not None
            or (properties and _SCHEDULING.intersection(properties))
        ):
            topic, queue_id, properties = self._delayed(
                store, topic, queue_id, properties, delay_level, timer
            )
        props, unique_key, wait = self._properties(m.tags, m.keys, properties)
        body = m.body if type(m.body) is bytes else memoryview(m.body).tobytes()  # never bytes(int)
        return (topic, body, props, queue_id, flag, born, sys_flag, reconsume, unique_key), wait

    def put_message(
        self,
        store: Any,
        m: object,
        durable: Optional[bool],
        mode: int,
        delay_level: Optional[int] = None,
        timer: Timer = None,
        prepared_offset: int = 0,
    ) -> Any:
        """One Message through the core; ``prepared_offset``: a committed transaction's half
        message (its record's PREPAREDTRANSACTIONOFFSET)."""
        self._check_writable(store)
        (topic, body, props, qid, flag, born, sys_flag, reconsume, unique_key), wait = self.message_item(
            store, cast(Message, m), delay_level, timer
        )
        core_wait = mode or wait_mode(durable, wait)
        return self.core.put(
            topic, body, props, qid, flag, born, sys_flag, reconsume, prepared_offset, unique_key, core_wait
        )

    def put_batch(
        self,
        store: Any,
        topic: str,
        bodies: Any,
        *,
        lengths: Any = None,
        tags: Optional[str] = None,
        properties: Optional[Mapping[str, str]] = None,
        queue_id: int = -1,
        flag: int = 0,
        durable: Optional[bool] = None,
        pipelined: bool = False,
    ) -> BatchPutResult | PutFuture:
        """``MessageStore.put_batch``: one batch of one topic and queue, whole or not at all."""
        self._check_writable(store)
        self.check_user_topic(topic)
        queue_id, flag = check_put_ints(queue_id, flag)
        props = None
        check_mapping(properties)
        if tags is not None or properties:
            props, unique_key, _ = self._properties(tags, None, properties)
            if unique_key is not None:
                raise InvalidMessageError("a batch's shared properties cannot carry one UNIQ_KEY")
            if properties and PROPERTY_DELAY in properties:
                raise InvalidMessageError("a batch cannot be delayed (RocketMQ refuses DELAY on batches)")
            if is_timer_put(properties):
                raise InvalidTimerError("a batch cannot be a timer message")
        wait = WAIT_FUTURE if pipelined else wait_mode(durable, -1)
        if self.batch is not None and topic in self.batch.topics:  # one inner batch record
            put: BatchPutResult | PutFuture = self.batch.writer.put(
                self.core, topic, batch_bodies(bodies, lengths), tags, properties, queue_id, wait, flag
            )
            return put
        return self.core.put_batch(topic, bodies, lengths, props, queue_id, flag, 0, 0, wait)

    def put_messages(
        self, store: Any, messages: Sequence[Message], *, durable: Optional[bool] = None
    ) -> list[PutResult]:
        """``MessageStore.put_messages``: the plain messages in one compiled pass, any other
        through :meth:`message_item`'s full checks."""
        self._check_writable(store)
        # the plain messages (a known user topic, tags and keys at most) in one compiled call;
        # every other one through _message_item's full checks
        if type(messages) is not list:
            messages = list(messages)
        batch = self.batch
        if (
            batch is not None
            and batch.topics
            and any(getattr(m, "topic", None) in batch.topics for m in messages)
        ):
            # one inner batch record (rocketstore.queues.batchcq)
            return [batch.writer.put_messages(self.core, messages, wait_mode(durable, -1))]
        # a batch of plain messages: read, encoded and stored in one compiled pass
        done = self.core.put_plain_messages(messages, self.user_topics, wait_mode(durable, -1))
        if done is not None:
            return cast("list[PutResult]", done)
        items, slow = self.codec.plain_message_items(messages, self.user_topics, MESSAGE_TYPES)
        no_wait = len(slow) == len(items) > 0  # WAIT=false on every message: a plain one has none
        for i in slow:
            m = messages[i]
            self.check_user_topic(m)
            items[i], wait = self.message_item(store, m)
            no_wait = no_wait and wait == 0
        mode = wait_mode(durable, 0 if no_wait else -1)
        return self.core.put_many(items, mode)

    def _delayed(
        self,
        store: Any,
        topic: str,
        queue_id: int,
        properties: Optional[Mapping[str, str]],
        delay_level: Optional[int],
        timer: Timer = None,
    ) -> tuple[str, int, Optional[Mapping[str, str]]]:
        """(topic, queue_id, properties) of a put, rewritten into rmq_sys_wheel_timer if it is a
        timer message, into SCHEDULE_TOPIC_XXXX if delayed."""
        self._check_writable(store)
        if timer is not None or is_timer_put(properties):
            if delay_level is not None:
                raise InvalidTimerError("give delay_level or a timer (deliver_at_ms, delay_ms), not both")
            deliver_at_ms, delay_ms = timer or (None, None)
            timed: tuple[str, int, Optional[Mapping[str, str]]] = self.timer.rewrite(
                topic, queue_id, properties, deliver_at_ms, delay_ms
            )
            return timed
        if delay_level is None and not (properties and PROPERTY_DELAY in properties):
            return topic, queue_id, properties
        rewritten: tuple[str, int, Optional[Mapping[str, str]]] = self.schedule.rewrite(
            topic, queue_id, properties, delay_level
        )
        return rewritten
