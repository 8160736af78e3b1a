"""``rocketstore export``: messages to Parquet (the ``parquet`` extra: pyarrow) or JSON lines."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import Optional

from rocketstore.cli._commands import _messages
from rocketstore.cli._common import (
    EXIT_OK,
    EXIT_USAGE,
    PARQUET_BATCH_ROWS,
    CliError,
    _require_topic,
    open_store,
)
from rocketstore.cli._output import MessageOutput, Progress, _host_text, _is_terminal, _n, _print_json
from rocketstore.lowlevel import inner_messages
from rocketstore.message import MessageExt
from rocketstore.store import MessageStore

_PARQUET_FIELDS = (
    "topic",
    "queue_id",
    "queue_offset",
    "commitlog_offset",
    "size",
    "msg_id",
    "unique_key",
    "keys",
    "tags",
    "flag",
    "sys_flag",
    "born_timestamp",
    "born_host",
    "store_timestamp",
    "store_host",
    "reconsume_times",
    "prepared_transaction_offset",
    "body_crc",
    "properties",
    "body",
)


def _parquet_schema(pa):
    ts = pa.timestamp("ms", tz="UTC")
    types = {
        "topic": pa.string(),
        "queue_id": pa.int32(),
        "queue_offset": pa.int64(),
        "commitlog_offset": pa.int64(),
        "size": pa.int32(),
        "msg_id": pa.string(),
        "unique_key": pa.string(),
        "keys": pa.string(),
        "tags": pa.string(),
        "flag": pa.int32(),
        "sys_flag": pa.int32(),
        "born_timestamp": ts,
        "born_host": pa.string(),
        "store_timestamp": ts,
        "store_host": pa.string(),
        "reconsume_times": pa.int32(),
        "prepared_transaction_offset": pa.int64(),
        "body_crc": pa.int32(),
        "properties": pa.map_(pa.string(), pa.string()),
        "body": pa.binary(),
    }
    return pa.schema([(name, types[name]) for name in _PARQUET_FIELDS])


def _import_pyarrow():
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise CliError(
            "Parquet export needs pyarrow, which is not installed "
            "(pip install pyarrow); or export JSON lines with --format jsonl"
        ) from None
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
        for name in (
            "topic",
            "queue_id",
            "queue_offset",
            "commitlog_offset",
            "size",
            "flag",
            "sys_flag",
            "born_timestamp",
            "store_timestamp",
            "reconsume_times",
            "prepared_transaction_offset",
            "body_crc",
        ):
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
        # closed by close(): the sink outlives any with-block here
        self.stream = sys.stdout if path is None else open(path, "w", encoding="utf-8", newline="\n")  # noqa: SIM115
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
        os.chmod(tmp, 0o666 & ~mask)  # what open() would have created
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
            for msg in _messages(
                store, store.min_offset, store.max_offset, topics, args.begin, args.end, bar
            ):
                for one in inner_messages(msg):  # a BatchCQ inner batch: each of its messages
                    sink.write(one)
    finally:
        sink.close()
    return sink.count


def cmd_export(args) -> int:
    fmt = _export_format(args)
    to_stdout = args.output in (None, "-")
    if fmt == "parquet":
        if to_stdout:
            raise CliError("Parquet export needs an output file: -o FILE.parquet", EXIT_USAGE)
        _import_pyarrow()  # before any file is created
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
