"""The flush thread: ASYNC interval flushes and group commit for the puts that wait, over the
segments' maps.

Part of the pure-Python twin of ``rocketstore.log._store``, gathered by
:mod:`rocketstore.log._store_py`; the compiled twin's is cext/store/durability.pxi (the thread itself: cext/flusher.c).
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import threading
import time

#: The pure twin can always fail its flush thread on purpose (the compiled one only in debug builds).
DEBUG_HOOKS = True

#: Tests of the error path: every flush round fails with this errno while it is set.
_debug_sync_errno = 0


def _debug_fail_syncs(err: int) -> None:
    """Every flush round fails with errno ``err`` until called with 0 (tests of the error path)."""
    global _debug_sync_errno
    _debug_sync_errno = int(err)


_FULL_SYNC = getattr(fcntl, "F_FULLFSYNC", None)


def _data_sync(fd, mm, lo, hi):
    """Make ``[lo, hi)`` of a segment's map durable as the compiled flush thread does: msync
    (MS_SYNC, Linux's data sync of the range), then on macOS, whose msync and fsync leave data
    in the drive's cache, F_FULLFSYNC of the file. The store closes a sealed segment's own
    descriptor where the msync is all there is (MappedFile.release_descriptor)."""
    lo -= lo % mmap.PAGESIZE
    if hi > lo:
        mm.flush(lo, hi - lo)
    if _FULL_SYNC is not None and fd is not None and fd >= 0:
        fcntl.fcntl(fd, _FULL_SYNC)
    if _debug_sync_errno:
        raise OSError(_debug_sync_errno, os.strerror(_debug_sync_errno))


class Flusher:
    """The flush thread: ASYNC interval flushes plus group commit for waiting puts."""

    def __init__(self, start_offset, interval_ms, least_pages, thorough_ms):
        self.cond = threading.Condition()
        self.wrote = start_offset
        self.flushed = start_offset
        self.requested = start_offset
        self.segments = {}  # start -> (fd, map, size)
        self.interval = max(interval_ms, 1) / 1000
        self.least_pages = least_pages
        self.thorough = max(thorough_ms, 1) / 1000
        self.page = 4096
        self.stop = False
        self.last_errno = 0
        self.last_error = None  # the exception behind last_errno (flush_timeout's cause)
        self.dead = None  # the exception that ended the thread, if one did
        self.round_seq = 0  # rounds begun; err_seq: the round that set last_errno (see wait)
        self.err_seq = 0
        self.stats = dict(
            flush_rounds=0, flushed_bytes=0, sync_requests=0, sync_timeouts=0, prefaulted_bytes=0
        )
        self.seg_lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="rocketstore-flush", daemon=True)
        self.thread.start()

    def _round(self):
        # called with self.cond held
        lo, hi = self.flushed, self.wrote
        if hi <= lo:
            return
        self.round_seq += 1
        seq = self.round_seq
        self.cond.release()
        err = 0
        try:
            with self.seg_lock:
                for start, (fd, mm, size) in list(self.segments.items()):
                    if start < hi and lo < start + size:
                        try:
                            _data_sync(fd, mm, max(lo - start, 0), min(hi - start, size))
                        except Exception as exc:  # the waiting puts' error; the thread lives on
                            err = getattr(exc, "errno", None) or errno.EIO
                            self.last_error = exc
        finally:
            self.cond.acquire()
        if not err:
            self.flushed = max(self.flushed, hi)
            self.stats["flush_rounds"] += 1
            self.stats["flushed_bytes"] += hi - lo
        self.last_errno = err
        if err:
            self.err_seq = seq
        self.cond.notify_all()

    def _run(self):
        try:
            self._serve()
        except BaseException as exc:
            with self.cond:
                self.dead = exc
                self.cond.notify_all()
            raise

    def _serve(self):
        with self.cond:
            next_async = time.monotonic() + self.interval
            last_thorough = time.monotonic()
            while not self.stop:
                if self.requested > self.flushed:
                    self._round()
                    if self.last_errno:
                        self.cond.wait(0.01)
                    continue
                now = time.monotonic()
                if now >= next_async:
                    next_async = now + self.interval
                    if now - last_thorough >= self.thorough:
                        last_thorough = now
                        self._round()
                    elif self.wrote // self.page - self.flushed // self.page >= self.least_pages:
                        self._round()
                    continue
                self.cond.wait(next_async - now)
            self._round()

    def wait(self, target, timeout_ms):
        if self.flushed >= target:
            return 0
        deadline = None if timeout_ms < 0 else time.monotonic() + timeout_ms / 1000
        with self.cond:
            # only an error of a round begun after this wait covers the target (see flusher.c)
            seen = self.round_seq
            self.stats["sync_requests"] += 1
            if target > self.requested:
                self.requested = target
                self.cond.notify_all()
            while self.flushed < target:
                if self.last_errno and self.err_seq > seen:
                    return self.last_errno
                if self.dead is not None:
                    return errno.EIO  # the thread is gone: nothing will flush this
                if self.stop:
                    return errno.ESHUTDOWN
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    self.stats["sync_timeouts"] += 1
                    return 1
                self.cond.wait(left)
        return 0

    def request(self, target):
        if self.flushed >= target:
            return
        with self.cond:
            if target > self.requested:
                self.requested = target
                self.cond.notify_all()

    def close(self):
        with self.cond:
            self.stop = True
            self.cond.notify_all()
        self.thread.join()
