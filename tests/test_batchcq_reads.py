"""A RocketMQ 5.x BatchCQ topic (``queue.type=BatchCQ``, tests/data/rocketmq-5.3.3/v5-batchcq) read
through every queue view: each inner message of a batch record has its own queue offset, as 5.3.3
gives it, in the unit views (``get_units``, ``queue_units``), ``records_at``,
``queue_offset_of_time``, ``queue_offsets``, POP, the Spark reader and the CLI's export."""

import json
import subprocess
import sys

import numpy as np
import pytest
from rocketmq5 import body, manifest, unpack

from rocketstore import MessageStore
from rocketstore.errors import ConsumeQueueDamagedError

NAME = "v5-batchcq"
TOPIC = "FixtureBatchTopic"


def _queues():
    return [q for q in manifest(NAME)["queues"] if q["type"] == "BatchCQ"]


def _unit_of(q, position):
    """The manifest's unit of queue ``q`` holding queue offset ``position``."""
    for u in q["units"]:
        if u["queue_offset"] <= position < u["queue_offset"] + u["batch_num"]:
            return u
    raise AssertionError(position)


def _inner():
    """(queue id, queue offset) -> (body, properties) of every message of the BatchCQ topic."""
    found = {}
    for rec in manifest(NAME)["records"]:
        if rec["topic"] == TOPIC:
            for i, one in enumerate(rec.get("inner_messages") or [rec]):
                found[(rec["queue_id"], rec["queue_offset"] + i)] = (body(one), one["properties"])
    return found


@pytest.fixture
def root(tmp_path):
    return unpack(tmp_path, NAME)


@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writable"])
def test_queue_units_give_one_row_per_inner_message(root, impl, read_only):
    """queue_units of a BatchCQ queue: one row per queue offset, each the CommitLog offset and
    size of the record holding that message and its unit's tagsCode, as the manifest's units say."""
    with MessageStore(root, implementation=impl.name, read_only=read_only) as store:
        for q in _queues():
            lo, hi = q["min_offset"], q["max_offset"]
            units = store.queue_units(TOPIC, q["queue_id"], lo, hi - lo + 10)
            assert len(units) == hi - lo
            for i, row in enumerate(units.tolist()):
                u = _unit_of(q, lo + i)
                assert row == (u["commitlog_offset"], u["size"], u["tags_code"]), lo + i
            tail = store.queue_units(TOPIC, q["queue_id"], hi - 3, 2)
            assert tail.tolist() == units[hi - lo - 3 : hi - lo - 1].tolist()
            assert len(store.queue_units(TOPIC, q["queue_id"], hi, 5)) == 0
        assert store.queue_offsets()[(TOPIC, 0)] == 45


@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writable"])
def test_get_units_pages_through_every_inner_message(root, impl, read_only):
    """get_units of a BatchCQ queue pages by inner message; a tag expression drops only the rows
    of a unit of one message whose tagsCode does not match (a batch's unit carries no tags)."""
    with MessageStore(root, implementation=impl.name, read_only=read_only) as store:
        for q in _queues():
            qid, lo, hi = q["queue_id"], q["min_offset"], q["max_offset"]
            pos, seen = lo, []
            while pos < hi:
                got = store.get_units(TOPIC, qid, pos, 4)
                assert got.status.name == "FOUND" and got.message_count <= 4
                assert (got.min_offset, got.max_offset) == (lo, hi)
                seen += got.queue_offsets.tolist()
                for off, row in zip(got.queue_offsets.tolist(), got.units.tolist()):
                    u = _unit_of(q, off)
                    assert row == (u["commitlog_offset"], u["size"], u["tags_code"])
                pos = got.next_begin_offset
            assert seen == list(range(lo, hi))
            assert store.get_units(TOPIC, qid, hi, 4).status.name == "OFFSET_OVERFLOW_ONE"
            singles = {
                u["queue_offset"]: u["tags_code"]
                for u in q["units"]
                if u["batch_num"] == 1 and u["tags_code"]
            }
            codes = set(singles.values())
            if codes:
                code = next(iter(codes))
                tagged = store.get_units(TOPIC, qid, lo, 200, "NoSuchTag").queue_offsets.tolist()
                assert not set(tagged) & set(singles)  # a single tagged message is filtered
                assert len(tagged) == (hi - lo) - len(singles)
                assert code in store.get_units(TOPIC, qid, lo, 200).units["tags_code"].tolist()


@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writable"])
def test_queue_offset_of_time_is_a_batch_base(root, impl, read_only):
    """The first queue offset stored at or after a time: the base of the first unit whose
    record is that recent (a batch's messages share its store time), as 5.3.3's lookup by time."""
    with MessageStore(root, implementation=impl.name, read_only=read_only) as store:
        for q in _queues():
            units = q["units"]
            times = sorted({u["store_time"] for u in units})
            for t in [0, *times, times[-1] + 1, *(x - 1 for x in times)]:
                later = [u["queue_offset"] for u in units if u["store_time"] >= t]
                want = min(later) if later else q["max_offset"]
                assert store.queue_offset_of_time(TOPIC, q["queue_id"], t) == want, t


