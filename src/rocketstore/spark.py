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

``scan``: ``queue`` reads each queue range through its ConsumeQueue; ``commitlog`` makes one
partition per CommitLog segment (between the first and the last record selected), decodes the
segment whole and keeps the records of the selected queue ranges (same rows, another order; not
split by ``maxRecordsPerPartition``); ``auto`` (default) takes ``commitlog`` for a store when
the selected ranges hold at least 3/4 of its messages and its segments make at least as many
partitions as the queue ranges would (and ``minPartitions``), else ``queue``.

Filter pushdown (PySpark 4.1+; ``register`` turns on ``spark.sql.python.filterPushdown.enabled``,
without which Spark refuses a reader that pushes, so option ``pushFilters=false`` gives one that
does not). Applied exactly and not re-checked by Spark: ``topic`` =, IN, LIKE 'prefix%';
``queueId`` =, IN, <, <=, >, >=; ``queueOffset`` =, <, <=, >, >= (IN narrows the range and
goes back to Spark); ``keys`` / ``msgId`` =, IN: partitions of exactly the matching records,
found by the index (``keys``: one of the value's keys, then the record's KEYS compared whole;
left to Spark when a lookup reaches the index's 64-per-query cap) and by the CommitLog offset
inside an offsetMsgId; IS NOT NULL on columns never null. ``storeTimestamp`` ranges narrow each
queue range by binary search and go back to Spark (store times may step back with the clock).
On 4.0 nothing is pushed and Spark filters after the read.

Where code runs: ``partitions()`` in a planner process on the driver host, ``read()`` in executor
Python workers, so every executor must be able to open every store path (Spark's API has no
locality hint: use local mode or a shared filesystem). Workers import this module, so install
rocketstore into the interpreter ``PYSPARK_PYTHON`` names.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Iterator, Optional

from rocketstore._files import replace_file

from pyspark.sql.datasource import (DataSource, DataSourceArrowWriter, DataSourceReader,
                                    DataSourceStreamReader, InputPartition, WriterCommitMessage)

try:                                    # 4.1+: the streaming sink receives Arrow batches
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase
    _STREAM_ARROW = True
except ImportError:                     # 4.0: Rows, turned into Arrow batches in write()
    from pyspark.sql.datasource import DataSourceStreamWriter as _StreamWriterBase
    _STREAM_ARROW = False

try:                                    # 4.1+: filter pushdown
    from pyspark.sql.datasource import (EqualTo, GreaterThan, GreaterThanOrEqual, In, IsNotNull,
                                        LessThan, LessThanOrEqual, StringStartsWith)
    _PUSHABLE = (EqualTo, GreaterThan, GreaterThanOrEqual, In, IsNotNull, LessThan, LessThanOrEqual,
                 StringStartsWith)
except ImportError:                     # 4.0: no pushFilters; Spark filters after the read
    class _NoFilter:
        pass
    EqualTo = GreaterThan = GreaterThanOrEqual = In = IsNotNull = _NoFilter
    LessThan = LessThanOrEqual = StringStartsWith = _NoFilter
    _PUSHABLE = ()

try:                                    # 4.2+: admission control and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:                     # 4.0/4.1: latestOffset() is called without a limit
    class ReadMaxRows:                  # never passed in: isinstance() checks stay false
        max_rows = 0

    class SupportsTriggerAvailableNow:
        pass

__all__ = ["register", "RocketStoreDataSource", "SCHEMA_DDL", "COLUMNS", "arrow_schema", "read_sink_commits"]

#: (column, Spark DDL type) in schema order.
COLUMNS = (
    ("topic", "STRING"), ("queueId", "INT"), ("queueOffset", "BIGINT"), ("commitLogOffset", "BIGINT"),
    ("brokerName", "STRING"), ("body", "BINARY"), ("tags", "STRING"), ("keys", "STRING"),
    ("properties", "MAP<STRING,STRING>"), ("msgId", "STRING"), ("flag", "INT"), ("sysFlag", "INT"),
    ("reconsumeTimes", "INT"), ("bornTimestamp", "TIMESTAMP"), ("storeTimestamp", "TIMESTAMP"),
    ("bornHost", "STRING"), ("storeHost", "STRING"),
)
_COLUMN_NAMES = tuple(name for name, _ in COLUMNS)
SCHEMA_DDL = ", ".join(f"{name} {kind}" for name, kind in COLUMNS)

EARLIEST, LATEST = -2, -1
DEFAULT_MAX_RECORDS_PER_PARTITION = 1_000_000
DEFAULT_ARROW_BATCH_ROWS = 32768
FORMAT_NAME = "rocketstore"


def register(spark) -> None:
    """Register the ``rocketstore`` format with ``spark`` (per session; a second call is a no-op)."""
    try:
        spark.dataSource.register(RocketStoreDataSource)
    except Exception as exc:            # 4.0 refuses a name auto-discovery registered already
        if "ALREADY_EXISTS" not in str(exc):
            raise
    if _PUSHABLE:                       # 4.1+: a reader with pushFilters fails planning without it
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")


def arrow_schema(columns=_COLUMN_NAMES):
    """The pyarrow schema Spark expects for ``columns`` (types and nullability must match
    exactly: Spark checks ``Schema.equals``); every field is nullable, as Spark's are."""
    import pyarrow as pa
    types = {
        "STRING": pa.string(), "INT": pa.int32(), "BIGINT": pa.int64(), "BINARY": pa.binary(),
        "MAP<STRING,STRING>": pa.map_(pa.string(), pa.string()),
        "TIMESTAMP": pa.timestamp("us", tz="UTC"),
    }
    kinds = dict(COLUMNS)
    return pa.schema([pa.field(name, types[kinds[name]], nullable=True) for name in columns])


def _bool_option(options, name: str, default: bool) -> bool:
    value = options.get(name.lower())
    if value is None:
        return default
    if value.strip().lower() in ("true", "1", "yes"):
        return True
    if value.strip().lower() in ("false", "0", "no"):
        return False
    raise ValueError(f"option {name} must be true or false, not {value!r}")


def _int_option(options, name: str, default: Optional[int]) -> Optional[int]:
    value = options.get(name.lower())
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"option {name} must be an integer, not {value!r}") from None
    if number <= 0:
        raise ValueError(f"option {name} must be positive, not {number}")
    return number


def _store_paths(options) -> list[str]:
    if options.get("paths"):
        raw = options["paths"]
        paths = json.loads(raw) if raw.lstrip().startswith("[") else raw.split(",")
    elif options.get("path"):
        paths = [options["path"]]
    else:
        raise ValueError("rocketstore needs a store path: load(path), load([paths]) or option paths")
    paths = [os.path.abspath(p.strip()) for p in paths if p.strip()]
    if not paths:
        raise ValueError("rocketstore needs at least one store path")
    return paths


# ---------------------------------------------------------------------------------------------
# The data source

