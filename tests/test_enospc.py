"""A full disk (ENOSPC) or a failed file creation: puts fail with a clear, typed error and write
nothing, everything acknowledged before stays readable, a reopen recovers cleanly, and writes
resume by themselves once space returns.

Failures are injected in-process (the one place a new segment gets its space, the allocation
of queue and index files, the pure twin's fdatasync); a real full file system is a small tmpfs,
used when this machine lets the tests mount one (root), in a child process so that a SIGBUS
would fail the test instead of killing the run.
"""

import errno
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest

import rocketstore
import rocketstore.services.retention
from rocketstore import Message, MessageStore, PutStatus
from rocketstore.errors import (
    CreateMappedFileFailedError,
    DiskFullError,
    FlushTimeoutError,
    PutError,
    SegmentDiskFullError,
    SegmentError,
)
from rocketstore.files import mapped_file
from rocketstore.log import _flusher_py
from rocketstore.queues import consumequeue, indexservice
from rocketstore.queues.indexservice import IndexService

SEGMENT = 64 * 1024
BODY = 1000
TOPIC = "TopicFull"
SRC = str(pathlib.Path(rocketstore.__file__).resolve().parents[1])


def open_store(path, impl, **options):
    options.setdefault("commitlog_file_size", SEGMENT)
    options.setdefault("consume_queue_units", 16)
    options.setdefault("index_slots", 16)
    options.setdefault("index_count", 64)
    options.setdefault("clean_resource_interval_ms", 0)
    return MessageStore(path, implementation=impl.name, store_host="10.0.0.7", **options)


def body(i):
    return b"%06d" % i + bytes([i % 251]) * (BODY - 6)


class Switch:
    """A failure that is on while ``on`` is True."""

    def __init__(self):
        self.on = False
        self.hits = 0

    def check(self):
        if self.on:
            self.hits += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.fixture
def no_segment_space(monkeypatch):
    """While ``.on``, creating any new store file fails with ENOSPC (segments and queue files)."""
    switch = Switch()
    real = mapped_file._size_new_file

    def size_new_file(fd, size, preallocate):
        switch.check()
        real(fd, size, preallocate)

    monkeypatch.setattr(mapped_file, "_size_new_file", size_new_file)
    return switch


def check_readable(store, acked):
    """Every acknowledged put is readable with its body; nothing else is in the CommitLog."""
    for i, r in acked:
        assert store.read(r.commitlog_offset).body == body(i)
    assert [m.commitlog_offset for m in store.iter_messages()] == [r.commitlog_offset for _, r in acked]


def check_queue(store, acked, queue_id=0):
    """The queue holds the acknowledged puts of ``queue_id`` in order, contiguous from 0."""
    mine = [r for _, r in acked if r.queue_id == queue_id]
    got, offset = [], 0
    while True:
        res = store.get_message("g", TOPIC, queue_id, offset, max_msgs=32)
        if not res.messages:
            break
        got += res.messages
        offset = res.next_begin_offset
    assert [m.commitlog_offset for m in got] == [r.commitlog_offset for r in mine]
    assert [m.queue_offset for m in got] == list(range(len(mine)))


def test_failed_segment_creation_fails_puts_with_disk_full_and_writes_resume(
    tmp_path, impl, no_segment_space
):
    path = tmp_path / "s"
    acked = []
    with open_store(path, impl) as store:
        for i in range(10):
            acked.append((i, store.put(TOPIC, body(i), queue_id=0)))
        no_segment_space.on = True
        failed = None
        for i in range(10, 400):
            try:
                r = store.put(TOPIC, body(i), queue_id=0)
            except PutError as exc:
                failed = exc
                break
            acked.append((i, r))
        assert failed is not None, "the store never needed a new segment"
        assert failed.status == PutStatus.CREATE_MAPPED_FILE_FAILED
        assert isinstance(failed, DiskFullError) and isinstance(failed, SegmentError)
        assert failed.errno == errno.ENOSPC and "No space left" in str(failed)
        assert store.max_offset % SEGMENT == 0  # the full segment ends in its BLANK

        # still full: every kind of put fails the same way, writing nothing
        for put in (
            lambda: store.put(TOPIC, body(0), tags="T", keys="k"),
            lambda: store.put_batch(TOPIC, [b"a", b"b", b"c"], queue_id=0),
            lambda: store.put_messages([Message(TOPIC, b"a", queue_id=0), Message(TOPIC, b"b", queue_id=1)]),
        ):
            with pytest.raises(SegmentDiskFullError):
                put()
        check_readable(store, acked)
        end = store.max_offset
        mapped_end = store._opened.segments.files[-1].end_offset
        assert all(int(n) < mapped_end for n in os.listdir(path / "commitlog"))  # no half-made file

        # space is back: the next put starts the next segment, queue offsets continue
        no_segment_space.on = False
        i = len(acked)
        r = store.put(TOPIC, body(i), queue_id=0)
        assert r.ok and r.commitlog_offset == end and r.queue_offset == len(acked)
        acked.append((i, r))
        check_readable(store, acked)
        check_queue(store, acked)
    with open_store(path, impl) as store:  # the reopen recovers everything acknowledged
        check_readable(store, acked)
        check_queue(store, acked)
        i = len(acked)
        acked.append((i, store.put(TOPIC, body(i), queue_id=0)))
        check_readable(store, acked)


