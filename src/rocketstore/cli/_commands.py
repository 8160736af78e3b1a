"""The commands that look up, consume and look after a store (put, the four lookups, consume, stats, verify, recover, dump)."""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Iterator
from typing import Optional

from rocketstore._impl import describe
from rocketstore.cli._common import (
    DUMP_PROGRESS_BYTES,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    PULL_BATCH,
    CliError,
    _check_queue_offset,
    _error,
    _queue_bounds,
    _queue_ids,
    _require_topic,
    _topics_of,
    open_store,
)
from rocketstore.cli._output import (
    MessageOutput,
    Progress,
    Table,
    _human_bytes,
    _is_terminal,
    _n,
    _print_fields,
    _print_json,
    _print_message,
    _printable,
)
from rocketstore.consume import Consumer, GetMessageStatus
from rocketstore.errors import (
    FlushTimeoutError,
    InvalidMessageIdError,
    MessageNotFoundError,
)
from rocketstore.message import MessageExt
from rocketstore.store import MessageStore

# ---------------------------------------------------------------------------------------------
# Commands


def cmd_put(args) -> int:
    if args.body == "-":
        body = sys.stdin.buffer.read()
    else:
        body = os.fsencode(args.body)  # the argument's bytes as given, UTF-8 or not
    properties = {}
    for item in args.property or ():
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CliError(f"--property {item!r}: expected KEY=VALUE", EXIT_USAGE)
        properties[name] = value
    with open_store(args, writable=True, create=True) as store:
        queue_id = args.queue
        if queue_id is None:
            # each run is a new producer: start at a random queue, as RocketMQ's producer does,
            # rather than always at queue 0
            queue_id = random.randrange(store.topics.get(args.topic) or store.config.default_queues)
        flush_failed = None
        try:
            result = store.put(
                args.topic,
                body,
                tags=args.tags,
                keys=args.keys,
                properties=properties or None,
                queue_id=queue_id,
                durable=True if args.sync else None,
            )
        except FlushTimeoutError as exc:  # stored, but not confirmed durable: say where
            result, flush_failed = exc.result, exc
        fields = {
            "status": result.status.name,
            "msg_id": result.msg_id,
            "unique_key": result.unique_key,
            "topic": args.topic,
            "queue_id": result.queue_id,
            "queue_offset": result.queue_offset,
            "commitlog_offset": result.commitlog_offset,
            "size": result.size,
            "store_timestamp": result.store_timestamp,
        }
    if args.json:
        _print_json(fields)
    else:
        _print_fields(
            [
                ("Status", fields["status"]),
                ("Message ID", fields["msg_id"]),
                ("Unique key", fields["unique_key"]),
                ("Topic", fields["topic"]),
                ("Queue", fields["queue_id"]),
                ("Queue offset", fields["queue_offset"]),
                ("CommitLog offset", fields["commitlog_offset"]),
                ("Size", f"{fields['size']:,} bytes"),
            ]
        )
    if flush_failed is not None:
        _error(str(flush_failed))
        return EXIT_ERROR
    return EXIT_OK


def cmd_query_by_key(args) -> int:
    with open_store(args) as store:
        _require_topic(store, args.topic)
        found = store.query_by_key(
            args.topic, args.key, max_num=args.max, begin=args.begin or 0, end=args.end
        )
        if not found:
            raise CliError(f"no message of topic {args.topic!r} with key {args.key!r}")
        out = MessageOutput(args.json)
        for msg in found:
            out.write(msg)
        out.close()
    return EXIT_OK


def cmd_query_by_id(args) -> int:
    with open_store(args) as store:
        try:
            msg: Optional[MessageExt] = store.get_by_msg_id(args.msg_id)
        except InvalidMessageIdError as exc:
            raise CliError(f"bad msgId: {exc}") from None
        except MessageNotFoundError:
            # mqadmin's queryMsgById also takes a client msgId (UNIQ_KEY): same length, same alphabet
            msg = _find_unique_key(store, args.msg_id, [args.topic] if args.topic else _topics_of(store))
            if msg is None:
                raise CliError(
                    f"no message with msgId {args.msg_id} in {store.path} "
                    "(neither an offsetMsgId of this store nor a UNIQ_KEY)"
                ) from None
        assert msg is not None
        _print_message(msg, args.json)
    return EXIT_OK


