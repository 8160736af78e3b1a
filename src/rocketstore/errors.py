"""The one error hierarchy of rocketstore, raised by the compiled and the pure-Python twins alike.

Bad input raises a subclass that is also a ``ValueError`` (or ``OSError`` for the environment),
and a call that raises has written nothing.
"""

__all__ = [
    "RocketStoreError",
    "InvalidMessageError",
    "InvalidTopicError",
    "SystemTopicError",
    "InvalidQueueIdError",
    "InvalidDelayLevelError",
    "PropertiesTooLargeError",
    "MessageTooLargeError",
    "InvalidMessageIdError",
    "CorruptRecordError",
    "MessageNotFoundError",
    "ConsumeQueueDamagedError",
    "StoreClosedError",
    "StoreLockedError",
    "StoreReadOnlyError",
    "StoreConfigError",
    "NotAStoreError",
    "SegmentError",
    "DiskFullError",
]


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


class InvalidQueueIdError(InvalidMessageError):
    """Queue id outside ``0 .. queues_per_topic - 1``."""


class InvalidDelayLevelError(InvalidMessageError):
    """A delay level that is not an int in ``1 .. len(message_delay_level)`` (18 by default),
    or a ``DELAY`` property that is not a decimal int."""


class PropertiesTooLargeError(InvalidMessageError):
    """The encoded properties string is longer than 32767 bytes (a Java signed short)."""


class MessageTooLargeError(InvalidMessageError):
    """The encoded record is longer than ``max_message_size`` (4 MiB by default)."""


class InvalidMessageIdError(RocketStoreError, ValueError):
    """A string that is not an offsetMsgId (32 or 56 hex characters) or UNIQ_KEY."""


class CorruptRecordError(RocketStoreError, ValueError):
    """Bytes that do not decode as a CommitLog record (bad magic, lengths or CRC)."""


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


class StoreReadOnlyError(RocketStoreError):
    """A write was attempted on a store opened read-only."""


class StoreConfigError(RocketStoreError, ValueError):
    """An invalid store option, or a store directory laid out for other options."""


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
