"""Segment files: one mmap per fixed-size file, named by its 20-digit start offset (spec §1.5).

:class:`MappedFile` owns a file and its map; :class:`MappedFileQueue` owns a directory of them,
contiguous by start offset, and prepares the next segment ahead of need on a background thread.

Lifetime (RocketMQ's ``ReferenceResource``, spec §9): zero-copy reads are memoryviews of the
map, and each view counts as a reference. Python's ``mmap`` refuses to unmap while such views
exist, so :meth:`MappedFile.close` drops the file's own reference and leaves the unmapping to the
last view's release: a view can never point into unmapped memory. :meth:`MappedFile.destroy`
(retention) unlinks the file at once and marks it destroyed; views taken before keep reading the
old bytes (the blocks are freed with the last view), and a view asked for afterwards raises
:class:`MessageNotFoundError`. Files are unlinked, never truncated, so no mapping ever faults.

Full disk: every failure to create, size or allocate a file raises :class:`SegmentError`, and
:class:`DiskFullError` (a subclass) when the cause is ENOSPC or EDQUOT (:func:`space_error`).
Nothing is stored through a map into a hole (a SIGBUS when the file system has no block for
it): files are allocated before (:func:`allocate_range`, :func:`allocate_file`,
:meth:`MappedFile.zero`). And what may lie past a writer's data is read only where the file has
data (:func:`data_extents`, :meth:`MappedFile.pread`): tmpfs needs a page even to read a hole.
"""

from __future__ import annotations

import contextvars
import errno
import fcntl
import mmap
import os
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Optional

from rocketstore.errors import (
    DiskFullError,
    FlushTimeoutError,
    MessageNotFoundError,
    OpenFilesLimitError,
    RocketStoreError,
    SegmentError,
    StoreClosedError,
    StoreConfigError,
)
from rocketstore.format._hotstate import MappedState, SegmentTable
from rocketstore.status import PutStatus

__all__ = [
    "MappedFile",
    "MappedFileQueue",
    "offset_to_file_name",
    "space_error",
    "flush_error",
    "typed_error",
    "flush_timeout",
    "deleted_files_closed_aside",
    "populate_read",
    "data_extents",
    "allocate_range",
    "allocate_file",
]

#: errnos that mean "no room on this file system" (DiskFullError rather than SegmentError)
#: whether a flush needs the file's descriptor after its msync (macOS: F_FULLFSYNC; flusher.c)
_FULLFSYNC = hasattr(fcntl, "F_FULLFSYNC")

NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})

FILE_NAME_DIGITS = 20


def offset_to_file_name(offset: int) -> str:
    """``UtilAll.offset2FileName``: the start offset as a 20-digit zero-padded decimal."""
    return f"{offset:0{FILE_NAME_DIGITS}d}"


def _open_files_limit() -> str:
    try:
        import resource
    except ImportError:  # not a POSIX system
        return "unknown"
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return "unlimited" if soft == resource.RLIM_INFINITY else f"{soft:,}"


def space_error(err: Optional[int], message: str, path: Optional[str] = None) -> SegmentError:
    """The error for a file operation that failed with ``err``: :class:`DiskFullError` when the
    file system is out of space (ENOSPC, EDQUOT), else :class:`SegmentError`. Both twins use it,
    so they raise the same class with the same message."""
    cls: type[SegmentError] = DiskFullError if err in NO_SPACE_ERRNOS else SegmentError
    strerror = os.strerror(err) if err else "unknown error"
    if err in (errno.EMFILE, errno.ENFILE):
        cls = OpenFilesLimitError
        strerror += f" (the open-files limit is {_open_files_limit()}; raise it with ulimit -n)"
    if path is None:
        return cls(err, f"{message}: {strerror}")
    return cls(err, f"{message}: {strerror}", path)


