"""The per-record checks of :meth:`MessageStore.verify` beyond the body CRC, vectorised.

RocketMQ's record has a CRC over its body only (and, from 5.2, an optional one over the whole
record, spec §1.6). What else a flipped bit can be caught by is a cross-check: a field that must
agree with where the record lies, with another field, with a rule every writer follows, or with
its neighbours. Each function here takes ``RECORD_DTYPE`` rows (positions relative to ``view``)
and returns ``[(commitlog offset, reason), ...]`` without a Python step per record unless a
record fails.

What no check can see (a valid value turned into another valid one): FLAG, BORNTIMESTAMP, both
hosts and ports, RECONSUMETIMES, the low bits of STORETIMESTAMP (within
:data:`TIMESTAMP_WINDOW_MS` of its neighbours), and property names and values other than TAGS
(which the ConsumeQueue's tagsCode cross-checks) as long as they stay valid UTF-8 — unless the
record carries the §1.6 CRC32 property.
"""

from __future__ import annotations

import zlib

import numpy as np

__all__ = ["record_problems", "timestamp_problems", "TIMESTAMP_WINDOW_MS", "KNOWN_SYSFLAG_BITS",
           "CQ_EXT_MAX_ADDR", "PROP_CRC_LENGTH", "prop_crc_digits", "prop_crc_value"]

#: Every sysFlag bit RocketMQ (4.x and 5.x) defines: compressed, multi tags, transaction type,
#: IPv6 born / store host, need unwrap, inner batch, compression type (bits 8-10, values 0-3).
KNOWN_SYSFLAG_BITS = 0x7FF
_COMPRESSION_SHIFT = 8
_MAX_COMPRESSION_TYPE = 3
#: A store timestamp further than this outside the range of its two neighbours' is reported.
#: Store timestamps never decrease in file order in rocketstore, nor in a Java broker unless its
#: clock was stepped back (by more than a day, and forward again, to false-alarm here).
TIMESTAMP_WINDOW_MS = 86_400_000
#: A ConsumeQueue tagsCode at or below this is a ConsumeQueueExt address, not a tags hash.
CQ_EXT_MAX_ADDR = -(1 << 31) - 1
#: The §1.6 property: b"__CRC32#", 0x01, 10 digits, 0x02 (CommitLog.CRC32_RESERVED_LEN).
_PROP_CRC_HEAD = np.frombuffer(b"__CRC32#\x01", dtype=np.uint8)
PROP_CRC_LENGTH = len(_PROP_CRC_HEAD) + 10 + 1
END_FILE_MIN_BLANK_LENGTH = 8      # every record leaves room for a BLANK record after it (§1.4)

def record_problems(codec, view, base: int, rows, segment_size: int) -> list:
    """What is wrong with the fields of ``rows`` (decoded from segment ``view``, which starts at
    CommitLog offset ``base``, by ``codec``), field by field."""
    if not len(rows):
        return []
    raw = np.frombuffer(view, dtype=np.uint8)
    offsets = base + rows["position"].astype(np.int64)
    out = []

    def report(mask, reason):
        for i in np.flatnonzero(mask):
            out.append((int(offsets[i]), reason(int(i))))

    phys = rows["physical_offset"]
    report(phys != offsets, lambda i: f"PhysicalOffset field says {int(phys[i])}, the record is at "
                                      f"{int(offsets[i])}")
    ends = rows["position"].astype(np.int64) + rows["size"]
    report(ends + END_FILE_MIN_BLANK_LENGTH > segment_size,
           lambda i: f"record of {int(rows['size'][i])} bytes leaves no room for the segment's "
                     f"BLANK end record")
    sys_flag = rows["sys_flag"].astype(np.int64) & 0xFFFFFFFF
    unknown = (sys_flag & ~KNOWN_SYSFLAG_BITS) != 0
    report(unknown, lambda i: f"sysFlag {int(sys_flag[i]):#x} has bits RocketMQ does not define")
    compression = (sys_flag >> _COMPRESSION_SHIFT) & 0x7
    report(~unknown & (compression > _MAX_COMPRESSION_TYPE),
           lambda i: f"sysFlag {int(sys_flag[i]):#x} names compression type {int(compression[i])}, "
                     f"which does not exist")
    prepared = rows["prepared_transaction_offset"]
    report((prepared != 0) & ((prepared < 0) | (prepared >= offsets)),
           lambda i: f"PreparedTransactionOffset {int(prepared[i])} is not an earlier record's offset")
    text = codec.text_problems(view, rows)
    report(text & codec.TEXT_BAD_TOPIC, lambda i: "topic is empty or has characters outside "
                                                  "[%|a-zA-Z0-9_-]")
    report(text & codec.TEXT_BAD_PROPERTIES, lambda i: "properties are not valid UTF-8")
    out.extend(prop_crc_problems(raw, offsets, rows))
    return out


