"""Delayed delivery, consumer retry and dead-letter queues (spec §12).

**Delay levels.** A put with ``delay_level`` n (1 .. 18 with the default ``message_delay_level``
table ``1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h``), or with a ``DELAY``
property > 0, is rewritten as RocketMQ 4.x's ``CommitLog.putMessage`` does: the properties gain
``REAL_TOPIC`` and ``REAL_QID`` (the queue the message was meant for), ``DELAY`` holds the level
(a larger ``DELAY`` property is clamped to the last level), and the record goes to topic
``SCHEDULE_TOPIC_XXXX``, queue ``n - 1``. Dispatch gives its ConsumeQueue unit the tagsCode
``storeTimestamp + delay(n)``, the deliver time (§2).

**Delivery.** :class:`ScheduleService` (one background thread of a writable store, every
``schedule_interval_ms``) walks each level's queue from its saved offset. A unit whose deliver
time has come (a deliver time more than the level's delay ahead of the clock counts as due now,
RocketMQ's clock-skew guard) is read and put again as a new record in ``REAL_TOPIC`` /
``REAL_QID``: body, flag, sysFlag, born timestamp and reconsume times copied, and the properties
written as RocketMQ 4.9.8 writes them: all of them, ``DELAY`` included and no ``WAIT`` added, in
the iteration order of the Java ``HashMap`` the broker decodes them into
(:func:`delivered_properties`). The copy is put straight into the append core, so its ``DELAY``
does not delay it again. The first unit not yet due ends the level's walk, so order within a
level is kept. Each level's next queue offset is kept in
``config/delayOffset.json`` (fastjson layout, ``{"offsetTable":{1:5,3:2}}``).

A record whose ``REAL_TOPIC``/``REAL_QID`` cannot be delivered (missing, not a topic, queue id
outside the topic) is logged and skipped, as RocketMQ drops a message whose ``messageTimeup``
fails.

**Exactly once across crashes.** Delivering (putting the copies) and saving progress are two
writes; a crash between them must neither lose nor repeat a message. Each pass therefore:

1. decides which units it delivers, and persists that *intent* in ``delayOffset.json``: the
   CommitLog offset ``E`` the copies will be written after, each level's offset after the pass
   and the units it skips (key ``rocketstoreDelivering``, next to ``offsetTable``; fastjson on
   a Java broker ignores unknown properties);
2. puts the copies, in unit order, in one ``put_many`` (no other record can come between them);
3. flushes the CommitLog over them;
4. persists the advanced offsets and drops the intent, in one atomic file replace.

An open that finds an intent (a crash inside 1-4) reconciles it: it walks the CommitLog from
``E`` and matches the copies it finds, in order, against the units the intent names (topic,
queue, body, properties, born timestamp, reconsume times, flag). Recovery leaves a prefix of
the records written, so the matched units are a prefix of the intent: progress advances to the
first unmatched unit, and delivery resumes there. The walk reads only what was written after
``E``, that is during one pass. A failed put or flush inside a pass reconciles the same way
before the next pass. Progress never moves past a copy that is not durable, and never stays
behind a copy that exists.

**Retry and DLQ.** :meth:`ScheduleService.send_back` is the broker's ``consumerSendMsgBack``:
the record is read back from the store, ``RETRY_TOPIC`` (if absent) is set to its topic,
``ORIGIN_MESSAGE_ID`` (if absent) to its offsetMsgId, ``WAIT=false``, and reconsume times goes
up by one. Below the group's maximum (``retryMaxTimes`` of ``subscriptionGroup.json``, 16) it goes
to ``%RETRY%<group>`` (1 queue) through delay level ``3 + reconsume times`` (or the level asked
for); at the maximum, or for a negative level, to ``%DLQ%<group>`` (1 queue, perm WRITE as 4.3
creates it) at once.

Deviations from RocketMQ 4.x, on purpose:

* RocketMQ means the copy to go without ``DELAY``, with ``WAIT=false``; 4.x (4.9.8 included)
  serializes the properties *before* it removes ``DELAY`` and sets ``WAIT=false``, so its bytes
  keep ``DELAY`` and the original ``WAIT``. rocketstore writes what 4.9.8 writes. A dead
  letter keeps the properties of the record sent back, as 4.9.8's
  ``asyncConsumerSendMsgBack`` does, with ``DELAY`` set to ``0`` there (``setDelayTimeLevel(0)``
  before the properties are serialised), so it is not delayed again.
* 4.x writes ``ORIGIN_MESSAGE_ID`` into a dead letter only if the message had been retried
  before (the property is set after the properties string); here every dead letter has it.
* The copy's born and store hosts are this store's, not the scheduled record's (the append
  core writes its own hosts); a record without ``UNIQ_KEY`` (written by a Java producer that
  had none) gets one.
* One thread serves all levels, where RocketMQ runs one timer task per level.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Optional

from rocketstore.base._background import start_weak_thread
from rocketstore.base._checks import java_int
from rocketstore.base._clock import now_ms
from rocketstore.base._failurelog import FailureLog
from rocketstore.errors import (
    InvalidDelayLevelError,
    InvalidMessageError,
    InvalidQueueIdError,
    MessageNotFoundError,
    StoreConfigError,
)
from rocketstore.files.configfiles import PERM_READ, PERM_WRITE, DelayOffsetTable, SubscriptionGroupTable
from rocketstore.format._codec_py import java_hash
from rocketstore.message import (
    PROPERTY_DELAY,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    SYSFLAG_HOSTS_V6,
    Message,
    MessageExt,
    is_valid_topic,
    validate_topic,
)
from rocketstore.queues.consumequeue import PLACEHOLDER_SIZE
from rocketstore.services.parts import StoreParts

__all__ = [
    "SCHEDULE_TOPIC",
    "RETRY_GROUP_TOPIC_PREFIX",
    "DLQ_GROUP_TOPIC_PREFIX",
    "PROPERTY_REAL_TOPIC",
    "PROPERTY_REAL_QUEUE_ID",
    "PROPERTY_RETRY_TOPIC",
    "PROPERTY_ORIGIN_MESSAGE_ID",
    "DEFAULT_MAX_RECONSUME_TIMES",
    "retry_topic",
    "dlq_topic",
    "check_delay_level",
    "ScheduleService",
    "DelayProgress",
    "pending_counts",
    "dlq_counts",
]

log = logging.getLogger("rocketstore.services.schedule")

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # TopicValidator.RMQ_SYS_SCHEDULE_TOPIC
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"  # MixAll.RETRY_GROUP_TOPIC_PREFIX
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"  # MixAll.DLQ_GROUP_TOPIC_PREFIX
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_CRC32 = "__CRC32#"  # MessageConst.PROPERTY_CRC32 (5.2+, spec §1.6)
#: ``retryMaxTimes`` of a subscription group, and what a max of -1 means.
DEFAULT_MAX_RECONSUME_TIMES = 16
RETRY_QUEUE_NUMS = 1  # SubscriptionGroupConfig.retryQueueNums
DLQ_QUEUE_NUMS = 1  # SendMessageProcessor.DLQ_NUMS_PER_GROUP
#: At most this many units are delivered per pass (bounds the intent and a reconcile's walk).
PASS_LIMIT = 1024
#: After a failed pass the thread waits this long (RocketMQ's DELAY_FOR_A_PERIOD).
RETRY_AFTER_FAILURE_MS = 10_000
#: How long a pass waits for its copies to be flushed before it gives up (and reconciles later).
FLUSH_TIMEOUT_MS = 10_000

_UNIQ_KEY_EXTRA = len(PROPERTY_UNIQ_KEY) + 2 + 56  # a generated UNIQ_KEY property, at most
_INTENT_KEY = "rocketstoreDelivering"


def retry_topic(group: str) -> str:
    """``%RETRY%<group>``."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """``%DLQ%<group>``."""
    return DLQ_GROUP_TOPIC_PREFIX + group


def check_delay_level(level: object, max_level: int) -> int:
    """``level`` if it is an int in 1 .. max_level, else :class:`InvalidDelayLevelError`."""
    if isinstance(level, bool) or not isinstance(level, int):
        raise InvalidDelayLevelError(f"delay_level must be an int, not {type(level).__name__}")
    if not 1 <= level <= max_level:
        raise InvalidDelayLevelError(f"delay_level must be between 1 and {max_level}, not {level}")
    return level


def _check_group(group: object) -> str:
    if not isinstance(group, str):
        raise TypeError(f"group must be a str, not {type(group).__name__}")
    if not group or "@" in group or not is_valid_topic(retry_topic(group)):
        raise InvalidMessageError(
            f"group {group!r} cannot name a retry topic: 1..{127 - len(RETRY_GROUP_TOPIC_PREFIX)} "
            "characters of [%|a-zA-Z0-9_-]"
        )
    return group


def java_hashmap_order(keys: Iterable[str]) -> list[str]:
    """``keys`` (distinct str, in insertion order) in the order a ``java.util.HashMap`` (Java 8+)
    they were put into in that order iterates them: bucket by bucket, ``(h ^ h >>> 16) & (n - 1)``
    of ``String.hashCode`` h, then insertion order within a bucket; the table starts at 16
    buckets and doubles past 3/4 full, or when a bucket reaches 9 entries while it has fewer
    than 64. (A bucket of 9 or more at 64 buckets and up becomes a red-black tree, whose order
    is not reproduced: that takes 9 property names whose spread hashes agree in 6 low bits.)"""
    capacity = 16
    buckets: list[list[tuple[int, str]]] = [[] for _ in range(capacity)]

    def grow(buckets: list[list[tuple[int, str]]], capacity: int) -> tuple[list[list[tuple[int, str]]], int]:
        capacity *= 2
        grown: list[list[tuple[int, str]]] = [[] for _ in range(capacity)]
        for bucket in buckets:
            for spread, key in bucket:
                grown[spread & (capacity - 1)].append((spread, key))
        return grown, capacity

    for size, key in enumerate(keys, 1):
        h = java_hash(key) & 0xFFFFFFFF
        spread = h ^ (h >> 16)
        bucket = buckets[spread & (capacity - 1)]
        bucket.append((spread, key))
        if len(bucket) > 8 and capacity < 64:  # treeifyBin on a small table: resize
            buckets, capacity = grow(buckets, capacity)
        if size > capacity * 3 // 4:
            buckets, capacity = grow(buckets, capacity)
    return [key for bucket in buckets for _spread, key in bucket]


def delivered_properties(props: Mapping[str, str]) -> dict[str, str]:
    """The properties of a due message's copy, as RocketMQ 4.9.8 writes them: every property of
    the scheduled record, ``DELAY`` included, nothing added, in the order of the ``HashMap``
    ``MessageDecoder.decode`` reads them into (``messageTimeup`` serialises that map before it
    clears ``DELAY`` and sets ``WAIT=false``). A §1.6 CRC32 property, which covers the
    scheduled record only, is left out (the core writes the copy's own when it is on)."""
    return {key: props[key] for key in java_hashmap_order(props) if key != PROPERTY_CRC32}


class DelayProgress(DelayOffsetTable):
    """``delayOffset.json`` plus the intent of a delivery pass in progress (see the module
    docstring): ``{"commitlogOffset": E, "fromOffsets": {level: first unit}, "nextOffsets":
    {level: offset after the pass}, "skipped": [[level, offset], ...]}`` under
    ``rocketstoreDelivering``, or nothing between passes."""

    def reset(self) -> None:
        super().reset()
        self.intent: Optional[dict[str, Any]] = None

    def restore(self, offsets: dict[int, int], intent: Optional[dict[str, Any]]) -> None:
        """Put back the offsets (``as_dict()``) and intent a failed persist would have replaced."""
        with self._lock:
            self._table = dict(offsets)
            self.intent = intent
            self.dirty = True

    def decode(self, data: Any) -> None:
        intent = None
        if isinstance(data, dict) and _INTENT_KEY in data:
            data = dict(data)
            intent = _decode_intent(data.pop(_INTENT_KEY))
        super().decode(data)
        self.intent = intent

    def encode(self) -> dict[str, Any]:
        out = super().encode()
        if self.intent is not None:
            out[_INTENT_KEY] = {
                "commitlogOffset": self.intent["commitlogOffset"],
                "fromOffsets": dict(sorted(self.intent["fromOffsets"].items())),
                "nextOffsets": dict(sorted(self.intent["nextOffsets"].items())),
                "skipped": [list(u) for u in sorted(self.intent["skipped"])],
            }
        return dict(sorted(out.items()))


def _decode_intent(value: Any) -> dict[str, Any]:
    def integer(v: object, what: str) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise StoreConfigError(f"{_INTENT_KEY}: {what} is not a non-negative int: {v!r}")
        return v

    if not isinstance(value, dict):
        raise StoreConfigError(f"{_INTENT_KEY} must be an object")

    def levels(name: str) -> dict[int, int]:
        table = value.get(name) or {}
        if not isinstance(table, dict):
            raise StoreConfigError(f"{_INTENT_KEY}: {name} must be an object")
        return {
            integer(int(k) if isinstance(k, str) and k.isdigit() else k, "level"): integer(v, "offset")
            for k, v in table.items()
        }

    skipped = value.get("skipped") or []
    if not isinstance(skipped, list):
        raise StoreConfigError(f"{_INTENT_KEY}: skipped must be a list")
    return {
        "commitlogOffset": integer(value.get("commitlogOffset"), "commitlogOffset"),
        "fromOffsets": levels("fromOffsets"),
        "nextOffsets": levels("nextOffsets"),
        "skipped": {
            (integer(u[0], "level"), integer(u[1], "offset"))
            for u in skipped
            if isinstance(u, list) and len(u) == 2
        },
    }


class _Unit:
    """One unit a pass delivers: where it is, what its copy is, how to recognise the copy."""

    __slots__ = ("level", "queue_offset", "item", "identity")

    def __init__(
        self, level: int, queue_offset: int, item: tuple[Any, ...], identity: tuple[Any, ...]
    ) -> None:
        self.level = level
        self.queue_offset = queue_offset
        self.item = item
        self.identity = identity


class ScheduleService:
    """The delay service of one writable :class:`~rocketstore.MessageStore` (see the module
    docstring). Built by the store when it opens; it reconciles an interrupted pass at once."""

    def __init__(
        self, parts: StoreParts, *, clock: Optional[Callable[[], int]] = None, interval_ms: int = 100
    ):
        self._parts = parts
        cfg = parts.config
        self.levels_ms = tuple(cfg.delay_levels_ms)
        self.max_level = len(self.levels_ms)
        self.clock = clock or now_ms
        self._interval_ms = interval_ms
        self._progress = DelayProgress.in_store(parts.path)
        self._groups = SubscriptionGroupTable.in_store(parts.path)
        self._round_robin: dict[str, itertools.count[int]] = {}
        self._lock = threading.Lock()  # one pass at a time
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._failures = FailureLog(log, "delayed delivery", f"retried every {RETRY_AFTER_FAILURE_MS} ms")
        self._needs_reconcile = self._progress.intent is not None
        born_v6 = ":" in (cfg.born_host or "")
        store_v6 = ":" in (cfg.store_host or "")
        self._host_extra = 12 * born_v6 + 12 * store_v6
        #: counters: copies put, units skipped as undeliverable, passes reconciled
        self.delivered = self.dropped = self.reconciled = 0
        self._schedule_topic_ready = False  # created on the first delayed put
        if self._needs_reconcile:
            with self._lock:
                self._reconcile()

    # ---- lifecycle ----

    def start(self) -> None:
        """Start the background thread (not when ``interval_ms`` is 0)."""
        if self._interval_ms and self._thread is None:
            # holds the service only during a pass (it holds the store weakly): a dropped store closes
            self._thread = start_weak_thread(self, ScheduleService._tick, self._stop, "rocketstore-schedule")

    def close(self) -> None:
        """Stop the thread (a pass in progress completes) and save progress. Idempotent."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._lock:
            if self._progress.dirty and self._progress.intent is None:
                self._progress.persist()

    def _tick(self) -> float:
        """One pass of the background thread; the seconds until the next."""
        try:
            delivered, more, next_due = self._pass(None)
        except Exception as exc:
            self._failures.failed(exc)
            wait_ms = RETRY_AFTER_FAILURE_MS
        else:
            self._failures.succeeded()
            wait_ms = 0 if more else self._interval_ms
            if next_due is not None:
                wait_ms = min(wait_ms, max(0, next_due - self.clock()))
        return wait_ms / 1000

    # ---- topics ----

    def _ensure_topic(self, topic: str, queues: int, perm: int) -> None:
        self._parts.topics.ensure(topic, queues, perm=perm)

    # ---- the rewrite on put (§12) ----

    def rewrite(
        self, topic: str, queue_id: int, properties: Optional[Mapping[str, str]], delay_level: Optional[int]
    ) -> tuple[str, int, Optional[Mapping[str, str]]]:
        """``(topic, queue_id, properties)`` of a put: rewritten into SCHEDULE_TOPIC_XXXX when it is
        delayed (``delay_level``, else a ``DELAY`` property > 0), else returned as given."""
        props = dict(properties) if properties else {}
        if delay_level is not None:
            level = check_delay_level(delay_level, self.max_level)
        else:
            text = props.get(PROPERTY_DELAY)
            parsed = java_int(text)
            if parsed is None:
                raise InvalidDelayLevelError(f"the DELAY property {text!r} is not a decimal int")
            if parsed <= 0:
                return topic, queue_id, properties  # not delayed (getDelayTimeLevel() <= 0)
            level = min(parsed, self.max_level)
        validate_topic(topic)
        if topic == SCHEDULE_TOPIC:
            raise InvalidMessageError(f"a message for {SCHEDULE_TOPIC} cannot be delayed again")
        if isinstance(queue_id, bool) or not isinstance(queue_id, int):
            raise InvalidQueueIdError(f"queue id must be an int, not {type(queue_id).__name__}")
        queue_id = self._parts.topics.queue_for_put(topic, queue_id, self._round_robin)
        if not self._schedule_topic_ready:
            self._ensure_topic(SCHEDULE_TOPIC, self.max_level, PERM_READ | PERM_WRITE)
            self._schedule_topic_ready = True
        props[PROPERTY_DELAY] = str(level)
        props[PROPERTY_REAL_TOPIC] = topic
        props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
        return SCHEDULE_TOPIC, level - 1, props

    def put(
        self, core: Any, topic: str, body: Any, queue_id: int, flag: int, wait: int, delay_level: Any
    ) -> Any:
        """A delayed put with no tags, keys or properties (``topic`` a user topic the caller
        checked, so not SCHEDULE_TOPIC; ``queue_id`` and ``flag`` checked ints): :meth:`rewrite`'s
        checks, errors and properties without copying a mapping first, then the core's put."""
        level = check_delay_level(delay_level, self.max_level)
        topics = self._parts.topics
        queue_id = topics.queue_for_put(topic, queue_id, self._round_robin)
        if not self._schedule_topic_ready:
            self._ensure_topic(SCHEDULE_TOPIC, self.max_level, PERM_READ | PERM_WRITE)
            self._schedule_topic_ready = True
        props = self._parts.commitlog.codec.encode_properties(
            {PROPERTY_DELAY: str(level), PROPERTY_REAL_TOPIC: topic, PROPERTY_REAL_QUEUE_ID: str(queue_id)}
        )
        return core.put(SCHEDULE_TOPIC, body, props, level - 1, flag, 0, 0, 0, 0, None, wait)

    # ---- delivery ----

    def deliver(self, now: Optional[int] = None) -> int:
        """Deliver every delayed message due at ``now`` (default: the clock); returns how many."""
        total = 0
        while True:
            delivered, more, _next_due = self._pass(now)
            total += delivered
            if not more:
                return total

    def _pass(self, now: Optional[int]) -> tuple[int, bool, Optional[int]]:
        """One pass over every level: (copies put, budget exhausted, earliest deliver time left)."""
        with self._lock:
            if self._needs_reconcile:
                self._reconcile()
            now = self.clock() if now is None else now
            units, starts, nexts, skipped, more, next_due = self._plan(now)
            if not nexts:
                return 0, False, next_due
            progress = self._progress
            if not units:
                for level, offset in nexts.items():
                    progress.update(level, offset)
                progress.persist()
                return 0, more, next_due
            core = self._parts.commitlog.core
            intent = {
                "commitlogOffset": core.wrote_offset,
                "fromOffsets": starts,
                "nextOffsets": nexts,
                "skipped": skipped,
            }
            # From here until the advanced offsets are saved, a failure leaves the intent in
            # memory as on disk: the next pass (or open) settles it by _reconcile.
            self._needs_reconcile = True
            progress.intent = intent
            progress.dirty = True
            progress.persist()
            core.put_many([u.item for u in units], 0)  # stores all or raises a PutError
            if not core.flush(FLUSH_TIMEOUT_MS):
                raise RuntimeError("delayed delivery: the CommitLog flush timed out")
            saved = progress.as_dict()
            try:
                for level, offset in nexts.items():
                    progress.update(level, offset)
                progress.intent = None
                progress.persist()
            except BaseException:
                progress.restore(saved, intent)
                raise
            self._needs_reconcile = False
            self.delivered += len(units)
            return len(units), more, next_due

    def _plan(
        self, now: int
    ) -> tuple[list[_Unit], dict[int, int], dict[int, int], set[tuple[int, int]], bool, Optional[int]]:
        """The units due at ``now``, in level then queue order (at most PASS_LIMIT), where each
        level's walk started and its offset after them, the units skipped, whether the budget
        ran out, and the earliest deliver time not yet reached."""
        parts = self._parts
        parts.dispatcher.catch_up()
        units: list[_Unit] = []
        starts: dict[int, int] = {}
        nexts: dict[int, int] = {}
        skipped: set[tuple[int, int]] = set()
        next_due = None
        budget = PASS_LIMIT
        for level in range(1, self.max_level + 1):
            cq = parts.queues.get(SCHEDULE_TOPIC, level - 1)
            if cq is None or budget <= 0:
                continue
            start = self._progress.get(level)
            if start < cq.min_offset:
                log.warning(
                    "delay level %d: offset %d is below the queue's first %d (removed)",
                    level,
                    start,
                    cq.min_offset,
                )
                start = cq.min_offset
            if start > cq.max_offset:  # the queue lost units (a power cut): its end is next
                log.warning(
                    "delay level %d: offset %d is past the queue's end %d", level, start, cq.max_offset
                )
                start = cq.max_offset
            delay = self.levels_ms[level - 1]
            pos = start
            waiting = False
            while pos < cq.max_offset and budget > 0 and not waiting:
                view = cq.units(pos, min(budget, 4096))
                if not len(view):
                    break
                rows = view.tolist()
                del view
                examined = 0
                for commitlog_offset, size, deliver_ts in rows:
                    if budget <= 0:
                        break
                    if commitlog_offset == 0 and size == PLACEHOLDER_SIZE:
                        examined += 1
                        continue
                    if deliver_ts <= -(1 << 31) - 1:  # a ConsumeQueueExt address: recompute
                        deliver_ts = self._store_time(commitlog_offset) + delay
                    if deliver_ts > now + delay and deliver_ts > self.clock() + delay:
                        # the clock went back (RocketMQ's skew guard): deliver now. The clock is
                        # read again: a put after this pass read ``now`` is not a skew
                        deliver_ts = now
                    if deliver_ts > now:
                        next_due = deliver_ts if next_due is None else min(next_due, deliver_ts)
                        waiting = True
                        break
                    budget -= 1
                    unit = self._unit(level, pos + examined, commitlog_offset)
                    if unit is None:
                        skipped.add((level, pos + examined))
                    else:
                        units.append(unit)
                    examined += 1
                pos += examined
            if pos != self._progress.get(level):
                starts[level], nexts[level] = start, pos
        return units, starts, nexts, skipped, budget <= 0, next_due

    def _store_time(self, commitlog_offset: int) -> int:
        try:
            return int(self._parts.commitlog.read(commitlog_offset).store_timestamp)
        except MessageNotFoundError:
            return 0

    def _unit(self, level: int, queue_offset: int, commitlog_offset: int) -> Optional[_Unit]:
        """The delivery of one scheduled record, or None when it cannot be delivered."""
        parts = self._parts
        try:
            sched = parts.commitlog.read(commitlog_offset)
        except MessageNotFoundError:
            log.warning("delay level %d unit %d: record at %d is gone", level, queue_offset, commitlog_offset)
            return None
        props = sched.properties or {}
        topic = props.get(PROPERTY_REAL_TOPIC)
        queue_id = java_int(props.get(PROPERTY_REAL_QUEUE_ID))
        why = None
        if topic is None or not is_valid_topic(topic) or topic == SCHEDULE_TOPIC:
            why = f"REAL_TOPIC {topic!r} is not a topic"
        elif queue_id is None or queue_id < 0:
            why = f"REAL_QID {props.get(PROPERTY_REAL_QUEUE_ID)!r} is not a queue id"
        elif queue_id >= parts.topics.queues_for_put(topic):
            why = f"REAL_QID {queue_id} is outside topic {topic!r}"
        copy_props = delivered_properties(props)
        raw = b""
        if why is None:
            try:
                raw = parts.commitlog.codec.encode_properties(copy_props)
            except InvalidMessageError as exc:
                why = str(exc)
        body = bytes(sched.stored_body)  # a compressed body stays as the producer stored it
        unique_key = copy_props.get(PROPERTY_UNIQ_KEY)
        length = (
            (
                91
                + len(body)
                + len((topic or "").encode("utf-8"))
                + len(raw)
                + self._host_extra
                + (0 if unique_key is not None else _UNIQ_KEY_EXTRA)
            )
            if why is None
            else 0
        )
        if why is None and (
            length > parts.config.max_message_size or length + 8 > parts.config.commitlog_file_size
        ):
            why = f"its copy would be a {length}-byte record, too large for this store"
        if why is not None:
            self.dropped += 1
            log.error(
                "delay level %d unit %d (record %d) cannot be delivered, skipped: %s",
                level,
                queue_offset,
                commitlog_offset,
                why,
            )
            return None
        sys_flag = sched.sys_flag & ~SYSFLAG_HOSTS_V6
        item = (
            topic,
            body,
            raw,
            queue_id,
            sched.flag,
            sched.born_timestamp,
            sys_flag,
            sched.reconsume_times,
            unique_key,
        )
        identity = (
            topic,
            queue_id,
            body,
            copy_props,
            sched.born_timestamp,
            sched.reconsume_times,
            sched.flag,
        )
        return _Unit(level, queue_offset, item, identity)

    # ---- crash recovery ----

    def _reconcile(self) -> None:
        """Settle the intent of an interrupted pass (the lock is held): advance each level past
        the copies that exist, to the first unit whose copy does not."""
        progress = self._progress
        intent = progress.intent
        if intent is None:
            self._needs_reconcile = False
            return
        parts = self._parts
        parts.dispatcher.catch_up()
        starts, nexts, skipped = intent["fromOffsets"], intent["nextOffsets"], intent["skipped"]
        expected: list[tuple[int, int, Any]] = []  # (level, queue offset, identity or None: nothing to find)
        for level in sorted(nexts):
            cq = parts.queues.get(SCHEDULE_TOPIC, level - 1)
            for q in range(starts.get(level, progress.get(level)), nexts[level]):
                if (level, q) in skipped:
                    continue
                try:
                    commitlog_offset, _size, _code = cq.unit(q)
                except (AttributeError, MessageNotFoundError, IndexError, ValueError):
                    expected.append((level, q, False))  # the unit is gone: deliver it again
                    continue
                unit = self._unit(level, q, commitlog_offset)
                expected.append((level, q, unit.identity if unit is not None else None))
        matched = self._match(intent["commitlogOffset"], expected)
        first = next(((level, q) for level, q, ident in expected[matched:] if ident is not None), None)
        for level in sorted(nexts):
            if first is None or level < first[0]:
                progress.update(level, nexts[level])
            elif level == first[0]:
                progress.update(level, first[1])
        parts.commitlog.core.flush(FLUSH_TIMEOUT_MS)
        progress.intent = None
        progress.dirty = True
        progress.persist()
        self._needs_reconcile = False
        self.reconciled += 1
        log.warning(
            "delayed delivery: settled an interrupted pass, %d of %d copies were written",
            sum(1 for _l, _q, ident in expected[:matched] if ident),
            len(expected),
        )

    def _match(self, start: int, expected: list[tuple[int, int, Any]]) -> int:
        """How many entries of ``expected`` lead the copies found from CommitLog ``start`` on
        (``None`` entries match nothing and are passed over; ``False`` ones stop the match)."""
        commitlog = self._parts.commitlog
        j = 0

        def skip_none(j: int) -> int:
            while j < len(expected) and expected[j][2] is None:
                j += 1
            return j

        j = skip_none(j)
        if j == len(expected) or expected[j][2] is False:
            return j
        for mf, rows in commitlog.chunks(start, None):
            view = mf.view(0, commitlog.readable_end(mf))
            for row in rows:
                rec = commitlog.codec.record_from_row(view, row, copy_body=True)
                if _is_copy(rec, expected[j][2]):
                    j = skip_none(j + 1)
                    if j == len(expected) or expected[j][2] is False:
                        return j
        return j

    # ---- retry and DLQ ----

    def send_back(
        self,
        group: str,
        message: MessageExt,
        delay_level: int = 0,
        max_reconsume_times: Optional[int] = None,
        *,
        reconsume_times: Optional[int] = None,
    ) -> Any:
        """See :meth:`MessageStore.send_back`. ``reconsume_times``: the copy's (default: the
        record's plus one); POP gives its delivery count."""
        _check_group(group)
        if isinstance(delay_level, bool) or not isinstance(delay_level, int):
            raise InvalidDelayLevelError(f"delay_level must be an int, not {type(delay_level).__name__}")
        if delay_level > self.max_level:
            raise InvalidDelayLevelError(
                f"delay_level must be at most {self.max_level} (0: back-off, < 0: DLQ), not {delay_level}"
            )
        if max_reconsume_times is None:
            max_reconsume_times = self._groups.retry_max_times(group)
        elif (
            isinstance(max_reconsume_times, bool)
            or not isinstance(max_reconsume_times, int)
            or max_reconsume_times < -1
        ):
            raise InvalidMessageError(
                f"max_reconsume_times must be an int >= -1, not {max_reconsume_times!r}"
            )
        if max_reconsume_times == -1:
            max_reconsume_times = DEFAULT_MAX_RECONSUME_TIMES
        if not isinstance(message, MessageExt):
            raise TypeError(
                f"send_back needs a MessageExt read from this store, not {type(message).__name__}"
            )
        msg = self._parts.commitlog.read(message.commitlog_offset)
        if msg.msg_id != message.msg_id:
            raise MessageNotFoundError(f"message {message.msg_id} is not in this store")
        props = {k: v for k, v in (msg.properties or {}).items() if k != PROPERTY_CRC32}
        props.setdefault(PROPERTY_RETRY_TOPIC, msg.topic)
        props[PROPERTY_WAIT] = "false"
        reconsume = msg.reconsume_times
        if reconsume >= max_reconsume_times or delay_level < 0:
            topic = dlq_topic(group)
            # 4.9.8's setDelayTimeLevel(0), serialised with the rest: DELAY=0 delays nothing
            props[PROPERTY_DELAY] = "0"
            self._ensure_topic(topic, DLQ_QUEUE_NUMS, PERM_WRITE)
        else:
            topic = retry_topic(group)
            props[PROPERTY_DELAY] = str(min(delay_level or 3 + reconsume, self.max_level))
            self._ensure_topic(topic, RETRY_QUEUE_NUMS, PERM_READ | PERM_WRITE)
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, msg.msg_id)
        copy = Message(
            topic,
            bytes(msg.stored_body),
            properties=props,
            flag=msg.flag,
            queue_id=0,
            born_timestamp=msg.born_timestamp,
            reconsume_times=reconsume + 1 if reconsume_times is None else reconsume_times,
            sys_flag=msg.sys_flag & ~SYSFLAG_HOSTS_V6,
        )
        return self._parts.put_message(copy, None, 0)  # the store's own put into a system topic

    def update_group(self, group: str, retry_max_times: int) -> dict[str, Any]:
        """Set a subscription group's ``retryMaxTimes`` in ``subscriptionGroup.json``."""
        _check_group(group)
        if (
            isinstance(retry_max_times, bool)
            or not isinstance(retry_max_times, int)
            or not 0 <= retry_max_times <= 0x7FFFFFFF
        ):
            raise InvalidMessageError(f"retry_max_times must be an int >= 0, not {retry_max_times!r}")
        entry: dict[str, Any] = self._groups.create(group, retry_max_times=retry_max_times)
        self._groups.persist()
        return entry

    def retry_max_times(self, group: str) -> int:
        """``group``'s ``retryMaxTimes`` (``subscriptionGroup.json``; 16 when it has none)."""
        times = self._groups.retry_max_times(group)
        return DEFAULT_MAX_RECONSUME_TIMES if times == -1 else times

    # ---- state ----

    def offsets(self) -> dict[int, int]:
        """{level: next queue offset of SCHEDULE_TOPIC_XXXX queue level-1}."""
        offsets: dict[int, int] = self._progress.as_dict()
        return offsets


