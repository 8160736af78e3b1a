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
    static const char rs_hex_digits[] = "0123456789ABCDEF";
    static const char rs_uniq_property_name[] = "UNIQ_KEY\x01";
    static const char rs_prop_crc_reserved[] = "__CRC32#\x01" "0000000000" "\x02";
    """
    const char *rs_hex_digits
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


# ---- keyed puts: TAGS and KEYS encoded straight from the arguments (no Python per message) ----

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

cdef enum:
    KEYED_SMALL = 512       # keyed properties up to this long are encoded on the stack

#: the pure twin's Message, which put_plain_messages takes too (read by attribute)
cdef object _PLAIN_MESSAGE = _message_mod.Message


cdef int _unset_field(Message m, str name) except -1:
    raise AttributeError(f"'Message' object has no attribute '{name}'")


# A Message (exactly this class) whose fields are all None, str, bytes or int can be part of no
# reference cycle: it is left out of the cyclic GC, as CPython leaves out tuples and dicts of such
# values, so that building a batch of messages does not run collections over them (about 120 ns a
# message with the GC on, measured). A field set to anything else tracks it again.
cdef inline bint _atomic(object v) noexcept:
    return v is None or PyUnicode_CheckExact(v) or PyBytes_CheckExact(v) or PyLong_CheckExact(v)


cdef inline void _track_unless_atomic(Message m, object value) noexcept:
    if not _atomic(value) and not PyObject_GC_IsTracked(m):
        PyObject_GC_Track(m)


@cython.embedsignature(False)       # the docstring's first line is the signature inspect reads
cdef class Message:
    """Message(topic, body, tags=None, keys=None, properties=None, flag=0, queue_id=-1, \
born_timestamp=0, reconsume_times=0, sys_flag=0)
--

A message to store: topic, body, and optional tags, keys, properties, flag, queue.

    The compiled twin of :class:`rocketstore.message.Message` (``rocketstore.Message`` in the
    compiled build): the same arguments and defaults, fields (a deleted one reads as an
    AttributeError until set again), repr and pickling, and every put takes either. Its fields
    are C members, which put_plain_messages reads without a lookup."""
    cdef object _topic, _body, _tags, _keys, _properties, _flag, _queue_id
    cdef object _born_timestamp, _reconsume_times, _sys_flag
    cdef uint16_t _unset        # a bit per field deleted (in the order of __init__'s arguments)

    def __init__(self, topic, body, tags=None, keys=None, properties=None, flag=0, queue_id=-1,
                 born_timestamp=0, reconsume_times=0, sys_flag=0):
        self._topic = topic
        self._body = body
        self._tags = tags
        self._keys = keys
        self._properties = properties
        self._flag = flag
        self._queue_id = queue_id
        self._born_timestamp = born_timestamp
        self._reconsume_times = reconsume_times
        self._sys_flag = sys_flag
        self._unset = 0
        if (type(self) is Message and _atomic(topic) and _atomic(body) and _atomic(tags) and _atomic(keys)
                and _atomic(properties) and _atomic(flag) and _atomic(queue_id) and _atomic(born_timestamp)
                and _atomic(reconsume_times) and _atomic(sys_flag)):
            if PyObject_GC_IsTracked(self):
                PyObject_GC_UnTrack(self)
        elif not PyObject_GC_IsTracked(self):
            PyObject_GC_Track(self)

    @property
    def topic(self):
        if self._unset & 1:
            _unset_field(self, "topic")
        return self._topic

    @topic.setter
    def topic(self, value):
        self._topic = value
        self._unset &= ~1
        _track_unless_atomic(self, value)

    @topic.deleter
    def topic(self):
        if self._unset & 1:
            _unset_field(self, "topic")
        self._topic = None
        self._unset |= 1

    @property
    def body(self):
        if self._unset & 2:
            _unset_field(self, "body")
        return self._body

    @body.setter
    def body(self, value):
        self._body = value
        self._unset &= ~2
        _track_unless_atomic(self, value)

    @body.deleter
    def body(self):
        if self._unset & 2:
            _unset_field(self, "body")
        self._body = None
        self._unset |= 2

    @property
    def tags(self):
        if self._unset & 4:
            _unset_field(self, "tags")
        return self._tags

    @tags.setter
    def tags(self, value):
        self._tags = value
        self._unset &= ~4
        _track_unless_atomic(self, value)

    @tags.deleter
    def tags(self):
        if self._unset & 4:
            _unset_field(self, "tags")
        self._tags = None
        self._unset |= 4

    @property
    def keys(self):
        if self._unset & 8:
            _unset_field(self, "keys")
        return self._keys

    @keys.setter
    def keys(self, value):
        self._keys = value
        self._unset &= ~8
        _track_unless_atomic(self, value)

    @keys.deleter
    def keys(self):
        if self._unset & 8:
            _unset_field(self, "keys")
        self._keys = None
        self._unset |= 8

    @property
    def properties(self):
        if self._unset & 16:
            _unset_field(self, "properties")
        return self._properties

    @properties.setter
    def properties(self, value):
        self._properties = value
        self._unset &= ~16
        _track_unless_atomic(self, value)

    @properties.deleter
    def properties(self):
        if self._unset & 16:
            _unset_field(self, "properties")
        self._properties = None
        self._unset |= 16

    @property
    def flag(self):
        if self._unset & 32:
            _unset_field(self, "flag")
        return self._flag

    @flag.setter
    def flag(self, value):
        self._flag = value
        self._unset &= ~32
        _track_unless_atomic(self, value)

    @flag.deleter
    def flag(self):
        if self._unset & 32:
            _unset_field(self, "flag")
        self._flag = None
        self._unset |= 32

    @property
    def queue_id(self):
        if self._unset & 64:
            _unset_field(self, "queue_id")
        return self._queue_id

    @queue_id.setter
    def queue_id(self, value):
        self._queue_id = value
        self._unset &= ~64
        _track_unless_atomic(self, value)

    @queue_id.deleter
    def queue_id(self):
        if self._unset & 64:
            _unset_field(self, "queue_id")
        self._queue_id = None
        self._unset |= 64

    @property
    def born_timestamp(self):
        if self._unset & 128:
            _unset_field(self, "born_timestamp")
        return self._born_timestamp

    @born_timestamp.setter
    def born_timestamp(self, value):
        self._born_timestamp = value
        self._unset &= ~128
        _track_unless_atomic(self, value)

    @born_timestamp.deleter
    def born_timestamp(self):
        if self._unset & 128:
            _unset_field(self, "born_timestamp")
        self._born_timestamp = None
        self._unset |= 128

    @property
    def reconsume_times(self):
        if self._unset & 256:
            _unset_field(self, "reconsume_times")
        return self._reconsume_times

    @reconsume_times.setter
    def reconsume_times(self, value):
        self._reconsume_times = value
        self._unset &= ~256
        _track_unless_atomic(self, value)

    @reconsume_times.deleter
    def reconsume_times(self):
        if self._unset & 256:
            _unset_field(self, "reconsume_times")
        self._reconsume_times = None
        self._unset |= 256

    @property
    def sys_flag(self):
        if self._unset & 512:
            _unset_field(self, "sys_flag")
        return self._sys_flag

    @sys_flag.setter
    def sys_flag(self, value):
        self._sys_flag = value
        self._unset &= ~512
        _track_unless_atomic(self, value)

    @sys_flag.deleter
    def sys_flag(self):
        if self._unset & 512:
            _unset_field(self, "sys_flag")
        self._sys_flag = None
        self._unset |= 512

    def __repr__(self):
        return (f"Message(topic={self.topic!r}, body={bytes(self.body[:32])!r}"
                f"{'...' if len(self.body) > 32 else ''}, tags={self.tags!r}, keys={self.keys!r})")

    def __reduce__(self):
        return (Message, (self.topic, self.body, self.tags, self.keys, self.properties, self.flag, self.queue_id,
                          self.born_timestamp, self.reconsume_times, self.sys_flag))


cdef inline Py_ssize_t _plain_text(object s, const char **out):
    """The UTF-8 length of ``s`` (its bytes at ``*out``) when it is an exact, non-empty str
    without a separator (0x01, 0x02) that UTF-8 can encode; else -1 (the general path decides)."""
    cdef Py_ssize_t n
    cdef const char *p
    if not PyUnicode_CheckExact(s):
        return -1
    p = PyUnicode_AsUTF8AndSize(s, &n)
    if p == NULL:           # a lone surrogate: the general path raises for it
        PyErr_Clear()
        return -1
    if n == 0 or memchr(p, 1, n) != NULL or memchr(p, 2, n) != NULL:
        return -1
    out[0] = p
    return n


cdef Py_ssize_t _keyed_length(object tags, object keys):
    """The length of TAGS and KEYS encoded as rocketstore.format._record_py.put_properties encodes them
    (tags a plain str; keys a plain str or a non-empty list or tuple of plain str), or -1 when
    either is another shape, or too long: then the general path encodes (or refuses) them."""
    cdef Py_ssize_t total = 0, n, i, count
    cdef const char *p
    if tags is not None:
        n = _plain_text(tags, &p)
        if n < 0:
            return -1
        total += 6 + n              # "TAGS" 0x01 value 0x02
    if keys is not None:
        if PyUnicode_CheckExact(keys):
            n = _plain_text(keys, &p)
            if n < 0:
                return -1
            total += 6 + n
        elif PyList_CheckExact(keys) or PyTuple_CheckExact(keys):
            count = len(keys)
            if count == 0:
                return -1
            total += 6 + count - 1  # the spaces between keys
            for i in range(count):
                n = _plain_text(keys[i], &p)
                if n < 0:
                    return -1
                total += n
        else:
            return -1
    return total if total <= RS_MAX_PROPERTIES_LENGTH else -1


cdef inline uint8_t *_put_text(uint8_t *out, object s) noexcept:
    cdef Py_ssize_t n
    cdef const char *p = PyUnicode_AsUTF8AndSize(s, &n)   # checked by _keyed_length
    memcpy(out, p, n)
    return out + n


cdef Py_ssize_t _keyed_write(object tags, object keys, uint8_t *out):
    """Encode what _keyed_length measured (and accepted) into ``out``; returns its length."""
    cdef uint8_t *at = out
    cdef Py_ssize_t i
    if tags is not None:
        memcpy(at, b"TAGS\x01", 5)
        at = _put_text(at + 5, tags)
        at[0] = 2
        at += 1
    if keys is not None:
        memcpy(at, b"KEYS\x01", 5)
        at += 5
        if PyUnicode_CheckExact(keys):
            at = _put_text(at, keys)
        else:
            for i in range(len(keys)):
                if i:
                    at[0] = 0x20
                    at += 1
                at = _put_text(at, keys[i])
        at[0] = 2
        at += 1
    return at - out


#: Property names a put gives a meaning (rocketstore.message.SPECIAL_PROPERTIES): a properties
#: dict holding one takes the general path.
SPECIAL_PROPERTIES = _message_mod.SPECIAL_PROPERTIES
cdef frozenset _SPECIAL_PROPERTIES = SPECIAL_PROPERTIES


cdef Py_ssize_t _props_length(object tags, object keys, object properties):
    """The length of ``properties``, then TAGS and KEYS, encoded as put_properties encodes them:
    ``properties`` None, or an exact dict whose names and values are plain text (as
    :func:`_plain_text`) and whose names are not SPECIAL_PROPERTIES; tags and keys as
    :func:`_keyed_length`. -1 for any other shape or over 32767 bytes (the general path then
    encodes or refuses them). Runs no Python code: the dict cannot change under it."""
    cdef Py_ssize_t total = _keyed_length(tags, keys), n, pos = 0
    cdef PyObject *name
    cdef PyObject *value
    cdef const char *p
    if total < 0 or properties is None:
        return total
    if not PyDict_CheckExact(properties):
        return -1
    while PyDict_Next(properties, &pos, &name, &value):
        n = _plain_text(<object>name, &p)     # an exact str first: hashing it runs no Python code
        if n < 0 or PySet_Contains(_SPECIAL_PROPERTIES, <object>name):
            return -1
        total += n + 2
        n = _plain_text(<object>value, &p)
        if n < 0:
            return -1
        total += n
    return total if total <= RS_MAX_PROPERTIES_LENGTH else -1


cdef Py_ssize_t _props_write(object tags, object keys, object properties, uint8_t *out):
    """Encode what _props_length measured (and accepted) into ``out``, in put_properties' order:
    the dict's items, then TAGS, then KEYS. Returns its length."""
    cdef uint8_t *at = out
    cdef Py_ssize_t pos = 0
    cdef PyObject *name
    cdef PyObject *value
    if properties is not None:
        while PyDict_Next(properties, &pos, &name, &value):
            at = _put_text(at, <object>name)
            at[0] = 1
            at = _put_text(at + 1, <object>value)
            at[0] = 2
            at += 1
    return (at - out) + _keyed_write(tags, keys, at)


