"""The crash harness (tests/crash_harness.py) in short: a few kill -9 and power-cut iterations
per implementation, several crashes per store. The script runs the long versions:
``python tests/crash_harness.py --iterations 1000`` and ``... --iterations 200 --power-loss``."""

import pathlib
import random

import pytest

import rocketstore

import crash_harness

SRC = str(pathlib.Path(rocketstore.__file__).resolve().parents[1])


def seeded_rng():
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    return random.Random(seed)


@pytest.mark.parametrize("power_loss", [False, True], ids=["kill", "power-loss"])
def test_crashes_keep_every_promise(tmp_path, impl, power_loss):
    rng = seeded_rng()
    total = 0
    for i in range(3):
        workdir = tmp_path / str(i)
        workdir.mkdir()
        counts = crash_harness.one_iteration(str(workdir), impl.name, rng, power_loss=power_loss,
                                             src=SRC, rounds=2)
        total += counts["acknowledged"]
    assert total > 0      # the checks ran against acknowledged puts


def test_the_power_cut_simulation_damages_what_was_not_durable(tmp_path, impl):
    """The simulation must really destroy the unflushed tail, or the test above proves nothing."""
    rng = seeded_rng()
    path = str(tmp_path / "store")
    acked, flushed = crash_harness.run_and_kill(path, impl.name, rng, SRC)
    damaged = crash_harness.simulate_power_loss(path, flushed, rng)
    assert damaged["commitlog"] >= 1
