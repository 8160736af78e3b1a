"""Engine micro-benchmarks: the compiled twin (``c``) beside the pure one (``py``), per operation.

    python -m pytest bench/bench_engine.py --benchmark-only --benchmark-group-by=group

One group per operation (``encode-record``, ``put-batch-10k-list``, ...), each holding ``[c]`` and
``[py]``. ``extra_info["items/s"]`` in ``--benchmark-json`` output holds the rate at the fastest
round. Stores are tmp_path stores of 64 MiB segments; the pure twin runs bounded rounds
(``benchmark.pedantic``) so the whole directory stays within a few minutes on two cores. For
sustained rates at 1M messages, durable group commit and the machine's own baselines, run
``python bench/engine.py``.
"""

import numpy as np
import pytest
from conftest import BODY, TOPIC, rate, run

from rocketstore import _impl

BATCH = 10_000
RECORD_ARGS = dict(
    topic=TOPIC,
    body=BODY,
    properties=b"TAGS\x01TagA\x02KEYS\x01order-1\x02",
    queue_id=3,
    queue_offset=42,
    physical_offset=1 << 30,
    born_timestamp=1_700_000_000_000,
    born_host=("10.0.0.1", 5555),
    store_timestamp=1_700_000_000_001,
    store_host=("10.0.0.2", 10911),
)


def _codec(impl):
    return _impl.get(impl).codec


def _records(codec, count):
    return b"".join(codec.encode_record(**dict(RECORD_ARGS, queue_offset=i)) for i in range(count))


# ---- codec ----


def test_encode_record(benchmark, impl):
    codec = _codec(impl)
    benchmark.group = "encode-record"
    record = run(benchmark, impl, codec.encode_record, py_rounds=200, py_iterations=50, **RECORD_ARGS)
    assert record == _impl.PURE.codec.encode_record(**RECORD_ARGS)
    rate(benchmark, 1)


def test_decode_record(benchmark, impl):
    codec = _codec(impl)
    buf = _records(codec, 1)
    benchmark.group = "decode-record"
    msg = run(benchmark, impl, codec.decode_record, buf, 0, py_rounds=200, py_iterations=50)
    assert bytes(msg.body) == BODY and msg.queue_offset == 0
    rate(benchmark, 1)


def test_encode_batch_10k(benchmark, impl):
    # encode_record_into one shared buffer, as the store's append does: no allocation per record
    codec = _codec(impl)
    size = len(codec.encode_record(**RECORD_ARGS))
    buf = bytearray(size * BATCH)
    encode_into = codec.encode_record_into
    benchmark.group = "encode-batch-10k"
    benchmark.extra_info["bytes"] = len(buf)

    def encode_all():
        pos = 0
        for _i in range(BATCH):
            pos += encode_into(buf, pos, **RECORD_ARGS)
        return pos

    end = run(benchmark, impl, encode_all, py_rounds=3)
    assert end == len(buf) and bytes(buf[:size]) == _impl.PURE.codec.encode_record(**RECORD_ARGS)
    rate(benchmark, BATCH)


def test_decode_batch_10k(benchmark, impl):
    codec = _codec(impl)
    buf = _records(codec, BATCH)
    benchmark.group = "decode-batch-10k"
    benchmark.extra_info["bytes"] = len(buf)
    rows, stop, reason = run(benchmark, impl, codec.decode_batch, buf, 0, len(buf), py_rounds=5)
    assert len(rows) == BATCH and stop == len(buf)
    rate(benchmark, BATCH)


# ---- puts ----


def test_put_single(benchmark, impl, store):
    # Fixed rounds of many puts each: a calibrated run times a few hundred single puts, too few
    # to include the page faults and segment rolls a sustained writer pays.
    benchmark.group = "put-single-128B"
    iterations = 1000 if impl == "c" else 100
    result = benchmark.pedantic(
        store.put, args=(TOPIC, BODY), rounds=100, iterations=iterations, warmup_rounds=1
    )
    assert result.ok
    rate(benchmark, 1)


def test_put_batch_10k_list(benchmark, impl, store):
    bodies = [BODY] * BATCH
    benchmark.group = "put-batch-10k-list"
    result = run(benchmark, impl, store.put_batch, TOPIC, bodies, py_rounds=5)
    assert len(result) == BATCH
    rate(benchmark, BATCH)


def test_put_batch_10k_buffer(benchmark, impl, store):
    buffer = BODY * BATCH
    lengths = np.full(BATCH, len(BODY), dtype=np.int32)
    benchmark.group = "put-batch-10k-buffer"
    result = run(benchmark, impl, store.put_batch, TOPIC, buffer, lengths=lengths, py_rounds=5)
    assert len(result) == BATCH
    rate(benchmark, BATCH)


def test_put_durable_one_thread(benchmark, impl, store):
    # One fdatasync per put: the disk, not the twin, sets this rate; both get the same bounded rounds.
    benchmark.group = "put-durable-1-thread"
    result = benchmark.pedantic(
        store.put, args=(TOPIC, BODY), kwargs=dict(durable=True), rounds=30, iterations=1, warmup_rounds=2
    )
    assert result.ok
    rate(benchmark, 1)


# ---- reads ----


@pytest.fixture
def filled(store):
    """``store`` holding 10k messages, with the PutResult of the one in the middle."""
    results = [store.put(TOPIC, BODY) for _ in range(BATCH)]
    return store, results[BATCH // 2]


def test_read_by_offset(benchmark, impl, filled):
    store, put = filled
    benchmark.group = "read-by-offset"
    msg = run(benchmark, impl, store.read, put.commitlog_offset, py_rounds=200, py_iterations=20)
    assert msg.msg_id == put.msg_id
    rate(benchmark, 1)


def test_get_by_msg_id(benchmark, impl, filled):
    store, put = filled
    benchmark.group = "get-by-msg-id"
    msg = run(benchmark, impl, store.get_by_msg_id, put.msg_id, py_rounds=200, py_iterations=20)
    assert bytes(msg.body) == BODY
    rate(benchmark, 1)


@pytest.mark.skipif(_impl.COMPILED is None, reason="rocketstore's compiled modules are not built")
def test_compiled_store_is_loaded():
    assert _impl.get("c").compiled and _impl.get("c").store.__name__ == "rocketstore.log._store"
