/* CommitLog flush and pre-fault threads; see flusher.h for the contract. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "flusher.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define PREFAULT_CHUNK (2 * 1024 * 1024)
#define PREFAULT_POLL_MS 2         /* while the writer moves */
#define PREFAULT_IDLE_MAX_MS 200   /* back-off ceiling while it does not (an idle store sleeps) */
#define FLUSH_ERROR_BACKOFF_MS 10
/* After a round, the pages from its end on that the writer is about to write are made writable
   again (see flush_round) up to this far ahead. */
#define REPOPULATE_BYTES (64 * 1024)

#ifdef RS_DEBUG_HOOKS
/* Debug builds only (ROCKETSTORE_DEBUG_HOOKS=1): while non-zero, every flush round fails with
 * this errno after its msync and data sync, as a failing disk would (tests of the error path). */
static _Atomic int rs_debug_sync_errno = 0;
void rs_flusher_debug_fail_syncs(int err) { atomic_store(&rs_debug_sync_errno, err); }
#endif

typedef struct {
    int64_t start;
    uint8_t *addr;
    int64_t size;
    int fd;                 /* the segment file, or -1: F_FULLFSYNC after msync where it exists */
} segment;

struct rs_flusher {
    /* `mu` guards the request/stop/stat fields and the condition variables. */
    pthread_mutex_t mu;
    pthread_cond_t work_cv;   /* flush thread sleeps here */
    pthread_cond_t done_cv;   /* durable waiters sleep here (on Linux: on done_gen, a futex) */
    pthread_cond_t stop_cv;   /* pre-fault thread sleeps here */
    /* `seg_mu` guards the segment table and is only ever held for a copy or an edit of it, so
       rs_flusher_register (called with the GIL held) never waits behind a system call. A flush
       round copies the table under it and msyncs under `flush_mu`; the pre-fault thread copies
       the segment it fills and populates under `populate_mu`. Unregister removes the segment,
       then takes `flush_mu` and `populate_mu` in turn: a round or a populate that copied the
       table before the removal has finished when it returns, so the map may go. */
    pthread_mutex_t seg_mu;
    pthread_mutex_t flush_mu;
    pthread_mutex_t populate_mu;
    segment segs[RS_FLUSHER_MAX_SEGMENTS];
    int nsegs;

    _Atomic int64_t wrote;
    _Atomic int64_t flushed;
    _Atomic int64_t prefaulted;
    _Atomic int64_t requested;  /* highest offset a durable put asked for */
    _Atomic int idle;           /* flush thread is (about to be) asleep on work_cv */
    int joined;                 /* rs_flusher_stop finished: threads gone (under mu) */
    int stop;
    int last_errno;
    int64_t round_seq;           /* flush rounds begun (under mu) */
    int64_t err_seq;             /* the round that set last_errno: waiters that arrived before
                                    it began get its error; later ones wait for a fresh round */

    int interval_ms;
    int least_pages;
    int thorough_ms;
    int64_t prefault_bytes;
    int64_t page;

    int64_t flush_rounds, flushed_bytes, sync_requests, sync_timeouts, prefaulted_bytes;
    int arrivals;                /* durable waits begun since the last round started (under mu) */
    int round_size;              /* arrivals the last round started with */
    int expected;                /* round_size + arrivals during that round: the group to gather */
    int64_t last_round_us;       /* how long that round's msync took */
    /* Bumped (after flushed, last_errno, err_seq or stop changed) whenever durable waiters must
       look again. On Linux they sleep on it as a futex, not on done_cv: a round's end wakes every
       waiter it covered, and a condition variable would make each of them take `mu` in turn on
       the way out (the flush thread too), a convoy of context switches between the end of one
       round and the puts of the next. The waiters read the fields below it atomically. */
    uint32_t done_gen;

    pthread_t flush_thread;
    pthread_t prefault_thread;
    int prefault_running;
    int populate_write_ok;
    int prefault_errno;
};

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Condition variables wait on CLOCK_MONOTONIC where pthread_condattr_setclock exists. */
#if defined(__APPLE__)
#define RS_COND_CLOCK CLOCK_REALTIME
#else
#define RS_COND_CLOCK CLOCK_MONOTONIC
#endif

