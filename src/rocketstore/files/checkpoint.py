"""The 4096-byte ``checkpoint`` file (spec §6): big-endian longs at fixed positions, rest zero.

=====  ======================  =================================================
 pos    field                   meaning
=====  ======================  =================================================
   0    physicMsgTimestamp      store time of the last message flushed
   8    logicsMsgTimestamp      store time of the last ConsumeQueue entry flushed
  16    indexMsgTimestamp       end time of the last full index file
  24    masterFlushedOffset     5.x HA (kept as read)
  32    confirmPhyOffset        5.1.1+ (kept as read)
=====  ======================  =================================================

A checkpoint of another size is read for what it holds: fields it is too short for read as 0
(a file cut short, or never written), bytes past 4096 are ignored, and :meth:`Checkpoint.flush`
rewrites it as exactly 4096 bytes. Something that is not a regular file in its place (a
directory, a FIFO) raises :class:`~rocketstore.errors.StoreConfigError`.
"""

from __future__ import annotations

import os
import struct

from rocketstore.files._files import open_regular
from rocketstore.files.mapped_file import space_error

__all__ = ["Checkpoint", "CHECKPOINT_SIZE"]

CHECKPOINT_SIZE = 4096
_FIELDS = (
    "physic_msg_timestamp",
    "logics_msg_timestamp",
    "index_msg_timestamp",
    "master_flushed_offset",
    "confirm_phy_offset",
)
_LAYOUT = struct.Struct(">" + "q" * len(_FIELDS))


class Checkpoint:
    """Read on open, written in place and fsynced by :meth:`flush`."""

    physic_msg_timestamp: int
    logics_msg_timestamp: int
    index_msg_timestamp: int
    confirm_phy_offset: int

    def __init__(self, path: str) -> None:
        self.path = path
        data = b""
        try:
            fd = open_regular(path, os.O_RDONLY, "checkpoint")
        except FileNotFoundError:
            fd = -1
        if fd >= 0:
            try:
                while len(data) < CHECKPOINT_SIZE:
                    chunk = os.pread(fd, CHECKPOINT_SIZE - len(data), len(data))
                    if not chunk:
                        break
                    data += chunk
            finally:
                os.close(fd)
        # every field the file holds whole; the rest (a short or empty file) reads as 0
        whole = min(len(data), _LAYOUT.size) // 8 * 8
        data = data[:whole].ljust(_LAYOUT.size, b"\0")
        for name, value in zip(_FIELDS, _LAYOUT.unpack(data)):
            setattr(self, name, value)

    @property
    def min_timestamp(self) -> int:
        """``getMinTimestamp``: max(0, min(physic, logics) - 3000)."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    def to_bytes(self) -> bytes:
        head = _LAYOUT.pack(*(getattr(self, name) for name in _FIELDS))
        return head + bytes(CHECKPOINT_SIZE - len(head))

    def flush(self) -> None:
        """Write the fields in place and fsync. A failure (a full disk: the file is written
        through its descriptor, never a map) raises :class:`~rocketstore.errors.DiskFullError` or
        :class:`~rocketstore.errors.SegmentError`; the fields stay as set, for the next flush."""
        try:
            fd = open_regular(self.path, os.O_WRONLY | os.O_CREAT, "checkpoint")
        except OSError as exc:  # (not a regular file: StoreConfigError, as at open)
            raise space_error(exc.errno, "cannot open the checkpoint", self.path) from exc
        try:
            os.pwrite(fd, self.to_bytes(), 0)
            if os.fstat(fd).st_size != CHECKPOINT_SIZE:
                os.ftruncate(fd, CHECKPOINT_SIZE)
            os.fsync(fd)
        except OSError as exc:
            raise space_error(exc.errno, "cannot write the checkpoint", self.path) from exc
        finally:
            os.close(fd)
