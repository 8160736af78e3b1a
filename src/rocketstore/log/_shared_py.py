"""The shared append table (rocketstore.log.sharedappend) as the pure append core uses it:
appending under it, adopting what other processes appended, publishing the end and the queue
offsets. Functions of the core, split out of it by concern.

Part of the pure-Python twin of ``rocketstore.log._store``, gathered by
:mod:`rocketstore.log._store_py`; the compiled twin's is cext/store/shared.pxi.
"""

from __future__ import annotations

import contextlib
import os
import struct

from rocketstore.base._clock import now_ms as _now_ms
from rocketstore.log import sharedappend as _ap
from rocketstore.log._live_py import publish_fault, publish_fault_armed

#: Forks since this module loaded, counted in the child: a core made before a fork refuses to
#: append in the child (its files are the parent's, and so is the shared table's lock).
FORKS = [0]


def _forked() -> None:
    FORKS[0] += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def share(core, table, fd, epoch, owner):
    """See the compiled twin."""
    if len(table) < _ap.SIZE or epoch == 0:
        raise ValueError("not a shared append table, or epoch 0")
    core._check_open()
    mutex = _ap.Mutex(table)
    with core._lock:
        mutex.lock()
        try:
            if owner:
                struct.pack_into("<Q", table, _ap.O_EPOCH, 0)
                table[0:128] = bytes(128)  # (not the mutex after it: this process holds it)
                table[256:4096] = bytes(4096 - 256)
                struct.pack_into("<Q", table, _ap.O_MAGIC, _ap.MAGIC)
                struct.pack_into("<q", table, _ap.O_SEGMENT, core._file_size)
                struct.pack_into("<q", table, _ap.O_END, core._file_from + core._pos)
                struct.pack_into("<q", table, _ap.O_PUBLISHING, core._file_from + core._pos)
                struct.pack_into("<q", table, _ap.O_LAST_TS, core._last_store_ts)
                struct.pack_into("<I", table, _ap.O_REFUSING, core._refusal is not None)
                for t in list(core._topics.values()):
                    at = _ap.add(table, t.name, -1 if t.nqueues > _ap.QUEUES else t.nqueues)
                    if at < 0 or t.nqueues > _ap.QUEUES:
                        continue
                    old = list(t.next_offsets)[: _ap.QUEUES]
                    t.attach(table, at)
                    for q, nxt in enumerate(old):
                        t.next_offsets[q] = t.committed[q] = nxt
                for name, qs in core._pending.items():
                    at = _ap.add(table, name.encode(), 0)
                    if at >= 0:
                        for q, nxt in qs.items():
                            if 0 <= q < _ap.QUEUES:
                                struct.pack_into("<q", table, at + _ap.E_NEXT + 8 * q, nxt)
                                struct.pack_into("<q", table, at + _ap.E_COMMITTED + 8 * q, nxt)
                core._pending = {}
                struct.pack_into("<Q", table, _ap.O_EPOCH, epoch)
            elif struct.unpack_from("<QQ", table, _ap.O_MAGIC) != (_ap.MAGIC, epoch) or (
                struct.unpack_from("<q", table, _ap.O_SEGMENT)[0] != core._file_size
            ):
                raise _ap.StaleTable("the shared append table is not the owner's")
        finally:
            mutex.unlock()
        core._mutex = mutex
        core._share = table
        core._share_fd = fd
        core._epoch = epoch
        core._share_owner = owner
        core._dirty = []


@contextlib.contextmanager
def appending(core):
    """The append lock: this core's, and the shared table's (adopting what other processes
    appended meanwhile; StaleTable, having taken nothing, when its epoch moved on)."""
    if core._fork_gen != FORKS[0]:
        core._refuse_forked()  # (before the lock: a parent's thread may have held it at the fork)
    with core._lock:
        table = core._share
        if core._closed and table is not None and not core._share_owner:
            core._raise_closed()  # closed since the caller's look: its file is closed too
        if table is None:
            try:
                yield
            finally:
                commit_dirty(core)  # an owner that stopped sharing: its entries stay
                core._notify()
            return
        core._mutex.lock()
        try:
            if struct.unpack_from("<Q", table, _ap.O_EPOCH)[0] != core._epoch:
                raise _ap.StaleTable("the store's writing process is opening, closing or gone")
            if not core._share_owner:
                now = _now_ms()
                if not 0 <= now - core._owner_seen_ms < _ap.OWNER_LOOK_MS:
                    if not _ap.owner_present(core._share_fd):
                        raise _ap.StaleTable("the store's writing process is gone")
                    core._owner_seen_ms = now
            if struct.unpack_from("<I", table, _ap.O_BUSY)[0]:
                _ap.repair(table)  # a writer died inside: its offsets and half-written bytes go
            end, last_ts = struct.unpack_from("<qq", table, _ap.O_END)
            adopt(core, end, last_ts)
            struct.pack_into("<I", table, _ap.O_BUSY, os.getpid())
            try:
                yield
            finally:
                # the end first, then the committed offsets, then the end published: a writer
                # killed in between is finished by the next (sharedappend.repair), so the
                # committed offsets never count a record past the published end
                end = core._file_from + core._pos
                publish_fault(1)
                struct.pack_into("<q", table, _ap.O_LAST_TS, core._last_store_ts)
                struct.pack_into("<q", table, _ap.O_PUBLISHING, end)
                publish_fault(2)
                commit_dirty(core, publish_fault_armed(3))
                publish_fault(4)
                struct.pack_into("<q", table, _ap.O_END, end)
                publish_fault(5)
                struct.pack_into("<I", table, _ap.O_BUSY, 0)
                publish_fault(6)
                # Readers learn of the records only now, after the table: a writer killed
                # before this line leaves them to be written over by the next append.
                core._notify()
        finally:
            core._mutex.unlock()


def commit_dirty(core, fault=False):
    for t in core._dirty:
        for q in t.dirty:
            t.committed[q] = t.next_offsets[q]
            if fault:
                os._exit(86)  # (_debug_publish_fault: after the first queue's)
        t.dirty.clear()
    core._dirty.clear()


def adopt(core, end, last_ts):
    core._last_store_ts = max(core._last_store_ts, last_ts)
    if end == core._file_from + core._pos:
        return
    start = end - end % core._file_size
    if start != core._file_from or core._mm is None:
        if core._share_owner:  # adopts the segments, and flushes the others' records too
            mm, fd = core._roll(start)
            core.add_segment(mm, start, fd)
            core.release_flushed_segments()
        core._mm = None
        core._file_from = start
    core._pos = end - start
    core._publish(end)


def unshare(core):
    """See the compiled twin."""
    with core._lock:
        if core._share is None:
            return
        with appending(core):
            struct.pack_into("<Q", core._share, _ap.O_EPOCH, 0)
        core._share = None


def sync_shared(core):
    if core._share is None or core._closed:
        return
    if struct.unpack_from("<q", core._share, _ap.O_END)[0] == core._file_from + core._pos:
        return
    with appending(core):
        pass
