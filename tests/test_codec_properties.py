"""Property tests for the record codec: what one twin encodes the other decodes, byte for byte,
and no bytes at all make either twin crash or disagree with the other."""

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rocketstore.errors import CorruptRecordError, RocketStoreError
from rocketstore.format import _codec_py as py

c = pytest.importorskip("rocketstore.format._codec", reason="rocketstore.format._codec is not built")

TWINS = [pytest.param((c, py), id="c-to-py"), pytest.param((py, c), id="py-to-c")]
INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

prop_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=20)
hosts = st.tuples(st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)).map(str), INT32)
topics = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40).filter(
        lambda t: len(t.encode()) <= 127
    ),
    st.binary(min_size=1, max_size=127),
)
properties = st.one_of(
    st.dictionaries(prop_text.filter(bool), prop_text.filter(bool), max_size=6),  # "" / None: refused
    st.binary(max_size=300),
)
records = st.fixed_dictionaries(
    {
        "topic": topics,
        "body": st.binary(max_size=300),
        "properties": properties,
        "queue_id": INT32,
        "flag": INT32,
        "queue_offset": INT64,
        "physical_offset": INT64,
        "sys_flag": INT32.map(lambda f: f & ~0x30),
        "born_timestamp": INT64,
        "born_host": hosts,
        "store_timestamp": INT64,
        "store_host": hosts,
        "reconsume_times": INT32,
        "prepared_transaction_offset": INT64,
        "body_crc": st.one_of(st.none(), INT32),
    }
)


def _outcome(fn, *args, **kwargs):
    """What a call did: ("ok", value) or ("raised", type, message, reason)."""
    try:
        return ("ok", fn(*args, **kwargs))
    except RocketStoreError as exc:
        return ("raised", type(exc), str(exc), getattr(exc, "reason", None))
    except (ValueError, TypeError) as exc:
        return ("raised", type(exc), str(exc), None)


def _message_fields(m):
    """The fields, ``body`` as stored (a random sysFlag may claim a compressed body)."""
    from rocketstore.message import MESSAGE_FIELDS

    d = {name: getattr(m, name) for name in MESSAGE_FIELDS if name != "body"}
    d["body"] = bytes(m.stored_body)
    return d


def _reencode_fields(codec, buffer, row):
    m = codec.record_from_row(buffer, row)
    start, length = int(row["properties_pos"]), int(row["properties_len"])
    return dict(
        topic=m.topic,
        body=m.stored_body,
        properties=bytes(buffer[start : start + length]),
        queue_id=m.queue_id,
        flag=m.flag,
        queue_offset=m.queue_offset,
        physical_offset=m.commitlog_offset,
        sys_flag=m.sys_flag,
        born_timestamp=m.born_timestamp,
        born_host=m.born_host,
        store_timestamp=m.store_timestamp,
        store_host=m.store_host,
        reconsume_times=m.reconsume_times,
        prepared_transaction_offset=m.prepared_transaction_offset,
        body_crc=m.body_crc,
    )


@pytest.mark.parametrize("twins", TWINS)
@SETTINGS
@given(fields=records)
def test_record_encoded_by_one_twin_decodes_and_reencodes_in_the_other(twins, fields):
    writer, reader = twins
    try:
        data = writer.encode_record(**fields)
    except RocketStoreError as exc:  # only property maps can be too large here
        assert _outcome(reader.encode_record, **fields)[1:3] == (type(exc), str(exc))
        return
    assert reader.encode_record(**fields) == data
    m = reader.decode_record(data, check_crc=fields["body_crc"] is None)
    assert bytes(m.stored_body) == fields["body"] and m.size == len(data)
    assert _message_fields(m) == _message_fields(writer.decode_record(data, check_crc=False))
    rows, stop, reason = reader.decode_batch(data, check_crc=False)
    assert (len(rows), stop, reason) == (1, len(data), reader.STOP_LIMIT)
    assert writer.encode_record(**_reencode_fields(reader, data, rows[0])) == data


@SETTINGS
@given(
    fields=records,
    value=st.one_of(st.integers(), st.floats(), st.text(max_size=3), st.none()),
    name=st.sampled_from(
        [
            "queue_id",
            "flag",
            "queue_offset",
            "physical_offset",
            "sys_flag",
            "born_timestamp",
            "store_timestamp",
            "reconsume_times",
            "prepared_transaction_offset",
            "body_crc",
        ]
    ),
)
def test_twins_accept_and_reject_the_same_field_values(fields, value, name):
    fields[name] = value
    assert _outcome(c.encode_record, **fields) == _outcome(py.encode_record, **fields)


