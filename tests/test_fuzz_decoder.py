"""Hostile bytes against every decoder of both twins.

Valid records, properties, message ids, index files and ConsumeQueue files are mutated — bit flips,
truncations, length fields set to -1 / 0 / huge / past the end, wrong or swapped magic codes,
IPv6 flags flipped so every later field shifts — or replaced by random bytes. For every input:

* only the documented exceptions come out (``CorruptRecordError`` with a ``reason`` and the
  ``position`` asked for, ``InvalidMessageIdError``, ``StoreConfigError`` ...);
* nothing is read outside the bytes given: a scan of ``buffer[start:end]`` gives the same rows as
  a scan of a copy that ends at ``end``, and every row lies inside the window;
* a record that decodes with ``check_crc=True`` carries the CRC of its body;
* the compiled and the pure-Python twin give the same answer, or both raise the same error.

The suite runs a modest number of examples; ``ROCKETSTORE_FUZZ_EXAMPLES=N`` runs N per test (the
AddressSanitizer run uses it). A segfault or an out-of-bounds read in the compiled twin kills the
test process (faulthandler prints where) or, under ASan, prints a report.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rocketstore import _impl
from rocketstore.errors import (
    CorruptRecordError,
    InvalidMessageError,
    InvalidMessageIdError,
    MessageNotFoundError,
    RocketStoreError,
    StoreConfigError,
)
from rocketstore.format import _codec_py
from rocketstore.queues import _index_py
from rocketstore.queues.consumequeue import CQ_UNIT_SIZE, PLACEHOLDER_SIZE, ConsumeQueue

# ---- the twins under test ----------------------------------------------------------------------

if _impl.COMPILED is None and _impl.REQUIRE_EXTENSIONS:  # pragma: no cover - depends on the build
    raise ImportError(f"compiled modules required but missing: {_impl.IMPORT_ERROR}")
TWINS = [_impl.PURE] + ([_impl.COMPILED] if _impl.COMPILED is not None else [])
CODECS = [t.codec for t in TWINS]
INDEXES = [t.index for t in TWINS]

_EXAMPLES = int(os.environ.get("ROCKETSTORE_FUZZ_EXAMPLES", "0") or 0)


def fuzz_settings(examples: int):
    """``examples`` per test, or ROCKETSTORE_FUZZ_EXAMPLES when set (longer runs, ASan)."""
    return settings(
        max_examples=_EXAMPLES or examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


def test_the_compiled_twin_is_fuzzed_unless_extensions_are_off():
    """Guard: a missing build must not turn the twin comparisons into one-twin runs silently."""
    if _impl.NO_EXTENSIONS:
        pytest.skip("ROCKETSTORE_NO_EXTENSIONS=1: only the pure twin is fuzzed")
    if _impl.COMPILED is None:
        pytest.skip(f"compiled modules not built: {_impl.IMPORT_ERROR}")
    assert [t.name for t in TWINS] == ["py", "c"]


INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
INT32 = st.integers(INT32_MIN, INT32_MAX)
INT64 = st.integers(INT64_MIN, INT64_MAX)
T0 = 1_700_000_000_000
STOP_REASONS = {
    _codec_py.STOP_BLANK,
    _codec_py.STOP_END,
    _codec_py.STOP_TRUNCATED,
    _codec_py.STOP_CORRUPT,
    _codec_py.STOP_BAD_CRC,
}


def outcome(fn, *args, **kwargs):
    """("ok", value) or ("raised", type, message, reason); anything undocumented propagates."""
    try:
        return ("ok", fn(*args, **kwargs))
    except RocketStoreError as exc:
        return ("raised", type(exc), str(exc), getattr(exc, "reason", None))


def agree(results: list, what) -> None:
    """Every twin gave the same outcome."""
    assert all(r == results[0] for r in results[1:]), (what, results)


def message_dict(m) -> dict:
    """The fields, ``body`` as stored (a mutated sysFlag may claim a compressed body)."""
    from rocketstore.message import MESSAGE_FIELDS

    d = {name: getattr(m, name) for name in MESSAGE_FIELDS if name != "body"}
    d["body"] = bytes(m.stored_body)
    return d


# ---- valid records, and their field positions ----------------------------------------------------

hosts = st.tuples(st.sampled_from(["10.0.0.1", "127.0.0.1", "::1", "fe80::1:2"]), st.integers(0, 65535))
prop_names = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "WAIT", "x", "TAGS\x01"])
prop_values = st.one_of(
    st.sampled_from(
        [
            "TagA",
            "a b  c",
            " ",
            "3",
            "-1",
            "99999999999",
            "2147483648",
            "7F0000010001000000010000000000000001",
            "é",
            "\udcff",
        ]
    ),
    st.text(max_size=12),
)
records = st.fixed_dictionaries(
    {
        "topic": st.sampled_from(["T", "TopicTest", "SCHEDULE_TOPIC_XXXX", "%RETRY%g", "é" * 5, "t" * 127]),
        "body": st.binary(max_size=200),
        "properties": st.one_of(
            st.binary(max_size=60),
            st.dictionaries(prop_names, prop_values, max_size=4)
            .map(
                lambda d: {
                    k: v.replace("\x01", "").replace("\x02", "") for k, v in d.items() if "\x01" not in k
                }
            )
            .map(lambda d: {k: v for k, v in d.items() if v}),
        ),  # "": refused
        "queue_id": INT32,
        "queue_offset": INT64,
        "physical_offset": INT64,
        "sys_flag": st.sampled_from([0, 1, 2, 4, 8, 12, 0x40, 0x80, 0x700]),
        "store_timestamp": st.one_of(st.just(T0), INT64),
        "born_host": hosts,
        "store_host": hosts,
        "body_crc": st.one_of(st.none(), st.none(), INT32),
    }
)


def encode(fields: dict, v2: bool) -> bytes:
    """One record (V1 as encode_record writes it, or rewritten with the V2 magic's 2-byte topic length)."""
    data = _codec_py.encode_record(**fields)
    if not v2:
        return data
    row = _codec_py.decode_batch(data, check_crc=False)[0][0]
    at = int(row["topic_pos"]) - 1
    out = bytearray(data[:at]) + struct.pack(">h", data[at]) + data[at + 1 :]
    struct.pack_into(">ii", out, 0, len(out), _codec_py.MAGIC_V2)
    return bytes(out)


def field_positions(data: bytes) -> list[int]:
    """Where the length, magic and flag fields of each record in ``data`` are (before mutation)."""
    rows = _codec_py.decode_batch(data, check_crc=False)[0]
    found = []
    for row in rows:
        pos = int(row["position"])
        topic_len_size = 2 if int(row["magic"]) == _codec_py.MAGIC_V2 else 1
        found += [
            pos,
            pos + 4,
            pos + 36,
            int(row["body_pos"]) - 4,
            int(row["topic_pos"]) - topic_len_size,
            int(row["properties_pos"]) - 2,
        ]
    return found


@st.composite
def record_bytes(draw, max_records=4):
    """(buffer, record starts, field positions): a few records, maybe a BLANK, maybe a tail."""
    chunks = []
    for fields in draw(st.lists(records, min_size=1, max_size=max_records)):
        try:
            chunks.append(encode(fields, draw(st.booleans())))
        except RocketStoreError:
            pass
        if draw(st.integers(0, 9)) == 0:  # a BLANK end-of-file record, then filler
            chunks.append(struct.pack(">ii", 8 + 13, _codec_py.MAGIC_BLANK) + bytes(13))
    data = b"".join(chunks) + draw(st.sampled_from([b"", bytes(8), bytes(100), b"\xff" * 9]))
    starts = [int(p) for p in _codec_py.decode_batch(data, check_crc=False)[0]["position"]]
    return data, starts, field_positions(data)


def interesting_ints(size: int, pos: int):
    """Values a hostile length or magic field takes."""
    return st.one_of(
        st.sampled_from(
            [
                -1,
                0,
                1,
                4,
                8,
                90,
                91,
                92,
                127,
                128,
                255,
                32767,
                -32768,
                INT32_MAX,
                INT32_MIN,
                size,
                size - pos,
                size - pos + 1,
                size - pos - 1,
                _codec_py.MAGIC_V1,
                _codec_py.MAGIC_V2,
                _codec_py.MAGIC_BLANK,
                0x10,
                0x20,
                0x30,
            ]
        ),
        INT32,
    )


@st.composite
def mutated(draw, max_records=4):
    """Valid records after a handful of hostile edits, or plain random bytes."""
    if draw(st.integers(0, 9)) == 0:
        data = draw(st.binary(max_size=400))
        return data, list(range(0, len(data), 7)), []
    data, starts, fields = draw(record_bytes(max_records))
    buf = bytearray(data)
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["flip", "set32", "set16", "set8", "cut", "zero", "insert", "delete"]))
        if not buf:
            break
        if fields and draw(st.booleans()):
            at = draw(st.sampled_from(fields)) % len(buf)
        else:
            at = draw(st.integers(0, len(buf) - 1))
        if kind == "flip":
            buf[at] ^= 1 << draw(st.integers(0, 7))
        elif kind in ("set32", "set16", "set8"):
            width = {"set32": 4, "set16": 2, "set8": 1}[kind]
            value = draw(interesting_ints(len(buf), at)) & ((1 << (8 * width)) - 1)
            buf[at : at + width] = value.to_bytes(width, "big")[: len(buf) - at]
        elif kind == "cut":
            del buf[draw(st.integers(0, len(buf))) :]
        elif kind == "zero":
            n = draw(st.integers(1, 64))
            buf[at : at + n] = bytes(len(buf[at : at + n]))
        elif kind == "insert":
            buf[at:at] = draw(st.binary(min_size=1, max_size=16))
        else:
            del buf[at : at + draw(st.integers(1, 16))]
    return bytes(buf), starts, fields


