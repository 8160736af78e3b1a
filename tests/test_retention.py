"""Retention (spec §9): which CommitLog segments a pass deletes and when, the queue and index
files that follow them, disk-usage thresholds, and deletion while readers hold zero-copy views.

Time, disk usage and the local hour are injected; segment ages are set with ``os.utime``.
"""

import gc
import os
import pathlib
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import rocketstore
from rocketstore import Message, MessageStore, PutStatus
from rocketstore.config import StoreConfig
from rocketstore.errors import (
    DiskFullError,
    MessageNotFoundError,
    PutError,
    ServiceNotAvailableError,
    StoreConfigError,
)
from rocketstore.services.retention import Cleaner, disk_usage

SEGMENT = 64 * 1024
BODY = 1000  # about 60 records per segment
HOUR_MS = 3_600_000
NOW = 1_900_000_000_000  # a fixed "now" (epoch ms), far after any file's real mtime
TOPIC = "TopicRetention"


class Disk:
    """An injectable disk: usage is whatever the test sets (a fraction); counts the checks."""

    def __init__(self, usage=0.5):
        self.usage = usage
        self.checks = 0

    def __call__(self, path):
        self.checks += 1
        return self.usage


def open_store(path, impl, **options):
    options.setdefault("commitlog_file_size", SEGMENT)
    options.setdefault("consume_queue_units", 16)  # 16 units a file: several files per queue
    options.setdefault("index_slots", 16)
    options.setdefault("index_count", 64)  # 63 keys a file: several index files
    options.setdefault("clean_resource_interval_ms", 0)
    return MessageStore(path, implementation=impl.name, store_host="10.0.0.7", **options)


def cleaner(store, disk=None, hour=5):
    """A Cleaner on ``store`` whose local hour is ``hour`` (04 is delete_when) and clock NOW."""
    return Cleaner(
        store._opened.parts, clock=lambda: NOW, disk_usage=disk or Disk(), local_hour=lambda ms: hour
    )


def fill(store, segments, queue_id=0, keys=True):
    """Put messages into queue ``queue_id`` until the CommitLog has ``segments`` segments;
    returns the put results (each message has key ``k<i>``)."""
    results = []
    while len(store._opened.segments.files) < segments or store.max_offset % SEGMENT < 2 * BODY:
        i = len(results)
        body = b"%06d" % i + bytes([i % 251]) * (BODY - 6)
        results.append(store.put(TOPIC, body, keys=f"k{i}" if keys else None, queue_id=queue_id))
        assert results[-1].ok
    return results


def age(store, hours, which=None, now=NOW):
    """Set the mtime of segments (all by default) to ``hours`` before ``now`` (epoch ms)."""
    files = store._opened.segments.files if which is None else which
    when = (now - hours * HOUR_MS) / 1000
    for mf in files:
        os.utime(mf.path, (when, when))


def starts(store):
    return [mf.file_from_offset for mf in store._opened.segments.files]


def on_disk(store):
    """Segment files on disk, but the one the store prepares ahead of need (not in use yet)."""
    end = store._opened.segments.files[-1].end_offset
    return sorted(o for o in map(int, os.listdir(os.path.join(store.path, "commitlog"))) if o < end)


@pytest.fixture
def store(tmp_path, impl):
    s = open_store(tmp_path / "store", impl)
    yield s
    s.close()


# ---- which segments go, and when ----


def test_expired_segments_are_deleted_at_a_delete_when_hour_oldest_first(store):
    fill(store, 6)
    before = starts(store)
    age(store, 73, store._opened.segments.files[:4])
    age(store, 1, store._opened.segments.files[4:])
    result = cleaner(store, hour=4).run_once()
    assert result["trigger"] == "time" and not result["forced"]
    assert result["commitlog"] == before[:4]
    assert starts(store) == on_disk(store) == before[4:]
    assert store.min_offset == result["min_offset"] == before[4]


def test_expired_segments_stay_outside_the_delete_when_hours_while_the_disk_has_room(store):
    fill(store, 4)
    before = starts(store)
    age(store, 100)
    result = cleaner(store, Disk(0.74), hour=5).run_once()
    assert result["trigger"] is None and result["commitlog"] == []
    assert starts(store) == on_disk(store) == before


