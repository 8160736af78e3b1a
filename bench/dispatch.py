"""The dispatch alone: one catch-up of keyed puts, the fused pass beside the general path.

    python bench/dispatch.py [--messages N] [--rounds R]

Each round puts ``--messages`` 128-byte bodies with a 20-character key each (4 queues; the put
adds a UNIQ_KEY, so two index keys a message) into a fresh store with the dispatch thread off,
then times the one ``catch_up`` that dispatches them: ConsumeQueue units and index items into
fresh files. Stores with ``fused_dispatch=True`` and ``False`` alternate (docs/guide/
fused-dispatch.md). Printed: ns a message (wall and the process's CPU) per mode, medians, and
the load average before and after (the machine may be shared: read the figures with it).
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

buildinfo.require("bench/dispatch.py")

from rocketstore import Message, MessageStore  # noqa: E402

TOPIC = "DispatchBench"
BATCH = 1000


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def one_catch_up(root: str, n: int, fused: bool) -> tuple[float, float, int]:
    """(wall ns, CPU ns) a message of the catch-up after ``n`` keyed puts, and how many records
    it dispatched."""
    path = tempfile.mkdtemp(dir=root)
    s = MessageStore(path, dispatch_interval_ms=0, fused_dispatch=fused)
    try:
        s.create_topic(TOPIC, 4)
        body = os.urandom(128)
        for i in range(0, n, BATCH):
            s.put_messages([Message(TOPIC, body, keys=f"key-{j:016d}") for j in range(i, min(n, i + BATCH))])
        before = s._opened.dispatcher.dispatched_records
        c0, t0 = _cpu(), time.perf_counter()
        s._opened.dispatcher.catch_up()
        t1, c1 = time.perf_counter(), _cpu()
        count = s._opened.dispatcher.dispatched_records - before
    finally:
        s.close()
        shutil.rmtree(path, ignore_errors=True)
    return (t1 - t0) * 1e9 / max(count, 1), (c1 - c0) * 1e9 / max(count, 1), count


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    print(buildinfo.header())
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    root = tempfile.mkdtemp(prefix="rocketstore-dispatch-bench-")
    wall: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    counts: dict[bool, list[int]] = {True: [], False: []}
    try:
        for r in range(args.rounds):
            for fused in (True, False) if r % 2 == 0 else (False, True):
                w, c, k = one_catch_up(root, args.messages, fused)
                wall[fused].append(w)
                cpu[fused].append(c)
                counts[fused].append(k)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"{args.messages:,} keyed messages x 128 B put, then one catch-up; {args.rounds} round(s), medians\n"
    )
    print("| dispatch | records dispatched | wall | CPU (all threads) |")
    print("|---|---:|---:|---:|")
    for fused, name in ((True, "fused pass"), (False, "general path (fused_dispatch=False)")):
        print(
            f"| {name} | {statistics.median(counts[fused]):,.0f} | "
            f"{statistics.median(wall[fused]):,.0f} ns a message | {statistics.median(cpu[fused]):,.0f} ns a message |"
        )
    ratio = statistics.median(wall[False]) / statistics.median(wall[True])
    print(f"\ngeneral ÷ fused, wall: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
