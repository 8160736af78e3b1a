"""The store's append path against the codec: statuses, IPv6 hosts, and bytes on disk."""

import os

import pytest

from rocketstore import MessageStore, PutStatus
from rocketstore.errors import CreateMappedFileFailedError, SegmentError
from rocketstore.message import host_to_bytes

SEGMENT = 64 * 1024


def _open(impl, path, **options):
    options.setdefault("commitlog_file_size", SEGMENT)
    return MessageStore(path, implementation=impl.name, **options)


def test_put_without_segment_space_reports_create_mapped_file_failed(impl, tmp_path):
    with _open(impl, tmp_path / "s") as store:
        store.put("T", b"x" * 100)
        before = store.max_offset

        def refuse(start):
            raise SegmentError(28, "No space left on device (simulated)")

        real_roll = store._opened.segments.segment_at
        store._opened.segments.segment_at = refuse
        # fill the first segment until a record must go to the next one
        stored = 0
        with pytest.raises(CreateMappedFileFailedError) as info:
            for _ in range(SEGMENT // 1000 + 2):
                store.put("T", b"y" * 900)
                stored += 1
        failed = info.value
        assert failed.status == PutStatus.CREATE_MAPPED_FILE_FAILED
        assert isinstance(failed, SegmentError) and isinstance(failed.__cause__, SegmentError)
        stored_end = store.max_offset
        assert stored_end >= before
        # space is back: the same put succeeds at the start of the next segment
        store._opened.segments.segment_at = real_roll
        again = store.put("T", b"z" * 900)
        assert again.ok and again.commitlog_offset == SEGMENT
        assert store.read(again.commitlog_offset).body == b"z" * 900
        # the first put, the stored ones (all but the failed one), and the one after space returned
        assert len(list(store.iter_messages())) == 1 + stored + 1


def test_ipv6_hosts_set_sysflag_and_long_msg_ids(impl, tmp_path):
    with _open(impl, tmp_path / "s", store_host="fe80::1", born_host="::1", born_port=4321) as store:
        r = store.put("TopicTest", b"Hello world", tags="TagA")
        assert len(r.msg_id) == 56
        assert r.msg_id.startswith("FE80000000000000000000000000000100002A9F")
        m = store.get_by_msg_id(r.msg_id)
        assert m.sys_flag & 0x30 == 0x30
        assert m.store_host == ("fe80::1", 10911)
        assert m.born_host == ("::1", 4321)
        assert m.size == r.size == 91 + 11 + 9 + len(store._codec.encode_properties(m.properties)) + 24
        assert len(r.unique_key) == 56  # 16-byte producer address


def test_records_on_disk_are_what_the_codec_encodes(impl, tmp_path):
    with _open(
        impl, tmp_path / "s", store_host="10.108.115.217", born_host="192.168.0.1", born_port=54321
    ) as store:
        results = [store.put("TopicTest", bytes([i]) * i, keys=f"k{i}", flag=i) for i in range(50)]
        results += list(store.put_batch("TopicTest", [b"batch"] * 5, tags="TagB"))
        segment = store._opened.segments.files[0]
        for r in results:
            m = store.read(r.commitlog_offset)
            raw = bytes(segment.mm[r.commitlog_offset : r.commitlog_offset + r.size])
            again = store._codec.encode_record(
                topic=m.topic,
                body=m.body,
                properties=raw[-(len(raw) - 91 - len(m.body) - len(m.topic)) :],
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
            )
            assert again == raw
            assert m.store_host == ("10.108.115.217", 10911)
            assert r.msg_id == ("0A6C73D900002A9F" + format(r.commitlog_offset, "016X"))


def test_segment_files_are_sparse_or_preallocated_to_full_size(impl, tmp_path):
    with _open(impl, tmp_path / "s") as store:
        store.put("T", b"x")
        path = store._opened.segments.files[0].path
        assert os.path.getsize(path) == SEGMENT
        assert os.path.basename(path) == "0" * 20


def test_store_host_default_is_an_ipv4_address(impl, tmp_path):
    with _open(impl, tmp_path / "s") as store:
        assert len(host_to_bytes(store.config.store_host)) == 4
        assert store.config.store_port == 10911


@pytest.mark.parametrize("topic", ["T\n", "T ", "%RETRY%g#1", "é"])
def test_topics_outside_rocketmq_rule_are_refused_on_both_twins(impl, tmp_path, topic):
    from rocketstore.errors import InvalidTopicError

    with _open(impl, tmp_path / "s") as store:
        with pytest.raises(InvalidTopicError):
            store.put(topic, b"x")
        assert store.max_offset == 0
