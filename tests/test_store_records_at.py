"""MessageStore.records_at(): a ConsumeQueue range decoded columnar, exactly (no Spark needed)."""

import numpy as np
import pytest

from rocketstore.errors import MessageNotFoundError
from rocketstore.store import MessageStore


def _units(store, topic, queue_id):
    lo, hi = store.min_queue_offset(topic, queue_id), store.max_queue_offset(topic, queue_id)
    units = store.queue_units(topic, queue_id, lo, hi - lo)
    return units["commitlog_offset"].astype(np.int64), units["size"].astype(np.int64)


def test_records_at_decodes_a_queue_across_segments_like_read(impl, tmp_path):
    with MessageStore(tmp_path, implementation=impl.name, commitlog_file_size=8 * 1024) as store:
        store.create_topic("A", 2)
        store.create_topic("B", 1)
        for i in range(200):
            store.put("A" if i % 3 else "B", b"x" * (i % 50), queue_id=i % 2 if i % 3 else 0)
        offsets, sizes = _units(store, "A", 1)
        seen = []
        segments = set()
        for base, view, rows in store.records_at(offsets, sizes):
            segments.add(base)
            for row in rows:
                m = impl.codec.record_from_row(view, row)
                assert m == store.read(int(row["physical_offset"]))
                seen.append(m.commitlog_offset)
        assert seen == offsets.tolist() and len(segments) > 1


def test_records_at_refuses_a_unit_that_is_not_a_record(impl, tmp_path):
    with MessageStore(tmp_path, implementation=impl.name) as store:
        store.create_topic("A", 1)
        for i in range(5):
            store.put("A", b"body-%d" % i)
        offsets, sizes = _units(store, "A", 0)
        with pytest.raises(MessageNotFoundError):
            list(store.records_at(offsets + 1, sizes))
        with pytest.raises(MessageNotFoundError):
            list(store.records_at(offsets, sizes + 4))
        with pytest.raises(ValueError):
            list(store.records_at(offsets[::-1], sizes[::-1]))
        assert list(store.records_at(offsets[:0], sizes[:0])) == []
