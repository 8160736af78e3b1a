"""The recovery scan's per-queue offsets (codec.queue_ranges, commitlog.queue_offset_ranges) and
the index slot table rebuilt on a roll back: the same answers as the exact (slow) way."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore import _codec_py
from rocketstore.commitlog import queue_offset_ranges
from rocketstore.errors import CorruptRecordError

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TOPICS = ["a", "ab", "abcdefgh", "abcdefghi", "%RETRY%group-x", "%RETRY%group-y", "T" * 127]
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
PREPARED = 1 << 2  # sysFlag TRANSACTION_PREPARED_TYPE: no ConsumeQueue unit


@pytest.fixture
def codec(impl):
    return impl.codec


def batch(*records):
    """(buffer, rows): records encoded with the pure codec (kwargs dicts), each at its offset."""
    buf = bytearray()
    for r in records:
        buf += _codec_py.encode_record(
            **{"body": b"x", "topic": "TopicTest", "physical_offset": len(buf), **r}
        )
    rows, stop, _reason = _codec_py.decode_batch(bytes(buf), 0)
    assert stop == len(buf) and len(rows) == len(records)
    return bytes(buf), rows


def exact_ranges(records):
    """{(topic, queue id): (first row, low, high)} the slow way."""
    out: dict[tuple[str, int], list[int]] = {}
    for i, r in enumerate(records):
        key = (r.get("topic", "TopicTest"), r.get("queue_id", 0))
        q = r.get("queue_offset", 0)
        got = out.setdefault(key, [i, q, q])
        got[1], got[2] = min(got[1], q), max(got[2], q)
    return {k: tuple(v) for k, v in out.items()}


queue_records = st.lists(
    st.fixed_dictionaries(
        {
            "topic": st.sampled_from(TOPICS),
            "queue_id": st.integers(0, 3) | st.integers(INT32_MIN, INT32_MAX),
            "queue_offset": st.integers(0, 3),
        }
    ),
    max_size=40,
)


@given(queue_records)
@SETTINGS
def test_queue_ranges_match_an_exact_grouping_in_both_twins(records):
    from rocketstore import _impl

    buf, rows = batch(*records)
    expected = exact_ranges(records)
    twins = [_codec_py] + ([_impl.COMPILED.codec] if _impl.COMPILED is not None else [])
    for twin in twins:
        first, low, high = twin.queue_ranges(buf, rows, twin.queue_keys(buf, rows))
        assert first.dtype == low.dtype == high.dtype == np.int64
        assert first.tolist() == sorted(v[0] for v in expected.values())  # order of first record
        got = {
            (records[f].get("topic"), records[f].get("queue_id")): (f, lo, hi)
            for f, lo, hi in zip(first.tolist(), low.tolist(), high.tolist())
        }
        assert got == expected


def test_queue_ranges_refuse_a_shared_key_and_outside_topics(codec):
    buf, rows = batch({"topic": "TopicA"}, {"topic": "TopicB"}, {"topic": "TopicA", "queue_id": 1})
    # two queues that share a key (forced here; FNV-1a 64 collisions are rare): None, group exactly
    assert codec.queue_ranges(buf, rows, np.zeros(3, dtype=np.uint64)) is None
    assert codec.queue_ranges(buf, rows, np.array([5, 6, 5], dtype=np.uint64)) is None  # queue ids differ
    empty = codec.queue_ranges(buf, rows[:0], np.zeros(0, dtype=np.uint64))
    assert [len(c) for c in empty] == [0, 0, 0]
    with pytest.raises(ValueError):
        codec.queue_ranges(buf, rows, np.zeros(2, dtype=np.uint64))
    for field, value in (("topic_pos", len(buf) - 2), ("topic_pos", -1), ("topic_len", -3)):
        bad = rows.copy()
        bad[field][1] = value
        with pytest.raises(CorruptRecordError):
            codec.queue_ranges(buf, bad, codec.queue_keys(buf, rows))


def test_queue_offset_ranges_skip_prepared_and_implausible_records_and_group_colliding_keys(codec):
    buf, rows = batch(
        {"topic": "TopicA", "queue_offset": 0},
        {"topic": "TopicA", "queue_offset": 7, "sys_flag": PREPARED},  # no unit: not counted
        {"topic": "TopicB", "queue_offset": 0},
        {"topic": "TopicA", "queue_offset": 1},
        {"topic": "TopicB", "queue_offset": 10**12},  # no CommitLog this small holds it: skipped
    )
    want = [("TopicA", 0, 0, 1), ("TopicB", 0, 0, 0)]
    assert queue_offset_ranges(codec, buf, rows, 0) == want
    assert queue_offset_ranges(codec, buf, rows, 0, codec.queue_keys(buf, rows)) == want
    # keys that collide take the exact grouping and give the same answer
    assert sorted(queue_offset_ranges(codec, buf, rows, 0, np.zeros(5, dtype=np.uint64))) == want
    assert queue_offset_ranges(codec, buf, rows[:0], 0) == []
