"""The ``rocketstore`` data source as a Kafka user expects it: options refused by name, offsets
by timestamp with Kafka's precedence, the Kafka-shaped schema both ways (marker ``spark``)."""

import json
import time

import pytest
from conftest import require_spark

require_spark()  # skip this module without pyspark/pyarrow/Java (fail under .ci/run)

from rocketstore.store import MessageStore  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _store(path, per_queue=((5, 3), (2,)), pause_every=0):
    """Topics T0 (queues with 5 and 3 messages) and T1 (2): body b"<topic>-<queue>-<i>", KEYS
    "k<i>" on even i, a property "h" on every message; store times grow when ``pause_every``."""
    with MessageStore(path) as store:
        n = 0
        for t, counts in enumerate(per_queue):
            store.create_topic(f"T{t}", len(counts))
            for q, count in enumerate(counts):
                for i in range(count):
                    store.put(
                        f"T{t}",
                        f"T{t}-{q}-{i}".encode(),
                        keys=f"k{i}" if i % 2 == 0 else None,
                        properties={"h": f"v{i}"},
                        queue_id=q,
                    )
                    n += 1
                    if pause_every and n % pause_every == 0:
                        time.sleep(0.003)
    return str(path)


def _ranges(options):
    from rocketstore.spark import RocketStoreReader

    parts = RocketStoreReader(["topic"], options).partitions()
    return sorted((p.topic, p.queue_id, p.start, p.end) for p in parts)


def _store_times(path):
    with MessageStore(path, read_only=True) as store:
        out = {}
        for (topic, q), (lo, hi) in sorted(store.queues().items()):
            msgs = store.get_message("g", topic, q, lo, hi - lo).messages
            out[(topic, q)] = [m.store_timestamp for m in msgs]
        return out


# ---- 1. options a store has no use for are refused by name ------------------------------------


@pytest.mark.parametrize(
    "name, says",
    [
        ("kafka.bootstrap.servers", "Kafka client setting"),
        ("groupidprefix", "consumer group"),
        ("startingofsets", "not an option of the rocketstore data source"),  # a typo
    ],
)
def test_options_a_store_has_no_use_for_are_refused_by_name(tmp_path, name, says):
    from rocketstore.spark import RocketStoreDataSource

    path = _store(tmp_path / "s")
    for role, call in [
        ("read", lambda s: s.reader(None)),
        ("stream read", lambda s: s.streamReader(None)),
        ("write", lambda s: s.writer(None, False)),
        ("stream write", lambda s: s.streamWriter(None, False)),
    ]:
        source = RocketStoreDataSource({"path": path, name: "x"})
        with pytest.raises(ValueError) as info:
            call(source)
        message = str(info.value)
        assert repr(name) in message and says in message and f"rocketstore {role}:" in message
        assert "subscribe" in message or "topic" in message  # the known options are listed


def test_options_of_another_role_say_which_role_takes_them(tmp_path):
    from rocketstore.spark import RocketStoreDataSource

    path = _store(tmp_path / "s")
    with pytest.raises(ValueError, match="an option for read, not stream read"):
        RocketStoreDataSource({"path": path, "endingoffsets": "latest"}).streamReader(None)
    with pytest.raises(ValueError, match="'subscribe' is an option for read and stream read, not write"):
        RocketStoreDataSource({"path": path, "subscribe": "T0"}).writer(None, False)


def test_spark_refuses_a_kafka_option_with_its_name(spark, tmp_path):
    path = _store(tmp_path / "s")
    df = spark.read.format("rocketstore").option("kafka.bootstrap.servers", "host:9092").load(path)
    with pytest.raises(Exception, match="kafka.bootstrap.servers"):
        df.count()
    # known options pass in any case (Spark lowercases them)
    assert spark.read.format("rocketstore").option("SUBSCRIBE", "T1").load(path).count() == 2


