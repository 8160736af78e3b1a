"""Arrow record batches built column by column from the C decoder's rows (no pyspark needed: executors run these)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Optional

from rocketstore.spark._options import DEFAULT_ARROW_BATCH_ROWS, LOG_APPEND_TIME, arrow_schema

if TYPE_CHECKING:  # the partitions are pyspark classes; these functions only read their fields
    from rocketstore.spark._partitions import CommitLogRange, QueueRange


def read_queue_range(p: QueueRange, columns, batch_rows: int = DEFAULT_ARROW_BATCH_ROWS):
    """Yield ``pyarrow.RecordBatch`` es of ``columns`` for queue range ``p`` (plain Python: callable
    without Spark)."""
    import numpy as np

    from rocketstore.store import MessageStore

    with MessageStore(p.root, read_only=True) as store:
        q = p.start
        while q < p.end:
            units = store.queue_units(p.topic, p.queue_id, q, min(batch_rows, p.end - q))
            if not len(units):
                raise ValueError(f"{p.topic}-{p.queue_id}: no ConsumeQueue units at offset {q}")
            offsets = units["commitlog_offset"].astype(np.int64)
            sizes = units["size"].astype(np.int64)
            for _base, view, rows in store.records_at(offsets, sizes, queue=(p.topic, p.queue_id, q)):
                yield _record_batch(rows, view, columns, p.topic, p.broker)
            q += len(units)


def read_commitlog_range(p: CommitLogRange, columns, batch_rows: int = DEFAULT_ARROW_BATCH_ROWS):
    """Yield ``pyarrow.RecordBatch`` es of ``columns`` for the records of CommitLog bytes
    [p.start, p.end) whose (topic, queueId, queueOffset) lies in one of ``p.ranges``: the
    segment is decoded whole (``MessageStore.scan``), and rows are picked without a Python
    step per record (topics matched by Arrow ``index_in``, ranges by a sorted-key search)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from rocketstore.queues.dispatch import consumable_rows
    from rocketstore.queues.innerbatch import unwrap_rows
    from rocketstore.store import MessageStore

    topics = sorted({t for t, _q, _s, _e in p.ranges})
    topic_index = {t: i for i, t in enumerate(topics)}
    spans = sorted(((topic_index[t] << 32) | q, s, e) for t, q, s, e in p.ranges)
    keys = np.array([k for k, _s, _e in spans], dtype=np.int64)
    starts = np.array([s for _k, s, _e in spans], dtype=np.int64)
    ends = np.array([e for _k, _s, e in spans], dtype=np.int64)
    wanted = pa.array(topics, type=pa.string())
    with MessageStore(p.root, read_only=True) as store:
        for _base, view, rows in store.scan(p.start, p.end, views=True):
            rows = unwrap_rows(view, consumable_rows(rows), _base)  # a BatchCQ batch: its messages
            if not len(rows):
                continue
            names = _slices(view, rows["topic_pos"], rows["topic_len"], pa.string())
            which = pc.index_in(names, value_set=wanted).fill_null(-1).to_numpy().astype(np.int64)
            key = (which << 32) | rows["queue_id"].astype(np.int64)
            at = np.minimum(np.searchsorted(keys, key), len(keys) - 1)
            offset = rows["queue_offset"].astype(np.int64)
            keep = (which >= 0) & (keys[at] == key) & (offset >= starts[at]) & (offset < ends[at])
            if not keep.all():
                rows = rows[keep]
            for i in range(0, len(rows), batch_rows):
                yield _record_batch(rows[i : i + batch_rows], view, columns, None, p.broker)


# ---------------------------------------------------------------------------------------------
# Arrow columns from RECORD_DTYPE rows over one segment view


