"""What dispatch extracts from a batch of records (spec §2 tagsCode / DELAY, §5.2 index keys), and
IndexFile.put_refs storing those keys: vectors on both twins, the twins against each other, both
against decode_properties / put_key, and hostile tables that must raise, never read out of bounds."""

import mmap
import re
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore.errors import CorruptRecordError, StoreReadOnlyError
from rocketstore.format import _codec_py, _scan_py
from rocketstore.queues import _index_py

try:
    from rocketstore.format import _codec as _codec_c
    from rocketstore.format import _scan as _scan_c
    from rocketstore.queues import _index as _index_c
except ImportError:  # pragma: no cover - depends on the build
    _codec_c = _index_c = _scan_c = None

needs_compiled = pytest.mark.skipif(_codec_c is None, reason="the compiled modules are not built")
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

T = 1_700_000_000_123
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
SCHEDULE = "SCHEDULE_TOPIC_XXXX"
ITEM = struct.Struct(">iqii")


@pytest.fixture
def codec(impl):
    return impl.codec


@pytest.fixture
def scan(impl):
    return impl.scan


@pytest.fixture
def index(impl):
    return impl.index


def batch(*records, prefix=b""):
    """(buffer, rows): records encoded with the pure codec (kwargs dicts) after ``prefix``."""
    buf = prefix + b"".join(
        _codec_py.encode_record(**{"body": b"x", "topic": "TopicTest", **r}) for r in records
    )
    rows, stop, reason = _codec_py.decode_batch(buf, len(prefix))
    assert (stop, reason, len(rows)) == (len(buf), _codec_py.STOP_LIMIT, len(records))
    return buf, rows


def key_bytes(buf, keys):
    return [(bytes(buf[k["key_pos"] : k["key_pos"] + k["key_len"]]), int(k["record"])) for k in keys]


def tags_bytes(buf, row):
    return bytes(buf[row["tags_pos"] : row["tags_pos"] + row["tags_len"]])


def java_int(text):
    """Integer.parseInt over ASCII, or None (the model the tests hold both twins to)."""
    if not re.fullmatch(rb"[+-]?[0-9]+", text):
        return None
    value = int(text)
    return value if INT32_MIN <= value <= INT32_MAX else None


# ---- the API ----


def test_dtypes_and_constants(codec):
    assert (
        np.dtype(
            [("tags_code", "=i8"), ("tags_pos", "=i8"), ("tags_len", "=i4"), ("delay_level", "=i4")],
            align=True,
        )
        == codec.DISPATCH_DTYPE
    )
    assert (
        np.dtype([("key_pos", "=i8"), ("key_len", "=i4"), ("record", "=i4")], align=True)
        == codec.KEYREF_DTYPE
    )
    assert (codec.DISPATCH_DTYPE.itemsize, codec.KEYREF_DTYPE.itemsize) == (24, 16)
    assert codec.SCHEDULE_TOPIC == SCHEDULE
    assert codec.DEFAULT_DELAY_LEVELS_MS == (
        1000,
        5000,
        10000,
        30000,
        60000,
        120000,
        180000,
        240000,
        300000,
        360000,
        420000,
        480000,
        540000,
        600000,
        1200000,
        1800000,
        3600000,
        7200000,
    )


def test_empty_batch_gives_empty_tables(codec):
    info, keys = codec.dispatch_info(b"", np.zeros(0, codec.RECORD_DTYPE))
    assert (len(info), len(keys), info.dtype, keys.dtype) == (0, 0, codec.DISPATCH_DTYPE, codec.KEYREF_DTYPE)


# ---- §2 / §14 vectors ----


def test_tags_code_is_the_java_hash_of_tags(codec):
    buf, rows = batch(
        {"properties": {"KEYS": "OrderID001", "TAGS": "TagA"}},
        {"properties": {"TAGS": "TagB"}},
        {"properties": {"TAGS": "*"}},
        {"properties": {"KEYS": "k"}},
        {"properties": b""},
    )
    info, _ = codec.dispatch_info(buf, rows)
    assert info["tags_code"].tolist() == [2598919, 2598920, 42, 0, 0]
    assert [tags_bytes(buf, r) for r in info[:3]] == [b"TagA", b"TagB", b"*"]
    assert info["tags_pos"][3:].tolist() == [-1, -1] and info["tags_len"][3:].tolist() == [0, 0]
    assert info["delay_level"].tolist() == [0] * 5


def test_tags_code_is_sign_extended_and_over_utf16_units(codec):
    buf, rows = batch(
        {"properties": {"TAGS": "TopicTest#OrderID001"}},
        {"properties": {"TAGS": "😀é"}},
        {"properties": b"TAGS\x01\xff\xc3(\x02"},
    )
    info, _ = codec.dispatch_info(buf, rows)
    assert info["tags_code"].tolist() == [
        -1231272886,
        _codec_py.java_hash("😀é"),
        _codec_py.java_hash_bytes(b"\xff\xc3("),
    ]


def test_schedule_topic_tags_code_is_the_delivery_time(codec):
    buf, rows = batch(
        {"topic": SCHEDULE, "store_timestamp": T, "properties": {"DELAY": "3", "TAGS": "TagA"}},
        {"topic": SCHEDULE, "store_timestamp": T, "properties": {"DELAY": "99"}},
        {"topic": SCHEDULE, "store_timestamp": T, "properties": {"DELAY": "1"}},
        {"topic": SCHEDULE, "store_timestamp": T, "properties": {"DELAY": "18"}},
    )
    info, _ = codec.dispatch_info(buf, rows)
    assert info["tags_code"].tolist() == [1_700_000_010_123, T + 7_200_000, T + 1000, T + 7_200_000]
    assert info["delay_level"].tolist() == [3, 99, 1, 18]
    assert tags_bytes(buf, info[0]) == b"TagA"  # still located, though its hash is not the code


