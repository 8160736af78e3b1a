"""Clock helpers shared by both twins: epoch milliseconds and the local month bounds of UNIQ_KEY."""

import datetime
import time

__all__ = ["now_ms", "month_bounds", "month_start"]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def month_bounds(at_ms: int) -> tuple[int, int]:
    """(start of the month containing ``at_ms``, start of the next month), local time, epoch ms.

    UNIQ_KEY stores milliseconds since the start of the producer's current month (spec §3.2).
    """
    local = datetime.datetime.fromtimestamp(at_ms / 1000).astimezone()
    start = local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    following = (start + datetime.timedelta(days=32)).replace(day=1)
    # replace() kept the original UTC offset: re-resolve each wall time in the local zone (DST).
    start_ms = int(start.replace(tzinfo=None).astimezone().timestamp() * 1000)
    next_ms = int(following.replace(tzinfo=None).astimezone().timestamp() * 1000)
    return start_ms, next_ms


_month = (0, -1)  # (start, next) of the month month_start last looked up


def month_start(at_ms: int) -> int:
    """The start of the local month containing ``at_ms`` (:func:`month_bounds`, remembered for
    the month: a UNIQ_KEY lookup asks for each key, and the time zone lookup costs µs)."""
    global _month
    start, following = _month
    if not start <= at_ms < following:
        start, following = _month = month_bounds(at_ms)
    return start
