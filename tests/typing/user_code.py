"""A user's program, type-checked with ``mypy --strict`` in CI: the public API must be typed
well enough that code like this checks clean (tests/test_typing.py runs it)."""

from __future__ import annotations

import rocketstore
import rocketstore.lowlevel
from rocketstore import (
    Consumer,
    GetMessageResult,
    GetMessageStatus,
    Message,
    MessageExt,
    MessageStore,
    PutResult,
    StoreConfig,
)
from rocketstore.errors import MessageNotFoundError, PutError, RocketStoreError


def produce(store: MessageStore) -> list[int]:
    offsets: list[int] = []
    result: PutResult = store.put("TopicTest", b"hello", tags="TagA", keys="order-1")
    offsets.append(result.commitlog_offset)
    msg_id: str = result.msg_id
    assert msg_id
    batch = store.put_messages([Message("TopicTest", b"a", tags="TagB", keys=["k1", "k2"])])
    offsets.extend(r.commitlog_offset for r in batch)
    return offsets


def consume(store: MessageStore) -> int:
    got: GetMessageResult = store.get_message("group", "TopicTest", 0, max_msgs=32)
    n = 0
    if got.status is GetMessageStatus.FOUND:
        for msg in got.messages:
            body: bytes = bytes(msg.body)
            topic: str = msg.topic
            n += len(body) + len(topic)
        store.commit_offset("group", "TopicTest", 0, got.next_begin_offset)
    consumer = Consumer(store, "group2", "TopicTest")
    for m in consumer.poll(16):
        n += m.queue_offset
    return n


def lookups(store: MessageStore, offset: int) -> MessageExt | None:
    msg: MessageExt = store.read(offset)
    keys: str | None = msg.keys
    tags: str | None = msg.tags
    props: dict[str, str] = msg.properties
    again = store.get_by_msg_id(msg.msg_id)
    found: list[MessageExt] = store.query_by_key("TopicTest", "order-1")
    try:
        return store.get_by_queue_offset("TopicTest", 0, 0)
    except MessageNotFoundError:
        return again if (keys, tags, props, found) else None


def main(path: str) -> None:
    config = StoreConfig(commitlog_file_size=1 << 20)
    assert config.commitlog_file_size == 1 << 20
    with MessageStore(path, commitlog_file_size=1 << 20) as store:
        offsets = produce(store)
        consume(store)
        lookups(store, offsets[0])
        report: dict[str, object] = store.verify()
        assert report["ok"]
        ok: bool = store.flush(1.0)
        assert ok
        stats = store.stats()
        print(stats["max_offset"], store.max_offset, store.min_offset, store.topics)
    try:
        with MessageStore(path, read_only=True) as ro:
            for m in ro.iter_messages():
                print(m.msg_id, m.commitlog_offset)
    except (PutError, RocketStoreError) as exc:
        print(exc)
    print(rocketstore.IMPLEMENTATION, rocketstore.lowlevel.crc32(b"x"))
