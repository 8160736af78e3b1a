"""The fused dispatch: CommitLog records into ConsumeQueue units and index items in
one compiled pass.

:class:`~rocketstore.queues.dispatch.Dispatcher` decodes a chunk of records into a table, reads their
properties into a second one, groups the rows by queue with numpy and appends each group, then
indexes the keys: five passes and a few arrays per chunk. The compiled build's
``_index.dispatch_fused`` does it in one: for each record it decodes the fields dispatch reads,
applies ``Dispatcher._dispatch``'s rules and writes the 20-byte unit into its queue's mapped file
and the keys into the last IndexFile, with no Python object per record.

It carries only the common case, and stops *before* any record that needs more: a position
holding no whole record (blank, damage, a record still being written), a queue it was not
handed, a unit past the queue's end (a gap) or below it and different from the one there (or in
a file it was not handed), a full last file or index file, a queue offset
:func:`~rocketstore.log.recordscan.plausible` refuses. The dispatcher then dispatches that record (and
a few after it) the general way, and comes back. A unit below the end that points at the record
already (a re-dispatch after a crash) is left alone, and the keys of a record the index holds
already are skipped, as the general path does. So the files are byte for byte what the general
path writes; tests/test_fused_dispatch.py compares the two.

The queues it writes are those it met before (:attr:`FusedDispatch.queues`, learned when the
general path dispatched a record to them), each as its ``ConsumeQueue.tail_window``: the maps of
its last files and the stretch of the last one already allocated. Their locks and the index's are
held through the pass (the GIL is not), so a reader sees a queue's units before its end moves
past them.

The pure-Python build has no fused pass: its dispatcher always takes the general path, which
writes the same bytes.
"""

from __future__ import annotations

import contextlib
from typing import Any, Optional

import numpy as np

from rocketstore.errors import SegmentError
from rocketstore.queues.consumequeue import ConsumeQueue

__all__ = ["FusedDispatch", "MAX_QUEUES", "FILES", "MIN_BYTES", "BYTES_PER_QUEUE"]

#: Queues the fused pass keeps writing to; the records of further queues take the general path.
MAX_QUEUES = 1024
#: Ranges of CommitLog bytes shorter than this, or than this many per queue handed to the pass,
#: are dispatched the general way (a query right after a put: one record, a few queues).
MIN_BYTES = 16384
BYTES_PER_QUEUE = 4096
#: A queue's last files the fused pass is handed: a re-dispatch (recovery without a checkpoint)
#: compares its records' units with theirs; units in earlier files take the general path.
FILES = 4


class FusedDispatch:
    """Runs ``kernel`` (``_index.dispatch_fused``) over ranges of a CommitLog segment for a
    :class:`~rocketstore.queues.dispatch.Dispatcher` (which holds its own lock meanwhile)."""

    def __init__(self, kernel: Any, module: Any, queues: Any, index: Any, delay_levels_ms: Any) -> None:
        self._kernel = kernel
        self._columns = int(module.FQ_COLUMNS)
        self._general = int(module.FUSED_GENERAL)
        self._room = int(module.FUSED_ROOM)
        self._queue_store = queues
        self._index = index
        self._delays = np.asarray(tuple(delay_levels_ms), dtype=np.int64)
        #: (topic, queue id) -> ConsumeQueue: the queues the pass writes to
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._names = b""
        self._rows = np.zeros((0, self._columns), dtype=np.int64)
        self._order: list[ConsumeQueue] = []

    def learn(self, topic: str, queue_id: int) -> None:
        """Write the units of ``topic``'s queue ``queue_id`` too, once it exists (the general
        path creates it)."""
        key = (topic, queue_id)
        known = self.queues.get(key)
        if known is None and len(self.queues) >= MAX_QUEUES:
            return
        queue = self._queue_store.get(topic, queue_id)
        if known is queue or not isinstance(queue, ConsumeQueue):
            return
        self.queues[key] = queue
        if known is not None:  # the store replaced the queue's object (a topic deleted, made again)
            self._order[self._order.index(known)] = queue
            return
        names = bytearray(self._names)
        rows = np.zeros((len(self.queues), self._columns), dtype=np.int64)
        rows[: len(self._rows)] = self._rows
        topic_bytes = topic.encode("utf-8", "surrogateescape")
        rows[-1, 0], rows[-1, 1], rows[-1, 2] = len(names), len(topic_bytes), queue_id
        names += topic_bytes
        self._names, self._rows = bytes(names), rows
        self._order.append(queue)

    def run(self, view: Any, base: int, lo: int, hi: int, max_records: int) -> tuple[int, int, int, int]:
        """Dispatch records of ``view[lo:hi]`` (``view`` starts at CommitLog offset ``base``) as
        far as the fast case goes: ``(stop, reason, records, last store timestamp)`` as
        ``dispatch_fused`` returns them."""
        with contextlib.ExitStack() as held:
            index = self._index
            held.enter_context(index.lock)
            try:
                target = index.tail_window()
            except SegmentError:
                # no room could be allocated (a full disk): the keys take the general path, which
                # raises that error if a record needs the room
                target = None

            index_file, limit = (target[0].index, target[1]) if target is not None else (None, 0)
            before = index_file.index_count if index_file is not None else 0
            live: list[int] = []
            maps: list[Any] = []
            for k, queue in enumerate(self._order):
                if self._queue_store.get(queue.topic, queue.queue_id) is not queue:
                    continue  # replaced (closed, truncated away): the general path finds the new one
                held.enter_context(queue.lock)
                try:
                    window = queue.tail_window(FILES)
                except SegmentError:  # as for the index: this queue's units take the general path
                    continue
                if window is None:
                    continue
                files, first_unit, write_pos, room, max_physic = window
                row = self._rows[k]
                row[3], row[4], row[5], row[6], row[7] = first_unit, write_pos, room, max_physic, 0
                row[8], row[9] = len(files), queue.units_per_file
                live.append(k)
                maps.extend(files)
            table = np.ascontiguousarray(self._rows[live]) if live else np.zeros((0, self._columns), np.int64)
            stop, reason, records, timestamp = self._kernel(
                view, lo, hi, base, max_records, self._names, table, maps, index_file, limit, self._delays
            )
            for row, k in zip(table, live):
                if row[7]:
                    self._order[k].tail_written(int(row[4]), int(row[6]))
            if index_file is not None and index_file.index_count != before:
                target[0].dirty = True
        return int(stop), int(reason), int(records), int(timestamp)

    @property
    def min_bytes(self) -> int:
        """The smallest range worth a pass: handing it a queue costs a few microseconds (its
        lock and window), what the pass saves on a dozen records."""
        return max(MIN_BYTES, BYTES_PER_QUEUE * len(self._order))

    @property
    def room(self) -> int:
        """The reason code of a stop at a record whose unit or keys need more room allocated."""
        return self._room


def fused_for(queues: Any, index: Any, delay_levels_ms: Any) -> Optional[FusedDispatch]:
    """A :class:`FusedDispatch` for a writable store's ``queues`` and ``index`` when their build
    has the compiled kernel; None otherwise (the pure-Python build, a read-only store's memory
    queues and index)."""
    from rocketstore.queues.cqstore import ConsumeQueueStore
    from rocketstore.queues.indexservice import IndexService

    module = getattr(index, "_index", None)
    kernel = getattr(module, "dispatch_fused", None)
    if kernel is None or type(queues) is not ConsumeQueueStore or type(index) is not IndexService:
        return None
    if index.read_only:
        return None
    return FusedDispatch(kernel, module, queues, index, delay_levels_ms)
