"""Crash test of writing a BatchCQ topic: writers are SIGKILLed while they put inner batches and
single messages into a ``queue.type=BatchCQ`` topic; no acknowledged message may be lost and no
queue offset may hand out a wrong message.

    python tests/crash_batchcq.py --iterations 200
    python tests/crash_batchcq.py --iterations 50 --impl py --seed 7

The child (``child`` sub-command) opens the store (small segments, so batches roll them; a
checkpoint every 20 ms, so kills fall around it), and writer threads put batches of 1 to 20
messages (``put_batch``, ``put_messages``) and single messages into the BatchCQ topic's queues.
Every message's body names its child and writer, its put and its place in the batch; a durable put is
acknowledged with an ``ACK <writer> <put> <count>`` line once it returned. Each iteration kills
several children in turn on one store at random moments, then reopens it and checks:

* each queue's offsets run from 0 without a gap, and every queue offset hands out the message
  its batch record put there (the body names the batch's first message and its index: queue
  offset = the record's base + index), read by ``get_message``, ``get_by_queue_offset`` and
  ``queue_units``/``records_at`` alike;
* every acknowledged put is there whole (all its messages);
* what the BatchConsumeQueue files hold after the check's clean close is what a read-only open
  finds, and ``verify()`` finds no damage.
"""

from __future__ import annotations

import os
import random
import sys
import time

from crash_harness import child_lines, run_iterations, run_writers, start_and_kill

TOPIC = "BatchTopic"
QUEUES = 3
STORE_OPTIONS = dict(commitlog_file_size=64 * 1024, checkpoint_interval_ms=20)


# -- the child ------------------------------------------------------------------------------------


def child_main(path: str, implementation: str, seed: int) -> None:
    from rocketstore import Message, MessageStore, PutStatus
    from rocketstore.errors import FlushTimeoutError

    run = seed % 1_000_000  # (the writers' names differ from one child to the next)
    store = MessageStore(path, implementation=implementation, **STORE_OPTIONS)
    store.create_topic(TOPIC, QUEUES, queue_type="BatchCQ")
    emit = child_lines()

    def writer(t: int) -> None:
        rng = random.Random(seed * 31 + t)
        n = 0
        while True:
            n += 1
            count = rng.choice((1, 1, 2, 3, 7, 20))
            qid = rng.randrange(QUEUES)
            bodies = [
                b"w%d-%d-%d-%d:" % (run * 10 + t, n, i, count) + rng.randbytes(rng.randrange(0, 200))
                for i in range(count)
            ]
            durable = rng.random() < 0.5
            try:
                op = rng.random()
                if count == 1 and op < 0.5:
                    r = store.put(TOPIC, bodies[0], tags="one", queue_id=qid, durable=durable)
                elif op < 0.75:
                    r = store.put_batch(TOPIC, bodies, tags="b", queue_id=qid, durable=durable)
                else:
                    r = store.put_messages(
                        [
                            Message(TOPIC, b, tags=f"t{i % 2}", keys=f"k{t}-{n}-{i}", queue_id=qid)
                            for i, b in enumerate(bodies)
                        ],
                        durable=durable,
                    )[0]
            except FlushTimeoutError:  # stored, but not promised durable
                continue
            if durable and r.status is PutStatus.PUT_OK:
                emit(f"ACK {run * 10 + t} {n} {count}\n")
            if rng.random() < 0.05:
                time.sleep(0.001)

    run_writers(writer, emit, "READY 0\n")


# -- the parent -----------------------------------------------------------------------------------


def run_and_kill(path: str, implementation: str, rng: random.Random, src: str) -> set:
    """Start a child, SIGKILL it at a random moment; returns the acknowledged puts."""
    _ready, out = start_and_kill(
        __file__, path, implementation, rng, src, delays=(0.0, 0.05, 0.2), jitter=0.4
    )
    acked = set()
    for line in out.split(b"\n")[:-1]:
        if line.startswith(b"ACK "):
            _, t, n, count = line.split()
            acked.add((int(t), int(n), int(count)))
    return acked


