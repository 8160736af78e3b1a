"""Consumer groups across processes (rocketstore.group): allocation, rebalance, offsets, kill -9."""

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

import rocketstore
from rocketstore import GroupConsumer, MessageStore
from rocketstore.errors import InvalidMessageError, NotAStoreError
from rocketstore.group import GROUPS_DIR, allocate_averagely

SRC = str(pathlib.Path(rocketstore.__file__).resolve().parents[1])


@pytest.mark.parametrize(
    "queues, members, expected",
    [
        # RocketMQ's AllocateMessageQueueAveragely: contiguous ranges, the first ones one longer
        (8, 3, [[0, 1, 2], [3, 4, 5], [6, 7]]),
        (4, 4, [[0], [1], [2], [3]]),
        (2, 3, [[0], [1], []]),
        (10, 4, [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]),
        (0, 2, [[], []]),
    ],
)
def test_allocation_is_rocketmqs_average(queues, members, expected):
    ids = [f"c{i}" for i in range(members)]
    got = [allocate_averagely(list(range(queues)), ids, me) for me in ids]
    assert got == expected
    assert sorted(q for share in got for q in share) == list(range(queues))
    assert allocate_averagely(list(range(queues)), ids, "stranger") == []


def fill(store, n, topic="T", start=0):
    for i in range(start, start + n):
        store.put(topic, b"%06d" % i)


def test_members_share_the_queues_and_take_over_when_one_leaves(tmp_path, impl):
    with MessageStore(tmp_path / "s", implementation=impl.name) as store:
        store.create_topic("T", 4)
        fill(store, 100)
        a, b = GroupConsumer(store, "g", "T"), GroupConsumer(store, "g", "T")
        got_a = a.poll(1000)
        got_b = b.poll(1000)
        got_a += a.poll(1000)  # rebalanced: b joined after a's first poll
        assert a._mine.isdisjoint(b._mine) and len(a._mine) == len(b._mine) == 2
        bodies = [m.body for m in got_a + got_b]
        assert len(set(bodies)) == 100  # every message, some maybe twice during the rebalance
        b.close()
        fill(store, 20, start=100)
        assert sorted(m.body for m in a.poll(1000)) == [b"%06d" % i for i in range(100, 120)]
        a.close()
        store.persist_offsets()
        assert all(store.committed_offset("g", "T", q) == 30 for q in range(4))
        assert os.path.exists(tmp_path / "s" / GROUPS_DIR / "g.offsets.json")


def test_a_new_member_starts_where_the_group_committed(tmp_path, impl):
    with MessageStore(tmp_path / "s", implementation=impl.name) as store:
        store.create_topic("T", 2)
        fill(store, 10)
        with GroupConsumer(store, "g", "T") as first:
            assert len(first.poll(1000)) == 10
        fill(store, 4, start=10)
        with GroupConsumer(store, "g", "T") as second:
            assert sorted(m.body for m in second.poll(1000)) == [b"%06d" % i for i in range(10, 14)]


def test_without_auto_commit_only_commit_records(tmp_path, impl):
    with MessageStore(tmp_path / "s", implementation=impl.name) as store:
        store.create_topic("T", 1)
        fill(store, 5)
        member = GroupConsumer(store, "g", "T", auto_commit=False)
        assert len(member.poll(1000)) == 5
        member.close()
        with GroupConsumer(store, "g", "T", auto_commit=False) as again:
            assert len(again.poll(1000)) == 5  # nothing was committed: delivered again
            again.commit()
        with GroupConsumer(store, "g", "T") as third:
            assert third.poll(1000) == []


def test_broadcasting_gives_every_instance_every_message(tmp_path, impl):
    with MessageStore(tmp_path / "s", implementation=impl.name) as store:
        store.create_topic("T", 3)
        fill(store, 30)
        one = GroupConsumer(store, "g", "T", broadcasting=True, instance="one")
        two = GroupConsumer(store, "g", "T", broadcasting=True, instance="two")
        assert len(one.poll(1000)) == 30 and len(two.poll(1000)) == 30
        one.close()
        two.close()
        fill(store, 3, start=30)
        with GroupConsumer(store, "g", "T", broadcasting=True, instance="one") as again:
            assert len(again.poll(1000)) == 3


def test_a_member_that_stops_beating_loses_its_queues(tmp_path, impl):
    now = [1_000_000]
    clock = lambda: now[0]  # noqa: E731
    with MessageStore(tmp_path / "s", implementation=impl.name) as store:
        store.create_topic("T", 2)
        fill(store, 2)
        a = GroupConsumer(store, "g", "T", session_timeout=5, clock=clock)
        b = GroupConsumer(store, "g", "T", session_timeout=5, clock=clock)
        a.poll()
        b.poll()
        assert len(a._mine) == len(b._mine) == 1
        now[0] += 6000  # b is stuck: it does not poll
        a.poll()
        assert len(a._mine) == 2
        b.poll()  # b comes back: it joins again and the queues are shared again
        a.poll()
        assert len(a._mine) == len(b._mine) == 1
        a.close()
        b.close()


