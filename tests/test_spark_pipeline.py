"""examples/spark_streaming_pipeline.py end to end: its driver killed mid-run, then restarted
from its checkpoints, writes each minute once to the store and once to Parquet (marker ``spark``)."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import require_spark

require_spark()  # skip this module without pyspark/pyarrow/Java (fail under .ci/run)

from rocketstore.store import MessageStore  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.slow]  # two JVMs; CI runs them (.ci/run)

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "spark_streaming_pipeline.py"
ORDERS = 3000  # 50 minutes of event time, one order a second
PER_TRIGGER = 400  # 8 micro-batches with data, then the one that closes the last minutes


def _example():
    spec = importlib.util.spec_from_file_location("spark_streaming_pipeline", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _expected(example) -> dict:
    """{minute as the sink writes it: (orders, amount)}, from the demo's own rule."""
    minutes: dict = {}
    for i in range(ORDERS):
        ms = example.DEMO_START_MS + i * 1000
        minute = time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime(ms // 60000 * 60))
        count, amount = minutes.get(minute, (0, 0.0))
        minutes[minute] = (count + 1, amount + (i * 37) % 1000 / 10)
    return {m: (c, round(a, 2)) for m, (c, a) in minutes.items()}


def _stored_minutes(stats_path) -> list:
    with MessageStore(stats_path, read_only=True) as store:
        lo, hi = store.queues().get(("RevenuePerMinute", 0), (0, 0))  # absent until a first append
        rows, offset = [], lo
        while offset < hi:
            result = store.get_message("check", "RevenuePerMinute", 0, offset, 64)
            for m in result.messages:
                row = json.loads(bytes(m.body))
                assert m.keys == row["minute"]
                rows.append(row)
            offset = result.next_begin_offset
    return rows


def _commits(work, query) -> int:
    try:
        return len([n for n in os.listdir(work / "checkpoints" / query / "commits") if n.isdigit()])
    except FileNotFoundError:
        return 0


def _why(stderr: str) -> str:
    """What a failed Spark job printed that says why: the first Python traceback or Java cause,
    and the end (the end alone is the query's plan and a stack of the task's frames)."""
    starts = [
        i for i in (stderr.find("Traceback (most recent call last)"), stderr.find("Caused by")) if i >= 0
    ]
    first = stderr[min(starts) : min(starts) + 4000] if starts else ""
    return f"{first}\n...\n{stderr[-2000:]}"


def test_spark_streaming_pipeline_resumes_after_the_driver_is_killed(spark, tmp_path):
    example = _example()
    work = tmp_path / "work"
    work.mkdir()
    example.make_demo_store(str(work / "orders"), ORDERS)
    command = [sys.executable, str(EXAMPLE), str(work), "--max-per-trigger", str(PER_TRIGGER)]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}

    # Run 1: kill the driver (and the JVM it started: its process group) once both queries have
    # committed a batch and while they still have batches to go.
    first = subprocess.Popen(
        command, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 600
        while min(_commits(work, "store"), _commits(work, "parquet")) < 2:
            assert first.poll() is None, (
                f"the job ended before it was killed: {first.stderr.read()[-2000:]!r}"
            )
            assert time.monotonic() < deadline, "no micro-batch committed in 10 minutes"
            time.sleep(0.1)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(60)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(60)
        first.stderr.close()
    expected = _expected(example)
    stored_before = _stored_minutes(work / "stats")
    assert len(stored_before) < len(expected), "the kill came after the whole job: nothing to resume"
    assert _commits(work, "store") < 9 and _commits(work, "parquet") < 9

    # Run 2: the same command resumes both queries from their checkpoints and finishes.
    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, _why(second.stderr)

    stored = _stored_minutes(work / "stats")
    assert stored[: len(stored_before)] == stored_before  # the restart appended after them
    minutes = [r["minute"] for r in stored]
    assert len(minutes) == len(set(minutes)) == len(expected)  # each minute exactly once
    assert {r["minute"]: (r["orders"], r["amount"]) for r in stored} == expected

    from pyspark.sql import functions as F

    parquet = (
        spark.read.parquet(str(work / "stats.parquet"))  # Spark's read skips files _spark_metadata lacks
        .select(F.date_format("minute", "yyyy-MM-dd'T'HH:mm'Z'").alias("minute"), "orders", "amount")
        .collect()
    )
    got = sorted((r.minute, r.orders, r.amount) for r in parquet)
    assert got == sorted((m, c, a) for m, (c, a) in expected.items())
