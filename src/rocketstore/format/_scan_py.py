"""Kernels over a stretch of CommitLog records: the pure-Python twin of ``rocketstore.format._scan``.

Queue keys and per-queue offset ranges (records grouped by topic and queue id without a Python
step per record), the field cross-checks verify makes, verify's and recovery's one-pass scans and
the ConsumeQueue unit check. Each works on a whole RECORD_DTYPE table or a stretch of a segment in
one call; the records are decoded by the codec (rocketstore.format._codec_py.decode_batch). Both twins
have the same public names, raise the same exceptions and give the same arrays;
tests/test_recovery_scan.py and tests/test_verify_fields.py check that they do.
"""

from __future__ import annotations

import zlib

import numpy as np

from rocketstore.format._dispatch_py import (
    _check_table,
    _outside,
)
from rocketstore.format._record_py import (
    _INT64_MAX,
    _INT64_MIN,
    _PROP_CRC_LENGTH,
    _PROP_CRC_NAME,
    END_FILE_MIN_BLANK_LENGTH,
    RECORD_DTYPE,
    RECORD_FIXED_LENGTH,
    STOP_CORRUPT,
    SYSFLAG_TRANSACTION_MASK,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    _readable_view,
    decode_batch,
)
from rocketstore.format.units import CQ_UNIT_DTYPE as _CQ_UNIT_DTYPE
from rocketstore.format.units import PLACEHOLDER_SIZE as _PLACEHOLDER_SIZE

__all__ = [
    "queue_keys",
    "same_queues",
    "queue_ranges",
    "verify_scan",
    "recover_scan",
    "record_digests",
    "check_units",
    "UNIT_OK",
    "UNIT_BAD",
    "UNIT_LOST",
    "SCAN_NOT_CONSUMABLE",
    "SCAN_IMPLAUSIBLE_QUEUE_OFFSET",
    "field_problems",
    "BAD_TOPIC",
    "BAD_PROPERTIES_UTF8",
    "BAD_PHYSICAL_OFFSET",
    "BAD_NO_BLANK_ROOM",
    "BAD_SYSFLAG",
    "BAD_PREPARED_OFFSET",
    "BAD_PROP_CRC",
]


# ---------------------------------------------------------------------------------------------
# Queue keys: records grouped by (topic, queue id) without a Python step per record

_FNV_BASIS = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def _topic_matrix(buffer, records):
    """(topic bytes as an (n, width) uint8 matrix zero-padded, topic lengths); CorruptRecordError
    when a topic lies outside ``buffer``."""
    _check_table("records", records, RECORD_DTYPE, "RECORD_DTYPE")
    raw = np.frombuffer(_readable_view(buffer), dtype=np.uint8)
    pos = records["topic_pos"].astype(np.int64)
    lengths = records["topic_len"].astype(np.int64)
    bad = np.flatnonzero((pos < 0) | (lengths < 0) | (pos > len(raw) - lengths))
    if len(bad):
        i = int(bad[0])
        raise _outside(i, int(records["position"][i]), "topic", int(pos[i]), int(lengths[i]), len(raw))
    width = max(int(lengths.max(initial=0)), 1)
    cols = np.arange(width)
    idx = np.minimum(pos[:, None] + cols, max(len(raw) - 1, 0))
    names = raw[idx] if len(raw) else np.zeros((len(records), width), dtype=np.uint8)
    names[cols >= lengths[:, None]] = 0
    return names, lengths