# ---- 2. offsets: -2/-1 in JSON, by timestamp, precedence ---------------------------------------


def test_minus_two_and_minus_one_in_offset_json_mean_earliest_and_latest(tmp_path):
    path = _store(tmp_path / "s")
    starting = json.dumps({"T0": {"0": -1, "1": -2}, "T1": {"0": 1}})
    ending = json.dumps({"T0": {"1": 2}, "T1": {"0": -1}})
    got = _ranges({"path": path, "startingoffsets": starting, "endingoffsets": ending})
    assert got == [("T0", 1, 0, 2), ("T1", 0, 1, 2)]  # T0-0 starts at latest: nothing


@pytest.mark.parametrize("bad", ['{"T0": {"0": -3}}', '{"T0": {"0": "1"}}', '{"T0": [1]}', "soon"])
def test_offset_json_other_than_offsets_minus_one_and_minus_two_is_refused(tmp_path, bad):
    path = _store(tmp_path / "s")
    with pytest.raises(ValueError, match="startingOffsets"):
        _ranges({"path": path, "startingoffsets": bad})


def test_offsets_by_timestamp_per_queue_and_kafkas_precedence(tmp_path):
    path = _store(tmp_path / "s", pause_every=1)
    times = _store_times(path)
    t00, t01, t10 = times[("T0", 0)], times[("T0", 1)], times[("T1", 0)]
    by_ts = json.dumps({"T0": {"0": t00[2], "1": t01[1]}})  # T1 not named: from its earliest
    end_ts = json.dumps({"T0": {"0": t00[4]}})
    options = {"path": path, "startingoffsetsbytimestamp": by_ts, "endingoffsetsbytimestamp": end_ts}
    assert _ranges(options) == [("T0", 0, 2, 4), ("T0", 1, 1, 3), ("T1", 0, 0, 2)]
    # ...ByTimestamp wins over startingOffsets for the queues it names; the others follow it
    assert _ranges({**options, "startingoffsets": "latest"}) == [("T0", 0, 2, 4), ("T0", 1, 1, 3)]
    # startingTimestamp wins over both, for every queue
    assert _ranges({**options, "startingtimestamp": str(t10[1])}) == [("T1", 0, 1, 2)]
    assert _ranges({"path": path, "endingoffsetsbytimestamp": end_ts, "endingtimestamp": str(t10[0])}) == [
        ("T0", 0, 0, 5),
        ("T0", 1, 0, 3),
    ]


def test_starting_offsets_by_timestamp_strategy(tmp_path):
    path = _store(tmp_path / "s", pause_every=1)
    after_all = max(max(v) for v in _store_times(path).values()) + 1000
    late = json.dumps({"T1": {"0": after_all}})
    options = {"path": path, "subscribe": "T1", "startingoffsetsbytimestamp": late}
    assert _ranges(options) == []  # latest (rocketstore's default): nothing to read
    assert _ranges({**options, "startingoffsetsbytimestampstrategy": "latest"}) == []
    strict = {**options, "startingoffsetsbytimestampstrategy": "error"}
    with pytest.raises(ValueError, match="T1-0 on s: no message stored at or after"):
        _ranges(strict)
    with pytest.raises(ValueError, match="T1-0 on s: no message stored"):
        _ranges({"path": path, "subscribe": "T1", "startingtimestamp": str(after_all),
                 "startingoffsetsbytimestampstrategy": "error"})  # fmt: skip
    with pytest.raises(ValueError, match="must be error or latest"):
        _ranges({**options, "startingoffsetsbytimestampstrategy": "earliest"})


