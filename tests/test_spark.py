"""The ``rocketstore`` PySpark data source (marker ``spark``; skipped without pyspark/Java).

One session-scoped local[2] SparkSession (conftest ``spark``) serves every test here."""

import random

import pytest
from conftest import require_spark

require_spark()  # skip this module without pyspark/pyarrow/Java (fail under .ci/run)

from rocketstore.store import MessageStore  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.slow]  # a JVM; CI runs them (.ci/run)

TOPICS = {"TopicA": 2, "TopicB": 3, "TopicC": 1}


def _fill(path, seed, count=120, segment=16 * 1024):
    """A store with several topics and queues over several CommitLog segments."""
    print("seed", seed)
    rng = random.Random(seed)
    with MessageStore(path, commitlog_file_size=segment) as store:
        for topic, queues in TOPICS.items():
            store.create_topic(topic, queues)
        for i in range(count):
            topic = rng.choice(sorted(TOPICS))
            store.put(
                topic,
                rng.randbytes(rng.randrange(0, 300)),
                tags=rng.choice([None, "TagA", "TagB"]),
                keys=rng.choice([None, f"k{i}", f"k{i} order-{i % 7}"]),
                properties=rng.choice([None, {"color": "red"}, {"a": "1", "b": "x=y"}]),
                queue_id=rng.randrange(TOPICS[topic]),
            )
    return str(path)


def _expected(path, broker=None):
    """Every message through the store's own get_message, as the data source's rows."""
    rows = []
    with MessageStore(path, read_only=True) as store:
        for (topic, queue_id), (lo, hi) in sorted(store.queues().items()):
            offset = lo
            while offset < hi:
                result = store.get_message("spark-test", topic, queue_id, offset, 32)
                for m in result.messages:
                    rows.append(
                        {
                            "topic": m.topic,
                            "queueId": m.queue_id,
                            "queueOffset": m.queue_offset,
                            "commitLogOffset": m.commitlog_offset,
                            "brokerName": broker,
                            "body": bytes(m.body),
                            "tags": m.tags,
                            "keys": m.keys,
                            "properties": dict(m.properties or {}),
                            "msgId": m.msg_id,
                            "flag": m.flag,
                            "sysFlag": m.sys_flag,
                            "reconsumeTimes": m.reconsume_times,
                            "bornTimestamp": m.born_timestamp,
                            "storeTimestamp": m.store_timestamp,
                            "bornHost": "%s:%d" % m.born_host,
                            "storeHost": "%s:%d" % m.store_host,
                        }
                    )
                offset = result.next_begin_offset
    return rows


def _collected(df):
    rows = df.toArrow().to_pylist()
    for r in rows:
        if "properties" in r:
            r["properties"] = dict(r["properties"])
        for ts in ("bornTimestamp", "storeTimestamp"):
            if ts in r:
                r[ts] = int(r[ts].timestamp() * 1000 + 0.5)
    return sorted(rows, key=lambda r: (r.get("brokerName") or "", r["topic"], r["queueId"], r["queueOffset"]))


def test_spark_batch_read_equals_get_message(spark, tmp_path):
    path = _fill(tmp_path / "broker-a", seed=6)
    expected = _expected(path, broker="broker-a")
    got = _collected(spark.read.format("rocketstore").load(path))
    assert len(got) == len(expected) == 120
    assert got == expected


def test_spark_read_many_stores_names_each_broker(spark, tmp_path):
    a = _fill(tmp_path / "broker-a", seed=61, count=40)
    b = _fill(tmp_path / "broker-b", seed=62, count=30)
    got = _collected(spark.read.format("rocketstore").load([a, b]))
    expected = sorted(
        _expected(a, "broker-a") + _expected(b, "broker-b"),
        key=lambda r: (r["brokerName"], r["topic"], r["queueId"], r["queueOffset"]),
    )
    assert got == expected