@pytest.mark.parametrize(
    "delay, level",
    [
        ("0", 0),
        ("-1", -1),
        ("-2147483648", INT32_MIN),
        ("+5", 5),
        ("007", 7),
        ("2147483647", INT32_MAX),
        ("2147483648", 0),
        ("-2147483649", 0),
        ("abc", 0),
        ("3 ", 0),
        (" 3", 0),
        ("+", 0),
        ("-", 0),
        ("3.0", 0),
        ("٣", 0),
        ("99999999999999999999999", 0),
    ],
)
def test_delay_is_read_as_integer_parse_int(codec, delay, level):
    buf, rows = batch(
        {"topic": SCHEDULE, "store_timestamp": T, "properties": {"DELAY": delay, "TAGS": "TagA"}},
        {"topic": "TopicTest", "store_timestamp": T, "properties": {"DELAY": delay, "TAGS": "TagA"}},
    )
    info, _ = codec.dispatch_info(buf, rows)
    assert info["delay_level"].tolist() == [level, level]
    schedule_code = T + codec.DEFAULT_DELAY_LEVELS_MS[min(level, 18) - 1] if level > 0 else 2598919
    assert info["tags_code"].tolist() == [schedule_code, 2598919]


def test_schedule_rule_needs_the_exact_topic(codec):
    buf, rows = batch(
        *(
            {"topic": t, "store_timestamp": T, "properties": {"DELAY": "2"}}
            for t in ("SCHEDULE_TOPIC_XXXXY", "SCHEDULE_TOPIC_XXX", "schedule_topic_xxxx")
        )
    )
    info, _ = codec.dispatch_info(buf, rows)
    assert info["tags_code"].tolist() == [0, 0, 0]
    assert info["delay_level"].tolist() == [2, 2, 2]


def test_delay_table_is_the_callers(codec):
    buf, rows = batch(
        *({"topic": SCHEDULE, "store_timestamp": T, "properties": {"DELAY": d}} for d in "1234")
    )
    info, _ = codec.dispatch_info(buf, rows, [10, 20])
    assert info["tags_code"].tolist() == [T + 10, T + 20, T + 20, T + 20]
    info, _ = codec.dispatch_info(buf, rows, np.array([7, 8, 9], dtype=np.int64))
    assert info["tags_code"].tolist() == [T + 7, T + 8, T + 9, T + 9]
    info, _ = codec.dispatch_info(buf, rows, ())  # maxDelayLevel 0: nothing is delayed
    assert info["tags_code"].tolist() == [0, 0, 0, 0]
    assert info["delay_level"].tolist() == [1, 2, 3, 4]


def test_delivery_time_wraps_like_a_java_long(codec):
    buf, rows = batch(
        {"topic": SCHEDULE, "store_timestamp": INT64_MAX - 5, "properties": {"DELAY": "1"}},
        {"topic": SCHEDULE, "store_timestamp": INT64_MIN, "properties": {"DELAY": "2"}},
    )
    info, _ = codec.dispatch_info(buf, rows, [10, -1])
    assert info["tags_code"].tolist() == [INT64_MIN + 4, INT64_MAX]


@pytest.mark.parametrize(
    "table, error",
    [
        ("1000", TypeError),
        (b"\x01", TypeError),
        (None, TypeError),
        (5, TypeError),
        ({1: 2}, TypeError),
        ([1000, 1.5], TypeError),
        (["1000"], TypeError),
        ([2**63], ValueError),
        ([-(2**63) - 1], ValueError),
    ],
)
def test_bad_delay_tables_raise(codec, table, error):
    buf, rows = batch({"properties": {"TAGS": "a"}})
    with pytest.raises(error, match="delay"):
        codec.dispatch_info(buf, rows, table)


def test_keys_are_uniq_key_then_each_keys_token(codec):
    buf, rows = batch(
        {"properties": {"KEYS": "a  b", "UNIQ_KEY": "U1"}},
        {"properties": {"KEYS": " lead trail  "}},
        {"properties": {"KEYS": "   "}},
        {"properties": {"UNIQ_KEY": "only"}},
        {"properties": {"KEYS": "x\ty z"}},
    )
    _, keys = codec.dispatch_info(buf, rows)
    assert key_bytes(buf, keys) == [
        (b"U1", 0),
        (b"a", 0),
        (b"b", 0),
        (b"lead", 1),
        (b"trail", 1),
        (b"only", 3),
        (b"x\ty", 4),
        (b"z", 4),
    ]


@pytest.mark.parametrize(
    "props, tags, keys",
    [
        (b"TAGS\x01\x02", None, []),  # empty value: dropped
        (b"TAGS\x01a\x02TAGS\x01\x02", b"a", []),  # a dropped duplicate does not win
        (b"TAGS\x01a\x02TAGS\x01b\x02", b"b", []),  # the later kept duplicate wins
        (b"TAGS\x01a\x01b\x02", b"a\x01b", []),  # the value may hold 0x01
        (b"\x01TAGS\x01a\x02", None, []),  # empty name
        (b"TAGSa\x02KEYS\x01k1 k2", None, [b"k1", b"k2"]),  # no separator; no final 0x02
        (b"KEYS\x01\x02UNIQ_KEY\x01u\x02KEYS\x01k\x02", None, [b"u", b"k"]),
        (b"tags\x01a\x02 TAGS\x01b\x02TAGS \x01c\x02", None, []),  # names match exactly
        (b"\x02\x02\x02", None, []),
        (b"", None, []),
        (b"T", None, []),
    ],
)
def test_properties_are_read_as_decode_properties_reads_them(codec, props, tags, keys):
    buf, rows = batch({"properties": props})
    info, refs = codec.dispatch_info(buf, rows)
    assert (tags_bytes(buf, info[0]) if info[0]["tags_pos"] >= 0 else None) == tags
    assert [k for k, _ in key_bytes(buf, refs)] == keys


