"""Several writer processes appending themselves: the shared append table.

A store opened for writing by several processes (``shared_writers``, rocketstore.processes.writers) has
one **owner**, the process holding the store's lock. The others **join** it. Most calls of a
joined process run in the owner, but its puts (``put``, also of a ``Message``, ``put_messages``
and ``put_batch`` of plain, tagged and keyed messages, also with a plain properties dict) append
to the CommitLog
**in the joined process itself**, as LMDB's writers do, under one cross-process lock. What the
processes share lives in ``<store>/rocketstore-append`` (a file a Java broker ignores; sparse, a
few pages written):

* the lock: a process-shared robust mutex (``pthread_mutex``, about as cheap as a thread's lock
  when nobody else holds it). When its holder dies the next one to lock it gets it, told so
  (``EOWNERDEAD``), so a writer killed inside an append wedges nobody;
* where whole records end, the last store timestamp;
* each topic's next queue offsets, and a committed copy of them. A writer moves the next
  offsets as it appends; to publish, it notes the new end (``publishing``), copies the next
  offsets to the committed ones, then sets the end, before it lets go. A writer killed inside
  leaves ``busy`` set, and the next one repairs (:func:`repair`): one killed after it noted the
  end and before it set it has its publish finished (its records are whole); one killed before
  has the next offsets restored from the committed ones, and the next append goes from the
  published end, over what the dead one half wrote. So the committed offsets count exactly the
  records before the end: no queue offset is given twice and none is skipped;
* ``topics``: a count the owner moves each time a topic's attributes change (a topic becomes
  compacted, say). A joined writer that sees a count it did not read its topics at reads them
  again (``config/topics.json``) and checks each topic's puts again before it appends;
* ``epoch``: the owner's generation. An opening owner sets it to 0 before it recovers the
  store (a joined writer then appends nothing and sends its puts to the owner, which tells it
  when the owner is gone), and to its own once it shares. A clean close sets it to 0 again;
* open-file-description read locks on the file's bytes 1 (the owner's presence, held while it
  shares) and 2 (a joined writer's membership, held while it may append). The kernel drops
  them when their holder dies: joined writers stop appending once byte 1 is free, and a reader
  stops at the published end while either byte is held (``appenders_present``).

Layout (little-endian; ``cext/append.h`` is the compiled side)::

    header, 4096 bytes
      0  u64 magic "RSAPPND1"        8  u64 epoch          16 u32 busy (pid inside)
     20  u32 full (no entry can be added)                   24 i64 end of whole records
     32  i64 last store timestamp   40  u32 entries        48 i64 segment size
     56  u32 refusing (the owner refuses puts: disk full; joined puts then go to it)
     60  u32 topics: moved by the owner when a topic's attributes change
     64  i64 publishing: the end the writer inside publishes, noted before its committed offsets
    128  the append lock: a process-shared robust pthread mutex (at most 128 bytes)
    entry i at 4096 + i * 20480
      0  u32 name length             4  i32 queue count (0: ask the owner; -1: the owner's alone)
      8  name (at most 128 bytes)
   4096  i64 next offset of queue 0 .. 1023
  12288  i64 committed next offset of queue 0 .. 1023

The owner's dispatcher indexes every process's records: the owner looks at the table's end
whenever it dispatches or reads, and adopts the segments the others created. A durable put of
a joined process appends there, then waits in the owner (rocketstore.joined's
``Joined.flush_to``): one group commit, one ``fdatasync``, covers the waiting puts of every
process. Everything else a joined process writes (topics, offsets, POP, timers, delays, messages
of other shapes) still runs in the owner.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import stat
import struct
import sys
from collections.abc import Callable
from typing import Any, Optional

from rocketstore.base._background import weak_method
from rocketstore.errors import StoreConfigError
from rocketstore.files.mapped_file import (
    MappedFile,
    allocate_file,
    allocate_range,
    close_map,
    offset_to_file_name,
)

__all__ = [
    "APPEND_NAME",
    "SIZE",
    "supported",
    "open_table",
    "Mutex",
    "init_mutex",
    "invalidate",
    "remove",
    "StaleTable",
    "NotShareable",
    "JoinedAppender",
    "appenders_present",
    "topics_changed",
]

APPEND_NAME = "rocketstore-append"
SIZE = 64 << 20
HEAD = 4096
ENTRY = 20480
QUEUES = 1024
MAX_ENTRIES = (SIZE - HEAD) // ENTRY
MAGIC = 0x31444E5050415352  # b"RSAPPND1" little-endian

O_MAGIC, O_EPOCH, O_BUSY, O_FULL, O_END, O_LAST_TS = 0, 8, 16, 20, 24, 32
O_ENTRIES, O_SEGMENT, O_REFUSING, O_TOPICS, O_PUBLISHING = 40, 48, 56, 60, 64
O_MUTEX, MUTEX_BYTES = 128, 128
E_NAME_LEN, E_NQUEUES, E_NAME, E_NEXT, E_COMMITTED = 0, 4, 8, 4096, 12288

_log = logging.getLogger("rocketstore.store")

#: Linux's struct flock: l_type, l_whence, l_start, l_len, l_pid (and padding).
_FLOCK = struct.Struct("hhqqi4x")


class StaleTable(Exception):
    """The table's epoch is not the one this writer joined under: it appended nothing (the
    owner is opening, closed or gone; the caller sends the put to the owner instead)."""


class NotShareable(Exception):
    """A topic the table has no entry for and cannot get one (full; too many queues): its puts
    go to the owner."""


def supported() -> bool:
    """Robust process-shared mutexes and open-file-description locks exist (Linux): else joined
    writers send puts to the owner."""
    import fcntl

    return (
        sys.platform.startswith("linux")
        and hasattr(fcntl, "F_OFD_SETLKW")
        and hasattr(_libc(), "pthread_mutexattr_setrobust")
    )


_LIBC: Any = None


def _libc() -> Any:
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def init_mutex(table: mmap.mmap) -> None:
    """Make the table's append lock (a new table: nobody holds or waits on it)."""
    libc = _libc()
    attr = ctypes.create_string_buffer(64)  # pthread_mutexattr_t, generously sized
    cell = (ctypes.c_char * MUTEX_BYTES).from_buffer(table, O_MUTEX)
    try:
        rc = libc.pthread_mutexattr_init(attr)
        rc = rc or libc.pthread_mutexattr_setpshared(attr, 1)  # PTHREAD_PROCESS_SHARED
        rc = rc or libc.pthread_mutexattr_setrobust(attr, 1)  # PTHREAD_MUTEX_ROBUST
        rc = rc or libc.pthread_mutex_init(cell, attr)
        libc.pthread_mutexattr_destroy(attr)
    finally:
        del cell
    if rc:
        raise OSError(rc, "cannot make the shared append lock")


