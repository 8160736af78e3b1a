/* The owner's side of a joined writer's connection (rocketstore.processes.writers): send a reply and read
 * the next call without the GIL, and let a call that came in have the GIL soon.
 *
 * A thread serving joined writers waits in rs_serve_step without the GIL; when a call has come
 * in it counts itself in rs_serve_waiting until it has the GIL again (rs_serve_done). The owner's
 * own puts look at that count (one atomic load) and, when a call waits, let go of the GIL until
 * it has been taken: without that a busy owner thread keeps the GIL for Python's switch interval
 * (5 ms) while a joined writer's call waits.
 *
 * Kept because it is measured to be worth it: bench/writers.py --proxied, a joined process's
 * put beside an owner putting in a loop (shared_append=False, or any call a joined process
 * forwards), 2,191-5,689 puts/s with it, median 3,233, against 1,329-4,530, median 2,346,
 * without (1.38x; 8 alternating runs each, 2-core machine at load average 7-10, 2026-11-28).
 * The same count no longer serves the dispatch thread: there the measurements showed no gain. */
#ifndef ROCKETSTORE_SERVE_H
#define ROCKETSTORE_SERVE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <time.h>
#include <sys/types.h>
#include <sys/socket.h>

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0
#endif

static long rs_serve_waiters = 0;

static inline long rs_serve_waiting(void) { return __atomic_load_n(&rs_serve_waiters, __ATOMIC_ACQUIRE); }

/* A forked child: the threads counted are not in it. */
static inline void rs_serve_forget(void) { __atomic_store_n(&rs_serve_waiters, 0, __ATOMIC_RELEASE); }

/* The caller has the GIL again: it no longer waits for it. */
static inline void rs_serve_done(void) { __atomic_sub_fetch(&rs_serve_waiters, 1, __ATOMIC_RELEASE); }

/* An owner's put while a serving thread waits for the GIL: wait (without the GIL) until it has
 * it, at most about a millisecond. */
static inline void rs_serve_yield(void) {
    struct timespec pause = {0, 20000};
    for (int i = 0; i < 50 && rs_serve_waiting() > 0; i++)
        nanosleep(&pause, NULL);
}

static int rs_serve_send(int fd, const uint8_t *data, size_t len) {
    while (len > 0) {
        ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* 1 at end of stream, 0 when all `len` bytes came, else -errno. */
static int rs_serve_recv(int fd, uint8_t *into, size_t len) {
    while (len > 0) {
        ssize_t n = recv(fd, into, len, 0);
        if (n == 0)
            return 1;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        into += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Send `reply` (a whole frame, or nothing), then read the next frame's payload into a malloc'd
 * *out of *out_len bytes (the caller frees it). Returns 0 (and counts the caller in
 * rs_serve_waiters: it calls rs_serve_done once it has the GIL), 1 at end of stream, -EMSGSIZE
 * for a frame longer than max_len, else -errno. */
static int rs_serve_step(int fd, const uint8_t *reply, size_t reply_len, uint8_t **out, uint64_t *out_len,
                         uint64_t max_len) {
    uint8_t head[8];
    uint64_t size = 0;
    int rc;
    *out = NULL;
    *out_len = 0;
    if (reply_len > 0 && (rc = rs_serve_send(fd, reply, reply_len)) != 0)
        return rc;
    if ((rc = rs_serve_recv(fd, head, sizeof head)) != 0)
        return rc;
    for (int i = 7; i >= 0; i--)
        size = size << 8 | head[i];
    if (size > max_len)
        return -EMSGSIZE;
    uint8_t *buf = malloc(size ? size : 1);
    if (buf == NULL)
        return -ENOMEM;
    if ((rc = rs_serve_recv(fd, buf, size)) != 0) {
        free(buf);
        return rc;
    }
    *out = buf;
    *out_len = size;
    __atomic_add_fetch(&rs_serve_waiters, 1, __ATOMIC_ACQ_REL);
    return 0;
}

#endif
