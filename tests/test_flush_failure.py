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
