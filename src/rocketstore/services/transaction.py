"""Transactional messages: RocketMQ's half / op protocol, in the store's own files.

A transactional message is stored twice, as a RocketMQ broker stores it
(``TransactionalMessageBridge``), so that a 4.x or 5.x broker handed the store resolves what is
still open and rocketstore resolves what a broker left open:

**prepare** puts the *half* message: topic ``RMQ_SYS_TRANS_HALF_TOPIC``, queue 0, the body,
flag, tags and keys as given, and properties ``REAL_TOPIC`` / ``REAL_QID`` (where it goes when
committed), ``TRAN_MSG=true``, ``PGROUP`` (the producer group), ``UNIQ_KEY`` and
``__transactionId__`` (the transaction id, one value). Consumers of the real topic cannot see it.

**commit** puts the real message: topic ``REAL_TOPIC``, queue ``REAL_QID``, the half's body,
flag, born timestamp and properties without ``REAL_TOPIC`` / ``REAL_QID`` / ``TRAN_MSG``, sysFlag
transaction type COMMIT, PREPAREDTRANSACTIONOFFSET the half's CommitLog offset. Then it writes
the *op* record: topic ``RMQ_SYS_TRANS_OP_HALF_TOPIC``, queue 0, tags ``d``, body the half's
queue offset in decimal (the form both 4.9.8 and 5.x parse). **rollback** writes only the op.

**check** walks the half queue from the offset group ``CID_RMQ_SYS_TRANS`` has consumed
(``consumerOffset.json``, as the broker keeps it) and asks ``resolve(message)`` about each half
message that is older than its immunity time (``CHECK_IMMUNITY_TIME_IN_SECONDS``, else
``timeout_ms``) and has no op: ``"commit"``, ``"rollback"``, or ``None`` (unknown yet). An
unknown one is put again at the queue's end with ``TRANSACTION_CHECK_TIMES`` one higher, as the
broker does; after ``max_checks`` checks it is discarded into ``TRANS_CHECK_MAX_TIME_TOPIC``
(5.x) and closed. The consumed offset then moves past the walked prefix.

**Exactly once across crashes.** Each step is an append, and an append ends before the next
starts, so a crash leaves a prefix of: half, [real], op. The transaction id is kept in every copy
of a half message and in the real message (its ``UNIQ_KEY``), and the store's index holds it, so
before it writes anything, a commit, rollback or check looks the transaction up: a COMMIT record
of it in ``REAL_TOPIC`` means committed (a missing op is written, a rollback refused), an op
for any copy of it means closed. A crash between the real message and its op therefore never
gives a second real message, and a crash during a check (a renewed copy beside the original)
never resolves one transaction twice. Resolution holds a lock (a thread lock and an ``flock``
on ``config/transactionResolve.lock``), so two processes joined to one store never commit one
transaction twice either.
"""

from __future__ import annotations

import fcntl
import itertools
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Optional, Union

from rocketstore.base._checks import check_mapping, check_put_ints, java_int
from rocketstore.base._clock import month_bounds, now_ms
from rocketstore.errors import (
    InvalidMessageError,
    MessageNotFoundError,
    RocketStoreError,
    TransactionStateError,
)
from rocketstore.files.configfiles import PERM_READ, PERM_WRITE
from rocketstore.message import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    SYSFLAG_HOSTS_V6,
    Message,
    MessageExt,
    check_user_topic,
)
from rocketstore.services.parts import StoreParts

__all__ = [
    "HALF_TOPIC",
    "OP_TOPIC",
    "CHECK_GROUP",
    "DISCARD_TOPIC",
    "PreparedMessage",
    "TransactionStateError",
    "TransactionService",
]

log = logging.getLogger(__name__)

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
#: the consumer group whose offsets in ``consumerOffset.json`` say how far checks have walked
CHECK_GROUP = "CID_RMQ_SYS_TRANS"
#: 5.x puts a half message checked ``max_checks`` times here
DISCARD_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
REMOVE_TAG = "d"

PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_TRANSACTION_ID = "__transactionId__"
PROPERTY_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_S = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"

