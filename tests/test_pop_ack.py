"""The single ``ack`` in one call (``PopAcker`` of both twins, rocketstore.services.pop): the same
checks as the careful steps (``PopService._parse`` and ``_current``), the same errors for the
same handles, the same record bytes, and nothing written when a check fails."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore import MessageStore
from rocketstore.errors import InvalidReceiptHandleError, ReceiptHandleExpiredError
from rocketstore.files.fastjson import loads_fastjson
from rocketstore.services.pop import ReceivedMessage, revive_topic
from rocketstore.services.pop.records import ACK_RANGE_JSON as _ACK_RANGE_JSON
from rocketstore.services.pop.records import dumps as _dumps

TOPIC, GROUP = "PopTopic", "popGroup"
REVIVE = revive_topic("DefaultCluster")


def open_store(path, impl, clock, **options):
    options.setdefault("schedule_interval_ms", 0)
    return MessageStore(path, implementation=impl.name, clock=clock, **options)


def fill(store, n, queues=1):
    store.create_topic(TOPIC, queues)
    for i in range(n):
        store.put(TOPIC, b"m%d" % i, queue_id=i % queues)


def revive_records(store):
    """The revive log's records: (tag, body as a dict)."""
    out = []
    offset = 0
    while True:
        try:
            m = store.get_by_queue_offset(REVIVE, 0, offset)
        except Exception:
            return out
        out.append((m.tags, loads_fastjson(bytes(m.body).decode())))
        offset += 1


def careful(service, handle):
    """What the careful steps decide for ``handle``, without writing: ("ok"), ("done") or the
    error (type, message)."""
    try:
        lane, offset, number = service._parse(handle)
        h = handle.handle if isinstance(handle, ReceivedMessage) else handle
        return "ok" if service._current(lane, offset, number, h) else "done"
    except (InvalidReceiptHandleError, ReceiptHandleExpiredError) as exc:
        return (type(exc), str(exc))


def outcome(acker, handle):
    try:
        return "ok" if acker.ack(handle) else "done"
    except (InvalidReceiptHandleError, ReceiptHandleExpiredError) as exc:
        return (type(exc), str(exc))


def test_the_store_acks_through_the_implementations_acker(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as store:
        assert type(store._opened.pop._acker) is impl.codec.PopAcker


@pytest.mark.parametrize("offset", [0, 7, 10, 99, 12345])
def test_one_ack_writes_the_record_the_general_encoder_writes(tmp_path, impl, clock, offset):
    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, offset + 1)
        got = []
        while len(got) < offset + 1:
            got += store.receive(GROUP, TOPIC, 4096, 60_000)
        assert store.ack(got[offset].handle) is True
        tag, record = revive_records(store)[-1]
        assert tag == "bAck" and record == {"c": GROUP, "n": 1, "q": 0, "so": offset, "t": TOPIC}
        body = bytes(store.get_by_queue_offset(REVIVE, 0, len(revive_records(store)) - 1).body)
        assert body == (_ACK_RANGE_JSON % (GROUP, 1, 0, offset, TOPIC)).encode()
        assert body == _dumps({"c": GROUP, "t": TOPIC, "q": 0, "so": offset, "n": 1})


@pytest.mark.parametrize("group, topic, queue_id", [("g", "T", 0), ("%RETRY%g-1", "A_b|c", 7)])
def test_a_lanes_record_halves_make_the_general_record(group, topic, queue_id):
    from rocketstore import _impl

    for impl in (_impl.PURE, _impl.COMPILED or _impl.PURE):
        check_lane_halves(
            impl.codec.PopLane(group, topic, queue_id, 0, f"{topic}@{group}"), group, topic, queue_id
        )


def check_lane_halves(lane, group, topic, queue_id):
    for offset in (0, 9, 2**40):
        record = {"c": group, "t": topic, "q": queue_id, "so": offset, "n": 1}
        assert lane.ack_head + str(offset).encode() + lane.ack_tail == _dumps(record)