def _find_unique_key(store: MessageStore, unique_key: str, topics: list[str]) -> Optional[MessageExt]:
    for topic in topics:
        try:
            return store.query_by_unique_key(topic, unique_key)
        except MessageNotFoundError:
            continue
    return None


def cmd_query_by_unique_key(args) -> int:
    with open_store(args) as store:
        _require_topic(store, args.topic)
        try:
            msg = store.query_by_unique_key(args.topic, args.unique_key)
        except MessageNotFoundError:
            raise CliError(f"no message of topic {args.topic!r} with UNIQ_KEY {args.unique_key!r}") from None
        _print_message(msg, args.json)
    return EXIT_OK


def cmd_query_by_offset(args) -> int:
    with open_store(args) as store:
        bounds = _queue_bounds(store, args.topic, args.queue_id)
        _check_queue_offset(args.topic, args.queue_id, args.offset, bounds)
        try:
            msg = store.get_by_queue_offset(args.topic, args.queue_id, args.offset)
        except MessageNotFoundError as exc:
            raise CliError(
                f"queue offset {args.offset} of {args.topic!r} queue {args.queue_id}: {exc}"
            ) from None
        _print_message(msg, args.json)
    return EXIT_OK


_PULL_DONE = (
    GetMessageStatus.OFFSET_OVERFLOW_ONE,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY,
    GetMessageStatus.NO_MESSAGE_IN_QUEUE,
    GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
    GetMessageStatus.OFFSET_FOUND_NULL,
)


def _follow(store, args, ends: dict, remaining: int) -> None:
    """``consume --follow``: print each message as it is put (one batch at a time)."""
    consumer = Consumer(store, args.group, {args.topic: args.tags}, retry=False)
    for qid, offset in ends.items():
        consumer.seek(args.topic, qid, offset)
    while remaining > 0:
        if args.queue is None:
            batch = consumer.poll(min(remaining, PULL_BATCH), timeout=None)
        else:
            key = (args.topic, args.queue)
            res = store.get_message(
                args.group,
                *key,
                consumer.positions.get(key, 0),
                min(remaining, PULL_BATCH),
                args.tags,
                wait=3600,
            )
            batch = res.messages
            consumer.seek(args.topic, args.queue, res.next_begin_offset)
        if not batch:
            continue
        out = MessageOutput(args.json)
        for msg in batch:
            out.write(msg)
        out.close()
        sys.stdout.flush()
        remaining -= len(batch)
        if args.commit:
            for (_, qid), offset in consumer.positions.items():
                store.commit_offset(args.group, args.topic, qid, offset)
            store.persist_offsets()


def cmd_consume(args) -> int:
    with open_store(args, writable=args.commit) as store:
        if args.queue is None:
            queues = _queue_ids(store, args.topic)
        else:
            queues = {args.queue: _queue_bounds(store, args.topic, args.queue)}
        starts = {}
        committed = {qid: store.committed_offset(args.group, args.topic, qid) for qid in queues}
        for qid, bounds in queues.items():
            if args.from_offset is not None:
                _check_queue_offset(args.topic, qid, args.from_offset, bounds, allow_end=True)
                starts[qid] = args.from_offset
            else:
                starts[qid] = committed[qid] if committed[qid] >= 0 else bounds[0]
        out = MessageOutput(args.json)
        remaining = args.max
        ends = {}
        for qid, offset in starts.items():
            hi = queues[qid][1]
            while remaining > 0 and offset < hi:
                res = store.get_message(
                    args.group, args.topic, qid, offset, max_msgs=min(remaining, PULL_BATCH), tags=args.tags
                )
                for msg in res.messages:
                    out.write(msg)
                remaining -= len(res.messages)
                if res.next_begin_offset <= offset or res.status in _PULL_DONE:
                    offset = max(offset, res.next_begin_offset)
                    break
                offset = res.next_begin_offset
            ends[qid] = offset
            if remaining <= 0:
                break
        out.close()
        if args.commit:
            for qid, offset in ends.items():
                # a queue the pull did not move keeps what it had (--from moves it on purpose)
                moved = offset != starts[qid] or args.from_offset is not None
                if moved and offset != committed[qid]:
                    store.commit_offset(args.group, args.topic, qid, offset)
            store.persist_offsets()
        if args.follow:
            _follow(store, args, ends, remaining)
    if not args.json and not args.follow:
        verb = "committed" if args.commit else "not committed: add --commit to store them"
        print(f"{_n(out.count, 'message')} of {args.topic} for group {args.group}; next offsets ({verb}):")
        for qid, offset in ends.items():
            print(f"  queue {qid}: {offset} of {queues[qid][1]} (lag {max(0, queues[qid][1] - offset)})")
    return EXIT_OK


