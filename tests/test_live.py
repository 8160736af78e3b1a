"""Readers that follow the writer and consumers that wait for puts (rocketstore.processes.live)."""

import asyncio
import json
import os
import pathlib
import struct
import subprocess
import sys
import threading
import time

import pytest

import rocketstore
from rocketstore import Consumer, MessageStore
from rocketstore.consume import GetMessageStatus as S
from rocketstore.errors import InvalidMessageError, MessageNotFoundError, StoreClosedError
from rocketstore.processes.live import LIVE_NAME, LIVE_SIZE, topic_slot

SRC = str(pathlib.Path(rocketstore.__file__).resolve().parents[1])
SMALL = dict(commitlog_file_size=8192, consume_queue_units=16, index_slots=16, index_count=64)


def open_pair(path, impl, **options):
    writer = MessageStore(path, implementation=impl.name, **SMALL, **options)
    writer.create_topic("T", 2)
    writer.put("T", b"first", keys="k0", queue_id=0)
    reader = MessageStore(path, read_only=True, implementation=impl.name)
    return writer, reader


def test_a_reader_sees_every_put_after_it_opened(tmp_path, impl):
    writer, reader = open_pair(tmp_path / "s", impl)
    with writer, reader:
        results = [writer.put("T", b"m%04d" % i, keys="k%d" % i, queue_id=i % 2) for i in range(1, 400)]
        assert len(os.listdir(tmp_path / "s" / "commitlog")) > 3  # the writer rolled segments
        assert reader.max_offset == writer.max_offset
        assert reader.queue_offsets() == writer.queue_offsets()
        last = results[-1]
        assert reader.read(last.commitlog_offset).body == b"m0399"
        assert reader.get_by_msg_id(last.msg_id).body == b"m0399"
        assert reader.get_by_queue_offset("T", last.queue_id, last.queue_offset).body == b"m0399"
        assert [m.body for m in reader.query_by_key("T", "k399")] == [b"m0399"]
        got = reader.get_message("g", "T", 1, 0, max_msgs=1000)
        assert [m.body for m in got.messages] == [b"m%04d" % i for i in range(1, 400, 2)]
        assert sum(1 for _ in reader.iter_messages()) == 400
        with pytest.raises(MessageNotFoundError):
            reader.read(writer.max_offset)


def test_a_reader_consuming_one_put_at_a_time_still_finds_every_key(tmp_path, impl):
    # a following reader catches up with each put alone and indexes keys only when one is
    # looked up: every key must still be found, across segments, and only its own message
    writer, reader = open_pair(tmp_path / "s", impl)
    with writer, reader:
        results = []
        for i in range(1, 200):
            results.append(writer.put("T", b"m%04d" % i, keys=["k%d" % i, "all"], queue_id=0))
            got = reader.get_message("g", "T", 0, results[-1].queue_offset, max_msgs=4)
            assert [m.body for m in got.messages] == [b"m%04d" % i]
            if i % 50 == 0:  # a lookup between puts: the index catches up, then lags again
                assert [m.body for m in reader.query_by_key("T", "k%d" % i)] == [b"m%04d" % i]
        assert len(os.listdir(tmp_path / "s" / "commitlog")) > 3
        for i in (1, 77, 150, 199):
            assert [m.body for m in reader.query_by_key("T", "k%d" % i)] == [b"m%04d" % i]
            assert reader.query_by_unique_key("T", results[i - 1].unique_key).body == b"m%04d" % i
            assert reader.key_offsets("T", "k%d" % i) == [results[i - 1].commitlog_offset]
        assert len(reader.query_by_key("T", "all", max_num=64)) == 64
        assert reader.query_by_key("T", "k200") == []


def test_a_reader_drops_what_retention_deleted(tmp_path, impl):
    writer, reader = open_pair(tmp_path / "s", impl)
    with writer, reader:
        first = reader.read(0)
        for i in range(300):
            writer.put("T", b"x" * 200, queue_id=i % 2)
        writer.clean(force=True)
        assert writer.min_offset > 0
        assert reader.min_offset == writer.min_offset
        with pytest.raises(MessageNotFoundError):
            reader.read(0)
        assert first.body == b"first"  # a message read before stays whole
        low = reader.queues()[("T", 0)][0]
        assert low == writer.queues()[("T", 0)][0] > 0
        got = reader.get_message("g", "T", 0, 0)
        assert got.status == S.OFFSET_TOO_SMALL
        assert reader.get_message("g", "T", 0, low).status == S.FOUND


