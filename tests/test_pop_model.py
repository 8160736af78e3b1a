"""A stateful property test of POP (receive / ack / ack_many / change_invisible_time / expiry /
DLQ / reopen / crash) against an in-memory model, on both twins.

The model knows, for every message put, whether it was never handed out, is in flight (until
when, under which delivery number), acknowledged, or dead-lettered. Each receive's answer is
checked against it: only messages that may be handed out are, with the right reconsume times,
and a receive that returns fewer than asked leaves nothing that could have come. The group's
committed offset must always be the lowest position not finished.
"""

import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from rocketstore import MessageStore
from rocketstore.errors import InvalidReceiptHandleError, ReceiptHandleExpiredError
from rocketstore.services.schedule import dlq_topic

TOPIC, GROUP, QUEUES, MAX_RECONSUME = "PopTopic", "popGroup", 2, 2
OPTIONS = dict(
    commitlog_file_size=64 * 1024,
    consume_queue_units=8,
    default_queues=QUEUES,
    schedule_interval_ms=0,
    dispatch_interval_ms=0,
    pop_snapshot_interval_ms=700,
)

NEW, FLIGHT, ACKED, DEAD, PASSED = "new", "flight", "acked", "dead", "passed over"
FILTER_TAG = "TagA"  # what a filtered receive asks for (puts alternate TagA and TagB)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


class Msg:
    __slots__ = ("queue_id", "offset", "body", "tag", "state", "deadline", "number")

    def __init__(self, queue_id: int, offset: int, body: bytes, tag: str) -> None:
        self.queue_id, self.offset, self.body, self.tag = queue_id, offset, body, tag
        self.state, self.deadline, self.number = NEW, 0, -1


