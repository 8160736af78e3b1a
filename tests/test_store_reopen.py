"""Closing, reopening and recovering a store: offsets continue, the size is kept, bad tails go."""

import os
import shutil
import struct

import pytest

from rocketstore import MessageStore
from rocketstore.errors import MessageNotFoundError, StoreConfigError

SEGMENT = 64 * 1024
HOST = "10.0.0.7"
MAGIC_V1 = -626843481
POS_BODY = 88


def open_store(path, impl, **options):
    return MessageStore(path, implementation=impl.name, store_host=HOST, **options)


def segment_path(path, offset):
    start = offset - offset % SEGMENT
    return os.path.join(path, "commitlog", f"{start:020d}")


def flip_byte(path, offset):
    with open(segment_path(path, offset), "r+b") as f:
        f.seek(offset % SEGMENT)
        b = f.read(1)
        f.seek(offset % SEGMENT)
        f.write(bytes([b[0] ^ 0xFF]))


def fill(store, rng, n, topic="TopicR"):
    bodies, results = [], []
    for _ in range(n):
        body = rng.randbytes(rng.randrange(1, 3000))
        bodies.append(body)
        results.append(store.put(topic, body, tags="t"))
    return bodies, results


def test_reopen_continues_queue_offsets_and_reads_every_message(tmp_path, impl, rng):
    path = tmp_path / "store"
    with open_store(path, impl, commitlog_file_size=SEGMENT) as s:
        bodies, results = fill(s, rng, 90)  # several segments
        s.put_batch("TopicBatch", [b"b%d" % i for i in range(7)], queue_id=2)
        offsets_before = s.queue_offsets()
        end_before = s.max_offset
    assert not (path / "abort").exists()
    with open_store(path, impl) as s:
        assert s.last_shutdown_clean
        assert s.config.commitlog_file_size == SEGMENT
        assert s.max_offset == end_before
        assert s.queue_offsets() == offsets_before
        assert [m.body for m in s.iter_messages() if m.topic == "TopicR"] == bodies
        for body, r in zip(bodies, results):
            assert s.get_by_msg_id(r.msg_id).body == body
        nxt = [s.put("TopicR", b"after reopen") for _ in range(4)]
        for r in nxt:
            assert r.queue_offset == offsets_before[("TopicR", r.queue_id)]
        assert nxt[0].commitlog_offset == end_before
        b = s.put_batch("TopicBatch", [b"x", b"y"], queue_id=2)
        assert list(b.queue_offsets) == [7, 8]
        assert s.put("TopicNew", b"n", queue_id=1).queue_offset == 0
        assert s.topics["TopicR"] == 4


def test_reopen_many_times_keeps_offsets_growing(tmp_path, impl):
    path = tmp_path / "store"
    seen = []
    for round_ in range(4):
        with open_store(path, impl, commitlog_file_size=SEGMENT) as s:
            for i in range(30):
                r = s.put("TopicRe", b"r%d-%d" % (round_, i) * 40, queue_id=0)
                seen.append(r.queue_offset)
    assert seen == list(range(120))


