"""Consumer retry and dead-letter queues (spec §12): send_back through %RETRY%<group> with the
3 + reconsume-times back-off, the DLQ after max_reconsume_times with the message's history in
its properties, per-group maximum (subscriptionGroup.json), lookups along the way, the Consumer
that reads a group's retry topic with its subscriptions, and bad input."""

import pytest
from conftest import ROCKETMQ_DELAY_LEVELS_MS as LEVELS_MS

from rocketstore import Consumer, MessageStore
from rocketstore.errors import InvalidDelayLevelError, InvalidMessageError, MessageNotFoundError
from rocketstore.files.configfiles import loads_fastjson
from rocketstore.services.schedule import SCHEDULE_TOPIC

HOST = "10.0.0.7"
GROUP = "GroupA"
RETRY, DLQ = "%RETRY%GroupA", "%DLQ%GroupA"


def open_store(path, impl, clock, **options):
    return MessageStore(
        path,
        implementation=impl.name,
        store_host=HOST,
        clock=clock,
        schedule_interval_ms=0,
        commitlog_file_size=256 * 1024,
        consume_queue_units=64,
        index_slots=64,
        index_count=256,
        **options,
    )


@pytest.fixture
def store(tmp_path, impl, clock):
    s = open_store(tmp_path / "store", impl, clock)
    yield s
    s.close()


def config(store, name):
    with open(f"{store.path}/config/{name}", encoding="utf-8") as f:
        return loads_fastjson(f.read())


def last_of(store, topic, queue_id=0):
    return store.get_by_queue_offset(topic, queue_id, store.max_queue_offset(topic, queue_id) - 1)


def test_send_back_goes_through_the_schedule_to_the_retry_topic(store, clock):
    r = store.put("TopicA", b"work", tags="TagA", keys="order-1", queue_id=0)
    original = store.read(r.commitlog_offset)
    back = store.send_back(GROUP, original)
    sched = store.read(back.commitlog_offset)
    # level 3 + reconsume times (0): SCHEDULE_TOPIC_XXXX queue 2, bound for %RETRY%GroupA-0
    assert (sched.topic, sched.queue_id, sched.reconsume_times) == (SCHEDULE_TOPIC, 2, 1)
    assert sched.properties == {
        **original.properties,
        "RETRY_TOPIC": "TopicA",
        "WAIT": "false",
        "DELAY": "3",
        "ORIGIN_MESSAGE_ID": original.msg_id,
        "REAL_TOPIC": RETRY,
        "REAL_QID": "0",
    }
    assert sched.born_timestamp == original.born_timestamp and sched.body == b"work"
    assert store.queue_units(SCHEDULE_TOPIC, 2, 0, 1)["tags_code"][0] == sched.store_timestamp + 10_000
    clock.now = sched.store_timestamp + 10_000
    assert store.deliver_delayed() == 1
    retried = last_of(store, RETRY)
    assert (retried.topic, retried.queue_id, retried.reconsume_times) == (RETRY, 0, 1)
    # as 4.9.8 writes it: the scheduled record's properties, DELAY kept (schedule.py)
    assert retried.properties == sched.properties and retried.properties["REAL_TOPIC"] == RETRY
    assert retried.unique_key == r.unique_key
    topics = config(store, "topics.json")["topicConfigTable"]
    assert (topics[RETRY]["writeQueueNums"], topics[RETRY]["perm"]) == (1, 6)


