"""Reading a ConsumeQueue by queue offset: RocketMQ's ``getMessage`` (spec §11) and tag filters (§4.3).

:func:`get_message` answers one pull for one :class:`~rocketstore.queues.consumequeue.ConsumeQueue`: it
picks the status and ``next_begin_offset`` exactly as RocketMQ 4.3 does, scans the queue's units
with numpy (placeholders and tag mismatches are dropped a whole view at a time, so Python only
runs per *candidate* unit), reads each candidate through a ``read(commitlog_offset, size)``
callback, and re-checks the real tag string so a Java hash collision never delivers a message
with the wrong tag. :func:`get_units` is the same scan without reading the CommitLog, for batch
consumers that work on the units themselves.

Scan rules (§11), in the order RocketMQ applies them to each unit:

1. stop when the batch is full — never before the first message; then when ``max_msgs`` messages
   are collected, or (opt-in, ``max_bytes``) when this unit's size would take the collected
   record bytes past ``max_bytes``. The unit that triggers the stop is not consumed;
2. skip a unit the tag filter rejects by its ``(int) tagsCode`` (a tagsCode in the
   ConsumeQueueExt address range, <= -2**31 - 1, matches: there is no ext file to resolve it);
3. read the record; when it is gone (``read`` returns None or raises
   :class:`~rocketstore.errors.MessageNotFoundError`) skip it;
4. skip it when its real tag is not in the filter's tag set (``recheck_tags``, the client-side
   check RocketMQ's consumer does);
5. otherwise collect it.

``next_begin_offset`` is the queue offset after the last unit examined, so filtered units are
consumed. While nothing is collected the status follows the last unit examined:
MESSAGE_WAS_REMOVING if it was gone, NO_MATCHED_MESSAGE otherwise; one collected message makes it
FOUND.

Deviations from RocketMQ 4.3, all deliberate:

* The byte limits of the batch-full rule (256 KiB / 32 messages for messages in memory, 64 KiB / 8
  on disk, chosen by a RAM-ratio test) are not applied by default: the batch is full on
  ``max_msgs`` alone. Pass ``max_bytes`` (and a matching ``max_msgs``) to apply one of them.
* After a gone record RocketMQ skips every unit below the start of the next CommitLog file
  without looking at it; here each later unit is tried on its own (a unit in a deleted file is
  simply gone too). Only the status can differ: a *filtered* unit in the deleted file ends the
  scan as NO_MATCHED_MESSAGE here, where RocketMQ would keep MESSAGE_WAS_REMOVING.
* 4.3 stops at the end of the ConsumeQueue file holding ``offset``; here the scan may go on into
  the next file (``max_files=2``, one boundary crossed) while the unit budget lasts and the batch
  is not full. ``max_files=1`` gives 4.3's behaviour.
* Placeholder units ``(0, 0x7FFFFFFF, 0)`` are skipped (RocketMQ never meets them: they lie below
  ``min_offset``).
* The slave-side ``nextOffsetCorrection`` and ``suggestPullingFromSlave`` are not modelled; the
  5.x statuses and ``OFFSET_OVERFLOW_BADLY`` rule are not used (``OFFSET_RESET`` exists only to
  keep the enum complete).

Lifetime: :attr:`GetMessageResult.units` from :func:`get_units` may be a read-only view into the
queue's map (when every unit examined in one file is accepted); like
:meth:`ConsumeQueue.units` it keeps the map alive until it is released.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Optional

import numpy as np

from rocketstore.base._checks import check_int
from rocketstore.errors import InvalidMessageError, MessageNotFoundError
from rocketstore.format._hotstate import PullResult
from rocketstore.format.tagfilter import TagFilter, as_filter
from rocketstore.format.units import CQ_UNIT_DTYPE, CQ_UNIT_SIZE, PLACEHOLDER_SIZE, DamagedUnit
from rocketstore.message import MessageExt
from rocketstore.status import GetMessageStatus

__all__ = [
    "GetMessageStatus",
    "TagFilter",
    "GetMessageResult",
    "get_message",
    "get_units",
    "MIN_SCAN_BYTES",
    "MIN_SCAN_UNITS",
    "scan_budget",
]

#: RocketMQ reads at least 16,000 bytes of units per pull (``max(16000, maxMsgNums * 20)``).
MIN_SCAN_BYTES = 16_000
MIN_SCAN_UNITS = MIN_SCAN_BYTES // CQ_UNIT_SIZE  # 800


class GetMessageResult(PullResult):
    """What :func:`get_message` / :func:`get_units` found.

    ``messages`` holds what ``read`` returned for each collected unit (empty for
    :func:`get_units`); ``units`` holds the collected units (dtype
    :data:`~rocketstore.queues.consumequeue.CQ_UNIT_DTYPE`), in queue order, one per message, and
    ``queue_offsets`` (int64) the queue offset of each.
    ``min_offset`` / ``max_offset`` are the queue's bounds when the pull began (0 without a
    queue); ``buffer_total_size`` is the sum of the collected records' sizes. ``len()`` and
    iteration go over ``messages`` when there are any, else over ``units``.
    """

    # the fields are the PullResult's it extends (compiled: a one-call pull fills them in C)
    __slots__ = ()

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
        """The collected units (dtype :data:`~rocketstore.queues.consumequeue.CQ_UNIT_DTYPE`)."""
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
        """How many units were collected (= ``len(messages)`` after :func:`get_message`)."""
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


def scan_budget(max_msgs: int) -> int:
    """How many units one pull may examine: ``max(16000, max_msgs * 20)`` bytes of units."""
    return max(MIN_SCAN_UNITS, max_msgs)


_check_int = check_int  # name, value, minimum: an int within a Java long, else InvalidMessageError


class _Scan:
    """The state of one pull while it walks up to ``max_files`` views of units."""

    __slots__ = ("max_msgs", "max_bytes", "count", "bytes", "gone_last", "accepted", "offsets")

    def __init__(self, max_msgs: int, max_bytes: Optional[int]):
        self.max_msgs = max_msgs
        self.max_bytes = max_bytes
        self.count = 0
        self.bytes = 0
        self.gone_last = False  # the last unit examined pointed at a gone record
        self.accepted: list[np.ndarray] = []  # the accepted units of each view
        self.offsets: list[np.ndarray] = []  # and their queue offsets

    def byte_stop(self, sizes: np.ndarray, real: np.ndarray, start: int) -> int:
        """First index >= start whose size would overflow ``max_bytes`` (len(sizes): none)."""
        if self.max_bytes is None or self.count == 0:
            return len(sizes)
        over = np.flatnonzero(real[start:] & (sizes[start:] > self.max_bytes - self.bytes))
        return start + int(over[0]) if len(over) else len(sizes)


def _candidates(view: np.ndarray, tag_filter: TagFilter) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sizes as int64, not-a-placeholder mask, candidate mask) of a view of units."""
    offsets = view["commitlog_offset"]
    sizes = view["size"].astype(np.int64)
    real = ~((offsets == 0) & (sizes == PLACEHOLDER_SIZE))
    return sizes, real, real & tag_filter.mask(view["tags_code"])


