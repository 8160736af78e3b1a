"""The spec's hand-derived test vectors (§14) for records, hashes and message ids, on both twins."""

import hashlib
import pathlib
import re

import pytest
from test_twin_parity import COMPILED_ONLY

from rocketstore.errors import (
    CorruptRecordError,
    InvalidMessageError,
    InvalidMessageIdError,
    InvalidTopicError,
    PropertiesTooLargeError,
)
from rocketstore.format import _codec_py

try:
    from rocketstore.format import _codec as _codec_c
except ImportError:  # pragma: no cover - depends on the build
    _codec_c = None

CEXT = pathlib.Path(__file__).resolve().parents[1] / "cext"

VECTOR6_HEX = """
00 00 00 89 DA A3 20 A7 0B D6 9E 52 00 00 00 00
00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
00 00 00 00 00 00 00 00 00 00 01 8B CF E5 68 00
C0 A8 00 01 00 00 D4 31 00 00 01 8B CF E5 68 7B
0A 6C 73 D9 00 00 2A 9F 00 00 00 00 00 00 00 00
00 00 00 00 00 00 00 0B 48 65 6C 6C 6F 20 77 6F
72 6C 64 09 54 6F 70 69 63 54 65 73 74 00 1A 4B
45 59 53 01 4F 72 64 65 72 49 44 30 30 31 02 54
41 47 53 01 54 61 67 41 02
"""
VECTOR6_SHA256 = "0ca0cff751ffcd1d88b7d4838b97a0920f63d4ab9b707f1c3cc39920a0b8f560"
VECTOR6_PROPERTIES = b"KEYS\x01OrderID001\x02TAGS\x01TagA\x02"
VECTOR6 = dict(
    topic="TopicTest",
    body=b"Hello world",
    properties=VECTOR6_PROPERTIES,
    born_timestamp=1700000000000,
    born_host=("192.168.0.1", 54321),
    store_timestamp=1700000000123,
    store_host=("10.108.115.217", 10911),
)


@pytest.fixture
def codec(impl):
    return impl.codec


# ---- 1, 2, 8, 10: Java hashes ----


def test_java_hash_of_index_key_matches_java(codec):
    assert codec.java_hash("TopicTest#OrderID001") == -1231272886
    assert codec.index_key_hash("TopicTest#OrderID001") == 1231272886
    assert codec.index_key_hash("TopicTest#OrderID001") % 5_000_000 == 1272886


def test_tags_code_is_sign_extended_java_hash(codec):
    assert codec.tags_code("TagA") == 2598919
    assert codec.tags_code("TagB") == 2598920
    assert codec.tags_code("*") == 42
    assert codec.tags_code(None) == 0
    assert codec.tags_code("") == 0
    assert (codec.tags_code("TagA") & 0xFFFFFFFFFFFFFFFF).to_bytes(
        8, "big"
    ).hex().upper() == "000000000027A807"


@pytest.mark.parametrize("key", ["polygenelubricants", "TopicTest#OrderID1yoiddi"])
def test_index_key_hash_of_integer_min_value_is_zero(codec, key):
    assert codec.java_hash(key) == -2147483648
    assert codec.index_key_hash(key) == 0


def test_java_hash_counts_utf16_units_not_utf8_bytes(codec):
    assert codec.java_hash("é") == 233
    assert codec.java_hash("😀") == 1772899
    assert codec.java_hash_bytes("é".encode()) == 233
    assert codec.java_hash_bytes("😀".encode()) == 1772899
    assert codec.java_hash("") == 0


def test_java_hash_rejects_non_str(codec):
    with pytest.raises(TypeError, match="java_hash expects str, not bytes"):
        codec.java_hash(b"abc")


# ---- 3: masked body CRC ----


def test_body_crc_is_masked_crc32(codec):
    assert codec.body_crc(b"Hello world") == 198614610 == 0x0BD69E52
    assert codec.body_crc(b"Hello World") == 0x4A17B156
    assert codec.body_crc(b"") == 0


# ---- 4: offsetMsgId ----


