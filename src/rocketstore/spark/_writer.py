"""The batch and streaming sinks: tasks stage Arrow IPC files, the driver appends them under the store's lock."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any, Optional

from rocketstore.files._files import replace_file
from rocketstore.spark._options import _int_option, _store_paths
from rocketstore.spark._pyspark import (
    _STREAM_ARROW,
    DataSourceArrowWriter,
    WriterCommitMessage,
    _StreamWriterBase,
)

# ---------------------------------------------------------------------------------------------
# Batch write: tasks stage Arrow IPC files, the driver appends them under the store's lock


@dataclass
class StagedPart(WriterCommitMessage):
    path: str
    rows: int
    partition_id: int


#: A sink's staging directory is a uuid4 hex: only such directories are ever deleted as stale.
_STAGING_NAME = re.compile(r"[0-9a-f]{32}")
DEFAULT_STAGING_RETENTION_MINUTES = 24 * 60

_WRITE_COLUMNS = ("topic", "body", "tags", "keys", "properties", "queueId", "flag")


class _StagingSink:
    """What the batch and the streaming sink share: the checked options, the job's staging
    directory, and appending the staged parts to an open store in partition order."""

    def __init__(self, options, columns):
        import uuid

        self.path = _store_paths(options)[0]
        self.topic = options.get("topic")
        if "body" in columns and "value" in columns:
            raise ValueError(
                "writing to rocketstore takes either rocketstore's columns (body, ...) or Kafka's "
                "(value, key, headers, partition), not both: this DataFrame has body and value"
            )
        if "body" not in columns and "value" not in columns:
            raise ValueError(
                "writing to rocketstore needs a body column (binary or string), or Kafka's value column"
            )
        if self.topic is None and "topic" not in columns:
            raise ValueError("writing to rocketstore needs a topic column or the topic option")
        self.staging_root = options.get("staging") or os.path.join(self.path, ".spark-staging")
        self.staging = os.path.join(self.staging_root, uuid.uuid4().hex)
        minutes = _int_option(options, "stagingRetentionMinutes", DEFAULT_STAGING_RETENTION_MINUTES)
        self.staging_retention_s = 60 * minutes

    def _append_parts(self, store, messages, skip: int = 0) -> None:
        """Append the staged parts in partition order, leaving out their first ``skip`` rows."""
        parts = sorted((m for m in messages if m is not None and m.path), key=lambda m: m.partition_id)
        for part in parts:
            if skip >= part.rows:
                skip -= part.rows
                continue
            _append_part(store, part.path, self.topic, skip)
            skip = 0
        store.flush()

    def _remove_stale_staging(self) -> list:
        """Delete the staging directories of other jobs that nothing has written to for
        ``stagingRetentionMinutes`` (a crashed driver's leftovers; a job still running writes
        its parts, so its newest file stays younger). Returns the directories deleted."""
        import shutil
        import time

        cutoff = time.time() - self.staging_retention_s
        removed: list[str] = []
        try:
            entries = list(os.scandir(self.staging_root))
        except FileNotFoundError:
            return removed
        for entry in entries:
            if (
                entry.path == self.staging
                or not _STAGING_NAME.fullmatch(entry.name)
                or not entry.is_dir(follow_symlinks=False)
            ):
                continue
            try:
                newest = max(
                    [entry.stat(follow_symlinks=False).st_mtime]
                    + [f.stat(follow_symlinks=False).st_mtime for f in os.scandir(entry.path)]
                )
            except FileNotFoundError:
                continue  # its own job finished meanwhile
            if newest < cutoff:
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.path)
        return removed


class RocketStoreWriter(_StagingSink, DataSourceArrowWriter):
    """``df.write.format("rocketstore").mode("append").save(path)``.

    Input columns: ``body`` (binary or string, required), ``topic`` (unless the ``topic`` option
    is set; the option wins), optional ``tags``, ``keys``, ``properties`` (map), ``queueId``,
    ``flag``; other columns are ignored. Each task writes its rows to an Arrow IPC file under
    ``<store>/.spark-staging/<job>`` (option ``staging``: another root); the driver's commit
    opens the store (taking its single-writer lock) and appends every part in partition order,
    so a failed job writes nothing. ``abort`` deletes the staged files. A commit also deletes
    the staging directories of other jobs untouched for ``stagingRetentionMinutes`` (default
    1440): what a driver that crashed before its commit or abort left behind. The sink does this
    rather than the store's open, because the store knows nothing of Spark jobs.
    """

    def write(self, iterator):
        return _stage(self.staging, iterator)

    def commit(self, messages):
        from rocketstore.store import MessageStore

        try:
            with MessageStore(self.path) as store:
                self._append_parts(store, messages)
        finally:
            self._clean(messages)
        self._remove_stale_staging()

    def abort(self, messages):
        self._clean(messages)

    def _clean(self, messages):
        import shutil

        shutil.rmtree(self.staging, ignore_errors=True)


def _stage(staging: str, iterator) -> StagedPart:
    """Write one task's Arrow batches to an Arrow IPC file under ``staging``."""
    import uuid

    import pyarrow as pa
    from pyspark import TaskContext

    ctx = TaskContext.get()
    partition_id = ctx.partitionId() if ctx is not None else 0
    os.makedirs(staging, exist_ok=True)
    path = os.path.join(staging, f"part-{partition_id:05d}-{uuid.uuid4().hex}.arrow")
    rows = 0
    writer = None
    try:
        for batch in iterator:
            if "value" in batch.schema.names and "body" not in batch.schema.names:
                batch = _from_kafka_columns(batch)
            keep = [c for c in _WRITE_COLUMNS if c in batch.schema.names]
            batch = batch.select(keep)
            if writer is None:
                writer = pa.ipc.new_stream(path, batch.schema)
            writer.write_batch(batch)
            rows += batch.num_rows
    finally:
        if writer is not None:
            writer.close()
    return StagedPart(path if writer is not None else "", rows, partition_id)