def test_reads_a_view_of_a_map_and_positions_are_relative_to_it(codec, tmp_path):
    buf, rows = batch({"properties": {"TAGS": "TagA", "KEYS": "k"}}, prefix=b"\0" * 100)
    path = tmp_path / "seg"
    path.write_bytes(buf)
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        with memoryview(mm) as view:
            info, keys = codec.dispatch_info(view, rows)
            assert tags_bytes(buf, info[0]) == b"TagA" and key_bytes(buf, keys) == [(b"k", 0)]
            assert info["tags_pos"][0] > 100
        info, keys = codec.dispatch_info(mm, rows[::-1][::-1])  # any contiguity of the table
        assert key_bytes(buf, keys) == [(b"k", 0)]


def test_a_strided_records_table_is_read_row_by_row(codec):
    buf, rows = batch(*({"properties": {"KEYS": f"k{i}"}} for i in range(6)))
    _, keys = codec.dispatch_info(buf, rows[::2])
    assert key_bytes(buf, keys) == [(b"k0", 0), (b"k2", 1), (b"k4", 2)]


# ---- hostile tables ----


@pytest.mark.parametrize(
    "field, value, what",
    [
        ("properties_pos", 10**6, "properties"),
        ("properties_pos", -1, "properties"),
        ("properties_len", -1, "properties"),
        ("properties_len", INT32_MAX, "properties"),
        ("properties_pos", INT64_MAX, "properties"),
        ("properties_pos", INT64_MIN, "properties"),
        ("topic_pos", 10**6, "topic"),
        ("topic_len", -5, "topic"),
        ("topic_pos", INT64_MAX - 3, "topic"),
    ],
)
def test_positions_outside_the_buffer_raise_corrupt_record_error(codec, field, value, what):
    buf, rows = batch({"properties": {"TAGS": "a"}}, {"properties": {"TAGS": "b"}})
    rows = rows.copy()
    rows[1][field] = value
    position = int(rows[1]["position"])
    with pytest.raises(
        CorruptRecordError, match=rf"^record 1 at position {position}: its {what} bytes"
    ) as exc:
        codec.dispatch_info(buf, rows)
    assert exc.value.position == position
    assert exc.value.reason == codec.STOP_CORRUPT


def test_a_shorter_buffer_than_the_records_raises(codec):
    buf, rows = batch(*({"properties": {"KEYS": "k" * 50}} for _ in range(100)))
    with pytest.raises(CorruptRecordError, match="^record 99 at position"):
        codec.dispatch_info(buf[:-10], rows)


@pytest.mark.parametrize(
    "table",
    [
        np.zeros(2, dtype=_codec_py.KEYREF_DTYPE),
        np.zeros((2, 2), dtype=_codec_py.RECORD_DTYPE),
        np.zeros(2, dtype=np.dtype(_codec_py.RECORD_DTYPE.descr)),
        [],
        None,
    ],
)
def test_records_must_be_a_record_dtype_table(codec, table):
    with pytest.raises(TypeError, match="records must be a one-dimensional numpy array of RECORD_DTYPE"):
        codec.dispatch_info(b"", table)


def test_buffer_must_be_bytes_like(codec):
    with pytest.raises(TypeError, match="buffer must be a bytes-like object"):
        codec.dispatch_info("text", np.zeros(0, codec.RECORD_DTYPE))


# ---- the twins against each other, and against decode_properties ----

NAMES = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "WAIT", "T", "TAGS "])
ODD_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
VALUES = st.one_of(
    st.sampled_from(["", " ", "a b", " a  b ", "TagA", "3", "-1", "+18", "99", "2147483648", "١", "😀"]),
    st.integers(-5, 40).map(str),
    ODD_TEXT,
    st.lists(st.sampled_from(["k", "é", "", "😀", "key1"]), max_size=5).map(" ".join),
)
PIECE = st.one_of(
    st.tuples(NAMES, VALUES).map(lambda nv: (nv[0] + "\x01" + nv[1]).encode("utf-8")),
    st.binary(max_size=8),
    st.sampled_from([b"\x01", b"\x01\x01", b"TAGS\x01\xff\xfe", b"KEYS\x01\xc3 \xa9"]),
)
PROPERTIES = st.one_of(
    st.lists(PIECE, max_size=8).map(b"\x02".join),
    st.lists(PIECE, max_size=8).map(lambda ps: b"".join(p + b"\x02" for p in ps)),
    st.dictionaries(
        NAMES.filter(lambda n: " " not in n),
        VALUES.filter(lambda v: v and "\x01" not in v and "\x02" not in v),
        max_size=4,
    ),
    st.binary(max_size=64),
)
TOPICS = st.one_of(st.just(SCHEDULE), st.just("TopicTest"), st.just("é#"), st.binary(min_size=1, max_size=20))
RECORDS = st.lists(
    st.fixed_dictionaries(
        {
            "topic": TOPICS,
            "properties": PROPERTIES,
            "body": st.binary(max_size=8),
            "store_timestamp": st.one_of(st.integers(INT64_MIN, INT64_MAX), st.just(T)),
        }
    ),
    max_size=12,
)


