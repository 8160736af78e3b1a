"""Result statuses, in RocketMQ's enum order (spec §8 PutMessageStatus)."""

import enum

__all__ = ["PutStatus"]


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
