"""Filter pushdown (PySpark 4.1+): what a pushed filter narrows, and how."""

from __future__ import annotations

from rocketstore.spark._options import _NEVER_NULL, _epoch_us, _intersect, _is_int
from rocketstore.spark._pyspark import (
    _PUSHABLE,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
)


class _Pushed:
    """What pushFilters() accepted, as plain data (the reader is pickled to the executors).

    Topic and queue constraints select whole queues and queue offsets narrow their ranges, so
    every partition kind applies them exactly. Store times narrow ranges by binary search only
    (the filter goes back to Spark). ``keys``/``msgId`` become exact record lists."""

    def __init__(self):
        self.topics = None  # set of names, or None: any
        self.prefixes = []  # topic must start with each
        self.queue_ids = None  # set, or None: any
        self.queue_lo, self.queue_hi = 0, None
        self.offset_lo, self.offset_hi = 0, None
        self.time_lo, self.time_hi = None, None  # ms, [lo, hi)
        self.keys = None  # set of KEYS values
        self.msg_ids = None  # set of msgId values
        self.candidates = None  # {root: sorted CommitLog offsets} for keys/msgId

    def topic_ok(self, topic: str) -> bool:
        return (self.topics is None or topic in self.topics) and all(
            topic.startswith(p) for p in self.prefixes
        )

    def queue_ok(self, queue_id: int) -> bool:
        return (
            (self.queue_ids is None or queue_id in self.queue_ids)
            and queue_id >= self.queue_lo
            and (self.queue_hi is None or queue_id < self.queue_hi)
        )


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


def push_filter(f, p: _Pushed):
    """Narrow ``p`` by the pushed filter ``f``. True: applied exactly; "lookup": applied if the
    index lookups are complete; False: not applied (Spark filters those rows after the read)."""
    if not isinstance(f, _PUSHABLE) or len(getattr(f, "attribute", ())) != 1:
        return False
    column = f.attribute[0]
    if isinstance(f, IsNotNull):
        return column in _NEVER_NULL
    values = tuple(v for v in f.value if v is not None) if isinstance(f, In) else (f.value,)
    push = _BY_COLUMN.get(column)
    return push(f, p, column, values) if push is not None else False


def _push_topic(f, p: _Pushed, column: str, values: tuple):
    if not all(isinstance(v, str) for v in values):
        return False
    if isinstance(f, StringStartsWith):
        p.prefixes.append(f.value)
        return True
    if isinstance(f, (EqualTo, In)):
        p.topics = _intersect(p.topics, values)
        return True
    return False


def _push_queue(f, p: _Pushed, column: str, values: tuple):
    """``queueId`` / ``queueOffset``: a range (and for queueId IN, the exact ids)."""
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
        return len(values) <= 1  # a range around the values: Spark picks them
    return True


def _push_time(f, p: _Pushed, column: str, values: tuple):
    """``storeTimestamp``: narrows each queue range, never exact (store times may step back with
    the clock): Spark re-checks."""
    micros = [_epoch_us(v) for v in values]
    if not micros or None in micros or isinstance(f, In):
        return False
    us_values = [us for us in micros if us is not None]
    ceil = isinstance(f, (GreaterThanOrEqual, LessThan))
    bound = _int_bounds(f, [-(-us // 1000) if ceil else us // 1000 for us in us_values])
    if bound is None:
        return False
    if isinstance(f, EqualTo):  # [ceil(us/1000), floor(us/1000) + 1)
        bound = (-(-us_values[0] // 1000), us_values[0] // 1000 + 1)
    if not isinstance(f, (LessThan, LessThanOrEqual)):
        p.time_lo = bound[0] if p.time_lo is None else max(p.time_lo, bound[0])
    if bound[1] is not None:
        p.time_hi = bound[1] if p.time_hi is None else min(p.time_hi, bound[1])
    return False


def _push_lookup(f, p: _Pushed, column: str, values: tuple):
    """``keys`` / ``msgId`` = or IN: the records the index (or the offset in an id) finds."""
    if not isinstance(f, (EqualTo, In)) or not all(isinstance(v, str) for v in values):
        return False
    if column == "keys":
        if not all(any(v.split(" ")) for v in values):
            return False  # no token the index could hold
        p.keys = _intersect(p.keys, values)
    else:
        p.msg_ids = _intersect(p.msg_ids, values)
    return "lookup"


_BY_COLUMN = {
    "topic": _push_topic,
    "queueId": _push_queue,
    "queueOffset": _push_queue,
    "storeTimestamp": _push_time,
    "keys": _push_lookup,
    "msgId": _push_lookup,
}
