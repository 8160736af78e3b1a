"""One-run report for the ConsumeQueue / index layer: dispatch cost, consuming, lookups.

    pip install ".[bench]" && python bench/queues.py [--quick] [--impl c|py] [--json out.json] [--dir DIR]

It measures the installed rocketstore (never ``src/``; without an install it exits saying so);
the first line names the build (compiled or pure Python) and its CRC-32 path.

Measured in this one run on a fresh store of ``N`` messages (128-byte bodies, a 20-character
key, tags alternating TagA/TagB, 4 queues), with ``dispatch_interval_ms`` as stated per row:

* put, core alone: ``put()`` per message with the background dispatcher off and nothing querying
  (the CommitLog append only); then ``dispatch``: the time one catch-up takes to carry those N
  records into the ConsumeQueues and the index (what dispatch costs per message).
* put, dispatch on: the same puts with the background dispatcher running beside them (default
  store), timed until the last put returned *and* the dispatcher caught up.
* get_message (objects): every message pulled through ``get_message`` 32 at a time, as
  :class:`MessageExt` objects, warm page cache.
* queue units (numpy): every unit read through ``queue_units`` views (zero-copy), and the
  CommitLog offsets summed, so the data is touched.
* lookups by key: ``query_by_key`` for random existing keys (each re-checks the record) and the
  index alone (``IndexService.query``), both through the on-disk index files.
* baseline: a dict lookup loop over the same keys, in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time

import buildinfo

buildinfo.require("bench/queues.py")

from rocketstore import MessageStore, _impl  # noqa: E402

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))

TOPIC = "BenchTopic"
BODY = bytes(range(128))
GOAL_LOOKUPS = 1_000_000
GOAL_GET_OBJECTS = 3_000_000
GOAL_GET_BATCH = 10_000_000


def log(*parts) -> None:
    print(*parts, file=sys.stderr, flush=True)


def _keys(n: int) -> list[str]:
    return [f"order-{i:014d}" for i in range(n)]  # 20 characters


def _open(path: str, impl: str, **options) -> MessageStore:
    return MessageStore(path, implementation=impl, commitlog_file_size=256 << 20, **options)


def _put_all(store: MessageStore, keys: list[str]) -> None:
    """One put per key: a 128-byte body, tags alternating TagB/TagA, the key as KEYS."""
    put = store.put
    for i, key in enumerate(keys):
        put(TOPIC, BODY, tags="TagA" if i & 1 else "TagB", keys=key)


def put_core_then_dispatch(root: str, impl: str, n: int) -> dict:
    path = os.path.join(root, "core")
    keys = _keys(n)
    with _open(path, impl, dispatch_interval_ms=0) as store:
        t0 = time.perf_counter()
        _put_all(store, keys)
        t1 = time.perf_counter()
        store._opened.dispatcher.catch_up()
        t2 = time.perf_counter()
    shutil.rmtree(path)
    return {
        "messages": n,
        "put_s": t1 - t0,
        "put_rate": n / (t1 - t0),
        "dispatch_s": t2 - t1,
        "dispatch_rate": n / (t2 - t1),
        "put_plus_dispatch_rate": n / (t2 - t0),
    }


def put_with_dispatch(root: str, impl: str, n: int) -> dict:
    path = os.path.join(root, "on")
    keys = _keys(n)
    store = _open(path, impl)
    t0 = time.perf_counter()
    _put_all(store, keys)
    t1 = time.perf_counter()
    store._opened.dispatcher.catch_up()
    t2 = time.perf_counter()
    return {
        "messages": n,
        "put_rate": n / (t1 - t0),
        "caught_up_rate": n / (t2 - t0),
        "store": store,
        "keys": keys,
    }


def get_objects(store: MessageStore) -> dict:
    total = 0
    t0 = time.perf_counter()
    for qid in range(4):
        offset = 0
        while True:
            r = store.get_message("bench", TOPIC, qid, offset, 32)
            if not r.messages:
                break
            total += len(r.messages)
            offset = r.next_begin_offset
    dt = time.perf_counter() - t0
    return {"messages": total, "rate": total / dt}


def get_units(store: MessageStore) -> dict:
    total = 0
    checksum = 0
    t0 = time.perf_counter()
    for qid in range(4):
        offset = 0
        while True:
            view = store.queue_units(TOPIC, qid, offset, 1 << 20)
            if not len(view):
                break
            checksum += int(view["commitlog_offset"].sum())
            total += len(view)
            offset += len(view)
    dt = time.perf_counter() - t0
    return {"units": total, "rate": total / dt, "checksum": checksum}


def lookups(store: MessageStore, keys: list[str], count: int) -> dict:
    rng = random.Random(7)
    sample = [rng.choice(keys) for _ in range(count)]
    t0 = time.perf_counter()
    found = 0
    for k in sample:
        found += len(store.query_by_key(TOPIC, k, 1))
    t1 = time.perf_counter()
    index = store._opened.index
    for k in sample:
        index.query(TOPIC, k, 1)
    t_index = time.perf_counter()
    table = {k: i for i, k in enumerate(keys)}
    t2 = time.perf_counter()
    for k in sample:
        table.get(k)
    t3 = time.perf_counter()
    return {
        "lookups": count,
        "found": found,
        "store_rate": count / (t1 - t0),
        "index_rate": count / (t_index - t1),
        "dict_rate": count / (t3 - t2),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--impl", default=None, choices=("c", "py"))
    ap.add_argument("--json")
    ap.add_argument("--dir", default=None)
    args = ap.parse_args(argv)
    impl = _impl.get(args.impl).name
    n = (100_000 if args.quick else 1_000_000) // (10 if impl == "py" else 1)
    n_lookups = (20_000 if args.quick else 100_000) // (10 if impl == "py" else 1)
    root = tempfile.mkdtemp(prefix="queues-", dir=args.dir or BENCH_DIR)
    try:
        log(f"put, core alone, then dispatch ({n:,} messages, impl {impl})")
        core = put_core_then_dispatch(root, impl, n)
        log("put with the background dispatcher on")
        on = put_with_dispatch(root, impl, n)
        store, keys = on.pop("store"), on.pop("keys")
        try:
            log("get_message")
            get_objects(store)  # warm the page cache and code paths once
            objects = get_objects(store)
            log("queue_units")
            units = get_units(store)
            log("lookups")
            look = lookups(store, keys, n_lookups)
        finally:
            store.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {
        "impl": impl,
        "build": buildinfo.describe(),
        "loadavg": os.getloadavg(),
        "core_then_dispatch": core,
        "dispatch_on": on,
        "get_objects": objects,
        "queue_units": units,
        "lookups": look,
    }
    m = lambda r: f"{r / 1e6:.2f} M/s"  # noqa: E731
    rows = [
        ("put, core alone (dispatcher off)", m(core["put_rate"]), ""),
        ("dispatch of those records (one catch-up)", m(core["dispatch_rate"]), ""),
        (
            "put + dispatch, serial",
            m(core["put_plus_dispatch_rate"]),
            f"{core['put_plus_dispatch_rate'] / core['put_rate']:.2f} x core alone",
        ),
        (
            "put, background dispatcher on",
            m(on["put_rate"]),
            f"{on['put_rate'] / core['put_rate']:.2f} x core alone",
        ),
        (
            "put, dispatcher on, until caught up",
            m(on["caught_up_rate"]),
            f"{on['caught_up_rate'] / core['put_rate']:.2f} x core alone",
        ),
        (
            "get_message, MessageExt objects",
            m(objects["rate"]),
            f"goal {GOAL_GET_OBJECTS / 1e6:.0f} M/s: {'PASS' if objects['rate'] >= GOAL_GET_OBJECTS else 'SHORT'}",
        ),
        (
            "queue_units, numpy views",
            m(units["rate"]),
            f"goal {GOAL_GET_BATCH / 1e6:.0f} M/s: {'PASS' if units['rate'] >= GOAL_GET_BATCH else 'SHORT'}",
        ),
        (
            "query_by_key (index + record re-check)",
            m(look["store_rate"]),
            f"goal {GOAL_LOOKUPS / 1e6:.0f} M/s: {'PASS' if look['store_rate'] >= GOAL_LOOKUPS else 'SHORT'}",
        ),
        ("index alone (IndexService.query)", m(look["index_rate"]), ""),
        (
            "baseline: dict lookup loop",
            m(look["dict_rate"]),
            f"store lookup = {look['store_rate'] / look['dict_rate']:.3f} x dict",
        ),
    ]
    load = os.getloadavg()
    print(buildinfo.header() + f"; measured twin [{impl}]")
    print(f"load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1/5/15 min, after the run)")
    print()
    print(f"| {n:,} messages, impl {impl} | rate | note |")
    print("|---|---:|---|")
    for what, rate, note in rows:
        print(f"| {what} | {rate} | {note} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
