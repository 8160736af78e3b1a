"""Point reads in one call (pure twin): the hot state they read, by queue position, CommitLog
offset, msgId and key.

The compiled codec has a front for them too (``FastReads``, the facade's point reads in one C
call); the pure build has none: its roles call the careful paths (rocketstore.queues.reads),
which call these.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Optional

from rocketstore.errors import (
    InvalidMessageIdError,
    InvalidTopicError,
)
from rocketstore.format._messages_py import (
    _CQ_UNIT,
    _unit_message,
)
from rocketstore.format._msgid_py import (
    _HEX_DIGITS,
    uniq_key_time,
)
from rocketstore.format._record_py import (
    _INT32_MAX,
    _INT32_MIN,
    _INT64_MAX,
    _INT64_MIN,
    MAX_TOPIC_LENGTH_V2,
    _check_int,
    _message,
    _parse,
    _topic_bytes,
)
from rocketstore.format.units import PLACEHOLDER_SIZE as _PLACEHOLDER_SIZE

# ---------------------------------------------------------------------------------------------
# Lookups in one call: a message by queue position, the messages an index lookup found


# ---- The hot state the point reads read (the twins of the compiled classes) ----
#
# Segment, queue and index management is Python's (mapped_file, consumequeue, dispatch,
# indexservice); what the one-call reads need of each managed object is a field of one of these
# classes, which the managing class extends (the compiled twins keep them in C, where the
# compiled reads read them directly).


class MappedState:
    """What a read needs of one mapped file (mapped_file.MappedFile extends it): its map
    (``mm``, None once closed), where it starts (``file_from_offset``), its size and how much of
    it is written (``wrote_position``)."""

    __slots__ = ("mm", "file_from_offset", "file_size", "wrote_position")


class SegmentTable:
    """The files of a directory of equal segments, ascending, without gaps
    (mapped_file.MappedFileQueue extends it): ``files``, a list of :class:`MappedState`."""

    __slots__ = ("files",)

    def __init__(self) -> None:
        self.files: list[Any] = []


class QueueState:
    """What a read needs of one ConsumeQueue (consumequeue.ConsumeQueue extends it): its unit
    files (``_files``), the byte offset its units start at (``_min_logic``) and its ``holes``
    (a non-empty list: the careful path rebuilds them first)."""

    __slots__ = ("holes", "_min_logic", "_files")


class QueueTable:
    """The queues of a store by (topic, queue id) (cqstore.ConsumeQueueStore and
    tailqueue.TailQueueStore extend it). ``_queues`` is a read-only view: the table changes
    through :meth:`_put_queue` and :meth:`_take_queues` only (the compiled twin keeps a lookup
    cache they empty)."""

    __slots__ = ("_table", "_queues")

    def __init__(self) -> None:
        self._table: dict[Any, Any] = {}
        self._queues: Mapping[Any, Any] = MappingProxyType(self._table)

    def _put_queue(self, key: Any, queue: Any) -> None:
        """``_queues[key] = queue``."""
        self._table[key] = queue

    def _take_queues(self) -> list[Any]:
        """Empty the table; its queues, in table order."""
        queues = list(self._table.values())
        self._table.clear()
        return queues


class DispatchState:
    """What a read needs of the Dispatcher (dispatch.Dispatcher extends it) to see that nothing
    waits to be dispatched: the append core whose ``wrote_offset`` it catches up with
    (``end_core``, None: ask it), how far it dispatched (``offset``), and, for a reader that
    indexes lazily (``_index_lazily``), how far it indexed (``indexed``)."""

    __slots__ = ("end_core", "offset", "indexed", "_index_lazily")


class IndexState:
    """What a key lookup needs of an IndexService (indexservice.IndexService extends it): its
    lock, whether it is closed, its index twin module, its files (a list of
    :class:`IndexFileState`) and their geometry."""

    __slots__ = ("_lock", "_closed", "_index", "_files", "slot_count", "index_count")

    def __init__(self) -> None:
        self._files: list[Any] = []


class IndexFileState:
    """One index file's map (indexservice.MappedIndexFile extends it): ``mapped``, a
    :class:`MappedState`."""

    __slots__ = ("mapped",)


class PullResult:
    """The fields of consume.GetMessageResult (which extends it)."""

    __slots__ = (
        "status",
        "next_begin_offset",
        "min_offset",
        "max_offset",
        "messages",
        "_units",
        "_queue_offsets",
    )


def _segment_of(files, offset):
    """The file of ``files`` (a list of MappedFile of one size, ascending, without gaps) that
    holds ``offset``, or None."""
    if type(files) is not list or not files:
        return None
    head = files[0]
    first, size = head.file_from_offset, head.file_size
    if size <= 0 or offset < first:
        return None
    k = (offset - first) // size
    if k >= len(files) or files[k].file_from_offset != first + k * size:
        return None  # past the last, or not one run of equal files: the careful path
    return files[k]


def _readable(mf, core):
    """How much of segment ``mf`` holds complete records: up to ``core.wrote_offset`` (a
    writable store's append core), or its ``wrote_position`` (``core`` None: read-only)."""
    if core is None:
        return max(0, min(mf.file_size, mf.wrote_position))
    return max(0, min(mf.file_size, core.wrote_offset - mf.file_from_offset))


def _mapped(mf, readable):
    """A view of the first ``readable`` bytes of ``mf``'s map, or None once it is closed."""
    mm = mf.mm
    if mm is None:
        return None
    try:
        view = memoryview(mm)
    except ValueError:  # closed by another thread since it was read
        return None
    return view[:readable] if readable <= view.nbytes else None


def _queue_of(queues, topic, queue_id):
    """The queue (topic, queue_id) of a store's ConsumeQueueStore or TailQueueStore ``queues``,
    or None: no such queue, or one with holes (the careful path rebuilds it first)."""
    table = getattr(queues, "_queues", None)  # (a QueueTable's, of either twin)
    if type(table) is not MappingProxyType and not isinstance(table, Mapping):  # (the ABC check is slow)
        return None
    cq = table.get((topic, queue_id))
    return None if cq is None or cq.holes else cq


def _unit_file(cq, offset, n):
    """``(file, pos)``: the file of ConsumeQueue ``cq`` that holds the ``n`` written units from
    queue ``offset`` and where the first starts in it; None before the queue's start, or when
    they are not all written in one file (a pull that would go on in the next file is the
    careful path's)."""
    byte = offset * _CQ_UNIT
    if byte < cq.min_logic_offset:
        return None
    mf = _segment_of(cq.files, byte)
    if mf is None:
        return None
    pos = byte - mf.file_from_offset
    return None if (mf.wrote_position - pos) // _CQ_UNIT < n else (mf, pos)


def _record_view(segments, core, offset):
    """``(view, pos)``: the readable part of the segment holding CommitLog ``offset`` and where
    ``offset`` lies in it; None when no segment holds it readable, or it is closed."""
    seg = _segment_of(segments.files, offset)
    if seg is None:
        return None
    pos = offset - seg.file_from_offset
    readable = _readable(seg, core)
    if pos >= readable:
        return None
    buf = _mapped(seg, readable)
    return None if buf is None else (buf, pos)


def _queue_unit(queues, topic, queue_id, queue_offset):
    """(commitlog offset, size) of the unit at ``queue_offset`` of (topic, queue_id) in its file,
    or None (see :func:`queue_message`)."""
    cq = _queue_of(queues, topic, queue_id)
    if cq is None:
        return None
    if hasattr(cq, "_tail"):  # a read-only store's TailQueue: units on disk, then in memory
        lowest, start, cq = cq.known_min_offset, cq.tail_start, cq.disk
        if cq is None or lowest is None or start is None or not lowest <= queue_offset < start or cq.holes:
            return None  # not on disk: the careful path reads the memory tail
    found = _unit_file(cq, queue_offset, 1)
    if found is None:
        return None
    mf, pos = found
    view = _mapped(mf, pos + _CQ_UNIT)
    if view is None:
        return None
    offset, size, _code = struct.unpack_from(">qiq", view, pos)
    del view
    if offset < 0 or size <= 0 or (offset == 0 and size == _PLACEHOLDER_SIZE):
        return None
    return offset, size


def queue_message(queues, topic, queue_id, queue_offset, segments, core):
    """The message at ``queue_offset`` of (topic, queue_id), read and checked in one call: the
    unit in its ConsumeQueue file, then its record, which must be a whole, CRC-valid record of the
    unit's size, topic, queue id and queue offset whose PHYSICALOFFSET is the unit's (the checks
    of QueueGuard.unit_message).

    ``queues`` is the store's ConsumeQueueStore (a read-only store's TailQueueStore: the units on
    disk only), ``segments`` the CommitLog's MappedFileQueue and ``core`` its append core (what is
    readable; None: a read-only store, see :func:`_readable`). None whenever the careful
    path must decide: no such queue or unit, a queue with holes, a placeholder, a unit that does
    not point at its record, a segment gone or closed. That path then raises, repairs or reads,
    as it always did; this one never raises for a store's state.
    """
    if type(topic) is not str or type(queue_id) is not int or type(queue_offset) is not int:
        return None
    if not (0 <= queue_offset <= _INT64_MAX // _CQ_UNIT and _INT32_MIN <= queue_id <= _INT32_MAX):
        return None
    unit = _queue_unit(queues, topic, queue_id, queue_offset)
    if unit is None:
        return None
    offset, size = unit
    at = _record_view(segments, core, offset)
    if at is None:
        return None
    buf, pos = at
    try:
        topic_b = _topic_bytes(topic, MAX_TOPIC_LENGTH_V2)
    except InvalidTopicError:
        return None
    m = _unit_message(buf, pos, offset, size, queue_offset, topic_b, queue_id, None, True)
    return None if m is False else m


def _queue_run(queues, topic, queue_id, offset, max_msgs):
    """``(units, min_offset, max_offset)`` for :func:`queue_messages`: the run of up to
    ``max_msgs`` units from ``offset`` in one ConsumeQueue file (or a read-only store's memory
    tail) as bytes, or None when the careful path must decide."""
    cq = _queue_of(queues, topic, queue_id)
    if cq is None:
        return None
    lo, hi = cq.min_offset, cq.max_offset
    if not lo <= offset < hi:
        return None  # a bound status: the careful path says which
    n = min(max_msgs, hi - offset)
    if hasattr(cq, "_tail"):  # a read-only store's TailQueue: units on disk, then in memory
        start, tail = cq.tail_start, cq.tail
        if start is None:
            return None
        if offset >= start:
            at = (offset - start) * _CQ_UNIT
            return bytes(memoryview(tail).cast("B")[at : at + n * _CQ_UNIT]), lo, hi
        cq = cq.disk
        if cq is None or cq.holes or offset + n > start:
            return None  # no disk queue, or a pull from disk into memory: the careful path
    found = _unit_file(cq, offset, n)
    if found is None:
        return None
    mf, pos = found
    view = _mapped(mf, pos + n * _CQ_UNIT)
    if view is None:
        return None
    return bytes(view[pos:]), lo, hi


def queue_messages(queues, topic, queue_id, offset, max_msgs, segments, core):
    """A pull of every message from ``offset`` of (topic, queue_id), up to ``max_msgs``, in one
    call: ``(messages, units, min_offset, max_offset)``, with ``units`` the units read (bytes, in
    ConsumeQueue layout). Every unit is checked as :func:`queue_message` checks one. None
    whenever the careful path (``consume.get_message``) must decide: no such queue, an offset
    outside it, holes, a placeholder, a unit that does not point at its record, a pull that
    goes on into the next ConsumeQueue file, a segment gone or closed; it never raises for a
    store's state. ``queues``, ``segments`` and ``core`` as for :func:`queue_message`."""
    if (
        type(topic) is not str
        or type(queue_id) is not int
        or type(offset) is not int
        or type(max_msgs) is not int
    ):
        return None
    if not (
        0 <= offset <= _INT64_MAX // _CQ_UNIT
        and _INT32_MIN <= queue_id <= _INT32_MAX
        and 0 < max_msgs <= _INT64_MAX
    ):
        return None
    run = _queue_run(queues, topic, queue_id, offset, max_msgs)
    if run is None:
        return None
    units, lo, hi = run
    try:
        topic_b = _topic_bytes(topic, MAX_TOPIC_LENGTH_V2)
    except InvalidTopicError:
        return None
    messages = []
    seg = buf = None
    for i in range(len(units) // _CQ_UNIT):
        at, size, _code = struct.unpack_from(">qiq", units, i * _CQ_UNIT)
        if at < 0 or size <= 0 or (at == 0 and size == _PLACEHOLDER_SIZE):
            return None
        if seg is None or not seg.file_from_offset <= at < seg.file_from_offset + seg.file_size:
            seg = _segment_of(segments.files, at)
            if seg is None:
                return None
            buf = _mapped(seg, _readable(seg, core))
            if buf is None:
                return None
        m = _unit_message(buf, at - seg.file_from_offset, at, size, offset + i, topic_b, queue_id, None, True)
        if not m:
            return None
        messages.append(m)
    return messages, units, lo, hi


def record_at(segments, core, offset):
    """The message of the whole, CRC-valid record starting at CommitLog ``offset`` (its
    PHYSICALOFFSET saying so), read in one call; ``segments`` and ``core`` as for
    :func:`queue_message`. None whenever the careful path (``CommitLog.read``) must decide: not
    an int, no such record, a segment gone or closed. It never raises for a store's state."""
    if type(offset) is not int or not 0 <= offset <= _INT64_MAX:
        return None
    at = _record_view(segments, core, offset)
    if at is None:
        return None
    buf, pos = at
    reason, row = _parse(buf, pos, buf.nbytes, True)
    if reason is not None or row[7] != offset:
        return None
    return _message(buf, row, True)


def message_by_id(segments, core, msg_id):
    """The message whose offsetMsgId (§3.1) is ``msg_id``, read in one call: the record at the
    offset the id names, whose own id (store host, port and offset) must be ``msg_id``. None
    whenever the careful path (``MessageStore.get_by_msg_id``) must decide: a malformed id, no
    such record, another host's id."""
    if type(msg_id) is not str or len(msg_id) not in (32, 56):
        return None
    tail = msg_id[-16:]
    if not all(c in _HEX_DIGITS for c in tail):
        return None
    m = record_at(segments, core, int(tail, 16))
    if m is None or m.msg_id != msg_id.upper():
        return None
    return m


def key_messages(offsets, segments, core, topic, key, begin, end, limit, unique):
    """The messages at the CommitLog ``offsets`` (an index lookup's candidates, ascending; one
    offset listed twice is read once) that
    are whole, CRC-valid records of ``topic`` stored within ``[begin, end]`` (ms) whose UNIQ_KEY
    is ``key`` (``unique``) or whose UNIQ_KEY or one of whose KEYS is ``key``; at most ``limit``.

    ``segments`` is the CommitLog's MappedFileQueue and ``core`` its append core (None: a
    read-only store, whose segments are readable up to their ``wrote_position``). An offset
    that holds no such record (retention deleted it, recovery cut it, a hash collision) is
    skipped. None when a segment is closed under the lookup: the caller reads one by one.
    """
    if type(topic) is not str or type(key) is not str:
        raise TypeError("topic and key must be str")
    begin = _check_int(begin, "begin", _INT64_MIN, _INT64_MAX)
    end = _check_int(end, "end", _INT64_MIN, _INT64_MAX)
    limit = _check_int(limit, "limit", 0, _INT64_MAX)
    files = segments.files
    found: list = []
    previous = None
    for offset in offsets:
        if len(found) >= limit:
            break
        offset = _check_int(offset, "offset", _INT64_MIN, _INT64_MAX)
        if offset == previous:
            continue  # indexed twice under this key (a KEYS entry and the UNIQ_KEY): read once
        previous = offset
        seg = _segment_of(files, offset)
        if seg is None:
            continue
        pos = offset - seg.file_from_offset
        readable = _readable(seg, core)
        if pos >= readable:
            continue
        buf = _mapped(seg, readable)
        if buf is None:
            return None
        reason, row = _parse(buf, pos, readable, True)
        if reason is not None or row[7] != offset:  # a record moved here names another place
            continue
        m = _message(buf, row, True)
        if m.topic != topic or not begin <= m.store_timestamp <= end:
            continue
        if m.unique_key == key or (not unique and m.keys is not None and key in m.keys.split(" ")):
            found.append(m)
    return found


def key_lookup(services, segments, core, topic, key, max_num, begin, end, cap, dispatcher=None):
    """``MessageStore.query_by_key`` in one call: ``dispatcher.catch_up(index=True)`` first (a
    Dispatcher, or None: none), unless its ``end_core`` shows nothing waits; then the walk of each index service's files under its
    lock (``services``, a tuple; None entries are skipped; each its index twin's ``select_files``,
    for at most ``max(max_num, cap)`` candidates stored within ``[begin - 1 s, end + 1 s]``: the
    index keeps whole seconds), then :func:`key_messages` of them all, ascending, at most ``max_num``.

    None whenever the careful path must decide: an argument it checks (``topic`` or ``key`` not a
    non-empty str, ``max_num`` not an int in ``[1, 2**63 - 1]``, ``begin`` or ``end`` not one in
    ``[0, 2**63 - 1]``; ``end`` None is the largest), a closed service or segment.
    """
    if type(topic) is not str or type(key) is not str or not topic or not key or type(services) is not tuple:
        return None
    if end is None:
        end = _INT64_MAX
    if type(max_num) is not int or type(begin) is not int or type(end) is not int or type(cap) is not int:
        return None
    if (
        not 1 <= max_num <= _INT64_MAX
        or not 0 <= begin <= _INT64_MAX
        or not 0 <= end <= _INT64_MAX
        or not 0 <= cap <= _INT64_MAX
    ):
        return None
    _index_catch_up(dispatcher)
    walk = max(max_num, cap)
    offsets = _index_walk(services, topic, key, walk, max(0, begin - 1000), min(_INT64_MAX, end + 1000))
    if offsets is None:
        return None
    return key_messages(offsets, segments, core, topic, key, begin, end, max_num, False)


def _index_catch_up(dispatcher) -> None:
    """``dispatcher.catch_up(index=True)`` (a Dispatcher, or None: none), unless its
    ``end_core`` shows nothing waits."""
    if dispatcher is not None:
        end_core = dispatcher.end_core
        offset = dispatcher.offset
        if (
            end_core is None
            or offset < end_core.wrote_offset
            or (dispatcher.index_lazily and dispatcher.indexed < offset)
        ):
            dispatcher.catch_up(index=True)


def _index_walk(services, topic, key, cap, lo, hi) -> Optional[list[int]]:
    """The candidates each index service of ``services`` (a tuple; None entries skipped) holds
    under ``topic#key`` stored within ``[lo, hi]`` (ms), at most ``cap`` a service, walked under
    its lock, ascending; None: a closed service."""
    offsets: list[int] = []
    for service in services:
        if service is None:
            continue
        found = service.walk_key(topic + "#" + key, cap, lo, hi)
        if found is None:
            return None
        offsets += found
    if len(services) > 1:
        offsets.sort()
    return offsets


def unique_lookup(services, segments, core, topic, key, cap, dispatcher, now):
    """``MessageStore.query_by_unique_key`` in one call: the catch-up of :func:`key_lookup`, then
    the index walk (:func:`key_lookup`'s, for ``cap`` candidates) from the creation time the id
    encodes at ``now`` (:func:`uniq_key_time`, less a second), and over all time when that
    finds nothing; each hit's topic and UNIQ_KEY re-checked (:func:`key_messages`); the first
    stored of the hits. None when the careful path must decide: ``topic`` or ``key`` not a
    non-empty str, a closed service or segment, and nothing found (it says so)."""
    if type(topic) is not str or type(key) is not str or not topic or not key or type(services) is not tuple:
        return None
    if type(cap) is not int or not 0 <= cap <= _INT64_MAX:
        return None
    _index_catch_up(dispatcher)
    begins = [0]
    try:
        begins.insert(0, max(0, uniq_key_time(key, now) - 1000))
    except (InvalidMessageIdError, ValueError):
        pass  # not a RocketMQ-made id: no time hint
    for begin in begins:
        offsets = _index_walk(services, topic, key, cap, begin, _INT64_MAX)
        if offsets is None:
            return None
        hits = key_messages(offsets, segments, core, topic, key, _INT64_MIN, _INT64_MAX, len(offsets), True)
        if hits is None:
            return None
        if hits:
            return min(hits, key=operator.attrgetter("store_timestamp"))
    return None
