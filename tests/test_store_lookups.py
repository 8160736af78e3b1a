"""MessageStore lookups: by key and UNIQ_KEY through the index (spec §5.5), by queue offset through
the ConsumeQueue (§4), by offsetMsgId (§3.1); hash collisions, time bounds, index rolling,
reopening, and bad input."""

import gc
import itertools
import re
import weakref

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore import Message, MessageStore
from rocketstore.errors import (
    InvalidMessageError,
    InvalidMessageIdError,
    MessageNotFoundError,
    StoreClosedError,
)
from rocketstore.format._codec_py import java_hash

SEGMENT = 64 * 1024
HOST = "10.0.0.7"
PORT = 10911
SLOTS = 64
ITEMS = 256
INDEX_FILE_SIZE = 40 + SLOTS * 4 + ITEMS * 20


def open_store(path, impl, **options):
    options.setdefault("commitlog_file_size", SEGMENT)
    options.setdefault("consume_queue_units", 64)
    options.setdefault("index_slots", SLOTS)
    options.setdefault("index_count", ITEMS)
    return MessageStore(path, implementation=impl.name, store_host=HOST, store_port=PORT, **options)


@pytest.fixture
def store(tmp_path, impl):
    s = open_store(tmp_path / "store", impl)
    yield s
    s.close()


def offsets(messages):
    return [m.commitlog_offset for m in messages]


def index_files(path):
    d = path / "index"
    return sorted(p for p in d.iterdir()) if d.exists() else []


# -- query_by_key ---------------------------------------------------------------------------------


def test_query_by_key_finds_every_message_with_the_key_oldest_first(store):
    a1 = store.put("TopicK", b"a1", keys="order-1")
    store.put("TopicK", b"b", keys="order-2")
    a2 = store.put("TopicK", b"a2", keys=["x", "order-1", "y"])
    a3 = store.put_messages([Message("TopicK", b"a3", keys="order-1")])[0]
    found = store.query_by_key("TopicK", "order-1")
    assert [m.body for m in found] == [b"a1", b"a2", b"a3"]
    assert offsets(found) == [a1.commitlog_offset, a2.commitlog_offset, a3.commitlog_offset]
    assert [m.body for m in store.query_by_key("TopicK", "y")] == [b"a2"]
    assert store.query_by_key("TopicK", "order-3") == []
    assert store.query_by_key("OtherTopic", "order-1") == []


def test_query_by_key_matches_whole_tokens_split_on_single_spaces(store):
    store.put("TopicK", b"one", keys="alpha beta")
    store.put("TopicK", b"two", keys="alphabet")
    assert [m.body for m in store.query_by_key("TopicK", "alpha")] == [b"one"]
    assert [m.body for m in store.query_by_key("TopicK", "beta")] == [b"one"]
    assert [m.body for m in store.query_by_key("TopicK", "alphabet")] == [b"two"]
    assert store.query_by_key("TopicK", "alpha beta") == []
    assert store.query_by_key("TopicK", "alph") == []


def test_query_by_key_also_finds_the_unique_key(store):
    r = store.put("TopicK", b"u", keys="k")
    assert [m.body for m in store.query_by_key("TopicK", r.unique_key)] == [b"u"]


def test_query_by_key_limits_to_max_num(store):
    results = [store.put("TopicK", b"m%d" % i, keys="same") for i in range(100)]
    all_offsets = {r.commitlog_offset for r in results}
    for max_num, expect in ((1, 1), (10, 10), (32, 32), (64, 64), (65, 65), (1000, 100)):
        found = store.query_by_key("TopicK", "same", max_num=max_num)
        assert len(found) == expect, max_num
        got = offsets(found)
        assert got == sorted(got) and len(set(got)) == len(got)
        assert set(got) <= all_offsets
    assert len(store.query_by_key("TopicK", "same")) == 32


def test_hash_collision_of_keys_never_returns_the_other_key(store):
    assert java_hash("TopicK#Aa") == java_hash("TopicK#BB")
    aa = store.put("TopicK", b"aa", keys="Aa")
    bb = store.put("TopicK", b"bb", keys="BB")
    both = store.put("TopicK", b"both", keys="BB Aa")
    assert offsets(store.query_by_key("TopicK", "Aa")) == [aa.commitlog_offset, both.commitlog_offset]
    assert offsets(store.query_by_key("TopicK", "BB")) == [bb.commitlog_offset, both.commitlog_offset]


def test_longer_constructed_key_collisions_are_rechecked(store):
    keys = ["AaAaAa", "AaBBAa", "BBAaBB", "BBBBBB", "AaAaBB"]
    assert len({java_hash("TopicK#" + k) for k in keys}) == 1
    results = {k: [store.put("TopicK", k.encode() + b"%d" % i, keys=k) for i in range(3)] for k in keys}
    for k in keys:
        found = store.query_by_key("TopicK", k)
        assert offsets(found) == [r.commitlog_offset for r in results[k]]
        assert all(m.keys == k for m in found)


