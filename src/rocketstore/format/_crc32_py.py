"""CRC-32, byte for byte zlib's, over any C-contiguous buffer: rocketstore's BODYCRC.

The pure-Python twin of the compiled ``rocketstore.format._crc32``, built on :func:`zlib.crc32`.
"""

from __future__ import annotations

import operator
import zlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ["crc32", "masked_crc32", "IMPLEMENTATION"]

#: Name of the implementation in use; the compiled twin names its SIMD or table path instead.
IMPLEMENTATION = "zlib"


def crc32(data: Buffer, value: int = 0) -> int:
    """CRC-32 of ``data`` continuing from ``value``; equal to ``zlib.crc32(data, value)``.

    ``data`` is any C-contiguous buffer (bytes, bytearray, memoryview, numpy array);
    ``value`` must be in ``0 .. 2**32-1`` (zlib itself would silently truncate it).
    """
    start = operator.index(value)
    if not 0 <= start <= 0xFFFFFFFF:
        raise ValueError(f"value must be in 0..2**32-1, got {value!r}")
    return zlib.crc32(data, start)


def masked_crc32(data: Buffer) -> int:
    """``crc32(data) & 0x7FFFFFFF``: the BODYCRC field of a RocketMQ CommitLog record."""
    return zlib.crc32(data) & 0x7FFFFFFF
