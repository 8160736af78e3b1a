"""Spark read/write throughput of the rocketstore data source.

    . .venv-spark/bin/activate && python bench/spark.py --messages 1000000 --body 64

Prints rows/s for: a full-store read into Spark's ``noop`` sink (by queue and by CommitLog
segment); the same rows read by Spark from Parquet; the same store through a tuple-yielding
Python data source (the slow baseline the Arrow path is meant to beat); a Python data source
that only re-yields prebuilt Arrow batches of the same shape (the floor of PySpark's Python data
source path on this machine: no store read can beat it), for 5 columns and for all 17; and the
sink (DataFrame -> new store) beside what it is made of and its ceilings: the same (topic, body)
rows read into ``noop`` (the sink's input), written as Parquet, written to a Python sink that
does nothing (the write path's floor: no Python sink can beat it), and staged by the sink's
tasks without the driver's append (the sink's time minus this one's is its commit).
``--properties`` gives every stored message TAGS, KEYS and one more property (the properties map
and tags/keys columns then have work to do; without it the bench's messages carry none). Each
timing is the best of ``--repeat`` runs after one warm-up query; the reads, and then the writes,
run in alternating rounds (each once per round), so a change of the machine's load falls on all
alike. The machine's load is printed alongside, and the first line names the build measured: the
installed rocketstore's (``src/`` is never put on ``sys.path``), compiled or pure Python, with its
CRC-32 path.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

import buildinfo
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceReader, WriterCommitMessage

buildinfo.require("bench/spark.py")

from rocketstore.spark import QueueRange, RocketStoreReader, register  # noqa: E402
from rocketstore.spark._writer import RocketStoreWriter  # noqa: E402
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


class NoopSink(DataSource):
    """The cost of the Python data source write path itself: an Arrow writer whose tasks only
    count the batches Spark hands them and whose commit does nothing. No Python sink can be
    faster than this on the machine it runs on (the sink's ceiling, as FloorSource is the read's)."""

    @classmethod
    def name(cls):
        return "rocketstore_noop_sink"

    def writer(self, schema, overwrite):
        return NoopWriter()


class RowCount(WriterCommitMessage):
    def __init__(self, rows):
        self.rows = rows


class NoopWriter(DataSourceArrowWriter):
    def write(self, iterator):
        rows = 0
        for batch in iterator:
            rows += batch.num_rows
        return RowCount(rows)

    def commit(self, messages):
        pass


class StagedOnlySink(DataSource):
    """rocketstore's sink without the driver's append: its tasks stage their Arrow IPC files as
    the sink's do, the commit only deletes them. The sink's time minus this one's is its commit."""

    @classmethod
    def name(cls):
        return "rocketstore_staged_only"

    def writer(self, schema, overwrite):
        return StagedOnlyWriter(self.options, [f.name for f in schema.fields])


class StagedOnlyWriter(RocketStoreWriter):
    def commit(self, messages):
        self._clean(messages)


FIVE_COLUMNS = "topic STRING, queueId INT, queueOffset BIGINT, storeTimestamp TIMESTAMP, body BINARY"


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
        spark.dataSource.register(NoopSink)
        spark.dataSource.register(StagedOnlySink)
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
        reads = () if args.sink_only else reads
        for _name, df in reads:
            df.write.format("noop").mode("overwrite").save()  # warm-up
        # alternating rounds, each read once per round: a change of the machine's load during
        # the run falls on all of them alike, so their ratios hold where absolute rates do not
        read_times: dict = {name: [] for name, _df in reads}
        for _ in range(args.repeat):
            for name, df in reads:
                t = time.perf_counter()
                df.write.format("noop").mode("overwrite").save()
                read_times[name].append(time.perf_counter() - t)
        for name, times in read_times.items():
            t = min(times)
            results[name] = n / t
            print(
                f"{name:44s} best {t:6.2f} s  {n / t:12,.0f} rows/s"
                f"  median {n / sorted(times)[len(times) // 2]:12,.0f} rows/s  runs {[round(x, 2) for x in times]}"
            )
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
        # The sink beside what bounds it, in alternating rounds (each round times every one of
        # them once, so a change of the machine's load falls on all alike): a Parquet write of the
        # same rows, the do-nothing Python sink (the API's ceiling) and the sink's tasks alone.
        sink_input = arrow_df.select("topic", "body")
        writes = {
            "parquet write (topic, body)": lambda target: sink_input.write.parquet(target),
            "no-op Python sink (topic, body)": lambda target: (
                sink_input.write.format("rocketstore_noop_sink").mode("append").save(target)
            ),
            "sink tasks only: staged, no commit": lambda target: (
                sink_input.write.format("rocketstore_staged_only").mode("append").save(target)
            ),
            "sink (topic, body)": lambda target: (
                sink_input.write.format("rocketstore").mode("append").save(target)
            ),
        }
        for j, fn in enumerate(writes.values()):  # warm-up: each one's workers and imports
            fn(os.path.join(work, f"write-warmup-{j}"))
            shutil.rmtree(os.path.join(work, f"write-warmup-{j}"), ignore_errors=True)
        write_times: dict = {name: [] for name in writes}
        for i in range(args.repeat):
            for j, (name, fn) in enumerate(writes.items()):
                target = os.path.join(work, f"write-{i}-{j}")
                t = time.perf_counter()
                fn(target)
                write_times[name].append(time.perf_counter() - t)
                shutil.rmtree(target, ignore_errors=True)
        for name, times in write_times.items():
            print(
                f"{name:44s} best {min(times):6.2f} s  {n / min(times):12,.0f} rows/s"
                f"  median {n / sorted(times)[len(times) // 2]:12,.0f} rows/s  runs {[round(x, 2) for x in times]}"
            )
        sink = min(write_times["sink (topic, body)"])
        noop = min(write_times["no-op Python sink (topic, body)"])
        staged = min(write_times["sink tasks only: staged, no commit"])
        print(
            f"sink/parquet write = {min(write_times['parquet write (topic, body)']) / sink:.2f}x   "
            f"sink/no-op Python sink = {noop / sink:.2f}x   "
            f"staged only/no-op Python sink = {noop / staged:.2f}x   "
            f"commit (sink - staged only) = {sink - staged:.2f} s"
        )
        print(f"load after: {os.getloadavg()[0]:.2f}")
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