def typed_error(exc: BaseException, what: str) -> BaseException:
    """``exc`` as one of rocketstore's errors: a bare ``OSError`` becomes the
    :class:`SegmentError` its errno calls for (:class:`DiskFullError` for ENOSPC or EDQUOT,
    :class:`OpenFilesLimitError` for EMFILE or ENFILE), with its errno, text and file name and
    ``exc`` as its cause, its message starting with ``what``; anything else is returned as is."""
    if not isinstance(exc, OSError) or isinstance(exc, RocketStoreError):
        return exc
    text = exc.strerror or str(exc)
    typed = space_error(exc.errno, what, exc.filename)
    typed.strerror = f"{what}: {text}"
    typed.args = (exc.errno, typed.strerror) + (() if exc.filename is None else (exc.filename,))
    typed.__cause__ = exc
    return typed


def flush_error(rc: int) -> Optional[BaseException]:
    """What a durable put's failed flush wait (the flusher's return code) means for the caller:
    None for 0 (flushed) and 1 (timed out), else the error to attach to its result."""
    if rc in (0, 1):
        return None
    if rc == errno.ESHUTDOWN:
        return StoreClosedError("the store closed before the flush confirmed the message")
    return space_error(rc, "flushing the CommitLog failed; the message is stored but not known to be durable")


def flush_timeout(result: Any, rc: int) -> FlushTimeoutError:
    """Mark ``result`` (a put's result, or a list of them) FLUSH_DISK_TIMEOUT with the flush's
    error, and return the :class:`FlushTimeoutError` to raise for it (both twins)."""
    error = flush_error(rc)
    for r in result if isinstance(result, list) else (result,):
        # a result is read-only to its users; both twins' PutResult keep these setters for here
        r._set_status(PutStatus.FLUSH_DISK_TIMEOUT)  # noqa: SLF001 (a put result's one writer after the core)
        r._set_error(error)  # noqa: SLF001 (as above)
    if error is None:
        message = "the message is stored, but its flush did not confirm within sync_flush_timeout_ms"
    else:
        message = f"the message is stored, but its flush failed: {error}"
    exc = FlushTimeoutError(message, result)
    exc.__cause__ = error
    return exc


def _allocate(fd: int, size: int) -> None:
    """Reserve the first ``size`` bytes' blocks, so writes through the map never hit ENOSPC
    (SIGBUS); where the file system cannot, only grow the file to ``size`` (never shrink it)."""
    if hasattr(os, "posix_fallocate"):
        try:
            os.posix_fallocate(fd, 0, size)
            return
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, getattr(errno, "ENOTSUP", -1)):
                raise
    if os.fstat(fd).st_size < size:
        os.ftruncate(fd, size)


def _size_new_file(fd: int, size: int, preallocate: bool) -> None:
    """Give a newly created file its ``size``: fallocated, or sparse (``preallocate=False``: the
    writer reserves blocks before storing into a page). The one place a new segment gets its
    space, so tests inject a full disk here."""
    if preallocate:
        _allocate(fd, size)
    else:
        os.ftruncate(fd, size)


def advise_random(mm: Any) -> None:
    """``MADV_RANDOM`` on a map this process made its file for (a ConsumeQueue's or an index
    file): a first write into a page of a new file then faults in that page, not a large folio
    of a read-ahead window (ext4 on Linux 6.x), whose zeroing costs as much as 2 MiB of memory the
    process never had (1.6 ms a file on this project's VM). Nothing where there is no madvise."""
    try:
        mm.madvise(mmap.MADV_RANDOM)
    except (AttributeError, OSError, ValueError):
        pass


def close_map(mm: Optional[mmap.mmap]) -> None:
    """Close a map unless zero-copy views of it are alive: then it is released with the last."""
    if mm is not None:
        try:
            mm.close()
        except BufferError:
            pass


class _AsideCloser:
    """Closes, on a thread of its own, the descriptors of files already unlinked: the last
    close of a deleted file frees its blocks and its pages (waiting on the file system's journal
    and on pages still being written back), which can take milliseconds per file and, on a busy
    disk, much longer. Nothing needs that done before the next step: the name is gone already."""

    def __init__(self) -> None:
        self._fds: queue.SimpleQueue[Optional[int]] = queue.SimpleQueue()
        self._thread: Optional[threading.Thread] = None
        self._errors: list[OSError] = []

    def submit(self, fd: int) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="rocketstore-close-deleted", daemon=True)
            self._thread.start()
        self._fds.put(fd)

    def _run(self) -> None:
        while True:
            fd = self._fds.get()
            if fd is None:
                return
            try:
                os.close(fd)
            except OSError as exc:
                self._errors.append(exc)

    def finish(self) -> None:
        """Wait until every descriptor handed over is closed; a failed close raises here."""
        if self._thread is not None:
            self._fds.put(None)
            self._thread.join()
            self._thread = None
        if self._errors:
            raise self._errors[0]


