"""Joined writers append in their own process (rocketstore.log.sharedappend): one cross-process lock,
shared queue offsets, a writer that dies inside an append repaired by the next one."""

import json
import os
import struct

import pytest
from test_writers import SMALL, open_store, queue_messages, run_child, spawn_child

from rocketstore import Message, MessageStore
from rocketstore.errors import MessageNotFoundError
from rocketstore.log import sharedappend

pytestmark = pytest.mark.skipif(not sharedappend.supported(), reason="no open-file-description locks here")

JOINED = """
    import json, os, sys
    from rocketstore import Message, MessageStore
    path, impl, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    s = MessageStore(path, implementation=impl)
    placed = []
    for i in range(n):
        if i % 3 == 0:
            r = s.put("T", b"j-%d" % i)
        elif i % 3 == 1:
            r = s.put("T", b"j-%d" % i, keys=["j-%d" % i, "k"], tags="t")
        else:
            r = s.put("T", b"j-%d" % i, keys="j-%d" % i, queue_id=1)
        placed.append((r.queue_id, r.queue_offset, r.commitlog_offset, "j-%d" % i))
    b = s.put_batch("T", [b"jb-0", b"jb-1", b"jb-2"], queue_id=0)
    placed += [(0, b.first_queue_offset + k, int(b.commitlog_offsets[k]), "jb-%d" % k) for k in range(3)]
    ms = s.put_messages([Message("T", b"jm-%d" % k, keys="jm-%d" % k, queue_id=0) for k in range(3)])
    placed += [(r.queue_id, r.queue_offset, r.commitlog_offset, "jm-%d" % k) for k, r in enumerate(ms)]
    appender = s._joined.appender
    print(json.dumps({
        "appended_here": appender.core.puts if appender else 0,
        "writer": s.writer_pid,
        "placed": placed,
    }), flush=True)
    s.close()
"""


def _check_queues(store, placed):
    """Every position given once, each queue's offsets contiguous, each message where its
    result said."""
    positions = [(q, o) for q, o, _, _ in placed]
    assert len(set(positions)) == len(positions)
    for qid in {q for q, _ in positions}:
        offsets = sorted(o for q, o in positions if q == qid)
        assert offsets == list(range(len(offsets)))
        assert store.max_queue_offset("T", qid) == len(offsets)
    for qid, qoff, offset, body in placed:
        msg = store.get_by_queue_offset("T", qid, qoff)
        assert (msg.commitlog_offset, msg.body) == (offset, body.encode())


def test_joined_puts_append_in_their_own_process_beside_the_owners(tmp_path, impl):
    path = tmp_path / "s"
    with open_store(path, impl) as owner:
        owner.create_topic("T", 2)
        children = [spawn_child(JOINED, path, impl.name, 400) for _ in range(2)]
        placed = []
        for i in range(400):
            r = owner.put("T", b"o-%d" % i, keys="o-%d" % i)
            placed.append((r.queue_id, r.queue_offset, r.commitlog_offset, "o-%d" % i))
        owned = owner._opened.core.puts
        for k, child in enumerate(children):
            out, err = child.communicate(timeout=120)
            assert child.returncode == 0, err
            found = json.loads(out)
            assert found["writer"] == os.getpid()
            assert found["appended_here"] == 406  # none went through the owner
            placed += [(q, o, c, b if b.startswith("o") else f"{k}:{b}") for q, o, c, b in found["placed"]]
        assert owner._opened.core.puts == owned
        # the children's bodies repeat: tell them apart by where they are
        by_position = {(q, o): (c, b.split(":")[-1]) for q, o, c, b in placed}
        assert len(by_position) == len(placed) == 1212
        _check_queues(owner, [(q, o, c, b) for (q, o), (c, b) in by_position.items()])
        assert len(owner.query_by_key("T", "k", max_num=64)) == 64  # the index holds the joined writers' keys
        assert {m.body for m in owner.query_by_key("T", "j-301")} == {b"j-301"}
        assert owner.max_offset > 2 * SMALL["commitlog_file_size"]  # they rolled segments too
    with open_store(path, impl) as again:
        assert again.last_shutdown_clean
        _check_queues(again, [(q, o, c, b) for (q, o), (c, b) in by_position.items()])
    assert not (path / sharedappend.APPEND_NAME).exists()  # a clean close leaves a broker's files


