"""Consuming a store: :class:`Consumer`, a consumer group pulling its subscriptions and its
retry topic as RocketMQ's push consumer does.

The pull of one queue itself, RocketMQ's ``getMessage`` with its status rules and tag filters
(:func:`get_message`, :func:`get_units`, :class:`GetMessageResult`), is
rocketstore.queues.pulls's; its names are public here too.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Optional, Union

from rocketstore.base._checks import check_int, wait_deadline
from rocketstore.errors import InvalidMessageError, StoreClosedError
from rocketstore.format.tagfilter import MATCH_ALL, TagFilter
from rocketstore.message import MessageExt
from rocketstore.queues.pulls import (
    MIN_SCAN_BYTES,
    MIN_SCAN_UNITS,
    GetMessageResult,
    get_message,
    get_units,
    scan_budget,
)
from rocketstore.status import GetMessageStatus

if TYPE_CHECKING:
    from rocketstore.log._store_py import PutResult
    from rocketstore.store import MessageStore

__all__ = [
    "GetMessageStatus",
    "TagFilter",
    "GetMessageResult",
    "get_message",
    "get_units",
    "MIN_SCAN_BYTES",
    "MIN_SCAN_UNITS",
    "scan_budget",
    "Consumer",
]

_check_int = check_int  # name, value, minimum: an int within a Java long, else InvalidMessageError


#: _WAITS: a consumer waits for puts through its store (the live page the writer wakes, the async
#: waker, the check that the store is still open): Consumer and GroupConsumer, modules of the
#: facade like the store, call its _live_look and _wait_for_put(_async), marked where they do.
#: A public name for them would put a waiting protocol into the store's API for no user.


def poll_deadline(timeout: Optional[float]) -> Optional[float]:
    """When a poll's wait ends: None (``timeout=0``: no wait), inf (``None``: until something
    comes) or a monotonic time."""
    if timeout is None:
        return math.inf
    return wait_deadline(timeout) if timeout != 0 else None


class Consumer:
    """A consumer group pulling its subscriptions and its retry topic, as RocketMQ's push
    consumer does: every queue of each subscribed topic, plus ``%RETRY%<group>`` (all tags).

    ``subscriptions`` is a topic, a sequence of topics (all tags), or ``{topic: tag expression}``.
    :meth:`poll` returns up to ``max_msgs`` messages from the group's positions (its committed
    offset in each queue, else the queue's first) and moves the positions past them;
    :meth:`send_back` gives a failed message to the store's retry path
    (:meth:`MessageStore.send_back`); :meth:`commit` records the positions as the group's
    committed offsets (written to ``consumerOffset.json`` by ``persist_offsets()`` or close).

    A message from the retry topic is returned under its original topic (its ``RETRY_TOPIC``
    property), as the RocketMQ client resets it; ``queue_id`` and ``queue_offset`` still name its
    place in the retry queue, and :meth:`send_back` finds it by its CommitLog offset.

    >>> consumer = Consumer(store, "GroupA", {"TopicA": "TagA || TagB"})   # doctest: +SKIP
    >>> for msg in consumer.poll():                                        # doctest: +SKIP
    ...     try:
    ...         handle(msg)
    ...     except Exception:
    ...         consumer.send_back(msg)
    >>> consumer.commit()                                                  # doctest: +SKIP
    """

    def __init__(
        self,
        store: MessageStore,
        group: str,
        subscriptions: Union[str, Iterable[str], Mapping[str, Optional[str]]],
        *,
        retry: bool = True,
    ):
        from rocketstore.services.schedule import retry_topic

        if not isinstance(group, str) or not group:
            raise InvalidMessageError("group must be a non-empty str")
        if isinstance(subscriptions, str):
            subscriptions = {subscriptions: None}
        elif not isinstance(subscriptions, Mapping):
            subscriptions = dict.fromkeys(subscriptions)
        if not subscriptions:
            raise InvalidMessageError("a consumer needs at least one subscription")
        self.store = store
        self.group = group
        self.retry_topic = retry_topic(group)
        self._filters = {topic: TagFilter.parse(expr) for topic, expr in subscriptions.items()}
        if retry:
            self._filters.setdefault(self.retry_topic, MATCH_ALL)
        self._positions: dict[tuple[str, int], int] = {}
        self._turn = 0

    @property
    def topics(self) -> list[str]:
        """The topics pulled: the subscriptions, then the retry topic."""
        return list(self._filters)

    @property
    def positions(self) -> dict[tuple[str, int], int]:
        """{(topic, queue_id): next offset to pull} of the queues pulled so far."""
        return dict(self._positions)

    def poll(self, max_msgs: int = 32, timeout: Optional[float] = 0) -> list[MessageExt]:
        """Up to ``max_msgs`` messages, taking turns among the queues so none starves.

        ``timeout``: when nothing is there, wait up to that many seconds for a put (by this
        process or another; the wait sleeps, no CPU) — ``0`` returns at once, ``None`` waits
        until something comes."""
        store = self.store
        deadline = poll_deadline(timeout)
        while True:
            seen = store._live_look(self.topics if deadline is not None else ())  # noqa: SLF001 (see _WAITS)
            found = self._poll_once(max_msgs)
            if found or deadline is None or not store._wait_for_put(seen, deadline):  # noqa: SLF001 (see _WAITS)
                return found

    async def poll_async(self, max_msgs: int = 32, timeout: Optional[float] = 0) -> list[MessageExt]:
        """:meth:`poll` for asyncio: the event loop runs on while it waits."""
        store = self.store
        deadline = poll_deadline(timeout)
        while True:
            seen = store._live_look(self.topics if deadline is not None else ())  # noqa: SLF001 (see _WAITS)
            found = self._poll_once(max_msgs)
            if found or deadline is None or not await store._wait_for_put_async(seen, deadline):  # noqa: SLF001 (see _WAITS)
                return found

    def __iter__(self) -> Iterator[MessageExt]:
        """Every message, as it is put: ``for msg in consumer:`` waits (sleeping) for the next
        one, and ends when the store is closed. Positions move as messages are handed out;
        :meth:`commit` records them."""
        while True:
            try:
                batch = self.poll(32, timeout=None)
            except StoreClosedError:
                if self.store.closed:  # not when it opened again under the poll
                    return
                continue
            yield from batch

    async def __aiter__(self) -> AsyncIterator[MessageExt]:
        """``async for msg in consumer:``, as :meth:`__iter__`."""
        while True:
            try:
                batch = await self.poll_async(32, timeout=None)
            except StoreClosedError:
                if self.store.closed:
                    return
                continue
            for msg in batch:
                yield msg

    def _poll_once(self, max_msgs: int) -> list[MessageExt]:
        max_msgs = _check_int("max_msgs", max_msgs, 1)
        bounds = {key: lo_hi for key, lo_hi in self.store.queues().items() if key[0] in self._filters}
        keys = self._assigned(sorted(bounds))
        if not keys:
            return []
        start = self._turn % len(keys)
        self._turn += 1
        out: list[MessageExt] = []
        for key in keys[start:] + keys[:start]:
            if len(out) >= max_msgs:
                break
            topic, queue_id = key
            position = self._position(key, bounds[key][0])
            if position >= bounds[key][1]:
                continue
            res = self.store.get_message(
                self.group,
                topic,
                queue_id,
                position,
                max_msgs=max_msgs - len(out),
                tags=self._filters[topic].expression,
            )
            for msg in res.messages:
                if topic == self.retry_topic:
                    msg.topic = (msg.properties or {}).get("RETRY_TOPIC", msg.topic)
                out.append(msg)
            self._positions[key] = max(res.next_begin_offset, bounds[key][0])
        return out

    def _assigned(self, keys: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """The queues this consumer pulls, of ``keys`` (all of them; a group member's share)."""
        return keys

    def _committed(self, key: tuple[str, int]) -> int:
        """The group's committed offset of a queue, -1 if none."""
        return self.store.committed_offset(self.group, *key)

    def _position(self, key: tuple[str, int], low: int) -> int:
        position = self._positions.get(key)
        if position is None:
            committed = self._committed(key)
            position = committed if committed >= 0 else low
        if position < low:  # removed by retention meanwhile
            position = low
        self._positions[key] = position
        return position

    def seek(self, topic: str, queue_id: int, offset: int) -> None:
        """Pull (topic, queue_id) from queue offset ``offset`` on (RocketMQ's ``seek``)."""
        if topic not in self._filters:
            raise InvalidMessageError(f"{topic!r} is not one of this consumer's topics")
        queue_id = _check_int("queue_id", queue_id, 0, 2**31 - 1)
        self._positions[(topic, queue_id)] = _check_int("offset", offset, 0)

    def send_back(self, message: MessageExt, delay_level: int = 0) -> PutResult:
        """Hand back a message this group failed to consume (retry, after the last one the DLQ)."""
        return self.store.send_back(self.group, message, delay_level)

    def commit(self) -> None:
        """Record the positions as the group's committed offsets."""
        for (topic, queue_id), position in self._positions.items():
            if position != self.store.committed_offset(self.group, topic, queue_id):
                self.store.commit_offset(self.group, topic, queue_id, position)
