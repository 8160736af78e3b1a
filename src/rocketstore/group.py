"""Consumer groups across processes: a group's members share its queues, RocketMQ's way.

A :class:`GroupConsumer` is a :class:`~rocketstore.consume.Consumer` that is one member of its
group among every process (and thread) that opened one on the same store:

* **Membership** lives in ``<store>/rocketstore-groups/<group>.members``, a 4 KiB file of 63
  slots every member maps shared: a member claims a slot when it starts (under ``flock``), writes
  its heartbeat into it on every poll and while it waits, and clears it on :meth:`close`. A member
  whose process is gone (its pid and start time no longer match) is dead at once; one that has not
  beaten for ``session_timeout`` seconds is dead too (a stuck process). Its queues move to the
  others at their next poll; if it comes back it joins again.
* **Allocation** is RocketMQ's ``AllocateMessageQueueAveragely``: the queues of the subscribed
  topics and of the group's retry topic, sorted, split into contiguous ranges over the live
  members sorted by slot.
* **Offsets** are the group's committed offsets in ``<store>/rocketstore-groups/<group>.offsets.json``
  (``consumerOffset.json``'s layout, written with its ``.bak`` protocol, under the members file's
  ``flock``). A poll first commits what the previous polls handed out (``auto_commit``, on by
  default; at most every ``commit_interval`` seconds, and always before the member gives up
  queues), so a member killed at any moment makes the group deliver again what it had not
  committed (at least once), never skip it. A writable store copies every group's offsets into
  ``config/consumerOffset.json`` every 5 s, when it persists its offsets and at open, so a
  broker, retention and :meth:`MessageStore.committed_offset` see them.
* **Broadcasting** (``broadcasting=True``): every instance gets every message and keeps its own
  offsets (RocketMQ's ``LocalFileOffsetStore``), in ``<group>@<instance>.offsets.json``.

While the queues change hands, two members may both pull a queue for a moment (the old owner has
not polled since): that message is delivered twice, as RocketMQ's rebalance does.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import mmap
import os
import stat
import struct
import threading
import time
import uuid
import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Optional, Union

from rocketstore.consume import Consumer, poll_deadline
from rocketstore.errors import InvalidMessageError, NotAStoreError, StoreClosedError, StoreReadOnlyError
from rocketstore.files.configfiles import GROUPS_DIR, ConsumerOffsetTable
from rocketstore.files.mapped_file import allocate_file
from rocketstore.message import MessageExt

if TYPE_CHECKING:
    from rocketstore.store import MessageStore

__all__ = ["GROUPS_DIR", "GroupConsumer", "allocate_averagely"]

_log = logging.getLogger("rocketstore.store")

_MAGIC = b"RSGROUP\x01"
_SIZE = 4096
_SLOTS = 63
_SLOT = struct.Struct("<IIQqq")  # pid, reserved, token, heartbeat ms, process start (clock ticks)
_SLOT_SIZE = 64
_SLOT_ROW = struct.Struct("<IIQqq32x")  # a whole slot, for reading the table at once
_GENERATION = 8  # u64 at 8: bumped when a member joins or leaves


def allocate_averagely(queues: list[Any], members: list[Any], me: Any) -> list[Any]:
    """RocketMQ's ``AllocateMessageQueueAveragely``: ``me``'s share of ``queues`` (both sorted)."""
    if me not in members or not queues:
        return []
    index, n, count = members.index(me), len(members), len(queues)
    mod = count % n
    if count <= n:
        size = 1
    else:
        size = count // n + 1 if mod > 0 and index < mod else count // n
    start = index * size if mod > 0 and index < mod else index * size + mod
    return [queues[(start + i) % count] for i in range(max(0, min(size, count - start)))]


def _process_start(pid: int) -> int:
    """The process's start time in clock ticks since boot (Linux), or 0 where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return 0


