# cython: language_level=3
# The C API of crc32.h, for cimport by any module that checksums (all of it is GIL-free).
from libc.stdint cimport uint32_t


cdef extern from "crc32.h" nogil:
    uint32_t rs_crc32(uint32_t crc, const void *data, size_t len)
    const char *rs_crc32_implementation()
    int rs_crc32_with_path(const char *path, uint32_t crc, const void *data, size_t len, uint32_t *out)
