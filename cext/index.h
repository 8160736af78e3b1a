/* The IndexFile of Apache RocketMQ 4.x (spec §5): slot table and item chains, put and chain walk.
 *
 * Pure computation on caller-owned memory: no allocation, no Python API, callable without the GIL.
 * Every integer on disk is big-endian two's complement. Layout:
 *
 *   header (40 bytes)                       item n (20 bytes) at ITEMS_START + 20*n, n >= 1
 *     pos  size  field                        pos  size  field
 *       0     8  beginTimestamp (ms)            0     4  keyHash (non-negative, §5.2)
 *       8     8  endTimestamp (ms)              4     8  phyOffset
 *      16     8  beginPhyOffset                12     4  timeDiff (s since header beginTimestamp)
 *      24     8  endPhyOffset                  16     4  prevIndex (0 = end of chain)
 *      32     4  hashSlotCount
 *      36     4  indexCount (starts at 1; <= 0 reads as 1)
 *   slot s (4 bytes: newest item of the bucket, 0 = empty) at 40 + 4*s
 *   ITEMS_START = 40 + 4*slots;  file size = ITEMS_START + 20*items
 *
 * The same table, as Python constants, lives in src/rocketstore/queues/_index_py.py; tests/test_index.py
 * checks that both agree with cext/_index.pxd (which mirrors this file).
 *
 * Bounds: rs_index_t.len is the mapped length. Every read and write below is checked against it,
 * so a corrupt slot, prev pointer or header ends a chain instead of leaving the map.
 */
#ifndef ROCKETSTORE_INDEX_H
#define ROCKETSTORE_INDEX_H

#include <stdint.h>

#define RS_INDEX_INT_SIZE   4
#define RS_INDEX_LONG_SIZE  8

/* header fields, each derived from the one before */
#define RS_INDEX_POS_BEGIN_TIMESTAMP  0
#define RS_INDEX_POS_END_TIMESTAMP    (RS_INDEX_POS_BEGIN_TIMESTAMP + RS_INDEX_LONG_SIZE)   /*  8 */
#define RS_INDEX_POS_BEGIN_PHY_OFFSET (RS_INDEX_POS_END_TIMESTAMP + RS_INDEX_LONG_SIZE)     /* 16 */
#define RS_INDEX_POS_END_PHY_OFFSET   (RS_INDEX_POS_BEGIN_PHY_OFFSET + RS_INDEX_LONG_SIZE)  /* 24 */
#define RS_INDEX_POS_HASH_SLOT_COUNT  (RS_INDEX_POS_END_PHY_OFFSET + RS_INDEX_LONG_SIZE)    /* 32 */
#define RS_INDEX_POS_INDEX_COUNT      (RS_INDEX_POS_HASH_SLOT_COUNT + RS_INDEX_INT_SIZE)    /* 36 */
#define RS_INDEX_HEADER_SIZE          (RS_INDEX_POS_INDEX_COUNT + RS_INDEX_INT_SIZE)        /* 40 */

#define RS_INDEX_HASH_SLOT_SIZE       RS_INDEX_INT_SIZE                                     /*  4 */

/* item fields */
#define RS_INDEX_ITEM_POS_KEY_HASH    0
#define RS_INDEX_ITEM_POS_PHY_OFFSET  (RS_INDEX_ITEM_POS_KEY_HASH + RS_INDEX_INT_SIZE)      /*  4 */
#define RS_INDEX_ITEM_POS_TIME_DIFF   (RS_INDEX_ITEM_POS_PHY_OFFSET + RS_INDEX_LONG_SIZE)   /* 12 */
#define RS_INDEX_ITEM_POS_PREV_INDEX  (RS_INDEX_ITEM_POS_TIME_DIFF + RS_INDEX_INT_SIZE)     /* 16 */
#define RS_INDEX_INDEX_ITEM_SIZE      (RS_INDEX_ITEM_POS_PREV_INDEX + RS_INDEX_INT_SIZE)    /* 20 */

#define RS_INDEX_DEFAULT_SLOT_COUNT   5000000    /* maxHashSlotNum */
#define RS_INDEX_DEFAULT_INDEX_COUNT  20000000   /* maxIndexNum */
#define RS_INDEX_INVALID_INDEX        0          /* empty slot, end of chain; item 0 is never used */
#define RS_INDEX_MAX_TIME_DIFF        INT32_MAX  /* timeDiff is clamped to [0, Integer.MAX_VALUE] */

typedef struct {
    uint8_t *base;        /* the map; writable unless the owner says otherwise */
    int64_t len;          /* bytes mapped at base */
    int32_t slot_num;     /* >= 1 */
    int32_t index_num;    /* >= 1; items 1 .. index_num - 1 can be used */
} rs_index_t;

