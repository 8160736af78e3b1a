"""A read-only store following a writer dispatches each put as the writer did: one put at a time
(the one-record path, codec.dispatch_few), a few at a time, and many (the batch path)."""

from rocketstore import Message, MessageStore
from rocketstore.format._codec_py import SCHEDULE_TOPIC

SMALL = dict(commitlog_file_size=16384, consume_queue_units=16, index_slots=16, index_count=64)


def every_unit(store):
    """(topic, queue id) -> that queue's units as tuples, from its min offset to its max."""
    units = {}
    for (topic, queue_id), (lo, hi) in sorted(store.queues().items()):
        rows, at = [], lo
        while at < hi:
            view = store.queue_units(topic, queue_id, at, hi - at)
            assert len(view), (topic, queue_id, at)
            rows += [tuple(int(v) for v in unit) for unit in view.tolist()]
            at += len(view)
        units[topic, queue_id] = rows
    return units


def single_puts(writer):
    """One put of every shape dispatch tells apart, each yielded after it is stored."""
    for tags in (None, "TagA", "тег"):
        writer.put("T", b"tags", tags=tags, queue_id=1)
        yield "tags", tags
    for keys in ("k1", "k1 k2", "  a  b ", "ключ", ["p", "q"]):
        writer.put("T", b"keys", keys=keys, queue_id=0)
        yield "keys", keys
    for level in (1, 3, 18):
        writer.put("T", b"delayed", tags="D", keys="dk", delay_level=level)
        yield "delay", level
    writer.put("X", b"before the transactions")
    yield "a queue's first unit", "X"
    for sys_flag in (0x4, 0x8, 0xC):  # prepared, commit, rollback: queue offset 0 (as Java's)
        writer.put(Message("X", b"tx", keys=f"tx{sys_flag}", tags="X", sys_flag=sys_flag))
        yield "transaction", sys_flag
    writer.put("B", b"batch-cq", queue_id=1)
    yield "batch-cq", "put"
    writer.put_batch("B", [b"a", b"b", b"c"], queue_id=0)
    yield "batch-cq", "put_batch"
    writer.put("C", b"compacted", keys="c1", queue_id=0)
    yield "compacted", "c1"
    # without keys: a batch (a single put to a compacted topic needs keys, as a broker's does)
    writer.put_messages([Message("C", b"compacted", queue_id=0)])
    yield "compacted", None
    writer.put_messages([Message("T", b"few", tags="F", queue_id=i % 2) for i in range(3)])
    yield "a few at once", 3
    writer.put_messages([Message("T", b"many", keys=f"m{i}", queue_id=i % 2) for i in range(40)])
    yield "many at once", 40


def test_a_follower_dispatches_every_single_put_as_the_writer_did(tmp_path, impl):
    path = tmp_path / "s"
    writer = MessageStore(path, implementation=impl.name, dispatch_interval_ms=0, **SMALL)
    writer.create_topic("T", 2)
    writer.create_topic("B", 2, queue_type="BatchCQ")
    writer.create_topic("C", 1)
    writer.create_topic("X", 1)
    writer.set_topic_retention("C", cleanup_policy="compaction")
    writer.put("T", b"first", queue_id=0)
    reader = MessageStore(path, read_only=True, implementation=impl.name)
    kernel = reader._opened.dispatcher._few_kernel
    taken = []

    def counting(*args):
        found = kernel(*args)
        taken.append(0 if found is None else len(found[2]))
        return found

    reader._opened.dispatcher._few_kernel = counting
    with writer, reader:
        for shape in single_puts(writer):
            assert reader.max_offset == writer.max_offset, shape  # the reader follows
            assert reader.queues() == writer.queues(), shape
            assert every_unit(reader) == every_unit(writer), shape
        keys = ("k1", "k2", "a", "b", "ключ", "p", "q", "dk", "tx4", "tx8", "tx12", "c1", "m7")
        for topic in ("T", "B", "C", "X", SCHEDULE_TOPIC):
            for key in keys:  # (a reader indexes keys when one is looked up)
                assert reader.key_offsets(topic, key) == writer.key_offsets(topic, key), (topic, key)
        assert writer.key_offsets("X", "tx8") and not writer.key_offsets("X", "tx12")
    assert taken.count(1) >= 19  # every single put took the one-record path
    assert 3 in taken  # so did a few at once
