"""RocketMQ 5.x's BatchConsumeQueue (docs/format.md §4.8), read and written.

A topic whose ``queue.type`` attribute is ``BatchCQ`` has no ConsumeQueue: its queues are
``batchconsumequeue/<topic>/<queueId>/<20-digit start byte offset>`` files of 46-byte units, one
per CommitLog record. A record there holds ``batch_size`` messages at queue offsets
``msg_base_offset ..``: an inner batch (sysFlag ``INNER_BATCH`` | ``NEED_UNWRAP``, properties
``INNER_NUM`` / ``INNER_BASE``) whose body is the messages in RocketMQ's batch encoding
(``MessageDecoder.encodeMessages``; rocketstore.queues.innerbatch), or one plain message
(``batch_size`` 1).

Each inner message is handed out on its own, as RocketMQ's client unwraps it
(``MessageDecoder.decodeMessage(MessageExt, List)``): the record's topic, queue id, hosts,
timestamps, sysFlag and CommitLog offset, queue offset ``base + i``, and its own flag, body and
properties.

Records the files do not index yet (a broker stopped before its dispatch got there, a file
lost) are indexed from the CommitLog at open. A writable store writes the files too
(:class:`BatchQueueFiles`), and its batch puts into such a topic write inner batch records as
5.3.3 does (:class:`InnerBatchWriter`; the record's INNER_BASE is set under the append lock by
the core's ``put_inner_batch``).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Optional

import numpy as np

from rocketstore.base._clock import now_ms
from rocketstore.errors import (
    ConsumeQueueDamagedError,
    CorruptRecordError,
    InvalidMessageError,
    MessageNotFoundError,
)
from rocketstore.format._codec_py import tags_code
from rocketstore.format.units import CQ_UNIT_DTYPE
from rocketstore.message import MessageExt, is_stored_topic
from rocketstore.queues.innerbatch import (
    InnerBatchWriter,
    batch_bodies,
    encode_inner_batch,
    inner_batch_properties,
    inner_count,
    inner_messages,
    inner_spans,
    java_map_order,
    java_properties,
    unwrap_rows,
)
from rocketstore.status import GetMessageStatus

__all__ = [
    "BCQ_UNIT_DTYPE",
    "BCQ_UNIT_SIZE",
    "BATCH_CQ",
    "QUEUE_TYPE",
    "BatchConsumeQueue",
    "BatchQueueFiles",
    "BatchQueueStore",
    "InnerBatchWriter",
    "batch_bodies",
    "batch_topics",
    "encode_inner_batch",
    "inner_batch_properties",
    "inner_count",
    "inner_messages",
    "inner_spans",
    "java_map_order",
    "java_properties",
    "load_units",
    "load_queue",
    "valid_prefix",
    "unwrap_rows",
]

#: the topic attribute that names a topic's queue type, and the value of a BatchConsumeQueue's
QUEUE_TYPE = "queue.type"
BATCH_CQ = "BatchCQ"
SIMPLE_CQ = "SimpleCQ"
DIRECTORY = "batchconsumequeue"

BCQ_UNIT_SIZE = 46
#: A BatchConsumeQueue unit (§4.8), big-endian as on disk.
BCQ_UNIT_DTYPE = np.dtype(
    [
        ("commitlog_offset", ">i8"),
        ("size", ">i4"),
        ("tags_code", ">i8"),
        ("store_time", ">i8"),
        ("base", ">i8"),
        ("batch_size", ">i2"),
        ("compacted_offset", ">i4"),
        ("reserved", ">i4"),
    ]
)
assert BCQ_UNIT_DTYPE.itemsize == BCQ_UNIT_SIZE


#: sysFlag's transaction bits, and the values of those that get no queue unit (prepared, rolled back)
_TRANSACTION_BITS = 0x0C
_NO_UNIT = (0x04, 0x0C)
#: how many queue offsets a get_units of a BatchConsumeQueue looks at, at least
_UNITS_SCAN = 1024


def batch_topics(root: str | os.PathLike[str], attributes: Mapping[str, Mapping[str, str]]) -> frozenset[str]:
    """The topics of the store at ``root`` whose queues are BatchConsumeQueues: ``queue.type``
    ``BatchCQ`` in ``attributes`` ({topic: attributes}, topics.json's), or a directory under
    ``batchconsumequeue/``."""
    found = {t for t, attrs in attributes.items() if attrs.get(QUEUE_TYPE) == BATCH_CQ}
    try:
        names = os.listdir(os.path.join(os.fspath(root), DIRECTORY))
    except (FileNotFoundError, NotADirectoryError):
        names = []
    found.update(n for n in names if is_stored_topic(n))
    return frozenset(found)


def set_queue_type(
    batch: BatchQueueStore,
    dispatcher: Any,
    topics: Any,
    topic: str,
    queue_type: str,
    queues: Mapping[tuple[str, int], tuple[int, int]],
) -> frozenset[str]:
    """create_topic's ``queue_type``: ``topic`` becomes a BatchCQ topic (``queue.type=BatchCQ``
    in topics.json, ``batch`` and ``dispatcher`` told), or stays what it is. Only a topic with
    no message in ``queues`` ({(topic, queue id): (min, max)} of the store, given when the type
    would change) may change; a BatchCQ topic stays one. Returns the store's BatchCQ topics."""
    if queue_type not in (BATCH_CQ, SIMPLE_CQ):
        raise InvalidMessageError(f"queue_type must be {BATCH_CQ!r} or {SIMPLE_CQ!r}, not {queue_type!r}")
    current = BATCH_CQ if topic in batch.topics else SIMPLE_CQ
    if queue_type == current:
        return batch.topics
    if queue_type == SIMPLE_CQ:
        raise InvalidMessageError(f"topic {topic!r} is a BatchCQ topic: its queue type stays BatchCQ")
    if any(hi > 0 for (t, _q), (_lo, hi) in queues.items() if t == topic):
        raise InvalidMessageError(
            f"topic {topic!r} holds messages in ConsumeQueues: it cannot become BatchCQ"
        )
    topics.update_attributes(topic, {QUEUE_TYPE: BATCH_CQ})
    batch.add_topic(topic)
    dispatcher.use_batch(batch)
    return batch.topics


