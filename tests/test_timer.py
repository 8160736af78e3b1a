"""Timer messages (rocketstore.services.timer, RocketMQ 5.x's wheel timer): the rmq_sys_wheel_timer rewrite
on put, delivery at the millisecond in deliver-time order with an injected clock, the copy's
fields, config/timerProgress, restarts and interrupted passes (exactly once), bad input, and a
hypothesis state machine over put / advance / deliver / restart / crash on both twins."""

import shutil
import tempfile
import time

import pytest
from conftest import FakeClock
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from test_schedule import HOST, copies
from test_schedule import open_store as open_schedule_store

from rocketstore import Message, MessageStore
from rocketstore.base._clock import now_ms
from rocketstore.errors import (
    InvalidQueueIdError,
    InvalidTimerError,
    StoreConfigError,
    StoreReadOnlyError,
    SystemTopicError,
    TimerTooFarError,
)
from rocketstore.queues.timerwheel import read_timer_check
from rocketstore.services.timer import TIMER_TOPIC, TimerProgress, intent_units

DAY_MS = 86_400_000


def open_store(path, impl, clock, **options):
    """test_schedule's store, with the timer thread off too (tests deliver by hand)."""
    options.setdefault("timer_interval_ms", 0)
    return open_schedule_store(path, impl, clock, **options)


@pytest.fixture
def store(tmp_path, impl, clock):
    s = open_store(tmp_path / "store", impl, clock)
    yield s
    s.close()


def test_timer_put_is_stored_in_the_timer_topic_as_a_5x_broker_stores_it(store, clock):
    r = store.put("TopicA", b"hello", tags="TagA", keys="k1", queue_id=2, delay_ms=1500)
    assert r.ok and (r.queue_id, r.queue_offset) == (0, 0)
    m = store.read(r.commitlog_offset)
    assert (m.topic, m.queue_id) == (TIMER_TOPIC, 0)
    assert m.properties["TIMER_DELAY_MS"] == "1500"
    assert m.properties["TIMER_OUT_MS"] == str(clock.now + 1500)
    assert (m.properties["REAL_TOPIC"], m.properties["REAL_QID"]) == ("TopicA", "2")
    assert (m.tags, m.keys) == ("TagA", "k1")
    assert store.queues()[(TIMER_TOPIC, 0)] == (0, 1)
    assert copies(store, "TopicA") == []


@pytest.mark.parametrize(
    "props, due_in",
    [
        ({"TIMER_DELIVER_MS": "+{at}"}, 2500),
        ({"TIMER_DELAY_SEC": "3"}, 3000),
        ({"TIMER_DELAY_MS": "7"}, 7),
        ({"TIMER_DELAY_MS": "1", "DELAY": "0"}, 1),
    ],
)
def test_the_raw_timer_properties_a_5x_client_sets_are_honoured(store, clock, props, due_in):
    props = {k: v.format(at=clock.now + 2500) for k, v in props.items()}
    r = store.put("TopicA", b"x", properties=props, queue_id=1)
    m = store.read(r.commitlog_offset)
    assert m.topic == TIMER_TOPIC and m.properties["TIMER_OUT_MS"] == str(clock.now + due_in)
    assert store.deliver_timers(clock.now + due_in - 1) == 0
    assert store.deliver_timers(clock.now + due_in) == 1
    [c] = copies(store, "TopicA")
    assert (c.queue_id, c.body, c.unique_key) == (1, b"x", m.unique_key)


def test_a_message_with_a_timer_property_from_a_message_object(store, clock):
    msg = Message("TopicA", b"obj", properties={"TIMER_DELAY_MS": "10"}, flag=7, reconsume_times=2)
    [r] = store.put_messages([msg])
    assert store.read(r.commitlog_offset).topic == TIMER_TOPIC
    r2 = store.put(Message("TopicA", b"obj2"), deliver_at_ms=clock.now + 10)
    assert store.read(r2.commitlog_offset).topic == TIMER_TOPIC
    assert store.deliver_timers(clock.now + 10) == 2
    a, b = copies(store, "TopicA")
    assert (a.body, a.flag, a.reconsume_times) == (b"obj", 7, 2)
    assert b.body == b"obj2"


