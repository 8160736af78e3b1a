# What other processes see and call: the live page's waits and wakes, a joined writer's
# connection (serve_step), SwitchSafe, and the test seams of the publish and the flush thread.
# Part of rocketstore.log._store: included by cext/_store.pyx, whose imports and
# constants it uses.

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
