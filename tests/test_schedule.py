"""Delayed delivery (spec §12, rocketstore.services.schedule): the SCHEDULE_TOPIC_XXXX rewrite on put and
its deliver-time tagsCode (§2), delivery at each level's time with an injected clock, order
within a level, delayOffset.json (§10), restarts and interrupted passes (exactly once), bad
levels, lookups, and the background thread."""

import pathlib
import shutil
import time

import pytest
from conftest import ROCKETMQ_DELAY_LEVELS_MS as DEFAULT_LEVELS_MS

from rocketstore import Message, MessageStore
from rocketstore.base._clock import now_ms
from rocketstore.errors import InvalidDelayLevelError, InvalidMessageError, InvalidQueueIdError
from rocketstore.files.configfiles import loads_fastjson
from rocketstore.format._codec_py import java_hash
from rocketstore.services.schedule import SCHEDULE_TOPIC, DelayProgress

HOST = "10.0.0.7"


def open_store(path, impl, clock, **options):
    options.setdefault("commitlog_file_size", 256 * 1024)
    options.setdefault("consume_queue_units", 64)
    options.setdefault("index_slots", 64)
    options.setdefault("index_count", 256)
    options.setdefault("schedule_interval_ms", 0)
    return MessageStore(path, implementation=impl.name, store_host=HOST, clock=clock, **options)


@pytest.fixture
def store(tmp_path, impl, clock):
    s = open_store(tmp_path / "store", impl, clock)
    yield s
    s.close()


def copies(store, topic):
    """Every record of ``topic`` in queue order, queue by queue."""
    out = []
    for (t, qid), (lo, hi) in sorted(store.queues().items()):
        if t == topic:
            out += [store.get_by_queue_offset(t, qid, q) for q in range(lo, hi)]
    return out


def test_delayed_put_is_stored_in_schedule_topic_as_a_broker_stores_it(store):
    r = store.put("TopicA", b"hello", tags="TagA", keys="order-1", queue_id=2, delay_level=3)
    assert r.ok and r.queue_id == 2  # the schedule queue of level 3
    m = store.read(r.commitlog_offset)
    assert (m.topic, m.queue_id, m.queue_offset) == (SCHEDULE_TOPIC, 2, 0)
    assert m.properties == {
        "DELAY": "3",
        "REAL_TOPIC": "TopicA",
        "REAL_QID": "2",
        "TAGS": "TagA",
        "KEYS": "order-1",
        "UNIQ_KEY": r.unique_key,
    }
    units = store.queue_units(SCHEDULE_TOPIC, 2, 0, 10)
    assert units.tolist() == [(r.commitlog_offset, r.size, m.store_timestamp + 10_000)]
    assert store.max_queue_offset("TopicA", 2) == 0  # not visible yet
    assert store.topics[SCHEDULE_TOPIC] == 18
    assert store.delayed_counts() == {3: 1}


def test_spec_vector_level_3_deliver_time(impl):
    """§14: delay level 3 with store timestamp 1700000000123 → queue 2, tagsCode 1700000010123."""
    codec = impl.codec
    rec = codec.encode_record(
        topic=SCHEDULE_TOPIC,
        body=b"x",
        queue_id=2,
        properties=codec.encode_properties(
            {"DELAY": "3", "REAL_TOPIC": "T", "REAL_QID": "0", "TAGS": "TagA"}
        ),
        store_timestamp=1700000000123,
    )
    rows, _stop, _reason = codec.decode_batch(rec)
    info, _keys = codec.dispatch_info(rec, rows, DEFAULT_LEVELS_MS)
    assert int(info["tags_code"][0]) == 1700000010123
    assert int(rows["queue_id"][0]) == 2


def test_every_level_delivers_at_its_time(store, clock):
    results = {
        level: store.put("TopicA", b"level-%d" % level, tags="T", delay_level=level) for level in range(1, 19)
    }
    for level in range(1, 19):
        due = results[level].store_timestamp + DEFAULT_LEVELS_MS[level - 1]
        clock.now = due - 1
        assert store.deliver_delayed() == 0, f"level {level} delivered early"
        clock.now = due
        assert store.deliver_delayed() == 1
        got = [m.body for m in store.iter_messages() if m.topic == "TopicA"]
        assert got == [b"level-%d" % n for n in range(1, level + 1)]
    assert store.delayed_counts() == {}


