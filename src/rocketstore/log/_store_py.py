"""Pure-Python twin of ``rocketstore.log._store``: the CommitLog append path and its flush thread.

Same public names and behaviour as the compiled module (see cext/_store.pyx), built on
``struct.pack_into`` into the segment's ``mmap`` and a ``threading.Thread`` that fdatasyncs.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import mmap
import os
import platform
import struct
import sys
import threading
import time
import zlib
from collections.abc import Callable, Generator, Iterable
from typing import Any, Optional, TypeGuard

import numpy as np

from rocketstore.base._checks import batch_lengths, contiguous
from rocketstore.base._clock import month_bounds
from rocketstore.base._clock import now_ms as _now_ms
from rocketstore.errors import (
    InvalidMessageError,
    InvalidQueueIdError,
    MessageTooLargeError,
    PropertiesTooLargeError,
    SegmentError,
    StoreClosedError,
    not_stored,
)
from rocketstore.files._flushwatch import FlushWatcher
from rocketstore.files.mapped_file import flush_timeout
from rocketstore.format._codec_py import make_offset_msg_id
from rocketstore.format._verify import PROP_CRC_LENGTH, prop_crc_digits
from rocketstore.log import sharedappend as _ap
from rocketstore.log.coreargs import check_core_args
from rocketstore.message import SPECIAL_PROPERTIES, Message
from rocketstore.status import PutStatus

__all__ = [
    "Message",
    "CommitLogCore",
    "PutResult",
    "BatchPutResult",
    "PutFuture",
    "WAIT_NONE",
    "WAIT_BLOCK",
    "WAIT_FUTURE",
    "live_wait",
    "live_wait_words",
    "live_wake",
    "live_seq",
    "serve_step",
    "MAX_FRAME",
    "SwitchSafe",
    "keyed_properties",
    "PutFront",
]

#: The pure twin does not pre-fault: its segments are always fallocated (see the compiled twin).
POPULATE_WRITE = False

#: The pure twin can always fail its flush thread on purpose (the compiled one only in debug builds).
DEBUG_HOOKS = True
_debug_sync_errno = 0


# ---- keyed puts: TAGS and KEYS encoded straight from the arguments ----


#: sysFlag of a RocketMQ 5.x inner batch record: INNER_BATCH | NEED_UNWRAP
_SYSFLAG_INNER_BATCH = 0x0C0


def _plain_text(value: object) -> Optional[bytes]:
    """The UTF-8 of an exact, non-empty str without a separator (0x01, 0x02), else None."""
    if type(value) is not str or not value or "\x01" in value or "\x02" in value:
        return None
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: the general path raises for it
        return None


def keyed_properties(tags, keys, properties=None):
    """A plain ``properties`` dict's items, then TAGS and KEYS, encoded as
    ``put_properties(tags, keys, properties)`` encodes them (``b""`` for none), or None when one
    is not the plain shape (an exact, non-empty str without 0x01 or 0x02 that UTF-8 can encode;
    keys also a non-empty list or tuple of such; properties an exact dict of such, no name in
    SPECIAL_PROPERTIES) or the result exceeds 32767 bytes: the general path then encodes or
    refuses them."""
    out = b""
    if properties is not None:
        if type(properties) is not dict:
            return None
        parts = []
        for name, value in properties.items():
            name_text = _plain_text(name)  # an exact str first: hashing it runs no user code
            if name_text is None or name in SPECIAL_PROPERTIES:
                return None
            value_text = _plain_text(value)
            if value_text is None:
                return None
            parts.append(name_text + b"\x01" + value_text + b"\x02")
        out = b"".join(parts)
    if tags is not None:
        text = _plain_text(tags)
        if text is None:
            return None
        out += b"TAGS\x01" + text + b"\x02"
    if keys is not None:
        if type(keys) in (list, tuple):
            texts = [_plain_text(k) for k in keys]
            if not texts or None in texts:
                return None
            text = b" ".join(texts)  # type: ignore[arg-type]  # no None: checked
        else:
            text = _plain_text(keys)
            if text is None:
                return None
        out += b"KEYS\x01" + text + b"\x02"
    return out if len(out) <= MAX_PROPERTIES_LENGTH else None


def _plain_int(value: object, lo: int, hi: int) -> bool:
    return type(value) is int and lo <= value <= hi


def _reads_as_message(m: object) -> TypeGuard[Message]:
    """Whether put_plain_messages reads ``m``, by its exact type: this twin's Message,
    or the compiled twin's when that module is loaded (a store of this implementation in a
    compiled build is handed rocketstore.Message, the compiled type). Looked up, not imported:
    this module is the pure twin, and may be all there is."""
    t = type(m)
    if t is Message:
        return True
    compiled = sys.modules.get("rocketstore.log._store")
    return compiled is not None and t is getattr(compiled, "Message", None)


def _plain_item(m: object, user_topics: Any) -> Optional[tuple[Any, ...]]:
    """put_many's item of a plain Message (see CommitLogCore.put_plain_messages), else None."""
    if not _reads_as_message(m):
        return None
    try:
        topic, body, qid, flag, born = m.topic, m.body, m.queue_id, m.flag, m.born_timestamp
        if not (
            type(topic) is str
            and topic in user_topics
            and type(body) is bytes
            and _plain_int(qid, -1, _INT32_MAX)
            and _plain_int(flag, _INT32_MIN, _INT32_MAX)
            and _plain_int(born, _INT64_MIN, _INT64_MAX)
            and _plain_int(m.sys_flag, 0, 0)
            and _plain_int(m.reconsume_times, 0, 0)
        ):
            return None
        props = keyed_properties(m.tags, m.keys, m.properties)
    except AttributeError:  # a slot left unset
        return None
    if props is None:
        return None
    return (topic, body, props, qid, flag, born, 0, 0, None)


_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


# ---- the live page (see cext/live.h and rocketstore.processes.live) ----

_LIVE_SIZE = 4096
_LIVE_SEQ, _LIVE_WAITERS, _LIVE_WROTE, _LIVE_ALWAYS_WAKE = 8, 12, 16, 40
_LIVE_SLOTS, _LIVE_SLOT0, _LIVE_MAX_WAIT = 64, 64, 64  # see cext/live.h
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1
#: SYS_futex by machine (Linux); elsewhere a waiter polls the word every millisecond.
_SYS_FUTEX = {
    "x86_64": 202,
    "amd64": 202,
    "aarch64": 98,
    "arm64": 98,
    "riscv64": 98,
    "ppc64le": 221,
    "s390x": 238,
}


def _find_futex() -> Any:
    number = _SYS_FUTEX.get(platform.machine().lower())
    if not sys.platform.startswith("linux") or number is None:
        return None
    try:
        syscall = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    return lambda *args: syscall(number, *args)


_futex = _find_futex()


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _live_word(page: Any) -> Any:
    if len(page) < _LIVE_SIZE:
        raise ValueError(f"a live page is {_LIVE_SIZE} bytes")
    return ctypes.c_uint32.from_buffer(page, _LIVE_SEQ)


def live_seq(page: Any) -> int:
    """The live page's sequence word."""
    return int(_live_word(page).value)


