"""Compacted topics written by rocketstore: the compaction log keeps the latest message of each
key once retention deleted the CommitLog segments, in files laid out as a RocketMQ 5.3.3 broker
lays them out (the ``v5-compaction`` fixture is the reference), and a crash in a compaction's
swap leaves a store whose compacted view is whole."""

import json
import os
import struct

import pytest
from rocketmq5 import unpack

from rocketstore import Message, MessageStore
from rocketstore.errors import StoreConfigError
from rocketstore.format._codec_py import java_hash
from rocketstore.queues.compaction import compaction_log_size
from rocketstore.services import compaction as compaction_service

TOPIC = "Profiles"
SMALL = dict(
    commitlog_file_size=64 * 1024,
    compaction_queue_file_size=736,  # 16 units, as the fixture's broker had
    compaction_file_size=4096,
    clean_resource_interval_ms=0,
)


def _fill(store, rounds, keys=5, queue_id=0):
    """Puts ``rounds`` rounds of ``keys`` keyed messages, a tombstone for key 3 in round 2;
    returns {key: latest body} as a compacted view must give it."""
    latest = {}
    for r in range(rounds):
        for k in range(keys):
            key = f"user-{k}"
            body = b"" if (k == 3 and r == 2) else f"{key} round {r} ".encode() * 20
            store.put(TOPIC, body, keys=key, queue_id=queue_id)
            latest.pop(key, None)
            if body:
                latest[key] = body
    return latest


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _log_dir(root, kind="compactionLog", queue_id=0):
    return os.path.join(root, "compaction", kind, TOPIC, str(queue_id))


