"""``timer_stats()``: what a store's timers are doing, from its TimerService when it runs one,
else (a read-only store) from ``config/timerProgress`` and the timer queue; with what a
RocketMQ 5.x broker's own timer files (rocketstore.queues.timerwheel) say is pending, when it
left some."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any, Optional

from rocketstore.message import MessageExt
from rocketstore.queues.timerwheel import read_timer_check, rocketmq_timers
from rocketstore.services.timer import TimerProgress, TimerService

__all__ = ["timer_stats"]


def timer_stats(
    root: str | os.PathLike[str],
    service: Optional[TimerService],
    read: Callable[[int], MessageExt],
    records: Callable[[int], Iterator[MessageExt]],
) -> dict[str, Any]:
    """The timer statistics of the store at ``root``: ``service``'s (a writable store's), or
    those :func:`read_only_timer_stats` finds; plus ``"rocketmq"``, the timers a 5.x broker
    left, when it has a ``config/timercheck``. ``read(commitlog_offset)`` reads a record;
    ``records(start)`` yields the timer queue's records from queue offset ``start`` on."""
    check = read_timer_check(root)
    wheel = None if check is None else rocketmq_timers(root, read, records(check.queue_offset))
    stats: dict[str, Any] = (
        service.stats() if service is not None else read_only_timer_stats(root, wheel, records)
    )
    if wheel is not None:
        stats["rocketmq"] = wheel
    return stats


def read_only_timer_stats(
    root: str | os.PathLike[str],
    wheel: Optional[dict[str, Any]],
    records: Callable[[int], Iterator[MessageExt]],
) -> dict[str, Any]:
    """timer_stats() of a read-only store: the timers waiting, as rocketstore's progress file
    (or, before rocketstore ran the timers, a 5.x broker's files: ``wheel``) says; the counters
    are those of a writable store's service, none here."""
    progress = TimerProgress.in_store(os.fspath(root), read_only=True)
    stats: dict[str, Any] = {
        "pending": 0,
        "next_deliver_ms": None,
        "delivered": 0,
        "dropped": 0,
        "reconciled": 0,
        "resumed": 0,
    }
    untouched = progress.enqueue_offset == 0 and progress.intent is None and progress.first_pending == 0
    if wheel is not None and untouched and progress.watermark[0] < 0:
        deliver = [p["deliver_ms"] for p in wheel["pending"]]
    else:
        deliver = []
        for msg in records(progress.first_pending):
            try:
                due = int((msg.properties or {}).get("TIMER_OUT_MS", "0"))
            except ValueError:
                due = 0
            if msg.queue_offset >= progress.enqueue_offset or (due, msg.queue_offset) > progress.watermark:
                deliver.append(due)
    stats["pending"] = len(deliver)
    stats["next_deliver_ms"] = min(deliver) if deliver else None
    return stats