def keyed_properties(tags, keys, properties=None):
    """A plain ``properties`` dict's items, then TAGS and KEYS, encoded as
    ``put_properties(tags, keys, properties)`` encodes them (``b""`` for none), or None when one
    is not the plain shape (an exact, non-empty str without 0x01 or 0x02 that UTF-8 can encode;
    keys also a non-empty list or tuple of such; properties an exact dict of such, no name in
    SPECIAL_PROPERTIES) or the result exceeds 32767 bytes: the general path then encodes or
    refuses them."""
    cdef Py_ssize_t n = _props_length(tags, keys, properties)
    if n < 0:
        return None
    out = PyBytes_FromStringAndSize(NULL, n)
    _props_write(tags, keys, properties, <uint8_t *>PyBytes_AS_STRING(out))
    return out


cdef struct _PlainRow:
    const uint8_t *body
    int64_t born
    int64_t props_at
    int32_t body_len
    int32_t props_len
    int32_t queue_id
    int32_t flag
    int32_t crc


cdef inline bint _int_in(object v, int64_t lo, int64_t hi, int64_t *out):
    """Whether ``v`` is an exact int within lo..hi (its value in ``*out``)."""
    cdef int overflow = 0
    cdef long long x
    if not PyLong_CheckExact(v):
        return False
    x = PyLong_AsLongLongAndOverflow(v, &overflow)
    if overflow or x < lo or x > hi:
        return False
    out[0] = x
    return True


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


#: Tests only (_debug_publish_fault): the step of a shared append's publish after which this
#: process ends, 0 for none.
cdef int _debug_publish_step = 0

#: The steps of a shared append's publish a test can end the process after:
#: 1 records written, nothing published; 2 the end being published noted (publishing);
#: 3 the first queue's committed offset moved; 4 every one moved; 5 the end published;
#: 6 busy cleared (the lock and the live page not yet).
PUBLISH_STEPS = 6


def _debug_publish_fault(int step):
    """Tests only: the next shared append of this process ends it (``_exit(86)``) right after
    step ``step`` (1 .. PUBLISH_STEPS) of its publish, as a ``kill -9`` there would; 0: never."""
    global _debug_publish_step
    if not 0 <= step <= PUBLISH_STEPS:
        raise ValueError(f"step must be 0 to {PUBLISH_STEPS}, not {step}")
    _debug_publish_step = step


cdef inline void _publish_fault(int step) noexcept nogil:
    if _debug_publish_step == step:
        _exit(86)


def _debug_fail_syncs(int err):
    """Debug builds only: every flush round fails with errno ``err`` until called with 0 (the
    error path of a failing disk, for tests). RuntimeError in a release build."""
    if not RS_HAVE_DEBUG_HOOKS:
        raise RuntimeError("built without ROCKETSTORE_DEBUG_HOOKS=1")
    rs_flusher_debug_fail_syncs(err)


cdef enum:
    RS_MAX_FRAME = 1 << 30

#: The longest call or reply a joined writer's connection carries (bytes).
MAX_FRAME = RS_MAX_FRAME


def serve_step(int fd, reply):
    """The owner's side of a joined writer's connection (rocketstore.processes.writers): send ``reply`` (a
    whole frame: 8-byte little-endian length, then the payload; b"" for none), then wait for the
    next frame, all without the GIL; its payload, or None at the end of the stream. A call that
    came in is counted while it waits for the GIL, and the owner's puts let go of the GIL for it
    (see serve.h). OSError as the socket's; ValueError for a frame over MAX_FRAME."""
    cdef Py_buffer view
    cdef uint8_t *out = NULL
    cdef uint64_t n = 0
    cdef int rc
    PyObject_GetBuffer(reply, &view, PyBUF_SIMPLE)
    try:
        with nogil:
            rc = rs_serve_step(fd, <const uint8_t *>view.buf, <size_t>view.len, &out, &n, RS_MAX_FRAME)
        if rc == 0:
            rs_serve_done()
    finally:
        PyBuffer_Release(&view)
    if rc == 1:
        return None
    if rc == -EMSGSIZE:
        raise ValueError(f"a frame over {MAX_FRAME} bytes")
    if rc < 0:
        raise OSError(-rc, os.strerror(-rc))
    try:
        return PyBytes_FromStringAndSize(<char *>out, <Py_ssize_t>n)
    finally:
        free(out)


cdef class SwitchSafe:
    """A following store's read method (rocketstore.store puts it over the class's): the call,
    again when the store opened again under it. See the pure twin."""
    cdef object _store
    cdef object _method
    cdef object _fast

    def __init__(self, store_ref, method, fast=None):
        self._store = store_ref
        self._method = method
        self._fast = fast

    def __call__(self, *args, **kwargs):
        store = self._store()
        if store is None:
            raise StoreClosedError("the store is closed")
        switches = store._switches
        try:
            if self._fast is not None:
                return self._fast(*args, **kwargs)
            return self._method(store, *args, **kwargs)
        except Exception:
            if not store._switched_since(switches):
                raise
        return store._switch_safe(functools.partial(self._method, store, *args, **kwargs))


cdef class _LivePage:
    """A writable buffer of at least RS_LIVE_SIZE bytes (the live page's map), held for one call."""
    cdef Py_buffer view

    def __cinit__(self, page):
        PyObject_GetBuffer(page, &self.view, PyBUF_WRITABLE)
        if self.view.len < RS_LIVE_SIZE:
            PyBuffer_Release(&self.view)
            raise ValueError(f"a live page is {RS_LIVE_SIZE} bytes")

    def __dealloc__(self):
        PyBuffer_Release(&self.view)


def live_wait(page, uint32_t seen, int64_t timeout_ms, int64_t spin_us=0):
    """Sleep (GIL released) until the live page's sequence word is no longer ``seen`` or
    ``timeout_ms`` passes (< 0: no limit); True if it changed. ``spin_us``: spin on the word up
    to that long before sleeping."""
    cdef _LivePage held = _LivePage(page)
    cdef int changed
    with nogil:
        changed = rs_live_wait(<uint8_t *>held.view.buf, seen, timeout_ms, spin_us)
    return changed != 0


def live_wait_words(page, words, seen, uint32_t page_seen, int64_t timeout_ms, int64_t spin_us=0):
    """Sleep (GIL released) until one of the live page's u32 words at byte offsets ``words`` no
    longer holds its value in ``seen``, or ``timeout_ms`` passes (< 0: no limit); True if one
    changed. Without futex_waitv several words fall back to the page's sequence word, which
    ``page_seen`` is the caller's look at. ``spin_us``: spin on the words up to that long before
    sleeping."""
    cdef _LivePage held = _LivePage(page)
    cdef int n = len(words)
    cdef int at[64]
    cdef uint32_t values[64]
    cdef int i, changed
    if n < 1 or n > RS_LIVE_MAX_WAIT or len(seen) != n:
        raise ValueError(f"1 to {RS_LIVE_MAX_WAIT} words, each with the value seen")
    for i in range(n):
        at[i] = words[i]
        values[i] = seen[i]
        if at[i] < 64 or at[i] > 4096 - 8 or at[i] % 8:
            raise ValueError(f"{at[i]} is not a slot word of the live page")
    with nogil:
        changed = rs_live_wait_words(<uint8_t *>held.view.buf, n, at, values, page_seen, timeout_ms, spin_us)
    return changed != 0


def live_wake(page):
    """Bump the live page's sequence word and wake every process waiting on it."""
    cdef _LivePage held = _LivePage(page)
    rs_live_wake(<uint8_t *>held.view.buf)


def live_seq(page):
    """The live page's sequence word."""
    cdef _LivePage held = _LivePage(page)
    return rs_live_seq(<uint8_t *>held.view.buf)


cdef inline int64_t _now_ms() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


cdef inline void _acquire(PyThread_type_lock lock):
    if not PyThread_acquire_lock(lock, NOWAIT_LOCK):
        with nogil:
            PyThread_acquire_lock(lock, WAIT_LOCK)


cdef str _hex(const uint8_t *raw, int n):
    cdef bytearray out = bytearray(2 * n)
    cdef char *p = out
    cdef int i
    for i in range(n):
        p[2 * i] = rs_hex_digits[raw[i] >> 4]
        p[2 * i + 1] = rs_hex_digits[raw[i] & 15]
    return out.decode("ascii")


cdef class _Pin:
    """Holds a buffer export of a segment map: the map cannot be closed while pinned."""
    cdef Py_buffer view
    cdef bint held
    cdef readonly int64_t start

    def __dealloc__(self):
        if self.held:
            PyBuffer_Release(&self.view)
            self.held = False


cdef class _Topic:
    cdef bytes name
    cdef int nqueues
    cdef int capacity                # length of next_offsets (>= nqueues; it never shrinks)
    cdef int64_t *next_offsets       # malloc'ed, or (shared) the append table's next[]
    cdef unsigned int rr
    cdef int slot                    # its live page slot (rocketstore.processes.live.topic_slot)
    # in the shared append table (rocketstore.log.sharedappend), else NULL / -1:
    cdef int64_t *committed          # the entry's committed[]
    cdef int32_t *shared_nq          # the entry's queue count (0: unknown)
    cdef int dirty_lo, dirty_hi      # queues moved in the current append (-1: none)

    def __dealloc__(self):
        if self.committed == NULL:
            free(self.next_offsets)


@cython.no_gc   # holds only str/bytes/int and an exception without traceback: no cycles
@cython.freelist(64)   # one made and dropped per put: spares malloc and free
cdef class PutResult:
    """Where a put landed: status, commitlog offset and size, queue id/offset, store time, ids."""
    cdef int _status
    cdef readonly int64_t commitlog_offset
    cdef readonly int32_t size
    cdef readonly int32_t queue_id
    cdef readonly int64_t queue_offset
    cdef readonly int64_t store_timestamp
    cdef object _unique_key      # the caller's UNIQ_KEY, or None to render _uniq_raw
    cdef uint8_t _uniq_raw[MAX_UNIQ_RAW]
    cdef int _uniq_len
    cdef bytes _host
    cdef int32_t _port
    cdef readonly object error       # the exception behind a failed status, else None

    @property
    def status(self):
        return PutStatus(self._status)

    @property
    def ok(self):
        """True when stored and, if durability was asked for, flushed."""
        return self._status == PUT_OK

    @property
    def unique_key(self):
        if self._unique_key is None and self._uniq_len:
            self._unique_key = _hex(self._uniq_raw, self._uniq_len)
        return self._unique_key

    @property
    def msg_id(self):
        """offsetMsgId (spec §3.1): store host, port and commitlog offset as upper-case hex."""
        cdef uint8_t raw[28]
        cdef int n = len(self._host)
        memcpy(raw, <char *>self._host, n)
        cdef uint32_t port = <uint32_t>self._port
        cdef uint64_t off = <uint64_t>self.commitlog_offset
        cdef int i
        for i in range(4):
            raw[n + i] = (port >> (24 - 8 * i)) & 0xFF
        for i in range(8):
            raw[n + 4 + i] = (off >> (56 - 8 * i)) & 0xFF
        return _hex(raw, n + 12)

    def _set_status(self, int status):
        self._status = status

    def _set_error(self, error):
        self.error = error

    def __reduce__(self):
        return (_put_result, (self._status, self.commitlog_offset, self.size, self.queue_id,
                              self.queue_offset, self.store_timestamp, self.unique_key, self._host,
                              self._port, self.error))

    def __repr__(self):
        return (f"PutResult(status={self.status.name}, msg_id={self.msg_id!r}, "
                f"unique_key={self.unique_key!r}, queue_id={self.queue_id}, "
                f"queue_offset={self.queue_offset}, commitlog_offset={self.commitlog_offset}, "
                f"size={self.size}, store_timestamp={self.store_timestamp})")


def _put_result(int status, int64_t commitlog_offset, int32_t size, int32_t queue_id,
                int64_t queue_offset, int64_t store_timestamp, unique_key, bytes host, int32_t port,
                error):
    """A PutResult as pickled (see PutResult.__reduce__)."""
    if len(host) > 16:
        raise ValueError("a store host is 4 or 16 bytes")
    cdef PutResult r = PutResult.__new__(PutResult)
    r._status = status
    r.commitlog_offset = commitlog_offset
    r.size = size
    r.queue_id = queue_id
    r.queue_offset = queue_offset
    r.store_timestamp = store_timestamp
    r._unique_key = unique_key
    r._uniq_len = 0
    r._host = host
    r._port = port
    r.error = error
    return r


cdef object _populate_error(int err, int64_t segment_start):
    # EFAULT: the kernel's populating fault would have been a SIGBUS at a store, which for a
    # page inside the file means no block could be had for it: report it as the ENOSPC it is.
    if err == EFAULT:
        err = ENOSPC
    return space_error(err, "cannot reserve space for the record in the CommitLog segment; "
                            "nothing was written", segment_start)


