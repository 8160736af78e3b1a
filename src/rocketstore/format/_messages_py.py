"""Messages made from records (pure twin): batches, rows, and the records ConsumeQueue units
point at (pull_units).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import numpy as np

from rocketstore.format._record_py import (
    _INT32_MAX,
    _INT32_MIN,
    _INT64_MAX,
    HOST_V4_LENGTH,
    HOST_V6_LENGTH,
    MAX_TOPIC_LENGTH_V2,
    RECORD_DTYPE,
    STOP_CORRUPT,
    STOP_LIMIT,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    _check_int,
    _check_range,
    _message,
    _parse,
    _readable_view,
    _topic_bytes,
)
from rocketstore.format.units import PLACEHOLDER_SIZE as _PLACEHOLDER_SIZE
from rocketstore.message import MessageExt


def messages_from_rows(buffer, rows, *, copy_body: bool = True) -> list[MessageExt]:
    """The MessageExt of every row of a :func:`decode_batch` array over the same ``buffer``, as a
    list (no re-check of the CRC; ValueError if a row points outside ``buffer``)."""
    if not isinstance(rows, np.ndarray) or rows.ndim != 1 or rows.dtype != RECORD_DTYPE:
        raise TypeError("rows must be a one-dimensional numpy array of RECORD_DTYPE")
    return [record_from_row(buffer, row, copy_body=copy_body) for row in rows]


class _SegmentMessages:
    """The iterator segment_messages returns: one MessageExt per record, decoded as it is asked
    for; ``stop`` is where the next record starts (or the scan stopped), ``reason`` -1 until the
    iterator is exhausted, then the STOP_* code decode_batch would give there."""

    def __init__(self, buf: Any, start: int, end: int, check_crc: bool, copy_body: bool, base: int = -1):
        self._buf: Any = buf
        self._end = end
        self._base = base
        self._check_crc = check_crc
        self._copy_body = copy_body
        self.stop = start
        self.reason = -1

    def __iter__(self) -> _SegmentMessages:
        return self

    def __next__(self) -> MessageExt:
        if self._buf is None:
            raise StopIteration
        pos = self.stop
        if pos >= self._end:
            self.reason, self._buf = STOP_LIMIT, None
            raise StopIteration
        reason, row = _parse(self._buf, pos, self._end, self._check_crc)
        if reason is None and self._base >= 0 and row[7] != self._base + pos:
            reason = STOP_CORRUPT  # a record copied here from elsewhere: not the one stored here
        if reason is not None:
            self.reason, self._buf = reason, None
            raise StopIteration
        self.stop = pos + row[1]
        return _message(self._buf, row, self._copy_body)


def segment_messages(
    buffer,
    start: int = 0,
    end: int | None = None,
    *,
    check_crc: bool = True,
    copy_body: bool = True,
    base: int | None = None,
) -> _SegmentMessages:
    """The records of ``buffer[start:end]`` as messages, decoded one by one as they are asked
    for (what :func:`decode_batch`'s rows give through :func:`row_messages`, without the
    table). The iterator stops at ``end`` or at the first position that is not a valid record;
    then its ``stop`` and ``reason`` are decode_batch's ``stop_pos`` and ``stop_reason``.

    ``base``: the CommitLog offset of ``buffer[0]``; a record whose PHYSICALOFFSET is not
    ``base`` + its position (a whole record copied there from elsewhere) stops the iterator as
    a corrupt one does (STOP_CORRUPT), as :func:`record_at` refuses it. None: not checked."""
    buf = _readable_view(buffer)
    if end is None:
        end = buf.nbytes
    _check_range(start, end, buf.nbytes)
    if base is None:
        base = -1
    else:
        _check_int(base, "base", 0, _INT64_MAX)
    return _SegmentMessages(buf, start, end, check_crc, copy_body, base)


def row_messages(buffer, rows, *, copy_body: bool = True) -> Iterator[MessageExt]:
    """:func:`messages_from_rows` as an iterator: each message is made when it is asked for."""
    if not isinstance(rows, np.ndarray) or rows.ndim != 1 or rows.dtype != RECORD_DTYPE:
        raise TypeError("rows must be a one-dimensional numpy array of RECORD_DTYPE")
    return (record_from_row(buffer, row, copy_body=copy_body) for row in rows)


def _unit_message(buf, pos, offset, size, queue_offset, topic_b, qid, tags, copy_body):
    """The message at ``buf[pos:]`` if it is a whole, CRC-valid record of this size, topic, queue
    id and queue offset whose PHYSICALOFFSET is ``offset``, else None; with ``tags`` (a set of
    str), ``False`` for a message whose TAGS is not in it."""
    if not (0 <= pos < buf.nbytes and size > 0):
        return None
    reason, row = _parse(buf, pos, buf.nbytes, True)
    if (
        reason is not None
        or row[1] != size
        or row[4] != qid
        or row[6] != queue_offset
        or row[7] != offset
        or bytes(buf[row[19] : row[19] + row[20]]) != topic_b
    ):
        return None
    m = _message(buf, row, copy_body)
    if tags is not None and m.tags not in tags:
        return False
    return m


def record_from_row(buffer, row, *, copy_body: bool = True) -> MessageExt:
    """The MessageExt for one row of :func:`decode_batch` over the same ``buffer`` (no re-check)."""
    buf = _readable_view(buffer)
    sys_flag = int(row["sys_flag"])
    born_len = HOST_V6_LENGTH if sys_flag & SYSFLAG_BORNHOST_V6 else HOST_V4_LENGTH
    store_len = HOST_V6_LENGTH if sys_flag & SYSFLAG_STOREHOST_V6 else HOST_V4_LENGTH
    body_pos, body_len = int(row["body_pos"]), int(row["body_len"])
    topic_pos, topic_len = int(row["topic_pos"]), int(row["topic_len"])
    props_pos, props_len = int(row["properties_pos"]), int(row["properties_len"])
    pos, size = int(row["position"]), int(row["size"])
    end = pos + size
    if size <= 0 or pos < 0 or end > buf.nbytes:
        raise ValueError("row does not describe a record inside this buffer")
    for start, length in ((body_pos, body_len), (topic_pos, topic_len), (props_pos, props_len)):
        if start < pos or length < 0 or start + length > end:
            raise ValueError("row does not describe a record inside this buffer")
    fields = (
        int(row["position"]),
        int(row["size"]),
        int(row["magic"]),
        int(row["body_crc"]),
        int(row["queue_id"]),
        int(row["flag"]),
        int(row["queue_offset"]),
        int(row["physical_offset"]),
        sys_flag,
        int(row["born_timestamp"]),
        bytes(row["born_host"]).ljust(HOST_V6_LENGTH, b"\0")[:born_len],
        int(row["born_port"]),
        int(row["store_timestamp"]),
        bytes(row["store_host"]).ljust(HOST_V6_LENGTH, b"\0")[:store_len],
        int(row["store_port"]),
        int(row["reconsume_times"]),
        int(row["prepared_transaction_offset"]),
        body_pos,
        body_len,
        topic_pos,
        topic_len,
        props_pos,
        props_len,
    )
    return _message(buf, fields, copy_body)


PULL_END = 0  # no unit left
PULL_FULL = 1  # ``want`` messages taken
PULL_OUTSIDE = 2  # the unit at stop is a candidate whose record is not in this segment
PULL_DAMAGED = 3  # the unit at stop does not point at its own record
_CQ_UNIT = 20
_EXT_TAGS_CODE_MAX = -(1 << 31) - 1


def pull_units(
    buffer,
    file_from,
    file_size,
    units,
    start,
    want,
    first_queue_offset,
    topic,
    queue_id,
    codes=None,
    tags=None,
    *,
    copy_body=True,
):
    """One step of a pull (consume.get_message) over ConsumeQueue ``units`` (a one-dimensional
    CQ_UNIT_DTYPE array; unit i has queue offset ``first_queue_offset + i``), from index ``start``.

    Placeholders and units whose tagsCode is not in ``codes`` (a tuple of Java int tag hashes;
    None: every unit; extended tagsCodes always pass) are skipped. Every other unit's record is
    read from ``buffer``, the readable part of the CommitLog segment that starts at ``file_from``
    and is ``file_size`` long (``buffer`` None: no segment yet), and checked
    (a whole, CRC-valid record of this size, topic, queue id and queue offset whose PHYSICALOFFSET
    is the unit's); a message whose TAGS is not in ``tags`` (a set, or None) is skipped.

    Returns ``(messages, taken, stop, kind)``: the messages, the unit indices they came from, and
    where and why it stopped: PULL_END (stop = len(units)), PULL_FULL (``want`` taken; stop after
    the last), PULL_OUTSIDE (the unit at stop lies outside this segment or below it: the caller
    finds its segment and goes on from stop) or PULL_DAMAGED (the unit at stop is not its record).
    """
    lo = _check_int(file_from, "file_from", 0, _INT64_MAX)
    seg_size = _check_int(file_size, "file_size", 0, _INT64_MAX)
    first = _check_int(first_queue_offset, "first_queue_offset", 0, _INT64_MAX)
    left = _check_int(want, "want", 0, _INT64_MAX)
    qid = _check_int(queue_id, "queue_id", _INT32_MIN, _INT32_MAX)
    topic_b = _topic_bytes(topic, MAX_TOPIC_LENGTH_V2)
    if not isinstance(units, np.ndarray) or units.ndim != 1 or units.dtype.itemsize != _CQ_UNIT:
        raise TypeError("units must be a one-dimensional array of CQ_UNIT_DTYPE")
    if tags is not None and not isinstance(tags, (set, frozenset)):
        raise TypeError(f"tags must be a set or None, not {type(tags).__name__}")
    i = _check_int(start, "start", 0, _INT64_MAX)
    wanted = None if codes is None else {_check_int(c, "code", _INT32_MIN, _INT32_MAX) for c in codes}
    buf = None if buffer is None else _readable_view(buffer)
    raw = np.ascontiguousarray(units).view(np.uint8).tobytes()
    n = len(raw) // _CQ_UNIT
    messages: list = []
    taken: list = []
    while True:
        if i >= n:
            kind = PULL_END
            break
        if left <= 0:
            kind = PULL_FULL
            break
        offset, size, code = struct.unpack_from(">qiq", raw, i * _CQ_UNIT)
        if offset == 0 and size == _PLACEHOLDER_SIZE:
            i += 1
            continue
        if wanted is not None and code > _EXT_TAGS_CODE_MAX:
            code32 = ((code + (1 << 31)) % (1 << 32)) - (1 << 31)
            if code32 not in wanted:
                i += 1
                continue
        if offset < 0 or size <= 0:
            kind = PULL_DAMAGED
            break
        if buf is None or offset < lo or offset - lo >= seg_size:
            kind = PULL_OUTSIDE
            break
        m = _unit_message(buf, offset - lo, offset, size, first + i, topic_b, qid, tags, copy_body)
        if m is None:
            kind = PULL_DAMAGED
            break
        i += 1
        if m is False:
            continue
        messages.append(m)
        taken.append(i - 1)
        left -= 1
    return messages, taken, i, kind
