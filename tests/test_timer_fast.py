"""The fast paths of timer messages give what the general paths give: a timer put with no tags,
keys or properties (``TimerService.put``, codec ``timer_properties``) stores the record and raises
the errors ``rewrite`` does (so does a delayed one, ``ScheduleService.put``); a pass reads its units (codec ``timer_units``), takes them
(``TimerService._take``) and builds its copies (codec ``timer_copies``) as the unit-by-unit code
(``_deliver_time``, a heap of every new unit, ``_copy``) does, on both twins; a pass's copies are
flushed before the next intent and before ``deliver()`` returns."""

import heapq
import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_timer import open_store

from rocketstore import _impl
from rocketstore.services import timer as timer_mod
from rocketstore.services.timer import PASS_LIMIT, TIMER_TOPIC

DAY_MS = 86_400_000


@pytest.fixture
def pair(tmp_path, impl, clock):
    """Two stores on one clock: puts through the fast path go to the first, the same puts
    through the general path (``properties={}``) to the second."""
    a = open_store(tmp_path / "fast", impl, clock)
    b = open_store(tmp_path / "general", impl, clock)
    for s in (a, b):
        s.create_topic("TopicA", 4)
    yield a, b
    a.close()
    b.close()


def _outcome(store, **kwargs):
    """(topic, queue id, properties but UNIQ_KEY in stored order) of the put, or its error."""
    try:
        r = store.put("TopicA", b"body", **kwargs)
    except Exception as exc:  # the error is the outcome compared
        return type(exc), str(exc)
    m = store.read(r.commitlog_offset)
    return m.topic, m.queue_id, r.queue_id, [(k, v) for k, v in m.properties.items() if k != "UNIQ_KEY"]


CASES = [
    {"deliver_at_ms": 1500},
    {"delay_ms": 1500},
    {"delay_ms": 1},
    {"delay_ms": 0},  # due now: a plain message
    {"delay_ms": -5},
    {"deliver_at_ms": -(1 << 63)},
    {"deliver_at_ms": 10, "delay_ms": 10},
    {"delay_ms": 3 * DAY_MS + 1},  # past the horizon
    {"delay_ms": 3 * DAY_MS},
    {"delay_ms": True},
    {"delay_ms": 1.5},
    {"delay_ms": "10"},
    {"delay_ms": 1 << 63},
    {"deliver_at_ms": -(1 << 63) - 1},
    {"delay_ms": 100, "queue_id": 3},
    {"delay_ms": 100, "queue_id": 4},  # TopicA has 4 queues
    {"delay_ms": 100, "queue_id": -1, "flag": 7},
    {"delay_ms": 100, "durable": True},
]


@pytest.mark.parametrize("kwargs", CASES, ids=[",".join(f"{k}={v!r}" for k, v in c.items()) for c in CASES])
def test_a_plain_timer_put_stores_and_raises_what_the_general_path_does(pair, clock, kwargs):
    fast, general = pair
    if "deliver_at_ms" in kwargs and isinstance(kwargs["deliver_at_ms"], int) and kwargs["deliver_at_ms"] > 0:
        kwargs = dict(kwargs, deliver_at_ms=clock.now + kwargs["deliver_at_ms"])
    for _ in range(3):  # the round robin over the real topic's queues, too
        assert _outcome(fast, **kwargs) == _outcome(general, properties={}, **kwargs)


DELAY_CASES = [
    {"delay_level": 1},
    {"delay_level": 18},
    {"delay_level": 0},
    {"delay_level": 19},
    {"delay_level": -1},
    {"delay_level": True},
    {"delay_level": 1.0},
    {"delay_level": "1"},
    {"delay_level": 3, "queue_id": 3},
    {"delay_level": 3, "queue_id": 4},
    {"delay_level": 2, "flag": -3, "durable": False},
    {"delay_level": 2, "delay_ms": 100},
    {"delay_level": 2, "deliver_at_ms": 100},
]


@pytest.mark.parametrize(
    "kwargs", DELAY_CASES, ids=[",".join(f"{k}={v!r}" for k, v in c.items()) for c in DELAY_CASES]
)
def test_a_plain_delayed_put_stores_and_raises_what_the_general_path_does(pair, kwargs):
    fast, general = pair
    for _ in range(3):
        assert _outcome(fast, **kwargs) == _outcome(general, properties={}, **kwargs)


