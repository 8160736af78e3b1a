"""Durable puts, SYNC_FLUSH, WAIT=false, pipelined futures and group commit (spec §8)."""

import asyncio
import threading

import pytest

from rocketstore import SYNC_FLUSH, MessageStore, PutStatus

SEGMENT = 64 * 1024
HOST = "10.0.0.7"
NEVER_MS = 600_000  # an interval flush that never comes during a test


def open_store(path, impl, **options):
    options.setdefault("commitlog_file_size", SEGMENT)
    return MessageStore(path, implementation=impl.name, store_host=HOST, **options)


@pytest.fixture
def lazy_store(tmp_path, impl):
    """ASYNC_FLUSH whose background flush never runs by itself: only asked-for flushes happen."""
    s = open_store(tmp_path / "store", impl, flush_interval_ms=NEVER_MS, flush_thorough_interval_ms=NEVER_MS)
    yield s
    s.close()


def end_of(result):
    return result.commitlog_offset + result.size


def test_durable_put_returns_put_ok_and_is_covered_by_the_flushed_offset(lazy_store):
    plain = lazy_store.put("TopicD", b"not asked to be durable")
    assert lazy_store.stats()["flushed_offset"] < end_of(plain)
    r = lazy_store.put("TopicD", b"durable", durable=True)
    assert r.status is PutStatus.PUT_OK
    stats = lazy_store.stats()
    assert stats["flushed_offset"] >= end_of(r)
    assert lazy_store.flushed_offset >= end_of(r)
    assert stats["flush_rounds"] >= 1


def test_durable_put_with_properties_and_message_and_batch_forms(lazy_store):
    from rocketstore import Message

    r1 = lazy_store.put("TopicD", b"a", tags="t", durable=True)
    assert r1.status is PutStatus.PUT_OK and lazy_store.flushed_offset >= end_of(r1)
    r2 = lazy_store.put(Message("TopicD", b"b"), durable=True)
    assert r2.status is PutStatus.PUT_OK and lazy_store.flushed_offset >= end_of(r2)
    b = lazy_store.put_batch("TopicD", [b"c", b"d"], durable=True)
    assert b.status is PutStatus.PUT_OK and lazy_store.flushed_offset >= b.end_offset
    many = lazy_store.put_messages([Message("TopicD", b"e"), Message("TopicE", b"f")], durable=True)
    assert all(r.status is PutStatus.PUT_OK for r in many)
    assert lazy_store.flushed_offset >= end_of(many[-1])


def test_flush_makes_everything_put_so_far_durable(lazy_store):
    results = [lazy_store.put("TopicF", b"x" * 500) for _ in range(200)]  # crosses segments
    assert lazy_store.flushed_offset < end_of(results[-1])
    assert lazy_store.flush(timeout=10)
    assert lazy_store.flushed_offset >= end_of(results[-1])


def test_sync_flush_store_makes_plain_puts_durable(tmp_path, impl):
    with open_store(
        tmp_path / "store",
        impl,
        flush_disk_type=SYNC_FLUSH,
        flush_interval_ms=NEVER_MS,
        flush_thorough_interval_ms=NEVER_MS,
    ) as s:
        for i in range(20):
            r = s.put("TopicS", b"sync-%d" % i * 100)
            assert r.status is PutStatus.PUT_OK
            assert s.stats()["flushed_offset"] >= end_of(r)
        b = s.put_batch("TopicS", [b"x"] * 10)
        assert b.status is PutStatus.PUT_OK and s.flushed_offset >= b.end_offset
        r = s.put("TopicS", b"explicitly not durable", durable=False)
        assert s.flushed_offset < end_of(r)


def test_wait_false_property_on_a_sync_flush_store_does_not_wait(tmp_path, impl):
    with open_store(
        tmp_path / "store",
        impl,
        flush_disk_type=SYNC_FLUSH,
        flush_interval_ms=NEVER_MS,
        flush_thorough_interval_ms=NEVER_MS,
    ) as s:
        s.put("TopicW", b"waits", durable=True)
        before = s.stats()
        results = [s.put("TopicW", b"no wait %d" % i, properties={"WAIT": "false"}) for i in range(10)]
        after = s.stats()
        assert all(r.status is PutStatus.PUT_OK for r in results)
        assert after["durable_waits"] == before["durable_waits"]
        assert after["sync_requests"] == before["sync_requests"]
        assert after["flushed_offset"] < end_of(results[-1])
        assert s.read(results[0].commitlog_offset).properties["WAIT"] == "false"
        # a WAIT=true message on the same store still waits
        r = s.put("TopicW", b"waits again", properties={"WAIT": "true"})
        assert s.flushed_offset >= end_of(r)


