"""ConsumeQueue: the per-(topic, queue) index of CommitLog positions (spec §4).

Each queue is a directory ``<root>/consumequeue/<topic>/<queueId>/`` of fixed-size files named
by the 20-digit start *byte* offset, holding 20-byte units; queue offset ``q`` lives at byte
``q * 20``:

=====  ======  ===============================================
 pos    size    field (big-endian, signed)
=====  ======  ===============================================
   0      8     CommitLog offset of the record (long)
   8      4     record size, = TOTALSIZE (int)
  12      8     tagsCode: Java hash of TAGS, sign-extended (long)
=====  ======  ===============================================

A file holds ``units_per_file`` units (300,000 = 6,000,000 bytes in RocketMQ). A unit is valid
iff ``commitlog_offset >= 0 and size > 0``; a zero-filled tail reads as invalid. The placeholder
unit ``(0, 0x7FFFFFFF, 0)`` pads the head of a queue's first file when its first queue offset is
not at a file start (§4.2 step 4); placeholders are valid but never part of ``[min_offset,
max_offset)``.

Lifetime: :meth:`ConsumeQueue.units` returns read-only numpy views into the map. A view keeps its
map alive (Python's ``mmap`` refuses to unmap while exported), so closing or deleting a queue file
never leaves a view pointing into unmapped memory; the memory is released with the last view.

Versions: dispatch, recovery and ``maxPhysicOffset`` follow RocketMQ 5.x (duplicate iff
``offset + size <= maxPhysicOffset``, which holds start + size); ``correct_min_offset`` is the
5.x algorithm (last-unit check, then a binary search of the first file).
"""

from __future__ import annotations

import errno
import logging
import os
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any, Optional

import numpy as np

from rocketstore.base._checks import INT64_MAX
from rocketstore.errors import (
    InvalidMessageError,
    MessageNotFoundError,
    SegmentError,
    StoreClosedError,
    StoreConfigError,
    StoreReadOnlyError,
)
from rocketstore.files.mapped_file import MappedFile, allocate_range
from rocketstore.format._hotstate import QueueState
from rocketstore.format.units import CQ_UNIT_DTYPE, CQ_UNIT_SIZE, PLACEHOLDER_SIZE
from rocketstore.message import validate_stored_topic
from rocketstore.queues.unitfiles import (
    DEFAULT_CQ_FILE_SIZE,
    DEFAULT_CQ_UNITS,
    PLACEHOLDER_UNIT,
    UNIT_STRUCT,
    ZERO_PAGE,
    UnitFileQueue,
    check_queue_id,
    check_unit,
    encode_unit,
    false_runs,
    file_units,
    first_false,
    first_unit_where,
    fits_between,
    offset_of_time,
    roll_next_file,
    unit_extents,
    unit_location,
    units_of_records,
    zero_after,
)

__all__ = [
    "CQ_UNIT_SIZE",
    "DEFAULT_CQ_UNITS",
    "DEFAULT_CQ_FILE_SIZE",
    "CQ_UNIT_DTYPE",
    "PLACEHOLDER_SIZE",
    "PLACEHOLDER_UNIT",
    "encode_unit",
    "fits_between",
    "unit_location",
    "roll_next_file",
    "units_of_records",
    "ConsumeQueue",
]

log = logging.getLogger("rocketstore.queues.consumequeue")

_LONG = struct.Struct(">q")
_RESERVE_BYTES = 1 << 17  # file space allocated ahead of the writer at a time (6,553 units)


