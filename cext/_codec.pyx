# cython: language_level=3, embedsignature=True
"""CommitLog record codec, Java hashes and message ids (compiled twin of rocketstore.format._codec_py).

The format itself is written down once, in cext/record.h; this module wraps it for Python with the
same names, exceptions and messages as the pure-Python twin (whose docstring carries the layout table).
The kernels over a stretch of records (queue keys and ranges, field checks, verify's and recovery's
scans) are rocketstore.format._scan's.

This file holds the imports and constants; the code is in the files it includes, by concern:
codec/record.pxi (hashes, properties, one record encoded and decoded), codec/message.pxi (the
compiled MessageExt and the batch decodes into messages), codec/dispatch.pxi (what the queues and
the index need of a stretch of records), codec/msgid.pxi (message ids), codec/pulls.pxi (reading
what ConsumeQueue units point at), codec/lookups.pxi (point reads by queue position, offset, msgId
and key), codec/fastreads.pxi (the point reads' front), codec/timers.pxi (timer messages) and
codec/pop.pxi (POP's one-call ack and its lock).
"""

cimport cython
from cpython.buffer cimport (PyBUF_SIMPLE, PyBUF_STRIDES, PyBUF_WRITABLE, PyBuffer_IsContiguous,
                             PyBuffer_Release, PyObject_CheckBuffer, PyObject_GetBuffer)
from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_SetItem
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from libc.stdint cimport (int32_t, int64_t, uint8_t, uint32_t, uint64_t, INT32_MIN, INT32_MAX, INT64_MIN,
                          INT64_MAX)
from libc.string cimport memchr, memcmp, memcpy, memset

# record.h's API and the batch-row struct, declared once in _codec.pxd (next to this file).
from _codec cimport *
# index.h's walk (the IndexFile format, declared once in _index.pxd): key lookups walk the
# index files' maps here, as rocketstore.queues._index.select_files does
from _index cimport (rs_index_t, rs_index_walk_t, rs_index_walk_start, rs_index_walk_next, rs_index_header_i64,
                     rs_index_file_size, rs_index_java_hash_update, rs_index_hash_of_java,
                     RS_INDEX_POS_BEGIN_TIMESTAMP,
                     RS_INDEX_POS_END_TIMESTAMP, RS_INDEX_INVALID_INDEX)
from cpython.unicode cimport PyUnicode_DATA, PyUnicode_GET_LENGTH, PyUnicode_KIND

import operator as _operator
from rocketstore.base._clock import month_start as _month_start, now_ms as _now_ms
from rocketstore.base.compression import inflate as _inflate
from collections.abc import Mapping as _Mapping

import numpy as _np

# the rare shapes of a put's properties (a mapping, bad input): one copy, the pure twin's
from rocketstore.format._record_py import put_properties as _put_properties_slow
# a properties mapping checked and encoded (the argument checks and the error each case raises:
# one copy, the pure twin's; the hot paths that encode properties are the put's own, below and in
# rocketstore.log._store)
from rocketstore.format._record_py import encode_properties
from rocketstore.format._record_py import _topic_bytes as _topic_bytes_slow
from rocketstore.format._timers_py import timer_properties as _timer_properties_slow
from rocketstore.errors import (CorruptRecordError, InvalidMessageError, InvalidMessageIdError,
                                PropertiesTooLargeError)
from rocketstore import message as _message_mod
from rocketstore.status import GetMessageStatus as _GetMessageStatus
from rocketstore.message import MessageExt as _PyMessageExt, host_from_bytes, host_to_bytes

cdef extern from *:
    """
    /* PyUnicode_KIND/DATA need a "ready" string; 3.12+ has only ready strings and deprecates READY. */
    #if PY_VERSION_HEX < 0x030C0000
    #define rs_index_unicode_ready(o) PyUnicode_READY(o)
    #else
    #define rs_index_unicode_ready(o) 0
    #endif
    """
    int rs_index_unicode_ready(object o) except -1

cdef extern from "Python.h":
    object PyUnicode_DecodeUTF8(const char *s, Py_ssize_t size, const char *errors)
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL
    void PyObject_GC_Track(object op)
    void PyObject_GC_UnTrack(object op)
    int PyObject_GC_IsTracked(object op)

__all__ = [
    "java_hash", "java_hash_bytes", "tags_code", "index_key_hash", "body_crc",
    "encode_properties", "put_properties", "plain_message_items", "decode_properties", "record_length",
    "encode_record", "encode_record_into", "encode_blank_into", "decode_record",
    "decode_batch", "record_from_row", "messages_from_rows", "row_messages", "MessageExt", "pull_units",
    "segment_messages", "queue_message", "queue_messages", "record_at", "message_by_id", "key_messages", "key_lookup",
    "unique_lookup", "FastReads", "FastRLock",
    "PULL_END", "PULL_FULL", "PULL_OUTSIDE", "PULL_DAMAGED",
    "dispatch_info", "dispatch_few", "property_pieces",
    "make_offset_msg_id", "parse_offset_msg_id", "make_uniq_key", "uniq_key_time",
    "RECORD_DTYPE", "DISPATCH_DTYPE", "KEYREF_DTYPE", "PIECE_DTYPE", "SCHEDULE_TOPIC", "DEFAULT_DELAY_LEVELS_MS",
]

