"""``python -m rocketstore`` / ``rocketstore``: the command line.

Commands so far: ``quickstart`` (the README's main job) and ``info``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import rocketstore
from rocketstore.config import default_store_path


def _rate(n: int, seconds: float) -> str:
    return f"{n / seconds / 1e6:6.2f} M msg/s" if seconds > 0 else "n/a"


def quickstart(store_path: str, count: int, body_size: int, out=sys.stdout) -> int:
    """Write and read ``count`` messages in the store at ``store_path`` and print the rates."""
    print(f"rocketstore {rocketstore.__version__} ({rocketstore.IMPLEMENTATION} implementation)", file=out)
    print(f"store: {store_path}", file=out)
    body = os.urandom(body_size)
    topic = "QuickStart"
    with rocketstore.MessageStore(store_path) as store:
        start_offset = store.max_offset
        put = store.put
        t0 = time.perf_counter()
        first = put(topic, body, tags="TagA", keys="order-0")
        for _ in range(count - 1):
            put(topic, body)
        single = time.perf_counter() - t0
        print(f"put, one per call      {count:>9,} x {body_size} B  {_rate(count, single)}", file=out)

        t0 = time.perf_counter()
        batch_size = 10_000
        for i in range(0, count, batch_size):
            store.put_batch(topic, [body] * min(batch_size, count - i))
        batch = time.perf_counter() - t0
        print(f"put_batch (10k a call) {count:>9,} x {body_size} B  {_rate(count, batch)}", file=out)

        durable_count = max(1, count // 10)
        t0 = time.perf_counter()
        futures = [store.put_pipelined(topic, body) for _ in range(durable_count)]
        statuses = {f.result().status for f in futures}
        durable = time.perf_counter() - t0
        print(f"durable, pipelined     {durable_count:>9,} x {body_size} B  {_rate(durable_count, durable)}"
              f"  ({', '.join(s.name for s in statuses)})", file=out)

        t0 = time.perf_counter()
        seen = 0
        offsets = []
        for _, records in store.scan(start_offset):
            seen += len(records)
            offsets.append(records["physical_offset"])
        scan = time.perf_counter() - t0
        print(f"scan (columnar)        {seen:>9,} records      {_rate(seen, scan)}", file=out)

        import numpy as np
        rng = np.random.default_rng(0)
        sample = rng.choice(np.concatenate(offsets), size=min(seen, 100_000)).tolist()
        t0 = time.perf_counter()
        for off in sample:
            store.read(off)
        reads = time.perf_counter() - t0
        print(f"read by offset         {len(sample):>9,} random      {_rate(len(sample), reads)}", file=out)

        msg = store.get_by_msg_id(first.msg_id)
        assert bytes(msg.body) == body and msg.tags == "TagA" and msg.keys == "order-0"
        print(f"first message: msg_id={first.msg_id} unique_key={first.unique_key} "
              f"queue {first.queue_id} offset {first.queue_offset}", file=out)
        stats = store.stats()
        print(f"store: {stats['segments']} segment(s), {stats['max_offset'] - stats['min_offset']:,} bytes, "
              f"{stats['flush_rounds']:,} flush rounds for {stats['sync_requests']:,} durable waits", file=out)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="rocketstore", description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=None,
                        help="store directory (default: $ROCKETSTORE_HOME, else ~/store)")
    sub = parser.add_subparsers(dest="command", required=True)
    qs = sub.add_parser("quickstart", help="write and read a million messages, print the rates")
    qs.add_argument("--count", type=int, default=1_000_000)
    qs.add_argument("--body-size", type=int, default=128)
    sub.add_parser("info", help="print the store's stats")
    args = parser.parse_args(argv)
    store_path = args.store or default_store_path()
    try:
        if args.command == "quickstart":
            if args.count < 1 or args.body_size < 0:
                parser.error("--count must be >= 1 and --body-size >= 0")
            return quickstart(store_path, args.count, args.body_size)
        if args.command == "info":
            with rocketstore.MessageStore(store_path, read_only=True) as store:
                for key, value in store.stats().items():
                    print(f"{key}: {value}")
            return 0
    except rocketstore.RocketStoreError as exc:
        print(f"rocketstore: error: {exc}", file=sys.stderr)
        return 1
    except FileNotFoundError as exc:
        print(f"rocketstore: error: {exc}", file=sys.stderr)
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