def test_the_fast_delayed_put_is_taken(pair, monkeypatch):
    fast, _ = pair
    monkeypatch.setattr(fast._opened.schedule, "rewrite", None)  # the general path would call it
    assert fast.put("TopicA", b"x", delay_level=2).ok


def test_a_plain_timer_put_to_a_new_topic_creates_it_as_the_general_path_does(pair, clock):
    fast, general = pair
    assert _outcome(fast, delay_ms=5) == _outcome(general, properties={}, delay_ms=5)
    for topic in ("NewTopic", "Other"):
        fast.put(topic, b"x", delay_ms=5)
        general.put(topic, b"x", delay_ms=5, properties={})
        fast.put(topic + "D", b"x", delay_level=1)
        general.put(topic + "D", b"x", delay_level=1, properties={})
    assert fast.topics == general.topics


def test_the_fast_timer_put_is_taken(pair, clock, monkeypatch):
    """The test above compares two paths: the plain put must really be the fast one."""
    fast, _ = pair
    monkeypatch.setattr(fast._opened.timer, "rewrite", None)  # the general path would call it
    assert fast.put("TopicA", b"x", delay_ms=5).ok


def test_a_closed_store_refuses_a_timer_put(tmp_path, impl, clock):
    s = open_store(tmp_path / "s", impl, clock)
    s.close()
    with pytest.raises(Exception, match="closed"):
        s.put("TopicA", b"x", delay_ms=5)


# ---- the codec's timer calls, twin against twin ------------------------------------------------

_text = st.text(alphabet=st.sampled_from("aZ09_-\x01\x02é\ud800"), max_size=6)
_int = st.one_of(st.integers(-(1 << 70), 1 << 70), st.booleans(), st.none(), _text)


@settings(max_examples=300)
@given(name=_text, value=_int, deliver=_int, topic=_text, queue_id=_int)
def test_timer_properties_twins_agree(name, value, deliver, topic, queue_id):
    if _impl.COMPILED is None:
        pytest.skip("the compiled modules are not built")
    outcomes = []
    for codec in (_impl.COMPILED.codec, _impl.PURE.codec):
        try:
            outcomes.append(codec.timer_properties(name, value, deliver, topic, queue_id))
        except Exception as exc:  # the error is the outcome compared
            outcomes.append((type(exc), str(exc)))
    assert outcomes[0] == outcomes[1]


NAMES = [
    "REAL_TOPIC",
    "REAL_QID",
    "TIMER_OUT_MS",
    "UNIQ_KEY",
    "__CRC32#",
    "TIMER_DEQUEUE_MS",
    "TAGS",
    "a",
    "é",
]
VALUES = [b"TopicA", b"TopicB", b"0", b"3", b"9", b"-1", b"+1", b"x\x01y", b"\xff", b"123", b"0123",
          b"99999999999999999999", b"rmq_sys_wheel_timer", b"bad topic", b""]  # fmt: skip


@st.composite
def _raw_properties(draw):
    """Encoded properties of a timer record: mostly the usual shape, often something odd."""
    pieces = [b"REAL_TOPIC\x01TopicA", b"REAL_QID\x011", b"TIMER_OUT_MS\x01%d" % draw(st.integers(0, 10**6))]
    for _ in range(draw(st.integers(0, 14))):
        name = draw(st.sampled_from(NAMES)).encode()
        if draw(st.booleans()):
            name = b"p%d" % draw(st.integers(0, 40))  # many distinct names: HashMap resizes
        pieces.insert(draw(st.integers(0, len(pieces))), name + b"\x01" + draw(st.sampled_from(VALUES)))
    if draw(st.integers(0, 9)) == 0:
        pieces.insert(
            draw(st.integers(0, len(pieces))), draw(st.sampled_from([b"", b"x", b"\x01v", b"n\x01"]))
        )
    return b"\x02".join(pieces) + draw(st.sampled_from([b"\x02", b""]))


