"""Many processes, one store: what waiting for messages costs and how fast it wakes.

Three figures, measured in one run on this machine:

1. **put-to-receive latency across processes**: this process puts one message every
   ``--gap-ms``; a reader process (a read-only store) waits in ``get_message(wait=)`` and, on
   receipt, takes ``CLOCK_MONOTONIC`` (the same clock in every process) minus the time the body
   carries. Beside it, in the same run, its baseline: an ``os.pipe`` ping (8 bytes written every
   ``--gap-ms`` to a reader process blocked in ``os.read``), and its two pieces: the wake-up (a
   reader that sleeps on the live page, then takes the time) and the pull after it (that reader's
   ``get_message`` once woken: following the writer, dispatching the put, reading it). With
   ``--spin-us N`` a fourth reader waits with ``wait_spin_us=N``. Goal: p50 <= 2x the pipe's,
   p99 <= 150 us.
2. **CPU of idle waiting consumers**: ``--consumers`` processes each iterate a ``Consumer`` that
   has nothing to receive for ``--idle-s`` seconds; their CPU time over that window, as a share of
   one core. Goal: < 1 % for 8.
3. **what waiters cost a putter**: puts/s of this process with nobody waiting, then with the idle
   consumers waiting (each put then wakes them: they find nothing for them and sleep again).

    python bench/live.py [--messages 2000] [--consumers 8] [--idle-s 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import buildinfo

buildinfo.require("bench/live.py")

from rocketstore import MessageStore  # noqa: E402

READER = r"""
import struct, sys, time
from rocketstore import MessageStore
path, n, spin, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
with MessageStore(path, read_only=True, wait_spin_us=spin) as store:
    print("READY", flush=True)
    offset, lat = start, []
    while len(lat) < n:
        got = store.get_message("bench", "Latency", 0, offset, max_msgs=64, wait=10)
        now = time.monotonic_ns()
        if not got.messages:
            raise SystemExit("no message within 10 s")
        for msg in got.messages:
            lat.append(now - struct.unpack("<q", msg.body[:8])[0])
        offset = got.next_begin_offset
    print(" ".join(map(str, lat)), flush=True)
"""

PIPE = r"""
import os, struct, sys, time
fd, n = int(sys.argv[1]), int(sys.argv[2])
print("READY", flush=True)
lat = []
for _ in range(n):
    stamp = os.read(fd, 8)
    lat.append(time.monotonic_ns() - struct.unpack("<q", stamp)[0])
print(" ".join(map(str, lat)), flush=True)
"""

# The wake-up and the pull after it, apart: sleep on the topic's word, take the time, pull.
SPLIT = r"""
import struct, sys, time
from rocketstore import MessageStore
from rocketstore.processes.live import topic_slot
path, n, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with MessageStore(path, read_only=True) as store:
    live, slots, offset, wake, pull = store._opened.live, (topic_slot("Split"),), start, [], []
    print("READY", flush=True)
    while len(wake) < n:
        look = live.look(slots)
        got = store.get_message("bench", "Split", 0, offset, max_msgs=64)
        if not got.messages:
            if not live.wait_look(look, 1.0 if wake else 10.0):
                break
            woken = time.monotonic_ns()
            got = store.get_message("bench", "Split", 0, offset, max_msgs=64)
            if len(got.messages) == 1:  # one put, one wake-up (not one that came while busy)
                wake.append(woken - struct.unpack("<q", got.messages[0].body[:8])[0])
                pull.append(time.monotonic_ns() - woken)
        offset = got.next_begin_offset
    print(" ".join(map(str, wake)), flush=True)
    print(" ".join(map(str, pull)), flush=True)
