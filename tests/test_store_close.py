"""close() runs every step whatever an earlier one raised; a store dropped without close() is
closed like a closed one (its background threads do not keep it alive)."""

import gc
import os
import threading

import pytest

from rocketstore import MessageStore
from rocketstore.errors import DiskFullError, StoreClosedError

SEGMENT = 64 * 1024


def resources(collect=True):
    """(Python threads, OS threads, open fds) of this process, after collecting garbage (an
    earlier test's dropped store is closed then, not in the middle of this one)."""
    if collect:
        gc.collect()
    return (
        sorted(t.name for t in threading.enumerate()),
        len(os.listdir("/proc/self/task")),
        len(os.listdir("/proc/self/fd")),
    )


def settled(before, collect=True):
    """resources() once they are back to ``before`` (an exiting thread may linger a moment after
    its join returns); whatever they are after a bounded number of looks otherwise."""
    event = threading.Event()
    for _ in range(2000):
        now = resources(collect)
        if now == before:
            break
        event.wait(0.01)
    return now


def open_store(path, impl, **options):
    return MessageStore(path, implementation=impl.name, commitlog_file_size=SEGMENT, **options)


def busy_store(path, impl):
    s = open_store(path, impl)
    for i in range(300):
        s.put("T", b"m%d" % i, keys="k%d" % i)
    s.put("T", b"late", delay_level=18)  # 2 h: never delivered into T during a test, however slow
    future = s.put_pipelined("T", b"piped")
    future.add_done_callback(lambda f: None)
    future.result()
    assert s.get_message("g", "T", 0, 0).messages
    return s


def check_reopens_clean(path, impl, expect_clean=True):
    with open_store(path, impl) as s:
        assert s.last_shutdown_clean is expect_clean
        assert len([m for m in s.iter_messages() if m.topic == "T"]) == 301
        assert s.query_by_key("T", "k299")[0].body == b"m299"
        assert sum(hi for (t, _q), (_lo, hi) in s.queues().items() if t == "T") == 301


def test_a_dropped_store_is_closed_like_a_closed_one(tmp_path, impl):
    before = resources()
    s = busy_store(tmp_path / "store", impl)
    del s
    gc.collect()
    assert not (tmp_path / "store" / "abort").exists()
    assert settled(before) == before
    check_reopens_clean(tmp_path / "store", impl)
    assert settled(before) == before


def test_a_dropped_read_only_store_releases_everything(tmp_path, impl):
    busy_store(tmp_path / "store", impl).close()
    before = resources()
    r = MessageStore(tmp_path / "store", implementation=impl.name, read_only=True)
    assert r.query_by_key("T", "k1")[0].body == b"m1"
    del r
    gc.collect()
    assert settled(before) == before


def _fail(exc):
    """A stand-in that raises a new exception like ``exc`` at each call: one instance raised
    from two threads would carry the last raise's frames into the first one's log record."""

    def boom(*args, **kwargs):
        raise type(exc)(*exc.args)

    return boom


def test_close_runs_every_step_when_the_final_dispatch_fails(tmp_path, impl):
    before = resources()
    s = busy_store(tmp_path / "store", impl)
    s._opened.dispatcher.catch_up = _fail(DiskFullError(28, "no space for the ConsumeQueue"))
    with pytest.raises(DiskFullError, match="no space for the ConsumeQueue"):
        s.close()
    assert s.closed
    s.close()  # idempotent: nothing left to do, nothing raised
    with pytest.raises(StoreClosedError):
        s.put("T", b"x")
    # the queues may not be durable: the abort file stays, so the next open recovers
    assert (tmp_path / "store" / "abort").exists()
    del s
    gc.collect()
    assert settled(before) == before
    check_reopens_clean(tmp_path / "store", impl, expect_clean=False)
    assert settled(before) == before


class _Wrapped:
    def __init__(self, obj, **overrides):
        self.__dict__.update(overrides)
        self._obj = obj

    def __getattr__(self, name):
        return getattr(self._obj, name)


@pytest.mark.parametrize("step", ["core", "checkpoint", "queues", "segments"])
def test_close_releases_the_lock_whatever_step_fails(tmp_path, impl, step):
    s = busy_store(tmp_path / "store", impl)
    target = {
        "core": s._opened.core,
        "checkpoint": s._opened.checkpoint,
        "queues": s._opened.queues,
        "segments": s._opened.segments,
    }[step]
    name = "flush" if step == "checkpoint" else "close"
    original = getattr(target, name)
    calls = []

    def fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            original(*args, **kwargs)  # the work is done, then the step reports a failure
            raise OSError(5, f"{step} failed")
        return original(*args, **kwargs)

    if step == "core":  # a compiled class's method cannot be patched: wrap the core
        s._opened.core = _Wrapped(target, close=fails)  # (what the close closes)
    else:
        setattr(target, name, fails)
    with pytest.raises(OSError, match=f"{step} failed"):
        s.close()
    assert s.closed
    s.close()
    # a failed flush leaves the abort file (the next open recovers); unmapping is no flush
    durable = step == "segments"
    assert (tmp_path / "store" / "abort").exists() is not durable
    check_reopens_clean(tmp_path / "store", impl, expect_clean=durable)


@pytest.mark.parametrize("read_only", [False, True])
def test_a_dropped_store_is_closed_at_once_without_a_garbage_collection(tmp_path, impl, read_only):
    # no reference cycle through the store: dropping the last reference closes it (as a file)
    path = tmp_path / "store"
    busy_store(path, impl).close()
    before = resources()
    gc.disable()
    try:
        s = MessageStore(path, implementation=impl.name, read_only=read_only)
        assert s.query_by_key("T", "k1")[0].body == b"m1"
        if not read_only:
            s.put("T", b"late", delay_level=18)  # 2 h: never delivered into T during a test, however slow
            future = s.put_pipelined("T", b"piped")
            future.add_done_callback(lambda f: None)
            future.result()
            del future
        del s
        if not read_only:
            assert not (path / "abort").exists()
            open_store(path, impl).close()  # the lock was released
        assert settled(before, collect=False) == before
    finally:
        gc.enable()


@pytest.mark.parametrize("read_only", [False, True])
def test_a_closed_store_s_parts_are_freed_when_it_is_dropped_without_a_garbage_collection(
    tmp_path, impl, read_only
):
    # the parts an open made hold no reference cycle among them (nor back to what made them):
    # the last reference gone, they are freed, each map and file with them, not at some later
    # garbage collection
    import weakref

    path = tmp_path / "store"
    busy_store(path, impl).close()
    gc.collect()
    gc.disable()
    try:
        s = MessageStore(path, implementation=impl.name, read_only=read_only)
        assert s.query_by_key("T", "k1")[0].body == b"m1"
        names = ("commitlog", "queues", "index", "disk_index", "dispatcher", "batch", "checkpoint")
        opened = s._opened
        parts = {
            name: weakref.ref(getattr(opened, name)) for name in names if getattr(opened, name) is not None
        }
        del opened
        assert len(parts) == 6 + read_only  # (a read-only store has its disk index besides)
        s.close()
        del s
        assert [name for name, ref in parts.items() if ref() is not None] == []
    finally:
        gc.enable()