def _reference(buf, rows, delay_levels):
    """info and key bytes computed from decode_properties, independently of both twins."""
    expected = []
    for row in rows:
        props = _codec_py.decode_properties(
            buf[row["properties_pos"] : row["properties_pos"] + row["properties_len"]]
        )
        topic = bytes(buf[row["topic_pos"] : row["topic_pos"] + row["topic_len"]])
        enc = lambda s: s.encode("utf-8", "surrogateescape")  # noqa: E731
        tags = props.get("TAGS")
        code = _codec_py.java_hash(tags) if tags else 0
        level = java_int(enc(props["DELAY"])) if "DELAY" in props else None
        if level is not None and topic == SCHEDULE.encode():
            clamped = min(level, len(delay_levels))
            if clamped > 0:
                code = (int(row["store_timestamp"]) + delay_levels[clamped - 1] + 2**63) % 2**64 - 2**63
        keys = ([enc(props["UNIQ_KEY"])] if props.get("UNIQ_KEY") else []) + [
            enc(t) for t in props.get("KEYS", "").split(" ") if t
        ]
        expected.append((enc(tags) if tags else None, code, level or 0, keys))
    return expected


def _observed(buf, rows, info, keys):
    by_record = [[] for _ in rows]
    for k, i in key_bytes(buf, keys):
        by_record[i].append(k)
    return [
        (
            tags_bytes(buf, r) if r["tags_pos"] >= 0 else None,
            int(r["tags_code"]),
            int(r["delay_level"]),
            by_record[i],
        )
        for i, r in enumerate(info)
    ]


@SETTINGS
@given(
    records=RECORDS,
    delay_levels=st.one_of(
        st.just(_codec_py.DEFAULT_DELAY_LEVELS_MS), st.lists(st.integers(INT64_MIN, INT64_MAX), max_size=5)
    ),
)
def test_both_twins_agree_with_decode_properties_on_random_records(records, delay_levels):
    buf, rows = batch(*records)
    twins = [_codec_py] + ([_codec_c] if _codec_c is not None else [])
    results = [twin.dispatch_info(buf, rows, delay_levels) for twin in twins]
    for info, keys in results:
        assert _observed(buf, rows, info, keys) == _reference(buf, rows, delay_levels)
        assert (keys["record"][1:] >= keys["record"][:-1]).all()
        assert not ((info["tags_pos"] < 0) & (info["tags_len"] != 0)).any()
    for info, keys in results[1:]:
        assert info.tobytes() == results[0][0].tobytes() and keys.tobytes() == results[0][1].tobytes()


def _outcome(fn, *args):
    try:
        info, keys = fn(*args)
        return ("ok", info.tobytes(), keys.tobytes())
    except (ValueError, TypeError, OverflowError) as exc:
        return ("raised", type(exc), str(exc))


INT32 = st.integers(INT32_MIN, INT32_MAX)
INT64 = st.one_of(st.integers(INT64_MIN, INT64_MAX), st.integers(-3, 400))


@needs_compiled
@SETTINGS
@given(records=RECORDS.filter(bool), data=st.data())
def test_twins_agree_on_hostile_tables(records, data):
    buf, rows = batch(*records)
    rows = rows.copy()
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(rows) - 1))
        field = data.draw(st.sampled_from(["topic_pos", "topic_len", "properties_pos", "properties_len"]))
        rows[i][field] = data.draw(INT64 if field.endswith("pos") else INT32)
    cut = data.draw(st.integers(0, len(buf)))
    assert _outcome(_codec_c.dispatch_info, buf[:cut], rows) == _outcome(
        _codec_py.dispatch_info, buf[:cut], rows
    )


@needs_compiled
def test_twins_agree_on_a_large_batch():
    rng = np.random.default_rng(20240601)
    print("seed 20240601")
    records = [
        {
            "topic": SCHEDULE if i % 7 == 0 else "TopicTest",
            "store_timestamp": T + i,
            "properties": {
                "TAGS": f"tag{i % 13}",
                "KEYS": f"order{i} user{i % 100}",
                "UNIQ_KEY": f"{i:032X}",
                "DELAY": str(int(rng.integers(-2, 25))),
            },
        }
        for i in range(3000)
    ]
    buf, rows = batch(*records)
    (ci, ck), (pi, pk) = _codec_c.dispatch_info(buf, rows), _codec_py.dispatch_info(buf, rows)
    assert ci.tobytes() == pi.tobytes() and ck.tobytes() == pk.tobytes() and len(ck) == 9000


# ---- IndexFile.put_refs ----


def new_file(index, slots, items):
    buf = bytearray(index.index_file_size(slots, items))
    return index.IndexFile(buf, slots, items), buf


def put_key_sequence(index, slots, items, buf, rows, keys, base_offset, start=0, prepare=None):
    """(first key not stored, file bytes) of put_key over keys[start:] with decoded strings."""
    f, out = new_file(index, slots, items)
    if prepare:
        prepare(f)
    for k in range(start, len(keys)):
        row = rows[keys[k]["record"]]
        topic = bytes(buf[row["topic_pos"] : row["topic_pos"] + row["topic_len"]])
        key = bytes(buf[keys[k]["key_pos"] : keys[k]["key_pos"] + keys[k]["key_len"]])
        text = (topic + b"#" + key).decode("utf-8", "surrogateescape")
        if not f.put_key(text, base_offset + int(row["position"]), int(row["store_timestamp"])):
            return k, bytes(out)
    return len(keys), bytes(out)


def many_records(n, topic="TopicTest"):
    return batch(
        *(
            {
                "topic": topic,
                "store_timestamp": T + 1000 * i,
                "properties": {"UNIQ_KEY": f"U{i}", "KEYS": f"order{i} user{i % 5}", "TAGS": "t"},
            }
            for i in range(n)
        ),
        prefix=b"\0" * 64,
    )


class _Prev:
    def __init__(self, end_phy_offset, end_timestamp):
        self.end_phy_offset, self.end_timestamp = end_phy_offset, end_timestamp


