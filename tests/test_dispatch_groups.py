"""The dispatcher's grouping of a chunk's rows by queue (recordscan._group_rows): every row in
exactly one group, in row order, with its group's first row as representative; past
FEW_QUEUES queues the rest are grouped by sorting, with the same result."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore.log import recordscan


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=300))
def test_rows_are_grouped_by_key_in_row_order(values):
    keys = np.array(values, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    first, groups, representatives = recordscan._group_rows(keys)
    expect: dict[int, list[int]] = {}
    for row, key in enumerate(keys.tolist()):
        expect.setdefault(key, []).append(row)
    got = {int(keys[g[0]]): g.tolist() for g in groups}
    assert got == expect
    assert sorted(first.tolist()) == sorted(rows[0] for rows in expect.values())
    assert first.tolist() == [g[0] for g in groups]
    for rows in expect.values():
        assert representatives[rows].tolist() == [rows[0]] * len(rows)
    # the first FEW_QUEUES groups come in the order their first rows do
    head = first[: recordscan.FEW_QUEUES].tolist()
    assert head == sorted(head)
