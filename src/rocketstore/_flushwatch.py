"""Runs ``PutFuture`` done-callbacks when the flush thread's progress covers them (both twins)."""

import heapq
import itertools
import logging
import threading

__all__ = ["FlushWatcher"]


class FlushWatcher:
    """A daemon thread that waits (GIL released, inside the core) for flushed offsets to advance."""

    def __init__(self, core):
        self._core = core
        self._lock = threading.Lock()
        self._heap = []  # (target offset, seq, callback, future)
        self._seq = itertools.count()
        self._wake = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="rocketstore-flush-callbacks", daemon=True)
        self._thread.start()

    def add(self, target, fn, future):
        with self._lock:
            heapq.heappush(self._heap, (target, next(self._seq), fn, future))
        self._wake.set()

    def close(self):
        self._closed = True
        self._wake.set()
        if threading.current_thread() is not self._thread:
            self._thread.join()
        self._fire(all_=True)

    def _fire(self, all_=False):
        flushed = self._core.flushed_offset
        ready = []
        with self._lock:
            while self._heap and (all_ or self._heap[0][0] <= flushed):
                ready.append(heapq.heappop(self._heap))
        for _, _, fn, future in ready:
            try:
                fn(future)
            except Exception:  # a callback's failure must not stop the others (as concurrent.futures)
                logging.getLogger("rocketstore").exception("PutFuture callback raised")

    def _run(self):
        while not self._closed:
            with self._lock:
                target = self._heap[0][0] if self._heap else None
            if target is None:
                self._wake.wait(0.1)
                self._wake.clear()
                continue
            self._core.wait_flushed(target, 100)
            self._fire()