_closer: contextvars.ContextVar[Optional[_AsideCloser]] = contextvars.ContextVar(
    "rocketstore_aside_closer", default=None
)


@contextmanager
def deleted_files_closed_aside() -> Iterator[None]:
    """Within this block (in this thread only), :meth:`MappedFile.destroy` unlinks the file and
    unmaps it at once but hands its descriptor to a thread that closes it meanwhile (the
    costly last close of a deleted file overlaps what follows); on leaving, every such close
    has finished (an error of one raises then)."""
    closer = _AsideCloser()
    token = _closer.set(closer)
    try:
        yield
    finally:
        _closer.reset(token)
        closer.finish()


#: madvise(MADV_POPULATE_READ), Linux 5.14+ (the mmap module names it from Python 3.13 on)
_MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22 if sys.platform.startswith("linux") else None)


def populate_read(mm: Any, start: int, end: int) -> None:
    """Map the pages of ``mm[start:end]`` that are in the page cache (reading the others) in one
    system call, before a scan reads them: a scan that meets them unmapped takes a page fault
    every 16 pages or so, which costs more than the mapping itself. Only a hint: where the
    kernel has no MADV_POPULATE_READ, or the map is closed, nothing happens (the scan faults
    the pages in as before)."""
    if _MADV_POPULATE_READ is None:
        return
    start -= start % mmap.PAGESIZE
    try:
        end = min(end, len(mm))
        if end > start:
            mm.madvise(_MADV_POPULATE_READ, start, end - start)
    except (OSError, ValueError, AttributeError):  # an older kernel, a closed map
        pass


