"""The message a read hands out: both twins' MessageExt have the same fields, equality, lazily
decoded values, pickling and errors, whatever record they come from."""

import copy
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rocketstore
from rocketstore.format import _codec_py
from rocketstore.message import MESSAGE_FIELDS

c_codec = pytest.importorskip("rocketstore.format._codec", reason="rocketstore.format._codec is not built")


def _record(codec, **over):
    fields = dict(
        topic="TopicA",
        body=b"hello body",
        properties={"TAGS": "tagA", "KEYS": "k1 k2", "UNIQ_KEY": "U1", "x": "y"},
        queue_id=3,
        flag=7,
        queue_offset=41,
        physical_offset=1000,
        sys_flag=0,
        born_timestamp=1_700_000_000_000,
        born_host=("10.1.2.3", 5555),
        store_timestamp=1_700_000_000_001,
        store_host=("192.168.0.9", 10911),
        reconsume_times=2,
        prepared_transaction_offset=0,
    )
    fields.update(over)
    return codec.encode_record(**fields)


@pytest.fixture(params=[{}, {"store_host": ("2001:db8::1", 10911), "sys_flag": 0x20}], ids=["v4", "v6"])
def record(request):
    return _record(_codec_py, **request.param)


@pytest.mark.parametrize("copy_body", [True, False], ids=["copy", "zero-copy"])
def test_every_field_agrees_between_twins(impl, record, copy_body):
    mine = impl.codec.decode_record(bytearray(record), 0, copy_body=copy_body)
    ref = _codec_py.decode_record(record, 0)
    assert isinstance(mine, rocketstore.MessageExt)
    for name in MESSAGE_FIELDS:
        got, want = getattr(mine, name), getattr(ref, name)
        assert (bytes(got) if name == "body" else got) == want, name
    assert (mine.tags, mine.keys, mine.unique_key) == ("tagA", "k1 k2", "U1")
    assert (
        mine.msg_id
        == ref.msg_id
        == _codec_py.make_offset_msg_id(
            rocketstore.message.host_to_bytes(ref.store_host[0]), ref.store_host[1], 1000
        )
    )
    assert mine == ref and ref == mine
    assert (mine != ref) is False
    assert list(mine.as_dict()) == list(MESSAGE_FIELDS)
    assert isinstance(mine.body, memoryview if not copy_body else bytes)


def test_equality_sees_every_field(impl, record):
    a = impl.codec.decode_record(record, 0)
    for name, value in [("queue_offset", 42), ("topic", "Other"), ("body", b"x"), ("properties", {})]:
        b = impl.codec.decode_record(record, 0)
        setattr(b, name, value)
        assert a != b, name
    with pytest.raises(TypeError):
        hash(a)


def test_assigned_values_win_over_the_record(impl, record):
    m = impl.codec.decode_record(record, 0)
    m.properties = {"TAGS": "other"}
    assert (m.tags, m.keys, m.unique_key) == ("other", None, None)
    m.store_host = ("127.0.0.1", 1)
    assert m.msg_id == _codec_py.make_offset_msg_id(b"\x7f\0\0\x01", 1, 1000)
    m.properties = {}
    assert m.tags is None


@pytest.mark.parametrize("copy_body", [True, False], ids=["copy", "zero-copy"])
def test_pickles_and_copies_as_the_same_message(impl, record, copy_body):
    m = impl.codec.decode_record(record, 0, copy_body=copy_body)
    assert m.properties  # one field decoded, the rest not yet: both states survive
    again = pickle.loads(pickle.dumps(m))
    assert again == m and type(again) is type(m)
    assert isinstance(again.body, bytes)
    assert again.msg_id == m.msg_id and again.tags == "tagA"
    assert copy.deepcopy(m) == m


def test_zero_copy_keeps_its_buffer_pinned(impl, record):
    buf = bytearray(record)
    m = impl.codec.decode_record(buf, 0, copy_body=False)
    with pytest.raises(BufferError):
        buf.extend(b"x")  # exported while the message lives
    assert bytes(m.body) == b"hello body"


