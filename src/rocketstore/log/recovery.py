"""Recovery of a store as it opens: where the CommitLog's valid data ends, what the queues and
the index miss of it, and the queues that lost units.

An open (:class:`rocketstore.store.StoreBase`) calls these in order: :func:`recover` scans the
CommitLog and cuts it, the ConsumeQueues and the index where its valid data ends, and says where
each queue goes on and where dispatch resumes; :func:`rebuild` dispatches what the queues and
the index miss; :func:`repair_holes` rebuilds the queues that recovery found units missing in.
A writable open changes the files; a read-only one rebuilds in memory only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Optional

from rocketstore.errors import InvalidMessageError
from rocketstore.log import sharedappend

_log = logging.getLogger("rocketstore.store")

#: A rebuild (dispatch on open) checkpoints its progress every this many CommitLog bytes.
REBUILD_STEP = 64 << 20

#: ``report(stage, done, total)``: an open's progress callback.
Report = Callable[[str, int, int], None]


def recover(
    commitlog: Any,
    checkpoint: Any,
    queues: Any,
    index: Any,
    *,
    abnormal: bool,
    read_only: bool,
    until: Optional[int],
    report: Report,
) -> tuple[int, dict[tuple[str, int], int], int]:
    """Recover the CommitLog (:meth:`CommitLog.recover`: a CRC scan from where the checkpoint
    or RocketMQ's rules say, to the first invalid record) and cut the CommitLog, the
    ConsumeQueues and the index where its valid data ends.

    Returns (end offset, {(topic, queue_id): next queue offset}, dispatch start offset).
    """
    scan_from, complete_to = commitlog.scan_start(checkpoint, queues, clean=not abnormal)
    if abnormal:
        # Units past what the checkpoint vouches for may be torn, zero or stale in any of the
        # files written since (a power cut writes pages back in any order): each queue keeps
        # the prefix the checkpoint vouches for; the records after it are dispatched again.
        # A read-only store does it in memory.
        queues.recover(limit=complete_to)
    tail: dict[
        tuple[str, int], list[int]
    ] = {}  # (topic, queue_id) -> [first, last] queue offset seen by the scan
    end = commitlog.recover(
        scan_from,
        checkpoint.confirm_phy_offset,
        on_ranges=lambda ranges: _collect_queue_offsets(ranges, tail),
        report=lambda done, total: report("recover", done, total),
        crashed=abnormal,
        until=until,
    )
    if not read_only:
        commitlog.truncate_to(end, crashed=abnormal)
        if abnormal:
            commitlog.sync_recovered(scan_from, end)
        queues.truncate_dirty(end)
        index.drop_after(end)
        if commitlog.files:
            queues.correct_min_offset(commitlog.min_offset)
    elif commitlog.files:  # in memory only: what retention deleted is not readable
        queues.correct_min_offset(commitlog.min_offset)
    queue_offsets = {(cq.topic, cq.queue_id): cq.max_offset for cq in queues if cq.max_offset}
    lowest = commitlog.min_offset if commitlog.files else end
    gap = False
    for key, (low, high) in tail.items():
        have = queue_offsets.get(key, 0)
        gap |= low > have  # units missing before the scanned range
        queue_offsets[key] = max(have, high + 1)
    # Resume dispatch where every queue and the index are complete to.
    if gap:
        queue_start = lowest  # a queue the CommitLog holds is missing or short on disk
    elif abnormal:
        queue_start = complete_to
        if read_only and complete_to == scan_from != checkpoint.confirm_phy_offset:
            # RocketMQ's rules chose the segment: nothing vouches for the queues below it
            ends = [cq.max_physic_offset for cq in queues if cq.max_physic_offset >= 0]
            queue_start = min(ends, default=lowest)
    else:
        queue_start = max((cq.max_physic_offset for cq in queues), default=lowest)
        queue_start = lowest if queue_start < 0 else queue_start
    index_files = index.files
    index_start = lowest
    if index_files:
        last = index_files[-1]
        index_start = last.end_phy_offset
        if last.index_count > 1 and not last.is_full:
            # endPhyOffset is where the last indexed record starts; in a file with room left
            # all its keys are there (IndexService._already_indexed): resume after it.
            index_start = commitlog.record_end(index_start, end) or index_start
    return end, queue_offsets, max(lowest, min(queue_start, index_start, end))


def published_end(live: Any, path: str) -> Optional[int]:
    """How far a read-only open reads: where the writers' published records end (the live
    page), while a process may append to the store through its shared table: the owner, or
    a joined writer (which appends on for up to OWNER_LOOK_MS after the owner died).

    Past that end lie records being written, or whole records a joined writer wrote before
    it was killed inside its append: the next append writes over those, at their queue
    offsets (rocketstore.log.sharedappend), so they are no messages, and a reader that took one
    for the message at its queue offset would hand out what was never stored there. What
    comes after is read as the page announces it (:class:`~rocketstore.processes.live.Follower`).
    None (no bound) when no such process is left: nobody writes over the tail then, and the
    next writer's recovery keeps every whole record the scan finds.

    The owner dispatches its records as it appends them, before it publishes their end (a
    batch holds the append lock), so units on disk may point past this bound; the ones a
    reader keeps point below the checkpoint's offset, and the scan goes at least that far
    (CommitLog.recover)."""
    if live is None or not sharedappend.appenders_present(path):
        return None
    return int(live.state()[0])


def _collect_queue_offsets(
    ranges: list[tuple[str, int, int, int]], tail: dict[tuple[str, int], list[int]]
) -> None:
    for topic, qid, low, high in ranges:
        seen = tail.get((topic, qid))
        if seen is None:
            tail[(topic, qid)] = [low, high]
        else:
            seen[0], seen[1] = min(seen[0], low), max(seen[1], high)


def rebuild(
    dispatcher: Any,
    end: int,
    report: Report,
    save_checkpoint: Optional[Callable[[], None]] = None,
    start_flush: Optional[Callable[[], None]] = None,
) -> None:
    """Dispatch what the queues and the index miss below ``end``. A writable store gives
    ``save_checkpoint``, which records the progress every REBUILD_STEP bytes (so an interrupted
    rebuild resumes from there instead of from the start), and ``start_flush``, which starts the
    queues' writeback between the steps' quarters."""
    start = dispatcher.offset
    total = end - start
    if total <= 0:
        return
    progress = lambda offset: report("dispatch", offset - start, total)
    step_end = min(end, start + REBUILD_STEP)
    while dispatcher.offset < end:
        before = dispatcher.offset
        # each step in quarters: after each but the last the queues' writeback is started
        # (a hint), so the step's checkpoint finds most of their pages written already
        target = min(step_end, before + max(1, REBUILD_STEP // 4))
        dispatcher.catch_up(progress=progress, target=target)
        if dispatcher.offset <= before:
            break  # nothing dispatchable (read-only beside a writer mid-record)
        if dispatcher.offset >= step_end or target == step_end:
            step_end = min(end, dispatcher.offset + REBUILD_STEP)
            if save_checkpoint is not None and dispatcher.offset < end:
                save_checkpoint()
        elif start_flush is not None:
            start_flush()
    report("dispatch", total, total)


def repair_holes(
    queues: Any, guard: Any, queue_offsets: dict[tuple[str, int], int], read_only: bool
) -> dict[tuple[str, int], int]:
    """Rebuild from the CommitLog every queue that recovery or dispatch found units missing
    in, and every queue that ends before the next queue offset its records in the CommitLog
    call for (``queue_offsets``: its last units were lost, e.g. a zeroed file)."""
    short: dict[tuple[str, int], int] = {}
    for (topic, qid), nxt in queue_offsets.items():
        cq = queues.get(topic, qid)
        if cq is None or cq.max_offset < nxt:
            if read_only:  # rebuilt in memory only: verify() says so
                short[(topic, qid)] = nxt - (cq.max_offset if cq is not None else 0)
            try:
                cq = queues.find_or_create(topic, qid)
            except InvalidMessageError:  # not a topic a queue can be named after (damage)
                continue
            cq.holes.append((cq.max_offset, nxt))
    damaged = [(cq.topic, cq.queue_id) for cq in queues if cq.holes]
    if damaged:
        guard.repair(damaged)
    return short


def settle_queue_offsets(core: Any, queues: Any, queue_offsets: dict[tuple[str, int], int]) -> None:
    """After :func:`repair_holes`: a queue that ends before the next queue offset recovery found
    (``queue_offsets``) after its rebuild had its last offsets claimed by records whose queue
    fields are damaged (the rebuild refused them): its next put goes at its end, so the queue
    continues there instead of skipping positions no record holds."""
    for (topic, qid), nxt in queue_offsets.items():
        cq = queues.get(topic, qid)
        if cq is not None and cq.max_offset < nxt:
            _log.warning(
                "consume queue %s-%d: no record continues it past queue offset %d (the CommitLog "
                "claimed %d: damaged queue fields): its next message goes there",
                topic,
                qid,
                cq.max_offset,
                nxt,
            )
            core.set_queue_offset(topic, qid, cq.max_offset)
