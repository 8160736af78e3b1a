"""Attack: bad input to the newer public calls (timer delivery, POP receive, topic creation).
Each raises a typed error, the same from both twins, and loses or writes nothing."""

import math

import numpy as np
import pytest

from rocketstore import MessageStore
from rocketstore.errors import InvalidMessageError

OPTIONS = {"index_slots": 100, "index_count": 400, "consume_queue_units": 64}
#: no background delivery: the calls under test deliver, and only they
QUIET = {**OPTIONS, "timer_interval_ms": 0, "schedule_interval_ms": 0}
BAD_NOW = [math.nan, math.inf, -math.inf, 1.5, True, -1, 2**64, -(2**63) - 1, "1", b"1", [], np.float64(1.0)]


class Str(str):
    pass


@pytest.mark.parametrize(
    "deliver, schedule, body",
    [("deliver_timers", {"delay_ms": 1000}, b"timer"), ("deliver_delayed", {"delay_level": 1}, b"delayed")],
)
@pytest.mark.parametrize("now", BAD_NOW, ids=repr)
def test_deliver_refuses_a_now_that_is_not_an_epoch_ms_int_and_loses_nothing(
    tmp_path, impl, clock, now, deliver, schedule, body
):
    with MessageStore(tmp_path / "s", implementation=impl.name, clock=clock, **QUIET) as store:
        store.put("T", body, queue_id=0, **schedule)
        with pytest.raises(InvalidMessageError):
            getattr(store, deliver)(now)
        assert store.max_queue_offset("T", 0) == 0
        clock.now += 5000
        assert getattr(store, deliver)() == 1  # a NaN pass used to consume it without delivering
        assert store.get_by_queue_offset("T", 0, 0).body == body


def test_str_subclasses_are_taken_as_their_str_by_both_twins(tmp_path, impl, clock):
    with MessageStore(tmp_path / "s", implementation=impl.name, clock=clock, **OPTIONS) as store:
        store.create_topic(Str("U"), 2)
        assert store.topics["U"] == 2
        store.put("U", b"x", queue_id=1, tags="a")
        got = store.receive(Str("g"), Str("U"), 4, 60_000, tags=Str("a"))
        assert [m.message.body for m in got] == [b"x"]
        assert store.ack(got[0].handle) is True


@pytest.mark.parametrize("bound", [math.nan, 1.5, True, -1, 2**64, "0", np.float64(0.0)], ids=repr)
@pytest.mark.parametrize("call", ["iter_messages", "scan"])
@pytest.mark.parametrize("which", ["start", "end"])
def test_scans_refuse_a_bound_that_is_not_an_offset(tmp_path, impl, call, which, bound):
    with MessageStore(tmp_path / "s", implementation=impl.name, **OPTIONS) as store:
        store.put("T", b"x")
        with pytest.raises(InvalidMessageError):
            list(getattr(store, call)(**{which: bound}))  # NaN used to scan from the start
        assert [m.body for m in store.iter_messages(0)] == [b"x"]