def test_stream_initial_offsets_by_timestamp_and_new_queues_start_at_earliest(tmp_path):
    from rocketstore.spark import RocketStoreStreamReader

    path = _store(tmp_path / "s", pause_every=1)
    t00 = _store_times(path)[("T0", 0)]
    reader = RocketStoreStreamReader(
        ["topic"], {"path": path, "startingoffsetsbytimestamp": json.dumps({"T0": {"0": t00[3]}})}
    )
    start = reader.initialOffset()  # queues not named: startingOffsets' default for a stream, latest
    assert start["offsets"] == {"T0": {"0": 3, "1": 3}, "T1": {"0": 2}}
    with MessageStore(path) as store:  # a topic and a queue the running query has not seen
        store.create_topic("T2", 1)
        store.put("T2", b"new-0", queue_id=0)
        store.put("T2", b"new-1", queue_id=0)
        store.put("T0", b"more", queue_id=1)
    end = reader.latestOffset()
    assert end["offsets"] == {"T0": {"0": 5, "1": 4}, "T1": {"0": 2}, "T2": {"0": 2}}
    parts = sorted((p.topic, p.queue_id, p.start, p.end) for p in reader.partitions(start, end))
    assert parts == [("T0", 0, 3, 5), ("T0", 1, 3, 4), ("T2", 0, 0, 2)]


# ---- 3. the Kafka-shaped schema, read and written ----------------------------------------------


def _kafka_rows(path):
    """What a Kafka-shaped read of _store should give, from the store's own get_message."""
    rows = []
    with MessageStore(path, read_only=True) as store:
        for (topic, q), (lo, hi) in sorted(store.queues().items()):
            for m in store.get_message("g", topic, q, lo, hi - lo).messages:
                rows.append(
                    {
                        "key": m.keys.encode() if m.keys is not None else None,
                        "value": bytes(m.body),
                        "topic": m.topic,
                        "partition": m.queue_id,
                        "offset": m.queue_offset,
                        "timestamp": m.store_timestamp,
                        "timestampType": 1,
                        "headers": [(k, v.encode()) for k, v in (m.properties or {}).items()],
                    }
                )
    return rows


def _sorted_kafka(rows):
    for r in rows:
        if "timestamp" in r and not isinstance(r["timestamp"], int):
            r["timestamp"] = int(r["timestamp"].timestamp() * 1000 + 0.5)
        if r.get("headers") is not None:
            r["headers"] = [(h["key"], h["value"]) if isinstance(h, dict) else h for h in r["headers"]]
    return sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"]))


def test_spark_kafka_schema_reads_as_kafkas_source(spark, tmp_path):
    path = _store(tmp_path / "s")
    df = spark.read.format("rocketstore").option("schema", "kafka").load(path)
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    want = _kafka_rows(path)
    got = _sorted_kafka(df.toArrow().to_pylist())
    assert got == [{k: v for k, v in r.items() if k != "headers"} for r in want]
    with_headers = spark.read.format("rocketstore").option("schema", "kafka").option("includeHeaders", "true")
    df = with_headers.load(path)
    assert df.schema.simpleString().endswith("headers:array<struct<key:string,value:binary>>>")
    assert _sorted_kafka(df.toArrow().to_pylist()) == want
    assert any(h[0] == "KEYS" for r in want for h in r["headers"])  # KEYS is a header too
    with pytest.raises(Exception, match="includeHeaders goes with schema=kafka"):
        spark.read.format("rocketstore").option("includeHeaders", "true").load(path).count()


def test_spark_kafka_shaped_rows_write_and_read_back(spark, tmp_path):
    src = _store(tmp_path / "a")
    dst = str(tmp_path / "b")
    with MessageStore(dst) as store:
        store.create_topic("T0", 2)
        store.create_topic("T1", 1)
    read = spark.read.format("rocketstore").option("schema", "kafka").option("includeHeaders", "true")
    (
        read.load(src)
        .select("topic", "partition", "key", "value", "headers")
        .coalesce(1)
        .write.format("rocketstore")
        .mode("append")
        .save(dst)
    )
    strip = ("offset", "timestamp")
    a = [{k: v for k, v in r.items() if k not in strip} for r in _kafka_rows(src)]
    b = [{k: v for k, v in r.items() if k not in strip} for r in _kafka_rows(dst)]
    assert b == a
    # Kafka's minimal sink input: value, with the topic as an option; a string key
    rows = spark.createDataFrame([("k1", "v1"), (None, "v2")], "key STRING, value STRING")
    rows.coalesce(1).write.format("rocketstore").option("topic", "T1").mode("append").save(dst)
    with MessageStore(dst, read_only=True) as store:
        got = store.get_message("g", "T1", 0, 2, 10).messages
    assert [(m.keys, bytes(m.body)) for m in got] == [("k1", b"v1"), (None, b"v2")]