def raw_properties(store, impl, m):
    """The properties bytes of record ``m`` as they lie in its CommitLog segment."""
    size = store.config.commitlog_file_size
    name = pathlib.Path(store.path) / "commitlog" / f"{m.commitlog_offset - m.commitlog_offset % size:020d}"
    with open(name, "rb") as f:
        f.seek(m.commitlog_offset % size)
        data = f.read(m.size)
    rows, _stop, _reason = impl.codec.decode_batch(data)
    start, length = int(rows["properties_pos"][0]), int(rows["properties_len"][0])
    return data[start : start + length]


def java_properties(props, order):
    """messageProperties2String over ``props`` iterated in ``order``."""
    return "".join(f"{k}\x01{props[k]}\x02" for k in order).encode()


def test_delivered_copy_is_what_a_broker_writes(store, clock, impl):
    r = store.put(
        Message(
            "TopicA",
            b"body",
            tags="TagB",
            keys="k1 k2",
            flag=7,
            queue_id=1,
            properties={"user": "v"},
            born_timestamp=1234567890123,
        ),
        delay_level=1,
    )
    sched = store.read(r.commitlog_offset)
    clock.now = sched.store_timestamp + 1000
    assert store.deliver_delayed() == 1
    [m] = copies(store, "TopicA")
    assert (m.topic, m.queue_id, m.queue_offset) == ("TopicA", 1, 0)
    assert m.body == b"body" and m.flag == 7 and m.born_timestamp == 1234567890123
    assert m.reconsume_times == 0 and m.sys_flag == sched.sys_flag
    # 4.9.8's messageTimeup serialises the properties before it clears DELAY and sets WAIT=false:
    # the copy keeps every property, DELAY included, and gains no WAIT
    assert m.properties == sched.properties and m.properties["DELAY"] == "1"
    assert "WAIT" not in m.properties
    assert m.properties["UNIQ_KEY"] == r.unique_key
    # ... in the order of the HashMap MessageDecoder.decode read them into (computed with
    # java.util.HashMap on OpenJDK 17; "user" and "DELAY" share a bucket, in file order)
    order = ["REAL_TOPIC", "KEYS", "UNIQ_KEY", "user", "DELAY", "TAGS", "REAL_QID"]
    assert raw_properties(store, impl, m) == java_properties(sched.properties, order)
    # tagsCode recomputed from TAGS
    assert store.queue_units("TopicA", 1, 0, 1).tolist() == [(m.commitlog_offset, m.size, java_hash("TagB"))]
    assert m.commitlog_offset > sched.commitlog_offset
    # the copy's DELAY does not delay it again: delivered once, nothing waits
    clock.now += 7_200_000
    assert store.deliver_delayed() == 0
    assert store.delayed_counts() == {}
    assert store.queues()[(SCHEDULE_TOPIC, 0)] == (0, 1)


def test_delivered_copy_property_order_follows_a_grown_java_hashmap(store, clock, impl):
    # 19 properties: the HashMap grows to 32 buckets; "BB" and "Aa" have one hash and keep
    # their order in the scheduled record
    user = {"BB": "1", "Aa": "2", **{f"p{i:02d}": str(i) for i in range(1, 11)}, "WAIT": "true"}
    r = store.put("TopicA", b"x", tags="T", properties=user, queue_id=0, delay_level=2)
    sched = store.read(r.commitlog_offset)
    assert list(sched.properties).index("BB") < list(sched.properties).index("Aa")
    clock.now = sched.store_timestamp + 5000
    assert store.deliver_delayed() == 1
    [m] = copies(store, "TopicA")
    order = [
        "BB",
        "Aa",
        "p10",
        "p01",
        "REAL_TOPIC",
        "p03",
        "p02",
        "p05",
        "p04",
        "p07",
        "p06",
        "p09",
        "p08",
        "UNIQ_KEY",
        "WAIT",
        "DELAY",
        "TAGS",
        "REAL_QID",
    ]
    assert m.properties["WAIT"] == "true" and m.properties["DELAY"] == "2"
    assert raw_properties(store, impl, m) == java_properties(sched.properties, order)


def test_order_within_a_level_is_kept(store, clock, rng):
    sent = []
    for i in range(200):
        level = rng.choice([2, 5])
        qid = rng.randrange(4)
        store.put("TopicA", b"%d:%d" % (level, i), queue_id=qid, delay_level=level)
        sent.append((level, qid, b"%d:%d" % (level, i)))
    clock.now = now_ms() + 10 * 60_000
    assert store.deliver_delayed() == 200
    for qid in range(4):
        got = [m.body for m in copies(store, "TopicA") if m.queue_id == qid]
        for level in (2, 5):
            mine = [b for lv, q, b in sent if lv == level and q == qid]
            assert [b for b in got if b.startswith(b"%d:" % level)] == mine
    # and in the CommitLog, each level's copies follow its puts
    order = [m.body for m in store.iter_messages() if m.topic == "TopicA"]
    for level in (2, 5):
        assert [b for b in order if b.startswith(b"%d:" % level)] == [b for lv, _q, b in sent if lv == level]