def test_delete_when_lists_several_hours(tmp_path, impl):
    with open_store(tmp_path / "s", impl, delete_when="01;13") as store:
        fill(store, 3)
        age(store, 100)
        assert cleaner(store, hour=4).run_once()["commitlog"] == []
        assert cleaner(store, hour=13).run_once()["commitlog"] == [0, SEGMENT]


def test_segments_younger_than_file_reserved_time_stay(tmp_path, impl):
    with open_store(tmp_path / "s", impl, file_reserved_time=10) as store:
        fill(store, 4)
        age(store, 9)
        assert cleaner(store, hour=4).run_once()["commitlog"] == []
        age(store, 11)
        assert cleaner(store, hour=4).run_once()["commitlog"] == [0, SEGMENT, 2 * SEGMENT]


def test_deletion_stops_at_the_first_young_segment_and_leaves_no_hole(store):
    fill(store, 6)
    files = list(store._opened.segments.files)
    age(store, 100)
    age(store, 1, [files[2]])  # segments 0, 1 expired; 2 young; 3, 4 expired again
    result = cleaner(store, hour=4).run_once()
    assert result["commitlog"] == [0, SEGMENT]
    assert starts(store) == on_disk(store) == [mf.file_from_offset for mf in files[2:]]


def test_a_pass_deletes_at_most_delete_files_batch_max_segments(tmp_path, impl):
    with open_store(tmp_path / "s", impl, delete_files_batch_max=3) as store:
        fill(store, 9)
        age(store, 100)
        c = cleaner(store, hour=4)
        assert c.run_once()["commitlog"] == [0, SEGMENT, 2 * SEGMENT]
        assert len(c.run_once()["commitlog"]) == 3
        assert len(c.run_once()["commitlog"]) == 2  # the last segment stays
        assert c.run_once()["commitlog"] == []
        assert len(store._opened.segments.files) == 1


def test_manual_clean_runs_passes_until_nothing_expired_is_left(tmp_path, impl):
    with open_store(tmp_path / "s", impl, delete_files_batch_max=2) as store:
        fill(store, 7)
        files = list(store._opened.segments.files)
        age(store, 100)
        age(store, 1, files[5:])
        total = cleaner(store, Disk(0.1), hour=5).clean()
        assert total["trigger"] == "manual"
        assert total["commitlog"] == [mf.file_from_offset for mf in files[:5]]
        assert starts(store) == [mf.file_from_offset for mf in files[5:]]


def test_forced_clean_deletes_every_segment_but_the_one_being_written(store):
    results = fill(store, 5)
    last = store._opened.segments.files[-1].file_from_offset
    total = cleaner(store).clean(force=True)
    assert total["forced"] and total["commitlog"] == [0, SEGMENT, 2 * SEGMENT, 3 * SEGMENT]
    assert starts(store) == on_disk(store) == [last]
    kept = [r for r in results if r.commitlog_offset >= last]
    assert kept and all(store.read(r.commitlog_offset).body[:6] == b"%06d" % results.index(r) for r in kept)
    again = store.put(TOPIC, b"after", queue_id=0)
    assert again.ok and store.read(again.commitlog_offset).body == b"after"


def test_a_full_segment_still_being_flushed_by_the_writer_is_never_deleted(store):
    fill(store, 2)
    # The writer's segment is always the last one; even the one before it goes only when full.
    assert cleaner(store).clean(force=True)["commitlog"] == [0]
    assert cleaner(store).clean(force=True)["commitlog"] == []
    assert len(store._opened.segments.files) == 1


# ---- disk usage ----


def test_disk_above_max_used_space_ratio_deletes_expired_segments_at_any_hour(store):
    fill(store, 5)
    files = list(store._opened.segments.files)
    age(store, 100, files[:2])
    age(store, 1, files[2:])
    result = cleaner(store, Disk(0.76), hour=5).run_once()
    assert result["trigger"] == "space" and not result["forced"]
    assert result["commitlog"] == [0, SEGMENT]
    assert result["disk_usage"] == 0.76 and not result["disk_full"]


