"""Attack: damaged bytes in the CommitLog, a ConsumeQueue or an index file, then every way of
reading. Each answer is the message stored there (topic, queue, queue offset, body), or a
typed "missing" error; never another message."""

import pathlib
import struct

import pytest

from rocketstore import MessageStore
from rocketstore.errors import RocketStoreError

OPTIONS = {"commitlog_file_size": 64 * 1024, "consume_queue_units": 64, "index_slots": 64, "index_count": 256}
QUEUES = 3
N = 30


def _make(root, impl):
    truth, ids = {}, {}
    with MessageStore(root, implementation=impl.name, **OPTIONS) as store:
        for i in range(N):
            body = b"body-%03d" % i
            r = store.put("T", body, keys="k%d" % i, queue_id=i % QUEUES)
            truth[(i % QUEUES, r.queue_offset)] = body
            ids[r.msg_id] = body
    return truth, ids


def _check_every_read(root, impl, truth, ids, read_only):
    """Every read path: what comes back is what was stored there, or a typed error."""
    with MessageStore(root, implementation=impl.name, read_only=read_only, **OPTIONS) as store:
        for (q, o), body in truth.items():
            try:
                m = store.get_by_queue_offset("T", q, o)
            except RocketStoreError:
                continue
            assert (m.topic, m.queue_id, m.queue_offset, m.body) == ("T", q, o, body)
        for q in range(QUEUES):
            for m in store.get_message("g", "T", q, 0, 64).messages:
                assert (m.topic, m.queue_id) == ("T", q) and m.body == truth[(q, m.queue_offset)]
        for i in range(N):
            for m in store.query_by_key("T", "k%d" % i):
                assert m.body == b"body-%03d" % i
        for msg_id, body in ids.items():
            try:
                m = store.get_by_msg_id(msg_id)
            except RocketStoreError:
                continue
            assert m.body == body
            assert store.read(m.commitlog_offset).body == body
        if not read_only:
            for got in store.receive("g2", "T", 64, 60_000):
                m = got.message
                assert m.topic == "T" and m.body == truth[(m.queue_id, m.queue_offset)]


@pytest.mark.parametrize("read_only", [False, True])
def test_a_record_moved_to_another_records_place_is_not_read_as_the_message_there(tmp_path, impl, read_only):
    """Two whole, CRC-valid records of one size swapped in place: each still names the place it
    was written at (PhysicalOffset). read(offset) used to return the moved record."""
    root = tmp_path / "s"
    truth, ids = _make(root, impl)
    seg = root / "commitlog" / "00000000000000000000"
    data = bytearray(seg.read_bytes())
    size = struct.unpack_from(">i", data, 0)[0]
    assert struct.unpack_from(">i", data, size)[0] == size
    data[0:size], data[size : 2 * size] = data[size : 2 * size], data[0:size]
    seg.write_bytes(bytes(data))
    with MessageStore(root, implementation=impl.name, read_only=read_only, **OPTIONS) as store:
        for offset in (0, size):
            try:
                m = store.read(offset)
            except RocketStoreError:
                continue
            assert m.commitlog_offset == offset
    _check_every_read(root, impl, truth, ids, read_only)


def _flip(root: pathlib.Path, rng, kind):
    if kind == "commitlog":
        files = sorted((root / "commitlog").iterdir())
    elif kind == "consumequeue":
        files = sorted(p for p in (root / "consumequeue" / "T").rglob("0*") if p.is_file())
    else:
        files = sorted((root / "index").iterdir())
    path = rng.choice(files)
    data = bytearray(path.read_bytes())
    used = len(data.rstrip(b"\0")) or len(data)
    for _ in range(rng.randint(1, 4)):
        data[rng.randrange(used)] = rng.randrange(256)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("kind", ["commitlog", "consumequeue", "index"])
@pytest.mark.parametrize("read_only", [False, True])
def test_random_flipped_bytes_never_hand_out_a_wrong_message(tmp_path, impl, rng, kind, read_only):
    for trial in range(3):
        root = tmp_path / f"s{trial}"
        truth, ids = _make(root, impl)
        _flip(root, rng, kind)
        try:
            _check_every_read(root, impl, truth, ids, read_only)
        except RocketStoreError:
            pass  # refused at open (typed): allowed


@pytest.mark.parametrize("claimed", [13, 2, 10])
@pytest.mark.parametrize("read_only", [False, True])
def test_a_damaged_queue_offset_field_does_not_move_a_message_to_another_position(
    tmp_path, impl, read_only, claimed
):
    """The QueueOffset field is outside the body CRC: a record of queue 1 stored at queue offset
    6 whose field now says ``claimed``. A queue rebuilt from the CommitLog used to place it there
    (past the queue's end for 13: a message at a position never written)."""
    root = tmp_path / "s"
    truth, ids = _make(root, impl)
    seg = root / "commitlog" / "00000000000000000000"
    data = bytearray(seg.read_bytes())
    pos = 0
    while True:  # the record of queue 1, queue offset 6
        size, qid = struct.unpack_from(">i", data, pos)[0], struct.unpack_from(">i", data, pos + 12)[0]
        qoff = struct.unpack_from(">q", data, pos + 20)[0]
        if (qid, qoff) == (1, 6):
            break
        pos += size
    struct.pack_into(">q", data, pos + 20, claimed)
    seg.write_bytes(bytes(data))
    _check_every_read(root, impl, truth, ids, read_only)
    with MessageStore(root, implementation=impl.name, read_only=read_only, **OPTIONS) as store:
        if claimed >= N // QUEUES:  # never written (2: the real one, checked above)
            with pytest.raises(RocketStoreError):
                store.get_by_queue_offset("T", 1, claimed)
        assert store.max_queue_offset("T", 1) == N // QUEUES


