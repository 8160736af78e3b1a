"""Acknowledgement per message: RocketMQ 5.x POP consumption (receive, ack, change invisible time).

A consumer group *receives* messages of a topic; each comes with a **receipt handle** and stays
invisible to the rest of the group for ``invisible_time_ms``. :meth:`PopService.ack` finishes
one; :meth:`PopService.change_invisible_time` moves its deadline; a message not acknowledged by
its deadline comes back (to any receiver of the group) with its reconsume times raised by one,
and one whose next delivery would pass ``max_reconsume_times`` goes to ``%DLQ%<group>`` instead.

**State, as RocketMQ 5.x keeps it: records in a system topic.** Every change is first written as
a message into ``rmq_sys_REVIVE_LOG_<broker_cluster_name>`` queue 0 (5.x's revive topic), then
applied in memory, under one lock, so the in-memory state is always the fold of that log:

=====  ==================================================================================
tag    body (JSON; 5.x's ``PopCheckPoint`` / ``BatchAckMsg`` field names where they exist)
=====  ==================================================================================
 ck    a checkpoint: ``c`` group, ``t`` topic, ``q`` queue id, ``pt`` pop time, ``it``
       invisible time (the messages are due back at ``pt + it``), ``so`` first queue offset,
       ``n`` how many, ``d`` each message's offset minus ``so`` (left out for the run
       ``so .. so + n - 1``); rocketstore's: ``rt`` each message's delivery number (0 first,
       +1 per redelivery; left out when all are 0), ``nx`` the lane's next queue offset
       after this receive, ``b`` the lane's lowest un-acked offset (its start, when new).
       A ``ck`` with ``n`` 0 only moves ``nx`` past units with no message (placeholders,
       records deleted before anyone received them).
 bAck  acknowledgements: ``c``, ``t``, ``q``, ``aol`` (5.x's ackOffsetList) the queue
       offsets finished, or ``so`` and ``n`` for a run of them; rocketstore's ``r``: why,
       when not a consumer's ack (``dlq``: sent to the DLQ; ``gone``: the message was
       deleted by retention before it came back).
=====  ==================================================================================

A ``change_invisible_time`` is a one-message ``ck`` with the same delivery number (5.x writes an
ack and a new checkpoint). The records are ordinary CommitLog records, so they are exactly as
durable as any put (``flush_disk_type``; the CommitLog's recovery after a crash), and a Java
broker opens the directory as it opens any other topic.

**One ack, one call.** The single ack is written once, :meth:`PopService.ack_handle`: the
handle is checked as :meth:`PopService._parse` and :meth:`PopService._current` check it, the
``bAck`` record of its one offset is appended through the CommitLog core's ``put`` and applied to
the lane (a ``PopLane`` twin) and the group's committed offset (:meth:`PopService._finish`),
under the service's lock, before it returns; then the periodic snapshot is looked at. Nothing is
buffered. :meth:`PopService.ack` is the implementation's ``PopAcker.ack``: the compiled one does
the common case (a plain handle of a known lane, still under that delivery) in one call with no
Python frame, and hands everything else, and every 64th ack (the snapshot check), to
``ack_handle`` before writing anything; the pure one hands everything to it.

**One receive step.** The common receive of one queue (its lane exists, none of its messages is
due back, no tag filter, and the codec's one-call pull ``queue_messages`` hands out every
message asked for, with no gap) is :meth:`PopService.receive_run`: the same checkpoint record as
:meth:`PopService._receive_lane` writes (the codec's ``checkpoint_run``), applied as
:meth:`PopService._apply_ck` applies it (the lane's ``take_run``). Anything else (a new lane,
messages due back, dead letters, a filter, a short pull, placeholders) goes the general way; the
step writes nothing when it steps aside. A writable store's ``receive`` is a :class:`Receiver`,
which sends the common shape straight to :meth:`PopService.receive_common`.

**Snapshot.** Replaying the whole log at every open would grow without bound, so the state is
also written, crash-safely (:class:`~rocketstore.files.configfiles.ConfigFile`'s ``.bak`` protocol), to
``config/rocketstorePop.json`` with the revive queue offset it covers (``reviveOffset``): on
close, and during use at most every ``pop_snapshot_interval_ms``. The CommitLog is flushed
first, so the snapshot never covers records a power cut could take back. An open loads the
snapshot and replays the records after ``reviveOffset``. The revive queue offset covered is
also committed for 5.x's ``CID_RMQ_SYS_REVIVE_GROUP`` in ``consumerOffset.json``, which each
snapshot writes too.

**The group's consumer offset** in ``consumerOffset.json`` (:class:`ConsumerOffsetTable`) is kept
at the lowest queue offset not yet acknowledged (or dead-lettered) in each queue: everything
below it is finished, so a retention policy that deletes what is consumed may read it there.

Where rocketstore differs from RocketMQ 5.x, on purpose:

* A message that comes back is delivered again **from its original queue position**; 5.x's
  revive service copies it into ``%RETRY%<group>`` (a new record, reconsume times + 1) and moves
  the consumer offset past it at pop time. Here nothing is copied, the delivery number is kept
  in the checkpoints, the reconsume times a receiver sees is the record's plus that number,
  and the consumer offset stays at the lowest un-acked message (what retention needs).
* The checkpoint is written when the messages are handed out (5.x buffers it in memory for a
  while, ``PopBufferMergeService``), and a ``change_invisible_time`` keeps the handle valid.
* One revive queue (5.x: ``reviveQueueNum``, 8), and no revive thread: what is due back is
  found when a receive looks (a heap of deadlines per queue), not by a timer.
* A receipt handle is ``"<group> <topic> <queue id> <queue offset> <delivery number>"`` (5.x's
  ``ExtraInfoUtil`` string holds the checkpoint's revive offset, pop time, broker name ...).
* A dead letter's reconsume times is the last delivery's plus one (4.x's ``send_back``), and a
  crash between the dead letter's put and its ``bAck`` record puts it into the DLQ once more
  when it comes back after the reopen (at most one duplicate per crash).

**Across processes.** The state lives in the memory of the process that has the store open for
writing (the store's lock admits one). As the state is a fold of the revive log, a multi-process
store can share it by taking one cross-process lock around each call, catching up on the revive
log records written by others since its last look (:meth:`PopService._replay`), then deciding and
appending as here.
"""

