"""PySpark (>= 4.0) data source ``rocketstore``: read and write store directories from Spark.

>>> from rocketstore.spark import register                      # doctest: +SKIP
>>> register(spark)
>>> df = spark.read.format("rocketstore").option("subscribe", "TopicA").load("/data/store")
>>> df.write.format("rocketstore").mode("append").save("/data/other-store")
>>> (df.writeStream.format("rocketstore").option("checkpointLocation", "/ck")  # replays skipped
...    .start("/data/other-store"))

Built on PySpark's Python data source API (``pyspark.sql.datasource``); no jar. Design, API facts
and pitfalls: ``shared/spec/pyspark-datasource.md``. Rows leave ``read()`` as ``pyarrow``
record batches built column by column from the C decoder's ``RECORD_DTYPE`` rows: bodies, topics
and properties are gathered by Arrow ``take`` over a zero-copy wrap of the segment map, never
through a Python object per row.

Schema (fixed; a user ``.schema(...)`` naming a subset of these columns is the projection,
``includeBody=false`` drops ``body``)::

    topic STRING, queueId INT, queueOffset BIGINT, commitLogOffset BIGINT, brokerName STRING,
    body BINARY, tags STRING, keys STRING, properties MAP<STRING,STRING>, msgId STRING,
    flag INT, sysFlag INT, reconsumeTimes INT, bornTimestamp TIMESTAMP, storeTimestamp TIMESTAMP,
    bornHost STRING, storeHost STRING

``msgId`` is the offsetMsgId (store host, port and CommitLog offset in upper-case hex, as
``MessageExt.msg_id``); hosts read ``ip:port`` (``[ip]:port`` for IPv6).

Batch read options (names as Spark's Kafka source where the meaning matches): ``path`` (from
``load(p)``) or ``paths`` (JSON list, from ``load([..])``, or comma-separated); at most one of
``subscribe`` (comma list), ``subscribePattern`` (regex) and ``assign`` (JSON
``{"topic": [queueIds]}``), all topics when none; ``startingOffsets`` / ``endingOffsets``:
``earliest``, ``latest`` or JSON ``{"topic": {"queueId": offset}}`` (-2 earliest, -1 latest;
three levels ``{"topic": {"broker": {"queueId": offset}}}`` when several stores are read);
``maxRecordsPerPartition`` (default 1,000,000), ``minPartitions``, ``includeBody`` (true),
``brokerName`` (one store only; default: the store directory's name), ``failOnDataLoss`` (true:
a starting offset below what retention kept raises), ``arrowBatchRows`` (32768).

``startingTimestamp`` / ``endingTimestamp`` (ms since the epoch): per queue, the first offset
stored at or after the time (a binary search over the ConsumeQueue reading store times,
RocketMQ's ``getOffsetInQueueByTime``), as the start (inclusive) / end (exclusive). Each wins
over ``startingOffsets`` / ``endingOffsets`` given with it, as in Spark's Kafka source; the
streaming reader takes ``startingTimestamp`` for a new query.

``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``: JSON ``{"topic": {"queueId": ms}}``,
per queue; precedence as Kafka's, per queue: ``startingTimestamp`` > ``...ByTimestamp`` >
``startingOffsets``. ``startingOffsetsByTimestampStrategy``: ``latest`` (default) starts a queue
with nothing stored at or after the time at its latest offset, ``error`` fails the query.

``schema``: ``rocketstore`` (the columns above) or ``kafka``: ``key`` (KEYS, binary), ``value``,
``topic``, ``partition``, ``offset``, ``timestamp`` (store time), ``timestampType`` (1,
LogAppendTime), and ``headers`` (every property) with ``includeHeaders=true``. The sink takes
Kafka's columns too (``value``, ``key``, ``headers``, ``partition``, ``topic``). Options no role
of the source knows (``kafka.*``, ``groupIdPrefix``, a typo) are refused by name.

Streaming: ``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` with ``maxTriggerDelay``, and
``groupId`` (the end of each micro-batch Spark reports done, one batch behind the query,
recorded as the group's consumer offsets).

``scan``: ``queue`` reads each queue range through its ConsumeQueue; ``commitlog`` makes one
partition per CommitLog segment (between the first and the last record selected), decodes the
segment whole and keeps the records of the selected queue ranges (same rows, another order; not
split by ``maxRecordsPerPartition``); ``auto`` (default) takes ``commitlog`` for a store when
the selected ranges hold at least 3/4 of its messages and its segments make at least as many
partitions as the queue ranges would (and ``minPartitions``), else ``queue``.

No filter pushdown: Spark applies ``where(...)`` after the read. PySpark 4.1-4.3 keep a pushed
read plan on the data source object all queries of one DataFrame share, and reuse it for a later
query of that DataFrame that has no filter, which would then see the earlier filter's rows; so
the reader does not push, and option ``pushFilters=true`` is refused. The options above narrow a
read and belong to the DataFrame.

Where code runs: ``partitions()`` in a planner process on the driver host, ``read()`` in executor
Python workers, so every executor must be able to open every store path (Spark's API has no
locality hint: use local mode or a shared filesystem). Workers import this module, so install
rocketstore into the interpreter ``PYSPARK_PYTHON`` names.
"""