DIES_INSIDE = """
    import os, struct, sys
    from rocketstore.log import sharedappend as ap
    path = sys.argv[1]
    fd, mm = ap.open_table(path, create=False)
    ap.Mutex(mm).lock()
    assert struct.unpack_from("<Q", mm, ap.O_EPOCH)[0] != 0
    end, = struct.unpack_from("<q", mm, ap.O_END)
    at = ap.find(mm, b"T")
    struct.pack_into("<I", mm, ap.O_BUSY, os.getpid())
    # half an append: the queue's next offset moved, part of a record written, no end published
    nxt, = struct.unpack_from("<q", mm, at + ap.E_NEXT)
    struct.pack_into("<q", mm, at + ap.E_NEXT, nxt + 7)
    size = struct.unpack_from("<q", mm, ap.O_SEGMENT)[0]
    seg = os.path.join(path, "commitlog", "%020d" % (end - end % size))
    with open(seg, "r+b") as f:
        f.seek(end % size)
        f.write(bytes([0, 0, 1, 20]) + b"\\xab" * 200)
    print(nxt, flush=True)
    os._exit(0)  # dies holding the lock: the next to lock it is told so (EOWNERDEAD)
"""


def test_a_writer_that_dies_inside_an_append_is_repaired_by_the_next(tmp_path, impl):
    path = tmp_path / "s"
    with open_store(path, impl) as owner:
        owner.create_topic("T", 1)
        out = json.loads(run_child(JOINED.replace("range(n)", "range(0, n, 3)"), path, impl.name, 30))
        placed = [tuple(p) for p in out["placed"]]
        assert out["appended_here"] == 16
        next_before = int(run_child(DIES_INSIDE, path))
        assert next_before == owner.max_queue_offset("T", 0) == 16
        for i in range(20):
            r = owner.put("T", b"after-%d" % i, keys="after-%d" % i)
            placed.append((r.queue_id, r.queue_offset, r.commitlog_offset, "after-%d" % i))
        assert placed[-20][1] == 16  # the dead writer's offsets were not kept
        _check_queues(owner, placed)
        out = json.loads(run_child(JOINED.replace("range(n)", "range(0, n, 3)"), path, impl.name, 30))
        placed += [tuple(p) for p in out["placed"]]
        report = owner.verify()
        assert report["ok"], report["problems"]
    with open_store(path, impl) as again:
        got = [m.body.decode() for m in queue_messages(again, "T", 0)]
        assert got == [b for _, _, _, b in sorted(placed, key=lambda p: p[1])]
        assert len(got) == 16 + 20 + 16


DIES_AFTER_A_WHOLE_RECORD = """
    import os, struct, sys, time
    from rocketstore.format import _codec_py
    from rocketstore.log import sharedappend as ap
    path = sys.argv[1]
    fd, mm = ap.open_table(path, create=False)
    ap.Mutex(mm).lock()
    end, = struct.unpack_from("<q", mm, ap.O_END)
    at = ap.find(mm, b"T")
    struct.pack_into("<I", mm, ap.O_BUSY, os.getpid())
    # a whole, CRC-valid record written and its queue offset taken; neither end nor offsets published
    nxt, = struct.unpack_from("<q", mm, at + ap.E_NEXT)
    struct.pack_into("<q", mm, at + ap.E_NEXT, nxt + 1)
    now = int(time.time() * 1000)
    record = _codec_py.encode_record(
        topic="T", body=b"never acknowledged", queue_offset=nxt, physical_offset=end,
        born_timestamp=now, store_timestamp=now,
    )
    size = struct.unpack_from("<q", mm, ap.O_SEGMENT)[0]
    assert end % size + len(record) <= size
    with open(os.path.join(path, "commitlog", "%020d" % (end - end % size)), "r+b") as f:
        f.seek(end % size)
        f.write(record)
    print(nxt, end, flush=True)
    os._exit(0)  # dies holding the lock: the next append writes over the record
"""