def _scan_units_only(view: np.ndarray, base: int, tag_filter: TagFilter, scan: _Scan) -> tuple[int, bool]:
    """Accept every candidate of ``view`` until the batch is full, without a Python loop.

    Returns (units examined, batch full).
    """
    n = len(view)
    sizes, real, cand = _candidates(view, tag_filter)
    # count / bytes accepted *before* each unit, as the batch-full test sees them
    count_after = scan.count + np.cumsum(cand, dtype=np.int64)
    count_before = count_after - cand
    full = count_before >= scan.max_msgs
    if scan.max_bytes is not None:
        bytes_after = scan.bytes + np.cumsum(np.where(cand, sizes, 0), dtype=np.int64)
        bytes_before = bytes_after - np.where(cand, sizes, 0)
        full |= real & (count_before > 0) & (bytes_before + sizes > scan.max_bytes)
    stop = int(np.argmax(full)) if full.any() else n
    taken = cand[:stop]
    if taken.all():
        scan.accepted.append(view[:stop])  # zero-copy: every unit examined is accepted
        scan.offsets.append(np.arange(base, base + stop, dtype=np.int64))
    elif taken.any():
        scan.accepted.append(view[:stop][taken])
        scan.offsets.append(base + np.flatnonzero(taken).astype(np.int64))
    scan.count += int(taken.sum())
    scan.bytes += int(sizes[:stop][taken].sum())
    if stop:
        scan.gone_last = False
    return stop, stop < n or scan.count >= scan.max_msgs