def test_spark_read_subset_schema_is_the_projection(spark, tmp_path):
    path = _fill(tmp_path / "s", seed=63, count=50)
    df = (
        spark.read.format("rocketstore")
        .schema("queueOffset BIGINT, topic STRING, queueId INT")
        .option("subscribe", "TopicB")
        .load(path)
    )
    assert df.columns == ["queueOffset", "topic", "queueId"]
    want = sorted(
        (r["topic"], r["queueId"], r["queueOffset"]) for r in _expected(path) if r["topic"] == "TopicB"
    )
    assert sorted((r.topic, r.queueId, r.queueOffset) for r in df.collect()) == want
    no_body = spark.read.format("rocketstore").option("includeBody", "false").load(path)
    assert "body" not in no_body.columns and no_body.count() == 50


def test_spark_read_offsets_and_partition_split(spark, tmp_path):
    path = _fill(tmp_path / "s", seed=64, count=90)
    with MessageStore(path, read_only=True) as store:
        hi = store.max_queue_offset("TopicA", 0)
        size_a1 = store.max_queue_offset("TopicA", 1)
    df = (
        spark.read.format("rocketstore")
        .option("assign", '{"TopicA": [0, 1]}')
        .option("startingOffsets", '{"TopicA": {"0": 2, "1": -2}}')
        .option("endingOffsets", '{"TopicA": {"0": -1, "1": 3}}')
        .option("maxRecordsPerPartition", "4")
        .load(path)
    )
    got = sorted((r.queueId, r.queueOffset) for r in df.select("queueId", "queueOffset").collect())
    assert got == [(0, q) for q in range(2, hi)] + [(1, q) for q in range(min(3, size_a1))]
    expected_parts = -(-(hi - 2) // 4) + -(-min(3, size_a1) // 4)
    assert df.rdd.getNumPartitions() == expected_parts


def test_spark_read_refuses_offsets_lost_to_retention(spark, tmp_path):
    path = str(tmp_path / "s")
    with MessageStore(path, commitlog_file_size=16 * 1024) as store:
        store.create_topic("T", 1)
        for _ in range(400):
            store.put("T", b"y" * 100, queue_id=0)
        store.flush()
        store.clean(force=True)  # every segment but the last
        assert store.queues()[("T", 0)][0] > 1
    df = spark.read.format("rocketstore").option("startingOffsets", '{"T": {"0": 1}}').load(path)
    with pytest.raises(Exception, match="failOnDataLoss"):
        df.collect()
    # a negative offset other than -2 (earliest) and -1 (latest) is no offset at all
    df = spark.read.format("rocketstore").option("startingOffsets", '{"T": {"0": -5}}').load(path)
    with pytest.raises(Exception, match="at least -2"):
        df.collect()


def test_spark_sink_round_trips_a_dataframe(spark, tmp_path):
    source = _fill(tmp_path / "src", seed=66, count=80)
    target = str(tmp_path / "dst")
    df = spark.read.format("rocketstore").load(source)
    df.select("topic", "queueId", "body", "tags", "keys", "properties").repartition(2).write.format(
        "rocketstore"
    ).mode("append").save(target)
    cols = ["topic", "queueId", "body", "tags", "keys"]
    before = sorted(tuple(r[c] for c in cols) for r in _expected(source))
    after_rows = _collected(spark.read.format("rocketstore").load(target))
    assert sorted(tuple(r[c] for c in cols) for r in after_rows) == before
    # user properties survive; UNIQ_KEY is the new store's own
    strip = lambda p: {k: v for k, v in p.items() if k != "UNIQ_KEY"}  # noqa: E731
    assert sorted(sorted(strip(r["properties"]).items()) for r in after_rows) == sorted(
        sorted(strip(r["properties"]).items()) for r in _expected(source)
    )
    assert not list((tmp_path / "dst" / ".spark-staging").glob("*"))


# Each filter a query on the data source may carry, with the rows it keeps (from _expected).
_LEAK_FILTERS = {
    "topic": ("topic = 'TopicB'", lambda r, rows: r["topic"] == "TopicB"),
    "queueId": ("queueId = 1", lambda r, rows: r["queueId"] == 1),
    "queueOffset": ("queueOffset < 3", lambda r, rows: r["queueOffset"] < 3),
    "storeTimestamp": (
        "storeTimestamp < timestamp_millis(1)",
        lambda r, rows: False,
    ),
    "keys": ("keys = 'k7'", lambda r, rows: r["keys"] == "k7"),
    "msgId": (None, None),  # the msgId of a row, filled in below
}


@pytest.mark.parametrize("column", sorted(_LEAK_FILTERS))
def test_spark_a_filter_does_not_stay_on_the_dataframe(spark, tmp_path, column):
    """Every query on one DataFrame sees exactly its own filters: a filtered count, then an
    unfiltered count, a limit and a write through the same DataFrame. Spark 4.1-4.3 keep the read
    plan a pushdown made on the source the DataFrame shares, so the source must not push; the
    session's pushdown switch is on here, as a user may set it."""
    path = _fill(tmp_path / "s", seed=81, count=60)
    rows = _expected(path)
    where, keep = _LEAK_FILTERS[column]
    if column == "msgId":
        where, keep = f"msgId = '{rows[9]['msgId']}'", lambda r, rows: r["msgId"] == rows[9]["msgId"]
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    df = spark.read.format("rocketstore").load(path)
    assert df.where(where).count() == sum(1 for r in rows if keep(r, rows))
    assert df.count() == len(rows)
    assert df.limit(25).count() == 25
    target = str(tmp_path / "copy")
    df.limit(25).select("topic", "body").write.format("rocketstore").mode("append").save(target)
    with MessageStore(target, read_only=True) as copy:
        assert sum(hi - lo for lo, hi in copy.queues().values()) == 25
    assert _collected(df) == _collected(spark.read.format("rocketstore").load(path))


def test_spark_refuses_the_push_filters_option(spark, tmp_path):
    path = _fill(tmp_path / "s", seed=82, count=5)
    df = spark.read.format("rocketstore").option("pushFilters", "true").load(path)
    with pytest.raises(Exception, match="does not push filters"):
        df.count()
    assert spark.read.format("rocketstore").option("pushFilters", "false").load(path).count() == 5


def test_spark_sink_needs_append_mode(spark, tmp_path):
    df = spark.createDataFrame([("T", b"x")], "topic STRING, body BINARY")
    with pytest.raises(Exception, match="append"):
        df.write.format("rocketstore").mode("overwrite").save(str(tmp_path / "o"))


APPEND_CHILD = """
import sys
from rocketstore.store import MessageStore
with MessageStore(sys.argv[1]) as s:
    for i in range(int(sys.argv[2])):
        s.put("TopicA", b"late-%d" % i, queue_id=i % 2)
"""


def test_spark_stream_resumes_from_checkpoint_without_loss_or_duplicates(spark, tmp_path):
    import subprocess
    import sys

    path = _fill(tmp_path / "s", seed=67, count=60)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "ck")

    def run_once():
        query = (
            spark.readStream.format("rocketstore")
            .option("subscribe", "TopicA")
            .option("startingOffsets", "earliest")
            .load(path)
            .select("topic", "queueId", "queueOffset", "body")
            .writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120)

    run_once()
    first = spark.read.parquet(out).count()
    subprocess.run([sys.executable, "-c", APPEND_CHILD, path, "25"], check=True)  # another process appends
    run_once()
    got = sorted((r.queueId, r.queueOffset, bytes(r.body)) for r in spark.read.parquet(out).collect())
    want = sorted(
        (r["queueId"], r["queueOffset"], r["body"]) for r in _expected(path) if r["topic"] == "TopicA"
    )
    assert first == len(want) - 25
    assert got == want
    offsets = sorted(
        (p for p in (tmp_path / "ck" / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name)
    )
    assert '"v": 1' in offsets[-1].read_text()


def test_spark_stream_sink_skips_a_replayed_batch(spark, tmp_path):
    from rocketstore.spark import read_sink_commits

    source = _fill(tmp_path / "src", seed=68, count=50)
    target, checkpoint = str(tmp_path / "dst"), str(tmp_path / "ck")

    def run_once():
        query = (
            spark.readStream.format("rocketstore")
            .option("startingOffsets", "earliest")
            .load(source)
            .select("topic", "queueId", "body")
            .writeStream.format("rocketstore")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start(target)
        )
        assert query.awaitTermination(120)

    def target_rows():
        return sorted((r["topic"], r["queueId"], r["body"]) for r in _expected(target))

    run_once()
    want = sorted((r["topic"], r["queueId"], r["body"]) for r in _expected(source))
    assert target_rows() == want
    commits = read_sink_commits(target)
    assert list(commits.values()) == [0]
    # Spark replays a micro-batch whose commit it did not log: drop the log entry of batch 0
    commit_log = tmp_path / "ck" / "commits" / "0"
    commit_log.unlink()
    (commit_log.parent / ".0.crc").unlink(missing_ok=True)  # Hadoop's checksum beside it
    run_once()
    assert commit_log.exists()  # batch 0 ran again ...
    assert target_rows() == want  # ... and wrote nothing twice
    assert read_sink_commits(target) == commits
    assert not list((tmp_path / "dst" / ".spark-staging").glob("*/*"))


def test_stream_sink_commit_drops_batch_ids_at_or_below_the_last(tmp_path):
    import pyarrow as pa

    from rocketstore.spark import RocketStoreStreamWriter, _stage, read_sink_commits

    target = str(tmp_path / "dst")
    writer = RocketStoreStreamWriter({"path": target, "sinkid": "q1"}, ["topic", "body"])

    def batch(tag):
        data = pa.record_batch({"topic": ["T", "T"], "body": [tag + b"1", tag + b"2"]})
        return [_stage(writer.staging, iter([data]))]

    writer.commit(batch(b"a"), 0)
    writer.commit(batch(b"a"), 0)  # replay
    writer.commit(batch(b"b"), 1)
    writer.commit(batch(b"a"), 0)  # an older one
    assert sorted(r["body"] for r in _expected(target)) == [b"a1", b"a2", b"b1", b"b2"]
    assert read_sink_commits(target) == {"q1": 1}


GROW_AND_CLEAN_CHILD = """
import sys
from rocketstore.store import MessageStore
with MessageStore(sys.argv[1], commitlog_file_size=16 * 1024) as s:
    for i in range(int(sys.argv[2])):
        s.put("T", b"y" * 100, queue_id=i % 2)
    s.flush()
    s.clean(force=True)          # every segment but the last: the query's next offsets are gone
"""


def _stream_to_parquet(spark, path, out, checkpoint, **options):
    reader = spark.readStream.format("rocketstore").option("startingOffsets", "earliest")
    for name, value in options.items():
        reader = reader.option(name, value)
    return (
        reader.load(path)
        .select("queueId", "queueOffset")
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


@pytest.mark.parametrize("fail_on_loss", [True, False])
def test_spark_stream_fail_on_data_loss_after_retention(spark, tmp_path, fail_on_loss):
    import subprocess
    import sys

    path = str(tmp_path / "s")
    with MessageStore(path, commitlog_file_size=16 * 1024) as store:
        store.create_topic("T", 2)
        for i in range(20):
            store.put("T", b"x" * 100, queue_id=i % 2)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "ck")
    option = {"failOnDataLoss": str(fail_on_loss).lower()}
    assert _stream_to_parquet(spark, path, out, checkpoint, **option).awaitTermination(120)
    subprocess.run([sys.executable, "-c", GROW_AND_CLEAN_CHILD, path, "400"], check=True)
    with MessageStore(path, read_only=True) as store:
        kept = store.queues()
    assert all(lo > 10 for lo, _hi in kept.values())  # offsets 10.. of both queues were deleted
    query = _stream_to_parquet(spark, path, out, checkpoint, **option)
    if fail_on_loss:
        with pytest.raises(Exception, match="failOnDataLoss"):
            query.awaitTermination(120)
        return
    assert query.awaitTermination(120)
    got = sorted((r.queueId, r.queueOffset) for r in spark.read.parquet(out).collect())
    want = [(q, o) for q in (0, 1) for o in range(10)]
    want += [(q, o) for (_t, q), (lo, hi) in sorted(kept.items()) for o in range(lo, hi)]
    assert got == sorted(want)  # skipped ahead to what retention kept


def test_stream_max_offsets_per_trigger_splits_by_lag(tmp_path):
    pytest.importorskip("pyspark.sql.streaming.datasource", reason="ReadMaxRows: PySpark 4.2+")
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from rocketstore.spark import RocketStoreStreamReader

    path = str(tmp_path / "s")
    with MessageStore(path) as store:
        store.create_topic("T", 3)
        for queue_id, count in enumerate([60, 30, 10]):
            for _ in range(count):
                store.put("T", b"x", queue_id=queue_id)
    reader = RocketStoreStreamReader(
        ["queueOffset"], {"path": path, "startingoffsets": "earliest", "maxoffsetspertrigger": "20"}
    )
    assert reader.getDefaultReadLimit() == ReadMaxRows(20)
    start = reader.initialOffset()
    assert start["offsets"] == {"T": {"0": 0, "1": 0, "2": 0}}
    end = reader.latestOffset(start, ReadMaxRows(20))
    assert end["offsets"] == {"T": {"0": 12, "1": 6, "2": 2}}  # 20 rows in the lags' 6:3:1
    total, batches = 0, 0
    while True:
        nxt = reader.latestOffset(start, ReadMaxRows(20))
        rows = sum(nxt["offsets"]["T"].values()) - sum(start["offsets"]["T"].values())
        if rows == 0:
            break
        assert rows <= 20
        total, batches, start = total + rows, batches + 1, nxt
    assert (total, batches) == (100, 5)
    assert start["offsets"] == {"T": {"0": 60, "1": 30, "2": 10}}
    assert reader.latestOffset(start, None) == start  # no limit: everything there is


def test_spark_stream_max_offsets_per_trigger_bounds_each_batch(spark, tmp_path):
    pytest.importorskip("pyspark.sql.streaming.datasource", reason="ReadMaxRows: PySpark 4.2+")
    import json

    path = _fill(tmp_path / "s", seed=69, count=90)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "ck")
    assert _stream_to_parquet(spark, path, out, checkpoint, maxOffsetsPerTrigger="25").awaitTermination(120)
    assert spark.read.parquet(out).count() == 90
    logs = [p for p in (tmp_path / "ck" / "offsets").iterdir() if p.name.isdigit()]
    ends = [json.loads(p.read_text().splitlines()[-1]) for p in sorted(logs, key=lambda p: int(p.name))]
    sizes = [sum(v for q in e["offsets"].values() for v in q.values()) for e in ends]
    sizes = [b - a for a, b in zip([0] + sizes, sizes)]
    assert sum(sizes) == 90 and max(sizes) <= 25 and len(sizes) >= 4


