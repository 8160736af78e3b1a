"""Opening the store a Java RocketMQ 4.x broker wrote (a CommitLog without consumequeue/ or index/):
a writable open dispatches the missing queues and index (spec §4.2, §5.4, §7); a read-only open
answers the same queries from memory and writes nothing."""

import os
import shutil
import socket
import stat
import struct

from rocketstore import GetMessageStatus, MessageStore
from rocketstore.format._codec_py import java_hash

S = GetMessageStatus
BODY = b"Once, there was a chance for me!"
COUNT = 47
SIZE = 172
STORE_HOST, STORE_PORT = "192.168.71.1", 8123
UNIT = struct.Struct(">qiq")
CQ_FILE = os.path.join("consumequeue", "abc", "0", "00000000000000000000")


def writable_copy(java_store, tmp_path):
    """A copy of the Java store we may write to (the checked-in files are read-only)."""
    dst = tmp_path / "java-store"
    shutil.copytree(java_store, dst)
    for root, dirs, files in os.walk(dst):
        for name in dirs + files:
            p = os.path.join(root, name)
            os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR)
    os.chmod(dst, os.stat(dst).st_mode | stat.S_IWUSR)
    return dst


def expected_msg_id(offset):
    return (
        (socket.inet_aton(STORE_HOST) + STORE_PORT.to_bytes(4, "big") + offset.to_bytes(8, "big"))
        .hex()
        .upper()
    )