def test_topic_part_of_a_colliding_index_key_is_rechecked(store):
    # the index key is topic#key: topics "Aa" and "BB" make the same hash for the same key
    assert java_hash("Aa#k") == java_hash("BB#k")
    in_aa = store.put("Aa", b"in Aa", keys="k")
    in_bb = store.put("BB", b"in BB", keys="k")
    assert offsets(store.query_by_key("Aa", "k")) == [in_aa.commitlog_offset]
    assert offsets(store.query_by_key("BB", "k")) == [in_bb.commitlog_offset]
    assert store.query_by_unique_key("Aa", in_aa.unique_key).body == b"in Aa"
    with pytest.raises(MessageNotFoundError):
        store.query_by_unique_key("BB", in_aa.unique_key)


def test_colliding_entries_are_rechecked_before_max_num_is_applied(store):
    real = store.put("TopicK", b"real", keys="Aa")
    for i in range(10):  # newer colliding entries, walked first
        store.put("TopicK", b"other%d" % i, keys="BB")
    assert offsets(store.query_by_key("TopicK", "Aa", max_num=1)) == [real.commitlog_offset]
    assert len(store.query_by_key("TopicK", "BB", max_num=3)) == 3
    assert all(m.keys == "BB" for m in store.query_by_key("TopicK", "BB", max_num=64))


def test_many_colliding_entries_still_return_only_the_right_key(store):
    store.put("TopicK", b"real", keys="Aa")
    for i in range(70):  # more colliding entries than one index walk takes
        store.put("TopicK", b"other%d" % i, keys="BB")
    assert all(m.body == b"real" for m in store.query_by_key("TopicK", "Aa"))
    found = store.query_by_key("TopicK", "BB", max_num=64)
    assert len(found) == 64 and all(m.keys == "BB" for m in found)


def test_key_whose_index_hash_is_integer_min_value(store):
    # §14 vector 8: "TopicTest#OrderID1yoiddi".hashCode() == Integer.MIN_VALUE -> keyHash 0, slot 0
    assert java_hash("TopicTest#OrderID1yoiddi") == -(1 << 31)
    target = store.put("TopicTest", b"min value", keys="OrderID1yoiddi")
    # keys landing in slot 0 of 64 too (keyHash % 64 == 0), to share the bucket
    neighbours = [k for k in (f"n{i}" for i in range(2000)) if abs(java_hash("TopicTest#" + k)) % SLOTS == 0][
        :5
    ]
    assert neighbours
    others = [store.put("TopicTest", b"slot0 " + k.encode(), keys=k) for k in neighbours]
    assert [m.body for m in store.query_by_key("TopicTest", "OrderID1yoiddi")] == [b"min value"]
    assert store.query_by_key("TopicTest", "OrderID1yoiddi")[0].commitlog_offset == target.commitlog_offset
    for k, r in zip(neighbours, others):
        assert offsets(store.query_by_key("TopicTest", k)) == [r.commitlog_offset]


def test_time_bounds_are_inclusive_store_timestamps_in_ms(store):
    def put_in_a_new_millisecond(previous, body):
        for _ in range(1_000_000):  # a busy loop on the store clock, no sleep
            r = store.put("TopicT", b"filler", keys="filler")
            if r.store_timestamp > previous:
                break
        else:
            pytest.fail("the store clock did not move")
        return store.put("TopicT", body, keys="timed")

    m0 = store.put("TopicT", b"t0", keys="timed")
    m1 = put_in_a_new_millisecond(m0.store_timestamp, b"t1")
    m2 = put_in_a_new_millisecond(m1.store_timestamp, b"t2")
    t0, t1, t2 = m0.store_timestamp, m1.store_timestamp, m2.store_timestamp
    assert t0 < t1 < t2

    def bodies(**kw):
        return [m.body for m in store.query_by_key("TopicT", "timed", **kw)]

    assert bodies() == [b"t0", b"t1", b"t2"]
    assert bodies(begin=t0, end=t2) == [b"t0", b"t1", b"t2"]
    assert bodies(begin=t1) == [b"t1", b"t2"]
    assert bodies(begin=t1, end=t1) == [b"t1"]
    assert bodies(end=t1) == [b"t0", b"t1"]
    assert bodies(end=t1 - 1) == [b"t0"]
    assert bodies(begin=t0 + 1, end=t2 - 1) == [b"t1"]
    assert bodies(begin=t2 + 1) == []
    assert bodies(end=t0 - 1) == []


# -- query_by_unique_key ----------------------------------------------------------------------------


def test_query_by_unique_key_finds_single_batch_and_put_messages(store):
    single = store.put("TopicU", b"single", tags="T")
    batch = store.put_batch("TopicU", [b"b0", b"b1", b"b2"])
    many = store.put_messages([Message("TopicU", b"pm0"), Message("TopicU", b"pm1", keys="k")])
    assert store.query_by_unique_key("TopicU", single.unique_key).body == b"single"
    for k, uk in enumerate(batch.unique_keys):
        m = store.query_by_unique_key("TopicU", uk)
        assert m.body == b"b%d" % k and m.unique_key == uk
    assert store.query_by_unique_key("TopicU", many[1].unique_key).body == b"pm1"


