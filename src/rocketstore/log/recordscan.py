"""Scans of CommitLog records in bulk: decoding a buffer in chunks, stepping over damage to the next
whole record, and which records get a ConsumeQueue unit, under which (topic, queue); the chunked
scans the CommitLog's recovery, reads and verify run (:func:`checked_chunks`, :func:`recover_chunks`,
:func:`column_chunks`).

Recovery (:mod:`rocketstore.log.commitlog`), dispatch and the queue checks all read records this way;
these functions know records (``RECORD_DTYPE`` rows of the codec's ``decode_batch``), never queue
or index files.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterator
from typing import Any, Optional

import numpy as np

from rocketstore.base._checks import INT64_MAX
from rocketstore.errors import CorruptRecordError
from rocketstore.files.mapped_file import MappedFile, populate_read
from rocketstore.format._codec_py import (
    RECORD_FIXED_LENGTH,
    SYSFLAG_TRANSACTION_MASK,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from rocketstore.format._verify import timestamp_problems

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
    "STEPPED",
    "TORN_FIELDS",
    "StampCheck",
    "ReservedColumns",
    "checked_chunks",
    "queue_offset_ranges",
    "RecoveredChunk",
    "recover_chunks",
    "column_chunks",
    "will_read",
    "stop_reason",
    "POPULATE_AHEAD",
    "RECOVER_CHUNK",
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


# ---- the chunked scans of recovery, reads and verify (rocketstore.log.commitlog) ----


def TORN_FIELDS(scan: Any) -> int:  # noqa: N802 (a constant of the scan kernels' BAD_* bits)
    """The field_problems bits that mark a record torn by a crash (see CommitLog._first_torn)."""
    return int(
        scan.BAD_TOPIC
        | scan.BAD_PROPERTIES_UTF8
        | scan.BAD_PHYSICAL_OFFSET
        | scan.BAD_SYSFLAG
        | scan.BAD_PROP_CRC
    )


#: A pseudo stop reason of :func:`checked_chunks`: damaged bytes at ``stop``, stepped over to the
#: next whole record (:func:`~rocketstore.log.recordscan.resync`); more chunks follow.
STEPPED = -1


class StampCheck:
    """Store timestamps, chunk by chunk in CommitLog order, for ``timestamp_problems``: while
    they never decrease from >= 0 each lies between its neighbours and nothing is kept but the
    last two; from the first chunk that steps back, every one is kept (with those two before
    it, its neighbours) in a :class:`ReservedColumns` of ``capacity`` rows at most."""

    def __init__(self, capacity: int):
        self._capacity = capacity
        self._kept: Optional[ReservedColumns] = None
        self._tail = (np.empty(0, np.int64), np.empty(0, np.int64))
        self._last = 0

    def add(self, offsets: np.ndarray, stamps: np.ndarray, before: int) -> None:
        """The next chunk's records: CommitLog ``offsets`` and store ``stamps``; ``before``
        records came before it."""
        if self._kept is None:
            # in cache, chunk by chunk: not one np.diff over every record at the end
            if stamps[0] >= self._last and bool((stamps[1:] >= stamps[:-1]).all()):
                if len(offsets) < 2:  # a chunk of one record: the one before it stays
                    offsets = np.concatenate((self._tail[0], offsets))
                    stamps = np.concatenate((self._tail[1], stamps))
                self._tail = (offsets[-2:].copy(), stamps[-2:].copy())
                self._last = int(stamps[-1])
                return
            self._kept = ReservedColumns((np.int64, np.int64), self._capacity - before + 2)
            self._kept.append(self._tail)
        self._kept.append((offsets, stamps))

    def problems(self) -> list[dict[str, Any]]:
        """``timestamp_problems`` of every record, as verify reports them."""
        if self._kept is None:
            return []
        at, stamps = self._kept.filled()
        # of two records kept from before, the first has its left neighbour outside: ordered
        # with both neighbours, there is nothing to report of it
        context = int(at[0]) if len(self._tail[0]) == 2 else None
        return [
            {"offset": offset, "reason": reason}
            for offset, reason in timestamp_problems(at, stamps)
            if offset != context
        ]


class ReservedColumns:
    """Columns appended chunk by chunk to arrays reserved once for ``capacity`` rows (grown by
    doubling should more come): the pages of the reserve are touched, and zeroed by the kernel,
    only as rows fill them, and no list of chunks is concatenated at the end."""

    def __init__(self, dtypes: tuple[Any, ...], capacity: int):
        self._arrays = [np.empty(max(capacity, 1), dtype=dtype) for dtype in dtypes]
        self._n = 0

    def append(self, chunk: tuple[np.ndarray, ...]) -> None:
        n = len(chunk[0])
        end = self._n + n
        if end > len(self._arrays[0]):
            grown = max(end, 2 * len(self._arrays[0]))
            self._arrays = [
                np.concatenate((a[: self._n], np.empty(grown - self._n, a.dtype))) for a in self._arrays
            ]
        for array, column in zip(self._arrays, chunk):
            array[self._n : end] = column
        self._n = end

    def filled(self) -> tuple[np.ndarray, ...]:
        """The rows appended so far, one view per column."""
        return tuple(a[: self._n] for a in self._arrays)


def checked_chunks(
    codec: Any,
    view: Any,
    lo: int,
    hi: int,
    base: int,
    data_end: Optional[int] = None,
    *,
    chunks: Optional[Callable[[int, int], Iterator[tuple[Any, int, int]]]] = None,
    chunk: int = 0,
    placed: bool = False,
) -> Iterator[tuple[Any, int, int]]:
    """:func:`decode_chunks` with body CRCs checked over ``view[lo:hi]`` (a segment starting at
    CommitLog offset ``base``), stepping over damage: a record whose CRC fails when its length
    is still plausible (a flipped bit in a body), and bytes whose lengths cannot be trusted, up to
    the next whole record (its magic code, PHYSICALOFFSET and CRC found).

    Yields ``(records, stop, reason)``; a chunk that ends at a bad CRC has ``STOP_BAD_CRC``, one
    that ends at stepped-over bytes ``STEPPED`` (more may follow either). The last chunk's stop
    and reason say where and why the scan ended. Damage at or past ``data_end`` (default
    ``hi``) is not stepped over: what recovery found written, or what the checkpoint vouches for (a
    segment's unwritten end or a torn tail is no damage, and searching a gigabyte of zeros for a
    record costs a second).

    ``chunks(lo, hi)``: the scan of ``view[lo:hi]`` (default: :func:`decode_chunks` with CRCs,
    RECORD_DTYPE rows of at most ``chunk`` records; :func:`column_chunks`: ``scan.verify_scan``'s
    columns). ``placed`` (the default scan): a whole record whose PHYSICALOFFSET names another
    place (copied there) is damage too, stepped over.
    """
    if chunks is None:
        placed_at = base if placed else None
        chunks = lambda a, b: decode_chunks(  # noqa: E731
            codec, view, a, b, check_crc=True, chunk=chunk, base=placed_at
        )
    resync_hi = hi if data_end is None else min(hi, data_end)

    def resync_at(stop: int) -> int:
        return resync(codec, view, stop, hi, base) if stop < resync_hi else -1

    pos = lo
    while True:
        nxt = -1
        for arr, stop, reason in chunks(pos, hi):
            if reason in (codec.STOP_LIMIT, codec.STOP_BAD_CRC, codec.STOP_BLANK) or stop >= hi:
                yield arr, stop, reason
            else:  # lengths that cannot be trusted, or the end of the data
                nxt = resync_at(stop)
                yield arr, stop, (reason if nxt < 0 else STEPPED)
        if reason == codec.STOP_BAD_CRC and stop < resync_hi:
            size = int.from_bytes(view[stop : stop + 4], "big", signed=True)
            nxt = stop + size if 0 < size <= hi - stop else resync_at(stop)
        if nxt < 0:
            return
        pos = nxt


def queue_offset_ranges(
    scan: Any, buffer: Any, rows: np.ndarray, base: int, keys: Optional[np.ndarray] = None
) -> list[tuple[str, int, int, int]]:
    """``(topic, queue_id, lowest, highest queue offset)`` of each queue among the consumable
    records of ``rows`` (decoded from ``buffer``, which starts at CommitLog offset ``base``)
    whose queue offset is :func:`~rocketstore.log.recordscan.plausible`: what recovery needs to know
    where each queue's next put goes. ``keys``: the rows' ``scan.queue_keys`` if known.

    One compiled pass (``scan.queue_ranges``: no sort, no mask, no copy of the rows);
    :func:`~rocketstore.log.recordscan.queue_groups` (exact grouping) should two queues share a key."""
    if not len(rows):
        return []
    if keys is None:
        keys = scan.queue_keys(buffer, rows)
    ranges = scan.queue_ranges(buffer, rows, keys, base)  # counts only rows that get a unit
    if ranges is None:  # two queues share a 64-bit key
        rows = rows[consumable(rows) & plausible(rows, base)]
        out = []
        for topic, qid, group in queue_groups(scan, buffer, rows):
            offsets = rows["queue_offset"][group]
            out.append((topic, qid, int(offsets.min()), int(offsets.max())))
        return out
    raw = memoryview(buffer).cast("B")
    topic_pos, topic_len, queue_id = rows["topic_pos"], rows["topic_len"], rows["queue_id"]
    out = []
    for r, low, high in zip(*(column.tolist() for column in ranges)):
        at = int(topic_pos[r])
        topic = bytes(raw[at : at + int(topic_len[r])]).decode("utf-8", "surrogateescape")
        out.append((topic, int(queue_id[r]), low, high))
    return out


#: Bytes of a segment mapped (``populate_read``) ahead of each compiled call of a scan: about
#: what one call reads; what a call reads past it (large records) faults in as usual.
POPULATE_AHEAD = 32 << 20

#: Records per compiled call of the recovery scan: the call decodes them into a small table that
#: stays in cache whatever this is; it sets how often progress is reported and the GIL taken.
RECOVER_CHUNK = 65536


class RecoveredChunk:
    """What :func:`recover_chunks` found in one stretch of records: ``count`` records kept from
    ``start``, whether a torn record ended them (``torn``), and their per-queue ranges (``ranges``
    of ``scan.recover_scan``; None when two queues share a key)."""

    __slots__ = ("start", "stop", "count", "torn", "ranges")

    def __init__(self, start: int, stop: int, count: int, torn: bool, ranges: Optional[list[Any]]):
        self.start, self.stop, self.count, self.torn, self.ranges = start, stop, count, torn, ranges

    def queue_ranges(self, codec: Any, scan: Any, view: Any, base: int) -> list[tuple[str, int, int, int]]:
        """``(topic, queue_id, lowest, highest queue offset)`` of each queue among the records
        (``view``: their segment, starting at CommitLog offset ``base``), as
        :func:`queue_offset_ranges` has them."""
        if self.ranges is None:  # two queues share a 64-bit key: decoded again, grouped exactly
            rows, stop, _reason = codec.decode_batch(view, self.start, self.stop, check_crc=True)
            if len(rows) != self.count or stop != self.stop:
                raise CorruptRecordError(
                    f"the records at commitlog offset {base + self.start} changed during recovery"
                )
            return queue_offset_ranges(scan, view, rows, base)
        raw = memoryview(view).cast("B")
        return [
            (bytes(raw[at : at + length]).decode("utf-8", "surrogateescape"), qid, low, high)
            for at, length, qid, low, high in self.ranges
        ]


def recover_chunks(
    codec: Any, scan: Any, mf: MappedFile, torn_from: Optional[int] = None, max_records: int = RECOVER_CHUNK
) -> Callable[[int, int], Iterator[tuple[RecoveredChunk, int, int]]]:
    """A ``chunks`` scan for :func:`checked_chunks`: ``scan.recover_scan`` over segment ``mf``
    in calls of at most ``max_records`` records, each yielding a :class:`RecoveredChunk`.
    ``torn_from``: the position from which a record whose fields are torn (``_TORN_FIELDS``)
    ends the scan with STOP_CORRUPT (None: no such check)."""
    mask = 0 if torn_from is None else TORN_FIELDS(scan)
    first = INT64_MAX if torn_from is None else torn_from
    view, base, size = mf.mm, mf.file_from_offset, mf.file_size

    def chunks(lo: int, hi: int) -> Iterator[tuple[RecoveredChunk, int, int]]:
        while True:
            populate_read(view, lo, min(hi, lo + POPULATE_AHEAD))
            count, stop, reason, torn, ranges = scan.recover_scan(
                view,
                lo,
                hi,
                base=base,
                segment_size=size,
                torn_from=first,
                torn_mask=mask,
                max_records=max_records,
            )
            yield RecoveredChunk(lo, stop, count, torn, ranges), stop, reason
            if torn or reason != codec.STOP_LIMIT or stop >= hi or not count:
                return
            lo = stop

    return chunks


def column_chunks(
    codec: Any, scan: Any, view: Any, base: int, segment_size: int, mm: Any = None
) -> Callable[[int, int], Iterator[tuple[Any, int, int]]]:
    """A ``chunks`` scan for :func:`checked_chunks`: ``scan.verify_scan`` over ``view`` (a
    segment of ``segment_size`` bytes starting at CommitLog offset ``base``) in chunks of at
    most SCAN_CHUNK records, as :func:`decode_chunks` does with decode_batch. ``mm``: the
    segment's map (``view`` is a view of it), whose pages are mapped ahead of each call."""

    def chunks(lo: int, hi: int) -> Iterator[tuple[Any, int, int]]:
        while True:
            if mm is not None:
                populate_read(mm, lo, min(hi, lo + POPULATE_AHEAD))
            cols, stop, reason = scan.verify_scan(
                view, lo, hi, base=base, segment_size=segment_size, max_records=SCAN_CHUNK
            )
            yield cols, stop, reason
            if reason != codec.STOP_LIMIT or stop >= hi or not len(cols[0]):
                return
            lo = stop

    return chunks


def will_read(mf: MappedFile) -> None:
    """Ask the kernel to read a segment ahead: a scan then runs without a page fault per page."""
    try:
        mf.mm.madvise(mmap.MADV_WILLNEED)
    except (AttributeError, OSError, ValueError):  # no madvise here, or a closed map
        pass


def stop_reason(codec: Any, reason: int) -> str:
    """What a scan's stop ``reason`` means, in words."""
    return {
        codec.STOP_END: "no record where one should be (zeros or garbage)",
        codec.STOP_TRUNCATED: "truncated record: it runs past the end of the segment",
        codec.STOP_CORRUPT: "corrupt record: inconsistent lengths",
        codec.STOP_BAD_CRC: "corrupt record: body CRC mismatch",
        STEPPED: "corrupt record: lengths that cannot be trusted (stepped over to the next whole record)",
    }.get(reason, f"stop reason {reason}")
