"""Issue 15: a message handed out by queue position is the one stored there, or the call says it
is missing, after power cuts, damage and bad checkpoints; read-only and writable; both twins.

Each case builds a store whose message at queue offset ``q`` of ``(topic, queue)`` has the body
``b"<topic>-<queue>-<q>"``, damages it the way a power cut, a careless copy or bit rot would,
opens it, and checks every position through ``get_by_queue_offset`` and a consumer pulling the
queue from 0 (:func:`check_queues`).
"""

import os
import shutil
import struct

import pytest

from rocketstore import MessageStore
from rocketstore.checkpoint import Checkpoint
from rocketstore.errors import MessageNotFoundError

SEGMENT = 8192
UNITS = 10                       # 200-byte ConsumeQueue files: a queue rolls every 10 messages
OPTIONS = dict(commitlog_file_size=SEGMENT, consume_queue_units=UNITS, store_host="10.0.0.7",
               dispatch_interval_ms=0, clean_resource_interval_ms=0, schedule_interval_ms=0)


def body_of(topic, queue_id, q):
    return f"{topic}-{queue_id}-{q}".encode()


def put_round(store, topics, per_queue, queues=1):
    """``per_queue`` more messages into each (topic, queue), interleaved; returns {key: count}."""
    for _ in range(per_queue):
        for topic in topics:
            for qid in range(queues):
                n = store.max_queue_offset(topic, qid)
                r = store.put(topic, body_of(topic, qid, n), queue_id=qid, tags="t", keys=f"k{n}")
                assert r.queue_offset == n


def expected_counts(path, topics, queues=1):
    return {(t, q): None for t in topics for q in range(queues)}


def check_queues(store, counts, *, allow_missing=False):
    """Every position holds its own message (or, with ``allow_missing``, raises
    MessageNotFoundError), and a consumer pulling from 0 gets exactly the queue's messages in order.
    Returns how many positions were missing."""
    missing = 0
    for (topic, qid), n in counts.items():
        for q in range(n):
            try:
                m = store.get_by_queue_offset(topic, qid, q)
            except MessageNotFoundError:
                assert allow_missing, f"{topic}-{qid}@{q} missing"
                missing += 1
                continue
            assert (m.topic, m.queue_id, m.queue_offset, bytes(m.body)) == \
                (topic, qid, q, body_of(topic, qid, q)), f"{topic}-{qid}@{q}: got {m.topic}-{m.queue_id}@{m.queue_offset}"
        got = []
        offset = 0
        for _ in range(10 * n + 10):
            try:
                res = store.get_message("g", topic, qid, offset, max_msgs=7)
            except MessageNotFoundError:
                assert allow_missing
                offset += 1
                continue
            for m in res.messages:
                assert (m.topic, m.queue_id, bytes(m.body)) == (topic, qid, body_of(topic, qid, m.queue_offset))
                got.append(m.queue_offset)
            if res.next_begin_offset <= offset:
                break
            offset = res.next_begin_offset
        if not allow_missing:
            assert got == list(range(n)), f"{topic}-{qid}: pulled {got[:20]}..."
        else:
            assert got == sorted(set(got))
    return missing


def crash_copy(path, dest):
    """A copy of an open store's directory: what a kill -9 leaves (abort file present)."""
    shutil.copytree(path, dest)
    assert os.path.exists(os.path.join(dest, "abort"))
    os.unlink(os.path.join(dest, "lock"))
    return dest


def cq_file(path, topic, qid, q):
    name = f"{(q - q % UNITS) * 20:020d}"
    return os.path.join(path, "consumequeue", topic, str(qid), name)


def zero_units(path, topic, qid, lo, hi):
    """Zero the ConsumeQueue units [lo, hi) of (topic, qid), file by file."""
    q = lo
    while q < hi:
        file = cq_file(path, topic, qid, q)
        end = min(hi, q - q % UNITS + UNITS)
        if os.path.exists(file):
            with open(file, "r+b") as f:
                f.seek((q % UNITS) * 20)
                f.write(bytes((end - q) * 20))
        q = end


def reopen_both_ways(impl, path, tmp_path, counts, *, allow_missing=False, after=None):
    """Check a damaged copy read-only and writable (each on its own copy)."""
    ro = str(tmp_path / "ro")
    shutil.copytree(path, ro)
    with MessageStore(ro, read_only=True, implementation=impl.name, **OPTIONS) as store:
        check_queues(store, counts, allow_missing=allow_missing)
    rw = str(tmp_path / "rw")
    shutil.copytree(path, rw)
    with MessageStore(rw, implementation=impl.name, **OPTIONS) as store:
        check_queues(store, counts, allow_missing=allow_missing)
        for (topic, qid), n in counts.items():     # new puts continue the queue, and are reachable
            r = store.put(topic, body_of(topic, qid, n), queue_id=qid)
            assert r.queue_offset == n
            counts[(topic, qid)] = n + 1
        check_queues(store, counts, allow_missing=allow_missing)
    with MessageStore(rw, read_only=True, implementation=impl.name, **OPTIONS) as store:
        check_queues(store, counts, allow_missing=allow_missing)


# ---- 1. power cut: queue files written since the checkpoint come back partly zero ----------------