def test_messages_from_rows_matches_decode_record(impl):
    data = b"".join(_record(_codec_py, queue_offset=i, body=bytes([i]) * i) for i in range(20))
    rows, _, _ = impl.codec.decode_batch(data)
    got = impl.codec.messages_from_rows(data, rows)
    want = [_codec_py.decode_record(data, int(p)) for p in rows["position"]]
    assert got == want
    assert impl.codec.messages_from_rows(data, rows[:0]) == []
    assert impl.codec.record_from_row(data, rows[5]) == want[5]
    assert list(impl.codec.row_messages(data, rows)) == want
    assert list(impl.codec.row_messages(data, rows[::2])) == want[::2]  # not contiguous: copied
    assert list(impl.codec.row_messages(data, rows[:0])) == []
    zero = list(impl.codec.row_messages(bytearray(data), rows, copy_body=False))
    assert [bytes(m.body) for m in zero] == [m.body for m in want]


def test_row_messages_makes_each_message_as_it_is_asked_for(impl):
    data = bytearray(b"".join(_record(_codec_py, queue_offset=i) for i in range(3)))
    rows, _, _ = impl.codec.decode_batch(data)
    it = impl.codec.row_messages(data, rows)
    assert next(it).queue_offset == 0
    assert [m.queue_offset for m in it] == [1, 2]
    with pytest.raises(StopIteration):
        next(it)
    data.extend(b"x")  # an exhausted iterator holds no buffer
    with pytest.raises(TypeError):
        impl.codec.row_messages(data, rows["position"])


@pytest.mark.parametrize("copy_body", [True, False])
def test_segment_messages_agree_with_decode_batch_and_stop_where_it_stops(impl, copy_body):
    """segment_messages decodes record by record what decode_batch's rows give as messages, and
    stops, saying where and why, at the first position decode_batch stops at."""
    good = [_record(_codec_py, queue_offset=i, body=b"body-%d" % i) for i in range(5)]
    data = b"".join(good)
    cuts = [0, len(good[0]), len(good[0]) + len(good[1])]
    blank = bytearray(16)
    _codec_py.encode_blank_into(blank, 0, 16)
    tails = [b"", b"\0" * 40, good[0][:50], b"\xff" * 8, bytes(blank)]  # end, zeros, torn, garbage, BLANK
    crc_bad = bytearray(good[2])
    crc_bad[_codec_py.POS_BODY] ^= 1  # a body byte: the CRC fails
    for tail in tails:
        for buf in (bytearray(data + tail), bytearray(data[: cuts[2]] + bytes(crc_bad) + data[cuts[2] :])):
            for start in cuts:
                for end in (len(buf), len(buf) - 3):
                    rows, stop, reason = impl.codec.decode_batch(buf, start, end)
                    want = impl.codec.messages_from_rows(buf, rows)
                    it = impl.codec.segment_messages(buf, start, end, copy_body=copy_body)
                    assert it.reason == -1
                    got = list(it)
                    assert got == want
                    assert (it.stop, it.reason) == (stop, reason)
                    with pytest.raises(StopIteration):
                        next(it)
    trusting = list(impl.codec.segment_messages(bytes(crc_bad), check_crc=False))
    assert len(trusting) == 1 and trusting[0].queue_offset == 2


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=6),
    st.integers(0, 40),
    st.booleans(),
)
def test_segment_messages_on_flipped_bytes_stop_where_decode_batch_stops(flips, cut, check_crc):
    """Any bytes: the twins' segment_messages yield decode_batch's messages and stop where and
    why it stops (run here on both twins, never outside the buffer)."""
    data = bytearray(b"".join(_record(_codec_py, queue_offset=i, body=b"x" * i) for i in range(4)))
    for at, value in flips:
        data[at % len(data)] = value
    data = data[: len(data) - cut]
    rows, stop, reason = _codec_py.decode_batch(data, check_crc=check_crc)
    want = _codec_py.messages_from_rows(data, rows)
    for codec in (_codec_py, c_codec):
        it = codec.segment_messages(data, check_crc=check_crc)
        assert list(it) == want and (it.stop, it.reason) == (stop, reason), codec.__name__


def test_segment_messages_refuses_bad_ranges(impl):
    data = _record(_codec_py)
    for start, end, error in ((-1, None, ValueError), (0, len(data) + 1, ValueError), (1.0, None, TypeError)):
        with pytest.raises(error):
            impl.codec.segment_messages(data, start, end)
    it = impl.codec.segment_messages(bytearray(data))
    assert next(it).queue_offset == _codec_py.decode_record(data).queue_offset
    assert list(it) == [] and (it.stop, it.reason) == (len(data), _codec_py.STOP_LIMIT)