def _load_sync_file_range() -> Optional[Callable[[int, int, int, int], int]]:
    """libc's sync_file_range (Linux), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError, ImportError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_sync_file_range = _load_sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2


def allocate_range(fd: int, offset: int, length: int) -> None:
    """Allocate the blocks of ``[offset, offset + length)`` of a sparse file before it is written
    through a map: a store into a hole on a full disk is a SIGBUS, this is an OSError
    (:class:`SegmentError`). A file system without fallocate is left as it is."""
    if length <= 0 or not hasattr(os, "posix_fallocate"):
        return
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, getattr(errno, "ENOTSUP", -1)):
            return
        raise space_error(exc.errno, "cannot allocate file space") from exc


def data_extents(fd: int, lo: int, hi: int, most: int = -1) -> list[tuple[int, int]]:
    """The ``[start, end)`` stretches of ``[lo, hi)`` that hold data rather than holes
    (``SEEK_DATA`` / ``SEEK_HOLE``); the whole range when the system cannot tell.

    A hole must not be read through a map where the file system needs a page for that read
    (tmpfs allocates one even for a read fault): on a full file system the read is a SIGBUS.
    Reads that may reach past what a writer wrote read only these stretches (holes are zeros).
    ``most``: stop after that many stretches (-1: all)."""
    seek_data, seek_hole = getattr(os, "SEEK_DATA", None), getattr(os, "SEEK_HOLE", None)
    if hi <= lo:
        return []
    if seek_data is None or seek_hole is None or fd < 0:
        return [(lo, hi)]
    found: list[tuple[int, int]] = []
    pos = lo
    try:
        while pos < hi:
            try:
                start = os.lseek(fd, pos, seek_data)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # only holes from here to the end of the file
                    break
                raise
            if start >= hi:
                break
            end = min(hi, os.lseek(fd, start, seek_hole))
            found.append((start, end))
            if len(found) == most:
                break
            pos = end
    except OSError:  # the file system cannot tell: everything is data
        return [(lo, hi)]
    return found


def allocate_file(fd: int, size: int, path: str) -> None:
    """Give a small file written through a map (the live page, the shared append table, a
    group's members file) ``size`` bytes with every block allocated, before it is mapped: a
    store into a hole, and on tmpfs even a read of one, is a SIGBUS on a full file system; this
    is a :class:`DiskFullError` (a new file left empty, as before the call). Cheap when the
    blocks are allocated already."""
    before = os.fstat(fd).st_size
    try:
        _allocate(fd, size)
    except OSError as exc:
        if before == 0:
            try:
                os.ftruncate(fd, 0)
            except OSError:
                pass
        raise space_error(exc.errno, "cannot allocate the file's space", path) from exc


class MappedFile(MappedState):
    """One segment file of ``file_size`` bytes starting at CommitLog offset ``file_from_offset``.

    ``mm``, ``file_from_offset``, ``file_size`` and ``wrote_position`` are the fields of the
    :class:`~rocketstore.format._hotstate.MappedState` it extends (compiled: the one-call reads read
    them in C).
    """

    __slots__ = ("path", "fd", "read_only", "destroyed", "__weakref__")

    #: the file's map; None once closed (typed as always there: nothing reads it after closing
    #: but the checks that say so; a caller holding a view keeps the map itself alive)
    mm: mmap.mmap

    def __init__(
        self,
        path: str,
        file_from_offset: int,
        file_size: int,
        *,
        create: bool | str = False,
        read_only: bool = False,
        preallocate: bool = True,
        private: bool = False,
    ):
        """``create``: True makes a new file (FileExistsError if there is one); ``"shared"``
        makes it unless another writer process did (rocketstore.log.sharedappend: under the shared
        append lock), and then maps that one. ``private`` (with ``read_only``): a copy-on-write
        map, which a read-only store may change in memory (the file never sees it)."""
        self.path = path
        self.file_from_offset = file_from_offset
        self.file_size = file_size
        self.read_only = read_only
        self.wrote_position = 0
        self.destroyed = False
        self.mm = None  # type: ignore[assignment]  # until mapped below
        flags = os.O_RDONLY if read_only else os.O_RDWR
        if create is True:
            flags |= os.O_CREAT | os.O_EXCL
        elif create == "shared":
            flags |= os.O_CREAT
        try:
            self.fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            raise space_error(exc.errno, "cannot open segment", path) from exc
        try:
            if create is True or (create == "shared" and os.fstat(self.fd).st_size == 0):
                _size_new_file(self.fd, file_size, preallocate)
            actual = os.fstat(self.fd).st_size
            if actual != file_size:
                raise StoreConfigError(
                    f"segment {path} is {actual} bytes; this store's segments are {file_size} bytes"
                )
            access = mmap.ACCESS_WRITE if not read_only else mmap.ACCESS_COPY if private else mmap.ACCESS_READ
            self.mm = mmap.mmap(self.fd, file_size, access=access)
            if read_only:
                # the map holds a descriptor of its own (CPython's mmap dups it); nothing reads
                # through this one, so a read-only store keeps one per file, not two
                os.close(self.fd)
                self.fd = -1
        except OSError as exc:
            os.close(self.fd)
            if create is True:
                try:
                    os.unlink(path)
                except OSError:
                    pass
            raise space_error(exc.errno, "cannot create or map segment", path) from exc
        except BaseException:
            os.close(self.fd)
            raise

    @property
    def end_offset(self) -> int:
        return self.file_from_offset + self.file_size

    @contextmanager
    def descriptor(self, writable: bool = False) -> Iterator[int]:
        """The file's descriptor: its own, or (released, or a read-only file) one opened for the
        block; -1 when the file cannot be opened (deleted meanwhile)."""
        if self.fd >= 0:
            yield self.fd
            return
        try:
            fd = os.open(self.path, (os.O_RDWR if writable else os.O_RDONLY) | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            yield -1
            return
        try:
            yield fd
        finally:
            os.close(fd)

    def data_extents(self, lo: int = 0, hi: Optional[int] = None, most: int = -1) -> list[tuple[int, int]]:
        """:func:`data_extents` of ``[lo, hi)`` of this file (``hi``: its end)."""
        hi = self.file_size if hi is None else min(hi, self.file_size)
        with self.descriptor() as fd:
            return data_extents(fd, lo, hi, most)

    def pread(self, position: int, size: int) -> bytes:
        """``size`` bytes at ``position`` read through the file, not the map (a hole reads as
        zeros and needs no page; see :func:`data_extents`). A file that cannot be read raises
        :class:`SegmentError`."""
        with self.descriptor() as fd:
            try:
                if fd < 0:
                    raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
                data = os.pread(fd, size, position)
            except OSError as exc:
                raise space_error(exc.errno, "cannot read the file", self.path) from exc
        return data.ljust(size, b"\0")  # past the end of a file cut short: nothing there

    def zero(self, lo: int, hi: int) -> None:
        """Make ``[lo, hi)`` zero, allocating its blocks first: a store through the map into a
        hole the file system cannot back is a SIGBUS, this raises :class:`DiskFullError`."""
        if hi <= lo:
            return
        with self.descriptor(writable=True) as fd:
            if fd < 0:
                raise SegmentError(errno.ENOENT, "cannot open the file to zero it", self.path)
            allocate_range(fd, lo, hi - lo)
        self.mm[lo:hi] = bytes(hi - lo)

    def view(self, position: int = 0, size: Optional[int] = None) -> memoryview:
        """A read-only zero-copy view of ``[position, position + size)``; keeps the map alive.

        Raises :class:`MessageNotFoundError` once the file was destroyed (retention) and
        :class:`StoreClosedError` once it was closed, also when that happens concurrently.
        """
        if size is None:
            size = self.file_size - position
        if position < 0 or size < 0 or position + size > self.file_size:
            raise IndexError(f"range [{position}, {position + size}) outside a {self.file_size}-byte segment")
        mm = self.mm
        try:
            whole = memoryview(mm)  # the reference a reader holds (ReferenceResource.hold)
        except (TypeError, ValueError):  # None, or closed by another thread since it was read
            whole = None
        if whole is None:
            if self.destroyed:
                raise MessageNotFoundError(f"segment {os.path.basename(self.path)} was deleted (retention)")
            raise StoreClosedError(f"segment {os.path.basename(self.path)} is closed")
        return whole.toreadonly()[position : position + size]

    def flush(self, start: int = 0, end: Optional[int] = None) -> None:
        """msync ``[start, end)`` of the map (start rounded down to a page); no-op if read-only."""
        if self.mm is None or self.read_only:
            return
        end = self.file_size if end is None else min(end, self.file_size)
        start -= start % mmap.PAGESIZE
        if end > start:
            self.mm.flush(start, end - start)

    def start_writeback(self, start: int = 0, end: Optional[int] = None) -> None:
        """Ask the kernel to start writing ``[start, end)`` back now, without waiting
        (``sync_file_range(SYNC_FILE_RANGE_WRITE)``): a :meth:`flush` of several files after
        this hint to each waits for their writes together rather than one after another. Only
        a hint: it makes nothing durable (the flush does), and where there is no such call
        (not Linux), or the file is closed, nothing happens."""
        if _sync_file_range is None or self.fd < 0 or self.read_only:
            return
        end = self.file_size if end is None else min(end, self.file_size)
        if end > start:
            _sync_file_range(self.fd, start, end - start, _SYNC_FILE_RANGE_WRITE)

    def release_descriptor(self) -> bool:
        """Close the file's own descriptor where nothing needs it once mapped (the map holds one
        of its own): a sealed CommitLog segment's, where a flush is an msync alone (not macOS,
        whose flush thread also asks the file for F_FULLFSYNC). True if it closed it now."""
        if self.fd < 0 or _FULLFSYNC:
            return False
        os.close(self.fd)
        self.fd = -1
        return True

    def close(self) -> None:
        mm, self.mm = self.mm, None  # type: ignore[assignment]  # closed
        close_map(mm)
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            closer = _closer.get() if self.destroyed else None
            if closer is not None:  # unlinked already: see deleted_files_closed_aside
                closer.submit(fd)
            else:
                os.close(fd)

    def destroy(self) -> None:
        """Unlink the file and drop the file's own reference to the map (ReferenceResource.destroy).

        Views taken before stay readable; the map is unmapped, and the blocks freed, when the
        last of them is released. Views asked for afterwards raise MessageNotFoundError.
        """
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.destroyed = True
        self.close()

    def __repr__(self) -> str:
        return f"<MappedFile {self.path} from={self.file_from_offset} size={self.file_size}>"


class MappedFileQueue(SegmentTable):
    """The contiguous segment files of one directory (CommitLog or a ConsumeQueue)."""

    # ``files`` is the field of the SegmentTable it extends (compiled: the one-call reads read
    # it in C); the rest stay in the instance dict.
    __slots__ = ("__dict__", "__weakref__")

    def __init__(self, directory: str, file_size: int, *, read_only: bool = False, preallocate: bool = True):
        self.directory = directory
        self.preallocate = preallocate
        self.file_size = file_size
        self.read_only = read_only
        self.files: list[MappedFile] = []
        self._lock = threading.Lock()
        self._next: Optional[MappedFile] = None
        self._next_error: Optional[BaseException] = None
        self._preparing: Optional[threading.Thread] = None
        #: Writers of several processes append (rocketstore.log.sharedappend): a segment is created
        #: under the shared append lock, or found made by another process; none ahead of time.
        self.shared = False
        #: A read-only load left out a last file that was empty or short (a writer creating it,
        #: or damage): what it should hold is not on disk.
        self.skipped_last = False

    def share(self) -> None:
        """From now on segments are made as :attr:`shared` says (a preparation under way ends
        first)."""
        with self._lock:
            self.shared = True
            thread = self._preparing
        if thread is not None:
            thread.join()

    def load(self) -> None:
        """Map every segment in the directory, checking names, sizes and contiguity."""
        if not os.path.isdir(self.directory):
            if os.path.lexists(self.directory):
                raise StoreConfigError(f"{self.directory} is not a directory")
            if self.read_only:
                return
            os.makedirs(self.directory, exist_ok=True)
        names = sorted(n for n in os.listdir(self.directory) if len(n) == FILE_NAME_DIGITS and n.isdigit())
        try:
            self._load(names)
        except BaseException:
            self.close()  # a refused store keeps no file or map open
            raise

    def _load(self, names: list[str]) -> None:
        expected = None
        for name in names:
            start = int(name)
            path = os.path.join(self.directory, name)
            # checked before anything opens it: a FIFO would block the open (a read-only store
            # would hang), a directory or a symlink loop cannot be mapped
            try:
                size = os.stat(path).st_size
            except FileNotFoundError:
                if not self.read_only:
                    raise SegmentError(
                        errno.ENOENT, "segment vanished while the store opened", path
                    ) from None
                expected = self._forget_loaded()
                continue
            except OSError as exc:
                raise SegmentError(exc.errno, f"cannot stat segment: {exc.strerror}", path) from exc
            if not os.path.isfile(path):
                raise StoreConfigError(f"segment {path} is not a regular file")
            if size == 0 and name == names[-1]:
                if not self.read_only:
                    os.unlink(path)  # a crash while creating the last segment (5.x does the same)
                self.skipped_last = True  # read-only: a writer is creating it right now, or damage
                continue
            if self.read_only and name == names[-1] and size < self.file_size and expected is not None:
                self.skipped_last = True  # read-only: a writer is still sizing it, or damage
                continue
            if start % self.file_size:
                raise StoreConfigError(f"segment {path} does not start at a multiple of {self.file_size}")
            if expected is not None and start != expected:
                raise StoreConfigError(f"segment {path} leaves a gap: expected a segment at {expected}")
            try:
                self.files.append(MappedFile(path, start, self.file_size, read_only=self.read_only))
            except SegmentError as exc:
                if not (self.read_only and exc.errno == errno.ENOENT):
                    raise
                expected = self._forget_loaded()
                continue
            expected = start + self.file_size

    def _forget_loaded(self) -> Optional[int]:
        """A read-only load met a segment that vanished since the listing: retention deleted it
        and, deleting oldest first, every one before it, which are dropped too (the store is
        seen as it is after that deletion). Returns None, the next expected start."""
        for mf in self.files:
            mf.close()
        self.files.clear()
        return None

    @property
    def min_offset(self) -> int:
        return self.files[0].file_from_offset if self.files else 0

    def find(self, offset: int) -> Optional[MappedFile]:
        """The segment holding ``offset``, or None."""
        files = self.files
        if not files:
            return None
        index = (offset - files[0].file_from_offset) // self.file_size
        if 0 <= index < len(files):
            return files[index]
        return None

    def segment_at(self, start: int) -> MappedFile:
        """The segment starting at ``start``: existing (also one created ahead for a batch that
        spans segments), prepared ahead, or created now."""
        with self._lock:
            if self.files and start < self.files[-1].end_offset:
                mf = self.find(start)
                if mf is not None and mf.file_from_offset == start:
                    return mf
                raise SegmentError(f"no segment starts at {start}")
            if self.files and start != self.files[-1].end_offset:
                raise SegmentError(f"segment at {start} would leave a gap after {self.files[-1].end_offset}")
            nxt = self._take_prepared(start)
            if nxt is None:
                if self.shared:
                    nxt = self._shared_segment(start)
                else:
                    nxt = MappedFile(
                        os.path.join(self.directory, offset_to_file_name(start)),
                        start,
                        self.file_size,
                        create=True,
                        preallocate=self.preallocate,
                    )
            self.files.append(nxt)
            return nxt

    def _shared_segment(self, start: int) -> MappedFile:
        path = os.path.join(self.directory, offset_to_file_name(start))
        return MappedFile(path, start, self.file_size, create="shared", preallocate=self.preallocate)

    def _take_prepared(self, start: int) -> Optional[MappedFile]:
        thread = self._preparing
        if thread is not None:
            thread.join()
            self._preparing = None
        nxt, self._next = self._next, None
        if nxt is not None and nxt.file_from_offset != start:
            nxt.destroy()
            nxt = None
        return nxt

    def prepare_next(self, on_ready: Optional[Callable[[MappedFile], object]] = None) -> None:
        """Create the segment after the last one in the background (AllocateMappedFileService)."""
        with self._lock:
            if self._preparing is not None or self._next is not None or not self.files or self.shared:
                return
            start = self.files[-1].end_offset

            def work() -> None:
                try:
                    mf = MappedFile(
                        os.path.join(self.directory, offset_to_file_name(start)),
                        start,
                        self.file_size,
                        create=True,
                        preallocate=self.preallocate,
                    )
                except FileExistsError:
                    return
                except Exception as exc:  # reported when the segment is needed
                    self._next_error = exc
                    return
                self._next = mf
                if on_ready is not None:
                    on_ready(mf)

            self._preparing = threading.Thread(target=work, name="rocketstore-allocate", daemon=True)
            self._preparing.start()

    def delete_first(
        self, doomed: list[MappedFile], release: Optional[Callable[[MappedFile], object]] = None
    ) -> list[MappedFile]:
        """Delete the leading segments ``doomed`` (oldest first; retention, spec §9).

        Stops at the first one that is not the next leading segment, and never deletes the last
        segment. Each is taken out of :attr:`files` first (a new list: a reader that took the
        old list keeps consistent, if stale, segments), then ``release(mf)`` runs (the append
        core drops its pin and stops flushing it), then it is destroyed. A destroy that fails
        stops the pass: that segment and the rest stay. Returns the segments deleted.
        """
        with self._lock:
            count = 0
            for mf in doomed:
                if count >= len(self.files) - 1 or self.files[count] is not mf:
                    break
                count += 1
            gone, self.files = self.files[:count], self.files[count:]
        deleted: list[MappedFile] = []
        for i, mf in enumerate(gone):
            if release is not None:
                release(mf)
            try:
                mf.destroy()
            except OSError:
                with self._lock:  # the undeleted ones go back in front, in order
                    self.files = gone[i:] + self.files
                raise
            deleted.append(mf)
        return deleted

    def truncate_after(self, offset: int) -> None:
        """Destroy every segment that starts after the one holding ``offset`` (truncateDirtyFiles)."""
        with self._lock:
            while self.files and self.files[-1].file_from_offset > offset:
                self.files.pop().destroy()

    def close(self) -> None:
        with self._lock:
            if self._preparing is not None:
                self._preparing.join()
                self._preparing = None
            if self._next is not None:
                # an unused pre-allocated segment: remove it, so a reopen sees the true end
                self._next.destroy()
                self._next = None
            for mf in self.files:
                mf.close()
            self.files = []
