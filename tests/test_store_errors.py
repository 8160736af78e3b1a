"""Errors MessageStore raises: the specific class, nothing written, and the store still usable."""

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import rocketstore
from rocketstore import Message, MessageStore, errors
from rocketstore.errors import (
    InvalidMessageError,
    InvalidMessageIdError,
    InvalidQueueIdError,
    InvalidTopicError,
    MessageNotFoundError,
    MessageTooLargeError,
    PropertiesTooLargeError,
    RocketStoreError,
    StoreClosedError,
    StoreLockedError,
    StoreReadOnlyError,
)

SEGMENT = 64 * 1024
HOST = "10.0.0.7"
SRC = str(
    pathlib.Path(rocketstore.__file__).resolve().parents[1]
)  # where the package under test was imported from (src/ or site-packages)


def open_store(path, impl, **options):
    options.setdefault("commitlog_file_size", SEGMENT)
    return MessageStore(path, implementation=impl.name, store_host=HOST, **options)


@pytest.fixture
def store(tmp_path, impl):
    s = open_store(tmp_path / "store", impl, max_message_size=16 * 1024)
    for i in range(5):
        s.put("TopicPre", b"pre-%d" % i)
    yield s
    s.close()


def child_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    return env


# ---- bad input: raises, writes nothing ----

BAD_PUTS = {
    "empty topic": (InvalidTopicError, lambda s: s.put("", b"x")),
    "topic of 128 chars": (InvalidTopicError, lambda s: s.put("T" * 128, b"x")),
    "topic with a space": (InvalidTopicError, lambda s: s.put("my topic", b"x")),
    "topic with a hash": (InvalidTopicError, lambda s: s.put("my#topic", b"x")),
    "topic not a str": (InvalidTopicError, lambda s: s.put(Message(b"bytes-topic", b"x"))),
    "queue id = queue count": (InvalidQueueIdError, lambda s: s.put("TopicPre", b"x", queue_id=4)),
    "queue id far out of range": (InvalidQueueIdError, lambda s: s.put("TopicPre", b"x", queue_id=1000)),
    "properties over 32767 bytes": (
        PropertiesTooLargeError,
        lambda s: s.put("TopicPre", b"x", properties={"big": "v" * 32767}),
    ),
    "properties that fit only without the added UNIQ_KEY": (
        PropertiesTooLargeError,
        lambda s: s.put("TopicPre", b"x", properties={"big": "v" * 32740}),
    ),
    "property value with \\x01": (
        InvalidMessageError,
        lambda s: s.put("TopicPre", b"x", properties={"k": "a\x01b"}),
    ),
    "property value with \\x02": (
        InvalidMessageError,
        lambda s: s.put("TopicPre", b"x", properties={"k": "a\x02b"}),
    ),
    "property name with \\x01": (
        InvalidMessageError,
        lambda s: s.put("TopicPre", b"x", properties={"k\x01": "v"}),
    ),
    "tags with \\x02": (InvalidMessageError, lambda s: s.put("TopicPre", b"x", tags="a\x02b")),
    "body over max_message_size": (MessageTooLargeError, lambda s: s.put("TopicPre", b"x" * (16 * 1024 + 1))),
    "record over max_message_size": (
        MessageTooLargeError,
        lambda s: s.put("TopicPre", b"x" * (16 * 1024 - 50)),
    ),
    "batch with a bad topic": (InvalidTopicError, lambda s: s.put_batch("bad topic", [b"a", b"b"])),
    "batch with a bad queue id": (InvalidQueueIdError, lambda s: s.put_batch("TopicPre", [b"a"], queue_id=9)),
    "batch with a record over max_message_size": (
        MessageTooLargeError,
        lambda s: s.put_batch("TopicPre", [b"a", b"x" * (16 * 1024 - 50)]),
    ),
    "batch with properties over 32767 bytes": (
        PropertiesTooLargeError,
        lambda s: s.put_batch("TopicPre", [b"a"], properties={"big": "v" * 32740}),
    ),
    "messages with a bad queue id": (
        InvalidQueueIdError,
        lambda s: s.put_messages([Message("TopicPre", b"a"), Message("TopicPre", b"b", queue_id=7)]),
    ),
    "messages with properties over 32767 bytes": (
        PropertiesTooLargeError,
        lambda s: s.put_messages(
            [Message("TopicPre", b"a"), Message("TopicPre", b"b", properties={"big": "v" * 32740})]
        ),
    ),
    "pipelined put with a bad topic": (InvalidTopicError, lambda s: s.put_pipelined("bad#topic", b"x")),
}


