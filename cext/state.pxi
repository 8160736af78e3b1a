# ---- The hot state the point reads read: compiled objects the Python managers keep current ----
#
# Included by _codec.pyx. Segment, queue and index *management* (roll, delete, repair, reopen)
# is Python's (mapped_file, consumequeue, dispatch, indexservice); what the compiled reads need
# per call is here, as fields of these classes, which the managing classes extend: each number
# lives once, in the compiled object, and Python reads and writes it as an ordinary attribute.
# The kernels read the fields directly (after a type check), never by a guessed memory offset.
# The pure twins (rocketstore.format._lookups_py) are plain classes with the same slots.

from types import MappingProxyType as _MappingProxyType

__all__ += ["MappedState", "SegmentTable", "QueueState", "QueueTable", "DispatchState", "IndexState",
            "IndexFileState", "PullResult"]


cdef class MappedState:
    """What a read needs of one mapped file (mapped_file.MappedFile extends it): its map
    (``mm``, None once closed), where it starts (``file_from_offset``), its size and how much of
    it is written (``wrote_position``)."""
    cdef public object mm
    cdef public int64_t file_from_offset
    cdef public int64_t file_size
    cdef public int64_t wrote_position


cdef class SegmentTable:
    """The files of a directory of equal segments, ascending, without gaps
    (mapped_file.MappedFileQueue extends it): ``files``, a list of :class:`MappedState`."""
    cdef public list files

    def __cinit__(self):
        self.files = []


cdef class QueueState:
    """What a read needs of one ConsumeQueue (consumequeue.ConsumeQueue extends it): its unit
    files (``_files``), the byte offset its units start at (``_min_logic``) and its ``holes``
    (a non-empty list: the careful path rebuilds them first)."""
    cdef public object holes
    cdef public int64_t _min_logic
    cdef public SegmentTable _files


cdef struct _QueueEntry:
    PyObject *topic        # a strong reference, or NULL
    int64_t queue_id
    PyObject *queue        # borrowed from the table's dict: every change of it empties the cache


cdef enum:
    _QUEUE_ENTRIES = 64    # a power of two


cdef class QueueTable:
    """The queues of a store by (topic, queue id) (cqstore.ConsumeQueueStore and
    tailqueue.TailQueueStore extend it). ``_queues`` is a read-only view: the table changes
    through :meth:`_put_queue` and :meth:`_take_queues` only, which also empty the lookup cache
    the point reads keep (a queue by the identity of its topic string and its id)."""
    cdef dict _table
    cdef readonly object _queues
    cdef _QueueEntry _cache[_QUEUE_ENTRIES]

    def __cinit__(self):
        self._table = {}
        self._queues = _MappingProxyType(self._table)

    def __dealloc__(self):
        self._forget()

    cdef void _forget(self) noexcept:
        cdef Py_ssize_t i
        cdef PyObject *topic
        for i in range(_QUEUE_ENTRIES):
            topic = self._cache[i].topic
            self._cache[i].topic = NULL
            self._cache[i].queue = NULL
            Py_XDECREF(topic)

    def _put_queue(self, key, queue):
        """``_queues[key] = queue``."""
        self._forget()
        self._table[key] = queue

    def _take_queues(self):
        """Empty the table; its queues, in table order."""
        queues = list(self._table.values())
        self._forget()
        self._table.clear()
        return queues

    cdef object find(self, str topic, object queue_id, int64_t qid):
        """The queue (topic, queue_id) or None; ``qid``: ``queue_id``, a plain int."""
        cdef _QueueEntry *e = &self._cache[
            ((<uint64_t><size_t><PyObject *>topic >> 4) ^ (<uint64_t>qid * <uint64_t>2654435761U))
            & (_QUEUE_ENTRIES - 1)]
        cdef PyObject *old
        if e.topic == <PyObject *>topic and e.queue_id == qid and e.queue != NULL:
            return <object>e.queue
        cq = self._table.get((topic, queue_id))
        if cq is not None:
            old = e.topic
            Py_INCREF(topic)
            e.topic = <PyObject *>topic
            e.queue_id = qid
            e.queue = <PyObject *>cq
            Py_XDECREF(old)   # a str: no finalizer runs
        return cq


cdef class DispatchState:
    """What a read needs of the Dispatcher (dispatch.Dispatcher extends it) to see that nothing
    waits to be dispatched: the append core whose ``wrote_offset`` it catches up with
    (``end_core``, None: ask it), how far it dispatched (``offset``), and, for a reader that
    indexes lazily (``_index_lazily``), how far it indexed (``indexed``)."""
    cdef public object end_core
    cdef public int64_t offset
    cdef public int64_t indexed
    cdef public bint _index_lazily


cdef class IndexState:
    """What a key lookup needs of an IndexService (indexservice.IndexService extends it): its
    lock, whether it is closed, its index twin module, its files (a list of
    :class:`IndexFileState`) and their geometry."""
    cdef public object _lock
    cdef public bint _closed
    cdef public object _index
    cdef public list _files
    cdef public int64_t slot_count
    cdef public int64_t index_count

    def __cinit__(self):
        self._files = []


cdef class IndexFileState:
    """One index file's map (indexservice.MappedIndexFile extends it): ``mapped``, a
    :class:`MappedState`."""
    cdef public object mapped


cdef class PullResult:
    """The fields of consume.GetMessageResult (which extends it), so a compiled pull fills them
    in place."""
    cdef public object status
    cdef public object next_begin_offset
    cdef public object min_offset
    cdef public object max_offset
    cdef public object messages
    cdef public object _units
    cdef public object _queue_offsets


# ``isinstance(o, MappedState)`` and the like walk the type's MRO (a call into the interpreter) for
# an instance of a subclass, which every managed object is; the reads make several such checks
# a call. Each check first compares ``type(o)`` with the last subclass it accepted (a class cannot
# stop extending a compiled base: its instances' layout depends on it), so the usual check is one
# pointer comparison.
cdef type _seen_mapped = MappedState, _seen_segments = SegmentTable, _seen_queue = QueueState
cdef type _seen_table = QueueTable, _seen_dispatch = DispatchState, _seen_index = IndexState
cdef type _seen_index_file = IndexFileState


cdef inline bint _is_mapped(object o):
    global _seen_mapped
    if type(o) is _seen_mapped:
        return True
    if isinstance(o, MappedState):
        _seen_mapped = type(o)
        return True
    return False


cdef inline bint _is_segments(object o):
    global _seen_segments
    if type(o) is _seen_segments:
        return True
    if isinstance(o, SegmentTable):
        _seen_segments = type(o)
        return True
    return False


cdef inline bint _is_queue(object o):
    global _seen_queue
    if type(o) is _seen_queue:
        return True
    if isinstance(o, QueueState):
        _seen_queue = type(o)
        return True
    return False


cdef inline bint _is_table(object o):
    global _seen_table
    if type(o) is _seen_table:
        return True
    if isinstance(o, QueueTable):
        _seen_table = type(o)
        return True
    return False


cdef inline bint _is_dispatch(object o):
    global _seen_dispatch
    if type(o) is _seen_dispatch:
        return True
    if isinstance(o, DispatchState):
        _seen_dispatch = type(o)
        return True
    return False


cdef inline bint _is_index(object o):
    global _seen_index
    if type(o) is _seen_index:
        return True
    if isinstance(o, IndexState):
        _seen_index = type(o)
        return True
    return False


cdef inline bint _is_index_file(object o):
    global _seen_index_file
    if type(o) is _seen_index_file:
        return True
    if isinstance(o, IndexFileState):
        _seen_index_file = type(o)
        return True
    return False
