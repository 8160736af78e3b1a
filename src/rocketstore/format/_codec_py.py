"""CommitLog record codec, Java hashes and message ids: the pure-Python twin of ``rocketstore.format._codec``.

Both twins have the same public names, raise the same exceptions with the same messages, and
produce identical bytes and arrays; tests/test_codec_properties.py checks that they do. The kernels
over a stretch of records (queue keys and ranges, field checks, verify's and recovery's scans) are
in :mod:`rocketstore.format._scan_py`.

CommitLog record (spec §1.1), V1 magic, IPv4 hosts; all integers big-endian, signed:

=====  ==========  ======  ===========================================================
 #      position    size    field
=====  ==========  ======  ===========================================================
  1     0           4       TOTALSIZE: length of the whole record
  2     4           4       MAGICCODE: V1 0xDAA320A7 (V2 0xDAA320AB: 2-byte topic length)
  3     8           4       BODYCRC: crc32(body) & 0x7FFFFFFF, 0 for an empty body
  4     12          4       QUEUEID
  5     16          4       FLAG
  6     20          8       QUEUEOFFSET
  7     28          8       PHYSICALOFFSET: CommitLog offset of the record's first byte
  8     36          4       SYSFLAG (0x10: born host IPv6, 0x20: store host IPv6)
  9     40          8       BORNTIMESTAMP
 10     48          8       BORNHOST: 4 address bytes + int port (IPv6: 16 + 4)
 11     56          8       STORETIMESTAMP         (+12 from here if the born host is IPv6)
 12     64          8       STOREHOST: as BORNHOST (IPv6 when SYSFLAG 0x20)
 13     72          4       RECONSUMETIMES         (+12 per IPv6 host from here)
 14     76          8       PREPAREDTRANSACTIONOFFSET
 15     84          4 + B   BODY: int length B, then B bytes
 16     88+B        1 + T   TOPIC: signed-byte length T (V2: signed short), then T bytes UTF-8
 17     89+B+T      2 + P   PROPERTIES: signed-short length P, then P bytes (§2)
=====  ==========  ======  ===========================================================

``TOTALSIZE = 91 + B + T + P``, plus 12 per IPv6 host and 1 for V2. Encoding always writes V1;
decoding reads V1 and V2. A BLANK end-of-file record is 8 header bytes (``maxBlank``,
``0xCBD43194``) followed by don't-care filler up to the end of the segment.

Text: topics and properties are UTF-8. Decoding uses ``errors="surrogateescape"`` so that any
bytes decode without raising (a topic re-encodes with the same handler to the same bytes;
:func:`encode_properties` refuses such escapes, as Java would read them back as U+FFFD: pass
raw bytes to write invalid UTF-8); valid UTF-8, which every Java writer produces, decodes
exactly as Java would. Java hashes are
over UTF-16 code units (lone surrogates count as themselves), so ``java_hash`` of such an
escaped string equals ``java_hash_bytes`` of the raw bytes.
"""

from __future__ import annotations