def test_by_default_a_fuller_disk_deletes_only_expired_segments_and_refuses_puts(tmp_path, impl):
    # RocketMQ's broker deletes young segments above 85 % (cleanFileForciblyEnable); a library
    # must not: whatever filled the disk, acknowledged messages younger than file_reserved_time
    # stay, and puts are refused with a typed error instead.
    path = tmp_path / "s"
    with open_store(path, impl) as store:
        results = fill(store, 5)
        files = list(store._opened.segments.files)
        age(store, 100, files[:2])
        age(store, 1, files[2:])
        result = cleaner(store, Disk(0.86), hour=5).run_once()
        assert result["trigger"] == "space" and not result["forced"]
        assert result["commitlog"] == [0, SEGMENT]  # the expired ones only
        c = cleaner(store, Disk(0.99), hour=5)
        result = c.run_once()
        assert result["commitlog"] == [] and not result["forced"] and result["disk_full"]
        assert c.clean()["commitlog"] == []  # a manual clean keeps them too
        assert starts(store) == on_disk(store) == [mf.file_from_offset for mf in files[2:]]
        with pytest.raises(DiskFullError) as refused:
            store.put(TOPIC, b"x", queue_id=0)
        assert isinstance(refused.value, ServiceNotAvailableError)
        assert "delete_unexpired_when_disk_full" in str(refused.value)
        kept = [r for r in results if r.commitlog_offset >= 2 * SEGMENT]
    with open_store(path, impl) as store:
        for r in kept:
            assert store.read(r.commitlog_offset).body[:6] == b"%06d" % results.index(r)


def test_delete_unexpired_when_disk_full_deletes_young_segments_above_the_forcible_ratio(tmp_path, impl):
    with open_store(tmp_path / "s", impl, delete_unexpired_when_disk_full=True) as store:
        fill(store, 5)
        age(store, 1)
        result = cleaner(store, Disk(0.86), hour=5).run_once()
        assert result["trigger"] == "space" and result["forced"]
        assert result["commitlog"] == [0, SEGMENT, 2 * SEGMENT, 3 * SEGMENT]
        assert not result["disk_full"]


def test_the_old_clean_file_forcibly_enable_name_maps_to_the_new_option(tmp_path, impl):
    with pytest.warns(DeprecationWarning, match="delete_unexpired_when_disk_full"):
        store = open_store(tmp_path / "s", impl, clean_file_forcibly_enable=True)
    with store:
        assert store.config.delete_unexpired_when_disk_full is True
        fill(store, 4)
        age(store, 1)
        assert len(cleaner(store, Disk(0.95), hour=5).run_once()["commitlog"]) == 3
    with pytest.warns(DeprecationWarning):
        cfg = StoreConfig(store_host="10.0.0.7", clean_file_forcibly_enable=False)
    assert cfg.delete_unexpired_when_disk_full is False
    with pytest.raises(StoreConfigError, match="clean_file_forcibly_enable"):
        StoreConfig(
            store_host="10.0.0.7", clean_file_forcibly_enable=True, delete_unexpired_when_disk_full=False
        )


def test_an_unreadable_disk_usage_triggers_cleaning_of_expired_segments(store):
    fill(store, 3)
    age(store, 100)
    result = cleaner(store, Disk(-1.0), hour=5).run_once()
    assert result["trigger"] == "space" and not result["forced"]
    assert result["commitlog"] == [0, SEGMENT]
    assert not result["disk_full"]


def test_disk_above_warning_level_refuses_every_put_until_usage_is_back_at_the_forcible_level(store):
    fill(store, 1)
    disk = Disk(0.91)
    c = cleaner(store, disk)
    assert c.run_once()["disk_full"]
    end, count = store.max_offset, len(list(store.iter_messages()))
    queue_offsets = store.queue_offsets()
    refused = [
        lambda: store.put(TOPIC, b"x", queue_id=0),
        lambda: store.put(TOPIC, b"x", tags="TagA", keys="k"),
        lambda: store.put(Message(TOPIC, b"x")),
        lambda: store.put(TOPIC, b"x", durable=True),
        lambda: store.put_batch(TOPIC, [b"a", b"b"]),
        lambda: store.put_pipelined(TOPIC, b"x").result(),
        lambda: store.put_messages([Message(TOPIC, b"a"), Message(TOPIC, b"b", queue_id=1)]),
    ]
    for put in refused:
        with pytest.raises(DiskFullError) as info:
            put()
        assert isinstance(info.value, PutError) and info.value.status == PutStatus.SERVICE_NOT_AVAILABLE
        assert "disk_space_warning_level_ratio" in str(info.value)
    assert store.max_offset == end and len(list(store.iter_messages())) == count
    assert store.queue_offsets() == queue_offsets
    assert store._opened.core.stats()["refused_puts"] == len(refused)

    disk.usage = 0.88  # below the warning level, above the forcible one: still full
    assert c.run_once()["disk_full"]
    with pytest.raises(ServiceNotAvailableError):
        store.put(TOPIC, b"x")
    disk.usage = 0.85  # at the forcible level: disk OK
    assert not c.run_once()["disk_full"]
    ok = store.put(TOPIC, b"back", queue_id=0)
    assert ok.ok and ok.commitlog_offset == end and store.read(end).body == b"back"
    assert ok.queue_offset == queue_offsets[(TOPIC, 0)]


