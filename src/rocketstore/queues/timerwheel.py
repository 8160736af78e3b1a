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
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable
from typing import Any, Optional

import numpy as np

from rocketstore.errors import MessageNotFoundError

__all__ = [
    "TIMER_CHECK",
    "TimerCheck",
    "read_timer_check",
    "rocketmq_timers",
    "recall_key",
]

TIMER_CHECK = os.path.join("config", "timercheck")
TIMER_LOG = "timerlog"
TIMER_WHEEL = "timerwheel"
TIMER_WHEEL_TTL_DAYS = 7
SLOT_SIZE = 32
UNIT_SIZE = 52
MAGIC_ROLL = 1 << 1
MAGIC_DELETE = 1 << 2
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"

_CHECK = struct.Struct(">qqqq")
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