"""

WAKER = r"""
import struct, sys, time
from rocketstore import MessageStore
from rocketstore.processes.live import topic_slot
path, n = sys.argv[1], int(sys.argv[2])
with MessageStore(path, read_only=True) as store:
    live, lat = store._opened.live, []
    print("READY", flush=True)
    # a wake that came while this process was still busy with the last one is not waited for:
    # count the wakes, and stop after a second without a put (the bench puts every few ms)
    while len(lat) < n:
        look = live.look((topic_slot("Wake"),))
        if not live.wait_look(look, 1.0 if lat else 10.0):
            break
        lat.append(time.monotonic_ns() - struct.unpack_from("<q", live.mm, 56)[0])
    print(" ".join(map(str, lat)), flush=True)
"""

IDLE = r"""
import os, sys, time
from rocketstore import Consumer, MessageStore
path, seconds = sys.argv[1], float(sys.argv[2])
with MessageStore(path, read_only=True) as store:
    consumer = Consumer(store, "idle-%d" % os.getpid(), "Nothing")
    print("READY", flush=True)
    t0, c0 = time.monotonic(), time.process_time()
    while time.monotonic() - t0 < seconds:
        consumer.poll(32, timeout=max(0.0, seconds - (time.monotonic() - t0)))
    print(time.process_time() - c0, time.monotonic() - t0, flush=True)
"""


def spawn(code: str, *args: str, pass_fds: tuple[int, ...] = ()) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True, pass_fds=pass_fds
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line != "READY\n":
        proc.kill()
        raise SystemExit(f"child did not start: {line!r}")
    return proc


def put_rate(store: MessageStore, seconds: float) -> float:
    body = b"x" * 64
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(1000):
            store.put("Rate", body, queue_id=0)
        n += 1000
    return n / (time.perf_counter() - t0)


def latency(store: MessageStore, path: str, n: int, gap_ms: float, spin: int) -> list[int]:
    """A reader process's put-to-receive times (ns) of ``n`` puts, one every ``gap_ms``."""
    start = store.max_queue_offset("Latency", 0)
    reader = spawn(READER, path, str(n), str(spin), str(start))
    for _ in range(n):
        time.sleep(gap_ms / 1000.0)
        store.put("Latency", struct.pack("<q", time.monotonic_ns()), queue_id=0)
    out, _ = reader.communicate(timeout=120)
    return [int(x) for x in out.split()]


def pipe_ping(n: int, gap_ms: float) -> list[int]:
    """The baseline: 8-byte writes to a pipe a process reads, one every ``gap_ms`` (ns)."""
    r, w = os.pipe()
    try:
        reader = spawn(PIPE, str(r), str(n), pass_fds=(r,))
        for _ in range(n):
            time.sleep(gap_ms / 1000.0)
            os.write(w, struct.pack("<q", time.monotonic_ns()))
        out, _ = reader.communicate(timeout=120)
    finally:
        os.close(r)
        os.close(w)
    return [int(x) for x in out.split()]