def test_offset_msg_id_ipv4_round_trips(codec):
    raw = bytes([10, 108, 115, 217])
    msg_id = codec.make_offset_msg_id(raw, 10911, 0x4010)
    assert msg_id == "0A6C73D900002A9F0000000000004010"
    assert codec.parse_offset_msg_id(msg_id) == (raw, 10911, 16400)
    assert codec.make_offset_msg_id("10.108.115.217", 10911, 0x4010) == msg_id
    assert codec.parse_offset_msg_id(msg_id.lower()) == (raw, 10911, 16400)


def test_offset_msg_id_ipv6_round_trips(codec):
    raw = bytes.fromhex("FE800000000000000000000000000001")
    msg_id = codec.make_offset_msg_id(raw, 10911, 0x4010)
    assert msg_id == "FE80000000000000000000000000000100002A9F0000000000004010"
    assert codec.parse_offset_msg_id(msg_id) == (raw, 10911, 16400)
    assert codec.make_offset_msg_id("fe80::1", 10911, 0x4010) == msg_id


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "0A6C73D900002A9F000000000000401",
        "0A6C73D900002A9F00000000000040100",
        "0A6C73D900002A9F000000000000401G",
        "0A6C73D9 0002A9F0000000000004010",
        "０A6C73D900002A9F000000000000401",
        12345,
        None,
    ],
)
def test_parse_offset_msg_id_rejects_malformed(codec, bad):
    with pytest.raises(InvalidMessageIdError):
        codec.parse_offset_msg_id(bad)


def test_make_offset_msg_id_rejects_bad_host(codec):
    with pytest.raises(InvalidMessageError):
        codec.make_offset_msg_id(b"\x01\x02\x03", 1, 1)
    with pytest.raises(InvalidMessageError):
        codec.make_offset_msg_id("not-an-ip", 1, 1)


# ---- 5, 7: magic codes and the BLANK header ----


def test_magic_codes(codec):
    for value, raw in (
        (codec.MAGIC_V1, "DAA320A7"),
        (codec.MAGIC_V2, "DAA320AB"),
        (codec.MAGIC_BLANK, "CBD43194"),
    ):
        assert value.to_bytes(4, "big", signed=True).hex().upper() == raw
    assert (codec.MAGIC_V1, codec.MAGIC_V2, codec.MAGIC_BLANK) == (-626843481, -626843477, -875286124)


def test_blank_header_for_24_remaining_bytes(codec):
    buf = bytearray(b"\xee" * 24)
    assert codec.encode_blank_into(buf, 0, 24) == 8
    assert bytes(buf[:8]).hex().upper() == "00000018CBD43194"
    assert buf[8:] == b"\xee" * 16  # the filler is left alone
    with pytest.raises(
        CorruptRecordError, match=r"BLANK end-of-file record at position 0 \(length 24\)"
    ) as info:
        codec.decode_record(buf)
    assert info.value.reason == codec.STOP_BLANK
    rows, stop, reason = codec.decode_batch(buf)
    assert (len(rows), stop, reason) == (0, 0, codec.STOP_BLANK)


def test_blank_header_needs_eight_bytes(codec):
    with pytest.raises(ValueError, match="buffer too small"):
        codec.encode_blank_into(bytearray(7), 0, 7)


# ---- 6: the complete 137-byte record ----


def test_vector6_record_encodes_byte_for_byte(codec):
    record = codec.encode_record(**VECTOR6)
    assert record == bytes.fromhex(VECTOR6_HEX)
    assert hashlib.sha256(record).hexdigest() == VECTOR6_SHA256
    assert len(record) == codec.record_length(11, 9, 26) == 137


def test_vector6_record_with_mapping_properties(codec):
    fields = dict(VECTOR6, properties={"KEYS": "OrderID001", "TAGS": "TagA"})
    assert codec.encode_record(**fields) == bytes.fromhex(VECTOR6_HEX)


def test_vector6_record_encodes_into_a_buffer_at_an_offset(codec):
    buf = bytearray(b"\xaa" * 200)
    assert codec.encode_record_into(buf, 50, **VECTOR6) == 137
    assert buf[50:187] == bytes.fromhex(VECTOR6_HEX)
    assert buf[:50] == b"\xaa" * 50 and buf[187:] == b"\xaa" * 13


