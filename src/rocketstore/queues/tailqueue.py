"""A read-only store's queues and index, dispatched into memory (:mod:`rocketstore.queues.dispatch`).

:class:`TailQueue` serves a queue's units from its files on disk and then from an in-memory tail;
:class:`MemoryIndexService` keeps the missing index entries in anonymous memory. Nothing is
written to the store directory.
"""

from __future__ import annotations

import logging
import mmap
import struct
import threading
from collections.abc import Iterator
from typing import Any, Optional

import numpy as np

from rocketstore.errors import MessageNotFoundError
from rocketstore.files.mapped_file import close_map
from rocketstore.format._hotstate import MappedState, QueueTable
from rocketstore.format.units import CQ_UNIT_SIZE
from rocketstore.queues.consumequeue import (
    CQ_UNIT_DTYPE,
    PLACEHOLDER_SIZE,
    fits_between,
    roll_next_file,
    units_of_records,
)
from rocketstore.queues.cqstore import ConsumeQueueStore
from rocketstore.queues.indexservice import IndexService

__all__ = ["TailQueue", "TailQueueStore", "MemoryIndexService"]

log = logging.getLogger("rocketstore.queues.dispatch")  # (the dispatch it is part of)

#: One ConsumeQueue unit's bytes (CQ_UNIT_DTYPE: big-endian commitlog offset, size, tags code).
_UNIT = struct.Struct(">qiq")


