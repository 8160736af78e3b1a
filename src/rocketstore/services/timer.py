"""Timer messages: delivery at any millisecond (RocketMQ 5.x's wheel timer, spec §12.5).

**The put.** A put with ``deliver_at_ms=`` (epoch ms) or ``delay_ms=``, or with one of the
properties a 5.x client sets (``TIMER_DELIVER_MS``, absolute epoch ms; ``TIMER_DELAY_SEC``;
``TIMER_DELAY_MS``), is rewritten as a 5.x broker's ``HookUtils.transformTimerMessage`` does:
the properties gain ``TIMER_OUT_MS`` (the deliver time), ``REAL_TOPIC`` and ``REAL_QID``, and
the record goes to topic ``rmq_sys_wheel_timer``, queue 0. A deliver time not in the future is
not a timer message: the message is stored in its topic at once, properties as given (5.x does
the same). One further ahead than ``timer_max_delay_sec`` (3 days), a value that is not a decimal
int, more than one of the three properties, or a delay level as well, raise
:class:`~rocketstore.errors.InvalidTimerError` (:class:`~rocketstore.errors.TimerTooFarError`
for the horizon) and write nothing. 5.x rounds the deliver time down to its ``timerPrecisionMs``
(100 .. 1000 ms); rocketstore keeps the millisecond.

**Delivery.** :class:`TimerService` (one background thread of a writable store) keeps the
timer messages not yet delivered in a heap ordered by the key ``(deliver ms, queue offset in
rmq_sys_wheel_timer)``, and delivers every message whose time has come in key order: the
record is read and put again in ``REAL_TOPIC`` / ``REAL_QID`` with body, flag, sysFlag, born
timestamp and reconsume times copied and the properties of 5.x's ``convertMessage``: all of
them but ``REAL_TOPIC`` / ``REAL_QID``, plus ``TIMER_DEQUEUE_MS`` (when the pass ran), in the
iteration order of a Java ``HashMap``.

**Progress** is in ``config/timerProgress`` (:class:`TimerProgress`: two fixed slots written in
turn, each fdatasynced; a file a broker does not know): ``enqueueOffset`` Q (units of the timer
queue below Q have been read into the heap), the watermark W = ``(readTimeMs,
readQueueOffset)`` and ``firstPendingOffset`` L (no unit below L is waiting). The invariant: a
unit below Q is delivered if its key is at most W, else it is waiting. A pass reads new units
(Q onwards), takes every new unit whose key is at most W (put "late": due already) and then the
waiting units in key order up to ``now`` (at most PASS_LIMIT), and moves W to the last key
taken. An open rebuilds the heap from the units between L and Q (each record read once for its
``TIMER_OUT_MS``).

**Exactly once across crashes**, as the delay service (rocketstore.services.schedule) does it: a pass

1. persists its *intent* (the CommitLog offset E its copies are written after, the pass time,
   the state before and after) together with the state before it;
2. puts the copies, in key order, in one ``put_copies`` (nothing comes between them);
3. flushes the CommitLog;
4. leaves the state after to be saved with the next pass's intent, or when the service is idle,
   ``deliver()`` returns or the store closes (one fdatasync per pass before its copies).

The units a pass delivers follow from its intent and the timer queue alone (the units below the
new Q with a key at most the new W and above the old one, or at or past the old Q). An open
(or the next pass, after a failed put or flush) that finds an intent *rolls it forward*: it
walks the CommitLog from E matching the copies found, in order, against those units (topic,
queue, body, properties, born timestamp, reconsume times, flag), writes the copies still
missing (under a new intent that says how many were already there), and saves the state after.
A copy that exists is never written again, a copy that does not is written: no loss, no
duplicate. :meth:`TimerService.stats` counts the passes settled this way and the copies found
already written (``resumed``), which a broker would have delivered twice.

**RocketMQ 5.x's files, for a broker taking over.** 5.x keeps ``timerlog/`` (52-byte units
chained per slot), ``timerwheel`` (32-byte slots, one per second) and ``config/timercheck``
(rocketstore.queues.timerwheel). Their wheel cannot hold a millisecond and their checkpoint
delivers at least once, so rocketstore's own state stays ``config/timerProgress``; but it keeps
those files as 5.3.3 would after reading the same units, so that a 5.x broker opening the store
delivers each timer rocketstore has not delivered (none lost), and repeats few it has:

* each unit a pass reads (:meth:`TimerService._pass`, in queue order, also one due already:
  a broker's recovery reads the timer queue on from the record of the last unit in its log) is
  appended to ``timerlog/`` in the slot of its deliver time, never rolled (5.3.3 rolls a unit
  due more than 2 days ahead into a nearer slot and re-puts the message when it comes;
  rocketstore re-puts nothing, so a rolled unit would be lost to a broker opening the store
  after that slot). The files are kept only while ``timer_max_delay_sec`` is at most 7 days,
  within the wheel's reach;
* the checkpoint (:class:`~rocketstore.queues.timerwheel.TimerWheelWriter.checkpoint`: the log
  synced, then the changed slots, then ``timercheck``) describes a state whose copies are
  durable: ``lastReadTimeMs`` the slot of the watermark W (or the next, when no waiting unit is
  in W's slot), the queue offsets its Q; it is written before the units read after that state
  are appended, at most once every 10 s while passes run (its syncs slow the CommitLog's flush
  that delivery waits for; the broker's own timerFlushIntervalMs is 1 s), and
  when the service closes;
* a broker taking over delivers again only the units rocketstore delivered from W's slot (a
  broker delivers a whole slot, rocketstore to the millisecond) and, after a crash no
  rocketstore open followed, those read or delivered since the last checkpoint;
* an open finds the end of the timer log (a torn last unit, one naming no timer record, is cut)
  and writes units for the waiting records it lacks (a crash lost them, or the store ran timers
  before rocketstore kept these files), from the first waiting unit on;
* retention deletes the old files as a broker does (:meth:`TimerService.delete_log_files`),
  never one holding a unit of a timer still waiting.

A record that cannot be delivered (REAL_TOPIC or REAL_QID unusable, ``TIMER_OUT_MS`` missing,
the record gone under retention, a copy too large) is logged, counted in ``dropped`` and passed
over, as a broker drops a message it cannot deliver.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import operator
import os
import struct
import threading
import weakref
from collections.abc import Callable
from typing import Any, Optional

import numpy as np

from rocketstore.base._checks import java_int
from rocketstore.base._clock import now_ms
from rocketstore.base._failurelog import FailureLog
from rocketstore.errors import InvalidMessageError, MessageNotFoundError
from rocketstore.message import (
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_KEY,
    SYSFLAG_HOSTS_V6,
    is_valid_topic,
)
from rocketstore.queues.timerwheel import (
    TIMER_PRECISION_MS,
    TimerWheelWriter,
    java_string_hash,
    read_timer_check,
    recall_key,
)
from rocketstore.services.parts import StoreParts
from rocketstore.services.schedule import (
    _UNIQ_KEY_EXTRA,
    PROPERTY_CRC32,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    _is_copy,
    java_hashmap_order,
)
from rocketstore.services.timerprogress import NO_KEY, TimerProgress, intent_units
from rocketstore.services.timerput import (
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
    TIMER_PROPERTIES,
    TIMER_TOPIC,
    TimerPuts,
    is_timer_put,
    java_long,
)

__all__ = [
    "TIMER_TOPIC",
    "PROPERTY_TIMER_DELIVER_MS",
    "PROPERTY_TIMER_DELAY_SEC",
    "PROPERTY_TIMER_DELAY_MS",
    "PROPERTY_TIMER_OUT_MS",
    "PROPERTY_TIMER_DEQUEUE_MS",
    "TIMER_PROPERTIES",
    "TimerProgress",
    "TimerService",
    "intent_units",
    "is_timer_put",
]

log = logging.getLogger("rocketstore.services.timer")

#: At most this many copies per pass (besides the late ones: new units due by the watermark),
#: and this many new units read per pass: as many as a pass can take, so that new units
#: already due are delivered at once, not pushed into the heap and popped again.
PASS_LIMIT = 16384
ENQUEUE_LIMIT = 16384
#: Units read (with their records' TIMER_OUT_MS) per codec call.
UNITS_PER_CALL = 4096
#: After a failed pass the thread waits this long before the next.
RETRY_AFTER_FAILURE_MS = 1000
FLUSH_TIMEOUT_MS = 10_000
_DELIVER_MS = operator.itemgetter(0)  # of a unit (deliver ms, queue offset, CommitLog offset)
#: rocketstore keeps RocketMQ 5.x's timer files (module docstring) when no timer can be due
#: further ahead than the wheel's TTL (7 days: half its ring of slots at 1 s precision)
WHEEL_REACH_MS = 7 * 86_400_000
#: at most one checkpoint of those files every 10 s (its syncs delay the CommitLog flushes a
#: pass waits for: at 1 s, the broker's timerFlushIntervalMs, timer lateness p99 rose) while
#: passes run, and one at close
WHEEL_CHECK_INTERVAL_MS = 10_000
#: the codec's timer_units ``facts``: deliver ms, offsetPy, sizePy, REAL_TOPIC's hash, magic
_FACT_DTYPE = np.dtype(
    [("deliver", ">i8"), ("offset", ">i8"), ("size", ">i4"), ("hash", ">i4"), ("magic", ">i4")]
)
_FACT = struct.Struct(">qqiii")


class TimerService(TimerPuts):
    """The timer service of one writable :class:`~rocketstore.MessageStore` (module docstring).
    Built by the store when it opens; it rebuilds its heap and settles an interrupted pass."""

    def __init__(
        self, parts: StoreParts, *, clock: Optional[Callable[[], int]] = None, interval_ms: int = 10
    ) -> None:
        self._parts = parts
        cfg = parts.config
        self.clock = clock or now_ms
        self.max_delay_ms = cfg.timer_max_delay_sec * 1000
        self._interval_ms = interval_ms
        self._progress = TimerProgress.in_store(parts.path)
        #: RocketMQ 5.x's timer checkpoint (config/timercheck), None when no broker kept timers
        #: here: rocketstore writes one too, so it is a broker's when the broker's timer metrics
        #: are there (rocketstore never writes them) or rocketstore has not run timers here yet
        #: (its own state, config/timerProgress, is always written before its first checkpoint)
        self._broker = read_timer_check(parts.path)
        progress = self._progress
        if (
            self._broker is not None
            and not os.path.exists(os.path.join(parts.path, "config", "timermetrics"))
            and progress.on_disk
        ):
            self._broker = None
        if self._broker is not None and not progress.on_disk:
            # Take over where the broker's timer stopped: the timer queue's units below its
            # queue offset are in its timer log, and it delivered every one due before its read
            # time (the next slot it would deliver); the others wait here.
            progress.enqueue_offset = max(0, self._broker.queue_offset)
            progress.watermark = (self._broker.read_time_ms - 1, (1 << 63) - 1)
        self._round_robin: dict[str, itertools.count[int]] = {}
        self._codec = parts.commitlog.codec
        self._lock = threading.Lock()  # one pass at a time
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._failures = FailureLog(log, "timer delivery", f"retried every {RETRY_AFTER_FAILURE_MS} ms")
        self._topic_ready = False
        born_v6 = ":" in (cfg.born_host or "")
        store_v6 = ":" in (cfg.store_host or "")
        self._host_extra = 12 * born_v6 + 12 * store_v6
        #: what timer_copies needs to know of a copy's record: host bytes, a generated
        #: UNIQ_KEY's bytes, the longest record allowed (max_message_size, a segment's room)
        self._room = (
            self._host_extra,
            _UNIQ_KEY_EXTRA,
            min(cfg.max_message_size, cfg.commitlog_file_size - 8),
        )
        #: counters: copies put, units passed over as undeliverable, passes settled after a
        #: crash or failure, copies such a settlement found already written (not written again)
        self.delivered = self.dropped = self.reconciled = self.resumed = 0
        self._next_due: Optional[int] = None
        self._heap: list[tuple[int, int, int]] = []
        #: the codec writes a pass's copies here (its memory reused pass after pass: fresh
        #: pages for each pass's rows measured a third of their cost)
        self._rows = bytearray()
        self._loaded = False
        self._uncommitted = False  # the file holds the last pass's intent, not its state after
        self._unflushed = 0  # where the last pass's copies end, until they are flushed
        #: RocketMQ 5.x's timer files, kept for a broker taking over (module docstring)
        self._wheel: Optional[TimerWheelWriter] = None
        self._wheel_on = self.max_delay_ms <= WHEEL_REACH_MS
        if not self._wheel_on:
            log.warning(
                "timer_max_delay_sec %d is beyond the RocketMQ timer wheel's reach (7 days): "
                "timerlog/, timerwheel and config/timercheck are not kept",
                cfg.timer_max_delay_sec,
            )
        self._wheel_q = 0  # the timer log holds units of the timer queue's records below it
        self._wheel_dirty = False  # units appended since the last checkpoint of those files
        self._wheel_checked = (self.clock(), (-1, -1))  # (clock, state) of that checkpoint
        self._wheel_state: tuple[int, int] = (-1, -1)
        self._write_ms = 0  # the broker's currWriteTimeMs: the clock rounded down, never back
        with self._lock:
            self._load()

    # ---- lifecycle ----

    def start(self) -> None:
        """Start the background thread (not when ``interval_ms`` is 0)."""
        if self._interval_ms and self._thread is None:
            self._thread = threading.Thread(
                target=_run,
                args=(weakref.ref(self), TimerService._tick, self._stop, self._wake),
                name="rocketstore-timer",
                daemon=True,
            )
            self._thread.start()

    def close(self) -> None:
        """Stop the thread (a pass in progress completes). Idempotent."""
        self._stop.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._lock:
            self._commit()
            self._wheel_sync(force=True)
            if self._wheel is not None:
                self._wheel.close()
                self._wheel = None

    def _tick(self) -> Optional[float]:
        """One pass of the background thread; the seconds until the next (None: until a timer
        put wakes it, in a store without the timer topic)."""
        if not self._has_timers():
            return None
        try:
            _delivered, more = self._pass(None)
        except Exception as exc:
            self._failures.failed(exc)
            return RETRY_AFTER_FAILURE_MS / 1000
        self._failures.succeeded()
        if more:
            return 0.0
        wait_ms = self._interval_ms
        if self._next_due is not None:
            wait_ms = min(wait_ms, max(0, self._next_due - self.clock()))
        return wait_ms / 1000

    def _has_timers(self) -> bool:
        """Whether this store has the timer topic (a timer message was ever put)."""
        if not self._topic_ready:
            self._topic_ready = self._parts.topics.table.get(TIMER_TOPIC) is not None
        return self._topic_ready

    def _queue(self) -> Any:
        return self._parts.queues.get(TIMER_TOPIC, 0)

    def _read_units(
        self, start: int, end: int, facts: Optional[bytearray] = None
    ) -> list[tuple[int, int, int]]:
        """``(deliver ms, queue offset, CommitLog offset)`` of the timer queue's units in
        [start, end) (placeholders left out); a unit's deliver time is its record's
        TIMER_OUT_MS, 0 (due now, dropped at delivery) when it has none or is gone. The codec
        reads a chunk of units and their records in one call (``timer_units``); a unit it
        cannot settle is read here, one record at a time. ``facts`` gains each unit's timer
        log facts (``_FACT``)."""
        cq = self._queue()
        commitlog = self._parts.commitlog
        out: list[tuple[int, int, int]] = []
        pos = max(start, cq.min_offset) if cq is not None else end
        if cq is not None and pos > start:
            log.warning("timer queue: units %d..%d are gone (removed)", start, pos)
        while cq is not None and pos < end:
            view = cq.units(pos, min(end - pos, UNITS_PER_CALL))
            if not len(view):
                break
            base = len(out)
            found, careful = self._codec.timer_units(view, pos, commitlog.segments, commitlog.core, facts)
            pos += len(view)
            del view
            for i in careful:
                deliver, queue_offset, commitlog_offset = found[i]
                if deliver is None:
                    deliver = self._deliver_time(commitlog_offset)
                found[i] = (deliver, queue_offset, commitlog_offset)
                if facts is not None:
                    self._careful_fact(facts, base + i, deliver, commitlog_offset)
            out += found
        return out

    def _careful_fact(self, facts: bytearray, row: int, deliver: int, commitlog_offset: int) -> None:
        """The timer log facts of a unit the codec left to the careful path."""
        try:
            props = self._parts.commitlog.read(commitlog_offset).properties or {}
        except MessageNotFoundError:
            props = {}
        topic = props.get(PROPERTY_REAL_TOPIC)
        _none, _offset, size, _hash, _magic = _FACT.unpack_from(facts, row * _FACT.size)
        topic_hash = java_string_hash(topic) if topic is not None else 0
        magic = 5 if recall_key(props) is not None else 1
        _FACT.pack_into(facts, row * _FACT.size, deliver, commitlog_offset, size, topic_hash, magic)

    # ---- RocketMQ 5.x's timer files ----

    def _open_wheel(self) -> Optional[TimerWheelWriter]:
        """The writer of RocketMQ's timer files, opened on first need (the lock is held): the
        timer log's end found, and units written for the records below the queue offset
        rocketstore read that it lacks (a crash lost them, or the store was written before
        rocketstore kept these files); None when they are not kept."""
        if self._wheel is None and self._wheel_on:
            commitlog = self._parts.commitlog

            def record(offset: int) -> Any:
                try:
                    rec = commitlog.read(offset)
                except MessageNotFoundError:
                    return None
                return rec if rec.topic == TIMER_TOPIC else None

            def valid(offset: int, size: int) -> bool:
                rec = record(offset)
                return rec is not None and rec.size == size

            wheel = TimerWheelWriter(self._parts.path, valid=valid)
            last = wheel.last_unit()
            rec = record(last[1]) if last is not None else None
            self._wheel, self._wheel_q = wheel, (rec.queue_offset + 1 if rec is not None else 0)
            # units for the records still waiting that the timer log lacks (those below the
            # first waiting one are delivered: a broker need not see them)
            start = max(self._wheel_q, self._first_pending())
            if start < self._enqueued:
                facts = bytearray()
                self._read_units(start, self._enqueued, facts)
                self._wheel_append(facts)
                self._wheel_q = self._enqueued
        return self._wheel

    def _wheel_append(self, facts: bytearray, skip: int = 0) -> None:
        """Append the units of ``facts`` (less the first ``skip``) to the timer log."""
        rows = np.frombuffer(facts, dtype=_FACT_DTYPE)[skip:]
        if not len(rows) or self._wheel is None:
            return
        p = TIMER_PRECISION_MS
        self._write_ms = max(self._write_ms, self.clock() // p * p)
        self._wheel.append(rows, self._write_ms)
        self._wheel_dirty = True

    def _wheel_add(self, facts: bytearray, new: list[tuple[int, int, int]], from_q: int, end: int) -> None:
        """Append the units of the records read in [from_q, end) (``new``, their ``facts``) the
        timer log does not hold yet."""
        skip = 0
        if self._wheel_q > from_q:  # a crash left units of these records: not twice
            skip = sum(1 for u in new if u[1] < self._wheel_q)
        self._wheel_append(facts, skip)
        self._wheel_q = max(self._wheel_q, end)

    def _read_time(self, w: tuple[int, int], pending_ms: Optional[int], whole: bool) -> int:
        """``lastReadTimeMs`` for a broker taking over: the slot of watermark ``w`` (every unit
        with a key at most ``w`` delivered; its slot may hold some not delivered), or, when
        ``whole`` (no pass in flight) and no unit waits in that slot (``pending_ms``: the
        smallest deliver ms waiting), the next; the slot of the first waiting unit before
        anything was delivered."""
        p = TIMER_PRECISION_MS
        if w == NO_KEY:
            base = pending_ms if pending_ms is not None else self._write_ms or self.clock()
            return base // p * p
        slot = w[0] // p * p
        if whole and (pending_ms is None or pending_ms >= slot + p):
            slot += p
        return slot

    def _wheel_checkpoint(self, read_time: int, queue_offset: int, force: bool) -> None:
        """Write RocketMQ's timer checkpoint (the lock is held): at most once every 10 s, its syncs
        in the writer's thread (not in the way of delivery), unless ``force`` (at close, at
        open); not when nothing changed."""
        wheel = self._wheel
        if wheel is None:
            return
        if not self._progress.on_disk:
            # rocketstore's state first: an open that finds a checkpoint and no state of
            # rocketstore's takes the checkpoint for a broker's (__init__)
            self._save_state()
        state = (read_time, queue_offset)
        if not self._wheel_dirty and state == self._wheel_state:
            return
        now = self.clock()
        if not force and 0 <= now - self._wheel_checked[0] < WHEEL_CHECK_INTERVAL_MS:
            return
        if not wheel.checkpoint(read_time, queue_offset, wait=force):
            return  # the last one still runs: a later pass writes this
        self._wheel_dirty = False
        self._wheel_state = state
        self._wheel_checked = (now, state)

    def _wheel_sync(self, force: bool) -> None:
        """The checkpoint of the state saved (no pass in flight; the lock is held)."""
        if self._wheel is not None and not self._uncommitted and not self._needs_reload:
            pending = self._heap[0][0] if self._heap else None
            self._wheel_checkpoint(self._read_time(self._watermark, pending, True), self._enqueued, force)

    def _deliver_time(self, commitlog_offset: int) -> int:
        """The TIMER_OUT_MS of the record at ``commitlog_offset``; 0 when it has none or is gone."""
        try:
            rec = self._parts.commitlog.read(commitlog_offset)
        except MessageNotFoundError:
            return 0
        return java_long((rec.properties or {}).get(PROPERTY_TIMER_OUT_MS)) or 0

    def _load(self) -> None:
        """Rebuild the heap from the progress file and the timer queue; settle an intent."""
        progress = self._progress
        if self._loaded:  # a reload after a failed pass: the file is the truth
            progress.load()
        self._loaded = True
        if self._has_timers() or progress.intent is not None:
            self._parts.dispatcher.catch_up()
        intent = progress.intent
        cq = self._queue()
        cap = cq.max_offset if cq is not None else 0  # a power cut may have taken units away
        if progress.enqueue_offset > cap or (intent is not None and intent["to"][0] > cap):
            log.warning("timer queue ends at %d, before the progress file's offsets: cut there", cap)
            progress.enqueue_offset = min(progress.enqueue_offset, cap)
            if intent is not None:
                intent["to"] = (min(intent["to"][0], cap), intent["to"][1])
        q = progress.enqueue_offset
        end = intent["to"][0] if intent is not None else q
        units = self._read_units(progress.first_pending, end)
        self._enqueued = q
        self._watermark = progress.watermark
        if intent is not None:
            self._roll_forward(units)
        w = self._watermark
        self._heap = [u for u in units if (u[0], u[1]) > w]
        if self._broker is not None:
            self._heap = self._without_recalled(self._heap)
        # the queue offsets of the heap's units (ascending: already a heap), and those of units
        # delivered since but not yet popped from it: the first pending unit, cheaply
        self._offsets = [u[1] for u in self._heap]
        self._gone: set[int] = set()
        heapq.heapify(self._heap)
        self._next_due = self._heap[0][0] if self._heap else None
        self._needs_reload = self._uncommitted = False
        if self._has_timers() and self._wheel is None and self._open_wheel() is not None:
            self._wheel_sync(force=True)  # only when it wrote units or the state moved

    def _without_recalled(self, units: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
        """``units`` less a 5.x broker's recalls (a record with ``TIMER_DEL_UNIQKEY``), the
        messages they recall (that ``REAL_TOPIC+UNIQ_KEY``), and all but the first unit of one
        message (a broker re-puts a timer further away than its wheel reaches when the wheel
        comes round to it)."""
        commitlog = self._parts.commitlog
        recalls: set[str] = set()
        named: list[tuple[tuple[int, int, int], Optional[str]]] = []
        for unit in units:
            try:
                props = commitlog.read(unit[2]).properties or {}
            except MessageNotFoundError:
                named.append((unit, None))  # delivery drops it, as before
                continue
            key = recall_key(props)
            if key is not None:
                recalls.add(key)
                continue
            uniq = props.get("UNIQ_KEY")
            named.append((unit, None if uniq is None else f"{props.get('REAL_TOPIC', '')}+{uniq}"))
        kept, seen = [], set()
        for unit, name in named:
            if name is not None:
                if name in recalls or name in seen:
                    continue
                seen.add(name)
            kept.append(unit)
        return kept

    def _first_pending(self) -> int:
        offsets, gone = self._offsets, self._gone
        while offsets and offsets[0] in gone:
            gone.discard(heapq.heappop(offsets))
        return offsets[0] if offsets else self._enqueued

    # ---- delivery ----

    def deliver(self, now: Optional[int] = None) -> int:
        """Deliver every timer message due at ``now`` (default: the clock); returns how many."""
        total = 0
        while True:
            delivered, more = self._pass(now)
            total += delivered
            if not more:
                with self._lock:
                    self._commit()  # (and RocketMQ's checkpoint, at most once every 10 s)
                return total

    def _pass(self, now: Optional[int]) -> tuple[int, bool]:
        """One pass: (copies put, more to do at once)."""
        with self._lock:
            if self._needs_reload:
                self._load()
            now = self.clock() if now is None else now
            if not self._has_timers():
                return 0, False  # no timer topic: nothing to read (and no dispatch started here)
            self._parts.dispatcher.catch_up()
            cq = self._queue()
            from_q, from_w = self._enqueued, self._watermark
            end = min(cq.max_offset, from_q + ENQUEUE_LIMIT) if cq is not None else from_q
            wheel = self._open_wheel()
            facts = bytearray() if wheel is not None and end > from_q else None
            new = self._read_units(from_q, end, facts) if end > from_q else []
            # an intent is settled from the units between its L and its new Q: those read in
            # this pass (from the old Q on) are among them, also a late one no heap holds
            from_first = min(self._first_pending(), from_q)
            taken, to_w = self._take(new, from_w, now)
            heap = self._heap
            self._enqueued = end
            self._watermark = to_w
            self._next_due = heap[0][0] if heap else None
            more = end < (cq.max_offset if cq is not None else end) or bool(heap and heap[0][0] <= now)
            if not taken:
                if facts:
                    self._wheel_add(facts, new, from_q, end)
                if self._uncommitted and not more:
                    self._commit()  # idle: the previous pass's state replaces its intent
                elif not self._uncommitted:
                    self._wheel_sync(force=False)
                return 0, more  # only new units read: the file need not change (module docstring)
            self._needs_reload = True  # until the copies are durable: the file is the truth
            progress = self._progress
            used, topics, items, count = self._copies(taken, now)
            core = self._parts.commitlog.core
            self._settle()  # the last pass's copies are durable before its intent is replaced
            progress.enqueue_offset, progress.watermark, progress.first_pending = from_q, from_w, from_first
            progress.intent = {
                "commitlogOffset": core.wrote_offset,
                "dequeueMs": now,
                "done": 0,
                "fromOffset": from_q,
                "fromTimeMs": from_w[0],
                "fromQueueOffset": from_w[1],
                "to": (end, to_w),
            }
            progress.persist()
            if wheel is not None:
                # RocketMQ's checkpoint of the state before this pass (durable now), then the
                # units read in this pass: the checkpoint never names a unit after its queue
                # offset (module docstring)
                pending = min(taken[0][0], heap[0][0]) if heap else taken[0][0]
                self._wheel_checkpoint(self._read_time(from_w, pending, False), from_q, False)
                if facts:
                    self._wheel_add(facts, new, from_q, end)
            if count:
                with memoryview(self._rows)[:used] as rows:  # released here: _rows may grow
                    core.put_copies(rows, topics, items)  # stores all or raises a PutError
                # Flushed while the next pass reads and builds its copies: _settle() waits for
                # it before anything depends on these copies being durable (the next intent, the
                # state after this pass, deliver() returning).
                self._unflushed = core.wrote_offset
                core.request_flush(self._unflushed)
            # The state after this pass is saved with the next pass's intent, or when the
            # service is idle, closes or deliver() returns: one fdatasync per pass, not two.
            self._uncommitted = True
            self._needs_reload = False
            self.delivered += count
            return count, more

    def _settle(self) -> None:
        """Wait for the flush of the last pass's copies (the lock is held); a failed or
        timed-out flush raises, and the next pass rolls that pass forward from the file."""
        target, self._unflushed = self._unflushed, 0
        if target and self._parts.commitlog.core.wait_flushed(target, FLUSH_TIMEOUT_MS) != 0:
            self._needs_reload = True
            raise RuntimeError("timer delivery: the CommitLog flush timed out")

    def _take(
        self, new: list[tuple[int, int, int]], from_w: tuple[int, int], now: int
    ) -> tuple[list[tuple[int, int, int]], tuple[int, int]]:
        """(the units a pass delivers, in order, and its new watermark): every unit of ``new``
        (read from the old Q on) with a key at most ``from_w``, then the smallest keys due at
        ``now`` among the waiting and the other new units, at most PASS_LIMIT; the new units
        not taken join the heap. The same as pushing every new unit and popping the due ones,
        without the heap for the new units taken at once."""
        # ``new`` is in queue order: a stable sort by deliver ms puts each part in key order.
        # (A new unit's queue offset is past W's unless a power cut took units of the queue
        # away: the key is compared whole.)
        w_ms, w_offset = from_w
        late = [u for u in new if u[0] < w_ms or (u[0] == w_ms and u[1] <= w_offset)]
        if late:
            new = [u for u in new if u[0] > w_ms or (u[0] == w_ms and u[1] > w_offset)]
        fresh = [u for u in new if u[0] <= now]
        later = [u for u in new if u[0] > now] if len(fresh) < len(new) else []
        late.sort(key=_DELIVER_MS)
        fresh.sort(key=_DELIVER_MS)
        heap, gone, taken = self._heap, self._gone, late
        room, i, n = PASS_LIMIT, 0, len(fresh)
        while room:
            if heap and heap[0][0] <= now:
                if i < n and fresh[i] < heap[0]:
                    u = fresh[i]
                    i += 1
                else:
                    u = heapq.heappop(heap)
                    gone.add(u[1])
            elif i < n:  # none waiting is due: the rest of fresh, in one step
                stop = min(n, i + room)
                taken += fresh[i:stop]
                u = fresh[stop - 1]
                room -= stop - i
                i = stop
                break
            else:
                break
            taken.append(u)
            room -= 1
        to_w = (u[0], u[1]) if room < PASS_LIMIT else from_w
        rest = fresh[i:] + later
        if len(rest) > len(heap):  # many at once: one heapify instead of a push each
            heap += rest
            heapq.heapify(heap)
            self._offsets += [r[1] for r in rest]
            heapq.heapify(self._offsets)
        else:
            for r in rest:
                heapq.heappush(heap, r)
                heapq.heappush(self._offsets, r[1])
        return taken, to_w

    def _copies(self, units: list[tuple[int, int, int]], dequeue_ms: int) -> tuple[Any, ...]:
        """The copies of ``units`` for the core's ``put_copies`` (the undeliverable left out,
        logged and counted): ``(the length of the rows in _rows, topics, items, how many)``,
        built by the codec in one call (``timer_copy_rows``, no Python object per copy), each it
        leaves (an unusual record) by :meth:`_copy` as a put_many item in ``items``."""
        commitlog = self._parts.commitlog
        used, topics, careful = self._codec.timer_copy_rows(
            [u[2] for u in units],
            commitlog.segments,
            commitlog.core,
            dequeue_ms,
            self._real_topic,
            _ORDER_INDICES,
            _order_indices,
            self._room,
            self._rows,
        )
        items = []
        for i in careful:
            copy = self._copy(units[i], dequeue_ms)
            items.append(copy[0] if copy is not None else None)
        return used, topics, items, len(units) - items.count(None)

    def _real_topic(self, raw: bytes) -> Optional[tuple[str, int]]:
        """(topic, its queue count) of a REAL_TOPIC value that can be delivered to, else None
        (:meth:`_copy` then says why)."""
        topic = raw.decode("utf-8", "surrogateescape")
        if not is_valid_topic(topic) or topic == TIMER_TOPIC:
            return None
        return topic, self._parts.topics.queues_for_put(topic)

    def _commit(self) -> None:
        """Save the state after the last pass in place of its intent (the lock is held)."""
        if not self._uncommitted or self._needs_reload:
            return
        self._settle()
        self._needs_reload = True
        self._save_state()
        self._needs_reload = self._uncommitted = False
        self._wheel_sync(force=False)

    def _save_state(self) -> None:
        """Write the state this service holds (no pass in flight) into config/timerProgress."""
        self._progress.set_state(self._enqueued, self._watermark, self._first_pending())
        self._progress.persist()

    def _copy(
        self, unit: tuple[int, int, int], dequeue_ms: int, rec: Any = None
    ) -> Optional[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        """(the put_many item, the identity of the copy) of one timer unit (``rec``: its record,
        if read already); None (logged, counted) when it cannot be delivered."""
        deliver_ms, queue_offset, commitlog_offset = unit
        parts = self._parts
        if rec is None:
            try:
                rec = parts.commitlog.read(commitlog_offset)
            except MessageNotFoundError:
                return self._drop(queue_offset, commitlog_offset, "the record is gone")
        props = rec.properties or {}
        topic = props.get(PROPERTY_REAL_TOPIC)
        queue_id = java_int(props.get(PROPERTY_REAL_QUEUE_ID))
        if rec.topic != TIMER_TOPIC:
            return self._drop(queue_offset, commitlog_offset, f"the record is in {rec.topic!r}")
        if topic is None or not is_valid_topic(topic) or topic == TIMER_TOPIC:
            return self._drop(queue_offset, commitlog_offset, f"REAL_TOPIC {topic!r} is not a topic")
        if queue_id is None or queue_id < 0:
            return self._drop(
                queue_offset, commitlog_offset, f"REAL_QID {props.get(PROPERTY_REAL_QUEUE_ID)!r}"
            )
        if queue_id >= parts.topics.queues_for_put(topic):
            return self._drop(queue_offset, commitlog_offset, f"REAL_QID {queue_id} is outside {topic!r}")
        if java_long(props.get(PROPERTY_TIMER_OUT_MS)) is None:
            return self._drop(queue_offset, commitlog_offset, "it has no TIMER_OUT_MS")
        kept = {
            k: v
            for k, v in props.items()
            if k not in (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID, PROPERTY_CRC32)
        }
        kept[PROPERTY_TIMER_DEQUEUE_MS] = str(dequeue_ms)
        copy_props = {k: kept[k] for k in _hashmap_order(tuple(kept))}
        try:
            raw = parts.commitlog.codec.encode_properties(copy_props)
        except InvalidMessageError as exc:
            return self._drop(queue_offset, commitlog_offset, str(exc))
        body = bytes(rec.stored_body)  # a compressed body stays as the producer stored it
        unique_key = copy_props.get(PROPERTY_UNIQ_KEY)
        length = (
            91
            + len(body)
            + len(topic.encode("utf-8"))
            + len(raw)
            + self._host_extra
            + (0 if unique_key is not None else _UNIQ_KEY_EXTRA)
        )
        if length > parts.config.max_message_size or length + 8 > parts.config.commitlog_file_size:
            return self._drop(queue_offset, commitlog_offset, f"its copy would be a {length}-byte record")
        item = (
            topic,
            body,
            raw,
            queue_id,
            rec.flag,
            rec.born_timestamp,
            rec.sys_flag & ~SYSFLAG_HOSTS_V6,
            rec.reconsume_times,
            unique_key,
        )
        identity = (topic, queue_id, body, copy_props, rec.born_timestamp, rec.reconsume_times, rec.flag)
        return item, identity

    def _drop(
        self, queue_offset: int, commitlog_offset: int, why: str
    ) -> Optional[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        self.dropped += 1
        log.error(
            "timer unit %d (record %d) cannot be delivered, passed over: %s",
            queue_offset,
            commitlog_offset,
            why,
        )
        return None

    # ---- crash recovery ----

    def _roll_forward(self, units: list[tuple[int, int, int]]) -> None:
        """Finish the pass the progress file's intent names (module docstring); ``units`` are
        the timer units from the first pending one to the intent's new Q."""
        progress = self._progress
        intent = progress.intent
        assert intent is not None
        to_q, to_w = intent["to"]
        dequeue_ms = intent["dequeueMs"]
        taken = intent_units(units, intent)
        done = min(intent["done"], len(taken))
        copies = [self._copy(u, dequeue_ms) for u in taken[done:]]
        expected = [c[1] if c is not None else None for c in copies]
        matched = self._match(intent["commitlogOffset"], expected)
        core = self._parts.commitlog.core
        missing = [c[0] for c in copies[matched:] if c is not None]
        found = sum(1 for e in expected[:matched] if e is not None)
        if missing:
            progress.intent = dict(intent, commitlogOffset=core.wrote_offset, done=done + matched)
            progress.persist()
            core.put_many(missing, 0)
        if not core.flush(FLUSH_TIMEOUT_MS):
            raise RuntimeError("timer delivery: the CommitLog flush timed out")
        self._enqueued, self._watermark = to_q, to_w
        rest = [u for u in units if (u[0], u[1]) > to_w]
        progress.set_state(to_q, to_w, min((u[1] for u in rest), default=to_q))
        progress.persist()
        self.reconciled += 1
        self.resumed += found
        self.delivered += len(missing)
        log.warning(
            "timer delivery: settled an interrupted pass: %d copies were written, %d written now",
            found,
            len(missing),
        )

    def _match(self, start: int, expected: list[Any]) -> int:
        """How many entries of ``expected`` lead the copies found from CommitLog ``start`` on
        (``None`` entries stand for no copy and are passed over)."""
        commitlog = self._parts.commitlog
        j = 0

        def skip_none(j: int) -> int:
            while j < len(expected) and expected[j] is None:
                j += 1
            return j

        j = skip_none(j)
        if j == len(expected) or start >= commitlog.core.wrote_offset:
            return j
        for mf, rows in commitlog.chunks(start, None):
            view = mf.view(0, commitlog.readable_end(mf))
            for row in rows:
                rec = commitlog.codec.record_from_row(view, row, copy_body=True)
                if _is_copy(rec, expected[j]):
                    j = skip_none(j + 1)
                    if j == len(expected):
                        return j
        return j

    # ---- retention ----

    def delete_log_files(self, commitlog_min: int) -> int:
        """Delete the timer log files (RocketMQ's ``timerlog/``) whose every unit names a record
        below both ``commitlog_min`` (the CommitLog's min offset: retention deleted the record)
        and the record of the first timer still waiting or not read yet, as a 5.x broker
        deletes them (:meth:`TimerWheelWriter.delete_files_below`, which also keeps the files a
        broker's recovery reads); returns how many went. None goes while the files are not
        kept here (a store that never had a timer, or ``timer_max_delay_sec`` beyond the
        wheel), after a failed pass (the next pass reloads the state first), or while the first
        waiting timer's unit in the timer queue is gone (no bound is known then)."""
        with self._lock:
            wheel = self._wheel
            if wheel is None or self._needs_reload:
                return 0
            bound = commitlog_min
            cq = self._queue()
            first = self._first_pending()  # waiting, or the first not read yet
            if cq is not None and first < cq.max_offset:
                # the timer queue's records are in CommitLog order: none waits below this one's
                try:
                    unit = cq.units(first, 1)
                except MessageNotFoundError:
                    return 0  # its unit is gone (under retention): no bound known, none deleted
                if not len(unit):
                    return 0
                bound = min(bound, int(unit["commitlog_offset"][0]))
                del unit
            return len(wheel.delete_files_below(bound))

    # ---- state ----

    def stats(self) -> dict[str, Any]:
        """Timer messages waiting, the next deliver time, and the counters."""
        with self._lock:
            if self._needs_reload:
                self._load()
            if self._has_timers():
                self._parts.dispatcher.catch_up()
            cq = self._queue()
            unread = (cq.max_offset if cq is not None else 0) - self._enqueued
            return {
                "pending": len(self._heap) + max(0, unread),
                "next_deliver_ms": self._next_due,
                "delivered": self.delivered,
                "dropped": self.dropped,
                "reconciled": self.reconciled,
                "resumed": self.resumed,
            }


