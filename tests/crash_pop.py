"""Crash test of acknowledgement per message (POP): a process receiving and acknowledging is
SIGKILLed at random moments; after it, nothing received and not acknowledged is lost, and
nothing acknowledged comes back.

    python tests/crash_pop.py --iterations 50
    python tests/crash_pop.py --iterations 20 --impl py --seed 7

The parent fills a store with messages in four queues. Each child (``child`` sub-command) runs
two consumer threads and a producer thread on it (real clock, invisible times of 5 to 500 ms so
messages also come back inside the child, snapshots every 20 ms). The consumers receive batches
and print ``RECV <body> <reconsume times>`` once ``receive`` returned; they acknowledge some
messages one by one and some with ``ack_many``, move the deadline of some, and leave the rest
to expire; before an acknowledgement they print ``TRY <bodies>``, after it ``ACK <bodies>`` (the
messages it acknowledged). The producer prints ``PUT <body>`` after each durable put. Several
children are killed in turn on one store.

Then the parent reopens the store with a clock a day ahead, receives until nothing comes (each
message acknowledged at once), and checks:

* no message printed ``ACK`` (by any killed child) is received again, neither by a later child
  nor by the final drain;
* every message in the topic was either received by the drain or acknowledged by a child
  (``ACK``, or ``TRY`` without ``ACK``: the kill came inside that ack), and each put printed
  ``PUT`` is in the topic;
* the drain hands each message out once, and a message a child received comes back with its
  reconsume times raised (the checkpoint was durable before ``RECV`` was printed);
* afterwards the group's committed offset of every queue is the queue's end.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time

from crash_harness import run_iterations, start_and_kill

TOPIC, GROUP, QUEUES, PREFILL = "PopCrash", "popCrashGroup", 4, 400
MAX_RECONSUME = 100_000  # no dead letters here: every message must come back
STORE_OPTIONS = dict(
    commitlog_file_size=256 * 1024,
    consume_queue_units=300,
    default_queues=QUEUES,
    checkpoint_interval_ms=20,
    pop_snapshot_interval_ms=20,
)


# -- the child ------------------------------------------------------------------------------------


def consume(store, emit, rng: random.Random) -> None:
    """One consumer thread of the child: receive, print, acknowledge some, let others expire."""
    while True:
        got = store.receive(
            GROUP, TOPIC, rng.randint(1, 32), rng.choice([5, 50, 500]), max_reconsume_times=MAX_RECONSUME
        )
        if not got:
            time.sleep(0.002)
            continue
        emit("".join(f"RECV {r.message.body.decode()} {r.reconsume_times}\n" for r in got))
        batch = [(r.handle, r.message.body.decode()) for r in got if settle_one(store, emit, rng, r)]
        if batch:
            ack_batch(store, emit, batch)


def settle_one(store, emit, rng: random.Random, received) -> bool:
    """Acknowledge it, move its deadline, or leave it; True: acknowledge it with the batch."""
    from rocketstore.errors import ReceiptHandleExpiredError

    body = received.message.body.decode()
    op = rng.random()
    try:
        if op < 0.45:
            emit(f"TRY {body}\n")
            if store.ack(received.handle):
                emit(f"ACK {body}\n")
        elif 0.8 <= op < 0.9:
            store.change_invisible_time(received.handle, rng.choice([0, 20, 300]))
    except ReceiptHandleExpiredError:
        pass  # it came back to the other consumer meanwhile
    return 0.45 <= op < 0.8


def ack_batch(store, emit, batch: list) -> None:
    from rocketstore.errors import ReceiptHandleExpiredError

    emit("TRY " + " ".join(b for _h, b in batch) + "\n")
    try:
        store.ack_many([h for h, _b in batch])
        done = [b for _h, b in batch]
    except ReceiptHandleExpiredError as exc:
        stale = set(exc.handles)
        done = [b for h, b in batch if h not in stale]
    if done:
        emit("ACK " + " ".join(done) + "\n")


def child_main(path: str, implementation: str, seed: int) -> None:
    from rocketstore import MessageStore
    from rocketstore.errors import FlushTimeoutError

    store = MessageStore(path, implementation=implementation, **STORE_OPTIONS)
    out = sys.stdout
    out_lock = threading.Lock()

    def emit(line: str) -> None:
        with out_lock:
            out.write(line)
            out.flush()

    def producer() -> None:
        n = 0
        while True:
            n += 1
            body = f"p{seed}-{n}"
            try:
                store.put(TOPIC, body.encode(), durable=True)
            except FlushTimeoutError:
                continue  # stored, but not promised durable
            emit(f"PUT {body}\n")
            time.sleep(0.001)

    threads = [
        threading.Thread(target=consume, args=(store, emit, random.Random(seed * 31 + t)), daemon=True)
        for t in range(2)
    ]
    threads.append(threading.Thread(target=producer, daemon=True))
    emit("READY\n")
    for th in threads:
        th.start()
    while True:
        time.sleep(1)


# -- the parent -----------------------------------------------------------------------------------


class Log:
    """What the children printed, kill after kill."""

    def __init__(self) -> None:
        self.acked: set[str] = set()  # ACK in an earlier child
        self.tried: set[str] = set()
        self.received: dict[str, int] = {}  # body -> highest reconsume times seen
        self.put: set[str] = set()
        self.kills = 0

    def add(self, out: bytes) -> None:
        acked_now: set[str] = set()
        for line in out.decode().split("\n")[:-1]:  # a line cut by the kill has no newline
            kind, *rest = line.split()
            if kind == "RECV":
                body, times = rest
                assert body not in self.acked, f"{body} was acknowledged by an earlier child, received again"
                self.received[body] = max(self.received.get(body, -1), int(times))
            elif kind == "TRY":
                self.tried.update(rest)
            elif kind == "ACK":
                acked_now.update(rest)
            elif kind == "PUT":
                self.put.add(rest[0])
        self.acked |= acked_now
        self.kills += 1


def prefill(path: str, implementation: str) -> None:
    from rocketstore import MessageStore

    with MessageStore(path, implementation=implementation, **STORE_OPTIONS) as store:
        store.create_topic(TOPIC, QUEUES)
        for i in range(PREFILL):
            store.put(TOPIC, f"m{i}".encode(), queue_id=i % QUEUES)


def check_store(path: str, implementation: str, log: Log) -> dict:
    from rocketstore import MessageStore
    from rocketstore.base._clock import now_ms

    ahead = now_ms() + 86_400_000
    with MessageStore(
        path,
        implementation=implementation,
        clock=lambda: ahead,
        pop_snapshot_interval_ms=0,
        **{k: v for k, v in STORE_OPTIONS.items() if k != "pop_snapshot_interval_ms"},
    ) as store:
        assert not store.last_shutdown_clean, "the crash left no abort file"
        stored = set()
        for qid in range(QUEUES):
            for q in range(store.min_queue_offset(TOPIC, qid), store.max_queue_offset(TOPIC, qid)):
                stored.add(store.get_by_queue_offset(TOPIC, qid, q).body.decode())
        drained: dict[str, int] = {}
        while True:
            got = store.receive(GROUP, TOPIC, 256, 60_000, max_reconsume_times=MAX_RECONSUME)
            if not got:
                break
            for r in got:
                body = r.message.body.decode()
                assert body not in drained, f"{body} handed out twice by the drain"
                assert body not in log.acked, f"{body} was acknowledged, and came back after the crash"
                drained[body] = r.reconsume_times
                if body in log.received:
                    assert r.reconsume_times > log.received[body], (
                        f"{body}: reconsume times {r.reconsume_times} after {log.received[body]} before"
                    )
            store.ack_many([r.handle for r in got])
        missing_puts = log.put - stored
        assert not missing_puts, (
            f"{len(missing_puts)} acknowledged puts are gone, e.g. {sorted(missing_puts)[:3]}"
        )
        lost = stored - set(drained) - log.acked - log.tried
        assert not lost, (
            f"{len(lost)} messages neither acknowledged nor received again, e.g. {sorted(lost)[:3]}"
        )
        for qid in range(QUEUES):
            end = store.max_queue_offset(TOPIC, qid)
            assert store.committed_offset(GROUP, TOPIC, qid) == end, (
                f"queue {qid}: committed {store.committed_offset(GROUP, TOPIC, qid)}, end {end}"
            )
        stats = store.stats()
        assert stats["pop_in_flight"] == 0 and stats["pop_skipped_records"] == 0, stats
    return {
        "messages": len(stored),
        "acked_by_children": len(log.acked),
        "came_back": sum(1 for b in drained if b in log.received),
        "kills": log.kills,
    }


def one_iteration(
    workdir: str, implementation: str, rng: random.Random, *, src: str, rounds: int = 3
) -> dict:
    path = os.path.join(workdir, "store")
    prefill(path, implementation)
    log = Log()
    for i in range(rounds):
        _ready, out = start_and_kill(
            __file__, path, implementation, rng, src, delays=(0.05, 0.2, 0.5), jitter=0.4
        )
        with open(os.path.join(workdir, f"child-{i}.out"), "wb") as f:  # for a post-mortem
            f.write(out)
        log.add(out)
    return check_store(path, implementation, log)


def main(argv=None) -> int:
    return run_iterations(
        "crash_pop",
        __doc__,
        argv,
        one_iteration,
        {"messages": 0, "acked_by_children": 0, "came_back": 0, "kills": 0},
        lambda totals, iterations, violations: (
            f"done: {iterations} iterations, {totals}, {violations} violations"
        ),
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child_main(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(main())
