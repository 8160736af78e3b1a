"""Stores Apache RocketMQ 5.3.3 wrote, opened read-only and writable on both twins: every record
its manifest lists is found, ``verify`` is clean, and a writable open leaves RocketMQ's files as
they were unless it has to change them."""

import os
import shutil
import subprocess
import sys
import tarfile

import pytest
from rocketmq5 import DATA, STORES, body, changed_files, check_records, manifest, unpack

from rocketstore import Consumer, MessageStore
from rocketstore.errors import UnsupportedStoreError


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
            assert [
                m.queue_offset for m in store.get_message("g", topic, 0, 0, 32, "TagV2").messages
            ] == tagged
            consumer = Consumer(store, "g", {topic: "TagV2"}, retry=False)
            assert [m.queue_offset for m in consumer.poll(32)] == tagged
        assert check_records(store, "v5-v2-long-topic") == 40
    assert changed_files(root, "v5-v2-long-topic") == []


@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writable"])
def test_batch_consume_queue_hands_out_each_inner_message_at_its_own_position(tmp_path, impl, read_only):
    """A ``queue.type=BatchCQ`` topic's queues are its ``batchconsumequeue/`` files: no
    ConsumeQueue is made for it, nothing is reported skipped or missing, and each message of an
    inner batch is found at its own queue offset, by a pull, a Consumer and a lookup."""
    name = "v5-batchcq"
    root = unpack(tmp_path, name)
    queues = [q for q in manifest(name)["queues"] if q["type"] == "BatchCQ"]
    expected = {}  # (queue id, queue offset) -> (body, properties) of every inner message
    for rec in manifest(name)["records"]:
        if rec["topic"] == "FixtureBatchTopic":
            for i, one in enumerate(rec.get("inner_messages") or [rec]):
                expected[(rec["queue_id"], rec["queue_offset"] + i)] = (body(one), one["properties"])
    with MessageStore(root, implementation=impl.name, read_only=read_only) as store:
        report = store.verify()
        assert report["ok"], report["problems"]
        for q in queues:
            topic, qid = q["topic"], q["queue_id"]
            assert (store.min_queue_offset(topic, qid), store.max_queue_offset(topic, qid)) == (
                q["min_offset"],
                q["max_offset"],
            )
            assert store.queues()[(topic, qid)] == (q["min_offset"], q["max_offset"])
            got, pos = [], q["min_offset"]
            while pos < q["max_offset"]:
                res = store.get_message("g", topic, qid, pos, 7)
                assert res.messages, pos
                got += res.messages
                pos = res.next_begin_offset
            assert [m.queue_offset for m in got] == list(range(q["min_offset"], q["max_offset"]))
            for m in got:
                assert (m.body, dict(m.properties)) == expected[(qid, m.queue_offset)]
            even = [m.queue_offset for m in got if m.tags == "TagEven"]
            assert (
                even
                and [m.queue_offset for m in store.get_message("g", topic, qid, 0, 64, "TagEven").messages]
                == even
            )
        consumer = Consumer(store, "g", "FixtureBatchTopic", retry=False)
        polled = []
        while batch := consumer.poll(5):
            polled += [(m.queue_id, m.queue_offset) for m in batch]
        assert sorted(polled) == sorted(expected)
        assert ("FixtureBatchTopic", 0) not in {(cq.topic, cq.queue_id) for cq in store._opened.queues}  # noqa: SLF001
        assert check_records(store, name) == len(expected) + 10
        assert not (root / "consumequeue" / "FixtureBatchTopic").exists()
    assert changed_files(root, name) == []


