"""Shared fixtures of the micro-benchmarks: both implementations side by side, tmp_path stores.

    pip install ".[bench]" && python -m pytest bench --benchmark-only --benchmark-group-by=group

``pytest bench`` collects ``bench_*.py`` here (the project's ``python_files`` is for ``tests/``).
Every store benchmark runs once per implementation (ids ``c`` / ``py``) and names its group after
the operation, so grouping by group prints the twins one under the other: ``bench_crc32.py``
(64 B … 1 MiB), ``bench_engine.py`` (encode/decode of one record and of 10k, single, batch and
durable puts, reads by offset and msgId), ``bench_queues.py`` (ConsumeQueue reads, get_message,
query_by_key, index put by dispatch), ``bench_index.py`` (IndexFile put and select) and
``bench_recovery.py`` (recovery scan, verify). bench/README.md lists the groups.

They measure the installed rocketstore (``src/`` is never put on ``sys.path``; without an install
the run stops saying so); the report header names the build, compiled or pure Python, and the
CRC-32 path. The compiled ``[c]`` twin is benchmarked only where the installed build has it.
"""

import buildinfo
import pytest

buildinfo.require("bench/conftest.py")

from rocketstore import MessageStore, _impl  # noqa: E402

SEGMENT_SIZE = 64 << 20
BODY = bytes(range(128))
TOPIC = "BenchTopic"

IMPLEMENTATIONS = ["c", "py"] if _impl.COMPILED is not None else ["py"]


def pytest_report_header(config):
    return [buildinfo.header(), "benchmarked twins: " + ", ".join(f"[{i}]" for i in IMPLEMENTATIONS)]


def pytest_collect_file(file_path, parent):
    # Files named on the command line are collected by pytest itself; collecting them here too
    # would run each benchmark twice.
    if (
        file_path.suffix == ".py"
        and file_path.name.startswith("bench_")
        and not parent.session.isinitpath(file_path)
    ):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


@pytest.fixture(params=IMPLEMENTATIONS)
def impl(request):
    """The implementation name, ``"c"`` or ``"py"``."""
    return request.param


@pytest.fixture
def store(impl, tmp_path):
    """An ASYNC_FLUSH store of 64 MiB segments pinned to ``impl``; closed after the benchmark."""
    s = MessageStore(
        tmp_path / "store", implementation=impl, commitlog_file_size=SEGMENT_SIZE, prefault_bytes=8 << 20
    )
    s.put(TOPIC, BODY)  # creates the topic (a topics.json write and fsync) outside the timing
    yield s
    s.close()


def run(benchmark, impl, fn, *args, py_rounds=20, py_iterations=1, **kwargs):
    """Time ``fn``: calibrated for the compiled twin, ``py_rounds`` bounded rounds for the pure one.

    The pure twin is 10-100x slower; left to calibrate, it would take most of the time budget.
    """
    if impl == "py":
        return benchmark.pedantic(
            fn, args=args, kwargs=kwargs, rounds=py_rounds, iterations=py_iterations, warmup_rounds=1
        )
    return benchmark(fn, *args, **kwargs)


def rate(benchmark, items):
    """Record ``items``/s at the fastest round in ``extra_info`` (shown in ``--benchmark-json``).

    Under ``--benchmark-disable`` (each benchmark run once, as a smoke test) there are no stats."""
    if benchmark.stats is None:
        return
    benchmark.extra_info["items"] = items
    benchmark.extra_info["items/s"] = round(items / benchmark.stats.stats.min)
