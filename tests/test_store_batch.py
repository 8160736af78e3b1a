"""Batch puts (``put_batch``, ``put_messages``): one lock, consecutive queue offsets, all or nothing."""

import numpy as np
import pytest

from rocketstore import Message, MessageStore, PutStatus
from rocketstore.errors import InvalidMessageError, MessageTooLargeError

SEGMENT = 64 * 1024
HOST = "10.0.0.7"
MIN_BLANK = 8


@pytest.fixture
def store(tmp_path, impl):
    s = MessageStore(
        tmp_path / "store", implementation=impl.name, commitlog_file_size=SEGMENT, store_host=HOST
    )
    yield s
    s.close()


def assert_batch_matches_reads(store, result, bodies, topic):
    assert len(result) == len(bodies)
    assert result.status is PutStatus.PUT_OK and result.ok
    assert result.topic == topic
    ids = result.msg_ids
    keys = result.unique_keys
    for i, body in enumerate(bodies):
        m = store.read(int(result.commitlog_offsets[i]))
        assert m.body == body
        assert m.topic == topic
        assert m.queue_id == result.queue_id
        assert m.queue_offset == int(result.queue_offsets[i])
        assert m.size == int(result.sizes[i])
        assert m.store_timestamp == int(result.store_timestamps[i])
        assert m.unique_key == keys[i]
        assert m.msg_id == ids[i]
        one = result[i]
        assert (one.commitlog_offset, one.size, one.queue_offset, one.unique_key, one.msg_id) == (
            m.commitlog_offset,
            m.size,
            m.queue_offset,
            m.unique_key,
            m.msg_id,
        )
        # no record spans two files
        assert m.commitlog_offset // SEGMENT == (m.commitlog_offset + m.size - 1) // SEGMENT
    assert len(set(keys)) == len(keys)
    assert list(result.queue_offsets) == list(
        range(result.first_queue_offset, result.first_queue_offset + len(bodies))
    )
    assert result.end_offset == int(result.commitlog_offsets[-1]) + int(result.sizes[-1])


def test_put_batch_list_form_results_match_what_read_returns(store, rng):
    bodies = [rng.randbytes(rng.randrange(0, 2500)) for _ in range(100)]  # rolls several segments
    result = store.put_batch("TopicB", bodies, tags="TagB", properties={"k": "v"}, queue_id=1)
    assert result.queue_id == 1 and result.first_queue_offset == 0
    assert_batch_matches_reads(store, result, bodies, "TopicB")
    m = store.read(int(result.commitlog_offsets[5]))
    assert (m.tags, m.properties["k"]) == ("TagB", "v")
    assert [m.body for m in store.iter_messages()] == bodies
    assert store.max_offset == result.end_offset


def test_put_batch_buffer_and_lengths_form_results_match_what_read_returns(store, rng):
    lengths = np.array([rng.randrange(0, 1500) for _ in range(120)], dtype=np.int64)
    buffer = np.frombuffer(rng.randbytes(int(lengths.sum())), dtype=np.uint8)
    result = store.put_batch("TopicBuf", buffer, lengths=lengths)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    bodies = [buffer[s : s + n].tobytes() for s, n in zip(starts, lengths)]
    assert_batch_matches_reads(store, result, bodies, "TopicBuf")
    # a plain list of lengths over a bytes buffer works too
    result2 = store.put_batch("TopicBuf", b"abcdefghij", lengths=[3, 0, 7], queue_id=result.queue_id)
    assert_batch_matches_reads(store, result2, [b"abc", b"", b"defghij"], "TopicBuf")
    assert result2.first_queue_offset == result.first_queue_offset + len(bodies)


def test_consecutive_batches_get_consecutive_queue_offsets(store):
    r1 = store.put_batch("TopicSeq", [b"a"] * 7, queue_id=0)
    single = store.put("TopicSeq", b"single", queue_id=0)
    r2 = store.put_batch("TopicSeq", [b"b"] * 5, queue_id=0)
    assert list(r1.queue_offsets) == list(range(7))
    assert single.queue_offset == 7
    assert list(r2.queue_offsets) == list(range(8, 13))
    assert r2.first_queue_offset == 8
    assert store.queue_offsets()[("TopicSeq", 0)] == 13


def test_put_batch_of_nothing_returns_an_empty_result(store):
    before = store.max_offset
    result = store.put_batch("TopicEmpty", [])
    assert len(result) == 0
    assert store.max_offset == before


