"""POP's one-call ack (pure twin): the lane, the acker, receipt handles and checkpoints."""

from __future__ import annotations

import heapq
import threading
import weakref
from itertools import repeat
from typing import Any

from rocketstore.errors import (
    StoreClosedError,
)
from rocketstore.message import MessageExt

# ---- acknowledgement per message (POP): one ack in one call (rocketstore.services.pop) ----


def receipt_handles(prefix: str, offsets: list[int], numbers: tuple[int, ...]) -> list[str]:
    """The receipt handles ``"<prefix> <offset> <delivery number>"`` of one lane's messages
    (rocketstore.services.pop.Received.handles)."""
    if len(numbers) != len(offsets):
        raise ValueError("offsets and numbers differ in length")
    return [f"{prefix} {o} {n}" for o, n in zip(offsets, numbers)]


class PopLane:
    """The POP state of one (group, topic, queue id) (rocketstore.services.pop): every queue offset below
    ``next`` is acknowledged unless it is in ``inflight`` ({offset: (visible again at, delivery
    number)}); ``committed`` is the lowest offset not acknowledged; ``heap`` holds (deadline,
    sequence, offsets, delivery numbers) of the checkpoints, stale entries included (checked on
    use). ``key`` is the group's key in consumerOffset.json (``topic@group``)."""

    __slots__ = (
        "group",
        "topic",
        "queue_id",
        "prefix",
        "key",
        "committed",
        "next",
        "inflight",
        "heap",
        "ack_head",
        "ack_tail",
    )

    def __init__(self, group: str, topic: str, queue_id: int, start: int, key: str) -> None:
        self.group = group
        self.topic = topic
        self.queue_id = queue_id
        self.prefix = f"{group} {topic} {queue_id}"  # of its receipt handles
        self.key = key
        self.committed = start
        self.next = start
        self.inflight: dict[int, tuple[int, int]] = {}
        self.heap: list[tuple[int, int, tuple[int, ...], tuple[int, ...]]] = []
        # the acknowledgement of one offset o is ack_head + str(o) + ack_tail (PopAcker): the
        # record rocketstore.services.pop._ACK_RANGE_JSON makes with n 1 (tests/test_pop_ack.py)
        self.ack_head = ('{"c":"%s","n":1,"q":%d,"so":' % (group, queue_id)).encode()
        self.ack_tail = (',"t":"%s"}' % topic).encode()

    def compact(self) -> None:
        """Drop the heap's entries (and entries' offsets) no longer in flight under them:
        acknowledged messages would otherwise stay referenced until their deadline. Called when
        the heap holds more than twice as many entries as there are messages in flight, so
        its cost is spread over the receives that grew it."""
        inflight = self.inflight
        if not inflight:
            self.heap = []  # nothing in flight: no entry keeps anything
            return
        live = []
        for entry in self.heap:
            deadline, seq, offsets, numbers = entry
            keep = [(o, n) for o, n in zip(offsets, numbers) if inflight.get(o) == (deadline, n)]
            if len(keep) == len(offsets):
                live.append(entry)
            elif keep:
                live.append((deadline, seq, tuple(o for o, _n in keep), tuple(n for _o, n in keep)))
        heapq.heapify(live)
        self.heap = live

    def take_run(
        self, want: int, deadline: int, seq: int
    ) -> tuple[list[int], tuple[int, ...], tuple[int, int]]:
        """Hand out the ``want`` offsets from ``next`` on, each first delivered (number 0) until
        ``deadline``: each is put in flight under one ``(deadline, 0)`` stamp, one heap entry
        ``(deadline, seq, offsets, numbers)`` is pushed, and ``next`` moves past them (what
        rocketstore.services.pop's ``_apply_ck`` does for such a checkpoint). Returns (offsets, numbers,
        stamp); ``committed`` is left to the caller (:meth:`advance`)."""
        if want <= 0:
            raise ValueError("a run hands out at least one offset")
        start = self.next
        stamp = (deadline, 0)
        offsets = list(range(start, start + want))
        numbers = (0,) * want
        self.inflight.update(dict.fromkeys(offsets, stamp))
        self.next = start + want
        heapq.heappush(self.heap, (deadline, seq, tuple(offsets), numbers))
        return offsets, numbers, stamp

    def advance(self) -> bool:
        """Move ``committed`` up to the lowest un-acked offset; True if it moved."""
        before = self.committed
        if not self.inflight:
            self.committed = self.next
        else:
            inflight = self.inflight
            c = self.committed
            while c < self.next and c not in inflight:
                c += 1
            self.committed = c
        return self.committed != before