def test_a_stale_handle_raises_and_writes_nothing(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 2)
        old = store.receive(GROUP, TOPIC, 2, 100)
        clock.now += 100
        new = store.receive(GROUP, TOPIC, 2, 100)
        before = len(revive_records(store))
        with pytest.raises(ReceiptHandleExpiredError) as info:
            store.ack(old[0])  # the ReceivedMessage, as its handle
        assert info.value.handles == [old[0].handle]
        assert len(revive_records(store)) == before
        assert store.pop_status(GROUP, TOPIC)[0]["in_flight"] == 2
        assert store.ack(new[0].handle) is True and store.ack(new[0].handle) is False
        assert len(revive_records(store)) == before + 1  # an ack of a finished message writes nothing


def test_a_handle_of_another_group_or_store_is_refused_and_writes_nothing(tmp_path, impl, clock):
    with open_store(tmp_path / "a", impl, clock) as a, open_store(tmp_path / "b", impl, clock) as b:
        fill(a, 3)
        fill(b, 3)
        [mine] = a.receive(GROUP, TOPIC, 1, 60_000)
        others = b.receive(GROUP, TOPIC, 3, 60_000)  # b's group is past offset 0 .. 2
        a.receive("otherGroup", TOPIC, 3, 60_000)
        before = len(revive_records(a))
        for handle in (
            others[2].handle,  # another store's: offset 2 was never received from a by this group
            f"otherGroup {TOPIC} 0 2 1",  # in flight for otherGroup, under delivery number 0
            mine.handle.replace(GROUP, "noSuchGroup", 1),
            mine.handle.replace(TOPIC, "NoSuchTopic", 1),
        ):
            with pytest.raises((InvalidReceiptHandleError, ReceiptHandleExpiredError)):
                a.ack(handle)
        with pytest.raises(InvalidReceiptHandleError):
            a.ack(others[2])
        assert len(revive_records(a)) == before
        assert a.pop_status(GROUP, TOPIC)[0]["in_flight"] == 1
        assert a.pop_status("otherGroup", TOPIC)[0]["in_flight"] == 3
        assert a.ack(mine) is True


ODD_HANDLES = [
    "",
    " ",
    "x",
    "0 0",
    " 0 0",
    "  0 0",
    "popGroup PopTopic 0",
    "popGroup PopTopic 0 0",
    "popGroup PopTopic 0  0 0",
    "popGroup PopTopic 0 -1 0",
    "popGroup PopTopic 0 0 -1",
    "popGroup PopTopic 0 +1 0",
    "popGroup PopTopic 0 01 00",
    "popGroup PopTopic 0 1_0 0",
    "popGroup PopTopic 0 \u0661 0",  # an Arabic-Indic digit: int() takes it
    "popGroup PopTopic 0 1 \u0660",
    "popGroup PopTopic 0 1 0 ",
    "popGroup PopTopic 0 1 1",
    "popGroup PopTopic 0 3 0",
    "popGroup PopTopic 0 99 0",
    "popGroup PopTopic 0 1 " + "9" * 19,
    "popGroup PopTopic 0 1 " + "9" * 40,
    "popGroup PopTopic 0 " + "9" * 19 + " 0",
    "popGroup PopTopic 0 " + "0" * 25 + "1 0",
    "popGroup PopTopic 1 1 0",
    "popGroup  PopTopic 0 1 0",
    "popGroup PopTopic 0 1 0\ud800",
    "popGr\u00f6up PopTopic 0 1 0",
    "\ud800 1 0",
    5,
    None,
    b"popGroup PopTopic 0 1 0",
    ("popGroup PopTopic 0 1 0",),
]


def test_odd_handles_get_what_the_careful_steps_decide(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 3)
        store.receive(GROUP, TOPIC, 3, 60_000)
        service = store._opened.pop
        for handle in ODD_HANDLES:
            before = len(revive_records(store))
            expected = careful(service, handle) if isinstance(handle, str) else None
            got = outcome(service._acker, handle)
            if expected is None:
                assert got[0] is InvalidReceiptHandleError, handle
                assert got[1] == f"a receipt handle is a str, not {type(handle).__name__}"
            else:
                assert got == expected, handle
            assert len(revive_records(store)) == before + (got == "ok"), handle


