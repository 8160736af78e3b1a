# The core's segments: the active one, the maps pinned for the flush thread, rolling to the
# next, and the space a put reserves before its first byte.
# Part of rocketstore.log._store: included by cext/_store.pyx, whose imports and
# constants it uses.

cdef object _populate_error(int err, int64_t segment_start):
    # EFAULT: the kernel's populating fault would have been a SIGBUS at a store, which for a
    # page inside the file means no block could be had for it: report it as the ENOSPC it is.
    if err == EFAULT:
        err = ENOSPC
    return space_error(err, "cannot reserve space for the record in the CommitLog segment; "
                            "nothing was written", segment_start)


cdef int _set_active(CommitLogCore core, mm, int64_t file_from_offset, int64_t wrote_position, fd) except -1:
    """CommitLogCore.set_active."""
    _check_open(core)
    cdef _Pin pin = _pin(core, mm, file_from_offset, fd)
    core._base = <uint8_t *>pin.view.buf
    core._file_from = file_from_offset
    core._pos = wrote_position
    rs_flusher_publish(core._flusher, file_from_offset + wrote_position)
    return 0


cdef _Pin _pin(CommitLogCore core, mm, int64_t start, fd):
    cdef int fileno = -1 if fd is None else fd
    cdef _Pin pin = core._pins.get(start)
    if pin is not None:
        return pin
    pin = _Pin.__new__(_Pin)
    PyObject_GetBuffer(mm, &pin.view, PyBUF_WRITABLE)
    pin.held = True
    pin.start = start
    if pin.view.len != core._file_size:
        raise ValueError(f"segment map is {pin.view.len} bytes, expected {core._file_size}")
    if rs_flusher_register(core._flusher, start, <uint8_t *>pin.view.buf, pin.view.len, fileno) != 0:
        # Tiny segments filled faster than the flush interval: flush what was written,
        # release the flushed segments and try again.
        core.release_flushed_segments()
        if rs_flusher_register(core._flusher, start, <uint8_t *>pin.view.buf, pin.view.len, fileno) != 0:
            _wait(core, rs_flusher_wrote(core._flusher), -1)
            core.release_flushed_segments()
            if rs_flusher_register(core._flusher, start, <uint8_t *>pin.view.buf, pin.view.len, fileno) != 0:
                raise SegmentError("too many unflushed segments registered with the flush thread")
    core._pins[start] = pin
    return pin


cdef int _release_segment(CommitLogCore core, int64_t file_from_offset) except -1:
    """CommitLogCore.release_segment."""
    cdef _Pin pin = core._pins.pop(file_from_offset, None)
    if pin is None:
        return 0
    if core._base == <uint8_t *>pin.view.buf:
        core._base = NULL
    with nogil:
        rs_flusher_unregister(core._flusher, file_from_offset)
    del pin
    return 0


cdef int _release_flushed_segments(CommitLogCore core) except -1:
    """CommitLogCore.release_flushed_segments."""
    cdef int64_t flushed = rs_flusher_flushed(core._flusher)
    for start in sorted(core._pins):
        if start + core._file_size <= flushed and start != core._file_from:
            core.release_segment(start)
    return 0


cdef int _next_segment(CommitLogCore core) except -1:
    """Ask the Python layer for the segment starting at the current end; make it active."""
    cdef int64_t start = core._file_from, pos = core._pos
    if pos >= core._file_size:     # the active segment is full (BLANK written): the next one
        start += core._file_size
        pos = 0
    mm, fd = core._roll(start)
    core.set_active(mm, start, pos, fd)
    core.release_flushed_segments()
    return 0


cdef int _ensure_populated(CommitLogCore core, int64_t length) except -1:
    """Populate [pos, pos + length) of the active segment before storing into it."""
    cdef int64_t start = core._file_from + core._pos
    cdef int64_t end = start + length
    cdef int64_t done = rs_flusher_prefaulted(core._flusher)
    cdef int64_t lo, hi
    cdef int err
    if not core._populate or end <= done:
        return 0
    lo = (done if done > start else start) - core._file_from
    hi = end - core._file_from + 262144          # a little ahead: fewer calls
    if hi > core._file_size:
        hi = core._file_size
    with nogil:
        err = rs_populate_write(core._base + lo, hi - lo)
    if err != 0 and hi > end - core._file_from:
        hi = end - core._file_from               # nearly full: just what the record needs
        with nogil:
            err = rs_populate_write(core._base + lo, hi - lo)
    if err != 0:
        raise _populate_error(err, core._file_from)
    rs_flusher_note_prefaulted(core._flusher, core._file_from + hi)
    return 0


cdef int _reserve_space(CommitLogCore core, int64_t[::1] lens) except -1:
    """Before a batch writes its first byte (append lock held): create every segment its
    records go to and populate the pages they will fill, so a full disk fails the whole
    batch up front instead of storing half of it. Raises SegmentError / DiskFullError."""
    cdef int64_t size = core._file_size, start = core._file_from, pos = core._pos, lo
    cdef Py_ssize_t i, n = lens.shape[0]
    cdef list ranges = []
    if n == 0:
        return 0
    if core._base == NULL and pos >= size:    # BLANK written, roll due
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
        _reserve_range(core, start, lo, end)
    return 0


cdef int _reserve_range(CommitLogCore core, int64_t start, int64_t lo, int64_t hi) except -1:
    """Make sure the segment at ``start`` exists and ``[lo, hi)`` of it is populated."""
    cdef Py_buffer view
    cdef int64_t done
    cdef int err = 0
    cdef bint active = core._base != NULL and start == core._file_from
    if not active:
        mm, _fd = core._roll(start)   # created now (or found, when created ahead)
    if not core._populate:
        return 0                      # segments are fallocated when created
    done = rs_flusher_prefaulted(core._flusher) - start   # [wrote, prefaulted) is populated
    if done > lo:
        lo = done
    if lo >= hi:
        return 0
    if active:
        with nogil:
            err = rs_populate_write(core._base + lo, hi - lo)
        if err == 0:
            rs_flusher_note_prefaulted(core._flusher, start + hi)
    else:
        PyObject_GetBuffer(mm, &view, PyBUF_WRITABLE)
        try:
            if view.len != core._file_size:
                raise ValueError(f"segment map is {view.len} bytes, expected {core._file_size}")
            with nogil:
                err = rs_populate_write(<uint8_t *>view.buf + lo, hi - lo)
        finally:
            PyBuffer_Release(&view)
    if err != 0:
        raise _populate_error(err, start)
    return 0


cdef object _reserve_or_refuse(CommitLogCore core, int64_t[::1] lens, int wait, Py_ssize_t n):
    """:meth:`_reserve_space` for a batch (append lock held); when no space could be had,
    what the batch answers instead (see :meth:`_not_stored`), else None."""
    try:
        _reserve_space(core, lens)
    except SegmentError as exc:
        # No segment space: nothing of the batch was written. RocketMQ answers
        # CREATE_MAPEDFILE_FAILED; so do we.
        return _not_stored(core, CREATE_MAPPED_FILE_FAILED, exc, wait, n)
    return None
