"""Several writer processes on one store (rocketstore.processes.writers): a writable open in another
process joins the one holding the lock, writes through it, and takes over when it ends."""

import json
import os
import pathlib
import pickle
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import rocketstore
from rocketstore import Message, MessageStore
from rocketstore.errors import NotAStoreError, StoreLockedError
from rocketstore.processes.writers import SOCKET_NAME

SRC = str(pathlib.Path(rocketstore.__file__).resolve().parents[1])
SMALL = dict(commitlog_file_size=64 * 1024, consume_queue_units=64, index_slots=64, index_count=256)


def env():
    found = dict(os.environ)
    found["PYTHONPATH"] = SRC + os.pathsep + found.get("PYTHONPATH", "")
    # Children start as fast as from an installed package (its .pyc compiled): a machine that sets
    # PYTHONDONTWRITEBYTECODE would otherwise compile every module at each start, and the kill
    # tests' kills would seldom land inside an append (they missed a bug CI found that way).
    found.pop("PYTHONDONTWRITEBYTECODE", None)
    return found


def run_child(code, *args, timeout=120):
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
        env=env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def spawn_child(code, *args, stdin=False):
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
        env=env(),
        stdin=subprocess.PIPE if stdin else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def open_store(path, impl, **options):
    return MessageStore(path, implementation=impl.name, **{**SMALL, **options})


def queue_messages(store, topic, queue_id):
    """Every message of the queue, in queue-offset order."""
    low, high = store.min_queue_offset(topic, queue_id), store.max_queue_offset(topic, queue_id)
    return [store.get_by_queue_offset(topic, queue_id, q) for q in range(low, high)]


PUTTER = """
    import json, os, sys
    from rocketstore import MessageStore
    path, impl, tag, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    s = MessageStore(path, implementation=impl)
    results = []
    for i in range(n):
        r = s.put("T", b"%s-%d" % (tag.encode(), i), keys="%s-%d" % (tag, i))
        results.append((r.queue_id, r.queue_offset, r.commitlog_offset))
    b = s.put_batch("T", [b"%s-b0" % tag.encode(), b"%s-b1" % tag.encode()], queue_id=0)
    results += [(0, b.first_queue_offset + i, int(b.commitlog_offsets[i])) for i in range(2)]
    print(json.dumps({"pid": os.getpid(), "writer": s.writer_pid, "results": results}))
    s.close()
"""


def test_processes_that_open_a_written_store_join_it_and_share_its_queues(tmp_path, impl):
    path = tmp_path / "s"
    with open_store(path, impl) as owner:
        owner.create_topic("T", 2)
        children = [spawn_child(PUTTER, path, impl.name, "c%d" % k, 300) for k in range(2)]
        mine = [owner.put("T", b"o-%d" % i, keys="o-%d" % i) for i in range(300)]
        outputs = []
        for child in children:
            out, err = child.communicate(timeout=120)
            assert child.returncode == 0, err
            outputs.append(json.loads(out))
        assert {o["writer"] for o in outputs} == {os.getpid()}
        placed = [(r.queue_id, r.queue_offset, r.commitlog_offset) for r in mine]
        for o in outputs:
            placed += [tuple(p) for p in o["results"]]
        # one set of queue offsets for every process: no position given twice, none skipped
        assert len(set(placed)) == len(placed) == 904
        for qid in (0, 1):
            offsets = sorted(q for q_id, q, _ in placed if q_id == qid)
            assert offsets == list(range(len(offsets)))
            assert owner.max_queue_offset("T", qid) == len(offsets)
        for qid, qoff, offset in placed:
            msg = owner.get_by_queue_offset("T", qid, qoff)
            assert msg.commitlog_offset == offset
        assert [m.body for m in owner.query_by_key("T", "c1-299")] == [b"c1-299"]


