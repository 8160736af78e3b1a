"""A message handed out by queue position is the one stored there, or the call says it
is missing, after power cuts, damage and bad checkpoints; read-only and writable; both twins.

Each case builds a store whose message at queue offset ``q`` of ``(topic, queue)`` has the body
``b"<topic>-<queue>-<q>"``, damages it the way a power cut, a careless copy or bit rot would,
opens it, and checks every position through ``get_by_queue_offset`` and a consumer pulling the
queue from 0 (:func:`check_queues`).
"""

import os
import pathlib
import shutil
import struct

import numpy as np
import pytest

from rocketstore import MessageStore
from rocketstore.errors import MessageNotFoundError
from rocketstore.files.checkpoint import Checkpoint

SEGMENT = 8192
UNITS = 10  # 200-byte ConsumeQueue files: a queue rolls every 10 messages
OPTIONS = dict(
    commitlog_file_size=SEGMENT,
    consume_queue_units=UNITS,
    store_host="10.0.0.7",
    dispatch_interval_ms=0,
    clean_resource_interval_ms=0,
    schedule_interval_ms=0,
)


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
            assert (m.topic, m.queue_id, m.queue_offset, bytes(m.body)) == (
                topic,
                qid,
                q,
                body_of(topic, qid, q),
            ), f"{topic}-{qid}@{q}: got {m.topic}-{m.queue_id}@{m.queue_offset}"
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
                assert (m.topic, m.queue_id, bytes(m.body)) == (
                    topic,
                    qid,
                    body_of(topic, qid, m.queue_offset),
                )
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
        for (topic, qid), n in counts.items():  # new puts continue the queue, and are reachable
            r = store.put(topic, body_of(topic, qid, n), queue_id=qid)
            assert r.queue_offset == n
            counts[(topic, qid)] = n + 1
        check_queues(store, counts, allow_missing=allow_missing)
    with MessageStore(rw, read_only=True, implementation=impl.name, **OPTIONS) as store:
        check_queues(store, counts, allow_missing=allow_missing)


# ---- 1. power cut: queue files written since the checkpoint come back partly zero ----------------


@pytest.mark.parametrize(
    "holes",
    [
        [(45, 60)],  # a zero file inside the range written since the checkpoint
        [(35, 40), (52, 71)],  # several, spanning files
        [(31, 100)],  # nothing written back at all
        [(40, 50), (90, 100)],  # the last file and one in the middle
    ],
    ids=["one-file", "spanning", "all", "middle-and-last"],
)
def test_power_cut_queue_files_since_the_checkpoint(tmp_path, impl, holes):
    path = str(tmp_path / "store")
    with MessageStore(path, implementation=impl.name, **OPTIONS) as store:
        put_round(store, ["A", "B"], 30)  # checkpointed by the clean close
    store = MessageStore(path, implementation=impl.name, **OPTIONS)
    try:
        put_round(store, ["A", "B"], 70)  # ~7 queue files more per queue
        assert store.flush(10)  # the CommitLog is durable, the queues are not
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
    src = pathlib.Path(cq_file(crashed, "B", 0, 40)).read_bytes()
    with open(cq_file(crashed, "A", 0, 40), "r+b") as f:
        f.seek(5 * 20)
        f.write(src[5 * 20 : 10 * 20])
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
        f.write(
            struct.pack(">qiq", int(other["commitlog_offset"]), int(other["size"]), int(other["tags_code"]))
        )
    reopen_both_ways(impl, path, tmp_path, {("T", 0): 30, ("U", 0): 30})


# ---- 3. a checkpoint whose confirmPhyOffset is inside a record ---------------------------------------


@pytest.mark.parametrize("inside", [7, 1, 100])
def test_checkpoint_inside_a_record_is_not_trusted(tmp_path, impl, inside):
    path = str(tmp_path / "store")
    store = MessageStore(path, implementation=impl.name, **OPTIONS)
    try:
        put_round(store, ["A", "B"], 60)  # several segments
        # a record early in its segment, so that many records follow it there
        mid = next(
            m.commitlog_offset
            for m in store.iter_messages()
            if m.commitlog_offset > SEGMENT and 0 < m.commitlog_offset % SEGMENT < SEGMENT // 4
        )
        store._opened.checkpointer.save()  # queues, index and its resume point durable
        crashed = crash_copy(path, str(tmp_path / "crashed"))
    finally:
        store.close()
    cp = Checkpoint(os.path.join(crashed, "checkpoint"))
    cp.confirm_phy_offset = mid + inside  # damaged, or copied from another store
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


