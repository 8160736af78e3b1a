"""Timer messages (rocketstore.services.timer): scheduled and delivered per second, and delivery lateness.

    pip install ".[bench]" && python bench/timer.py [--quick] [--impl c|py] [--messages N]

It measures the installed rocketstore (never ``src/``; without an install it exits saying so);
the first line names the build (compiled or pure Python) and its CRC-32 path.

Measured in this one run, 128-byte bodies, one topic of 4 queues, asynchronous flush:

* scheduled/s: ``put(topic, body, deliver_at_ms=...)`` of N messages due over the next second
  (an injected clock), beside two baselines in the same run: the plain ``put(topic, body)`` (the
  compiled hot path) and ``put(topic, body, properties={...})`` with one property (the general
  path a timer put takes before its rewrite), and ``put(..., delay_level=1)``.
* delivered/s: one ``deliver_timers()`` with the clock past every deliver time, over the N
  messages (reading the timer queue and records, putting the copies, flushing, the progress
  file), beside ``deliver_delayed()`` over N delay-level-1 messages.
* lateness: a store on the real clock with its timer thread (``timer_interval_ms`` as given,
  default 10): M messages put from one thread at a steady rate, each due 50 .. 1000 ms after its
  put; once all are delivered, each copy's store timestamp minus its ``TIMER_OUT_MS`` (ms).
  p50 / p99 / max; the goal is p99 <= 10 ms. Baseline in the same run: M delay-level-1
  messages on the delay thread (``schedule_interval_ms`` 100, RocketMQ's), the copy's store
  timestamp minus the scheduled record's plus 1 s.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

import buildinfo

buildinfo.require("bench/timer.py")

from rocketstore import MessageStore, _impl  # noqa: E402

TOPIC = "BenchTopic"
BODY = bytes(range(128))
GOAL_RATE = 500_000
GOAL_P99_MS = 10


def _open(path: str, impl: str, **options) -> MessageStore:
    options.setdefault("timer_interval_ms", 0)
    options.setdefault("schedule_interval_ms", 0)
    store = MessageStore(path, implementation=impl, commitlog_file_size=256 << 20, **options)
    store.create_topic(TOPIC, 4)
    return store


def _rate(n: int, seconds: float) -> str:
    return f"{n / seconds:>12,.0f} /s"


def rates(root: str, impl: str, n: int) -> None:
    clock = [int(time.time() * 1000)]
    t0 = clock[0]

    def timed(label: str, fn) -> float:
        started = time.perf_counter()
        done = fn()
        seconds = time.perf_counter() - started
        print(f"  {label:<58}{_rate(done, seconds)}  ({done:,} in {seconds:.2f} s)", flush=True)
        return done / seconds

    store = _open(os.path.join(root, "rates"), impl, clock=lambda: clock[0])
    try:
        put = store.put

        def plain() -> int:
            for _ in range(n):
                put(TOPIC, BODY)
            return n

        def with_property() -> int:
            props = {"a": "1"}
            for _ in range(n):
                put(TOPIC, BODY, properties=props)
            return n

        def timers() -> int:
            for i in range(n):
                put(TOPIC, BODY, deliver_at_ms=t0 + 1 + i % 1000)
            return n

        def delayed() -> int:
            for _ in range(n):
                put(TOPIC, BODY, delay_level=1)
            return n

        print("scheduling (put):")
        timed("put(topic, body)                     [baseline]", plain)
        timed("put(topic, body, properties={1})     [baseline]", with_property)
        timed("put(topic, body, delay_level=1)      [baseline]", delayed)
        sched = timed("put(topic, body, deliver_at_ms=...)  timer", timers)
        clock[0] = t0 + 3_600_000  # past every deliver time (delay level 1: store time + 1 s)
        print("delivery:")
        timed("deliver_delayed(), delay level 1     [baseline]", store.deliver_delayed)
        deliv = timed("deliver_timers()                     timer", store.deliver_timers)
        stats = store.timer_stats()
        assert stats["pending"] == 0 and stats["delivered"] == n, stats
    finally:
        store.close()
    for what, value in (("scheduled", sched), ("delivered", deliv)):
        print(f"  timer messages {what}/s: {value:,.0f} (goal {GOAL_RATE:,}: {value / GOAL_RATE:.2f} of it)")


def lateness(root: str, impl: str, m: int, per_second: int, interval_ms: int, delayed: bool = False) -> None:
    """Timer messages (or, ``delayed``, delay level 1 on the store's 100 ms delay thread, the
    baseline) put at a steady rate; each copy's store timestamp minus its deliver time."""
    name = "delay" if delayed else "timer"
    store = _open(
        os.path.join(root, f"lateness-{name}"), impl, timer_interval_ms=interval_ms, schedule_interval_ms=100
    )
    rng = random.Random(7)
    try:
        started = time.perf_counter()
        for i in range(m):
            target = started + i / per_second
            pause = target - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            if delayed:
                store.put(TOPIC, BODY, delay_level=1)
            else:
                store.put(TOPIC, BODY, delay_ms=rng.randrange(50, 1001))
        deadline = time.monotonic() + 60
        waiting = store.delayed_counts if delayed else (lambda: store.timer_stats()["pending"])
        while waiting() and time.monotonic() < deadline:
            time.sleep(0.05)
        late = []
        for (topic, qid), (lo, hi) in store.queues().items():
            if topic != TOPIC:
                continue
            for q in range(lo, hi):
                c = store.get_by_queue_offset(topic, qid, q)
                if delayed:
                    scheduled = store.query_by_unique_key("SCHEDULE_TOPIC_XXXX", c.unique_key)
                    due = scheduled.store_timestamp + 1000
                else:
                    due = int(c.properties["TIMER_OUT_MS"])
                late.append(c.store_timestamp - due)
    finally:
        store.close()
    late.sort()
    assert len(late) == m, f"{len(late)} of {m} delivered"

    def pct(p: float) -> int:
        return late[min(len(late) - 1, int(p * len(late)))]

    if delayed:
        print(f"baseline: {m:,} delay-level-1 messages put at {per_second:,}/s, schedule_interval_ms=100:")
    else:
        print(
            f"lateness over {m:,} timer messages put at {per_second:,}/s, due 50..1000 ms later, "
            f"timer_interval_ms={interval_ms}:"
        )
    print(
        f"  store timestamp of the copy - deliver time: p50 {pct(0.50)} ms, p99 {pct(0.99)} ms, "
        f"max {late[-1]} ms, min {late[0]} ms" + ("" if delayed else f" (goal p99 <= {GOAL_P99_MS} ms)")
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer messages")
    parser.add_argument("--impl", default=None, help="c or py (default: the installed default)")
    parser.add_argument("--messages", type=int, default=None, help="N for the rates (default 200,000)")
    parser.add_argument("--lateness-messages", type=int, default=None, help="M (default 20,000)")
    parser.add_argument("--rate", type=int, default=5000, help="timer puts per second for the lateness run")
    parser.add_argument("--interval-ms", type=int, default=10, help="timer_interval_ms of the lateness run")
    parser.add_argument("--dir", default=None, help="where the stores go (default: a temp dir)")
    args = parser.parse_args(argv)
    impl = args.impl or _impl.DEFAULT.name
    n = args.messages or (50_000 if args.quick else 200_000)
    m = args.lateness_messages or (5_000 if args.quick else 20_000)
    print(buildinfo.header())
    print(f"impl={impl}, load average {os.getloadavg()[0]:.2f}")
    root = tempfile.mkdtemp(prefix="bench-timer-", dir=args.dir)
    try:
        rates(root, impl, n)
        lateness(root, impl, m, args.rate, args.interval_ms)
        lateness(root, impl, m, args.rate, args.interval_ms, delayed=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
