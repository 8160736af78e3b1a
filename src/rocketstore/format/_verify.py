"""The per-record checks of :meth:`MessageStore.verify` beyond lengths and the body CRC.

RocketMQ's record has a CRC over its body only (and, from 5.2, an optional one over the whole
record, spec §1.6). What else a flipped bit can be caught by is a cross-check: a field that must
agree with where the record lies, with another field, with a rule every writer follows, or with
its neighbours. ``scan.field_problems`` runs the per-record ones in one pass (in C for the
compiled twin); this module turns its flags into reasons and checks store timestamps against
their neighbours. :meth:`rocketstore.queues.queuecheck.QueueGuard.verify` checks each ConsumeQueue unit against the
topic, queue id, queue offset and size of its record.

What no check can see (a valid value turned into another valid one): FLAG, BORNTIMESTAMP, both
hosts and ports, RECONSUMETIMES, a store timestamp moved by less than TIMESTAMP_WINDOW_MS, and
property names and values that stay valid UTF-8 — unless the record carries the §1.6 CRC32
property, which covers all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "record_problems",
    "timestamp_problems",
    "TIMESTAMP_WINDOW_MS",
    "PROP_CRC_LENGTH",
    "prop_crc_digits",
]

#: A store timestamp further than this outside the range of its two neighbours' is reported.
#: Store timestamps never decrease in file order in rocketstore, nor in a Java broker unless its
#: clock was stepped back (by more than a day, and forward again, to false-alarm here).
TIMESTAMP_WINDOW_MS = 86_400_000
#: The §1.6 property: b"__CRC32#", 0x01, 10 digits, 0x02 (CommitLog.CRC32_RESERVED_LEN).
PROP_CRC_LENGTH = 20


def prop_crc_digits(crc: int) -> bytes:
    """The 10 digits of a ``__CRC32#`` property for ``crc`` (masked to 31 bits): least
    significant first, padded with '0' (MessageDecoder.createCrc32)."""
    crc &= 0x7FFFFFFF
    out = bytearray()
    for _ in range(10):
        out.append(0x30 + crc % 10)
        crc //= 10
    return bytes(out)


def record_problems(
    scan: Any, view: Any, base: int, rows: np.ndarray, segment_size: int
) -> tuple[list[tuple[int, str]], np.ndarray]:
    """``([(commitlog offset, reason), ...], queue keys)`` for ``rows`` (decoded from segment
    ``view``, which starts at CommitLog offset ``base``; ``scan``: the scan kernels' twin): what
    is wrong with their fields, and their ``scan.queue_keys`` (computed in the same pass)."""
    flags, keys = scan.field_problems(view, rows, base, segment_size)
    out: list[tuple[int, str]] = []
    for i in np.flatnonzero(flags).tolist():
        row, f = rows[i], int(flags[i])
        offset = base + int(row["position"])
        reasons: dict[int, Callable[[], str]] = {
            scan.BAD_PHYSICAL_OFFSET: lambda: (
                f"PhysicalOffset field says {int(row['physical_offset'])}, the record is at {offset}"
            ),
            scan.BAD_NO_BLANK_ROOM: lambda: (
                f"record of {int(row['size'])} bytes leaves no room for the segment's BLANK end record"
            ),
            scan.BAD_SYSFLAG: lambda: (
                f"sysFlag {int(row['sys_flag']) & 0xFFFFFFFF:#x} has bits or a "
                f"compression type RocketMQ does not define"
            ),
            scan.BAD_PREPARED_OFFSET: lambda: (
                f"PreparedTransactionOffset "
                f"{int(row['prepared_transaction_offset'])} is not an "
                f"earlier record's offset"
            ),
            scan.BAD_TOPIC: lambda: "topic is empty or has characters outside [%|a-zA-Z0-9_-]",
            scan.BAD_PROPERTIES_UTF8: lambda: "properties are not valid UTF-8",
            scan.BAD_PROP_CRC: lambda: "record CRC mismatch: its __CRC32# property does not match its bytes",
        }
        out.extend((offset, reason()) for bit, reason in reasons.items() if f & bit)
    return out, keys


def timestamp_problems(offsets: Any, timestamps: Any) -> list[tuple[int, str]]:
    """Store timestamps (in CommitLog order) implausible against their neighbours: further than
    TIMESTAMP_WINDOW_MS outside the range of the two around them; the first record later than
    the second, and the last earlier than the one before, by more than that; any negative one."""
    ts = np.asarray(timestamps, dtype=np.int64)
    n = len(ts)
    if n == 0 or (ts[0] >= 0 and (np.diff(ts) >= 0).all()):
        return []  # the usual case: never decreasing, so each lies between its neighbours
    t = ts.astype(np.float64)  # no int64 overflow at the window's edges
    w = float(TIMESTAMP_WINDOW_MS)
    bad = ts < 0
    if n >= 2:
        bad[0] |= t[0] > t[1] + w
        bad[-1] |= t[-1] < t[-2] - w
    if n >= 3:
        prev, cur, nxt = t[:-2], t[1:-1], t[2:]
        bad[1:-1] |= (cur < np.minimum(prev, nxt) - w) | (cur > np.maximum(prev, nxt) + w)
    return [
        (
            int(offsets[i]),
            f"store timestamp {int(ts[i])} is implausible beside its neighbours' "
            f"({', '.join(str(int(ts[j])) for j in (i - 1, i + 1) if 0 <= j < n)})",
        )
        for i in np.flatnonzero(bad)
    ]