def _from_kafka_columns(batch):
    """Kafka's sink columns as rocketstore's: value -> body, key -> keys (the KEYS property,
    UTF-8), partition -> queueId, headers -> properties (each header a property; a value must be
    non-empty UTF-8, as a RocketMQ property's is; a key column wins over a KEYS header)."""
    import pyarrow as pa

    names = batch.schema.names
    arrays = {"body": batch.column("value")}
    if "topic" in names:
        arrays["topic"] = batch.column("topic")
    if "key" in names:
        arrays["keys"] = _utf8(batch.column("key"), "key")
    if "partition" in names:
        arrays["queueId"] = batch.column("partition").cast(pa.int32())
    if "headers" in names:
        properties = []
        for row in batch.column("headers").to_pylist():
            entries = {}
            for header in row or ():
                name, value = header["key"], header["value"]
                if name is None or value is None:
                    raise ValueError(f"a header to write has a null key or value: {header!r}")
                try:
                    entries[name] = value.decode("utf-8") if isinstance(value, bytes) else value
                except UnicodeDecodeError:
                    raise ValueError(
                        f"header {name!r} has a value that is not UTF-8 ({value[:32]!r}); "
                        "a RocketMQ property is text"
                    ) from None
            properties.append(list(entries.items()) or None)
        arrays["properties"] = pa.array(properties, type=pa.map_(pa.string(), pa.string()))
    return pa.RecordBatch.from_arrays(list(arrays.values()), names=list(arrays))


def _utf8(column, name: str):
    import pyarrow as pa

    if pa.types.is_string(column.type):
        return column
    try:
        return column.cast(pa.string())
    except pa.ArrowInvalid:
        raise ValueError(
            f"a {name} to write is not UTF-8: rocketstore keeps it as the KEYS property, which is text"
        ) from None


def _rows_to_batches(rows, batch_rows: int = 8192):
    """4.0's row-based stream writer: ``Row`` objects -> Arrow batches of the write columns."""
    import pyarrow as pa

    chunk = []
    for row in rows:
        chunk.append(row.asDict())
        if len(chunk) >= batch_rows:
            yield pa.RecordBatch.from_pylist(chunk)
            chunk = []
    if chunk:
        yield pa.RecordBatch.from_pylist(chunk)


# ---------------------------------------------------------------------------------------------
# Streaming write: the batch sink's staging, plus the last committed batch id kept in the store

SINK_COMMITS_FILE = "sparkSinkCommits.json"


def _sink_commits_path(root: str) -> str:
    return os.path.join(root, "config", SINK_COMMITS_FILE)


def read_sink_commits(root: str) -> dict:
    """``{sinkId: lastCommittedBatchId}`` of the streaming sinks that wrote into the store at ``root``."""
    return _read_sink_state(root)[0]


