# cython: language_level=3, embedsignature=True
"""CRC-32, byte for byte zlib's, over any C-contiguous buffer: rocketstore's BODYCRC.

The compiled twin of :mod:`rocketstore.format._crc32_py`. The C code (``crc32.c``) picks the fastest path
this CPU supports once, on first use; :data:`IMPLEMENTATION` names it.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.number cimport PyNumber_Index
from libc.stdint cimport uint32_t

# The C API, declared once in _crc32.pxd (next to this file) for every module that checksums.
from _crc32 cimport rs_crc32, rs_crc32_implementation, rs_crc32_with_path

__all__ = ["crc32", "masked_crc32", "IMPLEMENTATION"]

#: Name of the path rs_crc32 uses on this machine: "vpclmulqdq-avx512", "pclmulqdq" or "table".
IMPLEMENTATION = rs_crc32_implementation().decode("ascii")

# Dropping and retaking the GIL costs ~0.1-0.2 us; 64 KiB take ~1.2 us on the AVX-512 path, so
# shorter inputs keep the GIL rather than pay (and invite a thread switch) for so little.
cdef Py_ssize_t _NOGIL_MIN = 64 * 1024


cdef uint32_t _start_value(object value) except? 0xFFFFFFFF:
    cdef int overflow = 0
    cdef long long v = PyLong_AsLongLongAndOverflow(PyNumber_Index(value), &overflow)
    if overflow or v < 0 or v > 0xFFFFFFFF:
        raise ValueError(f"value must be in 0..2**32-1, got {value!r}")
    return <uint32_t>v


cdef uint32_t _checksum(object data, uint32_t start) except? 0xFFFFFFFF:
    cdef Py_buffer view
    cdef uint32_t result
    # The view pins the exporter (and its memory) until PyBuffer_Release, across the nogil block.
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if view.len >= _NOGIL_MIN:
            with nogil:
                result = rs_crc32(start, view.buf, <size_t>view.len)
        else:
            result = rs_crc32(start, view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)
    return result


def crc32(data, value=0):
    """CRC-32 of ``data`` continuing from ``value``; equal to ``zlib.crc32(data, value)``.

    ``data`` is any C-contiguous buffer (bytes, bytearray, memoryview, numpy array);
    ``value`` must be in ``0 .. 2**32-1``. The GIL is released for buffers of 64 KiB and more.
    """
    return _checksum(data, _start_value(value))


def masked_crc32(data):
    """``crc32(data) & 0x7FFFFFFF``: the BODYCRC field of a RocketMQ CommitLog record."""
    return _checksum(data, 0) & 0x7FFFFFFF


def _crc32_with(data, path, value=0):
    """``crc32(data, value)`` forced through one C path (for tests).

    Raises ValueError when ``path`` is unknown or this CPU cannot run it.
    """
    cdef uint32_t start = _start_value(value)
    cdef bytes name = path.encode("ascii")
    cdef Py_buffer view
    cdef uint32_t result
    cdef int rc
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        rc = rs_crc32_with_path(name, start, view.buf, <size_t>view.len, &result)
    finally:
        PyBuffer_Release(&view)
    if rc != 0:
        raise ValueError(f"CRC-32 path {path!r} is unknown or not supported by this CPU")
    return result