def test_query_by_unique_key_with_a_caller_given_key(store):
    given = "AC1100020001000000000000000000AB"
    store.put("TopicU", b"mine", properties={"UNIQ_KEY": given})
    assert store.query_by_unique_key("TopicU", given).body == b"mine"


def test_query_by_unique_key_misses_raise_not_found(store):
    r = store.put("TopicU", b"x")
    with pytest.raises(MessageNotFoundError):
        store.query_by_unique_key("TopicU", "0A6C73D91F905E2DE80C47B760000001")
    with pytest.raises(MessageNotFoundError):
        store.query_by_unique_key("OtherTopic", r.unique_key)
    with pytest.raises(MessageNotFoundError):
        store.query_by_unique_key("NoTopic", "not-an-id")


def test_unique_key_of_one_message_used_as_another_key_is_not_a_unique_key_hit(store):
    a = store.put("TopicU", b"a")
    store.put("TopicU", b"b", keys=a.unique_key)  # a KEYS token equal to a's UNIQ_KEY
    assert store.query_by_unique_key("TopicU", a.unique_key).body == b"a"
    assert [m.body for m in store.query_by_key("TopicU", a.unique_key)] == [b"a", b"b"]


# -- get_by_queue_offset --------------------------------------------------------------------------


def test_get_by_queue_offset_reads_each_queue_position(store):
    results = [store.put("TopicQ", b"q%d" % i, queue_id=i % 3) for i in range(30)]
    for r in results:
        m = store.get_by_queue_offset("TopicQ", r.queue_id, r.queue_offset)
        assert m.commitlog_offset == r.commitlog_offset and m.queue_offset == r.queue_offset
        assert m.queue_id == r.queue_id
    for bad in ((0, 10), (0, 11), (3, 0), (0, 10**12)):
        with pytest.raises(MessageNotFoundError):
            store.get_by_queue_offset("TopicQ", *bad)
    with pytest.raises(MessageNotFoundError):
        store.get_by_queue_offset("NoTopic", 0, 0)
    with pytest.raises((MessageNotFoundError, InvalidMessageError)):
        store.get_by_queue_offset("TopicQ", 0, -1)


# -- get_by_msg_id --------------------------------------------------------------------------------


def test_get_by_msg_id_for_every_put_path(store):
    single = store.put("TopicM", b"s")
    batch = store.put_batch("TopicM", [b"b0", b"b1"])
    many = store.put_messages([Message("TopicM", b"p")])
    pairs = [
        (single.msg_id, b"s"),
        (batch.msg_ids[0], b"b0"),
        (batch.msg_ids[1], b"b1"),
        (many[0].msg_id, b"p"),
    ]
    for msg_id, body in pairs:
        assert re.fullmatch(r"0A00000700002A9F[0-9A-F]{16}", msg_id), msg_id
        m = store.get_by_msg_id(msg_id)
        assert m.body == body and m.msg_id == msg_id


def test_get_by_msg_id_misses(store):
    r = store.put("TopicM", b"s")
    past = "0A00000700002A9F" + format(store.max_offset + 1000, "016X")
    with pytest.raises(MessageNotFoundError):
        store.get_by_msg_id(past)
    inside = "0A00000700002A9F" + format(r.commitlog_offset + 1, "016X")  # not a record start
    with pytest.raises(MessageNotFoundError):
        store.get_by_msg_id(inside)
    other_host = "0A00000800002A9F" + format(r.commitlog_offset, "016X")
    with pytest.raises(MessageNotFoundError):
        store.get_by_msg_id(other_host)
    for bad in ("xyz", "0A0000070000", "G" * 32):
        with pytest.raises(InvalidMessageIdError):
            store.get_by_msg_id(bad)


# -- index rolling, reopen --------------------------------------------------------------------------


def test_index_rolls_over_small_files_and_every_key_is_found(tmp_path, impl, rng):
    path = tmp_path / "store"
    with open_store(path, impl) as s:
        results = []
        for i in range(600):  # 3 index items each (UNIQ_KEY, own key, common): ~7 files
            r = s.put("TopicIdx", b"i%d" % i, keys=[f"key-{i}", "common"], queue_id=i % 2)
            results.append(r)
        for i in rng.sample(range(600), 100) + [0, 1, 599]:
            found = s.query_by_key("TopicIdx", f"key-{i}")
            assert offsets(found) == [results[i].commitlog_offset], i
            assert s.query_by_unique_key("TopicIdx", results[i].unique_key).body == b"i%d" % i
        common = s.query_by_key("TopicIdx", "common", max_num=64)
        got = offsets(common)
        assert len(got) == 64 and got == sorted(got) and len(set(got)) == 64
        assert set(got) <= {r.commitlog_offset for r in results}
    files = index_files(path)
    assert len(files) >= 7  # 1800 items, at most 255 per file
    names = [p.name for p in files]
    assert all(re.fullmatch(r"\d{17}", n) for n in names) and len(set(names)) == len(names)
    assert all(p.stat().st_size == INDEX_FILE_SIZE for p in files)
    with open_store(path, impl) as s:
        assert [p.name for p in index_files(path)][: len(names)] == names
        for i in rng.sample(range(600), 50):
            assert offsets(s.query_by_key("TopicIdx", f"key-{i}")) == [results[i].commitlog_offset]


