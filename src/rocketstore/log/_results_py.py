"""What a put answers: PutResult, BatchPutResult and PutFuture (a durable put in flight).

Part of the pure-Python twin of ``rocketstore.log._store``, gathered by
:mod:`rocketstore.log._store_py`; the compiled twin's is cext/store/results.pxi.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, Optional

from rocketstore.base._clock import now_ms as _now_ms
from rocketstore.files.mapped_file import flush_timeout
from rocketstore.format._codec_py import make_offset_msg_id
from rocketstore.status import PutStatus

_PUT_OK = PutStatus.PUT_OK


class _Outcome:
    """What PutResult and BatchPutResult share: a put's status and a flush's error."""

    __slots__ = ("_status", "error")

    _status: int
    #: a flush's error (with status FLUSH_DISK_TIMEOUT), else None
    error: Optional[BaseException]

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


class PutResult(_Outcome):
    """Where a put landed: status, commitlog offset and size, queue id/offset, store time, ids."""

    __slots__ = (
        "commitlog_offset",
        "size",
        "queue_id",
        "queue_offset",
        "store_timestamp",
        "_unique_key",
        "_host",
        "_port",
    )

    commitlog_offset: int  #: where the record starts in the CommitLog
    size: int  #: the record's length in bytes
    queue_id: int
    queue_offset: int  #: the message's position in its ConsumeQueue
    store_timestamp: int  #: ms since the epoch

    def __init__(self) -> None:
        self._status = _PUT_OK
        self._unique_key: Optional[str] = None
        self._host = b""
        self._port = 0
        self.error = None

    @property
    def unique_key(self) -> Optional[str]:
        """The UNIQ_KEY property: the client-side message id (msgId)."""
        return self._unique_key

    @property
    def msg_id(self) -> str:
        """The offsetMsgId: store host, port and CommitLog offset in hex."""
        return str(make_offset_msg_id(self._host, self._port, self.commitlog_offset))

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
    r = put_result(commitlog_offset, size, queue_id, queue_offset, store_timestamp, unique_key, host, port)
    r._status = status  # noqa: SLF001 (a put result filled by its maker in this module)
    r.error = error
    return r


class BatchPutResult(_Outcome):
    """Results of one batch put: columns, plus ``len()`` and indexing to a ``PutResult``."""

    __slots__ = (
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
    )

    topic: str
    queue_id: int
    first_queue_offset: int
    commitlog_offsets: Any  #: int64 array, one per message
    sizes: Any  #: int32 array
    store_timestamps: Any  #: int64 array
    queue_offsets: Any  #: int64 array
    _unique_keys: list[Optional[str]]
    _host: bytes
    _port: int

    def __init__(self) -> None:
        self.error = None

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
            self._core._watcher_add(self, fn)  # noqa: SLF001 (PutFuture and its core, one twin: the compiled one calls it too)

    def __await__(self) -> Generator[Any, None, Any]:
        import asyncio

        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.add_done_callback(
            lambda _f: loop.call_soon_threadsafe(lambda: None if fut.done() else fut.set_result(None))
        )
        yield from fut.__await__()
        return self.result()


def put_result(
    commitlog_offset: int,
    size: int,
    queue_id: int,
    queue_offset: int,
    store_timestamp: int,
    unique_key: Optional[str],
    host: bytes,
    port: int,
) -> PutResult:
    """The PutResult of a record stored (status PUT_OK)."""
    r = PutResult()
    r.commitlog_offset = commitlog_offset
    r.size = size
    r.queue_id = queue_id
    r.queue_offset = queue_offset
    r.store_timestamp = store_timestamp
    r._unique_key = unique_key  # noqa: SLF001 (a put result filled by its maker in this module)
    r._host = host  # noqa: SLF001 (a put result filled by its maker in this module)
    r._port = port  # noqa: SLF001 (a put result filled by its maker in this module)
    return r


def batch_put_result(
    topic: str,
    queue_id: int,
    first_queue_offset: int,
    columns: tuple[Any, Any, Any, Any],
    unique_keys: list[Optional[str]],
    host: bytes,
    port: int,
) -> BatchPutResult:
    """The BatchPutResult of a batch stored (status PUT_OK); ``columns`` its commitlog offsets,
    sizes, queue offsets and store timestamps."""
    res = BatchPutResult()
    res._status = _PUT_OK  # noqa: SLF001 (a put result filled by its maker in this module)
    res.topic = topic
    res.queue_id = queue_id
    res.first_queue_offset = first_queue_offset
    res.commitlog_offsets, res.sizes, res.queue_offsets, res.store_timestamps = columns
    res._unique_keys = unique_keys  # noqa: SLF001 (a put result filled by its maker in this module)
    res._host = host  # noqa: SLF001 (a put result filled by its maker in this module)
    res._port = port  # noqa: SLF001 (a put result filled by its maker in this module)
    return res
