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
                            if m.msg_id not in [h.msg_id for h in hits]:
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