def test_vector7_index_item_through_put_refs(codec, index):
    buf, rows = batch({"topic": "TopicTest", "store_timestamp": T, "properties": {"KEYS": "OrderID001"}})
    _, keys = codec.dispatch_info(buf, rows)
    f, out = new_file(index, 5, 4)
    f.init_from(_Prev(1, 1_700_000_000_000))
    assert f.put_refs(buf, rows, keys, 0) == 1
    slot = 1231272886 % 5
    assert struct.unpack_from(">i", out, 40 + 4 * slot)[0] == 1
    assert bytes(out[40 + 20 + 20 : 40 + 20 + 40]) == bytes.fromhex(
        "4963BBB6 0000000000000000 00000000 00000000"
    )


@pytest.mark.parametrize("key", ["OrderID1yoiddi"])
def test_vector8_min_value_key_hash_is_zero(codec, index, key):
    buf, rows = batch({"topic": "TopicTest", "store_timestamp": T, "properties": {"KEYS": key}})
    _, keys = codec.dispatch_info(buf, rows)
    assert _codec_py.java_hash("TopicTest#" + key) == INT32_MIN
    f, out = new_file(index, 7, 4)
    assert f.put_refs(buf, rows, keys, 500) == 1
    assert struct.unpack_from(">i", out, 40)[0] == 1  # slot 0
    assert ITEM.unpack_from(out, 40 + 28 + 20) == (0, 500 + int(rows[0]["position"]), 0, 0)
    assert f.select("TopicTest#" + key, 4, 0, INT64_MAX) == [500 + int(rows[0]["position"])]


def test_put_refs_writes_what_put_key_writes(codec, index):
    buf, rows = many_records(40)
    _, keys = codec.dispatch_info(buf, rows)
    f, out = new_file(index, 11, 1000)
    assert f.put_refs(buf, rows, keys, 12345) == len(keys) == 120
    assert put_key_sequence(index, 11, 1000, buf, rows, keys, 12345) == (120, bytes(out))


def test_put_refs_fills_a_small_file_and_resumes_in_the_next(codec, index):
    buf, rows = many_records(60)
    _, keys = codec.dispatch_info(buf, rows)
    first, out1 = new_file(index, 7, 101)  # 100 usable items
    assert first.put_refs(buf, rows, keys, 0) == 100
    assert first.is_full and put_key_sequence(index, 7, 101, buf, rows, keys, 0) == (100, bytes(out1))
    assert (
        first.put_refs(buf, rows, keys, 0, 100) == 100
        and bytes(out1) == put_key_sequence(index, 7, 101, buf, rows, keys, 0)[1]
    )  # full: nothing more, nothing written
    second, out2 = new_file(index, 7, 101)
    second.init_from(first)
    assert second.put_refs(buf, rows, keys, 0, 100) == 180
    assert put_key_sequence(index, 7, 101, buf, rows, keys, 0, 100, prepare=lambda f: f.init_from(first)) == (
        180,
        bytes(out2),
    )


def test_put_refs_start_at_the_end_stores_nothing(codec, index):
    buf, rows = many_records(3)
    _, keys = codec.dispatch_info(buf, rows)
    f, out = new_file(index, 7, 20)
    assert f.put_refs(buf, rows, keys, 0, len(keys)) == len(keys)
    assert f.put_refs(buf, rows, keys[:0], 0) == 0
    assert not any(out)


@pytest.mark.parametrize("start", [-1, 10, 2**70])
def test_put_refs_start_out_of_range(codec, index, start):
    buf, rows = many_records(3)
    _, keys = codec.dispatch_info(buf, rows)
    f, _ = new_file(index, 7, 20)
    with pytest.raises(ValueError, match=f"start {start} is out of range for 9 keys"):
        f.put_refs(buf, rows, keys, 0, start)


def _hostile(codec, field, value):
    buf, rows = many_records(4)
    _, keys = codec.dispatch_info(buf, rows)
    rows, keys = rows.copy(), keys.copy()
    table, column = (keys, field[5:]) if field.startswith("keys.") else (rows, field)
    table[column][-1] = value
    return buf, rows, keys


@pytest.mark.parametrize(
    "field, value, error, message",
    [
        ("keys.record", 4, CorruptRecordError, "key 11 names record 4; there are 4 records"),
        ("keys.record", -1, CorruptRecordError, "key 11 names record -1; there are 4 records"),
        ("keys.key_pos", 10**9, CorruptRecordError, "key 11: its bytes .* lie outside the buffer of"),
        ("keys.key_pos", -1, CorruptRecordError, "key 11: its bytes"),
        ("keys.key_len", -1, CorruptRecordError, "key 11: its bytes"),
        ("keys.key_pos", INT64_MAX, CorruptRecordError, "key 11: its bytes"),
        ("topic_pos", 10**9, CorruptRecordError, "key 9: the topic bytes .* of record 3 lie outside"),
        ("topic_len", -1, CorruptRecordError, "key 9: the topic bytes"),
        ("topic_pos", INT64_MAX, CorruptRecordError, "key 9: the topic bytes"),
        ("position", -1, CorruptRecordError, "key 9: record 3 at position -1 lies outside"),
        ("position", 10**9, CorruptRecordError, "key 9: record 3 at position"),
    ],
)
def test_put_refs_rejects_hostile_tables_and_writes_nothing(codec, index, field, value, error, message):
    buf, rows, keys = _hostile(codec, field, value)
    f, out = new_file(index, 7, 50)
    with pytest.raises(error, match=message):
        f.put_refs(buf, rows, keys, 0)
    assert not any(out)


def test_put_refs_checks_every_key_of_a_large_batch_before_storing_any(codec, index):
    buf, rows = many_records(50)
    _, keys = codec.dispatch_info(buf, rows)
    keys = keys.copy()
    keys["record"][-1] = 50
    f, out = new_file(index, 7, 1000)
    with pytest.raises(CorruptRecordError, match="key 149 names record 50; there are 50 records"):
        f.put_refs(buf, rows, keys, 0)
    assert not any(out)


