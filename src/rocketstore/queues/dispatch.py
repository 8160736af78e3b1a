"""Dispatch: carrying CommitLog records into the ConsumeQueues and the index (spec §4.2, §5.4, §7).

RocketMQ's ReputMessageService polls the CommitLog every millisecond and dispatches what is
new, so a message becomes visible to consumers and key queries about a millisecond after its
put returned. rocketstore dispatches *on demand* instead: every query first catches the
dispatcher up to the CommitLog's current end (one decode of the new records in C, then one
batch append per queue and one batch of index puts), and a background thread catches up when
nothing asks. So when ``put`` returns, the next query sees the message (read-your-writes), and
puts never wait for dispatch.

A read-only store dispatches into memory: :class:`TailQueue` serves a queue's units from its
files on disk and then from an in-memory tail; :class:`MemoryIndexService` keeps the missing
index entries in anonymous memory. Nothing is written to the store directory.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Optional

import numpy as np

from rocketstore.base._failurelog import FailureLog
from rocketstore.errors import InvalidMessageError, MessageNotFoundError
from rocketstore.files.mapped_file import MappedFile, close_map
from rocketstore.format._codec_py import (
    RECORD_DTYPE,
    RECORD_FIXED_LENGTH,
    SYSFLAG_TRANSACTION_MASK,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from rocketstore.format._hotstate import DispatchState, MappedState, QueueTable
from rocketstore.format.units import CQ_UNIT_SIZE
from rocketstore.log.recordscan import (  # the names dispatch has always offered
    consumable,
    consumable_rows,
    decode_chunks,
    plausible,
    queue_groups,
    resync,
)
from rocketstore.queues.consumequeue import (
    CQ_UNIT_DTYPE,
    PLACEHOLDER_SIZE,
    ConsumeQueueStore,
    fits_between,
    roll_next_file,
    units_of_records,
)
from rocketstore.queues.fused import FusedDispatch, fused_for
from rocketstore.queues.indexservice import IndexService

__all__ = [
    "Dispatcher",
    "resync",
    "consumable_rows",
    "plausible",
    "queue_groups",
    "TailQueue",
    "TailQueueStore",
    "MemoryIndexService",
]

log = logging.getLogger("rocketstore.queues.dispatch")

#: One ConsumeQueue unit's bytes (CQ_UNIT_DTYPE: big-endian commitlog offset, size, tags code).
_UNIT = struct.Struct(">qiq")

#: Where the fields :meth:`Dispatcher._dispatch_one` reads sit in a record row's ``tolist()``.
_POSITION, _SIZE, _QUEUE_ID, _QUEUE_OFFSET, _SYS_FLAG, _STORE_TIMESTAMP, _TOPIC_POS, _TOPIC_LEN = (
    (RECORD_DTYPE.names or ()).index(name)
    for name in (
        "position",
        "size",
        "queue_id",
        "queue_offset",
        "sys_flag",
        "store_timestamp",
        "topic_pos",
        "topic_len",
    )
)

#: Records per chunk the dispatcher decodes: each chunk is walked by several passes (dispatch
#: info, queue keys, grouping, index keys), which run ~20 % faster over 16,384 rows (2.9 MB of
#: RECORD_DTYPE) than over 65,536 (11.5 MB, more than the cache, in fresh pages every chunk).
DISPATCH_CHUNK = 16384
#: Records the fused pass (:mod:`rocketstore.queues.fused`) dispatches at a time (between two progress
#: reports), or this many per queue handed to it if more: it holds those queues' locks meanwhile
#: (a few ms), and handing it a queue costs a few microseconds a pass.
FUSED_CHUNK = 16384
FUSED_CHUNK_PER_QUEUE = 64
#: Records the general path takes at a time when the fused pass stopped before one it cannot
#: dispatch (its queue new to it, a file to roll, damage), before the fused pass resumes.
GENERAL_CHUNK = 64
#: At most this many new records (a follower catching up with a put or a few) take the
#: one-record path (``codec.dispatch_few``: Python integers, no arrays), whose cost is per record;
#: more take the batch path, whose arrays cost ~10 us a pass and little per record.
FEW_RECORDS = 4
#: Stretches longer than this are not offered to the one-record path (they hold more records).
FEW_BYTES = 1 << 16


def _log_implausible(count: int, queue_offset: int, commitlog_offset: int) -> None:
    """Say that ``count`` records of a dispatch got no unit for a queue offset :func:`plausible`
    refuses (the first at ``commitlog_offset``)."""
    log.error(
        "%d record(s) with a queue offset no CommitLog can hold (damaged where no CRC "
        "covers it), e.g. queue offset %d at commitlog offset %d: given no unit",
        count,
        queue_offset,
        commitlog_offset,
    )


class Dispatcher(DispatchState):
    """Carries records from CommitLog offset ``start`` into ``queues`` and ``index``.

    ``segments`` is the CommitLog's :class:`~rocketstore.files.mapped_file.MappedFileQueue`,
    ``end_of()`` the offset below which records are complete, ``queues`` has
    ``find_or_create(topic, queue_id)`` returning something with ``append_many``, ``index`` has
    ``build_refs``. :meth:`catch_up` is thread-safe and cheap when there is nothing new.
    """

    # What the one-call reads read per call to see whether the index is caught up
    # (``end_core``, ``offset``, ``indexed``, ``_index_lazily``) are the fields of the
    # DispatchState it extends (compiled: read in C); the rest stay in the instance dict.
    __slots__ = ("__dict__", "__weakref__")

    def __init__(
        self,
        segments: Any,
        codec: Any,
        scan: Any,
        queues: Any,
        index: Any,
        *,
        start: int,
        end_of: Callable[[], int],
        delay_levels_ms: Optional[Iterable[int]] = None,
        index_lazily: bool = False,
        fused: bool = True,
        end_core: Any = None,
        batch: Any = None,
    ) -> None:
        self._segments = segments
        #: the BatchConsumeQueues (rocketstore.queues.batchcq.BatchQueueStore) of the BatchCQ topics,
        #: whose records get no ConsumeQueue unit; None: the store has no such topic
        self._batch = batch if batch is not None and batch.topics else None
        self._codec = codec
        self._scan = scan
        self._queues = queues
        self._index = index
        self._end_of = end_of
        self._delay_levels = (
            codec.DEFAULT_DELAY_LEVELS_MS if delay_levels_ms is None else tuple(delay_levels_ms)
        )
        #: the delay table as dispatch_few reads it
        self._delays = np.asarray(self._delay_levels, dtype=np.int64)
        self._few_kernel = getattr(codec, "dispatch_few", None)
        self.offset = start
        self._lock = threading.Lock()
        self.dispatched_records = 0
        #: store timestamp of the last record dispatched (0: none yet); with ``offset`` it is
        #: what the checkpoint records (§6)
        self.last_store_timestamp = 0
        self._progress: Optional[Callable[[int], None]] = None
        #: A following reader indexes keys only when one is looked up (``catch_up(index=True)``),
        #: not at every put it catches up with: ``indexed`` is where its index ends.
        self._index_lazily = index_lazily
        self.indexed = start
        #: The append core whose ``wrote_offset`` ``end_of()`` returns, when it is one (None
        #: otherwise): a compiled reader sees that nothing waits (``offset >= wrote_offset``, not
        #: index_lazily) with two attribute reads instead of a catch_up call (codec.key_lookup).
        self.end_core = end_core
        self._index_only = False
        #: the compiled one-pass dispatch of the common case (None: the general path only)
        self._fused: Optional[FusedDispatch] = (
            fused_for(queues, index, self._delay_levels) if fused and not index_lazily else None
        )

    @property
    def lock(self) -> threading.Lock:
        """Held while records are dispatched: hold it to see the queues and index at rest."""
        return self._lock

    @property
    def index_lazily(self) -> bool:
        """Whether the index is built only when a key query asks (``catch_up(index=True)``)."""
        return self._index_lazily

    def use_batch(self, batch: Any) -> None:
        """Dispatch the records of ``batch``'s BatchCQ topics into its BatchConsumeQueues from
        now on (a topic created BatchCQ: none of its records was dispatched yet)."""
        with self.lock:
            self._batch = batch if batch is not None and batch.topics else None

    def catch_up(
        self,
        *,
        progress: Optional[Callable[[int], None]] = None,
        target: Optional[int] = None,
        index: bool = False,
    ) -> int:
        """Dispatch every complete record below ``end_of()`` (or ``target``, if lower); returns
        the new dispatch offset. ``progress(offset)`` is called after every decoded chunk.
        ``index``: the index too is complete on return (it lags only with ``index_lazily``)."""
        if index and self._index_lazily:
            self.catch_up(progress=progress, target=target)
            if self.indexed < self.offset:
                self._catch_up_index()
            return self.offset
        pos = self._catch_up(progress, target, blocking=True)
        return self.offset if pos is None else pos

    def try_catch_up(self) -> bool:
        """:meth:`catch_up`, unless another thread is dispatching: then False at once, nothing
        done (the background thread: waiting for the lock, then for the GIL, would only delay
        its next pass, and that thread dispatches meanwhile)."""
        return self._catch_up(None, None, blocking=False) is not None

    def _catch_up(
        self, progress: Optional[Callable[[int], None]], target: Optional[int], *, blocking: bool
    ) -> Optional[int]:
        """:meth:`catch_up`'s pass; None when ``blocking`` is false and the lock was taken."""
        if self.offset >= self._end_of():
            return self.offset
        if not self._lock.acquire(blocking):
            return None
        try:
            end = self._end_of()
            target = end if target is None else min(target, end)
            pos = self.offset
            self._progress = progress
            try:
                pos = self._catch_up_to(pos, target)
            finally:
                self._progress = None
            self.offset = pos
            return pos
        finally:
            self._lock.release()

    def _catch_up_index(self) -> None:
        """Index the keys of the records dispatched since :attr:`indexed`, by the same walk over
        the segments as the dispatch (damaged records stepped over alike), without their units."""
        with self._lock:
            end = self.offset
            self._index_only = True
            try:
                self.indexed = self._catch_up_to(self.indexed, end)
            finally:
                self._index_only = False

    def _advance(self, pos: int) -> None:
        if self._index_only:
            self.indexed = pos
        else:
            self.offset = pos

    def _catch_up_to(self, pos: int, target: int) -> int:
        while pos < target:
            mf = self._segments.find(pos)
            if mf is None:
                later = [f for f in self._segments.files if f.file_from_offset > pos]
                if not later:
                    break
                pos = later[0].file_from_offset  # retention removed what lay before
                continue
            pos = self._dispatch_segment(mf, pos, target)
            self._advance(pos)
            if pos < target and self._segments.find(pos) is mf:
                break  # a record not yet complete: a reader stops before it
        return pos

    def _dispatch_segment(self, mf: MappedFile, pos: int, target: int) -> int:
        base = mf.file_from_offset
        hi = min(mf.file_size, target - base)
        lo, reason = self._few(mf, base, pos - base, hi)
        if reason == self._codec.STOP_LIMIT and lo >= hi:  # all of it (what came since: next pass)
            return mf.end_offset if lo >= mf.file_size else base + lo
        view = None
        while True:
            stop = lo
            if reason is None:  # the batch path from lo
                if view is None:
                    view = mf.view(0, hi)
                stop, reason = self._dispatch_range(view, base, lo, hi)
            if reason == self._codec.STOP_BLANK or stop >= mf.file_size:
                return mf.end_offset
            if not self._damaged_at(mf, stop):
                return base + int(stop)
            if view is None:
                view = mf.view(0, hi)
            # Every record below end_of() is complete, so this one is damaged and its length
            # cannot be trusted: go on at the next whole record (its magic code and
            # PHYSICALOFFSET found), rather than stall every queue behind it or skip the rest of
            # the segment as RocketMQ's reput does. verify() reports it.
            lo = resync(self._codec, view, stop, hi, base)
            if lo < 0:
                if hi < mf.file_size:
                    return base + int(stop)  # what follows may not be written yet: look again
                log.error(
                    "skipping the rest of CommitLog segment %s: no valid record after offset %d",
                    os.path.basename(mf.path),
                    base + stop,
                )
                return mf.end_offset
            log.error("damaged bytes at commitlog offset %d .. %d: stepped over", base + stop, base + lo)
            reason = None

    def _dispatch_range(self, view: Any, base: int, lo: int, hi: int) -> tuple[int, Any]:
        """Dispatch the records of ``view[lo:hi]`` until the first position holding no whole
        record; returns where and why the scan stopped (``decode_batch``'s stop and reason).

        The fused pass (:mod:`rocketstore.queues.fused`) takes every record it can; the records it
        stops at go through the general path, :data:`GENERAL_CHUNK` at a time, and the fused pass
        resumes after them."""
        fused = None if self._index_only else self._fused
        if fused is not None and hi - lo < fused.min_bytes:
            fused = None  # a few records: handing the pass every queue costs more than it saves
        while True:
            if fused is not None:
                lo = self._run_fused(fused, view, base, lo, hi)
                if lo >= hi:
                    return lo, self._codec.STOP_LIMIT
            stop, reason = lo, None
            records = None
            for records, stop, reason in decode_chunks(  # noqa: B007 (the last chunk's reason is read below)
                self._codec,
                view,
                lo,
                hi,
                check_crc=False,
                chunk=DISPATCH_CHUNK if fused is None else GENERAL_CHUNK,
            ):
                if len(records):
                    self._dispatch(view, base, records)
                    self._advance(base + stop)
                    if self._progress is not None:
                        self._progress(self.offset)
                if fused is not None:
                    break  # back to the fused pass
            if (
                fused is None
                or reason != self._codec.STOP_LIMIT
                or stop >= hi
                or records is None
                or not len(records)
            ):
                return stop, reason
            lo = stop

    def _run_fused(self, fused: FusedDispatch, view: Any, base: int, lo: int, hi: int) -> int:
        """The fused pass over ``view[lo:hi]``, :data:`FUSED_CHUNK` records at a time (or
        :data:`FUSED_CHUNK_PER_QUEUE` per queue); returns where it stopped."""
        chunk = max(FUSED_CHUNK, FUSED_CHUNK_PER_QUEUE * len(fused.queues))
        while lo < hi:
            stop, reason, records, timestamp = fused.run(view, base, lo, hi, chunk)
            if records:
                self.dispatched_records += records
                self.last_store_timestamp = timestamp
                self._advance(base + stop)
                if self._progress is not None:
                    self._progress(self.offset)
            lo = stop
            if reason == fused.room and records:
                continue  # the windows allocate the next stretch
            if reason != 0 or not records:
                break
        return lo

    def _damaged_at(self, mf: MappedFile, stop: int) -> bool:
        """Whether the scan of ``mf`` that stopped at ``stop`` met a damaged record, rather than
        the end of the data or a step's target cutting a record in two."""
        hi = min(mf.file_size, self._end_of() - mf.file_from_offset)
        if stop >= hi:
            return False
        _records, at, reason = self._codec.decode_batch(
            mf.view(0, hi), stop, hi, check_crc=False, max_records=1
        )
        return at == stop and reason not in (self._codec.STOP_LIMIT, self._codec.STOP_BLANK)

    def _dispatch(self, view: Any, base: int, records: np.ndarray) -> None:
        info, keys = self._codec.dispatch_info(view, records, self._delay_levels)
        if self._index_only:
            self._index_keys(view, base, records, keys)
            return
        if len(records) == 1:
            self._dispatch_one(view, base, records, int(info["tags_code"][0]), keys)
            return
        keep = consumable(records)
        possible = plausible(records, base)
        if not possible.all():
            bad = np.flatnonzero(~possible)
            _log_implausible(
                len(bad), int(records["queue_offset"][bad[0]]), base + int(records["position"][bad[0]])
            )
            keep &= possible
        rows, codes = records, info["tags_code"]
        if not keep.all():
            rows, codes = records[keep], codes[keep]
        columns = (rows["queue_offset"], base + rows["position"], rows["size"], codes)
        for topic, queue_id, idx in queue_groups(self._scan, view, rows):
            if self._batch is not None and topic in self._batch.topics:
                self._batch.find_or_create(topic, queue_id).append_many(*(column[idx] for column in columns))
                continue
            try:
                queue = self._queues.find_or_create(topic, queue_id)
            except InvalidMessageError as exc:  # not a topic a queue can be named after
                log.warning("record(s) of topic %r queue %d not dispatched: %s", topic, queue_id, exc)
                continue
            if self._fused is not None:
                self._fused.learn(topic, queue_id)
            if len(idx) == len(rows):
                queue.append_many(*columns)
            else:
                queue.append_many(*(column[idx] for column in columns))
        if not self._index_lazily:
            self._index_keys(view, base, records, keys)
        self.dispatched_records += len(records)
        self.last_store_timestamp = int(records["store_timestamp"][-1])

    def _few(self, mf: MappedFile, base: int, lo: int, hi: int) -> tuple[int, Any]:
        """The one-record path over ``mf[lo:hi]``, when that holds at most :data:`FEW_RECORDS`
        records: their units dispatched by :meth:`_dispatch`'s rules, it returns where and why
        it stopped, as :meth:`_dispatch_range` does. ``(at, None)``: the batch path is to go on
        from ``at`` (more records, or index keys to build now, which need its arrays)."""
        kernel, mm = self._few_kernel, mf.mm
        if kernel is None or mm is None or self._index_only or not 0 < hi - lo <= FEW_BYTES:
            return lo, None  # (a closed or deleted segment: mf.view says which)
        try:
            found = kernel(mm, lo, hi, self._delays, FEW_RECORDS)
        except (TypeError, ValueError):  # the map closed meanwhile: mf.view says how
            return lo, None
        if found is None:
            return lo, None
        stop, reason, rows = found
        for position, size, queue_id, queue_offset, sys_flag, timestamp, topic, tags_code, keys in rows:
            tx = sys_flag & SYSFLAG_TRANSACTION_MASK
            if keys and tx != TRANSACTION_ROLLBACK_TYPE and not self._index_lazily:
                stop, reason = position, None
                break
            self._unit(base, position, size, queue_id, queue_offset, tx, topic, tags_code)
            self.dispatched_records += 1
            self.last_store_timestamp = timestamp
        if stop != lo:
            self._advance(base + stop)
            if self._progress is not None:
                self._progress(self.offset)
        return stop, reason

    def _unit(
        self,
        base: int,
        position: int,
        size: int,
        queue_id: int,
        queue_offset: int,
        tx: int,
        topic: str,
        tags_code: int,
    ) -> None:
        """The unit of one record (``tx``: its sys flag's transaction type), by
        :meth:`_dispatch`'s rules: none for an implausible queue offset or a prepared or
        rolled-back transaction."""
        if not 0 <= queue_offset <= (base + position) // RECORD_FIXED_LENGTH:
            _log_implausible(1, queue_offset, base + position)
            return
        if tx == TRANSACTION_PREPARED_TYPE or tx == TRANSACTION_ROLLBACK_TYPE:
            return
        try:
            if self._batch is not None and topic in self._batch.topics:
                queue = self._batch.find_or_create(topic, queue_id)
            else:
                queue = self._queues.find_or_create(topic, queue_id)
        except InvalidMessageError as exc:  # not a topic a queue can be named after
            log.warning("record(s) of topic %r queue %d not dispatched: %s", topic, queue_id, exc)
            return
        queue.append(queue_offset, base + position, size, tags_code)
        if self._fused is not None:
            self._fused.learn(topic, queue_id)

    def _dispatch_one(
        self, view: Any, base: int, records: np.ndarray, tags_code: int, keys: np.ndarray
    ) -> None:
        """:meth:`_dispatch` of one record (a follower catching up with one put) by the same rules,
        on Python integers: no array masks or grouping, which cost more than the record."""
        row = records.tolist()[0]  # a tuple of Python values: faster than a field access each
        tx = row[_SYS_FLAG] & SYSFLAG_TRANSACTION_MASK
        at = row[_TOPIC_POS]
        topic = bytes(memoryview(view).cast("B")[at : at + row[_TOPIC_LEN]]).decode("utf-8", "surrogateescape")
        self._unit(base, row[_POSITION], row[_SIZE], row[_QUEUE_ID], row[_QUEUE_OFFSET], tx, topic, tags_code)
        if len(keys) and tx != TRANSACTION_ROLLBACK_TYPE and not self._index_lazily:
            self._index.build_refs(view, base, records, keys)
        self.dispatched_records += 1
        self.last_store_timestamp = row[_STORE_TIMESTAMP]

    def _index_keys(self, view: Any, base: int, records: np.ndarray, keys: np.ndarray) -> None:
        """Index ``keys`` (dispatch_info's) of ``records``, but for rolled-back transactions'."""
        if len(keys):
            rollback = (records["sys_flag"] & SYSFLAG_TRANSACTION_MASK) == TRANSACTION_ROLLBACK_TYPE
            if rollback.any():
                keys = keys[~rollback[keys["record"]]]
            self._index.build_refs(view, base, records, keys)