# ---- constants, from record.h ----
MAGIC_V1 = RS_MAGIC_V1
MAGIC_V2 = RS_MAGIC_V2
MAGIC_BLANK = RS_MAGIC_BLANK
END_FILE_MIN_BLANK_LENGTH = RS_END_FILE_MIN_BLANK

SYSFLAG_COMPRESSED = RS_SYSFLAG_COMPRESSED
SYSFLAG_MULTI_TAGS = RS_SYSFLAG_MULTI_TAGS
SYSFLAG_TRANSACTION_MASK = RS_SYSFLAG_TRANSACTION_MASK
TRANSACTION_NOT_TYPE = RS_TRANSACTION_NOT_TYPE
TRANSACTION_PREPARED_TYPE = RS_TRANSACTION_PREPARED_TYPE
TRANSACTION_COMMIT_TYPE = RS_TRANSACTION_COMMIT_TYPE
TRANSACTION_ROLLBACK_TYPE = RS_TRANSACTION_ROLLBACK_TYPE
SYSFLAG_BORNHOST_V6 = RS_SYSFLAG_BORNHOST_V6
SYSFLAG_STOREHOST_V6 = RS_SYSFLAG_STOREHOST_V6
SYSFLAG_NEED_UNWRAP = RS_SYSFLAG_NEED_UNWRAP
SYSFLAG_INNER_BATCH = RS_SYSFLAG_INNER_BATCH
SYSFLAG_COMPRESSION_MASK = RS_SYSFLAG_COMPRESSION_MASK

MAX_TOPIC_LENGTH = RS_MAX_TOPIC_LENGTH
MAX_TOPIC_LENGTH_V2 = RS_MAX_TOPIC_LENGTH_V2
MAX_PROPERTIES_LENGTH = RS_MAX_PROPERTIES_LENGTH

INT_SIZE = RS_INT_SIZE
LONG_SIZE = RS_LONG_SIZE
HOST_V4_LENGTH = RS_HOST_V4_LENGTH
HOST_V6_LENGTH = RS_HOST_V6_LENGTH
HOST_V6_EXTRA_LENGTH = RS_HOST_V6_EXTRA
TOPIC_LENGTH_SIZE = RS_TOPIC_LEN_SIZE
TOPIC_LENGTH_SIZE_V2 = RS_TOPIC_LEN_SIZE_V2
PROPERTIES_LENGTH_SIZE = RS_PROPERTIES_LEN_SIZE

POS_TOTAL_SIZE = RS_POS_TOTAL_SIZE
POS_MAGIC = RS_POS_MAGIC
POS_BODY_CRC = RS_POS_BODY_CRC
POS_QUEUE_ID = RS_POS_QUEUE_ID
POS_FLAG = RS_POS_FLAG
POS_QUEUE_OFFSET = RS_POS_QUEUE_OFFSET
POS_PHYSICAL_OFFSET = RS_POS_PHYSICAL_OFFSET
POS_SYSFLAG = RS_POS_SYSFLAG
POS_BORN_TIMESTAMP = RS_POS_BORN_TIMESTAMP
POS_BORN_HOST = RS_POS_BORN_HOST
POS_STORE_TIMESTAMP = RS_POS_STORE_TIMESTAMP
POS_STORE_HOST = RS_POS_STORE_HOST
POS_RECONSUME_TIMES = RS_POS_RECONSUME_TIMES
POS_PREPARED_TRANSACTION_OFFSET = RS_POS_PREPARED_TRANSACTION_OFFSET
POS_BODY_LENGTH = RS_POS_BODY_LENGTH
POS_BODY = RS_POS_BODY
RECORD_FIXED_LENGTH = RS_RECORD_FIXED_LENGTH

STOP_LIMIT = 0
STOP_BLANK = 1
STOP_END = 2
STOP_TRUNCATED = 3
STOP_CORRUPT = 4
STOP_BAD_CRC = 5

# why decode_record raised, in words: the pure twin's table (the STOP_* values are the same)
from rocketstore.format._record_py import _MESSAGES

RECORD_DTYPE = _np.dtype([
    ("position", "=i8"), ("size", "=i4"), ("magic", "=i4"), ("body_crc", "=i4"),
    ("queue_id", "=i4"), ("flag", "=i4"), ("queue_offset", "=i8"), ("physical_offset", "=i8"),
    ("sys_flag", "=i4"), ("born_timestamp", "=i8"), ("born_host", "S16"), ("born_port", "=i4"),
    ("store_timestamp", "=i8"), ("store_host", "S16"), ("store_port", "=i4"),
    ("reconsume_times", "=i4"), ("prepared_transaction_offset", "=i8"),
    ("body_pos", "=i8"), ("body_len", "=i4"), ("topic_pos", "=i8"), ("topic_len", "=i4"),
    ("properties_pos", "=i8"), ("properties_len", "=i4"),
], align=True)


