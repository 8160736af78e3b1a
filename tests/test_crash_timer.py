"""The timer crash test (tests/crash_timer.py) in short: a few kill -9 iterations per
implementation, several kills per store, many of them inside a delivery pass. The script runs
the long version: ``python tests/crash_timer.py --iterations 100``."""

import pathlib

import crash_timer

import rocketstore

SRC = str(pathlib.Path(rocketstore.__file__).resolve().parents[1])


def test_kill_during_timer_delivery_loses_and_repeats_nothing(tmp_path, impl, rng):
    timed = 0
    for i in range(2):
        workdir = tmp_path / str(i)
        workdir.mkdir()
        counts = crash_timer.one_iteration(str(workdir), impl.name, rng, src=SRC, rounds=2)
        timed += counts["timed"]
    assert timed > 0  # the checks ran against timer messages