# ---- decode_record ---------------------------------------------------------------------------------


def check_decoded(data: bytes, pos: int, m, check_crc: bool) -> None:
    """A decoded record lies inside data and, when CRC-checked, carries its body's CRC."""
    assert 0 < m.size <= len(data) - pos
    if check_crc and len(m.stored_body):
        assert zlib.crc32(bytes(m.stored_body)) & 0x7FFFFFFF == m.body_crc


def decode_everywhere(data: bytes, positions) -> None:
    positions = sorted({p for p in positions if 0 <= p <= len(data)} | {0, len(data)})
    for pos in positions:
        for check_crc in (True, False):
            results = []
            for codec in CODECS:
                got = outcome(codec.decode_record, data, pos, check_crc=check_crc)
                if got[0] == "ok":
                    check_decoded(data, pos, got[1], check_crc)
                    view = codec.decode_record(bytearray(data), pos, check_crc=check_crc, copy_body=False)
                    assert message_dict(view) == message_dict(got[1])
                    got = ("ok", message_dict(got[1]))
                else:
                    assert got[1] is CorruptRecordError and got[3] in STOP_REASONS, got
                    with pytest.raises(CorruptRecordError) as info:
                        codec.decode_record(data, pos, check_crc=check_crc)
                    assert info.value.position == pos
                results.append(got)
            agree(results, ("decode_record", pos, check_crc))