def test_a_joined_writer_reads_its_own_puts_at_once(tmp_path, impl):
    path = tmp_path / "s"
    with open_store(path, impl) as owner:
        owner.put("T", b"first")
        assert owner.stats()["writer"] == "this process" and owner.stats()["joined_writers"] == 0
        child = spawn_child(
            """
            import os, sys
            from rocketstore import MessageStore
            s = MessageStore(sys.argv[1], implementation=sys.argv[2])
            assert not s.read_only and s.writer_pid != os.getpid()
            for i in range(50):
                r = s.put("T", b"m%d" % i, keys="k%d" % i, queue_id=1)
                assert s.read(r.commitlog_offset).body == b"m%d" % i
                assert s.get_by_queue_offset("T", 1, r.queue_offset).body == b"m%d" % i
                assert [m.body for m in s.query_by_key("T", "k%d" % i)] == [b"m%d" % i]
            got = s.get_message("g", "T", 1, 0, 64)
            s.commit_offset("g", "T", 1, 50)
            stats = s.stats()
            print(len(got.messages), s.committed_offset("g", "T", 1), stats["writer"],
                  stats["writer_pid"] == s.writer_pid, "joined" in repr(s), flush=True)
            sys.stdin.readline()  # while the owner looks at its stats
            s.close()
            """,
            path,
            impl.name,
            stdin=True,
        )
        try:
            line = child.stdout.readline()
            joined = owner.stats()["joined_writers"]
            out, err = child.communicate("\n", timeout=120)
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()
        assert child.returncode == 0, err
        assert line.split() == ["50", "50", "joined", "True", "True"]
        assert joined >= 1
        assert owner.committed_offset("g", "T", 1) == 50  # the commit ran in the owner
        assert owner.max_queue_offset("T", 1) == 50


#: Bad calls, as source run on a store ``s`` in this process and in a joined one.
BAD_CALLS = [
    's.put("bad topic", b"x")',
    's.put("SCHEDULE_TOPIC_XXXX", b"x")',
    's.put("T", b"x", queue_id=-7)',
    's.put("T", b"x", keys=["a", 3])',
    's.put_messages([Message("T", b"ok"), Message("T", b"x", queue_id=1 << 40)])',
    's.put("T", object())',
    's.receive("g", "T", 0)',
]


def error_names(s, calls):
    names = []
    for call in calls:
        try:
            eval(call, {"s": s, "Message": Message})
            names.append("none")
        except Exception as exc:
            names.append(type(exc).__name__)
    return names


def test_a_joined_writer_gets_the_owners_typed_errors_and_writes_nothing(tmp_path, impl):
    path = tmp_path / "s"
    with open_store(path, impl) as owner:
        owner.put("T", b"first")
        end = owner.max_offset
        out = run_child(
            """
            import json, sys
            sys.path.insert(0, sys.argv[3])
            from test_writers import BAD_CALLS, error_names
            from rocketstore import MessageStore
            s = MessageStore(sys.argv[1], implementation=sys.argv[2])
            print(" ".join(error_names(s, BAD_CALLS)))
            s.close()
            """,
            path,
            impl.name,
            pathlib.Path(__file__).parent,
        )
        expected = error_names(owner, BAD_CALLS)
        assert out.split() == expected
        assert "none" not in expected
        assert {"InvalidTopicError", "SystemTopicError", "InvalidQueueIdError"} <= set(expected)
        assert owner.max_offset == end  # nothing of any of them was written


def test_when_the_owner_closes_a_joined_writer_takes_over(tmp_path, impl):
    path = tmp_path / "s"
    owner = open_store(path, impl)
    owner.put("T", b"first")
    child = spawn_child(
        """
        import os, sys, threading, time
        from rocketstore import MessageStore
        s = MessageStore(sys.argv[1], implementation=sys.argv[2])
        print("joined", s.writer_pid, flush=True)
        errors, done = [], threading.Event()

        def read():  # another thread reads all along: the takeover must not fail it
            while not done.is_set():
                try:
                    s.get_message("g", "T", 0, 0, 32)
                    s.max_offset
                except Exception as exc:
                    errors.append(repr(exc))

        reader = threading.Thread(target=read)
        reader.start()
        n = 0
        while s.writer_pid != os.getpid():
            s.put("T", b"c%d" % n, queue_id=0)
            n += 1
        for _ in range(20):
            s.put("T", b"c%d" % n, queue_id=0)
            n += 1
        done.set()
        reader.join()
        print("took over", n, errors, flush=True)
        s.close()
        """,
        path,
        impl.name,
    )
    line = child.stdout.readline().split()
    assert line == ["joined", str(os.getpid())]
    time.sleep(0.3)
    owner.close()
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert out.startswith("took over"), err
    assert out.split(maxsplit=3)[3].strip() == "[]"  # the reading thread saw no error
    n = int(out.split()[2])
    with open_store(path, impl) as again:
        bodies = [m.body for m in queue_messages(again, "T", 0) if m.body != b"first"]
        assert bodies == [b"c%d" % i for i in range(n)]  # every acknowledged put, once, in order