def test_a_put_to_a_batch_cq_topic_takes_the_queue_offset_after_rocketmq_s_last(tmp_path, impl):
    """A writable open of a store 5.3.3 wrote takes puts into its BatchCQ topic: the next queue
    offset is the BatchConsumeQueue's end (a batch record counts its messages), a single put is a
    plain record, a batch one inner batch record; RocketMQ's units stay as they were, the new ones
    follow them in the same files."""
    root = unpack(tmp_path, "v5-batchcq")
    with MessageStore(root, implementation=impl.name) as store:
        assert store.put("FixtureBatchTopic", b"x", queue_id=1).queue_offset == 45
        got = store.put_batch("FixtureBatchTopic", [b"a", b"b", b"c"], tags="T", queue_id=0)
        assert got.queue_offset == 45
        assert store.put("FixtureBatchTopic", b"y", tags="T", queue_id=0).queue_offset == 48
        assert store.put("FixtureSimpleTopic", b"y").queue_offset == 10
        assert store.verify()["ok"]
    with MessageStore(root, implementation=impl.name, read_only=True) as store:
        assert store.queues()[("FixtureBatchTopic", 0)] == (0, 49)
        assert store.queues()[("FixtureBatchTopic", 1)] == (0, 46)
        got = store.get_message("g", "FixtureBatchTopic", 0, 44, 10).messages
        assert [(m.queue_offset, bytes(m.body)) for m in got][1:] == [
            (45, b"a"),
            (46, b"b"),
            (47, b"c"),
            (48, b"y"),
        ]
        assert check_records(store, "v5-batchcq") > 0
        assert store.verify()["problems"] == []
    changed = changed_files(root, "v5-batchcq")
    assert sorted(p for p in changed if p.startswith("batchconsumequeue/")) == [
        "batchconsumequeue/FixtureBatchTopic/0/00000000000000000368",
        "batchconsumequeue/FixtureBatchTopic/1/00000000000000000368",
    ]
    for qid, kept in ((0, 4), (1, 1)):  # the units RocketMQ wrote in the file, byte for byte
        path = f"batchconsumequeue/FixtureBatchTopic/{qid}/00000000000000000368"
        data = (root / path).read_bytes()
        with tarfile.open(DATA / "v5-batchcq.tar.gz") as tar:
            theirs = tar.extractfile(f"v5-batchcq/{path}").read()
        assert data[: kept * 46] == theirs[: kept * 46] and data[kept * 46 : (kept + 1) * 46] != bytes(46)


def _timer_uniq_keys(name):
    man = manifest(name)
    records = [r for r in man["records"] if r["topic"] == "rmq_sys_wheel_timer"]
    pending = {records[i]["uniq_key"] for i in man["timer_pending_puts"]}
    return pending, man["timer_recalled_uniq_key"]


@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writable"])
def test_timer_stats_lists_the_timers_rocketmq_left_pending(tmp_path, impl, read_only):
    """The 8 timer messages a 5.3.3 broker had in ``timerlog/`` + ``timerwheel`` (after
    ``config/timercheck``) are the store's pending timers, the recalled one known as recalled."""
    name = "v5-timer"
    root = unpack(tmp_path, name)
    pending, recalled = _timer_uniq_keys(name)
    with MessageStore(root, implementation=impl.name, read_only=read_only, timer_interval_ms=0) as store:
        stats = store.timer_stats()
        wheel = stats["rocketmq"]
        assert {p["uniq_key"] for p in wheel["pending"]} == pending
        assert {p["topic"] for p in wheel["pending"]} == {"FixtureTimerTopic"}
        assert wheel["recalled"] == [recalled]
        assert stats["pending"] >= len(pending)
        assert stats["next_deliver_ms"] == min(p["deliver_ms"] for p in wheel["pending"])