/* The state of one chain walk (selectPhyOffset), resumable so the caller can collect in batches. */
typedef struct {
    int64_t begin, end;       /* the query's time window, ms, inclusive */
    int64_t file_begin;       /* header beginTimestamp at the start of the walk */
    int64_t steps_left;       /* a valid chain visits each used item at most once */
    int32_t key_hash;
    int32_t count;            /* header indexCount at the start of the walk */
    int32_t cur;              /* the next item to read; RS_INDEX_INVALID_INDEX once the walk ended */
} rs_index_walk_t;

/* ---- big-endian helpers (byte-wise, so alignment never matters; compilers emit bswap) ---- */

static inline void rs_index_put_i32(uint8_t *p, int32_t v)
{
    uint32_t u = (uint32_t)v;
    p[0] = (uint8_t)(u >> 24); p[1] = (uint8_t)(u >> 16); p[2] = (uint8_t)(u >> 8); p[3] = (uint8_t)u;
}

static inline void rs_index_put_i64(uint8_t *p, int64_t v)
{
    uint64_t u = (uint64_t)v;
    rs_index_put_i32(p, (int32_t)(uint32_t)(u >> 32));
    rs_index_put_i32(p + 4, (int32_t)(uint32_t)u);
}

static inline int32_t rs_index_get_i32(const uint8_t *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

static inline int64_t rs_index_get_i64(const uint8_t *p)
{
    return (int64_t)(((uint64_t)(uint32_t)rs_index_get_i32(p) << 32) | (uint64_t)(uint32_t)rs_index_get_i32(p + 4));
}

/* Java long arithmetic wraps; so do these (signed overflow is undefined in C). */
static inline int64_t rs_index_wrap_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static inline int64_t rs_index_wrap_sub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }

/* ---- sizes and positions ---- */

/* 40 + slots*4 + items*20 (420,000,040 for the defaults) */
static inline int64_t rs_index_file_size(int64_t slots, int64_t items)
{
    return RS_INDEX_HEADER_SIZE + slots * RS_INDEX_HASH_SLOT_SIZE + items * RS_INDEX_INDEX_ITEM_SIZE;
}

static inline int64_t rs_index_items_start(const rs_index_t *ix)
{
    return RS_INDEX_HEADER_SIZE + (int64_t)ix->slot_num * RS_INDEX_HASH_SLOT_SIZE;
}

/* Position of item n, or -1 if it does not lie inside the map (or beyond the configured items). */
static inline int64_t rs_index_item_pos(const rs_index_t *ix, int32_t n)
{
    int64_t pos;
    if (n <= RS_INDEX_INVALID_INDEX || n >= ix->index_num) return -1;
    pos = rs_index_items_start(ix) + (int64_t)n * RS_INDEX_INDEX_ITEM_SIZE;
    if (pos + RS_INDEX_INDEX_ITEM_SIZE > ix->len) return -1;
    return pos;
}

/* Position of the slot of a (non-negative) key hash, or -1 if the map is too short for it. */
static inline int64_t rs_index_slot_pos(const rs_index_t *ix, int32_t key_hash)
{
    int64_t pos = RS_INDEX_HEADER_SIZE + (int64_t)(key_hash % ix->slot_num) * RS_INDEX_HASH_SLOT_SIZE;
    if (key_hash < 0 || pos + RS_INDEX_HASH_SLOT_SIZE > ix->len) return -1;
    return pos;
}

/* ---- header ---- */

static inline int64_t rs_index_header_i64(const rs_index_t *ix, int pos)
{
    return ix->len >= RS_INDEX_HEADER_SIZE ? rs_index_get_i64(ix->base + pos) : 0;
}

static inline int32_t rs_index_header_i32(const rs_index_t *ix, int pos)
{
    return ix->len >= RS_INDEX_HEADER_SIZE ? rs_index_get_i32(ix->base + pos) : 0;
}

/* indexCount as IndexHeader.load() reads it: a value <= 0 is 1 (item 0 is never used). */
static inline int32_t rs_index_count(const rs_index_t *ix)
{
    int32_t n = rs_index_header_i32(ix, RS_INDEX_POS_INDEX_COUNT);
    return n <= 0 ? 1 : n;
}

static inline int rs_index_is_full(const rs_index_t *ix)
{
    return rs_index_count(ix) >= ix->index_num;
}

/* ---- the Java key hash over UTF-16 code units (§2, §5.2) ---- */

/* The index hash of a key whose Java String.hashCode is h: abs(h), with Integer.MIN_VALUE
   (whose Math.abs is itself) giving 0. */
