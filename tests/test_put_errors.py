"""A put that did not store its message raises a PutError; one that stored it but could not
confirm the flush raises FlushTimeoutError carrying the result. Futures follow the same rule."""

import asyncio
import errno
import os
import threading

import pytest

from rocketstore import Message, MessageStore, PutStatus
from rocketstore.base._clock import now_ms
from rocketstore.errors import (
    CreateMappedFileFailedError,
    DiskFullError,
    FlushTimeoutError,
    PutError,
    PutRefusedDiskFullError,
    SegmentDiskFullError,
    SegmentError,
    ServiceNotAvailableError,
)
from rocketstore.files._flushwatch import FlushWatcher
from rocketstore.files.mapped_file import space_error
from rocketstore.log import _flusher_py

SEGMENT = 64 * 1024
TOPIC = "PutErrors"
#: A guard against hangs only (never reached when the code is right), not a timing assertion.
HANG_GUARD_S = 60


def _open(impl, path, **options):
    options.setdefault("commitlog_file_size", SEGMENT)
    return MessageStore(path, implementation=impl.name, **options)


def _files(path):
    """{relative path: bytes} of every file under ``path`` but the lock and abort markers."""
    out = {}
    for root, _dirs, names in os.walk(path):
        for name in names:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = f.read()
    return out


def _every_put(store):
    """Each put path once, as a callable that raises or returns (for futures: the future)."""
    return [
        lambda: store.put(TOPIC, b"x", queue_id=0),
        lambda: store.put(TOPIC, b"x", tags="TagA", keys="k"),
        lambda: store.put(Message(TOPIC, b"x")),
        lambda: store.put(TOPIC, b"x", durable=True),
        lambda: store.put_batch(TOPIC, [b"a", b"b"]),
        lambda: store.put_messages([Message(TOPIC, b"a"), Message(TOPIC, b"b", queue_id=1)]),
    ]


def _pipelined_puts(store):
    return [
        lambda: store.put_pipelined(TOPIC, b"x"),
        lambda: store.put_pipelined(Message(TOPIC, b"x")),
        lambda: store.put_batch(TOPIC, [b"a", b"b"], pipelined=True),
    ]


def test_refused_puts_raise_a_typed_put_error_and_write_nothing(impl, tmp_path):
    with _open(impl, tmp_path / "s") as store:
        store.create_topic(TOPIC, 2)
        store.put(TOPIC, b"before", queue_id=0)
        end, queue_offsets = store.max_offset, store.queue_offsets()
        store._opened.core.refuse_puts(DiskFullError(errno.ENOSPC, "the disk is 97% full (test)"))
        for put in _every_put(store):
            with pytest.raises(PutError) as info:
                put()
            err = info.value
            assert isinstance(err, ServiceNotAvailableError) and isinstance(err, PutRefusedDiskFullError)
            assert isinstance(err, DiskFullError) and isinstance(err, OSError)  # as before
            assert not isinstance(err, FlushTimeoutError)
            assert (
                err.status == PutStatus.SERVICE_NOT_AVAILABLE and str(err.status) == "SERVICE_NOT_AVAILABLE"
            )
            assert err.errno == errno.ENOSPC and "97% full" in str(err)
        for put in _pipelined_puts(store):
            future = put()
            assert isinstance(future, impl.store.PutFuture) and future.done()
            with pytest.raises(PutRefusedDiskFullError):
                future.result()
            with pytest.raises(PutRefusedDiskFullError):
                future.result(timeout=1)
            called = []
            future.add_done_callback(called.append)
            assert called == [future]
        assert store.max_offset == end and store.queue_offsets() == queue_offsets
        store._opened.core.refuse_puts(None)
        ok = store.put(TOPIC, b"after", queue_id=0)
        assert ok.ok and ok.commitlog_offset == end and ok.queue_offset == queue_offsets[(TOPIC, 0)]


