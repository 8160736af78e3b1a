"""RocketMQ 5.x's timer files, read: ``timerlog/``, ``timerwheel`` and ``config/timercheck``.

A 5.x broker's ``TimerMessageStore`` reads each timer message (a record of topic
``rmq_sys_wheel_timer``, its deliver time in ``TIMER_OUT_MS``) from that queue into the timer
log, a chain of 52-byte units per wheel slot, and delivers a slot's chain when its time comes:

* ``config/timercheck`` (``TimerCheckpoint``): longs ``lastReadTimeMs`` (the next slot to
  deliver), ``lastTimerLogFlushPos``, ``lastTimerQueueOffset`` (units of the timer queue below it
  are in the log) and ``masterTimerQueueOffset``, then the data version.
* ``timerwheel``: ``2 * slotsTotal`` slots of 32 bytes (``Slot``: time / precision, the first
  and last timer log position of its chain, a count, a magic), where slotsTotal covers 7 days
  at ``timerPrecisionMs``; the file's length says the precision.
* ``timerlog/<20-digit start>``: units ``size (52), prevPos, magic, enqueueTime,
  delayedTime - enqueueTime (int), offsetPy, sizePy, hash of the real topic, reserved``; magic
  ``MAGIC_ROLL`` (re-enqueued when its slot comes: the deliver time is further than the wheel
  reaches) and ``MAGIC_DELETE`` (a recall: its record's ``TIMER_DEL_UNIQKEY`` names the
  ``topic+UNIQ_KEY`` of the message not to deliver).

The timer messages still pending are those of the slots at or after ``lastReadTimeMs`` and the
timer queue's records from ``lastTimerQueueOffset`` on, less the recalled ones.

**Written** by :class:`TimerWheelWriter`, as 5.3.3's ``TimerMessageStore.doEnqueue``,
``TimerLog.append``, ``TimerWheel.putSlot`` and ``TimerCheckpoint.flush`` write them: a unit
appended per timer message (a blank of 16 bytes ending a file a unit and a blank no longer fit),
chained to the last unit of its slot, the slot's first / last position and count updated, and
the checkpoint's four longs and data version. rocketstore's timer service
(rocketstore.services.timer) keeps them so that a 5.x broker opening the store takes over its
pending timers (see that module for what it writes when, and why it never rolls a unit).
"""

from __future__ import annotations

import functools
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Optional

import numpy as np

from rocketstore.errors import MessageNotFoundError, StoreConfigError
from rocketstore.files._files import fsync_dir, open_regular

__all__ = [
    "TIMER_CHECK",
    "TimerCheck",
    "TimerWheelWriter",
    "java_string_hash",
    "read_timer_check",
    "rocketmq_timers",
    "recall_key",
]

log = logging.getLogger("rocketstore.queues.timerwheel")

TIMER_CHECK = os.path.join("config", "timercheck")
TIMER_LOG = "timerlog"
TIMER_WHEEL = "timerwheel"
TIMER_WHEEL_TTL_DAYS = 7
SLOT_SIZE = 32
UNIT_SIZE = 52
MAGIC_DEFAULT = 1
MAGIC_ROLL = 1 << 1
MAGIC_DELETE = 1 << 2
#: MessageStoreConfig's defaults: mappedFileSizeTimerLog, timerPrecisionMs
TIMER_LOG_FILE_SIZE = 100 * 1024 * 1024
TIMER_PRECISION_MS = 1000
#: TimerMessageStore: the wheel holds 2 * slotsTotal slots whatever the precision
SLOTS_TOTAL = TIMER_WHEEL_TTL_DAYS * 86_400
WHEEL_LENGTH = SLOTS_TOTAL * 2 * SLOT_SIZE
#: TimerLog: a file ends with a blank (size, 0L, BLANK_MAGIC_CODE) where a unit and a blank
#: no longer fit
TIMER_LOG_BLANK_MAGIC = -875286124  # 0xBBCCDDEE ^ (1880681586 + 8), as an int
MIN_BLANK_LEN = 16
#: TimerCheckpoint maps one OS page
TIMER_CHECK_FILE_SIZE = 4096
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"