@pytest.mark.parametrize("when", [0, -5, "past"])
def test_a_deliver_time_not_in_the_future_is_a_plain_message(store, clock, when):
    if when == "past":
        r = store.put("TopicA", b"x", deliver_at_ms=clock.now - 1)
    else:
        r = store.put("TopicA", b"x", delay_ms=when)
    m = store.read(r.commitlog_offset)
    assert m.topic == "TopicA"
    assert TIMER_TOPIC not in {t for t, _q in store.queues()}


def test_delivered_copy_is_what_a_5x_broker_writes(store, clock):
    r = store.put(
        "TopicA", b"body", tags="T", keys="k", properties={"a": "1"}, queue_id=3, flag=5, delay_ms=20
    )
    timer_record = store.read(r.commitlog_offset)
    assert store.deliver_timers(clock.now + 25) == 1
    [c] = copies(store, "TopicA")
    assert (c.topic, c.queue_id, c.queue_offset, c.flag) == ("TopicA", 3, 0, 5)
    assert c.body == b"body" and c.born_timestamp == timer_record.born_timestamp
    expected = {k: v for k, v in timer_record.properties.items() if k not in ("REAL_TOPIC", "REAL_QID")}
    expected["TIMER_DEQUEUE_MS"] = str(clock.now + 25)
    assert c.properties == expected
    assert c.unique_key == r.unique_key  # the client's message id survives
    assert store.query_by_key("TopicA", "k")[0].body == b"body"


def test_delivery_at_every_millisecond_in_deliver_time_order(store, clock, rng):
    start = clock.now
    due = [start + rng.randrange(1, 400) for _ in range(300)]
    for i, at in enumerate(due):
        store.put("TopicA", b"%d" % i, deliver_at_ms=at, queue_id=0)
    delivered = []
    for t in range(start, start + 401):
        store.deliver_timers(t)
        now_copies = copies(store, "TopicA")
        new = now_copies[len(delivered) :]
        delivered = now_copies
        assert all(due[int(m.body)] == t for m in new), f"at {t}: {[(m.body, due[int(m.body)]) for m in new]}"
    order = [int(m.body) for m in delivered]
    assert order == sorted(range(300), key=lambda i: (due[i], i))  # time order, then put order
    assert store.timer_stats()["pending"] == 0


def test_progress_file_under_config_holds_the_state(store, clock, tmp_path):
    store.put("TopicA", b"x", delay_ms=5)
    store.put("TopicA", b"y", delay_ms=50)
    store.deliver_timers(clock.now + 5)
    path = tmp_path / "store" / "config" / "timerProgress"
    assert path.stat().st_size == 2 * TimerProgress.SLOT_SIZE
    p = TimerProgress.in_store(tmp_path / "store", read_only=True)
    assert (p.enqueue_offset, p.first_pending, p.watermark, p.intent) == (2, 1, (clock.now + 5, 0), None)
    # and RocketMQ 5.x's, for a broker taking over (docs/guide/timers.md): one unit per message,
    # the checkpoint (written at close, or once a second) past both
    store.close()
    for name in ("timerlog", "timerwheel", "config/timercheck"):
        assert (tmp_path / "store" / name).exists()
    check = read_timer_check(tmp_path / "store")
    assert (check.queue_offset, check.timerlog_flush_pos) == (2, 2 * 52)


def test_restart_delivers_each_message_once(tmp_path, impl, clock, rng):
    path = tmp_path / "store"
    store = open_store(path, impl, clock)
    due = {}
    for i in range(80):
        r = store.put("TopicA", b"m%d" % i, delay_ms=rng.randrange(1, 10_000))
        due[r.unique_key] = int(store.read(r.commitlog_offset).properties["TIMER_OUT_MS"])
    half = clock.now + 5000
    first = store.deliver_timers(half)
    store.close()
    assert first == sum(1 for d in due.values() if d <= half)
    store = open_store(path, impl, clock)
    assert store.timer_stats()["pending"] == 80 - first
    assert store.deliver_timers(half) == 0  # nothing repeated
    assert store.deliver_timers(clock.now + 10_000) == 80 - first
    store.close()
    store = open_store(path, impl, clock)
    assert store.deliver_timers(clock.now + DAY_MS) == 0
    assert sorted(m.unique_key for m in copies(store, "TopicA")) == sorted(due)
    store.close()


class _Crash(Exception):
    pass


