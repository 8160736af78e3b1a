# Durability: waiting for the flush thread, a put's answer by its wait mode (result, wait,
# future), the counters, and close.
# Part of rocketstore.log._store: included by cext/_store.pyx, whose imports and
# constants it uses.

cdef int _wait(CommitLogCore core, int64_t target, int64_t timeout_ms) except -1:
    """0 flushed, 1 timed out, else errno; the GIL is released while waiting."""
    cdef int rc
    if core._flusher == NULL:     # closed: close() flushed everything
        return 0
    if rs_flusher_flushed(core._flusher) >= target:
        return 0
    core.durable_waits += 1
    with nogil:
        rc = rs_flusher_wait_nogil(core._flusher, target, timeout_ms)
    return rc


cdef object _finish(CommitLogCore core, object result, int64_t end, int wait):
    cdef PutFuture fut
    cdef int rc
    if wait < 0:
        wait = core._default_wait
    if wait == 0:
        return result
    if wait == 1:
        rc = _wait(core, end, core._sync_flush_timeout_ms)
        if rc != 0:
            raise flush_timeout(result, rc)
        return result
    rs_flusher_request(core._flusher, end)
    fut = PutFuture.__new__(PutFuture)
    fut._core = core
    fut._result = result
    fut.target = end
    fut.deadline_ms = core._last_store_ts + core._sync_flush_timeout_ms  # the put's own time
    # Out of the cyclic GC while it holds no error: its core and result never point back
    # at it, and a pipelining caller keeps thousands alive, which every collection would
    # walk. result() tracks it again before it stores an error (a traceback can cycle).
    PyObject_GC_UnTrack(fut)
    return fut


cdef object _finish_many(CommitLogCore core, list results, int64_t end, int wait):
    """:meth:`_finish` of a batch whose last record ends at ``end``: the results, after the
    flush a durable batch waits for (FlushTimeoutError carries them all), or their futures."""
    cdef int rc
    if wait < 0:
        wait = core._default_wait
    if wait == 1 and results:
        rc = _wait(core, end, core._sync_flush_timeout_ms)
        if rc != 0:
            raise flush_timeout(results, rc)
    elif wait == 2 and results:
        return [_finish(core, r, end, 2) for r in results]
    return results


cdef dict _stats(CommitLogCore core):
    """CommitLogCore.stats."""
    cdef rs_flusher_stats s
    _check_open(core)
    rs_flusher_get_stats(core._flusher, &s)
    return {
        "puts": core.puts,
        "durable_waits": core.durable_waits,
        "refused_puts": core.refused_puts,
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


cdef int _close(CommitLogCore core) except -1:
    """CommitLogCore.close."""
    if core._closed:
        return 0
    _acquire(core._lock)
    core._closed = True
    PyThread_release_lock(core._lock)
    with nogil:
        rs_flusher_wait_nogil(core._flusher, rs_flusher_wrote(core._flusher), -1)
    if core._watcher is not None:
        core._watcher.close()
    for start in list(core._pins):
        core.release_segment(start)
    core._base = NULL
    _notify(core)
    core._live_page = NULL
    core._live = None
    with nogil:
        # Threads stop after a last full flush; the struct lives on until __dealloc__, so a
        # thread still inside a wait (it holds a reference to core) returns safely.
        rs_flusher_stop(core._flusher)
    return 0
