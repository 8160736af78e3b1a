"""The POP service of a writable store (:class:`PopService`): its receive and ack paths over the
lanes it folds from the revive log (rocketstore.services.pop.records), and the snapshot it
writes (rocketstore.services.pop.snapshot); the package's docstring says how."""

from __future__ import annotations

import heapq
import json
import logging
from collections.abc import Callable, Iterable
from time import time_ns
from typing import Any, NamedTuple, Optional

from rocketstore.base._checks import plain_str
from rocketstore.base._clock import now_ms
from rocketstore.errors import (
    FlushTimeoutError,
    InvalidMessageError,
    InvalidReceiptHandleError,
    MessageNotFoundError,
    ReceiptHandleExpiredError,
    RocketStoreError,
    StoreClosedError,
)
from rocketstore.files.configfiles import (
    PERM_READ,
    PERM_WRITE,
    ConsumerOffsetTable,
)
from rocketstore.format.tagfilter import TagFilter
from rocketstore.message import MessageExt, is_valid_topic
from rocketstore.queues.consumequeue import PLACEHOLDER_SIZE
from rocketstore.services.parts import StoreParts
from rocketstore.services.pop.received import (
    MAX_INVISIBLE_TIME_MS,
    MAX_RECEIVE_BATCH,
    Lane,
    Received,
    ReceivedMessage,
)
from rocketstore.services.pop.records import (
    ACK_RANGE_JSON,
    BATCH_ACK_TAG,
    CK_TAG,
    REVIVE_GROUP,
    REVIVE_QUEUE_ID,
    checkpoint_json,
    checkpoint_record,
    dumps,
    revive_topic,
)
from rocketstore.services.pop.snapshot import PopState
from rocketstore.services.schedule import _check_group, retry_topic
from rocketstore.status import GetMessageStatus

__all__ = ["PopService", "QuickPull", "PASS_OVER_PULLS", "COMPACT_SLACK", "REPLAY_STEP", "FLUSH_TIMEOUT_MS"]

log = logging.getLogger("rocketstore.services.pop")

#: How long a snapshot waits for the CommitLog flush before it gives up (the snapshot is skipped).
FLUSH_TIMEOUT_MS = 10_000
#: A receive passes over at most this many pulls' worth of units with no message (placeholders,
#: records gone) in one queue; the next receive goes on from there.
PASS_OVER_PULLS = 64
#: The pull statuses that pass over units without a message.
_PASSED_OVER = (
    GetMessageStatus.NO_MATCHED_MESSAGE,
    GetMessageStatus.MESSAGE_WAS_REMOVING,
    GetMessageStatus.OFFSET_FOUND_NULL,
)
#: A queue's heap of deadlines is compacted when it has this many entries more than twice its
#: messages in flight.
COMPACT_SLACK = 256
#: Revive-log records read per step when an open replays them.
REPLAY_STEP = 4096

_MATCH_ALL = TagFilter.parse(None)
#: The latest clock reading a receive's deadline (now plus the longest invisible time) fits an int64.
_LATEST_NOW = (1 << 63) - 1 - MAX_INVISIBLE_TIME_MS