def store_report(store: MessageStore) -> dict:
    """What ``stats`` prints: ``store.stats()``, the same document (rocketstore.services.report)."""
    return store.stats()


def _policy_text(policy: dict) -> str:
    """``"age 1h, size 10,000 B, when consumed"`` for a topic's retention policy."""
    ms, size = policy["retention_ms"], policy["retention_bytes"]
    if ms is None:
        age = "age file_reserved_time"
    elif ms == -1:
        age = "age unlimited"
    else:
        age = f"age {ms:,} ms"
    parts = [age]
    if size not in (None, -1):
        parts.append(f"size {size:,} B")
    if policy["delete_when_consumed"]:
        parts.append("when consumed")
    return ", ".join(parts)


def _hold_text(hold: dict) -> str:
    """One reason a segment stays, as the RETENTION table prints it."""
    policy = hold["policy"]
    if policy == "delete_when_consumed":
        if hold["no_group"]:
            return "delete_when_consumed: no group has an offset"
        groups = "; ".join(
            f"{_printable(str(g))} ("
            + ", ".join(f"q{q}@{o}" for q, o in sorted(offsets.items(), key=lambda kv: int(kv[0])))
            + ")"
            for g, offsets in hold["groups"].items()
        )
        return f"delete_when_consumed: {groups}"
    if policy in ("file_reserved_time", "retention_ms"):
        limit = hold["retention_ms"]
        if limit == -1:
            return f"{policy}: no age limit"
        age = hold["age_ms"]
        age_text = "?" if age is None else f"{age / 3_600_000:.2f} h"
        return f"{policy}: age {age_text} of {limit / 3_600_000:.2f} h"
    if policy == "delete_when":
        return "delete_when: waits for hour " + ",".join(f"{h:02d}" for h in hold["hours"])
    if policy == "retention_bytes":
        return f"retention_bytes: {hold['bytes']:,} of {hold['retention_bytes']:,} B"
    return policy


def _counted(counts: dict, label: str) -> str:
    """``"3 (level 1: 2, level 5: 1)"``, or ``"0"``."""
    total = sum(counts.values())
    if not total:
        return "0"
    return f"{total:,} (" + ", ".join(f"{label}{_printable(str(k))}: {n:,}" for k, n in counts.items()) + ")"


