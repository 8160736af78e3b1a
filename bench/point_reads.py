"""Point reads one call at a time: read(offset), get_by_msg_id, get_by_queue_offset and query_by_key.

    python bench/point_reads.py                      # 100,000 messages, compiled build
    python bench/point_reads.py --impl py --messages 20000

The store of ``bench/compare.py --quick`` (128-byte bodies, a 20-character key each, 8 queues);
then 20,000 random positions (or keys) read one call at a time, and the same position (or key)
20,000 times ("hot": no cache misses, the call's own work); then every queue consumed through
``get_message(group, topic, queue_id, offset, 32)`` (per message). Each rate is the fastest of
``--passes`` passes, each pass timed in CPU seconds of this thread (``time.thread_time``), so
other tenants of a shared machine taking turns on the cores do not count; a dict lookup loop
measured the same way is printed beside them, with the load average. To compare two trees, run
this script with each on ``PYTHONPATH`` in turn, a few times, alternating.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable

import probes

from rocketstore import Message, MessageStore

TOPIC = "bench"
QUEUES = 8
LOOKUPS = 20_000


def best_rate(run: Callable[[], None], count: int, passes: int) -> float:
    best = float("inf")
    for _ in range(passes):
        start = time.thread_time()
        run()
        best = min(best, time.thread_time() - start)
    return count / best if best > 0 else float("inf")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--impl", default="c", choices=("c", "py"))
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--passes", type=int, default=9)
    ap.add_argument("--seed", type=int, default=17)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    print(f"seed {args.seed}; load average before {os.getloadavg()}")
    directory = tempfile.mkdtemp(prefix="rocketstore-point-reads-")
    try:
        store = MessageStore(directory, implementation=args.impl)
        try:
            store.create_topic(TOPIC, QUEUES)
            keys = [f"key-{i:016d}" for i in range(args.messages)]
            body = os.urandom(128)
            for i in range(0, args.messages, 1000):
                store.put_messages([Message(TOPIC, body, keys=k) for k in keys[i : i + 1000]])
            store._opened.dispatcher.catch_up()
            offsets, queue_ids, queue_offsets = probes.message_positions(store)
            sample = rng.choices(range(args.messages), k=LOOKUPS)
            at = [int(offsets[i]) for i in sample]
            positions = [(int(queue_ids[i]), int(queue_offsets[i])) for i in sample]
            wanted = rng.choices(keys, k=LOOKUPS)
            read, by_queue, by_key = store.read, store.get_by_queue_offset, store.query_by_key
            by_id = store.get_by_msg_id
            ids = [read(offset).msg_id for offset in at]
            table = {k: i for i, k in enumerate(keys)}

            def reads(offsets: list[int]) -> Callable[[], None]:
                def run() -> None:
                    for offset in offsets:
                        read(offset)

                return run

            def id_reads(ids: list[str]) -> Callable[[], None]:
                def run() -> None:
                    for msg_id in ids:
                        by_id(msg_id)

                return run

            def queue_reads(positions: list[tuple[int, int]]) -> Callable[[], None]:
                def run() -> None:
                    for queue_id, queue_offset in positions:
                        by_queue(TOPIC, queue_id, queue_offset)

                return run

            def lookups(keys: list[str]) -> Callable[[], None]:
                def run() -> None:
                    for key in keys:
                        by_key(TOPIC, key)

                return run

            get_message = store.get_message

            def pulls() -> None:  # every queue from its start, 32 a pull
                for queue_id in range(QUEUES):
                    offset = 0
                    while True:
                        got = get_message("bench-group", TOPIC, queue_id, offset, 32)
                        if not got.messages:
                            break
                        offset = got.next_begin_offset

            def dict_loop() -> None:
                for key in wanted:
                    table.get(key)

            rows = [
                ("read(offset), random", reads(at)),
                ("get_by_msg_id, random", id_reads(ids)),
                ("get_by_queue_offset, random", queue_reads(positions)),
                ("query_by_key, random", lookups(wanted)),
                ("read(offset), hot", reads(at[:1] * LOOKUPS)),
                ("get_by_msg_id, hot", id_reads(ids[:1] * LOOKUPS)),
                ("get_by_queue_offset, hot", queue_reads(positions[:1] * LOOKUPS)),
                ("query_by_key, hot", lookups(wanted[:1] * LOOKUPS)),
            ]
            limit = best_rate(dict_loop, LOOKUPS, args.passes)
            print(
                f"{store._impl.name} build, {args.messages:,} messages, best of {args.passes} passes (CPU time)"
            )
            for name, run in rows:
                rate = best_rate(run, LOOKUPS, args.passes)
                print(
                    f"{name:30s} {rate / 1e6:6.3f} M/s  {1e9 / rate:7.0f} ns/call  {rate / limit:.4f} of dict loop"
                )
            rate = best_rate(pulls, args.messages, args.passes)
            print(
                f"{'get_message(32), per message':30s} {rate / 1e6:6.3f} M/s  {1e9 / rate:7.0f} ns/msg   "
                f"{rate / limit:.4f} of dict loop"
            )
            print(f"{'dict lookup loop':30s} {limit / 1e6:6.3f} M/s")
        finally:
            store.close()
    finally:
        shutil.rmtree(directory)
    print(f"load average after {os.getloadavg()}")


if __name__ == "__main__":
    main()
