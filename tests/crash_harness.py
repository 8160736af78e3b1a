"""Crash harness: a writer process is SIGKILLed at random moments; the store must keep its promises.

    python tests/crash_harness.py --iterations 1000                 # kill -9
    python tests/crash_harness.py --iterations 200 --power-loss     # kill -9, then a simulated power cut
    python tests/crash_harness.py --iterations 50 --impl py --seed 7
    python tests/crash_harness.py --iterations 300 --power-loss --cq-units 50   # queues roll often

The child (``child`` sub-command) runs several threads putting into several topics with small
segments, ConsumeQueue and index files (so all of them roll), mixing durable puts (``durable=True``,
pipelined futures, durable batches) with asynchronous ones. It prints one ``ACK`` line per durable
put acknowledged as flushed, and ``FLUSHED <offset>`` lines with the CommitLog's flushed offset.

After the kill the parent optionally simulates a power cut: it keeps only what the store had made
durable — the CommitLog below the highest flushed offset it was told of (in this round or an
earlier one on the same store: what was durable stays durable), the ConsumeQueue units
and index files the checkpoint vouches for — and overwrites everything after that, page by page,
with zeros, random bytes, or leaves it (the kernel may have written a page back, or not).
The store's runtime files are never flushed: the live page is left as it was, zeroed, cut
short, filled with random bytes (its magic kept or not) or taken back to an older copy, and a
stale shared append table is sometimes left beside it (its lock held by a thread that no
longer exists, as a power cut can bring its page back), so every open must rebuild or ignore
them (:func:`damage_runtime_files`).

Then it reopens the store and checks (:func:`check_store`):

* every acknowledged durable message is there, intact, and found by its key and its msgId;
* ``verify()`` finds no damaged record, and every ConsumeQueue unit points at a record of its
  queue with its queue offset;
* every queue is contiguous from 0 and holds one unit per message of that queue in the
  CommitLog (queues and CommitLog agree);
* every acknowledged message is found by its queue offset, and a consumer pulling each queue
  from 0 gets each of its messages once, at contiguous offsets, each the one its position names
  (:func:`check_queue_integrity`, on the writable reopen and on the read-only one);
* a put after the crash continues every queue's offsets;
* a read-only open beside the recovered store sees the same;
* with ``--power-loss``, a read-only open right after the power cut (before any writer
  repaired anything) opens and finds every acknowledged message by its msgId.

An open that raises counts as a **refused open**, an acknowledged message that is missing or
damaged as a **lost acknowledged put**; the script reports both (each must be 0) beside the
other violations. The suite runs a few iterations (tests/test_crash_harness.py); this script
runs many.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import zlib
from collections.abc import Callable
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
SEGMENT = 64 * 1024
#: units per ConsumeQueue file (400: 8,000-byte files); --cq-units sets it, for the child too
CQ_UNITS = int(os.environ.get("ROCKETSTORE_HARNESS_CQ_UNITS", "400"))
INDEX_SLOTS, INDEX_COUNT = 64, 600
TOPICS = ("CrashA", "CrashB", "CrashC")
HOST = "10.0.0.7"
STORE_OPTIONS = dict(
    commitlog_file_size=SEGMENT,
    consume_queue_units=CQ_UNITS,
    index_slots=INDEX_SLOTS,
    index_count=INDEX_COUNT,
    store_host=HOST,
    checkpoint_interval_ms=20,
)
PAGE = 4096


def set_queue_units(units: int) -> None:
    """Use ConsumeQueue files of ``units`` units here and in the children started after."""
    global CQ_UNITS
    CQ_UNITS = units
    STORE_OPTIONS["consume_queue_units"] = units
    os.environ["ROCKETSTORE_HARNESS_CQ_UNITS"] = str(units)


# -- the child ------------------------------------------------------------------------------------


def child_main(path: str, implementation: str, seed: int) -> None:
    from rocketstore import MessageStore, PutStatus
    from rocketstore.errors import FlushTimeoutError

    store = MessageStore(path, implementation=implementation, **STORE_OPTIONS)
    out = sys.stdout
    out_lock = threading.Lock()

    def emit(lines):
        if lines:
            with out_lock:
                out.write("".join(lines))
                out.flush()

    def ack_line(topic, r, key, body):
        return (
            f"ACK {topic} {r.msg_id} {key} {zlib.crc32(body)} {r.commitlog_offset} {r.size} "
            f"{r.queue_id} {r.queue_offset}\n"
            if r.status is PutStatus.PUT_OK
            else None
        )

    def durable(put, *args, **kwargs):
        """The put's result, or None when its flush did not confirm (stored, not promised)."""
        try:
            result = put(*args, **kwargs)
            return result.result() if hasattr(result, "add_done_callback") else result
        except FlushTimeoutError:
            return None

    def writer(t: int):
        rng = random.Random(seed * 31 + t)
        n = 0
        while True:
            topic = rng.choice(TOPICS)
            op = rng.random()
            n += 1
            key = f"k{t}-{n}"
            body = key.encode() + b":" + rng.randbytes(rng.randrange(0, 1500))
            if op < 0.3:
                r = durable(store.put, topic, body, keys=key, tags=f"t{t}", durable=True)
                emit([x for x in [r and ack_line(topic, r, key, body)] if x])
            elif op < 0.5:
                r = durable(store.put_pipelined, topic, body, keys=key)
                emit([x for x in [r and ack_line(topic, r, key, body)] if x])
            elif op < 0.75:
                store.put(topic, body, keys=key)  # asynchronous: no promise
            elif op < 0.9:
                bodies = [body + b"%d" % k for k in range(rng.randrange(1, 20))]
                store.put_batch(topic, bodies, tags="batch")  # asynchronous batch
            else:
                bodies = [body + b"%d" % k for k in range(rng.randrange(1, 20))]
                b = durable(store.put_batch, topic, bodies, durable=True)
                if b is not None and b.status is PutStatus.PUT_OK:
                    # a batch has no keys: acknowledge by msgId (key "-")
                    emit(
                        [
                            f"ACK {topic} {b[k].msg_id} - {zlib.crc32(x)} {b[k].commitlog_offset} {b[k].size} "
                            f"{b[k].queue_id} {b[k].queue_offset}\n"
                            for k, x in enumerate(bodies)
                        ]
                    )

    threads = [threading.Thread(target=writer, args=(t,), daemon=True) for t in range(3)]
    emit(["READY\n"])
    for th in threads:
        th.start()
    while True:
        time.sleep(0.002)
        emit([f"FLUSHED {store.flushed_offset}\n"])


