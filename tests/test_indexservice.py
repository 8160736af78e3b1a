"""IndexService (spec §5.4, §5.5): building, rolling, querying, loading and deleting index files.

Every test runs against both twins (``impl`` fixture). Small files (64 slots, 8 or 128 items)
make rolling happen after a few records.
"""

import hashlib
import os
import pathlib
import random
import time

import pytest

from rocketstore.errors import InvalidMessageError, StoreClosedError, StoreConfigError, StoreReadOnlyError
from rocketstore.format import _codec_py
from rocketstore.queues import indexservice
from rocketstore.queues.indexservice import MAX_MSGS_NUM_BATCH, IndexService

SLOTS = 64
ITEMS = 128
T0 = 1_700_000_000_000
ROLLBACK, PREPARED, COMMIT = 0xC, 0x4, 0x8


def open_service(
    impl, root, *, items=ITEMS, slots=SLOTS, read_only=False, abnormal=False, checkpoint=0, **kwargs
):
    service = IndexService(
        root, implementation=impl.name, slot_count=slots, index_count=items, read_only=read_only, **kwargs
    )
    service.load(abnormal, checkpoint)
    return service


def record(i):
    """Record i: phyOffset 100*i, stored 1 s apart, UNIQ_KEY U<i>, KEYS 'k<i> common'."""
    return ("TopicA", f"k{i} common", 100 * i, T0 + 1000 * i, f"U{i}")


def build(service, records):
    finished = []
    for topic, keys, phy, ts, uniq in records:
        done = service.build_index(topic, keys, phy, ts, unique_key=uniq)
        if done is not None:
            finished.append(done)
    return finished


def index_dir_snapshot(root):
    d = os.path.join(root, "index")
    out = {}
    for name in sorted(os.listdir(d)):
        path = os.path.join(d, name)
        st = os.stat(path)
        with open(path, "rb") as f:
            out[name] = (st.st_mtime_ns, hashlib.sha256(f.read()).hexdigest())
    return out


def file_bytes(service):
    out = []
    for f in service.files:
        with open(f.path, "rb") as fh:
            out.append(fh.read())
    return out


@pytest.fixture
def frozen_clock(monkeypatch):
    """Freeze the service's clock, so file names must be bumped to stay unique."""
    monkeypatch.setattr(indexservice, "now_ms", lambda: T0)
    return T0


# -- keys and queries ---------------------------------------------------------------------------


def test_uniq_key_and_each_keys_token_are_found(impl, tmp_path):
    with open_service(impl, tmp_path) as s:
        s.build_index("TopicA", "order-1  order-2 ", 4096, T0, unique_key="UNIQ1")
        s.build_index("TopicA", "order-3", 8192, T0 + 5, unique_key=None)
        assert s.query("TopicA", "UNIQ1")[0] == [4096]
        assert s.query("TopicA", "order-1")[0] == [4096]
        assert s.query("TopicA", "order-2")[0] == [4096]
        assert s.query("TopicA", "order-3") == ([8192], T0 + 5, 8192)
        assert s.query("TopicA", "")[0] == []  # the empty tokens were not indexed
        assert s.files[-1].index_count - 1 == 4


def test_keys_split_on_single_spaces_only(impl, tmp_path):
    with open_service(impl, tmp_path) as s:
        s.build_index("T", "a\tb c", 0, T0)
        assert s.query("T", "a\tb")[0] == [0]
        assert s.query("T", "c")[0] == [0]
        assert s.query("T", "a")[0] == []


def test_same_key_in_another_topic_is_not_returned(impl, tmp_path):
    key_hash = _codec_py.index_key_hash
    assert key_hash("TopicA#k") != key_hash("TopicB#k")
    with open_service(impl, tmp_path) as s:
        s.build_index("TopicA", "k", 0, T0)
        s.build_index("TopicB", "k", 100, T0)
        assert s.query("TopicA", "k")[0] == [0]
        assert s.query("TopicB", "k")[0] == [100]
        assert s.query("TopicC", "k")[0] == []