def test_every_lookup_works_after_reopen_and_nothing_is_indexed_twice(tmp_path, impl):
    path = tmp_path / "store"
    with open_store(path, impl) as s:
        rs = [s.put("TopicRe", b"r%d" % i, keys=f"k{i % 5}", tags="T", queue_id=i % 2) for i in range(40)]
    for _ in range(2):
        with open_store(path, impl) as s:
            for k in range(5):
                expect = [r.commitlog_offset for i, r in enumerate(rs) if i % 5 == k]
                assert offsets(s.query_by_key("TopicRe", f"k{k}")) == expect
            for i, r in enumerate(rs):
                assert s.query_by_unique_key("TopicRe", r.unique_key).body == b"r%d" % i
                assert s.get_by_queue_offset("TopicRe", r.queue_id, r.queue_offset).body == b"r%d" % i
                assert s.get_by_msg_id(r.msg_id).body == b"r%d" % i
    with open_store(path, impl) as s:
        new = s.put("TopicRe", b"new", keys="k0", queue_id=0)
        found = s.query_by_key("TopicRe", "k0")
        assert offsets(found)[-1] == new.commitlog_offset and len(found) == 9


def test_lookups_on_a_read_only_store(tmp_path, impl):
    path = tmp_path / "store"
    with open_store(path, impl) as s:
        rs = [s.put("TopicRo", b"r%d" % i, keys="k", queue_id=0) for i in range(10)]
    with MessageStore(
        path,
        read_only=True,
        implementation=impl.name,
        consume_queue_units=64,
        index_slots=SLOTS,
        index_count=ITEMS,
    ) as ro:
        assert offsets(ro.query_by_key("TopicRo", "k")) == [r.commitlog_offset for r in rs]
        assert ro.query_by_unique_key("TopicRo", rs[3].unique_key).body == b"r3"
        assert ro.get_by_queue_offset("TopicRo", 0, 9).body == b"r9"
        assert ro.get_by_msg_id(rs[5].msg_id).body == b"r5"
        # the units on disk are read in one call; past them, the careful path decides
        assert (
            ro._codec.queue_message(ro._opened.queues, "TopicRo", 0, 9, ro._opened.segments, None).body
            == b"r9"
        )
        assert ro._codec.queue_message(ro._opened.queues, "TopicRo", 0, 10, ro._opened.segments, None) is None


def test_a_following_reader_reads_the_writers_new_messages_by_key_and_queue_offset(tmp_path, impl):
    path = tmp_path / "store"
    with open_store(path, impl) as w:
        first = [w.put("TopicRo", b"a%d" % i, keys="k", queue_id=0) for i in range(5)]
        w.flush()
        options = dict(consume_queue_units=64, index_slots=SLOTS, index_count=ITEMS)
        with MessageStore(path, read_only=True, implementation=impl.name, **options) as ro:
            assert ro.get_by_queue_offset("TopicRo", 0, 4).body == b"a4"
            more = [w.put("TopicRo", b"b%d" % i, keys="k", queue_id=0) for i in range(5)]
            w.flush()
            bodies = [b"a%d" % i for i in range(5)] + [b"b%d" % i for i in range(5)]
            for i, r in enumerate(first + more):
                m = ro.get_by_queue_offset("TopicRo", 0, i)
                assert (m.commitlog_offset, m.body) == (r.commitlog_offset, bodies[i])
            assert offsets(ro.query_by_key("TopicRo", "k")) == [r.commitlog_offset for r in first + more]
            with pytest.raises(MessageNotFoundError):
                ro.get_by_queue_offset("TopicRo", 0, 10)


# -- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.query_by_key(123, "k"),
        lambda s: s.query_by_key("TopicE", 5),
        lambda s: s.query_by_key("TopicE", None),
        lambda s: s.query_by_key("TopicE", b"k"),
        lambda s: s.query_by_key("TopicE", "k", max_num="3"),
        lambda s: s.query_by_key("TopicE", "k", max_num=0),
        lambda s: s.query_by_key("TopicE", "k", begin="0"),
        lambda s: s.query_by_key("TopicE", "k", end=1.5),
        lambda s: s.query_by_unique_key("TopicE", None),
        lambda s: s.query_by_unique_key(None, "AC1100020001000000000000000000AB"),
        lambda s: s.get_by_queue_offset("TopicE", "0", 0),
        lambda s: s.get_by_queue_offset("TopicE", 0, "0"),
        lambda s: s.get_by_queue_offset("TopicE", 0, 1.0),
        lambda s: s.get_by_queue_offset(None, 0, 0),
    ],
)
def test_bad_argument_types_raise_type_or_invalid_message_errors(store, call):
    store.put("TopicE", b"x", keys="k", queue_id=0)
    with pytest.raises((TypeError, InvalidMessageError)):
        call(store)


def test_get_by_msg_id_of_a_non_str_raises(store):
    with pytest.raises((TypeError, InvalidMessageIdError)):
        store.get_by_msg_id(12345)