def _name(body: bytes) -> tuple[int, int, int, int]:
    """(writer, put, index, count) a body names."""
    head = bytes(body).split(b":", 1)[0][1:]
    t, n, i, count = (int(x) for x in head.split(b"-"))
    return t, n, i, count


def check_store(path: str, implementation: str, acked: set) -> dict:
    """The checks of the module docstring; returns counts."""
    from rocketstore import MessageStore

    found: dict = {}  # (writer, put) -> {index: (queue id, queue offset)}
    with MessageStore(path, implementation=implementation, **STORE_OPTIONS) as store:
        assert not store.last_shutdown_clean, "the crash left no abort file"
        for (topic, qid), (lo, hi) in sorted(store.queues().items()):
            if topic != TOPIC:
                continue
            assert lo == 0, f"queue {qid} starts at {lo}"
            pulled = []
            pos = 0
            while pos < hi:
                got = store.get_message("check", TOPIC, qid, pos, 64)
                assert got.messages, f"queue {qid}: nothing at {pos} of {hi}"
                pulled += got.messages
                pos = got.next_begin_offset
            assert [m.queue_offset for m in pulled] == list(range(hi)), f"queue {qid} has a gap"
            base = {}
            for m in pulled:
                t, n, i, count = _name(m.body)
                assert m.queue_id == qid
                first = base.setdefault((t, n), m.queue_offset - i)
                assert m.queue_offset == first + i, (
                    f"queue {qid} offset {m.queue_offset}: message {t}-{n}-{i}"
                )
                found.setdefault((t, n), {})[i] = (qid, m.queue_offset, count)
                one = store.get_by_queue_offset(TOPIC, qid, m.queue_offset)
                assert one.body == m.body
            units = store.queue_units(TOPIC, qid, 0, hi)
            rows = [
                int(r["queue_offset"])
                for _b, _v, rs in store.records_at(
                    units["commitlog_offset"], units["size"], queue=(TOPIC, qid, 0)
                )
                for r in rs
            ]
            assert rows == list(range(hi))
        for key, got in found.items():
            count = next(iter(got.values()))[2]
            assert sorted(got) == list(range(count)), f"put {key} is not whole: {sorted(got)} of {count}"
        missing = [a for a in acked if (a[0], a[1]) not in found]
        assert not missing, f"{len(missing)} acknowledged puts are gone, e.g. {missing[:3]}"
        report = store.verify()
        assert report["ok"], f"verify: {report['problems'][:5]}"
        bounds = {k: v for k, v in store.queues().items() if k[0] == TOPIC}
    with MessageStore(path, implementation=implementation, read_only=True) as store:
        assert {k: v for k, v in store.queues().items() if k[0] == TOPIC} == bounds
        for (_t, qid), (_lo, hi) in bounds.items():
            bq = store._batch.get(TOPIC, qid)  # noqa: SLF001 (the units read from the files)
            disk = bq.disk_units
            assert len(disk) == len(bq), f"queue {qid}: the files hold {len(disk)} units, the queue {len(bq)}"
            assert int(disk["base"][-1] + disk["batch_size"][-1]) == hi
    return {"messages": sum(len(v) for v in found.values()), "acknowledged": len(acked)}


def one_iteration(
    workdir: str, implementation: str, rng: random.Random, *, src: str, rounds: int = 3
) -> dict:
    path = os.path.join(workdir, "store")
    acked: set = set()
    for _ in range(rounds):
        acked |= run_and_kill(path, implementation, rng, src)
    counts = check_store(path, implementation, acked)
    counts["kills"] = rounds
    return counts


def main(argv=None) -> int:
    return run_iterations(
        "crash_batchcq",
        __doc__,
        argv,
        one_iteration,
        {"messages": 0, "acknowledged": 0, "kills": 0},
        lambda totals, iterations, violations: (
            f"done: {iterations} iterations, {totals['kills']} kills, {totals['messages']} messages "
            f"({totals['acknowledged']} acknowledged durable puts), {violations} violations"
        ),
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child_main(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(main())
