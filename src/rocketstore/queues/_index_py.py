"""IndexFile slot chaining (spec §5), pure-Python twin of ``rocketstore.queues._index``.

An index file maps message keys (``topic + "#" + key``) to CommitLog offsets: a fixed hash-slot
table whose slots hold the newest item of their bucket, and items chained newest to oldest through
``prevIndex``. Every integer is big-endian two's complement::

    header (40 bytes)                          item n (20 bytes), n >= 1
      pos  size  field                           pos  size  field
        0     8  beginTimestamp (ms)               0     4  keyHash (abs of Java hash; MIN_VALUE: 0)
        8     8  endTimestamp (ms)                 4     8  phyOffset
       16     8  beginPhyOffset                   12     4  timeDiff (s since header beginTimestamp)
       24     8  endPhyOffset                     16     4  prevIndex (0 = end of chain)
       32     4  hashSlotCount
       36     4  indexCount (starts at 1; <= 0 reads as 1)

    slot s   at 40 + 4*s                (int: newest item of bucket keyHash % slots, 0 = empty)
    item n   at 40 + 4*slots + 20*n     (item 0 is never used)
    size     = 40 + 4*slots + 20*items  (420,000,040 bytes for 5,000,000 slots, 20,000,000 items)

The file is named by its creation time, ``yyyyMMddHHmmssSSS`` in local time. The same layout is
written down in ``cext/index.h`` and declared in ``cext/_index.pxd``; tests/test_index.py checks
that the three agree.

An :class:`IndexFile` does not own a file: it works on a buffer (in the store, the map of a sparse
file) of exactly :func:`index_file_size` bytes, which it keeps exported (pinned) until
:meth:`IndexFile.release`, so the map cannot be closed or resized under it. Header fields are read
from and written to the buffer itself, as Java's ``IndexHeader`` does. The caller serialises
writers; readers on other threads see whole items only after the slot points at them.
"""

from __future__ import annotations

import operator
import struct
import time
from typing import Optional

from rocketstore.errors import CorruptRecordError, StoreConfigError, StoreReadOnlyError
from rocketstore.format._dispatch_py import (
    _check_table,
)
from rocketstore.format._record_py import (
    KEYREF_DTYPE,
    RECORD_DTYPE,
    _readable_view,
    index_key_hash,
)

__all__ = [
    "IndexFile",
    "index_file_size",
    "select_files",
    "index_file_name",
    "parse_index_file_name",
    "HEADER_SIZE",
    "HASH_SLOT_SIZE",
    "INDEX_ITEM_SIZE",
    "DEFAULT_SLOT_COUNT",
    "DEFAULT_INDEX_COUNT",
    "rebuild_slots",
]

_INT_SIZE = 4
_LONG_SIZE = 8

# ---- header fields, each derived from the one before ----
POS_BEGIN_TIMESTAMP = 0
POS_END_TIMESTAMP = POS_BEGIN_TIMESTAMP + _LONG_SIZE  # 8
POS_BEGIN_PHY_OFFSET = POS_END_TIMESTAMP + _LONG_SIZE  # 16
POS_END_PHY_OFFSET = POS_BEGIN_PHY_OFFSET + _LONG_SIZE  # 24
POS_HASH_SLOT_COUNT = POS_END_PHY_OFFSET + _LONG_SIZE  # 32
POS_INDEX_COUNT = POS_HASH_SLOT_COUNT + _INT_SIZE  # 36
HEADER_SIZE = POS_INDEX_COUNT + _INT_SIZE  # 40

HASH_SLOT_SIZE = _INT_SIZE  # 4

# ---- item fields ----
ITEM_POS_KEY_HASH = 0
ITEM_POS_PHY_OFFSET = ITEM_POS_KEY_HASH + _INT_SIZE  # 4
ITEM_POS_TIME_DIFF = ITEM_POS_PHY_OFFSET + _LONG_SIZE  # 12
ITEM_POS_PREV_INDEX = ITEM_POS_TIME_DIFF + _INT_SIZE  # 16
INDEX_ITEM_SIZE = ITEM_POS_PREV_INDEX + _INT_SIZE  # 20

