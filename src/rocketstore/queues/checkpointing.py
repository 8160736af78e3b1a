"""When the checkpoint moves (§6): ``confirmPhyOffset`` names a CommitLog offset a recovery after
a crash may start its scan at, so it moves only once the CommitLog, the ConsumeQueues and the
index are durable that far (and the index's resume point with them)."""

from __future__ import annotations

import os
import time
from typing import Any

from rocketstore.files.checkpoint import Checkpoint

__all__ = ["Checkpointer"]

#: How often the dispatch thread writes the consumer offsets (RocketMQ's flushConsumerOffsetInterval).
OFFSETS_PERSIST_MS = 5000
#: How long a checkpoint waits for the CommitLog's flush before it leaves the move to the next (ms).
_FLUSH_WAIT_MS = 5000


class Checkpointer:
    """Moves a writable store's ``checkpoint`` to where its ``dispatcher`` got: ``core`` is the
    CommitLog's append core, ``queues`` its ConsumeQueueStore, ``index`` its IndexService;
    ``offsets`` its ConsumerOffsetTable, which :meth:`background` writes now and then, with the
    offsets the groups of the store at ``root`` committed."""

    __slots__ = (
        "checkpoint",
        "_core",
        "_dispatcher",
        "_queues",
        "_index",
        "_offsets",
        "_root",
        "_persisted",
        "batch",
    )

    def __init__(
        self,
        checkpoint: Checkpoint,
        core: Any,
        dispatcher: Any,
        queues: Any,
        index: Any,
        offsets: Any,
        root: str | os.PathLike[str],
    ) -> None:
        self.checkpoint = checkpoint
        self._core = core
        self._dispatcher = dispatcher
        self._queues = queues
        self._index = index
        self._offsets = offsets
        self._root = root
        self._persisted = 0.0  # monotonic time of the last periodic offsets write
        #: the BatchConsumeQueues whose files are written (rocketstore.queues.batchcq), if any
        self.batch: Any = None

    def background(self) -> None:
        """The dispatch thread's periodic step: the checkpoint (:meth:`save`), and every
        ``OFFSETS_PERSIST_MS`` the consumer offsets (with those the groups committed), as a
        broker flushes them every 5 s."""
        self.save()
        now = time.monotonic()
        if now - self._persisted >= OFFSETS_PERSIST_MS / 1000.0:
            self._persisted = now
            # not under the store's mutex: close() holds it while it stops this thread
            self._offsets.import_group_offsets(self._root)
            self._offsets.persist()

    def save(self) -> None:
        """Make the ConsumeQueues and the index durable up to the dispatch offset and record
        that offset (and its store time) in the checkpoint: a recovery after a crash starts
        there. Nothing moves while the CommitLog is not durable that far (next time)."""
        dispatcher, cp, core = self._dispatcher, self.checkpoint, self._core
        with dispatcher.lock:
            offset, timestamp = dispatcher.offset, dispatcher.last_store_timestamp
            if offset == cp.confirm_phy_offset:
                return
            if core.flushed_offset < offset and not core.flush(_FLUSH_WAIT_MS):
                return
            self._queues.flush()
            if self.batch is not None:
                self.batch.flush()
            self._index.flush()
            self._index.save_resume_point()
            cp.confirm_phy_offset = offset
            if timestamp:
                cp.physic_msg_timestamp = cp.logics_msg_timestamp = timestamp
            cp.flush()

    def final(self) -> None:
        """The checkpoint of a clean close, once the dispatcher caught up and the queues and
        the index are closed (flushed): it vouches for everything dispatched."""
        cp = self.checkpoint
        last = max(self._core.last_store_timestamp, self._dispatcher.last_store_timestamp)
        if last:
            cp.physic_msg_timestamp = cp.logics_msg_timestamp = last
        cp.confirm_phy_offset = self._dispatcher.offset
        cp.flush()
