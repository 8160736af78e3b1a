"""Acknowledgement per message (POP): receive + ack messages per second in one process.

    pip install ".[bench]" && python bench/pop.py [--quick] [--messages N] [--impl c|py] [--json out.json] [--dir DIR]

It measures the installed rocketstore (never ``src/``; without an install it exits saying so);
the first line names the build.

One fresh store of ``N`` messages (128-byte bodies, 4 queues, put in batches, then dispatched);
each row consumes all of them with a consumer group of its own, in this one run:

* baseline, pull + commit: ``get_message`` 32 at a time per queue and ``commit_offset`` after
  each batch (a pull consumer: what reading the messages costs, with no per-message state);
* receive + ack: ``receive(max_msgs=B)`` then ``ack(handle)`` for each message, B = 32;
* receive + ack_many: ``receive(max_msgs=B)`` then one ``ack_many(received)`` per batch (the
  whole result: no handle strings), B = 32 and 256; and with the handle strings
  (``ack_many([r.handle for r in received])``: each handle made, then parsed).

Every receive and every ack batch writes one record (a checkpoint, an ack) into the revive
topic, so the rows include those puts. The rate is messages received and acknowledged per
second; the issue's goal is 0.5 M/s with the compiled build. ``ratio`` is the row's rate over
the baseline's. The load average is printed: on a shared machine, read the figures with it.
Each row also gives the rate per second of CPU time of this process (``cpu``: every thread's,
the dispatcher's and flusher's included, from ``time.process_time``), which other processes
on the machine disturb far less than the wall-clock rate; the goal is judged on both.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import buildinfo

buildinfo.require("bench/pop.py")

from rocketstore import MessageStore  # noqa: E402

TOPIC = "PopBench"
QUEUES = 4
BODY = bytes(range(128))
GOAL = 500_000


def fill(store: MessageStore, n: int) -> None:
    store.create_topic(TOPIC, QUEUES)
    step = 4096
    for start in range(0, n, step):
        count = min(step, n - start)
        store.put_batch(TOPIC, [BODY] * count, queue_id=(start // step) % QUEUES)
    store.queues()  # dispatch everything before timing


def pull_commit(store: MessageStore, group: str, n: int) -> int:
    got = 0
    for qid in range(QUEUES):
        offset = 0
        while True:
            result = store.get_message(group, TOPIC, qid, offset, 32)
            if not result.messages:
                break
            got += len(result.messages)
            offset = result.next_begin_offset
            store.commit_offset(group, TOPIC, qid, offset)
    return got


def ack_each(store: MessageStore, received: Any) -> None:
    ack = store.ack
    for r in received:
        ack(r.handle)


def ack_received(store: MessageStore, received: Any) -> None:
    store.ack_many(received)


def ack_handles(store: MessageStore, received: Any) -> None:
    store.ack_many([r.handle for r in received])


def receive_and(settle: Callable[[MessageStore, Any], None]) -> Callable[[MessageStore, str, int], int]:
    """A POP consumer that receives ``batch`` at a time and ``settle``s each batch."""

    def consume(store: MessageStore, group: str, batch: int) -> int:
        got = 0
        receive = store.receive
        while True:
            received = receive(group, TOPIC, batch, 60_000)
            if not received:
                return got
            settle(store, received)
            got += len(received)

    return consume


def timed(fn, *args) -> tuple[int, float, float]:
    """(count, wall seconds, CPU seconds of this process)."""
    cpu = time.process_time()
    started = time.perf_counter()
    count = fn(*args)
    return count, time.perf_counter() - started, time.process_time() - cpu


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--messages", type=int, default=None, help="messages in the store (default 1,000,000)"
    )
    parser.add_argument("--quick", action="store_true", help="200,000 messages")
    parser.add_argument("--impl", default=None, help="c or py (default: the compiled one when built)")
    parser.add_argument("--json", default=None, help="write the figures here")
    parser.add_argument("--dir", default=None, help="parent directory of the temporary store")
    args = parser.parse_args(argv)
    n = args.messages or (200_000 if args.quick else 1_000_000)
    print(buildinfo.header())
    print(f"load average {os.getloadavg()[0]:.2f}; {n:,} messages of {len(BODY)} bytes in {QUEUES} queues")
    root = tempfile.mkdtemp(prefix="rocketstore-bench-pop-", dir=args.dir)
    rows = []
    try:
        with MessageStore(
            os.path.join(root, "store"), implementation=args.impl, pop_snapshot_interval_ms=0
        ) as store:
            fill(store, n)
            cases = [
                ("baseline: get_message 32 + commit_offset", pull_commit, 0),
                ("receive 32 + ack each", receive_and(ack_each), 32),
                ("receive 32 + ack_many", receive_and(ack_received), 32),
                ("receive 256 + ack_many", receive_and(ack_received), 256),
                ("receive 256 + ack_many([r.handle ...])", receive_and(ack_handles), 256),
            ]
            base = base_cpu = None
            for i, (name, fn, batch) in enumerate(cases):
                group = f"benchGroup{i}"
                count, seconds, cpu = timed(fn, store, group, *([batch] if batch else [n]))
                if count != n:
                    raise SystemExit(f"{name}: consumed {count} of {n} messages")
                rate, cpu_rate = count / seconds, count / max(cpu, 1e-9)
                base, base_cpu = base or rate, base_cpu or cpu_rate
                rows.append(
                    {
                        "case": name,
                        "messages": count,
                        "seconds": seconds,
                        "rate": rate,
                        "cpu_seconds": cpu,
                        "cpu_rate": cpu_rate,
                    }
                )
                verdict = ""
                if batch:
                    met = ["wall" if rate >= GOAL else "", "cpu" if cpu_rate >= GOAL else ""]
                    verdict = f"   goal {GOAL / 1e6:.1f} M/s met: {' + '.join(m for m in met if m) or 'no'}"
                print(
                    f"{name:<40} {rate / 1e6:6.3f} M msgs/s (ratio {rate / base:4.2f})"
                    f"  cpu {cpu_rate / 1e6:6.3f} M/s (ratio {cpu_rate / base_cpu:4.2f})" + verdict
                )
            print(f"stats: {json.dumps({k: v for k, v in store.stats().items() if k.startswith('pop_')})}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"build": buildinfo.describe(), "messages": n, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