def test_reopen_with_a_different_explicit_segment_size_raises_config_error(tmp_path, impl):
    path = tmp_path / "store"
    with open_store(path, impl, commitlog_file_size=SEGMENT) as s:
        s.put("TopicS", b"x")
    for wrong in (2 * SEGMENT, SEGMENT // 2, 1 << 30):
        with pytest.raises(StoreConfigError):
            open_store(path, impl, commitlog_file_size=wrong)
    # the failed opens released the lock and changed nothing
    with open_store(path, impl, commitlog_file_size=SEGMENT) as s:
        assert [m.body for m in s.iter_messages()] == [b"x"]


def test_reopen_without_the_size_option_detects_the_segment_size(tmp_path, impl, rng):
    path = tmp_path / "store"
    with open_store(path, impl, commitlog_file_size=SEGMENT) as s:
        bodies, _ = fill(s, rng, 60)
    with open_store(path, impl) as s:
        assert s.config.commitlog_file_size == SEGMENT
        assert s.stats()["segment_size"] == SEGMENT
        assert [m.body for m in s.iter_messages()] == bodies
        more, _ = fill(s, rng, 60)
    for name in os.listdir(path / "commitlog"):
        assert os.path.getsize(path / "commitlog" / name) == SEGMENT
    with open_store(path, impl, read_only=True) as s:
        assert s.config.commitlog_file_size == SEGMENT
        assert [m.body for m in s.iter_messages()] == bodies + more


def test_recover_keeps_a_damaged_record_the_checkpoint_vouched_for(tmp_path, impl, rng):
    """Below the checkpoint's confirmPhyOffset the CommitLog was flushed: a bad CRC there is
    damage, not a torn tail. The record reads as missing and verify() names it, but recovery
    does not cut the CommitLog there (RocketMQ would)."""
    path = tmp_path / "store"
    with open_store(path, impl, commitlog_file_size=SEGMENT) as s:
        bodies, results = fill(s, rng, 40)
        end = s.max_offset
    victim = results[-2]
    flip_byte(path, victim.commitlog_offset + POS_BODY + len(bodies[-2]) // 2)
    with open_store(path, impl) as s:
        assert s.max_offset == end
        with pytest.raises(MessageNotFoundError):
            s.read(victim.commitlog_offset)
        assert s.read(results[-1].commitlog_offset).body == bodies[-1]
        assert [p["offset"] for p in s.verify()["problems"]] == [victim.commitlog_offset]
        r = s.put("TopicR", b"next")
        assert r.commitlog_offset in (end, end - end % SEGMENT + SEGMENT)  # or the next segment's start


def test_recover_truncates_at_a_corrupted_last_record(tmp_path, impl, rng):
    path = tmp_path / "store"
    with open_store(path, impl, commitlog_file_size=SEGMENT) as s:
        bodies, results = fill(s, rng, 40)
        queues_before = s.queue_offsets()
    last = results[-1]
    flip_byte(path, last.commitlog_offset + POS_BODY + len(bodies[-1]) // 2)
    os.unlink(os.path.join(path, "checkpoint"))  # as if it crashed before checkpointing that record
    with open_store(path, impl) as s:
        assert s.max_offset == last.commitlog_offset
        assert [m.body for m in s.iter_messages()] == bodies[:-1]
        with pytest.raises(MessageNotFoundError):
            s.read(last.commitlog_offset)
        assert s.queue_offsets()[("TopicR", last.queue_id)] == queues_before[("TopicR", last.queue_id)] - 1
        r = s.put("TopicR", b"replacement", queue_id=last.queue_id)
        assert r.commitlog_offset == last.commitlog_offset
        assert r.queue_offset == last.queue_offset
        assert s.read(r.commitlog_offset).body == b"replacement"
    with open_store(path, impl) as s:
        assert [m.body for m in s.iter_messages()] == bodies[:-1] + [b"replacement"]


def test_recover_without_a_checkpoint_truncates_at_a_corrupted_record_in_an_earlier_segment(
    tmp_path, impl, rng
):
    path = tmp_path / "store"
    with open_store(path, impl, commitlog_file_size=SEGMENT) as s:
        bodies, results = fill(s, rng, 150)  # ~4 segments
        assert s.max_offset > 3 * SEGMENT
    victim_index = next(i for i, r in enumerate(results) if r.commitlog_offset >= SEGMENT) + 3
    victim = results[victim_index]
    flip_byte(path, victim.commitlog_offset + POS_BODY)
    # A crash with no checkpoint to trust: recovery scans from the first segment (§7).
    os.unlink(path / "checkpoint")
    (path / "abort").touch()
    with open_store(path, impl) as s:
        assert s.max_offset == victim.commitlog_offset
        assert [m.body for m in s.iter_messages()] == bodies[:victim_index]
        for r in results[victim_index:]:
            with pytest.raises(MessageNotFoundError):
                s.read(r.commitlog_offset)
        assert s.stats()["segments"] == victim.commitlog_offset // SEGMENT + 1
        # the bytes after the cut are gone, not just hidden
        with open(segment_path(path, victim.commitlog_offset), "rb") as f:
            data = f.read()
        assert data[victim.commitlog_offset % SEGMENT :] == bytes(SEGMENT - victim.commitlog_offset % SEGMENT)
        new = [s.put("TopicR", b"new-%d" % i) for i in range(3)]
        assert new[0].commitlog_offset == victim.commitlog_offset
    with open_store(path, impl) as s:
        assert [m.body for m in s.iter_messages()] == bodies[:victim_index] + [b"new-0", b"new-1", b"new-2"]


def test_recover_truncates_a_torn_record_after_the_last_good_one(tmp_path, impl):
    path = tmp_path / "store"
    with open_store(path, impl, commitlog_file_size=SEGMENT) as s:
        results = [s.put("TopicT", b"good-%d" % i) for i in range(10)]
        end = s.max_offset
    # a record header promising 500 bytes, cut short: what a crash mid-append leaves
    with open(segment_path(path, end), "r+b") as f:
        f.seek(end % SEGMENT)
        f.write(struct.pack(">ii", 500, MAGIC_V1) + b"\x7f" * 40)
    with open_store(path, impl) as s:
        assert s.max_offset == end
        assert [m.body for m in s.iter_messages()] == [b"good-%d" % i for i in range(10)]
        r = s.put("TopicT", b"after torn tail")
        assert r.commitlog_offset == end
        assert s.read(r.commitlog_offset).body == b"after torn tail"
    assert results[-1].commitlog_offset + results[-1].size == end


def test_abort_file_marks_an_unclean_shutdown(tmp_path, impl):
    path = tmp_path / "store"
    with open_store(path, impl, commitlog_file_size=SEGMENT) as s:
        s.put("TopicA", b"x")
        assert (path / "abort").exists()
    assert not (path / "abort").exists()
    (path / "abort").touch()  # as a crash leaves it
    with open_store(path, impl) as s:
        assert not s.last_shutdown_clean
        assert [m.body for m in s.iter_messages()] == [b"x"]
    with open_store(path, impl) as s:
        assert s.last_shutdown_clean


def _open_fds():
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_failed_open_closes_the_segments_it_had_mapped(tmp_path, impl):
    path = tmp_path / "store"
    with open_store(path, impl, commitlog_file_size=SEGMENT) as s:
        for _ in range(100):
            s.put("TopicF", b"x" * 2000)  # four segments
    names = sorted(os.listdir(path / "commitlog"))
    assert len(names) >= 3
    last = path / "commitlog" / names[-1]
    os.truncate(last, SEGMENT // 2)  # a segment of the wrong size
    before = _open_fds()
    for _ in range(5):
        with pytest.raises(StoreConfigError):
            open_store(path, impl, commitlog_file_size=SEGMENT)
    import gc

    gc.collect()
    assert _open_fds() == before, "a refused open leaked the descriptors of the segments it mapped"
    os.truncate(last, SEGMENT)  # repaired: the lock was released too
    with open_store(path, impl, commitlog_file_size=SEGMENT) as s:
        assert s.max_offset >= 3 * SEGMENT


def test_a_clean_reopen_reads_past_an_old_damaged_record_and_verify_reports_it(tmp_path, impl, rng):
    """Recovery after a clean close re-reads only the tail the checkpoint does not vouch for
    (§7); damage in an older segment does not cut off the good data after it: the damaged
    record reads as missing and ``verify`` names it."""
    path = tmp_path / "store"
    with open_store(path, impl, commitlog_file_size=SEGMENT) as s:
        bodies, results = fill(s, rng, 150)
        end = s.max_offset
    victim_index = next(i for i, r in enumerate(results) if r.commitlog_offset >= SEGMENT) + 3
    victim = results[victim_index]
    flip_byte(path, victim.commitlog_offset + POS_BODY)
    for read_only in (True, False):
        with open_store(path, impl, read_only=read_only) as s:
            assert s.max_offset == end
            with pytest.raises(MessageNotFoundError):
                s.read(victim.commitlog_offset)
            for i in (victim_index - 1, victim_index + 1, len(results) - 1):
                assert s.read(results[i].commitlog_offset).body == bodies[i]
            report = s.verify()
            assert not report["ok"]
            assert [p["offset"] for p in report["problems"]] == [victim.commitlog_offset]
            assert "CRC" in report["problems"][0]["reason"]
            # iteration steps over the damaged record, unless told to trust the bytes
            checked = [m.commitlog_offset for m in s.iter_messages()]
            trusted = [m.commitlog_offset for m in s.iter_messages(check_crc=False)]
            assert trusted == [r.commitlog_offset for r in results]
            assert checked == [o for o in trusted if o != victim.commitlog_offset]
            assert sum(len(rows) for _, rows in s.scan(check_crc=False)) == len(results)


def test_a_damaged_length_in_an_old_segment_is_stepped_over_and_never_stalls_the_queues(tmp_path, impl, rng):
    """A TOTALSIZE flipped in a segment a clean reopen does not re-scan: the queues are rebuilt
    past it, and only the damaged record is missing (RocketMQ's reput skips the rest of the
    segment; here the next whole record is found by its magic code and PHYSICALOFFSET); new puts
    reach their queues, and a read-only reopen sees them."""
    path = tmp_path / "store"
    with open_store(path, impl, commitlog_file_size=SEGMENT) as s:
        bodies, results = fill(s, rng, 200)
    assert results[-1].commitlog_offset >= 4 * SEGMENT  # the damaged segment is not re-scanned
    first_in_1 = next(r for r in results if r.commitlog_offset >= SEGMENT)
    flip_byte(path, first_in_1.commitlog_offset)  # the high byte of its TOTALSIZE
    for name in os.listdir(os.path.join(path, "consumequeue")):
        shutil.rmtree(os.path.join(path, "consumequeue", name))  # the queues must be rebuilt
    with open_store(path, impl, commitlog_file_size=SEGMENT) as s:
        fresh = s.put("Fresh", b"after the damage", queue_id=0)
        assert s.max_queue_offset("Fresh", 0) == 1
        kept = [r for r in results if r is not first_in_1]
        units = {
            int(u["commitlog_offset"])
            for (t, q), (lo, hi) in s.queues().items()
            for u in s.queue_units(t, q, lo, hi - lo)
        }
        assert {r.commitlog_offset for r in kept} <= units
        assert first_in_1.commitlog_offset not in units
        for r in kept[::7]:
            m = s.get_by_queue_offset(
                r.topic if hasattr(r, "topic") else s.read(r.commitlog_offset).topic,
                r.queue_id,
                r.queue_offset,
            )
            assert m.commitlog_offset == r.commitlog_offset
        assert s.verify()["problems"][0]["offset"] == first_in_1.commitlog_offset
    with open_store(path, impl, read_only=True) as s:
        assert s.read(fresh.commitlog_offset).body == b"after the damage"
        assert s.get_by_queue_offset("Fresh", 0, 0).body == b"after the damage"


class _Interrupt(Exception):
    pass


def test_an_interrupted_rebuild_resumes_where_its_last_checkpoint_was(tmp_path, impl, monkeypatch):
    """Queues and index are rebuilt in steps, each recorded (checkpoint, index resume point): an
    open that dies half-way leaves the next one only the rest to do, and nothing twice."""
    import rocketstore.log.recovery as recovery_module

    path = str(tmp_path / "s")
    count = 2000
    with open_store(path, impl, commitlog_file_size=SEGMENT, dispatch_interval_ms=0) as store:
        for i in range(count):
            store.put(f"T{i % 3}", b"body-%d" % i, keys=f"key-{i}")
        end = store.max_offset
    os.unlink(os.path.join(path, "checkpoint"))  # a crash before any checkpoint: rebuild it all
    open(os.path.join(path, "abort"), "wb").close()
    monkeypatch.setattr(recovery_module, "REBUILD_STEP", SEGMENT)

    def die_half_way(stage, done, total):
        if stage == "dispatch" and done * 2 >= total:
            raise _Interrupt()

    with pytest.raises(_Interrupt):
        open_store(path, impl, commitlog_file_size=SEGMENT, dispatch_interval_ms=0, progress=die_half_way)
    assert os.path.exists(os.path.join(path, "abort"))

    seen = {}
    with open_store(
        path,
        impl,
        commitlog_file_size=SEGMENT,
        dispatch_interval_ms=0,
        progress=lambda stage, done, total: seen.__setitem__(stage, total),
    ) as store:
        assert 0 < seen["dispatch"] <= end // 2 + SEGMENT  # only what the first open had not done
        for i in range(0, count, 7):
            found = store.query_by_key(f"T{i % 3}", f"key-{i}")
            assert [m.body for m in found] == [b"body-%d" % i]  # found once: not indexed twice
        per_topic = {}
        for (topic, qid), (low, high) in store.queues().items():
            units = store.queue_units(topic, qid, low, high - low)
            assert (
                len(units) == high - low
                and (units["commitlog_offset"][1:] > units["commitlog_offset"][:-1]).all()
            )
            per_topic[topic] = per_topic.get(topic, 0) + len(units)
        assert per_topic == {f"T{t}": len(range(t, count, 3)) for t in range(3)}
        assert store.verify()["ok"]


def _commitlog_end(path):
    """Where the last CommitLog segment file ends (the writer maps the next one ahead)."""
    last = max(os.listdir(os.path.join(path, "commitlog")))
    return int(last) + os.path.getsize(os.path.join(path, "commitlog", last))


def _recover_total(path, impl, **options):
    """Open read-only; returns (store, bytes its recovery scan covered: from its start to the
    last segment's end)."""
    seen = {}
    store = open_store(
        path,
        impl,
        read_only=True,
        **options,
        progress=lambda stage, done, total: seen.setdefault(stage, total),
    )
    return store, seen.get("recover", 0)


def test_a_read_only_open_scans_from_the_checkpoint_not_its_segment_start(tmp_path, impl):
    """Below confirmPhyOffset the queues are complete and durable: a reader does not re-verify a
    large segment on every open (a Spark task opens the store once per partition)."""
    from rocketstore.files.checkpoint import Checkpoint

    path = str(tmp_path / "s")
    with open_store(path, impl, commitlog_file_size=4 * SEGMENT) as store:
        bodies = [b"m%d-" % i + bytes(200) for i in range(300)]  # 300 records, one segment
        results = [store.put(f"T{i % 3}", b) for i, b in enumerate(bodies)]
        end = store.max_offset
    assert end < 4 * SEGMENT and Checkpoint(os.path.join(path, "checkpoint")).confirm_phy_offset == end
    store, scanned = _recover_total(path, impl)
    with store:
        assert scanned == _commitlog_end(path) - end  # from confirm, not from 0
        assert store.max_offset == end
        assert [store.read(r.commitlog_offset).body for r in results] == bodies
        assert (
            store.get_by_queue_offset("T2", results[-1].queue_id, results[-1].queue_offset).body == bodies[-1]
        )


def test_a_read_only_open_scans_the_segment_when_confirm_is_not_a_record_boundary(tmp_path, impl):
    """A checkpoint no queue unit ends at (a damaged file, a store edited by hand) is not trusted
    to start the scan: the reader scans from its segment's start and sees every message."""
    from rocketstore.files.checkpoint import Checkpoint

    path = str(tmp_path / "s")
    with open_store(path, impl, commitlog_file_size=4 * SEGMENT) as store:
        results = [store.put("T", b"x%d" % i) for i in range(50)]
        more = [store.put("T", b"y%d" % i) for i in range(50)]
    cp = Checkpoint(os.path.join(path, "checkpoint"))
    cp.confirm_phy_offset = more[0].commitlog_offset + 7  # inside a record
    cp.flush()
    store, scanned = _recover_total(path, impl)
    with store:
        assert scanned == _commitlog_end(path)  # from the segment's start
        assert [store.read(r.commitlog_offset).body for r in results + more] == [
            b"x%d" % i for i in range(50)
        ] + [b"y%d" % i for i in range(50)]
        assert sum(high - low for (topic, _q), (low, high) in store.queues().items() if topic == "T") == 100


def test_a_reader_beside_a_writer_starts_at_a_checkpoint_the_queues_have_passed(tmp_path, impl):
    """A live writer dispatches past its last checkpoint: confirmPhyOffset is then the end of a
    unit inside some queue (found by binary search), and the reader still sees everything."""
    path = str(tmp_path / "s")
    from rocketstore.files.checkpoint import Checkpoint

    with open_store(path, impl, commitlog_file_size=4 * SEGMENT, dispatch_interval_ms=0) as w:
        first = [w.put("T", b"a%d" % i, queue_id=0) for i in range(40)]
        w._opened.dispatcher.catch_up()
        w._opened.checkpointer.save()
        confirm = first[-1].commitlog_offset + first[-1].size
        assert Checkpoint(os.path.join(path, "checkpoint")).confirm_phy_offset == confirm
        later = [w.put("T", b"b%d" % i, queue_id=0) for i in range(40)]
        w.flush()
        w._opened.dispatcher.catch_up()
        assert w.max_queue_offset("T", 0) == 80
        store, scanned = _recover_total(path, impl)
        with store:
            assert scanned == _commitlog_end(path) - confirm
            assert [m.body for m in store.get_message("g", "T", 0, 0, max_msgs=100).messages] == [
                b"a%d" % i for i in range(40)
            ] + [b"b%d" % i for i in range(40)]
        assert later


def _deleted_fds():
    """This process's descriptors of files that are unlinked."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.endswith(" (deleted)"):
            out.append(target)
    return out


def test_deleted_files_are_unlinked_at_once_and_closed_by_the_end_of_the_block(tmp_path):
    from rocketstore.files.mapped_file import MappedFile, deleted_files_closed_aside

    files = [MappedFile(str(tmp_path / f"{i:020d}"), i * 4096, 4096, create=True) for i in range(3)]
    with deleted_files_closed_aside():
        for mf in files:
            mf.destroy()
            assert not os.path.exists(mf.path) and mf.fd == -1 and mf.mm is None
    if os.path.isdir("/proc/self/fd"):
        assert not [t for t in _deleted_fds() if str(tmp_path) in t]
    # a close that fails is no silent failure: it raises when the block ends
    mf = MappedFile(str(tmp_path / "x"), 0, 4096, create=True)
    os.close(mf.fd)  # behind its back: the aside close gets EBADF
    with pytest.raises(OSError), deleted_files_closed_aside():
        mf.destroy()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_an_abnormal_open_that_deletes_queue_files_leaves_none_of_them_open(tmp_path, impl):
    path = tmp_path / "store"
    with open_store(path, impl, consume_queue_units=64) as s:
        for i in range(500):
            s.put("TopicD", b"x", keys=f"k{i}")  # several ConsumeQueue files per queue
    os.unlink(path / "checkpoint")
    (path / "abort").touch()  # no checkpoint: every queue file goes and is rebuilt
    with open_store(path, impl, consume_queue_units=64) as s:
        assert not [t for t in _deleted_fds() if str(path) in t]
        assert sum(1 for _ in s.iter_messages()) == 500
        assert s.verify()["ok"]