def test_a_whole_record_a_dead_writer_did_not_publish_is_no_message(tmp_path, impl):
    """A joined writer killed after writing a whole record, before it published the end: the
    next append takes that place and that queue offset. A reader opened meanwhile reads no further
    than the published end (its own scan found the record valid), so it never hands the dead
    writer's record out at the queue offset the next put gets."""
    path = tmp_path / "s"
    with open_store(path, impl) as owner:
        owner.create_topic("T", 1)
        run_child(JOINED.replace("range(n)", "range(0, n, 3)"), path, impl.name, 6)  # the table
        nxt, end = map(int, run_child(DIES_AFTER_A_WHOLE_RECORD, path).split())
        assert (nxt, end) == (owner.max_queue_offset("T", 0), owner.max_offset)
        with MessageStore(path, implementation=impl.name, read_only=True) as reader:
            assert reader.max_offset == end
            assert reader.max_queue_offset("T", 0) == nxt
            with pytest.raises(MessageNotFoundError):
                reader.get_by_queue_offset("T", 0, nxt)
            assert not reader.get_message("g", "T", 0, nxt).messages
            r = owner.put("T", b"the put that came next")
            assert (r.queue_offset, r.commitlog_offset) == (nxt, end)
            assert reader.get_by_queue_offset("T", 0, nxt).body == b"the put that came next"
            got = reader.get_message("g", "T", 0, 0)
            assert [m.body for m in got.messages][-1:] == [b"the put that came next"]
            assert got.next_begin_offset == nxt + 1


def test_a_reader_bounded_by_the_published_end_still_reads_what_the_queues_point_at(tmp_path, impl):
    """The owner dispatches its own records as it appends them, so units on disk can point past
    the end its live page says yet (a batch whose append lock is still held). A reader opened
    then reads as far as those units (those records are the owner's, never written over): else
    it would find the units pointing past its end, rebuild the queue and skip the positions."""
    path = tmp_path / "s"
    with open_store(path, impl) as owner:
        owner.create_topic("T", 1)
        run_child(JOINED.replace("range(n)", "range(0, n, 3)"), path, impl.name, 6)  # the table
        published = owner.max_offset
        first = owner.max_queue_offset("T", 0)
        for i in range(3):
            owner.put("T", b"dispatched before the page said so %d" % i)
        owner.get_message("g", "T", 0, first)  # the owner's units on disk
        owner._opened.checkpointer.save()  # and vouched for: a reader keeps them
        page = path / "rocketstore-live"
        with open(page, "r+b") as f:  # the page as it was before the puts were published
            f.seek(16)
            f.write(struct.pack("<q", published))
        with MessageStore(path, implementation=impl.name, read_only=True) as reader:
            got = reader.get_message("g", "T", 0, first)
            assert [m.body for m in got.messages] == [
                b"dispatched before the page said so %d" % i for i in range(3)
            ]
            assert reader.get_by_queue_offset("T", 0, first + 2).queue_offset == first + 2
            assert reader.verify()["ok"]


KILLED_AFTER_ITS_RECORD = """
    import sys
    from rocketstore import MessageStore
    from rocketstore.log import _store_py
    s = MessageStore(sys.argv[1], implementation="py")
    s.put("T", b"appended here")
    assert s._joined.appender, "the put did not append in this process"
    _store_py._debug_publish_fault(1)  # the record is written; nothing of it is published yet
    s.put("T", b"never acknowledged")
"""


def test_the_pure_twin_publishes_a_joined_put_to_readers_only_once_the_table_has_it(tmp_path):
    """The live page tells following readers where records end: a joined writer killed between
    its record and the table's end must leave the page where the table is (the compiled twin
    publishes the page after the table, under the lock; the pure twin did it per record, so a
    reader took the dead writer's record for the message at the queue offset the next put gets)."""
    path = tmp_path / "s"
    with MessageStore(path, implementation="py", **SMALL) as owner:
        owner.create_topic("T", 1)
        owner.put("T", b"first")
        with MessageStore(path, implementation="py", read_only=True) as reader:
            assert reader.max_queue_offset("T", 0) == 1
            child = spawn_child(KILLED_AFTER_ITS_RECORD, path)
            child.communicate(timeout=120)
            assert child.returncode == 86
            assert reader.max_queue_offset("T", 0) == 2  # "appended here"
            end = owner.max_offset
            r = owner.put("T", b"the put that came next")
            assert (r.queue_offset, r.commitlog_offset) == (2, end)
            assert [m.body for m in reader.get_message("g", "T", 0, 0).messages] == [
                b"first",
                b"appended here",
                b"the put that came next",
            ]