from __future__ import annotations

import heapq
import json
import logging
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from time import time_ns
from typing import Any, NamedTuple, Optional, overload

from rocketstore.base._clock import now_ms
from rocketstore.errors import (
    FlushTimeoutError,
    InvalidMessageError,
    InvalidReceiptHandleError,
    MessageNotFoundError,
    ReceiptHandleExpiredError,
    RocketStoreError,
    StoreClosedError,
    StoreConfigError,
)
from rocketstore.files.configfiles import (
    PERM_READ,
    PERM_WRITE,
    ConfigFile,
    ConsumerOffsetTable,
)
from rocketstore.format import _codec_py
from rocketstore.format.tagfilter import TagFilter
from rocketstore.message import MessageExt, is_valid_topic
from rocketstore.queues.consumequeue import PLACEHOLDER_SIZE
from rocketstore.services.parts import StoreParts
from rocketstore.services.schedule import _check_group, retry_topic
from rocketstore.status import GetMessageStatus

__all__ = [
    "REVIVE_TOPIC_PREFIX",
    "REVIVE_GROUP",
    "CK_TAG",
    "BATCH_ACK_TAG",
    "MAX_RECEIVE_BATCH",
    "MAX_INVISIBLE_TIME_MS",
    "ReceivedMessage",
    "Received",
    "PopService",
    "PopState",
    "QuickPull",
    "Receiver",
    "revive_topic",
]

log = logging.getLogger("rocketstore.services.pop")

REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"  # PopAckConstants.REVIVE_TOPIC
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"  # PopAckConstants.REVIVE_GROUP
CK_TAG = "ck"  # PopAckConstants.CK_TAG
BATCH_ACK_TAG = "bAck"  # PopAckConstants.BATCH_ACK_TAG
REVIVE_QUEUE_ID = 0
#: At most this many messages per receive (5.x: 32 per checkpoint, its bitmap is an int).
MAX_RECEIVE_BATCH = 4096
#: The longest invisible time (the 5.x proxy's ``maxInvisibleTimeMills``, 12 h).
MAX_INVISIBLE_TIME_MS = 12 * 3600 * 1000
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


def revive_topic(cluster: str) -> str:
    """``rmq_sys_REVIVE_LOG_<cluster>``."""
    return REVIVE_TOPIC_PREFIX + cluster


class ReceivedMessage(NamedTuple):
    """One message handed out by :meth:`MessageStore.receive`."""

    #: the message as stored (its ``reconsume_times`` is the record's)
    message: MessageExt
    #: the receipt handle for :meth:`MessageStore.ack` / ``change_invisible_time``
    handle: str
    #: the record's reconsume times plus the times this message came back to the group
    reconsume_times: int