def _crash_on_persist(store, call):
    """ "Crash" the next pass at its ``call``-th write of config/timerProgress from its intent on:
    1, right after the intent is written; 2, right before the state after would be written."""
    progress = store._opened.timer._progress
    real = progress.persist
    calls = []

    def persist():
        if not calls and progress.intent is None:
            return real()  # a state written before the pass's intent (its first timer checkpoint's)
        calls.append(1)
        if len(calls) == call:
            if call == 1:
                real()
            progress.persist = real
            raise _Crash()
        return real()

    progress.persist = persist


def test_rocketstore_s_own_timer_checkpoint_is_not_taken_for_a_broker_s(tmp_path, impl, clock):
    """A store whose timers rocketstore read but did not deliver yet closes with RocketMQ's
    timer checkpoint (config/timercheck, for a broker taking over) and no delivery state of
    its own: opened again, rocketstore must not take that checkpoint for a broker's (whose
    read time says everything due before its slot was delivered) and deliver a message put
    since, due before that slot, early."""
    clock.now = clock.now // 1000 * 1000 + 990  # 10 ms before a timer slot starts
    path = tmp_path / "store"
    store = open_store(path, impl, clock)
    store.put("TopicA", b"next-slot", delay_ms=10)
    assert store.deliver_timers() == 0
    store.close()
    assert read_timer_check(path) is not None
    store = open_store(path, impl, clock)
    try:
        store.put("TopicA", b"this-slot", deliver_at_ms=clock.now + 1)
        assert store.deliver_timers() == 0, "delivered before its time"
        clock.now += 1
        assert store.deliver_timers() == 1
        clock.now += 9
        assert store.deliver_timers() == 1
        assert store.timer_stats()["pending"] == 0
    finally:
        store.close()


@pytest.mark.parametrize("written", ["none", "some", "all"])
def test_an_interrupted_pass_is_rolled_forward_on_open_exactly_once(tmp_path, impl, clock, written):
    path = tmp_path / "store"
    store = open_store(path, impl, clock)
    for i in range(10):
        store.put("TopicA", b"m%d" % i, delay_ms=10 - i % 3)
    store.put("TopicA", b"later", delay_ms=1000)
    svc = store._opened.timer
    _crash_on_persist(store, 2 if written == "all" else 1)
    with pytest.raises(_Crash):
        store.deliver_timers(clock.now + 10)
    intent = TimerProgress.in_store(path, read_only=True).intent
    assert intent is not None
    if written == "some":  # the first 4 copies made it, in order, before the crash
        units = intent_units(svc._read_units(0, intent["to"][0]), intent)
        store._opened.core.put_many([svc._copy(u, intent["dequeueMs"])[0] for u in units[:4]], 0)
    store.close()  # a clean close keeps the intent: the next open settles it
    assert TimerProgress.in_store(path, read_only=True).intent is not None
    store = open_store(path, impl, clock)
    stats = store.timer_stats()
    assert stats["reconciled"] == 1
    assert stats["resumed"] == {"none": 0, "some": 4, "all": 10}[written]
    assert stats["delivered"] == 10 - stats["resumed"]
    bodies = [m.body for m in copies(store, "TopicA")]
    assert sorted(bodies) == sorted(b"m%d" % i for i in range(10))
    assert store.deliver_timers(clock.now + 1000) == 1
    store.close()
    assert TimerProgress.in_store(path, read_only=True).intent is None


def test_a_failed_pass_is_settled_before_the_next_one(store, clock):
    for i in range(5):
        store.put("TopicA", b"m%d" % i, delay_ms=3)
    _crash_on_persist(store, 2)
    with pytest.raises(_Crash):
        store.deliver_timers(clock.now + 3)
    assert store.deliver_timers(clock.now + 3) == 0
    assert store.timer_stats()["reconciled"] == 1
    assert len(copies(store, "TopicA")) == 5