@pytest.mark.parametrize(
    "field, value",
    [
        ("position", -1),
        ("position", 10**9),
        ("size", 0),
        ("size", 10**6),
        ("body_pos", 10**6),
        ("topic_len", -1),
    ],
)
def test_rows_pointing_outside_the_buffer_are_refused(impl, field, value):
    data = _record(_codec_py) * 2
    rows, _, _ = impl.codec.decode_batch(data)
    rows = rows.copy()
    rows[field][1] = value
    with pytest.raises(ValueError, match="row does not describe a record inside this buffer"):
        impl.codec.messages_from_rows(data, rows)
    with pytest.raises(ValueError, match="row does not describe a record inside this buffer"):
        impl.codec.record_from_row(data, rows[1])
    it = impl.codec.row_messages(data, rows)
    with pytest.raises(ValueError, match="row does not describe a record inside this buffer"):
        list(it)


def test_rows_whose_sums_overflow_are_refused(impl):
    """A row near 2**63 whose position + size wraps around: refused, never read (this once
    passed the bounds check by overflow and crashed the interpreter)."""
    data = _record(_codec_py) * 2
    rows, _, _ = impl.codec.decode_batch(data)
    rows = rows.copy()
    top = 2**63 - 10
    for name, value in [
        ("position", top),
        ("size", 100),
        ("body_pos", top + 5),
        ("body_len", 10),
        ("topic_pos", top + 5),
        ("topic_len", 10),
        ("properties_pos", top + 5),
        ("properties_len", 10),
    ]:
        rows[name][1] = value
    with pytest.raises(ValueError, match="row does not describe a record inside this buffer"):
        impl.codec.messages_from_rows(data, rows)


def test_messages_from_rows_wants_a_record_table(impl):
    with pytest.raises(TypeError, match="RECORD_DTYPE"):
        impl.codec.messages_from_rows(b"", np.zeros(3, dtype=np.int64))
    with pytest.raises(TypeError, match="RECORD_DTYPE"):
        impl.codec.messages_from_rows(b"", [1, 2])


def test_store_reads_hand_out_the_twins_message(impl, tmp_path):
    from rocketstore import MessageStore

    with MessageStore(str(tmp_path / "s"), implementation=impl.name) as store:
        res = store.put("T", b"body", keys="k", tags="t")
        m = store.read(res.commitlog_offset)
        assert isinstance(m, rocketstore.MessageExt)
        assert [m] == list(store.iter_messages()) == [store.get_by_msg_id(res.msg_id)]
        assert m == store.get_by_queue_offset("T", res.queue_id, res.queue_offset)
        assert (m.tags, m.keys) == ("t", "k")


_prop_text = st.one_of(
    st.none(), st.text(max_size=8), st.sampled_from(["a", "tag\x01", "k\x02", "\udc80", "x" * 40000])
)


@settings(max_examples=300, deadline=None)
@given(
    tags=st.one_of(_prop_text, st.integers()),
    keys=st.one_of(
        _prop_text, st.lists(st.one_of(st.text(max_size=5), st.integers()), max_size=3), st.tuples(st.text())
    ),
    properties=st.one_of(
        st.none(), st.dictionaries(st.text(max_size=5), st.one_of(st.text(max_size=5), st.none()), max_size=3)
    ),
)
def test_put_properties_same_bytes_and_errors_in_both_twins(tags, keys, properties):
    def run(codec):
        try:
            return codec.put_properties(tags, keys, properties)
        except Exception as exc:  # the twins must raise the same type with the same message
            return type(exc), str(exc)

    assert run(c_codec) == run(_codec_py)


def _queue_fixture(count=12):
    """A segment of ``count`` records of T-0 (queue offsets 0..count-1, tags a/b in turn) and
    their ConsumeQueue units."""
    from rocketstore.queues.consumequeue import CQ_UNIT_DTYPE

    records, units, pos = [], np.zeros(count, dtype=CQ_UNIT_DTYPE), 0
    for i in range(count):
        tag = "ab"[i % 2]
        rec = _record(
            _codec_py, topic="T", queue_id=0, queue_offset=i, physical_offset=pos, properties={"TAGS": tag}
        )
        records.append(rec)
        units[i] = (pos, len(rec), _codec_py.tags_code(tag))
        pos += len(rec)
    return b"".join(records), units