OWNER = """
    import json, sys, time
    from rocketstore import MessageStore
    s = MessageStore(sys.argv[1], implementation=sys.argv[2], **json.loads(sys.argv[3]))
    s.create_topic("T", 1)
    print("open", flush=True)
    time.sleep(600)
"""

PUT_UNTIL_OWNER = """
    import json, os, sys
    from rocketstore import MessageStore
    from rocketstore.errors import WriterGoneError
    s = MessageStore(sys.argv[1], implementation=sys.argv[2])
    print("joined", flush=True)
    acked, unknown, n = [], [], 0
    while s.writer_pid != os.getpid() or len(acked) < 20 or n < 50:
        body = b"p%d" % n
        n += 1
        try:
            r = s.put("T", body)
        except WriterGoneError:
            unknown.append(body.decode())
            continue
        acked.append((body.decode(), r.queue_offset))
        if len(acked) == 50:
            print("putting", flush=True)
        if n > 200000:
            break
    print(json.dumps({"acked": acked, "unknown": unknown, "owner": s.writer_pid == os.getpid()}), flush=True)
    s.close()
"""


def test_when_the_owner_is_killed_a_joined_writer_recovers_and_takes_over(tmp_path, impl):
    path = tmp_path / "s"
    owner = spawn_child(OWNER, path, impl.name, json.dumps(SMALL))
    putter = None
    try:
        assert owner.stdout.readline().strip() == "open"
        putter = spawn_child(PUT_UNTIL_OWNER, path, impl.name)
        assert putter.stdout.readline().strip() == "joined"
        assert putter.stdout.readline().strip() == "putting"
        owner.send_signal(signal.SIGKILL)
        owner.communicate(timeout=30)
        out, err = putter.communicate(timeout=120)
    finally:
        for proc in (owner, putter):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert putter.returncode == 0, err
    found = json.loads(out)
    assert found["owner"]
    assert len(found["unknown"]) <= 1  # only a put in flight when the owner died
    with open_store(path, impl) as again:
        got = queue_messages(again, "T", 0)
        stored = [m.body.decode() for m in got]
        offsets = [m.queue_offset for m in got]
        assert offsets == list(range(len(offsets)))  # contiguous, none twice
        for body, qoff in found["acked"]:
            assert stored[qoff] == body  # every acknowledged put, where its result said
        assert len(stored) == len(set(stored))
        assert set(stored) <= {b for b, _ in found["acked"]} | set(found["unknown"])


