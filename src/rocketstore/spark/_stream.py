"""The streaming reader: offsets per queue, admission control, Trigger.AvailableNow."""

from __future__ import annotations

from rocketstore.spark._arrow import read_queue_range
from rocketstore.spark._options import (
    Bounds,
    _bool_option,
    _broker_name,
    _duration_option,
    _int_option,
    _select_topics,
)
from rocketstore.spark._partitions import QueueRange
from rocketstore.spark._pyspark import (
    _ADMISSION_CONTROL,
    DataSourceStreamReader,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from rocketstore.spark._reader import RocketStoreReader

OFFSETS_VERSION = 1


class RocketStoreStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader. Offsets (the checkpoint keeps them verbatim, so the shape is a
    format): ``{"v": 1, "offsets": {topic: {queueId: nextOffset}}}`` for one store,
    ``{topic: {brokerName: {queueId: nextOffset}}}`` inside ``offsets`` for several; queue ids
    are strings (JSON keys), ends exclusive. New queues start at their earliest offset.
    ``startingOffsets`` (default ``latest``) applies to a new query only; a restart resumes from
    the checkpoint. ``maxOffsetsPerTrigger`` (4.2+) splits the rows across queues by lag.
    ``minOffsetsPerTrigger`` (4.2+) holds a trigger back while fewer rows wait, until
    ``maxTriggerDelay`` (default 15m) has passed since the last trigger that ran, as Kafka's
    source does (Trigger.AvailableNow ignores it; the first trigger of a run is never held).
    """

    def __init__(self, columns, options):
        import time

        self.reader = RocketStoreReader(columns, options)
        self.options = options
        self.many = len(self.reader.paths) > 1
        self.max_per_trigger = _int_option(options, "maxOffsetsPerTrigger", None)
        self.min_per_trigger = _int_option(options, "minOffsetsPerTrigger", None)
        self.max_delay_s = _duration_option(options, "maxTriggerDelay", "15m")
        if self.min_per_trigger and not _ADMISSION_CONTROL:
            raise ValueError("option minOffsetsPerTrigger needs PySpark 4.2 or later (admission control)")
        self.fail_on_loss = _bool_option(options, "failOnDataLoss", True)
        self.group = options.get("groupid")
        self.target = None
        self.clock = time.monotonic
        self.last_trigger = None

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
        from rocketstore.store import MessageStore

        bounds = self._bounds()
        starting = Bounds(self.options, end=False, default="latest")
        flat = {}
        for root in self.reader.paths:
            with MessageStore(root, read_only=True) as store:
                for key, (lo, hi) in bounds.items():
                    if key[0] == root:
                        flat[key] = starting.of(store, key[2], key[1], key[3], lo, hi, self.many)
        return self._to_json(flat)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._bounds()

    def _hold(self, waiting: int) -> bool:
        """minOffsetsPerTrigger: True to skip this trigger (fewer rows wait and the last trigger
        that ran is younger than maxTriggerDelay); Kafka's ``delayBatch``."""
        if not self.min_per_trigger or self.target is not None:
            return False
        now = self.clock()
        recent = self.last_trigger is not None and now - self.last_trigger < self.max_delay_s
        if recent and waiting < self.min_per_trigger:
            return True
        self.last_trigger = now
        return False

    def latestOffset(self, start=None, limit=None) -> dict:  # 4.0/4.1 call it with no arguments
        bounds = self.target if self.target is not None else self._bounds()
        latest = {k: hi for k, (_lo, hi) in bounds.items()}
        if start is None:
            return self._to_json(latest)
        begin = self._from_json(start)
        # a queue the start does not hold is new to the query: it starts at its earliest offset
        first = {k: begin.get(k, lo) for k, (lo, _hi) in bounds.items()}
        lags = {k: hi - first[k] for k, hi in latest.items() if hi > first[k]}
        total = sum(lags.values())
        if self._hold(total):
            return start
        if not isinstance(limit, ReadMaxRows):
            return self._to_json(latest)
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
                end[k] = first[k] + take
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
                    raise ValueError(
                        f"{key[2]}-{key[3]} on {key[1]}: offset {s} is below the queue's first "
                        f"kept offset {lo} (retention deleted it); set failOnDataLoss=false "
                        "to skip ahead"
                    )
                s = lo
            if e > s:
                parts.append(QueueRange(key[0], key[1], key[2], key[3], s, e))
        return parts

    def read(self, partition):
        return read_queue_range(partition, self.reader.columns, self.reader.batch_rows)

    def commit(self, end: dict) -> None:
        """With option ``groupId``: record ``end`` as the group's consumer offsets in each store
        (``consumerOffset.json``, written now), so the CLI, stats and a broker see the query's
        lag and retention by consumption waits for it. Spark calls this for a batch when it
        plans the next one, so the group trails the query by a batch and never runs ahead of
        the sink. The Spark checkpoint stays the record a restart resumes from: these offsets
        only report it."""
        if not self.group:
            return
        from rocketstore.store import MessageStore

        flat = self._from_json(end)
        for root in self.reader.paths:
            with MessageStore(root) as store:  # the writer, or joined to the process that is
                for (at, _broker, topic, queue_id), offset in sorted(flat.items()):
                    if at == root:
                        store.commit_offset(self.group, topic, queue_id, offset)
                store.persist_offsets()