@pytest.mark.parametrize(
    "kwargs, error",
    [
        (dict(delay_ms=3 * DAY_MS + 1), TimerTooFarError),
        (dict(properties={"TIMER_DELAY_SEC": str(3 * 86400 + 1)}), TimerTooFarError),
        (dict(delay_ms="5"), InvalidTimerError),
        (dict(delay_ms=True), InvalidTimerError),
        (dict(delay_ms=1.5), InvalidTimerError),
        (dict(delay_ms=1 << 63), InvalidTimerError),
        (dict(delay_ms=5, deliver_at_ms=5), InvalidTimerError),
        (dict(delay_ms=5, delay_level=2), InvalidTimerError),
        (dict(properties={"TIMER_DELAY_MS": "5", "TIMER_DELAY_SEC": "5"}), InvalidTimerError),
        (dict(properties={"TIMER_DELAY_MS": "5", "DELAY": "2"}), InvalidTimerError),
        (dict(properties={"TIMER_DELAY_MS": "5 "}), InvalidTimerError),
        (dict(properties={"TIMER_DELIVER_MS": "soon"}), InvalidTimerError),
        (dict(properties={"TIMER_DELAY_MS": "5"}, delay_ms=5), InvalidTimerError),
        (dict(delay_ms=5, queue_id=9), InvalidQueueIdError),
    ],
)
def test_bad_timer_raises_and_writes_nothing(store, kwargs, error):
    before = store.max_offset
    with pytest.raises(error):
        store.put("TopicA", b"x", **kwargs)
    assert store.max_offset == before
    assert issubclass(error, ValueError)


def test_horizon_is_configurable_and_a_batch_cannot_be_timed(tmp_path, impl, clock):
    store = open_store(tmp_path / "store", impl, clock, timer_max_delay_sec=60)
    try:
        store.put("TopicA", b"x", delay_ms=60_000)
        with pytest.raises(TimerTooFarError):
            store.put("TopicA", b"x", delay_ms=60_001)
        with pytest.raises(InvalidTimerError):
            store.put_batch("TopicA", [b"a", b"b"], properties={"TIMER_DELAY_MS": "5"})
        with pytest.raises(SystemTopicError):
            store.put(TIMER_TOPIC, b"x")
    finally:
        store.close()


def test_an_undeliverable_record_is_counted_and_passed_over(store, clock):
    store.put("TopicA", b"ok", delay_ms=5)
    store._opened.core.put(  # a record a broker could have written: REAL_QID outside the topic
        TIMER_TOPIC,
        b"bad",
        store._codec.encode_properties({"TIMER_OUT_MS": str(clock.now + 1), "REAL_TOPIC": "TopicA", "REAL_QID": "99"}),
        0, 0, 0, 0, 0, 0, None, 0,
    )  # fmt: skip
    assert store.deliver_timers(clock.now + 5) == 1
    assert store.timer_stats()["dropped"] == 1
    assert [m.body for m in copies(store, "TopicA")] == [b"ok"]


def test_background_thread_delivers_and_stops_on_close(tmp_path, impl):
    shift = [0]
    store = open_store(tmp_path / "store", impl, lambda: now_ms() + shift[0], timer_interval_ms=5)
    try:
        store.put("TopicA", b"x", delay_ms=30_000)
        time.sleep(0.05)
        assert copies(store, "TopicA") == []
        shift[0] = 31_000
        deadline = time.monotonic() + 10
        while not copies(store, "TopicA") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(copies(store, "TopicA")) == 1
        thread = store._opened.timer._thread
        assert thread is not None and thread.is_alive()
    finally:
        store.close()
    assert not thread.is_alive()


def _state(p):
    return (p.enqueue_offset, p.watermark, p.first_pending, p.intent)


def test_progress_round_trips_and_a_torn_slot_leaves_the_state_before(tmp_path):
    path = tmp_path / "config" / "timerProgress"
    p = TimerProgress(path)
    p.set_state(3, (100, 1), 2)
    p.persist()
    before = _state(p)
    p.set_state(7, (123, 4), 5)
    p.intent = {
        "commitlogOffset": 100, "dequeueMs": 9, "done": 2, "fromOffset": 6,
        "fromTimeMs": -(1 << 63), "fromQueueOffset": -1, "to": (7, (123, 4)),
    }  # fmt: skip
    p.persist()
    q = TimerProgress(path)
    assert q.load() and _state(q) == _state(p)
    raw = bytearray(path.read_bytes())
    raw[TimerProgress.SLOT_SIZE + 20] ^= 0xFF  # the second write, torn
    path.write_bytes(bytes(raw))
    q = TimerProgress(path)
    assert q.load() and _state(q) == before
    q.persist()  # the next write goes to the torn slot, not over the good one
    assert _state(TimerProgress.in_store(tmp_path)) == before
    raw = bytearray(path.read_bytes())
    raw[20] ^= 0xFF
    raw[TimerProgress.SLOT_SIZE + 20] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(StoreConfigError):
        TimerProgress(path).load()
    path.write_bytes(bytes(2 * TimerProgress.SLOT_SIZE))  # created, never written: empty
    assert not TimerProgress(path).load()


