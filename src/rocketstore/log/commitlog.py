"""The CommitLog: segments, the append core, recovery's CRC scan, truncation, reads and scans
(their chunked scans of records are rocketstore.log.recordscan's).

One of a store's layers (``ARCHITECTURE.md``): it knows records and segments, not queues. The
store facade (:class:`rocketstore.store.MessageStore`) owns a ``CommitLog`` beside the
ConsumeQueues, the index and the services, and tells it where recovery starts and what the
checkpoint vouches for; the services (retention, delayed delivery) use it through the methods
below, never through its attributes' internals.

* ``segments``: the :class:`~rocketstore.files.mapped_file.MappedFileQueue` of
  ``<root>/commitlog/<20-digit start offset>`` files.
* ``core``: the compiled (or pure) append core of a writable log, created by
  :meth:`CommitLog.start_appending`; a read-only log has one whose every write raises.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Optional, Protocol

import numpy as np

from rocketstore.config import StoreConfig
from rocketstore.errors import CorruptRecordError, MessageNotFoundError, StoreReadOnlyError
from rocketstore.files.mapped_file import MappedFile, MappedFileQueue, allocate_range
from rocketstore.format._verify import record_problems
from rocketstore.log.recordscan import (
    STEPPED,
    ReservedColumns,
    StampCheck,
    checked_chunks,
    column_chunks,
    decode_chunks,
    recover_chunks,
    resync,
    stop_reason,
    will_read,
)
from rocketstore.message import MessageExt

if TYPE_CHECKING:
    from rocketstore.log._store_py import BatchPutResult, PutFuture, PutResult

__all__ = ["CommitLog", "AppendCore"]

_log = logging.getLogger("rocketstore.store")

_INT64_MAX = (1 << 63) - 1


class AppendCore(Protocol):
    """What the store uses of the append core (``_store_py.CommitLogCore`` or its compiled twin)."""

    wrote_offset: int
    flushed_offset: int
    last_store_timestamp: int
    append_prop_crc: bool

    def put(self, *args: Any) -> PutResult: ...
    def put_batch(self, *args: Any) -> BatchPutResult | PutFuture: ...
    def put_many(self, items: Any, mode: int) -> list[PutResult]: ...
    def put_copies(self, rows: bytes, topics: list[str], items: list[Any]) -> tuple[int, int]: ...
    def put_inner_batch(self, *args: Any) -> PutResult | PutFuture: ...
    def put_keyed(self, *args: Any) -> Optional[PutResult]: ...
    def put_plain_messages(self, messages: list[Any], user_topics: set[str], wait: int) -> Any: ...
    def flush(self, timeout_ms: int) -> bool: ...
    def queue_offsets(self) -> dict[tuple[str, int], int]: ...
    def stats(self) -> dict[str, Any]: ...
    def forget_topic(self, topic: str) -> None: ...
    def refuse_puts(self, error: Optional[BaseException]) -> None: ...
    def share(self, table: Any, fd: int, epoch: int, owner: bool) -> None: ...
    def wait_flushed(self, offset: int, timeout_ms: int) -> int: ...
    def unshare(self) -> None: ...
    def close(self) -> None: ...


def new_append_core(
    store_module: Any,
    cfg: StoreConfig,
    start_offset: int,
    uniq_prefix: bytes,
    topic_lookup: Callable[[str], int],
    roll: Callable[[int], Any],
    prefault: bool = True,
) -> Any:
    """An append core (``store_module.CommitLogCore``) at ``start_offset`` with ``cfg``'s record
    and flush options (``prefault``: with its pre-faulting thread)."""
    from rocketstore.config import SYNC_FLUSH
    from rocketstore.message import host_to_bytes

    core = store_module.CommitLogCore(
        file_size=cfg.commitlog_file_size,
        start_offset=start_offset,
        store_host=host_to_bytes(cfg.store_host or ""),
        store_port=cfg.store_port,
        born_host=host_to_bytes(cfg.born_host or ""),
        born_port=cfg.born_port,
        uniq_prefix=uniq_prefix,
        max_message_size=cfg.max_message_size,
        topic_lookup=topic_lookup,
        roll=roll,
        flush_interval_ms=cfg.flush_interval_ms,
        flush_least_pages=cfg.flush_least_pages,
        flush_thorough_ms=cfg.flush_thorough_interval_ms,
        prefault_bytes=cfg.prefault_bytes if prefault else 0,
        sync_flush_timeout_ms=cfg.sync_flush_timeout_ms,
        default_wait=1 if cfg.flush_disk_type == SYNC_FLUSH else 0,
    )
    core.append_prop_crc = cfg.append_prop_crc
    return core


class _ReadOnlyCore:
    """Stands in for the append core of a read-only log: every write raises."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise StoreReadOnlyError("the store was opened read-only")

    put = put_batch = put_many = put_copies = put_keyed = put_plain_messages = flush = _refuse