class TailQueue:
    """One queue of a read-only store: its units on disk, then units dispatched into memory.

    Has the reading interface of :class:`~rocketstore.queues.consumequeue.ConsumeQueue`
    (``min_offset``, ``max_offset``, ``units``, ``unit``, ``roll_next_file``) and its
    ``append_many`` and ``repair`` rules, in memory: every unit at its own queue offset (a gap
    padded with placeholders and recorded in ``holes``; a wrong unit below the end replaced).
    A queue that needs a unit replaced is copied into memory whole; the disk is never written.
    """

    def __init__(self, topic: str, queue_id: int, disk: Any = None, units_per_file: int = 300_000) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.disk = disk
        self.units_per_file = units_per_file
        self._lock = threading.Lock()
        self._tail = np.empty(0, dtype=CQ_UNIT_DTYPE)
        #: the bytes of ``_tail`` (a memoryview): one unit is written with a struct, not numpy
        self._raw: Optional[memoryview] = None
        self._count = 0
        has_disk = disk is not None and disk.max_offset > disk.min_offset
        self._start: Optional[int] = disk.max_offset if has_disk else None
        self._min = disk.min_offset if has_disk else None
        self._max_physic = disk.max_physic_offset if has_disk else -1
        self.holes: list[tuple[int, int]] = list(disk.holes) if disk is not None else []
        self._rebase = False
        if not has_disk:
            self.disk = None

    @property
    def min_offset(self) -> int:
        return self._min if self._min is not None else 0

    @property
    def max_offset(self) -> int:
        return 0 if self._start is None else self._start + self._count

    @property
    def max_physic_offset(self) -> int:
        return self._max_physic

    @property
    def known_min_offset(self) -> Optional[int]:
        """:attr:`min_offset`, or None while the queue has no unit anywhere."""
        return self._min

    @property
    def tail_start(self) -> Optional[int]:
        """The queue offset of the first unit kept in memory (the disk queue's end when the
        store opened); None without a queue on disk or in memory."""
        return self._start

    @property
    def tail(self) -> np.ndarray:
        """The units kept in memory (CQ_UNIT_DTYPE), from :attr:`tail_start` on."""
        return self._tail

    def roll_next_file(self, queue_offset: int) -> int:
        return roll_next_file(queue_offset, self.units_per_file)

    def correct_min_offset(self, min_commitlog_offset: int) -> None:
        """Raise ``min_offset`` past the units whose records retention deleted (the disk's were
        corrected by the store's ConsumeQueues); the memory tail lets go of them."""
        with self._lock:
            disk = self.disk
            if disk is not None:
                if self._min is not None:
                    self._min = max(self._min, disk.min_offset)
                if disk.min_offset < disk.max_offset:
                    return  # units on disk are still there: the memory tail is above them
            if self._start is None:
                return
            if not self._count:
                # nothing in memory and nothing left on disk: the next unit dispatched may be
                # further on (the units between went with the deleted records)
                self._rebase = True
                self._min = max(self._min or 0, self._start)
                return
            below = self._tail["commitlog_offset"][: self._count] < min_commitlog_offset
            gone = self._count if below.all() else int(np.argmin(below))
            if gone:
                self._tail = self._tail[gone : self._count].copy()
                self._start += gone
                self._count -= gone
            self._min = max(self._min or 0, self._start)
            # every unit left was deleted: the next one dispatched (at or above the CommitLog's
            # new start) may be further on, the units between went with the deleted records
            self._rebase = not self._count

    def ends_record_at(self, commitlog_offset: int) -> bool:
        """Whether a unit on disk ends at ``commitlog_offset`` (the memory tail is not asked)."""
        return self.disk is not None and self.disk.ends_record_at(commitlog_offset)

    def _grow(self, need: int) -> None:
        if need > len(self._tail):
            grown = np.empty(max(need, 2 * len(self._tail), 1024), dtype=CQ_UNIT_DTYPE)
            grown[: self._count] = self._tail[: self._count]
            self._tail = grown

    def _in_memory(self) -> None:
        """Copy the units on disk into memory, so any unit can be replaced."""
        if self.disk is None or self._start is None:
            self.disk = None
            return
        head = np.zeros(self._start - self.min_offset, dtype=CQ_UNIT_DTYPE)
        head["size"] = PLACEHOLDER_SIZE
        q = self.min_offset
        while q < self._start:
            try:
                view = self.disk.units(q, self._start - q)
            except MessageNotFoundError:
                break
            if not len(view):
                break
            head[q - self.min_offset : q - self.min_offset + len(view)] = view
            q += len(view)
        self._tail = np.concatenate((head, self._tail[: self._count]))
        self._count = len(self._tail)
        self._start = self.min_offset
        self.disk = None

    def _stored(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(commitlog offsets, sizes) held at queue offsets ``q`` (all below max_offset)."""
        offsets = np.zeros(len(q), dtype=np.int64)
        sizes = np.zeros(len(q), dtype=np.int64)
        mine = q >= self._start
        at = q[mine] - self._start
        offsets[mine] = self._tail["commitlog_offset"][at]
        sizes[mine] = self._tail["size"][at]
        if self.disk is not None and not mine.all():
            offsets[~mine], sizes[~mine] = self.disk.stored_many(q[~mine])
        return offsets, sizes

    def stored_many(self, queue_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(commitlog offsets, sizes) held at ``queue_offsets`` (all in the queue's bounds), as
        :meth:`ConsumeQueue.stored_many` gives them."""
        q = np.asarray(queue_offsets, dtype=np.int64)
        with self._lock:
            if self._start is None:
                return np.zeros(len(q), dtype=np.int64), np.zeros(len(q), dtype=np.int64)
            return self._stored(q)

    def append(self, queue_offset: int, commitlog_offset: int, size: int, tags_code: int) -> bool:
        """One unit, as :meth:`append_many` stores it (True if written)."""
        if self._append_at_end(queue_offset, commitlog_offset, size, tags_code):
            return True
        return self.append_many((queue_offset,), (commitlog_offset,), (size,), (tags_code,)) == 1

    def _append_at_end(self, queue_offset: int, commitlog_offset: int, size: int, tags_code: int) -> bool:
        """One unit right at the end (a follower catching up with one put), without array work;
        False when it is not the next unit: the general path stores it."""
        with self._lock:
            if self._start is None or self._rebase or queue_offset != self._start + self._count:
                return False
            count = self._count
            self._grow(count + 1)
            tail: Any  # (an ndarray: a buffer, which numpy's stubs do not say)
            raw, tail = self._raw, self._tail
            if raw is None or raw.obj is not tail:  # a new tail array since the last unit
                raw = self._raw = memoryview(tail).cast("B")
            _UNIT.pack_into(raw, count * CQ_UNIT_SIZE, commitlog_offset, size, tags_code)
            self._count = count + 1
            self._max_physic = commitlog_offset + size
            return True

    def append_many(self, queue_offsets: Any, commitlog_offsets: Any, sizes: Any, tags_codes: Any) -> int:
        q = np.asarray(queue_offsets, dtype=np.int64)
        phys = np.asarray(commitlog_offsets, dtype=np.int64)
        sz = np.asarray(sizes, dtype=np.int64)
        tags = np.asarray(tags_codes, dtype=np.int64)
        if not len(q):
            return 0
        if len(q) == 1 and self._append_at_end(int(q[0]), int(phys[0]), int(sz[0]), int(tags[0])):
            return 1
        with self._lock:
            if self._start is None:
                self._start = self._min = int(q.min())  # the first unit at a non-zero offset
            elif self._rebase and not self._count and int(q.min()) > self._start:
                self._start = self._min = int(q.min())  # see correct_min_offset
            self._rebase = False
            written = 0
            below = (q < self.max_offset) & (q >= self.min_offset)
            if below.any():
                stored_offsets, stored_sizes = self._stored(q[below])
                wrong = (stored_offsets != phys[below]) | (stored_sizes != sz[below])
                if wrong.any():  # a record that does not continue its queue there takes no unit
                    qb = q[below]
                    before, before_size = self._stored(np.maximum(qb - 1, self.min_offset))
                    after, after_size = self._stored(np.minimum(qb + 1, self.max_offset - 1))
                    first, last = qb == self.min_offset, qb + 1 == self.max_offset
                    before_size[first] = after_size[last] = 0
                    fits = fits_between(before, before_size, phys[below], sz[below], after, after_size)
                    if (wrong & ~fits).any():
                        log.error(
                            "consume queue %s-%d: %d record(s) claim units below the end but lie out "
                            "of order with their neighbours' records (queue fields damaged): given "
                            "no unit",
                            self.topic,
                            self.queue_id,
                            int((wrong & ~fits).sum()),
                        )
                    wrong &= fits
                if wrong.any():
                    log.warning(
                        "consume queue %s-%d: %d unit(s) below the end do not point at "
                        "their records: replaced in memory",
                        self.topic,
                        self.queue_id,
                        int(wrong.sum()),
                    )
                    self._in_memory()
                    rows = np.flatnonzero(below)[wrong]
                    dst = self._tail[q[rows] - self._start]
                    dst["commitlog_offset"], dst["size"], dst["tags_code"] = phys[rows], sz[rows], tags[rows]
                    self._tail[q[rows] - self._start] = dst
                    written += len(rows)
            later = q >= self.max_offset
            if later.any():
                q, phys, sz, tags = q[later], phys[later], sz[later], tags[later]
                end = self.max_offset
                need = int(q.max()) + 1 - self._start
                self._grow(need)
                fresh = self._tail[self._count : need]
                fresh["commitlog_offset"] = 0
                fresh["size"] = PLACEHOLDER_SIZE
                fresh["tags_code"] = 0
                at = q - self._start
                self._tail["commitlog_offset"][at] = phys
                self._tail["size"][at] = sz
                self._tail["tags_code"][at] = tags
                filled = np.zeros(need - self._count, dtype=bool)
                filled[at - self._count] = True
                if not filled.all():
                    gaps = np.flatnonzero(~filled)
                    log.warning(
                        "consume queue %s-%d: %d unit(s) dispatched past the end %d; the "
                        "units between are rebuilt from the CommitLog",
                        self.topic,
                        self.queue_id,
                        len(q),
                        end,
                    )
                    self.holes.append((end + int(gaps[0]), end + int(gaps[-1]) + 1))
                self._count = need
                last = self._tail[need - 1]
                self._max_physic = int(last["commitlog_offset"]) + int(last["size"])
                written += len(q)
            return written

    def repair(
        self,
        queue_offsets: Any,
        commitlog_offsets: Any,
        sizes: Any,
        tags_codes: Any,
        continues: Optional[int] = None,
    ) -> tuple[int, int]:
        """:meth:`ConsumeQueue.repair` in memory (``continues``: unused; a read-only store puts
        nothing)."""
        q = np.asarray(queue_offsets, dtype=np.int64)
        with self._lock:
            if self._start is None:
                if not len(q):
                    return 0, 0
                self._start = self._min = int(q.min())
            self._in_memory()
            lo, hi = self.min_offset, self.max_offset
            if len(q) and int(q.min()) > lo:  # the first positions' records are gone: as
                lo = self._min = min(hi, int(q.min()))  # ConsumeQueue.repair
            top = max(hi, int(q.max()) + 1 if len(q) else hi)
            before = self._tail[lo - self._start : hi - self._start].copy()
            units, found = units_of_records(
                lo,
                top,
                q,
                np.asarray(commitlog_offsets, dtype=np.int64),
                np.asarray(sizes, dtype=np.int64),
                np.asarray(tags_codes, dtype=np.int64),
            )
            n = hi - lo
            rewritten = int(
                (
                    (before["commitlog_offset"] != units["commitlog_offset"][:n])
                    | (before["size"] != units["size"][:n])
                ).sum()
            )
            missing = (top - lo) - found
            self._tail, self._count, self._start, self.disk = units, len(units), lo, None
            self.holes = []
            if len(units):
                last = units[-1]
                self._max_physic = int(last["commitlog_offset"]) + int(last["size"])
        if rewritten or missing:
            log.error(
                "consume queue %s-%d rebuilt from the CommitLog in memory: %d unit(s) "
                "replaced, %d position(s) whose record is gone (skipped by consumers)",
                self.topic,
                self.queue_id,
                rewritten,
                missing,
            )
        return rewritten, missing

    def units(self, start: int, count: int) -> np.ndarray:
        with self._lock:
            lo, hi = self.min_offset, self.max_offset
            if not lo <= start <= hi:
                raise MessageNotFoundError(
                    f"queue offset {start} is outside [{lo}, {hi}) of {self.topic}-{self.queue_id}"
                )
            if self._start is None:
                return np.empty(0, dtype=CQ_UNIT_DTYPE)
            if start < self._start:
                head: np.ndarray = self.disk.units(start, min(count, self._start - start))
                return head
            i = start - self._start
            view = self._tail[i : min(self._count, i + count)]
        out: np.ndarray = view.view()
        out.flags.writeable = False
        return out

    def unit(self, queue_offset: int) -> tuple[int, int, int]:
        view = self.units(queue_offset, 1)
        if not len(view):
            raise MessageNotFoundError(
                f"queue offset {queue_offset} is past the end of {self.topic}-{self.queue_id}"
            )
        return int(view[0]["commitlog_offset"]), int(view[0]["size"]), int(view[0]["tags_code"])


class TailQueueStore(QueueTable):
    """The queues of a read-only store: those on disk (read-only), extended in memory.

    ``_queues`` (a read-only view, changed through ``_put_queue`` and ``_take_queues``) is the
    QueueTable's it extends (compiled: the one-call reads look queues up in C).
    """

    def __init__(self, root: str, units_per_file: int):
        super().__init__()
        self.units_per_file = units_per_file
        self.disk = ConsumeQueueStore(root, units_per_file, read_only=True)
        self._lock = threading.Lock()

    def recover(self, limit: Optional[int] = None) -> list[int]:
        """Recover the disk queues (without writing; ``limit``: as after an abnormal stop, see
        :meth:`ConsumeQueueStore.recover`); returns their max physical offsets."""
        ends = [cq.recover() if limit is None else cq.recover_prefix(limit) for cq in self.disk]
        for cq in self.disk:
            self._put_queue(
                (cq.topic, cq.queue_id), TailQueue(cq.topic, cq.queue_id, cq, self.units_per_file)
            )
        return ends

    @property
    def incomplete(self) -> bool:
        """Whether a queue's last file on disk was left out (empty or short: a writer creating
        it, or damage): the units it should hold are not on disk, whatever a checkpoint says."""
        return any(cq.last_file_skipped for cq in self.disk)

    def correct_min_offset(self, min_commitlog_offset: int) -> None:
        """Raise each queue's ``min_offset`` past units whose records retention deleted, in
        memory only (``ConsumeQueue.correct_min_offset`` reads, never writes)."""
        self.disk.correct_min_offset(min_commitlog_offset)
        for queue in self._queues.values():
            queue.correct_min_offset(min_commitlog_offset)

    def get(self, topic: str, queue_id: int) -> Optional[TailQueue]:
        return self._queues.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> TailQueue:
        key = (topic, queue_id)
        queue = self._queues.get(key)
        if queue is None:
            with self._lock:
                queue = self._queues.get(key)
                if queue is None:
                    queue = TailQueue(topic, queue_id, None, self.units_per_file)
                    self._put_queue(key, queue)
        return queue

    def __iter__(self) -> Iterator[TailQueue]:
        return iter(list(self._queues.values()))

    def __len__(self) -> int:
        return len(self._queues)

    def close(self) -> None:
        self._take_queues()
        self.disk.close()


class _AnonymousMap(MappedState):
    """The part of :class:`~rocketstore.files.mapped_file.MappedFile` an index file uses, in memory
    (``mm`` and ``file_size``: the fields of the MappedState it extends)."""

    __slots__ = ("fd",)

    def __init__(self, size: int):
        self.mm: mmap.mmap = mmap.mmap(-1, size)  # zero pages, materialised only where written
        self.file_size = size
        self.fd = -1

    def flush(self, *args: object) -> None:
        pass

    def close(self) -> None:
        mm, self.mm = self.mm, None  # type: ignore[assignment]  # closed
        close_map(mm)

    destroy = close


class MemoryIndexService(IndexService):
    """An :class:`IndexService` whose files live in anonymous memory (a read-only store's tail)."""

    def __init__(self, root: str, **kwargs: Any) -> None:
        super().__init__(root, **kwargs)
        self._loaded = True

    def _make_directory(self) -> None:
        pass

    def _open_mapping(self, path: str, create: bool, private: bool = False) -> _AnonymousMap:
        return _AnonymousMap(self.file_size)

    def _reserve(self, f: Any, items: int) -> None:
        pass