def test_lookups_on_a_closed_store_raise(tmp_path, impl):
    s = open_store(tmp_path / "store", impl)
    r = s.put("TopicE", b"x", keys="k", queue_id=0)
    s.close()
    for call in (
        lambda: s.query_by_key("TopicE", "k"),
        lambda: s.query_by_unique_key("TopicE", r.unique_key),
        lambda: s.get_by_queue_offset("TopicE", 0, 0),
        lambda: s.get_by_msg_id(r.msg_id),
    ):
        with pytest.raises(StoreClosedError):
            call()


# -- the one-call lookups (codec.queue_message, key_lookup, key_messages) -------------------------


def test_a_key_indexed_twice_for_one_message_returns_it_once(store):
    store.put("TopicD", b"twice", keys=["dup", "dup"])
    given = "AC1100020001000000000000000000CD"
    store.put("TopicD", b"own", keys=given, properties={"UNIQ_KEY": given})
    assert [m.body for m in store.query_by_key("TopicD", "dup")] == [b"twice"]
    assert [m.body for m in store.query_by_key("TopicD", given)] == [b"own"]
    assert store.query_by_unique_key("TopicD", given).body == b"own"


def test_lookups_of_text_no_record_holds(store):
    store.put("TopicE", b"x", keys="k")
    assert store.query_by_key("TopicE", "k\ud800") == []  # a lone surrogate encodes to nothing
    assert store.query_by_key("TopicE\ud800", "k") == []
    with pytest.raises(MessageNotFoundError):
        store.get_by_queue_offset("TopicE\ud800", 0, 0)


@pytest.mark.parametrize(
    "args",
    [
        ("TopicQ", True, 0),  # bool queue id: the careful path refuses it
        ("TopicQ", 0, True),
        ("TopicQ", 0, -1),
        ("TopicQ", 0, 2**63),
        ("TopicQ", 2**31, 0),
        ("TopicQ", 0, 5),  # past the queue's end
        ("NoTopic", 0, 0),
        (b"TopicQ", 0, 0),
    ],
)
def test_queue_message_leaves_every_unusual_case_to_the_careful_path(store, impl, args):
    store.put("TopicQ", b"q0", queue_id=0)
    assert store.get_by_queue_offset("TopicQ", 0, 0).body == b"q0"  # dispatched by now
    topic, queue_id, queue_offset = args
    assert (
        impl.codec.queue_message(
            store._opened.queues, topic, queue_id, queue_offset, store._opened.segments, store._opened.core
        )
        is None
    )
    assert impl.codec.queue_message(None, "TopicQ", 0, 0, store._opened.segments, store._opened.core) is None
    assert (
        impl.codec.queue_message(
            store._opened.queues, "TopicQ", 0, 0, store._opened.segments, store._opened.core
        ).body
        == b"q0"
    )


@pytest.mark.parametrize(
    "args",
    [
        ("", "k", 32, 0, None),
        ("TopicK", "", 32, 0, None),
        (b"TopicK", "k", 32, 0, None),
        ("TopicK", "k", 0, 0, None),
        ("TopicK", "k", True, 0, None),
        ("TopicK", "k", 2**63, 0, None),
        ("TopicK", "k", 32, -1, None),
        ("TopicK", "k", 32, 0, -1),
        ("TopicK", "k", 32, 0, 2**63),
        ("TopicK", "k", 32.0, 0, None),
    ],
)
def test_key_lookup_leaves_arguments_to_check_to_the_careful_path(store, impl, args):
    store.put("TopicK", b"x", keys="k")
    assert len(store.query_by_key("TopicK", "k")) == 1  # dispatched by now
    segments, core = store._opened.segments, store._opened.core
    services = (None, store._opened.index)
    assert impl.codec.key_lookup(services, segments, core, *args, 64) is None
    assert impl.codec.key_lookup(store._opened.index, segments, core, "TopicK", "k", 32, 0, None, 64) is None
    found = impl.codec.key_lookup(services, segments, core, "TopicK", "k", 32, 0, None, 64)
    assert [m.body for m in found] == [b"x"]
    assert impl.codec.key_lookup((), segments, core, "TopicK", "k", 32, 0, None, 64) == []


def test_key_lookup_catches_the_dispatcher_up_first(tmp_path, impl):
    # no background dispatch: only a lookup (or close) dispatches what was put
    s = open_store(tmp_path / "store", impl, dispatch_interval_ms=0)
    try:
        dispatcher, segments, core = s._opened.dispatcher, s._opened.segments, s._opened.core
        services = (None, s._opened.index)
        assert dispatcher.end_core is core
        s.put("TopicL", b"first", keys="k")
        assert dispatcher.offset < core.wrote_offset  # waiting: nothing indexed yet
        assert impl.codec.key_lookup(services, segments, core, "TopicL", "k", 32, 0, None, 64) == []
        found = impl.codec.key_lookup(services, segments, core, "TopicL", "k", 32, 0, None, 64, dispatcher)
        assert [m.body for m in found] == [b"first"]
        assert dispatcher.offset == core.wrote_offset
        # without an end core to compare with, it always asks catch_up
        s.put("TopicL", b"second", keys="k")
        dispatcher.end_core = None
        found = impl.codec.key_lookup(services, segments, core, "TopicL", "k", 32, 0, None, 64, dispatcher)
        assert [m.body for m in found] == [b"first", b"second"]
        dispatcher.end_core = core
        s.put("TopicL", b"third", keys="k")
        assert [m.body for m in s.query_by_key("TopicL", "k")] == [b"first", b"second", b"third"]
    finally:
        s.close()