class CommitLog:
    """The segments under ``directory`` and, once :meth:`start_appending` ran, the append core."""

    def __init__(self, directory: str, config: StoreConfig, impl: Any, *, read_only: bool) -> None:
        self.directory = directory
        self.config = config
        self.codec = impl.codec
        self.scan = impl.scan
        self.read_only = read_only
        self._impl = impl
        # Sparse segments where the compiled core populates pages before every store (no SIGBUS
        # on a full disk); fallocated segments otherwise.
        preallocate = not getattr(impl.store, "POPULATE_WRITE", False)
        self.segments = MappedFileQueue(
            directory, config.commitlog_file_size, read_only=read_only, preallocate=preallocate
        )
        self.core: Any = _ReadOnlyCore() if read_only else None
        #: Where recovery found the valid data to end (a read-only log's end until the writer's
        #: live page moves it: rocketstore.processes.live.Follower).
        self.end = 0
        #: Called after retention deleted segments (the store tells other processes).
        self.on_deleted: Optional[Callable[[], None]] = None

    # ---- geometry ----

    def load(self) -> None:
        self.segments.load()
        for sealed in self.segments.files[:-1]:
            sealed.release_descriptor()  # one descriptor per segment, not two (the map's own)

    @property
    def files(self) -> list[MappedFile]:
        return self.segments.files

    def find(self, offset: int) -> Optional[MappedFile]:
        return self.segments.find(offset)

    @property
    def min_offset(self) -> int:
        return self.segments.min_offset

    @property
    def wrote_offset(self) -> int:
        """:attr:`end`, by the name the compiled catch-up checks read of an append core (a
        read-only store's Dispatcher has its CommitLog as ``end_core``)."""
        return self.end

    @property
    def max_offset(self) -> int:
        """The CommitLog offset just past the last record."""
        return self.end if self.read_only else self.core.wrote_offset

    @property
    def flushed_offset(self) -> int:
        return self.end if self.read_only else self.core.flushed_offset

    def readable_end(self, mf: MappedFile) -> int:
        """How much of segment ``mf`` holds complete records."""
        if self.read_only:
            return mf.wrote_position
        wrote = self.core.wrote_offset
        return max(0, min(mf.file_size, int(wrote) - mf.file_from_offset))

    # ---- recovery ----

    def scan_start(self, checkpoint: Any, queues: Any, clean: bool) -> tuple[int, int]:
        """Where recovery's CRC scan starts, and the CommitLog offset below which the queues are
        known complete: ``(segment start, complete_to)``.

        * The checkpoint's confirmPhyOffset, when it lies within the CommitLog: the store wrote
          it after making the CommitLog, the ConsumeQueues and the index durable up to there.
        * Otherwise (a store from elsewhere, or never checkpointed) RocketMQ's rules: the
          third-last segment after a clean shutdown; after a crash the newest segment whose
          first record is valid and not newer than the checkpoint's timestamps, else the first.
        * No ConsumeQueue on disk at all: the first segment (everything is dispatched again).

        A read-only open starts at confirmPhyOffset itself, not at its segment's start, when the
        queues prove it a record boundary (:meth:`ends_a_record`) and none left out a last file
        (``queues.incomplete``: its units are not on disk, so the scan must find its records):
        it cuts nothing, so it need not re-verify what the checkpoint vouches for (reads check
        each record's CRC anyway), and a reader of a store with large segments opens in time
        independent of their size.
        """
        files = self.segments.files
        if not files:
            return 0, 0
        first = files[0].file_from_offset
        if not len(queues):
            return first, first
        confirm = checkpoint.confirm_phy_offset
        if first < confirm <= files[-1].end_offset:
            if (
                self.read_only
                and not getattr(queues, "incomplete", False)
                and self.ends_a_record(confirm, queues)
            ):
                return confirm, confirm
            # After a clean stop the queues say where dispatch resumes, not confirmPhyOffset.
            if clean or self.walks_to(confirm):
                mf = self.segments.find(confirm) or files[-1]
                return mf.file_from_offset, confirm
            # Not where a record ends (a damaged checkpoint, or one copied from another store):
            # dispatching from there would decode garbage and misplace every later unit.
            _log.error("the checkpoint's confirmPhyOffset %d is not where a record ends: ignored", confirm)
        if clean:
            start = files[max(0, len(files) - 3)].file_from_offset
            return start, start
        limit = checkpoint.min_timestamp
        for mf in reversed(files):
            try:  # only its data: a new segment can be all hole (see _written_to)
                view = mf.view(0, _written_to(mf, 0, mf.file_size))
                head = self.codec.decode_record(view, 0, check_crc=True, copy_body=False)
            except CorruptRecordError:
                continue
            if 0 < head.store_timestamp <= limit:
                return mf.file_from_offset, mf.file_from_offset
        return first, first

    def walks_to(self, offset: int) -> bool:
        """Whether the records of the segment holding ``offset``, walked by their lengths from
        the segment's start, end exactly at ``offset`` (the end of the last segment counts)."""
        mf = self.segments.find(offset)
        if mf is None:
            files = self.segments.files
            return bool(files) and offset == files[-1].end_offset
        target = offset - mf.file_from_offset
        pos = 0
        while True:
            stop = pos
            # the last chunk's stop is what counts: read after the loop
            for _records, stop, _reason in decode_chunks(  # noqa: B007
                self.codec, mf.mm, pos, target, check_crc=False
            ):
                pass
            if stop >= target:
                return stop == target
            # damage: the next whole record, searched for in the data (see _written_to)
            pos = resync(self.codec, mf.mm, stop, _written_to(mf, target, mf.file_size), mf.file_from_offset)
            if not 0 <= pos <= target:
                return False

    def ends_a_record(self, offset: int, queues: Any) -> bool:
        """Whether ``offset`` is provably where a record (or a segment) ends: a segment starts
        there, or a ConsumeQueue unit ends there (a unit below the checkpoint is durable)."""
        if any(mf.file_from_offset == offset for mf in self.segments.files):
            return True
        queues = list(queues)
        if any(cq.max_physic_offset == offset for cq in queues):
            return True
        return any(cq.ends_record_at(offset) for cq in queues if cq.max_physic_offset > offset)

    def recover(
        self,
        scan_from: int,
        durable: int,
        on_ranges: Callable[[list[tuple[str, int, int, int]]], None],
        report: Callable[[int, int], None],
        crashed: bool = False,
        until: Optional[int] = None,
    ) -> int:
        """Scan with CRC checks from ``scan_from`` to the first invalid record; the end of the
        valid data (also kept as :attr:`end`). Each segment's ``wrote_position`` is set to what
        it holds. ``on_ranges(ranges)`` sees, for every chunk of valid records, ``(topic,
        queue_id, lowest, highest queue offset)`` of each queue among the chunk's records that get
        a ConsumeQueue unit (:func:`queue_offset_ranges`); ``report(done, total)`` counts bytes.

        ``until`` (a read-only open: where the writer's published records end): the scan ends
        there at the latest, though never before ``scan_from`` or ``durable``, and what lies
        past it is not readable until the reader follows the writer there.

        Below ``durable`` (what the checkpoint vouches for as flushed) an invalid record is
        damage (bit rot, a careless edit), not a crash's torn tail: cutting there would throw
        away good, acknowledged data after it. It is stepped over (a bad CRC) or its segment's
        rest is skipped (lengths that cannot be trusted), and verify() reports it.

        ``crashed`` (an abnormal stop): past ``durable`` a record whose fields a whole record
        cannot have (a topic or properties that are not text, a PhysicalOffset other than its
        position, undefined sysFlag bits, a wrong CRC32 property) ends the valid data as a bad
        CRC does. The body CRC covers only the body: a power cut can keep a record's body page
        and lose the page its topic and properties lie in.

        Each chunk is one compiled call (``scan.recover_scan``: the records decoded into a table
        that stays in cache, the torn-field check and the per-queue ranges in the same pass).
        """
        codec, scan = self.codec, self.scan
        for mf in self.segments.files:
            if mf.end_offset <= scan_from:
                mf.wrote_position = mf.file_size  # verified by an earlier recovery
        files = [mf for mf in self.segments.files if mf.end_offset > scan_from]
        if until is not None:
            until = max(until, scan_from, durable)
            for mf in files:
                if mf.file_from_offset >= until:
                    mf.wrote_position = 0  # nothing of it is published yet
            files = [mf for mf in files if mf.file_from_offset < until]
        total = files[-1].end_offset - scan_from if files else 0
        end = scan_from
        for mf in files:
            will_read(mf)
            pos = max(0, scan_from - mf.file_from_offset)
            hi = mf.file_size if until is None else min(mf.file_size, until - mf.file_from_offset)
            below = max(0, durable - mf.file_from_offset)  # stepped over when damaged
            hi = _written_to(mf, max(pos, below), hi)
            chunks = recover_chunks(codec, scan, mf, torn_from=below if crashed else None)
            for found, stop, reason in checked_chunks(
                codec, mf.mm, pos, hi, mf.file_from_offset, below, chunks=chunks
            ):
                if found.count:
                    on_ranges(found.queue_ranges(codec, scan, mf.mm, mf.file_from_offset))
                report(mf.file_from_offset + stop - scan_from, total)
                if reason in (codec.STOP_BAD_CRC, STEPPED) and stop < below:
                    _log.error(
                        "damaged record at commitlog offset %d below the checkpoint (%s): kept, stepped over",
                        mf.file_from_offset + stop,
                        stop_reason(codec, reason),
                    )
                if found.torn:  # the crash's torn tail ends here, as at a bad CRC
                    break
            mf.wrote_position = stop
            if reason == codec.STOP_BLANK:
                end = mf.end_offset
                continue
            end = mf.file_from_offset + stop
            if end < durable and mf is not files[-1]:
                _log.error(
                    "no valid record at commitlog offset %d, below the checkpoint: the rest "
                    "of segment %d is skipped, later segments kept",
                    end,
                    mf.file_from_offset,
                )
                mf.wrote_position = mf.file_size
                end = mf.end_offset
                continue
            break
        report(total, total)
        self.end = end
        return end

    def record_end(self, offset: int, limit: int) -> Optional[int]:
        """Where the whole, CRC-valid record at ``offset`` ends, if one ends there by ``limit``;
        else None."""
        mf = self.segments.find(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        hi = min(mf.file_size, limit - mf.file_from_offset)
        if not 0 <= pos < hi:
            return None
        rows, _stop, _reason = self.codec.decode_batch(mf.view(0, hi), pos, hi, check_crc=True, max_records=1)
        if len(rows) != 1:
            return None
        return offset + int(rows["size"][0])

    def truncate_to(self, end: int, crashed: bool = True) -> None:
        """Drop segments past ``end`` and zero the stale tail after it in its segment.

        After a crash (``crashed``) every byte there that is not zero already: a power cut can
        lose a stretch of pages that were never written back and keep later ones, whose old
        records must not be read again when new records reach them (a scan would run on into
        them, and their queue units would take acknowledged messages' queue offsets). Holes the
        file system reports (``SEEK_DATA``) are skipped unread. After a clean close nothing is
        stale past a hole (the crash's open zeroed it), so the dirty tail ends at the first
        zero chunk."""
        self.segments.truncate_after(end)
        mf = self.segments.find(end)
        if mf is None:
            return
        start = end - mf.file_from_offset
        mf.flush(start, _zero_stale(mf, start, crashed))

    def sync_recovered(self, start: int, end: int) -> None:
        """msync the CommitLog that an abnormal recovery kept, ``[start, end)``.

        After a kill the records past the last flush are still in the page cache, so the scan
        finds them valid and keeps them; the flush thread then starts at ``end`` and reports
        everything below it as flushed, although nothing wrote those pages back. A power cut
        later could lose them while the new, acknowledged records after them survive, and
        recovery would cut at the hole, taking the acknowledged records with it (and a
        checkpoint written meanwhile would vouch for records that are gone). Below ``start``
        (the segment of confirmPhyOffset) the previous run had flushed before it checkpointed."""
        kept = [
            (
                mf,
                max(start, mf.file_from_offset) - mf.file_from_offset,
                min(end, mf.end_offset) - mf.file_from_offset,
            )
            for mf in self.segments.files
            if mf.end_offset > start and mf.file_from_offset < end
        ]
        for mf, lo, hi in kept:  # every segment's writes started first, then waited for
            mf.start_writeback(lo, hi)
        for mf, lo, hi in kept:
            mf.flush(lo, hi)

    # ---- appending ----

    def start_appending(
        self,
        end: int,
        queue_offsets: dict[tuple[str, int], int],
        uniq_prefix: bytes,
        topic_lookup: Callable[[str], int],
        roll: Callable[[int], Any],
    ) -> Any:
        """Create the append core at ``end`` (after recovery), with the next queue offsets.
        ``roll`` is the core's callback for a new segment: a weak reference to :meth:`roll`
        through the owner (the core must not keep the store alive)."""
        core = new_append_core(self._impl.store, self.config, end, uniq_prefix, topic_lookup, roll)
        for (topic, qid), nxt in queue_offsets.items():
            core.set_queue_offset(topic, qid, nxt)
        segment = self.segments.find(end)
        if segment is not None:
            if self.segments.preallocate and segment.fd >= 0:
                # a core that stores without populating first (the pure twin) needs the blocks
                # allocated: the segment may be sparse (made by the compiled twin), and a store
                # into a hole on a full disk is a SIGBUS; this is a DiskFullError
                allocate_range(segment.fd, end - segment.file_from_offset, segment.end_offset - end)
            core.set_active(segment.mm, segment.file_from_offset, end - segment.file_from_offset, segment.fd)
        self.core = core
        self.end = end
        return core

    def roll(self, start: int) -> tuple[Any, int]:
        """The core's callback when it fills a segment: the map and descriptor of the segment at
        ``start`` (created now unless prepared), and the next one prepared in the background."""
        segments = self.segments
        core = self.core
        if segments.shared:
            # the owner adopting segments other processes made: each is flushed here too
            while segments.files and segments.files[-1].end_offset < start:
                between = segments.segment_at(segments.files[-1].end_offset)
                core.add_segment(between.mm, between.file_from_offset, between.fd)
        mf = segments.segment_at(start)
        for sealed in reversed(segments.files):  # the ones sealed since the last roll
            if sealed.end_offset > start:
                continue
            if not sealed.release_descriptor():
                break
        self.segments.prepare_next(
            on_ready=lambda nxt: core.add_segment(nxt.mm, nxt.file_from_offset, nxt.fd)
        )
        return mf.mm, mf.fd

    def delete_first(self, doomed: list[MappedFile]) -> list[MappedFile]:
        """Delete leading segments (retention): the core lets go of each first."""
        core = self.core
        deleted = self.segments.delete_first(
            doomed, release=lambda mf: core.release_segment(mf.file_from_offset)
        )
        if deleted and self.on_deleted is not None:
            self.on_deleted()  # readers in other processes look again (rocketstore.processes.live)
        return deleted

    def close(self) -> None:
        self.segments.close()

    # ---- reads ----

    def read(self, commitlog_offset: int, zero_copy: bool = False) -> MessageExt:
        """The message at a CommitLog offset (``MessageNotFoundError`` if no whole, CRC-valid
        record starts there)."""
        if commitlog_offset.__class__ is int and not zero_copy and not self.read_only:
            # the common read, decoded straight from the segment's map (pinned for the call)
            seg = self.segments.find(commitlog_offset) if commitlog_offset >= 0 else None
            if seg is not None and seg.mm is not None:
                base = seg.file_from_offset
                end = min(seg.file_size, self.core.wrote_offset - base)  # readable_end, writable
                if commitlog_offset - base < end:
                    try:
                        msg: MessageExt = self.codec.decode_record(seg.mm, commitlog_offset - base, end=end)
                        return msg
                    except CorruptRecordError as exc:
                        raise MessageNotFoundError(
                            f"no message at commitlog offset {commitlog_offset}: {exc}"
                        ) from None
                    except ValueError:
                        pass  # closed under us (retention, close): the careful path says which
        if not isinstance(commitlog_offset, (int, np.integer)) or commitlog_offset < 0:
            raise MessageNotFoundError(f"no message at commitlog offset {commitlog_offset!r}")
        mf = self.segments.find(int(commitlog_offset))
        if mf is None:
            raise MessageNotFoundError(f"no message at commitlog offset {commitlog_offset}")
        end = self.readable_end(mf)
        pos = int(commitlog_offset) - mf.file_from_offset
        if pos >= end:
            raise MessageNotFoundError(f"no message at commitlog offset {commitlog_offset}")
        try:
            found: MessageExt = self.codec.decode_record(
                mf.view(0, end), pos, check_crc=True, copy_body=not zero_copy
            )
            return found
        except CorruptRecordError as exc:
            raise MessageNotFoundError(f"no message at commitlog offset {commitlog_offset}: {exc}") from None

    def chunks(
        self, start: Optional[int], end: Optional[int], check_crc: bool = True, chunk: int = 0
    ) -> Iterator[tuple[MappedFile, np.ndarray]]:
        """``(segment, records)`` in CommitLog order over ``[start, end)``, at most ``chunk``
        records at a time (0: ``SCAN_CHUNK``): damaged records are stepped over and logged
        (verify() lists them). With ``check_crc``, so is a whole record whose PHYSICALOFFSET
        names another place (copied there: :meth:`read` refuses it too)."""
        codec = self.codec
        for mf, lo, hi, limit in self.ranges(start, end):
            view = mf.view(0, limit)
            chunks = (
                checked_chunks(codec, view, lo, hi, mf.file_from_offset, limit, chunk=chunk, placed=True)
                if check_crc
                else decode_chunks(codec, view, lo, hi, check_crc=False, chunk=chunk)
            )
            for arr, stop, reason in chunks:
                if len(arr):
                    yield mf, arr
                if reason in (codec.STOP_BAD_CRC, STEPPED):
                    _log.warning(
                        "skipping %s at commitlog offset %d (verify() lists every damaged record)",
                        "the record" if reason == STEPPED else "the record (body CRC mismatch)",
                        mf.file_from_offset + stop,
                    )
            if reason != codec.STOP_BLANK and stop < limit:
                if hi < limit:
                    break  # the range asked for ends here
                # complete records end at `limit`: this one is damaged beyond stepping over
                _log.warning(
                    "skipping the rest of CommitLog segment %d: no valid record at offset %d "
                    "(verify() lists every damaged record)",
                    mf.file_from_offset,
                    mf.file_from_offset + stop,
                )

    def ranges(self, start: Optional[int], end: Optional[int]) -> Iterator[tuple[MappedFile, int, int, int]]:
        """``(segment, lo, hi, limit)`` of each segment over CommitLog ``[start, end)``: its
        positions ``[lo, hi)`` in range, ``limit`` its readable end (the range ends in the
        segment whose ``hi`` is below its ``limit``)."""
        files = list(self.segments.files)
        if not files:
            return
        start = files[0].file_from_offset if start is None else start
        for mf in files:
            if mf.end_offset <= start:
                continue
            if end is not None and mf.file_from_offset >= end:
                break
            limit = self.readable_end(mf)
            lo = max(0, start - mf.file_from_offset)
            if lo >= limit:
                break
            yield mf, lo, limit if end is None else min(limit, end - mf.file_from_offset), limit

    def records_at(
        self,
        offsets: np.ndarray,
        sizes: np.ndarray,
        check_crc: bool = True,
        check: Optional[Callable[[Any, int, np.ndarray, int], None]] = None,
    ) -> Iterator[tuple[int, Any, np.ndarray]]:
        """``(segment_start, view, records)`` of the records at ascending ``offsets`` of ``sizes``
        (see :meth:`MessageStore.records_at`); ``check(view, base, rows, first)`` vets each run
        of rows (``first``: the index of its first unit)."""
        codec = self.codec
        i, n = 0, len(offsets)
        while i < n:
            mf = self.segments.find(int(offsets[i]))
            if mf is None:
                raise MessageNotFoundError(f"no message at commitlog offset {int(offsets[i])}")
            base, limit = mf.file_from_offset, self.readable_end(mf)
            j = int(np.searchsorted(offsets, mf.end_offset, side="left"))
            pos, size = offsets[i:j] - base, sizes[i:j]
            breaks = np.flatnonzero(pos[1:] != pos[:-1] + size[:-1]) + 1
            view = mf.view(0, limit)
            parts = []
            for a, b in zip(np.concatenate(([0], breaks)), np.concatenate((breaks, [j - i]))):
                lo, hi = int(pos[a]), int(pos[b - 1] + size[b - 1])
                if hi > limit:
                    raise MessageNotFoundError(f"no whole message at commitlog offset {base + lo}")
                rows, stop, _reason = codec.decode_batch(
                    view,
                    lo,
                    hi,
                    check_crc=check_crc,
                    max_records=int(b - a),
                    base=base if check_crc else None,
                )
                if len(rows) != b - a or (rows["size"] != size[a:b]).any():
                    raise MessageNotFoundError(
                        f"no valid message of the expected size at commitlog offset {base + stop}"
                    )
                if check is not None:
                    check(view, base, rows, i + int(a))
                parts.append(rows)
            yield base, view, (parts[0] if len(parts) == 1 else np.concatenate(parts))
            i = j

    def written_since(self, offset: int) -> bool:
        """Whether a whole record, or a segment's end marker, starts at ``offset`` now
        (read-only: a writer beside this log finished what a scan met half-written)."""
        mf = self.segments.find(offset)
        if mf is None or mf.mm is None:
            return False
        pos = offset - mf.file_from_offset
        view = mf.view(0, mf.file_size)
        for arr, stop, reason in decode_chunks(self.codec, view, pos, mf.file_size, check_crc=True):
            if len(arr):
                return int(arr["position"][0]) == pos
            return bool(stop == pos and reason == self.codec.STOP_BLANK)
        return False

    # ---- verify ----

    def verify(self, progress: Optional[Callable[[str, int, int], None]] = None) -> dict[str, Any]:
        """Check every record's structure, body CRC and cross-checkable fields
        (``rocketstore.format._verify``), segment by segment.

        Returns ``{"records", "bytes", "segments", "min_offset", "problems", "found"}``:
        ``problems`` as :meth:`MessageStore.verify` reports them, ``found`` every record's
        (offsets, digests): its CommitLog offset and ``scan.record_digests`` (what a
        ConsumeQueue unit pointing at it must match), for checking the ConsumeQueues against.

        Those two columns, 16 bytes a record, are all that is kept of the records: they are
        appended, chunk by chunk, to arrays reserved once for as many records as the log can
        hold (:class:`ReservedColumns`). Memory the process never had is zeroed by the kernel as
        it is first written (0.4-1 GB/s on a virtual machine: a fifth of a first verify's time
        when the reserve kept every field, 41 bytes a record). Store timestamps are checked
        chunk by chunk; only from the first that steps back are they kept, for
        ``timestamp_problems``.
        """
        codec, scan = self.codec, self.scan
        files = list(self.segments.files)
        problems: list[dict[str, Any]] = []  # where the scan found no whole record
        fields: list[dict[str, Any]] = []  # fields of whole records that fail a cross-check
        first = files[0].file_from_offset if files else 0
        total = (self.max_offset - first) if files else 0
        capacity = total // codec.RECORD_FIXED_LENGTH + 1
        # (positions, digests): every record, in CommitLog order
        columns = ReservedColumns((np.int64, np.uint64), capacity)
        stamps = StampCheck(capacity)
        records = data_end = 0
        expected = first
        for mf in files:
            base = mf.file_from_offset
            if base != expected:
                problems.append(
                    {"offset": expected, "reason": f"segment missing: the next one starts at {base}"}
                )
            expected = mf.end_offset
            limit = mf.file_size
            if mf is files[-1] and not self.read_only:
                limit = self.readable_end(mf)
            will_read(mf)
            view = mf.view(0, limit)
            chunks = column_chunks(codec, scan, view, base, mf.file_size, mf.mm)
            for cols, stop, reason in checked_chunks(
                codec, view, 0, limit, base, self.readable_end(mf), chunks=chunks
            ):
                offsets, sizes, qids, qoffsets, keys, ts, flags, units = cols
                if len(offsets):
                    data_end = int(offsets[-1]) + int(sizes[-1])
                    records += len(offsets)
                    if flags.any():  # damage: the reasons need the records' fields (decoded again)
                        fields.extend(
                            {"offset": at, "reason": why}
                            for at, why in self._field_reasons(view, base, offsets[flags != 0], mf.file_size)
                        )
                    if units.any():  # PREPARED or ROLLBACK records, or an implausible queue offset
                        implausible = (units & scan.SCAN_IMPLAUSIBLE_QUEUE_OFFSET) != 0
                        fields.extend(
                            {"offset": int(at), "reason": "queue offset no CommitLog can hold"}
                            for at in offsets[implausible]
                        )
                    columns.append((offsets, scan.record_digests(qids, qoffsets, sizes, keys, units)))
                    stamps.add(offsets, ts, records - len(offsets))
                if progress is not None:
                    progress("verify", min(base + stop - first, total), total)
                if reason in (codec.STOP_BAD_CRC, STEPPED):
                    problems.append({"offset": base + stop, "reason": stop_reason(codec, reason)})
            if reason in (codec.STOP_BLANK, codec.STOP_BAD_CRC, STEPPED) or stop >= limit:
                pass  # a bad CRC that ends the segment has lengths that cannot be trusted
            elif (
                reason == codec.STOP_END
                and mf is files[-1]
                and (self.read_only or not np.frombuffer(view, dtype=np.uint8, offset=stop).any())
            ):
                pass  # zero-filled space after the last record (read-only: see below)
            else:
                problems.append({"offset": base + stop, "reason": stop_reason(codec, reason)})
        positions, digests = columns.filled()
        fields += stamps.problems()
        if self.read_only:  # a writer's record in progress is no damage
            problems = [p for p in problems if p["offset"] < data_end and not self.written_since(p["offset"])]
        problems += fields  # problems of whole records
        if progress is not None:
            progress("verify", total, total)
        return {
            "records": records,
            "bytes": total,
            "segments": len(files),
            "min_offset": first,
            "problems": problems,
            "found": (positions, digests),
        }

    def _field_reasons(
        self, view: Any, base: int, offsets: np.ndarray, segment_size: int
    ) -> list[tuple[int, str]]:
        """``record_problems`` of the records at CommitLog ``offsets`` of segment ``view`` (which
        starts at ``base``), each decoded again: what verify_scan flagged, in words."""
        codec = self.codec
        rows, gone = [], []
        for at in offsets.tolist():
            row = codec.decode_batch(view, at - base, check_crc=True, max_records=1)[0]
            if len(row) == 1 and int(row["position"][0]) == at - base:
                rows.append(row)
            else:  # whole when scanned, not now: never drop what the scan flagged
                gone.append((at, "a field fails a cross-check, and the record changed while verified"))
        if not rows:
            return gone
        reasons, _keys = record_problems(self.scan, view, base, np.concatenate(rows), segment_size)
        return reasons + gone


#: truncate_to reads and zeroes the stale tail in chunks of this size.
_ZERO_CHUNK = 1 << 20


def _written_to(mf: MappedFile, pos: int, hi: int) -> int:
    """Where the data of ``mf`` that starts at ``pos`` ends (at most ``hi``): the scan past what
    the checkpoint vouches for stops at a hole. A hole holds no record (it reads as zeros, where
    the scan would stop as well), and a read of one through the map can be a SIGBUS on a full
    tmpfs, which needs a page even for that."""
    if pos >= hi:
        return hi
    extents = mf.data_extents(pos, hi, most=1)
    if not extents or extents[0][0] > pos:
        return pos
    return extents[0][1]


def _zero_stale(mf: MappedFile, pos: int, everywhere: bool) -> int:
    """Zero every chunk of ``mf`` from ``pos`` to its end that holds a byte other than zero
    (``everywhere``; else up to the first chunk that is all zero); returns where the last chunk
    zeroed ends (``pos`` when none was).

    Only the file's data is read and written (:meth:`MappedFile.data_extents`): a hole is zero
    already, and a read of one through the map can be a SIGBUS on a full tmpfs. A chunk is
    allocated before it is zeroed (:meth:`MappedFile.zero`), so a full disk is a
    :class:`DiskFullError`, never a signal."""
    mm, last = mf.mm, pos
    for lo, hi in mf.data_extents(pos, most=-1 if everywhere else 1):
        if not everywhere and lo > pos:
            break  # a hole at the end of what was written: zero from there on
        while lo < hi:
            n = min(_ZERO_CHUNK, hi - lo)
            if mm[lo : lo + n].count(0) != n:
                mf.zero(lo, lo + n)
                last = lo + n
            elif not everywhere:
                return last  # zero from here: preallocated space the writer never reached
            lo += n
        if not everywhere:
            break
    return last