def test_spark_sink_fast_path_keeps_each_queues_order(spark, tmp_path):
    rows = [("T%d" % (i % 2), i % 3, b"m%05d" % i) for i in range(3000)]
    df = spark.createDataFrame(rows, "topic STRING, queueId INT, body BINARY").coalesce(1)
    target = str(tmp_path / "dst")
    with MessageStore(target) as store:
        store.create_topic("T0", 3)
        store.create_topic("T1", 3)
    df.write.format("rocketstore").mode("append").save(target)
    got = [(r["topic"], r["queueId"], r["queueOffset"], r["body"]) for r in _expected(target)]
    for topic in ("T0", "T1"):
        for q in range(3):
            bodies = [b for t, qq, _o, b in sorted(got) if (t, qq) == (topic, q)]
            assert bodies == [b for t, qq, b in rows if (t, qq) == (topic, q)]
    # no queueId: runs of rows spread round-robin over the topic's queues
    many = spark.createDataFrame([(b"x%06d" % i,) for i in range(10000)], "body BINARY").coalesce(1)
    many.write.format("rocketstore").option("topic", "T0").mode("append").save(target)
    with MessageStore(target, read_only=True) as store:
        sizes = [hi - lo for (t, _q), (lo, hi) in store.queues().items() if t == "T0"]
    assert sum(sizes) == 1500 + 10000 and min(sizes) > 1000


