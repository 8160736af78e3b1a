"""Scans of CommitLog records in bulk: decoding a buffer in chunks, stepping over damage to the next
whole record, and which records get a ConsumeQueue unit, under which (topic, queue).

Recovery (:mod:`rocketstore.log.commitlog`), dispatch and the queue checks all read records this way;
these functions know records (``RECORD_DTYPE`` rows of the codec's ``decode_batch``), never queue
or index files.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Optional

import numpy as np

from rocketstore.format._codec_py import (
    RECORD_FIXED_LENGTH,
    SYSFLAG_TRANSACTION_MASK,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)

__all__ = [
    "SCAN_CHUNK",
    "decode_chunks",
    "resync",
    "consumable",
    "plausible",
    "consumable_rows",
    "queue_groups",
    "message_chunks",
    "MESSAGE_CHUNK",
]

SCAN_CHUNK = 65536  # records per decode_batch call: bounded memory on any segment size
#: Records decoded per table by message_chunks (scans' tables are SCAN_CHUNK rows): a table of
#: 1,024 rows (176 KiB) is reused from the heap chunk after chunk, where SCAN_CHUNK's 11 MiB
#: ones are fresh pages the kernel zeroes (up to a third of a first pass over a store).
MESSAGE_CHUNK = 1024


def decode_chunks(
    codec: Any, buffer: Any, lo: int, hi: int, *, check_crc: bool, chunk: int = 0, base: Optional[int] = None
) -> Iterator[tuple[np.ndarray, int, int]]:
    """``codec.decode_batch`` over ``buffer[lo:hi]`` in chunks of at most ``chunk`` records
    (0: SCAN_CHUNK); ``base``: as decode_batch's (the records' PHYSICALOFFSET checked).

    Yields (records, stop, reason); the last chunk's stop/reason say where and why it ended.
    """
    decode_batch, limit = codec.decode_batch, codec.STOP_LIMIT
    chunk = chunk or SCAN_CHUNK
    while True:
        records, stop, reason = decode_batch(
            buffer, lo, hi, check_crc=check_crc, max_records=chunk, base=base
        )
        yield records, stop, reason
        if reason != limit or stop >= hi or not len(records):
            return
        lo = stop


#: Where PHYSICALOFFSET lies in a record (TOTALSIZE, MAGIC, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET).
_PHYSICAL_OFFSET_POS = 28
_RESYNC_WINDOW = 4 << 20


def resync(codec: Any, buffer: Any, pos: int, hi: int, base: int) -> int:
    """After damage at ``pos`` (a record whose lengths cannot be trusted), where the next whole
    record of ``buffer[:hi]`` starts: the first position past ``pos`` holding a message magic
    code, whose PHYSICALOFFSET is ``base`` + that position, and which decodes with a valid body
    CRC. -1 when there is none. The damaged bytes between are stepped over, so the records after
    a flipped bit in a TOTALSIZE field are neither cut off nor skipped."""
    raw = np.frombuffer(buffer, dtype=np.uint8)
    start = pos + 1
    while start + _PHYSICAL_OFFSET_POS + 8 <= hi:
        stop = min(hi, start + _RESYNC_WINDOW)
        w = raw[start + 4 : stop + 4 if stop + 4 <= hi else hi]  # the magic sits at +4
        if len(w) < 4:
            return -1
        if not w.any():  # zeros (the unwritten end of a segment): nothing starts here
            start = stop
            continue
        first = np.flatnonzero(w[:-3] == 0xDA)
        follow = w[first + 3]
        hits = first[(w[first + 1] == 0xA3) & (w[first + 2] == 0x20) & ((follow == 0xA7) | (follow == 0xAB))]
        for h in hits.tolist():
            at = start + h
            field = raw[at + _PHYSICAL_OFFSET_POS : at + _PHYSICAL_OFFSET_POS + 8]
            if len(field) < 8 or int.from_bytes(field.tobytes(), "big", signed=True) != base + at:
                continue
            records, _stop, _reason = codec.decode_batch(buffer, at, hi, check_crc=True, max_records=1)
            if len(records) == 1 and int(records["position"][0]) == at:
                return int(at)
        start = stop
    return -1


def consumable(records: np.ndarray) -> np.ndarray:
    """Mask of the records that get a ConsumeQueue unit: not PREPARED or ROLLBACK (§4.2)."""
    tx = records["sys_flag"] & SYSFLAG_TRANSACTION_MASK
    keep: np.ndarray = (tx != TRANSACTION_PREPARED_TYPE) & (tx != TRANSACTION_ROLLBACK_TYPE)
    return keep


def plausible(records: np.ndarray, base: int) -> np.ndarray:
    """Mask of the records whose queue offset can be true. A queue offset ``q`` says ``q``
    earlier records of that queue lie below this one in the CommitLog's offsets (which only
    grow), each at least RECORD_FIXED_LENGTH bytes: ``q`` cannot exceed the record's offset /
    91. No CRC covers the QUEUEOFFSET field, so a flipped bit there is caught this way (or by
    the unit check, for a small change), rather than padding a queue up to that offset.
    ``base``: the CommitLog offset of the buffer the rows' positions are relative to."""
    q = records["queue_offset"]
    keep: np.ndarray = (q >= 0) & (q <= (base + records["position"]) // RECORD_FIXED_LENGTH)
    return keep


def consumable_rows(records: np.ndarray) -> np.ndarray:
    """The records that get a ConsumeQueue unit: ``records`` itself when that is all of them
    (no copy of the rows), else the ones :func:`consumable` keeps."""
    keep = consumable(records)
    return records if keep.all() else records[keep]


#: Queues a chunk's rows are split off one by one (a comparison per row and queue); the rows
#: of any further queues are grouped by sorting, which costs more per row for a few queues.
FEW_QUEUES = 16


def _group_rows(keys: np.ndarray) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """``(first row of each group, each group's rows in order, each row's group's first row)``
    of the rows of ``keys`` grouped by equal key, groups in the order of their first row."""
    n = len(keys)
    representatives = np.empty(n, dtype=np.int64)
    first: list[int] = []
    groups: list[np.ndarray] = []
    rest = np.arange(n)
    while len(rest) and len(groups) < FEW_QUEUES:
        same = keys[rest] == keys[rest[0]]
        rows = rest[same]
        groups.append(rows)
        first.append(int(rows[0]))
        representatives[rows] = rows[0]
        rest = rest[~same]
    if len(rest):  # many queues in one chunk: the others by sorting
        _uniq, at, inverse, counts = np.unique(
            keys[rest], return_index=True, return_inverse=True, return_counts=True
        )
        inverse = inverse.ravel()
        representatives[rest] = rest[at[inverse]]
        groups.extend(np.split(rest[np.argsort(inverse, kind="stable")], np.cumsum(counts)[:-1]))
        first.extend(int(r) for r in rest[at])
    return np.array(first, dtype=np.int64), groups, representatives


def queue_groups(scan: Any, buffer: Any, records: np.ndarray) -> list[tuple[str, int, np.ndarray]]:
    """``(topic, queue_id, row indices)`` of each (topic, queue) among ``records``.

    ``records`` is a ``RECORD_DTYPE`` array decoded from ``buffer``. Rows are grouped without a
    Python step per record, by ``scan.queue_keys`` (a 64-bit hash of topic and queue id), and
    the grouping is checked byte for byte (``scan.same_queues``); should two queues' keys
    collide, the rows are grouped again exactly, by topic bytes and queue id.
    """
    n = len(records)
    if n == 0:
        return []
    if n == 1:  # one record (a follower catching up with one put): no grouping to do
        row = records[0]
        at, length = int(row["topic_pos"]), int(row["topic_len"])
        view = memoryview(buffer)
        if at >= 0 and at + length <= view.nbytes:
            topic = view.cast("B")[at : at + length].tobytes()
            return [
                (topic.decode("utf-8", "surrogateescape"), int(row["queue_id"]), np.zeros(1, dtype=np.int64))
            ]
    keys = scan.queue_keys(buffer, records)
    if (keys == keys[0]).all():  # one queue: the common case of a batch, or a quiet store
        first = np.zeros(1, dtype=np.int64)
        groups = [np.arange(n)]
        representatives = np.zeros(n, dtype=np.int64)
    else:
        first, groups, representatives = _group_rows(keys)
    raw = np.frombuffer(buffer, dtype=np.uint8)
    topic_pos, topic_len = records["topic_pos"], records["topic_len"]

    def topic_of(r: int) -> bytes:
        at = int(topic_pos[r])
        return raw[at : at + int(topic_len[r])].tobytes()

    if not scan.same_queues(buffer, records, representatives):
        # Two queues share a 64-bit key: group exactly, one Python step per record.
        exact: dict[tuple[bytes, int], list[int]] = {}
        for r in range(n):
            exact.setdefault((topic_of(r), int(records["queue_id"][r])), []).append(r)
        return [
            (topic.decode("utf-8", "surrogateescape"), queue_id, np.array(rows, dtype=np.int64))
            for (topic, queue_id), rows in exact.items()
        ]
    return [
        (
            topic_of(int(first[g])).decode("utf-8", "surrogateescape"),
            int(records["queue_id"][int(first[g])]),
            rows,
        )
        for g, rows in enumerate(groups)
    ]


def message_chunks(
    commitlog: Any, codec: Any, start: Optional[int], end: Optional[int], zero_copy: bool, check_crc: bool
) -> Iterator[Iterator[Any]]:
    """The messages of ``commitlog`` over ``[start, end)`` in CommitLog order, as iterators to
    chain: each message comes from a compiled iterator without a Python frame per message. A
    segment's records are decoded one by one as they are asked for (``codec.segment_messages``);
    from a position that holds no valid record on, the rest of the segment goes through the
    checked scan, which steps over damage and logs it (``CommitLog.chunks``)."""
    for mf, lo, hi, limit in commitlog.ranges(start, end):
        view = mf.view(0, limit)
        it = codec.segment_messages(
            view,
            lo,
            hi,
            check_crc=check_crc,
            copy_body=not zero_copy,
            base=mf.file_from_offset if check_crc else None,
        )
        yield it
        if it.reason == codec.STOP_LIMIT or it.reason == codec.STOP_BLANK:
            if hi < limit:
                return  # the range asked for ends here
            continue
        rest = mf.end_offset if end is None else min(end, mf.end_offset)
        for part, arr in commitlog.chunks(mf.file_from_offset + it.stop, rest, check_crc, MESSAGE_CHUNK):
            yield codec.row_messages(part.view(0, commitlog.readable_end(part)), arr, copy_body=not zero_copy)
