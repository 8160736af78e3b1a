"""``MessageStore``: a store root laid out as RocketMQ's (spec §0), opened like a database.

::

    <root>/commitlog/<20-digit start offset>   segments of commitlog_file_size bytes
    <root>/config/topics.json                  topics and their queue counts (fastjson layout)
    <root>/checkpoint                          4096 bytes (§6)
    <root>/abort                               exists while open for writing / after a crash
    <root>/lock                                exclusive lock of the one writer

Opening for writing takes the lock, scans the CommitLog from its first segment with CRC checks
to find the end of valid data (records past it are cut off and zeroed), rebuilds the
per-queue offset table, and starts the flush threads. A read-only open writes nothing.

``MessageStore`` is the facade: each public method is the class's own and calls the store's role
(rocketstore.roles), chosen at open; the parts and the careful path of every call are
:class:`rocketstore.storebase.StoreBase`'s, recovery is rocketstore.log.recovery's.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Optional, Union, overload

import numpy as np

from rocketstore import _facade_py, _impl
from rocketstore.consume import GetMessageResult
from rocketstore.files.storedir import check_store_dir
from rocketstore.message import Message, MessageExt
from rocketstore.services.pop import Received, ReceivedMessage
from rocketstore.services.retention import UNCHANGED
from rocketstore.services.transaction import PreparedMessage
from rocketstore.storebase import StoreBase

if TYPE_CHECKING:  # the compiled twins have the same classes (see the .pyi stubs)
    from rocketstore.log._store_py import BatchPutResult, PutFuture, PutResult

if TYPE_CHECKING:
    from rocketstore._facade_py import FacadeBase
else:
    FacadeBase = _facade_py.FacadeBase
    if _impl.COMPILED is not None:  # the compiled base: no Python frame on the hot calls
        try:
            from rocketstore._facade import FacadeBase, set_docs
        except ImportError:  # pragma: no cover - a build without it: the pure twin's
            pass
        else:
            set_docs(_facade_py.docs(StoreBase))

__all__ = ["MessageStore", "open_store", "check_store_dir"]

#: A message body: bytes or anything with the buffer protocol.
Body = Union[bytes, bytearray, memoryview]
#: ``keys=``: one string of space-separated keys, or a sequence of keys.
Keys = Union[str, Sequence[str], None]


class MessageStore(FacadeBase, StoreBase):
    """An embedded RocketMQ-format message store rooted at ``path`` (default ``~/store``).

    >>> with MessageStore("/tmp/demo-store") as store:          # doctest: +SKIP
    ...     result = store.put("TopicTest", b"hello", tags="TagA", keys="order-1")
    ...     store.read(result.commitlog_offset).body
    b'hello'

    Keyword options are those of :class:`rocketstore.StoreConfig`. ``read_only=True`` never writes
    a byte under the store's directory (its consumer groups keep their offsets in memory, or in a
    ``state_dir`` outside it) nor takes the lock; while a writer holds the store, its waits count
    themselves into the writer's live page, which wakes them (docs/guide/processes.md). ``implementation`` pins the twin ("c" or "py"; default: compiled
    when built). Thread-safe: any number of threads may put and read at once.

    ``progress(stage, done, total)``, if given, is called while the open recovers: ``stage`` is
    ``"recover"`` (CRC scan) or ``"dispatch"`` (rebuilding ConsumeQueue and index entries),
    ``done`` and ``total`` count CommitLog bytes.
    """

    def create_topic(
        self, topic: str, queues: Optional[int] = None, *, queue_type: Optional[str] = None
    ) -> None:
        """Create ``topic`` with ``queues`` queues (default ``default_queues``), or change its count.

        ``queue_type="BatchCQ"`` makes it a RocketMQ 5.x BatchCQ topic (the attribute
        ``queue.type=BatchCQ`` in ``config/topics.json``, as 5.3.3 writes it): its queues are
        ``batchconsumequeue/`` files, and a :meth:`put_batch` there writes one inner batch record
        whose messages each get their own queue offset (a single put, a plain record). Only a
        topic without messages can change its type; ``"SimpleCQ"`` (ConsumeQueues) is the
        default."""
        if queue_type is None:
            return self._role.create_topic(self, topic, queues)
        return self._role.create_topic(self, topic, queues, queue_type=queue_type)

    def set_topic_retention(
        self,
        topic: str,
        *,
        retention_ms: Any = UNCHANGED,
        retention_bytes: Any = UNCHANGED,
        delete_when_consumed: Any = UNCHANGED,
        cleanup_policy: Any = UNCHANGED,
    ) -> dict[str, Any]:
        """Set ``topic``'s retention policies (created with ``default_queues`` when unknown), kept
        as topic attributes in ``config/topics.json`` (docs/guide/retention.md).

        Each argument left out stays as it is; None removes the topic's own value (the store's
        option applies again); ``retention_ms`` / ``retention_bytes`` take an int, 0 or more,
        or -1 for no limit. ``cleanup_policy="compaction"`` makes it a compacted topic (RocketMQ
        5.x's ``cleanup.policy=COMPACTION``): retention passes keep the latest message of each key
        in the topic's compaction log before its segments go, and :meth:`compacted` reads it
        (docs/guide/retention.md); "delete" (the default) or None turns that off. Returns the
        topic's policy as :meth:`topic_retention` does.
        """
        return self._role.set_topic_retention(
            self,
            topic,
            retention_ms=retention_ms,
            retention_bytes=retention_bytes,
            delete_when_consumed=delete_when_consumed,
            cleanup_policy=cleanup_policy,
        )

    def topic_retention(self, topic: str) -> dict[str, Any]:
        """The retention ``topic`` gets: ``{"retention_ms", "retention_bytes",
        "delete_when_consumed", "source": {policy: "topic" | "store" | ...}}``."""
        return self._role.topic_retention(self, topic)

    def retention_report(self) -> dict[str, Any]:
        """Per topic, its policy, its oldest segment and what holds that segment (which policy;
        for ``delete_when_consumed``, which groups at which offsets), and the store's oldest
        segment with the topics that hold it. Also ``stats()["retention"]``. A writable store
        dispatches first; when that fails (a full disk) the report is of what was dispatched and
        has ``"dispatch_error"``."""
        return self._role.retention_report(self)

    @overload
    def put_batch(
        self,
        topic: str,
        bodies: Any,
        *,
        lengths: Any = None,
        tags: Optional[str] = None,
        properties: Optional[Mapping[str, str]] = None,
        queue_id: int = -1,
        flag: int = 0,
        durable: Optional[bool] = None,
        pipelined: Literal[False] = False,
    ) -> BatchPutResult: ...

    @overload
    def put_batch(
        self,
        topic: str,
        bodies: Any,
        *,
        lengths: Any = None,
        tags: Optional[str] = None,
        properties: Optional[Mapping[str, str]] = None,
        queue_id: int = -1,
        flag: int = 0,
        durable: Optional[bool] = None,
        pipelined: Literal[True],
    ) -> PutFuture: ...

    @overload
    def put_batch(
        self,
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
    ) -> BatchPutResult | PutFuture: ...

    def put_batch(
        self,
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
        """Store many messages of one topic and queue in one call under one lock.

        ``bodies``: a sequence of bytes-like objects, or one buffer (bytes, numpy array, ...) cut
        into bodies by ``lengths``. Tags and properties are shared; each message gets its own
        UNIQ_KEY and consecutive queue offsets. Returns a :class:`BatchPutResult` (or always a
        :class:`PutFuture` of it with ``pipelined=True``). Everything is validated first: a bad
        message raises and nothing of the batch is written. A batch is stored whole or not at
        all; the errors are :meth:`put`'s.

        Into a BatchCQ topic (:meth:`create_topic` ``queue_type``, or a RocketMQ 5.x broker's):
        one inner batch record as 5.3.3 writes it, and its result is that record's
        :class:`PutResult` (or a :class:`PutFuture` of it): ``queue_offset`` is the first
        message's, message ``i`` is at ``queue_offset + i``.
        """
        return self._role.put_batch(
            self,
            topic,
            bodies,
            lengths=lengths,
            tags=tags,
            properties=properties,
            queue_id=queue_id,
            flag=flag,
            durable=durable,
            pipelined=pipelined,
        )

    def put_messages(
        self,
        messages: Sequence[Message],
        *,
        durable: Optional[bool] = None,
    ) -> list[PutResult]:
        """Store :class:`Message` objects of any topics under one lock; returns a list of results.

        Every message is validated before the first is written; they are stored all or none,
        with :meth:`put`'s errors (a ``FlushTimeoutError``'s ``result`` is the list).

        Messages to a BatchCQ topic must all be of that topic and one queue id: they are stored
        as one inner batch record, each with its own flag, body, tags, keys and properties, and
        the list holds that record's one result (message ``i`` at ``queue_offset + i``).
        """
        return self._role.put_messages(self, messages, durable=durable)

    def send_back(
        self,
        group: str,
        message: MessageExt,
        delay_level: int = 0,
        *,
        max_reconsume_times: Optional[int] = None,
    ) -> PutResult:
        """Give back a message ``group`` failed to consume (RocketMQ's ``consumerSendMsgBack``).

        It is stored again with reconsume times + 1, ``RETRY_TOPIC`` (its first topic) and
        ``ORIGIN_MESSAGE_ID`` (its first msgId): in ``%RETRY%<group>`` after a back-off of delay
        level ``3 + reconsume times`` (``delay_level`` > 0 picks one), or in ``%DLQ%<group>`` once
        it has been reconsumed ``max_reconsume_times`` times (default: the group's
        ``retryMaxTimes``, 16) or when ``delay_level`` < 0. Returns the :class:`PutResult`.
        """
        return self._role.send_back(
            self, group, message, delay_level, max_reconsume_times=max_reconsume_times
        )

    def deliver_delayed(self, now: Optional[int] = None) -> int:
        """Deliver every delayed message due at ``now`` (epoch ms; default: the store's clock)
        now, as the background thread does every ``schedule_interval_ms``; returns how many.
        ``now`` that is not an int >= 0 raises ``InvalidMessageError``."""
        return self._role.deliver_delayed(self, now)

    def deliver_timers(self, now: Optional[int] = None) -> int:
        """Deliver every timer message due at ``now`` (epoch ms; default: the store's clock)
        now, in deliver-time order, as the timer thread does; returns how many. ``now`` that is
        not an int >= 0 raises ``InvalidMessageError``."""
        return self._role.deliver_timers(self, now)

    def timer_stats(self) -> dict[str, Any]:
        """The timer service's state: ``pending`` (timer messages not yet delivered),
        ``next_deliver_ms``, and since this open ``delivered``, ``dropped`` (undeliverable,
        logged), ``reconciled`` (interrupted passes settled) and ``resumed`` (copies such a
        settlement found already written, so not written again). A read-only store gives
        ``pending`` and ``next_deliver_ms`` (its counters are 0). A store where a RocketMQ 5.x
        broker kept timers has ``rocketmq``: the timers its files left pending and the recalled
        ones (docs/guide/timers.md)."""
        return self._role.timer_stats(self)

    def delayed_counts(self) -> dict[int, int]:
        """{delay level: messages waiting in it} (levels with none left out)."""
        return self._role.delayed_counts(self)

    def update_subscription_group(self, group: str, *, retry_max_times: int) -> dict[str, Any]:
        """Set ``group``'s ``retryMaxTimes`` (how often :meth:`send_back` retries before the
        DLQ) in ``config/subscriptionGroup.json``; returns the group's config."""
        return self._role.update_subscription_group(self, group, retry_max_times=retry_max_times)

    def ack_many(self, handles: Iterable[str | ReceivedMessage] | Received) -> int:
        """Acknowledge many messages at once (one record per queue); returns how many this call
        acknowledged. ``handles``: receipt handles (or ``ReceivedMessage``), or a whole
        :class:`~rocketstore.services.pop.Received`
        (every message of one receive, with no handle to parse: the fast path). Every handle is checked first (a malformed one raises
        :class:`~rocketstore.errors.InvalidReceiptHandleError`, nothing acknowledged); handles
        whose messages were handed out again are listed by the
        :class:`~rocketstore.errors.ReceiptHandleExpiredError` raised after the others'
        messages are acknowledged."""
        return self._role.ack_many(self, handles)

    def change_invisible_time(self, handle: str | ReceivedMessage, invisible_time_ms: int) -> str:
        """Make the message received with ``handle`` invisible for ``invisible_time_ms`` from
        now (longer or shorter; 0: due back at once); returns the handle, which stays valid."""
        return self._role.change_invisible_time(self, handle, invisible_time_ms)

    def pop_status(self, group: str, topic: str) -> dict[int, dict[str, int]]:
        """{queue id: {"committed": lowest un-acked offset, "next": next new offset,
        "in_flight": messages received and not acknowledged}} of ``group`` in ``topic``."""
        return self._role.pop_status(self, group, topic)

    def prepare_transaction(
        self,
        topic: str,
        body: Body,
        *,
        tags: Optional[str] = None,
        keys: Keys = None,
        properties: Optional[Mapping[str, str]] = None,
        queue_id: int = -1,
        flag: int = 0,
        producer_group: Optional[str] = None,
        check_immunity_s: Optional[int] = None,
        durable: Optional[bool] = None,
    ) -> PreparedMessage:
        """Store a transactional message as a half message, invisible in ``topic`` until
        :meth:`commit_transaction`; :meth:`rollback_transaction` drops it. The arguments are
        :meth:`put`'s, plus the ``producer_group`` (``PGROUP``) and ``check_immunity_s``
        (``CHECK_IMMUNITY_TIME_IN_SECONDS``: no check asks about it before). Stored as a
        RocketMQ broker stores one (docs/guide/transactions.md), so a broker resolves it too."""
        return self._role.prepare_transaction(
            self,
            topic,
            body,
            tags=tags,
            keys=keys,
            properties=properties,
            queue_id=queue_id,
            flag=flag,
            producer_group=producer_group,
            check_immunity_s=check_immunity_s,
            durable=durable,
        )

    def commit_transaction(
        self, prepared: PreparedMessage | MessageExt, *, durable: Optional[bool] = None
    ) -> MessageExt:
        """Deliver a prepared message into its topic, once: committing it again returns the same
        message; committing one that was rolled back raises
        :class:`~rocketstore.services.transaction.TransactionStateError`. ``prepared``: what
        :meth:`prepare_transaction` returned, or a half message from :meth:`open_transactions`."""
        return self._role.commit_transaction(self, prepared, durable=durable)

    def rollback_transaction(
        self, prepared: PreparedMessage | MessageExt, *, durable: Optional[bool] = None
    ) -> None:
        """Drop a prepared message: it is never delivered. Rolling back again does nothing;
        rolling back a committed one raises :class:`~rocketstore.services.transaction.TransactionStateError`."""
        self._role.rollback_transaction(self, prepared, durable=durable)

    def open_transactions(self) -> list[MessageExt]:
        """The half messages neither committed nor rolled back yet (checked ones too), oldest first."""
        return self._role.open_transactions(self)

    def check_transactions(
        self,
        resolve: Callable[[MessageExt], Optional[str]],
        *,
        timeout_ms: int = 6_000,
        max_checks: int = 15,
        now: Optional[int] = None,
    ) -> dict[str, int]:
        """Resolve the half messages left open longer than ``timeout_ms`` (after a crash, say):
        ``resolve(half)`` answers ``"commit"``, ``"rollback"`` or ``None`` (ask again at the next
        check; after ``max_checks`` checks the message is set aside in
        ``TRANS_CHECK_MAX_TIME_TOPIC``). Returns counts: committed, rolled_back, unknown,
        discarded, closed (already resolved). Run it now and then, or at start-up."""
        return self._role.check_transactions(
            self, resolve, timeout_ms=timeout_ms, max_checks=max_checks, now=now
        )

    def get_units(
        self, topic: str, queue_id: int, offset: int, max_msgs: int = 32, tags: Optional[str] = None
    ) -> GetMessageResult:
        """:meth:`get_message` without reading the CommitLog: ``result.units`` is a numpy array of
        ConsumeQueue units (``CQ_UNIT_DTYPE``), zero-copy when every unit scanned is taken.
        Tags are filtered by tagsCode only.

        A RocketMQ 5.x BatchCQ topic's queue (``queue.type=BatchCQ``) gives one row per queue
        offset, that is per inner message: the CommitLog offset and size of the batch record
        holding it and its BatchConsumeQueue unit's tagsCode, repeated for each message of a
        batch (a copy, not a view). A batch's unit carries no tags of its messages, so only the
        rows of a unit of one tagged message are dropped by a tag expression."""
        return self._role.get_units(self, topic, queue_id, offset, max_msgs, tags)

    def queue_units(self, topic: str, queue_id: int, start: int, count: int) -> np.ndarray:
        """Up to ``count`` units of (topic, queue_id) from queue offset ``start``, as a zero-copy
        read-only numpy view (``CQ_UNIT_DTYPE``: big-endian commitlog_offset, size, tags_code).

        The view stops at the end of a ConsumeQueue file and at the queue's end: loop from
        ``start + len(view)``. ``MessageNotFoundError`` outside [min, max] of the queue.

        A BatchCQ topic's queue: one row per queue offset (per inner message), as
        :meth:`get_units` gives them; ``records_at`` with ``queue=`` takes these rows as they are
        and yields a row per inner message.
        """
        return self._role.queue_units(self, topic, queue_id, start, count)

    def records_at(
        self,
        commitlog_offsets: Any,
        sizes: Any,
        *,
        check_crc: bool = True,
        queue: Optional[tuple[str, int, int]] = None,
    ) -> Iterator[tuple[int, Any, np.ndarray]]:
        """Decode the records at ascending CommitLog offsets (a :meth:`queue_units` range),
        columnar: yields ``(segment_start, view, records)`` per segment, ``records`` being
        ``RECORD_DTYPE`` rows whose positions are relative to ``view`` (a read-only map of the
        segment, kept alive by whoever holds it). Records that follow one another are decoded in
        one C call. A unit with no whole, undamaged record of that size raises
        ``MessageNotFoundError`` rather than skipping it (a queue range must be exact).

        ``queue=(topic, queue_id, first_queue_offset)``: the units are that queue's from that
        offset on, and each record must be the one its position names (topic, queue id, queue
        offset, PHYSICALOFFSET), else :class:`ConsumeQueueDamagedError`: a damaged unit never
        yields another message's row. For a BatchCQ queue, the rows :meth:`queue_units` gives
        (a batch record once per inner message) yield one row per inner message: the record's
        fields, its own queue offset, flag, body CRC, body and properties (spans of ``view``)."""
        return self._role.records_at(self, commitlog_offsets, sizes, check_crc=check_crc, queue=queue)

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        """The first queue offset still readable in (topic, queue_id); 0 for no queue."""
        return self._role.min_queue_offset(self, topic, queue_id)

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        """One past the last queue offset of (topic, queue_id); 0 for no queue."""
        return self._role.max_queue_offset(self, topic, queue_id)

    def queue_offset_of_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """The first queue offset of (topic, queue_id) whose message was stored at or after
        ``timestamp`` (ms); the queue's max offset when all are older (RocketMQ's
        ``getOffsetInQueueByTime``, 5.x lower-bound semantics), 0 for no queue.

        A binary search over the ConsumeQueue reading each probed record's store time, so it
        relies on store times not decreasing along a queue (they are taken under the put lock;
        a clock stepped back breaks that, and the answer is then one of the offsets around it).
        """
        return self._role.queue_offset_of_time(self, topic, queue_id, timestamp)

    def compaction_log(self, topic: str, queue_id: int) -> list[MessageExt]:
        """What a RocketMQ 5.x broker's compaction kept of (topic, queue_id), a
        ``cleanup.policy=COMPACTION`` topic's queue: the records of
        ``compaction/compactionLog`` in queue order (``commitlog_offset`` is a record's place in
        that log); [] when it has none. Read from the files, which rocketstore does not write."""
        return self._role.compaction_log(self, topic, queue_id)

    def compacted(self, topic: str, queue_id: int) -> dict[str, MessageExt]:
        """The compacted view of (topic, queue_id): {key: its latest message}, over
        :meth:`compaction_log` and then the queue's messages past it, a key whose latest
        message has an empty body (a tombstone) left out, in the order of those messages. A key
        is a message's whole ``keys`` string, as RocketMQ's compaction takes it."""
        return self._role.compacted(self, topic, queue_id)

    def queues(self) -> dict[tuple[str, int], tuple[int, int]]:
        """{(topic, queue_id): (min offset, max offset)} of every ConsumeQueue."""
        return self._role.queues(self)

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int:
        """``group``'s committed offset in (topic, queue_id); -1 when it has none."""
        return self._role.committed_offset(self, group, topic, queue_id)

    def persist_offsets(self) -> bool:
        """Write ``config/consumerOffset.json`` now if offsets changed (with the offsets process
        groups committed, :mod:`rocketstore.group`); True if written."""
        return self._role.persist_offsets(self)

    def key_offsets(self, topic: str, key: str) -> Optional[list[int]]:
        """Every CommitLog offset the index holds under ``topic#key`` (a KEYS entry or UNIQ_KEY),
        ascending; these are candidates (a hash collision lists another key's record: re-check
        it). None when a lookup reached the index's 64-per-query cap, so the list could be
        incomplete."""
        return self._role.key_offsets(self, topic, key)

    def clean(self, force: bool = False) -> dict[str, Any]:
        """Delete expired CommitLog segments now, whatever the hour or disk usage (spec §9), and
        the ConsumeQueue and index files left entirely below the new min offset.

        ``force=True`` deletes every segment but the one being written, expired or not. Either
        way a segment goes only once all its records are dispatched into the ConsumeQueues and
        the index: the pass dispatches first, and deletes nothing if that fails (a full disk;
        ``"dispatch_error"`` in the result is then that error, else None).
        Returns ``{"commitlog": [start offsets deleted], "consumequeue_files", "index_files",
        "timer_log_files", "min_offset", "disk_usage", "disk_full", "dispatch_error"}``. The background cleaner
        does the same every ``clean_resource_interval_ms`` at the ``delete_when`` hours or when
        the disk fills.
        """
        return self._role.clean(self, force)

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Make everything put so far durable; True when done within ``timeout`` seconds."""
        return self._role.flush(self, timeout)

    def queue_offsets(self) -> dict[tuple[str, int], int]:
        """{(topic, queue_id): next queue offset}."""
        return self._role.queue_offsets(self)

    def stats(self) -> dict[str, Any]:
        """Counters and sizes: puts, flush rounds (fsyncs), durable waits, offsets, segments.

        A writable store also reports its disk as read now (``disk_usage``, the fraction of the
        CommitLog's file system in use; ``disk_full``, whether puts are refused for it, which
        this reading updates) and ``refused_puts``, the puts refused while it was marked full.
        ``writer``: ``"this process"``, ``"joined"`` (its writes run in process ``writer_pid``)
        or ``"read-only"``; ``joined_writers``: the connections of joined processes this one
        serves.
        """
        return self._role.stats(self)

    def __enter__(self) -> MessageStore:
        return self


if FacadeBase is _facade_py.FacadeBase:  # (help() of the compiled put reads its text signature)
    FacadeBase.put.__signature__ = inspect.signature(StoreBase.put)  # type: ignore[attr-defined]
    FacadeBase.put_pipelined.__signature__ = inspect.signature(StoreBase.put_pipelined)  # type: ignore[attr-defined]


def open_store(path: Optional[str | os.PathLike[str]] = None, **options: Any) -> MessageStore:
    """``MessageStore(path, **options)``."""
    return MessageStore(path, **options)