def test_put_refs_rejects_an_offset_beyond_a_java_long(codec, index):
    buf, rows = many_records(2)
    _, keys = codec.dispatch_info(buf, rows)
    f, out = new_file(index, 7, 50)
    with pytest.raises(OverflowError, match="key 0: CommitLog offset"):
        f.put_refs(buf, rows, keys, INT64_MAX - 10)
    with pytest.raises(OverflowError, match="base_offset"):
        f.put_refs(buf, rows, keys, 2**63)
    assert not any(out)


def test_put_refs_checks_its_tables_and_its_file(codec, index):
    buf, rows = many_records(2)
    _, keys = codec.dispatch_info(buf, rows)
    f, _ = new_file(index, 7, 50)
    with pytest.raises(TypeError, match="records must be"):
        f.put_refs(buf, keys, keys, 0)
    with pytest.raises(TypeError, match="keys must be a one-dimensional numpy array of KEYREF_DTYPE"):
        f.put_refs(buf, rows, rows, 0)
    ro = index.IndexFile(bytes(index.index_file_size(7, 50)), 7, 50)
    with pytest.raises(StoreReadOnlyError):
        ro.put_refs(buf, rows, keys, 0)
    f.release()
    with pytest.raises(ValueError, match="released"):
        f.put_refs(buf, rows, keys, 0)


KEY_TEXT = st.one_of(
    st.text(
        st.characters(blacklist_characters=" \x01\x02", blacklist_categories=("Cs",)), min_size=1, max_size=10
    ),
    st.sampled_from(["OrderID1yoiddi", "polygenelubricants", "é", "😀"]),
)
REF_RECORDS = st.lists(
    st.fixed_dictionaries(
        {
            "topic": st.one_of(st.just("TopicTest"), st.just("é😀"), st.binary(min_size=1, max_size=6)),
            "properties": st.one_of(
                st.fixed_dictionaries(
                    {"KEYS": st.lists(KEY_TEXT, min_size=1, max_size=4).map(" ".join)},
                    optional={"UNIQ_KEY": KEY_TEXT},
                ),
                st.lists(st.binary(max_size=6), max_size=4).map(
                    lambda ks: b"KEYS\x01" + b" ".join(ks) + b"\x02"
                ),
            ),
            "body": st.just(b""),
            "store_timestamp": st.one_of(
                st.just(T), st.integers(0, 2**50), st.integers(INT64_MIN, INT64_MAX)
            ),
        }
    ),
    min_size=1,
    max_size=30,
)


@SETTINGS
@given(
    records=REF_RECORDS,
    slots=st.integers(1, 9),
    items=st.integers(1, 40),
    begin=st.integers(-5, 2**45),
    base_offset=st.integers(0, 2**40),
    start=st.integers(0, 5),
)
def test_put_refs_matches_put_key_on_both_twins(records, slots, items, begin, base_offset, start):
    buf, rows = batch(*records)
    _, keys = _codec_py.dispatch_info(buf, rows)
    start = min(start, len(keys))
    prepare = lambda f: f.init_from(_Prev(7, begin))  # noqa: E731
    expected = put_key_sequence(_index_py, slots, items, buf, rows, keys, base_offset, start, prepare)
    for index in [_index_py] + ([_index_c] if _index_c is not None else []):
        f, out = new_file(index, slots, items)
        prepare(f)
        assert (f.put_refs(buf, rows, keys, base_offset, start), bytes(out)) == expected, index.__name__


def _put_outcome(index, slots, items, buf, rows, keys, base_offset):
    f, out = new_file(index, slots, items)
    try:
        return ("ok", f.put_refs(buf, rows, keys, base_offset), bytes(out))
    except (ValueError, TypeError, OverflowError) as exc:
        return ("raised", type(exc), str(exc), bytes(out))


@needs_compiled
@SETTINGS
@given(records=REF_RECORDS, data=st.data())
def test_put_refs_twins_agree_on_hostile_tables(records, data):
    buf, rows = batch(*records)
    _, keys = _codec_py.dispatch_info(buf, rows)
    rows, keys = rows.copy(), keys.copy()
    for _ in range(data.draw(st.integers(0, 3))):
        if len(keys) and data.draw(st.booleans()):
            k = data.draw(st.integers(0, len(keys) - 1))
            field = data.draw(st.sampled_from(["key_pos", "key_len", "record"]))
            keys[k][field] = data.draw(INT64 if field == "key_pos" else st.one_of(INT32, st.integers(-2, 40)))
        else:
            i = data.draw(st.integers(0, len(rows) - 1))
            field = data.draw(st.sampled_from(["topic_pos", "topic_len", "position"]))
            rows[i][field] = data.draw(INT32 if field == "topic_len" else INT64)
    cut = data.draw(st.integers(0, len(buf)))
    base_offset = data.draw(st.one_of(st.integers(0, 2**40), st.integers(INT64_MIN, INT64_MAX)))
    assert _put_outcome(_index_c, 5, 30, buf[:cut], rows, keys, base_offset) == _put_outcome(
        _index_py, 5, 30, buf[:cut], rows, keys, base_offset
    )


# ---- grouping records by queue (queue_keys, same_queues, recordscan.queue_groups) ----


def _fnv_key(topic: bytes, queue_id: int) -> int:
    h = 0xCBF29CE484222325
    for b in topic:
        h = ((h ^ b) * 0x100000001B3) & (2**64 - 1)
    return ((h ^ (queue_id & 0xFFFFFFFF)) * 0x100000001B3) & (2**64 - 1)


GROUP_TOPICS = ["a", "ab", "abcdefgh", "abcdefghi", "%RETRY%group-x", "%RETRY%group-y", "T" * 127]


