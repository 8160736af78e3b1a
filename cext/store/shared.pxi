# The shared append table (rocketstore.log.sharedappend): appending under it, adopting what
# other processes appended, publishing the end and the queue offsets.
# (A joined writer looks whether the owner still lives at most every OWNER_LOOK_MS.)
# Part of rocketstore.log._store: included by cext/_store.pyx, whose imports and
# constants it uses.

cdef int _share_table(CommitLogCore core, table, int fd, uint64_t epoch, bint owner) except -1:
    """CommitLogCore.share."""
    cdef _LivePage pin = _LivePage(table)
    cdef uint8_t *t = <uint8_t *>pin.view.buf
    cdef _Topic top
    cdef int64_t at
    cdef int err
    if pin.view.len < RS_AP_SIZE or epoch == 0:
        raise ValueError("not a shared append table, or epoch 0")
    _check_open(core)
    _acquire(core._lock)
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
                rs_ap_i64(t, RS_AP_O_SEGMENT)[0] = core._file_size
                rs_ap_i64(t, RS_AP_O_END)[0] = core._file_from + core._pos
                rs_ap_i64(t, RS_AP_O_PUBLISHING)[0] = core._file_from + core._pos
                rs_ap_i64(t, RS_AP_O_LAST_TS)[0] = core._last_store_ts
                rs_ap_u32(t, RS_AP_O_REFUSING)[0] = core._refusal is not None
                for top in core._topics.values():
                    _share_topic(core, t, top, -1 if top.nqueues > RS_AP_QUEUES else top.nqueues)
                if core._queue_offsets_pending:
                    for name, qs in core._queue_offsets_pending.items():
                        at = rs_ap_add(t, <const uint8_t *>PyBytes_AS_STRING(name.encode()),
                                       len(name.encode()), 0)
                        if at >= 0:
                            for qid, nxt in qs.items():
                                if 0 <= qid < RS_AP_QUEUES:
                                    rs_ap_i64(t, at + RS_AP_E_NEXT + 8 * qid)[0] = nxt
                                    rs_ap_i64(t, at + RS_AP_E_COMMITTED + 8 * qid)[0] = nxt
                    core._queue_offsets_pending = None   # the table has them now
                rs_ap_u64(t, RS_AP_O_EPOCH)[0] = epoch
            elif (rs_ap_u64(t, RS_AP_O_MAGIC)[0] != RS_AP_MAGIC or rs_ap_u64(t, RS_AP_O_EPOCH)[0] != epoch
                  or rs_ap_i64(t, RS_AP_O_SEGMENT)[0] != core._file_size):
                raise StaleTable("the shared append table is not the owner's")
        finally:
            rs_ap_unlock(t)
        core._pid = <uint32_t>getpid()
        core._share = t
        core._share_pin = pin
        core._share_fd = fd
        core._epoch = epoch
        core._share_owner = owner
        core._dirty = []
    finally:
        PyThread_release_lock(core._lock)
    return 0


cdef int _share_topic(CommitLogCore core, uint8_t *t, _Topic top, int32_t nqueues) except -1:
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
    _attach_entry(t, top, at)
    return 0


cdef inline void _attach_entry(uint8_t *t, _Topic top, int64_t at) noexcept:
    top.next_offsets = rs_ap_i64(t, at + RS_AP_E_NEXT)
    top.committed = rs_ap_i64(t, at + RS_AP_E_COMMITTED)
    top.shared_nq = rs_ap_i32(t, at + RS_AP_E_NQUEUES)
    top.capacity = RS_AP_QUEUES
    top.dirty_lo = top.dirty_hi = -1