@pytest.fixture
def timer_store(tmp_path, impl, clock):
    s = open_store(tmp_path / "store", impl, clock)
    s.create_topic("TopicA", 4)
    s.put("TopicA", b"seed", delay_ms=10)  # the timer topic exists
    yield s
    s.close()


def _put_raw(store, props, unique=False, sys_flag=0):
    """A record in the timer topic with these exact properties (and a UNIQ_KEY the core adds,
    unless ``unique``)."""
    return store._opened.core.put(
        TIMER_TOPIC, b"body", props, 0, 5, 1234, sys_flag, 2, 0, "K" if unique else None, 0
    )


def _units(store):
    svc = store._opened.timer
    svc._parts.dispatcher.catch_up()
    return svc._read_units(0, svc._queue().max_offset)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batch=st.lists(st.tuples(_raw_properties(), st.booleans(), st.sampled_from([0, 0x10, 0x30])), max_size=8)
)
def test_timer_copies_are_the_copies_copy_builds(timer_store, batch):
    """Every copy the compiled codec builds is the one ``_copy`` builds; every record ``_copy``
    drops or builds otherwise is left to it."""
    for props, unique, sys_flag in batch:
        _put_raw(timer_store, props, unique, sys_flag)
    svc = timer_store._opened.timer
    commitlog = svc._parts.commitlog
    units = _units(timer_store)
    dequeue = 1_700_000_000_123
    for codec in {_impl.PURE.codec, commitlog.codec}:
        items, careful = codec.timer_copies(
            [u[2] for u in units],
            commitlog.segments,
            commitlog.core,
            dequeue,
            svc._real_topic,
            {},
            timer_mod._order_indices,
            svc._room,
        )
        assert len(items) == len(units) and careful == sorted(careful)
        for i, u in enumerate(units):
            expected = svc._copy(u, dequeue)
            if i in careful:
                assert items[i] is None
            else:
                assert expected is not None and items[i] == expected[0], (i, u)


def test_timer_copies_build_the_usual_record_in_the_compiled_twin(timer_store):
    """The usual records are built by the codec (else the test above could not fail)."""
    if not timer_store._impl.compiled:
        pytest.skip("the pure twin leaves every record to _copy")
    for n in range(5):
        timer_store.put("TopicA", b"m%d" % n, delay_ms=10 + n, tags="T", keys="k")
    _put_raw(
        timer_store,
        b"REAL_TOPIC\x01TopicA\x02REAL_QID\x012\x02TIMER_OUT_MS\x0155\x02__CRC32#\x010000000001\x02",
    )
    _put_raw(timer_store, b"REAL_TOPIC\x01TopicA\x02REAL_QID\x012\x02TIMER_OUT_MS\x0155\x02REAL_QID\x011\x02")
    svc = timer_store._opened.timer
    commitlog = svc._parts.commitlog
    units = _units(timer_store)
    items, careful = commitlog.codec.timer_copies(
        [u[2] for u in units], commitlog.segments, commitlog.core, 77, svc._real_topic, {},
        timer_mod._order_indices, svc._room,
    )  # fmt: skip
    assert careful == [len(units) - 1]  # REAL_QID twice: decode_properties keeps the last
    assert [i[0] for i in items[:-1]] == ["TopicA"] * (len(units) - 1)
    for i, u in enumerate(units[:-1]):
        assert items[i] == svc._copy(u, 77)[0]


def test_timer_units_twins_read_what_the_careful_path_reads(timer_store):
    for props in (
        b"TIMER_OUT_MS\x01123\x02",
        b"TIMER_OUT_MS\x01+123\x02",
        b"TIMER_OUT_MS\x01x\x02",
        b"TIMER_OUT_MS\x0199999999999999999999\x02",
        b"TIMER_OUT_MS\x011\x02TIMER_OUT_MS\x012\x02",
        b"TIMER_OUT_MS\x01\x02",
        b"A\x01b\x02",
        b"",
    ):
        _put_raw(timer_store, props)
    svc = timer_store._opened.timer
    commitlog = svc._parts.commitlog
    svc._parts.dispatcher.catch_up()
    cq = svc._queue()
    view = cq.units(0, cq.max_offset)
    for codec in (_impl.PURE.codec, commitlog.codec):
        found, careful = codec.timer_units(view, 0, commitlog.segments, commitlog.core)
        assert [u[1:] for u in found] == [(q, int(view[q]["commitlog_offset"])) for q in range(len(view))]
        for i, (deliver, _q, offset) in enumerate(found):
            assert (deliver is None) == (i in careful)
            if deliver is not None:
                assert deliver == svc._deliver_time(offset)
        # plain digits only: a sign, a letter, a value past 18 digits go to the careful path
        assert [u[0] for u in found[1:]] == [123, None, None, None, 2, 0, 0, 0]
    assert [u[0] for u in svc._read_units(1, cq.max_offset)] == [123, 123, 0, 0, 2, 0, 0, 0]