def test_spark_sink_refuses_body_with_value_and_a_key_that_is_not_utf8(spark, tmp_path):
    dst = str(tmp_path / "b")
    with MessageStore(dst) as store:
        store.create_topic("T", 1)
    both = spark.createDataFrame([(b"x", b"y")], "body BINARY, value BINARY")
    with pytest.raises(Exception, match="not both"):
        both.write.format("rocketstore").option("topic", "T").mode("append").save(dst)
    bad = spark.createDataFrame([(b"\xff\xfe", b"y")], "key BINARY, value BINARY")
    with pytest.raises(Exception, match="not UTF-8"):
        bad.write.format("rocketstore").option("topic", "T").mode("append").save(dst)
    with MessageStore(dst, read_only=True) as store:
        assert store.queues().get(("T", 0), (0, 0)) == (0, 0)  # nothing written


def test_stream_a_new_queue_under_a_row_limit_starts_at_its_first_kept_offset(tmp_path):
    pytest.importorskip("pyspark.sql.streaming.datasource", reason="ReadMaxRows: PySpark 4.2+")
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from rocketstore.spark import RocketStoreStreamReader

    path = str(tmp_path / "s")
    with MessageStore(path, commitlog_file_size=16 * 1024) as store:
        store.create_topic("T", 2)
        for i in range(400):
            store.put("T", b"y" * 100, queue_id=i % 2)
        store.flush()
        store.clean(force=True)  # every segment but the last
        lo, hi = store.queues()[("T", 1)]
    assert lo > 10
    reader = RocketStoreStreamReader(["queueOffset"], {"path": path})
    start = {"v": 1, "offsets": {"T": {"0": 200}}}  # a query that has not seen queue 1 yet
    end = reader.latestOffset(start, ReadMaxRows(5))
    assert end["offsets"] == {"T": {"0": 200, "1": lo + 5}}
    parts = reader.partitions(start, end)  # no failOnDataLoss: nothing was lost to the query
    assert [(p.queue_id, p.start, p.end) for p in parts] == [(1, lo, lo + 5)]


def test_stream_min_offsets_per_trigger_waits_for_rows_or_max_trigger_delay(tmp_path):
    pytest.importorskip("pyspark.sql.streaming.datasource", reason="ReadMaxRows: PySpark 4.2+")
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from rocketstore.spark import RocketStoreStreamReader

    path = _store(tmp_path / "s")  # 10 messages
    options = {
        "path": path,
        "startingoffsets": "earliest",
        "minoffsetspertrigger": "4",
        "maxtriggerdelay": "30s",
    }
    reader = RocketStoreStreamReader(["topic"], options)
    now = [1000.0]
    reader.clock = lambda: now[0]
    start = reader.initialOffset()
    first = reader.latestOffset(start, ReadAllAvailable())
    assert first != start  # the first trigger of a run is not held
    with MessageStore(path) as store:
        for _ in range(3):
            store.put("T1", b"x", queue_id=0)
    now[0] += 10
    assert reader.latestOffset(first, ReadAllAvailable()) == first  # 3 < 4 rows: held
    now[0] += 21  # 31 s since the last trigger that ran: it runs with what there is
    second = reader.latestOffset(first, ReadAllAvailable())
    assert second["offsets"]["T1"] == {"0": 5}
    with MessageStore(path) as store:
        for _ in range(4):
            store.put("T1", b"x", queue_id=0)
    now[0] += 1
    assert reader.latestOffset(second, ReadAllAvailable())["offsets"]["T1"] == {"0": 9}  # 4 rows: runs
    reader.prepareForTriggerAvailableNow()  # AvailableNow ignores the minimum
    assert reader.latestOffset(second, ReadAllAvailable())["offsets"]["T1"] == {"0": 9}
    with pytest.raises(ValueError, match="maxTriggerDelay must be a duration"):
        RocketStoreStreamReader(["topic"], {**options, "maxtriggerdelay": "soon"})