def queue_keys(buffer, records):
    """One uint64 per record of ``records`` (RECORD_DTYPE, decoded from ``buffer``): FNV-1a 64
    over its topic bytes, then its queue id (as uint32). Records of one (topic, queue id) get
    one key; check a grouping made from them with :func:`same_queues`. A topic outside
    ``buffer`` raises CorruptRecordError."""
    names, lengths = _topic_matrix(buffer, records)
    h = np.full(len(records), _FNV_BASIS, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for c in range(names.shape[1]):
            h = np.where(c < lengths, (h ^ names[:, c].astype(np.uint64)) * _FNV_PRIME, h)
        qids = records["queue_id"].astype(np.int64) & 0xFFFFFFFF
        return (h ^ qids.astype(np.uint64)) * _FNV_PRIME


# ---------------------------------------------------------------------------------------------
# Verify's scan: decode_batch and field_problems in one pass, as columns

SCAN_NOT_CONSUMABLE = 1  # verify_scan: PREPARED or ROLLBACK (no ConsumeQueue unit, §4.2)
SCAN_IMPLAUSIBLE_QUEUE_OFFSET = 2  # verify_scan: a queue offset no CommitLog holds (recordscan.plausible)


def verify_scan(buffer, start=0, end=None, *, base: int = 0, segment_size: int = _INT64_MAX, max_records=-1):
    """:func:`decode_batch` with CRCs checked and :func:`field_problems` in one pass, without a
    RECORD_DTYPE table: what verify needs of each record, as columns.

    Returns ``(columns, stop_pos, stop_reason)`` (stop as decode_batch's); ``columns`` is
    ``(offsets int64: base + position, sizes int32, queue_ids int32, queue_offsets int64,
    keys uint64: queue_keys, store_timestamps int64, flags uint8: field_problems' BAD_* bits,
    units uint8: SCAN_NOT_CONSUMABLE | SCAN_IMPLAUSIBLE_QUEUE_OFFSET)``, one entry per record.
    (Here: decode_batch and field_problems, then the columns taken from the rows.)"""
    rows, stop, reason = decode_batch(buffer, start, end, check_crc=True, max_records=max_records)
    flags, keys = field_problems(buffer, rows, base, segment_size)
    offsets = base + rows["position"].astype(np.int64)
    q = rows["queue_offset"].astype(np.int64)
    tx = rows["sys_flag"] & SYSFLAG_TRANSACTION_MASK
    units = np.where(
        (tx == TRANSACTION_PREPARED_TYPE) | (tx == TRANSACTION_ROLLBACK_TYPE), SCAN_NOT_CONSUMABLE, 0
    )
    units |= np.where(
        (q < 0) | (offsets < 0) | (q > offsets // RECORD_FIXED_LENGTH), SCAN_IMPLAUSIBLE_QUEUE_OFFSET, 0
    )
    columns = (
        offsets,
        rows["size"].astype(np.int32),
        rows["queue_id"].astype(np.int32),
        q,
        keys.astype(np.uint64),
        rows["store_timestamp"].astype(np.int64),
        flags.astype(np.uint8),
        units.astype(np.uint8),
    )
    return columns, stop, reason


# ---------------------------------------------------------------------------------------------
# ConsumeQueue units checked against the records verify found

UNIT_OK, UNIT_BAD, UNIT_LOST = 0, 1, 2  # check_units' verdicts
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_NO_UNIT_SALT = np.uint64(0x9E3779B97F4A7C15)  # record_digests: a record that gets no unit


def _mix64(z):
    """splitmix64's finalizer over a uint64 array (wrapping)."""
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def _unit_digests(keys, queue_ids, queue_offsets, sizes):
    qs = (np.asarray(queue_ids).astype(np.int64) & 0xFFFFFFFF).astype(np.uint64) << np.uint64(32)
    ss = (np.asarray(sizes).astype(np.int64) & 0xFFFFFFFF).astype(np.uint64)
    with np.errstate(over="ignore"):
        inner = _mix64(qs | ss)
        inner = _mix64(np.asarray(queue_offsets, dtype=np.int64).view(np.uint64) ^ inner)
        return _mix64(np.asarray(keys, dtype=np.uint64) ^ inner)


def queue_key(topic: str, queue_id: int) -> int:
    """:func:`queue_keys` of any record of (``topic``, ``queue_id``), from the names alone (a
    name read from a directory gets back the bytes ``os.listdir`` escaped)."""
    try:
        raw = topic.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate no file name escapes: never a record's topic
        raw = topic.encode("utf-8", "surrogatepass")
    h = int(_FNV_BASIS)
    for b in raw:
        h = ((h ^ b) * int(_FNV_PRIME)) & 0xFFFFFFFFFFFFFFFF
    return ((h ^ (queue_id & 0xFFFFFFFF)) * int(_FNV_PRIME)) & 0xFFFFFFFFFFFFFFFF


def record_digests(queue_ids, queue_offsets, sizes, keys, units):
    """One uint64 per record (verify_scan's columns): a 64-bit digest of its queue key, queue
    id, queue offset and size, which :func:`check_units` checks each ConsumeQueue unit against.
    A record whose ``units`` entry is not 0 (verify_scan's: it gets no unit) has a salted
    digest, which no unit's matches (but by a 64-bit collision, as the queue key's own)."""
    n = len(queue_ids)
    if not len(queue_offsets) == len(sizes) == len(keys) == len(units) == n:
        raise ValueError("the records' columns differ in length")
    d = _unit_digests(keys, queue_ids, queue_offsets, sizes)
    return np.where(np.asarray(units) != 0, d ^ _NO_UNIT_SALT, d)


def _unit_columns(units):
    if not isinstance(units, np.ndarray) or units.dtype != _CQ_UNIT_DTYPE or units.ndim != 1:
        raise ValueError("units must be a 1-d array of CQ_UNIT_DTYPE")
    return units["commitlog_offset"].astype(np.int64), units["size"].astype(np.int64)


def check_units(positions, digests, units, queue_id, key, first_queue_offset, damaged, low):
    """One uint8 per ConsumeQueue unit of ``units`` (CQ_UNIT_DTYPE) of the queue ``queue_id``
    whose queue key is ``key``, the units starting at queue offset ``first_queue_offset``:

    * UNIT_LOST: a placeholder (CommitLog offset 0, size PLACEHOLDER_SIZE): its message is lost;
    * UNIT_OK: a record found at the unit's CommitLog offset (``positions``, sorted ascending,
      ``digests`` alongside, from :func:`record_digests`) has that queue key, queue id, queue
      offset ``first_queue_offset + i`` and the unit's size; or the offset is in ``damaged``
      (sorted: records whose damage is reported already) or below ``low`` (deleted);
    * UNIT_BAD otherwise."""
    positions = np.ascontiguousarray(positions, dtype=np.int64)
    digests = np.ascontiguousarray(digests, dtype=np.uint64)
    if len(digests) != len(positions):
        raise ValueError(f"{len(digests)} digests for {len(positions)} records")
    phys, sizes = _unit_columns(units)
    n, m = len(positions), len(phys)
    ok = np.zeros(m, dtype=bool)
    if n and m:
        at = np.minimum(np.searchsorted(positions, phys), n - 1)
        want = _unit_digests(
            np.full(m, key, dtype=np.uint64),
            np.full(m, queue_id, dtype=np.int64),
            first_queue_offset + np.arange(m, dtype=np.int64),
            sizes,
        )
        ok = (positions[at] == phys) & (digests[at] == want)
    ok |= np.isin(phys, np.asarray(damaged, dtype=np.int64)) | (phys < low)
    out = np.where(ok, UNIT_OK, UNIT_BAD).astype(np.uint8)
    out[(phys == 0) & (sizes == _PLACEHOLDER_SIZE)] = UNIT_LOST
    return out


# ---------------------------------------------------------------------------------------------
# Grouping by queue: a grouping by key checked, each queue's offset range


def same_queues(buffer, records, representatives):
    """True when every record ``i`` has the topic bytes and queue id of record
    ``representatives[i]`` (int64 row numbers into ``records``). Out-of-range row numbers raise
    IndexError; a topic outside ``buffer`` raises CorruptRecordError."""
    reps = np.ascontiguousarray(representatives, dtype=np.int64)
    n = len(records)
    if len(reps) != n:
        raise ValueError(f"{len(reps)} representatives for {n} records")
    bad = np.flatnonzero((reps < 0) | (reps >= n))
    if len(bad):
        i = int(bad[0])
        raise IndexError(f"representative {int(reps[i])} of record {i} is not a row of the {n} records")
    names, lengths = _topic_matrix(buffer, records)
    qids = records["queue_id"]
    return bool(
        np.array_equal(qids, qids[reps])
        and np.array_equal(lengths, lengths[reps])
        and np.array_equal(names, names[reps])
    )


def queue_ranges(buffer, records, keys, base=None):
    """For each (topic, queue id) among ``records`` (RECORD_DTYPE, decoded from ``buffer``), in
    the order of its first record: that record's row, and the lowest and highest queue offset of
    its records, as three int64 arrays ``(first, low, high)``. ``keys`` are the records'
    :func:`queue_keys`. With ``base`` (the CommitLog offset ``buffer`` starts at) only records
    that get a ConsumeQueue unit count: not PREPARED or ROLLBACK, and a queue offset a CommitLog
    can hold (SCAN_NOT_CONSUMABLE, SCAN_IMPLAUSIBLE_QUEUE_OFFSET). None when two queues share a
    key (group them exactly instead); a topic outside ``buffer`` raises CorruptRecordError. One
    pass, no sort (here: numpy, with np.unique's sort)."""
    keys = np.ascontiguousarray(keys, dtype=np.uint64)
    n = len(records)
    if len(keys) != n:
        raise ValueError(f"{len(keys)} keys for {n} records")
    names, lengths = _topic_matrix(buffer, records)  # every topic inside the buffer, or raises
    rows = np.arange(n)
    if base is not None:
        at = base + records["position"].astype(np.int64)
        tx = records["sys_flag"] & SYSFLAG_TRANSACTION_MASK
        q = records["queue_offset"].astype(np.int64)
        rows = rows[
            (tx != TRANSACTION_PREPARED_TYPE)
            & (tx != TRANSACTION_ROLLBACK_TYPE)
            & (q >= 0)
            & (at >= 0)
            & (q <= at // RECORD_FIXED_LENGTH)
        ]
    if not len(rows):
        return tuple(np.zeros(0, dtype=np.int64) for _ in range(3))
    _uniq, first_of, inverse = np.unique(keys[rows], return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    rep = rows[first_of][inverse]  # each counted row's group representative
    qids = records["queue_id"]
    if not (
        np.array_equal(qids[rows], qids[rep])
        and np.array_equal(lengths[rows], lengths[rep])
        and np.array_equal(names[rows], names[rep])
    ):
        return None  # two queues share a key
    offsets = records["queue_offset"].astype(np.int64)[rows]
    low = np.full(len(first_of), np.iinfo(np.int64).max, dtype=np.int64)
    high = np.full(len(first_of), np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(low, inverse, offsets)
    np.maximum.at(high, inverse, offsets)
    order = np.argsort(first_of, kind="stable")  # groups in the order of their first record
    return rows[first_of][order].astype(np.int64), low[order], high[order]


# ---------------------------------------------------------------------------------------------
# Field cross-checks: what a record's fields must agree with

#: field_problems flags, one bit per check a record fails
BAD_TOPIC = 1  # empty, or a byte outside [%|a-zA-Z0-9_-]
BAD_PROPERTIES_UTF8 = 2  # properties not valid UTF-8
BAD_PHYSICAL_OFFSET = 4  # PHYSICALOFFSET is not base + position
BAD_NO_BLANK_ROOM = 8  # fewer than 8 bytes of the segment left after the record (§1.4)
BAD_SYSFLAG = 16  # sysFlag bits RocketMQ does not define, or compression type 4..7
BAD_PREPARED_OFFSET = 32  # PREPAREDTRANSACTIONOFFSET neither 0 nor an earlier record's offset
BAD_PROP_CRC = 64  # a trailing __CRC32# property (§1.6) that does not match the record
_KNOWN_SYSFLAG_BITS = 0x7FF
_TOPIC_BYTE = np.zeros(256, dtype=bool)
_TOPIC_BYTE[
    np.frombuffer(b"%|-_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", dtype=np.uint8)
] = True


def _gather(raw, starts, lengths):
    """The bytes ``raw[starts[i]:starts[i] + lengths[i]]`` of every row, concatenated, and the row
    each byte belongs to."""
    lengths = lengths.astype(np.int64)
    first = np.cumsum(lengths) - lengths
    idx = np.repeat(starts.astype(np.int64) - first, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)
    return raw[idx], np.repeat(np.arange(len(lengths)), lengths)


def _not_utf8(raw, starts, lengths):
    """Mask of the rows whose bytes are not valid UTF-8: one decode of them all, joined by NUL
    (which cannot complete or start a multi-byte sequence); row by row only when that fails."""
    bad = np.zeros(len(starts), dtype=bool)
    data, _owner = _gather(raw, starts, lengths)
    lengths = lengths.astype(np.int64)
    try:
        np.insert(data, (np.cumsum(lengths) - lengths)[1:], 0).tobytes().decode("utf-8")
    except UnicodeDecodeError:
        for i, (p, n) in enumerate(zip(starts.tolist(), lengths.tolist())):
            try:
                raw[p : p + n].tobytes().decode("utf-8")
            except UnicodeDecodeError:
                bad[i] = True
    return bad


def _prop_crc_bad(raw, records):
    """Mask of the records ending in a __CRC32# property (§1.6) whose CRC does not match."""
    pos = records["position"].astype(np.int64)
    ends = pos + records["size"]
    head = ends - _PROP_CRC_LENGTH  # a record is > 20 bytes long
    bad = np.zeros(len(records), dtype=bool)
    maybe = np.flatnonzero(
        (records["properties_len"] >= _PROP_CRC_LENGTH)
        & (raw[ends - 1] == 2)
        & (raw[head + len(_PROP_CRC_NAME) - 1] == 1)
        & (raw[head] == _PROP_CRC_NAME[0])
    )
    for i in maybe.tolist():
        tail = raw[head[i] : ends[i]]
        if not np.array_equal(tail[: len(_PROP_CRC_NAME)], _PROP_CRC_NAME):
            continue
        digits = tail[len(_PROP_CRC_NAME) : -1]
        if ((digits < 0x30) | (digits > 0x39)).any():
            bad[i] = True
            continue
        expected = sum((int(d) - 0x30) * 10**k for k, d in enumerate(digits))
        bad[i] = expected != zlib.crc32(raw[pos[i] : head[i]]) & 0x7FFFFFFF
    return bad


def field_problems(buffer, records, base: int = 0, segment_size: int = _INT64_MAX):
    """One uint8 per record of ``records`` (RECORD_DTYPE, decoded from ``buffer``, which starts
    at CommitLog offset ``base`` and is a segment of ``segment_size`` bytes): the BAD_* bits of
    the cross-checks the record fails, 0 for none (what :meth:`MessageStore.verify` checks
    beyond lengths and the body CRC); and the records' :func:`queue_keys`, from the same pass.
    A record, topic or properties outside ``buffer`` raises CorruptRecordError."""
    _check_table("records", records, RECORD_DTYPE, "RECORD_DTYPE")
    for name, value in (("base", base), ("segment_size", segment_size)):
        if not isinstance(value, int):
            raise TypeError(f"{name} must be an int, not {type(value).__name__}")
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise OverflowError(f"{name} {value} does not fit a Java long")
    raw = np.frombuffer(_readable_view(buffer), dtype=np.uint8)
    n = len(records)
    for what, pos, length in (
        ("record", "position", "size"),
        ("topic", "topic_pos", "topic_len"),
        ("properties", "properties_pos", "properties_len"),
    ):
        p, size = records[pos].astype(np.int64), records[length].astype(np.int64)
        bad = np.flatnonzero((p < 0) | (size < 0) | (p > len(raw) - size))
        if len(bad):
            i = int(bad[0])
            raise _outside(i, int(records["position"][i]), what, int(p[i]), int(size[i]), len(raw))
    flags = np.zeros(n, dtype=np.uint8)
    if not n:
        return flags, np.zeros(0, dtype=np.uint64)
    data, owner = _gather(raw, records["topic_pos"], records["topic_len"])
    flags[owner[~_TOPIC_BYTE[data]]] = BAD_TOPIC
    flags[records["topic_len"] == 0] = BAD_TOPIC
    flags[_not_utf8(raw, records["properties_pos"], records["properties_len"])] |= BAD_PROPERTIES_UTF8
    offsets = base + records["position"].astype(np.int64)
    flags[records["physical_offset"] != offsets] |= BAD_PHYSICAL_OFFSET
    ends = records["position"].astype(np.int64) + records["size"]
    flags[ends > segment_size - END_FILE_MIN_BLANK_LENGTH] |= BAD_NO_BLANK_ROOM
    sys_flag = records["sys_flag"].astype(np.int64) & 0xFFFFFFFF
    flags[((sys_flag & ~_KNOWN_SYSFLAG_BITS) != 0) | (((sys_flag >> 8) & 7) > 3)] |= BAD_SYSFLAG
    prepared = records["prepared_transaction_offset"]
    flags[(prepared != 0) & ((prepared < 0) | (prepared >= offsets))] |= BAD_PREPARED_OFFSET
    flags[_prop_crc_bad(raw, records)] |= BAD_PROP_CRC
    return flags, queue_keys(buffer, records)


# ---- recovery scan at disk speed: one call decodes, checks and groups a stretch of records ----


def recover_scan(
    buffer,
    start=0,
    end=None,
    *,
    base: int = 0,
    segment_size: int = _INT64_MAX,
    torn_from: int = _INT64_MAX,
    torn_mask: int = 0,
    max_records=-1,
):
    """What recovery needs of ``buffer[start:end]`` (a segment of ``segment_size`` bytes starting
    at CommitLog offset ``base``) in one pass, without a RECORD_DTYPE table.

    The records are those :func:`decode_batch` finds with CRCs checked, up to ``max_records``,
    except that the first record at or past position ``torn_from`` whose :func:`field_problems`
    has a bit of ``torn_mask`` ends them (a crash's torn record: not kept).

    Returns ``(count, stop, reason, torn, ranges)``: the records kept; decode_batch's stop and
    reason, or the torn record's position and STOP_CORRUPT with ``torn`` True; and ``ranges``, a
    list of ``(topic_pos, topic_len, queue_id, low, high)`` per (topic, queue id) among the kept
    records that get a ConsumeQueue unit (:func:`queue_ranges` with ``base``), in the order of
    their first record, or None when two queues share a key (group them exactly instead).
    (Here: decode_batch, field_problems and queue_ranges, composed.)"""
    rows, stop, reason = decode_batch(buffer, start, end, check_crc=True, max_records=max_records)
    torn = False
    if torn_mask and len(rows) and int(rows["position"][-1]) >= torn_from:
        tail = np.flatnonzero(rows["position"] >= torn_from)
        flags, _keys = field_problems(buffer, rows[tail], base, segment_size)
        bad = np.flatnonzero(flags & torn_mask)
        if len(bad):
            cut = int(tail[bad[0]])
            stop, reason, torn = int(rows["position"][cut]), STOP_CORRUPT, True
            rows = rows[:cut]
    grouped = queue_ranges(buffer, rows, queue_keys(buffer, rows), base)
    if grouped is None:
        return len(rows), stop, reason, torn, None
    first, low, high = grouped
    ranges = [
        (int(rows["topic_pos"][r]), int(rows["topic_len"][r]), int(rows["queue_id"][r]), lo, hi)
        for r, lo, hi in zip(first.tolist(), low.tolist(), high.tolist())
    ]
    return len(rows), stop, reason, torn, ranges