def test_the_log_file_size_is_the_brokers():
    # the fixture's broker: 736-byte queue files, 4096 configured -> 4416-byte log files
    assert compaction_log_size(736, 4096) == 4416
    assert compaction_log_size(10 * 1024 * 1024 // 46 * 46, 100 * 1024 * 1024) == 104857460
    assert compaction_log_size(736, 736 * 12 + 100) == 736 * 12
    assert compaction_log_size(736, 736 * 12 + 400) == 736 * 13


def test_a_compacted_topic_keeps_the_latest_of_each_key_after_its_segments_go(tmp_path, impl):
    root = str(tmp_path / "s")
    with MessageStore(root, implementation=impl.name, **SMALL) as store:
        store.create_topic(TOPIC, 1)
        policy = store.set_topic_retention(TOPIC, cleanup_policy="compaction")
        assert policy["cleanup_policy"] == "compaction"
        latest = _fill(store, 40)
        for _ in range(60):  # later records of another topic push the compacted topic's segments out
            store.put("Other", b"x" * 1000)
        assert store.min_offset == 0
        store.clean(force=True)
        assert store.min_offset > 0 and store.min_queue_offset(TOPIC, 0) > 0
        got = store.compacted(TOPIC, 0)
        assert {k: m.body for k, m in got.items()} == latest
        log = store.compaction_log(TOPIC, 0)
        offsets = [m.queue_offset for m in log]
        assert offsets == sorted(offsets) and len(offsets) < 200
        assert all(m.topic == TOPIC and m.queue_id == 0 for m in log)
        stats = store.compaction_stats() if hasattr(store, "compaction_stats") else None
        del stats
    # the files are the broker's shapes: log files of 4416 bytes, queue files of 736, same names
    names = sorted(os.listdir(_log_dir(root)))
    assert names and names == sorted(os.listdir(_log_dir(root, "compactionCq")))
    assert all(os.path.getsize(os.path.join(_log_dir(root), n)) == 4416 for n in names)
    assert all(os.path.getsize(os.path.join(_log_dir(root, "compactionCq"), n)) == 736 for n in names)
    with open(os.path.join(root, "compaction", "position-checkpoint"), encoding="utf-8") as f:
        assert json.load(f)["queueOffsetMap"][f"{TOPIC}_0"] > 0
    assert not os.path.exists(os.path.join(root, "compaction", compaction_service.SCRATCH))
    assert not os.path.exists(os.path.join(root, "config", compaction_service.SWAP_FILE))
    with MessageStore(root, implementation=impl.name, read_only=True) as store:
        assert {k: m.body for k, m in store.compacted(TOPIC, 0).items()} == latest


def test_a_copy_is_the_record_with_its_place_in_the_log(tmp_path, impl):
    """A copy's bytes are the CommitLog record's but for its physical offset (the broker's
    ``CompactionAppendMessageCallback``), and each unit is (position, size, tags code, store
    time, queue offset, 1, -1, 0)."""
    root = str(tmp_path / "s")
    with MessageStore(root, implementation=impl.name, **SMALL) as store:
        store.set_topic_retention(TOPIC, cleanup_policy="compaction")
        # not copied: the broker copies keyed messages only (a batch: a single put is refused)
        store.put_messages([Message(TOPIC, b"no key")])
        put = [store.put(TOPIC, f"v{i}".encode(), keys=f"k{i}", tags="T", queue_id=0) for i in range(3)]
        records = []
        for r in put:
            m = store.read(r.commitlog_offset)
            records.append((r, m))
    units, log, commitlog = (
        _read(path)
        for path in (
            os.path.join(_log_dir(root, "compactionCq"), "0" * 20),
            os.path.join(_log_dir(root), "0" * 20),
            os.path.join(root, "commitlog", "0" * 20),
        )
    )
    tags_code = java_hash("T")
    position = 0
    for i, (r, m) in enumerate(records):
        unit = struct.unpack_from(">qiqqqhii", units, i * 46)
        assert unit == (position, m.size, tags_code, m.store_timestamp, r.queue_offset, 1, -1, 0)
        original = commitlog[r.commitlog_offset : r.commitlog_offset + m.size]
        copy = log[position : position + m.size]
        assert copy[:28] == original[:28] and copy[36:] == original[36:]
        assert struct.unpack_from(">q", copy, 28)[0] == position
        position += m.size
    assert struct.unpack_from(">qiqqqhii", units, 3 * 46) == (0,) * 8


def test_rocketstore_continues_a_brokers_compaction_log(tmp_path, impl):
    """On the 5.3.3 fixture: new keyed puts go on in the broker's current files and roll where
    the broker rolls (next file = last + 4416), and a compaction rewrites the closed files."""
    root = str(unpack(tmp_path, "v5-compaction"))
    topic = "FixtureCompactTopic"
    with MessageStore(root, implementation=impl.name, clean_resource_interval_ms=0) as store:
        before = {k: m.body for k, m in store.compacted(topic, 0).items()}
        for i in range(40):
            store.put(topic, f"new {i} ".encode() * 30, keys=f"user-{i % 3}", queue_id=0)
            before.pop(f"user-{i % 3}", None)
            before[f"user-{i % 3}"] = f"new {i} ".encode() * 30
        store.clean()
        got = {k: m.body for k, m in store.compacted(topic, 0).items()}
        assert got == before
    names = [int(n) for n in sorted(os.listdir(_log_dir(root).replace(TOPIC, topic)))]
    assert all(n % 4416 == 0 for n in names) and names[-1] > 13248
    for n in names:
        assert os.path.getsize(os.path.join(_log_dir(root).replace(TOPIC, topic), f"{n:020d}")) == 4416
    with open(os.path.join(root, "compaction", "position-checkpoint"), encoding="utf-8") as f:
        positions = json.load(f)["queueOffsetMap"]
    assert positions[f"{topic}_0"] > 36 and positions[f"{topic}_1"] == 35


def test_a_crash_in_the_swap_is_finished_by_the_next_open(tmp_path, impl, monkeypatch):
    root = str(tmp_path / "s")
    with MessageStore(root, implementation=impl.name, **SMALL) as store:
        store.set_topic_retention(TOPIC, cleanup_policy="compaction")
        latest = _fill(store, 20)
        real = compaction_service.Compactor._finish_swap
        calls = []

        def crash(self, swap):
            calls.append(swap)
            # the first new file moved in, then the process "dies"
            new_log, _ = self._dirs(swap["topic"], swap["queue_id"], scratch=True)
            first = f"{swap['new'][0]:020d}"
            os.replace(os.path.join(new_log, first), os.path.join(_log_dir(root), first))
            raise OSError("killed")

        monkeypatch.setattr(compaction_service.Compactor, "_finish_swap", crash)
        store.clean()
        assert calls, "no compaction ran"
        assert os.path.exists(os.path.join(root, "config", compaction_service.SWAP_FILE))
        # a reader meeting the half-done swap still gets the right view
        assert {k: m.body for k, m in store.compacted(TOPIC, 0).items()} == latest
        monkeypatch.setattr(compaction_service.Compactor, "_finish_swap", real)
    with MessageStore(root, implementation=impl.name, **SMALL) as store:
        store.clean()
        assert {k: m.body for k, m in store.compacted(TOPIC, 0).items()} == latest
    assert not os.path.exists(os.path.join(root, "config", compaction_service.SWAP_FILE))
    assert not os.path.exists(os.path.join(root, "compaction", compaction_service.SCRATCH))


def test_a_bad_cleanup_policy_is_refused_and_changes_nothing(tmp_path, impl):
    with MessageStore(str(tmp_path / "s"), implementation=impl.name) as store:
        store.create_topic(TOPIC, 1)
        with pytest.raises(StoreConfigError, match="cleanup_policy"):
            store.set_topic_retention(TOPIC, cleanup_policy="compact")
        assert store.topic_retention(TOPIC)["cleanup_policy"] == "delete"
        store.set_topic_retention(TOPIC, cleanup_policy="compaction")
        store.set_topic_retention(TOPIC, cleanup_policy=None)
        assert store.topic_retention(TOPIC)["cleanup_policy"] == "delete"


_CHILD = r"""
import random, sys
from rocketstore import MessageStore
root, impl, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(seed)
store = MessageStore(root, implementation=impl, commitlog_file_size=64 * 1024,
                     compaction_queue_file_size=736, compaction_file_size=4096, clean_resource_interval_ms=0)
store.set_topic_retention("Profiles", cleanup_policy="compaction")
print("ready", flush=True)
while True:
    for _ in range(30):
        key = f"user-{rng.randrange(7)}"
        body = b"" if rng.random() < 0.1 else (key + " " + str(rng.random())).encode() * 5
        store.put("Profiles", body, keys=key, queue_id=rng.randrange(2))
    store.clean()
"""


@pytest.mark.slow
def test_a_killed_writer_leaves_compaction_files_a_broker_loads_and_the_whole_view(tmp_path, impl):
    """Killed at random points of puts and compactions, the store reopens; its compacted view is
    the latest message of each key over the queue (no segment was deleted), and each queue's log
    and queue files match by name and size, as the broker's ``sanityCheck`` wants."""
    import random
    import subprocess
    import sys
    import time

    from rocketstore.queues.compaction import latest_per_key

    root = str(tmp_path / "s")
    rng = random.Random(7)
    for seed in range(3):
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, root, impl.name, str(seed)], stdout=subprocess.PIPE
        )
        assert child.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.3, 1.2))
        child.kill()
        child.wait()
        child.stdout.close()
        with MessageStore(root, implementation=impl.name, **SMALL) as store:
            store.clean()
            for qid in (0, 1):
                everything = []
                position = store.min_queue_offset(TOPIC, qid)
                while position < store.max_queue_offset(TOPIC, qid):
                    got = store.get_message("check", TOPIC, qid, position, 256)
                    everything += got.messages
                    position = got.next_begin_offset
                want = {k: (m.queue_offset, m.body) for k, m in latest_per_key(everything).items()}
                have = {k: (m.queue_offset, m.body) for k, m in store.compacted(TOPIC, qid).items()}
                assert have == want
                log = store.compaction_log(TOPIC, qid)
                assert [m.queue_offset for m in log] == sorted({m.queue_offset for m in log})
    for qid in (0, 1):
        logs, cqs = os.listdir(_log_dir(root, queue_id=qid)), os.listdir(_log_dir(root, "compactionCq", qid))
        assert sorted(logs) == sorted(cqs)
        assert {os.path.getsize(os.path.join(_log_dir(root, queue_id=qid), n)) for n in logs} == {4416}
        assert {os.path.getsize(os.path.join(_log_dir(root, "compactionCq", qid), n)) for n in cqs} == {736}
    assert not os.path.exists(os.path.join(root, "compaction", compaction_service.SCRATCH))
    assert not os.path.exists(os.path.join(root, "config", compaction_service.SWAP_FILE))