class ConsumeQueue(QueueState):
    """The consume queue of one (topic, queue id) under ``<root>/consumequeue/<topic>/<queueId>``.

    Call :meth:`load` then :meth:`recover` to open an existing queue; a new queue needs neither
    (its directory and first file are created by the first :meth:`append`). All methods are
    thread-safe; ``units`` views may be read from any thread while the queue is appended to.
    """

    # ``holes``, ``_min_logic`` and ``_files`` are the fields of the QueueState it extends
    # (compiled: the one-call reads read them in C); the rest stay in the instance dict.
    __slots__ = ("__dict__", "__weakref__")

    def __init__(
        self,
        root: str,
        topic: str,
        queue_id: int,
        units_per_file: int = DEFAULT_CQ_UNITS,
        read_only: bool = False,
        *,
        preallocate: bool = False,
    ):
        self.topic = validate_stored_topic(topic)
        self.queue_id = check_queue_id(queue_id)
        if isinstance(units_per_file, bool) or not isinstance(units_per_file, int) or units_per_file < 1:
            raise StoreConfigError(f"units_per_file must be a positive int, not {units_per_file!r}")
        self.units_per_file = units_per_file
        self.file_size = units_per_file * CQ_UNIT_SIZE
        self.read_only = bool(read_only)
        self.directory = os.path.join(os.fspath(root), "consumequeue", topic, str(self.queue_id))
        self._files = UnitFileQueue(
            self.directory, self.file_size, read_only=self.read_only, preallocate=preallocate
        )
        self._lock = threading.RLock()
        self._min_logic = 0  # minLogicOffset, in bytes
        self._max_physic = -1  # 5.x maxPhysicOffset: start + size of the last unit written
        self._flushed = 0  # byte offset below which every unit has been msynced
        self._reserved = (-1, 0)  # (file start, bytes of it allocated ahead of the writer)
        self._closed = False
        #: ``[lo, hi)`` queue offset ranges whose units are missing (damage, or records
        #: dispatched past a gap): the store rebuilds them from the CommitLog (:meth:`repair`)
        self.holes: list[tuple[int, int]] = []

    # -- opening ------------------------------------------------------------------------------
    def load(self) -> None:
        """Map the queue's files (checking names, sizes and contiguity); :meth:`recover` next.

        Until :meth:`recover` runs, every file counts as full (as RocketMQ's ``load``).
        """
        with self._lock:
            self._check_open()
            try:
                self._files.load()
            except StoreConfigError as exc:
                raise StoreConfigError(f"consume queue {self.topic}-{self.queue_id}: {exc}") from None
            for mf in self._files.files:
                mf.wrote_position = self.file_size
            self._min_logic = self._files.min_offset
            self._flushed = self._end()

    def recover(self) -> int:
        """§4.4 after a clean stop: find the end of the units from the third-last file on; drop
        the files after it.

        A clean stop leaves zeros after the last unit, so the queue ends after the last valid
        unit of those files, not at the first invalid one as in RocketMQ: an invalid unit before
        it is damage (a zeroed page), not the end, and cutting there would lose every unit after
        it. Such units are recorded in :attr:`holes` for the store to repair from the CommitLog.

        Returns the queue's max physical offset as RocketMQ 5.x computes it (start + size of the
        last valid unit), or -1 when the queue holds no unit pointing into the CommitLog.
        Also sets ``min_offset`` to the first unit that is not a placeholder.
        """
        return self._recover(self._end_after_last_valid, zero=False)

    def _end_after_last_valid(self, files: list[MappedFile]) -> int:
        """:meth:`recover`'s end: after the last valid unit of the last three files; the invalid
        units before it go to :attr:`holes`."""
        first_scanned = max(0, len(files) - 3)
        end = files[first_scanned].file_from_offset
        masks: list[tuple[int, np.ndarray]] = []
        for mf in files[first_scanned:]:
            valid = np.zeros(self.units_per_file, dtype=bool)  # a hole holds no unit
            for lo, hi in unit_extents(mf):
                arr = file_units(mf, hi)[lo:]
                # a unit whose end would not fit a Java long points at no record (damage)
                valid[lo:hi] = (
                    (arr["commitlog_offset"] >= 0)
                    & (arr["size"] > 0)
                    & (arr["commitlog_offset"] <= INT64_MAX - arr["size"].astype(np.int64))
                )
                del arr
            masks.append((mf.file_from_offset // CQ_UNIT_SIZE, valid))
            used = np.flatnonzero(valid)
            if len(used):
                end = mf.file_from_offset + (int(used[-1]) + 1) * CQ_UNIT_SIZE
        for first, valid in masks:
            valid = valid[: max(0, end // CQ_UNIT_SIZE - first)]
            self.holes += [(first + lo, first + hi) for lo, hi in false_runs(valid)]
        return end

    def recover_prefix(self, limit: int) -> int:
        """Recovery after an abnormal stop: keep the longest run of units, from the queue's
        start, that are valid and point below CommitLog offset ``limit``; drop the rest.

        ``limit`` is what the checkpoint vouches for: every unit of a record below it was made
        durable before the checkpoint was written, and every unit written since points at or past
        it. A power cut can leave any of the later units zero, half written or stale, in any file
        (not only the last ones), but never one of the earlier ones, so "valid and below
        ``limit``" holds exactly on a prefix of the queue and a binary search over every file
        finds its end. The store then dispatches the records from ``limit`` on again, each at its
        own queue offset. Returns the max physical offset, as :meth:`recover`.
        """

        def prefix_end(files: list[MappedFile]) -> int:
            lo = files[0].file_from_offset // CQ_UNIT_SIZE
            hi = files[-1].end_offset // CQ_UNIT_SIZE
            while lo < hi:
                mid = (lo + hi) // 2
                offset, size, _tags = self._stored(mid)
                if offset >= 0 and size > 0 and offset < limit and offset <= INT64_MAX - size:
                    lo = mid + 1
                else:
                    hi = mid
            return int(lo) * CQ_UNIT_SIZE

        return self._recover(prefix_end, zero=True)

    def _recover(self, end_of: Callable[[list[MappedFile]], int], *, zero: bool) -> int:
        """Set the queue's end to ``end_of(files)`` (:meth:`_set_end`), then its bounds."""
        with self._lock:
            self._check_open()
            self.holes = []
            while True:
                files = self._files.files
                if not files:
                    self._min_logic, self._max_physic, self._flushed = 0, -1, 0
                    return -1
                try:
                    end = end_of(files)
                    break
                except SegmentError as exc:
                    # a read-only recovery beside a writer whose retention deleted a file while
                    # this one read it: the queue is what is left; look again over that
                    if not (self.read_only and exc.errno == errno.ENOENT and self._files.forget_vanished()):
                        raise
            self._set_end(end, zero=zero)
            self._max_physic = self._last_physic_end()
            self._min_logic = self._first_real_logic()
            self.holes = [(lo, hi) for lo, hi in self.holes if hi * CQ_UNIT_SIZE > self._min_logic]
            if self.holes:
                log.error(
                    "consume queue %s-%d: %d unit(s) zeroed or invalid before its end "
                    "(damage); they are rebuilt from the CommitLog",
                    self.topic,
                    self.queue_id,
                    sum(hi - lo for lo, hi in self.holes),
                )
            return self._max_physic

    def _stored(self, queue_offset: int) -> tuple[int, int, int]:
        """The unit bytes at ``queue_offset`` whatever the queue's bounds ((0, 0, 0) without a file)."""
        byte = queue_offset * CQ_UNIT_SIZE
        mf = self._files.find(byte)
        if mf is None:
            return 0, 0, 0
        # read through the file, not the map: past the end it may be a hole, and on a full
        # tmpfs even a read of a hole through a map is a SIGBUS
        return UNIT_STRUCT.unpack(mf.pread(byte - mf.file_from_offset, CQ_UNIT_SIZE))

    def _set_end(self, end: int, *, zero: bool = True) -> None:
        """Make byte offset ``end`` the queue's end: the files before it full, the one holding it
        written up to it, the later ones dropped (read-only: forgotten). A writable queue zeroes
        what lies after the end in its file, so nothing stale comes back when it grows again."""
        files = self._files.files
        for mf in files:
            if mf.end_offset <= end:
                mf.wrote_position = self.file_size
            elif mf.file_from_offset <= end:
                mf.wrote_position = end - mf.file_from_offset
        if self.read_only:
            self._files.forget_after(end)
        else:
            self._files.truncate_after(end)
            last = self._files.find(end)
            if last is not None and zero:
                zero_after(last, end - last.file_from_offset)
        self._flushed = end

    # -- bounds -------------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        """The smallest queue offset still readable (``minLogicOffset / 20``)."""
        return self._min_logic // CQ_UNIT_SIZE

    @property
    def max_offset(self) -> int:
        """One past the last queue offset written (``maxOffsetInQueue``)."""
        return self._end() // CQ_UNIT_SIZE

    @property
    def max_physic_offset(self) -> int:
        """5.x ``maxPhysicOffset``: start + size of the last record dispatched (-1: none)."""
        return self._max_physic

    @property
    def file_count(self) -> int:
        """How many files the queue maps."""
        return len(self._files.files)

    @property
    def files(self) -> list[MappedFile]:
        """The queue's mapped files, oldest first (the list itself: do not change it)."""
        return self._files.files

    @property
    def min_logic_offset(self) -> int:
        """RocketMQ's ``minLogicOffset``: the byte offset of :attr:`min_offset`'s unit."""
        return self._min_logic

    @property
    def last_file_skipped(self) -> bool:
        """Whether loading left the queue's last file out (empty or short: a writer creating it,
        or damage), so the units it should hold are not on disk."""
        return self._files.skipped_last

    def roll_next_file(self, queue_offset: int) -> int:
        """The first queue offset of the file after the one holding ``queue_offset``."""
        return roll_next_file(queue_offset, self.units_per_file)

    def _end(self) -> int:
        try:
            last = self._files.files[-1]
        except IndexError:  # no file (read without the lock: the list may empty meanwhile)
            return 0
        return last.file_from_offset + last.wrote_position

    def _last_physic_end(self) -> int:
        """start + size of the last unit, -1 for none or a placeholder."""
        end = self._end()
        mf = self._files.find(end - CQ_UNIT_SIZE) if end >= CQ_UNIT_SIZE else None
        if mf is None:
            return -1
        offset, size, _ = UNIT_STRUCT.unpack_from(mf.mm, end - CQ_UNIT_SIZE - mf.file_from_offset)
        if (offset, size) == (0, PLACEHOLDER_SIZE) or offset < 0 or size <= 0 or offset > INT64_MAX - size:
            return -1
        return int(offset) + int(size)

    def _first_real_logic(self) -> int:
        """Byte offset of the first unit of the first file that is not a placeholder."""
        files = self._files.files
        if not files:
            return 0
        first = files[0]
        n = first.wrote_position // CQ_UNIT_SIZE
        if n == 0 or UNIT_STRUCT.unpack_from(first.mm, 0)[:2] != (0, PLACEHOLDER_SIZE):
            return first.file_from_offset
        arr = file_units(first, n)
        leading = first_false((arr["commitlog_offset"] == 0) & (arr["size"] == PLACEHOLDER_SIZE))
        return first.file_from_offset + leading * CQ_UNIT_SIZE

    # -- writing (dispatch, §4.2) -------------------------------------------------------------
    def append(self, queue_offset: int, commitlog_offset: int, size: int, tags_code: int) -> bool:
        """Dispatch one record's unit at ``queue_offset``; True if written, False if already there.

        Every unit goes to its own queue offset, never elsewhere (RocketMQ appends a unit whose
        offset is past the end at the end, "order maybe wrong", and skips one below the end,
        "built repeatedly"; both hand out wrong messages after damage):

        * at the end: appended;
        * past the end: the gap is padded with placeholder units and recorded in :attr:`holes`
          (their records were not dispatched here: the store rebuilds them from the CommitLog);
        * below the end: a unit already pointing at this record is left alone (a re-dispatch);
          any other unit there is damage or stale, and is overwritten.

        The first unit of an empty queue at a non-zero offset pads its file with placeholders
        and sets ``min_offset`` there.
        """
        if queue_offset < 0:
            raise InvalidMessageError(f"queue offset {queue_offset} is negative")
        check_unit(commitlog_offset, size, tags_code)
        with self._lock:
            self._check_writable()
            return self._append_one(queue_offset, commitlog_offset, size, tags_code)

    def _append_one(self, queue_offset: int, commitlog_offset: int, size: int, tags_code: int) -> bool:
        expect = queue_offset * CQ_UNIT_SIZE
        if not self._is_empty() and expect < self._end():
            return self._rewrite_one(queue_offset, commitlog_offset, size, tags_code)
        mf = self._file_for_append(expect)
        end = mf.file_from_offset + mf.wrote_position
        if expect > end:
            log.warning(
                "consume queue %s-%d: unit %d dispatched past the end %d; the units between "
                "are rebuilt from the CommitLog",
                self.topic,
                self.queue_id,
                queue_offset,
                end // CQ_UNIT_SIZE,
            )
            self.holes.append((end // CQ_UNIT_SIZE, queue_offset))
            self._pad(end, expect)
            mf = self._file_for_append(expect)
        self._reserve(mf, mf.wrote_position + CQ_UNIT_SIZE)
        UNIT_STRUCT.pack_into(mf.mm, mf.wrote_position, commitlog_offset, size, tags_code)
        mf.wrote_position += CQ_UNIT_SIZE
        self._max_physic = commitlog_offset + size
        return True

    def _pad(self, pos: int, end: int) -> None:
        """Append placeholder units from byte offset ``pos`` (the queue's end) up to ``end``."""
        while pos < end:
            mf = self._file_for_append(pos)
            n = min(end - pos, self.file_size - mf.wrote_position)
            self._reserve(mf, mf.wrote_position + n)
            mf.mm[mf.wrote_position : mf.wrote_position + n] = PLACEHOLDER_UNIT * (n // CQ_UNIT_SIZE)
            mf.wrote_position += n
            pos += n

    def _rewrite_one(self, queue_offset: int, commitlog_offset: int, size: int, tags_code: int) -> bool:
        """A unit for a queue offset below the end: keep the one there when it points at the same
        record, else overwrite it. Units below ``min_offset`` are left alone."""
        byte = queue_offset * CQ_UNIT_SIZE
        mf = self._files.find(byte)
        if mf is None or byte < self._min_logic:
            return False
        pos = byte - mf.file_from_offset
        offset, stored_size, _tags = UNIT_STRUCT.unpack_from(mf.mm, pos)
        if (offset, stored_size) == (commitlog_offset, size):
            return False
        before, before_size, _tags = self._stored(queue_offset - 1) if byte > self._min_logic else (0, 0, 0)
        after, after_size, _tags = (
            self._stored(queue_offset + 1) if byte + CQ_UNIT_SIZE < self._end() else (0, 0, 0)
        )
        if not fits_between(before, before_size, commitlog_offset, size, after, after_size):
            log.error(
                "consume queue %s-%d: the record at commitlog offset %d claims unit %d but lies "
                "out of order with its neighbours' records (its queue fields are damaged): "
                "given no unit",
                self.topic,
                self.queue_id,
                commitlog_offset,
                queue_offset,
            )
            return False
        log.warning(
            "consume queue %s-%d: unit %d pointed at (%d, %d), not at its record (%d, %d): rewritten",
            self.topic,
            self.queue_id,
            queue_offset,
            offset,
            stored_size,
            commitlog_offset,
            size,
        )
        UNIT_STRUCT.pack_into(mf.mm, pos, commitlog_offset, size, tags_code)
        self._flushed = min(self._flushed, byte)
        if byte + CQ_UNIT_SIZE == self._end():
            self._max_physic = commitlog_offset + size
        return True

    def _cut_padding(self, continues: int) -> None:
        """Cut the placeholders at the queue's end from queue offset ``continues`` on, when a
        dispatch past the end padded all of them (:attr:`holes`, with the unit that jumped
        there): positions never served and no record holds."""
        end = self.max_offset
        if continues >= end or continues < self.min_offset:
            return
        covered = continues
        for lo, hi in sorted(self.holes):
            if lo <= covered <= hi:  # hi: the unit that jumped there
                covered = hi + 1
        if covered < end:
            return
        stored, sizes = self.stored_many(np.arange(continues, end, dtype=np.int64))
        if not ((sizes == PLACEHOLDER_SIZE) & (stored == 0)).all():
            return
        log.warning(
            "consume queue %s-%d: positions %d .. %d padded for a record whose queue fields are "
            "damaged: cut, the queue continues at %d",
            self.topic,
            self.queue_id,
            continues,
            end - 1,
            continues,
        )
        self._set_end(continues * CQ_UNIT_SIZE)
        self._max_physic = self._last_physic_end()

    def stored_many(self, queue_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(commitlog offsets, sizes) stored at ``queue_offsets``; zeros where no file holds one."""
        offsets = np.zeros(len(queue_offsets), dtype=np.int64)
        sizes = np.zeros(len(queue_offsets), dtype=np.int64)
        files = self._files.files
        if not files or not len(queue_offsets):
            return offsets, sizes
        first = files[0].file_from_offset // CQ_UNIT_SIZE
        which = (queue_offsets - first) // self.units_per_file
        for k in np.unique(which).tolist():
            if not 0 <= k < len(files):
                continue
            rows = which == k
            arr = file_units(files[k])
            at = queue_offsets[rows] - files[k].file_from_offset // CQ_UNIT_SIZE
            offsets[rows] = arr["commitlog_offset"][at]
            sizes[rows] = arr["size"][at]
            del arr
        return offsets, sizes

    def _rewrite_many(self, q: np.ndarray, phys: np.ndarray, sz: np.ndarray, tags: np.ndarray) -> int:
        """:meth:`_rewrite_one` over arrays, comparing in bulk (a re-dispatch of many units)."""
        stored_offsets, stored_sizes = self.stored_many(q)
        differ = np.flatnonzero((stored_offsets != phys) | (stored_sizes != sz))
        return sum(
            self._rewrite_one(int(q[k]), int(phys[k]), int(sz[k]), int(tags[k])) for k in differ.tolist()
        )

    def _reserve(self, mf: MappedFile, end: int) -> None:
        """Allocate ``mf``'s blocks up to position ``end`` (and a stretch beyond) before units are
        stored there: the files are sparse, and a store into a hole on a full disk is a SIGBUS."""
        start, upto = self._reserved
        if start == mf.file_from_offset and end <= upto:
            return
        if start != mf.file_from_offset:
            upto = 0
        target = min(mf.file_size, max(end, upto + _RESERVE_BYTES))
        allocate_range(mf.fd, upto, target - upto)
        self._reserved = (mf.file_from_offset, target)

    def _is_empty(self) -> bool:
        """True when the queue holds no unit at all (no file, or one file with nothing valid)."""
        files = self._files.files
        return not files or (len(files) == 1 and files[0].wrote_position == 0)

    def _file_for_append(self, expect: int) -> MappedFile:
        """The file the next unit goes into: the last one, the next one, or a queue's first."""
        files = self._files.files
        if self._is_empty():
            start = expect - expect % self.file_size
            if files and files[0].file_from_offset != start:
                self._files.drop_last()  # an empty leftover (crash, truncation) elsewhere
            os.makedirs(self.directory, exist_ok=True)
            mf = self._files.segment_at(start)
            pad = (expect - start) // CQ_UNIT_SIZE
            if pad:
                self._reserve(mf, pad * CQ_UNIT_SIZE)
                mf.mm[: pad * CQ_UNIT_SIZE] = PLACEHOLDER_UNIT * pad
                mf.wrote_position = pad * CQ_UNIT_SIZE
            self._min_logic = expect
            self._flushed = min(self._flushed, start)
            return mf
        last = files[-1]
        if last.wrote_position >= self.file_size:
            return self._files.segment_at(last.end_offset)
        return last

    def append_many(self, queue_offsets: Any, commitlog_offsets: Any, sizes: Any, tags_codes: Any) -> int:
        """Dispatch many units (equal-length sequences or arrays); returns how many were written.

        Each unit follows the rules of :meth:`append`; runs of units that continue the queue in
        order are copied into the map in one numpy assignment per file. The arguments are all
        checked before anything is written.
        """
        try:
            q = np.asarray(queue_offsets, dtype=np.int64).reshape(-1)
            phys = np.asarray(commitlog_offsets, dtype=np.int64).reshape(-1)
            sz = np.asarray(sizes, dtype=np.int64).reshape(-1)
            tags = np.asarray(tags_codes, dtype=np.int64).reshape(-1)
        except (OverflowError, TypeError, ValueError) as exc:
            raise InvalidMessageError(f"append_many needs integer arrays: {exc}") from None
        n = len(q)
        if not len(phys) == len(sz) == len(tags) == n:
            raise InvalidMessageError("append_many needs four sequences of the same length")
        if n == 0:
            return 0
        if n == 1:  # one unit (dispatch of a single put): append()'s checks, no array work
            return int(self.append(int(q[0]), int(phys[0]), int(sz[0]), int(tags[0])))
        if (q < 0).any():
            raise InvalidMessageError("a queue offset is negative")
        if (phys < 0).any():
            raise InvalidMessageError("a CommitLog offset is negative")
        if ((sz <= 0) | (sz > PLACEHOLDER_SIZE)).any():
            raise InvalidMessageError("a record size is outside 1 .. 2**31-1")
        if (phys > INT64_MAX - sz).any():
            raise InvalidMessageError("a CommitLog offset + size overflows a Java long")
        ends = phys + sz
        # in_order[j]: unit j+1 continues unit j (next queue offset, not a duplicate of it)
        in_order = (np.diff(q) == 1) & (np.diff(ends) > 0)
        written = 0
        with self._lock:
            self._check_writable()
            i = 0
            while i < n:
                end = self._end()
                if not self._is_empty() and int(q[i]) * CQ_UNIT_SIZE < end:
                    # a re-dispatch of units below the end: compared in bulk, rewritten if wrong
                    j = i + first_false(q[i:] * CQ_UNIT_SIZE < end)
                    written += self._rewrite_many(q[i:j], phys[i:j], sz[i:j], tags[i:j])
                    i = j
                    continue
                if self._is_empty() or int(q[i]) * CQ_UNIT_SIZE != end:
                    written += self._append_one(int(q[i]), int(phys[i]), int(sz[i]), int(tags[i]))
                    i += 1
                    continue
                mf = self._file_for_append(end)
                room = (self.file_size - mf.wrote_position) // CQ_UNIT_SIZE
                k = min(room, n - i)
                k = 1 + first_false(in_order[i : i + k - 1])
                self._reserve(mf, mf.wrote_position + k * CQ_UNIT_SIZE)
                dst = np.frombuffer(mf.mm, dtype=CQ_UNIT_DTYPE, count=k, offset=mf.wrote_position)
                dst["commitlog_offset"] = phys[i : i + k]
                dst["size"] = sz[i : i + k]
                dst["tags_code"] = tags[i : i + k]
                del dst
                mf.wrote_position += k * CQ_UNIT_SIZE
                self._max_physic = int(ends[i + k - 1])
                written += k
                i += k
        return written

    # -- the fused dispatch's window (rocketstore.queues.fused) -----------------------------------------
    @property
    def lock(self) -> threading.RLock:
        """Held while units are written: :mod:`rocketstore.queues.fused` holds it around its C pass."""
        return self._lock

    def tail_window(self, files: int) -> Optional[tuple[list[Any], int, int, int, int]]:
        """What the fused dispatch may read and write without :meth:`append_many`'s checks (the
        caller holds :attr:`lock`): ``(maps of the last ``files`` files, oldest first; queue
        offset of the first unit of the first; write position in the last; end of the room
        allocated there; max physic offset)``. None when the queue is empty, closed or
        read-only. The room is allocated as :meth:`append_many` allocates it; a full last file
        has none (the next unit rolls to a new file through :meth:`append_many`)."""
        if self._closed or self.read_only or self._is_empty():
            return None
        recent = self._files.files[-files:]
        last = recent[-1]
        limit = last.wrote_position
        if last.wrote_position < self.file_size:
            self._reserve(last, last.wrote_position + CQ_UNIT_SIZE)
            start, upto = self._reserved
            if start == last.file_from_offset:
                limit = min(upto, self.file_size)
        maps = [mf.mm for mf in recent]
        return maps, recent[0].file_from_offset // CQ_UNIT_SIZE, last.wrote_position, limit, self._max_physic

    def tail_written(self, write_position: int, max_physic: int) -> None:
        """The fused dispatch wrote units into the last file up to ``write_position`` (caller
        holds :attr:`lock`; the units lie below it before it moves, so readers never see less)."""
        last = self._files.files[-1]
        if not last.wrote_position <= write_position <= min(self.file_size, self._reserved[1]):
            raise AssertionError(f"fused dispatch wrote to {write_position}, past its window")
        last.wrote_position = write_position
        self._max_physic = max_physic

    # -- reading ------------------------------------------------------------------------------
    def _locate(self, queue_offset: int) -> tuple[MappedFile, int]:
        if not self.min_offset <= queue_offset < self.max_offset:
            raise MessageNotFoundError(
                f"queue offset {queue_offset} is outside [{self.min_offset}, {self.max_offset}) "
                f"of {self.topic}-{self.queue_id}"
            )
        byte = queue_offset * CQ_UNIT_SIZE
        mf = self._files.find(byte)
        if mf is None:
            raise MessageNotFoundError(f"the file of queue offset {queue_offset} is gone")
        return mf, byte - mf.file_from_offset

    def unit(self, queue_offset: int) -> tuple[int, int, int]:
        """(commitlog_offset, size, tags_code) at ``queue_offset`` in ``[min_offset, max_offset)``."""
        with self._lock:
            self._check_open()
            mf, pos = self._locate(queue_offset)
            return UNIT_STRUCT.unpack_from(mf.mm, pos)

    def units(self, start: int, count: int) -> np.ndarray:
        """Up to ``count`` units from queue offset ``start``, as a zero-copy read-only view.

        The array (dtype :data:`CQ_UNIT_DTYPE`) is a view into the file's map: it stops at the
        end of the file holding ``start`` and at ``max_offset``, so it may be shorter than
        ``count``; callers loop from ``start + len(view)``. ``start == max_offset`` gives an
        empty array; a ``start`` outside ``[min_offset, max_offset]`` raises
        :class:`MessageNotFoundError`. The view keeps the map alive after the queue is closed or
        its file deleted (see the module docstring).
        """
        if count < 0:
            raise InvalidMessageError(f"count {count} is negative")
        with self._lock:
            self._check_open()
            if start == self.max_offset and start >= self.min_offset:
                return np.empty(0, dtype=CQ_UNIT_DTYPE)
            mf, pos = self._locate(start)
            count = min(count, (mf.wrote_position - pos) // CQ_UNIT_SIZE)
            return np.frombuffer(mf.view(pos, count * CQ_UNIT_SIZE), dtype=CQ_UNIT_DTYPE)

    def iter_units(
        self, start: Optional[int] = None, stop: Optional[int] = None, chunk: int = 65536
    ) -> Iterator[tuple[int, np.ndarray]]:
        """(first queue offset, view) chunks covering ``[start, stop)`` (default: the whole queue)."""
        offset = self.min_offset if start is None else start
        while True:
            limit = self.max_offset if stop is None else min(stop, self.max_offset)
            if offset >= limit:
                return
            view = self.units(offset, min(chunk, limit - offset))
            if not len(view):
                return
            yield offset, view
            offset += len(view)

    def offset_of_time(self, timestamp: int, store_time_of: Callable[[int], Optional[int]]) -> int:
        """The first queue offset whose message was stored at or after ``timestamp`` (ms).

        ``store_time_of(commitlog_offset)`` returns a record's store timestamp, or None when the
        record is gone (it then counts as older). Binary search over ``[min_offset, max_offset)``,
        so store times must not decrease along the queue (true for one writer). Returns
        ``max_offset`` when every message is older (5.x ``BoundaryType.LOWER`` semantics).
        """
        return offset_of_time(self, timestamp, store_time_of)

    def ends_record_at(self, commitlog_offset: int) -> bool:
        """Whether a unit of this queue ends exactly at ``commitlog_offset`` (offset + size):
        the last unit that starts below it (units ascend in CommitLog offset)."""
        after = first_unit_where(self, lambda unit: unit[0] >= commitlog_offset)
        if after <= self.min_offset:
            return False
        try:
            offset, size, _tags = self.unit(after - 1)
        except MessageNotFoundError:  # deleted under us
            return False
        return size > 0 and offset + size == commitlog_offset

    def repair(
        self,
        queue_offsets: Any,
        commitlog_offsets: Any,
        sizes: Any,
        tags_codes: Any,
        continues: Optional[int] = None,
    ) -> tuple[int, int]:
        """Rebuild the queue from its records: every unit in ``[min_offset, max_offset)`` becomes
        the unit of the record that carries its queue offset, or a placeholder where none does
        (the record is gone: damage); records past the end are appended. The arguments describe
        every verified record of this queue in the CommitLog (``MessageStore`` scans for them),
        ascending by queue offset, one per offset. Clears :attr:`holes`. ``continues``: where
        the queue continues after those records; the placeholders past it at the end that a
        dispatch past the end padded (:attr:`holes`: never served) are cut, so the queue's
        next message goes there rather than after positions no record holds.

        Returns (units rewritten, positions left without a record).
        """
        q = np.asarray(queue_offsets, dtype=np.int64)
        phys = np.asarray(commitlog_offsets, dtype=np.int64)
        sz = np.asarray(sizes, dtype=np.int64)
        tags = np.asarray(tags_codes, dtype=np.int64)
        rewritten = missing = 0
        with self._lock:
            self._check_writable()
            lo, hi = self.min_offset, self.max_offset
            if len(q) and int(q.min()) > lo:
                # no record claims the queue's first positions: deleted (retention, maybe racing
                # this scan) or never there; the queue starts at its first record
                lo = min(hi, int(q.min()))
                self._min_logic = max(self._min_logic, lo * CQ_UNIT_SIZE)
            for mf in list(self._files.files):
                first = mf.file_from_offset // CQ_UNIT_SIZE
                a, b = max(lo, first), min(hi, first + mf.wrote_position // CQ_UNIT_SIZE)
                if a >= b:
                    continue
                expected, found = units_of_records(a, b, q, phys, sz, tags)
                missing += (b - a) - found
                stored = np.frombuffer(
                    mf.mm, dtype=CQ_UNIT_DTYPE, count=b - a, offset=(a - first) * CQ_UNIT_SIZE
                )
                wrong = (stored["commitlog_offset"] != expected["commitlog_offset"]) | (
                    stored["size"] != expected["size"]
                )
                if wrong.any():
                    stored[wrong] = expected[wrong]
                    rewritten += int(wrong.sum())
                    self._flushed = min(self._flushed, a * CQ_UNIT_SIZE)
                del stored
            later = q >= hi
            if later.any():
                self.append_many(q[later], phys[later], sz[later], tags[later])
            if continues is not None:
                self._cut_padding(continues)
            self.holes = []
            self._max_physic = self._last_physic_end()
        if rewritten or missing:
            log.error(
                "consume queue %s-%d rebuilt from the CommitLog: %d unit(s) rewritten, %d "
                "position(s) whose record is gone (skipped by consumers)",
                self.topic,
                self.queue_id,
                rewritten,
                missing,
            )
        return rewritten, missing

    # -- recovery against the CommitLog and retention -----------------------------------------
    def truncate_dirty(self, process_offset: int) -> None:
        """§4.4 ``truncateDirtyLogicFiles``: cut every unit pointing at or past ``process_offset``.

        Works back from the last file: a file whose first unit points at or past the end is
        deleted; otherwise the queue ends before the first unit that is invalid or points past
        it. Unlike RocketMQ the cut-off units are zeroed, so a crash before they are overwritten
        cannot bring them back.
        """
        with self._lock:
            self._check_writable()
            files = self._files.files
            while files:
                mf = files[-1]
                # only the units before the file's first hole are read (see unit_extents): a
                # hole holds no valid unit, so the cut is there at the latest
                extents = unit_extents(mf, most=1)
                arr = file_units(mf, extents[0][1] if extents and extents[0][0] == 0 else 0)
                offsets, sizes = arr["commitlog_offset"], arr["size"]
                if (int(offsets[0]) if len(offsets) else 0) >= process_offset:
                    del arr, offsets, sizes
                    self._files.drop_last()
                    continue
                plain_valid = (offsets >= 0) & (sizes > 0)
                keep = first_false(plain_valid & (offsets < process_offset))
                del arr, offsets, sizes, plain_valid
                mf.wrote_position = keep * CQ_UNIT_SIZE
                # Zero everything after the cut, not just the next valid-looking units: after a
                # power cut the rest of the file may hold any bytes, and a unit left there would
                # come back as valid once the queue grows up to it again.
                zero_after(mf, keep * CQ_UNIT_SIZE)
                break
            end = self._end()
            self._flushed = min(self._flushed, end)
            self._max_physic = self._last_physic_end()
            self._min_logic = min(self._min_logic, end) if files else 0

    def correct_min_offset(self, min_commitlog_offset: int) -> None:
        """§4.5, the 5.x algorithm: ``min_offset`` := the first unit pointing at or past
        ``min_commitlog_offset``.

        When even the last unit points below it, the queue has no live entry and
        ``min_offset = max_offset``. Otherwise the first file is binary-searched from the current
        ``min_offset`` (placeholders skipped); ``min_offset`` never moves back.
        """
        with self._lock:
            self._check_open()
            files = self._files.files
            end = self._end()
            if not files or self._min_logic >= end:
                return
            last_mf = self._files.find(end - CQ_UNIT_SIZE)
            if last_mf is None:
                return
            last_offset = _LONG.unpack_from(last_mf.mm, end - CQ_UNIT_SIZE - last_mf.file_from_offset)[0]
            if 0 <= last_offset < min_commitlog_offset:
                self._min_logic = end
                return
            first = files[0]
            lo = max(self._min_logic, self._first_real_logic()) - first.file_from_offset
            hi = first.wrote_position
            if lo > hi:
                return
            lo //= CQ_UNIT_SIZE
            hi //= CQ_UNIT_SIZE
            mm = first.mm
            while lo < hi:
                mid = (lo + hi) // 2
                # an invalid unit (damage) is not "below": min_offset never moves past it, and
                # the read that meets it rebuilds the queue
                if 0 <= _LONG.unpack_from(mm, mid * CQ_UNIT_SIZE)[0] < min_commitlog_offset:
                    lo = mid + 1
                else:
                    hi = mid
            self._min_logic = max(self._min_logic, first.file_from_offset + lo * CQ_UNIT_SIZE)

    def delete_expired(self, min_phy_offset: int) -> int:
        """§4.6 ``deleteExpiredFileByOffset``: delete leading files whose last unit points below
        ``min_phy_offset`` (never the last file), then :meth:`correct_min_offset`.

        Returns the number of files deleted.
        """
        deleted = 0
        with self._lock:
            self._check_writable()
            files = self._files.files
            while len(files) > 1:
                mf = files[0]
                last_offset = _LONG.unpack_from(mf.mm, self.file_size - CQ_UNIT_SIZE)[0]
                if last_offset >= min_phy_offset:
                    break
                self._files.drop_first()
                deleted += 1
            self.correct_min_offset(min_phy_offset)
        return deleted

    # -- durability and lifetime --------------------------------------------------------------
    def flush(self, least_pages: int = 0) -> bool:
        """msync the units written since the last flush; True if anything was flushed.

        With ``least_pages`` > 0, flush only when at least that many 4 KiB pages are dirty
        (``flushConsumeQueueLeastPages``).
        """
        with self._lock:
            ranges = self._unflushed(least_pages)
            if ranges is None:
                return False
            end, pieces = ranges
            for mf, lo, hi in pieces:
                mf.flush(lo, hi)
            self._flushed = end
            return True

    def start_flush(self, least_pages: int = 0) -> None:
        """Start writing back what :meth:`flush` would msync, without waiting (a hint: see
        :meth:`MappedFile.start_writeback`), but the page units are still being appended to:
        a page under writeback may make the next write into it wait on some devices."""
        with self._lock:
            ranges = self._unflushed(least_pages)
            if ranges is None:
                return
            end, pieces = ranges
            for mf, lo, hi in pieces:
                if mf.file_from_offset + hi == end:  # the tail: its last, partial page left out
                    hi -= hi % ZERO_PAGE
                if hi > lo:
                    mf.start_writeback(lo, hi)

    def _unflushed(self, least_pages: int) -> Optional[tuple[int, list[tuple[MappedFile, int, int]]]]:
        """(end, [(file, lo, hi)]): the units written since the last flush, per file; None when
        there is nothing to flush (or too little, see :meth:`flush`). Under the queue's lock."""
        if self._closed or self.read_only:
            return None
        end = self._end()
        if end <= self._flushed:
            return None
        page = 4096
        if least_pages > 0 and end // page - self._flushed // page < least_pages:
            return None
        pieces = []
        for mf in self._files.files:
            lo = max(self._flushed, mf.file_from_offset) - mf.file_from_offset
            hi = min(end, mf.end_offset) - mf.file_from_offset
            if hi > lo:
                pieces.append((mf, lo, hi))
        return end, pieces

    def close(self) -> None:
        """Flush and unmap; views from :meth:`units` stay readable until released."""
        with self._lock:
            if self._closed:
                return
            try:
                self.flush()
            finally:
                self._closed = True
                self._files.close()

    def destroy(self) -> None:
        """Delete every file of the queue and its directory (``ConsumeQueue.destroy``)."""
        with self._lock:
            self._check_writable()
            while self._files.files:
                self._files.drop_last()
            self._closed = True
            self._files.close()
            try:
                os.rmdir(self.directory)
            except OSError:
                pass
            self._min_logic, self._max_physic, self._flushed = 0, -1, 0

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"consume queue {self.topic}-{self.queue_id} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.read_only:
            raise StoreReadOnlyError(f"consume queue {self.topic}-{self.queue_id} is read-only")

    def __enter__(self) -> ConsumeQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<ConsumeQueue {self.topic}-{self.queue_id} [{self.min_offset}, {self.max_offset})"
            f" files={self.file_count}>"
        )
