"""The recovery scan's per-queue offsets (scan.queue_ranges, recordscan.queue_offset_ranges) and
the index slot table rebuilt on a roll back: the same answers as the exact (slow) way."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore.errors import CorruptRecordError
from rocketstore.format import _codec_py, _scan_py
from rocketstore.log.recordscan import queue_offset_ranges

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TOPICS = ["a", "ab", "abcdefgh", "abcdefghi", "%RETRY%group-x", "%RETRY%group-y", "T" * 127]
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
PREPARED = 1 << 2  # sysFlag TRANSACTION_PREPARED_TYPE: no ConsumeQueue unit


@pytest.fixture
def codec(impl):
    return impl.codec


@pytest.fixture
def scan(impl):
    return impl.scan


def _twins():
    """(codec, scan) of each implementation built: the pure one first."""
    from rocketstore import _impl

    return [(i.codec, i.scan) for i in (_impl.PURE, _impl.COMPILED) if i is not None]


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

    buf, rows = batch(*records)
    expected = exact_ranges(records)
    for _codec, twin_scan in _twins():
        first, low, high = twin_scan.queue_ranges(buf, rows, twin_scan.queue_keys(buf, rows))
        assert first.dtype == low.dtype == high.dtype == np.int64
        assert first.tolist() == sorted(v[0] for v in expected.values())  # order of first record
        got = {
            (records[f].get("topic"), records[f].get("queue_id")): (f, lo, hi)
            for f, lo, hi in zip(first.tolist(), low.tolist(), high.tolist())
        }
        assert got == expected


def test_queue_ranges_refuse_a_shared_key_and_outside_topics(scan):
    buf, rows = batch({"topic": "TopicA"}, {"topic": "TopicB"}, {"topic": "TopicA", "queue_id": 1})
    # two queues that share a key (forced here; FNV-1a 64 collisions are rare): None, group exactly
    assert scan.queue_ranges(buf, rows, np.zeros(3, dtype=np.uint64)) is None
    assert scan.queue_ranges(buf, rows, np.array([5, 6, 5], dtype=np.uint64)) is None  # queue ids differ
    empty = scan.queue_ranges(buf, rows[:0], np.zeros(0, dtype=np.uint64))
    assert [len(c) for c in empty] == [0, 0, 0]
    with pytest.raises(ValueError):
        scan.queue_ranges(buf, rows, np.zeros(2, dtype=np.uint64))
    for field, value in (("topic_pos", len(buf) - 2), ("topic_pos", -1), ("topic_len", -3)):
        bad = rows.copy()
        bad[field][1] = value
        with pytest.raises(CorruptRecordError):
            scan.queue_ranges(buf, bad, scan.queue_keys(buf, rows))


def test_queue_offset_ranges_skip_prepared_and_implausible_records_and_group_colliding_keys(scan):
    buf, rows = batch(
        {"topic": "TopicA", "queue_offset": 0},
        {"topic": "TopicA", "queue_offset": 7, "sys_flag": PREPARED},  # no unit: not counted
        {"topic": "TopicB", "queue_offset": 0},
        {"topic": "TopicA", "queue_offset": 1},
        {"topic": "TopicB", "queue_offset": 10**12},  # no CommitLog this small holds it: skipped
    )
    want = [("TopicA", 0, 0, 1), ("TopicB", 0, 0, 0)]
    assert queue_offset_ranges(scan, buf, rows, 0) == want
    assert queue_offset_ranges(scan, buf, rows, 0, scan.queue_keys(buf, rows)) == want
    # keys that collide take the exact grouping and give the same answer
    assert sorted(queue_offset_ranges(scan, buf, rows, 0, np.zeros(5, dtype=np.uint64))) == want
    assert queue_offset_ranges(scan, buf, rows[:0], 0) == []


# ---- verify_scan: decode_batch (CRCs checked) and field_problems in one pass, as columns ----


def scan_the_slow_way(codec, scan, buf, lo, hi, base, segment_size, max_records):
    rows, stop, reason = codec.decode_batch(buf, lo, hi, check_crc=True, max_records=max_records)
    flags, keys = scan.field_problems(buf, rows, base, segment_size)
    offsets = base + rows["position"]
    tx = rows["sys_flag"] & codec.SYSFLAG_TRANSACTION_MASK
    units = np.where((tx == codec.TRANSACTION_PREPARED_TYPE) | (tx == codec.TRANSACTION_ROLLBACK_TYPE), 1, 0)
    q = rows["queue_offset"]
    units |= np.where((q < 0) | (q > offsets // codec.RECORD_FIXED_LENGTH), 2, 0)
    cols = (offsets, rows["size"], rows["queue_id"], q, keys, rows["store_timestamp"], flags, units)
    return [c.tolist() for c in cols], stop, reason


def check_scan(codec, scan, buf, lo=0, hi=None, base=0, segment_size=2**63 - 1, max_records=-1):
    hi = len(buf) if hi is None else hi
    cols, stop, reason = scan.verify_scan(
        buf, lo, hi, base=base, segment_size=segment_size, max_records=max_records
    )
    dtypes = [c.dtype for c in cols]
    assert dtypes == [np.int64, np.int32, np.int32, np.int64, np.uint64, np.int64, np.uint8, np.uint8]
    assert ([c.tolist() for c in cols], stop, reason) == scan_the_slow_way(
        codec, scan, buf, lo, hi, base, segment_size, max_records
    )
    return cols, stop, reason


def hostile_buffer(records, flips):
    """The records encoded one after another, with hostile bytes written over them (wherever
    they land, the twins must give the same answer and never crash), then 12 zero bytes."""
    buf = bytearray()
    for r in records:
        buf += _codec_py.encode_record(**r)
    for at, value in flips:
        if buf:
            buf[at % len(buf)] = value
    return bytes(buf) + b"\0" * 12


scan_records = st.lists(
    st.fixed_dictionaries(
        {
            "topic": st.sampled_from(TOPICS + ["bad topic!"]),
            "queue_id": st.integers(0, 3),
            "queue_offset": st.integers(-2, 3) | st.integers(0, 2**62),
            "sys_flag": st.sampled_from([0, 4, 8, 12, 1 << 20]),
            "body": st.binary(max_size=40),
            "properties": st.sampled_from([b"", b"KEYS\x01k\x02", b"\xff\xfe\x01x\x02"]),
            "physical_offset": st.integers(0, 3),
            "store_timestamp": st.integers(-5, 10),
        }
    ),
    max_size=12,
)


@given(
    scan_records,
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    st.integers(0, 2**40),
    st.integers(-1, 14),
)
@SETTINGS
def test_verify_scan_is_decode_batch_and_field_problems_in_both_twins(records, flips, base, max_records):

    buf = hostile_buffer(records, flips)
    twins = _twins()
    got = [
        check_scan(*twin, buf, base=base, segment_size=len(buf) + 100, max_records=max_records)
        for twin in twins
    ]
    assert all(
        [c.tolist() for c in g[0]] == [c.tolist() for c in got[0][0]] and g[1:] == got[0][1:] for g in got
    )
    for lo, hi in ((1, len(buf)), (0, min(len(buf), 90)), (len(buf), len(buf))):  # off a record, tiny, empty
        for twin in twins:
            check_scan(*twin, buf, lo, hi)


def test_verify_scan_grows_past_its_first_columns_and_checks_its_arguments(codec, scan):
    size = len(_codec_py.encode_record(topic="TopicTest", body=b""))
    buf = b"".join(
        _codec_py.encode_record(topic="TopicTest", body=b"", queue_offset=i, physical_offset=i * size)
        for i in range(5000)
    )
    cols, stop, reason = check_scan(codec, scan, buf)
    assert (len(cols[0]), stop, reason) == (5000, len(buf), codec.STOP_LIMIT)
    assert not cols[6].any() and not cols[7].any()  # every record whole and consumable
    cols, stop, reason = check_scan(codec, scan, buf, max_records=4097)
    assert len(cols[0]) == 4097 and reason == codec.STOP_LIMIT
    with pytest.raises(ValueError):
        scan.verify_scan(buf, 0, len(buf) + 1)
    with pytest.raises(TypeError):
        scan.verify_scan(buf, 0, len(buf), max_records=1.5)


# ---- check_units: each ConsumeQueue unit against the records verify found ----


def _units(phys, sizes):
    from rocketstore.queues.consumequeue import CQ_UNIT_DTYPE

    units = np.zeros(len(phys), dtype=CQ_UNIT_DTYPE)
    units["commitlog_offset"] = phys
    units["size"] = sizes
    units["tags_code"] = 99
    return units


@given(
    st.lists(st.integers(0, 60), max_size=30, unique=True),
    st.lists(st.tuples(st.integers(-2, 64), st.sampled_from([0, 1, 2, 3, 0x7FFFFFFF])), max_size=30),
    st.integers(0, 3),
    st.sampled_from([7, 2**64 - 1]),
    st.integers(0, 5),
    st.booleans(),
    st.lists(st.integers(-2, 64), max_size=4),
    st.integers(-1, 6),
)
@SETTINGS
def test_check_units_twins_agree_with_a_lookup_per_unit(
    positions, units, queue_id, key, first, ascending, damaged, low
):
    from rocketstore.queues.consumequeue import PLACEHOLDER_SIZE

    positions = sorted(positions)
    if ascending:
        units.sort()
    # the found records: sizes, queue ids, offsets and keys that match some units and not others;
    # every seventh gets no unit (PREPARED, ROLLBACK or an implausible queue offset)
    sizes = np.array([p % 3 for p in positions], dtype=np.int32)
    qids = np.array([p % 2 for p in positions], dtype=np.int32)
    qoffsets = np.array([p % 5 for p in positions], dtype=np.int64)
    keys = np.array([7 if p % 4 else 2**64 - 1 for p in positions], dtype=np.uint64)
    flags = np.array([1 if p % 7 == 3 else 0 for p in positions], dtype=np.uint8)
    found = {p: i for i, p in enumerate(positions)}
    bad_records = set(damaged)
    want = []
    for i, (x, size) in enumerate(units):
        at = found.get(x)
        ok = (
            at is not None
            and not flags[at]
            and sizes[at] == size
            and qids[at] == queue_id
            and int(keys[at]) == key
            and qoffsets[at] == first + i
        )
        ok = ok or x in bad_records or x < low
        lost = x == 0 and size == PLACEHOLDER_SIZE
        want.append(2 if lost else 0 if ok else 1)
    pos = np.array(positions, dtype=np.int64)
    cq = _units([u[0] for u in units], [u[1] for u in units])
    bad = np.array(sorted(set(damaged)), dtype=np.int64)
    digests = []
    for _codec, twin_scan in _twins():
        d = twin_scan.record_digests(qids, qoffsets, sizes, keys, flags)
        assert d.dtype == np.uint64 and len(d) == len(positions)
        digests.append(d.tolist())
        got = twin_scan.check_units(pos, d, cq, queue_id, key, first, bad, low)
        assert got.dtype == np.uint8 and got.tolist() == want, twin_scan.__name__
        assert (twin_scan.UNIT_OK, twin_scan.UNIT_BAD, twin_scan.UNIT_LOST) == (0, 1, 2)
    assert all(d == digests[0] for d in digests)  # one digest, whichever twin wrote it


def test_record_digests_tell_every_field_apart(scan):
    """A digest changes with each field it covers, and a record that gets no unit has none a
    unit can match."""
    one = dict(q=np.array([3], np.int32), o=np.array([5], np.int64), s=np.array([300], np.int32))
    key = np.array([123], np.uint64)
    base = scan.record_digests(one["q"], one["o"], one["s"], key, np.zeros(1, np.uint8))
    for changed in (
        (one["q"] + 1, one["o"], one["s"], key),
        (one["q"], one["o"] + 1, one["s"], key),
        (one["q"], one["o"], one["s"] + 1, key),
        (one["q"], one["o"], one["s"], key + np.uint64(1)),
    ):
        assert scan.record_digests(*changed, np.zeros(1, np.uint8))[0] != base[0]
    salted = scan.record_digests(one["q"], one["o"], one["s"], key, np.ones(1, np.uint8))
    assert salted[0] != base[0]
    pos = np.array([1000], np.int64)
    units = _units([1000], [300])
    nothing = np.empty(0, np.int64)
    assert scan.check_units(pos, base, units, 3, 123, 5, nothing, 0).tolist() == [scan.UNIT_OK]
    assert scan.check_units(pos, salted, units, 3, 123, 5, nothing, 0).tolist() == [scan.UNIT_BAD]


def test_check_units_refuses_bad_columns(scan):
    one = np.zeros(1, dtype=np.int64)
    units = _units([0], [1])
    with pytest.raises(ValueError):
        scan.check_units(one, one[:0].astype(np.uint64), units, 0, 0, 0, one[:0], 0)
    with pytest.raises(ValueError):
        scan.check_units(one, one.astype(np.uint64), one, 0, 0, 0, one[:0], 0)  # not units
    with pytest.raises(ValueError):
        scan.record_digests(one[:0].astype(np.int32), one, one.astype(np.int32), one, one)


def test_queue_key_is_the_records_queue_key(codec, scan):
    from rocketstore.format._scan_py import queue_key

    for topic, qid in (("T", 0), ("Topic-ü-名", 7), ("x" * 120, 2**31 - 1)):
        record = codec.encode_record(topic=topic, body=b"b", queue_id=qid)
        rows = codec.decode_batch(record)[0]
        assert queue_key(topic, qid) == int(scan.queue_keys(record, rows)[0])
    # a directory name os.listdir escaped hashes as its bytes; a lone surrogate does not raise
    assert queue_key(b"T\xff".decode("utf-8", "surrogateescape"), 1) != queue_key("T", 1)
    assert isinstance(queue_key("T\ud800", 1), int)


@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "topic": st.sampled_from(TOPICS[:3]),
                "queue_id": st.integers(0, 2),
                "queue_offset": st.integers(-1, 3) | st.integers(2**40, 2**62),
                "sys_flag": st.sampled_from([0, 4, 8, 12]),
            }
        ),
        max_size=30,
    ),
    st.integers(0, 2**40),
)
@SETTINGS
def test_queue_ranges_with_a_base_count_only_records_that_get_a_unit(records, base):

    buf, rows = batch(*records)
    counted = [
        i
        for i, r in enumerate(records)
        if r["sys_flag"] not in (4, 12) and 0 <= r["queue_offset"] <= (base + int(rows["position"][i])) // 91
    ]
    expected = exact_ranges([records[i] for i in counted])
    expected = {k: (counted[f], lo, hi) for k, (f, lo, hi) in expected.items()}
    for _codec, twin_scan in _twins():
        first, low, high = twin_scan.queue_ranges(buf, rows, twin_scan.queue_keys(buf, rows), base)
        got = {
            (records[f]["topic"], records[f]["queue_id"]): (f, lo, hi)
            for f, lo, hi in zip(first.tolist(), low.tolist(), high.tolist())
        }
        assert got == expected


# ---- the index slot table rebuilt from its items (an abnormal open's roll back) ----


@given(
    st.integers(1, 9),
    st.lists(st.integers(-(2**31), 2**31 - 1) | st.integers(0, 20), max_size=40),
    st.binary(min_size=0, max_size=8),
    st.lists(st.booleans(), min_size=9, max_size=9),
)
@SETTINGS
def test_rebuild_slots_twins_head_each_slot_with_its_newest_item(slot_count, hashes, garbage, right):
    import struct

    from rocketstore import _impl
    from rocketstore.queues import _index_py

    count = len(hashes) + 1
    items_start = _index_py.HEADER_SIZE + slot_count * _index_py.HASH_SLOT_SIZE
    file = bytearray(b"\xee" * (items_start + count * _index_py.INDEX_ITEM_SIZE) + garbage)
    for i, h in enumerate(hashes, start=1):
        struct.pack_into(">iqii", file, items_start + i * _index_py.INDEX_ITEM_SIZE, h, i, 0, 0)
    want = [0] * slot_count
    for i, h in enumerate(hashes, start=1):
        want[h % slot_count] = i  # Python's modulo, as numpy's: never negative
    for s in range(slot_count):  # some slots right already (a roll back), the others garbage
        if right[s]:
            struct.pack_into(">i", file, _index_py.HEADER_SIZE + s * _index_py.HASH_SLOT_SIZE, want[s])
    before = struct.unpack_from(f">{slot_count}i", file, _index_py.HEADER_SIZE)
    changed = [s for s in range(slot_count) if before[s] != want[s]]
    expected = (0, 0)
    if changed:
        expected = (
            _index_py.HEADER_SIZE + changed[0] * _index_py.HASH_SLOT_SIZE,
            _index_py.HEADER_SIZE + (changed[-1] + 1) * _index_py.HASH_SLOT_SIZE,
        )
    twins = [_index_py] + ([_impl.COMPILED.index] if _impl.COMPILED is not None else [])
    for twin in twins:
        buf = bytearray(file)
        assert twin.rebuild_slots(buf, slot_count, count) == expected  # what was written
        slots = struct.unpack_from(f">{slot_count}i", buf, _index_py.HEADER_SIZE)
        assert list(slots) == want
        # nothing outside the slot table changed
        assert buf[: _index_py.HEADER_SIZE] == file[: _index_py.HEADER_SIZE]
        assert buf[items_start:] == file[items_start:]


def test_rebuild_slots_refuses_a_table_or_items_past_the_buffer(impl):
    index = impl.index
    size = index.HEADER_SIZE + 4 * index.HASH_SLOT_SIZE + 3 * index.INDEX_ITEM_SIZE
    index.rebuild_slots(bytearray(size), 4, 3)
    for slots, count in ((4, 4), (5, 3), (0, 1), (4, 0), (10**6, 1)):
        with pytest.raises(ValueError):
            index.rebuild_slots(bytearray(size), slots, count)
    with pytest.raises(TypeError):
        index.rebuild_slots(bytes(size), 4, 3)  # not writable


# ---- recover_scan: decode_batch, the torn-field check and queue_ranges in one pass ----

TORN = int(
    _scan_py.BAD_TOPIC
    | _scan_py.BAD_PROPERTIES_UTF8
    | _scan_py.BAD_PHYSICAL_OFFSET
    | _scan_py.BAD_SYSFLAG
    | _scan_py.BAD_PROP_CRC
)


def recover_the_slow_way(buf, lo, hi, base, segment_size, torn_from, torn_mask, max_records):
    """What CommitLog.recover did per chunk before recover_scan: decode_batch's rows, cut at the
    first torn row at or past torn_from, and each queue's range among the rest, grouped exactly."""
    rows, stop, reason = _codec_py.decode_batch(buf, lo, hi, check_crc=True, max_records=max_records)
    torn = False
    if torn_mask:
        flags, _keys = _scan_py.field_problems(buf, rows, base, segment_size)
        for i in range(len(rows)):
            if int(rows["position"][i]) >= torn_from and flags[i] & torn_mask:
                stop, reason, torn = int(rows["position"][i]), _codec_py.STOP_CORRUPT, True
                rows = rows[:i]
                break
    ranges: dict[tuple[bytes, int], list[int]] = {}
    for r in rows:
        tx = int(r["sys_flag"]) & _codec_py.SYSFLAG_TRANSACTION_MASK
        q, at = int(r["queue_offset"]), base + int(r["position"])
        if tx in (_codec_py.TRANSACTION_PREPARED_TYPE, _codec_py.TRANSACTION_ROLLBACK_TYPE):
            continue
        if q < 0 or q > at // _codec_py.RECORD_FIXED_LENGTH:
            continue
        topic_pos, topic_len = int(r["topic_pos"]), int(r["topic_len"])
        key = (buf[topic_pos : topic_pos + topic_len], int(r["queue_id"]))
        got = ranges.setdefault(key, [topic_pos, topic_len, key[1], q, q])
        got[3], got[4] = min(got[3], q), max(got[4], q)
    return len(rows), stop, reason, torn, [tuple(v) for v in ranges.values()]