#: The longest call or reply a joined writer's connection carries (bytes).
MAX_FRAME = 1 << 30


def _recv_exactly(fd: int, n: int) -> Optional[bytes]:
    parts, left = [], n
    while left:
        part = os.read(fd, left)
        if not part:
            return None
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def serve_step(fd: int, reply: bytes) -> Optional[bytes]:
    """The owner's side of a joined writer's connection (rocketstore.processes.writers): send ``reply`` (a
    whole frame: 8-byte little-endian length, then the payload; b"" for none), then wait for the
    next frame; its payload, or None at the end of the stream. (The compiled twin does this
    without the GIL.)"""
    view = memoryview(reply)
    while view:
        view = view[os.write(fd, view) :]
    head = _recv_exactly(fd, 8)
    if head is None:
        return None
    size = int.from_bytes(head, "little")
    if size > MAX_FRAME:
        raise ValueError(f"a frame over {MAX_FRAME} bytes")
    return _recv_exactly(fd, size)


class SwitchSafe:
    """A following store's read method (rocketstore.store puts it over the class's, as an
    instance attribute): the call, run again when the store opened again under it (a writer's
    crash recovery, a takeover), rather than failing with the closed parts it was using.
    ``store_ref`` is a weak reference to the store; ``method`` the class's function; ``fast``
    (optional) what the first try calls instead, with the arguments alone (the store's
    FastReads method, which runs the class's own when it cannot answer)."""

    __slots__ = ("_store", "_method", "_fast")

    def __init__(self, store_ref: Any, method: Any, fast: Any = None) -> None:
        self._store = store_ref
        self._method = method
        self._fast = fast

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        store = self._store()
        if store is None:
            raise StoreClosedError("the store is closed")
        switches = store._switches  # noqa: SLF001 (the store's switch state: SwitchSafe goes with the facade's roles)
        try:
            if self._fast is not None:
                return self._fast(*args, **kwargs)
            return self._method(store, *args, **kwargs)
        except Exception:
            if not store._switched_since(switches):  # noqa: SLF001 (the store's switch state: SwitchSafe goes with the facade's roles)
                raise
        return store._switch_safe(functools.partial(self._method, store, *args, **kwargs))  # noqa: SLF001 (the store's switch state: SwitchSafe goes with the facade's roles)


def live_wake(page: Any) -> None:
    """Bump the live page's sequence word and wake every process waiting on it."""
    word = _live_word(page)
    word.value = (word.value + 1) & 0xFFFFFFFF
    if _futex is not None:
        _futex(ctypes.byref(word), _FUTEX_WAKE, 0x7FFFFFFF, None, None, 0)


def _live_spin(
    page: Any,
    words: list[int],
    seen: list[int],
    page_seen: Optional[int],
    spin_us: int,
    deadline: Optional[float],
) -> bool:
    """cext/live.h's ``rs_live_spin``: look at the words (and the sequence word when
    ``page_seen`` is given) until one moved, for at most ``spin_us`` microseconds and never past
    ``deadline``; True if one moved."""
    if spin_us <= 0:
        return False
    until = time.monotonic() + spin_us / 1e6
    if deadline is not None:
        until = min(until, deadline)
    while True:
        if any(struct.unpack_from("<I", page, at)[0] != s for at, s in zip(words, seen)):
            return True
        if page_seen is not None and live_seq(page) != page_seen:
            return True
        if time.monotonic() >= until:
            return False


def live_wait(page: Any, seen: int, timeout_ms: int, spin_us: int = 0) -> bool:
    """Sleep until the live page's sequence word is no longer ``seen`` or ``timeout_ms`` passes
    (< 0: no limit); True if it changed. The pure twin cannot count itself in atomically among
    the waiters, so it sets the page's always-wake flag: writers then wake on every put.
    ``spin_us``: spin on the word up to that long before sleeping."""
    word = _live_word(page)
    deadline = None if timeout_ms < 0 else time.monotonic() + timeout_ms / 1000.0
    if _live_spin(page, [], [], seen, spin_us, deadline):
        return True
    struct.pack_into("<I", page, _LIVE_ALWAYS_WAKE, 1)
    while word.value == seen:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return False
        if _futex is None:
            time.sleep(0.001 if left is None else min(0.001, left))
            continue
        ts = None
        if left is not None:
            ts = _Timespec(int(left), int((left - int(left)) * 1e9))
        _futex(ctypes.byref(word), _FUTEX_WAIT, seen, None if ts is None else ctypes.byref(ts), None, 0)
    return True


def _live_publish(page: Any, wrote: int, slots: Iterable[int] = ()) -> None:
    """Whole records end at ``wrote``; records of the topics of ``slots`` were put (cext/live.h's
    ``rs_live_publish_slots``)."""
    seen = struct.unpack_from("<q", page, _LIVE_WROTE)[0]
    if seen == wrote:
        return  # nothing new (a failed put, a close): no byte of the page changes
    always = struct.unpack_from("<I", page, _LIVE_ALWAYS_WAKE)[0]
    if seen < wrote:  # only ever forward (writers of several processes publish in turn)
        struct.pack_into("<q", page, _LIVE_WROTE, wrote)
    words = [(_LIVE_SLOT0 + 8 * slot, _LIVE_SLOT0 + 8 * slot + 4) for slot in sorted(slots)]
    for at, waiters_at in [*words, (_LIVE_SEQ, _LIVE_WAITERS)]:
        word = ctypes.c_uint32.from_buffer(page, at)
        word.value = (word.value + 1) & 0xFFFFFFFF
        if (always or struct.unpack_from("<I", page, waiters_at)[0]) and _futex is not None:
            _futex(ctypes.byref(word), _FUTEX_WAKE, 0x7FFFFFFF, None, None, 0)


def live_wait_words(
    page: Any, words: Any, seen: Any, page_seen: int, timeout_ms: int, spin_us: int = 0
) -> bool:
    """Sleep until one of the live page's u32 words at byte offsets ``words`` no longer holds its
    value in ``seen``, or ``timeout_ms`` passes (< 0: no limit); True if one changed. The pure
    twin sets the page's always-wake flag (it cannot count itself in atomically) and waits on the
    page's sequence word, which every put moves (``page_seen``: the caller's look at it).
    ``spin_us``: spin on the words up to that long before sleeping."""
    words, seen = list(words), list(seen)
    n = len(words)
    if n < 1 or n > _LIVE_MAX_WAIT or len(seen) != n:
        raise ValueError(f"1 to {_LIVE_MAX_WAIT} words, each with the value seen")
    for at in words:
        if at < _LIVE_SLOT0 or at > _LIVE_SIZE - 8 or at % 8:
            raise ValueError(f"{at} is not a slot word of the live page")
    deadline = None if timeout_ms < 0 else time.monotonic() + timeout_ms / 1000.0
    if _live_spin(page, words, seen, None, spin_us, deadline):
        return True
    struct.pack_into("<I", page, _LIVE_ALWAYS_WAKE, 1)
    while True:
        if any(struct.unpack_from("<I", page, at)[0] != s for at, s in zip(words, seen)):
            return True
        if live_seq(page) != page_seen:
            return True  # a put of another topic, or of one of these: the caller looks again
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return False
        if not live_wait(page, page_seen, -1 if left is None else max(1, int(left * 1000))):
            return False


