"""An open store's point reads are its codec's FastReads methods (one compiled call each): they
answer what the class's methods answer, fall back to them for everything else, and never keep a
store alive or read a closed one."""

import gc
import weakref

import pytest

from rocketstore import MessageStore
from rocketstore.errors import (
    InvalidMessageError,
    InvalidMessageIdError,
    MessageNotFoundError,
    StoreClosedError,
    StoreReadOnlyError,
)
from rocketstore.storebase import StoreBase

TOPIC = "FastReads"
NAMES = ("read", "get_by_msg_id", "get_by_queue_offset", "query_by_key")


def front(store, name="read"):
    """What a point read of ``store``'s role is: a compiled FastReads method, or in the pure
    build (no front of its own) the method of the store's reads part itself, one call from the
    facade; the pure build's ``get_message`` and ``commit_offset`` are the careful path."""
    if store._impl.compiled:
        return ("builtin_function_or_method",)
    return ("CarefulCall",) if name in ("get_message", "commit_offset") else ("method",)


@pytest.fixture
def store(tmp_path, impl):
    s = MessageStore(str(tmp_path / "s"), implementation=impl.name, default_queues=2)
    yield s
    s.close()


def test_an_open_store_answers_point_reads_through_fast_reads(store, impl):
    for name in NAMES:
        call = getattr(store._role, name)
        assert type(call).__name__ in front(store), name
        assert impl.compiled or call.__self__ is store._reads, name
    r = store.put(TOPIC, b"body", keys="k1", queue_id=1)
    assert store.read(r.commitlog_offset).body == b"body"
    assert store.get_by_msg_id(r.msg_id).body == b"body"
    assert store.get_by_queue_offset(TOPIC, 1, 0).body == b"body"
    assert [m.body for m in store.query_by_key(TOPIC, "k1")] == [b"body"]
    # the same answers as the careful paths
    for name, args in (
        ("read", (r.commitlog_offset,)),
        ("get_by_msg_id", (r.msg_id,)),
        ("get_by_queue_offset", (TOPIC, 1, 0)),
    ):
        assert getattr(store, name)(*args) == getattr(StoreBase, name)(store, *args)
    assert store.query_by_key(TOPIC, "k1") == StoreBase.query_by_key(store, TOPIC, "k1")


def test_what_the_fast_call_cannot_answer_raises_the_class_errors(store):
    r = store.put(TOPIC, b"body", keys="k1", queue_id=0)
    with pytest.raises(MessageNotFoundError):
        store.read(r.commitlog_offset + 1)
    with pytest.raises(InvalidMessageIdError):
        store.get_by_msg_id("not an id")
    with pytest.raises(MessageNotFoundError):
        store.get_by_queue_offset(TOPIC, 0, 5)
    with pytest.raises(InvalidMessageError):
        store.get_by_queue_offset(TOPIC, "0", 0)
    assert store.query_by_key(TOPIC, "nobody") == []
    assert store.query_by_key(TOPIC, "k1", max_num=1, begin=0, end=None)[0].body == b"body"
    zero = store.read(r.commitlog_offset, zero_copy=True)  # a keyword: the class's method
    assert isinstance(zero.body, memoryview) and bytes(zero.body) == b"body"


def test_a_method_held_past_close_raises_store_closed(store):
    r = store.put(TOPIC, b"body", queue_id=0)
    held = [getattr(store._role, name) for name in NAMES]  # the FastReads methods
    store.close()
    assert store._role.kind == "closed"
    for method, args in zip(held, ((r.commitlog_offset,), (r.msg_id,), (TOPIC, 0, 0), (TOPIC, "k"))):
        with pytest.raises(StoreClosedError):
            method(*args)


