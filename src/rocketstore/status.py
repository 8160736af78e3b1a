"""Result statuses, in RocketMQ's enum order (spec §8 PutMessageStatus; GetMessageStatus)."""

import enum

__all__ = ["PutStatus", "GetMessageStatus"]


class PutStatus(enum.IntEnum):
    """Outcome of a put. Everything but ``PUT_OK`` and ``FLUSH_DISK_TIMEOUT`` means "not stored"."""

    PUT_OK = 0
    #: The message is stored, but the flush did not confirm in ``sync_flush_timeout_ms``.
    FLUSH_DISK_TIMEOUT = 1
    FLUSH_SLAVE_TIMEOUT = 2
    SLAVE_NOT_AVAILABLE = 3
    SERVICE_NOT_AVAILABLE = 4
    CREATE_MAPPED_FILE_FAILED = 5
    MESSAGE_ILLEGAL = 6
    PROPERTIES_SIZE_EXCEEDED = 7
    OS_PAGE_CACHE_BUSY = 8
    UNKNOWN_ERROR = 9

    def __str__(self) -> str:
        return self.name

    @property
    def stored(self) -> bool:
        """True when the message is in the CommitLog (PUT_OK or FLUSH_DISK_TIMEOUT)."""
        return self in (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT)


class GetMessageStatus(enum.IntEnum):
    """Outcome of :func:`~rocketstore.consume.get_message`, in RocketMQ's ``GetMessageStatus`` enum order."""

    #: At least one message is returned.
    FOUND = 0
    #: Units were examined, none matched (or the last one examined was filtered).
    NO_MATCHED_MESSAGE = 1
    #: Nothing collected and the last unit examined points at a record that is gone.
    MESSAGE_WAS_REMOVING = 2
    #: The units at ``offset`` could not be mapped (their file went away meanwhile).
    OFFSET_FOUND_NULL = 3
    #: ``offset > max_offset``.
    OFFSET_OVERFLOW_BADLY = 4
    #: ``offset == max_offset``: the consumer is caught up.
    OFFSET_OVERFLOW_ONE = 5
    #: ``offset < min_offset``.
    OFFSET_TOO_SMALL = 6
    #: No such consume queue.
    NO_MATCHED_LOGIC_QUEUE = 7
    #: The queue has never held a unit (``max_offset == 0``).
    NO_MESSAGE_IN_QUEUE = 8
    #: 5.x only (offset-reset feature); never returned here.
    OFFSET_RESET = 9

    def __str__(self) -> str:
        return self.name
