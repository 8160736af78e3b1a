"""Spark read/write throughput of the rocketstore data source.

    . .venv-spark/bin/activate && python bench/spark.py --messages 1000000 --body 64

Prints rows/s for: a full-store read into Spark's ``noop`` sink (by queue and by CommitLog
segment); the same rows read by Spark from Parquet; the same store through a tuple-yielding
Python data source (the slow baseline the Arrow path is meant to beat); a Python data source
that only re-yields prebuilt Arrow batches of the same shape (the floor of PySpark's Python data
source path on this machine: no store read can beat it), for 5 columns and for all 17; and the
sink (DataFrame -> new store) beside what it is made of and its ceiling: the same (topic, body)
rows read into ``noop`` (the sink's input) and written as Parquet. ``--properties`` gives every
stored message TAGS, KEYS and one more property (the properties map and tags/keys columns then
have work to do; without it the bench's messages carry none). Each timing is the best of
``--repeat`` runs after one warm-up query; the machine's load is printed alongside, and the first
line names the build measured: the installed rocketstore's (``src/`` is never put on ``sys.path``),
compiled or pure Python, with its CRC-32 path.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

import buildinfo
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader

buildinfo.require("bench/spark.py")

from rocketstore.spark import QueueRange, RocketStoreReader, register  # noqa: E402
from rocketstore.store import MessageStore  # noqa: E402


class TupleSource(DataSource):
    """The same partitions and columns as rocketstore's, but rows as Python tuples."""

    @classmethod
    def name(cls):
        return "rocketstore_tuples"

    def schema(self):
        return "topic STRING, queueId INT, queueOffset BIGINT, storeTimestamp BIGINT, body BINARY"

    def reader(self, schema):
        return TupleReader(dict(self.options))


class TupleReader(DataSourceReader):
    def __init__(self, options):
        self.options = options

    def partitions(self):
        return RocketStoreReader(["topic"], {**self.options, "scan": "queue"}).partitions()

    def read(self, p: QueueRange):
        with MessageStore(p.root, read_only=True) as store:
            q = p.start
            while q < p.end:
                result = store.get_message("bench", p.topic, p.queue_id, q, 1024)
                for m in result.messages:
                    yield (m.topic, m.queue_id, m.queue_offset, m.store_timestamp, bytes(m.body))
                q = result.next_begin_offset


class FloorSource(DataSource):
    """The cost of the Python data source path itself: the same columns (option ``columns``:
    ``5`` or ``all``), the same partition count and batch size, from one Arrow batch of the
    store's own rows built once per task and re-yielded, so no store is read per batch. No
    Python source can be faster than this on the machine it runs on."""

    @classmethod
    def name(cls):
        return "rocketstore_floor"

    def schema(self):
        if self.options.get("columns") == "all":
            from rocketstore.spark._options import SCHEMA_DDL

            return SCHEMA_DDL
        return FIVE_COLUMNS

    def reader(self, schema):
        return FloorReader(dict(self.options), [f.name for f in schema.fields])


class FloorReader(DataSourceReader):
    def __init__(self, options, columns):
        self.options = options
        self.columns = columns

    def partitions(self):
        return RocketStoreReader(["topic"], {**self.options, "scan": "queue"}).partitions()

    def read(self, p: QueueRange):
        from rocketstore.spark import read_queue_range

        rows = 32768
        first = QueueRange(p.root, p.broker, p.topic, p.queue_id, p.start, min(p.end, p.start + rows))
        batch = next(read_queue_range(first, self.columns, rows))
        for start in range(p.start, p.end, rows):
            yield batch.slice(0, min(batch.num_rows, p.end - start))