@pytest.mark.parametrize("holes", [
    [(45, 60)],                       # a zero file inside the range written since the checkpoint
    [(35, 40), (52, 71)],             # several, spanning files
    [(31, 100)],                      # nothing written back at all
    [(40, 50), (90, 100)],            # the last file and one in the middle
], ids=["one-file", "spanning", "all", "middle-and-last"])
def test_power_cut_queue_files_since_the_checkpoint(tmp_path, impl, holes):
    path = str(tmp_path / "store")
    with MessageStore(path, implementation=impl.name, **OPTIONS) as store:
        put_round(store, ["A", "B"], 30)           # checkpointed by the clean close
    store = MessageStore(path, implementation=impl.name, **OPTIONS)
    try:
        put_round(store, ["A", "B"], 70)           # ~7 queue files more per queue
        assert store.flush(10)                     # the CommitLog is durable, the queues are not
        crashed = crash_copy(path, str(tmp_path / "crashed"))
    finally:
        store.close()
    assert Checkpoint(os.path.join(crashed, "checkpoint")).confirm_phy_offset > 0
    for lo, hi in holes:
        zero_units(crashed, "A", 0, lo, hi)
    reopen_both_ways(impl, crashed, tmp_path, {("A", 0): 100, ("B", 0): 100})


def test_power_cut_stale_units_past_the_checkpoint(tmp_path, impl):
    """Units past the checkpoint that survived from an earlier life of the queue file."""
    path = str(tmp_path / "store")
    with MessageStore(path, implementation=impl.name, **OPTIONS) as store:
        put_round(store, ["A", "B"], 30)
    store = MessageStore(path, implementation=impl.name, **OPTIONS)
    try:
        put_round(store, ["A", "B"], 30)
        assert store.flush(10)
        crashed = crash_copy(path, str(tmp_path / "crashed"))
    finally:
        store.close()
    # units 45..49 point at B's records (a page of another life), 50..59 are zero
    src = open(cq_file(crashed, "B", 0, 40), "rb").read()
    with open(cq_file(crashed, "A", 0, 40), "r+b") as f:
        f.seek(5 * 20)
        f.write(src[5 * 20:10 * 20])
    zero_units(crashed, "A", 0, 50, 60)
    reopen_both_ways(impl, crashed, tmp_path, {("A", 0): 60, ("B", 0): 60})


# ---- 2. a zeroed ConsumeQueue page (damage below the checkpoint) ------------------------------------

@pytest.mark.parametrize("where", [(0, 5), (12, 13), (3, 27)], ids=["head", "one", "spanning"])
def test_zeroed_queue_units_never_give_another_message(tmp_path, impl, where):
    path = str(tmp_path / "store")
    with MessageStore(path, implementation=impl.name, **OPTIONS) as store:
        store.put("Other", b"another topic's message", queue_id=0)
        put_round(store, ["T", "U"], 30)
    zero_units(path, "T", 0, *where)
    reopen_both_ways(impl, path, tmp_path, {("T", 0): 30, ("U", 0): 30})


def test_units_pointing_at_other_records_are_never_handed_out(tmp_path, impl):
    """A unit rewritten to point at another queue's record (bit rot, a bad copy)."""
    path = str(tmp_path / "store")
    with MessageStore(path, implementation=impl.name, **OPTIONS) as store:
        put_round(store, ["T", "U"], 30)
        other = store.queue_units("U", 0, 7, 1)[0]
    with open(cq_file(path, "T", 0, 7), "r+b") as f:
        f.seek(7 * 20)
        f.write(struct.pack(">qiq", int(other["commitlog_offset"]), int(other["size"]), int(other["tags_code"])))
    reopen_both_ways(impl, path, tmp_path, {("T", 0): 30, ("U", 0): 30})


# ---- 3. a checkpoint whose confirmPhyOffset is inside a record ---------------------------------------

@pytest.mark.parametrize("inside", [7, 1, 100])
def test_checkpoint_inside_a_record_is_not_trusted(tmp_path, impl, inside):
    path = str(tmp_path / "store")
    store = MessageStore(path, implementation=impl.name, **OPTIONS)
    try:
        put_round(store, ["A", "B"], 60)           # several segments
        # a record early in its segment, so that many records follow it there
        mid = next(m.commitlog_offset for m in store.iter_messages()
                   if m.commitlog_offset > SEGMENT and 0 < m.commitlog_offset % SEGMENT < SEGMENT // 4)
        store._save_checkpoint()                   # queues, index and its resume point durable
        crashed = crash_copy(path, str(tmp_path / "crashed"))
    finally:
        store.close()
    cp = Checkpoint(os.path.join(crashed, "checkpoint"))
    cp.confirm_phy_offset = mid + inside          # damaged, or copied from another store
    cp.flush()
    reopen_both_ways(impl, crashed, tmp_path, {("A", 0): 60, ("B", 0): 60})


# ---- 5. swapped queue files and segments ----------------------------------------------------------

def test_swapped_queue_files(tmp_path, impl):
    path = str(tmp_path / "store")
    with MessageStore(path, implementation=impl.name, **OPTIONS) as store:
        put_round(store, ["DmgA", "DmgB"], 25)
    a, b = cq_file(path, "DmgA", 0, 10), cq_file(path, "DmgB", 0, 10)
    os.rename(a, a + ".x")
    os.rename(b, a)
    os.rename(a + ".x", b)
    reopen_both_ways(impl, path, tmp_path, {("DmgA", 0): 25, ("DmgB", 0): 25})


def test_swapped_segments(tmp_path, impl):
    path = str(tmp_path / "store")
    with MessageStore(path, implementation=impl.name, **OPTIONS) as store:
        put_round(store, ["DmgA", "DmgB"], 60)
    seg = sorted(os.listdir(os.path.join(path, "commitlog")))
    assert len(seg) >= 3
    a, b = (os.path.join(path, "commitlog", n) for n in seg[:2])
    os.rename(a, a + ".x")
    os.rename(b, a)
    os.rename(a + ".x", b)
    reopen_both_ways(impl, path, tmp_path, {("DmgA", 0): 60, ("DmgB", 0): 60}, allow_missing=True)