@fuzz_settings(300)
@given(case=mutated())
def test_decode_record_on_mutated_records_raises_only_corrupt_record_and_twins_agree(case):
    data, starts, fields = case
    decode_everywhere(data, starts + [f - 4 for f in fields] + fields)


@fuzz_settings(100)
@given(data=st.binary(max_size=300), prefix=st.sampled_from([b"", "v1", "v2", "blank"]))
def test_decode_record_on_random_bytes_behind_a_magic_code(data, prefix):
    if prefix:
        magic = {"v1": _codec_py.MAGIC_V1, "v2": _codec_py.MAGIC_V2, "blank": _codec_py.MAGIC_BLANK}[prefix]
        data = struct.pack(">ii", len(data) + 8, magic) + data
    decode_everywhere(data, range(0, min(len(data), 24)))


@pytest.mark.parametrize("twin", TWINS, ids=[t.name for t in TWINS])
@pytest.mark.parametrize("pos", [-1, 1 << 70, "0", 1.0, None])
def test_decode_record_position_outside_the_buffer_is_a_value_or_type_error(twin, pos):
    with pytest.raises((ValueError, TypeError)) as info:
        twin.codec.decode_record(b"x" * 100, pos)
    assert not isinstance(info.value, CorruptRecordError)


# ---- decode_batch: windows, limits, and the rows' bounds -------------------------------------------