def _read_sink_state(root: str) -> tuple[dict, dict]:
    """(``{sinkId: last batch id}``, ``{sinkId: {"batch", "start", "rows"}}`` of the appends
    begun and not yet recorded as done)."""
    try:
        with open(_sink_commits_path(root), encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}, {}
    if data.get("v") != 1:
        raise ValueError(f"{_sink_commits_path(root)}: unknown version {data.get('v')!r}")
    return (
        {str(k): int(v) for k, v in data["sinks"].items()},
        {str(k): {n: int(x) for n, x in v.items()} for k, v in data.get("pending", {}).items()},
    )


def _write_sink_commits(root: str, commits: dict, pending: Optional[dict] = None) -> None:
    """Replace the file whole (:func:`rocketstore.files._files.replace_file`)."""
    state = {"v": 1, "sinks": commits}
    if pending:
        state["pending"] = pending
    replace_file(_sink_commits_path(root), json.dumps(state, indent=1, sort_keys=True).encode("utf-8"))


class RocketStoreStreamWriter(_StagingSink, _StreamWriterBase):
    """``df.writeStream.format("rocketstore").option("checkpointLocation", ck).start(path)``.

    Same input columns and staging as the batch sink. ``commit(messages, batchId)`` runs on the
    driver under the store's single-writer lock: a batch id at or below the one recorded for this
    sink in ``<store>/config/sparkSinkCommits.json`` is a replay (Spark re-runs a micro-batch
    whose commit it did not log) and is dropped; otherwise the parts are appended, flushed, and
    the batch id recorded (file replaced atomically). The sink id is the option ``sinkId``, else
    the ``checkpointLocation``, else ``queryName``.

    Before appending, the same file records the batch as pending with the CommitLog end offset
    and its row count. A crash before the batch id is recorded leaves that entry; when Spark
    replays the batch, the records stored since that offset are the ones that landed, and only
    the rows after them are appended, so the batch is stored exactly once. This assumes that
    (a) the replay stages the same rows in the same partition order (Spark replays a micro-batch
    from the same offsets; a deterministic query gives the same rows) and (b) nothing else
    wrote to the store between the crash and the replay: more records than the batch has
    raise rather than guess.
    """

    def __init__(self, options, columns):
        super().__init__(options, columns)
        self.sink_id = (
            options.get("sinkid")
            or options.get("checkpointlocation")
            or options.get("queryname")
            or "default"
        )

    def write(self, iterator):
        return _stage(self.staging, iterator if _STREAM_ARROW else _rows_to_batches(iterator))

    def commit(self, messages, batchId) -> None:
        from rocketstore.store import MessageStore

        try:
            with MessageStore(self.path) as store:
                commits, pending = _read_sink_state(self.path)
                last = commits.get(self.sink_id)
                if last is not None and batchId <= last:
                    return  # a replayed micro-batch: written already
                rows = sum(m.rows for m in messages if m is not None and m.path)
                begun = pending.get(self.sink_id)
                landed = 0
                if begun is not None and begun["batch"] == batchId:
                    # this batch's append was begun and its end not recorded: a crash
                    landed = sum(len(records) for _base, records in store.scan(begun["start"]))
                    if landed > begun["rows"] or begun["rows"] != rows:
                        raise RuntimeError(
                            f"streaming sink {self.sink_id!r}: batch {batchId} was begun at CommitLog "
                            f"offset {begun['start']} with {begun['rows']} rows; the replay has {rows} "
                            f"and {landed} records follow that offset, so what landed cannot be told"
                        )
                else:
                    pending[self.sink_id] = {"batch": int(batchId), "start": store.max_offset, "rows": rows}
                    _write_sink_commits(self.path, commits, pending)
                self._append_parts(store, messages, skip=landed)
                commits[self.sink_id] = int(batchId)
                pending.pop(self.sink_id, None)
                _write_sink_commits(self.path, commits, pending)
        finally:
            _remove_parts(self.staging, messages)
        self._remove_stale_staging()

    def abort(self, messages, batchId) -> None:
        _remove_parts(self.staging, messages)


def _remove_parts(staging: str, messages) -> None:
    for m in messages or ():
        if m is not None and m.path:
            try:
                os.remove(m.path)
            except FileNotFoundError:
                pass
    try:
        os.rmdir(staging)
    except OSError:
        pass


