"""A store's directory: what counts as a store (before anything in it is touched), the sizes its
existing files were written with, and the writer's lock.

The lock is the one a Java broker takes (a POSIX record lock on byte 0 of ``<root>/lock``, which
``FileChannel.tryLock`` takes) plus ``flock`` for other processes that use it: each side sees the
other, so a directory is never written by two writers.
"""

from __future__ import annotations

import fcntl
import os
import struct
import sys
import threading
from typing import Optional

from rocketstore.errors import NotAStoreError, StoreLockedError, UnsupportedStoreError
from rocketstore.files._files import open_regular
from rocketstore.files.checkpoint import CHECKPOINT_SIZE

__all__ = ["check_store_dir", "detect_segment_size", "StoreLock"]


# Store directories this process holds the write lock of, by (st_dev, st_ino). POSIX record
# locks belong to the process and vanish when ANY descriptor of the file is closed, so a second
# open in this process must be refused before it opens (and later closes) the lock file.
_LOCKED_DIRS: set[tuple[int, int]] = set()
_LOCKED_DIRS_MUTEX = threading.Lock()


def _after_fork_in_child() -> None:
    global _LOCKED_DIRS_MUTEX
    _LOCKED_DIRS_MUTEX = threading.Lock()  # one held by another thread at the fork stays held


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

#: What a lock holder that serves joining writers writes after ``lock``.
_MARK = b"\nrocketstore %10d\n"
#: Linux's struct flock: l_type, l_whence, l_start, l_len, l_pid (and padding).
_FLOCK = struct.Struct("hhqqi4x")


#: What a store root holds before its first segment exists (a store stopped while it was being
#: created): rocketstore's own entries, each {name: (is a directory, largest size if a file)}.
_EARLY_STORE_ENTRIES = {
    "config": (True, 0),
    "consumequeue": (True, 0),
    "index": (True, 0),
    "lock": (False, 32),  # "lock", and while a sharing writer runs its mark (_MARK, 24 bytes)
    "abort": (False, 0),
    "checkpoint": (False, CHECKPOINT_SIZE),
    # rocketstore.processes.live's page and rocketstore.log.sharedappend's table, of any size: they hold no
    # durable state (a damaged one is made again), so they tell nothing about the directory
    "rocketstore-live": (False, -1),
    "rocketstore-append": (False, -1),
    "rocketstore-groups": (True, 0),  # rocketstore.group's members and offsets
    ".spark-staging": (True, 0),
}  # the Spark sink stages parts before it opens


def is_os_litter(name: str) -> bool:
    """Whether ``name`` is a file the operating system or a file browser leaves in any
    directory: macOS Finder's ``.DS_Store`` and ``._*`` AppleDouble files, NFS's ``.nfs*``
    (a deleted file still open somewhere) and FUSE's ``.fuse_hidden*``. A store ignores them
    (and never touches them); a Java broker would refuse such a ``commitlog/``."""
    return name == ".DS_Store" or name.startswith(("._", ".nfs", ".fuse_hidden"))


def is_rocksdb_queue_store(path: str) -> bool:
    """Whether ``path/consumequeue`` is a RocksDB database (a ``CURRENT`` file naming a
    ``MANIFEST-``): RocketMQ 5.x's ConsumeQueue with ``storeType=defaultRocksDB``."""
    try:
        with open(os.path.join(path, "consumequeue", "CURRENT"), "rb") as f:
            return f.read(64).startswith(b"MANIFEST-")
    except OSError:
        return False