def check_rows(data: bytes, start: int, end: int, rows, stop: int, reason: int, max_records: int) -> None:
    assert start <= stop <= end
    assert reason in STOP_REASONS | {_codec_py.STOP_LIMIT}
    if reason == _codec_py.STOP_LIMIT:
        assert stop == end or len(rows) == max_records
    expect = start
    for row in rows:
        pos, size = int(row["position"]), int(row["size"])
        assert pos == expect and size >= _codec_py.RECORD_FIXED_LENGTH
        for name in ("body", "topic", "properties"):
            lo, n = int(row[name + "_pos"]), int(row[name + "_len"])
            assert pos <= lo and n >= 0 and lo + n <= pos + size, (name, row)
        expect += size
    assert expect == stop


@fuzz_settings(250)
@given(case=mutated(), data=st.data())
def test_decode_batch_windows_never_read_past_end_and_twins_agree(case, data):
    buf, starts, _fields = case
    size = len(buf)
    start = data.draw(st.one_of(st.sampled_from(starts or [0]), st.integers(0, size)), label="start")
    start = min(start, size)
    end = data.draw(st.one_of(st.just(size), st.integers(start, size)), label="end")
    max_records = data.draw(st.sampled_from([-1, -1, 0, 1, 2, 1 << 40]), label="max_records")
    check_crc = data.draw(st.booleans(), label="check_crc")
    results = []
    for codec in CODECS:
        rows, stop, reason = codec.decode_batch(buf, start, end, check_crc=check_crc, max_records=max_records)
        check_rows(buf, start, end, rows, stop, reason, max_records)
        # the bytes past `end` play no part: the same scan over a copy that ends there
        cut_rows, cut_stop, cut_reason = codec.decode_batch(
            buf[:end], start, check_crc=check_crc, max_records=max_records
        )
        assert (cut_rows.tobytes(), cut_stop, cut_reason) == (rows.tobytes(), stop, reason)
        # ... nor the bytes before `start`, up to the shift of every position
        own, own_stop, own_reason = codec.decode_batch(
            buf[start:end], check_crc=check_crc, max_records=max_records
        )
        assert (own_stop + start, own_reason) == (stop, reason)
        assert (own["position"] + start).tolist() == rows["position"].tolist()
        for row in rows:
            m = codec.record_from_row(buf, row)
            assert m == codec.decode_record(buf, int(row["position"]), check_crc=check_crc)
            check_decoded(buf, int(row["position"]), m, check_crc)
        results.append((rows.tobytes(), stop, reason))
    agree(results, "decode_batch")


@pytest.mark.parametrize("twin", TWINS, ids=[t.name for t in TWINS])
@pytest.mark.parametrize("max_records", [2, 5, 65536, -1])
def test_decode_batch_stops_at_a_blank_even_when_max_records_exceeds_what_the_range_can_hold(
    twin, max_records
):
    """Regression: the compiled twin clamped max_records to range // 91 and so stopped with
    STOP_LIMIT right before a BLANK (recovery would take that for the end of the CommitLog)."""
    record = _codec_py.encode_record(topic="T", body=b"")  # 92 bytes: range // 91 == 1
    data = record + struct.pack(">ii", 8, _codec_py.MAGIC_BLANK)
    rows, stop, reason = twin.codec.decode_batch(data, max_records=max_records)
    assert (len(rows), stop, reason) == (1, len(record), _codec_py.STOP_BLANK)


@pytest.mark.parametrize("twin", TWINS, ids=[t.name for t in TWINS])
@pytest.mark.parametrize("start, end", [(-1, None), (5, 4), (0, 101), (101, None), (0, 1 << 70), ("0", None)])
def test_decode_batch_window_outside_the_buffer_is_a_value_or_type_error(twin, start, end):
    with pytest.raises((ValueError, TypeError)) as info:
        twin.codec.decode_batch(b"x" * 100, start, end)
    assert not isinstance(info.value, CorruptRecordError)


# ---- dispatch_info and record_from_row on decoded and on hostile rows --------------------------------

ROW_FIELDS = [
    "position",
    "size",
    "body_pos",
    "body_len",
    "topic_pos",
    "topic_len",
    "properties_pos",
    "properties_len",
    "store_timestamp",
    "sys_flag",
    "born_host",
    "store_host",
    "magic",
]