#: Tests only (_debug_publish_fault): the step of a shared append's publish after which this
#: process ends, 0 for none.
_debug_publish_step = 0

#: The steps of a shared append's publish a test can end the process after (see the compiled twin).
PUBLISH_STEPS = 6


def _debug_publish_fault(step: int) -> None:
    """Tests only: the next shared append of this process ends it (``os._exit(86)``) right after
    step ``step`` (1 .. PUBLISH_STEPS) of its publish, as a ``kill -9`` there would; 0: never."""
    global _debug_publish_step
    if not 0 <= step <= PUBLISH_STEPS:
        raise ValueError(f"step must be 0 to {PUBLISH_STEPS}, not {step}")
    _debug_publish_step = int(step)


def _publish_fault(step: int) -> None:
    if _debug_publish_step == step:
        os._exit(86)


def _debug_fail_syncs(err: int) -> None:
    """Every flush round fails with errno ``err`` until called with 0 (tests of the error path)."""
    global _debug_sync_errno
    _debug_sync_errno = int(err)


WAIT_NONE = 0
WAIT_BLOCK = 1
WAIT_FUTURE = 2
#: the head of a row of the codec's timer_copy_rows (put_copies)
_COPY_ROW = struct.Struct("<iiiiiiiiq")
_NO_ITEM = object()

MAGIC_V1 = -626843481
MAGIC_BLANK = -875286124
END_FILE_MIN_BLANK = 8
MAX_PROPERTIES_LENGTH = 32767
SYSFLAG_TRANSACTION_MASK = 0x0C
TRANSACTION_PREPARED = 0x04
TRANSACTION_ROLLBACK = 0x0C
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20
_UNIQ_NAME = b"UNIQ_KEY\x01"
_BLANK = struct.Struct(">ii")
_PUT_OK = PutStatus.PUT_OK
_CREATE_MAPPED_FILE_FAILED = PutStatus.CREATE_MAPPED_FILE_FAILED
_SERVICE_NOT_AVAILABLE = PutStatus.SERVICE_NOT_AVAILABLE


def _record_struct(born_len: int, store_len: int) -> struct.Struct:
    # TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG BORNTIMESTAMP
    # BORNHOST(+port) STORETIMESTAMP STOREHOST(+port) RECONSUMETIMES PREPAREDOFFSET BODYLEN
    return struct.Struct(f">iiiiiqqiq{born_len}siq{store_len}siiqi")


def _body_crc(body) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF if len(body) else 0


class PutResult:
    """Where a put landed: status, commitlog offset and size, queue id/offset, store time, ids."""

    __slots__ = (
        "_status",
        "commitlog_offset",
        "size",
        "queue_id",
        "queue_offset",
        "store_timestamp",
        "_unique_key",
        "_host",
        "_port",
        "error",
    )

    _status: int
    commitlog_offset: int  #: where the record starts in the CommitLog
    size: int  #: the record's length in bytes
    queue_id: int
    queue_offset: int  #: the message's position in its ConsumeQueue
    store_timestamp: int  #: ms since the epoch
    #: a flush's error (with status FLUSH_DISK_TIMEOUT), else None
    error: Optional[BaseException]

    def __init__(self) -> None:
        self._status = _PUT_OK
        self._unique_key: Optional[str] = None
        self._host = b""
        self._port = 0
        self.error = None

    @property
    def status(self) -> PutStatus:
        return PutStatus(self._status)

    @property
    def ok(self) -> bool:
        return bool(self._status == _PUT_OK)

    @property
    def unique_key(self) -> Optional[str]:
        """The UNIQ_KEY property: the client-side message id (msgId)."""
        return self._unique_key

    @property
    def msg_id(self) -> str:
        """The offsetMsgId: store host, port and CommitLog offset in hex."""
        return str(make_offset_msg_id(self._host, self._port, self.commitlog_offset))

    def _set_status(self, status: int) -> None:
        self._status = status

    def _set_error(self, error: Optional[BaseException]) -> None:
        self.error = error

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _put_result,
            (
                self._status,
                self.commitlog_offset,
                self.size,
                self.queue_id,
                self.queue_offset,
                self.store_timestamp,
                self._unique_key,
                self._host,
                self._port,
                self.error,
            ),
        )

    def __repr__(self) -> str:
        return (
            f"PutResult(status={self.status.name}, msg_id={self.msg_id!r}, "
            f"unique_key={self.unique_key!r}, queue_id={self.queue_id}, "
            f"queue_offset={self.queue_offset}, commitlog_offset={self.commitlog_offset}, "
            f"size={self.size}, store_timestamp={self.store_timestamp})"
        )


def _put_result(
    status: int,
    commitlog_offset: int,
    size: int,
    queue_id: int,
    queue_offset: int,
    store_timestamp: int,
    unique_key: Optional[str],
    host: bytes,
    port: int,
    error: Optional[BaseException],
) -> PutResult:
    """A PutResult as pickled (see PutResult.__reduce__)."""
    if len(host) > 16:
        raise ValueError("a store host is 4 or 16 bytes")
    r = PutResult()
    r._status = status  # noqa: SLF001 (a put result filled by its maker in this module)
    r.commitlog_offset = commitlog_offset
    r.size = size
    r.queue_id = queue_id
    r.queue_offset = queue_offset
    r.store_timestamp = store_timestamp
    r._unique_key = unique_key  # noqa: SLF001 (a put result filled by its maker in this module)
    r._host = host  # noqa: SLF001 (a put result filled by its maker in this module)
    r._port = port  # noqa: SLF001 (a put result filled by its maker in this module)
    r.error = error
    return r


class BatchPutResult:
    """Results of one batch put: columns, plus ``len()`` and indexing to a ``PutResult``."""

    __slots__ = (
        "_status",
        "topic",
        "queue_id",
        "first_queue_offset",
        "commitlog_offsets",
        "sizes",
        "store_timestamps",
        "queue_offsets",
        "_unique_keys",
        "_host",
        "_port",
        "error",
    )

    topic: str
    queue_id: int
    first_queue_offset: int
    commitlog_offsets: Any  #: int64 array, one per message
    sizes: Any  #: int32 array
    store_timestamps: Any  #: int64 array
    queue_offsets: Any  #: int64 array
    error: Optional[BaseException]
    _status: int
    _unique_keys: list[Optional[str]]
    _host: bytes
    _port: int

    def __init__(self) -> None:
        self.error = None

    @property
    def status(self) -> PutStatus:
        return PutStatus(self._status)

    @property
    def ok(self) -> bool:
        return bool(self._status == _PUT_OK)

    def _set_status(self, status: int) -> None:
        self._status = status

    def _set_error(self, error: Optional[BaseException]) -> None:
        self.error = error

    @property
    def unique_keys(self) -> list[Optional[str]]:
        return list(self._unique_keys)

    @property
    def msg_ids(self) -> list[str]:
        prefix = (self._host + self._port.to_bytes(4, "big")).hex().upper()
        return [prefix + format(int(o), "016X") for o in self.commitlog_offsets]

    @property
    def end_offset(self) -> int:
        n = len(self.commitlog_offsets)
        return int(self.commitlog_offsets[n - 1]) + int(self.sizes[n - 1]) if n else 0

    def __len__(self) -> int:
        return len(self.commitlog_offsets)

    def __getitem__(self, i: int) -> PutResult:
        r = PutResult()
        r._status = self._status  # noqa: SLF001 (a put result filled by its maker in this module)
        r.commitlog_offset = int(self.commitlog_offsets[i])
        r.size = int(self.sizes[i])
        r.queue_id = self.queue_id
        r.queue_offset = int(self.queue_offsets[i])
        r.store_timestamp = int(self.store_timestamps[i])
        r._unique_key = self._unique_keys[i]  # noqa: SLF001 (a put result filled by its maker in this module)
        r._host = self._host  # noqa: SLF001 (a put result filled by its maker in this module)
        r._port = self._port  # noqa: SLF001 (a put result filled by its maker in this module)
        return r

    def __repr__(self) -> str:
        return (
            f"BatchPutResult(status={self.status.name}, count={len(self)}, topic={self.topic!r}, "
            f"queue_id={self.queue_id}, first_queue_offset={self.first_queue_offset})"
        )