@pytest.mark.parametrize("case", list(BAD_PUTS))
def test_bad_put_raises_its_error_and_writes_nothing(store, case):
    error, call = BAD_PUTS[case]
    before = store.max_offset
    queues = store.queue_offsets()
    count = len(list(store.iter_messages()))
    with pytest.raises(error):
        call(store)
    assert store.max_offset == before
    assert store.queue_offsets() == queues
    assert len(list(store.iter_messages())) == count
    after = store.put("TopicPre", b"after", queue_id=0)
    assert after.commitlog_offset == before
    assert after.queue_offset == queues[("TopicPre", 0)]
    assert store.read(after.commitlog_offset).body == b"after"


def test_topic_of_127_chars_is_accepted(store):
    topic = "t" * 127
    r = store.put(topic, b"longest topic")
    assert store.read(r.commitlog_offset).topic == topic


def test_put_after_close_raises_store_closed(tmp_path, impl):
    s = open_store(tmp_path / "store", impl)
    s.put("TopicC", b"x")
    s.close()
    assert s.closed
    for call in (
        lambda: s.put("TopicC", b"y"),
        lambda: s.put("TopicC", b"y", tags="t"),
        lambda: s.put(Message("TopicC", b"y")),
        lambda: s.put_batch("TopicC", [b"y"]),
        lambda: s.put_messages([Message("TopicC", b"y")]),
        lambda: s.put_pipelined("TopicC", b"y"),
        lambda: s.read(0),
        lambda: s.flush(),
    ):
        with pytest.raises(StoreClosedError):
            call()
    s.close()  # closing twice is harmless
    with open_store(tmp_path / "store", impl) as again:
        assert [m.body for m in again.iter_messages()] == [b"x"]


def test_second_writer_in_the_same_process_raises_store_locked(tmp_path, impl):
    with open_store(tmp_path / "store", impl) as first:
        with pytest.raises(StoreLockedError):
            open_store(tmp_path / "store", impl)
        first.put("TopicL", b"first still works")
    with open_store(tmp_path / "store", impl) as again:  # the lock went with close()
        assert [m.body for m in again.iter_messages()] == [b"first still works"]


