"""The one-call steps of POP (both twins): a queue's common receive (``PopService.receive_run``,
over the codec's kernels), the rows of a receive (``received_rows``), the acker's remembered
lane and its hand-over to the careful ack, and a lane's compaction.
Each must do exactly what the general path does, and step aside (writing nothing) whenever
that path must decide: messages due back, a tag filter, a short or odd pull."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore import MessageStore
from rocketstore.errors import (
    InvalidMessageError,
    InvalidReceiptHandleError,
    ReceiptHandleExpiredError,
    StoreClosedError,
)
from rocketstore.format import _codec_py
from rocketstore.services.pop import PopService, ReceivedMessage, Receiver, revive_topic
from rocketstore.services.pop.records import checkpoint_json as _checkpoint_json

TOPIC, GROUP = "PopFast", "fastGroup"
REVIVE = revive_topic("DefaultCluster")


def open_store(path, impl, clock, **options):
    options.setdefault("schedule_interval_ms", 0)
    return MessageStore(path, implementation=impl.name, clock=clock, **options)


def fill(store, n, queues=1, tags=None):
    store.create_topic(TOPIC, queues)
    for i in range(n):
        store.put(TOPIC, b"m%d" % i, queue_id=i % queues, tags=tags[i % len(tags)] if tags else None)


def revive_bodies(store):
    out, offset = [], 0
    while True:
        try:
            m = store.get_by_queue_offset(REVIVE, 0, offset)
        except Exception:
            return out
        out.append((m.tags, bytes(m.body)))
        offset += 1


class Spy:
    """Counts the service's general per-queue receives and the one-call steps that did it."""

    def __init__(self, service):
        self.general = 0
        self.runs = 0
        general, run = service._receive_lane, service._receive_run

        def counted_general(*args, **kwargs):
            self.general += 1
            return general(*args, **kwargs)

        def counted_run(*args):
            done = run(*args)
            self.runs += done
            return done

        service._receive_lane = counted_general
        service._receive_run = counted_run


def test_the_store_receives_through_the_implementations_step(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as store:
        assert store._opened.pop._receive_run is PopService.receive_run
        assert store._opened.pop.received_rows is impl.codec.received_rows


def scenario(store, clock):
    """A fixed mix of receives, acks, expiries and a deadline change: what the store hands out."""
    seen = []
    for step in range(24):
        got = store.receive(GROUP, TOPIC, 8, 1_000)
        seen.append([(bytes(m.message.body), m.handle, m.reconsume_times) for m in got])
        for i, m in enumerate(got):
            if i % 3 == 0:
                store.ack(m.handle)
            elif i % 3 == 1:
                store.change_invisible_time(m.handle, 5_000)
        if step % 3 == 2:
            clock.now += 400
    seen.append(store.pop_status(GROUP, TOPIC))
    seen.append([store.committed_offset(GROUP, TOPIC, q) for q in range(2)])
    return seen


def test_the_one_call_step_does_what_the_general_path_does(tmp_path, impl, clock):
    """The same calls on two stores, one with the step and one without, hand out the same
    messages with the same handles and write the same revive log, byte for byte."""
    start = clock.now
    results = []
    for name, fast in (("fast", True), ("general", False)):
        clock.now = start
        with open_store(tmp_path / name, impl, clock, pop_snapshot_interval_ms=0) as store:
            fill(store, 100, queues=2)
            if not fast:
                store._opened.pop._receive_run = None
            spy = Spy(store._opened.pop) if fast else None
            results.append((scenario(store, clock), revive_bodies(store)))
            if spy is not None:
                assert spy.runs > 0  # the step was taken ...
                assert spy.general > 0  # ... and stepped aside (new lanes, messages due back)
    assert results[0] == results[1]


def test_the_step_writes_the_general_checkpoint(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock, pop_snapshot_interval_ms=0) as store:
        fill(store, 40)
        store.receive(GROUP, TOPIC, 4, 60_000)  # makes the lane (the general path)
        spy = Spy(store._opened.pop)
        got = store.receive(GROUP, TOPIC, 32, 60_000)
        assert (spy.runs, spy.general) == (1, 0)
        assert [m.handle for m in got] == [f"{GROUP} {TOPIC} 0 {o} 0" for o in range(4, 36)]
        assert [bytes(m.message.body) for m in got] == [b"m%d" % i for i in range(4, 36)]
        tag, body = revive_bodies(store)[-1]
        want = _checkpoint_json(GROUP, TOPIC, 0, 0, clock.now, 60_000, list(range(4, 36)), [0] * 32, 36)
        assert (tag, body) == ("ck", want)
        assert store.pop_status(GROUP, TOPIC) == {0: {"committed": 0, "next": 36, "in_flight": 36}}


def test_a_message_due_back_comes_before_new_ones(tmp_path, impl, clock):
    """The step must not hand out new messages while one is due back (it would starve it)."""
    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 50)
        first = store.receive(GROUP, TOPIC, 4, 1_000)
        for m in first[1:]:
            store.ack(m)
        clock.now += 1_000
        spy = Spy(store._opened.pop)
        again = store.receive(GROUP, TOPIC, 4, 1_000)
        assert spy.runs == 0 and spy.general == 1
        assert again[0].message.queue_offset == 0 and again[0].reconsume_times == 1
        assert [m.message.queue_offset for m in again[1:]] == [4, 5, 6]
        with pytest.raises(ReceiptHandleExpiredError):
            store.ack(first[0].handle)