class Mutex:
    """The table's append lock, through libc (the pure twin's way; the compiled core locks it in
    C). Holds an export of the map until :meth:`release`."""

    def __init__(self, table: mmap.mmap) -> None:
        self._cell: Any = (ctypes.c_char * MUTEX_BYTES).from_buffer(table, O_MUTEX)
        libc = _libc()
        self._lock, self._unlock, self._consistent = (
            libc.pthread_mutex_lock,
            libc.pthread_mutex_unlock,
            libc.pthread_mutex_consistent,
        )

    def lock(self) -> None:
        rc = self._lock(self._cell)
        if rc == errno.EOWNERDEAD:  # its holder died: the caller's busy check repairs
            rc = self._consistent(self._cell)
        if rc:
            raise OSError(rc, "cannot lock the shared append table")

    def unlock(self) -> None:
        self._unlock(self._cell)

    def release(self) -> None:
        self._cell = None


#: How often a joined writer looks that the owner still holds its presence lock (ms).
OWNER_LOOK_MS = 20


#: The table's lock bytes: the owner's presence (byte 1), a joined writer's membership (byte 2).
PRESENCE_BYTE, MEMBER_BYTE = 1, 2


def _hold(fd: int, byte: int) -> None:
    import fcntl

    fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _FLOCK.pack(fcntl.F_RDLCK, os.SEEK_SET, byte, 1, 0))


