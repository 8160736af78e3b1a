"""A full disk never raises SIGBUS: nothing is stored through a map into a hole the file system
has no block for (allocated first, or written through the file), and past what a writer wrote
nothing is read through a map where a hole lies (tmpfs needs a page even for that read). Every
error of close() and of a reopen is typed, close() on a full disk leaves a store that opens
read-only at once and writable once space returns.

A real full file system here is a small tmpfs mounted in a user and mount namespace of its own
(``unshare -rm``: no root needed), in a child process, so that a SIGBUS fails the test instead of
killing the run; where that is not allowed the test is skipped and the in-process tests, which
inject ENOSPC, still run.
"""

import errno
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

import rocketstore
from rocketstore import MessageStore
from rocketstore.errors import DiskFullError, RocketStoreError, SegmentError
from rocketstore.files import mapped_file
from rocketstore.files.checkpoint import Checkpoint

SRC = str(pathlib.Path(rocketstore.__file__).resolve().parents[1])
TOPIC = "TopicFull"


def _can_unshare() -> str:
    """Why a tmpfs cannot be mounted in a namespace of our own here ('' when it can)."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "no unshare or mount command"
    proc = subprocess.run(
        [
            "unshare",
            "-rm",
            "sh",
            "-c",
            "d=$(mktemp -d) && mount -t tmpfs -o size=1m tmpfs $d && umount $d; r=$?; rmdir $d; exit $r",
        ],
        capture_output=True,
        text=True,
    )
    return "" if proc.returncode == 0 else f"cannot mount a tmpfs in a user namespace: {proc.stderr.strip()}"


def run_on_tmpfs(tmp_path, size: str, scripts: list[str], *args: str, timeout: int = 300):
    """Run each of ``scripts`` (python source) in turn, in a child process whose ``sys.argv[1]``
    is one tmpfs of ``size`` (then ``args``), mounted in a user and mount namespace of its own
    (skips when that is not allowed); the first that fails stops the run."""
    why = _can_unshare()
    if why:
        pytest.skip(why)
    mount_point = tmp_path / "tmpfs"
    mount_point.mkdir()
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONFAULTHANDLER"] = "1"
    command = 'mount -t tmpfs -o size="$1" tmpfs "$2" || exit 99; python="$3"; shift 3'
    for k, script in enumerate(scripts):
        env[f"ROCKETSTORE_TEST_SCRIPT{k}"] = script
        command += f' && "$python" -c "$ROCKETSTORE_TEST_SCRIPT{k}" "$MOUNT" "$@"'
    env["MOUNT"] = str(mount_point)
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", command, "sh", size, str(mount_point), sys.executable, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


FILL_CLOSE_REOPEN = textwrap.dedent(r"""
    import json, os, sys, time
    from rocketstore import MessageStore
    from rocketstore.errors import DiskFullError, PutError, RocketStoreError

    root, impl, crash = sys.argv[1], sys.argv[2], sys.argv[3] == "crash"
    path, ballast = os.path.join(root, "store"), os.path.join(root, "ballast")
    # files that are sparse where nobody wrote: ConsumeQueue files of 20,000 units (400 KB),
    # index files, the compiled twin's segments
    options = dict(implementation=impl, store_host="10.0.0.7", commitlog_file_size=1 << 20,
                   consume_queue_units=20_000, index_slots=4096, index_count=16_384,
                   clean_resource_interval_ms=0, dispatch_interval_ms=1,
                   disk_space_warning_level_ratio=100, disk_space_clean_forcibly_ratio=100)

    def body(i):
        return b"%08d" % i + bytes([i % 251]) * 592

    with open(ballast, "wb") as f:              # room to give back later
        f.write(b"\xff" * (3 << 20))
    with open(os.path.join(root, "acked"), "w") as f:
        f.write(" " * 16)
    store = MessageStore(path, **options)
    store.create_topic(TOPIC := "TopicFull", 4)
    acked, i = {}, 0
    while True:
        try:
            r = store.put(TOPIC, body(i), keys="key%d" % i)
        except PutError as exc:
            assert isinstance(exc, DiskFullError), repr(exc)
            break
        acked[r.commitlog_offset] = i
        i += 1
    assert i > 100, i
    time.sleep(0.2)                             # the dispatch thread meets the full disk too
    report = {"acked": len(acked)}
    with open(os.path.join(root, "acked"), "r+") as f:    # its page taken before the disk filled
        f.write(str(len(acked)).ljust(16))
    if crash:                                   # dies without closing, as if killed
        print(json.dumps(report), flush=True)
        os._exit(0)
    try:
        store.close()
        report["close"] = "ok"
    except RocketStoreError as exc:             # typed, whatever failed
        report["close"] = type(exc).__name__
    print(json.dumps(report), flush=True)
