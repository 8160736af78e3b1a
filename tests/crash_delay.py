"""Crash test of delayed delivery: a writer is SIGKILLed while its delay service delivers; every
delayed message must reach its real topic exactly once.

    python tests/crash_delay.py --iterations 200
    python tests/crash_delay.py --iterations 50 --impl py --seed 7

The child (``child`` sub-command) opens the store with a delay clock running 1000 times faster
than real time and a delivery pass every millisecond, so levels 1..6 (1 s .. 2 min) fall due 1 to
120 ms after their put and the service is nearly always inside a pass. Writer threads put
delayed messages (durable ones, acknowledged with an ``ACK <UNIQ_KEY>`` line; asynchronous ones)
and plain messages into the same topics; small segments, ConsumeQueue and index files roll.
Each iteration kills several children in turn on one store at random moments.

Then the parent notes whether the last kill hit a delivery pass (``delayOffset.json`` holds an
intent), reopens the store with a clock a day ahead, delivers everything due, and checks:

* every scheduled record (a unit of SCHEDULE_TOPIC_XXXX) has exactly one copy in its
  ``REAL_TOPIC`` / ``REAL_QID``, with its body, and no copy lacks a scheduled record
  (no loss, no duplicate);
* every acknowledged delayed put is among the scheduled records;
* nothing is left waiting, and ``verify()`` finds no damage.

Any exception during the checks counts as a violation. The suite runs a few iterations
(tests/test_crash_delay.py); this script runs many and prints the totals.
"""

from __future__ import annotations

import os
import random
import sys
import time

from crash_harness import (
    SMALL_STORE,
    acked_keys,
    check_delivered_once,
    child_lines,
    run_iterations,
    run_writers,
    start_and_kill,
)

HERE = os.path.dirname(os.path.abspath(__file__))
SPEED = 1000  # the child's delay clock runs this much faster than real time
LEVELS = range(1, 7)  # 1 s .. 2 min: 1 .. 120 ms real
TOPICS = ("DelayA", "DelayB")
STORE_OPTIONS = SMALL_STORE


# -- the child ------------------------------------------------------------------------------------


def child_main(path: str, implementation: str, seed: int) -> None:
    from rocketstore import MessageStore, PutStatus
    from rocketstore.base._clock import now_ms
    from rocketstore.errors import FlushTimeoutError

    started = now_ms()

    def fast_clock() -> int:
        return started + (now_ms() - started) * SPEED

    store = MessageStore(
        path, implementation=implementation, clock=fast_clock, schedule_interval_ms=1, **STORE_OPTIONS
    )
    emit = child_lines()

    def writer(t: int) -> None:
        rng = random.Random(seed * 31 + t)
        n = 0
        while True:
            n += 1
            topic = rng.choice(TOPICS)
            body = b"w%d-%d:" % (t, n) + rng.randbytes(rng.randrange(0, 300))
            op = rng.random()
            if op < 0.5:
                try:
                    r = store.put(
                        topic,
                        body,
                        delay_level=rng.choice(LEVELS),
                        queue_id=rng.randrange(4),
                        tags="d",
                        durable=True,
                    )
                except FlushTimeoutError:  # stored, but not promised durable
                    continue
                if r.status is PutStatus.PUT_OK:
                    emit(f"ACK {r.unique_key}\n")
            elif op < 0.8:
                store.put(topic, body, delay_level=rng.choice(LEVELS), keys=f"k{t}-{n}")
            else:
                store.put(topic, body, tags="plain")
            if rng.random() < 0.05:
                time.sleep(0.001)

    run_writers(writer, emit, f"READY {store._schedule.reconciled}\n")


# -- the parent -----------------------------------------------------------------------------------


def run_and_kill(path: str, implementation: str, rng: random.Random, src: str):
    """Start a child, SIGKILL it at a random moment; returns (acked UNIQ_KEYs, reconciled on open)."""
    ready, out = start_and_kill(
        __file__, path, implementation, rng, src, delays=(0.0, 0.03, 0.1, 0.3), jitter=0.4
    )
    acked = acked_keys(out)
    return acked, int(ready[1])


def killed_inside_a_pass(path: str) -> bool:
    """Whether delayOffset.json (or its .bak, if the file was being replaced) holds an intent."""
    from rocketstore.services.schedule import DelayProgress

    return DelayProgress.in_store(path, read_only=True).intent is not None


def check_store(path: str, implementation: str, acked: set) -> dict:
    """Deliver everything with a clock a day ahead, then check exactly-once (module docstring)."""
    from rocketstore import MessageStore
    from rocketstore.base._clock import now_ms
    from rocketstore.services.schedule import SCHEDULE_TOPIC

    ahead = now_ms() + 86_400_000
    with MessageStore(
        path, implementation=implementation, clock=lambda: ahead, schedule_interval_ms=0, **STORE_OPTIONS
    ) as store:
        assert not store.last_shutdown_clean, "the crash left no abort file"
        reconciled = store._schedule.reconciled
        store.deliver_delayed()
        assert store.delayed_counts() == {}, f"still waiting: {store.delayed_counts()}"
        scheduled = {}
        for (topic, qid), (lo, hi) in store.queues().items():
            if topic != SCHEDULE_TOPIC:
                continue
            assert lo == 0, f"schedule queue {qid} starts at {lo}"
            for q in range(lo, hi):
                m = store.get_by_queue_offset(topic, qid, q)
                assert m.unique_key not in scheduled, f"two scheduled records with {m.unique_key}"
                scheduled[m.unique_key] = m
        found: dict = {}
        for topic in TOPICS:
            for (t, qid), (lo, hi) in store.queues().items():
                if t != topic:
                    continue
                for q in range(lo, hi):
                    m = store.get_by_queue_offset(t, qid, q)
                    if "REAL_TOPIC" in m.properties:
                        found.setdefault(m.unique_key, []).append(m)
        check_delivered_once(scheduled, found, "delayed")
        missing = acked - set(scheduled)
        assert not missing, f"{len(missing)} acknowledged delayed puts are gone, e.g. {sorted(missing)[:3]}"
        report = store.verify()
        assert report["ok"], f"verify: {report['problems'][:5]}"
    return {"scheduled": len(scheduled), "acknowledged": len(acked), "reconciled": reconciled}


def one_iteration(
    workdir: str, implementation: str, rng: random.Random, *, src: str, rounds: int = 3
) -> dict:
    path = os.path.join(workdir, "store")
    acked: set = set()
    reconciled = in_pass = 0
    for _ in range(rounds):
        keys, settled = run_and_kill(path, implementation, rng, src)
        acked.update(keys)
        reconciled += settled
        in_pass += killed_inside_a_pass(path)
    counts = check_store(path, implementation, acked)
    counts["reconciled"] += reconciled
    counts["kills_in_pass"] = in_pass
    counts["kills"] = rounds
    return counts


def main(argv=None) -> int:
    return run_iterations(
        "crash_delay",
        __doc__,
        argv,
        one_iteration,
        {"scheduled": 0, "acknowledged": 0, "reconciled": 0, "kills_in_pass": 0, "kills": 0},
        lambda totals, iterations, violations: (
            f"done: {iterations} iterations, {totals['kills']} kills "
            f"({totals['kills_in_pass']} inside a delivery pass, {totals['reconciled']} passes settled on open), "
            f"{totals['scheduled']} delayed messages ({totals['acknowledged']} acknowledged durable), "
            f"{violations} violations"
        ),
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child_main(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(main())
