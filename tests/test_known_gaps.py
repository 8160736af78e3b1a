"""Known gaps, found by the damage and power-cut campaigns of 2026-11-26 and not fixed yet.

Each test states the promise and fails today (``xfail(strict=True)``): when a fix makes one pass,
the strict marker turns it red, and the marker goes. Both twins behave alike in each.
"""

import struct

import pytest

from rocketstore import MessageStore

OPTIONS = {"commitlog_file_size": 64 * 1024}
SEGMENT = "00000000000000000000"


def _patch(root, offset, fmt, value):
    seg = root / "commitlog" / SEGMENT
    data = bytearray(seg.read_bytes())
    struct.pack_into(fmt, data, offset, value)
    seg.write_bytes(bytes(data))


@pytest.mark.xfail(
    strict=True,
    reason="a crashed store's re-dispatch overwrites a unit with a record whose QUEUEID field (outside the "
    "body CRC) is damaged: ConsumeQueue._rewrite_one keeps the last record to claim a position",
)
def test_a_damaged_queue_id_does_not_take_another_queues_position_after_a_crash(tmp_path, impl):
    root = tmp_path / "s"
    with MessageStore(root, implementation=impl.name, **OPTIONS) as store:
        store.create_topic("T", 3)
        for i in range(10):
            store.put("T", b"q1-body-%d" % i, queue_id=1)
        victim = [store.put("T", b"q2-body-%d" % i, queue_id=2) for i in range(10)][7]
    _patch(root, victim.commitlog_offset + 12, ">i", 1)  # QUEUEID 2 -> 1
    (root / "abort").touch()  # as after a crash
    with MessageStore(root, implementation=impl.name, **OPTIONS) as store:
        assert store.get_by_queue_offset("T", 1, 7).body == b"q1-body-7"


@pytest.mark.xfail(
    strict=True,
    reason="a damaged QUEUEOFFSET on a queue's last record: the queue is rebuilt with placeholders and the "
    "message served at a position never written (QueueGuard.repair keeps a last record that jumps ahead)",
)
@pytest.mark.parametrize("read_only", [False, True])
def test_a_damaged_last_queue_offset_is_not_served_at_a_position_never_written(tmp_path, impl, read_only):
    root = tmp_path / "s"
    with MessageStore(root, implementation=impl.name, **OPTIONS) as store:
        store.create_topic("T", 2)
        for i in range(60):
            store.put("T", b"filler-%d" % i, queue_id=1)
        last = [store.put("T", b"body-%d" % i, queue_id=0) for i in range(5)][4]
    _patch(root, last.commitlog_offset + 20, ">q", 7)  # QUEUEOFFSET 4 -> 7
    with MessageStore(root, implementation=impl.name, read_only=read_only, **OPTIONS) as store:
        first = store.get_message("g", "T", 0, 0, 32)
        served = [(m.queue_offset, bytes(m.body)) for m in first.messages]
        served += [
            (m.queue_offset, bytes(m.body))
            for m in store.get_message("g", "T", 0, first.next_begin_offset, 32).messages
        ]
        assert all(q < 5 for q, _ in served), served


@pytest.mark.xfail(
    strict=True,
    reason="a damaged TOPIC byte moves a record into another topic's queue past its end, served there "
    "(writable open: _repair_holes pads the queue up to the claimed offset)",
)
def test_a_damaged_topic_byte_does_not_put_a_message_into_another_topic(tmp_path, impl):
    root = tmp_path / "s"
    with MessageStore(root, implementation=impl.name, **OPTIONS) as store:
        store.create_topic("TA", 1)
        store.create_topic("TB", 1)
        last = [store.put("TA", b"TA-body-%d" % i, queue_id=0) for i in range(4)][3]
        store.put("TB", b"TB-body-0", queue_id=0)
    seg = root / "commitlog" / SEGMENT
    data = bytearray(seg.read_bytes())
    p = last.commitlog_offset
    body_len = struct.unpack_from(">i", data, p + 84)[0]
    assert data[p + 89 + body_len : p + 91 + body_len] == b"TA"
    data[p + 90 + body_len] = ord("B")  # topic "TA" -> "TB"
    seg.write_bytes(bytes(data))
    with MessageStore(root, implementation=impl.name, **OPTIONS) as store:
        assert [bytes(m.body) for m in store.get_message("g", "TB", 0, 0, 32).messages] == [b"TB-body-0"]
