"""Thread safety: concurrent puts never share or skip a queue offset; readers see whole records."""

import threading

from rocketstore import MessageStore

SEGMENT = 64 * 1024
HOST = "10.0.0.7"


def open_store(path, impl, **options):
    options.setdefault("commitlog_file_size", SEGMENT)
    return MessageStore(path, implementation=impl.name, store_host=HOST, **options)


def run_threads(targets, timeout=120):
    errors = []

    def guarded(fn):
        def run():
            try:
                fn()
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        return run

    threads = [threading.Thread(target=guarded(fn)) for fn in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors


def test_concurrent_puts_and_reads_on_one_queue_give_unique_consecutive_offsets(tmp_path, impl):
    writers, per_writer = 4, 400
    with open_store(tmp_path / "store", impl) as s:
        s.create_topic("TopicC", 4)
        start = threading.Barrier(writers + 2)
        done = threading.Event()
        results = [[] for _ in range(writers)]
        reads = [0, 0]

        def writer(i):
            def run():
                start.wait()
                for j in range(per_writer):
                    body = b"w%d-%d|" % (i, j) * (1 + j % 20)
                    results[i].append((body, s.put("TopicC", body, queue_id=1, tags="t%d" % i)))

            return run

        def reader(k):
            def run():
                start.wait()
                while not done.is_set():
                    # every record a reader can see decodes, with its CRC checked
                    last = None
                    for m in s.iter_messages():
                        last = m
                        assert m.topic == "TopicC" and m.queue_id == 1
                    if last is not None:
                        again = s.read(last.commitlog_offset)
                        assert bytes(again.body) == bytes(last.body)
                    reads[k] += 1

            return run

        def writers_then_stop():
            run_threads([writer(i) for i in range(writers)])
            done.set()

        run_threads([writers_then_stop, reader(0), reader(1)])
        print(f"reader passes: {reads}")
        flat = [r for rs in results for r in rs]
        assert sorted(r.queue_offset for _, r in flat) == list(range(writers * per_writer))
        assert len({r.commitlog_offset for _, r in flat}) == len(flat)
        assert len({r.unique_key for _, r in flat}) == len(flat)
        for rs in results:  # each thread's own puts are in order
            offs = [r.queue_offset for _, r in rs]
            assert offs == sorted(offs)
        messages = list(s.iter_messages())
        assert len(messages) == writers * per_writer
        assert [m.queue_offset for m in messages] == list(range(writers * per_writer))
        by_offset = {r.commitlog_offset: body for body, r in flat}
        for m in messages:
            assert m.body == by_offset[m.commitlog_offset]
        assert s.queue_offsets()[("TopicC", 1)] == writers * per_writer


def test_concurrent_first_puts_to_a_new_topic_give_unique_queue_offsets(tmp_path, impl):
    writers, per_writer = 4, 50
    with open_store(tmp_path / "store", impl) as s:
        barrier = threading.Barrier(writers)
        offsets = [[] for _ in range(writers)]

        def writer(i):
            def run():
                barrier.wait()
                for _ in range(per_writer):
                    offsets[i].append(s.put("BrandNewTopic", b"x", queue_id=0).queue_offset)

            return run

        run_threads([writer(i) for i in range(writers)])
        flat = sorted(q for qs in offsets for q in qs)
        assert flat == list(range(writers * per_writer)), (
            f"duplicate queue offsets: {sorted({q for q in flat if flat.count(q) > 1})}"
        )
        assert [m.queue_offset for m in s.iter_messages()] == list(range(writers * per_writer))


def test_concurrent_first_puts_after_reopen_continue_the_queue_offsets(tmp_path, impl):
    writers, per_writer, already = 4, 50, 30
    path = tmp_path / "store"
    with open_store(path, impl) as s:
        for _ in range(already):
            s.put("TopicReopen", b"before", queue_id=0)
    with open_store(path, impl) as s:
        barrier = threading.Barrier(writers)
        offsets = [[] for _ in range(writers)]

        def writer(i):
            def run():
                barrier.wait()
                for _ in range(per_writer):
                    offsets[i].append(s.put("TopicReopen", b"after", queue_id=0).queue_offset)

            return run

        run_threads([writer(i) for i in range(writers)])
        flat = sorted(q for qs in offsets for q in qs)
        assert flat == list(range(already, already + writers * per_writer))


def test_concurrent_batches_and_single_puts_interleave_without_gaps(tmp_path, impl):
    with open_store(tmp_path / "store", impl) as s:
        s.create_topic("TopicMix", 2)
        batch_results, single_results = [], []

        def batcher():
            for i in range(40):
                batch_results.append(
                    s.put_batch("TopicMix", [b"b%d-%d" % (i, k) for k in range(10)], queue_id=0)
                )

        def single():
            for i in range(200):
                single_results.append(s.put("TopicMix", b"s%d" % i, queue_id=0))

        run_threads([batcher, batcher, single, single])
        offsets = [int(q) for b in batch_results for q in b.queue_offsets]
        offsets += [r.queue_offset for r in single_results]
        assert sorted(offsets) == list(range(800 + 400))
        for b in batch_results:  # a batch is contiguous in queue and in the CommitLog
            assert list(b.queue_offsets) == list(range(b.first_queue_offset, b.first_queue_offset + 10))
        assert [m.queue_offset for m in s.iter_messages()] == list(range(1200))