def test_the_view_is_the_same_before_and_after_a_compaction_with_several_keys(tmp_path, impl):
    """The key is the whole ``KEYS`` string, as the broker's compaction has it: a tombstone for
    "a b" removes "a b" only, before a compaction as after it (a view keyed per word would show
    "a" gone before and back after)."""
    root = str(tmp_path / "s")
    with MessageStore(root, implementation=impl.name, **SMALL) as store:
        store.set_topic_retention(TOPIC, cleanup_policy="compaction")
        store.put(TOPIC, b"a alone", keys="a", queue_id=0)
        store.put(TOPIC, b"a and b", keys="a b", queue_id=0)
        store.put(TOPIC, b"", keys="a b", queue_id=0)
        before = {k: m.body for k, m in store.compacted(TOPIC, 0).items()}
        for i in range(60):  # enough to close log files
            store.put(TOPIC, b"x" * 300, keys=f"k{i % 4}", queue_id=0)
        store.clean()
        after = {k: m.body for k, m in store.compacted(TOPIC, 0).items()}
        assert before == {"a": b"a alone"}
        assert after["a"] == b"a alone" and "a b" not in after and "b" not in after
        assert store.stats()["compaction"]["compactions"] >= 1


def test_a_consumer_reads_a_compacted_topic_from_its_start_after_retention(tmp_path, impl):
    """Below the queue's min offset, pulls of a compacted topic are served from its compaction
    log, as a 5.x broker serves them: a reader from offset 0 gets what compaction kept, at its
    queue offsets, then the queue; such a message has no CommitLog offset (-1)."""
    root = str(tmp_path / "s")
    with MessageStore(root, implementation=impl.name, **SMALL) as store:
        store.create_topic(TOPIC, 1)
        store.set_topic_retention(TOPIC, cleanup_policy="compaction")
        latest = _fill(store, 40)
        for _ in range(60):
            store.put("Other", b"x" * 1000)
        store.clean(force=True)
        low = store.min_queue_offset(TOPIC, 0)
        assert low > 0
        kept = {m.queue_offset: m for m in store.compaction_log(TOPIC, 0) if m.queue_offset < low}
        got = store.get_message("g", TOPIC, 0, 0, 1000)
        below = [m for m in got.messages]
        assert [m.queue_offset for m in below] == sorted(kept)
        assert [m.body for m in below] == [kept[q].body for q in sorted(kept)]
        assert all(m.commitlog_offset == -1 for m in below) and list(got.units["commitlog_offset"]) == [
            -1
        ] * len(below)
        assert got.next_begin_offset == low
        seen, position = {}, 0  # a reader rebuilding its state from the start
        while position < store.max_queue_offset(TOPIC, 0):
            got = store.get_message("reader", TOPIC, 0, position, 16)
            for m in got.messages:
                seen.pop(m.keys, None)
                if m.body:
                    seen[m.keys] = m.body
            position = got.next_begin_offset
        assert seen == latest
        # a tag filter applies below the min offset too
        assert store.get_message("g", TOPIC, 0, 0, 1000, "NoSuchTag").messages == []
        # a topic that is not compacted: OFFSET_TOO_SMALL as before
        assert store.get_message("g", "Other", 0, 0, 10).status.name == "OFFSET_TOO_SMALL"


