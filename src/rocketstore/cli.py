"""``rocketstore`` (and ``python -m rocketstore``): the command line.

mqadmin's four message lookups answered straight from the store's files, with no broker and no
name server; consuming with committed offsets; and the chores of an operator (stats, verify,
recover, dump, export), on rocketstore's own stores and on a directory copied from a Java broker.

Every command but ``put``, ``recover``, ``quickstart`` and ``consume --commit`` opens the store
read-only: it writes no byte into it and takes no lock, so it works beside a running writer.

Exit status: 0 done; 1 an error (one line on stderr), nothing found by a lookup, or problems found
by ``verify``; 2 bad arguments; 130 interrupted; 141 the reader of the output went away.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import json
import os
import random
import sys
import tempfile
import time
import unicodedata
from typing import Callable, Iterable, Iterator, Optional

import rocketstore
from rocketstore.config import default_store_path
from rocketstore.configfiles import ConsumerOffsetTable
from rocketstore.consume import GetMessageStatus
from rocketstore.errors import (FlushTimeoutError, InvalidMessageIdError, MessageNotFoundError,
                                NotAStoreError, RocketStoreError, StoreLockedError)
from rocketstore.message import MessageExt
from rocketstore.schedule import dlq_counts
from rocketstore.store import MessageStore, check_store_dir

__all__ = ["main", "build_parser", "message_dict", "Progress", "quickstart", "CliError"]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141

#: RocketMQ's index answers at most this many messages per key query (``maxMsgsNumBatch``).
MAX_KEY_RESULTS = 64
#: ``dump`` shows a progress bar (on a terminal) for ranges at least this long.
DUMP_PROGRESS_BYTES = 64 << 20
#: Rows buffered to size a table's columns before the first line is printed.
TABLE_SAMPLE_ROWS = 200
#: Characters of a body shown in a table cell / in a single message's view.
BODY_PREVIEW_CHARS = 40
BODY_VIEW_CHARS = 4096
#: Messages pulled per ``get_message`` call by ``consume`` (RocketMQ's default pull batch).
PULL_BATCH = 32
#: Rows per Parquet row group written by ``export``.
PARQUET_BATCH_ROWS = 65536
#: Properties a message view shows in their own lines rather than among the others.
_SHOWN_APART = ("TAGS", "KEYS", "UNIQ_KEY")


class CliError(Exception):
    """A user-facing failure: printed as one line on stderr, exit status ``status``."""

    def __init__(self, message: str, status: int = EXIT_ERROR):
        super().__init__(message)
        self.status = status


# ---------------------------------------------------------------------------------------------
# Progress bar

def _writes_utf8(stream) -> bool:
    return (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "") == "utf8"


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _n(count: int, noun: str) -> str:
    """``1 message``, ``2 messages``, ``1,024 records``."""
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class Progress:
    """A one-line progress bar on ``stream`` (stderr), drawn only when it is a terminal.

    Call it as the store's progress callback, ``bar(stage, done, total)``, or use
    :meth:`update`. It redraws at most ten times a second; :meth:`close` (or leaving the ``with``
    block, error or not) erases the line, so whatever is printed next starts on a clean line.
    ``unit`` is ``"bytes"`` or a word counted in plain numbers (``"msgs"``).
    """

    INTERVAL = 0.1

    def __init__(self, label: str, *, unit: str = "bytes", stream=None, enabled: Optional[bool] = None):
        self.stream = sys.stderr if stream is None else stream
        self.enabled = _is_terminal(self.stream) if enabled is None else enabled
        self.label = label
        self.unit = unit
        self._drawn = False
        self._last_draw = 0.0
        self._started = time.monotonic()

    def __call__(self, stage: str, done: int, total: int) -> None:
        self.update(done, total, stage)

    def update(self, done: int, total: int, label: Optional[str] = None) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        force = not self._drawn or done >= total
        if label is not None and label != self.label:
            self.label, self._started, force = label, now, True
        if not force and now - self._last_draw < self.INTERVAL:
            return
        self._last_draw = now
        self._draw(done, total, now)

    def _amount(self, n: int) -> str:
        return _human_bytes(n) if self.unit == "bytes" else f"{n:,}"

    def _draw(self, done: int, total: int, now: float) -> None:
        fraction = min(1.0, max(0.0, done / total)) if total > 0 else 1.0
        elapsed = now - self._started
        tail = f" {fraction * 100:3.0f}%  {self._amount(done)} / {self._amount(total)}"
        if self.unit != "bytes":
            tail += f" {self.unit}"
        left = elapsed / fraction * (1 - fraction) if 0 < fraction < 1 and elapsed >= 1 else 0
        if left >= 1:
            tail += f"  {_duration(left)} left"
        try:
            width = os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, AttributeError, ValueError):
            width = 80
        head = f"{self.label:<10} "
        bar_width = max(10, min(50, width - 1 - len(head) - len(tail)))
        filled = int(bar_width * fraction)
        full, empty = ("\u2588", "\u2591") if _writes_utf8(self.stream) else ("#", "-")
        line = (head + full * filled + empty * (bar_width - filled) + tail)[:max(1, width - 1)]
        self.stream.write("\r" + line + "\x1b[K")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        """Erase the bar (if one was drawn)."""
        if self._drawn:
            self._drawn = False
            try:
                self.stream.write("\r\x1b[2K")
                self.stream.flush()
            except (OSError, ValueError):
                pass

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------
# Rendering messages

def _host_text(host) -> Optional[str]:
    if not host:
        return None
    ip, port = host
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def message_dict(msg: MessageExt) -> dict:
    """A message as one JSON object (``--json``): ``body`` is UTF-8 text when it decodes as such,
    else base64 with ``"body_encoding": "base64"``."""
    body = bytes(msg.body)
    out = {
        "topic": msg.topic,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "commitlog_offset": msg.commitlog_offset,
        "size": msg.size,
        "msg_id": msg.msg_id,
        "unique_key": msg.unique_key,
        "keys": msg.keys,
        "tags": msg.tags,
        "flag": msg.flag,
        "sys_flag": msg.sys_flag,
        "born_timestamp": msg.born_timestamp,
        "born_host": _host_text(msg.born_host),
        "store_timestamp": msg.store_timestamp,
        "store_host": _host_text(msg.store_host),
        "reconsume_times": msg.reconsume_times,
        "prepared_transaction_offset": msg.prepared_transaction_offset,
        "body_crc": msg.body_crc,
        "properties": dict(msg.properties or {}),
    }
    try:
        out["body"] = body.decode("utf-8")
    except UnicodeDecodeError:
        out["body"] = base64.b64encode(body).decode("ascii")
        out["body_encoding"] = "base64"
    return out


def _json_default(value):
    if hasattr(value, "item"):          # numpy scalars
        return value.item()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def _ms_text(ms: Optional[int]) -> str:
    """A millisecond timestamp as local time, ``2021-09-28 17:25:59.416``."""
    if ms is None:
        return "-"
    try:
        t = datetime.datetime.fromtimestamp(ms / 1000)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}"


def _printable(text: str) -> str:
    """``text`` with control characters escaped, so a message cannot drive the terminal."""
    if text.isprintable():
        return text
    return "".join(c.encode("unicode_escape").decode("ascii")
                   if not c.isprintable() and unicodedata.category(c)[0] == "C" else c for c in text)


def _body_text(body: bytes) -> Optional[str]:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _body_preview(msg: MessageExt, limit: int = BODY_PREVIEW_CHARS) -> str:
    body = bytes(msg.body)
    text = _body_text(body)
    if text is None:
        return f"<{len(body):,} bytes, binary>"
    text = _printable(text)
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


class Table:
    """Rows printed under a header, columns sized to the first :data:`TABLE_SAMPLE_ROWS` rows
    (a later, wider cell just pushes its line right), so long outputs stream."""

    def __init__(self, columns: list[tuple[str, str]], out):
        self.headers = [name for name, _ in columns]
        self.aligns = [align for _, align in columns]
        self.out = out
        self._pending: list[list[str]] = []
        self._widths: Optional[list[int]] = None
        self.rows = 0

    def add(self, row: list) -> None:
        row = ["-" if v is None or v == "" else str(v) for v in row]
        self.rows += 1
        if self._widths is None:
            self._pending.append(row)
            if len(self._pending) >= TABLE_SAMPLE_ROWS:
                self._start()
        else:
            self._write(row)

    def _start(self) -> None:
        self._widths = [max([len(h)] + [len(r[i]) for r in self._pending]) for i, h in enumerate(self.headers)]
        self._write(self.headers)
        for row in self._pending:
            self._write(row)
        self._pending = []

    def _write(self, row: list[str]) -> None:
        cells = []
        last = len(row) - 1
        for i, (cell, width) in enumerate(zip(row, self._widths)):
            if i == last:
                cells.append(cell)      # no trailing blanks
            elif self.aligns[i] == ">":
                cells.append(cell.rjust(width))
            else:
                cells.append(cell.ljust(width))
        self.out.write("  ".join(cells).rstrip() + "\n")

    def close(self) -> None:
        """Print what is still buffered (nothing at all when there were no rows)."""
        if self._widths is None and self._pending:
            self._start()


MESSAGE_COLUMNS = [("COMMITLOG", ">"), ("SIZE", ">"), ("TOPIC", "<"), ("QUEUE", ">"), ("OFFSET", ">"),
                   ("STORED", "<"), ("MSG_ID", "<"), ("TAGS", "<"), ("KEYS", "<"), ("BODY", "<")]


def _message_row(msg: MessageExt) -> list:
    return [msg.commitlog_offset, msg.size, _printable(msg.topic), msg.queue_id, msg.queue_offset,
            _ms_text(msg.store_timestamp), msg.msg_id, _printable(msg.tags or ""),
            _printable(msg.keys or ""), _body_preview(msg)]


class MessageOutput:
    """Where messages go: JSON lines (``--json``) or a :class:`Table`."""

    def __init__(self, as_json: bool, out=None):
        self.out = sys.stdout if out is None else out
        self.as_json = as_json
        self.ensure_ascii = not _writes_utf8(self.out)
        self.table = None if as_json else Table(MESSAGE_COLUMNS, self.out)
        self.count = 0

    def write(self, msg: MessageExt) -> None:
        self.count += 1
        if self.as_json:
            self.out.write(json.dumps(message_dict(msg), ensure_ascii=self.ensure_ascii,
                                      default=_json_default) + "\n")
        else:
            self.table.add(_message_row(msg))

    def close(self) -> None:
        if self.table is not None:
            self.table.close()


def _print_json(obj, out=None) -> None:
    out = sys.stdout if out is None else out
    out.write(json.dumps(obj, ensure_ascii=not _writes_utf8(out), default=_json_default) + "\n")


def _print_fields(pairs: Iterable[tuple[str, object]], out=None) -> None:
    out = sys.stdout if out is None else out
    pairs = list(pairs)
    width = max(len(name) for name, _ in pairs) + 2
    for name, value in pairs:
        text = "-" if value is None or value == "" else str(value)
        lines = text.split("\n")
        out.write(f"{name + ':':<{width}}{lines[0]}\n")
        for line in lines[1:]:
            out.write(" " * width + line + "\n")


def _print_message(msg: MessageExt, as_json: bool) -> None:
    """One message in full: a JSON line, or a block of labelled lines as mqadmin prints it."""
    if as_json:
        MessageOutput(True).write(msg)
        return
    body = bytes(msg.body)
    text = _body_text(body)
    if text is None:
        body_view = f"<{len(body):,} bytes, not UTF-8 text: --json prints it as base64>"
    else:
        body_view = "\n".join(_printable(line) for line in text[:BODY_VIEW_CHARS].split("\n"))
        if len(text) > BODY_VIEW_CHARS:
            body_view += f"\u2026 ({len(text) - BODY_VIEW_CHARS:,} more characters: --json prints all)"
    others = {k: v for k, v in (msg.properties or {}).items() if k not in _SHOWN_APART}
    _print_fields([
        ("Topic", _printable(msg.topic)),
        ("Message ID", msg.msg_id),
        ("Unique key", msg.unique_key),
        ("Tags", _printable(msg.tags or "")),
        ("Keys", _printable(msg.keys or "")),
        ("Queue", msg.queue_id),
        ("Queue offset", msg.queue_offset),
        ("CommitLog offset", msg.commitlog_offset),
        ("Size", f"{msg.size:,} bytes (body {len(body):,})"),
        ("Born", f"{_ms_text(msg.born_timestamp)} from {_host_text(msg.born_host)}"),
        ("Stored", f"{_ms_text(msg.store_timestamp)} at {_host_text(msg.store_host)}"),
        ("Reconsume times", msg.reconsume_times),
        ("Flag", msg.flag),
        ("System flag", msg.sys_flag),
        ("Body CRC", msg.body_crc),
        ("Properties", ", ".join(_printable(f"{k}={v}") for k, v in others.items())),
        ("Body", body_view),
    ])


# ---------------------------------------------------------------------------------------------
# Opening the store

def _store_path(args) -> str:
    return os.path.abspath(os.path.expanduser(args.store or default_store_path()))


def _check_store_dir(path: str, *, may_create: bool = False) -> None:
    """Refuse (CliError) a path that is not a store. ``may_create``: a missing or empty
    directory is fine (``put`` starts a store there)."""
    if not os.path.lexists(path) and not may_create:
        raise CliError(f"no store at {path} (give --store DIR, or set ROCKETSTORE_HOME)")
    try:
        check_store_dir(path, read_only=not may_create)
    except (NotAStoreError, OSError) as exc:
        raise CliError(str(exc)) from None


def open_store(args, *, writable: bool = False, create: bool = False,
               progress: Optional[Callable[[str, int, int], None]] = None) -> MessageStore:
    """The store of ``--store``: read-only unless ``writable``; ``create`` lets ``put`` start one."""
    path = _store_path(args)
    _check_store_dir(path, may_create=create)
    try:
        return MessageStore(path, read_only=not writable, progress=progress)
    except StoreLockedError as exc:
        raise CliError(f"{exc}; the read-only commands work while it writes") from None


def _topics_of(store: MessageStore) -> list[str]:
    return sorted({topic for topic, _ in store.queues()} | set(store.topics))


def _require_topic(store: MessageStore, topic: str) -> None:
    topics = _topics_of(store)
    if topic in topics:
        return
    if not topics:
        raise CliError(f"unknown topic {topic!r}: the store at {store.path} has no topics")
    shown = ", ".join(topics[:10]) + (f", ... ({len(topics)} in all)" if len(topics) > 10 else "")
    raise CliError(f"unknown topic {topic!r} (topics: {shown})")


def _queue_ids(store: MessageStore, topic: str) -> dict[int, tuple[int, int]]:
    """{queue id: (min offset, max offset)} of ``topic``; configured queues without units are (0, 0)."""
    _require_topic(store, topic)
    found = {qid: bounds for (t, qid), bounds in store.queues().items() if t == topic}
    for qid in range(store.topics.get(topic, 0)):
        found.setdefault(qid, (0, 0))
    return dict(sorted(found.items()))


def _queue_bounds(store: MessageStore, topic: str, queue_id: int) -> tuple[int, int]:
    queues = _queue_ids(store, topic)
    if queue_id not in queues:
        raise CliError(f"unknown queue {queue_id} of topic {topic!r} (queues: {_id_list(queues)})")
    return queues[queue_id]


def _id_list(ids) -> str:
    ids = sorted(ids)
    if ids and ids == list(range(ids[0], ids[-1] + 1)) and len(ids) > 2:
        return f"{ids[0]}..{ids[-1]}"
    return ", ".join(map(str, ids)) or "none"


def _check_queue_offset(topic: str, queue_id: int, offset: int, bounds: tuple[int, int],
                        allow_end: bool = False) -> None:
    lo, hi = bounds
    if lo <= offset < hi or (allow_end and offset == hi):
        return
    held = f"holds offsets {lo}..{hi - 1}" if hi > lo else "is empty"
    raise CliError(f"offset {offset} is out of range: queue {queue_id} of {topic!r} {held}")


# ---------------------------------------------------------------------------------------------
# Commands

def cmd_put(args) -> int:
    if args.body == "-":
        body = sys.stdin.buffer.read()
    else:
        body = os.fsencode(args.body)       # the argument's bytes as given, UTF-8 or not
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
            result = store.put(args.topic, body, tags=args.tags, keys=args.keys,
                               properties=properties or None, queue_id=queue_id,
                               durable=True if args.sync else None)
        except FlushTimeoutError as exc:      # stored, but not confirmed durable: say where
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
        _print_fields([("Status", fields["status"]), ("Message ID", fields["msg_id"]),
                       ("Unique key", fields["unique_key"]), ("Topic", fields["topic"]),
                       ("Queue", fields["queue_id"]), ("Queue offset", fields["queue_offset"]),
                       ("CommitLog offset", fields["commitlog_offset"]), ("Size", f"{fields['size']:,} bytes")])
    if flush_failed is not None:
        _error(str(flush_failed))
        return EXIT_ERROR
    return EXIT_OK


def cmd_query_by_key(args) -> int:
    with open_store(args) as store:
        _require_topic(store, args.topic)
        found = store.query_by_key(args.topic, args.key, max_num=args.max, begin=args.begin or 0,
                                   end=args.end)
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
            msg = store.get_by_msg_id(args.msg_id)
        except InvalidMessageIdError as exc:
            raise CliError(f"bad msgId: {exc}") from None
        except MessageNotFoundError:
            # mqadmin's queryMsgById also takes a client msgId (UNIQ_KEY): same length, same alphabet
            msg = _find_unique_key(store, args.msg_id, [args.topic] if args.topic else _topics_of(store))
            if msg is None:
                raise CliError(f"no message with msgId {args.msg_id} in {store.path} "
                               "(neither an offsetMsgId of this store nor a UNIQ_KEY)") from None
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
            raise CliError(f"queue offset {args.offset} of {args.topic!r} queue {args.queue_id}: {exc}") from None
        _print_message(msg, args.json)
    return EXIT_OK


_PULL_DONE = (GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.OFFSET_OVERFLOW_BADLY,
              GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
              GetMessageStatus.OFFSET_FOUND_NULL)


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
                res = store.get_message(args.group, args.topic, qid, offset,
                                        max_msgs=min(remaining, PULL_BATCH), tags=args.tags)
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
    if not args.json:
        verb = "committed" if args.commit else "not committed: add --commit to store them"
        print(f"{_n(out.count, 'message')} of {args.topic} for group {args.group}; next offsets ({verb}):")
        for qid, offset in ends.items():
            print(f"  queue {qid}: {offset} of {queues[qid][1]} (lag {max(0, queues[qid][1] - offset)})")
    return EXIT_OK


def _disk_usage(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            total += getattr(st, "st_blocks", 0) * 512 or st.st_size
    return total


def store_report(store: MessageStore) -> dict:
    """What ``stats`` prints: CommitLog extent, topics and queues, consumer lag per group,
    delayed messages per level and dead letters per group."""
    base = store.stats()
    queues = store.queues()
    topics: dict = {}
    for (topic, qid), (lo, hi) in sorted(queues.items()):
        entry = topics.setdefault(topic, {"messages": 0, "queues": []})
        entry["queues"].append({"queue_id": qid, "min_offset": lo, "max_offset": hi, "messages": hi - lo})
        entry["messages"] += hi - lo
    for topic in store.topics:
        topics.setdefault(topic, {"messages": 0, "queues": []})
    groups: dict = {}
    offsets = ConsumerOffsetTable.in_store(store.path, read_only=True)
    for group in offsets.groups():
        rows = []
        for topic in sorted(topics):
            for qid, committed in sorted(offsets.query_all(group, topic).items()):
                lo, hi = queues.get((topic, qid), (0, 0))
                rows.append({"topic": topic, "queue_id": qid, "committed": committed,
                             "max_offset": hi, "lag": max(0, hi - max(committed, lo))})
        groups[group] = {"lag": sum(r["lag"] for r in rows), "queues": rows}
    return {
        "store": store.path,
        "implementation": base["implementation"],
        "last_shutdown_clean": store.last_shutdown_clean,
        "segments": base["segments"],
        "segment_size": base["segment_size"],
        "min_offset": base["min_offset"],
        "max_offset": base["max_offset"],
        "bytes": base["max_offset"] - base["min_offset"],
        "disk_bytes": _disk_usage(store.path),
        "messages": sum(t["messages"] for t in topics.values()),
        "topics": dict(sorted(topics.items())),
        "groups": groups,
        "delayed": {str(level): n for level, n in store.delayed_counts().items()},
        "dead_letters": dlq_counts(queues),
    }


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
    _print_fields([
        ("store", f"{report['store']} ({report['implementation']} implementation)"),
        ("commitlog", f"{_n(report['segments'], 'segment')} of {_human_bytes(report['segment_size'])}, "
                      f"offsets {report['min_offset']:,} .. {report['max_offset']:,} "
                      f"({report['bytes']:,} bytes; {_human_bytes(report['disk_bytes'])} on disk)"),
        ("messages", f"{report['messages']:,} in {_n(len(report['topics']), 'topic')}, {_n(queue_count, 'queue')}"),
        ("last shutdown", "clean" if report["last_shutdown_clean"] else "abnormal (recovery runs on the next writable open)"),
        ("delayed", _counted(report["delayed"], "level ")),
        ("dead letters", _counted(report["dead_letters"], "")),
    ])
    if queue_count:
        print()
        table = Table([("TOPIC", "<"), ("QUEUE", ">"), ("MIN_OFFSET", ">"), ("MAX_OFFSET", ">"),
                       ("MESSAGES", ">")], sys.stdout)
        for topic, entry in report["topics"].items():
            for q in entry["queues"]:
                table.add([_printable(topic), q["queue_id"], q["min_offset"], q["max_offset"], q["messages"]])
        table.close()
    if report["groups"]:
        print()
        table = Table([("GROUP", "<"), ("TOPIC", "<"), ("QUEUE", ">"), ("COMMITTED", ">"),
                       ("MAX_OFFSET", ">"), ("LAG", ">")], sys.stdout)
        for group, entry in report["groups"].items():
            for q in entry["queues"]:
                table.add([_printable(group), _printable(q["topic"]), q["queue_id"], q["committed"],
                           q["max_offset"], q["lag"]])
        table.close()
    return EXIT_OK


def cmd_verify(args) -> int:
    with open_store(args) as store:
        with Progress("verify") as bar:
            result = store.verify(progress=bar)
    report = {"store": store.path, **result}
    if args.json:
        _print_json(report)
    else:
        verdict = "OK" if result["ok"] else f"FAILED: {_n(len(result['problems']), 'problem')}"
        queues = f", {_n(result['queues'], 'queue')}" if "queues" in result else ""
        print(f"{verdict}: {_n(result['records'], 'record')}, {result['bytes']:,} bytes in "
              f"{_n(result['segments'], 'segment')}{queues}, offsets {result['min_offset']:,} .. {result['max_offset']:,}")
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
        store = open_store(args, writable=True, progress=progress)
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
                                  if dispatched_bytes else 0,
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
        _print_fields([
            ("store", report["store"]),
            ("last shutdown", "clean" if clean else "abnormal"),
            ("commitlog", f"{_n(report['segments'], 'segment')}, valid data up to offset {report['end_offset']:,}"),
            ("dispatched", f"{_n(report['dispatched_records'], 'record')} ({report['dispatched_bytes']:,} bytes) "
                           "into the ConsumeQueues and the index"),
            ("queues", f"{_n(report['messages'], 'message')} in {_n(report['queues'], 'queue')} of {_n(report['topics'], 'topic')}"),
            ("took", f"{report['seconds']:.2f} s"),
        ])
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


def _messages(store: MessageStore, start: int, end: int, topics: Optional[set], begin_ms: Optional[int],
              end_ms: Optional[int], bar: Optional[Progress] = None) -> Iterator[MessageExt]:
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


_PARQUET_FIELDS = ("topic", "queue_id", "queue_offset", "commitlog_offset", "size", "msg_id",
                   "unique_key", "keys", "tags", "flag", "sys_flag", "born_timestamp", "born_host",
                   "store_timestamp", "store_host", "reconsume_times", "prepared_transaction_offset",
                   "body_crc", "properties", "body")


def _parquet_schema(pa):
    ts = pa.timestamp("ms", tz="UTC")
    types = {"topic": pa.string(), "queue_id": pa.int32(), "queue_offset": pa.int64(),
             "commitlog_offset": pa.int64(), "size": pa.int32(), "msg_id": pa.string(),
             "unique_key": pa.string(), "keys": pa.string(), "tags": pa.string(), "flag": pa.int32(),
             "sys_flag": pa.int32(), "born_timestamp": ts, "born_host": pa.string(),
             "store_timestamp": ts, "store_host": pa.string(), "reconsume_times": pa.int32(),
             "prepared_transaction_offset": pa.int64(), "body_crc": pa.int32(),
             "properties": pa.map_(pa.string(), pa.string()), "body": pa.binary()}
    return pa.schema([(name, types[name]) for name in _PARQUET_FIELDS])


def _import_pyarrow():
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise CliError("Parquet export needs pyarrow, which is not installed "
                       "(pip install pyarrow); or export JSON lines with --format jsonl") from None
    return pyarrow, pyarrow.parquet


class _ParquetSink:
    """Messages to a Parquet file (pyarrow), one row group per :data:`PARQUET_BATCH_ROWS`."""

    def __init__(self, path: str):
        pa, pq = _import_pyarrow()
        self.pa = pa
        self.schema = _parquet_schema(pa)
        self.writer = pq.ParquetWriter(path, self.schema, compression="zstd")
        self.columns: dict = {name: [] for name in _PARQUET_FIELDS}
        self.count = 0

    def write(self, msg: MessageExt) -> None:
        c = self.columns
        for name in ("topic", "queue_id", "queue_offset", "commitlog_offset", "size", "flag",
                     "sys_flag", "born_timestamp", "store_timestamp", "reconsume_times",
                     "prepared_transaction_offset", "body_crc"):
            c[name].append(getattr(msg, name))
        c["msg_id"].append(msg.msg_id)
        c["unique_key"].append(msg.unique_key)
        c["keys"].append(msg.keys)
        c["tags"].append(msg.tags)
        c["born_host"].append(_host_text(msg.born_host))
        c["store_host"].append(_host_text(msg.store_host))
        c["properties"].append(list((msg.properties or {}).items()))
        c["body"].append(bytes(msg.body))
        self.count += 1
        if len(c["topic"]) >= PARQUET_BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self.columns["topic"]:
            self.writer.write_table(self.pa.Table.from_pydict(self.columns, schema=self.schema))
            self.columns = {name: [] for name in _PARQUET_FIELDS}

    def close(self) -> None:
        self._flush()
        self.writer.close()


class _JsonLinesSink:
    """Messages as JSON lines to a file (``path``) or to stdout (``None``)."""

    def __init__(self, path: Optional[str]):
        self.stream = sys.stdout if path is None else open(path, "w", encoding="utf-8", newline="\n")
        self.output = MessageOutput(True, self.stream)

    @property
    def count(self) -> int:
        return self.output.count

    def write(self, msg: MessageExt) -> None:
        self.output.write(msg)

    def close(self) -> None:
        if self.stream is sys.stdout:
            self.stream.flush()
        else:
            self.stream.close()


@contextlib.contextmanager
def _replaced_on_success(target: str) -> Iterator[str]:
    """A temporary path beside ``target``, renamed to it when the block succeeds and removed
    when it fails: an interrupted export never leaves half a file under the name asked for."""
    fd, tmp = tempfile.mkstemp(prefix=".rocketstore-export-", dir=os.path.dirname(target))
    os.close(fd)
    try:
        yield tmp
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)        # what open() would have created
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _export_format(args) -> str:
    if args.format:
        return args.format
    if args.output and args.output.lower().endswith((".parquet", ".pq")):
        return "parquet"
    return "jsonl"


def _export_to(sink, store: MessageStore, args, show_bar: bool) -> int:
    topics = set(args.topic) if args.topic else None
    try:
        with Progress("export", enabled=None if show_bar else False) as bar:
            for msg in _messages(store, store.min_offset, store.max_offset, topics, args.begin, args.end, bar):
                sink.write(msg)
    finally:
        sink.close()
    return sink.count


def cmd_export(args) -> int:
    fmt = _export_format(args)
    to_stdout = args.output in (None, "-")
    if fmt == "parquet":
        if to_stdout:
            raise CliError("Parquet export needs an output file: -o FILE.parquet", EXIT_USAGE)
        _import_pyarrow()       # before any file is created
    if args.begin is not None and args.end is not None and args.end < args.begin:
        raise CliError(f"--end {args.end} is before --begin {args.begin}", EXIT_USAGE)
    with open_store(args) as store:
        for topic in args.topic or ():
            _require_topic(store, topic)
        if to_stdout:
            # output streaming to the terminal is its own progress: a bar only when it goes elsewhere
            _export_to(_JsonLinesSink(None), store, args, show_bar=not _is_terminal(sys.stdout))
            return EXIT_OK
        target = os.path.abspath(args.output)
        with _replaced_on_success(target) as tmp:
            sink = _ParquetSink(tmp) if fmt == "parquet" else _JsonLinesSink(tmp)
            count = _export_to(sink, store, args, show_bar=True)
    if args.json:
        _print_json({"exported": count, "format": fmt, "file": target})
    else:
        print(f"exported {_n(count, 'message')} to {target} ({fmt})")
    return EXIT_OK


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

    def __enter__(self) -> "_Phase":
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self._t0
        self.bar.close()


def quickstart(store_path: str, count: int, body_size: int, out=None) -> int:
    """The README's main job, timed step by step: put ``count`` messages one per call, as many
    again with tags and keys, as many in batches and a tenth durably; consume the tagged ones
    with ``get_message`` (committing the group's offsets); look them up by key; scan and read."""
    import numpy as np

    out = sys.stdout if out is None else out

    def say(label: str, amount: str, rate: str, note: str = "") -> None:
        out.write(f"{label:<32}{amount:>22}  {rate}{'  (' + note + ')' if note else ''}\n")
        out.flush()

    out.write(f"rocketstore {rocketstore.__version__} ({rocketstore.IMPLEMENTATION} implementation), "
              f"store {store_path}\n")
    body = os.urandom(body_size)
    topic, group = "QuickStart", "QuickStartGroup"
    run = format(int(time.time() * 1000), "x")          # keys unique to this run
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
        say("put, one per call", sized, _rate(count, phase.seconds))

        tagged_from = {qid: hi for (t, qid), (_lo, hi) in store.queues().items() if t == topic}
        with _Phase("put", count) as phase:
            first = put(topic, body, tags="TagA", keys=f"order-{run}-0")
            for chunk in range(1, count, step):
                for i in range(chunk, min(count, chunk + step)):
                    put(topic, body, tags="TagA", keys=f"order-{run}-{i}")
                phase.update(min(count, chunk + step))
        say("put, tags + keys", sized, _rate(count, phase.seconds))
        tagged_to = {qid: hi for (t, qid), (_lo, hi) in store.queues().items() if t == topic}

        with _Phase("put_batch", count) as phase:
            for i in range(0, count, step):
                store.put_batch(topic, [body] * min(step, count - i))
                phase.update(min(count, i + step))
        say("put_batch, 10,000 a call", sized, _rate(count, phase.seconds))

        durable_count = max(1, count // 10)
        with _Phase("durable", durable_count) as phase:
            futures = []
            for i in range(0, durable_count, step):
                futures.extend(store.put_pipelined(topic, body) for _ in range(min(step, durable_count - i)))
                phase.update(len(futures))
            statuses = sorted({_future_status(f) for f in futures})
        del futures
        say("put_pipelined, durable", f"{durable_count:,} x {body_size} B", _rate(durable_count, phase.seconds),
            ", ".join(statuses))

        with _Phase("consume", count) as phase:
            consumed = 0
            for qid, hi in tagged_to.items():
                offset = tagged_from.get(qid, 0)
                while offset < hi:
                    # no further than the tagged messages: untagged ones after them would be
                    # skipped by the filter, and committed as consumed
                    res = store.get_message(group, topic, qid, offset, max_msgs=min(PULL_BATCH, hi - offset),
                                            tags="TagA")
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
        say("consume, get_message 32/pull", f"{consumed:,} messages", _rate(consumed, phase.seconds),
            f"{_n(len(tagged_to), 'queue')}, offsets committed")

        rng = np.random.default_rng(0)
        sample = rng.integers(0, count, size=min(count, 100_000)).tolist()
        with _Phase("query", len(sample), "keys") as phase:
            for n, i in enumerate(sample, 1):
                if not store.query_by_key(topic, f"order-{run}-{i}"):
                    raise CliError(f"quickstart: key order-{run}-{i} not found")
                if n % 4096 == 0:
                    phase.update(n)
        say("query_by_key", f"{len(sample):,} random keys", _rate(len(sample), phase.seconds, "keys/s"))

        with _Phase("scan", store.max_offset - start_offset, "bytes") as phase:
            seen = 0
            offsets = []
            for seg_start, records in store.scan(start_offset):
                seen += len(records)
                offsets.append(records["position"] + seg_start)
                phase.update(seg_start + int(records["position"][-1]) - start_offset)
        say("scan (columnar)", f"{seen:,} records", _rate(seen, phase.seconds))

        picks = rng.choice(np.concatenate(offsets), size=min(seen, 100_000)).tolist()
        del offsets
        with _Phase("read", len(picks)) as phase:
            for n, off in enumerate(picks, 1):
                store.read(off)
                if n % 4096 == 0:
                    phase.update(n)
        say("read by offset", f"{len(picks):,} random", _rate(len(picks), phase.seconds))

        msg = store.get_by_msg_id(first.msg_id)
        assert bytes(msg.body) == body and msg.tags == "TagA" and msg.keys == f"order-{run}-0"
        assert store.query_by_unique_key(topic, first.unique_key).commitlog_offset == first.commitlog_offset
        out.write(f"first tagged message: msg_id {first.msg_id} (queue {first.queue_id}, "
                  f"offset {first.queue_offset})\n")
        stats = store.stats()
        out.write(f"store: {_n(stats['segments'], 'segment')}, {stats['max_offset'] - stats['min_offset']:,} bytes, "
                  f"{stats['flush_rounds']:,} flush rounds for {stats['sync_requests']:,} durable waits\n")
    return EXIT_OK


def cmd_quickstart(args) -> int:
    path = _store_path(args)
    _check_store_dir(path, may_create=True)
    return quickstart(path, args.count, args.body_size)


# ---------------------------------------------------------------------------------------------
# Arguments

class _Parser(argparse.ArgumentParser):
    """Bad arguments: one line on stderr (with the way to the help), exit status 2."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


_INT64_MAX = (1 << 63) - 1
DEFAULT_BODY_LIMIT = 4 << 20        # quickstart's bodies: the default max_message_size
_INT32_MAX = (1 << 31) - 1


def _int_at_least(minimum: int, what: str = "a number", maximum: int = _INT64_MAX):
    """An argument type: an int in ``minimum .. maximum`` (the store's field: int64 by default)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below {minimum}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"{value} is above {maximum}")
        return value
    return parse


_offset = _int_at_least(0, "an offset")
_count = _int_at_least(1, "a count")
_queue = _int_at_least(0, "a queue id", _INT32_MAX)      # a Java int


def _key_max(text: str) -> int:
    value = _count(text)
    if value > MAX_KEY_RESULTS:
        raise argparse.ArgumentTypeError(f"{value} is above {MAX_KEY_RESULTS}, RocketMQ's limit for a key query")
    return value


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _time_ms(text: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 time (local time unless it has an offset)."""
    text = text.strip()
    if text.isdigit():
        return _int_at_least(0, "a time")(text)
    try:
        moment = datetime.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither milliseconds since the epoch nor an ISO 8601 time") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return (moment - _EPOCH) // datetime.timedelta(milliseconds=1)


def build_parser() -> argparse.ArgumentParser:
    # --store and --json are accepted after the command too; SUPPRESS keeps a sub-command's
    # absent option from overwriting the one given before it.
    late = argparse.ArgumentParser(add_help=False)
    late.add_argument("--store", metavar="DIR", default=argparse.SUPPRESS,
                      help="store directory (default: $ROCKETSTORE_HOME, else ~/store)")
    late.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                      help="print JSON: one object per message per line")

    parser = _Parser(
        prog="rocketstore",
        description="Query, consume, check and export a RocketMQ-format message store, straight from its files.",
        epilog="Exit status: 0 done; 1 error, nothing found, or verify found problems; 2 bad arguments. "
               "Every command but put, recover, quickstart and consume --commit opens the store read-only.")
    parser.add_argument("--store", metavar="DIR", default=None,
                        help="store directory (default: $ROCKETSTORE_HOME, else ~/store)")
    parser.add_argument("--json", action="store_true", default=False,
                        help="print JSON: one object per message per line (stats, verify: one object)")
    parser.add_argument("--version", action="version",
                        version=f"rocketstore {rocketstore.__version__} ({rocketstore.IMPLEMENTATION} implementation)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name, handler, help, aliases=()):
        p = sub.add_parser(name, aliases=list(aliases), parents=[late], help=help, description=help)
        p.set_defaults(handler=handler)
        return p

    p = command("put", cmd_put, "store one message (creates the store and the topic if needed)")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("body", metavar="BODY", help="the body as text; '-' reads it from stdin")
    p.add_argument("--tags", metavar="T")
    p.add_argument("--keys", metavar="'K1 K2'", help="space-separated keys (indexed for query-by-key)")
    p.add_argument("--queue", type=_queue, metavar="N", help="queue id (default: round robin)")
    p.add_argument("--property", action="append", metavar="K=V", help="a user property (repeatable)")
    p.add_argument("--sync", action="store_true", help="wait until the message is flushed to disk")

    p = command("query-by-key", cmd_query_by_key, "messages of TOPIC with KEY among their keys (or as UNIQ_KEY)",
                aliases=["queryMsgByKey"])
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("key", metavar="KEY")
    p.add_argument("--max", type=_key_max, default=MAX_KEY_RESULTS, metavar="N",
                   help=f"at most N messages (1..{MAX_KEY_RESULTS}; default {MAX_KEY_RESULTS})")
    p.add_argument("--begin", type=_time_ms, metavar="MS", help="stored at or after (ms, or ISO 8601 time)")
    p.add_argument("--end", type=_time_ms, metavar="MS", help="stored at or before (ms, or ISO 8601 time)")

    p = command("query-by-id", cmd_query_by_id, "the message with this offsetMsgId (or client msgId/UNIQ_KEY)",
                aliases=["queryMsgById"])
    p.add_argument("msg_id", metavar="MSG_ID")
    p.add_argument("--topic", metavar="TOPIC", help="where to look when MSG_ID is a UNIQ_KEY (default: every topic)")

    p = command("query-by-unique-key", cmd_query_by_unique_key, "the message of TOPIC with this UNIQ_KEY (client msgId)",
                aliases=["queryMsgByUniqueKey"])
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("unique_key", metavar="UNIQ_KEY")

    p = command("query-by-offset", cmd_query_by_offset, "the message at OFFSET of queue QUEUE_ID of TOPIC",
                aliases=["queryMsgByOffset"])
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("queue_id", type=_queue, metavar="QUEUE_ID")
    p.add_argument("offset", type=_offset, metavar="OFFSET")

    p = command("consume", cmd_consume, "pull messages of TOPIC for a consumer group, from its committed offsets")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--group", required=True, metavar="G", help="consumer group")
    p.add_argument("--queue", type=_queue, metavar="N", help="only this queue (default: every queue)")
    p.add_argument("--from", dest="from_offset", type=_offset, metavar="OFFSET",
                   help="start at this queue offset (default: the group's committed offset, else the first)")
    p.add_argument("--max", type=_count, default=PULL_BATCH, metavar="N", help=f"at most N messages (default {PULL_BATCH})")
    p.add_argument("--tags", metavar="EXPR", help="tag expression: '*' or 'TagA || TagB'")
    p.add_argument("--commit", action="store_true",
                   help="commit the group's next offsets (opens the store for writing)")

    command("stats", cmd_stats, "topics, queues, segments, bytes and consumer lag per group",
            aliases=["info"])
    command("verify", cmd_verify, "check the CRCs, structure and fields of every record and queue unit "
            "(exit status 0 only if all is well)")
    command("recover", cmd_recover, "run recovery now: cut a torn tail, rebuild missing ConsumeQueues and index")

    p = command("dump", cmd_dump, "records in CommitLog order, as a table or JSON lines")
    p.add_argument("--from", dest="from_offset", type=_offset, metavar="OFFSET",
                   help="first CommitLog offset (default: the first record)")
    p.add_argument("--to", dest="to_offset", type=_offset, metavar="OFFSET",
                   help="stop before this CommitLog offset (default: the end)")
    p.add_argument("--topic", action="append", metavar="TOPIC", help="only this topic (repeatable)")
    p.add_argument("--max", type=_count, metavar="N", help="at most N records")

    p = command("export", cmd_export, "messages to JSON lines or Parquet, filtered by topic and store time")
    p.add_argument("-o", "--output", metavar="FILE", help="output file (default: stdout, JSON lines)")
    p.add_argument("--format", choices=("jsonl", "parquet"),
                   help="default: parquet for a .parquet file, else jsonl")
    p.add_argument("--topic", action="append", metavar="TOPIC", help="only this topic (repeatable)")
    p.add_argument("--begin", type=_time_ms, metavar="MS", help="stored at or after (ms, or ISO 8601 time)")
    p.add_argument("--end", type=_time_ms, metavar="MS", help="stored at or before (ms, or ISO 8601 time)")

    p = command("quickstart", cmd_quickstart,
                "write, consume and query a million messages in the store and print the rates")
    p.add_argument("--count", type=_count, default=1_000_000, metavar="N")
    p.add_argument("--body-size", type=_int_at_least(0, "a size", DEFAULT_BODY_LIMIT), default=128, metavar="BYTES")
    return parser


# ---------------------------------------------------------------------------------------------
# main

def _error(message: str) -> None:
    try:
        sys.stderr.write(f"rocketstore: error: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _os_error_text(exc: OSError) -> str:
    text = exc.strerror or str(exc)
    return f"{text}: {exc.filename}" if exc.filename else text


def _future_status(future) -> str:
    try:
        return future.result().status.name
    except FlushTimeoutError as exc:
        return exc.status.name


def main(argv: Optional[list[str]] = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        status = args.handler(args)
        sys.stdout.flush()
        return status
    except CliError as exc:
        _error(str(exc))
        return exc.status
    except BrokenPipeError:
        # the reader went away (`| head`): say nothing, and keep the interpreter's final flush quiet
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        _error("interrupted")
        return EXIT_INTERRUPTED
    except RocketStoreError as exc:
        _error(str(exc))
        return EXIT_ERROR
    except OSError as exc:
        _error(_os_error_text(exc))
        return EXIT_ERROR
    except UnicodeError as exc:
        _error(f"text that cannot be stored: {exc}")
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
