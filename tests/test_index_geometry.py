"""Index files of any slot and item counts (not only RocketMQ's 4 items per slot) are detected
when a store is opened without ``index_slots`` / ``index_count``."""

import os

import pytest

from rocketstore import MessageStore
from rocketstore.queues.indexservice import detect_index_geometry

SEGMENT = 64 * 1024


@pytest.mark.parametrize("slots, count", [(16, 100), (7, 13), (50, 60), (3, 40)])
def test_index_files_of_another_ratio_are_detected(tmp_path, impl, slots, count):
    path = tmp_path / "store"
    with MessageStore(
        path, implementation=impl.name, commitlog_file_size=SEGMENT, index_slots=slots, index_count=count
    ) as s:
        for i in range(150):
            s.put("T", b"m%d" % i, keys="k%d shared" % i)
    files = sorted(os.listdir(path / "index"))
    assert len(files) > 1
    assert detect_index_geometry(str(path)) == (slots, count)
    for read_only in (True, False):
        with MessageStore(path, implementation=impl.name, read_only=read_only) as s:
            assert s.query_by_key("T", "k149")[0].body == b"m149"
            assert s.query_by_key("T", "k3")[0].body == b"m3"
            assert len(s.query_by_key("T", "shared", max_num=64)) == 64
            assert s.verify()["ok"]
            if not read_only:
                s.put("T", b"later", keys="k-later")
                assert s.query_by_key("T", "k-later")[0].body == b"later"


def test_an_index_file_whose_last_key_is_at_offset_zero_is_detected(tmp_path, impl):
    path = tmp_path / "store"
    with MessageStore(
        path, implementation=impl.name, commitlog_file_size=SEGMENT, index_slots=9, index_count=50
    ) as s:
        s.put("T", b"first", keys="a b c")
    assert detect_index_geometry(str(path)) == (9, 50)
    with MessageStore(path, implementation=impl.name, read_only=True) as s:
        assert s.query_by_key("T", "b")[0].body == b"first"
