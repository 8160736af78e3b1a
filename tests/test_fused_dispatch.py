"""The fused dispatch (rocketstore.queues.fused): the ConsumeQueue and index files it writes are
byte for byte those of the general path, whatever the records (keys, tags, delays, transactions,
damage, rolls of queue and index files), and its kernel refuses bad arguments with typed errors and
never reads or writes outside the buffers it is handed."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore import Message, MessageStore, _impl
from rocketstore.errors import StoreConfigError

compiled = pytest.mark.skipif(_impl.COMPILED is None, reason="compiled modules not built")

SEGMENT = 1 << 20
TOPICS = ("Alpha", "Beta", "Gamma-1%x")


def open_store(path, **options):
    options.setdefault("commitlog_file_size", SEGMENT)
    options.setdefault("consume_queue_units", 64)
    options.setdefault("index_slots", 97)
    options.setdefault("index_count", 200)
    options.setdefault("clean_resource_interval_ms", 0)
    options.setdefault("dispatch_interval_ms", 0)
    # no background delivery: a delay level due while a copy is rebuilt would append to its queues
    options.setdefault("schedule_interval_ms", 0)
    options.setdefault("timer_interval_ms", 0)
    return MessageStore(path, implementation="c", store_host="10.0.0.7", **options)


def fill(store, rng, count):
    """Puts of every kind dispatch meets: keys (one, several, doubled spaces, none, non-ASCII),
    tags, delay levels (SCHEDULE_TOPIC_XXXX with a DELAY), prepared and rolled-back transactions,
    batches and single puts, over several topics and queues."""
    for topic in TOPICS:
        store.create_topic(topic, 3)
    done = 0
    while done < count:
        topic = rng.choice(TOPICS)
        kind = rng.randrange(8)
        if kind == 0:
            n = rng.randrange(1, 40)
            store.put_messages(
                [Message(topic, b"b" * rng.randrange(0, 300), keys=f"k{done + i}") for i in range(n)]
            )
            done += n
            continue
        keys = rng.choice(
            [
                None,
                f"k{done}",
                f"k{done} x{done}",
                f"  a{done}  b ",
                "ключ",
                ["p", "q"],
                f"ascii-prefix-{done}-ключ-\U0001f600-tail-12345678",  # 8-byte ASCII blocks, then not
                f"ключ-{done}-then-a-long-ascii-tail",
            ]
        )
        tags = rng.choice([None, "TagA", "тег"])
        if kind == 1:
            store.put(topic, b"d" * 10, keys=keys, tags=tags, delay_level=rng.randrange(1, 5))
        elif kind == 2:
            sys_flag = rng.choice([0x4, 0x8, 0xC])  # prepared, commit, rollback
            store.put(Message(topic, b"t", keys=keys, tags=tags, sys_flag=sys_flag))
        else:
            store.put(topic, b"m" * rng.randrange(0, 200), keys=keys, tags=tags, queue_id=rng.randrange(3))
        done += 1
        if rng.random() < 0.05:
            store._opened.dispatcher.catch_up()  # dispatch in steps, as queries and the thread do


def queue_and_index_bytes(root):
    """Every ConsumeQueue file by path, and the index files' bytes in name order (their names
    are creation times)."""
    queues = {}
    for dirpath, _dirs, files in os.walk(os.path.join(root, "consumequeue")):
        for name in files:
            p = os.path.join(dirpath, name)
            with open(p, "rb") as f:
                queues[os.path.relpath(p, root)] = f.read()
    index = []
    index_dir = os.path.join(root, "index")
    for name in sorted(os.listdir(index_dir)) if os.path.isdir(index_dir) else []:
        with open(os.path.join(index_dir, name), "rb") as f:
            index.append(f.read())
    return queues, index


def rebuilt(src, dst, **options):
    """The queues and index a store opened on a copy of ``src``'s CommitLog alone dispatches."""
    shutil.copytree(src, dst)
    for name in ("consumequeue", "index"):
        shutil.rmtree(os.path.join(dst, name), ignore_errors=True)
    for name in ("checkpoint", "abort", "index_resume.json"):
        if os.path.exists(os.path.join(dst, name)):
            os.remove(os.path.join(dst, name))
    with open_store(str(dst), **options) as s:
        s._opened.dispatcher.catch_up()
    return queue_and_index_bytes(str(dst))


