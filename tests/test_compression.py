"""Compressed bodies (rocketstore.base.compression): stored as a RocketMQ producer compresses them,
read back inflated as a RocketMQ consumer reads them, the stored bytes kept where the store copies
a record (delay, retry, timers) and reachable as ``stored_body``."""

import importlib
import pickle
import types
import zlib

import pytest

from rocketstore import Consumer, Message, MessageStore
from rocketstore.base import compression
from rocketstore.errors import CompressionUnavailableError, CorruptRecordError, InvalidMessageError

BODY = b"an order, repeated " * 40
CODECS = [("zlib", 3), ("lz4", 1), ("zstd", 2)]


def _store(tmp_path, impl, **kw):
    s = MessageStore(str(tmp_path / "s"), implementation=impl.name, **kw)
    if "T" not in s.topics:
        s.create_topic("T", 1)
    return s


@pytest.mark.parametrize("codec, kind", CODECS)
def test_a_compressed_put_reads_back_inflated_everywhere(tmp_path, impl, codec, kind):
    with _store(tmp_path, impl) as s:
        r = s.put("T", BODY, compress=codec, keys="k-1", tags="A")
        m = s.read(r.commitlog_offset)
        assert m.sys_flag & 0x701 == 0x001 | (kind << 8)  # what a 5.x producer sets
        assert bytes(m.stored_body) != BODY and len(m.stored_body) < len(BODY)
        assert compression.inflate(m.stored_body, m.sys_flag) == BODY
        assert m.body == BODY and m.as_dict()["body"] == BODY
        assert s.get_message("g", "T", 0, 0, 32).messages[0].body == BODY
        assert s.get_by_queue_offset("T", 0, 0).body == BODY
        assert s.query_by_key("T", "k-1")[0].body == BODY
        assert s.get_by_msg_id(m.msg_id).body == BODY
        assert [x.body for x in Consumer(s, "g", "T").poll(8)] == [BODY]
        again = pickle.loads(pickle.dumps(m))
        assert again == m and again.body == BODY and bytes(again.stored_body) == bytes(m.stored_body)
        assert s.verify()["ok"]


def test_a_4x_zlib_body_with_no_compression_type_is_inflated(tmp_path, impl):
    """4.x clients set only COMPRESSED_FLAG (bits 8-10 clear: zlib), level 5 as Deflater does."""
    with _store(tmp_path, impl) as s:
        r = s.put(Message("T", zlib.compress(BODY, 5), sys_flag=0x1))
        assert s.read(r.commitlog_offset).body == BODY


def test_both_twins_read_the_same_compressed_record(tmp_path):
    from rocketstore import _impl

    if _impl.COMPILED is None:
        pytest.skip("compiled modules not built")
    path = str(tmp_path / "s")
    with MessageStore(path, implementation="c") as s:
        s.create_topic("T", 1)
        offset = s.put("T", BODY, compress="zlib").commitlog_offset
    with (
        MessageStore(path, implementation="c", read_only=True) as c,
        MessageStore(path, implementation="py", read_only=True) as p,
    ):
        a, b = c.read(offset), p.read(offset)
        assert a == b and a.body == b.body == BODY and bytes(a.stored_body) == bytes(b.stored_body)


def test_a_body_that_does_not_inflate_raises_and_keeps_its_bytes(tmp_path, impl):
    with _store(tmp_path, impl) as s:
        r = s.put(Message("T", b"not zlib data", sys_flag=0x1))
        m = s.read(r.commitlog_offset)
        with pytest.raises(CorruptRecordError, match="zlib"):
            _ = m.body
        assert bytes(m.stored_body) == b"not zlib data"
        assert s.verify()["ok"]  # the record is whole: what it holds is the producer's business


def test_a_missing_codec_library_is_a_clear_error(tmp_path, impl, monkeypatch):
    with _store(tmp_path, impl) as s:
        r = s.put("T", BODY, compress="lz4")
        real = importlib.import_module

        def no_lz4(name, *a):
            if name.startswith("lz4"):
                raise ImportError(name)
            return real(name, *a)

        monkeypatch.setattr(compression.importlib, "import_module", no_lz4)
        m = s.read(r.commitlog_offset)
        with pytest.raises(CompressionUnavailableError, match="pip install lz4"):
            _ = m.body
        assert len(m.stored_body) > 0
        end = s.max_offset
        with pytest.raises(CompressionUnavailableError):
            s.put("T", BODY, compress="lz4")
        assert s.max_offset == end  # nothing written


def test_bad_compress_arguments_write_nothing(tmp_path, impl):
    with _store(tmp_path, impl) as s:
        end = s.max_offset
        for bad in ("snappy", "", 3, True):
            with pytest.raises(InvalidMessageError):
                s.put("T", BODY, compress=bad)
        with pytest.raises(InvalidMessageError):
            s.put(Message("T", BODY), compress="zlib")
        assert s.max_offset == end


def test_delayed_and_retried_copies_keep_the_compressed_bytes(tmp_path, impl, clock):
    with _store(tmp_path, impl, clock=clock, schedule_interval_ms=0) as s:
        r = s.put("T", BODY, compress="zstd", delay_level=1)
        stored = bytes(s.read(r.commitlog_offset).stored_body)
        clock.now += 2_000
        assert s.deliver_delayed() == 1
        delivered = s.get_message("g", "T", 0, 0, 32).messages[0]
        assert bytes(delivered.stored_body) == stored and delivered.body == BODY
        back = s.send_back("g", delivered, 1)
        copy = s.read(back.commitlog_offset)
        assert bytes(copy.stored_body) == stored and copy.body == BODY
        assert copy.sys_flag & 0x701 == delivered.sys_flag & 0x701
        # a timer message's delivery copies the stored bytes too
        timed = s.put("T", BODY, compress="lz4", delay_ms=1_000)
        stored = bytes(s.read(timed.commitlog_offset).stored_body)
        clock.now += 2_000
        assert s.deliver_timers() == 1
        last = s.get_message("g", "T", 0, 1, 32).messages[-1]
        assert bytes(last.stored_body) == stored and last.body == BODY


def test_the_spark_reader_gives_inflated_bodies(tmp_path, impl):
    pytest.importorskip("pyarrow")
    from rocketstore.spark._arrow import read_queue_range

    with _store(tmp_path, impl) as s:
        s.put("T", b"plain")
        s.put("T", BODY, compress="zlib")
        s.put("T", b"plain again")
    p = types.SimpleNamespace(root=str(tmp_path / "s"), broker="b", topic="T", queue_id=0, start=0, end=3)
    (batch,) = read_queue_range(p, ["body", "sysFlag"])
    assert batch.column(0).to_pylist() == [b"plain", BODY, b"plain again"]
