"""Transactional messages (rocketstore.services.transaction): RocketMQ's half / op records, each
transaction committed or rolled back exactly once, across crashes at every step."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from rocketstore import MessageStore, PreparedMessage
from rocketstore.errors import (
    InvalidMessageError,
    MessageNotFoundError,
    StoreReadOnlyError,
    SystemTopicError,
    TransactionStateError,
)
from rocketstore.services.transaction import CHECK_GROUP, DISCARD_TOPIC, HALF_TOPIC, OP_TOPIC

LATER = 10**13  # a check "now" past every immunity time


def _bodies(store, topic="Orders"):
    """Every body in ``topic``'s queues, in queue order."""
    out = []
    for (t, q), (lo, hi) in sorted(store.queues().items()):
        if t == topic:
            out += [bytes(store.get_by_queue_offset(t, q, o).body) for o in range(lo, hi)]
    return out


def _open(path, impl, **kw):
    s = MessageStore(path, implementation=impl.name, **kw)
    if "Orders" not in s.topics and not kw.get("read_only"):
        s.create_topic("Orders", 2)
    return s


def test_a_prepared_message_is_invisible_until_committed_and_committed_once(tmp_path, impl):
    with _open(str(tmp_path / "s"), impl) as s:
        p = s.prepare_transaction("Orders", b"order-1", tags="paid", keys="o-1", properties={"a": "b"})
        assert isinstance(p, PreparedMessage)
        assert _bodies(s) == []  # not in the real topic
        half = s.read(p.commitlog_offset)
        assert half.topic == HALF_TOPIC and half.queue_id == 0
        assert half.sys_flag & 0x0C == 0  # stored as the broker stores it: NOT_TYPE, dispatched
        props = half.properties
        assert props["REAL_TOPIC"] == "Orders" and props["REAL_QID"] == str(p.queue_id)
        assert (
            props["TRAN_MSG"] == "true"
            and props["UNIQ_KEY"] == props["__transactionId__"] == p.transaction_id
        )
        assert [m.commitlog_offset for m in s.open_transactions()] == [p.commitlog_offset]

        done = s.commit_transaction(p)
        assert (done.topic, done.queue_id, bytes(done.body)) == ("Orders", p.queue_id, b"order-1")
        assert done.sys_flag & 0x0C == 0x08  # COMMIT
        assert done.prepared_transaction_offset == p.commitlog_offset
        assert done.tags == "paid" and done.keys == "o-1" and done.properties["a"] == "b"
        assert "REAL_TOPIC" not in done.properties and "TRAN_MSG" not in done.properties
        assert done.properties["UNIQ_KEY"] == p.transaction_id
        assert s.query_by_key("Orders", "o-1")[0].commitlog_offset == done.commitlog_offset
        # committing again gives the same message and writes nothing
        end = s.max_offset
        assert s.commit_transaction(p).commitlog_offset == done.commitlog_offset
        assert s.max_offset == end
        assert _bodies(s) == [b"order-1"]
        assert s.open_transactions() == []
        op = s.get_by_queue_offset(OP_TOPIC, 0, 0)
        assert (op.tags, bytes(op.body)) == ("d", str(p.queue_offset).encode())
        with pytest.raises(TransactionStateError):
            s.rollback_transaction(p)
        assert s.verify()["ok"]


def test_a_rolled_back_message_is_never_delivered(tmp_path, impl):
    path = str(tmp_path / "s")
    with _open(path, impl) as s:
        p = s.prepare_transaction("Orders", b"order-2")
        s.rollback_transaction(p)
        s.rollback_transaction(p)  # again: nothing more
        with pytest.raises(TransactionStateError):
            s.commit_transaction(p)
        assert s.check_transactions(lambda m: "commit", now=LATER)["committed"] == 0
    with _open(path, impl) as s:
        assert _bodies(s) == [] and s.open_transactions() == []
        with pytest.raises(TransactionStateError):
            s.commit_transaction(p)


