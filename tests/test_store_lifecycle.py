"""Closing a store while its background threads or other callers are still busy.

These run in a child process: a use-after-free there kills the process (SIGSEGV, SIGABRT) or
hangs it, and must fail one test, not take the whole pytest run down.
"""

import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import textwrap

import pytest

import rocketstore

SRC = str(
    pathlib.Path(rocketstore.__file__).resolve().parents[1]
)  # where the package under test was imported from (src/ or site-packages)

_PRELUDE = textwrap.dedent("""
    import sys, tempfile, threading, time
    from rocketstore import MessageStore, PutStatus
    from rocketstore.errors import FlushTimeoutError, StoreClosedError
    impl = sys.argv[1]
    thread_errors = []
    threading.excepthook = lambda args: thread_errors.append(repr(args.exc_value))
""")


def run_child(body, impl, timeout=120):
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    code = _PRELUDE + textwrap.dedent(body)
    with tempfile.TemporaryDirectory(prefix="rocketstore-lifecycle-") as scratch:
        env["TMPDIR"] = scratch  # the child's mkdtemp() stores go where they are cleaned up
        try:
            proc = subprocess.run(
                [sys.executable, "-c", code, impl.name],
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the child hung for {timeout} s") from None
    rc = proc.returncode
    died = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"
    assert rc == 0, f"child {died}\nstdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-4000:]}"
    return proc.stdout


def test_close_right_after_a_roll_does_not_race_the_segment_allocator(impl):
    # The first put rolls to a new segment and starts preparing the next one on a thread; a close
    # right after must not let that thread register the new segment with a closed core.
    out = run_child(
        """
        import rocketstore.files.mapped_file as mapped_file

        class SlowMappedFile(mapped_file.MappedFile):
            __slots__ = ()

            def __init__(self, *args, **kwargs):
                # widen the race: the background allocator finishes after close() has begun
                if threading.current_thread().name == "rocketstore-allocate":
                    time.sleep(0.05)
                super().__init__(*args, **kwargs)

        mapped_file.MappedFile = SlowMappedFile
        for i in range(5):
            s = MessageStore(tempfile.mkdtemp(), implementation=impl, commitlog_file_size=64 * 1024,
                             store_host="10.0.0.7")
            s.put("T", b"x")
            s.close()
        print("thread errors:", len(thread_errors), thread_errors[:3])
    """,
        impl,
    )
    assert "thread errors: 0 " in out, out


@pytest.mark.slow  # a race run for many rounds
def test_close_while_durable_puts_are_waiting_does_not_crash(impl):
    # Durable puts in other threads either finish (stored) or raise StoreClosedError; the flush
    # thread's state must outlive every waiter. (100 rounds: 0.2 s each, run on each twin and in
    # both CI passes.)
    out = run_child(
        """
        unexpected = []
        for i in range(100):
            s = MessageStore(tempfile.mkdtemp(), implementation=impl, commitlog_file_size=1 << 20,
                             store_host="10.0.0.7")
            s.put("T", b"warm up")
            time.sleep(0.01)

            def writer():
                while True:
                    try:
                        r = s.put("T", b"x" * 100, durable=True)
                        assert r.status == PutStatus.PUT_OK
                    except FlushTimeoutError:      # stored; the close came before the flush
                        pass
                    except StoreClosedError:
                        return
                    except BaseException as exc:
                        unexpected.append(repr(exc))
                        return

            threads = [threading.Thread(target=writer) for _ in range(16)]
            for t in threads:
                t.start()
            time.sleep(0.005)
            s.close()
            for t in threads:
                t.join(30)
            assert not any(t.is_alive() for t in threads), "a durable put hung after close"
        print("unexpected:", len(unexpected), unexpected[:3])
        print("thread errors:", len(thread_errors), thread_errors[:3])
    """,
        impl,
    )
    assert "unexpected: 0 " in out and "thread errors: 0 " in out, out


def test_pipelined_futures_resolve_after_the_store_closes(impl):
    out = run_child(
        """
        for i in range(30):
            s = MessageStore(tempfile.mkdtemp(), implementation=impl, commitlog_file_size=1 << 20,
                             store_host="10.0.0.7", flush_interval_ms=600000,
                             flush_thorough_interval_ms=600000)
            s.put("T", b"warm up")
            time.sleep(0.01)
            fired = []
            futures = [s.put_pipelined("T", b"p%d" % k) for k in range(50)]
            for f in futures[:10]:
                f.add_done_callback(fired.append)
            s.close()
            results = [f.result(timeout=10) for f in futures]
            assert all(r.status is PutStatus.PUT_OK for r in results), [r.status for r in results]
            assert all(f.done() for f in futures)
            assert len(fired) == 10, len(fired)
            with MessageStore(s.path, implementation=impl) as again:
                assert [m.body for m in again.iter_messages()][1:] == [b"p%d" % k for k in range(50)]
        print("thread errors:", len(thread_errors), thread_errors[:3])
    """,
        impl,
    )
    assert "thread errors: 0 " in out, out


def test_a_store_left_open_at_exit_is_closed_cleanly(tmp_path, impl):
    """A program that never closes its store: the store is closed at interpreter exit, while its
    threads still run (not from __del__ during finalization, where a daemon thread stopped
    mid-dispatch can hold a lock close() needs), and the process exits."""
    path = tmp_path / "s"
    script = (
        "import sys\n"
        "from rocketstore import MessageStore\n"
        "s = MessageStore(sys.argv[1], implementation=sys.argv[2])\n"
        "for i in range(20000):\n"
        "    s.put('T', b'x' * 100, keys='k%d' % i)\n"
    )
    subprocess.run([sys.executable, "-c", script, str(path), impl.name], check=True, timeout=120)
    assert not (path / "abort").exists()  # closed cleanly: no crash recovery at the next open
    with rocketstore.MessageStore(str(path), implementation=impl.name) as store:
        assert sum(1 for _ in store.iter_messages()) == 20000
        assert len(store.query_by_key("T", "k19999")) == 1