DEFAULT_SLOT_COUNT = 5_000_000  # maxHashSlotNum
DEFAULT_INDEX_COUNT = 20_000_000  # maxIndexNum
INVALID_INDEX = 0  # empty slot, end of chain
MAX_TIME_DIFF = 0x7FFFFFFF  # timeDiff is clamped to [0, Integer.MAX_VALUE]

_INT32_MAX = 0x7FFFFFFF
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1

_HEADER = struct.Struct(">qqqqii")
_ITEM = struct.Struct(">iqii")
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
assert _HEADER.size == HEADER_SIZE and _ITEM.size == INDEX_ITEM_SIZE


def index_file_size(slots: int = DEFAULT_SLOT_COUNT, items: int = DEFAULT_INDEX_COUNT) -> int:
    """Bytes of an index file: ``40 + 4*slots + 20*items`` (420,000,040 for the defaults)."""
    return HEADER_SIZE + slots * HASH_SLOT_SIZE + items * INDEX_ITEM_SIZE


def _i64(name: str, value) -> int:
    value = operator.index(value)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise OverflowError(f"{name} {value} does not fit a Java long")
    return value


def _wrap64(value: int) -> int:
    """Java long arithmetic: wrap to a signed 64-bit value."""
    return ((value - _INT64_MIN) & 0xFFFFFFFFFFFFFFFF) + _INT64_MIN


def _key_hash(key) -> int:
    if not isinstance(key, str):
        raise TypeError(f"index key must be str, not {type(key).__name__}")
    return index_key_hash(key)


def _count_arg(name: str, value) -> int:
    value = operator.index(value)
    if not 1 <= value <= _INT32_MAX:
        raise StoreConfigError(f"{name} must be in 1..{_INT32_MAX}, got {value}")
    return value