def test_sixteen_retries_then_the_dlq_with_history_in_properties(store, clock):
    r = store.put("TopicA", b"poison", tags="TagA", keys="order-9")
    original = msg = store.read(r.commitlog_offset)
    levels = []
    for attempt in range(16):
        back = store.send_back(GROUP, msg)
        sched = store.read(back.commitlog_offset)
        assert sched.topic == SCHEDULE_TOPIC
        levels.append(int(sched.properties["DELAY"]))
        clock.now = sched.store_timestamp + LEVELS_MS[levels[-1] - 1]
        assert store.deliver_delayed() == 1
        msg = last_of(store, RETRY)
        assert msg.reconsume_times == attempt + 1
    assert levels == list(range(3, 19))  # 3 + reconsume times: 10 s ... 2 h
    # the 17th failure: reconsumed 16 times = retryMaxTimes, so the dead-letter queue, at once
    back = store.send_back(GROUP, msg)
    dead = store.read(back.commitlog_offset)
    assert (dead.topic, dead.queue_id, dead.reconsume_times) == (DLQ, 0, 17)
    assert dead.properties["RETRY_TOPIC"] == "TopicA"
    assert dead.properties["ORIGIN_MESSAGE_ID"] == original.msg_id
    # 4.9.8 keeps the looked-up record's properties, its DELAY set to "0" (setDelayTimeLevel(0))
    assert dead.properties["REAL_TOPIC"] == RETRY and dead.properties["DELAY"] == "0"
    assert dead.properties["TAGS"] == "TagA" and dead.properties["KEYS"] == "order-9"
    assert dead.body == b"poison" and dead.born_timestamp == original.born_timestamp
    assert store.delayed_counts() == {}
    assert store.max_queue_offset(DLQ, 0) == 1 and store.max_queue_offset(RETRY, 0) == 16
    topics = config(store, "topics.json")["topicConfigTable"]
    assert (topics[DLQ]["writeQueueNums"], topics[DLQ]["perm"]) == (1, 2)  # 4.3: PERM_WRITE
    # lookups still find the message wherever it went
    assert store.get_by_msg_id(dead.properties["ORIGIN_MESSAGE_ID"]).body == b"poison"
    assert [m.commitlog_offset for m in store.query_by_key(DLQ, "order-9")] == [dead.commitlog_offset]
    assert store.query_by_unique_key(DLQ, r.unique_key).commitlog_offset == dead.commitlog_offset
    assert len(store.query_by_key(RETRY, "order-9")) == 16
    assert store.query_by_key("TopicA", "order-9")[0].commitlog_offset == original.commitlog_offset
    assert len(store.query_by_key(SCHEDULE_TOPIC, "order-9")) == 16


def test_group_max_reconsume_times_and_overrides(store, clock):
    entry = store.update_subscription_group(GROUP, retry_max_times=2)
    assert entry["retryMaxTimes"] == 2
    saved = config(store, "subscriptionGroup.json")
    assert saved["subscriptionGroupTable"][GROUP]["retryMaxTimes"] == 2
    msg = store.read(store.put("TopicA", b"x").commitlog_offset)
    for _ in range(2):
        back = store.send_back(GROUP, msg)
        clock.now = store.read(back.commitlog_offset).store_timestamp + 7200_000
        store.deliver_delayed()
        msg = last_of(store, RETRY)
    assert store.read(store.send_back(GROUP, msg).commitlog_offset).topic == DLQ
    # the request's own maximum wins over the group's (-1 means 16)
    assert (
        store.read(store.send_back(GROUP, msg, max_reconsume_times=-1).commitlog_offset).topic
        == SCHEDULE_TOPIC
    )
    assert (
        store.read(store.send_back("Other", msg, max_reconsume_times=0).commitlog_offset).topic
        == "%DLQ%Other"
    )


def test_delay_level_argument(store, clock):
    msg = store.read(store.put("TopicA", b"x").commitlog_offset)
    sched = store.read(store.send_back(GROUP, msg, 1).commitlog_offset)
    assert (sched.queue_id, sched.properties["DELAY"]) == (0, "1")
    dead = store.read(store.send_back(GROUP, msg, -1).commitlog_offset)
    assert (dead.topic, dead.reconsume_times) == (DLQ, 1)


def test_a_dead_letter_keeps_the_properties_4_9_8_keeps(store, clock):
    """SendMessageProcessor.asyncConsumerSendMsgBack (4.9.8) builds the dead letter from the
    record it looked up: every property of it, RETRY_TOPIC and ORIGIN_MESSAGE_ID when absent,
    WAIT=false, and DELAY set to "0" (setDelayTimeLevel(0), serialised after it): a delayed
    retry's DELAY is not dropped, and a dead letter of a record never delayed carries DELAY=0 too.
    DELAY=0 delays nothing: the dead letter stays in the DLQ."""
    r = store.put("TopicA", b"late", tags="TagA", keys="order-5", properties={"user": "v"})
    original = store.read(r.commitlog_offset)
    back = store.send_back(GROUP, original, 2)
    clock.now = store.read(back.commitlog_offset).store_timestamp + LEVELS_MS[1]
    assert store.deliver_delayed() == 1
    retried = last_of(store, RETRY)
    assert retried.properties["DELAY"] == "2"  # a delivered copy keeps DELAY (4.9.8's messageTimeup)
    dead = store.read(store.send_back(GROUP, retried, -1).commitlog_offset)
    assert (dead.topic, dead.queue_id) == (DLQ, 0)
    assert dead.properties == {**retried.properties, "WAIT": "false", "DELAY": "0"}
    never_delayed = store.read(store.send_back(GROUP, original, -1).commitlog_offset)
    assert never_delayed.topic == DLQ
    assert never_delayed.properties == {
        **original.properties,
        "RETRY_TOPIC": "TopicA",
        "WAIT": "false",
        "DELAY": "0",
        "ORIGIN_MESSAGE_ID": original.msg_id,
    }
    assert store.delayed_counts() == {}
    assert [m.body for m in store.get_message("g", DLQ, 0, 0).messages] == [b"late", b"late"]


