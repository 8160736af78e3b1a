/* The CommitLog record of Apache RocketMQ 4.x/5.x (spec §1): encode, decode, Java String.hashCode.
 *
 * Pure computation on caller-owned memory: no allocation, no Python API, callable without the GIL.
 * Every integer on disk is big-endian two's complement. Layout (V1 magic, IPv4 hosts):
 *
 *   pos  size  field                      pos  size  field
 *     0     4  TOTALSIZE                   56     8  STORETIMESTAMP   (+12 if born host is IPv6)
 *     4     4  MAGICCODE                   64     8  STOREHOST        (20 bytes if IPv6)
 *     8     4  BODYCRC                     72     4  RECONSUMETIMES   (+12 per IPv6 host from here)
 *    12     4  QUEUEID                     76     8  PREPAREDTRANSACTIONOFFSET
 *    16     4  FLAG                        84     4  BODY length B, then B bytes
 *    20     8  QUEUEOFFSET               88+B     1  TOPIC length T (V2: 2 bytes), then T bytes
 *    28     8  PHYSICALOFFSET          89+B+T     2  PROPERTIES length P, then P bytes
 *    36     4  SYSFLAG                         TOTALSIZE = 91 + B + T + P (+12 per IPv6 host, +1 for V2)
 *    40     8  BORNTIMESTAMP
 *    48     8  BORNHOST (4 address bytes + int port; 16 + 4 if sysFlag 0x10)
 *
 * The same table, as Python constants, lives in src/rocketstore/format/_record_py.py; tests/test_codec_vectors.py
 * checks that both agree with cext/_codec.pxd (which mirrors this file).
 */
#ifndef ROCKETSTORE_RECORD_H
#define ROCKETSTORE_RECORD_H

#include <stdint.h>
#include <string.h>
#include "crc32.h"

#define RS_MAGIC_V1    ((int32_t)0xDAA320A7)   /* -626843481 */
#define RS_MAGIC_V2    ((int32_t)0xDAA320AB)   /* -626843477, decode only: 2-byte topic length */
#define RS_MAGIC_BLANK ((int32_t)0xCBD43194)   /* -875286124 */

#define RS_SYSFLAG_COMPRESSED        0x001
#define RS_SYSFLAG_MULTI_TAGS        0x002
#define RS_SYSFLAG_TRANSACTION_MASK  0x00C
#define RS_TRANSACTION_NOT_TYPE      0x000
#define RS_TRANSACTION_PREPARED_TYPE 0x004
#define RS_TRANSACTION_COMMIT_TYPE   0x008
#define RS_TRANSACTION_ROLLBACK_TYPE 0x00C
#define RS_SYSFLAG_BORNHOST_V6       0x010
#define RS_SYSFLAG_STOREHOST_V6      0x020
#define RS_SYSFLAG_NEED_UNWRAP       0x040
#define RS_SYSFLAG_INNER_BATCH       0x080
#define RS_SYSFLAG_COMPRESSION_MASK  0x700

#define RS_END_FILE_MIN_BLANK    8

#define RS_MAX_TOPIC_LENGTH      127     /* V1: signed byte */
#define RS_MAX_TOPIC_LENGTH_V2   32767   /* V2: signed short */
#define RS_MAX_PROPERTIES_LENGTH 32767   /* signed short */

#define RS_INT_SIZE        4
#define RS_LONG_SIZE       8
#define RS_HOST_V4_LENGTH  4
#define RS_HOST_V6_LENGTH  16
#define RS_HOST_V6_EXTRA   (RS_HOST_V6_LENGTH - RS_HOST_V4_LENGTH)   /* 12 */
#define RS_TOPIC_LEN_SIZE     1   /* V1 */
#define RS_TOPIC_LEN_SIZE_V2  2
#define RS_PROPERTIES_LEN_SIZE 2