_ORDERS: dict[tuple[str, ...], list[str]] = {}
#: timer_copies' cache: a copy's property names (\x01-joined bytes) -> _order_indices of them
_ORDER_INDICES: dict[bytes, tuple[int, ...]] = {}


def _order_indices(names: tuple[str, ...]) -> tuple[int, ...]:
    """The order of a copy's properties: the positions in ``names + (TIMER_DEQUEUE_MS,)`` (the
    kept names, in the record's order, then the one added) of the Java HashMap's order."""
    keys = (*names, PROPERTY_TIMER_DEQUEUE_MS)
    where = {key: i for i, key in enumerate(keys)}
    return tuple(where[key] for key in java_hashmap_order(keys))


def _hashmap_order(keys: tuple[str, ...]) -> list[str]:
    """:func:`~rocketstore.services.schedule.java_hashmap_order`, remembered per key sequence (the copies
    of one producer's messages share it)."""
    order = _ORDERS.get(keys)
    if order is None:
        if len(_ORDERS) >= 4096:
            _ORDERS.clear()
        order = _ORDERS[keys] = java_hashmap_order(keys)
    return order


def _run(
    ref: Callable[[], Optional[TimerService]],
    tick: Callable[[TimerService], Optional[float]],
    stop: threading.Event,
    wake: threading.Event,
) -> None:
    """The thread: a pass (``tick``), then wait for its wait time (None: for ever) or a wake-up;
    holds the service only during a pass (a dropped store is still collected)."""
    wait: Optional[float] = 0.0
    while not stop.is_set():
        wake.wait(wait)
        wake.clear()
        if stop.is_set():
            return
        service = ref()
        if service is None:
            return
        wait = tick(service)
        del service
