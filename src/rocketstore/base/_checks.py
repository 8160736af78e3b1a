"""Argument checks shared by the store and both twins, so bad input raises the same typed error
(from ``rocketstore.errors``) in every implementation before anything is written."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from typing import Any, Optional

import numpy as np

from rocketstore.errors import InvalidMessageError, InvalidQueueIdError

__all__ = [
    "check_int",
    "check_put_ints",
    "check_mapping",
    "plain_str",
    "contiguous",
    "batch_lengths",
    "timeout_ms",
    "wait_deadline",
    "java_int",
    "INT32_MIN",
    "INT32_MAX",
    "INT64_MIN",
    "INT64_MAX",
]

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
_JAVA_INT = re.compile(r"[+-]?[0-9]+")  # (ASCII digits: Java's radix-10 parse takes no others)


def java_int(text: object, bits: int = 32) -> Optional[int]:
    """``text`` read as Java's ``Integer.parseInt`` (``bits=32``) or ``Long.parseLong`` (64) reads
    it; None where Java throws (not text, a sign alone, a space, an underscore, out of range)."""
    if not isinstance(text, str) or _JAVA_INT.fullmatch(text) is None:
        return None
    value = int(text)
    limit = 1 << (bits - 1)
    return value if -limit <= value < limit else None


def check_int(
    name: str,
    value: object,
    minimum: Optional[int] = None,
    maximum: int = INT64_MAX,
    error: type[Exception] = InvalidMessageError,
) -> int:
    """``value`` as an int in ``[minimum, maximum]`` (default: a Java long), else ``error``.
    bool, float and other types are refused (never truncated); numpy integers are accepted."""
    if type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise error(f"{name} must be an int, not {type(value).__name__}")
        value = int(value)
    lo = INT64_MIN if minimum is None else minimum
    if value < lo:
        raise error(f"{name} must be >= {lo}, not {value}")
    if value > maximum:
        raise error(f"{name} must be <= {maximum}, not {value}")
    return value


def check_put_ints(queue_id: object, flag: object) -> tuple[int, int]:
    """A put's queue id (-1: any queue, else 0 .. 2**31-1; the topic's count is checked by the
    core) and flag (a Java int)."""
    return (
        check_int("queue_id", queue_id, -1, INT32_MAX, InvalidQueueIdError),
        check_int("flag", flag, INT32_MIN, INT32_MAX),
    )


def contiguous(body: Any, what: str = "body") -> Any:
    """``body`` itself when it exports a C-contiguous buffer, else a bytes copy of it (a strided
    memoryview or numpy slice); TypeError naming ``what`` for objects that are not bytes-like."""
    if type(body) is bytes:
        return body
    try:
        view = memoryview(body)
    except TypeError:
        raise TypeError(
            f"{what} must be bytes-like (bytes, bytearray, memoryview, a numpy array), not {type(body).__name__}"
            + (": encode text first, e.g. text.encode()" if isinstance(body, str) else "")
        ) from None
    return body if view.c_contiguous else view.tobytes()


def batch_lengths(lengths: Any) -> np.ndarray:
    """``put_batch``'s ``lengths`` as a one-dimensional int64 array of non-negative lengths."""
    try:
        arr = np.asarray(lengths)
        if arr.dtype.kind not in "iu" and arr.size:
            raise InvalidMessageError(f"lengths must be ints, not {arr.dtype}")
        lens = np.ascontiguousarray(arr, dtype=np.int64)
    except (OverflowError, ValueError, TypeError) as exc:
        if isinstance(exc, InvalidMessageError):
            raise
        raise InvalidMessageError(f"lengths must be a sequence of ints: {exc}") from None
    if lens.ndim != 1:
        raise InvalidMessageError("lengths must be one-dimensional")
    if (lens < 0).any():
        raise InvalidMessageError(f"lengths[{int(np.argmax(lens < 0))}] is negative")
    return lens


def plain_str(value: Any) -> Any:
    """A str subclass as a plain str (the compiled twin takes only exact str, the pure one any
    str: both then answer alike); anything else as it is, for the callee to check."""
    return str.__str__(value) if isinstance(value, str) and type(value) is not str else value


def check_mapping(properties: object) -> Optional[Mapping[str, str]]:
    """``properties`` if it is None or a mapping; InvalidMessageError otherwise."""
    if properties is not None and not isinstance(properties, Mapping):
        raise InvalidMessageError(f"properties must be a mapping, not {type(properties).__name__}")
    return properties


def timeout_ms(timeout: object) -> int:
    """A timeout in seconds (None or inf: no limit) as the cores' milliseconds (-1: no limit)."""
    if timeout is None:
        return -1
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float, np.integer, np.floating)):
        raise TypeError(f"timeout must be a number of seconds or None, not {type(timeout).__name__}")
    if math.isnan(timeout) or timeout < 0:
        raise ValueError(f"timeout must be >= 0 seconds, not {timeout}")
    if math.isinf(timeout):
        return -1
    return min(int(timeout * 1000), INT64_MAX // 2)


def wait_deadline(wait: Optional[float]) -> Optional[float]:
    """The monotonic time a wait of ``wait`` seconds ends (inf: no limit), None: no wait."""
    if wait is None:
        return None
    ms = timeout_ms(wait)
    return math.inf if ms < 0 else time.monotonic() + ms / 1000.0