def test_a_reader_opens_again_when_a_writer_cut_what_it_saw(tmp_path, impl):
    path = tmp_path / "s"
    writer, reader = open_pair(path, impl)
    with reader:
        for i in range(10):
            writer.put("T", b"m%d" % i, queue_id=0)
        assert reader.max_queue_offset("T", 0) == 11
        follower = reader._opened.follower
        writer.close()
        # the page says records end further than the CommitLog's do (a power cut lost the
        # last ones): the next writer's recovery cuts there, and readers open again
        with open(path / LIVE_NAME, "r+b") as f:
            f.seek(16)
            f.write(struct.pack("<q", reader.max_offset + 4096))
        with MessageStore(path, implementation=impl.name) as again:
            assert reader.max_queue_offset("T", 0) == 11
            assert reader._opened.follower is not follower  # opened again
            again.put("T", b"after", queue_id=0)
            assert reader.get_by_queue_offset("T", 0, 11).body == b"after"


def test_get_message_waits_for_a_put(tmp_path, impl):
    writer, reader = open_pair(tmp_path / "s", impl)
    with writer, reader:
        for store in (writer, reader):
            start = store.max_queue_offset("T", 1)
            timer = threading.Timer(0.2, lambda: writer.put("T", b"late", queue_id=1))
            timer.start()
            t0 = time.monotonic()
            got = store.get_message("g", "T", 1, start, wait=30)
            timer.join()
            assert got.status == S.FOUND and [m.body for m in got.messages] == [b"late"]
            assert time.monotonic() - t0 < 25  # woken by the put, not the timeout
        # nothing comes: the status of the last look, after the wait
        got = reader.get_message("g", "T", 1, reader.max_queue_offset("T", 1), wait=0.05)
        assert got.status == S.OFFSET_OVERFLOW_ONE and not got.messages
        # not worth waiting for: at once
        got = reader.get_message("g", "T", 1, 10**6, wait=3600)
        assert got.status == S.OFFSET_OVERFLOW_BADLY


def test_a_tag_filtered_wait_skips_what_does_not_match(tmp_path, impl):
    writer, reader = open_pair(tmp_path / "s", impl)
    with writer, reader:

        def later():
            time.sleep(0.1)
            writer.put("T", b"a", tags="A", queue_id=1)
            time.sleep(0.1)
            writer.put("T", b"b", tags="B", queue_id=1)

        thread = threading.Thread(target=later)
        thread.start()
        got = reader.get_message("g", "T", 1, 0, tags="B", wait=30)
        thread.join()
        assert [m.body for m in got.messages] == [b"b"]


def test_bad_waits_are_typed_errors(tmp_path, impl):
    writer, reader = open_pair(tmp_path / "s", impl)
    with writer, reader:
        with pytest.raises(ValueError):
            reader.get_message("g", "T", 0, 0, wait=-1)
        with pytest.raises(TypeError):
            reader.get_message("g", "T", 0, 0, wait="soon")
        with pytest.raises(ValueError):
            Consumer(reader, "g", "T").poll(timeout=float("nan"))


def test_a_consumer_iterates_as_messages_come_and_ends_at_close(tmp_path, impl):
    writer, reader = open_pair(tmp_path / "s", impl)
    got = []
    consumer = Consumer(reader, "g", "T")

    def consume():
        for msg in consumer:
            got.append(msg.body)

    thread = threading.Thread(target=consume)
    thread.start()
    for i in range(20):
        writer.put("T", b"m%d" % i)
    deadline = time.monotonic() + 30
    while len(got) < 21 and time.monotonic() < deadline:
        time.sleep(0.01)
    reader.close()
    thread.join(30)
    writer.close()
    assert not thread.is_alive()
    assert sorted(got) == sorted([b"first"] + [b"m%d" % i for i in range(20)])
    with pytest.raises(StoreClosedError):
        consumer.poll(timeout=1)


