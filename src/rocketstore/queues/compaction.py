"""RocketMQ 5.x's compacted topics (``cleanup.policy=COMPACTION``), read.

A 5.x broker with ``enableCompaction`` compacts such a topic's queues in the background
(``CompactionStore``): it copies the latest message of each key (the ``KEYS`` property) into
``compaction/compactionLog/<topic>/<queueId>/<20-digit start>`` (records in the CommitLog's
format, at their original queue offsets) and indexes them in
``compaction/compactionCq/<topic>/<queueId>/`` (46-byte units of the BatchConsumeQueue's layout,
a sparse queue: one unit per record kept, ``commitlog_offset`` its position in the compaction
log). ``compaction/position-checkpoint`` (JSON) says how far each queue was compacted.

:func:`read_compaction_log` reads one queue's log; :func:`latest_per_key` makes the compacted view,
the latest message of each key, a key whose latest message has an empty body (a tombstone)
left out. :class:`CompactionPositions` is the position checkpoint; the writing side (copies and
compactions by rocketstore's own retention passes) is :mod:`rocketstore.services.compaction`.
"""

from __future__ import annotations

import json
import mmap
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Optional

import numpy as np

from rocketstore.errors import CorruptRecordError, StoreConfigError
from rocketstore.files.configfiles import ConfigFile
from rocketstore.format.units import CQ_UNIT_DTYPE
from rocketstore.message import MessageExt
from rocketstore.queues.batchcq import BCQ_UNIT_DTYPE, BCQ_UNIT_SIZE, valid_prefix
from rocketstore.queues.pulls import GetMessageResult
from rocketstore.status import GetMessageStatus

__all__ = [
    "CLEANUP_POLICY",
    "COMPACTION",
    "CompactedReads",
    "DELETE",
    "read_compaction_log",
    "CompactionPositions",
    "compacted_pull",
    "compacted_topics",
    "compaction_log_size",
    "file_names",
    "latest_per_key",
    "pending_swap",
    "queue_files",
    "units_of",
]

#: the topic attribute naming its cleanup policy, and the value of a compacted topic's
CLEANUP_POLICY = "cleanup.policy"
COMPACTION = "COMPACTION"
DELETE = "DELETE"
DIRECTORY = "compaction"


def compaction_log_size(queue_file_size: int, log_file_size: int) -> int:
    """The size of a compaction log file, from the configured queue file size (a multiple of
    46) and log file size: a whole number of queue files' worth, at least 5 (the broker's
    ``CompactionLog.getCompactionLogSize``)."""
    n, m = divmod(log_file_size, queue_file_size)
    if n < 5:
        return queue_file_size * 5
    return n * queue_file_size if 0 < m < queue_file_size >> 1 else (n + 1) * queue_file_size


class CompactionPositions(ConfigFile):
    """``compaction/position-checkpoint``: per queue, the last queue offset a compaction saw
    (``{"queueOffsetMap": {"<topic>_<queueId>": offset}}``, the broker's ``CompactionPositionMgr``)."""

    FILE_NAME = "position-checkpoint"

    def reset(self) -> None:
        self.table: dict[str, int] = {}

    def decode(self, data: Any) -> None:
        known, extra = self._split_extra(data, ("queueOffsetMap",))
        table = known.get("queueOffsetMap") or {}
        if not isinstance(table, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in table.items()
        ):
            raise StoreConfigError("queueOffsetMap is not a map of queue to offset")
        extra.pop("empty", None)
        self.table, self._extra = dict(table), extra

    def encode(self) -> dict[str, Any]:
        return {**self._extra, "empty": not self.table, "queueOffsetMap": dict(self.table)}

    def get(self, topic: str, queue_id: int) -> int:
        """The last queue offset compacted (-1: none)."""
        with self._lock:
            return self.table.get(f"{topic}_{queue_id}", -1)

    def set(self, topic: str, queue_id: int, offset: int) -> None:
        with self._lock:
            self.table[f"{topic}_{queue_id}"] = int(offset)
            self.dirty = True


def compacted_topics(attributes: Mapping[str, Mapping[str, str]]) -> frozenset[str]:
    """The topics whose ``cleanup.policy`` is ``COMPACTION`` in ``attributes`` ({topic: attributes})."""
    return frozenset(t for t, attrs in attributes.items() if attrs.get(CLEANUP_POLICY) == COMPACTION)


#: where a compaction writes its new files (a directory under ``compaction/`` no broker reads),
#: and the file (under ``config/``) that records a swap of old files for new ones in progress
SCRATCH = "rocketstore-compacting"
SWAP_FILE = "compactionSwap.json"