_CHECK = struct.Struct(">qqqq")
_CHECK_FULL = struct.Struct(">qqqqqqq")  # the four longs, then DataVersion (stateVersion, timestamp, counter)
_BLANK = struct.Struct(">iqi")
_SLOT = struct.Struct(">qqqii")
_UNIT_DTYPE = np.dtype(
    [
        ("size", ">i4"),
        ("prev", ">i8"),
        ("magic", ">i4"),
        ("enqueue", ">i8"),
        ("delay", ">i4"),
        ("offset", ">i8"),
        ("size_py", ">i4"),
        ("hash", ">i4"),
        ("reserved", ">i8"),
    ]
)
assert _UNIT_DTYPE.itemsize == UNIT_SIZE
_UNIT = struct.Struct(">iqiqiqi")  # size, prevPos, magic, enqueueTime, delay, offsetPy, sizePy
_SLOT_DTYPE = np.dtype([("time", ">i8"), ("first", ">i8"), ("last", ">i8"), ("num", ">i4"), ("magic", ">i4")])


class TimerCheck:
    """``config/timercheck``'s four longs."""

    __slots__ = ("read_time_ms", "timerlog_flush_pos", "queue_offset", "master_queue_offset")

    def __init__(
        self, read_time_ms: int, timerlog_flush_pos: int, queue_offset: int, master_queue_offset: int
    ):
        self.read_time_ms = read_time_ms
        self.timerlog_flush_pos = timerlog_flush_pos
        self.queue_offset = queue_offset
        self.master_queue_offset = master_queue_offset


def read_timer_check(root: str | os.PathLike[str]) -> Optional[TimerCheck]:
    """The broker's timer checkpoint, None when the store has none (or it is too short)."""
    try:
        with open(os.path.join(os.fspath(root), TIMER_CHECK), "rb") as f:
            raw = f.read(_CHECK.size)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if len(raw) < _CHECK.size:
        return None
    return TimerCheck(*_CHECK.unpack(raw))


def recall_key(properties: dict[str, str]) -> Optional[str]:
    """The ``topic+UNIQ_KEY`` a recall record names, None when the record is no recall."""
    return properties.get(PROPERTY_TIMER_DEL_UNIQKEY)


def _timer_log(root: str) -> tuple[list[tuple[int, bytes]], int]:
    """The timer log's files as (start offset, bytes), oldest first, and their size."""
    directory = os.path.join(root, TIMER_LOG)
    try:
        names = sorted((n for n in os.listdir(directory) if n.isascii() and n.isdigit()), key=int)
    except (FileNotFoundError, NotADirectoryError):
        return [], 0
    files = []
    for name in names:
        with open(os.path.join(directory, name), "rb") as f:
            files.append((int(name), f.read()))
    return files, (len(files[0][1]) if files else 0)


def _units_of_slots(root: str, read_time_ms: int) -> list[tuple[int, int, int]]:
    """``(magic, delayed time, CommitLog offset)`` of each timer log unit chained from a wheel
    slot whose time is at or after ``read_time_ms``."""
    try:
        wheel = np.fromfile(os.path.join(root, TIMER_WHEEL), dtype=_SLOT_DTYPE)
    except (FileNotFoundError, NotADirectoryError):
        return []
    if not len(wheel):
        return []
    precision = TIMER_WHEEL_TTL_DAYS * 86_400_000 * 2 // len(wheel)
    if precision <= 0:
        return []
    files, file_size = _timer_log(root)
    if not file_size:
        return []
    by_start = dict(files)
    used = wheel[(wheel["time"] * precision >= read_time_ms) & (wheel["last"] >= 0)]
    found = []
    limit = sum(len(data) for _, data in files) // UNIT_SIZE + 1  # a chain cannot be longer
    for pos in used["last"].tolist():
        steps = 0
        while pos != -1 and steps < limit:
            steps += 1
            data = by_start.get(pos - pos % file_size)
            at = pos % file_size
            if data is None or at + UNIT_SIZE > len(data):
                break
            size, prev, magic, enqueued, delay, offset_py, _size_py = _UNIT.unpack_from(data, at)
            if size != UNIT_SIZE:
                break
            found.append((magic, enqueued + delay, offset_py))
            pos = prev
    return found


