"""The one description of a store: what ``MessageStore.stats()`` returns and ``rocketstore stats``
prints (its ``--json`` is this document), so a key means one thing in both."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Protocol

from rocketstore.services.schedule import dlq_counts

__all__ = ["describe", "disk_usage"]


class _Offsets(Protocol):
    def groups(self) -> list[str]: ...

    def query_all(self, group: str, topic: str) -> dict[int, int]: ...


def disk_usage(path: str) -> int:
    """Bytes the files under ``path`` take on disk (allocated blocks; sizes where no blocks are told)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            total += getattr(st, "st_blocks", 0) * 512 or st.st_size
    return total


def describe(
    *,
    path: str,
    counters: Mapping[str, Any],
    last_shutdown_clean: bool,
    queues: Mapping[tuple[str, int], tuple[int, int]],
    topics: Mapping[str, int],
    offsets: _Offsets,
    delayed: Mapping[int, int],
    retention: Mapping[str, Any],
) -> dict[str, Any]:
    """The document: the CommitLog's extent, each topic and its queues, each consumer group's lag
    per queue, delayed messages per level, dead letters per group, the retention report, then
    ``counters`` (the store's runtime counters: ``implementation``, ``writer``, flushes, puts, ...)."""
    by_topic: dict[str, dict[str, Any]] = {}
    for (topic, qid), (lo, hi) in sorted(queues.items()):
        entry = by_topic.setdefault(topic, {"messages": 0, "queues": []})
        entry["queues"].append({"queue_id": qid, "min_offset": lo, "max_offset": hi, "messages": hi - lo})
        entry["messages"] += hi - lo
    for topic in topics:
        by_topic.setdefault(topic, {"messages": 0, "queues": []})
    groups: dict[str, Any] = {}
    for group in offsets.groups():
        rows = []
        for topic in sorted(by_topic):
            for qid, committed in sorted(offsets.query_all(group, topic).items()):
                lo, hi = queues.get((topic, qid), (0, 0))
                rows.append(
                    {
                        "topic": topic,
                        "queue_id": qid,
                        "committed": committed,
                        "max_offset": hi,
                        "lag": max(0, hi - max(committed, lo)),
                    }
                )
        groups[group] = {"lag": sum(r["lag"] for r in rows), "queues": rows}
    out: dict[str, Any] = {
        "store": path,
        "implementation": counters["implementation"],
        "last_shutdown_clean": last_shutdown_clean,
        "segments": counters["segments"],
        "segment_size": counters["segment_size"],
        "min_offset": counters["min_offset"],
        "max_offset": counters["max_offset"],
        "bytes": counters["max_offset"] - counters["min_offset"],
        "disk_bytes": disk_usage(path),
        "messages": sum(t["messages"] for t in by_topic.values()),
        "topics": dict(sorted(by_topic.items())),
        "groups": groups,
        "delayed": {str(level): n for level, n in delayed.items()},
        "dead_letters": dlq_counts(queues),
        "retention": dict(retention),
    }
    for key, value in counters.items():
        out.setdefault(key, value)
    return out