class Received(Sequence[ReceivedMessage]):
    """What one :meth:`MessageStore.receive` handed out: a sequence of
    :class:`ReceivedMessage`, also readable as parallel lists (``messages``, ``handles``,
    ``reconsume_times``). Give it whole to :meth:`MessageStore.ack_many` to acknowledge every
    message in it without parsing handles (the fast path); the handle strings are only made
    when asked for."""

    __slots__ = ("messages", "reconsume_times", "_lanes", "_handles", "_service")

    def __init__(self, service: Optional[PopService] = None) -> None:
        self.messages: list[MessageExt] = []
        self.reconsume_times: list[int] = []
        #: (lane, offsets, delivery numbers) per queue, in the order of ``messages``
        #: and the (deadline, number) tuple they all share in ``inflight`` (or None)
        self._lanes: list[tuple[_Lane, list[int], tuple[int, ...], Optional[tuple[int, int]]]] = []
        self._handles: Optional[list[str]] = None
        self._service = service

    @classmethod
    def from_handles(
        cls, messages: list[MessageExt], handles: list[str], reconsume_times: list[int]
    ) -> Received:
        """A Received of messages and their handles alone (no service's lanes): acknowledged
        through its handles."""
        found = cls()
        found.messages, found._handles, found.reconsume_times = (
            list(messages),
            list(handles),
            list(reconsume_times),
        )
        return found

    @property
    def service(self) -> Optional[PopService]:
        """The service that handed these out (None: made from handles, e.g. unpickled)."""
        return self._service

    @property
    def lanes(self) -> list[tuple[_Lane, list[int], tuple[int, ...], Optional[tuple[int, int]]]]:
        """(lane, offsets, delivery numbers, shared stamp) per queue: what the service that
        handed these out acknowledges them by (the list itself, which its receive fills)."""
        return self._lanes

    @property
    def handles(self) -> list[str]:
        """The receipt handles, in the order of ``messages``."""
        if self._handles is None:
            handles: list[str] = []
            make = self._service.receipt_handles  # type: ignore[union-attr]  # lanes: a service's
            for lane, offsets, numbers, _stamp in self._lanes:
                handles += make(lane.prefix, offsets, numbers)
            self._handles = handles
        return self._handles

    def __len__(self) -> int:
        return len(self.messages)

    @overload
    def __getitem__(self, index: int) -> ReceivedMessage: ...

    @overload
    def __getitem__(self, index: slice) -> list[ReceivedMessage]: ...

    def __getitem__(self, index: int | slice) -> ReceivedMessage | list[ReceivedMessage]:
        if isinstance(index, slice):
            return list(
                map(ReceivedMessage, self.messages[index], self.handles[index], self.reconsume_times[index])
            )
        return ReceivedMessage(self.messages[index], self.handles[index], self.reconsume_times[index])

    def __iter__(self) -> Iterator[ReceivedMessage]:
        # the implementation's received_rows: no NamedTuple __new__ frame per message
        return iter(self._rows(ReceivedMessage, self.messages, self.handles, self.reconsume_times))

    @property
    def _rows(self) -> Callable[..., list[ReceivedMessage]]:
        service = self._service
        return _codec_py.received_rows if service is None else service.received_rows

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Received, list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # a mutable sequence, like a list

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled (a joined writer's receive, rocketstore.processes.writers): its handles, not its lanes
        return (_received, (self.messages, self.handles, self.reconsume_times))

    def __repr__(self) -> str:
        return f"<Received {len(self.messages)} messages>"


def _received(messages: list[MessageExt], handles: list[str], reconsume_times: list[int]) -> Received:
    """A Received as unpickled: acknowledged through its handles."""
    return Received.from_handles(messages, handles, reconsume_times)


#: The POP state of one (group, topic, queue id): a twin class (rocketstore.format._codec_py.PopLane, the
#: compiled one for the compiled build, which its PopAcker reads without attribute lookups); typed
#: by the pure one.
_Lane = _codec_py.PopLane


class PopState(ConfigFile):
    """``config/rocketstorePop.json``: a snapshot of every lane at a revive queue offset:
    ``{"reviveOffset": P, "lanes": [{"c": group, "t": topic, "q": queue id, "b": lowest
    un-acked, "nx": next, "f": [[offset, visible at, delivery number], ...]}, ...]}``."""

    FILE_NAME = "rocketstorePop.json"

    def reset(self) -> None:
        super().reset()
        self.revive_offset = 0
        self.lanes: list[dict[str, Any]] = []

    def decode(self, data: Any) -> None:
        if not isinstance(data, dict):
            raise StoreConfigError(f"{self.FILE_NAME} must hold an object")
        offset = data.get("reviveOffset", 0)
        lanes = data.get("lanes") or []
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise StoreConfigError(f"{self.FILE_NAME}: reviveOffset is not an offset: {offset!r}")
        if not isinstance(lanes, list):
            raise StoreConfigError(f"{self.FILE_NAME}: lanes must be a list")
        checked = []
        for lane in lanes:
            try:
                group, topic, qid = str(lane["c"]), str(lane["t"]), _int(lane["q"])
                committed, nxt = _int(lane["b"]), _int(lane["nx"])
                flight = [(_int(o), _int(v), _int(c)) for o, v, c in lane.get("f") or []]
            except (KeyError, TypeError, ValueError) as exc:
                raise StoreConfigError(f"{self.FILE_NAME}: bad lane {lane!r}: {exc}") from None
            if not committed <= nxt or any(not committed <= o < nxt for o, _v, _c in flight):
                raise StoreConfigError(f"{self.FILE_NAME}: lane {group}/{topic}/{qid} is inconsistent")
            checked.append({"c": group, "t": topic, "q": qid, "b": committed, "nx": nxt, "f": flight})
        self.revive_offset, self.lanes = offset, checked

    def encode(self) -> dict[str, Any]:
        return {"lanes": self.lanes, "reviveOffset": self.revive_offset}


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"not a non-negative int: {value!r}")
    return value


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidMessageError(f"{name} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidMessageError(f"{name} must be between {low} and {high}, not {value}")
    return value


def _checkpoint(
    group: str,
    topic: str,
    queue_id: int,
    base: int,
    now: int,
    invisible: int,
    offsets: list[int],
    numbers: list[int],
    nxt: int,
) -> dict[str, Any]:
    """A ``ck`` record (module docstring); ``d`` and ``rt`` are left out when the offsets are a
    run from ``so`` (then ``n`` counts them) and every delivery number is 0."""
    so = min(offsets) if offsets else nxt
    record: dict[str, Any] = {"c": group, "t": topic, "q": queue_id, "b": base, "pt": now, "it": invisible}
    record["so"], record["n"], record["nx"] = so, len(offsets), nxt
    if not offsets:
        return record
    if offsets[-1] - so != len(offsets) - 1 or offsets[0] != so or sorted(offsets) != offsets:
        record["d"] = [o - so for o in offsets]
    if any(numbers):
        record["rt"] = numbers
    return record


def _checkpoint_json(
    group: str,
    topic: str,
    queue_id: int,
    base: int,
    now: int,
    invisible: int,
    offsets: list[int],
    numbers: list[int],
    nxt: int,
) -> bytes:
    """``_dumps(_checkpoint(...))``, the common record made without a dict (one per receive)."""
    if offsets and not any(numbers):
        so = offsets[0]
        if offsets[-1] - so == len(offsets) - 1 and sorted(offsets) == offsets:  # a run from so
            return _codec_py.checkpoint_run(
                base, group, invisible, len(offsets), nxt, now, queue_id, so, topic
            )
    return _dumps(_checkpoint(group, topic, queue_id, base, now, invisible, offsets, numbers, nxt))


def _dumps(record: dict[str, Any]) -> bytes:
    """Compact JSON, keys sorted (as fastjson writes a bean). Group and topic names need no
    escaping (``[%|a-zA-Z0-9_-]``), ints and lists of ints none either: written by hand, as
    this runs once per receive and per acknowledgement."""
    parts = []
    for key in sorted(record):
        value = record[key]
        if isinstance(value, str):
            text = f'"{value}"'
        elif isinstance(value, (list, tuple)):
            text = "[" + ",".join(map(str, value)) + "]"
        else:
            text = str(value)
        parts.append(f'"{key}":{text}')
    return ("{" + ",".join(parts) + "}").encode()


#: What :func:`_dumps` writes for the acknowledgement of a range of offsets (group, count, queue
#: id, first offset, topic), made without a dict: one is written per ``ack``.
_ACK_RANGE_JSON = '{"c":"%s","n":%d,"q":%d,"so":%d,"t":"%s"}'


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
        self._lanes: dict[tuple[str, str, int], _Lane] = {}
        self._names_checked: set[tuple[str, str]] = set()  # (group, topic) a receive checked
        self.by_prefix: dict[str, _Lane] = {}
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
        body = record if isinstance(record, bytes) else _dumps(record)
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

    def _lane_of(self, group: str, topic: str, queue_id: int, start: int, commit: bool = True) -> _Lane:
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
        self, lane: _Lane, deadline: int, offsets: tuple[int, ...], numbers: tuple[int, ...], nxt: int
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

    def _apply_ack(self, lane: _Lane, offsets: Iterable[int]) -> None:
        inflight = lane.inflight
        for o in offsets:
            inflight.pop(o, None)
        self._committed_moved(lane)
        if len(lane.heap) > 2 * len(inflight) + COMPACT_SLACK:
            lane.compact()

    def _committed_moved(self, lane: _Lane) -> None:
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
        max_msgs: int,
        invisible_time_ms: int,
        queue_id: Optional[int] = None,
        max_reconsume_times: Optional[int] = None,
        tags: Optional[str] = None,
    ) -> Received:
        """See :meth:`MessageStore.receive`."""
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
        out._lanes.append((lane, offsets, numbers, stamp))  # noqa: SLF001 (this module's Received; no property frame)
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
                CK_TAG, _checkpoint_json(group, topic, qid, base, now, invisible, offsets, numbers, nxt)
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
        lane: Optional[_Lane],
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
        lane: _Lane,
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

    def _dead_letter(self, lane: _Lane, offset: int, message: MessageExt, reconsume: int) -> None:
        self._send_back(lane.group, message, -1, reconsume_times=reconsume + 1)
        self._unconfirmed(self._finish(lane, [offset], _DLQ), "an acknowledgement")
        self.dead_lettered += 1

    def _finish(
        self, lane: _Lane, offsets: list[int], reason: Optional[str] = None
    ) -> Optional[FlushTimeoutError]:
        """Record and apply the acknowledgement of ``offsets`` (sorted, distinct); the flush
        timeout, if the record's flush did not confirm."""
        record: dict[str, Any] | bytes
        if offsets[-1] - offsets[0] == len(offsets) - 1 and reason is None:  # the common record
            record = (
                _ACK_RANGE_JSON % (lane.group, len(offsets), lane.queue_id, offsets[0], lane.topic)
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

    def _parse(self, handle: object) -> tuple[_Lane, int, int]:
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

    def _current(self, lane: _Lane, offset: int, number: int, handle: str) -> bool:
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

    def _current_of_batch(self, batch: Received, stale: list[str]) -> list[tuple[_Lane, list[int]]]:
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
    ) -> list[tuple[_Lane, list[int]]]:
        handles = [h.handle if isinstance(h, ReceivedMessage) else h for h in handles]
        parsed = [self._parse(h) for h in handles]  # every handle checked before any is written
        by_lane: dict[int, tuple[_Lane, list[int]]] = {}
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
                _checkpoint(
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


class Receiver:
    """A writable store's ``receive`` (its owner role's, rocketstore.roles): the common shape,
    ``receive(group, topic, max_msgs, invisible_time_ms)`` with exact ``str`` names, ``int``
    bounds in range and no ``queue_id``, ``max_reconsume_times`` or ``tags``, goes straight to
    the service's :meth:`PopService.receive_common`, with no frame of the store on the way;
    anything else, and whatever that declines, is ``fallback(store, group, topic, max_msgs,
    invisible_time_ms, queue_id=, max_reconsume_times=, tags=)``: ``StoreBase.receive``, which
    checks and raises. StoreClosedError once the store is gone; ``closed`` (set when the store
    drops this receiver) sends every call to ``fallback``."""

    __slots__ = ("_store_ref", "_service_ref", "_fallback", "closed")

    def __init__(
        self, store_ref: Callable[[], Any], service: PopService, fallback: Callable[..., Received]
    ) -> None:
        self._store_ref = store_ref
        self._service_ref = weakref.ref(service)
        self._fallback = fallback
        self.closed = False

    def receive(
        self,
        group: Any,
        topic: Any,
        max_msgs: Any = 32,
        invisible_time_ms: Any = 30_000,
        queue_id: Any = None,
        max_reconsume_times: Any = None,
        tags: Any = None,
    ) -> Received:
        """Hand out messages to a consumer group (POP); see
        :meth:`rocketstore.MessageStore.receive`."""
        service = self._service_ref()
        if (
            service is not None
            and not self.closed
            and queue_id is None
            and max_reconsume_times is None
            and tags is None
            and type(group) is str
            and type(topic) is str
            and type(max_msgs) is int
            and type(invisible_time_ms) is int
            and 1 <= max_msgs <= MAX_RECEIVE_BATCH
            and 0 <= invisible_time_ms <= MAX_INVISIBLE_TIME_MS
        ):
            got = service.receive_common(group, topic, max_msgs, invisible_time_ms)
            if got is not None:
                return got
        store = self._store_ref()
        if store is None:
            raise StoreClosedError("the store is closed")
        return self._fallback(
            store,
            group,
            topic,
            max_msgs,
            invisible_time_ms,
            queue_id=queue_id,
            max_reconsume_times=max_reconsume_times,
            tags=tags,
        )
