"""RocketMQ's system topics: a user's put to one is refused (nothing written), while the store's
own puts into them (delay, retry, dead-letter) work, and reading them stays allowed."""

import pytest

from rocketstore import Message, MessageStore
from rocketstore.errors import InvalidTopicError, SystemTopicError

SYSTEM_TOPICS = [
    "SCHEDULE_TOPIC_XXXX",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRACE_TOPIC",
    "rmq_sys_wheel",
    "%RETRY%group-a",
    "%DLQ%group-a",
    "OFFSET_MOVED_EVENT",
    "SELF_TEST_TOPIC",
]

PUTS = {
    "put": lambda s, t: s.put(t, b"x"),
    "put with tags": lambda s, t: s.put(t, b"x", tags="A"),
    "put delayed": lambda s, t: s.put(t, b"x", delay_level=1),
    "put of a Message": lambda s, t: s.put(Message(t, b"x")),
    "put_pipelined": lambda s, t: s.put_pipelined(t, b"x"),
    "put_pipelined of a Message": lambda s, t: s.put_pipelined(Message(t, b"x")),
    "put_batch": lambda s, t: s.put_batch(t, [b"x", b"y"]),
    "put_messages": lambda s, t: s.put_messages([Message("TopicOk", b"a"), Message(t, b"x")]),
}


@pytest.fixture
def store(tmp_path, impl):
    s = MessageStore(tmp_path / "store", implementation=impl.name, commitlog_file_size=64 * 1024)
    yield s
    s.close()


@pytest.mark.parametrize("topic", SYSTEM_TOPICS)
@pytest.mark.parametrize("how", list(PUTS))
def test_a_put_to_a_system_topic_is_refused_and_writes_nothing(store, how, topic):
    store.put("TopicOk", b"before")
    end, queues = store.max_offset, store.queue_offsets()
    with pytest.raises(SystemTopicError) as raised:
        PUTS[how](store, topic)
    assert isinstance(raised.value, InvalidTopicError)
    assert topic in str(raised.value)
    assert store.max_offset == end and store.queue_offsets() == queues
    assert store.put("TopicOk", b"after").commitlog_offset == end


def test_the_store_still_puts_into_system_topics_itself(store):
    store.put("TopicOk", b"delayed", delay_level=1)
    original = store.put("TopicOk", b"to retry")
    msg = store.read(original.commitlog_offset)
    store.send_back("group-a", msg)  # %RETRY%group-a via SCHEDULE_TOPIC_XXXX
    store.send_back("group-a", msg, delay_level=-1)  # %DLQ%group-a
    queues = store.queue_offsets()
    assert queues[("SCHEDULE_TOPIC_XXXX", 0)] == 1
    assert queues[("%DLQ%group-a", 0)] == 1
    assert store.deliver_delayed(now=2**62) == 2  # to TopicOk and to %RETRY%group-a
    assert store.queue_offsets()[("%RETRY%group-a", 0)] == 1
    got = store.get_message("g", "%DLQ%group-a", 0, 0)  # reading a system topic stays allowed
    assert [m.body for m in got.messages] == [b"to retry"]


def test_plain_topics_that_only_look_alike_are_accepted(store):
    for topic in ("SCHEDULE_TOPIC_XXXX2", "RETRY", "my%RETRY%", "RMQ_SYSX", "TBW102x"):
        assert store.put(topic, b"x").commitlog_offset >= 0
