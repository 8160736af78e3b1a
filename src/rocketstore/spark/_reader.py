"""The batch data source and reader (runs in the planner on the driver host)."""

from __future__ import annotations

from collections.abc import Iterator

from rocketstore.spark._arrow import read_commitlog_range, read_queue_range, read_record_list
from rocketstore.spark._options import (
    _COLUMN_NAMES,
    DEFAULT_ARROW_BATCH_ROWS,
    DEFAULT_MAX_RECORDS_PER_PARTITION,
    SCHEMA_DDL,
    _bool_option,
    _broker_name,
    _int_option,
    _offset_spec,
    _parse_timestamp_option,
    _resolve,
    _select_topics,
    _store_paths,
)
from rocketstore.spark._partitions import (
    CommitLogRange,
    QueueRange,
    RecordList,
    _commitlog_ranges,
    _record_lists,
)
from rocketstore.spark._pushdown import _Pushed, push_filter
from rocketstore.spark._pyspark import (
    DataSourceReader,
)


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
        return push_filter(f, self.pushed)

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
                        "set failOnDataLoss=false to start at the first kept offset"
                    )
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
        return parts  # a list: Spark refuses a tuple or generator

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
        return iter(())  # Spark's InputPartition(None) when nothing matched


class RocketStorePushdownReader(RocketStoreReader):
    """The batch reader with ``pushFilters`` (4.1+). Spark refuses to plan a reader that
    overrides it while ``spark.sql.python.filterPushdown.enabled`` is false, so option
    ``pushFilters=false`` (or 4.0) gives the plain reader, and Spark filters after the read."""

    def pushFilters(self, filters):
        return self._push_filters(filters)
