"""What differs between stores by the part their process plays: the role a store delegates to.

:class:`~rocketstore.store.MessageStore` is a facade: each of its public methods is the class's
own, fixed for the life of the object, and those whose work depends on the process's part call
the store's :class:`Role`, one object chosen when the store opens and replaced only when it opens
again (a following store under a writer's recovery), takes over writing (the owner it joined
ended), closes, or is inherited by a forked child:

``owner``
    This process holds the lock and appends: ``put`` and ``put_pipelined`` are the
    implementation's ``PutFront``'s, the point reads its codec's ``FastReads`` (the compiled
    codec's; the pure build's are the careful paths, which read through the same kernels),
    ``receive`` and ``ack`` the POP service's ``Receiver`` and its codec's ``PopAcker``; everything else the
    careful path.
``joined``
    Another process holds the lock (rocketstore.processes.writers): writes run there, or append here
    through the shared table (rocketstore.log.sharedappend); reads are the following store's.
``following``
    Read-only beside a writer (rocketstore.processes.live): every read may find the store opened again
    under it and runs again then (``SwitchSafe``).
``read-only``
    Read-only with no writer's live page to follow.
``closed``
    Closed, never opened, or inherited by a forked child: every call takes the careful path,
    which says why it cannot run.
``taking over``
    Joined, and the owner ended, but this store's takeover failed (the lock's holder of the
    moment does not share writing, or its open failed): every call tries the takeover again
    (``ResumingCall``), then runs as the role it got answers it.

Two kinds of calls: the hot ones (:data:`BOUND`) are callables of their own (compiled where the
role has them) called with the caller's arguments alone: the facade's compiled base
(rocketstore._facade) passes a call on as the caller made it, so it costs one C call and no
Python frame; every other one (:data:`WITH_STORE`) is called with the store first by a Python
method of the facade, so the careful path is the class's function itself and a role holds no
reference to its store.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Optional

from rocketstore.errors import StoreClosedError
from rocketstore.joined import FORWARDED, Forwarder, Joined, JoinedPuts
from rocketstore.processes.opening import OpenedParts
from rocketstore.queues.indexservice import MAX_MSGS_NUM_BATCH
from rocketstore.queues.pulls import GetMessageResult
from rocketstore.services.pop import Receiver

#: Calls a role answers with callables of their own, called without the store (the hot paths).
BOUND = (
    "put",
    "put_pipelined",
    "read",
    "get_by_msg_id",
    "get_by_queue_offset",
    "query_by_key",
    "query_by_unique_key",
    "get_message",
    "receive",
    "ack",
    "commit_offset",
)
#: Calls a role answers with callables taking the store first.
WITH_STORE = (
    "put_batch",
    "put_messages",
    "send_back",
    "create_topic",
    "set_topic_retention",
    "topic_retention",
    "retention_report",
    "deliver_delayed",
    "deliver_timers",
    "timer_stats",
    "delayed_counts",
    "update_subscription_group",
    "ack_many",
    "change_invisible_time",
    "pop_status",
    "prepare_transaction",
    "commit_transaction",
    "rollback_transaction",
    "open_transactions",
    "check_transactions",
    "key_offsets",
    "get_units",
    "queue_units",
    "records_at",
    "min_queue_offset",
    "max_queue_offset",
    "queue_offset_of_time",
    "queues",
    "queue_offsets",
    "compaction_log",
    "compacted",
    "committed_offset",
    "persist_offsets",
    "clean",
    "flush",
    "stats",
)
#: Read calls a following store runs again when it opened again under them.
SWITCH_SAFE = (
    "read",
    "get_by_msg_id",
    "get_by_queue_offset",
    "query_by_key",
    "query_by_unique_key",
    "key_offsets",
    "get_message",
    "get_units",
    "queue_units",
    "records_at",
    "min_queue_offset",
    "max_queue_offset",
    "queue_offset_of_time",
    "queues",
    "queue_offsets",
    "compaction_log",
    "compacted",
    "committed_offset",
    "delayed_counts",
    "stats",
    "topic_retention",
    "retention_report",
)
#: The point reads a codec's FastReads answers.
FAST_READS = (
    "read",
    "get_by_msg_id",
    "get_by_queue_offset",
    "query_by_key",
    "query_by_unique_key",
    "get_message",
)


class Role:
    """One store's calls for the part its process plays (see the module's docstring): ``kind``,
    a callable for every name of :data:`BOUND` and :data:`WITH_STORE`, and the objects whose
    callables it holds (``fast_reads``, ``pop_receiver``, a joined store's ``joined_puts``),
    which :meth:`retire` turns to the careful path for a caller that still holds one of their
    methods."""

    __slots__ = ("kind", "fast_reads", "pop_receiver", "joined_puts", *BOUND, *WITH_STORE)

    def __init__(
        self,
        kind: str,
        store: Any,
        careful: type,
        calls: Mapping[str, Callable[..., Any]] = {},  # noqa: B006 (read, never changed)
        fast_reads: Any = None,
        pop_receiver: Any = None,
        joined_puts: Optional[JoinedPuts] = None,
    ) -> None:
        self.kind = kind
        self.fast_reads = fast_reads
        self.pop_receiver = pop_receiver
        self.joined_puts = joined_puts
        ref = weakref.ref(store)
        for name in BOUND:
            call = calls.get(name)
            setattr(self, name, call if call is not None else CarefulCall(ref, getattr(careful, name)))
        for name in WITH_STORE:
            call = calls.get(name)
            setattr(self, name, call if call is not None else getattr(careful, name))

    def retire(self) -> None:
        """The store closes or changes role: a caller still holding a compiled method takes the
        careful path from now on (which says why it cannot run, or runs it anew)."""
        if self.fast_reads is not None:
            self.fast_reads.open = False
        if self.pop_receiver is not None:
            self.pop_receiver.closed = True
        if self.joined_puts is not None:
            self.joined_puts.open = False

    def __repr__(self) -> str:
        return f"<Role {self.kind}>"


class CarefulCall:
    """A :data:`BOUND` call's careful path: the class's ``method`` on the store, held weakly
    (StoreClosedError once the store is gone)."""

    __slots__ = ("_ref", "_method")

    def __init__(self, ref: Callable[[], Any], method: Callable[..., Any]) -> None:
        self._ref, self._method = ref, method

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        store = self._ref()
        if store is None:
            raise StoreClosedError("the store is closed")
        return self._method(store, *args, **kwargs)


class ResumingCall:
    """A call of a store whose takeover failed (``taking over``): ``resumed(store)`` takes over
    again (or raises why it cannot) and gives the store's new role, which then answers the call.
    ``ref``: the store, held weakly, for a :data:`BOUND` call; None for one called with the
    store first."""

    __slots__ = ("_ref", "_name", "_resumed")

    def __init__(self, ref: Optional[Callable[[], Any]], name: str, resumed: Callable[[Any], Role]) -> None:
        self._ref, self._name, self._resumed = ref, name, resumed

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._ref is None:
            return getattr(self._resumed(args[0]), self._name)(*args, **kwargs)
        store = self._ref()
        if store is None:
            raise StoreClosedError("the store is closed")
        return getattr(self._resumed(store), self._name)(*args, **kwargs)


def resuming_calls(store: Any, resumed: Callable[[Any], Role]) -> dict[str, ResumingCall]:
    """Every call of a ``taking over`` role (see :class:`ResumingCall`)."""
    ref = weakref.ref(store)
    calls = {name: ResumingCall(ref, name, resumed) for name in BOUND}
    calls.update((name, ResumingCall(None, name, resumed)) for name in WITH_STORE)
    return calls


class SwitchSafeCall:
    """A following store's :data:`WITH_STORE` read: ``method(store, ...)``, run again when the
    store opened again under it (``switch_safe(store, call)``: the store class's)."""

    __slots__ = ("_method", "_switch_safe")

    def __init__(
        self, method: Callable[..., Any], switch_safe: Callable[[Any, Callable[[], Any]], Any]
    ) -> None:
        self._method, self._switch_safe = method, switch_safe

    def __call__(self, store: Any, *args: Any, **kwargs: Any) -> Any:
        return self._switch_safe(store, functools.partial(self._method, store, *args, **kwargs))


def _point_reads(
    ref: Callable[[], Any], careful: Any, fast: Any, reads: Any, following: bool, switch_safe: Any
) -> dict[str, Any]:
    """A role's point reads: FastReads' (in a SwitchSafe for a following store), else the open's
    careful reads part's own methods (a following store's stay the careful path, which may open
    again under the call)."""
    calls: dict[str, Any] = {}
    if fast is not None:
        for name in FAST_READS:
            method = getattr(fast, name)
            calls[name] = switch_safe(ref, getattr(careful, name), method) if following else method
    elif reads is not None and not following:
        for name in FAST_READS:
            if hasattr(reads, name):  # (get_message is the store's own)
                calls[name] = getattr(reads, name)
    return calls


def choose_role(
    store: Any,
    opened: OpenedParts,
    impl: Any,
    links: Joined,
    user_topics: set[str],
    careful: Any,
    putter: Any,
    switch_safe_call: Callable[[Any, Callable[[], Any]], Any],
    reads: Any = None,
) -> Role:
    """The role of ``store``, just opened with ``opened``'s parts by the implementation
    ``impl``: ``owner`` (puts through the implementation's PutFront, ``receive`` and ``ack``
    through the POP service's compiled calls), ``joined`` (another process holds the lock:
    writes run there, or append here), ``following`` or ``read-only``; each answers the point
    reads through the codec's FastReads (the compiled codec's; the pure build calls the careful
    paths), which a store that follows another process's writing runs inside a SwitchSafe (it
    may open again under a call: the careful path then runs again). ``links``: the store's links
    to other writing processes (rocketstore.joined: joined when it has a ``remote``);
    ``user_topics``: the set of user topics a put was checked for (the PutFront's); ``careful``:
    the class whose methods are the careful paths; ``putter``: the careful path of the puts
    (rocketstore.processes.puts), called with the store first as ``careful``'s methods are;
    ``switch_safe_call(store, call)``: a following store's call, run again when the store opened
    again under it; ``reads``: the open's careful reads (rocketstore.queues.reads.StoreReads),
    whose methods answer the point reads of a store that is not following when the codec has
    no FastReads (the careful method of ``careful`` would pass them there, three frames on)."""
    ref = weakref.ref(store)
    joined = links.remote is not None
    read_only = opened.read_only
    owner = not joined and not read_only
    fast = None  # the pure codec has no front: its point reads are the careful paths
    if hasattr(impl.codec, "FastReads"):
        fast = impl.codec.FastReads(
            ref,
            careful,  # the careful paths, for what a fast call cannot answer
            opened.queues,
            opened.segments,
            None if read_only else opened.core,
            (opened.disk_index, opened.index),
            opened.dispatcher,
            MAX_MSGS_NUM_BATCH,
            opened.follower,
            result_type=GetMessageResult,
            offsets=opened.offsets if owner else None,  # an owner's commit_offset: one compiled call
        )
    switch_safe = impl.store.SwitchSafe
    following = opened.follower is not None
    calls = _point_reads(ref, careful, fast, reads, following, switch_safe)
    receiver = joined_puts = None
    if joined:
        kind = "joined"
        for name in FORWARDED:
            if not name.startswith("_"):  # (the joined store's own machinery asks for those)
                forwarder = Forwarder(links, name)
                calls[name] = CarefulCall(ref, forwarder) if name in BOUND else forwarder
        joined_puts = JoinedPuts(links, putter, opened.batch)  # append here when they can (sharedappend)
        calls["put"] = joined_puts.put
        calls["put_batch"] = joined_puts.put_batch
        calls["put_messages"] = joined_puts.put_messages
    elif read_only:
        kind = "following" if following else "read-only"
    else:
        kind = "owner"
        if fast is not None:
            calls["commit_offset"] = fast.commit_offset
        if isinstance(opened.core, impl.store.CommitLogCore):
            front = impl.store.PutFront(
                opened.core, user_topics, putter.keyed, ref, putter.put, putter.put_pipelined
            )
            calls["put"], calls["put_pipelined"] = front.put, front.put_pipelined
        calls["put_batch"], calls["put_messages"] = putter.put_batch, putter.put_messages
        if opened.pop is not None:
            calls["ack"] = opened.pop.ack  # no frame of the careful class's per ack
            receiver = Receiver(ref, opened.pop, careful.receive)
            calls["receive"] = receiver.receive
    if following:
        for name in SWITCH_SAFE:
            if name not in calls:
                method = getattr(careful, name)
                calls[name] = (
                    switch_safe(ref, method) if name in BOUND else SwitchSafeCall(method, switch_safe_call)
                )
    return Role(kind, store, careful, calls, fast, receiver, joined_puts)