_RETAINING_CHILD = r"""
import os, random, sys
from rocketstore import MessageStore
root, impl, seed, journal = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rng = random.Random(seed)
store = MessageStore(root, implementation=impl, commitlog_file_size=64 * 1024, default_queues=1,
                     compaction_queue_file_size=736, compaction_file_size=4096, clean_resource_interval_ms=0)
store.set_topic_retention("Profiles", cleanup_policy="compaction", retention_ms=0)
out = open(journal, "a", buffering=1)
print("ready", flush=True)
n = 0
while True:
    key = f"user-{int(rng.paretovariate(0.6)) % 400}"  # a few hot keys, many rarely written
    body = b"" if rng.random() < 0.1 else f"{key} {seed} {n} ".encode() * rng.randrange(1, 20)
    out.write(f"try {key} {body.hex()}\n")
    store.put("Profiles", body, keys=key, queue_id=0)
    out.write("done\n")
    n += 1
    if n % 50 == 0:
        store.clean()
"""


@pytest.mark.slow
def test_no_acknowledged_value_is_lost_when_a_writer_dies_during_retention(tmp_path, impl):
    """A writer putting into a compacted topic whose segments retention deletes as soon as it
    may is killed at random points, four times: after each, the compacted view holds, for every
    key, the value of its last acknowledged put (or of the one in flight, when the kill came
    between the store and the acknowledgement)."""
    import random
    import subprocess
    import sys
    import time

    root, journal = str(tmp_path / "s"), str(tmp_path / "journal")
    rng = random.Random(11)
    for seed in range(4):
        child = subprocess.Popen(
            [sys.executable, "-c", _RETAINING_CHILD, root, impl.name, str(seed), journal],
            stdout=subprocess.PIPE,
        )
        assert child.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.5, 1.5))
        child.kill()
        child.wait()
        child.stdout.close()
        acked, in_flight = {}, None
        with open(journal, encoding="utf-8") as f:
            for line in f:
                if line.startswith("try "):
                    _, key, body = line.split(" ")
                    in_flight = (key, bytes.fromhex(body.strip()))
                elif line.strip() == "done" and in_flight is not None:
                    acked[in_flight[0]] = in_flight[1]
                    in_flight = None
        with open(journal, "a", encoding="utf-8") as f:
            f.write("\n")  # a torn last line ends here
        with MessageStore(root, implementation=impl.name, **SMALL) as store:
            assert store.min_offset > 0 or seed == 0
            view = {k: m.body for k, m in store.compacted(TOPIC, 0).items()}
            for key, body in acked.items():
                if in_flight is not None and in_flight[0] == key and view.get(key, b"") == in_flight[1]:
                    continue
                assert view.get(key, b"") == body, key


