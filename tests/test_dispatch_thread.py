"""The background dispatch thread's waits: between two passes it naps, and it leaves a pass to a
thread already dispatching."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from rocketstore import MessageStore, _impl
from rocketstore.queues.dispatch import DispatchThread

compiled = pytest.mark.skipif(_impl.COMPILED is None, reason="compiled modules not built")


#: no background thread that dispatches (the delay and timer passes catch dispatch up first)
_NO_DISPATCHING_THREADS = dict(
    dispatch_interval_ms=0, schedule_interval_ms=0, timer_interval_ms=0, clean_resource_interval_ms=0
)


def test_a_catch_up_that_need_not_wait_leaves_the_pass_to_the_thread_dispatching(tmp_path, impl):
    with MessageStore(str(tmp_path / "s"), implementation=impl.name, **_NO_DISPATCHING_THREADS) as s:
        s.create_topic("T", 1)
        start = s._opened.dispatcher.catch_up()
        s.put("T", b"body", keys="k")
        held = threading.Event()
        release = threading.Event()

        def dispatching():
            with s._opened.dispatcher.lock:
                held.set()
                release.wait(30)

        other = threading.Thread(target=dispatching)
        other.start()
        try:
            assert held.wait(30)
            assert s._opened.dispatcher.try_catch_up() is False  # returned at once, nothing dispatched
            assert s._opened.dispatcher.offset == start
        finally:
            release.set()
            other.join()
        assert s._opened.dispatcher.try_catch_up() is True
        assert s._opened.dispatcher.offset > start
        assert [m.body for m in s.query_by_key("T", "k")] == [b"body"]


class _Scripted:
    """A dispatcher whose try_catch_up plays ``script``: an exception to raise, or what to
    return (False: another thread was dispatching); then True."""

    def __init__(self, script=()):
        self.script = list(script)
        self.calls = 0
        self.done = threading.Event()

    def try_catch_up(self):
        self.calls += 1
        if not self.script:
            self.done.set()
            return True
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step


def test_short_intervals_nap():
    naps = []
    dispatcher = _Scripted()
    thread = DispatchThread(dispatcher, 1, nap=lambda seconds: (naps.append(seconds), time.sleep(seconds)))
    try:
        assert dispatcher.done.wait(30)
    finally:
        thread.stop()
    assert naps and set(naps) == {0.001}


def test_a_pass_left_to_another_thread_is_neither_a_failure_nor_the_recovery(caplog):
    import errno

    from rocketstore.errors import DiskFullError

    full = DiskFullError(errno.ENOSPC, "cannot allocate file space: No space left on device")
    dispatcher = _Scripted([full, full, False, False, False])
    at_recovery = []

    class Watch(logging.Handler):
        def emit(self, record):
            if "recovered after" in record.getMessage():
                at_recovery.append(dispatcher.calls)

    watch = Watch()
    logging.getLogger("rocketstore.queues.dispatch").addHandler(watch)
    try:
        with caplog.at_level("INFO", logger="rocketstore.queues.dispatch"):
            thread = DispatchThread(dispatcher, 1)
            try:
                assert dispatcher.done.wait(30)
                deadline = time.monotonic() + 30
                while not at_recovery and time.monotonic() < deadline:
                    time.sleep(0.01)
            finally:
                thread.stop()
    finally:
        logging.getLogger("rocketstore.queues.dispatch").removeHandler(watch)
    assert at_recovery == [6]  # logged at the sixth call, the first that dispatched
    messages = [r.getMessage() for r in caplog.records if r.name == "rocketstore.queues.dispatch"]
    assert len([m for m in messages if "No space left on device" in m]) == 1
    assert any("recovered after 2 failures" in m for m in messages)


def test_long_waits_take_the_stop_event_so_stop_does_not_wait_them_out():
    naps = []
    dispatcher = _Scripted()
    thread = DispatchThread(dispatcher, 60_000, nap=naps.append)
    start = time.monotonic()
    thread.stop()
    assert time.monotonic() - start < 30  # not the 60 s interval
    assert naps == [] and dispatcher.calls == 0