def _spans(buffer, starts, lengths):
    """A binary array over the zero-copy ``buffer`` of ``2n - 1`` elements: span ``i`` at
    ``2i``, the gap after it at ``2i + 1``. ``starts`` must be ascending and the spans must not
    overlap, as fields of consecutive records in one segment do."""
    import numpy as np
    import pyarrow as pa

    n = len(starts)
    starts = starts.astype(np.int64)
    ends = starts + lengths.astype(np.int64)
    first = int(starts[0])
    if int(ends[-1]) - first >= 2**31:
        raise ValueError("a batch's fields span 2 GiB or more of one segment; lower arrowBatchRows")
    edges = np.empty(2 * n, dtype=np.int32)
    edges[0::2] = starts - first
    edges[1::2] = ends - first
    data = pa.py_buffer(buffer)[first : int(ends[-1])]
    return pa.Array.from_buffers(pa.binary(), 2 * n - 1, [None, pa.py_buffer(edges), data])


def _slices(buffer, starts, lengths, kind, valid=None):
    """A binary/string array of ``buffer[starts[i]:starts[i]+lengths[i]]`` (null where ``valid``
    is False): :func:`_spans`, then one Arrow ``take`` of every other element."""
    import numpy as np
    import pyarrow as pa

    n = len(starts)
    if n == 0:
        return pa.array([], type=kind)
    picks = np.arange(0, 2 * n, 2, dtype=np.int32)
    values = _spans(buffer, starts, lengths).take(pa.array(picks, mask=None if valid is None else ~valid))
    return values if kind == pa.binary() else values.cast(kind)


def _bodies(view, rows):
    """The body column: the stored bytes, inflated where sysFlag says a body is compressed
    (rocketstore.base.compression), as a RocketMQ consumer reads them."""
    import pyarrow as pa

    from rocketstore.base.compression import COMPRESSED_FLAG, inflate

    stored = _slices(view, rows["body_pos"], rows["body_len"], pa.binary())
    compressed = rows["sys_flag"] & COMPRESSED_FLAG
    if not compressed.any():  # the common case: one vectorised test
        return stored
    values = stored.to_pylist()
    for i in compressed.nonzero()[0]:
        values[i] = inflate(values[i], int(rows["sys_flag"][i]))
    return pa.array(values, type=pa.binary())


def _constant_strings(value: str, n: int):
    import numpy as np
    import pyarrow as pa

    raw = value.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