def test_a_tag_filter_takes_the_general_path(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 60, tags=["A", "B"])
        store.receive(GROUP, TOPIC, 2, 60_000, tags="A")
        spy = Spy(store._opened.pop)
        got = store.receive(GROUP, TOPIC, 8, 60_000, tags="A")
        assert spy.runs == 0
        assert [m.message.tags for m in got] == ["A"] * 8


def test_a_short_pull_takes_the_general_path(tmp_path, impl, clock):
    """Fewer messages than asked: the general path decides (it looks past the end of a
    ConsumeQueue file and over units with no message); the step writes nothing."""
    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 10)
        store.receive(GROUP, TOPIC, 4, 60_000)
        records = len(revive_bodies(store))
        spy = Spy(store._opened.pop)
        got = store.receive(GROUP, TOPIC, 32, 60_000)
        assert (spy.runs, spy.general) == (0, 1)
        assert [m.message.queue_offset for m in got] == list(range(4, 10))
        assert len(revive_bodies(store)) == records + 1  # the general path's one checkpoint
        assert store.pop_status(GROUP, TOPIC)[0]["next"] == 10


class FakeReceived:
    def __init__(self):
        self.messages, self.reconsume_times, self._lanes = [], [], []


def lane_state(lane):
    return (lane.committed, lane.next, dict(lane.inflight), sorted(lane.heap))


def test_the_step_declines_without_writing(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 40)
        service = store._opened.pop
        run = PopService.receive_run
        store.receive(GROUP, TOPIC, 4, 1_000)
        lane = service._lanes[(GROUP, TOPIC, 0)]
        records = len(revive_bodies(store))
        before = lane_state(lane)
        out = FakeReceived()
        # no lane yet
        assert run(service, ("other", TOPIC, 0), clock.now, 8, 1_000, out) is False
        # more than the queue holds: the pull comes back short
        assert run(service, (GROUP, TOPIC, 0), clock.now, 37, 1_000, out) is False
        # something is due back
        assert run(service, (GROUP, TOPIC, 0), clock.now + 1_000, 8, 1_000, out) is False
        # the pull gives something that is not a message: refused before anything is written
        service._queue_messages = lambda queues, topic, qid, offset, n, segments, core: ([object()] * n,)
        with pytest.raises(TypeError, match="not a MessageExt"):
            run(service, (GROUP, TOPIC, 0), clock.now, 8, 1_000, out)
        assert (out.messages, out.reconsume_times, out._lanes) == ([], [], [])
        assert lane_state(lane) == before
        assert len(revive_bodies(store)) == records


