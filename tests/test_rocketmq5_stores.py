"""Stores Apache RocketMQ 5.3.3 wrote, opened read-only and writable on both twins: every record
its manifest lists is found, ``verify`` is clean, and a writable open leaves RocketMQ's files as
they were unless it has to change them."""

import pytest
from rocketmq5 import changed_files, check_records, manifest, unpack

from rocketstore import Consumer, MessageStore


@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writable"])
def test_long_retry_topics_queues_are_read_where_rocketmq_put_them(tmp_path, impl, read_only):
    """RocketMQ 5.x takes ``%RETRY%`` topics up to 255 bytes (V2 records, 2-byte topic length)
    and keeps their ConsumeQueues under ``consumequeue/<topic>/`` like any other's."""
    root = unpack(tmp_path, "v5-v2-long-topic")
    long_topics = [t for t, n in manifest("v5-v2-long-topic")["topic_lengths"].items() if n > 127]
    with MessageStore(root, implementation=impl.name, read_only=read_only) as store:
        report = store.verify()
        assert report["ok"], report["problems"]
        for topic in long_topics:
            assert (store.min_queue_offset(topic, 0), store.max_queue_offset(topic, 0)) == (0, 10)
            got = store.get_message("g", topic, 0, 0, 32)
            assert [m.queue_offset for m in got.messages] == list(range(10))
            tagged = [m.queue_offset for m in got.messages if m.tags == "TagV2"]
            assert [m.queue_offset for m in store.get_message("g", topic, 0, 0, 32, "TagV2").messages] == tagged
            consumer = Consumer(store, "g", {topic: "TagV2"}, retry=False)
            assert [m.queue_offset for m in consumer.poll(32)] == tagged
        assert check_records(store, "v5-v2-long-topic") == 40
    assert changed_files(root, "v5-v2-long-topic") == []