class _Sentinel:
    pass


def test_a_read_message_in_a_reference_cycle_is_collected(store):
    # the compiled reads hand out messages the collector does not visit until a setter or the
    # properties getter runs: a cycle made through either must still be found and freed
    results = [store.put("TopicG", b"g%d" % i, keys="g") for i in range(3)]
    read = [store.read(results[0].commitlog_offset)]
    read.append(store.get_by_queue_offset("TopicG", results[1].queue_id, results[1].queue_offset))
    read += store.query_by_key("TopicG", "g")[2:]
    assert [m.body for m in read] == [b"g0", b"g1", b"g2"]
    gone = []
    for way, m in enumerate(read):
        sentinel = _Sentinel()
        gone.append(weakref.ref(sentinel))
        if way == 0:
            m.properties["me"] = (m, sentinel)
        elif way == 1:
            m.body = [m, sentinel]
        else:
            m.store_host = (m, sentinel)
        assert gc.is_tracked(m)
        del sentinel
    del read, m
    gc.collect()
    assert [ref() for ref in gone] == [None, None, None]


def test_reads_by_position_after_retention_deleted_and_rolled_segments(tmp_path, impl):
    # the compiled reads remember each segment's geometry: files deleted and new ones made
    # (which may reuse freed addresses) must never be confused with one another
    s = open_store(tmp_path / "store", impl)
    try:
        body = b"r" * 1500  # 60 messages: about 1.5 segments
        put = [s.put("TopicR", body + b"%05d" % i, keys="k%d" % i) for i in range(60)]
        for _round in range(3):
            s.clean(force=True)
            low = s.min_offset
            assert low > put[0].commitlog_offset  # a segment went
            for i, result in enumerate(put):
                at = result.commitlog_offset
                if at < low:
                    with pytest.raises(MessageNotFoundError):
                        s.get_by_queue_offset("TopicR", result.queue_id, result.queue_offset)
                    continue
                assert s.read(at).body == body + b"%05d" % i
                m = s.get_by_queue_offset("TopicR", result.queue_id, result.queue_offset)
                assert (m.body, m.commitlog_offset) == (body + b"%05d" % i, at)
                assert [x.body for x in s.query_by_key("TopicR", "k%d" % i)] == [body + b"%05d" % i]
            put += [
                s.put("TopicR", body + b"%05d" % i, keys="k%d" % i) for i in range(len(put), len(put) + 60)
            ]
    finally:
        s.close()


def test_key_messages_bounds_checks_what_it_is_given(impl):
    def _Segment(mm, file_from_offset, file_size, wrote_position):  # noqa: N802 (a class's name)
        segment = impl.codec.MappedState()
        segment.mm, segment.file_from_offset, segment.file_size = mm, file_from_offset, file_size
        segment.wrote_position = wrote_position
        return segment

    def _Files(*files):  # noqa: N802 (a class's name)
        table = impl.codec.SegmentTable()
        table.files = list(files)
        return table

    record = impl.codec.encode_record(
        topic="T", body=b"b", properties={"KEYS": "k"}, physical_offset=100, store_timestamp=5
    )
    ok = _Files(_Segment(bytearray(record), 100, 4096, len(record)))
    args = ("T", "k", 0, 10, 10, False)
    assert [m.body for m in impl.codec.key_messages([100], ok, None, *args)] == [b"b"]
    # past what is readable, below or past the segments, a short map, a closed one
    assert impl.codec.key_messages([100], _Files(_Segment(record, 100, 4096, 5)), None, *args) == []
    assert impl.codec.key_messages([-5, 99, 5000, 2**63 - 1], ok, None, *args) == []
    assert impl.codec.key_messages([100], _Files(_Segment(record[:50], 100, 4096, 4096)), None, *args) is None
    assert impl.codec.key_messages([100], _Files(_Segment(None, 100, 4096, 4096)), None, *args) is None
    assert impl.codec.key_messages([100], _Files(), None, *args) == []
    # two files that are not one run of equal files are not trusted
    odd = _Files(_Segment(record, 100, 4096, len(record)), _Segment(record, 9000, 4096, len(record)))
    assert impl.codec.key_messages([4196], odd, None, *args) == []
    with pytest.raises(InvalidMessageError):
        impl.codec.key_messages(["100"], ok, None, *args)
    with pytest.raises(TypeError):
        impl.codec.key_messages([100], ok, None, b"T", "k", 0, 10, 10, False)


# -- the one-call pull (codec.queue_messages, behind get_message) ---------------------------------


def bodies(result):
    return [m.body for m in result.messages]


