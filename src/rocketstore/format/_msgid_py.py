"""Message ids (pure twin): offset ids and unique keys."""

from __future__ import annotations

from rocketstore.base._clock import month_start as _month_start
from rocketstore.errors import (
    InvalidMessageIdError,
)
from rocketstore.format._record_py import (
    _INT64_MAX,
    _INT64_MIN,
    _check_int,
)
from rocketstore.message import host_raw as _host_raw

# ---------------------------------------------------------------------------------------------
# Message ids (§3)


_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def _unhex(s, what):
    if not isinstance(s, str):
        raise InvalidMessageIdError(f"{what} must be a str, not {type(s).__name__}")
    if len(s) not in (32, 56):
        raise InvalidMessageIdError(f"{what} {s!r} is not 32 or 56 hex characters long")
    if not s.isascii() or not all(c in _HEX_DIGITS for c in s):
        raise InvalidMessageIdError(f"{what} {s!r} is not hexadecimal")
    return bytes.fromhex(s)


def parse_offset_msg_id(s: str):
    """``(host_bytes, port, offset)`` of an offsetMsgId; InvalidMessageIdError if malformed."""
    raw = _unhex(s, "offsetMsgId")
    ip_len = len(raw) - 12
    return (
        raw[:ip_len],
        int.from_bytes(raw[ip_len : ip_len + 4], "big", signed=True),
        int.from_bytes(raw[ip_len + 4 :], "big", signed=True),
    )


def make_uniq_key(
    ip_bytes, pid: int, loader_hash: int, time_ms: int, counter: int, month_start_ms: int
) -> str:
    """UNIQ_KEY (§3.2): ip, pid (16 bits), class-loader hash, ms since month start (32 bits), counter."""
    raw = _host_raw(ip_bytes)
    for name, value in (
        ("pid", pid),
        ("loader_hash", loader_hash),
        ("time_ms", time_ms),
        ("counter", counter),
        ("month_start_ms", month_start_ms),
    ):
        _check_int(value, name, _INT64_MIN, _INT64_MAX)
    span = (time_ms - month_start_ms) & 0xFFFFFFFF
    if span >= 0x80000000 and span - (1 << 32) > -1000000:
        span = 0  # 5.x: a clock stepped back by less than 1000 s counts as the month start
    return (
        (
            raw
            + (pid & 0xFFFF).to_bytes(2, "big")
            + (loader_hash & 0xFFFFFFFF).to_bytes(4, "big")
            + span.to_bytes(4, "big")
            + (counter & 0xFFFF).to_bytes(2, "big")
        )
        .hex()
        .upper()
    )


def uniq_key_time(key: str, now_ms: int, month_start_fn=None) -> int:
    """getNearlyTimeFromID: the creation time a UNIQ_KEY encodes, as seen at ``now_ms``.

    ``month_start_fn(ms)`` gives the start of the month containing ``ms`` (default: local time).
    """
    raw = _unhex(key, "UNIQ_KEY")
    ip_len = len(raw) - 12
    span = int.from_bytes(raw[ip_len + 6 : ip_len + 10], "big")
    month_start = month_start_fn or _month_start
    base = month_start(now_ms)
    if base + span >= now_ms:
        base = month_start(base - 1)
    return base + span