def hostile_rows(draw, rows, size: int):
    """``rows`` with some fields set to values pointing anywhere (or a table of random bytes)."""
    if draw(st.integers(0, 5)) == 0:
        raw = draw(st.binary(min_size=0, max_size=4 * _codec_py.RECORD_DTYPE.itemsize))
        raw = raw[: len(raw) - len(raw) % _codec_py.RECORD_DTYPE.itemsize]
        return np.frombuffer(raw, dtype=_codec_py.RECORD_DTYPE).copy()
    rows = rows.copy()
    if not len(rows):
        return rows
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(rows) - 1))
        name = draw(st.sampled_from(ROW_FIELDS))
        if name in ("born_host", "store_host"):
            rows[name][i] = draw(st.binary(max_size=16))
            continue
        bits = 64 if rows.dtype[name] == np.dtype("=i8") else 32
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        rows[name][i] = draw(
            st.one_of(
                st.sampled_from([-1, 0, size, size - 1, size + 1, lo, hi, hi - size]), st.integers(lo, hi)
            )
        )
    return rows


@fuzz_settings(200)
@given(case=mutated(), data=st.data())
def test_dispatch_info_and_record_from_row_on_hostile_rows_raise_only_documented_errors(case, data):
    buf, _starts, _fields = case
    rows = _codec_py.decode_batch(buf, check_crc=False)[0]
    if data.draw(st.booleans(), label="hostile"):
        rows = hostile_rows(data.draw, rows, len(buf))
    delays = data.draw(
        st.sampled_from([_codec_py.DEFAULT_DELAY_LEVELS_MS, (), (1,), (INT64_MAX, INT64_MIN)]), label="delays"
    )
    results = []
    for codec in CODECS:
        got = outcome(codec.dispatch_info, buf, rows, delays)
        if got[0] == "ok":
            info, keys = got[1]
            assert len(info) == len(rows)
            for key in keys:
                assert 0 <= key["record"] < len(rows)
                assert (
                    key["key_pos"] >= 0 and key["key_len"] > 0 and key["key_pos"] + key["key_len"] <= len(buf)
                )
            for row, inf in zip(rows, info):
                if inf["tags_pos"] >= 0:
                    lo, n = int(inf["tags_pos"]), int(inf["tags_len"])
                    assert lo + n <= len(buf)
                    if (
                        bytes(buf[int(row["topic_pos"]) : int(row["topic_pos"]) + int(row["topic_len"])])
                        != b"SCHEDULE_TOPIC_XXXX"
                    ):
                        assert inf["tags_code"] == _codec_py.java_hash_bytes(buf[lo : lo + n])
            got = ("ok", info.tobytes(), keys.tobytes())
        else:
            assert got[1] is CorruptRecordError, got
        results.append(got)
    agree(results, "dispatch_info")
    for row in rows[:4]:
        results = []
        for codec in CODECS:
            try:
                results.append(("ok", message_dict(codec.record_from_row(buf, row))))
            except ValueError as exc:
                assert "row does not describe a record inside this buffer" in str(exc)
                results.append(("raised", type(exc), str(exc)))
        agree(results, "record_from_row")


# ---- properties, message ids ---------------------------------------------------------------------


@fuzz_settings(200)
@given(
    data=st.one_of(
        st.binary(max_size=200),
        st.lists(
            st.sampled_from([b"\x01", b"\x02", b"TAGS", b"KEYS", b"a", b"\xff", b"\xed\xa0\x80"]), max_size=40
        ).map(b"".join),
    ),
    kind=st.sampled_from([bytes, bytearray, memoryview]),
)
def test_decode_properties_never_raises_on_any_bytes_and_twins_agree(data, kind):
    results = [codec.decode_properties(kind(data)) for codec in CODECS]
    agree(results, "decode_properties")
    for name, value in results[0].items():
        assert name and value and "\x02" not in name + value and "\x01" not in name


hex_ids = st.one_of(
    st.text(alphabet="0123456789abcdefABCDEF", min_size=32, max_size=32),
    st.text(alphabet="0123456789abcdefABCDEF", min_size=56, max_size=56),
    st.text(alphabet="0123456789abcdefABCDEFgG \x00é٣Ａ\U0001f600", min_size=30, max_size=58),
    st.text(max_size=60),
    st.sampled_from(["", "0" * 32, "F" * 56, "٣" * 32, "Ａ" * 32, "0x" + "0" * 30, " " + "0" * 31]),
)


