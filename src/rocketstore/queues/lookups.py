"""Lookups by key (§3, §5.5): the index files' candidates for ``topic#key``, each re-checked
on its record in the CommitLog.

The index keeps a hash of ``topic#key`` and a store time in whole seconds, so what it returns
are candidates: each is read from the CommitLog and kept only if its real topic, its keys (or
UNIQ_KEY) and its store time match. A writable store has one index service; a read-only one two
(the files on disk, and what it dispatched into memory past them).
"""

from __future__ import annotations

from typing import Any, Optional

from rocketstore.errors import InvalidMessageIdError, MessageNotFoundError
from rocketstore.message import MessageExt
from rocketstore.queues.indexservice import MAX_MSGS_NUM_BATCH

__all__ = ["KeyLookups"]

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class KeyLookups:
    """The lookups by key of one open store: ``services`` are its index services (``(disk,
    memory)`` of a read-only store, ``(None, index)`` of a writable one), ``commitlog`` the
    CommitLog the candidates are read from, ``core`` its append core (None when read-only).
    The arguments are checked and dispatch caught up by the caller."""

    __slots__ = ("_codec", "_commitlog", "_core", "_disk_index", "_index")

    def __init__(self, codec: Any, commitlog: Any, core: Any, services: tuple[Any, Any]) -> None:
        self._codec = codec
        self._commitlog = commitlog
        self._core = core
        self._disk_index, self._index = services

    def candidates(
        self, topic: str, key: str, begin: int, end: int, most: int = MAX_MSGS_NUM_BATCH
    ) -> list[int]:
        """The CommitLog offsets the index holds under ``topic#key`` within ``[begin, end]``, at
        most ``most`` a service, ascending (an offset may repeat: :meth:`messages` reads it once)."""
        if self._disk_index is None:  # a writable store: one service
            offsets: list[int] = self._index.query(topic, key, most, begin, end)[0]
            return offsets
        found: set[int] = set()
        for service in (self._disk_index, self._index):
            if service is not None:
                found.update(service.query(topic, key, most, begin, end)[0])
        return sorted(found)

    def offsets(self, topic: str, key: str) -> Optional[list[int]]:
        """Every CommitLog offset the index holds under ``topic#key``, ascending; None when a
        service holds more than a query can return."""
        found: set[int] = set()
        for service in (self._disk_index, self._index):
            if service is not None:
                offsets = service.query(topic, key, MAX_MSGS_NUM_BATCH, 0, _INT64_MAX)[0]
                if len(offsets) >= MAX_MSGS_NUM_BATCH:
                    return None
                found.update(offsets)
        return sorted(found)

    def by_key(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[MessageExt]:
        """Up to ``max_num`` messages of ``topic`` with ``key`` among their keys (or as their
        UNIQ_KEY), stored within ``[begin, end]``."""
        # the index keeps store times in whole seconds from its file's begin: widen the window
        # by a second each way, then hold every record to the exact bounds
        window = (max(0, begin - 1000), min(_INT64_MAX, end + 1000))
        offsets = self.candidates(topic, key, *window, max(max_num, MAX_MSGS_NUM_BATCH))
        return self.messages(offsets, topic, key, begin, end, max_num, False)

    def by_unique_key(self, topic: str, unique_key: str, now: int) -> MessageExt:
        """The oldest message of ``topic`` whose UNIQ_KEY is ``unique_key`` (MessageNotFoundError
        if none): first from the time a RocketMQ-made id says it was made (``now`` bounds that),
        then from the index's beginning."""
        begins = [0]
        try:
            begins.insert(0, max(0, self._codec.uniq_key_time(unique_key, now) - 1000))
        except (InvalidMessageIdError, ValueError):
            pass  # not a RocketMQ-made id: no time hint
        for begin in begins:
            offsets = self.candidates(topic, unique_key, begin, _INT64_MAX)
            hits = self.messages(offsets, topic, unique_key, _INT64_MIN, _INT64_MAX, len(offsets), True)
            if hits:
                return min(hits, key=lambda m: m.store_timestamp)
        raise MessageNotFoundError(f"no message of topic {topic!r} with UNIQ_KEY {unique_key!r}")

    def messages(
        self, offsets: list[int], topic: str, key: str, begin: int, end: int, limit: int, unique: bool
    ) -> list[MessageExt]:
        """The messages at the index's candidate ``offsets`` whose real topic is ``topic``, stored
        within ``[begin, end]``, whose UNIQ_KEY (``unique``) or UNIQ_KEY or one of whose KEYS is
        ``key``: at most ``limit``, read and re-checked in one compiled call (one by one when a
        segment closes under it)."""
        commitlog = self._commitlog
        found: Optional[list[MessageExt]] = self._codec.key_messages(
            offsets, commitlog.segments, self._core, topic, key, begin, end, limit, unique
        )
        if found is not None:
            return found
        found = []
        for offset in offsets:
            try:
                msg = commitlog.read(offset)
            except MessageNotFoundError:
                continue  # gone (retention) or cut by recovery
            if msg.topic != topic or not begin <= msg.store_timestamp <= end:
                continue
            if msg.unique_key == key if unique else _has_key(msg, key):
                found.append(msg)
                if len(found) >= limit:
                    break
        return found


def _has_key(msg: MessageExt, key: str) -> bool:
    if msg.unique_key == key:
        return True
    keys = msg.keys
    return keys is not None and key in keys.split(" ")