from __future__ import annotations

import importlib
from typing import Any

from rocketstore.spark._arrow import read_commitlog_range, read_queue_range
from rocketstore.spark._options import (
    COLUMNS,
    DEFAULT_ARROW_BATCH_ROWS,
    DEFAULT_MAX_RECORDS_PER_PARTITION,
    FORMAT_NAME,
    SCHEMA_DDL,
    arrow_schema,
)

__all__ = [
    "register",
    "RocketStoreDataSource",
    "SCHEMA_DDL",
    "COLUMNS",
    "arrow_schema",
    "read_sink_commits",
    "FORMAT_NAME",
    "DEFAULT_ARROW_BATCH_ROWS",
    "DEFAULT_MAX_RECORDS_PER_PARTITION",
    "read_queue_range",
    "read_commitlog_range",
]

#: Names defined by the modules that need pyspark, loaded on first use (PEP 562).
_LAZY = {
    "COLUMNS": "_options",
    "CommitLogRange": "_partitions",
    "DEFAULT_ARROW_BATCH_ROWS": "_options",
    "DEFAULT_MAX_RECORDS_PER_PARTITION": "_options",
    "DEFAULT_STAGING_RETENTION_MINUTES": "_writer",
    "EARLIEST": "_options",
    "FAST_RUN_ROWS": "_writer",
    "FORMAT_NAME": "_options",
    "LATEST": "_options",
    "OFFSETS_VERSION": "_stream",
    "QueueRange": "_partitions",
    "RocketStoreDataSource": "_source",
    "RocketStoreReader": "_reader",
    "RocketStoreStreamReader": "_stream",
    "RocketStoreStreamWriter": "_writer",
    "RocketStoreWriter": "_writer",
    "SCHEMA_DDL": "_options",
    "SINK_COMMITS_FILE": "_writer",
    "StagedPart": "_writer",
    "_COLUMN_NAMES": "_options",
    "_HEX": "_arrow",
    "_PER_ROW_COLUMNS": "_writer",
    "_Properties": "_arrow",
    "_STAGING_NAME": "_writer",
    "_STREAM_ARROW": "_pyspark",
    "_StagingSink": "_writer",
    "_WRITE_COLUMNS": "_writer",
    "_append_part": "_writer",
    "_bodies_only": "_writer",
    "_bool_option": "_options",
    "_broker_name": "_options",
    "_commitlog_ranges": "_partitions",
    "_constant_strings": "_arrow",
    "_hosts": "_arrow",
    "_int_option": "_options",
    "_msg_ids": "_arrow",
    "_offset_spec": "_options",
    "_parse_timestamp_option": "_options",
    "_put_runs": "_writer",
    "_read_sink_state": "_writer",
    "_record_batch": "_arrow",
    "_remove_parts": "_writer",
    "_resolve": "_options",
    "_rows_to_batches": "_writer",
    "_select_topics": "_options",
    "_sink_commits_path": "_writer",
    "_slices": "_arrow",
    "_spans": "_arrow",
    "_stage": "_writer",
    "_store_paths": "_options",
    "_timestamps": "_arrow",
    "_write_sink_commits": "_writer",
    "arrow_schema": "_options",
    "read_commitlog_range": "_arrow",
    "read_queue_range": "_arrow",
    "read_sink_commits": "_writer",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("pyspark", "py4j"):
            raise ImportError(
                f"rocketstore.spark.{name} needs PySpark: pip install 'pyspark>=4.0' pyarrow ({exc})"
            ) from exc
        raise
    globals()[name] = value
    return value


def register(spark) -> None:
    """Register the ``rocketstore`` format with ``spark`` (per session; a second call is a no-op)."""
    RocketStoreDataSource = __getattr__("RocketStoreDataSource")  # ImportError without pyspark
    try:
        spark.dataSource.register(RocketStoreDataSource)
    except Exception as exc:  # 4.0 refuses a name auto-discovery registered already
        if "ALREADY_EXISTS" not in str(exc):
            raise