def check_id_call(fn, *args) -> tuple:
    got = outcome(fn, *args)
    if got[0] == "raised":
        assert got[1] is InvalidMessageIdError, got
    return got


@fuzz_settings(300)
@given(msg_id=st.one_of(hex_ids, st.binary(max_size=40), st.integers(), st.none()))
def test_parse_offset_msg_id_raises_only_invalid_message_id_and_twins_agree(msg_id):
    results = [check_id_call(codec.parse_offset_msg_id, msg_id) for codec in CODECS]
    agree(results, "parse_offset_msg_id")
    if results[0][0] == "ok":
        host, port, offset = results[0][1]
        assert len(host) in (4, 16) and INT32_MIN <= port <= INT32_MAX and INT64_MIN <= offset <= INT64_MAX


@fuzz_settings(300)
@given(
    key=st.one_of(hex_ids, st.binary(max_size=40), st.none()),
    now_ms=st.one_of(st.integers(-(10**12), 10**14), st.just(T0)),
    fixed_month=st.booleans(),
)
def test_uniq_key_time_raises_only_invalid_message_id_and_twins_agree(key, now_ms, fixed_month):
    month_start = (lambda ms: ms - ms % 2_592_000_000) if fixed_month else None
    results = []
    for codec in CODECS:
        try:
            results.append(("ok", codec.uniq_key_time(key, now_ms, month_start)))
        except InvalidMessageIdError as exc:
            results.append(("raised", type(exc), str(exc)))
    agree(results, "uniq_key_time")


# ---- IndexFile over hostile bytes --------------------------------------------------------------------


@st.composite
def index_bytes(draw):
    """(slots, items, buffer): an index file of random bytes, with small pointers mixed in so
    chains are long, cyclic, or point just past the items."""
    slots, items = draw(st.integers(1, 8)), draw(st.integers(1, 24))
    size = _index_py.index_file_size(slots, items)
    raw = bytearray(draw(st.binary(min_size=size, max_size=size)))
    pointers = st.integers(-2, items + 2)
    for pos in range(40, size, 4):
        if draw(st.integers(0, 2)) == 0:
            struct.pack_into(">i", raw, pos, draw(pointers))
    struct.pack_into(">i", raw, 36, draw(st.one_of(pointers, st.sampled_from([INT32_MAX, INT32_MIN]))))
    struct.pack_into(">q", raw, 0, draw(st.sampled_from([0, T0, -T0, INT64_MAX, INT64_MIN, 1])))
    struct.pack_into(">q", raw, 8, draw(st.sampled_from([0, T0, T0 + 10**6, INT64_MAX])))
    return slots, items, raw


index_keys = st.sampled_from(["k0", "k1", "k2", "Aa", "BB", "polygenelubricants", "T#k", ""])
index_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("select"),
            index_keys,
            st.sampled_from([0, 1, 3, 1 << 40]),
            st.sampled_from([INT64_MIN, 0, T0]),
            st.sampled_from([INT64_MAX, T0, T0 + 10**9]),
        ),
        st.tuples(st.just("put"), index_keys, INT64, st.one_of(st.just(T0), INT64)),
        st.tuples(
            st.just("header"),
        ),
        st.tuples(st.just("matched"), INT64, INT64),
    ),
    min_size=1,
    max_size=12,
)


@fuzz_settings(200)
@given(case=index_bytes(), ops=index_ops, read_only=st.booleans())
def test_index_file_reads_of_hostile_bytes_stay_in_bounds_and_twins_agree(case, ops, read_only):
    slots, items, raw = case
    bufs = [bytes(raw) if read_only else bytearray(raw) for _ in INDEXES]
    files = [twin.IndexFile(buf, slots, items) for twin, buf in zip(INDEXES, bufs)]
    try:
        for op in ops:
            results = []
            for f in files:
                if op[0] == "select":
                    got = f.select(*op[1:])
                    assert len(got) <= min(op[2], items)
                elif op[0] == "put":
                    if read_only:
                        continue
                    got = f.put_key(*op[1:])
                elif op[0] == "matched":
                    got = f.is_time_matched(*op[1:])
                else:
                    got = (
                        f.begin_timestamp,
                        f.end_timestamp,
                        f.begin_phy_offset,
                        f.end_phy_offset,
                        f.hash_slot_count,
                        f.index_count,
                        f.is_full,
                    )
                    assert got[5] >= 1
                results.append(got)
            agree(results, op)
        agree([bytes(b) for b in bufs], "buffers after the ops")
    finally:
        for f in files:
            f.release()