def test_puts_resume_in_the_same_pass_that_freed_the_space(tmp_path, impl):
    with open_store(tmp_path / "s", impl, delete_unexpired_when_disk_full=True) as store:
        fill(store, 4)
        disk = Disk(0.95)
        c = cleaner(store, disk)
        c.check_disk()
        with pytest.raises(ServiceNotAvailableError):
            store.put(TOPIC, b"x")

        def freed(path):  # usage falls once the segments are gone
            return 0.5 if len(store._opened.segments.files) == 1 else 0.95

        c._disk_usage = freed
        result = c.run_once()
        assert result["forced"] and len(result["commitlog"]) == 3 and not result["disk_full"]
        assert store.put(TOPIC, b"x").ok


def test_disk_usage_reads_the_file_system(tmp_path):
    st = os.statvfs(tmp_path)
    used = st.f_blocks - st.f_bfree
    expected = used / (used + st.f_bavail)
    assert disk_usage(str(tmp_path)) == pytest.approx(expected, abs=0.01)
    assert disk_usage(str(tmp_path / "missing")) == -1.0


# ---- ConsumeQueue and index files follow the CommitLog ----


def test_queue_and_index_files_below_the_new_min_offset_go_and_min_offsets_are_corrected(store):
    results = fill(store, 6)
    store.queues()  # dispatch everything
    cq = store._opened.queues.get(TOPIC, 0)
    cq_dir = cq.directory
    cq_files_before = sorted(os.listdir(cq_dir))
    index_before = [f.name for f in store._opened.index.files]
    assert len(cq_files_before) > 5 and len(index_before) > 3
    age(store, 100, store._opened.segments.files[:3])
    age(store, 1, store._opened.segments.files[3:])
    result = cleaner(store, hour=4).run_once()
    min_offset = 3 * SEGMENT
    assert result["commitlog"] == [0, SEGMENT, 2 * SEGMENT] and store.min_offset == min_offset

    # ConsumeQueue: files whose last unit points below min_offset are gone, the rest stay
    units_per_file = 16
    first_kept = next(r for r in results if r.commitlog_offset >= min_offset)
    expected_min = first_kept.queue_offset
    gone_files = expected_min // units_per_file
    assert result["consumequeue_files"] == gone_files
    assert sorted(os.listdir(cq_dir)) == cq_files_before[gone_files:]
    assert store.min_queue_offset(TOPIC, 0) == expected_min
    assert store.max_queue_offset(TOPIC, 0) == len(results)
    stale = store.get_message("g", TOPIC, 0, 0, max_msgs=4)  # a consumer behind retention
    assert not stale.messages and stale.next_begin_offset == expected_min
    got = store.get_message("g", TOPIC, 0, stale.next_begin_offset, max_msgs=4)
    assert [m.queue_offset for m in got.messages] == list(range(expected_min, expected_min + 4))

    # index: files that end below min_offset are gone; keys of deleted messages find nothing
    kept_index = [f for f in store._opened.index.files]
    assert result["index_files"] == len(index_before) - len(kept_index) > 0
    assert all(f.end_phy_offset >= min_offset for f in kept_index[:-1])
    assert not os.path.exists(os.path.join(store.path, "index", index_before[0]))
    assert store.query_by_key(TOPIC, "k0") == []
    i = results.index(first_kept)
    assert [m.commitlog_offset for m in store.query_by_key(TOPIC, f"k{i}")] == [first_kept.commitlog_offset]


def test_queues_are_cleaned_only_when_the_commitlog_min_offset_grew(store):
    fill(store, 3)
    store.queues()
    c = cleaner(store)
    first = c.run_once()  # nothing to delete; queues corrected once
    assert first["commitlog"] == [] and first["consumequeue_files"] == 0
    calls = []
    real = store._opened.queues.delete_expired
    store._opened.queues.delete_expired = lambda off: calls.append(off) or real(off)
    c.run_once()
    assert calls == []
    c.clean(force=True)
    assert calls == [2 * SEGMENT]


