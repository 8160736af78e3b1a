/* The owner's side of a joined writer's connection (rocketstore.writers): send a reply and read
 * the next call, without the GIL. */
#ifndef ROCKETSTORE_SERVE_H
#define ROCKETSTORE_SERVE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/types.h>
#include <sys/socket.h>

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0
#endif

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
 * *out of *out_len bytes (the caller frees it). Returns 0, 1 at end of stream, -EMSGSIZE for a
 * frame longer than max_len, else -errno. */
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
    return 0;
}

#endif