def test_delay_offset_json_is_written_as_fastjson(store, clock, tmp_path):
    store.put("TopicA", b"a", delay_level=1)
    store.put("TopicA", b"b", delay_level=3)
    store.put("TopicA", b"c", delay_level=3)
    clock.now = now_ms() + 60_000
    assert store.deliver_delayed() == 3
    text = (tmp_path / "store" / "config" / "delayOffset.json").read_text()
    assert text == '{\n\t"offsetTable":{1:1,3:2\n\t}\n}'
    assert loads_fastjson(text) == {"offsetTable": {1: 1, 3: 2}}


def test_java_delay_offset_file_round_trips(java_store, tmp_path):
    """A Java 4.x broker's empty delayOffset.json reads, and is written back byte for byte."""
    original = (java_store / "config" / "delayOffset.json").read_bytes()
    shutil.copy(java_store / "config" / "delayOffset.json", tmp_path / "delayOffset.json")
    table = DelayProgress.open(tmp_path / "delayOffset.json")
    assert table.as_dict() == {} and table.intent is None
    assert table.to_json().encode() == original


def test_restart_in_the_middle_of_a_delay_delivers_each_message_once(tmp_path, impl, clock, rng):
    path = tmp_path / "store"
    store = open_store(path, impl, clock)
    sent = {}
    for i in range(60):
        r = store.put("TopicA", b"m%d" % i, delay_level=rng.randrange(1, 6))
        sent[r.unique_key] = r.store_timestamp
    clock.now = now_ms() + 5000  # levels 1 and 2 are due, 3..5 not
    first = store.deliver_delayed()
    store.close()
    assert 0 < first < 60
    saved = loads_fastjson((path / "config" / "delayOffset.json").read_text())["offsetTable"]
    assert set(saved) <= {1, 2}

    store = open_store(path, impl, clock)
    assert store.deliver_delayed() == 0  # nothing new is due, nothing repeated
    clock.now += 60_000
    assert store.deliver_delayed() == 60 - first
    keys = [m.unique_key for m in copies(store, "TopicA")]
    assert sorted(keys) == sorted(sent)  # every message exactly once
    store.close()
    store = open_store(path, impl, clock)
    clock.now += 3 * 3600_000
    assert store.deliver_delayed() == 0
    assert len(copies(store, "TopicA")) == 60
    store.close()


class _Crash(Exception):
    pass


def _crash_on_persist(store, call):
    """ "Crash" the next pass at its ``call``-th write of delayOffset.json: 1, right after the
    intent is written; 2, right before the advanced offsets would be written."""
    progress = store._opened.schedule._progress
    real = progress.persist
    calls = []

    def persist(force=False):
        calls.append(1)
        if len(calls) == call:
            if call == 1:
                real(force)
            progress.persist = real
            raise _Crash()
        return real(force)

    progress.persist = persist


@pytest.mark.parametrize("written", ["none", "some", "all"])
def test_an_interrupted_pass_is_settled_on_open_exactly_once(tmp_path, impl, clock, written):
    """A crash after the pass wrote its intent: with no copy written yet, some, or all of them
    (then the offsets were not saved). The next open delivers each message exactly once."""
    path = tmp_path / "store"
    store = open_store(path, impl, clock)
    for i in range(10):
        store.put("TopicA", b"m%d" % i, delay_level=1 + i % 2)
    clock.now = now_ms() + 10_000
    svc = store._opened.schedule
    if written == "all":
        _crash_on_persist(store, 2)
        with pytest.raises(_Crash):
            store.deliver_delayed()
        assert len(copies(store, "TopicA")) == 10
    else:
        _crash_on_persist(store, 1)
        with pytest.raises(_Crash):
            store.deliver_delayed()
        assert svc._progress.intent is not None
        if written == "some":  # the first 4 copies made it, in order, before the crash
            units = svc._plan(clock.now)[0]
            store._opened.core.put_many([u.item for u in units[:4]], 0)
    # the intent is on disk; a clean close keeps it (it must be settled by the next open)
    store.close()
    on_disk = (path / "config" / "delayOffset.json").read_text()
    assert "rocketstoreDelivering" in on_disk
    store = open_store(path, impl, clock)
    assert store._opened.schedule.reconciled == 1
    store.deliver_delayed()
    assert sorted(m.body for m in copies(store, "TopicA")) == sorted(b"m%d" % i for i in range(10))
    assert store.delayed_counts() == {}
    store.close()
    assert "rocketstoreDelivering" not in (path / "config" / "delayOffset.json").read_text()


