"""The codec's FastRLock (the POP service's and the offsets table's lock; the pure twin is
threading.RLock): the same behaviour as threading.RLock for what the store asks of it."""

import threading

import pytest


@pytest.fixture
def lock(impl):
    return impl.codec.FastRLock()


def test_it_is_reentrant_and_a_context_manager(lock):
    assert lock.acquire()
    assert lock.acquire(True)
    with lock:
        assert lock._is_owned()
    lock.release()
    assert lock._is_owned()
    lock.release()
    assert not lock._is_owned()
    with pytest.raises(RuntimeError):
        lock.release()  # not held


def test_another_thread_waits_and_cannot_release(lock):
    got = []
    lock.acquire()
    started = threading.Event()

    def other():
        started.set()
        got.append(lock.acquire(False))  # held by the main thread
        got.append(lock.acquire(timeout=0.01))
        try:
            lock.release()
        except RuntimeError:
            got.append("refused")
        got.append(lock.acquire())  # waits for the main thread's release
        lock.release()

    t = threading.Thread(target=other)
    t.start()
    assert started.wait(10)
    while len(got) < 3 and t.is_alive():
        t.join(0.01)
    assert got[:3] == [False, False, "refused"]
    lock.release()
    t.join(10)
    assert not t.is_alive() and got[3] is True


def test_it_keeps_a_counter_consistent_under_contention(lock):
    count = [0]

    def work():
        for _ in range(2000):
            with lock, lock:  # reentrant
                count[0] += 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert count[0] == 8000


def test_bad_arguments_raise_as_rlock_does(lock):
    with pytest.raises(ValueError):
        lock.acquire(False, 1)
    with pytest.raises(ValueError):
        lock.acquire(True, -5)


def test_the_pop_service_and_offsets_use_it(tmp_path, impl):
    from rocketstore import MessageStore

    with MessageStore(str(tmp_path / "s"), implementation=impl.name) as store:
        kind = type(impl.codec.FastRLock())
        assert type(store._opened.offsets._lock) is kind
        store.create_topic("T", 1)
        store.put("T", b"x", queue_id=0)
        got = store.receive("G", "T", 1, 60_000)
        assert type(store._pop_service()._lock) is kind
        assert store.ack(got[0].handle) is True
