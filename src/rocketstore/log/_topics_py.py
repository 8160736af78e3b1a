"""The append core's topics and their queue offsets, alone or in the shared append table.

Part of the pure-Python twin of ``rocketstore.log._store``, gathered by
:mod:`rocketstore.log._store_py`; the compiled twin's is cext/store/topics.pxi.
"""

from __future__ import annotations

import struct
from typing import Any

from rocketstore.log import sharedappend as _ap
from rocketstore.log._keyed_py import body_crc
from rocketstore.log._live_py import LIVE_SLOTS


class Topic:
    """One topic of the core: its queue count, next queue offsets and round-robin position (its
    entry's views in the shared append table once attached)."""

    __slots__ = ("name", "nqueues", "next_offsets", "rr", "slot", "committed", "entry", "dirty", "shared_nq")

    def __init__(self, name, nqueues):
        self.name = name.encode("utf-8")
        self.slot = body_crc(self.name) % LIVE_SLOTS  # its live page slot
        self.nqueues = nqueues
        self.next_offsets: Any = [0] * max(1, nqueues)
        self.rr = 0
        # in the shared append table (rocketstore.log.sharedappend): its next[] and committed[] as
        # int64 views, the entry's offset, and the queues moved in the current append
        self.committed: Any = None
        self.entry = -1
        self.dirty = set()
        self.shared_nq: Any = None  # its queue count in the table (an int32 view), once attached

    def attach(self, table, at):
        whole = memoryview(table)
        self.next_offsets = whole[at + _ap.E_NEXT : at + _ap.E_NEXT + 8 * _ap.QUEUES].cast("q")
        self.committed = whole[at + _ap.E_COMMITTED : at + _ap.E_COMMITTED + 8 * _ap.QUEUES].cast("q")
        self.shared_nq = whole[at + _ap.E_NQUEUES : at + _ap.E_NQUEUES + 4].cast("i")
        self.entry = at


def topic_entry(core, topic):
    t = core._topics.get(topic)
    if t is not None:
        if t.shared_nq is not None:  # (the table's map, also after unshare(), as the compiled twin)
            shared = t.shared_nq[0]
            if shared > 0:
                t.nqueues = shared  # the owner changed the count
        return t
    nqueues = core._topic_lookup(topic)
    if core._share is not None:
        return shared_topic(core, topic, nqueues)
    t = Topic(topic, nqueues)
    for qid, nxt in core._pending.pop(topic, {}).items():
        if 0 <= qid < t.nqueues:
            t.next_offsets[qid] = nxt
    # another thread may have created the entry meanwhile: keep the first one
    return core._topics.setdefault(topic, t)


def set_queue_offset(core, topic, queue_id, next_offset):
    t = core._topics.get(topic)
    if t is not None and 0 <= queue_id < len(t.next_offsets):
        t.next_offsets[queue_id] = next_offset
    else:
        core._pending.setdefault(topic, {})[queue_id] = next_offset


def queue_offsets(core):
    out = {}
    for name, t in list(core._topics.items()):
        for q, nxt in enumerate(t.next_offsets):
            if nxt:
                out[(name, q)] = nxt
    for name, qs in core._pending.items():
        for q, nxt in qs.items():
            out.setdefault((name, q), nxt)
    return out


def forget_topic(core, topic):
    """Take the new queue count of ``topic`` after it changed. The cached entry is changed
    in place under the append lock (never replaced: a put holding the old entry would hand
    out queue offsets again); its offsets are kept, also those of queues beyond a smaller
    count, which a put that chose its queue before the change may still use."""
    nqueues = core._topic_lookup(topic)
    with core._lock:
        t = core._topics.get(topic)
        if t is None:
            return
        have = len(t.next_offsets)
        if t.shared_nq is not None:  # in the shared table: it holds QUEUES queues
            nqueues = min(nqueues, _ap.QUEUES)
            t.shared_nq[0] = nqueues
        elif nqueues > have:
            t.next_offsets.extend([0] * (nqueues - have))
            pending = core._pending.get(topic, {})
            for qid in range(have, nqueues):
                if qid in pending:
                    t.next_offsets[qid] = pending.pop(qid)
        t.nqueues = nqueues


def shared_topic(core, topic, nqueues):
    name = topic.encode("utf-8")
    table = core._share
    with core._lock:
        t = core._topics.get(topic)
        if t is not None:
            return t
        core._mutex.lock()
        try:
            if struct.unpack_from("<Q", table, _ap.O_EPOCH)[0] != core._epoch:
                raise _ap.StaleTable("the store's writing process is opening, closing or gone")
            at = _ap.find(table, name)
            if at < 0 and nqueues <= _ap.QUEUES and not struct.unpack_from("<I", table, _ap.O_FULL)[0]:
                at = _ap.add(table, name, nqueues)
            elif at >= 0 and struct.unpack_from("<i", table, at + _ap.E_NQUEUES)[0] < 0:
                at = -1
            if at < 0 and not core._share_owner:
                raise _ap.NotShareable(f"topic {topic!r} is not in the shared append table")
        finally:
            core._mutex.unlock()
        t = Topic(topic, nqueues)
        if at >= 0:
            t.attach(table, at)
            if struct.unpack_from("<i", table, at + _ap.E_NQUEUES)[0] == 0:
                struct.pack_into("<i", table, at + _ap.E_NQUEUES, nqueues)
        core._topics[topic] = t
        return t