def _assert_nothing_written(store, before_offset, before_queues):
    assert store.max_offset == before_offset
    assert store.queue_offsets() == before_queues
    assert len(list(store.iter_messages())) == 3
    after = store.put("TopicAfter", b"still works")
    assert after.commitlog_offset == before_offset
    assert store.read(after.commitlog_offset).body == b"still works"


def _prefill(store):
    for i in range(3):
        store.put("TopicPre", b"pre-%d" % i, queue_id=0)
    return store.max_offset, store.queue_offsets()


def test_put_batch_with_a_body_over_max_message_size_raises_and_writes_nothing(tmp_path, impl):
    with MessageStore(
        tmp_path / "s",
        implementation=impl.name,
        commitlog_file_size=SEGMENT,
        store_host=HOST,
        max_message_size=8192,
    ) as store:
        before, queues = _prefill(store)
        bodies = [b"ok"] * 10 + [b"x" * 9000] + [b"ok"] * 10
        with pytest.raises(MessageTooLargeError):
            store.put_batch("TopicPre", bodies, queue_id=0)
        with pytest.raises(MessageTooLargeError):
            store.put_batch("TopicPre", b"".join(bodies), lengths=[len(b) for b in bodies], queue_id=0)
        _assert_nothing_written(store, before, queues)


def test_put_batch_with_a_record_just_over_max_message_size_raises_and_writes_nothing(tmp_path, impl):
    # the body alone is under the limit; the record (header, topic, UNIQ_KEY) is over it
    with MessageStore(
        tmp_path / "s",
        implementation=impl.name,
        commitlog_file_size=SEGMENT,
        store_host=HOST,
        max_message_size=8192,
    ) as store:
        before, queues = _prefill(store)
        with pytest.raises(MessageTooLargeError):
            store.put_batch("TopicPre", [b"ok", b"x" * 8150, b"ok"], queue_id=0)
        _assert_nothing_written(store, before, queues)


def test_put_batch_with_a_record_larger_than_a_segment_raises_and_writes_nothing(store):
    # max_message_size is the default 4 MiB: the limit that bites is the 64 KiB segment
    before, queues = _prefill(store)
    bodies = [b"fits"] * 20 + [b"x" * (SEGMENT + 100)] + [b"fits"] * 5
    with pytest.raises(MessageTooLargeError):
        store.put_batch("TopicPre", bodies, queue_id=0)
    _assert_nothing_written(store, before, queues)


def test_put_batch_whose_lengths_do_not_sum_to_the_buffer_raises_and_writes_nothing(store):
    before, queues = _prefill(store)
    with pytest.raises(InvalidMessageError):
        store.put_batch("TopicPre", b"abcdefghij", lengths=[3, 3], queue_id=0)
    with pytest.raises(InvalidMessageError):
        store.put_batch("TopicPre", b"abcdefghij", lengths=[3, 3, 5], queue_id=0)
    with pytest.raises(InvalidMessageError):
        store.put_batch("TopicPre", b"abcdefghij", lengths=[12, -2], queue_id=0)
    _assert_nothing_written(store, before, queues)


def test_put_messages_with_a_record_larger_than_a_segment_raises_and_writes_nothing(store):
    before, queues = _prefill(store)
    messages = [
        Message("TopicPre", b"fits", queue_id=0),
        Message("TopicOther", b"fits too"),
        Message("TopicPre", b"x" * (SEGMENT + 100), queue_id=0),
    ]
    with pytest.raises(MessageTooLargeError):
        store.put_messages(messages)
    _assert_nothing_written(store, before, queues)


def test_put_messages_with_an_invalid_message_raises_and_writes_nothing(store):
    before, queues = _prefill(store)
    messages = [Message("TopicPre", b"fits", queue_id=0), Message("Bad Topic", b"x")]
    with pytest.raises(InvalidMessageError):
        store.put_messages(messages)
    _assert_nothing_written(store, before, queues)


def test_put_batch_larger_than_a_segment_is_spread_over_segments(store):
    bodies = [b"%05d" % i * 200 for i in range(100)]  # 1000-byte bodies, ~110 KiB in all
    result = store.put_batch("TopicBig", bodies, queue_id=3)
    assert_batch_matches_reads(store, result, bodies, "TopicBig")
    assert store.stats()["segments"] >= 2
    assert [m.body for m in store.iter_messages()] == bodies