static inline int32_t rs_index_hash_of_java(int32_t h)
{
    if (h == INT32_MIN) return 0;
    return h < 0 ? -h : h;
}

/* Java String.hashCode's running value h after len more code points of `width` bytes each (1:
   Latin-1, 2: UCS-2, 4: UCS-4, Python's three compact forms); code points above U+FFFF count as
   their two surrogates. A string's hash is this from 0 over the whole string; a key made of
   parts (topic, "#", key) is this over each part in turn. */
static inline uint32_t rs_index_java_hash_update(uint32_t h, const void *data, int width, int64_t len)
{
    int64_t i = 0;
    /* Four code units a step where there are no surrogates to make: h * 31^4 + c0 * 31^3 +
       c1 * 31^2 + c2 * 31 + c3, which is Java's four steps (all mod 2^32) with one multiply on the
       chain from one step to the next instead of four. */
    if (width == 1) {
        const uint8_t *s = (const uint8_t *)data;
        for (; i + 4 <= len; i += 4)
            h = h * 923521u + s[i] * 29791u + s[i + 1] * 961u + s[i + 2] * 31u + s[i + 3];
        for (; i < len; i++) h = 31u * h + s[i];
    } else if (width == 2) {
        const uint16_t *s = (const uint16_t *)data;
        for (; i + 4 <= len; i += 4)
            h = h * 923521u + s[i] * 29791u + s[i + 1] * 961u + s[i + 2] * 31u + s[i + 3];
        for (; i < len; i++) h = 31u * h + s[i];
    } else {
        const uint32_t *s = (const uint32_t *)data;
        for (i = 0; i < len; i++) {
            uint32_t u = s[i];
            if (u >= 0x10000u) {
                u -= 0x10000u;
                h = 31u * h + (0xD800u | (u >> 10));
                h = 31u * h + (0xDC00u | (u & 0x3FFu));
            } else {
                h = 31u * h + u;
            }
        }
    }
    return h;
}

/* The index key hash of a string (see rs_index_java_hash_update): abs() of its Java hash, with
   Integer.MIN_VALUE giving 0. */
static inline int32_t rs_index_key_hash(const void *data, int width, int64_t len)
{
    return rs_index_hash_of_java((int32_t)rs_index_java_hash_update(0u, data, width, len));
}

/* ---- putKey (§5.3, as 4.7.1+ do it) ---- */

/* rs_index_put of a key whose slot position (rs_index_slot_pos of key_hash) the caller has
   already computed: a caller that prefetches the slot does not divide twice. */
static inline int rs_index_put_at(rs_index_t *ix, int32_t key_hash, int64_t slot_pos, int64_t phy_offset,
                                  int64_t store_timestamp)
{
    uint8_t *h = ix->base;
    int32_t count, slot_value, slot_count;
    int64_t item_pos, begin_ts, time_diff;
    uint8_t *item;

    if (ix->len < RS_INDEX_HEADER_SIZE) return 0;
    count = rs_index_count(ix);
    if (count >= ix->index_num) return 0;
    item_pos = rs_index_item_pos(ix, count);
    if (slot_pos < 0 || item_pos < 0) return 0;

    slot_value = rs_index_get_i32(h + slot_pos);
    if (slot_value <= RS_INDEX_INVALID_INDEX || slot_value > count) slot_value = RS_INDEX_INVALID_INDEX;

    /* against the header's begin as it is now: for the first item that is the previous file's
       end (§5.4), not the storeTimestamp about to become begin (the 4.x quirk, kept) */
    begin_ts = rs_index_get_i64(h + RS_INDEX_POS_BEGIN_TIMESTAMP);
    if (begin_ts <= 0) {
        time_diff = 0;
    } else {
        time_diff = rs_index_wrap_sub(store_timestamp, begin_ts) / 1000;   /* truncates toward 0 */
        if (time_diff > RS_INDEX_MAX_TIME_DIFF) time_diff = RS_INDEX_MAX_TIME_DIFF;
        else if (time_diff < 0) time_diff = 0;
    }

    item = h + item_pos;
    rs_index_put_i32(item + RS_INDEX_ITEM_POS_KEY_HASH, key_hash);
    rs_index_put_i64(item + RS_INDEX_ITEM_POS_PHY_OFFSET, phy_offset);
    rs_index_put_i32(item + RS_INDEX_ITEM_POS_TIME_DIFF, (int32_t)time_diff);
    rs_index_put_i32(item + RS_INDEX_ITEM_POS_PREV_INDEX, slot_value);
    rs_index_put_i32(h + slot_pos, count);

    if (count <= 1) {
        rs_index_put_i64(h + RS_INDEX_POS_BEGIN_PHY_OFFSET, phy_offset);
        rs_index_put_i64(h + RS_INDEX_POS_BEGIN_TIMESTAMP, store_timestamp);
    }
    /* 4.7.1+ (so 4.9.8 and 5.x) counts a put only when its slot was empty (or held an invalid
       item number); 4.3 counted every put. An int, so it wraps like Java's. */
    if (slot_value == RS_INDEX_INVALID_INDEX) {
        slot_count = (int32_t)((uint32_t)rs_index_get_i32(h + RS_INDEX_POS_HASH_SLOT_COUNT) + 1u);
        rs_index_put_i32(h + RS_INDEX_POS_HASH_SLOT_COUNT, slot_count);
    }
    rs_index_put_i32(h + RS_INDEX_POS_INDEX_COUNT, count + 1);
    rs_index_put_i64(h + RS_INDEX_POS_END_PHY_OFFSET, phy_offset);
    rs_index_put_i64(h + RS_INDEX_POS_END_TIMESTAMP, store_timestamp);
    return 1;
}