@given(
    scan_records,
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    st.integers(0, 2**40),
    st.integers(-1, 14),
    st.integers(0, 2000),
    st.booleans(),
)
@SETTINGS
def test_recover_scan_is_decode_batch_the_torn_check_and_queue_ranges_in_both_twins(
    records, flips, base, max_records, torn_from, crashed
):

    buf = hostile_buffer(records, flips)
    mask = TORN if crashed else 0
    size = len(buf) + 100
    twins = [twin_scan for _codec, twin_scan in _twins()]
    for lo, hi in ((0, len(buf)), (1, len(buf)), (0, min(len(buf), 90)), (len(buf), len(buf))):
        want = recover_the_slow_way(buf, lo, hi, base, size, torn_from, mask, max_records)
        for twin_scan in twins:
            got = twin_scan.recover_scan(
                buf,
                lo,
                hi,
                base=base,
                segment_size=size,
                torn_from=torn_from,
                torn_mask=mask,
                max_records=max_records,
            )
            assert got == want, twin_scan.__name__


def test_recover_scan_spans_many_tables_of_rows_and_many_queues(codec, scan):
    # more records than one table of decoded rows (256) and more queues than the first group
    # table holds (16): every queue's range still exact, and a torn record late in the stretch
    records, buf = [], bytearray()
    for i in range(3000):
        r = {
            "topic": f"Topic{i % 40}",
            "queue_id": i % 3,
            "queue_offset": i // 120,
            "body": b"b" * (i % 17),
            "physical_offset": len(buf),
        }
        records.append(r)
        buf += _codec_py.encode_record(**r)
    torn_at = len(buf)
    buf += _codec_py.encode_record(topic="Topic1", body=b"x", physical_offset=12345)  # torn: wrong offset
    buf += _codec_py.encode_record(topic="Topic1", body=b"y", physical_offset=len(buf))
    buf = bytes(buf) + b"\0" * 16
    for torn_from, mask in ((0, TORN), (torn_at + 1, TORN), (0, 0)):
        for max_records in (-1, 300, 2999, 3000, 3001):
            want = recover_the_slow_way(buf, 0, len(buf), 0, len(buf), torn_from, mask, max_records)
            assert (
                scan.recover_scan(
                    buf, 0, len(buf), torn_from=torn_from, torn_mask=mask, max_records=max_records
                )
                == want
            )
    count, stop, reason, torn, ranges = scan.recover_scan(buf, torn_from=0, torn_mask=TORN)
    assert (count, stop, reason, torn) == (3000, torn_at, codec.STOP_CORRUPT, True)
    assert len(ranges) == 120
    with pytest.raises(ValueError):
        scan.recover_scan(buf, 0, len(buf) + 1)
    with pytest.raises(TypeError):
        scan.recover_scan(buf, 0, len(buf), max_records=1.5)


def test_recovered_chunk_groups_exactly_when_two_queues_share_a_key(codec, scan):
    from rocketstore.log.recordscan import RecoveredChunk

    buf, rows = batch(
        {"topic": "TopicA", "queue_offset": 0},
        {"topic": "TopicB", "queue_offset": 0},
        {"topic": "TopicA", "queue_offset": 1},
    )
    count, stop, _reason, torn, ranges = scan.recover_scan(buf)
    assert not torn and ranges is not None
    found = RecoveredChunk(0, stop, count, torn, ranges)
    want = [("TopicA", 0, 0, 1), ("TopicB", 0, 0, 0)]
    assert found.queue_ranges(codec, scan, buf, 0) == want
    # what recover_scan says when keys collide: None, and the chunk is decoded and grouped exactly
    assert RecoveredChunk(0, stop, count, torn, None).queue_ranges(codec, scan, buf, 0) == want
    with pytest.raises(CorruptRecordError):  # the records are not what the scan found
        RecoveredChunk(0, stop, count + 1, torn, None).queue_ranges(codec, scan, buf, 0)