_DLQ = "dlq"
_GONE = "gone"


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidMessageError(f"{name} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidMessageError(f"{name} must be between {low} and {high}, not {value}")
    return value


class QuickPull(NamedTuple):
    """What the codec's one-call pull ``queue_messages`` reads a writable store's queues from
    (a PopService's ``quick``), and the dispatcher's ``catch_up``."""

    queues: Any
    segments: Any
    core: Any
    catch_up: Callable[[], Any]


class PopService:
    """The POP state of one writable store (see the module docstring).

    ``pull(group, topic, queue_id, offset, max_msgs)`` is the store's checked ``get_message``;
    ``lookup(topic, queue_id, offset)`` its ``get_by_queue_offset``; ``send_back(group, message,
    delay_level, reconsume_times=)`` and ``retry_max_times(group)`` the delay service's (for the
    DLQ). ``quick``, optional: what the codec's one-call pull (``queue_messages``) reads from
    (a :class:`QuickPull`); with it, the common receive of a queue is one step,
    :meth:`receive_run` (else, and whenever that declines, :meth:`_receive_lane`).
    """

    COMPACT_SLACK = COMPACT_SLACK  # read by codec.PopAcker

    #: ``ack(handle)``: see :meth:`MessageStore.ack`. The implementation's ``PopAcker.ack``
    #: itself (no frame of this class on the way): the steps of :meth:`_parse`,
    #: :meth:`_current` and :meth:`_finish` for one offset, in one call under the lock; the
    #: periodic snapshot is looked at once every ``POP_SNAPSHOT_CHECK_EVERY`` acks.
    ack: Callable[[str | ReceivedMessage], bool]

    def __init__(
        self,
        parts: StoreParts,
        offsets: ConsumerOffsetTable,
        *,
        pull: Callable[..., Any],
        lookup: Callable[[str, int, int], MessageExt],
        send_back: Callable[..., Any],
        retry_max_times: Callable[[str], int],
        clock: Optional[Callable[[], int]] = None,
        quick: Optional[QuickPull] = None,
    ) -> None:
        self._parts = parts
        self._offsets = offsets
        self._pull = pull
        self._lookup = lookup
        self._send_back = send_back
        self._retry_max_times = retry_max_times
        self._quick = quick
        self.clock = clock or now_ms
        cfg = parts.config
        self.topic = revive_topic(cfg.broker_cluster_name)
        self.snapshot_interval_ms = cfg.pop_snapshot_interval_ms
        self._lock = parts.commitlog.codec.FastRLock()  # an ack takes it: the compiled one is cheap
        self._lanes: dict[tuple[str, str, int], Lane] = {}
        self._names_checked: set[tuple[str, str]] = set()  # (group, topic) a receive checked
        self.by_prefix: dict[str, Lane] = {}
        self._state = PopState.in_store(parts.path)
        self._seq = 0
        self._rotation = 0
        self.log_next = 0  # the revive queue offset after the last record applied
        self._snapshot_offset = 0
        self._last_snapshot = self.clock()
        codec = parts.commitlog.codec
        self._props = {tag: codec.encode_properties({"TAGS": tag}) for tag in (CK_TAG, BATCH_ACK_TAG)}
        self.ack_props = self._props[BATCH_ACK_TAG]
        # ack() in one call of the compiled twin (or its pure one): parse, check, record, apply
        self._lane_type = codec.PopLane
        self.receipt_handles = codec.receipt_handles
        self.received_rows = codec.received_rows
        self._reconsume_times = codec.reconsume_times
        self._queue_messages = codec.queue_messages
        self._checkpoint_run = codec.checkpoint_run
        # receive: the common step of one queue (None: always the general path); a function
        # of the service, as a test may swap it: run(service, key, now, want, invisible, out)
        self._receive_run: Optional[Callable[..., bool]] = (
            PopService.receive_run if quick is not None else None
        )
        self._acks_closed = False  # set by close: every ack raises StoreClosedError from then on
        self._acker = codec.PopAcker(
            self,
            ReceivedMessage,
            PopService.ack_handle,
            PopService._snapshot_check,
            self._lock,
            self._offsets,
            self._parts.commitlog,
        )
        self.ack = self._acker.ack
        self.topic_ready = False
        self._closed = False
        self.loading = True  # offsets are committed once the open has replayed everything
        self.dead_lettered = 0
        self.snapshot_failures = 0
        self.lost = 0
        self.skipped_records = 0
        self._load()

    # ---- the log ----

    def _write(self, tag: str, record: dict[str, Any] | bytes) -> Optional[FlushTimeoutError]:
        """Append one record (a dict, or its JSON already made) to the revive log. A put that
        stored nothing raises (then nothing is applied); one that stored the record but whose
        flush did not confirm in time (``SYNC_FLUSH``) returns that error: the record is in the
        log, the caller applies it."""
        if not self.topic_ready:
            self._ensure_topic()
        body = record if isinstance(record, bytes) else dumps(record)
        try:
            result = self._parts.commitlog.core.put(
                self.topic, body, self._props[tag], REVIVE_QUEUE_ID, 0, 0, 0, 0, 0, None, -1
            )
        except FlushTimeoutError as exc:
            self.log_next = exc.result.queue_offset + 1
            return exc
        self.log_next = result.queue_offset + 1
        return None

    def _ensure_topic(self) -> None:
        self._parts.topics.ensure(self.topic, 1, perm=PERM_READ | PERM_WRITE)
        self.topic_ready = True

    def _unconfirmed(self, timeout: Optional[FlushTimeoutError], what: str) -> None:
        if timeout is not None:
            log.warning("POP: the flush of %s did not confirm in time (%s); it is recorded", what, timeout)

    def _lane_of(self, group: str, topic: str, queue_id: int, start: int, commit: bool = True) -> Lane:
        """The lane of (group, topic, queue_id), made starting at ``start`` if new (and, with
        ``commit``, its start committed; an open commits once it has replayed everything)."""
        key = (group, topic, queue_id)
        lane = self._lanes.get(key)
        if lane is None:
            if commit:
                self._offsets.commit(group, topic, queue_id, start)  # checks the names first
            lane = self._lanes[key] = self._lane_type(
                group, topic, queue_id, start, ConsumerOffsetTable.key(topic, group)
            )
            self.by_prefix[lane.prefix] = lane
        return lane

    def _apply_ck(
        self, lane: Lane, deadline: int, offsets: tuple[int, ...], numbers: tuple[int, ...], nxt: int
    ) -> Optional[tuple[int, int]]:
        """Apply a checkpoint; returns the one (deadline, number) object every offset got when
        their numbers are equal (an acknowledgement of the batch checks them by identity). A
        checkpoint of no offset only moves the lane past units with no message."""
        stamp: Optional[tuple[int, int]] = None
        if not offsets:
            if nxt > lane.next:
                lane.next = nxt
                self._committed_moved(lane)
            return None
        if numbers.count(numbers[0]) == len(numbers):
            stamp = (deadline, numbers[0])
            lane.inflight.update(dict.fromkeys(offsets, stamp))
        else:
            lane.inflight.update(zip(offsets, [(deadline, n) for n in numbers]))
        if nxt > lane.next:
            lane.next = nxt
        self._seq += 1
        heapq.heappush(lane.heap, (deadline, self._seq, offsets, numbers))
        self._committed_moved(lane)
        return stamp

    def _apply_ack(self, lane: Lane, offsets: Iterable[int]) -> None:
        inflight = lane.inflight
        for o in offsets:
            inflight.pop(o, None)
        self._committed_moved(lane)
        if len(lane.heap) > 2 * len(inflight) + COMPACT_SLACK:
            lane.compact()

    def _committed_moved(self, lane: Lane) -> None:
        if lane.advance() and not self.loading:
            self._offsets.commit_key(lane.key, lane.queue_id, lane.committed)

    def _apply_record(self, tag: Optional[str], body: bytes) -> bool:
        """Apply one revive-log record read back; False when it is not one of rocketstore's."""
        try:
            r = json.loads(body)
            group, topic, qid = r["c"], r["t"], r["q"]
            if qid.__class__ is not int or not 0 <= qid <= 0x7FFFFFFF or not is_valid_topic(topic):
                return False
            if not isinstance(group, str) or "@" in group or not is_valid_topic(retry_topic(group)):
                return False
            if tag == CK_TAG:
                so = int(r["so"])
                offsets = tuple(so + d for d in r["d"]) if "d" in r else tuple(range(so, so + int(r["n"])))
                numbers = tuple(int(n) for n in r["rt"]) if "rt" in r else (0,) * len(offsets)
                if len(offsets) != len(numbers) or (offsets and min(offsets) < 0):
                    return False
                lane = self._lane_of(group, topic, qid, int(r["b"]), commit=False)
                self._apply_ck(lane, int(r["pt"]) + int(r["it"]), offsets, numbers, int(r["nx"]))
                return True
            if tag == BATCH_ACK_TAG:
                lane_or_none = self._lanes.get((group, topic, qid))
                if lane_or_none is None:
                    return False
                if "aol" in r:
                    acked = [int(o) for o in r["aol"]]
                else:
                    acked = list(range(int(r["so"]), int(r["so"]) + int(r["n"])))
                self._apply_ack(lane_or_none, acked)
                return True
        except (ValueError, KeyError, TypeError):
            return False
        return False

    # ---- open: snapshot, then the records after it ----

    def _load(self) -> None:
        state = self._state
        for entry in state.lanes:
            lane = self._lane_of(entry["c"], entry["t"], entry["q"], entry["b"], commit=False)
            lane.next = entry["nx"]
            by_deadline: dict[tuple[int, int], list[int]] = {}
            for o, deadline, n in entry["f"]:
                lane.inflight[o] = (deadline, n)
                by_deadline.setdefault((deadline, n), []).append(o)
            for (deadline, n), offs in sorted(by_deadline.items()):
                self._seq += 1
                lane.heap.append((deadline, self._seq, tuple(offs), (n,) * len(offs)))
            heapq.heapify(lane.heap)
            lane.advance()
        self.log_next = self._snapshot_offset = state.revive_offset
        self._replay()
        self.loading = False
        for lane in self._lanes.values():
            if self._offsets.query(lane.group, lane.topic, lane.queue_id) != lane.committed:
                self._offsets.commit(lane.group, lane.topic, lane.queue_id, lane.committed)

    def _replay(self) -> int:
        """Apply the revive-log records after the last one applied; how many were."""
        parts = self._parts
        parts.dispatcher.catch_up()
        cq = parts.queues.get(self.topic, REVIVE_QUEUE_ID)
        if cq is None:
            return 0
        pos = self.log_next
        if pos < cq.min_offset:
            log.error(
                "POP: revive log records %d..%d were deleted before a snapshot covered them; "
                "the messages they handed out may come back early",
                pos,
                cq.min_offset,
            )
            pos = cq.min_offset
        applied = 0
        read = parts.commitlog.read
        while pos < cq.max_offset:
            view = cq.units(pos, REPLAY_STEP)
            if not len(view):
                break
            rows = view.tolist()
            del view
            for commitlog_offset, size, _code in rows:
                pos += 1
                if commitlog_offset == 0 and size == PLACEHOLDER_SIZE:
                    continue
                try:
                    rec = read(commitlog_offset)
                except MessageNotFoundError:
                    log.error("POP: revive log record %d is gone", pos - 1)
                    self.skipped_records += 1
                    continue
                if self._apply_record(rec.tags, bytes(rec.body)):
                    applied += 1
                else:
                    self.skipped_records += 1
                    log.error("POP: revive log record %d is not rocketstore's; skipped", pos - 1)
        self.log_next = pos
        return applied

    # ---- receive ----

    def receive(
        self,
        group: str,
        topic: str,
        max_msgs: int = 32,
        invisible_time_ms: int = 30_000,
        *,
        queue_id: Optional[int] = None,
        max_reconsume_times: Optional[int] = None,
        tags: Optional[str] = None,
    ) -> Received:
        """See :meth:`MessageStore.receive`."""
        group, topic, tags = plain_str(group), plain_str(topic), plain_str(tags)
        tag_filter = _MATCH_ALL if tags is None else TagFilter.parse(tags)
        if type(group) is not str or type(topic) is not str or (group, topic) not in self._names_checked:
            _check_group(group)
            if not isinstance(topic, str) or not is_valid_topic(topic):
                raise InvalidMessageError(f"topic {topic!r} is not a topic name")
            if len(self._names_checked) >= 1024:
                self._names_checked.clear()
            if type(group) is str and type(topic) is str:
                self._names_checked.add((group, topic))
        if type(max_msgs) is not int or not 1 <= max_msgs <= MAX_RECEIVE_BATCH:
            max_msgs = _check_int("max_msgs", max_msgs, 1, MAX_RECEIVE_BATCH)  # raises
        invisible = invisible_time_ms
        if type(invisible) is not int or not 0 <= invisible <= MAX_INVISIBLE_TIME_MS:
            invisible = _check_int("invisible_time_ms", invisible_time_ms, 0, MAX_INVISIBLE_TIME_MS)
        count = self._parts.topics.table.queues(topic)
        if queue_id is not None:
            _check_int("queue_id", queue_id, 0, max(count - 1, 0))
        if max_reconsume_times is not None:  # else the group's, looked up when a message is due
            max_reconsume_times = _check_int("max_reconsume_times", max_reconsume_times, 0, 0x7FFFFFFF)
        if not count:
            return Received(self)
        if queue_id is not None:
            first, n = queue_id, 1
        else:
            first, n = self._rotation % count, count
            self._rotation += 1
        out = Received(self)
        with self._lock:
            now = self.clock()
            self._receive_queues(
                group, topic, first, n, count, now, max_msgs, invisible, max_reconsume_times, tag_filter, out
            )
        return out

    def receive_common(self, group: str, topic: str, max_msgs: int, invisible: int) -> Optional[Received]:
        """:meth:`receive` of the common shape, as the store's :class:`Receiver` calls it (exact
        ``str`` names, ``int`` bounds in range, every queue, the group's own maximum of
        reconsume times, no tag filter): None, having done nothing, when the names were not
        checked by an earlier receive, the service is closed or has no one-call pull, the
        topic has no queues, or the clock gives no plain time (then :meth:`receive` decides)."""
        if self._closed or self._receive_run is None or (group, topic) not in self._names_checked:
            return None
        count = self._parts.topics.table.queues(topic)
        if type(count) is not int or count <= 0:
            return None
        clock = self.clock  # (read before the lock: it is checked first)
        now = time_ns() // 1_000_000 if clock is now_ms else clock()
        if type(now) is not int or not 0 <= now <= _LATEST_NOW:
            return None
        first = self._rotation % count
        self._rotation += 1
        out = Received(self)
        with self._lock:
            self._receive_queues(
                group, topic, first, count, count, now, max_msgs, invisible, None, _MATCH_ALL, out
            )
        return out

    def _receive_queues(
        self,
        group: str,
        topic: str,
        first: int,
        n: int,
        count: int,
        now: int,
        max_msgs: int,
        invisible: int,
        max_reconsume_times: Optional[int],
        tag_filter: TagFilter,
        out: Received,
    ) -> None:
        """A receive's work, under the lock: ``n`` of the topic's ``count`` queues from ``first``
        on, in turn, each by its one-call step (:meth:`receive_run`, when no tag filter) or else
        by :meth:`_receive_lane`, until ``max_msgs`` are handed out; then the snapshot check."""
        run = self._receive_run if tag_filter.match_all else None
        got = out.messages  # len(got): how many so far
        for i in range(n):
            if len(got) >= max_msgs:
                break
            qid = (first + i) % count
            if run is not None and run(self, (group, topic, qid), now, max_msgs - len(got), invisible, out):
                continue
            self._receive_lane(
                group,
                topic,
                qid,
                now,
                max_msgs - len(got),
                invisible,
                max_reconsume_times,
                tag_filter,
                out,
            )
        if self.snapshot_interval_ms:
            self._maybe_snapshot(now)

    def receive_run(
        self, key: tuple[str, str, int], now: int, want: int, invisible: int, out: Received
    ) -> bool:
        """The common receive of one queue in one step: the lane of ``key`` (group, topic, queue
        id) exists, none of its messages is due back at ``now``, and the store's one-call pull
        (``quick``) hands out ``want`` new messages from the lane's next offset, a run with no
        gap. Then the checkpoint of that run is written (the codec's ``checkpoint_run``: what
        :meth:`_receive_lane` writes for it), applied as :meth:`_apply_ck` applies it (one
        ``(deadline, 0)`` stamp for all, one heap entry, the lane's next and lowest un-acked
        offsets), and the messages are added to ``out``. True if done; False, with nothing
        written or changed, when any of that does not hold: the caller takes the general path
        (:meth:`_receive_lane`)."""
        lane = self._lanes.get(key)
        if lane is None:
            return False
        heap = lane.heap
        if heap and heap[0][0] <= now:
            return False
        start = lane.next
        quick = self._quick
        if quick is None or self._closed:
            return False
        # the codec's one-call pull; again once the dispatcher caught up, when it comes back
        # short (what is put may not be dispatched yet); None: the careful path decides
        got = self._queue_messages(
            quick.queues, lane.topic, lane.queue_id, start, want, quick.segments, quick.core
        )
        if got is None or len(got[0]) < want:
            quick.catch_up()
            got = self._queue_messages(
                quick.queues, lane.topic, lane.queue_id, start, want, quick.segments, quick.core
            )
            if got is None:
                return False
        messages = got[0]
        if len(messages) != want:
            return False
        times = self._reconsume_times(messages)  # read first: a failure here leaves nothing written
        nxt = start + want
        body = self._checkpoint_run(
            lane.committed, lane.group, invisible, want, nxt, now, lane.queue_id, start, lane.topic
        )
        timeout = self._write(CK_TAG, body)
        if timeout is not None:
            self._unconfirmed(timeout, "a checkpoint")  # if lost: back early
        self._seq += 1
        offsets, numbers, stamp = lane.take_run(want, now + invisible, self._seq)
        if lane.committed not in lane.inflight:
            self._committed_moved(lane)  # (else it cannot move)
        out.messages += messages
        out.reconsume_times += times
        out.lanes.append((lane, offsets, numbers, stamp))
        return True

    def _start_of(self, group: str, topic: str, queue_id: int) -> int:
        """Where a group new to a queue starts: its committed offset, else the queue's first."""
        committed = self._offsets.query(group, topic, queue_id)
        if committed >= 0:
            return committed
        cq = self._parts.queues.get(topic, queue_id)
        return int(cq.min_offset) if cq is not None else 0

    def _receive_lane(
        self,
        group: str,
        topic: str,
        qid: int,
        now: int,
        want: int,
        invisible: int,
        max_reconsume: Optional[int],
        tag_filter: TagFilter,
        out: Received,
    ) -> None:
        lane = self._lanes.get((group, topic, qid))
        start = lane.next if lane is not None else self._start_of(group, topic, qid)
        offsets: list[int] = []
        numbers: list[int] = []
        messages: list[MessageExt] = []
        popped: list[tuple[int, int, tuple[int, ...], tuple[int, ...]]] = []
        try:
            if lane is not None and lane.heap and lane.heap[0][0] <= now:
                if max_reconsume is None:
                    max_reconsume = self._retry_max_times(group)
                self._due(lane, now, want, max_reconsume, offsets, numbers, messages, popped)
            nxt = start
            if len(offsets) < want:
                nxt = self._new_messages(
                    lane, group, topic, qid, start, want - len(offsets), tag_filter, offsets, messages
                )
                numbers += [0] * (len(offsets) - len(numbers))
            if not offsets and nxt == start:
                for entry in popped:
                    heapq.heappush(lane.heap, entry)  # type: ignore[union-attr]
                return
            base = lane.committed if lane is not None else start
            timeout = self._write(
                CK_TAG, checkpoint_json(group, topic, qid, base, now, invisible, offsets, numbers, nxt)
            )
            self._unconfirmed(timeout, "a checkpoint")  # if lost, the messages only come back early
        except BaseException:
            if lane is not None:
                for entry in popped:
                    heapq.heappush(lane.heap, entry)
            raise
        if lane is None:
            lane = self._lane_of(group, topic, qid, start)
        numbers_t = tuple(numbers)
        stamp = self._apply_ck(lane, now + invisible, tuple(offsets), numbers_t, nxt)
        if not offsets:
            return  # only units with no message to hand out were passed over
        out.messages += messages
        if any(numbers):
            out.reconsume_times += [m.reconsume_times + n for m, n in zip(messages, numbers)]
        else:
            out.reconsume_times += [m.reconsume_times for m in messages]
        out.lanes.append((lane, offsets, numbers_t, stamp))

    def _new_messages(
        self,
        lane: Optional[Lane],
        group: str,
        topic: str,
        qid: int,
        start: int,
        want: int,
        tag_filter: TagFilter,
        offsets: list[int],
        messages: list[MessageExt],
    ) -> int:
        """Pull up to ``want`` messages never handed out from ``start`` on into ``offsets`` and
        ``messages``; returns the queue offset after what was looked at. Units with no message
        (placeholders, records gone, tags ``tag_filter`` does not match) are passed over, pull
        after pull, up to PASS_OVER_PULLS, so a long run of them cannot keep the group from what
        follows; so is the end of a ConsumeQueue file, where one pull stops: a receive gets
        ``want`` messages when the queue has them."""
        pos = nxt = start
        got = 0
        for _ in range(PASS_OVER_PULLS):
            result = self._pull(group, topic, qid, pos, want - got, tag_filter)
            status = result.status
            if status == GetMessageStatus.OFFSET_TOO_SMALL:
                if lane is not None:
                    log.warning(
                        "POP %s %s-%d: offsets %d..%d were deleted before they were received",
                        group,
                        topic,
                        qid,
                        pos,
                        result.next_begin_offset,
                    )
                pos = nxt = result.next_begin_offset
                continue
            if result.messages:
                messages += result.messages
                offsets += result.queue_offset_list()
                got += len(result.messages)
                pos = nxt = int(result.next_begin_offset)
                if got >= want:
                    break
                continue
            if status in _PASSED_OVER and result.next_begin_offset > pos:
                pos = nxt = result.next_begin_offset
                continue
            break
        return nxt

    def _due(
        self,
        lane: Lane,
        now: int,
        want: int,
        max_reconsume: int,
        offsets: list[int],
        numbers: list[int],
        messages: list[MessageExt],
        popped: list[tuple[int, int, tuple[int, ...], tuple[int, ...]]],
    ) -> None:
        """Collect the messages of ``lane`` due back at ``now`` (dead-lettering those past the
        maximum); the heap entries taken go to ``popped`` (pushed back if the receive fails)."""
        inflight = lane.inflight
        taken: set[int] = set()  # an offset in two entries with the same deadline: once
        # lane.heap, not an alias: a dead letter's acknowledgement may compact it (a new list)
        while lane.heap and lane.heap[0][0] <= now and len(offsets) < want:
            entry = heapq.heappop(lane.heap)
            deadline, seq, offs, nums = entry
            rest_o: list[int] = []
            rest_n: list[int] = []
            for o, n in zip(offs, nums):
                if inflight.get(o) != (deadline, n) or o in taken:
                    continue  # acknowledged, or its deadline moved, or it came back already
                if len(offsets) >= want:
                    rest_o.append(o)
                    rest_n.append(n)
                    continue
                try:
                    m = self._lookup(lane.topic, lane.queue_id, o)
                except MessageNotFoundError:
                    log.warning(
                        "POP %s %s-%d: message %d was deleted before it came back; dropped",
                        lane.group,
                        lane.topic,
                        lane.queue_id,
                        o,
                    )
                    self._unconfirmed(self._finish(lane, [o], _GONE), "an acknowledgement")
                    self.lost += 1
                    continue
                if m.reconsume_times + n + 1 > max_reconsume:
                    self._dead_letter(lane, o, m, m.reconsume_times + n)
                    continue
                taken.add(o)
                offsets.append(o)
                numbers.append(n + 1)
                messages.append(m)
            if rest_o:
                heapq.heappush(lane.heap, (deadline, seq, tuple(rest_o), tuple(rest_n)))
            popped.append(entry)

    def _dead_letter(self, lane: Lane, offset: int, message: MessageExt, reconsume: int) -> None:
        self._send_back(lane.group, message, -1, reconsume_times=reconsume + 1)
        self._unconfirmed(self._finish(lane, [offset], _DLQ), "an acknowledgement")
        self.dead_lettered += 1

    def _finish(
        self, lane: Lane, offsets: list[int], reason: Optional[str] = None
    ) -> Optional[FlushTimeoutError]:
        """Record and apply the acknowledgement of ``offsets`` (sorted, distinct); the flush
        timeout, if the record's flush did not confirm."""
        record: dict[str, Any] | bytes
        if offsets[-1] - offsets[0] == len(offsets) - 1 and reason is None:  # the common record
            record = (
                ACK_RANGE_JSON % (lane.group, len(offsets), lane.queue_id, offsets[0], lane.topic)
            ).encode()
        else:
            record = {"c": lane.group, "t": lane.topic, "q": lane.queue_id}
            if offsets[-1] - offsets[0] == len(offsets) - 1:  # sorted and distinct: a range
                record["so"], record["n"] = offsets[0], len(offsets)
            else:
                record["aol"] = offsets
            if reason is not None:
                record["r"] = reason
        timeout = self._write(BATCH_ACK_TAG, record)
        self._apply_ack(lane, offsets)
        return timeout

    # ---- ack and change invisible time ----

    def ack_handle(self, handle: object) -> bool:
        """One :meth:`MessageStore.ack`, every case: the handle checked (:meth:`_parse`,
        :meth:`_current`), the ``bAck`` record of its one offset written and applied
        (:meth:`_finish`), then the periodic snapshot looked at. The implementation's
        ``PopAcker`` (``ack``) does the common case itself and hands everything else here."""
        if isinstance(handle, ReceivedMessage):
            handle = handle.handle
        with self._lock:
            if self._acks_closed:
                raise StoreClosedError("the store is closed")
            lane, offset, number = self._parse(handle)
            if not self._current(lane, offset, number, handle):  # type: ignore[arg-type]  # (a str: parsed)
                return False
            timeout = self._finish(lane, [offset])
            self._snapshot_check()
        if timeout is not None:
            raise timeout  # acknowledged, but not confirmed durable
        return True

    def _snapshot_check(self) -> None:
        """An ack's look at the periodic snapshot (the compiled acker's ``periodic``)."""
        if self.snapshot_interval_ms:
            self._maybe_snapshot(self.clock())

    def _parse(self, handle: object) -> tuple[Lane, int, int]:
        if isinstance(handle, ReceivedMessage):
            handle = handle.handle
        if not isinstance(handle, str):
            raise InvalidReceiptHandleError(f"a receipt handle is a str, not {type(handle).__name__}")
        parts = handle.rsplit(" ", 2)
        try:
            prefix, o, n = parts
            offset, number = int(o), int(n)
        except ValueError:
            raise InvalidReceiptHandleError(f"not a receipt handle: {handle!r}") from None
        lane = self.by_prefix.get(prefix)
        if lane is None or offset < 0 or number < 0 or offset >= lane.next:
            raise InvalidReceiptHandleError(f"no message of this store was received with handle {handle!r}")
        return lane, offset, number

    def _current(self, lane: Lane, offset: int, number: int, handle: str) -> bool:
        """True if the handle names the message's current delivery, False if the message is
        finished already; ReceiptHandleExpiredError if it was handed out again since."""
        now = lane.inflight.get(offset)
        if now is None:
            return False
        if now[1] != number:
            raise ReceiptHandleExpiredError(
                f"receipt handle {handle!r} expired: the message was handed out again", [handle]
            )
        return True

    def ack_many(self, handles: Iterable[str | ReceivedMessage] | Received) -> int:
        """See :meth:`MessageStore.ack_many`."""
        if isinstance(handles, str):
            raise InvalidReceiptHandleError("ack_many takes a sequence of handles, not one str")
        with self._lock:
            stale: list[str] = []
            if isinstance(handles, Received) and handles.service is None:
                unpickled: list[str | ReceivedMessage] = list(handles.handles)  # a joined writer's
                todo = self._current_of_handles(unpickled, stale)
            elif isinstance(handles, Received):
                if handles.service is not self:
                    raise InvalidReceiptHandleError("these messages were received from another store")
                todo = self._current_of_batch(handles, stale)
            else:
                todo = self._current_of_handles(list(handles), stale)
            acked = 0
            timeouts = []
            for lane, offsets in todo:
                timeouts.append(self._finish(lane, offsets))
                acked += len(offsets)
            self._maybe_snapshot(self.clock())
        timeout = next((t for t in timeouts if t is not None), None)
        if stale:
            raise ReceiptHandleExpiredError(
                f"{len(stale)} receipt handles expired (their messages were handed out again); "
                f"the other {acked} messages are acknowledged",
                stale,
                acked,
            ) from timeout
        if timeout is not None:
            raise timeout  # all acknowledged, but not confirmed durable
        return acked

    def _current_of_batch(self, batch: Received, stale: list[str]) -> list[tuple[Lane, list[int]]]:
        """(lane, sorted offsets) of the messages of ``batch`` still under its delivery; the
        handles of those handed out again since go to ``stale``."""
        todo = []
        for lane, offsets, numbers, stamp in batch.lanes:
            inflight = lane.inflight
            if stamp is not None and list(map(inflight.get, offsets)).count(stamp) == len(offsets):
                todo.append((lane, sorted(offsets)))  # all still under this delivery
                continue
            current = []
            for o, n in zip(offsets, numbers):
                now = inflight.get(o)
                if now is None:
                    continue
                if now[1] != n:
                    stale.append(f"{lane.prefix} {o} {n}")
                else:
                    current.append(o)
            if current:
                todo.append((lane, sorted(set(current))))
        return todo

    def _current_of_handles(
        self, handles: list[str | ReceivedMessage], stale: list[str]
    ) -> list[tuple[Lane, list[int]]]:
        handles = [h.handle if isinstance(h, ReceivedMessage) else h for h in handles]
        parsed = [self._parse(h) for h in handles]  # every handle checked before any is written
        by_lane: dict[int, tuple[Lane, list[int]]] = {}
        for h, (lane, offset, number) in zip(handles, parsed):
            now = lane.inflight.get(offset)
            if now is None:
                continue
            if now[1] != number:
                stale.append(str(h))
                continue
            entry = by_lane.get(id(lane))
            if entry is None:
                entry = by_lane[id(lane)] = (lane, [])
            entry[1].append(offset)
        return [(lane, sorted(set(offsets))) for lane, offsets in by_lane.values()]

    def change_invisible_time(self, handle: str | ReceivedMessage, invisible_time_ms: int) -> str:
        """See :meth:`MessageStore.change_invisible_time`."""
        if isinstance(handle, ReceivedMessage):
            handle = handle.handle
        invisible = _check_int("invisible_time_ms", invisible_time_ms, 0, MAX_INVISIBLE_TIME_MS)
        with self._lock:
            lane, offset, number = self._parse(handle)
            if not self._current(lane, offset, number, handle):
                raise ReceiptHandleExpiredError(
                    f"receipt handle {handle!r}: the message is acknowledged already", [handle]
                )
            now = self.clock()
            timeout = self._write(
                CK_TAG,
                checkpoint_record(
                    lane.group,
                    lane.topic,
                    lane.queue_id,
                    lane.committed,
                    now,
                    invisible,
                    [offset],
                    [number],
                    lane.next,
                ),
            )
            self._unconfirmed(timeout, "a deadline change")  # if lost, it comes back early
            self._apply_ck(lane, now + invisible, (offset,), (number,), lane.next)
            self._maybe_snapshot(now)
            return handle

    # ---- snapshot and status ----

    def _maybe_snapshot(self, now: int) -> None:
        """The periodic snapshot, after a receive or an acknowledgement has been recorded: if it
        cannot be written (a full disk), that call still did what it says, so the failure is
        logged and counted (``pop_snapshot_failures``) rather than raised; the revive log holds
        everything, and the next open replays more of it."""
        if (
            self.snapshot_interval_ms
            and now - self._last_snapshot >= self.snapshot_interval_ms
            and self.log_next != self._snapshot_offset
        ):
            try:
                self.snapshot()
            except (OSError, RocketStoreError) as exc:
                self.snapshot_failures += 1
                log.error("POP: the snapshot %s could not be written: %s", self._state.path, exc)

    def snapshot(self) -> bool:
        """Write ``config/rocketstorePop.json`` now if the log moved since the last one; True if
        written. The CommitLog is flushed first (False, nothing written, if that times out)."""
        with self._lock:
            self._last_snapshot = self.clock()
            if self.log_next == self._snapshot_offset:
                return False  # nothing new (a store that never used POP gets no file)
            if not self._parts.commitlog.core.flush(FLUSH_TIMEOUT_MS):
                log.warning("POP: the CommitLog flush timed out; snapshot skipped")
                return False
            lanes = []
            for lane in self._lanes.values():
                flight = sorted((o, v, n) for o, (v, n) in lane.inflight.items())
                lanes.append(
                    {
                        "c": lane.group,
                        "t": lane.topic,
                        "q": lane.queue_id,
                        "b": lane.committed,
                        "nx": lane.next,
                        "f": [list(x) for x in flight],
                    }
                )
            state = self._state
            state.lanes, state.revive_offset = lanes, self.log_next
            state.dirty = True
            state.persist()
            state.loaded_from = state.path
            self._snapshot_offset = self.log_next
            self._offsets.commit(REVIVE_GROUP, self.topic, REVIVE_QUEUE_ID, self.log_next)
            self._offsets.persist()  # the groups' lowest un-acked offsets, for other readers
            return True

    def status(self, group: str, topic: str) -> dict[int, dict[str, int]]:
        """{queue id: {"committed", "next", "in_flight"}} of ``group`` in ``topic``."""
        with self._lock:
            return {
                lane.queue_id: {
                    "committed": lane.committed,
                    "next": lane.next,
                    "in_flight": len(lane.inflight),
                }
                for (g, t, _q), lane in sorted(self._lanes.items())
                if g == group and t == topic
            }

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "pop_in_flight": sum(len(lane.inflight) for lane in self._lanes.values()),
                "pop_dead_lettered": self.dead_lettered,
                "pop_lost_to_retention": self.lost,
                "pop_skipped_records": self.skipped_records,
                "pop_snapshot_failures": self.snapshot_failures,
            }

    def close(self) -> None:
        """Write the snapshot. Once that succeeded, a second close does nothing (the store calls
        it before taking its mutex, and again in its teardown: a receive that holds this
        service's lock may be waiting for that mutex, to create the DLQ topic)."""
        if self._closed:
            return
        self._acks_closed = True
        self._acker.closed = True  # (the owner role's ``ack``: rocketstore.roles)
        self.snapshot()
        self._closed = True