def test_encode_record_into_too_small_buffer_writes_nothing(codec):
    buf = bytearray(b"\xaa" * 200)
    with pytest.raises(
        ValueError, match="buffer too small: the record needs 137 bytes at position 64, 136 available"
    ):
        codec.encode_record_into(buf, 64, **VECTOR6)
    assert buf == b"\xaa" * 200


def test_vector6_record_decodes(codec):
    m = codec.decode_record(bytes.fromhex(VECTOR6_HEX))
    assert (
        m.size,
        m.magic,
        m.body_crc,
        m.queue_id,
        m.flag,
        m.queue_offset,
        m.commitlog_offset,
        m.sys_flag,
    ) == (137, codec.MAGIC_V1, 198614610, 0, 0, 0, 0, 0)
    assert m.born_timestamp == 1700000000000 and m.born_host == ("192.168.0.1", 54321)
    assert m.store_timestamp == 1700000000123 and m.store_host == ("10.108.115.217", 10911)
    assert (m.reconsume_times, m.prepared_transaction_offset) == (0, 0)
    assert (m.body, m.topic) == (b"Hello world", "TopicTest")
    assert m.properties == {"KEYS": "OrderID001", "TAGS": "TagA"}
    assert m.msg_id == "0A6C73D900002A9F0000000000000000"


def test_vector6_record_decodes_zero_copy(codec):
    data = bytearray(b"\0" * 3) + bytes.fromhex(VECTOR6_HEX)
    m = codec.decode_record(data, 3, copy_body=False)
    assert isinstance(m.body, memoryview) and m.body.readonly
    assert m.body == b"Hello world"
    del m


def test_vector6_record_bad_crc_is_detected(codec):
    data = bytearray.fromhex(VECTOR6_HEX)
    data[88] ^= 0x01  # first body byte
    with pytest.raises(CorruptRecordError, match="body CRC mismatch") as info:
        codec.decode_record(data)
    assert info.value.reason == codec.STOP_BAD_CRC and info.value.position == 0
    assert codec.decode_record(data, check_crc=False).body == b"Iello world"


# ---- IPv6 record lengths: +12 per IPv6 host ----


@pytest.mark.parametrize(
    "born, store, extra, flags",
    [
        ("192.168.0.1", "10.108.115.217", 0, 0),
        ("fe80::1", "10.108.115.217", 12, 0x10),
        ("192.168.0.1", "::1", 12, 0x20),
        ("fe80::1", "2001:db8::7", 24, 0x30),
    ],
)
def test_ipv6_hosts_add_twelve_bytes_each(codec, born, store, extra, flags):
    record = codec.encode_record(**dict(VECTOR6, born_host=(born, 1), store_host=(store, 2)))
    assert len(record) == 137 + extra == codec.record_length(11, 9, 26, flags)
    m = codec.decode_record(record)
    assert m.sys_flag == flags
    assert m.born_host == (born, 1) and m.store_host == (store, 2)
    assert m.body == b"Hello world" and m.properties == {"KEYS": "OrderID001", "TAGS": "TagA"}


def test_v6_flag_for_an_ipv4_address_is_rejected(codec):
    with pytest.raises(InvalidMessageError, match="born host is IPv6"):
        codec.encode_record(**dict(VECTOR6, sys_flag=0x10))
    with pytest.raises(InvalidMessageError, match="store host is IPv6"):
        codec.encode_record(**dict(VECTOR6, sys_flag=0x20))


def test_record_length_formula(codec):
    assert codec.record_length(0, 0, 0) == 91
    assert codec.record_length(0, 0, 0, 0x30) == 115
    assert codec.record_length(0, 0, 0, 0x30, codec.MAGIC_V2) == 116
    with pytest.raises(InvalidMessageError):
        codec.record_length(0, 128, 0)
    with pytest.raises(InvalidMessageError):
        codec.record_length(-1, 0, 0)
    with pytest.raises(InvalidMessageError):
        codec.record_length(0, 0, 32768)


def test_v2_magic_record_decodes_with_two_byte_topic_length(codec):
    v1 = bytes.fromhex(VECTOR6_HEX)
    topic_at = 88 + 11
    v2 = (
        (138).to_bytes(4, "big")
        + codec.MAGIC_V2.to_bytes(4, "big", signed=True)
        + v1[8:topic_at]
        + (9).to_bytes(2, "big")
        + v1[topic_at + 1 :]
    )
    m = codec.decode_record(v2)
    assert (m.size, m.magic, m.topic, m.body) == (138, codec.MAGIC_V2, "TopicTest", b"Hello world")
    assert m.properties == {"KEYS": "OrderID001", "TAGS": "TagA"}


