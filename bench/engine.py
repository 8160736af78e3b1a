"""One-run engine report: put rates, durable group commit and the machine's own baselines.

    pip install ".[bench]" && python bench/engine.py [--quick] [--json out.json] [--dir DIR]

It measures the installed rocketstore (``src/`` is never put on ``sys.path``; without an install
it exits saying so) and its first line names the build: compiled or pure Python, and the CRC-32
path. Everything is measured in this one run, on stores under ``--dir`` (default: a temporary
directory in ``bench/``, i.e. on the project's filesystem; a tmpfs directory gets a warning,
because it turns every fdatasync into a no-op). The Markdown table on stdout holds absolute
rates, the ratios the goals are stated in, and PASS/SHORT beside each goal; progress goes to
stderr. ``--quick`` runs a reduced version (smaller counts, shorter timed phases) in under a
minute.

What each row means:

* put rates are from Python, one ``put()`` call per message (or one ``put_batch()`` call per
  ``--batch-size`` messages) on an ASYNC_FLUSH store, not counting the flush after the loop.
  "first run" is the first N messages on a fresh store in this process; "warm" is the next N on
  the same store, after the first run has warmed code, allocator and the prefault thread.
  "warm" runs ``--reps`` times; the row shows the median run, with every run's rate in brackets,
  and the goals are judged on that median.
* "of raw write" divides the put's record bytes/s (a 128-byte body makes a 262-byte record) by
  the raw sequential write bandwidth measured here: 1 MiB write() calls to a file, then one
  fdatasync, counted together.
* the serial fdatasync baseline writes 4 KiB to the next fresh block of a posix_fallocate'd file
  (as segments are) and fdatasyncs it, back to back, for a fixed time. The disk of a cloud VM
  swings between fast and throttled states within seconds, so it is measured right before and
  right after the durable puts; the goal uses the faster of the two (the stricter test).
* blocking durable: N threads each call ``put(..., durable=True)`` in a loop for a fixed time;
  "fsync/msg" is the store's ``flush_rounds`` delta over messages (group commit keeps it << 1).
* pipelined durable: one thread keeps a window of ``put_pipelined()`` futures in flight and
  resolves the oldest; timed until the last future resolved.
* recovery: the time of ``MessageStore(path)`` on a closed store, which CRC-scans the whole
  CommitLog; the segments were just written, so this is a page-cache-warm scan.
"""

from __future__ import annotations

import argparse
import collections
import json
import mmap
import os
import platform
import random
import shutil
import sys
import tempfile
import time
import zlib

import buildinfo

buildinfo.require("bench/engine.py")

import numpy as np  # noqa: E402
from probes import fdatasync_baseline, run_threads, write_bandwidth  # noqa: E402,F401  (compare.py uses them as engine.*)

from rocketstore import MessageStore, _impl  # noqa: E402
from rocketstore.errors import FlushTimeoutError  # noqa: E402

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
TOPIC = "BenchTopic"
BODY = bytes(range(128))

GOAL_SINGLE = 2_000_000
GOAL_BATCH = 8_000_000
GOAL_DURABLE = 0.7
GOAL_PIPELINED = 0.5

FULL = dict(
    single_c=1_000_000,
    single_py=200_000,
    batch=1_000_000,
    batch_py=200_000,
    fsync_seconds=2.0,
    durable_seconds=3.0,
    durable_threads=(4, 16, 64),
    pipelined=1_000_000,
    pipelined_cap_s=15.0,
    window=10_000,
    raw_bytes=1 * GiB,
    mmap_bytes=1 * GiB,
    crc_seconds=0.5,
    recovery=1_000_000,
    reps=3,
)
QUICK = dict(
    single_c=200_000,
    single_py=20_000,
    batch=200_000,
    batch_py=20_000,
    fsync_seconds=1.0,
    durable_seconds=1.0,
    durable_threads=(4, 16, 64),
    pipelined=200_000,
    pipelined_cap_s=5.0,
    window=10_000,
    raw_bytes=256 * MiB,
    mmap_bytes=256 * MiB,
    crc_seconds=0.2,
    recovery=200_000,
    reps=3,
)