DISPATCH_DTYPE = _np.dtype([("tags_code", "=i8"), ("tags_pos", "=i8"), ("tags_len", "=i4"),
                            ("delay_level", "=i4")], align=True)
KEYREF_DTYPE = _np.dtype([("key_pos", "=i8"), ("key_len", "=i4"), ("record", "=i4")], align=True)
PIECE_DTYPE = _np.dtype([("name_pos", "=i8"), ("value_pos", "=i8"), ("name_len", "=i4"),
                         ("value_len", "=i4")], align=True)

SCHEDULE_TOPIC = RS_SCHEDULE_TOPIC[:RS_SCHEDULE_TOPIC_LEN].decode("ascii")
DEFAULT_DELAY_LEVELS_MS = (1000, 5000, 10000, 30000, 60000, 120000, 180000, 240000, 300000, 360000,
                           420000, 480000, 540000, 600000, 1200000, 1800000, 3600000, 7200000)


cdef _check_layout(str struct_name, dict offsets, Py_ssize_t size, object dtype, str dtype_name):
    expected = {name: dtype.fields[name][1] for name in dtype.names}
    if offsets != expected or size != dtype.itemsize:
        raise ImportError(f"{struct_name} layout {offsets} (size {size}) does not match "
                          f"{dtype_name} {expected} (itemsize {dtype.itemsize})")


cdef _check_row_layouts():
    """decode_batch and dispatch_info write C structs straight into numpy arrays: prove they match."""
    cdef rs_batch_row row
    cdef rs_dispatch_row info
    cdef rs_keyref_row key
    cdef rs_piece_row piece
    cdef char *base = <char *>&row
    _check_layout("rs_batch_row", {
        "position": <char *>&row.position - base, "size": <char *>&row.size - base,
        "magic": <char *>&row.magic - base, "body_crc": <char *>&row.body_crc - base,
        "queue_id": <char *>&row.queue_id - base, "flag": <char *>&row.flag - base,
        "queue_offset": <char *>&row.queue_offset - base,
        "physical_offset": <char *>&row.physical_offset - base,
        "sys_flag": <char *>&row.sys_flag - base, "born_timestamp": <char *>&row.born_timestamp - base,
        "born_host": <char *>&row.born_host[0] - base, "born_port": <char *>&row.born_port - base,
        "store_timestamp": <char *>&row.store_timestamp - base,
        "store_host": <char *>&row.store_host[0] - base, "store_port": <char *>&row.store_port - base,
        "reconsume_times": <char *>&row.reconsume_times - base,
        "prepared_transaction_offset": <char *>&row.prepared_transaction_offset - base,
        "body_pos": <char *>&row.body_pos - base, "body_len": <char *>&row.body_len - base,
        "topic_pos": <char *>&row.topic_pos - base, "topic_len": <char *>&row.topic_len - base,
        "properties_pos": <char *>&row.properties_pos - base,
        "properties_len": <char *>&row.properties_len - base,
    }, sizeof(rs_batch_row), RECORD_DTYPE, "RECORD_DTYPE")
    base = <char *>&info
    _check_layout("rs_dispatch_row", {
        "tags_code": <char *>&info.tags_code - base, "tags_pos": <char *>&info.tags_pos - base,
        "tags_len": <char *>&info.tags_len - base, "delay_level": <char *>&info.delay_level - base,
    }, sizeof(rs_dispatch_row), DISPATCH_DTYPE, "DISPATCH_DTYPE")
    base = <char *>&key
    _check_layout("rs_keyref_row", {
        "key_pos": <char *>&key.key_pos - base, "key_len": <char *>&key.key_len - base,
        "record": <char *>&key.record - base,
    }, sizeof(rs_keyref_row), KEYREF_DTYPE, "KEYREF_DTYPE")
    base = <char *>&piece
    _check_layout("rs_piece_row", {
        "name_pos": <char *>&piece.name_pos - base, "value_pos": <char *>&piece.value_pos - base,
        "name_len": <char *>&piece.name_len - base, "value_len": <char *>&piece.value_len - base,
    }, sizeof(rs_piece_row), PIECE_DTYPE, "PIECE_DTYPE")


_check_row_layouts()

# Above this many bytes decode_batch scans without the GIL (the buffer stays pinned meanwhile).
cdef enum:
    _NOGIL_SCAN_BYTES = 65536


# The buffer, range and table checks and the scan loop decode_batch and the stretch kernels of
# rocketstore.format._scan share: written once, in rows.pxi, and compiled into each module.
include "rows.pxi"
include "codec/record.pxi"
include "codec/message.pxi"
include "codec/dispatch.pxi"
include "codec/msgid.pxi"
include "codec/pulls.pxi"

include "state.pxi"

cdef class FastRLock   # defined in codec/pop.pxi
include "codec/lookups.pxi"
include "codec/fastreads.pxi"
include "codec/timers.pxi"
include "codec/pop.pxi"
