"""Compacted topics, written: rocketstore keeps a ``cleanup.policy=COMPACTION`` topic's
compaction log the way a RocketMQ 5.x broker does (docs/format.md, "Compacted topics").

A broker copies each record of such a topic, as it dispatches it, into the queue's compaction
log (``compaction/compactionLog/<topic>/<queueId>/``) and indexes the copy in a sparse queue
(``compaction/compactionCq/<topic>/<queueId>/``, one 46-byte unit per copy, each queue file
named after the log file it indexes). Every 15 minutes it compacts each queue: the log files
but the one being written are rewritten keeping, per key (the whole ``KEYS`` property), only the
latest message, a tombstone (empty body) dropping its key; ``compaction/position-checkpoint``
records the last queue offset a compaction saw. Retention then deletes CommitLog segments as
for any topic; the latest value of every key survives in the compaction log.

:class:`Compactor` does the same from a writable store's retention passes: :meth:`catch_up`
copies what was dispatched since the last pass (each pass runs it before deleting a segment,
and a failed copy deletes nothing; a clean close runs it too, so a broker taking the store over
finds its compaction logs complete), and :meth:`compact` compacts the queues that closed a
log file since their last compaction. The copy is the broker's: the record's bytes with its
physical offset field set to its place in the compaction log; the log and queue files roll
where the broker's do; messages without keys are not copied.

**Crash safety.** Copies are written to the log and made durable before their units; an open
cuts a unit whose record does not check (topic, queue, queue offset, size, CRC), and a copy
lost to a crash is made again from the CommitLog, which keeps it until the copy is durable. A
compaction writes the new files under ``compaction/rocketstore-compacting/`` (a directory a
broker never reads), makes them durable, records the swap in ``config/compactionSwap.json``,
then moves the new files over the old ones, deletes the old ones left and writes the position
checkpoint; an open or the next pass that finds the record finishes the swap, and one that
finds new files without it deletes them. A reader meeting a swap half done sees old and new
files together: records it reads are still checked one by one, and the compacted view over them
is the same (a message a finished swap drops is older than one it keeps for the same key).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from rocketstore.base._failurelog import FailureLog
from rocketstore.errors import CorruptRecordError, MessageNotFoundError
from rocketstore.files._files import fsync_dir, replace_file
from rocketstore.queues.batchcq import BCQ_UNIT_DTYPE, BCQ_UNIT_SIZE, valid_prefix
from rocketstore.queues.compaction import (
    DIRECTORY,
    SCRATCH,
    SWAP_FILE,
    CompactionPositions,
    compacted_topics,
    compaction_log_size,
    file_names,
    pending_swap,
)
from rocketstore.queues.consumequeue import PLACEHOLDER_SIZE
from rocketstore.services.parts import StoreParts

__all__ = ["Compactor", "QueueLog"]

log = logging.getLogger(__name__)

_BLANK_MAGIC = -875286124  # 0xCBD43194, the end-of-file record's magic
_END_BLANK = 8  # an end-of-file record: (blank length, magic)
_PHYSICAL_OFFSET = 28  # a record's PHYSICALOFFSET field
_QUEUE_OFFSET = 20  # and its QUEUEOFFSET
_LONG = struct.Struct(">q")
_BLANK = struct.Struct(">ii")
_INVALID_POS = -1
#: records copied per read of the ConsumeQueue
_CHUNK = 4096


def _unit(offset: int, size: int, tags_code: int, store_time: int, queue_offset: int) -> bytes:
    unit = np.zeros(1, dtype=BCQ_UNIT_DTYPE)
    unit[0] = (offset, size, tags_code, store_time, queue_offset, 1, _INVALID_POS, 0)
    return unit.tobytes()


#: the unit that ends a queue file (the broker's ``putEndPositionInfo``)
_END_UNIT = np.array([(-1, 0, 0, 0, 0, 0, _INVALID_POS, 0)], dtype=BCQ_UNIT_DTYPE).tobytes()


@dataclass
class _File:
    """One compaction log file and its queue file, being written."""

    start: int
    log_fd: int
    cq_fd: int
    wrote: int = 0  # bytes of the log file written
    units: int = 0  # units in the queue file
    full: bool = False
    #: (index, unit bytes) written to the queue file at the next sync, after the log's records
    pending: list[tuple[int, bytes]] = field(default_factory=list)


class QueueLog:
    """One queue's compaction log and sparse queue in ``log_dir`` / ``cq_dir``, open for
    appending copies (:meth:`append`, then :meth:`sync`). ``log_size`` and ``cq_size`` are the
    file sizes (the existing files' when there are some)."""

    def __init__(self, log_dir: str, cq_dir: str, log_size: int, cq_size: int, check: Callable[..., Any]):
        self.log_dir, self.cq_dir = log_dir, cq_dir
        self.log_size, self.cq_size = log_size, cq_size
        self._check = check  # check(record bytes, queue offset) -> the decoded message, or raises
        self._current: Optional[_File] = None
        self._dirty: list[_File] = []
        #: the queue offset after the last copy (0: none yet)
        self.max_offset = 0
        self.files: list[int] = [int(n) for n in file_names(log_dir)]
        #: (file start, last queue offset in it) of each log file with units
        self.file_last: dict[int, int] = {}
        self._load()

    def _load(self) -> None:
        """Find where the next copy goes: after the last unit whose record checks."""
        for name in [n for n in file_names(self.cq_dir) if int(n) not in self.files]:
            # a queue file without its log file (a crash between their creation): nothing in it
            # can point anywhere
            os.unlink(os.path.join(self.cq_dir, name))
        if not self.files:
            return
        cq_names = set(file_names(self.cq_dir))
        for start in self.files:
            if _name(start) not in cq_names:
                # a log file without its queue file (a crash between their creation): no unit
                # points into it; give it its empty queue file, as the broker's load wants one
                os.makedirs(self.cq_dir, exist_ok=True)
                fd = os.open(os.path.join(self.cq_dir, _name(start)), os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    os.ftruncate(fd, self.cq_size)
                finally:
                    os.close(fd)
                fsync_dir(self.cq_dir)
        last = self.files[-1]
        for start in self.files:
            units, ended = self._units_of(start)
            if len(units):
                self.file_last[start] = int(units["base"][-1])
                self.max_offset = int(units["base"][-1]) + 1
            if start != last:
                continue
            # the file being written: its last units must point at records that check
            good = len(units)
            log_fd = os.open(os.path.join(self.log_dir, _name(start)), os.O_RDWR)
            length = os.fstat(log_fd).st_size
            while good:
                unit = units[good - 1]
                pos, size = int(unit["commitlog_offset"]) - start, int(unit["size"])
                try:
                    if pos < 0 or size <= 0 or pos + size > length:
                        raise CorruptRecordError("past the end of the file")
                    self._check(os.pread(log_fd, size, pos), int(unit["base"]))
                    break
                except (CorruptRecordError, MessageNotFoundError):
                    good -= 1
            if good < len(units):
                ended = False
                self._zero_units(start, good, len(units))
                units = units[:good]
                self.file_last.pop(start, None)
                if good:
                    self.file_last[start] = int(units["base"][-1])
                self.max_offset = max(self.file_last.values()) + 1 if self.file_last else 0
            wrote = int(units["commitlog_offset"][-1]) - start + int(units["size"][-1]) if good else 0
            full = ended or length - wrote < _END_BLANK
            if not full:  # an end-of-file record after the last copy: the file is closed
                full = _BLANK.unpack(os.pread(log_fd, _END_BLANK, wrote))[1] == _BLANK_MAGIC
            self._current = _File(
                start,
                log_fd,
                os.open(os.path.join(self.cq_dir, _name(start)), os.O_RDWR | os.O_CREAT, 0o644),
                wrote,
                good,
                full,
            )
            if os.fstat(self._current.cq_fd).st_size < self.cq_size:
                os.ftruncate(self._current.cq_fd, self.cq_size)

    def _units_of(self, start: int) -> tuple[np.ndarray, bool]:
        """A queue file's valid units, and whether an end unit follows them."""
        try:
            with open(os.path.join(self.cq_dir, _name(start)), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return np.empty(0, dtype=BCQ_UNIT_DTYPE), False
        units = np.frombuffer(data, dtype=BCQ_UNIT_DTYPE, count=len(data) // BCQ_UNIT_SIZE)
        good = valid_prefix(units)
        return units[:good].copy(), good < len(units) and bool(units["commitlog_offset"][good] == -1)

    def _zero_units(self, start: int, lo: int, hi: int) -> None:
        fd = os.open(os.path.join(self.cq_dir, _name(start)), os.O_RDWR)
        try:
            os.pwrite(fd, bytes((hi - lo) * BCQ_UNIT_SIZE), lo * BCQ_UNIT_SIZE)
            os.fdatasync(fd)
        finally:
            os.close(fd)

    # ---- appending ----

    def _roll(self) -> _File:
        """Create the next log file and its queue file (the broker's ``TopicPartitionLog.roll``)."""
        start = self.files[-1] + self.log_size if self.files else 0
        os.makedirs(self.log_dir, exist_ok=True)
        os.makedirs(self.cq_dir, exist_ok=True)
        log_fd = os.open(os.path.join(self.log_dir, _name(start)), os.O_RDWR | os.O_CREAT, 0o644)
        cq_fd = os.open(os.path.join(self.cq_dir, _name(start)), os.O_RDWR | os.O_CREAT, 0o644)
        os.ftruncate(log_fd, self.log_size)
        os.ftruncate(cq_fd, self.cq_size)
        fsync_dir(self.log_dir)
        fsync_dir(self.cq_dir)
        if self._current is not None and self._current not in self._dirty:
            self._close_file(self._current)
        self.files.append(start)
        self._current = _File(start, log_fd, cq_fd)
        return self._current

    def append(self, record: bytes, queue_offset: int, tags_code: int, store_time: int) -> bool:
        """Copy ``record`` (a checked CommitLog record of this queue at ``queue_offset``) to the
        end of the log, as the broker's ``CompactionAppendMessageCallback`` does. False (nothing
        written) when the log already holds that queue offset."""
        if queue_offset < self.max_offset:
            return False
        size = len(record)
        if size + _END_BLANK > self.log_size:
            raise CorruptRecordError(f"a record of {size} bytes does not fit a compaction log file")
        f = self._current
        if f is None or f.full or f.wrote >= self.log_size or f.units * BCQ_UNIT_SIZE >= self.cq_size:
            f = self._roll()
        if (f.units + 1) * BCQ_UNIT_SIZE >= self.cq_size or size + _END_BLANK > self.log_size - f.wrote:
            self._end_file(f)
            f = self._roll()
        position = f.start + f.wrote
        copy = bytearray(record)
        _LONG.pack_into(copy, _PHYSICAL_OFFSET, position)
        os.pwrite(f.log_fd, copy, f.wrote)
        f.wrote += size
        self._pending_unit(f, _unit(position, size, tags_code, store_time, queue_offset))
        self.file_last[f.start] = queue_offset
        self.max_offset = queue_offset + 1
        return True

    def _pending_unit(self, f: _File, unit: bytes) -> None:
        f.pending.append((f.units, unit))
        f.units += 1
        if f not in self._dirty:
            self._dirty.append(f)

    def _end_file(self, f: _File) -> None:
        """End ``f``: an end unit in its queue file (when there is room) and an end-of-file
        record in its log, as the broker does before rolling."""
        if f.units * BCQ_UNIT_SIZE + BCQ_UNIT_SIZE <= self.cq_size:
            self._pending_unit(f, _END_UNIT)
        blank = self.log_size - f.wrote
        if blank >= _END_BLANK:
            os.pwrite(f.log_fd, _BLANK.pack(blank, _BLANK_MAGIC), f.wrote)
        f.wrote = self.log_size
        f.full = True
        if f not in self._dirty:
            self._dirty.append(f)

    def end(self) -> None:
        """End the file being written (a compaction's last output file)."""
        if self._current is not None and not self._current.full:
            f = self._current
            blank = self.log_size - f.wrote
            if blank >= _END_BLANK:
                os.pwrite(f.log_fd, _BLANK.pack(blank, _BLANK_MAGIC), f.wrote)
            f.wrote, f.full = self.log_size, True
            if f not in self._dirty:
                self._dirty.append(f)

    def sync(self) -> None:
        """Make the copies durable, then their units: a unit never points at a record a crash lost."""
        dirty, self._dirty = self._dirty, []
        for f in dirty:
            os.fdatasync(f.log_fd)
        for f in dirty:
            for index, unit in f.pending:
                os.pwrite(f.cq_fd, unit, index * BCQ_UNIT_SIZE)
            f.pending = []
            os.fdatasync(f.cq_fd)
            if f is not self._current:
                self._close_file(f)

    @staticmethod
    def _close_file(f: _File) -> None:
        for fd in (f.log_fd, f.cq_fd):
            try:
                os.close(fd)
            except OSError:
                pass

    def close(self) -> None:
        self._dirty = [f for f in self._dirty if f is not self._current]
        if self._current is not None:
            self._close_file(self._current)
            self._current = None

    def closed_files(self) -> list[int]:
        """The log files a compaction may rewrite: all but the one being written."""
        return self.files[:-1]


def _name(start: int) -> str:
    return f"{start:020d}"


class Compactor:
    """Keeps the compaction logs of a writable store's ``cleanup.policy=COMPACTION`` topics
    (see the module docstring). ``decode(buffer, position, ...)`` is the codec's record decoder."""

    def __init__(self, parts: StoreParts, decode: Callable[..., Any]) -> None:
        self._parts = parts
        self._decode = decode
        self._root = os.path.join(parts.path, DIRECTORY)
        self._lock = threading.Lock()
        self._queues: dict[tuple[str, int], QueueLog] = {}
        self._positions: Optional[CompactionPositions] = None
        self._swap_path = os.path.join(parts.path, "config", SWAP_FILE)
        self._failures = FailureLog(log, "compacting a topic", "retried at the next retention pass")
        #: counters for stats()
        self.copied = 0
        self.compactions = 0
        self.dropped = 0
        self._recovered = False

    # ---- what there is ----

    def topics(self) -> frozenset[str]:
        table = self._parts.topics.table
        return compacted_topics({t: table.attributes(t) for t in table})

    def _sizes(self, topic: str, queue_id: int) -> tuple[int, int]:
        """The log and queue file sizes of a queue: its existing files', else another queue's
        (a broker's configuration holds for all), else the configured ones."""
        logs, cqs = os.path.join(self._root, "compactionLog"), os.path.join(self._root, "compactionCq")
        own = os.path.join(topic, str(queue_id))
        try:
            others = [
                os.path.join(t, q)
                for t in sorted(os.listdir(logs))
                for q in sorted(os.listdir(os.path.join(logs, t)))
            ]
        except OSError:
            others = []
        for queue in [own, *others]:
            log_names, cq_names = file_names(os.path.join(logs, queue)), file_names(os.path.join(cqs, queue))
            if log_names and cq_names:
                return (
                    os.path.getsize(os.path.join(logs, queue, log_names[0])),
                    os.path.getsize(os.path.join(cqs, queue, cq_names[0])),
                )
        cfg = self._parts.config
        cq_size = cfg.compaction_queue_file_size // BCQ_UNIT_SIZE * BCQ_UNIT_SIZE
        return compaction_log_size(cq_size, cfg.compaction_file_size), cq_size

    def _dirs(self, topic: str, queue_id: int, scratch: bool = False) -> tuple[str, str]:
        base = os.path.join(self._root, SCRATCH) if scratch else self._root
        return (
            os.path.join(base, "compactionLog", topic, str(queue_id)),
            os.path.join(base, "compactionCq", topic, str(queue_id)),
        )

    def _check(self, topic: str, queue_id: int) -> Callable[[bytes, int], Any]:
        def check(record: bytes, queue_offset: int) -> Any:
            msg = self._decode(record, 0, check_crc=True)
            if (msg.topic, msg.queue_id, msg.queue_offset, msg.size) != (
                topic,
                queue_id,
                queue_offset,
                len(record),
            ):
                raise CorruptRecordError(
                    f"the record is {msg.topic}-{msg.queue_id} at queue offset {msg.queue_offset}, "
                    f"not {topic}-{queue_id} at {queue_offset}"
                )
            return msg

        return check

    def _queue(self, topic: str, queue_id: int) -> QueueLog:
        key = (topic, queue_id)
        queue = self._queues.get(key)
        if queue is None:
            log_size, cq_size = self._sizes(topic, queue_id)
            queue = QueueLog(*self._dirs(topic, queue_id), log_size, cq_size, self._check(topic, queue_id))
            self._queues[key] = queue
        return queue

    def positions(self) -> CompactionPositions:
        if self._positions is None:
            self._positions = CompactionPositions.open(os.path.join(self._root, "position-checkpoint"))
        return self._positions

    # ---- recovery ----

    def recover(self) -> None:
        """Finish a swap a crash (or a failure) interrupted; delete a compaction's unfinished new
        files."""
        swap = pending_swap(self._parts.path)
        if swap is not None:
            stale = self._queues.pop((swap["topic"], int(swap["queue_id"])), None)
            if stale is not None:
                stale.close()
            self._finish_swap(swap)
        if not self._recovered:
            scratch = os.path.join(self._root, SCRATCH)
            if os.path.isdir(scratch):
                shutil.rmtree(scratch)
        self._recovered = True

    def _finish_swap(self, swap: dict[str, Any]) -> None:
        topic, queue_id = swap["topic"], int(swap["queue_id"])
        log_dir, cq_dir = self._dirs(topic, queue_id)
        new_log, new_cq = self._dirs(topic, queue_id, scratch=True)
        new = [int(n) for n in swap["new"]]
        for start in new:  # each replace is atomic; done ones are gone from the scratch directory
            for src, dst in ((new_log, log_dir), (new_cq, cq_dir)):
                if os.path.exists(os.path.join(src, _name(start))):
                    os.makedirs(dst, exist_ok=True)
                    os.replace(os.path.join(src, _name(start)), os.path.join(dst, _name(start)))
        for start in swap["old"]:
            if int(start) in new:
                continue
            for directory in (log_dir, cq_dir):
                try:
                    os.unlink(os.path.join(directory, _name(int(start))))
                except FileNotFoundError:
                    pass
        for directory in (log_dir, cq_dir):
            if os.path.isdir(directory):
                fsync_dir(directory)
        positions = self.positions()
        positions.set(topic, queue_id, int(swap["position"]))
        positions.persist()
        os.unlink(self._swap_path)
        fsync_dir(os.path.dirname(self._swap_path))

    # ---- copying ----

    def catch_up(self) -> int:
        """Copy into the compaction logs every record of a compaction topic dispatched since the
        last call (the caller dispatched first). Durable when it returns; raises when a copy
        cannot be made (the caller then deletes no CommitLog segment). Returns the copies made."""
        return self._catch_up(self.topics())

    def run(self) -> None:
        """A retention pass's work: dispatch, copy what compacted topics got since the last
        pass, then compact their queues that closed a log file (raises what copying raises)."""
        topics = self.topics()
        if topics:
            self._parts.dispatcher.catch_up()
            self._catch_up(topics)
            self._compact(topics)

    def _catch_up(self, topics: frozenset[str]) -> int:
        if not topics:
            return 0
        with self._lock:
            self.recover()
            made = 0
            for cq in list(self._parts.queues):
                if cq.topic in topics:
                    made += self._copy_queue(cq)
            self.copied += made
            return made

    def _copy_queue(self, cq: Any) -> int:
        queue = self._queue(cq.topic, cq.queue_id)
        position = max(queue.max_offset, cq.min_offset)
        end = cq.max_offset
        made = 0
        commitlog = self._parts.commitlog
        check = self._check(cq.topic, cq.queue_id)
        while position < end:
            units = np.array(cq.units(position, min(_CHUNK, end - position)))
            if not len(units):
                break
            for i, (offset, size, tags_code) in enumerate(units.tolist()):
                queue_offset = position + i
                if size == PLACEHOLDER_SIZE or size <= 0:
                    continue  # no record stands there
                record = self._record(commitlog, offset, size)
                msg = check(record, queue_offset)
                if not (msg.keys or "").strip():
                    continue  # the broker copies only messages with keys
                if queue.append(record, queue_offset, tags_code, msg.store_timestamp):
                    made += 1
            position += len(units)
        queue.sync()
        return made

    @staticmethod
    def _record(commitlog: Any, offset: int, size: int) -> bytes:
        mf = commitlog.find(offset)
        if mf is None:
            raise MessageNotFoundError(f"no CommitLog segment holds offset {offset}")
        pos = offset - mf.file_from_offset
        if pos < 0 or pos + size > commitlog.readable_end(mf):
            raise MessageNotFoundError(f"no record of {size} bytes at CommitLog offset {offset}")
        return bytes(mf.view(pos, size))

    # ---- compacting ----

    def _compact(self, topics: frozenset[str]) -> int:
        """Compact each of ``topics``' queues that closed a log file since their last
        compaction. Returns the queues compacted; a queue that fails is logged and retried at
        the next pass."""
        if not topics:
            return 0
        done = 0
        with self._lock:
            self.recover()
            for cq in list(self._parts.queues):
                if cq.topic not in topics:
                    continue
                try:
                    if self._compact_queue(cq.topic, cq.queue_id):
                        done += 1
                except Exception as exc:
                    self._failures.failed(exc)
                else:
                    self._failures.succeeded()
        return done

    def _compact_queue(self, topic: str, queue_id: int) -> bool:
        queue = self._queue(topic, queue_id)
        positions = self.positions()
        since = positions.get(topic, queue_id)
        old = queue.closed_files()
        fresh = [s for s in old if queue.file_last.get(s, -1) > since]
        if not old or not fresh:
            return False
        check = self._check(topic, queue_id)
        log_dir, cq_dir = self._dirs(topic, queue_id)
        # two passes over the files, one file in memory at a time: the newest offset of each
        # key in the files new since the last compaction, then the copies kept
        latest: dict[str, int] = {}
        last = since
        for _start, queue_offset, _record, msg, _unit in self._records_of(log_dir, cq_dir, fresh, check):
            if queue_offset > since:
                latest[msg.keys or ""] = queue_offset
                last = queue_offset
        new_log, new_cq = self._dirs(topic, queue_id, scratch=True)
        for directory in (new_log, new_cq):
            if os.path.isdir(directory):
                shutil.rmtree(directory)
        out = QueueLog(new_log, new_cq, queue.log_size, queue.cq_size, check)
        kept = seen = 0
        try:
            for _start, queue_offset, record, msg, unit in self._records_of(log_dir, cq_dir, old, check):
                seen += 1
                if queue_offset > last or (
                    (msg.keys or "").strip()
                    and queue_offset >= latest.get(msg.keys or "", -1)
                    and len(msg.body)
                ):
                    out.append(record, queue_offset, int(unit["tags_code"]), int(unit["store_time"]))
                    kept += 1
            out.end()
            out.sync()
            new = list(out.files)
        finally:
            out.close()
        for directory in (new_log, new_cq):
            if os.path.isdir(directory):
                fsync_dir(directory)
        swap = {"topic": topic, "queue_id": queue_id, "old": old, "new": new, "position": last}
        replace_file(self._swap_path, json.dumps(swap).encode())
        self._finish_swap(swap)
        shutil.rmtree(os.path.join(self._root, SCRATCH), ignore_errors=True)
        # the queue's state: the current file stays, the closed ones are the new ones
        queue.close()
        del self._queues[(topic, queue_id)]
        self.compactions += 1
        self.dropped += seen - kept
        log.info(
            "compacted %s-%d: %d of %d messages kept, up to queue offset %d",
            topic,
            queue_id,
            kept,
            seen,
            last,
        )
        return True

    @staticmethod
    def _records_of(
        log_dir: str, cq_dir: str, starts: list[int], check: Callable[[bytes, int], Any]
    ) -> Iterable[tuple[int, int, bytes, Any, Any]]:
        for start in starts:
            with open(os.path.join(cq_dir, _name(start)), "rb") as f:
                data = f.read()
            units = np.frombuffer(data, dtype=BCQ_UNIT_DTYPE, count=len(data) // BCQ_UNIT_SIZE)
            with open(os.path.join(log_dir, _name(start)), "rb") as f:
                log_data = f.read()
            for unit in units[: valid_prefix(units)]:
                pos, size = int(unit["commitlog_offset"]) - start, int(unit["size"])
                record = log_data[pos : pos + size]
                queue_offset = int(unit["base"])
                yield start, queue_offset, record, check(record, queue_offset), unit

    # ---- life ----

    def close(self) -> None:
        """Copy what is left (a broker taking over finds the logs complete), then close files."""
        try:
            topics = self.topics()
            if topics:
                self._parts.dispatcher.catch_up()
                self._catch_up(topics)
        except Exception as exc:
            log.error("copying into the compaction logs at close failed: %s", exc)
        with self._lock:
            for queue in self._queues.values():
                queue.close()
            self._queues.clear()

    def stats(self) -> dict[str, Any]:
        return {"copied": self.copied, "compactions": self.compactions, "dropped": self.dropped}