cdef class BatchPutResult:
    """Results of one batch put: columns, plus ``len()`` and indexing to a ``PutResult``."""
    cdef int _status
    cdef readonly str topic
    cdef readonly int32_t queue_id
    cdef readonly int64_t first_queue_offset
    cdef readonly object commitlog_offsets   # numpy int64
    cdef readonly object sizes               # numpy int32
    cdef readonly object store_timestamps    # numpy int64
    cdef readonly object queue_offsets       # numpy int64
    cdef object _uniq_raw                    # numpy (n, uniq_len) uint8, or None
    cdef object _unique_keys                 # list of str, when the caller gave them
    cdef bytes _host
    cdef int32_t _port
    cdef readonly object error               # the exception behind a failed status, else None

    @property
    def status(self):
        return PutStatus(self._status)

    @property
    def ok(self):
        return self._status == PUT_OK

    def _set_status(self, int status):
        self._status = status

    def _set_error(self, error):
        self.error = error

    @property
    def unique_keys(self):
        if self._unique_keys is None:
            raw = self._uniq_raw
            self._unique_keys = [bytes(row).hex().upper() for row in raw] if raw is not None else []
        return self._unique_keys

    @property
    def msg_ids(self):
        prefix = (self._host + self._port.to_bytes(4, "big")).hex().upper()
        return [prefix + format(int(o), "016X") for o in self.commitlog_offsets]

    @property
    def end_offset(self):
        n = len(self.commitlog_offsets)
        return int(self.commitlog_offsets[n - 1]) + int(self.sizes[n - 1]) if n else 0

    def __len__(self):
        return len(self.commitlog_offsets)

    def __getitem__(self, i):
        cdef PutResult r = PutResult.__new__(PutResult)
        r._status = self._status
        r.commitlog_offset = self.commitlog_offsets[i]
        r.size = self.sizes[i]
        r.queue_id = self.queue_id
        r.queue_offset = self.queue_offsets[i]
        r.store_timestamp = self.store_timestamps[i]
        r._unique_key = self.unique_keys[i] if (self._uniq_raw is not None or self._unique_keys) else None
        r._host = self._host
        r._port = self._port
        return r

    def __repr__(self):
        return (f"BatchPutResult(status={self.status.name}, count={len(self)}, topic={self.topic!r}, "
                f"queue_id={self.queue_id}, first_queue_offset={self.first_queue_offset})")


cdef class PutFuture:   # GC-tracked once it holds an _error (its traceback can point back at it)
    """A durable put in flight: resolved when the flush thread's flushed offset covers it.

    ``result(timeout=None)`` returns the put's result once flushed; raises
    :class:`~rocketstore.errors.FlushTimeoutError` (stored, not confirmed durable) when
    ``sync_flush_timeout_ms`` passed since the put or the flush failed, the put's
    :class:`~rocketstore.errors.PutError` when nothing was stored, and ``TimeoutError`` when the
    caller's ``timeout`` runs out first. Done-callbacks and ``await`` fire in every case.
    """
    cdef CommitLogCore _core
    cdef object _result
    cdef readonly int64_t target
    cdef readonly int64_t deadline_ms
    cdef bint _resolved
    cdef object _error

    def done(self):
        if self._resolved:
            return True
        if self._core._flusher != NULL and rs_flusher_flushed(self._core._flusher) >= self.target:
            return True
        return _now_ms() >= self.deadline_ms

    def result(self, timeout=None):
        cdef rs_flusher *f = self._core._flusher
        cdef int64_t wait_ms
        cdef bint caller_limited = False
        if not self._resolved:
            if f == NULL or rs_flusher_flushed(f) >= self.target:
                self._resolved = True      # the put already says PUT_OK; closing flushed everything
                return self._result
            wait_ms = self.deadline_ms - _now_ms()
            if timeout is not None:
                t = int(timeout * 1000)
                if t < wait_ms:
                    wait_ms = t
                    caller_limited = True
            rc = self._core._wait(self.target, wait_ms if wait_ms > 0 else 0)
            if caller_limited and rc == 1:
                raise TimeoutError(f"offset {self.target} not flushed yet")
            if rc != 0:
                if not PyObject_GC_IsTracked(self):
                    PyObject_GC_Track(self)  # the error's traceback may come to hold the future
                self._error = flush_timeout(self._result, rc)
            self._resolved = True
        if self._error is not None:
            raise self._error
        return self._result

    def add_done_callback(self, fn):
        """Call ``fn(future)`` from the flush-callback thread once done (at once if done)."""
        if self.done():
            fn(self)
        else:
            self._core._watcher_add(self, fn)

    def __await__(self):
        import asyncio
        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        def _done(_self):
            loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(None))

        self.add_done_callback(_done)
        yield from fut.__await__()
        return self.result()


cdef bint _bytes_view(object data, Py_buffer *view, const uint8_t **ptr, Py_ssize_t *size) except -1:
    """Point ``ptr``/``size`` at the bytes of ``data``: a bytes object's own, else an export into
    ``view``; True when there is an export (the caller releases it)."""
    if PyBytes_CheckExact(data):
        ptr[0] = <const uint8_t *>PyBytes_AS_STRING(data)
        size[0] = PyBytes_GET_SIZE(data)
        return False
    PyObject_GetBuffer(data, view, PyBUF_SIMPLE)
    ptr[0] = <const uint8_t *>view.buf
    size[0] = view.len
    return True