# ---- a pass's units, taken as the heap of every new unit takes them ----------------------------


def _take_with_a_heap(heap, new, from_w, now, limit):
    """The unit-by-unit pass: every new unit above the watermark pushed, the due ones popped."""
    heap = list(heap)
    late = sorted(u for u in new if (u[0], u[1]) <= from_w)
    for u in new:
        if (u[0], u[1]) > from_w:
            heapq.heappush(heap, u)
    taken, to_w = list(late), from_w
    while heap and heap[0][0] <= now and len(taken) < limit + len(late):
        u = heapq.heappop(heap)
        taken.append(u)
        to_w = (u[0], u[1])
    return taken, to_w, sorted(heap)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 40), max_size=30),
    st.lists(st.integers(0, 40), max_size=30),
    st.integers(0, 40),
    st.integers(0, 40),
    st.integers(1, 12),
)
def test_take_is_the_heap_of_every_new_unit(waiting, fresh, w_time, now, limit):
    seed = random.Random(len(waiting) * 1000 + len(fresh))
    # waiting units: queue offsets below Q (10_000) and keys above the watermark
    heap = [(t + w_time + 1, q, q * 7) for q, t in enumerate(waiting)]
    heapq.heapify(heap)
    # W's queue offset is below the new units' but after a power cut took units away
    w = (w_time, seed.choice([-1, 3, 10_000 + seed.randrange(0, 35)]))
    new = [(t, 10_000 + i, 99 + i) for i, t in enumerate(fresh)]
    expected = _take_with_a_heap(heap, new, w, now, limit)
    svc = timer_mod.TimerService.__new__(timer_mod.TimerService)
    svc._heap, svc._offsets, svc._gone = list(heap), sorted(u[1] for u in heap), set()
    old = timer_mod.PASS_LIMIT
    timer_mod.PASS_LIMIT = limit
    try:
        taken, to_w = svc._take(new, w, now)
    finally:
        timer_mod.PASS_LIMIT = old
    assert (taken, to_w, sorted(svc._heap)) == expected
    pending = {u[1] for u in svc._heap}
    assert sorted(q for q in svc._offsets if q not in svc._gone) == sorted(pending)


def test_pass_limit_is_the_enqueue_limit():
    """A pass reads no more new units than it may take: due ones never go through the heap."""
    assert PASS_LIMIT == timer_mod.ENQUEUE_LIMIT


# ---- flushing --------------------------------------------------------------------------------


def test_deliver_returns_with_the_copies_flushed(timer_store, clock):
    for n in range(50):
        timer_store.put("TopicA", b"m%d" % n, delay_ms=1 + n)
    assert timer_store.deliver_timers(clock.now + 100) == 51
    core = timer_store._opened.timer._parts.commitlog.core
    assert core.flushed_offset >= core.wrote_offset


def test_a_failed_flush_of_a_pass_is_rolled_forward_by_the_next(tmp_path, clock):
    """The pure core (a Python object) is made to fail the wait for the last pass's flush: the
    error reaches the caller, and the next call settles that pass from the file, once."""
    s = open_store(tmp_path / "s", _impl.PURE, clock)
    try:
        s.create_topic("TopicA", 1)
        for n in range(10):
            s.put("TopicA", b"m%d" % n, delay_ms=1 + n)
        svc = s._opened.timer
        core = svc._parts.commitlog.core
        real = core.wait_flushed
        core.wait_flushed = lambda offset, timeout_ms=-1: 5  # EIO
        with pytest.raises(RuntimeError, match="flush"):
            s.deliver_timers(clock.now + 5)
        core.wait_flushed = real
        s.deliver_timers(clock.now + 100)
        got = [s.get_by_queue_offset("TopicA", 0, q).body for q in range(*s.queues()[("TopicA", 0)])]
        assert sorted(got) == sorted(b"m%d" % n for n in range(10))
        assert svc.stats()["reconciled"] == 1
    finally:
        s.close()