def test_second_writer_from_a_subprocess_joins_or_raises_store_locked(tmp_path, impl):
    # a writable open in another process joins the writer (rocketstore.processes.writers); with
    # shared_writers=False on either side it raises StoreLockedError
    code = textwrap.dedent("""
        import os, sys
        from rocketstore import MessageStore
        from rocketstore.errors import StoreLockedError
        try:
            s = MessageStore(sys.argv[1], implementation=sys.argv[2], shared_writers=sys.argv[3] == "1")
        except StoreLockedError:
            print("LOCKED")
        else:
            print("OPENED", "joined" if s.writer_pid != os.getpid() else "owner")
            s.close()
    """)
    path = str(tmp_path / "store")

    def second(shared):
        out = subprocess.run(
            [sys.executable, "-c", code, path, impl.name, "1" if shared else "0"],
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        return out.stdout.strip() or out.stderr

    with open_store(path, impl):
        assert second(True) == "OPENED joined"
        assert second(False) == "LOCKED"
    with open_store(path, impl, shared_writers=False):
        assert second(True) == "LOCKED"
    assert second(True) == "OPENED owner"


_JAVA_STYLE_LOCK_PROBE = textwrap.dedent("""
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)   # FileChannel.tryLock(0, 1, false)
    except OSError:
        print("LOCKED")
    else:
        print("GOT")
""")


def _java_style_probe(lock_path):
    out = subprocess.run(
        [sys.executable, "-c", _JAVA_STYLE_LOCK_PROBE, lock_path], capture_output=True, text=True, timeout=60
    )
    return out.stdout.strip()


def test_open_store_holds_the_posix_lock_a_java_broker_takes(tmp_path, impl):
    with open_store(tmp_path / "store", impl):
        assert _java_style_probe(str(tmp_path / "store" / "lock")) == "LOCKED"
    assert _java_style_probe(str(tmp_path / "store" / "lock")) == "GOT"


def test_failed_second_open_in_process_keeps_the_posix_lock(tmp_path, impl):
    # POSIX record locks belong to the process and go away when ANY descriptor of the file is
    # closed: the refused second open must not drop the first store's lock on byte 0.
    with open_store(tmp_path / "store", impl):
        with pytest.raises(StoreLockedError):
            open_store(tmp_path / "store", impl)
        assert _java_style_probe(str(tmp_path / "store" / "lock")) == "LOCKED"


def test_read_only_store_rejects_every_kind_of_put(tmp_path, impl):
    path = tmp_path / "store"
    with open_store(path, impl) as w:
        w.put("TopicRO", b"x")
    ro = MessageStore(path, implementation=impl.name, read_only=True)
    try:
        before = ro.max_offset
        for call in (
            lambda: ro.put("TopicRO", b"y"),
            lambda: ro.put("TopicRO", b"y", tags="t"),
            lambda: ro.put(Message("TopicRO", b"y")),
            lambda: ro.put_batch("TopicRO", [b"y"]),
            lambda: ro.put_messages([Message("TopicRO", b"y")]),
            lambda: ro.put_pipelined("TopicRO", b"y"),
            lambda: ro.create_topic("TopicNew"),
            lambda: ro.flush(),
        ):
            with pytest.raises(StoreReadOnlyError):
                call()
        assert ro.max_offset == before
        assert [m.body for m in ro.iter_messages()] == [b"x"]
    finally:
        ro.close()
    assert not (path / "abort").exists()


def test_read_only_open_of_a_missing_store_raises_file_not_found(tmp_path, impl):
    with pytest.raises(FileNotFoundError):
        MessageStore(tmp_path / "nothing-here", implementation=impl.name, read_only=True)


def test_read_at_an_offset_where_no_message_starts_raises_message_not_found(tmp_path, impl):
    with open_store(tmp_path / "store", impl) as s:
        first = s.put("TopicR", b"a" * 100)
        body_len = SEGMENT - 8 - first.size - (91 + 6 + 42) - 10  # leaves 10 bytes + 8: a BLANK next
        second = s.put("TopicR", b"b" * body_len)
        third = s.put("TopicR", b"c" * 100)
        assert third.commitlog_offset == SEGMENT
        blank_at = second.commitlog_offset + second.size
        for offset in (
            -1,
            1,
            first.commitlog_offset + 50,
            first.size - 1,
            blank_at,
            blank_at + 4,
            SEGMENT - 1,
            s.max_offset,
            s.max_offset + 1,
            10 * SEGMENT,
            2**62,
        ):
            with pytest.raises(MessageNotFoundError):
                s.read(offset)
        for offset in ("0", 1.0, None):
            with pytest.raises(MessageNotFoundError):
                s.read(offset)
        assert s.read(third.commitlog_offset).body == b"c" * 100


@pytest.mark.parametrize(
    "msg_id",
    [
        "",
        "0A",
        "XYZ",
        "0A00000700002A9F000000000000000",  # 31 chars
        "0A00000700002A9F00000000000000000",  # 33 chars
        "0A00000700002A9F000000000000000G",
        "0A00000700002A9F00000000 0000000",
        "０A00000700002A9F0000000000000000",  # non-ASCII digit
    ],
)
def test_malformed_msg_id_raises_invalid_message_id(store, msg_id):
    with pytest.raises(InvalidMessageIdError):
        store.get_by_msg_id(msg_id)


def test_msg_id_that_is_not_a_str_raises_invalid_message_id(store):
    with pytest.raises(InvalidMessageIdError):
        store.get_by_msg_id(b"0A00000700002A9F0000000000000000")


def test_well_formed_msg_id_of_another_host_or_offset_raises_message_not_found(store):
    good = next(iter(store.iter_messages())).msg_id
    other_host = "0B" + good[2:]
    other_port = good[:8] + "00002AA0" + good[16:]
    nowhere = good[:16] + format(5 * SEGMENT, "016X")
    for msg_id in (other_host, other_port, nowhere):
        with pytest.raises(MessageNotFoundError):
            store.get_by_msg_id(msg_id)


@pytest.mark.parametrize("name", errors.__all__)
def test_every_error_is_a_rocketstore_error_with_the_documented_builtin_base(name):
    cls = getattr(errors, name)
    assert issubclass(cls, RocketStoreError)
    value_errors = {
        "InvalidMessageError",
        "InvalidTopicError",
        "InvalidQueueIdError",
        "PropertiesTooLargeError",
        "MessageTooLargeError",
        "InvalidMessageIdError",
        "CorruptRecordError",
        "StoreConfigError",
    }
    if name in value_errors:
        assert issubclass(cls, ValueError)
    if name == "MessageNotFoundError":
        assert issubclass(cls, LookupError)
    if name in ("StoreLockedError", "SegmentError"):
        assert issubclass(cls, OSError)
    for sub in (
        "InvalidTopicError",
        "InvalidQueueIdError",
        "PropertiesTooLargeError",
        "MessageTooLargeError",
    ):
        assert issubclass(getattr(errors, sub), errors.InvalidMessageError)
    assert getattr(__import__("rocketstore"), name) is cls
