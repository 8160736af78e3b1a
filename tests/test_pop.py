"""Acknowledgement per message (POP): receive, ack, ack_many, change_invisible_time, expiry, DLQ,
the revive log and its snapshot, on both twins. The model-based test is test_pop_model.py; the
crash test crash_pop.py."""

import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketstore import MessageStore, Received
from rocketstore.errors import (
    InvalidMessageError,
    InvalidReceiptHandleError,
    ReceiptHandleExpiredError,
    StoreConfigError,
    StoreReadOnlyError,
    SystemTopicError,
)
from rocketstore.files.fastjson import loads_fastjson
from rocketstore.services.pop.records import REVIVE_GROUP, revive_topic
from rocketstore.services.pop.records import dumps as _dumps

TOPIC, GROUP = "PopTopic", "popGroup"
REVIVE = revive_topic("DefaultCluster")


def open_store(path, impl, clock, **options):
    options.setdefault("schedule_interval_ms", 0)
    return MessageStore(path, implementation=impl.name, clock=clock, **options)


def fill(store, n, queues=1):
    store.create_topic(TOPIC, queues)
    return [store.put(TOPIC, b"m%d" % i, queue_id=i % queues) for i in range(n)]


def bodies(received):
    return [bytes(r.message.body) for r in received]


def test_receive_hides_messages_until_acked_or_expired(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 5)
        first = store.receive(GROUP, TOPIC, 3, 1000)
        assert isinstance(first, Received) and bodies(first) == [b"m0", b"m1", b"m2"]
        assert [r.reconsume_times for r in first] == [0, 0, 0]
        assert bodies(store.receive(GROUP, TOPIC, 10, 1000)) == [b"m3", b"m4"]
        assert store.receive(GROUP, TOPIC, 10, 1000) == []  # all invisible
        assert bodies(store.receive("otherGroup", TOPIC, 10, 1000)) == [b"m%d" % i for i in range(5)]
        assert store.ack(first[1].handle) is True
        clock.now += 1000
        again = store.receive(GROUP, TOPIC, 10, 1000)
        assert sorted(bodies(again)) == [b"m0", b"m2", b"m3", b"m4"]  # m1 was acknowledged
        assert {r.reconsume_times for r in again} == {1}


def test_committed_offset_is_the_lowest_unacknowledged(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 6)
        assert store.committed_offset(GROUP, TOPIC, 0) == -1
        got = store.receive(GROUP, TOPIC, 6, 1000)
        assert store.committed_offset(GROUP, TOPIC, 0) == 0
        assert store.ack_many([got[i].handle for i in (1, 2, 4)]) == 3
        assert store.committed_offset(GROUP, TOPIC, 0) == 0
        store.ack(got[0].handle)
        assert store.committed_offset(GROUP, TOPIC, 0) == 3
        assert store.ack_many(got) == 2  # the rest (0, 1, 2, 4 were acknowledged already)
        assert store.committed_offset(GROUP, TOPIC, 0) == 6
        assert store.pop_status(GROUP, TOPIC) == {0: {"committed": 6, "next": 6, "in_flight": 0}}
    with open(tmp_path / "s" / "config" / "consumerOffset.json") as f:
        table = loads_fastjson(f.read())["offsetTable"]
    assert table[f"{TOPIC}@{GROUP}"] == {0: 6}
    assert f"{REVIVE}@{REVIVE_GROUP}" in table  # the revive log's position, as 5.x commits it


def test_stale_handle_after_redelivery_raises_and_acks_nothing(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 2)
        old = store.receive(GROUP, TOPIC, 2, 100)
        clock.now += 100
        new = store.receive(GROUP, TOPIC, 2, 100)
        with pytest.raises(ReceiptHandleExpiredError) as info:
            store.ack(old[0].handle)
        assert info.value.handles == [old[0].handle]
        with pytest.raises(ReceiptHandleExpiredError) as info:
            store.ack_many([old[1].handle, new[0].handle])
        assert info.value.handles == [old[1].handle] and info.value.acked == 1
        with pytest.raises(ReceiptHandleExpiredError):
            store.change_invisible_time(old[1].handle, 5000)
        assert store.pop_status(GROUP, TOPIC)[0]["in_flight"] == 1