@pytest.mark.parametrize("cached", [False, True])
def test_timer_copies_refuse_an_order_that_is_not_a_permutation(timer_store, cached):
    """The copy is written by the order's indices: a bad one (given or cached) raises, never
    writes out of bounds. (The pure twin asks for no order.)"""
    if not timer_store._impl.compiled:
        pytest.skip("the pure twin leaves every record to _copy")
    svc = timer_store._opened.timer
    commitlog = svc._parts.commitlog
    offsets = [u[2] for u in _units(timer_store)]
    orders = {}
    order_of = timer_mod._order_indices
    if cached:
        commitlog.codec.timer_copies(
            offsets, commitlog.segments, commitlog.core, 5, svc._real_topic, orders, order_of, svc._room
        )
        orders = {key: (0,) * len(order) for key, order in orders.items()}
    else:
        order_of = lambda names: (0,) * (len(names) + 1)  # noqa: E731
    with pytest.raises(ValueError, match="permutation"):
        commitlog.codec.timer_copies(
            offsets, commitlog.segments, commitlog.core, 5, svc._real_topic, orders, order_of, svc._room
        )


_ROW = struct.Struct("<iiiiiiiiq")


def _rows(rows, topics):
    """The copies of ``timer_copy_rows``' rows as put_many items (the unique key True when the
    properties hold one), None for a row that stands for the careful path's copy."""
    out, at = [], 0
    while at < len(rows):
        topic, qid, flag, sys_flag, reconsume, body_len, props_len, has_key, born = _ROW.unpack_from(rows, at)
        at += _ROW.size
        body, props = rows[at : at + body_len], rows[at + body_len : at + body_len + props_len]
        at += body_len + props_len
        out.append(
            None
            if topic == -1
            else (topics[topic], body, props, qid, flag, born, sys_flag, reconsume, True if has_key else None)
        )
    return out


def _copy_rows(codec, svc, units, dequeue, out=None):
    """``(rows, topics, careful)`` of ``timer_copy_rows`` (into ``out``, a bytearray)."""
    commitlog = svc._parts.commitlog
    out = bytearray() if out is None else out
    used, topics, careful = codec.timer_copy_rows(
        [u[2] for u in units], commitlog.segments, commitlog.core, dequeue, svc._real_topic, {},
        timer_mod._order_indices, svc._room, out,
    )  # fmt: skip
    return bytes(out[:used]), topics, careful


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batch=st.lists(st.tuples(_raw_properties(), st.booleans(), st.sampled_from([0, 0x10, 0x30])), max_size=8)
)
def test_timer_copy_rows_hold_the_copies_timer_copies_builds(timer_store, batch):
    """A row of ``timer_copy_rows`` holds what the item of ``timer_copies`` holds; the careful
    path's rows are heads alone, at the same indices."""
    for props, unique, sys_flag in batch:
        _put_raw(timer_store, props, unique, sys_flag)
    svc = timer_store._opened.timer
    commitlog = svc._parts.commitlog
    units = _units(timer_store)
    dequeue = 1_700_000_000_123
    for codec in {_impl.PURE.codec, commitlog.codec}:
        items, careful = codec.timer_copies(
            [u[2] for u in units], commitlog.segments, commitlog.core, dequeue, svc._real_topic, {},
            timer_mod._order_indices, svc._room,
        )  # fmt: skip
        rows, topics, careful_rows = _copy_rows(codec, svc, units, dequeue)
        assert careful_rows == careful
        # into a bytearray that held longer rows: the same rows, and it is not shrunk
        out = bytearray(b"\xff" * (len(rows) + 100))
        assert _copy_rows(codec, svc, units, dequeue, out) == (rows, topics, careful)
        assert len(out) == len(rows) + 100
        got = _rows(rows, topics)
        assert len(got) == len(units)
        for i, item in enumerate(items):
            if item is None:
                assert got[i] is None and i in careful
            else:
                assert got[i] == (*item[:8], True if item[8] is not None else None), i
                if item[8] is not None:  # put_copies then generates none: the properties hold it
                    assert b"UNIQ_KEY\x01%s\x02" % item[8].encode() in got[i][2]


