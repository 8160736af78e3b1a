"""``MessageStore``: a store root laid out as RocketMQ's (spec §0), opened like a database.

::

    <root>/commitlog/<20-digit start offset>   segments of commitlog_file_size bytes
    <root>/config/topics.json                  topics and their queue counts (fastjson layout)
    <root>/checkpoint                          4096 bytes (§6)
    <root>/abort                               exists while open for writing / after a crash
    <root>/lock                                exclusive lock of the one writer

Opening for writing takes the lock, scans the CommitLog from its first segment with CRC checks
to find the end of valid data (records past it are cut off and zeroed), rebuilds the
per-queue offset table, and starts the flush threads. A read-only open writes nothing.
"""

from __future__ import annotations

import fcntl
import os
import random
import threading
from typing import Iterator, Mapping, Optional, Sequence

import numpy as np

from rocketstore import _impl
from rocketstore.checkpoint import Checkpoint
from rocketstore.config import SYNC_FLUSH, StoreConfig, default_store_path
from rocketstore.configfiles import TopicConfigTable
from rocketstore.errors import (CorruptRecordError, InvalidMessageError, InvalidMessageIdError,
                                MessageNotFoundError, StoreClosedError,
                                StoreConfigError, StoreLockedError, StoreReadOnlyError)
from rocketstore.mapped_file import MappedFileQueue
from rocketstore.message import (PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, PROPERTY_WAIT,
                                 Message, MessageExt, host_to_bytes, validate_topic)

__all__ = ["MessageStore", "open_store"]

_TX_MASK = 0x0C
SCAN_CHUNK = 65536  # records per decode_batch call when scanning
_WAIT_FUTURE = 2    # the core's wait argument for a PutFuture (both twins' WAIT_FUTURE)
_TX_NOT_CONSUMING = (0x04, 0x0C)  # PREPARED, ROLLBACK: written with queue offset 0


# Store directories this process holds the write lock of, by (st_dev, st_ino). POSIX record
# locks belong to the process and vanish when ANY descriptor of the file is closed, so a second
# open in this process must be refused before it opens (and later closes) the lock file.
_LOCKED_DIRS: set = set()
_LOCKED_DIRS_MUTEX = threading.Lock()


def _detect_segment_size(directory: str) -> Optional[int]:
    try:
        sizes = {os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory)
                 if len(n) == 20 and n.isdigit()}
    except OSError:
        return None
    sizes.discard(0)
    return sizes.pop() if len(sizes) == 1 else None


class _ReadOnlyCore:
    """Stands in for the append core of a read-only store: every write raises."""

    def _refuse(self, *args, **kwargs):
        raise StoreReadOnlyError("the store was opened read-only")

    put = put_batch = put_many = flush = _refuse


