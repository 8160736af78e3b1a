"""The files of a queue of 20-byte units (rocketstore.queues.consumequeue's) and what reads or
rebuilds their units: a unit's bytes and checks, its file and position (:func:`unit_location`), a :class:`UnitFileQueue` of files that can be dropped at either end, views
of a file's units and of the extents that hold data, the zeroing of a range page by page, the
units records call for (:func:`units_of_records`) and the binary search along a queue
(:func:`first_unit_where`, :func:`offset_of_time`)."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from typing import Any, Optional

import numpy as np

from rocketstore.base._checks import INT64_MAX, INT64_MIN
from rocketstore.errors import InvalidMessageError, InvalidQueueIdError, MessageNotFoundError
from rocketstore.files.mapped_file import MappedFile, MappedFileQueue, advise_random, offset_to_file_name
from rocketstore.format.units import CQ_UNIT_DTYPE, CQ_UNIT_SIZE, PLACEHOLDER_SIZE

__all__ = [
    "DEFAULT_CQ_UNITS",
    "DEFAULT_CQ_FILE_SIZE",
    "PLACEHOLDER_UNIT",
    "UNIT_STRUCT",
    "fits_between",
    "encode_unit",
    "check_unit",
    "unit_location",
    "roll_next_file",
    "ZERO_PAGE",
    "UnitFileQueue",
    "file_units",
    "unit_extents",
    "false_runs",
    "zero_pages",
    "zero_after",
    "check_queue_id",
    "first_false",
    "units_of_records",
    "first_unit_where",
    "offset_of_time",
]


DEFAULT_CQ_UNITS = 300_000
DEFAULT_CQ_FILE_SIZE = DEFAULT_CQ_UNITS * CQ_UNIT_SIZE  # 6,000,000

UNIT_STRUCT = struct.Struct(">qiq")
assert UNIT_STRUCT.size == CQ_UNIT_SIZE

PLACEHOLDER_UNIT = UNIT_STRUCT.pack(0, PLACEHOLDER_SIZE, 0)


def fits_between(before: Any, before_size: Any, offset: Any, size: Any, after: Any, after_size: Any) -> Any:
    """Whether records at CommitLog ``offset`` of ``size`` bytes can sit between the records
    the units before and after their queue positions point at (numpy arrays or ints): a
    queue's records rise with the CommitLog, so a record that lies after its successor's, or
    before its predecessor's, does not continue its queue there (its QUEUEID, QUEUEOFFSET or
    TOPIC, which no CRC covers, is damaged). A placeholder or empty neighbour (size 0 or
    PLACEHOLDER_SIZE) does not count."""
    real_before = (before_size > 0) & (before_size != PLACEHOLDER_SIZE) & (before >= 0)
    real_after = (after_size > 0) & (after_size != PLACEHOLDER_SIZE) & (after >= 0)
    return np.logical_not(
        (real_before & (before + before_size > offset)) | (real_after & (offset + size > after))
    )


def encode_unit(commitlog_offset: int, size: int, tags_code: int) -> bytes:
    """The 20 bytes of one unit."""
    check_unit(commitlog_offset, size, tags_code)
    return UNIT_STRUCT.pack(commitlog_offset, size, tags_code)


def unit_location(queue_offset: int, units_per_file: int = DEFAULT_CQ_UNITS) -> tuple[str, int]:
    """(file name, byte position in it) of queue offset ``queue_offset`` (§4.1)."""
    if queue_offset < 0:
        raise InvalidMessageError(f"queue offset {queue_offset} is negative")
    byte = queue_offset * CQ_UNIT_SIZE
    file_size = units_per_file * CQ_UNIT_SIZE
    return offset_to_file_name(byte - byte % file_size), byte % file_size


def roll_next_file(queue_offset: int, units_per_file: int = DEFAULT_CQ_UNITS) -> int:
    """``rollNextFile``: the first queue offset of the file after the one holding ``queue_offset``."""
    return queue_offset + units_per_file - queue_offset % units_per_file


def check_unit(commitlog_offset: int, size: int, tags_code: int) -> None:
    if not 0 <= commitlog_offset <= INT64_MAX:
        raise InvalidMessageError(f"CommitLog offset {commitlog_offset} is outside 0 .. 2**63-1")
    if not 0 < size <= PLACEHOLDER_SIZE:
        raise InvalidMessageError(f"record size {size} is outside 1 .. 2**31-1")
    if not INT64_MIN <= tags_code <= INT64_MAX:
        raise InvalidMessageError(f"tagsCode {tags_code} does not fit a Java long")


class UnitFileQueue(MappedFileQueue):
    """A :class:`MappedFileQueue` that can also drop files at either end (retention, truncation).

    A file it makes is advised ``MADV_RANDOM`` (:func:`advise_random`): its first unit otherwise
    faults in a large folio ahead, 1.6 ms per new queue on this project's VM, 13 of the 21 ms of
    a fresh store's first dispatch of 8 queues. A queue's units are written in order, a page at
    a time, and read back through the same map; files found on disk keep the default advice (a
    consumer after a restart reads them ahead)."""

    def segment_at(self, start: int) -> MappedFile:
        made = not self.files or start >= self.files[-1].end_offset
        mf = super().segment_at(start)
        if made and not self.read_only:
            advise_random(mf.mm)
        return mf

    def drop_first(self) -> None:
        with self._lock:
            self.files.pop(0).destroy()

    def drop_last(self) -> None:
        with self._lock:
            self.files.pop().destroy()

    def forget_vanished(self) -> bool:
        """Read-only: unmap (without deleting) the files up to the last one that no longer
        exists, which retention deleted (oldest first, so every one before it is gone too);
        whether there was one."""
        with self._lock:
            gone = [i for i, mf in enumerate(self.files) if not os.path.exists(mf.path)]
            for _ in range(gone[-1] + 1 if gone else 0):
                self.files.pop(0).close()
            return bool(gone)

    def forget_after(self, offset: int) -> None:
        """Unmap (without deleting) every file that starts after ``offset``: read-only recovery."""
        with self._lock:
            while self.files and self.files[-1].file_from_offset > offset:
                self.files.pop().close()


def file_units(mf: MappedFile, count: Optional[int] = None) -> np.ndarray:
    """A numpy view of the first ``count`` units of ``mf`` (all of them by default).

    The view holds an export of the map: keep it local, so it is released before anyone closes
    the map.
    """
    if count is None:
        count = mf.file_size // CQ_UNIT_SIZE
    return np.frombuffer(memoryview(mf.mm).toreadonly(), dtype=CQ_UNIT_DTYPE, count=count)


def unit_extents(mf: MappedFile, most: int = -1) -> list[tuple[int, int]]:
    """The ``[lo, hi)`` unit index ranges of ``mf`` whose bytes all lie in its data, not in a hole
    (:meth:`MappedFile.data_extents`): only those are read through the map, since on a full
    tmpfs a read of a hole through a map is a SIGBUS. A hole holds no unit (zeros): one cut by
    a hole's edge was never written whole."""
    extents = []
    for a, b in mf.data_extents(most=most):
        lo, hi = -(-a // CQ_UNIT_SIZE), b // CQ_UNIT_SIZE
        if lo < hi:
            extents.append((lo, hi))
    return extents


def false_runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """The ``[lo, hi)`` index ranges where a bool array is False."""
    edges = np.flatnonzero(np.diff(np.concatenate(([1], mask.view(np.int8), [1]))))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])]