def test_colliding_hashes_are_returned_as_candidates(impl, tmp_path):
    # "Aa" and "BB" have the same Java hashCode, so "T#Aa" and "T#BB" do too.
    assert _codec_py.index_key_hash("T#Aa") == _codec_py.index_key_hash("T#BB")
    with open_service(impl, tmp_path) as s:
        s.build_index("T", "Aa", 0, T0)
        s.build_index("T", "BB", 100, T0)
        assert s.query("T", "Aa")[0] == [0, 100]


def test_query_without_files_finds_nothing(impl, tmp_path):
    with open_service(impl, tmp_path) as s:
        assert s.query("T", "k") == ([], 0, 0)
        assert s.files == []
        assert not os.path.exists(tmp_path / "index")


def test_records_without_keys_create_no_file(impl, tmp_path):
    with open_service(impl, tmp_path) as s:
        assert s.build_index("T", None, 0, T0) is None
        assert s.build_index("T", "   ", 100, T0) is None
        assert s.files == []


# -- rolling ------------------------------------------------------------------------------------


def test_rolling_starts_each_file_at_the_previous_end(impl, tmp_path):
    # 8 items per file = 7 usable; records of 3 keys split across files at records 2 and 4.
    ends = []
    with open_service(impl, tmp_path, items=8, on_file_full=ends.append) as s:
        returned = [s.build_index("T", f"a{i} b{i} c{i}", 100 * i, T0 + 1000 * i) for i in range(6)]
        files = s.files
        assert len(files) == 3
        assert [f.index_count - 1 for f in files] == [7, 7, 4]
        for prev, new in zip(files, files[1:]):
            assert prev.is_full
            assert new.begin_phy_offset == prev.end_phy_offset
            assert new.begin_timestamp == prev.end_timestamp
        assert files[0].end_phy_offset == 200 and files[1].end_phy_offset == 400
        # the full files were reported once each, by callback and return value
        assert ends == [T0 + 2000, T0 + 4000]
        assert [r for r in returned if r is not None] == ends
        # the split records are found under every key
        for key in ("a2", "b2", "c2"):
            assert s.query("T", key)[0] == [200]
        for key in ("a4", "b4", "c4"):
            assert s.query("T", key)[0] == [400]


def test_a_file_filled_exactly_rolls_on_the_next_record(impl, tmp_path):
    with open_service(impl, tmp_path, items=8) as s:
        for i in range(4):  # 2 keys a record: the 7th item lands in record 3, the 8th rolls
            s.build_index("T", f"a{i} b{i}", 100 * i, T0 + 1000 * i)
        s.build_index("T", "x", 400, T0 + 4000)
        first, second = s.files
        assert first.is_full and first.end_phy_offset == 300
        assert second.begin_phy_offset == 300 and second.index_count == 3


def test_queries_span_files_newest_first_and_are_capped(impl, tmp_path):
    with open_service(impl, tmp_path, items=8) as s:
        build(s, [record(i) for i in range(20)])  # 3 keys a record: 20 records fill 8+ files
        assert len(s.files) >= 8
        offsets, last_ts, last_phy = s.query("TopicA", "common", max_num=1000)
        assert offsets == [100 * i for i in range(20)]
        assert (last_ts, last_phy) == (T0 + 19000, 1900)
        # max_num keeps the newest hits, returned ascending
        assert s.query("TopicA", "common", max_num=5)[0] == [100 * i for i in range(15, 20)]
        assert s.query("TopicA", "common", max_num=0)[0] == []
        for i in (0, 7, 19):
            assert s.query("TopicA", f"U{i}")[0] == [100 * i]
            assert s.query("TopicA", f"k{i}")[0] == [100 * i]