def test_a_single_put_without_keys_to_a_compacted_topic_is_refused_as_a_broker_refuses_it(tmp_path, impl):
    """RocketMQ 5.x's SendMessageProcessor refuses a send to a ``cleanup.policy=COMPACTION``
    topic whose KEYS are blank (MESSAGE_ILLEGAL, "Required message key is missing"); a batch
    send is not checked (its messages without keys are stored, and compaction skips them)."""
    from rocketstore.errors import InvalidMessageError, KeyRequiredError

    root = str(tmp_path / "s")
    with MessageStore(root, implementation=impl.name, **SMALL) as store:
        store.put(TOPIC, b"before", queue_id=0)  # a known topic first (the one-call put takes it)
        store.set_topic_retention(TOPIC, cleanup_policy="compaction")
        refused = [
            lambda: store.put(TOPIC, b"x", queue_id=0),
            lambda: store.put(TOPIC, b"x", keys="", queue_id=0),
            lambda: store.put(TOPIC, b"x", keys=" \t", queue_id=0),
            lambda: store.put(TOPIC, b"x", keys=[], queue_id=0),
            lambda: store.put(TOPIC, b"x", tags="t", properties={"a": "b"}, queue_id=0),
            lambda: store.put(TOPIC, b"x", delay_ms=5_000, queue_id=0),
            lambda: store.put(TOPIC, b"x", delay_level=1, queue_id=0),
            lambda: store.put(TOPIC, b"x", compress="zlib", queue_id=0),
            lambda: store.put(Message(TOPIC, b"x", queue_id=0)),
            lambda: store.put_pipelined(TOPIC, b"x", queue_id=0),
        ]
        for put in refused:
            with pytest.raises(KeyRequiredError, match="Required message key is missing"):
                put()
        assert issubclass(KeyRequiredError, InvalidMessageError)
        assert store.max_queue_offset(TOPIC, 0) == 1  # nothing written
        assert store.put(TOPIC, b"k", keys="user-1", queue_id=0).ok
        assert store.put(TOPIC, b"k", keys=["user-2"], queue_id=0).ok
        assert store.put(TOPIC, b"k", properties={"KEYS": "user-3"}, queue_id=0).ok
        assert store.put(Message(TOPIC, b"k", keys="user-4", queue_id=0)).ok
        assert store.put_pipelined(TOPIC, b"k", keys="user-5", queue_id=0).result().ok
        # a batch is not checked (as the broker's sendBatchMessage): stored, not compacted
        assert all(r.ok for r in store.put_messages([Message(TOPIC, b"batch", queue_id=0)]))
        assert store.put_batch(TOPIC, [b"b1", b"b2"], queue_id=0).ok
        assert store.max_queue_offset(TOPIC, 0) == 9
        assert sorted(store.compacted(TOPIC, 0)) == ["user-1", "user-2", "user-3", "user-4", "user-5"]
        store.set_topic_retention(TOPIC, cleanup_policy="delete")  # no longer compacted
        assert store.put(TOPIC, b"x", queue_id=0).ok
        store.set_topic_retention(TOPIC, cleanup_policy="compaction")
    with MessageStore(root, implementation=impl.name, **SMALL) as store:  # reopened: still refused
        with pytest.raises(KeyRequiredError):
            store.put(TOPIC, b"x", queue_id=0)
        assert store.put(TOPIC, b"k", keys="user-1", queue_id=0).ok