SYSFLAG_TRANSACTION_MASK = 0x0C
TRANSACTION_COMMIT_TYPE = 0x08
#: the producer group a prepare without one records (RocketMQ's default producer group)
DEFAULT_PRODUCER_GROUP = "DEFAULT_PRODUCER"
#: RocketMQ's ``transactionTimeOut`` and ``transactionCheckMax`` defaults
DEFAULT_TIMEOUT_MS = 6_000
DEFAULT_MAX_CHECKS = 15
#: the properties a half message gets from the store; a prepare may not set them itself
_RESERVED = frozenset(
    {
        PROPERTY_REAL_TOPIC,
        PROPERTY_REAL_QUEUE_ID,
        PROPERTY_TRANSACTION_PREPARED,
        PROPERTY_PRODUCER_GROUP,
        PROPERTY_TRANSACTION_ID,
        PROPERTY_CHECK_TIMES,
        PROPERTY_PREPARED_QUEUE_OFFSET,
        PROPERTY_UNIQ_KEY,
    }
)
_COMMIT, _ROLLBACK = "commit", "rollback"
_LOOPBACK = bytes((127, 0, 0, 1))
_HALF_QUEUE = 0


@dataclass(frozen=True)
class PreparedMessage:
    """A half message: what :meth:`MessageStore.prepare_transaction` returns, and what
    ``commit_transaction`` / ``rollback_transaction`` take (a half message's
    :class:`MessageExt`, as ``check_transactions`` hands it to its resolver, works too)."""

    #: the transaction id (the half message's UNIQ_KEY; the committed message keeps it)
    transaction_id: str
    #: where the message goes when committed
    topic: str
    queue_id: int
    #: the half message's place in ``RMQ_SYS_TRANS_HALF_TOPIC``
    commitlog_offset: int
    queue_offset: int


Prepared = Union[PreparedMessage, MessageExt]
Resolver = Callable[[MessageExt], Optional[str]]


