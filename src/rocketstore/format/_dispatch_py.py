"""What the ConsumeQueues and the index need of a stretch of records (pure twin of
dispatch_info and property_pieces).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Mapping
from typing import Optional

import numpy as np

from rocketstore.errors import (
    CorruptRecordError,
)
from rocketstore.format._record_py import (
    _INT32_MAX,
    _INT32_MIN,
    _INT64_MAX,
    _INT64_MIN,
    DEFAULT_DELAY_LEVELS_MS,
    DISPATCH_DTYPE,
    DISPATCH_ROW_FIELDS,
    KEYREF_DTYPE,
    PIECE_DTYPE,
    RECORD_DTYPE,
    SCHEDULE_TOPIC,
    STOP_CORRUPT,
    _readable_view,
    decode_batch,
    java_hash_bytes,
)

# ---------------------------------------------------------------------------------------------
# Dispatch (§2 tagsCode and DELAY, §5.2 index keys): what the ConsumeQueues and the index need

_SCHEDULE_TOPIC_BYTES = SCHEDULE_TOPIC.encode("ascii")
_DISPATCH_PROPERTIES = {b"TAGS": 0, b"KEYS": 1, b"UNIQ_KEY": 2, b"DELAY": 3}
_JAVA_INT = re.compile(rb"[+-]?[0-9]+")  # Integer.parseInt, ASCII digits only
_KEY_SEPARATOR = b" "  # MessageConst.KEY_SEPARATOR


def _check_table(name, table, dtype, dtype_name):
    """``table`` as a 1-D array of exactly ``dtype`` (TypeError otherwise)."""
    if not isinstance(table, np.ndarray) or table.ndim != 1 or table.dtype != dtype:
        raise TypeError(f"{name} must be a one-dimensional numpy array of {dtype_name}")
    return table


def _delay_table(delay_levels_ms) -> list:
    """The delay table as a list of Java longs: level n is at [n - 1]."""
    if isinstance(delay_levels_ms, (str, bytes, bytearray, memoryview, Mapping)):
        raise TypeError(f"delay_levels_ms must be a sequence of ints, not {type(delay_levels_ms).__name__}")
    try:
        items = tuple(delay_levels_ms)
    except TypeError:
        raise TypeError(
            f"delay_levels_ms must be a sequence of ints, not {type(delay_levels_ms).__name__}"
        ) from None
    table = []
    for level, value in enumerate(items, 1):
        try:
            value = operator.index(value)
        except TypeError:
            raise TypeError(f"delay level {level} must be an int (ms), not {type(value).__name__}") from None
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError(f"delay level {level} is {value} ms, which does not fit a Java long")
        table.append(value)
    return table


def _outside(i, position, what, start, length, size):
    err = CorruptRecordError(
        f"record {i} at position {position}: its {what} bytes [{start}, "
        f"{start + length}) lie outside the buffer of {size} bytes"
    )
    err.reason = STOP_CORRUPT
    err.position = position
    return err


def _java_int(data):
    """``Integer.parseInt`` of ASCII text, or None where Java would throw NumberFormatException."""
    if _JAVA_INT.fullmatch(data) is None:
        return None
    value = int(data)
    return value if _INT32_MIN <= value <= _INT32_MAX else None


def _dispatch_properties(data):
    """The (offset, length) in ``data`` of the TAGS, KEYS, UNIQ_KEY and DELAY values, each None
    when absent: the pieces :func:`decode_properties` keeps, a later duplicate winning."""
    found: list[Optional[tuple[int, int]]] = [None, None, None, None]
    at = 0
    for piece in data.split(b"\x02"):
        sep = piece.find(b"\x01")
        if 0 < sep < len(piece) - 1:
            which = _DISPATCH_PROPERTIES.get(piece[:sep])
            if which is not None:
                found[which] = (at + sep + 1, len(piece) - sep - 1)
        at += len(piece) + 1
    return found


def property_pieces(buffer, records):
    """Every properties piece of ``records`` (RECORD_DTYPE, decoded from ``buffer``) that
    :func:`decode_properties` keeps, duplicates included, in record order.

    Returns ``(pieces, counts)``: ``pieces`` (PIECE_DTYPE) locates each piece's name and value
    in ``buffer``; ``counts`` (int32, one per record) says how many pieces each record has.
    A record whose properties lie outside ``buffer`` raises CorruptRecordError.
    """
    _check_table("records", records, RECORD_DTYPE, "RECORD_DTYPE")
    buf = _readable_view(buffer)
    try:
        size = buf.nbytes
        n = len(records)
        positions = records["position"].tolist()
        props_pos, props_len = records["properties_pos"].tolist(), records["properties_len"].tolist()
        counts = np.zeros(n, dtype=np.int32)
        found = []
        for i in range(n):
            pp, pl = props_pos[i], props_len[i]
            if pp < 0 or pl < 0 or pp + pl > size:
                raise _outside(i, positions[i], "properties", pp, pl, size)
            at = pp
            for piece in bytes(buf[pp : pp + pl]).split(b"\x02"):
                sep = piece.find(b"\x01")
                if 0 < sep < len(piece) - 1:
                    found.append((at, at + sep + 1, sep, len(piece) - sep - 1))
                    counts[i] += 1
                at += len(piece) + 1
    finally:
        buf.release()
    pieces = np.zeros(len(found), dtype=PIECE_DTYPE)
    if found:
        pieces[:] = found
    return pieces, counts


def dispatch_info(buffer, records, delay_levels_ms=DEFAULT_DELAY_LEVELS_MS):  # noqa: C901 (one pass over a chunk's rows, as the compiled twin's loop)
    """What dispatch needs from each record of ``records`` (RECORD_DTYPE, decoded from ``buffer``).

    Returns ``(info, keys)``. ``info`` (DISPATCH_DTYPE, one row per record) holds the tagsCode
    (§2: Java hash of TAGS, 0 without one; for SCHEDULE_TOPIC_XXXX with a DELAY level clamped to
    ``len(delay_levels_ms)`` and > 0, storeTimestamp + that level's delay), where the TAGS value
    lies in ``buffer``, and the DELAY value as Integer.parseInt reads it (0 when absent or not a
    number). ``keys`` (KEYREF_DTYPE, in record order) locates each record's index keys (§5.2):
    its UNIQ_KEY, then each non-empty token of KEYS split on single spaces; no transaction
    filtering. Properties are read as :func:`decode_properties` reads them.

    A record whose topic or properties lie outside ``buffer`` raises CorruptRecordError.
    """
    _check_table("records", records, RECORD_DTYPE, "RECORD_DTYPE")
    table = _delay_table(delay_levels_ms)
    max_level = len(table)
    buf = _readable_view(buffer)
    try:
        size = buf.nbytes
        n = len(records)
        if n > _INT32_MAX:
            raise ValueError(f"{n} records are too many for one call (at most {_INT32_MAX})")
        positions = records["position"].tolist()
        store_timestamps = records["store_timestamp"].tolist()
        topic_pos, topic_len = records["topic_pos"].tolist(), records["topic_len"].tolist()
        props_pos, props_len = records["properties_pos"].tolist(), records["properties_len"].tolist()
        tags_code, tags_pos, tags_len, delay_level = [0] * n, [-1] * n, [0] * n, [0] * n
        keys = []
        for i in range(n):
            tp, tl, pp, pl = topic_pos[i], topic_len[i], props_pos[i], props_len[i]
            if tp < 0 or tl < 0 or tp + tl > size:
                raise _outside(i, positions[i], "topic", tp, tl, size)
            if pp < 0 or pl < 0 or pp + pl > size:
                raise _outside(i, positions[i], "properties", pp, pl, size)
            data = bytes(buf[pp : pp + pl])
            tags, keys_value, uniq, delay = _dispatch_properties(data)
            if tags is not None:
                tags_pos[i], tags_len[i] = pp + tags[0], tags[1]
                tags_code[i] = java_hash_bytes(data[tags[0] : tags[0] + tags[1]])
            if delay is not None:
                level = _java_int(data[delay[0] : delay[0] + delay[1]])
                if level is not None:
                    delay_level[i] = level
                    if buf[tp : tp + tl] == _SCHEDULE_TOPIC_BYTES:
                        level = min(level, max_level)
                        if level > 0:
                            tags_code[i] = _wrap64(store_timestamps[i] + table[level - 1])
            if uniq is not None:
                keys.append((pp + uniq[0], uniq[1], i))
            if keys_value is not None:
                at, end = keys_value[0], keys_value[0] + keys_value[1]
                for token in data[at:end].split(_KEY_SEPARATOR):
                    if token:
                        keys.append((pp + at, len(token), i))
                    at += len(token) + 1
    finally:
        buf.release()
    info = np.zeros(n, dtype=DISPATCH_DTYPE)
    if n:
        info["tags_code"] = tags_code
        info["tags_pos"] = tags_pos
        info["tags_len"] = tags_len
        info["delay_level"] = delay_level
    refs = np.zeros(len(keys), dtype=KEYREF_DTYPE)
    if keys:
        refs[:] = keys
    return info, refs


#: At most this many records dispatch_few hands back.
_FEW_RECORDS_MAX = 16


def dispatch_few(buffer, start, end, delays, max_records):
    """What dispatch needs of each record of ``buffer[start:end]`` (a follower catching up with a
    put or a few), when that stretch holds at most ``max_records`` (0 .. 16) whole records before
    its end or the first position holding none; None when it holds more (:func:`decode_batch`
    and :func:`dispatch_info` serve those, faster per record).

    Returns ``(stop, reason, rows)``: ``stop`` and ``reason`` as
    ``decode_batch(buffer, start, end, check_crc=False)`` gives them; ``rows`` a tuple with one
    ``(position, size, queue_id, queue_offset, sys_flag, store_timestamp, topic, tags_code,
    keys)`` per record: ``topic`` decoded as UTF-8 (surrogateescape), ``tags_code`` as
    dispatch_info's, ``keys`` how many index keys dispatch_info finds in it. ``delays``: the
    delay table as a one-dimensional int64 numpy array.
    """
    if not isinstance(max_records, int) or not 0 <= max_records <= _FEW_RECORDS_MAX:
        raise ValueError(f"max_records must be in [0, {_FEW_RECORDS_MAX}], not {max_records}")
    if type(delays) is not np.ndarray or delays.ndim != 1 or delays.dtype != np.int64:
        raise TypeError("delays must be a one-dimensional numpy array of int64")
    records, stop, reason = decode_batch(buffer, start, end, check_crc=False, max_records=max_records + 1)
    if len(records) > max_records:
        return None
    info, keys = dispatch_info(buffer, records, delays.tolist())
    counts = np.bincount(keys["record"], minlength=len(records)).tolist()
    view = _readable_view(buffer)
    rows = []
    for (position, size, queue_id, queue_offset, sys_flag, timestamp, at, length), tags_code, count in zip(
        records[list(DISPATCH_ROW_FIELDS)].tolist(), info["tags_code"].tolist(), counts
    ):
        topic = bytes(view[at : at + length]).decode("utf-8", "surrogateescape")
        rows.append((position, size, queue_id, queue_offset, sys_flag, timestamp, topic, tags_code, count))
    return stop, reason, tuple(rows)


def _wrap64(value: int) -> int:
    """Java long arithmetic: wrap to a signed 64-bit value."""
    return ((value - _INT64_MIN) & 0xFFFFFFFFFFFFFFFF) + _INT64_MIN
