"""MessageStore put/read behaviour: what a put returns is what a read finds, on both twins."""

import gc
import re
import socket

import pytest

from rocketstore import Message, MessageStore, PutStatus

SEGMENT = 64 * 1024
HOST = "10.0.0.7"
PORT = 10911


@pytest.fixture
def store(tmp_path, impl):
    s = MessageStore(
        tmp_path / "store",
        implementation=impl.name,
        commitlog_file_size=SEGMENT,
        store_host=HOST,
        store_port=PORT,
    )
    yield s
    s.close()


def test_store_uses_the_requested_implementation(store, impl):
    assert store.stats()["implementation"] == impl.name


def test_put_then_read_round_trips_body_topic_tags_keys_properties_and_flag(store):
    body = bytes(range(256)) * 3
    r = store.put(
        "TopicTest",
        body,
        tags="TagA",
        keys="order-1",
        properties={"color": "blue", "ünï": "cödé"},
        flag=0x1234,
    )
    assert r.status is PutStatus.PUT_OK and r.ok
    m = store.read(r.commitlog_offset)
    assert m.body == body and isinstance(m.body, bytes)
    assert m.topic == "TopicTest"
    assert m.tags == "TagA"
    assert m.keys == "order-1"
    assert m.properties["color"] == "blue"
    assert m.properties["ünï"] == "cödé"
    assert m.flag == 0x1234
    assert m.unique_key == r.unique_key
    assert m.queue_id == r.queue_id and m.queue_offset == r.queue_offset
    assert m.commitlog_offset == r.commitlog_offset
    assert m.size == r.size
    assert m.store_timestamp == r.store_timestamp
    assert m.store_host == (HOST, PORT)


def test_keys_given_as_a_list_are_stored_space_separated(store):
    r = store.put("TopicTest", b"k", keys=["order-1", "user-7", "x"])
    assert store.read(r.commitlog_offset).keys == "order-1 user-7 x"


def test_empty_body_round_trips(store):
    r = store.put("TopicTest", b"")
    m = store.read(r.commitlog_offset)
    assert m.body == b"" and m.body_crc == 0


def test_put_accepts_bytes_like_bodies(store):
    r1 = store.put("TopicTest", bytearray(b"from bytearray"))
    r2 = store.put("TopicTest", memoryview(b"from memoryview"))
    assert store.read(r1.commitlog_offset).body == b"from bytearray"
    assert store.read(r2.commitlog_offset).body == b"from memoryview"


def test_put_results_round_robin_queues_with_consecutive_queue_offsets(store, rng):
    results = [store.put("TopicRR", rng.randbytes(rng.randrange(0, 300))) for _ in range(40)]
    assert [r.queue_id for r in results] == [i % 4 for i in range(40)]
    for q in range(4):
        assert [r.queue_offset for r in results if r.queue_id == q] == list(range(10))
    assert store.queue_offsets() == {("TopicRR", q): 10 for q in range(4)}