def log(*parts) -> None:
    print(*parts, file=sys.stderr, flush=True)


# ---- machine facts ----


def _mount_of(path: str) -> tuple[str, str, str]:
    """(mount point, filesystem type, source) of the mount holding ``path``."""
    path = os.path.realpath(path)
    best = ("/", "?", "?")
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            point = left.split()[4].replace("\\040", " ")
            fstype, source = right.split()[:2]
            inside = path == point or path.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best[0]):
                best = (point, fstype, source)
    return best


def machine_facts(directory: str) -> dict:
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    point, fstype, source = _mount_of(directory)
    build = buildinfo.describe()
    return dict(
        nproc=os.cpu_count(),
        cpu=cpu,
        kernel=platform.release(),
        python=platform.python_version(),
        directory=directory,
        filesystem=fstype,
        mount=point,
        device=source,
        compiled=build["compiled"],
        crc32_path=build["crc32_path"],
        build=build,
    )


def cpu_sample() -> dict:
    """Machine-wide busy and steal CPU seconds (/proc/stat) and this process's own CPU seconds."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]
    steal = fields[7] if len(fields) > 7 else 0
    own = os.times()
    return dict(
        busy=(sum(fields[:8]) - idle - steal) / tick,
        steal=steal / tick,
        own=own.user + own.system,
        at=time.perf_counter(),
    )


def other_load(before: dict, after: dict) -> dict:
    """Share of the machine's CPU used by other processes (and stolen by the host) meanwhile."""
    capacity = (after["at"] - before["at"]) * (os.cpu_count() or 1)
    others = (after["busy"] - before["busy"]) - (after["own"] - before["own"])
    return dict(others=max(0.0, others / capacity), steal=(after["steal"] - before["steal"]) / capacity)


# ---- machine baselines ----


def mmap_bandwidth(directory: str, total: int) -> dict:
    """Copy 1 MiB chunks into fresh pages of a mapped posix_fallocate'd file (no msync)."""
    path = os.path.join(directory, "mmap.probe")
    chunk = np.random.default_rng(2).integers(0, 256, MiB, dtype=np.uint8).tobytes()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, total)
        mm = mmap.mmap(fd, total, access=mmap.ACCESS_WRITE)
        try:
            start = time.perf_counter()
            for pos in range(0, total, MiB):
                mm[pos : pos + MiB] = chunk
            elapsed = time.perf_counter() - start
        finally:
            mm.close()
    finally:
        os.close(fd)
        os.unlink(path)
    return dict(bytes=total, gbps=total / elapsed / 1e9)


def crc_bandwidth(seconds: float) -> dict:
    data = random.Random(1).randbytes(MiB)
    out = {}
    candidates = [("zlib", zlib.crc32)]
    if _impl.COMPILED is not None:
        candidates.insert(0, ("c", _impl.COMPILED.crc32.crc32))
    for name, fn in candidates:
        best = float("inf")
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            for _ in range(8):
                fn(data)
            best = min(best, (time.perf_counter() - start) / 8)
        out[name] = MiB / best / 1e9
    return out


# ---- store phases ----


class Stores:
    """Fresh store directories under one root, each removed when its phase is done."""

    def __init__(self, root: str, segment_size: int):
        self.root = root
        self.segment_size = segment_size
        self.count = 0

    def path(self, name: str) -> str:
        self.count += 1
        return os.path.join(self.root, f"{self.count:02d}-{name}")

    def open(self, path: str, impl: str) -> MessageStore:
        store = MessageStore(path, implementation=impl, commitlog_file_size=self.segment_size)
        store.put(TOPIC, BODY)  # the topic's creation (topics.json + fsync) stays out of timings
        return store

    @staticmethod
    def remove(path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)


def _timed_puts(store: MessageStore, count: int) -> dict:
    put = store.put
    before = store.max_offset
    start = time.perf_counter()
    for _ in range(count):
        put(TOPIC, BODY)
    elapsed = time.perf_counter() - start
    return dict(
        count=count, seconds=elapsed, rate=count / elapsed, bytes_per_s=(store.max_offset - before) / elapsed
    )