def test_async_forms_wait_without_blocking_the_loop(tmp_path, impl):
    writer, reader = open_pair(tmp_path / "s", impl)

    async def main():
        consumer = Consumer(reader, "g", "T")
        assert [m.body for m in await consumer.poll_async()] == [b"first"]
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        loop = asyncio.get_running_loop()
        loop.call_later(0.2, lambda: writer.put("T", b"late", queue_id=0))
        waiting = [consumer.poll_async(timeout=30), reader.get_message_async("g2", "T", 0, 1, wait=30)]
        polled, pulled = await asyncio.gather(*waiting)
        ticker.cancel()
        assert [m.body for m in polled] == [b"late"]
        assert [m.body for m in pulled.messages] == [b"late"]
        assert ticks >= 5  # the loop ran while they waited

    with writer, reader:
        asyncio.run(main())


CHILD_PUTTER = r"""
import sys, time
from rocketstore import MessageStore
s = MessageStore(sys.argv[1], implementation=sys.argv[2])
s.put("T", b"ready", queue_id=0)
print("READY", flush=True)
sys.stdin.readline()
s.put("T", b"from the child", queue_id=0)
s.close()
"""


@pytest.mark.parametrize("reader_impl", ["c", "py"])
def test_a_put_in_another_process_wakes_a_waiting_reader(tmp_path, impl, reader_impl):
    path = str(tmp_path / "s")
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD_PUTTER, path, impl.name],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert child.stdout.readline() == b"READY\n"
        with MessageStore(path, read_only=True, implementation=reader_impl) as reader:
            threading.Timer(0.2, lambda: (child.stdin.write(b"go\n"), child.stdin.flush())).start()
            got = reader.get_message("g", "T", 0, 1, wait=60)
            assert [m.body for m in got.messages] == [b"from the child"]
        assert child.wait(60) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdin.close()
        child.stdout.close()


def test_a_store_without_a_live_page_is_read_as_it_was(java_store, tmp_path):
    with MessageStore(java_store, read_only=True) as reader:
        assert not os.path.exists(os.path.join(java_store, LIVE_NAME))
        topic, qid = next(iter(reader.queues()))
        end = reader.max_queue_offset(topic, qid)
        t0 = time.monotonic()
        got = reader.get_message("g", topic, qid, end, wait=0.05)
        assert got.status == S.OFFSET_OVERFLOW_ONE and time.monotonic() - t0 >= 0.04


@pytest.mark.parametrize("content", [b"not ours", b"\x01" * LIVE_SIZE])
def test_a_damaged_live_file_is_rebuilt_by_a_writer_and_ignored_by_a_reader(tmp_path, content):
    """The page holds no durable state (tests/test_runtime_files.py tries every damage)."""
    path = tmp_path / "s"
    MessageStore(path).close()
    live = path / LIVE_NAME
    live.write_bytes(content)
    with MessageStore(path, read_only=True) as reader:  # a reader ignores it
        assert reader.max_offset == 0
    assert live.read_bytes() == content
    MessageStore(path).close()
    assert live.read_bytes()[:8] == b"RSLIVE\x00\x01" and len(live.read_bytes()) == LIVE_SIZE


def test_a_clean_reopen_leaves_the_live_page_as_it_was(tmp_path, impl):
    path = tmp_path / "s"
    with MessageStore(path, implementation=impl.name) as store:
        store.put("T", b"x")
    before = (path / LIVE_NAME).read_bytes()
    assert len(before) == LIVE_SIZE
    with MessageStore(path, implementation=impl.name) as store, pytest.raises(InvalidMessageError):
        store.put("bad topic", b"x")
    assert (path / LIVE_NAME).read_bytes() == before