def test_receiving_through_the_step_then_acking_finishes_everything(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 300, queues=3)
        spy = Spy(store._opened.pop)
        done = 0
        while got := store.receive(GROUP, TOPIC, 16, 60_000):
            for m in got:
                assert store.ack(m.handle) is True
                assert store.ack(m.handle) is False
            done += len(got)
        assert done == 300 and spy.runs > 0
        assert store.pop_status(GROUP, TOPIC) == {
            q: {"committed": 100, "next": 100, "in_flight": 0} for q in range(3)
        }
    with open_store(tmp_path / "s", impl, clock) as store:  # and it stays so
        clock.now += 120_000
        assert list(store.receive(GROUP, TOPIC, 16, 60_000)) == []


# ---- the acker's remembered lane ----


def test_the_acker_tells_lanes_with_like_prefixes_apart(tmp_path, impl, clock):
    """Queues 1 and 11: one prefix is the start of the other's. Acks alternate between them,
    so the remembered lane is the wrong one every other time."""
    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 12 * 6, queues=12)
        ones = store.receive(GROUP, TOPIC, 6, 60_000, queue_id=1)
        elevens = store.receive(GROUP, TOPIC, 6, 60_000, queue_id=11)
        for a, b in zip(ones, elevens):
            assert store.ack(a.handle) is True
            assert store.ack(b.handle) is True
        status = store.pop_status(GROUP, TOPIC)
        assert status[1] == status[11] == {"committed": 6, "next": 6, "in_flight": 0}


def test_the_remembered_lane_keeps_every_check(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 20)
        got = store.receive(GROUP, TOPIC, 4, 1_000)
        assert store.ack(got[0].handle) is True  # the acker now remembers this lane
        prefix = f"{GROUP} {TOPIC} 0"
        with pytest.raises(InvalidReceiptHandleError):
            store.ack(f"{prefix} 4 0")  # not handed out yet
        with pytest.raises(InvalidReceiptHandleError):
            store.ack(f"{prefix}x 1 0")  # a longer prefix
        with pytest.raises(InvalidReceiptHandleError):
            store.ack(f"{prefix[:-1]}1 1 0")  # same length, another queue
        with pytest.raises(ReceiptHandleExpiredError):
            store.ack(f"{prefix} 1 3")  # another delivery
        assert store.ack(f"{prefix} 0 0") is False  # finished already
        assert store.pop_status(GROUP, TOPIC)[0]["in_flight"] == 3


# ---- received_rows ----


def test_received_rows_are_received_messages(impl):
    rows = impl.codec.received_rows(ReceivedMessage, ["a", "b"], ["h1", "h2"], [0, 3])
    assert rows == [ReceivedMessage("a", "h1", 0), ReceivedMessage("b", "h2", 3)]
    assert all(type(r) is ReceivedMessage for r in rows)
    assert rows[1].handle == "h2" and rows[1].reconsume_times == 3
    assert impl.codec.received_rows(ReceivedMessage, [], [], []) == []


@pytest.mark.parametrize("cls", [tuple, list, int])
def test_received_rows_refuse_other_classes(impl, cls):
    with pytest.raises(TypeError):
        impl.codec.received_rows(cls, [], [], [])


def test_received_rows_refuse_lists_of_other_lengths(impl):
    with pytest.raises(ValueError):
        impl.codec.received_rows(ReceivedMessage, ["a"], [], [0])
    with pytest.raises(ValueError):
        impl.codec.received_rows(ReceivedMessage, ["a"], ["h"], [])