LOCK_HOLDER = """
    import fcntl, os, sys, time
    fd = os.open(os.path.join(sys.argv[1], "lock"), os.O_RDWR | os.O_CREAT)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)  # what a Java broker's tryLock takes
    os.pwrite(fd, b"lock", 0)
    print("locked", flush=True)
    time.sleep(600)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the lock holder is told apart by F_GETLK")
def test_a_store_a_java_broker_holds_is_refused_at_once(tmp_path, impl):
    path = tmp_path / "s"
    open_store(path, impl).close()
    holder = spawn_child(LOCK_HOLDER, path)
    try:
        assert holder.stdout.readline().strip() == "locked"
        began = time.monotonic()
        with pytest.raises(StoreLockedError, match="does not share writing"):
            open_store(path, impl)
        assert time.monotonic() - began < 30  # not writer_wait_s: nothing was waited for
    finally:
        holder.kill()
        holder.communicate()


def test_after_a_killed_owner_the_next_open_writes_and_serves(tmp_path, impl):
    path = tmp_path / "s"
    owner = spawn_child(OWNER, path, impl.name, json.dumps(SMALL))
    assert owner.stdout.readline().strip() == "open"
    owner.kill()
    owner.communicate()
    with open_store(path, impl) as s:
        assert not s.last_shutdown_clean and s.writer_pid == os.getpid()
        assert run_child(PUTTER, path, impl.name, "x", 3).count('"writer": %d' % os.getpid()) == 1
        assert s.max_queue_offset("T", 0) >= 1
    names = set(os.listdir(path))
    assert SOCKET_NAME not in names or not sys.platform.startswith("linux")  # Linux: no file at all
    # indexResume: the owner's background checkpoint may have written it before the kill
    store_files = {"commitlog", "consumequeue", "index", "config", "checkpoint", "lock", "indexResume"}
    assert names <= store_files | {"rocketstore-live"}


@pytest.mark.skipif(sys.platform.startswith("linux"), reason="Linux's writer socket is abstract: no file")
def test_a_foreign_file_where_the_socket_goes_is_left_as_it_is(tmp_path, impl):
    path = tmp_path / "s"
    open_store(path, impl).close()
    (path / SOCKET_NAME).write_bytes(b"not ours")
    with pytest.raises(NotAStoreError):
        open_store(path, impl)
    assert (path / SOCKET_NAME).read_bytes() == b"not ours"


def test_pop_receive_and_ack_across_processes(tmp_path, impl):
    path = tmp_path / "s"
    with open_store(path, impl) as owner:
        for i in range(10):
            owner.put("T", b"m%d" % i, queue_id=0)
        out = run_child(
            """
            import sys, json
            from rocketstore import MessageStore
            s = MessageStore(sys.argv[1], implementation=sys.argv[2])
            got = s.receive("g", "T", 4, invisible_time_ms=60000)
            print(json.dumps([(m.message.body.decode(), m.handle) for m in got]))
            s.close()
            """,
            path,
            impl.name,
        )
        received = json.loads(out)
        assert len(received) == 4
        assert owner.ack_many([h for _, h in received]) == 4  # acked by another process
        rest = owner.receive("g", "T", 10, invisible_time_ms=60000)
        assert sorted(m.message.body.decode() for m in rest) == sorted(
            {"m%d" % i for i in range(10)} - {b for b, _ in received}
        )


def test_put_results_pickle(tmp_path, impl):
    with open_store(tmp_path / "s", impl) as s:
        r = s.put("T", b"x", keys="k")
        again = pickle.loads(pickle.dumps(r))
        assert repr(again) == repr(r)
        assert (again.msg_id, again.unique_key, again.status) == (r.msg_id, r.unique_key, r.status)
        batch = pickle.loads(pickle.dumps(s.put_messages([Message("T", b"y")])))
        assert batch[0].queue_offset == 1 or batch[0].queue_id != r.queue_id


CRASH_OPTIONS = dict(commitlog_file_size=1 << 20, consume_queue_units=2000, index_slots=512, index_count=4096)

CRASH_WRITER = r"""
import json, os, random, sys, time
from rocketstore import MessageStore
from rocketstore.errors import WriterGoneError
path, tag, log_path, stop = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
rng = random.Random(tag)
with MessageStore(path, **json.loads(sys.argv[5])) as store, open(log_path, "ab", buffering=0) as log:
    n = 0
    while not os.path.exists(stop):
        for _ in range(rng.randrange(1, 40)):
            body = b"%s-%d" % (tag.encode(), n)
            n += 1
            try:
                r = store.put("T", body, durable=rng.random() < 0.1)
            except WriterGoneError:
                log.write(b"? %s\n" % body)   # may or may not be stored
                continue
            log.write(b"+ %s %d %d\n" % (body, r.queue_id, r.queue_offset))   # acknowledged
        time.sleep(rng.uniform(0, 0.01))
"""

CRASH_MEMBER = r"""
import sys
from rocketstore import GroupConsumer, MessageStore
path, log_path = sys.argv[1], sys.argv[2]
with MessageStore(path, read_only=True) as store, open(log_path, "ab", buffering=0) as log:
    member = GroupConsumer(store, "g", "T", session_timeout=2)
    for msg in member:
        log.write(msg.body + b"\n")   # processed (the next poll commits it)
