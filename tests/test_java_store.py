"""Decode the CommitLog a real Java RocketMQ 4.x broker wrote, and re-encode it byte for byte."""

import pathlib
import tarfile

import pytest

from rocketstore import MessageStore
from rocketstore.errors import CorruptRecordError, MessageNotFoundError

BODY = b"Once, there was a chance for me!"
SEGMENT_SIZE = 8192


@pytest.fixture
def commitlog(java_store):
    return (java_store / "commitlog" / "00000000000000000000").read_bytes()


@pytest.fixture
def codec(impl):
    return impl.codec


def test_java_commitlog_has_47_messages_then_a_blank(codec, commitlog):
    assert len(commitlog) == SEGMENT_SIZE
    rows, stop, reason = codec.decode_batch(commitlog)
    assert len(rows) == 47
    assert (stop, reason) == (8084, codec.STOP_BLANK)
    assert list(rows["position"]) == [172 * i for i in range(47)]
    assert list(rows["physical_offset"]) == [172 * i for i in range(47)]
    assert list(rows["queue_offset"]) == list(range(47))
    assert set(rows["size"]) == {172}
    assert set(rows["queue_id"]) == {0}
    assert set(rows["magic"]) == {codec.MAGIC_V1}
    blank_length = int.from_bytes(commitlog[8084:8088], "big", signed=True)
    assert blank_length == 108 and 8084 + blank_length == SEGMENT_SIZE


def test_java_commitlog_messages_decode_one_by_one(codec, commitlog):
    pos = 0
    for i in range(47):
        m = codec.decode_record(commitlog, pos)  # check_crc=True: every CRC is valid
        assert (m.size, m.topic, m.queue_id, m.queue_offset, m.commitlog_offset) == (172, "abc", 0, i, pos)
        assert m.body == BODY
        assert m.body_crc == codec.body_crc(BODY)
        assert m.born_host == ("127.0.0.1", 0)
        assert m.store_host == ("192.168.71.1", 8123)
        assert m.sys_flag == 0 and m.flag == 0 and m.reconsume_times == 0
        assert m.prepared_transaction_offset == 0
        assert m.tags == "TAG1"
        assert m.keys.isdigit() and len(m.keys) == 13  # a millisecond timestamp as text
        assert m.properties["0"] == "imagoodperson0"
        assert set(m.properties) == {"KEYS", "TAGS", "0"}
        assert m.store_timestamp >= m.born_timestamp
        assert codec.tags_code(m.tags) == codec.java_hash("TAG1")
        pos += m.size
    with pytest.raises(CorruptRecordError, match=r"BLANK end-of-file record at position 8084 \(length 108\)"):
        codec.decode_record(commitlog, pos)


def test_java_commitlog_batch_rows_match_single_decodes(codec, commitlog):
    rows, _, _ = codec.decode_batch(commitlog)
    for row in rows:
        assert codec.record_from_row(commitlog, row) == codec.decode_record(commitlog, int(row["position"]))


def test_java_commitlog_reencodes_byte_for_byte(codec, commitlog):
    rows, stop, _ = codec.decode_batch(commitlog)
    rebuilt = bytearray(SEGMENT_SIZE)
    pos = 0
    for row in rows:
        m = codec.record_from_row(commitlog, row)
        raw_properties = commitlog[row["properties_pos"] : row["properties_pos"] + row["properties_len"]]
        fields = dict(
            topic=m.topic,
            body=m.body,
            properties=raw_properties,
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
        )
        record = codec.encode_record(**fields)  # CRC recomputed, not copied
        assert record == commitlog[pos : pos + m.size]
        assert codec.encode_record_into(rebuilt, pos, **fields) == m.size
        pos += m.size
    assert pos == stop == 8084
    codec.encode_blank_into(rebuilt, pos, SEGMENT_SIZE - pos)
    assert rebuilt[: pos + 8] == commitlog[: pos + 8]


def test_java_commitlog_rows_agree_across_twins(commitlog):
    from rocketstore.format import _codec_py

    compiled = pytest.importorskip("rocketstore.format._codec")
    c_rows, c_stop, c_reason = compiled.decode_batch(commitlog)
    p_rows, p_stop, p_reason = _codec_py.decode_batch(commitlog)
    assert (c_stop, c_reason) == (p_stop, p_reason)
    assert c_rows.tobytes() == p_rows.tobytes()


# ---- RocketMQ 5.3.3: the whole-record CRC property (§1.6) ------------------------------------

V5_BASIC = pathlib.Path(__file__).parent / "data" / "rocketmq-5.3.3" / "v5-basic.tar.gz"


def _v5_basic(tmp_path):
    with tarfile.open(V5_BASIC) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "v5-basic"


def _records(root):
    """(commitlog offset, size) of every record of the store at ``root``, as a reader finds them."""
    with MessageStore(root, read_only=True) as store:
        return [(m.commitlog_offset, m.size, dict(m.properties)) for m in store.iter_messages()]


def test_a_rocketmq_5_store_s_crc32_property_matches_every_record(tmp_path, impl):
    root = _v5_basic(tmp_path)
    with MessageStore(root, implementation=impl.name, read_only=True) as store:
        messages = list(store.iter_messages())
        assert len(messages) == 163 and messages[-1].commitlog_offset + messages[-1].size == 92663
        assert all("__CRC32#" in m.properties for m in messages)
        for m in messages:  # read() checks the property too
            assert store.read(m.commitlog_offset).body == m.body


@pytest.mark.parametrize("field, at", [("STORETIMESTAMP", 63), ("QUEUEOFFSET", 27), ("BORNHOST", 51)])
def test_a_field_no_body_crc_covers_is_checked_by_the_crc32_property(tmp_path, impl, field, at):
    """A record that carries ``__CRC32#`` and is damaged outside its body (a field the body CRC
    does not cover) is refused by every read, as RocketMQ 5.2+'s forceVerifyPropCRC does."""
    root = _v5_basic(tmp_path)
    offset, size, _props = _records(root)[5]
    seg = root / "commitlog" / "00000000000000000000"
    data = bytearray(seg.read_bytes())
    data[offset + at] ^= 0x01  # the field's last byte
    seg.write_bytes(bytes(data))
    with MessageStore(root, implementation=impl.name, read_only=True) as store:
        with pytest.raises(MessageNotFoundError):
            store.read(offset)
        assert offset not in [m.commitlog_offset for m in store.iter_messages()]
        assert offset not in [b + int(p) for b, rows in store.scan() for p in rows["position"]]
        for topic, queue_id in store.queues():
            got = store.get_message("g", topic, queue_id, 0, 64).messages
            assert offset not in [m.commitlog_offset for m in got]