def test_query_gives_the_newest_max_num_across_files(impl, tmp_path):
    with open_service(impl, tmp_path) as s:
        build(s, [record(i) for i in range(100)])  # 300 items: 3 files of 127
        assert len(s.files) == 3
        offsets = s.query("TopicA", "common", max_num=MAX_MSGS_NUM_BATCH)[0]
        assert offsets == [100 * i for i in range(100 - MAX_MSGS_NUM_BATCH, 100)]
        # past RocketMQ broker's default cap: as many as asked (a broker setting, not the format's)
        assert s.query("TopicA", "common", max_num=1000)[0] == [100 * i for i in range(100)]


def test_query_time_window(impl, tmp_path):
    with open_service(impl, tmp_path, items=8) as s:
        build(s, [record(i) for i in range(20)])
        hits = s.query("TopicA", "common", 64, T0 + 5000, T0 + 12000)[0]
        assert hits == [100 * i for i in range(5, 13)]
        assert s.query("TopicA", "common", 64, T0 + 19000)[0] == [1900]
        assert s.query("TopicA", "common", 64, 0, T0 - 1)[0] == []
        assert s.query("TopicA", "common", 64, T0 + 30000)[0] == []
        assert s.query("TopicA", "k4", 64, T0 + 5000)[0] == []


def test_rebuilding_already_indexed_records_adds_nothing(impl, tmp_path):
    with open_service(impl, tmp_path, items=8) as s:
        records = [record(i) for i in range(10)]
        build(s, records)
        assert not s.files[-1].is_full
        before = file_bytes(s)
        names = [f.name for f in s.files]
        assert build(s, records) == []
        assert s.build_many(records) is None
        assert [f.name for f in s.files] == names
        assert file_bytes(s) == before
        assert s.query("TopicA", "common", 64)[0] == [100 * i for i in range(10)]


def test_rollback_records_are_skipped(impl, tmp_path):
    with open_service(impl, tmp_path) as s:
        s.build_index("T", "rb", 0, T0, unique_key="U0", transaction_type=ROLLBACK)
        s.build_index("T", "rb2", 100, T0, transaction_type=ROLLBACK | 0x3)  # a whole sysFlag
        s.build_index("T", "prep", 200, T0, transaction_type=PREPARED)
        s.build_index("T", "commit", 300, T0, transaction_type=COMMIT)
        assert s.query("T", "rb")[0] == [] and s.query("T", "U0")[0] == []
        assert s.query("T", "rb2")[0] == []
        assert s.query("T", "prep")[0] == [200]
        assert s.query("T", "commit")[0] == [300]


def test_build_many_writes_the_same_bytes_as_build_index(impl, tmp_path, frozen_clock):
    rows = [record(i) + ((ROLLBACK if i % 7 == 3 else 0),) for i in range(60)]
    with (
        open_service(impl, tmp_path / "one", items=16) as one,
        open_service(impl, tmp_path / "many", items=16) as many,
    ):
        for topic, keys, phy, ts, uniq, tran in rows:
            one.build_index(topic, keys, phy, ts, unique_key=uniq, transaction_type=tran)
        many.build_many(rows[:25])
        many.build_many(rows[25:])
        assert [f.name for f in one.files] == [f.name for f in many.files]
        assert file_bytes(one) == file_bytes(many)


def test_twins_write_identical_files(tmp_path, frozen_clock):
    from rocketstore import _impl

    if _impl.COMPILED is None:
        pytest.skip("compiled modules not built")
    seed = random.randrange(2**32)
    print("seed", seed)
    rng = random.Random(seed)
    rows = []
    for i in range(200):
        keys = " ".join(f"key{rng.randrange(40)}" for _ in range(rng.randrange(4)))
        rows.append(("T", keys, 64 * i, T0 + rng.randrange(10**6), f"U{i}" if rng.random() < 0.5 else None))
    services = [open_service(_impl.get(name), tmp_path / name, items=32) for name in ("c", "py")]
    try:
        for s in services:
            s.build_many(rows)
        assert file_bytes(services[0]) == file_bytes(services[1])
        for k in range(40):
            assert services[0].query("T", f"key{k}", 64, 0) == services[1].query("T", f"key{k}", 64, 0)
    finally:
        for s in services:
            s.close()