@SETTINGS
@given(
    fields=records,
    born=st.tuples(st.one_of(st.text(max_size=8), st.binary(max_size=17)), INT64),
    sys_flag=INT32,
)
def test_twins_agree_on_host_and_flag_errors(fields, born, sys_flag):
    fields.update(born_host=born, sys_flag=sys_flag)
    assert _outcome(c.encode_record, **fields) == _outcome(py.encode_record, **fields)


@SETTINGS
@given(
    props=st.dictionaries(
        st.text(max_size=5), st.one_of(st.text(max_size=5), st.none(), st.integers()), max_size=5
    )
)
def test_twins_agree_on_property_maps(props):
    assert _outcome(c.encode_properties, props) == _outcome(py.encode_properties, props)


@SETTINGS
@given(data=st.binary(max_size=200))
def test_decode_properties_never_raises_and_twins_agree(data):
    assert c.decode_properties(data) == py.decode_properties(data)


@SETTINGS
@given(text=st.text(max_size=30))
def test_java_hash_twins_agree_with_the_spec_reference(text):
    b = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(b), 2):
        h = (31 * h + ((b[i] << 8) | b[i + 1])) & 0xFFFFFFFF
    expected = h - (1 << 32) if h & 0x80000000 else h
    assert c.java_hash(text) == py.java_hash(text) == expected
    assert c.index_key_hash(text) == py.index_key_hash(text)


@SETTINGS
@given(data=st.binary(max_size=40))
def test_java_hash_of_arbitrary_utf8_bytes_agrees(data):
    assert (
        c.java_hash_bytes(data)
        == py.java_hash_bytes(data)
        == py.java_hash(data.decode("utf-8", "surrogateescape"))
    )


@SETTINGS
@given(batch=st.lists(records, min_size=1, max_size=8), gap=st.binary(max_size=3))
def test_decode_batch_of_concatenated_records_equals_per_record_decode(batch, gap):
    chunks = []
    for fields in batch:
        fields["body_crc"] = None
        try:
            chunks.append(py.encode_record(**fields))
        except RocketStoreError:
            pass
    assume(chunks)
    data = gap + b"".join(chunks) + bytes(16)
    start = len(gap)
    for codec in (c, py):
        rows, stop, reason = codec.decode_batch(data, start)
        assert len(rows) == len(chunks)
        assert (stop, reason) == (len(data) - 16, codec.STOP_END)
        pos = start
        for row, chunk in zip(rows, chunks):
            assert int(row["position"]) == pos and int(row["size"]) == len(chunk)
            assert codec.record_from_row(data, row) == codec.decode_record(data, pos)
            pos += len(chunk)
        limited, stop, reason = codec.decode_batch(data, start, max_records=1)
        assert (len(limited), stop, reason) == (1, start + len(chunks[0]), codec.STOP_LIMIT)
        assert limited.tobytes() == rows[:1].tobytes()
        exact, stop, reason = codec.decode_batch(data, start, start + len(chunks[0]))
        assert (len(exact), stop, reason) == (1, start + len(chunks[0]), codec.STOP_LIMIT)
    assert c.decode_batch(data, start)[0].tobytes() == py.decode_batch(data, start)[0].tobytes()


def _agree_on_garbage(data, check_crc=True):
    """Neither twin crashes on data, and both give the same answer at every position."""
    for pos in range(0, min(len(data), 48)):
        outcomes = []
        for codec in (c, py):
            out = _outcome(codec.decode_record, data, pos, check_crc=check_crc)
            if out[0] == "ok":
                out = ("ok", _message_fields(out[1]))
            else:
                assert out[1] is CorruptRecordError, out
            outcomes.append(out)
        assert outcomes[0] == outcomes[1]
    c_rows, c_stop, c_reason = c.decode_batch(data, check_crc=check_crc)
    p_rows, p_stop, p_reason = py.decode_batch(data, check_crc=check_crc)
    assert (c_stop, c_reason) == (p_stop, p_reason)
    assert c_rows.tobytes() == p_rows.tobytes()


@SETTINGS
@given(data=st.binary(max_size=300))
def test_arbitrary_bytes_never_crash_either_twin(data):
    _agree_on_garbage(data)


@SETTINGS
@given(data=st.binary(max_size=300))
def test_arbitrary_bytes_behind_a_record_magic_never_crash_either_twin(data):
    head = (len(data) + 8).to_bytes(4, "big") + c.MAGIC_V1.to_bytes(4, "big", signed=True)
    _agree_on_garbage(head + data)
    _agree_on_garbage(head + data, check_crc=False)