from rocketstore.format._dispatch_py import (
    dispatch_few,
    dispatch_info,
    property_pieces,
)
from rocketstore.format._lookups_py import (
    DispatchState,
    IndexFileState,
    IndexState,
    MappedState,
    PullResult,
    QueueState,
    QueueTable,
    SegmentTable,
    key_lookup,
    key_messages,
    message_by_id,
    queue_message,
    queue_messages,
    record_at,
    unique_lookup,
)
from rocketstore.format._messages_py import (
    PULL_DAMAGED,
    PULL_END,
    PULL_FULL,
    PULL_OUTSIDE,
    messages_from_rows,
    pull_units,
    record_from_row,
    row_messages,
    segment_messages,
)
from rocketstore.format._msgid_py import (
    make_uniq_key,
    parse_offset_msg_id,
    uniq_key_time,
)
from rocketstore.format._pop_py import (
    POP_SNAPSHOT_CHECK_EVERY,
    FastRLock,
    PopAcker,
    PopLane,
    checkpoint_run,
    receipt_handles,
    received_rows,
    reconsume_times,
)
from rocketstore.format._record_py import (
    DEFAULT_DELAY_LEVELS_MS,
    DISPATCH_DTYPE,
    KEYREF_DTYPE,
    PIECE_DTYPE,
    RECORD_DTYPE,
    SCHEDULE_TOPIC,
    body_crc,
    decode_batch,
    decode_properties,
    decode_record,
    encode_blank_into,
    encode_properties,
    encode_record,
    encode_record_into,
    index_key_hash,
    java_hash,
    java_hash_bytes,
    plain_message_items,
    put_properties,
    record_length,
    tags_code,
)
from rocketstore.format._record_py import (
    END_FILE_MIN_BLANK_LENGTH as END_FILE_MIN_BLANK_LENGTH,
)
from rocketstore.format._record_py import (
    HOST_V4_LENGTH as HOST_V4_LENGTH,
)
from rocketstore.format._record_py import (
    HOST_V6_EXTRA_LENGTH as HOST_V6_EXTRA_LENGTH,
)
from rocketstore.format._record_py import (
    HOST_V6_LENGTH as HOST_V6_LENGTH,
)
from rocketstore.format._record_py import (
    INT_SIZE as INT_SIZE,
)
from rocketstore.format._record_py import (
    LONG_SIZE as LONG_SIZE,
)
from rocketstore.format._record_py import (
    MAGIC_BLANK as MAGIC_BLANK,
)
from rocketstore.format._record_py import (
    MAGIC_V1 as MAGIC_V1,
)
from rocketstore.format._record_py import (
    MAGIC_V2 as MAGIC_V2,
)
from rocketstore.format._record_py import (
    MAX_PROPERTIES_LENGTH as MAX_PROPERTIES_LENGTH,
)
from rocketstore.format._record_py import (
    MAX_TOPIC_LENGTH as MAX_TOPIC_LENGTH,
)
from rocketstore.format._record_py import (
    MAX_TOPIC_LENGTH_V2 as MAX_TOPIC_LENGTH_V2,
)
from rocketstore.format._record_py import (
    POS_BODY as POS_BODY,
)
from rocketstore.format._record_py import (
    POS_BODY_CRC as POS_BODY_CRC,
)
from rocketstore.format._record_py import (
    POS_BODY_LENGTH as POS_BODY_LENGTH,
)
from rocketstore.format._record_py import (
    POS_BORN_HOST as POS_BORN_HOST,
)
from rocketstore.format._record_py import (
    POS_BORN_TIMESTAMP as POS_BORN_TIMESTAMP,
)
from rocketstore.format._record_py import (
    POS_FLAG as POS_FLAG,
)
from rocketstore.format._record_py import (
    POS_MAGIC as POS_MAGIC,
)
from rocketstore.format._record_py import (
    POS_PHYSICAL_OFFSET as POS_PHYSICAL_OFFSET,
)
from rocketstore.format._record_py import (
    POS_PREPARED_TRANSACTION_OFFSET as POS_PREPARED_TRANSACTION_OFFSET,
)
from rocketstore.format._record_py import (
    POS_QUEUE_ID as POS_QUEUE_ID,
)
from rocketstore.format._record_py import (
    POS_QUEUE_OFFSET as POS_QUEUE_OFFSET,
)
from rocketstore.format._record_py import (
    POS_RECONSUME_TIMES as POS_RECONSUME_TIMES,
)
from rocketstore.format._record_py import (
    POS_STORE_HOST as POS_STORE_HOST,
)
from rocketstore.format._record_py import (
    POS_STORE_TIMESTAMP as POS_STORE_TIMESTAMP,
)
from rocketstore.format._record_py import (
    POS_SYSFLAG as POS_SYSFLAG,
)
from rocketstore.format._record_py import (
    POS_TOTAL_SIZE as POS_TOTAL_SIZE,
)
from rocketstore.format._record_py import (
    PROPERTIES_LENGTH_SIZE as PROPERTIES_LENGTH_SIZE,
)
from rocketstore.format._record_py import (
    RECORD_FIXED_LENGTH as RECORD_FIXED_LENGTH,
)
from rocketstore.format._record_py import (
    STOP_BAD_CRC as STOP_BAD_CRC,
)
from rocketstore.format._record_py import (
    STOP_BLANK as STOP_BLANK,
)
from rocketstore.format._record_py import (
    STOP_CORRUPT as STOP_CORRUPT,
)
from rocketstore.format._record_py import (
    STOP_END as STOP_END,
)
from rocketstore.format._record_py import (
    STOP_LIMIT as STOP_LIMIT,
)
from rocketstore.format._record_py import (
    STOP_TRUNCATED as STOP_TRUNCATED,
)
from rocketstore.format._record_py import (
    SYSFLAG_BORNHOST_V6 as SYSFLAG_BORNHOST_V6,
)
from rocketstore.format._record_py import (
    SYSFLAG_COMPRESSED as SYSFLAG_COMPRESSED,
)
from rocketstore.format._record_py import (
    SYSFLAG_COMPRESSION_MASK as SYSFLAG_COMPRESSION_MASK,
)
from rocketstore.format._record_py import (
    SYSFLAG_INNER_BATCH as SYSFLAG_INNER_BATCH,
)
from rocketstore.format._record_py import (
    SYSFLAG_MULTI_TAGS as SYSFLAG_MULTI_TAGS,
)
from rocketstore.format._record_py import (
    SYSFLAG_NEED_UNWRAP as SYSFLAG_NEED_UNWRAP,
)
from rocketstore.format._record_py import (
    SYSFLAG_STOREHOST_V6 as SYSFLAG_STOREHOST_V6,
)
from rocketstore.format._record_py import (
    SYSFLAG_TRANSACTION_MASK as SYSFLAG_TRANSACTION_MASK,
)
from rocketstore.format._record_py import (
    TOPIC_LENGTH_SIZE as TOPIC_LENGTH_SIZE,
)
from rocketstore.format._record_py import (
    TOPIC_LENGTH_SIZE_V2 as TOPIC_LENGTH_SIZE_V2,
)
from rocketstore.format._record_py import (
    TRANSACTION_COMMIT_TYPE as TRANSACTION_COMMIT_TYPE,
)
from rocketstore.format._record_py import (
    TRANSACTION_NOT_TYPE as TRANSACTION_NOT_TYPE,
)
from rocketstore.format._record_py import (
    TRANSACTION_PREPARED_TYPE as TRANSACTION_PREPARED_TYPE,
)
from rocketstore.format._record_py import (
    TRANSACTION_ROLLBACK_TYPE as TRANSACTION_ROLLBACK_TYPE,
)
from rocketstore.format._timers_py import (
    java_string_hash as java_string_hash,
)
from rocketstore.format._timers_py import (
    timer_copies,
    timer_copy_rows,
    timer_properties,
    timer_units,
)
from rocketstore.message import MessageExt, make_offset_msg_id