"""


def _log_lines(paths):
    for p in paths:
        if os.path.exists(p):
            yield from pathlib.Path(p).read_bytes().splitlines()


@pytest.mark.slow
def test_writers_and_members_killed_at_random_lose_nothing_acknowledged(tmp_path, rng):
    """4 writer processes and 3 group members on one store; one of the seven, chosen at random
    (the writing owner among them), is killed with SIGKILL and restarted, many times
    (``ROCKETSTORE_WRITERS_KILL_ROUNDS``, 40). Afterwards: every acknowledged put is stored at
    the queue offset its result said, no offset was given twice, the queue has no hole, nothing
    is stored twice, and the group consumed every stored message at least once and nothing else."""
    path = str(tmp_path / "s")
    stop = str(tmp_path / "stop")
    rounds = int(os.environ.get("ROCKETSTORE_WRITERS_KILL_ROUNDS", "40"))
    with MessageStore(path, **CRASH_OPTIONS) as store:
        store.create_topic("T", 6)
    writer_logs = [str(tmp_path / f"w{i}.log") for i in range(4)]
    member_logs = [str(tmp_path / f"m{i}.log") for i in range(3)]
    starts = [0] * 7

    def start(i):
        starts[i] += 1
        if i < 4:
            args = [CRASH_WRITER, path, f"w{i}.{starts[i]}", writer_logs[i], stop, json.dumps(CRASH_OPTIONS)]
        else:
            args = [CRASH_MEMBER, path, member_logs[i - 4]]
        return subprocess.Popen([sys.executable, "-c", *args], env=env())

    procs = []
    kills, owner_kills = [0, 0], 0
    try:
        for i in range(7):
            procs.append(start(i))
            time.sleep(0.05)
        for _ in range(rounds):
            time.sleep(rng.uniform(0.02, 0.25))
            victim = rng.randrange(7)
            mark = (pathlib.Path(path) / "lock").read_bytes()[4:].split()
            owner_kills += mark[1:2] == [str(procs[victim].pid).encode()]
            procs[victim].send_signal(signal.SIGKILL)
            procs[victim].wait()
            kills[victim >= 4] += 1
            procs[victim] = start(victim)
        pathlib.Path(stop).touch()
        for proc in procs[:4]:
            assert proc.wait(timeout=120) == 0
        acked, unknown = {}, set()
        for line in _log_lines(writer_logs):
            fields = line.split()
            if fields[0] == b"+":
                acked[fields[1]] = (int(fields[2]), int(fields[3]))
            else:
                unknown.add(fields[1])
        with MessageStore(path, read_only=True) as store:
            queues = {q: queue_messages(store, "T", q) for q in range(6)}
        stored = [m.body for q in range(6) for m in queues[q]]
        want = set(stored)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not want <= set(_log_lines(member_logs)):
            time.sleep(0.2)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert len(set(acked.values())) == len(acked), "a queue offset was given to two puts"
    for q, msgs in queues.items():
        assert [m.queue_offset for m in msgs] == list(range(len(msgs))), f"queue {q} has a hole"
    assert len(stored) == len(want), "a message is stored twice"
    for body, (q, qoff) in acked.items():
        assert queues[q][qoff].body == body, f"acknowledged {body!r} is not at {q}/{qoff}"
    consumed = list(_log_lines(member_logs))
    # a message handed out must be one the store holds (not, say, a record a writer killed inside
    # its append left past the published end, which the next append wrote over)
    foreign = set(consumed) - want
    assert not foreign, f"{len(foreign)} consumed messages are not in the store, e.g. {sorted(foreign)[:5]}"
    missing = want - set(consumed)
    assert not missing, f"{len(missing)} of {len(want)} never consumed, e.g. {sorted(missing)[:5]}"
    print(
        f"{rounds} kills ({kills[0]} writers, {owner_kills} of them the owner; {kills[1]} members): "
        f"{len(acked)} acknowledged puts, "
        f"{len(unknown)} unknown outcomes, {len(stored)} stored, {len(consumed) - len(set(consumed))} "
        "delivered again"
    )


def test_a_joined_writers_pipelined_and_durable_puts(tmp_path, impl):
    path = tmp_path / "s"
    with open_store(path, impl) as owner:
        owner.create_topic("T", 1)
        out = run_child(
            """
            import asyncio, sys
            from rocketstore import MessageStore
            s = MessageStore(sys.argv[1], implementation=sys.argv[2])
            futures = [s.put_pipelined("T", b"p%d" % i) for i in range(20)]
            offsets = [f.result(timeout=60).queue_offset for f in futures]
            print(sorted(offsets) == list(range(20)), all(f.done() for f in futures))

            async def main():
                return (await s.put_pipelined("T", b"async")).queue_offset

            print(asyncio.run(main()), s.put("T", b"d", durable=True).queue_offset)
            print(s.flush(timeout=30))
            s.close()
            """,
            path,
            impl.name,
        )
        assert out.split() == ["True", "True", "20", "21", "True"]
        durable = owner.get_by_queue_offset("T", 0, 21)
        assert owner.flushed_offset >= durable.commitlog_offset + durable.size  # flushed by the owner


def test_garbage_on_the_writer_socket_harms_nothing(tmp_path, impl):
    import socket
    import struct

    from rocketstore.processes.writers import _address

    path = tmp_path / "s"
    with open_store(path, impl) as owner:
        owner.put("T", b"first")
        end = owner.max_offset
        frames = [
            b"\x00" * 3,  # a torn length
            struct.pack("<Q", 1 << 62),  # longer than any frame may be
            struct.pack("<Q", 5) + b"nopic",  # not a pickle
            struct.pack("<Q", 4) + pickle.dumps(("hi",))[:4],  # a torn pickle
        ]
        hello = pickle.dumps(("hello", 1, 0))
        calls = [
            pickle.dumps(("not a call",)),
            pickle.dumps(("close", (), {})),  # not a call a joined writer may make
            pickle.dumps(("put", ("T",), {"body": None})),
        ]
        for garbage in frames:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.connect(_address(str(path)))
                sock.sendall(garbage)
                sock.shutdown(socket.SHUT_WR)
                sock.settimeout(30)
                assert sock.recv(1 << 16) == b""  # the owner hung up, nothing else
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(_address(str(path)))
            sock.settimeout(30)
            rfile = sock.makefile("rb")
            sock.sendall(struct.pack("<Q", len(hello)) + hello)
            ok, info = pickle.loads(rfile.read(struct.unpack("<Q", rfile.read(8))[0]))
            assert ok and info["pid"] == os.getpid()
            for call in calls:
                sock.sendall(struct.pack("<Q", len(call)) + call)
                ok, error = pickle.loads(rfile.read(struct.unpack("<Q", rfile.read(8))[0]))
                assert not ok and isinstance(error, Exception)
            rfile.close()
        assert not owner.closed and owner.max_offset == end  # nothing written, still serving
        assert run_child(PUTTER, path, impl.name, "after", 2).count('"writer": %d' % os.getpid()) == 1


RACER = """
    import os, sys, time
    from rocketstore import MessageStore
    start = float(sys.argv[2])
    while time.time() < start:
        pass
    with MessageStore(sys.argv[1]) as s:
        for i in range(100):
            s.put("T", b"%d-%d" % (os.getpid(), i))
    print("ok", flush=True)