@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writable"])
def test_records_at_a_batch_queue_gives_a_row_per_inner_message(root, impl, read_only):
    """records_at over queue_units of a BatchCQ queue: one row per queue offset, its body and
    properties the inner message's (spans of the segment's view)."""
    expected = _inner()
    with MessageStore(root, implementation=impl.name, read_only=read_only) as store:
        for q in _queues():
            qid = q["queue_id"]
            for first, count in ((0, 45), (2, 9), (44, 1)):
                units = store.queue_units(TOPIC, qid, first, count)
                rows_seen = []
                for _base, view, rows in store.records_at(
                    units["commitlog_offset"], units["size"], queue=(TOPIC, qid, first)
                ):
                    for r in rows:
                        b = bytes(view[r["body_pos"] : r["body_pos"] + r["body_len"]])
                        p = bytes(view[r["properties_pos"] : r["properties_pos"] + r["properties_len"]])
                        off = int(r["queue_offset"])
                        assert b == expected[(qid, off)][0], off
                        pairs = [x.split("\x01", 1) for x in p.decode().split("\x02")[:-1]]
                        assert dict(pairs) == expected[(qid, off)][1], off
                        rows_seen.append(off)
                assert rows_seen == list(range(first, first + count))
            units = store.queue_units(TOPIC, qid, 1, 3)
            shifted = units.copy()
            shifted["commitlog_offset"][1] = 0  # not the unit of queue offset 2
            with pytest.raises(ConsumeQueueDamagedError):
                list(store.records_at(shifted["commitlog_offset"], shifted["size"], queue=(TOPIC, qid, 1)))


def test_pop_receives_and_acks_each_inner_message(root, impl, clock):
    """receive on a BatchCQ topic hands out each inner message at its own queue offset; one not
    acknowledged comes back after its invisible time with the same body; acked ones never do."""
    expected = _inner()
    with MessageStore(root, implementation=impl.name, clock=clock, schedule_interval_ms=0) as store:
        got = []
        while batch := store.receive("pg", TOPIC, 16, 1000):
            got += list(batch)
        assert sorted((r.message.queue_id, r.message.queue_offset) for r in got) == sorted(expected)
        for r in got:
            m = r.message
            assert (m.body, dict(m.properties)) == expected[(m.queue_id, m.queue_offset)]
        keep = [r for r in got if r.message.queue_offset % 7 == 3]
        assert store.ack_many([r for r in got if r not in keep]) == len(got) - len(keep)
        clock.now += 1001
        again = []
        while batch := store.receive("pg", TOPIC, 16, 1000):
            again += list(batch)
        back = sorted((r.message.queue_id, r.message.queue_offset, bytes(r.message.body)) for r in again)
        assert back == sorted(
            (r.message.queue_id, r.message.queue_offset, bytes(r.message.body)) for r in keep
        )
        assert store.ack_many(again) == len(keep)
        for qid in (0, 1):
            assert store.committed_offset("pg", TOPIC, qid) == 45


def test_cli_export_writes_each_inner_message(root, impl):
    """``rocketstore export`` of a BatchCQ topic: one line per message, at its own queue offset."""
    env = {"ROCKETSTORE_NO_EXTENSIONS": "1"} if impl.name == "py" else {}
    done = subprocess.run(
        [sys.executable, "-m", "rocketstore", "--store", str(root), "export", "--topic", TOPIC],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, **env},
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert sorted((x["queue_id"], x["queue_offset"]) for x in lines) == sorted(_inner())


def test_spark_reads_each_inner_message_by_queue_and_by_commitlog(root):
    """The Spark reader's two paths (queue ranges, CommitLog ranges) over a BatchCQ topic: a row
    per inner message, its queue offset, body and properties; a range inside a batch stops there."""
    pytest.importorskip("pyarrow")
    from rocketstore.spark import read_commitlog_range, read_queue_range
    from rocketstore.spark._options import arrow_schema

    columns = ["topic", "queueId", "queueOffset", "commitLogOffset", "body", "properties"]
    assert arrow_schema(columns)
    expected = _inner()

    class Q:  # the fields read_queue_range and read_commitlog_range read (no pyspark needed)
        def __init__(self, **kw):
            self.__dict__.update(kw)

    for qid in (0, 1):
        for start, end in ((0, 45), (2, 10)):
            want = [(qid, o) for o in range(start, end)]
            by_queue = [
                row
                for batch in read_queue_range(
                    Q(root=str(root), broker="b", topic=TOPIC, queue_id=qid, start=start, end=end), columns
                )
                for row in batch.to_pylist()
            ]
            with MessageStore(root, read_only=True) as store:
                units = store.queue_units(TOPIC, qid, start, end - start)
                lo = int(units["commitlog_offset"].min())
                hi = int((units["commitlog_offset"] + units["size"]).max())
            by_log = [
                row
                for batch in read_commitlog_range(
                    Q(root=str(root), broker="b", start=lo, end=hi, ranges=((TOPIC, qid, start, end),)),
                    columns,
                )
                for row in batch.to_pylist()
            ]
            for rows in (by_queue, by_log):
                assert [(r["queueId"], r["queueOffset"]) for r in rows] == want
                for r in rows:
                    b, props = expected[(r["queueId"], r["queueOffset"])]
                    assert (r["topic"], r["body"], dict(r["properties"])) == (TOPIC, b, props)