@pytest.mark.parametrize("how", ["put_batch", "put_messages"])
def test_a_batch_spanning_segments_is_stored_whole_or_not_at_all(tmp_path, impl, no_segment_space, how):
    path = tmp_path / "s"
    acked = []
    with open_store(path, impl) as store:
        for i in range(30):  # half of segment 0
            acked.append((i, store.put(TOPIC, body(i), queue_id=0)))
        end, offsets = store.max_offset, store.queue_offsets()
        no_segment_space.on = True
        # ~3.5 segments: even a segment prepared ahead in the background cannot hold it all
        ids = range(len(acked), len(acked) + 220)

        def put_all():
            if how == "put_batch":
                res = store.put_batch(TOPIC, [body(i) for i in ids], queue_id=0)
                return [res.status] * len(res), res.error, [res[k] for k in range(len(res))]
            res = store.put_messages([Message(TOPIC, body(i), queue_id=0) for i in ids])
            return [r.status for r in res], res[0].error, res

        with pytest.raises(SegmentDiskFullError):
            put_all()
        assert store.max_offset == end and store.queue_offsets() == offsets  # not a byte written
        check_readable(store, acked)

        no_segment_space.on = False
        statuses, error, results = put_all()
        assert set(statuses) == {PutStatus.PUT_OK} and error is None
        acked += list(zip(ids, results))
        assert [r.queue_offset for _, r in acked] == list(range(len(acked)))
        assert store._opened.segments.files[-1].file_from_offset >= 3 * SEGMENT
        check_readable(store, acked)
    with open_store(path, impl) as store:
        check_readable(store, acked)
        check_queue(store, acked)


def test_a_failed_batch_leaves_segments_it_created_usable_by_later_puts(tmp_path, impl, no_segment_space):
    path = tmp_path / "s"
    # no dispatch thread: a queue file it created in the background could take the one file's room
    with open_store(path, impl, prefault_bytes=0, dispatch_interval_ms=0) as store:
        acked = [(i, store.put(TOPIC, body(i), queue_id=0)) for i in range(30)]
        real = mapped_file._size_new_file
        made = []

        def one_more(fd, size, preallocate):  # room for exactly one more new file
            if made:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            made.append(fd)
            real(fd, size, preallocate)

        mapped_file._size_new_file = one_more
        try:
            with pytest.raises(CreateMappedFileFailedError):
                store.put_batch(TOPIC, [body(i) for i in range(30, 250)], queue_id=0)
            for i in range(30, 120):  # single puts fill segment 0 and roll on
                try:
                    r = store.put(TOPIC, body(i), queue_id=0)
                except CreateMappedFileFailedError:
                    break
                acked.append((i, r))
        finally:
            mapped_file._size_new_file = real
        assert acked[-1][1].commitlog_offset >= SEGMENT  # a segment created for the batch took them
        check_readable(store, acked)
    with open_store(path, impl) as store:
        check_readable(store, acked)
        check_queue(store, acked)


