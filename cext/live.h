/* The live page: a 4 KiB file (<store>/rocketstore-live) every process that opens the store maps
 * shared. The writer publishes where its whole records end and bumps a sequence word after every
 * put; a process waiting for messages sleeps on that word (a futex on Linux: no CPU while it
 * waits, woken within microseconds of the put, from any process). Layout (little-endian,
 * rocketstore.processes.live documents it): */
#ifndef ROCKETSTORE_LIVE_H
#define ROCKETSTORE_LIVE_H

#include <stdint.h>
#include <errno.h>
#include <time.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <limits.h>
#endif

#define RS_LIVE_SIZE 4096
#define RS_LIVE_SEQ 8          /* u32: bumped after every put; the futex word */
#define RS_LIVE_WAITERS 12     /* u32: waiters that counted themselves in (atomically) */
#define RS_LIVE_WROTE 16       /* i64: end of the writer's whole records */
#define RS_LIVE_ALWAYS_WAKE 40 /* u32: set (never cleared) by a waiter that cannot count itself in */

#define RS_LIVE_SLOTS 64       /* per-topic words: a put wakes the waiters of its topic's slot */
#define RS_LIVE_SLOT0 64       /* slot i: u32 sequence at 64 + 8 i, u32 waiters at 68 + 8 i */
#define RS_LIVE_MAX_WAIT 64

static inline uint32_t *rs_live_u32(uint8_t *page, int at) { return (uint32_t *)(page + at); }
static inline int64_t *rs_live_i64(uint8_t *page, int at) { return (int64_t *)(page + at); }

/* Writer: whole records of the topics in `slots` (a bit per slot) were put; the slots' words
 * move and their waiters wake, then the page's. */