def _read_locked(fd: int, start: int, length: int) -> bool:
    """Whether any open file description holds a read lock on a byte of [start, start+length)."""
    import fcntl

    got = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, start, length, 0))
    return bool(_FLOCK.unpack(got)[0] != fcntl.F_UNLCK)


def hold_presence(fd: int) -> None:
    """The owner's presence lock (a read lock on byte 1), held for as long as it shares: the
    kernel drops it when the owner dies, and joined writers then stop appending."""
    _hold(fd, PRESENCE_BYTE)


def hold_membership(fd: int) -> None:
    """A joined writer's membership lock (a read lock on byte 2), held for as long as it may
    append: the kernel drops it when the writer dies or closes the table."""
    _hold(fd, MEMBER_BYTE)


def owner_present(fd: int) -> bool:
    return _read_locked(fd, PRESENCE_BYTE, 1)


def appenders_present(root: str) -> bool:
    """Whether a process may append to the store at ``root`` through its table now: the owner
    (its presence lock) or a joined writer (its membership lock), which appends on for up to
    OWNER_LOOK_MS after the owner died. Whole records past the published end may then be
    written over (a reader asks; it needs no write access)."""
    if not supported():
        return False
    # (O_NONBLOCK: a FIFO in the table's place must not hang the reader; it is no table)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(os.path.join(root, APPEND_NAME), flags)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and _read_locked(fd, PRESENCE_BYTE, 2)
    except OSError:
        return False
    finally:
        os.close(fd)


def open_table(root: str, create: bool) -> Optional[tuple[int, mmap.mmap]]:
    """The table's descriptor and writable map (``create``: made when missing), or None when
    there is none to join."""
    path = os.path.join(root, APPEND_NAME)
    flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags | (os.O_CREAT if create else 0), 0o644)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.EISDIR, errno.ELOOP):  # a directory or a symlink in its place
            raise StoreConfigError(f"{path} is not a regular file: {exc.strerror}") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StoreConfigError(f"{path} is not a regular file")
        if st.st_size != SIZE and not create:
            os.close(fd)
            return None
        allocate_file(fd, SIZE, path)  # sized (never shrunk: other processes may map it), blocks allocated
        mm = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        if create and struct.unpack_from("<Q", mm, O_MAGIC)[0] != MAGIC:
            init_mutex(mm)  # a new table (no owner ever shared it: nobody uses its lock)
    except BaseException:
        os.close(fd)
        raise
    return fd, mm


def topics_changed(mm: mmap.mmap) -> None:
    """The owner changed a topic's attributes (persisted): joined writers read their topics
    again before their next put appends. Called by the owner alone, one change at a time."""
    count = struct.unpack_from("<I", mm, O_TOPICS)[0]
    struct.pack_into("<I", mm, O_TOPICS, (count + 1) & 0xFFFFFFFF)


def invalidate(root: str) -> None:
    """Epoch 0, under the lock: joined writers stop appending (an owner opening or closing).
    Waits for an append in progress to end.

    When no process holds the table (no owner's presence, no joined writer's membership: the
    processes that used it are gone, or a power cut stopped them all), it is nobody's: it is
    removed without being locked, whatever it holds. A power cut can bring its page back from
    before, with the append lock held by a thread no process runs (no robust-list cleanup ran),
    which would make the lock wait for ever. The next owner that shares makes a new one."""
    if not supported():
        return
    if not appenders_present(root):
        _discard(root)
        return
    table = open_table(root, create=False)
    if table is None:
        return
    fd, mm = table
    try:
        if struct.unpack_from("<Q", mm, O_MAGIC)[0] != MAGIC:
            struct.pack_into("<Q", mm, O_EPOCH, 0)  # never shared: nobody appends through it
            return
        mutex = Mutex(mm)
        mutex.lock()
        try:
            struct.pack_into("<Q", mm, O_EPOCH, 0)
        finally:
            mutex.unlock()
            mutex.release()
    finally:
        mm.close()
        os.close(fd)