def test_put_copies_writes_the_records_put_many_writes(timer_store):
    """The same copies through ``put_copies`` (rows, and a careful item where a row stands for
    one) and through ``put_many`` (items): the same records but the store's own fields."""
    for n in range(6):
        timer_store.put("TopicA", b"m%d" % n, delay_ms=10 + n, tags="T", keys="k")
    _put_raw(timer_store, b"REAL_TOPIC\x01TopicA\x02REAL_QID\x012\x02TIMER_OUT_MS\x0155\x02REAL_QID\x011\x02")
    _put_raw(timer_store, b"REAL_TOPIC\x01TopicA\x02REAL_QID\x013\x02TIMER_OUT_MS\x0156\x02", unique=True)
    svc = timer_store._opened.timer
    core = timer_store._opened.core
    units = _units(timer_store)
    rows, topics, careful = _copy_rows(svc._parts.commitlog.codec, svc, units, 99)
    items = [svc._copy(units[i], 99)[0] for i in careful]
    expected = [svc._copy(u, 99)[0] for u in units]
    start = core.wrote_offset
    written, end = core.put_copies(rows, topics, items)
    assert written == len(units) and end == core.wrote_offset
    middle = core.wrote_offset
    results = core.put_many(expected, 0)
    assert core.wrote_offset - middle == end - start

    def fields(offset):
        m = timer_store.read(offset)
        props = dict(m.properties)
        return (m.topic, m.queue_id, m.body, m.flag, m.born_timestamp, m.sys_flag, m.reconsume_times, props)

    offsets, at = [], start
    for r in results:
        offsets.append(at)
        at += r.size
    theirs = [fields(r.commitlog_offset) for r in results]
    mine = [fields(o) for o in offsets]
    for a, b in zip(mine, theirs):
        if "UNIQ_KEY" not in b[7] or a[7]["UNIQ_KEY"] != b[7]["UNIQ_KEY"]:  # generated: each its own
            a[7].pop("UNIQ_KEY", None)
            b[7].pop("UNIQ_KEY", None)
        assert a == b


@pytest.mark.parametrize(
    ("rows", "topics", "items", "error"),
    [
        (_ROW.pack(0, 0, 0, 0, 0, 0, 0, 1, 0)[:39], ["TopicA"], [], "torn"),
        (_ROW.pack(0, 0, 0, 0, 0, 5, 0, 1, 0) + b"abcd", ["TopicA"], [], "overrun"),
        (_ROW.pack(0, 0, 0, 0, 0, -1, 0, 1, 0), ["TopicA"], [], "overrun"),
        (_ROW.pack(1, 0, 0, 0, 0, 0, 0, 1, 0), ["TopicA"], [], "not one of"),
        (_ROW.pack(-1, 0, 0, 0, 0, 0, 0, 0, 0), ["TopicA"], [], "fewer items"),
        (_ROW.pack(-1, 0, 0, 0, 0, 0, 0, 0, 0), ["TopicA"], [None, None], "more items"),
        (_ROW.pack(0, 9, 0, 0, 0, 1, 0, 1, 0) + b"x", ["TopicA"], [], "out of range"),
    ],
)
def test_put_copies_refuses_bad_rows_before_writing(timer_store, rows, topics, items, error):
    core = timer_store._opened.core
    good = _ROW.pack(0, 1, 0, 0, 0, 2, 0, 0, 0) + b"ok"
    before = core.wrote_offset
    with pytest.raises(Exception, match=error):
        core.put_copies(good + rows, topics, items)
    assert core.wrote_offset == before
    assert core.put_copies(b"", [], []) == (0, 0)
    assert core.put_copies(_ROW.pack(-1, 0, 0, 0, 0, 0, 0, 0, 0), [], [None]) == (0, 0)
