# POP: one ack in one call, the reentrant lock, receipt handles and checkpoints.
# Part of rocketstore.format._codec: included by cext/_codec.pyx, whose imports and
# constants it uses.

# ---- acknowledgement per message (POP): one ack in one call (rocketstore.services.pop) ----

__all__ += [
    "PopLane", "PopAcker", "POP_SNAPSHOT_CHECK_EVERY", "receipt_handles", "checkpoint_run", "reconsume_times",
    "received_rows",
]

cdef extern from "Python.h":
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    void *PyUnicode_DATA(object o)
    bint PyUnicode_IS_ASCII(object o)

import heapq as _heapq
import weakref as _weakref

from cpython.weakref cimport PyWeakref_GetObject
from rocketstore.errors import StoreClosedError as _StoreClosedError

from rocketstore.errors import FlushTimeoutError as _FlushTimeoutError

#: (the pure twin's docstring) once every this many single acks, the snapshot check
POP_SNAPSHOT_CHECK_EVERY = 64

cdef enum:
    _ACK_MAX_DIGITS = 18        # a longer decimal may not fit an int64: int() parses it


cdef inline Py_ssize_t _ack_digits(const char *text, Py_ssize_t end, int64_t *value) noexcept:
    """Read the run of ASCII digits ending just before ``end`` (1 to _ACK_MAX_DIGITS of them,
    preceded by a space at the returned index); -1 when ``text[:end]`` does not end that way."""
    cdef Py_ssize_t i = end
    cdef int64_t v = 0, scale = 1
    while i > 0 and 48 <= text[i - 1] <= 57:
        i -= 1
        if end - i > _ACK_MAX_DIGITS:
            return -1
        v += (text[i] - 48) * scale
        scale *= 10
    if i == end or i == 0 or text[i - 1] != 32:
        return -1
    value[0] = v
    return i - 1


cdef class PopLane:
    """(the pure twin's docstring, rocketstore.format._pop_py.PopLane) The compiled twin keeps
    ``committed`` and ``next`` as C integers, which its PopAcker reads and sets directly."""

    cdef public str group, topic, prefix, key
    cdef public int queue_id
    cdef public int64_t committed, next
    cdef public dict inflight
    cdef public list heap
    cdef public bytes ack_head, ack_tail

    def __init__(self, str group, str topic, int queue_id, int64_t start, str key):
        self.group = group
        self.topic = topic
        self.queue_id = queue_id
        self.prefix = f"{group} {topic} {queue_id}"
        self.key = key
        self.committed = start
        self.next = start
        self.inflight = {}
        self.heap = []
        self.ack_head = ('{"c":"%s","n":1,"q":%d,"so":' % (group, queue_id)).encode()
        self.ack_tail = (',"t":"%s"}' % topic).encode()

    def compact(self):
        """(the pure twin's docstring) The compiled twin compares each offset's in-flight
        (deadline, number) with the entry's field by field, making no tuple."""
        cdef dict inflight = self.inflight
        cdef list live = [], keep_o, keep_n
        cdef tuple entry, offsets, numbers
        cdef object deadline, now
        cdef Py_ssize_t i, n
        if not inflight:
            self.heap = []
            return
        for e in self.heap:
            entry = <tuple?>e
            deadline, offsets, numbers = entry[0], <tuple?>entry[2], <tuple?>entry[3]
            n = len(offsets)
            if len(numbers) != n:
                raise ValueError("a heap entry's offsets and numbers differ in length")
            keep_o = []
            keep_n = []
            for i in range(n):
                now = inflight.get(offsets[i])
                if now is not None and (<tuple?>now)[0] == deadline and (<tuple>now)[1] == numbers[i]:
                    keep_o.append(offsets[i])
                    keep_n.append(numbers[i])
            if len(keep_o) == n:
                live.append(entry)
            elif keep_o:
                live.append((deadline, entry[1], tuple(keep_o), tuple(keep_n)))
        _heapq.heapify(live)
        self.heap = live

    def take_run(self, Py_ssize_t want, int64_t deadline, object seq):
        """(the pure twin's docstring) The compiled twin fills the map in one C loop."""
        cdef int64_t start = self.next, o
        cdef Py_ssize_t i
        cdef list offsets
        cdef dict inflight = self.inflight
        cdef tuple stamp, numbers
        cdef object key
        if want <= 0:
            raise ValueError("a run hands out at least one offset")
        stamp = (deadline, 0)
        offsets = [None] * want
        for i in range(want):
            o = start + i
            key = o
            offsets[i] = key
            inflight[key] = stamp
        numbers = (0,) * want
        self.next = start + want
        _heapq.heappush(self.heap, (deadline, seq, tuple(offsets), numbers))
        return offsets, numbers, stamp

    def advance(self):
        """(the pure twin's docstring)"""
        cdef int64_t before = self.committed, c
        cdef dict inflight = self.inflight
        if not inflight:
            self.committed = self.next
        else:
            c = self.committed
            while c < self.next and c not in inflight:
                c += 1
            self.committed = c
        return self.committed != before