class _Properties:
    """The properties of a batch of records, from the codec's ``property_pieces`` (one compiled
    pass over the bytes, RocketMQ's lenient rule, duplicates kept): the ``properties`` map column
    and the value of one property per record (the last duplicate, as decode_properties keeps).
    Every piece's name and value are gathered once (two Arrow takes); the map, the headers and
    each single property are built from those arrays."""

    def __init__(self, view, rows):
        import numpy as np

        from rocketstore import _impl

        self.view, self.rows = view, rows
        self.pieces, self.counts = _impl.DEFAULT.codec.property_pieces(view, rows)
        self.record = np.repeat(np.arange(len(rows)), self.counts)
        self._gathered = None

    def map(self):
        import pyarrow as pa

        offsets, names, values = self._entries()
        return pa.MapArray.from_arrays(offsets, names.cast(pa.string()), values.cast(pa.string()))

    def headers(self):
        """Kafka's headers column: a list of (key string, value binary) structs per record,
        every property in stored order."""
        import pyarrow as pa

        offsets, names, values = self._entries()
        kind = arrow_schema(["headers"]).field("headers").type
        entries = pa.StructArray.from_arrays([names.cast(pa.string()), values], fields=list(kind.value_type))
        return pa.ListArray.from_arrays(offsets, entries, type=kind)

    def _entries(self):
        """(offsets int32 array, names binary array, values binary array) of every piece,
        computed once per batch."""
        if self._gathered is None:
            self._gathered = self._gather()
        return self._gathered

    def _gather(self):
        import numpy as np
        import pyarrow as pa

        p, m = self.pieces, len(self.pieces)
        offsets = np.zeros(len(self.rows) + 1, dtype=np.int32)
        np.cumsum(self.counts, out=offsets[1:])
        if m == 0:
            return pa.array(offsets), pa.array([], type=pa.binary()), pa.array([], type=pa.binary())
        starts = np.empty(2 * m, dtype=np.int64)
        lengths = np.empty(2 * m, dtype=np.int64)
        starts[0::2], starts[1::2] = p["name_pos"], p["value_pos"]
        lengths[0::2], lengths[1::2] = p["name_len"], p["value_len"]
        spans = _spans(self.view, starts, lengths)  # name, gap, value, gap, name, ...
        names = spans.take(pa.array(np.arange(0, 4 * m, 4, dtype=np.int32)))
        values = spans.take(pa.array(np.arange(2, 4 * m, 4, dtype=np.int32)))
        return pa.array(offsets), names, values

    def value(self, name: str):
        """A string column: each record's last ``name`` property, null where it has none."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        n = len(self.rows)
        _offsets, names, values = self._entries()
        if not len(names):
            return pa.nulls(n, type=pa.string())
        hit = np.flatnonzero(
            pc.equal(names, pa.scalar(name.encode(), type=pa.binary())).to_numpy(zero_copy_only=False)
        )
        last = np.zeros(n, dtype=np.int32)
        valid = np.zeros(n, dtype=bool)
        if len(hit):
            owner = self.record[hit]
            final = np.ones(len(hit), dtype=bool)
            final[:-1] = owner[1:] != owner[:-1]  # pieces come in record order
            last[owner[final]] = hit[final]
            valid[owner[final]] = True
        return values.take(pa.array(last, mask=~valid)).cast(pa.string())


_HEX = None


def _msg_ids(rows):
    """offsetMsgId per row: store host (4 bytes), port, CommitLog offset as upper-case hex."""
    import numpy as np
    import pyarrow as pa

    from rocketstore.format._codec_py import SYSFLAG_STOREHOST_V6, make_offset_msg_id

    global _HEX
    n = len(rows)
    if (rows["sys_flag"] & SYSFLAG_STOREHOST_V6).any():  # rare: per row
        return pa.array(
            [
                make_offset_msg_id(
                    bytes(r["store_host"])[: 16 if r["sys_flag"] & SYSFLAG_STOREHOST_V6 else 4],
                    int(r["store_port"]),
                    int(r["physical_offset"]),
                )
                for r in rows
            ],
            type=pa.string(),
        )
    if _HEX is None:
        _HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
    raw = np.empty((n, 16), dtype=np.uint8)
    raw[:, :4] = np.ascontiguousarray(rows["store_host"]).view(np.uint8).reshape(n, 16)[:, :4]
    raw[:, 4:8] = np.ascontiguousarray(rows["store_port"], dtype=">i4").view(np.uint8).reshape(n, 4)
    raw[:, 8:] = np.ascontiguousarray(rows["physical_offset"], dtype=">i8").view(np.uint8).reshape(n, 8)
    digits = np.empty((n, 16, 2), dtype=np.uint8)  # two hex digits per byte, high nibble first
    np.take(_HEX, raw >> 4, out=digits[:, :, 0], mode="clip")
    np.take(_HEX, raw & 15, out=digits[:, :, 1], mode="clip")
    text = digits.tobytes()
    offsets = np.arange(n + 1, dtype=np.int32) * 32
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(text)])


def _hosts(rows, host_field: str, port_field: str, v6_flag: int):
    """``ip:port`` per row, formatted once per distinct (address, port): a structured
    ``np.unique`` sorts slowly, so IPv4 rows are keyed by one int64 (address << 32 | port)."""
    import numpy as np
    import pyarrow as pa

    from rocketstore.message import host_from_bytes

    n = len(rows)
    v6 = (rows["sys_flag"] & v6_flag) != 0
    if v6.any():
        texts = []
        for r, is_v6 in zip(rows, v6):
            raw = bytes(r[host_field]).ljust(16, b"\0")
            texts.append(
                f"[{host_from_bytes(raw)}]:{r[port_field]}"
                if is_v6
                else f"{host_from_bytes(raw[:4])}:{r[port_field]}"
            )
        return pa.array(texts, type=pa.string())
    address = np.ascontiguousarray(rows[host_field]).view(np.uint8).reshape(n, 16)[:, :4]
    key = (np.ascontiguousarray(address).view(">u4").reshape(n).astype(np.uint64) << np.uint64(32)) | rows[
        port_field
    ].astype(np.uint32).astype(np.uint64)
    inverse: np.ndarray
    if n and (key == key[0]).all():  # the usual batch: one host
        unique, inverse = key[:1], np.zeros(n, dtype=np.int32)
    else:
        unique, inverse = np.unique(key, return_inverse=True)
    texts = [
        f"{host_from_bytes((k >> 32).to_bytes(4, 'big'))}:{int(np.uint32(k & 0xFFFFFFFF).astype(np.int32))}"
        for k in unique.tolist()
    ]
    return pa.array(texts, type=pa.string()).take(pa.array(inverse.reshape(-1).astype(np.int32)))


def _timestamps(ms):
    import numpy as np
    import pyarrow as pa

    return pa.array(ms.astype(np.int64) * 1000, type=pa.timestamp("us", tz="UTC"))


def _record_batch(rows, view, columns, topic: Optional[str], broker: str):
    """One RecordBatch of ``columns`` for ``rows`` (RECORD_DTYPE over ``view``)."""
    import numpy as np
    import pyarrow as pa

    from rocketstore.format._codec_py import SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6

    n = len(rows)
    props = None

    def properties():
        nonlocal props
        if props is None:
            props = _Properties(view, rows)
        return props

    build: dict[str, Callable[[], Any]] = {
        "topic": lambda: (
            _constant_strings(topic, n)
            if topic is not None
            else _slices(view, rows["topic_pos"], rows["topic_len"], pa.string())
        ),
        "queueId": lambda: pa.array(rows["queue_id"].astype(np.int32)),
        "queueOffset": lambda: pa.array(rows["queue_offset"].astype(np.int64)),
        "commitLogOffset": lambda: pa.array(rows["physical_offset"].astype(np.int64)),
        "brokerName": lambda: _constant_strings(broker, n),
        "body": lambda: _bodies(view, rows),
        "tags": lambda: properties().value("TAGS"),
        "keys": lambda: properties().value("KEYS"),
        "properties": lambda: properties().map(),
        "msgId": lambda: _msg_ids(rows),
        "flag": lambda: pa.array(rows["flag"].astype(np.int32)),
        "sysFlag": lambda: pa.array(rows["sys_flag"].astype(np.int32)),
        "reconsumeTimes": lambda: pa.array(rows["reconsume_times"].astype(np.int32)),
        "bornTimestamp": lambda: _timestamps(rows["born_timestamp"]),
        "storeTimestamp": lambda: _timestamps(rows["store_timestamp"]),
        "bornHost": lambda: _hosts(rows, "born_host", "born_port", SYSFLAG_BORNHOST_V6),
        "storeHost": lambda: _hosts(rows, "store_host", "store_port", SYSFLAG_STOREHOST_V6),
        # the Kafka source's columns (option schema=kafka)
        "key": lambda: properties().value("KEYS").cast(pa.binary()),
        "value": lambda: build["body"](),
        "partition": lambda: build["queueId"](),
        "offset": lambda: build["queueOffset"](),
        "timestamp": lambda: build["storeTimestamp"](),
        "timestampType": lambda: pa.array(np.full(n, LOG_APPEND_TIME, dtype=np.int32)),
        "headers": lambda: properties().headers(),
    }
    return pa.RecordBatch.from_arrays([build[c]() for c in columns], schema=arrow_schema(columns))