/* Store one key. Returns 1, or 0 when the file is full (or, defensively, when the map is too
   short for the item: the owner checks its length, so that does not happen). */
static inline int rs_index_put(rs_index_t *ix, int32_t key_hash, int64_t phy_offset, int64_t store_timestamp)
{
    return rs_index_put_at(ix, key_hash, rs_index_slot_pos(ix, key_hash), phy_offset, store_timestamp);
}

/* ---- selectPhyOffset (§5.5) ---- */

static inline void rs_index_walk_start(const rs_index_t *ix, rs_index_walk_t *w, int32_t key_hash,
                                       int64_t begin, int64_t end)
{
    int64_t slot_pos = rs_index_slot_pos(ix, key_hash);
    int32_t slot_value;
    w->begin = begin;
    w->end = end;
    w->key_hash = key_hash;
    w->count = rs_index_count(ix);
    w->file_begin = rs_index_header_i64(ix, RS_INDEX_POS_BEGIN_TIMESTAMP);
    w->steps_left = w->count < ix->index_num ? w->count : ix->index_num;
    w->cur = RS_INDEX_INVALID_INDEX;
    if (slot_pos < 0 || ix->len < RS_INDEX_HEADER_SIZE) return;
    slot_value = rs_index_get_i32(ix->base + slot_pos);
    if (slot_value <= RS_INDEX_INVALID_INDEX || slot_value > w->count || w->count <= 1) return;
    w->cur = slot_value;
}

/* Walk on, writing up to cap matching phyOffsets to out; returns how many were written. The walk
   has ended when w->cur is RS_INDEX_INVALID_INDEX; otherwise it stopped because out was full and
   resumes at w->cur (Java checks maxNum before reading each item, so nothing is lost).
   Beyond Java's stop conditions, an item outside the map or the configured items, or a walk longer
   than indexCount steps (a cycle in a corrupt file), ends the chain. */
static inline int64_t rs_index_walk_next(const rs_index_t *ix, rs_index_walk_t *w, int64_t *out, int64_t cap)
{
    int64_t n = 0;
    while (w->cur != RS_INDEX_INVALID_INDEX && n < cap) {
        int64_t pos = rs_index_item_pos(ix, w->cur);
        const uint8_t *item;
        int32_t key_hash, time_diff, prev;
        int64_t phy_offset, time_read;
        if (pos < 0 || w->steps_left <= 0) {
            w->cur = RS_INDEX_INVALID_INDEX;
            break;
        }
        w->steps_left--;
        item = ix->base + pos;
        key_hash = rs_index_get_i32(item + RS_INDEX_ITEM_POS_KEY_HASH);
        phy_offset = rs_index_get_i64(item + RS_INDEX_ITEM_POS_PHY_OFFSET);
        time_diff = rs_index_get_i32(item + RS_INDEX_ITEM_POS_TIME_DIFF);
        prev = rs_index_get_i32(item + RS_INDEX_ITEM_POS_PREV_INDEX);
        if (time_diff < 0) {
            w->cur = RS_INDEX_INVALID_INDEX;
            break;
        }
        time_read = rs_index_wrap_add(w->file_begin, (int64_t)time_diff * 1000);
        if (key_hash == w->key_hash && time_read >= w->begin && time_read <= w->end)
            out[n++] = phy_offset;
        if (prev <= RS_INDEX_INVALID_INDEX || prev > w->count || prev == w->cur || time_read < w->begin) {
            w->cur = RS_INDEX_INVALID_INDEX;
            break;
        }
        w->cur = prev;
    }
    return n;
}

#endif /* ROCKETSTORE_INDEX_H */