def test_a_put_without_segment_space_raises_create_mapped_file_failed(impl, tmp_path):
    with _open(impl, tmp_path / "s") as store:
        store.create_topic(TOPIC, 2)
        store.put(TOPIC, b"x" * 100)
        real_roll = store._opened.segments.segment_at

        def no_space(start):
            raise space_error(errno.ENOSPC, "cannot create segment")

        store._opened.segments.segment_at = no_space
        with pytest.raises(CreateMappedFileFailedError) as info:
            for _ in range(SEGMENT // 900 + 2):
                store.put(TOPIC, b"y" * 900)
        err = info.value
        assert isinstance(err, PutError) and isinstance(err, SegmentError) and isinstance(err, OSError)
        assert isinstance(err, SegmentDiskFullError) and isinstance(err, DiskFullError)
        assert err.status == PutStatus.CREATE_MAPPED_FILE_FAILED and err.errno == errno.ENOSPC
        assert isinstance(err.__cause__, SegmentError)
        end = store.max_offset
        assert end % SEGMENT == 0  # the full segment ends in its BLANK
        for put in _every_put(store):
            with pytest.raises(SegmentDiskFullError):
                put()
        for put in _pipelined_puts(store):
            with pytest.raises(SegmentDiskFullError):
                put().result()
        assert store.max_offset == end

        def other_failure(start):
            raise SegmentError(errno.EACCES, "cannot create segment: Permission denied")

        store._opened.segments.segment_at = other_failure
        with pytest.raises(CreateMappedFileFailedError) as info:
            store.put(TOPIC, b"z")
        assert not isinstance(info.value, DiskFullError) and info.value.errno == errno.EACCES
        store._opened.segments.segment_at = real_roll
        assert store.put(TOPIC, b"z").commitlog_offset == SEGMENT


class _Gate:
    """A pure-twin data sync that blocks until opened, or fails with ``error``."""

    def __init__(self, error=None):
        self.open = threading.Event()
        self.error = error

    def __call__(self, fd, mm, lo, hi):
        if self.error is not None:
            raise self.error
        self.open.wait(HANG_GUARD_S)


def _pure_only(impl):
    if impl.name != "py":
        pytest.skip("the compiled flush thread's msync cannot be blocked or failed from a test")


def test_a_failed_flush_raises_flush_timeout_error_carrying_the_stored_result(impl, tmp_path, monkeypatch):
    _pure_only(impl)
    with _open(impl, tmp_path / "s") as store:
        real_sync = _flusher_py._data_sync
        monkeypatch.setattr(_flusher_py, "_data_sync", _Gate(OSError(errno.EIO, "Input/output error")))
        with pytest.raises(FlushTimeoutError) as info:
            store.put(TOPIC, b"durable?", durable=True)
        err = info.value
        assert not isinstance(err, PutError) and err.status == PutStatus.FLUSH_DISK_TIMEOUT
        r = err.result
        assert (
            r.status == PutStatus.FLUSH_DISK_TIMEOUT and r.status.stored and isinstance(r.error, SegmentError)
        )
        assert err.__cause__ is r.error and "flushing the CommitLog failed" in str(err)
        assert store.read(r.commitlog_offset).body == b"durable?"  # stored, not known durable
        assert store.get_by_msg_id(r.msg_id).body == b"durable?"
        with pytest.raises(FlushTimeoutError) as info:
            store.put_batch(TOPIC, [b"a", b"b"], durable=True)
        assert len(info.value.result) == 2 and info.value.result.status == PutStatus.FLUSH_DISK_TIMEOUT
        with pytest.raises(FlushTimeoutError) as info:
            store.put_messages([Message(TOPIC, b"a"), Message(TOPIC, b"b")], durable=True)
        assert [m.status for m in info.value.result] == [PutStatus.FLUSH_DISK_TIMEOUT] * 2
        future = store.put_pipelined(TOPIC, b"pipelined")
        with pytest.raises(FlushTimeoutError) as info:
            future.result()
        assert store.read(info.value.result.commitlog_offset).body == b"pipelined"
        monkeypatch.setattr(_flusher_py, "_data_sync", real_sync)  # the disk is back
        assert store.put(TOPIC, b"durable", durable=True).ok


def test_callbacks_and_await_fire_when_the_flush_times_out(impl, tmp_path, monkeypatch):
    _pure_only(impl)
    gate = _Gate()
    with _open(impl, tmp_path / "s", sync_flush_timeout_ms=50) as store:
        monkeypatch.setattr(_flusher_py, "_data_sync", gate)
        future = store.put_pipelined(TOPIC, b"slow")
        fired = threading.Event()
        future.add_done_callback(lambda f: fired.set())
        assert fired.wait(HANG_GUARD_S), "the done-callback never fired after the flush timed out"
        assert future.done()
        with pytest.raises(FlushTimeoutError):
            future.result()

        async def awaited():
            return await asyncio.wait_for(store.put_pipelined(TOPIC, b"slow too"), HANG_GUARD_S)

        with pytest.raises(FlushTimeoutError) as info:
            asyncio.run(awaited())
        assert store.read(info.value.result.commitlog_offset).body == b"slow too"
        gate.open.set()


def test_the_flush_watcher_fires_futures_past_their_deadline():
    """The watcher both twins share fires a callback at its deadline though nothing flushes."""

    class NeverFlushes:
        flushed_offset = 0

        def wait_flushed(self, target, timeout_ms):
            threading.Event().wait(timeout_ms / 1000)
            return 1

    class Future:
        target = 1 << 40
        deadline_ms = now_ms() + 20

    watcher = FlushWatcher(NeverFlushes())
    fired = threading.Event()
    try:
        watcher.add(Future(), lambda f: fired.set())
        assert fired.wait(HANG_GUARD_S)
    finally:
        watcher.close()


class _RecordingMap:
    """A segment map whose msyncs are recorded."""

    def __init__(self):
        self.flushed = []

    def flush(self, offset, size):
        self.flushed.append((offset, size))


def test_data_sync_msyncs_the_written_range_from_its_page(monkeypatch):
    """The pure twin syncs as the compiled flush thread does: an msync of the range, from the
    page it starts in; no descriptor is needed (a sealed segment's own is closed)."""
    monkeypatch.setattr(_flusher_py, "_FULL_SYNC", None)
    mm = _RecordingMap()
    _flusher_py._data_sync(-1, mm, 5000, 9000)
    _flusher_py._data_sync(None, mm, 8192, 8192)  # nothing written: nothing to sync
    assert mm.flushed == [(4096, 4904)]


def test_data_sync_uses_full_fsync_where_the_platform_has_it(monkeypatch):
    done = []

    class MacFcntl:
        F_FULLFSYNC = 51

        @staticmethod
        def fcntl(fd, cmd):
            done.append(("fcntl", fd, cmd))

    monkeypatch.setattr(_flusher_py, "fcntl", MacFcntl())
    monkeypatch.setattr(_flusher_py, "_FULL_SYNC", 51)
    mm = _RecordingMap()
    _flusher_py._data_sync(7, mm, 0, 10)
    assert mm.flushed == [(0, 10)] and done == [("fcntl", 7, 51)]


def test_an_exception_in_the_flush_thread_fails_durable_puts_and_close_returns(impl, tmp_path, monkeypatch):
    _pure_only(impl)
    store = _open(impl, tmp_path / "s", sync_flush_timeout_ms=60_000)
    monkeypatch.setattr(_flusher_py, "_data_sync", _Gate(RuntimeError("unexpected")))
    with pytest.raises(FlushTimeoutError) as info:
        store.put(TOPIC, b"durable", durable=True)
    assert store.read(info.value.result.commitlog_offset).body == b"durable"
    closer = threading.Thread(target=store.close)
    closer.start()
    closer.join(HANG_GUARD_S)
    assert not closer.is_alive(), "close() hung"


def test_a_dead_flush_thread_fails_durable_puts_and_close_returns(impl, tmp_path):
    _pure_only(impl)
    store = _open(impl, tmp_path / "s", sync_flush_timeout_ms=60_000)
    flusher = store._opened.core._flusher

    def broken_round():
        raise RuntimeError("the flush thread's own bug")

    flusher._round = broken_round
    hook, threading.excepthook = threading.excepthook, lambda args: None  # expected: quiet
    try:
        with pytest.raises(FlushTimeoutError) as info:
            store.put(TOPIC, b"durable", durable=True)
        assert isinstance(info.value.__cause__, SegmentError)
        with pytest.raises(FlushTimeoutError):
            store.put_pipelined(TOPIC, b"pipelined").result()
        closer = threading.Thread(target=store.close)
        closer.start()
        closer.join(HANG_GUARD_S)
        assert not closer.is_alive(), "close() hung"
    finally:
        threading.excepthook = hook


@pytest.mark.parametrize(
    "change, message",
    [
        ({"store_host": b"\x7f\x00\x00"}, "hosts must be 4 (IPv4) or 16 (IPv6) address bytes"),
        ({"born_host": bytes(17)}, "hosts must be 4 (IPv4) or 16 (IPv6) address bytes"),
        ({"uniq_prefix": bytes(23)}, "uniq_prefix must be 10 or 22 bytes"),
        ({"file_size": 4095}, "file_size must be at least 4096 bytes"),
    ],
)
def test_an_append_core_refuses_hosts_prefixes_and_segments_it_cannot_hold(impl, change, message):
    args = dict(
        file_size=1 << 16,
        start_offset=0,
        store_host=bytes(4),
        store_port=10911,
        born_host=bytes(16),
        born_port=1,
        uniq_prefix=bytes(22),
        max_message_size=1 << 12,
        topic_lookup=lambda topic: 4,
        roll=None,
    )
    impl.store.CommitLogCore(**args).close()  # the defaults are accepted
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        impl.store.CommitLogCore(**{**args, **change})