def test_bad_rows_store_nothing(impl, tmp_path):
    with open_service(impl, tmp_path) as s:
        s.build_index("T", "a", 0, T0)
        before = file_bytes(s)
        with pytest.raises(TypeError):
            s.build_many([("T", "b", 100, T0), ("T", 5, 200, T0)])
        with pytest.raises(TypeError):
            s.build_many([("T", "b", 100, T0), ("T", "c", 200, T0, 7)])
        with pytest.raises(InvalidMessageError):
            s.build_many([("T", "b", 100, T0), ("T", "c", -1, T0)])
        with pytest.raises(TypeError):
            s.build_many([("T", "b")])
        assert file_bytes(s) == before


# -- load, reopen, abnormal shutdown ------------------------------------------------------------


def test_reopen_finds_everything(impl, tmp_path):
    with open_service(impl, tmp_path, items=8) as s:
        build(s, [record(i) for i in range(20)])
        names = [f.name for f in s.files]
    with open_service(impl, tmp_path, items=8) as s:
        assert [f.name for f in s.files] == names
        assert s.query("TopicA", "common", 64)[0] == [100 * i for i in range(20)]
        assert s.query("TopicA", "U13")[0] == [1300]
        # building continues where it stopped
        build(s, [record(i) for i in range(20, 25)])
        assert s.query("TopicA", "common", 64)[0] == [100 * i for i in range(25)]


def test_abnormal_load_drops_files_newer_than_the_checkpoint(impl, tmp_path):
    ends = []
    records = [record(i) for i in range(12)]
    with open_service(impl, tmp_path, items=8, on_file_full=ends.append) as s:
        build(s, records)
        names = [f.name for f in s.files]
    assert len(names) == 6 and len(ends) == 5
    checkpoint = ends[1]  # as if the checkpoint were written after the second roll
    with open_service(impl, tmp_path, items=8, abnormal=True, checkpoint=checkpoint) as s:
        assert [f.name for f in s.files] == names[:2]
        assert s.files[-1].end_timestamp == checkpoint
        assert sorted(os.listdir(tmp_path / "index")) == names[:2]
        # re-dispatch rebuilds the dropped entries, including the keys that had spilled from the
        # record at the kept file's end: that record is indexed again, so its keys that were
        # already in the kept file come back twice (as in Java; duplicates are only candidates)
        boundary = s.files[-1].end_phy_offset
        build(s, records)
        for key in ["common"] + [f"k{i}" for i in range(12)] + [f"U{i}" for i in range(12)]:
            offsets = s.query("TopicA", key, 64)[0]
            expected = [100 * i for i in range(12)] if key == "common" else [100 * int(key[1:])]
            assert sorted(set(offsets)) == expected
            assert all(offsets.count(o) == 1 for o in offsets if o != boundary)
    with open_service(impl, tmp_path, items=8) as s:  # a normal load keeps every file
        assert sorted(set(s.query("TopicA", "common", 64)[0])) == [100 * i for i in range(12)]


def _garble_header_and_slots(path, rng):
    """What a power cut can leave of the pages written after the last msync."""
    with open(path, "r+b") as f:
        f.write(rng.randbytes(40 + 4 * SLOTS))