def test_queue_and_index_files_that_cannot_grow_stop_dispatch_with_disk_full_until_space_returns(
    tmp_path, impl, monkeypatch
):
    switch = Switch()

    def failing(real):
        def allocate(fd, offset, length):
            if switch.on:
                switch.hits += 1
                raise DiskFullError(errno.ENOSPC, "cannot allocate file space: No space left on device")
            real(fd, offset, length)

        return allocate

    monkeypatch.setattr(consumequeue, "allocate_range", failing(consumequeue.allocate_range))
    monkeypatch.setattr(indexservice, "allocate_range", failing(indexservice.allocate_range))
    path = tmp_path / "s"
    acked = []
    with open_store(path, impl, dispatch_interval_ms=0) as store:
        for i in range(5):
            acked.append((i, store.put(TOPIC, body(i), queue_id=0, keys=f"key{i}")))
        store.queues()
        switch.on = True
        for i in range(5, 120):  # the CommitLog still takes puts
            r = store.put(TOPIC, body(i), queue_id=0, keys=f"key{i}")
            assert r.ok
            acked.append((i, r))
        with pytest.raises(DiskFullError):
            store.queues()  # dispatch needs new queue and index file space
        with pytest.raises(DiskFullError):
            store.get_message("g", TOPIC, 0, 0)
        assert switch.hits
        check_readable(store, acked)

        switch.on = False  # dispatch resumes where it stopped: nothing lost or doubled
        check_queue(store, acked)
        for i in (3, 60, 119):
            assert [m.commitlog_offset for m in store.query_by_key(TOPIC, f"key{i}")] == [
                acked[i][1].commitlog_offset
            ]
    with open_store(path, impl) as store:
        check_queue(store, acked)


def test_a_new_index_file_allocates_its_header_and_slot_table_before_anything_is_written(tmp_path, impl):
    slots, items = 4096, 64
    service = IndexService(tmp_path, implementation=impl.name, slot_count=slots, index_count=items)
    service.load()
    try:
        service.build_index("T", "k1", 100, 1_700_000_000_000)
        f = service.files[0]
        probe = os.open(tmp_path / "probe", os.O_RDWR | os.O_CREAT)
        try:
            os.posix_fallocate(probe, 0, 4096)
        except (OSError, AttributeError):  # macOS has no posix_fallocate
            pytest.skip("this file system does not allocate blocks on request")
        finally:
            os.close(probe)
        allocated = os.stat(f.path).st_blocks * 512
        head = 40 + 4 * slots  # 16 KiB of slots: sparse unless allocated
        assert allocated >= head
    finally:
        service.close()


def test_a_failed_index_file_creation_leaves_no_file(tmp_path, impl, monkeypatch):
    service = IndexService(tmp_path, implementation=impl.name, slot_count=16, index_count=4)
    service.load()

    def refuse(fd, offset, length):
        raise DiskFullError(errno.ENOSPC, "cannot allocate file space: No space left on device")

    real = indexservice.allocate_range
    monkeypatch.setattr(indexservice, "allocate_range", refuse)
    with pytest.raises(DiskFullError):
        service.build_index("T", "k1", 100, 1_700_000_000_000)
    assert service.files == [] and os.listdir(tmp_path / "index") == []
    monkeypatch.setattr(indexservice, "allocate_range", real)
    service.build_index("T", "k1", 100, 1_700_000_000_000)
    assert service.query("T", "k1")[0] == [100]
    service.close()


def _failing_sync(fd, mm, lo, hi):
    """The pure twin's data sync (msync, and F_FULLFSYNC on macOS), failing with ENOSPC."""
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_failed_flush_fails_durable_puts_with_the_error_and_resumes(tmp_path, impl, monkeypatch):
    if impl.name != "py":
        pytest.skip("an msync failure cannot be injected into the compiled flush thread")
    with open_store(tmp_path / "s", impl) as store:
        real_sync = _flusher_py._data_sync
        monkeypatch.setattr(_flusher_py, "_data_sync", _failing_sync)
        with pytest.raises(FlushTimeoutError) as info:
            store.put(TOPIC, b"durable?", durable=True)
        r = info.value.result
        assert r.status == PutStatus.FLUSH_DISK_TIMEOUT and not r.ok and r.status.stored
        assert isinstance(r.error, DiskFullError) and "flushing the CommitLog failed" in str(r.error)
        assert store.read(r.commitlog_offset).body == b"durable?"  # stored, not known durable
        future = store.put_pipelined(TOPIC, b"pipelined")
        with pytest.raises(FlushTimeoutError) as info:
            future.result()
        got = info.value.result
        assert got.status == PutStatus.FLUSH_DISK_TIMEOUT and isinstance(got.error, DiskFullError)
        with pytest.raises(FlushTimeoutError) as info:
            store.put_batch(TOPIC, [b"a", b"b"], durable=True)
        batch = info.value.result
        assert batch.status == PutStatus.FLUSH_DISK_TIMEOUT and isinstance(batch.error, DiskFullError)

        monkeypatch.setattr(_flusher_py, "_data_sync", real_sync)  # space is back: no stale error
        ok = store.put(TOPIC, b"durable", durable=True)
        assert ok.status == PutStatus.PUT_OK and ok.error is None
        assert store.flushed_offset >= ok.commitlog_offset + ok.size > r.commitlog_offset