def test_store_reopens_cleanly_after_retention(tmp_path, impl):
    path = tmp_path / "s"
    with open_store(path, impl) as store:
        results = fill(store, 6)
        age(store, 100)
        cleaner(store, hour=4).run_once()
        min_offset = store.min_offset
        queues = store.queues()
        kept = [r for r in results if r.commitlog_offset >= min_offset]
    with open_store(path, impl) as store:
        assert store.min_offset == min_offset
        assert [m.commitlog_offset for m in store.iter_messages()] == [r.commitlog_offset for r in kept]
        assert store.queues() == queues
        got = store.get_message("g", TOPIC, 0, None, max_msgs=len(kept))
        assert [m.commitlog_offset for m in got.messages] == [r.commitlog_offset for r in kept]


# ---- deletion while readers hold views (ReferenceResource) ----


def _mapped_paths():
    with open("/proc/self/maps") as f:
        return f.read()


def test_views_taken_before_deletion_stay_readable_and_later_reads_raise_not_found(store):
    results = fill(store, 4)
    store.queues()
    first = results[0]
    seg0 = store._opened.segments.files[0]
    seg0_path = seg0.path
    body_view = store.read(first.commitlog_offset, zero_copy=True).body
    assert isinstance(body_view, memoryview)
    iterator = store.iter_messages(zero_copy=True)
    m0 = next(iterator)
    units = store.queue_units(TOPIC, 0, 0, 16)
    units_copy = units.copy()
    expected = bytes(body_view)

    total = cleaner(store).clean(force=True)
    assert total["commitlog"] == [0, SEGMENT, 2 * SEGMENT] and total["consumequeue_files"] > 0
    assert not os.path.exists(seg0_path)

    # the views still read the old bytes: the map lives as long as they do
    assert bytes(body_view) == expected == bytes(m0.body)
    assert np.array_equal(units, units_copy)
    assert int(units["commitlog_offset"][0]) == first.commitlog_offset
    # reads that start after the deletion: MessageNotFoundError, not a crash
    with pytest.raises(MessageNotFoundError):
        store.read(first.commitlog_offset)
    with pytest.raises(MessageNotFoundError):
        store.get_by_msg_id(first.msg_id)
    with pytest.raises(MessageNotFoundError, match="deleted"):
        seg0.view(0, 16)  # a reader that still holds the old segment object
    with pytest.raises(MessageNotFoundError):
        store.queue_units(TOPIC, 0, 0, 16)
    with pytest.raises(MessageNotFoundError, match="deleted"):
        list(iterator)  # the iteration reaches a deleted segment
    if os.path.exists("/proc/self/maps"):
        assert seg0_path in _mapped_paths()  # unlinked, still mapped for the views
        del body_view, m0, units, iterator
        gc.collect()
        assert seg0_path not in _mapped_paths()  # unmapped with the last view


