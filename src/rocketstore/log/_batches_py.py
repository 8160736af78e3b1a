"""Many records under one lock: put_batch, put_many, a timer pass's copies (put_copies) and a
batch of plain Messages, each validated whole before its first byte. Functions of the pure
append core, split out of it by concern.

Part of the pure-Python twin of ``rocketstore.log._store``, gathered by
:mod:`rocketstore.log._store_py`; the compiled twin's is cext/store/batches.pxi.
"""

from __future__ import annotations

import struct

import numpy as np

from rocketstore.base._checks import batch_lengths, contiguous
from rocketstore.errors import (
    InvalidMessageError,
    MessageTooLargeError,
    PropertiesTooLargeError,
    SegmentError,
)
from rocketstore.files.mapped_file import flush_timeout
from rocketstore.log._keyed_py import MAX_PROPERTIES_LENGTH, body_crc, plain_item
from rocketstore.log._results_py import batch_put_result
from rocketstore.log._shared_py import appending
from rocketstore.log._topics_py import topic_entry
from rocketstore.status import PutStatus

_COPY_ROW = struct.Struct("<iiiiiiiiq")
_NO_ITEM = object()
SYSFLAG_TRANSACTION_MASK = 0x0C
WAIT_NONE, WAIT_BLOCK, WAIT_FUTURE = 0, 1, 2
_CREATE_MAPPED_FILE_FAILED = PutStatus.CREATE_MAPPED_FILE_FAILED
_SERVICE_NOT_AVAILABLE = PutStatus.SERVICE_NOT_AVAILABLE


def put_batch(
    core,
    topic,
    bodies,
    lengths=None,
    properties=None,
    queue_id=-1,
    flag=0,
    born_timestamp=0,
    sys_flag=0,
    wait=-1,
):
    core._check_open()
    if core._refusal is not None:
        return core._not_stored(_SERVICE_NOT_AVAILABLE, core._refused(), wait, None)
    t = topic_entry(core, topic)
    if sys_flag & SYSFLAG_TRANSACTION_MASK:
        raise InvalidMessageError("a batch may not be transactional (spec §1.7)")
    props = bytes(properties) if properties is not None else b""
    if len(props) > MAX_PROPERTIES_LENGTH:
        raise PropertiesTooLargeError(
            f"properties are {len(props)} bytes encoded; the limit is {MAX_PROPERTIES_LENGTH}"
        )
    if lengths is not None:
        lens = batch_lengths(lengths)
        whole = memoryview(contiguous(bodies, "bodies")).cast("B")
        if int(lens.sum()) != len(whole):
            raise InvalidMessageError(
                f"lengths sum to {int(lens.sum())} but the bodies buffer holds {len(whole)} bytes"
            )
        starts = np.concatenate(([0], np.cumsum(lens)[:-1])) if len(lens) else lens
        items = [whole[int(s) : int(s) + int(n)] for s, n in zip(starts, lens)]
    else:
        items = [
            b if type(b) is bytes else memoryview(contiguous(b, "an item of bodies")).cast("B")  # type: ignore[misc]
            for b in bodies
        ]
    n = len(items)
    lengths_ = []
    for i, body in enumerate(items):
        if len(body) > core._max_message_size:
            raise MessageTooLargeError(
                f"bodies[{i}] of {len(body)} bytes exceeds max_message_size {core._max_message_size}"
            )
        try:
            lengths_.append(core._validate(t, len(body), props, None, sys_flag))
        except MessageTooLargeError:
            raise MessageTooLargeError(
                f"record {i} exceeds max_message_size {core._max_message_size}"
            ) from None
    if len(props) + core._uniq_extra() > MAX_PROPERTIES_LENGTH:
        raise PropertiesTooLargeError("properties plus UNIQ_KEY exceed 32767 bytes")
    qid = core._choose_queue(t, queue_id)
    crcs = [body_crc(b) for b in items]
    offsets = np.empty(n, dtype=np.int64)
    qoffs = np.empty(n, dtype=np.int64)
    times = np.empty(n, dtype=np.int64)
    sizes = np.empty(n, dtype=np.int32)
    keys = []
    end = 0
    with appending(core):
        core._check_open()
        try:
            core._reserve_space(lengths_)
        except SegmentError as exc:
            return core._not_stored(_CREATE_MAPPED_FILE_FAILED, exc, wait, None)
        first = t.next_offsets[qid]
        for i in range(n):
            r, end = core._append(
                t, qid, items[i], crcs[i], props, None, flag, born_timestamp, sys_flag, 0, 0, lengths_[i]
            )
            offsets[i] = r.commitlog_offset
            sizes[i] = r.size
            qoffs[i] = r.queue_offset
            times[i] = r.store_timestamp
            keys.append(r.unique_key)
    res = batch_put_result(
        topic, qid, first, (offsets, sizes, qoffs, times), keys, core._store_host, core._store_port
    )
    if n == 0:
        return res
    return core._finish(res, end, wait)