def test_with_shared_append_off_joined_puts_run_in_the_owner(tmp_path, impl):
    path = tmp_path / "s"
    with open_store(path, impl, shared_append=False) as owner:
        owner.create_topic("T", 2)
        out = json.loads(run_child(JOINED, path, impl.name, 30))
        assert out["appended_here"] == 0
        assert owner._opened.core.puts == 36
        _check_queues(owner, [tuple(p) for p in out["placed"]])
        assert not (path / sharedappend.APPEND_NAME).exists()


def test_the_table_is_a_store_file_a_read_only_open_accepts(tmp_path, impl):
    path = tmp_path / "s"
    with open_store(path, impl) as owner:
        owner.put("T", b"x")
        run_child(JOINED, path, impl.name, 3)
        assert (path / sharedappend.APPEND_NAME).stat().st_size == sharedappend.SIZE
        with MessageStore(path, implementation=impl.name, read_only=True) as reader:
            assert reader.max_queue_offset("T", 0) + reader.max_queue_offset("T", 1) >= 4
        table = (path / sharedappend.APPEND_NAME).read_bytes()[:64]
        assert struct.unpack_from("<Q", table, sharedappend.O_MAGIC)[0] == sharedappend.MAGIC


REFUSED = """
    import json, sys
    from rocketstore import MessageStore
    from rocketstore.errors import PutError
    s = MessageStore(sys.argv[1], implementation=sys.argv[2])
    out = {}
    for name, call in (("put", lambda: s.put("T", b"x")), ("put_batch", lambda: s.put_batch("T", [b"y"]))):
        try:
            call()
            out[name] = None
        except PutError as exc:
            out[name] = type(exc).__name__
    print(json.dumps(out), flush=True)
    s.close()
"""


def test_while_the_owner_refuses_puts_joined_writers_get_its_typed_error(tmp_path, impl):
    from rocketstore.errors import DiskFullError

    path = tmp_path / "s"
    with open_store(path, impl) as owner:
        owner.put("T", b"first")
        run_child(JOINED, path, impl.name, 3)  # the table exists
        stored = owner.max_offset
        owner._opened.core.refuse_puts(DiskFullError(28, "test: the disk is full"))
        refused = json.loads(run_child(REFUSED, path, impl.name))
        assert refused == {"put": "PutRefusedDiskFullError", "put_batch": "PutRefusedDiskFullError"}
        assert owner.max_offset == stored  # nothing written
        owner._opened.core.refuse_puts(None)
        assert json.loads(run_child(REFUSED, path, impl.name)) == {"put": None, "put_batch": None}


DURABLE = """
    import json, sys
    from rocketstore import Message, MessageStore
    s = MessageStore(sys.argv[1], implementation=sys.argv[2])
    ends = []
    for i in range(5):
        r = s.put("T", b"d-%d" % i, durable=True)
        ends.append(r.commitlog_offset + r.size)
    b = s.put_batch("T", [b"db-0", b"db-1"], durable=True)
    ends.append(b.end_offset)
    ms = s.put_messages([Message("T", b"dm-0", keys="dm")], durable=True)
    ends.append(ms[0].commitlog_offset + ms[0].size)
    core = s._joined.appender.core
    print(json.dumps({"ends": ends, "appended_here": core.puts, "waited_here": core.durable_waits}))
    s.close()
"""


def test_joined_durable_puts_are_flushed_by_the_owners_group_commit(tmp_path, impl):
    path = tmp_path / "s"
    with open_store(path, impl) as owner:
        owner.put("T", b"first")
        waits = owner._opened.core.durable_waits
        out = json.loads(run_child(DURABLE, path, impl.name))
        assert out["appended_here"] == 8 and out["waited_here"] == 0  # appended there, flushed here
        assert owner._opened.core.durable_waits > waits
        assert owner._opened.core.flushed_offset >= max(out["ends"])


ONE_JOINED_PUT = """
    import sys
    from rocketstore import MessageStore
    s = MessageStore(sys.argv[1], implementation=sys.argv[2])
    s.put("T", b"joined")
    assert s._joined.appender, "the put did not append in this process"
    s.close()
"""