# ---- compaction ----


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), in_flight=st.integers(0, 40))
def test_both_twins_compact_a_lane_alike(seed, in_flight):
    from rocketstore import _impl

    twins = [_codec_py.PopLane] + ([_impl.COMPILED.codec.PopLane] if _impl.COMPILED is not None else [])
    rng = random.Random(seed)
    entries = []
    for seq in range(rng.randint(0, 30)):
        deadline = rng.randint(0, 5)
        offsets = tuple(rng.sample(range(60), rng.randint(1, 6)))
        entries.append((deadline, seq, offsets, tuple(rng.randint(0, 2) for _ in offsets)))
    inflight = {}
    for deadline, _seq, offsets, numbers in entries:
        for o, n in zip(offsets, numbers):
            if len(inflight) < in_flight and rng.random() < 0.5:
                inflight[o] = (deadline, n)
    heaps = []
    for twin in twins:
        lane = twin("g", "t", 0, 0, "t@g")
        lane.inflight.update(inflight)
        lane.heap = list(entries)
        lane.compact()
        heaps.append(sorted(lane.heap))
        for deadline, _seq, offsets, numbers in lane.heap:
            assert all(inflight.get(o) == (deadline, n) for o, n in zip(offsets, numbers))
        if not inflight:
            assert lane.heap == []
    assert all(h == heaps[0] for h in heaps)
    # every (offset, deadline, number) still in flight under some entry is kept, nothing else
    kept = {(o, d, n) for d, _s, offs, nums in heaps[0] for o, n in zip(offs, nums)}
    under = {(o, d, n) for d, _s, offs, nums in entries for o, n in zip(offs, nums)}
    assert kept == {(o, *v) for o, v in inflight.items()} & under


# ---- the store's ack is the acker's own method ----


def test_a_writable_store_acks_through_the_acker_itself(tmp_path, impl, clock):
    s = open_store(str(tmp_path / "s"), impl, clock)
    try:
        fill(s, 3)
        assert s._role.ack == s._opened.pop.ack  # the acker itself
        got = s.receive(GROUP, TOPIC, 3, 60_000)
        assert s.ack(got[0].handle) is True
        assert s.ack(got[0]) is False  # (a ReceivedMessage; already acknowledged)
        with pytest.raises(InvalidReceiptHandleError):
            s.ack("no handle")
        with pytest.raises(InvalidReceiptHandleError):
            s.ack(7)
    finally:
        s.close()
    assert s._role.kind == "closed"


def test_an_ack_held_past_close_raises_store_closed(tmp_path, impl, clock):
    s = open_store(str(tmp_path / "s"), impl, clock)
    fill(s, 2)
    got = s.receive(GROUP, TOPIC, 2, 60_000)
    held, service = s._role.ack, s._opened.pop  # the service kept alive: only the acker's flag can refuse
    s.close()
    for ack in (held, s.ack, service.ack):
        with pytest.raises(StoreClosedError):
            ack(got[1].handle)
    s = open_store(str(tmp_path / "s"), impl, clock)
    try:  # the refused acks wrote nothing: the message is still in flight after the reopen
        clock.now += 60_001
        assert [bytes(m.body) for m in s.receive(GROUP, TOPIC, 2, 60_000).messages] == [b"m0", b"m1"]
    finally:
        s.close()


def test_a_subclass_keeps_its_own_ack(tmp_path, impl, clock):
    class Counting(MessageStore):
        acks = 0

        def ack(self, handle):
            Counting.acks += 1
            return super().ack(handle)

    s = Counting(str(tmp_path / "s"), implementation=impl.name, clock=clock, schedule_interval_ms=0)
    try:
        fill(s, 1)
        assert s._role.ack == s._opened.pop.ack  # the role's; the class's override calls it
        assert s.ack(s.receive(GROUP, TOPIC, 1, 60_000)[0].handle) is True
        assert Counting.acks == 1
    finally:
        s.close()


def test_a_read_only_store_has_no_acker_installed(tmp_path, impl, clock):
    open_store(str(tmp_path / "s"), impl, clock).close()
    ro = MessageStore(str(tmp_path / "s"), implementation=impl.name, read_only=True)
    try:
        assert type(ro._role.ack).__name__ == "CarefulCall"
        with pytest.raises(Exception) as info:
            ro.ack("g 0 0")
        assert type(info.value).__module__ == "rocketstore.errors"
    finally:
        ro.close()