class PutFuture:
    """A durable put in flight: resolved when the flush thread's flushed offset covers it.

    ``result(timeout=None)`` returns the put's result once flushed; raises
    :class:`~rocketstore.errors.FlushTimeoutError` (stored, not confirmed durable) when
    ``sync_flush_timeout_ms`` passed since the put or the flush failed, the put's
    :class:`~rocketstore.errors.PutError` when nothing was stored, and ``TimeoutError`` when the
    caller's ``timeout`` runs out first. Done-callbacks and ``await`` fire in every case.
    """

    __slots__ = ("_core", "_result", "target", "deadline_ms", "_resolved", "_error")

    target: int  #: the CommitLog offset the flush must reach
    deadline_ms: int  #: when sync_flush_timeout_ms runs out (epoch ms)

    def __init__(
        self, core: Any, result: Any, target: int, deadline_ms: int, error: Optional[BaseException] = None
    ) -> None:
        self._core = core
        self._result = result
        self.target = target
        self.deadline_ms = deadline_ms
        self._resolved = error is not None
        self._error = error

    def done(self) -> bool:
        return self._resolved or self._core.flushed_offset >= self.target or _now_ms() >= self.deadline_ms

    def result(self, timeout: Optional[float] = None) -> Any:
        if not self._resolved:
            wait_ms = self.deadline_ms - _now_ms()
            caller_limited = False
            if timeout is not None and int(timeout * 1000) < wait_ms:
                wait_ms = int(timeout * 1000)
                caller_limited = True
            rc = self._core.wait_flushed(self.target, max(wait_ms, 0))
            if caller_limited and rc == 1:
                raise TimeoutError(f"offset {self.target} not flushed yet")
            if rc != 0:
                self._error = flush_timeout(self._result, rc)
            self._resolved = True
        if self._error is not None:
            raise self._error
        return self._result

    def add_done_callback(self, fn: Callable[[PutFuture], object]) -> None:
        if self.done():
            fn(self)
        else:
            self._core._watcher_add(self, fn)  # noqa: SLF001 (PutFuture and its core, one module)

    def __await__(self) -> Generator[Any, None, Any]:
        import asyncio

        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.add_done_callback(
            lambda _f: loop.call_soon_threadsafe(lambda: None if fut.done() else fut.set_result(None))
        )
        yield from fut.__await__()
        return self.result()


_FULL_SYNC = getattr(fcntl, "F_FULLFSYNC", None)


def _data_sync(fd, mm, lo, hi):
    """Make ``[lo, hi)`` of a segment's map durable as the compiled flush thread does: msync
    (MS_SYNC, Linux's data sync of the range), then on macOS, whose msync and fsync leave data
    in the drive's cache, F_FULLFSYNC of the file. The store closes a sealed segment's own
    descriptor where the msync is all there is (MappedFile.release_descriptor)."""
    lo -= lo % mmap.PAGESIZE
    if hi > lo:
        mm.flush(lo, hi - lo)
    if _FULL_SYNC is not None and fd is not None and fd >= 0:
        fcntl.fcntl(fd, _FULL_SYNC)
    if _debug_sync_errno:
        raise OSError(_debug_sync_errno, os.strerror(_debug_sync_errno))


class _Flusher:
    """The flush thread: ASYNC interval flushes plus group commit for waiting puts."""

    def __init__(self, start_offset, interval_ms, least_pages, thorough_ms):
        self.cond = threading.Condition()
        self.wrote = start_offset
        self.flushed = start_offset
        self.requested = start_offset
        self.segments = {}  # start -> (fd, map, size)
        self.interval = max(interval_ms, 1) / 1000
        self.least_pages = least_pages
        self.thorough = max(thorough_ms, 1) / 1000
        self.page = 4096
        self.stop = False
        self.last_errno = 0
        self.last_error = None  # the exception behind last_errno (flush_timeout's cause)
        self.dead = None  # the exception that ended the thread, if one did
        self.round_seq = 0  # rounds begun; err_seq: the round that set last_errno (see wait)
        self.err_seq = 0
        self.stats = dict(
            flush_rounds=0, flushed_bytes=0, sync_requests=0, sync_timeouts=0, prefaulted_bytes=0
        )
        self.seg_lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="rocketstore-flush", daemon=True)
        self.thread.start()

    def _round(self):
        # called with self.cond held
        lo, hi = self.flushed, self.wrote
        if hi <= lo:
            return
        self.round_seq += 1
        seq = self.round_seq
        self.cond.release()
        err = 0
        try:
            with self.seg_lock:
                for start, (fd, mm, size) in list(self.segments.items()):
                    if start < hi and lo < start + size:
                        try:
                            _data_sync(fd, mm, max(lo - start, 0), min(hi - start, size))
                        except Exception as exc:  # the waiting puts' error; the thread lives on
                            err = getattr(exc, "errno", None) or errno.EIO
                            self.last_error = exc
        finally:
            self.cond.acquire()
        if not err:
            self.flushed = max(self.flushed, hi)
            self.stats["flush_rounds"] += 1
            self.stats["flushed_bytes"] += hi - lo
        self.last_errno = err
        if err:
            self.err_seq = seq
        self.cond.notify_all()

    def _run(self):
        try:
            self._serve()
        except BaseException as exc:
            with self.cond:
                self.dead = exc
                self.cond.notify_all()
            raise

    def _serve(self):
        with self.cond:
            next_async = time.monotonic() + self.interval
            last_thorough = time.monotonic()
            while not self.stop:
                if self.requested > self.flushed:
                    self._round()
                    if self.last_errno:
                        self.cond.wait(0.01)
                    continue
                now = time.monotonic()
                if now >= next_async:
                    next_async = now + self.interval
                    if now - last_thorough >= self.thorough:
                        last_thorough = now
                        self._round()
                    elif self.wrote // self.page - self.flushed // self.page >= self.least_pages:
                        self._round()
                    continue
                self.cond.wait(next_async - now)
            self._round()

    def wait(self, target, timeout_ms):
        if self.flushed >= target:
            return 0
        deadline = None if timeout_ms < 0 else time.monotonic() + timeout_ms / 1000
        with self.cond:
            # only an error of a round begun after this wait covers the target (see flusher.c)
            seen = self.round_seq
            self.stats["sync_requests"] += 1
            if target > self.requested:
                self.requested = target
                self.cond.notify_all()
            while self.flushed < target:
                if self.last_errno and self.err_seq > seen:
                    return self.last_errno
                if self.dead is not None:
                    return errno.EIO  # the thread is gone: nothing will flush this
                if self.stop:
                    return errno.ESHUTDOWN
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    self.stats["sync_timeouts"] += 1
                    return 1
                self.cond.wait(left)
        return 0

    def request(self, target):
        if self.flushed >= target:
            return
        with self.cond:
            if target > self.requested:
                self.requested = target
                self.cond.notify_all()

    def close(self):
        with self.cond:
            self.stop = True
            self.cond.notify_all()
        self.thread.join()