# ---------------------------------------------------------------------------------------------
# FastRLock: the POP service's and the offsets table's reentrant lock (an ack takes each once)

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    int pthread_mutex_init(pthread_mutex_t *m, const void *attr)
    int pthread_mutex_destroy(pthread_mutex_t *m)
    int pthread_mutex_lock(pthread_mutex_t *m)
    int pthread_mutex_trylock(pthread_mutex_t *m)
    int pthread_mutex_unlock(pthread_mutex_t *m)

# A wait for a mutex of at most ``timeout`` seconds, timed on the monotonic clock (a step of the
# wall clock neither cuts it short nor stretches it): 0 once held, else an errno.
cdef extern from *:
    """
    #include <errno.h>
    #include <pthread.h>
    #include <time.h>
    static int rs_mutex_lock_for(pthread_mutex_t *m, double timeout) {
        struct timespec until;
        double whole = (double)(long)timeout;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += (long)whole;
        until.tv_nsec += (long)((timeout - whole) * 1e9);
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec += 1;
            until.tv_nsec -= 1000000000L;
        }
    #if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 30))
        return pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &until);
    #else
        for (;;) {   /* no clocked wait here: try, and sleep 50 us between tries */
            struct timespec now, nap = {0, 50000};
            int rc = pthread_mutex_trylock(m);
            if (rc != EBUSY)
                return rc;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (now.tv_sec > until.tv_sec || (now.tv_sec == until.tv_sec && now.tv_nsec >= until.tv_nsec))
                return ETIMEDOUT;
            nanosleep(&nap, NULL);
        }
    #endif
    }
    """
    int rs_mutex_lock_for(pthread_mutex_t *m, double timeout) nogil

cdef extern from "pythread.h":
    unsigned long PyThread_get_thread_ident()


cdef class FastRLock:
    """A reentrant lock with ``threading.RLock``'s ``acquire(blocking=True)``, ``release()`` and
    context manager, for locks taken on every single ack: Python 3.11's RLock parses its
    arguments and reads the monotonic clock on every acquire (about 100 ns a round trip from C);
    this one tries its mutex first and, only when another thread holds it, waits with the GIL
    released. Its owner and count are only read and written with the GIL held. (The pure twin
    is ``threading.RLock`` itself.)"""
    cdef pthread_mutex_t _mutex
    cdef unsigned long _owner
    cdef Py_ssize_t _count

    def __cinit__(self):
        if pthread_mutex_init(&self._mutex, NULL) != 0:
            raise MemoryError("cannot make a mutex")

    def __dealloc__(self):
        pthread_mutex_destroy(&self._mutex)

    cdef bint take(self, bint blocking, double timeout=-1) except -1:
        cdef unsigned long me = PyThread_get_thread_ident()
        cdef int rc = 0
        if self._count and self._owner == me:
            self._count += 1
            return True
        if pthread_mutex_trylock(&self._mutex) != 0:
            if not blocking:
                return False
            if timeout < 0:
                with nogil:
                    pthread_mutex_lock(&self._mutex)
            else:
                with nogil:
                    rc = rs_mutex_lock_for(&self._mutex, timeout)
                if rc != 0:
                    return False
        self._owner = me
        self._count = 1
        return True

    cdef int give(self) except -1:
        if not self._count or self._owner != PyThread_get_thread_ident():
            raise RuntimeError("cannot release un-acquired lock")
        self._count -= 1
        if not self._count:
            self._owner = 0
            pthread_mutex_unlock(&self._mutex)
        return 0

    def acquire(self, blocking=True, timeout=-1):
        """As ``threading.RLock.acquire``: True once held, False when not (non-blocking, or
        ``timeout`` seconds passed)."""
        cdef double seconds = timeout
        if not blocking and seconds != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        if seconds < 0 and seconds != -1:
            raise ValueError("timeout value must be a non-negative number")
        return self.take(bool(blocking), seconds)

    def release(self):
        self.give()

    def __enter__(self):
        return self.take(True)

    def __exit__(self, *exc):
        self.give()

    def _is_owned(self):
        return bool(self._count) and self._owner == PyThread_get_thread_ident()


