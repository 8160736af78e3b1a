"""IndexService: the ``<root>/index/`` directory of IndexFiles (spec §5.4, §5.5).

Message keys (``topic#UNIQ_KEY`` and each ``KEYS`` token) map to CommitLog offsets through a
list of fixed-size index files, oldest first; only the last one is written. Each file is exactly
``index_file_size(slot_count, index_count)`` bytes (420,000,040 for RocketMQ's defaults),
created **sparse** and memory-mapped, and named by its creation time ``yyyyMMddHHmmssSSS``
(local time), so name order is creation order. The slot chaining itself is the hot path of the
chosen twin's :class:`IndexFile` (``rocketstore.queues._index`` or ``rocketstore.queues._index_py``); this
module decides which file, when to roll, what to delete, and in which order to query.

Rolling: when the last file is full, a new file starts where it ended (``init_from``: begin =
end = the full file's end timestamp and phyOffset), the full file is msynced, and its end
timestamp is reported (``on_file_full`` callback and the return value of :meth:`IndexService.build_index`)
so the store can set ``checkpoint.indexMsgTimestamp`` to it (§6). After an abnormal shutdown,
:meth:`IndexService.load` deletes every file whose end timestamp is newer than that checkpoint value;
re-dispatch rebuilds their entries.

Durability: index pages reach the disk when a file fills, on :meth:`IndexService.flush` and on
:meth:`IndexService.close` (5.x; 4.3 leaves them to the page cache).

Full disk: the files are sparse and written through the map, and a store into a hole the file
system cannot back is a SIGBUS. So nothing is stored into a page before its blocks are
allocated: the header and the slot table when a file is created (or first written after a
load), the items region ahead of the writer (:meth:`IndexService._reserve`). A full disk is a
:class:`~rocketstore.errors.DiskFullError` from the build call, never a signal. (Files that
other writers left sparse are still read through holes; on tmpfs, which needs a page even for
that, a full file system can fault such a read.)

Queries return *candidates*: only 31-bit key hashes are compared, so the caller re-checks the
real key and topic of each record it reads.

Thread safety: every public method takes one lock, so queries, builds, deletion and close may be
called from different threads.
"""

from __future__ import annotations

import binascii
import errno
import json
import logging
import mmap
import operator
import os
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Optional

import numpy as np

from rocketstore import _impl
from rocketstore.base._clock import now_ms
from rocketstore.errors import (
    InvalidMessageError,
    SegmentError,
    StoreClosedError,
    StoreConfigError,
    StoreReadOnlyError,
)
from rocketstore.files._files import replace_file
from rocketstore.files.mapped_file import MappedFile, advise_random, allocate_range, populate_read
from rocketstore.files.storedir import detect_segment_size
from rocketstore.format._codec_py import SYSFLAG_TRANSACTION_MASK, TRANSACTION_ROLLBACK_TYPE
from rocketstore.format._hotstate import IndexFileState, IndexState

log = logging.getLogger("rocketstore.queues.indexservice")

__all__ = [
    "IndexService",
    "MappedIndexFile",
    "INDEX_DIR_NAME",
    "MAX_MSGS_NUM_BATCH",
    "KEY_SEPARATOR",
    "detect_index_geometry",
    "detect_queue_options",
]

INDEX_DIR_NAME = "index"
MAX_MSGS_NUM_BATCH = 64  # maxMsgsNumBatch: the broker's default cap on one key query (§5.5); a store walks at least this many candidates
KEY_SEPARATOR = " "  # MessageConst.KEY_SEPARATOR: KEYS is split on single spaces only
_INT64_MAX = (1 << 63) - 1
_INT32_MAX = 0x7FFFFFFF
_NAME_TRIES = 1000  # bumps of 1 ms to find a free, later name
_HOUR_MS = 3_600_000


_HEADER_SIZE = 40  # header bytes before the slot table
_SLOT_SIZE = 4
_ITEM_SIZE = 20
_HEADER = struct.Struct(">qqqqii")
#: The resume point of the newest index file, beside ``index/`` (Java never reads it): what that
#: file held when it was last made durable, so an abnormal open rolls it back instead of
#: deleting it and re-indexing everything it covered.
RESUME_FILE_NAME = "indexResume"
_RESERVE_ITEMS = 1 << 14  # items allocated ahead at a time (320 KB)
_WINDOW_ITEMS = 1 << 8  # items the fused dispatch's window (tail_window) holds allocated at least


