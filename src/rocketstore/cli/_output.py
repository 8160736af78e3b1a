"""What the CLI prints: the progress bar, message rows and views, tables and JSON lines."""

from __future__ import annotations

import base64
import datetime
import json
import os
import sys
import time
import unicodedata
from collections.abc import Iterable
from typing import Optional

from rocketstore.cli._common import _SHOWN_APART, BODY_PREVIEW_CHARS, BODY_VIEW_CHARS, TABLE_SAMPLE_ROWS
from rocketstore.message import MessageExt

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
            width = 0
        if width <= 0:  # unknown, or a terminal that reports 0 columns (serial consoles, some CI)
            width = 80
        head = f"{self.label:<10} "
        bar_width = max(10, min(50, width - 1 - len(head) - len(tail)))
        filled = int(bar_width * fraction)
        full, empty = ("\u2588", "\u2591") if _writes_utf8(self.stream) else ("#", "-")
        line = (head + full * filled + empty * (bar_width - filled) + tail)[: max(1, width - 1)]
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

    def __enter__(self) -> Progress:
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
    if hasattr(value, "item"):  # numpy scalars
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
    return "".join(
        c.encode("unicode_escape").decode("ascii")
        if not c.isprintable() and unicodedata.category(c)[0] == "C"
        else c
        for c in text
    )


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
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


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
        self._widths = [
            max([len(h)] + [len(r[i]) for r in self._pending]) for i, h in enumerate(self.headers)
        ]
        self._write(self.headers)
        for row in self._pending:
            self._write(row)
        self._pending = []

    def _write(self, row: list[str]) -> None:
        cells = []
        last = len(row) - 1
        for i, (cell, width) in enumerate(zip(row, self._widths or [])):
            if i == last:
                cells.append(cell)  # no trailing blanks
            elif self.aligns[i] == ">":
                cells.append(cell.rjust(width))
            else:
                cells.append(cell.ljust(width))
        self.out.write("  ".join(cells).rstrip() + "\n")

    def close(self) -> None:
        """Print what is still buffered (nothing at all when there were no rows)."""
        if self._widths is None and self._pending:
            self._start()


MESSAGE_COLUMNS = [
    ("COMMITLOG", ">"),
    ("SIZE", ">"),
    ("TOPIC", "<"),
    ("QUEUE", ">"),
    ("OFFSET", ">"),
    ("STORED", "<"),
    ("MSG_ID", "<"),
    ("TAGS", "<"),
    ("KEYS", "<"),
    ("BODY", "<"),
]


def _message_row(msg: MessageExt) -> list:
    return [
        msg.commitlog_offset,
        msg.size,
        _printable(msg.topic),
        msg.queue_id,
        msg.queue_offset,
        _ms_text(msg.store_timestamp),
        msg.msg_id,
        _printable(msg.tags or ""),
        _printable(msg.keys or ""),
        _body_preview(msg),
    ]


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
            self.out.write(
                json.dumps(message_dict(msg), ensure_ascii=self.ensure_ascii, default=_json_default) + "\n"
            )
        else:
            assert self.table is not None  # made in __init__ when not as_json
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
    _print_fields(
        [
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
        ]
    )