def _alive(pid: int, start: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if not start:
        return True
    # the start time tells a reused pid from the member's process; it is read again at most once
    # a second per process (kill(pid, 0) above sees a death at once)
    key = (pid, start)
    now = time.monotonic()
    if now - _STARTS_VERIFIED.get(key, -1.0) < 1.0:
        return True
    if _process_start(pid) not in (0, start):
        return False
    if len(_STARTS_VERIFIED) > 4096:
        _STARTS_VERIFIED.clear()
    _STARTS_VERIFIED[key] = now
    return True


#: (pid, start time) -> when /proc last confirmed that pid runs the process that started then
_STARTS_VERIFIED: dict[tuple[int, int], float] = {}


def _check_group_name(group: object) -> str:
    if not isinstance(group, str) or not group or "/" in group or group in (".", "..") or "\0" in group:
        raise InvalidMessageError(f"group must be a non-empty name without '/', not {group!r}")
    return group


class _Members:
    """The members file of one group (see the module's docstring)."""

    def __init__(self, path: str) -> None:
        self.path = path
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            self._fd = os.open(path, flags | getattr(os, "O_NONBLOCK", 0), 0o644)
        except OSError as exc:
            raise NotAStoreError(f"{path} cannot be a group's members file: {exc.strerror}") from None
        try:
            with self.locked():
                st = os.fstat(self._fd)
                if not stat.S_ISREG(st.st_mode):
                    raise NotAStoreError(f"{path} is not a rocketstore members file (not a regular file)")
                damage = ""
                if st.st_size not in (0, _SIZE):
                    # Membership is no durable state: a file cut short (a power cut) or of
                    # another size is made again. No member maps a file of another size.
                    damage = f"a {st.st_size}-byte file"
                    os.ftruncate(self._fd, 0)
                allocate_file(self._fd, _SIZE, path)  # sized when new; its blocks allocated
                self.mm = mmap.mmap(self._fd, _SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                if self.mm[:8] != _MAGIC:
                    if self.mm[:] != bytes(_SIZE):
                        damage = damage or "no magic"
                        # a live member that mapped it finds its slot gone and joins again
                        self.mm[:] = bytes(_SIZE)
                    self.mm[:8] = _MAGIC
                if damage:
                    _log.warning("%s was damaged (%s): rebuilt (members join again)", path, damage)
        except BaseException:
            os.close(self._fd)
            raise

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the file's ``flock`` (slots change, offsets are written, under it)."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def generation(self) -> int:
        found: int = struct.unpack_from("<Q", self.mm, _GENERATION)[0]
        return found

    def _bump(self) -> None:
        struct.pack_into("<Q", self.mm, _GENERATION, self.generation() + 1)

    def _slot(self, i: int) -> tuple[int, int, int, int, int]:
        found: tuple[int, int, int, int, int] = _SLOT.unpack_from(self.mm, 64 + i * _SLOT_SIZE)
        return found

    def _dead(self, i: int, now_ms: int, timeout_ms: int) -> bool:
        pid, _, token, beat, start = self._slot(i)
        return token == 0 or now_ms - beat > timeout_ms or not _alive(pid, start)

    def join(self, token: int, now_ms: int, timeout_ms: int) -> int:
        with self.locked():
            for i in range(_SLOTS):
                if self._dead(i, now_ms, timeout_ms):
                    pid = os.getpid()
                    _SLOT.pack_into(self.mm, 64 + i * _SLOT_SIZE, pid, 0, token, now_ms, _process_start(pid))
                    self._bump()
                    return i
        raise InvalidMessageError(f"a group has at most {_SLOTS} live members")

    def beat(self, slot: int, token: int, now_ms: int) -> bool:
        """Write the heartbeat; False when the slot is no longer this member's (it was declared
        dead and the slot given to another)."""
        if self._slot(slot)[2] != token:
            return False
        struct.pack_into("<q", self.mm, 64 + slot * _SLOT_SIZE + 16, now_ms)
        return True

    def leave(self, slot: int, token: int) -> None:
        with self.locked():
            if self._slot(slot)[2] == token:
                self.mm[64 + slot * _SLOT_SIZE : 64 + (slot + 1) * _SLOT_SIZE] = bytes(_SLOT_SIZE)
                self._bump()

    def live(self, now_ms: int, timeout_ms: int) -> list[int]:
        """The slots of the live members, sorted (the table read in one call)."""
        table = _SLOT_ROW.iter_unpack(memoryview(self.mm)[64 : 64 + _SLOTS * _SLOT_SIZE])
        return [
            i
            for i, (pid, _, token, beat, start) in enumerate(table)
            if token and now_ms - beat <= timeout_ms and _alive(pid, start)
        ]

    def close(self) -> None:
        os.close(self._fd)  # the map goes with its last reference


class _MembersInMemory(_Members):
    """A group's members file kept in this process's memory (a read-only store's group): the
    same table in a bytearray, under a thread lock. The members of this process share it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.mm = bytearray(_SIZE)  # type: ignore[assignment]
        self.mm[:8] = _MAGIC
        self._mutex = threading.RLock()

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with self._mutex:
            yield

    def close(self) -> None:
        pass


class _OffsetsInMemory(ConsumerOffsetTable):
    """A group's offsets kept in memory: loaded once from its file if it has one (what the group
    committed in a writable session), never written."""

    def __init__(self, path: str) -> None:
        super().__init__(path, read_only=True)
        self._loaded = False

    def load(self) -> bool:
        with self._lock:
            if self._loaded:
                return self.loaded_from is not None
            self._loaded = True
            return super().load()

    def persist(self, force: bool = False) -> bool:
        self.dirty = False
        return False


#: The groups of read-only stores, by (the store directory's device and inode, file name):
#: shared by the members in this process while a store object of that directory lives (each
#: keeps the groups opened on it in _KEPT).
_IN_MEMORY: weakref.WeakValueDictionary[tuple[int, int, str], _GroupState] = weakref.WeakValueDictionary()
_KEPT: weakref.WeakKeyDictionary[Any, list[_GroupState]] = weakref.WeakKeyDictionary()
_IN_MEMORY_LOCK = threading.Lock()


class _GroupState:
    """What the members of one group share: its members table and its offsets."""

    def __init__(self, members: _Members, offsets: ConsumerOffsetTable) -> None:
        self.members = members
        self.offsets = offsets


def _in_memory(store: MessageStore, name: str) -> _GroupState:
    st = os.stat(store.path)
    key = (st.st_dev, st.st_ino, name)
    directory = os.path.join(store.path, GROUPS_DIR)
    with _IN_MEMORY_LOCK:
        state = _IN_MEMORY.get(key)
        if state is None:
            state = _GroupState(
                _MembersInMemory(os.path.join(directory, name + ".members")),
                _OffsetsInMemory(os.path.join(directory, name + ".offsets.json")),
            )
            _IN_MEMORY[key] = state
        kept = _KEPT.setdefault(store, [])
        if state not in kept:
            kept.append(state)
        return state


def _state_dir(store: MessageStore, state_dir: Union[str, os.PathLike[str], None]) -> Optional[str]:
    """The directory the group's files go in, or None for memory (a read-only store's default)."""
    if state_dir is None:
        return None if store.read_only else os.path.join(store.path, GROUPS_DIR)
    directory = os.path.abspath(os.fspath(state_dir))
    if store.read_only:
        inside = os.path.realpath(directory)
        root = os.path.realpath(store.path)
        if os.path.commonpath([inside, root]) == root:
            raise StoreReadOnlyError(
                f"state_dir {directory} lies in the read-only store {store.path}, which writes nothing: "
                "name a directory outside it (or leave it out: the group is then kept in memory)"
            )
    return directory


class GroupConsumer(Consumer):
    """One member of a consumer group shared by processes (see the module's docstring).

    >>> member = GroupConsumer(store, "billing", "Orders")                 # doctest: +SKIP
    >>> for msg in member:                                                 # doctest: +SKIP
    ...     handle(msg)     # a member killed here makes the group deliver msg again

    ``session_timeout`` (seconds, default 10): how long a member whose process lives but does not
    poll stays a member. ``auto_commit``: a poll commits what earlier polls handed out, at most
    every ``commit_interval`` seconds (default 1; 0: every poll), and always before the member
    gives up queues and at :meth:`close` (each commit is an fsynced file write); a member killed
    meanwhile makes the group deliver again at most that much. Without it call :meth:`commit`
    after processing.

    ``state_dir``: the directory of the group's files (default ``<store>/rocketstore-groups``).
    A read-only store writes nothing under its directory: there the group keeps its membership
    and offsets in memory, shared by its members in this process for as long as a store object
    of that directory lives here, and starting from what the group committed in the store's
    files, unless ``state_dir`` names a directory outside the
    store (processes that name the same one form one group). A store opened for writing (in a
    process of its own it joins the writer) copies the group's offsets into
    ``consumerOffset.json`` only from the default directory.
    """

    def __init__(
        self,
        store: MessageStore,
        group: str,
        subscriptions: Union[str, Iterable[str], Mapping[str, Optional[str]]],
        *,
        broadcasting: bool = False,
        instance: str = "default",
        session_timeout: float = 10.0,
        auto_commit: bool = True,
        commit_interval: float = 1.0,
        retry: bool = True,
        clock: Any = None,
        state_dir: Union[str, os.PathLike[str], None] = None,
    ) -> None:
        super().__init__(store, _check_group_name(group), subscriptions, retry=retry)
        if isinstance(session_timeout, bool) or not isinstance(session_timeout, (int, float)):
            raise TypeError("session_timeout must be a number of seconds")
        if not 0.05 <= session_timeout <= 86400:
            raise ValueError("session_timeout must be between 0.05 and 86400 seconds")
        self.broadcasting = bool(broadcasting)
        self.session_timeout = float(session_timeout)
        self.auto_commit = bool(auto_commit)
        if isinstance(commit_interval, bool) or not isinstance(commit_interval, (int, float)):
            raise TypeError("commit_interval must be a number of seconds")
        if not 0 <= commit_interval <= 3600:
            raise ValueError("commit_interval must be between 0 and 3600 seconds")
        self.commit_interval = float(commit_interval)
        self._committed_at = time.monotonic()
        self._clock = clock or (lambda: int(time.time() * 1000))
        self._lock = threading.RLock()
        name = f"{group}@{_check_group_name(instance)}" if self.broadcasting else group
        directory = _state_dir(store, state_dir)
        self._shared: Optional[_GroupState] = None
        if directory is None:
            self._shared = _in_memory(store, name)
            self._offsets: ConsumerOffsetTable = self._shared.offsets
            self._members = self._shared.members
        else:
            os.makedirs(directory, exist_ok=True)
            self._offsets = ConsumerOffsetTable(os.path.join(directory, name + ".offsets.json"))
            self._members = _Members(os.path.join(directory, name + ".members"))
        self._token = uuid.uuid4().int & 0xFFFFFFFFFFFFFFFF or 1
        self._slot = -1
        self._generation = -1
        self._mine: Optional[set[tuple[str, int]]] = None
        self._handed: dict[tuple[str, int], int] = {}  # positions handed out, not yet committed
        self._closed = False
        self.rebalances = 0
        with self._members.locked():
            self._offsets.load()
        self._join()

    # ---- membership ----

    @property
    def _timeout_ms(self) -> int:
        return int(self.session_timeout * 1000)

    def _join(self) -> None:
        self._slot = self._members.join(self._token, self._clock(), self._timeout_ms)
        self._generation = -1

    def heartbeat(self) -> None:
        """Tell the group this member lives (polls and waits do it)."""
        if not self._members.beat(self._slot, self._token, self._clock()):
            self._join()  # declared dead while it did not beat: join again

    def members(self) -> list[int]:
        """The slots of the live members, sorted."""
        return self._members.live(self._clock(), self._timeout_ms)

    def _assigned(self, keys: list[tuple[str, int]]) -> list[tuple[str, int]]:
        if self._closed:
            raise StoreClosedError("the group consumer is closed")
        self.heartbeat()
        if time.monotonic() - self._committed_at >= self.commit_interval:
            self._commit_handed()
        if self.broadcasting:
            return keys
        live = self.members()
        if self._slot not in live:
            self._join()
            live = self.members()
        mine = set(allocate_averagely(keys, live, self._slot))
        if mine != self._mine:
            self._commit_handed()  # what it handled of the queues it gives up, before they go
            self.rebalances += 1
            with self._members.locked():
                self._offsets.load()  # what the queues' previous owners committed
            for key in list(self._positions):
                if key not in mine:
                    del self._positions[key]  # another member's now: it starts at the commit
            self._mine = mine
        return [key for key in keys if key in mine]

    # ---- offsets ----

    def _committed(self, key: tuple[str, int]) -> int:
        return self._offsets.query(self.group, *key)

    def _poll_once(self, max_msgs: int) -> list[MessageExt]:
        with self._lock:
            found = super()._poll_once(max_msgs)
            if self.auto_commit:
                self._handed.update(self._positions)
            return found

    def _commit_handed(self) -> None:
        self._committed_at = time.monotonic()
        if self.auto_commit and self._handed:
            self._write(self._handed)
            self._handed = {}

    def commit(self) -> None:
        """Commit the positions of everything handed out so far."""
        with self._lock:
            self._write(dict(self._positions))
            self._handed = {}

    def _write(self, positions: dict[tuple[str, int], int]) -> None:
        mine = self._mine
        with self._members.locked():
            self._offsets.load()
            changed = False
            for (topic, queue_id), position in positions.items():
                if mine is not None and not self.broadcasting and (topic, queue_id) not in mine:
                    continue  # given to another member meanwhile: its commit is the one kept
                if self._offsets.query(self.group, topic, queue_id) != position:
                    self._offsets.commit(self.group, topic, queue_id, position)
                    changed = True
            if changed:
                self._offsets.persist()

    # ---- waiting ----

    def poll(self, max_msgs: int = 32, timeout: Optional[float] = 0) -> list[MessageExt]:
        """As :meth:`Consumer.poll`; a wait beats the heartbeat and rebalances as members come
        and go."""
        store = self.store
        deadline = poll_deadline(timeout)
        while True:
            seen = store._live_look(self.topics if deadline is not None else ())  # noqa: SLF001 (consume._WAITS)
            found = self._poll_once(max_msgs)
            if found or deadline is None:
                return found
            generation, live = self._members.generation(), self.members()
            while True:  # sleep in slices, beating, until a put or a member changes the group
                left = deadline - time.monotonic()
                if left <= 0:
                    return found
                slice_deadline = time.monotonic() + min(left, self.session_timeout / 3)
                if store._wait_for_put(seen, slice_deadline):  # noqa: SLF001 (consume._WAITS)
                    break
                self.heartbeat()
                if self._members.generation() != generation or self.members() != live:
                    break  # a member came, left or died: poll again, rebalanced

    async def poll_async(self, max_msgs: int = 32, timeout: Optional[float] = 0) -> list[MessageExt]:
        store = self.store
        deadline = poll_deadline(timeout)
        while True:
            seen = store._live_look(self.topics if deadline is not None else ())  # noqa: SLF001 (consume._WAITS)
            found = self._poll_once(max_msgs)
            if found or deadline is None:
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                return found
            until = time.monotonic() + min(left, self.session_timeout / 3)
            await store._wait_for_put_async(seen, until)  # noqa: SLF001 (consume._WAITS)
            self.heartbeat()

    def close(self) -> None:
        """Commit (with ``auto_commit``) and leave the group: its queues move to the others."""
        with self._lock:
            if self._closed:
                return
            try:
                if self.auto_commit and not self.store.closed:
                    self.commit()
            finally:
                self._closed = True
                self._members.leave(self._slot, self._token)
                self._members.close()

    def __enter__(self) -> GroupConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
