"""The ConsumeQueue unit as data: its 20-byte layout, its numpy dtype and the placeholder.

Everything that reads or writes units uses these: the codec's batch reads, the ConsumeQueue files,
dispatch, the pulls of :mod:`rocketstore.consume`. Nothing here knows files or a store.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "CQ_UNIT_SIZE",
    "CQ_UNIT_DTYPE",
    "PLACEHOLDER_SIZE",
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
