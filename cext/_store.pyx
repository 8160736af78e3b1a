# cython: language_level=3, embedsignature=True
"""Compiled CommitLog append core: records encoded straight into the segment map, group commit.

Twin of ``rocketstore.log._store_py`` (same public names and behaviour). The Python layer
(``rocketstore.log.commitlog``) owns segment files; this module owns the hot path:

* ``CommitLogCore.put`` / ``put_batch`` / ``put_many`` validate, take the append lock, encode each
  record into the active map (bounds-checked against the segment), apply the BLANK rule and ask
  the Python layer for the next segment when one fills.
* A C flush thread (``flusher.c``) makes written bytes durable; durable puts wait on it with the
  GIL released, and ``PutFuture`` lets one thread keep many durable puts in flight.
* A full disk never half-writes: a put that cannot get segment space (creation or page
  population fails) writes nothing and raises ``CreateMappedFileFailedError`` (a
  ``SegmentDiskFullError`` for ENOSPC); ``put_batch`` / ``put_many`` reserve every segment and
  page they need before the first record, so they are stored whole or not at all. A durable put
  whose flush times out or fails raises ``FlushTimeoutError`` (stored; ``.result`` says where).
  ``refuse_puts(error)`` (set by retention while the disk is above its warning level) makes every
  put raise ``ServiceNotAvailableError``. In WAIT_FUTURE mode a put that stored nothing returns
  a future that raises the error.

This file holds the imports, the C declarations and the constants; the code is in the files it
includes, by concern: store/message.pxi (the compiled Message; a put's tags, keys and plain
properties encoded from its arguments), store/live.pxi (the live page, a joined writer's
connection, SwitchSafe, the test seams), store/results.pxi (PutResult, BatchPutResult,
PutFuture), store/core.pxi (CommitLogCore's fields and the methods Python calls), and the core's
work as functions of it: store/segments.pxi (segments and pins, reserving space),
store/topics.pxi (topics and queue offsets), store/shared.pxi (the shared append table),
store/append.pxi (one record appended; put, an inner batch), store/batches.pxi (put_batch,
put_many, put_copies, a batch of plain Messages) and store/durability.pxi (flush waits, a put's
answer, stats, close); store/putfront.pxi (PutFront, MessageStore.put's common shapes in one call).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_CheckExact, PyDict_Next
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.pythread cimport (NOWAIT_LOCK, WAIT_LOCK, PyThread_acquire_lock,
                               PyThread_allocate_lock, PyThread_free_lock, PyThread_release_lock,
                               PyThread_type_lock)
from libc.errno cimport EFAULT, EMSGSIZE, ENOSPC
from libc.stdint cimport (int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, INT32_MAX, INT32_MIN,
                          INT64_MAX, INT64_MIN)
from libc.stdlib cimport calloc, free, malloc, realloc
from posix.unistd cimport _exit, getpid
from libc.string cimport memchr, memcpy, memset

cimport cython

import functools
import os

import numpy as np

from rocketstore.base._checks import batch_lengths, contiguous
from rocketstore.base._clock import month_bounds
from rocketstore.files._flushwatch import FlushWatcher
from rocketstore.errors import (InvalidMessageError, InvalidQueueIdError, MessageTooLargeError,
                                PropertiesTooLargeError, SegmentError, StoreClosedError, not_stored)
from rocketstore.files.mapped_file import flush_timeout, space_error
from rocketstore.log.coreargs import check_core_args
from rocketstore.log.sharedappend import NotShareable, StaleTable
from rocketstore.status import PutStatus

cdef extern from "<time.h>" nogil:
    ctypedef long time_t
    struct timespec:
        time_t tv_sec
        long tv_nsec
    int clock_gettime(int clk, timespec *ts)
    int CLOCK_REALTIME

# The record layout and codec are declared once, in _codec.pxd (mirroring record.h).
from _codec cimport (RS_END_FILE_MIN_BLANK, RS_MAGIC_V1, RS_MAX_PROPERTIES_LENGTH,
                     RS_SYSFLAG_BORNHOST_V6, RS_SYSFLAG_STOREHOST_V6, RS_SYSFLAG_TRANSACTION_MASK,
                     RS_TRANSACTION_PREPARED_TYPE, RS_TRANSACTION_ROLLBACK_TYPE, rs_body_crc,
                     rs_encode_blank, rs_encode_record, rs_record, rs_record_length)

cdef extern from "flusher.h" nogil:
    ctypedef struct rs_flusher:
        pass
    ctypedef struct rs_flusher_stats:
        int64_t flush_rounds
        int64_t flushed_bytes
        int64_t sync_requests
        int64_t sync_timeouts
        int64_t prefaulted_bytes
        int64_t wrote
        int64_t flushed
        int last_errno
        int prefault_errno
    rs_flusher *rs_flusher_new(int64_t start_offset, int interval_ms, int least_pages,
                               int thorough_ms, int64_t prefault_bytes)
    void rs_flusher_free(rs_flusher *f)
    void rs_flusher_stop(rs_flusher *f)
    int RS_FLUSHER_MAX_SEGMENTS
    int rs_flusher_register(rs_flusher *f, int64_t start, uint8_t *addr, int64_t size, int fd)
    int rs_flusher_unregister(rs_flusher *f, int64_t start)
    void rs_flusher_publish(rs_flusher *f, int64_t end)
    void rs_flusher_reset(rs_flusher *f, int64_t offset)
    int64_t rs_flusher_flushed(const rs_flusher *f)
    int64_t rs_flusher_wrote(const rs_flusher *f)
    int rs_flusher_wait_nogil(rs_flusher *f, int64_t target, int64_t timeout_ms)
    void rs_flusher_request(rs_flusher *f, int64_t target)
    void rs_flusher_get_stats(rs_flusher *f, rs_flusher_stats *out)
    int rs_populate_supported()
    int rs_populate_write(uint8_t *addr, int64_t len)
    int64_t rs_flusher_prefaulted(const rs_flusher *f)
    void rs_flusher_note_prefaulted(rs_flusher *f, int64_t upto)

cdef extern from "live.h" nogil:
    int RS_LIVE_SIZE
    void rs_live_wake(uint8_t *page)
    uint32_t rs_live_seq(uint8_t *page)
    int rs_live_wait(uint8_t *page, uint32_t seen, int64_t timeout_ms, int64_t spin_us)
    int RS_LIVE_SLOTS, RS_LIVE_MAX_WAIT
    void rs_live_publish_slots(uint8_t *page, int64_t wrote, uint64_t slots)
    int rs_live_wait_words(uint8_t *page, int n, const int *at, const uint32_t *seen, uint32_t page_seen,
                           int64_t timeout_ms,
                           int64_t spin_us)


cdef extern from "append.h" nogil:
    int64_t RS_AP_SIZE, RS_AP_QUEUES, RS_AP_E_NEXT, RS_AP_E_COMMITTED, RS_AP_E_NQUEUES
    int64_t RS_AP_O_MAGIC, RS_AP_O_EPOCH, RS_AP_O_BUSY, RS_AP_O_FULL, RS_AP_O_END, RS_AP_O_LAST_TS
    int64_t RS_AP_O_ENTRIES, RS_AP_O_SEGMENT, RS_AP_O_REFUSING, RS_AP_O_PUBLISHING
    uint64_t RS_AP_MAGIC
    uint64_t *rs_ap_u64(uint8_t *t, int64_t at)
    int64_t *rs_ap_i64(uint8_t *t, int64_t at)
    uint32_t *rs_ap_u32(uint8_t *t, int64_t at)
    int32_t *rs_ap_i32(uint8_t *t, int64_t at)
    uint64_t rs_ap_epoch(uint8_t *t)
    int64_t rs_ap_end(uint8_t *t)
    void rs_ap_set_end(uint8_t *t, int64_t end)
    void rs_ap_begin_publish(uint8_t *t, int64_t end)
    void rs_ap_set_busy(uint8_t *t, uint32_t pid)
    int rs_ap_lock(uint8_t *t)
    int rs_ap_owner_present(int fd)
    int rs_ap_unlock(uint8_t *t)
    int64_t rs_ap_find(uint8_t *t, const uint8_t *name, uint32_t len)
    int64_t rs_ap_add(uint8_t *t, const uint8_t *name, uint32_t len, int32_t nqueues)
    void rs_ap_repair(uint8_t *t)


cdef extern from "serve.h" nogil:
    long rs_serve_waiting()
    void rs_serve_done()
    void rs_serve_yield()
    void rs_serve_forget()
    int rs_serve_step(int fd, const uint8_t *reply, size_t reply_len, uint8_t **out, uint64_t *out_len,
                      uint64_t max_len)


cdef extern from *:
    """
    #include <pthread.h>
    /* Forks since this module loaded, counted in the child (pthread_atfork): a core made
       before a fork refuses to append in the child (its files are the parent's). The threads
       serve.h counted as waiting for the GIL are not in the child. */
    static volatile long rs_fork_generation = 0;
    static void rs_fork_child(void) {
        rs_fork_generation++;
        rs_serve_forget();
    }
    static int rs_watch_forks(void) { return pthread_atfork(NULL, NULL, rs_fork_child); }
    """
    long rs_fork_generation
    int rs_watch_forks()

if rs_watch_forks() != 0:
    raise OSError("pthread_atfork failed: cannot watch for forks")

cdef extern from *:
    """
    #ifdef RS_DEBUG_HOOKS
    #define RS_HAVE_DEBUG_HOOKS 1
    #else
    #define RS_HAVE_DEBUG_HOOKS 0
    static void rs_flusher_debug_fail_syncs(int err) { (void)err; }
    #endif
    """
    int RS_HAVE_DEBUG_HOOKS
    void rs_flusher_debug_fail_syncs(int err)

cdef extern from *:
    """
    /* "00" "01" ... "FF": byte b's two hex digits at 2 * b */
    static const char rs_hex_pairs[] =
        "000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F"
        "202122232425262728292A2B2C2D2E2F303132333435363738393A3B3C3D3E3F"
        "404142434445464748494A4B4C4D4E4F505152535455565758595A5B5C5D5E5F"
        "606162636465666768696A6B6C6D6E6F707172737475767778797A7B7C7D7E7F"
        "808182838485868788898A8B8C8D8E8F909192939495969798999A9B9C9D9E9F"
        "A0A1A2A3A4A5A6A7A8A9AAABACADAEAFB0B1B2B3B4B5B6B7B8B9BABBBCBDBEBF"
        "C0C1C2C3C4C5C6C7C8C9CACBCCCDCECFD0D1D2D3D4D5D6D7D8D9DADBDCDDDEDF"
        "E0E1E2E3E4E5E6E7E8E9EAEBECEDEEEFF0F1F2F3F4F5F6F7F8F9FAFBFCFDFEFF";
    static const char rs_uniq_property_name[] = "UNIQ_KEY\x01";
    static const char rs_prop_crc_reserved[] = "__CRC32#\x01" "0000000000" "\x02";
    """
    const char *rs_hex_pairs
    const char *rs_uniq_property_name
    const char *rs_prop_crc_reserved

cdef enum:
    UNIQ_NAME_LEN = 9      # len("UNIQ_KEY\x01")
    PROP_CRC_NAME_LENGTH = 9   # len("__CRC32#\x01")
    PROP_CRC_LENGTH = 20       # the §1.6 property: name, 0x01, 10 digits, 0x02
    MAX_UNIQ_RAW = 28      # IPv6 UNIQ_KEY: 16 + 2 + 4 + 4 + 2 bytes
    SYSFLAG_INNER_BATCH = 0x0C0   # a RocketMQ 5.x inner batch record: INNER_BATCH | NEED_UNWRAP

cdef inline void _prop_crc_digits(int32_t crc, uint8_t *out) noexcept:
    """The 10 digits of a §1.6 CRC32 property: least significant first, padded with '0'."""
    cdef int i
    for i in range(10):
        out[i] = 0x30 + crc % 10
        crc //= 10

cdef extern from "Python.h":
    ctypedef struct PyObject
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size)   # NULL (error set) if not UTF-8
    bint PyUnicode_CheckExact(object o)
    bint PyLong_CheckExact(object o)
    bint PyList_CheckExact(object o)
    bint PyTuple_CheckExact(object o)
    int PySet_Contains(object s, object key) except -1
    void PyErr_Clear()
    int PyObject_GC_IsTracked(object o)
    void PyObject_GC_Track(object o)
    void PyObject_GC_UnTrack(object o)

from rocketstore import message as _message_mod

cdef int64_t OWNER_LOOK_MS = 20   # how often a joined writer looks that the owner lives (sharedappend)
cdef int PUT_OK = PutStatus.PUT_OK
cdef int CREATE_MAPPED_FILE_FAILED = PutStatus.CREATE_MAPPED_FILE_FAILED
cdef int SERVICE_NOT_AVAILABLE = PutStatus.SERVICE_NOT_AVAILABLE

#: True when the kernel populates file pages for writing on request (MADV_POPULATE_WRITE): then
#: segments may be sparse, because the writer never stores into a page that was not populated
#: (a full disk is an error code, not a SIGBUS). Otherwise segments must be fallocated.
POPULATE_WRITE = bool(rs_populate_supported())

# How a record's durability is asked for (the ``wait`` argument of the put methods).
__all__ = ["Message", "CommitLogCore", "PutResult", "BatchPutResult", "PutFuture", "WAIT_NONE", "WAIT_BLOCK",
           "WAIT_FUTURE", "live_wait", "live_wait_words", "live_wake", "live_seq", "serve_step", "SwitchSafe",
           "MAX_FRAME", "keyed_properties", "PutFront"]

WAIT_NONE = 0        # return at once (ASYNC flush makes it durable within the flush interval)
WAIT_BLOCK = 1       # block until flushed or sync_flush_timeout_ms (group commit)
WAIT_FUTURE = 2      # return a PutFuture resolved by the flush thread

#: Built with ROCKETSTORE_DEBUG_HOOKS=1: _debug_fail_syncs() can make the flush thread fail.
DEBUG_HOOKS = bool(RS_HAVE_DEBUG_HOOKS)


cdef inline int64_t _now_ms() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


cdef inline void _acquire(PyThread_type_lock lock):
    if not PyThread_acquire_lock(lock, NOWAIT_LOCK):
        with nogil:
            PyThread_acquire_lock(lock, WAIT_LOCK)


cdef inline void _hex_into(char *p, const uint8_t *raw, int n) noexcept:
    """Writes 2 * n upper-case hex digits of raw[0:n] at p."""
    cdef int i
    for i in range(n):
        memcpy(p + 2 * i, rs_hex_pairs + 2 * raw[i], 2)


cdef str _hex(const uint8_t *raw, int n):
    cdef bytearray out = bytearray(2 * n)
    _hex_into(out, raw, n)
    return out.decode("ascii")


include "store/message.pxi"
include "store/live.pxi"
include "store/results.pxi"
include "store/core.pxi"
include "store/segments.pxi"
include "store/topics.pxi"
include "store/shared.pxi"
include "store/append.pxi"
include "store/batches.pxi"
include "store/durability.pxi"
include "store/putfront.pxi"
