"""Recovery and verify speed: GB/s of CommitLog checked, beside the machine's own limits.

    pip install . && python bench/recovery.py [--mb 1024] [--impl py] [--json out.json]

It measures the installed rocketstore (never ``src/``; without an install it exits saying so);
the first line names the build (compiled or pure Python) and its CRC-32 path.

Builds a store of ``--mb`` MiB of 128-byte messages with a 20-character key each (kept in
``--dir`` between runs), warms the page cache, then measures in one run:

* raw read: the segment files read into a buffer (``readinto``), and raw read + ``zlib.crc32``;
* ``verify()``: every record's structure and body CRC, and every ConsumeQueue unit: the first
  after a read-only open (``verify_GBps``), the same store's again (``verify_again_GBps``), and
  the first after a writable open (``verify_first_after_writable_open_GBps``);
* recovery scan: an abnormal open with no checkpoint scans the whole CommitLog with CRC
  checks (the ``"recover"`` stage of the progress callback), then rebuilds the ConsumeQueues
  and the index (``"dispatch"`` stage), timed separately; the same open is then timed with
  ``fused_dispatch=False`` (``*_general_path``: every record through the general dispatch, the
  baseline of the fused pass, docs/fused-dispatch.md) and with the default again (``*_again``).
  The first open right after the build is the slowest whichever path it takes (the build's
  pages are still being written back; a rebuild after kill -9 meets that too): compare
  ``*_general_path`` with ``*_again``, which find the files in the same state;
* CPU seconds beside wall seconds for verify and the abnormal open (``process_time``): on a
  machine shared with other jobs they say what the code costs, the wall clock what users wait;
* an open after ``kill -9`` of a writer that ran with its dispatch thread (so it checkpointed)
  and put ~64 MiB more: the usual crash, whose open scans from that checkpoint;
* an interrupted rebuild: a child process doing that open is killed half-way through the
  dispatch stage; the next open resumes from the checkpoint the rebuild left, and we report
  how much of the rebuild it had left to do.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zlib

import buildinfo

buildinfo.require("bench/recovery.py")

from rocketstore import MessageStore  # noqa: E402

SEGMENT = 128 << 20
OPTIONS = dict(commitlog_file_size=SEGMENT, dispatch_interval_ms=0)


def build(path: str, mb: int, impl) -> None:
    if os.path.isdir(path):
        with MessageStore(path, implementation=impl, read_only=True, **OPTIONS) as s:
            if s.max_offset >= mb << 20:
                return
        shutil.rmtree(path)
    body = os.urandom(128)
    with MessageStore(path, implementation=impl, **OPTIONS) as s:
        n = 0
        while s.max_offset < mb << 20:
            for _i in range(10_000):
                s.put("BenchTopic", body, keys="key-%016d" % n)
                n += 1


def segment_files(path: str) -> list[str]:
    d = os.path.join(path, "commitlog")
    return [os.path.join(d, n) for n in sorted(os.listdir(d))]


def raw_read(files, crc: bool) -> tuple[int, float]:
    buf = bytearray(SEGMENT)
    view = memoryview(buf)
    total = 0
    t0 = time.perf_counter()
    for name in files:
        with open(name, "rb", buffering=0) as f:
            n = f.readinto(buf)
        if crc:
            zlib.crc32(view[:n])
        total += n
    return total, time.perf_counter() - t0


def stage_timer():
    marks = {}

    def progress(stage, done, total):
        now = time.perf_counter()
        first = marks.setdefault(stage, [now, now, 0])
        first[1], first[2] = now, done

    return marks, progress


def make_abnormal(path: str) -> None:
    os.unlink(os.path.join(path, "checkpoint"))
    open(os.path.join(path, "abort"), "wb").close()


def killed_after_first_line(code: str) -> bytes:
    """Run ``code`` in a child Python, kill it with SIGKILL once it printed a line; that line."""
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    line = child.stdout.readline()
    child.send_signal(signal.SIGKILL)
    child.wait()
    return line


def interrupted(path: str, impl) -> dict:
    """Kill a rebuilding open half-way through; the next open resumes. Returns the bytes each
    open had to dispatch."""
    make_abnormal(path)
    code = (
        "from rocketstore import MessageStore\n"
        "def p(stage, done, total):\n"
        "    if stage == 'dispatch' and done * 2 >= total:\n"
        "        print('HALF', done, total, flush=True)\n"
        "        import time; time.sleep(60)\n"
        "MessageStore(%r, implementation=%r, progress=p, **%r)\n"
    ) % (path, impl, OPTIONS)
    line = killed_after_first_line(code).split()
    first_done, first_total = int(line[1]), int(line[2])
    marks, progress = stage_timer()
    t0 = time.perf_counter()
    with MessageStore(path, implementation=impl, progress=progress, **OPTIONS):
        pass
    second = time.perf_counter() - t0
    redo = marks.get("dispatch", [0, 0, 0])[2]
    return {
        "first_open_dispatch_bytes": first_total,
        "killed_after_bytes": first_done,
        "second_open_dispatch_bytes": redo,
        "second_open_s": round(second, 3),
    }


def killed_writer(path: str, impl) -> dict:
    """The usual crash: a writer with its dispatch thread on (so it checkpoints, every
    checkpoint_interval_ms) puts ~64 MiB more, then is killed with SIGKILL; the next open's
    time, wall and CPU. It scans from the checkpoint the writer left, not the whole log."""
    code = (
        "import os\n"
        "from rocketstore import MessageStore\n"
        "s = MessageStore(%r, implementation=%r, commitlog_file_size=%d, checkpoint_interval_ms=200)\n"
        "body = os.urandom(128)\n"
        "start = s.max_offset\n"
        "n = 0\n"
        "while s.max_offset < start + (64 << 20):\n"
        "    s.put('BenchTopic', body, keys='kill-%%016d' %% n)\n"
        "    n += 1\n"
        "print('PUT', flush=True)\n"
        "import time; time.sleep(60)\n"
    ) % (path, impl, SEGMENT)
    killed_after_first_line(code)
    marks, progress = stage_timer()
    t0, c0 = time.perf_counter(), time.process_time()
    with MessageStore(path, implementation=impl, progress=progress, **OPTIONS) as s:
        opened, cpu = time.perf_counter() - t0, time.process_time() - c0
        end = s.max_offset
    # the scan's progress counts from where it started to the end of the last segment file
    files_end = len(segment_files(path)) * SEGMENT
    scan_from = files_end - marks.get("recover", [0, 0, files_end])[2]
    return {
        "commitlog_bytes": end,
        "scan_from": scan_from,
        "open_s": round(opened, 3),
        "open_cpu_s": round(cpu, 3),
        "open_GBps_of_commitlog": round(end / opened / 1e9, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--impl", default=None)
    ap.add_argument("--dir", default="/tmp/rocketstore-bench-recovery")
    ap.add_argument("--json", default=None)
    ap.add_argument("--keep", action="store_true", help="keep the store for the next run")
    args = ap.parse_args()
    impl = args.impl
    print(buildinfo.header() + (f"; measured twin [{impl}]" if impl else ""))
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1/5/15 min, before the run)")
    build(args.dir, args.mb, impl)
    files = segment_files(args.dir)
    raw_read(files, crc=False)  # warm the page cache
    out: dict = {}
    n, t = raw_read(files, crc=False)
    out["raw_read_GBps"] = n / t / 1e9
    n, t = raw_read(files, crc=True)
    out["raw_read_zlib_crc_GBps"] = n / t / 1e9

    with MessageStore(args.dir, implementation=impl, read_only=True, **OPTIONS) as s:
        t0, c0 = time.perf_counter(), time.process_time()
        report = s.verify()
        t, c = time.perf_counter() - t0, time.process_time() - c0
        assert report["ok"], report["problems"][:3]
        out["verify_GBps"] = report["bytes"] / t / 1e9
        out["verify_cpu_GBps"] = report["bytes"] / c / 1e9  # per CPU second: steadier on a busy machine
        out["records"] = report["records"]
        out["bytes"] = report["bytes"]
        out["implementation"] = s.stats()["implementation"]
        # the same store's verify again: its maps and the process's memory are warm now
        t0 = time.perf_counter()
        assert s.verify()["ok"]
        out["verify_again_GBps"] = report["bytes"] / (time.perf_counter() - t0) / 1e9

    # The first abnormal open right after the build (its pages perhaps still being written
    # back), then the same open with every record sent through the general dispatch path
    # (fused_dispatch=False: the baseline of the fused pass), then the default again.
    for suffix, fused in (("", True), ("_general_path", False), ("_again", True)):
        make_abnormal(args.dir)
        marks, progress = stage_timer()
        t0, c0 = time.perf_counter(), time.process_time()
        with MessageStore(
            args.dir, implementation=impl, progress=progress, fused_dispatch=fused, **OPTIONS
        ) as s:
            opened, opened_cpu = time.perf_counter() - t0, time.process_time() - c0
            end = s.max_offset
        scan = marks["recover"]
        if not suffix:
            out["recovery_scan_GBps"] = end / (scan[1] - t0) / 1e9
        if "dispatch" in marks:
            d = marks["dispatch"]
            out["rebuild_dispatch_GBps" + suffix] = d[2] / (d[1] - scan[1]) / 1e9
            out["rebuild_dispatch_Mmsgs" + suffix] = out["records"] / (d[1] - scan[1]) / 1e6
        out["abnormal_open_no_checkpoint_s" + suffix] = opened
        out["abnormal_open_no_checkpoint_GBps" + suffix] = end / opened / 1e9
        out["abnormal_open_no_checkpoint_cpu_s" + suffix] = opened_cpu
    if "rebuild_dispatch_GBps_general_path" in out:
        best = max(out["rebuild_dispatch_GBps"], out.get("rebuild_dispatch_GBps_again", 0.0))
        out["rebuild_dispatch_fused_vs_general"] = best / out["rebuild_dispatch_GBps_general_path"]

    t0 = time.perf_counter()
    with MessageStore(args.dir, implementation=impl, **OPTIONS) as s:
        out["clean_open_s"] = time.perf_counter() - t0
        out["clean_open_GBps"] = out["bytes"] / out["clean_open_s"] / 1e9
        t0 = time.perf_counter()
        assert s.verify()["ok"]  # the first verify after a writable open
        out["verify_first_after_writable_open_GBps"] = out["bytes"] / (time.perf_counter() - t0) / 1e9

    out["interrupted_rebuild"] = interrupted(args.dir, impl)
    out["open_after_kill9"] = killed_writer(args.dir, impl)
    out["loadavg_after"] = list(os.getloadavg())
    for k, v in out.items():
        print(f"{k:32} {v:.3f}" if isinstance(v, float) else f"{k:32} {v}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    if not args.keep:
        shutil.rmtree(args.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
