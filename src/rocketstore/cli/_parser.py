"""The argument parser: every command, its options and their types."""

from __future__ import annotations

import argparse
import datetime

import rocketstore
from rocketstore._impl import describe
from rocketstore.cli._commands import (
    cmd_consume,
    cmd_dump,
    cmd_put,
    cmd_query_by_id,
    cmd_query_by_key,
    cmd_query_by_offset,
    cmd_query_by_unique_key,
    cmd_recover,
    cmd_stats,
    cmd_verify,
)
from rocketstore.cli._common import EXIT_USAGE, MAX_KEY_RESULTS, PULL_BATCH
from rocketstore.cli._export import cmd_export
from rocketstore.cli._quickstart import DEFAULT_COUNT, cmd_quickstart

# ---------------------------------------------------------------------------------------------
# Arguments


class _Parser(argparse.ArgumentParser):
    """Bad arguments: one line on stderr (with the way to the help), exit status 2."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


_INT64_MAX = (1 << 63) - 1
DEFAULT_BODY_LIMIT = 4 << 20  # quickstart's bodies: the default max_message_size
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
_queue = _int_at_least(0, "a queue id", _INT32_MAX)  # a Java int


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
            f"{text!r} is neither milliseconds since the epoch nor an ISO 8601 time"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return (moment - _EPOCH) // datetime.timedelta(milliseconds=1)


def build_parser() -> argparse.ArgumentParser:
    # --store and --json are accepted after the command too; SUPPRESS keeps a sub-command's
    # absent option from overwriting the one given before it.
    late = _Parser(add_help=False)
    late.add_argument(
        "--store",
        metavar="DIR",
        default=argparse.SUPPRESS,
        help="store directory (default: $ROCKETSTORE_HOME, else ~/store)",
    )

    parser = _Parser(
        prog="rocketstore",
        description="Query, consume, check and export a RocketMQ-format message store, straight from its files.",
        epilog="Exit status: 0 done; 1 error, nothing found, or verify found problems; 2 bad arguments. "
        "Every command but put, recover, quickstart and consume --commit opens the store read-only.",
    )
    parser.add_argument(
        "--store",
        metavar="DIR",
        default=None,
        help="store directory (default: $ROCKETSTORE_HOME, else ~/store)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=False,
        help="print JSON (each command's help says what it prints)",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"rocketstore {rocketstore.__version__} ({describe(rocketstore.IMPLEMENTATION)})",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    per_message = "print JSON lines: one object per message"

    def command(name, handler, help, aliases=(), json_help="print one JSON object"):
        p = sub.add_parser(name, aliases=list(aliases), parents=[late], help=help, description=help)
        p.set_defaults(handler=handler)
        # --json after the command too; what it prints differs by command
        p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=json_help)
        return p

    p = command(
        "put",
        cmd_put,
        "store one message (creates the store and the topic if needed)",
        json_help="print the put's result as one JSON object",
    )
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("body", metavar="BODY", help="the body as text; '-' reads it from stdin")
    p.add_argument("--tags", metavar="T")
    p.add_argument("--keys", metavar="'K1 K2'", help="space-separated keys (indexed for query-by-key)")
    p.add_argument("--queue", type=_queue, metavar="N", help="queue id (default: round robin)")
    p.add_argument("--property", action="append", metavar="K=V", help="a user property (repeatable)")
    p.add_argument("--sync", action="store_true", help="wait until the message is flushed to disk")

    p = command(
        "query-by-key",
        cmd_query_by_key,
        "messages of TOPIC with KEY among their keys (or as UNIQ_KEY)",
        aliases=["queryMsgByKey"],
        json_help=per_message,
    )
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("key", metavar="KEY")
    p.add_argument(
        "--max",
        type=_count,
        default=MAX_KEY_RESULTS,
        metavar="N",
        help=f"at most N messages (default {MAX_KEY_RESULTS}, what mqadmin's queryMsgByKey shows; any N is honoured)",
    )
    p.add_argument("--begin", type=_time_ms, metavar="MS", help="stored at or after (ms, or ISO 8601 time)")
    p.add_argument("--end", type=_time_ms, metavar="MS", help="stored at or before (ms, or ISO 8601 time)")

    p = command(
        "query-by-id",
        cmd_query_by_id,
        "the message with this offsetMsgId (or client msgId/UNIQ_KEY)",
        aliases=["queryMsgById"],
        json_help="print the message as one JSON object",
    )
    p.add_argument("msg_id", metavar="MSG_ID")
    p.add_argument(
        "--topic", metavar="TOPIC", help="where to look when MSG_ID is a UNIQ_KEY (default: every topic)"
    )

    p = command(
        "query-by-unique-key",
        cmd_query_by_unique_key,
        "the message of TOPIC with this UNIQ_KEY (client msgId)",
        aliases=["queryMsgByUniqueKey"],
        json_help="print the message as one JSON object",
    )
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("unique_key", metavar="UNIQ_KEY")

    p = command(
        "query-by-offset",
        cmd_query_by_offset,
        "the message at OFFSET of queue QUEUE_ID of TOPIC",
        aliases=["queryMsgByOffset"],
        json_help="print the message as one JSON object",
    )
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("queue_id", type=_queue, metavar="QUEUE_ID")
    p.add_argument("offset", type=_offset, metavar="OFFSET")

    p = command(
        "consume",
        cmd_consume,
        "pull messages of TOPIC for a consumer group, from its committed offsets",
        json_help=per_message,
    )
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--group", required=True, metavar="G", help="consumer group")
    p.add_argument("--queue", type=_queue, metavar="N", help="only this queue (default: every queue)")
    p.add_argument(
        "--from",
        dest="from_offset",
        type=_offset,
        metavar="OFFSET",
        help="start at this queue offset (default: the group's committed offset, else the first)",
    )
    p.add_argument(
        "--max",
        type=_count,
        default=PULL_BATCH,
        metavar="N",
        help=f"at most N messages (default {PULL_BATCH})",
    )
    p.add_argument("--tags", metavar="EXPR", help="tag expression: '*' or 'TagA || TagB'")
    p.add_argument(
        "--commit", action="store_true", help="commit the group's next offsets (opens the store for writing)"
    )
    p.add_argument(
        "--follow",
        action="store_true",
        help="then keep printing messages as they are put, until --max or Ctrl-C (with --commit, "
        "committing after each batch)",
    )

    command(
        "stats",
        cmd_stats,
        "topics, queues, segments, bytes, consumer lag per group and what holds each topic's oldest segment",
        aliases=["info"],
    )
    command(
        "verify",
        cmd_verify,
        "check the CRCs, structure and fields of every record and queue unit "
        "(exit status 0 only if all is well)",
    )
    command(
        "recover", cmd_recover, "run recovery now: cut a torn tail, rebuild missing ConsumeQueues and index"
    )

    p = command(
        "dump", cmd_dump, "records in CommitLog order, as a table or JSON lines", json_help=per_message
    )
    p.add_argument(
        "--from",
        dest="from_offset",
        type=_offset,
        metavar="OFFSET",
        help="first CommitLog offset (default: the first record)",
    )
    p.add_argument(
        "--to",
        dest="to_offset",
        type=_offset,
        metavar="OFFSET",
        help="stop before this CommitLog offset (default: the end)",
    )
    p.add_argument("--topic", action="append", metavar="TOPIC", help="only this topic (repeatable)")
    p.add_argument("--max", type=_count, metavar="N", help="at most N records")

    p = command(
        "export",
        cmd_export,
        "messages to JSON lines or Parquet, filtered by topic and store time",
        json_help="print the export's summary as one JSON object (the file's format is --format)",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="output file (default: stdout, JSON lines)")
    p.add_argument(
        "--format", choices=("jsonl", "parquet"), help="default: parquet for a .parquet file, else jsonl"
    )
    p.add_argument("--topic", action="append", metavar="TOPIC", help="only this topic (repeatable)")
    p.add_argument("--begin", type=_time_ms, metavar="MS", help="stored at or after (ms, or ISO 8601 time)")
    p.add_argument("--end", type=_time_ms, metavar="MS", help="stored at or before (ms, or ISO 8601 time)")

    p = command(
        "quickstart",
        cmd_quickstart,
        f"write 3.1 x N messages (N = {DEFAULT_COUNT:,} by default: ~85 MB of records, ~150 MB on disk), consume and query "
        "them, and print the rates; the store stays unless --cleanup",
        json_help="print the steps' figures as one JSON object",
    )
    p.add_argument(
        "--count",
        type=_count,
        default=DEFAULT_COUNT,
        metavar="N",
        help="messages per kind of put (plain, tagged and keyed, batched; a tenth durable)",
    )
    p.add_argument(
        "--cleanup", action="store_true", help="delete the store afterwards, if this run created it"
    )
    p.add_argument(
        "--body-size", type=_int_at_least(0, "a size", DEFAULT_BODY_LIMIT), default=128, metavar="BYTES"
    )
    return parser
