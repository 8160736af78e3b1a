"""CommitLogCore, the pure append core: its segments, the append path of one record (checks,
UNIQ_KEY, the record packed into the segment's map, the BLANK rule), put and an inner batch
record, the flush waits and close. Its topics, the shared append table and the batch puts are
functions of it in _topics_py, _shared_py and _batches_py.

Part of the pure-Python twin of ``rocketstore.log._store``, gathered by
:mod:`rocketstore.log._store_py`; the compiled twin's is cext/store/core.pxi, append.pxi, segments.pxi.
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from typing import Any

from rocketstore.base._checks import contiguous
from rocketstore.base._clock import month_bounds
from rocketstore.base._clock import now_ms as _now_ms
from rocketstore.errors import (
    InvalidQueueIdError,
    MessageTooLargeError,
    PropertiesTooLargeError,
    SegmentError,
    StoreClosedError,
    not_stored,
)
from rocketstore.files._flushwatch import FlushWatcher
from rocketstore.files.mapped_file import flush_timeout
from rocketstore.format._verify import PROP_CRC_LENGTH, prop_crc_digits
from rocketstore.log import _batches_py as batches
from rocketstore.log import _shared_py as sharing
from rocketstore.log import _topics_py as topics
from rocketstore.log import sharedappend as _ap
from rocketstore.log._flusher_py import Flusher
from rocketstore.log._keyed_py import MAX_PROPERTIES_LENGTH, body_crc, keyed_properties
from rocketstore.log._live_py import live_publish, live_word
from rocketstore.log._results_py import PutFuture, put_result
from rocketstore.log._shared_py import FORKS, appending
from rocketstore.log._topics_py import topic_entry
from rocketstore.log.coreargs import check_core_args
from rocketstore.status import PutStatus

#: The pure twin does not pre-fault: its segments are always fallocated (see the compiled twin).
POPULATE_WRITE = False

#: sysFlag of a RocketMQ 5.x inner batch record: INNER_BATCH | NEED_UNWRAP
_SYSFLAG_INNER_BATCH = 0x0C0

WAIT_NONE = 0
WAIT_BLOCK = 1
WAIT_FUTURE = 2

MAGIC_V1 = -626843481
MAGIC_BLANK = -875286124
END_FILE_MIN_BLANK = 8
SYSFLAG_TRANSACTION_MASK = 0x0C
TRANSACTION_PREPARED = 0x04
TRANSACTION_ROLLBACK = 0x0C
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20
_UNIQ_NAME = b"UNIQ_KEY\x01"
_BLANK = struct.Struct(">ii")
_CREATE_MAPPED_FILE_FAILED = PutStatus.CREATE_MAPPED_FILE_FAILED
_SERVICE_NOT_AVAILABLE = PutStatus.SERVICE_NOT_AVAILABLE


def _record_struct(born_len: int, store_len: int) -> struct.Struct:
    # TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG BORNTIMESTAMP
    # BORNHOST(+port) STORETIMESTAMP STOREHOST(+port) RECONSUMETIMES PREPAREDOFFSET BODYLEN
    return struct.Struct(f">iiiiiqqiq{born_len}siq{store_len}siiqi")


_PROP_CRC_NAME = b"__CRC32#\x01"
_PROP_CRC_RESERVED = _PROP_CRC_NAME + b"0" * 10 + b"\x02"


class CommitLogCore:
    """The append path of one CommitLog. See the module docstring; not for direct use."""

    def __init__(
        self,
        *,
        file_size,
        start_offset,
        store_host,
        store_port,
        born_host,
        born_port,
        uniq_prefix,
        max_message_size,
        topic_lookup,
        roll,
        flush_interval_ms=500,
        flush_least_pages=4,
        flush_thorough_ms=10000,
        prefault_bytes=0,
        sync_flush_timeout_ms=5000,
        default_wait=0,
    ):
        check_core_args(file_size, store_host, born_host, uniq_prefix)
        self._file_size = file_size
        self._max_message_size = max_message_size
        self._sync_flush_timeout_ms = sync_flush_timeout_ms
        self._default_wait = default_wait
        self._store_host = bytes(store_host)
        self._store_port = store_port
        self._born_host = bytes(born_host)
        self._born_port = born_port
        self._host_sysflag = (SYSFLAG_STOREHOST_V6 if len(store_host) == 16 else 0) | (
            SYSFLAG_BORNHOST_V6 if len(born_host) == 16 else 0
        )
        self._struct = _record_struct(len(born_host), len(store_host))
        self._uniq_prefix = bytes(uniq_prefix)
        #: Write RocketMQ 5.2+'s CRC32 property (``enabledAppendPropCRC``, spec §1.6).
        self.append_prop_crc = False
        self._month_start = self._month_next = 0
        self._uniq_counter = 0
        self._topics = {}
        self._pending = {}
        self._topic_lookup = topic_lookup
        self._roll = roll
        self._mm: Any = None  # the active segment's map (None before the first)
        self._file_from = start_offset - start_offset % file_size
        self._pos = start_offset - self._file_from
        self._last_store_ts = 0
        self._lock = threading.RLock()
        self._fork_gen, self._opener = FORKS[0], os.getpid()  # see _check_open
        self._flusher = Flusher(start_offset, flush_interval_ms, flush_least_pages, flush_thorough_ms)
        self._live = None  # the live page, once set_live() gave one
        self._live_dirty: set[int] = set()  # slots of the topics put since the last _notify
        self._watcher = None
        self._closed = False
        self._refusal = None  # while set (disk full), every put is refused with it
        self._share: Any = None  # the shared append table's map (rocketstore.log.sharedappend), or None
        self._share_fd = -1
        self._mutex: Any = None  # the table's append lock (sharedappend.Mutex)
        self._epoch = 0
        self._share_owner = False
        self._dirty = []  # shared entries moved in the current append
        self._owner_seen_ms = 0  # a joined writer's last look at the owner's presence lock
        self.puts = 0
        self.durable_waits = 0
        self.refused_puts = 0

    # ---- segments ----

    def set_active(self, mm, file_from_offset, wrote_position, fd=None):
        self._check_open()
        self.add_segment(mm, file_from_offset, fd)
        self._mm = mm
        self._file_from = file_from_offset
        self._pos = wrote_position
        self._publish(file_from_offset + wrote_position)

    def add_segment(self, mm, file_from_offset, fd=None):
        if self._closed:
            return
        if len(mm) != self._file_size:
            raise ValueError(f"segment map is {len(mm)} bytes, expected {self._file_size}")
        with self._flusher.seg_lock:
            self._flusher.segments[file_from_offset] = (fd, mm, self._file_size)

    def release_segment(self, file_from_offset):
        with self._flusher.seg_lock:
            self._flusher.segments.pop(file_from_offset, None)
        if file_from_offset == self._file_from:
            self._mm = None

    def release_flushed_segments(self):
        flushed = self._flusher.flushed
        for start in sorted(self._flusher.segments):
            if start + self._file_size <= flushed and start != self._file_from:
                self.release_segment(start)

    def reset(self, offset):
        self._mm = None
        self._file_from = offset - offset % self._file_size
        self._pos = offset - self._file_from
        with self._flusher.cond:
            self._flusher.wrote = self._flusher.flushed = self._flusher.requested = offset

    def _publish(self, end):
        self._flusher.wrote = end  # an int store is atomic under the GIL

    def set_live(self, page):
        """Publish where whole records end in ``page`` (the live page's map) after every put
        (the page already says where they end now)."""
        self._check_open()
        live_word(page)
        self._live = page

    # ---- topics and queue offsets (their work: _topics_py) ----

    def set_queue_offset(self, topic, queue_id, next_offset):
        topics.set_queue_offset(self, topic, queue_id, next_offset)

    def queue_offsets(self):
        return topics.queue_offsets(self)

    def forget_topic(self, topic):
        """Take the new queue count of ``topic`` after it changed (see the compiled twin)."""
        topics.forget_topic(self, topic)

    # ---- the shared append table (its work: _shared_py) ----

    def share(self, table, fd, epoch, owner):
        """See the compiled twin."""
        sharing.share(self, table, fd, epoch, owner)

    @property
    def shared(self):
        return self._share is not None

    def unshare(self):
        """See the compiled twin."""
        sharing.unshare(self)

    def sync_shared(self):
        sharing.sync_shared(self)

    def _notify(self):
        """Publish where whole records end in the live page, and wake the waiters of the topics
        put since the last call (the compiled twin's ``_notify``)."""
        dirty, self._live_dirty = self._live_dirty, set()
        if self._live is not None:
            live_publish(self._live, self._flusher.wrote, dirty)

    # ---- refusing puts (disk full, spec §9) ----

    def refuse_puts(self, error=None):
        """While ``error`` is set (a :class:`DiskFullError`), every put writes nothing and returns
        status SERVICE_NOT_AVAILABLE with ``result.error = error``; None accepts puts again. The
        owner of a shared append table says so in it (joined writers then send puts here)."""
        self._refusal = error
        if self._share is not None and self._share_owner:
            struct.pack_into("<I", self._share, _ap.O_REFUSING, error is not None)

    @property
    def refusing_puts(self):
        """The error puts are refused with, or None."""
        return self._refusal

    def _not_stored(self, status, cause, wait, n=1):
        """A put that wrote nothing: raise its PutError, or (``wait`` WAIT_FUTURE) return a
        future that raises it (``n`` of them for put_many)."""
        error = not_stored(status, cause)
        error.__cause__ = cause.with_traceback(None)
        if wait != WAIT_FUTURE:
            raise error
        future = PutFuture(self, None, -1, 0, error)
        return future if n is None else [future] * n

    def _refused(self):
        self.refused_puts += 1
        return self._refusal

    def _reserve_space(self, lengths):
        """Create every segment the records of one call will go to before the first is written,
        so that a batch is stored whole or not at all: a full disk fails it up front. (Segments
        of this twin are fallocated when created: creating them is all the reserving needed.)"""
        if not lengths:
            return
        size = self._file_size
        start, pos = self._file_from, self._pos
        if self._mm is None and pos >= size:
            start, pos = start + size, 0
        starts = [start] if self._mm is None else []
        for length in lengths:
            if length + END_FILE_MIN_BLANK > size - pos:
                start, pos = start + size, 0
                starts.append(start)
            pos += length
        for start in starts:
            self._roll(start)

    # ---- the append path ----

    def _check_open(self):
        if self._closed:
            self._raise_closed()
        if self._fork_gen != FORKS[0]:
            self._refuse_forked()

    def _raise_closed(self):
        if self._share is not None and not self._share_owner:
            # a joined process's own appender, closed (a takeover, the owner gone) after its
            # caller looked at it: the caller puts another way
            raise _ap.StaleTable("this process's shared appender is closed")
        raise StoreClosedError("the store is closed")

    def _refuse_forked(self):
        """A core made before a fork, used in the child: its files are the parent's (the
        compiled twin counts forks with pthread_atfork)."""
        raise StoreClosedError(
            f"this store was opened by process {self._opener} before it forked: open it again in "
            "this process (it then joins the writing process)"
        )

    def _choose_queue(self, t, queue_id):
        if queue_id < 0:
            queue_id = t.rr % t.nqueues
            t.rr += 1
        elif queue_id >= t.nqueues:
            raise InvalidQueueIdError(
                f"queue id {queue_id} out of range: topic {t.name.decode()!r} has {t.nqueues} queues"
            )
        return queue_id

    def _make_uniq(self, now):
        if now >= self._month_next or now < self._month_start:
            self._month_start, self._month_next = month_bounds(now)
        span = max(now - self._month_start, 0) & 0xFFFFFFFF
        counter = self._uniq_counter & 0xFFFF
        self._uniq_counter += 1
        return (self._uniq_prefix + span.to_bytes(4, "big") + counter.to_bytes(2, "big")).hex().upper()

    def _roll_segment(self):
        start, pos = self._file_from, self._pos
        if pos >= self._file_size:
            start += self._file_size
            pos = 0
        mm, fd = self._roll(start)
        self.set_active(mm, start, pos, fd)
        self.release_flushed_segments()

    def _uniq_extra(self):
        return len(_UNIQ_NAME) + 2 * (len(self._uniq_prefix) + 6) + 1

    def _prop_crc_extra(self, props, unique_key) -> int:
        """Bytes the §1.6 CRC32 property adds to ``props`` (0 unless ``append_prop_crc``): 20,
        plus a 0x02 when the final properties do not end in one (a generated UNIQ_KEY does)."""
        if not self.append_prop_crc:
            return 0
        return PROP_CRC_LENGTH + (unique_key is not None and len(props) > 0 and props[-1] != 2)

    def _validate(self, t, body_len, props, unique_key, sys_flag):
        total_props = (
            len(props)
            + (0 if unique_key is not None else self._uniq_extra())
            + self._prop_crc_extra(props, unique_key)
        )
        if total_props > MAX_PROPERTIES_LENGTH:
            raise PropertiesTooLargeError(
                f"properties are {total_props} bytes encoded; the limit is {MAX_PROPERTIES_LENGTH}"
            )
        sys_flag |= self._host_sysflag
        length = (
            91
            + body_len
            + len(t.name)
            + total_props
            + (12 if sys_flag & SYSFLAG_BORNHOST_V6 else 0)
            + (12 if sys_flag & SYSFLAG_STOREHOST_V6 else 0)
        )
        if length > self._max_message_size:
            raise MessageTooLargeError(
                f"record of {length} bytes exceeds max_message_size {self._max_message_size}"
            )
        if length + END_FILE_MIN_BLANK > self._file_size:
            raise MessageTooLargeError(
                f"record of {length} bytes cannot fit a {self._file_size}-byte segment"
            )
        return length

    def _append(
        self,
        t,
        queue_id,
        body,
        body_crc,
        props,
        unique_key,
        flag,
        born_ts,
        sys_flag,
        reconsume,
        prepared_offset,
        length,
    ):
        """Append one validated record (append lock held); returns (PutResult, end offset)."""
        now = _now_ms()
        if now < self._last_store_ts:
            now = self._last_store_ts
        self._last_store_ts = now
        crc_extra = self._prop_crc_extra(props, unique_key)
        if unique_key is None:
            unique_key = self._make_uniq(now)
            props = props + _UNIQ_NAME + unique_key.encode("ascii") + b"\x02"
        if crc_extra:
            props = props + b"\x02" * (crc_extra - PROP_CRC_LENGTH) + _PROP_CRC_RESERVED
        sys_flag |= self._host_sysflag

        while True:
            if self._mm is None:
                self._roll_segment()
            remaining = self._file_size - self._pos
            if length + END_FILE_MIN_BLANK <= remaining:
                break
            _BLANK.pack_into(self._mm, self._pos, remaining, MAGIC_BLANK)
            self._pos = self._file_size
            self._publish(self._file_from + self._file_size)
            self._mm = None

        tx = sys_flag & SYSFLAG_TRANSACTION_MASK
        consumes = tx != TRANSACTION_PREPARED and tx != TRANSACTION_ROLLBACK
        queue_offset = t.next_offsets[queue_id] if consumes else 0
        physical = self._file_from + self._pos
        mm, pos, s = self._mm, self._pos, self._struct
        s.pack_into(
            mm,
            pos,
            length,
            MAGIC_V1,
            body_crc,
            queue_id,
            flag,
            queue_offset,
            physical,
            sys_flag,
            born_ts if born_ts > 0 else now,
            self._born_host,
            self._born_port,
            now,
            self._store_host,
            self._store_port,
            reconsume,
            prepared_offset,
            len(body),
        )
        pos += s.size
        mm[pos : pos + len(body)] = body
        pos += len(body)
        mm[pos] = len(t.name)
        mm[pos + 1 : pos + 1 + len(t.name)] = t.name
        pos += 1 + len(t.name)
        mm[pos : pos + 2] = len(props).to_bytes(2, "big")
        mm[pos + 2 : pos + 2 + len(props)] = props
        if crc_extra:  # over the whole record as written, but its last 20 bytes (§1.6)
            digits = self._pos + length - PROP_CRC_LENGTH + len(_PROP_CRC_NAME)
            mm[digits : digits + 10] = prop_crc_digits(
                zlib.crc32(mm[self._pos : digits - len(_PROP_CRC_NAME)])
            )
        self._pos += length
        end = self._file_from + self._pos
        self._publish(end)
        self._live_dirty.add(t.slot)  # readers are told when the append lock goes (_notify)
        if consumes:
            t.next_offsets[queue_id] += 1
            if t.committed is not None:  # published with the end when the append lock goes
                if not t.dirty:
                    self._dirty.append(t)
                t.dirty.add(queue_id)
        self.puts += 1
        out = put_result(
            physical, length, queue_id, queue_offset, now, unique_key, self._store_host, self._store_port
        )
        return out, end

    def _wait(self, target, timeout_ms):
        if self._flusher.flushed >= target:
            return 0
        self.durable_waits += 1
        return self._flusher.wait(target, timeout_ms)

    def _finish(self, result, end, wait):
        if wait < 0:
            wait = self._default_wait
        if wait == WAIT_NONE:
            return result
        if wait == WAIT_BLOCK:
            rc = self._wait(end, self._sync_flush_timeout_ms)
            if rc != 0:
                raise flush_timeout(result, rc)
            return result
        self._flusher.request(end)
        return PutFuture(self, result, end, _now_ms() + self._sync_flush_timeout_ms)

    def put(
        self,
        topic,
        body,
        properties=None,
        queue_id=-1,
        flag=0,
        born_timestamp=0,
        sys_flag=0,
        reconsume_times=0,
        prepared_transaction_offset=0,
        unique_key=None,
        wait=-1,
    ):
        self._check_open()
        if body is None:  # (a topic that is not a str: the topic lookup's InvalidTopicError)
            raise TypeError("body is required")
        if self._refusal is not None:
            return self._not_stored(_SERVICE_NOT_AVAILABLE, self._refused(), wait, None)
        t = topic_entry(self, topic)
        qid = self._choose_queue(t, queue_id)
        body = contiguous(body)
        if type(body) is not bytes:
            body = memoryview(body).cast("B")
        props = bytes(properties) if properties is not None else b""
        if len(props) > MAX_PROPERTIES_LENGTH:
            raise PropertiesTooLargeError(
                f"properties are {len(props)} bytes encoded; the limit is {MAX_PROPERTIES_LENGTH}"
            )
        self._check_body_size(body)
        length = self._validate(t, len(body), props, unique_key, sys_flag)
        crc = body_crc(body)
        with appending(self):
            self._check_open()
            try:
                result, end = self._append(
                    t,
                    qid,
                    body,
                    crc,
                    props,
                    unique_key,
                    flag,
                    born_timestamp,
                    sys_flag,
                    reconsume_times,
                    prepared_transaction_offset,
                    length,
                )
            except SegmentError as exc:
                # No segment space: nothing of this record was written (CREATE_MAPEDFILE_FAILED).
                return self._not_stored(_CREATE_MAPPED_FILE_FAILED, exc, wait, None)
        return self._finish(result, end, wait)

    def _check_body_size(self, body):
        if len(body) > self._max_message_size:
            raise MessageTooLargeError(
                f"body of {len(body)} bytes exceeds max_message_size {self._max_message_size}"
            )

    def put_inner_batch(
        self, topic, body, props_before, props_after, queue_id, count, unique_key, born_timestamp=0, wait=-1
    ):
        """One RocketMQ 5.x inner batch record of ``count`` messages (sysFlag INNER_BATCH |
        NEED_UNWRAP, ``body`` their batch encoding) at the queue's next offset, which then moves
        by ``count``: the record's properties are ``props_before``, that offset in decimal (the
        INNER_BASE value, known only under the append lock), then ``props_after``; they must
        hold ``unique_key`` as UNIQ_KEY. Returns a PutResult (its queue offset the base) or a
        PutFuture, as :meth:`put`."""
        self._check_open()
        if count < 1 or count > 0x7FFF:
            raise ValueError(f"an inner batch holds 1 to 32767 messages, not {count}")
        if self._refusal is not None:
            return self._not_stored(_SERVICE_NOT_AVAILABLE, self._refused(), wait, None)
        t = topic_entry(self, topic)
        qid = self._choose_queue(t, queue_id)
        body = bytes(body)
        self._check_body_size(body)
        crc = body_crc(body)
        with appending(self):
            self._check_open()
            base = t.next_offsets[qid]
            props = bytes(props_before) + str(base).encode("ascii") + bytes(props_after)
            if len(props) > MAX_PROPERTIES_LENGTH:
                raise PropertiesTooLargeError(
                    f"properties are {len(props)} bytes encoded; the limit is {MAX_PROPERTIES_LENGTH}"
                )
            length = self._validate(t, len(body), props, unique_key, _SYSFLAG_INNER_BATCH)
            try:
                result, end = self._append(
                    t,
                    qid,
                    body,
                    crc,
                    props,
                    unique_key,
                    0,
                    born_timestamp,
                    _SYSFLAG_INNER_BATCH,
                    0,
                    0,
                    length,
                )
            except SegmentError as exc:
                return self._not_stored(_CREATE_MAPPED_FILE_FAILED, exc, wait, None)
            t.next_offsets[qid] += count - 1  # (_append moved it by one; published at the lock's release)
        return self._finish(result, end, wait)

    def put_keyed(self, topic, body, tags, keys, queue_id=-1, flag=0, wait=-1, properties=None):
        """:meth:`put` of a message whose properties are ``tags``, ``keys`` and a plain
        ``properties`` dict (see :func:`keyed_properties`); None, having done nothing, when they
        are not the plain shape (the caller then encodes them, or raises, on the general path)."""
        props = keyed_properties(tags, keys, properties)
        if props is None:
            return None
        return self.put(topic, body, props, queue_id, flag, 0, 0, 0, 0, None, wait)

    # ---- many records under one lock (their work: _batches_py) ----

    def put_batch(
        self,
        topic,
        bodies,
        lengths=None,
        properties=None,
        queue_id=-1,
        flag=0,
        born_timestamp=0,
        sys_flag=0,
        wait=-1,
    ):
        return batches.put_batch(
            self, topic, bodies, lengths, properties, queue_id, flag, born_timestamp, sys_flag, wait
        )

    def put_many(self, items, wait=-1):
        return batches.put_many(self, items, wait)

    def put_copies(self, rows, topics, items):
        """:meth:`put_many` of the copies a timer pass built as rows (see the compiled twin);
        returns ``(records written, the end offset of the last)``; the caller flushes."""
        return batches.put_copies(self, rows, topics, items)

    def put_plain_messages(self, messages, user_topics, wait=-1):
        """:meth:`put_many` of a batch of plain :class:`rocketstore.Message` objects, or None,
        having written nothing, when one is not plain (see the compiled twin)."""
        return batches.put_plain_messages(self, messages, user_topics, wait)

    # ---- flushing, state ----

    @property
    def wrote_offset(self):
        if self._share is not None and self._share_owner and not self._closed:
            sharing.sync_shared(self)  # the others' records are the owner's to dispatch
        return self._flusher.wrote

    @property
    def flushed_offset(self):
        return self._flusher.flushed

    @property
    def last_store_timestamp(self):
        return self._last_store_ts

    @property
    def active_segment(self):
        return self._file_from, self._pos

    def wait_flushed(self, offset, timeout_ms=-1):
        return self._wait(offset, timeout_ms)

    def flush(self, timeout_ms=-1):
        return self._wait(self.wrote_offset, timeout_ms) == 0

    def request_flush(self, offset):
        """Ask the flush thread to flush up to ``offset`` now, without waiting for it."""
        self._flusher.request(offset)

    def stats(self):
        self._check_open()
        f = self._flusher
        with f.cond:
            return dict(
                puts=self.puts,
                durable_waits=self.durable_waits,
                refused_puts=self.refused_puts,
                **f.stats,
                wrote_offset=f.wrote,
                flushed_offset=f.flushed,
                last_flush_errno=f.last_errno,
                last_prefault_errno=0,
            )

    def _watcher_add(self, future, fn):
        if self._watcher is None:
            self._watcher = FlushWatcher(self)
        self._watcher.add(future, fn)

    def close(self):
        if self._closed:
            return
        with self._lock:
            self._closed = True
        self._flusher.wait(self._flusher.wrote, -1)
        if self._watcher is not None:
            self._watcher.close()
        self._flusher.close()  # the stopped flusher stays readable for late callers
        self._mm = None
        if self._live is not None:
            live_publish(self._live, self._flusher.wrote)
            self._live = None

    @property
    def closed(self):
        return self._closed