def careful_get_message(store, group, topic, queue_id, offset, max_msgs, tags=None):
    """get_message by the careful path alone (the class's method, not the store's FastReads
    one, with its one-call pulls switched off for the call)."""
    store._quick_pull = store._quick_tagged_pull = lambda *args: None
    try:
        return type(store).get_message(store, group, topic, queue_id, offset, max_msgs=max_msgs, tags=tags)
    finally:
        del store._quick_pull, store._quick_tagged_pull


def test_a_one_call_pull_gives_what_the_careful_path_gives(tmp_path, impl):
    # consume_queue_units=64: pulls that reach a ConsumeQueue file's end go the careful way,
    # which goes on into the next file; both must give the same messages, offsets and units
    with open_store(tmp_path / "store", impl) as s:
        rs = [s.put("TopicP", b"p%d" % i, tags="t%d" % (i % 3), queue_id=0) for i in range(200)]
        for offset, max_msgs in ((0, 32), (40, 32), (60, 8), (63, 1), (190, 32), (199, 5), (0, 500)):
            quick = s.get_message("g", "TopicP", 0, offset, max_msgs=max_msgs)
            careful = careful_get_message(s, "g", "TopicP", 0, offset, max_msgs)
            # a pull reads at most two ConsumeQueue files (of 64 units here)
            expect = [b"p%d" % i for i in range(offset, min(200, offset + max_msgs, (offset // 64 + 2) * 64))]
            for got in (quick, careful):
                assert got.status.name == "FOUND"
                assert bodies(got) == expect
                assert got.next_begin_offset == offset + len(expect)
                assert (got.min_offset, got.max_offset) == (0, 200)
                assert got.queue_offsets.tolist() == list(range(offset, offset + len(expect)))
                assert got.units["commitlog_offset"].tolist() == [
                    r.commitlog_offset for r in rs[offset : offset + len(expect)]
                ]
                assert got.buffer_total_size == sum(r.size for r in rs[offset : offset + len(expect)])
        # within one file, the compiled call answers; across a file's end, it leaves it
        one = impl.codec.queue_messages(
            s._opened.queues, "TopicP", 0, 0, 32, s._opened.segments, s._opened.core
        )
        assert [m.body for m in one[0]] == [b"p%d" % i for i in range(32)] and one[2:] == (0, 200)
        assert (
            impl.codec.queue_messages(
                s._opened.queues, "TopicP", 0, 60, 8, s._opened.segments, s._opened.core
            )
            is None
        )
        assert (
            impl.codec.queue_messages(
                s._opened.queues, "TopicP", 0, 199, 5, s._opened.segments, s._opened.core
            )[0][0].body
            == b"p199"
        )


@pytest.mark.parametrize(
    "args",
    [
        ("TopicP", True, 0, 4),
        ("TopicP", 0, True, 4),
        ("TopicP", 0, 0, True),
        ("TopicP", 0, 0, 0),
        ("TopicP", 0, 0, -1),
        ("TopicP", 0, 0, 2**63),
        ("TopicP", 0, 0, 4.0),
        ("TopicP", 0, -1, 4),
        ("TopicP", 0, 2**63, 4),
        ("TopicP", 2**31, 0, 4),
        ("TopicP", 0, 3, 4),  # the queue's end
        ("TopicP", 1, 0, 4),  # no such queue
        ("NoTopic", 0, 0, 4),
        (b"TopicP", 0, 0, 4),
        ("TopicP\ud800", 0, 0, 4),
    ],
)
def test_queue_messages_leaves_every_unusual_case_to_the_careful_path(store, impl, args):
    for i in range(3):
        store.put("TopicP", b"p%d" % i, queue_id=0)
    assert bodies(store.get_message("g", "TopicP", 0, 0)) == [b"p0", b"p1", b"p2"]
    assert (
        impl.codec.queue_messages(store._opened.queues, *args, store._opened.segments, store._opened.core)
        is None
    )
    assert (
        impl.codec.queue_messages(None, "TopicP", 0, 0, 4, store._opened.segments, store._opened.core) is None
    )


def test_a_damaged_unit_goes_to_the_careful_path_which_never_hands_out_another_message(tmp_path, impl):
    with open_store(tmp_path / "store", impl) as s:
        rs = [s.put("TopicP", b"p%d" % i, queue_id=0) for i in range(10)]
        assert bodies(s.get_message("g", "TopicP", 0, 0, max_msgs=10)) == [b"p%d" % i for i in range(10)]
        cq = s._opened.queues.get("TopicP", 0)
        mf = cq._files.files[0]
        # unit 4 now points at message 5's record: a unit that does not point at its own record
        mf.mm[4 * 20 : 4 * 20 + 8] = rs[5].commitlog_offset.to_bytes(8, "big")
        assert (
            impl.codec.queue_messages(
                s._opened.queues, "TopicP", 0, 0, 10, s._opened.segments, s._opened.core
            )
            is None
        )
        got = s.get_message("g", "TopicP", 0, 0, max_msgs=10)
        assert [(m.queue_offset, m.body) for m in got.messages] == [
            (i, b"p%d" % i) for i in range(len(got.messages))
        ]


def test_a_following_reader_pulls_the_writers_new_messages_in_one_call(tmp_path, impl):
    path = tmp_path / "store"
    with open_store(path, impl) as w:
        for i in range(5):
            w.put("TopicP", b"a%d" % i, queue_id=0)
        w.flush()
        with MessageStore(path, read_only=True, implementation=impl.name, consume_queue_units=64) as ro:
            assert bodies(ro.get_message("g", "TopicP", 0, 0)) == [b"a%d" % i for i in range(5)]
            for i in range(5):
                w.put("TopicP", b"b%d" % i, queue_id=0)
            got = ro.get_message("g", "TopicP", 0, 5)
            assert bodies(got) == [b"b%d" % i for i in range(5)]
            assert got.queue_offsets.tolist() == [5, 6, 7, 8, 9] and got.next_begin_offset == 10
            # the new units are in the reader's memory: the compiled call reads them there
            one = impl.codec.queue_messages(ro._opened.queues, "TopicP", 0, 6, 2, ro._opened.segments, None)
            assert [m.body for m in one[0]] == [b"b1", b"b2"]
            assert bodies(ro.get_message("g", "TopicP", 0, 3, max_msgs=4)) == [b"a3", b"a4", b"b0", b"b1"]
            # the units it found on disk are read from the files in one call too
            disk = impl.codec.queue_messages(ro._opened.queues, "TopicP", 0, 1, 4, ro._opened.segments, None)
            assert [m.body for m in disk[0]] == [b"a1", b"a2", b"a3", b"a4"] and disk[2:] == (0, 10)


# -- reads by CommitLog offset and msgId in one call (codec.record_at, message_by_id) -------------


def test_record_at_and_message_by_id_read_what_the_careful_path_reads(store, impl):
    rs = [store.put("TopicR", b"r%d" % i, queue_id=0) for i in range(5)]
    for i, r in enumerate(rs):
        m = impl.codec.record_at(store._opened.segments, store._opened.core, r.commitlog_offset)
        assert m == store._opened.commitlog.read(r.commitlog_offset) and m.body == b"r%d" % i
        assert impl.codec.message_by_id(store._opened.segments, store._opened.core, r.msg_id) == m
        assert impl.codec.message_by_id(store._opened.segments, store._opened.core, r.msg_id.lower()) == m
        assert store.read(r.commitlog_offset) == m and store.get_by_msg_id(r.msg_id.lower()) == m
    inside = rs[2].commitlog_offset + 4  # not where a record starts
    other_host = ("0A000001" + rs[2].msg_id[8:], rs[2].msg_id[:8] + "0001" + rs[2].msg_id[12:])
    for offset in (inside, -1, 2**63, True, 1.0, rs[-1].commitlog_offset + rs[-1].size, None):
        assert impl.codec.record_at(store._opened.segments, store._opened.core, offset) is None
    for msg_id in (*other_host, rs[2].msg_id[:-1], rs[2].msg_id + "0", "Z" * 32, 12, None, "F" * 32):
        assert impl.codec.message_by_id(store._opened.segments, store._opened.core, msg_id) is None
    with pytest.raises(MessageNotFoundError):
        store.read(inside)
    with pytest.raises(MessageNotFoundError):
        store.get_by_msg_id(other_host[0])
    with pytest.raises((TypeError, InvalidMessageIdError)):
        store.get_by_msg_id("Z" * 32)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    counts=st.lists(st.integers(1, 90), min_size=1, max_size=4),
    pulls=st.lists(
        st.tuples(st.integers(0, 400), st.integers(1, 200), st.sampled_from([None, "a", "a || b", "c"])),
        min_size=1,
        max_size=12,
    ),
)
def test_one_call_pulls_and_careful_pulls_agree(tmp_path_factory, impl, counts, pulls):
    # batches of puts over queue files of 64 units, then pulls from anywhere: the one-call pull
    # and the careful one must answer alike, status included
    # (also in a following reader, whose units after its open are in its memory)
    path = tmp_path_factory.mktemp("agree") / "store"
    with open_store(path, impl) as s:
        s.put_batch("TopicA", [b"first"] * 3, queue_id=0)
        reader = MessageStore(path, read_only=True, implementation=impl.name, consume_queue_units=64)
        for k, n in enumerate(counts):  # batches tagged a, b, untagged, a, ...
            tag = ("a", "b", None)[k % 3]
            s.put_messages([Message("TopicA", b"a%d" % i, tags=tag, queue_id=0) for i in range(n)])
        for (offset, max_msgs, tags), store in zip(pulls, itertools.cycle((s, reader))):
            quick = store.get_message("g", "TopicA", 0, offset, max_msgs=max_msgs, tags=tags)
            careful = careful_get_message(store, "g", "TopicA", 0, offset, max_msgs, tags)
            assert quick.status == careful.status
            assert quick.next_begin_offset == careful.next_begin_offset
            assert (quick.min_offset, quick.max_offset) == (careful.min_offset, careful.max_offset)
            assert [(m.queue_offset, m.commitlog_offset, m.body) for m in quick.messages] == [
                (m.queue_offset, m.commitlog_offset, m.body) for m in careful.messages
            ]
            assert quick.units.tobytes() == careful.units.tobytes()
            assert quick.queue_offsets.tolist() == careful.queue_offsets.tolist()
        reader.close()