def rocketmq_timers(
    root: str | os.PathLike[str],
    read: Callable[[int], Any],
    unread: Iterable[Any],
) -> Optional[dict[str, Any]]:
    """The timer messages a RocketMQ 5.x broker left pending in the store at ``root``, None when
    it has no ``config/timercheck``. ``read(commitlog_offset)`` reads a record; ``unread`` are
    the timer queue's records from the checkpoint's queue offset on (not in the log yet).

    Returns ``{"read_time_ms", "queue_offset", "pending": [{"deliver_ms", "topic", "queue_id",
    "uniq_key", "commitlog_offset"}, ...] (by deliver time), "recalled": [uniq key, ...]}``."""
    root = os.fspath(root)
    check = read_timer_check(root)
    if check is None:
        return None
    messages: dict[int, tuple[Any, int]] = {}  # CommitLog offset -> (record, delayed time)
    recalls: set[str] = set()
    for magic, delayed, offset in _units_of_slots(root, check.read_time_ms):
        try:
            msg = read(offset)
        except MessageNotFoundError:
            continue
        key = recall_key(msg.properties or {})
        if magic & MAGIC_DELETE and not magic & MAGIC_ROLL or key is not None:
            if key is not None:
                recalls.add(key)
            continue
        messages.setdefault(offset, (msg, delayed))
    for msg in unread:
        key = recall_key(msg.properties or {})
        if key is not None:
            recalls.add(key)
        else:
            messages.setdefault(msg.commitlog_offset, (msg, -1))
    pending, recalled = [], set()
    for offset, (msg, delayed) in messages.items():
        props = msg.properties or {}
        topic = props.get(PROPERTY_REAL_TOPIC, msg.topic)
        uniq = props.get(PROPERTY_UNIQ_KEY)
        if f"{topic}+{uniq}" in recalls:
            recalled.add(uniq)
            continue
        try:
            deliver = int(props.get(PROPERTY_TIMER_OUT_MS, delayed))
            queue_id = int(props.get(PROPERTY_REAL_QID, -1))
        except ValueError:
            deliver, queue_id = delayed, -1
        pending.append(
            {
                "deliver_ms": deliver,
                "topic": topic,
                "queue_id": queue_id,
                "uniq_key": uniq,
                "commitlog_offset": offset,
            }
        )
    pending.sort(key=lambda p: (p["deliver_ms"], p["commitlog_offset"]))
    return {
        "read_time_ms": check.read_time_ms,
        "queue_offset": check.queue_offset,
        "pending": pending,
        "recalled": sorted(k for k in recalled if k is not None),
    }


@functools.lru_cache(maxsize=1024)
def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, as a signed int): the unit's "hash
    code of real topic"."""
    data = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for (unit,) in struct.iter_unpack(">H", data):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _whole(units: np.ndarray) -> np.ndarray:
    """Which of ``units`` are whole, as a broker's recovery reads them: size 52, a magic of
    RocketMQ's."""
    whole: np.ndarray = (units["size"] == UNIT_SIZE) & ((units["magic"] | 0xF) == 0xF)
    return whole