def test_unwrap_rows_leaves_rows_without_inner_batches_alone(tmp_path, impl):
    """unwrap_rows hands back the very rows it was given when none is an inner batch (the
    CommitLog path of the Spark reader pays one vectorised test per chunk)."""
    from rocketstore.queues.batchcq import unwrap_rows

    with MessageStore(tmp_path / "s", implementation=impl.name) as store:
        for i in range(5):
            store.put("T", b"m%d" % i, queue_id=0)
        for base, view, rows in store.scan(0, store.max_offset, views=True):
            assert unwrap_rows(view, rows, base) is rows
            assert np.array_equal(rows["queue_offset"], np.arange(5))


@pytest.mark.parametrize("lost", ["last-file", "directory"])
@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writable"])
def test_batch_queue_files_lost_at_their_tail_are_indexed_from_the_commitlog(root, impl, read_only, lost):
    """A BatchConsumeQueue whose last file (or whole directory) is gone after a clean stop: the
    records past its units are indexed from the CommitLog, so no message is missing from the
    queue (before, a clean stop's dispatch started past them and they were silently not there)."""
    import shutil

    if lost == "last-file":
        (root / "batchconsumequeue" / TOPIC / "0" / "00000000000000000368").unlink()
    else:
        shutil.rmtree(root / "batchconsumequeue")
    expected = _inner()
    with MessageStore(root, implementation=impl.name, read_only=read_only) as store:
        assert store.queues()[(TOPIC, 0)] == (0, 45) and store.queues()[(TOPIC, 1)] == (0, 45)
        for (qid, off), (b, props) in expected.items():
            m = store.get_by_queue_offset(TOPIC, qid, off)
            assert (m.body, dict(m.properties)) == (b, props), (qid, off)
        assert store.verify()["problems"] == []


def test_units_indexed_from_the_commitlog_are_rocketmq_s_units_byte_for_byte(root, impl):
    """The units a store without batchconsumequeue/ indexes from the CommitLog, laid out as
    5.3.3's files, are the fixture's files byte for byte (tagsCode, store time, base, batch
    size, compactedOffset -1, reserved 0, the file size and naming): what a writer must write."""
    import hashlib
    import shutil

    files = {
        f["path"]: f["sha256"] for f in manifest(NAME)["files"] if f["path"].startswith("batchconsumequeue/")
    }
    size = manifest(NAME)["config"]["mapperFileSizeBatchConsumeQueue"]
    shutil.rmtree(root / "batchconsumequeue")
    with MessageStore(root, implementation=impl.name, read_only=True) as store:
        got = {}
        for bq in store._opened.batch:  # noqa: SLF001 (the in-memory units, laid out as files)
            for name, data in bq.file_images(size).items():
                got[f"batchconsumequeue/{bq.topic}/{bq.queue_id}/{name}"] = hashlib.sha256(data).hexdigest()
    assert got == files


def test_inner_batch_records_encode_as_rocketmq_wrote_them():
    """Each inner batch record of the fixture, encoded again from its messages (flag, body,
    properties) and its base, count, UNIQ_KEY and batch properties: its body is 5.3.3's byte for
    byte, and so is its properties string up to the ``__CRC32#`` the broker appends (the layout
    a writer of batch records must write; offsets and timestamps aside)."""
    from rocketstore.queues.batchcq import encode_inner_batch, inner_batch_properties

    checked = 0
    for rec in manifest(NAME)["records"]:
        if not rec.get("inner_messages"):
            continue
        inner = [(one["flag"], body(one), one["properties"]) for one in rec["inner_messages"]]
        assert encode_inner_batch(inner) == body(rec), rec["commitlog_offset"]
        props = rec["properties"]
        own = {k: v for k, v in props.items() if k not in ("UNIQ_KEY", "INNER_NUM", "INNER_BASE", "__CRC32#")}
        encoded = inner_batch_properties(rec["queue_offset"], len(inner), props["UNIQ_KEY"], own)
        written = rec["properties_string"].encode()
        assert written == encoded + b"__CRC32#\x01" + props["__CRC32#"].encode() + b"\x02"
        assert rec["sys_flag"] & 0xC0 == 0xC0 and props["INNER_BASE"] == str(rec["queue_offset"])
        checked += 1
    assert checked == 18
