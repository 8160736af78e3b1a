"""Takeovers that go wrong: the process that took the store's lock after its owner died stalls
or dies before it serves. Whoever waits for it (a joined writer in the middle of a put, a fresh
open) waits on and takes over in turn; nobody is told the store "does not share writing", and a
joined store object survives any number of takeovers."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import rocketstore
from rocketstore import MessageStore
from rocketstore.errors import StoreClosedError, StoreLockedError

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="lock holders are told apart by F_GETLK (Linux)"
)

SRC = str(pathlib.Path(rocketstore.__file__).resolve().parents[1])
SMALL = dict(commitlog_file_size=64 * 1024, consume_queue_units=64, index_slots=64, index_count=256)


def env():
    found = dict(os.environ)
    found["PYTHONPATH"] = SRC + os.pathsep + found.get("PYTHONPATH", "")
    found.pop("PYTHONDONTWRITEBYTECODE", None)
    return found


def spawn(code, *args):
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stopped(pid):
    """Whether process ``pid`` is stopped (SIGSTOP)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def reap(proc):
    """Kill ``proc`` (stopped or not) and wait for it, its pipes closed."""
    if proc is not None:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def wait_for(predicate, timeout=60.0, what="it"):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        time.sleep(0.002)


OWNER = """
    import json, sys, time
    from rocketstore import MessageStore
    s = MessageStore(sys.argv[1], implementation=sys.argv[2], **json.loads(sys.argv[3]))
    s.create_topic("T", int(sys.argv[4]))
    s.put("T", b"from the first owner", queue_id=0)
    print("open", flush=True)
    time.sleep(600)
"""

#: A process that takes the store's lock as a writer does and stops (SIGSTOP) at a stage of its
#: open: "marking" (the lock taken, its mark not written yet), "marked" (no socket yet), "bound"
#: (its socket bound, its open not finished).
STALLED_HOLDER = """
    import os, signal, sys, time
    from rocketstore.files import storedir
    from rocketstore.errors import StoreLockedError
    path, stage = sys.argv[1], sys.argv[2]
    if stage == "marking":
        real_pwrite = os.pwrite
        def pwrite(*args):  # the lock's mark: stop just before it
            os.kill(os.getpid(), signal.SIGSTOP)
            return real_pwrite(*args)
        os.pwrite = pwrite
    lock = storedir.StoreLock(path)
    while True:
        try:
            lock.acquire(shares=True)
            break
        except StoreLockedError:
            time.sleep(0.001)
    if stage == "bound":
        from rocketstore import _impl
        from rocketstore.processes.writers import WriterServer
        server = WriterServer(path, lambda *a: None, _impl.get().store.serve_step)
    os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(600)
"""

FRESH_OPEN = """
    import os, sys
    from rocketstore import MessageStore
    with MessageStore(sys.argv[1], implementation=sys.argv[2]) as s:
        r = s.put("T", b"from a fresh open", queue_id=0)
        print(s.writer_pid == os.getpid(), r.queue_offset, flush=True)
"""