def test_readers_racing_the_cleaner_see_whole_messages_or_not_found(tmp_path, impl):
    with open_store(tmp_path / "s", impl, dispatch_interval_ms=1) as store:
        results = fill(store, 3, keys=False)
        expected = {r.commitlog_offset: b"%06d" % i for i, r in enumerate(results)}
        stop = threading.Event()
        saw_gone = threading.Event()
        errors = []
        counts = {"read": 0, "gone": 0}

        def reader():
            try:
                while not stop.is_set():
                    for r in list(results[::7]):
                        try:
                            m = store.read(r.commitlog_offset, zero_copy=True)
                        except MessageNotFoundError:
                            counts["gone"] += 1
                            saw_gone.set()
                            continue
                        assert bytes(m.body[:6]) == expected[r.commitlog_offset]
                        counts["read"] += 1
                    try:
                        for m in store.iter_messages(zero_copy=True):
                            assert len(m.body) == BODY
                    except MessageNotFoundError:
                        pass
                    try:
                        store.queue_units(TOPIC, 0, store.min_queue_offset(TOPIC, 0), 16)
                    except MessageNotFoundError:
                        pass
                    # Two readers that never sleep hold the GIL most of the time: the writer
                    # and the cleaner crawled (the pure twin took 50-80 s instead of 2).
                    time.sleep(0.001)
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        threads = [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        c = cleaner(store)
        try:
            for _round in range(12):
                for _i in range(90):
                    r = store.put(TOPIC, b"%06d" % len(results) + b"r" * (BODY - 6), queue_id=0)
                    assert r.ok
                    expected[r.commitlog_offset] = b"%06d" % len(results)
                    results.append(r)
                c.clean(force=True)
            saw_gone.wait(60)  # let the readers meet the deleted segments at least once
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert not errors, errors[0]
        assert counts["read"] > 0 and counts["gone"] > 0
        assert len(store._opened.segments.files) <= 2


# ---- the background thread and the store's entry points ----


def test_background_thread_runs_passes_until_stopped(tmp_path, impl):
    with open_store(tmp_path / "s", impl) as store:
        fill(store, 3)
        age(store, 100)
        passes = threading.Semaphore(0)

        class CountingDisk(Disk):
            def __call__(self, path):
                passes.release()
                return super().__call__(path)

        disk = CountingDisk(0.5)
        c = Cleaner(store._opened.parts, clock=lambda: NOW, disk_usage=disk, local_hour=lambda ms: 4)
        store.config.clean_resource_interval_ms = 5
        c.start()
        try:
            for _ in range(3):  # start()'s own check, then two passes
                assert passes.acquire(timeout=30)
        finally:
            c.stop()
        assert starts(store) == [2 * SEGMENT]
        checks = disk.checks
        time.sleep(0.05)  # a stopped cleaner checks nothing more
        assert disk.checks == checks


def test_a_failing_background_pass_logs_one_error_then_its_recovery(store, caplog):
    c = cleaner(store)
    left, recovered = [6], threading.Event()

    def run_once():
        if left[0]:
            left[0] -= 1
            raise DiskFullError(28, "No space left on device (test)")
        recovered.set()

    c.run_once = run_once
    store.config.clean_resource_interval_ms = 1
    with caplog.at_level("INFO", logger="rocketstore.services.retention"):
        c.start()
        try:
            assert recovered.wait(60)
        finally:
            c.stop()
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "No space left on device" in errors[0]
    assert [r.getMessage() for r in caplog.records if "recovered" in r.getMessage()] == [
        "background retention pass recovered after 6 failures"
    ]


def test_start_checks_the_disk_at_once_and_marks_it_full(store):
    fill(store, 1)
    c = cleaner(store, Disk(0.99))
    c.start()  # interval 0: no thread, but the check runs
    try:
        assert c.disk_full and c.stats()["disk_full"]
        with pytest.raises(ServiceNotAvailableError):
            store.put(TOPIC, b"x")
    finally:
        c.stop()


def test_store_clean_and_stats_use_the_cleaner(tmp_path, impl):
    with open_store(tmp_path / "s", impl) as store:
        fill(store, 3)
        age(store, 1, now=time.time() * 1000)  # the store's cleaner runs on the real clock
        assert store.clean()["commitlog"] == []
        age(store, 100, now=time.time() * 1000)
        assert store.clean()["commitlog"] == [0, SEGMENT]
        stats = store.stats()
        assert stats["deleted_segments"] == 2 and stats["disk_full"] is False
        fill(store, 5)
        assert len(store.clean(force=True)["commitlog"]) >= 2
        assert len(store._opened.segments.files) == 1


# ---- options ----


@pytest.mark.parametrize(
    "options",
    [
        dict(file_reserved_time=-1),
        dict(file_reserved_time="72"),
        dict(file_reserved_time=True),
        dict(delete_when="24"),
        dict(delete_when="04;x"),
        dict(delete_when=4),
        dict(disk_max_used_space_ratio=0),
        dict(disk_space_warning_level_ratio=101),
        dict(disk_space_clean_forcibly_ratio=95),  # above the warning level (90)
        dict(clean_file_forcibly_enable=1),
        dict(delete_unexpired_when_disk_full=1),
        dict(delete_unexpired_when_disk_full="no"),
        dict(clean_resource_interval_ms=-1),
        dict(clean_resource_interval_ms=1.5),
        dict(delete_files_batch_max=0),
    ],
)
def test_bad_retention_options_raise_store_config_error(options):
    with pytest.raises(StoreConfigError):
        StoreConfig(store_host="10.0.0.7", **options)


def test_retention_options_have_rocketmq_defaults_and_parse_delete_when():
    cfg = StoreConfig(store_host="10.0.0.7")
    assert (cfg.file_reserved_time, cfg.delete_when, cfg.delete_hours) == (72, "04", (4,))
    assert (
        cfg.disk_max_used_space_ratio,
        cfg.disk_space_clean_forcibly_ratio,
        cfg.disk_space_warning_level_ratio,
    ) == (75, 85, 90)
    assert cfg.clean_resource_interval_ms == 10_000 and cfg.delete_files_batch_max == 10
    assert cfg.delete_unexpired_when_disk_full is False  # unlike RocketMQ's broker: see README
    assert StoreConfig(store_host="10.0.0.7", delete_when="13; 1;").delete_hours == (1, 13)
    assert StoreConfig(store_host="10.0.0.7", delete_when="").delete_hours == ()


CRASH_CHILD = r"""
import os, sys
from rocketstore import MessageStore
from rocketstore.services.retention import Cleaner
impl, path = sys.argv[1], sys.argv[2]
store = MessageStore(path, implementation=impl, store_host="10.0.0.7", commitlog_file_size=64 * 1024,
                     consume_queue_units=16, index_slots=16, index_count=64,
                     clean_resource_interval_ms=0, checkpoint_interval_ms=1)
for i in range(400):
    assert store.put("TopicRetention", b"%06d" % i + b"c" * 994, keys="k%d" % i, queue_id=i % 2).ok
store.queues()
deleted = Cleaner(store._opened.parts, disk_usage=lambda p: 0.5).clean(force=True)["commitlog"]
assert len(deleted) >= 5
for i in range(400, 430):
    assert store.put("TopicRetention", b"%06d" % i + b"c" * 994, keys="k%d" % i, queue_id=i % 2).ok
store.flush()
store.queues()
print(store.min_offset, store.max_offset, flush=True)
os._exit(0)        # a crash: no close, the abort file stays
"""


def test_abnormal_reopen_after_retention_recovers_what_is_left(tmp_path, impl):
    path = tmp_path / "s"
    env = dict(os.environ)
    src = str(pathlib.Path(rocketstore.__file__).resolve().parents[1])
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-c", CRASH_CHILD, impl.name, str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    min_offset, max_offset = map(int, proc.stdout.split())
    assert (path / "abort").exists()
    with open_store(path, impl) as store:
        assert not store.last_shutdown_clean
        assert store.min_offset == min_offset and store.max_offset == max_offset
        numbers = [int(bytes(m.body[:6])) for m in store.iter_messages()]
        assert numbers == list(range(numbers[0], 430)) and numbers[0] > 0
        for q in (0, 1):
            lo, hi = store.min_queue_offset(TOPIC, q), store.max_queue_offset(TOPIC, q)
            assert hi == 215
            got = store.get_message("g", TOPIC, q, lo, max_msgs=32)
            assert got.messages and int(bytes(got.messages[0].body[:6])) >= numbers[0]
        assert [int(bytes(m.body[:6])) for m in store.query_by_key(TOPIC, "k429")] == [429]
        assert store.query_by_key(TOPIC, "k0") == []


def test_read_only_open_starts_queues_past_what_retention_deleted(tmp_path, impl):
    path = str(tmp_path / "s")
    with MessageStore(path, commitlog_file_size=16 * 1024) as s:
        s.create_topic("T", 2)
        for i in range(400):
            s.put("T", b"x" * 100, queue_id=i % 2)
        s.clean(force=True)
        kept = s.queues()
    assert all(lo > 0 for lo, _hi in kept.values())
    with MessageStore(path, read_only=True) as r:
        assert r.queues() == kept
        assert r.get_message("g", "T", 0, None, 1).messages[0].queue_offset == kept[("T", 0)][0]


# ---- stats() tells the disk's state now; retention never outruns dispatch ----


def test_stats_reads_the_disk_at_call_time_without_a_background_cleaner(tmp_path, impl):
    with open_store(tmp_path / "s", impl, clean_resource_interval_ms=0) as store:
        fill(store, 1)
        disk = Disk(0.5)
        store._opened.cleaner._disk_usage = disk  # the disk changes after the open's own check
        stats = store.stats()
        assert stats["disk_usage"] == 0.5 and stats["disk_full"] is False
        disk.usage = 1.0  # something else filled the disk
        stats = store.stats()
        assert stats["disk_usage"] == 1.0 and stats["disk_full"] is True
        refused = store.stats()["refused_puts"]
        with pytest.raises(DiskFullError):
            store.put(TOPIC, b"x", queue_id=0)
        assert store.stats()["refused_puts"] == refused + 1
        disk.usage = 0.5
        stats = store.stats()
        assert stats["disk_full"] is False and store.put(TOPIC, b"x", queue_id=0).ok


def test_stats_disk_usage_is_the_file_systems(tmp_path, impl):
    with open_store(tmp_path / "s", impl) as store:
        assert store.stats()["disk_usage"] == pytest.approx(disk_usage(str(tmp_path)), abs=0.01)


def undispatched_store(tmp_path, impl):
    """A store whose puts are not dispatched until something asks (no dispatch thread)."""
    return open_store(tmp_path / "s", impl, dispatch_interval_ms=0, checkpoint_interval_ms=0)


def check_every_queue_position(store, results):
    """Every put is reachable by its queue offset, as itself: topic, queue id, queue offset."""
    for q in (0, 1):
        mine = [r for r in results if r.queue_id == q]
        got, offset = [], store.min_queue_offset(TOPIC, q)
        assert offset == (mine[0].queue_offset if mine else store.max_queue_offset(TOPIC, q))
        while True:
            res = store.get_message("g", TOPIC, q, offset, max_msgs=64)
            if not res.messages:
                break
            got += res.messages
            offset = res.next_begin_offset
        assert [(m.topic, m.queue_id, m.queue_offset, m.commitlog_offset) for m in got] == [
            (TOPIC, q, r.queue_offset, r.commitlog_offset) for r in mine
        ]
        for r in mine:
            m = store.get_by_queue_offset(TOPIC, q, r.queue_offset)
            assert (m.topic, m.queue_id, m.queue_offset, m.commitlog_offset) == (
                TOPIC,
                q,
                r.queue_offset,
                r.commitlog_offset,
            )


def test_retention_deletes_nothing_when_the_dispatch_before_it_fails(tmp_path, impl, monkeypatch, caplog):
    with undispatched_store(tmp_path, impl) as store:
        results = []
        for q in (0, 1, 0, 1, 0):
            results += fill(store, len(store._opened.segments.files) + 1, queue_id=q)
        before = starts(store)
        assert len(before) >= 5 and store._opened.dispatcher.offset < before[1]  # nothing dispatched

        def full(*args, **kwargs):
            raise DiskFullError(28, "No space left on device (test)")

        monkeypatch.setattr(store._opened.dispatcher, "catch_up", full)
        with caplog.at_level("INFO", logger="rocketstore.services.retention"):
            result = store.clean(force=True)
            assert result["commitlog"] == [] and isinstance(result["dispatch_error"], DiskFullError)
            c = store._opened.cleaner  # one cleaner: its passes say it once
            c._disk_usage, c._local_hour = Disk(0.99), (lambda ms: 4)
            for _ in range(3):
                age(store, 100, now=time.time() * 1000)
                assert c.run_once()["commitlog"] == [] and store.clean()["commitlog"] == []
            c._disk_usage = Disk(0.5)
        assert starts(store) == on_disk(store) == before
        errors = [r for r in caplog.records if r.levelname == "ERROR" and "dispatch" in r.getMessage()]
        assert len(errors) == 1 and "no segment is deleted" in errors[0].getMessage()

        monkeypatch.undo()  # space returns: the next pass dispatches, then deletes
        check_every_queue_position(store, results)
        result = store.clean(force=True)
        assert result["commitlog"] == before[:-1] and result["dispatch_error"] is None
        kept = [r for r in results if r.commitlog_offset >= before[-1]]
        check_every_queue_position(store, kept)


def test_retention_deletes_only_segments_the_dispatcher_has_passed(tmp_path, impl, monkeypatch):
    with undispatched_store(tmp_path, impl) as store:
        results = []
        for q in (0, 1, 0, 1, 0):
            results += fill(store, len(store._opened.segments.files) + 1, queue_id=q)
        before = starts(store)
        real = store._opened.dispatcher.catch_up

        def partial(*args, **kwargs):  # dispatch stops inside the third segment
            return real(target=before[2] + 10)

        monkeypatch.setattr(store._opened.dispatcher, "catch_up", partial)
        assert store.clean(force=True)["commitlog"] == before[:2]
        monkeypatch.undo()
        kept = [r for r in results if r.commitlog_offset >= before[2]]
        check_every_queue_position(store, kept)