/* Fixed positions for V1 / IPv4 (§1.1), each derived from the one before. */
#define RS_POS_TOTAL_SIZE         0
#define RS_POS_MAGIC              (RS_POS_TOTAL_SIZE + RS_INT_SIZE)            /*  4 */
#define RS_POS_BODY_CRC           (RS_POS_MAGIC + RS_INT_SIZE)                 /*  8 */
#define RS_POS_QUEUE_ID           (RS_POS_BODY_CRC + RS_INT_SIZE)              /* 12 */
#define RS_POS_FLAG               (RS_POS_QUEUE_ID + RS_INT_SIZE)              /* 16 */
#define RS_POS_QUEUE_OFFSET       (RS_POS_FLAG + RS_INT_SIZE)                  /* 20 */
#define RS_POS_PHYSICAL_OFFSET    (RS_POS_QUEUE_OFFSET + RS_LONG_SIZE)         /* 28 */
#define RS_POS_SYSFLAG            (RS_POS_PHYSICAL_OFFSET + RS_LONG_SIZE)      /* 36 */
#define RS_POS_BORN_TIMESTAMP     (RS_POS_SYSFLAG + RS_INT_SIZE)               /* 40 */
#define RS_POS_BORN_HOST          (RS_POS_BORN_TIMESTAMP + RS_LONG_SIZE)       /* 48 */
#define RS_POS_STORE_TIMESTAMP    (RS_POS_BORN_HOST + RS_HOST_V4_LENGTH + RS_INT_SIZE)   /* 56 */
#define RS_POS_STORE_HOST         (RS_POS_STORE_TIMESTAMP + RS_LONG_SIZE)      /* 64 */
#define RS_POS_RECONSUME_TIMES    (RS_POS_STORE_HOST + RS_HOST_V4_LENGTH + RS_INT_SIZE)  /* 72 */
#define RS_POS_PREPARED_TRANSACTION_OFFSET (RS_POS_RECONSUME_TIMES + RS_INT_SIZE)       /* 76 */
#define RS_POS_BODY_LENGTH        (RS_POS_PREPARED_TRANSACTION_OFFSET + RS_LONG_SIZE)  /* 84 */
#define RS_POS_BODY               (RS_POS_BODY_LENGTH + RS_INT_SIZE)           /* 88 */
/* the smallest record: empty body, topic and properties, V1, IPv4 hosts */
#define RS_RECORD_FIXED_LENGTH    (RS_POS_BODY + RS_TOPIC_LEN_SIZE + RS_PROPERTIES_LEN_SIZE)  /* 91 */

#define RS_DECODE_BLANK      0
#define RS_DECODE_END       (-1)
#define RS_DECODE_TRUNCATED (-2)
#define RS_DECODE_CORRUPT   (-3)
#define RS_DECODE_BAD_CRC   (-4)

typedef struct {
    int32_t total_size;      /* decode: TOTALSIZE as read; encode: ignored (computed) */
    int32_t magic;           /* decode: as read; encode: ignored (always V1) */
    int32_t body_crc;        /* encode: written as given (caller computes masked CRC) */
    int32_t queue_id;
    int32_t flag;
    int64_t queue_offset;
    int64_t physical_offset;
    int32_t sys_flag;        /* bits 0x10/0x20 choose 16-byte born/store addresses */
    int64_t born_timestamp;
    uint8_t born_host[16];   /* first 4 or 16 bytes used; decode zero-fills the rest */
    int32_t born_port;
    int64_t store_timestamp;
    uint8_t store_host[16];
    int32_t store_port;
    int32_t reconsume_times;
    int64_t prepared_transaction_offset;
    const uint8_t *body;       int32_t body_len;
    const uint8_t *topic;      int32_t topic_len;       /* V1: 0..127 */
    const uint8_t *properties; int32_t properties_len;  /* 0..32767 */
} rs_record;

/* ---- big-endian helpers (byte-wise, so alignment never matters; compilers emit bswap) ---- */