# ---- the property: any mix of such damage, read-only and writable, both twins ------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from rocketstore import _impl  # noqa: E402
from rocketstore.errors import RocketStoreError  # noqa: E402

PROPERTY_TOPICS = ("P0", "P1", "P2")
PROPERTY_QUEUES = 2
PROPERTY_EXAMPLES = int(os.environ.get("ROCKETSTORE_FUZZ_EXAMPLES", "0") or 0) or 20


def _build_property_store(path, implementation):
    """40 messages in each of 3 topics x 2 queues over many segments; the last 15 of each queue
    put after the checkpoint of a clean reopen and left by a 'crash' (the abort file stays)."""
    with MessageStore(path, implementation=implementation, **OPTIONS) as store:
        put_round(store, PROPERTY_TOPICS, 25, PROPERTY_QUEUES)
    store = MessageStore(path, implementation=implementation, **OPTIONS)
    try:
        put_round(store, PROPERTY_TOPICS, 15, PROPERTY_QUEUES)
        assert store.flush(10)
        crashed = crash_copy(path, path + "-crashed")
    finally:
        store.close()
    return path, crashed


@pytest.fixture(scope="module")
def property_stores(tmp_path_factory):
    out = {}
    for name in ["py"] + (["c"] if _impl.COMPILED is not None else []):
        out[name] = _build_property_store(str(tmp_path_factory.mktemp(f"prop-{name}") / "store"), name)
    return out


def _queue_files(root):
    return sorted(
        os.path.join(d, n) for d, _s, names in os.walk(os.path.join(root, "consumequeue")) for n in names
    )


def _segment_files(root):
    return sorted(os.path.join(root, "commitlog", n) for n in os.listdir(os.path.join(root, "commitlog")))


_damage = st.one_of(
    st.tuples(st.just("zero-units"), st.integers(0, 10_000), st.integers(0, 200), st.integers(1, 30)),
    st.tuples(
        st.just("copy-unit"),
        st.integers(0, 10_000),
        st.integers(0, 200),
        st.integers(0, 10_000),
        st.integers(0, 200),
    ),
    st.tuples(
        st.just("garbage-unit"),
        st.integers(0, 10_000),
        st.integers(0, 200),
        st.binary(min_size=20, max_size=20),
    ),
    st.tuples(st.just("swap-queue-files"), st.integers(0, 10_000), st.integers(0, 10_000)),
    st.tuples(st.just("checkpoint"), st.integers(-5, 70_000), st.booleans()),
    st.tuples(st.just("swap-segments"), st.integers(0, 10_000), st.integers(0, 10_000)),
    st.tuples(st.just("zero-segment-page"), st.integers(0, 10_000), st.integers(0, 1)),
)


def _is_last_queue_file(file) -> bool:
    directory = os.path.dirname(file)
    return os.path.basename(file) == max(os.listdir(directory))


def _apply(root, op) -> bool:
    """Apply one damage op; True when messages may be lost by queue position: it touched the
    CommitLog, or the last file of a queue (after a clean stop a queue's lost last units are
    not looked for: only the records after the checkpoint are scanned; see the README)."""
    kind = op[0]
    queues, segments = _queue_files(root), _segment_files(root)
    if kind in ("zero-units", "garbage-unit", "copy-unit"):
        file = queues[op[1] % len(queues)]
        tail = _is_last_queue_file(file)
        size = os.path.getsize(file)
        pos = (op[2] * 20) % max(20, size)
        if kind == "zero-units":
            data = bytes(min(op[3] * 20, size - pos))
        elif kind == "garbage-unit":
            data = op[3]
        else:
            src = queues[op[3] % len(queues)]
            with open(src, "rb") as f:
                f.seek((op[4] * 20) % max(20, os.path.getsize(src)))
                data = f.read(20)
        with open(file, "r+b") as f:
            f.seek(pos)
            f.write(data[: size - pos])
        return tail
    if kind == "swap-queue-files":
        a, b = queues[op[1] % len(queues)], queues[op[2] % len(queues)]
        tail = _is_last_queue_file(a) or _is_last_queue_file(b)
        if a != b:
            os.rename(a, a + ".x")
            os.rename(b, a)
            os.rename(a + ".x", b)
        return tail
    if kind == "checkpoint":
        cp = Checkpoint(os.path.join(root, "checkpoint"))
        cp.confirm_phy_offset = op[1]
        cp.flush()
        if op[2]:
            open(os.path.join(root, "abort"), "wb").close()
        return False
    if kind == "swap-segments":
        a, b = segments[op[1] % len(segments)], segments[op[2] % len(segments)]
        if a == b:
            return False
        os.rename(a, a + ".x")
        os.rename(b, a)
        os.rename(a + ".x", b)
        return True
    file = segments[op[1] % len(segments)]
    with open(file, "r+b") as f:
        f.seek(op[2] * 4096)
        f.write(bytes(4096))
    return True


