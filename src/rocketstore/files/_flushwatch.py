"""Runs ``PutFuture`` done-callbacks when the flush thread's progress covers them, or when their
``sync_flush_timeout_ms`` has passed (then ``result()`` raises FlushTimeoutError) (both twins)."""

import heapq
import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any, Optional

from rocketstore.base._clock import now_ms

#: [callback, future, fired]
_Entry = list[Any]

__all__ = ["FlushWatcher"]

#: Longest single wait for the flushed offset to move, so deadlines and close() are noticed.
POLL_MS = 100


class FlushWatcher:
    """A daemon thread that waits (GIL released, inside the core) for flushed offsets to advance."""

    def __init__(self, core: Any) -> None:
        self._core = core
        self._lock = threading.Lock()
        # Every pending callback is in both heaps: by target offset and by deadline (epoch ms).
        # An entry is [key, seq, callback, future, fired]; whichever heap pops it first fires it.
        self._by_target: list[tuple[int, int, _Entry]] = []
        self._by_deadline: list[tuple[int, int, _Entry]] = []
        self._seq = itertools.count()
        self._wake = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="rocketstore-flush-callbacks", daemon=True)
        self._thread.start()

    def add(self, future: Any, fn: Callable[[Any], object]) -> None:
        seq = next(self._seq)
        entry = [fn, future, False]
        with self._lock:
            heapq.heappush(self._by_target, (future.target, seq, entry))
            heapq.heappush(self._by_deadline, (future.deadline_ms, seq, entry))
        self._wake.set()

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        if threading.current_thread() is not self._thread:
            self._thread.join()
        self._fire(all_=True)

    def _pop_due(self, heap: list[tuple[int, int, _Entry]], limit: int, all_: bool) -> list[_Entry]:
        ready: list[_Entry] = []
        while heap and (all_ or heap[0][0] <= limit):
            entry = heapq.heappop(heap)[2]
            if not entry[2]:
                entry[2] = True
                ready.append(entry)
        return ready

    def _fire(self, all_: bool = False) -> None:
        flushed = self._core.flushed_offset
        now = now_ms()
        with self._lock:
            ready = self._pop_due(self._by_target, flushed, all_) + self._pop_due(
                self._by_deadline, now, all_
            )
        for fn, future, _ in ready:
            try:
                fn(future)
            except Exception:  # a callback's failure must not stop the others (as concurrent.futures)
                logging.getLogger("rocketstore").exception("PutFuture callback raised")

    def _next(self) -> Optional[tuple[int, int]]:
        """(lowest pending target, ms until the earliest deadline), or None when idle."""
        with self._lock:
            while self._by_target and self._by_target[0][2][2]:
                heapq.heappop(self._by_target)
            while self._by_deadline and self._by_deadline[0][2][2]:
                heapq.heappop(self._by_deadline)
            if not self._by_target:
                return None
            return self._by_target[0][0], self._by_deadline[0][0] - now_ms()

    def _run(self) -> None:
        while not self._closed:
            pending = self._next()
            if pending is None:
                self._wake.wait(POLL_MS / 1000)
                self._wake.clear()
                continue
            target, until_deadline = pending
            if until_deadline > 0:
                timeout = min(until_deadline, POLL_MS)
                if self._core.wait_flushed(target, timeout) > 1:  # a failing flush: no spin
                    self._wake.wait(timeout / 1000)
                    self._wake.clear()
            self._fire()
