"""A store's topics (``config/topics.json``) as puts, the append core and the services see them.

Every change is persisted at once and told to the append core, which caches each topic's queue
count; one lock orders changes against each other and against the core's first-use lookups.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any, Optional

from rocketstore.errors import InvalidQueueIdError
from rocketstore.files.configfiles import TopicConfigTable
from rocketstore.message import validate_topic
from rocketstore.queues.compaction import CLEANUP_POLICY, COMPACTION

__all__ = ["Topics"]


class Topics:
    """The topic table of one store; ``core`` (the append core, None until there is one) is told
    of every change so that its cached queue counts stay right."""

    def __init__(
        self, table: TopicConfigTable, default_queues: int, lock: Optional[threading.RLock] = None
    ) -> None:
        self.table = table
        self.default_queues = default_queues
        self.lock = lock if lock is not None else threading.RLock()
        self.core: Any = None
        #: sets of the topics a put was checked for (the facade's, whose puts skip the careful
        #: checks, and the putter's compacted ones): a topic whose attributes change leaves
        #: them, to be checked again
        self.checked: tuple[set[str], ...] = ()
        #: called (under the lock) once a change of a topic's attributes is persisted: the
        #: owner tells the joined writers (rocketstore.joined), or None
        self.changed: Optional[Callable[[], None]] = None

    def counts(self) -> dict[str, int]:
        """{topic: queue count}."""
        return {t: self.table.queues(t) for t in self.table.topics}

    def __len__(self) -> int:
        return len(self.table.topics)

    def queues_for_put(self, topic: str) -> int:
        """The queue count of ``topic``, created with ``default_queues`` on first use (as a
        broker's autoCreateTopicEnable does). The append core's lookup."""
        validate_topic(topic)
        with self.lock:
            queues = self.table.queues(topic)
            if not queues:
                queues = self.default_queues
                self.table.create(topic, queues)
                try:
                    self.table.persist()
                except BaseException:
                    self.table.delete(topic)  # not kept: the put that asked stores nothing
                    raise
            return queues

    def queue_for_put(self, topic: str, queue_id: int, round_robin: dict[str, itertools.count[int]]) -> int:
        """The queue a put of ``topic`` into a system topic first (a delay level, a timer) will
        reach: ``queue_id``, or with -1 the next of ``round_robin``'s counter for the topic.
        Creates the topic as :meth:`queues_for_put`; InvalidQueueIdError past its queues."""
        counter = round_robin.get(topic) if queue_id < 0 else None
        if counter is not None:  # the common case: a known topic whose counter exists already
            queues = self.table.queues(topic)
            if queues:
                return next(counter) % queues
        queues = self.queues_for_put(topic)
        if queue_id < 0:
            return next(round_robin.setdefault(topic, itertools.count())) % queues
        if queue_id >= queues:
            raise InvalidQueueIdError(
                f"queue id {queue_id} out of range: topic {topic!r} has {queues} queues"
            )
        return queue_id

    def set(self, topic: str, queues: int, *, perm: Optional[int] = None) -> None:
        """Create ``topic`` or change its queue count (and permission bits)."""
        with self.lock:
            if perm is None:
                self.table.create(topic, queues)
            else:
                self.table.create(topic, queues, perm=perm)
            self.table.persist()
            if self.core is not None:
                self.core.forget_topic(topic)

    def compacted(self, topic: str) -> bool:
        """Whether ``topic`` is compacted (RocketMQ 5.x's ``cleanup.policy=COMPACTION``)."""
        return self.table.attributes(topic).get(CLEANUP_POLICY, "").upper() == COMPACTION

    def attributes(self, topic: str) -> dict[str, str]:
        """The topic's 5.x ``attributes`` map (a copy; {} for an unknown topic)."""
        return self.table.attributes(topic)

    def update_attributes(self, topic: str, changes: dict[str, Optional[str]]) -> dict[str, str]:
        """Set (str) or remove (None) attributes of ``topic`` (created with ``default_queues``
        when unknown) and persist; returns the new map."""
        validate_topic(topic)
        with self.lock:
            created = not self.table.queues(topic)
            if created:
                self.table.create(topic, self.default_queues)
            attrs = self.table.update_attributes(topic, changes)
            self.table.persist()
            for checked in self.checked:
                checked.discard(topic)
            if created and self.core is not None:
                self.core.forget_topic(topic)
            if self.changed is not None:
                self.changed()
            return attrs

    def reload(self) -> None:
        """Read the table again from its file (another process changed it: a joined writer's
        topics, after the owner's); every topic a put was checked for is checked again."""
        with self.lock:
            self.table.load()
            for checked in self.checked:
                checked.clear()

    def ensure(self, topic: str, queues: int, *, perm: int) -> None:
        """Make ``topic`` exist with at least ``queues`` queues (a system topic a service writes)."""
        with self.lock:
            if self.table.get(topic) is not None and self.table.queues(topic) >= queues:
                return
            self.set(topic, queues, perm=perm)

    def persist(self) -> None:
        self.table.persist()