@pytest.mark.parametrize("stage", ["marking", "marked", "bound"])
def test_a_lock_holder_that_stalls_and_dies_before_it_serves_fails_nobody(tmp_path, impl, stage):
    """A owns, J (this process) joined; A is killed; H takes the lock and stops for 2 s at
    ``stage``; J puts meanwhile and a fresh open starts; H is killed: J's put and the fresh open
    both succeed (one of them writes, the other joins it), and J goes on working."""
    path = tmp_path / "s"
    owner = spawn(OWNER, path, impl.name, json.dumps(SMALL), 1)
    holder = fresh = None
    try:
        assert owner.stdout.readline().strip() == "open", owner.stderr.read()
        joined = MessageStore(path, implementation=impl.name)
        assert joined.writer_pid == owner.pid
        joined.put("T", b"joined before", queue_id=0)
        reap(owner)
        holder = spawn(STALLED_HOLDER, path, stage)
        wait_for(lambda: stopped(holder.pid), what="the holder's stop")
        outcome = {}

        def put():
            try:
                outcome["result"] = joined.put("T", b"joined during", queue_id=0)
            except Exception as exc:
                outcome["error"] = exc

        putter = threading.Thread(target=put)
        putter.start()
        fresh = spawn(FRESH_OPEN, path, impl.name)
        time.sleep(2.0)
        assert fresh.poll() is None, fresh.stderr.read()[-600:]  # waits for the stalled holder
        reap(holder)
        out, err = fresh.communicate(timeout=120)
        putter.join(120)
        assert fresh.returncode == 0, err
        assert "error" not in outcome, repr(outcome.get("error"))
        assert outcome["result"].queue_offset >= 2
        # the joined store survived the takeover: it writes, or joins the one that does
        assert not joined.closed
        again = joined.put("T", b"joined after", queue_id=0)
        assert again.queue_offset >= 3
        joined.close()
    finally:
        for proc in (owner, holder, fresh):
            reap(proc)
    with MessageStore(path, implementation=impl.name) as s:
        bodies = [s.get_by_queue_offset("T", 0, q).body for q in range(s.max_queue_offset("T", 0))]
    assert bodies[:2] == [b"from the first owner", b"joined before"]
    assert sorted(bodies[2:]) == sorted([b"joined during", b"joined after", b"from a fresh open"])


JOINED_PUTTER = """
    import json, os, sys, time
    from rocketstore import MessageStore
    from rocketstore.errors import WriterGoneError
    path, impl, tag, stop, log_path = sys.argv[1:6]
    n = 0
    with MessageStore(path, implementation=impl) as s, open(log_path, "a", buffering=1) as log:
        print("joined", flush=True)
        while not os.path.exists(stop):
            body = "%s-%d" % (tag, n)
            n += 1
            try:
                r = s.put("T", body.encode(), queue_id=n % 2)
            except WriterGoneError:
                log.write("? %s\\n" % body)
                continue
            except Exception as exc:
                log.write("! %s %s: %s\\n" % (body, type(exc).__name__, str(exc).replace("\\n", " ")))
                continue
            log.write("+ %s %d %d\\n" % (body, r.queue_id, r.queue_offset))
            time.sleep(0.001)
"""


def lock_holder(path):
    """The pid holding the POSIX lock of the store at ``path`` (0: nobody)."""
    import fcntl
    import struct

    flock = struct.Struct("hhqqi4x")
    fd = os.open(os.path.join(path, "lock"), os.O_RDONLY)
    try:
        l_type, _, _, _, pid = flock.unpack(
            fcntl.fcntl(fd, fcntl.F_GETLK, flock.pack(fcntl.F_WRLCK, 0, 0, 1, 0))
        )
    finally:
        os.close(fd)
    return 0 if l_type == fcntl.F_UNLCK else pid


