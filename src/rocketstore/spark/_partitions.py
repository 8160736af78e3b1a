"""The read's partitions: queue ranges and CommitLog segments."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from rocketstore.spark._pyspark import InputPartition

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


def _commitlog_ranges(store, root: str, broker: str, ranges) -> list:
    """One CommitLogRange per segment between the first and the last record the ranges hold."""
    lo_phys: Optional[int] = None
    hi_phys: Optional[int] = None
    for r in ranges:
        first = store.queue_units(r.topic, r.queue_id, r.start, 1)
        last = store.queue_units(r.topic, r.queue_id, r.end - 1, 1)
        a = int(first["commitlog_offset"][0])
        b = int(last["commitlog_offset"][0]) + int(last["size"][0])
        lo_phys = a if lo_phys is None else min(lo_phys, a)
        hi_phys = b if hi_phys is None else max(hi_phys, b)
    if lo_phys is None or hi_phys is None:
        return []
    keep = tuple((r.topic, r.queue_id, r.start, r.end) for r in ranges)
    size = store.config.commitlog_file_size
    return [
        CommitLogRange(root, broker, max(lo_phys, base), min(hi_phys, base + size), keep)
        for base in range(lo_phys // size * size, hi_phys, size)
    ]