def test_put_results_offsets_sizes_timestamps_and_ids_are_consistent(store, rng):
    bodies = [rng.randbytes(rng.randrange(0, 2000)) for _ in range(120)]  # rolls a 64 KiB segment
    results = [store.put("TopicIds", b, tags="T") for b in bodies]
    offsets = [r.commitlog_offset for r in results]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    for a, b in zip(results, results[1:]):
        # the next record starts right after the previous one, or at the next segment's start
        assert b.commitlog_offset in (
            a.commitlog_offset + a.size,
            (a.commitlog_offset // SEGMENT + 1) * SEGMENT,
        )
        assert b.store_timestamp >= a.store_timestamp
    assert len({r.unique_key for r in results}) == len(results)
    host_raw = socket.inet_aton(HOST)
    for body, r in zip(bodies, results):
        assert re.fullmatch(r"[0-9A-F]{32}", r.unique_key), r.unique_key
        assert re.fullmatch(r"[0-9A-F]{32}", r.msg_id), r.msg_id
        raw = bytes.fromhex(r.msg_id)
        assert raw[:4] == host_raw
        assert int.from_bytes(raw[4:8], "big") == PORT
        assert int.from_bytes(raw[8:16], "big") == r.commitlog_offset
        m = store.get_by_msg_id(r.msg_id)
        assert m.body == body and m.size == r.size and m.unique_key == r.unique_key
        assert m.msg_id == r.msg_id
        assert store.get_by_msg_id(r.msg_id.lower()).commitlog_offset == r.commitlog_offset
    assert store.max_offset == results[-1].commitlog_offset + results[-1].size


def test_explicit_queue_id_is_used_and_counts_its_own_offsets(store):
    results = [store.put("TopicQ", b"m%d" % i, queue_id=2) for i in range(5)]
    assert [r.queue_id for r in results] == [2] * 5
    assert [r.queue_offset for r in results] == [0, 1, 2, 3, 4]
    other = store.put("TopicQ", b"other", queue_id=3)
    assert (other.queue_id, other.queue_offset) == (3, 0)
    assert store.read(results[3].commitlog_offset).queue_id == 2


def test_unique_key_given_by_the_caller_is_kept(store):
    key = "AC1100020001000000000000000000AB"
    r = store.put("TopicTest", b"mine", properties={"UNIQ_KEY": key})
    assert r.unique_key == key
    m = store.read(r.commitlog_offset)
    assert m.unique_key == key
    assert list(m.properties).count("UNIQ_KEY") == 1


def test_put_accepts_a_message_object(store):
    r = store.put(
        Message(
            "TopicMsg",
            b"object body",
            tags="TagM",
            keys=["a", "b"],
            properties={"p": "1"},
            flag=9,
            queue_id=1,
        )
    )
    m = store.read(r.commitlog_offset)
    assert (r.queue_id, m.queue_id) == (1, 1)
    assert (m.body, m.tags, m.keys, m.properties["p"], m.flag) == (b"object body", "TagM", "a b", "1", 9)


def test_put_messages_with_mixed_topics_keeps_per_topic_queue_offsets(store):
    messages = [Message(f"Topic{i % 3}", b"body-%d" % i, tags=f"t{i}", queue_id=0) for i in range(12)]
    results = store.put_messages(messages)
    assert len(results) == 12
    for topic_index in range(3):
        offsets = [r.queue_offset for i, r in enumerate(results) if i % 3 == topic_index]
        assert offsets == [0, 1, 2, 3]
    offs = [r.commitlog_offset for r in results]
    assert offs == sorted(offs)
    for i, r in enumerate(results):
        m = store.read(r.commitlog_offset)
        assert (m.topic, m.body, m.tags) == (f"Topic{i % 3}", b"body-%d" % i, f"t{i}")
        assert m.unique_key == r.unique_key
    assert [m.body for m in store.iter_messages()] == [m.body for m in messages]


def test_zero_copy_read_gives_a_memoryview_equal_to_the_body(store):
    body = b"zero-copy " * 50
    r = store.put("TopicZC", body)
    m = store.read(r.commitlog_offset, zero_copy=True)
    assert isinstance(m.body, memoryview)
    assert m.body.readonly
    assert m.body == body and bytes(m.body) == body
    copied = store.read(r.commitlog_offset)
    assert isinstance(copied.body, bytes) and copied.body == body


def test_zero_copy_body_stays_valid_after_the_store_closes(tmp_path, impl, rng):
    s = MessageStore(
        tmp_path / "store", implementation=impl.name, commitlog_file_size=SEGMENT, store_host=HOST
    )
    bodies = [rng.randbytes(rng.randrange(1, 3000)) for _ in range(60)]  # several segments
    results = [s.put("TopicZC", b) for b in bodies]
    views = [s.read(r.commitlog_offset, zero_copy=True).body for r in results]
    iterated = [m.body for m in s.iter_messages(zero_copy=True)]
    s.close()
    del s
    gc.collect()
    assert [bytes(v) for v in views] == bodies
    assert [bytes(v) for v in iterated] == bodies
    # the directory can be opened again while the old views are still alive
    with MessageStore(tmp_path / "store", implementation=impl.name, store_host=HOST) as again:
        assert again.read(results[-1].commitlog_offset).body == bodies[-1]
    assert [bytes(v) for v in views] == bodies


def test_read_only_store_reads_what_a_closed_writer_wrote(tmp_path, impl):
    path = tmp_path / "store"
    with MessageStore(path, implementation=impl.name, commitlog_file_size=SEGMENT, store_host=HOST) as s:
        results = [s.put("TopicRO", b"ro-%d" % i) for i in range(50)]
    with MessageStore(path, implementation=impl.name, read_only=True) as ro:
        assert [m.body for m in ro.iter_messages()] == [b"ro-%d" % i for i in range(50)]
        assert ro.get_by_msg_id(results[7].msg_id).body == b"ro-7"
        assert ro.max_offset == results[-1].commitlog_offset + results[-1].size