def _counting_careful_path(monkeypatch):
    """Counts the calls of the careful path of puts (Putter.put, Putter.put_pipelined): the
    front a store opened after this hands what it does not take in one call there."""
    from rocketstore.processes.puts import Putter

    calls = []
    for name in ("put", "put_pipelined"):
        method = getattr(Putter, name)

        def counting(self, *args, _method=method, _name=name, **kwargs):
            calls.append(_name)
            return _method(self, *args, **kwargs)

        monkeypatch.setattr(Putter, name, counting)
    return calls


def test_a_keyed_put_to_a_compacted_topic_takes_the_one_call_path(tmp_path, impl, monkeypatch):
    """A put whose keys are plainly present (a str beginning with a printable ASCII character)
    to a compacted topic already checked goes into the core in one call, as a put to an ordinary
    topic does: the careful path is not called."""
    calls = _counting_careful_path(monkeypatch)
    root = str(tmp_path / "s")
    with MessageStore(root, implementation=impl.name, **SMALL) as store:
        store.set_topic_retention(TOPIC, cleanup_policy="compaction")
        store.put(TOPIC, b"first", keys="user-0", queue_id=0)  # checked here
        store.put("Plain", b"first", queue_id=0)
        del calls[:]
        results = [store.put(TOPIC, b"k", keys=f"user-{i}", queue_id=0) for i in range(1, 4)]
        results.append(store.put(TOPIC, b"k", keys="user-4", tags="t", properties={"a": "b"}, queue_id=0))
        results.append(store.put_pipelined(TOPIC, b"k", keys="user-5", queue_id=0).result())
        results.append(store.put("Plain", b"x", queue_id=0))
        assert calls == []
        assert [r.queue_offset for r in results] == [1, 2, 3, 4, 5, 1]
        message = store.get_by_queue_offset(TOPIC, 0, 4)
        assert (message.keys, message.tags, message.properties["a"]) == ("user-4", "t", "b")
        assert sorted(store.compacted(TOPIC, 0)) == [f"user-{i}" for i in range(6)]


