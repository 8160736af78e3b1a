"""The cost of a retention pass over a store of 10,000 CommitLog segments.

    pip install . && python bench/retention.py [--segments 10000] [--impl py] [--json out.json]

Builds a store of ``--segments`` tiny segments (4 KiB, ~18 records each, 8 topics x 4 queues,
two consumer groups) in ``--dir`` (removed afterwards unless ``--keep``), then times, with the
clock, hour and disk injected (nothing sleeps):

* ``legacy, not the hour``: RocketMQ 4.x's rule, no policy set, a pass outside ``delete_when``
  (the baseline: a disk check and nothing else);
* ``legacy, at the hour, nothing expired``: the same at the hour, the oldest segment too young;
* ``legacy, at the hour, deleting a batch``: every segment expired, each pass deleting
  ``delete_files_batch_max`` (10) segments and the queue and index files below them: the
  baseline of the next-but-one line;
* ``policies, held by a group``: every topic ``delete_when_consumed`` + ``retention_ms=0``, one
  group behind in the oldest segment: the pass dispatches, looks and deletes nothing;
* ``policies, deleting a batch``: a size cap on every topic that wants the oldest segments gone,
  each pass deleting ``delete_files_batch_max`` (10) segments, the queue and index files
  following;
* ``decide all segments``: :meth:`RetentionView.walk` over every segment but the last, all of
  which may go (consumed by both groups, old enough): the decision cost of a pass over 10,000
  segments, without unlinking any;
* ``report``: ``MessageStore.retention_report()`` (what ``stats()`` adds).

Each figure is the median of ``--repeat`` runs, in milliseconds, printed beside the baseline of
the same run.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import resource
import shutil
import statistics
import tempfile
import time

import buildinfo

buildinfo.require("bench/retention.py")

from rocketstore import MessageStore  # noqa: E402
from rocketstore.services.retention import Cleaner  # noqa: E402

SEGMENT = 4096
TOPICS = [f"BenchTopic{i}" for i in range(8)]
QUEUES = 4
HOUR_MS = 3_600_000


def build(path: str, segments: int, impl: str) -> MessageStore:
    store = MessageStore(
        path,
        implementation=impl,
        commitlog_file_size=SEGMENT,
        consume_queue_units=4096,
        index_slots=65_536,
        index_count=262_144,
        default_queues=QUEUES,
        clean_resource_interval_ms=0,
        prefault_bytes=0,
        store_host="10.0.0.7",
    )
    body = b"x" * 120
    i = 0
    while len(store._opened.segments.files) < segments + 1:
        batch = [(TOPICS[(i + k) % len(TOPICS)], body) for k in range(1000)]
        for topic, b in batch:
            store.put(topic, b, keys=f"k{i}")
            i += 1
    store.queues()  # dispatched
    return store


def timed(fn, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--segments", type=int, default=10_000)
    ap.add_argument("--impl", default=None, help="c or py (default: compiled when built)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where to build the store (default: a temp dir)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    # A store keeps one descriptor per sealed segment (its map's; two on macOS, whose flush
    # needs the file too) and opens raise the soft limit to the hard one: 10,000 segments need
    # ~10,600, more than the usual soft limit of 1,024 and than some hard limits.
    per_segment = 2 if hasattr(fcntl, "F_FULLFSYNC") else 1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.segments * per_segment + 600
    if hard != resource.RLIM_INFINITY and hard < want:
        fit = (hard - 600) // per_segment // 100 * 100
        print(
            f"NOTE: {args.segments:,} segments need ~{want:,} open files; this machine's hard limit is "
            f"{hard:,}: measuring {fit:,} segments instead"
        )
        args.segments = fit
    print(buildinfo.header())
    print(f"load average {os.getloadavg()[0]:.2f}")
    root = args.dir or tempfile.mkdtemp(prefix="rocketstore-bench-retention-")
    path = os.path.join(root, "store")
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    try:
        store = build(path, args.segments, args.impl)
    except BaseException:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        raise
    files = store._opened.segments.files
    messages = sum(hi - lo for lo, hi in store.queues().values())
    print(
        f"store: {len(files):,} segments of {SEGMENT} B, {messages:,} messages in {len(TOPICS)} topics x "
        f"{QUEUES} queues, built in {time.perf_counter() - t0:.1f} s"
    )
    try:
        now = int(time.time() * 1000) + HOUR_MS

        cleaners = {
            hour: Cleaner(
                store._opened.parts,
                clock=lambda: now,
                disk_usage=lambda p: 0.5,
                local_hour=lambda ms, h=hour: h,
            )
            for hour in (4, 5)
        }
        for c in cleaners.values():
            c.run_once()  # a cleaner's first pass also corrects every queue's min offset

        def cleaner(hour: int) -> Cleaner:
            return cleaners[hour]

        out["legacy, not the hour"], r = timed(lambda: cleaner(5).run_once(), args.repeat)
        assert r["commitlog"] == [], r
        out["legacy, at the hour, nothing expired"], r = timed(lambda: cleaner(4).run_once(), args.repeat)
        assert r["commitlog"] == [], r

        def set_age(hours: float) -> None:
            when = (now - hours * HOUR_MS) / 1000
            for mf in store._opened.segments.files:
                os.utime(mf.path, (when, when))

        set_age(100)  # every segment expired under RocketMQ's rule
        before = store.min_offset
        out["legacy, at the hour, deleting a batch"], r = timed(lambda: cleaner(4).run_once(), args.repeat)
        assert len(r["commitlog"]) == store.config.delete_files_batch_max, r["commitlog"]
        print(f"the legacy passes deleted {(store.min_offset - before) // SEGMENT} segments")
        set_age(0)

        for topic in TOPICS:
            store.set_topic_retention(topic, retention_ms=0, delete_when_consumed=True)
        for topic in TOPICS:
            for q in range(QUEUES):
                store.commit_offset("G1", topic, q, store.max_queue_offset(topic, q))
                store.commit_offset("G2", topic, q, store.max_queue_offset(topic, q))
        store.commit_offset("G2", TOPICS[3], 2, 0)  # behind in the oldest segment
        out["policies, held by a group"], r = timed(lambda: cleaner(5).run_once(), args.repeat)
        assert r["commitlog"] == [] and r["held"] is not None, r
        store.commit_offset("G2", TOPICS[3], 2, store.max_queue_offset(TOPICS[3], 2))

        view = cleaner(5).view()
        candidates = list(store._opened.segments.files)[:-1]
        out["decide all segments"], (doomed, held) = timed(
            lambda: cleaner(5).view().walk(candidates, scheduled=False), args.repeat
        )
        assert len(doomed) == len(candidates) and held is None, (len(doomed), held)
        del view

        out["report"], _ = timed(store.retention_report, args.repeat)

        for topic in TOPICS:  # a size cap that wants ~100 segments gone: 10 a pass
            store.set_topic_retention(topic, retention_ms=-1, delete_when_consumed=False)
            total = sum(_queue_bytes(store, topic, q) for q in range(QUEUES))
            store.set_topic_retention(topic, retention_bytes=total - 100 * SEGMENT // len(TOPICS))
        before = store.min_offset
        out["policies, deleting a batch"], r = timed(lambda: cleaner(5).run_once(), args.repeat)
        assert len(r["commitlog"]) == store.config.delete_files_batch_max, r["commitlog"]
        deleted = (store.min_offset - before) // SEGMENT
        print(
            f"the size-cap passes deleted {deleted} segments ({store.config.delete_files_batch_max} a pass)"
        )
    finally:
        store.close()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    print(
        f"\none pass over {args.segments:,} segments, median of {args.repeat} (ms; the legacy lines are the baselines):"
    )
    for name, ms in out.items():
        extra = f"   ({ms * 1000 / args.segments:.1f} us a segment)" if name == "decide all segments" else ""
        print(f"  {name:<40} {ms:10.2f} ms{extra}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"segments": args.segments, "build": buildinfo.describe(), "ms": out}, f, indent=2)


def _queue_bytes(store: MessageStore, topic: str, queue_id: int) -> int:
    offset, end, total = store.min_queue_offset(topic, queue_id), store.max_queue_offset(topic, queue_id), 0
    while offset < end:
        units = store.queue_units(topic, queue_id, offset, end - offset)
        total += int(units["size"].sum())
        offset += len(units)
    return total


if __name__ == "__main__":
    main()