static inline void rs_live_publish_slots(uint8_t *page, int64_t wrote, uint64_t slots) {
    int64_t *at = rs_live_i64(page, RS_LIVE_WROTE);
    int64_t seen = __atomic_load_n(at, __ATOMIC_ACQUIRE);
    if (seen == wrote)
        return;
    int always = __atomic_load_n(rs_live_u32(page, RS_LIVE_ALWAYS_WAKE), __ATOMIC_RELAXED) != 0;
    /* Only ever forward: writers of several processes (rocketstore.log.sharedappend) publish in turn,
     * and one that publishes late must not take back another's end. */
    while (seen < wrote && !__atomic_compare_exchange_n(at, &seen, wrote, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        ;
    /* only the set bits (a put moves one slot: one step, not RS_LIVE_SLOTS) */
    for (uint64_t left = slots; left != 0; left &= left - 1) {
        int i = __builtin_ctzll(left);
        uint32_t *word = rs_live_u32(page, RS_LIVE_SLOT0 + 8 * i);
        __atomic_add_fetch(word, 1, __ATOMIC_SEQ_CST);
        if (always || __atomic_load_n(rs_live_u32(page, RS_LIVE_SLOT0 + 8 * i + 4), __ATOMIC_SEQ_CST))
#ifdef __linux__
            syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
#else
            ;
#endif
    }
    __atomic_add_fetch(rs_live_u32(page, RS_LIVE_SEQ), 1, __ATOMIC_SEQ_CST);
    if (always || __atomic_load_n(rs_live_u32(page, RS_LIVE_WAITERS), __ATOMIC_SEQ_CST))
#ifdef __linux__
        syscall(SYS_futex, rs_live_u32(page, RS_LIVE_SEQ), FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
#else
        ;
#endif
}

#if defined(__linux__) && !defined(SYS_futex_waitv)
#define SYS_futex_waitv 449
#endif

struct rs_futex_waitv { uint64_t val; uint64_t uaddr; uint32_t flags; uint32_t reserved; };

/* CLOCK_MONOTONIC now plus timeout_ms (now itself when timeout_ms < 0). */
static inline void rs_live_deadline(int64_t timeout_ms, struct timespec *deadline) {
    clock_gettime(CLOCK_MONOTONIC, deadline);
    if (timeout_ms >= 0) {
        deadline->tv_sec += timeout_ms / 1000;
        deadline->tv_nsec += (timeout_ms % 1000) * 1000000L;
        if (deadline->tv_nsec >= 1000000000L) { deadline->tv_sec++; deadline->tv_nsec -= 1000000000L; }
    }
}

/* The time from now to `deadline` into *left; 0 once it has passed. */
static inline int rs_live_left(const struct timespec *deadline, struct timespec *left) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    left->tv_sec = deadline->tv_sec - now.tv_sec;
    left->tv_nsec = deadline->tv_nsec - now.tv_nsec;
    if (left->tv_nsec < 0) { left->tv_sec--; left->tv_nsec += 1000000000L; }
    return left->tv_sec >= 0;
}

static inline void rs_live_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* The opt-in spin before a wait sleeps: read the words at `at[0..n)` (and the page's sequence
 * word when `page_seen` is not NULL) until one no longer holds what the caller saw, for at most
 * spin_us microseconds and never past `deadline` (timeout_ms < 0: none). Returns 1 if one
 * changed. It counts itself in nowhere: a put seen while spinning costs the writer no wake-up
 * call. */
static inline int rs_live_spin(uint8_t *page, int n, const int *at, const uint32_t *seen,
                               const uint32_t *page_seen, int64_t spin_us, int64_t timeout_ms,
                               const struct timespec *deadline) {
    if (spin_us <= 0)
        return 0;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += spin_us / 1000000;
    until.tv_nsec += (spin_us % 1000000) * 1000L;
    if (until.tv_nsec >= 1000000000L) { until.tv_sec++; until.tv_nsec -= 1000000000L; }
    if (timeout_ms >= 0 && (deadline->tv_sec < until.tv_sec ||
                            (deadline->tv_sec == until.tv_sec && deadline->tv_nsec < until.tv_nsec)))
        until = *deadline;
    for (unsigned k = 1;; k++) {
        for (int i = 0; i < n; i++)
            if (__atomic_load_n(rs_live_u32(page, at[i]), __ATOMIC_ACQUIRE) != seen[i])
                return 1;
        if (page_seen != NULL && __atomic_load_n(rs_live_u32(page, RS_LIVE_SEQ), __ATOMIC_ACQUIRE) != *page_seen)
            return 1;
        rs_live_relax();
        if ((k & 63) == 0) {  /* a clock read costs more than a look at the words */
            struct timespec left;
            if (!rs_live_left(&until, &left) || (left.tv_sec == 0 && left.tv_nsec == 0))
                return 0;
        }
    }
}

/* Sleep until one of the words at byte offsets `at[0..n)` no longer holds `seen[i]`, or
 * timeout_ms passes (-1: no limit). Returns 1 if one changed, 0 on timeout. One word: FUTEX_WAIT;
 * several: futex_waitv (Linux >= 5.16), else the page's sequence word (`page_seen`: its value
 * when the caller looked). spin_us > 0: spin on the words that long first (rs_live_spin). Call
 * without the GIL. */
static inline int rs_live_wait_words(uint8_t *page, int n, const int *at, const uint32_t *seen,
                                     uint32_t page_seen, int64_t timeout_ms, int64_t spin_us) {
    struct timespec deadline, left;
    rs_live_deadline(timeout_ms, &deadline);
    if (rs_live_spin(page, n, at, seen, NULL, spin_us, timeout_ms, &deadline))
        return 1;
    for (int i = 0; i < n; i++)
        __atomic_add_fetch(rs_live_u32(page, at[i] + 4), 1, __ATOMIC_SEQ_CST);
    int counted_page = 0, changed = 0;
    for (;;) {
        for (int i = 0; i < n && !changed; i++)
            changed = __atomic_load_n(rs_live_u32(page, at[i]), __ATOMIC_SEQ_CST) != seen[i];
        if (changed || (counted_page && __atomic_load_n(rs_live_u32(page, RS_LIVE_SEQ), __ATOMIC_SEQ_CST) != page_seen))
            { changed = 1; break; }
        if (timeout_ms >= 0 && !rs_live_left(&deadline, &left))
            break;
#ifdef __linux__
        if (n == 1 && !counted_page) {
            syscall(SYS_futex, rs_live_u32(page, at[0]), FUTEX_WAIT, seen[0], timeout_ms >= 0 ? &left : NULL, NULL, 0);
            continue;
        }
        if (!counted_page) {
            struct rs_futex_waitv w[RS_LIVE_MAX_WAIT];
            for (int i = 0; i < n; i++) {
                w[i].val = seen[i];
                w[i].uaddr = (uint64_t)(uintptr_t)rs_live_u32(page, at[i]);
                w[i].flags = 2;  /* FUTEX2_SIZE_U32, shared */
                w[i].reserved = 0;
            }
            struct timespec abs_deadline = deadline;  /* futex_waitv takes an absolute time */
            long rc = syscall(SYS_futex_waitv, w, n, 0, timeout_ms >= 0 ? &abs_deadline : NULL, CLOCK_MONOTONIC);
            if (rc >= 0 || errno == EAGAIN || errno == ETIMEDOUT || errno == EINTR)
                continue;
            /* no futex_waitv (ENOSYS): sleep on the page's word, which every put moves */
            __atomic_add_fetch(rs_live_u32(page, RS_LIVE_WAITERS), 1, __ATOMIC_SEQ_CST);
            counted_page = 1;
            continue;
        }
        syscall(SYS_futex, rs_live_u32(page, RS_LIVE_SEQ), FUTEX_WAIT, page_seen, timeout_ms >= 0 ? &left : NULL, NULL, 0);
#else
        struct timespec ms = {0, 1000000L};
        if (timeout_ms >= 0 && left.tv_sec == 0 && left.tv_nsec < ms.tv_nsec) ms = left;
        nanosleep(&ms, NULL);
#endif
    }
    for (int i = 0; i < n; i++)
        __atomic_sub_fetch(rs_live_u32(page, at[i] + 4), 1, __ATOMIC_SEQ_CST);
    if (counted_page)
        __atomic_sub_fetch(rs_live_u32(page, RS_LIVE_WAITERS), 1, __ATOMIC_SEQ_CST);
    return changed;
}

/* Bump the sequence and wake every waiter (a change that is not a put: deletion, close). */
static inline void rs_live_wake(uint8_t *page) {
    __atomic_add_fetch(rs_live_u32(page, RS_LIVE_SEQ), 1, __ATOMIC_SEQ_CST);
#ifdef __linux__
    syscall(SYS_futex, rs_live_u32(page, RS_LIVE_SEQ), FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
#endif
}

static inline uint32_t rs_live_seq(uint8_t *page) {
    return __atomic_load_n(rs_live_u32(page, RS_LIVE_SEQ), __ATOMIC_SEQ_CST);
}

/* Sleep until the sequence is no longer `seen`, or timeout_ms passes (-1: no limit). Returns 1 if
 * it changed, 0 on timeout. Without futexes it polls the word every millisecond. spin_us > 0:
 * spin on the word that long first (rs_live_spin). Call without the GIL. */
static inline int rs_live_wait(uint8_t *page, uint32_t seen, int64_t timeout_ms, int64_t spin_us) {
    uint32_t *word = rs_live_u32(page, RS_LIVE_SEQ);
    struct timespec deadline;
    rs_live_deadline(timeout_ms, &deadline);
    if (rs_live_spin(page, 0, NULL, NULL, &seen, spin_us, timeout_ms, &deadline))
        return 1;
    __atomic_add_fetch(rs_live_u32(page, RS_LIVE_WAITERS), 1, __ATOMIC_SEQ_CST);
    int changed = 0;
    for (;;) {
        if (__atomic_load_n(word, __ATOMIC_SEQ_CST) != seen) { changed = 1; break; }
        struct timespec left;
        if (timeout_ms >= 0 && !rs_live_left(&deadline, &left))
            break;
#ifdef __linux__
        /* FUTEX_WAIT sleeps only while the word still holds `seen` (checked by the kernel). */
        syscall(SYS_futex, word, FUTEX_WAIT, seen, timeout_ms >= 0 ? &left : NULL, NULL, 0);
#else
        struct timespec ms = {0, 1000000L};
        if (timeout_ms >= 0 && left.tv_sec == 0 && left.tv_nsec < ms.tv_nsec) ms = left;
        nanosleep(&ms, NULL);
#endif
    }
    __atomic_sub_fetch(rs_live_u32(page, RS_LIVE_WAITERS), 1, __ATOMIC_SEQ_CST);
    return changed;
}

#endif