def test_expired_but_not_yet_redelivered_handle_still_acks(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 1)
        [r] = store.receive(GROUP, TOPIC, 1, 100)
        clock.now += 10_000
        assert store.ack(r.handle) is True
        assert store.receive(GROUP, TOPIC, 1, 100) == []


def test_change_invisible_time_extends_and_shortens(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 1)
        [r] = store.receive(GROUP, TOPIC, 1, 1000)
        assert store.change_invisible_time(r.handle, 5000) == r.handle
        clock.now += 4999
        assert store.receive(GROUP, TOPIC, 1, 1000) == []
        clock.now += 1
        [back] = store.receive(GROUP, TOPIC, 1, 1000)
        assert back.reconsume_times == 1
        store.change_invisible_time(back.handle, 0)  # due back at once
        [again] = store.receive(GROUP, TOPIC, 1, 1000)
        assert again.reconsume_times == 2 and store.ack(again.handle)
        with pytest.raises(ReceiptHandleExpiredError):
            store.change_invisible_time(again.handle, 10)  # acknowledged


def test_max_reconsume_times_sends_to_dlq(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 1)
        seen = []
        for _ in range(5):
            got = store.receive(GROUP, TOPIC, 1, 10, max_reconsume_times=2)
            seen += [r.reconsume_times for r in got]
            clock.now += 10
        assert seen == [0, 1, 2]
        dead = store.get_by_queue_offset(f"%DLQ%{GROUP}", 0, 0)
        assert dead.body == b"m0" and dead.reconsume_times == 3
        assert dead.properties["ORIGIN_MESSAGE_ID"] == store.get_by_queue_offset(TOPIC, 0, 0).msg_id
        assert store.committed_offset(GROUP, TOPIC, 0) == 1
        assert store.stats()["pop_dead_lettered"] == 1


def test_group_retry_max_times_is_the_default_maximum(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 1)
        store.update_subscription_group(GROUP, retry_max_times=0)
        assert len(store.receive(GROUP, TOPIC, 1, 10)) == 1
        clock.now += 10
        assert store.receive(GROUP, TOPIC, 1, 10) == []
        assert store.max_queue_offset(f"%DLQ%{GROUP}", 0) == 1


def test_state_survives_reopen_and_handles_stay_valid(tmp_path, impl, clock):
    path = tmp_path / "s"
    with open_store(path, impl, clock, pop_snapshot_interval_ms=0) as store:
        fill(store, 4, queues=2)
        got = store.receive(GROUP, TOPIC, 4, 1000)
        store.ack(got[0].handle)
        handles = [r.handle for r in got]
    with open_store(path, impl, clock) as store:
        assert store.receive(GROUP, TOPIC, 4, 1000) == []
        assert store.ack(handles[0]) is False  # acknowledged before the close
        assert store.ack(handles[1]) is True
        clock.now += 1000
        back = store.receive(GROUP, TOPIC, 4, 1000)
        assert sorted(bodies(back)) == sorted(bodies(got)[2:])
        assert {r.reconsume_times for r in back} == {1}


def test_reopen_replays_records_after_the_snapshot(tmp_path, impl, clock):
    path = tmp_path / "s"
    store = open_store(path, impl, clock, pop_snapshot_interval_ms=0)
    fill(store, 3)
    got = store.receive(GROUP, TOPIC, 3, 1000)
    store._opened.pop.snapshot()
    store.ack(got[0].handle)  # after the snapshot: only in the revive log
    store.change_invisible_time(got[1].handle, 50_000)
    state = loads_fastjson((path / "config" / "rocketstorePop.json").read_text())
    assert state["reviveOffset"] == 1 and state["lanes"][0]["f"][0][0] == 0
    store._opened.pop = None  # as if killed: no snapshot at close
    store._teardown(clean=False)
    store._closed = True
    with open_store(path, impl, clock) as store:
        assert store.pop_status(GROUP, TOPIC) == {0: {"committed": 1, "next": 3, "in_flight": 2}}
        clock.now += 1000
        assert bodies(store.receive(GROUP, TOPIC, 3, 1000)) == [b"m2"]