@SETTINGS
@given(
    batch=st.lists(records, min_size=1, max_size=3),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 7)), max_size=4),
    overwrite=st.one_of(st.none(), st.tuples(st.integers(0, 10_000), INT32)),
    cut=st.integers(0, 10_000),
)
def test_bit_flips_overwrites_and_truncations_never_crash_either_twin(batch, flips, overwrite, cut):
    data = bytearray()
    for fields in batch:
        try:
            data += py.encode_record(**fields)
        except RocketStoreError:
            pass
    assume(data)
    for at, bit in flips:
        data[at % len(data)] ^= 1 << bit
    if overwrite is not None:
        at = overwrite[0] % len(data)
        data[at : at + 4] = overwrite[1].to_bytes(4, "big", signed=True)
    data = bytes(data[: cut % (len(data) + 1)])
    _agree_on_garbage(data)
    _agree_on_garbage(data, check_crc=False)


@pytest.mark.parametrize("total", [-(1 << 31), -1, 0, 8, 90, 91, (1 << 31) - 1])
@pytest.mark.parametrize("codec", [c, py], ids=["c", "py"])
def test_extreme_total_sizes_are_rejected_without_overreading(codec, total):
    good = py.encode_record(topic="t", body=b"x" * 10)
    data = total.to_bytes(4, "big", signed=True) + good[4:]
    with pytest.raises(CorruptRecordError) as info:
        codec.decode_record(data)
    assert info.value.reason in (codec.STOP_CORRUPT, codec.STOP_TRUNCATED)


@pytest.mark.parametrize("field_pos, value", [(84, (1 << 31) - 1), (84, -(1 << 31)), (84, -1)])
@pytest.mark.parametrize("codec", [c, py], ids=["c", "py"])
def test_huge_or_negative_body_length_is_rejected(codec, field_pos, value):
    data = bytearray(py.encode_record(topic="t", body=b"x" * 10))
    data[field_pos : field_pos + 4] = value.to_bytes(4, "big", signed=True)
    with pytest.raises(CorruptRecordError) as info:
        codec.decode_record(bytes(data))
    assert info.value.reason == (codec.STOP_TRUNCATED if value > 0 else codec.STOP_CORRUPT)


def test_large_scan_releases_the_gil_and_matches_pure_twin():
    one = py.encode_record(topic="TopicTest", body=bytes(range(128)), properties={"TAGS": "a"})
    data = one * 2000 + bytes(100)  # > 64 KiB: the compiled scan runs without the GIL
    c_rows, c_stop, c_reason = c.decode_batch(data)
    p_rows, p_stop, p_reason = py.decode_batch(data)
    assert len(c_rows) == 2000 and (c_stop, c_reason) == (p_stop, p_reason) == (len(one) * 2000, c.STOP_END)
    assert c_rows.tobytes() == p_rows.tobytes()


def test_put_properties_of_both_twins_agree():
    """The compiled put_properties encodes plain tags, keys and dict properties itself (the pure
    twin's order: a TAGS or KEYS property replaced where it stands, else appended); every shape,
    value and error must come out as the pure twin's."""
    import itertools

    from rocketstore import _impl

    if _impl.COMPILED is None:
        pytest.skip("compiled modules not built")
    compiled = _impl.COMPILED.codec
    values = [None, "a", "TagA", "x y", "", "é", "\ud800", "a\x01b", 5]
    keys = [None, "k", "k1 k2", ["a", "b"], ("x",), [1], "", "z" * 10]
    properties = [
        None,
        {},
        {"A": "1"},
        {"TAGS": "t", "X": "y"},
        {"KEYS": "kk", "UNIQ_KEY": "U1", "WAIT": "false"},
        {"WAIT": "true"},
        {"": "x"},
        {"A": ""},
        {"A": "\x02"},
        {1: "x"},
        {"A": 5},
        [("A", "1")],
        {"TAGS": "a", "KEYS": "b", "Z": "c"},
        {"X": "é" * 10},
        {"B": "x" * 40000},
    ]

    def outcome(codec, *args):
        try:
            return "ok", codec.put_properties(*args)
        except RocketStoreError as exc:
            return "error", type(exc)

    for tags, key, props in itertools.product(values, keys, properties):
        got = outcome(compiled, tags, key, dict(props) if isinstance(props, dict) else props)
        assert got == outcome(py, tags, key, props), (tags, key, props)
