"""The consumer's loop and random point reads, against LMDB in the same run.

    python bench/consumer.py [--messages N] [--passes P] [--impl c|py] [--dir DIR]

One store of ``N`` messages (128-byte bodies, 4 queues, put in batches, dispatched), and an LMDB
environment with the same bodies under 8-byte big-endian sequence keys. Rows, each the best of
``--passes`` passes, in messages (or calls) per second of this thread's CPU time
(``time.thread_time``: other tenants of a shared machine taking turns on the cores do not count;
LMDB's reads run in this thread too):

* consume + commit: every queue through ``get_message(group, topic, qid, offset, 32)`` and a
  ``commit_offset`` after each pull (the consumer's loop);
* consume: the same pulls without the commit;
* commit_offset alone (calls per second);
* get_by_queue_offset, random: 100,000 random (queue, queue offset) positions;
* lmdb cursor: every body through a cursor over the log, in a read transaction;
* lmdb get, random: the same number of random gets by sequence, in one read transaction.

The load average is printed before and after; compare two builds by running this script under
each alternately, and read ratios, not absolute figures.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import struct
import tempfile
import time

from rocketstore import MessageStore

TOPIC = "ConsumerBench"
QUEUES = 4
BODY = bytes(range(128))
RANDOM = 100_000
_SEQ = struct.Struct(">Q").pack


def best(run, passes):
    """(count, seconds) of the fastest of ``passes`` runs of ``run()`` (which returns a count)."""
    fastest, count = float("inf"), 0
    for _ in range(passes):
        start = time.thread_time()
        count = run()
        fastest = min(fastest, time.thread_time() - start)
    return count, fastest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=400_000)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--impl", default=None, choices=(None, "c", "py"))
    ap.add_argument("--dir", default=None)
    ap.add_argument("--seed", type=int, default=17)
    args = ap.parse_args(argv)
    n = args.messages
    rng = random.Random(args.seed)
    print(f"load average before {os.getloadavg()[0]:.2f}; {n:,} messages in {QUEUES} queues")
    root = tempfile.mkdtemp(prefix="rocketstore-bench-consumer-", dir=args.dir)
    rows = {}
    try:
        with MessageStore(os.path.join(root, "store"), implementation=args.impl) as store:
            store.create_topic(TOPIC, QUEUES)
            step = 4096
            for first in range(0, n, step):
                store.put_batch(TOPIC, [BODY] * min(step, n - first), queue_id=(first // step) % QUEUES)
            store.queues()
            get_message, commit_offset = store.get_message, store.commit_offset

            def consume_commit():
                done = 0
                for qid in range(QUEUES):
                    offset = 0
                    while True:
                        result = get_message("bench", TOPIC, qid, offset, 32)
                        got = len(result.messages)
                        if not got:
                            break
                        done += got
                        offset = result.next_begin_offset
                        commit_offset("bench", TOPIC, qid, offset)
                return done

            def consume():
                done = 0
                for qid in range(QUEUES):
                    offset = 0
                    while True:
                        result = get_message("bench", TOPIC, qid, offset, 32)
                        got = len(result.messages)
                        if not got:
                            break
                        done += got
                        offset = result.next_begin_offset
                return done

            def commits():
                for i in range(RANDOM):
                    commit_offset("bench", TOPIC, 1, i)
                return RANDOM

            highs = [store.max_queue_offset(TOPIC, q) for q in range(QUEUES)]
            positions = []
            for _ in range(RANDOM):
                q = rng.randrange(QUEUES)
                positions.append((q, rng.randrange(highs[q])))
            by_queue = store.get_by_queue_offset

            def random_reads():
                for q, o in positions:
                    by_queue(TOPIC, q, o)
                return RANDOM

            rows["consume + commit (msgs)"] = best(consume_commit, args.passes)
            rows["consume (msgs)"] = best(consume, args.passes)
            rows["commit_offset (calls)"] = best(commits, args.passes)
            rows["get_by_queue_offset random"] = best(random_reads, args.passes)
        try:
            import lmdb
        except ImportError:
            lmdb = None
        if lmdb is not None:
            env = lmdb.open(os.path.join(root, "lmdb"), map_size=1 << 32, max_dbs=2, sync=False)
            log = env.open_db(b"log")
            with env.begin(write=True) as txn:
                txn.cursor(db=log).putmulti(((_SEQ(i), BODY) for i in range(n)), append=True)
            seqs = [_SEQ(rng.randrange(n)) for _ in range(RANDOM)]

            def cursor():
                done = 0
                with env.begin() as txn:
                    for _ in txn.cursor(db=log).iternext(keys=False, values=True):
                        done += 1
                return done

            def gets():
                with env.begin() as txn:
                    get = txn.get
                    for s in seqs:
                        get(s, db=log)
                return RANDOM

            rows["lmdb cursor"] = best(cursor, args.passes)
            rows["lmdb get random"] = best(gets, args.passes)
            env.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for name, (count, seconds) in rows.items():
        print(f"{name:32s} {count / seconds / 1e6:8.3f} M/s")
    if "lmdb cursor" in rows:
        rate = {k: c / s for k, (c, s) in rows.items()}
        print(
            f"consume + commit / lmdb cursor   {rate['consume + commit (msgs)'] / rate['lmdb cursor']:8.3f}x"
        )
        print(
            f"random / lmdb get                {rate['get_by_queue_offset random'] / rate['lmdb get random']:8.3f}x"
        )
    print(f"load average after {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