def check_store_dir(path: str, *, read_only: bool) -> None:
    """Refuse a ``path`` that holds no store, before anything in it is touched.

    A store is a directory whose ``commitlog/`` directory holds only segments (20-digit names),
    as a Java broker's does; or, before its first segment, a ``config/`` directory of JSON
    files beside nothing but rocketstore's own files (``lock``, ``abort``, ``checkpoint``, ``rocketstore-live``,
    ``rocketstore-append``,
    ``consumequeue/``, ``index/``, the Spark sink's ``.spark-staging/``). A missing or empty
    directory is where a writable open creates a store. Anything else raises
    :class:`NotAStoreError`; a read-only open of a missing path raises FileNotFoundError.
    """
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        if read_only:
            raise FileNotFoundError(f"no store at {path}") from None
        return
    except NotADirectoryError:
        raise NotAStoreError(f"{path} is not a store: it is not a directory") from None
    names = [n for n in names if not is_os_litter(n)]
    if not names:
        if read_only:
            raise NotAStoreError(
                f"{path} is not a store: it is an empty directory (a writable open creates a store there)"
            )
        return
    commitlog = os.path.join(path, "commitlog")
    if "commitlog" in names:
        try:
            segments = os.listdir(commitlog)
        except NotADirectoryError:
            raise NotAStoreError(f"{path} is not a store: its commitlog is not a directory") from None
        foreign = [n for n in segments if not (len(n) == 20 and n.isdigit()) and not is_os_litter(n)]
        if foreign:
            raise NotAStoreError(
                f"{path} is not a store: {commitlog} holds {sorted(foreign)[0]!r}, "
                "which is not a segment (20-digit name)"
            )
        if not read_only and is_rocksdb_queue_store(path):
            raise UnsupportedStoreError(
                f"{path}: its consumequeue/ is a RocksDB database (RocketMQ 5.x, storeType=defaultRocksDB). "
                "rocketstore reads such a store with read_only=True (its queues rebuilt from the CommitLog), "
                "but does not write it: the broker's RocksDB queues would never list the messages "
                "appended here"
            )
        return
    for name in sorted(names):
        entry = os.path.join(path, name)
        is_dir, largest = _EARLY_STORE_ENTRIES.get(name, (None, 0))
        if (
            is_dir is None
            or os.path.isdir(entry) != is_dir
            or os.path.islink(entry)
            or (not is_dir and (not os.path.isfile(entry) or 0 <= largest < os.path.getsize(entry)))
        ):
            raise NotAStoreError(
                f"{path} is not a store: it has no commitlog/ directory, and {name!r} "
                "is not one of a store's files"
            )
    if "config" not in names and (read_only or names != [".spark-staging"]):
        raise NotAStoreError(f"{path} is not a store: it has no commitlog/ directory")
    if "config" in names:
        foreign = [
            n
            for n in os.listdir(os.path.join(path, "config"))
            if not n.endswith((".json", ".json.bak", ".json.tmp")) and not is_os_litter(n)
        ]
        if foreign:
            raise NotAStoreError(
                f"{path} is not a store: it has no commitlog/ directory, and its config/ "
                f"holds {sorted(foreign)[0]!r}, which is not a store's config file"
            )


def detect_segment_size(directory: str) -> Optional[int]:
    """The size of the 20-digit-named files in ``directory`` when they all have one (None if not)."""
    try:
        names = [n for n in os.listdir(directory) if len(n) == 20 and n.isdigit()]
    except OSError:
        return None
    sizes = set()
    for name in names:
        try:
            sizes.add(os.path.getsize(os.path.join(directory, name)))
        except FileNotFoundError:
            pass  # deleted by a writer's retention since the listing
        except OSError:
            return None
    sizes.discard(0)  # being created by a writer
    return sizes.pop() if len(sizes) == 1 else None


def writer_present(root: str) -> bool:
    """Whether a writer holds the lock of the store at ``root`` now: another process (its POSIX
    lock on byte 0 of ``lock``, which a Java broker takes too), or a store open for writing in
    this one. True when it cannot be told."""
    try:
        st = os.stat(root)
    except OSError:
        return True
    with _LOCKED_DIRS_MUTEX:
        if (st.st_dev, st.st_ino) in _LOCKED_DIRS:
            return True
        try:
            return _query_lock(os.path.join(root, "lock"))[0] != fcntl.F_UNLCK
        except FileNotFoundError:
            return False
        except OSError:
            return True