def test_read_only_store_refuses_timer_calls(tmp_path, impl, clock):
    path = tmp_path / "store"
    open_store(path, impl, clock).close()
    with (
        MessageStore(path, implementation=impl.name, read_only=True) as ro,
        pytest.raises(StoreReadOnlyError),
    ):
        ro.deliver_timers()


# ---- the model ----------------------------------------------------------------------------------


class TimerMachine(RuleBasedStateMachine):
    """Timer puts at random times, a clock that only moves forward, deliveries, clean restarts and
    passes interrupted after their intent (with none, some or all copies written): every message
    is delivered exactly once, when its time has come and not before, in deliver-time order."""

    IMPL = None

    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="rocketstore-timer-")
        self.path = self.dir + "/store"
        self.clock = FakeClock()
        self.store = self._open()
        self.due = {}  # body -> deliver ms
        self.seq = 0
        self.delivered_upto = None  # the last time every due message was delivered ...
        self.delivered_seq = 0  # ... of those put before it
        self.skewed = False  # a put with a lagging clock: later copies may precede it in time

    def _open(self):
        return MessageStore(
            self.path,
            implementation=self.IMPL,
            store_host=HOST,
            clock=self.clock,
            commitlog_file_size=64 * 1024,
            consume_queue_units=32,
            index_slots=16,
            index_count=64,
            schedule_interval_ms=0,
            timer_interval_ms=0,
        )

    def teardown(self):
        try:
            self.store.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    @rule(ms=st.integers(-5, 200), absolute=st.booleans(), topic=st.sampled_from(["A", "B"]))
    def put(self, ms, absolute, topic):
        body = b"%d" % self.seq
        self.seq += 1
        if absolute:
            self.store.put(topic, body, deliver_at_ms=self.clock.now + ms, queue_id=0)
        else:
            self.store.put(topic, body, delay_ms=ms, queue_id=0)
        self.due[body] = self.clock.now + ms if ms > 0 else None  # None: plain, at once

    @rule(back=st.integers(1, 150), ms=st.integers(1, 200))
    def put_with_a_clock_behind(self, back, ms):
        """A put whose clock lags the delivery's (another thread's, or a skewed one): it may be
        due at or before what was delivered already, and must still be delivered once."""
        body = b"%d" % self.seq
        self.seq += 1
        self.clock.now -= back
        try:
            self.store.put("A", body, deliver_at_ms=self.clock.now + ms, queue_id=0)
            self.due[body] = self.clock.now + ms
        finally:
            self.clock.now += back
        self.skewed = True

    @rule(ms=st.integers(0, 120))
    def advance(self, ms):
        self.clock.now += ms

    @rule()
    def deliver(self):
        self.store.deliver_timers()
        self.delivered_upto, self.delivered_seq = self.clock.now, self.seq

    @rule(offset=st.sampled_from([-1, 0]))
    def deliver_at_the_edge_of_the_next_due(self, offset):
        ahead = [d for d in self.due.values() if d is not None and d > self.clock.now]
        if ahead:
            self.clock.now = max(self.clock.now, min(ahead) + offset)
        self.deliver()

    @rule()
    def restart(self):
        self.store.close()
        self.store = self._open()

    @precondition(lambda self: self.due)
    @rule(written=st.sampled_from(["none", "some", "all"]), some=st.integers(0, 5))
    def crash_in_a_pass(self, written, some):
        svc = self.store._opened.timer
        _crash_on_persist(self.store, 2 if written == "all" else 1)
        try:
            self.store.deliver_timers()
        except _Crash:
            intent = TimerProgress.in_store(self.path, read_only=True).intent
            if written == "some":
                units = intent_units(svc._read_units(0, intent["to"][0]), intent)
                items = [c[0] for c in (svc._copy(u, intent["dequeueMs"]) for u in units[:some]) if c]
                if items:
                    self.store._opened.core.put_many(items, 0)
        else:
            svc._progress.persist = type(svc._progress).persist.__get__(svc._progress)  # nothing was due
        self.store.close()
        self.store = self._open()
        self.delivered_upto, self.delivered_seq = (
            self.clock.now,
            self.seq,
        )  # the open rolled the pass forward ...
        self.store.deliver_timers()  # ... and this delivers the rest due now

    @invariant()
    def delivered_once_in_time_order(self):
        got = {}
        for topic in ("A", "B"):
            for m in copies(self.store, topic):
                assert m.body not in got, f"{m.body} delivered twice"
                got[m.body] = m
        for body, m in got.items():
            due = self.due[body]
            if due is not None:
                assert int(m.properties["TIMER_OUT_MS"]) == due
                assert int(m.properties["TIMER_DEQUEUE_MS"]) >= due  # never early
        if self.delivered_upto is not None:
            missing = [
                b
                for b, d in self.due.items()
                if int(b) < self.delivered_seq and (d is None or d <= self.delivered_upto) and b not in got
            ]
            assert not missing, f"due by {self.delivered_upto} but not delivered: {missing}"
        for topic in () if self.skewed else ("A", "B"):
            timed = [m for m in copies(self.store, topic) if "TIMER_OUT_MS" in m.properties]
            keys = [(int(m.properties["TIMER_OUT_MS"]), int(m.body)) for m in timed]
            assert keys == sorted(keys), f"{topic} not in deliver-time order: {keys}"