class TransactionService:
    """The transactions of one writable store (see the module docstring)."""

    def __init__(self, parts: StoreParts, *, clock: Optional[Callable[[], int]] = None):
        #: the store's layers this service works on (a store opened again has new ones)
        self.parts = parts
        self._parts = parts
        self.clock = clock or now_ms
        self._lock = threading.RLock()
        self._depth = 0
        self._lock_path = os.path.join(parts.path, "config", "transactionResolve.lock")
        self._counter = itertools.count()
        self._loader_hash = int.from_bytes(os.urandom(4), "big")
        self._round_robin: dict[str, itertools.count[int]] = {}
        #: half queue offsets that have an op record, and the op queue offset read up to
        self._closed_offsets: set[int] = set()
        self._ops_read = 0

    # ---- prepare, commit, rollback ----

    def prepare(
        self,
        topic: str,
        body: Any,
        *,
        tags: Optional[str] = None,
        keys: Any = None,
        properties: Optional[Mapping[str, str]] = None,
        queue_id: int = -1,
        flag: int = 0,
        producer_group: Optional[str] = None,
        check_immunity_s: Optional[int] = None,
        durable: Optional[bool] = None,
    ) -> PreparedMessage:
        check_mapping(properties)
        queue_id, flag = check_put_ints(queue_id, flag)
        check_user_topic(topic)
        props = dict(properties) if properties else {}
        reserved = _RESERVED.intersection(props)
        if reserved:
            raise InvalidMessageError(
                f"properties {sorted(reserved)} are set by the transaction itself; leave them out"
            )
        group = DEFAULT_PRODUCER_GROUP if producer_group is None else producer_group
        if not isinstance(group, str) or not group:
            raise InvalidMessageError(f"producer_group must be a non-empty str, not {group!r}")
        if check_immunity_s is not None:
            if isinstance(check_immunity_s, bool) or not isinstance(check_immunity_s, int):
                raise InvalidMessageError(f"check_immunity_s must be an int, not {check_immunity_s!r}")
            if check_immunity_s < 0:
                raise InvalidMessageError(f"check_immunity_s must be >= 0, not {check_immunity_s}")
            props[PROPERTY_CHECK_IMMUNITY_S] = str(check_immunity_s)
        real_queue = self._parts.topics.queue_for_put(topic, queue_id, self._round_robin)
        self._parts.topics.ensure(HALF_TOPIC, 1, perm=PERM_READ | PERM_WRITE)
        transaction_id = self._new_id()
        props[PROPERTY_REAL_TOPIC] = topic
        props[PROPERTY_REAL_QUEUE_ID] = str(real_queue)
        props[PROPERTY_TRANSACTION_PREPARED] = "true"
        props[PROPERTY_PRODUCER_GROUP] = group
        props[PROPERTY_UNIQ_KEY] = transaction_id
        props[PROPERTY_TRANSACTION_ID] = transaction_id
        half = Message(
            HALF_TOPIC, body, tags=tags, keys=keys, properties=props, queue_id=_HALF_QUEUE, flag=flag
        )
        result = self._parts.put_message(half, durable, 0)
        _check_put(result, "the half message")
        return PreparedMessage(
            transaction_id, topic, real_queue, result.commitlog_offset, result.queue_offset
        )

    def commit(self, prepared: Prepared, *, durable: Optional[bool] = None) -> MessageExt:
        """Make the half message visible in its topic; returns the committed message."""
        half = self._half(prepared)
        with self._resolving():
            done = self._committed(half)
            if done is None:
                if self._is_closed(half):
                    raise TransactionStateError(
                        f"transaction {_tid(half)} was rolled back: it cannot be committed"
                    )
                result = self._parts.put_message(
                    _real_message(half), durable, 0, prepared_offset=half.commitlog_offset
                )
                _check_put(result, "the committed message")
                done = self._parts.commitlog.read(result.commitlog_offset)
            self._close(half, durable)
            return done

    def rollback(self, prepared: Prepared, *, durable: Optional[bool] = None) -> None:
        """Close the half message without delivering it."""
        half = self._half(prepared)
        with self._resolving():
            if self._committed(half) is not None:
                self._close(half, durable)
                raise TransactionStateError(
                    f"transaction {_tid(half)} was committed: it cannot be rolled back"
                )
            self._close(half, durable)

    # ---- checks ----

    def open_transactions(self) -> list[MessageExt]:
        """The half messages not yet committed, rolled back or discarded, oldest first."""
        with self._resolving():
            return [half for _offset, half in self._open_halves() if self._committed(half) is None]

    def check(
        self,
        resolve: Resolver,
        *,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        max_checks: int = DEFAULT_MAX_CHECKS,
        now: Optional[int] = None,
    ) -> dict[str, int]:
        """One check pass (see the module docstring); returns how many half messages it
        committed, rolled back, left unknown (put again), discarded, and found closed already."""
        if not callable(resolve):
            raise TypeError(f"resolve must be callable, not {type(resolve).__name__}")
        for name, value in (("timeout_ms", timeout_ms), ("max_checks", max_checks)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidMessageError(f"{name} must be an int >= 0, not {value!r}")
        counts = {"committed": 0, "rolled_back": 0, "unknown": 0, "discarded": 0, "closed": 0}
        at = self.clock() if now is None else now
        walked = None
        for offset, half in self._open_halves():
            props = half.properties or {}
            immunity = _immunity_ms(props.get(PROPERTY_CHECK_IMMUNITY_S), timeout_ms)
            if at - half.born_timestamp < immunity and half.born_timestamp <= at:
                break  # too young: it and every later one wait for the next pass
            with self._resolving():
                if self._is_closed(half) or self._committed(half) is not None:
                    self._close(half, None)  # a copy of a resolved transaction (a check cut short)
                    counts["closed"] += 1
                    walked = offset + 1
                    continue
            checks = java_int(props.get(PROPERTY_CHECK_TIMES)) or 0
            if checks >= max_checks:
                self._discard(half)
                counts["discarded"] += 1
                walked = offset + 1
                continue
            answer = resolve(half)
            if answer == _COMMIT:
                try:
                    self.commit(half)
                    counts["committed"] += 1
                except TransactionStateError:
                    counts["closed"] += 1
            elif answer == _ROLLBACK:
                try:
                    self.rollback(half)
                    counts["rolled_back"] += 1
                except TransactionStateError:
                    counts["closed"] += 1
            elif answer is None:
                self._renew(half, checks + 1)
                counts["unknown"] += 1
            else:
                raise InvalidMessageError(f"resolve must return 'commit', 'rollback' or None, not {answer!r}")
            walked = offset + 1
        if walked is not None:
            self._advance(walked)
        return counts

    # ---- the pieces ----

    @contextmanager
    def _resolving(self) -> Iterator[None]:
        """This transaction's resolution, alone among threads and the store's processes (the
        thread lock is re-entrant; the ``flock`` is taken by the outermost hold only)."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._depth = 1
                self._read_ops()
                yield
            finally:
                self._depth = 0
                os.close(fd)  # (releases the flock)

    def _half(self, prepared: Prepared) -> MessageExt:
        """The half message ``prepared`` names, read back and checked."""
        if isinstance(prepared, (PreparedMessage, MessageExt)):
            offset, queue_offset = prepared.commitlog_offset, prepared.queue_offset
        else:
            raise TypeError(
                f"expected a PreparedMessage or a half message's MessageExt, not {type(prepared).__name__}"
            )
        half = self._parts.commitlog.read(offset)
        props = half.properties or {}
        if (
            half.topic != HALF_TOPIC
            or half.queue_offset != queue_offset
            or PROPERTY_REAL_TOPIC not in props
            or _tid(half) is None
        ):
            raise MessageNotFoundError(f"no half message of a transaction at commitlog offset {offset}")
        if isinstance(prepared, PreparedMessage) and _tid(half) != prepared.transaction_id:
            raise MessageNotFoundError(
                f"the half message at commitlog offset {offset} is not transaction {prepared.transaction_id}"
            )
        return half

    def _open_halves(self) -> Iterator[tuple[int, MessageExt]]:
        """(queue offset, half message) from the checked offset on that have no op record."""
        self._parts.dispatcher.catch_up(index=True)
        cq = self._parts.queues.get(HALF_TOPIC, _HALF_QUEUE)
        if cq is None:
            return
        with self._resolving():
            start = max(self._consumed(HALF_TOPIC), cq.min_offset)
            end = cq.max_offset
            closed = set(self._closed_offsets)
        for offset in range(start, end):
            if offset in closed:
                continue
            half = self._half_at(cq, offset)
            if half is not None:
                yield offset, half

    def _half_at(self, cq: Any, offset: int) -> Optional[MessageExt]:
        commitlog_offset, _size, _tags = cq.unit(offset)
        try:
            half = self._parts.commitlog.read(commitlog_offset)
        except MessageNotFoundError:
            log.warning("transactions: the half message at queue offset %d is gone", offset)
            return None
        if half.topic != HALF_TOPIC or half.queue_offset != offset:
            log.warning("transactions: queue offset %d of %s names another record", offset, HALF_TOPIC)
            return None
        return half

    def _read_ops(self) -> None:
        """Learn the op records appended since the last look (by this or another process)."""
        self._parts.dispatcher.catch_up(index=False)
        cq = self._parts.queues.get(OP_TOPIC, _HALF_QUEUE)
        if cq is None:
            return
        start = max(self._ops_read, cq.min_offset)
        for offset in range(start, cq.max_offset):
            commitlog_offset, _size, _tags = cq.unit(offset)
            try:
                op = self._parts.commitlog.read(commitlog_offset)
            except MessageNotFoundError:
                continue
            if op.topic != OP_TOPIC or op.tags != REMOVE_TAG:
                continue
            for text in bytes(op.body).decode("utf-8", "replace").split(","):
                value = java_int(text.strip(), 64)  # Long.valueOf: queue offsets
                if value is not None:
                    self._closed_offsets.add(value)
        self._ops_read = cq.max_offset

    def _is_closed(self, half: MessageExt) -> bool:
        """Whether this half message, or another copy of its transaction, has an op record."""
        if half.queue_offset in self._closed_offsets:
            return True
        tid = _tid(half)
        if tid is None:
            return False
        for offset in self._index(HALF_TOPIC, tid):
            if offset != half.commitlog_offset:
                try:
                    copy = self._parts.commitlog.read(offset)
                except MessageNotFoundError:
                    continue
                if (
                    copy.topic == HALF_TOPIC
                    and _tid(copy) == tid
                    and copy.queue_offset in self._closed_offsets
                ):
                    return True
        return False

    def _committed(self, half: MessageExt) -> Optional[MessageExt]:
        """The COMMIT record of ``half``'s transaction in its real topic, if there is one."""
        props = half.properties or {}
        topic, tid = props.get(PROPERTY_REAL_TOPIC), _tid(half)
        if not topic or tid is None:
            return None
        for offset in self._index(topic, tid):
            try:
                msg = self._parts.commitlog.read(offset)
            except MessageNotFoundError:
                continue
            if (
                msg.topic == topic
                and msg.sys_flag & SYSFLAG_TRANSACTION_MASK == TRANSACTION_COMMIT_TYPE
                and (msg.properties or {}).get(PROPERTY_UNIQ_KEY) == tid
            ):
                return msg
        return None

    def _index(self, topic: str, key: str) -> list[int]:
        self._parts.dispatcher.catch_up(index=True)
        offsets: list[int] = self._parts.index.query(topic, key, 64)[0]
        return offsets

    def _close(self, half: MessageExt, durable: Optional[bool]) -> None:
        """Write ``half``'s op record, unless it has one."""
        if half.queue_offset in self._closed_offsets:
            return
        self._parts.topics.ensure(OP_TOPIC, 1, perm=PERM_READ | PERM_WRITE)
        op = Message(OP_TOPIC, str(half.queue_offset).encode(), tags=REMOVE_TAG, queue_id=half.queue_id)
        _check_put(self._parts.put_message(op, durable, 0), "the op record")
        self._closed_offsets.add(half.queue_offset)

    def _renew(self, half: MessageExt, checks: int) -> None:
        """Put ``half`` again at the half queue's end, checked ``checks`` times."""
        props = dict(half.properties or {})
        props[PROPERTY_CHECK_TIMES] = str(checks)
        props.setdefault(PROPERTY_PREPARED_QUEUE_OFFSET, str(half.queue_offset))
        copy = _copy(half, HALF_TOPIC, half.queue_id, props, half.sys_flag)
        _check_put(self._parts.put_message(copy, None, 0), "the renewed half message")

    def _discard(self, half: MessageExt) -> None:
        """Keep a half message checked too often in TRANS_CHECK_MAX_TIME_TOPIC, and close it."""
        with self._resolving():
            if self._is_closed(half) or self._committed(half) is not None:
                self._close(half, None)
                return
            self._parts.topics.ensure(DISCARD_TOPIC, 1, perm=PERM_READ | PERM_WRITE)
            copy = _copy(half, DISCARD_TOPIC, 0, dict(half.properties or {}), half.sys_flag)
            _check_put(self._parts.put_message(copy, None, 0), "the discarded half message")
            log.warning("transactions: %s checked too often; kept in %s", _tid(half), DISCARD_TOPIC)
            self._close(half, None)

    def _consumed(self, topic: str) -> int:
        offsets = self._parts.offsets
        if offsets is None:
            return 0
        consumed: int = offsets.query(CHECK_GROUP, topic, _HALF_QUEUE)
        return max(0, consumed)

    def _advance(self, offset: int) -> None:
        offsets = self._parts.offsets
        if offsets is None or offset <= self._consumed(HALF_TOPIC):
            return
        offsets.commit(CHECK_GROUP, HALF_TOPIC, _HALF_QUEUE, offset)
        offsets.persist()

    def _new_id(self) -> str:
        """A client-style UNIQ_KEY (the codec's ``make_uniq_key``): loopback address, pid, this
        service's random part in place of the class loader's hash, time and a counter."""
        now = self.clock()
        key: str = self._parts.commitlog.codec.make_uniq_key(
            _LOOPBACK, os.getpid(), self._loader_hash, now, next(self._counter), month_bounds(now)[0]
        )
        return key


def _tid(half: MessageExt) -> Optional[str]:
    props = half.properties or {}
    tid: Optional[str] = props.get(PROPERTY_TRANSACTION_ID) or props.get(PROPERTY_UNIQ_KEY)
    return tid


def _real_message(half: MessageExt) -> Message:
    """The committed message of ``half`` (EndTransactionProcessor's endMessageTransaction)."""
    props = dict(half.properties or {})
    topic = props.pop(PROPERTY_REAL_TOPIC)
    queue_id = java_int(props.pop(PROPERTY_REAL_QUEUE_ID, None))
    if queue_id is None:
        raise MessageNotFoundError(f"half message {_tid(half)} has no REAL_QID")
    props.pop(PROPERTY_TRANSACTION_PREPARED, None)
    sys_flag = (half.sys_flag & ~SYSFLAG_TRANSACTION_MASK) | TRANSACTION_COMMIT_TYPE
    return _copy(half, topic, queue_id, props, sys_flag)


def _copy(half: MessageExt, topic: str, queue_id: int, props: dict[str, str], sys_flag: int) -> Message:
    tags = props.pop(PROPERTY_TAGS, None)
    keys = props.pop(PROPERTY_KEYS, None)
    return Message(
        topic,
        bytes(half.stored_body),
        tags=tags,
        keys=keys,
        properties=props,
        queue_id=queue_id,
        flag=half.flag,
        born_timestamp=half.born_timestamp,
        reconsume_times=half.reconsume_times,
        sys_flag=sys_flag & ~SYSFLAG_HOSTS_V6,
    )


def _check_put(result: Any, what: str) -> None:
    if not getattr(result, "ok", False):
        raise RocketStoreError(f"{what} was not stored: {getattr(result, 'status', result)!r}")


def _immunity_ms(text: Optional[str], timeout_ms: int) -> int:
    """The ms a half message is left alone: its CHECK_IMMUNITY_TIME_IN_SECONDS, at least the timeout."""
    seconds = java_int(text, 64)  # Long.parseLong
    if seconds is None or seconds < 0:
        return timeout_ms
    return max(seconds * 1000, timeout_ms)
