"""A flush that fails (msync or the data sync returning an error, as a failing disk does) fails the
durable puts waiting for it with a typed error that carries the stored message's result, and the
store resumes once the disk does: the C flush thread's ``err_seq`` path, on both twins. The
compiled twin can fail its flush thread only when built with ``ROCKETSTORE_DEBUG_HOOKS=1``
(.ci/run builds it so once)."""

import errno
import os

import pytest

from rocketstore import MessageStore, PutStatus
from rocketstore.errors import DiskFullError, FlushTimeoutError


@pytest.fixture
def failing(impl):
    if not getattr(impl.store, "DEBUG_HOOKS", False):
        if os.environ.get("ROCKETSTORE_REQUIRE_DEBUG_HOOKS") == "1":
            pytest.fail("ROCKETSTORE_REQUIRE_DEBUG_HOOKS=1 but the compiled _store has no debug hooks")
        pytest.skip("the compiled flush thread fails on purpose only in a ROCKETSTORE_DEBUG_HOOKS=1 build")
    yield impl.store._debug_fail_syncs
    impl.store._debug_fail_syncs(0)


def test_a_failing_flush_fails_the_waiting_durable_puts_then_the_store_resumes(tmp_path, impl, failing):
    with MessageStore(
        tmp_path / "s", implementation=impl.name, commitlog_file_size=1 << 20, sync_flush_timeout_ms=5000
    ) as store:
        assert store.put("T", b"before", durable=True).ok
        failing(errno.ENOSPC)
        with pytest.raises(FlushTimeoutError) as info:
            store.put("T", b"during", durable=True)
        result = info.value.result
        assert result.status == PutStatus.FLUSH_DISK_TIMEOUT and result.status.stored
        assert isinstance(result.error, DiskFullError) and result.error.errno == errno.ENOSPC
        assert store.read(result.commitlog_offset).body == b"during"  # stored, not durable
        future = store.put_pipelined("T", b"pipelined")
        with pytest.raises(FlushTimeoutError):
            future.result()
        failing(0)
        again = store.put("T", b"after", durable=True)  # a fresh round succeeds
        assert again.ok and store.flushed_offset >= again.commitlog_offset + again.size
    with MessageStore(tmp_path / "s", implementation=impl.name, read_only=True) as store:
        assert [bytes(m.body) for m in store.iter_messages()] == [
            b"before",
            b"during",
            b"pipelined",
            b"after",
        ]


def test_a_future_whose_flush_failed_is_collected_with_the_error_it_raised(tmp_path, impl, failing):
    """The error a future raises holds a traceback whose frames can hold the future: that cycle
    must be collected (the compiled future is left out of the cyclic GC while it carries no
    error, and is tracked again when it gets one)."""
    import gc
    import weakref

    class Witness:
        pass

    def wait_for(future):
        witness = Witness()  # noqa: F841 (a local of the frame the traceback holds)
        try:
            future.result()
        except FlushTimeoutError as exc:
            return weakref.ref(witness), exc.result
        raise AssertionError("the flush did not fail")

    with MessageStore(
        tmp_path / "s", implementation=impl.name, commitlog_file_size=1 << 20, sync_flush_timeout_ms=5000
    ) as store:
        store.put("T", b"first")
        future = store.put_pipelined("T", b"pipelined")
        failing(errno.EIO)
        witness, result = wait_for(future)
        assert gc.is_tracked(future)  # it now holds the error: the GC must see the cycle
        failing(0)
        del future
        gc.collect()
        assert witness() is None
        assert store.read(result.commitlog_offset).body == b"pipelined"
