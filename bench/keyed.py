"""Keyed puts in one process: the compiled paths beside the general ones, in the same run.

    python bench/keyed.py [--messages N] [--rounds R]

Each phase runs in a fresh store with the default settings (one topic of 4 queues) and puts
``--messages`` 128-byte bodies, each under its own 20-character key; "until indexed" adds the
dispatcher's catch-up (ConsumeQueue units and the two IndexFile entries per message) to the
timed put phase, as bench/compare.py's rows (a) and (b) do. Rows:

- ``Message(topic, body, keys=k)``: building the objects alone;
- ``put(topic, body, keys=k)``: the keyed fast path (``CommitLogCore.put_keyed``), beside
  ``put(topic, body)`` (no key) and the general path (``properties={}`` sends the same message
  through ``put_properties`` and ``core.put``, what every keyed put took before);
- ``put_messages([Message(...) x 1000])``: the fused path (``put_plain_messages``), beside the
  general one (``plain_message_items`` + ``put_many``, what it took before);
- "general dispatch": the same puts in a store with ``fused_dispatch=False``, so their dispatch
  takes the general path (``Dispatcher._dispatch``) rather than the fused pass
  (docs/guide/fused-dispatch.md).

A cell is the median over ``--rounds`` (phases rotated each round). Besides the rates, the
process's CPU time (all threads: the putting one, the dispatch, flush and prefault threads) per
message until indexed is printed: on a shared machine it moves less with the load than the
rates do (os.times() counts in 10 ms ticks: use enough messages). The load average before and
after is printed: read the figures with it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
if BENCH_DIR not in sys.path:
    sys.path.insert(0, BENCH_DIR)

import buildinfo  # noqa: E402

buildinfo.require("bench/keyed.py")

from rocketstore import Message, MessageStore  # noqa: E402

TOPIC = "KeyedBench"
BATCH = 1000


def _store(root: str, **options) -> MessageStore:
    s = MessageStore(tempfile.mkdtemp(dir=root), **options)
    s.create_topic(TOPIC, 4)
    return s


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _timed(root, keys, bodies, put, options) -> tuple[float, float, float]:
    """(put seconds, put + catch-up seconds, the process's CPU seconds in all its threads
    meanwhile) of ``put(store, keys, bodies)`` in a fresh store with ``options``."""
    s = _store(root, **options)
    try:
        c0 = _cpu()
        t0 = time.perf_counter()
        put(s, keys, bodies)
        t1 = time.perf_counter()
        s._opened.dispatcher.catch_up()
        t2 = time.perf_counter()
        c1 = _cpu()
    finally:
        path = s.path
        s.close()
        shutil.rmtree(path, ignore_errors=True)
    return t1 - t0, t2 - t0, c1 - c0


def single_keyed(s, keys, bodies):
    put = s.put
    for k, b in zip(keys, bodies):
        put(TOPIC, b, keys=k)


def single_plain(s, keys, bodies):
    put = s.put
    for b in bodies:
        put(TOPIC, b)


def single_general(s, keys, bodies):
    put = s.put
    empty: dict = {}
    for k, b in zip(keys, bodies):
        put(TOPIC, b, keys=k, properties=empty)


def batch_fused(s, keys, bodies):
    put_messages = s.put_messages
    for i in range(0, len(keys), BATCH):
        put_messages([Message(TOPIC, b, keys=k) for k, b in zip(keys[i : i + BATCH], bodies[i : i + BATCH])])


def batch_general(s, keys, bodies):
    codec, core, topics = s._codec, s._opened.core, s._user_topics
    s._putter.check_user_topic(TOPIC)
    for i in range(0, len(keys), BATCH):
        messages = [Message(TOPIC, b, keys=k) for k, b in zip(keys[i : i + BATCH], bodies[i : i + BATCH])]
        items, slow = codec.plain_message_items(messages, topics, (Message,))
        assert not slow
        core.put_many(items, -1)


#: the general dispatch: every record through Dispatcher._dispatch, not the fused pass
GENERAL_DISPATCH = {"fused_dispatch": False}
PHASES = {
    "put(topic, body, keys=k)": (single_keyed, {}),
    "put(topic, body, keys=k), general path": (single_general, {}),
    "put(topic, body), no key": (single_plain, {}),
    "put_messages(1000 keyed Message)": (batch_fused, {}),
    "put_messages(1000 keyed Message), general path": (batch_general, {}),
    "put(topic, body, keys=k), general dispatch": (single_keyed, GENERAL_DISPATCH),
    "put_messages(1000 keyed Message), general dispatch": (batch_fused, GENERAL_DISPATCH),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    n = args.messages
    print(buildinfo.header())
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    keys = [f"key-{i:016d}" for i in range(n)]
    bodies = [os.urandom(128) for _ in range(n)]
    root = tempfile.mkdtemp(prefix="rocketstore-keyed-bench-")
    put_rates: dict[str, list[float]] = {name: [] for name in PHASES}
    indexed_rates: dict[str, list[float]] = {name: [] for name in PHASES}
    cpu_ns: dict[str, list[float]] = {name: [] for name in PHASES}
    build: list[float] = []
    try:
        names = list(PHASES)
        for r in range(args.rounds):
            t0 = time.perf_counter()
            for i in range(0, n, BATCH):
                [Message(TOPIC, b, keys=k) for k, b in zip(keys[i : i + BATCH], bodies[i : i + BATCH])]
            build.append(n / (time.perf_counter() - t0))
            for name in names[r % len(names) :] + names[: r % len(names)]:
                put_s, all_s, cpu_s = _timed(root, keys, bodies, *PHASES[name])
                put_rates[name].append(n / put_s)
                indexed_rates[name].append(n / all_s)
                cpu_ns[name].append(cpu_s / n * 1e9)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{n:,} messages x 128 B, 20-character keys, {args.rounds} round(s), medians\n")
    print("| phase | put only | until indexed | process CPU until indexed |")
    print("|---|---:|---:|---:|")
    print(f"| Message(topic, body, keys=k) | {statistics.median(build) / 1e6:.2f} M/s | | |")
    for name in PHASES:
        put_m, idx_m = statistics.median(put_rates[name]), statistics.median(indexed_rates[name])
        cpu_m = statistics.median(cpu_ns[name])
        print(f"| {name} | {put_m / 1e6:.2f} M/s | {idx_m / 1e6:.2f} M/s | {cpu_m:,.0f} ns a message |")

    def rate(name: str) -> float:
        return statistics.median(indexed_rates[name])

    single, batch = "put(topic, body, keys=k)", "put_messages(1000 keyed Message)"
    print(
        f"\nuntil indexed, fast ÷ general path: put {rate(single) / rate(single + ', general path'):.2f}x, "
        f"put_messages {rate(batch) / rate(batch + ', general path'):.2f}x"
    )
    print(
        f"until indexed, fused ÷ general dispatch: put {rate(single) / rate(single + ', general dispatch'):.2f}x, "
        f"put_messages {rate(batch) / rate(batch + ', general dispatch'):.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