# ---- a real full file system ----

CHILD = textwrap.dedent(r"""
    import errno, json, os, sys
    from rocketstore import Message, MessageStore, PutStatus
    from rocketstore.errors import DiskFullError, PutError

    impl, root = sys.argv[1], sys.argv[2]
    path = os.path.join(root, "store")
    ballast = os.path.join(root, "ballast")
    options = dict(implementation=impl, store_host="10.0.0.7", commitlog_file_size=64 * 1024,
                   consume_queue_units=64, index_slots=32, index_count=128,
                   clean_resource_interval_ms=0, prefault_bytes=64 * 1024)
    TOPIC = "TopicFull"

    def body(i):
        return b"%06d" % i + bytes([i % 251]) * 994

    store = MessageStore(path, **options)
    store.create_topic(TOPIC, 2)
    with open(ballast, "wb") as f:          # room to give back later
        f.write(b"\xff" * (384 * 1024))
    acked, failures, i = [], {}, 0
    while sum(failures.values()) < 40 and i < 4000:
        try:
            r = store.put(TOPIC, body(i), keys="key%d" % i, durable=(i % 3 == 0))
            acked.append((i, r.commitlog_offset))
        except PutError as exc:
            assert exc.status == PutStatus.CREATE_MAPPED_FILE_FAILED, exc.status
            assert isinstance(exc, DiskFullError), repr(exc)
            failures[exc.status.name] = failures.get(exc.status.name, 0) + 1
        i += 1
    assert failures, "the disk never filled"
    for put in (lambda: store.put_batch(TOPIC, [body(k) for k in range(200)]),
                lambda: store.put_messages([Message(TOPIC, body(k)) for k in range(200)])):
        try:
            put()
            raise AssertionError("a batch was stored on a full disk")
        except PutError as exc:
            assert exc.status == PutStatus.CREATE_MAPPED_FILE_FAILED and isinstance(exc, DiskFullError)
    for k, off in acked:
        assert store.read(off).body == body(k)
    try:
        store.queues()                      # dispatch may or may not find room
    except DiskFullError:
        pass
    full_at = len(acked)

    os.unlink(ballast)                      # space returns: writes resume by themselves
    for k in range(i, i + 100):
        r = store.put(TOPIC, body(k), keys="key%d" % k)
        assert r.ok, (r.status, r.error)
        acked.append((k, r.commitlog_offset))
    store.queues()
    for k, off in acked:
        assert store.read(off).body == body(k)
    store.close()

    store = MessageStore(path, **options)   # the reopen recovers cleanly
    got = [(int(bytes(m.body[:6])), m.commitlog_offset) for m in store.iter_messages()]
    assert got == acked, (len(got), len(acked))
    units = []
    for q in (0, 1):
        offset = 0
        while True:
            res = store.get_message("g", TOPIC, q, offset, max_msgs=32)
            if not res.messages:
                break
            assert [m.queue_offset for m in res.messages] == list(range(offset, offset + len(res.messages)))
            units += [m.commitlog_offset for m in res.messages]
            offset = res.next_begin_offset
    assert sorted(units) == [off for _, off in acked]
    k, off = acked[full_at - 1]
    assert [m.commitlog_offset for m in store.query_by_key(TOPIC, "key%d" % k)] == [off]
    store.close()
    print(json.dumps({"acked": len(acked), "full_at": full_at, "failures": failures}))
""")


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 2 MiB tmpfs mounted under tmp_path (skips when mounting is not allowed here)."""
    mount_point = tmp_path / f"tmpfs-{uuid.uuid4().hex[:8]}"
    mount_point.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)
        mount_point.rmdir()


def test_a_real_full_tmpfs_fails_puts_cleanly_and_writes_resume_when_space_returns(impl, small_tmpfs):
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, impl.name, str(small_tmpfs)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, (
        f"child {'killed by signal ' + str(-proc.returncode) if proc.returncode < 0 else 'failed'}"
        f"\nstdout: {proc.stdout}\nstderr: {proc.stderr[-4000:]}"
    )
    assert '"failures"' in proc.stdout


@pytest.fixture
def config_files_full(monkeypatch):
    """Call it to make writes to the config files' ``.tmp`` copies fail with ENOSPC (other
    writes go through); ``.undo()`` gives the space back."""
    real_write = os.write

    def write(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".tmp"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    class Full:
        def __call__(self):
            monkeypatch.setattr(os, "write", write)

        def undo(self):
            monkeypatch.undo()

    return Full()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_config_files_that_cannot_be_written_raise_disk_full_keep_the_old_file_and_close_cleanly(
    tmp_path, impl, config_files_full
):
    path = tmp_path / "s"
    store = open_store(path, impl)
    before = store.put("Old", b"kept", durable=True)
    store.commit_offset("g", "Old", before.queue_id, 1)
    with open(path / "config" / "topics.json", "rb") as f:
        topics_before = f.read()
    config_files_full()
    with pytest.raises(DiskFullError, match="writing topics.json failed, the file on disk is unchanged"):
        store.create_topic("New", 4)
    with pytest.raises(DiskFullError, match="topics.json"):
        store.put("Brand", b"never stored")  # a new topic must be recorded first
    assert (path / "config" / "topics.json").read_bytes() == topics_before
    assert not [n for n in os.listdir(path / "config") if n.endswith(".tmp")]
    with pytest.raises(DiskFullError, match="consumerOffset.json|topics.json"):
        store.close()  # says so, but closes all the same
    assert not (path / "abort").exists()
    config_files_full.undo()
    with open_store(path, impl) as store:  # not locked: the close finished
        assert store.last_shutdown_clean
        assert store.get_by_queue_offset("Old", before.queue_id, 0).body == b"kept"
        assert "Brand" not in store.topics and not store.queues().get(("Brand", 0))
        store.create_topic("New", 4)  # space is back: writes resume
    assert b'"New"' in (path / "config" / "topics.json").read_bytes()


# ---- background threads on a full disk: one error with its cause, a count, a recovery ----


class FlakyTask:
    """A dispatcher (``catch_up``) or checkpoint (``__call__``) that fails ``failures`` times
    with DiskFullError, then succeeds; ``recovered`` is set at the first success after that."""

    def __init__(self, failures):
        self.left = failures
        self.recovered = threading.Event()

    def try_catch_up(self):
        if self.left:
            self.left -= 1
            raise DiskFullError(errno.ENOSPC, "cannot allocate file space: No space left on device")
        self.recovered.set()
        return True

    def __call__(self):
        self.try_catch_up()


def test_a_failing_background_dispatch_logs_one_error_then_its_recovery(caplog):
    from rocketstore.queues.dispatch import DispatchThread

    dispatcher, checkpoint = FlakyTask(12), FlakyTask(7)
    with caplog.at_level("INFO", logger="rocketstore.queues.dispatch"):
        thread = DispatchThread(dispatcher, 1, checkpoint=checkpoint, checkpoint_interval_ms=1)
        try:
            assert dispatcher.recovered.wait(60) and checkpoint.recovered.wait(60)
        finally:
            thread.stop()
    records = [r for r in caplog.records if r.name == "rocketstore.queues.dispatch"]
    errors = [r for r in records if r.levelname == "ERROR"]
    assert len(errors) == 2, [r.getMessage() for r in errors]  # dispatch once, checkpoint once
    assert all("No space left on device" in r.getMessage() for r in errors)
    recovered = [r.getMessage() for r in records if r.levelname == "INFO"]
    assert len(recovered) == 2
    assert any("dispatch recovered after 12 failures" in m for m in recovered)
    assert any("checkpoint recovered after 7 failures" in m for m in recovered)


def test_a_store_whose_queue_files_cannot_grow_logs_dispatch_failure_once_and_recovers(
    tmp_path, impl, monkeypatch, caplog
):
    switch = Switch()
    real = consumequeue.allocate_range

    def allocate(fd, offset, length):
        if switch.on:
            switch.hits += 1
            raise DiskFullError(errno.ENOSPC, "cannot allocate file space: No space left on device")
        real(fd, offset, length)

    monkeypatch.setattr(consumequeue, "allocate_range", allocate)
    acked = []
    with (
        caplog.at_level("INFO", logger="rocketstore.queues.dispatch"),
        open_store(tmp_path / "s", impl, dispatch_interval_ms=1) as store,
    ):
        switch.on = True
        for i in range(60):  # 16 units a queue file: needs new queue files
            acked.append((i, store.put(TOPIC, body(i), queue_id=0)))
        deadline = time.monotonic() + 60
        while switch.hits < 5 and time.monotonic() < deadline:
            time.sleep(0.01)  # the dispatch thread keeps retrying
        assert switch.hits >= 5
        switch.on = False  # space returns: the thread catches up by itself

        def recovered():
            return [r for r in caplog.records if "dispatch recovered after" in r.getMessage()]

        while not recovered() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert recovered() and store._opened.dispatcher.offset == store.max_offset
        check_queue(store, acked)
    records = [r for r in caplog.records if r.name == "rocketstore.queues.dispatch"]
    assert len([r for r in records if r.levelname == "ERROR"]) == 1
    assert len([r for r in records if "recovered after" in r.getMessage()]) == 1


def put_is_refused_with_disk_full(store):
    """A put on a full disk stores nothing and says so: a failed result carrying a DiskFullError,
    or the DiskFullError raised."""
    end = store.max_offset
    try:
        r = store.put(TOPIC, body(0), queue_id=0)
    except DiskFullError:
        pass
    else:
        assert not r.ok and isinstance(r.error, DiskFullError), (r.status, r.error)
    assert store.max_offset == end


def test_a_real_disk_filled_by_another_file_keeps_young_messages_and_shows_in_stats(impl, small_tmpfs):
    # What filled the disk is not the store's: by default retention deletes nothing younger than
    # file_reserved_time (RocketMQ's broker would, above 85 %); puts are refused, stats() says so.
    path, ballast = small_tmpfs / "store", small_tmpfs / "ballast"
    acked = []
    with open_store(path, impl) as store:  # default retention options; no background pass
        for i in range(300):
            acked.append((i, store.put(TOPIC, body(i), queue_id=0, keys=f"key{i}")))
        store.queues()
        segments = [mf.file_from_offset for mf in store._opened.segments.files]
        assert len(segments) >= 5
        st = os.statvfs(small_tmpfs)
        with open(ballast, "wb") as f:  # fill the file system to about 96 %
            f.write(b"\xff" * (st.f_bavail * st.f_frsize - st.f_blocks * st.f_frsize // 25))
        before = rocketstore.services.retention.disk_usage(str(path))
        stats = store.stats()
        after = rocketstore.services.retention.disk_usage(str(path))  # the store may allocate meanwhile
        assert stats["disk_full"] is True and before - 0.01 <= stats["disk_usage"] <= after + 0.01
        assert before > 0.9
        assert store.clean()["commitlog"] == []  # nothing is expired: nothing goes
        put_is_refused_with_disk_full(store)
        assert store.stats()["refused_puts"] >= 1
        assert [mf.file_from_offset for mf in store._opened.segments.files] == segments

        os.unlink(ballast)  # space returns
        assert store.stats()["disk_full"] is False
        r = store.put(TOPIC, body(300), queue_id=0, keys="key300")
        assert r.ok
        acked.append((300, r))
    with open_store(path, impl) as store:
        check_readable(store, acked)
        check_queue(store, acked)


def test_failure_log_logs_the_first_failure_and_each_new_cause_then_counts(caplog):
    import logging

    from rocketstore.base._failurelog import FailureLog

    log = logging.getLogger("rocketstore.test_failurelog")
    quiet = FailureLog(log, "task")  # summaries at most once a minute
    chatty = FailureLog(log, "other", summary_every=0)  # a summary at every failure
    full = DiskFullError(errno.ENOSPC, "No space left on device")
    with caplog.at_level("INFO", logger="rocketstore.test_failurelog"):
        for _ in range(50):
            quiet.failed(full)
        quiet.failed(PermissionError("denied"))  # another cause: logged again
        quiet.succeeded()
        quiet.succeeded()  # nothing to recover from
        chatty.failed(full)
        chatty.failed(full)
    got = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in got] == ["ERROR", "ERROR", "INFO", "ERROR", "WARNING"]
    assert got[0][1].startswith("task failed: [Errno 28] No space left on device (retried")
    assert got[1][1].startswith("task failed: denied")
    assert got[2][1] == "task recovered after 51 failures"
    assert got[4][1].startswith("other still failing after 2 attempts")
    # an environment error is one line (its message says it all); a defect keeps its traceback
    assert caplog.records[0].exc_info is None


def _fill_until_full(store, topic):
    """Put until a put finds no room (the segments made ahead of the writer used up)."""
    for _ in range(10_000):
        try:
            store.put(topic, b"f" * 1000, queue_id=0)
        except PutError:
            return
    raise AssertionError("the store never needed a new segment")


def test_pop_on_a_full_disk_raises_and_hands_out_or_acknowledges_nothing(tmp_path, impl, no_segment_space):
    """A receive whose checkpoint, or an ack whose record, finds no room raises a typed error
    and changes nothing: no message handed out, none acknowledged; both work once there is
    room again, and a reopen replays the revive log to the same state."""
    path = tmp_path / "store"
    store = open_store(path, impl, pop_snapshot_interval_ms=0)
    try:
        store.create_topic(TOPIC, 1)
        store.put_batch(TOPIC, [b"m%d" % i for i in range(6)], queue_id=0)
        first = store.receive("g", TOPIC, 2, 60_000)  # the lane and the revive topic exist
        assert len(first) == 2
        store.put("Filler", b"f", queue_id=0)
        store.queues()  # (the queue files exist: only the CommitLog needs room from here on)
        no_segment_space.on = True
        _fill_until_full(store, "Filler")
        with pytest.raises(SegmentDiskFullError):  # its checkpoint finds no room
            store.receive("g", TOPIC, 1, 60_000)
        with pytest.raises(SegmentDiskFullError):  # its record finds no room
            store.ack(first[0].handle)
        assert store.pop_status("g", TOPIC)[0]["in_flight"] == 2  # nothing handed out or acknowledged
        handed = list(first)
        no_segment_space.on = False
        for m in handed:
            store.ack(m.handle)  # True, or False for those acknowledged before the disk filled
        rest = store.receive("g", TOPIC, 6, 60_000)
        assert sorted(bytes(m.message.body) for m in handed + list(rest)) == [b"m%d" % i for i in range(6)]
        assert all(store.ack(m.handle) for m in rest)
        assert store.pop_status("g", TOPIC)[0]["in_flight"] == 0
    finally:
        store.close()
    with open_store(path, impl) as again:  # the revive log replays to the same state
        assert again.pop_status("g", TOPIC)[0]["in_flight"] == 0
        assert again.committed_offset("g", TOPIC, 0) == 6
        assert len(again.receive("g", TOPIC, 6, 60_000)) == 0


def test_timer_delivery_on_a_full_disk_raises_then_delivers_each_message_once(
    tmp_path, impl, no_segment_space
):
    path = tmp_path / "store"
    now = [int(time.time() * 1000)]
    options = dict(
        clock=lambda: now[0],
        timer_interval_ms=0,
        schedule_interval_ms=0,
        consume_queue_units=4096,  # (only the CommitLog runs out of room here)
        index_count=100_000,
        index_slots=1_000,
    )
    store = open_store(path, impl, **options)
    try:
        store.create_topic(TOPIC, 1)
        for i in range(20):
            store.put(TOPIC, b"t%d" % i, deliver_at_ms=now[0] + 1_000 + i)
        store.put("Filler", b"f", queue_id=0)
        store.queues()
        no_segment_space.on = True
        _fill_until_full(store, "Filler")
        now[0] += 5_000
        with pytest.raises(SegmentDiskFullError):  # the copies find no room
            store.deliver_timers()
        assert store.get_message("g", TOPIC, 0, 0, 100).messages == []
        no_segment_space.on = False
        store.deliver_timers()  # (the interrupted pass is rolled forward, then the rest)
        bodies = [bytes(m.body) for m in store.get_message("g", TOPIC, 0, 0, 100).messages]
        assert sorted(bodies) == sorted(b"t%d" % i for i in range(20))
    finally:
        store.close()
    with open_store(path, impl, **options) as again:  # each delivered once, also after a reopen
        assert again.deliver_timers() == 0
        assert len(again.get_message("g", TOPIC, 0, 0, 100).messages) == 20
        assert again.timer_stats()["pending"] == 0
