# cython: language_level=3
# Declarations of cext/index.h (the IndexFile format, written down once there), for
# rocketstore.queues._index and for any module that cimports it. The module re-exports every constant
# under the pure twin's names; tests/test_index.py checks that the three agree.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t


cdef extern from "index.h" nogil:
    const int32_t RS_INDEX_POS_BEGIN_TIMESTAMP
    const int32_t RS_INDEX_POS_END_TIMESTAMP
    const int32_t RS_INDEX_POS_BEGIN_PHY_OFFSET
    const int32_t RS_INDEX_POS_END_PHY_OFFSET
    const int32_t RS_INDEX_POS_HASH_SLOT_COUNT
    const int32_t RS_INDEX_POS_INDEX_COUNT
    const int32_t RS_INDEX_HEADER_SIZE
    const int32_t RS_INDEX_HASH_SLOT_SIZE
    const int32_t RS_INDEX_ITEM_POS_KEY_HASH
    const int32_t RS_INDEX_ITEM_POS_PHY_OFFSET
    const int32_t RS_INDEX_ITEM_POS_TIME_DIFF
    const int32_t RS_INDEX_ITEM_POS_PREV_INDEX
    const int32_t RS_INDEX_INDEX_ITEM_SIZE
    const int32_t RS_INDEX_DEFAULT_SLOT_COUNT
    const int32_t RS_INDEX_DEFAULT_INDEX_COUNT
    const int32_t RS_INDEX_INVALID_INDEX
    const int32_t RS_INDEX_MAX_TIME_DIFF

    ctypedef struct rs_index_t:
        uint8_t *base
        int64_t len
        int32_t slot_num
        int32_t index_num

    ctypedef struct rs_index_walk_t:
        int64_t begin
        int64_t end
        int64_t file_begin
        int64_t steps_left
        int32_t key_hash
        int32_t count
        int32_t cur

    int64_t rs_index_get_i64(const uint8_t *p)
    int32_t rs_index_get_i32(const uint8_t *p)
    void rs_index_put_i64(uint8_t *p, int64_t v)
    int64_t rs_index_file_size(int64_t slots, int64_t items)
    int64_t rs_index_header_i64(const rs_index_t *ix, int pos)
    int32_t rs_index_header_i32(const rs_index_t *ix, int pos)
    int32_t rs_index_count(const rs_index_t *ix)
    int rs_index_is_full(const rs_index_t *ix)
    int32_t rs_index_hash_of_java(int32_t h)
    uint32_t rs_index_java_hash_update(uint32_t h, const void *data, int width, int64_t len)
    int32_t rs_index_key_hash(const void *data, int width, int64_t len)
    int rs_index_put(rs_index_t *ix, int32_t key_hash, int64_t phy_offset, int64_t store_timestamp)
    void rs_index_walk_start(const rs_index_t *ix, rs_index_walk_t *w, int32_t key_hash,
                             int64_t begin, int64_t end)
    int64_t rs_index_walk_next(const rs_index_t *ix, rs_index_walk_t *w, int64_t *out, int64_t cap)
