"""The delayed-delivery crash test (tests/crash_delay.py) in short: a few kill -9 iterations per
implementation, several kills per store, most of them inside a delivery pass. The script runs
the long version: ``python tests/crash_delay.py --iterations 200``."""

import pathlib

import crash_delay

import rocketstore

SRC = str(pathlib.Path(rocketstore.__file__).resolve().parents[1])


def test_kill_during_delivery_loses_and_repeats_nothing(tmp_path, impl, rng):
    scheduled = 0
    for i in range(2):
        workdir = tmp_path / str(i)
        workdir.mkdir()
        counts = crash_delay.one_iteration(str(workdir), impl.name, rng, src=SRC, rounds=2)
        scheduled += counts["scheduled"]
    assert scheduled > 0  # the checks ran against delayed messages