def _is_copy(rec: MessageExt, identity: tuple[Any, ...]) -> bool:
    topic, queue_id, body, props, born, reconsume, flag = identity
    if (
        rec.topic != topic
        or rec.queue_id != queue_id
        or rec.born_timestamp != born
        or rec.reconsume_times != reconsume
        or rec.flag != flag
        or bytes(rec.stored_body) != body
    ):
        return False
    found = {k: v for k, v in (rec.properties or {}).items() if k != PROPERTY_CRC32}  # the core's
    if PROPERTY_UNIQ_KEY not in props:  # the core generated one for the copy
        found = {k: v for k, v in found.items() if k != PROPERTY_UNIQ_KEY}
    return bool(found == props)


def pending_counts(
    queues: Mapping[tuple[str, int], tuple[int, int]], offsets: Mapping[int, int]
) -> dict[int, int]:
    """{level: delayed messages not yet delivered}, from ``store.queues()`` and the levels'
    offsets (``delayOffset.json``); levels with none are left out."""
    out = {}
    for (topic, queue_id), (lo, hi) in queues.items():
        if topic != SCHEDULE_TOPIC:
            continue
        level = queue_id + 1
        waiting = hi - max(lo, offsets.get(level, 0))
        if waiting > 0:
            out[level] = waiting
    return dict(sorted(out.items()))


def dlq_counts(queues: Mapping[tuple[str, int], tuple[int, int]]) -> dict[str, int]:
    """{group: messages in its ``%DLQ%<group>`` topic}, from ``store.queues()``."""
    out: dict[str, int] = {}
    for (topic, _queue_id), (lo, hi) in queues.items():
        if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            group = topic[len(DLQ_GROUP_TOPIC_PREFIX) :]
            out[group] = out.get(group, 0) + hi - lo
    return dict(sorted(out.items()))