def test_the_methods_do_not_keep_a_dropped_store_alive(tmp_path, impl):
    s = MessageStore(str(tmp_path / "s"), implementation=impl.name)
    r = s.put(TOPIC, b"body")
    read = s._role.read  # FastReads.read
    ref = weakref.ref(s)
    del s
    gc.collect()
    assert ref() is None
    with pytest.raises(StoreClosedError):
        read(r.commitlog_offset)


def test_a_subclass_keeps_its_own_methods(tmp_path, impl):
    class Logged(MessageStore):
        def read(self, commitlog_offset, *, zero_copy=False):
            self.calls = getattr(self, "calls", 0) + 1
            return super().read(commitlog_offset, zero_copy=zero_copy)

    s = Logged(str(tmp_path / "s"), implementation=impl.name)
    try:
        r = s.put(TOPIC, b"body")
        assert s.read(r.commitlog_offset).body == b"body" and s.calls == 1
        assert type(s._role.read).__name__ in front(s)
    finally:
        s.close()


def test_a_read_only_store_reads_through_them_too(tmp_path, impl):
    path = str(tmp_path / "s")
    with MessageStore(path, implementation=impl.name) as w:
        r = w.put(TOPIC, b"body", keys="k", queue_id=0)
    with MessageStore(path, implementation=impl.name, read_only=True) as ro:
        assert ro.read(r.commitlog_offset).body == b"body"
        assert ro.get_by_queue_offset(TOPIC, 0, 0).body == b"body"
        assert [m.body for m in ro.query_by_key(TOPIC, "k")] == [b"body"]


def test_a_following_store_reads_fast_sees_a_writers_new_puts_and_keeps_a_subclass_method(tmp_path, impl):
    """A read-only store follows the writer beside it: its point reads are FastReads inside a
    SwitchSafe, each following the writer first; a subclass's own method stays its own."""

    class Logged(MessageStore):
        def get_by_msg_id(self, msg_id, *, zero_copy=False):
            self.calls = getattr(self, "calls", 0) + 1
            return super().get_by_msg_id(msg_id, zero_copy=zero_copy)

    path = str(tmp_path / "s")
    with MessageStore(path, implementation=impl.name, default_queues=1) as w:
        first = w.put(TOPIC, b"one", keys="k1")
        with Logged(path, implementation=impl.name, read_only=True) as ro:
            assert ro._opened.follower is not None and (ro._role.fast_reads is not None) == impl.compiled
            for name in NAMES:  # each switch-safe; the fast method is tried first where it is the class's
                assert type(getattr(ro._role, name)).__name__ == "SwitchSafe", name
            assert [m.body for m in ro.query_by_key(TOPIC, "k1")] == [b"one"]
            second = w.put(TOPIC, b"two", keys="k2")  # after the reader's first reads
            assert ro.read(second.commitlog_offset).body == b"two"
            assert ro.get_by_queue_offset(TOPIC, 0, 1).body == b"two"
            assert [m.body for m in ro.query_by_key(TOPIC, "k2")] == [b"two"]
            assert ro.get_by_msg_id(first.msg_id).body == b"one" and ro.calls == 1
            got = ro.get_message("g", TOPIC, 0, 0, 32)
            assert [m.body for m in got.messages] == [b"one", b"two"]
            ro._choose_role()  # as a reopen does: the reads stay switch-safe
            for name in NAMES:
                assert type(getattr(ro._role, name)).__name__ == "SwitchSafe", name
            assert ro.get_by_msg_id(second.msg_id).body == b"two" and ro.calls == 2


def test_unique_key_lookups_answer_as_the_class_does(store):
    first = store.put(TOPIC, b"one", queue_id=0)
    uniq = store.read(first.commitlog_offset).unique_key
    assert store.query_by_unique_key(TOPIC, uniq).body == b"one"
    assert store.query_by_unique_key(TOPIC, uniq) == StoreBase.query_by_unique_key(store, TOPIC, uniq)
    with pytest.raises(MessageNotFoundError):
        store.query_by_unique_key("OtherTopic", uniq)  # the hit's topic is re-checked
    with pytest.raises(MessageNotFoundError):
        store.query_by_unique_key(TOPIC, "not-a-rocketmq-id")  # no time hint: all time, nothing
    # a property UNIQ_KEY not made by RocketMQ: found over all time
    made = store.put(TOPIC, b"two", properties={"UNIQ_KEY": "my-own-id"}, queue_id=0)
    assert store.query_by_unique_key(TOPIC, "my-own-id").commitlog_offset == made.commitlog_offset