@compiled
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fused_writes_the_general_paths_bytes(tmp_path, seed):
    import random

    rng = random.Random(seed)
    root = tmp_path / "store"
    with open_store(str(root)) as s:
        assert s._opened.dispatcher._fused is not None
        fill(s, rng, 1500)
        s._opened.dispatcher.catch_up()
    live = queue_and_index_bytes(str(root))
    general = rebuilt(root, tmp_path / "general", fused_dispatch=False)
    fused = rebuilt(root, tmp_path / "fused")
    assert general[0].keys() == live[0].keys() == fused[0].keys()
    for path in general[0]:
        assert live[0][path] == general[0][path], path
        assert fused[0][path] == general[0][path], path
    assert len(general[1]) > 1  # the index rolled
    assert live[1] == general[1]
    assert fused[1] == general[1]


@compiled
def test_fused_dispatch_carries_most_records(tmp_path):
    """The general path takes only the records the fused pass stops before."""
    root = str(tmp_path / "store")
    calls = []
    with open_store(root, consume_queue_units=300_000, index_count=200_000) as s:
        s.create_topic("T", 4)
        original = s._opened.dispatcher._dispatch

        def counting(view, base, records):
            calls.append(len(records))
            return original(view, base, records)

        s._opened.dispatcher._dispatch = counting
        for i in range(20):
            s.put_messages([Message("T", b"x" * 50, keys=f"key-{i}-{j}") for j in range(1000)])
        s._opened.dispatcher.catch_up()
        assert s._opened.dispatcher.dispatched_records == 20_000
        for j in (0, 777, 999):
            assert [bytes(m.body) for m in s.query_by_key("T", f"key-7-{j}")] == [b"x" * 50]
    assert sum(calls) <= 4 * 64  # the first records of each queue, and no more


@compiled
def test_fused_dispatch_carries_most_records_after_a_reopen(tmp_path):
    """A loaded index file has no room allocated yet: the window allocates it (once, not a key
    at a time, which sent every record through the general path)."""
    root = str(tmp_path / "store")
    options = dict(consume_queue_units=300_000, index_count=200_000)
    with open_store(root, **options) as s:
        s.create_topic("T", 4)
        for i in range(10):  # 20,001 items: more than the first stretch allocated on load
            s.put_messages([Message("T", b"x" * 50, keys=f"key-{i}-{j}") for j in range(1000)])
    calls = []
    with open_store(root, **options) as s:
        original = s._opened.dispatcher._dispatch

        def counting(view, base, records):
            calls.append(len(records))
            return original(view, base, records)

        s._opened.dispatcher._dispatch = counting
        for i in range(10, 50):
            s.put_messages([Message("T", b"x" * 50, keys=f"key-{i}-{j}") for j in range(1000)])
        s._opened.dispatcher.catch_up()
        assert [bytes(m.body) for m in s.query_by_key("T", "key-20-5")] == [b"x" * 50]
    assert sum(calls) <= 4 * 64, calls


@compiled
def test_damage_is_stepped_over_alike(tmp_path):
    """A record with a flipped TOTALSIZE in the middle: the fused pass stops there, the general
    path steps over it, the fused pass resumes; the files are the general path's."""
    import random

    root = tmp_path / "store"
    with open_store(str(root)) as s:
        fill(s, random.Random(7), 300)
        s._opened.dispatcher.catch_up()
        mid = int(s.queue_units("Alpha", 1, 3, 1)[0]["commitlog_offset"])
    seg = os.path.join(root, "commitlog", "00000000000000000000")
    with open(seg, "r+b") as f:
        f.seek(mid)
        f.write(b"\x7f\x00\x00\x01")
    general = rebuilt(root, tmp_path / "general", fused_dispatch=False)
    fused = rebuilt(root, tmp_path / "fused")
    assert fused == general


def test_fused_dispatch_option_is_checked(tmp_path):
    with pytest.raises(StoreConfigError):
        MessageStore(str(tmp_path / "s"), fused_dispatch="yes")
    assert not os.path.exists(tmp_path / "s")