def test_bad_input_is_refused_and_writes_nothing(tmp_path, impl):
    with _open(str(tmp_path / "s"), impl) as s:
        plain = s.read(s.put("Orders", b"plain").commitlog_offset)
        end = s.max_offset
        with pytest.raises(SystemTopicError):
            s.prepare_transaction(HALF_TOPIC, b"x")
        with pytest.raises(InvalidMessageError, match="REAL_TOPIC"):
            s.prepare_transaction("Orders", b"x", properties={"REAL_TOPIC": "Other"})
        with pytest.raises(InvalidMessageError):
            s.prepare_transaction("Orders", b"x", producer_group="")
        with pytest.raises(InvalidMessageError):
            s.prepare_transaction("Orders", b"x", check_immunity_s=-1)
        with pytest.raises(TypeError):
            s.commit_transaction("not a handle")
        with pytest.raises(MessageNotFoundError, match="no half message"):
            s.commit_transaction(plain)
        with pytest.raises(TypeError):
            s.check_transactions("commit")
        assert s.max_offset == end
        assert _bodies(s) == [b"plain"]


def test_a_read_only_store_refuses_transactions(tmp_path, impl):
    path = str(tmp_path / "s")
    with _open(path, impl) as s:
        p = s.prepare_transaction("Orders", b"x")
    with _open(path, impl, read_only=True) as r:
        with pytest.raises(StoreReadOnlyError):
            r.commit_transaction(p)
        with pytest.raises(StoreReadOnlyError):
            r.prepare_transaction("Orders", b"y")


def test_check_asks_about_old_half_messages_only_and_renews_the_unknown(tmp_path, impl):
    path = str(tmp_path / "s")
    with _open(path, impl) as s:
        a = s.prepare_transaction("Orders", b"a")
        b = s.prepare_transaction("Orders", b"b", check_immunity_s=3600)
        born = s.read(a.commitlog_offset).born_timestamp
        asked = []
        # too young (the 6 s timeout): nobody is asked
        assert s.check_transactions(asked.append, now=born + 1000)["unknown"] == 0 and asked == []
        # a is old enough, b is immune for an hour: the walk stops at b
        counts = s.check_transactions(lambda m: asked.append(bytes(m.body)), now=born + 10_000)
        assert asked == [b"a"] and counts["unknown"] == 1
        renewed = [m for m in s.open_transactions() if bytes(m.body) == b"a"]
        assert [m.properties["TRANSACTION_CHECK_TIMES"] for m in renewed] == ["1"]
        assert renewed[0].properties["__transactionId__"] == a.transaction_id
        assert s.committed_offset(CHECK_GROUP, HALF_TOPIC, 0) == 1  # past a, not past b
        # an hour on: b, then a's renewed copy; a is committed through its copy
        counts = s.check_transactions(
            lambda m: "commit" if m.body == b"a" else "rollback", now=born + 4_000_000
        )
        assert counts["committed"] == 1 and counts["rolled_back"] == 1
        assert _bodies(s) == [b"a"] and s.open_transactions() == []
        with pytest.raises(TransactionStateError):
            s.rollback_transaction(a)  # the original handle knows it was committed
        with pytest.raises(TransactionStateError):
            s.commit_transaction(b)
    with open(os.path.join(path, "config", "consumerOffset.json")) as f:  # fastjson: int keys bare
        assert f'"{HALF_TOPIC}@{CHECK_GROUP}":{{0:3' in f.read().replace("\n", "").replace("\t", "")


def test_a_half_message_checked_too_often_is_set_aside(tmp_path, impl):
    with _open(str(tmp_path / "s"), impl) as s:
        s.prepare_transaction("Orders", b"stuck")
        for _ in range(2):  # asked max_checks times
            assert s.check_transactions(lambda m: None, max_checks=2, now=LATER)["unknown"] == 1
        counts = s.check_transactions(lambda m: None, max_checks=2, now=LATER)
        assert counts["discarded"] == 1 and s.open_transactions() == []
        kept = s.get_by_queue_offset(DISCARD_TOPIC, 0, 0)
        assert bytes(kept.body) == b"stuck" and kept.properties["TRANSACTION_CHECK_TIMES"] == "2"
        assert _bodies(s) == []


def test_check_rejects_an_answer_it_does_not_know(tmp_path, impl):
    with _open(str(tmp_path / "s"), impl) as s:
        s.prepare_transaction("Orders", b"x")
        with pytest.raises(InvalidMessageError, match="commit"):
            s.check_transactions(lambda m: "yes", now=LATER)
        assert len(s.open_transactions()) == 1


# ---- crashes: a writer killed at each step ----