class IndexFile:
    """One index file over ``buffer`` (exactly ``index_file_size(slot_count, index_count)`` bytes).

    A read-only buffer allows queries only. The buffer stays exported until :meth:`release`.
    """

    __slots__ = ("_mv", "_slot_num", "_index_num", "_items_start", "_writable")

    def __init__(self, buffer, slot_count: int = DEFAULT_SLOT_COUNT, index_count: int = DEFAULT_INDEX_COUNT):
        slot_count = _count_arg("slot_count", slot_count)
        index_count = _count_arg("index_count", index_count)
        mv = memoryview(buffer).cast("B")
        size = index_file_size(slot_count, index_count)
        if mv.nbytes != size:
            nbytes = mv.nbytes
            mv.release()
            raise StoreConfigError(
                f"index file buffer is {nbytes} bytes, expected {size} "
                f"for {slot_count} slots and {index_count} items"
            )
        self._mv: Optional[memoryview] = mv
        self._slot_num = slot_count
        self._index_num = index_count
        self._items_start = HEADER_SIZE + slot_count * HASH_SLOT_SIZE
        self._writable = not mv.readonly

    # ---- lifetime ----

    def release(self) -> None:
        """Stop using the buffer and drop the export, so its map can be closed; idempotent."""
        if self._mv is not None:
            self._mv.release()
            self._mv = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()

    def _view(self) -> memoryview:
        if self._mv is None:
            raise ValueError("IndexFile is released")
        return self._mv

    def _writable_view(self) -> memoryview:
        mv = self._view()
        if not self._writable:
            raise StoreReadOnlyError("index file buffer is read-only")
        return mv

    def __repr__(self) -> str:
        if self._mv is None:
            return f"<IndexFile slots={self._slot_num} items={self._index_num} released>"
        return f"<IndexFile slots={self._slot_num} items={self._index_num} index_count={self.index_count}>"

    # ---- configuration and header ----

    @property
    def slot_num(self) -> int:
        """Slots in the table (Java ``hashSlotNum``), as configured."""
        return self._slot_num

    @property
    def index_num(self) -> int:
        """Items the file has room for, item 0 included (Java ``indexNum``), as configured."""
        return self._index_num

    @property
    def writable(self) -> bool:
        """Whether the buffer accepts puts."""
        return self._writable

    @property
    def begin_timestamp(self) -> int:
        return _LONG.unpack_from(self._view(), POS_BEGIN_TIMESTAMP)[0]

    @property
    def end_timestamp(self) -> int:
        return _LONG.unpack_from(self._view(), POS_END_TIMESTAMP)[0]

    @property
    def begin_phy_offset(self) -> int:
        return _LONG.unpack_from(self._view(), POS_BEGIN_PHY_OFFSET)[0]

    @property
    def end_phy_offset(self) -> int:
        return _LONG.unpack_from(self._view(), POS_END_PHY_OFFSET)[0]

    @property
    def hash_slot_count(self) -> int:
        return _INT.unpack_from(self._view(), POS_HASH_SLOT_COUNT)[0]

    @property
    def index_count(self) -> int:
        """The next item number: 1 for an empty file (a header value <= 0 reads as 1)."""
        n = _INT.unpack_from(self._view(), POS_INDEX_COUNT)[0]
        return n if n > 0 else 1

    @property
    def is_full(self) -> bool:
        return self.index_count >= self._index_num

    def init_from(self, prev) -> None:
        """Start where ``prev`` (the previous, full file) ended: begin = end = its end values (§5.4).

        Like Java, each pair is set only when the previous value is > 0.
        """
        mv = self._writable_view()
        end_phy = _i64("end_phy_offset", prev.end_phy_offset)
        end_ts = _i64("end_timestamp", prev.end_timestamp)
        if end_phy > 0:
            _LONG.pack_into(mv, POS_BEGIN_PHY_OFFSET, end_phy)
            _LONG.pack_into(mv, POS_END_PHY_OFFSET, end_phy)
        if end_ts > 0:
            _LONG.pack_into(mv, POS_BEGIN_TIMESTAMP, end_ts)
            _LONG.pack_into(mv, POS_END_TIMESTAMP, end_ts)

    def is_time_matched(self, begin: int, end: int) -> bool:
        """Whether ``[begin, end]`` overlaps the file's time range (Java ``isTimeMatched``)."""
        begin = _i64("begin", begin)
        end = _i64("end", end)
        mv = self._view()
        file_begin = _LONG.unpack_from(mv, POS_BEGIN_TIMESTAMP)[0]
        file_end = _LONG.unpack_from(mv, POS_END_TIMESTAMP)[0]
        return (
            (begin < file_begin and end > file_end)
            or file_begin <= begin <= file_end
            or file_begin <= end <= file_end
        )

    # ---- putKey ----

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Index ``key`` for the record at ``phy_offset``; False when the file is full (§5.3)."""
        phy_offset = _i64("phy_offset", phy_offset)
        store_timestamp = _i64("store_timestamp", store_timestamp)
        mv = self._writable_view()
        return self._put(mv, _key_hash(key), phy_offset, store_timestamp)

    def put_keys(self, keys, phy_offset: int, store_timestamp: int) -> int:
        """Index several keys of one record in order; returns how many fit (stops when full).

        Every key is checked before the first is stored, so a bad key stores none.
        """
        phy_offset = _i64("phy_offset", phy_offset)
        store_timestamp = _i64("store_timestamp", store_timestamp)
        mv = self._writable_view()
        hashes = [_key_hash(key) for key in keys]
        stored = 0
        for key_hash in hashes:
            if not self._put(mv, key_hash, phy_offset, store_timestamp):
                break
            stored += 1
        return stored

    def put_refs(self, buffer, records, keys, base_offset: int, start: int = 0) -> int:
        """Index ``keys[start:]`` as ``put_key`` would, key by key; returns where the file filled.

        ``records`` (RECORD_DTYPE, from the codec's ``decode_batch``) and ``keys`` (KEYREF_DTYPE,
        from its ``dispatch_info``) locate their bytes in ``buffer``, which starts at CommitLog
        offset ``base_offset``. Key ``k`` is stored as ``put_key(topic + "#" + key,
        base_offset + records[k.record].position, records[k.record].store_timestamp)``.
        Returns the index in ``keys`` of the first key not stored because the file is full, or
        ``len(keys)`` when all were stored.

        Every key from ``start`` on is checked before the first is stored, so bad input stores
        nothing: a record number outside ``records``, or a position, topic or key outside
        ``buffer`` raises CorruptRecordError; an offset beyond a Java long, OverflowError.
        """
        mv = self._writable_view()
        _check_table("records", records, RECORD_DTYPE, "RECORD_DTYPE")
        _check_table("keys", keys, KEYREF_DTYPE, "KEYREF_DTYPE")
        base_offset = _i64("base_offset", base_offset)
        start = operator.index(start)
        n = len(keys)
        if not 0 <= start <= n:
            raise ValueError(f"start {start} is out of range for {n} keys")
        buf = _readable_view(buffer)
        try:
            puts = _ref_puts(buf, records, keys, base_offset, start)
        finally:
            buf.release()
        for stored, (key_hash, phy_offset, store_timestamp) in enumerate(puts):
            if not self._put(mv, key_hash, phy_offset, store_timestamp):
                return start + stored
        return n

    def _put(self, mv: memoryview, key_hash: int, phy_offset: int, store_timestamp: int) -> bool:
        begin_ts, _end_ts, begin_phy, _end_phy, slot_count, count = _HEADER.unpack_from(mv, 0)
        if count <= 0:
            count = 1
        if count >= self._index_num:
            return False
        slot_pos = HEADER_SIZE + (key_hash % self._slot_num) * HASH_SLOT_SIZE
        slot_value = _INT.unpack_from(mv, slot_pos)[0]
        if slot_value <= INVALID_INDEX or slot_value > count:
            slot_value = INVALID_INDEX

        # Against the header's begin as it is now: for the first item that is the previous file's
        # end (§5.4), not the store_timestamp about to become begin (the 4.x quirk, kept).
        if begin_ts <= 0:
            time_diff = 0
        else:
            delta = _wrap64(store_timestamp - begin_ts)
            time_diff = delta // 1000 if delta >= 0 else -(-delta // 1000)  # Java: toward 0
            time_diff = min(max(time_diff, 0), MAX_TIME_DIFF)

        _ITEM.pack_into(
            mv, self._items_start + count * INDEX_ITEM_SIZE, key_hash, phy_offset, time_diff, slot_value
        )
        _INT.pack_into(mv, slot_pos, count)
        if count <= 1:
            begin_phy = phy_offset
            begin_ts = store_timestamp
        # 4.7.1+ (so 4.9.8 and 5.x) counts a put only when its slot was empty (or held an invalid
        # item number); 4.3 counted every put. An int, so it wraps like Java's.
        if slot_value == INVALID_INDEX:
            slot_count = ((slot_count + 1 + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
        _HEADER.pack_into(mv, 0, begin_ts, store_timestamp, begin_phy, phy_offset, slot_count, count + 1)
        return True

    # ---- selectPhyOffset ----

    def select(self, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Up to ``max_num`` phyOffsets of items whose key hash equals ``key``'s, stored within
        ``[begin, end]`` (ms), newest first (Java ``selectPhyOffset``, §5.5).

        Only hashes are compared: the caller re-checks the real key. A corrupt slot or chain
        (pointer out of range, a cycle) ends the walk.
        """
        max_num = _i64("max_num", max_num)
        begin = _i64("begin", begin)
        end = _i64("end", end)
        mv = self._view()
        key_hash = _key_hash(key)
        found: list[int] = []
        file_begin = _LONG.unpack_from(mv, POS_BEGIN_TIMESTAMP)[0]
        count = _INT.unpack_from(mv, POS_INDEX_COUNT)[0]
        if count <= 0:
            count = 1
        slot_value = _INT.unpack_from(mv, HEADER_SIZE + (key_hash % self._slot_num) * HASH_SLOT_SIZE)[0]
        if slot_value <= INVALID_INDEX or slot_value > count or count <= 1:
            return found
        index_num = self._index_num
        items_start = self._items_start
        steps_left = min(count, index_num)  # a valid chain visits each used item at most once
        cur = slot_value
        unpack_item = _ITEM.unpack_from
        while len(found) < max_num:
            if cur >= index_num or steps_left <= 0:
                break
            steps_left -= 1
            item_hash, phy_offset, time_diff, prev = unpack_item(mv, items_start + cur * INDEX_ITEM_SIZE)
            if time_diff < 0:
                break
            time_read = _wrap64(file_begin + time_diff * 1000)
            if item_hash == key_hash and begin <= time_read <= end:
                found.append(phy_offset)
            if prev <= INVALID_INDEX or prev > count or prev == cur or time_read < begin:
                break
            cur = prev
        return found


