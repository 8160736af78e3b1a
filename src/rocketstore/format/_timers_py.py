"""Timer messages (pure twin): the put's properties, the units' deliver times, the copies."""

from __future__ import annotations

import re
import struct
from typing import Optional

import numpy as np

from rocketstore.errors import (
    CorruptRecordError,
)
from rocketstore.format._lookups_py import (
    _mapped,
    _readable,
    _segment_of,
)
from rocketstore.format._messages_py import (
    _CQ_UNIT,
)
from rocketstore.format._record_py import (
    _INT64_MAX,
    _INT64_MIN,
    _check_int,
    decode_record,
    encode_properties,
)
from rocketstore.format.units import PLACEHOLDER_SIZE as _PLACEHOLDER_SIZE

# ---------------------------------------------------------------------------------------------
# Timer messages (rocketstore.services.timer): the put's properties, the units' deliver times, the copies


_TIMER_DIGITS = re.compile(r"[0-9]{1,18}")


def timer_properties(name, value, deliver, topic, queue_id) -> bytes:
    """The encoded properties of a timer put with no other properties (rocketstore.services.timer):
    the timer property, TIMER_OUT_MS, REAL_TOPIC and REAL_QID, in that order."""
    return encode_properties(
        {name: str(value), "TIMER_OUT_MS": str(deliver), "REAL_TOPIC": topic, "REAL_QID": str(queue_id)}
    )


#: timer_units' ``facts`` per unit: deliver ms, offsetPy (longs), sizePy, the hash of REAL_TOPIC,
#: the magic (ints), big-endian
_TIMER_FACT = struct.Struct(">qqiii")


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed int."""
    h = 0
    for (unit,) in struct.iter_unpack(">H", text.encode("utf-16-be", "surrogatepass")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def timer_units(units, first_queue_offset, segments, core, facts=None) -> tuple[list, list]:
    """``(deliver ms, queue offset, CommitLog offset)`` of the timer queue's ``units`` (a
    CQ_UNIT_DTYPE array whose first unit has queue offset ``first_queue_offset``; placeholders
    left out), and the indices of those whose deliver ms is None.

    The deliver ms is the record's TIMER_OUT_MS (0 when it has none) when the record is read
    here: the segment holding it is found by arithmetic (see :func:`queue_message`) and the
    record is whole and CRC-valid, and the value is 1 .. 18 ASCII digits. Else it is None, and
    the caller's careful path reads the record (the timer service's ``commitlog.read``).

    ``facts`` (a bytearray, or None) gains per unit what RocketMQ 5.x's timer log unit holds of
    it (``_TIMER_FACT``): the deliver ms (0 for a careful one), its CommitLog offset and size,
    Java's hashCode of its REAL_TOPIC (0 when it has none) and the magic (1, or 5 when it names
    TIMER_DEL_UNIQKEY: a recall). A unit whose REAL_TOPIC is not ASCII is careful too: the
    caller's careful path fills in its facts."""
    first = _check_int(first_queue_offset, "first_queue_offset", 0, _INT64_MAX)
    if not isinstance(units, np.ndarray) or units.ndim != 1 or units.dtype.itemsize != _CQ_UNIT:
        raise TypeError("units must be a one-dimensional array of CQ_UNIT_DTYPE")
    if facts is not None and type(facts) is not bytearray:
        raise TypeError("facts must be a bytearray or None")
    raw = np.ascontiguousarray(units).tobytes()
    out: list = []
    careful: list = []
    files = segments.files
    for i in range(len(raw) // _CQ_UNIT):
        offset, size, _code = struct.unpack_from(">qiq", raw, i * _CQ_UNIT)
        if offset == 0 and size == _PLACEHOLDER_SIZE:
            continue
        deliver = None
        topic_hash, magic = 0, -1
        props = _timer_record_properties(files, core, offset)
        if props is not None:
            text = props.get("TIMER_OUT_MS")
            if text is None:
                deliver = 0
            elif _TIMER_DIGITS.fullmatch(text):
                deliver = int(text)
            topic = props.get("REAL_TOPIC")
            if topic is None or topic.isascii():
                topic_hash = java_string_hash(topic) if topic is not None else 0
                magic = 5 if "TIMER_DEL_UNIQKEY" in props else 1
        if deliver is None or (facts is not None and magic < 0):
            careful.append(len(out))
        if facts is not None:
            facts += _TIMER_FACT.pack(deliver or 0, offset, size, topic_hash, max(magic, 1))
        out.append((deliver, first + i, offset))
    return out, careful


def _timer_record_properties(files, core, offset) -> Optional[dict]:
    """The properties of the whole, CRC-valid record at ``offset``, or None (see timer_units)."""
    seg = _segment_of(files, offset) if offset >= 0 else None
    if seg is None:
        return None
    readable = _readable(seg, core)
    pos = offset - seg.file_from_offset
    view = _mapped(seg, readable) if pos < readable else None
    if view is None:
        return None
    try:
        return decode_record(view, pos).properties
    except CorruptRecordError:
        return None


def timer_copies(
    offsets, segments, core, dequeue_ms, real_topic, orders, order_of, room
) -> tuple[list, list]:
    """The ``put_many`` items of the copies a timer pass puts for the records at ``offsets``, with
    None where the caller's careful path (the timer service's ``_copy``) decides, and the indices
    of those None. The compiled
    twin builds the copy of a record of the usual shape (REAL_TOPIC, REAL_QID and TIMER_OUT_MS
    in plain digits, each property once, every piece one decode_properties keeps, nothing that
    would not encode, REAL_TOPIC a topic by ``real_topic(raw)`` and REAL_QID one of its queues,
    a copy within ``room``'s longest record); this twin leaves every record to the careful path,
    which gives the same copies."""
    _check_int(dequeue_ms, "dequeue_ms", _INT64_MIN, _INT64_MAX)
    if type(orders) is not dict:
        raise TypeError("orders must be a dict")
    out: list = []
    for offset in offsets:
        _check_int(offset, "offset", _INT64_MIN, _INT64_MAX)
        out.append(None)
    return out, list(range(len(out)))