# ---- 10: UNIQ_KEY ----


def _utc_month_start(ms):
    import datetime

    t = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    return int(datetime.datetime(t.year, t.month, 1, tzinfo=datetime.timezone.utc).timestamp()) * 1000


def test_uniq_key_layout_and_time(codec):
    key = codec.make_uniq_key(bytes([10, 108, 115, 217]), 8080, 0x5E2DE80C, 1700000000000, 1, 1698796800000)
    assert key == "0A6C73D91F905E2DE80C47B760000001"
    assert int.from_bytes(bytes.fromhex(key)[10:14], "big") == 1203200000
    assert codec.uniq_key_time(key, 1700000000000 + 60_000, _utc_month_start) == 1700000000000


def test_uniq_key_time_from_a_key_of_last_month(codec):
    key = "0A6C73D91F905E2DE80C47B760000001"  # 2023-11-14T22:13:20Z
    now = 1698796800000 + 1000  # 2023-11-01T00:00:01Z: that moment is in the future
    # so the span is counted from the start of October
    assert codec.uniq_key_time(key, now, _utc_month_start) == 1696118400000 + 1203200000


def test_uniq_key_span_is_unsigned_and_small_negative_clamps(codec):
    ip = bytes(4)
    late = codec.make_uniq_key(ip, 0, 0, 1698796800000 + 0x90000000, 0, 1698796800000)
    assert late[20:28] == "90000000"
    stepped_back = codec.make_uniq_key(ip, 0, 0, 1698796800000 - 999_999, 0, 1698796800000)
    assert stepped_back[20:28] == "00000000"
    far_back = codec.make_uniq_key(ip, 0, 0, 1698796800000 - 1_000_000, 0, 1698796800000)
    assert far_back[20:28] == ((-1_000_000) & 0xFFFFFFFF).to_bytes(4, "big").hex().upper()


def test_uniq_key_ipv6_is_56_chars(codec):
    key = codec.make_uniq_key("fe80::1", 0x12345, -1, 1000, 0x10002, 0)
    assert len(key) == 56
    assert key[32:36] == "2345" and key[36:44] == "FFFFFFFF" and key[52:] == "0002"
    assert codec.uniq_key_time(key, 10_000, lambda ms: 0) == 1000


def test_uniq_key_time_rejects_malformed(codec):
    with pytest.raises(InvalidMessageIdError):
        codec.uniq_key_time("XYZ", 0)


# ---- validation writes nothing and raises the documented classes ----


@pytest.mark.parametrize(
    "change, error",
    [
        (dict(topic=""), InvalidTopicError),
        (dict(topic="t" * 128), InvalidTopicError),
        (dict(topic="é" * 64), InvalidTopicError),
        (dict(topic=5), InvalidTopicError),
        (dict(properties=b"x" * 32768), PropertiesTooLargeError),
        (dict(properties={"k": "v" * 32766}), PropertiesTooLargeError),
        (dict(properties={"k": 1}), InvalidMessageError),
        (dict(properties={"": "v"}), InvalidMessageError),
        (dict(properties={"a\x01": "v"}), InvalidMessageError),
        (dict(properties={"a": "v\x02"}), InvalidMessageError),
        (dict(properties=5), InvalidMessageError),
        (dict(body="text"), InvalidMessageError),
        (dict(queue_id=1 << 31), InvalidMessageError),
        (dict(queue_offset=1 << 63), InvalidMessageError),
        (dict(physical_offset=-(1 << 63) - 1), InvalidMessageError),
        (dict(flag=1.0), InvalidMessageError),
        (dict(born_host=("1.2.3.4", 1 << 31)), InvalidMessageError),
        (dict(store_host=("nope", 1)), InvalidMessageError),
        (dict(store_host="1.2.3.4"), InvalidMessageError),
        (dict(body_crc=1 << 32), InvalidMessageError),
    ],
)
def test_invalid_messages_raise_and_write_nothing(codec, change, error):
    with pytest.raises(error):
        codec.encode_record(**dict(VECTOR6, **change))
    buf = bytearray(b"\xaa" * 300)
    with pytest.raises(error):
        codec.encode_record_into(buf, 0, **dict(VECTOR6, **change))
    assert buf == b"\xaa" * 300


