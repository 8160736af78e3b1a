"""The careful path of a store's reads: :class:`StoreReads`.

The facade's point reads take one compiled call (the compiled codec's ``FastReads``; the pure
build has no such front: its point reads come here, and read through the same kernels); what
those cannot answer (a zero-copy read, a damaged or missing record, a bad argument, a closed store, a
BatchCQ topic) comes here, as do the bulk reads: the CommitLog in order (``iter_messages``,
``scan``, ``records_at``), ``verify``, the lookups by key and the views of the queues. A
``StoreReads`` holds the parts of one open of a store (the store makes a new one at each) and
its pulls by queue position (rocketstore.queues.puller); each call first asks the store whether
it is open (``open_reads(store)``, which a following store may answer by opening again: the
call then goes on with the new open's reads).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any, Optional

import numpy as np

from rocketstore.base._checks import INT64_MAX, check_int
from rocketstore.base._clock import now_ms
from rocketstore.errors import InvalidMessageIdError, MessageNotFoundError, StoreClosedError
from rocketstore.files.mapped_file import MappedFile
from rocketstore.format.tagfilter import TagFilter
from rocketstore.format.units import CQ_UNIT_DTYPE
from rocketstore.log import recordscan
from rocketstore.message import MessageExt
from rocketstore.queues.compaction import latest_per_key, read_compaction_log
from rocketstore.queues.indexservice import MAX_MSGS_NUM_BATCH
from rocketstore.queues.puller import Puller, check_name
from rocketstore.queues.pulls import GetMessageResult, get_units
from rocketstore.queues.queuecheck import verify_store
from rocketstore.queues.unitfiles import offset_of_time
from rocketstore.status import GetMessageStatus

__all__ = ["StoreReads"]


def _placed(msg: MessageExt, commitlog_offset: int) -> MessageExt:
    """``msg``, read at ``commitlog_offset``, if its record says it was written there: a
    whole, CRC-valid record moved from elsewhere (its PhysicalOffset field names another
    place; verify() lists it) is not the message stored at that offset."""
    if msg.commitlog_offset != commitlog_offset:
        raise MessageNotFoundError(
            f"no message at commitlog offset {commitlog_offset}: the record there says it was "
            f"written at {msg.commitlog_offset} (damage; verify() lists it)"
        )
    return msg


def _offset_bounds(start: Optional[int], end: Optional[int]) -> tuple[Optional[int], Optional[int]]:
    """A scan's CommitLog bounds, each None or an int >= 0 (InvalidMessageError otherwise: a
    float or NaN bound would be compared, not refused, and the scan would start anywhere)."""
    return (
        None if start is None else check_int("start", start, 0),
        None if end is None else check_int("end", end, 0),
    )


class StoreReads:
    """The careful path of the reads of one open of a store (see the module's docstring):
    ``opened`` (rocketstore.processes.opening.OpenedParts), ``codec``, ``pulls`` (the open's
    Puller), ``store_ref`` (the store, held weakly), ``closed(store)`` and ``open_reads(store)``
    (the store's current reads once it is open; StoreClosedError otherwise)."""

    __slots__ = ("opened", "codec", "core", "pulls", "_store", "_closed", "_open_reads")

    def __init__(
        self,
        opened: Any,
        codec: Any,
        pulls: Puller,
        store_ref: Callable[[], Any],
        closed: Callable[[Any], bool],
        open_reads: Callable[[Any], StoreReads],
    ) -> None:
        self.opened, self.codec, self.pulls = opened, codec, pulls
        self.core = None if opened.read_only else opened.core  # (a reader's: the segments alone)
        self._store, self._closed, self._open_reads = store_ref, closed, open_reads

    def _store_of(self) -> Any:
        store = self._store()
        if store is None:
            raise StoreClosedError("the store is closed")
        return store

    def checked(self) -> StoreReads:
        """The store's reads once it is open (a following store may open again here)."""
        return self._open_reads(self._store_of())

    def _quick(self) -> bool:
        """Whether a compiled call may answer: the store is open and follows no writer that
        opened the store since."""
        store = self._store()
        if store is None or self._closed(store):
            return False
        follower = self.opened.follower
        return follower is None or bool(follower.follow())

    def _batch_topics(self) -> Any:
        batch = self.opened.batch
        return batch.topics if batch is not None else ()

    # ---- the CommitLog ----

    def read(self, commitlog_offset: int, *, zero_copy: bool = False) -> MessageExt:
        if not zero_copy and self._quick():
            msg: Optional[MessageExt] = self.codec.record_at(
                self.opened.segments, self.core, commitlog_offset
            )
            if msg is not None:  # else the careful path says why not, or reads it
                return _placed(msg, commitlog_offset)
        reads = self.checked()
        return _placed(reads.record(commitlog_offset, zero_copy), commitlog_offset)

    def record(self, commitlog_offset: int, zero_copy: bool = False) -> MessageExt:
        """The message of the record at ``commitlog_offset`` (no check that it was written there)."""
        msg: MessageExt = self.opened.commitlog.read(commitlog_offset, zero_copy)
        return msg

    def get_by_msg_id(self, msg_id: str, *, zero_copy: bool = False) -> MessageExt:
        if not zero_copy and self._quick():
            msg: Optional[MessageExt] = self.codec.message_by_id(self.opened.segments, self.core, msg_id)
            if msg is not None:  # else the careful path says why not, or reads it
                return msg
        if not isinstance(msg_id, str):
            raise InvalidMessageIdError(f"message id must be a str, not {type(msg_id).__name__}")
        _host, _port, offset = self.codec.parse_offset_msg_id(msg_id)
        msg = self.read(offset, zero_copy=zero_copy)
        if msg.msg_id != msg_id.upper():
            raise MessageNotFoundError(f"message {msg_id} is not in this store")
        return msg

    def iter_messages(
        self,
        start: Optional[int] = None,
        end: Optional[int] = None,
        *,
        zero_copy: bool = False,
        check_crc: bool = True,
    ) -> Iterator[MessageExt]:
        """Messages in CommitLog order from offset ``start`` (default: the first) up to ``end``.

        Each body's CRC is checked and a damaged record is skipped (logged; :meth:`verify`
        lists them), as is a whole record whose PHYSICALOFFSET names another place (a copy:
        :meth:`read` refuses it there). ``check_crc=False`` trusts the bytes and reads faster. A ``start`` or
        ``end`` that is not an int >= 0 raises ``InvalidMessageError`` when iteration begins."""
        reads = self.checked()
        return itertools.chain.from_iterable(reads.message_chunks(start, end, zero_copy, check_crc))

    def message_chunks(
        self, start: Optional[int], end: Optional[int], zero_copy: bool, check_crc: bool
    ) -> Iterator[Iterator[MessageExt]]:
        """iter_messages' messages, a chunk at a time."""
        start, end = _offset_bounds(start, end)  # (raised when iteration begins)
        yield from recordscan.message_chunks(
            self.opened.commitlog, self.codec, start, end, zero_copy, check_crc
        )

    def scan(
        self,
        start: Optional[int] = None,
        end: Optional[int] = None,
        *,
        check_crc: bool = True,
        views: bool = False,
    ) -> Iterator[tuple[Any, ...]]:
        """Columnar scan: yields ``(segment_start, records)`` with ``records`` a numpy array of up to
        65536 ``RECORD_DTYPE`` rows (positions relative to the segment), decoded in C without a
        Python call per field. CRCs as in :meth:`iter_messages`.

        ``views=True`` yields ``(segment_start, view, records)`` as :meth:`records_at` does:
        ``view`` is a read-only map of the segment the positions point into."""
        commitlog = self.checked().opened.commitlog
        start, end = _offset_bounds(start, end)
        mf: MappedFile
        for mf, arr in commitlog.chunks(start, end, check_crc, 0):
            if views:
                yield mf.file_from_offset, mf.view(0, commitlog.readable_end(mf)), arr
            else:
                yield mf.file_from_offset, arr

    def records_at(
        self,
        commitlog_offsets: Any,
        sizes: Any,
        *,
        check_crc: bool = True,
        queue: Optional[tuple[str, int, int]] = None,
    ) -> Iterator[tuple[int, Any, np.ndarray]]:
        opened = self.checked().opened
        offsets = np.asarray(commitlog_offsets, dtype=np.int64)
        sizes = np.asarray(sizes, dtype=np.int64)
        if len(offsets) != len(sizes):
            raise ValueError("commitlog_offsets and sizes differ in length")
        if queue is not None and opened.batch is not None and queue[0] in opened.batch.topics:
            yield from opened.batch.records_at(offsets, sizes, queue, check_crc)  # a row per inner message
            return
        if len(offsets) > 1 and (np.diff(offsets) <= 0).any():
            raise ValueError("commitlog_offsets must be strictly ascending")
        check = None
        if queue is not None:
            guard = opened.guard
            check = lambda view, base, rows, first: guard.check_rows(view, base, rows, queue, first)
        yield from opened.commitlog.records_at(offsets, sizes, check_crc, check)

    def verify(self, progress: Optional[Callable[[str, int, int], None]] = None) -> dict[str, Any]:
        """Check every record's structure and body CRC, segment by segment, every field that can
        be cross-checked (``rocketstore.format._verify``: PhysicalOffset against the record's position,
        room for the BLANK record, sysFlag bits, the prepared-transaction offset, topic
        characters, properties as UTF-8, a §1.6 CRC32 property where there is one, store
        timestamps against their neighbours'), and every ConsumeQueue unit against the record it
        points to (topic, queue id, queue offset, size).
        Works on read-only stores.

        Returns ``{"ok", "records", "bytes", "segments", "min_offset", "max_offset",
        "queues", "problems"}``; each problem is ``{"offset", "reason"}``. A record with a bad
        CRC is skipped by its length and the scan goes on; a record whose lengths make no sense
        ends its segment. ``progress("verify", done, total)`` is called as bytes are checked.

        A read-only store checks every segment to the end of the file: damage followed by
        whole records is reported, but not what follows the last whole record, since a writer
        beside it may be in the middle of writing that (or a crash left it, which the next
        writable open cuts).
        """
        opened = self.checked().opened
        opened.dispatcher.catch_up()
        found = verify_store(opened.commitlog, opened.guard, opened.batch, opened.short_queues, progress)
        found["max_offset"] = opened.commitlog.max_offset
        return found

    # ---- the queues of BatchCQ topics (rocketstore.queues.batchcq) ----

    def batch_queue(self, topic: str, queue_id: int) -> Any:
        """The BatchConsumeQueue of (topic, queue_id) after dispatch caught up, or None."""
        opened = self.checked().opened
        opened.dispatcher.catch_up()
        return opened.batch.get(topic, queue_id)

    def batch_pull(
        self,
        topic: str,
        queue_id: int,
        offset: Optional[int],
        group: str,
        max_msgs: int,
        tag_filter: TagFilter,
    ) -> GetMessageResult:
        """get_message of a BatchCQ topic: each inner message at its own queue offset, filtered
        by its own tag."""
        max_msgs = check_int("max_msgs", max_msgs, 1)
        bq = self.batch_queue(topic, int(queue_id))
        if bq is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0)
        opened = self.checked().opened
        if offset is None:
            offset = opened.offsets.query(group, topic, int(queue_id))
            if offset < 0:
                offset = bq.min_offset
        return GetMessageResult(*opened.batch.pull(bq, offset, max_msgs, tag_filter))

    def pop_pull(
        self, group: str, topic: str, queue_id: int, offset: int, max_msgs: int, tag_filter: Any = None
    ) -> GetMessageResult:
        """POP's pull (rocketstore.services.pop): a BatchCQ topic's one inner message at a time."""
        if topic in self._batch_topics():
            return self.batch_pull(
                topic, queue_id, offset, group, max_msgs, tag_filter or TagFilter.parse(None)
            )
        return self.pulls.pop_pull(group, topic, queue_id, offset, max_msgs, tag_filter)

    def pop_lookup(self, topic: str, queue_id: int, queue_offset: int) -> MessageExt:
        """POP's read of one message by queue offset."""
        if topic in self._batch_topics():
            return self.get_by_queue_offset(topic, queue_id, queue_offset)
        return self.pulls.pop_lookup(topic, queue_id, queue_offset)

    # ---- the views of the queues ----

    def get_units(
        self, topic: str, queue_id: int, offset: int, max_msgs: int = 32, tags: Optional[str] = None
    ) -> GetMessageResult:
        if topic in self._batch_topics():  # one row per inner message (rocketstore.queues.batchcq)
            bq = self.batch_queue(topic, check_int("queue_id", queue_id))
            if bq is not None:
                batch = self.checked().opened.batch
                units = batch.units(bq, check_int("offset", offset), max_msgs, TagFilter.parse(tags))
                return GetMessageResult(*units)
        return get_units(self.pulls.queue(topic, queue_id), offset, max_msgs, TagFilter.parse(tags))

    def queue_units(self, topic: str, queue_id: int, start: int, count: int) -> np.ndarray:
        if topic in self._batch_topics():  # one row per inner message (rocketstore.queues.batchcq)
            cq = self.batch_queue(topic, check_int("queue_id", queue_id))
        else:
            cq = self.pulls.queue(topic, queue_id)
        start, count = check_int("start", start), check_int("count", count)
        if cq is None:
            if start == 0:
                return np.empty(0, dtype=CQ_UNIT_DTYPE)
            raise MessageNotFoundError(f"no queue {topic}-{queue_id}")
        units: np.ndarray = cq.units(start, count)
        return units

    def _queue_of(self, topic: str, queue_id: int) -> Any:
        if topic in self._batch_topics():
            return self.batch_queue(topic, check_int("queue_id", queue_id))
        return self.pulls.queue(topic, queue_id)

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        cq = self._queue_of(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        cq = self._queue_of(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def queue_offset_of_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        if topic in self._batch_topics():
            bq = self.batch_queue(topic, check_int("queue_id", queue_id))
            return bq.offset_of_time(check_int("timestamp", timestamp)) if bq is not None else 0
        cq = self.pulls.queue(topic, queue_id)
        timestamp = check_int("timestamp", timestamp)
        if cq is None:
            return 0
        commitlog = self.checked().opened.commitlog

        def store_time_of(commitlog_offset: int) -> Optional[int]:
            try:
                return int(commitlog.read(commitlog_offset).store_timestamp)
            except MessageNotFoundError:
                return None  # gone (retention): older than anything left

        return offset_of_time(cq, timestamp, store_time_of)  # a read-only store's TailQueue too

    def queues(self) -> dict[tuple[str, int], tuple[int, int]]:
        opened = self.checked().opened
        opened.dispatcher.catch_up()
        found = {(cq.topic, cq.queue_id): (cq.min_offset, cq.max_offset) for cq in opened.queues}
        if opened.batch is not None and opened.batch.topics:
            found.update({(bq.topic, bq.queue_id): (bq.min_offset, bq.max_offset) for bq in opened.batch})
        return found

    def compaction_log(self, topic: str, queue_id: int) -> list[MessageExt]:
        reads = self.checked()
        check_name("topic", topic)
        queue_id = check_int("queue_id", queue_id, 0)
        return read_compaction_log(reads.opened.path, topic, queue_id, self.codec.decode_record)

    def compacted(self, topic: str, queue_id: int) -> dict[str, MessageExt]:
        log = self.compaction_log(topic, queue_id)
        start = log[-1].queue_offset + 1 if log else 0
        store = self._store_of()

        def past_the_log() -> Iterator[MessageExt]:
            position = max(start, store.min_queue_offset(topic, queue_id))
            end = store.max_queue_offset(topic, queue_id)
            while position < end:
                got = store.get_message("rocketstore-compacted", topic, queue_id, position, 256)
                yield from got.messages
                if got.next_begin_offset <= position:
                    break
                position = got.next_begin_offset

        return latest_per_key(itertools.chain(log, past_the_log()))

    def queue_offsets(self) -> dict[tuple[str, int], int]:
        opened = self.checked().opened if self.opened.read_only else self.opened
        if opened.read_only and opened.follower is not None:
            opened.dispatcher.catch_up()  # (before the BatchCQ queues: a put may have made one)
        batch = opened.batch if opened.batch is not None and opened.batch.topics else ()
        if opened.read_only:
            found = dict(opened.queue_offsets)
            found.update({(bq.topic, bq.queue_id): bq.max_offset for bq in batch})
            if opened.follower is not None:
                for cq in opened.queues:
                    key = (cq.topic, cq.queue_id)
                    if cq.max_offset > found.get(key, 0):
                        found[key] = cq.max_offset
            return found
        offsets: dict[tuple[str, int], int] = opened.core.queue_offsets()
        if batch:  # the core counts a batch record as one offset
            return {**offsets, **{(b.topic, b.queue_id): b.max_offset for b in batch}}
        return offsets

    # ---- lookups (§3, §5.5) ----

    def key_offsets(self, topic: str, key: str) -> Optional[list[int]]:
        opened = self.checked().opened
        check_name("topic", topic)
        check_name("key", key)
        opened.dispatcher.catch_up(index=True)
        offsets: Optional[list[int]] = opened.lookups.offsets(topic, key)
        return offsets

    def query_by_key(
        self, topic: str, key: str, max_num: int = 32, begin: int = 0, end: Optional[int] = None
    ) -> list[MessageExt]:
        if self._quick():
            # the common case in one compiled call: the dispatcher's catch-up (when it has
            # anything to do), index walk, re-check and decode of each hit; None for anything
            # the checks below must decide
            opened = self.opened
            hits: Optional[list[MessageExt]] = self.codec.key_lookup(
                (opened.disk_index, opened.index),
                opened.segments,
                self.core,
                topic,
                key,
                max_num,
                begin,
                end,
                MAX_MSGS_NUM_BATCH,
                opened.dispatcher,
            )
            if hits is not None:
                return hits
        opened = self.checked().opened
        check_name("topic", topic)
        check_name("key", key)
        max_num = check_int("max_num", max_num, 1)
        begin = check_int("begin", begin, 0)
        end = INT64_MAX if end is None else check_int("end", end, 0)
        opened.dispatcher.catch_up(index=True)
        found: list[MessageExt] = opened.lookups.by_key(topic, key, max_num, begin, end)
        return found

    def query_by_unique_key(self, topic: str, unique_key: str) -> MessageExt:
        opened = self.checked().opened
        check_name("topic", topic)
        check_name("unique_key", unique_key)
        opened.dispatcher.catch_up(index=True)
        found: MessageExt = opened.lookups.by_unique_key(topic, unique_key, now_ms())
        return found

    def get_by_queue_offset(self, topic: str, queue_id: int, queue_offset: int) -> MessageExt:
        if self._quick():
            # the common case in one compiled call: the unit, its record, every check of
            # QueueGuard.unit_message; anything else (None) takes the careful path below
            msg: Optional[MessageExt] = self.codec.queue_message(
                self.opened.queues, topic, queue_id, queue_offset, self.opened.segments, self.core
            )
            if msg is not None:
                return msg
        queue_offset = check_int("queue_offset", queue_offset)
        if topic in self._batch_topics():
            bq = self.batch_queue(topic, check_int("queue_id", queue_id))
            if bq is None or not bq.min_offset <= queue_offset < bq.max_offset:
                raise MessageNotFoundError(f"no message at queue offset {queue_offset} of {topic}-{queue_id}")
            for msg in self.checked().opened.batch.messages(bq, queue_offset):
                if msg.queue_offset == queue_offset:
                    return msg
            raise AssertionError("unreachable")  # messages() checked the count
        return self.pulls.message_at(topic, queue_id, queue_offset)
