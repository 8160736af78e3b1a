"""Several processes writing one store: the lock holder serves the others (rocketstore.processes.writers),
which append through a shared table when they can (rocketstore.log.sharedappend).

:class:`Joined` is a store's side of that, a plain object the store
(rocketstore.storebase.StoreBase) holds for its life: it takes the lock or joins its holder
(``take_role``), runs a joined store's calls in the writing process (``forward``; ``serve_call``
there) and shares or uses the append table; when the process it joined ended it has the store take
over (the store's ``_writer_gone``). The callables a joined store's role holds (rocketstore.roles)
are here too: :class:`Forwarder` and :class:`JoinedPuts`.
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
from typing import Any, NoReturn, Optional

from rocketstore._impl import MESSAGE_TYPES
from rocketstore.base._background import weak_method
from rocketstore.base._checks import check_put_ints
from rocketstore.config import StoreConfig
from rocketstore.errors import (
    RocketStoreError,
    StoreClosedError,
    StoreConfigError,
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


class Joined:
    """A store's links to the other processes writing it (see the module's docstring), one for
    the life of the store (rocketstore.storebase.StoreBase holds it): the server of its joined
    writers (this process holds the lock), or the client of the process it joined
    (``remote``), the shared append table it made for them (``append_table``), and a joined
    store's own appender (``appender``: None not asked yet, False none to be had).

    It knows its store weakly; ``careful`` is the store's class, whose methods are the careful
    paths (what the writing process runs for a joined store's call, and a joined store once it
    writes itself), and ``steps`` the few of its functions this needs, called with the store
    first: ``check_open``, ``check_writable``, ``parts`` (the OpenedParts of the last open) and
    ``writer_gone`` (the takeover, the store's: it opens the store again)."""

    __slots__ = (
        "__weakref__",
        "_ref",
        "path",
        "lock",
        "mutex",
        "impl",
        "careful",
        "check_open",
        "check_writable",
        "parts",
        "writer_gone",
        "server",
        "remote",
        "append_table",
        "appender",
        "sharing_stopped",
    )

    def __init__(
        self,
        store: Any,
        mutex: threading.RLock,
        impl: Any,
        careful: type,
        steps: tuple[
            Callable[[Any], None],
            Callable[[Any], None],
            Callable[[Any], Any],
            Callable[[Any, WriterClient], None],
        ],
    ) -> None:
        self._ref = weakref.ref(store)
        self.path: str = store.path
        self.lock = StoreLock(self.path)  # the store's lock, which this process holds or waits on
        self.mutex, self.impl, self.careful = mutex, impl, careful
        self.check_open, self.check_writable, self.parts, self.writer_gone = steps
        self.server: Optional[WriterServer] = None  # serving joined writers (this process writes)
        self.remote: Optional[WriterClient] = None  # the process this one's writes go to
        # rocketstore.log.sharedappend: the owner's table (fd, map, epoch) once a joined writer asked
        # for it; a joined store's own appender (None: not asked yet, False: none to be had)
        self.append_table: Optional[tuple[int, Any, int]] = None
        self.appender: Any = None
        self.sharing_stopped = False

    def store(self) -> Any:
        """The store (StoreClosedError once it is gone)."""
        store = self._ref()
        if store is None:
            closed_error()
        return store

    def opened(self) -> None:
        """The store opened (again): its joined writers and its own appends start afresh."""
        if self.server is not None:
            self.server.ready()
        self.appender = None
        self.sharing_stopped = False

    # ---- taking the lock or joining its holder, serving, forwarding ----

    def take_role(self, cfg: StoreConfig) -> bool:
        """Take the store's lock and serve joining writers, or join the process that holds it
        (StoreLockedError when that is not a rocketstore writer, or shared_writers is off);
        whether it joined (its files are then read-only here).

        Waits as long as the lock changes hands: each holder gets ``writer_wait_s`` to serve,
        and the graces run from the first reading of that holder, so a holder that stalls or
        dies before it serves (a takeover that failed) sends the waiters on to the next one,
        or makes one of them the owner; a moment when nobody holds the lock is no verdict."""
        watched: Any = ()  # the holder being waited for (StoreLock.holder), and since when
        since = time.monotonic()
        while True:
            try:
                self.lock.acquire(shares=cfg.shared_writers)
            except StoreLockedError as exc:
                if not cfg.shared_writers or getattr(exc, "in_this_process", False):
                    raise
                holder = self.lock.holder()
                if holder != watched:
                    watched, since = holder, time.monotonic()
                if holder is not None and not holder[0]:
                    # nobody holds it (its holder just died or released it, or one of ours is
                    # between its two locks): take it, or see who did
                    self._check_wait(cfg, since)
                    time.sleep(0.001)
                    continue
                try:
                    self.remote = WriterClient(self.path, since + cfg.writer_wait_s)
                except (NoWriter, WriterGone):
                    # nobody serves the socket: an owner between its lock and its socket, one
                    # closing (it removed its socket before its lock), one gone, or not ours
                    holder = self.lock.holder()
                    if holder != watched:
                        watched, since = holder, time.monotonic()
                        continue
                    waited = self._check_wait(cfg, since)
                    if (holder is not None and not holder[1] and waited >= _NOT_SHARING_GRACE) or (
                        holder is None and waited >= _NO_SERVER_GRACE
                    ):
                        raise StoreLockedError(
                            f"store {self.path} is locked by a process that does not share writing "
                            "(a Java broker, or a rocketstore with shared_writers=False)"
                        ) from None
                    time.sleep(0.005)
                    continue
                return True
            try:
                if cfg.shared_writers:
                    self.server = WriterServer(
                        self.path, weak_method(self.serve_call, closed_error), self.impl.store.serve_step
                    )
            except BaseException:
                self.lock.release()
                raise
            return False

    def _check_wait(self, cfg: StoreConfig, since: float) -> float:
        """How long the lock's holder seen ``since`` then has not served; StoreLockedError past
        ``writer_wait_s``."""
        waited = time.monotonic() - since
        if waited >= cfg.writer_wait_s:
            raise StoreLockedError(
                f"store {self.path}: the process holding its lock did not serve writers "
                f"within writer_wait_s ({cfg.writer_wait_s} s)"
            ) from None
        return waited

    def serve_call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A joined writer's call, run here (the owner)."""
        if name not in FORWARDED:
            raise StoreReadOnlyError(f"{name!r} is not a call a joined writer may make")
        if name == "put_pipelined":
            return self.run_here(self.store(), name, args, kwargs).result()
        return self.run_here(self.store(), name, args, kwargs)

    def run_here(self, store: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A joined writer's call run by ``store``, which writes: its careful path, or what a
        joined writer's own machinery asks of the owner."""
        if name == "_share_append":
            return self.share_append(store)
        if name == "_flush_to":
            return self.flush_to(store, *args)
        return getattr(self.careful, name)(store, *args, **kwargs)

    def forward(self, store: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A write of the joined ``store``: run by the owner; after the owner ended, by the next."""
        while True:
            self.check_open(store)
            client = self.remote
            if client is None:  # this process writes now
                return self.run_here(store, name, args, kwargs)
            if name == "put_pipelined":
                return RemoteFuture(
                    client.submit(lambda: self.forward(store, "put", args, {**kwargs, "durable": True}))
                )
            try:
                return client.call(name, args, kwargs)
            except WriterGone as gone:
                self.writer_gone(store, client)
                if gone.sent and name not in _REPEATABLE:
                    raise WriterGoneError(
                        f"the process writing for store {self.path} ended during {name}(): "
                        "whether it took effect is unknown"
                    ) from None

    def close_links(self) -> None:
        """Stop serving joined writers, or close the connection to the writing process."""
        server, self.server = self.server, None
        try:
            if server is not None:
                server.close()
        finally:
            if self.remote is not None:
                self.remote.close()

    def forget_in_child(self) -> None:
        """In a child forked after the store opened: the links and the table are the parent's."""
        if self.server is not None:
            self.server.forget_in_child()  # its threads are the parent's; its sockets' copies go
        self.server = None
        self.remote = None
        self.appender = False  # (its lock is the parent's open file description: unusable here)
        if self.append_table is not None:
            try:
                os.close(self.append_table[0])  # (the parent's presence lock stays the parent's)
            except OSError:
                pass
        self.append_table = None
        self.lock.forget_in_child()  # (so that the store can be opened again: it joins)

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

    def share_append(self, store: Any) -> Optional[dict[str, Any]]:
        """A joined writer asks the owner ``store`` to append in its own process: the shared
        table's epoch and the options its records take, or None (``shared_append`` off, not
        possible here, closing)."""
        cfg = store.config
        if not cfg.shared_append or not sharedappend.supported():
            return None
        with self.mutex:
            self.check_open(store)
            if self.sharing_stopped or self.remote is not None or store.writer_pid is None:
                return None  # (writer_pid None: the store's files are read-only here)
            if self.append_table is None:
                table = sharedappend.open_table(self.path, create=True)
                if table is None:
                    return None
                fd, mm = table
                epoch = random.getrandbits(63) | 1
                try:
                    sharedappend.hold_presence(fd)
                    parts = self.parts(store)
                    parts.segments.share()
                    parts.core.share(mm, fd, epoch, True)
                except BaseException:
                    close_map(mm)
                    os.close(fd)
                    raise
                self.append_table = (fd, mm, epoch)
                # a topic's attributes changed: the joined writers read their topics again
                parts.topics.changed = self._topics_changed
            options = {name: getattr(cfg, name) for name in self._APPEND_OPTIONS}
            return {"epoch": self.append_table[2], "options": options}

    def _topics_changed(self) -> None:
        """The owner changed a topic's attributes: the joined writers read their topics again
        (rocketstore.services.topics calls this, under its lock, one change at a time)."""
        table = self.append_table
        if table is not None:
            try:
                sharedappend.topics_changed(table[1])
            except ValueError:
                pass  # closed meanwhile: sharing stopped (its epoch is 0: nobody appends through it)

    def stop_sharing(self, store: Any) -> None:
        """Joined writers append nothing more themselves (the owner ``store`` closing): what
        they appended is adopted first; their next puts come here, then to the next owner."""
        if self.sharing_stopped:
            return  # (close() stops sharing first; its teardown asks again)
        self.sharing_stopped = True
        if self.remote is not None or store.writer_pid is None:  # (None: its files are read-only)
            return
        parts = self.parts(store)
        if self.append_table is not None and parts is not None and parts.core is not None:
            parts.core.unshare()
        # its epoch is 0 (unshare, or this open's invalidate): a writer that still maps it appends
        # nothing, and the store directory holds what a broker's does again
        sharedappend.remove(self.path)

    def stop_serving(self, store: Any) -> None:
        """The owner ``store`` closing: sharing stops, then the joined writers' calls in
        progress end (their next ones go to the next owner)."""
        self.stop_sharing(store)
        if self.server is not None:
            self.server.close()

    def close_append_table(self) -> None:
        table, self.append_table = self.append_table, None
        if table is not None:
            close_map(table[1])
            os.close(table[0])

    def appender_of(self, store: Any) -> Any:
        """The joined ``store``'s own appender (sharedappend.JoinedAppender), or False."""
        appender = self.appender
        if appender is not None:
            return appender
        with self.mutex:
            if self.appender is not None:
                return self.appender
            self.appender = False
            live = self.parts(store).live
            if self.remote is None or live is None or not live.writable or not sharedappend.supported():
                return False
            info = self.forward(store, "_share_append", (), {})
            if not info or self.remote is None:  # off, or this process became the writer
                return False
            config = dataclasses.replace(store.config, **info["options"])
            try:
                self.appender = sharedappend.JoinedAppender(
                    self.path,
                    config,
                    self.impl.store,
                    live.mm,
                    info["epoch"],
                    uniq_prefix(config),
                    weak_method(self._topic_queues, closed_error),
                )
            except (sharedappend.StaleTable, OSError, RocketStoreError) as exc:
                _log.warning(
                    "store %s: joined writer appends through the writing process: %s", self.path, exc
                )
            return self.appender

    def flush_to(self, store: Any, offset: int) -> int:
        """A joined writer's durable put: the owner ``store``'s group commit flushes the
        CommitLog up to ``offset`` (with the durable puts of every process); 0, else 1 (timed
        out) or the flush's errno."""
        self.check_writable(store)
        core = self.parts(store).core
        core.wrote_offset  # noqa: B018 (adopts what the joined writers appended, to flush it)
        return int(core.wait_flushed(int(offset), store.config.sync_flush_timeout_ms))

    def durable(self, store: Any, result: Any, end: int) -> Any:
        """``result`` once the owner's group commit flushed up to ``end`` (FlushTimeoutError
        carrying it when that did not confirm)."""
        rc = self.forward(store, "_flush_to", (end,), {})
        if rc:
            raise flush_timeout(result, rc)
        return result

    def _topic_queues(self, topic: str) -> int:
        queues: int = self.forward(self.store(), "_topic_queues", (topic,), {})
        return queues

    def drop_appender(self) -> None:
        """The owner this store's appender joined is gone or closing: appends go through it (or
        the next one) again."""
        with self.mutex:
            appender, self.appender = self.appender, False
        if appender:
            appender.close()


class Forwarder:
    """A joined writer's call (its role's): ``forwarder(store, ...)`` runs in the writing
    process."""

    __slots__ = ("_joined", "_name")

    def __init__(self, joined: Joined, name: str) -> None:
        self._joined, self._name = joined, name

    def __call__(self, store: Any, *args: Any, **kwargs: Any) -> Any:
        return self._joined.forward(
            store, self._name, _sendable(args), {k: _sendable_value(v) for k, v in kwargs.items()}
        )


class JoinedPuts:
    """A joined writer's puts (its role's): plain, tagged and keyed puts, and those with a plain
    properties dict, also of a plain Message, plain batches and batches of plain messages,
    append in this process under the shared append lock (rocketstore.log.sharedappend); anything
    else, and every put while that is not possible, runs in the writing process. ``putter``:
    the careful path of the puts of the last open (it remembers the user topics checked);
    ``batch``: its BatchConsumeQueues (their topics' puts are the writing process's). ``open``
    turns False when the role retires: every put then takes the general path."""

    __slots__ = ("joined", "user_topics", "putter", "batch", "open")

    def __init__(self, joined: Joined, putter: Any, batch: Any) -> None:
        self.joined, self.putter, self.batch = joined, putter, batch
        self.user_topics: set[str] = putter.user_topics
        self.open = True

    def _batch_topics(self) -> frozenset[str]:
        return self.batch.topics if self.batch is not None else frozenset()

    def put(self, topic: Any, body: Any = None, **kwargs: Any) -> Any:
        """``put``, called without the store (a BOUND call)."""
        joined = self.joined
        appender = joined.appender
        if (
            not kwargs
            and appender
            and self.open
            and topic.__class__ is str
            and topic in self.user_topics
            and body is not None
            and appender.watch[0] == appender.seen  # (not refusing; the topics read since changed)
            and not appender.sync_flush
        ):
            # the hot path, put(topic, body) of a topic already checked: one call into the core
            try:
                return appender.core.put(topic, body, None, -1, 0, 0, 0, 0, 0, None, 0)
            except (sharedappend.StaleTable, sharedappend.NotShareable):
                pass  # the general path below says what to do
        store = joined.store()
        if body is None and self.open and _JOINED_MESSAGE_ARGS.issuperset(kwargs):
            # put(Message(...)): a plain one (put_plain_messages says) appends here too
            done = self._put_message_here(store, topic, kwargs.get("durable"))
            if done is not None:
                return done
        if (
            self.open  # (not a retired role's: a store closed, taking over, or a fork inherited)
            and topic.__class__ is str
            and body is not None
            and kwargs.get("delay_level") is None
            and kwargs.get("deliver_at_ms") is None
            and kwargs.get("delay_ms") is None
            and _JOINED_PUT_ARGS.issuperset(kwargs)
        ):
            appender = joined.appender_of(store)
            # (watch == seen: not refusing, and the topics are the ones the owner's count says)
            if appender and (appender.watch[0] == appender.seen or self._topics_read(appender)):
                self.putter.check_user_topic(topic)  # (remembered for the hot path above)
                tags, keys, properties = kwargs.get("tags"), kwargs.get("keys"), kwargs.get("properties")
                self.putter.check_keyed(topic, keys, properties)  # (a compacted topic needs keys)
                queue_id, flag = check_put_ints(kwargs.get("queue_id", -1), kwargs.get("flag", 0))
                durable = appender.durable(kwargs.get("durable"))
                try:
                    if tags is None and keys is None and properties is None:
                        done = appender.core.put(topic, body, None, queue_id, flag, 0, 0, 0, 0, None, 0)
                    else:  # None: not the plain shape (a DELAY property, ...), the owner's to do
                        done = appender.core.put_keyed(topic, body, tags, keys, queue_id, flag, 0, properties)
                    if done is not None:
                        # durable: flushed by the owner's group commit, with every process's
                        return (
                            joined.durable(store, done, done.commitlog_offset + done.size)
                            if durable
                            else done
                        )
                except sharedappend.StaleTable:
                    joined.drop_appender()  # the owner is closing or gone: through it, or the next
                except sharedappend.NotShareable:
                    pass
        return joined.forward(
            store, "put", _sendable((topic, body)), {k: _sendable_value(v) for k, v in kwargs.items()}
        )

    def _topics_read(self, appender: Any) -> bool:
        """Whether a put may append here: the owner does not refuse puts, and this process's
        topics are the ones the owner's count of topic changes says (the shared append
        table's), or read again now (a topic became compacted, say: every topic's puts are
        checked again). False, the puts being the writing process's, when the owner refuses or
        the topics cannot be read."""
        if appender.refusing:
            return False
        count = appender.topics
        if appender.seen != count << 32:
            topics = self.putter.topics
            if topics is not None:
                try:
                    topics.reload()
                except (StoreConfigError, OSError) as exc:
                    _log.warning("store %s: joined writer cannot read the topics: %s", self.joined.path, exc)
                    return False
            appender.topics_seen(count)
        return True

    def _put_message_here(self, store: Any, message: Any, durable: Optional[bool]) -> Any:
        """A joined writer's ``put(message)`` appended in this process when the message is plain
        (an exact Message of a user topic, a bytes body, tags, keys and a plain properties dict,
        queue id, flag and born timestamp; see CommitLogCore.put_plain_messages); None, having
        written nothing, when it is not or appending here is not possible (the writing process
        puts it)."""
        name = getattr(message, "topic", None)
        if name.__class__ is not str:
            return None
        joined = self.joined
        appender = joined.appender_of(store)
        if not appender or (appender.watch[0] != appender.seen and not self._topics_read(appender)):
            return None
        try:
            self.putter.check_user_topic(name)
        except RocketStoreError:
            return None  # the writing process says what is wrong
        self.putter.check_keyed(message)  # (a compacted topic needs keys: nothing written)
        try:
            done = appender.core.put_plain_messages([message], {name}, 0)
        except sharedappend.StaleTable:
            joined.drop_appender()  # the owner is closing or gone: through it, or the next
            return None
        except sharedappend.NotShareable:
            return None
        if done is None:
            return None
        result = done[0]
        if appender.durable(durable):
            return joined.durable(store, result, result.commitlog_offset + result.size)
        return result

    def put_batch(self, store: Any, topic: Any, bodies: Any = None, **kwargs: Any) -> Any:
        """``put_batch`` (called with the store first): a batch without tags or properties
        appends in this process; anything else runs in the writing process."""
        joined = self.joined
        if (
            self.open
            and topic.__class__ is str
            and bodies is not None
            and kwargs.get("tags") is None
            and not kwargs.get("properties")
            and not kwargs.get("pipelined")
            and _JOINED_BATCH_ARGS.issuperset(kwargs)
            and topic not in self._batch_topics()  # (one inner batch record: the writing process's)
        ):
            appender = joined.appender_of(store)
            if appender and not appender.refusing:
                check_user_topic(topic)
                queue_id, flag = check_put_ints(kwargs.get("queue_id", -1), kwargs.get("flag", 0))
                durable = appender.durable(kwargs.get("durable"))
                try:
                    done = appender.core.put_batch(
                        topic, bodies, kwargs.get("lengths"), None, queue_id, flag, 0, 0, 0
                    )
                    return joined.durable(store, done, done.end_offset) if durable and len(done) else done
                except sharedappend.StaleTable:
                    joined.drop_appender()
                except sharedappend.NotShareable:
                    pass
        return joined.forward(
            store, "put_batch", _sendable((topic, bodies)), {k: _sendable_value(v) for k, v in kwargs.items()}
        )

    def put_messages(self, store: Any, messages: Any, durable: Optional[bool] = None) -> Any:
        """``put_messages`` (called with the store first): a batch of plain messages (tags and
        keys at most, of user topics) appends in this process; anything else runs in the writing
        process."""
        joined = self.joined
        if self.open:
            if type(messages) is not list:
                messages = list(messages)
            appender = joined.appender_of(store)
            batch_topics = self._batch_topics()  # (one inner batch record: the writing process's)
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
                            return joined.durable(store, done, max(r.commitlog_offset + r.size for r in done))
                        return done
                except sharedappend.StaleTable:
                    joined.drop_appender()
                except sharedappend.NotShareable:
                    pass
        return joined.forward(
            store,
            "put_messages",
            (_sendable_value(messages),),
            {} if durable is None else {"durable": durable},
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