def _check_property_store(root, implementation, read_only, counts, commitlog_damaged):
    try:
        store = MessageStore(root, read_only=read_only, implementation=implementation, **OPTIONS)
    except RocketStoreError:
        return "refused"
    with store:
        missing = check_queues(store, dict(counts), allow_missing=True)
        # The CommitLog holds every record: whatever happened to the queues (but their last
        # files) and the checkpoint, each position comes back.
        assert commitlog_damaged or not missing, f"{missing} positions missing, the CommitLog intact"
    return "opened"


@pytest.mark.slow  # a hypothesis property over many damaged stores
@pytest.mark.parametrize("implementation", ["py", "c"])
@pytest.mark.parametrize("which", ["clean", "crashed"])
@settings(
    max_examples=PROPERTY_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(_damage, min_size=1, max_size=4))
def test_damaged_queues_never_hand_out_another_message(property_stores, tmp_path, implementation, which, ops):
    """Queue files, checkpoints and segments damaged in any of the ways a crash, a power cut or a
    careless copy does: every message handed out by queue position is the one put there, read-only
    and writable; with the CommitLog intact nothing is missing."""
    if implementation not in property_stores:
        pytest.skip("compiled modules not built")
    clean, crashed = property_stores[implementation]
    base = clean if which == "clean" else crashed
    counts = {(t, q): 40 for t in PROPERTY_TOPICS for q in range(PROPERTY_QUEUES)}
    for read_only in (True, False):
        root = str(tmp_path / f"case-{read_only}")
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(base, root)
        damaged = False
        for op in ops:
            damaged |= _apply(root, op)
        _check_property_store(root, implementation, read_only, counts, damaged)
        shutil.rmtree(root, ignore_errors=True)


# ---- damage below the checkpoint never cuts the records after it ----------------------------------


@pytest.mark.parametrize("field", [("size", 3, 4), ("magic", 4, 0xFF), ("size-zero", 0, None)])
@pytest.mark.parametrize("clean", [True, False], ids=["clean", "crashed"])
def test_a_damaged_record_header_below_the_checkpoint_does_not_cut_the_log(tmp_path, impl, field, clean):
    """A flipped bit in record 20's TOTALSIZE (or magic) in the last segment of a cleanly closed
    store: its length cannot be trusted, but the records after it are durable and intact. The
    writable open used to cut the CommitLog there and let new puts overwrite records 21..39."""
    path = str(tmp_path / "store")
    opts = dict(OPTIONS, commitlog_file_size=1 << 20)
    with MessageStore(path, implementation=impl.name, **opts) as store:
        put_round(store, ["A"], 40)
        offsets = [store.get_by_queue_offset("A", 0, q).commitlog_offset for q in range(40)]
        if not clean:
            store._opened.checkpointer.save()
            crashed = crash_copy(path, str(tmp_path / "crashed"))
    if not clean:
        path = crashed
    name, at, flip = field
    seg = os.path.join(path, "commitlog", f"{0:020d}")
    with open(seg, "r+b") as f:
        f.seek(offsets[20] + at)
        if flip is None:
            f.write(bytes(4))
        else:
            b = f.read(1)[0]
            f.seek(offsets[20] + at)
            f.write(bytes([b ^ flip]))
    for read_only in (True, False):
        with MessageStore(path, read_only=read_only, implementation=impl.name, **opts) as store:
            for q in range(40):
                if q == 20:
                    continue
                m = store.get_by_queue_offset("A", 0, q)
                assert bytes(m.body) == body_of("A", 0, q)
            if not read_only:
                r = store.put("A", b"after", queue_id=0)
                assert r.queue_offset == 40 and r.commitlog_offset > offsets[39]
            assert not store.verify()["ok"]  # the damage is reported
    with MessageStore(path, implementation=impl.name, **opts) as store:
        assert [bytes(store.get_by_queue_offset("A", 0, q).body) for q in (19, 21, 39, 40)] == [
            body_of("A", 0, 19),
            body_of("A", 0, 21),
            body_of("A", 0, 39),
            b"after",
        ]