FIVE_COLUMNS = "topic STRING, queueId INT, queueOffset BIGINT, storeTimestamp TIMESTAMP, body BINARY"


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times), times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--body", type=int, default=64)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--sink-only", action="store_true", help="time only the sink")
    ap.add_argument("--properties", action="store_true", help="give each message TAGS, KEYS and a property")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    work = tempfile.mkdtemp(dir=args.dir, prefix="spark-bench-")
    try:
        store_path = os.path.join(work, "store")
        with MessageStore(store_path) as store:
            store.create_topic("Bench", args.queues)
            body = b"b" * args.body
            per = args.messages // args.queues
            props = {"KEYS": "order-12345", "region": "eu-west-1"} if args.properties else None
            for q in range(args.queues):
                for i in range(0, per, 4096):
                    store.put_batch(
                        "Bench",
                        [body] * min(4096, per - i),
                        queue_id=q,
                        tags="TagA" if args.properties else None,
                        properties=props,
                    )
        n = per * args.queues
        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.memory", "1g")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        spark.dataSource.register(TupleSource)
        spark.dataSource.register(FloorSource)
        cols = FIVE_COLUMNS
        arrow_df = spark.read.format("rocketstore").schema(cols).load(store_path)
        by_segment_df = (
            spark.read.format("rocketstore")
            .schema(cols)
            .option("scan", "commitlog")
            .option("minPartitions", "1")
            .load(store_path)
        )
        full_df = spark.read.format("rocketstore").load(store_path)
        parquet, parquet_full = os.path.join(work, "parquet"), os.path.join(work, "parquet-full")
        arrow_df.write.parquet(parquet)
        full_df.write.parquet(parquet_full)
        parquet_df = spark.read.parquet(parquet)
        parquet_full_df = spark.read.parquet(parquet_full)
        tuple_df = spark.read.format("rocketstore_tuples").load(store_path)
        floor_df = spark.read.format("rocketstore_floor").load(store_path)
        floor_full_df = spark.read.format("rocketstore_floor").option("columns", "all").load(store_path)
        print(buildinfo.header())
        print(
            f"messages={n} body={args.body}B queues={args.queues} properties={args.properties} "
            f"load={os.getloadavg()[0]:.2f} "
            f"partitions: queue scan {arrow_df.rdd.getNumPartitions()}, "
            f"commitlog scan {by_segment_df.rdd.getNumPartitions()}"
        )
        results = {}
        reads = (
            ("rocketstore arrow (5 cols)", arrow_df),
            ("rocketstore arrow, scan=commitlog (5 cols)", by_segment_df),
            ("rocketstore arrow (all 17 cols)", full_df),
            ("parquet (5 cols)", parquet_df),
            ("parquet (all 17 cols)", parquet_full_df),
            ("tuple source (5 cols)", tuple_df),
            ("no-op Arrow Python source (5 cols)", floor_df),
            ("no-op Arrow Python source (all 17 cols)", floor_full_df),
            ("sink's input: (topic, body) read", arrow_df.select("topic", "body")),
        )
        for name, df in () if args.sink_only else reads:
            df.write.format("noop").mode("overwrite").save()  # warm-up
            t, times = best(lambda df=df: df.write.format("noop").mode("overwrite").save(), args.repeat)
            results[name] = n / t
            print(f"{name:44s} best {t:6.2f} s  {n / t:12,.0f} rows/s  runs {[round(x, 2) for x in times]}")
        if results:
            r = results
            a, p, u = r["rocketstore arrow (5 cols)"], r["parquet (5 cols)"], r["tuple source (5 cols)"]
            f, full = r["no-op Arrow Python source (5 cols)"], r["rocketstore arrow (all 17 cols)"]
            print(
                f"arrow/parquet = {a / p:.2f}x   arrow/tuples = {a / u:.2f}x   "
                f"arrow/no-op Python source = {a / f:.2f}x   no-op Python source/parquet = {f / p:.2f}x"
            )
            print(
                f"all 17 cols: /5 cols = {full / a:.2f}x   "
                f"/no-op Python source (17) = {full / r['no-op Arrow Python source (all 17 cols)']:.2f}x   "
                f"/parquet (17) = {full / r['parquet (all 17 cols)']:.2f}x   "
                f"no-op source (17)/no-op source (5) = {r['no-op Arrow Python source (all 17 cols)'] / f:.2f}x"
            )
        else:
            arrow_df.select("topic", "body").write.format("rocketstore").mode("append").save(
                os.path.join(work, "sink-warmup")
            )
        pq_times = []
        for i in range(args.repeat):
            target = os.path.join(work, f"sink-parquet-{i}")
            t = time.perf_counter()
            arrow_df.select("topic", "body").write.parquet(target)
            pq_times.append(time.perf_counter() - t)
        print(
            f"{'parquet write (topic, body)':44s} best {min(pq_times):6.2f} s  {n / min(pq_times):12,.0f} rows/s"
            f"  runs {[round(x, 2) for x in pq_times]}"
        )
        sink_times = []
        for i in range(args.repeat):
            target = os.path.join(work, f"sink-{i}")
            t = time.perf_counter()
            arrow_df.select("topic", "body").write.format("rocketstore").mode("append").save(target)
            sink_times.append(time.perf_counter() - t)
        print(
            f"{'sink (topic, body)':44s} best {min(sink_times):6.2f} s  {n / min(sink_times):12,.0f} rows/s"
            f"  runs {[round(x, 2) for x in sink_times]}"
        )
        print(f"sink/parquet write = {min(pq_times) / min(sink_times):.2f}x")
        print(f"load after: {os.getloadavg()[0]:.2f}")
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
