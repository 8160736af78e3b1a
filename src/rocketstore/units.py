"""The ConsumeQueue unit as data: its 20-byte layout, its numpy dtype and the placeholder,
and what a pull of units hands back (:class:`GetMessageResult`).

Everything that reads or writes units uses these: the codec's batch reads, the ConsumeQueue files,
dispatch, the pulls of :mod:`rocketstore.consume`. Nothing here knows files or a store.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from rocketstore.status import GetMessageStatus

if TYPE_CHECKING:
    from rocketstore.message import MessageExt

__all__ = [
    "CQ_UNIT_SIZE",
    "CQ_UNIT_DTYPE",
    "PLACEHOLDER_SIZE",
    "GetMessageResult",
    "DamagedUnit",
]

# -- the unit layout, each field placed after the previous one ----------------------------------
CQ_OFFSET_POS = 0
CQ_OFFSET_SIZE = 8
CQ_SIZE_POS = CQ_OFFSET_POS + CQ_OFFSET_SIZE  # 8
CQ_SIZE_SIZE = 4
CQ_TAGS_POS = CQ_SIZE_POS + CQ_SIZE_SIZE  # 12
CQ_TAGS_SIZE = 8
CQ_UNIT_SIZE = CQ_TAGS_POS + CQ_TAGS_SIZE  # 20

#: numpy view of a unit; views returned by :meth:`ConsumeQueue.units` have this dtype.
CQ_UNIT_DTYPE = np.dtype(
    {
        "names": ["commitlog_offset", "size", "tags_code"],
        "formats": [">i8", ">i4", ">i8"],
        "offsets": [CQ_OFFSET_POS, CQ_SIZE_POS, CQ_TAGS_POS],
        "itemsize": CQ_UNIT_SIZE,
    }
)

PLACEHOLDER_SIZE = 0x7FFFFFFF  # Integer.MAX_VALUE


class DamagedUnit(Exception):
    """Raised by a ``read`` callback for a unit that does not point at its own record (damage).

    A pull that has collected messages stops before that unit (the next pull starts there);
    one that has not lets it through, for the caller to rebuild the queue or report the
    position missing."""

    def __init__(self, topic: str, queue_id: int, queue_offset: int):
        super().__init__(topic, queue_id, queue_offset)
        self.queue_offset = queue_offset


class GetMessageResult:
    """What :func:`~rocketstore.consume.get_message` / :func:`~rocketstore.consume.get_units` found.

    ``messages`` holds what ``read`` returned for each collected unit (empty for
    :func:`~rocketstore.consume.get_units`); ``units`` holds the collected units (dtype
    :data:`~rocketstore.consumequeue.CQ_UNIT_DTYPE`), in queue order, one per message, and
    ``queue_offsets`` (int64) the queue offset of each.
    ``min_offset`` / ``max_offset`` are the queue's bounds when the pull began (0 without a
    queue); ``buffer_total_size`` is the sum of the collected records' sizes. ``len()`` and
    iteration go over ``messages`` when there are any, else over ``units``.
    """

    __slots__ = (
        "status",
        "next_begin_offset",
        "min_offset",
        "max_offset",
        "messages",
        "_units",
        "_queue_offsets",
    )

    def __init__(
        self,
        status: GetMessageStatus,
        next_begin_offset: int,
        min_offset: int = 0,
        max_offset: int = 0,
        messages: Optional[list[MessageExt]] = None,
        units: Optional[np.ndarray | bytes] = None,
        queue_offsets: Optional[np.ndarray | int] = None,
    ):
        self.status = status
        self.next_begin_offset = next_begin_offset
        self.min_offset = min_offset
        self.max_offset = max_offset
        self.messages = [] if messages is None else messages
        # A one-call pull hands the units over as bytes and the queue offsets as the first of a
        # run: the arrays are made when first asked for.
        self._units = units
        self._queue_offsets = queue_offsets

    @property
    def units(self) -> np.ndarray:
        """The collected units (dtype :data:`~rocketstore.consumequeue.CQ_UNIT_DTYPE`)."""
        units = self._units
        if not isinstance(units, np.ndarray):
            units = np.empty(0, dtype=CQ_UNIT_DTYPE) if units is None else np.frombuffer(units, CQ_UNIT_DTYPE)
            self._units = units
        return units

    @property
    def queue_offsets(self) -> np.ndarray:
        """The queue offset of each collected unit (int64)."""
        offsets = self._queue_offsets
        if not isinstance(offsets, np.ndarray):
            first = offsets
            offsets = (
                np.empty(0, dtype=np.int64)
                if first is None
                else np.arange(first, first + len(self.units), dtype=np.int64)
            )
            self._queue_offsets = offsets
        return offsets

    def queue_offset_list(self) -> list[int]:
        """:attr:`queue_offsets` as a list of ints (a run from the first: no array made)."""
        first = self._queue_offsets
        if isinstance(first, int):
            return list(range(first, first + len(self.units)))
        return self.queue_offsets.tolist()  # type: ignore[no-any-return]

    @property
    def message_count(self) -> int:
        """How many units were collected (= ``len(messages)`` after :func:`~rocketstore.consume.get_message`)."""
        return len(self.units)

    @property
    def buffer_total_size(self) -> int:
        """The sum of the collected records' sizes (RocketMQ's ``bufferTotalSize``)."""
        return int(self.units["size"].sum(dtype=np.int64))

    def __len__(self) -> int:
        return len(self.messages) if self.messages else len(self.units)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.messages) if self.messages else iter(self.units)

    def __repr__(self) -> str:
        return (
            f"<GetMessageResult {self.status.name} next={self.next_begin_offset} "
            f"count={self.message_count} queue=[{self.min_offset}, {self.max_offset})>"
        )