@compiled
def test_pure_build_takes_the_general_path(tmp_path):
    with MessageStore(str(tmp_path / "s"), implementation="py", dispatch_interval_ms=0) as s:
        assert s._opened.dispatcher._fused is None
        s.put("T", b"x", keys="k")
        assert len(s.query_by_key("T", "k")) == 1


# -- the kernel's arguments ---------------------------------------------------------------------


def _kernel():
    from rocketstore.queues import _index

    return _index


@compiled
def test_kernel_refuses_bad_tables():
    ix = _kernel()
    buf = bytearray(1000)
    units = bytearray(200)
    good = np.zeros((1, ix.FQ_COLUMNS), dtype=np.int64)
    good[0, ix.FQ_TOPIC_LEN] = 1
    good[0, ix.FQ_LIMIT] = 200
    good[0, ix.FQ_FILES] = 1
    good[0, ix.FQ_UNITS_PER_FILE] = 10
    assert ix.dispatch_fused(buf, 0, 1000, 0, 10, b"T", good, [units], None, 0, [])[1] == ix.FUSED_UNDECODED
    cases = [
        (TypeError, dict(table=good.astype(np.int32))),
        (TypeError, dict(table=np.zeros((1, 3), dtype=np.int64))),
        (ValueError, dict(units=[])),
        (ValueError, dict(lo=10, hi=5)),
        (ValueError, dict(hi=1001)),
        (ValueError, dict(max_records=-1)),
        (OverflowError, dict(base=2**63 - 10)),
    ]
    for exc, change in cases:
        args = dict(buf=buf, lo=0, hi=1000, base=0, max_records=10, names=b"T", table=good, units=[units])
        args.update(change)
        with pytest.raises(exc):
            ix.dispatch_fused(
                args["buf"], args["lo"], args["hi"], args["base"], args["max_records"], args["names"],
                args["table"], args["units"], None, 0, [],
            )  # fmt: skip
    for column, value in (
        (ix.FQ_TOPIC_POS, 5),
        (ix.FQ_WRITE_POS, 7),
        (ix.FQ_LIMIT, 201),
        (ix.FQ_FIRST_UNIT, -1),
    ):
        bad = good.copy()
        bad[0, column] = value
        with pytest.raises(ValueError):
            ix.dispatch_fused(buf, 0, 1000, 0, 10, b"T", bad, [units], None, 0, [])
    twice = np.concatenate([good, good])
    with pytest.raises(ValueError):
        ix.dispatch_fused(buf, 0, 1000, 0, 10, b"T", twice, [units, bytearray(200)], None, 0, [])
    with pytest.raises(BufferError):
        ix.dispatch_fused(buf, 0, 1000, 0, 10, b"T", good, [b"\0" * 200], None, 0, [])  # read-only units


def _records(tmp_path, n=30):
    """A real CommitLog segment's bytes (keyed records of one queue) and its store."""
    root = str(tmp_path / "k")
    with open_store(root, dispatch_interval_ms=0) as s:
        s.create_topic("T", 1)
        s.put_messages([Message("T", b"y" * 20, keys=f"a{i} b{i}", tags="t") for i in range(n)])
        end = s._opened.dispatcher._end_of()
    with open(os.path.join(root, "commitlog", "00000000000000000000"), "rb") as f:
        data = f.read(end)
    shutil.rmtree(root)
    return data


@compiled
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=8),
    cut=st.integers(0, 10**6),
)
def test_kernel_on_hostile_bytes_stays_inside_its_buffers(tmp_path_factory, flips, cut):
    """Damaged records (flipped bytes anywhere, a cut) never make the kernel touch memory outside
    its buffers: it writes units only inside their window, and stops rather than guess."""
    global _DATA
    ix = _kernel()
    if _DATA is None:
        _DATA = _records(tmp_path_factory.mktemp("fused"))
    data = bytearray(_DATA)
    for at, value in flips:
        data[at % len(data)] = value
    data = data[: cut % (len(data) + 1)]
    units = bytearray(20 * 40)
    table = np.zeros((1, ix.FQ_COLUMNS), dtype=np.int64)
    table[0, ix.FQ_TOPIC_LEN] = 1
    table[0, ix.FQ_LIMIT] = 20 * 10  # room for 10 units only
    table[0, ix.FQ_FILES] = 1
    table[0, ix.FQ_UNITS_PER_FILE] = 40
    index = ix.IndexFile(bytearray(ix.index_file_size(7, 16)), 7, 16)
    stop, reason, done, _ts = ix.dispatch_fused(
        bytes(data), 0, len(data), 0, 1000, b"T", table, [units], index, 16, [1000]
    )
    assert 0 <= stop <= len(data)
    assert done <= 10 and table[0, ix.FQ_WRITTEN] <= done
    assert table[0, ix.FQ_WRITE_POS] == 20 * table[0, ix.FQ_WRITTEN]
    assert not any(units[200:])  # nothing past the window
    assert index.index_count <= 16