"""


def test_processes_that_create_one_store_at_once_all_write_it(tmp_path):
    path = tmp_path / "new"
    for _ in range(3):
        shutil.rmtree(path, ignore_errors=True)
        start = time.time() + 0.5
        children = [spawn_child(RACER, path, start) for _ in range(4)]
        for child in children:
            out, err = child.communicate(timeout=120)
            assert child.returncode == 0 and out.strip() == "ok", err
        with MessageStore(path, read_only=True) as store:
            assert sum(hi - lo for lo, hi in store.queues().values()) == 400


def test_a_store_whose_writer_died_before_its_first_segment_opens(tmp_path, impl):
    # its lock file still carries the writer's mark (28 bytes): still one of a store's files
    path = tmp_path / "s"
    (path / "config").mkdir(parents=True)
    (path / "lock").write_bytes(b"lock\\nrocketstore    4194303\\n")
    with open_store(path, impl) as store:
        assert store.put("T", b"x").queue_offset == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_child_forked_after_the_open_neither_writes_nor_closes_the_parents_store(tmp_path, impl):
    import warnings

    from rocketstore.errors import StoreClosedError
    from rocketstore.storebase import _close_open_stores

    path = tmp_path / "s"
    with open_store(path, impl) as store:
        store.put("T", b"before", queue_id=0)
        assert store.get_by_queue_offset("T", 0, 0).body == b"before"  # dispatched: readable
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12+)
            pid = os.fork()
        if pid == 0:  # the child: its calls raise, its exit closes nothing of the parent's
            code = 0
            try:
                try:
                    store.put("T", b"from the child", queue_id=0)
                    code = 1
                except StoreClosedError as exc:
                    code = 0 if "before it forked" in str(exc) else 2
                if code == 0 and not store.closed:
                    code = 4
                if code == 0:
                    try:
                        store.get_by_queue_offset("T", 0, 0)  # nor reads through the parent's parts
                        code = 5
                    except StoreClosedError:
                        pass
                _close_open_stores()  # what the child's interpreter runs at exit
                store.close()
            except BaseException:
                code = 3
            os._exit(code)
        deadline = time.monotonic() + 60
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        if done[0] == 0:  # a child closing its parent's store hangs on a lock a parent thread held
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        assert os.waitstatus_to_exitcode(done[1]) == 0
        assert (path / "abort").exists()  # the parent's store is still open: no close ran
        assert store.put("T", b"after", queue_id=0).queue_offset == 1
        assert [m.body for m in queue_messages(store, "T", 0)] == [b"before", b"after"]