def test_record_batch_properties_follow_decode_properties():
    """tags, keys and the properties map come from one compiled pass over the properties bytes
    (duplicates: the map keeps each, tags/keys the last, as decode_properties does)."""
    from rocketstore.format import _codec_py
    from rocketstore.spark import _record_batch

    raw = [
        b"TAGS\x01a\x02KEYS\x01k1 k2\x02TAGS\x01b\x01c\x02bad\x02\x01v\x02n\x01",
        b"",
        b"KEYS\x01only",
        b"x\x01\xc3\xa9\x02TAGS\x01\x02",
    ]
    buf = bytes(7) + b"".join(
        _codec_py.encode_record(topic="T", body=b"b%d" % i, properties=p) for i, p in enumerate(raw)
    )
    rows, _stop, _reason = _codec_py.decode_batch(buf, 7)
    batch = _record_batch(rows, memoryview(buf), ["tags", "keys", "properties"], "T", "broker")
    got = batch.to_pylist()
    assert [r["tags"] for r in got] == ["b\x01c", None, None, None]
    assert [r["keys"] for r in got] == ["k1 k2", None, "only", None]
    assert [r["properties"] for r in got] == [
        [("TAGS", "a"), ("KEYS", "k1 k2"), ("TAGS", "b\x01c")],
        [],
        [("KEYS", "only")],
        [("x", "é")],
    ]
    assert [dict(r["properties"]) for r in got] == [_codec_py.decode_properties(p) for p in raw]