""")

REOPEN = textwrap.dedent(r"""
    import json, os, sys
    from rocketstore import MessageStore
    from rocketstore.errors import DiskFullError

    root, impl = sys.argv[1], sys.argv[2]
    acked = int(open(os.path.join(root, "acked")).read().strip())
    path, ballast = os.path.join(root, "store"), os.path.join(root, "ballast")
    options = dict(implementation=impl, store_host="10.0.0.7", commitlog_file_size=1 << 20,
                   consume_queue_units=20_000, index_slots=4096, index_count=16_384,
                   clean_resource_interval_ms=0, disk_space_warning_level_ratio=100, disk_space_clean_forcibly_ratio=100)

    def body(i):
        return b"%08d" % i + bytes([i % 251]) * 592

    def check(store, n):
        got = [int(bytes(m.body[:8])) for m in store.iter_messages()]
        assert got == list(range(n)), (len(got), n)
        for m in store.iter_messages():
            assert bytes(m.body) == body(int(bytes(m.body[:8])))
        seen = []
        for q in range(4):
            offset = 0
            while True:
                res = store.get_message("g", "TopicFull", q, offset, max_msgs=256)
                if not res.messages:
                    break
                assert [m.queue_offset for m in res.messages] == list(range(offset, offset + len(res.messages)))
                seen += [int(bytes(m.body[:8])) for m in res.messages]
                offset = res.next_begin_offset
        assert sorted(seen) == list(range(n)), (len(seen), n)
        k = n - 1
        assert [int(bytes(m.body[:8])) for m in store.query_by_key("TopicFull", "key%d" % k)] == [k]

    report = {}
    try:                                        # the disk is still full
        store = MessageStore(path, **options)
    except DiskFullError:
        report["full_reopen"] = "DiskFullError"
    else:
        report["full_reopen"] = "ok"
        check(store, acked)
        try:
            store.close()
        except DiskFullError:
            report["full_close"] = "DiskFullError"
    with MessageStore(path, read_only=True, **options) as store:   # always
        check(store, acked)
    report["read_only"] = "ok"

    os.unlink(ballast)                          # space returns: writable again
    with MessageStore(path, **options) as store:
        check(store, acked)
        for k in range(acked, acked + 50):
            assert store.put("TopicFull", body(k), keys="key%d" % k).ok
        check(store, acked + 50)
        assert store.verify()["ok"]
    assert not os.path.exists(os.path.join(path, "abort"))
    with MessageStore(path, **options) as store:
        check(store, acked + 50)
    print(json.dumps(report), flush=True)