def test_generated_handles_get_what_the_careful_steps_decide(tmp_path, impl, clock):
    with open_store(tmp_path / "s", impl, clock) as store:
        fill(store, 12, queues=2)
        store.receive(GROUP, TOPIC, 12, 60_000)
        service = store._opened.pop

        @settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
        @given(
            st.lists(
                st.one_of(
                    st.sampled_from(["popGroup", "PopTopic", "0", "1", "5", " ", "-", "+", "9" * 19]),
                    st.text(alphabet="0123456789 _+-\u0661ab\u00e9", max_size=6),
                ),
                max_size=8,
            ).map("".join)
        )
        def check(handle):
            expected = careful(service, handle)
            assert outcome(service._acker, handle) == expected

        check()


@pytest.mark.parametrize(
    "prefix, offsets, numbers",
    [
        ("g T 0", [0, 1, 2**40, 10**18], (0, 3, 1, 2**31)),
        ("%RETRY%g-1 A_b|c 7", [5], (0,)),
        ("gr\u00f6up T 0", [1, 2], (0, 1)),  # not ASCII: the general way
        ("", [], ()),
        ("g T 0", [-1], (0,)),
    ],
)
def test_receipt_handles_are_the_prefix_offset_and_number(impl, prefix, offsets, numbers):
    expected = [f"{prefix} {o} {n}" for o, n in zip(offsets, numbers)]
    got = impl.codec.receipt_handles(prefix, offsets, numbers)
    assert got == expected and all(type(h) is str for h in got)
    with pytest.raises(ValueError):
        impl.codec.receipt_handles(prefix, offsets + [1], numbers)


@given(
    st.sampled_from(["g", "%RETRY%g-1"]),
    st.sampled_from(["T", "A_b|c"]),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**40),
    st.integers(0, 2**45),
    st.integers(0, 12 * 3600 * 1000),
    st.lists(st.integers(0, 2**40), max_size=6)
    | st.integers(0, 2**40).map(lambda so: list(range(so, so + 5))),
    st.booleans(),
)
def test_a_checkpoint_record_is_written_as_the_general_encoder_writes_it(
    group, topic, queue_id, base, now, invisible, offsets, redelivered
):
    from rocketstore.services.pop.records import checkpoint_json as _checkpoint_json
    from rocketstore.services.pop.records import checkpoint_record as _checkpoint

    numbers = [int(redelivered)] * len(offsets)
    nxt = max(offsets, default=base) + 1
    args = (group, topic, queue_id, base, now, invisible, offsets, numbers, nxt)
    assert _checkpoint_json(*args) == _dumps(_checkpoint(*args))


def test_the_acker_keeps_no_store_alive_and_refuses_once_it_is_gone(tmp_path, impl, clock):
    import gc

    from rocketstore.errors import StoreClosedError

    store = open_store(tmp_path / "s", impl, clock)
    fill(store, 1)
    [got] = store.receive(GROUP, TOPIC, 1, 60_000)
    ack = store._opened.pop.ack
    store.close()
    del store
    gc.collect()
    with pytest.raises(StoreClosedError):
        ack(got.handle)


_NAMES = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.sampled_from(["g", "%RETRY%g-1"]) | _NAMES,
    st.sampled_from(["T", "A_b|c"]) | _NAMES,
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**62),
    st.integers(0, 2**62),
    st.integers(0, 12 * 3600 * 1000),
    st.integers(0, 2**62),
    st.integers(1, 4096),
)
def test_a_runs_checkpoint_is_what_the_general_encoder_writes(
    impl, group, topic, queue_id, base, now, invisible, so, n
):
    from rocketstore.services.pop.records import checkpoint_record as _checkpoint

    offsets = list(range(so, so + n))
    args = (group, topic, queue_id, base, now, invisible, offsets, [0] * n, so + n)
    got = impl.codec.checkpoint_run(base, group, invisible, n, so + n, now, queue_id, so, topic)
    assert got == _dumps(_checkpoint(*args))