def test_record_batch_every_column_follows_decode_record():
    """Each column of a batch (msgId digits, host strings of mixed and repeated hosts, the
    properties) equals the MessageExt decode_record gives for the same bytes."""
    from rocketstore.format import _codec_py
    from rocketstore.spark import _record_batch
    from rocketstore.spark._options import _COLUMN_NAMES

    hosts = [("10.0.0.1", 9876), ("192.168.255.3", 10911), ("10.0.0.1", 9876), ("127.0.0.1", 1)]
    stores = [("10.0.0.9", 10911), ("10.0.0.9", 10911), ("10.0.0.9", 10911), ("10.0.0.9", 10911)]
    props = [b"TAGS\x01t\x02KEYS\x01k\x02", b"", b"a\x01b\x02a\x01c\x02", b"UNIQ_KEY\x01u\x02TAGS\x01z\x02"]
    buf, starts = bytearray(b"\0" * 5), []
    for i in range(4):
        starts.append(len(buf))
        buf += _codec_py.encode_record(
            topic="T",
            body=bytes([i]) * (i * 7),
            properties=props[i],
            queue_id=i,
            queue_offset=1000 + i,
            physical_offset=0xABCDEF0123 + 977 * i,
            flag=i,
            born_timestamp=1700000000000 + i,
            store_timestamp=1700000000500 + i,
            born_host=hosts[i],
            store_host=stores[i] if i != 3 else ("172.16.0.254", 65535),
            reconsume_times=i,
        )
    rows, _stop, _reason = _codec_py.decode_batch(bytes(buf), 5)
    got = _record_batch(rows, memoryview(bytes(buf)), list(_COLUMN_NAMES), "T", "broker").to_pylist()
    for at, row in zip(starts, got):
        m = _codec_py.decode_record(bytes(buf), at)
        assert row["msgId"] == m.msg_id
        assert row["bornHost"] == "%s:%d" % m.born_host and row["storeHost"] == "%s:%d" % m.store_host
        assert (row["tags"], row["keys"], dict(row["properties"])) == (
            m.tags,
            m.keys,
            dict(m.properties or {}),
        )
        assert (row["queueId"], row["queueOffset"], row["commitLogOffset"], row["flag"]) == (
            m.queue_id,
            m.queue_offset,
            m.commitlog_offset,
            m.flag,
        )
        assert (row["body"], row["reconsumeTimes"], row["sysFlag"]) == (
            bytes(m.body),
            m.reconsume_times,
            m.sys_flag,
        )