def split(store: MessageStore, path: str, n: int, gap_ms: float) -> tuple[list[int], list[int]]:
    """The wake-up and the pull after it (ns), apart, of a reader of the topic Split."""
    start = store.max_queue_offset("Split", 0)
    reader = spawn(SPLIT, path, str(n), str(start))
    for _ in range(n + n // 4):  # a few more: a put that came while the reader was busy is not counted
        time.sleep(gap_ms / 1000.0)
        store.put("Split", struct.pack("<q", time.monotonic_ns()), queue_id=0)
        if reader.poll() is not None:
            break
    out, _ = reader.communicate(timeout=120)
    wake, pull = out.split("\n")[:2]
    return [int(x) for x in wake.split()], [int(x) for x in pull.split()]


def pct(values: list[int], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))] / 1000.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=2000)
    ap.add_argument("--gap-ms", type=float, default=2.0)
    ap.add_argument("--consumers", type=int, default=8)
    ap.add_argument("--idle-s", type=float, default=5.0)
    ap.add_argument("--spin-us", type=int, default=0, help="also a reader with wait_spin_us=N")
    ap.add_argument("--rounds", type=int, default=1, help="latency rounds (pipe, reader, ... in turn)")
    args = ap.parse_args()
    print(buildinfo.header())
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    root = tempfile.mkdtemp(prefix="rocketstore-live-bench-")
    path = os.path.join(root, "store")
    try:
        with MessageStore(path) as store:
            store.create_topic("Latency", 1)
            store.create_topic("Rate", 1)
            store.create_topic("Nothing", 1)
            store.create_topic("Wake", 1)
            store.put("Nothing", b"")  # the topic has a queue; nobody waits on its end
            store.create_topic("Split", 1)
            for rnd in range(args.rounds):
                pipe = pipe_ping(args.messages, args.gap_ms)
                p50 = pct(pipe, 50)
                print(
                    f"round {rnd}: os.pipe ping, {len(pipe)} one per {args.gap_ms} ms: p50 {p50:.1f} us, "
                    f"p99 {pct(pipe, 99):.1f} us (load average {os.getloadavg()[0]:.2f})"
                )
                readers = [("", 0)] + (
                    [(f", wait_spin_us={args.spin_us}", args.spin_us)] if args.spin_us else []
                )
                for label, spin in readers:
                    lat = latency(store, path, args.messages, args.gap_ms, spin)
                    print(
                        f"round {rnd}: put-to-receive across processes{label}, {len(lat)} messages one per "
                        f"{args.gap_ms} ms: p50 {pct(lat, 50):.1f} us = {pct(lat, 50) / p50:.2f}x the pipe, "
                        f"p99 {pct(lat, 99):.1f} us, max {max(lat) / 1000:.1f} us "
                        f"(goal p50 <= 2x the pipe, p99 <= 150 us)"
                    )
                wake, pull = split(store, path, args.messages, args.gap_ms)
                print(
                    f"round {rnd}: its pieces ({len(wake)} single wake-ups): the wake-up p50 {pct(wake, 50):.1f} us "
                    f"p99 {pct(wake, 99):.1f} us; the pull once woken (follow, dispatch, read) "
                    f"p50 {pct(pull, 50):.1f} us p99 {pct(pull, 99):.1f} us"
                )

            idle = [spawn(IDLE, path, str(args.idle_s)) for _ in range(args.consumers)]
            cpu = wall = 0.0
            for proc in idle:  # nothing is put meanwhile
                out, _ = proc.communicate(timeout=args.idle_s + 60)
                c, w = map(float, out.split())
                cpu, wall = cpu + c, max(wall, w)
            print(
                f"{args.consumers} idle waiting consumers used {cpu:.4f} s of CPU in {wall:.1f} s: "
                f"{100 * cpu / wall:.3f} % of one core (goal < 1 %)"
            )

            # the futex wake alone: the time of the put (in a spare field of the page) to the
            # waiter running again, without catching up or pulling
            waker = spawn(WAKER, path, str(args.messages))
            for _ in range(args.messages):
                time.sleep(args.gap_ms / 1000.0)
                struct.pack_into("<q", store._opened.live.mm, 56, time.monotonic_ns())
                store.put("Wake", b"", queue_id=0)
            out, _ = waker.communicate(timeout=120)
            wake = [int(x) for x in out.split()]
            print(
                f"the futex wake alone (a put to its waiter running again, no catch-up or pull): p50 {pct(wake, 50):.1f} us, p99 {pct(wake, 99):.1f} us"
                f" ({len(wake)} of {args.messages} puts; a put that came while the waiter was busy is not waited for)"
            )

            alone = put_rate(store, 2.0)
            waiting = [spawn(IDLE, path, "4") for _ in range(args.consumers)]
            busy = put_rate(store, 2.0)
            for proc in waiting:
                proc.communicate(timeout=60)
            print(
                f"puts/s, one process: {alone:,.0f} with nobody waiting, {busy:,.0f} with "
                f"{args.consumers} consumers of another topic waiting ({busy / alone:.2f}x)"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
