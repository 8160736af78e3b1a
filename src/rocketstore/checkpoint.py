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
"""

from __future__ import annotations

import os
import struct

__all__ = ["Checkpoint", "CHECKPOINT_SIZE"]

CHECKPOINT_SIZE = 4096
_FIELDS = ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp",
           "master_flushed_offset", "confirm_phy_offset")
_LAYOUT = struct.Struct(">" + "q" * len(_FIELDS))


class Checkpoint:
    """Read on open, written in place and fsynced by :meth:`flush`."""

    def __init__(self, path: str):
        self.path = path
        values = (0,) * len(_FIELDS)
        try:
            with open(path, "rb") as f:
                data = f.read(CHECKPOINT_SIZE)
            if len(data) >= _LAYOUT.size:
                values = _LAYOUT.unpack_from(data)
        except FileNotFoundError:
            pass
        for name, value in zip(_FIELDS, values):
            setattr(self, name, value)

    @property
    def min_timestamp(self) -> int:
        """``getMinTimestamp``: max(0, min(physic, logics) - 3000)."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    def to_bytes(self) -> bytes:
        head = _LAYOUT.pack(*(getattr(self, name) for name in _FIELDS))
        return head + bytes(CHECKPOINT_SIZE - len(head))

    def flush(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            os.pwrite(fd, self.to_bytes(), 0)
            os.fsync(fd)
        finally:
            os.close(fd)
