"""The live page: how a store's processes see the writer's progress, and how they wait for it.

A writable store keeps ``<store>/rocketstore-live``, a 4 KiB file every process that opens the
store maps shared (a Java broker ignores it). The writer publishes where its whole records end
after every put; a read-only store in another process reads that on every call, maps what is
new and dispatches it into memory (:class:`Follower`), so it sees every record the writer has
made **visible**: written into the CommitLog and returned to the putter. Visible is not durable:
a record the writer has not flushed yet is seen by readers, and lost with it in a power cut
(unless it was a durable put, which returns only after the flush).

The page also carries a sequence word bumped after every put, and one per topic slot; a waiting
consumer sleeps on its topics' words (a futex on Linux: no CPU while it waits, woken by a put of
its topics in any process; elsewhere it polls the word every millisecond). Layout (little-endian):

======  ====  ========================================================================
offset  type  field
======  ====  ========================================================================
0       8s    magic ``RSLIVE\\0\\1``
8       u32   sequence: bumped after every put and every change below
12      u32   waiters counted in (compiled waiters, atomically)
16      i64   wrote: the end of the writer's whole records
24      u64   epoch: bumped by a writable open after a crash, or whose recovery cut records
              the page said were there (a reader then opens the store again)
32      u64   changes: bumped when retention deleted segments
40      u32   always-wake: set by a waiter that cannot count itself in (the pure twin)
64+8i   u32   topic slot i (0..63, :func:`topic_slot`): bumped by every put of its topics
68+8i   u32   waiters of slot i
1024    q     the writer's geometry, so that a process opening a store with no files yet reads
              them alike: CommitLog segment size (u64), ConsumeQueue units per file, index
              slots, index entries, largest message (u32 each)
======  ====  ========================================================================

The only write a read-only store makes is to this page's waiter fields, and only while one of
its calls waits while a writer holds the store (which reads them to wake it); with no writer,
or without write access to the file, it waits by polling every millisecond and writes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import math
import mmap
import os
import random
import stat
import struct
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any, Optional

from rocketstore.errors import NotAStoreError, StoreClosedError, StoreConfigError
from rocketstore.files.mapped_file import MappedFile, allocate_file
from rocketstore.files.storedir import writer_present

__all__ = ["LIVE_NAME", "LivePage", "Follower", "AsyncWaker", "PutWaits", "Look", "topic_slot"]

LIVE_NAME = "rocketstore-live"
LIVE_SIZE = 4096
_MAGIC = b"RSLIVE\x00\x01"
_STATE = struct.Struct("<qQQ")  # wrote, epoch, changes at offset 16
_SEQ, _WROTE, _CHANGES = 8, 16, 32
SLOTS, _SLOT0 = 64, 64  # per-topic words (cext/live.h)
_GEOMETRY_AT = 1024
_GEOMETRY = struct.Struct("<QIIII")
#: The options :func:`read_geometry` gives, in _GEOMETRY's order.
GEOMETRY_OPTIONS = (
    "commitlog_file_size",
    "consume_queue_units",
    "index_slots",
    "index_count",
    "max_message_size",
)


_U64 = (1 << 64) - 1
_MOST_WAITERS = 1 << 22  # (Linux's most threads)
_log = logging.getLogger("rocketstore.store")


def _fresh_epoch() -> int:
    return random.getrandbits(63) | 1


def _plausible(mm: mmap.mmap) -> bool:
    """Whether a page with the magic has fields a writer could have written: the end of records
    not negative, and the counted waiters no more than processes can be (a torn page's random
    words are neither, almost always)."""
    wrote: int = _STATE.unpack_from(mm, _WROTE)[0]
    waiters: list[int] = [struct.unpack_from("<I", mm, 12)[0]]
    waiters += [struct.unpack_from("<I", mm, _SLOT0 + 8 * i + 4)[0] for i in range(SLOTS)]
    return wrote >= 0 and max(waiters) < _MOST_WAITERS


def read_geometry(root: str) -> dict[str, int]:
    """The geometry the store's writer published in its live page ({} when there is none)."""
    try:
        with open(os.path.join(root, LIVE_NAME), "rb") as f:
            head = f.read(_GEOMETRY_AT + _GEOMETRY.size)
    except OSError:
        return {}
    if len(head) < _GEOMETRY_AT + _GEOMETRY.size or head[:8] != _MAGIC:
        return {}
    values = _GEOMETRY.unpack_from(head, _GEOMETRY_AT)
    if not values[0]:
        return {}
    return dict(zip(GEOMETRY_OPTIONS, values))