@given(
    st.lists(
        st.tuples(st.sampled_from(GROUP_TOPICS), st.integers(INT32_MIN, INT32_MAX) | st.integers(0, 3)),
        min_size=1,
        max_size=40,
    )
)
@SETTINGS
def test_queue_keys_are_fnv1a_of_topic_then_queue_id_and_groups_are_exact(pairs):
    from rocketstore.queues.dispatch import queue_groups

    buf, rows = batch(*({"topic": t, "queue_id": q} for t, q in pairs))
    expected = {}
    for i, (t, q) in enumerate(pairs):
        expected.setdefault((t, q), []).append(i)
    for twin in [_scan_py] + ([_scan_c] if _scan_c is not None else []):
        keys = twin.queue_keys(buf, rows)
        assert keys.dtype == np.uint64
        assert keys.tolist() == [_fnv_key(t.encode(), q) for t, q in pairs]
        groups = {(t, q): sorted(idx.tolist()) for t, q, idx in queue_groups(twin, buf, rows)}
        assert groups == expected


def test_same_queues_compares_topic_bytes_and_queue_ids(scan):
    buf, rows = batch(
        {"topic": "abcdefghiX"},
        {"topic": "abcdefghiY"},
        {"topic": "abcdefghiX", "queue_id": 1},
        {"topic": "abcdefghiX"},
    )
    assert scan.same_queues(buf, rows, [0, 1, 2, 0])
    assert not scan.same_queues(buf, rows, [0, 0, 2, 3])  # the topics differ in their last byte
    assert not scan.same_queues(buf, rows, [0, 1, 0, 3])  # the queue ids differ
    with pytest.raises(IndexError):
        scan.same_queues(buf, rows, [0, 1, 2, 4])
    with pytest.raises(ValueError):
        scan.same_queues(buf, rows, [0, 1, 2])


def test_queue_keys_refuse_topics_outside_the_buffer(scan):
    buf, rows = batch({"topic": "TopicA"}, {"topic": "TopicB"})
    for field, value in (("topic_pos", len(buf) - 2), ("topic_pos", -1), ("topic_len", -3)):
        bad = rows.copy()
        bad[field][1] = value
        with pytest.raises(CorruptRecordError):
            scan.queue_keys(buf, bad)
        with pytest.raises(CorruptRecordError):
            scan.same_queues(buf, bad, [0, 1])


# ---- property_pieces: every kept piece, for columnar readers (the Spark source) ----


def _pieces_as_bytes(buf, pieces, counts):
    """Per record, its (name, value) pairs in order, sliced from ``buf`` at the pieces' spans."""
    out, k = [], 0
    for c in counts.tolist():
        out.append(
            [
                (
                    bytes(buf[p["name_pos"] : p["name_pos"] + p["name_len"]]),
                    bytes(buf[p["value_pos"] : p["value_pos"] + p["value_len"]]),
                )
                for p in pieces[k : k + c]
            ]
        )
        k += c
    assert k == len(pieces)
    return out


def test_property_pieces_keeps_every_piece_in_order_with_duplicates(codec):
    buf, rows = batch(
        {"properties": b"TAGS\x01a\x02bad\x02\x01v\x02n\x01\x02TAGS\x01b\x01c\x02KEYS\x01k1 k2"},
        {"properties": b""},
        {"properties": {"UNIQ_KEY": "u"}},
        prefix=b"\0" * 7,
    )
    pieces, counts = codec.property_pieces(buf, rows)
    assert pieces.dtype == codec.PIECE_DTYPE and counts.dtype == np.int32
    assert _pieces_as_bytes(buf, pieces, counts) == [
        [(b"TAGS", b"a"), (b"TAGS", b"b\x01c"), (b"KEYS", b"k1 k2")],
        [],
        [(b"UNIQ_KEY", b"u")],
    ]


def test_property_pieces_rejects_properties_outside_the_buffer(codec):
    buf, rows = batch({"properties": {"TAGS": "a"}}, {"properties": {"TAGS": "b"}})
    rows = rows.copy()
    rows[1]["properties_len"] = INT32_MAX
    with pytest.raises(CorruptRecordError, match="^record 1 at position .* its properties bytes"):
        codec.property_pieces(buf, rows)
    with pytest.raises(TypeError, match="RECORD_DTYPE"):
        codec.property_pieces(buf, np.zeros(2, dtype=codec.KEYREF_DTYPE))


@SETTINGS
@given(records=RECORDS)
def test_property_pieces_of_both_twins_rebuild_decode_properties(records):
    buf, rows = batch(*records)
    twins = [_codec_py] + ([_codec_c] if _codec_c is not None else [])
    results = [twin.property_pieces(buf, rows) for twin in twins]
    for pieces, counts in results:
        for row, pairs in zip(rows, _pieces_as_bytes(buf, pieces, counts)):
            props = bytes(buf[row["properties_pos"] : row["properties_pos"] + row["properties_len"]])
            expected = _codec_py.decode_properties(props)
            text = lambda b: b.decode("utf-8", "surrogateescape")  # noqa: E731
            assert {text(n): text(v) for n, v in pairs} == expected  # the last duplicate wins
            assert len(pairs) == sum(1 for p in props.split(b"\x02") if 0 < p.find(b"\x01") < len(p) - 1)
    for pieces, counts in results[1:]:
        assert pieces.tobytes() == results[0][0].tobytes() and counts.tobytes() == results[0][1].tobytes()


@needs_compiled
@SETTINGS
@given(records=RECORDS.filter(bool), data=st.data())
def test_property_pieces_twins_agree_on_hostile_tables(records, data):
    buf, rows = batch(*records)
    rows = rows.copy()
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(rows) - 1))
        field = data.draw(st.sampled_from(["properties_pos", "properties_len"]))
        rows[i][field] = data.draw(INT64 if field.endswith("pos") else INT32)
    cut = data.draw(st.integers(0, len(buf)))

    def outcome(fn):
        try:
            pieces, counts = fn(buf[:cut], rows)
            return ("ok", pieces.tobytes(), counts.tobytes())
        except CorruptRecordError as exc:
            return ("raised", str(exc))

    assert outcome(_codec_c.property_pieces) == outcome(_codec_py.property_pieces)