cdef object _CAREFUL = object()   # PopAcker._ack: this ack is the careful one's


cdef class PopAcker:
    """(the pure twin's docstring, rocketstore.format._pop_py.PopAcker) The compiled twin does the
    common case itself, under the service's lock when that is a FastRLock: a handle (a str, or
    a ``received_type``) that ends in two runs of plain digits, of a lane of the service's
    ``by_prefix`` that handed that offset out, still under that delivery, once the revive
    topic exists and the open has replayed everything. It writes the ``bAck`` record of that
    one offset (the lane's ``ack_head`` + the offset's digits + ``ack_tail``: what
    ``PopService._finish`` writes for it) through the CommitLog core's ``put``, and applies it
    as ``_finish`` does (the lane's in-flight map and lowest un-acked offset, the group's
    committed offset set as ``ConsumerOffsetTable.commit_key`` sets it, under the table's lock,
    the heap's compaction), then, every ``POP_SNAPSHOT_CHECK_EVERY``-th such ack while the
    service writes periodic snapshots, calls ``periodic(service)``. Every other call goes to
    ``careful`` before anything is written: other handles, an unknown lane, a message finished
    or handed out again; so both twins give the same answer and raise the same errors for the
    same handles."""

    cdef object _service_ref, _careful, _periodic, _received_type
    cdef int _countdown
    cdef object _by_prefix, _commitlog, _topic, _props, _offsets
    cdef FastRLock _lock, _offsets_lock   # the same locks when they are FastRLocks (else None)
    cdef int64_t _compact_slack
    # the lane of the last handle (lanes stay in the service's by_prefix for good): a handle
    # of the same lane is matched by comparing its prefix's bytes, not sliced and looked up
    cdef PopLane _last
    # flags of the service that only ever go one way, read until they have: the revive topic
    # exists (topic_ready), the open has replayed everything (not loading)
    cdef bint _ready, _loaded, _snapshots
    cdef public bint closed

    def __init__(self, service, received_type, careful, periodic, lock, offsets, commitlog):
        self._service_ref = _weakref.ref(service)  # the service holds this: no cycle
        self._careful, self._periodic = careful, periodic
        self._received_type = received_type
        self._countdown = POP_SNAPSHOT_CHECK_EVERY
        self._lock = lock if type(lock) is FastRLock else None
        self._offsets = offsets
        self._offsets_lock = offsets.lock if type(offsets.lock) is FastRLock else None
        self._by_prefix = service.by_prefix
        self._commitlog = commitlog
        self._topic, self._props = service.topic, service.ack_props
        self._compact_slack = service.COMPACT_SLACK
        self._last = None
        self._ready = self._loaded = False
        self._snapshots = bool(service.snapshot_interval_ms)  # set once, at the service's start

    def ack(self, handle):
        """Acknowledge one received message; see :meth:`rocketstore.MessageStore.ack`."""
        cdef object service = <object>PyWeakref_GetObject(self._service_ref)
        cdef FastRLock lock = self._lock
        if service is None or self.closed:
            raise _StoreClosedError("the store is closed")
        if lock is None:
            return self._careful(service, handle)
        lock.take(True)
        try:
            timeout = self._ack(service, handle)
        finally:
            lock.give()
        if timeout is None:
            return True
        if timeout is _CAREFUL:
            return self._careful(service, handle)
        raise timeout  # acknowledged, but not confirmed durable

    cdef object _ack(self, service, handle):
        """None: acknowledged; _CAREFUL: nothing done, the careful ack decides; else the put's
        FlushTimeoutError (the record is stored and applied)."""
        cdef object found = None, prefix, now, result, timeout = None
        cdef PopLane lane
        cdef dict inflight
        cdef bytes head, tail, body
        cdef const char *text
        cdef const char *last_text
        cdef char *p
        cdef char digits[24]
        cdef Py_ssize_t size = 0, i_number, i_offset, nd, k, last_size = 0
        cdef int64_t offset = 0, number = 0, committed, nxt
        if type(handle) is not str:
            if not isinstance(handle, self._received_type):
                return _CAREFUL
            handle = handle.handle
            if type(handle) is not str:
                return _CAREFUL
        if not self._ready:
            if not service.topic_ready:
                return _CAREFUL
            self._ready = True
        if not self._loaded:
            if service.loading:
                return _CAREFUL
            self._loaded = True
        try:
            text = PyUnicode_AsUTF8AndSize(handle, &size)
        except UnicodeError:
            return _CAREFUL
        i_number = _ack_digits(text, size, &number)
        if i_number <= 0:
            return _CAREFUL
        i_offset = _ack_digits(text, i_number, &offset)
        if i_offset < 0:
            return _CAREFUL
        if self._last is not None:
            last_text = PyUnicode_AsUTF8AndSize(self._last.prefix, &last_size)
            if last_size == i_offset and memcmp(text, last_text, i_offset) == 0:
                found = self._last
        if found is None:
            # the bytes after i_offset are ASCII: one character each
            prefix = handle[:len(handle) - (size - i_offset)]
            found = (<dict>self._by_prefix).get(prefix)
            if found is None:
                return _CAREFUL
            self._last = <PopLane?>found
        lane = <PopLane>found
        if offset >= lane.next:
            return _CAREFUL
        inflight = lane.inflight
        now = inflight.get(offset)
        if now is None or (<tuple?>now)[1] != number:
            return _CAREFUL
        head, tail = lane.ack_head, lane.ack_tail
        nd = 0
        k = offset
        while True:
            digits[nd] = <char>(48 + k % 10)
            nd += 1
            k //= 10
            if k == 0:
                break
        body = PyBytes_FromStringAndSize(NULL, len(head) + nd + len(tail))
        p = PyBytes_AS_STRING(body)
        memcpy(p, PyBytes_AS_STRING(head), len(head))
        p += len(head)
        while nd:
            nd -= 1
            p[0] = digits[nd]
            p += 1
        memcpy(p, PyBytes_AS_STRING(tail), len(tail))
        try:
            result = self._commitlog.core.put(self._topic, body, self._props, 0)  # the rest: defaults (0, None, -1)
        except _FlushTimeoutError as exc:  # stored; its flush did not confirm: apply, then return it
            timeout = exc
            result = exc.result
        service.log_next = result.queue_offset + 1
        del inflight[offset]
        committed = lane.committed
        if offset == committed or not inflight:
            nxt = lane.next
            if not inflight:
                committed = nxt
            else:
                while committed < nxt and committed not in inflight:
                    committed += 1
            if committed != lane.committed:
                lane.committed = committed
                self._commit(lane, committed)
        if len(lane.heap) > 2 * len(inflight) + self._compact_slack:
            lane.compact()
        if self._snapshots:
            self._countdown -= 1
            if self._countdown <= 0:
                self._countdown = POP_SNAPSHOT_CHECK_EVERY
                self._periodic(service)
        return timeout

    cdef _commit(self, PopLane lane, int64_t committed):
        cdef object previous, queue_id = lane.queue_id
        cdef dict offsets
        cdef FastRLock fast = self._offsets_lock
        if fast is not None:
            fast.take(True)
            try:
                offsets = (<dict>self._offsets.table).get(lane.key)
                if offsets is not None:
                    previous = offsets.get(queue_id)
                    if previous is not None and previous <= committed:
                        offsets[queue_id] = committed
                        self._offsets.dirty = True
                        return
            finally:
                fast.give()
        self._offsets.commit_key(lane.key, queue_id, committed)  # new, or a move back: logged