def _ref_puts(buf: memoryview, records, keys, base_offset: int, start: int) -> list:
    """(key hash, phyOffset, storeTimestamp) of each key of ``keys[start:]``, all checked first."""
    size = buf.nbytes
    count = len(records)
    positions, timestamps = records["position"].tolist(), records["store_timestamp"].tolist()
    topic_pos, topic_len = records["topic_pos"].tolist(), records["topic_len"].tolist()
    key_pos = keys["key_pos"][start:].tolist()
    key_len = keys["key_len"][start:].tolist()
    rows = keys["record"][start:].tolist()
    puts = []
    topics: dict = {}  # record -> topic bytes + b"#"
    for k, row in enumerate(rows, start):
        if not 0 <= row < count:
            raise CorruptRecordError(f"key {k} names record {row}; there are {count} records")
        position = positions[row]
        if not 0 <= position < size:
            raise CorruptRecordError(
                f"key {k}: record {row} at position {position} lies outside the buffer of {size} bytes"
            )
        if base_offset + position > _INT64_MAX:
            raise OverflowError(
                f"key {k}: CommitLog offset {base_offset} + {position} does not fit a Java long"
            )
        prefix = topics.get(row)
        if prefix is None:
            tp, tl = topic_pos[row], topic_len[row]
            if tp < 0 or tl < 0 or tp + tl > size:
                raise CorruptRecordError(
                    f"key {k}: the topic bytes [{tp}, {tp + tl}) of record {row} "
                    f"lie outside the buffer of {size} bytes"
                )
            prefix = topics[row] = bytes(buf[tp : tp + tl]) + b"#"
        kp, kl = key_pos[k - start], key_len[k - start]
        if kp < 0 or kl < 0 or kp + kl > size:
            raise CorruptRecordError(
                f"key {k}: its bytes [{kp}, {kp + kl}) lie outside the buffer of {size} bytes"
            )
        key = (prefix + bytes(buf[kp : kp + kl])).decode("utf-8", "surrogateescape")
        puts.append((index_key_hash(key), base_offset + position, timestamps[row]))
    return puts