class _Topic:
    __slots__ = ("name", "nqueues", "next_offsets", "rr", "slot", "committed", "entry", "dirty", "shared_nq")

    def __init__(self, name, nqueues):
        self.name = name.encode("utf-8")
        self.slot = _body_crc(self.name) % _LIVE_SLOTS  # its live page slot
        self.nqueues = nqueues
        self.next_offsets: Any = [0] * max(1, nqueues)
        self.rr = 0
        # in the shared append table (rocketstore.log.sharedappend): its next[] and committed[] as
        # int64 views, the entry's offset, and the queues moved in the current append
        self.committed: Any = None
        self.entry = -1
        self.dirty = set()
        self.shared_nq: Any = None  # its queue count in the table (an int32 view), once attached

    def attach(self, table, at):
        whole = memoryview(table)
        self.next_offsets = whole[at + _ap.E_NEXT : at + _ap.E_NEXT + 8 * _ap.QUEUES].cast("q")
        self.committed = whole[at + _ap.E_COMMITTED : at + _ap.E_COMMITTED + 8 * _ap.QUEUES].cast("q")
        self.shared_nq = whole[at + _ap.E_NQUEUES : at + _ap.E_NQUEUES + 4].cast("i")
        self.entry = at


_PROP_CRC_NAME = b"__CRC32#\x01"
_PROP_CRC_RESERVED = _PROP_CRC_NAME + b"0" * 10 + b"\x02"

#: Forks since this module loaded, counted in the child: a core made before a fork refuses to
#: append in the child (its files are the parent's).
_FORKS = [0]


