"""What a store's services see of it: its layers, not the facade's internals.

A :class:`~rocketstore.MessageStore` builds one :class:`StoreParts` when it opens and hands it to
its services (retention, delayed delivery): they work on the CommitLog, the ConsumeQueues, the
index, the dispatcher and the topic table through these, and put into system topics through
``put_message``. Nothing here refers back to the store (``put_message`` holds it weakly), so a
dropped store is still collected and closed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rocketstore.config import StoreConfig
from rocketstore.log.commitlog import CommitLog
from rocketstore.services.topics import Topics

__all__ = ["StoreParts"]


@dataclass(eq=False)
class StoreParts:
    """The layers of one open, writable store."""

    #: the store root
    path: str
    config: StoreConfig
    commitlog: CommitLog
    #: the ConsumeQueues (:class:`~rocketstore.queues.cqstore.ConsumeQueueStore`)
    queues: Any
    #: the index files (:class:`~rocketstore.queues.indexservice.IndexService`)
    index: Any
    #: CommitLog -> queues and index (:class:`~rocketstore.queues.dispatch.Dispatcher`)
    dispatcher: Any
    topics: Topics
    #: ``put_message(message, durable, mode)``: the store's own put of a
    #: :class:`~rocketstore.message.Message` into a system topic (no user-topic checks)
    put_message: Callable[..., Any]
    #: the consumer offset table (:class:`~rocketstore.files.configfiles.ConsumerOffsetTable`): the
    #: retention policy ``delete_when_consumed`` reads how far each group consumed
    offsets: Any = None
    #: the BatchConsumeQueues of ``queue.type=BatchCQ`` topics
    #: (:class:`~rocketstore.queues.batchcq.BatchQueueStore`, None when there is none): retention
    #: reads them beside the ConsumeQueues
    batch: Any = None

    def all_queues(self) -> list[Any]:
        """The ConsumeQueues, then the BatchConsumeQueues."""
        return [*self.queues, *(self.batch if self.batch is not None else ())]
