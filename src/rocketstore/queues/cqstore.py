"""The ConsumeQueues of a store: :class:`ConsumeQueueStore`, every queue under
``<root>/consumequeue`` by (topic, queue id), loaded, recovered, flushed and closed together
(each queue is a rocketstore.queues.consumequeue.ConsumeQueue)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Optional

from rocketstore.errors import StoreConfigError
from rocketstore.format._hotstate import QueueTable
from rocketstore.message import is_stored_topic
from rocketstore.queues.consumequeue import DEFAULT_CQ_UNITS, ConsumeQueue

__all__ = ["ConsumeQueueStore"]


class ConsumeQueueStore(QueueTable):
    """Every consume queue under ``<root>/consumequeue``, keyed by (topic, queue id).

    The constructor maps every ``consumequeue/<topic>/<queueId>`` directory (skipping names that
    are not a topic or an integer queue id); call :meth:`recover` next, as the store does.
    """

    # ``_queues`` (a read-only view, changed through ``_put_queue`` and ``_take_queues``) is
    # the QueueTable's it extends: see ConsumeQueue.__slots__.
    __slots__ = ("__dict__", "__weakref__")

    def __init__(
        self,
        root: str,
        units_per_file: int = DEFAULT_CQ_UNITS,
        read_only: bool = False,
        *,
        preallocate: bool = False,
    ):
        self.root = os.fspath(root)
        self.directory = os.path.join(self.root, "consumequeue")
        self.units_per_file = units_per_file
        self.read_only = bool(read_only)
        self.preallocate = preallocate
        super().__init__()
        self._lock = threading.Lock()
        self.load()

    def load(self) -> None:
        """Map every queue on disk (a queue already loaded is kept)."""
        try:
            topics = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return
        except NotADirectoryError:
            raise StoreConfigError(f"{self.directory} is not a directory") from None
        try:
            for topic in topics:
                topic_dir = os.path.join(self.directory, topic)
                if not os.path.isdir(topic_dir) or not is_stored_topic(topic):
                    continue
                for name in sorted(os.listdir(topic_dir)):
                    if (
                        not (name.isascii() and name.isdigit())
                        or str(int(name)) != name  # not a name a queue id is written as
                        or int(name) > 0x7FFFFFFF  # QUEUEID is an int32: no queue of ours or Java's
                        or not os.path.isdir(os.path.join(topic_dir, name))
                    ):
                        continue
                    key = (topic, int(name))
                    if key in self._queues:
                        continue
                    cq = ConsumeQueue(
                        self.root,
                        topic,
                        key[1],
                        self.units_per_file,
                        self.read_only,
                        preallocate=self.preallocate,
                    )
                    cq.load()
                    self._put_queue(key, cq)
        except BaseException:
            self.close()
            raise

    def recover(self, limit: Optional[int] = None) -> int:
        """Recover every queue: :meth:`ConsumeQueue.recover` (§4.4, after a clean stop), or with
        ``limit`` :meth:`ConsumeQueue.recover_prefix` (after an abnormal one). Returns the max
        physical offset over all (-1: none)."""
        if limit is None:
            return max((cq.recover() for cq in self), default=-1)
        return max((cq.recover_prefix(limit) for cq in self), default=-1)

    def truncate_dirty(self, process_offset: int) -> None:
        """``truncateDirtyLogicFiles(process_offset)`` on every queue."""
        for cq in self:
            cq.truncate_dirty(process_offset)

    def correct_min_offset(self, min_commitlog_offset: int) -> None:
        """:meth:`ConsumeQueue.correct_min_offset` on every queue."""
        for cq in self:
            cq.correct_min_offset(min_commitlog_offset)

    def delete_expired(self, min_phy_offset: int) -> int:
        """``deleteExpiredFile`` on every queue; returns the number of files deleted."""
        return sum(cq.delete_expired(min_phy_offset) for cq in self)

    def get(self, topic: str, queue_id: int) -> Optional[ConsumeQueue]:
        """The queue, or None when it does not exist (``NO_MATCHED_LOGIC_QUEUE``)."""
        return self._queues.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue of (topic, queue_id), created empty (nothing on disk yet) if missing."""
        key = (topic, queue_id)
        cq: Optional[ConsumeQueue] = self._queues.get(key)
        if cq is not None:
            return cq
        with self._lock:
            cq = self._queues.get(key)
            if cq is None:
                cq = ConsumeQueue(
                    self.root,
                    topic,
                    queue_id,
                    self.units_per_file,
                    self.read_only,
                    preallocate=self.preallocate,
                )
                self._put_queue(key, cq)
            return cq

    def topics(self) -> list[str]:
        """The topics that have at least one queue, sorted."""
        return sorted({topic for topic, _ in self._queues})

    def max_offsets(self) -> dict[tuple[str, int], int]:
        """{(topic, queue id): max_offset} of every queue."""
        with self._lock:
            queues = list(self._queues.items())
        return {key: cq.max_offset for key, cq in queues}

    def flush(self, least_pages: int = 0) -> bool:
        """Flush every queue; True if any had something to flush. Every queue's writeback is
        started first (:meth:`ConsumeQueue.start_flush`), so the msyncs wait for the writes of
        all the queues together, not one queue's after another's."""
        queues = list(self)
        if len(queues) > 1:
            for cq in queues:
                cq.start_flush(least_pages)
        flushed = False
        for cq in queues:
            flushed |= cq.flush(least_pages)
        return flushed

    def start_flush(self) -> None:
        """:meth:`ConsumeQueue.start_flush` on every queue: their writeback started, nothing
        waited for (a hint)."""
        for cq in self:
            cq.start_flush()

    def close(self) -> None:
        """Flush and close every queue."""
        with self._lock:
            queues = self._take_queues()
        for cq in queues:
            cq.close()

    def __iter__(self) -> Iterator[ConsumeQueue]:
        with self._lock:
            return iter(list(self._queues.values()))

    def __len__(self) -> int:
        return len(self._queues)

    def __contains__(self, key: object) -> bool:
        return key in self._queues

    def __enter__(self) -> ConsumeQueueStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