def test_bad_arguments_raise_and_write_nothing(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 1)
        end = store.max_offset
        for args in [
            ("", TOPIC, 1, 10),
            ("g@x", TOPIC, 1, 10),
            (GROUP, "bad topic", 1, 10),
            (GROUP, TOPIC, 0, 10),
            (GROUP, TOPIC, 5000, 10),
            (GROUP, TOPIC, 1, -1),
            (GROUP, TOPIC, 1, 13 * 3600 * 1000),
            (GROUP, TOPIC, True, 10),
        ]:
            with pytest.raises((InvalidMessageError, TypeError)):
                store.receive(*args)
        with pytest.raises(InvalidMessageError):
            store.receive(GROUP, TOPIC, 1, 10, queue_id=1)  # the topic has one queue
        with pytest.raises(InvalidMessageError):
            store.receive(GROUP, TOPIC, 1, 10, max_reconsume_times=-1)
        for handle in ["", "nonsense", f"{GROUP} {TOPIC} 0 0 0", "a b c", f"{GROUP} {TOPIC} 0 x 0"]:
            with pytest.raises(InvalidReceiptHandleError):
                store.ack(handle)
        with pytest.raises(InvalidReceiptHandleError):
            store.ack(42)  # type: ignore[arg-type]
        with pytest.raises(InvalidReceiptHandleError):
            store.ack_many("a handle")  # type: ignore[arg-type]
        [r] = store.receive(GROUP, TOPIC, 1, 10)
        end = store.max_offset
        with pytest.raises(InvalidReceiptHandleError):
            store.ack_many([r.handle, "bad"])  # checked before anything is written
        assert store.max_offset == end and store.pop_status(GROUP, TOPIC)[0]["in_flight"] == 1
        with pytest.raises(InvalidMessageError):
            store.change_invisible_time(r.handle, -5)
        assert store.max_offset == end


def test_received_from_another_store_is_refused(tmp_path, impl, clock):
    with open_store(tmp_path / "a", impl, clock) as a, open_store(tmp_path / "b", impl, clock) as b:
        fill(a, 1)
        fill(b, 1)
        got = a.receive(GROUP, TOPIC, 1, 10)
        with pytest.raises(InvalidReceiptHandleError):
            b.ack_many(got)