# ---- a lookup over every file ----


def select_files(files, key: str, max_num: int, begin: int, end: int) -> tuple[list[int], int, int]:
    """§5.5 ``queryOffset`` over ``files`` (oldest first, each with its IndexFile as ``.index``):
    up to ``max_num`` phyOffsets of items whose key hash equals ``key``'s, stored within
    ``[begin, end]`` (ms), collected newest file first and returned ascending, with the newest
    file's end timestamp and endPhyOffset (0, 0 without files). The walk stops at the first file
    that begins before ``begin`` or once ``max_num`` are found."""
    _key_hash(key)
    max_num = operator.index(max_num)
    begin = _i64("begin", begin)
    end = _i64("end", end)
    found: list[int] = []
    last_timestamp = last_phy_offset = 0
    for i in range(len(files) - 1, -1, -1):
        index = files[i].index
        if i == len(files) - 1:
            last_timestamp, last_phy_offset = index.end_timestamp, index.end_phy_offset
        if len(found) >= max_num:
            break
        if index.is_time_matched(begin, end):
            found.extend(index.select(key, max_num - len(found), begin, end))
        if index.begin_timestamp < begin or len(found) >= max_num:
            break
    found.sort()
    return found, last_timestamp, last_phy_offset


# ---- file names ----


def index_file_name(ms: int) -> str:
    """The name of an index file created at ``ms``: ``yyyyMMddHHmmssSSS`` in local time (§5.1)."""
    ms = operator.index(ms)
    t = time.localtime(ms // 1000)
    return (
        f"{t.tm_year:04d}{t.tm_mon:02d}{t.tm_mday:02d}"
        f"{t.tm_hour:02d}{t.tm_min:02d}{t.tm_sec:02d}{ms % 1000:03d}"
    )


def parse_index_file_name(name: str) -> int:
    """The creation time (epoch ms) an index file name stands for, read as local time."""
    if not (isinstance(name, str) and len(name) == 17 and name.isascii() and name.isdigit()):
        raise ValueError(f"not an index file name (yyyyMMddHHmmssSSS): {name!r}")
    year, month, day = int(name[0:4]), int(name[4:6]), int(name[6:8])
    hour, minute, second, millis = int(name[8:10]), int(name[10:12]), int(name[12:14]), int(name[14:17])
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour <= 23 and minute <= 59 and second <= 59):
        raise ValueError(f"not an index file name (yyyyMMddHHmmssSSS): {name!r}")
    seconds = time.mktime((year, month, day, hour, minute, second, 0, 0, -1))
    return int(seconds) * 1000 + millis