def cmd_stats(args) -> int:
    with open_store(args) as store:
        report = store_report(store)
    if args.json:
        _print_json(report)
        return EXIT_OK
    queue_count = sum(len(t["queues"]) for t in report["topics"].values())
    _print_fields(
        [
            ("store", f"{report['store']} ({describe(report['implementation'])})"),
            (
                "commitlog",
                f"{_n(report['segments'], 'segment')} of {_human_bytes(report['segment_size'])}, "
                f"offsets {report['min_offset']:,} .. {report['max_offset']:,} "
                f"({report['bytes']:,} bytes; {_human_bytes(report['disk_bytes'])} on disk)",
            ),
            (
                "messages",
                f"{report['messages']:,} in {_n(len(report['topics']), 'topic')}, {_n(queue_count, 'queue')}",
            ),
            (
                "last shutdown",
                "clean"
                if report["last_shutdown_clean"]
                else "abnormal (recovery runs on the next writable open)",
            ),
            ("delayed", _counted(report["delayed"], "level ")),
            ("dead letters", _counted(report["dead_letters"], "")),
        ]
    )
    if queue_count:
        print()
        table = Table(
            [("TOPIC", "<"), ("QUEUE", ">"), ("MIN_OFFSET", ">"), ("MAX_OFFSET", ">"), ("MESSAGES", ">")],
            sys.stdout,
        )
        for topic, entry in report["topics"].items():
            for q in entry["queues"]:
                table.add([_printable(topic), q["queue_id"], q["min_offset"], q["max_offset"], q["messages"]])
        table.close()
    retention = report["retention"]["topics"]
    if retention:
        print()
        table = Table(
            [("TOPIC", "<"), ("RETENTION", "<"), ("OLDEST_SEGMENT", ">"), ("HELD_BY", "<")], sys.stdout
        )
        for topic, entry in retention.items():
            oldest = entry["oldest_segment"]
            holds = entry.get("held_by") or []
            held = (
                "; ".join(_hold_text(h) for h in holds) if holds else ("-" if oldest is None else "nothing")
            )
            table.add(
                [_printable(topic), _policy_text(entry["policy"]), "-" if oldest is None else oldest, held]
            )
        table.close()
    if report["groups"]:
        print()
        table = Table(
            [
                ("GROUP", "<"),
                ("TOPIC", "<"),
                ("QUEUE", ">"),
                ("COMMITTED", ">"),
                ("MAX_OFFSET", ">"),
                ("LAG", ">"),
            ],
            sys.stdout,
        )
        for group, entry in report["groups"].items():
            for q in entry["queues"]:
                table.add(
                    [
                        _printable(group),
                        _printable(q["topic"]),
                        q["queue_id"],
                        q["committed"],
                        q["max_offset"],
                        q["lag"],
                    ]
                )
        table.close()
    return EXIT_OK


def cmd_verify(args) -> int:
    with open_store(args) as store, Progress("verify") as bar:
        result = store.verify(progress=bar)
    report = {"store": store.path, **result}
    if args.json:
        _print_json(report)
    else:
        verdict = "OK" if result["ok"] else f"FAILED: {_n(len(result['problems']), 'problem')}"
        queues = f", {_n(result['queues'], 'queue')}" if "queues" in result else ""
        print(
            f"{verdict}: {_n(result['records'], 'record')}, {result['bytes']:,} bytes in "
            f"{_n(result['segments'], 'segment')}{queues}, offsets {result['min_offset']:,} .. {result['max_offset']:,}"
        )
        for problem in result["problems"]:
            extra = ", ".join(f"{k}={v}" for k, v in problem.items() if k not in ("offset", "reason"))
            print(f"  offset {problem['offset']}: {problem['reason']}" + (f" ({extra})" if extra else ""))
    return EXIT_OK if result["ok"] else EXIT_ERROR