__all__ = [
    "java_hash",
    "java_hash_bytes",
    "tags_code",
    "index_key_hash",
    "body_crc",
    "encode_properties",
    "put_properties",
    "plain_message_items",
    "decode_properties",
    "record_length",
    "encode_record",
    "encode_record_into",
    "encode_blank_into",
    "decode_record",
    "decode_batch",
    "record_from_row",
    "messages_from_rows",
    "row_messages",
    "MessageExt",
    "pull_units",
    "segment_messages",
    "queue_message",
    "queue_messages",
    "record_at",
    "message_by_id",
    "key_messages",
    "key_lookup",
    "unique_lookup",
    "FastRLock",
    "PULL_END",
    "PULL_FULL",
    "PULL_OUTSIDE",
    "PULL_DAMAGED",
    "dispatch_info",
    "dispatch_few",
    "property_pieces",
    "make_offset_msg_id",
    "parse_offset_msg_id",
    "make_uniq_key",
    "uniq_key_time",
    "RECORD_DTYPE",
    "DISPATCH_DTYPE",
    "KEYREF_DTYPE",
    "PIECE_DTYPE",
    "SCHEDULE_TOPIC",
    "DEFAULT_DELAY_LEVELS_MS",
    "MappedState",
    "SegmentTable",
    "QueueState",
    "QueueTable",
    "DispatchState",
    "IndexState",
    "IndexFileState",
    "PullResult",
    "timer_properties",
    "timer_units",
    "timer_copies",
    "timer_copy_rows",
    "PopLane",
    "PopAcker",
    "POP_SNAPSHOT_CHECK_EVERY",
    "receipt_handles",
    "checkpoint_run",
    "reconsume_times",
    "received_rows",
]