class DispatchThread:
    """Calls ``dispatcher.try_catch_up()`` every ``interval_ms`` until :meth:`stop` (waiting
    with ``nap``), and ``checkpoint()`` every ``checkpoint_interval_ms`` (0: never).

    Keeps the ConsumeQueue and index files current while nobody queries (queries catch up by
    themselves), and their durable state recorded in the checkpoint, which bounds what a
    recovery after a crash re-reads. A failure (a full disk) is logged once with its cause, then
    counted (:class:`~rocketstore.base._failurelog.FailureLog`), and retried with a backoff doubling up
    to :data:`MAX_RETRY_WAIT` seconds (or ``interval_ms`` if longer); the thread recovers by
    itself when space returns.
    """

    #: Longest wait between two retries of a failing dispatch (seconds).
    MAX_RETRY_WAIT = 1.0

    #: Longest wait spent in ``nap`` (seconds); longer ones wait on the stop event, so that
    #: :meth:`stop` does not wait them out.
    MAX_NAP = 0.05

    def __init__(
        self,
        dispatcher: Dispatcher,
        interval_ms: int,
        *,
        checkpoint: Optional[Callable[[], None]] = None,
        checkpoint_interval_ms: int = 0,
        nap: Callable[[float], None] = time.sleep,
    ):
        self._dispatcher = dispatcher
        self._interval = interval_ms / 1000.0
        self._nap = nap
        self._checkpoint = checkpoint if checkpoint_interval_ms > 0 else None
        self._checkpoint_every = checkpoint_interval_ms / 1000.0
        self._dispatch_failures = FailureLog(
            log, "background dispatch", "retried; queries dispatch for themselves"
        )
        self._checkpoint_failures = FailureLog(log, "background checkpoint", "retried")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rocketstore-dispatch", daemon=True)
        self._thread.start()

    def _wait(self, seconds: float) -> bool:
        """Wait ``seconds``; whether :meth:`stop` was called."""
        if seconds > self.MAX_NAP:
            return self._stop.wait(seconds)
        self._nap(seconds)
        return self._stop.is_set()

    def _run(self) -> None:
        next_checkpoint = time.monotonic() + self._checkpoint_every
        wait = self._interval
        while not self._wait(wait):
            try:
                dispatched = self._dispatcher.try_catch_up()
            except Exception as exc:  # queries raise it themselves
                self._dispatch_failures.failed(exc)
                wait = min(2 * wait, max(self._interval, self.MAX_RETRY_WAIT))
                continue
            if dispatched:  # (a pass left to a thread dispatching: neither success nor failure)
                self._dispatch_failures.succeeded()
            wait = self._interval
            if self._checkpoint is not None and time.monotonic() >= next_checkpoint:
                try:
                    self._checkpoint()
                except Exception as exc:
                    self._checkpoint_failures.failed(exc)
                else:
                    self._checkpoint_failures.succeeded()
                next_checkpoint = time.monotonic() + self._checkpoint_every

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()


