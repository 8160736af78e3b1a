"""The crash harness (tests/crash_harness.py) in short: a few kill -9 and power-cut iterations
per implementation, several crashes per store. The script runs the long versions:
``python tests/crash_harness.py --iterations 1000`` and ``... --iterations 200 --power-loss``."""

import os
import pathlib

import crash_harness
import pytest

import rocketstore

SRC = str(pathlib.Path(rocketstore.__file__).resolve().parents[1])


@pytest.fixture(params=[400, 50], ids=["cq400", "cq50"])
def queue_units(request, monkeypatch):
    """ConsumeQueue files of 400 and of 50 units: with 50 a queue grows by several files between
    two checkpoints, which is where a power cut used to leave holes and stale units."""
    monkeypatch.setenv("ROCKETSTORE_HARNESS_CQ_UNITS", str(request.param))
    monkeypatch.setattr(crash_harness, "CQ_UNITS", request.param)
    monkeypatch.setitem(crash_harness.STORE_OPTIONS, "consume_queue_units", request.param)
    return request.param


@pytest.mark.slow  # 3 crash iterations per case; the two tests below cover the harness fast
@pytest.mark.parametrize("power_loss", [False, True], ids=["kill", "power-loss"])
def test_crashes_keep_every_promise(tmp_path, impl, power_loss, queue_units, rng):
    total = 0
    for i in range(3):
        workdir = tmp_path / str(i)
        workdir.mkdir()
        counts = crash_harness.one_iteration(
            str(workdir), impl.name, rng, power_loss=power_loss, src=SRC, rounds=2
        )
        total += counts["acknowledged"]
    assert total > 0  # the checks ran against acknowledged puts


def test_the_power_cut_simulation_damages_what_was_not_durable(tmp_path, impl, rng):
    """The simulation must really destroy the unflushed tail, or the test above proves nothing.
    A child killed before it made its first segment (a loaded machine: the kill right after
    READY) leaves nothing to damage: such a round is run again, a few times at most."""
    for attempt in range(5):
        path = str(tmp_path / f"store{attempt}")
        acked, flushed = crash_harness.run_and_kill(path, impl.name, rng, SRC)
        damaged = crash_harness.simulate_power_loss(path, flushed, rng)
        commitlog = os.path.join(path, "commitlog")
        if damaged["commitlog"] >= 1 or (os.path.isdir(commitlog) and os.listdir(commitlog)):
            break
    assert damaged["commitlog"] >= 1


def test_a_round_killed_before_it_printed_keeps_what_earlier_rounds_flushed(tmp_path, impl, rng):
    """Seed 2840997190 (c, power-loss) lost an acknowledged put at 722887: a second round killed
    right after READY printed no line, so its power cut kept only what the checkpoint vouched
    for, and the checkpoint (written every 20 ms, later under load) was older than the first
    round's last acknowledged puts. Here deterministically: round 1 runs long enough to
    acknowledge puts, its checkpoint is set back to before them (a checkpoint that lagged),
    round 2 is killed before the parent heard anything from it."""
    from rocketstore.files.checkpoint import Checkpoint

    runs = []

    def run(path, implementation, rng, src, log=None):
        if not runs:  # round 1: acknowledged puts, the checkpoint behind some of them
            acked, flushed = crash_harness.run_and_kill(
                path, implementation, rng, src, delays=(0.4,), jitter=0.0, log=log
            )
            assert acked, "round 1 acknowledged nothing"
            cp = Checkpoint(str(pathlib.Path(path) / "checkpoint"))
            earlier = [a.offset for a in acked if a.offset <= cp.confirm_phy_offset]
            if earlier:  # an earlier checkpoint: a record start the last one passed
                cp.confirm_phy_offset = min(earlier)
                cp.flush()
            assert any(a.offset + a.size > cp.confirm_phy_offset for a in acked)
        else:  # round 2: killed right after READY, the parent heard nothing
            crash_harness.run_and_kill(path, implementation, rng, src, delays=(0.0,), jitter=0.0, log=log)
            acked, flushed = [], 0
        runs.append(len(acked))
        return acked, flushed

    counts = crash_harness.one_iteration(
        str(tmp_path), impl.name, rng, power_loss=True, src=SRC, rounds=2, run=run
    )
    assert runs[0] > 0 and counts["acknowledged"] == runs[0]


@pytest.mark.parametrize("style", ["garbage", "torn", "short"])
def test_a_power_cut_that_damaged_the_runtime_files_leaves_a_store_that_opens(
    tmp_path, impl, rng, style, monkeypatch
):
    """After the cut the live page is garbage, torn or short and a stale shared append table
    with its lock held lies beside it: the read-only checker, the next writer (round 2's child)
    and the checks all open the store, and nothing acknowledged is lost."""
    real = crash_harness.damage_runtime_files
    monkeypatch.setattr(
        crash_harness, "damage_runtime_files", lambda path, rng: real(path, rng, style, "locked")
    )
    counts = crash_harness.one_iteration(str(tmp_path), impl.name, rng, power_loss=True, src=SRC, rounds=2)
    assert counts["damaged_files"] >= 1
