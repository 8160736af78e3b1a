"""What a POP receive hands out (rocketstore.services.pop): :class:`Received`, a sequence of
:class:`ReceivedMessage`, and a writable store's ``receive`` (:class:`Receiver`), which sends its
common shape straight to the service."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, overload

from rocketstore.errors import StoreClosedError
from rocketstore.format import _codec_py
from rocketstore.message import MessageExt

if TYPE_CHECKING:
    from rocketstore.services.pop.service import PopService

__all__ = ["ReceivedMessage", "Received", "Receiver", "Lane"]

#: At most this many messages per receive (5.x: 32 per checkpoint, its bitmap is an int).
MAX_RECEIVE_BATCH = 4096
#: The longest invisible time (the 5.x proxy's ``maxInvisibleTimeMills``, 12 h).
MAX_INVISIBLE_TIME_MS = 12 * 3600 * 1000

#: The POP state of one (group, topic, queue id): a twin class (rocketstore.format._codec_py.PopLane, the
#: compiled one for the compiled build, which its PopAcker reads without attribute lookups); typed
#: by the pure one.
Lane = _codec_py.PopLane


class ReceivedMessage(NamedTuple):
    """One message handed out by :meth:`MessageStore.receive`."""

    #: the message as stored (its ``reconsume_times`` is the record's)
    message: MessageExt
    #: the receipt handle for :meth:`MessageStore.ack` / ``change_invisible_time``
    handle: str
    #: the record's reconsume times plus the times this message came back to the group
    reconsume_times: int


class Received(Sequence[ReceivedMessage]):
    """What one :meth:`MessageStore.receive` handed out: a sequence of
    :class:`ReceivedMessage`, also readable as parallel lists (``messages``, ``handles``,
    ``reconsume_times``). Give it whole to :meth:`MessageStore.ack_many` to acknowledge every
    message in it without parsing handles (the fast path); the handle strings are only made
    when asked for."""

    __slots__ = ("messages", "reconsume_times", "lanes", "_handles", "_service")

    def __init__(self, service: Optional[PopService] = None) -> None:
        self.messages: list[MessageExt] = []
        self.reconsume_times: list[int] = []
        #: (lane, offsets, delivery numbers, shared stamp) per queue, in the order of
        #: ``messages``: what the service that handed these out acknowledges them by (the
        #: (deadline, number) tuple they all share in ``inflight``, or None)
        self.lanes: list[tuple[Lane, list[int], tuple[int, ...], Optional[tuple[int, int]]]] = []
        self._handles: Optional[list[str]] = None
        self._service = service

    @classmethod
    def from_handles(
        cls, messages: list[MessageExt], handles: list[str], reconsume_times: list[int]
    ) -> Received:
        """A Received of messages and their handles alone (no service's lanes): acknowledged
        through its handles."""
        found = cls()
        found.messages, found._handles, found.reconsume_times = (
            list(messages),
            list(handles),
            list(reconsume_times),
        )
        return found

    @property
    def service(self) -> Optional[PopService]:
        """The service that handed these out (None: made from handles, e.g. unpickled)."""
        return self._service

    @property
    def handles(self) -> list[str]:
        """The receipt handles, in the order of ``messages``."""
        if self._handles is None:
            handles: list[str] = []
            make = self._service.receipt_handles  # type: ignore[union-attr]  # lanes: a service's
            for lane, offsets, numbers, _stamp in self.lanes:
                handles += make(lane.prefix, offsets, numbers)
            self._handles = handles
        return self._handles

    def __len__(self) -> int:
        return len(self.messages)

    @overload
    def __getitem__(self, index: int) -> ReceivedMessage: ...

    @overload
    def __getitem__(self, index: slice) -> list[ReceivedMessage]: ...

    def __getitem__(self, index: int | slice) -> ReceivedMessage | list[ReceivedMessage]:
        if isinstance(index, slice):
            return list(
                map(ReceivedMessage, self.messages[index], self.handles[index], self.reconsume_times[index])
            )
        return ReceivedMessage(self.messages[index], self.handles[index], self.reconsume_times[index])

    def __iter__(self) -> Iterator[ReceivedMessage]:
        # the implementation's received_rows: no NamedTuple __new__ frame per message
        return iter(self._rows(ReceivedMessage, self.messages, self.handles, self.reconsume_times))

    @property
    def _rows(self) -> Callable[..., list[ReceivedMessage]]:
        service = self._service
        return _codec_py.received_rows if service is None else service.received_rows

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Received, list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # a mutable sequence, like a list

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled (a joined writer's receive, rocketstore.processes.writers): its handles, not its lanes
        return (_received, (self.messages, self.handles, self.reconsume_times))

    def __repr__(self) -> str:
        return f"<Received {len(self.messages)} messages>"


def _received(messages: list[MessageExt], handles: list[str], reconsume_times: list[int]) -> Received:
    """A Received as unpickled: acknowledged through its handles."""
    return Received.from_handles(messages, handles, reconsume_times)


class Receiver:
    """A writable store's ``receive`` (its owner role's, rocketstore.roles): the common shape,
    ``receive(group, topic, max_msgs, invisible_time_ms)`` with exact ``str`` names, ``int``
    bounds in range and no ``queue_id``, ``max_reconsume_times`` or ``tags``, goes straight to
    the service's :meth:`PopService.receive_common`, with no frame of the store on the way;
    anything else, and whatever that declines, is ``fallback(store, group, topic, max_msgs,
    invisible_time_ms, queue_id=, max_reconsume_times=, tags=)``: ``StoreBase.receive``, which
    checks and raises. StoreClosedError once the store is gone; ``closed`` (set when the store
    drops this receiver) sends every call to ``fallback``."""

    __slots__ = ("_store_ref", "_service_ref", "_fallback", "closed")

    def __init__(
        self, store_ref: Callable[[], Any], service: PopService, fallback: Callable[..., Received]
    ) -> None:
        self._store_ref = store_ref
        self._service_ref = weakref.ref(service)
        self._fallback = fallback
        self.closed = False

    def receive(
        self,
        group: Any,
        topic: Any,
        max_msgs: Any = 32,
        invisible_time_ms: Any = 30_000,
        queue_id: Any = None,
        max_reconsume_times: Any = None,
        tags: Any = None,
    ) -> Received:
        """Hand out messages to a consumer group (POP); see
        :meth:`rocketstore.MessageStore.receive`."""
        service = self._service_ref()
        if (
            service is not None
            and not self.closed
            and queue_id is None
            and max_reconsume_times is None
            and tags is None
            and type(group) is str
            and type(topic) is str
            and type(max_msgs) is int
            and type(invisible_time_ms) is int
            and 1 <= max_msgs <= MAX_RECEIVE_BATCH
            and 0 <= invisible_time_ms <= MAX_INVISIBLE_TIME_MS
        ):
            got = service.receive_common(group, topic, max_msgs, invisible_time_ms)
            if got is not None:
                return got
        store = self._store_ref()
        if store is None:
            raise StoreClosedError("the store is closed")
        return self._fallback(
            store,
            group,
            topic,
            max_msgs,
            invisible_time_ms,
            queue_id=queue_id,
            max_reconsume_times=max_reconsume_times,
            tags=tags,
        )
