"""Retention (spec §9): deleting old CommitLog segments, and the queue and index files below them.

A :class:`Cleaner` belongs to one writable :class:`~rocketstore.MessageStore`. Each pass
(:meth:`Cleaner.run_once`, every ``clean_resource_interval_ms`` on a background thread, or a
manual :meth:`Cleaner.clean`) does what RocketMQ's ``CleanCommitLogService`` and
``CleanConsumeQueueService`` do:

1. **Disk check** of the CommitLog's partition (and the store root's, when it is another one),
   usage being ``used / (used + available)`` as RocketMQ 5.x computes it:

   =====================================  ==================================================
   usage (percent)                        effect
   =====================================  ==================================================
   > ``disk_space_warning_level_ratio``    disk full: puts are refused (they raise
   (90)                                   ``PutRefusedDiskFullError``, SERVICE_NOT_AVAILABLE)
   > ``disk_space_clean_forcibly_ratio``   a disk-full stays; with ``delete_unexpired_when_disk_full``
   (85)                                   (off by default) segments go regardless of age
   at or below both                       disk OK: puts are accepted again
   > ``disk_max_used_space_ratio`` (75)    expired segments may be deleted at any hour
   =====================================  ==================================================

   By default nothing younger than ``file_reserved_time`` is ever deleted to make room (RocketMQ's
   broker does, ``cleanFileForciblyEnable``): a full disk refuses puts instead.

2. **CommitLog**, when the local hour is one of ``delete_when``, the disk is above
   ``disk_max_used_space_ratio`` (or unreadable), or the pass is manual: walk the segments oldest
   first and delete each one whose file mtime is ``file_reserved_time`` hours old (any age when
   cleaning forcibly), at most ``delete_files_batch_max`` per pass. The walk stops at the first
   segment that may not go, so no hole is ever left; the last segment, and any segment the
   writer has not finished, never goes; nor does a segment whose records are not all dispatched
   into the ConsumeQueues and the index (the pass dispatches first; when that fails it deletes
   nothing).
3. **ConsumeQueues and index**, when the CommitLog's min offset grew: delete the queue files
   whose last unit points below it and correct every queue's min offset (§4.5, §4.6), then the
   index files that end below it (§5.4).
4. **Timer log** (5.x's ``timerlog/``, kept for a broker taking over the timers): the files
   whose units all name records below the CommitLog's min offset, oldest first, as a 5.x
   broker's timer store deletes them; never one holding a timer still waiting, nor the files
   a broker's recovery reads (rocketstore.services.timer's ``delete_log_files``).

Deletion while readers hold views (``ReferenceResource``): RocketMQ counts references and
unmaps a file when the last reader releases it (forcibly after 120 s). Here each zero-copy view
(``read(zero_copy=True)`` bodies, ``iter_messages(zero_copy=True)``, ``queue_units`` arrays) is
such a reference, kept by Python's ``mmap`` itself: a segment is unlinked at once and its map is
unmapped when the last view is released, never before, so a reader can neither crash nor see
other bytes. Until then the file's blocks stay allocated (an unlinked, still-mapped file), which
is why a pass's freed space may show up only once old views are dropped. A read that starts
after the deletion raises :class:`~rocketstore.errors.MessageNotFoundError`.

**Policies** (docs/guide/retention.md) add to step 2, per store (``StoreConfig``) and
per topic (attributes in ``topics.json``, :func:`topic_policy`): ``retention_ms`` (age, at any
pass), ``retention_bytes`` (the CommitLog's and each topic's size) and ``delete_when_consumed``
(every group with an offset for the topic consumed past the segment). With any set, each pass
decides segment by segment (:class:`RetentionView`): a segment goes when every topic with a
record in it lets it go, consumption being a gate no age or size rule passes; only
``clean(force=True)`` does. Which topics a segment holds and how far groups consumed are read
from the ConsumeQueues and the consumer offset table at each pass; nothing else is stored.

Time, disk usage and the local hour are injectable (``clock``, ``disk_usage``, ``local_hour``),
so tests run hours of retention without waiting.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Optional

from rocketstore.base._background import start_weak_thread
from rocketstore.base._clock import now_ms as _now_ms
from rocketstore.base._failurelog import FailureLog
from rocketstore.errors import DiskFullError
from rocketstore.files.mapped_file import MappedFile
from rocketstore.services.parts import StoreParts
from rocketstore.services.retention_policy import (
    ATTR_DELETE_WHEN_CONSUMED,
    ATTR_RESERVE_TIME,
    ATTR_RETENTION_BYTES,
    ATTR_RETENTION_MS,
    HOUR_MS,
    UNCHANGED,
    RetentionView,
    TopicPolicy,
    mtime_ms,
    policies_active,
    retention_attribute_changes,
    retention_report,
    topic_policy,
)

__all__ = [
    "Cleaner",
    "disk_usage",
    "MANUAL_PASSES",
    "RetentionView",
    "retention_report",
    "TopicPolicy",
    "topic_policy",
    "retention_attribute_changes",
    "policies_active",
    "UNCHANGED",
    "ATTR_RETENTION_MS",
    "ATTR_RETENTION_BYTES",
    "ATTR_DELETE_WHEN_CONSUMED",
    "ATTR_RESERVE_TIME",
]

log = logging.getLogger("rocketstore.services.retention")

#: Passes a manual clean runs at most (RocketMQ's ``executeDeleteFilesManually`` arms 20).
MANUAL_PASSES = 20


def disk_usage(path: str) -> float:
    """The fraction of the file system holding ``path`` that is in use, as RocketMQ 5.x's
    ``getDiskPartitionSpaceUsedPercent``: used / (used + available to unprivileged users), so a
    file system whose reserved blocks are all that is left reads as full. -1.0 when unreadable."""
    try:
        st = os.statvfs(path)
    except OSError:
        return -1.0
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    usable = st.f_bavail * st.f_frsize
    if used + usable <= 0:
        return -1.0
    return used / (used + usable)


_statvfs_usage = disk_usage


def _local_hour(at_ms: int) -> int:
    return time.localtime(at_ms / 1000).tm_hour


class Cleaner:
    """Retention of one writable store (spec §9): see the module docstring.

    ``parts`` are the layers of a store opened for writing (:class:`~rocketstore.services.parts.StoreParts`):
    the cleaner deletes CommitLog segments, ConsumeQueue and index files, and tells the append
    core to refuse puts while the disk is full.
    ``clock()`` gives epoch milliseconds, ``disk_usage(path)`` the fraction in use (negative:
    unreadable), ``local_hour(ms)`` the local hour of an epoch-ms time.
    """

    def __init__(
        self,
        parts: StoreParts,
        *,
        clock: Optional[Callable[[], int]] = None,
        disk_usage: Optional[Callable[[str], float]] = None,
        local_hour: Optional[Callable[[int], int]] = None,
        compactor: Any = None,
    ):
        self._parts = parts
        #: the compaction logs' keeper (:class:`~rocketstore.services.compaction.Compactor`): it
        #: copies what compacted topics got before any segment goes, and compacts after
        self._compactor = compactor
        self.config = parts.config
        self._clock = clock or _now_ms
        self._disk_usage = disk_usage or _statvfs_usage
        self._local_hour = local_hour or _local_hour
        self._pass_lock = threading.Lock()  # one pass at a time
        self._check_lock = threading.Lock()  # one disk check at a time (passes, stats())
        self._space_warned = False  # "disk fills, nothing may go" logged already
        self._dispatch_failures = FailureLog(
            log, "dispatch before deleting CommitLog segments", "no segment is deleted until it succeeds"
        )
        self._compaction_failures = FailureLog(
            log, "copying into the compaction logs", "retried at the next retention pass"
        )
        self._pass_failures = FailureLog(
            log, "background retention pass", f"retried every {self.config.clean_resource_interval_ms} ms"
        )
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._queues_cleaned_below = -1  # CommitLog min offset the queues were cleaned to
        self._dispatch_error: Optional[BaseException] = None  # this pass's failed dispatch
        self._held: Optional[dict[str, Any]] = None  # this pass's first segment a policy kept
        #: True while puts are refused because the disk is above the warning level
        self.disk_full = False
        #: the usage fraction the last check read (None before the first; negative: unreadable)
        self.last_disk_usage: Optional[float] = None
        self.passes = 0
        self.deleted_segments = 0
        self.deleted_queue_files = 0
        self.deleted_index_files = 0
        self.deleted_timer_log_files = 0
        #: ``delete(commitlog_min)``: deletes the timer log files (``timerlog/``) no timer needs
        #: below the CommitLog's min offset and says how many (the timer service's
        #: ``delete_log_files``, set once it exists; None: the timer log is left alone)
        self.timer_log: Optional[Callable[[int], int]] = None

    # ---- the disk check ----

    def _partitions(self) -> list[str]:
        """The CommitLog directory, plus the store root when it lives on another file system."""
        paths = [self._parts.commitlog.directory]
        try:
            if os.stat(self._parts.path).st_dev != os.stat(paths[0]).st_dev:
                paths.append(self._parts.path)
        except OSError:
            pass
        return paths

    def check_disk(self) -> tuple[float, bool]:
        """Read disk usage and apply the thresholds: mark the store disk-full (puts refused) or
        disk-OK (puts accepted). Returns (usage fraction, above the forcible level)."""
        with self._check_lock:
            return self._check_disk()

    def _check_disk(self) -> tuple[float, bool]:
        cfg = self.config
        readings = [self._disk_usage(p) for p in self._partitions()]
        usage = -1.0 if any(r < 0 for r in readings) else max(readings)
        self.last_disk_usage = usage
        percent = usage * 100
        core = self._parts.commitlog.core
        if percent > cfg.disk_space_warning_level_ratio:
            if not self.disk_full:
                log.error(
                    "disk of %s is %.1f%% full, above disk_space_warning_level_ratio %s%%: "
                    "refusing puts until it is at %s%% or below (%s)",
                    self._parts.path,
                    percent,
                    cfg.disk_space_warning_level_ratio,
                    cfg.disk_space_clean_forcibly_ratio,
                    self._what_retention_frees(),
                )
            self.disk_full = True
            core.refuse_puts(
                DiskFullError(
                    errno.ENOSPC,
                    f"the disk of store {self._parts.path} is {percent:.1f}% full, above "
                    f"disk_space_warning_level_ratio {cfg.disk_space_warning_level_ratio}%: puts are "
                    f"refused until usage is back at {cfg.disk_space_clean_forcibly_ratio}% or below "
                    f"({self._what_retention_frees()}); nothing was written",
                )
            )
            return usage, True
        if percent > cfg.disk_space_clean_forcibly_ratio:
            return usage, True  # a disk-full stays until usage is back at the forcible level
        if self.disk_full and usage >= 0:
            log.warning("disk of %s is %.1f%% full again: accepting puts", self._parts.path, percent)
            self.disk_full = False
            core.refuse_puts(None)
        return usage, False

    # ---- passes ----

    def run_once(
        self, now_ms: Optional[int] = None, *, manual: bool = False, force: bool = False
    ) -> dict[str, Any]:
        """One cleaning pass at time ``now_ms`` (default: the clock). Returns what it did::

            {"trigger": "time" | "space" | "manual" | "policy" | None,  # why the CommitLog
                                              # was cleaned ("policy": a retention policy
                                              # deleted outside those triggers)
             "forced": bool,                  # segments were deleted regardless of age
             "commitlog": [start offsets of the segments deleted],
             "consumequeue_files": int, "index_files": int,   # files deleted
             "timer_log_files": int,          # timerlog/ files deleted
             "min_offset": int,               # the CommitLog's min offset afterwards
             "disk_usage": float,             # fraction in use after the pass (-1: unreadable)
             "disk_full": bool,               # puts are refused
             "dispatch_error": None | Exception,  # why no segment could go: the dispatch
                                              # that must precede a deletion failed, or the
                                              # write of the consumer offsets that let
                                              # segments go (delete_when_consumed)
             "held": None | {"start": offset, "held_by": {topic: [holds]}}}  # the first
                                              # segment a retention policy kept, and why

        ``manual`` runs the CommitLog step whatever the hour or disk (RocketMQ's manual delete);
        ``force`` also ignores the segments' age.
        """
        cfg = self.config
        now = self._clock() if now_ms is None else int(now_ms)
        with self._pass_lock:
            self.passes += 1
            self._dispatch_error = None
            self._held = None
            usage, clean_forcibly = self.check_disk()
            if manual:
                trigger = "manual"
            elif self._local_hour(now) in cfg.delete_hours:
                trigger = "time"
            elif usage < 0 or usage * 100 > cfg.disk_max_used_space_ratio or clean_forcibly:
                trigger = "space"
            else:
                trigger = None
            forced = force or (clean_forcibly and bool(cfg.delete_unexpired_when_disk_full))
            active = policies_active(cfg, self._parts.topics.table)
            deleted: list[MappedFile] = []
            if trigger or active:
                deleted = self._delete_segments(
                    now,
                    forced and bool(trigger),
                    scheduled=bool(trigger),
                    active=active,
                    override=manual and force,
                )
                if deleted and not trigger:
                    trigger = "policy"
            if trigger == "space" and not deleted:
                if not self._space_warned:  # once until a pass deletes or the disk has room
                    log.warning(
                        "disk of %s is %.1f%% full, but no CommitLog segment could be deleted (%s)",
                        self._parts.path,
                        usage * 100,
                        self._what_retention_frees(),
                    )
                self._space_warned = True
            else:
                self._space_warned = False
            cq_files, index_files = self._clean_queues()
            timer_log_files = self._clean_timer_log()
            if self._compactor is not None:
                self._compact()
            if deleted:
                usage, _ = self.check_disk()  # puts may resume at once
            return {
                "trigger": trigger,
                "forced": bool(trigger) and forced,
                "commitlog": [mf.file_from_offset for mf in deleted],
                "consumequeue_files": cq_files,
                "index_files": index_files,
                "timer_log_files": timer_log_files,
                "min_offset": self._parts.commitlog.min_offset,
                "disk_usage": usage,
                "disk_full": self.disk_full,
                "dispatch_error": self._dispatch_error,
                "held": self._held,
            }

    def _compact(self) -> None:
        """Copy what compacted topics got since the last pass, then compact their queues that
        closed a compaction log file (logged, retried at the next pass, when it fails)."""
        try:
            self._compactor.run()
        except Exception as exc:
            self._compaction_failures.failed(exc)
        else:
            self._compaction_failures.succeeded()

    def _what_retention_frees(self) -> str:
        cfg = self.config
        if cfg.delete_unexpired_when_disk_full:
            return (
                "retention deletes the oldest segments whatever their age: "
                "delete_unexpired_when_disk_full is on"
            )
        return (
            f"retention deletes only segments older than file_reserved_time, "
            f"{cfg.file_reserved_time:g} h; delete_unexpired_when_disk_full is off"
        )

    def clean(self, force: bool = False, now_ms: Optional[int] = None) -> dict[str, Any]:
        """A manual clean (``MessageStore.clean``): passes until one deletes no segment, at most
        :data:`MANUAL_PASSES`, whatever the hour and disk. Expired segments only, unless
        ``force``: then every segment but the one being written. Returns the passes' totals in
        the shape of :meth:`run_once`."""
        total: dict[str, Any] = {}
        for _ in range(MANUAL_PASSES):
            result = self.run_once(now_ms, manual=True, force=force)
            if not total:
                total = result
            else:
                total["commitlog"] += result["commitlog"]
                total["consumequeue_files"] += result["consumequeue_files"]
                total["index_files"] += result["index_files"]
                total["timer_log_files"] += result["timer_log_files"]
                for key in ("min_offset", "disk_usage", "disk_full", "dispatch_error", "held"):
                    total[key] = result[key]
            if not result["commitlog"]:
                break
        return total

    def _delete_segments(
        self, now: int, forced: bool, *, scheduled: bool = True, active: bool = False, override: bool = False
    ) -> list[MappedFile]:
        """Delete the leading segments that may go (§9 ``deleteExpiredFileByTime``, and the
        retention policies when ``active``). ``scheduled``: a time, space or manual pass (the
        ``file_reserved_time`` rule applies); ``override``: ``clean(force=True)``, which deletes
        unconsumed data of ``delete_when_consumed`` topics too."""
        parts, cfg = self._parts, self.config
        commitlog = parts.commitlog
        files = list(commitlog.files)
        wrote = commitlog.max_offset
        reserved_ms = cfg.file_reserved_time * HOUR_MS
        doomed: list[MappedFile] = []
        for mf in files[:-1]:
            if len(doomed) >= cfg.delete_files_batch_max or mf.end_offset > wrote:
                break  # never a segment the writer has not finished
            if not forced and not active:
                mtime = mtime_ms(mf.path)
                if mtime is not None and now < mtime + reserved_ms:
                    break
            doomed.append(mf)
        if not doomed:
            return []
        dispatcher = parts.dispatcher
        try:
            dispatcher.catch_up()  # the queues and the index must hold all that is about to go
        except Exception as exc:
            self._dispatch_error = exc
            self._dispatch_failures.failed(exc)
            return []
        self._dispatch_failures.succeeded()
        if not self._copy_compacted():  # a compacted topic's records are copied before they go
            return []
        with dispatcher.lock:
            # Only segments whose every record is in the queues and the index: deleting one the
            # dispatcher has not passed would leave its records in no queue and give later units
            # wrong positions.
            doomed = [mf for mf in doomed if mf.end_offset <= dispatcher.offset]
            if active and doomed:
                view = self.view(now)
                doomed, held = view.walk(
                    doomed, scheduled=scheduled, forced=forced, override_consumed=override
                )
                if held is not None:
                    self._held = {"start": held[0].file_from_offset, "held_by": held[1]}
                if doomed and view.used_offsets and parts.offsets is not None:
                    # the offsets that let these segments go are on disk before they go
                    try:
                        parts.offsets.persist()
                    except OSError as exc:
                        self._dispatch_error = exc
                        log.error(
                            "writing the consumer offsets before a deletion failed (%s): nothing deleted", exc
                        )
                        return []
            if not doomed:
                return []
            try:
                deleted = commitlog.delete_first(doomed)
            except OSError:
                log.exception("deleting a CommitLog segment failed; the pass stops there")
                deleted = [mf for mf in doomed if mf.destroyed]
        for mf in deleted:
            log.info("deleted CommitLog segment %s", mf.path)
        self.deleted_segments += len(deleted)
        return deleted

    def _copy_compacted(self) -> bool:
        """Copy what compacted topics got into their compaction logs, before any segment goes;
        False (nothing may go) when that fails."""
        if self._compactor is None:
            return True
        try:
            self._compactor.catch_up()
        except Exception as exc:
            self._dispatch_error = exc
            log.error("copying into the compaction logs before a deletion failed (%s): nothing deleted", exc)
            return False
        return True

    def view(self, now: Optional[int] = None) -> RetentionView:
        """A :class:`RetentionView` of this store at ``now`` (default: the clock)."""
        parts = self._parts
        return RetentionView(
            self.config,
            parts.commitlog,
            parts.all_queues(),
            parts.topics.table,
            parts.offsets,
            self._clock() if now is None else int(now),
        )

    def _clean_queues(self) -> tuple[int, int]:
        """Delete ConsumeQueue and index files entirely below the CommitLog's min offset and
        correct the queues' min offsets, once per growth of that offset."""
        parts = self._parts
        if not parts.commitlog.files:
            return 0, 0
        min_offset = parts.commitlog.min_offset
        if min_offset <= self._queues_cleaned_below:
            return 0, 0
        cq_files = index_files = 0
        with parts.dispatcher.lock:
            try:
                cq_files = parts.queues.delete_expired(min_offset)
                if parts.batch is not None:
                    cq_files += parts.batch.delete_expired(min_offset)
                index_files = parts.index.delete_expired(min_offset)
            except OSError:
                log.exception("deleting ConsumeQueue or index files failed; retried next pass")
                return cq_files, index_files
        self._queues_cleaned_below = min_offset
        self.deleted_queue_files += cq_files
        self.deleted_index_files += index_files
        return cq_files, index_files

    def _clean_timer_log(self) -> int:
        """Delete the timer log files whose units all name records below the CommitLog's min
        offset, as a 5.x broker's timer store does (every 30 s there; every pass here), unless
        a timer still needs them (the timer service says which); a failure is logged and the
        next pass tries again."""
        delete = self.timer_log
        if delete is None or not self._parts.commitlog.files:
            return 0
        try:
            deleted = delete(self._parts.commitlog.min_offset)
        except OSError:
            log.exception("deleting timer log files failed; retried next pass")
            return 0
        self.deleted_timer_log_files += deleted
        return deleted

    # ---- the background thread ----

    def start(self) -> None:
        """Check the disk now, then run a pass every ``clean_resource_interval_ms`` on a daemon
        thread until :meth:`stop` (no thread when the interval is 0)."""
        if self._thread is not None:
            return
        self.check_disk()
        interval = self.config.clean_resource_interval_ms
        if not interval:
            return
        self._stop.clear()
        # holds the cleaner only during a pass (it holds the store weakly): a dropped store closes
        self._thread = start_weak_thread(
            self, Cleaner._tick, self._stop, "rocketstore-clean", first_wait=interval / 1000
        )

    def _tick(self) -> float:
        try:
            self.run_once()
        except Exception as exc:  # logged once, counted, retried at the next tick
            self._pass_failures.failed(exc)
        else:
            self._pass_failures.succeeded()
        return self.config.clean_resource_interval_ms / 1000

    def stop(self) -> None:
        """Stop the background thread, waiting for a pass in progress."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        if self._compactor is not None:
            self._compactor.close()

    def stats(self) -> dict[str, Any]:
        """Counters for ``MessageStore.stats()``, with the disk checked now (``disk_usage``, and
        ``disk_full`` as that reading sets it), whether or not a background cleaner runs."""
        self.check_disk()
        return {
            "disk_usage": self.last_disk_usage,
            "disk_full": self.disk_full,
            "clean_passes": self.passes,
            "deleted_segments": self.deleted_segments,
            "deleted_queue_files": self.deleted_queue_files,
            "deleted_index_files": self.deleted_index_files,
            "deleted_timer_log_files": self.deleted_timer_log_files,
            **({"compaction": self._compactor.stats()} if self._compactor is not None else {}),
        }
