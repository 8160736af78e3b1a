# cython: language_level=3
# Declarations of cext/record.h (the CommitLog record format, written down once there), for
# rocketstore.format._codec and for any module that cimports it. The module re-exports every constant
# under the pure twin's names; tests/test_codec_vectors.py checks that the two agree.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy


cdef extern from "record.h" nogil:
    const int32_t RS_MAGIC_V1
    const int32_t RS_MAGIC_V2
    const int32_t RS_MAGIC_BLANK

    const int32_t RS_SYSFLAG_COMPRESSED
    const int32_t RS_SYSFLAG_MULTI_TAGS
    const int32_t RS_SYSFLAG_TRANSACTION_MASK
    const int32_t RS_TRANSACTION_NOT_TYPE
    const int32_t RS_TRANSACTION_PREPARED_TYPE
    const int32_t RS_TRANSACTION_COMMIT_TYPE
    const int32_t RS_TRANSACTION_ROLLBACK_TYPE
    const int32_t RS_SYSFLAG_BORNHOST_V6
    const int32_t RS_SYSFLAG_STOREHOST_V6
    const int32_t RS_SYSFLAG_NEED_UNWRAP
    const int32_t RS_SYSFLAG_INNER_BATCH
    const int32_t RS_SYSFLAG_COMPRESSION_MASK

    const int32_t RS_END_FILE_MIN_BLANK
    const int32_t RS_MAX_TOPIC_LENGTH
    const int32_t RS_MAX_TOPIC_LENGTH_V2
    const int32_t RS_MAX_PROPERTIES_LENGTH

    const int32_t RS_INT_SIZE
    const int32_t RS_LONG_SIZE
    const int32_t RS_HOST_V4_LENGTH
    const int32_t RS_HOST_V6_LENGTH
    const int32_t RS_HOST_V6_EXTRA
    const int32_t RS_TOPIC_LEN_SIZE
    const int32_t RS_TOPIC_LEN_SIZE_V2
    const int32_t RS_PROPERTIES_LEN_SIZE

    const int32_t RS_POS_TOTAL_SIZE
    const int32_t RS_POS_MAGIC
    const int32_t RS_POS_BODY_CRC
    const int32_t RS_POS_QUEUE_ID
    const int32_t RS_POS_FLAG
    const int32_t RS_POS_QUEUE_OFFSET
    const int32_t RS_POS_PHYSICAL_OFFSET
    const int32_t RS_POS_SYSFLAG
    const int32_t RS_POS_BORN_TIMESTAMP
    const int32_t RS_POS_BORN_HOST
    const int32_t RS_POS_STORE_TIMESTAMP
    const int32_t RS_POS_STORE_HOST
    const int32_t RS_POS_RECONSUME_TIMES
    const int32_t RS_POS_PREPARED_TRANSACTION_OFFSET
    const int32_t RS_POS_BODY_LENGTH
    const int32_t RS_POS_BODY
    const int32_t RS_RECORD_FIXED_LENGTH

    const int RS_DECODE_BLANK
    const int RS_DECODE_END
    const int RS_DECODE_TRUNCATED
    const int RS_DECODE_CORRUPT
    const int RS_DECODE_BAD_CRC

    ctypedef struct rs_record:
        int32_t total_size
        int32_t magic
        int32_t body_crc
        int32_t queue_id
        int32_t flag
        int64_t queue_offset
        int64_t physical_offset
        int32_t sys_flag
        int64_t born_timestamp
        uint8_t born_host[16]
        int32_t born_port
        int64_t store_timestamp
        uint8_t store_host[16]
        int32_t store_port
        int32_t reconsume_times
        int64_t prepared_transaction_offset
        const uint8_t *body
        int32_t body_len
        const uint8_t *topic
        int32_t topic_len
        const uint8_t *properties
        int32_t properties_len

    int64_t rs_record_length(int32_t body_len, int32_t topic_len, int32_t properties_len,
                             int32_t sys_flag, int32_t magic)
    int64_t rs_encode_record(uint8_t *dst, int64_t cap, const rs_record *r)
    int32_t rs_body_crc(const uint8_t *body, int64_t len)
    void rs_encode_blank(uint8_t *dst, int32_t max_blank)
    int64_t rs_decode_record(const uint8_t *src, int64_t avail, rs_record *out, int check_crc)
    int32_t rs_java_hash_utf8(const uint8_t *s, int64_t len)
    uint32_t rs_java_hash_utf8_update(uint32_t h, const uint8_t *s, int64_t len)

    const char *RS_SCHEDULE_TOPIC
    const int RS_SCHEDULE_TOPIC_LEN
    const uint8_t RS_KEY_SEPARATOR

    ctypedef struct rs_dispatch_props:
        int64_t tags_pos
        int64_t keys_pos
        int64_t uniq_key_pos
        int64_t delay_pos
        int32_t tags_len
        int32_t keys_len
        int32_t uniq_key_len
        int32_t delay_len

    void rs_dispatch_properties(const uint8_t *p, int64_t n, rs_dispatch_props *out)

    # One kept properties piece (property_pieces' rows: the C layout of PIECE_DTYPE).
    ctypedef struct rs_piece_row:
        int64_t name_pos
        int64_t value_pos
        int32_t name_len
        int32_t value_len

    int64_t rs_property_pieces(const uint8_t *p, int64_t n, int64_t base, rs_piece_row *out, int64_t cap)
    int rs_parse_java_int(const uint8_t *s, int64_t len, int32_t *out)
    int64_t rs_count_key_tokens(const uint8_t *s, int64_t len)