class PopMachine(RuleBasedStateMachine):
    IMPL = "py"

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="rocketstore-pop-model-")
        self.clock = Clock()
        self.store = self._open()
        self.store.create_topic(TOPIC, QUEUES)
        self.queues: list[list[Msg]] = [[] for _ in range(QUEUES)]
        self.by_body: dict[bytes, Msg] = {}
        self.handles: list[tuple[str, Msg, int]] = []  # (handle, message, delivery number)
        self.received: list[bool] = [False] * QUEUES
        self.dlq_seen = 0
        self.counter = 0

    def _open(self) -> MessageStore:
        return MessageStore(self.dir, implementation=self.IMPL, clock=self.clock, **OPTIONS)

    def teardown(self) -> None:
        try:
            self.store.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _eligible(self, m: Msg) -> bool:
        return m.state == NEW or (m.state == FLIGHT and m.deadline <= self.clock.now)

    def _new_dead_letters(self) -> set[bytes]:
        """Bodies of the messages that reached the DLQ since the last look."""
        topic = dlq_topic(GROUP)
        end = self.store.max_queue_offset(topic, 0)
        found = set()
        for q in range(self.dlq_seen, end):
            found.add(bytes(self.store.get_by_queue_offset(topic, 0, q).body))
        self.dlq_seen = end
        return found

    @rule(queue_id=st.integers(0, QUEUES - 1), count=st.integers(1, 4), tag=st.sampled_from(["TagA", "TagB"]))
    def put(self, queue_id: int, count: int, tag: str) -> None:
        for _ in range(count):
            body = b"m%d" % self.counter
            self.counter += 1
            result = self.store.put(TOPIC, body, queue_id=queue_id, tags=tag)
            msg = Msg(queue_id, result.queue_offset, body, tag)
            assert msg.offset == len(self.queues[queue_id])
            self.queues[queue_id].append(msg)
            self.by_body[body] = msg

    @rule(ms=st.sampled_from([1, 300, 500, 1000, 2500]))
    def tick(self, ms: int) -> None:
        self.clock.now += ms

    @rule(
        max_msgs=st.integers(1, 5),
        invisible=st.sampled_from([0, 400, 1000]),
        queue_id=st.sampled_from([None, 0, 1]),
        tags=st.sampled_from([None, None, FILTER_TAG]),
    )
    def receive(self, max_msgs: int, invisible: int, queue_id, tags) -> None:
        now = self.clock.now

        def eligible(m: Msg) -> bool:  # due ones come back whatever the filter
            return self._eligible(m) and (tags is None or m.state == FLIGHT or m.tag == tags)

        before = {id(m): eligible(m) for q in self.queues for m in q}
        got = self.store.receive(
            GROUP, TOPIC, max_msgs, invisible, queue_id=queue_id, max_reconsume_times=MAX_RECONSUME, tags=tags
        )
        assert len(got) <= max_msgs
        seen = set()
        for r in got:
            m = self.by_body[bytes(r.message.body)]
            assert id(m) not in seen, "one message twice in one receive"
            seen.add(id(m))
            assert queue_id is None or m.queue_id == queue_id
            assert before[id(m)], f"{m.body!r} handed out while {m.state} until {m.deadline} (now {now})"
            assert r.message.queue_offset == m.offset and r.message.queue_id == m.queue_id
            expected = 0 if m.state == NEW else m.number + 1
            assert r.reconsume_times == expected
            m.state, m.deadline, m.number = FLIGHT, now + invisible, expected
            self.handles.append((r.handle, m, expected))
            self.received[m.queue_id] = True
        for body in self._new_dead_letters():
            m = self.by_body[body]
            assert before[id(m)] and m.state == FLIGHT and m.number + 1 > MAX_RECONSUME
            m.state = DEAD
        for qid, status in self.store.pop_status(GROUP, TOPIC).items():
            self.received[qid] = True
            for m in self.queues[qid][: status["next"]]:
                if m.state == NEW:  # passed over: only what the filter does not match
                    assert tags is not None and m.tag != tags, f"{m.body!r} ({m.tag}) passed over"
                    m.state = PASSED
        if len(got) < max_msgs:  # nothing else could have come
            for q in self.queues if queue_id is None else [self.queues[queue_id]]:
                for m in q:
                    if id(m) not in seen and m.state != DEAD:
                        assert not eligible(m), f"{m.body!r} ({m.state}) was left behind"

    def _expect_ack(self, m: Msg, number: int) -> str:
        if m.state in (ACKED, DEAD):
            return "done"
        assert m.state == FLIGHT
        return "ok" if m.number == number else "expired"

    @precondition(lambda self: self.handles)
    @rule(data=st.data())
    def ack(self, data) -> None:
        handle, m, number = data.draw(st.sampled_from(self.handles))
        expect = self._expect_ack(m, number)
        if expect == "expired":
            with pytest.raises(ReceiptHandleExpiredError):
                self.store.ack(handle)
            return
        assert self.store.ack(handle) is (expect == "ok")
        if expect == "ok":
            m.state = ACKED

    @precondition(lambda self: self.handles)
    @rule(data=st.data())
    def ack_many(self, data) -> None:
        picked = data.draw(st.lists(st.sampled_from(self.handles), max_size=6))
        expects = [self._expect_ack(m, n) for _h, m, n in picked]
        oks = {id(m) for (_h, m, _n), e in zip(picked, expects) if e == "ok"}
        stale = [h for (h, _m, _n), e in zip(picked, expects) if e == "expired"]
        if stale:
            with pytest.raises(ReceiptHandleExpiredError) as info:
                self.store.ack_many([h for h, _m, _n in picked])
            assert sorted(info.value.handles) == sorted(stale)
            assert info.value.acked == len(oks)
        else:
            assert self.store.ack_many([h for h, _m, _n in picked]) == len(oks)
        for _h, m, _n in picked:
            if id(m) in oks:
                m.state = ACKED

    @precondition(lambda self: self.handles)
    @rule(data=st.data(), invisible=st.sampled_from([0, 200, 3000]))
    def change_invisible_time(self, data, invisible: int) -> None:
        handle, m, number = data.draw(st.sampled_from(self.handles))
        if self._expect_ack(m, number) != "ok":
            with pytest.raises(ReceiptHandleExpiredError):
                self.store.change_invisible_time(handle, invisible)
            return
        assert self.store.change_invisible_time(handle, invisible) == handle
        m.deadline = self.clock.now + invisible

    @rule(handle=st.sampled_from(["", "x", "popGroup PopTopic 0 99999 0", "a b c d e f", "g T 0 -1 0"]))
    def bad_handle(self, handle: str) -> None:
        with pytest.raises(InvalidReceiptHandleError):
            self.store.ack(handle)

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = self._open()

    @rule()
    def crash(self) -> None:
        """Drop the store as a killed process would: no snapshot at close, the abort file stays,
        so the reopen replays the revive log after the last periodic snapshot."""
        store = self.store
        store._opened.pop = None
        store._teardown(clean=False)
        store._closed = True
        self.store = self._open()
        assert not self.store.last_shutdown_clean

    @invariant()
    def committed_offset_is_lowest_unfinished(self) -> None:
        for qid, q in enumerate(self.queues):
            committed = self.store.committed_offset(GROUP, TOPIC, qid)
            if not self.received[qid]:
                assert committed == -1
                continue
            handed = [m for m in q if m.state != NEW]
            unfinished = [m.offset for m in handed if m.state == FLIGHT]
            assert committed == (min(unfinished) if unfinished else len(handed))
            status = self.store.pop_status(GROUP, TOPIC)[qid]
            assert status["in_flight"] == len(unfinished)


SETTINGS = settings(
    max_examples=40,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_pop_agrees_with_the_model(impl, monkeypatch):
    import rocketstore.services.pop.service

    monkeypatch.setattr(rocketstore.services.pop.service, "COMPACT_SLACK", -(1 << 30))  # compact at every ack
    machine = type(f"PopMachine_{impl.name}", (PopMachine,), {"IMPL": impl.name})
    run_state_machine_as_test(machine, settings=SETTINGS)