""")


def _child_failed(proc: subprocess.CompletedProcess) -> str:
    how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
    if proc.returncode == 135 or proc.returncode == -7:
        how += " (SIGBUS)"
    return f"child {how}\nstdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-6000:]}"


@pytest.mark.parametrize("how", ["close", "crash"])
def test_a_full_tmpfs_never_raises_sigbus_and_the_store_opens_again(tmp_path, impl, how):
    """Fill a real tmpfs with puts; close (or die without closing); reopen writable on the full
    disk (opens, or raises DiskFullError), read-only (always opens, every acknowledged message
    there), and writable once space returns."""
    proc = run_on_tmpfs(tmp_path, "16m", [FILL_CLOSE_REOPEN, REOPEN], impl.name, how)
    assert proc.returncode == 0, _child_failed(proc)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 2, proc.stdout
    assert '"read_only": "ok"' in lines[1]
    # the background threads' failures are one line each, not tracebacks
    assert "Traceback" not in proc.stderr, proc.stderr[-6000:]


# ---- injected ENOSPC, in process ----


class NoSpace:
    """Makes ``os.posix_fallocate`` fail with ENOSPC while ``on``."""

    def __init__(self, monkeypatch, only: str = ""):
        self.on = False
        self.hits = 0
        self.only = only  # fail only for files whose path holds this
        self._fallocate = os.posix_fallocate
        monkeypatch.setattr(os, "posix_fallocate", self.fallocate)

    def fail(self):
        self.hits += 1
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def fallocate(self, fd, offset, length):
        if self.on and self.only in os.readlink(f"/proc/self/fd/{fd}"):
            self.fail()
        return self._fallocate(fd, offset, length)


def open_store(path, impl, **options):
    options.setdefault("commitlog_file_size", 256 * 1024)
    options.setdefault("consume_queue_units", 4096)
    options.setdefault("index_slots", 64)
    options.setdefault("index_count", 1024)
    options.setdefault("clean_resource_interval_ms", 0)
    return MessageStore(path, implementation=impl.name, store_host="10.0.0.7", **options)


def test_a_checkpoint_that_cannot_be_written_raises_disk_full(tmp_path, monkeypatch):
    cp = Checkpoint(str(tmp_path / "checkpoint"))
    cp.confirm_phy_offset = 123

    def fsync(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(DiskFullError, match="checkpoint"):
        cp.flush()
    monkeypatch.undo()
    cp.flush()
    assert Checkpoint(str(tmp_path / "checkpoint")).confirm_phy_offset == 123


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_close_on_a_full_disk_raises_disk_full_and_the_store_reopens(tmp_path, impl, monkeypatch):
    """The checkpoint cannot be written at close: close() raises DiskFullError (not a bare
    OSError), the abort file stays, and the store opens again (read-only at once; writable,
    recovering as after a crash, once space returns) with every message."""
    path = tmp_path / "s"
    store = open_store(path, impl)
    results = [store.put(TOPIC, b"m%d" % i, keys=f"k{i}") for i in range(300)]
    real_fsync = os.fsync

    def fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("checkpoint"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(DiskFullError) as info:
        store.close()
    assert type(info.value) is not OSError
    assert store.closed and (path / "abort").exists()
    with open_store(path, impl, read_only=True) as ro:
        assert [bytes(m.body) for m in ro.iter_messages()] == [b"m%d" % i for i in range(300)]
    monkeypatch.undo()
    with open_store(path, impl) as again:
        assert [m.commitlog_offset for m in again.query_by_key(TOPIC, "k299")] == [
            results[-1].commitlog_offset
        ]
        assert again.get_message("g", TOPIC, results[0].queue_id, 0).messages
    assert not (path / "abort").exists()


def _crashed_store_with_stale_tail(path, impl):
    """A store left by a crash (abort file) whose CommitLog holds stale bytes past its valid end
    in a page not allocated yet: recovery must zero them, and first allocate them."""
    store = open_store(path, impl)
    for i in range(50):
        store.put(TOPIC, b"m%d" % i)
    store.close()
    (path / "abort").write_bytes(b"")
    seg = sorted((path / "commitlog").iterdir())[-1]
    size = seg.stat().st_size
    fd = os.open(seg, os.O_RDWR)
    try:
        os.pwrite(fd, b"\xab" * 512, size // 2)  # a stale record fragment far past the end
    finally:
        os.close(fd)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_recovery_allocates_before_it_zeroes_a_stale_tail(tmp_path, impl, monkeypatch):
    """Recovery zeroes what lies past the valid end: through the map, so the blocks are allocated
    first, and a full disk is a DiskFullError from the writable open (read-only opens as ever),
    never a store into an unallocated page."""
    path = tmp_path / "s"
    _crashed_store_with_stale_tail(path, impl)
    space = NoSpace(monkeypatch, only=f"{os.sep}commitlog{os.sep}")
    space.on = True
    with pytest.raises(DiskFullError):
        open_store(path, impl)
    assert space.hits
    with open_store(path, impl, read_only=True) as ro:
        assert [bytes(m.body) for m in ro.iter_messages()] == [b"m%d" % i for i in range(50)]
    space.on = False
    with open_store(path, impl) as store:
        assert [bytes(m.body) for m in store.iter_messages()] == [b"m%d" % i for i in range(50)]
        seg = store._opened.segments.files[-1]
        size = seg.file_size
        assert bytes(seg.mm[size // 2 : size // 2 + 512]) == bytes(512)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_live_page_that_cannot_be_allocated_is_a_typed_error_at_open(tmp_path, impl, monkeypatch):
    """The live page is written through a map: its blocks are allocated before, and a full
    disk is a DiskFullError from the open, which a later open (space back) gets past."""
    path = tmp_path / "s"
    with open_store(path, impl) as store:
        store.put(TOPIC, b"x")
    os.unlink(path / "rocketstore-live")
    space = NoSpace(monkeypatch)
    space.on = True
    with pytest.raises(DiskFullError):
        open_store(path, impl)
    assert space.hits
    space.on = False
    with open_store(path, impl) as store:
        assert [bytes(m.body) for m in store.iter_messages()] == [b"x"]


def test_a_bare_os_error_at_close_or_open_is_typed():
    full = mapped_file.typed_error(
        OSError(errno.ENOSPC, "No space left on device", "/s/checkpoint"), "closing"
    )
    assert isinstance(full, DiskFullError) and full.errno == errno.ENOSPC and full.filename == "/s/checkpoint"
    assert "closing" in str(full) and "No space left on device" in str(full)
    other = mapped_file.typed_error(OSError(errno.EIO, "I/O error"), "closing")
    assert type(other) is SegmentError and other.errno == errno.EIO
    typed = DiskFullError(errno.ENOSPC, "x")
    assert mapped_file.typed_error(typed, "closing") is typed
    bug = RuntimeError("a defect")
    assert mapped_file.typed_error(bug, "closing") is bug
    assert isinstance(full, RocketStoreError)


def test_a_failure_log_logs_an_environment_error_in_one_line_and_a_defect_with_its_traceback(caplog):
    from rocketstore.base._failurelog import FailureLog

    log = logging.getLogger("rocketstore.test_full_disk")
    failures = FailureLog(log, "task")
    with caplog.at_level("INFO", logger="rocketstore.test_full_disk"):
        failures.failed(DiskFullError(errno.ENOSPC, "No space left on device"))
        failures.failed(RuntimeError("a defect"))
    disk, bug = caplog.records
    assert disk.exc_info is None and "No space left on device" in disk.getMessage()
    assert bug.exc_info is not None


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_the_pure_twin_allocates_a_sparse_segment_it_appends_to(tmp_path, monkeypatch):
    """The compiled twin leaves a segment sparse (it populates each page before it stores);
    the pure twin stores without that, so it allocates the rest of the segment it appends to
    first: on a full disk the open raises DiskFullError instead of a later put's SIGBUS."""
    from rocketstore import _impl

    if _impl.COMPILED is None:
        pytest.skip("compiled modules not built")
    c, py = _impl.get("c"), _impl.get("py")
    if not getattr(c.store, "POPULATE_WRITE", False):
        pytest.skip("the compiled twin fallocates its segments here (no MADV_POPULATE_WRITE)")
    path = tmp_path / "s"
    with open_store(path, c) as store:
        store.put(TOPIC, b"x")
    space = NoSpace(monkeypatch, only=f"{os.sep}commitlog{os.sep}")
    space.on = True
    with pytest.raises(DiskFullError):
        open_store(path, py)
    space.on = False
    with open_store(path, py) as store:
        store.put(TOPIC, b"y")
        seg = store._opened.segments.files[-1]
        holes = mapped_file.data_extents(seg.fd, 0, seg.file_size)
        assert holes == [(0, seg.file_size)]  # no hole left to store into
    with open_store(path, c) as store:
        assert [bytes(m.body) for m in store.iter_messages()] == [b"x", b"y"]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_dropped_store_that_cannot_close_on_a_full_disk_logs_one_line(tmp_path, impl, monkeypatch, caplog):
    import gc

    path = tmp_path / "s"
    store = open_store(path, impl)
    store.put(TOPIC, b"x")
    real_fsync = os.fsync

    def fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("checkpoint"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with caplog.at_level("ERROR", logger="rocketstore"):
        del store
        gc.collect()
    dropped = [r for r in caplog.records if "closing the dropped store" in r.getMessage()]
    assert len(dropped) == 1 and dropped[0].exc_info is None, [r.getMessage() for r in caplog.records]
    assert "No space left on device" in dropped[0].getMessage()
    monkeypatch.undo()
    with open_store(path, impl) as again:
        assert [bytes(m.body) for m in again.iter_messages()] == [b"x"]