@pytest.mark.parametrize("twin", TWINS, ids=[t.name for t in TWINS])
@pytest.mark.parametrize("size", [0, 39, 40, 43, 44 + 20, 44 + 40 + 1])
def test_index_file_of_the_wrong_size_is_a_store_config_error(twin, size):
    with pytest.raises(StoreConfigError):
        twin.index.IndexFile(bytearray(size), 1, 2)


@fuzz_settings(150)
@given(case=mutated(max_records=3), data=st.data())
def test_index_put_refs_of_hostile_rows_stores_nothing_or_the_same_bytes(case, data):
    buf, _starts, _fields = case
    rows = _codec_py.decode_batch(buf, check_crc=False)[0]
    keys = _codec_py.dispatch_info(buf, rows)[1]
    if data.draw(st.booleans(), label="hostile rows"):
        rows = hostile_rows(data.draw, rows, len(buf))
    if len(keys) and data.draw(st.booleans(), label="hostile keys"):
        keys = keys.copy()
        i = data.draw(st.integers(0, len(keys) - 1))
        name = data.draw(st.sampled_from(["key_pos", "key_len", "record"]))
        bits = 64 if name == "key_pos" else 32
        keys[name][i] = data.draw(
            st.one_of(
                st.sampled_from([-1, len(buf), len(buf) + 1, len(rows)]),
                st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1),
            )
        )
    base_offset = data.draw(st.sampled_from([0, 1 << 30, INT64_MAX, -1]), label="base_offset")
    size = _index_py.index_file_size(3, 8)
    bufs = [bytearray(size) for _ in INDEXES]
    results = []
    for twin, ibuf in zip(INDEXES, bufs):
        f = twin.IndexFile(ibuf, 3, 8)
        try:
            results.append(("ok", f.put_refs(buf, rows, keys, base_offset)))
        except (CorruptRecordError, OverflowError) as exc:
            results.append(("raised", type(exc), str(exc)))
            assert ibuf == bytearray(size)  # bad input stores nothing
        finally:
            f.release()
    agree(results, "put_refs")
    agree([bytes(b) for b in bufs], "index bytes after put_refs")


# ---- ConsumeQueue files of hostile bytes (one implementation: the queue is pure Python) ------------

CQ_UNITS = 4
CQ_FILE = CQ_UNITS * CQ_UNIT_SIZE

cq_units = st.tuples(
    st.one_of(st.integers(0, 10_000), st.sampled_from([-1, 0, INT64_MAX, INT64_MIN]), INT64),
    st.one_of(st.integers(1, 500), st.sampled_from([0, -1, PLACEHOLDER_SIZE, INT32_MIN]), INT32),
    INT64,
).map(lambda u: struct.pack(">qiq", *u))


@st.composite
def cq_directory(draw):
    """{file name: bytes} of one queue directory: units, garbage, wrong sizes, junk names."""
    files = {}
    first = draw(st.integers(0, 3))
    for n in range(draw(st.integers(0, 4))):
        name = f"{(first + n) * CQ_FILE:020d}"
        if draw(st.integers(0, 6)) == 0:
            continue  # a missing file in the middle
        kind = draw(st.sampled_from(["units", "units", "units", "random", "zeros", "short", "long", "empty"]))
        if kind == "units":
            data = b"".join(draw(st.lists(cq_units, min_size=CQ_UNITS, max_size=CQ_UNITS)))
        elif kind == "random":
            data = draw(st.binary(min_size=CQ_FILE, max_size=CQ_FILE))
        elif kind == "zeros":
            data = bytes(CQ_FILE)
        elif kind == "short":
            data = draw(st.binary(min_size=1, max_size=CQ_FILE - 1))
        elif kind == "long":
            data = bytes(CQ_FILE) + draw(st.binary(min_size=1, max_size=30))
        else:
            data = b""
        files[name] = data
    if draw(st.integers(0, 4)) == 0:
        files[draw(st.sampled_from(["junk", "0000000000000000000x", "00000000000000000007", ".tmp"]))] = (
            b"junk"
        )
    return files