def cmd_recover(args) -> int:
    stages: dict = {}

    def progress(stage: str, done: int, total: int) -> None:
        stages[stage] = (done, total)
        bar(stage, done, total)

    started = time.perf_counter()
    with Progress("recover") as bar:
        store = open_store(args, writable=True, join=False, progress=progress)
    try:
        clean = store.last_shutdown_clean
        end = store.max_offset
        dispatched_bytes = stages.get("dispatch", (0, 0))[1]
        queues = store.queues()
        report = {
            "store": store.path,
            "last_shutdown_clean": clean,
            "segments": store.stats()["segments"],
            "min_offset": store.min_offset,
            "end_offset": end,
            "dispatched_records": sum(len(records) for _, records in store.scan(end - dispatched_bytes, end))
            if dispatched_bytes
            else 0,
            "dispatched_bytes": dispatched_bytes,
            "topics": len({t for t, _ in queues}),
            "queues": len(queues),
            "messages": sum(hi - lo for lo, hi in queues.values()),
        }
    finally:
        store.close()
    report["seconds"] = round(time.perf_counter() - started, 3)
    if args.json:
        _print_json(report)
    else:
        _print_fields(
            [
                ("store", report["store"]),
                ("last shutdown", "clean" if clean else "abnormal"),
                (
                    "commitlog",
                    f"{_n(report['segments'], 'segment')}, valid data up to offset {report['end_offset']:,}",
                ),
                (
                    "dispatched",
                    f"{_n(report['dispatched_records'], 'record')} ({report['dispatched_bytes']:,} bytes) "
                    "into the ConsumeQueues and the index",
                ),
                (
                    "queues",
                    f"{_n(report['messages'], 'message')} in {_n(report['queues'], 'queue')} of {_n(report['topics'], 'topic')}",
                ),
                ("took", f"{report['seconds']:.2f} s"),
            ]
        )
    return EXIT_OK


def _first_record_at_or_after(store: MessageStore, offset: int, end: int) -> Optional[int]:
    """The CommitLog offset of the first record starting at or after ``offset`` (before ``end``)."""
    size = store.config.commitlog_file_size
    lowest = store.min_offset
    segment_start = max(lowest, offset - (offset - lowest) % size)
    for seg_start, records in store.scan(segment_start, end):
        starts = records["position"] + seg_start
        later = starts[starts >= offset]
        if len(later):
            return int(later[0])
    return None


def _commitlog_range(store: MessageStore, start: Optional[int], end: Optional[int]) -> tuple[int, int]:
    lo, hi = store.min_offset, store.max_offset
    start = lo if start is None else start
    end = hi if end is None else min(end, hi)
    if not lo <= start <= hi:
        raise CliError(f"offset {start} is out of range: the CommitLog holds offsets {lo} .. {hi}")
    if end < start:
        raise CliError(f"--to {end} is before --from {start}", EXIT_USAGE)
    return start, end


def _messages(
    store: MessageStore,
    start: int,
    end: int,
    topics: Optional[set],
    begin_ms: Optional[int],
    end_ms: Optional[int],
    bar: Optional[Progress] = None,
) -> Iterator[MessageExt]:
    """Messages whose records lie in [start, end), in CommitLog order, filtered by topic and by
    store time (on the columnar scan, so only the records that match are decoded)."""
    first = _first_record_at_or_after(store, start, end) if start > store.min_offset else start
    if first is None:
        return
    total = max(1, end - start)
    if begin_ms is None and end_ms is None:
        for n, msg in enumerate(store.iter_messages(first, end)):
            if topics is None or msg.topic in topics:
                yield msg
            if bar is not None and n % 4096 == 0:
                bar.update(msg.commitlog_offset - start, total)
        return
    low = begin_ms or 0
    high = (1 << 63) - 1 if end_ms is None else end_ms
    for seg_start, records in store.scan(first, end):
        stamps = records["store_timestamp"]
        for offset in (records["position"][(stamps >= low) & (stamps <= high)] + seg_start).tolist():
            msg = store.read(offset)
            if topics is None or msg.topic in topics:
                yield msg
        if bar is not None:
            bar.update(seg_start + int(records["position"][-1]) - start, total)


def cmd_dump(args) -> int:
    with open_store(args) as store:
        start, end = _commitlog_range(store, args.from_offset, args.to_offset)
        topics = set(args.topic) if args.topic else None
        out = MessageOutput(args.json)
        # output streaming to the terminal is its own progress: a bar only when it goes elsewhere
        show_bar = end - start >= DUMP_PROGRESS_BYTES and not _is_terminal(sys.stdout)
        with Progress("dump", enabled=None if show_bar else False) as bar:
            for msg in _messages(store, start, end, topics, None, None, bar):
                if args.max is not None and out.count >= args.max:
                    break
                out.write(msg)
        out.close()
    return EXIT_OK