@pytest.mark.parametrize("group", ["", "a b", "x" * 121, "g@h"])
def test_send_back_bad_group_raises_and_writes_nothing(store, group):
    msg = store.read(store.put("TopicA", b"x").commitlog_offset)
    before = store.max_offset
    with pytest.raises(InvalidMessageError):
        store.send_back(group, msg)
    assert store.max_offset == before


def test_send_back_bad_arguments_raise_and_write_nothing(store, tmp_path, impl, clock):
    msg = store.read(store.put("TopicA", b"x").commitlog_offset)
    before = store.max_offset
    for level in (19, "3", 1.0, True):
        with pytest.raises(InvalidDelayLevelError):
            store.send_back(GROUP, msg, level)
    with pytest.raises(InvalidMessageError):
        store.send_back(GROUP, msg, max_reconsume_times=-2)
    with pytest.raises(TypeError):
        store.send_back(GROUP, msg.commitlog_offset)
    with pytest.raises(TypeError):
        store.send_back(5, msg)
    other = open_store(tmp_path / "other", impl, clock, store_port=10999)
    try:
        foreign = other.read(other.put("TopicA", b"elsewhere").commitlog_offset)
    finally:
        other.close()
    with pytest.raises(MessageNotFoundError):
        store.send_back(GROUP, foreign)
    assert store.max_offset == before


def test_consumer_reads_its_retry_topic_with_its_subscriptions(store, clock):
    for i in range(6):
        store.put("TopicA", b"a%d" % i, tags="TagA" if i % 2 else "TagB")
    store.put("TopicC", b"c0")
    consumer = Consumer(store, GROUP, {"TopicA": "TagA"})
    assert consumer.topics == ["TopicA", RETRY]
    got = []
    while True:
        batch = consumer.poll(2)
        if not batch:
            break
        got += batch
    assert sorted(m.body for m in got) == [b"a1", b"a3", b"a5"]
    failed = next(m for m in got if m.body == b"a3")
    back = consumer.send_back(failed)
    consumer.commit()
    assert consumer.poll() == []  # the retry is still in the schedule
    clock.now = store.read(back.commitlog_offset).store_timestamp + 10_000
    store.deliver_delayed()
    [again] = consumer.poll()
    # the client's view: the original topic, the retry queue's place
    assert (again.body, again.topic, again.reconsume_times) == (b"a3", "TopicA", 1)
    assert again.properties["RETRY_TOPIC"] == "TopicA"
    assert (again.queue_id, again.queue_offset) == (0, 0)
    second = store.read(consumer.send_back(again).commitlog_offset)  # fails again: level 4
    assert (second.topic, second.properties["DELAY"], second.reconsume_times) == (SCHEDULE_TOPIC, "4", 2)
    consumer.commit()
    assert store.committed_offset(GROUP, RETRY, 0) == 1
    # a new consumer of the group resumes from the committed offsets
    fresh = Consumer(store, GROUP, "TopicA")
    assert fresh.poll() == []
    clock.now += 31_000
    store.deliver_delayed()
    [third] = fresh.poll()
    assert (third.body, third.reconsume_times) == (b"a3", 2)


def test_consumer_without_retry_and_bad_subscriptions(store):
    store.put("TopicA", b"x")
    assert Consumer(store, GROUP, ["TopicA"], retry=False).topics == ["TopicA"]
    with pytest.raises(InvalidMessageError):
        Consumer(store, GROUP, [])
    with pytest.raises(InvalidMessageError):
        Consumer(store, "", "TopicA")
