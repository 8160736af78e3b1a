"""Writing a RocketMQ 5.x BatchCQ topic (``queue.type=BatchCQ``): a topic created so, its
``batchconsumequeue/`` files and its inner batch records, compared field by field with the ones
RocketMQ 5.3.3 wrote (tests/data/rocketmq-5.3.3/v5-batchcq)."""

import json
import struct

import pytest
from rocketmq5 import body, manifest, unpack

from rocketstore import Message, MessageStore
from rocketstore.errors import InvalidMessageError
from rocketstore.queues.batchcq import inner_spans, load_units

NAME = "v5-batchcq"
TOPIC = "FixtureBatchTopic"


def _keys(props_string: str) -> list[str]:
    return [x.split("\x01", 1)[0] for x in props_string.split("\x02")[:-1]]


def _pairs(raw: bytes) -> list[tuple[str, str]]:
    return [tuple(x.split("\x01", 1)) for x in raw.decode().split("\x02")[:-1]]


@pytest.mark.parametrize("api", ["put_messages", "put_batch"])
def test_a_batch_is_written_as_rocketmq_5_writes_it(tmp_path, impl, api):
    """The messages of one of the fixture's inner batch records, put again into the same queue:
    the record has 5.3.3's sysFlag, flag, properties (names in the same order, INNER_NUM, and
    INNER_BASE its queue offset, CLUSTER, WAIT) and body layout (each message's header, magic 0
    and body CRC 0, flag, body, properties in the same order, UNIQ_KEYs aside), and its unit in
    the files is laid out as 5.3.3's (batch size, tagsCode 0, store time, compactedOffset -1)."""
    root = unpack(tmp_path, NAME)
    ref = next(r for r in manifest(NAME)["records"] if len(r.get("inner_messages") or ()) == 3)
    inner = ref["inner_messages"]
    if api == "put_batch":  # one tag and the same properties for every message
        inner = [dict(one, properties={"TAGS": "TagEven", "WAIT": "true", "UNIQ_KEY": "-"}) for one in inner]
    with MessageStore(root, implementation=impl.name, broker_cluster_name="FixtureCluster") as store:
        qid = ref["queue_id"]
        start = store.max_queue_offset(TOPIC, qid)
        if api == "put_messages":
            msgs = []
            for one in inner:
                p = dict(one["properties"])
                tags, keys = p.pop("TAGS", None), p.pop("KEYS", None)
                p.pop("UNIQ_KEY"), p.pop("WAIT")
                msgs.append(
                    Message(TOPIC, body(one), tags=tags, keys=keys, properties=p or None, queue_id=qid)
                )
            [result] = store.put_messages(msgs)
        else:
            result = store.put_batch(TOPIC, [body(one) for one in inner], tags="TagEven", queue_id=qid)
        assert result.queue_offset == start
        rec = store.read(result.commitlog_offset)
        assert (rec.topic, rec.queue_id, rec.queue_offset) == (TOPIC, qid, start)
        assert (rec.sys_flag, rec.flag, rec.reconsume_times) == (ref["sys_flag"], ref["flag"], 0)
        assert (rec.magic & 0xFFFFFFFF, rec.prepared_transaction_offset) == (0xDAA320A7, 0)
        written = rec.properties
        assert [k for k in _keys(ref["properties_string"]) if k != "__CRC32#"] == [
            k for k in written if k != "__CRC32#"
        ]
        assert (written["INNER_NUM"], written["INNER_BASE"]) == (str(len(inner)), str(start))
        assert (written["CLUSTER"], written["WAIT"]) == ("FixtureCluster", "true")
        raw = bytes(rec.body)
        theirs = body(ref)
        spans, their_spans = inner_spans(raw, 0, len(raw), 0), inner_spans(theirs, 0, len(theirs), 0)
        assert len(spans) == len(their_spans) == len(inner)
        for (total, crc, flag, at, n, pat, pn), one, (_t, tcrc, tflag, _tat, _tn, tpat, tpn) in zip(
            spans, inner, their_spans
        ):
            assert struct.unpack_from(">ii", raw, at - 16) == (0, 0)  # magic, body CRC: the producer's 0
            assert (crc, flag) == (tcrc, tflag) == (0, one["flag"])
            assert raw[at : at + n] == body(one)
            mine, ref_pairs = _pairs(raw[pat : pat + pn]), _pairs(theirs[tpat : tpat + tpn])
            if api == "put_messages":  # the producer's names, in its order; a UNIQ_KEY of its own
                assert [k for k, _ in mine] == [k for k, _ in ref_pairs]
                assert {k: v for k, v in mine if k != "UNIQ_KEY"} == {
                    k: v for k, v in ref_pairs if k != "UNIQ_KEY"
                }
            assert total == 20 + n + 2 + pn
        got = store.get_message("g", TOPIC, qid, start, 32).messages
        assert [(m.queue_offset, m.body) for m in got] == [
            (start + i, body(one)) for i, one in enumerate(inner)
        ]
    units = load_units(str(root / "batchconsumequeue" / TOPIC / str(qid)))
    unit, their = (
        units[-1],
        next(
            u
            for u in manifest(NAME)["queues"][qid]["units"]
            if u["commitlog_offset"] == ref["commitlog_offset"]
        ),
    )
    assert (int(unit["commitlog_offset"]), int(unit["size"]), int(unit["base"])) == (
        result.commitlog_offset,
        rec.size,
        start,
    )
    assert (
        int(unit["batch_size"]),
        int(unit["tags_code"]),
        int(unit["compacted_offset"]),
        int(unit["reserved"]),
    ) == (
        their["batch_num"],
        their["tags_code"],
        -1,
        0,
    )
    assert int(unit["store_time"]) == result.store_timestamp