def test_properties_refuse_none_and_empty_values_which_java_would_read_back_as_absent(codec):
    for props in ({"a": "1", "b": None}, {"a": "1", "c": ""}):
        with pytest.raises(InvalidMessageError):
            codec.encode_properties(props)
    assert codec.decode_properties(b"a\x011\x02c\x01\x02") == {"a": "1"}


@pytest.mark.parametrize(
    "raw, expected",
    [
        (b"", {}),
        (b"a\x01b", {"a": "b"}),
        (b"a\x01b\x01c\x02", {"a": "b\x01c"}),  # 5.x: the value may contain 0x01
        (b"\x01ab\x02k\x01v\x02", {"k": "v"}),  # empty name dropped
        (b"ab\x02k\x01v\x02", {"k": "v"}),  # no separator dropped
        (b"k\x011\x02k\x012\x02", {"k": "2"}),  # a later duplicate wins
        (b"\xff\x01\xfe\x02", {"\udcff": "\udcfe"}),  # invalid UTF-8 never raises
    ],
)
def test_decode_properties_lenient_rule(codec, raw, expected):
    assert codec.decode_properties(raw) == expected


def test_decode_record_reports_each_failure(codec):
    good = bytes.fromhex(VECTOR6_HEX)
    cases = [
        (b"", codec.STOP_END, "end of data at position 0"),
        (bytes(16), codec.STOP_END, "end of data at position 0"),
        (good[:136], codec.STOP_TRUNCATED, "truncated record at position 0"),
        ((90).to_bytes(4, "big") + good[4:], codec.STOP_CORRUPT, "corrupt record at position 0"),
        ((-(1 << 31)).to_bytes(4, "big", signed=True) + good[4:], codec.STOP_CORRUPT, "corrupt record"),
        ((138).to_bytes(4, "big") + good[4:] + b"\0", codec.STOP_CORRUPT, "corrupt record"),
    ]
    for data, reason, message in cases:
        with pytest.raises(CorruptRecordError, match=message) as info:
            codec.decode_record(data)
        assert info.value.reason == reason
        rows, stop, stop_reason = codec.decode_batch(data)
        # an empty range is not a failure: the scan reached `end` exactly
        assert (len(rows), stop, stop_reason) == (0, 0, reason if data else codec.STOP_LIMIT)


def test_decode_record_position_out_of_range(codec):
    with pytest.raises(ValueError, match="pos 5 is out of range"):
        codec.decode_record(b"1234", 5)


# ---- constants: record.h (through the compiled twin) and the pure twin agree ----

CONSTANT_NAMES = [
    "MAGIC_V1",
    "MAGIC_V2",
    "MAGIC_BLANK",
    "END_FILE_MIN_BLANK_LENGTH",
    "SYSFLAG_COMPRESSED",
    "SYSFLAG_MULTI_TAGS",
    "SYSFLAG_TRANSACTION_MASK",
    "TRANSACTION_NOT_TYPE",
    "TRANSACTION_PREPARED_TYPE",
    "TRANSACTION_COMMIT_TYPE",
    "TRANSACTION_ROLLBACK_TYPE",
    "SYSFLAG_BORNHOST_V6",
    "SYSFLAG_STOREHOST_V6",
    "SYSFLAG_NEED_UNWRAP",
    "SYSFLAG_INNER_BATCH",
    "SYSFLAG_COMPRESSION_MASK",
    "MAX_TOPIC_LENGTH",
    "MAX_TOPIC_LENGTH_V2",
    "MAX_PROPERTIES_LENGTH",
    "INT_SIZE",
    "LONG_SIZE",
    "HOST_V4_LENGTH",
    "HOST_V6_LENGTH",
    "HOST_V6_EXTRA_LENGTH",
    "TOPIC_LENGTH_SIZE",
    "TOPIC_LENGTH_SIZE_V2",
    "PROPERTIES_LENGTH_SIZE",
    "POS_TOTAL_SIZE",
    "POS_MAGIC",
    "POS_BODY_CRC",
    "POS_QUEUE_ID",
    "POS_FLAG",
    "POS_QUEUE_OFFSET",
    "POS_PHYSICAL_OFFSET",
    "POS_SYSFLAG",
    "POS_BORN_TIMESTAMP",
    "POS_BORN_HOST",
    "POS_STORE_TIMESTAMP",
    "POS_STORE_HOST",
    "POS_RECONSUME_TIMES",
    "POS_PREPARED_TRANSACTION_OFFSET",
    "POS_BODY_LENGTH",
    "POS_BODY",
    "RECORD_FIXED_LENGTH",
    "STOP_LIMIT",
    "STOP_BLANK",
    "STOP_END",
    "STOP_TRUNCATED",
    "STOP_CORRUPT",
    "STOP_BAD_CRC",
]


