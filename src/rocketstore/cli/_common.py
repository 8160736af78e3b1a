"""Exit statuses, limits, the user-facing error, and opening the store the way every command does."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Optional

from rocketstore.config import default_store_path
from rocketstore.errors import FlushTimeoutError, NotAStoreError, StoreLockedError
from rocketstore.store import MessageStore, check_store_dir

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


def open_store(
    args,
    *,
    writable: bool = False,
    create: bool = False,
    join: bool = True,
    progress: Optional[Callable[[str, int, int], None]] = None,
) -> MessageStore:
    """The store of ``--store``: read-only unless ``writable``; ``create`` lets ``put`` start one.
    A writable open joins a process that writes the store (rocketstore.processes.writers) unless not
    ``join`` (``recover``, which must be the writer itself)."""
    path = _store_path(args)
    _check_store_dir(path, may_create=create)
    try:
        if writable and not join:
            return MessageStore(path, progress=progress, shared_writers=False)
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


def _check_queue_offset(
    topic: str, queue_id: int, offset: int, bounds: tuple[int, int], allow_end: bool = False
) -> None:
    lo, hi = bounds
    if lo <= offset < hi or (allow_end and offset == hi):
        return
    held = f"holds offsets {lo}..{hi - 1}" if hi > lo else "is empty"
    raise CliError(f"offset {offset} is out of range: queue {queue_id} of {topic!r} {held}")


# ---------------------------------------------------------------------------------------------
# Reporting


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