def test_a_writable_open_delivers_no_timer_rocketmq_delivered_or_recalled(tmp_path, impl):
    """RocketMQ's checkpoint says which timers it delivered: a writable open delivers each of the
    others once when due (the fixture's are due hours after it was written), and never a
    recalled one or the recall itself."""
    name = "v5-timer"
    root = unpack(tmp_path, name)
    pending, recalled = _timer_uniq_keys(name)
    with MessageStore(root, implementation=impl.name, timer_interval_ms=0) as store:
        before = {
            m.unique_key
            for q in (0, 1)
            for m in store.get_message("g", "FixtureTimerTopic", q, 0, 64).messages
        }
        store.deliver_timers(now=2**62)
        after = [
            m.unique_key
            for q in (0, 1)
            for m in store.get_message("g", "FixtureTimerTopic", q, 0, 64).messages
        ]
        timers = {r["uniq_key"] for r in manifest(name)["records"] if r["topic"] == "rmq_sys_wheel_timer"}
        new = [k for k in after if k not in before and k in timers]  # (not the delay levels')
        assert sorted(new) == sorted(pending)
        assert recalled not in after
        assert store.timer_stats()["pending"] == 0


@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writable"])
def test_the_compacted_view_of_a_compaction_topic(tmp_path, impl, read_only):
    """``compaction_log`` hands out what a 5.3.3 broker's compaction kept of a
    ``cleanup.policy=COMPACTION`` topic's queue; ``compacted`` the latest message of each key,
    the queue's messages past the log included, a tombstone (empty body) ending its key."""
    name = "v5-compaction"
    root = unpack(tmp_path, name)
    man = manifest(name)
    topic = "FixtureCompactTopic"
    with MessageStore(root, implementation=impl.name, read_only=read_only) as store:
        assert store.verify()["ok"]
        for qid in (0, 1):
            view = [e for e in man["compacted_view"] if e["queue_id"] == qid]
            log = store.compaction_log(topic, qid)
            assert [(m.queue_offset, m.commitlog_offset, m.keys, m.body) for m in log] == [
                (e["queue_offset"], e["commitlog_offset"], e["keys"], body(e)) for e in view
            ]
            latest = {}
            for e in view:
                latest.pop(e["keys"], None)
                latest[e["keys"]] = e
            past = [
                r
                for r in man["records"]
                if r["topic"] == topic
                and r["queue_id"] == qid
                and r["queue_offset"] > view[-1]["queue_offset"]
            ]
            for r in past:
                latest.pop(r["keys"], None)
                latest[r["keys"]] = r
            expected = {k: body(e) for k, e in latest.items() if body(e)}
            got = store.compacted(topic, qid)
            assert {k: m.body for k, m in got.items()} == expected
            assert list(got) == list(expected)
        assert qid == 1 and "user-5" not in got  # its tombstone
        assert store.compaction_log("FixtureNormalTopic", 0) == []
    assert changed_files(root, name) == []


def test_the_compacted_view_takes_the_queue_past_the_log(tmp_path, impl):
    root = unpack(tmp_path, "v5-compaction")
    topic = "FixtureCompactTopic"
    with MessageStore(root, implementation=impl.name) as store:
        before = store.compacted(topic, 0)
        store.put(topic, b"newer", keys="user-4", queue_id=0)
        store.put(topic, b"", keys="user-6", queue_id=0)  # a tombstone
        store.put(topic, b"first", keys="user-new", queue_id=0)
        got = store.compacted(topic, 0)
        assert got["user-4"].body == b"newer" and got["user-new"].body == b"first"
        assert "user-6" in before and "user-6" not in got
        assert list(got)[-2:] == ["user-4", "user-new"]


#: What a writable open of the crashed store must change, as RocketMQ's own recovery after an
#: abnormal stop does: the ``abort`` file goes at the clean stop, the segment the crash left
#: holding no whole record (the valid data ends at 64,080, in the first) is deleted, and the
#: index file newer than the checkpoint is dropped (its keys are indexed again).
RECOVERY_DELETES = {
    "v5-crashed": ["abort", "commitlog/00000000000000065536", "index/20261128200543523"],
}