def valid_prefix(units: np.ndarray) -> int:
    """How many leading ``units`` are valid, as ``BatchConsumeQueue.recover`` takes them: CommitLog
    offset and base 0 or more, size and batch size positive (an end unit or zeros end them)."""
    valid = (
        (units["commitlog_offset"] >= 0)
        & (units["size"] > 0)
        & (units["base"] >= 0)
        & (units["batch_size"] > 0)
    )
    bad = np.flatnonzero(~valid)
    return int(bad[0]) if len(bad) else len(units)


def load_units(directory: str) -> np.ndarray:
    """The valid units of the queue's files, oldest first (:func:`load_queue`'s)."""
    return load_queue(directory)[1]


def load_queue(directory: str) -> tuple[int, np.ndarray]:
    """(the number of the first unit on disk, the valid units of the queue's files, oldest
    first): as ``BatchConsumeQueue.recover`` takes them, up to the first unit
    :func:`valid_prefix` refuses (a whole file of valid units goes on into the next file) or
    the first file missing. A file's name is the byte offset of its first unit, so once
    retention deleted the first files the units are numbered from the first file left."""
    try:
        names = sorted(
            (n for n in os.listdir(directory) if len(n) == 20 and n.isascii() and n.isdigit()), key=int
        )
    except (FileNotFoundError, NotADirectoryError):
        names = []
    parts = []
    first = int(names[0]) // BCQ_UNIT_SIZE if names else 0
    expected = int(names[0]) if names else 0
    for name in names:
        if int(name) != expected:
            break  # a file missing: what follows it cannot be numbered
        with open(os.path.join(directory, name), "rb") as f:
            data = f.read()
        units = np.frombuffer(data, dtype=BCQ_UNIT_DTYPE, count=len(data) // BCQ_UNIT_SIZE)
        good = valid_prefix(units)
        parts.append(units[:good])
        if good < len(units) or not len(data) or len(data) % BCQ_UNIT_SIZE:
            break
        expected += len(data)
    if not parts:
        return first, np.empty(0, dtype=BCQ_UNIT_DTYPE)
    return first, np.concatenate(parts) if len(parts) > 1 else parts[0].copy()


#: 5.3.3's BatchConsumeQueue file: 300,000 units (``mapperFileSizeBatchConsumeQueue``)
BCQ_FILE_SIZE = 300_000 * BCQ_UNIT_SIZE


def file_size_of(directory: str) -> Optional[int]:
    """The size of the first file of a BatchConsumeQueue directory (a broker's setting), None
    when it has none or its size is no multiple of a unit."""
    try:
        names = sorted((n for n in os.listdir(directory) if len(n) == 20 and n.isdigit()), key=int)
        size = os.path.getsize(os.path.join(directory, names[0])) if names else 0
    except (FileNotFoundError, NotADirectoryError):
        return None
    return size if size > 0 and size % BCQ_UNIT_SIZE == 0 else None


class BatchQueueFiles:
    """Writes one BatchConsumeQueue's units into its files, as 5.3.3 lays them out
    (:meth:`BatchConsumeQueue.file_images`): files of ``file_size`` bytes named by their first
    byte's offset, each unit at ``46 * number``; the queue's unit 0 is number ``first`` (the
    first file left after retention deleted older ones). ``written`` units are on disk;
    :meth:`write` adds the queue's units past them, :meth:`sync` makes the files hold exactly
    the queue's units at a writable open (after recovery cut or mended them), :meth:`flush`
    makes the writes durable, :meth:`delete_expired` deletes the files retention emptied."""

    def __init__(self, directory: str, file_size: int, written: int, first: int = 0) -> None:
        if file_size <= 0 or file_size % BCQ_UNIT_SIZE:
            raise ValueError(f"a BatchConsumeQueue file size must be a positive multiple of {BCQ_UNIT_SIZE}")
        self.directory = directory
        self.file_size = file_size
        self.per_file = file_size // BCQ_UNIT_SIZE
        self.written = written
        self.first = first
        #: the files below this one are deleted
        self.first_file = first // self.per_file
        self._fds: dict[int, int] = {}
        self._dirty: set[int] = set()
        self._lock = threading.Lock()

    def _fd(self, index: int, create: bool = True) -> Optional[int]:
        fd = self._fds.get(index)
        if fd is None:
            path = os.path.join(self.directory, f"{index * self.file_size:020d}")
            if not create and not os.path.exists(path):
                return None
            os.makedirs(self.directory, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            if os.fstat(fd).st_size < self.file_size:
                os.ftruncate(fd, self.file_size)
            self._fds[index] = fd
        return fd

    def _put(self, number: int, data: bytes) -> None:
        """``data`` (whole units) at the queue's unit ``number`` on, across files."""
        number += self.first
        while data:
            index, slot = divmod(number, self.per_file)
            take = min(len(data) // BCQ_UNIT_SIZE, self.per_file - slot)
            fd = self._fd(index)
            assert fd is not None
            os.pwrite(fd, data[: take * BCQ_UNIT_SIZE], slot * BCQ_UNIT_SIZE)
            self._dirty.add(index)
            data, number = data[take * BCQ_UNIT_SIZE :], number + take

    def write(self, bq: BatchConsumeQueue) -> None:
        """The units of ``bq`` past those written, into the files."""
        with self._lock:
            units = bq.units_array(self.written)
            if len(units):
                self._put(self.written, units.tobytes())
                self.written += len(units)

    def sync(self, bq: BatchConsumeQueue, on_disk: int) -> None:
        """Make the files hold ``bq``'s units and nothing after them: ``on_disk`` units were
        read from them (recovery may have left some out, or indexed more from the CommitLog).
        Units left out are zeroed, and so is what follows the last unit when it is not zero (a
        unit the load refused, which a later load would stop at, and what is after it)."""
        with self._lock:
            keep = min(on_disk, len(bq))
            if on_disk > keep:
                self._put(keep, bytes((on_disk - keep) * BCQ_UNIT_SIZE))
            self.written = keep
        self.write(bq)
        with self._lock:
            index, slot = divmod(self.first + self.written, self.per_file)
            fd = self._fd(index, create=False)
            if fd is None or not os.pread(fd, BCQ_UNIT_SIZE, slot * BCQ_UNIT_SIZE).strip(b"\0"):
                return  # (the files end in zeros after the last unit, as written)
            while fd is not None:
                at = slot * BCQ_UNIT_SIZE
                tail = os.pread(fd, self.file_size - at, at)
                if tail.strip(b"\0"):
                    os.pwrite(fd, bytes(len(tail)), at)
                    self._dirty.add(index)
                index, slot = index + 1, 0
                fd = self._fd(index, create=False)

    def delete_expired(self, bq: BatchConsumeQueue, min_offset: int) -> int:
        """Delete the files, oldest first, whose every unit's record ends at or below CommitLog
        offset ``min_offset`` (retention deleted them); never the file of the last unit written.
        Returns how many files went."""
        deleted = 0
        with self._lock:
            last_file = (self.first + self.written - 1) // self.per_file
            while self.first_file < last_file:
                end = (self.first_file + 1) * self.per_file - self.first  # the queue's unit after the file
                if end > 0 and bq.record_end(end - 1) > min_offset:
                    break
                fd = self._fds.pop(self.first_file, None)
                if fd is not None:
                    os.close(fd)
                self._dirty.discard(self.first_file)
                try:
                    os.unlink(os.path.join(self.directory, f"{self.first_file * self.file_size:020d}"))
                except FileNotFoundError:
                    pass
                else:
                    deleted += 1
                self.first_file += 1
        return deleted

    def flush(self) -> None:
        with self._lock:
            for index in sorted(self._dirty):
                os.fsync(self._fds[index])
            self._dirty.clear()

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()


class BatchConsumeQueue:
    """One BatchConsumeQueue: its units on disk, then those dispatch found in the CommitLog past
    them (in memory). ``count_of(commitlog_offset)`` says how many messages a record holds and
    when it was stored: ``(count, store_timestamp)``."""

    def __init__(
        self,
        root: str,
        topic: str,
        queue_id: int,
        count_of: Callable[[int], tuple[int, int]],
        low: Optional[Callable[[], int]] = None,
    ) -> None:
        self.topic = topic
        #: the CommitLog's first offset retention left (units below it point at nothing)
        self._low = low
        self.queue_id = queue_id
        self.directory = os.path.join(root, DIRECTORY, topic, str(queue_id))
        self._count_of = count_of
        self._lock = threading.Lock()
        first, disk = load_queue(self.directory)
        #: the units on disk (read once at open), and the number on disk of the first
        self.disk_units = disk
        self.disk_first = first
        # the units' columns, grown by doubling (an append is amortised O(1)); [:_n] are valid
        self._n = len(disk)
        self._cols = [
            disk[name].astype(np.int64)
            for name in ("base", "commitlog_offset", "size", "batch_size", "tags_code", "store_time")
        ]
        #: what writes the units into the files (a writable store's; None: memory only)
        self.files: Optional[BatchQueueFiles] = None

    @property
    def _bases(self) -> np.ndarray:
        return self._cols[0][: self._n]

    @property
    def _offsets(self) -> np.ndarray:
        return self._cols[1][: self._n]

    @property
    def _sizes(self) -> np.ndarray:
        return self._cols[2][: self._n]

    @property
    def _counts(self) -> np.ndarray:
        return self._cols[3][: self._n]

    @property
    def _codes(self) -> np.ndarray:
        return self._cols[4][: self._n]

    @property
    def _times(self) -> np.ndarray:
        return self._cols[5][: self._n]

    def units_array(self, start: int = 0) -> np.ndarray:
        """The units from number ``start`` on as ``BCQ_UNIT_DTYPE`` (as the files hold them)."""
        with self._lock:
            n = self._n
            units = np.zeros(max(n - start, 0), dtype=BCQ_UNIT_DTYPE)
            for name, col in zip(
                ("base", "commitlog_offset", "size", "batch_size", "tags_code", "store_time"), self._cols
            ):
                units[name] = col[start:n]
        units["compacted_offset"] = -1
        return units

    def __len__(self) -> int:
        return len(self._bases)

    @property
    def min_offset(self) -> int:
        """The first queue offset whose record retention left (the max offset when none)."""
        bases = self._bases
        if not len(bases):
            return 0
        if self._low is None:
            return int(bases[0])
        i = int(np.searchsorted(self._offsets, self._low(), side="left"))
        return int(bases[i]) if i < len(bases) else self.max_offset

    @property
    def max_offset(self) -> int:
        return int(self._bases[-1] + self._counts[-1]) if len(self._bases) else 0

    def unit(self, queue_offset: int) -> tuple[int, int, int]:
        """(CommitLog offset, size, tagsCode) of the record holding ``queue_offset`` (as
        ``ConsumeQueue.unit``, for retention's binary searches); MessageNotFoundError outside
        ``[min_offset, max_offset)``."""
        with self._lock:
            bases, counts = self._bases, self._counts
            at = int(np.searchsorted(bases, queue_offset, side="right")) - 1
            if at < 0 or queue_offset >= int(bases[at] + counts[at]):
                raise MessageNotFoundError(
                    f"queue offset {queue_offset} is outside {self.topic}-{self.queue_id}"
                )
            return int(self._offsets[at]), int(self._sizes[at]), int(self._codes[at])

    def iter_units(
        self, start: Optional[int] = None, stop: Optional[int] = None, chunk: int = 65536
    ) -> Iterator[tuple[int, np.ndarray]]:
        """(the first record's base, its units as ``CQ_UNIT_DTYPE``) of the records holding queue
        offsets in ``[start, stop)`` (default: all): one unit per record, not per message
        (retention adds up the records' bytes), ``chunk`` records at a time."""
        with self._lock:
            n = self._n
            bases, offsets, sizes, counts, codes = (
                col[:n].copy()
                for col in (self._cols[0], self._cols[1], self._cols[2], self._cols[3], self._cols[4])
            )
        lo = 0 if start is None else int(np.searchsorted(bases + counts, start, side="right"))
        hi = n if stop is None else int(np.searchsorted(bases, stop, side="left"))
        for at in range(lo, hi, chunk):
            end = min(at + chunk, hi)
            units = np.zeros(end - at, dtype=CQ_UNIT_DTYPE)
            units["commitlog_offset"] = offsets[at:end]
            units["size"] = sizes[at:end]
            units["tags_code"] = codes[at:end]
            yield int(bases[at]), units

    def record_end(self, number: int) -> int:
        """Where the record of the queue's unit ``number`` ends in the CommitLog."""
        with self._lock:
            return int(self._cols[1][number] + self._cols[2][number])

    @property
    def last_base(self) -> int:
        """The queue offset of the last record indexed (-1: none)."""
        return int(self._bases[-1]) if len(self._bases) else -1

    @property
    def max_physic_offset(self) -> int:
        """The end of the last record indexed (-1: none)."""
        return int(self._offsets[-1] + self._sizes[-1]) if len(self._offsets) else -1

    def truncate(self, end: int) -> int:
        """Leave out the units whose record does not end by CommitLog offset ``end`` (recovery
        cut the CommitLog there: a broker stopped abnormally after indexing records it had not
        made durable); the files keep them. Returns how many were left out."""
        with self._lock:
            keep = int(np.searchsorted(self._offsets + self._sizes, end, side="right"))
            dropped = self._n - keep
            self._n = keep
        return dropped

    def append(self, queue_offset: int, commitlog_offset: int, size: int, tags_code: int) -> bool:
        """Index a record dispatch found (``queue_offset``: its QUEUEOFFSET, the batch's base)
        when it lies past the last one indexed; one indexed already is left as it is."""
        if commitlog_offset + size <= self.max_physic_offset:
            return False
        count, store_time = self._count_of(commitlog_offset)
        with self._lock:
            n = self._n
            if n == len(self._cols[0]):
                self._cols = [np.concatenate([c, np.zeros(max(n, 16), dtype=np.int64)]) for c in self._cols]
            for col, value in zip(
                self._cols, (queue_offset, commitlog_offset, size, count, tags_code, store_time)
            ):
                col[n] = value
            self._n = n + 1
        if self.files is not None:
            self.files.write(self)
        return True

    def append_many(self, queue_offsets: Any, commitlog_offsets: Any, sizes: Any, tags_codes: Any) -> int:
        """:meth:`append` of each unit; returns how many were new."""
        added = 0
        for q, off, size, code in zip(
            np.asarray(queue_offsets).tolist(),
            np.asarray(commitlog_offsets).tolist(),
            np.asarray(sizes).tolist(),
            np.asarray(tags_codes).tolist(),
        ):
            added += self.append(q, off, size, code)
        return added

    def locate(self, queue_offset: int) -> Optional[tuple[int, int, int, int]]:
        """``(commitlog_offset, size, base, batch_size)`` of the record holding ``queue_offset``,
        None when no unit covers it."""
        i = int(np.searchsorted(self._bases, queue_offset, side="right")) - 1
        if i < 0:
            return None
        base, count = int(self._bases[i]), int(self._counts[i])
        if not base <= queue_offset < base + count:
            return None
        return int(self._offsets[i]), int(self._sizes[i]), base, count

    def rows(self, start: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """The queue offsets ``start ..`` (up to ``count`` of them, to the queue's end or the first
        one no unit covers), one row per inner message: ``(units, batch)``, ``units`` of
        ``CQ_UNIT_DTYPE`` (its record's CommitLog offset and size, its unit's tagsCode, repeated
        for each message of a batch) and ``batch`` each row's batch size."""
        with self._lock:
            bases, counts = self._bases, self._counts
            offsets, sizes, codes = self._offsets, self._sizes, self._codes
        end = min(start + max(count, 0), int(bases[-1] + counts[-1]) if len(bases) else 0)
        wanted = np.arange(start, max(start, end), dtype=np.int64)
        at = np.searchsorted(bases, wanted, side="right") - 1
        if len(bases):
            safe = np.maximum(at, 0)
            covered = (at >= 0) & (wanted < bases[safe] + counts[safe])
        else:
            covered = np.zeros(len(wanted), dtype=bool)
        gap = np.flatnonzero(~covered)
        if len(gap):
            at = at[: gap[0]]
        units = np.zeros(len(at), dtype=CQ_UNIT_DTYPE)
        units["commitlog_offset"] = offsets[at]
        units["size"] = sizes[at]
        units["tags_code"] = codes[at]
        return units, counts[at]

    def units(self, start: int, count: int) -> np.ndarray:
        """queue_units of this queue: :meth:`rows` from ``start`` (a copy, not a view of the
        files), after the checks of ``ConsumeQueue.units``: ``start == max_offset`` gives an
        empty array, a ``start`` outside ``[min_offset, max_offset]`` raises
        :class:`MessageNotFoundError`."""
        if count < 0:
            raise InvalidMessageError(f"count {count} is negative")
        if not self.min_offset <= start <= self.max_offset:
            raise MessageNotFoundError(
                f"queue offset {start} is outside [{self.min_offset}, {self.max_offset}] of "
                f"{self.topic}-{self.queue_id}"
            )
        return self.rows(start, count)[0]

    def offset_of_time(self, timestamp: int) -> int:
        """The first queue offset whose record was stored at or after ``timestamp`` (ms): the base
        of the first such unit (a batch's messages share their record's store time); the max
        offset when every one is older, 0 for an empty queue."""
        with self._lock:
            bases, times = self._bases, self._times
        i = int(np.searchsorted(times, timestamp, side="left"))  # store times do not decrease
        return int(bases[i]) if i < len(bases) else self.max_offset

    def file_images(self, file_size: int) -> dict[str, bytes]:
        """The queue's units as RocketMQ 5.3.3's BatchConsumeQueue lays them out in its files:
        ``{20-digit start byte offset: file_size bytes}`` from byte 0, each unit 46 bytes
        (compactedOffset -1, reserved 0), the last file zero-filled; a unit never straddles two
        files (``file_size`` a multiple of 46). What a writer of these files would write, as
        the tests compare with the fixture's own bytes."""
        if file_size <= 0 or file_size % BCQ_UNIT_SIZE:
            raise ValueError(f"a BatchConsumeQueue file size must be a positive multiple of {BCQ_UNIT_SIZE}")
        units = self.units_array()
        data = units.tobytes()
        per = file_size // BCQ_UNIT_SIZE * BCQ_UNIT_SIZE
        return {
            f"{start:020d}": data[start : start + per].ljust(file_size, b"\0")
            for start in range(0, max(len(data), 1), per)
        }

    def entries(self) -> Iterator[tuple[int, int, int, int]]:
        """Every unit: ``(commitlog_offset, size, base, batch_size)``, in queue order."""
        yield from zip(
            self._offsets.tolist(), self._sizes.tolist(), self._bases.tolist(), self._counts.tolist()
        )


def _record_count(commitlog: Any, commitlog_offset: int) -> tuple[int, int]:
    """How many queue offsets the record at ``commitlog_offset`` takes in a BatchConsumeQueue,
    and its store timestamp."""
    msg = commitlog.read(commitlog_offset)
    return inner_count(msg), int(msg.store_timestamp)


class BatchQueueStore:
    """The BatchConsumeQueues of a store's BatchCQ ``topics`` (:func:`batch_topics`), each loaded
    from disk, and made empty on first use for a queue without files; and their reads, each
    inner message at its own queue offset, from ``commitlog`` (``read(offset)`` a record,
    ``min_offset`` the oldest byte retention left)."""

    def __init__(self, root: str | os.PathLike[str], topics: Iterable[str], commitlog: Any):
        self.root = os.fspath(root)
        self.topics = frozenset(topics)
        self._commitlog = commitlog
        # (not a method of this store: its queues hold it, and would make a cycle with it)
        self._count_of = functools.partial(_record_count, commitlog)
        self._low = functools.partial(getattr, commitlog, "min_offset")
        self._queues: dict[tuple[str, int], BatchConsumeQueue] = {}
        self._lock = threading.Lock()
        self._file_size: Optional[int] = None  # (write_files: the files are written)
        #: what puts a batch into a BatchCQ topic (a writable store's: write_files)
        self.writer: Optional[InnerBatchWriter] = None
        for topic in sorted(self.topics):
            try:
                names = os.listdir(os.path.join(self.root, DIRECTORY, topic))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for name in sorted(names):
                if name.isascii() and name.isdigit() and str(int(name)) == name and int(name) <= 0x7FFFFFFF:
                    self.find_or_create(topic, int(name))

    def write_files(self, codec: Any, cluster: str, file_size: Optional[int] = None) -> None:
        """A writable store's: from now on each queue's units go into its files too (their size
        that of a queue's existing files, else ``file_size``, else 5.3.3's); the files are made
        to hold exactly the units recovery kept and mended. Writes nothing when they already do.
        :attr:`writer` then puts inner batch records (``codec``'s UNIQ_KEYs, ``cluster`` the
        broker cluster name they carry)."""
        self.writer = InnerBatchWriter(codec, cluster, now_ms)
        if file_size is None:
            found = [file_size_of(bq.directory) for bq in self._queues.values()]
            file_size = next((f for f in found if f), BCQ_FILE_SIZE)
        self._file_size = file_size
        for bq in list(self._queues.values()):
            self._attach(bq)

    def _attach(self, bq: BatchConsumeQueue) -> None:
        if bq.files is None and self._file_size is not None:
            files = BatchQueueFiles(
                bq.directory, file_size_of(bq.directory) or self._file_size, 0, bq.disk_first
            )
            bq.files = files
            files.sync(bq, len(bq.disk_units))

    def delete_expired(self, min_offset: int) -> int:
        """Delete the files of each queue whose records are all below CommitLog offset
        ``min_offset`` (retention's, after it deleted segments). Returns how many went."""
        return sum(bq.files.delete_expired(bq, min_offset) for bq in self if bq.files is not None)

    def flush(self) -> None:
        """fsync what the queues wrote into their files."""
        for bq in self:
            if bq.files is not None:
                bq.files.flush()

    def close(self) -> None:
        """Flush and close the files written (each queue whatever another raised)."""
        error: Optional[BaseException] = None
        for bq in self:
            if bq.files is not None:
                try:
                    bq.files.flush()
                except OSError as exc:
                    error = error or exc
                bq.files.close()
                bq.files = None
        if error is not None:
            raise error

    def add_topic(self, topic: str) -> None:
        """``topic`` is a BatchCQ topic from now on (created so)."""
        self.topics = self.topics | {topic}

    def __contains__(self, topic: object) -> bool:
        return topic in self.topics

    def __iter__(self) -> Iterator[BatchConsumeQueue]:
        return iter(list(self._queues.values()))

    def __len__(self) -> int:
        return len(self._queues)

    def get(self, topic: str, queue_id: int) -> Optional[BatchConsumeQueue]:
        return self._queues.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> BatchConsumeQueue:
        key = (topic, queue_id)
        bq = self._queues.get(key)
        if bq is None:
            with self._lock:
                bq = self._queues.get(key)
                if bq is None:
                    bq = BatchConsumeQueue(self.root, topic, queue_id, self._count_of, self._low)
                    self._attach(bq)
                    self._queues[key] = bq
        return bq

    def mend(self, queue_offsets: Mapping[tuple[str, int], int], end: int) -> int:
        """Index from the CommitLog, up to ``end``, the records of a BatchCQ queue whose files
        miss them at their tail (a file lost, a broker stopped before it flushed them, a queue
        with no files at all): ``queue_offsets`` is recovery's next queue offset of each queue
        by its records, a batch record counted once, so a queue whose last unit's base is below
        the last record's misses records. Returns how many records were indexed."""
        lagging: dict[tuple[str, int], BatchConsumeQueue] = {}
        for (topic, queue_id), nxt in queue_offsets.items():
            if topic in self.topics:
                bq = self.find_or_create(topic, queue_id)
                last_base = bq.last_base
                if nxt - 1 > last_base:
                    lagging[(topic, queue_id)] = bq
        if not lagging:
            return 0
        start = max(min(max(bq.max_physic_offset, 0) for bq in lagging.values()), self._commitlog.min_offset)
        queue_ids = np.array(sorted({q for _t, q in lagging}), dtype=np.int64)
        added = 0
        for mf, rows in self._commitlog.chunks(start, end):
            maybe = rows[np.isin(rows["queue_id"], queue_ids) & (rows["queue_offset"] >= 0)]
            for offset in (maybe["position"].astype(np.int64) + mf.file_from_offset).tolist():
                msg = self._commitlog.read(offset)
                bq_or_none = lagging.get((msg.topic, msg.queue_id))
                if bq_or_none is not None and msg.sys_flag & _TRANSACTION_BITS not in _NO_UNIT:
                    added += bq_or_none.append(msg.queue_offset, offset, msg.size, tags_code(msg.tags))
        return added

    def without_batch_topics(self, queue_offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """``queue_offsets`` but those of BatchCQ topics, which have no ConsumeQueue to mend."""
        if not self.topics:
            return queue_offsets
        return {key: nxt for key, nxt in queue_offsets.items() if key[0] not in self.topics}

    def messages(self, bq: BatchConsumeQueue, queue_offset: int) -> list[MessageExt]:
        """The messages of the record holding ``queue_offset`` in ``bq``, checked as a
        ConsumeQueue unit's record is (topic, queue id, base offset, size, count)."""
        found = bq.locate(queue_offset)
        if found is None:
            raise ConsumeQueueDamagedError(
                f"BatchConsumeQueue {bq.topic}-{bq.queue_id} has no unit for queue offset {queue_offset}",
                bq.topic,
                bq.queue_id,
                queue_offset,
            )
        commitlog_offset, size, base, count = found
        if commitlog_offset < self._commitlog.min_offset:
            raise MessageNotFoundError(
                f"queue offset {queue_offset} of {bq.topic}-{bq.queue_id}: its record is gone"
            )
        try:
            msg = self._commitlog.read(commitlog_offset)
        except MessageNotFoundError:
            msg = None
        inner = inner_messages(msg) if msg is not None else []
        if (
            msg is None
            or (msg.topic, msg.queue_id, msg.queue_offset, msg.size) != (bq.topic, bq.queue_id, base, size)
            or len(inner) != count
        ):
            raise ConsumeQueueDamagedError(
                f"BatchConsumeQueue {bq.topic}-{bq.queue_id} unit at queue offset {base} does not "
                f"point at its record",
                bq.topic,
                bq.queue_id,
                queue_offset,
            )
        return inner

    def pull(
        self, bq: BatchConsumeQueue, offset: int, max_msgs: int, tag_filter: Any
    ) -> tuple[GetMessageStatus, int, int, int, list[MessageExt], Any, Any]:
        """A pull of up to ``max_msgs`` inner messages from queue offset ``offset`` of ``bq``,
        filtered by each one's own tag (a unit's tagsCode stands for the whole record):
        ``(status, next offset, min offset, max offset, messages, units, queue offsets)`` as
        get_message gives them (a unit per message, as :meth:`units` gives them)."""
        lo, hi = bq.min_offset, bq.max_offset
        if hi == 0:
            return GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi, [], None, None
        if offset < lo:
            return GetMessageStatus.OFFSET_TOO_SMALL, lo, lo, hi, [], None, None
        if offset == hi:
            return GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi, [], None, None
        if offset > hi:
            return GetMessageStatus.OFFSET_OVERFLOW_BADLY, lo if lo == 0 else hi, lo, hi, [], None, None
        messages: list[MessageExt] = []
        position, scanned = offset, 0
        while position < hi and len(messages) < max_msgs and scanned < max(max_msgs, 64):
            for msg in self.messages(bq, position):
                if msg.queue_offset < position:
                    continue
                position = msg.queue_offset + 1
                scanned += 1
                if tag_filter.match_all or tag_filter.matches_tag(msg.tags):
                    messages.append(msg)
                    if len(messages) >= max_msgs:
                        break
        status = GetMessageStatus.FOUND if messages else GetMessageStatus.NO_MATCHED_MESSAGE
        queue_offsets = np.array([m.queue_offset for m in messages], dtype=np.int64)
        rows = bq.rows(offset, position - offset)[0][queue_offsets - offset]
        return status, position, lo, hi, messages, rows, queue_offsets

    def units(
        self, bq: BatchConsumeQueue, offset: int, max_msgs: int, tag_filter: Any
    ) -> tuple[GetMessageStatus, int, int, int, list[MessageExt], np.ndarray, np.ndarray]:
        """get_units of ``bq``: up to ``max_msgs`` rows from queue offset ``offset``, one per
        inner message (:meth:`BatchConsumeQueue.rows`), without reading the CommitLog. The
        tagsCode filters only a unit of one tagged message: a batch's unit (and any with tagsCode
        0) does not carry its messages' tags, so its rows are kept as candidates under any
        expression. ``(status, next offset, min, max, [], units, queue offsets)``."""
        lo, hi = bq.min_offset, bq.max_offset
        empty = np.empty(0, dtype=CQ_UNIT_DTYPE)
        none = np.empty(0, dtype=np.int64)
        if hi == 0:
            return GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi, [], empty, none
        if offset < lo:
            return GetMessageStatus.OFFSET_TOO_SMALL, lo, lo, hi, [], empty, none
        if offset == hi:
            return GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi, [], empty, none
        if offset > hi:
            return GetMessageStatus.OFFSET_OVERFLOW_BADLY, lo if lo == 0 else hi, lo, hi, [], empty, none
        rows, batch = bq.rows(offset, max(max_msgs, _UNITS_SCAN))
        queue_offsets = np.arange(offset, offset + len(rows), dtype=np.int64)
        if not tag_filter.match_all:
            codes = rows["tags_code"]
            keep = tag_filter.mask(codes) | (batch > 1) | (codes == 0)
            rows, queue_offsets = rows[keep], queue_offsets[keep]
        position = offset + len(batch)
        if len(rows) > max_msgs:
            rows, queue_offsets = rows[:max_msgs], queue_offsets[:max_msgs]
            position = int(queue_offsets[-1]) + 1
        status = GetMessageStatus.FOUND if len(rows) else GetMessageStatus.NO_MATCHED_MESSAGE
        return status, position, lo, hi, [], rows, queue_offsets

    def records_at(
        self, offsets: np.ndarray, sizes: np.ndarray, queue: tuple[str, int, int], check_crc: bool
    ) -> Iterator[tuple[int, Any, np.ndarray]]:
        """records_at of a BatchCQ queue's rows (:meth:`BatchConsumeQueue.rows`, one per inner
        message from queue offset ``queue[2]``): each row must be the record its unit names
        (topic, queue id, base offset, PHYSICALOFFSET) else :class:`ConsumeQueueDamagedError`,
        and yields one ``RECORD_DTYPE`` row per inner message: the record's fields, its queue
        offset, and the inner message's flag, body CRC, body and properties (positions in the
        segment's view). An inner batch whose body is compressed has no such spans in the view:
        it raises :class:`CorruptRecordError` naming it (get_message reads it)."""
        topic, queue_id, first = queue
        bq = self.get(topic, queue_id)
        wanted = [
            (first + i, int(o), int(n)) for i, (o, n) in enumerate(zip(offsets.tolist(), sizes.tolist()))
        ]
        records: dict[int, tuple[int, int, int]] = {}  # commitlog offset -> (size, base, count)
        for position, offset, size in wanted:
            found = bq.locate(position) if bq is not None else None
            if found is None or found[:2] != (offset, size):
                raise ConsumeQueueDamagedError(
                    f"BatchConsumeQueue {topic}-{queue_id} has no unit ({offset}, {size}) at queue "
                    f"offset {position}",
                    topic,
                    queue_id,
                    position,
                )
            records[offset] = (size, found[2], found[3])
        if not wanted:
            return
        lo, hi = wanted[0][0], wanted[-1][0] + 1
        starts = np.fromiter(records, dtype=np.int64, count=len(records))
        lengths = np.array([records[o][0] for o in records], dtype=np.int64)
        name = topic.encode("utf-8")
        for segment_start, view, rows in self._commitlog.records_at(starts, lengths, check_crc, None):
            for row in rows:
                offset = int(row["physical_offset"])
                size, base, count = records.get(offset, (-1, -1, -1))
                tpos, tlen = int(row["topic_pos"]), int(row["topic_len"])
                if (
                    int(row["position"]) + segment_start != offset
                    or (int(row["queue_id"]), int(row["queue_offset"]), int(row["size"]))
                    != (queue_id, base, size)
                    or bytes(view[tpos : tpos + tlen]) != name
                ):
                    raise ConsumeQueueDamagedError(
                        f"BatchConsumeQueue {topic}-{queue_id} unit at queue offset {base} does not "
                        f"point at its record",
                        topic,
                        queue_id,
                        max(base, lo),
                    )
            unwrapped = unwrap_rows(view, rows, segment_start)
            for offset in np.unique(unwrapped["physical_offset"]).tolist():
                size, base, count = records[offset]
                if int((unwrapped["physical_offset"] == offset).sum()) != count:
                    raise ConsumeQueueDamagedError(
                        f"BatchConsumeQueue {topic}-{queue_id} unit at queue offset {base} counts "
                        f"{count} messages, not its record's",
                        topic,
                        queue_id,
                        max(base, lo),
                    )
            q = unwrapped["queue_offset"]
            yield segment_start, view, unwrapped[(q >= lo) & (q < hi)]

    def verify(self, problems: list[dict[str, Any]], low: int, max_per_queue: int = 10) -> int:
        """verify() of the BatchConsumeQueues: each unit follows the one before it (base =
        previous base + batch size) and points at its record (topic, queue id, base, size and
        message count), but units below ``low``, which point at what retention deleted. Adds
        what it finds to ``problems``; returns how many queues it checked."""
        for bq in self:
            bad, expect = 0, None
            for commitlog_offset, _size, base, count in bq.entries():
                reason = None
                if expect is not None and base != expect:
                    reason = f"starts at queue offset {base}, not {expect}"
                elif commitlog_offset >= low:
                    try:
                        self.messages(bq, base)
                    except (ConsumeQueueDamagedError, MessageNotFoundError, CorruptRecordError):
                        reason = "does not point at a valid record of its queue"
                expect = base + count
                if reason is not None:
                    bad += 1
                    if bad <= max_per_queue:
                        problems.append(
                            {
                                "offset": int(commitlog_offset),
                                "reason": f"BatchConsumeQueue {bq.topic}-{bq.queue_id} unit {base} {reason}",
                            }
                        )
        return len(self)