def test_verify_counts_every_bad_unit_and_reports_lost_positions(tmp_path, impl):
    """verify() names the first bad units of a queue and counts the rest; a position rebuilt
    without a record (its message lost to CommitLog damage) is reported, not passed."""
    path = str(tmp_path / "store")
    with MessageStore(path, implementation=impl.name, **OPTIONS) as store:
        put_round(store, ["T"], 30)
    zero_units(path, "T", 0, 0, 25)  # read-only: nothing rebuilt on disk
    with MessageStore(path, read_only=True, implementation=impl.name, **OPTIONS) as store:
        report = store.verify()
    assert not report["ok"] and any("25 unit(s) on disk" in p["reason"] for p in report["problems"])
    zero_units(path, "T", 0, 0, 2)
    with MessageStore(path, read_only=True, implementation=impl.name, **OPTIONS) as store:
        store.get_message("g", "T", 0, 0)  # mended in memory as it is read: still reported
        assert not store.verify()["ok"]
    with MessageStore(path, implementation=impl.name, **OPTIONS) as store:
        lost = store.get_by_queue_offset("T", 0, 3).commitlog_offset
        seg = os.path.join(path, "commitlog", f"{lost - lost % SEGMENT:020d}")
        assert store.verify()["ok"]  # rebuilt from the CommitLog
    with open(seg, "r+b") as f:  # destroy record 3 and its unit
        f.seek(lost % SEGMENT + 4)
        f.write(bytes(8))
    zero_units(path, "T", 0, 3, 4)
    with MessageStore(path, implementation=impl.name, **OPTIONS) as store:
        with pytest.raises(MessageNotFoundError):
            store.get_by_queue_offset("T", 0, 3)
        assert any("lost" in p["reason"] for p in store.verify()["problems"])
        check_queues(store, {("T", 0): 30}, allow_missing=True)


@pytest.mark.parametrize("read_only", [False, True], ids=["writable", "read-only"])
def test_a_record_whose_queue_offset_no_commitlog_can_hold_gets_no_unit(tmp_path, impl, read_only):
    # No CRC covers QUEUEOFFSET: one flipped bit of its top byte says 2**56 + 2. Dispatch put
    # units up to there (placeholder files until "too many open files"); now the record is
    # given no unit, verify() reports it, and puts go on at the queue's true end.
    path = tmp_path / "s"
    with MessageStore(path, implementation=impl.name, commitlog_file_size=1 << 20) as store:
        store.create_topic("T", 1)
        results = [store.put("T", b"m%d" % i) for i in range(5)]
    segment = path / "commitlog" / ("0" * 20)
    with open(segment, "r+b") as f:
        f.seek(results[2].commitlog_offset + 20)  # the queue offset's most significant byte
        f.write(b"\x01")
    shutil.rmtree(path / "consumequeue")  # rebuilt from the CommitLog at the next open
    with MessageStore(path, implementation=impl.name, read_only=read_only) as store:
        assert store.max_queue_offset("T", 0) == 5
        got = [store.get_by_queue_offset("T", 0, q).body for q in (0, 1, 3, 4)]
        assert got == [b"m0", b"m1", b"m3", b"m4"]
        with pytest.raises(MessageNotFoundError):
            store.get_by_queue_offset("T", 0, 2)
        problems = store.verify()
        assert any("queue offset no CommitLog can hold" in str(p) for p in problems["problems"]), problems
        if not read_only:
            assert store.put("T", b"m5").queue_offset == 5
    if not read_only:
        assert len(os.listdir(path / "consumequeue" / "T" / "0")) == 1  # one file, no padding


def test_a_queue_directory_no_queue_id_can_name_is_left_alone(tmp_path, impl):
    path = tmp_path / "s"
    with MessageStore(path, implementation=impl.name) as store:
        store.put("T", b"x", queue_id=0)
    junk = path / "consumequeue" / "T" / "99999999999999999999"
    junk.mkdir()
    (path / "consumequeue" / "T" / "007").mkdir()
    with MessageStore(path, implementation=impl.name) as store:
        assert sorted(store.queues()) == [("T", 0)]
        assert store.get_message("g", "T", 0, 0).messages[0].body == b"x"
    assert junk.is_dir() and not os.listdir(junk)