def test_the_owner_puts_on_after_it_stopped_sharing(tmp_path, impl):
    """The owner's topics in the shared table keep their entries once it stops sharing (its
    close begins so, and a joined writer's forwarded put may come then): each put reads the
    queue count through the table's map, which stays mapped (it raised a TypeError in the pure
    twin once the core had dropped the table)."""
    path = tmp_path / "s"
    with open_store(path, impl) as owner:
        owner.create_topic("T", 2)
        run_child(ONE_JOINED_PUT, path, impl.name)
        before = owner.put("T", b"shared", queue_id=0)  # the owner's topic entry is the table's
        owner._joined.stop_sharing(owner)
        after = owner.put("T", b"alone", queue_id=0)
        assert after.queue_offset == before.queue_offset + 1
        owner.create_topic("T", 3)  # a count change goes to the table entry too
        assert owner.put("T", b"three", queue_id=2).queue_offset == 0
        assert [m.body for m in queue_messages(owner, "T", 0)][-2:] == [b"shared", b"alone"]


A_MEMBER_THAT_STAYS = """
    import sys
    from rocketstore import MessageStore
    s = MessageStore(sys.argv[1], implementation=sys.argv[2])
    s.put("T", b"joined")
    assert s._joined.appender, "the put did not append in this process"
    print("joined", flush=True)
    sys.stdin.readline()  # stays joined until told
    s.close()
"""


def _drop_presence(fd):
    """What the kernel does when the owner dies: its presence lock goes."""
    import fcntl

    fcntl.fcntl(fd, fcntl.F_OFD_SETLK, sharedappend._FLOCK.pack(fcntl.F_UNLCK, os.SEEK_SET, 1, 1, 0))


def test_a_reader_stops_at_the_published_end_while_a_joined_writer_outlives_the_owner(tmp_path, impl):
    """A joined writer appends on for up to OWNER_LOOK_MS after the owner died: a writer killed
    then, after a whole record, leaves it to be written over by the next append as ever. So a
    reader opened meanwhile stops at the published end while any joined writer holds on to the
    table, not only while the owner does."""
    path = tmp_path / "s"
    with open_store(path, impl) as owner:
        owner.create_topic("T", 1)
        member = spawn_child(A_MEMBER_THAT_STAYS, path, impl.name, stdin=True)
        try:
            assert member.stdout.readline() == "joined\n"
            _drop_presence(owner._joined.append_table[0])
            assert sharedappend.appenders_present(str(path))  # the member still holds on
            nxt, end = map(int, run_child(DIES_AFTER_A_WHOLE_RECORD, path).split())
            assert (nxt, end) == (owner.max_queue_offset("T", 0), owner.max_offset)
            assert nxt == 1  # the member's put
            with MessageStore(path, implementation=impl.name, read_only=True) as reader:
                assert (reader.max_offset, reader.max_queue_offset("T", 0)) == (end, nxt)
                with pytest.raises(MessageNotFoundError):
                    reader.get_by_queue_offset("T", 0, nxt)
        finally:
            member.communicate("go\n", timeout=120)
        assert member.returncode == 0
        assert not sharedappend.appenders_present(str(path))  # the owner's presence went above
        r = owner.put("T", b"the put that came next")
        assert (r.queue_offset, r.commitlog_offset) == (nxt, end)


JOINED_WITH_PROPERTIES = """
    import json, sys
    from rocketstore import MessageStore
    s = MessageStore(sys.argv[1], implementation=sys.argv[2])
    plain = s.put("T", b"with properties", keys="jp", properties={"region": "eu"})
    appended = s._joined.appender.core.puts
    delayed = s.put("T", b"delayed", properties={"DELAY": "1"})
    print(json.dumps([appended, s._joined.appender.core.puts, plain.commitlog_offset, delayed.commitlog_offset]))
    s.close()
"""


def test_a_joined_put_with_plain_properties_appends_in_its_own_process(tmp_path, impl):
    path = tmp_path / "s"
    with open_store(path, impl) as owner:
        owner.create_topic("T", 1)
        appended, after, plain, delayed = json.loads(run_child(JOINED_WITH_PROPERTIES, path, impl.name))
        assert appended == after == 1  # the DELAY one went to the owner
        got = owner.read(plain)
        assert (got.body, got.keys, got.properties["region"]) == (b"with properties", "jp", "eu")
        assert owner.read(delayed).topic == "SCHEDULE_TOPIC_XXXX"


