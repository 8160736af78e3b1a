"""Attack: the store's own small files replaced by something else (a dangling symlink, a
directory, a FIFO) before an open. The open refuses with a typed StoreConfigError, or opens and
reads every message right; never a bare OSError, and nothing in place of the file is touched."""

import os

import pytest

from rocketstore import MessageStore
from rocketstore.errors import StoreConfigError
from rocketstore.log import sharedappend

OPTIONS = {"commitlog_file_size": 64 * 1024, "consume_queue_units": 64}


def _make(root, impl):
    with MessageStore(root, implementation=impl.name, **OPTIONS) as store:
        for i in range(8):
            store.put("T", b"body%d" % i, keys="k%d" % i, queue_id=i % 2)


def _read_all(root, impl, read_only):
    with MessageStore(root, implementation=impl.name, read_only=read_only, **OPTIONS) as store:
        for i in range(8):
            m = store.get_by_queue_offset("T", i % 2, i // 2)
            assert (m.topic, m.queue_id, m.queue_offset, m.body) == ("T", i % 2, i // 2, b"body%d" % i)


def _dangling(path):
    if os.path.lexists(path):
        os.unlink(path)
    os.symlink(os.path.join(os.path.dirname(path), "nowhere", "x"), path)


@pytest.mark.parametrize("name", ["abort", "checkpoint", "lock"])
def test_a_dangling_symlink_in_place_of_a_state_file_is_refused_typed(tmp_path, impl, name):
    root = tmp_path / "s"
    _make(root, impl)
    path = str(root / name)
    _dangling(path)
    with pytest.raises(StoreConfigError, match="symlink"):
        MessageStore(root, implementation=impl.name, **OPTIONS)
    assert os.path.islink(path) and not os.path.exists(os.path.dirname(os.readlink(path)))
    os.unlink(path)
    _read_all(root, impl, read_only=False)


@pytest.mark.parametrize("kind", ["dir", "fifo", "symlink_loop", "dangling"])
def test_something_else_in_place_of_the_shared_append_table_is_refused_typed(tmp_path, impl, kind):
    if not sharedappend.supported():
        pytest.skip("no shared append table on this platform")
    root = tmp_path / "s"
    _make(root, impl)
    path = str(root / sharedappend.APPEND_NAME)
    if kind == "dir":
        os.mkdir(path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink_loop":
        os.symlink(path, path)
    else:
        _dangling(path)
    before = os.lstat(path)
    with pytest.raises(StoreConfigError, match="not a regular file"):
        MessageStore(root, implementation=impl.name, **OPTIONS)
    after = os.lstat(path)
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
    _read_all(root, impl, read_only=True)  # a read-only open does not use the table


@pytest.mark.parametrize("damage", [b"", b"garbage" * 10, b"\0" * 4096])
def test_a_damaged_shared_append_table_of_the_wrong_size_is_harmless(tmp_path, impl, damage):
    if not sharedappend.supported():
        pytest.skip("no shared append table on this platform")
    root = tmp_path / "s"
    _make(root, impl)
    (root / sharedappend.APPEND_NAME).write_bytes(damage)
    _read_all(root, impl, read_only=False)
    with MessageStore(root, implementation=impl.name, **OPTIONS) as store:
        store.put("T", b"after", queue_id=0)
        assert store.get_by_queue_offset("T", 0, 4).body == b"after"


@pytest.mark.parametrize("read_only", [False, True])
def test_an_emptied_consume_queue_file_loses_no_message(tmp_path, impl, read_only):
    """A ConsumeQueue file cut to 0 bytes (a copy that stopped short, a power cut before its
    pages reached the disk) while later records of another topic follow in the CommitLog."""
    root = tmp_path / "s"
    with MessageStore(root, implementation=impl.name, **OPTIONS) as store:
        for i in range(5):
            store.put("T", b"m%d" % i, queue_id=0)
        store.put("U", b"u")
    (root / "consumequeue" / "T" / "0" / "00000000000000000000").write_bytes(b"")
    with MessageStore(root, implementation=impl.name, read_only=read_only, **OPTIONS) as store:
        assert store.max_queue_offset("T", 0) == 5
        assert [store.get_by_queue_offset("T", 0, i).body for i in range(5)] == [b"m%d" % i for i in range(5)]
        if read_only:  # mended in memory only: verify() says what the disk lacks
            report = store.verify()
            assert not report["ok"]
            assert any("ConsumeQueue T-0" in p["reason"] for p in report["problems"]), report


@pytest.mark.parametrize("read_only", [False, True])
def test_files_an_os_leaves_in_every_directory_are_ignored_and_left_alone(tmp_path, impl, read_only):
    """macOS Finder's .DS_Store and ._* files, NFS's .nfs* files (a deleted file still open):
    a Java broker would refuse such a commitlog/; a store opens, reads, and touches none."""
    root = tmp_path / "s"
    root.mkdir()
    (root / ".DS_Store").write_bytes(b"finder")  # an empty folder a file browser looked at
    with MessageStore(root, implementation=impl.name, **OPTIONS) as store:
        store.put("T", b"x", keys="k", queue_id=0)
    litter = []
    for sub in ("", "commitlog", "consumequeue", "consumequeue/T", "consumequeue/T/0", "index", "config"):
        for name in (".DS_Store", "._00000000000000000000", ".nfs000000000001"):
            path = root / sub / name
            path.write_bytes(b"litter")
            litter.append(path)
    with MessageStore(root, implementation=impl.name, read_only=read_only, **OPTIONS) as store:
        assert store.get_by_queue_offset("T", 0, 0).body == b"x"
        assert [m.body for m in store.query_by_key("T", "k")] == [b"x"]
        assert store.verify()["ok"]
    assert all(p.read_bytes() == b"litter" for p in litter)


def test_a_foreign_file_in_commitlog_still_makes_it_not_a_store(tmp_path, impl):
    from rocketstore.errors import NotAStoreError

    root = tmp_path / "s"
    with MessageStore(root, implementation=impl.name, **OPTIONS) as store:
        store.put("T", b"x")
    (root / "commitlog" / "notes.txt").write_bytes(b"mine")
    with pytest.raises(NotAStoreError):
        MessageStore(root, implementation=impl.name, **OPTIONS)