def test_the_month_start_is_remembered_for_its_month():
    from rocketstore.base import _clock

    now = _clock.now_ms()
    start, following = _clock.month_bounds(now)
    assert _clock.month_start(now) == start
    assert _clock._month == (start, following)
    assert _clock.month_start(following) == _clock.month_bounds(following)[0]
    assert _clock.month_start(start - 1) == _clock.month_bounds(start - 1)[0]


def test_the_fast_calls_read_the_fields_the_managers_set(store, monkeypatch):
    """The one-call reads read the managers' hot fields (a segment's map and geometry, a queue's
    files, bounds and holes, the table of queues): a change made through the Python attribute
    is what they see, with no second copy to fall behind."""
    r = store.put(TOPIC, b"body", keys="k1", queue_id=1)
    assert store.get_by_queue_offset(TOPIC, 1, 0).body == b"body"  # (dispatched)
    codec = store._impl.codec

    def fast_queue_read():
        return codec.queue_message(
            store._opened.queues, TOPIC, 1, 0, store._opened.segments, store._opened.core
        )

    def fast_read():
        return codec.record_at(store._opened.segments, store._opened.core, r.commitlog_offset)

    assert fast_queue_read().body == b"body" and fast_read().body == b"body"
    segment = store._opened.segments.files[0]
    mm = segment.mm
    monkeypatch.setattr(segment, "mm", None)  # as if closed
    assert fast_read() is None and fast_queue_read() is None
    monkeypatch.setattr(segment, "mm", mm)
    monkeypatch.setattr(segment, "file_from_offset", segment.file_from_offset + 1)  # not one run
    assert fast_read() is None
    monkeypatch.undo()
    assert fast_read().body == b"body"
    monkeypatch.setattr(store._opened.segments, "files", [])
    assert fast_read() is None and fast_queue_read() is None
    monkeypatch.undo()
    cq = store._opened.queues.get(TOPIC, 1)
    unit_file = cq._files.files[0]
    for obj, name, value in (
        (cq, "holes", [(0, 1)]),
        (cq, "_min_logic", 1 << 40),
        (cq._files, "files", []),
        (unit_file, "wrote_position", 0),  # the unit not written yet
    ):
        monkeypatch.setattr(obj, name, value)
        assert fast_queue_read() is None, name
        monkeypatch.undo()
        assert fast_queue_read().body == b"body"
    # the table of queues: a queue taken out of it is not found (its lookup cache emptied)
    queues = store._opened.queues._take_queues()
    try:
        assert fast_queue_read() is None
    finally:
        for q in queues:
            store._opened.queues._put_queue((q.topic, q.queue_id), q)
    assert fast_queue_read().body == b"body"


def test_a_fast_read_by_id_answers_only_for_the_records_own_id(store):
    """message_by_id compares the id with the record's store host, port and offset (upper or
    lower case hex): any other id of the same offset is the careful path's (None)."""
    codec = store._impl.codec
    r = store.put(TOPIC, b"body", queue_id=0)
    msg_id = r.msg_id
    assert len(msg_id) == 32 and msg_id == msg_id.upper()

    def fast(i):
        return codec.message_by_id(store._opened.segments, store._opened.core, i)

    assert fast(msg_id).commitlog_offset == r.commitlog_offset
    assert fast(msg_id.lower()).commitlog_offset == r.commitlog_offset
    host, port, offset = msg_id[:8], msg_id[8:16], msg_id[16:]
    other_port = f"{(int(port, 16) + 1) & 0xFFFFFFFF:08X}"
    other_host = f"{int(host, 16) ^ 1:08X}"
    for other in (
        host + other_port + offset,  # another port
        other_host + port + offset,  # another host
        "0" * 24 + host + port + offset,  # an IPv6-length id of an IPv4 record
        host[:-1] + "G" + port + offset,  # not hex
        host + port + offset[:-1] + "x",
    ):
        assert fast(other) is None, other
        with pytest.raises((MessageNotFoundError, InvalidMessageIdError)):
            store.get_by_msg_id(other)