#: The compiled acker looks whether the periodic POP snapshot is due (its ``periodic``) once
#: every this many acks it does itself (a snapshot is written at most every
#: ``pop_snapshot_interval_ms``; checking the clock per ack would cost as much as the rest of the
#: ack's bookkeeping).
POP_SNAPSHOT_CHECK_EVERY = 64


class PopAcker:
    """``PopService.ack``: ``PopAcker(service, received_type, careful, periodic, lock, offsets,
    commitlog).ack(handle)``
    is ``careful(service, handle)`` (``PopService.ack_handle``: the one ack, every case, written
    once in rocketstore.services.pop, which looks at the periodic snapshot itself), while the service
    lives and until ``closed`` is set (then StoreClosedError). The compiled twin does the common
    case itself, with no Python frame, calling ``periodic(service)`` (the snapshot check) once
    every ``POP_SNAPSHOT_CHECK_EVERY`` of those, and hands this one everything else. It holds
    the service weakly (the service holds it)."""

    __slots__ = ("_service_ref", "_careful", "closed")

    def __init__(
        self,
        service: Any,
        received_type: Any,
        careful: Any,
        periodic: Any,
        lock: Any = None,
        offsets: Any = None,
        commitlog: Any = None,
    ) -> None:
        # (``lock``, ``offsets`` and ``commitlog``: the service's, which the compiled twin's
        # common case takes; this one hands every ack to ``careful``)
        self._service_ref = weakref.ref(service)
        self._careful = careful
        # set by the service's close: from then on every ack raises StoreClosedError (a caller
        # may still hold this bound method, installed as the store's ``ack``)
        self.closed = False

    def ack(self, handle: Any) -> bool:
        """Acknowledge one received message; see :meth:`rocketstore.MessageStore.ack`."""
        service = self._service_ref()
        if service is None or self.closed:
            raise StoreClosedError("the store is closed")
        return bool(self._careful(service, handle))


#: The record :func:`checkpoint_run` makes (rocketstore.services.pop's ``_dumps`` of that checkpoint).
_CK_RUN_JSON = '{"b":%d,"c":"%s","it":%d,"n":%d,"nx":%d,"pt":%d,"q":%d,"so":%d,"t":"%s"}'


def checkpoint_run(
    committed: int,
    group: str,
    invisible: int,
    count: int,
    nxt: int,
    now: int,
    queue_id: int,
    start: int,
    topic: str,
) -> bytes:
    """The ``ck`` record of a receive's common run (rocketstore.services.pop): ``count`` offsets from
    ``start``, every delivery number 0, handed out at ``now`` for ``invisible`` ms, the lane's
    lowest un-acked offset ``committed`` and next offset ``nxt`` after it; the bytes
    rocketstore.services.pop's general encoder writes for that checkpoint (tests/test_pop_ack.py)."""
    return (_CK_RUN_JSON % (committed, group, invisible, count, nxt, now, queue_id, start, topic)).encode()


def reconsume_times(messages: list[Any]) -> list[int]:
    """Each message's ``reconsume_times`` (a receive's, rocketstore.services.pop.PopService.receive_run);
    TypeError, before anything is read, if one is not a MessageExt."""
    for m in messages:
        if not isinstance(m, MessageExt):
            raise TypeError(f"the quick pull gave a {type(m).__name__}, not a MessageExt")
    return [m.reconsume_times for m in messages]


def received_rows(cls: type, messages: list[Any], handles: list[str], times: list[int]) -> list[Any]:
    """The rows ``cls(message, handle, reconsume times)`` of one receive
    (rocketstore.services.pop.Received's iteration), each made by ``tuple.__new__`` straight (a
    NamedTuple's own ``__new__`` is a Python frame per row). ``cls``: a tuple subclass with
    ``__slots__ = ()`` (TypeError otherwise); ValueError if the lists differ in length."""
    if not len(handles) == len(times) == len(messages):
        raise ValueError("messages, handles and times differ in length")
    if cls.__base__ is not tuple or cls.__dict__.get("__slots__", None) != ():
        raise TypeError(f"{cls.__name__} is not a namedtuple-like subclass of tuple")
    return list(map(tuple.__new__, repeat(cls), zip(messages, handles, times)))


def FastRLock() -> Any:
    """The POP service's and the offsets table's reentrant lock: ``threading.RLock`` here (the
    compiled twin is a pthread mutex that skips RLock's argument parsing and clock read)."""
    return threading.RLock()