# -- read-only stores: dispatch into memory ---------------------------------------------------


class TailQueue:
    """One queue of a read-only store: its units on disk, then units dispatched into memory.

    Has the reading interface of :class:`~rocketstore.queues.consumequeue.ConsumeQueue`
    (``min_offset``, ``max_offset``, ``units``, ``unit``, ``roll_next_file``) and its
    ``append_many`` and ``repair`` rules, in memory: every unit at its own queue offset (a gap
    padded with placeholders and recorded in ``holes``; a wrong unit below the end replaced).
    A queue that needs a unit replaced is copied into memory whole; the disk is never written.
    """

    def __init__(self, topic: str, queue_id: int, disk: Any = None, units_per_file: int = 300_000) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.disk = disk
        self.units_per_file = units_per_file
        self._lock = threading.Lock()
        self._tail = np.empty(0, dtype=CQ_UNIT_DTYPE)
        #: the bytes of ``_tail`` (a memoryview): one unit is written with a struct, not numpy
        self._raw: Optional[memoryview] = None
        self._count = 0
        has_disk = disk is not None and disk.max_offset > disk.min_offset
        self._start: Optional[int] = disk.max_offset if has_disk else None
        self._min = disk.min_offset if has_disk else None
        self._max_physic = disk.max_physic_offset if has_disk else -1
        self.holes: list[tuple[int, int]] = list(disk.holes) if disk is not None else []
        self._rebase = False
        if not has_disk:
            self.disk = None

    @property
    def min_offset(self) -> int:
        return self._min if self._min is not None else 0

    @property
    def max_offset(self) -> int:
        return 0 if self._start is None else self._start + self._count

    @property
    def max_physic_offset(self) -> int:
        return self._max_physic

    @property
    def known_min_offset(self) -> Optional[int]:
        """:attr:`min_offset`, or None while the queue has no unit anywhere."""
        return self._min

    @property
    def tail_start(self) -> Optional[int]:
        """The queue offset of the first unit kept in memory (the disk queue's end when the
        store opened); None without a queue on disk or in memory."""
        return self._start

    @property
    def tail(self) -> np.ndarray:
        """The units kept in memory (CQ_UNIT_DTYPE), from :attr:`tail_start` on."""
        return self._tail

    def roll_next_file(self, queue_offset: int) -> int:
        return roll_next_file(queue_offset, self.units_per_file)

    def correct_min_offset(self, min_commitlog_offset: int) -> None:
        """Raise ``min_offset`` past the units whose records retention deleted (the disk's were
        corrected by the store's ConsumeQueues); the memory tail lets go of them."""
        with self._lock:
            disk = self.disk
            if disk is not None:
                if self._min is not None:
                    self._min = max(self._min, disk.min_offset)
                if disk.min_offset < disk.max_offset:
                    return  # units on disk are still there: the memory tail is above them
            if self._start is None:
                return
            if not self._count:
                # nothing in memory and nothing left on disk: the next unit dispatched may be
                # further on (the units between went with the deleted records)
                self._rebase = True
                self._min = max(self._min or 0, self._start)
                return
            below = self._tail["commitlog_offset"][: self._count] < min_commitlog_offset
            gone = self._count if below.all() else int(np.argmin(below))
            if gone:
                self._tail = self._tail[gone : self._count].copy()
                self._start += gone
                self._count -= gone
            self._min = max(self._min or 0, self._start)
            # every unit left was deleted: the next one dispatched (at or above the CommitLog's
            # new start) may be further on, the units between went with the deleted records
            self._rebase = not self._count

    def ends_record_at(self, commitlog_offset: int) -> bool:
        """Whether a unit on disk ends at ``commitlog_offset`` (the memory tail is not asked)."""
        return self.disk is not None and self.disk.ends_record_at(commitlog_offset)

    def _grow(self, need: int) -> None:
        if need > len(self._tail):
            grown = np.empty(max(need, 2 * len(self._tail), 1024), dtype=CQ_UNIT_DTYPE)
            grown[: self._count] = self._tail[: self._count]
            self._tail = grown

    def _in_memory(self) -> None:
        """Copy the units on disk into memory, so any unit can be replaced."""
        if self.disk is None or self._start is None:
            self.disk = None
            return
        head = np.zeros(self._start - self.min_offset, dtype=CQ_UNIT_DTYPE)
        head["size"] = PLACEHOLDER_SIZE
        q = self.min_offset
        while q < self._start:
            try:
                view = self.disk.units(q, self._start - q)
            except MessageNotFoundError:
                break
            if not len(view):
                break
            head[q - self.min_offset : q - self.min_offset + len(view)] = view
            q += len(view)
        self._tail = np.concatenate((head, self._tail[: self._count]))
        self._count = len(self._tail)
        self._start = self.min_offset
        self.disk = None

    def _stored(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(commitlog offsets, sizes) held at queue offsets ``q`` (all below max_offset)."""
        offsets = np.zeros(len(q), dtype=np.int64)
        sizes = np.zeros(len(q), dtype=np.int64)
        mine = q >= self._start
        at = q[mine] - self._start
        offsets[mine] = self._tail["commitlog_offset"][at]
        sizes[mine] = self._tail["size"][at]
        if self.disk is not None and not mine.all():
            offsets[~mine], sizes[~mine] = self.disk.stored_many(q[~mine])
        return offsets, sizes

    def stored_many(self, queue_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(commitlog offsets, sizes) held at ``queue_offsets`` (all in the queue's bounds), as
        :meth:`ConsumeQueue.stored_many` gives them."""
        q = np.asarray(queue_offsets, dtype=np.int64)
        with self._lock:
            if self._start is None:
                return np.zeros(len(q), dtype=np.int64), np.zeros(len(q), dtype=np.int64)
            return self._stored(q)

    def append(self, queue_offset: int, commitlog_offset: int, size: int, tags_code: int) -> bool:
        """One unit, as :meth:`append_many` stores it (True if written)."""
        if self._append_at_end(queue_offset, commitlog_offset, size, tags_code):
            return True
        return self.append_many((queue_offset,), (commitlog_offset,), (size,), (tags_code,)) == 1

    def _append_at_end(self, queue_offset: int, commitlog_offset: int, size: int, tags_code: int) -> bool:
        """One unit right at the end (a follower catching up with one put), without array work;
        False when it is not the next unit: the general path stores it."""
        with self._lock:
            if self._start is None or self._rebase or queue_offset != self._start + self._count:
                return False
            count = self._count
            self._grow(count + 1)
            raw = self._raw
            if raw is None or raw.obj is not self._tail:
                raw = self._raw = memoryview(self._tail).cast("B")
            _UNIT.pack_into(raw, count * CQ_UNIT_SIZE, commitlog_offset, size, tags_code)
            self._count = count + 1
            self._max_physic = commitlog_offset + size
            return True

    def append_many(self, queue_offsets: Any, commitlog_offsets: Any, sizes: Any, tags_codes: Any) -> int:
        q = np.asarray(queue_offsets, dtype=np.int64)
        phys = np.asarray(commitlog_offsets, dtype=np.int64)
        sz = np.asarray(sizes, dtype=np.int64)
        tags = np.asarray(tags_codes, dtype=np.int64)
        if not len(q):
            return 0
        if len(q) == 1 and self._append_at_end(int(q[0]), int(phys[0]), int(sz[0]), int(tags[0])):
            return 1
        with self._lock:
            if self._start is None:
                self._start = self._min = int(q.min())  # the first unit at a non-zero offset
            elif self._rebase and not self._count and int(q.min()) > self._start:
                self._start = self._min = int(q.min())  # see correct_min_offset
            self._rebase = False
            written = 0
            below = (q < self.max_offset) & (q >= self.min_offset)
            if below.any():
                stored_offsets, stored_sizes = self._stored(q[below])
                wrong = (stored_offsets != phys[below]) | (stored_sizes != sz[below])
                if wrong.any():  # a record that does not continue its queue there takes no unit
                    qb = q[below]
                    before, before_size = self._stored(np.maximum(qb - 1, self.min_offset))
                    after, after_size = self._stored(np.minimum(qb + 1, self.max_offset - 1))
                    first, last = qb == self.min_offset, qb + 1 == self.max_offset
                    before_size[first] = after_size[last] = 0
                    fits = fits_between(before, before_size, phys[below], sz[below], after, after_size)
                    if (wrong & ~fits).any():
                        log.error(
                            "consume queue %s-%d: %d record(s) claim units below the end but lie out "
                            "of order with their neighbours' records (queue fields damaged): given "
                            "no unit",
                            self.topic,
                            self.queue_id,
                            int((wrong & ~fits).sum()),
                        )
                    wrong &= fits
                if wrong.any():
                    log.warning(
                        "consume queue %s-%d: %d unit(s) below the end do not point at "
                        "their records: replaced in memory",
                        self.topic,
                        self.queue_id,
                        int(wrong.sum()),
                    )
                    self._in_memory()
                    rows = np.flatnonzero(below)[wrong]
                    dst = self._tail[q[rows] - self._start]
                    dst["commitlog_offset"], dst["size"], dst["tags_code"] = phys[rows], sz[rows], tags[rows]
                    self._tail[q[rows] - self._start] = dst
                    written += len(rows)
            later = q >= self.max_offset
            if later.any():
                q, phys, sz, tags = q[later], phys[later], sz[later], tags[later]
                end = self.max_offset
                need = int(q.max()) + 1 - self._start
                self._grow(need)
                fresh = self._tail[self._count : need]
                fresh["commitlog_offset"] = 0
                fresh["size"] = PLACEHOLDER_SIZE
                fresh["tags_code"] = 0
                at = q - self._start
                self._tail["commitlog_offset"][at] = phys
                self._tail["size"][at] = sz
                self._tail["tags_code"][at] = tags
                filled = np.zeros(need - self._count, dtype=bool)
                filled[at - self._count] = True
                if not filled.all():
                    gaps = np.flatnonzero(~filled)
                    log.warning(
                        "consume queue %s-%d: %d unit(s) dispatched past the end %d; the "
                        "units between are rebuilt from the CommitLog",
                        self.topic,
                        self.queue_id,
                        len(q),
                        end,
                    )
                    self.holes.append((end + int(gaps[0]), end + int(gaps[-1]) + 1))
                self._count = need
                last = self._tail[need - 1]
                self._max_physic = int(last["commitlog_offset"]) + int(last["size"])
                written += len(q)
            return written

    def repair(
        self,
        queue_offsets: Any,
        commitlog_offsets: Any,
        sizes: Any,
        tags_codes: Any,
        continues: Optional[int] = None,
    ) -> tuple[int, int]:
        """:meth:`ConsumeQueue.repair` in memory (``continues``: unused; a read-only store puts
        nothing)."""
        q = np.asarray(queue_offsets, dtype=np.int64)
        with self._lock:
            if self._start is None:
                if not len(q):
                    return 0, 0
                self._start = self._min = int(q.min())
            self._in_memory()
            lo, hi = self.min_offset, self.max_offset
            if len(q) and int(q.min()) > lo:  # the first positions' records are gone: as
                lo = self._min = min(hi, int(q.min()))  # ConsumeQueue.repair
            top = max(hi, int(q.max()) + 1 if len(q) else hi)
            before = self._tail[lo - self._start : hi - self._start].copy()
            units, found = units_of_records(
                lo,
                top,
                q,
                np.asarray(commitlog_offsets, dtype=np.int64),
                np.asarray(sizes, dtype=np.int64),
                np.asarray(tags_codes, dtype=np.int64),
            )
            n = hi - lo
            rewritten = int(
                (
                    (before["commitlog_offset"] != units["commitlog_offset"][:n])
                    | (before["size"] != units["size"][:n])
                ).sum()
            )
            missing = (top - lo) - found
            self._tail, self._count, self._start, self.disk = units, len(units), lo, None
            self.holes = []
            if len(units):
                last = units[-1]
                self._max_physic = int(last["commitlog_offset"]) + int(last["size"])
        if rewritten or missing:
            log.error(
                "consume queue %s-%d rebuilt from the CommitLog in memory: %d unit(s) "
                "replaced, %d position(s) whose record is gone (skipped by consumers)",
                self.topic,
                self.queue_id,
                rewritten,
                missing,
            )
        return rewritten, missing

    def units(self, start: int, count: int) -> np.ndarray:
        with self._lock:
            lo, hi = self.min_offset, self.max_offset
            if not lo <= start <= hi:
                raise MessageNotFoundError(
                    f"queue offset {start} is outside [{lo}, {hi}) of {self.topic}-{self.queue_id}"
                )
            if self._start is None:
                return np.empty(0, dtype=CQ_UNIT_DTYPE)
            if start < self._start:
                head: np.ndarray = self.disk.units(start, min(count, self._start - start))
                return head
            i = start - self._start
            view = self._tail[i : min(self._count, i + count)]
        out: np.ndarray = view.view()
        out.flags.writeable = False
        return out

    def unit(self, queue_offset: int) -> tuple[int, int, int]:
        view = self.units(queue_offset, 1)
        if not len(view):
            raise MessageNotFoundError(
                f"queue offset {queue_offset} is past the end of {self.topic}-{self.queue_id}"
            )
        return int(view[0]["commitlog_offset"]), int(view[0]["size"]), int(view[0]["tags_code"])


class TailQueueStore(QueueTable):
    """The queues of a read-only store: those on disk (read-only), extended in memory.

    ``_queues`` (a read-only view, changed through ``_put_queue`` and ``_take_queues``) is the
    QueueTable's it extends (compiled: the one-call reads look queues up in C).
    """

    def __init__(self, root: str, units_per_file: int):
        super().__init__()
        self.units_per_file = units_per_file
        self.disk = ConsumeQueueStore(root, units_per_file, read_only=True)
        self._lock = threading.Lock()

    def recover(self, limit: Optional[int] = None) -> list[int]:
        """Recover the disk queues (without writing; ``limit``: as after an abnormal stop, see
        :meth:`ConsumeQueueStore.recover`); returns their max physical offsets."""
        ends = [cq.recover() if limit is None else cq.recover_prefix(limit) for cq in self.disk]
        for cq in self.disk:
            self._put_queue(
                (cq.topic, cq.queue_id), TailQueue(cq.topic, cq.queue_id, cq, self.units_per_file)
            )
        return ends

    @property
    def incomplete(self) -> bool:
        """Whether a queue's last file on disk was left out (empty or short: a writer creating
        it, or damage): the units it should hold are not on disk, whatever a checkpoint says."""
        return any(cq.last_file_skipped for cq in self.disk)

    def correct_min_offset(self, min_commitlog_offset: int) -> None:
        """Raise each queue's ``min_offset`` past units whose records retention deleted, in
        memory only (``ConsumeQueue.correct_min_offset`` reads, never writes)."""
        self.disk.correct_min_offset(min_commitlog_offset)
        for queue in self._queues.values():
            queue.correct_min_offset(min_commitlog_offset)

    def get(self, topic: str, queue_id: int) -> Optional[TailQueue]:
        return self._queues.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> TailQueue:
        key = (topic, queue_id)
        queue = self._queues.get(key)
        if queue is None:
            with self._lock:
                queue = self._queues.get(key)
                if queue is None:
                    queue = TailQueue(topic, queue_id, None, self.units_per_file)
                    self._put_queue(key, queue)
        return queue

    def __iter__(self) -> Iterator[TailQueue]:
        return iter(list(self._queues.values()))

    def __len__(self) -> int:
        return len(self._queues)

    def close(self) -> None:
        self._take_queues()
        self.disk.close()


class _AnonymousMap(MappedState):
    """The part of :class:`~rocketstore.files.mapped_file.MappedFile` an index file uses, in memory
    (``mm`` and ``file_size``: the fields of the MappedState it extends)."""

    __slots__ = ("fd",)

    def __init__(self, size: int):
        self.mm: mmap.mmap = mmap.mmap(-1, size)  # zero pages, materialised only where written
        self.file_size = size
        self.fd = -1

    def flush(self, *args: object) -> None:
        pass

    def close(self) -> None:
        mm, self.mm = self.mm, None  # type: ignore[assignment]  # closed
        close_map(mm)

    destroy = close


class MemoryIndexService(IndexService):
    """An :class:`IndexService` whose files live in anonymous memory (a read-only store's tail)."""

    def __init__(self, root: str, **kwargs: Any) -> None:
        super().__init__(root, **kwargs)
        self._loaded = True

    def _make_directory(self) -> None:
        pass

    def _open_mapping(self, path: str, create: bool, private: bool = False) -> _AnonymousMap:
        return _AnonymousMap(self.file_size)

    def _reserve(self, f: Any, items: int) -> None:
        pass