def _discard(root: str) -> None:
    """Remove the table nobody holds (see :func:`invalidate`); say so when it was damaged."""
    path = os.path.join(root, APPEND_NAME)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise StoreConfigError(f"{path} is not a regular file")
    damage = ""
    if st.st_size != SIZE:
        damage = f"a {st.st_size}-byte file"
    else:
        try:
            with open(path, "rb") as f:
                if struct.unpack("<Q", f.read(8))[0] != MAGIC:
                    damage = "no magic"
        except (OSError, struct.error):
            damage = "unreadable"
    if damage:
        _log.warning("%s was damaged (%s): removed (it holds no durable state)", path, damage)
    remove(root)


def remove(root: str) -> None:
    """Delete the table (the owner closing, after its epoch became 0); only a regular file,
    which the table always is: a symlink or FIFO in its place is not the store's to remove."""
    path = os.path.join(root, APPEND_NAME)
    try:
        if stat.S_ISREG(os.lstat(path).st_mode):
            os.unlink(path)
    except FileNotFoundError:
        pass


# ---- the pure twin's view of the table (the compiled core reads it in C) ----


def find(mm: mmap.mmap, name: bytes) -> int:
    """The entry named ``name``'s byte offset, or -1."""
    n = min(struct.unpack_from("<I", mm, O_ENTRIES)[0], MAX_ENTRIES)
    for i in range(n):
        at = HEAD + i * ENTRY
        length = struct.unpack_from("<I", mm, at + E_NAME_LEN)[0]
        if length == len(name) and mm[at + E_NAME : at + E_NAME + length] == name:
            return at
    return -1


def add(mm: mmap.mmap, name: bytes, nqueues: int) -> int:
    """A new entry's byte offset (offsets 0), or -1 when full (the table says so from then)."""
    n = int(struct.unpack_from("<I", mm, O_ENTRIES)[0])
    if len(name) > 128 or n >= MAX_ENTRIES:
        struct.pack_into("<I", mm, O_FULL, 1)
        return -1
    at = HEAD + n * ENTRY
    mm[at : at + ENTRY] = bytes(ENTRY)
    mm[at + E_NAME : at + E_NAME + len(name)] = name
    struct.pack_into("<i", mm, at + E_NQUEUES, nqueues)
    struct.pack_into("<I", mm, at + E_NAME_LEN, len(name))
    struct.pack_into("<I", mm, O_ENTRIES, n + 1)
    return at


def repair(mm: mmap.mmap) -> None:
    """After a writer died inside (``busy`` set). It noted the end it publishes (``publishing``)
    before it copied any next offset to its committed one, and set the end after it copied them
    all: with ``publishing`` past the end it died in between, its records up to ``publishing``
    whole and its next offsets counting exactly them, so its publish is finished (every
    committed offset from its next one, then the end). Otherwise every next offset goes back to
    its committed one (it died before it began: the next append writes over its records; or
    after the end: the two agree)."""
    end, publishing = struct.unpack_from("<q", mm, O_END)[0], struct.unpack_from("<q", mm, O_PUBLISHING)[0]
    finish = publishing > end
    n = min(struct.unpack_from("<I", mm, O_ENTRIES)[0], MAX_ENTRIES)
    for i in range(n):
        at = HEAD + i * ENTRY
        nxt, committed = (
            slice(at + E_NEXT, at + E_NEXT + 8 * QUEUES),
            slice(at + E_COMMITTED, at + E_COMMITTED + 8 * QUEUES),
        )
        if finish:
            mm[committed] = mm[nxt]
        else:
            mm[nxt] = mm[committed]
    if finish:
        struct.pack_into("<q", mm, O_END, publishing)
    struct.pack_into("<I", mm, O_BUSY, 0)