# ---- filter pushdown (4.1+), timestamps, CommitLog scans, staging cleanup -----------------------


def _fill_over_time(path, seed, count=120):
    """As _fill, with a pause every 10 puts: store times repeat and grow."""
    import time

    print("seed", seed)
    rng = random.Random(seed)
    with MessageStore(path, commitlog_file_size=16 * 1024) as store:
        for topic, queues in TOPICS.items():
            store.create_topic(topic, queues)
        for i in range(count):
            topic = rng.choice(sorted(TOPICS))
            store.put(
                topic,
                rng.randbytes(rng.randrange(0, 300)),
                keys=rng.choice([None, f"k{i}", f"k{i} order-{i % 7}"]),
                queue_id=rng.randrange(TOPICS[topic]),
            )
            if i % 10 == 9:
                time.sleep(0.003)
    return str(path)


def test_spark_starting_and_ending_timestamps_pick_offsets_by_store_time(spark, tmp_path):
    path = _fill_over_time(tmp_path / "s", seed=74)
    rows = _expected(path, broker="s")
    stamps = sorted(r["storeTimestamp"] for r in rows)
    lo, hi = stamps[30], stamps[100]
    df = (
        spark.read.format("rocketstore")
        .option("startingTimestamp", str(lo))
        .option("endingTimestamp", str(hi))
        .load(path)
    )
    want = [r for r in rows if lo <= r["storeTimestamp"] < hi]
    assert _collected(df) == want and want
    # the timestamp wins over startingOffsets given with it
    both = (
        spark.read.format("rocketstore")
        .option("startingOffsets", "latest")
        .option("startingTimestamp", str(lo))
        .load(path)
    )
    assert _collected(both) == [r for r in rows if r["storeTimestamp"] >= lo]