class MessageStore:
    """An embedded RocketMQ-format message store rooted at ``path`` (default ``~/store``).

    >>> with MessageStore("/tmp/demo-store") as store:          # doctest: +SKIP
    ...     result = store.put("TopicTest", b"hello", tags="TagA", keys="order-1")
    ...     store.read(result.commitlog_offset).body
    b'hello'

    Keyword options are those of :class:`rocketstore.StoreConfig`. ``read_only=True`` never writes
    a byte nor takes the lock. ``implementation`` pins the twin ("c" or "py"; default: compiled
    when built). Thread-safe: any number of threads may put and read at once.
    """

    def __init__(self, path: Optional[str | os.PathLike] = None, *, read_only: bool = False,
                 implementation: Optional[str] = None, **options):
        self.path = os.path.abspath(os.fspath(path) if path is not None else default_store_path())
        self.read_only = read_only
        self._impl = _impl.get(implementation)
        self._codec = self._impl.codec
        self._closed = True
        self._lock_fd = -1
        self._core = None
        self._mutex = threading.RLock()
        commitlog_dir = os.path.join(self.path, "commitlog")
        if "commitlog_file_size" not in options:
            detected = _detect_segment_size(commitlog_dir)
            if detected is not None:
                options["commitlog_file_size"] = detected
        self.config = StoreConfig(**options)
        if read_only and not os.path.isdir(self.path):
            raise FileNotFoundError(f"no store at {self.path}")
        if not read_only:
            os.makedirs(os.path.join(self.path, "config"), exist_ok=True)
            self._take_lock()
        try:
            self._open(commitlog_dir)
        except BaseException:
            if getattr(self, "_core", None) is not None and not read_only:
                self._core.close()
            if getattr(self, "_segments", None) is not None:
                self._segments.close()
            self._release_lock()
            raise
        self._closed = False

    # ---- open / close ----

    def _take_lock(self) -> None:
        path = os.path.join(self.path, "lock")
        st = os.stat(self.path)
        key = (st.st_dev, st.st_ino)
        with _LOCKED_DIRS_MUTEX:
            if key in _LOCKED_DIRS:
                raise StoreLockedError(f"store {self.path} is already open for writing in this process")
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            try:
                # flock for other processes using flock; the POSIX lock on byte 0 is the one a
                # Java broker (FileChannel.tryLock) takes, so each side sees the other.
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            except OSError:
                os.close(fd)
                raise StoreLockedError(
                    f"store {self.path} is locked by another writer (lock file {path})") from None
            os.pwrite(fd, b"lock", 0)
            self._lock_fd = fd
            self._lock_key = key
            _LOCKED_DIRS.add(key)

    def _release_lock(self) -> None:
        if self._lock_fd >= 0:
            with _LOCKED_DIRS_MUTEX:
                os.close(self._lock_fd)  # closing releases both locks
                self._lock_fd = -1
                _LOCKED_DIRS.discard(self._lock_key)

    def _open(self, commitlog_dir: str) -> None:
        cfg = self.config
        self._abort_path = os.path.join(self.path, "abort")
        self.last_shutdown_clean = not os.path.exists(self._abort_path)
        self._checkpoint = Checkpoint(os.path.join(self.path, "checkpoint"))
        self._topics = TopicConfigTable.open(os.path.join(self.path, "config", "topics.json"),
                                             cfg.default_queues, self.read_only)
        # Sparse segments where the compiled core populates pages before every store (no SIGBUS
        # on a full disk); fallocated segments otherwise.
        preallocate = not getattr(self._impl.store, "POPULATE_WRITE", False)
        self._segments = MappedFileQueue(commitlog_dir, cfg.commitlog_file_size,
                                         read_only=self.read_only, preallocate=preallocate)
        self._segments.load()
        end, queue_offsets = self._recover()
        self._end = end
        if self.read_only:
            self._queue_offsets = queue_offsets
            self._core = _ReadOnlyCore()
            return

        store_raw = host_to_bytes(cfg.store_host)
        born_raw = host_to_bytes(cfg.born_host)
        pid = os.getpid() & 0xFFFF
        uniq_prefix = born_raw + pid.to_bytes(2, "big") + random.getrandbits(32).to_bytes(4, "big")
        self._core = self._impl.store.CommitLogCore(
            file_size=cfg.commitlog_file_size, start_offset=end, store_host=store_raw,
            store_port=cfg.store_port, born_host=born_raw, born_port=cfg.born_port,
            uniq_prefix=uniq_prefix, max_message_size=cfg.max_message_size,
            topic_lookup=self._topic_queues, roll=self._roll,
            flush_interval_ms=cfg.flush_interval_ms, flush_least_pages=cfg.flush_least_pages,
            flush_thorough_ms=cfg.flush_thorough_interval_ms, prefault_bytes=cfg.prefault_bytes,
            sync_flush_timeout_ms=cfg.sync_flush_timeout_ms, default_wait=1 if cfg.flush_disk_type == SYNC_FLUSH else 0)
        for (topic, qid), nxt in queue_offsets.items():
            self._core.set_queue_offset(topic, qid, nxt)
        segment = self._segments.find(end)
        if segment is not None:
            self._core.set_active(segment.mm, segment.file_from_offset, end - segment.file_from_offset,
                                  segment.fd)
        with open(self._abort_path, "wb"):
            pass

    def _recover(self):
        """Scan every segment with CRC checks; cut the CommitLog at the first invalid record.

        Returns (end offset, {(topic, queue_id): next queue offset}).
        """
        codec = self._codec
        size = self.config.commitlog_file_size
        files = self._segments.files
        end = files[0].file_from_offset if files else 0
        queue_max: dict = {}
        for mf in files:
            for arr, stop, reason in self._decode_chunks(mf.mm, 0, size, check_crc=True):
                if len(arr):
                    self._collect_queue_offsets(mf.mm, arr, queue_max)
            mf.wrote_position = stop
            if reason == codec.STOP_BLANK:
                end = mf.end_offset
                continue
            end = mf.file_from_offset + stop
            break
        if not self.read_only:
            self._truncate_to(end)
        return end, {key: q + 1 for key, q in queue_max.items()}

    def _decode_chunks(self, buffer, lo: int, hi: int, *, check_crc: bool):
        """decode_batch over [lo, hi) in chunks of at most SCAN_CHUNK records (bounded memory).

        Yields (records, stop, reason); the last chunk's stop/reason say where and why it ended.
        """
        decode_batch, limit = self._codec.decode_batch, self._codec.STOP_LIMIT
        while True:
            arr, stop, reason = decode_batch(buffer, lo, hi, check_crc=check_crc, max_records=SCAN_CHUNK)
            yield arr, stop, reason
            if reason != limit or stop >= hi or not len(arr):
                return
            lo = stop

    def _collect_queue_offsets(self, buffer, arr, queue_max) -> None:
        keep = ~np.isin(arr["sys_flag"] & _TX_MASK, _TX_NOT_CONSUMING)
        arr = arr[keep]
        if not len(arr):
            return
        raw = np.frombuffer(buffer, dtype=np.uint8)
        width = max(int(arr["topic_len"].max()), 1)
        cols = np.arange(width)
        idx = arr["topic_pos"][:, None] + cols
        np.minimum(idx, len(raw) - 1, out=idx)
        names = raw[idx]
        names[cols >= arr["topic_len"][:, None]] = 0
        # Group by (topic, queue) through a 64-bit FNV-1a hash of the topic bytes (a sort of
        # integers, not of byte strings), then check each group really holds one topic.
        h = np.full(len(arr), 0xCBF29CE484222325, dtype=np.uint64)
        with np.errstate(over="ignore"):
            for c in range(width):
                h ^= names[:, c].astype(np.uint64)
                h *= np.uint64(0x100000001B3)
            key = h ^ (arr["queue_id"].astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
        uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        inverse = inverse.ravel()
        if not (np.array_equal(names, names[first][inverse])
                and np.array_equal(arr["queue_id"], arr["queue_id"][first][inverse])):
            raise StoreConfigError("topic hash collision while rebuilding queue offsets")  # pragma: no cover
        best = np.full(len(uniq), -1, dtype=np.int64)
        np.maximum.at(best, inverse, arr["queue_offset"])
        for row, q in zip(first, best):
            topic = names[row][:arr["topic_len"][row]].tobytes().decode("utf-8", "surrogateescape")
            k = (topic, int(arr["queue_id"][row]))
            if q > queue_max.get(k, -1):
                queue_max[k] = int(q)

    def _truncate_to(self, end: int) -> None:
        """Drop segments past ``end`` and zero the dirty tail after it (nothing stale survives)."""
        self._segments.truncate_after(end)
        mf = self._segments.find(end)
        if mf is None:
            return
        pos = end - mf.file_from_offset
        chunk = 1 << 20
        mm = mf.mm
        while pos < mf.file_size:
            n = min(chunk, mf.file_size - pos)
            if mm[pos:pos + n].count(0) == n:
                break  # zero from here: preallocated space the writer never reached
            mm[pos:pos + n] = bytes(n)
            pos += n
        mf.flush(end - mf.file_from_offset, pos)

    def _topic_queues(self, topic: str) -> int:
        validate_topic(topic)
        with self._mutex:
            queues = self._topics.queues(topic)
            if not queues:
                queues = self.config.default_queues
                self._topics.create(topic, queues)
                self._topics.persist()
            return queues

    def _roll(self, start: int):
        mf = self._segments.segment_at(start)
        core = self._core
        self._segments.prepare_next(
            on_ready=lambda nxt: core.add_segment(nxt.mm, nxt.file_from_offset, nxt.fd))
        return mf.mm, mf.fd

    def close(self) -> None:
        """Flush everything, write the checkpoint, remove the abort file and release the lock."""
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            if not self.read_only and self._core is not None:
                self._core.close()
                last = self._core.last_store_timestamp
                if last:
                    self._checkpoint.physic_msg_timestamp = last
                    self._checkpoint.logics_msg_timestamp = last
                self._checkpoint.flush()
                self._topics.persist()
            self._segments.close()
            if not self.read_only:
                try:
                    os.unlink(self._abort_path)
                except FileNotFoundError:
                    pass
            self._release_lock()

    def __enter__(self) -> "MessageStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("the store is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.read_only:
            raise StoreReadOnlyError("the store was opened read-only")

    # ---- topics ----

    def create_topic(self, topic: str, queues: Optional[int] = None) -> None:
        """Create ``topic`` with ``queues`` queues (default ``default_queues``), or change its count."""
        self._check_writable()
        validate_topic(topic)
        queues = self.config.default_queues if queues is None else queues
        if not isinstance(queues, int) or not 1 <= queues <= 1024:
            raise InvalidMessageError("queues must be an int between 1 and 1024")
        with self._mutex:
            self._topics.create(topic, queues)
            self._topics.persist()
            self._core.forget_topic(topic)

    @property
    def topics(self) -> dict[str, int]:
        """{topic: queue count}."""
        return {t: self._topics.queues(t) for t in self._topics.topics}

    # ---- puts ----

    def _properties(self, tags, keys, properties) -> tuple[Optional[bytes], Optional[str], int]:
        """(encoded properties, the caller's UNIQ_KEY or None, wait override or -1)."""
        props = dict(properties) if properties else {}
        if tags is not None:
            props[PROPERTY_TAGS] = tags
        if keys is not None:
            props[PROPERTY_KEYS] = keys if isinstance(keys, str) else " ".join(keys)
        wait = -1
        if props.get(PROPERTY_WAIT) == "false":
            wait = 0
        unique_key = props.get(PROPERTY_UNIQ_KEY)
        return self._codec.encode_properties(props), unique_key, wait

    def _wait_mode(self, durable, wait_override) -> int:
        """The core's wait argument: -1 lets the core apply the store's flush_disk_type."""
        if durable is not None:
            return 1 if durable else 0
        return wait_override

    def put(self, topic, body=None, *, tags: Optional[str] = None, keys=None,
            properties: Optional[Mapping[str, str]] = None, queue_id: int = -1, flag: int = 0,
            durable: Optional[bool] = None):
        """Store one message; returns a :class:`PutResult`.

        ``topic`` may be a :class:`Message` (then leave the other arguments out). ``keys`` is a
        string of space-separated keys or a sequence of keys. ``durable=True`` waits for group
        commit (status FLUSH_DISK_TIMEOUT if the flush does not confirm in time; the message is
        stored either way); ``None`` follows ``flush_disk_type``.
        """
        if tags is None and keys is None and properties is None and body is not None:
            # the hot path: one call into the core (-1: the store's flush_disk_type decides)
            return self._core.put(topic, body, None, queue_id, flag, 0, 0, 0, 0, None,
                                  -1 if durable is None else (1 if durable else 0))
        if body is None:
            return self._put_message(topic, durable, 0)
        return self._put(topic, body, tags, keys, properties, queue_id, flag, durable, 0)

    def put_pipelined(self, topic, body=None, *, tags: Optional[str] = None, keys=None,
                      properties: Optional[Mapping[str, str]] = None, queue_id: int = -1,
                      flag: int = 0):
        """Store one message durably without blocking: returns a :class:`PutFuture`.

        The future resolves when the flush thread's group commit covers the message, so one
        thread can keep thousands of durable puts in flight. Arguments as for :meth:`put`.
        """
        if body is None:
            return self._put_message(topic, True, _WAIT_FUTURE)
        return self._put(topic, body, tags, keys, properties, queue_id, flag, True, _WAIT_FUTURE)

    def _put(self, topic, body, tags, keys, properties, queue_id, flag, durable, mode):
        """One put through the core; ``mode`` _WAIT_FUTURE for a future, else 0 (by ``durable``)."""
        if tags is None and keys is None and properties is None:
            props, unique_key, wait = None, None, -1
        else:
            props, unique_key, wait = self._properties(tags, keys, properties)
        return self._core.put(topic, body, props, queue_id, flag, 0, 0, 0, 0, unique_key,
                              mode or self._wait_mode(durable, wait))

    def _message_item(self, m: Message):
        if not isinstance(m, Message):
            raise TypeError(f"expected a Message, not {type(m).__name__}")
        props, unique_key, wait = self._properties(m.tags, m.keys, m.properties)
        body = m.body if isinstance(m.body, bytes) else bytes(m.body)
        return (m.topic, body, props, m.queue_id, m.flag, m.born_timestamp, m.sys_flag,
                m.reconsume_times, unique_key), wait

    def _put_message(self, m, durable, mode):
        self._check_writable()
        (topic, body, props, qid, flag, born, sys_flag, reconsume, unique_key), wait = self._message_item(m)
        wait_mode = mode or self._wait_mode(durable, wait)
        return self._core.put(topic, body, props, qid, flag, born, sys_flag, reconsume, 0,
                              unique_key, wait_mode)

    def put_batch(self, topic, bodies, *, lengths=None, tags: Optional[str] = None,
                  properties: Optional[Mapping[str, str]] = None, queue_id: int = -1, flag: int = 0,
                  durable: Optional[bool] = None, pipelined: bool = False):
        """Store many messages of one topic and queue in one call under one lock.

        ``bodies``: a sequence of bytes-like objects, or one buffer (bytes, numpy array, ...) cut
        into bodies by ``lengths``. Tags and properties are shared; each message gets its own
        UNIQ_KEY and consecutive queue offsets. Returns a :class:`BatchPutResult` (or a
        :class:`PutFuture` of it with ``pipelined=True``). Everything is validated first: a bad
        message raises and nothing of the batch is written.
        """
        self._check_writable()
        props = None
        if tags is not None or properties:
            props, unique_key, _ = self._properties(tags, None, properties)
            if unique_key is not None:
                raise InvalidMessageError("a batch's shared properties cannot carry one UNIQ_KEY")
        wait = _WAIT_FUTURE if pipelined else self._wait_mode(durable, -1)
        return self._core.put_batch(topic, bodies, lengths, props, queue_id, flag, 0, 0, wait)

    def put_messages(self, messages: Sequence[Message], *, durable: Optional[bool] = None):
        """Store :class:`Message` objects of any topics under one lock; returns a list of results.

        Every message is validated before the first is written.
        """
        self._check_writable()
        items = []
        waits = []
        for m in messages:
            item, wait = self._message_item(m)
            items.append(item)
            waits.append(wait)
        mode = self._wait_mode(durable, 0 if waits and all(w == 0 for w in waits) else -1)
        return self._core.put_many(items, mode)

    # ---- reads ----

    def _readable_end(self, mf) -> int:
        """How much of segment ``mf`` holds complete records."""
        if self.read_only:
            return mf.wrote_position
        wrote = self._core.wrote_offset
        return max(0, min(mf.file_size, wrote - mf.file_from_offset))

    def read(self, commitlog_offset: int, *, zero_copy: bool = False) -> MessageExt:
        """The message at a CommitLog offset (``MessageNotFoundError`` if none starts there).

        ``zero_copy=True``: ``body`` is a read-only memoryview into the segment map, valid for
        as long as you hold it (the map is not unmapped while it lives, even after close()).
        """
        self._check_open()
        if not isinstance(commitlog_offset, (int, np.integer)) or commitlog_offset < 0:
            raise MessageNotFoundError(f"no message at commitlog offset {commitlog_offset!r}")
        mf = self._segments.find(int(commitlog_offset))
        if mf is None:
            raise MessageNotFoundError(f"no message at commitlog offset {commitlog_offset}")
        end = self._readable_end(mf)
        pos = int(commitlog_offset) - mf.file_from_offset
        if pos >= end:
            raise MessageNotFoundError(f"no message at commitlog offset {commitlog_offset}")
        try:
            return self._codec.decode_record(mf.view(0, end), pos, check_crc=True, copy_body=not zero_copy)
        except CorruptRecordError as exc:
            raise MessageNotFoundError(f"no message at commitlog offset {commitlog_offset}: {exc}") from None

    def get_by_msg_id(self, msg_id: str, *, zero_copy: bool = False) -> MessageExt:
        """The message with this offsetMsgId (§3.1): 32 hex characters (IPv4) or 56 (IPv6)."""
        if not isinstance(msg_id, str):
            raise InvalidMessageIdError(f"message id must be a str, not {type(msg_id).__name__}")
        _host, _port, offset = self._codec.parse_offset_msg_id(msg_id)
        msg = self.read(offset, zero_copy=zero_copy)
        if msg.msg_id != msg_id.upper():
            raise MessageNotFoundError(f"message {msg_id} is not in this store")
        return msg

    def iter_messages(self, start: Optional[int] = None, end: Optional[int] = None, *,
                      zero_copy: bool = False) -> Iterator[MessageExt]:
        """Messages in CommitLog order from offset ``start`` (default: the first) up to ``end``."""
        self._check_open()
        for mf, arr in self._scan(start, end):
            view = mf.view(0, self._readable_end(mf))
            for row in arr:
                yield self._codec.record_from_row(view, row, copy_body=not zero_copy)

    def scan(self, start: Optional[int] = None, end: Optional[int] = None):
        """Columnar scan: yields ``(segment_start, records)`` with ``records`` a numpy array of up to
        65536 ``RECORD_DTYPE`` rows (positions relative to the segment), decoded in C without a
        Python call per field."""
        self._check_open()
        for mf, arr in self._scan(start, end):
            yield mf.file_from_offset, arr

    def _scan(self, start, end):
        files = list(self._segments.files)
        if not files:
            return
        start = files[0].file_from_offset if start is None else start
        for mf in files:
            if mf.end_offset <= start:
                continue
            if end is not None and mf.file_from_offset >= end:
                break
            limit = self._readable_end(mf)
            lo = max(0, start - mf.file_from_offset)
            if lo >= limit:
                break
            hi = limit if end is None else min(limit, end - mf.file_from_offset)
            for arr, stop, reason in self._decode_chunks(mf.view(0, limit), lo, hi, check_crc=False):
                if len(arr):
                    yield mf, arr
            if reason != self._codec.STOP_BLANK and stop < limit:
                break

    # ---- durability, state ----

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Make everything put so far durable; True when done within ``timeout`` seconds."""
        self._check_writable()
        return self._core.flush(-1 if timeout is None else int(timeout * 1000))

    @property
    def min_offset(self) -> int:
        return self._segments.min_offset

    @property
    def max_offset(self) -> int:
        """The CommitLog offset just past the last record."""
        return self._end if self.read_only else self._core.wrote_offset

    @property
    def flushed_offset(self) -> int:
        return self._end if self.read_only else self._core.flushed_offset

    def queue_offsets(self) -> dict:
        """{(topic, queue_id): next queue offset}."""
        if self.read_only:
            return dict(self._queue_offsets)
        return self._core.queue_offsets()

    def stats(self) -> dict:
        """Counters and sizes: puts, flush rounds (fsyncs), durable waits, offsets, segments."""
        self._check_open()
        out = {
            "implementation": self._impl.name,
            "segments": len(self._segments.files),
            "segment_size": self.config.commitlog_file_size,
            "min_offset": self.min_offset,
            "max_offset": self.max_offset,
            "topics": len(self._topics.topics),
        }
        if not self.read_only:
            out.update(self._core.stats())
        return out

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("read-only" if self.read_only else "open")
        return f"<MessageStore {self.path!r} {state} impl={self._impl.name}>"


def open_store(path: Optional[str | os.PathLike] = None, **options) -> MessageStore:
    """``MessageStore(path, **options)``."""
    return MessageStore(path, **options)
