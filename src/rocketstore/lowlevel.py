"""The format-level functions under the store, for tools that work on RocketMQ's bytes directly.

An application opens a :class:`rocketstore.MessageStore` and needs none of these. A tool that
reads segment files, writes test data or checks a broker's records may use them: each is the
implementation's (compiled when it is built, else the pure-Python twin), as the store's own.

- ``crc32(data)``: the CRC32 RocketMQ stores in a record's BODYCRC (zlib's polynomial).
- ``java_hash(text)``: Java's ``String.hashCode`` (the index's key hash, a queue's choice).
- ``encode_record(...)``, ``decode_record(buffer, position)``: one CommitLog record.
- ``decode_batch(buffer)``: every record of a buffer, as a numpy structured array of fields.
- ``inner_messages(msg)``: the messages of a RocketMQ 5.x inner batch record (a BatchCQ topic's),
  each at its own queue offset, as RocketMQ's client unwraps them; any other record as it is.
- ``CQ_UNIT_DTYPE``: the 20-byte ConsumeQueue unit (commitlog_offset, size, tags_code), big-endian.

docs/format.md describes the bytes.
"""

from rocketstore._impl import DEFAULT as _DEFAULT
from rocketstore.format.units import CQ_UNIT_DTYPE
from rocketstore.queues.innerbatch import inner_messages

__all__ = [
    "crc32",
    "java_hash",
    "encode_record",
    "decode_record",
    "decode_batch",
    "inner_messages",
    "CQ_UNIT_DTYPE",
]

crc32 = _DEFAULT.crc32.crc32
java_hash = _DEFAULT.codec.java_hash
encode_record = _DEFAULT.codec.encode_record
decode_record = _DEFAULT.codec.decode_record
decode_batch = _DEFAULT.codec.decode_batch