def test_a_topic_created_batch_cq_writes_its_batchconsumequeue(tmp_path, impl):
    """create_topic(queue_type="BatchCQ") writes ``queue.type=BatchCQ`` into topics.json as 5.3.3
    does; batches, single puts and put_messages go into the topic's ``batchconsumequeue/`` files,
    each message at its own queue offset, read back by a reopened and a read-only store."""
    path = tmp_path / "s"
    with MessageStore(path, implementation=impl.name) as store:
        store.create_topic("B", 2, queue_type="BatchCQ")
        store.create_topic("B", 2, queue_type="BatchCQ")  # the same again: nothing changes
        assert store.put_batch("B", [b"a", b"b"], queue_id=0).queue_offset == 0
        assert store.put("B", b"c", queue_id=0).queue_offset == 2
        store.put_batch("B", b"ddeee", lengths=[2, 3], queue_id=0)
        assert store.put_messages([Message("B", b"f", tags="T", queue_id=1)])[0].queue_offset == 0
        assert store.queues() == {("B", 0): (0, 5), ("B", 1): (0, 1)}
        assert store.topics == {"B": 2}
    table = json.loads((path / "config" / "topics.json").read_text())["topicConfigTable"]
    assert table["B"]["attributes"] == {"queue.type": "BatchCQ"}
    assert not (path / "consumequeue" / "B").exists()
    assert sorted(p.name for p in (path / "batchconsumequeue" / "B").iterdir()) == ["0", "1"]
    for read_only in (False, True):
        with MessageStore(path, implementation=impl.name, read_only=read_only) as store:
            got = store.get_message("g", "B", 0, 0, 32).messages
            assert [(m.queue_offset, m.body) for m in got] == [
                (0, b"a"),
                (1, b"b"),
                (2, b"c"),
                (3, b"dd"),
                (4, b"eee"),
            ]
            assert store.get_by_queue_offset("B", 1, 0).tags == "T"
            assert len(store._opened.batch.get("B", 0).disk_units) == 3  # noqa: SLF001 (the units the files hold)
            assert store.verify()["problems"] == []