@pytest.mark.parametrize("read_only", [False, True])
def test_a_record_copied_over_another_is_not_found_by_key_at_the_place_it_was_copied_to(
    tmp_path, impl, read_only
):
    """A whole, CRC-valid record copied over another of one size names the place it was written
    at (PhysicalOffset): read() refuses it there, and so must a lookup by key (it returned the
    copied message twice, once at a place that does not hold it; found by a damage campaign)."""
    root = tmp_path / "s"
    with MessageStore(root, implementation=impl.name, **OPTIONS) as store:
        results = [store.put("T", b"body-%d" % i, keys="k", queue_id=0) for i in range(3)]
    first, last = results[0], results[2]
    assert first.size == last.size
    seg = root / "commitlog" / "00000000000000000000"
    data = bytearray(seg.read_bytes())
    data[last.commitlog_offset : last.commitlog_offset + last.size] = data[: first.size]
    seg.write_bytes(bytes(data))
    with MessageStore(root, implementation=impl.name, read_only=read_only, **OPTIONS) as store:
        found = store.query_by_key("T", "k")
        assert [(m.commitlog_offset, m.body) for m in found] == [
            (0, b"body-0"),
            (results[1].commitlog_offset, b"body-1"),
        ]
        got = store.query_by_unique_key("T", first.unique_key)
        assert (got.commitlog_offset, got.body) == (0, b"body-0")


def test_iteration_steps_over_a_record_copied_to_another_place(tmp_path, impl):
    """A whole, CRC-valid record copied over another is not yielded where its PHYSICALOFFSET
    says it is not: iter_messages() and scan() step over it as read() refuses it."""
    root = tmp_path / "s"
    with MessageStore(root, implementation=impl.name, commitlog_file_size=64 * 1024) as store:
        results = [store.put("T", b"body-%d" % i, queue_id=0) for i in range(3)]
    seg = root / "commitlog" / "00000000000000000000"
    data = bytearray(seg.read_bytes())
    at, size = results[2].commitlog_offset, results[0].size
    data[at : at + size] = data[:size]
    seg.write_bytes(bytes(data))
    with MessageStore(root, implementation=impl.name, commitlog_file_size=64 * 1024) as store:
        with pytest.raises(RocketStoreError):
            store.read(at)
        kept = [0, results[1].commitlog_offset]
        assert [m.commitlog_offset for m in store.iter_messages()] == kept
        assert [m.commitlog_offset for m in store.iter_messages(results[1].commitlog_offset)] == kept[1:]
        assert [base + int(p) for base, rows in store.scan() for p in rows["position"]] == kept
        assert [int(o) for _, rows in store.scan() for o in rows["physical_offset"]] == kept
        with pytest.raises(RocketStoreError):
            list(store.records_at([results[1].commitlog_offset, at], [results[1].size, size]))
        # trusting the bytes reads what is there
        assert len(list(store.iter_messages(check_crc=False))) == 3


@pytest.mark.parametrize("at", [27, 63, 100])  # QUEUEOFFSET, STORETIMESTAMP, a property byte
def test_a_store_writing_the_crc32_property_refuses_damage_outside_the_body(tmp_path, impl, at):
    """With ``append_prop_crc=True`` every record ends in RocketMQ 5.2+'s ``__CRC32#`` property
    (§1.6), a CRC of the whole record: a flipped bit in a field the body CRC does not cover is
    caught by every read."""
    root = tmp_path / "s"
    options = dict(commitlog_file_size=64 * 1024, append_prop_crc=True)
    with MessageStore(root, implementation=impl.name, **options) as store:
        results = [store.put("T", b"body-%d" % i, keys="k%d" % i, queue_id=0) for i in range(3)]
    victim = results[1]
    seg = root / "commitlog" / "00000000000000000000"
    data = bytearray(seg.read_bytes())
    at = at if at < 100 else victim.size - 25  # inside the properties, before the CRC property
    data[victim.commitlog_offset + at] ^= 0x01
    seg.write_bytes(bytes(data))
    for read_only in (True, False):
        with MessageStore(root, implementation=impl.name, read_only=read_only, **options) as store:
            with pytest.raises(RocketStoreError):
                store.read(victim.commitlog_offset)
            with pytest.raises(RocketStoreError):
                store.get_by_msg_id(victim.msg_id)
            kept = [results[0].commitlog_offset, results[2].commitlog_offset]
            assert [m.commitlog_offset for m in store.iter_messages()] == kept
            pulled, offset = [], 0
            while offset < store.max_queue_offset("T", 0):
                got = store.get_message("g", "T", 0, offset, 8)
                pulled += [m.commitlog_offset for m in got.messages]
                offset = max(offset + 1, got.next_begin_offset)
            assert pulled == kept
            assert store.query_by_key("T", "k1") == []
