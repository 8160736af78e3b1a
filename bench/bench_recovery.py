"""Recovery scan and verify micro-benchmarks, compiled beside pure, on a 100k-message store.

    python -m pytest bench/bench_recovery.py --benchmark-only --benchmark-group-by=group

* ``recovery-scan``: ``MessageStore(path)`` of a closed store (a CRC scan of the whole CommitLog);
* ``verify``: ``store.verify()`` (every record's structure and CRC, every ConsumeQueue unit).

Both read a page-cache-warm CommitLog of 100k 128-byte messages (about 26 MiB);
``extra_info["GB/s"]`` holds CommitLog bytes per second at the fastest round. For GB/s on a 1 GiB
store beside raw read and ``zlib.crc32``, run ``python bench/recovery.py``.
"""

import numpy as np
import pytest
from conftest import BODY, TOPIC

from rocketstore import MessageStore

MESSAGES = 100_000
OPTIONS = dict(commitlog_file_size=64 << 20, index_slots=100_000, index_count=400_000)


@pytest.fixture(scope="module")
def closed_store(tmp_path_factory):
    """(path, CommitLog bytes) of a closed store of MESSAGES messages, written by the fastest twin."""
    path = tmp_path_factory.mktemp("recovery") / "store"
    with MessageStore(path, **OPTIONS) as store:
        lengths = np.full(10_000, len(BODY), dtype=np.int32)
        for _ in range(MESSAGES // 10_000):
            store.put_batch(TOPIC, BODY * 10_000, lengths=lengths)
        size = store.max_offset - store.min_offset
    return path, size


def _gbps(benchmark, size):
    benchmark.extra_info["bytes"] = size
    if benchmark.stats is None:  # --benchmark-disable
        return
    benchmark.extra_info["GB/s"] = round(size / benchmark.stats.stats.min / 1e9, 3)


def test_recovery_scan(benchmark, impl, closed_store):
    path, size = closed_store
    benchmark.group = "recovery-scan"
    opened = []

    def setup():
        while opened:
            opened.pop().close()
        return (), {}

    def reopen():
        opened.append(MessageStore(path, implementation=impl, **OPTIONS))

    benchmark.pedantic(reopen, setup=setup, rounds=5 if impl == "c" else 2, iterations=1, warmup_rounds=1)
    store = opened.pop()
    try:
        assert store.max_offset - store.min_offset == size
    finally:
        store.close()
    _gbps(benchmark, size)


def test_verify(benchmark, impl, closed_store):
    path, size = closed_store
    benchmark.group = "verify"
    with MessageStore(path, implementation=impl, read_only=True, **OPTIONS) as store:
        result = benchmark.pedantic(
            store.verify, rounds=5 if impl == "c" else 2, iterations=1, warmup_rounds=1
        )
    assert result["ok"] and result["records"] == MESSAGES
    _gbps(benchmark, size)