@pytest.mark.parametrize("name", STORES)
@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writable"])
def test_every_rocketmq_5_store_opens_verifies_and_has_every_record(tmp_path, impl, name, read_only):
    """Each store 5.3.3 wrote opens read-only and writable on both twins, ``rocketstore verify``
    exits 0, every record of its manifest is found, and a writable open leaves RocketMQ's files
    as they were (but the checkpoint, which every writable open rewrites at its stop)."""
    root = unpack(tmp_path, name)
    options = {} if read_only else {"timer_interval_ms": 0, "schedule_interval_ms": 0}
    with MessageStore(root, implementation=impl.name, read_only=read_only, **options) as store:
        assert store.verify()["problems"] == []
        assert check_records(store, name) > 0
    if not read_only:
        assert changed_files(root, name) == RECOVERY_DELETES.get(name, [])
        assert not any((root / path).exists() for path in RECOVERY_DELETES.get(name, []))
    env = {**os.environ, "ROCKETSTORE_NO_EXTENSIONS": "1" if impl.name == "py" else ""}
    done = subprocess.run(
        [sys.executable, "-m", "rocketstore", "verify", "--store", str(root)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writable"])
def test_a_batch_cq_unit_past_the_recovered_commitlog_is_not_read(tmp_path, impl, read_only):
    """A crash that lost the CommitLog's last record but not its BatchConsumeQueue unit: the
    queue ends before that unit, as every other queue ends at the recovered CommitLog."""
    root = unpack(tmp_path, "v5-batchcq")
    last = [
        r
        for r in manifest("v5-batchcq")["records"]
        if r["topic"] == "FixtureBatchTopic" and r["queue_id"] == 0
    ][-1]
    segment = root / "commitlog" / "00000000000000000000"
    data = bytearray(segment.read_bytes())
    data[last["commitlog_offset"] :] = bytes(len(data) - last["commitlog_offset"])
    segment.write_bytes(bytes(data))
    (root / "abort").write_bytes(b"")
    with MessageStore(root, implementation=impl.name, read_only=read_only) as store:
        assert store.max_queue_offset("FixtureBatchTopic", 0) == last["queue_offset"]
        got = store.get_message("g", "FixtureBatchTopic", 0, 0, 64).messages
        assert [m.queue_offset for m in got] == list(range(last["queue_offset"]))
        assert store.verify()["problems"] == []


def _as_rocksdb_queue_store(root):
    """``root`` with its consumequeue/ replaced by the files of a RocksDB database, as a 5.x
    broker with ``storeType=defaultRocksDB`` keeps its queues (no such store is in the fixtures:
    writing one needs RocketMQ's own RocksDB compaction filter)."""
    cq = root / "consumequeue"
    shutil.rmtree(cq)
    cq.mkdir()
    for name, data in {
        "CURRENT": b"MANIFEST-000005\n",
        "MANIFEST-000005": bytes(64),
        "IDENTITY": b"0b8c3d4e\n",
        "LOCK": b"",
        "OPTIONS-000007": b"[Version]\n",
        "000004.log": b"",
    }.items():
        (cq / name).write_bytes(data)
    return sorted((p.name, p.stat().st_size) for p in cq.iterdir())


def test_a_rocksdb_queue_store_is_read_read_only_and_refused_for_writing(tmp_path, impl):
    """A writable open would append messages the broker's RocksDB queues never list: it is
    refused, touching nothing; a read-only open rebuilds the queues from the CommitLog."""
    root = unpack(tmp_path, "v5-basic")
    files = _as_rocksdb_queue_store(root)

    def tree():
        return sorted((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*"))

    before = tree()
    with pytest.raises(UnsupportedStoreError, match="read_only=True"):
        MessageStore(root, implementation=impl.name)
    assert tree() == before
    with MessageStore(root, implementation=impl.name, read_only=True) as store:
        assert check_records(store, "v5-basic") > 0
    assert sorted((p.name, p.stat().st_size) for p in (root / "consumequeue").iterdir()) == files
    assert [p for p in changed_files(root, "v5-basic") if not p.startswith("consumequeue/")] == []
