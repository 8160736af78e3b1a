# The core's topics and their queue offsets.
# Part of rocketstore.log._store: included by cext/_store.pyx, whose imports and
# constants it uses.

cdef _Topic _topic(CommitLogCore core, topic):
    cdef _Topic t = core._topics.get(topic)
    if t is not None:
        if t.shared_nq != NULL and t.shared_nq[0] > 0:
            t.nqueues = t.shared_nq[0]   # the owner changed the count
        return t
    nqueues = core._topic_lookup(topic)  # validates (InvalidTopicError); may switch threads
    if core._share != NULL:
        return core._shared_topic(topic, nqueues)
    t = _Topic.__new__(_Topic)
    t.name = topic.encode("utf-8")
    t.slot = rs_body_crc(<const uint8_t *>PyBytes_AS_STRING(t.name), PyBytes_GET_SIZE(t.name)) % RS_LIVE_SLOTS
    t.nqueues = nqueues
    t.capacity = max(1, nqueues)
    t.next_offsets = <int64_t *>malloc(sizeof(int64_t) * t.capacity)
    if t.next_offsets == NULL:
        raise MemoryError()
    memset(t.next_offsets, 0, sizeof(int64_t) * t.capacity)
    old = core._queue_offsets_pending.pop(topic, None) if core._queue_offsets_pending else None
    if old:
        for qid, nxt in old.items():
            if 0 <= qid < nqueues:
                t.next_offsets[qid] = nxt
    # Another thread may have created the entry while the lookup ran: keep the first one,
    # or the two would hand out the same queue offsets.
    return core._topics.setdefault(topic, t)


cdef _Topic _new_shared_topic(CommitLogCore core, topic, int nqueues):
    """The entry of the shared append table for a topic new to this core: found, or added.
    A topic the table cannot hold (full, too many queues, the owner's alone) is the owner's
    own (a joined writer raises NotShareable: its puts go to the owner)."""
    cdef bytes name = topic.encode("utf-8")
    cdef _Topic t
    cdef int64_t at
    cdef int err
    cdef uint8_t *tab = core._share
    _acquire(core._lock)
    try:
        t = core._topics.get(topic)
        if t is not None:
            return t
        with nogil:
            err = rs_ap_lock(tab)
        if err:
            raise OSError(err, "cannot lock the shared append table")
        try:
            if rs_ap_epoch(tab) != core._epoch:
                raise StaleTable("the store's writing process is opening, closing or gone")
            at = rs_ap_find(tab, <const uint8_t *>PyBytes_AS_STRING(name), <uint32_t>len(name))
            if at < 0 and nqueues <= RS_AP_QUEUES and not rs_ap_u32(tab, RS_AP_O_FULL)[0]:
                at = rs_ap_add(tab, <const uint8_t *>PyBytes_AS_STRING(name), <uint32_t>len(name), nqueues)
            elif at >= 0 and rs_ap_i32(tab, at + RS_AP_E_NQUEUES)[0] < 0:
                at = -1
            if at < 0 and not core._share_owner:
                raise NotShareable(f"topic {topic!r} is not in the shared append table")
        finally:
            rs_ap_unlock(tab)
        t = _Topic.__new__(_Topic)
        t.name = name
        t.slot = rs_body_crc(<const uint8_t *>PyBytes_AS_STRING(name), len(name)) % RS_LIVE_SLOTS
        t.nqueues = nqueues
        t.dirty_lo = t.dirty_hi = -1
        if at >= 0:
            _attach_entry(tab, t, at)
            if t.shared_nq[0] == 0:
                t.shared_nq[0] = nqueues
        else:      # the owner's alone
            t.capacity = max(1, nqueues)
            t.next_offsets = <int64_t *>calloc(t.capacity, sizeof(int64_t))
            if t.next_offsets == NULL:
                raise MemoryError()
        core._topics[topic] = t
        return t
    finally:
        PyThread_release_lock(core._lock)


cdef int _choose_queue(CommitLogCore core, _Topic t, int queue_id) except -2:
    if queue_id < 0:
        queue_id = t.rr % t.nqueues
        t.rr += 1
    elif queue_id >= t.nqueues:
        raise InvalidQueueIdError(
            f"queue id {queue_id} out of range: topic {t.name.decode()!r} has {t.nqueues} queues")
    return queue_id


cdef int _set_queue_offset(CommitLogCore core, str topic, int queue_id, int64_t next_offset) except -1:
    """CommitLogCore.set_queue_offset."""
    cdef _Topic t = core._topics.get(topic)
    if t is not None and 0 <= queue_id < t.capacity:
        t.next_offsets[queue_id] = next_offset
        return 0
    if core._queue_offsets_pending is None:
        core._queue_offsets_pending = {}
    core._queue_offsets_pending.setdefault(topic, {})[queue_id] = next_offset
    return 0


cdef dict _queue_offsets(CommitLogCore core):
    """CommitLogCore.queue_offsets."""
    out = {}
    cdef _Topic t
    for name, t in core._topics.items():
        for q in range(t.capacity):
            if t.next_offsets[q]:
                out[(name, q)] = t.next_offsets[q]
    if core._queue_offsets_pending:
        for name, qs in core._queue_offsets_pending.items():
            for q, nxt in qs.items():
                out.setdefault((name, q), nxt)
    return out


cdef int _forget_topic(CommitLogCore core, str topic) except -1:
    """CommitLogCore.forget_topic."""
    cdef _Topic t
    cdef int64_t *grown
    cdef int nqueues = core._topic_lookup(topic)
    _acquire(core._lock)
    try:
        t = core._topics.get(topic)
        if t is None:
            return 0
        if t.committed != NULL:   # in the shared table: it holds RS_AP_QUEUES queues
            nqueues = min(nqueues, RS_AP_QUEUES)
            t.shared_nq[0] = nqueues
        elif nqueues > t.capacity:
            grown = <int64_t *>realloc(t.next_offsets, sizeof(int64_t) * nqueues)
            if grown == NULL:
                raise MemoryError()
            memset(grown + t.capacity, 0, sizeof(int64_t) * (nqueues - t.capacity))
            t.next_offsets = grown
            pending = core._queue_offsets_pending.get(topic) if core._queue_offsets_pending else None
            if pending:
                for qid in range(t.capacity, nqueues):
                    if qid in pending:
                        t.next_offsets[qid] = pending.pop(qid)
            t.capacity = nqueues
        t.nqueues = nqueues
    finally:
        PyThread_release_lock(core._lock)
    return 0
