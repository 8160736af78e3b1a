"""The pulls of a store by queue position: :class:`Puller`.

A pull of one queue (``get_message``, a lookup by queue offset, POP's pulls) reads its units and
each unit's record, and checks the unit against the record (CRC, size, topic, queue id, queue
offset, PHYSICALOFFSET: rocketstore.queues.queuecheck's ``QueueGuard``). The common pulls take one
compiled call (the codec's ``queue_messages`` and ``pull_units``); anything those cannot decide
takes the careful path, which catches dispatch up, and rebuilds a queue whose unit does not point
at its own record from the CommitLog and tries again; if that cannot help, the position is
reported missing (:class:`~rocketstore.errors.ConsumeQueueDamagedError`), never another message.

A puller holds the parts of one open of a store; the store makes a new one at each. Its careful
path first asks the store whether it is open (``open_puller()``, which a following store may
answer by opening again: the call then goes on with the new open's puller).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional, TypeVar

import numpy as np

from rocketstore.base._checks import check_int
from rocketstore.errors import (
    ConsumeQueueDamagedError,
    InvalidMessageError,
    MessageNotFoundError,
    StoreClosedError,
)
from rocketstore.format.tagfilter import TagFilter
from rocketstore.format.units import PLACEHOLDER_SIZE, DamagedUnit
from rocketstore.message import MessageExt
from rocketstore.queues.pulls import GetMessageResult, get_message, scan_budget
from rocketstore.queues.queuecheck import QueueGuard
from rocketstore.status import GetMessageStatus

__all__ = ["Puller", "UnitReader", "message_at_unit", "check_name"]

_T = TypeVar("_T")


def check_name(what: str, value: object) -> str:
    """``value`` if it is a non-empty str (a topic, a group, a key); TypeError or
    InvalidMessageError otherwise."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise InvalidMessageError(f"{what} must not be empty")
    return value


class UnitReader:
    """The ``read`` callback of a pull from one queue: every unit checked by the QueueGuard;
    ``pull`` reads the candidates of a view of units in one compiled call per segment."""

    __slots__ = ("_guard", "topic", "queue_id")

    def __init__(self, guard: QueueGuard, topic: str, queue_id: int) -> None:
        self._guard, self.topic, self.queue_id = guard, topic, queue_id

    def __call__(self, offset: int, size: int, queue_offset: int) -> Optional[MessageExt]:
        return self._guard.unit_message(self.topic, self.queue_id, queue_offset, offset, size)

    def pull(
        self,
        units: np.ndarray,
        base: int,
        want: int,
        codes: Optional[tuple[int, ...]],
        tags: Optional[frozenset[str]],
        nothing_yet: bool,
    ) -> tuple[list[Any], list[int], int, bool, int]:
        """The messages of up to ``want`` candidate units (see QueueGuard.pull): ``(messages,
        unit indices, stop, full, last gone)``. A unit that does not point at its record ends
        the batch before it, or raises ``DamagedUnit`` when ``nothing_yet`` was collected."""
        codec = self._guard.codec
        found, taken, stop, kind, last_gone = self._guard.pull(
            self.topic, self.queue_id, units, base, want, codes, tags
        )
        if kind == codec.PULL_DAMAGED and nothing_yet and not found:
            raise DamagedUnit(self.topic, self.queue_id, base + stop)
        return found, taken, stop, kind != codec.PULL_END, last_gone


def message_at_unit(cq: Any, queue_offset: int, read: Any) -> MessageExt:
    """The message the unit at ``queue_offset`` of ``cq`` points at, checked by ``read``
    (MessageNotFoundError if the queue, the unit or its record is not there)."""
    if cq is None:
        raise MessageNotFoundError(f"no queue {read.topic}-{read.queue_id}")
    commitlog_offset, size, _tags = cq.unit(queue_offset)
    if commitlog_offset == 0 and size == PLACEHOLDER_SIZE:
        raise MessageNotFoundError(
            f"no message at {cq.topic}-{cq.queue_id} offset {queue_offset}: its record is gone (damage)"
        )
    msg: Optional[MessageExt] = read(commitlog_offset, size, queue_offset)
    if msg is None:
        raise MessageNotFoundError(
            f"the message at {cq.topic}-{cq.queue_id} offset {queue_offset} was deleted (retention)"
        )
    return msg