def test_a_pull_from_an_offset_is_one_fast_call_with_the_class_answers(store):
    """get_message from a given offset, without tags or a wait, is FastReads' (units, records
    and the result in one call); its result is the class's, and anything else (tags, a wait,
    no offset, a bad group, an offset past the end) is the class's own call."""
    from rocketstore import GetMessageStatus

    assert type(store._role.get_message).__name__ in front(store, "get_message")
    for i in range(40):
        store.put(TOPIC, b"m%d" % i, tags="a" if i % 2 else "b", queue_id=1)
    for args in (("g", TOPIC, 1, 0), ("g", TOPIC, 1, 7, 5), ("g", TOPIC, 1, 39, 32)):
        fast = store.get_message(*args)
        careful = StoreBase.get_message(store, *args)
        assert fast.status == careful.status == GetMessageStatus.FOUND
        assert (fast.next_begin_offset, fast.min_offset, fast.max_offset) == (
            careful.next_begin_offset,
            careful.min_offset,
            careful.max_offset,
        )
        assert fast.messages == careful.messages
        assert fast.units.tobytes() == careful.units.tobytes()
        assert fast.queue_offsets.tolist() == careful.queue_offsets.tolist()
    assert [m.body for m in store.get_message("g", TOPIC, 1, 0, 4, tags="a").messages] == [
        b"m1",
        b"m3",
        b"m5",
        b"m7",
    ]
    assert store.get_message("g", TOPIC, 1, 40).status == GetMessageStatus.OFFSET_OVERFLOW_ONE
    assert store.get_message("g", TOPIC, 1, 40, wait=0).status == GetMessageStatus.OFFSET_OVERFLOW_ONE
    assert len(store.get_message("g", TOPIC, 1).messages) == 32  # the group's offset: none, the first
    with pytest.raises(TypeError):
        store.get_message(b"g", TOPIC, 1, 0)
    with pytest.raises(InvalidMessageError):
        store.get_message("", TOPIC, 1, 0)
    held = store.get_message
    store.close()
    with pytest.raises(StoreClosedError):
        held("g", TOPIC, 1, 0)


def test_a_pull_reads_the_queue_bounds_from_the_fields_the_queue_sets(store, monkeypatch):
    """A pull's min and max offsets are the queue's ``min_offset`` and ``max_offset``, which the
    compiled pull computes from the fields they are made of (``_min_logic``, the last unit
    file's start and written position): a change to those is what the pull sees."""
    for i in range(8):
        store.put(TOPIC, b"m%d" % i, queue_id=1)
    codec = store._impl.codec

    def pull(offset, n=32):
        return codec.queue_messages(
            store._opened.queues, TOPIC, 1, offset, n, store._opened.segments, store._opened.core
        )

    assert store.get_message("g", TOPIC, 1, 0).max_offset == 8  # (dispatched)
    cq = store._opened.queues.get(TOPIC, 1)
    _messages, _units, lo, hi = pull(0)
    assert (lo, hi) == (cq.min_offset, cq.max_offset) == (0, 8)
    monkeypatch.setattr(cq, "_min_logic", 3 * 20)  # as retention moves it
    assert pull(2) is None  # below the queue's start: the careful path says so
    messages, _units, lo, hi = pull(3, 2)
    assert (lo, hi) == (cq.min_offset, cq.max_offset) == (3, 8)
    assert [m.queue_offset for m in messages] == [3, 4]
    last = cq._files.files[-1]
    monkeypatch.setattr(last, "wrote_position", 5 * 20)  # units 5.. not written yet
    messages, _units, lo, hi = pull(3)
    assert (lo, hi) == (3, 5) and [m.queue_offset for m in messages] == [3, 4]
    assert pull(5) is None
    monkeypatch.setattr(cq._files, "files", [])
    assert pull(3) is None


