"""Where a single put's time goes: the put loops beside their Python-level floor, in one process.

    python bench/put_floor.py [--messages N] [--rounds R]

The floor is the same loop (``for k, b in zip(keys, bodies): put(T, b, keys=k)`` and
``for b in bodies: put(T, b)``) calling a compiled method with the signature of ``store.put``
(``rocketstore.log._store.PutFront.put``) that does nothing: what any compiled ``put`` costs the
caller before it does any work (the loop, the call, the keyword argument). It is built on the fly
with Cython (pyximport, a few seconds, in a temporary directory). The store is opened with
``dispatch_interval_ms=0``, so nothing is dispatched during the loop: the figure is the put
itself. Each cell is the median over ``--rounds`` of the putting thread's CPU time per call
(``time.thread_time``: it moves less with other processes' load than the wall clock, which is
printed beside it), so the difference between a row and its floor is the store's own work
(checks, the append core, and the page faults it takes in this thread).
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

buildinfo.require("bench/put_floor.py")

from rocketstore import MessageStore  # noqa: E402

TOPIC = "FloorBench"
NOOP_PYX = """
# cython: language_level=3
cdef class Noop:
    def put(self, topic, body=None, *, tags=None, keys=None, properties=None, queue_id=-1, flag=0,
            durable=None, delay_level=None, deliver_at_ms=None, delay_ms=None):
        return None
"""


def _noop_put(build_dir: str):
    """A compiled do-nothing method with store.put's signature."""
    import pyximport

    with open(os.path.join(build_dir, "rocketstore_put_floor.pyx"), "w") as f:
        f.write(NOOP_PYX)
    sys.path.insert(0, build_dir)
    pyximport.install(build_dir=os.path.join(build_dir, "build"), language_level=3)
    import rocketstore_put_floor  # type: ignore[import-not-found]

    return rocketstore_put_floor.Noop().put


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    n = args.messages
    print(buildinfo.header())
    keys = [f"key-{i:016d}" for i in range(n)]
    bodies = [os.urandom(128) for _ in range(n)]
    root = tempfile.mkdtemp(prefix="rocketstore-put-floor-")

    def keyed(put):
        for k, b in zip(keys, bodies):
            put(TOPIC, b, keys=k)

    def plain(put):
        for b in bodies:
            put(TOPIC, b)

    cpu: dict[str, list[float]] = {}
    wall: dict[str, list[float]] = {}

    def timed(name, loop, put):
        t0, c0 = time.perf_counter(), time.thread_time()
        loop(put)
        c1, t1 = time.thread_time(), time.perf_counter()
        cpu.setdefault(name, []).append((c1 - c0) / n * 1e9)
        wall.setdefault(name, []).append((t1 - t0) / n * 1e9)

    try:
        noop = _noop_put(root)
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        for _ in range(args.rounds):
            for label, loop in (("put(topic, body, keys=k)", keyed), ("put(topic, body)", plain)):
                timed(f"floor of {label}: a compiled no-op", loop, noop)
                s = MessageStore(tempfile.mkdtemp(dir=root), dispatch_interval_ms=0)
                try:
                    s.create_topic(TOPIC, 4)
                    s.put(TOPIC, b"first")  # (the topic checked once, as in any loop after its first put)
                    timed(label, loop, s.put)
                finally:
                    path = s.path
                    s.close()
                    shutil.rmtree(path, ignore_errors=True)
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{n:,} calls x 128 B bodies, 20-character keys, {args.rounds} round(s), medians\n")
    print("| loop | putting thread's CPU per call | wall clock per call |")
    print("|---|---:|---:|")
    for name in cpu:
        print(
            f"| {name} | {statistics.median(cpu[name]):,.0f} ns | {statistics.median(wall[name]):,.0f} ns |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
