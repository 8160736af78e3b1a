/* CRC-32 (zlib / IEEE 802.3) with a runtime-selected SIMD path: rocketstore's BODYCRC hot path.
 *
 * Every function here is pure computation: thread-safe and callable without the GIL.
 * The implementation is chosen once, on first use, from what the CPU and the OS support.
 */
#ifndef ROCKETSTORE_CRC32_H
#define ROCKETSTORE_CRC32_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* zlib-compatible CRC-32 (IEEE 802.3, reflected poly 0xEDB88320): same semantics as zlib's
   crc32(crc, buf, len): pre/post inversion inside, so rs_crc32(0, p, n) == zlib.crc32(bytes). */
uint32_t rs_crc32(uint32_t crc, const void *data, size_t len);
/* name of the path chosen at runtime: "vpclmulqdq-avx512", "pclmulqdq", or "table" */
const char *rs_crc32_implementation(void);

/* Testing hook, not for production callers: rs_crc32 forced through the named path
   ("table", "pclmulqdq" or "vpclmulqdq-avx512"). Returns 0 and stores the CRC in *out,
   or -1 when the name is unknown or this CPU/OS cannot run that path. */
int rs_crc32_with_path(const char *path, uint32_t crc, const void *data, size_t len, uint32_t *out);

#ifdef __cplusplus
}
#endif

#endif /* ROCKETSTORE_CRC32_H */