def check_queue_reads(cq, checked_from: int, cut=None) -> None:
    """Every unit of [min_offset, max_offset) reads; those recovery checked (from ``checked_from``,
    the start of the third-last file as loaded: RocketMQ counts older files as full) are valid
    or recorded in ``holes``,
    and those of the last file point below ``cut`` (truncate_dirty looks no further back)."""
    lo, hi = cq.min_offset, cq.max_offset
    assert 0 <= lo <= hi
    files = cq._files.files
    last_from = files[-1].file_from_offset // CQ_UNIT_SIZE if files else 0
    for q in range(lo, hi):
        offset, size, _tags = cq.unit(q)
        if q >= checked_from:  # valid, or a hole recovery recorded for the store to rebuild
            assert (offset >= 0 and size > 0) or any(a <= q < b for a, b in cq.holes)
        if cut is not None and q >= last_from:
            assert offset < cut
    seen = 0
    for first, view in cq.iter_units():
        assert first == lo + seen and len(view)
        seen += len(view)
    assert seen == hi - lo
    for q in (lo - 1, hi + 1, -5):
        with pytest.raises((MessageNotFoundError, InvalidMessageError)):
            cq.unit(q)
    assert len(cq.units(hi, 5)) == 0


@fuzz_settings(150)
@given(
    files=cq_directory(),
    read_only=st.booleans(),
    cut=st.integers(-1, 10_000),
    min_phy=st.integers(-1, 10_000),
)
# a unit at CommitLog offset 2**63-1 of size 1: its end does not fit a Java long, so it points
# at no record (it once made max_physic_offset 2**63 and the next append fail)
@example(
    files={
        "00000000000000000000": bytes(11)
        + b"\x01"
        + bytes(19)
        + b"\x01"
        + bytes(19)
        + b"\x01"
        + bytes(8)
        + b"\x7f"
        + b"\xff" * 7
        + b"\x00\x00\x00\x01"
        + bytes(8),
        "00000000000000000080": bytes(80),
    },
    read_only=False,
    cut=1,
    min_phy=0,
)
def test_consume_queue_of_hostile_files_loads_or_refuses_and_reads_stay_in_range(
    files, read_only, cut, min_phy
):
    root = tempfile.mkdtemp(prefix="cqfuzz-")
    try:
        directory = os.path.join(root, "consumequeue", "T", "0")
        os.makedirs(directory)
        for name, data in files.items():
            with open(os.path.join(directory, name), "wb") as f:
                f.write(data)
        cq = ConsumeQueue(root, "T", 0, units_per_file=CQ_UNITS, read_only=read_only)
        try:
            try:
                cq.load()
            except StoreConfigError:
                segments = {n: d for n, d in files.items() if n.isdigit() and len(n) == 20}
                assert any(len(d) != CQ_FILE or int(n) % CQ_FILE for n, d in segments.items()) or _has_gap(
                    segments
                )
                return
            loaded = cq._files.files
            checked_from = loaded[max(0, len(loaded) - 3)].file_from_offset // CQ_UNIT_SIZE if loaded else 0
            end = cq.recover()
            assert end == -1 or end > 0
            check_queue_reads(cq, checked_from)
            cq.correct_min_offset(min_phy)
            check_queue_reads(cq, checked_from)
            if not read_only:
                cq.truncate_dirty(cut)
                check_queue_reads(cq, checked_from, cut)
                before, phys = cq.max_offset, max(cq.max_physic_offset, 20_000)
                assert cq.append(before, phys, 100, 0)
                assert cq.unit(before) == (phys, 100, 0) and cq.max_offset == before + 1
        finally:
            cq.close()
    finally:
        shutil.rmtree(root)


def _has_gap(segments: dict) -> bool:
    starts = sorted(int(n) for n, d in segments.items() if d)
    return any(b - a != CQ_FILE for a, b in zip(starts, starts[1:]))
