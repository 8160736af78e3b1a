"""The BatchCQ writing crash test (tests/crash_batchcq.py) in short: a few kill -9 iterations per
implementation, several kills per store, while writers put inner batches and single messages into
a BatchCQ topic. The script runs the long version: ``python tests/crash_batchcq.py --iterations 200``."""

import pathlib

import crash_batchcq

import rocketstore

SRC = str(pathlib.Path(rocketstore.__file__).resolve().parents[1])


def test_kill_while_writing_batches_loses_no_acknowledged_message_and_hands_out_no_wrong_one(
    tmp_path, impl, rng
):
    messages = acknowledged = 0
    for i in range(2):
        workdir = tmp_path / str(i)
        workdir.mkdir()
        counts = crash_batchcq.one_iteration(str(workdir), impl.name, rng, src=SRC, rounds=2)
        messages += counts["messages"]
        acknowledged += counts["acknowledged"]
    assert messages > 0 and acknowledged > 0  # the checks ran against written batches