class JoinedAppender:
    """A joined process's own append core: it appends under the owner's table, to segments it
    maps itself (made under the shared lock when no process made them yet)."""

    def __init__(
        self,
        root: str,
        config: Any,
        store_module: Any,
        live_map: mmap.mmap,
        epoch: int,
        uniq_prefix: bytes,
        topic_lookup: Callable[[str], int],
    ) -> None:
        from rocketstore.config import SYNC_FLUSH
        from rocketstore.log.commitlog import new_append_core

        table = open_table(root, create=False)
        if table is None:
            raise StaleTable("the store has no shared append table")
        self._fd, self._table = table
        try:
            hold_membership(self._fd)  # readers stop at the published end while it is held
        except BaseException:
            close_map(self._table)
            os.close(self._fd)
            raise
        self._words = memoryview(self._table)[:64].cast("I")  # the header's u32 words
        #: refusing and topics as one word (refusing in the low half), a joined put's one look
        self.watch = memoryview(self._table)[O_REFUSING : O_REFUSING + 8].cast("Q")
        #: ``watch``'s value while the owner takes puts and this process's topics are the ones
        #: the owner's count says (``topics_seen``); -1 until they are read
        self.seen = -1
        self._directory = os.path.join(root, "commitlog")
        self._size = config.commitlog_file_size
        self._preallocate = not getattr(store_module, "POPULATE_WRITE", False)
        self._segments: dict[int, MappedFile] = {}
        #: The owner's flush_disk_type is SYNC_FLUSH: a put that does not say waits for a flush.
        self.sync_flush = config.flush_disk_type == SYNC_FLUSH
        end = struct.unpack_from("<q", self._table, O_END)[0]
        try:
            self.core = new_append_core(
                store_module, config, end, uniq_prefix, topic_lookup, weak_method(self._roll, _closed), False
            )
            self.core.set_live(live_map)
            self.core.share(self._table, self._fd, epoch, False)
        except BaseException:
            self.close()
            raise

    def durable(self, asked: Optional[bool]) -> bool:
        """Whether a put with ``durable=asked`` waits for a flush (None: the owner's
        flush_disk_type says)."""
        return self.sync_flush if asked is None else bool(asked)

    @property
    def refusing(self) -> bool:
        """The owner refuses puts (a full disk): send them there, for its typed error."""
        return bool(self._words[O_REFUSING // 4])

    @property
    def topics(self) -> int:
        """The owner's count of topic attribute changes (see :func:`topics_changed`)."""
        return int(self._words[O_TOPICS // 4])

    def topics_seen(self, count: int) -> None:
        """This process's topics are read again since the owner's count was ``count``."""
        self.seen = count << 32

    def _roll(self, start: int) -> tuple[Any, int]:
        """The core's callback: the segment at ``start`` (under the shared lock: made now unless
        another process made it). Segments this process is done with are let go."""
        mf = self._segments.get(start)
        if mf is None:
            path = os.path.join(self._directory, offset_to_file_name(start))
            mf = MappedFile(path, start, self._size, create="shared", preallocate=self._preallocate)
            if self._preallocate:
                try:  # made sparse by a process whose core populates before it stores: not here
                    allocate_range(mf.fd, 0, self._size)
                except BaseException:
                    mf.close()
                    raise
            self._segments[start] = mf
            flushed = self.core.flushed_offset
            for old in [s for s in self._segments if s + self._size <= min(start, flushed)]:
                self.core.release_segment(old)
                self._segments.pop(old).close()
        return mf.mm, mf.fd

    def close(self) -> None:
        core = getattr(self, "core", None)
        if core is not None:
            core.close()
        for mf in self._segments.values():
            mf.close()
        self._segments.clear()
        for name in ("_words", "watch"):
            view = getattr(self, name, None)
            if view is not None:
                view.release()
        close_map(self._table)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _closed() -> None:
    from rocketstore.errors import StoreClosedError

    raise StoreClosedError("the store is closed")