#: The unit of :func:`zero_pages`: what the kernel writes back (one page, in the common case).
ZERO_PAGE = 4096


def zero_pages(mm: Any, lo: int, hi: int) -> tuple[int, int]:
    """Make ``mm[lo:hi]`` zero, writing only the ``ZERO_PAGE`` pieces (page-aligned, cut to the
    range) that hold a non-zero byte. Returns where the first written piece starts and the last
    ends (equal: nothing written)."""
    if hi <= lo:
        return hi, hi
    first, last = hi, lo
    whole = np.frombuffer(mm, dtype=np.uint8, count=hi - lo, offset=lo)
    try:
        at = lo
        while at < hi:
            if at % ZERO_PAGE == 0 and hi - at >= ZERO_PAGE:  # up to 256 whole pages at once
                nxt = at + min((hi - at) // ZERO_PAGE, 256) * ZERO_PAGE
            else:  # the piece up to the next page boundary (or hi)
                nxt = min(hi, (at // ZERO_PAGE + 1) * ZERO_PAGE)
            piece = whole[at - lo : nxt - lo]
            if piece.any():
                pages = (
                    np.flatnonzero(piece.reshape(-1, ZERO_PAGE).any(axis=1)) if nxt - at > ZERO_PAGE else [0]
                )
                size = min(ZERO_PAGE, nxt - at)
                for k in pages:
                    piece[k * size : (k + 1) * size] = 0
                first = min(first, at + int(pages[0]) * size)
                last = max(last, at + (int(pages[-1]) + 1) * size)
            at = nxt
    finally:
        del whole
    return (first, last) if first < last else (hi, hi)


def zero_after(mf: MappedFile, lo: int) -> None:
    """Zero every byte of ``mf`` from ``lo`` on, and msync what was written: only the pages
    that hold a non-zero byte are written (a page already zero is left clean, so it is
    neither dirtied nor written back), and no table of the non-zero bytes is made."""
    first, last = mf.file_size, lo
    for a, b in mf.data_extents(lo):  # a hole is zero, and not read (see unit_extents)
        written = zero_pages(mf.mm, a, b)
        if written[0] < written[1]:
            first, last = min(first, written[0]), max(last, written[1])
    if first < last:
        mf.flush(first, last)


def check_queue_id(queue_id: object) -> int:
    """``queue_id`` if it is an int >= 0; InvalidQueueIdError otherwise."""
    if isinstance(queue_id, bool) or not isinstance(queue_id, (int, np.integer)) or queue_id < 0:
        raise InvalidQueueIdError(f"queue id must be a non-negative int, not {queue_id!r}")
    return int(queue_id)


def first_false(mask: np.ndarray) -> int:
    """Index of the first False in a bool array, or its length when all are True."""
    if mask.all():
        return len(mask)
    return int(np.argmin(mask))


def units_of_records(
    lo: int,
    hi: int,
    queue_offsets: np.ndarray,
    commitlog_offsets: np.ndarray,
    sizes: np.ndarray,
    tags_codes: np.ndarray,
) -> tuple[np.ndarray, int]:
    """The units of queue offsets ``[lo, hi)`` that records (arrays, one per queue offset) call
    for: each record's unit at its queue offset, a placeholder where no record is. Returns
    (units, how many have a record); :meth:`ConsumeQueue.repair` and the read-only store's
    in-memory repair both rebuild from it."""
    units = np.zeros(hi - lo, dtype=CQ_UNIT_DTYPE)
    units["size"] = PLACEHOLDER_SIZE
    rows = (queue_offsets >= lo) & (queue_offsets < hi)
    at = queue_offsets[rows] - lo
    units["commitlog_offset"][at] = commitlog_offsets[rows]
    units["size"][at] = sizes[rows]
    units["tags_code"][at] = tags_codes[rows]
    return units, int(rows.sum())


def first_unit_where(queue: Any, reached: Callable[[tuple[int, int, int]], bool]) -> int:
    """The first queue offset of ``queue`` (anything with ``min_offset``, ``max_offset`` and
    ``unit``) whose ``(commitlog_offset, size, tags_code)`` unit ``reached`` holds for, by binary
    search: ``reached`` must be False up to some point along the queue and True after it.
    ``max_offset`` when it holds for none; a unit deleted under the search counts as False."""
    lo: int = queue.min_offset
    hi: int = queue.max_offset
    while lo < hi:
        mid = (lo + hi) // 2
        try:
            unit = queue.unit(mid)
        except MessageNotFoundError:  # deleted under us: before anything left
            lo = mid + 1
            continue
        if reached(unit):
            hi = mid
        else:
            lo = mid + 1
    return lo


def offset_of_time(queue: Any, timestamp: int, store_time_of: Callable[[int], Optional[int]]) -> int:
    """:meth:`ConsumeQueue.offset_of_time` over anything with its reading interface
    (``min_offset``, ``max_offset``, ``unit``): a read-only store's tail queues too."""

    def reached(unit: tuple[int, int, int]) -> bool:
        stored = store_time_of(unit[0])
        return stored is not None and stored >= timestamp

    return first_unit_where(queue, reached)