def receipt_handles(str prefix, list offsets, tuple numbers):
    """(the pure twin's docstring) The compiled twin writes each handle of an ASCII prefix and
    non-negative offsets and numbers into its str directly."""
    cdef Py_ssize_t n = len(offsets), i, plen, k
    cdef list out
    cdef object handle
    cdef char *p
    cdef char digits[48]
    cdef int64_t o, d
    if len(numbers) != n:
        raise ValueError("offsets and numbers differ in length")
    if not PyUnicode_IS_ASCII(prefix):
        return [f"{prefix} {o_} {n_}" for o_, n_ in zip(offsets, numbers)]
    plen = len(prefix)
    out = [None] * n
    for i in range(n):
        o = offsets[i]
        d = numbers[i]
        if o < 0 or d < 0:
            out[i] = f"{prefix} {offsets[i]} {numbers[i]}"
            continue
        digits[0] = 32
        k = 1 + _decimal(digits + 1, o)
        digits[k] = 32
        k += 1 + _decimal(digits + k + 1, d)
        handle = PyUnicode_New(plen + k, 127)
        p = <char *>PyUnicode_DATA(handle)
        memcpy(p, PyUnicode_DATA(prefix), plen)
        memcpy(p + plen, digits, k)
        out[i] = handle
    return out