_DATA = None


def redispatched(src, dst, damage=None, **options):
    """The queues and index after an abnormal open without a checkpoint of a copy of ``src``:
    every record is dispatched again over the queues and index already there."""
    shutil.copytree(src, dst)
    os.remove(os.path.join(dst, "checkpoint"))
    open(os.path.join(dst, "abort"), "wb").close()
    if damage is not None:
        damage(str(dst))
    with open_store(str(dst), **options) as s:
        s._opened.dispatcher.catch_up()
        assert s._opened.dispatcher.dispatched_records > 0
    return queue_and_index_bytes(str(dst))


def flip_unit(root, path="consumequeue/Alpha/1/00000000000000000000", unit=2):
    """Point one unit of a queue at another record's offset (a wrong unit below the end)."""
    with open(os.path.join(root, path), "r+b") as f:
        f.seek(unit * 20)
        offset = int.from_bytes(f.read(8), "big")
        f.seek(unit * 20)
        f.write((offset + 1).to_bytes(8, "big"))


@compiled
@pytest.mark.parametrize("damage", [None, flip_unit])
def test_redispatch_over_existing_files(tmp_path, damage):
    """Recovery without a checkpoint dispatches every record again: the units already there are
    compared (a wrong one rewritten by the general path), the keys indexed already skipped; the
    files end as the general path leaves them."""
    import random

    root = tmp_path / "store"
    with open_store(str(root)) as s:
        fill(s, random.Random(11), 1200)
        s._opened.dispatcher.catch_up()
    original = queue_and_index_bytes(str(root))
    general = redispatched(root, tmp_path / "general", damage, fused_dispatch=False)
    fused = redispatched(root, tmp_path / "fused", damage)
    assert fused == general
    if damage is None:
        assert fused == original


@compiled
def test_a_few_records_take_the_general_path(tmp_path):
    """Handing the pass every queue costs microseconds a queue: a catch-up of one put (a query
    right after it) does not pay that for 256 queues; a large range does take the pass."""
    from rocketstore.queues import fused

    with open_store(
        str(tmp_path / "s"), commitlog_file_size=8 << 20, consume_queue_units=1000, index_count=100_000
    ) as s:
        for t in range(32):
            s.create_topic(f"T{t}", 8)
            for q in range(8):
                s.put(f"T{t}", b"x", keys="k", queue_id=q)
        s._opened.dispatcher.catch_up()
        assert len(s._opened.dispatcher._fused.queues) == 256
        runs = []
        original = fused.FusedDispatch.run

        def counting(self, *args):
            runs.append(args)
            return original(self, *args)

        fused.FusedDispatch.run = counting  # type: ignore[method-assign]
        try:
            s.put("T3", b"y", keys="one", queue_id=2)
            assert [m.body for m in s.query_by_key("T3", "one")] == [b"y"]
            assert runs == []
            for i in range(8000):
                s.put(f"T{i % 32}", b"z" * 100, keys=f"many-{i}", queue_id=i % 8)
            s._opened.dispatcher.catch_up()
            assert runs
            assert [m.body for m in s.query_by_key("T7", "many-7")] == [b"z" * 100]
        finally:
            fused.FusedDispatch.run = original  # type: ignore[method-assign]


