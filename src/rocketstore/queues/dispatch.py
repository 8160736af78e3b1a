"""Dispatch: carrying CommitLog records into the ConsumeQueues and the index (spec §4.2, §5.4, §7).

RocketMQ's ReputMessageService polls the CommitLog every millisecond and dispatches what is
new, so a message becomes visible to consumers and key queries about a millisecond after its
put returned. rocketstore dispatches *on demand* instead: every query first catches the
dispatcher up to the CommitLog's current end (one decode of the new records in C, then one
batch append per queue and one batch of index puts), and a background thread catches up when
nothing asks. So when ``put`` returns, the next query sees the message (read-your-writes), and
puts never wait for dispatch.

A read-only store dispatches into memory (:mod:`rocketstore.queues.tailqueue`): its
:class:`TailQueue` serves a queue's units from its files on disk and then from an in-memory tail;
its :class:`MemoryIndexService` keeps the missing index entries in anonymous memory. Nothing is
written to the store directory.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Optional

import numpy as np

from rocketstore.base._failurelog import FailureLog
from rocketstore.errors import InvalidMessageError
from rocketstore.files.mapped_file import MappedFile
from rocketstore.format._codec_py import (
    RECORD_DTYPE,
    RECORD_FIXED_LENGTH,
    SYSFLAG_TRANSACTION_MASK,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from rocketstore.format._hotstate import DispatchState
from rocketstore.format._record_py import DISPATCH_ROW_FIELDS
from rocketstore.log.recordscan import (  # the names dispatch has always offered
    consumable,
    consumable_rows,
    decode_chunks,
    plausible,
    queue_groups,
    resync,
)
from rocketstore.queues.fused import FusedDispatch, fused_for
from rocketstore.queues.tailqueue import (  # a read-only store's queues and index, in memory
    MemoryIndexService,
    TailQueue,
    TailQueueStore,
)

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

#: Where the fields :meth:`Dispatcher._dispatch_one` reads sit in a record row's ``tolist()``.
_POSITION, _SIZE, _QUEUE_ID, _QUEUE_OFFSET, _SYS_FLAG, _STORE_TIMESTAMP, _TOPIC_POS, _TOPIC_LEN = (
    (RECORD_DTYPE.names or ()).index(name) for name in DISPATCH_ROW_FIELDS
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
#: At most this many new records (a follower catching up with a put or a few) take its
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
        """The one-record path over ``mf[lo:hi]`` of a dispatcher that indexes lazily (a
        follower), when that holds at most :data:`FEW_RECORDS` records: their units dispatched by
        :meth:`_dispatch`'s rules, it returns where and why it stopped, as :meth:`_dispatch_range`
        does. ``(lo, None)``: the batch path is to take the stretch (more records; or a writer,
        whose every put has a UNIQ_KEY to index now, with the batch path's arrays)."""
        kernel, mm = self._few_kernel, mf.mm
        if kernel is None or mm is None or not self._index_lazily or self._index_only:
            return lo, None  # (a closed or deleted segment: mf.view says which)
        if not 0 < hi - lo <= FEW_BYTES:
            return lo, None
        try:
            found = kernel(mm, lo, hi, self._delays, FEW_RECORDS)
        except (TypeError, ValueError):  # the map closed meanwhile: mf.view says how
            return lo, None
        if found is None:
            return lo, None
        stop, reason, rows = found
        for position, size, queue_id, queue_offset, sys_flag, timestamp, topic, tags_code, _keys in rows:
            tx = sys_flag & SYSFLAG_TRANSACTION_MASK
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
        if tx in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE):
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
        """:meth:`_dispatch` of one record (a writer's put whose keys it indexes now: the
        one-record path leaves those to the arrays) by the same rules, on Python integers: no
        array masks or grouping, which cost more than the record."""
        row = records.tolist()[0]  # a tuple of Python values: faster than a field access each
        tx = row[_SYS_FLAG] & SYSFLAG_TRANSACTION_MASK
        at = row[_TOPIC_POS]
        topic = bytes(memoryview(view).cast("B")[at : at + row[_TOPIC_LEN]]).decode(
            "utf-8", "surrogateescape"
        )
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