def test_stream_starting_timestamp_sets_the_initial_offsets(tmp_path):
    from rocketstore.spark import RocketStoreStreamReader

    path = _fill_over_time(tmp_path / "s", seed=75, count=60)
    rows = _expected(path)
    ts = sorted(r["storeTimestamp"] for r in rows)[25]
    reader = RocketStoreStreamReader(["topic"], {"path": path, "startingtimestamp": str(ts)})
    want = {}
    for r in rows:
        queue = want.setdefault(r["topic"], {}).setdefault(str(r["queueId"]), None)
        if queue is None and r["storeTimestamp"] >= ts:
            want[r["topic"]][str(r["queueId"])] = r["queueOffset"]
    with MessageStore(path, read_only=True) as store:
        for topic, queues in want.items():
            for q, offset in queues.items():
                if offset is None:
                    queues[q] = store.max_queue_offset(topic, int(q))
    assert reader.initialOffset() == {"v": 1, "offsets": want}


def test_spark_commitlog_scan_gives_the_queue_scans_rows(spark, tmp_path):
    path = _fill(tmp_path / "s", seed=76, count=200)
    with MessageStore(path, read_only=True) as store:
        segments = -(-store.max_offset // (16 * 1024))

    def load(**options):
        reader = spark.read.format("rocketstore")
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load(path)

    everything = _collected(load(scan="queue"))
    assert everything == _expected(path, broker="s")
    scanned = load(scan="commitlog")
    assert _collected(scanned) == everything
    assert scanned.rdd.getNumPartitions() == segments > 1
    auto = load()  # all topics from earliest, but 4 segments would be 6 queues' parallelism
    assert segments < 6 and auto.rdd.getNumPartitions() == 6 and _collected(auto) == everything
    big = _fill(tmp_path / "big", seed=76, count=600)
    with MessageStore(big, read_only=True) as store:
        big_segments = -(-store.max_offset // (16 * 1024))
    auto_big = spark.read.format("rocketstore").load(big)  # as many segments as queues, or more
    assert big_segments >= 6 and auto_big.rdd.getNumPartitions() == big_segments
    assert _collected(auto_big) == _expected(big, broker="big")
    offsets = dict(
        subscribe="TopicA,TopicC",
        startingOffsets='{"TopicA": {"0": 3}}',
        endingOffsets='{"TopicC": {"0": 9}}',
    )
    assert _collected(load(scan="commitlog", **offsets)) == _collected(load(scan="queue", **offsets))
    assert load(**offsets).rdd.getNumPartitions() == 3  # auto: a part of the store, by queue
    narrow = load(scan="commitlog", subscribe="TopicB", startingOffsets="latest")
    assert narrow.count() == 0


def test_spark_sink_removes_staging_left_by_a_crashed_job(spark, tmp_path):
    import os
    import time

    target = tmp_path / "dst"
    staging = target / ".spark-staging"
    crashed, running = staging / ("a" * 32), staging / ("b" * 32)
    for d in (crashed, running):
        d.mkdir(parents=True)
        (d / "part-00000-x.arrow").write_bytes(b"staged")
    old = time.time() - 3 * 3600
    for p in (crashed / "part-00000-x.arrow", crashed):
        os.utime(p, (old, old))
    (staging / "not-a-job").mkdir()
    os.utime(staging / "not-a-job", (old, old))
    df = spark.createDataFrame([("T", b"x"), ("T", b"y")], "topic STRING, body BINARY")
    df.write.format("rocketstore").option("stagingRetentionMinutes", "60").mode("append").save(str(target))
    assert sorted(p.name for p in staging.iterdir()) == ["b" * 32, "not-a-job"]
    assert sorted(r["body"] for r in _expected(str(target))) == [b"x", b"y"]


@pytest.mark.parametrize("crash", ["after_append", "between_parts"])
def test_stream_sink_replay_after_a_crash_mid_commit_stores_the_batch_once(tmp_path, monkeypatch, crash):
    import pyarrow as pa

    from rocketstore.spark import _writer as rs  # the module whose functions the test replaces

    target = str(tmp_path / "dst")

    def staged(writer):
        parts = []
        for i, tag in enumerate((b"p", b"q")):
            data = pa.record_batch({"topic": ["T"] * 3, "body": [tag + b"%d" % j for j in range(3)]})
            part = rs._stage(writer.staging, iter([data]))
            part.partition_id = i
            parts.append(part)
        return parts

    writer = rs.RocketStoreStreamWriter({"path": target, "sinkid": "q1"}, ["topic", "body"])
    writer.commit(staged(writer), 0)
    real_append, real_record = rs._append_part, rs._write_sink_commits
    calls = []

    def append_then_die(store, path, topic, skip=0):
        if calls:
            raise SystemExit("crash between the parts")
        calls.append(path)
        return real_append(store, path, topic, skip)

    def record_then_die(root, commits, pending=None):
        if not pending:  # the record that the batch is done
            raise SystemExit("crash after the append")
        real_record(root, commits, pending)

    monkeypatch.setattr(
        rs,
        "_append_part" if crash == "between_parts" else "_write_sink_commits",
        append_then_die if crash == "between_parts" else record_then_die,
    )
    with pytest.raises(SystemExit):
        writer.commit(staged(writer), 1)
    monkeypatch.setattr(rs, "_append_part", real_append)
    monkeypatch.setattr(rs, "_write_sink_commits", real_record)
    landed = len(_expected(target))
    assert landed == (9 if crash == "between_parts" else 12)
    replay = rs.RocketStoreStreamWriter({"path": target, "sinkid": "q1"}, ["topic", "body"])
    replay.commit(staged(replay), 1)  # Spark replays batch 1
    bodies = sorted(r["body"] for r in _expected(target))
    assert bodies == sorted([b"p0", b"p1", b"p2", b"q0", b"q1", b"q2"] * 2)
    assert rs.read_sink_commits(target) == {"q1": 1}
    assert "pending" not in (tmp_path / "dst" / "config" / "sparkSinkCommits.json").read_text()