def rebuild_slots(buffer, slot_count: int, count: int) -> tuple[int, int]:
    """Rewrite the slot table of the index file held in ``buffer`` (writable: header,
    ``slot_count`` slots, then items) from its items 1 .. ``count - 1``: each slot holds the
    number of the newest item whose key hash maps to it (Java's ``keyHash % slotNum``), 0 for
    none. One pass over the items; what an abnormal open's roll back to a resume point needs.

    The table is computed aside and only the slots that differ are written, so the pages whose
    slots are right already stay clean (a roll back undoes only what came after the resume
    point). Returns ``(lo, hi)``: the byte range of ``buffer`` that was written (``lo == hi``:
    none), what needs an msync."""
    import numpy as np

    if slot_count <= 0 or count < 1:
        raise ValueError(f"slot_count {slot_count} and count {count} must be positive")
    view = memoryview(buffer)
    if view.readonly:
        raise TypeError("buffer is read-only")
    items_start = HEADER_SIZE + slot_count * HASH_SLOT_SIZE
    if items_start + count * INDEX_ITEM_SIZE > view.nbytes:
        raise ValueError(f"{slot_count} slots and {count} items do not fit in {view.nbytes} bytes")
    item = np.dtype([("key_hash", ">i4"), ("rest", "V16")])
    items = np.frombuffer(buffer, dtype=item, count=count - 1, offset=items_start + INDEX_ITEM_SIZE)
    heads = np.zeros(slot_count, dtype=np.int32)
    if count > 1:
        used = items["key_hash"].astype(np.int64) % slot_count
        # the newest item of each slot heads its chain: the highest item number (from 1) there
        np.maximum.at(heads, used, np.arange(1, count, dtype=np.int32))
    del items
    slots = np.frombuffer(buffer, dtype=">i4", count=slot_count, offset=HEADER_SIZE)
    differ = np.flatnonzero(slots != heads)
    slots[differ] = heads[differ]  # only what differs: the pages already right stay clean
    del slots
    if not len(differ):
        return 0, 0
    return HEADER_SIZE + int(differ[0]) * HASH_SLOT_SIZE, HEADER_SIZE + (int(differ[-1]) + 1) * HASH_SLOT_SIZE