# ---- a record's queue offset continues its queue ---------------------------------------------
# QUEUEID, QUEUEOFFSET and TOPIC lie outside the body CRC: a record whose field is damaged must
# not take or fake another position, in dispatch, repair or a rebuild, writable or read-only.

GAP_OPTIONS = {"commitlog_file_size": 64 * 1024}


def _patch_record(root, offset, fmt, value):
    seg = root / "commitlog" / ("0" * 20)
    data = bytearray(seg.read_bytes())
    struct.pack_into(fmt, data, offset, value)
    seg.write_bytes(bytes(data))


def _served(store, topic, queue_id):
    """(queue offset, body) of every message a consumer pulling the queue from 0 gets."""
    out, offset = [], 0
    while True:
        got = store.get_message("g", topic, queue_id, offset, 32)
        out += [(m.queue_offset, bytes(m.body)) for m in got.messages]
        if got.next_begin_offset <= offset or not got.messages and got.next_begin_offset >= got.max_offset:
            return out
        offset = got.next_begin_offset


@pytest.mark.parametrize("read_only", [False, True], ids=["writable", "read-only"])
def test_a_damaged_queue_id_does_not_take_another_queues_position_after_a_crash(tmp_path, impl, read_only):
    root = tmp_path / "s"
    with MessageStore(root, implementation=impl.name, **GAP_OPTIONS) as store:
        store.create_topic("T", 3)
        for i in range(10):
            store.put("T", b"q1-body-%d" % i, queue_id=1)
        victim = [store.put("T", b"q2-body-%d" % i, queue_id=2) for i in range(10)][7]
    _patch_record(root, victim.commitlog_offset + 12, ">i", 1)  # QUEUEID 2 -> 1
    (root / "abort").touch()  # as after a crash
    with MessageStore(root, implementation=impl.name, read_only=read_only, **GAP_OPTIONS) as store:
        assert store.get_by_queue_offset("T", 1, 7).body == b"q1-body-7"
        assert _served(store, "T", 1) == [(i, b"q1-body-%d" % i) for i in range(10)]
        assert all(body == b"q2-body-%d" % q for q, body in _served(store, "T", 2))
        if not read_only:
            assert store.put("T", b"q1-body-10", queue_id=1).queue_offset == 10


@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "crashed"])
@pytest.mark.parametrize("read_only", [False, True], ids=["writable", "read-only"])
def test_a_damaged_last_queue_offset_is_not_served_at_a_position_never_written(
    tmp_path, impl, read_only, crashed
):
    root = tmp_path / "s"
    with MessageStore(root, implementation=impl.name, **GAP_OPTIONS) as store:
        store.create_topic("T", 2)
        for i in range(60):
            store.put("T", b"filler-%d" % i, queue_id=1)
        last = [store.put("T", b"body-%d" % i, queue_id=0) for i in range(5)][4]
    _patch_record(root, last.commitlog_offset + 20, ">q", 7)  # QUEUEOFFSET 4 -> 7
    if crashed:
        (root / "abort").touch()
    expected = [(i, b"body-%d" % i) for i in range(4)]
    with MessageStore(root, implementation=impl.name, read_only=read_only, **GAP_OPTIONS) as store:
        assert _served(store, "T", 0) == expected
        if read_only:
            return
        # the queue goes on after the damaged record's own position: none skipped, none faked
        assert [store.put("T", b"new-%d" % i, queue_id=0).queue_offset for i in range(3)] == [5, 6, 7]
        expected += [(5 + i, b"new-%d" % i) for i in range(3)]
        assert _served(store, "T", 0) == expected
    for abnormal in (False, True):
        if abnormal:
            (root / "abort").touch()
        with MessageStore(root, implementation=impl.name, **GAP_OPTIONS) as store:
            assert _served(store, "T", 0) == expected
            assert store.get_by_queue_offset("T", 0, 7).body == b"new-2"


