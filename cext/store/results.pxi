# What a put answers: PutResult, BatchPutResult and PutFuture (a durable put in flight).
# Part of rocketstore.log._store: included by cext/_store.pyx, whose imports and
# constants it uses.

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
            rc = _wait(self._core, self.target, wait_ms if wait_ms > 0 else 0)
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
