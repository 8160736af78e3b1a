"""The one error hierarchy of rocketstore, raised by the compiled and the pure-Python twins alike.

Bad input raises a subclass that is also a ``ValueError`` (or ``OSError`` for the environment),
and a call that raises has written nothing.

A put that could not store its message raises a :class:`PutError` (nothing of it, or of its
batch, was written); a put whose message IS stored but whose flush did not confirm in time
raises :class:`FlushTimeoutError`, which is not a ``PutError`` and carries the result.
"""

from typing import Any

from rocketstore.status import PutStatus

__all__ = [
    "RocketStoreError",
    "UnknownOptionError",
    "InvalidMessageError",
    "InvalidTopicError",
    "SystemTopicError",
    "TransactionStateError",
    "CompressionUnavailableError",
    "UnsupportedStoreError",
    "BatchTopicError",
    "KeyRequiredError",
    "InvalidQueueIdError",
    "InvalidDelayLevelError",
    "InvalidTimerError",
    "TimerTooFarError",
    "PropertiesTooLargeError",
    "MessageTooLargeError",
    "InvalidMessageIdError",
    "CorruptRecordError",
    "MessageNotFoundError",
    "ConsumeQueueDamagedError",
    "StoreClosedError",
    "StoreLockedError",
    "WriterGoneError",
    "StoreReadOnlyError",
    "StoreConfigError",
    "NotAStoreError",
    "SegmentError",
    "DiskFullError",
    "OpenFilesLimitError",
    "PutError",
    "ServiceNotAvailableError",
    "CreateMappedFileFailedError",
    "PutRefusedDiskFullError",
    "SegmentDiskFullError",
    "FlushTimeoutError",
    "InvalidReceiptHandleError",
    "ReceiptHandleExpiredError",
]


class PureBuildWarning(RuntimeWarning):
    """The compiled modules did not import, and nobody asked for the pure-Python build.

    Shown once per process at import. The pure build is correct but 10-25 times slower: install a
    C compiler and reinstall, or set ``ROCKETSTORE_NO_EXTENSIONS=1`` to choose it and silence this.
    """


class RocketStoreError(Exception):
    """Base class of every error rocketstore raises on purpose."""


class InvalidMessageError(RocketStoreError, ValueError):
    """A message that cannot be stored as given (nothing was written)."""


class InvalidTopicError(InvalidMessageError):
    """Topic empty, longer than 127 characters, or with characters outside ``[%|a-zA-Z0-9_-]``."""


class SystemTopicError(InvalidTopicError):
    """A put to one of RocketMQ's system topics (``SCHEDULE_TOPIC_XXXX``, ``RMQ_SYS_*``,
    ``%RETRY%<group>``, ``%DLQ%<group>``, ...): only the store itself writes there (delayed
    messages, :meth:`~rocketstore.MessageStore.send_back`). Reading them is allowed."""


class BatchTopicError(InvalidTopicError):
    """A put to a topic whose queues are RocketMQ 5.x BatchConsumeQueues (``queue.type=BatchCQ``):
    the store reads them, but does not write them yet."""


class KeyRequiredError(InvalidMessageError):
    """A put of one message without keys (no ``KEYS``, or only blanks) to a compacted topic
    (``cleanup.policy=COMPACTION``): RocketMQ 5.x's broker refuses such a send (MESSAGE_ILLEGAL,
    "Required message key is missing"), since compaction keeps the latest message of each key.
    A batch (``put_batch``, ``put_messages``) is not checked, as the broker's batch send is not:
    its messages without keys are stored, and compaction leaves them out."""


class InvalidQueueIdError(InvalidMessageError):
    """Queue id outside ``0 .. queues_per_topic - 1``."""


class InvalidDelayLevelError(InvalidMessageError):
    """A delay level that is not an int in ``1 .. len(message_delay_level)`` (18 by default),
    or a ``DELAY`` property that is not a decimal int."""


class InvalidTimerError(InvalidMessageError):
    """A timer message (``deliver_at_ms=`` / ``delay_ms=``, or a ``TIMER_DELIVER_MS`` /
    ``TIMER_DELAY_SEC`` / ``TIMER_DELAY_MS`` property) whose time is not a decimal int, that is
    also given a delay level, or that names more than one of them (RocketMQ 5.x's
    ``WHEEL_TIMER_MSG_ILLEGAL``). Nothing was written."""


