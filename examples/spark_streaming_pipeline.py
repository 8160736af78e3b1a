"""A streaming Spark pipeline between stores: orders in, per-minute revenue out, exactly once.

    pip install "rocketstore[spark]"          # pyspark >= 4.0, pyarrow; needs Java 17+
    python examples/spark_streaming_pipeline.py WORK [--demo N]

``WORK`` holds everything: ``orders`` (the store read; ``--demo N`` first fills it with N
orders), ``stats`` (the store written), ``stats.parquet`` (the same rows as Parquet) and
``checkpoints``. The job

1. streams topic ``Orders`` of ``WORK/orders`` (``readStream.format("rocketstore")``), each body a
   JSON order ``{"id", "amount", "ts"}`` (``ts``: the order's event time in ms),
2. sums, per minute of event time (``window``, watermark 5 minutes: a minute is final once an
   order 5 minutes later has been read), the orders and their amounts,
3. writes each final minute, once, to topic ``RevenuePerMinute`` of ``WORK/stats`` (one JSON body
   per minute, the minute as its KEYS) and to ``WORK/stats.parquet``,

with ``Trigger.AvailableNow``: it processes what the store holds when it starts, in micro-batches
of at most ``--max-per-trigger`` orders, and stops. Each sink is its own query with its own
checkpoint. Kill the driver at any point (``kill -9``) and run the same command again: both
queries resume from their checkpoints, and each minute is in each output exactly once (the
store's sink records the batch ids it appended in ``stats/config/sparkSinkCommits.json``;
Spark's file sink keeps the Parquet files it committed in ``stats.parquet/_spark_metadata``, so
read that directory with Spark, which ignores a killed batch's stray files). Run it again after
more orders arrive and it carries on from where it stopped; the demo's last order lies an hour
after the others, so its watermark closes every minute before it.
"""

import argparse
import json
import os
import sys

ORDERS_TOPIC = "Orders"
STATS_TOPIC = "RevenuePerMinute"
#: the demo's orders: one per second of event time from this instant (2026-01-01T00:00:00Z)
DEMO_START_MS = 1_767_225_600_000


def make_demo_store(path: str, orders: int) -> None:
    """``orders`` orders a second apart in event time, order ``i`` in queue ``i % 4`` (so each
    queue's event times grow, as a producer's would), then one an hour later (it moves the
    watermark past every minute before it)."""
    from rocketstore import MessageStore

    def body(i: int) -> bytes:
        ts = DEMO_START_MS + (i * 1000 if i < orders else orders * 1000 + 3_600_000)
        return json.dumps({"id": i, "amount": (i * 37) % 1000 / 10, "ts": ts}).encode()

    with MessageStore(path) as store:
        store.create_topic(ORDERS_TOPIC, 4)
        for start in range(0, orders + 1, 1000):
            stop = min(orders + 1, start + 1000)
            for queue in range(4):
                bodies = [body(i) for i in range(start, stop) if i % 4 == queue]
                if bodies:
                    store.put_batch(ORDERS_TOPIC, bodies, queue_id=queue)


def revenue_per_minute(spark, orders_path: str, max_per_trigger: int):
    """The streaming DataFrame of final minutes: minute (timestamp), orders, amount."""
    from pyspark.sql import functions as F

    order = "id BIGINT, amount DOUBLE, ts BIGINT"
    return (
        spark.readStream.format("rocketstore")
        .option("subscribe", ORDERS_TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_per_trigger))
        .load(orders_path)
        .select(F.from_json(F.col("body").cast("string"), order).alias("o"))
        .select("o.amount", F.timestamp_millis("o.ts").alias("eventTime"))
        .withWatermark("eventTime", "5 minutes")
        .groupBy(F.window("eventTime", "1 minute"))
        .agg(F.count("*").alias("orders"), F.round(F.sum("amount"), 2).alias("amount"))
        .select(F.col("window.start").alias("minute"), "orders", "amount")
    )


def run(work: str, max_per_trigger: int) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from rocketstore import MessageStore
    from rocketstore.spark import register

    orders_path, stats_path = os.path.join(work, "orders"), os.path.join(work, "stats")
    parquet_path, checkpoints = os.path.join(work, "stats.parquet"), os.path.join(work, "checkpoints")
    with MessageStore(stats_path) as stats:  # the sink appends to a store that exists
        if STATS_TOPIC not in stats.topics:
            stats.create_topic(STATS_TOPIC, 1)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("rocketstore-streaming-pipeline")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)

    minutes = revenue_per_minute(spark, orders_path, max_per_trigger)
    to_store = (
        minutes.select(
            F.to_json(
                F.struct(F.date_format("minute", "yyyy-MM-dd'T'HH:mm'Z'").alias("minute"), "orders", "amount")
            )
            .cast("binary")
            .alias("body"),
            F.date_format("minute", "yyyy-MM-dd'T'HH:mm'Z'").alias("keys"),
        )
        .writeStream.format("rocketstore")
        .option("topic", STATS_TOPIC)
        .option("checkpointLocation", os.path.join(checkpoints, "store"))
        .outputMode("append")
        .trigger(availableNow=True)
        .start(stats_path)
    )
    # Start the second query only once the first has read a batch. Spark (4.0 to 4.3) starts a
    # Python streaming source by adding entries to a map that every query of the registered
    # data source shares, without a lock, and ships that map in each read task: two queries
    # that start at once can corrupt it, and every later task of that driver then fails with
    # java.io.OptionalDataException. Once the first query holds its entries, the second only
    # replaces their values.
    _await_first_batch(to_store)
    to_parquet = (
        minutes.writeStream.format("parquet")
        .option("checkpointLocation", os.path.join(checkpoints, "parquet"))
        .outputMode("append")
        .trigger(availableNow=True)
        .start(parquet_path)
    )
    to_store.awaitTermination()
    to_parquet.awaitTermination()
    print(f"{stats_path}: {STATS_TOPIC} holds {count_stats(stats_path)} minutes; Parquet at {parquet_path}")
    spark.stop()


def _await_first_batch(query, poll_s: float = 0.05) -> None:
    """Wait until ``query`` has finished a micro-batch or stopped (its error surfaces later)."""
    import time

    while query.isActive and query.lastProgress is None:
        time.sleep(poll_s)


def count_stats(stats_path: str) -> int:
    from rocketstore import MessageStore

    with MessageStore(stats_path, read_only=True) as store:
        return sum(hi - lo for (topic, _q), (lo, hi) in store.queues().items() if topic == STATS_TOPIC)


def main(argv) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("work", help="directory of the stores, the Parquet output and the checkpoints")
    ap.add_argument("--demo", type=int, metavar="N", help="first fill WORK/orders with N demo orders")
    ap.add_argument("--max-per-trigger", type=int, default=2000, help="orders per micro-batch at most")
    args = ap.parse_args(argv[1:])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers import rocketstore.spark
    os.makedirs(args.work, exist_ok=True)
    if args.demo:
        make_demo_store(os.path.join(args.work, "orders"), args.demo)
    run(args.work, args.max_per_trigger)


if __name__ == "__main__":
    main(sys.argv)