static inline void rs_put_i32(uint8_t *p, int32_t v)
{
    uint32_t u = (uint32_t)v;
    p[0] = (uint8_t)(u >> 24); p[1] = (uint8_t)(u >> 16); p[2] = (uint8_t)(u >> 8); p[3] = (uint8_t)u;
}

static inline void rs_put_i16(uint8_t *p, int32_t v)
{
    uint32_t u = (uint32_t)v;
    p[0] = (uint8_t)(u >> 8); p[1] = (uint8_t)u;
}

static inline void rs_put_i64(uint8_t *p, int64_t v)
{
    uint64_t u = (uint64_t)v;
    rs_put_i32(p, (int32_t)(uint32_t)(u >> 32));
    rs_put_i32(p + 4, (int32_t)(uint32_t)u);
}

static inline int32_t rs_get_i32(const uint8_t *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

static inline int32_t rs_get_i16(const uint8_t *p)
{
    return (int32_t)(int16_t)(uint16_t)(((uint32_t)p[0] << 8) | (uint32_t)p[1]);
}

static inline int64_t rs_get_i64(const uint8_t *p)
{
    return (int64_t)(((uint64_t)(uint32_t)rs_get_i32(p) << 32) | (uint64_t)(uint32_t)rs_get_i32(p + 4));
}

/* ---- lengths ---- */

static inline int rs_host_length(int32_t sys_flag, int32_t v6_bit)
{
    return (sys_flag & v6_bit) ? RS_HOST_V6_LENGTH : RS_HOST_V4_LENGTH;
}

/* 91 + B + T + P (+12 per IPv6 host, +1 for V2). Returns -1 if a length is negative or out of its
   field's range, if magic is neither V1 nor V2, or if the total does not fit TOTALSIZE (an int). */
static inline int64_t rs_record_length(int32_t body_len, int32_t topic_len, int32_t properties_len,
                                       int32_t sys_flag, int32_t magic)
{
    int64_t n;
    int32_t max_topic;
    if (magic == RS_MAGIC_V1) {
        max_topic = RS_MAX_TOPIC_LENGTH;
    } else if (magic == RS_MAGIC_V2) {
        max_topic = RS_MAX_TOPIC_LENGTH_V2;
    } else {
        return -1;
    }
    if (body_len < 0 || topic_len < 0 || topic_len > max_topic
        || properties_len < 0 || properties_len > RS_MAX_PROPERTIES_LENGTH)
        return -1;
    n = (int64_t)RS_RECORD_FIXED_LENGTH + body_len + topic_len + properties_len;
    if (sys_flag & RS_SYSFLAG_BORNHOST_V6) n += RS_HOST_V6_EXTRA;
    if (sys_flag & RS_SYSFLAG_STOREHOST_V6) n += RS_HOST_V6_EXTRA;
    if (magic == RS_MAGIC_V2) n += RS_TOPIC_LEN_SIZE_V2 - RS_TOPIC_LEN_SIZE;
    if (n > INT32_MAX) return -1;
    return n;
}

/* masked body CRC (§1.3): rs_crc32(0, body, len) & 0x7FFFFFFF, 0 for len <= 0 */
static inline int32_t rs_body_crc(const uint8_t *body, int64_t len)
{
    if (len <= 0) return 0;
    return (int32_t)(rs_crc32(0, body, (size_t)len) & 0x7FFFFFFFu);
}

/* RocketMQ 5.2+'s whole-record CRC property (§1.6): the last 20 bytes of a record that carries
   it are "__CRC32#" 0x01, ten decimal digits (least significant first) and 0x02, and the digits
   are rs_body_crc of the record's bytes before them. */
#define RS_PROP_CRC_LENGTH 20
#define RS_PROP_CRC_NAME_LENGTH 9

/* 1 when the record of `total` bytes at src, whose properties (`props_len` bytes) end it,
   ends in the property's name and 0x02 */
static inline int rs_prop_crc_carried(const uint8_t *src, int64_t total, int64_t props_len)
{
    return props_len >= RS_PROP_CRC_LENGTH && total >= RS_PROP_CRC_LENGTH && src[total - 1] == 2 &&
           memcmp(src + total - RS_PROP_CRC_LENGTH, "__CRC32#\x01", RS_PROP_CRC_NAME_LENGTH) == 0;
}

/* 1 when the digits of a record that carries the property are the CRC of the bytes before them */
static inline int rs_prop_crc_ok(const uint8_t *src, int64_t total)
{
    const uint8_t *digits = src + total - RS_PROP_CRC_LENGTH + RS_PROP_CRC_NAME_LENGTH;
    int64_t expected = 0, scale = 1;
    int k;
    for (k = 0; k < 10; k++, scale *= 10) {
        if (digits[k] < '0' || digits[k] > '9') return 0;
        expected += (int64_t)(digits[k] - '0') * scale;
    }
    return expected == (int64_t)rs_body_crc(src, total - RS_PROP_CRC_LENGTH);
}

/* ---- encode ---- */

/* Write one V1 record into dst[0..cap). Returns its length, or -1 if it does not fit in cap or a
   length is out of range (then NOTHING is written). r->total_size and r->magic are ignored. */
static inline int64_t rs_encode_record(uint8_t *dst, int64_t cap, const rs_record *r)
{
    int64_t n = rs_record_length(r->body_len, r->topic_len, r->properties_len, r->sys_flag, RS_MAGIC_V1);
    int host_len;
    uint8_t *p;
    if (n < 0 || cap < n) return -1;
    p = dst;
    rs_put_i32(p, (int32_t)n);                    p += RS_INT_SIZE;
    rs_put_i32(p, RS_MAGIC_V1);                   p += RS_INT_SIZE;
    rs_put_i32(p, r->body_crc);                   p += RS_INT_SIZE;
    rs_put_i32(p, r->queue_id);                   p += RS_INT_SIZE;
    rs_put_i32(p, r->flag);                       p += RS_INT_SIZE;
    rs_put_i64(p, r->queue_offset);               p += RS_LONG_SIZE;
    rs_put_i64(p, r->physical_offset);            p += RS_LONG_SIZE;
    rs_put_i32(p, r->sys_flag);                   p += RS_INT_SIZE;
    rs_put_i64(p, r->born_timestamp);             p += RS_LONG_SIZE;
    host_len = rs_host_length(r->sys_flag, RS_SYSFLAG_BORNHOST_V6);
    memcpy(p, r->born_host, (size_t)host_len);    p += host_len;
    rs_put_i32(p, r->born_port);                  p += RS_INT_SIZE;
    rs_put_i64(p, r->store_timestamp);            p += RS_LONG_SIZE;
    host_len = rs_host_length(r->sys_flag, RS_SYSFLAG_STOREHOST_V6);
    memcpy(p, r->store_host, (size_t)host_len);   p += host_len;
    rs_put_i32(p, r->store_port);                 p += RS_INT_SIZE;
    rs_put_i32(p, r->reconsume_times);            p += RS_INT_SIZE;
    rs_put_i64(p, r->prepared_transaction_offset); p += RS_LONG_SIZE;
    rs_put_i32(p, r->body_len);                   p += RS_INT_SIZE;
    if (r->body_len > 0) memcpy(p, r->body, (size_t)r->body_len);
    p += r->body_len;
    *p++ = (uint8_t)r->topic_len;
    if (r->topic_len > 0) memcpy(p, r->topic, (size_t)r->topic_len);
    p += r->topic_len;
    rs_put_i16(p, r->properties_len);             p += RS_PROPERTIES_LEN_SIZE;
    if (r->properties_len > 0) memcpy(p, r->properties, (size_t)r->properties_len);
    return n;
}

/* Write the 8-byte BLANK header (maxBlank, RS_MAGIC_BLANK) at dst; dst must have >= 8 bytes; the
   rest is untouched (as 5.x does; 4.3 leaves stale bytes there, readers never look). */
static inline void rs_encode_blank(uint8_t *dst, int32_t max_blank)
{
    rs_put_i32(dst, max_blank);
    rs_put_i32(dst + RS_INT_SIZE, RS_MAGIC_BLANK);
}

/* ---- decode ---- */

/* Decode the record at src[0..avail). Every read is bounds-checked against avail first.
   Order of checks (the pure-Python twin follows it step for step, so both report the same reason):
     1. avail < 8                                     -> RS_DECODE_END
     2. magic BLANK -> RS_DECODE_BLANK (out->total_size, out->magic set); not V1/V2 -> RS_DECODE_END
     3. TOTALSIZE < 91 (the V1/IPv4 minimum)          -> RS_DECODE_CORRUPT
     4. TOTALSIZE > avail                             -> RS_DECODE_TRUNCATED
     5. fields in file order; a field or inner length running past avail -> RS_DECODE_TRUNCATED,
        a negative body/topic/properties length    -> RS_DECODE_CORRUPT
     6. recomputed length != TOTALSIZE                -> RS_DECODE_CORRUPT
     7. check_crc: a record that ends in a __CRC32# property (§1.6) whose CRC does not match it,
        or one without it whose B > 0 and masked CRC != BODYCRC -> RS_DECODE_BAD_CRC
   Returns TOTALSIZE (> 0) for a valid record, with every field of *out filled and body/topic/
   properties pointing into src. */
static inline int64_t rs_decode_record(const uint8_t *src, int64_t avail, rs_record *out, int check_crc)
{
    int64_t pos, total;
    int32_t magic, sys_flag, len;
    int host_len;

    if (avail < RS_END_FILE_MIN_BLANK) return RS_DECODE_END;
    total = rs_get_i32(src + RS_POS_TOTAL_SIZE);
    magic = rs_get_i32(src + RS_POS_MAGIC);
    out->total_size = (int32_t)total;
    out->magic = magic;
    if (magic == RS_MAGIC_BLANK) return RS_DECODE_BLANK;
    if (magic != RS_MAGIC_V1 && magic != RS_MAGIC_V2) return RS_DECODE_END;
    if (total < RS_RECORD_FIXED_LENGTH) return RS_DECODE_CORRUPT;
    if (total > avail) return RS_DECODE_TRUNCATED;

    /* total >= 91 bytes are readable: everything up to the born host is in range */
    out->body_crc = rs_get_i32(src + RS_POS_BODY_CRC);
    out->queue_id = rs_get_i32(src + RS_POS_QUEUE_ID);
    out->flag = rs_get_i32(src + RS_POS_FLAG);
    out->queue_offset = rs_get_i64(src + RS_POS_QUEUE_OFFSET);
    out->physical_offset = rs_get_i64(src + RS_POS_PHYSICAL_OFFSET);
    sys_flag = rs_get_i32(src + RS_POS_SYSFLAG);
    out->sys_flag = sys_flag;
    out->born_timestamp = rs_get_i64(src + RS_POS_BORN_TIMESTAMP);

    pos = RS_POS_BORN_HOST;
    host_len = rs_host_length(sys_flag, RS_SYSFLAG_BORNHOST_V6);
    /* born host + port, store timestamp, store host + port, reconsume, prepared, body length */
    if (pos + host_len + RS_INT_SIZE + RS_LONG_SIZE
            + rs_host_length(sys_flag, RS_SYSFLAG_STOREHOST_V6) + RS_INT_SIZE
            + RS_INT_SIZE + RS_LONG_SIZE + RS_INT_SIZE > avail)
        return RS_DECODE_TRUNCATED;
    memset(out->born_host, 0, sizeof out->born_host);
    memcpy(out->born_host, src + pos, (size_t)host_len);      pos += host_len;
    out->born_port = rs_get_i32(src + pos);                   pos += RS_INT_SIZE;
    out->store_timestamp = rs_get_i64(src + pos);             pos += RS_LONG_SIZE;
    host_len = rs_host_length(sys_flag, RS_SYSFLAG_STOREHOST_V6);
    memset(out->store_host, 0, sizeof out->store_host);
    memcpy(out->store_host, src + pos, (size_t)host_len);     pos += host_len;
    out->store_port = rs_get_i32(src + pos);                  pos += RS_INT_SIZE;
    out->reconsume_times = rs_get_i32(src + pos);             pos += RS_INT_SIZE;
    out->prepared_transaction_offset = rs_get_i64(src + pos); pos += RS_LONG_SIZE;

    len = rs_get_i32(src + pos);                              pos += RS_INT_SIZE;
    if (len < 0) return RS_DECODE_CORRUPT;
    if ((int64_t)len > avail - pos) return RS_DECODE_TRUNCATED;
    out->body = src + pos;
    out->body_len = len;
    pos += len;

    if (magic == RS_MAGIC_V2) {
        if (RS_TOPIC_LEN_SIZE_V2 > avail - pos) return RS_DECODE_TRUNCATED;
        len = rs_get_i16(src + pos);                          pos += RS_TOPIC_LEN_SIZE_V2;
    } else {
        if (RS_TOPIC_LEN_SIZE > avail - pos) return RS_DECODE_TRUNCATED;
        len = (int32_t)(int8_t)src[pos];                      pos += RS_TOPIC_LEN_SIZE;
    }
    if (len < 0) return RS_DECODE_CORRUPT;
    if ((int64_t)len > avail - pos) return RS_DECODE_TRUNCATED;
    out->topic = src + pos;
    out->topic_len = len;
    pos += len;

    if (RS_PROPERTIES_LEN_SIZE > avail - pos) return RS_DECODE_TRUNCATED;
    len = rs_get_i16(src + pos);                              pos += RS_PROPERTIES_LEN_SIZE;
    if (len < 0) return RS_DECODE_CORRUPT;
    if ((int64_t)len > avail - pos) return RS_DECODE_TRUNCATED;
    out->properties = src + pos;
    out->properties_len = len;
    pos += len;

    if (pos != total) return RS_DECODE_CORRUPT;
    if (check_crc) {
        /* a record that carries the whole-record CRC is checked by it alone (it covers the body
           and the BODYCRC field), as RocketMQ's forceVerifyPropCRC does; one CRC pass, not two */
        int carried = rs_prop_crc_carried(src, total, out->properties_len);
        if (carried ? !rs_prop_crc_ok(src, total) :
                out->body_len > 0 && rs_body_crc(out->body, out->body_len) != out->body_crc)
            return RS_DECODE_BAD_CRC;
    }
    return total;
}

/* ---- Java String.hashCode ---- */

/* Java String.hashCode over the UTF-16 code units of UTF-8 text: h = 31*h + unit (mod 2^32), as a
   signed int32. Supplementary code points contribute two surrogate units.
   Callers should pass valid UTF-8. An invalid byte (anything Python's strict UTF-8 decoder rejects:
   stray continuation, overlong form, encoded surrogate, > U+10FFFF, truncated sequence) is hashed as
   the unit 0xDC00 | byte and decoding resumes at the next byte; that is exactly the string Python's
   bytes.decode('utf-8', 'surrogateescape') gives, so the pure twin agrees on every input.

   The running form: continue from the hash h of earlier text (0 to start), without the final cast.
   Hashing a, then b, equals hashing a + b whenever no UTF-8 sequence could span the boundary. It
   cannot next to an ASCII byte, so the IndexFile key topic "#" key hashes as topic, then '#', then
   key, with no string built. */
static inline uint32_t rs_java_hash_utf8_update(uint32_t h, const uint8_t *s, int64_t len)
{
    int64_t i = 0;
    while (i < len) {
        uint32_t b0 = s[i], cp = 0, lo = 0x80, hi = 0xBF;
        int need, k;
        if (b0 < 0x80) {
            h = 31u * h + b0;
            i++;
            continue;
        }
        if (b0 >= 0xC2 && b0 <= 0xDF) { need = 1; cp = b0 & 0x1F; }
        else if (b0 >= 0xE0 && b0 <= 0xEF) {
            need = 2; cp = b0 & 0x0F;
            if (b0 == 0xE0) lo = 0xA0;           /* no overlongs */
            else if (b0 == 0xED) hi = 0x9F;      /* no surrogates */
        } else if (b0 >= 0xF0 && b0 <= 0xF4) {
            need = 3; cp = b0 & 0x07;
            if (b0 == 0xF0) lo = 0x90;           /* no overlongs */
            else if (b0 == 0xF4) hi = 0x8F;      /* <= U+10FFFF */
        } else {
            need = 0;
        }
        for (k = 1; k <= need; k++) {
            uint32_t b;
            if (i + k >= len) break;
            b = s[i + k];
            if (b < lo || b > hi) break;
            lo = 0x80; hi = 0xBF;
            cp = (cp << 6) | (b & 0x3F);
        }
        if (need == 0 || k <= need) {            /* invalid: escape this one byte */
            h = 31u * h + (0xDC00u | b0);
            i++;
            continue;
        }
        if (cp >= 0x10000) {
            cp -= 0x10000;
            h = 31u * h + (0xD800u | (cp >> 10));
            h = 31u * h + (0xDC00u | (cp & 0x3FF));
        } else {
            h = 31u * h + cp;
        }
        i += need + 1;
    }
    return h;
}

static inline int32_t rs_java_hash_utf8(const uint8_t *s, int64_t len)
{
    return (int32_t)rs_java_hash_utf8_update(0, s, len);
}


/* ---- dispatch (§2 tagsCode and DELAY, §5.2 index keys) ---- */

#define RS_NAME_VALUE_SEPARATOR 0x01   /* MessageDecoder.NAME_VALUE_SEPARATOR */
#define RS_PROPERTY_SEPARATOR   0x02   /* MessageDecoder.PROPERTY_SEPARATOR */
#define RS_KEY_SEPARATOR        0x20   /* MessageConst.KEY_SEPARATOR: KEYS split on single spaces */
#define RS_SCHEDULE_TOPIC       "SCHEDULE_TOPIC_XXXX"   /* TopicValidator.RMQ_SYS_SCHEDULE_TOPIC */
#define RS_SCHEDULE_TOPIC_LEN   19

/* The properties dispatch reads; offsets are into the properties string, -1 when absent. */
typedef struct {
    int64_t tags_pos, keys_pos, uniq_key_pos, delay_pos;
    int32_t tags_len, keys_len, uniq_key_len, delay_len;
} rs_dispatch_props;

static inline int rs_name_is(const uint8_t *name, int64_t len, const char *want, int64_t want_len)
{
    return len == want_len && memcmp(name, want, (size_t)want_len) == 0;
}

/* Find TAGS, KEYS, UNIQ_KEY and DELAY in p[0..n) exactly as decode_properties (5.x's lenient
   rule) keeps pieces: a piece between 0x02 separators counts when its first 0x01 has a non-empty
   name before it and a non-empty value after it (the value may contain 0x01); a later kept
   duplicate wins. Reads only p[0..n). */
/* The next piece the lenient rule keeps, looking from *at: returns 1 with the piece's name at
   [*name, *sep) and its value at [*sep + 1, *end), and *at moved past it; 0 when none is left.
   Reads only p[0..n). */
static inline int rs_next_property(const uint8_t *p, int64_t n, int64_t *at,
                                   int64_t *name, int64_t *sep, int64_t *end)
{
    int64_t i = *at;
    while (i < n) {
        const uint8_t *hit = (const uint8_t *)memchr(p + i, RS_PROPERTY_SEPARATOR, (size_t)(n - i));
        int64_t stop = hit != NULL ? hit - p : n, s;
        if (stop - i >= 3) {
            hit = (const uint8_t *)memchr(p + i, RS_NAME_VALUE_SEPARATOR, (size_t)(stop - i));
            s = hit != NULL ? hit - p : -1;
            if (s > i && s < stop - 1) {
                *name = i; *sep = s; *end = stop; *at = stop + 1;
                return 1;
            }
        }
        i = stop + 1;
    }
    *at = n;
    return 0;
}

static inline void rs_dispatch_properties(const uint8_t *p, int64_t n, rs_dispatch_props *out)
{
    int64_t at = 0, name, sep, end;
    out->tags_pos = out->keys_pos = out->uniq_key_pos = out->delay_pos = -1;
    out->tags_len = out->keys_len = out->uniq_key_len = out->delay_len = 0;
    while (rs_next_property(p, n, &at, &name, &sep, &end)) {
        int64_t name_len = sep - name;
        int64_t value_pos = sep + 1;
        int32_t value_len = (int32_t)(end - value_pos);
        if (rs_name_is(p + name, name_len, "TAGS", 4)) {
            out->tags_pos = value_pos; out->tags_len = value_len;
        } else if (rs_name_is(p + name, name_len, "KEYS", 4)) {
            out->keys_pos = value_pos; out->keys_len = value_len;
        } else if (rs_name_is(p + name, name_len, "UNIQ_KEY", 8)) {
            out->uniq_key_pos = value_pos; out->uniq_key_len = value_len;
        } else if (rs_name_is(p + name, name_len, "DELAY", 5)) {
            out->delay_pos = value_pos; out->delay_len = value_len;
        }
    }
}

/* The properties pieces that the lenient rule keeps (see rs_dispatch_properties), in order,
   duplicates included: for each, where its name and value start (relative to p, plus base) and
   their lengths. Writes at most cap pieces to out (out may be NULL with cap 0); returns how many
   pieces are kept in all. Reads only p[0..n). */
typedef struct {
    int64_t name_pos;
    int64_t value_pos;
    int32_t name_len;
    int32_t value_len;
} rs_piece_row;

static inline int64_t rs_property_pieces(const uint8_t *p, int64_t n, int64_t base,
                                         rs_piece_row *out, int64_t cap)
{
    int64_t at = 0, kept = 0, name, sep, end;
    while (rs_next_property(p, n, &at, &name, &sep, &end)) {
        if (kept < cap) {
            out[kept].name_pos = base + name;
            out[kept].name_len = (int32_t)(sep - name);
            out[kept].value_pos = base + sep + 1;
            out[kept].value_len = (int32_t)(end - sep - 1);
        }
        kept++;
    }
    return kept;
}

/* Java Integer.parseInt(s) over ASCII: an optional sign, then one or more digits 0-9, within the
   int range. Returns 1 and sets *out, or 0 where Java throws NumberFormatException. (Java also
   takes non-ASCII Unicode digits; brokers write DELAY in ASCII, so those count as unparseable.) */
static inline int rs_parse_java_int(const uint8_t *s, int64_t len, int32_t *out)
{
    int64_t i = 0, value = 0;
    int negative = 0;
    if (len <= 0) return 0;
    if (s[0] == '-' || s[0] == '+') {
        negative = s[0] == '-';
        i = 1;
        if (len == 1) return 0;
    }
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        value = value * 10 + (s[i] - '0');
        if (value > (int64_t)INT32_MAX + 1) return 0;   /* keeps value far from int64 overflow */
    }
    if (negative) value = -value;
    if (value > INT32_MAX) return 0;
    *out = (int32_t)value;
    return 1;
}

/* How many index keys the KEYS value s[0..len) holds: its non-empty tokens between single spaces. */
static inline int64_t rs_count_key_tokens(const uint8_t *s, int64_t len)
{
    int64_t i, count = 0;
    for (i = 0; i < len; i++)
        if (s[i] != RS_KEY_SEPARATOR && (i == 0 || s[i - 1] == RS_KEY_SEPARATOR)) count++;
    return count;
}

#endif /* ROCKETSTORE_RECORD_H */