class TimerTooFarError(InvalidTimerError):
    """A timer message due further ahead than ``timer_max_delay_sec`` (RocketMQ 5.x's
    ``timerMaxDelaySec``, 3 days). Nothing was written."""


class PropertiesTooLargeError(InvalidMessageError):
    """The encoded properties string is longer than 32767 bytes (a Java signed short)."""


class MessageTooLargeError(InvalidMessageError):
    """The encoded record is longer than ``max_message_size`` (4 MiB by default)."""


class InvalidMessageIdError(RocketStoreError, ValueError):
    """A string that is not an offsetMsgId (32 or 56 hex characters) or UNIQ_KEY."""


class CorruptRecordError(RocketStoreError, ValueError):
    """Bytes that do not decode as a CommitLog record (bad magic, lengths or CRC); ``reason`` is
    the decoder's stop code and ``position`` where in the buffer it stopped (when known)."""

    reason: int = 0
    position: int = -1


class MessageNotFoundError(RocketStoreError, LookupError):
    """No message at that offset or with that id in this store."""


class ConsumeQueueDamagedError(MessageNotFoundError):
    """A ConsumeQueue position whose unit does not point at its own message (topic, queue id,
    queue offset, size and CRC checked), and that rebuilding the queue from the CommitLog did not
    mend. The position is reported missing; no other message is ever handed out in its place.
    ``topic``, ``queue_id`` and ``queue_offset`` name it."""

    def __init__(self, message: str, topic: str = "", queue_id: int = -1, queue_offset: int = -1):
        super().__init__(message)
        self.topic, self.queue_id, self.queue_offset = topic, queue_id, queue_offset


class StoreClosedError(RocketStoreError):
    """The store was closed; open it again to use it."""


class StoreLockedError(RocketStoreError, OSError):
    """Another process (or another store object) holds the store's write lock."""


class WriterGoneError(RocketStoreError):
    """A joined writer's call (see :mod:`rocketstore.processes.writers`) reached the process that wrote
    for the store, and that process ended before it answered: whether the call took effect is
    unknown. The store carries on (this process or another writes for it now). Look a put up
    (by a ``UNIQ_KEY`` or key you gave it) before putting it again."""


class StoreReadOnlyError(RocketStoreError):
    """A write was attempted on a store opened read-only."""


class StoreConfigError(RocketStoreError, ValueError):
    """An invalid store option, or a store directory laid out for other options."""


class UnknownOptionError(StoreConfigError, TypeError):
    """An option name :class:`rocketstore.config.StoreConfig` does not have; a ``TypeError``
    too, as any unknown keyword argument is."""


class UnsupportedStoreError(StoreConfigError):
    """A RocketMQ store rocketstore can read but must not write: a writable open would leave
    the broker's own files out of step (a RocksDB ConsumeQueue, RocketMQ 5.x's
    ``storeType=defaultRocksDB``). Open it with ``read_only=True``; nothing was touched."""


class NotAStoreError(StoreConfigError):
    """The directory exists and is not empty, but holds no store (no ``commitlog/`` of
    20-digit segments, no rocketstore files): it is not opened and nothing in it is touched."""


class SegmentError(RocketStoreError, OSError):
    """A CommitLog segment could not be created, mapped or grown (disk full, permissions)."""


class DiskFullError(SegmentError):
    """No space for the store's files: a segment or queue file could not be created or grown
    (ENOSPC, EDQUOT), or the disk is above ``disk_space_warning_level_ratio`` and puts are
    refused until retention frees space (spec §9). Nothing of the refused write was stored;
    writes resume by themselves once space returns."""


class OpenFilesLimitError(SegmentError):
    """The process ran out of file descriptors (EMFILE) or the system did (ENFILE): a store keeps
    one or two per CommitLog segment and per ConsumeQueue and index file. An open raises the
    soft limit to the hard limit (``raise_open_files_limit``); past that, raise the hard limit
    (``ulimit -n``, systemd's ``LimitNOFILE``). Nothing of the failed call was stored."""


