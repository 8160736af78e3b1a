/* The shared append table: <store>/rocketstore-append, mapped by every process that appends to
 * the store (rocketstore.log.sharedappend documents it; its pure twin mirrors these offsets).
 *
 * One cross-process lock (a robust process-shared mutex: a holder that dies leaves it to the next
 * with EOWNERDEAD) guards the append. Under it a writer reads where whole records end
 * (`end`), appends there, moves each queue's next offset, and publishes: it notes the new end in
 * `publishing`, copies the next offsets to the committed ones, then sets `end`. A writer that
 * dies inside leaves `busy` set, and the next holder repairs (rs_ap_repair): a dead writer that
 * had begun to publish (`publishing` past `end`) has its publish finished for it; any other has
 * every queue's next offset restored from its committed copy, and the next append goes from `end`
 * again, over whatever the dead one half wrote. So the committed offsets always count exactly
 * the records before `end`: no queue offset is given twice, none skipped. `epoch` is
 * the owning process's generation: 0 while no owner vouches for the table (it is opening,
 * recovering or gone), and a writer whose epoch differs appends nothing. */
#ifndef ROCKETSTORE_APPEND_H
#define ROCKETSTORE_APPEND_H

#include <stdint.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#define RS_AP_SIZE (64LL << 20)     /* the file (sparse: a few pages are ever written) */
#define RS_AP_HEAD 4096
#define RS_AP_ENTRY 20480           /* one topic: name page, then next[] and committed[] */
#define RS_AP_QUEUES 1024           /* queues an entry holds (create_topic's limit) */
#define RS_AP_MAX_ENTRIES ((RS_AP_SIZE - RS_AP_HEAD) / RS_AP_ENTRY)
#define RS_AP_MAGIC 0x31444e5050415352ULL   /* "RSAPPND1" */

/* header */
#define RS_AP_O_MAGIC 0      /* u64 */
#define RS_AP_O_EPOCH 8      /* u64: 0 = nobody may append through the table */
#define RS_AP_O_BUSY 16      /* u32: pid of the writer inside, 0 when none */
#define RS_AP_O_FULL 20      /* u32: no entry can be added (topics past it go through the owner) */
#define RS_AP_O_END 24       /* i64: where whole records end */
#define RS_AP_O_LAST_TS 32   /* i64: the last store timestamp */
#define RS_AP_O_ENTRIES 40   /* u32 */
#define RS_AP_O_SEGMENT 48   /* i64: the CommitLog's segment size */
#define RS_AP_O_REFUSING 56  /* u32: the owner refuses puts (disk full): joined puts go to it */
#define RS_AP_O_TOPICS 60    /* u32: moved by the owner when a topic's attributes change (Python reads it) */
#define RS_AP_O_PUBLISHING 64 /* i64: the end the writer inside publishes (noted before its offsets) */
#define RS_AP_O_MUTEX 128    /* the append lock: a process-shared robust pthread mutex (<= 128 bytes) */
/* entry */
#define RS_AP_E_NAME_LEN 0   /* u32 */
#define RS_AP_E_NQUEUES 4    /* i32: 0 unknown (ask the owner), -1 kept by the owner alone */
#define RS_AP_E_NAME 8       /* up to 128 bytes */
#define RS_AP_E_NEXT 4096    /* i64[RS_AP_QUEUES] */
#define RS_AP_E_COMMITTED 12288

static inline uint64_t *rs_ap_u64(uint8_t *t, int64_t at) { return (uint64_t *)(t + at); }
static inline int64_t *rs_ap_i64(uint8_t *t, int64_t at) { return (int64_t *)(t + at); }
static inline uint32_t *rs_ap_u32(uint8_t *t, int64_t at) { return (uint32_t *)(t + at); }
static inline int32_t *rs_ap_i32(uint8_t *t, int64_t at) { return (int32_t *)(t + at); }

static inline uint64_t rs_ap_epoch(uint8_t *t) {
    return __atomic_load_n(rs_ap_u64(t, RS_AP_O_EPOCH), __ATOMIC_ACQUIRE);
}
static inline int64_t rs_ap_end(uint8_t *t) { return __atomic_load_n(rs_ap_i64(t, RS_AP_O_END), __ATOMIC_ACQUIRE); }
static inline void rs_ap_set_end(uint8_t *t, int64_t end) {
    __atomic_store_n(rs_ap_i64(t, RS_AP_O_END), end, __ATOMIC_RELEASE);
}
/* A publish's first step: the end it publishes, stored before any committed offset moves (the
 * fence keeps the copies after it, for a process that finds the writer dead in between). */
