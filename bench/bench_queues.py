"""Store-level read micro-benchmarks: ConsumeQueue reads, get_message, key lookups, dispatch.

    python -m pytest bench/bench_queues.py --benchmark-only --benchmark-group-by=group

Each test runs against a store pinned to the compiled (``c``) and the pure (``py``) twin, one
group per operation:

* ``cq-read-units``: ``queue_units`` views over one queue of 20k messages (zero-copy numpy);
* ``cq-get-units-32``: ``get_units`` pulls of 32 units, RocketMQ's pull size;
* ``get-message-32``: ``get_message`` pulls of 32 :class:`MessageExt` objects;
* ``query-by-key``: ``query_by_key`` of one present 20-character key (index walk + record check);
* ``index-put-dispatch``: one dispatch catch-up carrying 10k records (two index keys each: the
  UNIQ_KEY and KEYS) into the ConsumeQueue and the index files.

``extra_info["items/s"]`` holds messages (or keys) per second at the fastest round. The store is
built once per module and implementation (tmp_path_factory), warm in the page cache.
"""

import random

import pytest
from conftest import BODY, TOPIC, rate

from rocketstore import MessageStore

MESSAGES = 20_000
QUEUES = 1
OPTIONS = dict(commitlog_file_size=64 << 20, index_slots=100_000, index_count=400_000)


def _keys(n, start=0):
    return [f"order-{i:014d}" for i in range(start, start + n)]  # 20 characters


def _open(path, impl, **options):
    return MessageStore(path, implementation=impl, **dict(OPTIONS, **options))


@pytest.fixture(scope="module")
def queued(tmp_path_factory):
    """impl -> a store holding MESSAGES keyed messages in one queue, dispatched; closed at the end."""
    stores = {}

    def get(impl):
        if impl not in stores:
            store = _open(tmp_path_factory.mktemp(f"queued-{impl}") / "store", impl)
            store.create_topic(TOPIC, QUEUES)
            put = store.put
            for key in _keys(MESSAGES):
                put(TOPIC, BODY, tags="TagA", keys=key)
            store._opened.dispatcher.catch_up()
            stores[impl] = store
        return stores[impl]

    yield get
    for store in stores.values():
        store.close()


def test_cq_read_units(benchmark, impl, queued):
    store = queued(impl)
    benchmark.group = "cq-read-units"

    def read_all():
        offset = total = 0
        while True:
            view = store.queue_units(TOPIC, 0, offset, 1 << 20)
            if not len(view):
                return total
            total += len(view)
            offset += len(view)

    total = benchmark.pedantic(read_all, rounds=50, iterations=1, warmup_rounds=2)
    assert total == MESSAGES
    rate(benchmark, MESSAGES)


def test_cq_get_units_32(benchmark, impl, queued):
    store = queued(impl)
    benchmark.group = "cq-get-units-32"

    def pull_all():
        offset = total = 0
        while offset < MESSAGES:
            r = store.get_units(TOPIC, 0, offset, 32)
            total += len(r.units)
            offset = r.next_begin_offset
        return total

    total = benchmark.pedantic(pull_all, rounds=10 if impl == "c" else 3, iterations=1, warmup_rounds=1)
    assert total == MESSAGES
    rate(benchmark, MESSAGES)


def test_get_message_32(benchmark, impl, queued):
    store = queued(impl)
    benchmark.group = "get-message-32"
    count = 5_000

    def pull():
        offset = total = 0
        while offset < count:
            r = store.get_message("bench", TOPIC, 0, offset, 32)
            total += len(r.messages)
            offset = r.next_begin_offset
        return total

    total = benchmark.pedantic(pull, rounds=10 if impl == "c" else 3, iterations=1, warmup_rounds=1)
    assert total >= count
    rate(benchmark, total)


def test_query_by_key(benchmark, impl, queued):
    store = queued(impl)
    rng = random.Random(7)
    keys = [f"order-{rng.randrange(MESSAGES):014d}" for _ in range(2_000)]
    benchmark.group = "query-by-key"

    def lookup_all():
        found = 0
        query = store.query_by_key
        for key in keys:
            found += len(query(TOPIC, key, 1))
        return found

    found = benchmark.pedantic(lookup_all, rounds=10 if impl == "c" else 3, iterations=1, warmup_rounds=1)
    assert found == len(keys)
    rate(benchmark, len(keys))


def test_index_put_by_dispatch(benchmark, impl, tmp_path):
    # Each round puts 10k fresh keyed messages with the dispatcher off (setup, untimed), then
    # times the one catch-up that writes their ConsumeQueue units and 20k index entries.
    store = _open(tmp_path / "store", impl, dispatch_interval_ms=0)
    store.create_topic(TOPIC, QUEUES)
    batch = 10_000
    start = [0]
    benchmark.group = "index-put-dispatch"

    def setup():
        put = store.put
        for key in _keys(batch, start[0]):
            put(TOPIC, BODY, tags="TagA", keys=key)
        start[0] += batch
        return (), {}

    try:
        benchmark.pedantic(
            store._opened.dispatcher.catch_up, setup=setup, rounds=5 if impl == "c" else 3, iterations=1
        )
        assert len(store.query_by_key(TOPIC, _keys(1, start[0] - 1)[0], 1)) == 1
    finally:
        store.close()
    rate(benchmark, batch)