_PER_ROW_COLUMNS = ("tags", "keys", "properties", "flag")
#: Rows without a queueId go to the store's round-robin queue in runs of this many (one
#: put_batch each), not row by row.
FAST_RUN_ROWS = 4096


def _bodies_only(batch) -> bool:
    """True when no row carries tags, keys, properties or a flag (then put_batch can store it)."""
    for name in _PER_ROW_COLUMNS:
        if name in batch.schema.names and batch.column(name).null_count != batch.num_rows:
            return False
    return True


def _put_runs(store, batch, topic_option: Optional[str]) -> None:
    """One ``put_batch`` per run of rows with the same (topic, queueId), the bodies handed over
    as one buffer and their lengths: no Python object per row."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = batch.num_rows
    bodies = batch.column("body")
    if bodies.null_count:
        raise ValueError("a row to write has a null body")
    if not pa.types.is_binary(bodies.type):
        bodies = bodies.cast(pa.binary())
    cuts = {0, n}
    if topic_option:
        topics = None
    else:
        topics = batch.column("topic")
        if topics.null_count:
            raise ValueError("a row to write has a null topic")
        change = np.flatnonzero(pc.not_equal(topics[1:], topics[:-1]).to_numpy(zero_copy_only=False))
        cuts.update((change + 1).tolist())
    qids = None
    if "queueId" in batch.schema.names and batch.column("queueId").null_count != n:
        qids = batch.column("queueId").fill_null(-1).to_numpy().astype(np.int64)
        cuts.update((np.flatnonzero(qids[1:] != qids[:-1]) + 1).tolist())
    bounds = sorted(cuts)
    offset_buffer: Any = bodies.buffers()[1]  # a binary array always has its offsets buffer
    offsets = np.frombuffer(offset_buffer, dtype=np.int32)[bodies.offset : bodies.offset + n + 1]
    # every row's length once, as the int64 put_batch takes (its slices need no conversion)
    lengths = np.diff(offsets.astype(np.int64))
    data = memoryview(bodies.buffers()[2]) if bodies.buffers()[2] is not None else memoryview(b"")
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        topic = topic_option or topics[lo].as_py()  # type: ignore[index]  # no topic column: topic_option
        queue_id = -1 if qids is None else int(qids[lo])
        step = hi - lo if queue_id >= 0 else FAST_RUN_ROWS
        for a in range(lo, hi, step):
            b = min(hi, a + step)
            store.put_batch(
                topic, data[int(offsets[a]) : int(offsets[b])], lengths=lengths[a:b], queue_id=queue_id
            )


def _append_part(store, path: str, topic_option: Optional[str], skip: int = 0) -> int:
    """Append one staged Arrow IPC file to ``store``, but for its first ``skip`` rows; returns
    the rows written. Batches whose rows carry only topic, body and queueId go through
    ``put_batch`` per (topic, queue) run; others through ``put_messages``, a ``Message`` per row."""
    import pyarrow as pa

    from rocketstore import Message  # the implementation's own: its put_messages reads it fastest

    written = 0
    with pa.memory_map(path) as source:
        reader = pa.ipc.open_stream(source)
        for batch in reader:
            if skip:
                cut = min(skip, batch.num_rows)
                batch, skip = batch.slice(cut), skip - cut
                if not batch.num_rows:
                    continue
            if batch.num_rows and _bodies_only(batch):
                _put_runs(store, batch, topic_option)
                written += batch.num_rows
                continue
            data = batch.to_pydict()
            n = batch.num_rows
            topics = [topic_option] * n if topic_option else data["topic"]
            bodies = data["body"]
            tags = data.get("tags", [None] * n)
            keys = data.get("keys", [None] * n)
            props = data.get("properties", [None] * n)
            qids = data.get("queueId", [None] * n)
            flags = data.get("flag", [None] * n)
            messages = []
            for i in range(n):
                body = bodies[i]
                if body is None:
                    raise ValueError("a row to write has a null body")
                if isinstance(body, str):
                    body = body.encode("utf-8")
                p = props[i]
                messages.append(
                    Message(
                        topics[i],
                        body,
                        tags=tags[i],
                        keys=keys[i],
                        properties=(dict(p) if p else None),
                        queue_id=-1 if qids[i] is None else int(qids[i]),
                        flag=0 if flags[i] is None else int(flags[i]),
                    )
                )
            if messages:
                store.put_messages(messages)
            written += n
    return written