DIES_PUBLISHING = """
    import sys
    from rocketstore import Message, MessageStore
    path, impl, step = sys.argv[1], sys.argv[2], int(sys.argv[3])
    s = MessageStore(path, implementation=impl)
    s.put("T", b"joined-0", queue_id=0)
    assert s._joined.appender, "the put did not append in this process"
    s._impl.store._debug_publish_fault(step)
    # one append that moves two queues: ended after the step (os._exit(86), as a kill -9 there)
    s.put_messages([Message("T", b"dying-0", queue_id=0), Message("T", b"dying-1", queue_id=1)])
    print("the fault did not end the process", flush=True)
"""

JOINED_AFTER = """
    import sys
    from rocketstore import MessageStore
    s = MessageStore(sys.argv[1], implementation=sys.argv[2])
    for q in (0, 1):
        s.put("T", b"joined-after-%d" % q, queue_id=q)
    assert s._joined.appender, "the puts did not append in this process"
    s.close()
"""


def _walk_queue(store, topic, queue_id):
    """(queue offset, body) of every message a consumer reads from the queue's minimum on."""
    low, high = store.min_queue_offset(topic, queue_id), store.max_queue_offset(topic, queue_id)
    got, at = [], low
    while at < high:
        result = store.get_message("offsets-check", topic, queue_id, at, 16)
        got += [(m.queue_offset, bytes(m.body)) for m in result.messages]
        assert result.next_begin_offset > at, (at, result.status)
        at = result.next_begin_offset
    return low, high, got


@pytest.mark.parametrize("step", range(1, 7))
def test_a_writer_killed_at_any_step_of_its_publish_gives_no_queue_offset_twice_or_never(
    tmp_path, impl, step
):
    """A joined writer ends inside the publish of an append that moved two queues (records
    written; then the end it publishes noted, each queue's committed offset copied, the end
    published, busy cleared): the next writers go on from where the table says, and every queue
    read from its minimum has each offset once, none missing (the committed offsets were copied
    before the end was published, so a writer killed in between left offsets counting records the
    next one wrote over). Once it began to publish, its records are kept."""
    assert impl.store.PUBLISH_STEPS == 6
    path = tmp_path / "s"
    acked = set()
    with open_store(path, impl) as owner:
        owner.create_topic("T", 2)
        for q in (0, 1):
            owner.put("T", b"owner-before-%d" % q, queue_id=q)
            acked.add(b"owner-before-%d" % q)
        child = spawn_child(DIES_PUBLISHING, path, impl.name, step)
        out, err = child.communicate(timeout=120)
        assert child.returncode == 86, (out, err)
        acked.add(b"joined-0")
        for i in range(3):
            for q in (0, 1):
                owner.put("T", b"owner-after-%d-%d" % (i, q), queue_id=q)
                acked.add(b"owner-after-%d-%d" % (i, q))
        run_child(JOINED_AFTER, path, impl.name)
        acked |= {b"joined-after-0", b"joined-after-1"}
        kept = _check_every_offset_once(owner, acked)
        assert kept == (set() if step == 1 else {b"dying-0", b"dying-1"})
    with open_store(path, impl) as again:
        assert _check_every_offset_once(again, acked) == kept


def _check_every_offset_once(store, acked):
    """Each queue of T read from its minimum: every offset once, none missing, no body twice,
    every acknowledged one there; verify() clean. The dead writer's records found."""
    report = store.verify()
    assert report["ok"], report["problems"]
    bodies = []
    for q in (0, 1):
        low, high, got = _walk_queue(store, "T", q)
        assert [o for o, _ in got] == list(range(low, high)), f"queue {q}: {got}"
        bodies += [b for _, b in got]
    assert len(bodies) == len(set(bodies))
    assert acked <= set(bodies)
    return {b"dying-0", b"dying-1"} & set(bodies)


