"""``rocketstore quickstart``: the first run of a new user, on an embedded default store."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from typing import Any

import rocketstore
from rocketstore._impl import describe
from rocketstore.cli._common import (
    EXIT_OK,
    PULL_BATCH,
    CliError,
    _check_store_dir,
    _future_status,
    _store_path,
)
from rocketstore.cli._output import Progress, _human_bytes, _n
from rocketstore.services.report import disk_usage
from rocketstore.store import MessageStore

# ---------------------------------------------------------------------------------------------
# quickstart


def _rate(n: int, seconds: float, unit: str = "msg/s") -> str:
    return f"{n / seconds / 1e6:6.2f} M {unit}" if seconds > 0 else "n/a"


class _Phase:
    """One timed step of the quickstart, with its progress bar (erased before its line prints)."""

    def __init__(self, label: str, total: int, unit: str = "msgs"):
        self.bar = Progress(label, unit=unit)
        self.total = total
        self.seconds = 0.0

    def update(self, done: int) -> None:
        self.bar.update(done, self.total)

    def __enter__(self) -> _Phase:
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self._t0
        self.bar.close()


#: Messages of each kind the quickstart writes by default: 3.1 x this many in all (~85 MB of
#: records, ~150 MB on disk with the index and queue files).
DEFAULT_COUNT = 100_000


def _created_by_us(path: str) -> bool:
    """Whether ``path`` is missing or an empty directory: a store the quickstart creates there
    is its own, and ``--cleanup`` may delete it."""
    try:
        return not os.listdir(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False


def quickstart(  # noqa: C901 (a script of timed steps, read top to bottom)
    store_path: str,
    count: int = DEFAULT_COUNT,
    body_size: int = 128,
    out=None,
    *,
    as_json: bool = False,
    cleanup: bool = False,
) -> int:
    """The README's main job, timed step by step: put ``count`` messages one per call, as many
    again with tags and keys, as many in batches and a tenth durably (3.1 x ``count`` in all);
    consume the tagged ones with ``get_message`` (committing the group's offsets); look them up
    by key; scan and read. Prints a line per step, or one JSON object (``as_json``), and what it
    left on disk. ``cleanup``: delete the store afterwards if this run created it."""
    import numpy as np

    out = sys.stdout if out is None else out
    ours = _created_by_us(store_path)
    steps: list[dict] = []

    def say(
        label: str,
        amount: str,
        rate: str,
        note: str = "",
        *,
        n: int = 0,
        seconds: float = 0.0,
        unit: str = "msg/s",
    ) -> None:
        steps.append(
            {
                "step": label,
                "count": n,
                "seconds": round(seconds, 6),
                "rate_per_s": round(n / seconds) if seconds > 0 else None,
                "unit": unit,
                **({"note": note} if note else {}),
            }
        )
        if not as_json:
            out.write(f"{label:<32}{amount:>22}  {rate}{'  (' + note + ')' if note else ''}\n")
            out.flush()

    if not as_json:
        out.write(
            f"rocketstore {rocketstore.__version__} ({describe(rocketstore.IMPLEMENTATION)}), "
            f"store {store_path}\n"
        )
    body = os.urandom(body_size)
    topic, group = "QuickStart", "QuickStartGroup"
    run = format(int(time.time() * 1000), "x")  # keys unique to this run
    step = 10_000
    sized = f"{count:,} x {body_size} B"
    with MessageStore(store_path) as store:
        start_offset = store.max_offset
        put = store.put
        with _Phase("put", count) as phase:
            for chunk in range(0, count, step):
                for _ in range(min(step, count - chunk)):
                    put(topic, body)
                phase.update(min(count, chunk + step))
        say("put, one per call", sized, _rate(count, phase.seconds), n=count, seconds=phase.seconds)

        tagged_from = {qid: hi for (t, qid), (_lo, hi) in store.queues().items() if t == topic}
        with _Phase("put", count) as phase:
            first = put(topic, body, tags="TagA", keys=f"order-{run}-0")
            for chunk in range(1, count, step):
                for i in range(chunk, min(count, chunk + step)):
                    put(topic, body, tags="TagA", keys=f"order-{run}-{i}")
                phase.update(min(count, chunk + step))
        say("put, tags + keys", sized, _rate(count, phase.seconds), n=count, seconds=phase.seconds)
        tagged_to = {qid: hi for (t, qid), (_lo, hi) in store.queues().items() if t == topic}

        with _Phase("put_batch", count) as phase:
            for i in range(0, count, step):
                store.put_batch(topic, [body] * min(step, count - i))
                phase.update(min(count, i + step))
        say("put_batch, 10,000 a call", sized, _rate(count, phase.seconds), n=count, seconds=phase.seconds)

        durable_count = max(1, count // 10)
        with _Phase("durable", durable_count) as phase:
            futures: list[Any] = []
            for i in range(0, durable_count, step):
                futures.extend(store.put_pipelined(topic, body) for _ in range(min(step, durable_count - i)))
                phase.update(len(futures))
            statuses = sorted({_future_status(f) for f in futures})
        del futures
        say(
            "put_pipelined, durable",
            f"{durable_count:,} x {body_size} B",
            _rate(durable_count, phase.seconds),
            ", ".join(statuses),
            n=durable_count,
            seconds=phase.seconds,
        )

        with _Phase("consume", count) as phase:
            consumed = 0
            for qid, hi in tagged_to.items():
                offset = tagged_from.get(qid, 0)
                while offset < hi:
                    # no further than the tagged messages: untagged ones after them would be
                    # skipped by the filter, and committed as consumed
                    res = store.get_message(
                        group, topic, qid, offset, max_msgs=min(PULL_BATCH, hi - offset), tags="TagA"
                    )
                    if res.next_begin_offset <= offset:
                        break
                    consumed += len(res.messages)
                    offset = res.next_begin_offset
                    if consumed % 8192 < PULL_BATCH:
                        phase.update(consumed)
                store.commit_offset(group, topic, qid, offset)
        store.persist_offsets()
        if consumed != count:
            raise CliError(f"quickstart consumed {consumed:,} messages, expected {count:,}")
        say(
            "consume, get_message 32/pull",
            f"{consumed:,} messages",
            _rate(consumed, phase.seconds),
            f"{_n(len(tagged_to), 'queue')}, offsets committed",
            n=consumed,
            seconds=phase.seconds,
        )

        rng = np.random.default_rng(0)
        sample = rng.integers(0, count, size=min(count, 100_000)).tolist()
        with _Phase("query", len(sample), "keys") as phase:
            for n, i in enumerate(sample, 1):
                if not store.query_by_key(topic, f"order-{run}-{i}"):
                    raise CliError(f"quickstart: key order-{run}-{i} not found")
                if n % 4096 == 0:
                    phase.update(n)
        say(
            "query_by_key",
            f"{len(sample):,} random keys",
            _rate(len(sample), phase.seconds, "keys/s"),
            n=len(sample),
            seconds=phase.seconds,
            unit="keys/s",
        )

        with _Phase("scan", store.max_offset - start_offset, "bytes") as phase:
            seen = 0
            offsets = []
            for seg_start, records in store.scan(start_offset):
                seen += len(records)
                offsets.append(records["position"] + seg_start)
                phase.update(seg_start + int(records["position"][-1]) - start_offset)
        say("scan (columnar)", f"{seen:,} records", _rate(seen, phase.seconds), n=seen, seconds=phase.seconds)

        picks = rng.choice(np.concatenate(offsets), size=min(seen, 100_000)).tolist()
        del offsets
        with _Phase("read", len(picks)) as phase:
            for n, off in enumerate(picks, 1):
                store.read(off)
                if n % 4096 == 0:
                    phase.update(n)
        say(
            "read by offset",
            f"{len(picks):,} random",
            _rate(len(picks), phase.seconds),
            n=len(picks),
            seconds=phase.seconds,
        )

        msg = store.get_by_msg_id(first.msg_id)
        assert bytes(msg.body) == body and msg.tags == "TagA" and msg.keys == f"order-{run}-0"
        assert (
            store.query_by_unique_key(topic, str(first.unique_key)).commitlog_offset == first.commitlog_offset
        )
        stats = store.stats()
        written = store.max_offset - start_offset
        messages = 3 * count + durable_count
    disk = disk_usage(store_path)
    removed = False
    if cleanup and ours:
        shutil.rmtree(store_path)
        removed = True
    if as_json:
        out.write(
            json.dumps(
                {
                    "version": rocketstore.__version__,
                    "implementation": rocketstore.IMPLEMENTATION,
                    "store": store_path,
                    "messages_written": messages,
                    "bytes_written": written,
                    "disk_bytes": disk,
                    "removed": removed,
                    "steps": steps,
                    "first_tagged_message": {
                        "msg_id": first.msg_id,
                        "queue_id": first.queue_id,
                        "queue_offset": first.queue_offset,
                    },
                    "flush_rounds": stats["flush_rounds"],
                    "durable_waits": stats["sync_requests"],
                }
            )
            + "\n"
        )
        return EXIT_OK
    out.write(
        f"first tagged message: msg_id {first.msg_id} (queue {first.queue_id}, offset {first.queue_offset})\n"
    )
    out.write(
        f"store: {_n(stats['segments'], 'segment')}, {stats['flush_rounds']:,} flush rounds for "
        f"{stats['sync_requests']:,} durable waits\n"
    )
    if removed:
        out.write(
            f"wrote {messages:,} messages ({_human_bytes(written)}); removed {store_path} (--cleanup)\n"
        )
    else:
        how = (
            f"remove it: rm -rf {store_path}"
            if ours
            else "it held data before this run, so the quickstart's messages stay there with it"
        )
        out.write(
            f"wrote {messages:,} messages ({_human_bytes(written)}); {_human_bytes(disk)} on disk in "
            f"{store_path} (explore it: rocketstore --store {store_path} stats; {how})\n"
        )
    return EXIT_OK


def cmd_quickstart(args) -> int:
    path = _store_path(args)
    _check_store_dir(path, may_create=True)
    return quickstart(path, args.count, args.body_size, as_json=args.json, cleanup=args.cleanup)
