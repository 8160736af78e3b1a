"""The store's parts and the careful path of each of its calls (:class:`StoreBase`), under the
facade :class:`rocketstore.store.MessageStore`.

An open (``_open``) has rocketstore.processes.opening map the CommitLog, recover it
(rocketstore.log.recovery), open the queues and the index, and start the services of a writable
store, into an ``OpenedParts``: the store holds that alone (``_opened``), with the objects made
over it at each open: the careful path of the puts (rocketstore.processes.puts' ``Putter``), of the
reads (rocketstore.queues.reads' ``StoreReads``, and its pulls by queue position,
rocketstore.queues.puller's ``Puller``) and the waits for puts (rocketstore.processes.live's
``PutWaits``). The store's put and read methods are theirs (rocketstore.base._delegate), its
transactions and POP calls their services'. rocketstore.roles' ``choose_role`` then picks the role
the facade's calls go to. ``close`` (``_teardown``) stops sharing, closes the links to other
processes, has rocketstore.processes.opening's ``close_parts`` close the parts and releases the
lock. The links to other processes writing the store (rocketstore.processes.writers,
rocketstore.log.sharedappend) are the store's ``Joined`` (rocketstore.joined, ``_joined``): it
takes the lock or joins its holder, and runs a joined store's calls in the writing process; when
that process ended, the store takes over (``_writer_gone``: it opens again, as ``_reopen`` does).
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Optional, Union, cast

from rocketstore import _impl
from rocketstore.base._background import weak_method
from rocketstore.base._checks import check_int, plain_str, timeout_ms, wait_deadline
from rocketstore.base._delegate import delegated
from rocketstore.config import StoreConfig, default_store_path
from rocketstore.consume import GetMessageResult, GetMessageStatus, TagFilter, _check_int
from rocketstore.errors import (
    InvalidMessageError,
    MessageNotFoundError,
    StoreClosedError,
    StoreConfigError,
    StoreReadOnlyError,
)
from rocketstore.files.mapped_file import deleted_files_closed_aside, typed_error
from rocketstore.files.storedir import check_store_dir
from rocketstore.joined import Joined, closed_error, uniq_prefix
from rocketstore.message import MessageExt, validate_topic
from rocketstore.processes.live import Look, PutWaits
from rocketstore.processes.opening import OpenedParts, close_parts, detect_config, open_parts, start_services
from rocketstore.processes.puts import Putter
from rocketstore.processes.writers import WriterClient
from rocketstore.queues.batchcq import set_queue_type
from rocketstore.queues.compaction import compacted_pull
from rocketstore.queues.puller import Puller, check_name
from rocketstore.queues.reads import StoreReads
from rocketstore.roles import Role, choose_role, resuming_calls
from rocketstore.services import report
from rocketstore.services.pop import PopService, ReceivedMessage
from rocketstore.services.retention import (
    UNCHANGED,
    retention_attribute_changes,
    retention_report,
    topic_policy,
)
from rocketstore.services.schedule import DelayProgress, pending_counts
from rocketstore.services.timer import TIMER_TOPIC
from rocketstore.services.timerstats import timer_stats
from rocketstore.services.transaction import TransactionService

_log = logging.getLogger("rocketstore.store")  # (the name users configure)

if TYPE_CHECKING:  # the compiled twins have the same classes (see the .pyi stubs)
    from rocketstore.log._store_py import PutResult

#: A message body: bytes or anything with the buffer protocol.
Body = Union[bytes, bytearray, memoryview]
#: ``keys=``: one string of space-separated keys, or a sequence of keys.
Keys = Union[str, Sequence[str], None]

__all__ = ["StoreBase"]


#: How often a read-only open looks again when what it found changed under it (see __init__).
_READ_ONLY_ATTEMPTS = 5
#: A pull that found nothing yet, worth waiting on (get_message's ``wait``).
_WAITABLE = frozenset(
    (
        GetMessageStatus.NO_MATCHED_MESSAGE,
        GetMessageStatus.OFFSET_OVERFLOW_ONE,
        GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
        GetMessageStatus.NO_MESSAGE_IN_QUEUE,
    )
)


#: Stores open in this process: closed at interpreter exit (see _close_open_stores).
_OPEN_STORES: weakref.WeakSet[StoreBase] = weakref.WeakSet()


@atexit.register
def _close_open_stores() -> None:
    """Close the stores a program left open, at exit, while the store's threads still run:
    once the interpreter finalizes, a daemon thread it stops mid-dispatch keeps the lock that
    a close from ``__del__`` would wait for (a hang at exit, seen once)."""
    for store in list(_OPEN_STORES):
        if not store.closed:
            store._close_quietly()  # noqa: SLF001 (the exit hook of this module's class)


class _ForkedCore:
    """A store's append core in a child forked after the store opened: every use raises (the
    parent still writes the files; two writers appending would overwrite each other)."""

    def __init__(self, parent: int) -> None:
        self._parent = parent

    def __getattr__(self, name: str) -> Any:
        raise StoreClosedError(
            f"this store was opened by process {self._parent} before it forked: open it again in "
            "this process (it then joins the writing process)"
        )


def _forked() -> None:
    """In a child forked from a process with stores open: those are not this process's (see
    StoreBase._forget_in_child)."""
    parent = os.getppid()
    for store in list(_OPEN_STORES):
        store._forget_in_child(parent)  # noqa: SLF001 (the fork handler of this module's class)
    _OPEN_STORES.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


class StoreBase:
    """A store's parts and the careful path of every call: :class:`MessageStore` is its facade,
    whose methods (documented there) call the role (rocketstore.roles) that calls these."""

    config: StoreConfig
    last_shutdown_clean: bool
    _impl: Any
    _codec: Any
    #: the parts of the last open (rocketstore.processes.opening), which a close closes
    _opened: OpenedParts = None  # type: ignore[assignment]  # (until the first open made them)
    #: made at the first transactional call (rocketstore.services.transaction)
    _transaction_service: Optional[TransactionService] = None
    #: the careful path of the puts (rocketstore.processes.puts), over the parts of the last open
    _putter: Putter
    #: the pulls by queue position (rocketstore.queues.puller), over the parts of the last open
    _pulls: Puller
    #: the careful path of the reads (rocketstore.queues.reads), over the parts of the last open
    _reads: StoreReads
    _switching = False  # opening again (_reopen) or taking over from a writing process (_writer_gone)
    _switches = 0  # how often it did
    _takeover_pending = False  # joined, the owner ended, and taking over failed: the next call tries again
    _forked_from: Optional[int] = None  # the parent's pid, in a child forked after the open
    #: What the facade's calls run (rocketstore.roles): chosen at each open, replaced at a close.
    _role: Any

    def __init__(
        self,
        path: Optional[str | os.PathLike[str]] = None,
        *,
        read_only: bool = False,
        implementation: Optional[str] = None,
        progress: Optional[Callable[[str, int, int], None]] = None,
        **options: Any,
    ) -> None:
        self.path = os.path.abspath(os.fspath(path) if path is not None else default_store_path())
        self._read_only_asked = read_only
        self._files_read_only = read_only
        self._closed = True
        #: the topics of the store's BatchConsumeQueues (rocketstore.queues.batchcq): a set lookup
        #: on the reads' careful paths
        self._batch_topics: frozenset[str] = frozenset()
        check_store_dir(self.path, read_only=read_only)
        if progress is not None and not callable(progress):
            raise TypeError("progress must be a callable(stage, done, total)")
        self._progress = progress
        self._impl = _impl.get(implementation)
        self._codec = self._impl.codec
        self._mutex = threading.RLock()
        #: the links to the other processes writing the store (rocketstore.joined)
        self._joined = Joined(
            self,
            self._mutex,
            self._impl,
            StoreBase,
            (StoreBase._check_open, StoreBase._check_writable, StoreBase._parts_of, StoreBase._writer_gone),
        )
        self._user_topics: set[str] = set()  # topics a user's put was checked for (not system topics)
        self._options = options
        self._role = Role("closed", self, StoreBase)
        self._open_store()
        _OPEN_STORES.add(self)

    def _open_store(self) -> None:
        """Open the store: as its writer (taking the lock), as a writer joined to the process
        that holds the lock (rocketstore.processes.writers), or read-only. A bare ``OSError`` on the way
        (a full disk) is raised as the typed error it stands for (``typed_error``)."""
        try:
            self._open_store_as_its_part()
        except OSError as exc:
            typed = typed_error(exc, f"opening store {self.path} failed")
            if typed is exc:
                raise
            raise typed from exc

    def _open_store_as_its_part(self) -> None:
        # A read-only open beside a writer whose retention deletes files (and creates new ones)
        # while it looks may see a moment no store was in (a file sized or gone between two
        # looks): it looks again, a few times, before it reports what it found.
        for attempt in range(_READ_ONLY_ATTEMPTS):
            self.config = self._detect_config()
            if not self._read_only_asked:
                os.makedirs(os.path.join(self.path, "config"), exist_ok=True)
                if self._joined.take_role(self.config):  # joined the process holding the lock
                    self._files_read_only = True
                    self.config = self._detect_config()
                else:
                    self._files_read_only = False
            self._opened = None  # type: ignore[assignment]  # (made by _open)
            try:
                # the files recovery deletes are closed meanwhile, on a thread (all before this returns)
                with deleted_files_closed_aside():
                    self._open()
                break
            except (StoreConfigError, OSError):
                self._teardown(clean=False)
                if attempt + 1 >= _READ_ONLY_ATTEMPTS or not self._files_read_only:
                    raise
            except BaseException:
                self._teardown(clean=False)  # what was opened is closed; the abort file stays
                raise
        self._closed = False
        self._joined.opened()
        self._choose_role()

    def _choose_role(self) -> None:
        """The role (rocketstore.roles.choose_role) of this store, just opened; the role it
        replaces is retired."""
        opened = self._opened
        assert opened is not None  # (a role is chosen after an open that succeeded)
        role = choose_role(
            self,
            opened,
            self._impl,
            self._joined,
            self._user_topics,
            StoreBase,
            self._putter,
            StoreBase._switch_safe,
            self._reads,
        )
        old, self._role = self._role, role
        old.retire()

    def _retire_role(self) -> None:
        """Closing: every call takes the careful path (which says the store is closed)."""
        old, self._role = self._role, Role("closed", self, StoreBase)
        old.retire()

    def _resume_takeover(self) -> Role:
        """A call of this store, whose takeover failed: take over now (or raise why not); the
        role the store has then."""
        # (not pending: another thread did, or the store was closed: the call says so)
        self._switch(lambda: not self._takeover_pending, self._take_over)
        role: Role = self._role
        return role

    def _writer_gone(self, client: WriterClient) -> None:
        """The owner this joined store's ``client`` reached is gone: take the lock, or join the
        next owner. When that fails, the error is raised and the next call tries again."""

        def take_over() -> None:
            _log.info("store %s: the writing process %d ended; taking over", self.path, client.owner_pid)
            self._closed = True
            self._teardown(clean=False)  # the following reader's parts and the client
            self._joined.remote = None
            self._take_over()

        self._switch(lambda: self._joined.remote is not client or self._closed, take_over)

    def _take_over(self) -> None:
        """Open this joined store again, its owner gone; when that fails, every call tries it
        again (``_resume_takeover``)."""
        try:
            self._open_store()
        except BaseException:
            self._takeover_pending = True
            resuming = resuming_calls(self, StoreBase._resume_takeover)
            old, self._role = self._role, Role("taking over", self, StoreBase, resuming)
            old.retire()
            raise
        self._takeover_pending = False

    def _switch(self, done: Callable[[], bool], step: Callable[[], None]) -> None:
        """Open this store again (``step``: a reopen or a takeover) unless ``done()`` (asked under
        the mutex): other threads' calls wait for it (``_check_open``) and may run again after."""
        with self._mutex:
            if done():
                return
            self._switching = True
            self._switches += 1
            try:
                step()
            finally:
                self._switching = False

    def _forget_in_child(self, parent: int) -> None:
        """In a child forked after this store opened: it is closed here without a byte written
        (no final flush, checkpoint or abort-file removal, which the parent still owns) and its
        calls raise StoreClosedError saying why."""
        self._forked_from = parent
        self._closed = True
        forked = _ForkedCore(parent)
        if self._opened is not None:
            self._opened.core = forked
        putter = getattr(self, "_putter", None)
        if putter is not None:
            putter.core = forked  # (its careful puts raise why, as the core's)
        self._retire_role()  # (its compiled calls hold the parent's core)
        self._joined.forget_in_child()

    @property
    def read_only(self) -> bool:
        """Opened with ``read_only=True``: writes raise StoreReadOnlyError."""
        return self._read_only_asked

    @property
    def writer_pid(self) -> Optional[int]:
        """The process that writes for this store: this one's pid when it holds the lock, the
        owner's when this store joined it (rocketstore.processes.writers), None when read-only."""
        remote = self._joined.remote
        if remote is not None:
            return remote.owner_pid
        return None if self._files_read_only else os.getpid()

    # ---- open / close ----

    def _detect_config(self) -> StoreConfig:
        """The options given, and the geometry the store's files were written with."""
        return detect_config(self.path, self._options, self._files_read_only)

    def _open(self) -> None:
        """Open the parts (rocketstore.processes.opening) and take them, also those a failed
        open opened, for ``_teardown`` to close; then start a writable store's services."""
        opened = OpenedParts(self.path, self.config, self._files_read_only)
        try:
            open_parts(
                opened,
                self._impl,
                self._mutex,
                report=self._report,
                uniq_prefix=uniq_prefix(self.config),
                topic_lookup=weak_method(self._topic_queues, closed_error),
            )
        finally:
            self._take_parts(opened)
        if self._files_read_only:
            return
        try:
            start_services(
                opened,
                put_message=weak_method(self._put_message, closed_error),
                pop_pull=weak_method(self._pop_pull, closed_error),
                pop_lookup=weak_method(self._pop_lookup, closed_error),
            )
        finally:
            self._take_parts(opened)

    def _take_parts(self, opened: OpenedParts) -> None:
        """Take the parts ``opened`` holds, and make the objects that work on them: the careful
        paths of the puts (Putter) and of the reads (StoreReads, and its Puller), the waits."""
        self.last_shutdown_clean = opened.last_shutdown_clean
        self._opened = opened
        self._batch_topics = opened.batch.topics if opened.batch is not None else frozenset()
        ref = weakref.ref(self)
        if opened.waits is None:
            opened.waits = PutWaits(opened.live, self.config.wait_spin_us, ref, StoreBase._check_open)
        self._pulls = Puller(
            opened.queues,
            opened.dispatcher,
            opened.guard,
            opened.segments,
            opened.commitlog,
            None if self._files_read_only else opened.core,
            self._codec,
            opened.offsets,
            opened.follower,
            ref,
            StoreBase._is_closed,
            StoreBase._open_pulls,
            (
                functools.partial(compacted_pull, opened.compacted_reads, opened.topics.attributes)
                if opened.compacted_reads is not None
                else None
            ),
        )
        self._reads = StoreReads(
            opened, self._codec, self._pulls, ref, StoreBase._is_closed, StoreBase._open_reads
        )
        self._putter = Putter(
            opened.core,
            self._codec,
            self._user_topics,
            opened.timer,
            opened.schedule,
            StoreBase._check_writable,
            StoreBase._is_closed,
            opened.batch,
            opened.topics,
        )

    def _report(self, stage: str, done: int, total: int) -> None:
        if self._progress is not None:
            self._progress(stage, done, total)

    def _topic_queues(self, topic: str) -> int:
        return self._opened.topics.queues_for_put(topic)

    def _parts_of(self) -> OpenedParts:
        return self._opened

    def close(self) -> None:
        """Flush everything, write the checkpoint, remove the abort file and release the lock.

        Every step runs whatever an earlier one raised: the threads stop, the files are closed
        and the lock is released, and then the first error is raised (the store is closed
        either way; a second ``close()`` does nothing). When a step that makes the data durable
        failed (the final dispatch, the CommitLog's, the queues' or the index's flush, the
        checkpoint), the checkpoint is not advanced and the abort file stays, so the next open
        recovers as after a crash. When only topics.json or consumerOffset.json cannot be
        written (e.g. :class:`DiskFullError`), the data is closed cleanly all the same and that
        file keeps its previous content. A store dropped without ``close()`` is closed alike
        when it is collected."""
        if self._takeover_pending:
            with self._mutex:
                self._takeover_pending = False  # closed for good: no more takeovers
                self._retire_role()
        if getattr(self, "_closed", True):
            return
        # joined writers' own appends first: they now come here; then their calls in progress
        # (their next ones go to the next owner)
        self._joined.stop_serving(self)
        for service in (self._opened.timer, self._opened.schedule, self._opened.pop):
            if service is not None:
                try:
                    service.close()  # before the mutex: a delivery pass in progress may need it,
                    # and the POP snapshot flushes the CommitLog
                except BaseException:
                    pass  # _teardown closes it again and reports the error
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            errors = self._teardown(clean=True)
        if errors:
            typed = typed_error(errors[0], f"closing store {self.path} failed")
            if typed is errors[0]:
                raise typed
            raise typed from errors[0]

    def _teardown(self, clean: bool, keep_link: bool = False) -> list[BaseException]:
        """Stop and close every part that was opened, each whatever the others raised, and
        release the lock; the errors, in order. ``clean``: a close (dispatch the rest, write the
        checkpoint and remove the abort file if all that made the data durable); else a failed
        open (the abort file stays). ``keep_link``: a joined store's connection to its writing
        process stays (a reopen)."""
        errors = []
        self._retire_role()

        def run(step: Callable[[], object]) -> bool:
            try:
                step()
                return True
            except BaseException as exc:
                errors.append(exc)
                return False

        joined = self._joined
        run(functools.partial(joined.stop_sharing, self))
        if joined.appender:
            run(joined.drop_appender)
        if not keep_link:
            run(joined.close_links)
        close_parts(self._opened, clean, run, joined.close_append_table)
        run(joined.lock.release)
        return errors

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # Dropped without close(): close it as close() would. The store's own threads hold it
        # only weakly, so this can run on one of them mid-step (holding a lock close() needs):
        # then a new thread closes it (which keeps it alive until then).
        if getattr(self, "_closed", True):
            return
        if sys.is_finalizing():
            # too late: a daemon thread stopped by the interpreter may hold a lock close() needs.
            # _close_open_stores ran at exit; a store left open here recovers like after a crash.
            return
        if threading.current_thread().name.startswith("rocketstore-"):
            threading.Thread(target=self._close_quietly, name="rocketstore-finalize").start()
        else:
            self._close_quietly()

    def _close_quietly(self) -> None:
        try:
            self.close()
        except Exception as exc:  # a full disk in one line; a defect with its traceback
            _log.error(
                "closing the dropped store %s failed: %s",
                self.path,
                exc,
                exc_info=None if isinstance(exc, OSError) else exc,
            )

    @property
    def closed(self) -> bool:
        if self._switching:  # opening again, or taking over: closed only if that failed
            with self._mutex:
                pass
        return self._closed

    def _switched_since(self, switches: int) -> bool:
        """Whether this store opened again (or took over writing) since it counted ``switches``
        and is open: a call that failed under it may run again."""
        if self._switching:
            with self._mutex:
                pass
        return self._switches != switches and not self._closed

    def _switch_safe(self, call: Callable[[], Any]) -> Any:
        """``call()``, again if this store opened again under it (its parts closed meanwhile)."""
        while True:
            switches = self._switches
            try:
                return call()
            except Exception:  # whatever the closing parts made of it (closed, "damaged", None)
                if not self._switched_since(switches):
                    raise

    def _check_open(self) -> None:
        if self._closed:
            if self._switching:  # taking over from a writing process that ended: wait for it
                with self._mutex:
                    pass
                if not self._closed:
                    return self._check_open()
            if self._takeover_pending and self._forked_from is None:
                self._resume_takeover()  # the owner ended and this store's takeover failed
                return self._check_open()
            if self._forked_from is not None:
                self._opened.core.put  # noqa: B018 (raises why)
            raise StoreClosedError("the store is closed")
        if self._opened.follower is not None and not self._opened.follower.follow():
            self._reopen()

    def _reopen(self) -> None:
        """A writer opened the store since this read-only one did (its recovery may have cut
        what this one mapped): open it again, as if new."""

        def reopen() -> None:
            self._closed = True
            errors = self._teardown(clean=False, keep_link=True)  # a joined store stays joined
            if errors:
                raise errors[0]
            self._opened = None  # type: ignore[assignment]  # (made by _open)
            self.config = self._detect_config()
            self._open()
            self._closed = False
            self._choose_role()

        def done() -> bool:
            follower = self._opened.follower
            return self._closed or follower is None or bool(follower.follow())

        self._switch(done, reopen)

    def _is_closed(self) -> bool:
        return self._closed

    def _check_writable(self) -> None:
        self._check_open()
        if self._files_read_only:
            raise StoreReadOnlyError("the store was opened read-only")

    # ---- topics ----

    def create_topic(
        self, topic: str, queues: Optional[int] = None, *, queue_type: Optional[str] = None
    ) -> None:
        self._check_writable()
        topic = plain_str(validate_topic(topic))
        queues = self.config.default_queues if queues is None else queues
        check_int("queues", queues, 1, 1024)
        queues = int(queues)
        if queue_type is not None:  # (rocketstore.queues.batchcq)
            held = (
                self.queues()
                if queue_type != ("BatchCQ" if topic in self._batch_topics else "SimpleCQ")
                else {}
            )
            self._batch_topics = set_queue_type(
                self._opened.batch, self._opened.dispatcher, self._opened.topics, topic, queue_type, held
            )
        self._opened.topics.set(topic, queues)

    def set_topic_retention(
        self,
        topic: str,
        *,
        retention_ms: Any = UNCHANGED,
        retention_bytes: Any = UNCHANGED,
        delete_when_consumed: Any = UNCHANGED,
        cleanup_policy: Any = UNCHANGED,
    ) -> dict[str, Any]:
        self._check_writable()
        validate_topic(topic)
        changes = retention_attribute_changes(
            retention_ms, retention_bytes, delete_when_consumed, cleanup_policy
        )
        if changes:
            self._opened.topics.update_attributes(topic, changes)
        return self.topic_retention(topic)

    def topic_retention(self, topic: str) -> dict[str, Any]:
        self._check_open()
        validate_topic(topic)
        return topic_policy(self.config, self._opened.topics.attributes(topic), topic).as_dict()

    def retention_report(self) -> dict[str, Any]:
        self._check_open()
        return retention_report(
            self.config,
            self._opened.commitlog,
            [*self._opened.queues, *(self._opened.batch if self._opened.batch is not None else ())],
            self._opened.topics.table,
            self._opened.offsets,
            self._opened.dispatcher,
            dispatch=not self._files_read_only,
        )

    @property
    def topics(self) -> dict[str, int]:
        """{topic: queue count}."""
        return self._opened.topics.counts()

    # ---- puts (rocketstore.processes.puts: the Putter of the last open) ----

    def _putter_of(self) -> Putter:
        return self._putter

    put = delegated(Putter.put, _putter_of, with_store=True)
    put_pipelined = delegated(Putter.put_pipelined, _putter_of, with_store=True)
    put_batch = delegated(Putter.put_batch, _putter_of, with_store=True)
    put_messages = delegated(Putter.put_messages, _putter_of, with_store=True)
    _put_message = delegated(Putter.put_message, _putter_of, with_store=True)

    # ---- delayed delivery, retry and dead-letter queues (§12; rocketstore.services.schedule) ----

    def send_back(
        self,
        group: str,
        message: MessageExt,
        delay_level: int = 0,
        *,
        max_reconsume_times: Optional[int] = None,
    ) -> PutResult:
        self._check_writable()
        return cast(
            "PutResult", self._opened.schedule.send_back(group, message, delay_level, max_reconsume_times)
        )

    def deliver_delayed(self, now: Optional[int] = None) -> int:
        self._check_writable()
        if now is not None:  # a NaN or float would skip due messages without delivering them
            now = check_int("now", now, 0)
        delivered: int = self._opened.schedule.deliver(now)
        return delivered

    def deliver_timers(self, now: Optional[int] = None) -> int:
        self._check_writable()
        if now is not None:  # a NaN or float would skip due messages without delivering them
            now = check_int("now", now, 0)
        delivered: int = self._opened.timer.deliver(now)
        return delivered

    def timer_stats(self) -> dict[str, Any]:
        self._check_open()
        return timer_stats(self.path, self._opened.timer, self._reads.record, self._timer_records)

    def _timer_records(self, start: int) -> Iterator[MessageExt]:
        """The records of the timer queue from queue offset ``start`` on."""
        end = self.max_queue_offset(TIMER_TOPIC, 0)
        for q in range(max(start, self.min_queue_offset(TIMER_TOPIC, 0)), end):
            try:
                yield self.get_by_queue_offset(TIMER_TOPIC, 0, q)
            except MessageNotFoundError:
                continue  # gone (retention) or damaged: nothing to deliver

    def delayed_counts(self) -> dict[int, int]:
        self._check_open()
        if self._opened.schedule is not None:
            offsets = self._opened.schedule.offsets()
        else:
            offsets = DelayProgress.in_store(self.path, read_only=True).as_dict()
        return pending_counts(self.queues(), offsets)

    def update_subscription_group(self, group: str, *, retry_max_times: int) -> dict[str, Any]:
        self._check_writable()
        group_config: dict[str, Any] = self._opened.schedule.update_group(group, retry_max_times)
        return group_config

    # ---- acknowledgement per message (RocketMQ 5.x POP; rocketstore.services.pop) ----

    def _pop_service(self) -> PopService:
        if self._closed or self._opened.follower is not None or self._files_read_only:
            self._check_writable()  # (with none of the three, it has nothing to check)
        assert self._opened.pop is not None
        return self._opened.pop

    receive = delegated(PopService.receive, _pop_service)

    def ack(self, handle: str | ReceivedMessage) -> bool:
        pop = self._opened.pop  # None unless writable; _pop_service() says why not
        if pop is None or self._closed:
            pop = self._pop_service()
        return pop.ack(handle)

    ack_many = delegated(PopService.ack_many, _pop_service)
    change_invisible_time = delegated(PopService.change_invisible_time, _pop_service)
    pop_status = delegated(PopService.status, _pop_service)

    # ---- reads (rocketstore.queues.reads: the StoreReads of the last open) ----

    def _reads_of(self) -> StoreReads:
        return self._reads

    def _open_reads(self) -> StoreReads:
        """This store's reads, once it is open (a following store may open again here)."""
        self._check_open()
        return self._reads

    read = delegated(StoreReads.read, _reads_of)
    get_by_msg_id = delegated(StoreReads.get_by_msg_id, _reads_of)
    iter_messages = delegated(StoreReads.iter_messages, _reads_of)
    scan = delegated(StoreReads.scan, _reads_of)
    records_at = delegated(StoreReads.records_at, _reads_of)
    verify = delegated(StoreReads.verify, _reads_of)
    get_units = delegated(StoreReads.get_units, _reads_of)
    queue_units = delegated(StoreReads.queue_units, _reads_of)
    min_queue_offset = delegated(StoreReads.min_queue_offset, _reads_of)
    max_queue_offset = delegated(StoreReads.max_queue_offset, _reads_of)
    queue_offset_of_time = delegated(StoreReads.queue_offset_of_time, _reads_of)
    queues = delegated(StoreReads.queues, _reads_of)
    compaction_log = delegated(StoreReads.compaction_log, _reads_of)
    compacted = delegated(StoreReads.compacted, _reads_of)
    key_offsets = delegated(StoreReads.key_offsets, _reads_of)
    query_by_key = delegated(StoreReads.query_by_key, _reads_of)
    query_by_unique_key = delegated(StoreReads.query_by_unique_key, _reads_of)
    get_by_queue_offset = delegated(StoreReads.get_by_queue_offset, _reads_of)
    queue_offsets = delegated(StoreReads.queue_offsets, _reads_of)
    _pop_pull = delegated(StoreReads.pop_pull, _reads_of)
    _pop_lookup = delegated(StoreReads.pop_lookup, _reads_of)

    # ---- consuming (§11) and consumer offsets (§10) ----

    def _open_pulls(self) -> Puller:
        """This store's puller, once it is open (a following store may open again here)."""
        self._check_open()
        return self._pulls

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
        if wait is None and offset is not None:
            check_name("group", group)
            tag_filter = TagFilter.parse(tags)
            if tag_filter.match_all:
                quick = self._pulls.quick_pull(topic, queue_id, offset, max_msgs)
            else:
                quick = self._pulls.quick_tagged_pull(topic, queue_id, offset, max_msgs, tag_filter)
            if quick is not None:
                return quick
        looks = self._pull_looks(group, topic, queue_id, offset, max_msgs, tags, wait)
        found, seen, deadline = next(looks)
        while deadline is not None and self._wait_for_put(seen, deadline):
            found, seen, deadline = next(looks)
        return found

    async def get_message_async(
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
        """:meth:`get_message` for asyncio: while it waits the event loop runs on (one thread per
        store sleeps for every waiter)."""
        looks = self._pull_looks(group, topic, queue_id, offset, max_msgs, tags, wait)
        found, seen, deadline = next(looks)
        while deadline is not None and await self._wait_for_put_async(seen, deadline):
            found, seen, deadline = next(looks)
        return found

    def _pull_looks(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: Optional[int],
        max_msgs: int,
        tags: Optional[str],
        wait: Optional[float],
    ) -> Iterator[tuple[GetMessageResult, Look, Optional[float]]]:
        """get_message's pulls, each with what a wait for the next put compares against and the
        wait's deadline, which is None once waiting is not worth it (the caller then returns)."""
        check_name("group", group)
        tag_filter = TagFilter.parse(tags)
        deadline = wait_deadline(wait)
        while True:
            seen = self._live_look((topic,) if deadline is not None else ())
            if topic in self._batch_topics:
                found = self._reads.batch_pull(topic, queue_id, offset, group, max_msgs, tag_filter)
            else:
                found = self._pulls.look(group, topic, queue_id, offset, max_msgs, tag_filter)
            if deadline is None or found.messages or found.status not in _WAITABLE:
                yield found, seen, None
                return
            if found.status == GetMessageStatus.NO_MATCHED_MESSAGE:
                offset = found.next_begin_offset  # scanned past what did not match
            yield found, seen, deadline

    # ---- waiting for puts (rocketstore.processes.live.PutWaits; Consumer and GroupConsumer too) ----

    def _live_look(self, topics: Sequence[str]) -> Look:
        """What a wait for puts of ``topics`` compares against (taken before looking for messages)."""
        self._check_open()
        return self._put_waits().look(topics)

    def _wait_for_put(self, seen: Look, deadline: float) -> bool:
        """Sleep until a put of the topics ``seen`` was taken for, or the deadline (PutWaits.wait)."""
        return self._put_waits().wait(seen, deadline)

    async def _wait_for_put_async(self, seen: Look, deadline: float) -> bool:
        return await self._put_waits().wait_async(seen, deadline)

    def _put_waits(self) -> PutWaits:
        opened = self._opened
        if opened is None or opened.waits is None:  # opening again: wait for it, or say why not
            self._check_open()
            opened = self._opened
        assert opened.waits is not None
        return opened.waits

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self._check_writable()
        check_name("group", group)
        check_name("topic", topic)
        _check_int("queue_id", queue_id, 0)
        _check_int("offset", offset, 0)
        if "@" in group or "@" in topic:
            raise InvalidMessageError("group and topic must not contain '@' (the file's key separator)")
        self._opened.offsets.commit(group, topic, int(queue_id), int(offset))

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int:
        self._check_open()
        check_name("group", group)
        check_name("topic", topic)
        return self._opened.offsets.query(group, topic, queue_id)

    def persist_offsets(self) -> bool:
        self._check_writable()
        self._opened.offsets.import_group_offsets(self.path)
        return self._opened.offsets.persist()

    # ---- retention, durability, state ----

    def clean(self, force: bool = False) -> dict[str, Any]:
        self._check_writable()
        cleaned: dict[str, Any] = self._opened.cleaner.clean(force=force)
        return cleaned

    def flush(self, timeout: Optional[float] = None) -> bool:
        self._check_writable()
        return self._opened.core.flush(timeout_ms(timeout))

    @property
    def min_offset(self) -> int:
        if self._opened.follower is not None:
            return int(self._switch_safe(self._min_offset))
        return self._opened.commitlog.min_offset

    def _min_offset(self) -> int:
        self._check_open()
        return self._opened.commitlog.min_offset

    @property
    def max_offset(self) -> int:
        """The CommitLog offset just past the last record."""
        if self._opened.follower is not None or self._switching or self._closed:
            # (a joined store taking over writing waits for it: its new CommitLog has no core yet)
            return int(self._switch_safe(self._max_offset))
        return self._opened.commitlog.max_offset

    def _max_offset(self) -> int:
        self._check_open()
        return self._opened.commitlog.max_offset

    @property
    def flushed_offset(self) -> int:
        return self._opened.commitlog.flushed_offset

    def stats(self) -> dict[str, Any]:
        self._check_open()
        out = {
            "implementation": self._impl.name,
            "writer": "joined"
            if self._joined.remote is not None
            else ("read-only" if self._files_read_only else "this process"),
            "writer_pid": self.writer_pid,
            "joined_writers": self._joined.server.connections if self._joined.server is not None else 0,
            "segments": len(self._opened.segments.files),
            "segment_size": self.config.commitlog_file_size,
            "min_offset": self.min_offset,
            "max_offset": self.max_offset,
        }
        if not self._files_read_only:
            out.update(self._opened.core.stats())
            out.update(self._opened.cleaner.stats())
            if self._opened.pop is not None:
                out.update(self._opened.pop.stats())
        return report.describe(
            path=self.path,
            counters=out,
            last_shutdown_clean=self.last_shutdown_clean,
            queues=self.queues(),
            topics=self.topics,
            offsets=self._opened.offsets,
            delayed=self.delayed_counts(),
            retention=self.retention_report(),
        )

    # ---- transactions (rocketstore.services.transaction) ----

    def _transactions(self) -> TransactionService:
        self._check_writable()
        if self._joined.remote is not None:
            raise StoreReadOnlyError(
                f"this store is joined to the writing process {self.writer_pid}: "
                "check_transactions runs there (prepare, commit and rollback work here)"
            )
        service = self._transaction_service
        if service is None or service.parts is not self._opened.parts:
            service = self._transaction_service = TransactionService(
                self._opened.parts, clock=self.config.clock
            )
        return service

    prepare_transaction = delegated(TransactionService.prepare, _transactions)
    commit_transaction = delegated(TransactionService.commit, _transactions)
    rollback_transaction = delegated(TransactionService.rollback, _transactions)
    open_transactions = delegated(TransactionService.open_transactions, _transactions)
    check_transactions = delegated(TransactionService.check, _transactions)

    def __repr__(self) -> str:
        state = (
            "closed"
            if self._closed
            else (
                "joined"
                if self._joined.remote is not None
                else ("read-only" if self._files_read_only else "open")
            )
        )
        return f"<MessageStore {self.path!r} {state} impl={self._impl.name}>"