class RocketStoreDataSource(DataSource):
    """``format("rocketstore")``: batch reads and batch writes of rocketstore / RocketMQ stores."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self):
        if not _bool_option(self.options, "includeBody", True):
            return ", ".join(f"{n} {k}" for n, k in COLUMNS if n != "body")
        return SCHEMA_DDL

    def reader(self, schema):
        options = dict(self.options)
        if _PUSHABLE and _bool_option(options, "pushFilters", True):
            return RocketStorePushdownReader([f.name for f in schema.fields], options)
        return RocketStoreReader([f.name for f in schema.fields], options)

    def streamReader(self, schema):
        return RocketStoreStreamReader([f.name for f in schema.fields], dict(self.options))

    def writer(self, schema, overwrite: bool):
        if overwrite:
            raise ValueError("rocketstore appends only: use .mode(\"append\") (a store is a log; "
                             "overwrite would mean deleting messages)")
        return RocketStoreWriter(dict(self.options), [f.name for f in schema.fields])

    def streamWriter(self, schema, overwrite: bool):
        if overwrite:
            raise ValueError("rocketstore appends only: use outputMode(\"append\") (a store is a log)")
        return RocketStoreStreamWriter(dict(self.options), [f.name for f in schema.fields])


# ---------------------------------------------------------------------------------------------
# Batch read

@dataclass
class QueueRange(InputPartition):
    """Queue offsets [start, end) of one ConsumeQueue of one store: small and picklable."""
    root: str
    broker: str
    topic: str
    queue_id: int
    start: int
    end: int


def _broker_name(root: str, options, many: bool) -> str:
    if options.get("brokername") and not many:
        return options["brokername"]
    return os.path.basename(root.rstrip(os.sep)) or root


def _select_topics(options, topics) -> dict:
    """{topic: queue ids or None (all)} the options select among ``topics``."""
    chosen = [k for k in ("subscribe", "subscribepattern", "assign") if options.get(k)]
    if len(chosen) > 1:
        raise ValueError("give only one of subscribe, subscribePattern and assign")
    if not chosen:
        return {t: None for t in topics}
    kind, value = chosen[0], options[chosen[0]]
    if kind == "subscribe":
        return {t.strip(): None for t in value.split(",") if t.strip()}
    if kind == "subscribepattern":
        pattern = re.compile(value)
        return {t: None for t in topics if pattern.fullmatch(t)}
    assign = json.loads(value)
    if not isinstance(assign, dict):
        raise ValueError('assign must be JSON like {"TopicA": [0, 1]}')
    return {t: {int(q) for q in ids} for t, ids in assign.items()}


def _offset_spec(options, name: str, default: str):
    value = options.get(name.lower(), default).strip()
    if value in ("earliest", "latest"):
        return value
    spec = json.loads(value)
    if not isinstance(spec, dict):
        raise ValueError(f"{name} must be earliest, latest or JSON {{\"topic\": {{\"queueId\": offset}}}}")
    return spec


def _resolve(spec, topic, broker, queue_id, lo, hi, many) -> int:
    """One queue's offset from a startingOffsets/endingOffsets spec; ``lo``/``hi`` its bounds."""
    if spec == "earliest":
        return lo
    if spec == "latest":
        return hi
    per_topic = spec.get(topic)
    if per_topic is None:
        return None
    if many:
        per_topic = per_topic.get(broker, {})
    value = per_topic.get(str(queue_id))
    if value is None:
        return None
    value = int(value)
    return lo if value == EARLIEST else hi if value == LATEST else value


class _Pushed:
    """What pushFilters() accepted, as plain data (the reader is pickled to the executors).

    Topic and queue constraints select whole queues and queue offsets narrow their ranges, so
    every partition kind applies them exactly. Store times narrow ranges by binary search only
    (the filter goes back to Spark). ``keys``/``msgId`` become exact record lists."""

    def __init__(self):
        self.topics = None              # set of names, or None: any
        self.prefixes = []              # topic must start with each
        self.queue_ids = None           # set, or None: any
        self.queue_lo, self.queue_hi = 0, None
        self.offset_lo, self.offset_hi = 0, None
        self.time_lo, self.time_hi = None, None     # ms, [lo, hi)
        self.keys = None                # set of KEYS values
        self.msg_ids = None             # set of msgId values
        self.candidates = None          # {root: sorted CommitLog offsets} for keys/msgId

    def topic_ok(self, topic: str) -> bool:
        return ((self.topics is None or topic in self.topics)
                and all(topic.startswith(p) for p in self.prefixes))

    def queue_ok(self, queue_id: int) -> bool:
        return ((self.queue_ids is None or queue_id in self.queue_ids) and queue_id >= self.queue_lo
                and (self.queue_hi is None or queue_id < self.queue_hi))


def _intersect(current, values):
    return set(values) if current is None else current & set(values)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _epoch_us(value) -> Optional[int]:
    """A filter's timestamp literal as microseconds since the epoch (naive: UTC)."""
    import datetime
    if not isinstance(value, datetime.datetime):
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.timezone.utc)
    return (value - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)) // datetime.timedelta(microseconds=1)


#: Columns the source never leaves null (IsNotNull on them is true of every row).
_NEVER_NULL = frozenset(_COLUMN_NAMES) - {"tags", "keys"}


def _parse_timestamp_option(options, name: str) -> Optional[int]:
    value = options.get(name.lower())
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"option {name} must be milliseconds since the epoch, not {value!r}") from None


