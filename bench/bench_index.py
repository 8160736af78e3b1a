"""IndexFile put and select rates, compiled beside pure, on a 500k-slot / 2M-item file (42 MB).

    python -m pytest bench/bench_index.py --benchmark-only --benchmark-group-by=group

Groups ``index-put`` (put_key one by one, and put_keys two keys per record as the store does for
UNIQ_KEY + KEYS) and ``index-select`` (select of a key that is present, into a file holding 1M
keys: about two items per slot chain). ``extra_info["items/s"]`` holds keys/s at the fastest round.
The store's goal for the compiled path is >= 1M key lookups/s.
"""

import random

import pytest
from conftest import rate

from rocketstore import _impl

SLOTS = 500_000
ITEMS = 2_000_000
FILLED = 1_000_000
T0 = 1_700_000_000_000
TOPIC = "BenchTopic"

# keys per timed round: the pure twin is ~20-50x slower
PUT_KEYS = {"c": 200_000, "py": 20_000}
SELECT_KEYS = {"c": 200_000, "py": 20_000}


def _keys(n, start=0):
    return [f"{TOPIC}#ORDER-{i:010d}" for i in range(start, start + n)]


def _fresh(index):
    buf = bytearray(index.index_file_size(SLOTS, ITEMS))
    return index.IndexFile(buf, SLOTS, ITEMS)


def _rounds(benchmark, fn, setup, rounds):
    return benchmark.pedantic(fn, setup=setup, rounds=rounds, iterations=1, warmup_rounds=0)


@pytest.fixture(scope="module")
def filled_buffer():
    """A file holding FILLED keys, one record per second; built once, by the fastest twin."""
    index = (_impl.COMPILED or _impl.PURE).index
    buf = bytearray(index.index_file_size(SLOTS, ITEMS))
    f = index.IndexFile(buf, SLOTS, ITEMS)
    for i, key in enumerate(_keys(FILLED)):
        f.put_key(key, i * 200, T0 + i)
    f.release()
    return buf


def test_put_key(benchmark, impl):
    index = _impl.get(impl).index
    keys = _keys(PUT_KEYS[impl])
    benchmark.group = "index-put"

    def setup():
        return (_fresh(index),), {}

    def put_all(f):
        put = f.put_key
        for i, key in enumerate(keys):
            put(key, i, T0)
        return f

    f = _rounds(benchmark, put_all, setup, 5)
    assert f.index_count == len(keys) + 1
    rate(benchmark, len(keys))


def test_put_keys_two_per_record(benchmark, impl):
    index = _impl.get(impl).index
    keys = _keys(PUT_KEYS[impl])
    records = [keys[i : i + 2] for i in range(0, len(keys), 2)]
    benchmark.group = "index-put"

    def setup():
        return (_fresh(index),), {}

    def put_all(f):
        put_keys = f.put_keys
        for i, pair in enumerate(records):
            put_keys(pair, i, T0)
        return f

    f = _rounds(benchmark, put_all, setup, 5)
    assert f.index_count == len(keys) + 1
    rate(benchmark, len(keys))


def test_select_present_key(benchmark, impl, filled_buffer):
    index = _impl.get(impl).index
    f = index.IndexFile(filled_buffer, SLOTS, ITEMS)
    rng = random.Random(1)
    picks = [rng.randrange(FILLED) for _ in range(SELECT_KEYS[impl])]
    keys = [_keys(1, i)[0] for i in picks]
    benchmark.group = "index-select"

    def select_all():
        select = f.select
        found = 0
        for key in keys:
            found += len(select(key, 32, 0, 1 << 62))
        return found

    found = benchmark.pedantic(select_all, rounds=5, iterations=1, warmup_rounds=1)
    assert found >= len(keys)
    f.release()
    rate(benchmark, len(keys))


def test_compiled_index_is_loaded():
    if _impl.REQUIRE_EXTENSIONS:
        assert _impl.COMPILED.index.__file__.endswith((".so", ".pyd"))