def _query_lock(path: str) -> tuple[int, int, bytes]:
    """The POSIX lock on byte 0 of the lock file at ``path``: its type (F_UNLCK when nobody holds
    it), its holder's pid, and the file's bytes 4..68 (where a sharing writer marks itself).
    Raises OSError. Call it under _LOCKED_DIRS_MUTEX: closing the file drops the locks this
    process holds on it, so none may be taken meanwhile."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        query = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
        l_type, _, _, _, holder = _FLOCK.unpack(fcntl.fcntl(fd, fcntl.F_GETLK, query))
        return l_type, holder, os.pread(fd, 64, 4)
    finally:
        os.close(fd)


class StoreLock:
    """The exclusive write lock of the store at ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = -1
        self._key: tuple[int, int] = (0, 0)
        self._original: Optional[bytes] = None  # the lock file's bytes before this lock marked it

    def acquire(self, shares: bool = False) -> None:
        """Take the lock, or raise :class:`StoreLockedError` (held by another writer, or already
        by this process: POSIX record locks belong to the process; then its
        ``in_this_process`` is True). ``shares``: this process serves joining writers
        (rocketstore.processes.writers), which the lock file then says after its ``lock``, as
        ``\\nrocketstore <pid>\\n`` (a Java broker writes only ``lock`` and reads nothing).

        The ``flock`` comes first and goes last: rocketstore's writers write the mark while they
        hold it and before (at release: after) the POSIX lock, so a rocketstore that holds the
        POSIX lock has always said that it shares, and a holder whose mark is not its own is
        never one of ours caught between the two (a joining writer waits for one of ours
        instead of calling it a process that does not share)."""
        path = os.path.join(self.path, "lock")
        st = os.stat(self.path)
        key = (st.st_dev, st.st_ino)
        with _LOCKED_DIRS_MUTEX:
            if key in _LOCKED_DIRS:
                exc = StoreLockedError(f"store {self.path} is already open for writing in this process")
                exc.in_this_process = True  # type: ignore[attr-defined]
                raise exc
            fd = open_regular(path, os.O_RDWR | os.O_CREAT, "lock file")
            found = None
            try:
                # flock for other processes using flock; the POSIX lock on byte 0 is the one a
                # Java broker (FileChannel.tryLock) takes, so each side sees the other.
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if shares:
                    found = os.pread(fd, 4096, 0)
                    os.pwrite(fd, b"lock" + _MARK % os.getpid(), 0)
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            except OSError:
                if found is not None:  # a holder that is not ours (a Java broker): as it was
                    try:
                        os.pwrite(fd, found, 0)
                        os.ftruncate(fd, len(found))
                    except OSError:
                        pass  # a stale mark is told apart by the lock's holder
                os.close(fd)
                raise StoreLockedError(
                    f"store {self.path} is locked by another writer (lock file {path})"
                ) from None
            self._original = None
            if shares:
                self._original = b"lock" + (found or b"")[4:]  # what the lock file says when this releases
            else:
                os.pwrite(fd, b"lock", 0)
            self._fd = fd
            self._key = key
            _LOCKED_DIRS.add(key)

    def holder(self) -> Optional[tuple[int, bool]]:
        """Who holds the lock: ``(pid, whether it serves joining writers)``, ``(0, False)`` when
        nobody holds it now (or one of ours is between its ``flock`` and its POSIX lock: see
        :meth:`acquire`), None when it cannot be told (not Linux)."""
        if not sys.platform.startswith("linux"):
            return None
        with _LOCKED_DIRS_MUTEX:
            try:
                l_type, holder, mark = _query_lock(os.path.join(self.path, "lock"))
            except OSError:
                return None
        if l_type == fcntl.F_UNLCK:
            return (0, False)
        return holder, (
            mark.startswith(b"\nrocketstore ") and mark[13 : len(_MARK % 0)].strip() == str(holder).encode()
        )

    def forget_in_child(self) -> None:
        """In a child forked while its parent held this lock: the child's copy of the lock
        file's descriptor is closed, or it would keep the ``flock`` after the parent released
        it (the parent's POSIX lock is not the child's, and stays), and the child may open the
        store again (it joins its parent). Takes no mutex: a thread that held one at the fork
        does not exist in the child."""
        if self._fd >= 0:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = -1
            self._original = None
            _LOCKED_DIRS.discard(self._key)

    def release(self) -> None:
        """Release the lock (closing the file releases both locks); idempotent. The POSIX lock
        goes first and the mark after it, under the ``flock`` (see :meth:`acquire`)."""
        if self._fd >= 0:
            with _LOCKED_DIRS_MUTEX:
                if self._original is not None:  # the file as it was: not one byte changed
                    try:
                        fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, 0)
                        os.pwrite(self._fd, self._original, 0)
                        os.ftruncate(self._fd, len(self._original))
                    except OSError:
                        pass  # a stale mark is told apart by the lock's holder
                    self._original = None
                os.close(self._fd)  # closing releases both locks
                self._fd = -1
                _LOCKED_DIRS.discard(self._key)
