"""``config/timerProgress``: the timer service's state and the intent of a pass in progress
(rocketstore.services.timer, whose docstring says how a pass uses them)."""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Mapping
from typing import Any, Optional

from rocketstore.errors import StoreConfigError, StoreReadOnlyError
from rocketstore.files._files import fsync_dir, write_synced
from rocketstore.files.mapped_file import NO_SPACE_ERRNOS, space_error

__all__ = ["NO_KEY", "TimerProgress", "intent_units"]

NO_KEY = (-(1 << 63), -1)  # below every key: nothing delivered yet


class TimerProgress:
    """``config/timerProgress``: the timer service's state and the intent of a pass in progress
    (module docstring), in two fixed slots written in turn, each fdatasynced.

    ========  ======  ===========================================================================
    offset    size    field (big-endian, as RocketMQ's files)
    ========  ======  ===========================================================================
    0         4       magic ``0x544D5250`` ("TMRP")
    4         4       version (1)
    8         8       sequence number (the slot with the larger valid one is current)
    16        8       enqueueOffset Q
    24        8       firstPendingOffset L
    32        8       readTimeMs, 40: readQueueOffset (the watermark W)
    48        8       1 when an intent follows, else 0
    56        8 x 9   intent: commitlogOffset, dequeueMs, done, fromOffset, fromTimeMs,
                      fromQueueOffset, toOffset, toTimeMs, toQueueOffset
    128       4       CRC32 of bytes 0..127
    ========  ======  ===========================================================================

    Slot n lives at ``n * SLOT_SIZE``. A write goes to the slot not holding the current state and
    is fdatasynced before anything depends on it, so a torn write leaves the other slot, and
    the state before, intact. A file of zeros (created, nothing written yet) is the empty state;
    a file with no valid slot but not all zeros is damage (:class:`StoreConfigError`)."""

    FILE_NAME = "timerProgress"
    MAGIC = 0x544D5250
    VERSION = 1
    SLOT_SIZE = 160
    _LAYOUT = struct.Struct(">IIq" + "q" * 14)
    _CRC = struct.Struct(">I")

    def __init__(self, path: str | os.PathLike[str], *, read_only: bool = False) -> None:
        self.path = os.fspath(path)
        self.read_only = read_only
        self._seq = 0
        self._slot = 1  # the next write goes to slot 0
        self.enqueue_offset = 0
        self.first_pending = 0
        self.watermark: tuple[int, int] = NO_KEY
        #: the pass in progress: commitlogOffset, dequeueMs, done, from (Q, W) and ``to`` (Q, W)
        self.intent: Optional[dict[str, Any]] = None
        #: the file holds a state (loaded, or persisted since)
        self.on_disk = False

    @classmethod
    def in_store(cls, root: str | os.PathLike[str], *, read_only: bool = False) -> TimerProgress:
        """Open and load ``<root>/config/timerProgress``."""
        progress = cls(os.path.join(os.fspath(root), "config", cls.FILE_NAME), read_only=read_only)
        progress.load()
        return progress

    def load(self) -> bool:
        """Read the current slot; False (empty state) when the file is missing or all zeros."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read(2 * self.SLOT_SIZE)
        except FileNotFoundError:
            return False
        best = None
        for n in (0, 1):
            chunk = raw[n * self.SLOT_SIZE : n * self.SLOT_SIZE + self._LAYOUT.size + 4]
            if len(chunk) < self._LAYOUT.size + 4:
                continue
            body, (crc,) = chunk[: self._LAYOUT.size], self._CRC.unpack(chunk[self._LAYOUT.size :])
            fields = self._LAYOUT.unpack(body)
            if fields[0] != self.MAGIC or zlib.crc32(body) != crc:
                continue
            if fields[1] != self.VERSION:
                raise StoreConfigError(f"{self.path}: version {fields[1]} is not {self.VERSION}")
            if best is None or fields[2] > best[1][2]:
                best = (n, fields)
        if best is None:
            if raw.strip(b"\0"):
                raise StoreConfigError(f"{self.path}: neither slot is valid (damaged)")
            return False
        self._slot, fields = best
        self._seq = fields[2]
        q, low, t, tq, has_intent = fields[3:8]
        e, d, done, fq, ft, fqo, tq2, tt, tqo = fields[8:17]
        if min(q, low, tq + 1, e, done, fq, fqo + 1, tq2, tqo + 1) < 0 or has_intent not in (0, 1):
            raise StoreConfigError(f"{self.path}: a field is out of range: {fields}")
        self.enqueue_offset, self.first_pending, self.watermark = q, low, (t, tq)
        self.intent = None
        if has_intent:
            self.intent = {
                "commitlogOffset": e,
                "dequeueMs": d,
                "done": done,
                "fromOffset": fq,
                "fromTimeMs": ft,
                "fromQueueOffset": fqo,
                "to": (tq2, (tt, tqo)),
            }
        self.on_disk = True
        return True

    def persist(self) -> None:
        """Write the state (and intent) into the other slot and fdatasync it."""
        if self.read_only:
            raise StoreReadOnlyError(f"{self.path} was opened read-only")
        i = self.intent
        intent = (
            (1, i["commitlogOffset"], i["dequeueMs"], i["done"], i["fromOffset"], i["fromTimeMs"],
             i["fromQueueOffset"], i["to"][0], i["to"][1][0], i["to"][1][1])
            if i is not None
            else (0,) * 10
        )  # fmt: skip
        body = self._LAYOUT.pack(
            self.MAGIC,
            self.VERSION,
            self._seq + 1,
            self.enqueue_offset,
            self.first_pending,
            self.watermark[0],
            self.watermark[1],
            *intent,
        )
        slot = 1 - self._slot
        try:
            created = not os.path.exists(self.path)
            if created:
                os.makedirs(os.path.dirname(self.path), exist_ok=True)
                write_synced(self.path, bytes(2 * self.SLOT_SIZE))
                fsync_dir(os.path.dirname(self.path))
            fd = os.open(self.path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
            try:
                os.pwrite(fd, body + self._CRC.pack(zlib.crc32(body)), slot * self.SLOT_SIZE)
                os.fdatasync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            if exc.errno not in NO_SPACE_ERRNOS:
                raise
            raise space_error(exc.errno, "writing timerProgress failed", self.path) from exc
        self._seq += 1
        self._slot = slot
        self.on_disk = True

    def set_state(self, enqueue_offset: int, watermark: tuple[int, int], first_pending: int) -> None:
        """The state after a pass, without an intent (saved by :meth:`persist`)."""
        self.enqueue_offset, self.watermark, self.first_pending = enqueue_offset, watermark, first_pending
        self.intent = None


def intent_units(units: list[tuple[int, int, int]], intent: Mapping[str, Any]) -> list[tuple[int, int, int]]:
    """The units (``(deliver ms, queue offset, CommitLog offset)``) the pass of ``intent``
    delivers, in its order: below its new Q, with a key at most its new W and above its old W or
    at or past its old Q."""
    from_q = intent["fromOffset"]
    from_w = (intent["fromTimeMs"], intent["fromQueueOffset"])
    to_q, to_w = intent["to"]
    return sorted(
        u for u in units if u[1] < to_q and (u[0], u[1]) <= to_w and ((u[0], u[1]) > from_w or u[1] >= from_q)
    )