def _scan_reading(
    view: np.ndarray,
    base: int,
    tag_filter: TagFilter,
    scan: _Scan,
    read: Callable[..., Any],
    recheck: bool,
    messages: list[MessageExt],
    with_queue_offset: bool = False,
) -> tuple[int, bool]:
    """Read each candidate of ``view`` (one ``read`` call per candidate) until the batch is full.

    Returns (units examined, batch full).
    """
    recheck = recheck and not tag_filter.match_all
    pull = getattr(read, "pull", None)
    if with_queue_offset and pull is not None and scan.max_bytes is None:
        return _scan_pulling(view, base, tag_filter, recheck, scan, pull, messages)
    n = len(view)
    sizes, real, cand = _candidates(view, tag_filter)
    offsets = view["commitlog_offset"]
    byte_stop = scan.byte_stop(sizes, real, 0)
    stop, full = n, False
    last_gone = -1
    taken: list[int] = []
    for j in np.flatnonzero(cand[:byte_stop]).tolist():
        if j >= byte_stop:
            break
        size = int(sizes[j])
        try:
            msg = read(int(offsets[j]), size, base + j) if with_queue_offset else read(int(offsets[j]), size)
        except MessageNotFoundError:
            msg = None
        except DamagedUnit:
            if not scan.count:
                raise
            stop, full = j, True  # hand out what came before it; the next pull starts here
            break
        if msg is None:
            last_gone = j
            continue
        if recheck and not tag_filter.matches_tag(msg.tags):
            continue  # a tagsCode collision: filtered, as the consumer would
        messages.append(msg)
        taken.append(j)
        scan.count += 1
        scan.bytes += size
        if scan.count >= scan.max_msgs:
            stop, full = j + 1, True
            break
        byte_stop = scan.byte_stop(sizes, real, j + 1)
    if not full and byte_stop < n:
        stop, full = byte_stop, True
    if taken:
        scan.accepted.append(view[taken])
        scan.offsets.append(base + np.array(taken, dtype=np.int64))
    if stop:
        scan.gone_last = last_gone == stop - 1
    return stop, full


def _scan_pulling(
    view: np.ndarray,
    base: int,
    tag_filter: TagFilter,
    recheck: bool,
    scan: _Scan,
    pull: Callable[..., tuple[list[Any], list[int], int, bool, int]],
    messages: list[MessageExt],
) -> tuple[int, bool]:
    """:func:`_scan_reading` (without a byte budget) through ``read.pull``: the tag filter, the
    reads and their checks in one compiled call per CommitLog segment, by the same rules."""
    codes = None if tag_filter.match_all else tag_filter.code_tuple
    found, taken, stop, full, last_gone = pull(
        view, base, scan.max_msgs - scan.count, codes, tag_filter.tags if recheck else None, scan.count == 0
    )
    if found:
        messages.extend(found)
        scan.count += len(found)
        accepted = view[taken]
        scan.bytes += int(accepted["size"].sum(dtype=np.int64))
        scan.accepted.append(accepted)
        scan.offsets.append(base + np.array(taken, dtype=np.int64))
    if stop:
        scan.gone_last = last_gone == stop - 1
    return stop, full