def test_a_waiter_sleeps_through_puts_of_other_topics(tmp_path, impl):
    """A put wakes the waiters of its topic's slot (and whoever waits for any put); a compiled
    waiter of another topic sleeps on (the pure twin's waiters wake on every put and look again)."""
    path = tmp_path / "s"
    with MessageStore(path, implementation=impl.name) as store:
        store.put("Busy", b"x")
        store.put("Quiet", b"x")
        assert topic_slot("Busy") != topic_slot("Quiet")
        live = store._opened.live
        look = live.look((topic_slot("Quiet"),))
        timer = threading.Timer(0.05, lambda: [store.put("Busy", b"y") for _ in range(50)])
        timer.start()
        woken = live.wait_look(look, 0.3)
        timer.join()
        assert woken == (impl.name == "py")
        look = live.look((topic_slot("Quiet"),))
        timer = threading.Timer(0.05, lambda: store.put("Quiet", b"y"))
        timer.start()
        assert live.wait_look(look, 30)
        timer.join()


def test_live_page_words_are_checked(tmp_path, impl):
    with MessageStore(tmp_path / "s", implementation=impl.name) as store:
        mm = store._opened.live.mm
        for words, seen in (([], []), ([8], [0]), ([64, 72], [0]), ([4096], [0]), ([65], [0])):
            with pytest.raises(ValueError):
                impl.store.live_wait_words(mm, words, seen, 0, 0)
        with pytest.raises(ValueError):
            impl.store.live_wait(bytearray(16), 0, 0)


def test_cli_consume_follow_prints_messages_as_they_are_put(tmp_path):
    path = str(tmp_path / "s")
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with MessageStore(path) as store:
        store.create_topic("T", 2)
        store.put("T", b"before")
        cmd = [sys.executable, "-m", "rocketstore", "--store", path, "consume", "T", "--group", "g"]
        with subprocess.Popen(
            cmd + ["--follow", "--max", "3", "--json"], stdout=subprocess.PIPE, env=env
        ) as child:
            first = child.stdout.readline()
            assert json.loads(first)["body"] == "before"
            store.put("T", b"one")
            assert json.loads(child.stdout.readline())["body"] == "one"
            store.put("T", b"two")
            assert json.loads(child.stdout.readline())["body"] == "two"
            assert child.wait(60) == 0  # --max 3 reached


def test_async_waiters_of_different_topics_get_their_own_messages(tmp_path, impl):
    with MessageStore(tmp_path / "s", implementation=impl.name) as store:
        store.create_topic("A", 1)
        store.create_topic("B", 1)
        store.put("A", b"a0")
        store.put("B", b"b0")

        async def main():
            loop = asyncio.get_running_loop()
            loop.call_later(0.1, lambda: store.put("A", b"a1"))
            loop.call_later(0.3, lambda: store.put("B", b"b1"))
            t0 = loop.time()
            got_a, got_b = await asyncio.gather(
                store.get_message_async("g", "A", 0, 1, wait=30),
                store.get_message_async("g", "B", 0, 1, wait=30),
            )
            assert [m.body for m in got_a.messages] == [b"a1"]
            assert [m.body for m in got_b.messages] == [b"b1"]
            assert loop.time() - t0 < 25

        asyncio.run(main())


def test_a_reader_ahead_of_the_published_end_does_not_reopen(tmp_path, impl):
    """A reader's own scan at open may find records the writer wrote but had not published yet
    (or never will: killed first); that is not a cut."""
    path = tmp_path / "s"
    writer, reader = open_pair(path, impl)
    with writer, reader:
        end = reader.max_offset
        follower = reader._opened.follower
        with open(path / LIVE_NAME, "r+b") as f:
            f.seek(16)
            f.write(struct.pack("<q", end - 10))
        for _ in range(3):
            assert reader.max_offset == end
        assert reader._opened.follower is follower


def test_a_writer_opening_after_a_crash_makes_readers_open_again(tmp_path, impl):
    path = tmp_path / "s"
    writer, reader = open_pair(path, impl)
    with reader:
        writer.close()
        (path / "abort").touch()  # as a killed writer leaves it
        follower = reader._opened.follower
        with MessageStore(path, implementation=impl.name) as again:
            again.put("T", b"after", queue_id=0)
            assert reader.get_by_queue_offset("T", 0, 1).body == b"after"
            assert reader._opened.follower is not follower