JOINED_MESSAGE_PUTS = """
    import json, sys
    from rocketstore import Message, MessageStore
    s = MessageStore(sys.argv[1], implementation=sys.argv[2])
    s.put("T", b"first")
    assert s._joined.appender, "the put did not append in this process"
    before = s._joined.appender.core.puts
    results = [
        s.put(Message("T", b"plain")),
        s.put(Message("T", b"tagged", tags="TagA", queue_id=1)),
        s.put(Message("T", b"keyed", tags="TagB", keys=["k1", "k2"], properties={"region": "eu"},
                      born_timestamp=1234567890123, flag=7)),
        s.put(Message("T", b"durable", keys="kd"), durable=True),
    ]
    appended = s._joined.appender.core.puts - before
    # other shapes are the owner's: a DELAY property, a body that is not bytes, a delay level
    others = [
        s.put(Message("T", b"delayed", properties={"DELAY": "1"})),
        s.put(Message("T", memoryview(b"a view"))),
        s.put(Message("T", b"levelled"), delay_level=1),
        s.put_messages([Message("T", memoryview(b"views"))])[0],
    ]
    print(json.dumps({
        "appended": appended,
        "appended_after": s._joined.appender.core.puts - before,
        "placed": [[r.commitlog_offset, r.queue_id, r.queue_offset] for r in results],
        "others": [r.commitlog_offset for r in others],
    }))
    s.close()
"""


def test_a_joined_put_of_a_message_appends_in_its_own_process(tmp_path, impl):
    """put(Message(...)) of the plain shapes (tags, keys, a plain properties dict, queue id, flag,
    born timestamp) appends in the joined process as put(topic, body, ...) does: it went to the
    owner, and raised WriterGoneError when the owner died during the call. Its record is the one
    the owner writes for the same Message."""
    path = tmp_path / "s"
    with open_store(path, impl, schedule_interval_ms=0) as owner:  # (no delivery puts meanwhile)
        owner.create_topic("T", 2)
        owner_puts = owner._opened.core.puts
        out = json.loads(run_child(JOINED_MESSAGE_PUTS, path, impl.name))
        assert out["appended"] == out["appended_after"] == 4
        assert owner._opened.core.puts == owner_puts + 4  # the other shapes only
        got = [owner.read(offset) for offset, _, _ in out["placed"]]
        assert [m.body for m in got] == [b"plain", b"tagged", b"keyed", b"durable"]
        assert [(m.queue_id, m.queue_offset) for m in got] == [(q, o) for _, q, o in out["placed"]]
        assert got[1].queue_id == 1 and got[1].tags == "TagA"
        assert (got[2].flag, got[2].born_timestamp) == (7, 1234567890123)
        same = owner.read(
            owner.put(
                Message(
                    "T",
                    b"keyed",
                    tags="TagB",
                    keys=["k1", "k2"],
                    properties={"region": "eu"},
                    born_timestamp=1234567890123,
                    flag=7,
                )
            ).commitlog_offset
        )
        ours = {k: v for k, v in got[2].properties.items() if k != "UNIQ_KEY"}
        assert ours == {k: v for k, v in same.properties.items() if k != "UNIQ_KEY"}
        assert owner._opened.core.flushed_offset >= got[3].commitlog_offset + got[3].size
        assert [m.body for m in owner.query_by_key("T", "k2")] == [b"keyed", b"keyed"]
        delayed, view, levelled, views = (owner.read(offset) for offset in out["others"])
        assert (delayed.topic, levelled.topic) == ("SCHEDULE_TOPIC_XXXX", "SCHEDULE_TOPIC_XXXX")
        assert (view.topic, view.body, views.body) == ("T", b"a view", b"views")


CLOSED_UNDER_A_PUT = """
    import sys
    from rocketstore import MessageStore
    from rocketstore.log import sharedappend
    path, impl = sys.argv[1], sys.argv[2]
    s = MessageStore(path, implementation=impl)
    s.put("T", b"first")
    appender = s._joined.appender
    assert appender, "the joined store appends in its own process"
    core = appender.core
    # a takeover (another thread) closes the appender between a put's look at it and its call
    s._joined.drop_appender()
    try:
        core.put("T", b"late", None, -1, 0, 0, 0, 0, 0, None, 0)
        print("put on a closed appender returned", flush=True)
    except sharedappend.StaleTable:
        pass
    r = s.put("T", b"second")  # through the store's next way of putting
    print("ok", r.queue_offset, flush=True)
    s.close()
"""