def _pull(  # noqa: C901 (RocketMQ's getMessage status rules, kept in one place)
    cq: Any,
    offset: int,
    max_msgs: int,
    tag_filter: Any,
    read: Optional[Callable[..., Any]],
    *,
    max_scan_units: Optional[int],
    max_bytes: Optional[int],
    max_files: Optional[int],
    recheck_tags: bool,
    with_queue_offset: bool = False,
) -> GetMessageResult:
    offset = _check_int("offset", offset)
    max_msgs = _check_int("max_msgs", max_msgs, 1)
    tag_filter = as_filter(tag_filter)
    budget = (
        scan_budget(max_msgs) if max_scan_units is None else _check_int("max_scan_units", max_scan_units, 1)
    )
    max_files = _check_int("max_files", max_files, 1)
    if max_bytes is not None:
        max_bytes = _check_int("max_bytes", max_bytes, 1)
    if read is not None and not callable(read):
        raise InvalidMessageError(f"read must be callable, not {type(read).__name__}")

    if cq is None:
        return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0)
    lo, hi = cq.min_offset, cq.max_offset
    if hi == 0:
        return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
    if offset < lo:
        return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, lo, lo, hi)
    if offset == hi:
        return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
    if offset > hi:  # 4.3's rule; 5.x always answers max
        return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, lo if lo == 0 else hi, lo, hi)

    scan = _Scan(max_msgs, max_bytes)
    messages: list[MessageExt] = []
    position = offset
    for file_number in range(max_files):
        if budget <= 0 or position >= hi:
            break
        try:
            view = cq.units(position, budget)
        except MessageNotFoundError:  # the file went away (retention) since the bounds were read
            view = np.empty(0, dtype=CQ_UNIT_DTYPE)
        if not len(view):
            if file_number == 0:
                return GetMessageResult(GetMessageStatus.OFFSET_FOUND_NULL, cq.roll_next_file(offset), lo, hi)
            break
        if read is None:
            examined, full = _scan_units_only(view, position, tag_filter, scan)
        else:
            examined, full = _scan_reading(
                view, position, tag_filter, scan, read, recheck_tags, messages, with_queue_offset
            )
        del view
        position += examined
        budget -= examined
        if full:
            break

    if scan.count:
        status = GetMessageStatus.FOUND
    elif scan.gone_last:
        status = GetMessageStatus.MESSAGE_WAS_REMOVING
    else:
        status = GetMessageStatus.NO_MATCHED_MESSAGE
    if len(scan.accepted) == 1:
        units, queue_offsets = scan.accepted[0], scan.offsets[0]
    elif scan.accepted:
        units, queue_offsets = np.concatenate(scan.accepted), np.concatenate(scan.offsets)
    else:
        units = queue_offsets = None  # type: ignore[assignment]  # empty: the result's default
    return GetMessageResult(status, position, lo, hi, messages, units, queue_offsets)


def get_message(
    cq: Any,
    offset: int,
    max_msgs: int,
    tag_filter: Any,
    read: Callable[..., Any],
    *,
    max_scan_units: Optional[int] = None,
    recheck_tags: bool = True,
    max_bytes: Optional[int] = None,
    max_files: int = 2,
    with_queue_offset: bool = False,
) -> GetMessageResult:
    """RocketMQ's ``getMessage`` (§11) on one consume queue (``None``: no such queue).

    ``tag_filter`` is a :class:`TagFilter` or an expression for :meth:`TagFilter.parse`.
    ``read(commitlog_offset, size)`` returns the message, or None (or raises
    :class:`~rocketstore.errors.MessageNotFoundError`) when the record is gone; with
    ``recheck_tags`` what it returns must have a ``tags`` attribute (``MessageExt`` does), and a
    message whose real tag is not subscribed is filtered out. ``with_queue_offset=True`` calls
    ``read(commitlog_offset, size, queue_offset)``, so that it can check the record is the one
    the unit's position names.

    At most ``max_scan_units`` units are examined (default ``max(800, max_msgs)``, RocketMQ's
    ``max(16000, maxMsgNums * 20)`` bytes), in at most ``max_files`` ConsumeQueue files. The
    batch is full at ``max_msgs`` messages, or — only when ``max_bytes`` is given — when the next
    record would take the collected sizes past it. See the module docstring for the rules and
    the deviations from RocketMQ.
    """
    if read is None:
        raise InvalidMessageError("get_message needs a read callback (get_units reads nothing)")
    return _pull(
        cq,
        offset,
        max_msgs,
        tag_filter,
        read,
        max_scan_units=max_scan_units,
        max_bytes=max_bytes,
        max_files=max_files,
        recheck_tags=recheck_tags,
        with_queue_offset=with_queue_offset,
    )


def get_units(
    cq: Any,
    offset: int,
    max_msgs: int,
    tag_filter: Any = None,
    *,
    max_scan_units: Optional[int] = None,
    max_bytes: Optional[int] = None,
    max_files: int = 2,
) -> GetMessageResult:
    """:func:`get_message` without reading the CommitLog: ``result.units`` holds the accepted units.

    Filtering is by tagsCode only (a hash collision is *not* caught: re-check the real tags when
    reading the records), and a gone record cannot be noticed, so the status is FOUND,
    NO_MATCHED_MESSAGE or one of the bound statuses. The whole scan is vectorised. When every unit
    examined lies in one file and is accepted, ``units`` is a zero-copy view into the map.
    """
    return _pull(
        cq,
        offset,
        max_msgs,
        tag_filter,
        None,
        max_scan_units=max_scan_units,
        max_bytes=max_bytes,
        max_files=max_files,
        recheck_tags=False,
    )
