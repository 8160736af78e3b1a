"""A read-only store writes nothing, anywhere under its directory: a session that does everything
a reader can (point reads, pulls and waits, consumers, consumer groups, iteration, scans, stats,
verify, the writes it is refused) leaves the directory tree byte for byte as it was, its mtimes
included, and creates no file. A group on a read-only store keeps its membership and offsets in
memory (shared by the members in this process), or in a ``state_dir`` the user names outside
the store. Both twins."""

import hashlib
import os

import pytest

from rocketstore import Consumer, GroupConsumer, MessageStore
from rocketstore.errors import StoreReadOnlyError

OPTIONS = {"commitlog_file_size": 64 * 1024, "consume_queue_units": 64}


def _make(root, impl, group_files):
    with MessageStore(root, implementation=impl.name, **OPTIONS) as store:
        store.create_topic("T", 2)
        for i in range(40):
            store.put("T", b"body%d" % i, keys="k%d" % i, tags="even" if i % 2 == 0 else "odd")
        store.put("U", b"u")
        if group_files:  # the group committed in a writable session: its files exist
            with GroupConsumer(store, "g", "T", retry=False) as member:
                assert len(member.poll(6)) == 6
                member.commit()
        store.commit_offset("plain", "T", 0, 3)


def _tree(root):
    """{relative path: (kind, size, mtime_ns, sha256)} of every entry under ``root``."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            digest = ""
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(path, root)] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    st = os.stat(root)
    out["."] = (st.st_mode, st.st_size, st.st_mtime_ns, "")
    return out


def _reader_session(store):
    """Everything a reader can do."""
    m = store.get_by_queue_offset("T", 0, 0)
    assert store.read(m.commitlog_offset).body == m.body
    assert store.get_by_msg_id(m.msg_id).body == m.body
    assert [x.body for x in store.query_by_key("T", "k5")] == [b"body5"]
    got = store.get_message("reader", "T", 1, 0, max_msgs=8, tags="odd")
    assert got.messages
    end = store.max_queue_offset("T", 0)
    store.get_message("reader", "T", 0, end, wait=0.05)  # a pull that waits for a put
    assert sum(1 for _ in store.iter_messages()) == 41
    assert sum(len(rows) for _, rows in store.scan()) == 41
    store.stats()
    assert store.verify()["ok"]
    store.queues()
    store.committed_offset("plain", "T", 0)
    consumer = Consumer(store, "plain", "T")
    assert len(consumer.poll(100)) == 37  # from the committed offset 3 of queue 0 on
    consumer.poll(10, timeout=0.05)  # waits
    with pytest.raises(StoreReadOnlyError):
        consumer.commit()
    a = GroupConsumer(store, "g", "T", commit_interval=0)
    b = GroupConsumer(store, "g", "T", commit_interval=0)
    first = a.poll(100) + b.poll(100) + a.poll(100) + b.poll(100)
    a.commit()
    b.commit()
    a.poll(10, timeout=0.05)  # waits, beating
    a.close()
    b.close()
    c = GroupConsumer(store, "g", "T")
    assert c.poll(100) == []  # the group's offsets, in memory, carry on from a's and b's commits
    c.close()
    broadcast = GroupConsumer(store, "g", "T", broadcasting=True, instance="one", retry=False)
    assert len(broadcast.poll(100)) == 40
    broadcast.commit()
    broadcast.close()
    with pytest.raises(StoreReadOnlyError):
        store.put("T", b"no")
    with pytest.raises(StoreReadOnlyError):
        store.receive("pop", "T")
    with pytest.raises(StoreReadOnlyError):
        store.commit_offset("plain", "T", 0, 5)
    return first


@pytest.mark.parametrize("group_files", [False, True], ids=["no-group-files", "group-files"])
def test_a_read_only_session_leaves_the_store_byte_for_byte_as_it_was(tmp_path, impl, group_files):
    root = tmp_path / "s"
    _make(root, impl, group_files)
    before = _tree(root)
    with MessageStore(root, implementation=impl.name, read_only=True, **OPTIONS) as store:
        first = _reader_session(store)
    # a group's committed offsets (its files, read only) are where a read-only group starts
    assert len(first) == (40 - 6 if group_files else 40)
    assert _tree(root) == before


def test_a_read_only_group_keeps_its_offsets_in_memory_for_the_members_of_this_process(tmp_path, impl):
    root = tmp_path / "s"
    _make(root, impl, group_files=False)
    with MessageStore(root, implementation=impl.name, read_only=True, **OPTIONS) as store:
        a = GroupConsumer(store, "g", "T", retry=False)
        b = GroupConsumer(store, "g", "T", retry=False)
        assert a.members() == b.members() and len(a.members()) == 2
        got = a.poll(100) + b.poll(100) + a.poll(100) + b.poll(100)
        assert sorted(m.body for m in got) == sorted(b"body%d" % i for i in range(40))
        a.close()
        b.close()
        with MessageStore(root, implementation=impl.name, read_only=True, **OPTIONS) as other:
            # another store object of the same directory in this process: the same group
            again = GroupConsumer(other, "g", "T", retry=False)
            assert again.poll(100) == []
            again.close()
    with MessageStore(root, implementation=impl.name, **OPTIONS) as store:
        assert not (root / "rocketstore-groups").exists()
        assert store.committed_offset("g", "T", 0) == -1


def test_a_read_only_group_keeps_its_files_in_a_state_dir_the_user_names(tmp_path, impl):
    root = tmp_path / "s"
    _make(root, impl, group_files=True)
    state = tmp_path / "state"
    before = _tree(root)
    with MessageStore(root, implementation=impl.name, read_only=True, **OPTIONS) as store:
        with pytest.raises(StoreReadOnlyError):
            GroupConsumer(store, "g", "T", state_dir=root / "mine")  # inside the store
        member = GroupConsumer(store, "g", "T", retry=False, state_dir=state)
        assert len(member.poll(100)) == 40  # its own files: no commit yet
        member.close()
        assert sorted(os.listdir(state)) == ["g.members", "g.offsets.json"]
        member = GroupConsumer(store, "g", "T", retry=False, state_dir=state)
        assert member.poll(100) == []
        member.close()
    assert _tree(root) == before
