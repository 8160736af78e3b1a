"""An open of a store, in order: the files it reads, recovery (rocketstore.log.recovery), the
queues and the index, and a writable store's append core and services (rocketstore.services).

:func:`open_parts` fills an :class:`OpenedParts` as it goes, so that when a step fails the
caller still holds, and closes, every part the steps before it opened. The facade
(rocketstore.storebase) takes the parts from it, then :func:`start_services` starts a writable
store's services, whose threads may put at once; what the parts call back into the facade (a
put of a service's own records, POP's pulls and lookups, the topic of a put) it passes in.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, Optional

from rocketstore.base._background import weak_method
from rocketstore.config import StoreConfig, config_from_options
from rocketstore.errors import StoreClosedError, StoreConfigError
from rocketstore.files._files import fsync_dir, open_regular, raise_open_files_limit
from rocketstore.files.checkpoint import Checkpoint
from rocketstore.files.configfiles import ConsumerOffsetTable, TopicConfigTable
from rocketstore.files.storedir import detect_segment_size, writer_present
from rocketstore.log import recovery, sharedappend
from rocketstore.log.commitlog import AppendCore, CommitLog
from rocketstore.processes.live import GEOMETRY_OPTIONS, Follower, LivePage, PutWaits, read_geometry
from rocketstore.queues.batchcq import BCQ_UNIT_SIZE, BatchQueueStore, batch_topics
from rocketstore.queues.checkpointing import Checkpointer
from rocketstore.queues.compaction import CompactedReads
from rocketstore.queues.cqstore import ConsumeQueueStore
from rocketstore.queues.dispatch import Dispatcher, DispatchThread, MemoryIndexService, TailQueueStore
from rocketstore.queues.indexservice import IndexService, detect_queue_options
from rocketstore.queues.lookups import KeyLookups
from rocketstore.queues.queuecheck import QueueGuard
from rocketstore.services.compaction import Compactor
from rocketstore.services.parts import StoreParts
from rocketstore.services.pop import PopService, QuickPull
from rocketstore.services.retention import Cleaner
from rocketstore.services.schedule import ScheduleService
from rocketstore.services.timer import TimerService
from rocketstore.services.topics import Topics

__all__ = ["OpenedParts", "detect_config", "open_parts", "start_services", "close_parts"]

_log = logging.getLogger("rocketstore.store")  # (the name users configure)


def detect_config(path: str, options: Mapping[str, Any], read_only: bool) -> StoreConfig:
    """The ``options`` given, and the geometry the files of the store at ``path`` were written
    with (a read-only open: what the files cannot tell yet, its writer's live page does)."""
    found = dict(options)
    if "commitlog_file_size" not in found:
        detected = detect_segment_size(os.path.join(path, "commitlog"))
        if detected is not None:
            found["commitlog_file_size"] = detected
    detect_queue_options(path, found)
    if read_only:
        # a page torn by a power cut says nothing (it holds no durable state)
        page = {name: value for name, value in read_geometry(path).items() if name not in found}
        if page:
            try:
                return _configured({**found, **page})
            except StoreConfigError:
                _log.warning("%s: the live page's geometry is not valid; not used", path)
    return _configured(found)


def _configured(found: dict[str, Any]) -> StoreConfig:
    config = config_from_options(found)
    if config.raise_open_files_limit:
        raise_open_files_limit()  # before the store maps its files
    return config


def _closed() -> NoReturn:
    raise StoreClosedError("the store is closed")


class OpenedParts:
    """What one open set up, each None until it is (a failed open's caller closes what is set).

    Files and logs: ``checkpoint``, ``topics`` (rocketstore.services.topics.Topics),
    ``commitlog`` and its ``segments``, ``offsets`` (consumerOffset.json), ``live`` (the live
    page) and ``follower`` (a read-only store's). Queues: ``queues``, ``index`` (and a read-only
    store's ``disk_index``, the files on disk, when ``index`` is what it dispatched into memory),
    ``batch`` (the BatchConsumeQueues), ``dispatcher``, ``guard``, ``lookups``, and
    ``short_queues`` (a read-only open's queues that end before their records: rebuilt in
    memory). A writable store's ``core``, ``checkpointer``, ``dispatch_thread``, ``parts`` and
    services ``cleaner``, ``schedule``, ``timer``, ``pop``; a read-only store's
    ``queue_offsets`` (where each queue's records end) and ``core`` (its CommitLog's reader)."""

    def __init__(self, path: str, config: StoreConfig, read_only: bool) -> None:
        self.path = path
        self.config = config
        self.read_only = read_only
        self.abort_path = os.path.join(path, "abort")
        self.last_shutdown_clean = not os.path.exists(self.abort_path)
        self.checkpoint: Checkpoint = None  # type: ignore[assignment]
        self.topics: Topics = None  # type: ignore[assignment]
        self.commitlog: CommitLog = None  # type: ignore[assignment]
        self.segments: Any = None
        self.live: Optional[LivePage] = None
        self.follower: Optional[Follower] = None
        self.queues: Any = None
        self.index: Any = None
        self.disk_index: Any = None
        self.batch: Any = None
        #: the pulls below a compacted topic's min offset (rocketstore.queues.compaction)
        self.compacted_reads: Optional[CompactedReads] = None
        self.offsets: ConsumerOffsetTable = None  # type: ignore[assignment]
        self.queue_offsets: dict[tuple[str, int], int] = {}
        self.short_queues: dict[tuple[str, int], int] = {}
        self.core: AppendCore = None  # type: ignore[assignment]
        self.dispatcher: Any = None
        self.guard: QueueGuard = None  # type: ignore[assignment]
        self.lookups: KeyLookups = None  # type: ignore[assignment]
        self.checkpointer: Checkpointer = None  # type: ignore[assignment]
        self.dispatch_thread: Any = None
        self.parts: StoreParts = None  # type: ignore[assignment]
        self.cleaner: Any = None
        self.schedule: Any = None
        self.timer: Any = None
        self.pop: Optional[PopService] = None
        #: the waits for puts (rocketstore.processes.live.PutWaits), which the store makes
        self.waits: Optional[PutWaits] = None


def _segments_deleted(opened_ref: Callable[[], Optional[OpenedParts]]) -> None:
    """A read-only store's follower dropped segments retention deleted: the queues start above
    them (what a writable store's Cleaner does for its own queues)."""
    opened = opened_ref()
    if opened is None or not opened.commitlog.files:
        return
    low = opened.commitlog.min_offset
    dispatcher = opened.dispatcher
    with dispatcher.lock:
        if dispatcher.offset < low:
            dispatcher.offset = low  # what it had not dispatched yet is gone
    opened.queues.correct_min_offset(low)


def open_parts(
    opened: OpenedParts,
    impl: Any,
    mutex: threading.RLock,
    *,
    report: Callable[[str, int, int], None],
    uniq_prefix: bytes,
    topic_lookup: Callable[[str], int],
) -> None:
    """Open the store ``opened`` describes, filling it part by part: map the CommitLog, recover
    it, open the queues and the index, and start a writable store's append core and dispatch
    (its services: :func:`start_services`). ``report(stage, done, total)`` follows recovery;
    ``topic_lookup(topic)`` is the facade's queue count of a put's topic (a weak method: no part
    keeps the store alive).

    No part refers to ``opened``: the parts are freed, their files closed, as soon as the store
    drops them, not at the next garbage collection."""
    cfg, path, read_only = opened.config, opened.path, opened.read_only
    codec = impl.codec
    if not read_only:
        # Writers that joined an owner gone by now append nothing from here (they send their
        # puts here once this open serves them); one appending now finishes first.
        sharedappend.invalidate(path)
        # From here until a clean close, an interruption (a crash, a kill during this very
        # recovery) makes the next open an abnormal one.
        os.close(open_regular(opened.abort_path, os.O_WRONLY | os.O_CREAT, "abort file"))
        if opened.last_shutdown_clean:
            # durable before anything this run writes: a power cut that kept the run's data
            # but lost the file would make the next open a clean one, which trusts the
            # queues and the index as they are on disk
            fsync_dir(path)
    opened.checkpoint = Checkpoint(os.path.join(path, "checkpoint"))
    opened.topics = Topics(
        TopicConfigTable.in_store(path, cfg.default_queues, read_only), cfg.default_queues, mutex
    )
    opened.commitlog = commitlog = CommitLog(os.path.join(path, "commitlog"), cfg, impl, read_only=read_only)
    opened.compacted_reads = CompactedReads(path, commitlog.codec.decode_record)
    opened.segments = commitlog.segments
    if read_only:
        # the writer's live page before anything is loaded: what it says next is newer
        opened.live = LivePage.attach(path, impl.store)
        if opened.live is not None:
            opened.follower = Follower(
                opened.live, commitlog, functools.partial(_segments_deleted, weakref.ref(opened))
            )
        # Queues and index first: a writer's retention deletes segments before the queue
        # and index files that point into them, so every segment found after these has
        # its units and index entries here (or dispatched into memory).
        _open_queues(opened, impl)
        commitlog.load()
    else:
        commitlog.load()
        _open_queues(opened, impl)
    opened.offsets = ConsumerOffsetTable.in_store(
        path,
        read_only=read_only,
        lock=codec.FastRLock(),  # every POP ack takes it
    )
    if not read_only:
        opened.offsets.import_group_offsets(path)
    end, queue_offsets, dispatch_start = recovery.recover(
        commitlog,
        opened.checkpoint,
        opened.queues,
        opened.disk_index if read_only else opened.index,
        abnormal=not opened.last_shutdown_clean,
        read_only=read_only,
        until=recovery.published_end(opened.live, path) if read_only else None,
        report=report,
    )
    batch = opened.batch
    for bq in batch:  # nothing past the recovered end is read
        bq.truncate(end)
    queue_offsets_mended = batch.without_batch_topics(queue_offsets)
    if read_only:
        opened.queue_offsets = queue_offsets
        opened.core = commitlog.core
        batch.mend(queue_offsets, end)  # and nothing before it is missed
        opened.lookups = KeyLookups(codec, commitlog, None, (opened.disk_index, opened.index))
        opened.dispatcher = _dispatcher(
            opened, impl, dispatch_start, end_of=lambda: commitlog.end, index_lazily=True, end_core=commitlog
        )
        opened.guard = QueueGuard(commitlog, opened.queues, opened.dispatcher, cfg.delay_levels_ms, True)
        recovery.rebuild(opened.dispatcher, end, report)
        opened.short_queues = recovery.repair_holes(opened.queues, opened.guard, queue_offsets_mended, True)
        if opened.follower is not None:
            opened.follower.settle(commitlog.end, writer_present(path))
        return

    opened.core = core = commitlog.start_appending(
        end,
        queue_offsets,
        uniq_prefix,
        topic_lookup=topic_lookup,
        roll=weak_method(commitlog.roll, _closed),
    )
    opened.topics.core = core
    batch.mend(queue_offsets, end)  # and nothing before it is missed
    # (the files made to hold what recovery kept and mended)
    batch.write_files(codec, cfg.broker_cluster_name, cfg.batch_queue_units * BCQ_UNIT_SIZE)
    for bq in batch:  # a batch record takes as many queue offsets as it has messages
        core.set_queue_offset(bq.topic, bq.queue_id, bq.max_offset)
    opened.lookups = KeyLookups(codec, commitlog, core, (None, opened.index))
    opened.live = live = LivePage.create(
        path,
        impl.store,
        end,
        crashed=not opened.last_shutdown_clean,
        geometry=tuple(getattr(cfg, name) for name in GEOMETRY_OPTIONS),
    )
    core.set_live(live.mm)
    commitlog.on_deleted = live.changed
    opened.dispatcher = dispatcher = _dispatcher(
        opened,
        impl,
        dispatch_start,
        end_of=lambda: core.wrote_offset,
        fused=cfg.fused_dispatch,
        end_core=core,
    )
    opened.checkpointer = Checkpointer(
        opened.checkpoint, core, dispatcher, opened.queues, opened.index, opened.offsets, path
    )
    opened.checkpointer.batch = batch
    opened.guard = QueueGuard(commitlog, opened.queues, dispatcher, cfg.delay_levels_ms, False)
    # what the queues and the index miss of the CommitLog
    recovery.rebuild(dispatcher, end, report, opened.checkpointer.save, opened.queues.start_flush)
    opened.short_queues = recovery.repair_holes(opened.queues, opened.guard, queue_offsets_mended, False)
    recovery.settle_queue_offsets(core, opened.queues, queue_offsets_mended)
    if cfg.dispatch_interval_ms:
        opened.dispatch_thread = DispatchThread(
            dispatcher,
            cfg.dispatch_interval_ms,
            checkpoint=opened.checkpointer.background,
            checkpoint_interval_ms=cfg.checkpoint_interval_ms,
        )


def start_services(
    opened: OpenedParts,
    *,
    put_message: Callable[..., Any],
    pop_pull: Callable[..., Any],
    pop_lookup: Callable[..., Any],
) -> None:
    """Start the services of the writable store :func:`open_parts` opened (retention, delay,
    timers, POP), once the facade took the parts: their threads may put at once. The callables
    are the facade's (weak methods) the services call."""
    cfg, core, dispatcher = opened.config, opened.core, opened.dispatcher
    opened.parts = parts = StoreParts(
        opened.path,
        cfg,
        opened.commitlog,
        opened.queues,
        opened.index,
        dispatcher,
        opened.topics,
        put_message,
        opened.offsets,
        opened.batch,
    )
    opened.cleaner = Cleaner(
        parts, clock=cfg.clock, compactor=Compactor(parts, opened.commitlog.codec.decode_record)
    )
    opened.cleaner.start()
    opened.schedule = ScheduleService(parts, clock=cfg.clock, interval_ms=cfg.schedule_interval_ms)
    opened.schedule.start()
    opened.timer = TimerService(parts, clock=cfg.clock, interval_ms=cfg.timer_interval_ms)
    opened.cleaner.timer_log = opened.timer.delete_log_files
    opened.timer.start()
    opened.pop = PopService(
        parts,
        opened.offsets,
        pull=pop_pull,
        lookup=pop_lookup,
        send_back=opened.schedule.send_back,
        retry_max_times=opened.schedule.retry_max_times,
        clock=cfg.clock,
        quick=QuickPull(opened.queues, opened.segments, core, dispatcher.catch_up),
    )


def _dispatcher(opened: OpenedParts, impl: Any, start: int, **options: Any) -> Dispatcher:
    """The dispatcher of ``opened``'s queues and index from CommitLog offset ``start``."""
    return Dispatcher(
        opened.segments,
        impl.codec,
        impl.scan,
        opened.queues,
        opened.index,
        start=start,
        delay_levels_ms=opened.config.delay_levels_ms,
        batch=opened.batch,
        **options,
    )


def _open_queues(opened: OpenedParts, impl: Any) -> None:
    """Open the ConsumeQueues (recovered, §4.4) and the index files.

    A read-only store reads what is on disk and dispatches the rest into memory. After an
    abnormal shutdown a writable store drops the index files newer than the checkpoint's
    indexMsgTimestamp (§5.4); they are rebuilt from the CommitLog.
    """
    cfg, path = opened.config, opened.path
    index_options = dict(implementation=impl.name, slot_count=cfg.index_slots, index_count=cfg.index_count)
    table = opened.topics.table
    opened.batch = BatchQueueStore(
        path,
        batch_topics(path, {t: table.attributes(t) for t in table.topics}),
        opened.commitlog,
    )
    checkpoint = opened.checkpoint
    if opened.read_only:
        opened.queues = TailQueueStore(path, cfg.consume_queue_units)
        opened.queues.recover()
        opened.disk_index = IndexService(path, read_only=True, **index_options)
        # a crashed store no writer holds: its index as the resume point made it durable
        opened.disk_index.load(
            not opened.last_shutdown_clean and not writer_present(path),
            checkpoint.index_msg_timestamp,
            checkpoint.confirm_phy_offset,
        )
        opened.index = MemoryIndexService(path, **index_options)
    else:
        opened.queues = ConsumeQueueStore(path, cfg.consume_queue_units)
        if opened.last_shutdown_clean:
            for cq in opened.queues:
                cq.recover()
        # after an abnormal stop recovery.recover() cuts each queue where the checkpoint vouches for
        opened.index = IndexService(path, on_file_full=_index_file_full(checkpoint), **index_options)
        opened.index.load(not opened.last_shutdown_clean, checkpoint.index_msg_timestamp)


def _index_file_full(checkpoint: Checkpoint) -> Callable[[int], None]:
    """The index's call when a file fills: the checkpoint's indexMsgTimestamp is its end time."""

    def full(end_timestamp: int) -> None:
        checkpoint.index_msg_timestamp = end_timestamp

    return full


def close_parts(
    opened: Optional[OpenedParts],
    clean: bool,
    run: Callable[[Callable[[], object]], bool],
    after_core: Callable[[], object],
) -> bool:
    """Stop and close every part ``opened`` holds, in the order that keeps the data safe, each
    whatever the others raised: ``run(step)`` runs one step, keeps what it raised and says
    whether it succeeded. ``clean``: a close (dispatch the rest, then, if the CommitLog, the
    queues and the index are durable, write the checkpoint, topics.json and consumerOffset.json
    and remove the abort file); else a failed open or a reopen (the abort file stays).
    ``after_core`` runs once the append core is closed (the joined writers' shared table);
    The waits for puts (and the asyncio waiters' thread) end before the live page closes.
    Returns whether the data was closed durable."""
    if opened is None:  # (the open failed before it made its parts)
        run(after_core)
        return False
    for service in (opened.timer, opened.schedule, opened.pop):
        if service is not None:
            run(service.close)
    for thread in (opened.cleaner, opened.dispatch_thread):
        if thread is not None:
            run(thread.stop)
    writable = not opened.read_only
    core = opened.core
    durable = clean and writable and core is not None
    if durable:
        durable = run(opened.dispatcher.catch_up)
    if writable and core is not None:
        durable = run(core.close) and durable
    run(after_core)
    durable = run(lambda: _close_queues(opened)) and durable  # flushes the queues and the index
    if durable:
        durable = run(opened.checkpointer.final)
        run(lambda: opened.offsets.import_group_offsets(opened.path))
        for table in (opened.topics, opened.offsets):
            run(table.persist)  # the data is closed cleanly all the same
    if opened.commitlog is not None:
        run(opened.commitlog.close)
    for page in (opened.waits, opened.live):
        if page is not None:
            run(page.close)
    if durable:
        run(lambda: _remove_file(opened.abort_path))
    return durable


def _close_queues(opened: OpenedParts) -> None:
    """Close the ConsumeQueues and the index files, each whatever the others raised."""
    error = None
    for part in (opened.queues, opened.batch, opened.index, opened.disk_index, opened.compacted_reads):
        if part is not None:
            try:
                part.close()
            except BaseException as exc:
                error = error or exc
    if error is not None:
        raise error


def _remove_file(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