def test_nothing_to_receive(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as store:
        assert store.receive(GROUP, "NoSuchTopic", 5, 10) == []
        store.create_topic(TOPIC, 2)
        assert len(store.receive(GROUP, TOPIC, 5, 10)) == 0


def test_read_only_store_refuses_pop(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 1)
    with MessageStore(tmp_path / "s", read_only=True, implementation=impl.name) as store:
        with pytest.raises(StoreReadOnlyError):
            store.receive(GROUP, TOPIC, 1, 10)
        with pytest.raises(StoreReadOnlyError):
            store.ack(f"{GROUP} {TOPIC} 0 0 0")


def test_revive_topic_is_a_system_topic(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as store:
        with pytest.raises(SystemTopicError):
            store.put(REVIVE, b"x")
        fill(store, 2)
        got = store.receive(GROUP, TOPIC, 2, 10)
        store.ack_many(got)
        ck = store.get_by_queue_offset(REVIVE, 0, 0)
        ack = store.get_by_queue_offset(REVIVE, 0, 1)
        assert (ck.tags, ack.tags) == ("ck", "bAck")
        record = json.loads(ck.body)
        assert (record["c"], record["t"], record["q"], record["so"], record["n"]) == (GROUP, TOPIC, 0, 0, 2)
        assert json.loads(ack.body)["so"] == 0 and json.loads(ack.body)["n"] == 2
        assert store.verify()["ok"]


def test_a_foreign_record_in_the_revive_topic_is_skipped_and_counted(tmp_path, impl, clock):
    from rocketstore import Message

    path = tmp_path / "s"
    with open_store(path, impl, clock) as store:
        fill(store, 1)
        store.receive(GROUP, TOPIC, 1, 10)
        store._opened.parts.put_message(Message(REVIVE, b'{"so": 1}', tags="ck", queue_id=0), None, 0)
    for name in ("rocketstorePop.json", "rocketstorePop.json.bak"):  # replay the whole log
        if (path / "config" / name).exists():
            os.unlink(path / "config" / name)
    with open_store(path, impl, clock) as store:
        assert store.stats()["pop_skipped_records"] == 1
        assert store.pop_status(GROUP, TOPIC)[0]["in_flight"] == 1


def test_config_is_checked():
    from rocketstore import StoreConfig

    for options in (
        {"broker_cluster_name": "bad name"},
        {"broker_cluster_name": ""},
        {"pop_snapshot_interval_ms": -1},
    ):
        with pytest.raises(StoreConfigError):
            StoreConfig(**options)


def test_threads_never_share_a_message(tmp_path, impl, clock):
    import threading

    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 2000, queues=4)
        seen: list[bytes] = []
        lock = threading.Lock()

        def consume():
            while True:
                got = store.receive(GROUP, TOPIC, 16, 60_000)
                if not got:
                    return
                with lock:
                    seen.extend(bodies(got))
                store.ack_many(got)

        threads = [threading.Thread(target=consume) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(seen) == sorted(b"m%d" % i for i in range(2000))
        assert all(store.committed_offset(GROUP, TOPIC, q) == 500 for q in range(4))


@given(
    st.fixed_dictionaries(
        {"c": st.from_regex(r"[%|a-zA-Z0-9_-]{1,20}", fullmatch=True), "q": st.integers(0, 1 << 31)},
        optional={
            "aol": st.lists(st.integers(0, 1 << 62)),
            "rt": st.lists(st.integers(0, 1 << 31)),
            "pt": st.integers(0, 1 << 62),
            "r": st.sampled_from(["dlq", "gone"]),
        },
    )
)
def test_records_are_the_json_a_json_encoder_writes(record):
    assert _dumps(record) == json.dumps(record, separators=(",", ":"), sort_keys=True).encode()


def test_a_store_that_never_used_pop_gets_no_pop_file_nor_topic(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 3)
        store.get_message(GROUP, TOPIC, 0, 0)
    assert not (tmp_path / "s" / "config" / "rocketstorePop.json").exists()
    with open_store(tmp_path / "s", impl, clock) as store:
        assert REVIVE not in store.topics


def test_a_message_deleted_before_it_came_back_is_dropped_and_counted(tmp_path, impl, clock, monkeypatch):
    from rocketstore.errors import MessageNotFoundError

    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 2)
        store.receive(GROUP, TOPIC, 2, 10)
        clock.now += 10

        def gone(topic, queue_id, offset):
            raise MessageNotFoundError("deleted by retention")

        monkeypatch.setattr(store._opened.pop, "_lookup", gone)
        assert store.receive(GROUP, TOPIC, 2, 10) == []
        assert store.stats()["pop_lost_to_retention"] == 2
        assert store.committed_offset(GROUP, TOPIC, 0) == 2
        record = loads_fastjson(bytes(store.get_by_queue_offset(REVIVE, 0, 2).body).decode())
        assert record["r"] == "gone"


def test_a_snapshot_that_cannot_be_written_does_not_fail_the_receive(tmp_path, impl, clock, monkeypatch):
    from rocketstore.errors import DiskFullError

    path = tmp_path / "s"
    with open_store(path, impl, clock, pop_snapshot_interval_ms=100) as store:
        fill(store, 3)

        def full(force=False):
            raise DiskFullError(28, "No space left on device")

        monkeypatch.setattr(store._opened.pop._state, "persist", full)
        clock.now += 100
        got = store.receive(GROUP, TOPIC, 2, 60_000)
        assert len(got) == 2 and store.stats()["pop_snapshot_failures"] == 1
        monkeypatch.undo()
    with open_store(path, impl, clock) as store:  # the revive log had it all
        assert store.pop_status(GROUP, TOPIC)[0] == {"committed": 0, "next": 2, "in_flight": 2}


def test_an_ack_whose_flush_times_out_is_applied_and_raised(tmp_path, impl, clock, monkeypatch):
    from rocketstore.errors import FlushTimeoutError

    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 3)
        got = store.receive(GROUP, TOPIC, 3, 10)
        commitlog = store._opened.pop._parts.commitlog
        core = commitlog.core

        class Unconfirmed:  # stores, then reports the flush as timed out (SYNC_FLUSH)
            def put(self, *args):
                raise FlushTimeoutError("flush timed out", core.put(*args))

            def __getattr__(self, name):
                return getattr(core, name)

        monkeypatch.setattr(commitlog, "core", Unconfirmed())
        with pytest.raises(FlushTimeoutError):
            store.ack(got[0].handle)
        with pytest.raises(FlushTimeoutError):
            store.ack_many([got[1].handle])
        clock.now += 10
        again = store.receive(GROUP, TOPIC, 3, 10)  # a checkpoint's timeout is only logged
        assert bodies(again) == [b"m2"] and again[0].reconsume_times == 1
        monkeypatch.undo()
        assert store.committed_offset(GROUP, TOPIC, 0) == 2  # both acknowledged
        assert store.ack(got[0].handle) is False