class Puller:
    """The pulls by queue position over the parts of one open: ``queues`` (the ConsumeQueues),
    ``dispatcher``, ``guard`` (the QueueGuard), ``segments`` and ``commitlog``, ``core`` (the
    append core of a writable store, None when read-only), ``codec``, ``offsets`` (the consumer
    offsets), ``follower`` (a read-only store's, whose ``follow()`` is False once a writer opened
    the store again, or None), ``store`` (a weak reference to the store), ``closed(store)`` and
    ``open_puller(store)`` (raises unless the store is open, or opens it again; returns the
    puller of the open it is in), ``below_min(cq, start, max_msgs, tag_filter)`` (a pull below a
    queue's min offset the store can answer otherwise: a compacted topic's compaction log; None
    when it cannot)."""

    __slots__ = (
        "queues",
        "dispatcher",
        "guard",
        "segments",
        "commitlog",
        "core",
        "codec",
        "offsets",
        "follower",
        "_store",
        "_closed",
        "_open_puller",
        "_below_min",
    )

    def __init__(
        self,
        queues: Any,
        dispatcher: Any,
        guard: QueueGuard,
        segments: Any,
        commitlog: Any,
        core: Any,
        codec: Any,
        offsets: Any,
        follower: Any,
        store: Callable[[], Any],
        closed: Callable[[Any], bool],
        open_puller: Callable[[Any], Puller],
        below_min: Optional[Callable[..., Optional[GetMessageResult]]] = None,
    ) -> None:
        self.queues, self.dispatcher, self.guard = queues, dispatcher, guard
        self._below_min = below_min
        self.segments, self.commitlog, self.core, self.codec = segments, commitlog, core, codec
        self.offsets, self.follower = offsets, follower
        self._store, self._closed, self._open_puller = store, closed, open_puller

    def _open(self) -> Puller:
        """The puller of the open the store is in, once it is open (StoreClosedError if not)."""
        store = self._store()
        if store is None:
            raise StoreClosedError("the store is closed")
        return self._open_puller(store)

    def _stale(self) -> bool:
        """Closed, or a following store whose writer opened it again (the careful path decides)."""
        store = self._store()
        return (
            store is None or self._closed(store) or (self.follower is not None and not self.follower.follow())
        )

    def queue(self, topic: str, queue_id: int, need: Optional[int] = None) -> Any:
        """The ConsumeQueue of (topic, queue_id) after catching dispatch up, or None; a queue
        with known holes is rebuilt from the CommitLog first. ``need``: dispatch catches up only
        if the queue ends before that queue offset (POP's own records, put between its pulls,
        would otherwise be dispatched on every pull)."""
        current = self._open()
        if current is not self:  # opened again meanwhile: the new open's parts
            return current.queue(topic, queue_id, need)
        return self._queue(topic, queue_id, need)

    def _queue(self, topic: str, queue_id: int, need: Optional[int]) -> Any:
        check_name("topic", topic)
        queue_id = check_int("queue_id", queue_id)
        cq = self.queues.get(topic, queue_id) if need is not None else None
        if cq is None or cq.max_offset < need:
            self.dispatcher.catch_up()
            cq = self.queues.get(topic, queue_id)
        if cq is not None and cq.holes:
            self.guard.repair([(topic, queue_id)])
        return cq

    def pull(
        self, topic: str, queue_id: int, fetch: Callable[[Any, Any], _T], need: Optional[int] = None
    ) -> _T:
        """``fetch(cq, read)`` (a pull or a lookup by queue position) with every unit checked by
        ``read`` (a :class:`UnitReader`): a unit that does not point at its own record makes the
        queue be rebuilt from the CommitLog and tried again; if that cannot help, the position
        is reported missing (:class:`ConsumeQueueDamagedError`), never another message."""
        current = self._open()
        if current is not self:  # opened again meanwhile: the new open's parts
            return current.pull(topic, queue_id, fetch, need)
        cq = self._queue(topic, queue_id, need)
        read = UnitReader(self.guard, topic, int(queue_id))
        for attempt in range(2):
            try:
                return fetch(cq, read)
            except DamagedUnit as exc:
                if attempt:
                    raise ConsumeQueueDamagedError(
                        f"ConsumeQueue {topic}-{queue_id} unit {exc.queue_offset} does not point at "
                        f"its message, and rebuilding the queue from the CommitLog did not help",
                        topic,
                        queue_id,
                        exc.queue_offset,
                    ) from None
                self.guard.repair([(topic, queue_id)])
                cq = self.queues.get(topic, queue_id)
        raise AssertionError("unreachable")  # the second attempt returns or raises

    def look(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: Optional[int],
        max_msgs: int,
        tag_filter: TagFilter,
    ) -> GetMessageResult:
        """One pull of ``get_message`` from a queue: in one compiled call when it can decide,
        else the careful path (from the group's committed offset when ``offset`` is None)."""
        found = None
        if offset is not None:
            if tag_filter.match_all:
                found = self.quick_pull(topic, queue_id, offset, max_msgs)
            else:
                found = self.quick_tagged_pull(topic, queue_id, offset, max_msgs, tag_filter)
        if found is None:
            found = self.pull(
                topic, queue_id, self._fetcher(group, topic, queue_id, offset, max_msgs, tag_filter)
            )
        return found

    def _fetcher(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: Optional[int],
        max_msgs: int,
        tag_filter: TagFilter,
    ) -> Callable[[Any, Any], GetMessageResult]:
        def fetch(cq: Any, read: Any) -> GetMessageResult:
            start = offset
            if start is None:
                start = self.offsets.query(group, topic, int(queue_id))
                if start < 0:
                    start = cq.min_offset if cq is not None else 0
            if (
                self._below_min is not None
                and cq is not None
                and type(start) is int
                and start < cq.min_offset
            ):
                below = self._below_min(cq, start, max_msgs, tag_filter)
                if below is not None:
                    return below
            return get_message(cq, start, max_msgs, tag_filter, read, with_queue_offset=True)

        return fetch

    def quick_tagged_pull(
        self, topic: str, queue_id: int, offset: int, max_msgs: int, tag_filter: TagFilter
    ) -> Optional[GetMessageResult]:
        """A pull with a tag filter whose units lie in one ConsumeQueue file and whose records
        lie in one segment, through the codec's ``pull_units`` (which the careful path runs
        too: tagsCode filter, the real tag re-checked, every unit checked against its record)
        without the careful path's frames. The batch must end as that path's would end it:
        full, or at the queue's end or the scan budget with a message found; None otherwise
        (damage, another file or segment, nothing found), and the careful path decides."""
        if type(topic) is not str or type(queue_id) is not int or type(offset) is not int:
            return None
        if type(max_msgs) is not int or max_msgs < 1 or offset < 0:
            return None
        if self._stale():
            return None
        self.dispatcher.catch_up()
        cq = self.queues.get(topic, queue_id)
        if cq is None or cq.holes:
            return None
        lo, hi = cq.min_offset, cq.max_offset
        if not lo <= offset < hi:
            return None
        budget = scan_budget(max_msgs)
        try:
            units = cq.units(offset, budget)
            mf = self.segments.find(int(units[0]["commitlog_offset"])) if len(units) else None
            if mf is None:
                return None
            view = mf.view(0, self.commitlog.readable_end(mf))
        except (MessageNotFoundError, StoreClosedError):
            return None
        codec = self.codec
        found, taken, stop, kind = codec.pull_units(
            view,
            mf.file_from_offset,
            mf.file_size,
            units,
            0,
            max_msgs,
            offset,
            topic,
            queue_id,
            tag_filter.code_tuple,
            tag_filter.tags,
        )
        if kind == codec.PULL_FULL:
            end = offset + stop
        elif kind == codec.PULL_END and found and (offset + len(units) == hi or len(units) >= budget):
            end = offset + len(units)
        else:
            return None
        return GetMessageResult(
            GetMessageStatus.FOUND, end, lo, hi, found, units[taken], offset + np.array(taken, dtype=np.int64)
        )

    def quick_pull(
        self, topic: str, queue_id: int, offset: int, max_msgs: int, need: Optional[int] = None
    ) -> Optional[GetMessageResult]:
        """The common pull (every message from a given offset, all within one ConsumeQueue
        file, nothing damaged) in one compiled call, by the rules of the careful path; None for
        anything that path must decide (bounds, holes, filters, damage, a closed store).
        ``need``: as for :meth:`queue`, dispatch catches up only if the queue ends before it."""
        if self._stale():
            return None
        cq = self.queues.get(topic, queue_id) if need is not None else None
        if cq is None or cq.max_offset < need:
            self.dispatcher.catch_up()
        got = self.codec.queue_messages(
            self.queues, topic, queue_id, offset, max_msgs, self.segments, self.core
        )
        if got is None:
            return None
        messages, units, lo, hi = got
        return GetMessageResult(
            GetMessageStatus.FOUND, offset + len(messages), lo, hi, messages, units, offset
        )

    def message_at(self, topic: str, queue_id: int, queue_offset: int) -> MessageExt:
        """The message at ``queue_offset`` of (topic, queue_id), its unit checked against its
        record (``get_by_queue_offset``)."""
        cq = self.queue(topic, queue_id)
        if cq is not None:
            try:  # the common case, without pull's retry frame
                return message_at_unit(cq, queue_offset, UnitReader(self.guard, topic, int(queue_id)))
            except DamagedUnit:
                pass  # pull rebuilds the queue and tries again, or reports the position missing
        return self.pull(topic, queue_id, lambda cq, read: message_at_unit(cq, queue_offset, read))

    def pop_pull(
        self, group: str, topic: str, queue_id: int, offset: int, max_msgs: int, tag_filter: Any = None
    ) -> GetMessageResult:
        """``get_message`` for POP: the one-call pull when it can decide, else the careful path,
        where dispatch catches up only when the queue has fewer than ``max_msgs`` units from
        ``offset``."""
        if tag_filter is None or tag_filter.match_all:
            quick = self.quick_pull(topic, queue_id, offset, max_msgs, offset + max_msgs)
            if quick is not None:
                return quick
        return self.pull(
            topic,
            queue_id,
            lambda cq, read: get_message(cq, offset, max_msgs, tag_filter, read, with_queue_offset=True),
            offset + max_msgs,
        )

    def pop_lookup(self, topic: str, queue_id: int, queue_offset: int) -> MessageExt:
        """``get_by_queue_offset`` of a position POP handed out (dispatched already)."""
        return self.pull(
            topic, queue_id, lambda cq, read: message_at_unit(cq, queue_offset, read), queue_offset + 1
        )
