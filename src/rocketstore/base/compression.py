"""Compressed bodies: what RocketMQ's clients write and read (sysFlag bit 0 and bits 8-10).

A producer may compress a body before it sends it; the broker stores the compressed bytes as
they came and the consumer's client inflates them. The sysFlag says so: bit ``0x001``
(COMPRESSED_FLAG) marks a compressed body, and since 4.9.4 bits ``0x700`` name the codec,
``(sys_flag >> 8) & 7``: 1 LZ4, 2 ZSTD, 3 ZLIB, and 0 ZLIB too (4.x clients wrote only zlib and
left those bits clear). rocketstore stores the bytes as given as well; ``MessageExt.body`` is the
inflated body, as a RocketMQ consumer sees it, and ``MessageExt.stored_body`` the bytes stored.

The codecs are those of the Java client: zlib streams (``java.util.zip.Deflater``), LZ4 frames
(``LZ4FrameOutputStream``) and zstd frames (``ZstdOutputStream``). zlib is in Python; LZ4 and
zstd need the packages ``lz4`` and ``zstandard`` (the extras ``.[lz4]`` and ``.[zstd]`` of a
clone).
"""

from __future__ import annotations

import importlib
import zlib
from typing import Any

from rocketstore.errors import CompressionUnavailableError, CorruptRecordError, InvalidMessageError

__all__ = ["COMPRESSED_FLAG", "CODECS", "codec_of", "inflate", "deflate", "sys_flag_bits"]

COMPRESSED_FLAG = 0x001
COMPRESSION_TYPE_MASK = 0x700
LZ4, ZSTD, ZLIB = 1, 2, 3
#: the names ``put(..., compress=...)`` takes, and their type in bits 8-10
CODECS = {"zlib": ZLIB, "lz4": LZ4, "zstd": ZSTD}
_NAMES = {0: "zlib", ZLIB: "zlib", LZ4: "lz4", ZSTD: "zstd"}
#: RocketMQ's ``compressLevel`` default (zlib and zstd); LZ4 frames have no level in the client
DEFAULT_LEVEL = 5


def codec_of(sys_flag: int) -> str:
    """The codec a compressed record's sysFlag names ("zlib", "lz4" or "zstd")."""
    kind = (sys_flag & COMPRESSION_TYPE_MASK) >> 8
    name = _NAMES.get(kind)
    if name is None:
        raise CorruptRecordError(f"sysFlag {sys_flag:#x} names compression type {kind}, which does not exist")
    return name


def sys_flag_bits(codec: str) -> int:
    """The sysFlag bits of a body compressed with ``codec``."""
    return COMPRESSED_FLAG | (CODECS[codec] << 8)


def inflate(stored: Any, sys_flag: int) -> bytes:
    """The body a producer compressed into ``stored`` (sysFlag ``sys_flag``)."""
    codec = codec_of(sys_flag)
    data = bytes(stored)
    try:
        if codec == "zlib":
            return zlib.decompress(data)
        if codec == "lz4":
            out: bytes = _lz4().decompress(data)
            return out
        decompressor = _zstd().ZstdDecompressor().decompressobj()
        inflated: bytes = decompressor.decompress(data)
        return inflated
    except CompressionUnavailableError:
        raise
    except Exception as exc:  # each library has its own error types
        raise CorruptRecordError(f"the body is not valid {codec} data: {exc}") from None


def deflate(body: Any, codec: str, level: int = DEFAULT_LEVEL) -> bytes:
    """``body`` compressed with ``codec`` as RocketMQ's Java client compresses it."""
    if codec not in CODECS:
        raise InvalidMessageError(f"compress must be one of {sorted(CODECS)}, not {codec!r}")
    data = bytes(body)
    if codec == "zlib":
        return zlib.compress(data, level)
    if codec == "lz4":
        out: bytes = _lz4().compress(data)
        return out
    compressed: bytes = _zstd().ZstdCompressor(level=level).compress(data)
    return compressed


def _lz4() -> Any:
    try:  # (imported by name: the library is an optional extra, without type hints)
        frame = importlib.import_module("lz4.frame")
    except ImportError:
        raise CompressionUnavailableError(
            "LZ4 bodies need the lz4 package: pip install lz4 (in a clone: pip install '.[lz4]')"
        ) from None
    return frame


def _zstd() -> Any:
    try:
        zstandard = importlib.import_module("zstandard")
    except ImportError:
        raise CompressionUnavailableError(
            "zstd bodies need the zstandard package: pip install zstandard (in a clone: pip install '.[zstd]')"
        ) from None
    return zstandard