class _CollidingKeys:
    """Scan kernels whose queue_keys gives every record the same 64-bit key (a hash collision)."""

    def __init__(self, scan):
        self._scan = scan

    def __getattr__(self, name):
        return getattr(self._scan, name)

    def queue_keys(self, buffer, records):
        keys = self._scan.queue_keys(buffer, records)
        keys[:] = keys[-1]
        return keys


def test_queue_groups_survive_a_queue_key_collision(scan):
    # Before: a collision raised a bare RuntimeError, and the dispatch thread retried the same
    # range forever. Now the rows are grouped exactly, by topic bytes and queue id.
    from rocketstore.queues.dispatch import queue_groups

    buf, rows = batch(
        {"topic": "TopicA"},
        {"topic": "TopicB"},
        {"topic": "TopicA", "queue_id": 1},
        {"topic": "TopicA"},
        {"topic": "TopicB"},
    )
    groups = {(t, q): idx.tolist() for t, q, idx in queue_groups(_CollidingKeys(scan), buf, rows)}
    assert groups == {("TopicA", 0): [0, 3], ("TopicB", 0): [1, 4], ("TopicA", 1): [2]}


# ---- dispatch_few: a follower's catch-up of a put or a few, without arrays ----

DELAYS = np.array(_codec_py.DEFAULT_DELAY_LEVELS_MS, dtype=np.int64)


def few_model(buf, lo, hi, delays, max_records):
    """dispatch_few as decode_batch (no CRC check) and dispatch_info give it."""
    rows, stop, reason = _codec_py.decode_batch(buf, lo, hi, check_crc=False)
    if len(rows) > max_records:
        return None
    info, keys = _codec_py.dispatch_info(buf, rows, delays.tolist())
    out = []
    for i, row in enumerate(rows):
        at, n = int(row["topic_pos"]), int(row["topic_len"])
        out.append(
            (
                *(int(row[f]) for f in ("position", "size", "queue_id", "queue_offset", "sys_flag")),
                int(row["store_timestamp"]),
                bytes(buf[at : at + n]).decode("utf-8", "surrogateescape"),
                int(info["tags_code"][i]),
                int((keys["record"] == i).sum()),
            )
        )
    return stop, reason, tuple(out)


RECORD = st.fixed_dictionaries(
    {
        "topic": st.sampled_from(["TopicTest", SCHEDULE, "тема", "T"]),
        "queue_id": st.integers(0, 7),
        "queue_offset": st.integers(0, 2**40),
        "sys_flag": st.sampled_from([0, 0x4, 0x8, 0xC]),
        "store_timestamp": st.integers(0, 2**62),
        "properties": st.dictionaries(
            st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "a"]),
            st.sampled_from(["TagA", "тег", "k1 k2", "  x  ", "3", "18", "99", "-1", "abc"]),
        ),
    }
)


@SETTINGS
@given(
    records=st.lists(RECORD, max_size=6),
    cut=st.integers(0, 400),
    max_records=st.integers(0, 5),
    delays=st.lists(st.integers(INT64_MIN, INT64_MAX), max_size=5),
)
def test_dispatch_few_gives_what_the_batch_path_gives(records, cut, max_records, delays):
    buf = b"\0" * 8 + b"".join(_codec_py.encode_record(body=b"x", **r) for r in records)
    hi = max(8, len(buf) - cut)  # a record cut in two at the end, sometimes
    twins = [_codec_py] + ([_codec_c] if _codec_c is not None else [])
    for table in (DELAYS, np.array(delays, dtype=np.int64)):
        want = few_model(buf, 8, hi, table, max_records)
        for twin in twins:
            assert twin.dispatch_few(buf, 8, hi, table, max_records) == want
            assert twin.dispatch_few(memoryview(buf)[:hi], 8, hi, table, max_records) == want


def test_dispatch_few_stops_where_decode_batch_stops(codec):
    buf, rows = batch({"properties": {"TAGS": "A"}}, {"properties": {"KEYS": "a b"}}, prefix=b"\0" * 4)
    damaged = bytearray(buf)
    damaged[int(rows[1]["position"]) + 4] ^= 0xFF  # the second record's magic code
    got = codec.dispatch_few(bytes(damaged), 4, len(buf), DELAYS, 4)
    assert got == few_model(bytes(damaged), 4, len(buf), DELAYS, 4)
    assert got[0] == int(rows[1]["position"]) and got[1] != _codec_py.STOP_LIMIT and len(got[2]) == 1
    assert codec.dispatch_few(buf, 4, len(buf), DELAYS, 1) is None  # two records: more than one
    assert codec.dispatch_few(buf, 4, len(buf), DELAYS, 2)[2][1][-1] == 2  # its two keys
    assert codec.dispatch_few(buf, 4, 4, DELAYS, 0) == (4, _codec_py.STOP_LIMIT, ())


@pytest.mark.parametrize(
    "args, error",
    [
        ((0, 10, DELAYS, 17), ValueError),
        ((0, 10, DELAYS, -1), ValueError),
        ((0, 10, [1000], 4), TypeError),
        ((0, 10, DELAYS.astype(np.int32), 4), TypeError),
        ((0, 10, DELAYS.reshape(2, 9), 4), TypeError),
        ((5, 4, DELAYS, 4), ValueError),
        ((0, 999, DELAYS, 4), ValueError),
        ((-1, 10, DELAYS, 4), ValueError),
    ],
)
def test_dispatch_few_checks_its_arguments(codec, args, error):
    with pytest.raises(error):
        codec.dispatch_few(b"\0" * 64, *args)