static void deadline_after(struct timespec *ts, int64_t ms) {
    clock_gettime(RS_COND_CLOCK, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000;
    if (ts->tv_nsec >= 1000000000) {
        ts->tv_sec += 1;
        ts->tv_nsec -= 1000000000;
    }
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* After msync: macOS's msync and fsync leave the data in the drive's cache; F_FULLFSYNC flushes
 * it (a file system without it falls back to fsync). Elsewhere msync(MS_SYNC) is the data sync. */
static int full_sync(int fd) {
#ifdef F_FULLFSYNC
    if (fd < 0)
        return 0;
    if (fcntl(fd, F_FULLFSYNC) == 0)
        return 0;
    if (errno == ENOTSUP || errno == EINVAL)
        return fsync(fd);
    return errno == EBADF ? 0 : -1;    /* file closed meanwhile: the msync was all there was */
#else
    (void)fd;
    return 0;
#endif
}

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Durable waiters look again (flushed, last_errno, err_seq or stop changed). Called with mu held. */
static void wake_waiters(rs_flusher *f) {
    __atomic_add_fetch(&f->done_gen, 1, __ATOMIC_SEQ_CST);
#ifdef __linux__
    syscall(SYS_futex, &f->done_gen, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    pthread_cond_broadcast(&f->done_cv);
#endif
}

/* One flush round: msync [flushed, target) of every registered map, where target is everything
 * written (sync rounds) or only the whole pages behind the writer (async rounds: msync
 * write-protects the pages it cleans, and the writer would fault again on its current page).
 * Called and returns with mu held. */
static void flush_round(rs_flusher *f, int whole_pages_only) {
    int64_t from = atomic_load_explicit(&f->flushed, memory_order_acquire);
    int64_t target = atomic_load_explicit(&f->wrote, memory_order_acquire);
    if (whole_pages_only)
        target &= ~(f->page - 1);
    if (target <= from)
        return;
    f->round_size = f->arrivals;
    f->arrivals = 0;
    int64_t seq = ++f->round_seq;
    pthread_mutex_unlock(&f->mu);

    segment segs[RS_FLUSHER_MAX_SEGMENTS];
    int nsegs, err = 0;
    int64_t started = now_us();
    pthread_mutex_lock(&f->flush_mu);
    pthread_mutex_lock(&f->seg_mu);
    nsegs = f->nsegs;
    memcpy(segs, f->segs, sizeof(segment) * (size_t)nsegs);
    pthread_mutex_unlock(&f->seg_mu);
    for (int i = 0; i < nsegs; i++) {
        segment *s = &segs[i];
        int64_t lo = max64(from, s->start), hi = min64(target, s->start + s->size);
        if (lo >= hi)
            continue;
        int64_t rel_lo = (lo - s->start) & ~(f->page - 1);
        if (msync(s->addr + rel_lo, (size_t)(hi - s->start - rel_lo), MS_SYNC) != 0)
            err = errno;
        else if (full_sync(s->fd) != 0)
            err = errno;
        /* The sync left the pages it wrote back write-protected (the kernel tracks their next
           change), and with them, on some file systems, the pages written back with them ahead
           of the writer (ext4's ordered data). The writer's next store to one faults, and the
           fault can wait on the file system's journal, while the writer holds its lock and, in
           Python, the GIL: every thread waits behind it between two rounds. Fault them writable
           here instead, where nobody waits. Only pages populated before (below `prefaulted`:
           their blocks are there, so this cannot fail for space), only with
           MADV_POPULATE_WRITE (it changes no byte), and a failure only leaves the fault to the
           writer. A round of one put leaves it to that put's next store: nobody waits
           behind it, and an madvise per round would only add to that put's wait. */
        int64_t ahead = min64(min64(target + REPOPULATE_BYTES, s->start + s->size),
                              atomic_load(&f->prefaulted));
        if (err == 0 && f->round_size > 1 && f->populate_write_ok && target >= s->start && ahead > target)
            (void)rs_populate_write(s->addr + (target - s->start), ahead - target);
    }
#ifdef RS_DEBUG_HOOKS
    if (!err)
        err = atomic_load(&rs_debug_sync_errno);
#endif
    pthread_mutex_unlock(&f->flush_mu);
    int64_t took = now_us() - started;

    pthread_mutex_lock(&f->mu);
    if (err == 0) {
        atomic_store_explicit(&f->flushed, target, memory_order_release);
        f->flush_rounds++;
        f->flushed_bytes += target - from;
    }
    f->last_round_us = took;
    /* Those it covers plus those that came during it: how many the next round should gather. */
    f->expected = f->round_size + f->arrivals;
    __atomic_store_n(&f->last_errno, err, __ATOMIC_RELAXED);
    if (err)
        __atomic_store_n(&f->err_seq, seq, __ATOMIC_RELAXED);
    wake_waiters(f);
}

/* Group commit: before a sync round, give the puts woken by the last round a moment to come
 * back (bounded by half the last round's duration, at most 1 ms), so one msync covers them all
 * instead of alternating one-put and many-put rounds. Called with mu held. */
/* noinline: inlined into flush_main, GCC 12 under -fsanitize=address reports the atomic stores
 * to f->idle as writing "into a region of size 0" (a -Wstringop-overflow false positive). */
__attribute__((noinline)) static void gather_waiters(rs_flusher *f) {
    if (f->arrivals >= f->expected || f->expected <= 1)
        return;
    int64_t budget = min64(max64(f->last_round_us / 2, 20), 1000);
    struct timespec ts;
    clock_gettime(RS_COND_CLOCK, &ts);
    ts.tv_nsec += budget * 1000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec += 1;
        ts.tv_nsec -= 1000000000;
    }
    while (!f->stop && f->arrivals < f->expected) {
        atomic_store(&f->idle, 1);
        int rc = pthread_cond_timedwait(&f->work_cv, &f->mu, &ts);
        atomic_store(&f->idle, 0);
        if (rc == ETIMEDOUT)
            break;
    }
}

static void *flush_main(void *arg) {
    rs_flusher *f = (rs_flusher *)arg;
    pthread_mutex_lock(&f->mu);
    int64_t next_async = now_ms() + f->interval_ms;
    int64_t last_thorough = now_ms();
    while (!f->stop) {
        if (atomic_load(&f->requested) > atomic_load(&f->flushed)) {
            gather_waiters(f);
            flush_round(f, 0);
            if (f->last_errno) {
                struct timespec ts;
                deadline_after(&ts, FLUSH_ERROR_BACKOFF_MS);
                pthread_cond_timedwait(&f->work_cv, &f->mu, &ts);
            }
            continue;
        }
        int64_t now = now_ms();
        if (now >= next_async) {
            next_async = now + f->interval_ms;
            int64_t wrote = atomic_load(&f->wrote), flushed = atomic_load(&f->flushed);
            if (now - last_thorough >= f->thorough_ms) {
                last_thorough = now;
                flush_round(f, 0);
            } else if (wrote / f->page - flushed / f->page >= f->least_pages) {
                flush_round(f, 1);
            }
            continue;
        }
        /* Announce sleep, then re-check: a requester stores `requested` then loads `idle`, so
           (seq_cst) either it sees idle and signals under mu, or we see its request here. */
        atomic_store(&f->idle, 1);
        if (atomic_load(&f->requested) <= atomic_load(&f->flushed)) {
            struct timespec ts;
            deadline_after(&ts, next_async - now);
            pthread_cond_timedwait(&f->work_cv, &f->mu, &ts);
        }
        atomic_store(&f->idle, 0);
    }
    flush_round(f, 0);
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

static int64_t page_size(void) {
    static int64_t page = 0;
    if (page == 0) {
        long p = sysconf(_SC_PAGESIZE);
        page = p > 0 ? p : 4096;
    }
    return page;
}

int rs_populate_write(uint8_t *addr, int64_t len) {
#if defined(__linux__)
    if (len <= 0)
        return 0;
    uintptr_t start = (uintptr_t)addr & ~(uintptr_t)(page_size() - 1);
    size_t span = (size_t)((uintptr_t)addr + (uintptr_t)len - start);
    return madvise((void *)start, span, MADV_POPULATE_WRITE) == 0 ? 0 : errno;
#else
    (void)addr;
    (void)len;
    return EINVAL;
#endif
}

int rs_populate_supported(void) {
    static int supported = -1;
    if (supported < 0) {
        int64_t page = page_size();
        void *probe = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (probe == MAP_FAILED) {
            supported = 0;
        } else {
            supported = rs_populate_write((uint8_t *)probe, page) == 0;
            munmap(probe, (size_t)page);
        }
    }
    return supported;
}

static void advance_prefaulted(rs_flusher *f, int64_t upto) {
    int64_t cur = atomic_load(&f->prefaulted);
    while (cur < upto && !atomic_compare_exchange_weak(&f->prefaulted, &cur, upto))
        ;
}

int64_t rs_flusher_prefaulted(const rs_flusher *f) {
    return atomic_load_explicit(&((rs_flusher *)f)->prefaulted, memory_order_acquire);
}

void rs_flusher_note_prefaulted(rs_flusher *f, int64_t upto) {
    advance_prefaulted(f, upto);
    /* The writer got past the thread: it sleeps (an idle store's back-off lets it sleep 200 ms)
       or falls behind. Wake it to go ahead of the writer again, so that a burst of puts does not
       zero its own pages (a fifth to a third of a keyed batch's time). */
    if (f->prefault_running) {
        pthread_mutex_lock(&f->mu);
        pthread_cond_broadcast(&f->stop_cv);
        pthread_mutex_unlock(&f->mu);
    }
}

/* Populate [lo, hi) of a map for writing without changing its bytes; 0 or an errno. */
static int populate(rs_flusher *f, uint8_t *addr, int64_t lo, int64_t hi) {
    if (f->populate_write_ok) {
        int err = rs_populate_write(addr + lo, hi - lo);
        if (err != EINVAL && err != EOPNOTSUPP)
            return err;
        f->populate_write_ok = 0;
    }
    /* Kernels without MADV_POPULATE_WRITE: segments are fallocated (blocks reserved), so an
       atomic add of zero can write-fault each page without risking SIGBUS or a lost store. */
    int64_t start = lo & ~(f->page - 1);
    for (int64_t p = start; p < hi; p += f->page)
        __atomic_fetch_add(addr + p, (uint8_t)0, __ATOMIC_RELAXED);
    return 0;
}

static void *prefault_main(void *arg) {
    rs_flusher *f = (rs_flusher *)arg;
    int64_t last_wrote = -1, poll_ms = PREFAULT_POLL_MS;
    pthread_mutex_lock(&f->mu);
    while (!f->stop) {
        int64_t wrote = atomic_load(&f->wrote);
        int64_t from = max64(atomic_load(&f->prefaulted), wrote);
        int64_t want = wrote + f->prefault_bytes;
        poll_ms = wrote != last_wrote ? PREFAULT_POLL_MS : min64(poll_ms * 2, PREFAULT_IDLE_MAX_MS);
        last_wrote = wrote;
        if (from >= want) {
            struct timespec ts;
            deadline_after(&ts, poll_ms);
            pthread_cond_timedwait(&f->stop_cv, &f->mu, &ts);
            continue;
        }
        pthread_mutex_unlock(&f->mu);

        /* One chunk per pass, so unregister never waits long for populate_mu. */
        int64_t to = min64(want, from + PREFAULT_CHUNK), reached = from;
        int err = 0, found = 0;
        segment seg;
        pthread_mutex_lock(&f->populate_mu);
        pthread_mutex_lock(&f->seg_mu);
        for (int i = 0; i < f->nsegs; i++) {
            if (f->segs[i].start <= from && from < f->segs[i].start + f->segs[i].size) {
                seg = f->segs[i];
                found = 1;
                break;
            }
        }
        pthread_mutex_unlock(&f->seg_mu);
        if (found) {
            int64_t hi = min64(to, seg.start + seg.size);
            err = populate(f, seg.addr, from - seg.start, hi - seg.start);
            if (err == 0)
                reached = hi;
        }
        pthread_mutex_unlock(&f->populate_mu);

        pthread_mutex_lock(&f->mu);
        f->prefault_errno = err;
        if (reached > from) {
            /* A reset() meanwhile may have moved `prefaulted` back: only ever advance from `from`. */
            if (atomic_load(&f->prefaulted) <= from)
                advance_prefaulted(f, reached);
            f->prefaulted_bytes += reached - from;
        } else {
            /* Not mapped yet (next segment not registered) or out of space: wait, then retry. */
            struct timespec ts;
            deadline_after(&ts, err ? 100 : max64(poll_ms, PREFAULT_POLL_MS * 5));
            pthread_cond_timedwait(&f->stop_cv, &f->mu, &ts);
        }
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

rs_flusher *rs_flusher_new(int64_t start_offset, int interval_ms, int least_pages, int thorough_ms,
                           int64_t prefault_bytes) {
    rs_flusher *f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
#if !defined(__APPLE__)
    pthread_condattr_setclock(&ca, RS_COND_CLOCK);
#endif
    pthread_mutex_init(&f->mu, NULL);
    pthread_mutex_init(&f->seg_mu, NULL);
    pthread_mutex_init(&f->flush_mu, NULL);
    pthread_mutex_init(&f->populate_mu, NULL);
    pthread_cond_init(&f->work_cv, &ca);
    pthread_cond_init(&f->done_cv, &ca);
    pthread_cond_init(&f->stop_cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&f->wrote, start_offset);
    atomic_init(&f->flushed, start_offset);
    atomic_init(&f->prefaulted, start_offset);
    atomic_init(&f->requested, start_offset);
    atomic_init(&f->idle, 0);
    f->interval_ms = interval_ms > 0 ? interval_ms : 1;
    f->least_pages = least_pages > 0 ? least_pages : 0;
    f->thorough_ms = thorough_ms > 0 ? thorough_ms : 1;
    f->prefault_bytes = prefault_bytes > 0 ? prefault_bytes : 0;
    f->page = page_size();
    f->populate_write_ok = 1;

    int rc = pthread_create(&f->flush_thread, NULL, flush_main, f);
    if (rc != 0) {
        free(f);
        errno = rc;
        return NULL;
    }
    if (f->prefault_bytes > 0 && pthread_create(&f->prefault_thread, NULL, prefault_main, f) == 0)
        f->prefault_running = 1;
    return f;
}

void rs_flusher_stop(rs_flusher *f) {
    pthread_mutex_lock(&f->mu);
    if (f->joined) {
        pthread_mutex_unlock(&f->mu);
        return;
    }
    __atomic_store_n(&f->stop, 1, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&f->work_cv);
    pthread_cond_broadcast(&f->stop_cv);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->flush_thread, NULL);
    if (f->prefault_running)
        pthread_join(f->prefault_thread, NULL);
    pthread_mutex_lock(&f->mu);
    f->joined = 1;
    wake_waiters(f); /* waiters see the final flushed offset, or `stop` */
    pthread_mutex_unlock(&f->mu);
}

void rs_flusher_free(rs_flusher *f) {
    if (!f)
        return;
    rs_flusher_stop(f);
    pthread_cond_destroy(&f->work_cv);
    pthread_cond_destroy(&f->done_cv);
    pthread_cond_destroy(&f->stop_cv);
    pthread_mutex_destroy(&f->mu);
    pthread_mutex_destroy(&f->seg_mu);
    pthread_mutex_destroy(&f->flush_mu);
    pthread_mutex_destroy(&f->populate_mu);
    free(f);
}

int rs_flusher_register(rs_flusher *f, int64_t start, uint8_t *addr, int64_t size, int fd) {
    int rc = -1;
    pthread_mutex_lock(&f->seg_mu);
    if (f->nsegs < RS_FLUSHER_MAX_SEGMENTS) {
        f->segs[f->nsegs++] = (segment){start, addr, size, fd};
        rc = 0;
    }
    pthread_mutex_unlock(&f->seg_mu);
    return rc;
}

int rs_flusher_unregister(rs_flusher *f, int64_t start) {
    int rc = -1;
    pthread_mutex_lock(&f->seg_mu);
    for (int i = 0; i < f->nsegs; i++) {
        if (f->segs[i].start == start) {
            memmove(&f->segs[i], &f->segs[i + 1], (size_t)(f->nsegs - i - 1) * sizeof(segment));
            f->nsegs--;
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&f->seg_mu);
    /* A flush round or a populate may have copied the table before the removal: wait for it. */
    pthread_mutex_lock(&f->flush_mu);
    pthread_mutex_unlock(&f->flush_mu);
    pthread_mutex_lock(&f->populate_mu);
    pthread_mutex_unlock(&f->populate_mu);
    return rc;
}

void rs_flusher_publish(rs_flusher *f, int64_t end) {
    atomic_store_explicit(&f->wrote, end, memory_order_release);
}

void rs_flusher_reset(rs_flusher *f, int64_t offset) {
    pthread_mutex_lock(&f->mu);
    atomic_store(&f->wrote, offset);
    atomic_store(&f->flushed, offset);
    atomic_store(&f->prefaulted, offset);
    atomic_store(&f->requested, offset);
    pthread_mutex_unlock(&f->mu);
}

int64_t rs_flusher_flushed(const rs_flusher *f) {
    return atomic_load_explicit(&((rs_flusher *)f)->flushed, memory_order_acquire);
}

int64_t rs_flusher_wrote(const rs_flusher *f) {
    return atomic_load_explicit(&((rs_flusher *)f)->wrote, memory_order_acquire);
}

/* Raise `requested` to target (monotonic); wake the flush thread only if it sleeps. */
static void raise_request(rs_flusher *f, int64_t target) {
    int64_t cur = atomic_load(&f->requested);
    while (cur < target && !atomic_compare_exchange_weak(&f->requested, &cur, target))
        ;
    if (atomic_load(&f->idle)) {
        pthread_mutex_lock(&f->mu);
        pthread_cond_signal(&f->work_cv);
        pthread_mutex_unlock(&f->mu);
    }
}

void rs_flusher_request(rs_flusher *f, int64_t target) {
    if (atomic_load_explicit(&f->flushed, memory_order_acquire) >= target)
        return;
    raise_request(f, target);
}

int rs_flusher_wait_nogil(rs_flusher *f, int64_t target, int64_t timeout_ms) {
    if (atomic_load_explicit(&f->flushed, memory_order_acquire) >= target)
        return 0;
    struct timespec ts;
    if (timeout_ms >= 0)
        deadline_after(&ts, timeout_ms);
    int result = 0;
    raise_request(f, target);
    pthread_mutex_lock(&f->mu);
    /* An error only counts when a round that began after this wait did fail: it covered the
       target. An older error (space since freed) must not fail a put that a retry would flush. */
    int64_t seen = f->round_seq;
    f->sync_requests++;
    f->arrivals++;
    if (f->arrivals >= f->expected)
        pthread_cond_signal(&f->work_cv); /* the group the flush thread gathers is complete */
#ifdef __linux__
    pthread_mutex_unlock(&f->mu);
    for (;;) {
        /* the generation first: a change of what is checked after it bumps it */
        uint32_t gen = __atomic_load_n(&f->done_gen, __ATOMIC_SEQ_CST);
        if (atomic_load(&f->flushed) >= target)
            break;
        int err = __atomic_load_n(&f->last_errno, __ATOMIC_RELAXED);
        if (err && __atomic_load_n(&f->err_seq, __ATOMIC_RELAXED) > seen) {
            result = err;
            break;
        }
        if (__atomic_load_n(&f->stop, __ATOMIC_RELAXED)) {
            result = ESHUTDOWN;
            break;
        }
        /* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time (deadline_after's clock) */
        long rc = syscall(SYS_futex, &f->done_gen, FUTEX_WAIT_BITSET_PRIVATE, gen,
                          timeout_ms >= 0 ? &ts : NULL, NULL, FUTEX_BITSET_MATCH_ANY);
        if (rc != 0 && errno == ETIMEDOUT && atomic_load(&f->flushed) < target) {
            pthread_mutex_lock(&f->mu);
            f->sync_timeouts++;
            pthread_mutex_unlock(&f->mu);
            result = 1;
            break;
        }
    }
#else
    while (atomic_load(&f->flushed) < target) {
        if (f->last_errno && f->err_seq > seen) {
            result = f->last_errno;
            break;
        }
        if (f->stop) {
            result = ESHUTDOWN;
            break;
        }
        int rc = timeout_ms >= 0 ? pthread_cond_timedwait(&f->done_cv, &f->mu, &ts)
                                 : pthread_cond_wait(&f->done_cv, &f->mu);
        if (rc == ETIMEDOUT && atomic_load(&f->flushed) < target) {
            f->sync_timeouts++;
            result = 1;
            break;
        }
    }
    pthread_mutex_unlock(&f->mu);
#endif
    return result;
}

void rs_flusher_get_stats(rs_flusher *f, rs_flusher_stats *out) {
    pthread_mutex_lock(&f->mu);
    out->flush_rounds = f->flush_rounds;
    out->flushed_bytes = f->flushed_bytes;
    out->sync_requests = f->sync_requests;
    out->sync_timeouts = f->sync_timeouts;
    out->prefaulted_bytes = f->prefaulted_bytes;
    out->wrote = atomic_load(&f->wrote);
    out->flushed = atomic_load(&f->flushed);
    out->last_errno = f->last_errno;
    out->prefault_errno = f->prefault_errno;
    pthread_mutex_unlock(&f->mu);
}