def test_timers_agree_with_the_model(impl):
    machine = type(f"TimerMachine_{impl.name}", (TimerMachine,), {"IMPL": impl.name})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=25,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


def test_a_late_unit_in_an_interrupted_pass_is_not_lost(tmp_path, impl, clock):
    """A unit read in the same pass that delivers it, due at or before the watermark (put with a
    clock behind the pass's), then a crash before its copy: the next open must still find it."""
    path = tmp_path / "store"
    store = open_store(path, impl, clock)
    t0 = clock.now
    store.put("TopicA", b"a", deliver_at_ms=t0 + 100)
    assert store.deliver_timers(t0 + 100) == 1
    clock.now = t0 + 50  # a clock behind the last pass (another thread's, or a skewed one)
    store.put("TopicA", b"late", deliver_at_ms=t0 + 80)
    store.put("TopicA", b"later", deliver_at_ms=t0 + 200)
    _crash_on_persist(store, 1)
    with pytest.raises(_Crash):
        store.deliver_timers(t0 + 100)
    store.close()
    store = open_store(path, impl, clock)
    store.deliver_timers(t0 + 1000)
    assert sorted(m.body for m in copies(store, "TopicA")) == [b"a", b"late", b"later"]
    store.close()


def test_put_pipelined_takes_a_timer(store, clock):
    fut = store.put_pipelined("TopicA", b"p", delay_ms=30)
    assert store.read(fut.result().commitlog_offset).topic == TIMER_TOPIC
    assert store.deliver_timers(clock.now + 30) == 1


def test_a_timer_record_a_5x_broker_wrote_is_delivered(store, clock):
    """A record already in rmq_sys_wheel_timer, as a 5.x broker's transformTimerMessage leaves it
    (its deliver time rounded to the broker's precision): delivered at that time like our own."""
    due = clock.now // 1000 * 1000 + 1000
    props = {
        "TIMER_DELIVER_MS": str(due + 1000),
        "TIMER_OUT_MS": str(due),
        "REAL_TOPIC": "TopicA",
        "REAL_QID": "1",
        "UNIQ_KEY": "7F0000010001000000000000000000AB",
    }
    store.create_topic("TopicA", 4)
    raw = store._codec.encode_properties(props)  # with the UNIQ_KEY the core is told of
    store._opened.core.put(TIMER_TOPIC, b"java", raw, 0, 0, 0, 0, 0, 0, props["UNIQ_KEY"], 0)
    assert store.deliver_timers(due - 1) == 0
    assert store.deliver_timers(due) == 1
    [c] = copies(store, "TopicA")
    assert (c.queue_id, c.body, c.unique_key) == (1, b"java", "7F0000010001000000000000000000AB")
    assert "REAL_TOPIC" not in c.properties and c.properties["TIMER_OUT_MS"] == str(due)