def snapshot(root):
    """Every path under root with its type, mode, mtime and (for files) bytes."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames + ["."]:
            p = os.path.normpath(os.path.join(dirpath, name))
            st = os.lstat(p)
            data = None
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    data = f.read()
            out[os.path.relpath(p, root)] = (
                stat.S_IFMT(st.st_mode),
                st.st_mode,
                st.st_mtime_ns,
                st.st_size,
                data,
            )
    return out


def keys_by_message(store):
    """{KEYS value: [commitlog offsets]} of the Java messages, from a CommitLog scan."""
    table = {}
    for m in store.iter_messages():
        table.setdefault(m.keys, []).append(m.commitlog_offset)
    return table


def pull_all(store, tags, status):
    """Pull queue abc-0 from offset 0 to its end; every pull must answer ``status``."""
    messages, codes, offset = [], [], 0
    while offset < COUNT:
        r = store.get_message("g", "abc", 0, offset=offset, max_msgs=64, tags=tags)
        assert r.status is status and r.next_begin_offset > offset
        messages += r.messages
        codes += r.units["tags_code"].tolist()
        offset = r.next_begin_offset
    assert offset == COUNT
    return messages, codes


def check_answers(store):
    """The queries every open of the Java store must answer the same way."""
    assert store.min_queue_offset("abc", 0) == 0
    assert store.max_queue_offset("abc", 0) == COUNT
    for q in range(COUNT):
        m = store.get_by_queue_offset("abc", 0, q)
        assert (m.commitlog_offset, m.queue_offset, m.size, m.body) == (SIZE * q, q, SIZE, BODY)
        assert m.store_host == (STORE_HOST, STORE_PORT)
    by_key = keys_by_message(store)
    assert sum(len(v) for v in by_key.values()) == COUNT
    assert any(len(v) > 1 for v in by_key.values())  # several messages share a key
    for key, offs in by_key.items():
        found = store.query_by_key("abc", key)
        assert [m.commitlog_offset for m in found] == offs, key
        assert all(m.keys == key for m in found)
        assert store.query_by_key("abd", key) == []
    for q in range(COUNT):
        msg_id = expected_msg_id(SIZE * q)
        assert msg_id.startswith("C0A8470100001FBB")  # 192.168.71.1 : 8123
        m = store.get_by_msg_id(msg_id)
        assert m.commitlog_offset == SIZE * q and m.msg_id == msg_id
    found, codes = pull_all(store, None, S.FOUND)
    assert [m.commitlog_offset for m in found] == [SIZE * q for q in range(COUNT)]
    assert codes == [java_hash("TAG1")] * COUNT
    assert len(pull_all(store, "TAG1", S.FOUND)[0]) == COUNT
    assert pull_all(store, "TAG2", S.NO_MATCHED_MESSAGE)[0] == []
    assert store.get_message("g", "abc", 0, offset=COUNT).status is S.OFFSET_OVERFLOW_ONE
    assert store.get_message("g", "abc", 1, offset=0).status in (
        S.NO_MATCHED_LOGIC_QUEUE,
        S.NO_MESSAGE_IN_QUEUE,
    )


def expected_units():
    return b"".join(UNIT.pack(SIZE * q, SIZE, java_hash("TAG1")) for q in range(COUNT))


# -- writable open --------------------------------------------------------------------------------


def test_writable_open_dispatches_the_java_commitlog_into_a_consume_queue(java_store, tmp_path, impl):
    path = writable_copy(java_store, tmp_path)
    assert not (path / "consumequeue").exists() and not (path / "index").exists()
    with MessageStore(path, implementation=impl.name) as s:
        cq = path / CQ_FILE
        assert cq.is_file()  # dispatched on open
        data = cq.read_bytes()
        assert data[: COUNT * 20] == expected_units()
        assert data[COUNT * 20 : (COUNT + 1) * 20] == bytes(20)
        assert (path / "index").is_dir() and len(os.listdir(path / "index")) >= 1
        check_answers(s)
    data = (path / CQ_FILE).read_bytes()
    assert data[: COUNT * 20] == expected_units() and data[COUNT * 20 :] == bytes(len(data) - COUNT * 20)


def test_writable_open_with_small_queue_files(java_store, tmp_path, impl):
    path = writable_copy(java_store, tmp_path)
    with MessageStore(
        path, implementation=impl.name, consume_queue_units=16, index_slots=8, index_count=16
    ) as s:
        check_answers(s)
    names = sorted(os.listdir(path / "consumequeue" / "abc" / "0"))
    assert names == [f"{16 * 20 * k:020d}" for k in range(3)]  # 47 units in files of 16
    data = b"".join((path / "consumequeue" / "abc" / "0" / n).read_bytes() for n in names)
    assert data[: COUNT * 20] == expected_units() and data[COUNT * 20 :] == bytes(20)
    assert len(os.listdir(path / "index")) >= 47 // 15  # 47 keys, 15 items per file


def test_reopen_of_the_rebuilt_java_store_dispatches_nothing_twice(java_store, tmp_path, impl):
    path = writable_copy(java_store, tmp_path)
    with MessageStore(path, implementation=impl.name):
        pass
    for _ in range(2):
        with MessageStore(path, implementation=impl.name) as s:
            check_answers(s)
    data = (path / CQ_FILE).read_bytes()
    assert data[: COUNT * 20] == expected_units() and data[COUNT * 20 :] == bytes(len(data) - COUNT * 20)


def test_puts_after_the_rebuild_continue_the_java_queue(java_store, tmp_path, impl):
    path = writable_copy(java_store, tmp_path)
    with MessageStore(path, implementation=impl.name, store_host="10.0.0.7", store_port=10911) as s:
        r = s.put("abc", b"from python", tags="TAG1", keys="py-key", queue_id=0)
        assert r.queue_offset == COUNT
        assert r.commitlog_offset == 8192  # the Java segment ends with a BLANK
        assert s.max_queue_offset("abc", 0) == COUNT + 1
        assert s.get_by_queue_offset("abc", 0, COUNT).body == b"from python"
        assert [m.body for m in s.query_by_key("abc", "py-key")] == [b"from python"]
        got = s.get_message("g", "abc", 0, offset=COUNT - 1)
        assert [m.body for m in got.messages] == [BODY, b"from python"]
    with MessageStore(path, implementation=impl.name) as s:
        assert s.max_queue_offset("abc", 0) == COUNT + 1
        check_answers_prefix = [s.get_by_queue_offset("abc", 0, q).commitlog_offset for q in range(COUNT + 1)]
        assert check_answers_prefix == [SIZE * q for q in range(COUNT)] + [8192]


# -- read-only open -------------------------------------------------------------------------------


def test_read_only_open_answers_everything_and_writes_nothing(java_store, tmp_path, impl):
    path = writable_copy(java_store, tmp_path)
    before = snapshot(path)
    with MessageStore(path, read_only=True, implementation=impl.name) as s:
        check_answers(s)
        assert s.committed_offset("g", "abc", 0) == -1
    after = snapshot(path)
    assert after == before
    assert not (path / "consumequeue").exists() and not (path / "index").exists()


def test_read_only_open_with_small_index_files_rolls_in_memory(java_store, tmp_path, impl):
    path = writable_copy(java_store, tmp_path)
    before = snapshot(path)
    with MessageStore(
        path, read_only=True, implementation=impl.name, consume_queue_units=16, index_slots=8, index_count=16
    ) as s:
        check_answers(s)
    assert snapshot(path) == before


def test_read_only_open_of_a_rebuilt_copy_reads_the_files_and_writes_nothing(java_store, tmp_path, impl):
    path = writable_copy(java_store, tmp_path)
    with MessageStore(path, implementation=impl.name):
        pass
    before = snapshot(path)
    with MessageStore(path, read_only=True, implementation=impl.name) as s:
        check_answers(s)
    assert snapshot(path) == before
