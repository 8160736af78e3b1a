"""Queue integrity: every message handed out by queue position is the one stored there.

A ConsumeQueue unit is only a pointer. :class:`QueueGuard` checks each record a unit points at
(valid CRC, the unit's size, topic, queue id and queue offset, a PHYSICALOFFSET equal to where
it lies), rebuilds a queue from the CommitLog when one does not (one scan; a read-only store
does it in memory), and checks every unit of every queue for ``verify()``
(:func:`verify_store`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Optional

import numpy as np

from rocketstore.errors import ConsumeQueueDamagedError, MessageNotFoundError
from rocketstore.format._scan_py import queue_key
from rocketstore.format.units import DamagedUnit
from rocketstore.log.commitlog import CommitLog
from rocketstore.log.recordscan import consumable_rows, plausible, queue_groups
from rocketstore.message import MessageExt

__all__ = ["QueueGuard", "verify_store"]


def _in_order(q: np.ndarray, vouched: Optional[np.ndarray] = None) -> tuple[np.ndarray, Optional[int]]:
    """Which of one queue's records (queue offsets ``q`` in CommitLog order) to trust: a record's
    queue offset continues its queue. A queue's offsets rise by one with the CommitLog, so the
    records split into runs of consecutive offsets; a run that starts where the kept records
    end continues them; one that starts further on (records lost to damage between) is kept
    when it holds two records or more, which agree; a lone record that jumps ahead, or a run
    that goes back, has a damaged QUEUEID, QUEUEOFFSET or TOPIC field (no CRC covers them).
    Placed by that field it would hand its message out at a position it was never stored at
    (and grow the queue past its end); left out, its own position reads as missing, and the
    run after it may start one position further on for each such record (it may have been the
    queue's own). The first run is kept unless it is a lone record the next run goes back from.
    The last record of a queue whose offset jumps past lost records is held back until the next
    record of its queue confirms it.

    ``vouched``: the records the queue's unit at their offset points at already, written when
    their queue was whole (not padded past its end, :attr:`holes`): a lone one that jumps ahead
    is kept, as after a record of its queue lost to damage (a body CRC that fails).

    Returns the mask and where the queue continues after the records kept (one position
    further for each lone record refused after them); None for no records."""
    n = len(q)
    keep = np.ones(n, dtype=bool)
    if n < 2:
        return keep, (int(q[-1]) + 1 if n else None)
    breaks = np.flatnonzero(np.diff(q) != 1) + 1
    if not len(breaks):
        return keep, int(q[-1]) + 1  # the common case: one run
    starts = np.concatenate(([0], breaks))
    stops = np.concatenate((breaks, [n]))
    expect: Optional[int] = None
    refused = 0  # lone records refused since the last kept run: each may have held a position
    for r, (a, b) in enumerate(zip(starts.tolist(), stops.tolist())):
        first, last = int(q[a]), int(q[b - 1])
        if expect is None:
            lone_back = b - a == 1 and r + 1 < len(starts) and int(q[b]) <= first
            if lone_back:
                keep[a:b] = False
            else:
                expect = last + 1
            continue
        confirmed = b - a >= 2 or (vouched is not None and bool(vouched[a]))
        if expect <= first <= expect + refused or (first > expect and confirmed):
            expect, refused = last + 1, 0
        elif first < expect <= last:  # a run that goes back and then continues: its new part
            keep[a : a + (expect - first)] = False
            expect, refused = last + 1, 0
        else:
            keep[a:b] = False
            refused += b - a == 1
    return keep, (None if expect is None else expect + refused)


def _vouched(cq: Any, q: np.ndarray, phys: np.ndarray) -> np.ndarray:
    """Which records (queue offsets ``q`` at CommitLog offsets ``phys``) queue ``cq``'s unit at
    their offset points at, outside the stretches a dispatch past its end padded (``holes``,
    with the unit that jumped there)."""
    inside = (q >= cq.min_offset) & (q < cq.max_offset)
    vouched = np.zeros(len(q), dtype=bool)
    if inside.any():
        stored, _sizes = cq.stored_many(q[inside])
        vouched[inside] = stored == phys[inside]
    for lo, hi in cq.holes:
        vouched &= ~((q >= lo) & (q <= hi))
    return vouched


class QueueGuard:
    """The integrity checks and repairs of one store's ConsumeQueues (``queues``) against its
    CommitLog; ``dispatcher`` is the store's (a repair holds its lock)."""

    def __init__(
        self,
        commitlog: CommitLog,
        queues: Any,
        dispatcher: Any,
        delay_levels_ms: Iterable[int],
        read_only: bool,
    ) -> None:
        self._commitlog = commitlog
        self.codec = commitlog.codec
        self._queues = queues
        self._dispatcher = dispatcher
        self._delay_levels_ms = tuple(delay_levels_ms)
        self.read_only = read_only
        #: read-only: units of each queue rebuilt in memory, {(topic, queue_id): count}
        self.mended: dict[tuple[str, int], int] = {}

    def verify(
        self,
        found: tuple[np.ndarray, np.ndarray],
        problems: list[dict[str, Any]],
        low: int,
        max_per_queue: int = 10,
    ) -> int:
        """Every unit of every queue must point at a record of that topic, queue id, queue offset
        and size: ``found`` is :meth:`CommitLog.verify`'s (CommitLog offsets, digests) of every
        record, ``scan.check_units`` compares. Units below ``low``, the first segment checked,
        point at what retention deleted; units at a record in ``problems`` point at damage
        reported already."""
        positions, digests = found
        scan = self._commitlog.scan
        damaged = np.array(sorted(p["offset"] for p in problems), dtype=np.int64)
        checked = 0
        for cq in list(self._queues):
            checked += 1
            bad = 0
            key = queue_key(cq.topic, cq.queue_id)
            q = cq.min_offset
            while q < cq.max_offset:
                units = cq.units(q, 65536)
                if not len(units):
                    break
                # in one compiled walk: each unit's record among those found, and its digest
                verdicts = scan.check_units(positions, digests, units, cq.queue_id, key, q, damaged, low)
                for i in np.flatnonzero(verdicts).tolist():
                    bad += 1
                    if bad <= max_per_queue:
                        what = (
                            "has no record: the message at this position is lost (damage)"
                            if verdicts[i] == scan.UNIT_LOST
                            else "does not point at a valid record of its queue"
                        )
                        problems.append(
                            {
                                "offset": int(units["commitlog_offset"][i]),
                                "reason": f"ConsumeQueue {cq.topic}-{cq.queue_id} unit {q + i} {what}",
                            }
                        )
                q += len(units)
            if bad > max_per_queue:
                problems.append(
                    {
                        "offset": problems[-1]["offset"],
                        "reason": f"ConsumeQueue {cq.topic}-{cq.queue_id}: {bad - max_per_queue} "
                        f"more such units ({bad} in all)",
                    }
                )
        return checked

    def unit_message(
        self, topic: str, queue_id: int, queue_offset: int, commitlog_offset: int, size: int
    ) -> Optional[MessageExt]:
        """The message a ConsumeQueue unit points at, checked: its record must have a valid CRC,
        this size, topic, queue id and queue offset, and sit where its PHYSICALOFFSET says.
        None when its segment is gone (retention); :class:`DamagedUnit` when the unit does not
        point at its own record (damage: the caller rebuilds the queue or reports it missing)."""
        if commitlog_offset < 0 or size <= 0:
            raise DamagedUnit(topic, queue_id, queue_offset)
        if commitlog_offset < self._commitlog.min_offset:
            return None
        try:
            msg = self._commitlog.read(commitlog_offset)
        except MessageNotFoundError:
            raise DamagedUnit(topic, queue_id, queue_offset) from None
        if (
            msg.queue_offset != queue_offset
            or msg.queue_id != queue_id
            or msg.size != size
            or msg.commitlog_offset != commitlog_offset
            or msg.topic != topic
        ):
            raise DamagedUnit(topic, queue_id, queue_offset)
        return msg

    def pull(
        self,
        topic: str,
        queue_id: int,
        units: np.ndarray,
        base: int,
        want: int,
        codes: Optional[tuple[int, ...]],
        tags: Optional[frozenset[str]],
    ) -> tuple[list[Any], list[int], int, int, int]:
        """Read the messages of up to ``want`` candidate ``units`` (queue offset ``base`` first),
        each checked as :meth:`unit_message` does, with the codec's ``pull_units`` (one compiled
        call per CommitLog segment the units point into). Returns ``(messages, unit indices,
        stop, kind, last gone)``: ``kind`` is the codec's PULL_END, PULL_FULL or PULL_DAMAGED
        (the unit at ``stop`` does not point at its record); ``last gone`` is the index of the last
        unit whose record retention deleted (-1: none)."""
        codec = self._commitlog.codec
        messages: list[Any] = []
        taken: list[int] = []
        pos, last_gone = 0, -1
        buf: Any = None
        lo = size = 0
        while True:
            got, idx, pos, kind = codec.pull_units(
                buf, lo, size, units, pos, want - len(messages), base, topic, queue_id, codes, tags
            )
            messages += got
            taken += idx
            if kind != codec.PULL_OUTSIDE:
                return messages, taken, pos, kind, last_gone
            offset = int(units[pos]["commitlog_offset"])
            if offset < self._commitlog.min_offset:
                last_gone = pos  # retention deleted its record
                pos += 1
                continue
            mf = self._commitlog.segments.find(offset)
            try:
                if mf is None:
                    raise MessageNotFoundError(f"no segment holds CommitLog offset {offset}")
                buf = mf.view(0, self._commitlog.readable_end(mf))
            except MessageNotFoundError:  # deleted under the pull: as unit_message, damage
                return messages, taken, pos, codec.PULL_DAMAGED, last_gone
            lo, size = mf.file_from_offset, mf.file_size

    def repair(self, keys: Iterable[tuple[str, int]]) -> None:
        """Rebuild the units of the queues ``keys`` from their records in the CommitLog: every
        record with a valid CRC that sits where its PHYSICALOFFSET says is put back at its queue
        offset; a position no such record claims becomes a placeholder (consumers skip it,
        ``get_by_queue_offset`` says it is missing, ``verify()`` reports it). A read-only store
        does it in memory. One CommitLog scan for all of them."""
        keys = set(keys)
        with self._dispatcher.lock:
            end = self._dispatcher.offset
            found: dict[tuple[str, int], list[tuple[np.ndarray, ...]]] = {key: [] for key in keys}
            codec = self._commitlog.codec
            for mf, arr in self._commitlog.chunks(None, end, True):
                base = mf.file_from_offset
                arr = consumable_rows(arr)
                arr = arr[(arr["physical_offset"] == base + arr["position"]) & plausible(arr, base)]
                if not len(arr):
                    continue
                view = mf.view(0, self._commitlog.readable_end(mf))
                groups = [g for g in queue_groups(self._commitlog.scan, view, arr) if (g[0], g[1]) in keys]
                if not groups:
                    continue
                tags = codec.dispatch_info(view, arr, self._delay_levels_ms)[0]["tags_code"]
                for topic, qid, rows in groups:
                    found[(topic, qid)].append(
                        (
                            arr["queue_offset"][rows],
                            base + arr["position"][rows],
                            arr["size"][rows],
                            tags[rows],
                        )
                    )
            if self._commitlog.files:
                self._queues.correct_min_offset(self._commitlog.min_offset)
            for key, parts in found.items():
                cq = self._queues.get(*key)
                if cq is None:
                    continue
                if parts:
                    q, phys, sizes, tags = (np.concatenate(c).astype(np.int64) for c in zip(*parts))
                    # (CommitLog order: the chunks come in it)
                    keep, continues = _in_order(q, _vouched(cq, q, phys))
                    q, phys, sizes, tags = q[keep], phys[keep], sizes[keep], tags[keep]
                    q, first = np.unique(q, return_index=True)  # one record per queue offset
                    phys, sizes, tags = phys[first], sizes[first], tags[first]
                else:
                    q = phys = sizes = tags = np.empty(0, dtype=np.int64)
                    continues = None
                rewritten, missing = cq.repair(q, phys, sizes, tags, continues=continues)
                if self.read_only and rewritten:  # mended in memory only: verify() says so
                    self.mended[key] = self.mended.get(key, 0) + rewritten

    def check_rows(
        self, view: Any, base: int, rows: np.ndarray, queue: tuple[str, int, int], first: int
    ) -> None:
        """Raise ConsumeQueueDamagedError unless ``rows`` are the records of ``queue`` =
        (topic, queue_id, queue offset of unit 0) at units ``first`` .. ``first + len(rows)``."""
        topic, queue_id, q0 = queue
        want = q0 + first + np.arange(len(rows), dtype=np.int64)
        bad = (
            (rows["queue_offset"] != want)
            | (rows["queue_id"] != queue_id)
            | (rows["physical_offset"] != base + rows["position"])
        )
        if not bad.any():
            groups = queue_groups(self._commitlog.scan, view, rows)
            if len(groups) == 1 and groups[0][0] == topic:
                return
            bad = np.ones(len(rows), dtype=bool)
            for name, _qid, idx in groups:
                bad[idx] = name != topic
        k = int(np.flatnonzero(bad)[0])
        raise ConsumeQueueDamagedError(
            f"ConsumeQueue {topic}-{queue_id} unit {int(want[k])} does not point at its message "
            f"(commitlog offset {base + int(rows['position'][k])})",
            topic,
            queue_id,
            int(want[k]),
        )


def verify_store(
    commitlog: CommitLog,
    guard: QueueGuard,
    batch: Any,
    short_queues: Mapping[tuple[str, int], int],
    progress: Optional[Callable[[str, int, int], None]] = None,
) -> dict[str, Any]:
    """A store's ``verify()``, dispatch caught up: every record of ``commitlog``
    (``CommitLog.verify``), every ConsumeQueue unit against its record (``guard``), every
    BatchConsumeQueue unit (``batch``, rocketstore.queues.batchcq.BatchQueueStore), and the
    queues a read-only open found short on disk (``short_queues``: units missing) or the guard
    mended in memory. ``"max_offset"`` is left as the CommitLog's for the caller to set."""
    found = commitlog.verify(progress)
    problems, first = found["problems"], found["min_offset"]
    checked = guard.verify(found.pop("found"), problems, first)
    checked += batch.verify(problems, first)
    for (topic, qid), n in sorted(short_queues.items()):
        problems.append(
            {
                "offset": first,
                "reason": f"ConsumeQueue {topic}-{qid}: {n} unit(s) missing on disk before "
                f"its records in the CommitLog (rebuilt in memory; a writable open rewrites them)",
            }
        )
    for (topic, qid), n in sorted(guard.mended.items()):
        problems.append(
            {
                "offset": first,
                "reason": f"ConsumeQueue {topic}-{qid}: {n} unit(s) on "
                f"disk did not point at their records (rebuilt in memory; a writable "
                f"open rewrites them)",
            }
        )
    return {
        "ok": not problems,
        "records": found["records"],
        "bytes": found["bytes"],
        "segments": found["segments"],
        "min_offset": first,
        "max_offset": commitlog.max_offset,
        "queues": checked,
        "problems": problems,
    }
