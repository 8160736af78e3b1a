"""The command line's reported mistakes, each with the test that showed it: a clean store's
``recover`` that claimed to dispatch a record, ``quickstart --json`` printing text, the same
``--json`` help on every command, a one-character progress bar on a terminal reporting 0 columns,
an interrupted command's exit status, and a quickstart that left a gigabyte behind."""

import json
import signal
import subprocess
import time

import pytest
from test_cli import COMMAND, _env, _run_on_terminal

import rocketstore
from rocketstore import MessageStore


@pytest.fixture
def run(tmp_path):
    """``run(*args, check=None)``: the CLI's CompletedProcess (text stdout and stderr)."""

    def run(*args, check=None):
        proc = subprocess.run(
            COMMAND + [str(a) for a in args],
            capture_output=True,
            text=True,
            env=_env(tmp_path),
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
        if check is not None:
            assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
        return proc

    return run


SMALL = dict(commitlog_file_size=256 * 1024, consume_queue_units=1024, index_slots=4096, index_count=16384)


@pytest.fixture
def small_store(tmp_path):
    path = tmp_path / "s"
    with MessageStore(path, **SMALL) as store:
        for i in range(20):
            store.put("T", b"m%d" % i, keys=f"k{i}")
    return path


def test_recover_on_a_clean_store_dispatches_nothing(run, small_store):
    out = json.loads(run("--store", small_store, "--json", "recover", check=0).stdout)
    assert out["last_shutdown_clean"] and out["messages"] == 20
    assert out["dispatched_records"] == 0 and out["dispatched_bytes"] == 0
    # the index still answers for the last record, which the open no longer re-dispatches
    with MessageStore(small_store, read_only=True) as store:
        assert [bytes(m.body) for m in store.query_by_key("T", "k19")] == [b"m19"]


def test_quickstart_json_prints_one_object_and_cleanup_removes_the_store_it_made(run, tmp_path):
    path = tmp_path / "qs"
    proc = run(
        "--store", path, "--json", "quickstart", "--count", 500, "--body-size", 8, "--cleanup", check=0
    )
    report = json.loads(proc.stdout)  # one object, nothing else on stdout
    assert report["messages_written"] == 3 * 500 + 50 and report["removed"] is True
    assert [s["step"] for s in report["steps"]][:2] == ["put, one per call", "put, tags + keys"]
    assert all(s["count"] > 0 for s in report["steps"])
    assert not path.exists()


def test_quickstart_says_what_it_left_and_keeps_a_store_it_did_not_create(run, small_store):
    proc = run("--store", small_store, "quickstart", "--count", 300, "--body-size", 8, "--cleanup", check=0)
    last = proc.stdout.splitlines()[-1]
    assert last.startswith("wrote 930 messages") and "on disk in" in last and "rm -rf" not in last
    assert (small_store / "commitlog").is_dir()  # not ours: --cleanup leaves it


def test_quickstart_default_is_light():
    from rocketstore.cli._quickstart import DEFAULT_COUNT

    assert DEFAULT_COUNT * 3.1 * 300 < 128 << 20  # ~85 MB of records (~270 B each), not a gigabyte


def test_json_help_says_what_each_command_prints(run):
    assert "one object per message" in run("dump", "--help", check=0).stdout
    stats = run("stats", "--help", check=0).stdout
    assert "one JSON object" in stats and "per message" not in stats


def test_progress_bar_on_a_terminal_of_zero_columns_is_a_whole_bar(small_store, tmp_path):
    status, stdout, screen = _run_on_terminal(["--store", small_store, "verify"], tmp_path, columns=0)
    assert status == 0, (stdout, screen)
    frames = [f.decode().replace("\x1b[K", "").replace("\x1b[2K", "") for f in screen.split(b"\r")]
    drawn = [f for f in frames if f.startswith("verify")]
    assert drawn and all(len(f) > 40 for f in drawn), frames


def test_an_interrupted_command_exits_130(tmp_path):
    proc = subprocess.Popen(
        COMMAND + ["--store", str(tmp_path / "big"), "quickstart", "--count", "5000000"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(tmp_path),
        # SIGINT as a terminal delivers it, even when this run inherited it ignored (a job a
        # non-interactive shell started with &): Python then installs no KeyboardInterrupt
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 60
    while not (tmp_path / "big" / "commitlog").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out, err)
    assert err.decode().strip().endswith("rocketstore: error: interrupted"), err
    with MessageStore(tmp_path / "big", read_only=True) as store:  # closed cleanly on the way out
        assert store.last_shutdown_clean
    assert rocketstore.__version__