def _forked() -> None:
    _FORKS[0] += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


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
        self._fork_gen, self._opener = _FORKS[0], os.getpid()  # see _check_open
        self._flusher = _Flusher(start_offset, flush_interval_ms, flush_least_pages, flush_thorough_ms)
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
        _live_word(page)
        self._live = page

    # ---- topics and queue offsets ----

    def _topic(self, topic):
        t = self._topics.get(topic)
        if t is not None:
            if t.shared_nq is not None:  # (the table's map, also after unshare(), as the compiled twin)
                shared = t.shared_nq[0]
                if shared > 0:
                    t.nqueues = shared  # the owner changed the count
            return t
        nqueues = self._topic_lookup(topic)
        if self._share is not None:
            return self._shared_topic(topic, nqueues)
        t = _Topic(topic, nqueues)
        for qid, nxt in self._pending.pop(topic, {}).items():
            if 0 <= qid < t.nqueues:
                t.next_offsets[qid] = nxt
        # another thread may have created the entry meanwhile: keep the first one
        return self._topics.setdefault(topic, t)

    # ---- the shared append table (rocketstore.log.sharedappend) ----

    def share(self, table, fd, epoch, owner):
        """See the compiled twin."""
        if len(table) < _ap.SIZE or epoch == 0:
            raise ValueError("not a shared append table, or epoch 0")
        self._check_open()
        mutex = _ap.Mutex(table)
        with self._lock:
            mutex.lock()
            try:
                if owner:
                    struct.pack_into("<Q", table, _ap.O_EPOCH, 0)
                    table[0:128] = bytes(128)  # (not the mutex after it: this process holds it)
                    table[256:4096] = bytes(4096 - 256)
                    struct.pack_into("<Q", table, _ap.O_MAGIC, _ap.MAGIC)
                    struct.pack_into("<q", table, _ap.O_SEGMENT, self._file_size)
                    struct.pack_into("<q", table, _ap.O_END, self._file_from + self._pos)
                    struct.pack_into("<q", table, _ap.O_PUBLISHING, self._file_from + self._pos)
                    struct.pack_into("<q", table, _ap.O_LAST_TS, self._last_store_ts)
                    struct.pack_into("<I", table, _ap.O_REFUSING, self._refusal is not None)
                    for t in list(self._topics.values()):
                        at = _ap.add(table, t.name, -1 if t.nqueues > _ap.QUEUES else t.nqueues)
                        if at < 0 or t.nqueues > _ap.QUEUES:
                            continue
                        old = list(t.next_offsets)[: _ap.QUEUES]
                        t.attach(table, at)
                        for q, nxt in enumerate(old):
                            t.next_offsets[q] = t.committed[q] = nxt
                    for name, qs in self._pending.items():
                        at = _ap.add(table, name.encode(), 0)
                        if at >= 0:
                            for q, nxt in qs.items():
                                if 0 <= q < _ap.QUEUES:
                                    struct.pack_into("<q", table, at + _ap.E_NEXT + 8 * q, nxt)
                                    struct.pack_into("<q", table, at + _ap.E_COMMITTED + 8 * q, nxt)
                    self._pending = {}
                    struct.pack_into("<Q", table, _ap.O_EPOCH, epoch)
                elif struct.unpack_from("<QQ", table, _ap.O_MAGIC) != (_ap.MAGIC, epoch) or (
                    struct.unpack_from("<q", table, _ap.O_SEGMENT)[0] != self._file_size
                ):
                    raise _ap.StaleTable("the shared append table is not the owner's")
            finally:
                mutex.unlock()
            self._mutex = mutex
            self._share = table
            self._share_fd = fd
            self._epoch = epoch
            self._share_owner = owner
            self._dirty = []

    @property
    def shared(self):
        return self._share is not None

    def _shared_topic(self, topic, nqueues):
        name = topic.encode("utf-8")
        table = self._share
        with self._lock:
            t = self._topics.get(topic)
            if t is not None:
                return t
            self._mutex.lock()
            try:
                if struct.unpack_from("<Q", table, _ap.O_EPOCH)[0] != self._epoch:
                    raise _ap.StaleTable("the store's writing process is opening, closing or gone")
                at = _ap.find(table, name)
                if at < 0 and nqueues <= _ap.QUEUES and not struct.unpack_from("<I", table, _ap.O_FULL)[0]:
                    at = _ap.add(table, name, nqueues)
                elif at >= 0 and struct.unpack_from("<i", table, at + _ap.E_NQUEUES)[0] < 0:
                    at = -1
                if at < 0 and not self._share_owner:
                    raise _ap.NotShareable(f"topic {topic!r} is not in the shared append table")
            finally:
                self._mutex.unlock()
            t = _Topic(topic, nqueues)
            if at >= 0:
                t.attach(table, at)
                if struct.unpack_from("<i", table, at + _ap.E_NQUEUES)[0] == 0:
                    struct.pack_into("<i", table, at + _ap.E_NQUEUES, nqueues)
            self._topics[topic] = t
            return t

    @contextlib.contextmanager
    def _appending(self):
        """The append lock: this core's, and the shared table's (adopting what other processes
        appended meanwhile; StaleTable, having taken nothing, when its epoch moved on)."""
        if self._fork_gen != _FORKS[0]:
            self._refuse_forked()  # (before the lock: a parent's thread may have held it at the fork)
        with self._lock:
            table = self._share
            if self._closed and table is not None and not self._share_owner:
                self._raise_closed()  # closed since the caller's look: its file is closed too
            if table is None:
                try:
                    yield
                finally:
                    self._commit_dirty()  # an owner that stopped sharing: its entries stay
                    self._notify()
                return
            self._mutex.lock()
            try:
                if struct.unpack_from("<Q", table, _ap.O_EPOCH)[0] != self._epoch:
                    raise _ap.StaleTable("the store's writing process is opening, closing or gone")
                if not self._share_owner:
                    now = _now_ms()
                    if not 0 <= now - self._owner_seen_ms < _ap.OWNER_LOOK_MS:
                        if not _ap.owner_present(self._share_fd):
                            raise _ap.StaleTable("the store's writing process is gone")
                        self._owner_seen_ms = now
                if struct.unpack_from("<I", table, _ap.O_BUSY)[0]:
                    _ap.repair(table)  # a writer died inside: its offsets and half-written bytes go
                end, last_ts = struct.unpack_from("<qq", table, _ap.O_END)
                self._adopt(end, last_ts)
                struct.pack_into("<I", table, _ap.O_BUSY, os.getpid())
                try:
                    yield
                finally:
                    # the end first, then the committed offsets, then the end published: a writer
                    # killed in between is finished by the next (sharedappend.repair), so the
                    # committed offsets never count a record past the published end
                    end = self._file_from + self._pos
                    _publish_fault(1)
                    struct.pack_into("<q", table, _ap.O_LAST_TS, self._last_store_ts)
                    struct.pack_into("<q", table, _ap.O_PUBLISHING, end)
                    _publish_fault(2)
                    self._commit_dirty(_debug_publish_step == 3)
                    _publish_fault(4)
                    struct.pack_into("<q", table, _ap.O_END, end)
                    _publish_fault(5)
                    struct.pack_into("<I", table, _ap.O_BUSY, 0)
                    _publish_fault(6)
                    # Readers learn of the records only now, after the table: a writer killed
                    # before this line leaves them to be written over by the next append.
                    self._notify()
            finally:
                self._mutex.unlock()

    def _notify(self):
        """Publish where whole records end in the live page, and wake the waiters of the topics
        put since the last call (the compiled twin's ``_notify``)."""
        dirty, self._live_dirty = self._live_dirty, set()
        if self._live is not None:
            _live_publish(self._live, self._flusher.wrote, dirty)

    def _commit_dirty(self, fault=False):
        for t in self._dirty:
            for q in t.dirty:
                t.committed[q] = t.next_offsets[q]
                if fault:
                    os._exit(86)  # (_debug_publish_fault: after the first queue's)
            t.dirty.clear()
        self._dirty.clear()

    def _adopt(self, end, last_ts):
        self._last_store_ts = max(self._last_store_ts, last_ts)
        if end == self._file_from + self._pos:
            return
        start = end - end % self._file_size
        if start != self._file_from or self._mm is None:
            if self._share_owner:  # adopts the segments, and flushes the others' records too
                mm, fd = self._roll(start)
                self.add_segment(mm, start, fd)
                self.release_flushed_segments()
            self._mm = None
            self._file_from = start
        self._pos = end - start
        self._publish(end)

    def unshare(self):
        """See the compiled twin."""
        with self._lock:
            if self._share is None:
                return
            with self._appending():
                struct.pack_into("<Q", self._share, _ap.O_EPOCH, 0)
            self._share = None

    def sync_shared(self):
        if self._share is None or self._closed:
            return
        if struct.unpack_from("<q", self._share, _ap.O_END)[0] == self._file_from + self._pos:
            return
        with self._appending():
            pass

    def set_queue_offset(self, topic, queue_id, next_offset):
        t = self._topics.get(topic)
        if t is not None and 0 <= queue_id < len(t.next_offsets):
            t.next_offsets[queue_id] = next_offset
        else:
            self._pending.setdefault(topic, {})[queue_id] = next_offset

    def queue_offsets(self):
        out = {}
        for name, t in list(self._topics.items()):
            for q, nxt in enumerate(t.next_offsets):
                if nxt:
                    out[(name, q)] = nxt
        for name, qs in self._pending.items():
            for q, nxt in qs.items():
                out.setdefault((name, q), nxt)
        return out

    def forget_topic(self, topic):
        """Take the new queue count of ``topic`` after it changed. The cached entry is changed
        in place under the append lock (never replaced: a put holding the old entry would hand
        out queue offsets again); its offsets are kept, also those of queues beyond a smaller
        count, which a put that chose its queue before the change may still use."""
        nqueues = self._topic_lookup(topic)
        with self._lock:
            t = self._topics.get(topic)
            if t is None:
                return
            have = len(t.next_offsets)
            if t.shared_nq is not None:  # in the shared table: it holds QUEUES queues
                nqueues = min(nqueues, _ap.QUEUES)
                t.shared_nq[0] = nqueues
            elif nqueues > have:
                t.next_offsets.extend([0] * (nqueues - have))
                pending = self._pending.get(topic, {})
                for qid in range(have, nqueues):
                    if qid in pending:
                        t.next_offsets[qid] = pending.pop(qid)
            t.nqueues = nqueues

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
        if self._fork_gen != _FORKS[0]:
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
        out = PutResult()
        crc_extra = self._prop_crc_extra(props, unique_key)
        if unique_key is None:
            unique_key = self._make_uniq(now)
            props = props + _UNIQ_NAME + unique_key.encode("ascii") + b"\x02"
        out._unique_key = unique_key  # noqa: SLF001 (a put result filled by its maker in this module)
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
        out.commitlog_offset = physical
        out.size = length
        out.queue_id = queue_id
        out.queue_offset = queue_offset
        out.store_timestamp = now
        out._host = self._store_host  # noqa: SLF001 (a put result filled by its maker in this module)
        out._port = self._store_port  # noqa: SLF001 (a put result filled by its maker in this module)
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
        t = self._topic(topic)
        qid = self._choose_queue(t, queue_id)
        body = contiguous(body)
        if type(body) is not bytes:
            body = memoryview(body).cast("B")
        props = bytes(properties) if properties is not None else b""
        if len(props) > MAX_PROPERTIES_LENGTH:
            raise PropertiesTooLargeError(
                f"properties are {len(props)} bytes encoded; the limit is {MAX_PROPERTIES_LENGTH}"
            )
        if len(body) > self._max_message_size:
            raise MessageTooLargeError(
                f"body of {len(body)} bytes exceeds max_message_size {self._max_message_size}"
            )
        length = self._validate(t, len(body), props, unique_key, sys_flag)
        crc = _body_crc(body)
        with self._appending():
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
        t = self._topic(topic)
        qid = self._choose_queue(t, queue_id)
        body = bytes(body)
        if len(body) > self._max_message_size:
            raise MessageTooLargeError(
                f"body of {len(body)} bytes exceeds max_message_size {self._max_message_size}"
            )
        crc = _body_crc(body)
        with self._appending():
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
        self._check_open()
        if self._refusal is not None:
            return self._not_stored(_SERVICE_NOT_AVAILABLE, self._refused(), wait, None)
        t = self._topic(topic)
        if sys_flag & SYSFLAG_TRANSACTION_MASK:
            raise InvalidMessageError("a batch may not be transactional (spec §1.7)")
        props = bytes(properties) if properties is not None else b""
        if len(props) > MAX_PROPERTIES_LENGTH:
            raise PropertiesTooLargeError(
                f"properties are {len(props)} bytes encoded; the limit is {MAX_PROPERTIES_LENGTH}"
            )
        if lengths is not None:
            lens = batch_lengths(lengths)
            whole = memoryview(contiguous(bodies, "bodies")).cast("B")
            if int(lens.sum()) != len(whole):
                raise InvalidMessageError(
                    f"lengths sum to {int(lens.sum())} but the bodies buffer holds {len(whole)} bytes"
                )
            starts = np.concatenate(([0], np.cumsum(lens)[:-1])) if len(lens) else lens
            items = [whole[int(s) : int(s) + int(n)] for s, n in zip(starts, lens)]
        else:
            items = [
                b if type(b) is bytes else memoryview(contiguous(b, "an item of bodies")).cast("B")  # type: ignore[misc]
                for b in bodies
            ]
        n = len(items)
        lengths_ = []
        for i, body in enumerate(items):
            if len(body) > self._max_message_size:
                raise MessageTooLargeError(
                    f"bodies[{i}] of {len(body)} bytes exceeds max_message_size {self._max_message_size}"
                )
            try:
                lengths_.append(self._validate(t, len(body), props, None, sys_flag))
            except MessageTooLargeError:
                raise MessageTooLargeError(
                    f"record {i} exceeds max_message_size {self._max_message_size}"
                ) from None
        if len(props) + self._uniq_extra() > MAX_PROPERTIES_LENGTH:
            raise PropertiesTooLargeError("properties plus UNIQ_KEY exceed 32767 bytes")
        qid = self._choose_queue(t, queue_id)
        crcs = [_body_crc(b) for b in items]
        res = BatchPutResult()
        offsets = np.empty(n, dtype=np.int64)
        qoffs = np.empty(n, dtype=np.int64)
        times = np.empty(n, dtype=np.int64)
        sizes = np.empty(n, dtype=np.int32)
        keys = []
        end = 0
        with self._appending():
            self._check_open()
            try:
                self._reserve_space(lengths_)
            except SegmentError as exc:
                return self._not_stored(_CREATE_MAPPED_FILE_FAILED, exc, wait, None)
            res.first_queue_offset = t.next_offsets[qid]
            for i in range(n):
                r, end = self._append(
                    t, qid, items[i], crcs[i], props, None, flag, born_timestamp, sys_flag, 0, 0, lengths_[i]
                )
                offsets[i] = r.commitlog_offset
                sizes[i] = r.size
                qoffs[i] = r.queue_offset
                times[i] = r.store_timestamp
                keys.append(r._unique_key)  # noqa: SLF001 (a put result filled by its maker in this module)
        res._status = _PUT_OK  # noqa: SLF001 (a put result filled by its maker in this module)
        res.topic = topic
        res.queue_id = qid
        res.commitlog_offsets = offsets
        res.sizes = sizes
        res.queue_offsets = qoffs
        res.store_timestamps = times
        res._unique_keys = keys  # noqa: SLF001 (a put result filled by its maker in this module)
        res._host = self._store_host  # noqa: SLF001 (a put result filled by its maker in this module)
        res._port = self._store_port  # noqa: SLF001 (a put result filled by its maker in this module)
        if n == 0:
            return res
        return self._finish(res, end, wait)

    def put_many(self, items, wait=-1):
        self._check_open()
        if self._refusal is not None:
            return self._not_stored(_SERVICE_NOT_AVAILABLE, self._refused(), wait, len(items))
        checked = []
        for i, item in enumerate(items):
            topic, body, props, queue_id, flag, born_ts, sys_flag, reconsume, unique_key = item
            t = self._topic(topic)
            qid = self._choose_queue(t, queue_id)
            if len(body) > self._max_message_size:
                raise MessageTooLargeError(
                    f"message {i}: body of {len(body)} bytes exceeds max_message_size {self._max_message_size}"
                )
            try:
                length = self._validate(t, len(body), props, unique_key, sys_flag)
            except PropertiesTooLargeError:
                raise PropertiesTooLargeError(f"message {i}: properties exceed 32767 bytes") from None
            except MessageTooLargeError:
                raise MessageTooLargeError(
                    f"message {i}: record exceeds max_message_size {self._max_message_size}"
                ) from None
            checked.append(
                (
                    t,
                    qid,
                    body,
                    _body_crc(body),
                    props,
                    unique_key,
                    flag,
                    born_ts,
                    sys_flag,
                    reconsume,
                    0,
                    length,
                )
            )
        self._check_open()
        if wait < 0:
            wait = self._default_wait
        results = []
        end = 0
        with self._appending():
            self._check_open()
            try:
                self._reserve_space([args[-1] for args in checked])
            except SegmentError as exc:
                return self._not_stored(_CREATE_MAPPED_FILE_FAILED, exc, wait, len(checked))
            for args in checked:
                r, end = self._append(*args)
                results.append(r)
        if wait == WAIT_BLOCK and results:
            rc = self._wait(end, self._sync_flush_timeout_ms)
            if rc != 0:
                raise flush_timeout(results, rc)
        elif wait == WAIT_FUTURE and results:
            return [self._finish(r, end, WAIT_FUTURE) for r in results]
        return results

    def put_copies(self, rows, topics, items):
        """:meth:`put_many` of the copies a timer pass built as rows (the codec's
        ``timer_copy_rows``, any buffer: one row per copy, ``topics`` the names its rows index); a row with
        topic -1 stands for the next entry of ``items``, a put_many item or None (no copy).
        Validated whole before the first byte is written; returns ``(records written, the end
        offset of the last)``; the caller flushes."""
        rows = bytes(rows)  # any buffer
        copies, at, n, left = [], 0, 0, iter(items)
        while at < len(rows):
            if len(rows) - at < _COPY_ROW.size:
                raise ValueError("rows end in a torn row")
            topic, qid, flag, sys_flag, reconsume, body_len, props_len, has_key, born = _COPY_ROW.unpack_from(
                rows, at
            )
            start = at + _COPY_ROW.size
            if body_len < 0 or props_len < 0 or body_len + props_len > len(rows) - start:
                raise ValueError(f"row {n}: its lengths overrun the rows")
            at = start + body_len + props_len
            n += 1
            if topic == -1:
                item = next(left, _NO_ITEM)
                if item is _NO_ITEM:
                    raise ValueError("fewer items than rows that stand for one")
                if item is not None:
                    copies.append(item)
                continue
            if not 0 <= topic < len(topics):
                raise ValueError(f"row {n - 1}: topic {topic} is not one of the {len(topics)} topics")
            body, props = rows[start : start + body_len], rows[start + body_len : at]
            key = True if has_key else None
            copies.append((topics[topic], body, props, qid, flag, born, sys_flag, reconsume, key))
        if next(left, _NO_ITEM) is not _NO_ITEM:
            raise ValueError("more items than rows that stand for one")
        if not copies:
            return 0, 0
        results = self.put_many(copies, WAIT_NONE)
        last = results[-1]
        return len(results), last.commitlog_offset + last.size

    def put_keyed(self, topic, body, tags, keys, queue_id=-1, flag=0, wait=-1, properties=None):
        """:meth:`put` of a message whose properties are ``tags``, ``keys`` and a plain
        ``properties`` dict (see :func:`keyed_properties`); None, having done nothing, when they
        are not the plain shape (the caller then encodes them, or raises, on the general path)."""
        props = keyed_properties(tags, keys, properties)
        if props is None:
            return None
        return self.put(topic, body, props, queue_id, flag, 0, 0, 0, 0, None, wait)

    def put_plain_messages(self, messages, user_topics, wait=-1):
        """:meth:`put_many` of a batch of plain :class:`rocketstore.Message` objects (an exact
        Message of a topic in ``user_topics``, a bytes body, tags, keys and properties as
        :func:`keyed_properties` takes them, sys_flag and reconsume_times 0, queue id, flag and
        born timestamp exact ints in range); None, having written nothing, when the batch is
        empty or a message is not plain (the caller then takes the general path)."""
        items = []
        for m in messages:
            item = _plain_item(m, user_topics)
            if item is None:
                return None
            items.append(item)
        if not items:
            return None
        return self.put_many(items, wait)

    # ---- flushing, state ----

    @property
    def wrote_offset(self):
        if self._share is not None and self._share_owner and not self._closed:
            self.sync_shared()  # the others' records are the owner's to dispatch
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
            _live_publish(self._live, self._flusher.wrote)
            self._live = None

    @property
    def closed(self):
        return self._closed