def test_acknowledged_batches_do_not_pile_up_in_memory(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 3000)
        kept = store.receive(GROUP, TOPIC, 1, 60_000)  # one message stays in flight throughout
        while True:
            got = store.receive(GROUP, TOPIC, 2, 60_000)
            if not got:
                break
            store.ack_many(got)
        [lane] = store._opened.pop._lanes.values()
        assert len(lane.heap) <= 2 * 1 + 256 + 1 and len(lane.inflight) == 1
        clock.now += 60_000
        again = store.receive(GROUP, TOPIC, 10, 60_000)
        assert bodies(again) == bodies(kept) and again[0].reconsume_times == 1


def test_units_with_no_message_are_passed_over_and_recorded(tmp_path, impl, clock, monkeypatch):
    from rocketstore import GetMessageResult, GetMessageStatus

    path = tmp_path / "s"
    store = open_store(path, impl, clock)
    fill(store, 10)
    pop = store._opened.pop
    real = pop._pull
    hidden = 8  # as if units 0..7 were placeholders: each pull passes one over

    def pull(group, topic, qid, offset, max_msgs, *tag_filter):
        if offset < hidden:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, offset + 1)
        return real(group, topic, qid, offset, max_msgs, *tag_filter)

    monkeypatch.setattr(pop, "_pull", pull)
    monkeypatch.setattr("rocketstore.services.pop.service.PASS_OVER_PULLS", 5)
    assert store.receive(GROUP, TOPIC, 10, 1000) == []  # five passed over, recorded
    assert store.pop_status(GROUP, TOPIC)[0] == {"committed": 5, "next": 5, "in_flight": 0}
    assert bodies(store.receive(GROUP, TOPIC, 10, 1000)) == [b"m8", b"m9"]
    assert store.committed_offset(GROUP, TOPIC, 0) == 8
    store._opened.pop = None  # as if killed: the reopen replays the records
    store._teardown(clean=False)
    store._closed = True
    monkeypatch.undo()
    with open_store(path, impl, clock) as store:
        assert store.pop_status(GROUP, TOPIC)[0] == {"committed": 8, "next": 10, "in_flight": 2}


