"""The pure twin of rocketstore._facade: MessageStore's hot calls, each passed to the store's
role's callable of that name (rocketstore.roles), and their documentation.

The compiled base passes the arguments on as the caller gave them, without a Python frame; these
methods do the same in Python (a frame each), and are where the calls' signatures and docstrings
are written: the compiled methods take theirs from here (:func:`docs`).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional, Union

from rocketstore.consume import GetMessageResult
from rocketstore.message import Message, MessageExt
from rocketstore.roles import BOUND
from rocketstore.services.pop import Received, ReceivedMessage

if TYPE_CHECKING:  # the compiled twins have the same classes (see the .pyi stubs)
    from rocketstore.log._store_py import PutFuture, PutResult

#: A message body: bytes or anything with the buffer protocol.
Body = Union[bytes, bytearray, memoryview]
#: ``keys=``: one string of space-separated keys, or a sequence of keys.
Keys = Union[str, Sequence[str], None]

#: The calls this base holds (the rest of MessageStore's are Python methods of the facade): the
#: role's own callables, rocketstore.roles.BOUND.
HOT = BOUND


class FacadeBase:
    """MessageStore's hot calls (see the module's docstring); ``_role`` is set by the store."""

    _role: Any

    def put(  # (the keyword arguments, documented below, are the careful path's: StoreBase.put)
        self,
        topic: str | Message,
        body: Optional[Body] = None,
        **options: Any,
    ) -> PutResult:
        """Store one message; returns a :class:`PutResult` (status PUT_OK).

        ``topic`` may be a :class:`Message` (then leave the other arguments out). ``keys`` is a
        string of space-separated keys or a sequence of keys. ``durable=True`` waits for group
        commit; ``None`` follows ``flush_disk_type``. A message that was not stored raises a
        :class:`~rocketstore.errors.PutError` (e.g. ``ServiceNotAvailableError`` while the disk
        is full); one that was stored but whose flush did not confirm within
        ``sync_flush_timeout_ms`` raises :class:`~rocketstore.errors.FlushTimeoutError`, whose
        ``result`` says where it is. ``delay_level`` (1 .. 18 with
        the default ``message_delay_level``) stores it in SCHEDULE_TOPIC_XXXX; it reaches
        ``topic`` when that level's delay has passed (so does a ``DELAY`` property > 0).
        ``deliver_at_ms`` (epoch ms) or ``delay_ms`` makes it a timer message: stored in
        ``rmq_sys_wheel_timer`` and put into ``topic`` at that millisecond (so do the
        ``TIMER_DELIVER_MS`` / ``TIMER_DELAY_SEC`` / ``TIMER_DELAY_MS`` properties), at most
        ``timer_max_delay_sec`` ahead (:class:`~rocketstore.errors.TimerTooFarError`).
        ``compress="zlib"`` (or ``"lz4"``, ``"zstd"``: optional extras) stores the body
        compressed, as a RocketMQ producer does; reads give it back inflated.
        """
        if not options:
            return self._role.put(topic, body)
        return self._role.put(topic, body, **options)

    def put_pipelined(  # (the keyword arguments are the careful path's: StoreBase.put_pipelined)
        self,
        topic: str | Message,
        body: Optional[Body] = None,
        **options: Any,
    ) -> PutFuture:
        """Store one message durably without blocking: returns a :class:`PutFuture`.

        The future resolves when the flush thread's group commit covers the message, so one
        thread can keep thousands of durable puts in flight. Arguments as for :meth:`put` but
        ``durable``. It is always a future: its ``result()`` raises what :meth:`put` would (a
        put that stored nothing gives an already-done future that raises its ``PutError``).
        """
        if not options:
            return self._role.put_pipelined(topic, body)
        return self._role.put_pipelined(topic, body, **options)

    def receive(
        self,
        group: str,
        topic: str,
        max_msgs: int = 32,
        invisible_time_ms: int = 30_000,
        *,
        queue_id: Optional[int] = None,
        max_reconsume_times: Optional[int] = None,
        tags: Optional[str] = None,
    ) -> Received:
        """Hand out up to ``max_msgs`` messages of ``topic`` to consumer group ``group``, each
        invisible to the rest of the group for ``invisible_time_ms`` (RocketMQ 5.x POP).

        Returns a :class:`~rocketstore.services.pop.Received`, a sequence of
        :class:`~rocketstore.services.pop.ReceivedMessage` ``(message, handle, reconsume_times)``: messages whose invisible time ran out without an :meth:`ack` first (their reconsume
        times raised by one), then new ones from the group's position, queue by queue
        (``queue_id`` picks one). A message that would come back more than
        ``max_reconsume_times`` times (default: the group's ``retryMaxTimes``, 16) goes to
        ``%DLQ%<group>`` instead. ``tags``: a subscription expression (``"TagA || TagB"``, as
        for :meth:`get_message`); messages it does not match are passed over for good, as a
        consumer that filters and commits passes them (the group's position moves past them).
        The receipt is recorded durably before the messages are handed out (see
        :mod:`rocketstore.services.pop`); an empty result when nothing is there.
        """
        if queue_id is None and max_reconsume_times is None and tags is None:
            return self._role.receive(group, topic, max_msgs, invisible_time_ms)
        return self._role.receive(
            group,
            topic,
            max_msgs,
            invisible_time_ms,
            queue_id=queue_id,
            max_reconsume_times=max_reconsume_times,
            tags=tags,
        )

    def ack(self, handle: str | ReceivedMessage) -> bool:
        """Acknowledge the message received with ``handle`` (its receipt handle, or the
        :class:`~rocketstore.services.pop.ReceivedMessage`): it is never handed out to the group
        again. True if this call acknowledged it, False if it already was;
        :class:`~rocketstore.errors.ReceiptHandleExpiredError` if its invisible time ran out and
        it was handed out again (the new receiver's handle acknowledges it);
        :class:`~rocketstore.errors.FlushTimeoutError` if it is acknowledged but, with
        ``SYNC_FLUSH``, the flush of its record did not confirm in time."""
        return self._role.ack(handle)

    def read(self, commitlog_offset: int, *, zero_copy: bool = False) -> MessageExt:
        """The message at a CommitLog offset (``MessageNotFoundError`` if none starts there).

        ``zero_copy=True``: ``body`` is a read-only memoryview into the segment map, valid for
        as long as you hold it (the map is not unmapped while it lives, even after close()).
        """
        if zero_copy is False:
            return self._role.read(commitlog_offset)
        return self._role.read(commitlog_offset, zero_copy=zero_copy)

    def get_by_msg_id(self, msg_id: str, *, zero_copy: bool = False) -> MessageExt:
        """The message with this offsetMsgId (§3.1): 32 hex characters (IPv4) or 56 (IPv6)."""
        if zero_copy is False:
            return self._role.get_by_msg_id(msg_id)
        return self._role.get_by_msg_id(msg_id, zero_copy=zero_copy)

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: Optional[int] = None,
        max_msgs: int = 32,
        tags: Optional[str] = None,
        *,
        wait: Optional[float] = None,
    ) -> GetMessageResult:
        """Pull up to ``max_msgs`` messages of (topic, queue_id) from queue offset ``offset``.

        RocketMQ's ``getMessage`` (§11): ``result.status`` is a :class:`GetMessageStatus`
        (FOUND, NO_MATCHED_MESSAGE, OFFSET_OVERFLOW_ONE, ...), ``result.messages`` the
        :class:`MessageExt` found, ``result.next_begin_offset`` where the next pull starts.
        ``offset=None`` starts at ``group``'s committed offset (else the queue's first).
        ``tags``: ``None`` or ``"*"`` for all, or ``"TagA || TagB"``; filtered by tagsCode, then
        re-checked against the real tag, so hash collisions never deliver a wrong tag.

        ``wait``: seconds to wait when nothing is there yet (the queue is caught up, or nothing
        matched): the call returns as soon as a matching message is put, by this process or
        another, and sleeps meanwhile (no CPU); ``None`` (the default) returns at once.
        """
        if wait is None:
            return self._role.get_message(group, topic, queue_id, offset, max_msgs, tags)
        return self._role.get_message(group, topic, queue_id, offset, max_msgs, tags, wait=wait)

    def query_by_key(
        self, topic: str, key: str, max_num: int = 32, begin: int = 0, end: Optional[int] = None
    ) -> list[MessageExt]:
        """Messages of ``topic`` whose UNIQ_KEY or one of whose KEYS is ``key``, stored between
        ``begin`` and ``end`` (ms, inclusive), oldest first; at most ``max_num``. When more match,
        they come from the newest index entries (among the newest ``max(max_num, 64)``); ask for
        as many as you need, or narrow ``begin``/``end``. The default, 32, is RocketMQ's client
        default; its broker caps a key query at ``maxMsgsNumBatch`` (64), a setting, not the
        format's: rocketstore returns as many as asked.

        Unlike RocketMQ, every index hit is re-checked against the record's real topic and
        keys, so a hash collision never returns a wrong message.
        """
        return self._role.query_by_key(topic, key, max_num, begin, end)

    def query_by_unique_key(self, topic: str, unique_key: str) -> MessageExt:
        """The message of ``topic`` with this UNIQ_KEY (client msgId, §3.2).

        The index is searched from the creation time the id encodes (less a second), then, if
        nothing is found there, over all time; among several hits, the first stored wins.
        """
        return self._role.query_by_unique_key(topic, unique_key)

    def get_by_queue_offset(self, topic: str, queue_id: int, queue_offset: int) -> MessageExt:
        """The message at ``queue_offset`` of (topic, queue_id)."""
        return self._role.get_by_queue_offset(topic, queue_id, queue_offset)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``offset`` as ``group``'s next offset to consume in (topic, queue_id).

        Kept in ``config/consumerOffset.json`` (written on close and by
        :meth:`persist_offsets`).
        """
        self._role.commit_offset(group, topic, queue_id, offset)


def docs(careful: type) -> dict[str, str]:
    """{name: docstring} of the hot calls, each with its ``__text_signature__`` line, taken from
    these methods and from ``careful``'s (the careful path's) signatures, for the compiled base."""
    found = {}
    for name in HOT:
        signature = inspect.signature(getattr(careful, name))
        plain = signature.replace(
            parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
            return_annotation=signature.empty,
        )
        text = str(plain).replace("(self", "($self", 1)
        found[name] = f"{name}{text}\n--\n\n" + inspect.cleandoc(getattr(FacadeBase, name).__doc__ or "")
    return found