@pytest.mark.parametrize("pipelined", [False, True])
def test_keys_not_plainly_present_go_the_careful_path_to_a_compacted_topic(
    tmp_path, impl, monkeypatch, pipelined
):
    """Keys the one-call test does not take (None, a list, a str beginning with a blank or a
    character past ASCII, KEYS in the properties) go the careful path, which stores the put or
    refuses it (KeyRequiredError, nothing written) as it always did."""
    from rocketstore.errors import KeyRequiredError

    calls = _counting_careful_path(monkeypatch)
    root = str(tmp_path / "s")
    with MessageStore(root, implementation=impl.name, **SMALL) as store:
        put = (lambda *a, **k: store.put_pipelined(*a, **k).result()) if pipelined else store.put
        store.set_topic_retention(TOPIC, cleanup_policy="compaction")
        put(TOPIC, b"first", keys="user-0", queue_id=0)  # checked
        refused = [
            dict(),
            dict(keys=""),
            dict(keys=" "),
            dict(keys="\t\n"),
            dict(keys=[]),
            dict(keys=[" "]),
            dict(properties={"KEYS": " "}),
            dict(properties={"a": "b"}),
            dict(tags="t"),
        ]
        for kwargs in refused:
            del calls[:]
            with pytest.raises(KeyRequiredError):
                put(TOPIC, b"x", queue_id=0, **kwargs)
            assert calls, kwargs
        assert store.max_queue_offset(TOPIC, 0) == 1  # nothing written
        stored = [
            ("  x", dict(keys="  x")),
            (" a b", dict(keys=" a b")),
            ("\u00e9t\u00e9", dict(keys="\u00e9t\u00e9")),
            ("k1", dict(keys=["k1"])),
            ("k2 k3", dict(keys=("k2", "k3"))),
            ("k4", dict(properties={"KEYS": "k4"})),
        ]
        for offset, (keys, kwargs) in enumerate(stored, 1):
            del calls[:]
            assert put(TOPIC, b"k", queue_id=0, **kwargs).queue_offset == offset
            assert calls, kwargs
            assert store.get_by_queue_offset(TOPIC, 0, offset).keys == keys
        assert store.max_queue_offset(TOPIC, 0) == 1 + len(stored)


def test_a_topic_made_compacted_while_its_first_put_is_checked_is_not_remembered_as_ordinary(
    tmp_path, impl, monkeypatch
):
    """A put checks a topic (not compacted) while another thread makes it compacted: the check
    and the change are ordered (the topic table's lock), so the topic is not remembered as an
    ordinary one, and a keyless put after the change is refused."""
    import threading

    from rocketstore.errors import KeyRequiredError
    from rocketstore.services.topics import Topics

    looked, changed = threading.Event(), threading.Event()
    compacted = Topics.compacted

    def slow_look(self, topic):
        found = compacted(self, topic)
        if topic == TOPIC and not looked.is_set():
            looked.set()
            changed.wait(0.5)  # the change, unless it waits for this check to end
        return found

    monkeypatch.setattr(Topics, "compacted", slow_look)
    root = str(tmp_path / "s")
    with MessageStore(root, implementation=impl.name, **SMALL) as store:
        store.create_topic(TOPIC, 1)

        def change():
            looked.wait(5)
            store.set_topic_retention(TOPIC, cleanup_policy="compaction")
            changed.set()

        thread = threading.Thread(target=change)
        thread.start()
        store.put(TOPIC, b"checked before the change", queue_id=0)
        thread.join()
        with pytest.raises(KeyRequiredError):
            store.put(TOPIC, b"after the change", queue_id=0)
        assert store.max_queue_offset(TOPIC, 0) == 1
