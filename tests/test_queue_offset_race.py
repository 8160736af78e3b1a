"""Queue offsets are assigned under the append lock: changing a topic's queue count while other
threads put to it never hands out one queue offset twice."""

import threading

from rocketstore import MessageStore

TOPIC = "T"
WRITERS = 3
PUTS = 1000


def test_create_topic_racing_with_puts_keeps_queue_offsets_unique_and_contiguous(impl, tmp_path):
    with MessageStore(tmp_path / "s", implementation=impl.name, commitlog_file_size=1 << 20) as store:
        store.create_topic(TOPIC, 1)
        results, errors = [], []
        start = threading.Barrier(WRITERS + 1)
        writers_done = threading.Event()

        def writer(t):
            start.wait()
            try:
                for i in range(PUTS):
                    results.append(store.put(TOPIC, b"w%d-%d" % (t, i), queue_id=0))
            except BaseException as exc:  # reported below, with the offsets
                errors.append(exc)

        def retopic():
            start.wait()
            queues = 1
            while not writers_done.is_set():
                queues = 3 - queues  # 1, 2, 1, 2, ...: a count change every call
                store.create_topic(TOPIC, queues)

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(WRITERS)]
        changer = threading.Thread(target=retopic)
        for th in threads + [changer]:
            th.start()
        for th in threads:
            th.join()
        writers_done.set()
        changer.join()
        assert not errors, errors

        offsets = sorted(r.queue_offset for r in results)
        assert offsets == list(range(WRITERS * PUTS)), (
            f"{len(offsets) - len(set(offsets))} duplicated queue offsets"
        )
        by_offset = {r.queue_offset: r for r in results}
        for q, r in by_offset.items():
            got = store.get_by_queue_offset(TOPIC, 0, q)
            assert got.msg_id == r.msg_id
        assert store.queues()[(TOPIC, 0)] == (0, WRITERS * PUTS)
