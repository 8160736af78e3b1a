"""The batch data source and reader (runs in the planner on the driver host)."""

from __future__ import annotations

from collections.abc import Iterator

from rocketstore.spark._arrow import read_commitlog_range, read_queue_range
from rocketstore.spark._options import (
    _ALL_KINDS,
    DEFAULT_ARROW_BATCH_ROWS,
    DEFAULT_MAX_RECORDS_PER_PARTITION,
    Bounds,
    _bool_option,
    _broker_name,
    _int_option,
    _select_topics,
    _store_paths,
    schema_ddl,
)
from rocketstore.spark._partitions import CommitLogRange, QueueRange, _commitlog_ranges
from rocketstore.spark._pyspark import DataSourceReader


class RocketStoreReader(DataSourceReader):
    """Batch reader. Partitions are queue offset ranges (split by maxRecordsPerPartition) or
    CommitLog segment scans (``scan``).

    It does not override ``pushFilters``: Spark 4.1-4.3 keep the read plan a pushdown makes on
    the data source object every query of a DataFrame shares, and reuse it for a later query of
    that DataFrame that has no filter of its own, so pushed filters would leak into it. Spark
    filters after the read; options (``subscribe``, ``assign``, offsets, timestamps) narrow it."""

    def __init__(self, columns, options):
        unknown = [c for c in columns if c not in _ALL_KINDS]
        if unknown:
            raise ValueError(f"rocketstore has no column(s) {unknown}; its schema is: {schema_ddl(options)}")
        self.columns = list(columns)
        self.options = options
        self.paths = _store_paths(options)
        self.batch_rows = _int_option(options, "arrowBatchRows", DEFAULT_ARROW_BATCH_ROWS)
        self.scan = options.get("scan", "auto").strip().lower()
        if self.scan not in ("auto", "queue", "commitlog"):
            raise ValueError(f"option scan must be auto, queue or commitlog, not {self.scan!r}")

    # ---- planning ----

    def _queue_ranges(self, store, root: str, broker: str, many: bool) -> list:
        """The QueueRange (unsplit) of every selected queue of one open store: options, then
        the timestamps (:class:`Bounds`)."""
        options = self.options
        starting = Bounds(options, end=False, default="earliest")
        ending = Bounds(options, end=True, default="latest")
        fail_on_loss = _bool_option(options, "failOnDataLoss", True)
        queues = store.queues()
        wanted = _select_topics(options, sorted({t for t, _ in queues}))
        ranges = []
        for (topic, queue_id), (lo, hi) in sorted(queues.items()):
            if topic not in wanted or (wanted[topic] is not None and queue_id not in wanted[topic]):
                continue
            start = starting.of(store, topic, broker, queue_id, lo, hi, many)
            end = min(ending.of(store, topic, broker, queue_id, lo, hi, many), hi)
            if start < lo:
                if fail_on_loss:
                    raise ValueError(
                        f"{topic}-{queue_id} on {broker}: starting offset {start} is below the "
                        f"queue's first kept offset {lo} (retention deleted it); "
                        "set failOnDataLoss=false to start at the first kept offset"
                    )
                start = lo
            if end > start:
                ranges.append(QueueRange(root, broker, topic, queue_id, start, end))
        return ranges

    def partitions(self):
        from rocketstore.store import MessageStore

        options = self.options
        max_rows = _int_option(options, "maxRecordsPerPartition", DEFAULT_MAX_RECORDS_PER_PARTITION)
        min_parts = _int_option(options, "minPartitions", None)
        many = len(self.paths) > 1
        ranges, scans = [], []
        for root in self.paths:
            broker = _broker_name(root, options, many)
            with MessageStore(root, read_only=True) as store:
                store_ranges = self._queue_ranges(store, root, broker, many)
                if self._scan_commitlog(store, store_ranges, min_parts, max_rows):
                    scans.extend(_commitlog_ranges(store, root, broker, store_ranges))
                else:
                    ranges.extend(store_ranges)
        total = sum(r.end - r.start for r in ranges)
        if min_parts and total:
            max_rows = min(max_rows, max(1, -(-total // max(1, min_parts - len(scans)))))
        parts = scans
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
        if isinstance(partition, QueueRange):
            return read_queue_range(partition, self.columns, self.batch_rows)
        return iter(())  # Spark's InputPartition(None) when nothing matched