# -- the parent -----------------------------------------------------------------------------------


class Acked:
    __slots__ = ("topic", "msg_id", "key", "crc", "offset", "size", "queue_id", "queue_offset")

    def __init__(self, topic, msg_id, key, crc, offset, size, queue_id, queue_offset):
        self.topic, self.msg_id, self.key = topic, msg_id, key
        self.crc, self.offset, self.size = int(crc), int(offset), int(size)
        self.queue_id, self.queue_offset = int(queue_id), int(queue_offset)


#: The store the service harnesses (delayed and timer delivery) write: small CommitLog segments,
#: ConsumeQueue and index files, so that a few seconds of puts roll them all.
SMALL_STORE = dict(
    commitlog_file_size=256 * 1024,
    consume_queue_units=400,
    index_slots=64,
    index_count=600,
    store_host="10.0.0.7",
    checkpoint_interval_ms=20,
)


def child_lines() -> Callable[[str], None]:
    """A child's way to tell the parent a line: whole lines, from any thread, flushed at once."""
    out = sys.stdout
    lock = threading.Lock()

    def emit(line: str) -> None:
        with lock:
            out.write(line)
            out.flush()

    return emit


def run_writers(
    writer: Callable[[int], None], emit: Callable[[str], None], ready: str, threads: int = 2
) -> None:
    """A child's last step: say ``ready`` to the parent, then run ``writer(t)`` on ``threads``
    threads until the parent kills the process."""
    workers = [threading.Thread(target=writer, args=(t,), daemon=True) for t in range(threads)]
    emit(ready)
    for th in workers:
        th.start()
    while True:
        time.sleep(1)


def acked_keys(out: bytes) -> list[str]:
    """The UNIQ_KEYs of a child's ``ACK <key>`` lines."""
    return [line.split()[1].decode() for line in out.split(b"\n")[:-1] if line.startswith(b"ACK ")]