@pytest.mark.parametrize("read_only", [False, True], ids=["writable", "read-only"])
def test_a_damaged_topic_byte_does_not_put_a_message_into_another_topic(tmp_path, impl, read_only):
    root = tmp_path / "s"
    with MessageStore(root, implementation=impl.name, **GAP_OPTIONS) as store:
        store.create_topic("TA", 1)
        store.create_topic("TB", 1)
        last = [store.put("TA", b"TA-body-%d" % i, queue_id=0) for i in range(4)][3]
        store.put("TB", b"TB-body-0", queue_id=0)
    seg = root / "commitlog" / ("0" * 20)
    data = bytearray(seg.read_bytes())
    p = last.commitlog_offset
    body_len = struct.unpack_from(">i", data, p + 84)[0]
    assert data[p + 89 + body_len : p + 91 + body_len] == b"TA"
    data[p + 90 + body_len] = ord("B")  # topic "TA" -> "TB"
    seg.write_bytes(bytes(data))
    with MessageStore(root, implementation=impl.name, read_only=read_only, **GAP_OPTIONS) as store:
        assert _served(store, "TB", 0) == [(0, b"TB-body-0")]
        assert _served(store, "TA", 0) == [(i, b"TA-body-%d" % i) for i in range(3)]
        if read_only:
            return
        tb = store.put("TB", b"TB-body-1", queue_id=0).queue_offset
        ta = store.put("TA", b"TA-body-4", queue_id=0).queue_offset
        assert tb == 1 and ta == 4
    with MessageStore(root, implementation=impl.name, **GAP_OPTIONS) as store:
        assert _served(store, "TB", 0) == [(0, b"TB-body-0"), (1, b"TB-body-1")]
        assert _served(store, "TA", 0) == [(i, b"TA-body-%d" % i) for i in (0, 1, 2, 4)]


@pytest.mark.parametrize(
    "claimed, kept, continues",
    [
        ([0, 1, 2, 3], [0, 1, 2, 3], 4),
        ([0, 1, 2, 3, 7], [0, 1, 2, 3], 5),  # a lone jump at the end: held back
        ([0, 1, 2, 3, 7, 5, 6], [0, 1, 2, 3, 5, 6], 7),  # the damaged record held position 4
        ([0, 1, 2, 9, 4, 5], [0, 1, 2, 4, 5], 6),
        ([0, 1, 2, 4, 5], [0, 1, 2, 4, 5], 6),  # position 3 lost to damage: two records agree on 4
        ([3, 0, 1], [0, 1], 2),  # another topic's record first
        ([0, 3, 1], [0, 1], 2),  # another topic's record between
        ([0, 1, 2, 3, 4, 5, 2, 6], [0, 1, 2, 3, 4, 5, 6], 7),
        ([5], [5], 6),
    ],
)
def test_a_records_queue_offset_continues_its_queue(claimed, kept, continues):
    from rocketstore.queues.queuecheck import _in_order

    q = np.array(claimed, dtype=np.int64)
    keep, end = _in_order(q)
    assert q[keep].tolist() == kept and end == continues


@pytest.mark.parametrize("rebuilt", [False, True], ids=["units-kept", "units-rebuilt"])
@pytest.mark.parametrize("read_only", [False, True], ids=["writable", "read-only"])
def test_a_queue_s_last_message_after_a_damaged_body_is_still_served(tmp_path, impl, read_only, rebuilt):
    """A body CRC that fails takes its record's position out of the queue; the next record,
    which jumps over it, is that queue's own, and stays at its position (its unit points at it;
    with the units gone too, the message is held back only until the next record confirms it)."""
    root = tmp_path / "s"
    with MessageStore(root, implementation=impl.name, **GAP_OPTIONS) as store:
        results = [store.put("T", b"body-%d" % i, queue_id=0) for i in range(4)]
    _patch_record(root, results[2].commitlog_offset + 88, ">b", 0x58)  # the first byte of the body
    if rebuilt:
        shutil.rmtree(root / "consumequeue")
    with MessageStore(root, implementation=impl.name, read_only=read_only, **GAP_OPTIONS) as store:
        served = _served(store, "T", 0)
        if rebuilt:
            assert served in (
                [(0, b"body-0"), (1, b"body-1"), (3, b"body-3")],
                [(0, b"body-0"), (1, b"body-1")],
            )
        else:
            assert served == [(0, b"body-0"), (1, b"body-1"), (3, b"body-3")]
        if not read_only:
            assert store.put("T", b"body-4", queue_id=0).queue_offset == 4
            assert _served(store, "T", 0)[-2:] == [(3, b"body-3"), (4, b"body-4")]


def test_a_lone_jump_its_unit_points_at_is_kept():
    """Records after one lost to damage: the queue's unit at the jumped-to offset pointed at it
    when the queue was whole, so it is the queue's own."""
    from rocketstore.queues.queuecheck import _in_order

    q = np.array([0, 1, 3], dtype=np.int64)
    assert q[_in_order(q)[0]].tolist() == [0, 1]
    keep, end = _in_order(q, np.array([True, True, True]))
    assert q[keep].tolist() == [0, 1, 3] and end == 4