def put_many(core, items, wait=-1):
    core._check_open()
    if core._refusal is not None:
        return core._not_stored(_SERVICE_NOT_AVAILABLE, core._refused(), wait, len(items))
    checked = []
    for i, item in enumerate(items):
        topic, body, props, queue_id, flag, born_ts, sys_flag, reconsume, unique_key = item
        t = topic_entry(core, topic)
        qid = core._choose_queue(t, queue_id)
        if len(body) > core._max_message_size:
            raise MessageTooLargeError(
                f"message {i}: body of {len(body)} bytes exceeds max_message_size {core._max_message_size}"
            )
        try:
            length = core._validate(t, len(body), props, unique_key, sys_flag)
        except PropertiesTooLargeError:
            raise PropertiesTooLargeError(f"message {i}: properties exceed 32767 bytes") from None
        except MessageTooLargeError:
            raise MessageTooLargeError(
                f"message {i}: record exceeds max_message_size {core._max_message_size}"
            ) from None
        checked.append(
            (
                t,
                qid,
                body,
                body_crc(body),
                props,
                unique_key,
                flag,
                born_ts,
                sys_flag,
                reconsume,
                0,
                length,
            )
        )
    core._check_open()
    if wait < 0:
        wait = core._default_wait
    results = []
    end = 0
    with appending(core):
        core._check_open()
        try:
            core._reserve_space([args[-1] for args in checked])
        except SegmentError as exc:
            return core._not_stored(_CREATE_MAPPED_FILE_FAILED, exc, wait, len(checked))
        for args in checked:
            r, end = core._append(*args)
            results.append(r)
    if wait == WAIT_BLOCK and results:
        rc = core._wait(end, core._sync_flush_timeout_ms)
        if rc != 0:
            raise flush_timeout(results, rc)
    elif wait == WAIT_FUTURE and results:
        return [core._finish(r, end, WAIT_FUTURE) for r in results]
    return results


def put_copies(core, rows, topics, items):
    """:meth:`put_many` of the copies a timer pass built as rows (the codec's
    ``timer_copy_rows``, any buffer: one row per copy, ``topics`` the names its rows index); a row with
    topic -1 stands for the next entry of ``items``, a put_many item or None (no copy).
    Validated whole before the first byte is written; returns ``(records written, the end
    offset of the last)``; the caller flushes."""
    rows = bytes(rows)  # any buffer
    copies, at, n, left = [], 0, 0, iter(items)
    while at < len(rows):
        if len(rows) - at < _COPY_ROW.size:
            raise ValueError("rows end in a torn row")
        topic, qid, flag, sys_flag, reconsume, body_len, props_len, has_key, born = _COPY_ROW.unpack_from(
            rows, at
        )
        start = at + _COPY_ROW.size
        if body_len < 0 or props_len < 0 or body_len + props_len > len(rows) - start:
            raise ValueError(f"row {n}: its lengths overrun the rows")
        at = start + body_len + props_len
        n += 1
        if topic == -1:
            item = next(left, _NO_ITEM)
            if item is _NO_ITEM:
                raise ValueError("fewer items than rows that stand for one")
            if item is not None:
                copies.append(item)
            continue
        if not 0 <= topic < len(topics):
            raise ValueError(f"row {n - 1}: topic {topic} is not one of the {len(topics)} topics")
        body, props = rows[start : start + body_len], rows[start + body_len : at]
        key = True if has_key else None
        copies.append((topics[topic], body, props, qid, flag, born, sys_flag, reconsume, key))
    if next(left, _NO_ITEM) is not _NO_ITEM:
        raise ValueError("more items than rows that stand for one")
    if not copies:
        return 0, 0
    results = put_many(core, copies, WAIT_NONE)
    last = results[-1]
    return len(results), last.commitlog_offset + last.size


def put_plain_messages(core, messages, user_topics, wait=-1):
    """:meth:`put_many` of a batch of plain :class:`rocketstore.Message` objects (an exact
    Message of a topic in ``user_topics``, a bytes body, tags, keys and properties as
    :func:`keyed_properties` takes them, sys_flag and reconsume_times 0, queue id, flag and
    born timestamp exact ints in range); None, having written nothing, when the batch is
    empty or a message is not plain (the caller then takes the general path)."""
    items = []
    for m in messages:
        item = plain_item(m, user_topics)
        if item is None:
            return None
        items.append(item)
    if not items:
        return None
    return put_many(core, items, wait)