# ---- 4. consumer-group progress ----------------------------------------------------------------


def test_stream_commit_records_the_group_offsets_in_the_store(tmp_path):
    from rocketstore.spark import RocketStoreStreamReader

    path = _store(tmp_path / "s")
    plain = RocketStoreStreamReader(["topic"], {"path": path, "startingoffsets": "earliest"})
    plain.commit(plain.latestOffset())
    reader = RocketStoreStreamReader(
        ["topic"], {"path": path, "startingoffsets": "earliest", "groupid": "q1"}
    )
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    reader.commit(end)
    with MessageStore(path, read_only=True) as store:
        got = {(t, q): store.committed_offset("q1", t, q) for t, q in store.queues()}
        assert store.committed_offset("spark", "T0", 0) == -1
    assert got == {("T0", 0): 5, ("T0", 1): 3, ("T1", 0): 2}


def test_spark_stream_with_group_id_commits_its_progress(spark, tmp_path):
    """Spark tells a source a micro-batch is done when it plans the next one, so the group's
    offsets are those of the batch before the last: never ahead of what the sink holds."""
    pytest.importorskip("pyspark.sql.streaming.datasource", reason="ReadMaxRows: PySpark 4.2+")
    path = _store(tmp_path / "s")
    query = (
        spark.readStream.format("rocketstore")
        .option("startingOffsets", "earliest")
        .option("groupId", "pipeline")
        .option("maxOffsetsPerTrigger", "4")
        .load(path)
        .select("topic", "queueOffset")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert spark.read.parquet(str(tmp_path / "out")).count() == 10
    logs = sorted(int(p.name) for p in (tmp_path / "ck" / "offsets").iterdir() if p.name.isdigit())
    assert logs == [0, 1, 2]  # 4 + 4 + 2 rows
    done = json.loads((tmp_path / "ck" / "offsets" / "1").read_text().splitlines()[-1])["offsets"]
    with MessageStore(path, read_only=True) as store:
        got = {(t, q): store.committed_offset("pipeline", t, q) for t, q in store.queues()}
    assert got == {(t, int(q)): v for t, queues in done.items() for q, v in queues.items()}
    assert sum(got.values()) == 8


def test_stream_commit_joins_the_process_writing_the_store(tmp_path):
    import subprocess
    import sys

    from rocketstore.spark import RocketStoreStreamReader

    path = _store(tmp_path / "s")
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER_CHILD, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout.readline().strip() == "open"
        reader = RocketStoreStreamReader(
            ["topic"], {"path": path, "startingoffsets": "earliest", "groupid": "q"}
        )
        reader.commit(reader.latestOffset())
        with MessageStore(path, read_only=True) as store:
            assert store.committed_offset("q", "T0", 0) == 5
        owner.stdin.write("\n")
        owner.stdin.flush()
        assert owner.stdout.read().strip() == "owner sees 5"
    finally:
        owner.stdin.close()
        assert owner.wait(60) == 0
        owner.stdout.close()


OWNER_CHILD = """
import sys
from rocketstore.store import MessageStore
with MessageStore(sys.argv[1]) as s:
    print("open", flush=True)
    sys.stdin.readline()
    print("owner sees", s.committed_offset("q", "T0", 0), flush=True)
"""
