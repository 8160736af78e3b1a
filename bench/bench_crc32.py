"""CRC-32 throughput: the compiled module (and each of its C paths) beside the pure twin (zlib).

    python -m pytest bench/bench_crc32.py --benchmark-only --benchmark-group-by=group

Each size is one group. ``c`` is ``rocketstore.format._crc32.crc32`` on the path it picked for this CPU;
``c-path-*`` force one C path (through the slower-to-call test helper, which shows at 64 B);
``extra_info["GB/s"]`` in ``--benchmark-json`` output holds the throughput at the fastest round.
"""

import random

import pytest

import rocketstore.format._crc32_py as pure

try:
    import rocketstore.format._crc32 as compiled
except ImportError:  # pragma: no cover - depends on the build
    compiled = None

SIZES = {"64B": 64, "1KiB": 1024, "64KiB": 64 * 1024, "1MiB": 1024 * 1024}
PATHS = ("table", "pclmulqdq", "vpclmulqdq-avx512")


def _candidates():
    """name -> (function, extra positional arguments after the data)."""
    yield "py-zlib", (pure.crc32, ())
    if compiled is None:
        return
    yield "c", (compiled.crc32, ())
    for path in PATHS:
        try:
            compiled._crc32_with(b"", path)
        except ValueError:
            continue
        yield f"c-path-{path}", (compiled._crc32_with, (path,))


CANDIDATES = dict(_candidates())


# A 64-byte checksum takes tens of nanoseconds: make every round long enough to time reliably.
@pytest.mark.benchmark(min_time=0.0001, warmup=True)
@pytest.mark.parametrize("size", SIZES, ids=list(SIZES))
@pytest.mark.parametrize("name", CANDIDATES)
def test_crc32_throughput(benchmark, name, size):
    fn, args = CANDIDATES[name]
    data = random.Random(1).randbytes(SIZES[size])
    benchmark.group = f"crc32-{size}"
    benchmark.extra_info["bytes"] = len(data)
    result = benchmark(fn, data, *args)
    assert result == pure.crc32(data)
    if benchmark.stats is not None:  # None under --benchmark-disable
        benchmark.extra_info["GB/s"] = round(len(data) / benchmark.stats.stats.min / 1e9, 2)


@pytest.mark.skipif(compiled is None, reason="rocketstore.format._crc32 is not built")
def test_compiled_module_is_loaded():
    assert compiled.IMPLEMENTATION in PATHS
