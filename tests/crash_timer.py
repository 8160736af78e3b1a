"""Crash test of timer messages: a writer is SIGKILLed while its timer service delivers; every
timer message must reach its real topic exactly once.

    python tests/crash_timer.py --iterations 100
    python tests/crash_timer.py --iterations 30 --impl py --seed 7

The child (``child`` sub-command) opens the store with a timer pass at least every millisecond.
Writer threads put timer messages due 1 to 300 ms after their put (``delay_ms=`` or
``deliver_at_ms=``; durable ones, acknowledged with an ``ACK <UNIQ_KEY>`` line, and asynchronous
ones) and plain messages into the same topics; small segments, ConsumeQueue and index files
roll. Each iteration kills several children in turn on one store at random moments.

Then the parent notes whether the last kill left an intent in ``config/timerProgress`` (a pass
in progress, or the last pass, whose state after is saved with the next one's intent), reopens
the store with a clock a day ahead, delivers everything due, and checks:

* every timer record (a unit of rmq_sys_wheel_timer) has exactly one copy in its ``REAL_TOPIC``
  / ``REAL_QID``, with its body, and no copy lacks a timer record (no loss, no duplicate);
* every acknowledged timer put is among the timer records (or, when its time had passed by the
  time the put ran, a plain message in its topic);
* nothing is left waiting, and ``verify()`` finds no damage.

It prints how many passes were settled on open and how many copies those found already
written (``resumed``: what a broker's at-least-once checkpoint would have delivered again).

After each kill, before anything reopens the store, it also reads RocketMQ 5.x's timer files as
a broker taking over would (rocketstore.queues.timerwheel: the slots from the checkpoint's
``lastReadTimeMs`` on, then the timer queue from its offset; with no ``timercheck``, the whole
queue) and checks that every timer message not delivered yet is among those: a broker never
loses one. The ones it would deliver again are counted (``broker_repeats``: the delivered ones of
the slot in progress and those read since the last checkpoint, docs/guide/timers.md).
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
TOPICS = ("TimerA", "TimerB")
STORE_OPTIONS = SMALL_STORE


# -- the child ------------------------------------------------------------------------------------


def child_main(path: str, implementation: str, seed: int) -> None:
    from rocketstore import MessageStore, PutStatus
    from rocketstore.base._clock import now_ms
    from rocketstore.errors import FlushTimeoutError

    store = MessageStore(path, implementation=implementation, timer_interval_ms=1, **STORE_OPTIONS)
    emit = child_lines()

    def writer(t: int) -> None:
        rng = random.Random(seed * 31 + t)
        n = 0
        while True:
            n += 1
            topic = rng.choice(TOPICS)
            body = b"w%d-%d:" % (t, n) + rng.randbytes(rng.randrange(0, 300))
            op = rng.random()
            when = rng.randrange(1, 300)
            timer = {"delay_ms": when} if rng.random() < 0.5 else {"deliver_at_ms": now_ms() + when}
            if op < 0.5:
                try:
                    r = store.put(topic, body, queue_id=rng.randrange(4), tags="d", durable=True, **timer)
                except FlushTimeoutError:  # stored, but not promised durable
                    continue
                if r.status is PutStatus.PUT_OK:
                    emit(f"ACK {r.unique_key}\n")
            elif op < 0.8:
                store.put(topic, body, keys=f"k{t}-{n}", **timer)
            else:
                store.put(topic, body, tags="plain")
            if rng.random() < 0.05:
                time.sleep(0.001)

    stats = store.timer_stats()
    run_writers(writer, emit, f"READY {stats['reconciled']} {stats['resumed']}\n")


# -- the parent -----------------------------------------------------------------------------------


def run_and_kill(path: str, implementation: str, rng: random.Random, src: str):
    """Start a child, SIGKILL it at a random moment; returns (acked UNIQ_KEYs, settled, resumed)."""
    ready, out = start_and_kill(
        __file__, path, implementation, rng, src, delays=(0.0, 0.03, 0.1, 0.3), jitter=0.4
    )
    acked = acked_keys(out)
    return acked, int(ready[1]), int(ready[2])


def killed_inside_a_pass(path: str) -> bool:
    """Whether config/timerProgress holds an intent (module docstring)."""
    from rocketstore.services.timer import TimerProgress

    return TimerProgress.in_store(path, read_only=True).intent is not None


def _timer_records_and_copies(store) -> tuple[dict, set]:
    """The timer records by UNIQ_KEY, and the UNIQ_KEYs of the copies in the real topics."""
    from rocketstore.services.timer import TIMER_TOPIC

    timed, copied = {}, set()
    for (topic, qid), (lo, hi) in store.queues().items():
        if topic != TIMER_TOPIC and topic not in TOPICS:
            continue
        for q in range(lo, hi):
            m = store.get_by_queue_offset(topic, qid, q)
            if topic == TIMER_TOPIC:
                timed[m.unique_key] = m
            elif "TIMER_OUT_MS" in m.properties:
                copied.add(m.unique_key)
    return timed, copied


def check_broker_view(path: str, implementation: str) -> int:
    """A broker taking over the killed store loses no timer (module docstring); returns how
    many delivered ones it would deliver again."""
    from rocketstore import MessageStore

    with MessageStore(path, implementation=implementation, read_only=True, **STORE_OPTIONS) as store:
        timed, copied = _timer_records_and_copies(store)
        wheel = store.timer_stats().get("rocketmq")
    broker = set(timed) if wheel is None else {p["uniq_key"] for p in wheel["pending"]}
    lost = [k for k in timed if k not in copied and k not in broker]
    assert not lost, f"{len(lost)} timer messages a broker taking over would never deliver, e.g. {lost[:3]}"
    return len(broker & copied)


def check_store(path: str, implementation: str, acked: set) -> dict:
    """Deliver everything with a clock a day ahead, then check exactly-once (module docstring)."""
    from rocketstore import MessageStore
    from rocketstore.base._clock import now_ms
    from rocketstore.services.timer import TIMER_TOPIC

    ahead = now_ms() + 86_400_000
    with MessageStore(
        path, implementation=implementation, clock=lambda: ahead, timer_interval_ms=0, **STORE_OPTIONS
    ) as store:
        assert not store.last_shutdown_clean, "the crash left no abort file"
        opened = store.timer_stats()
        store.deliver_timers()
        assert store.timer_stats()["pending"] == 0, f"still waiting: {store.timer_stats()}"
        timed = {}
        for (topic, qid), (lo, hi) in store.queues().items():
            if topic != TIMER_TOPIC:
                continue
            assert lo == 0, f"timer queue {qid} starts at {lo}"
            for q in range(lo, hi):
                m = store.get_by_queue_offset(topic, qid, q)
                assert m.unique_key not in timed, f"two timer records with {m.unique_key}"
                timed[m.unique_key] = m
        found: dict = {}
        at_once = set()  # due by the time the put ran: stored as plain messages (as 5.x does)
        for (t, qid), (lo, hi) in store.queues().items():
            if t not in TOPICS:
                continue
            for q in range(lo, hi):
                m = store.get_by_queue_offset(t, qid, q)
                if "TIMER_OUT_MS" in m.properties:
                    found.setdefault(m.unique_key, []).append(m)
                else:
                    at_once.add(m.unique_key)
        check_delivered_once(timed, found, "timer")
        for key, [copy] in found.items():
            assert int(copy.properties["TIMER_DEQUEUE_MS"]) >= int(timed[key].properties["TIMER_OUT_MS"]), (
                "early"
            )
        missing = acked - set(timed) - at_once
        assert not missing, f"{len(missing)} acknowledged timer puts are gone, e.g. {sorted(missing)[:3]}"
        report = store.verify()
        assert report["ok"], f"verify: {report['problems'][:5]}"
    return {
        "timed": len(timed),
        "acknowledged": len(acked),
        "reconciled": opened["reconciled"],
        "resumed": opened["resumed"],
    }


def one_iteration(
    workdir: str, implementation: str, rng: random.Random, *, src: str, rounds: int = 3
) -> dict:
    path = os.path.join(workdir, "store")
    acked: set = set()
    reconciled = resumed = in_pass = repeats = 0
    for _ in range(rounds):
        keys, settled, found = run_and_kill(path, implementation, rng, src)
        acked.update(keys)
        reconciled += settled
        resumed += found
        in_pass += killed_inside_a_pass(path)
        repeats += check_broker_view(path, implementation)
    counts = check_store(path, implementation, acked)
    counts["reconciled"] += reconciled
    counts["resumed"] += resumed
    counts["broker_repeats"] = repeats
    counts["kills_in_pass"] = in_pass
    counts["kills"] = rounds
    return counts


def main(argv=None) -> int:
    return run_iterations(
        "crash_timer",
        __doc__,
        argv,
        one_iteration,
        {
            "timed": 0,
            "acknowledged": 0,
            "reconciled": 0,
            "resumed": 0,
            "kills_in_pass": 0,
            "kills": 0,
            "broker_repeats": 0,
        },
        lambda totals, iterations, violations: (
            f"done: {iterations} iterations, {totals['kills']} kills "
            f"({totals['kills_in_pass']} inside a delivery pass, {totals['reconciled']} passes settled on open, "
            f"{totals['resumed']} copies found already written and not repeated), "
            f"{totals['broker_repeats']} delivered ones a broker taking over would repeat, "
            f"{totals['timed']} timer messages ({totals['acknowledged']} acknowledged durable), "
            f"{violations} violations"
        ),
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child_main(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(main())