def test_owners_killed_back_to_back_fail_no_joined_writer(tmp_path, impl):
    """Three joined writer processes put all along; each owner is killed as soon as it holds the
    lock (every other one stopped for 1.5 s first), six times, the killed one started again.
    No put raises anything but WriterGoneError (a put sent to a dying owner), every
    acknowledged put is stored where its result said, and a joined store of this process, idle
    meanwhile, works afterwards."""
    path = str(tmp_path / "s")
    stop = str(tmp_path / "stop")
    with MessageStore(path, implementation=impl.name, **SMALL) as s:
        s.create_topic("T", 2)
    owner = spawn(OWNER, path, impl.name, json.dumps(SMALL), 2)
    assert owner.stdout.readline().strip() == "open", owner.stderr.read()
    joined = MessageStore(path, implementation=impl.name)
    logs = [str(tmp_path / f"w{i}.log") for i in range(3)]
    starts = [0, 0, 0]

    def start(i):
        starts[i] += 1
        proc = spawn(JOINED_PUTTER, path, impl.name, f"w{i}.{starts[i]}", stop, logs[i])
        assert proc.stdout.readline().strip() == "joined", proc.stderr.read()
        return proc

    procs = [start(i) for i in range(3)]
    try:
        time.sleep(0.2)
        victim = owner
        for kill in range(6):
            if kill % 2:  # stopped right after it took the lock, for longer than any grace
                victim.send_signal(signal.SIGSTOP)
                time.sleep(1.5)
            reap(victim)
            if victim in procs:
                i = procs.index(victim)
                procs[i] = start(i)
            pids = {p.pid: p for p in procs}
            wait_for(lambda pids=pids: lock_holder(path) in pids, what="a takeover")
            victim = pids[lock_holder(path)]
        time.sleep(0.5)
        assert joined.put("T", b"from the idle joined store", queue_id=0).queue_offset > 0
        pathlib.Path(stop).touch()
        errors = []
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            if proc.returncode:
                errors.append(err)
        assert not errors, errors
    finally:
        for proc in [owner, *procs]:
            reap(proc)
        joined.close()
    lines = [line.split() for p in logs for line in pathlib.Path(p).read_text().splitlines()]
    failed = [" ".join(fields) for fields in lines if fields[0] == "!"]
    assert not failed, failed
    acked = {f[1]: (int(f[2]), int(f[3])) for f in lines if f[0] == "+"}
    with MessageStore(path, implementation=impl.name, read_only=True) as s:
        queues = {}
        for q in range(2):
            low, high = s.min_queue_offset("T", q), s.max_queue_offset("T", q)
            queues[q] = {o: s.get_by_queue_offset("T", q, o).body.decode() for o in range(low, high)}
    for body, (q, qoff) in acked.items():
        assert queues[q].get(qoff) == body, f"acknowledged {body} is not at {q}/{qoff}"


FOREIGN_HOLDER = """
    import fcntl, os, sys, time
    fd = os.open(os.path.join(sys.argv[1], "lock"), os.O_RDWR | os.O_CREAT)
    while True:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)  # what a Java broker's tryLock takes
            break
        except OSError:
            time.sleep(0.001)
    os.pwrite(fd, b"lock", 0)
    print("locked", flush=True)
    sys.stdin.readline()
"""


def test_a_joined_store_whose_takeover_failed_takes_over_at_its_next_call(tmp_path, impl):
    """The owner dies and a process that does not share writing (a Java broker) takes the lock:
    the joined store's put raises StoreLockedError, and once that process ended, its next put
    takes over: the store is not left closed."""
    path = tmp_path / "s"
    owner = spawn(OWNER, path, impl.name, json.dumps(SMALL), 1)
    holder = None
    try:
        assert owner.stdout.readline().strip() == "open", owner.stderr.read()
        joined = MessageStore(path, implementation=impl.name)
        joined.put("T", b"joined before", queue_id=0)
        holder = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(FOREIGN_HOLDER), str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        reap(owner)
        assert holder.stdout.readline().strip() == "locked"
        time.sleep(0.1)  # (a joined writer appends on for up to 20 ms after the owner died)
        with pytest.raises(StoreLockedError, match="does not share writing"):
            joined.put("T", b"refused", queue_id=0)
        holder.communicate("\n", timeout=30)
        assert joined.put("T", b"joined after", queue_id=0).queue_offset == 2
        assert joined.writer_pid == os.getpid() and not joined.closed
        joined.close()
        with pytest.raises(StoreClosedError):
            joined.put("T", b"closed", queue_id=0)
    finally:
        reap(owner)
        reap(holder)


KILL_WRITER = r"""
import os, random, sys, time
from rocketstore import MessageStore
from rocketstore.errors import WriterGoneError
path, tag, stop, log_path, queues = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
rng = random.Random(tag)
log = open(log_path, "a", buffering=1)


def failed(what, exc):
    log.write("! %s %s %s\n" % (what, type(exc).__name__, str(exc).replace("\n", " ")))


while True:  # a fresh open, often in the middle of a takeover
    try:
        store = MessageStore(path)
        break
    except Exception as exc:
        failed("open", exc)
        if os.path.exists(stop):
            sys.exit(0)
        time.sleep(0.01)
n = 0
while not os.path.exists(stop):
    for _ in range(rng.randrange(1, 30)):
        body = "%s-%d" % (tag, n)
        n += 1
        kind = rng.random()
        try:
            if kind < 0.6:
                r = store.put("T", body.encode())
            elif kind < 0.8:
                r = store.put("T", body.encode(), tags="a", keys=body)
            else:
                b = store.put_batch("T", [b"%s-0" % body.encode(), b"%s-1" % body.encode()], queue_id=n % queues)
                for i in range(2):
                    log.write("+ %s-%d %d %d\n" % (body, i, b.queue_id, b.first_queue_offset + i))
                continue
        except WriterGoneError:
            log.write("? %s\n" % body)  # sent to an owner that died: may or may not be stored
            continue
        except Exception as exc:
            failed(body, exc)
            continue
        log.write("+ %s %d %d\n" % (body, r.queue_id, r.queue_offset))  # acknowledged
    time.sleep(rng.uniform(0, 0.005))
store.close()
"""


