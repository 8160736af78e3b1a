"""Several processes writing one store: the lock holder serves the others (rocketstore.processes.writers),
which append through a shared table when they can (rocketstore.log.sharedappend).

:class:`JoinedWriting` is the part of :class:`rocketstore.storebase.StoreBase` that takes the
lock or joins its holder (``_take_role``), runs a joined store's calls in the writing process
(``_forward``; ``_serve_call`` there), takes over when that process ended (``_writer_gone``) and
shares or uses the append table. The callables a joined store's role holds
(rocketstore.roles) are here too: :class:`Forwarder`, :class:`JoinedPut`,
:func:`joined_put_batch` and :func:`joined_put_messages`.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, NoReturn, Optional

from rocketstore._impl import MESSAGE_TYPES
from rocketstore.base._background import weak_method
from rocketstore.base._checks import check_put_ints
from rocketstore.config import StoreConfig
from rocketstore.errors import (
    RocketStoreError,
    StoreClosedError,
    StoreLockedError,
    StoreReadOnlyError,
    WriterGoneError,
)
from rocketstore.files.mapped_file import close_map, flush_timeout
from rocketstore.files.storedir import StoreLock
from rocketstore.log import sharedappend
from rocketstore.message import check_user_topic, host_to_bytes
from rocketstore.processes.writers import NoWriter, RemoteFuture, WriterClient, WriterGone, WriterServer

_log = logging.getLogger("rocketstore.store")  # (the name users configure)


def closed_error() -> NoReturn:
    """Raise StoreClosedError (the callback of a weak method whose store is gone)."""
    raise StoreClosedError("the store is closed")


#: How long a writable open waits for a socket at a lock holder that cannot be told a
#: rocketstore writer or not (not Linux) before StoreLockedError (s).
_NO_SERVER_GRACE = 1.0
#: How long a lock holder that does not say it shares may stay so before StoreLockedError (s): an
#: owner that is closing takes its mark off the lock file just before it releases the lock.
_NOT_SHARING_GRACE = 0.2
#: The calls of a joined writer's store (rocketstore.processes.writers) that the writing process runs
#: and that are sent again to the next owner when the owner died before answering.
_REPEATABLE = frozenset(
    (
        "create_topic",
        "set_topic_retention",
        "deliver_delayed",
        "deliver_timers",
        "timer_stats",
        "delayed_counts",
        "update_subscription_group",
        "pop_status",
        "commit_offset",
        "committed_offset",
        "persist_offsets",
        "clean",
        "flush",
        "_share_append",
        "_topic_queues",
        "_flush_to",
    )
)
#: Every call a joined writer's store has the writing process run: those, and the ones whose
#: outcome is unknown when the owner died before answering (WriterGoneError).
FORWARDED = _REPEATABLE | {
    "put",
    "put_pipelined",
    "put_batch",
    "put_messages",
    "send_back",
    "receive",
    "ack",
    "ack_many",
    "change_invisible_time",
    "prepare_transaction",
    "commit_transaction",
    "rollback_transaction",
    "open_transactions",
}


class JoinedWriting:
    """The store's side of several writer processes (see the module's docstring); mixed into
    StoreBase, whose attributes these methods use."""

    #: The class whose methods are the careful paths (StoreBase): what the writing process runs
    #: for a joined store's call, and what a joined store runs once it writes itself.
    _careful: ClassVar[type]
    _append_table: Optional[tuple[int, Any, int]]
    _appender: Any
    _await_takeover: Callable[[], None]
    _check_open: Callable[[], None]
    _check_writable: Callable[[], None]
    _closed: bool
    _detect_config: Callable[[], StoreConfig]
    _files_read_only: bool
    _impl: Any
    _lock: StoreLock
    _mutex: threading.RLock
    _opened: Any  # (rocketstore.processes.opening.OpenedParts)
    _open_store: Callable[[], None]
    _read_only_asked: bool
    _remote: Optional[WriterClient]
    _server: Optional[WriterServer]
    _sharing_stopped: bool
    _switches: int
    _switching: bool
    _takeover_pending: bool
    _teardown: Callable[..., list[BaseException]]
    config: StoreConfig
    path: str

    def _take_role(self) -> None:
        """Take the store's lock and serve joining writers, or join the process that holds it
        (StoreLockedError when that is not a rocketstore writer, or shared_writers is off).

        Waits as long as the lock changes hands: each holder gets ``writer_wait_s`` to serve,
        and the graces run from the first reading of that holder, so a holder that stalls or
        dies before it serves (a takeover that failed) sends the waiters on to the next one,
        or makes one of them the owner; a moment when nobody holds the lock is no verdict."""
        cfg = self.config
        watched: Any = ()  # the holder being waited for (StoreLock.holder), and since when
        since = time.monotonic()
        while True:
            try:
                self._lock.acquire(shares=cfg.shared_writers)
            except StoreLockedError as exc:
                if not cfg.shared_writers or getattr(exc, "in_this_process", False):
                    raise
                holder = self._lock.holder()
                if holder != watched:
                    watched, since = holder, time.monotonic()
                if holder is not None and not holder[0]:
                    # nobody holds it (its holder just died or released it, or one of ours is
                    # between its two locks): take it, or see who did
                    self._check_wait(since)
                    time.sleep(0.001)
                    continue
                try:
                    self._remote = WriterClient(self.path, since + cfg.writer_wait_s)
                except (NoWriter, WriterGone):
                    # nobody serves the socket: an owner between its lock and its socket, one
                    # closing (it removed its socket before its lock), one gone, or not ours
                    holder = self._lock.holder()
                    if holder != watched:
                        watched, since = holder, time.monotonic()
                        continue
                    waited = self._check_wait(since)
                    if (holder is not None and not holder[1] and waited >= _NOT_SHARING_GRACE) or (
                        holder is None and waited >= _NO_SERVER_GRACE
                    ):
                        raise StoreLockedError(
                            f"store {self.path} is locked by a process that does not share writing "
                            "(a Java broker, or a rocketstore with shared_writers=False)"
                        ) from None
                    time.sleep(0.005)
                    continue
                self._files_read_only = True
                self.config = self._detect_config()
                return
            try:
                if cfg.shared_writers:
                    self._server = WriterServer(
                        self.path, weak_method(self._serve_call, closed_error), self._impl.store.serve_step
                    )
            except BaseException:
                self._lock.release()
                raise
            self._files_read_only = False
            return

    def _check_wait(self, since: float) -> float:
        """How long the lock's holder seen ``since`` then has not served; StoreLockedError past
        ``writer_wait_s``."""
        waited = time.monotonic() - since
        if waited >= self.config.writer_wait_s:
            raise StoreLockedError(
                f"store {self.path}: the process holding its lock did not serve writers "
                f"within writer_wait_s ({self.config.writer_wait_s} s)"
            ) from None
        return waited

    def _serve_call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A joined writer's call, run here (the owner)."""
        if name not in FORWARDED:
            raise StoreReadOnlyError(f"{name!r} is not a call a joined writer may make")
        method = getattr(self._careful, name)
        if name == "put_pipelined":
            return method(self, *args, **kwargs).result()
        return method(self, *args, **kwargs)

    def _forward(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A write of a joined store: run by the owner; after the owner ended, by the next."""
        while True:
            self._check_open()
            client = self._remote
            if client is None:  # this process writes now
                return getattr(self._careful, name)(self, *args, **kwargs)
            if name == "put_pipelined":
                return RemoteFuture(
                    client.submit(lambda: self._forward("put", args, {**kwargs, "durable": True}))
                )
            try:
                return client.call(name, args, kwargs)
            except WriterGone as gone:
                self._writer_gone(client)
                if gone.sent and name not in _REPEATABLE:
                    raise WriterGoneError(
                        f"the process writing for store {self.path} ended during {name}(): "
                        "whether it took effect is unknown"
                    ) from None

    def _writer_gone(self, client: WriterClient) -> None:
        """The owner this store joined is gone: take the lock, or join the next owner. When
        that fails, the error is raised and the store's next call tries again."""
        with self._mutex:
            if self._remote is not client or self._closed:
                return
            _log.info("store %s: the writing process %d ended; taking over", self.path, client.owner_pid)
            self._switching = True
            self._switches += 1
            self._closed = True
            try:
                self._teardown(clean=False)  # the following reader's parts and the client
                self._remote = None
                self._take_over()
            finally:
                self._switching = False

    def _resume_takeover(self) -> None:
        """A call of this store, whose takeover failed: take over now (or raise why not)."""
        with self._mutex:
            if not self._takeover_pending:
                return  # another thread did (or the store was closed: the call says so)
            self._switching = True
            self._switches += 1
            try:
                self._take_over()
            finally:
                self._switching = False

    def _take_over(self) -> None:
        try:
            self._open_store()
        except BaseException:
            self._await_takeover()
            raise
        self._takeover_pending = False

    # ---- several writer processes appending (rocketstore.log.sharedappend) ----

    #: The writing process's options a joined writer's own appends use.
    _APPEND_OPTIONS = (
        "store_host",
        "store_port",
        "born_host",
        "born_port",
        "max_message_size",
        "append_prop_crc",
        "flush_disk_type",
        "flush_interval_ms",
        "flush_least_pages",
        "flush_thorough_interval_ms",
        "sync_flush_timeout_ms",
    )

    def _share_append(self) -> Optional[dict[str, Any]]:
        """A joined writer asks to append in its own process: the shared table's epoch and the
        options its records take, or None (``shared_append`` off, not possible here, closing)."""
        cfg = self.config
        if not cfg.shared_append or not sharedappend.supported() or self._files_read_only:
            return None
        with self._mutex:
            self._check_open()
            if self._sharing_stopped or self._remote is not None:
                return None
            if self._append_table is None:
                table = sharedappend.open_table(self.path, create=True)
                if table is None:
                    return None
                fd, mm = table
                epoch = random.getrandbits(63) | 1
                try:
                    sharedappend.hold_presence(fd)
                    self._opened.segments.share()
                    self._opened.core.share(mm, fd, epoch, True)
                except BaseException:
                    close_map(mm)
                    os.close(fd)
                    raise
                self._append_table = (fd, mm, epoch)
            options = {name: getattr(cfg, name) for name in self._APPEND_OPTIONS}
            return {"epoch": self._append_table[2], "options": options}

    def _stop_sharing(self) -> None:
        """Joined writers append nothing more themselves (the owner closing): what they appended
        is adopted first; their next puts come here, then to the next owner."""
        if self._sharing_stopped:
            return  # (close() stops sharing first; its teardown asks again)
        self._sharing_stopped = True
        core = self._opened.core if self._opened is not None else None
        if self._files_read_only or self._remote is not None or self._read_only_asked:
            return
        if self._append_table is not None and core is not None:
            core.unshare()
        # its epoch is 0 (unshare, or this open's invalidate): a writer that still maps it appends
        # nothing, and the store directory holds what a broker's does again
        sharedappend.remove(self.path)

    def _close_append_table(self) -> None:
        table, self._append_table = self._append_table, None
        if table is not None:
            close_map(table[1])
            os.close(table[0])

    def _joined_appender(self) -> Any:
        """This joined store's own appender (sharedappend.JoinedAppender), or False."""
        appender = self._appender
        if appender is not None:
            return appender
        with self._mutex:
            if self._appender is not None:
                return self._appender
            self._appender = False
            live = self._opened.live
            if self._remote is None or live is None or not live.writable or not sharedappend.supported():
                return False
            info = self._forward("_share_append", (), {})
            if not info or self._remote is None:  # off, or this process became the writer
                return False
            config = dataclasses.replace(self.config, **info["options"])
            try:
                self._appender = sharedappend.JoinedAppender(
                    self.path,
                    config,
                    self._impl.store,
                    live.mm,
                    info["epoch"],
                    uniq_prefix(config),
                    weak_method(self._joined_topic_queues, closed_error),
                )
            except (sharedappend.StaleTable, OSError, RocketStoreError) as exc:
                _log.warning(
                    "store %s: joined writer appends through the writing process: %s", self.path, exc
                )
            return self._appender

    def _flush_to(self, offset: int) -> int:
        """A joined writer's durable put: the owner's group commit flushes the CommitLog up to
        ``offset`` (with the durable puts of every process); 0, else 1 (timed out) or the
        flush's errno."""
        self._check_writable()
        core = self._opened.core
        core.wrote_offset  # noqa: B018 (adopts what the joined writers appended, to flush it)
        return int(core.wait_flushed(int(offset), self.config.sync_flush_timeout_ms))

    def _joined_durable(self, result: Any, end: int) -> Any:
        """``result`` once the owner's group commit flushed up to ``end`` (FlushTimeoutError
        carrying it when that did not confirm)."""
        rc = self._forward("_flush_to", (end,), {})
        if rc:
            raise flush_timeout(result, rc)
        return result

    def _joined_topic_queues(self, topic: str) -> int:
        queues: int = self._forward("_topic_queues", (topic,), {})
        return queues

    def _drop_appender(self) -> None:
        """The owner this store's appender joined is gone or closing: appends go through it (or
        the next one) again."""
        with self._mutex:
            appender, self._appender = self._appender, False
        if appender:
            appender.close()


class Forwarder:
    """A joined writer's call (its role's): ``forwarder(store, ...)`` runs in the writing
    process."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, store: Any, *args: Any, **kwargs: Any) -> Any:
        return store._forward(self._name, _sendable(args), {k: _sendable_value(v) for k, v in kwargs.items()})


class JoinedPut:
    """A joined writer's ``put``: plain, tagged and keyed puts, and those with a plain properties
    dict, also of a plain Message, append in this process under the shared append lock
    (rocketstore.log.sharedappend); anything else, and every put while that is not possible, runs
    in the writing process. Holds the store weakly (the store's role holds it)."""

    __slots__ = ("_store",)

    def __init__(self, store: Any) -> None:
        self._store = weakref.ref(store)

    def __call__(self, topic: Any, body: Any = None, **kwargs: Any) -> Any:
        store = self._store()
        if store is None:
            closed_error()
        appender = store._appender
        if (
            not kwargs
            and appender
            and not store._closed
            and topic.__class__ is str
            and topic in store._user_topics
            and body is not None
            and not appender.refusing
            and not appender.sync_flush
        ):
            # the hot path, put(topic, body) of a topic already checked: one call into the core
            try:
                return appender.core.put(topic, body, None, -1, 0, 0, 0, 0, 0, None, 0)
            except (sharedappend.StaleTable, sharedappend.NotShareable):
                pass  # the general path below says what to do
        if body is None and not store._closed and _JOINED_MESSAGE_ARGS.issuperset(kwargs):
            # put(Message(...)): a plain one (put_plain_messages says) appends here too
            done = _put_message_here(store, topic, kwargs.get("durable"))
            if done is not None:
                return done
        if (
            not store._closed  # (also a store a fork inherited: closed in the child)
            and topic.__class__ is str
            and body is not None
            and kwargs.get("delay_level") is None
            and kwargs.get("deliver_at_ms") is None
            and kwargs.get("delay_ms") is None
            and _JOINED_PUT_ARGS.issuperset(kwargs)
        ):
            appender = store._joined_appender()
            if appender and not appender.refusing:
                store._putter.check_user_topic(topic)  # (remembered for the hot path above)
                queue_id, flag = check_put_ints(kwargs.get("queue_id", -1), kwargs.get("flag", 0))
                durable = appender.durable(kwargs.get("durable"))
                tags, keys, properties = kwargs.get("tags"), kwargs.get("keys"), kwargs.get("properties")
                try:
                    if tags is None and keys is None and properties is None:
                        done = appender.core.put(topic, body, None, queue_id, flag, 0, 0, 0, 0, None, 0)
                    else:  # None: not the plain shape (a DELAY property, ...), the owner's to do
                        done = appender.core.put_keyed(topic, body, tags, keys, queue_id, flag, 0, properties)
                    if done is not None:
                        # durable: flushed by the owner's group commit, with every process's
                        return (
                            store._joined_durable(done, done.commitlog_offset + done.size)
                            if durable
                            else done
                        )
                except sharedappend.StaleTable:
                    store._drop_appender()  # the owner is closing or gone: through it, or the next
                except sharedappend.NotShareable:
                    pass
        return store._forward(
            "put", _sendable((topic, body)), {k: _sendable_value(v) for k, v in kwargs.items()}
        )


def _put_message_here(store: Any, message: Any, durable: Optional[bool]) -> Any:
    """A joined writer's ``put(message)`` appended in this process when the message is plain (an
    exact Message of a user topic, a bytes body, tags, keys and a plain properties dict, queue
    id, flag and born timestamp; see CommitLogCore.put_plain_messages); None, having written
    nothing, when it is not or appending here is not possible (the writing process puts it)."""
    name = getattr(message, "topic", None)
    if name.__class__ is not str:
        return None
    appender = store._joined_appender()
    if not appender or appender.refusing:
        return None
    try:
        check_user_topic(name)
    except RocketStoreError:
        return None  # the writing process says what is wrong
    try:
        done = appender.core.put_plain_messages([message], {name}, 0)
    except sharedappend.StaleTable:
        store._drop_appender()  # the owner is closing or gone: through it, or the next
        return None
    except sharedappend.NotShareable:
        return None
    if done is None:
        return None
    result = done[0]
    if appender.durable(durable):
        return store._joined_durable(result, result.commitlog_offset + result.size)
    return result


def joined_put_batch(store: Any, topic: Any, bodies: Any = None, **kwargs: Any) -> Any:
    """A joined writer's ``put_batch``: a batch without tags or properties appends in this
    process (rocketstore.log.sharedappend); anything else runs in the writing process."""
    if (
        not store._closed
        and topic.__class__ is str
        and bodies is not None
        and kwargs.get("tags") is None
        and not kwargs.get("properties")
        and not kwargs.get("pipelined")
        and _JOINED_BATCH_ARGS.issuperset(kwargs)
        and topic not in store._batch_topics  # (one inner batch record: the writing process's)
    ):
        appender = store._joined_appender()
        if appender and not appender.refusing:
            check_user_topic(topic)
            queue_id, flag = check_put_ints(kwargs.get("queue_id", -1), kwargs.get("flag", 0))
            durable = appender.durable(kwargs.get("durable"))
            try:
                done = appender.core.put_batch(
                    topic, bodies, kwargs.get("lengths"), None, queue_id, flag, 0, 0, 0
                )
                return store._joined_durable(done, done.end_offset) if durable and len(done) else done
            except sharedappend.StaleTable:
                store._drop_appender()
            except sharedappend.NotShareable:
                pass
    return store._forward(
        "put_batch", _sendable((topic, bodies)), {k: _sendable_value(v) for k, v in kwargs.items()}
    )


def joined_put_messages(store: Any, messages: Any, durable: Optional[bool] = None) -> Any:
    """A joined writer's ``put_messages``: a batch of plain messages (tags and keys at most, of
    user topics) appends in this process (rocketstore.log.sharedappend); anything else runs in the
    writing process."""
    if not store._closed:
        if type(messages) is not list:
            messages = list(messages)
        appender = store._joined_appender()
        batch_topics = store._batch_topics  # (one inner batch record: the writing process's)
        if batch_topics and any(getattr(m, "topic", None) in batch_topics for m in messages):
            appender = None
        if appender and not appender.refusing:
            topics = set()
            for m in messages:
                name = getattr(m, "topic", None)
                if name.__class__ is str and name not in topics:
                    try:
                        check_user_topic(name)
                    except Exception:
                        continue  # not plain here: the writing process says what is wrong
                    topics.add(name)
            try:
                done = appender.core.put_plain_messages(messages, topics, 0)
                if done is not None:
                    if appender.durable(durable) and done:
                        return store._joined_durable(done, max(r.commitlog_offset + r.size for r in done))
                    return done
            except sharedappend.StaleTable:
                store._drop_appender()
            except sharedappend.NotShareable:
                pass
    return store._forward(
        "put_messages", (_sendable_value(messages),), {} if durable is None else {"durable": durable}
    )


_JOINED_MESSAGE_ARGS = frozenset(("durable",))
_JOINED_BATCH_ARGS = frozenset(("lengths", "tags", "properties", "queue_id", "flag", "durable", "pipelined"))
_JOINED_PUT_ARGS = frozenset(
    ("tags", "keys", "properties", "queue_id", "flag", "durable", "delay_level", "deliver_at_ms", "delay_ms")
)


def _sendable_value(value: Any) -> Any:
    """``value`` as it can be pickled to the writing process: memoryviews as bytes (also in a
    list, and a Message's body: a copy of it), an iterator as a list."""
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, MESSAGE_TYPES):
        return _sendable_message(value)
    if isinstance(value, (list, tuple)):
        if any(isinstance(v, (memoryview, *MESSAGE_TYPES)) for v in value):
            return [_sendable_item(v) for v in value]
        return value
    if isinstance(value, Iterator):
        return [_sendable_item(v) for v in value]
    return value


def _sendable_item(value: Any) -> Any:
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, MESSAGE_TYPES):
        return _sendable_message(value)
    return value


def _sendable_message(message: Any) -> Any:
    """``message``, or a copy whose body is bytes where it was a memoryview (which pickle refuses)."""
    if not isinstance(getattr(message, "body", None), memoryview):
        return message
    sendable = copy.copy(message)
    sendable.body = message.body.tobytes()
    return sendable


def _sendable(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(_sendable_value(a) for a in args)


def uniq_prefix(cfg: StoreConfig) -> bytes:
    """The first bytes of the UNIQ_KEYs this process makes (spec §3.2): host, pid, a random
    "class loader" hash."""
    pid = os.getpid() & 0xFFFF
    return (
        host_to_bytes(cfg.born_host or "")
        + pid.to_bytes(2, "big")
        + random.getrandbits(32).to_bytes(4, "big")
    )
