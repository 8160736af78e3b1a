"""The store's own runtime files (the live page ``rocketstore-live``, the shared append table
``rocketstore-append``, a group's members file) are never durable state: a power cut, a careless
copy or a person can leave one zeroed, cut short, full of random bytes or with another magic.
When no live process holds the store, an open rebuilds such a file (and logs it) instead of
refusing the store, and a read-only open reads the store as if the file were absent, writing
nothing. Both twins; after a crash (the abort file present) and after a clean close."""

import logging
import os
import random
import struct
import subprocess
import sys
import textwrap

import pytest
from crash_harness import hold_by_a_dead_thread

import rocketstore
from rocketstore import GroupConsumer, MessageStore
from rocketstore.log import sharedappend
from rocketstore.processes.live import LIVE_NAME, LIVE_SIZE

OPTIONS = {"commitlog_file_size": 64 * 1024, "consume_queue_units": 64}
SRC = os.path.dirname(os.path.dirname(os.path.abspath(rocketstore.__file__)))

#: Each runtime file: (its name, the size it has when whole, its magic's bytes at 0).
RUNTIME_FILES = {
    "live": (LIVE_NAME, LIVE_SIZE, b"RSLIVE\x00\x01"),
    "append": (sharedappend.APPEND_NAME, sharedappend.SIZE, struct.pack("<Q", sharedappend.MAGIC)),
}
DAMAGES = ["zeroed", "truncated", "random", "wrong-magic", "too-long"]


def _make(root, impl):
    with MessageStore(root, implementation=impl.name, **OPTIONS) as store:
        for i in range(8):
            store.put("T", b"body%d" % i, keys="k%d" % i, queue_id=i % 2)


def _damage(path, size, magic, damage, rng):
    """Leave at ``path`` a runtime file of whole size ``size`` damaged as ``damage`` says."""
    head = magic + bytes(4096 - len(magic))
    if damage == "zeroed":
        data = bytes(4096)
    elif damage == "truncated":
        data = head[: rng.randrange(1, 64)]
    elif damage == "random":
        data = rng.randbytes(4096)
    elif damage == "wrong-magic":
        data = b"XX" + head[2:]
    else:  # too long: the page and more
        data = head + rng.randbytes(4096)
    with open(path, "wb") as f:
        f.write(data)
        if damage in ("zeroed", "random", "wrong-magic"):
            f.truncate(size)  # the file's whole size, the damage in its first page


def _check_all(root, impl, read_only):
    with MessageStore(root, implementation=impl.name, read_only=read_only, **OPTIONS) as store:
        for i in range(8):
            m = store.get_by_queue_offset("T", i % 2, i // 2)
            assert (m.topic, m.queue_id, m.queue_offset, m.body) == ("T", i % 2, i // 2, b"body%d" % i)
        assert [m.body for m in store.query_by_key("T", "k3")] == [b"body3"]
        if not read_only:
            expected = store.max_queue_offset("T", 0)
            r = store.put("T", b"after", queue_id=0)
            assert (r.queue_id, r.queue_offset) == (0, expected)
            assert store.get_by_queue_offset("T", 0, expected).body == b"after"


def _tree(root):
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            data = b""
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as f:
                    data = f.read()
            out[os.path.relpath(path, root)] = (st.st_mode, st.st_size, st.st_mtime_ns, hash(data))
    return out


@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "crashed"])
@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("which", sorted(RUNTIME_FILES))
def test_a_damaged_runtime_file_never_keeps_the_store_closed(tmp_path, impl, which, damage, crashed, caplog):
    rng = random.Random(f"{which}-{damage}-{crashed}")
    root = tmp_path / "s"
    _make(root, impl)
    name, size, magic = RUNTIME_FILES[which]
    path = root / name
    _damage(path, size, magic, damage, rng)
    if crashed:
        (root / "abort").write_bytes(b"")  # the writer was killed (or the power cut)
    # a read-only open reads the store as if the file were absent, and writes nothing
    before = _tree(root)
    _check_all(root, impl, read_only=True)
    assert _tree(root) == before
    # a writable open rebuilds the file (and says so); the store's messages are all there
    with caplog.at_level(logging.WARNING, logger="rocketstore"):
        _check_all(root, impl, read_only=False)
    if which == "live":
        assert any("rebuilt" in r.getMessage() for r in caplog.records) or damage == "zeroed"
        assert path.stat().st_size == LIVE_SIZE and path.read_bytes()[:8] == magic
    else:
        # the table of an owner nobody holds is gone (the next owner that shares makes a new one)
        assert not path.exists()
    _check_all(root, impl, read_only=True)
    _check_all(root, impl, read_only=False)