@compiled
def test_a_window_that_cannot_be_allocated_leaves_its_records_to_the_general_path(tmp_path, monkeypatch):
    """A full disk while a window allocates its next stretch: that queue's (or the index's)
    records take the general path, which meets the error only if it needs the room."""
    from rocketstore.errors import DiskFullError
    from rocketstore.queues.consumequeue import ConsumeQueue
    from rocketstore.queues.indexservice import IndexService

    root = str(tmp_path / "s")
    with open_store(root, consume_queue_units=10_000, index_count=100_000) as s:
        s.create_topic("T", 2)
        s.put_messages([Message("T", b"a", keys=f"a{i}") for i in range(200)])
        s._opened.dispatcher.catch_up()
        real = ConsumeQueue.tail_window

        def failing(self, files):
            if self.queue_id == 1:
                raise DiskFullError(28, "cannot allocate file space: No space left on device")
            return real(self, files)

        monkeypatch.setattr(ConsumeQueue, "tail_window", failing)
        monkeypatch.setattr(
            IndexService, "tail_window", lambda self: (_ for _ in ()).throw(DiskFullError(28, "full"))
        )
        s.put_messages([Message("T", b"b" * 100, keys=f"b{i}") for i in range(2000)])
        s._opened.dispatcher.catch_up()
        assert s._opened.dispatcher.dispatched_records == 2200
        assert [m.body for m in s.query_by_key("T", "b1999")] == [b"b" * 100]
        assert s.queue_units("T", 1, 0, 10_000)["size"].size == 1100


@compiled
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    first_unit=st.integers(0, 40),
    written=st.integers(0, 10),
    room=st.integers(0, 10),
    noise=st.binary(min_size=400, max_size=400),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4),
)
def test_kernel_writes_only_its_window_over_earlier_files(
    tmp_path_factory, first_unit, written, room, noise, flips
):
    """Two files of a queue (the first full of arbitrary bytes), records whose queue offsets fall
    anywhere: the kernel only ever writes units at the write position of the last file, within
    its room, and never the first file."""
    global _DATA
    ix = _kernel()
    if _DATA is None:
        _DATA = _records(tmp_path_factory.mktemp("fused"))
    data = bytearray(_DATA)
    for at, value in flips:
        data[at % len(data)] = value
    files = [bytearray(noise[:200]), bytearray(noise[200:])]  # 10 units each
    before = [bytes(f) for f in files]
    table = np.zeros((1, ix.FQ_COLUMNS), dtype=np.int64)
    table[0, ix.FQ_TOPIC_LEN] = 1
    table[0, ix.FQ_FIRST_UNIT] = first_unit
    table[0, ix.FQ_FILES] = 2
    table[0, ix.FQ_UNITS_PER_FILE] = 10
    table[0, ix.FQ_WRITE_POS] = 20 * written
    table[0, ix.FQ_LIMIT] = 20 * min(10, written + room)
    index = ix.IndexFile(bytearray(ix.index_file_size(7, 64)), 7, 64)
    ix.dispatch_fused(bytes(data), 0, len(data), 0, 1000, b"T", table, files, index, 64, [])
    assert bytes(files[0]) == before[0]
    end = int(table[0, ix.FQ_WRITE_POS])
    assert 20 * written <= end <= 20 * min(10, written + room)
    assert end - 20 * written == 20 * int(table[0, ix.FQ_WRITTEN])
    assert files[1][: 20 * written] == before[1][: 20 * written]
    assert files[1][end:] == before[1][end:]


@compiled
def test_a_replaced_queue_object_is_learned_again(tmp_path):
    """Should the store replace a queue's object, the pass writes to the new one, not the old."""
    from rocketstore.queues.consumequeue import ConsumeQueue

    with open_store(str(tmp_path / "s")) as s:
        s.put("T", b"x", keys="k", queue_id=0)
        s._opened.dispatcher.catch_up()
        fused = s._opened.dispatcher._fused
        old = fused.queues[("T", 0)]
        new = ConsumeQueue(str(tmp_path / "other"), "T", 0, 64)
        store = fused._queue_store
        real_get = store.get
        store.get = lambda topic, qid: new if (topic, qid) == ("T", 0) else real_get(topic, qid)
        try:
            fused.learn("T", 0)
            assert fused.queues[("T", 0)] is new and fused._order == [new]
            assert old is not new
        finally:
            store.get = real_get
            new.close()