def file_names(directory: str) -> list[str]:
    """The 20-digit file names in ``directory``, oldest (smallest start) first; none when it is missing."""
    try:
        found = [n for n in os.listdir(directory) if len(n) == 20 and n.isascii() and n.isdigit()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(found, key=int)


def pending_swap(root: str | os.PathLike[str]) -> Optional[dict[str, Any]]:
    """The swap a compaction recorded and has not finished ({"topic", "queue_id", "old", "new",
    "position"}), or None."""
    try:
        with open(os.path.join(os.fspath(root), "config", SWAP_FILE), encoding="utf-8") as f:
            swap = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise CorruptRecordError(f"{SWAP_FILE}: {exc}") from None
    if not isinstance(swap, dict) or not {"topic", "queue_id", "old", "new", "position"} <= swap.keys():
        raise CorruptRecordError(f"{SWAP_FILE} is not a compaction swap")
    return swap


def queue_files(root: str | os.PathLike[str], kind: str, topic: str, queue_id: int) -> list[tuple[int, str]]:
    """(start, path) of a compaction queue's ``kind`` ("compactionLog" or "compactionCq") files,
    oldest first, as they are once a pending swap is finished: a new file still waiting in the
    scratch directory stands for the old one of its name, and the old files the swap deletes are
    left out."""
    base = os.path.join(os.fspath(root), DIRECTORY)
    directory = os.path.join(base, kind, topic, str(queue_id))
    files = {int(n): os.path.join(directory, n) for n in file_names(directory)}
    swap = pending_swap(root)
    if swap is not None and (swap["topic"], int(swap["queue_id"])) == (topic, queue_id):
        new = {int(n) for n in swap["new"]}
        for start in swap["old"]:
            if int(start) not in new:
                files.pop(int(start), None)
        scratch = os.path.join(base, SCRATCH, kind, topic, str(queue_id))
        for start in new:
            waiting = os.path.join(scratch, f"{start:020d}")
            if os.path.exists(waiting):
                files[start] = waiting
    return sorted(files.items())


def units_of(paths: Iterable[str]) -> np.ndarray:
    """The valid units of each of a sparse queue's files (up to its first invalid unit: an end
    unit or zeros), oldest first."""
    parts = []
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        units = np.frombuffer(data, dtype=BCQ_UNIT_DTYPE, count=len(data) // BCQ_UNIT_SIZE)
        parts.append(units[: valid_prefix(units)])
    return np.concatenate(parts) if parts else np.empty(0, dtype=BCQ_UNIT_DTYPE)


def read_compaction_log(
    root: str | os.PathLike[str],
    topic: str,
    queue_id: int,
    decode: Callable[..., Any],
    attempts: int = 5,
) -> list[MessageExt]:
    """The records one queue's compaction log keeps (``rocketstore.MessageStore.compaction_log``),
    in queue order, each checked as a pull checks it (CRC, topic, queue id, queue offset, size
    against its unit), read again when a compaction replaced files under the read (a file gone,
    or a record or order that does not check); the last attempt's error is raised. ``decode``
    is the codec's ``decode_record``."""
    for attempt in range(attempts):
        log = None
        try:
            log = _MappedLog(os.fspath(root), topic, queue_id, ())
            return [log.message(unit, decode, topic, queue_id) for unit in log.units]
        except (FileNotFoundError, CorruptRecordError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.01 * (attempt + 1))
        finally:
            if log is not None:
                log.close()
    raise AssertionError("unreachable")


class CompactedReads:
    """Pulls of a compacted topic's queue below the queue's min offset (the records retention
    deleted from the CommitLog), served from the queue's compaction log, as a 5.x broker serves
    a compaction topic: what the log kept, at its queue offsets, the gaps skipped.
    ``decode(buffer, position, ...)`` is the codec's record decoder."""

    def __init__(self, root: str | os.PathLike[str], decode: Callable[..., Any]) -> None:
        self._root = os.fspath(root)
        self._decode = decode
        self._lock = threading.Lock()
        self._queues: dict[tuple[str, int], _MappedLog] = {}

    def pull(
        self, topic: str, queue_id: int, offset: int, max_msgs: int, limit: int, tag_filter: Any
    ) -> Optional[tuple[list[MessageExt], list[int], int]]:
        """(up to ``max_msgs`` messages the log keeps at queue offsets ``offset`` .. ``limit``
        that ``tag_filter`` lets through, their units' tagsCodes, the queue offset to pull from
        next), or None when the log keeps nothing there."""
        with self._lock:
            key = (topic, queue_id)
            log = self._queues.get(key)
            signature = _signature(self._root, topic, queue_id)
            if log is None or log.signature != signature:
                if log is not None:
                    log.close()
                log = self._queues[key] = _MappedLog(self._root, topic, queue_id, signature)
            bases = log.bases
            at = int(np.searchsorted(bases, offset))
            end = int(np.searchsorted(bases, limit))
            if at >= end:
                return None
            out: list[MessageExt] = []
            codes: list[int] = []
            while at < end and len(out) < max_msgs:
                unit = log.units[at]
                at += 1
                code = int(unit["tags_code"])
                if not tag_filter.matches_code(code):
                    continue
                msg = log.message(unit, self._decode, topic, queue_id)
                if tag_filter.matches_tag(msg.tags):
                    out.append(msg)
                    codes.append(code)
            return out, codes, int(bases[at]) if at < end else limit

    def close(self) -> None:
        with self._lock:
            for log in self._queues.values():
                log.close()
            self._queues.clear()


def compacted_pull(
    reads: CompactedReads,
    attributes: Callable[[str], Mapping[str, str]],
    cq: Any,
    start: int,
    max_msgs: int,
    tag_filter: Any,
) -> Optional[GetMessageResult]:
    """A pull of the ConsumeQueue ``cq`` below its min offset, when its topic is compacted
    (``attributes(topic)`` says): what the compaction log kept from ``start`` on, each message's
    ``commitlog_offset`` -1 since its record left the CommitLog. None: the topic is not
    compacted, or the log keeps nothing there (the pull's own rules then say OFFSET_TOO_SMALL)."""
    if attributes(cq.topic).get(CLEANUP_POLICY, "").upper() != COMPACTION:
        return None
    got = reads.pull(cq.topic, cq.queue_id, start, max_msgs, cq.min_offset, tag_filter)
    if got is None:
        return None
    messages, codes, next_offset = got
    for msg in messages:
        msg.commitlog_offset = -1  # its record is no longer in the CommitLog
    units = np.array([(-1, m.size, c) for m, c in zip(messages, codes)], dtype=CQ_UNIT_DTYPE)
    status = GetMessageStatus.FOUND if messages else GetMessageStatus.NO_MATCHED_MESSAGE
    offsets = np.array([m.queue_offset for m in messages], dtype=np.int64)
    return GetMessageResult(status, next_offset, cq.min_offset, cq.max_offset, messages, units, offsets)


def _signature(root: str, topic: str, queue_id: int) -> tuple[Any, ...]:
    """What changes when a queue's compaction files change: names, sizes and mtimes, and a swap
    in progress."""
    out: list[Any] = []
    for kind in ("compactionLog", "compactionCq"):
        for start, path in queue_files(root, kind, topic, queue_id):
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            out.append((kind, start, path, st.st_size, st.st_mtime_ns))
    return tuple(out)


class _MappedLog:
    """One queue's compaction log, mapped, and its units."""

    def __init__(self, root: str, topic: str, queue_id: int, signature: tuple[Any, ...]) -> None:
        self.signature = signature
        self.units = units_of(path for _, path in queue_files(root, "compactionCq", topic, queue_id))
        self.bases = self.units["base"].astype(np.int64)
        if len(self.bases) > 1 and not (self.bases[1:] > self.bases[:-1]).all():
            raise CorruptRecordError(f"compaction log {topic}-{queue_id}: queue offsets out of order")
        self._files: list[tuple[int, mmap.mmap]] = []
        for start, path in queue_files(root, "compactionLog", topic, queue_id):
            with open(path, "rb") as f:
                if os.fstat(f.fileno()).st_size:
                    self._files.append((start, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)))

    def message(self, unit: Any, decode: Callable[..., Any], topic: str, queue_id: int) -> MessageExt:
        offset, size, base = int(unit["commitlog_offset"]), int(unit["size"]), int(unit["base"])
        for start, mm in self._files:
            if start <= offset and offset - start + size <= len(mm):
                msg: MessageExt = decode(mm[offset - start : offset - start + size], 0, check_crc=True)
                if (msg.topic, msg.queue_id, msg.queue_offset, msg.size) == (topic, queue_id, base, size):
                    msg.commitlog_offset = offset  # its place in the compaction log
                    return msg
                break
        raise CorruptRecordError(
            f"compaction log {topic}-{queue_id}: no record of queue offset {base} ({size} bytes) at {offset}"
        )

    def close(self) -> None:
        for _, mm in self._files:
            mm.close()
        self._files = []


def latest_per_key(messages: Iterable[MessageExt]) -> dict[str, MessageExt]:
    """{key: the last message of ``messages`` with that key}, in the order of those last
    messages, a key whose last message has an empty body (a tombstone) left out. The key is the
    whole ``KEYS`` property, as the broker's compaction takes it (``"a b"`` is one key, not two:
    a view keyed per word would change when a compaction runs); a message without keys has none."""
    latest: dict[str, MessageExt] = {}
    for msg in messages:
        key = msg.keys or ""
        if key.strip():
            latest.pop(key, None)
            latest[key] = msg
    return {key: msg for key, msg in latest.items() if len(msg.body)}