def test_the_messages_of_a_pull_are_each_their_own_record_across_segments(tmp_path, impl):
    """Each message of a compiled pull reads its own record (body, topic, properties, fields),
    and one kept after the others of its pull are gone still does; so in a pull whose records
    lie in two segments."""
    import gc
    import pickle

    with MessageStore(
        str(tmp_path / "s"), implementation=impl.name, commitlog_file_size=64 * 1024, default_queues=2
    ) as store:
        bodies = [bytes([i % 251]) * (1 + (i * 37) % 900) for i in range(150)]
        for i, body in enumerate(bodies):
            store.put(TOPIC, body, tags=f"t{i}", keys=f"k{i}", queue_id=i % 2)
        assert len(store._opened.segments.files) > 1  # the pulls below cross a segment's end
        for qid in (0, 1):
            mine = bodies[qid::2]
            offset, kept = 0, []
            while True:
                got = store.get_message("g", TOPIC, qid, offset, 40)
                careful = StoreBase.get_message(store, "g", TOPIC, qid, offset, 40)
                assert got.messages == careful.messages
                if not got.messages:
                    break
                for m in got.messages:
                    i = 2 * m.queue_offset + qid
                    assert (m.body, m.topic, m.tags, m.keys, m.queue_id) == (
                        bodies[i],
                        TOPIC,
                        f"t{i}",
                        f"k{i}",
                        qid,
                    )
                kept.append(got.messages[len(got.messages) // 2])
                offset = got.next_begin_offset
            assert offset == len(mine)
            del got, careful
            gc.collect()
            for m in kept:
                i = 2 * m.queue_offset + qid
                assert m.body == bodies[i] and m.keys == f"k{i}"
                assert pickle.loads(pickle.dumps(m)) == m
                assert m == store.get_by_queue_offset(TOPIC, qid, m.queue_offset)


def test_a_queue_taken_out_of_the_table_is_not_read_from_memory(store):
    """The compiled queue reads remember which queue the table maps (topic, queue id) to, for
    as long as the table is unchanged: one taken out (or replaced) is seen at once."""
    codec = store._impl.codec
    store.put(TOPIC, b"body", queue_id=1)
    store._opened.dispatcher.catch_up()
    table = store._opened.queues

    def fast(topic=TOPIC):
        return codec.queue_message(table, topic, 1, 0, store._opened.segments, store._opened.core)

    assert fast().body == b"body" and fast().body == b"body"  # remembered
    cq = table.get(TOPIC, 1)
    for other in table._take_queues():
        if other is not cq:
            table._put_queue((other.topic, other.queue_id), other)
    assert fast() is None
    assert store.get_message("g", TOPIC, 1, 0).messages == []
    table._put_queue((TOPIC, 1), cq)
    assert fast().body == b"body"
    assert fast("".join([TOPIC[:2], TOPIC[2:]])).body == b"body"  # an equal str, not the same one
    assert [m.body for m in store.get_message("g", TOPIC, 1, 0).messages] == [b"body"]


@pytest.mark.parametrize("cap", [64, 300])
def test_a_key_lookup_walks_the_index_files_as_select_files_does(tmp_path, impl, cap):
    """The compiled key lookup walks each index file's map itself (cap up to 256 candidates a
    service, hashing topic#key over its parts; above that, select_files): over several index
    files, keys of 1-, 2- and 4-byte text, time windows and limits it finds what the pure twin's
    lookup (select_files, then the same re-check) finds."""
    from rocketstore.format import _codec_py

    s = MessageStore(
        str(tmp_path / "s"),
        implementation=impl.name,
        index_slots=7,
        index_count=40,  # a file holds 39 keys (and each message's UNIQ_KEY is one): many files
    )
    try:
        stored = []
        for i in range(300):
            keys = f"k{i % 9} shared \u043a\u043b\u044e\u0447{i % 3} \u952e\U0001f511{i % 2}"  # 2- and 4-byte text
            r = s.put(TOPIC, b"m%d" % i, keys=keys, queue_id=0)
            stored.append(r)
        s._opened.dispatcher.catch_up(index=True)
        assert len(s._opened.index._files) > 5
        times = sorted(m.store_timestamp for m in (s.read(r.commitlog_offset) for r in stored))
        services = (s._opened.disk_index, s._opened.index)
        for key in ("k0", "k4", "shared", "k9", "nobody", "\u043a\u043b\u044e\u04471", "\u952e\U0001f5110"):
            for max_num, begin, end in (
                (32, 0, None),
                (5, 0, None),
                (300, times[100], None),
                (64, 0, times[200]),
            ):
                args = (services, s._opened.segments, s._opened.core, TOPIC, key, max_num, begin, end, cap)
                fast = impl.codec.key_lookup(*args)
                careful = _codec_py.key_lookup(*args)
                assert fast is not None and careful is not None
                assert [m.commitlog_offset for m in fast] == [m.commitlog_offset for m in careful], (
                    key,
                    max_num,
                )
    finally:
        s.close()


def test_a_key_lookup_over_a_damaged_index_file_finds_what_select_files_finds(tmp_path, impl):
    """Damaged slots and items (chains pointing anywhere, cycles, bad times) are walked as
    select_files walks them: the compiled lookup finds what the pure twin's lookup finds."""
    import random

    from rocketstore.format import _codec_py

    seed = 1717
    print("seed", seed)
    rng = random.Random(seed)
    s = MessageStore(str(tmp_path / "s"), implementation=impl.name, index_slots=11, index_count=400)
    try:
        for i in range(300):
            s.put(TOPIC, b"m%d" % i, keys=f"k{i % 13}", queue_id=0)
        s._opened.dispatcher.catch_up(index=True)
        mm = s._opened.index._files[-1].mapped.mm
        services = (s._opened.disk_index, s._opened.index)
        for _round in range(30):
            for _ in range(6):  # a few random bytes past the header: slots and items
                mm[rng.randrange(40, len(mm))] = rng.randrange(256)
            for key in ("k0", "k5", "k12", "nobody"):
                args = (services, s._opened.segments, s._opened.core, TOPIC, key, 32, 0, None, 64)
                fast = impl.codec.key_lookup(*args)
                careful = _codec_py.key_lookup(*args)
                assert [m.commitlog_offset for m in fast] == [m.commitlog_offset for m in careful], key
    finally:
        s.close()


class Uncounted:
    """The calls of a front the pure build does not have: none."""

    fast_calls = careful_calls = 0


def test_a_commit_of_an_offset_is_one_fast_call_with_the_class_answers(store, caplog):
    """The consumer's loop commits after every pull: an owning store's commit_offset is its
    FastReads method, which keeps the table as the class's method keeps it."""
    fast = store._role.fast_reads or Uncounted()  # (the pure build: the class's method)
    assert type(store._role.commit_offset).__name__ in front(store, "commit_offset")
    before = fast.fast_calls
    store.commit_offset("g", TOPIC, 1, 5)  # a new queue of a new group
    store.commit_offset("g", TOPIC, 1, 7)  # the common case: a queue the table has
    store.commit_offset("g", TOPIC, 0, 2)
    assert fast.fast_calls == before + 3 * store._impl.compiled
    assert (store.committed_offset("g", TOPIC, 1), store.committed_offset("g", TOPIC, 0)) == (7, 2)
    assert store._opened.offsets.dirty
    with caplog.at_level("WARNING"):
        store.commit_offset("g", TOPIC, 1, 3)  # a move back is kept, and logged
    assert store.committed_offset("g", TOPIC, 1) == 3
    assert "moves back from 7 to 3" in caplog.text
    assert store.persist_offsets()
    assert not store._opened.offsets.dirty
    store.commit_offset("g", TOPIC, 1, 4)
    assert store._opened.offsets.dirty  # what persist_offsets writes next
    # what the fast call does not take is the class's, with its errors
    careful = fast.careful_calls
    for args, error in (
        (("", TOPIC, 0, 1), InvalidMessageError),
        ((1, TOPIC, 0, 1), TypeError),
        (("g@h", TOPIC, 0, 1), InvalidMessageError),
        (("g", "T@x", 0, 1), InvalidMessageError),
        (("g", TOPIC, -1, 1), InvalidMessageError),
        (("g", TOPIC, 0, -1), InvalidMessageError),
        (("g", TOPIC, True, 1), InvalidMessageError),
        (("g", TOPIC, 0, 1.0), InvalidMessageError),
    ):
        with pytest.raises(error):
            store.commit_offset(*args)
    assert fast.careful_calls == careful + 8 * store._impl.compiled
    assert store.committed_offset("g", TOPIC, 0) == 2
    numpy = pytest.importorskip("numpy")
    store.commit_offset("g", TOPIC, 0, numpy.int64(9))  # the class's method takes numpy ints
    assert store.committed_offset("g", TOPIC, 0) == 9
    held = store._role.commit_offset
    store.close()
    with pytest.raises(StoreClosedError):
        held("g", TOPIC, 0, 10)
    with pytest.raises(StoreClosedError):
        store.commit_offset("g", TOPIC, 0, 10)


def test_a_read_only_store_refuses_a_commit(tmp_path, impl):
    path = str(tmp_path / "s")
    with MessageStore(path, implementation=impl.name) as w:
        w.commit_offset("g", TOPIC, 0, 3)
    with MessageStore(path, implementation=impl.name, read_only=True) as r:
        with pytest.raises(StoreReadOnlyError):
            r.commit_offset("g", TOPIC, 0, 4)
        assert r.committed_offset("g", TOPIC, 0) == 3
    with MessageStore(path, implementation=impl.name) as w:
        assert w.committed_offset("g", TOPIC, 0) == 3


def test_a_pulls_messages_share_one_copy_of_their_records_that_outlives_the_store(tmp_path, impl):
    """A compiled pull copies its records into one bytes block (up to 16 KiB; a larger record
    gets its own), not one copy per message: each message keeps its block, so a message kept
    after its store is closed and its files deleted still reads its own record."""
    import shutil

    path = tmp_path / "s"
    with MessageStore(str(path), implementation=impl.name, default_queues=1) as store:
        bodies = [bytes([i]) * (100 + 997 * (i % 5)) for i in range(40)] + [b"x" * 70_000, b"y"]
        for i, body in enumerate(bodies):
            store.put(TOPIC, body, keys=f"k{i}", queue_id=0)
        small = store.get_message("g", TOPIC, 0, 0, 32).messages
        big = store.get_message("g", TOPIC, 0, 32, 32).messages
        assert [m.queue_offset for m in small + big] == list(range(len(bodies)))
    shutil.rmtree(path)
    gc.collect()
    for m in small + big:
        assert m.body == bodies[m.queue_offset] and m.keys == f"k{m.queue_offset}"
    if impl.name != "c":
        return
    blocks = []
    for m in small + big:
        (owner,) = [o for o in gc.get_referents(m) if type(o) is bytes and len(o) >= m.size]
        if not blocks or blocks[-1] is not owner:
            blocks.append(owner)
    sizes = [m.size for m in small + big]
    assert all(len(b) <= 16 * 1024 for b in blocks[:-2]) and len(blocks[-2]) == sizes[-2]
    assert sum(len(b) for b in blocks) == sum(sizes)  # each record copied once
    assert len(blocks) < len(sizes) // 4


def test_pulled_messages_are_never_ones_the_program_holds_and_come_back_fresh(tmp_path, impl):
    """A compiled pull reuses the messages the program has dropped: one the program still holds
    is never handed out again; one it changed (body, topic, hosts, properties) and dropped comes
    back as its new record's, with none of those changes; and one dropped inside a reference
    cycle is still collected."""
    from rocketstore import MessageExt

    freed = []

    class Sentinel:
        def __del__(self):
            freed.append(True)

    n = 300
    with MessageStore(str(tmp_path / "s"), implementation=impl.name, default_queues=1) as store:
        for i in range(n):
            store.put(TOPIC, b"b%d" % i, tags=f"t{i}", keys=f"k{i}", queue_id=0)

        def check(m):
            i = m.queue_offset
            careful = StoreBase.get_by_queue_offset(store, TOPIC, 0, i)
            assert isinstance(m, MessageExt) and m == careful
            assert (m.body, m.topic, m.tags, m.keys) == (b"b%d" % i, TOPIC, f"t{i}", f"k{i}")
            assert (m.born_host, m.store_host, m.msg_id) == (
                careful.born_host,
                careful.store_host,
                careful.msg_id,
            )
            assert m.properties == careful.properties and "self" not in m.properties

        held = []
        for round_ in range(3):
            offset = 0
            while offset < n:
                got = store.get_message("g", TOPIC, 0, offset, 7).messages
                assert [m.queue_offset for m in got] == list(range(offset, min(n, offset + 7)))
                for m in got:
                    check(m)
                if round_ == 0 and offset % 3 == 0:
                    held.extend(got)
                elif round_ == 0 and offset == 7:
                    got[0].properties["self"] = got[0]  # a cycle through the message
                    got[0].properties["sentinel"] = Sentinel()
                else:
                    for m in got:
                        m.body = b"changed"
                        m.topic = "Other"
                        m.born_host = m.store_host = ("10.0.0.1", 1)
                        m.properties["self"] = "x"
                offset += len(got)
                del got, m
        gc.collect()
        assert freed == [True]
        for m in held:
            check(m)


def test_a_pull_made_while_a_reused_message_is_reset_gets_its_own_messages(tmp_path, impl):
    """Resetting a dropped message for reuse frees what the program left in it, which may run
    code (a ``__del__``) that pulls again, through the whole ring of reused messages: both pulls
    get their own records, and the message being reset is not handed out by the inner one."""
    n = 200
    seen = []
    with MessageStore(str(tmp_path / "s"), implementation=impl.name, default_queues=1) as store:
        for i in range(n):
            store.put(TOPIC, b"b%d" % i, queue_id=0)

        class PullsOnDelete:
            def __del__(self):
                inner = store.get_message("g", TOPIC, 0, 0, n).messages
                seen.append([(m.queue_offset, m.body) for m in inner])

        for _ in range(3):
            got = store.get_message("g", TOPIC, 0, 0, 32).messages
            for m in got:
                m.properties["deleted"] = PullsOnDelete()
            del got, m
            filler = store.get_message("g", TOPIC, 0, 100, 32).messages  # the ring's other half
            del filler
            outer = store.get_message("g", TOPIC, 0, 100, 32).messages  # resets the dropped ones
            assert [(m.queue_offset, m.body) for m in outer] == [(i, b"b%d" % i) for i in range(100, 132)]
            assert len({id(m) for m in outer}) == 32
            del outer
    assert len(seen) == 96 and all(s == [(i, b"b%d" % i) for i in range(n)] for s in seen)
