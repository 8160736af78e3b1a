"""A Spark pipeline over a rocketstore store: per-topic per-minute counts and bytes, written back.

    pip install "rocketstore[spark]"          # pyspark >= 4.0, pyarrow; needs Java 17+
    python examples/spark_pipeline.py [STORE]

Without STORE it creates a small demo store under a temporary directory (3 topics, 3,000
messages; all stored within a second or two, so they fall in one or two minutes: point it at a
real store to see the minutes). It then

1. reads every topic of the store as a DataFrame (``format("rocketstore")``),
2. computes, per topic and per minute of ``storeTimestamp``, the message count and body bytes,
3. writes those rows back into the same store as JSON bodies of topic ``TopicStatsPerMinute``
   (``mode("append")``: a store is a log), and reads them back to print them.

Run it twice and the stats topic counts itself too: that is the point of writing back to a log.
"""

import json
import os
import sys
import tempfile

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from rocketstore import MessageStore
from rocketstore.spark import register

STATS_TOPIC = "TopicStatsPerMinute"


def make_demo_store(path: str, messages: int = 3000) -> None:
    """Three topics of JSON bodies (the store stamps each with the time of its put)."""
    import random

    rng = random.Random(6)
    with MessageStore(path) as store:
        for topic, queues in (("Orders", 4), ("Payments", 2), ("Audit", 1)):
            store.create_topic(topic, queues)
        for i in range(messages):
            topic = rng.choice(["Orders", "Orders", "Payments", "Audit"])
            body = json.dumps({"n": i, "pad": "x" * rng.randrange(10, 200)}).encode()
            store.put(topic, body, keys=f"id-{i}")


def main(argv):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers import rocketstore.spark
    if len(argv) > 1:
        store_path = os.path.abspath(argv[1])
    else:
        store_path = os.path.join(tempfile.mkdtemp(prefix="rocketstore-spark-"), "store")
        make_demo_store(store_path)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("rocketstore-pipeline")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)

    messages = spark.read.format("rocketstore").load(store_path)  # every topic, every queue
    stats = (
        messages.where(F.col("topic") != STATS_TOPIC)
        .groupBy("topic", F.date_trunc("minute", "storeTimestamp").alias("minute"))
        .agg(F.count("*").alias("messages"), F.sum(F.length("body")).alias("bytes"))
        .orderBy("minute", "topic")
    )
    stats.show(truncate=False)

    # Back into the store: one message per (topic, minute), the row as its JSON body, the topic
    # counted as the tag so a consumer can filter on it.
    (
        stats.select(
            F.to_json(F.struct("topic", "minute", "messages", "bytes")).alias("body"),
            F.col("topic").alias("tags"),
        )
        .write.format("rocketstore")
        .option("topic", STATS_TOPIC)
        .mode("append")
        .save(store_path)
    )

    written = (
        spark.read.format("rocketstore")
        .option("subscribe", STATS_TOPIC)
        .load(store_path)
        .select("queueId", "queueOffset", "tags", F.col("body").cast("string").alias("body"))
    )
    written.show(truncate=False)
    print(f"store {store_path}: {written.count()} messages in {STATS_TOPIC}")
    spark.stop()


if __name__ == "__main__":
    main(sys.argv)