@pytest.mark.parametrize("garble", [False, True], ids=["killed", "power-cut"])
def test_abnormal_load_rolls_the_newest_file_back_to_its_resume_point(impl, tmp_path, garble):
    records = [record(i) for i in range(40)]  # 3 keys each: 120 items, one file of 128
    with open_service(impl, tmp_path) as s:
        build(s, records[:30])
        s.flush()
        s.save_resume_point()
        saved = s.files[-1]
        header = (
            saved.begin_timestamp,
            saved.end_timestamp,
            saved.begin_phy_offset,
            saved.end_phy_offset,
            saved.index_count,
        )
        build(s, records[30:])  # after the resume point: not durable
        name = saved.name
        assert s.files[-1].index_count == 121
    if garble:
        _garble_header_and_slots(tmp_path / "index" / name, random.Random(7))
    with open_service(impl, tmp_path, abnormal=True, checkpoint=0) as s:
        assert [f.name for f in s.files] == [name]  # kept, not deleted and rebuilt
        f = s.files[-1]
        assert (
            (f.begin_timestamp, f.end_timestamp, f.begin_phy_offset, f.end_phy_offset, f.index_count)
            == header
            == (T0, T0 + 29_000, 0, 2900, 91)
        )
        assert s.query("TopicA", "common", 64)[0] == [100 * i for i in range(30)]
        for i in range(40):
            expected = [100 * i] if i < 30 else []
            assert s.query("TopicA", f"U{i}")[0] == expected
            assert s.query("TopicA", f"k{i}")[0] == expected
        build(s, records)  # re-dispatch: only the lost records are added
        assert s.query("TopicA", "common", 64)[0] == [100 * i for i in range(40)]
        for i in range(40):
            assert s.query("TopicA", f"U{i}")[0] == [100 * i]
            assert s.query("TopicA", f"k{i}")[0] == [100 * i]


def test_a_resume_point_saved_when_the_file_was_exactly_full_is_used(impl, tmp_path, caplog):
    records = [record(i) for i in range(40)]
    with open_service(impl, tmp_path, items=91) as s:  # 30 records x 3 keys fill it exactly
        build(s, records[:30])
        assert s.files[-1].is_full
        s.flush()
        s.save_resume_point()
        name = s.files[-1].name
    with open_service(impl, tmp_path, items=91, abnormal=True, checkpoint=0) as s:
        assert [f.name for f in s.files] == [name]
        assert s.query("TopicA", "U29")[0] == [2900]
    assert "ignoring the index resume point" not in caplog.text


def test_a_resume_point_that_does_not_match_the_file_is_ignored(impl, tmp_path):
    with open_service(impl, tmp_path) as s:
        build(s, [record(i) for i in range(30)])
        s.flush()
        s.save_resume_point()
        path = s.files[-1].path
        item = 40 + 4 * SLOTS + 90 * 20  # the last of 90 items (3 keys a record)
    with open(path, "r+b") as f:  # the saved last item is not what the file holds
        f.seek(item)
        f.write(bytes(20))
    with open_service(impl, tmp_path, abnormal=True, checkpoint=0) as s:
        assert s.files == []  # the old rule: a file not full goes
    (tmp_path / "indexResume").write_text("{not json")
    with open_service(impl, tmp_path, abnormal=True, checkpoint=0) as s:
        assert s.files == []


def test_load_ignores_other_names_and_rejects_a_wrong_size(impl, tmp_path):
    with open_service(impl, tmp_path) as s:
        s.build_index("T", "a", 0, T0)
        name = s.files[0].name
    (tmp_path / "index" / "README").write_text("not an index file")
    (tmp_path / "index" / "2023111422132000").write_bytes(b"x")  # 16 digits
    with open_service(impl, tmp_path) as s:
        assert [f.name for f in s.files] == [name]
    bad = tmp_path / "index" / "20991231235959999"
    bad.write_bytes(bytes(100))
    s = IndexService(tmp_path, implementation=impl.name, slot_count=SLOTS, index_count=ITEMS)
    with pytest.raises(StoreConfigError, match="20991231235959999"):
        s.load()
    with pytest.raises(StoreConfigError, match=name):  # other sizes: every file is wrong
        open_service(impl, tmp_path, items=ITEMS * 2)


def test_an_empty_last_file_from_a_crashed_creation_is_removed(impl, tmp_path):
    with open_service(impl, tmp_path) as s:
        s.build_index("T", "a", 0, T0)
    torn = tmp_path / "index" / "20991231235959999"
    torn.write_bytes(b"")
    with open_service(impl, tmp_path, read_only=True) as s:
        assert len(s.files) == 1
        assert torn.exists()
    with open_service(impl, tmp_path) as s:
        assert len(s.files) == 1 and not torn.exists()