CHILD = textwrap.dedent(
    """
    import os, sys
    from rocketstore import MessageStore
    from rocketstore.services import transaction
    path, impl, where, base = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    s = MessageStore(path, implementation=impl)
    if "Orders" not in s.topics:
        s.create_topic("Orders", 2)
    real_close = transaction.TransactionService._close
    real_advance = transaction.TransactionService._advance
    def die(*a, **k):
        os.kill(os.getpid(), 9)
    if where == "after-real":  # the real message is written, its op is not
        transaction.TransactionService._close = die
        p = s.prepare_transaction("Orders", b"t-commit")
        s.commit_transaction(p)
    elif where == "during-check":  # a renewed copy is written, the walk's offset is not
        transaction.TransactionService._advance = die
        s.prepare_transaction("Orders", b"t-check")
        s.check_transactions(lambda m: None, now=10**13)
    elif where == "loop":  # transactions until killed; the body says how each must end
        i = base
        while True:
            p = s.prepare_transaction("Orders", b"%d" % i, durable=False)
            if i % 3 == 0:
                s.commit_transaction(p)
            elif i % 3 == 1:
                s.rollback_transaction(p)
            if i == base + 20:
                print("ready", flush=True)
            i += 1
    """
)


def _child(path, impl, where, base=0):
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, path, impl.name, where, str(base)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _committed_exactly_once(s):
    bodies = _bodies(s)
    assert len(bodies) == len(set(bodies)), f"a transaction was delivered twice: {sorted(bodies)}"
    return bodies


@pytest.mark.parametrize(
    "where, answer", [("after-real", "commit"), ("during-check", "commit"), ("during-check", "rollback")]
)
def test_a_crash_at_each_step_never_resolves_a_transaction_twice(tmp_path, impl, where, answer):
    path = str(tmp_path / "s")
    child = _child(path, impl, where)
    _out, err = child.communicate(timeout=120)
    assert child.returncode == -signal.SIGKILL, err
    asked = []
    with _open(path, impl) as s:
        counts = s.check_transactions(lambda m: asked.append(bytes(m.body)) or answer, now=LATER)
        bodies = _committed_exactly_once(s)
        assert s.open_transactions() == []
        if where == "after-real":
            # committed before the crash: the check closes it without asking anyone
            assert bodies == [b"t-commit"] and asked == [] and counts["closed"] == 1
        else:
            # the original and its renewed copy are one transaction: asked once, resolved once
            assert asked == [b"t-check"] and counts["closed"] == 1
            assert bodies == ([b"t-check"] if answer == "commit" else [])
        assert s.verify()["ok"]


def test_writers_killed_at_random_leave_every_transaction_resolved_once(tmp_path, impl, rng):
    """Each transaction's number says how it ends: 0 mod 3 committed by the writer, 1 rolled
    back by it, 2 left open for the check to commit; the writer is killed anywhere."""
    path = str(tmp_path / "s")
    for round_ in range(3):
        child = _child(path, impl, "loop", base=round_ * 1_000_000)
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        time.sleep(rng.uniform(0.0, 0.3))
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=60)

        with _open(path, impl) as s:
            s.check_transactions(lambda m: "rollback" if int(m.body) % 3 == 1 else "commit", now=LATER)
            assert s.open_transactions() == []
            committed = _committed_exactly_once(s)
            prepared = {
                bytes(s.get_by_queue_offset(HALF_TOPIC, 0, o).body)
                for o in range(s.max_queue_offset(HALF_TOPIC, 0))
            }
            assert len(prepared) >= 21 * (round_ + 1)
            assert set(committed) == {b for b in prepared if int(b) % 3 != 1}


def test_op_records_a_5x_broker_batches_close_every_offset_they_name(tmp_path, impl):
    """5.x's TransactionalOpBatchService writes "3,4,7," bodies; rocketstore writes one offset."""
    from rocketstore.message import Message

    with _open(str(tmp_path / "s"), impl) as s:
        a, b, c = (s.prepare_transaction("Orders", b"%d" % i) for i in range(3))
        # an op record as a 5.x broker writes it, through the store's own put into system topics
        s._opened.parts.put_message(
            Message(OP_TOPIC, b"%d,%d," % (a.queue_offset, c.queue_offset), tags="d"), None, 0
        )
        assert [m.commitlog_offset for m in s.open_transactions()] == [b.commitlog_offset]
        with pytest.raises(TransactionStateError):
            s.commit_transaction(a)  # closed without a COMMIT record: rolled back