cdef class CommitLogCore:
    """The append path of one CommitLog. See the module docstring; not for direct use."""

    cdef rs_flusher *_flusher
    cdef PyThread_type_lock _lock
    cdef uint8_t *_base              # active segment map, or NULL when a roll is due
    cdef int64_t _file_from          # active segment's start offset
    cdef int64_t _file_size
    cdef int64_t _pos                # write position within the active segment
    cdef int64_t _max_message_size
    cdef int64_t _last_store_ts
    cdef int64_t _sync_flush_timeout_ms
    cdef bytes _store_host
    cdef int32_t _store_port
    cdef uint8_t _store_host_raw[16]
    cdef bytes _born_host
    cdef int32_t _born_port
    cdef uint8_t _born_host_raw[16]
    cdef int32_t _host_sysflag       # IPv6 bits implied by the hosts
    cdef uint8_t _uniq_prefix[22]
    cdef int _uniq_prefix_len
    cdef int64_t _month_start, _month_next
    cdef uint32_t _uniq_counter
    cdef uint8_t *_props             # scratch: user properties + generated UNIQ_KEY (+ CRC32)
    cdef public bint append_prop_crc  # write RocketMQ 5.2+'s CRC32 property (spec §1.6)
    cdef dict _topics
    cdef dict _pins                  # segment start -> _Pin, while registered with the flusher
    cdef dict _queue_offsets_pending  # topic -> {queue_id: next offset} for topics not loaded yet
    cdef bint _populate              # POPULATE_WRITE: populate before every store (see above)
    cdef object _topic_lookup
    cdef object _roll
    cdef object _watcher
    cdef bint _closed
    cdef int _default_wait           # wait mode of a put that does not say (SYNC_FLUSH: WAIT_BLOCK)
    cdef readonly int64_t puts       # counters for stats()
    cdef readonly int64_t durable_waits
    cdef readonly int64_t refused_puts
    cdef object _refusal             # while set (disk full), every put is refused with it
    cdef _LivePage _live             # the live page, once set_live() gave one
    cdef uint8_t *_live_page
    cdef uint64_t _live_dirty       # slots of the topics put since the last _notify
    cdef uint8_t *_share             # the shared append table's map (rocketstore.log.sharedappend) or NULL
    cdef _LivePage _share_pin        # holds that map
    cdef int _share_fd
    cdef uint64_t _epoch             # the table's epoch this core appends under
    cdef bint _share_owner           # this process holds the store's lock
    cdef list _dirty                 # shared entries moved in the current append
    cdef int64_t _owner_seen_ms      # a joined writer's last look at the owner's presence lock
    cdef uint32_t _pid               # this process (what `busy` holds during its appends)
    cdef long _fork_gen              # rs_fork_generation when made: another one is a forked child
    cdef long _opener                # the process that made it

    def __cinit__(self):
        self._fork_gen = rs_fork_generation
        self._opener = getpid()
        self._share_fd = -1
        self._lock = PyThread_allocate_lock()
        self._props = <uint8_t *>malloc(RS_MAX_PROPERTIES_LENGTH + 64)
        if self._lock == NULL or self._props == NULL:
            raise MemoryError()

    def __init__(self, *, int64_t file_size, int64_t start_offset, bytes store_host, int store_port,
                 bytes born_host, int born_port, bytes uniq_prefix, int64_t max_message_size,
                 topic_lookup, roll, int flush_interval_ms=500, int flush_least_pages=4,
                 int flush_thorough_ms=10000, int64_t prefault_bytes=0,
                 int64_t sync_flush_timeout_ms=5000, int default_wait=0):
        if len(store_host) not in (4, 16) or len(born_host) not in (4, 16):
            raise ValueError("hosts must be 4 (IPv4) or 16 (IPv6) address bytes")
        if len(uniq_prefix) not in (10, 22):
            raise ValueError("uniq_prefix must be 10 or 22 bytes (ip + pid + loader hash)")
        if file_size < 4096:
            raise ValueError("file_size must be at least 4096 bytes")
        self._file_size = file_size
        self._max_message_size = max_message_size
        self._sync_flush_timeout_ms = sync_flush_timeout_ms
        self._default_wait = default_wait
        self._store_host = store_host
        self._store_port = store_port
        memcpy(self._store_host_raw, <char *>store_host, len(store_host))
        self._born_host = born_host
        self._born_port = born_port
        memcpy(self._born_host_raw, <char *>born_host, len(born_host))
        self._host_sysflag = ((RS_SYSFLAG_STOREHOST_V6 if len(store_host) == 16 else 0)
                              | (RS_SYSFLAG_BORNHOST_V6 if len(born_host) == 16 else 0))
        memcpy(self._uniq_prefix, <char *>uniq_prefix, len(uniq_prefix))
        self._uniq_prefix_len = len(uniq_prefix)
        self._topics = {}
        self._pins = {}
        self._topic_lookup = topic_lookup
        self._roll = roll
        self._file_from = start_offset - start_offset % file_size
        self._pos = start_offset - self._file_from
        self._populate = POPULATE_WRITE
        self._flusher = rs_flusher_new(start_offset, flush_interval_ms, flush_least_pages,
                                       flush_thorough_ms, prefault_bytes)
        if self._flusher == NULL:
            raise OSError("could not start the flush thread")

    def __dealloc__(self):
        if self._flusher != NULL:
            with nogil:
                rs_flusher_free(self._flusher)
            self._flusher = NULL
        if self._lock != NULL:
            PyThread_free_lock(self._lock)
        free(self._props)

    # ---- segments ----

    def set_active(self, mm, int64_t file_from_offset, int64_t wrote_position, fd=None):
        """Make ``mm`` (a writable map of ``file_size`` bytes) the segment appends go to."""
        self._check_open()
        cdef _Pin pin = self._pin(mm, file_from_offset, fd)
        self._base = <uint8_t *>pin.view.buf
        self._file_from = file_from_offset
        self._pos = wrote_position
        rs_flusher_publish(self._flusher, file_from_offset + wrote_position)

    def set_live(self, page):
        """Publish where whole records end in ``page`` (the live page's map) after every put
        (the page already says where they end now)."""
        self._check_open()
        self._live = _LivePage(page)
        self._live_page = <uint8_t *>self._live.view.buf

    cdef inline void _notify(self) noexcept:
        cdef uint64_t dirty = self._live_dirty
        if self._live_page != NULL:
            self._live_dirty = 0
            rs_live_publish_slots(self._live_page, rs_flusher_wrote(self._flusher), dirty)

    def add_segment(self, mm, int64_t file_from_offset, fd=None):
        """Register a prepared next segment, so its first pages are pre-faulted before use."""
        if self._closed:
            return          # a segment prepared in the background after close: not needed
        if len(self._pins) >= RS_FLUSHER_MAX_SEGMENTS - 2:
            return          # pre-faulting is an optimisation: set_active pins it when needed
        self._pin(mm, file_from_offset, fd)

    cdef _Pin _pin(self, mm, int64_t start, fd):
        cdef int fileno = -1 if fd is None else fd
        cdef _Pin pin = self._pins.get(start)
        if pin is not None:
            return pin
        pin = _Pin.__new__(_Pin)
        PyObject_GetBuffer(mm, &pin.view, PyBUF_WRITABLE)
        pin.held = True
        pin.start = start
        if pin.view.len != self._file_size:
            raise ValueError(f"segment map is {pin.view.len} bytes, expected {self._file_size}")
        if rs_flusher_register(self._flusher, start, <uint8_t *>pin.view.buf, pin.view.len, fileno) != 0:
            # Tiny segments filled faster than the flush interval: flush what was written,
            # release the flushed segments and try again.
            self.release_flushed_segments()
            if rs_flusher_register(self._flusher, start, <uint8_t *>pin.view.buf, pin.view.len, fileno) != 0:
                self._wait(rs_flusher_wrote(self._flusher), -1)
                self.release_flushed_segments()
                if rs_flusher_register(self._flusher, start, <uint8_t *>pin.view.buf, pin.view.len, fileno) != 0:
                    raise SegmentError("too many unflushed segments registered with the flush thread")
        self._pins[start] = pin
        return pin

    def release_segment(self, int64_t file_from_offset):
        """Stop flushing a segment and drop the pin on its map (flush it first)."""
        cdef _Pin pin = self._pins.pop(file_from_offset, None)
        if pin is None:
            return
        if self._base == <uint8_t *>pin.view.buf:
            self._base = NULL
        with nogil:
            rs_flusher_unregister(self._flusher, file_from_offset)
        del pin

    def release_flushed_segments(self):
        """Release every segment wholly below the flushed offset, except the active one."""
        cdef int64_t flushed = rs_flusher_flushed(self._flusher)
        for start in sorted(self._pins):
            if start + self._file_size <= flushed and start != self._file_from:
                self.release_segment(start)

    def reset(self, int64_t offset):
        """Set wrote = flushed = ``offset`` (after recovery); no segment is active afterwards."""
        self._base = NULL
        self._file_from = offset - offset % self._file_size
        self._pos = offset - self._file_from
        rs_flusher_reset(self._flusher, offset)

    # ---- the shared append table (rocketstore.log.sharedappend) ----
    # (a joined writer looks whether the owner still lives at most every OWNER_LOOK_MS)

    def share(self, table, int fd, uint64_t epoch, bint owner):
        """Append under the shared append table ``table`` (its writable map; ``fd`` for the
        lock) from now on. The owner (``owner``) fills it with this core's end and queue
        offsets and gives it ``epoch``; a joined writer checks it holds ``epoch`` (StaleTable)."""
        cdef _LivePage pin = _LivePage(table)
        cdef uint8_t *t = <uint8_t *>pin.view.buf
        cdef _Topic top
        cdef int64_t at
        cdef int err
        if pin.view.len < RS_AP_SIZE or epoch == 0:
            raise ValueError("not a shared append table, or epoch 0")
        self._check_open()
        _acquire(self._lock)
        try:
            with nogil:
                err = rs_ap_lock(t)
            if err:
                raise OSError(err, "cannot lock the shared append table")
            try:
                if owner:
                    rs_ap_u64(t, RS_AP_O_EPOCH)[0] = 0
                    memset(t, 0, 128)     # (not the mutex after it: this process holds it)
                    memset(t + 256, 0, 4096 - 256)
                    rs_ap_u64(t, RS_AP_O_MAGIC)[0] = RS_AP_MAGIC
                    rs_ap_i64(t, RS_AP_O_SEGMENT)[0] = self._file_size
                    rs_ap_i64(t, RS_AP_O_END)[0] = self._file_from + self._pos
                    rs_ap_i64(t, RS_AP_O_PUBLISHING)[0] = self._file_from + self._pos
                    rs_ap_i64(t, RS_AP_O_LAST_TS)[0] = self._last_store_ts
                    rs_ap_u32(t, RS_AP_O_REFUSING)[0] = self._refusal is not None
                    for top in self._topics.values():
                        self._share_topic(t, top, -1 if top.nqueues > RS_AP_QUEUES else top.nqueues)
                    if self._queue_offsets_pending:
                        for name, qs in self._queue_offsets_pending.items():
                            at = rs_ap_add(t, <const uint8_t *>PyBytes_AS_STRING(name.encode()),
                                           len(name.encode()), 0)
                            if at >= 0:
                                for qid, nxt in qs.items():
                                    if 0 <= qid < RS_AP_QUEUES:
                                        rs_ap_i64(t, at + RS_AP_E_NEXT + 8 * qid)[0] = nxt
                                        rs_ap_i64(t, at + RS_AP_E_COMMITTED + 8 * qid)[0] = nxt
                        self._queue_offsets_pending = None   # the table has them now
                    rs_ap_u64(t, RS_AP_O_EPOCH)[0] = epoch
                elif (rs_ap_u64(t, RS_AP_O_MAGIC)[0] != RS_AP_MAGIC or rs_ap_u64(t, RS_AP_O_EPOCH)[0] != epoch
                      or rs_ap_i64(t, RS_AP_O_SEGMENT)[0] != self._file_size):
                    raise StaleTable("the shared append table is not the owner's")
            finally:
                rs_ap_unlock(t)
            self._pid = <uint32_t>getpid()
            self._share = t
            self._share_pin = pin
            self._share_fd = fd
            self._epoch = epoch
            self._share_owner = owner
            self._dirty = []
        finally:
            PyThread_release_lock(self._lock)

    @property
    def shared(self):
        """Appending under a shared append table."""
        return self._share != NULL

    cdef int _share_topic(self, uint8_t *t, _Topic top, int32_t nqueues) except -1:
        """Give ``top`` (the owner's, at share()) an entry holding its offsets; -1 marks a topic
        the owner keeps (too many queues, or the table is full)."""
        cdef int64_t at = rs_ap_add(t, <const uint8_t *>PyBytes_AS_STRING(top.name),
                                    <uint32_t>PyBytes_GET_SIZE(top.name), nqueues)
        cdef int q
        if at < 0 or nqueues < 0:
            return 0
        for q in range(min(top.capacity, RS_AP_QUEUES)):
            rs_ap_i64(t, at + RS_AP_E_NEXT + 8 * q)[0] = top.next_offsets[q]
            rs_ap_i64(t, at + RS_AP_E_COMMITTED + 8 * q)[0] = top.next_offsets[q]
        free(top.next_offsets)
        self._attach_entry(t, top, at)
        return 0

    cdef inline void _attach_entry(self, uint8_t *t, _Topic top, int64_t at) noexcept:
        top.next_offsets = rs_ap_i64(t, at + RS_AP_E_NEXT)
        top.committed = rs_ap_i64(t, at + RS_AP_E_COMMITTED)
        top.shared_nq = rs_ap_i32(t, at + RS_AP_E_NQUEUES)
        top.capacity = RS_AP_QUEUES
        top.dirty_lo = top.dirty_hi = -1

    cdef int _lock_append(self) except -1:
        """Take the append lock: this core's, and the shared table's (adopting what other
        processes appended meanwhile). Raises StaleTable, having taken nothing, when the
        table's epoch moved on."""
        cdef int err
        cdef uint8_t *t
        if self._fork_gen != rs_fork_generation:
            self._refuse_forked()  # (before the lock: a parent's thread may have held it at the fork)
        _acquire(self._lock)
        t = self._share
        if t == NULL:
            return 0
        if self._closed and not self._share_owner:
            PyThread_release_lock(self._lock)
            self._raise_closed()  # closed since the caller's look: its file is closed too
        with nogil:
            err = rs_ap_lock(t)
        if err:
            PyThread_release_lock(self._lock)
            raise OSError(err, "cannot lock the shared append table")
        try:
            if rs_ap_epoch(t) != self._epoch:
                raise StaleTable("the store's writing process is opening, closing or gone")
            if not self._share_owner:
                # the last append's time (no clock read per put; a writer that puts rarely looks
                # at its next put): the owner's presence lock, at most every OWNER_LOOK_MS
                now = self._last_store_ts
                if now - self._owner_seen_ms >= OWNER_LOOK_MS or now < self._owner_seen_ms:
                    now = _now_ms()
                    if not rs_ap_owner_present(self._share_fd):
                        raise StaleTable("the store's writing process is gone")
                    self._owner_seen_ms = now
            if rs_ap_u32(t, RS_AP_O_BUSY)[0] != 0:
                rs_ap_repair(t)    # a writer died inside: its offsets and half-written bytes go
            self._adopt(rs_ap_i64(t, RS_AP_O_END)[0], rs_ap_i64(t, RS_AP_O_LAST_TS)[0])
            rs_ap_u32(t, RS_AP_O_BUSY)[0] = self._pid
        except BaseException:
            rs_ap_unlock(t)
            PyThread_release_lock(self._lock)
            raise
        return 0

    cdef void _unlock_append(self, bint unshare=False) noexcept:
        """Publish what this core appended (end, queue offsets) and let go of both locks
        (``unshare``: and append alone from now on)."""
        cdef uint8_t *t = self._share
        cdef int64_t end = self._file_from + self._pos
        cdef _Topic top
        cdef int q
        if t != NULL:
            # the end first, then the committed offsets, then the end published: a writer killed
            # in between is finished by the next (rs_ap_repair), so the committed offsets never
            # count a record past the published end
            _publish_fault(1)
            rs_ap_i64(t, RS_AP_O_LAST_TS)[0] = self._last_store_ts
            rs_ap_begin_publish(t, end)
            _publish_fault(2)
        if self._dirty:
            for top in self._dirty:
                for q in range(top.dirty_lo, top.dirty_hi + 1):
                    top.committed[q] = top.next_offsets[q]
                    if t != NULL:
                        _publish_fault(3)
                top.dirty_lo = top.dirty_hi = -1
            del self._dirty[:]
        if t != NULL:
            _publish_fault(4)
            if unshare:
                self._share = NULL
            rs_ap_set_end(t, end)
            _publish_fault(5)
            rs_ap_set_busy(t, 0)
            _publish_fault(6)
            self._notify()     # under the lock: every twin publishes the live page's end in order
            rs_ap_unlock(t)
            PyThread_release_lock(self._lock)
            return
        PyThread_release_lock(self._lock)
        self._notify()

    cdef int _adopt(self, int64_t end, int64_t last_ts) except -1:
        """Move to ``end``, where the table says whole records end (other processes appended)."""
        cdef int64_t start
        if last_ts > self._last_store_ts:
            self._last_store_ts = last_ts
        if end == self._file_from + self._pos:
            return 0
        start = end - end % self._file_size
        if start != self._file_from or self._base == NULL:
            if self._share_owner:
                # the owner adopts every segment up to it, and flushes the others' records too
                # (its checkpoint vouches for them)
                mm, fd = self._roll(start)
                self._pin(mm, start, fd)
                self.release_flushed_segments()
            self._base = NULL              # the next append maps it (_roll_segment)
            self._file_from = start
            self._pos = end - start
        else:
            self._pos = end - start
        rs_flusher_publish(self._flusher, end)
        return 0

    def unshare(self):
        """Append alone from now on (the owner closing): what the others appended is adopted,
        and the table's epoch becomes 0, so that no process appends through it any more."""
        if self._share == NULL:
            return
        self._lock_append()
        rs_ap_u64(self._share, RS_AP_O_EPOCH)[0] = 0
        self._unlock_append(True)

    def sync_shared(self):
        """Adopt what other processes appended (the owner, before it dispatches or reads)."""
        if self._share == NULL or self._closed:
            return
        if rs_ap_end(self._share) == self._file_from + self._pos:
            return
        self._lock_append()
        self._unlock_append()

    # ---- topics and queue offsets ----

    cdef _Topic _topic(self, topic):
        cdef _Topic t = self._topics.get(topic)
        if t is not None:
            if t.shared_nq != NULL and t.shared_nq[0] > 0:
                t.nqueues = t.shared_nq[0]   # the owner changed the count
            return t
        nqueues = self._topic_lookup(topic)  # validates (InvalidTopicError); may switch threads
        if self._share != NULL:
            return self._shared_topic(topic, nqueues)
        t = _Topic.__new__(_Topic)
        t.name = topic.encode("utf-8")
        t.slot = rs_body_crc(<const uint8_t *>PyBytes_AS_STRING(t.name), PyBytes_GET_SIZE(t.name)) % RS_LIVE_SLOTS
        t.nqueues = nqueues
        t.capacity = max(1, nqueues)
        t.next_offsets = <int64_t *>malloc(sizeof(int64_t) * t.capacity)
        if t.next_offsets == NULL:
            raise MemoryError()
        memset(t.next_offsets, 0, sizeof(int64_t) * t.capacity)
        old = self._queue_offsets_pending.pop(topic, None) if self._queue_offsets_pending else None
        if old:
            for qid, nxt in old.items():
                if 0 <= qid < nqueues:
                    t.next_offsets[qid] = nxt
        # Another thread may have created the entry while the lookup ran: keep the first one,
        # or the two would hand out the same queue offsets.
        return self._topics.setdefault(topic, t)

    cdef _Topic _shared_topic(self, topic, int nqueues):
        """The entry of the shared append table for a topic new to this core: found, or added.
        A topic the table cannot hold (full, too many queues, the owner's alone) is the owner's
        own (a joined writer raises NotShareable: its puts go to the owner)."""
        cdef bytes name = topic.encode("utf-8")
        cdef _Topic t
        cdef int64_t at
        cdef int err
        cdef uint8_t *tab = self._share
        _acquire(self._lock)
        try:
            t = self._topics.get(topic)
            if t is not None:
                return t
            with nogil:
                err = rs_ap_lock(tab)
            if err:
                raise OSError(err, "cannot lock the shared append table")
            try:
                if rs_ap_epoch(tab) != self._epoch:
                    raise StaleTable("the store's writing process is opening, closing or gone")
                at = rs_ap_find(tab, <const uint8_t *>PyBytes_AS_STRING(name), <uint32_t>len(name))
                if at < 0 and nqueues <= RS_AP_QUEUES and not rs_ap_u32(tab, RS_AP_O_FULL)[0]:
                    at = rs_ap_add(tab, <const uint8_t *>PyBytes_AS_STRING(name), <uint32_t>len(name), nqueues)
                elif at >= 0 and rs_ap_i32(tab, at + RS_AP_E_NQUEUES)[0] < 0:
                    at = -1
                if at < 0 and not self._share_owner:
                    raise NotShareable(f"topic {topic!r} is not in the shared append table")
            finally:
                rs_ap_unlock(tab)
            t = _Topic.__new__(_Topic)
            t.name = name
            t.slot = rs_body_crc(<const uint8_t *>PyBytes_AS_STRING(name), len(name)) % RS_LIVE_SLOTS
            t.nqueues = nqueues
            t.dirty_lo = t.dirty_hi = -1
            if at >= 0:
                self._attach_entry(tab, t, at)
                if t.shared_nq[0] == 0:
                    t.shared_nq[0] = nqueues
            else:      # the owner's alone
                t.capacity = max(1, nqueues)
                t.next_offsets = <int64_t *>calloc(t.capacity, sizeof(int64_t))
                if t.next_offsets == NULL:
                    raise MemoryError()
            self._topics[topic] = t
            return t
        finally:
            PyThread_release_lock(self._lock)

    def set_queue_offset(self, str topic, int queue_id, int64_t next_offset):
        """Set the next queue offset of (topic, queue_id) (after recovery)."""
        cdef _Topic t = self._topics.get(topic)
        if t is not None and 0 <= queue_id < t.capacity:
            t.next_offsets[queue_id] = next_offset
            return
        if self._queue_offsets_pending is None:
            self._queue_offsets_pending = {}
        self._queue_offsets_pending.setdefault(topic, {})[queue_id] = next_offset

    def queue_offsets(self):
        """{(topic, queue_id): next queue offset} for every queue that has one."""
        out = {}
        cdef _Topic t
        for name, t in self._topics.items():
            for q in range(t.capacity):
                if t.next_offsets[q]:
                    out[(name, q)] = t.next_offsets[q]
        if self._queue_offsets_pending:
            for name, qs in self._queue_offsets_pending.items():
                for q, nxt in qs.items():
                    out.setdefault((name, q), nxt)
        return out

    def forget_topic(self, str topic):
        """Take the new queue count of ``topic`` after it changed. The cached entry is changed
        in place under the append lock (never replaced: a put holding the old entry would hand
        out queue offsets again); its offsets are kept, also those of queues beyond a smaller
        count, which a put that chose its queue before the change may still use."""
        cdef _Topic t
        cdef int64_t *grown
        cdef int nqueues = self._topic_lookup(topic)
        _acquire(self._lock)
        try:
            t = self._topics.get(topic)
            if t is None:
                return
            if t.committed != NULL:   # in the shared table: it holds RS_AP_QUEUES queues
                nqueues = min(nqueues, RS_AP_QUEUES)
                t.shared_nq[0] = nqueues
            elif nqueues > t.capacity:
                grown = <int64_t *>realloc(t.next_offsets, sizeof(int64_t) * nqueues)
                if grown == NULL:
                    raise MemoryError()
                memset(grown + t.capacity, 0, sizeof(int64_t) * (nqueues - t.capacity))
                t.next_offsets = grown
                pending = self._queue_offsets_pending.get(topic) if self._queue_offsets_pending else None
                if pending:
                    for qid in range(t.capacity, nqueues):
                        if qid in pending:
                            t.next_offsets[qid] = pending.pop(qid)
                t.capacity = nqueues
            t.nqueues = nqueues
        finally:
            PyThread_release_lock(self._lock)

    # ---- the append path ----

    cdef int _check_open(self) except -1:
        if self._closed:
            self._raise_closed()
        if self._fork_gen != rs_fork_generation:
            self._refuse_forked()
        return 0

    cdef int _raise_closed(self) except -1:
        if self._share != NULL and not self._share_owner:
            # a joined process's own appender, closed (a takeover, the owner gone) after its
            # caller looked at it: the caller puts another way
            raise StaleTable("this process's shared appender is closed")
        raise StoreClosedError("the store is closed")

    cdef int _refuse_forked(self) except -1:
        raise StoreClosedError(
            f"this store was opened by process {self._opener} before it forked: open it again in "
            "this process (it then joins the writing process)")

    cdef int _choose_queue(self, _Topic t, int queue_id) except -2:
        if queue_id < 0:
            queue_id = t.rr % t.nqueues
            t.rr += 1
        elif queue_id >= t.nqueues:
            raise InvalidQueueIdError(
                f"queue id {queue_id} out of range: topic {t.name.decode()!r} has {t.nqueues} queues")
        return queue_id

    cdef int64_t _month_roll(self, int64_t now) except -1:
        start, nxt = month_bounds(now)
        self._month_start = start
        self._month_next = nxt
        return 0

    cdef inline int _make_uniq(self, int64_t now, uint8_t *raw) except -1:
        """UNIQ_KEY raw bytes (spec §3.2): prefix, ms since month start (u32), counter (u16)."""
        if now >= self._month_next or now < self._month_start:
            self._month_roll(now)
        cdef int n = self._uniq_prefix_len
        cdef int64_t span = now - self._month_start
        memcpy(raw, self._uniq_prefix, n)
        cdef uint32_t s = <uint32_t>(span if span > 0 else 0)
        raw[n] = s >> 24
        raw[n + 1] = (s >> 16) & 0xFF
        raw[n + 2] = (s >> 8) & 0xFF
        raw[n + 3] = s & 0xFF
        cdef uint16_t c = <uint16_t>self._uniq_counter
        self._uniq_counter += 1
        raw[n + 4] = c >> 8
        raw[n + 5] = c & 0xFF
        return n + 6

    cdef int _ensure_populated(self, int64_t length) except -1:
        """Populate [pos, pos + length) of the active segment before storing into it."""
        cdef int64_t start = self._file_from + self._pos
        cdef int64_t end = start + length
        cdef int64_t done = rs_flusher_prefaulted(self._flusher)
        cdef int64_t lo, hi
        cdef int err
        if not self._populate or end <= done:
            return 0
        lo = (done if done > start else start) - self._file_from
        hi = end - self._file_from + 262144          # a little ahead: fewer calls
        if hi > self._file_size:
            hi = self._file_size
        with nogil:
            err = rs_populate_write(self._base + lo, hi - lo)
        if err != 0 and hi > end - self._file_from:
            hi = end - self._file_from               # nearly full: just what the record needs
            with nogil:
                err = rs_populate_write(self._base + lo, hi - lo)
        if err != 0:
            raise _populate_error(err, self._file_from)
        rs_flusher_note_prefaulted(self._flusher, self._file_from + hi)
        return 0

    cdef int _reserve_space(self, int64_t[::1] lens) except -1:
        """Before a batch writes its first byte (append lock held): create every segment its
        records go to and populate the pages they will fill, so a full disk fails the whole
        batch up front instead of storing half of it. Raises SegmentError / DiskFullError."""
        cdef int64_t size = self._file_size, start = self._file_from, pos = self._pos, lo
        cdef Py_ssize_t i, n = lens.shape[0]
        cdef list ranges = []
        if n == 0:
            return 0
        if self._base == NULL and pos >= size:    # BLANK written, roll due
            start += size
            pos = 0
        lo = pos
        for i in range(n):
            if lens[i] + RS_END_FILE_MIN_BLANK > size - pos:
                ranges.append((start, lo, pos + RS_END_FILE_MIN_BLANK))   # the BLANK
                start += size
                pos = 0
                lo = 0
            pos += lens[i]
        ranges.append((start, lo, pos))
        for start, lo, end in ranges:
            self._reserve_range(start, lo, end)
        return 0

    cdef int _reserve_range(self, int64_t start, int64_t lo, int64_t hi) except -1:
        """Make sure the segment at ``start`` exists and ``[lo, hi)`` of it is populated."""
        cdef Py_buffer view
        cdef int64_t done
        cdef int err = 0
        cdef bint active = self._base != NULL and start == self._file_from
        if not active:
            mm, _fd = self._roll(start)   # created now (or found, when created ahead)
        if not self._populate:
            return 0                      # segments are fallocated when created
        done = rs_flusher_prefaulted(self._flusher) - start   # [wrote, prefaulted) is populated
        if done > lo:
            lo = done
        if lo >= hi:
            return 0
        if active:
            with nogil:
                err = rs_populate_write(self._base + lo, hi - lo)
            if err == 0:
                rs_flusher_note_prefaulted(self._flusher, start + hi)
        else:
            PyObject_GetBuffer(mm, &view, PyBUF_WRITABLE)
            try:
                if view.len != self._file_size:
                    raise ValueError(f"segment map is {view.len} bytes, expected {self._file_size}")
                with nogil:
                    err = rs_populate_write(<uint8_t *>view.buf + lo, hi - lo)
            finally:
                PyBuffer_Release(&view)
        if err != 0:
            raise _populate_error(err, start)
        return 0

    # ---- refusing puts (disk full, spec §9) ----

    def refuse_puts(self, error=None):
        """While ``error`` is set (a DiskFullError), every put writes nothing and returns status
        SERVICE_NOT_AVAILABLE with ``result.error = error``; None accepts puts again. The
        owner of a shared append table says so in it (joined writers then send puts here)."""
        self._refusal = error
        if self._share != NULL and self._share_owner:
            rs_ap_u32(self._share, RS_AP_O_REFUSING)[0] = error is not None

    @property
    def refusing_puts(self):
        """The error puts are refused with, or None."""
        return self._refusal

    cdef object _refused(self):
        self.refused_puts += 1
        return self._refusal

    cdef object _not_stored(self, int status, object cause, int wait, Py_ssize_t n):
        """A put that wrote nothing: raise its PutError, or (``wait`` WAIT_FUTURE) return a
        future that raises it (a list of ``n`` of them when ``n`` >= 0, for put_many)."""
        cdef PutFuture fut
        error = not_stored(PutStatus(status), cause)
        error.__cause__ = cause.with_traceback(None)
        if wait != 2:
            raise error
        fut = PutFuture.__new__(PutFuture)
        fut._core = self
        fut.target = -1
        fut._resolved = True
        fut._error = error
        return fut if n < 0 else [fut] * n

    cdef int _roll_segment(self) except -1:
        """Ask the Python layer for the segment starting at the current end; make it active."""
        cdef int64_t start = self._file_from, pos = self._pos
        if pos >= self._file_size:     # the active segment is full (BLANK written): the next one
            start += self._file_size
            pos = 0
        mm, fd = self._roll(start)
        self.set_active(mm, start, pos, fd)
        self.release_flushed_segments()
        return 0

    cdef inline int _prop_crc_extra(self, const uint8_t *props, Py_ssize_t props_len,
                                    bint have_unique_key) noexcept:
        """Bytes the §1.6 CRC32 property adds (0 unless append_prop_crc): 20, plus a 0x02 when
        the final properties do not end in one (a generated UNIQ_KEY does)."""
        if not self.append_prop_crc:
            return 0
        return PROP_CRC_LENGTH + (have_unique_key and props_len > 0 and props[props_len - 1] != 2)

    cdef int64_t _append(self, _Topic t, int queue_id, const uint8_t *body, int32_t body_len,
                         int32_t body_crc, const uint8_t *props, int32_t props_len,
                         object unique_key, int32_t flag, int64_t born_ts, int32_t sys_flag,
                         int32_t reconsume, int64_t prepared_offset, PutResult out) except -1:
        """Append one record (append lock held). Fills ``out``; returns the end offset."""
        cdef rs_record r
        cdef int uniq_len = 0
        cdef int32_t total_props = props_len
        cdef int64_t length, now, remaining, end
        cdef bint consumes_offset
        cdef int tx
        cdef int crc_extra = self._prop_crc_extra(props, props_len, unique_key is not None)
        cdef int32_t at
        cdef uint8_t *rec
        if unique_key is None:
            uniq_len = self._uniq_prefix_len + 6
            total_props += UNIQ_NAME_LEN + 2 * uniq_len + 1
        total_props += crc_extra
        if total_props > RS_MAX_PROPERTIES_LENGTH:
            raise PropertiesTooLargeError(
                f"properties are {total_props} bytes encoded; the limit is {RS_MAX_PROPERTIES_LENGTH}")
        sys_flag |= self._host_sysflag
        length = rs_record_length(body_len, len(t.name), total_props, sys_flag, RS_MAGIC_V1)
        if length < 0 or length > self._max_message_size or length + RS_END_FILE_MIN_BLANK > self._file_size:
            raise MessageTooLargeError(
                "record fields out of range" if length < 0 else
                f"record of {length} bytes exceeds max_message_size {self._max_message_size}"
                if length > self._max_message_size else
                f"record of {length} bytes cannot fit a {self._file_size}-byte segment")

        now = _now_ms()
        if now < self._last_store_ts:
            now = self._last_store_ts     # store timestamps never decrease in file order
        self._last_store_ts = now
        if uniq_len:
            self._make_uniq(now, out._uniq_raw)
            out._uniq_len = uniq_len
            if props_len:
                memcpy(self._props, props, props_len)
            self._write_uniq_property(self._props + props_len, out._uniq_raw, uniq_len)
            props = self._props
        else:
            out._unique_key = unique_key
        if crc_extra:       # the reserved 20 bytes (and a 0x02 before them if needed)
            at = total_props - crc_extra
            if props != self._props:
                if at:
                    memcpy(self._props, props, at)
                props = self._props
            if crc_extra > PROP_CRC_LENGTH:
                self._props[at] = 2
                at += 1
            memcpy(self._props + at, rs_prop_crc_reserved, PROP_CRC_LENGTH)

        while True:
            if self._base == NULL:
                self._roll_segment()
            remaining = self._file_size - self._pos
            if length + RS_END_FILE_MIN_BLANK <= remaining:
                break
            # BLANK rule (§1.4): the record does not fit with 8 bytes to spare; end the file.
            self._ensure_populated(RS_END_FILE_MIN_BLANK)
            rs_encode_blank(self._base + self._pos, <int32_t>remaining)
            self._pos = self._file_size
            rs_flusher_publish(self._flusher, self._file_from + self._file_size)
            self._base = NULL

        self._ensure_populated(length)
        tx = sys_flag & RS_SYSFLAG_TRANSACTION_MASK
        consumes_offset = tx != RS_TRANSACTION_PREPARED_TYPE and tx != RS_TRANSACTION_ROLLBACK_TYPE
        r.body_crc = body_crc
        r.queue_id = queue_id
        r.flag = flag
        r.queue_offset = t.next_offsets[queue_id] if consumes_offset else 0
        r.physical_offset = self._file_from + self._pos
        r.sys_flag = sys_flag
        r.born_timestamp = born_ts if born_ts > 0 else now
        memcpy(r.born_host, self._born_host_raw, 16)
        r.born_port = self._born_port
        r.store_timestamp = now
        memcpy(r.store_host, self._store_host_raw, 16)
        r.store_port = self._store_port
        r.reconsume_times = reconsume
        r.prepared_transaction_offset = prepared_offset
        r.body = body
        r.body_len = body_len
        r.topic = <const uint8_t *>PyBytes_AS_STRING(t.name)
        r.topic_len = <int32_t>PyBytes_GET_SIZE(t.name)
        r.properties = props
        r.properties_len = total_props
        rec = self._base + self._pos
        if rs_encode_record(rec, self._file_size - self._pos, &r) != length:
            raise SegmentError("internal error: record does not fit the checked space")
        if crc_extra:       # over the whole record as written, but its last 20 bytes (§1.6)
            _prop_crc_digits(rs_body_crc(rec, length - PROP_CRC_LENGTH),
                             rec + length - PROP_CRC_LENGTH + PROP_CRC_NAME_LENGTH)
        self._pos += length
        end = self._file_from + self._pos
        rs_flusher_publish(self._flusher, end)
        self._live_dirty |= (<uint64_t>1) << t.slot
        if consumes_offset:
            t.next_offsets[queue_id] += 1
            if t.committed != NULL:     # published with the end when the append lock goes
                if t.dirty_hi < 0:
                    self._dirty.append(t)
                    t.dirty_lo = t.dirty_hi = queue_id
                elif queue_id < t.dirty_lo:
                    t.dirty_lo = queue_id
                elif queue_id > t.dirty_hi:
                    t.dirty_hi = queue_id
        self.puts += 1

        out._status = PUT_OK
        out.commitlog_offset = r.physical_offset
        out.size = <int32_t>length
        out.queue_id = queue_id
        out.queue_offset = r.queue_offset
        out.store_timestamp = now
        out._host = self._store_host
        out._port = self._store_port
        return end

    cdef inline void _write_uniq_property(self, uint8_t *p, const uint8_t *raw, int n) noexcept:
        cdef int i
        memcpy(p, rs_uniq_property_name, UNIQ_NAME_LEN)
        p += UNIQ_NAME_LEN
        for i in range(n):
            p[2 * i] = rs_hex_digits[raw[i] >> 4]
            p[2 * i + 1] = rs_hex_digits[raw[i] & 15]
        p[2 * n] = 2

    cdef int _wait(self, int64_t target, int64_t timeout_ms) except -1:
        """0 flushed, 1 timed out, else errno; the GIL is released while waiting."""
        cdef int rc
        if self._flusher == NULL:     # closed: close() flushed everything
            return 0
        if rs_flusher_flushed(self._flusher) >= target:
            return 0
        self.durable_waits += 1
        with nogil:
            rc = rs_flusher_wait_nogil(self._flusher, target, timeout_ms)
        return rc

    cdef object _reserve_or_refuse(self, int64_t[::1] lens, int wait, Py_ssize_t n):
        """:meth:`_reserve_space` for a batch (append lock held); when no space could be had,
        what the batch answers instead (see :meth:`_not_stored`), else None."""
        try:
            self._reserve_space(lens)
        except SegmentError as exc:
            # No segment space: nothing of the batch was written. RocketMQ answers
            # CREATE_MAPEDFILE_FAILED; so do we.
            return self._not_stored(CREATE_MAPPED_FILE_FAILED, exc, wait, n)
        return None

    cdef object _finish_many(self, list results, int64_t end, int wait):
        """:meth:`_finish` of a batch whose last record ends at ``end``: the results, after the
        flush a durable batch waits for (FlushTimeoutError carries them all), or their futures."""
        cdef int rc
        if wait < 0:
            wait = self._default_wait
        if wait == 1 and results:
            rc = self._wait(end, self._sync_flush_timeout_ms)
            if rc != 0:
                raise flush_timeout(results, rc)
        elif wait == 2 and results:
            return [self._finish(r, end, 2) for r in results]
        return results

    cdef object _finish(self, object result, int64_t end, int wait):
        cdef PutFuture fut
        cdef int rc
        if wait < 0:
            wait = self._default_wait
        if wait == 0:
            return result
        if wait == 1:
            rc = self._wait(end, self._sync_flush_timeout_ms)
            if rc != 0:
                raise flush_timeout(result, rc)
            return result
        rs_flusher_request(self._flusher, end)
        fut = PutFuture.__new__(PutFuture)
        fut._core = self
        fut._result = result
        fut.target = end
        fut.deadline_ms = self._last_store_ts + self._sync_flush_timeout_ms  # the put's own time
        # Out of the cyclic GC while it holds no error: its core and result never point back
        # at it, and a pipelining caller keeps thousands alive, which every collection would
        # walk. result() tracks it again before it stores an error (a traceback can cycle).
        PyObject_GC_UnTrack(fut)
        return fut

    def put(self, topic, body not None, properties=None, int queue_id=-1,
            int32_t flag=0, int64_t born_timestamp=0, int32_t sys_flag=0,
            int32_t reconsume_times=0, int64_t prepared_transaction_offset=0,
            unique_key=None, int wait=-1):
        """Append one record; ``properties`` are encoded bytes (UNIQ_KEY is added unless
        ``unique_key`` names the one they already carry). Returns PutResult or PutFuture."""
        cdef Py_buffer pview
        cdef const uint8_t *pp = NULL
        cdef Py_ssize_t plen = 0
        cdef bint have_p = False
        if properties is not None:
            have_p = _bytes_view(properties, &pview, &pp, &plen)
        try:
            return self._put_one(topic, body, pp, plen, queue_id, flag, born_timestamp, sys_flag,
                                 reconsume_times, prepared_transaction_offset, unique_key, wait)
        finally:
            if have_p:
                PyBuffer_Release(&pview)

    def put_keyed(self, topic, body not None, tags, keys, int queue_id=-1, int32_t flag=0,
                  int wait=-1, properties=None):
        """:meth:`put` of a message whose properties are ``tags``, ``keys`` and a plain
        ``properties`` dict, encoded here (see :func:`keyed_properties`); None, having done
        nothing, when they are not the plain shape (the caller then encodes them, or raises, on
        the general path)."""
        return _put_keyed(self, topic, body, tags, keys, properties, queue_id, flag, wait)

    cdef object _put_one(self, topic, body, const uint8_t *pp, Py_ssize_t plen, int queue_id,
                         int32_t flag, int64_t born_timestamp, int32_t sys_flag, int32_t reconsume_times,
                         int64_t prepared_transaction_offset, unique_key, int wait):
        """put()'s work, with the encoded properties at ``pp`` (``plen`` bytes, kept by the caller)."""
        cdef Py_buffer bview
        cdef const uint8_t *bp
        cdef Py_ssize_t blen
        cdef bint have_b = False
        cdef int32_t crc
        cdef int64_t end
        cdef _Topic t
        cdef int qid
        self._check_open()
        if rs_serve_waiting() > 0:  # a joined writer's call waits for the GIL (serve.h)
            with nogil:
                rs_serve_yield()
        if self._refusal is not None:
            return self._not_stored(SERVICE_NOT_AVAILABLE, self._refused(), wait, -1)
        t = self._topic(topic)
        qid = self._choose_queue(t, queue_id)
        if not PyBytes_CheckExact(body):
            body = contiguous(body)        # a strided view: copied (PyBUF_SIMPLE needs contiguity)
        have_b = _bytes_view(body, &bview, &bp, &blen)
        try:
            if blen > self._max_message_size or plen > RS_MAX_PROPERTIES_LENGTH:
                if plen > RS_MAX_PROPERTIES_LENGTH:
                    raise PropertiesTooLargeError(
                        f"properties are {plen} bytes encoded; the limit is {RS_MAX_PROPERTIES_LENGTH}")
                raise MessageTooLargeError(
                    f"body of {blen} bytes exceeds max_message_size {self._max_message_size}")
            if blen >= 65536:
                with nogil:
                    crc = rs_body_crc(bp, blen)
            else:
                crc = rs_body_crc(bp, blen)
            result = PutResult.__new__(PutResult)
            self._lock_append()
            try:
                self._check_open()
                end = self._append(t, qid, bp, <int32_t>blen, crc, pp, <int32_t>plen, unique_key,
                                   flag, born_timestamp, sys_flag, reconsume_times,
                                   prepared_transaction_offset, <PutResult>result)
            except SegmentError as exc:
                # No segment space (creation, mapping or page reservation failed): nothing of this
                # record was written. RocketMQ answers CREATE_MAPEDFILE_FAILED; so do we.
                return self._not_stored(CREATE_MAPPED_FILE_FAILED, exc, wait, -1)
            finally:
                self._unlock_append()
        finally:
            if have_b:
                PyBuffer_Release(&bview)
        return self._finish(result, end, wait)

    def put_inner_batch(self, topic, body not None, bytes props_before not None, bytes props_after not None,
                        int queue_id, int count, unique_key not None, int64_t born_timestamp=0, int wait=-1):
        """One RocketMQ 5.x inner batch record of ``count`` messages (sysFlag INNER_BATCH |
        NEED_UNWRAP, ``body`` their batch encoding) at the queue's next offset, which then moves
        by ``count``: the record's properties are ``props_before``, that offset in decimal (the
        INNER_BASE value, known only under the append lock), then ``props_after``; they must
        hold ``unique_key`` as UNIQ_KEY. Returns a PutResult (its queue offset the base) or a
        PutFuture, as :meth:`put`."""
        cdef _Topic t
        cdef int qid
        cdef int64_t end, base
        cdef int32_t crc
        cdef bytes data, props
        self._check_open()
        if count < 1 or count > 0x7FFF:
            raise ValueError(f"an inner batch holds 1 to 32767 messages, not {count}")
        if self._refusal is not None:
            return self._not_stored(SERVICE_NOT_AVAILABLE, self._refused(), wait, -1)
        t = self._topic(topic)
        qid = self._choose_queue(t, queue_id)
        data = bytes(body)
        if PyBytes_GET_SIZE(data) > self._max_message_size:
            raise MessageTooLargeError(
                f"body of {PyBytes_GET_SIZE(data)} bytes exceeds max_message_size {self._max_message_size}")
        crc = rs_body_crc(<const uint8_t *>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
        result = PutResult.__new__(PutResult)
        self._lock_append()
        try:
            self._check_open()
            base = t.next_offsets[qid]
            props = props_before + str(base).encode("ascii") + props_after
            if PyBytes_GET_SIZE(props) > RS_MAX_PROPERTIES_LENGTH:
                raise PropertiesTooLargeError(
                    f"properties are {PyBytes_GET_SIZE(props)} bytes encoded; the limit is "
                    f"{RS_MAX_PROPERTIES_LENGTH}")
            end = self._append(t, qid, <const uint8_t *>PyBytes_AS_STRING(data),
                               <int32_t>PyBytes_GET_SIZE(data), crc,
                               <const uint8_t *>PyBytes_AS_STRING(props), <int32_t>PyBytes_GET_SIZE(props),
                               unique_key, 0, born_timestamp, SYSFLAG_INNER_BATCH, 0, 0, <PutResult>result)
            t.next_offsets[qid] += count - 1  # (_append moved it by one; published at the release)
        except SegmentError as exc:
            return self._not_stored(CREATE_MAPPED_FILE_FAILED, exc, wait, -1)
        finally:
            self._unlock_append()
        return self._finish(result, end, wait)

    def put_batch(self, topic, bodies not None, lengths=None, properties=None,
                  int queue_id=-1, int32_t flag=0, int64_t born_timestamp=0, int32_t sys_flag=0,
                  int wait=-1):
        """Append many records of one topic and queue under one lock (consecutive queue offsets).

        ``bodies`` is a list/tuple of bytes-like objects, or one buffer cut into bodies by
        ``lengths`` (a sequence or array of non-negative ints summing to its size).
        ``properties`` (encoded bytes) are shared; each record gets its own UNIQ_KEY.
        """
        cdef _Topic t
        cdef int qid
        cdef Py_ssize_t n, i
        cdef Py_buffer whole, pview
        cdef bint have_whole = False, have_p = False
        cdef const uint8_t *pp = NULL
        cdef Py_ssize_t plen = 0
        cdef int64_t[::1] lens_view
        cdef int64_t[::1] starts
        cdef int64_t[::1] c_offsets, c_qoffsets, c_times
        cdef int32_t[::1] c_sizes
        cdef int32_t[::1] crcs
        cdef uint8_t[:, ::1] uniq
        cdef list copies = None
        cdef PutResult scratch
        cdef int64_t end = 0, total = 0
        cdef Py_buffer *bufs = NULL
        cdef Py_ssize_t nbufs = 0
        cdef int uniq_len = self._uniq_prefix_len + 6
        cdef const uint8_t *bp
        cdef int64_t blen, length
        cdef int64_t[::1] rec_lens
        self._check_open()
        if rs_serve_waiting() > 0:  # a joined writer's call waits for the GIL (serve.h)
            with nogil:
                rs_serve_yield()
        if self._refusal is not None:
            return self._not_stored(SERVICE_NOT_AVAILABLE, self._refused(), wait, -1)
        t = self._topic(topic)
        if sys_flag & RS_SYSFLAG_TRANSACTION_MASK:
            raise InvalidMessageError("a batch may not be transactional (spec §1.7)")

        if properties is not None:
            PyObject_GetBuffer(properties, &pview, PyBUF_SIMPLE)
            have_p = True
            pp = <const uint8_t *>pview.buf
            plen = pview.len
        try:
            if plen > RS_MAX_PROPERTIES_LENGTH:
                raise PropertiesTooLargeError(
                    f"properties are {plen} bytes encoded; the limit is {RS_MAX_PROPERTIES_LENGTH}")
            if lengths is not None:
                lens_arr = batch_lengths(lengths)
                n = lens_arr.shape[0]
                lens_view = lens_arr
                bodies = contiguous(bodies, "bodies")
                PyObject_GetBuffer(bodies, &whole, PyBUF_SIMPLE)
                have_whole = True
                starts_arr = np.empty(n, dtype=np.int64)
                starts = starts_arr
                for i in range(n):
                    if lens_view[i] < 0:
                        raise InvalidMessageError(f"lengths[{i}] is negative")
                    starts[i] = total
                    total += lens_view[i]
                if total != whole.len:
                    raise InvalidMessageError(
                        f"lengths sum to {total} but the bodies buffer holds {whole.len} bytes")
            else:
                if not isinstance(bodies, (list, tuple)):
                    bodies = list(bodies)
                n = len(bodies)
                bufs = <Py_buffer *>malloc(sizeof(Py_buffer) * max(n, 1))
                if bufs == NULL:
                    raise MemoryError()
                lens_arr = np.empty(n, dtype=np.int64)
                lens_view = lens_arr
                for i in range(n):
                    item = bodies[i]
                    if not PyBytes_CheckExact(item):
                        copied = contiguous(item, "an item of bodies")
                        if copied is not item:     # kept alive with the batch's buffers
                            copies = [] if copies is None else copies
                            copies.append(copied)
                            item = copied
                    PyObject_GetBuffer(item, &bufs[i], PyBUF_SIMPLE)
                    nbufs += 1
                    lens_view[i] = bufs[i].len

            # Validate everything before the first byte is written.
            if plen + 9 + 2 * uniq_len + 1 + self._prop_crc_extra(NULL, 0, False) > RS_MAX_PROPERTIES_LENGTH:
                raise PropertiesTooLargeError("properties plus UNIQ_KEY exceed 32767 bytes")
            rec_lens_arr = np.empty(n, dtype=np.int64)
            rec_lens = rec_lens_arr
            for i in range(n):
                blen = lens_view[i]
                if blen > self._max_message_size:
                    raise MessageTooLargeError(
                        f"bodies[{i}] of {blen} bytes exceeds max_message_size {self._max_message_size}")
                length = rs_record_length(
                    <int32_t>blen, len(t.name),
                    <int32_t>(plen + 9 + 2 * uniq_len + 1 + self._prop_crc_extra(NULL, 0, False)),
                    sys_flag | self._host_sysflag, RS_MAGIC_V1)
                if length < 0 or length > self._max_message_size or length + RS_END_FILE_MIN_BLANK > self._file_size:
                    raise MessageTooLargeError(
                        f"record {i} exceeds max_message_size {self._max_message_size}"
                        if length <= self._max_message_size else
                        f"record {i} of {length} bytes cannot fit a {self._file_size}-byte segment")
                rec_lens[i] = length
            if plen + 9 + 2 * uniq_len + 1 + self._prop_crc_extra(NULL, 0, False) > RS_MAX_PROPERTIES_LENGTH:
                raise PropertiesTooLargeError("properties plus UNIQ_KEY exceed 32767 bytes")
            qid = self._choose_queue(t, queue_id)

            crcs_arr = np.empty(n, dtype=np.int32)
            crcs = crcs_arr
            for i in range(n):
                bp = <const uint8_t *>whole.buf + starts[i] if have_whole else <const uint8_t *>bufs[i].buf
                crcs[i] = rs_body_crc(bp, lens_view[i])

            res = BatchPutResult.__new__(BatchPutResult)
            offsets_arr = np.empty(n, dtype=np.int64)
            qoff_arr = np.empty(n, dtype=np.int64)
            times_arr = np.empty(n, dtype=np.int64)
            sizes_arr = np.empty(n, dtype=np.int32)
            uniq_arr = np.empty((n, uniq_len), dtype=np.uint8)
            c_offsets = offsets_arr
            c_qoffsets = qoff_arr
            c_times = times_arr
            c_sizes = sizes_arr
            if n:
                uniq = uniq_arr
            scratch = PutResult.__new__(PutResult)
            self._lock_append()
            try:
                self._check_open()
                refused = self._reserve_or_refuse(rec_lens, wait, -1)
                if refused is not None:
                    return refused
                (<BatchPutResult>res).first_queue_offset = t.next_offsets[qid]
                for i in range(n):
                    bp = <const uint8_t *>whole.buf + starts[i] if have_whole else <const uint8_t *>bufs[i].buf
                    end = self._append(t, qid, bp, <int32_t>lens_view[i], crcs[i], pp, <int32_t>plen,
                                       None, flag, born_timestamp, sys_flag, 0, 0, scratch)
                    c_offsets[i] = scratch.commitlog_offset
                    c_sizes[i] = scratch.size
                    c_qoffsets[i] = scratch.queue_offset
                    c_times[i] = scratch.store_timestamp
                    memcpy(&uniq[i, 0], scratch._uniq_raw, uniq_len)
            finally:
                self._unlock_append()
        finally:
            if have_p:
                PyBuffer_Release(&pview)
            if have_whole:
                PyBuffer_Release(&whole)
            for i in range(nbufs):
                PyBuffer_Release(&bufs[i])
            free(bufs)

        cdef BatchPutResult br = <BatchPutResult>res
        br._status = PUT_OK
        br.topic = topic
        br.queue_id = qid
        br.commitlog_offsets = offsets_arr
        br.sizes = sizes_arr
        br.queue_offsets = qoff_arr
        br.store_timestamps = times_arr
        br._uniq_raw = uniq_arr
        br._host = self._store_host
        br._port = self._store_port
        if n == 0:
            return br
        return self._finish(br, end, wait)

    def put_many(self, list items not None, int wait=-1):
        """Append records of any topics under one lock. Each item is a tuple
        ``(topic, body, properties, queue_id, flag, born_timestamp, sys_flag, reconsume_times,
        unique_key)``. Everything is validated before the first byte is written."""
        cdef Py_ssize_t n = len(items), i
        cdef list topics = [], qids = [], crcs = [], results = []
        cdef _Topic t
        cdef int64_t end = 0
        cdef bytes body, props
        cdef int64_t[::1] rec_lens
        self._check_open()
        if rs_serve_waiting() > 0:  # a joined writer's call waits for the GIL (serve.h)
            with nogil:
                rs_serve_yield()
        if self._refusal is not None:
            return self._not_stored(SERVICE_NOT_AVAILABLE, self._refused(), wait, n)
        rec_lens_arr = np.empty(n, dtype=np.int64)
        rec_lens = rec_lens_arr
        for i in range(n):
            item = items[i]
            topic, body, props, queue_id, flag, born_ts, sys_flag, reconsume, unique_key = item
            t = self._topic(topic)
            topics.append(t)
            qids.append(self._choose_queue(t, queue_id))
            if len(body) > self._max_message_size:
                raise MessageTooLargeError(
                    f"message {i}: body of {len(body)} bytes exceeds max_message_size {self._max_message_size}")
            extra = 0 if unique_key is not None else 9 + 2 * (self._uniq_prefix_len + 6) + 1
            extra += self._prop_crc_extra(<const uint8_t *>PyBytes_AS_STRING(props), len(props),
                                          unique_key is not None)
            if len(props) + extra > RS_MAX_PROPERTIES_LENGTH:
                raise PropertiesTooLargeError(f"message {i}: properties exceed 32767 bytes")
            length = rs_record_length(len(body), len(t.name), len(props) + extra,
                                      sys_flag | self._host_sysflag, RS_MAGIC_V1)
            if length < 0 or length > self._max_message_size:
                raise MessageTooLargeError(f"message {i}: record exceeds max_message_size {self._max_message_size}")
            if length + RS_END_FILE_MIN_BLANK > self._file_size:
                raise MessageTooLargeError(
                    f"message {i}: record of {length} bytes cannot fit a {self._file_size}-byte segment")
            rec_lens[i] = length
            crcs.append(rs_body_crc(<const uint8_t *>PyBytes_AS_STRING(body), len(body)))
        self._check_open()
        self._lock_append()
        try:
            self._check_open()
            refused = self._reserve_or_refuse(rec_lens, wait, n)
            if refused is not None:
                return refused
            for i in range(n):
                topic, body, props, queue_id, flag, born_ts, sys_flag, reconsume, unique_key = items[i]
                r = PutResult.__new__(PutResult)
                end = self._append(<_Topic>topics[i], qids[i], <const uint8_t *>PyBytes_AS_STRING(body),
                                   len(body), crcs[i], <const uint8_t *>PyBytes_AS_STRING(props), len(props),
                                   unique_key, flag, born_ts, sys_flag, reconsume, 0, <PutResult>r)
                results.append(r)
        finally:
            self._unlock_append()
        return self._finish_many(results, end, wait)

    def put_plain_messages(self, list messages not None, user_topics not None, int wait=-1):
        """:meth:`put_many` of a batch of plain :class:`rocketstore.Message` objects, read and
        encoded here in one pass: each an exact Message of a topic in ``user_topics`` (already
        checked), a bytes body, tags, keys and properties of the plain shape (as
        :meth:`put_keyed` takes them: no special property name), sys_flag and reconsume_times
        0, queue id, flag and born timestamp exact ints in range. None, having written nothing,
        when the batch is empty or any message is not plain, or a record would not fit: the
        caller then takes the general path (which stores the batch or raises the error)."""
        cdef Py_ssize_t n = len(messages), i, at = 0, cap = 0, plen
        cdef _PlainRow *rows = NULL
        cdef uint8_t *props = NULL
        cdef uint8_t *grown
        cdef int64_t x = 0
        cdef int64_t end = 0, length
        cdef int64_t[::1] rec_lens
        cdef int extra
        cdef list keep, topics, results
        cdef _Topic t
        cdef PutResult r
        cdef _PlainRow *row
        cdef Message cm
        if n == 0:
            return None
        self._check_open()
        if rs_serve_waiting() > 0:  # a joined writer's call waits for the GIL (serve.h)
            with nogil:
                rs_serve_yield()
        if self._refusal is not None:
            return None
        rows = <_PlainRow *>PyMem_Malloc(n * sizeof(_PlainRow))
        if rows == NULL:
            raise MemoryError()
        keep = [None] * (2 * n)     # every topic and body read, alive until the records are written
        try:
            # 1. every message plain? Its fields read, checked, its properties encoded into one
            #    buffer (nothing here lets another thread run: what is read is what gets written)
            for i in range(n):
                m = messages[i]
                row = &rows[i]
                if type(m) is Message and (<Message>m)._unset == 0:
                    cm = <Message>m
                    topic, body, props_of, tags, keys = cm._topic, cm._body, cm._properties, cm._tags, cm._keys
                    queue_id, flag, born = cm._queue_id, cm._flag, cm._born_timestamp
                    sys_flag, reconsume = cm._sys_flag, cm._reconsume_times
                elif type(m) is _PLAIN_MESSAGE:
                    try:
                        topic, body, props_of, tags, keys = m.topic, m.body, m.properties, m.tags, m.keys
                        queue_id, flag, born = m.queue_id, m.flag, m.born_timestamp
                        sys_flag, reconsume = m.sys_flag, m.reconsume_times
                    except AttributeError:      # a field left unset
                        return None
                else:       # (a subclass may read its fields its own way)
                    return None
                if not PyUnicode_CheckExact(topic) or not PySet_Contains(user_topics, topic):
                    return None
                if not PyBytes_CheckExact(body) or PyBytes_GET_SIZE(body) > self._max_message_size:
                    return None
                keep[2 * i] = topic
                keep[2 * i + 1] = body
                row.body = <const uint8_t *>PyBytes_AS_STRING(body)
                row.body_len = <int32_t>PyBytes_GET_SIZE(body)
                if not _int_in(queue_id, -1, INT32_MAX, &x):
                    return None
                row.queue_id = <int32_t>x
                if not _int_in(flag, INT32_MIN, INT32_MAX, &x):
                    return None
                row.flag = <int32_t>x
                if not _int_in(born, INT64_MIN, INT64_MAX, &row.born):
                    return None
                if not _int_in(sys_flag, 0, 0, &x) or not _int_in(reconsume, 0, 0, &x):
                    return None
                plen = _props_length(tags, keys, props_of)
                if plen < 0:
                    return None
                if at + plen > cap:
                    cap = max(2 * cap, at + plen, 64 * n)
                    grown = <uint8_t *>PyMem_Realloc(props, cap)
                    if grown == NULL:
                        raise MemoryError()
                    props = grown
                row.props_at = at
                row.props_len = <int32_t>_props_write(tags, keys, props_of, props + at)
                at += plen
            # 2. their topics, queues and record lengths, in put_many's order and with its errors
            rec_lens_arr = np.empty(n, dtype=np.int64)
            rec_lens = rec_lens_arr
            topics = [None] * n
            extra = UNIQ_NAME_LEN + 2 * (self._uniq_prefix_len + 6) + 1   # the UNIQ_KEY generated
            for i in range(n):
                row = &rows[i]
                t = self._topic(keep[2 * i])
                topics[i] = t
                row.queue_id = self._choose_queue(t, row.queue_id)
                plen = row.props_len + extra + self._prop_crc_extra(props + row.props_at, row.props_len, False)
                length = rs_record_length(row.body_len, len(t.name), <int32_t>plen,
                                          self._host_sysflag, RS_MAGIC_V1)
                if (plen > RS_MAX_PROPERTIES_LENGTH or length < 0 or length > self._max_message_size
                        or length + RS_END_FILE_MIN_BLANK > self._file_size):
                    return None
                rec_lens[i] = length
                row.crc = rs_body_crc(row.body, row.body_len)
            # 3. stored whole or not at all, as put_many
            results = [None] * n
            self._check_open()
            self._lock_append()
            try:
                self._check_open()
                refused = self._reserve_or_refuse(rec_lens, wait, n)
                if refused is not None:
                    return refused
                for i in range(n):
                    row = &rows[i]
                    r = PutResult.__new__(PutResult)
                    end = self._append(<_Topic>topics[i], row.queue_id, row.body, row.body_len, row.crc,
                                       props + row.props_at, row.props_len, None, row.flag, row.born,
                                       0, 0, 0, r)
                    results[i] = r
            finally:
                self._unlock_append()
        finally:
            PyMem_Free(rows)
            PyMem_Free(props)
        return self._finish_many(results, end, wait)

    # ---- flushing, state ----

    @property
    def wrote_offset(self):
        if self._share != NULL and self._share_owner and not self._closed:
            self.sync_shared()   # the others' records are the owner's to dispatch
        return rs_flusher_wrote(self._flusher)

    @property
    def flushed_offset(self):
        return rs_flusher_flushed(self._flusher)

    @property
    def last_store_timestamp(self):
        """Store timestamp of the last record appended by this core (0 if none)."""
        return self._last_store_ts

    @property
    def active_segment(self):
        """(start offset, write position) of the segment appends go to."""
        return self._file_from, self._pos

    def wait_flushed(self, int64_t offset, int64_t timeout_ms=-1):
        """Block (GIL released) until ``offset`` is flushed: 0, 1 on timeout, or an errno."""
        return self._wait(offset, timeout_ms)

    def flush(self, int64_t timeout_ms=-1):
        """Flush everything written so far; True when done within ``timeout_ms``."""
        return self._wait(self.wrote_offset, timeout_ms) == 0

    def request_flush(self, int64_t offset):
        """Ask the flush thread to flush up to ``offset`` now, without waiting for it (a later
        ``wait_flushed`` finds it done or under way)."""
        if self._flusher != NULL:
            rs_flusher_request(self._flusher, offset)

    def stats(self):
        cdef rs_flusher_stats s
        self._check_open()
        rs_flusher_get_stats(self._flusher, &s)
        return {
            "puts": self.puts,
            "durable_waits": self.durable_waits,
            "refused_puts": self.refused_puts,
            "flush_rounds": s.flush_rounds,
            "flushed_bytes": s.flushed_bytes,
            "sync_requests": s.sync_requests,
            "sync_timeouts": s.sync_timeouts,
            "prefaulted_bytes": s.prefaulted_bytes,
            "wrote_offset": s.wrote,
            "flushed_offset": s.flushed,
            "last_flush_errno": s.last_errno,
            "last_prefault_errno": s.prefault_errno,
        }

    def _watcher_add(self, future, fn):
        if self._watcher is None:
            self._watcher = FlushWatcher(self)
        self._watcher.add(future, fn)

    def close(self):
        """Flush everything, stop the threads and release every segment pin."""
        if self._closed:
            return
        _acquire(self._lock)
        self._closed = True
        PyThread_release_lock(self._lock)
        with nogil:
            rs_flusher_wait_nogil(self._flusher, rs_flusher_wrote(self._flusher), -1)
        if self._watcher is not None:
            self._watcher.close()
        for start in list(self._pins):
            self.release_segment(start)
        self._base = NULL
        self._notify()
        self._live_page = NULL
        self._live = None
        with nogil:
            # Threads stop after a last full flush; the struct lives on until __dealloc__, so a
            # thread still inside a wait (it holds a reference to self) returns safely.
            rs_flusher_stop(self._flusher)

    @property
    def closed(self):
        return self._closed


# ---- puts at the engine's speed: MessageStore.put's common shapes in one compiled call ----


cdef object _put_keyed(CommitLogCore core, topic, body, tags, keys, properties, int queue_id, int32_t flag,
                       int wait):
    """``core.put_keyed(...)``: None, having done nothing, when tags, keys and properties are not
    the plain shape; else the put's result (see CommitLogCore.put_keyed)."""
    cdef uint8_t small[KEYED_SMALL]
    cdef uint8_t *props = small
    cdef Py_ssize_t plen = _props_length(tags, keys, properties)
    if plen < 0:
        return None
    if plen > KEYED_SMALL:
        props = <uint8_t *>PyMem_Malloc(plen)
        if props == NULL:
            raise MemoryError()
    try:
        # encoded before anything can release the GIL: another thread cannot change them
        _props_write(tags, keys, properties, props)
        return core._put_one(topic, body, props, plen, queue_id, flag, 0, 0, 0, 0, None, wait)
    finally:
        if props != small:
            PyMem_Free(props)


cdef class PutFront:
    """A writing store's ``put`` (rocketstore.store installs ``PutFront(...).put`` as the
    store's ``put``): the common shapes, ``put(topic, body)`` and ``put(topic, body, tags=...,
    keys=..., properties={...})`` of a topic already checked, go straight into the core in this
    one call; every
    other call (another shape, bad input, a closed core) is ``general(store, ...)``, which is
    :meth:`rocketstore.MessageStore.put` itself. Nothing else differs: the same core calls
    with the same arguments as that method's own fast paths. ``put_pipelined`` is the same for
    the store's ``put_pipelined`` (``general_pipelined``), a future in place of the result."""
    cdef CommitLogCore _core
    cdef set _user_topics            # the store's own set (MessageStore._user_topics), not a copy
    cdef object _store_ref           # weakref to the store: the front lives in its __dict__
    cdef object _general
    cdef object _general_pipelined

    def __init__(self, CommitLogCore core not None, set user_topics not None, store_ref, general,
                 general_pipelined):
        self._core = core
        self._user_topics = user_topics
        self._store_ref = store_ref
        self._general = general
        self._general_pipelined = general_pipelined

    @cython.binding(True)   # a function inspect.signature() reads, as it read MessageStore.put
    def put(self, topic, body=None, *, tags=None, keys=None, properties=None, queue_id=-1, flag=0,
            durable=None, delay_level=None, deliver_at_ms=None, delay_ms=None, compress=None):
        """Store one message; see :meth:`rocketstore.MessageStore.put`."""
        cdef int64_t qid = 0, flg = 0
        cdef int wait
        cdef CommitLogCore core = self._core
        if (PyUnicode_CheckExact(topic) and body is not None and compress is None
                and delay_level is None and deliver_at_ms is None and delay_ms is None
                and not core._closed and PySet_Contains(self._user_topics, topic)
                and _int_in(queue_id, -1, INT32_MAX, &qid) and _int_in(flag, INT32_MIN, INT32_MAX, &flg)):
            if durable is None:
                wait = -1                # the store's flush_disk_type decides
            elif durable is True:
                wait = 1
            elif durable is False:
                wait = 0
            else:
                wait = -2                # any other object: the general path reads its truth
            if wait != -2:
                if tags is None and keys is None and properties is None:
                    return core._put_one(topic, body, NULL, 0, <int>qid, <int32_t>flg, 0, 0, 0, 0, None, wait)
                done = _put_keyed(core, topic, body, tags, keys, properties, <int>qid, <int32_t>flg, wait)
                if done is not None:
                    return done
        store = self._store_ref()
        if store is None:
            raise StoreClosedError("the store is closed")
        return self._general(store, topic, body, tags=tags, keys=keys, properties=properties,
                             queue_id=queue_id, flag=flag, durable=durable, delay_level=delay_level,
                             deliver_at_ms=deliver_at_ms, delay_ms=delay_ms, compress=compress)

    @cython.binding(True)
    def put_pipelined(self, topic, body=None, *, tags=None, keys=None, properties=None,
                      queue_id=-1, flag=0, delay_level=None, deliver_at_ms=None, delay_ms=None):
        """Store one message durably without blocking; see
        :meth:`rocketstore.MessageStore.put_pipelined`. The shapes :meth:`put` takes in one call
        do here too, with a future; every other call is ``general_pipelined(store, ...)``."""
        cdef int64_t qid = 0, flg = 0
        cdef CommitLogCore core = self._core
        if (PyUnicode_CheckExact(topic) and body is not None
                and delay_level is None and deliver_at_ms is None and delay_ms is None
                and not core._closed and PySet_Contains(self._user_topics, topic)
                and _int_in(queue_id, -1, INT32_MAX, &qid) and _int_in(flag, INT32_MIN, INT32_MAX, &flg)):
            if tags is None and keys is None and properties is None:
                return core._put_one(topic, body, NULL, 0, <int>qid, <int32_t>flg, 0, 0, 0, 0, None, 2)
            # through the core's method, not _put_keyed itself: a third call site of that
            # function cost put's keyed path ~6 % (measured), however the compiler laid it out
            done = core.put_keyed(topic, body, tags, keys, <int>qid, <int32_t>flg, 2, properties)
            if done is not None:
                return done
        store = self._store_ref()
        if store is None:
            raise StoreClosedError("the store is closed")
        return self._general_pipelined(store, topic, body, tags=tags, keys=keys, properties=properties,
                                       queue_id=queue_id, flag=flag, delay_level=delay_level,
                                       deliver_at_ms=deliver_at_ms, delay_ms=delay_ms)