# ---- puts at the engine's speed: MessageStore.put's common shapes in one call ----


class PutFront:
    """A writing store's ``put`` (rocketstore.store installs ``PutFront(...).put`` as the
    store's ``put``): the common shapes, ``put(topic, body)`` and ``put(topic, body, tags=...,
    keys=..., properties={...})`` of a topic already checked, go straight into the core; every
    other call
    (another shape, bad input, a closed core) is ``general(store, ...)``, which is
    :meth:`rocketstore.MessageStore.put` itself. ``put_pipelined`` is the same for the store's
    ``put_pipelined`` (``general_pipelined``), a future in place of the result. The compiled
    twin does the same in one C call."""

    __slots__ = ("_core", "_user_topics", "_store_ref", "_general", "_general_pipelined")

    def __init__(
        self, core: CommitLogCore, user_topics: set[str], store_ref: Any, general: Any, general_pipelined: Any
    ) -> None:
        if not isinstance(core, CommitLogCore) or type(user_topics) is not set:
            raise TypeError("PutFront needs a CommitLogCore and a set")
        self._core, self._user_topics, self._store_ref = core, user_topics, store_ref
        self._general, self._general_pipelined = general, general_pipelined

    def put(
        self,
        topic: Any,
        body: Any = None,
        *,
        tags: Any = None,
        keys: Any = None,
        properties: Any = None,
        queue_id: Any = -1,
        flag: Any = 0,
        durable: Any = None,
        delay_level: Any = None,
        deliver_at_ms: Any = None,
        delay_ms: Any = None,
        compress: Any = None,
    ) -> Any:
        """Store one message; see :meth:`rocketstore.MessageStore.put`."""
        if (
            compress is None
            and delay_level is None
            and deliver_at_ms is None
            and delay_ms is None
            and (durable is None or durable is True or durable is False)
        ):
            wait = -1 if durable is None else (1 if durable else 0)
            done = self._one_call(topic, body, tags, keys, properties, queue_id, flag, wait)
            if done is not None:
                return done
        store = self._store_ref()
        if store is None:
            raise StoreClosedError("the store is closed")
        return self._general(
            store,
            topic,
            body,
            tags=tags,
            keys=keys,
            properties=properties,
            queue_id=queue_id,
            flag=flag,
            durable=durable,
            delay_level=delay_level,
            deliver_at_ms=deliver_at_ms,
            delay_ms=delay_ms,
            compress=compress,
        )

    def _one_call(
        self,
        topic: Any,
        body: Any,
        tags: Any,
        keys: Any,
        properties: Any,
        queue_id: Any,
        flag: Any,
        wait: int,
    ) -> Any:
        """The shapes the core stores in one call (a known user topic, plain ints, tags, keys and
        plain properties), with the core's ``wait``; None, having done nothing, for any other."""
        core = self._core
        if (
            type(topic) is str
            and body is not None
            and not core._closed  # noqa: SLF001 (the front's own core: the raw flag, as the compiled front reads it)
            and topic in self._user_topics
            and _plain_int(queue_id, -1, _INT32_MAX)
            and _plain_int(flag, _INT32_MIN, _INT32_MAX)
        ):
            if tags is None and keys is None and properties is None:
                return core.put(topic, body, None, queue_id, flag, 0, 0, 0, 0, None, wait)
            return core.put_keyed(topic, body, tags, keys, queue_id, flag, wait, properties)
        return None

    def put_pipelined(
        self,
        topic: Any,
        body: Any = None,
        *,
        tags: Any = None,
        keys: Any = None,
        properties: Any = None,
        queue_id: Any = -1,
        flag: Any = 0,
        delay_level: Any = None,
        deliver_at_ms: Any = None,
        delay_ms: Any = None,
    ) -> Any:
        """Store one message durably without blocking; see
        :meth:`rocketstore.MessageStore.put_pipelined`. The shapes :meth:`put` takes in one call
        do here too, with a future; every other call is ``general_pipelined(store, ...)``."""
        if delay_level is None and deliver_at_ms is None and delay_ms is None:
            done = self._one_call(topic, body, tags, keys, properties, queue_id, flag, WAIT_FUTURE)
            if done is not None:
                return done
        store = self._store_ref()
        if store is None:
            raise StoreClosedError("the store is closed")
        return self._general_pipelined(
            store,
            topic,
            body,
            tags=tags,
            keys=keys,
            properties=properties,
            queue_id=queue_id,
            flag=flag,
            delay_level=delay_level,
            deliver_at_ms=deliver_at_ms,
            delay_ms=delay_ms,
        )
