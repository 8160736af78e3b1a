"""Read-only opens beside a writer whose forced cleans delete segments, queue and index files
under them: every open succeeds and sees a consistent store minus what was deleted."""

import threading

from rocketstore import MessageStore
from rocketstore.consume import GetMessageStatus
from rocketstore.errors import MessageNotFoundError

OPTIONS = dict(commitlog_file_size=4096, consume_queue_units=8, index_slots=4, index_count=16)
READER_OPENS = 60


def test_read_only_opens_beside_forced_cleans_see_a_consistent_store(tmp_path, impl):
    path = tmp_path / "store"
    writer = MessageStore(path, implementation=impl.name, dispatch_interval_ms=1, **OPTIONS)
    writer.create_topic("T", 2)
    done = threading.Event()
    errors = []

    def write():
        try:
            i = 0
            while not done.is_set() and i < 200_000:
                for _ in range(15):
                    writer.put("T", b"m%06d" % i, keys="k%d" % i, queue_id=i % 2)
                    i += 1
                writer.clean(force=True)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    problems, seen = [], {"messages": 0, "deleted": 0}
    try:
        for _ in range(READER_OPENS):
            if errors:
                break
            try:
                with MessageStore(path, implementation=impl.name, read_only=True) as r:
                    report = r.verify()
                    if not report["ok"]:
                        problems.append(("verify", report["problems"][:3]))
                    for (topic, qid), (lo, hi) in r.queues().items():
                        if lo == hi:
                            continue  # every message of the queue was deleted
                        got = r.get_message("g", topic, qid, lo, max_msgs=8)
                        # OFFSET_TOO_SMALL: deleted since queues() (the reader follows the writer)
                        if got.status not in (GetMessageStatus.FOUND, GetMessageStatus.OFFSET_TOO_SMALL):
                            problems.append(("get_message", topic, qid, lo, hi, got.status))
                        for m in got.messages:
                            seen["messages"] += 1
                            assert m.topic == topic and m.queue_id == qid
                            assert m.body == b"m%06d" % int(m.keys[1:])
                            hits = r.query_by_key(topic, m.keys)
                            # a reader follows the writer: a message retention deleted since
                            # get_message is missing from the answer, nothing else may be
                            gone = m.commitlog_offset < r.min_offset
                            if m.msg_id not in [h.msg_id for h in hits] and not gone:
                                problems.append(("query_by_key", m.keys, [h.keys for h in hits]))
                    try:
                        r.read(0)
                    except MessageNotFoundError:
                        seen["deleted"] += 1
            except Exception as exc:
                problems.append(("open", repr(exc)))
            done.wait(0.002)  # let the writer run (the GIL), see test_retention
    finally:
        done.set()
        thread.join()
        writer.close()
    assert not errors, errors[0]
    assert not problems, "\n".join(map(str, problems[:12]))
    assert seen["messages"] > 0 and seen["deleted"] > 0


def test_queue_files_deleted_while_a_read_only_open_recovers_them(tmp_path, impl, monkeypatch):
    """The race the test above hits now and then, made certain: retention deletes queue files
    (oldest first) while a read-only open (beside a writer: its abort file is there) searches
    the queue's valid prefix, each time up to the file the search reads. The open succeeds (it
    used to give up with SegmentError after five looks), and every message still in the
    CommitLog is read right (here all of them: only queue files went, and the store rebuilds
    those units from the CommitLog)."""
    from rocketstore.queues import consumequeue

    path = tmp_path / "store"
    writer = MessageStore(path, implementation=impl.name, **OPTIONS)
    try:
        writer.create_topic("T", 1)
        count = 64 * 8  # 64 queue files of 8 units
        for i in range(count):
            writer.put("T", b"m%06d" % i, queue_id=0)
        assert writer.max_queue_offset("T", 0) == count  # dispatched
        writer.flush()
        real = consumequeue.ConsumeQueue._stored
        deleted = []

        def stored(self, queue_offset):
            if self.topic == "T":  # retention deletes every file up to the one read
                start = queue_offset * 20 // (8 * 20) * (8 * 20)
                for f in sorted((path / "consumequeue" / "T" / "0").iterdir()):
                    if int(f.name) <= start:
                        f.unlink()
                        deleted.append(f.name)
            return real(self, queue_offset)

        monkeypatch.setattr(consumequeue.ConsumeQueue, "_stored", stored)
        with MessageStore(path, implementation=impl.name, read_only=True) as r:
            assert deleted
            lo, hi = r.queues()[("T", 0)]
            got, pos = [], lo
            while pos < hi:
                res = r.get_message("g", "T", 0, pos, max_msgs=64)
                got += res.messages
                pos = res.next_begin_offset
            assert hi == count and [bytes(m.body) for m in got] == [b"m%06d" % i for i in range(lo, count)]
    finally:
        writer.close()