# ---- the store's receive: the POP service's Receiver (the common receive, no store frame) ----


class FallbackSpy:
    """Counts the calls a store's Receiver hands to the class's receive (which calls the
    service's general ``receive``)."""

    def __init__(self, service):
        self.calls = 0
        general = service.receive

        def counted(*args, **kwargs):
            self.calls += 1
            return general(*args, **kwargs)

        service.receive = counted


def test_a_writable_store_receives_through_the_receiver(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as s:
        fill(s, 8, queues=2)
        receiver = s._role.pop_receiver
        assert type(receiver) is Receiver
        assert s._role.receive == receiver.receive
        spy = Spy(s._opened.pop)
        # new lanes: the general path makes them; then the one-call step
        got = [m for _ in range(3) for m in s.receive(GROUP, TOPIC, 2, 60_000)]
        assert spy.general == 2 and spy.runs == 1
        assert sorted(bytes(m.message.body) for m in got) == sorted(b"m%d" % i for i in (0, 1, 2, 3, 4, 6))
        assert all(s.ack(m.handle) for m in got)
    assert s._role.kind == "closed" and s._role.pop_receiver is None


def test_the_receiver_hands_everything_else_to_the_class(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as s:
        fill(s, 8, queues=2)
        s.receive(GROUP, TOPIC, 1, 60_000)  # (the names are checked once)
        spy = FallbackSpy(s._opened.pop)
        s.receive(GROUP, TOPIC, 1, 60_000)
        assert spy.calls == 0
        s.receive(GROUP, TOPIC, 1, 60_000, queue_id=1)
        s.receive(GROUP, TOPIC, 1, 60_000, tags="*")
        s.receive(GROUP, TOPIC, 1, 60_000, max_reconsume_times=3)
        s.receive(GROUP, "NoSuchTopic", 1, 60_000)
        assert spy.calls == 4

        class Name(str):
            pass

        assert len(s.receive(Name(GROUP), Name(TOPIC), 1, 60_000)) == 1
        assert spy.calls == 5
        for bad in (
            dict(max_msgs=0),
            dict(max_msgs=True),
            dict(max_msgs=1.0),
            dict(max_msgs=1 << 70),
            dict(invisible_time_ms=-1),
            dict(invisible_time_ms=None),
        ):
            args = {"max_msgs": 1, "invisible_time_ms": 60_000, **bad}
            with pytest.raises(InvalidMessageError):
                s.receive(GROUP, TOPIC, args["max_msgs"], args["invisible_time_ms"])
        with pytest.raises(InvalidMessageError):
            s.receive("bad group!", TOPIC, 1, 60_000)
        with pytest.raises(InvalidMessageError):
            s.receive(GROUP, 7, 1, 60_000)


def test_a_clock_that_is_not_an_int_takes_the_class_path(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as s:
        fill(s, 4)
        s.receive(GROUP, TOPIC, 1, 60_000)
        spy = FallbackSpy(s._opened.pop)
        s._opened.pop.clock = lambda: float(clock.now)
        got = s.receive(GROUP, TOPIC, 1, 60_000)
        assert spy.calls == 1 and len(got) == 1


def test_the_receiver_catches_up_with_what_is_not_dispatched_yet(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock, dispatch_interval_ms=0) as s:
        fill(s, 2)
        assert len(s.receive(GROUP, TOPIC, 2, 60_000)) == 2
        for i in range(40):  # put, then received at once: no dispatch ran in between
            s.put(TOPIC, b"late%d" % i)
        got = s.receive(GROUP, TOPIC, 32, 60_000)
        assert [bytes(m.message.body) for m in got] == [b"late%d" % i for i in range(32)]
        got = s.receive(GROUP, TOPIC, 32, 60_000)
        assert [bytes(m.message.body) for m in got] == [b"late%d" % i for i in range(32, 40)]


def test_a_receive_held_past_close_raises_store_closed(tmp_path, impl, clock):
    s = open_store(tmp_path / "s", impl, clock)
    fill(s, 2)
    s.receive(GROUP, TOPIC, 1, 60_000)
    held, service = s._role.receive, s._opened.pop
    s.close()
    with pytest.raises(StoreClosedError):
        held(GROUP, TOPIC, 1, 60_000)
    with pytest.raises(StoreClosedError):
        s.receive(GROUP, TOPIC, 1, 60_000)
    del service


def test_a_subclass_keeps_its_own_receive(tmp_path, impl, clock):
    class Counting(MessageStore):
        receives = 0

        def receive(self, *args, **kwargs):
            Counting.receives += 1
            return super().receive(*args, **kwargs)

    s = Counting(str(tmp_path / "s"), implementation=impl.name, clock=clock, schedule_interval_ms=0)
    try:
        fill(s, 1)
        assert s._role.receive == s._role.pop_receiver.receive
        assert len(s.receive(GROUP, TOPIC, 1, 60_000)) == 1
        assert Counting.receives == 1
    finally:
        s.close()


# ---- the acker's common case and its hand-over to the careful ack ----


class CarefulSpy:
    """Counts the acks the store's acker hands to ``PopService.ack_handle``."""

    def __init__(self, monkeypatch):
        self.calls = 0
        general = PopService.ack_handle

        def counted(service, handle):
            self.calls += 1
            return general(service, handle)

        monkeypatch.setattr(PopService, "ack_handle", counted)


def test_the_compiled_acker_does_the_common_case_itself(tmp_path, impl, clock, monkeypatch):
    spy = CarefulSpy(monkeypatch)  # (before the open: the acker is given the function then)
    with open_store(tmp_path / "s", impl, clock, pop_snapshot_interval_ms=0) as store:
        fill(store, 20)
        got = store.receive(GROUP, TOPIC, 10, 60_000)
        assert all(store.ack(m.handle) for m in got[:5])
        # the compiled twin acks those itself; the pure twin's acker is the careful ack
        assert spy.calls == (0 if impl.name == "c" else 5)
        before = spy.calls
        assert store.ack(got[0].handle) is False  # finished: the careful ack says so
        with pytest.raises(InvalidReceiptHandleError):
            store.ack("no handle")
        with pytest.raises(InvalidReceiptHandleError):
            store.ack(f"{GROUP} {TOPIC} 0 10 0")  # not handed out yet
        assert spy.calls == before + 3


def test_every_so_many_acks_look_at_the_snapshot(tmp_path, impl, clock, monkeypatch):
    from rocketstore.format._codec_py import POP_SNAPSHOT_CHECK_EVERY

    spy = CarefulSpy(monkeypatch)
    n = 2 * POP_SNAPSHOT_CHECK_EVERY
    with open_store(tmp_path / "s", impl, clock, pop_snapshot_interval_ms=1_000) as store:
        fill(store, n)
        got = store.receive(GROUP, TOPIC, n, 60_000)
        snapshots = []
        store._opened.pop.snapshot = lambda: snapshots.append(1) or True
        clock.now += 1_000  # a snapshot is due from now on
        for m in got:
            assert store.ack(m.handle) is True
        if impl.name == "c":  # the acker's own acks, each 64th looking at the snapshot
            assert spy.calls == 0 and len(snapshots) == 2
        else:
            assert spy.calls == n and len(snapshots) == n
        assert store.pop_status(GROUP, TOPIC)[0] == {"committed": n, "next": n, "in_flight": 0}


@pytest.mark.parametrize("n", [0, 1, 5])
def test_reconsume_times_reads_each_message(tmp_path, impl, clock, n):
    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 5)
        messages = list(store.get_message(GROUP, TOPIC, 0, 0, 5).messages)[:n]
        assert impl.codec.reconsume_times(list(messages)) == [m.reconsume_times for m in messages]
        with pytest.raises(TypeError, match="not a MessageExt"):
            impl.codec.reconsume_times(list(messages) + [object()])
