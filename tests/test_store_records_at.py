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


def test_records_at_with_a_queue_refuses_units_that_name_another_message(impl, tmp_path):
    """The Spark reader labels rows with the queue it reads: a unit pointing at another queue's
    record, or at the wrong position of its own, must not become a row."""
    from rocketstore.errors import ConsumeQueueDamagedError

    with MessageStore(tmp_path, implementation=impl.name, commitlog_file_size=8 * 1024) as store:
        store.create_topic("A", 2)
        store.create_topic("B", 1)
        for i in range(90):
            store.put("A" if i % 3 else "B", b"x" * (i % 50), queue_id=i % 2 if i % 3 else 0)
        a, a_sizes = _units(store, "A", 1)
        b, b_sizes = _units(store, "B", 0)
        assert sum(len(r) for _b, _v, r in store.records_at(a, a_sizes, queue=("A", 1, 0))) == len(a)
        assert (
            sum(len(r) for _b, _v, r in store.records_at(a[5:], a_sizes[5:], queue=("A", 1, 5))) == len(a) - 5
        )
        for offsets, sizes, queue in [
            (b, b_sizes, ("A", 1, 0)),
            (a, a_sizes, ("A", 0, 0)),
            (a, a_sizes, ("A", 1, 1)),
            (a[1:], a_sizes[1:], ("A", 1, 0)),
        ]:
            with pytest.raises(ConsumeQueueDamagedError):
                list(store.records_at(offsets, sizes, queue=queue))
        mixed = np.sort(np.concatenate((a[:3], b[:1])))
        sizes = np.array([store.read(int(o)).size for o in mixed])
        with pytest.raises(ConsumeQueueDamagedError):
            list(store.records_at(mixed, sizes, queue=("A", 1, 0)))


def _put_spread_over_time(store, count):
    """``count`` messages round-robin over queues 0/1 of "A", a few milliseconds apart in groups,
    so store times repeat and grow; returns {queue_id: [store timestamps in queue order]}."""
    import time

    store.create_topic("A", 2)
    for i in range(count):
        store.put("A", b"m%d" % i, keys=f"k{i % 5} all", queue_id=i % 2)
        if i % 4 == 3:
            time.sleep(0.003)
    times = {}
    for q in (0, 1):
        lo, hi = store.min_queue_offset("A", q), store.max_queue_offset("A", q)
        times[q] = [store.get_by_queue_offset("A", q, o).store_timestamp for o in range(lo, hi)]
    return times


def test_queue_offset_of_time_is_the_first_offset_stored_at_or_after(impl, tmp_path):
    with MessageStore(tmp_path, implementation=impl.name) as store:
        times = _put_spread_over_time(store, 40)
        for q, stamps in times.items():
            probes = sorted(set(stamps)) + [stamps[0] - 1, stamps[-1] + 1, 0]
            for ts in probes:
                want = next((o for o, t in enumerate(stamps) if t >= ts), len(stamps))
                assert store.queue_offset_of_time("A", q, ts) == want, (q, ts)
        assert store.queue_offset_of_time("A", 7, 0) == 0  # no such queue
        assert store.queue_offset_of_time("Nope", 0, 0) == 0
    with MessageStore(tmp_path, implementation=impl.name, read_only=True) as store:
        stamps = times[1]
        for ts in sorted(set(stamps)):
            assert store.queue_offset_of_time("A", 1, ts) == stamps.index(ts)


def test_key_offsets_lists_every_candidate_or_none_past_the_index_cap(impl, tmp_path):
    with MessageStore(tmp_path, implementation=impl.name) as store:
        _put_spread_over_time(store, 40)
        found = store.key_offsets("A", "k3")
        assert [store.read(o).queue_offset * 2 + store.read(o).queue_id for o in found] == [
            i for i in range(40) if i % 5 == 3
        ]
        assert store.key_offsets("A", "absent") == []
        for _i in range(70):
            store.put("A", b"x", keys="many")
        assert store.key_offsets("A", "many") is None
    with MessageStore(tmp_path, implementation=impl.name, read_only=True) as store:
        assert len(store.key_offsets("A", "k3")) == 8


def test_scan_with_views_decodes_like_read(impl, tmp_path):
    with MessageStore(tmp_path, implementation=impl.name, commitlog_file_size=4 * 1024) as store:
        store.create_topic("A", 2)
        offsets = [store.put("A", b"y" * (i % 90), queue_id=i % 2).commitlog_offset for i in range(100)]
        seen, bases = [], set()
        for base, view, rows in store.scan(views=True):
            bases.add(base)
            for row in rows:
                m = impl.codec.record_from_row(view, row)
                assert m == store.read(base + int(row["position"]))
                seen.append(m.commitlog_offset)
        assert seen == offsets and len(bases) > 1
        mid = offsets[50]
        assert [
            base + int(r["position"])
            for base, _v, rows in store.scan(mid, offsets[60], views=True)
            for r in rows
        ] == offsets[50:60]