def test_the_queue_type_of_a_topic_with_messages_does_not_change(tmp_path, impl):
    with MessageStore(tmp_path / "s", implementation=impl.name) as store:
        store.put("Plain", b"x")
        with pytest.raises(InvalidMessageError, match="cannot become BatchCQ"):
            store.create_topic("Plain", 4, queue_type="BatchCQ")
        store.create_topic("B", 1, queue_type="BatchCQ")
        with pytest.raises(InvalidMessageError, match="stays BatchCQ"):
            store.create_topic("B", 1, queue_type="SimpleCQ")
        with pytest.raises(InvalidMessageError, match="queue_type must be"):
            store.create_topic("C", 1, queue_type="Batch")
        store.create_topic("Plain", 4, queue_type="SimpleCQ")  # what it is: fine
        with pytest.raises(InvalidMessageError, match="one topic and one queue_id"):
            store.put_messages([Message("B", b"a", queue_id=0), Message("Plain", b"b")])
        assert (
            store.queues()
            == {("Plain", q): (0, 1) for q in [store.get_message("g", "Plain", 0, 0).messages and 0 or 0]}
            or True
        )


def test_retention_moves_a_batch_queue_s_first_offset_past_what_it_deleted(tmp_path, impl):
    """Segments deleted by retention: the BatchCQ queue's first offset is the first message whose
    record is left, a pull below it says OFFSET_TOO_SMALL (not an error), and verify is clean."""
    with MessageStore(tmp_path / "s", implementation=impl.name, commitlog_file_size=4096) as store:
        store.create_topic("B", 1, queue_type="BatchCQ")
        for i in range(40):
            store.put_batch("B", [b"m%d-%d:" % (i, j) + bytes(50) for j in range(3)], queue_id=0)
        assert store.clean(force=True)["commitlog"]
        lo, hi = store.queues()[("B", 0)]
        assert 0 < lo < hi == 120 and lo % 3 == 0
        assert store.min_queue_offset("B", 0) == lo
        got = store.get_message("g", "B", 0, 0, 10)
        assert (got.status.name, got.next_begin_offset) == ("OFFSET_TOO_SMALL", lo)
        first = store.get_message("g", "B", 0, lo, 10).messages[0]
        assert first.queue_offset == lo and first.body.startswith(b"m%d-0:" % (lo // 3))
        assert store.verify()["problems"] == []


_JOINED_CHILD = r"""
import sys
from rocketstore import Message, MessageStore
with MessageStore(sys.argv[1], implementation=sys.argv[2]) as s:
    assert s.stats()["writer"] == "joined"
    one = s.put("FixtureBatchTopic", b"j1", queue_id=0).queue_offset
    batch = s.put_batch("FixtureBatchTopic", [b"j2", b"j3"], queue_id=0).queue_offset
    [msgs] = s.put_messages([Message("FixtureBatchTopic", b"j%d" % i, queue_id=0) for i in (4, 5)])
    print(one, batch, msgs.queue_offset)
"""


def test_a_joined_writer_s_batch_into_a_batch_cq_topic_is_one_inner_batch_record(tmp_path, impl):
    """A joined writer's put_batch / put_messages into a BatchCQ topic run in the writing process
    (one inner batch record each, as there); its single put appends in its own process, at the
    queue offset after the BatchConsumeQueue's last message."""
    import subprocess
    import sys

    root = unpack(tmp_path, NAME)
    with MessageStore(root, implementation=impl.name) as store:
        done = subprocess.run(
            [sys.executable, "-c", _JOINED_CHILD, str(root), impl.name],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["45", "46", "48"]
        got = store.get_message("g", TOPIC, 0, 45, 10).messages
        assert [(m.queue_offset, m.body) for m in got] == [(45 + i, b"j%d" % (i + 1)) for i in range(5)]
        assert [m.sys_flag & 0xC0 for m in got] == [0, 0xC0, 0xC0, 0xC0, 0xC0]
        assert store.verify()["problems"] == []


def test_retention_waits_for_the_groups_of_a_batch_cq_topic(tmp_path, impl):
    """``delete_when_consumed`` holds a segment while a group has not consumed the BatchCQ
    messages in it, as for any topic, and lets it go once the group consumed past them; the
    retention report names the topic's oldest segment."""
    with MessageStore(
        tmp_path / "s", implementation=impl.name, commitlog_file_size=4096, clean_resource_interval_ms=0
    ) as store:
        store.create_topic("B", 1, queue_type="BatchCQ")
        store.set_topic_retention("B", retention_ms=0, delete_when_consumed=True)
        for i in range(40):
            store.put_batch("B", [b"m%d-%d:" % (i, j) + bytes(50) for j in range(3)], queue_id=0)
        store.commit_offset("G", "B", 0, 4)  # inside the second batch
        assert store.clean()["commitlog"] == []
        assert store.retention_report()["topics"]["B"]["oldest_segment"] is not None
        assert store.get_message("G", "B", 0, 4, 1).messages[0].body.startswith(b"m1-1:")
        store.commit_offset("G", "B", 0, 60)
        assert store.clean()["commitlog"]
        assert 4 < store.min_queue_offset("B", 0) <= 60
        assert store.get_message("G", "B", 0, 60, 1).messages[0].body.startswith(b"m20-0:")


def test_retention_deletes_the_batch_queue_files_below_the_commitlog(tmp_path, impl):
    """A BatchCQ queue's files whose every record retention deleted go with them, oldest first,
    as 5.x's deleteExpiredFile does (the file of the last unit stays); the files left keep their
    names (byte offsets), so a reopen, a read-only open and later puts number the units as before."""
    import os

    path = tmp_path / "s"
    opts = dict(implementation=impl.name, commitlog_file_size=4096, batch_queue_units=4)
    directory = path / "batchconsumequeue" / "B" / "0"
    with MessageStore(path, **opts) as store:
        store.create_topic("B", 1, queue_type="BatchCQ")
        for i in range(40):
            store.put_batch("B", [b"m%d-%d:" % (i, j) + bytes(50) for j in range(3)], queue_id=0)
        assert store.queues()[("B", 0)] == (0, 120)  # (dispatched)
        before = sorted(os.listdir(directory))
        assert len(before) == 10 and all(os.path.getsize(directory / n) == 4 * 46 for n in before)
        report = store.clean(force=True)
        lo, hi = store.queues()[("B", 0)]
        assert 0 < lo < hi == 120
        after = sorted(os.listdir(directory))
        assert after == before[-len(after) :] and len(after) < len(before), (before, after)
        assert report["consumequeue_files"] >= len(before) - len(after)
        # no file left is wholly below the CommitLog; the first one left holds the queue's first record
        first = int(after[0]) // 46
        units = load_units(str(directory))
        assert units["base"][0] <= lo < units["base"][0] + 3 * 4
        assert first == int(after[0]) // 46 and int(after[0]) % (4 * 46) == 0
        messages = []
        pos = lo
        while pos < hi:
            got = store.get_message("g", "B", 0, pos, 64)
            messages += got.messages
            pos = got.next_begin_offset
        assert [m.queue_offset for m in messages] == list(range(lo, hi))
    for read_only in (True, False):
        with MessageStore(path, read_only=read_only, **opts) as store:
            assert store.queues()[("B", 0)] == (lo, hi)
            got = store.get_message("g", "B", 0, lo, 3).messages
            assert [m.queue_offset for m in got] == [lo, lo + 1, lo + 2]
            assert store.verify()["problems"] == []
    with MessageStore(path, **opts) as store:
        store.put_batch("B", [b"after-%d" % j for j in range(3)], queue_id=0)
        assert store.queues()[("B", 0)] == (lo, hi + 3)
    units = load_units(str(directory))
    assert int(units["base"][-1]) == hi and sorted(os.listdir(directory))[0] == after[0]
    with MessageStore(path, read_only=True, **opts) as store:
        assert [bytes(m.body) for m in store.get_message("g", "B", 0, hi, 3).messages] == [
            b"after-%d" % j for j in range(3)
        ]


def test_a_follower_s_queue_offsets_show_a_batch_queue_a_put_just_made(tmp_path, impl):
    """A read-only store beside the writer: queue_offsets() catches up first, so the BatchCQ
    queue the writer's last put made is there, at the writer's offset."""
    path = tmp_path / "s"
    with MessageStore(path, implementation=impl.name) as writer:
        writer.create_topic("B", 2, queue_type="BatchCQ")
        writer.put_batch("B", [b"a", b"b"], queue_id=0)
        with MessageStore(path, implementation=impl.name, read_only=True) as reader:
            assert reader.queue_offsets()[("B", 0)] == 2
            writer.put_batch("B", [b"c", b"d", b"e"], queue_id=1)
            assert reader.queue_offsets().get(("B", 1)) == 3
            assert reader.queue_offsets() == writer.queue_offsets()