_unit_edits = st.lists(
    st.tuples(
        st.integers(0, 11),
        st.sampled_from(["placeholder", "negative", "shifted", "size", "far", "other_code", "zero"]),
    ),
    max_size=4,
)


@settings(max_examples=200, deadline=None)
@given(
    edits=_unit_edits,
    start=st.integers(0, 12),
    want=st.integers(0, 14),
    first=st.sampled_from([0, 1]),
    segment=st.sampled_from(["whole", "half", "none"]),
    codes=st.sampled_from([None, "a", "b", "ab"]),
    recheck=st.booleans(),
)
def test_pull_units_agrees_between_twins(edits, start, want, first, segment, codes, recheck):
    from rocketstore.queues.consumequeue import PLACEHOLDER_SIZE

    data, units = _queue_fixture()
    for i, edit in edits:
        offset, size, code = (int(x) for x in units[i])
        offset, size, code = {
            "placeholder": (0, PLACEHOLDER_SIZE, 0),
            "negative": (-1, size, code),
            "shifted": (offset + 1, size, code),
            "size": (offset, size + 1 if size < PLACEHOLDER_SIZE else 1, code),
            "far": (offset + 10**6, size, code),
            "other_code": (offset, size, code + 1),
            "zero": (offset, 0, code),
        }[edit]
        units[i] = (offset, size, code)
    buffer = {"whole": data, "half": data[: len(data) // 2], "none": None}[segment]
    tag_codes = None if codes is None else tuple(_codec_py.tags_code(t) for t in codes)
    tags = None if codes is None or not recheck else frozenset(codes)
    args = (buffer, 0, 1 << 20, units, start, want, first, "T", 0, tag_codes, tags)
    assert c_codec.pull_units(*args) == _codec_py.pull_units(*args)
    found, taken, stop, kind = c_codec.pull_units(*args)
    for m, i in zip(found, taken):
        assert m.queue_offset == first + i and m.commitlog_offset == int(units[i]["commitlog_offset"])
    assert len(found) <= want and start <= stop <= len(units)


@pytest.mark.parametrize("end", [None, "whole", "short", -1, 10**9, "x"])
def test_decode_record_end_bounds_the_record_in_both_twins(end, record):
    from rocketstore.errors import CorruptRecordError

    end = {"whole": len(record), "short": len(record) - 1}.get(end, end)
    buf = record + b"\0" * 64

    def run(codec):
        try:
            return ("ok", codec.decode_record(buf, 0, end=end).as_dict())
        except (CorruptRecordError, ValueError, TypeError) as exc:
            return type(exc), str(exc)

    got = run(c_codec)
    assert got == run(_codec_py)
    assert (got[0] == "ok") == (end in (None, len(record)))


_any_value = st.one_of(
    st.none(), st.integers(-(2**64), 2**64), st.text(max_size=4), st.binary(max_size=4), st.booleans()
)


@settings(max_examples=300, deadline=None)
@given(
    fields=st.lists(
        st.fixed_dictionaries(
            {},
            optional={
                "topic": st.sampled_from(["T", "Other", b"T"]),
                "body": st.one_of(st.binary(max_size=4), st.just(bytearray(b"x")), st.none()),
                "tags": _prop_text,
                "keys": st.one_of(_prop_text, st.lists(st.text(max_size=3), max_size=2)),
                "properties": st.one_of(st.none(), st.just({"a": "b"})),
                "queue_id": _any_value,
                "flag": _any_value,
                "born_timestamp": _any_value,
                "sys_flag": _any_value,
                "reconsume_times": _any_value,
            },
        ),
        max_size=4,
    ),
    not_a_message=st.booleans(),
)
def test_plain_message_items_agrees_between_twins(fields, not_a_message):
    from rocketstore.message import Message  # the class both twins take (the compiled: its own too)

    messages = []
    for f in fields:
        m = Message("T", b"")
        for name, value in f.items():
            setattr(m, name, value)
        messages.append(m)
    if not_a_message:
        messages.append(("T", b"x"))

    def run(codec):
        try:
            return codec.plain_message_items(messages, {"T"})
        except Exception as exc:
            return type(exc), str(exc)

    assert run(c_codec) == run(_codec_py)