def _java_div(values: np.ndarray, divisor: int) -> np.ndarray:
    """Java's long division (toward zero) of each value."""
    return np.where(values < 0, -((-values) // divisor), values // divisor)


class TimerWheelWriter:
    """Appends timer log units and keeps the wheel's slots and the checkpoint, byte for byte as
    5.3.3's TimerMessageStore does (module docstring).

    Opening finds the end of the timer log's whole units (a unit is whole when its size is 52
    and its magic one of RocketMQ's, as the broker's recovery reads it, and ``valid(offsetPy,
    sizePy)`` says the last one names a record: a torn last unit is zeroed). :meth:`append`
    writes units (not synced); :meth:`checkpoint` syncs the timer log, writes the changed slots
    into ``timerwheel`` and syncs it, then writes and syncs ``config/timercheck``: a broker
    reading the files finds every unit below the checkpoint's flush position linked from its
    slot, and relinks the later ones itself (its recovery rescans the timer log from the flush
    position on). ``roll_window_slots`` (the broker's timerRollWindowSlot) rolls a unit due
    further away as the broker does; None (rocketstore's timer service) never rolls."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        precision_ms: int = TIMER_PRECISION_MS,
        file_size: Optional[int] = None,
        roll_window_slots: Optional[int] = None,
        valid: Optional[Callable[[int, int], bool]] = None,
    ) -> None:
        self.root = os.fspath(root)
        self.precision_ms = precision_ms
        self.roll_window_slots = roll_window_slots
        self._log_dir = os.path.join(self.root, TIMER_LOG)
        self._fds: dict[int, int] = {}  # file start -> descriptor
        self._dirty_files: set[int] = set()
        self._created = False
        self._slots: dict[int, list[int]] = {}  # slot index -> [time / precision, first, last, num, magic]
        self._dirty_slots: set[int] = set()
        self._wheel_fd: Optional[int] = None
        self._worker: Optional[threading.Thread] = None
        starts = self._starts()
        self.file_size = file_size or TIMER_LOG_FILE_SIZE
        if starts:
            self.file_size = (
                os.path.getsize(os.path.join(self._log_dir, f"{starts[-1]:020d}")) or self.file_size
            )
        #: the timer log position after its last whole unit: where the next one goes
        self.end = self._recover(starts, valid)
        self._wheel_synced = 0  # the wheel file holds the slots of the units below it, synced

    # ---- opening ----

    def _starts(self) -> list[int]:
        try:
            names = os.listdir(self._log_dir)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(int(n) for n in names if len(n) == 20 and n.isascii() and n.isdigit())

    def _fd(self, start: int, create: bool = False) -> int:
        fd = self._fds.get(start)
        if fd is None:
            path = os.path.join(self._log_dir, f"{start:020d}")
            if create and not os.path.exists(path):
                os.makedirs(self._log_dir, exist_ok=True)
                fd = open_regular(path, os.O_RDWR | os.O_CREAT, "timer log file")
                os.ftruncate(fd, self.file_size)  # the broker's MappedFile: full size, sparse
                self._created = True
            else:
                fd = open_regular(path, os.O_RDWR, "timer log file")
            self._fds[start] = fd
        return fd

    def _recover(self, starts: list[int], valid: Optional[Callable[[int, int], bool]]) -> int:
        """The end of the whole units (class docstring), from the checkpoint's flush position
        on when it lies in the last file, else from the last file's start."""
        if not starts:
            return 0
        fs = self.file_size
        start = starts[-1]
        check = read_timer_check(self.root)
        at = 0
        if check is not None and start <= check.timerlog_flush_pos < start + fs:
            at = (check.timerlog_flush_pos - start) // UNIT_SIZE * UNIT_SIZE
        fd = self._fd(start)
        end = start + at
        while True:
            raw = os.pread(fd, UNIT_SIZE * 65536, end - start)
            units = np.frombuffer(raw[: len(raw) // UNIT_SIZE * UNIT_SIZE], dtype=_UNIT_DTYPE)
            bad = np.flatnonzero(~_whole(units))
            n = int(bad[0]) if len(bad) else len(units)
            end += n * UNIT_SIZE
            if n < len(units) or not len(units):
                break
        if end - start + _BLANK.size <= fs:
            size, _prev, magic = _BLANK.unpack(os.pread(fd, _BLANK.size, end - start))
            if magic == TIMER_LOG_BLANK_MAGIC and size == fs - (end - start):
                end = start + fs  # full: the next unit opens a new file
        while valid is not None and end > 0:
            last = self.last_unit(end)
            if last is None or valid(last[1], last[2]):
                break
            pos = last[0]
            os.pwrite(self._fd(pos - pos % fs), bytes(end - pos if end % fs else UNIT_SIZE), pos % fs)
            self._dirty_files.add(pos - pos % fs)
            end = pos
        return end

    def last_unit(self, end: Optional[int] = None) -> Optional[tuple[int, int, int]]:
        """``(position, offsetPy, sizePy)`` of the last unit before ``end`` (default: the end),
        None when the timer log holds none."""
        end = self.end if end is None else end
        fs = self.file_size
        if end <= 0:
            return None
        if end % fs:
            pos = end - UNIT_SIZE
        else:  # the previous file is full: its last unit comes before its blank
            pos = end - fs + ((fs - MIN_BLANK_LEN) // UNIT_SIZE - 1) * UNIT_SIZE
        start = pos - pos % fs
        if start not in self._fds and not os.path.exists(os.path.join(self._log_dir, f"{start:020d}")):
            return None
        unit = np.frombuffer(os.pread(self._fd(start), UNIT_SIZE, pos % fs), dtype=_UNIT_DTYPE)
        if len(unit) != 1 or unit["size"][0] != UNIT_SIZE:
            return None
        return pos, int(unit["offset"][0]), int(unit["size_py"][0])

    # ---- the wheel ----

    def _wheel(self, create: bool) -> Optional[int]:
        if self._wheel_fd is None:
            path = os.path.join(self.root, TIMER_WHEEL)
            if not os.path.exists(path) and not create:
                return None
            fd = open_regular(path, os.O_RDWR | os.O_CREAT, "timer wheel")
            size = os.fstat(fd).st_size
            if size not in (0, WHEEL_LENGTH):
                os.close(fd)
                raise StoreConfigError(f"{path}: {size} bytes, not the {WHEEL_LENGTH} of a timer wheel")
            if size == 0:
                os.ftruncate(fd, WHEEL_LENGTH)  # sparse, as the broker's setLength
                fsync_dir(self.root)
            self._wheel_fd = fd
        return self._wheel_fd

    def _slot(self, index: int) -> list[int]:
        slot = self._slots.get(index)
        if slot is None:
            fd = self._wheel(False)
            raw = os.pread(fd, SLOT_SIZE, index * SLOT_SIZE) if fd is not None else b""
            slot = list(_SLOT.unpack(raw)) if len(raw) == SLOT_SIZE else [0, 0, 0, 0, 0]
            self._slots[index] = slot
        return slot

    # ---- writing ----

    def append(self, units: Any, write_ms: int) -> None:
        """Append a unit for each of ``units`` (in order): rows ``(delayed ms, offsetPy,
        sizePy, hash of the real topic, magic)``, or a structured array with those fields
        (``deliver``, ``offset``, ``size``, ``hash``, ``magic``); ``write_ms`` is the broker's
        currWriteTimeMs (the time rounded down to the precision). Not synced (:meth:`checkpoint`)."""
        if isinstance(units, np.ndarray) and units.dtype.names:
            delayed = units["deliver"].astype(np.int64)
            offsets, sizes = units["offset"], units["size"]
            hashes, magic = units["hash"], units["magic"].astype(np.int64)
        else:
            cols = np.asarray(units, dtype=np.int64).reshape(-1, 5)
            delayed, offsets, sizes, hashes, magic = (cols[:, i].copy() for i in range(5))
        n = len(delayed)
        if not n:
            return
        p = self.precision_ms
        window = self.roll_window_slots
        if window is not None:
            roll = delayed - write_ms >= window * p
            if roll.any():
                magic = np.where(roll, magic | MAGIC_ROLL, magic)
                further = delayed - write_ms - window * p < (window // 3) * p
                delayed = np.where(
                    roll, np.where(further, write_ms + (window // 2) * p, write_ms + window * p), delayed
                )
        # the delay field is an int: a unit long overdue (rocketstore writes those too) is
        # written at the oldest time it holds, a slot the broker has long passed
        delayed = np.maximum(delayed, write_ms - (1 << 30))
        pos = np.empty(n, dtype=np.int64)
        fs = self.file_size
        blanks: list[tuple[int, int]] = []
        i = 0
        end = self.end
        while i < n:
            at = end % fs
            fit = (fs - MIN_BLANK_LEN - at) // UNIT_SIZE
            if fit <= 0:
                blanks.append((end, fs - at))
                end += fs - at
                continue
            k = min(fit, n - i)
            pos[i : i + k] = end + UNIT_SIZE * np.arange(k, dtype=np.int64)
            end += UNIT_SIZE * k
            i += k
        # chain each unit to the one before it in its slot (the slot's last for the first)
        times = _java_div(delayed, p)
        order = np.argsort(times, kind="stable")
        t_sorted, p_sorted = times[order], pos[order]
        firsts = np.flatnonzero(np.r_[True, t_sorted[1:] != t_sorted[:-1]])
        lasts = np.r_[firsts[1:], n] - 1
        deletes = np.add.reduceat(((magic[order] & MAGIC_DELETE) != 0).astype(np.int64), firsts)
        prev_sorted = np.empty(n, dtype=np.int64)
        prev_sorted[1:] = p_sorted[:-1]
        ring = SLOTS_TOTAL * 2
        for a, b, dels in zip(firsts.tolist(), lasts.tolist(), deletes.tolist()):
            t = int(t_sorted[a])
            index = t % ring
            slot = self._slot(index)
            if slot[0] != t:
                slot = [t, -1, -1, 0, 0]  # TimerWheel.getSlot: another time's slot is none
            prev_sorted[a] = slot[2]
            first = slot[1] if slot[1] != -1 else int(p_sorted[a])
            num = (slot[3] + (b - a + 1) - 2 * dels + (1 << 31)) % (1 << 32) - (1 << 31)
            self._slots[index] = [t, first, int(p_sorted[b]), num, slot[4]]
            self._dirty_slots.add(index)
        prev = np.empty(n, dtype=np.int64)
        prev[order] = prev_sorted
        rec = np.zeros(n, dtype=_UNIT_DTYPE)
        rec["size"] = UNIT_SIZE
        rec["prev"] = prev
        rec["magic"] = magic
        rec["enqueue"] = write_ms
        rec["delay"] = (delayed - write_ms).astype(np.int32)
        rec["offset"] = offsets
        rec["size_py"] = sizes
        rec["hash"] = hashes
        for at, size in blanks:
            os.pwrite(
                self._fd(at - at % fs, create=True), _BLANK.pack(size, 0, TIMER_LOG_BLANK_MAGIC), at % fs
            )
            self._dirty_files.add(at - at % fs)
        starts = pos - pos % fs
        cuts = np.flatnonzero(np.r_[True, starts[1:] != starts[:-1]]).tolist() + [n]
        for a, b in zip(cuts[:-1], cuts[1:]):
            start = int(starts[a])
            os.pwrite(self._fd(start, create=True), rec[a:b].view(np.uint8).data, int(pos[a]) - start)
            self._dirty_files.add(start)
        self.end = end

    def checkpoint(self, read_time_ms: int, queue_offset: int, *, wait: bool = True) -> bool:
        """Make the units durable, write the changed slots into the wheel and sync it, then write
        and sync ``config/timercheck``: ``lastReadTimeMs`` ``read_time_ms``, the flush position the
        end of the units, ``lastTimerLogFlushPos`` and ``masterTimerQueueOffset``
        ``queue_offset``. ``wait=False`` leaves the syncing and writing to a thread (the caller
        goes on appending: the checkpoint holds what was appended when it was called) and returns
        False, doing nothing, while the last such one runs; its failure is logged, and what it
        should have written is written by the next checkpoint."""
        worker = self._worker
        if worker is not None:
            if not wait and worker.is_alive():
                return False
            worker.join()
            self._worker = None
        job = self._snapshot(read_time_ms, queue_offset)
        if wait:
            self._write(job, True)
        else:
            self._worker = threading.Thread(
                target=self._write_logged, args=(job,), name="rocketstore-timerwheel"
            )
            self._worker.start()
        return True

    def _snapshot(self, read_time_ms: int, queue_offset: int) -> tuple[Any, ...]:
        """What a checkpoint writes, taken in the appending thread."""
        files = sorted(self._dirty_files)
        fds = [self._fd(start) for start in files]
        slots = {index: tuple(self._slots[index]) for index in self._dirty_slots}
        wheel = self._wheel(True) if slots else None
        created, self._created = self._created, False
        self._dirty_files.clear()
        self._dirty_slots.clear()
        # keep the slots a later unit may still chain to; forget the passed ones not to write
        floor = read_time_ms // self.precision_ms - 1
        for index in [i for i, slot in self._slots.items() if slot[0] < floor]:
            del self._slots[index]
        return files, fds, slots, wheel, created, read_time_ms, queue_offset, self.end

    def _write_logged(self, job: tuple[Any, ...]) -> None:
        try:
            self._write(job, False)
        except Exception:
            log.exception("writing RocketMQ's timer files failed: the next checkpoint writes them")
            files, _fds, slots, _wheel, created, *_rest = job
            self._dirty_files.update(files)
            self._dirty_slots.update(i for i in slots if i in self._slots)
            self._created = self._created or created

    def _write(self, job: tuple[Any, ...], full: bool) -> None:
        """Write a checkpoint: the units synced first, so that neither the slots nor
        ``timercheck`` written after them ever name a unit a power cut could take away. ``full``
        syncs the wheel and ``timercheck`` too; else the wheel is synced only when a broker's
        recovery would not relink what it lacks (it relinks the units from the start of the
        file before the one holding the flush position on), and ``timercheck`` is left to the
        system (an older one names fewer delivered timers: a broker repeats more, loses none)."""
        _files, fds, slots, wheel, created, read_time_ms, queue_offset, end = job
        for fd in fds:
            os.fdatasync(fd)
        if created:
            fsync_dir(self._log_dir)
            fsync_dir(self.root)
        if slots:
            assert wheel is not None
            for index in sorted(slots):
                os.pwrite(wheel, _SLOT.pack(*slots[index]), index * SLOT_SIZE)
            fs = self.file_size
            relinked_from = max(0, end - fs) // fs * fs
            if full or self._wheel_synced < relinked_from:
                os.fdatasync(wheel)
                self._wheel_synced = end
        path = os.path.join(self.root, TIMER_CHECK)
        created = not os.path.exists(path)
        if created:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = open_regular(path, os.O_RDWR | os.O_CREAT, "timer checkpoint")
        try:
            if os.fstat(fd).st_size < TIMER_CHECK_FILE_SIZE:
                os.ftruncate(fd, TIMER_CHECK_FILE_SIZE)
            old = _CHECK_FULL.unpack(os.pread(fd, _CHECK_FULL.size, 0))
            state_version, stamp, counter = old[4:]
            if (read_time_ms, queue_offset) != (old[0], old[2]) or created:
                stamp, counter = int(time.time() * 1000), counter + 1  # DataVersion.nextVersion
            os.pwrite(
                fd,
                _CHECK_FULL.pack(
                    read_time_ms, end, queue_offset, queue_offset, state_version, stamp, counter
                ),
                0,
            )
            if full or created:
                os.fdatasync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_dir(os.path.dirname(path))

    # ---- retention ----

    def delete_files_below(self, offset_py: int) -> list[int]:
        """Delete the timer log's leading files whose every unit names a CommitLog record below
        ``offset_py``, oldest first, stopping at the first that stays; returns their start
        offsets. A 5.x broker's TimerMessageStore does this every 30 s with the CommitLog's min
        offset (MappedFileQueue.deleteExpiredFileByOffsetForTimerLog: a file goes, the last
        never, when the unit at its last unit's place names a record below it). Here a file
        also stays when it is not full of whole units, when a broker's recovery rescans it (it
        holds the checkpoint's flush position, or is the file before that one: the broker
        relinks from there); a checkpoint in progress is waited for first (it holds the
        descriptors of the files it syncs)."""
        if self._worker is not None:
            self._worker.join()
            self._worker = None
        starts = self._starts()
        fs = self.file_size
        check = read_timer_check(self.root)
        flush = self.end if check is None else min(self.end, check.timerlog_flush_pos)
        rescanned = max(0, flush - fs) // fs * fs  # the first file a broker's recovery reads
        units = (fs - MIN_BLANK_LEN) // UNIT_SIZE
        deleted: list[int] = []
        for start in starts[:-1]:
            if start + fs > rescanned or units <= 0:
                break
            path = os.path.join(self._log_dir, f"{start:020d}")
            if os.path.getsize(path) != fs:
                break
            raw = os.pread(self._fd(start), UNIT_SIZE, (units - 1) * UNIT_SIZE)
            last = np.frombuffer(raw, dtype=_UNIT_DTYPE)  # the broker's check first: cheap
            if len(last) != 1 or not _whole(last).all() or int(last["offset"][0]) >= offset_py:
                break
            log_units = np.fromfile(path, dtype=_UNIT_DTYPE, count=units)
            if len(log_units) != units or not _whole(log_units).all():
                break
            if int(log_units["offset"].max()) >= offset_py:
                break
            os.close(self._fds.pop(start))
            os.unlink(path)
            self._dirty_files.discard(start)  # nothing left to sync
            deleted.append(start)
        if deleted:
            fsync_dir(self._log_dir)
        return deleted

    def close(self) -> None:
        """Close the files once a checkpoint in progress is done (what no :meth:`checkpoint`
        wrote stays unwritten)."""
        if self._worker is not None:
            self._worker.join()
            self._worker = None
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        if self._wheel_fd is not None:
            os.close(self._wheel_fd)
            self._wheel_fd = None