def test_a_failed_pass_is_settled_before_the_next_one(store, clock):
    for i in range(5):
        store.put("TopicA", b"m%d" % i, delay_level=1)
    clock.now = now_ms() + 2000
    _crash_on_persist(store, 2)
    with pytest.raises(_Crash):
        store.deliver_delayed()
    assert store.deliver_delayed() == 0
    assert store._opened.schedule.reconciled == 1
    assert len(copies(store, "TopicA")) == 5


@pytest.mark.parametrize("level", [0, 19, -1, 100, "3", 2.0, True])
def test_bad_delay_level_raises_and_writes_nothing(store, level):
    before = store.max_offset
    with pytest.raises(InvalidDelayLevelError):
        store.put("TopicA", b"x", delay_level=level)
    with pytest.raises(InvalidDelayLevelError):
        store.put(Message("TopicA", b"x"), delay_level=level)
    assert store.max_offset == before
    assert isinstance(InvalidDelayLevelError("x"), ValueError)


def test_delay_property_follows_the_broker(store):
    before = store.max_offset
    with pytest.raises(InvalidDelayLevelError):
        store.put("TopicA", b"x", properties={"DELAY": "soon"})
    with pytest.raises(InvalidMessageError):
        store.put_batch("TopicA", [b"a", b"b"], properties={"DELAY": "2"})
    with pytest.raises(InvalidQueueIdError):
        store.put("TopicA", b"x", queue_id=9, delay_level=1)
    assert store.max_offset == before
    r = store.put("TopicA", b"x", properties={"DELAY": "0"})  # not delayed
    assert store.read(r.commitlog_offset).topic == "TopicA"
    r = store.put("TopicA", b"x", properties={"DELAY": "40"})  # clamped to the last level
    m = store.read(r.commitlog_offset)
    assert (m.topic, m.queue_id, m.properties["DELAY"]) == (SCHEDULE_TOPIC, 17, "18")
    [r] = store.put_messages([Message("TopicB", b"y", properties={"DELAY": "2"})])
    assert store.read(r.commitlog_offset).queue_id == 1


def test_delay_table_is_configurable(tmp_path, impl, clock):
    store = open_store(tmp_path / "store", impl, clock, message_delay_level="2s 1h")
    try:
        r = store.put("TopicA", b"x", delay_level=2)
        assert store.queue_units(SCHEDULE_TOPIC, 1, 0, 1)["tags_code"][0] == r.store_timestamp + 3600_000
        with pytest.raises(InvalidDelayLevelError):
            store.put("TopicA", b"x", delay_level=3)
        assert store.topics[SCHEDULE_TOPIC] == 2
        clock.now = r.store_timestamp + 3600_000
        assert store.deliver_delayed() == 1
    finally:
        store.close()


def test_clock_skew_guard_delivers_a_deliver_time_too_far_ahead(store, clock):
    r = store.put("TopicA", b"x", delay_level=2)  # 5 s
    clock.now = r.store_timestamp - 10_000  # the clock went back 10 s
    assert store.deliver_delayed() == 1  # deliverTs > now + 5 s: due now


def test_a_put_that_lands_during_a_pass_is_not_taken_for_clock_skew(store, clock):
    """A pass reads the clock once, at its start; a message put after that (a few ms later by
    the same clock) has a deliver time past that reading plus its delay, which must not count as
    a clock gone back: it was delivered at once, two hours early (seen under load)."""
    r = store.put("TopicA", b"late", delay_level=18)  # 2 h
    clock.now = r.store_timestamp  # the clock at the put
    assert store.deliver_delayed(now=r.store_timestamp - 5) == 0  # the pass began 5 ms earlier
    assert store.deliver_delayed() == 0
    assert store.get_message("g", "TopicA", 0, 0).messages == []


def test_lookups_find_a_message_before_and_after_delivery(store, clock):
    r = store.put("TopicA", b"x", keys="order-7", delay_level=1)
    [m] = store.query_by_key(SCHEDULE_TOPIC, "order-7")
    assert m.commitlog_offset == r.commitlog_offset
    assert store.query_by_key("TopicA", "order-7") == []
    clock.now = r.store_timestamp + 1000
    store.deliver_delayed()
    [m] = store.query_by_key("TopicA", "order-7")
    assert m.topic == "TopicA" and m.unique_key == r.unique_key
    assert store.query_by_unique_key("TopicA", r.unique_key).commitlog_offset == m.commitlog_offset