def topic_slot(topic: str) -> int:
    """The page slot whose word a put of ``topic`` moves (both twins compute it alike)."""
    return (zlib.crc32(topic.encode("utf-8")) & 0x7FFFFFFF) % SLOTS


#: What a waiter saw before it looked for messages: (page sequence, slot word offsets, their values).
Look = tuple[int, tuple[int, ...], tuple[int, ...]]


class LivePage:
    """The map of ``<store>/rocketstore-live``; ``store`` is the implementation's store module
    (its ``live_wait`` / ``live_wake`` / ``live_seq``)."""

    def __init__(
        self, path: str, fd: int, mm: mmap.mmap, store: Any, writable: bool, owner: bool = False
    ) -> None:
        self.path = path
        self._fd = fd
        self.mm = mm
        self._store = store
        self.writable = writable
        #: The writer's own page (:meth:`create`); a reader's is :meth:`attach`'s.
        self.owner = owner
        #: The sequence when a look last found a writer holding the store (None: none found).
        self._writer_seen_at: Optional[int] = None

    def _counts_in(self) -> bool:
        """Whether a waiter may count itself in (a write to the page): on the writer's own
        page, and on a reader's while a writer holds the store, which then reads the counts
        to wake it. With no writer there is nothing to wake a waiter but a writer that opens
        and puts (which moves the sequence), so a reader polls and writes nothing: a read-only
        store never changes a byte, nor an mtime, of a store nobody writes. The look at the
        store's lock (an open and a close of its file) is skipped while the sequence moved
        since the last look found a writer: it has put since, so it is there."""
        if not self.writable:
            return False
        if self.owner:
            return True
        seq = self.seq()
        if self._writer_seen_at is not None and seq != self._writer_seen_at:
            self._writer_seen_at = seq
            return True
        present = writer_present(os.path.dirname(self.path))
        self._writer_seen_at = seq if present else None
        return present

    @classmethod
    def create(
        cls, root: str, store: Any, end: int, crashed: bool, geometry: tuple[int, ...] = (0, 0, 0, 0, 0)
    ) -> LivePage:
        """The writer's page, created if missing, saying that whole records end at ``end`` (where
        recovery found them to end). The epoch moves when the store was not closed cleanly
        (``crashed``: recovery may have cut records a reader mapped, written but never
        published) or when ``end`` is below what the page said (readers then open again); a clean
        reopen changes no byte of it. A damaged page (another size, no magic, fields out of range)
        is made again, with an epoch no reader holds, and logged: the caller holds the store's
        lock, and the page holds no durable state."""
        path = os.path.join(root, LIVE_NAME)
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags | getattr(os, "O_NONBLOCK", 0), 0o644)
        except OSError as exc:
            raise NotAStoreError(f"{path} cannot be the store's live page: {exc.strerror}") from None
        damage = ""
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise NotAStoreError(f"{path} is not rocketstore's live page (not a regular file)")
            if st.st_size not in (0, LIVE_SIZE):
                # The page is never durable state, and the caller holds the store's lock: no
                # writer maps it, and no reader maps a file of another size. (A shorter file is
                # a power cut while it was made; any other size, not this store's page.)
                damage = f"a {st.st_size}-byte file"
                os.ftruncate(fd, 0)
            # new (or a crash while it was being created, or damaged): sized, its blocks allocated
            allocate_file(fd, LIVE_SIZE, path)
            mm = mmap.mmap(fd, LIVE_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        page = cls(path, fd, mm, store, True, owner=True)
        if not damage and mm[:8] != _MAGIC and mm[:] != bytes(LIVE_SIZE):
            damage = "no magic"
        if not damage and mm[:8] == _MAGIC and not _plausible(mm):
            damage = "fields out of range"
        if damage:
            _log.warning("%s was damaged (%s): rebuilt (it holds no durable state)", path, damage)
            mm[:] = bytes(LIVE_SIZE)
            # a reader that mapped the damaged page must open again: an epoch it cannot hold
            _STATE.pack_into(mm, _WROTE, end, _fresh_epoch(), 0)
            mm[:8] = _MAGIC
            store.live_wake(mm)
        elif mm[:8] != _MAGIC:
            mm[:] = bytes(LIVE_SIZE)
            _STATE.pack_into(mm, _WROTE, end, 1, 0)
            mm[:8] = _MAGIC
        else:
            wrote, epoch, changes = _STATE.unpack_from(mm, _WROTE)
            if wrote != end or crashed:
                moved = (((epoch + 1) & _U64) or 1) if wrote > end or crashed else epoch
                _STATE.pack_into(mm, _WROTE, end, moved, changes)
                store.live_wake(mm)
        if _GEOMETRY.unpack_from(mm, _GEOMETRY_AT) != tuple(geometry):
            _GEOMETRY.pack_into(mm, _GEOMETRY_AT, *geometry)
        return page

    @classmethod
    def attach(cls, root: str, store: Any) -> Optional[LivePage]:
        """A reader's view of the page, or None when the store has none (a store a Java broker
        or an older rocketstore wrote: the reader then sees the store as it was at open)."""
        path = os.path.join(root, LIVE_NAME)
        flags = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
        writable = True
        try:
            fd = os.open(path, os.O_RDWR | flags)
        except PermissionError:
            writable = False
            try:
                fd = os.open(path, os.O_RDONLY | flags)
            except OSError:
                return None
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size != LIVE_SIZE:
                os.close(fd)
                return None
            prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
            mm = mmap.mmap(fd, LIVE_SIZE, mmap.MAP_SHARED, prot)
        except BaseException:
            os.close(fd)
            raise
        if mm[:8] != _MAGIC:
            mm.close()
            os.close(fd)
            return None
        return cls(path, fd, mm, store, writable)

    def state(self) -> tuple[int, int, int]:
        """(wrote, epoch, changes)."""
        found: tuple[int, int, int] = _STATE.unpack_from(self.mm, _WROTE)
        return found

    def seq(self) -> int:
        found: int = struct.unpack_from("<I", self.mm, _SEQ)[0]
        return found

    def look(self, slots: tuple[int, ...]) -> Look:
        """The sequence words a waiter for these slots compares against later."""
        return self.look_words(tuple(_SLOT0 + 8 * slot for slot in slots))

    def look_words(self, words: tuple[int, ...]) -> Look:
        """:meth:`look` by word offsets."""
        mm = self.mm
        return self.seq(), words, tuple(struct.unpack_from("<I", mm, at)[0] for at in words)

    def wait_look(self, seen: Look, timeout: Optional[float], spin_us: int = 0) -> bool:
        """Sleep until a put of a topic of the slots ``seen`` was taken for (or any put, with no
        slots) or ``timeout`` seconds pass; True if one came. ``spin_us``: look at the words
        without sleeping up to that long first (``StoreConfig.wait_spin_us``)."""
        page_seen, words, values = seen
        if not words or not self._counts_in():
            return self.wait(page_seen, timeout, spin_us)
        ms = -1 if timeout is None else max(0, int(timeout * 1000 + 0.999))
        changed: bool = self._store.live_wait_words(self.mm, words, values, page_seen, ms, spin_us)
        return changed

    def wait(self, seen: int, timeout: Optional[float], spin_us: int = 0) -> bool:
        """Sleep until the sequence is no longer ``seen`` or ``timeout`` seconds pass (None: no
        limit); True if it changed. ``spin_us``: as for :meth:`wait_look`."""
        if not self._counts_in():
            deadline = None if timeout is None else time.monotonic() + timeout
            spin_until = time.monotonic() + spin_us / 1e6
            while self.seq() == seen:
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    return False
                if now >= spin_until:
                    time.sleep(0.001)
            return True
        ms = -1 if timeout is None else max(0, int(timeout * 1000 + 0.999))
        changed: bool = self._store.live_wait(self.mm, seen, ms, spin_us)
        return changed

    def changed(self) -> None:
        """The writer changed the segment set (retention deleted some): readers look again."""
        changes = self.state()[2]
        struct.pack_into("<Q", self.mm, _CHANGES, changes + 1)  # only the writer writes it
        self._store.live_wake(self.mm)

    def close(self) -> None:
        """Close the file; the map goes when the last reference does, so a thread still inside a
        call of the closed store reads a valid page (and then finds the store closed)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class Follower:
    """Keeps a read-only store's CommitLog current with the writer's published end.

    :meth:`follow` costs one read of the page when nothing changed. It returns False when the
    store must be opened again: a writer opened the store since (its recovery may have cut
    records this reader mapped).
    """

    def __init__(self, page: LivePage, commitlog: Any, on_deleted: Callable[[], None]) -> None:
        self.page = page
        self.commitlog = commitlog
        self.on_deleted = on_deleted
        wrote, self.epoch, self.changes = page.state()
        self.wrote = commitlog.end

    def settle(self, end: int, writer_present: bool) -> None:
        """The open recovered the CommitLog to ``end``. What the page says past it is followed
        only while a writer holds the store: a dead writer's page is never flushed, so after a
        power cut it can say records end past pages that never reached the disk, and the records
        there are not the ones the next writer's recovery keeps. A writer that opens later moves
        the epoch (:meth:`follow` then asks for the store to be opened again)."""
        self.wrote = end
        if not writer_present:
            wrote, epoch, changes = self.page.state()
            if epoch == self.epoch:
                self.wrote, self.changes = wrote, changes

    def follow(self) -> bool:
        wrote, epoch, changes = self.page.state()
        if wrote == self.wrote and changes == self.changes and epoch == self.epoch:
            return True
        commitlog = self.commitlog
        if epoch != self.epoch:
            return False
        # wrote < end: this reader's own scan at open found records the writer had not published
        # yet (or will never: it was killed before); only an epoch says records were cut. (While
        # joined writers append, the scan stops at the published end: MessageStore._published_end.)
        deleted = 0
        if changes != self.changes:
            self.changes = changes
            deleted = self._forget_deleted()
        if wrote > commitlog.end or deleted:
            self._extend(wrote)
        if deleted:
            self.on_deleted()
        self.wrote = wrote
        return True

    def _forget_deleted(self) -> int:
        """Drop the leading segments retention deleted (their maps close once no view is left:
        a read of one raises MessageNotFoundError)."""
        files = self.commitlog.segments.files
        gone = 0
        while gone < len(files) and not os.path.exists(files[gone].path):
            gone += 1
        for mf in files[:gone]:
            mf.destroyed = True
            mf.close()
        del files[:gone]
        return gone

    def _extend(self, wrote: int) -> None:
        """Map the segments up to ``wrote`` and move the readable end there."""
        commitlog = self.commitlog
        segments = commitlog.segments
        files = segments.files
        end = commitlog.end
        if not files:
            segments.load()  # the writer made the first segments since
        while files and files[-1].end_offset < wrote:
            start = files[-1].end_offset
            try:
                mf = MappedFile(
                    os.path.join(segments.directory, "%020d" % start),
                    start,
                    segments.file_size,
                    read_only=True,
                )
            except (OSError, StoreConfigError):
                break  # deleted meanwhile, or not sized yet: what is mapped is what is readable
            files.append(mf)
        if not files:
            return
        reach = min(wrote, files[-1].end_offset)
        for mf in reversed(files):
            if mf.end_offset <= end:
                break
            mf.wrote_position = max(0, min(mf.file_size, reach - mf.file_from_offset))
        commitlog.end = max(end, reach)


class AsyncWaker:
    """Wakes the asyncio waiters of one store when a put of their topics comes: one thread per
    store sleeps on the page's words for all of them, and on an event while nobody waits."""

    def __init__(self, page: LivePage) -> None:
        self._page = page
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None], Look]] = []
        self._someone = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._closed = False

    async def changed(self, seen: Look, timeout: Optional[float]) -> None:
        """Return once a put of the topics ``seen`` was taken for came (any put, for a look at no
        topic), or after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._closed:
                return
            self._waiters.append((loop, fut, seen))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rocketstore-async-waker", daemon=True)
                self._thread.start()
        self._someone.set()
        try:
            await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            pass
        finally:
            with self._lock:
                self._waiters = [w for w in self._waiters if w[1] is not fut]

    def _run(self) -> None:
        page = self._page
        while not self._closed:
            with self._lock:
                waiting = list(self._waiters)
            words = sorted({at for _, _, look in waiting for at in look[1]})  # at most the 64 slots
            now = page.look_words(tuple(words))  # taken before the waiters are compared with it
            current = dict(zip(now[1], now[2]))
            due: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None], Look]] = []
            rest: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None], Look]] = []
            for w in waiting:
                page_seen, ats, values = w[2]
                moved = (
                    any(current.get(at, v) != v for at, v in zip(ats, values)) if ats else now[0] != page_seen
                )
                (due if moved else rest).append(w)
            with self._lock:
                self._waiters = [w for w in self._waiters if w not in due]
                idle = not self._waiters
                if idle:
                    self._someone.clear()
            for loop, fut, _ in due:
                loop.call_soon_threadsafe(_resolve, fut)
            if idle:
                self._someone.wait()
            elif due:
                continue  # look again at once: who is left waits on what it saw
            elif any(not look[1] for _, _, look in rest) or not words:
                page.wait(now[0], 0.5)  # a waiter for any put; sliced, so close() is noticed
            else:
                page.wait_look(now, 0.5)

    def close(self) -> None:
        """Stop the thread (within half a second; it holds no file) and wake every waiter (its
        store is closed: the next look says so)."""
        with self._lock:
            self._closed = True
            waiting, self._waiters = self._waiters, []
        self._someone.set()
        for loop, fut, _ in waiting:
            try:
                loop.call_soon_threadsafe(_resolve, fut)
            except RuntimeError:  # that event loop is closed
                pass


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class PutWaits:
    """The waits for puts of one open of a store (get_message's ``wait``, the consumers' polls):
    what a wait compares against (:meth:`look`, taken before looking for messages) and the
    sleep until a put of the topics looked at (:meth:`wait`, :meth:`wait_async`). ``live``: the
    store's live page (None: no rocketstore writer keeps one, nothing wakes a wait);
    ``spin_us``: how long a wait spins before it sleeps; ``check_open(store)`` raises unless the
    store (held weakly through ``store_ref``) is open, and opens a following store again when a
    writer opened it since. A wait notices its open is over (:meth:`close`: the store closed, or
    opened again) within a second."""

    __slots__ = ("live", "spin_us", "_store", "_check_open", "_lock", "_waker", "_closed")

    def __init__(
        self,
        live: Optional[LivePage],
        spin_us: int,
        store_ref: Callable[[], Any],
        check_open: Callable[[Any], None],
    ) -> None:
        self.live, self.spin_us = live, spin_us
        self._store, self._check_open = store_ref, check_open
        self._lock = threading.Lock()
        self._waker: Optional[AsyncWaker] = None
        self._closed = False

    def check_open(self) -> None:
        """StoreClosedError unless the store is open (a following store may open again here)."""
        store = self._store()
        if store is None:
            raise StoreClosedError("the store is closed")
        self._check_open(store)

    def look(self, topics: Sequence[str]) -> Look:
        """What a wait for puts of ``topics`` compares against (the store checked open first)."""
        live = self.live
        if live is None:
            return (0, (), ())
        return live.look(tuple(sorted({topic_slot(t) for t in topics})))

    def wait(self, seen: Look, deadline: float) -> bool:
        """Sleep until a put of the topics ``seen`` was taken for, or the deadline; False at the
        deadline. It sleeps in slices of a second, so a close of the store is noticed (it raises
        StoreClosedError). With ``spin_us`` it spins first, once, before its first slice."""
        live = self.live
        spin_us = self.spin_us
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.check_open()
            if live is None:  # a store no rocketstore writer keeps a live page for: nothing comes
                time.sleep(min(left, 1.0))
                continue
            try:
                if live.wait_look(seen, min(left, 1.0), spin_us):
                    return True
                spin_us = 0
            except ValueError:  # its map closed under it: the store closed, or opened again
                self.check_open()
                return True  # opened again (a writer's recovery, a takeover): look again
            if self._closed:
                return True

    async def wait_async(self, seen: Look, deadline: float) -> bool:
        """:meth:`wait` for asyncio: one thread (an :class:`AsyncWaker`) sleeps for every waiter."""
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        live = self.live
        if live is None:  # a store no rocketstore writer keeps a live page for: nothing comes
            await asyncio.sleep(min(left, 1.0))
            self.check_open()
            return not math.isinf(left) and left > 1.0  # look again (and find nothing)
        with self._lock:
            if self._waker is None:
                self._waker = AsyncWaker(live)
            waker = self._waker
        await waker.changed(seen, None if math.isinf(left) else left)
        return True

    def close(self) -> None:
        """This open is over: the waits in progress return (to look again, or to say the store is
        closed), the asyncio waiters' thread stops."""
        self._closed = True
        with self._lock:
            waker, self._waker = self._waker, None
        if waker is not None:
            waker.close()