def test_bad_arguments_are_typed_errors(tmp_path):
    with MessageStore(tmp_path / "s") as store:
        for group in ("", "a/b", "..", None):
            with pytest.raises(InvalidMessageError):
                GroupConsumer(store, group, "T")
        with pytest.raises(ValueError):
            GroupConsumer(store, "g", "T", session_timeout=0)
        with pytest.raises(TypeError):
            GroupConsumer(store, "g", "T", session_timeout="10")
        with pytest.raises(ValueError):
            GroupConsumer(store, "g", "T", commit_interval=-1)
        with pytest.raises(TypeError):
            GroupConsumer(store, "g", "T", commit_interval=None)
        directory = tmp_path / "s" / GROUPS_DIR
        directory.mkdir(exist_ok=True)
        (directory / "x.members").mkdir()  # not a file: left as it is
        with pytest.raises(NotAStoreError):
            GroupConsumer(store, "x", "T")
        assert (directory / "x.members").is_dir()


MEMBER = r"""
import sys
from rocketstore import GroupConsumer, MessageStore
path, out, state = sys.argv[1], sys.argv[2], sys.argv[3]
with MessageStore(path, read_only=True) as store, open(out, "ab", buffering=0) as log:
    # a read-only store writes nothing in its directory: the group's files are in ``state``
    member = GroupConsumer(store, "g", "T", session_timeout=2, state_dir=state)
    for msg in member:
        log.write(msg.body + b"\n")   # processed (then the next poll commits it)
"""


@pytest.mark.slow
def test_members_killed_at_random_never_make_the_group_skip(tmp_path, rng):
    """One writer, three member processes; one member is killed with SIGKILL at random moments
    and restarted, many times (``ROCKETSTORE_GROUP_KILL_ROUNDS``, 30): every message is consumed
    at least once, duplicates are counted."""
    path = str(tmp_path / "s")
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    logs = [str(tmp_path / f"m{i}.log") for i in range(3)]
    n, rounds = 0, int(os.environ.get("ROCKETSTORE_GROUP_KILL_ROUNDS", "30"))

    def start(i):
        return subprocess.Popen(
            [sys.executable, "-c", MEMBER, path, logs[i], str(tmp_path / "groups")], env=env
        )

    with MessageStore(path) as store:
        store.create_topic("T", 6)
        store.put("T", b"start")
        members = [start(i) for i in range(3)]
        try:
            for _ in range(rounds):
                for _ in range(rng.randrange(20, 200)):
                    store.put("T", b"%08d" % n)
                    n += 1
                time.sleep(rng.uniform(0, 0.05))
                victim = rng.randrange(3)
                members[victim].send_signal(signal.SIGKILL)
                members[victim].wait()
                members[victim] = start(victim)
            want = {b"%08d" % i for i in range(n)} | {b"start"}
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                seen = set()
                for log in logs:
                    if os.path.exists(log):
                        seen.update(pathlib.Path(log).read_bytes().split())
                if want <= seen:
                    break
                time.sleep(0.2)
        finally:
            for proc in members:
                proc.kill()
                proc.wait()
    lines = [line for log in logs if os.path.exists(log) for line in pathlib.Path(log).read_bytes().split()]
    missing = want - set(lines)
    assert not missing, f"{len(missing)} of {len(want)} never consumed, e.g. {sorted(missing)[:5]}"
    duplicates = len(lines) - len(set(lines))
    print(f"{n + 1} messages, {rounds} kills: {duplicates} delivered again")


def test_the_writer_writes_the_groups_offsets_into_consumer_offset_json(tmp_path, monkeypatch):
    import rocketstore.queues.checkpointing as checkpointing

    monkeypatch.setattr(checkpointing, "OFFSETS_PERSIST_MS", 0)
    path = tmp_path / "s"
    with MessageStore(path, checkpoint_interval_ms=10) as store:
        store.create_topic("T", 1)
        fill(store, 3)
        # (the writer's own group: a read-only store's is kept in memory, a joined process's is in the files)
        member = GroupConsumer(store, "g", "T", commit_interval=0)
        assert len(member.poll(10)) == 3
        member.poll(10)  # commits what the first poll handed out
        deadline = time.monotonic() + 30
        text = ""
        while time.monotonic() < deadline and '"T@g"' not in text:
            time.sleep(0.02)
            offsets = path / "config" / "consumerOffset.json"
            text = offsets.read_text() if offsets.exists() else ""
        assert '"T@g":{0:3' in text.replace(" ", "").replace("\n", "").replace("\t", "")
        assert store.committed_offset("g", "T", 0) == 3
        member.close()