cdef inline char *_put_text(char *p, const char *text, Py_ssize_t n) noexcept:
    memcpy(p, text, n)
    return p + n


cdef inline char *_put_decimal(char *p, const char *label, Py_ssize_t n, int64_t value) noexcept:
    memcpy(p, label, n)
    return p + n + _decimal(p + n, value)


def checkpoint_run(int64_t committed, str group, int64_t invisible, int64_t count, int64_t nxt,
                   int64_t now, int64_t queue_id, int64_t start, str topic):
    """(the pure twin's docstring) The compiled twin writes the digits and the names' UTF-8
    into one bytes object."""
    cdef Py_ssize_t glen = 0, tlen = 0
    cdef const char *g = PyUnicode_AsUTF8AndSize(group, &glen)
    cdef const char *t = PyUnicode_AsUTF8AndSize(topic, &tlen)
    # the labels' 54 bytes, the names, and at most 20 bytes for each of the seven numbers
    cdef char *buf = <char *>PyMem_Malloc(54 + glen + tlen + 7 * 20)
    cdef char *p
    if buf == NULL:
        raise MemoryError()
    try:
        p = _put_decimal(buf, b'{"b":', 5, committed)
        p = _put_text(p, b',"c":"', 6)
        p = _put_text(p, g, glen)
        p = _put_decimal(p, b'","it":', 7, invisible)
        p = _put_decimal(p, b',"n":', 5, count)
        p = _put_decimal(p, b',"nx":', 6, nxt)
        p = _put_decimal(p, b',"pt":', 6, now)
        p = _put_decimal(p, b',"q":', 5, queue_id)
        p = _put_decimal(p, b',"so":', 6, start)
        p = _put_text(p, b',"t":"', 6)
        p = _put_text(p, t, tlen)
        p = _put_text(p, b'"}', 2)
        return PyBytes_FromStringAndSize(buf, p - buf)
    finally:
        PyMem_Free(buf)


def reconsume_times(list messages):
    """(the pure twin's docstring) The compiled twin reads each MessageExt's C field."""
    cdef Py_ssize_t n = len(messages), i
    cdef list out = [None] * n
    for i in range(n):
        o = messages[i]
        if not isinstance(o, MessageExt):
            raise TypeError(f"the quick pull gave a {type(o).__name__}, not a MessageExt")
    for i in range(n):
        out[i] = (<MessageExt>messages[i]).reconsume_times
    return out


cdef extern from "Python.h":
    ctypedef struct PyTypeObject:
        pass
    object PyType_GenericAlloc(PyTypeObject *type, Py_ssize_t nitems)
    void PyTuple_SET_ITEM(object p, Py_ssize_t pos, object o)


def received_rows(type cls, list messages, list handles, list times):
    """(the pure twin's docstring, rocketstore.format._pop_py.received_rows) The compiled twin
    allocates each row as ``tuple.__new__`` does for a subclass with no ``__dict__`` and fills
    its three items, with no argument tuple in between."""
    cdef Py_ssize_t n = len(messages), i
    cdef list out
    cdef object row
    if len(handles) != n or len(times) != n:
        raise ValueError("messages, handles and times differ in length")
    if cls.__base__ is not tuple or cls.__dict__.get("__slots__", None) != ():
        raise TypeError(f"{cls.__name__} is not a namedtuple-like subclass of tuple")
    out = [None] * n
    for i in range(n):
        row = PyType_GenericAlloc(<PyTypeObject *>cls, 3)
        m, h, t = messages[i], handles[i], times[i]
        Py_INCREF(m)
        PyTuple_SET_ITEM(row, 0, m)
        Py_INCREF(h)
        PyTuple_SET_ITEM(row, 1, h)
        Py_INCREF(t)
        PyTuple_SET_ITEM(row, 2, t)
        out[i] = row
    return out
