"""Verify and recovery, two source trees side by side: runs alternate between them in the same
minutes, each a fresh process on the same store, and the medians are printed with their ratio.

    python bench/recovery_ab.py BASE_TREE NEW_TREE [--rounds 4] [--mb 1024] [--dir DIR] [--keep]

A tree is a checkout with its extensions built in place (``python setup.py build_ext
--inplace``); each run imports ``<tree>/src`` first (this compares code, so unlike the other
scripts here it measures the trees, not the installed package; each run's line names the tree it
imported). The store (built with NEW_TREE when missing, as ``bench/recovery.py`` builds it:
``--mb`` MiB of 128-byte messages with a 20-character key each) is used by both: the files are
the same format. Each run measures: the raw read of the segment files; the first ``verify()``
after a read-only open and a second one (wall GB/s and CPU seconds); an abnormal open with no
checkpoint (wall and CPU seconds, and when its CRC scan ended); a clean open. On a machine
shared with other jobs, read the CPU seconds beside the wall clock, and the load averages.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

MEASURE = r"""
import json, os, sys, time
import rocketstore
from rocketstore import MessageStore
path = sys.argv[1]
OPT = dict(commitlog_file_size=128 << 20, dispatch_interval_ms=0)
out = {"tree": os.path.dirname(os.path.dirname(os.path.dirname(rocketstore.__file__))),
       "load_before": os.getloadavg()[0]}
files = [os.path.join(path, "commitlog", n) for n in sorted(os.listdir(os.path.join(path, "commitlog")))]
buf = bytearray(128 << 20)
def raw():
    t0 = time.perf_counter(); n = 0
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            n += fh.readinto(buf)
    return n / (time.perf_counter() - t0) / 1e9
raw()
out["raw_read_GBps"] = raw()
with MessageStore(path, read_only=True, **OPT) as s:
    for k in ("verify_first", "verify_again"):
        t0, c0 = time.perf_counter(), time.process_time()
        r = s.verify()
        assert r["ok"], r["problems"][:3]
        out[k + "_GBps"] = r["bytes"] / (time.perf_counter() - t0) / 1e9
        out[k + "_cpu_s"] = time.process_time() - c0
os.unlink(os.path.join(path, "checkpoint"))
open(os.path.join(path, "abort"), "wb").close()
marks = {}
def progress(stage, done, total):
    now = time.perf_counter()
    marks.setdefault(stage, [now, now])[1] = now
t0, c0 = time.perf_counter(), time.process_time()
s = MessageStore(path, progress=progress, **OPT)
out["abnormal_open_s"] = time.perf_counter() - t0
out["abnormal_open_cpu_s"] = time.process_time() - c0
out["abnormal_open_GBps"] = s.max_offset / out["abnormal_open_s"] / 1e9
out["abnormal_open_to_scan_end_s"] = marks["recover"][1] - t0
s.close()
t0 = time.perf_counter()
MessageStore(path, **OPT).close()
out["clean_open_s"] = time.perf_counter() - t0
out["load_after"] = os.getloadavg()[0]
print(json.dumps(out))
"""

FIGURES = [
    "raw_read_GBps",
    "verify_first_GBps",
    "verify_first_cpu_s",
    "verify_again_GBps",
    "verify_again_cpu_s",
    "abnormal_open_s",
    "abnormal_open_cpu_s",
    "abnormal_open_GBps",
    "abnormal_open_to_scan_end_s",
    "clean_open_s",
    "load_before",
    "load_after",
]


def run(tree: str, path: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.abspath(tree), "src"))
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, path], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def build(tree: str, path: str, mb: int) -> None:
    code = (
        "import os\n"
        "from rocketstore import MessageStore\n"
        "body = os.urandom(128)\n"
        "with MessageStore(%r, commitlog_file_size=128 << 20, dispatch_interval_ms=0) as s:\n"
        "    n = 0\n"
        "    while s.max_offset < %d:\n"
        "        for _i in range(10_000):\n"
        "            s.put('BenchTopic', body, keys='key-%%016d' %% n)\n"
        "            n += 1\n"
    ) % (path, mb << 20)
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.abspath(tree), "src"))
    subprocess.run([sys.executable, "-c", code], env=env, check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--dir", default="/tmp/rocketstore-bench-recovery-ab")
    ap.add_argument("--keep", action="store_true", help="keep the store for the next run")
    args = ap.parse_args()
    if not os.path.isdir(args.dir):
        build(args.new, args.dir, args.mb)
    results: dict[str, list[dict]] = {"base": [], "new": []}
    for _round in range(args.rounds):
        for name in ("base", "new"):
            r = run(getattr(args, name), args.dir)
            results[name].append(r)
            print(name, json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}))
    print(f"{'median of ' + str(args.rounds):32} {'base':>10} {'new':>10} {'new/base':>9}")
    for k in FIGURES:
        b = statistics.median(r[k] for r in results["base"])
        n = statistics.median(r[k] for r in results["new"])
        print(f"{k:32} {b:10.3f} {n:10.3f} {n / b if b else float('nan'):9.2f}")
    if not args.keep:
        shutil.rmtree(args.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