class PutError(RocketStoreError):
    """A put that did NOT store its message: nothing of it (or of its batch) was written, so it
    may be retried. ``status`` is RocketMQ's PutMessageStatus (a :class:`PutStatus`);
    ``__cause__`` the error behind it, when there is one."""

    status = PutStatus.UNKNOWN_ERROR


class ServiceNotAvailableError(PutError):
    """The store refuses puts for now (SERVICE_NOT_AVAILABLE)."""

    status = PutStatus.SERVICE_NOT_AVAILABLE


class CreateMappedFileFailedError(PutError, SegmentError):
    """No CommitLog segment space could be had for the message (CREATE_MAPPED_FILE_FAILED):
    a segment could not be created, mapped or its pages reserved."""

    status = PutStatus.CREATE_MAPPED_FILE_FAILED


class PutRefusedDiskFullError(ServiceNotAvailableError, DiskFullError):
    """Puts are refused because the disk is above ``disk_space_warning_level_ratio``
    (SERVICE_NOT_AVAILABLE); they are accepted again once retention has made room."""


class SegmentDiskFullError(CreateMappedFileFailedError, DiskFullError):
    """The file system is out of space for a new segment or its pages (ENOSPC, EDQUOT;
    CREATE_MAPPED_FILE_FAILED)."""


class FlushTimeoutError(RocketStoreError):
    """The message IS stored, but its flush did not confirm within ``sync_flush_timeout_ms``
    or failed (FLUSH_DISK_TIMEOUT): it is readable, and durable once a later flush succeeds.

    ``result`` is the put's result (a ``PutResult``, a ``BatchPutResult`` or, for
    ``put_messages``, the list of ``PutResult``) with that status; ``__cause__`` is the flush's
    error when it failed rather than timed out. Not a :class:`PutError`: retrying would store
    the message twice."""

    status = PutStatus.FLUSH_DISK_TIMEOUT

    def __init__(self, message: str, result: Any = None) -> None:
        super().__init__(message)
        self.result = result


class InvalidReceiptHandleError(RocketStoreError, ValueError):
    """Not a receipt handle :meth:`~rocketstore.MessageStore.receive` of this store handed out
    (malformed, or naming a queue position never received); nothing was acknowledged."""


class ReceiptHandleExpiredError(RocketStoreError):
    """A receipt handle whose message was handed out again after its invisible time ran out
    (another receiver has it now), or, for ``change_invisible_time``, whose message is already
    acknowledged. ``handles`` lists the handles concerned; for ``ack_many``, ``acked`` counts the
    other handles' messages, which were acknowledged all the same."""

    def __init__(self, message: str, handles: Any = (), acked: int = 0) -> None:
        super().__init__(message)
        self.handles = list(handles)
        self.acked = acked


def not_stored(status: int, cause: BaseException) -> PutError:
    """The :class:`PutError` for a put that wrote nothing because of ``cause`` (both twins use
    it, so they raise the same class with the same message); ``raise ... from cause``."""
    disk_full = isinstance(cause, DiskFullError)
    cls: type[PutError]
    if status == PutStatus.SERVICE_NOT_AVAILABLE:
        cls = PutRefusedDiskFullError if disk_full else ServiceNotAvailableError
    elif status == PutStatus.CREATE_MAPPED_FILE_FAILED:
        cls = SegmentDiskFullError if disk_full else CreateMappedFileFailedError
    else:
        cls = PutError
    if issubclass(cls, OSError) and isinstance(cause, OSError) and cause.errno is not None:
        args: tuple[Any, ...] = (cause.errno, cause.strerror)
        if cause.filename is not None:
            args += (cause.filename,)
        return cls(*args)
    return cls(str(cause))


class TransactionStateError(RocketStoreError):
    """A commit of a transaction that was rolled back, or a rollback of one that was committed
    (:meth:`~rocketstore.MessageStore.commit_transaction`); nothing was written."""


class CompressionUnavailableError(RocketStoreError, ImportError):
    """A body is compressed (or is to be) with a codec whose library is not installed: LZ4 needs
    the ``lz4`` package, zstd ``zstandard`` (a clone's extras ``.[lz4]``, ``.[zstd]``). The
    stored bytes stay readable as ``MessageExt.stored_body``."""