def prop_crc_value(digits) -> int:
    """The CRC of a ``__CRC32#`` property's 10 digits: least significant first (§1.6)."""
    return sum((d - 0x30) * 10 ** k for k, d in enumerate(bytes(digits)))


def prop_crc_digits(crc: int) -> bytes:
    """The 10 digits of a ``__CRC32#`` property for ``crc`` (masked to 31 bits): least
    significant first, padded with '0' (MessageDecoder.createCrc32)."""
    crc &= 0x7FFFFFFF
    out = bytearray()
    for _ in range(10):
        out.append(0x30 + crc % 10)
        crc //= 10
    return bytes(out)


def prop_crc_problems(raw, offsets, rows) -> list:
    """Records whose properties end in the §1.6 CRC32 property (``__CRC32#``, 0x01, 10 digits,
    0x02) whose CRC does not match the record's bytes before those 20."""
    ends = rows["position"].astype(np.int64) + rows["size"]     # a record is > 20 bytes long
    head = ends - PROP_CRC_LENGTH
    maybe = np.flatnonzero((rows["properties_len"] >= PROP_CRC_LENGTH) & (raw[ends - 1] == 2)
                           & (raw[head + len(_PROP_CRC_HEAD) - 1] == 1) & (raw[head] == _PROP_CRC_HEAD[0]))
    if not len(maybe):
        return []
    tails = np.zeros((len(rows), PROP_CRC_LENGTH), dtype=np.uint8)
    tails[maybe] = raw[head[maybe][:, None] + np.arange(PROP_CRC_LENGTH)]
    has = (tails[:, :len(_PROP_CRC_HEAD)] == _PROP_CRC_HEAD).all(axis=1)
    out = []
    for i in np.flatnonzero(has):
        digits = tails[i, len(_PROP_CRC_HEAD):-1]
        start = int(rows["position"][i])
        if ((digits < 0x30) | (digits > 0x39)).any():
            out.append((int(offsets[i]), "the __CRC32# property is not 10 digits"))
            continue
        expected = prop_crc_value(digits)
        actual = zlib.crc32(raw[start:int(ends[i]) - PROP_CRC_LENGTH]) & 0x7FFFFFFF
        if actual != expected:
            out.append((int(offsets[i]), f"record CRC mismatch: its __CRC32# property says {expected}, "
                                         f"its bytes give {actual}"))
    return out


def timestamp_problems(offsets, timestamps) -> list:
    """Store timestamps (in CommitLog order) implausible against their neighbours: further than
    TIMESTAMP_WINDOW_MS outside the range of the two around them; the first record later than
    the second, and the last earlier than the one before, by more than that; any negative one."""
    ts = np.asarray(timestamps, dtype=np.int64)
    n = len(ts)
    if n == 0:
        return []
    t = ts.astype(np.float64)          # no int64 overflow at the window's edges
    w = float(TIMESTAMP_WINDOW_MS)
    bad = ts < 0
    if n >= 2:
        bad[0] |= t[0] > t[1] + w
        bad[-1] |= t[-1] < t[-2] - w
    if n >= 3:
        prev, cur, nxt = t[:-2], t[1:-1], t[2:]
        bad[1:-1] |= (cur < np.minimum(prev, nxt) - w) | (cur > np.maximum(prev, nxt) + w)
    return [(int(offsets[i]), f"store timestamp {int(ts[i])} is implausible beside its neighbours' "
                              f"({', '.join(str(int(ts[j])) for j in (i - 1, i + 1) if 0 <= j < n)})")
            for i in np.flatnonzero(bad)]
