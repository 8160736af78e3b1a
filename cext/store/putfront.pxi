# Puts at the engine's speed: MessageStore.put's common shapes in one compiled call.
# Part of rocketstore.log._store: included by cext/_store.pyx, whose imports and
# constants it uses.

cdef enum:
    KEYED_SMALL = 512       # keyed properties up to this long are encoded on the stack


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
        return _put_one(core, topic, body, props, plen, queue_id, flag, 0, 0, 0, 0, None, wait)
    finally:
        if props != small:
            PyMem_Free(props)


cdef extern from "Python.h":
    Py_ssize_t PyUnicode_GET_LENGTH(object o)
    Py_UCS4 PyUnicode_READ_CHAR(object o, Py_ssize_t index)


cdef inline bint _keys_plain(keys):
    """Whether ``keys`` are plainly present, as a compacted topic's put needs them: an exact str
    whose first character is printable ASCII (not blank). Any other keys are the careful path's
    to check."""
    cdef Py_UCS4 first
    if not PyUnicode_CheckExact(keys) or PyUnicode_GET_LENGTH(keys) < 1:
        return False
    first = PyUnicode_READ_CHAR(keys, 0)
    return 0x21 <= first <= 0x7e


cdef class PutFront:
    """A writing store's ``put`` (rocketstore.store installs ``PutFront(...).put`` as the
    store's ``put``): the common shapes, ``put(topic, body)`` and ``put(topic, body, tags=...,
    keys=..., properties={...})`` of a topic already checked, go straight into the core in this
    one call, also of a compacted topic already checked (in ``keyed``) when the call's keys are
    plainly there (``_keys_plain``); every other call (another shape, bad input, a closed
    core, keys the careful path checks) is ``general(store, ...)``, which is
    :meth:`rocketstore.MessageStore.put` itself. Nothing else differs: the same core calls
    with the same arguments as that method's own fast paths. ``put_pipelined`` is the same for
    the store's ``put_pipelined`` (``general_pipelined``), a future in place of the result."""
    cdef CommitLogCore _core
    cdef set _user_topics            # the store's own set (MessageStore._user_topics), not a copy
    cdef set _keyed                  # the compacted topics checked (the Putter's own set)
    cdef object _store_ref           # weakref to the store: the front lives in its __dict__
    cdef object _general
    cdef object _general_pipelined

    def __init__(self, CommitLogCore core not None, set user_topics not None, set keyed not None, store_ref,
                 general, general_pipelined):
        self._core = core
        self._user_topics = user_topics
        self._keyed = keyed
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
                and not core._closed
                and (PySet_Contains(self._user_topics, topic)
                     or (_keys_plain(keys) and PySet_Contains(self._keyed, topic)))
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
                    return _put_one(core, topic, body, NULL, 0, <int>qid, <int32_t>flg, 0, 0, 0, 0, None, wait)
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
                and not core._closed
                and (PySet_Contains(self._user_topics, topic)
                     or (_keys_plain(keys) and PySet_Contains(self._keyed, topic)))
                and _int_in(queue_id, -1, INT32_MAX, &qid) and _int_in(flag, INT32_MIN, INT32_MAX, &flg)):
            if tags is None and keys is None and properties is None:
                return _put_one(core, topic, body, NULL, 0, <int>qid, <int32_t>flg, 0, 0, 0, 0, None, 2)
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