def test_file_names_are_creation_times_sorted_and_unique(impl, tmp_path, monkeypatch):
    before = int(time.time() * 1000)
    with open_service(impl, tmp_path, items=8) as s:
        build(s, [record(i) for i in range(10)])
        after = int(time.time() * 1000)
        names = [f.name for f in s.files]
        assert len(names) >= 3
        assert names == sorted(names) and len(set(names)) == len(names)
        assert sorted(os.listdir(tmp_path / "index")) == names
        created = [impl.index.parse_index_file_name(n) for n in names]
        assert before <= created[0] and created[-1] <= after + len(names)
        assert all(f.file_size == impl.index.index_file_size(SLOTS, 8) for f in s.files)
    # a clock stuck at (or set back before) the last name still gives later, unique names
    monkeypatch.setattr(indexservice, "now_ms", lambda: before - 86_400_000)
    with open_service(impl, tmp_path, items=8) as s:
        build(s, [record(i) for i in range(10, 20)])
        more = [f.name for f in s.files]
        assert more[: len(names)] == names and len(more) > len(names)
        assert more == sorted(more) and len(set(more)) == len(more)


def test_frozen_clock_bumps_names_by_one_millisecond(impl, tmp_path, frozen_clock):
    with open_service(impl, tmp_path, items=8) as s:
        build(s, [record(i) for i in range(10)])
        created = [impl.index.parse_index_file_name(f.name) for f in s.files]
        assert created == [frozen_clock + i for i in range(len(created))]


# -- deletion, read-only, lifetime ----------------------------------------------------------------


def test_delete_expired_deletes_from_the_front_and_keeps_the_last_file(impl, tmp_path):
    with open_service(impl, tmp_path, items=8) as s:
        build(s, [record(i) for i in range(10)])
        files = s.files
        assert len(files) == 5
        assert s.delete_expired(files[0].end_phy_offset) == 0  # not below: kept
        assert s.delete_expired(files[1].end_phy_offset + 1) == 2
        assert [f.name for f in s.files] == [f.name for f in files[2:]]
        assert s.delete_expired(10**12) == 2
        assert [f.name for f in s.files] == [files[-1].name]
        assert sorted(os.listdir(tmp_path / "index")) == [files[-1].name]
        assert s.query("TopicA", "k9")[0] == [900]


def test_read_only_open_queries_and_never_writes(impl, tmp_path):
    ends = []
    with open_service(impl, tmp_path, items=8, on_file_full=ends.append) as s:
        build(s, [record(i) for i in range(10)])
    (tmp_path / "index" / "20991231235959999").write_bytes(b"")  # would be removed by a writer
    snapshot = index_dir_snapshot(str(tmp_path))
    time.sleep(0.01)
    # abnormal with an old checkpoint: a writer would delete files; a reader keeps them all
    with open_service(impl, tmp_path, items=8, read_only=True, abnormal=True, checkpoint=0) as s:
        assert len(s.files) == 5
        assert s.query("TopicA", "common", 64)[0] == [100 * i for i in range(10)]
        with pytest.raises(StoreReadOnlyError):
            s.build_index("TopicA", "x", 10**6, T0)
        with pytest.raises(StoreReadOnlyError):
            s.delete_expired(10**12)
        with pytest.raises(StoreReadOnlyError):
            s.destroy()
        assert s.flush() is False
        assert not s.files[0].index.writable
    assert index_dir_snapshot(str(tmp_path)) == snapshot


def test_read_only_open_of_a_missing_directory_is_empty(impl, tmp_path):
    with open_service(impl, tmp_path, read_only=True) as s:
        assert s.files == [] and s.query("T", "k") == ([], 0, 0)
    assert not (tmp_path / "index").exists()