class RocketStoreReader(DataSourceReader):
    """Batch reader. Partitions are queue offset ranges (split by maxRecordsPerPartition),
    CommitLog segment scans (``scan``), or exact record lists (pushed ``keys``/``msgId``)."""

    def __init__(self, columns, options):
        unknown = [c for c in columns if c not in _COLUMN_NAMES]
        if unknown:
            raise ValueError(f"rocketstore has no column(s) {unknown}; its schema is: {SCHEMA_DDL}")
        self.columns = list(columns)
        self.options = options
        self.paths = _store_paths(options)
        self.batch_rows = _int_option(options, "arrowBatchRows", DEFAULT_ARROW_BATCH_ROWS)
        self.scan = options.get("scan", "auto").strip().lower()
        if self.scan not in ("auto", "queue", "commitlog"):
            raise ValueError(f"option scan must be auto, queue or commitlog, not {self.scan!r}")
        self.pushed = _Pushed()

    # ---- filter pushdown: RocketStorePushdownReader.pushFilters (4.1+) calls these ----

    def _push_filters(self, filters):
        """Accept what the partitions apply exactly; return the rest (the same objects) to Spark."""
        rest, lookups = [], []
        for f in filters:
            verdict = self._push(f)
            if verdict == "lookup":
                lookups.append(f)
            elif not verdict:
                rest.append(f)
        if lookups and not self._look_up():
            self.pushed.keys = self.pushed.msg_ids = None
            rest.extend(lookups)
        return rest

    def _push(self, f):
        """True: applied exactly; "lookup": applied if the index lookups are complete; False: not."""
        if not isinstance(f, _PUSHABLE) or len(getattr(f, "attribute", ())) != 1:
            return False
        column, p = f.attribute[0], self.pushed
        if isinstance(f, IsNotNull):
            return column in _NEVER_NULL
        value = f.value
        values = tuple(v for v in value if v is not None) if isinstance(f, In) else (value,)
        if column == "topic":
            if not all(isinstance(v, str) for v in values):
                return False
            if isinstance(f, StringStartsWith):
                p.prefixes.append(value)
                return True
            if isinstance(f, (EqualTo, In)):
                p.topics = _intersect(p.topics, values)
                return True
            return False
        if column in ("queueId", "queueOffset"):
            if not all(_is_int(v) for v in values):
                return False
            lo, hi = ("queue_lo", "queue_hi") if column == "queueId" else ("offset_lo", "offset_hi")
            bound = _int_bounds(f, values)
            if bound is None:
                return False
            setattr(p, lo, max(getattr(p, lo), bound[0]))
            if bound[1] is not None:
                setattr(p, hi, bound[1] if getattr(p, hi) is None else min(getattr(p, hi), bound[1]))
            if isinstance(f, In):
                if column == "queueId":
                    p.queue_ids = _intersect(p.queue_ids, values)
                    return True
                return len(values) <= 1         # a range around the values: Spark picks them
            return True
        if column == "storeTimestamp":
            micros = [_epoch_us(v) for v in values]
            if not micros or None in micros:
                return False
            bound = _int_bounds(f, [-(-us // 1000) for us in micros] if isinstance(f, (GreaterThanOrEqual, LessThan))
                                else [us // 1000 for us in micros])
            if bound is None or isinstance(f, In):
                return False
            if isinstance(f, EqualTo):                # [ceil(us/1000), floor(us/1000) + 1)
                bound = (-(-micros[0] // 1000), micros[0] // 1000 + 1)
            if not isinstance(f, (LessThan, LessThanOrEqual)):
                p.time_lo = bound[0] if p.time_lo is None else max(p.time_lo, bound[0])
            if bound[1] is not None:
                p.time_hi = bound[1] if p.time_hi is None else min(p.time_hi, bound[1])
            return False                                # store times may step back: Spark re-checks
        if column in ("keys", "msgId") and isinstance(f, (EqualTo, In)):
            if not all(isinstance(v, str) for v in values):
                return False
            if column == "keys":
                if not all(any(v.split(" ")) for v in values):
                    return False                       # no token the index could hold
                p.keys = _intersect(p.keys, values)
            else:
                p.msg_ids = _intersect(p.msg_ids, values)
            return "lookup"
        return False

    def _look_up(self) -> bool:
        """CommitLog offsets of the records pushed ``keys``/``msgId`` may match, per store
        (``self.pushed.candidates``); False when an index lookup could be incomplete."""
        from rocketstore.errors import InvalidMessageIdError, MessageNotFoundError
        from rocketstore.store import MessageStore
        p = self.pushed
        p.candidates = {}
        for root in self.paths:
            with MessageStore(root, read_only=True) as store:
                found = None
                if p.msg_ids is not None:
                    found = set()
                    for msg_id in p.msg_ids:
                        try:
                            found.add(store.get_by_msg_id(msg_id).commitlog_offset)
                        except (InvalidMessageIdError, MessageNotFoundError, ValueError):
                            pass
                if p.keys is not None:
                    by_key = set()
                    topics = {t for t, _q in store.queues() if p.topic_ok(t)}
                    for keys in p.keys:
                        token = next(t for t in keys.split(" ") if t)
                        for topic in topics:
                            hits = store.key_offsets(topic, token)
                            if hits is None:
                                return False
                            by_key.update(hits)
                    found = by_key if found is None else found & by_key
                p.candidates[root] = sorted(found)
        return True

    # ---- planning ----

    def _queue_ranges(self, store, root: str, broker: str, many: bool) -> list:
        """The QueueRange (unsplit) of every selected queue of one open store: options, then
        startingTimestamp/endingTimestamp, then what was pushed down."""
        options, p = self.options, self.pushed
        starting = _offset_spec(options, "startingOffsets", "earliest")
        ending = _offset_spec(options, "endingOffsets", "latest")
        start_ts = _parse_timestamp_option(options, "startingTimestamp")
        end_ts = _parse_timestamp_option(options, "endingTimestamp")
        fail_on_loss = _bool_option(options, "failOnDataLoss", True)
        queues = store.queues()
        wanted = _select_topics(options, sorted({t for t, _ in queues}))
        ranges = []
        for (topic, queue_id), (lo, hi) in sorted(queues.items()):
            if topic not in wanted or (wanted[topic] is not None and queue_id not in wanted[topic]):
                continue
            if not (p.topic_ok(topic) and p.queue_ok(queue_id)):
                continue
            start = _resolve(starting, topic, broker, queue_id, lo, hi, many)
            end = _resolve(ending, topic, broker, queue_id, lo, hi, many)
            if start_ts is not None:
                start = store.queue_offset_of_time(topic, queue_id, start_ts)
            if end_ts is not None:
                end = store.queue_offset_of_time(topic, queue_id, end_ts)
            start = lo if start is None else start
            end = hi if end is None else min(end, hi)
            if start < lo:
                if fail_on_loss:
                    raise ValueError(
                        f"{topic}-{queue_id} on {broker}: starting offset {start} is below the "
                        f"queue's first kept offset {lo} (retention deleted it); "
                        "set failOnDataLoss=false to start at the first kept offset")
                start = lo
            start = max(start, p.offset_lo)
            if p.offset_hi is not None:
                end = min(end, p.offset_hi)
            if end > start and p.time_lo is not None:
                start = max(start, store.queue_offset_of_time(topic, queue_id, p.time_lo))
            if end > start and p.time_hi is not None:
                end = min(end, store.queue_offset_of_time(topic, queue_id, p.time_hi))
            if end > start:
                ranges.append(QueueRange(root, broker, topic, queue_id, start, end))
        return ranges

    def partitions(self):
        from rocketstore.store import MessageStore
        options = self.options
        max_rows = _int_option(options, "maxRecordsPerPartition", DEFAULT_MAX_RECORDS_PER_PARTITION)
        min_parts = _int_option(options, "minPartitions", None)
        many = len(self.paths) > 1
        ranges, scans, lists = [], [], []
        for root in self.paths:
            broker = _broker_name(root, options, many)
            with MessageStore(root, read_only=True) as store:
                store_ranges = self._queue_ranges(store, root, broker, many)
                if self.pushed.candidates is not None:
                    lists.extend(_record_lists(store, root, broker, store_ranges, self.pushed, max_rows))
                elif self._scan_commitlog(store, store_ranges, min_parts, max_rows):
                    scans.extend(_commitlog_ranges(store, root, broker, store_ranges))
                else:
                    ranges.extend(store_ranges)
        total = sum(r.end - r.start for r in ranges)
        if min_parts and total:
            max_rows = min(max_rows, max(1, -(-total // max(1, min_parts - len(scans) - len(lists)))))
        parts = lists + scans
        for r in ranges:
            for s in range(r.start, r.end, max_rows):
                parts.append(QueueRange(r.root, r.broker, r.topic, r.queue_id, s, min(r.end, s + max_rows)))
        return parts     # a list: Spark refuses a tuple or generator

    def _scan_commitlog(self, store, ranges, min_parts, max_rows) -> bool:
        """scan=auto's rule: scan the CommitLog when the selected ranges hold at least 3/4 of the
        store's messages (so skipping the other topics' records costs little) and its segments
        give at least as many partitions as the queue ranges would (and minPartitions), so the
        choice never costs parallelism; else read through the ConsumeQueues."""
        if self.scan != "auto" or not ranges:
            return self.scan == "commitlog" and bool(ranges)
        selected = sum(r.end - r.start for r in ranges)
        everything = sum(hi - lo for lo, hi in store.queues().values())
        if 4 * selected < 3 * everything:
            return False
        size = store.config.commitlog_file_size
        segments = -(-store.max_offset // size) - store.min_offset // size
        queue_parts = sum(-(-(r.end - r.start) // max_rows) for r in ranges)
        return segments >= max(min_parts or 0, queue_parts)

    def read(self, partition) -> Iterator:
        if isinstance(partition, CommitLogRange):
            return read_commitlog_range(partition, self.columns, self.batch_rows)
        if isinstance(partition, RecordList):
            return read_record_list(partition, self.columns, self.batch_rows)
        if isinstance(partition, QueueRange):
            return read_queue_range(partition, self.columns, self.batch_rows)
        return iter(())      # Spark's InputPartition(None) when nothing matched


class RocketStorePushdownReader(RocketStoreReader):
    """The batch reader with ``pushFilters`` (4.1+). Spark refuses to plan a reader that
    overrides it while ``spark.sql.python.filterPushdown.enabled`` is false, so option
    ``pushFilters=false`` (or 4.0) gives the plain reader, and Spark filters after the read."""

    def pushFilters(self, filters):
        return self._push_filters(filters)


def _int_bounds(f, values):
    """[lo, hi) (hi None: unbounded) an integer comparison or In allows; None if not one."""
    if not values:
        return None
    v = values[0]
    if isinstance(f, EqualTo):
        return v, v + 1
    if isinstance(f, In):
        return min(values), max(values) + 1
    if isinstance(f, GreaterThan):
        return v + 1, None
    if isinstance(f, GreaterThanOrEqual):
        return v, None
    if isinstance(f, LessThan):
        return 0, v
    if isinstance(f, LessThanOrEqual):
        return 0, v + 1
    return None


@dataclass
class CommitLogRange(InputPartition):
    """CommitLog bytes [start, end) of one segment of one store, scanned whole; rows are kept
    when their (topic, queueId, queueOffset) falls in one of ``ranges``: ((topic, queue_id,
    start, end), ...)."""
    root: str
    broker: str
    start: int
    end: int
    ranges: tuple


@dataclass
class RecordList(InputPartition):
    """Exactly these records (CommitLog offsets ascending, and their sizes) of one store."""
    root: str
    broker: str
    offsets: tuple
    sizes: tuple


def _commitlog_ranges(store, root: str, broker: str, ranges) -> list:
    """One CommitLogRange per segment between the first and the last record the ranges hold."""
    lo_phys = hi_phys = None
    for r in ranges:
        first = store.queue_units(r.topic, r.queue_id, r.start, 1)
        last = store.queue_units(r.topic, r.queue_id, r.end - 1, 1)
        a = int(first["commitlog_offset"][0])
        b = int(last["commitlog_offset"][0]) + int(last["size"][0])
        lo_phys = a if lo_phys is None else min(lo_phys, a)
        hi_phys = b if hi_phys is None else max(hi_phys, b)
    if lo_phys is None:
        return []
    keep = tuple((r.topic, r.queue_id, r.start, r.end) for r in ranges)
    size = store.config.commitlog_file_size
    return [CommitLogRange(root, broker, max(lo_phys, base), min(hi_phys, base + size), keep)
            for base in range(lo_phys // size * size, hi_phys, size)]


def _record_lists(store, root: str, broker: str, ranges, pushed: _Pushed, max_rows: int) -> list:
    """RecordList partitions of the lookup candidates that really match: a record of a selected
    queue range, the unit at its queue offset pointing at it, and the pushed keys/msgId equal."""
    from rocketstore.errors import MessageNotFoundError
    bounds = {(r.topic, r.queue_id): (r.start, r.end) for r in ranges}
    offsets, sizes = [], []
    for offset in pushed.candidates.get(root, ()):
        try:
            msg = store.read(offset)
        except MessageNotFoundError:
            continue
        start, end = bounds.get((msg.topic, msg.queue_id), (0, 0))
        if not start <= msg.queue_offset < end:
            continue
        unit = store.queue_units(msg.topic, msg.queue_id, msg.queue_offset, 1)
        if not len(unit) or int(unit["commitlog_offset"][0]) != offset:
            continue                        # not consumable (a prepared transaction, ...)
        if pushed.keys is not None and msg.keys not in pushed.keys:
            continue
        if pushed.msg_ids is not None and msg.msg_id not in pushed.msg_ids:
            continue
        offsets.append(offset)
        sizes.append(msg.size)
    return [RecordList(root, broker, tuple(offsets[i:i + max_rows]), tuple(sizes[i:i + max_rows]))
            for i in range(0, len(offsets), max_rows)]


OFFSETS_VERSION = 1


class RocketStoreStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader. Offsets (the checkpoint keeps them verbatim, so the shape is a
    format): ``{"v": 1, "offsets": {topic: {queueId: nextOffset}}}`` for one store,
    ``{topic: {brokerName: {queueId: nextOffset}}}`` inside ``offsets`` for several; queue ids
    are strings (JSON keys), ends exclusive. New queues start at their earliest offset.
    ``startingOffsets`` (default ``latest``) applies to a new query only; a restart resumes from
    the checkpoint. ``maxOffsetsPerTrigger`` (4.2+) splits the rows across queues by lag.
    """

    def __init__(self, columns, options):
        self.reader = RocketStoreReader(columns, options)
        self.options = options
        self.many = len(self.reader.paths) > 1
        self.max_per_trigger = _int_option(options, "maxOffsetsPerTrigger", None)
        self.fail_on_loss = _bool_option(options, "failOnDataLoss", True)
        self.target = None

    def _bounds(self) -> dict:
        """{(root, broker, topic, queue_id): (min, max)} of the selected queues, read now."""
        from rocketstore.store import MessageStore
        out = {}
        for root in self.reader.paths:
            broker = _broker_name(root, self.options, self.many)
            with MessageStore(root, read_only=True) as store:
                queues = store.queues()
                wanted = _select_topics(self.options, sorted({t for t, _ in queues}))
                for (topic, qid), bounds in queues.items():
                    if topic in wanted and (wanted[topic] is None or qid in wanted[topic]):
                        out[(root, broker, topic, qid)] = bounds
        return out

    def _to_json(self, flat: dict) -> dict:
        offsets: dict = {}
        for (_root, broker, topic, qid), value in sorted(flat.items()):
            level = offsets.setdefault(topic, {})
            if self.many:
                level = level.setdefault(broker, {})
            level[str(qid)] = int(value)
        return {"v": OFFSETS_VERSION, "offsets": offsets}

    def _from_json(self, offsets: dict) -> dict:
        if offsets.get("v") != OFFSETS_VERSION:
            raise ValueError(f"rocketstore offsets of an unknown version: {offsets!r}")
        roots = {_broker_name(r, self.options, self.many): r for r in self.reader.paths}
        flat = {}
        for topic, level in offsets["offsets"].items():
            per_broker = level.items() if self.many else [(next(iter(roots)), level)]
            for broker, queues in per_broker:
                for qid, value in queues.items():
                    flat[(roots.get(broker, broker), broker, topic, int(qid))] = int(value)
        return flat

    def initialOffset(self) -> dict:
        bounds = self._bounds()
        spec = _offset_spec(self.options, "startingOffsets", "latest")
        start_ts = _parse_timestamp_option(self.options, "startingTimestamp")
        flat = {}
        for key, (lo, hi) in bounds.items():
            _root, broker, topic, qid = key
            value = _resolve(spec, topic, broker, qid, lo, hi, self.many)
            flat[key] = lo if value is None else value
        if start_ts is not None:            # wins over startingOffsets, as in Spark's Kafka source
            from rocketstore.store import MessageStore
            for root in self.reader.paths:
                with MessageStore(root, read_only=True) as store:
                    for key in flat:
                        if key[0] == root:
                            flat[key] = store.queue_offset_of_time(key[2], key[3], start_ts)
        return self._to_json(flat)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = {k: hi for k, (_lo, hi) in self._bounds().items()}

    def latestOffset(self, start=None, limit=None) -> dict:    # 4.0/4.1 call it with no arguments
        latest = self.target if self.target is not None else {k: hi for k, (_lo, hi) in self._bounds().items()}
        if start is None or not isinstance(limit, ReadMaxRows):
            return self._to_json(latest)
        begin = self._from_json(start)
        lags = {k: hi - begin.get(k, 0) for k, hi in latest.items() if hi > begin.get(k, 0)}
        total = sum(lags.values())
        budget = limit.max_rows
        if total <= budget:
            return self._to_json({**begin, **latest})
        # Each queue's floor share of the budget by lag, then the rows the floors left over one
        # by one to the largest remainders (ties: larger lag, then key order): exactly `budget`.
        takes = {k: lag * budget // total for k, lag in lags.items()}
        rest = budget - sum(takes.values())
        by_remainder = sorted(lags, key=lambda k: (-(lags[k] * budget % total), -lags[k], k))
        for k in by_remainder[:rest]:
            takes[k] += 1
        end = dict(begin)
        for k, take in takes.items():
            if take:
                end[k] = begin.get(k, 0) + take
        return self._to_json(end)

    def getDefaultReadLimit(self):
        if self.max_per_trigger:
            return ReadMaxRows(self.max_per_trigger)
        return super().getDefaultReadLimit()

    def partitions(self, start: dict, end: dict):
        begin, stop = self._from_json(start), self._from_json(end)
        bounds = self._bounds()
        parts = []
        for key, e in sorted(stop.items()):
            s = begin.get(key, bounds.get(key, (0, 0))[0])
            lo = bounds.get(key, (0, 0))[0]
            if s < lo:
                if self.fail_on_loss:
                    raise ValueError(f"{key[2]}-{key[3]} on {key[1]}: offset {s} is below the queue's first "
                                     f"kept offset {lo} (retention deleted it); set failOnDataLoss=false "
                                     "to skip ahead")
                s = lo
            if e > s:
                parts.append(QueueRange(key[0], key[1], key[2], key[3], s, e))
        return parts

    def read(self, partition):
        return read_queue_range(partition, self.reader.columns, self.reader.batch_rows)

    def commit(self, end: dict) -> None:
        pass        # the Spark checkpoint is the only record of progress


def read_queue_range(p: QueueRange, columns, batch_rows: int = DEFAULT_ARROW_BATCH_ROWS):
    """Yield ``pyarrow.RecordBatch`` es of ``columns`` for queue range ``p`` (plain Python: callable
    without Spark)."""
    import numpy as np
    from rocketstore.store import MessageStore
    with MessageStore(p.root, read_only=True) as store:
        q = p.start
        while q < p.end:
            units = store.queue_units(p.topic, p.queue_id, q, min(batch_rows, p.end - q))
            if not len(units):
                raise ValueError(f"{p.topic}-{p.queue_id}: no ConsumeQueue units at offset {q}")
            offsets = units["commitlog_offset"].astype(np.int64)
            sizes = units["size"].astype(np.int64)
            for _base, view, rows in store.records_at(offsets, sizes, queue=(p.topic, p.queue_id, q)):
                yield _record_batch(rows, view, columns, p.topic, p.broker)
            q += len(units)


def read_record_list(p: RecordList, columns, batch_rows: int = DEFAULT_ARROW_BATCH_ROWS):
    """Yield ``pyarrow.RecordBatch`` es of ``columns`` for exactly the records of ``p``."""
    import numpy as np
    from rocketstore.store import MessageStore
    offsets = np.asarray(p.offsets, dtype=np.int64)
    sizes = np.asarray(p.sizes, dtype=np.int64)
    with MessageStore(p.root, read_only=True) as store:
        for i in range(0, len(offsets), batch_rows):
            for _base, view, rows in store.records_at(offsets[i:i + batch_rows], sizes[i:i + batch_rows]):
                yield _record_batch(rows, view, columns, None, p.broker)


def read_commitlog_range(p: CommitLogRange, columns, batch_rows: int = DEFAULT_ARROW_BATCH_ROWS):
    """Yield ``pyarrow.RecordBatch`` es of ``columns`` for the records of CommitLog bytes
    [p.start, p.end) whose (topic, queueId, queueOffset) lies in one of ``p.ranges``: the
    segment is decoded whole (``MessageStore.scan``), and rows are picked without a Python
    step per record (topics matched by Arrow ``index_in``, ranges by a sorted-key search)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    from rocketstore.dispatch import consumable_rows
    from rocketstore.store import MessageStore
    topics = sorted({t for t, _q, _s, _e in p.ranges})
    topic_index = {t: i for i, t in enumerate(topics)}
    spans = sorted(((topic_index[t] << 32) | q, s, e) for t, q, s, e in p.ranges)
    keys = np.array([k for k, _s, _e in spans], dtype=np.int64)
    starts = np.array([s for _k, s, _e in spans], dtype=np.int64)
    ends = np.array([e for _k, _s, e in spans], dtype=np.int64)
    wanted = pa.array(topics, type=pa.string())
    with MessageStore(p.root, read_only=True) as store:
        for _base, view, rows in store.scan(p.start, p.end, views=True):
            rows = consumable_rows(rows)
            if not len(rows):
                continue
            names = _slices(view, rows["topic_pos"], rows["topic_len"], pa.string())
            which = pc.index_in(names, value_set=wanted).fill_null(-1).to_numpy().astype(np.int64)
            key = (which << 32) | rows["queue_id"].astype(np.int64)
            at = np.minimum(np.searchsorted(keys, key), len(keys) - 1)
            offset = rows["queue_offset"].astype(np.int64)
            keep = (which >= 0) & (keys[at] == key) & (offset >= starts[at]) & (offset < ends[at])
            if not keep.all():
                rows = rows[keep]
            for i in range(0, len(rows), batch_rows):
                yield _record_batch(rows[i:i + batch_rows], view, columns, None, p.broker)


# ---------------------------------------------------------------------------------------------
# Arrow columns from RECORD_DTYPE rows over one segment view

def _spans(buffer, starts, lengths):
    """A binary array over the zero-copy ``buffer`` of ``2n - 1`` elements: span ``i`` at
    ``2i``, the gap after it at ``2i + 1``. ``starts`` must be ascending and the spans must not
    overlap, as fields of consecutive records in one segment do."""
    import numpy as np
    import pyarrow as pa
    n = len(starts)
    starts = starts.astype(np.int64)
    ends = starts + lengths.astype(np.int64)
    first = int(starts[0])
    edges = np.empty(2 * n, dtype=np.int64)
    edges[0::2] = starts - first
    edges[1::2] = ends - first
    data = pa.py_buffer(buffer)[first:int(ends[-1])]
    return pa.Array.from_buffers(pa.binary(), 2 * n - 1, [None, pa.py_buffer(edges.astype(np.int32)), data])


def _slices(buffer, starts, lengths, kind, valid=None):
    """A binary/string array of ``buffer[starts[i]:starts[i]+lengths[i]]`` (null where ``valid``
    is False): :func:`_spans`, then one Arrow ``take`` of every other element."""
    import numpy as np
    import pyarrow as pa
    n = len(starts)
    if n == 0:
        return pa.array([], type=kind)
    picks = np.arange(0, 2 * n, 2, dtype=np.int32)
    values = _spans(buffer, starts, lengths).take(
        pa.array(picks, mask=None if valid is None else ~valid))
    return values if kind == pa.binary() else values.cast(kind)


def _constant_strings(value: str, n: int):
    import numpy as np
    import pyarrow as pa
    raw = value.encode("utf-8")
    offsets = (np.arange(n + 1, dtype=np.int32) * len(raw))
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


class _Properties:
    """The properties of a batch of records, from the codec's ``property_pieces`` (one compiled
    pass over the bytes, RocketMQ's lenient rule, duplicates kept): the ``properties`` map column
    and the value of one property per record (the last duplicate, as decode_properties keeps)."""

    def __init__(self, view, rows):
        import numpy as np
        from rocketstore import _impl
        self.view, self.rows = view, rows
        self.pieces, self.counts = _impl.DEFAULT.codec.property_pieces(view, rows)
        self.record = np.repeat(np.arange(len(rows)), self.counts)

    def map(self):
        import numpy as np
        import pyarrow as pa
        p, m = self.pieces, len(self.pieces)
        offsets = np.zeros(len(self.rows) + 1, dtype=np.int32)
        np.cumsum(self.counts, out=offsets[1:])
        if m == 0:
            empty = pa.array([], type=pa.string())
            return pa.MapArray.from_arrays(pa.array(offsets), empty, empty)
        starts = np.empty(2 * m, dtype=np.int64)
        lengths = np.empty(2 * m, dtype=np.int64)
        starts[0::2], starts[1::2] = p["name_pos"], p["value_pos"]
        lengths[0::2], lengths[1::2] = p["name_len"], p["value_len"]
        spans = _spans(self.view, starts, lengths)      # name, gap, value, gap, name, ...
        names = spans.take(pa.array(np.arange(0, 4 * m, 4, dtype=np.int32))).cast(pa.string())
        values = spans.take(pa.array(np.arange(2, 4 * m, 4, dtype=np.int32))).cast(pa.string())
        return pa.MapArray.from_arrays(pa.array(offsets), names, values)

    def value(self, name: str):
        """A string column: each record's last ``name`` property, null where it has none."""
        import numpy as np
        import pyarrow as pa
        raw = name.encode()
        p, n = self.pieces, len(self.rows)
        hit = np.nonzero(p["name_len"] == len(raw))[0]
        if len(hit):
            bytes_ = np.frombuffer(self.view, dtype=np.uint8)
            text = bytes_[p["name_pos"][hit, None] + np.arange(len(raw))]
            hit = hit[(text == np.frombuffer(raw, dtype=np.uint8)).all(axis=1)]
        last = np.full(n, -1, dtype=np.int64)
        if len(hit):
            owner = self.record[hit]
            final = np.ones(len(hit), dtype=bool)
            final[:-1] = owner[1:] != owner[:-1]          # pieces come in record order
            last[owner[final]] = hit[final]
        valid = last >= 0
        starts = np.where(valid, p["value_pos"][last] if len(p) else 0, self.rows["properties_pos"])
        lengths = np.where(valid, p["value_len"][last] if len(p) else 0, 0)
        return _slices(self.view, starts, lengths, pa.string(), valid)


_HEX = None


def _msg_ids(rows):
    """offsetMsgId per row: store host (4 bytes), port, CommitLog offset as upper-case hex."""
    import numpy as np
    import pyarrow as pa
    from rocketstore._codec_py import SYSFLAG_STOREHOST_V6, make_offset_msg_id
    global _HEX
    n = len(rows)
    if (rows["sys_flag"] & SYSFLAG_STOREHOST_V6).any():      # rare: per row
        return pa.array([make_offset_msg_id(bytes(r["store_host"])[:16 if r["sys_flag"] & SYSFLAG_STOREHOST_V6 else 4],
                                            int(r["store_port"]), int(r["physical_offset"])) for r in rows],
                        type=pa.string())
    if _HEX is None:
        _HEX = np.array([f"{i:02X}".encode() for i in range(256)], dtype="S2")
    raw = np.empty((n, 16), dtype=np.uint8)
    raw[:, :4] = np.ascontiguousarray(rows["store_host"]).view(np.uint8).reshape(n, 16)[:, :4]
    raw[:, 4:8] = np.ascontiguousarray(rows["store_port"], dtype=">i4").view(np.uint8).reshape(n, 4)
    raw[:, 8:] = np.ascontiguousarray(rows["physical_offset"], dtype=">i8").view(np.uint8).reshape(n, 8)
    text = np.ascontiguousarray(_HEX[raw]).tobytes()
    offsets = np.arange(n + 1, dtype=np.int32) * 32
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(text)])


def _hosts(rows, host_field: str, port_field: str, v6_flag: int):
    """``ip:port`` per row, formatted once per distinct (address, port): a structured
    ``np.unique`` sorts slowly, so IPv4 rows are keyed by one int64 (address << 32 | port)."""
    import numpy as np
    import pyarrow as pa
    from rocketstore.message import host_from_bytes
    n = len(rows)
    v6 = (rows["sys_flag"] & v6_flag) != 0
    if v6.any():
        texts = []
        for r, is_v6 in zip(rows, v6):
            raw = bytes(r[host_field]).ljust(16, b"\0")
            texts.append(f"[{host_from_bytes(raw)}]:{r[port_field]}" if is_v6
                         else f"{host_from_bytes(raw[:4])}:{r[port_field]}")
        return pa.array(texts, type=pa.string())
    address = np.ascontiguousarray(rows[host_field]).view(np.uint8).reshape(n, 16)[:, :4]
    key = (np.ascontiguousarray(address).view(">u4").reshape(n).astype(np.uint64) << np.uint64(32)) \
        | rows[port_field].astype(np.uint32).astype(np.uint64)
    unique, inverse = np.unique(key, return_inverse=True)
    texts = [f"{host_from_bytes((k >> 32).to_bytes(4, 'big'))}:{int(np.uint32(k & 0xFFFFFFFF).astype(np.int32))}"
             for k in unique.tolist()]
    return pa.array(texts, type=pa.string()).take(pa.array(inverse.reshape(-1).astype(np.int32)))


def _timestamps(ms):
    import numpy as np
    import pyarrow as pa
    return pa.array(ms.astype(np.int64) * 1000, type=pa.timestamp("us", tz="UTC"))


def _record_batch(rows, view, columns, topic: Optional[str], broker: str):
    """One RecordBatch of ``columns`` for ``rows`` (RECORD_DTYPE over ``view``)."""
    import numpy as np
    import pyarrow as pa
    from rocketstore._codec_py import SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6
    n = len(rows)
    props = None

    def properties():
        nonlocal props
        if props is None:
            props = _Properties(view, rows)
        return props

    build = {
        "topic": lambda: (_constant_strings(topic, n) if topic is not None
                          else _slices(view, rows["topic_pos"], rows["topic_len"], pa.string())),
        "queueId": lambda: pa.array(rows["queue_id"].astype(np.int32)),
        "queueOffset": lambda: pa.array(rows["queue_offset"].astype(np.int64)),
        "commitLogOffset": lambda: pa.array(rows["physical_offset"].astype(np.int64)),
        "brokerName": lambda: _constant_strings(broker, n),
        "body": lambda: _slices(view, rows["body_pos"], rows["body_len"], pa.binary()),
        "tags": lambda: properties().value("TAGS"),
        "keys": lambda: properties().value("KEYS"),
        "properties": lambda: properties().map(),
        "msgId": lambda: _msg_ids(rows),
        "flag": lambda: pa.array(rows["flag"].astype(np.int32)),
        "sysFlag": lambda: pa.array(rows["sys_flag"].astype(np.int32)),
        "reconsumeTimes": lambda: pa.array(rows["reconsume_times"].astype(np.int32)),
        "bornTimestamp": lambda: _timestamps(rows["born_timestamp"]),
        "storeTimestamp": lambda: _timestamps(rows["store_timestamp"]),
        "bornHost": lambda: _hosts(rows, "born_host", "born_port", SYSFLAG_BORNHOST_V6),
        "storeHost": lambda: _hosts(rows, "store_host", "store_port", SYSFLAG_STOREHOST_V6),
    }
    return pa.RecordBatch.from_arrays([build[c]() for c in columns], schema=arrow_schema(columns))


# ---------------------------------------------------------------------------------------------
# Batch write: tasks stage Arrow IPC files, the driver appends them under the store's lock

@dataclass
class StagedPart(WriterCommitMessage):
    path: str
    rows: int
    partition_id: int


#: A sink's staging directory is a uuid4 hex: only such directories are ever deleted as stale.
_STAGING_NAME = re.compile(r"[0-9a-f]{32}")
DEFAULT_STAGING_RETENTION_MINUTES = 24 * 60

_WRITE_COLUMNS = ("topic", "body", "tags", "keys", "properties", "queueId", "flag")


class _StagingSink:
    """What the batch and the streaming sink share: the checked options, the job's staging
    directory, and appending the staged parts to an open store in partition order."""

    def __init__(self, options, columns):
        import uuid
        self.path = _store_paths(options)[0]
        self.topic = options.get("topic")
        if "body" not in columns:
            raise ValueError("writing to rocketstore needs a body column (binary or string)")
        if self.topic is None and "topic" not in columns:
            raise ValueError("writing to rocketstore needs a topic column or the topic option")
        self.staging_root = options.get("staging") or os.path.join(self.path, ".spark-staging")
        self.staging = os.path.join(self.staging_root, uuid.uuid4().hex)
        minutes = _int_option(options, "stagingRetentionMinutes", DEFAULT_STAGING_RETENTION_MINUTES)
        self.staging_retention_s = 60 * minutes

    def _append_parts(self, store, messages, skip: int = 0) -> None:
        """Append the staged parts in partition order, leaving out their first ``skip`` rows."""
        parts = sorted((m for m in messages if m is not None and m.path), key=lambda m: m.partition_id)
        for part in parts:
            if skip >= part.rows:
                skip -= part.rows
                continue
            _append_part(store, part.path, self.topic, skip)
            skip = 0
        store.flush()

    def _remove_stale_staging(self) -> list:
        """Delete the staging directories of other jobs that nothing has written to for
        ``stagingRetentionMinutes`` (a crashed driver's leftovers; a job still running writes
        its parts, so its newest file stays younger). Returns the directories deleted."""
        import shutil
        import time
        cutoff = time.time() - self.staging_retention_s
        removed = []
        try:
            entries = list(os.scandir(self.staging_root))
        except FileNotFoundError:
            return removed
        for entry in entries:
            if (entry.path == self.staging or not _STAGING_NAME.fullmatch(entry.name)
                    or not entry.is_dir(follow_symlinks=False)):
                continue
            try:
                newest = max([entry.stat(follow_symlinks=False).st_mtime]
                             + [f.stat(follow_symlinks=False).st_mtime for f in os.scandir(entry.path)])
            except FileNotFoundError:
                continue                    # its own job finished meanwhile
            if newest < cutoff:
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.path)
        return removed


class RocketStoreWriter(_StagingSink, DataSourceArrowWriter):
    """``df.write.format("rocketstore").mode("append").save(path)``.

    Input columns: ``body`` (binary or string, required), ``topic`` (unless the ``topic`` option
    is set; the option wins), optional ``tags``, ``keys``, ``properties`` (map), ``queueId``,
    ``flag``; other columns are ignored. Each task writes its rows to an Arrow IPC file under
    ``<store>/.spark-staging/<job>`` (option ``staging``: another root); the driver's commit
    opens the store (taking its single-writer lock) and appends every part in partition order,
    so a failed job writes nothing. ``abort`` deletes the staged files. A commit also deletes
    the staging directories of other jobs untouched for ``stagingRetentionMinutes`` (default
    1440): what a driver that crashed before its commit or abort left behind. The sink does this
    rather than the store's open, because the store knows nothing of Spark jobs.
    """

    def write(self, iterator):
        return _stage(self.staging, iterator)

    def commit(self, messages):
        from rocketstore.store import MessageStore
        try:
            with MessageStore(self.path) as store:
                self._append_parts(store, messages)
        finally:
            self._clean(messages)
        self._remove_stale_staging()

    def abort(self, messages):
        self._clean(messages)

    def _clean(self, messages):
        import shutil
        shutil.rmtree(self.staging, ignore_errors=True)


def _stage(staging: str, iterator) -> StagedPart:
    """Write one task's Arrow batches to an Arrow IPC file under ``staging``."""
    import uuid
    import pyarrow as pa
    from pyspark import TaskContext
    ctx = TaskContext.get()
    partition_id = ctx.partitionId() if ctx is not None else 0
    os.makedirs(staging, exist_ok=True)
    path = os.path.join(staging, f"part-{partition_id:05d}-{uuid.uuid4().hex}.arrow")
    rows = 0
    writer = None
    try:
        for batch in iterator:
            keep = [c for c in _WRITE_COLUMNS if c in batch.schema.names]
            batch = batch.select(keep)
            if writer is None:
                writer = pa.ipc.new_stream(path, batch.schema)
            writer.write_batch(batch)
            rows += batch.num_rows
    finally:
        if writer is not None:
            writer.close()
    return StagedPart(path if writer is not None else "", rows, partition_id)


def _rows_to_batches(rows, batch_rows: int = 8192):
    """4.0's row-based stream writer: ``Row`` objects -> Arrow batches of the write columns."""
    import pyarrow as pa
    chunk = []
    for row in rows:
        chunk.append(row.asDict())
        if len(chunk) >= batch_rows:
            yield pa.RecordBatch.from_pylist(chunk)
            chunk = []
    if chunk:
        yield pa.RecordBatch.from_pylist(chunk)


# ---------------------------------------------------------------------------------------------
# Streaming write: the batch sink's staging, plus the last committed batch id kept in the store

SINK_COMMITS_FILE = "sparkSinkCommits.json"


def _sink_commits_path(root: str) -> str:
    return os.path.join(root, "config", SINK_COMMITS_FILE)


def read_sink_commits(root: str) -> dict:
    """``{sinkId: lastCommittedBatchId}`` of the streaming sinks that wrote into the store at ``root``."""
    return _read_sink_state(root)[0]


def _read_sink_state(root: str) -> tuple[dict, dict]:
    """(``{sinkId: last batch id}``, ``{sinkId: {"batch", "start", "rows"}}`` of the appends
    begun and not yet recorded as done)."""
    try:
        with open(_sink_commits_path(root), encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}, {}
    if data.get("v") != 1:
        raise ValueError(f"{_sink_commits_path(root)}: unknown version {data.get('v')!r}")
    return ({str(k): int(v) for k, v in data["sinks"].items()},
            {str(k): {n: int(x) for n, x in v.items()} for k, v in data.get("pending", {}).items()})


def _write_sink_commits(root: str, commits: dict, pending: Optional[dict] = None) -> None:
    """Replace the file whole (:func:`rocketstore._files.replace_file`)."""
    state = {"v": 1, "sinks": commits}
    if pending:
        state["pending"] = pending
    replace_file(_sink_commits_path(root), json.dumps(state, indent=1, sort_keys=True).encode("utf-8"))


class RocketStoreStreamWriter(_StagingSink, _StreamWriterBase):
    """``df.writeStream.format("rocketstore").option("checkpointLocation", ck).start(path)``.

    Same input columns and staging as the batch sink. ``commit(messages, batchId)`` runs on the
    driver under the store's single-writer lock: a batch id at or below the one recorded for this
    sink in ``<store>/config/sparkSinkCommits.json`` is a replay (Spark re-runs a micro-batch
    whose commit it did not log) and is dropped; otherwise the parts are appended, flushed, and
    the batch id recorded (file replaced atomically). The sink id is the option ``sinkId``, else
    the ``checkpointLocation``, else ``queryName``.

    Before appending, the same file records the batch as pending with the CommitLog end offset
    and its row count. A crash before the batch id is recorded leaves that entry; when Spark
    replays the batch, the records stored since that offset are the ones that landed, and only
    the rows after them are appended, so the batch is stored exactly once. This assumes that
    (a) the replay stages the same rows in the same partition order (Spark replays a micro-batch
    from the same offsets; a deterministic query gives the same rows) and (b) nothing else
    wrote to the store between the crash and the replay: more records than the batch has
    raise rather than guess.
    """

    def __init__(self, options, columns):
        super().__init__(options, columns)
        self.sink_id = (options.get("sinkid") or options.get("checkpointlocation")
                        or options.get("queryname") or "default")

    def write(self, iterator):
        return _stage(self.staging, iterator if _STREAM_ARROW else _rows_to_batches(iterator))

    def commit(self, messages, batchId) -> None:
        from rocketstore.store import MessageStore
        try:
            with MessageStore(self.path) as store:
                commits, pending = _read_sink_state(self.path)
                last = commits.get(self.sink_id)
                if last is not None and batchId <= last:
                    return                          # a replayed micro-batch: written already
                rows = sum(m.rows for m in messages if m is not None and m.path)
                begun = pending.get(self.sink_id)
                landed = 0
                if begun is not None and begun["batch"] == batchId:
                    # this batch's append was begun and its end not recorded: a crash
                    landed = sum(len(records) for _base, records in store.scan(begun["start"]))
                    if landed > begun["rows"] or begun["rows"] != rows:
                        raise RuntimeError(
                            f"streaming sink {self.sink_id!r}: batch {batchId} was begun at CommitLog "
                            f"offset {begun['start']} with {begun['rows']} rows; the replay has {rows} "
                            f"and {landed} records follow that offset, so what landed cannot be told")
                else:
                    pending[self.sink_id] = {"batch": int(batchId), "start": store.max_offset, "rows": rows}
                    _write_sink_commits(self.path, commits, pending)
                self._append_parts(store, messages, skip=landed)
                commits[self.sink_id] = int(batchId)
                pending.pop(self.sink_id, None)
                _write_sink_commits(self.path, commits, pending)
        finally:
            _remove_parts(self.staging, messages)
        self._remove_stale_staging()

    def abort(self, messages, batchId) -> None:
        _remove_parts(self.staging, messages)


def _remove_parts(staging: str, messages) -> None:
    for m in messages or ():
        if m is not None and m.path:
            try:
                os.remove(m.path)
            except FileNotFoundError:
                pass
    try:
        os.rmdir(staging)
    except OSError:
        pass


_PER_ROW_COLUMNS = ("tags", "keys", "properties", "flag")
#: Rows without a queueId go to the store's round-robin queue in runs of this many (one
#: put_batch each), not row by row.
FAST_RUN_ROWS = 4096


def _bodies_only(batch) -> bool:
    """True when no row carries tags, keys, properties or a flag (then put_batch can store it)."""
    for name in _PER_ROW_COLUMNS:
        if name in batch.schema.names and batch.column(name).null_count != batch.num_rows:
            return False
    return True


def _put_runs(store, batch, topic_option: Optional[str]) -> None:
    """One ``put_batch`` per run of rows with the same (topic, queueId), the bodies handed over
    as one buffer and their lengths: no Python object per row."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    n = batch.num_rows
    bodies = batch.column("body")
    if bodies.null_count:
        raise ValueError("a row to write has a null body")
    if not pa.types.is_binary(bodies.type):
        bodies = bodies.cast(pa.binary())
    cuts = {0, n}
    if topic_option:
        topics = None
    else:
        topics = batch.column("topic")
        if topics.null_count:
            raise ValueError("a row to write has a null topic")
        change = np.flatnonzero(pc.not_equal(topics[1:], topics[:-1]).to_numpy(zero_copy_only=False))
        cuts.update((change + 1).tolist())
    qids = None
    if "queueId" in batch.schema.names and batch.column("queueId").null_count != n:
        qids = batch.column("queueId").fill_null(-1).to_numpy().astype(np.int64)
        cuts.update((np.flatnonzero(qids[1:] != qids[:-1]) + 1).tolist())
    bounds = sorted(cuts)
    offsets = np.frombuffer(bodies.buffers()[1], dtype=np.int32)[bodies.offset:bodies.offset + n + 1]
    data = memoryview(bodies.buffers()[2]) if bodies.buffers()[2] is not None else memoryview(b"")
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        topic = topic_option or topics[lo].as_py()
        queue_id = -1 if qids is None else int(qids[lo])
        step = hi - lo if queue_id >= 0 else FAST_RUN_ROWS
        for a in range(lo, hi, step):
            b = min(hi, a + step)
            lengths = np.diff(offsets[a:b + 1])
            store.put_batch(topic, data[int(offsets[a]):int(offsets[b])], lengths=lengths,
                            queue_id=queue_id)


def _append_part(store, path: str, topic_option: Optional[str], skip: int = 0) -> int:
    """Append one staged Arrow IPC file to ``store``, but for its first ``skip`` rows; returns
    the rows written. Batches whose rows carry only topic, body and queueId go through
    ``put_batch`` per (topic, queue) run; others through ``put_messages``, a ``Message`` per row."""
    import pyarrow as pa
    from rocketstore.message import Message
    written = 0
    with pa.memory_map(path) as source:
        reader = pa.ipc.open_stream(source)
        for batch in reader:
            if skip:
                cut = min(skip, batch.num_rows)
                batch, skip = batch.slice(cut), skip - cut
                if not batch.num_rows:
                    continue
            if batch.num_rows and _bodies_only(batch):
                _put_runs(store, batch, topic_option)
                written += batch.num_rows
                continue
            data = batch.to_pydict()
            n = batch.num_rows
            topics = [topic_option] * n if topic_option else data["topic"]
            bodies = data["body"]
            tags = data.get("tags", [None] * n)
            keys = data.get("keys", [None] * n)
            props = data.get("properties", [None] * n)
            qids = data.get("queueId", [None] * n)
            flags = data.get("flag", [None] * n)
            messages = []
            for i in range(n):
                body = bodies[i]
                if body is None:
                    raise ValueError("a row to write has a null body")
                if isinstance(body, str):
                    body = body.encode("utf-8")
                p = props[i]
                messages.append(Message(
                    topics[i], body, tags=tags[i], keys=keys[i],
                    properties=(dict(p) if p else None),
                    queue_id=-1 if qids[i] is None else int(qids[i]),
                    flag=0 if flags[i] is None else int(flags[i])))
            if messages:
                store.put_messages(messages)
            written += n
    return written