def test_put_pipelined_future_resolves_to_put_ok(lazy_store):
    fut = lazy_store.put_pipelined("TopicP", b"pipelined", tags="t")
    result = fut.result(timeout=10)
    assert result.status is PutStatus.PUT_OK
    assert fut.done()
    assert fut.result() is result
    assert lazy_store.flushed_offset >= end_of(result)
    assert lazy_store.read(result.commitlog_offset).body == b"pipelined"


def test_many_pipelined_puts_from_one_thread_all_resolve(lazy_store):
    futures = [lazy_store.put_pipelined("TopicP", b"p%d" % i) for i in range(500)]
    results = [f.result(timeout=10) for f in futures]
    assert all(r.status is PutStatus.PUT_OK for r in results)
    assert all(f.done() for f in futures)
    assert [r.queue_offset for r in results if r.queue_id == 0] == list(range(125))
    stats = lazy_store.stats()
    print(f"pipelined puts=500 flush_rounds={stats['flush_rounds']}")
    assert stats["flush_rounds"] < 500


def test_put_pipelined_done_callback_fires(lazy_store):
    fired = threading.Event()
    seen = []

    def callback(f):
        seen.append(f)
        fired.set()

    fut = lazy_store.put_pipelined("TopicP", b"callback")
    fut.add_done_callback(callback)
    assert fired.wait(10)
    assert seen == [fut]
    assert fut.done()
    assert fut.result().status is PutStatus.PUT_OK
    # on a future that is already done the callback runs at once
    late = []
    fut.add_done_callback(late.append)
    assert late == [fut]


def test_put_pipelined_future_can_be_awaited_in_asyncio(lazy_store):
    async def main():
        results = await asyncio.gather(
            *(_await(lazy_store.put_pipelined("TopicA", b"a%d" % i)) for i in range(20))
        )
        single = await lazy_store.put_pipelined("TopicA", b"single")
        return results, single

    async def _await(fut):
        return await fut

    results, single = asyncio.run(asyncio.wait_for(main(), 30))
    assert all(r.status is PutStatus.PUT_OK for r in results + [single])
    assert lazy_store.flushed_offset >= end_of(single)
    assert lazy_store.read(single.commitlog_offset).body == b"single"


def test_put_batch_pipelined_resolves_to_the_batch_result(lazy_store):
    fut = lazy_store.put_batch("TopicPB", [b"x", b"y", b"z"], pipelined=True)
    result = fut.result(timeout=10)
    assert result.status is PutStatus.PUT_OK
    assert len(result) == 3
    assert lazy_store.flushed_offset >= result.end_offset


def test_group_commit_flushes_many_durable_puts_per_round(tmp_path, impl):
    threads_n, per_thread = 8, 200
    with open_store(tmp_path / "store", impl, commitlog_file_size=1 << 20) as s:
        barrier = threading.Barrier(threads_n)
        results = [[] for _ in range(threads_n)]
        errors = []

        def worker(i):
            try:
                barrier.wait()
                for j in range(per_thread):
                    results[i].append(s.put("TopicG", b"t%d-m%d" % (i, j), durable=True))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(threads_n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
        assert not errors, errors
        flat = [r for rs in results for r in rs]
        count = threads_n * per_thread
        assert len(flat) == count
        assert all(r.status is PutStatus.PUT_OK for r in flat)
        for i, rs in enumerate(results):
            for j, r in enumerate(rs):
                assert s.read(r.commitlog_offset).body == b"t%d-m%d" % (i, j)
        stats = s.stats()
        print(
            f"impl={s.stats()['implementation']} durable puts={count} "
            f"flush_rounds={stats['flush_rounds']} durable_waits={stats['durable_waits']} "
            f"sync_requests={stats['sync_requests']}"
        )
        assert stats["flushed_offset"] >= max(end_of(r) for r in flat)
        assert stats["flush_rounds"] < 0.5 * count


def test_each_durable_put_returns_only_once_its_bytes_are_flushed(tmp_path, impl):
    """Many threads wait in group commit at once, and rounds end while others are waiting: every
    put, on its return, is covered by the flushed offset (a waiter woken by a round that did not
    cover it sleeps again)."""
    threads_n, per_thread = 16, 60
    with open_store(tmp_path / "store", impl, commitlog_file_size=1 << 20) as s:
        barrier = threading.Barrier(threads_n)
        early, errors = [], []

        def worker(i):
            try:
                barrier.wait()
                for j in range(per_thread):
                    r = s.put("TopicE", b"x" * (1 + (i * 7 + j) % 300), durable=True)
                    flushed = s.flushed_offset
                    if r.status is not PutStatus.PUT_OK or flushed < end_of(r):
                        early.append((r.status, flushed, end_of(r)))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(threads_n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
        assert not errors, errors
        assert early == []