def test_pure_twin_positions_match_the_spec_table():
    c = _codec_py
    assert (
        c.POS_MAGIC,
        c.POS_FLAG,
        c.POS_QUEUE_OFFSET,
        c.POS_PHYSICAL_OFFSET,
        c.POS_SYSFLAG,
        c.POS_STORE_TIMESTAMP,
    ) == (4, 16, 20, 28, 36, 56)
    assert (
        c.POS_BODY_CRC,
        c.POS_QUEUE_ID,
        c.POS_BORN_TIMESTAMP,
        c.POS_BORN_HOST,
        c.POS_STORE_HOST,
        c.POS_RECONSUME_TIMES,
        c.POS_PREPARED_TRANSACTION_OFFSET,
        c.POS_BODY_LENGTH,
        c.POS_BODY,
    ) == (8, 12, 40, 48, 64, 72, 76, 84, 88)
    assert c.RECORD_FIXED_LENGTH == 91 and c.END_FILE_MIN_BLANK_LENGTH == 8
    assert (c.MAX_TOPIC_LENGTH, c.MAX_PROPERTIES_LENGTH) == (127, 32767)
    assert list(range(6)) == [
        c.STOP_LIMIT,
        c.STOP_BLANK,
        c.STOP_END,
        c.STOP_TRUNCATED,
        c.STOP_CORRUPT,
        c.STOP_BAD_CRC,
    ]


def test_pure_twin_docstring_table_lists_the_positions():
    doc = _codec_py.__doc__
    for name, pos in (
        ("TOTALSIZE", 0),
        ("MAGICCODE", 4),
        ("BODYCRC", 8),
        ("QUEUEID", 12),
        ("FLAG", 16),
        ("QUEUEOFFSET", 20),
        ("PHYSICALOFFSET", 28),
        ("SYSFLAG", 36),
        ("BORNTIMESTAMP", 40),
        ("BORNHOST", 48),
        ("STORETIMESTAMP", 56),
        ("STOREHOST", 64),
        ("RECONSUMETIMES", 72),
        ("PREPAREDTRANSACTIONOFFSET", 76),
        ("BODY", 84),
    ):
        assert re.search(rf"^\s*\d+\s+{pos}\s+[\d +B]+\s{name}\b", doc, re.M), name


def test_record_h_names_every_position_the_pure_twin_has():
    header = (CEXT / "record.h").read_text()
    pxd = (CEXT / "_codec.pxd").read_text()
    for name in CONSTANT_NAMES:
        if name.startswith("POS_"):
            assert f"#define RS_{name} " in header, name
            assert f"RS_{name}\n" in pxd, name


@pytest.mark.skipif(_codec_c is None, reason="rocketstore.format._codec is not built")
@pytest.mark.parametrize("name", CONSTANT_NAMES)
def test_compiled_and_pure_constants_agree(name):
    assert getattr(_codec_c, name) == getattr(_codec_py, name)


@pytest.mark.skipif(_codec_c is None, reason="rocketstore.format._codec is not built")
def test_compiled_and_pure_public_names_agree():
    only = COMPILED_ONLY["codec"]  # (the point reads' front: the pure build calls the careful paths)
    assert [n for n in _codec_c.__all__ if n not in only] == _codec_py.__all__
    assert _codec_c.RECORD_DTYPE == _codec_py.RECORD_DTYPE
    public = {n for n in dir(_codec_py) if not n.startswith("_") and n.isupper()}
    assert public <= set(dir(_codec_c))
