"""The POP crash test (tests/crash_pop.py) in short: a process receiving and acknowledging is
SIGKILLed a few times per store, on both twins; nothing un-acknowledged is lost, nothing
acknowledged comes back. The script runs the long version: ``python tests/crash_pop.py``."""

import pathlib

import crash_pop
import pytest

import rocketstore

SRC = str(pathlib.Path(rocketstore.__file__).resolve().parents[1])


@pytest.mark.slow
def test_kill_between_receive_and_ack_loses_nothing_and_repeats_no_ack(tmp_path, impl, rng):
    totals = {"messages": 0, "acked_by_children": 0, "came_back": 0}
    for i in range(2):
        workdir = tmp_path / str(i)
        workdir.mkdir()
        counts = crash_pop.one_iteration(str(workdir), impl.name, rng, src=SRC, rounds=2)
        for k in totals:
            totals[k] += counts[k]
    print(totals)
    assert totals["acked_by_children"] > 0 and totals["came_back"] > 0  # both sides were exercised