class KillRounds:
    """The writer processes of the kill harness below, and what they and this process's joined
    store did."""

    def __init__(self, tmp_path, rng, queues):
        self.tmp_path, self.rng, self.queues = tmp_path, rng, queues
        self.path = str(tmp_path / "s")
        self.stop = str(tmp_path / "stop")
        self.logs = [str(tmp_path / f"w{i}.log") for i in range(3)]
        self.starts = [0, 0, 0]
        self.procs = []
        self.joined = None
        self.joined_acked, self.joined_errors = {}, []
        self.counts = dict.fromkeys(
            ("killed", "stopped first", "killed as soon as it took the lock", "handed over cleanly"), 0
        )

    def start(self, i):
        self.starts[i] += 1
        with open(str(self.tmp_path / f"w{i}.{self.starts[i]}.err"), "w") as err:
            tag = f"w{i}.{self.starts[i]}"
            return subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    KILL_WRITER,
                    self.path,
                    tag,
                    self.stop,
                    self.logs[i],
                    str(self.queues),
                ],
                env=env(),
                stdout=subprocess.DEVNULL,
                stderr=err,
            )

    def next_holder(self, previous, timeout=120.0):
        """The writer process that holds the lock next (not ``previous``); None: this one."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = lock_holder(self.path)
            if pid and pid != previous:
                for p in self.procs:
                    if p.pid == pid:
                        return p
                if pid == os.getpid():
                    return None
            time.sleep(0.0005)
        raise AssertionError(f"no takeover within {timeout} s")

    def joined_put(self, body):
        try:
            res = self.joined.put("T", body.encode())
            self.joined_acked[body] = (res.queue_id, res.queue_offset)
        except rocketstore.WriterGoneError:
            pass
        except Exception as exc:
            self.joined_errors.append(f"{body} {type(exc).__name__}: {exc}")

    def run(self, rounds):
        rng, counts = self.rng, self.counts
        self.procs = [self.start(i) for i in range(3)]
        victim = self.next_holder(0)
        self.joined = MessageStore(self.path)
        for r in range(rounds):
            if victim is None:  # this process's joined store took over: hand over by closing it
                self.joined.close()
                counts["handed over cleanly"] += 1
                self.joined = MessageStore(self.path)
                victim = self.next_holder(os.getpid())
                continue
            if rng.random() < 0.5:
                victim.send_signal(signal.SIGSTOP)
                counts["stopped first"] += 1
                time.sleep(rng.uniform(0.5, 2.0))
            reap(victim)
            counts["killed"] += 1
            i = self.procs.index(victim)
            self.procs[i] = self.start(i)
            victim = self.next_holder(victim.pid)
            if victim is not None and rng.random() < 0.5:
                counts["killed as soon as it took the lock"] += 1
                continue  # back to back: the new holder is killed (or stopped) at once
            time.sleep(rng.uniform(0.0, 0.3))
            self.joined_put(f"j-{r}")
            victim = self.next_holder(0) if lock_holder(self.path) != os.getpid() else None
        pathlib.Path(self.stop).touch()
        for proc in self.procs:
            assert proc.wait(timeout=180) == 0, "a writer failed (see its .err file)"
        self.joined.close()

    def close(self):
        for proc in self.procs:
            reap(proc)
        if self.joined is not None:
            self.joined.close()

    def outcome(self):
        """(log lines split, failures, acknowledged {body: (queue, offset)}, stored {(queue,
        offset): body}, skipped [(queue, offset)])."""
        lines = [
            line.split(maxsplit=3)
            for p in self.logs
            if os.path.exists(p)
            for line in pathlib.Path(p).read_text().splitlines()
        ]
        failures = [" ".join(f) for f in lines if f[0] == "!"] + self.joined_errors
        acked = {f[1]: (int(f[2]), int(f[3])) for f in lines if f[0] == "+"}
        acked.update(self.joined_acked)
        stored, skipped = {}, []
        with MessageStore(self.path, read_only=True) as s:
            for q in range(self.queues):
                for o in range(s.min_queue_offset("T", q), s.max_queue_offset("T", q)):
                    try:
                        stored[(q, o)] = s.get_by_queue_offset("T", q, o).body.decode()
                    except rocketstore.MessageNotFoundError:
                        skipped.append((q, o))
        return lines, failures, acked, stored, skipped


@pytest.mark.slow
def test_successive_owners_killed_back_to_back_lose_nothing_and_refuse_nobody(tmp_path, rng):
    """Three writer processes put all along (plain, keyed and batched puts); each round kills the
    process holding the store's lock, every other one stopped (SIGSTOP) for 0.5 to 2 s first,
    often the moment it took the lock (before it serves), and starts it again (a fresh open
    that joins, or waits for a takeover); a joined store of this process puts once a round
    (``ROCKETSTORE_TAKEOVER_KILL_ROUNDS`` rounds, 30). Then: no call raised StoreLockedError or
    anything else but WriterGoneError, every acknowledged put is where its result said, no
    queue offset was given twice, and reading every queue from its minimum skips none."""
    rounds = int(os.environ.get("ROCKETSTORE_TAKEOVER_KILL_ROUNDS", "30"))
    harness = KillRounds(tmp_path, rng, queues=4)
    with MessageStore(harness.path, **SMALL) as s:
        s.create_topic("T", harness.queues)
    try:
        harness.run(rounds)
    finally:
        harness.close()
    lines, failures, acked, stored, skipped = harness.outcome()
    locked = [f for f in failures if "StoreLockedError" in f]
    lost = [(body, where) for body, where in acked.items() if stored.get(where) != body]
    twice = len(acked) - len(set(acked.values()))
    print(
        f"{rounds} rounds: {harness.counts}; {len(acked)} acknowledged puts, "
        f"{sum(f[0] == '?' for f in lines)} unknown outcomes (WriterGoneError), {len(stored)} stored; "
        f"StoreLockedError {len(locked)}, other failures {len(failures) - len(locked)}, lost "
        f"acknowledged {len(lost)}, offsets given twice {twice}, skipped queue offsets "
        f"{len(skipped)} {skipped[:10]}"
    )
    assert not locked, locked[:5]
    assert not failures, failures[:5]
    assert not lost, lost[:5]
    assert not twice
    assert not skipped, f"queue offsets without a record (queue, offset): {skipped[:20]}"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_child_forked_from_the_owner_joins_and_keeps_no_hold_on_the_lock(tmp_path):
    """A child forked after its parent opened the store opens it again and joins the parent; and
    while it lives on, the parent's close leaves the lock free for the next open (the child's
    copy of the lock file's descriptor would keep its flock)."""
    path = str(tmp_path / "s")
    owner = MessageStore(path, **SMALL)
    owner.put("T", b"x", queue_id=0)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            os.close(read_end)
            try:
                with MessageStore(path) as again:
                    said = b"joined" if again.writer_pid == os.getppid() else b"not joined"
            except Exception as exc:
                said = f"{type(exc).__name__}: {exc}".encode()
            os.write(write_end, said)
            time.sleep(30)  # lives on after the parent closed
        finally:
            os._exit(0)
    try:
        os.close(write_end)
        said = os.read(read_end, 200)
        os.close(read_end)
        assert said == b"joined"
        owner.close()
        began = time.monotonic()
        with MessageStore(path, writer_wait_s=10.0) as next_owner:
            assert next_owner.writer_pid == os.getpid()
        assert time.monotonic() - began < 5
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        owner.close()