def _check_str(what: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be str, not {type(value).__name__}")
    return value


class MappedIndexFile(IndexFileState):
    """One index file of the service: its path, its map and the twin's :class:`IndexFile` over it.

    Read its header through the properties; they read the map, so they are current.
    """

    # ``mapped`` is the field of the IndexFileState it extends (compiled: read in C)
    __slots__ = ("path", "name", "index", "dirty", "reserved")

    def __init__(self, path: str, mapped: MappedFile, index: Any) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self.mapped = mapped
        self.index = index
        self.dirty = False  # written since the last msync
        self.reserved = 0  # items whose blocks are allocated (0: not even the slot table yet)

    @property
    def begin_timestamp(self) -> int:
        return int(self.index.begin_timestamp)

    @property
    def end_timestamp(self) -> int:
        return int(self.index.end_timestamp)

    @property
    def begin_phy_offset(self) -> int:
        return int(self.index.begin_phy_offset)

    @property
    def end_phy_offset(self) -> int:
        return int(self.index.end_phy_offset)

    @property
    def index_count(self) -> int:
        """The next item number (1 for an empty file)."""
        return int(self.index.index_count)

    @property
    def is_full(self) -> bool:
        return bool(self.index.is_full)

    @property
    def file_size(self) -> int:
        return self.mapped.file_size

    def flush(self) -> None:
        """msync the whole map (cheap for clean pages, even in a 420 MB sparse file)."""
        self.mapped.flush()
        self.dirty = False

    def close(self) -> None:
        """Drop the IndexFile's export of the map, then unmap and close the file."""
        self.index.release()
        self.mapped.close()

    def destroy(self) -> None:
        self.index.release()
        self.mapped.destroy()

    def __repr__(self) -> str:
        if self.mapped.mm is None:
            return f"<MappedIndexFile {self.name} closed>"
        return (
            f"<MappedIndexFile {self.name} items={self.index_count - 1} "
            f"phy=[{self.begin_phy_offset}, {self.end_phy_offset}] "
            f"time=[{self.begin_timestamp}, {self.end_timestamp}]>"
        )


# -- the geometry of existing files -----------------------------------------------------------

_MAX_CANDIDATES = 1 << 16  # slot counts tried per file before giving up on it


def detect_index_geometry(root: str) -> Optional[tuple[int, int]]:
    """``(slot count, item count)`` the index files under ``root/index`` were written with, or
    None when there are none or nothing fits.

    They are read from a file's own bytes (§5.1, §5.3), newest file first: its size is
    ``40 + 4 * slots + 20 * items``, and only the right slot count puts the header's
    beginPhyOffset in item 1, its endPhyOffset in the last item (indexCount - 1), and that
    item's number in the slot of its key hash.
    """
    directory = os.path.join(root, INDEX_DIR_NAME)
    try:
        names = sorted((n for n in os.listdir(directory) if len(n) == 17 and n.isdigit()), reverse=True)
        sizes = {n: os.path.getsize(os.path.join(directory, n)) for n in names}
    except OSError:
        return None
    fallback = None
    for name in names:
        size = sizes[name]
        if size <= _HEADER_SIZE:
            continue
        try:
            with open(os.path.join(directory, name), "rb") as f:
                data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            continue
        try:
            found = _geometry_of(data, size)
        finally:
            data.close()
        if found is not None:
            return found
        if fallback is None and (size - _HEADER_SIZE) % 84 == 0:  # RocketMQ's 4 items per slot
            fallback = ((size - _HEADER_SIZE) // 84, 4 * ((size - _HEADER_SIZE) // 84))
    return fallback


def detect_queue_options(root: str, options: dict[str, Any]) -> None:
    """Fill in ConsumeQueue and index file sizes the store's existing files were written with."""
    if "consume_queue_units" not in options:
        cq_root = os.path.join(root, "consumequeue")
        try:
            for topic in sorted(os.listdir(cq_root))[:16]:
                for qid in sorted(os.listdir(os.path.join(cq_root, topic)))[:4]:
                    size = detect_segment_size(os.path.join(cq_root, topic, qid))
                    if size and size % 20 == 0:
                        options["consume_queue_units"] = size // 20
                        break
                if "consume_queue_units" in options:
                    break
        except OSError:
            pass
    if "index_slots" not in options and "index_count" not in options:
        geometry = detect_index_geometry(root)
        if geometry is not None:
            options["index_slots"], options["index_count"] = geometry


def _geometry_of(data: Any, size: int) -> Optional[tuple[int, int]]:
    """The (slots, items) of one index file's bytes ``data``, if its items tell (see above)."""
    if size < _HEADER_SIZE:
        return None
    _bt, _et, begin_phy, end_phy, _hsc, count = _HEADER.unpack_from(data, 0)
    last = count - 1
    if last < 1 or size < _HEADER_SIZE + _SLOT_SIZE + _ITEM_SIZE * count:
        return None  # no item yet: any geometry reads it alike

    def fits(slots: int) -> bool:
        items_at = _HEADER_SIZE + _SLOT_SIZE * slots
        rest = size - items_at
        if slots < 1 or rest % _ITEM_SIZE or rest // _ITEM_SIZE < count:
            return False
        first = items_at + _ITEM_SIZE
        key_hash, phy, _diff, prev = struct.unpack_from(">iqii", data, items_at + _ITEM_SIZE * last)
        if phy != end_phy or key_hash < 0 or prev < 0 or prev >= last:
            return False
        if (
            struct.unpack_from(">q", data, first + 4)[0] != begin_phy
            or struct.unpack_from(">i", data, first + 16)[0]
        ):
            return False
        if data[items_at:first].count(0) != _ITEM_SIZE:
            return False
        return bool(struct.unpack_from(">i", data, _HEADER_SIZE + _SLOT_SIZE * (key_hash % slots))[0] == last)

    top = (size - _HEADER_SIZE - _ITEM_SIZE * count) // _SLOT_SIZE
    if (size - _HEADER_SIZE) % 84 == 0 and fits((size - _HEADER_SIZE) // 84):
        return (size - _HEADER_SIZE) // 84, 4 * ((size - _HEADER_SIZE) // 84)
    if end_phy != 0:
        # the last item's phyOffset field sits at 44 + 4 * slots + 20 * last
        pattern = struct.pack(">q", end_phy)
        at = data.find(pattern, _HEADER_SIZE + 4 + _SLOT_SIZE + _ITEM_SIZE * last)
        for _ in range(_MAX_CANDIDATES):
            if at < 0:
                break
            slots, odd = divmod(at - _HEADER_SIZE - 4 - _ITEM_SIZE * last, _SLOT_SIZE)
            if not odd and slots <= top and fits(slots):
                return slots, (size - _HEADER_SIZE - _SLOT_SIZE * slots) // _ITEM_SIZE
            at = data.find(pattern, at + 1)
        return None
    for slots in range(1, min(top, _MAX_CANDIDATES) + 1):
        if fits(slots):
            return slots, (size - _HEADER_SIZE - _SLOT_SIZE * slots) // _ITEM_SIZE
    return None


class IndexService(IndexState):
    """The index files under ``<root>/index/`` (Java ``IndexService``).

    Call :meth:`load` once before anything else (also for a new store). ``implementation`` pins
    the twin ("c" or "py"; default: compiled if built), as :class:`rocketstore.MessageStore`
    does. ``slot_count`` and ``index_count`` are ``maxHashSlotNum`` and ``maxIndexNum``; every
    file in the directory must have the matching size. ``read_only=True`` maps read-only and
    never creates, deletes or writes a file. ``on_file_full(end_timestamp)`` is called (after
    the build call that filled a file has stored all its keys) for every file that became full,
    once that file has been msynced: set ``checkpoint.index_msg_timestamp`` to the value.
    """

    # What the one-call key lookups read per call (``_lock``, ``_closed``, ``_index``,
    # ``_files``, ``slot_count``, ``index_count``) are the fields of the IndexState it extends
    # (compiled: read in C); the rest stay in the instance dict.
    __slots__ = ("__dict__", "__weakref__")

    def __init__(
        self,
        root: str,
        *,
        implementation: Optional[str] = None,
        slot_count: int = 5_000_000,
        index_count: int = 20_000_000,
        read_only: bool = False,
        on_file_full: Optional[Callable[[int], None]] = None,
    ) -> None:
        twins = _impl.get(implementation)
        self._index = twins.index
        slot_count = operator.index(slot_count)
        index_count = operator.index(index_count)
        if not 1 <= slot_count <= _INT32_MAX:
            raise StoreConfigError(f"slot_count must be in 1..{_INT32_MAX}, got {slot_count}")
        # Item 0 is never used: a file needs room for at least one real item, or rolling never ends.
        if not 2 <= index_count <= _INT32_MAX:
            raise StoreConfigError(f"index_count must be in 2..{_INT32_MAX}, got {index_count}")
        self.slot_count = slot_count
        self.index_count = index_count
        self.file_size = self._index.index_file_size(slot_count, index_count)
        self.read_only = bool(read_only)
        self.directory = os.path.join(os.fspath(root), INDEX_DIR_NAME)
        self.on_file_full = on_file_full
        self._resume_path = os.path.join(os.fspath(root), RESUME_FILE_NAME)
        self._resume_saved: Optional[dict[str, Any]] = None
        self._files: list[MappedIndexFile] = []
        # the codec's FastRLock (compiled: a mutex the point reads take without a method call;
        # pure: threading.RLock)
        self._lock = twins.codec.FastRLock()
        self._loaded = False
        self._closed = False

    # -- opening ------------------------------------------------------------------------------
    def load(  # noqa: C901 (the recovery cases of the index files, in order)
        self, abnormal: bool = False, index_msg_timestamp: int = 0, durable_offset: Optional[int] = None
    ) -> None:
        """Map the existing index files in name order (§5.4 load).

        Names that are not ``yyyyMMddHHmmssSSS`` are ignored. A file of the wrong size raises
        :class:`StoreConfigError` naming it, except an empty *last* file, which is what a crash
        during creation leaves: it is deleted (skipped when read-only). After an ``abnormal``
        shutdown, every file whose header endTimestamp > ``index_msg_timestamp`` (the
        checkpoint's indexMsgTimestamp) is deleted, as Java does, and so is any file that is not
        full (its header cannot be trusted) and every file after one deleted; a read-only service keeps
        them, since it cannot rebuild their entries and queries return candidates anyway. The
        exception is the file the resume point (:meth:`save_resume_point`) names: it is rolled
        back to that point (:meth:`_roll_back`) and kept, so its entries are not indexed again.
        A read-only service (``abnormal``: a crashed store no writer holds) does the same in a
        private copy-on-write map of that file, writing nothing, and leaves out the files after
        it: their entries, and the file's past the resume point, are absent (a power cut may
        have kept a header and slots that name items it lost), and the store indexes them again
        from the CommitLog in memory. Without a resume point for a file the writable open would
        delete, a read-only one keeps the file's items that point below ``durable_offset`` (the
        checkpoint's confirmPhyOffset: the index was flushed that far before it was recorded),
        in order, and leaves the rest out.
        """
        index_msg_timestamp = operator.index(index_msg_timestamp)
        with self._lock:
            self._check_open()
            if self._loaded:
                raise RuntimeError("IndexService.load() was already called")
            names = []
            if os.path.isdir(self.directory):
                names = sorted(n for n in os.listdir(self.directory) if self._is_index_name(n))
            elif os.path.lexists(self.directory):
                raise StoreConfigError(f"{self.directory} is not a directory")
            dropping = False
            resume = self._read_resume_point() if abnormal else None
            try:
                for name in names:
                    path = os.path.join(self.directory, name)
                    try:
                        if not os.path.isfile(path):
                            continue
                        size = os.path.getsize(path)
                    except FileNotFoundError:
                        if self.read_only:
                            continue  # deleted by the writer's retention since the listing
                        raise
                    if size == 0 and name == names[-1]:
                        if not self.read_only:
                            os.unlink(path)
                        continue
                    if size != self.file_size:
                        raise StoreConfigError(
                            f"index file {path} is {size} bytes; this store's index files are "
                            f"{self.file_size} bytes ({self.slot_count} slots, {self.index_count} items)"
                        )
                    if self.read_only and dropping:
                        continue  # never durable: absent (indexed again in memory)
                    if resume is not None and not dropping and name == resume["file"]:
                        if self.read_only:
                            f = self._map(path, create=False, private=True)
                            try:
                                self._roll_back_map(f.mapped.mm, path, resume, private=True)
                            except StoreConfigError as exc:
                                log.warning("index file %s not resumed: %s", path, exc)
                                f.close()
                                f = self._map(path, create=False)
                            except BaseException:
                                f.close()
                                raise
                            self._files.append(f)
                            dropping = True
                            continue
                        try:
                            self._roll_back(path, resume)
                        except StoreConfigError as exc:
                            log.warning("index file %s not resumed: %s", path, exc)
                        else:
                            self._files.append(self._map(path, create=False))
                            dropping = True  # files after the resume point were never durable
                            continue
                    try:
                        f = self._map(path, create=False)
                    except SegmentError as exc:
                        if self.read_only and exc.errno == errno.ENOENT:
                            continue  # deleted since the listing, as above
                        raise
                    # a full file older than the resume point's was msynced before that was saved
                    durable = resume is not None and name < resume["file"] and f.is_full
                    if (
                        abnormal
                        and self.read_only
                        and durable_offset is not None
                        and not durable
                        and (f.end_timestamp > index_msg_timestamp or not f.is_full)
                    ):
                        f.close()
                        f = self._map(path, create=False, private=True)
                        try:
                            kept = self._durable_point(f.mapped.mm, durable_offset)
                            if kept is not None:
                                self._roll_back_map(f.mapped.mm, path, kept, private=True)
                        except BaseException:
                            f.close()
                            raise
                        dropping = True  # files after it were never durable
                        if kept is None:
                            f.close()
                            continue
                    if (
                        abnormal
                        and not self.read_only
                        and not durable
                        and (dropping or f.end_timestamp > index_msg_timestamp or not f.is_full)
                    ):
                        # Not provably complete and flushed: only a file that was full when
                        # the checkpoint recorded it is (a power cut can leave any bytes,
                        # a header included, in the others). It and every newer one go.
                        dropping = True
                        f.destroy()
                        continue
                    self._files.append(f)
            except BaseException:
                self._close_files()  # a refused load keeps no map open
                raise
            self._loaded = True

    # -- the resume point -----------------------------------------------------------------------
    def save_resume_point(self) -> None:
        """Record the newest file's header and last item in ``indexResume`` (written whole:
        temporary file, fsync, rename). Call it after :meth:`flush`, when no build runs: the
        file's items up to that point are then durable, and an abnormal open rolls the file
        back to it (:meth:`load`) instead of deleting it."""
        with self._lock:
            if self._closed or self.read_only or not self._files:
                return
            f = self._files[-1]
            count = f.index_count
            last = b""
            if count > 1:
                at = _HEADER_SIZE + self.slot_count * _SLOT_SIZE + (count - 1) * _ITEM_SIZE
                last = bytes(f.mapped.view(at, _ITEM_SIZE))
            record = {
                "version": 1,
                "file": f.name,
                "slotNum": self.slot_count,
                "indexNum": self.index_count,
                "header": [
                    f.begin_timestamp,
                    f.end_timestamp,
                    f.begin_phy_offset,
                    f.end_phy_offset,
                    f.index.hash_slot_count,
                    count,
                ],
                "lastItem": last.hex(),
            }
            if record == self._resume_saved:
                return
            replace_file(self._resume_path, json.dumps(record).encode())
            self._resume_saved = record

    def _read_resume_point(self) -> Optional[dict[str, Any]]:
        """The saved resume point if it is one for this geometry, else None (ignored)."""
        try:
            with open(self._resume_path) as f:
                record = json.load(f)
            header = record["header"]
            ok = (
                record.get("version") == 1
                and isinstance(record["file"], str)
                and record["slotNum"] == self.slot_count
                and record["indexNum"] == self.index_count
                and len(header) == 6
                and all(type(v) is int for v in header)
                and 1 <= header[5] <= self.index_count
                and len(binascii.unhexlify(record["lastItem"])) == (_ITEM_SIZE if header[5] > 1 else 0)
            )
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, KeyError, binascii.Error) as exc:
            log.warning("ignoring the index resume point %s: %s", self._resume_path, exc)
            return None
        if not ok:
            log.warning(
                "ignoring the index resume point %s: not one for these index files", self._resume_path
            )
            return None
        resume: dict[str, Any] = record
        return resume

    def _roll_back(self, path: str, resume: dict[str, Any]) -> None:
        """Return the index file at ``path`` to its resume point: items below the saved count are
        kept (they were durable), the header is the saved one and the slot table is rebuilt from
        those items (its pages may hold later writes, or garbage after a power cut). Raises
        StoreConfigError when the file does not hold the saved last item (not the same file)."""
        fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        try:
            if os.fstat(fd).st_size != self.file_size:
                raise StoreConfigError(f"index file {path} is not {self.file_size} bytes")
            mm = mmap.mmap(fd, self.file_size)
        finally:
            os.close(fd)
        try:
            self._roll_back_map(mm, path, resume)
        finally:
            mm.close()

    def _durable_point(self, mm: Any, durable_offset: int) -> Optional[dict[str, Any]]:
        """A resume point (as :meth:`_read_resume_point` gives, without its last item) for the
        index file in ``mm``: its leading items that point below ``durable_offset`` in CommitLog
        order, which were durable; None when there are none."""
        begin_ts, _end_ts, begin_phy, _end_phy, _used, count = _HEADER.unpack_from(mm, 0)
        count = min(max(count, 1), self.index_count)
        items_start = _HEADER_SIZE + self.slot_count * _SLOT_SIZE
        item = np.dtype([("key_hash", ">i4"), ("phy", ">i8"), ("diff", ">i4"), ("prev", ">i4")])
        items = np.frombuffer(mm, dtype=item, count=count - 1, offset=items_start + _ITEM_SIZE)
        phy = items["phy"].astype(np.int64)
        ok = (phy >= 0) & (phy < durable_offset) & (items["diff"] >= 0)
        ok[1:] &= phy[1:] >= phy[:-1]
        bad = np.flatnonzero(~ok)
        kept = int(bad[0]) if len(bad) else len(ok)
        if kept == 0:
            return None
        last_phy, last_diff = int(phy[kept - 1]), int(items["diff"][kept - 1])
        used = len(np.unique(items["key_hash"][:kept].astype(np.int64) % self.slot_count))
        del items, phy
        header = [begin_ts, begin_ts + last_diff * 1000, begin_phy, last_phy, used, kept + 1]
        return {"header": header, "lastItem": ""}

    def _roll_back_map(self, mm: Any, path: str, resume: dict[str, Any], private: bool = False) -> None:
        """:meth:`_roll_back` on ``mm``, a writable map of the index file at ``path`` (msynced
        after; a private map's msync writes nothing). ``private``: every page of the header and
        slot table is made the map's own copy, so a writer that opens the store later and
        rolls the file forward changes none of what this one walks (the items it keeps are
        never rewritten)."""
        count = resume["header"][5]
        items_start = _HEADER_SIZE + self.slot_count * _SLOT_SIZE
        last = bytes.fromhex(resume["lastItem"])
        at = items_start + (count - 1) * _ITEM_SIZE
        if last and mm[at : at + _ITEM_SIZE] != last:
            raise StoreConfigError(f"index file {path} does not hold the item its resume point saved")
        populate_read(mm, 0, items_start + count * _ITEM_SIZE)  # one call, not a fault per 16 pages
        # slots from the kept items: only those that differ are written
        _lo, hi = self._index.rebuild_slots(mm, self.slot_count, count)
        _HEADER.pack_into(mm, 0, *resume["header"])
        if private:
            slots = memoryview(mm)[_HEADER_SIZE:items_start]
            slots[:] = slots.tobytes()  # a store into each page: copied on write
            del slots
        # what was written: the header, the slots that changed (all below hi; the first page
        # holds the header); msync of the pages in between that are clean writes nothing
        hi = max(hi, _HEADER_SIZE)
        mm.flush(0, hi)

    def _is_index_name(self, name: str) -> bool:
        try:
            self._index.parse_index_file_name(name)
        except ValueError:
            return False
        return True

    def _open_mapping(self, path: str, create: bool, private: bool = False) -> Any:
        """The map an index file lives in: here the file itself, sparse (ftruncate), but for the
        header and the slot table, allocated before the file is mapped and read (on tmpfs even a
        read of a hole needs a page); the items region is allocated ahead of the writer by
        :meth:`_reserve`. ``private``: a read-only service's copy-on-write map, whose writes
        never reach the file."""
        mapped = MappedFile(
            path,
            0,
            self.file_size,
            create=create,
            read_only=self.read_only,
            preallocate=False,
            private=private,
        )
        if create:
            try:
                allocate_range(mapped.fd, 0, _HEADER_SIZE + self.slot_count * _SLOT_SIZE)
            except BaseException:
                mapped.destroy()
                raise
            advise_random(mapped.mm)  # slots are written at random; items a page at a time
        return mapped

    def _map(self, path: str, *, create: bool, private: bool = False) -> MappedIndexFile:
        mapped = self._open_mapping(path, create, private)
        try:
            index = self._index.IndexFile(mapped.mm, self.slot_count, self.index_count)
        except BaseException:
            if create:
                mapped.destroy()
            else:
                mapped.close()
            raise
        return MappedIndexFile(path, mapped, index)

    # -- building -----------------------------------------------------------------------------
    def build_index(
        self,
        topic: str,
        keys: Optional[str],
        phy_offset: int,
        store_timestamp: int,
        *,
        unique_key: Optional[str] = None,
        transaction_type: int = 0,
    ) -> Optional[int]:
        """Index one dispatched record (§5.4 ``buildIndex``).

        Keys are ``topic#unique_key`` (when ``unique_key`` is not None), then ``topic#token`` for
        each non-empty token of ``keys`` split on single spaces. The record is skipped when it is
        already indexed (``phy_offset`` below the last file's endPhyOffset, or equal to it while
        that file has items and room left) or when ``transaction_type`` (the sysFlag transaction
        bits; a whole sysFlag works too) is ROLLBACK. When the last file fills, a new one starts
        where it ended and the rest of the keys go there.

        Returns the end timestamp of the last file this call filled (for
        ``checkpoint.indexMsgTimestamp``), or None when no file became full.
        """
        return self.build_many(((topic, keys, phy_offset, store_timestamp, unique_key, transaction_type),))

    def build_many(self, rows: Iterable[tuple[Any, ...]]) -> Optional[int]:
        """Index many records in one call: each row is ``(topic, keys, phy_offset,
        store_timestamp[, unique_key[, transaction_type]])`` as in :meth:`build_index`.

        Every row is checked before the first key is stored, so bad input stores nothing.
        Returns the end timestamp of the last file this call filled, or None.
        """
        batch = [self._row_keys(row) for row in rows]
        with self._lock:
            self._check_writable()
            finished: list[int] = []
            for keys, phy_offset, store_timestamp in batch:
                if keys:
                    self._build_one(keys, phy_offset, store_timestamp, finished)
        return self._report_full(finished)

    def _report_full(self, finished: list[int]) -> Optional[int]:
        """Call ``on_file_full`` for each file a build filled (outside the lock); the last end time."""
        if not finished:
            return None
        if self.on_file_full is not None:
            for end_timestamp in finished:
                self.on_file_full(end_timestamp)
        return finished[-1]

    @staticmethod
    def _row_keys(row: Iterable[Any]) -> tuple[list[str], int, int]:
        """(index keys, phy_offset, store_timestamp) of one row; no keys when it is skipped."""
        row = tuple(row)
        if not 4 <= len(row) <= 6:
            raise TypeError(
                "a row is (topic, keys, phy_offset, store_timestamp"
                f"[, unique_key[, transaction_type]]), got {len(row)} fields"
            )
        topic, keys, phy_offset, store_timestamp = row[:4]
        unique_key = row[4] if len(row) > 4 else None
        transaction_type = operator.index(row[5]) if len(row) > 5 else 0
        _check_str("topic", topic)
        phy_offset = operator.index(phy_offset)
        store_timestamp = operator.index(store_timestamp)
        if not 0 <= phy_offset <= _INT64_MAX:
            raise InvalidMessageError(f"CommitLog offset {phy_offset} is outside 0 .. 2**63-1")
        if not -_INT64_MAX - 1 <= store_timestamp <= _INT64_MAX:
            raise InvalidMessageError(f"store timestamp {store_timestamp} does not fit a Java long")
        index_keys: list[str] = []
        if (transaction_type & SYSFLAG_TRANSACTION_MASK) == TRANSACTION_ROLLBACK_TYPE:
            return index_keys, phy_offset, store_timestamp
        if unique_key is not None:
            index_keys.append(topic + "#" + _check_str("unique_key", unique_key))
        if keys is not None:
            for token in _check_str("keys", keys).split(KEY_SEPARATOR):
                if token:
                    index_keys.append(topic + "#" + token)
        return index_keys, phy_offset, store_timestamp

    def _build_one(self, keys: list[str], phy_offset: int, store_timestamp: int, finished: list[int]) -> None:
        last = self._files[-1] if self._files else None
        if last is not None and self._already_indexed(last, phy_offset):
            return
        if last is None:
            last = self._create_file(None)
        pending = keys
        while True:
            self._reserve(last, len(pending))
            stored = last.index.put_keys(pending, phy_offset, store_timestamp)
            if stored:
                last.dirty = True
            if stored == len(pending):
                return
            pending = pending[stored:]
            last = self._roll(last, finished)

    @staticmethod
    def _already_indexed(last: MappedIndexFile, phy_offset: Any) -> Any:
        """Whether the record at ``phy_offset`` (an int, or a numpy array of them: a mask) is
        indexed in ``last`` already."""
        end = last.end_phy_offset
        # Java skips only offset < endPhyOffset, so re-dispatching the newest indexed record adds
        # its keys twice. A record spills into a new file only when this one fills, so when the
        # last file has items and room left, the record at endPhyOffset has all its keys indexed:
        # skip it too. A full last file (its successor deleted after a crash) or an empty rolled
        # one may lack that record's spilled keys: index it again, as Java does (duplicates are
        # only extra candidates; lost keys would be unfindable).
        room_left = last.index_count > 1 and not last.is_full
        return (phy_offset < end) | ((phy_offset == end) & room_left)

    def _roll(self, full: MappedIndexFile, finished: list[int]) -> MappedIndexFile:
        """Start a new file where ``full`` ended; msync ``full`` and record its end timestamp."""
        new = self._create_file(full)
        full.flush()
        finished.append(full.end_timestamp)
        return new

    def build_refs(self, buffer: Any, base_offset: int, records: np.ndarray, keys: Any) -> Optional[int]:
        """Index the keys a dispatch extracted from a batch of records (the hot path).

        ``records`` (``RECORD_DTYPE``) were decoded from ``buffer``, which starts at CommitLog
        offset ``base_offset``; ``keys`` (``KEYREF_DTYPE``, from the codec's ``dispatch_info``)
        locate each record's index keys in it, UNIQ_KEY first. Records already indexed are
        skipped as in :meth:`build_index`; the twin's ``IndexFile.put_refs`` stores the rest,
        rolling to new files as they fill. Returns what :meth:`build_many` returns.
        """
        finished: list[int] = []
        with self._lock:
            self._check_writable()
            if not len(keys):
                return None
            last = self._files[-1] if self._files else None
            if last is None:
                last = self._create_file(None)
            elif len(records) == 1:  # one record (a follower's catch-up): its keys go together
                if self._already_indexed(last, base_offset + int(records[0]["position"])):
                    return None
            else:
                skip = self._already_indexed(last, base_offset + records["position"][keys["record"]])
                if skip.any():
                    keys = keys[~skip]
            start, n = 0, len(keys)
            while start < n:
                self._reserve(last, n - start)
                stored = last.index.put_refs(buffer, records, keys, base_offset, start)
                if stored > start:
                    last.dirty = True
                start = stored
                if start < n:
                    last = self._roll(last, finished)
        return self._report_full(finished)

    @property
    def lock(self) -> Any:
        """Held while keys are stored: :mod:`rocketstore.queues.fused` holds it around its C pass."""
        return self._lock

    def tail_window(self) -> Optional[tuple[MappedIndexFile, int]]:
        """The last file and the item count up to which keys may be stored in it without
        :meth:`build_refs`' rolling (its allocated room), for the fused dispatch (the caller
        holds :attr:`lock`; it also skips the keys :meth:`build_refs` would skip as indexed
        already); None when there is no file yet, or the service is closed or read-only."""
        if self._closed or self.read_only or not self._loaded or not self._files:
            return None
        last = self._files[-1]
        if not last.is_full:
            self._reserve(last, _WINDOW_ITEMS)  # more than a record's keys: a window is never too small
        return last, min(last.reserved, self.index_count)

    def _reserve(self, f: MappedIndexFile, items: int) -> None:
        """Allocate the blocks the next ``items`` items will be written into, ahead of the writer.

        The files are sparse and written through the map: on a full disk a store into a hole
        is a SIGBUS. The items region is written in order, so its blocks are allocated a stretch
        ahead. The header and the slot table (20 MB of RocketMQ's 420, written at random) are
        allocated when a file is created; for a file loaded from disk (perhaps made sparse by
        another writer) the first call allocates them (a no-op when they are). A full disk
        becomes a :class:`DiskFullError`.
        """
        want = min(f.index_count + items, self.index_count)
        if want <= f.reserved:
            return
        items_start = _HEADER_SIZE + self.slot_count * _SLOT_SIZE
        if f.reserved == 0:
            allocate_range(f.mapped.fd, 0, items_start)
        target = min(self.index_count, max(want, f.reserved + _RESERVE_ITEMS))
        allocate_range(f.mapped.fd, items_start + f.reserved * _ITEM_SIZE, (target - f.reserved) * _ITEM_SIZE)
        f.reserved = target

    def _make_directory(self) -> None:
        os.makedirs(self.directory, exist_ok=True)

    def _create_file(self, previous: Optional[MappedIndexFile]) -> MappedIndexFile:
        self._make_directory()
        last_name = self._files[-1].name if self._files else None
        for name in self._candidate_names(last_name):
            path = os.path.join(self.directory, name)
            try:
                f = self._map(path, create=True)
            except SegmentError as exc:
                if exc.errno == errno.EEXIST:
                    continue  # a stray file holds the name: bump the time
                raise
            if previous is not None:
                try:
                    f.index.init_from(previous.index)
                except BaseException:
                    f.destroy()
                    raise
            self._files.append(f)
            return f
        raise SegmentError(errno.EEXIST, "no free index file name after the last one", last_name)

    def _candidate_names(self, last_name: Optional[str]) -> Iterator[str]:
        """Names for a file created now, each later than ``last_name``: the current time, bumped by
        1 ms while it collides or does not sort after the last file (clock set back, two files in
        one millisecond). The second run skips an hour, for a DST fall-back boundary."""
        start = now_ms()
        bases = [start]
        if last_name is not None:
            last_ms = self._index.parse_index_file_name(last_name)
            bases = [max(start, last_ms + 1), last_ms + 1 + _HOUR_MS]
        for base in bases:
            for bump in range(_NAME_TRIES):
                name = self._index.index_file_name(base + bump)
                if last_name is None or name > last_name:
                    yield name

    # -- querying -----------------------------------------------------------------------------
    def walk_key(self, full_key: str, cap: int, begin: int, end: int) -> Optional[list[int]]:
        """The CommitLog offsets indexed under ``full_key`` (``topic#key``) and stored within
        ``[begin, end]`` (ms), at most ``cap``, walked under the lock without the argument
        checks of :meth:`query`; None once the service is closed."""
        with self._lock:
            if self._closed:
                return None
            offsets: list[int] = self._index.select_files(self._files, full_key, cap, begin, end)[0]
            return offsets

    def query(
        self, topic: str, key: str, max_num: int = 32, begin: int = 0, end: int = _INT64_MAX
    ) -> tuple[list[int], int, int]:
        """§5.5 ``queryOffset``: CommitLog offsets of records indexed under ``topic#key`` and stored
        within ``[begin, end]`` (ms).

        At most ``max_num`` offsets, collected newest file first, are returned sorted
        ascending, with the newest file's end timestamp and endPhyOffset (``indexLastUpdate*``;
        0, 0 without files). The walk stops at the first file that begins before ``begin`` or once
        enough offsets are found. These are candidates: re-check each record's key and topic.
        """
        _check_str("topic", topic)
        _check_str("key", key)
        max_num = operator.index(max_num)
        begin = operator.index(begin)
        end = operator.index(end)
        with self._lock:
            self._check_open()
            found: tuple[list[int], int, int] = self._index.select_files(
                self._files, topic + "#" + key, max_num, begin, end
            )
            return found

    # -- retention and lifetime ---------------------------------------------------------------
    def delete_expired(self, min_phy_offset: int) -> int:
        """§5.4 ``deleteExpiredFile``: delete files from the front while their endPhyOffset <
        ``min_phy_offset``; never the last file. Returns the number of files deleted."""
        min_phy_offset = operator.index(min_phy_offset)
        deleted = 0
        with self._lock:
            self._check_writable()
            while len(self._files) > 1 and self._files[0].end_phy_offset < min_phy_offset:
                self._files.pop(0).destroy()
                deleted += 1
        return deleted

    def drop_after(self, phy_offset: int) -> int:
        """Delete files from the newest back while they index a record at or past ``phy_offset``
        (what a CommitLog cut at ``phy_offset`` by recovery no longer holds); re-dispatch rebuilds
        their entries. Returns the number of files deleted."""
        phy_offset = operator.index(phy_offset)
        deleted = 0
        with self._lock:
            self._check_writable()
            while (
                self._files
                and self._files[-1].index_count > 1
                and self._files[-1].end_phy_offset >= phy_offset
            ):
                self._files.pop().destroy()
                deleted += 1
        return deleted

    @property
    def files(self) -> list[MappedIndexFile]:
        """The index files, oldest first (a copy of the list)."""
        with self._lock:
            return list(self._files)

    def flush(self) -> bool:
        """msync every file written since its last flush; True if any was."""
        with self._lock:
            if self._closed or self.read_only:
                return False
            flushed = False
            for f in self._files:
                if f.dirty:
                    f.flush()
                    flushed = True
            return flushed

    def close(self) -> None:
        """Flush (as 5.x does at shutdown) and unmap every file; idempotent."""
        with self._lock:
            if self._closed:
                return
            try:
                self.flush()
            finally:
                self._closed = True
                self._close_files()

    def destroy(self) -> None:
        """Delete every index file and the ``index`` directory (Java ``IndexService.destroy``).

        The service stays open and empty: the next build creates a new file.
        """
        with self._lock:
            self._check_writable()
            while self._files:
                self._files.pop().destroy()
            try:
                os.rmdir(self.directory)
            except OSError:
                pass  # absent, or holds files that are not ours

    def _close_files(self) -> None:
        files, self._files = self._files, []
        for f in files:
            f.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"index service {self.directory} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.read_only:
            raise StoreReadOnlyError(f"index service {self.directory} is read-only")
        if not self._loaded:
            raise RuntimeError("call IndexService.load() before building or deleting")

    def __enter__(self) -> IndexService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._files)} files"
        mode = " read-only" if self.read_only else ""
        return f"<IndexService {self.directory}{mode} {state}>"