def test_flush_close_and_destroy(impl, tmp_path):
    s = open_service(impl, tmp_path)
    assert s.flush() is False
    s.build_index("T", "a", 0, T0)
    assert s.flush() is True and s.flush() is False
    s.destroy()
    assert s.files == [] and not (tmp_path / "index").exists()
    s.build_index("T", "b", 100, T0)  # still usable after destroy
    assert s.query("T", "b")[0] == [100]
    s.close()
    s.close()
    with pytest.raises(StoreClosedError):
        s.query("T", "b")
    with pytest.raises(StoreClosedError):
        s.build_index("T", "c", 200, T0)


def test_build_before_load_is_refused(impl, tmp_path):
    s = IndexService(tmp_path, implementation=impl.name, slot_count=SLOTS, index_count=ITEMS)
    with pytest.raises(RuntimeError, match="load"):
        s.build_index("T", "a", 0, T0)
    s.load()
    with pytest.raises(RuntimeError, match="already"):
        s.load()
    s.close()


@pytest.mark.parametrize("kwargs", [{"slot_count": 0}, {"index_count": 1}, {"index_count": 2**31}])
def test_bad_sizes_raise_store_config_error(impl, tmp_path, kwargs):
    with pytest.raises(StoreConfigError):
        IndexService(tmp_path, implementation=impl.name, **kwargs)


def test_corrupt_files_are_queried_in_bounded_work(impl, tmp_path):
    seed = random.randrange(2**32)
    print("seed", seed)
    rng = random.Random(seed)
    with open_service(impl, tmp_path, items=ITEMS) as s:
        build(s, [record(i) for i in range(50)])
        paths = [f.path for f in s.files]
    for path in paths:
        data = bytearray(pathlib.Path(path).read_bytes())
        for _ in range(200):
            data[rng.randrange(len(data))] = rng.randrange(256)
        data[36:40] = rng.choice([b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", bytes(4)])
        pathlib.Path(path).write_bytes(bytes(data))
    with open_service(impl, tmp_path, items=ITEMS) as s:
        for i in range(50):
            offsets, _, _ = s.query("TopicA", f"k{i}", 64)
            assert len(offsets) <= 64
        assert len(s.query("TopicA", "common", 1000)[0]) <= MAX_MSGS_NUM_BATCH


# -- the real default size ------------------------------------------------------------------------


def test_default_sized_file_is_sparse(impl, tmp_path):
    with IndexService(tmp_path, implementation=impl.name) as s:
        s.load(False, 0)
        for i in range(5):
            s.build_index("TopicTest", f"OrderID{i:03d} shared", 1000 * i, T0 + i, unique_key=f"UNIQ{i}")
        assert s.query("TopicTest", "OrderID003")[0] == [3000]
        assert s.query("TopicTest", "UNIQ4")[0] == [4000]
        assert s.query("TopicTest", "shared")[0] == [0, 1000, 2000, 3000, 4000]
        s.flush()
        (f,) = s.files
        st = os.stat(f.path)
        assert st.st_size == 420_000_040 == impl.index.index_file_size()
        # header and slot table allocated up front (20 MB: no SIGBUS on a full disk), the
        # 400 MB items region only as far as it is written
        assert 20_000_040 <= st.st_blocks * 512 < 24 * 1024 * 1024
    with IndexService(tmp_path, implementation=impl.name, read_only=True) as s:
        s.load(False, 0)
        assert s.query("TopicTest", "OrderID000")[0] == [0]


def test_queries_run_while_another_thread_builds_and_deletes(impl, tmp_path):
    import threading

    errors = []
    with open_service(impl, tmp_path, items=16) as s:

        def writer():
            try:
                for i in range(300):
                    s.build_index(*record(i)[:4], unique_key=record(i)[4])
                    if i % 50 == 49:
                        s.delete_expired(100 * (i - 60))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        thread = threading.Thread(target=writer)
        thread.start()
        while thread.is_alive():
            offsets = s.query("TopicA", "common", 64)[0]
            assert offsets == sorted(offsets) and len(offsets) <= 64
        thread.join()
        assert not errors
        assert s.query("TopicA", "U299")[0] == [29900]
        assert len(s.files) >= 2