cdef int _lock_append(CommitLogCore core) except -1:
    """Take the append lock: this core's, and the shared table's (adopting what other
    processes appended meanwhile). Raises StaleTable, having taken nothing, when the
    table's epoch moved on."""
    cdef int err
    cdef uint8_t *t
    if core._fork_gen != rs_fork_generation:
        core._refuse_forked()  # (before the lock: a parent's thread may have held it at the fork)
    _acquire(core._lock)
    t = core._share
    if t == NULL:
        return 0
    if core._closed and not core._share_owner:
        PyThread_release_lock(core._lock)
        core._raise_closed()  # closed since the caller's look: its file is closed too
    with nogil:
        err = rs_ap_lock(t)
    if err:
        PyThread_release_lock(core._lock)
        raise OSError(err, "cannot lock the shared append table")
    try:
        if rs_ap_epoch(t) != core._epoch:
            raise StaleTable("the store's writing process is opening, closing or gone")
        if not core._share_owner:
            # the last append's time (no clock read per put; a writer that puts rarely looks
            # at its next put): the owner's presence lock, at most every OWNER_LOOK_MS
            now = core._last_store_ts
            if now - core._owner_seen_ms >= OWNER_LOOK_MS or now < core._owner_seen_ms:
                now = _now_ms()
                if not rs_ap_owner_present(core._share_fd):
                    raise StaleTable("the store's writing process is gone")
                core._owner_seen_ms = now
        if rs_ap_u32(t, RS_AP_O_BUSY)[0] != 0:
            rs_ap_repair(t)    # a writer died inside: its offsets and half-written bytes go
        core._adopt(rs_ap_i64(t, RS_AP_O_END)[0], rs_ap_i64(t, RS_AP_O_LAST_TS)[0])
        rs_ap_u32(t, RS_AP_O_BUSY)[0] = core._pid
    except BaseException:
        rs_ap_unlock(t)
        PyThread_release_lock(core._lock)
        raise
    return 0


cdef void _unlock_append(CommitLogCore core, bint unshare=False) noexcept:
    """Publish what this core appended (end, queue offsets) and let go of both locks
    (``unshare``: and append alone from now on)."""
    cdef uint8_t *t = core._share
    cdef int64_t end = core._file_from + core._pos
    cdef _Topic top
    cdef int q
    if t != NULL:
        # the end first, then the committed offsets, then the end published: a writer killed
        # in between is finished by the next (rs_ap_repair), so the committed offsets never
        # count a record past the published end
        _publish_fault(1)
        rs_ap_i64(t, RS_AP_O_LAST_TS)[0] = core._last_store_ts
        rs_ap_begin_publish(t, end)
        _publish_fault(2)
    if core._dirty:
        for top in core._dirty:
            for q in range(top.dirty_lo, top.dirty_hi + 1):
                top.committed[q] = top.next_offsets[q]
                if t != NULL:
                    _publish_fault(3)
            top.dirty_lo = top.dirty_hi = -1
        del core._dirty[:]
    if t != NULL:
        _publish_fault(4)
        if unshare:
            core._share = NULL
        rs_ap_set_end(t, end)
        _publish_fault(5)
        rs_ap_set_busy(t, 0)
        _publish_fault(6)
        _notify(core)     # under the lock: every twin publishes the live page's end in order
        rs_ap_unlock(t)
        PyThread_release_lock(core._lock)
        return
    PyThread_release_lock(core._lock)
    _notify(core)


cdef inline void _notify(CommitLogCore core) noexcept:
    cdef uint64_t dirty = core._live_dirty
    if core._live_page != NULL:
        core._live_dirty = 0
        rs_live_publish_slots(core._live_page, rs_flusher_wrote(core._flusher), dirty)


cdef int _adopt_end(CommitLogCore core, int64_t end, int64_t last_ts) except -1:
    """Move to ``end``, where the table says whole records end (other processes appended)."""
    cdef int64_t start
    if last_ts > core._last_store_ts:
        core._last_store_ts = last_ts
    if end == core._file_from + core._pos:
        return 0
    start = end - end % core._file_size
    if start != core._file_from or core._base == NULL:
        if core._share_owner:
            # the owner adopts every segment up to it, and flushes the others' records too
            # (its checkpoint vouches for them)
            mm, fd = core._roll(start)
            _pin(core, mm, start, fd)
            core.release_flushed_segments()
        core._base = NULL              # the next append maps it (_roll_segment)
        core._file_from = start
        core._pos = end - start
    else:
        core._pos = end - start
    rs_flusher_publish(core._flusher, end)
    return 0


cdef int _unshare(CommitLogCore core) except -1:
    """CommitLogCore.unshare."""
    if core._share == NULL:
        return 0
    _lock_append(core)
    rs_ap_u64(core._share, RS_AP_O_EPOCH)[0] = 0
    _unlock_append(core, True)
    return 0


cdef int _sync_shared(CommitLogCore core) except -1:
    """CommitLogCore.sync_shared."""
    if core._share == NULL or core._closed:
        return 0
    if rs_ap_end(core._share) == core._file_from + core._pos:
        return 0
    _lock_append(core)
    _unlock_append(core)
    return 0
