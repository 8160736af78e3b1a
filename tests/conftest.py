"""Shared fixtures: every twin-aware test runs against the compiled (``c``) and pure (``py``) twins."""

import os
import pathlib
import random

import pytest

from rocketstore import _impl
from rocketstore.base._clock import now_ms

#: A store written by Apache RocketMQ 4.x itself (tests/data/README.md says where it comes from).
JAVA_STORE = pathlib.Path(__file__).resolve().parent / "data" / "rocketmq-4.x-store"


def pytest_addoption(parser):
    parser.addoption(
        "--default-impl-only",
        action="store_true",
        help="run only the tests that use the default implementation, not those "
        "parametrized by twin ([c]/[py]): .ci/run's second pass, under "
        "ROCKETSTORE_NO_EXTENSIONS=1, where the [py] items would repeat the first pass's",
    )


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--default-impl-only"):
        return
    keep, drop = [], []
    for item in items:
        twin = getattr(item, "callspec", None) is not None and "impl" in item.callspec.params
        (drop if twin else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture
def rng(request):
    """A ``random.Random`` seeded at random, its seed printed (shown with a failure's output) and
    recorded in the test report; ``ROCKETSTORE_TEST_SEED=<n>`` replays a run."""
    seed = int(os.environ.get("ROCKETSTORE_TEST_SEED") or random.randrange(2**32))
    print(f"seed={seed} (replay with ROCKETSTORE_TEST_SEED={seed})")
    request.node.user_properties.append(("seed", seed))
    return random.Random(seed)


@pytest.fixture(params=["c", "py"])
def impl(request):
    """The implementation under test: a bundle of twin modules (``impl.crc32``, ``impl.codec``, ...)."""
    if request.param == "c" and _impl.COMPILED is None:
        if _impl.REQUIRE_EXTENSIONS:
            pytest.fail(f"compiled modules required but missing: {_impl.IMPORT_ERROR}")
        pytest.skip(
            "compiled modules not built" if not _impl.NO_EXTENSIONS else "ROCKETSTORE_NO_EXTENSIONS=1"
        )
    return _impl.get(request.param)


@pytest.fixture
def java_store():
    """The store directory written by Java RocketMQ 4.x (read-only: copy it before a writable open)."""
    assert (JAVA_STORE / "commitlog" / "00000000000000000000").is_file(), f"{JAVA_STORE} is missing"
    return JAVA_STORE


def require_spark() -> None:
    """Skip the caller (a test, or a whole module at import) when pyspark, pyarrow or Java is
    missing; under ROCKETSTORE_REQUIRE_SPARK=1 (set by .ci/run) fail instead, so CI cannot pass
    with the Spark tests silently skipped."""
    import importlib.util
    import shutil

    missing = [name for name in ("pyspark", "pyarrow") if importlib.util.find_spec(name) is None]
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        missing.append("Java (17 or 21) on PATH or JAVA_HOME")
    if not missing:
        return
    why = "the Spark tests need " + ", ".join(missing) + " (pip install '.[spark]' in a clone)"
    if os.environ.get("ROCKETSTORE_REQUIRE_SPARK") == "1":
        pytest.fail(why + "; ROCKETSTORE_REQUIRE_SPARK=1 forbids skipping them", pytrace=False)
    pytest.skip(why, allow_module_level=True)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One local[2] SparkSession for the whole run (a JVM start costs ~10 s on 2 cores), with the
    rocketstore format registered."""
    import sys

    require_spark()
    import pyspark.sql as pyspark_sql

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers: this interpreter
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    tmp = tmp_path_factory.mktemp("spark")
    session = (
        pyspark_sql.SparkSession.builder.master("local[2]")
        .appName("rocketstore-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "512m")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.local.dir", str(tmp / "local"))
        .config("spark.sql.warehouse.dir", str(tmp / "warehouse"))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    from rocketstore.spark import register

    register(session)
    yield session
    session.stop()


#: RocketMQ's messageDelayLevel default, "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
#: written out here rather than imported, so the tests check the store's copy against it.
ROCKETMQ_DELAY_LEVELS_MS = [
    1000, 5000, 10000, 30000, 60000, 120000, 180000, 240000, 300000,
    360000, 420000, 480000, 540000, 600000, 1200000, 1800000, 3600000, 7200000,
]  # fmt: skip


class FakeClock:
    """Epoch ms that only move when a test says so (starts at the real time)."""

    def __init__(self):
        self.now = now_ms()

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock():
    """A :class:`FakeClock` for the store's ``clock`` option (delay levels, timers, POP)."""
    return FakeClock()
