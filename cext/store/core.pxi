# CommitLogCore: its fields and the methods Python calls; the work is in the files beside
# this one, as functions of the core (segments.pxi, topics.pxi, shared.pxi, append.pxi,
# batches.pxi, durability.pxi).
# Part of rocketstore.log._store: included by cext/_store.pyx, whose imports and
# constants it uses.

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
    cdef char _uniq_prefix_hex[44]   # its hex digits, as a UNIQ_KEY property starts
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
        check_core_args(file_size, store_host, born_host, uniq_prefix)   # before the copies below
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
        _hex_into(self._uniq_prefix_hex, self._uniq_prefix, self._uniq_prefix_len)
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

    # The cold paths of the hot functions (a segment to roll to, a topic new to the shared table,
    # what other processes appended, a new month for UNIQ_KEY, a closed or forked core): called
    # through the class's method table, which keeps them out of line. A function called from
    # one place is compiled into its caller, and these made put_batch's record loop ~5 % slower.

    cdef int _roll_segment(self) except -1:
        return _next_segment(self)

    cdef _Topic _shared_topic(self, topic, int nqueues):
        return _new_shared_topic(self, topic, nqueues)

    cdef int _adopt(self, int64_t end, int64_t last_ts) except -1:
        return _adopt_end(self, end, last_ts)

    cdef int64_t _month_roll(self, int64_t now) except -1:
        return _month_bounds(self, now)

    cdef int _raise_closed(self) except -1:
        return _closed_error(self)

    cdef int _refuse_forked(self) except -1:
        return _forked_error(self)

    def set_active(self, mm, int64_t file_from_offset, int64_t wrote_position, fd=None):
        """Make ``mm`` (a writable map of ``file_size`` bytes) the segment appends go to."""
        _set_active(self, mm, file_from_offset, wrote_position, fd)

    def set_live(self, page):
        """Publish where whole records end in ``page`` (the live page's map) after every put
        (the page already says where they end now)."""
        _check_open(self)
        self._live = _LivePage(page)
        self._live_page = <uint8_t *>self._live.view.buf

    def add_segment(self, mm, int64_t file_from_offset, fd=None):
        """Register a prepared next segment, so its first pages are pre-faulted before use."""
        if self._closed:
            return          # a segment prepared in the background after close: not needed
        if len(self._pins) >= RS_FLUSHER_MAX_SEGMENTS - 2:
            return          # pre-faulting is an optimisation: set_active pins it when needed
        _pin(self, mm, file_from_offset, fd)

    def release_segment(self, int64_t file_from_offset):
        """Stop flushing a segment and drop the pin on its map (flush it first)."""
        _release_segment(self, file_from_offset)

    def release_flushed_segments(self):
        """Release every segment wholly below the flushed offset, except the active one."""
        _release_flushed_segments(self)

    def reset(self, int64_t offset):
        """Set wrote = flushed = ``offset`` (after recovery); no segment is active afterwards."""
        self._base = NULL
        self._file_from = offset - offset % self._file_size
        self._pos = offset - self._file_from
        rs_flusher_reset(self._flusher, offset)

    def share(self, table, int fd, uint64_t epoch, bint owner):
        """Append under the shared append table ``table`` (its writable map; ``fd`` for the
        lock) from now on. The owner (``owner``) fills it with this core's end and queue
        offsets and gives it ``epoch``; a joined writer checks it holds ``epoch`` (StaleTable)."""
        _share_table(self, table, fd, epoch, owner)

    @property
    def shared(self):
        """Appending under a shared append table."""
        return self._share != NULL

    def unshare(self):
        """Append alone from now on (the owner closing): what the others appended is adopted,
        and the table's epoch becomes 0, so that no process appends through it any more."""
        _unshare(self)

    def sync_shared(self):
        """Adopt what other processes appended (the owner, before it dispatches or reads)."""
        _sync_shared(self)

    def set_queue_offset(self, str topic, int queue_id, int64_t next_offset):
        """Set the next queue offset of (topic, queue_id) (after recovery)."""
        _set_queue_offset(self, topic, queue_id, next_offset)

    def queue_offsets(self):
        """{(topic, queue_id): next queue offset} for every queue that has one."""
        return _queue_offsets(self)

    def forget_topic(self, str topic):
        """Take the new queue count of ``topic`` after it changed. The cached entry is changed
        in place under the append lock (never replaced: a put holding the old entry would hand
        out queue offsets again); its offsets are kept, also those of queues beyond a smaller
        count, which a put that chose its queue before the change may still use."""
        _forget_topic(self, topic)

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
            return _put_one(self, topic, body, pp, plen, queue_id, flag, born_timestamp, sys_flag,
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

    def put_inner_batch(self, topic, body not None, bytes props_before not None, bytes props_after not None,
                        int queue_id, int count, unique_key not None, int64_t born_timestamp=0, int wait=-1):
        """One RocketMQ 5.x inner batch record of ``count`` messages (sysFlag INNER_BATCH |
        NEED_UNWRAP, ``body`` their batch encoding) at the queue's next offset, which then moves
        by ``count``: the record's properties are ``props_before``, that offset in decimal (the
        INNER_BASE value, known only under the append lock), then ``props_after``; they must
        hold ``unique_key`` as UNIQ_KEY. Returns a PutResult (its queue offset the base) or a
        PutFuture, as :meth:`put`."""
        return _put_inner_batch(self, topic, body, props_before, props_after, queue_id, count, unique_key,
                                born_timestamp, wait)

    def put_batch(self, topic, bodies not None, lengths=None, properties=None,
                  int queue_id=-1, int32_t flag=0, int64_t born_timestamp=0, int32_t sys_flag=0,
                  int wait=-1):
        """Append many records of one topic and queue under one lock (consecutive queue offsets).

        ``bodies`` is a list/tuple of bytes-like objects, or one buffer cut into bodies by
        ``lengths`` (a sequence or array of non-negative ints summing to its size).
        ``properties`` (encoded bytes) are shared; each record gets its own UNIQ_KEY.
        """
        return _put_batch(self, topic, bodies, lengths, properties, queue_id, flag, born_timestamp, sys_flag, wait)

    def put_many(self, list items not None, int wait=-1):
        """Append records of any topics under one lock. Each item is a tuple
        ``(topic, body, properties, queue_id, flag, born_timestamp, sys_flag, reconsume_times,
        unique_key)``. Everything is validated before the first byte is written."""
        return _put_many(self, items, wait)

    def put_copies(self, rows not None, list topics not None, list items not None):
        """:meth:`put_many` of the copies a timer pass built as rows (the codec's
        ``timer_copy_rows``, in any buffer: one row per copy, ``topics`` the names its rows
        index), without a Python object per copy; a row with topic -1 stands for the next entry
        of ``items``, a
        put_many item or None (no copy). Validated whole before the first byte is written;
        returns ``(records written, the end offset of the last)``; the caller flushes."""
        return _put_copy_rows(self, rows, topics, items)

    def put_plain_messages(self, list messages not None, user_topics not None, int wait=-1):
        """:meth:`put_many` of a batch of plain :class:`rocketstore.Message` objects, read and
        encoded here in one pass: each an exact Message of a topic in ``user_topics`` (already
        checked), a bytes body, tags, keys and properties of the plain shape (as
        :meth:`put_keyed` takes them: no special property name), sys_flag and reconsume_times
        0, queue id, flag and born timestamp exact ints in range. None, having written nothing,
        when the batch is empty or any message is not plain, or a record would not fit: the
        caller then takes the general path (which stores the batch or raises the error)."""
        return _put_plain_messages(self, messages, user_topics, wait)

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
        return _wait(self, offset, timeout_ms)

    def flush(self, int64_t timeout_ms=-1):
        """Flush everything written so far; True when done within ``timeout_ms``."""
        return _wait(self, self.wrote_offset, timeout_ms) == 0

    def request_flush(self, int64_t offset):
        """Ask the flush thread to flush up to ``offset`` now, without waiting for it (a later
        ``wait_flushed`` finds it done or under way)."""
        if self._flusher != NULL:
            rs_flusher_request(self._flusher, offset)

    def stats(self):
        return _stats(self)

    def _watcher_add(self, future, fn):
        if self._watcher is None:
            self._watcher = FlushWatcher(self)
        self._watcher.add(future, fn)

    def close(self):
        """Flush everything, stop the threads and release every segment pin."""
        _close(self)

    @property
    def closed(self):
        return self._closed