def check_delivered_once(originals: dict, found: dict, what: str) -> None:
    """Each message of ``originals`` (UNIQ_KEY -> the record the service keeps) has exactly one
    copy in ``found`` (UNIQ_KEY -> the copies met in the real topics), each copy has its
    original, and each copy is in the original's REAL_TOPIC / REAL_QID with its body."""
    lost = [k for k in originals if k not in found]
    duplicated = {k: len(v) for k, v in found.items() if len(v) > 1}
    orphans = [k for k in found if k not in originals]
    assert not lost, f"{len(lost)} {what} messages never delivered, e.g. {lost[:3]}"
    assert not duplicated, f"{len(duplicated)} delivered more than once, e.g. {list(duplicated.items())[:3]}"
    assert not orphans, f"{len(orphans)} copies without a {what} record, e.g. {orphans[:3]}"
    for key, [copy] in found.items():
        s = originals[key]
        assert (copy.topic, copy.queue_id) == (s.properties["REAL_TOPIC"], int(s.properties["REAL_QID"]))
        assert copy.body == s.body, f"copy of {key} has another body"


def start_and_kill(
    script: str, path: str, implementation: str, rng: random.Random, src: str, delays: tuple, jitter: float
) -> tuple[list, bytes]:
    """Run ``python script child <path> <implementation> <seed>`` (importing the package in
    ``src``), wait for its ``READY`` line, SIGKILL it after ``choice(delays) + random() * jitter``
    seconds; returns (the READY line's fields, its stdout). crash_delay.py kills its writers the
    same way."""
    env = dict(os.environ)
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    child = subprocess.Popen(
        [sys.executable, os.path.abspath(script), "child", path, implementation, str(rng.randrange(2**32))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        # unbuffered: readline() below must not read ahead of the READY line into a buffer
        # that communicate() (which reads the pipes' descriptors) would never return
        bufsize=0,
    )
    try:
        first = child.stdout.readline().split()
        if not first or first[0] != b"READY":
            child.kill()
            raise RefusedOpen(f"child did not start: {first!r} {child.stderr.read()!r}")
        time.sleep(rng.choice(delays) + rng.random() * jitter)
        child.send_signal(signal.SIGKILL)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    if child.returncode != -signal.SIGKILL:
        raise AssertionError(f"child exited with {child.returncode}: {err.decode(errors='replace')}")
    return first, out


KILL_DELAYS, KILL_JITTER = (0.0, 0.02, 0.1, 0.3, 0.6), 0.2


def run_and_kill(
    path: str,
    implementation: str,
    rng: random.Random,
    src: str,
    *,
    delays: tuple = KILL_DELAYS,
    jitter: float = KILL_JITTER,
    log: str | None = None,
):
    """Start a child, SIGKILL it at a random moment; returns (acked, highest flushed offset).

    The flushed offset is 0 when the child printed nothing before the kill (a kill right after
    READY; more likely on a loaded machine). ``log``: a file to save the child's stdout in."""
    _ready, out = start_and_kill(__file__, path, implementation, rng, src, delays=delays, jitter=jitter)
    if log is not None:
        with open(log, "wb") as f:
            f.write(out)
    acked, flushed = [], 0
    for line in out.split(b"\n")[:-1]:  # a torn last line was not acknowledged
        parts = line.decode().split()
        if parts[0] == "ACK":
            a = Acked(*parts[1:])
            acked.append(a)
            flushed = max(flushed, a.offset + a.size)
        elif parts[0] == "FLUSHED":
            flushed = max(flushed, int(parts[1]))
    return acked, flushed


def _damage(path: str, start: int, rng: random.Random, end: int = -1) -> None:
    """Overwrite ``path`` from byte ``start`` to ``end`` (default: its end), page by page: zeros,
    random bytes, or as is."""
    size = os.path.getsize(path) if end < 0 else min(end, os.path.getsize(path))
    if start >= size:
        return
    style = rng.choice(("zeros", "garbage", "mixed"))
    with open(path, "r+b") as f:
        pos = start
        while pos < size:
            end = min(size, (pos // PAGE + 1) * PAGE)
            choice = style if style != "mixed" else rng.choice(("zeros", "garbage", "keep"))
            if choice != "keep":
                f.seek(pos)
                f.write(bytes(end - pos) if choice == "zeros" else rng.randbytes(end - pos))
            pos = end


def simulate_power_loss(path: str, flushed: int, rng: random.Random) -> dict:
    """Keep what was durable, damage the rest (see the module docstring). Returns what it did."""
    from rocketstore.files.checkpoint import Checkpoint

    cp = Checkpoint(os.path.join(path, "checkpoint"))
    confirm = cp.confirm_phy_offset
    # The checkpoint is written after the CommitLog was flushed past confirm: durable as well.
    flushed = max(flushed, confirm)
    damaged = {"commitlog": 0, "consumequeue": 0, "index": 0, "runtime": damage_runtime_files(path, rng)}
    cl = os.path.join(path, "commitlog")
    for name in sorted(os.listdir(cl)):
        start = int(name)
        keep = max(0, flushed - start)
        if keep < SEGMENT:
            _damage(os.path.join(cl, name), keep, rng)
            damaged["commitlog"] += 1
    cq_root = os.path.join(path, "consumequeue")
    for dirpath, _dirs, files in os.walk(cq_root):
        for name in sorted(files):
            file = os.path.join(dirpath, name)
            with open(file, "rb") as f:
                data = f.read()
            keep = 0
            for pos in range(0, len(data) - 19, 20):
                offset, size, _tags = struct.unpack_from(">qiq", data, pos)
                if size <= 0 or not 0 <= offset < confirm:
                    break
                keep = pos + 20
            if keep < len(data):
                _damage(file, keep, rng)
                damaged["consumequeue"] += 1
    index_dir = os.path.join(path, "index")
    try:  # the index resume point, written whole (fsync, rename) after its file was msynced
        with open(os.path.join(path, "indexResume")) as f:
            resume = json.load(f)
    except FileNotFoundError:
        resume = {"file": None}
    if os.path.isdir(index_dir):
        items_start = 40 + 4 * INDEX_SLOTS
        for name in sorted(os.listdir(index_dir)):
            file = os.path.join(index_dir, name)
            with open(file, "rb") as f:
                head = f.read(40)
            end_ts = struct.unpack_from(">q", head, 8)[0] if len(head) == 40 else 0
            count = struct.unpack_from(">i", head, 36)[0] if len(head) == 40 else 0
            if name == resume["file"]:
                # its items up to the saved count were durable; header, slots and later items not
                _damage(file, 0, rng, end=items_start + 20)
                _damage(file, items_start + resume["header"][5] * 20, rng)
                damaged["index"] += 1
            elif resume["file"] is not None and name < resume["file"] and count >= INDEX_COUNT:
                pass  # full, msynced when the next one began
            elif end_ts > cp.index_msg_timestamp or count < INDEX_COUNT:
                _damage(file, 0, rng)  # not flushed as a whole: anything goes
                damaged["index"] += 1
    return damaged


#: What a power cut may leave of a runtime file (the page is never flushed, the table never).
RUNTIME_DAMAGES = ("keep", "zeros", "short", "garbage", "torn", "stale")


def damage_runtime_files(
    path: str, rng: random.Random, style: Optional[str] = None, table: Optional[str] = None
) -> int:
    """Leave the store's runtime files as a power cut may: the live page kept, zeroed, cut
    short, random (its magic kept or not) or an older copy of itself; and now and then a
    shared append table of an owner that no longer exists, garbage or whole with its append
    lock held (the table's page came back from before the cut). ``style`` (one of
    RUNTIME_DAMAGES) and ``table`` ("garbage", "locked", "" for none) choose instead of ``rng``.
    Returns how many files it damaged."""
    from rocketstore.log import sharedappend
    from rocketstore.processes.live import LIVE_NAME, LIVE_SIZE

    done = 0
    live = os.path.join(path, LIVE_NAME)
    if os.path.exists(live):
        style = style or rng.choice(RUNTIME_DAMAGES)
        with open(live, "r+b") as f:
            page = f.read()
            if style == "zeros":
                f.seek(0)
                f.write(bytes(len(page)))
            elif style == "short":
                f.truncate(rng.randrange(0, LIVE_SIZE))
            elif style == "garbage":
                f.seek(0)
                f.write(rng.randbytes(len(page)))
            elif style == "torn":  # the magic kept, the rest random
                f.seek(8)
                f.write(rng.randbytes(max(0, len(page) - 8)))
            elif style == "stale":  # an older copy: where records ended then, an older epoch
                f.seek(16)
                f.write(struct.pack("<qQ", rng.randrange(0, SEGMENT * 4), rng.randrange(0, 4)))
        done += style != "keep"
    where = os.path.join(path, sharedappend.APPEND_NAME)
    if table is None and rng.random() < 0.3:
        table = rng.choice(("garbage", "locked"))
    if table and sharedappend.supported() and not os.path.exists(where):
        if table == "garbage":
            with open(where, "wb") as f:
                f.write(rng.randbytes(rng.randrange(0, 8192)))
        else:
            fd, mm = sharedappend.open_table(path, create=True)
            try:
                struct.pack_into("<QQ", mm, sharedappend.O_MAGIC, sharedappend.MAGIC, 7)
                hold_by_a_dead_thread(mm)
            finally:
                mm.close()
                os.close(fd)
        done += 1
    return done


def hold_by_a_dead_thread(mm) -> None:
    """Leave a shared append table's lock held by a thread id no thread has, as a power cut can
    bring its page back: glibc's x86-64 layout of a locked robust mutex (lock word = the owner's
    tid, count 0, owner tid, one user), written rather than locked, because locking it here
    would leave an entry in this thread's robust list pointing into a map its caller closes,
    which glibc follows (a segfault) at this thread's next robust lock or unlock."""
    from rocketstore.log import sharedappend

    struct.pack_into("<iIiI", mm, sharedappend.O_MUTEX, 0x3FFFFFF0, 0, 0x3FFFFFF0, 1)


class RefusedOpen(AssertionError):
    """An open of the store raised."""


class LostAcknowledged(AssertionError):
    """Acknowledged durable puts missing or damaged; ``count`` says how many."""

    def __init__(self, count: int, message: str) -> None:
        super().__init__(message)
        self.count = count


def open_store(path: str, implementation: str, read_only: bool = False):
    """``MessageStore(path, ...)``; whatever it raises becomes :class:`RefusedOpen`."""
    from rocketstore import MessageStore

    try:
        return MessageStore(path, implementation=implementation, read_only=read_only, **STORE_OPTIONS)
    except Exception as exc:
        kind = "read-only" if read_only else "writable"
        raise RefusedOpen(f"{kind} open refused: {type(exc).__name__}: {exc}") from exc


def check_acknowledged(store, acked) -> None:
    """Every acknowledged message is there, found by its msgId, intact; else
    :class:`LostAcknowledged` with how many are not."""
    from rocketstore.errors import RocketStoreError

    lost = []
    for a in acked:
        try:
            msg = store.get_by_msg_id(a.msg_id)
            ok = zlib.crc32(bytes(msg.body)) == a.crc and msg.topic == a.topic
        except RocketStoreError:
            ok = False
        if not ok:
            lost.append(a)
    if lost:
        raise LostAcknowledged(
            len(lost), f"{len(lost)} acknowledged message(s) lost or damaged, e.g. {lost[0].msg_id}"
        )


def check_after_power_cut(path: str, implementation: str, acked) -> None:
    """A read-only open right after the power cut (a checker before any writer): it opens, and
    reads every acknowledged message."""
    with open_store(path, implementation, read_only=True) as reader:
        check_acknowledged(reader, acked)


def check_store(path: str, implementation: str, acked) -> dict:
    """Reopen after the crash and check every promise (see the module docstring)."""
    from rocketstore import PutStatus

    with open_store(path, implementation) as store:
        assert not store.last_shutdown_clean, "the crash left no abort file"
        check_acknowledged(store, acked)
        for a in acked:
            if a.key != "-":
                found = store.query_by_key(a.topic, a.key, max_num=64)
                assert any(m.msg_id == a.msg_id for m in found), f"key {a.key} not found"
        check_queue_integrity(store, acked)
        report = store.verify()
        assert report["ok"], f"verify: {report['problems'][:5]}"
        per_queue: dict = {}
        for m in store.iter_messages():
            per_queue[(m.topic, m.queue_id)] = per_queue.get((m.topic, m.queue_id), 0) + 1
        queues = store.queues()
        for key, n in per_queue.items():
            low, high = queues.get(key, (0, 0))
            assert (low, high) == (0, n), f"queue {key}: units [{low}, {high}) for {n} messages"
        for key in queues:
            assert key in per_queue or queues[key][1] == 0, f"queue {key} without messages"
        after = {}
        for topic in TOPICS:
            r = store.put(topic, b"after the crash", durable=True)
            assert r.status is PutStatus.PUT_OK
            expected = per_queue.get((topic, r.queue_id), 0)
            assert r.queue_offset == expected, (topic, r.queue_id, r.queue_offset, expected)
            after[topic] = r
        counts = {"messages": sum(per_queue.values()), "records": report["records"]}
    with open_store(path, implementation, read_only=True) as reader:
        assert reader.last_shutdown_clean
        for topic, r in after.items():
            assert reader.get_by_queue_offset(topic, r.queue_id, r.queue_offset).body == b"after the crash"
        check_queue_integrity(reader, acked)
        assert reader.verify()["ok"]
    return counts


def check_queue_integrity(store, acked) -> None:
    """Every acknowledged message is found by its queue offset, and a consumer pulling each queue
    from 0 gets every message of it once, at contiguous offsets, each the one its position names."""
    for a in acked:
        m = store.get_by_queue_offset(a.topic, a.queue_id, a.queue_offset)
        assert m.msg_id == a.msg_id, (
            f"{a.topic}-{a.queue_id}@{a.queue_offset}: {m.msg_id} handed out for acknowledged {a.msg_id}"
        )
    wanted = {}
    for a in acked:
        wanted.setdefault((a.topic, a.queue_id), {})[a.queue_offset] = a.msg_id
    for (topic, qid), (low, high) in store.queues().items():
        assert low == 0, f"queue {topic}-{qid} starts at {low}"
        offset, seen = 0, []
        while offset < high:
            res = store.get_message("harness", topic, qid, offset, max_msgs=32)
            assert res.messages, f"{topic}-{qid}: nothing pulled at {offset} of {high} ({res.status})"
            for m in res.messages:
                assert (m.topic, m.queue_id) == (topic, qid), f"{topic}-{qid}: pulled {m.topic}-{m.queue_id}"
                expected = wanted.get((topic, qid), {}).get(m.queue_offset)
                assert expected is None or m.msg_id == expected, (
                    f"{topic}-{qid}@{m.queue_offset}: wrong message"
                )
                seen.append(m.queue_offset)
            offset = res.next_begin_offset
        assert seen == list(range(high)), f"{topic}-{qid}: pulled offsets {seen[:10]}... of {high}"


def one_iteration(
    workdir: str,
    implementation: str,
    rng: random.Random,
    *,
    power_loss: bool,
    src: str,
    rounds: int = 1,
    run=run_and_kill,
) -> dict:
    """Crash (and recover) ``rounds`` times in one store, then check it.

    What one round made durable stays durable in the later ones: each power cut keeps the
    CommitLog below the highest flushed offset *any* round reported, not only the last one (a
    round killed before it printed a line reports nothing, and the checkpoint may be older than
    the earlier rounds' acknowledged puts). Each child's stdout and what each round did are kept
    in ``workdir`` (``round-<k>.out``, ``rounds.json``) for ``--keep-failures``.

    ``run(path, implementation, rng, src, log=...)`` runs and kills one child (tests replace it)."""
    from rocketstore.files.checkpoint import Checkpoint

    path = os.path.join(workdir, "store")
    acked_all = []
    damaged = None
    durable = 0
    rounds_log = []
    for k in range(rounds):
        acked, flushed = run(path, implementation, rng, src, log=os.path.join(workdir, f"round-{k}.out"))
        acked_all += acked
        durable = max(durable, flushed)
        entry = {
            "round": k,
            "acked": len(acked),
            "flushed": flushed,
            "durable": durable,
            "confirm": Checkpoint(os.path.join(path, "checkpoint")).confirm_phy_offset,
        }
        if power_loss:
            damaged = simulate_power_loss(path, durable, rng)
            entry["damaged"] = damaged
        rounds_log.append(entry)
        with open(os.path.join(workdir, "rounds.json"), "w") as f:
            json.dump(rounds_log, f, indent=1)
    if power_loss:
        check_after_power_cut(path, implementation, acked_all)
    counts = check_store(path, implementation, acked_all)
    counts["acknowledged"] = len(acked_all)
    if damaged is not None:
        counts["damaged_files"] = sum(damaged.values())
    return counts


def run_iterations(
    name: str,
    doc: str,
    argv: Optional[list[str]],
    one_iteration: Callable[..., dict],
    totals: dict[str, int],
    summary: Callable[[dict[str, int], int, int], str],
) -> int:
    """The main() of a kill -9 script built on this harness (crash_delay, crash_timer, crash_pop):
    ``--iterations`` stores, each given to ``one_iteration(workdir, implementation, rng, src=,
    rounds=)``; its counts are added into ``totals``; an exception is a violation (the store is
    kept with ``--keep``). Prints progress every 10 iterations and ``summary(totals, iterations,
    violations)``; returns the exit status."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3, help="kills per store")
    parser.add_argument("--impl", default=None, help="c or py (default: the compiled one when built)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the store of a failed iteration")
    args = parser.parse_args(argv)
    src = os.path.join(os.path.dirname(HERE), "src")
    sys.path.insert(0, src)
    from rocketstore import _impl

    implementation = args.impl or _impl.DEFAULT.name
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    print(
        f"{name}: {args.iterations} iterations x {args.rounds} kills, impl={implementation}, seed={seed}",
        flush=True,
    )
    rng = random.Random(seed)
    violations = 0
    started = time.monotonic()
    for i in range(args.iterations):
        workdir = tempfile.mkdtemp(prefix=f"{name}-")
        try:
            counts = one_iteration(workdir, implementation, rng, src=src, rounds=args.rounds)
        except Exception:
            violations += 1
            print(f"iteration {i}: VIOLATION (store kept in {workdir})", flush=True)
            traceback.print_exc()
            if not args.keep:
                shutil.rmtree(workdir, ignore_errors=True)
            continue
        shutil.rmtree(workdir, ignore_errors=True)
        for k in totals:
            totals[k] += counts[k]
        if (i + 1) % 10 == 0 or i + 1 == args.iterations:
            print(
                f"{i + 1} iterations, {violations} violations, {totals}, {time.monotonic() - started:.0f} s",
                flush=True,
            )
    print(summary(totals, args.iterations, violations), flush=True)
    return 1 if violations else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--impl", default=None, help="c or py (default: the compiled one when built)")
    parser.add_argument("--power-loss", action="store_true", help="simulate a power cut after each kill")
    parser.add_argument("--rounds", type=int, default=1, help="crashes per store before the check")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--cq-units",
        type=int,
        default=CQ_UNITS,
        help="units per ConsumeQueue file (small: queues roll over many files)",
    )
    parser.add_argument(
        "--keep-failures",
        default=None,
        help="copy failing stores here, with each round's child stdout and rounds.json",
    )
    args = parser.parse_args(argv)
    set_queue_units(args.cq_units)
    src = os.path.join(os.path.dirname(HERE), "src")
    sys.path.insert(0, src)
    import rocketstore

    implementation = args.impl or rocketstore.IMPLEMENTATION
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    print(
        f"crash harness: {args.iterations} iterations, impl={implementation}, "
        f"power_loss={args.power_loss}, rounds={args.rounds}, cq_units={CQ_UNITS}, seed={seed}",
        flush=True,
    )
    rng = random.Random(seed)
    failures = refused = lost = 0
    totals = {"acknowledged": 0, "messages": 0}
    t0 = time.monotonic()
    for i in range(args.iterations):
        workdir = tempfile.mkdtemp(prefix="rs-crash-")
        try:
            counts = one_iteration(
                workdir, implementation, rng, power_loss=args.power_loss, src=src, rounds=args.rounds
            )
            for k in totals:
                totals[k] += counts[k]
        except Exception as exc:  # any failure to keep a promise, not only a failed assert
            failures += 1
            refused += isinstance(exc, RefusedOpen)
            lost += exc.count if isinstance(exc, LostAcknowledged) else 0
            where = traceback.extract_tb(exc.__traceback__)[-1]
            print(
                f"iteration {i}: VIOLATION at line {where.lineno} ({where.line}): "
                f"{type(exc).__name__}: {exc}",
                flush=True,
            )
            if args.keep_failures:
                shutil.copytree(workdir, os.path.join(args.keep_failures, f"failure-{i}"))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        if (i + 1) % 50 == 0:
            print(f"  {i + 1} iterations, {failures} violations, {time.monotonic() - t0:.0f} s", flush=True)
    print(
        f"done: {args.iterations} iterations, {failures} violations, {refused} refused opens, "
        f"{lost} lost acknowledged puts, "
        f"{totals['acknowledged']} acknowledged durable puts checked, "
        f"{totals['messages']} messages recovered, {time.monotonic() - t0:.0f} s",
        flush=True,
    )
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child_main(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(main())