def test_rebuilt_queues_give_the_same_deliver_times(tmp_path, impl, clock):
    """Dispatch from the CommitLog alone (queues deleted) gives the schedule units the tagsCode
    they had, as a broker's recovery does (§2: computed in checkMessageAndReturnSize)."""
    path = tmp_path / "store"
    store = open_store(path, impl, clock)
    for level in range(1, 19):
        store.put("TopicA", b"x", delay_level=level)
    before = {q: store.queue_units(SCHEDULE_TOPIC, q, 0, 10).tolist() for q in range(18)}
    store.close()
    shutil.rmtree(path / "consumequeue")
    store = open_store(path, impl, clock)
    try:
        assert {q: store.queue_units(SCHEDULE_TOPIC, q, 0, 10).tolist() for q in range(18)} == before
    finally:
        store.close()


def test_background_thread_delivers_and_stops_on_close(tmp_path, impl):
    shift = [0]
    store = open_store(tmp_path / "store", impl, lambda: now_ms() + shift[0], schedule_interval_ms=5)
    try:
        store.put("TopicA", b"x", delay_level=4)  # 30 s
        time.sleep(0.05)
        assert copies(store, "TopicA") == []  # 30 s have not passed on its clock
        shift[0] = 31_000
        deadline = time.monotonic() + 10
        while not copies(store, "TopicA") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(copies(store, "TopicA")) == 1
        thread = store._opened.schedule._thread
        assert thread is not None and thread.is_alive()
    finally:
        store.close()
    assert not thread.is_alive()


def test_read_only_store_reports_delayed_counts_and_refuses_delivery(tmp_path, impl, clock):
    path = tmp_path / "store"
    store = open_store(path, impl, clock)
    store.put("TopicA", b"x", delay_level=1)
    store.put("TopicA", b"y", delay_level=2)
    clock.now = now_ms() + 1500
    store.deliver_delayed()
    store.close()
    ro = MessageStore(path, read_only=True, implementation=impl.name)
    try:
        assert ro.delayed_counts() == {2: 1}
        with pytest.raises(Exception):
            ro.deliver_delayed()
        with pytest.raises(Exception):
            ro.put("TopicA", b"z", delay_level=1)
    finally:
        ro.close()


def test_an_undeliverable_record_is_skipped_even_across_a_crash(tmp_path, impl, clock):
    """A scheduled record whose REAL_QID lies outside its topic is logged and skipped (RocketMQ
    drops a message whose redelivery fails); the intent names it, so settling a crash does not
    stop there."""
    path = tmp_path / "store"
    store = open_store(path, impl, clock)
    store.put("TopicA", b"a", delay_level=1)
    # a user's put cannot reach SCHEDULE_TOPIC_XXXX: plant the record through the internal path
    store._putter._put(
        store, SCHEDULE_TOPIC, b"bad", None, None, {"REAL_TOPIC": "TopicA", "REAL_QID": "99"}, 0, 0, None, 0
    )
    store.put("TopicA", b"b", delay_level=1)
    clock.now = now_ms() + 2000
    _crash_on_persist(store, 2)
    with pytest.raises(_Crash):
        store.deliver_delayed()
    assert store._opened.schedule.dropped == 1
    assert loads_fastjson((path / "config" / "delayOffset.json").read_text())["rocketstoreDelivering"][
        "skipped"
    ] == [[1, 1]]
    store.close()
    store = open_store(path, impl, clock)
    try:
        assert store._opened.schedule.reconciled == 1
        assert store.deliver_delayed() == 0
        assert sorted(m.body for m in copies(store, "TopicA")) == [b"a", b"b"]
        assert store._opened.schedule.offsets() == {1: 3}
    finally:
        store.close()


def test_intent_round_trips_through_the_file(tmp_path):
    table = DelayProgress(tmp_path / "delayOffset.json")
    table.update(3, 7)
    table.intent = {
        "commitlogOffset": 4096,
        "fromOffsets": {3: 7},
        "nextOffsets": {3: 9},
        "skipped": {(3, 8)},
    }
    table.persist(force=True)
    again = DelayProgress.open(tmp_path / "delayOffset.json")
    assert again.as_dict() == {3: 7}
    assert again.intent == table.intent
    text = (tmp_path / "delayOffset.json").read_text()
    assert text.startswith('{\n\t"offsetTable":{3:7\n\t},\n\t"rocketstoreDelivering":{')