def test_tags_filter_what_is_received_and_the_rest_is_passed_over(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as store:
        store.create_topic(TOPIC, 1)
        for i in range(3000):  # a long run of TagB (more than one pull scans) before the TagA
            store.put(TOPIC, b"b%d" % i, tags="TagB", queue_id=0)
        for i in range(3):
            store.put(TOPIC, b"a%d" % i, tags="TagA", queue_id=0)
            store.put(TOPIC, b"c%d" % i, tags="TagC", queue_id=0)
        got = store.receive(GROUP, TOPIC, 10, 100, tags="TagA || TagC")
        assert bodies(got) == [b"a0", b"c0", b"a1", b"c1", b"a2", b"c2"]
        assert store.committed_offset(GROUP, TOPIC, 0) == 3000  # the TagB messages passed over
        store.ack_many(got[:2])
        assert store.committed_offset(GROUP, TOPIC, 0) == 3002
        clock.now += 100
        again = store.receive(GROUP, TOPIC, 10, 100, tags="TagA")  # due ones come back regardless
        assert sorted(bodies(again)) == [b"a1", b"a2", b"c1", b"c2"]
        assert len(store.receive("other", TOPIC, 4000, 100)) == 3006  # another group: everything
        with pytest.raises(InvalidMessageError):
            store.receive(GROUP, TOPIC, 1, 10, tags=5)  # type: ignore[arg-type]


def test_a_dead_letter_compacting_the_heap_mid_receive_loses_no_deadline(tmp_path, impl, clock, monkeypatch):
    from rocketstore import Message

    monkeypatch.setattr("rocketstore.services.pop.service.COMPACT_SLACK", -(1 << 30))  # compact at every ack
    with open_store(tmp_path / "s", impl, clock) as store:
        store.create_topic(TOPIC, 1)
        store.put(Message(TOPIC, b"m0", queue_id=0, reconsume_times=5))  # at its maximum already
        store.put(TOPIC, b"m1", queue_id=0)
        store.put(TOPIC, b"m2", queue_id=0)
        assert len(store.receive(GROUP, TOPIC, 3, 0, max_reconsume_times=5)) == 3  # due back at once
        # walking that checkpoint: m0 to the DLQ (an ack: the heap is compacted), m1 taken, m2 left
        assert bodies(store.receive(GROUP, TOPIC, 1, 0, max_reconsume_times=5)) == [b"m1"]
        assert sorted(bodies(store.receive(GROUP, TOPIC, 5, 0, max_reconsume_times=5))) == [b"m1", b"m2"]


def test_a_receive_reads_past_a_queue_file_end_and_filtered_units_for_its_max(tmp_path, impl, clock):
    # one pull stops at the end of a ConsumeQueue file (8 units here, the first loaded from
    # disk); a receive filtered by tag that got 4 of 5 there must go on into the next file
    # (found by tests/test_pop_model.py)
    path = tmp_path / "s"
    options = dict(consume_queue_units=8, dispatch_interval_ms=0)
    with open_store(path, impl, clock, **options) as store:
        store.create_topic("T", 1)
        for i in range(8):
            store.put("T", b"m%d" % i, tags="TagA")
        first = store.receive("g", "T", 4, 60_000)
        assert [bytes(r.message.body) for r in first] == [b"m0", b"m1", b"m2", b"m3"]
    with open_store(path, impl, clock, **options) as store:
        store.put("T", b"m8", tags="TagB")
    with open_store(path, impl, clock, **options) as store:
        store.put("T", b"m9", tags="TagA")
        got = store.receive("g", "T", 5, 60_000, tags="TagA")
        assert [bytes(r.message.body) for r in got] == [b"m4", b"m5", b"m6", b"m7", b"m9"]
        assert store.pop_status("g", "T")[0]["next"] == 10


@pytest.mark.parametrize(
    "group, topic, queue_id, first, count", [("g", "T", 0, 0, 1), ("%RETRY%g-1", "A_b|c", 7, 2**40, 32)]
)
def test_an_ack_record_is_written_as_the_general_encoder_writes_it(group, topic, queue_id, first, count):
    from rocketstore.services.pop.records import ACK_RANGE_JSON as _ACK_RANGE_JSON
    from rocketstore.services.pop.records import dumps as _dumps

    record = {"c": group, "t": topic, "q": queue_id, "so": first, "n": count}
    assert (_ACK_RANGE_JSON % (group, count, queue_id, first, topic)).encode() == _dumps(record)
