"""Several writer processes, one store: puts from 1, 2 and 4 processes.

The first process to open the store writes it (the owner); the others join it
(rocketstore.processes.writers) and append their puts themselves, under one cross-process lock shared with
the owner (rocketstore.log.sharedappend; ``--proxied`` opens the owner with ``shared_append=False``,
so that joined puts run in the owner, as before: its rows are ``proxied``). Every row runs its processes at once, from one start signal,
and reports messages per second over the wall time from that signal until the last process is
done, plus each process's own rate (the owner's first). Kinds of put:

- ``put``: one 128-byte message per call, no keys (the hot path);
- ``put_batch``: 256 messages of 128 bytes per call;
- ``durable``: one message per call with ``durable=True`` (each returns after the owner's
  group commit: one flush covers the waiting puts of every process).

With ``--peers`` (default when the ``lmdb`` module is installed) the same rows for LMDB, which
lets any process write: one write transaction per put (``put_batch``: 256 puts per transaction),
``sync=False`` but for ``durable`` (each commit fsyncs), every process on one environment.

Then what sharing costs a process that writes alone: ``put`` with ``shared_writers=True``
(the default: a listening thread, idle) against ``shared_writers=False``, alternated in one run.

    python bench/writers.py [--seconds 2] [--processes 1 2 4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import buildinfo

buildinfo.require("bench/writers.py")

from rocketstore import MessageStore  # noqa: E402

PUTTER = r"""
import os, sys, time
from rocketstore import MessageStore
path, kind, seconds, go = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
store = MessageStore(path, shared_append=sys.argv[5] == "shared")
print("owner" if store.writer_pid == os.getpid() else "joined", flush=True)
while not os.path.exists(go):
    time.sleep(0.0005)
body, n = b"x" * 128, 0
bodies = [body] * 256
start = time.monotonic()
end = start + seconds
while time.monotonic() < end:
    if kind == "put":
        for _ in range(100):
            store.put("Bench", body)
        n += 100
    elif kind == "put_batch":
        store.put_batch("Bench", bodies)
        n += 256
    else:
        store.put("Bench", body, durable=True)
        n += 1
elapsed = time.monotonic() - start
print(n, elapsed, flush=True)
sys.stdout.close()
sys.stdin.read()   # the owner stays until every process is done
store.close()
"""


LMDB_PUTTER = r"""
import os, sys, time
import lmdb
path, kind, seconds, go = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
env = lmdb.open(os.path.join(path, "lmdb"), map_size=8 << 30, sync=kind == "durable", metasync=kind == "durable")
print("lmdb", flush=True)
while not os.path.exists(go):
    time.sleep(0.0005)
body, n, me = b"x" * 128, 0, b"%08d" % os.getpid()
start = time.monotonic()
end = start + seconds
while time.monotonic() < end:
    if kind == "put_batch":
        with env.begin(write=True) as txn:
            for _ in range(256):
                txn.put(me + b"%012d" % n, body)
                n += 1
    else:
        for _ in range(1 if kind == "durable" else 100):
            with env.begin(write=True) as txn:
                txn.put(me + b"%012d" % n, body)
            n += 1
elapsed = time.monotonic() - start
print(n, elapsed, flush=True)
sys.stdout.close()
sys.stdin.read()
env.close()
"""


def run_row(
    root: str, kind: str, processes: int, seconds: float, script: str = PUTTER, mode: str = "shared"
) -> tuple[float, list[float], list[str]]:
    path = tempfile.mkdtemp(prefix="writers-", dir=root)
    go = os.path.join(path, "go")
    procs = []
    roles = []
    try:
        for _ in range(processes):
            proc = subprocess.Popen(
                [sys.executable, "-c", script, path, kind, str(seconds), go, mode],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            procs.append(proc)
            roles.append(proc.stdout.readline().strip())  # opened (the first: the owner)
        began = time.monotonic()
        open(go, "w").close()
        rates, total = [], 0
        for proc in procs:
            n, elapsed = proc.stdout.readline().split()
            rates.append(int(n) / float(elapsed))
            total += int(n)
        wall = time.monotonic() - began
        for proc in procs:
            proc.stdin.close()
            proc.wait(timeout=120)
        return total / wall, rates, roles
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        shutil.rmtree(path, ignore_errors=True)


def alone(root: str, shared: bool, n: int) -> float:
    path = tempfile.mkdtemp(prefix="alone-", dir=root)
    try:
        with MessageStore(path, shared_writers=shared) as store:
            body = b"x" * 128
            for _ in range(10_000):
                store.put("Bench", body)
            began = time.perf_counter()
            for _ in range(n):
                store.put("Bench", body)
            return n / (time.perf_counter() - began)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="how long each process puts")
    ap.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--kinds", nargs="+", default=["put", "put_batch", "durable"])
    ap.add_argument("--alone", type=int, default=300_000, help="puts per alone run (0: skip)")
    ap.add_argument("--dir", default=None, help="where the stores go (default: a temporary directory)")
    ap.add_argument("--no-peers", action="store_true", help="skip LMDB")
    ap.add_argument("--proxied", action="store_true", help="also rows with shared_append=False")
    args = ap.parse_args()
    print(buildinfo.header())
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    root = tempfile.mkdtemp(prefix="rocketstore-bench-writers-", dir=args.dir)
    try:
        try:
            import lmdb  # noqa: F401
        except ImportError:
            args.no_peers = True
            print("lmdb: not installed (pip install lmdb), its rows are skipped")
        print(f"{'store':<12} {'kind':<10} {'procs':>5} {'msgs/s':>12}   per process (owner first)")
        for kind in args.kinds:
            for n in args.processes:
                contenders = [("rocketstore", PUTTER, "shared"), ("proxied", PUTTER, "proxied")]
                for name, script, mode in [*contenders, ("lmdb", LMDB_PUTTER, "")]:
                    if (name == "lmdb" and args.no_peers) or (name == "proxied" and not args.proxied):
                        continue
                    total, rates, roles = run_row(root, kind, n, args.seconds, script, mode)
                    per = ", ".join(f"{r:,.0f}" for r in rates)
                    print(
                        f"{name:<12} {kind:<10} {n:>5} {total:>12,.0f}   {per}   ({', '.join(roles)})",
                        flush=True,
                    )
        if args.alone:
            # in the order A B B A, three times: whichever runs second in a pair runs faster on
            # this machine (0.89 with A always first, 0.99 in this order, same code)
            runs: dict[bool, list[float]] = {True: [], False: []}
            for shared in (True, False, False, True) * 3:
                runs[shared].append(alone(root, shared, args.alone))
            shared_rates, single = sorted(runs[True]), sorted(runs[False])
            print(
                "one process alone, put/s: shared_writers=True "
                + ", ".join(f"{r:,.0f}" for r in runs[True])
                + "; shared_writers=False "
                + ", ".join(f"{r:,.0f}" for r in runs[False])
                + f"; ratio of the medians {shared_rates[3] / single[3]:.3f}"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