# One row of decode_batch's result: the C layout of RECORD_DTYPE (natural alignment, as numpy's
# align=True gives); the module checks field offsets and size against the dtype at import.
cdef struct rs_batch_row:
    int64_t position
    int32_t size
    int32_t magic
    int32_t body_crc
    int32_t queue_id
    int32_t flag
    int64_t queue_offset
    int64_t physical_offset
    int32_t sys_flag
    int64_t born_timestamp
    uint8_t born_host[16]
    int32_t born_port
    int64_t store_timestamp
    uint8_t store_host[16]
    int32_t store_port
    int32_t reconsume_times
    int64_t prepared_transaction_offset
    int64_t body_pos
    int32_t body_len
    int64_t topic_pos
    int32_t topic_len
    int64_t properties_pos
    int32_t properties_len


# One row of dispatch_info's info array: the C layout of DISPATCH_DTYPE (checked at import).
cdef struct rs_dispatch_row:
    int64_t tags_code
    int64_t tags_pos
    int32_t tags_len
    int32_t delay_level


# One index key of dispatch_info's keys array: the C layout of KEYREF_DTYPE (checked at import).
cdef struct rs_keyref_row:
    int64_t key_pos
    int32_t key_len
    int32_t record


# ---- shared with rocketstore.format._scan (the kernels over a stretch of records) ----
# The scan loop and the argument checks both modules use are in rows.pxi (included by each); the
# constants and small helpers below are declared once here and compiled into each module.

# rs_decode_record's results map onto these as 1 - code (BLANK 0 -> 1, ..., BAD_CRC -4 -> 5)
cdef enum:
    _STOP_LIMIT = 0
    _STOP_BLANK = 1
    _STOP_CORRUPT = 4
    _STOP_NEED_ROOM = -1   # internal to the scan: the row array is full

# Which span of a row lies outside its buffer (what _outside's error names).
cdef enum:
    _OUTSIDE_TOPIC = 1
    _OUTSIDE_PROPERTIES = 2
    _OUTSIDE_RECORD = 3


cdef inline uint64_t _queue_key_of(const uint8_t *t, int32_t topic_len, int32_t queue_id) noexcept nogil:
    """FNV-1a 64 of a topic's bytes, then of its queue id (as uint32)."""
    cdef uint64_t h = 0xCBF29CE484222325ULL
    cdef int32_t j
    for j in range(topic_len):
        h = (h ^ t[j]) * 0x100000001B3ULL
    return (h ^ <uint32_t>queue_id) * 0x100000001B3ULL


cdef inline int64_t _be64(const uint8_t *p) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(8):
        v = (v << 8) | p[i]
    return <int64_t>v


cdef inline int32_t _be32(const uint8_t *p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])