def _median_run(runs: list) -> dict:
    """The run of median rate, with every run's rate beside it."""
    ordered = sorted(runs, key=lambda run: run["rate"])
    return dict(ordered[len(ordered) // 2], runs=[run["rate"] for run in runs])


def single_puts(stores: Stores, impl: str, count: int, reps: int) -> dict:
    path = stores.path(f"single-{impl}")
    store = stores.open(path, impl)
    try:
        first = _timed_puts(store, count)
        warm = [_timed_puts(store, count) for _ in range(reps)]
    finally:
        store.close()
        stores.remove(path)
    return dict(first=first, warm=_median_run(warm))


def _timed_batches(store: MessageStore, count: int, batch: int, form: str) -> dict:
    if form == "list":
        args, kwargs = ([BODY] * batch,), {}
    else:
        args, kwargs = (BODY * batch,), dict(lengths=np.full(batch, len(BODY), dtype=np.int32))
    put_batch = store.put_batch
    calls = max(1, count // batch)
    before = store.max_offset
    start = time.perf_counter()
    for _ in range(calls):
        put_batch(TOPIC, *args, **kwargs)
    elapsed = time.perf_counter() - start
    done = calls * batch
    return dict(
        count=done, seconds=elapsed, rate=done / elapsed, bytes_per_s=(store.max_offset - before) / elapsed
    )


def batch_puts(stores: Stores, impl: str, count: int, batch: int, form: str, reps: int) -> dict:
    path = stores.path(f"batch-{form}-{impl}")
    store = stores.open(path, impl)
    try:
        first = _timed_batches(store, count, batch, form)
        warm = [_timed_batches(store, count, batch, form) for _ in range(reps)]
    finally:
        store.close()
        stores.remove(path)
    return dict(first=first, warm=_median_run(warm))


def durable_threads(stores: Stores, threads: int, seconds: float) -> dict:
    path = stores.path(f"durable-{threads}")
    store = stores.open(path, "c" if _impl.COMPILED is not None else "py")

    def work(_i, end):
        put = store.put
        n = bad = 0
        while time.perf_counter() < end:
            try:
                put(TOPIC, BODY, durable=True)
            except FlushTimeoutError:  # stored, flush not confirmed in time
                bad += 1
            n += 1
        return n, bad

    try:
        before = store.stats()
        done, elapsed = run_threads(threads, seconds, work)
        after = store.stats()
    finally:
        store.close()
        stores.remove(path)
    counts, not_ok = [n for n, _ in done], [bad for _, bad in done]
    msgs = sum(counts)
    rounds = after["flush_rounds"] - before["flush_rounds"]
    return dict(
        threads=threads,
        messages=msgs,
        seconds=elapsed,
        rate=msgs / elapsed,
        flush_rounds=rounds,
        fsyncs_per_msg=rounds / msgs if msgs else float("nan"),
        rounds_per_s=rounds / elapsed,
        not_ok=sum(not_ok),
        sync_requests=after["sync_requests"] - before["sync_requests"],
    )


def _flushed(future) -> bool:
    try:
        future.result()
        return True
    except FlushTimeoutError:
        return False


def pipelined(stores: Stores, count: int, window: int, cap_s: float) -> dict:
    path = stores.path("pipelined")
    store = stores.open(path, "c" if _impl.COMPILED is not None else "py")
    inflight = collections.deque()
    not_ok = 0
    try:
        put = store.put_pipelined
        before = store.stats()
        start = time.perf_counter()
        deadline = start + cap_s
        done = 0
        while done < count:
            inflight.append(put(TOPIC, BODY))
            done += 1
            if len(inflight) > window:
                not_ok += not _flushed(inflight.popleft())
                if not done % 4096 and time.perf_counter() > deadline:
                    break
        while inflight:
            not_ok += not _flushed(inflight.popleft())
        elapsed = time.perf_counter() - start
        after = store.stats()
    finally:
        store.close()
        stores.remove(path)
    rounds = after["flush_rounds"] - before["flush_rounds"]
    return dict(
        count=done,
        seconds=elapsed,
        rate=done / elapsed,
        flush_rounds=rounds,
        fsyncs_per_msg=rounds / done,
        not_ok=not_ok,
        capped=done < count,
    )


def recovery(stores: Stores, count: int, impls) -> dict:
    path = stores.path("recovery")
    store = stores.open(path, impls[0])
    body = BODY * 10_000
    lengths = np.full(10_000, len(BODY), dtype=np.int32)
    for _ in range(max(1, count // 10_000)):
        store.put_batch(TOPIC, body, lengths=lengths)
    size = store.max_offset - store.min_offset
    messages = store.stats()["puts"]
    store.close()
    out = dict(messages=messages, bytes=size)
    try:
        for impl in impls:
            start = time.perf_counter()
            reopened = MessageStore(path, implementation=impl)
            elapsed = time.perf_counter() - start
            if reopened.max_offset - reopened.min_offset != size:
                raise RuntimeError(f"recovery ({impl}) found {reopened.max_offset} bytes, expected {size}")
            reopened.close()
            out[impl] = dict(seconds=elapsed, gbps=size / elapsed / 1e9)
    finally:
        stores.remove(path)
    return out


# ---- the report ----


def _m(rate: float) -> str:
    return f"{rate / 1e6:.2f} M msg/s"


def _k(rate: float) -> str:
    return f"{rate / 1e3:.1f} k msg/s" if rate < 1e6 else _m(rate)


def _runs(warm: dict) -> str:
    return ", ".join(f"{rate / 1e6:.2f}" for rate in warm["runs"])


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "SHORT"


def build_table(r: dict, p: dict) -> list[str]:
    rows = []

    def row(what, result, ratio="", goal="", verdict=""):
        rows.append(f"| {what} | {result} | {ratio} | {goal} | {verdict} |")

    raw = r["write"]["gbps"] * 1e9
    have_c = "c" in r["single"]
    row(
        "serial fdatasync, before durable (4 KiB + fdatasync)",
        f"{r['fsync_before']['rate']:,.0f} /s (median {r['fsync_before']['median_us']:.0f} µs, "
        f"p99 {r['fsync_before']['p99_us']:.0f} µs)",
    )
    row(
        "serial fdatasync, after durable",
        f"{r['fsync_after']['rate']:,.0f} /s (median {r['fsync_after']['median_us']:.0f} µs, "
        f"p99 {r['fsync_after']['p99_us']:.0f} µs)",
    )
    row(
        f"raw sequential write, 1 MiB write() × {r['write']['bytes'] // MiB} + fdatasync",
        f"{r['write']['gbps']:.2f} GB/s",
        f"write() alone {r['write']['page_cache_gbps']:.2f} GB/s",
    )
    row(f"mmap fresh-page write, 1 MiB copies × {r['mmap']['bytes'] // MiB}", f"{r['mmap']['gbps']:.2f} GB/s")

    for impl in ("c", "py"):
        if impl not in r["single"]:
            continue
        s = r["single"][impl]
        n = s["warm"]["count"]
        goal, verdict = (
            ("≥ 2 M msg/s", _verdict(s["warm"]["rate"] >= GOAL_SINGLE)) if impl == "c" else ("", "")
        )
        ratio = f"{s['warm']['bytes_per_s'] / raw:.2f} of raw write"
        if impl == "py" and have_c:
            ratio += f"; c/py {r['single']['c']['warm']['rate'] / s['warm']['rate']:.1f}×"
        row(
            f"async put, one at a time [{impl}], warm, {n:,} × 128 B, median of {len(s['warm']['runs'])}",
            f"{_m(s['warm']['rate'])} [{_runs(s['warm'])}]",
            ratio,
            goal,
            verdict,
        )
        row(
            f"async put, one at a time [{impl}], first run, {s['first']['count']:,} × 128 B",
            _m(s["first"]["rate"]),
            f"{s['first']['bytes_per_s'] / raw:.2f} of raw write",
        )
    for form in ("list", "buffer"):
        for impl in ("c", "py"):
            b = r["batch"].get(f"{form}-{impl}")
            if b is None:
                continue
            goal, verdict = (
                ("≥ 8 M msg/s", _verdict(b["warm"]["rate"] >= GOAL_BATCH)) if impl == "c" else ("", "")
            )
            ratio = f"{b['warm']['bytes_per_s'] / raw:.2f} of raw write"
            if impl == "py" and f"{form}-c" in r["batch"]:
                ratio += f"; c/py {r['batch'][f'{form}-c']['warm']['rate'] / b['warm']['rate']:.1f}×"
            label = "list of bytes" if form == "list" else "buffer + lengths"
            row(
                f"batch put [{impl}], {label}, {p['batch_size']:,}/call, warm, {b['warm']['count']:,} × 128 B, "
                f"median of {len(b['warm']['runs'])}",
                f"{_m(b['warm']['rate'])} [{_runs(b['warm'])}]",
                ratio,
                goal,
                verdict,
            )
            row(
                f"batch put [{impl}], {label}, first run",
                _m(b["first"]["rate"]),
                f"{b['first']['bytes_per_s'] / raw:.2f} of raw write",
            )

    fb, fa = r["fsync_before"]["rate"], r["fsync_after"]["rate"]
    strict = max(fb, fa)
    for d in r["durable"]:
        t = d["threads"]
        ratio_b = d["rate"] / (t * fb)
        ratio_a = d["rate"] / (t * fa)
        note = f"; {d['not_ok']} not PUT_OK" if d["not_ok"] else ""
        row(
            f"blocking durable put, {t} threads × {p['durable_seconds']:g} s",
            f"{_k(d['rate'])}; {d['fsyncs_per_msg']:.3f} fsync/msg ({d['rounds_per_s']:,.0f} rounds/s){note}",
            f"{ratio_b:.2f} (before) / {ratio_a:.2f} (after) of threads × fdatasync",
            "≥ 0.7 × threads × fdatasync",
            _verdict(d["rate"] >= GOAL_DURABLE * t * strict),
        )
    if "pipelined" in r and have_c:
        pl = r["pipelined"]
        ratio = pl["rate"] / r["single"]["c"]["warm"]["rate"]
        note = "; stopped at the time cap" if pl["capped"] else ""
        note += f"; {pl['not_ok']} not PUT_OK" if pl["not_ok"] else ""
        row(
            f"pipelined durable put, 1 thread, window {p['window']:,}, {pl['count']:,} msgs",
            f"{_k(pl['rate'])}; {pl['fsyncs_per_msg']:.4f} fsync/msg{note}",
            f"{ratio:.2f} of async single put",
            "≥ 0.5 (within 2×)",
            _verdict(ratio >= GOAL_PIPELINED),
        )
    crc = r["crc32"]
    if "c" in crc:
        row("CRC32 of 1 MiB [c]", f"{crc['c']:.2f} GB/s", f"{crc['c'] / crc['zlib']:.1f}× zlib")
    row("CRC32 of 1 MiB, zlib.crc32", f"{crc['zlib']:.2f} GB/s")
    rec = r["recovery"]
    for impl in ("c", "py"):
        if impl in rec:
            row(
                f"recovery open [{impl}], {rec['messages']:,} msgs, {rec['bytes'] / MiB:.0f} MiB (page cache warm)",
                f"{rec[impl]['seconds'] * 1e3:.0f} ms = {rec[impl]['gbps']:.2f} GB/s scanned",
            )

    head = ["| measurement | result | ratio | goal | verdict |", "|---|---|---|---|---|"]
    return head + rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="reduced counts and durations (< 60 s)")
    ap.add_argument("--json", metavar="PATH", help="write every measured number here")
    ap.add_argument(
        "--dir", metavar="DIR", help="where stores and probe files go (default: a temp dir in bench/)"
    )
    ap.add_argument("--segment-size", type=int, default=GiB, help="CommitLog segment size (default 1 GiB)")
    ap.add_argument("--batch-size", type=int, default=10_000, help="messages per put_batch call")
    args = ap.parse_args(argv)
    p = dict(
        QUICK if args.quick else FULL,
        batch_size=args.batch_size,
        segment_size=args.segment_size,
        quick=args.quick,
    )

    parent = args.dir or BENCH_DIR
    os.makedirs(parent, exist_ok=True)
    root = tempfile.mkdtemp(prefix=".engine-run-", dir=parent)
    facts = machine_facts(root)
    if facts["filesystem"] in ("tmpfs", "ramfs"):
        log(f"WARNING: {root} is on {facts['filesystem']}: fdatasync does nothing there")
    impls = ["c", "py"] if _impl.COMPILED is not None else ["py"]
    stores = Stores(root, args.segment_size)
    r: dict = dict(single={}, batch={}, durable=[])
    wall = time.perf_counter()
    cpu_before = cpu_sample()
    load = os.getloadavg()
    log(buildinfo.header(facts["build"]))
    try:
        log("machine baselines: write bandwidth, mmap bandwidth, CRC32")
        r["write"] = write_bandwidth(root, p["raw_bytes"])
        r["mmap"] = mmap_bandwidth(root, p["mmap_bytes"])
        r["crc32"] = crc_bandwidth(p["crc_seconds"])
        for impl in impls:
            n = p["single_c"] if impl == "c" else p["single_py"]
            log(f"single put [{impl}] {n:,} first run + {p['reps']} × {n:,} warm")
            r["single"][impl] = single_puts(stores, impl, n, p["reps"])
        for form in ("list", "buffer"):
            for impl in impls:
                n = p["batch"] if impl == "c" else p["batch_py"]
                log(f"batch put [{impl}] {form} {n:,} first run + {p['reps']} × {n:,} warm")
                r["batch"][f"{form}-{impl}"] = batch_puts(stores, impl, n, args.batch_size, form, p["reps"])
        log(f"serial fdatasync {p['fsync_seconds']:g} s (before durable)")
        r["fsync_before"] = fdatasync_baseline(root, p["fsync_seconds"])
        for threads in p["durable_threads"]:
            log(f"blocking durable put, {threads} threads, {p['durable_seconds']:g} s")
            r["durable"].append(durable_threads(stores, threads, p["durable_seconds"]))
        log(f"pipelined durable put, {p['pipelined']:,} msgs, window {p['window']:,}")
        r["pipelined"] = pipelined(stores, p["pipelined"], p["window"], p["pipelined_cap_s"])
        log(f"serial fdatasync {p['fsync_seconds']:g} s (after durable)")
        r["fsync_after"] = fdatasync_baseline(root, p["fsync_seconds"])
        log(f"recovery open of {p['recovery']:,} messages")
        r["recovery"] = recovery(stores, p["recovery"], impls)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    wall = time.perf_counter() - wall
    r["other_load"] = other_load(cpu_before, cpu_sample())
    r["loadavg_before"], r["loadavg_after"] = load, os.getloadavg()
    load_after = r["loadavg_after"]

    print(
        f"rocketstore engine report ({'quick' if args.quick else 'full'}), "
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}, {wall:.0f} s"
    )
    print(buildinfo.header(facts["build"]))
    print(
        f"machine: {facts['nproc']} CPUs, {facts['cpu']}, Linux {facts['kernel']}, Python {facts['python']}; "
        f"store dir on {facts['filesystem']} ({facts['device']} at {facts['mount']}); "
        f"segments {args.segment_size // MiB} MiB; load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} "
        f"before, {load_after[0]:.2f} after"
    )
    print(
        f"during the run, other processes used {r['other_load']['others']:.0%} of the machine's CPU "
        f"and the host stole {r['other_load']['steal']:.0%} (kernel threads such as writeback count as others)"
    )
    print()
    print("\n".join(build_table(r, p)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                dict(
                    machine=facts,
                    params={k: list(v) if isinstance(v, tuple) else v for k, v in p.items()},
                    results=r,
                    wall_seconds=wall,
                ),
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