def test_a_put_on_a_joined_appender_closed_under_it_is_stale_and_touches_no_closed_file(tmp_path, impl):
    path = tmp_path / "s"
    with open_store(path, impl) as owner:
        owner.create_topic("T", 1)
        out = run_child(CLOSED_UNDER_A_PUT, path, impl.name)
        assert out.split()[:1] == ["ok"], out
        assert [m.body for m in queue_messages(owner, "T", 0)] == [b"first", b"second"]


JOINED_KEYLESS = """
    import json, sys
    from rocketstore import Message, MessageStore
    from rocketstore.errors import KeyRequiredError
    s = MessageStore(sys.argv[1], implementation=sys.argv[2])
    refused = 0
    for put in (
        lambda: s.put("C", b"x", queue_id=0),
        lambda: s.put("C", b"x", tags="t", queue_id=0),
        lambda: s.put(Message("C", b"x", queue_id=0)),
    ):
        try:
            put()
        except KeyRequiredError:
            refused += 1
    kept = s.put("C", b"k", keys="user-1", queue_id=0).queue_offset
    print(json.dumps([refused, kept]), flush=True)
    s.close()
"""


def test_a_joined_writer_refuses_a_keyless_put_to_a_compacted_topic_as_the_owner_does(tmp_path, impl):
    path = tmp_path / "s"
    with open_store(path, impl) as owner:
        owner.put("C", b"before", keys="user-0", queue_id=0)
        owner.set_topic_retention("C", cleanup_policy="compaction")
        refused, kept = json.loads(run_child(JOINED_KEYLESS, path, impl.name))
        assert (refused, kept) == (3, 1)  # each refused, nothing written
        assert owner.max_queue_offset("C", 0) == 2


JOINED_SEES_COMPACTION = """
    import json, sys
    from rocketstore import Message, MessageStore
    from rocketstore.errors import KeyRequiredError
    s = MessageStore(sys.argv[1], implementation=sys.argv[2])

    def puts():
        outcomes = []
        for put in (
            lambda: s.put("C", b"x", queue_id=0),
            lambda: s.put("C", b"x", tags="t", queue_id=0),
            lambda: s.put(Message("C", b"x", queue_id=0)),
            lambda: s.put("C", b"k", keys="user-1", queue_id=0),
        ):
            try:
                outcomes.append(put().queue_offset)
            except KeyRequiredError:
                outcomes.append("refused")
        return outcomes

    for line in sys.stdin:
        if line.strip() == "compact here":  # this process asks (the owner runs it)
            s.set_topic_retention("C", cleanup_policy="compaction")
        elif line.strip() == "delete here":
            s.set_topic_retention("C", cleanup_policy="delete")
        print(json.dumps([puts(), bool(s._joined.appender)]), flush=True)
    s.close()
"""


def test_a_joined_writer_sees_a_topic_become_compacted_after_it_put_to_it(tmp_path, impl):
    """A joined writer that put to a topic, keyless, refuses keyless puts to it once the owner
    (or the joined writer itself, through the owner) made it compacted, and takes them again
    once it is not: the owner tells the joined writers through the shared append table that the
    topics changed."""
    path = tmp_path / "s"
    with open_store(path, impl) as owner:
        owner.put("C", b"before", queue_id=0)
        child = spawn_child(JOINED_SEES_COMPACTION, path, impl.name, stdin=True)
        try:

            def step(line):
                child.stdin.write(line + "\n")
                child.stdin.flush()
                return json.loads(child.stdout.readline())

            assert step("") == [[1, 2, 3, 4], True]  # an ordinary topic, appended in the child
            owner.set_topic_retention("C", cleanup_policy="compaction")
            assert step("") == [["refused", "refused", "refused", 5], True]
            owner.set_topic_retention("C", cleanup_policy="delete")
            assert step("") == [[6, 7, 8, 9], True]
            assert step("compact here") == [["refused", "refused", "refused", 10], True]
            assert step("delete here") == [[11, 12, 13, 14], True]
        finally:
            _, errors = child.communicate(timeout=120)  # (its stdin closed: it closes the store)
        assert child.returncode == 0, errors
        assert owner.max_queue_offset("C", 0) == 15
        assert owner._joined.append_table is not None  # (the child appended through the table)
