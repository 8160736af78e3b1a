"""Crash tests: a child process doing durable puts is SIGKILLed; nothing it was promised is lost.

The child (tests/crash_child.py) prints one line per acknowledged durable put. The parent kills
it with SIGKILL after a number of acknowledgements (plus a seeded random delay, so the kill lands
anywhere in the append path), reopens the store and checks every acknowledged message.
"""

import os
import pathlib
import signal
import struct
import subprocess
import sys
import time
import zlib

import pytest

import rocketstore
from rocketstore import MessageStore, PutStatus

SEGMENT = 64 * 1024
HOST = "10.0.0.7"
TESTS = pathlib.Path(__file__).resolve().parent
SRC = str(
    pathlib.Path(rocketstore.__file__).resolve().parents[1]
)  # where the package under test was imported from (src/ or site-packages)
CHILD = str(TESTS / "crash_child.py")


def run_and_kill(path, impl, mode, rng, acks_before_kill):
    """Start the child, kill it after ``acks_before_kill`` acks; return [(msg_id, body)] acked."""
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    child = subprocess.Popen(
        [sys.executable, CHILD, str(path), impl.name, mode, str(rng.randrange(2**32)), str(SEGMENT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    acked = []
    deadline = time.monotonic() + 120
    try:
        first = child.stdout.readline()
        assert first == b"READY\n", (first, child.stderr.read() if child.poll() is not None else b"")
        while len(acked) < acks_before_kill:
            line = child.stdout.readline()
            assert line, f"child exited early: {child.wait()} {child.stderr.read()!r}"
            acked.append(line)
            assert time.monotonic() < deadline, "child too slow"
        time.sleep(rng.random() * 0.05)  # land the kill anywhere in the put loop
        child.send_signal(signal.SIGKILL)
        child.wait(60)
        rest = child.stdout.read()  # through the reader's buffer: communicate() would skip it
        err = child.stderr.read()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL, err
    # lines already in the pipe were acknowledged too; a torn last line was not yet
    acked += [line + b"\n" for line in rest.split(b"\n")[:-1]]
    out = []
    for line in acked:
        tag, msg_id, body_hex = line.decode().split()
        assert tag == "ACK"
        out.append((msg_id, bytes.fromhex(body_hex)))
    print(f"mode={mode} impl={impl.name} acknowledged={len(out)}")
    return out


def check_every_record_up_to_the_end(path, impl, store):
    """Every record in [min_offset, max_offset) decodes with a valid CRC, segment by segment."""
    codec = impl.codec
    end = store.max_offset
    names = sorted(os.listdir(os.path.join(path, "commitlog")))
    total = 0
    for name in names:
        start = int(name)
        if start >= end:
            break
        with open(os.path.join(path, "commitlog", name), "rb") as f:
            data = f.read()
        limit = min(SEGMENT, end - start)
        rows, stop, reason = codec.decode_batch(data, 0, limit, check_crc=True)
        if limit == SEGMENT:
            assert reason == codec.STOP_BLANK, (name, stop, reason)
        else:
            assert (stop, reason) == (limit, codec.STOP_LIMIT), (name, stop, reason)
        for row in rows:
            body = data[int(row["body_pos"]) : int(row["body_pos"]) + int(row["body_len"])]
            assert int(row["body_crc"]) == zlib.crc32(body) & 0x7FFFFFFF
            assert int(row["physical_offset"]) == start + int(row["position"])
        total += len(rows)
    messages = list(store.iter_messages())
    assert len(messages) == total
    for m in messages:
        assert store.read(m.commitlog_offset).body == m.body  # read() checks the CRC again
    return messages


def reopen_and_check(path, impl, acked):
    with MessageStore(path, implementation=impl.name, store_host=HOST) as store:
        assert not store.last_shutdown_clean
        for msg_id, body in acked:
            assert store.get_by_msg_id(msg_id).body == body, f"acknowledged message {msg_id} lost"
        messages = check_every_record_up_to_the_end(path, impl, store)
        assert len(messages) >= len(acked)
        queue_offsets = {}
        for m in messages:  # queue offsets survive the crash without gaps
            expected = queue_offsets.get(m.queue_id, 0)
            assert m.queue_offset == expected
            queue_offsets[m.queue_id] = expected + 1
        end = store.max_offset
        r = store.put("CrashTopic", b"after the crash", durable=True)
        assert r.status is PutStatus.PUT_OK
        assert r.queue_offset == queue_offsets.get(r.queue_id, 0)
        assert r.commitlog_offset == end or r.commitlog_offset % SEGMENT == 0
        assert store.read(r.commitlog_offset).body == b"after the crash"
    with MessageStore(path, implementation=impl.name, store_host=HOST) as store:
        assert store.last_shutdown_clean
        assert list(store.iter_messages())[-1].body == b"after the crash"


@pytest.mark.parametrize("mode", ["single", "pipelined"])
def test_sigkill_during_durable_puts_loses_nothing_acknowledged(tmp_path, impl, mode, rng):
    path = tmp_path / "store"
    acked = run_and_kill(path, impl, mode, rng, acks_before_kill=300)
    assert len(acked) >= 300
    reopen_and_check(path, impl, acked)


def test_sigkill_during_durable_batch_puts_leaves_only_valid_records(tmp_path, impl, rng):
    path = tmp_path / "store"
    acked = run_and_kill(path, impl, "batch", rng, acks_before_kill=600)
    assert len(acked) >= 600
    reopen_and_check(path, impl, acked)


def test_repeated_crashes_keep_every_acknowledged_message(tmp_path, impl, rng):
    path = tmp_path / "store"
    acked = []
    for mode in ("single", "batch", "single"):
        if acked:  # recover in between, as a restarted service would
            with MessageStore(path, implementation=impl.name, store_host=HOST) as store:
                for msg_id, body in acked:
                    assert store.get_by_msg_id(msg_id).body == body
                check_every_record_up_to_the_end(path, impl, store)
        acked += run_and_kill(path, impl, mode, rng, acks_before_kill=rng.randrange(50, 200))
    reopen_and_check(path, impl, acked)


def test_an_abnormal_open_makes_the_commitlog_it_kept_durable(tmp_path, impl, monkeypatch):
    """After a kill, the records past the last flush are only in the page cache; recovery finds
    them valid and keeps them, and the reopened store's flush thread starts at the recovered end,
    reporting all of it as flushed. So the open must msync what it kept (from the checkpoint's
    segment on), or a power cut after the next acknowledged put could lose the kept records and
    the recovery after it would cut at the hole, acknowledged records and all."""
    from rocketstore.files.checkpoint import Checkpoint
    from rocketstore.files.mapped_file import MappedFile

    path = tmp_path / "store"
    with MessageStore(path, implementation=impl.name, commitlog_file_size=SEGMENT, store_host=HOST) as store:
        results = [store.put("TopicK", b"%05d" % i + b"x" * 700) for i in range(300)]
    end = results[-1].commitlog_offset + results[-1].size
    confirm = results[20].commitlog_offset
    assert end > confirm + 3 * SEGMENT  # the kept records span several segments
    # What a kill leaves: the abort file and a checkpoint written before most of the records.
    (path / "abort").touch()
    cp = Checkpoint(str(path / "checkpoint"))
    cp.confirm_phy_offset = confirm
    cp.flush()

    synced = []
    real_flush = MappedFile.flush

    def spy(self, start=0, stop=None):
        if pathlib.Path(self.path).parent.name == "commitlog":
            synced.append(
                (
                    self.file_from_offset + start,
                    self.file_from_offset + (self.file_size if stop is None else stop),
                )
            )
        return real_flush(self, start, stop)

    monkeypatch.setattr(MappedFile, "flush", spy)
    with MessageStore(path, implementation=impl.name, commitlog_file_size=SEGMENT, store_host=HOST) as store:
        assert not store.last_shutdown_clean
        assert store.flushed_offset == end  # what it claims durable from the start...
        at_open = sorted(synced)
        covered = confirm - confirm % SEGMENT  # ...was msynced by the open, from there on
        for lo, hi in at_open:
            if lo <= covered:
                covered = max(covered, hi)
        assert covered >= end, f"msynced {at_open}: [{covered}, {end}) only in the page cache"
        assert store.read(results[-1].commitlog_offset).body == b"00299" + b"x" * 700


@pytest.mark.parametrize("tear", ["properties", "topic"])
def test_a_record_torn_past_the_checkpoint_ends_the_recovered_data(tmp_path, impl, tear):
    """A power cut can keep the page holding a record's body and lose the one holding its topic
    and properties: the body CRC still matches. Past what the checkpoint vouches for, recovery
    after an abnormal stop ends the data at such a record, as at a bad CRC; before this it kept
    it (verify() then reported 'properties are not valid UTF-8', seen in the crash harness)."""
    from rocketstore.files.checkpoint import Checkpoint

    path = tmp_path / "store"
    with MessageStore(path, implementation=impl.name, commitlog_file_size=SEGMENT, store_host=HOST) as store:
        results = [store.put("TopicK", b"%05d" % i, keys=f"k{i}", tags="t") for i in range(30)]
    (path / "abort").touch()  # what a kill leaves: the abort file, an older checkpoint
    cp = Checkpoint(str(path / "checkpoint"))
    cp.confirm_phy_offset = results[10].commitlog_offset
    cp.flush()
    torn = results[20]
    segment = path / "commitlog" / f"{torn.commitlog_offset - torn.commitlog_offset % SEGMENT:020d}"
    data = segment.read_bytes()
    [row], _, _ = impl.codec.decode_batch(data, torn.commitlog_offset % SEGMENT, max_records=1)
    at = int(row["topic_pos"] if tear == "topic" else row["properties_pos"])
    with open(segment, "r+b") as f:  # the body and its CRC stay as they were
        f.seek(at)
        f.write(b"\xff\xfe")  # not UTF-8 (properties), not topic characters
    (path / "abort").touch()
    with MessageStore(path, implementation=impl.name, commitlog_file_size=SEGMENT, store_host=HOST) as store:
        assert not store.last_shutdown_clean
        assert store.max_offset == torn.commitlog_offset  # the data ends before the torn record
        assert [store.read(r.commitlog_offset).body for r in results[:20]] == [b"%05d" % i for i in range(20)]
        with pytest.raises(rocketstore.errors.MessageNotFoundError):
            store.read(torn.commitlog_offset)
        report = store.verify()
        assert report["ok"], report["problems"]


def test_records_a_power_cut_left_past_a_hole_never_come_back(tmp_path, impl):
    """A power cut can lose a stretch of non-durable pages and keep later ones: recovery cuts the
    CommitLog at the hole, and what lies past it must go too. Before, the cut zeroed the tail
    only up to the first MiB that was zero already, so the old records past a longer hole
    stayed; once new records ended where an old one began, the next open scanned on into them
    and their queue units took the queue offsets of acknowledged messages (found by a power-cut
    campaign: 1,181 of 2,362 acknowledged messages read back wrong by queue offset)."""
    from rocketstore.files.checkpoint import Checkpoint

    segment, body = 8 << 20, 1000
    options = dict(commitlog_file_size=segment, store_host=HOST)
    path = tmp_path / "store"
    with MessageStore(path, implementation=impl.name, **options) as store:
        store.create_topic("T", 2)
        for i in range(100):
            store.put("T", b"A%07d" % i + b"a" * (body - 8), queue_id=0)
        durable = store.max_offset
        for i in range(6000):  # written back before the cut: old records past the hole
            store.put("T", b"B%07d" % i + b"b" * (body - 8), queue_id=i % 2)
    hole = -(-durable // 4096) * 4096 + 4096
    with open(path / "commitlog" / f"{0:020d}", "r+b") as f:  # 2.5 MiB of pages never written back
        f.seek(hole)
        f.write(bytes(5 << 19))
    (path / "abort").touch()  # the crash: an abnormal stop, a checkpoint from before the B records
    cp = Checkpoint(str(path / "checkpoint"))
    cp.confirm_phy_offset = durable
    cp.flush()
    with MessageStore(path, implementation=impl.name, **options) as store:
        assert not store.last_shutdown_clean
        assert store.max_offset <= hole
        acked = []
        while store.max_offset < hole + (5 << 19) + 50 * 1200:  # well past the hole
            acked.append(store.put("T", b"C%07d" % len(acked) + b"c" * (body - 8), queue_id=0))
        end = store.max_offset
    with MessageStore(path, implementation=impl.name, **options) as store:
        assert store.max_offset == end
        wrong = [
            r.queue_offset
            for r in acked
            if store.get_by_queue_offset("T", 0, r.queue_offset).msg_id != r.msg_id
        ]
        assert wrong == []
        assert store.max_queue_offset("T", 0) == acked[-1].queue_offset + 1
        report = store.verify()
        assert report["ok"], report["problems"]


def test_an_open_makes_its_abort_file_durable_before_it_writes(tmp_path, impl, monkeypatch):
    """The abort file says the next open must recover; if a power cut lost it but kept what the
    run wrote, that open would trust the queues and the index as they are on disk."""
    import rocketstore.processes.opening as opening

    synced = []
    real = opening.fsync_dir
    monkeypatch.setattr(
        opening, "fsync_dir", lambda d: (synced.append((d, (path / "abort").exists())), real(d))
    )
    path = tmp_path / "store"
    with MessageStore(path, implementation=impl.name, commitlog_file_size=SEGMENT) as store:
        assert (str(path), True) in synced  # fsynced the directory once the file was there
        store.put("T", b"x")


def test_a_reader_keeps_to_its_own_recovery_when_no_writer_holds_the_store(tmp_path, impl):
    """The live page is never flushed: after a power cut it can say records end past pages that
    never reached the disk. A read-only open with no writer holding the store keeps to what its
    own recovery found, which is what the next writer's recovery keeps; before, it followed the
    dead writer's page past its cut and handed out records at queue offsets the next writer then
    gave to other messages (found by a power-cut campaign)."""
    from rocketstore.files.checkpoint import Checkpoint

    options = dict(commitlog_file_size=1 << 20, store_host=HOST)
    path = tmp_path / "store"
    with MessageStore(path, implementation=impl.name, **options) as store:
        store.create_topic("T", 1)
        for i in range(20):
            store.put("T", b"A%03d" % i + b"a" * 500)
        durable = store.max_offset
        for i in range(40):
            store.put("T", b"B%03d" % i + b"b" * 500)
    with open(path / "commitlog" / f"{0:020d}", "r+b") as f:  # one page never written back
        f.seek(-(-durable // 4096) * 4096 + 4096)
        f.write(bytes(4096))
    (path / "abort").touch()
    cp = Checkpoint(str(path / "checkpoint"))
    cp.confirm_phy_offset = durable
    cp.flush()
    with MessageStore(path, implementation=impl.name, read_only=True, **options) as reader:
        read = {
            m.queue_offset: bytes(m.body) for m in reader.get_message("g", "T", 0, 0, max_msgs=200).messages
        }
        read_end = reader.max_queue_offset("T", 0)
    with MessageStore(path, implementation=impl.name, **options) as writer:
        assert read_end == writer.max_queue_offset("T", 0)
        kept = {q: bytes(writer.get_by_queue_offset("T", 0, q).body) for q in range(read_end)}
        assert read == kept


_KILLED_AFTER_INDEXING = """
import os, signal, sys
from rocketstore import MessageStore
s = MessageStore(sys.argv[1], implementation=sys.argv[2], dispatch_interval_ms=0, **OPTIONS)
for i in range(400):
    s.put("T", b"late-%d" % i, keys="late-%d" % i, durable=True)
s.query_by_key("T", "late-0")  # indexed: the header and slots name the new items (page cache only)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_read_only_open_finds_by_key_what_a_power_cut_left_of_the_index(tmp_path, impl):
    """A read-only open of a crashed store treats the index items past what the checkpoint
    vouches for as absent (a power cut kept a header and slots naming items it lost) and
    indexes those records again in memory, writing nothing."""
    options = dict(commitlog_file_size=1 << 20, index_slots=64, index_count=2000)
    root = tmp_path / "s"
    with MessageStore(root, implementation=impl.name, **options) as store:
        for i in range(30):
            store.put("T", b"early-%d" % i, keys="early-%d" % i)
    [index] = list((root / "index").iterdir())
    durable_items = struct.unpack_from(">i", index.read_bytes(), 36)[0]
    code = _KILLED_AFTER_INDEXING.replace("**OPTIONS", repr(options).join(("**", "")))
    child = subprocess.run([sys.executable, "-c", code, str(root), impl.name], capture_output=True)
    assert child.returncode == -9, child.stderr
    lo = -(-(40 + 4 * options["index_slots"] + 20 * durable_items) // 4096) * 4096
    with open(index, "r+b") as f:  # the power cut: the item pages written since the clean close lost
        f.seek(lo)
        f.write(bytes(index.stat().st_size - lo))
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    with MessageStore(root, implementation=impl.name, read_only=True, **options) as reader:
        assert sum(1 for i in range(30) if reader.query_by_key("T", "early-%d" % i)) == 30
        assert [m.body for m in reader.query_by_key("T", "late-399")] == [b"late-399"]
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


_KILLED_AFTER_A_RESUME_POINT = """
import os, signal, sys, time
from rocketstore import MessageStore
s = MessageStore(sys.argv[1], implementation=sys.argv[2], dispatch_interval_ms=5, checkpoint_interval_ms=20, **OPTIONS)
for i in range(30):
    s.put("T", b"early-%d" % i, keys="early-%d" % i, durable=True)
deadline = time.monotonic() + 10
while not os.path.exists(os.path.join(sys.argv[1], "indexResume")) and time.monotonic() < deadline:
    time.sleep(0.01)
s._opened.dispatch_thread.stop()  # no checkpoint after this one
for i in range(400):
    s.put("T", b"late-%d" % i, keys="late-%d" % i, durable=True)
s.query_by_key("T", "late-0")
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_read_only_open_rolls_the_index_back_to_its_resume_point_in_memory(tmp_path, impl):
    """With a resume point, a read-only open of a crashed store rolls the index file back to it
    in a private map (the items past it lost to a power cut) and writes nothing."""
    import json

    options = dict(commitlog_file_size=1 << 20, index_slots=64, index_count=2000)
    root = tmp_path / "s"
    MessageStore(root, implementation=impl.name, **options).close()
    code = _KILLED_AFTER_A_RESUME_POINT.replace("**OPTIONS", repr(options).join(("**", "")))
    child = subprocess.run([sys.executable, "-c", code, str(root), impl.name], capture_output=True)
    assert child.returncode == -9, child.stderr
    durable_items = json.loads((root / "indexResume").read_text())["header"][5]
    assert durable_items >= 2
    [index] = list((root / "index").iterdir())
    lo = -(-(40 + 4 * options["index_slots"] + 20 * durable_items) // 4096) * 4096
    with open(index, "r+b") as f:  # the power cut: the item pages written since the resume point lost
        f.seek(lo)
        f.write(bytes(index.stat().st_size - lo))
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    with MessageStore(root, implementation=impl.name, read_only=True, **options) as reader:
        assert [f.index_count for f in reader._opened.disk_index.files] == [durable_items]
        assert sum(1 for i in range(30) if reader.query_by_key("T", "early-%d" % i)) == 30
        assert sum(1 for i in range(400) if reader.query_by_key("T", "late-%d" % i)) == 400
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before