def test_async_iteration_ends_when_the_store_closes(tmp_path, impl):
    writer, reader = open_pair(tmp_path / "s", impl)
    got = []

    async def main():
        consumer = Consumer(reader, "g", "T")
        asyncio.get_running_loop().call_later(0.3, reader.close)
        async for msg in consumer:
            got.append(msg.body)

    with writer:
        asyncio.run(asyncio.wait_for(main(), 30))
    assert got == [b"first"]


@pytest.mark.parametrize("kind", ["iter", "async"])
def test_a_consumer_with_nothing_to_receive_sleeps(tmp_path, impl, kind):
    """Waiting burns no CPU: a spinning consumer would use about the whole second."""
    writer, reader = open_pair(tmp_path / "s", impl)
    consumer = Consumer(reader, "g", "T")
    assert len(consumer.poll()) == 1

    def drain():
        if kind == "iter":
            for _ in consumer:
                pass
        else:

            async def main():
                async for _ in consumer:
                    pass

            asyncio.run(main())

    thread = threading.Thread(target=drain)
    cpu = time.process_time()
    thread.start()
    time.sleep(1.0)
    reader.close()
    thread.join(30)
    used = time.process_time() - cpu
    writer.close()
    assert not thread.is_alive()
    assert used < 0.3, f"{used:.2f} s of CPU in 1 s of waiting"


def test_a_reader_that_fell_behind_retention_starts_its_queues_past_the_deletion(tmp_path, impl):
    """A reader that had not dispatched what retention then deleted skips it: its queues start
    at what is left, with no hole and nothing reported lost."""
    path = tmp_path / "s"
    writer = MessageStore(path, implementation=impl.name, **SMALL)
    writer.create_topic("T", 2)
    for i in range(50):
        writer.put("T", b"early%d" % i, queue_id=0)
    writer.close()  # the reader finds these units in the queue's file
    writer = MessageStore(path, implementation=impl.name, **SMALL)
    reader = MessageStore(path, read_only=True, implementation=impl.name)
    with writer, reader:
        assert reader._opened.queues.get("T", 0).disk is not None
        for i in range(400):
            writer.put("T", b"late%d" % i, queue_id=0)
        writer.clean(force=True)
        assert writer.min_offset > 0
        report = reader.verify()
        assert report["ok"], report["problems"][:3]
        low, high = reader.queues()[("T", 0)]
        assert (low, high) == writer.queues()[("T", 0)]
        got = reader.get_message("g", "T", 0, low, max_msgs=1000)
        assert [m.queue_offset for m in got.messages] == list(range(low, high))
        assert not reader._opened.queues.get("T", 0).holes


def test_a_spinning_waiter_is_woken_by_a_put_and_keeps_its_timeout(tmp_path, impl):
    """wait_spin_us: a waiter first spins on its words (no sleep) up to that long, then sleeps as
    any waiter; a put while it spins or sleeps wakes it, and its timeout still ends the wait."""
    path = tmp_path / "s"
    writer = MessageStore(path, implementation=impl.name, **SMALL)
    writer.create_topic("T", 1)
    writer.put("T", b"first", queue_id=0)
    reader = MessageStore(path, read_only=True, implementation=impl.name, wait_spin_us=1_000_000)
    with writer, reader:
        assert reader.config.wait_spin_us == 1_000_000
        for delay in (0.05, 1.3):  # a put while it spins, then one after it went to sleep
            start = reader.max_queue_offset("T", 0)
            timer = threading.Timer(delay, lambda: writer.put("T", b"late", queue_id=0))
            timer.start()
            t0 = time.monotonic()
            got = reader.get_message("g", "T", 0, start, wait=30)
            timer.join()
            assert [m.body for m in got.messages] == [b"late"]
            assert time.monotonic() - t0 < 25
        # the timeout is shorter than the spin: it ends the wait
        t0 = time.monotonic()
        got = reader.get_message("g", "T", 0, reader.max_queue_offset("T", 0), wait=0.05)
        assert not got.messages and time.monotonic() - t0 < 0.6


def test_wait_spin_us_is_checked(tmp_path):
    from rocketstore.errors import StoreConfigError

    for bad in (-1, 1_000_001):
        with pytest.raises(StoreConfigError):
            MessageStore(tmp_path / "s", wait_spin_us=bad)
