/* The CommitLog flush service: one C thread per store that makes appended bytes durable.
 *
 * Offsets are absolute CommitLog offsets. The writer publishes `wrote` after each append; the
 * thread msyncs [flushed, wrote) of the registered segment maps and advances `flushed`.
 *
 * Two ways to be woken, served by the same thread:
 *   - ASYNC (RocketMQ FlushRealTimeService): every interval_ms, flush when at least least_pages
 *     dirty pages are pending, and everything every thorough_ms.
 *   - group commit (GroupCommitService): a durable put calls rs_flusher_wait(target); the first
 *     waiter wakes the thread, and one msync round covers every put written before it started,
 *     so T waiting threads cost far fewer than T fsyncs.
 *
 * A second thread pre-faults the pages just ahead of `wrote` (MADV_POPULATE_WRITE where the
 * kernel has it) so the writer does not take a page fault per 4 KiB on fresh segment space.
 *
 * Segment maps are owned by the caller (Python mmap objects). A registered map must stay mapped
 * until rs_flusher_unregister() returns: unregister takes the locks the flush round holds while
 * it msyncs and the pre-fault thread while it populates, so neither touches an unmapped range.
 *
 * Functions named *_nogil may be called without the GIL; none of them calls back into Python.
 */
#ifndef ROCKETSTORE_FLUSHER_H
#define ROCKETSTORE_FLUSHER_H

#include <stdint.h>

#define RS_FLUSHER_MAX_SEGMENTS 64

typedef struct rs_flusher rs_flusher;

typedef struct {
    int64_t flush_rounds;      /* msync rounds that flushed something */
    int64_t flushed_bytes;     /* bytes covered by those rounds */
    int64_t sync_requests;     /* rs_flusher_wait calls that had to wait */
    int64_t sync_timeouts;     /* of which timed out */
    int64_t prefaulted_bytes;  /* bytes populated ahead of the writer */
    int64_t wrote;
    int64_t flushed;
    int last_errno;            /* errno of the last failed msync, 0 if none */
    int prefault_errno;        /* errno of the last failed background populate, 0 if none */
} rs_flusher_stats;

/* Returns NULL with errno set on failure. Starts both threads. */
rs_flusher *rs_flusher_new(int64_t start_offset, int interval_ms, int least_pages,
                           int thorough_ms, int64_t prefault_bytes);
/* Stops both threads after a final full flush (idempotent). The struct stays valid: every
 * function may still be called (waits return at once), so a thread still inside one is safe. */
void rs_flusher_stop(rs_flusher *f);
/* rs_flusher_stop, then frees. Only when no thread can be using it any more. */
void rs_flusher_free(rs_flusher *f);

/* 0 on success, -1 if the table is full. addr/size: the whole map; start: its CommitLog offset;
 * fd: its file (F_FULLFSYNC'd after each msync where the platform has it; kept open until
 * unregistered), or -1. Never waits behind a system call of the flush or pre-fault threads. */
int rs_flusher_register(rs_flusher *f, int64_t start, uint8_t *addr, int64_t size, int fd);
/* Waits for any flush round in progress; returns 0, or -1 if no such segment. */
int rs_flusher_unregister(rs_flusher *f, int64_t start);

/* Writer side: bytes up to `end` are written. Monotonic; cheap (an atomic store). */
void rs_flusher_publish(rs_flusher *f, int64_t end);
/* Set both wrote and flushed (after recovery or truncation); call with no append in flight. */
void rs_flusher_reset(rs_flusher *f, int64_t offset);

int64_t rs_flusher_flushed(const rs_flusher *f);
int64_t rs_flusher_wrote(const rs_flusher *f);

/* Group commit: block until flushed >= target or timeout_ms passes (< 0: forever).
 * Returns 0 when flushed, 1 on timeout, or a positive errno if the flush failed. Release the GIL. */
int rs_flusher_wait_nogil(rs_flusher *f, int64_t target, int64_t timeout_ms);
/* Ask for a flush of everything written so far without waiting. */
void rs_flusher_request(rs_flusher *f, int64_t target);

void rs_flusher_get_stats(rs_flusher *f, rs_flusher_stats *out);

/* Pre-faulting. [wrote, prefaulted) is always populated for writing. On kernels with
 * MADV_POPULATE_WRITE (Linux >= 5.14) segments can be sparse files: populating a page reserves
 * its blocks, and a failure (ENOSPC) is an error code here instead of a SIGBUS at the writer's
 * store. The writer therefore calls rs_populate_write() itself for any range it is about to write
 * that the background thread has not reached, and writes only when that succeeded. */
#ifdef RS_DEBUG_HOOKS
/* Debug builds only: make every flush round fail with ``err`` (0: stop failing). */
void rs_flusher_debug_fail_syncs(int err);
#endif

int rs_populate_supported(void);
/* 0, or an errno (ENOSPC, EFAULT, EINVAL if unsupported). addr need not be page-aligned. */
int rs_populate_write(uint8_t *addr, int64_t len);
int64_t rs_flusher_prefaulted(const rs_flusher *f);
/* The writer populated up to `upto` itself: advance `prefaulted` (monotonic max), and wake the
 * pre-fault thread to go on ahead of it. */
void rs_flusher_note_prefaulted(rs_flusher *f, int64_t upto);

#endif