static inline void rs_ap_begin_publish(uint8_t *t, int64_t end) {
    __atomic_store_n(rs_ap_i64(t, RS_AP_O_PUBLISHING), end, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
}
/* busy: cleared only after the end is published (a release store: not moved before it). */
static inline void rs_ap_set_busy(uint8_t *t, uint32_t pid) {
    __atomic_store_n(rs_ap_u32(t, RS_AP_O_BUSY), pid, __ATOMIC_RELEASE);
}


/* The append lock. A holder that died leaves it to the next (EOWNERDEAD): made consistent here;
 * `busy` says whether the dead one was inside an append (the caller repairs). */
_Static_assert(sizeof(pthread_mutex_t) <= 128, "the append lock fits its 128 bytes");

static inline int rs_ap_lock(uint8_t *t) {
    pthread_mutex_t *m = (pthread_mutex_t *)(t + RS_AP_O_MUTEX);
    int rc = pthread_mutex_lock(m);
    if (rc == EOWNERDEAD)
        rc = pthread_mutex_consistent(m);
    return rc;
}

static inline int rs_ap_unlock(uint8_t *t) { return pthread_mutex_unlock((pthread_mutex_t *)(t + RS_AP_O_MUTEX)); }

/* 1 while a process holds the owner's presence lock (a read lock on byte 1, taken by the owner
 * for as long as it shares: the kernel drops it when the owner dies), 0 when none does. */
static inline int rs_ap_owner_present(int fd) {
#ifdef F_OFD_GETLK
    struct flock fl;
    memset(&fl, 0, sizeof(fl));
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = 1;
    fl.l_len = 1;
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
        return 0;
    return fl.l_type != F_UNLCK;
#else
    (void)fd;
    return 0;
#endif
}

/* The byte offset of the entry named `name`, or -1. */
static inline int64_t rs_ap_find(uint8_t *t, const uint8_t *name, uint32_t len) {
    uint32_t n = *rs_ap_u32(t, RS_AP_O_ENTRIES);
    if (n > RS_AP_MAX_ENTRIES)
        n = RS_AP_MAX_ENTRIES;
    for (uint32_t i = 0; i < n; i++) {
        int64_t at = RS_AP_HEAD + (int64_t)i * RS_AP_ENTRY;
        if (*rs_ap_u32(t, at + RS_AP_E_NAME_LEN) == len && memcmp(t + at + RS_AP_E_NAME, name, len) == 0)
            return at;
    }
    return -1;
}

/* A new entry (next and committed all 0; the caller fills them), or -1 when the table is full
 * or the name too long. */
static inline int64_t rs_ap_add(uint8_t *t, const uint8_t *name, uint32_t len, int32_t nqueues) {
    uint32_t n = *rs_ap_u32(t, RS_AP_O_ENTRIES);
    if (len > 128 || n >= RS_AP_MAX_ENTRIES) {
        *rs_ap_u32(t, RS_AP_O_FULL) = 1;
        return -1;
    }
    int64_t at = RS_AP_HEAD + (int64_t)n * RS_AP_ENTRY;
    memset(t + at, 0, RS_AP_ENTRY);
    memcpy(t + at + RS_AP_E_NAME, name, len);
    *rs_ap_i32(t, at + RS_AP_E_NQUEUES) = nqueues;
    *rs_ap_u32(t, at + RS_AP_E_NAME_LEN) = len;
    *rs_ap_u32(t, RS_AP_O_ENTRIES) = n + 1;
    return at;
}

/* After a writer died inside (`busy` set). It noted the end it publishes (`publishing`) before it
 * copied any next offset to its committed one, and set `end` after it copied them all. So when
 * `publishing` is past `end` it died in between: its records up to `publishing` are whole and its
 * next offsets count exactly them, some committed, some not: its publish is finished (every
 * committed offset from its next one, then the end). Otherwise it died before it began (its next
 * offsets may count records past `end` that the next append writes over: every next offset goes
 * back to its committed one) or after the end (the two agree). Done again from the start if the
 * repairing process dies too. */
static inline void rs_ap_repair(uint8_t *t) {
    int64_t end = rs_ap_end(t);
    int64_t publishing = __atomic_load_n(rs_ap_i64(t, RS_AP_O_PUBLISHING), __ATOMIC_ACQUIRE);
    int finish = publishing > end;
    uint32_t n = *rs_ap_u32(t, RS_AP_O_ENTRIES);
    if (n > RS_AP_MAX_ENTRIES)
        n = RS_AP_MAX_ENTRIES;
    for (uint32_t i = 0; i < n; i++) {
        int64_t at = RS_AP_HEAD + (int64_t)i * RS_AP_ENTRY;
        if (finish)
            memcpy(t + at + RS_AP_E_COMMITTED, t + at + RS_AP_E_NEXT, 8 * RS_AP_QUEUES);
        else
            memcpy(t + at + RS_AP_E_NEXT, t + at + RS_AP_E_COMMITTED, 8 * RS_AP_QUEUES);
    }
    if (finish)
        rs_ap_set_end(t, publishing);
    rs_ap_set_busy(t, 0);
}

#endif