@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "crashed"])
def test_a_live_page_with_its_magic_and_random_fields_is_rebuilt_too(tmp_path, impl, crashed):
    """A page the power cut tore: the magic survived, every field after it is random (an epoch
    of 2**64 - 1 cannot be moved on by adding one)."""
    root = tmp_path / "s"
    _make(root, impl)
    page = b"RSLIVE\x00\x01" + b"\xff" * (LIVE_SIZE - 8)
    (root / LIVE_NAME).write_bytes(page)
    if crashed:
        (root / "abort").write_bytes(b"")
    _check_all(root, impl, read_only=True)
    _check_all(root, impl, read_only=False)
    _check_all(root, impl, read_only=True)


LOCKED_TABLE = """
    import os, sys
    sys.path.insert(0, sys.argv[1])
    from rocketstore import MessageStore
    with MessageStore(sys.argv[2], implementation=sys.argv[3], commitlog_file_size=64 * 1024,
                      consume_queue_units=64) as store:
        r = store.put("T", b"after", queue_id=0)
        print(r.queue_offset)
"""


def test_a_shared_table_whose_lock_a_power_cut_left_held_does_not_hang_the_open(tmp_path, impl):
    """The table's page came back from before the power cut with its append lock held by a
    thread of a process that no longer exists (no robust-list cleanup ran: the machine stopped).
    Locking it would wait for ever; no process holds the store, so the table is nobody's."""
    if not sharedappend.supported():
        pytest.skip("no shared append table on this platform")
    root = tmp_path / "s"
    _make(root, impl)
    (root / "abort").write_bytes(b"")
    table = sharedappend.open_table(str(root), create=True)
    assert table is not None
    fd, mm = table
    try:
        struct.pack_into("<QQ", mm, sharedappend.O_MAGIC, sharedappend.MAGIC, 12345)
        hold_by_a_dead_thread(mm)
        mm.flush()
    finally:
        mm.close()
        os.close(fd)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(LOCKED_TABLE), SRC, str(root), impl.name],
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert done.stdout.split() == [b"4"]


@pytest.mark.parametrize("damage", ["zeroed", "truncated", "random", "wrong-magic", "too-long"])
def test_a_damaged_group_members_file_is_rebuilt(tmp_path, impl, damage, caplog):
    """A group's members file is runtime state too (the offsets beside it are not)."""
    rng = random.Random(damage)
    root = tmp_path / "s"
    _make(root, impl)
    with MessageStore(root, implementation=impl.name, **OPTIONS) as store:
        with GroupConsumer(store, "g", "T") as member:
            assert len(member.poll(3)) == 3
            member.commit()
        members = root / "rocketstore-groups" / "g.members"
        _damage(members, 4096, b"RSGROUP\x01", damage, rng)
        with caplog.at_level(logging.WARNING, logger="rocketstore"), GroupConsumer(store, "g", "T") as member:
            got = member.poll(32)
        assert len(got) == 5  # from the committed offsets on
        assert any("rebuilt" in r.getMessage() for r in caplog.records) or damage == "zeroed"
        assert members.stat().st_size == 4096 and members.read_bytes()[:8] == b"RSGROUP\x01"


def test_a_store_dir_is_told_by_rocketstores_and_rocketmqs_files_not_by_runtime_files(tmp_path, impl):
    """A store stopped before its first segment (config/ and the runtime files only) opens even
    when a runtime file is of any size."""
    root = tmp_path / "s"
    (root / "config").mkdir(parents=True)
    (root / "config" / "topics.json").write_text("{}")
    (root / LIVE_NAME).write_bytes(os.urandom(LIVE_SIZE + 100))
    with MessageStore(root, implementation=impl.name, read_only=True, **OPTIONS) as store:
        assert store.max_offset == 0
    with MessageStore(root, implementation=impl.name, **OPTIONS) as store:
        store.put("T", b"x", queue_id=0)
    assert (root / LIVE_NAME).stat().st_size == LIVE_SIZE
