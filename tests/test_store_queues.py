"""MessageStore's ConsumeQueues: getMessage statuses and next offsets (spec §11), tag filters and
their collision re-check (§4.3), consumer offsets (§10), the queue files' bytes (§4.1),
transactional records (§4.2), read-your-writes, reopening, and a read-only reader beside a writer."""

import os
import pathlib
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading

import pytest

import rocketstore
from rocketstore import GetMessageStatus, Message, MessageStore
from rocketstore.consume import GetMessageResult
from rocketstore.errors import InvalidMessageError, MessageNotFoundError, StoreClosedError, StoreReadOnlyError
from rocketstore.files.configfiles import loads_fastjson
from rocketstore.format._codec_py import java_hash
from rocketstore.queues.consumequeue import CQ_UNIT_DTYPE

S = GetMessageStatus
SEGMENT = 64 * 1024
HOST = "10.0.0.7"
PORT = 10911
CQ_UNITS = 64  # units per ConsumeQueue file in these tests: rolls every 64
UNIT = struct.Struct(">qiq")  # §4.1: commitlog offset, size, tagsCode, big-endian
SRC = str(pathlib.Path(rocketstore.__file__).resolve().parents[1])


def open_store(path, impl, **options):
    options.setdefault("commitlog_file_size", SEGMENT)
    options.setdefault("consume_queue_units", CQ_UNITS)
    options.setdefault("index_slots", 64)
    options.setdefault("index_count", 256)
    return MessageStore(path, implementation=impl.name, store_host=HOST, store_port=PORT, **options)


@pytest.fixture
def store(tmp_path, impl):
    s = open_store(tmp_path / "store", impl)
    yield s
    s.close()


def bodies_of(result):
    return [m.body for m in result.messages]


def put_tagged(store, topic, tags, queue_id=0):
    """One message per entry of ``tags`` into (topic, queue_id); body b"<i>:<tag>"."""
    return [
        store.put(topic, b"%d:%s" % (i, (t or "").encode()), tags=t, queue_id=queue_id)
        for i, t in enumerate(tags)
    ]


def cq_file(root, topic, queue_id, start_unit=0):
    return pathlib.Path(root) / "consumequeue" / topic / str(queue_id) / f"{start_unit * 20:020d}"


# -- statuses and next_begin_offset (§11) -------------------------------------------------------


def test_result_types_are_the_consume_modules(store):
    store.put("TopicS", b"x", queue_id=0)
    r = store.get_message("g", "TopicS", 0, offset=0)
    assert isinstance(r, GetMessageResult)
    assert isinstance(r.status, GetMessageStatus) and rocketstore.GetMessageStatus is GetMessageStatus


def test_unknown_topic_is_no_matched_logic_queue(store):
    r = store.get_message("g", "NoSuchTopic", 0, offset=0)
    assert r.status is S.NO_MATCHED_LOGIC_QUEUE
    assert r.next_begin_offset == 0 and r.messages == [] and len(r.units) == 0
    assert (r.min_offset, r.max_offset) == (0, 0)


def test_unused_queue_of_a_used_topic_has_no_message(store):
    store.put("TopicS", b"only queue 0", queue_id=0)
    r = store.get_message("g", "TopicS", 3, offset=0)
    # RocketMQ creates the queue on lookup (NO_MESSAGE_IN_QUEUE); a store without it says so
    assert r.status in (S.NO_MATCHED_LOGIC_QUEUE, S.NO_MESSAGE_IN_QUEUE)
    assert r.next_begin_offset == 0 and r.messages == []


def test_found_returns_the_messages_in_queue_order_with_next_offset(store):
    results = put_tagged(store, "TopicS", ["T"] * 10)
    r = store.get_message("g", "TopicS", 0, offset=0)
    assert r.status is S.FOUND
    assert bodies_of(r) == [b"%d:T" % i for i in range(10)]
    assert [m.queue_offset for m in r.messages] == list(range(10))
    assert list(r.queue_offsets) == list(range(10))
    assert [m.commitlog_offset for m in r.messages] == [x.commitlog_offset for x in results]
    assert list(r.units["commitlog_offset"]) == [x.commitlog_offset for x in results]
    assert r.next_begin_offset == 10
    assert (r.min_offset, r.max_offset) == (0, 10)


def test_max_msgs_limits_the_batch_and_next_offset_follows_the_last_message(store):
    put_tagged(store, "TopicS", ["T"] * 10)
    r = store.get_message("g", "TopicS", 0, offset=4, max_msgs=3)
    assert r.status is S.FOUND
    assert [m.queue_offset for m in r.messages] == [4, 5, 6]
    assert r.next_begin_offset == 7


def test_offset_at_max_is_overflow_one_and_past_max_is_overflow_badly(store):
    put_tagged(store, "TopicS", ["T"] * 10)
    one = store.get_message("g", "TopicS", 0, offset=10)
    assert one.status is S.OFFSET_OVERFLOW_ONE and one.next_begin_offset == 10 and one.messages == []
    badly = store.get_message("g", "TopicS", 0, offset=11)
    assert badly.status is S.OFFSET_OVERFLOW_BADLY and badly.messages == []
    assert badly.next_begin_offset == 0  # 4.3: min when min == 0
    assert (badly.min_offset, badly.max_offset) == (0, 10)


def test_pulling_until_overflow_one_yields_every_message_once_across_cq_files(store):
    put_tagged(store, "TopicS", ["T"] * 150)  # 3 ConsumeQueue files of 64 units
    seen, offset = [], 0
    for _ in range(200):
        r = store.get_message("g", "TopicS", 0, offset=offset, max_msgs=32)
        if r.status is S.OFFSET_OVERFLOW_ONE:
            break
        assert r.status is S.FOUND
        got = [m.queue_offset for m in r.messages]
        assert got == list(range(offset, offset + len(got))) and 1 <= len(got) <= 32
        assert r.next_begin_offset == offset + len(got)
        seen.extend(got)
        offset = r.next_begin_offset
    assert seen == list(range(150))


def test_a_pull_at_a_cq_file_end_goes_on_in_order(store):
    put_tagged(store, "TopicS", ["T"] * 100)
    r = store.get_message("g", "TopicS", 0, offset=60, max_msgs=32)
    assert r.status is S.FOUND
    got = [m.queue_offset for m in r.messages]
    assert len(got) >= 4 and got == list(range(60, 60 + len(got)))
    assert r.next_begin_offset == 60 + len(got)


def test_offset_below_min_is_offset_too_small_after_the_queue_is_rebuilt_without_old_segments(tmp_path, impl):
    path = tmp_path / "store"
    with open_store(path, impl, commitlog_file_size=4096) as s:
        results = [s.put("TopicS", b"m%03d" % i + bytes(300), queue_id=0) for i in range(40)]
    first_segment = path / "commitlog" / f"{0:020d}"
    assert first_segment.exists() and (path / "commitlog" / f"{4096:020d}").exists()
    first_segment.unlink()  # retention removed the oldest segment
    for d in ("consumequeue", "index"):  # and the queues are rebuilt from what is left
        shutil.rmtree(path / d, ignore_errors=True)
    survivors = [r for r in results if r.commitlog_offset >= 4096]
    lowest = survivors[0].queue_offset
    assert lowest > 0
    with open_store(path, impl, commitlog_file_size=4096) as s:
        assert s.min_queue_offset("TopicS", 0) == lowest
        assert s.max_queue_offset("TopicS", 0) == 40
        r = s.get_message("g", "TopicS", 0, offset=0)
        assert r.status is S.OFFSET_TOO_SMALL and r.next_begin_offset == lowest and r.messages == []
        r = s.get_message("g", "TopicS", 0)  # no committed offset: starts at min
        assert r.status is S.FOUND and r.messages[0].queue_offset == lowest
        assert r.messages[0].commitlog_offset == survivors[0].commitlog_offset


def test_min_offset_follows_the_commitlog_min_offset_after_retention_on_reopen(tmp_path, impl):
    # §7.1 step 7: every queue's min offset is corrected to the CommitLog's min offset
    path = tmp_path / "store"
    with open_store(path, impl, commitlog_file_size=4096) as s:
        results = [s.put("TopicS", b"m%03d" % i + bytes(300), queue_id=0) for i in range(40)]
    (path / "commitlog" / f"{0:020d}").unlink()
    lowest = next(r.queue_offset for r in results if r.commitlog_offset >= 4096)
    with open_store(path, impl, commitlog_file_size=4096) as s:
        assert s.min_queue_offset("TopicS", 0) == lowest
        r = s.get_message("g", "TopicS", 0, offset=0)
        assert r.status is S.OFFSET_TOO_SMALL and r.next_begin_offset == lowest


# -- tag filters (§4.3) -------------------------------------------------------------------------


def test_tag_expression_selects_tags_and_consumes_the_filtered_units(store):
    tags = ["TagA", "TagB", "TagC", "TagA", None, "TagC", "TagB"]
    put_tagged(store, "TopicF", tags)
    r = store.get_message("g", "TopicF", 0, offset=0, tags="TagA || TagC")
    assert r.status is S.FOUND
    assert [m.queue_offset for m in r.messages] == [0, 2, 3, 5]
    assert all(m.tags in ("TagA", "TagC") for m in r.messages)
    assert r.next_begin_offset == 7
    r = store.get_message("g", "TopicF", 0, offset=0, tags="TagB", max_msgs=1)
    assert [m.queue_offset for m in r.messages] == [1] and r.next_begin_offset == 2


@pytest.mark.parametrize("everything", [None, "*", ""])
def test_star_and_none_take_every_tag_including_none(store, everything):
    put_tagged(store, "TopicF", ["TagA", None, "TagB"])
    r = store.get_message("g", "TopicF", 0, offset=0, tags=everything)
    assert [m.queue_offset for m in r.messages] == [0, 1, 2]


def test_nothing_matching_is_no_matched_message_and_consumes_the_units(store):
    put_tagged(store, "TopicF", ["TagB"] * 5)
    r = store.get_message("g", "TopicF", 0, offset=1, tags="TagA")
    assert r.status is S.NO_MATCHED_MESSAGE and r.messages == []
    assert r.next_begin_offset == 5


def test_tags_code_collision_is_dropped_by_the_real_tag_recheck(store):
    assert java_hash("Aa") == java_hash("BB")
    put_tagged(store, "TopicF", ["Aa", "BB", "Aa", "BB", "TagZ"])
    r = store.get_message("g", "TopicF", 0, offset=0, tags="Aa")
    assert r.status is S.FOUND
    assert [(m.queue_offset, m.tags) for m in r.messages] == [(0, "Aa"), (2, "Aa")]
    assert list(r.queue_offsets) == [0, 2]
    assert r.next_begin_offset == 5
    r = store.get_message("g", "TopicF", 0, offset=0, tags="BB")
    assert [(m.queue_offset, m.tags) for m in r.messages] == [(1, "BB"), (3, "BB")]


def test_a_pull_that_meets_only_colliding_tags_is_no_matched_message(store):
    put_tagged(store, "TopicF", ["BB", "BB", "BB"])
    r = store.get_message("g", "TopicF", 0, offset=0, tags="Aa")
    assert r.status is S.NO_MATCHED_MESSAGE and r.messages == [] and r.next_begin_offset == 3


def test_longer_constructed_collisions_are_rechecked(store):
    colliding = ["AaAa", "AaBB", "BBAa", "BBBB"]
    assert len({java_hash(t) for t in colliding}) == 1
    put_tagged(store, "TopicF", colliding * 2)
    r = store.get_message("g", "TopicF", 0, offset=0, tags="AaBB || BBBB")
    assert [m.tags for m in r.messages] == ["AaBB", "BBBB", "AaBB", "BBBB"]
    assert [m.queue_offset for m in r.messages] == [1, 3, 5, 7]


# -- get_units and queue_units ------------------------------------------------------------------


def test_get_units_returns_units_not_messages(store):
    results = put_tagged(store, "TopicU", ["TagA", "TagB", "TagA"])
    r = store.get_units("TopicU", 0, 0)
    assert r.status is S.FOUND and r.messages == []
    assert r.units.dtype == CQ_UNIT_DTYPE
    assert list(r.units["commitlog_offset"]) == [x.commitlog_offset for x in results]
    assert list(r.units["size"]) == [x.size for x in results]
    assert list(r.units["tags_code"]) == [java_hash(t) for t in ("TagA", "TagB", "TagA")]
    assert list(r.queue_offsets) == [0, 1, 2] and r.next_begin_offset == 3
    f = store.get_units("TopicU", 0, 0, tags="TagB")
    assert list(f.queue_offsets) == [1] and list(f.units["commitlog_offset"]) == [results[1].commitlog_offset]
    assert store.get_units("TopicU", 0, 3).status is S.OFFSET_OVERFLOW_ONE
    assert store.get_units("Nope", 0, 0).status is S.NO_MATCHED_LOGIC_QUEUE


def test_get_units_filters_by_tags_code_only_so_a_collision_passes(store):
    put_tagged(store, "TopicU", ["Aa", "BB", "TagZ"])
    r = store.get_units("TopicU", 0, 0, tags="Aa")
    assert list(r.queue_offsets) == [0, 1]  # documented: the caller re-checks the tags


def test_queue_units_is_a_read_only_view_that_loops_across_cq_files(store):
    results = put_tagged(store, "TopicU", ["T%d" % (i % 3) for i in range(150)])
    expected = [(r.commitlog_offset, r.size, java_hash("T%d" % (i % 3))) for i, r in enumerate(results)]
    got, start = [], 0
    while start < 150:
        view = store.queue_units("TopicU", 0, start, 50)
        assert view.dtype == CQ_UNIT_DTYPE
        assert 1 <= len(view) <= 50
        assert not view.flags.writeable
        with pytest.raises(ValueError):
            view["size"][0] = 1
        got.extend(zip(view["commitlog_offset"].tolist(), view["size"].tolist(), view["tags_code"].tolist()))
        start += len(view)
    assert got == expected
    assert len(store.queue_units("TopicU", 0, 150, 10)) == 0
    first = store.queue_units("TopicU", 0, 60, 50)
    assert 4 <= len(first) <= 50  # may stop at the end of the first file


def test_queue_units_view_survives_close(tmp_path, impl):
    s = open_store(tmp_path / "store", impl)
    results = put_tagged(s, "TopicU", ["T"] * 5)
    view = s.queue_units("TopicU", 0, 0, 5)
    s.close()
    assert view["commitlog_offset"].tolist() == [r.commitlog_offset for r in results]


# -- queue bounds ---------------------------------------------------------------------------------


def test_min_and_max_queue_offset(store):
    assert (store.min_queue_offset("Nope", 0), store.max_queue_offset("Nope", 0)) == (0, 0)
    put_tagged(store, "TopicB", ["T"] * 7, queue_id=2)
    put_tagged(store, "TopicB", ["T"] * 3, queue_id=1)
    assert (store.min_queue_offset("TopicB", 2), store.max_queue_offset("TopicB", 2)) == (0, 7)
    assert (store.min_queue_offset("TopicB", 1), store.max_queue_offset("TopicB", 1)) == (0, 3)
    assert store.max_queue_offset("TopicB", 0) == 0
    assert store.max_queue_offset("TopicB", 2) == store.queue_offsets()[("TopicB", 2)]


# -- consumer offsets (§10) -------------------------------------------------------------------------


def test_committed_offset_is_minus_one_until_committed(store):
    assert store.committed_offset("g", "TopicO", 0) == -1
    store.commit_offset("g", "TopicO", 0, 5)
    assert store.committed_offset("g", "TopicO", 0) == 5
    assert store.committed_offset("g", "TopicO", 1) == -1
    assert store.committed_offset("other", "TopicO", 0) == -1
    store.commit_offset("g", "TopicO", 0, 9)
    assert store.committed_offset("g", "TopicO", 0) == 9


def test_offset_none_starts_at_the_committed_offset_or_the_queue_min(store):
    put_tagged(store, "TopicO", ["T"] * 10)
    store.commit_offset("g1", "TopicO", 0, 6)
    r = store.get_message("g1", "TopicO", 0)
    assert [m.queue_offset for m in r.messages] == [6, 7, 8, 9]
    r = store.get_message("g2", "TopicO", 0, max_msgs=2)
    assert [m.queue_offset for m in r.messages] == [0, 1]
    store.commit_offset("g1", "TopicO", 0, 10)
    assert store.get_message("g1", "TopicO", 0).status is S.OFFSET_OVERFLOW_ONE


def test_offsets_persist_as_fastjson_on_close_and_come_back(tmp_path, impl):
    path = tmp_path / "store"
    with open_store(path, impl) as s:
        put_tagged(s, "TopicO", ["T"] * 8, queue_id=0)
        put_tagged(s, "TopicO", ["T"] * 8, queue_id=1)
        s.commit_offset("grp", "TopicO", 0, 5)
        s.commit_offset("grp", "TopicO", 1, 7)
        s.commit_offset("other", "TopicO", 1, 2)
    text = (path / "config" / "consumerOffset.json").read_text("utf-8")
    assert loads_fastjson(text) == {"offsetTable": {"TopicO@grp": {0: 5, 1: 7}, "TopicO@other": {1: 2}}}
    assert re.search(r"\{0:5,1:7\b", text), text  # unquoted integer keys
    assert '"0"' not in text
    with open_store(path, impl) as s:
        assert s.committed_offset("grp", "TopicO", 0) == 5
        assert s.committed_offset("grp", "TopicO", 1) == 7
        assert s.committed_offset("other", "TopicO", 1) == 2
        assert s.committed_offset("other", "TopicO", 0) == -1
        r = s.get_message("grp", "TopicO", 1)
        assert [m.queue_offset for m in r.messages] == [7]


def test_persist_offsets_writes_while_open(tmp_path, impl):
    path = tmp_path / "store"
    with open_store(path, impl) as s:
        s.commit_offset("grp", "TopicO", 3, 42)
        s.persist_offsets()
        data = loads_fastjson((path / "config" / "consumerOffset.json").read_text("utf-8"))
        assert data["offsetTable"]["TopicO@grp"] == {3: 42}


def test_a_java_written_offset_file_with_tabs_and_unquoted_keys_loads(tmp_path, impl):
    path = tmp_path / "store"
    (path / "config").mkdir(parents=True)
    (path / "config" / "consumerOffset.json").write_text(
        '{\n\t"offsetTable":{\n\t\t"TopicJ@groupJ":{0:12,1:15,3:7\n\t\t},'
        '\n\t\t"%RETRY%groupJ@groupJ":{0:0\n\t\t}\n\t}\n}',
        "utf-8",
    )
    with open_store(path, impl) as s:
        assert s.committed_offset("groupJ", "TopicJ", 0) == 12
        assert s.committed_offset("groupJ", "TopicJ", 1) == 15
        assert s.committed_offset("groupJ", "TopicJ", 3) == 7
        assert s.committed_offset("groupJ", "TopicJ", 2) == -1
        assert s.committed_offset("groupJ", "%RETRY%groupJ", 0) == 0
        s.commit_offset("groupJ", "TopicJ", 2, 1)
    data = loads_fastjson((path / "config" / "consumerOffset.json").read_text("utf-8"))
    assert data["offsetTable"]["TopicJ@groupJ"] == {0: 12, 1: 15, 2: 1, 3: 7}
    assert data["offsetTable"]["%RETRY%groupJ@groupJ"] == {0: 0}


def test_a_read_only_store_reads_offsets_and_refuses_commits(tmp_path, impl):
    path = tmp_path / "store"
    with open_store(path, impl) as s:
        put_tagged(s, "TopicO", ["T"] * 3)
        s.commit_offset("grp", "TopicO", 0, 2)
    with open_read_only(path, impl) as ro:
        assert ro.committed_offset("grp", "TopicO", 0) == 2
        assert [m.queue_offset for m in ro.get_message("grp", "TopicO", 0).messages] == [2]
        with pytest.raises(StoreReadOnlyError):
            ro.commit_offset("grp", "TopicO", 0, 3)


# -- the ConsumeQueue files (§4.1) ---------------------------------------------------------------


def test_cq_file_holds_big_endian_units_and_rolls_by_units(tmp_path, impl):
    path = tmp_path / "store"
    tags = [None, "TagA", "polygenelubricants", "ü😀"] * 25  # 100 units
    assert java_hash("polygenelubricants") == -(1 << 31)  # sign-extended on disk
    with open_store(path, impl) as s:
        results = put_tagged(s, "TopicCQ", tags, queue_id=1)
    expected = b"".join(
        UNIT.pack(r.commitlog_offset, r.size, java_hash(t) if t else 0) for r, t in zip(results, tags)
    )
    first = cq_file(path, "TopicCQ", 1, 0)
    second = cq_file(path, "TopicCQ", 1, CQ_UNITS)
    assert second.name == "00000000000000001280"
    assert sorted(p.name for p in first.parent.iterdir()) == [first.name, second.name]
    assert first.stat().st_size == second.stat().st_size == CQ_UNITS * 20
    data = first.read_bytes() + second.read_bytes()
    assert data[: 100 * 20] == expected
    assert data[100 * 20 :] == bytes(28 * 20)  # the rest of file 2 is zero
    assert data[2 * 20 + 12 : 2 * 20 + 20] == bytes.fromhex("FFFFFFFF80000000")


def test_cq_files_are_written_while_open(tmp_path, impl):
    path = tmp_path / "store"
    with open_store(path, impl) as s:
        results = put_tagged(s, "TopicCQ", ["TagA"] * 3)
        assert s.max_queue_offset("TopicCQ", 0) == 3  # dispatch caught up
        data = cq_file(path, "TopicCQ", 0).read_bytes()
        assert data[:60] == b"".join(
            UNIT.pack(r.commitlog_offset, r.size, java_hash("TagA")) for r in results
        )


# -- batches, put_messages, transactions (§4.2) ---------------------------------------------------


def test_put_batch_is_dispatched_in_order(store):
    bodies = [b"batch-%d" % i for i in range(20)]
    b = store.put_batch("TopicBatch", bodies, tags="TagB", queue_id=2)
    r = store.get_message("g", "TopicBatch", 2, offset=0)
    assert r.status is S.FOUND and bodies_of(r) == bodies
    assert [m.tags for m in r.messages] == ["TagB"] * 20
    assert list(r.units["commitlog_offset"]) == list(b.commitlog_offsets)
    assert list(r.queue_offsets) == list(b.queue_offsets)
    buf = b"".join(bodies)
    b2 = store.put_batch("TopicBatch", buf, lengths=[len(x) for x in bodies], queue_id=2)
    r = store.get_message("g", "TopicBatch", 2, offset=20, max_msgs=100)
    assert bodies_of(r) == bodies and list(r.queue_offsets) == list(b2.queue_offsets)
    assert store.max_queue_offset("TopicBatch", 2) == 40


def test_put_messages_across_topics_is_dispatched_per_queue(store):
    msgs = [Message(f"TopicM{i % 3}", b"m%d" % i, tags=f"t{i % 2}", queue_id=i % 2) for i in range(24)]
    results = store.put_messages(msgs)
    for topic_index in range(3):
        for qid in range(2):
            expect = [
                (m.body, r.commitlog_offset)
                for m, r in zip(msgs, results)
                if m.topic == f"TopicM{topic_index}" and m.queue_id == qid
            ]
            r = store.get_message("g", f"TopicM{topic_index}", qid, offset=0)
            assert [(m.body, m.commitlog_offset) for m in r.messages] == expect


def test_prepared_and_rollback_records_are_not_in_any_queue(store):
    results = store.put_messages(
        [
            Message("TopicTx", b"prepared", keys="kp", queue_id=0, sys_flag=0x4),
            Message("TopicTx", b"normal", keys="kn", queue_id=0),
            Message("TopicTx", b"rollback", keys="kr", queue_id=0, sys_flag=0xC),
            Message("TopicTx", b"commit", keys="kc", queue_id=0, sys_flag=0x8),
        ]
    )
    single = store.put(Message("TopicTx", b"prepared2", queue_id=0, sys_flag=0x4))
    after = store.put("TopicTx", b"after", queue_id=0)
    r = store.get_message("g", "TopicTx", 0, offset=0)
    assert bodies_of(r) == [b"normal", b"commit", b"after"]
    assert list(r.queue_offsets) == [0, 1, 2]
    assert [x.commitlog_offset for x in r.messages] == [
        results[1].commitlog_offset,
        results[3].commitlog_offset,
        after.commitlog_offset,
    ]
    assert store.max_queue_offset("TopicTx", 0) == 3
    # still in the CommitLog: readable by offset and id
    assert store.read(results[0].commitlog_offset).body == b"prepared"
    assert store.get_by_msg_id(single.msg_id).body == b"prepared2"
    # a PREPARED record is indexed, a ROLLBACK one is not (§5.4)
    assert [m.body for m in store.query_by_key("TopicTx", "kp")] == [b"prepared"]
    assert store.query_by_key("TopicTx", "kr") == []
    assert [m.body for m in store.query_by_key("TopicTx", "kc")] == [b"commit"]
    with pytest.raises(MessageNotFoundError):
        store.query_by_unique_key("TopicTx", results[2].unique_key)
    assert store.query_by_unique_key("TopicTx", results[0].unique_key).body == b"prepared"


# -- read-your-writes -----------------------------------------------------------------------------


@pytest.mark.parametrize("dispatch_interval_ms", [0, 10])
def test_every_put_is_visible_to_every_lookup_when_it_returns(tmp_path, impl, dispatch_interval_ms):
    with open_store(tmp_path / "store", impl, dispatch_interval_ms=dispatch_interval_ms) as s:
        for i in range(60):
            if i % 3 == 0:
                r = s.put("TopicRYW", b"single-%d" % i, tags="TagR", keys=f"key-{i} shared", queue_id=1)
                rs = [(r, b"single-%d" % i)]
            elif i % 3 == 1:
                b = s.put_batch("TopicRYW", [b"batch-%d-%d" % (i, k) for k in range(3)], queue_id=1)
                rs = [(b[k], b"batch-%d-%d" % (i, k)) for k in range(3)]
            else:
                out = s.put_messages([Message("TopicRYW", b"pm-%d" % i, keys=f"key-{i}", queue_id=1)])
                rs = [(out[0], b"pm-%d" % i)]
            for r, body in rs:
                assert s.max_queue_offset("TopicRYW", 1) >= r.queue_offset + 1
                assert s.get_by_queue_offset("TopicRYW", 1, r.queue_offset).body == body
                got = s.get_message("g", "TopicRYW", 1, offset=r.queue_offset, max_msgs=1)
                assert got.status is S.FOUND and bodies_of(got) == [body]
                assert s.query_by_unique_key("TopicRYW", r.unique_key).body == body
                if i % 3 != 1:
                    assert [m.body for m in s.query_by_key("TopicRYW", f"key-{i}")] == [body]


def test_read_your_writes_from_several_threads(tmp_path, impl):
    errors = []
    n_threads, per_thread = 6, 40
    with open_store(tmp_path / "store", impl, default_queues=8) as s:
        barrier = threading.Barrier(n_threads)

        def worker(t):
            try:
                barrier.wait()
                for i in range(per_thread):
                    body = b"t%d-%d" % (t, i)
                    r = s.put("TopicThreads", body, keys=f"th{t}-{i}", tags=f"T{t}", queue_id=t)
                    assert r.queue_offset == i
                    m = s.get_by_queue_offset("TopicThreads", t, i)
                    assert m.body == body, (t, i, m.body)
                    g = s.get_message(f"grp{t}", "TopicThreads", t, offset=i, tags=f"T{t}")
                    assert g.status is S.FOUND and g.messages[0].body == body
                    assert [x.body for x in s.query_by_key("TopicThreads", f"th{t}-{i}")] == [body]
                    assert s.query_by_unique_key("TopicThreads", r.unique_key).body == body
                    s.commit_offset(f"grp{t}", "TopicThreads", t, i + 1)
            except BaseException as exc:  # reported by the main thread
                errors.append((t, exc))

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors, errors
        for t in range(n_threads):
            assert s.max_queue_offset("TopicThreads", t) == per_thread
            assert s.committed_offset(f"grp{t}", "TopicThreads", t) == per_thread
            r = s.get_message("x", "TopicThreads", t, offset=0, max_msgs=per_thread)
            assert bodies_of(r) == [b"t%d-%d" % (t, i) for i in range(per_thread)]


# -- reopening --------------------------------------------------------------------------------------


def test_reopen_keeps_queues_offsets_and_continues(tmp_path, impl, rng):
    path = tmp_path / "store"
    expected = {}
    with open_store(path, impl) as s:
        for _i in range(300):
            topic = rng.choice(["TopicR1", "TopicR2"])
            qid = rng.randrange(3)
            body = rng.randbytes(rng.randrange(0, 200))
            r = s.put(topic, body, tags=rng.choice(["A", "B", None]), queue_id=qid)
            expected.setdefault((topic, qid), []).append((r.commitlog_offset, body))
        s.commit_offset("g", "TopicR1", 0, 3)
    with open_store(path, impl) as s:
        assert s.committed_offset("g", "TopicR1", 0) == 3
        for (topic, qid), items in expected.items():
            assert s.max_queue_offset(topic, qid) == len(items)
            r = s.get_message("g2", topic, qid, offset=0, max_msgs=1000)
            assert [(m.commitlog_offset, m.body) for m in r.messages] == items
        r = s.put("TopicR1", b"after", queue_id=0)
        assert r.queue_offset == len(expected[("TopicR1", 0)])
        assert s.get_by_queue_offset("TopicR1", 0, r.queue_offset).body == b"after"
    # the queue files hold each unit once: nothing dispatched twice over the reopen
    n = len(expected[("TopicR1", 0)]) + 1
    units = b"".join(p.read_bytes() for p in sorted(cq_file(path, "TopicR1", 0).parent.iterdir()))
    assert units[n * 20 :] == bytes(len(units) - n * 20)
    assert all(UNIT.unpack_from(units, i * 20)[1] > 0 for i in range(n))


def test_queues_are_rebuilt_when_their_files_are_gone(tmp_path, impl):
    path = tmp_path / "store"
    with open_store(path, impl) as s:
        results = put_tagged(s, "TopicRB", ["TagA", "TagB"] * 50, queue_id=0)
    shutil.rmtree(path / "consumequeue")
    with open_store(path, impl) as s:
        assert s.max_queue_offset("TopicRB", 0) == 100
        r = s.get_message("g", "TopicRB", 0, offset=0, max_msgs=100, tags="TagB")
        assert [m.commitlog_offset for m in r.messages] == [x.commitlog_offset for x in results[1::2]]


def test_reopen_after_a_crash_redispatches_the_lost_tail(tmp_path, impl):
    # a crash can leave the queues behind the CommitLog: simulate one by cutting the CQ file
    path = tmp_path / "store"
    with open_store(path, impl) as s:
        results = put_tagged(s, "TopicCr", ["T"] * 40)
    f = cq_file(path, "TopicCr", 0)
    data = bytearray(f.read_bytes())
    data[20 * 25 :] = bytes(len(data) - 20 * 25)
    f.write_bytes(bytes(data))
    (path / "abort").write_bytes(b"")
    with open_store(path, impl) as s:
        assert s.max_queue_offset("TopicCr", 0) == 40
        r = s.get_message("g", "TopicCr", 0, offset=0, max_msgs=100)
        assert [m.commitlog_offset for m in r.messages] == [x.commitlog_offset for x in results]


# -- argument checking ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs", [dict(max_msgs=0), dict(max_msgs="3"), dict(offset="0"), dict(tags=5), dict(offset=1.0)]
)
def test_bad_get_message_arguments_raise(store, kwargs):
    store.put("TopicA", b"x", queue_id=0)
    args = dict(offset=0)
    args.update(kwargs)
    with pytest.raises((TypeError, InvalidMessageError)):
        store.get_message("g", "TopicA", 0, **args)


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.get_message(None, "TopicA", 0),
        lambda s: s.get_message("g", 5, 0),
        lambda s: s.get_message("g", "TopicA", "0"),
        lambda s: s.commit_offset("g", "TopicA", 0, "5"),
        lambda s: s.commit_offset("g", "TopicA", 0, -2),
        lambda s: s.commit_offset(3, "TopicA", 0, 1),
        lambda s: s.queue_units("TopicA", 0, "0", 5),
        lambda s: s.max_queue_offset(b"TopicA", 0),
    ],
)
def test_bad_queue_arguments_raise_type_or_invalid_message_errors(store, call):
    store.put("TopicA", b"x", queue_id=0)
    with pytest.raises((TypeError, InvalidMessageError)):
        call(store)


def test_queue_methods_on_a_closed_store_raise(tmp_path, impl):
    s = open_store(tmp_path / "store", impl)
    s.put("TopicA", b"x", queue_id=0)
    s.close()
    for call in (
        lambda: s.get_message("g", "TopicA", 0),
        lambda: s.max_queue_offset("TopicA", 0),
        lambda: s.queue_units("TopicA", 0, 0, 1),
        lambda: s.commit_offset("g", "TopicA", 0, 1),
        lambda: s.committed_offset("g", "TopicA", 0),
    ):
        with pytest.raises(StoreClosedError):
            call()


# -- a read-only reader beside a writer ------------------------------------------------------------


def check_prefix(ro, topic, queue_ids, bodies_of_queue):
    """The read-only store shows, per queue, the first k messages the writer wrote, nothing else."""
    seen = 0
    for qid in queue_ids:
        k = ro.max_queue_offset(topic, qid)
        written = bodies_of_queue(qid)
        assert 0 <= k <= len(written), (qid, k, len(written))
        r = ro.get_message("g", topic, qid, offset=0, max_msgs=max(k, 1))
        if k == 0:
            assert r.status in (S.NO_MATCHED_LOGIC_QUEUE, S.NO_MESSAGE_IN_QUEUE)
            continue
        got = bodies_of(r)
        while r.next_begin_offset < k:
            r = ro.get_message("g", topic, qid, offset=r.next_begin_offset, max_msgs=k)
            got += bodies_of(r)
        # a reader follows the writer: a pull may return more than was there at first
        assert len(got) >= k and got == written[: len(got)]
        assert ro.get_by_queue_offset(topic, qid, k - 1).body == written[k - 1]
        try:  # a reader follows the writer: position k is missing, or the writer's k-th message
            beyond = ro.get_by_queue_offset(topic, qid, k)
        except MessageNotFoundError:
            pass
        else:
            assert k < len(written) and beyond.body == written[k]
        seen += k
    return seen


def writer_body(i):
    """The i-th body the writers below put (into queue i % 2)."""
    return b"w-%06d" % i + bytes(i % 97)


def writer_bodies(qid, n):
    return [writer_body(i) for i in range(qid, n, 2)]


def open_read_only(path, impl):
    return MessageStore(
        path,
        read_only=True,
        implementation=impl.name,
        consume_queue_units=CQ_UNITS,
        index_slots=64,
        index_count=256,
    )


def test_read_only_store_beside_a_writer_in_this_process_sees_a_prefix(tmp_path, impl):
    path = tmp_path / "store"
    n = 20000
    stop = threading.Event()
    errors = []
    with open_store(path, impl, commitlog_file_size=16 * 4096) as w:
        w.put("TopicW", writer_body(0), queue_id=0)

        def writer():
            try:
                for i in range(1, n):
                    if stop.is_set():
                        break
                    w.put("TopicW", writer_body(i), keys=f"k{i}", queue_id=i % 2)
            except BaseException as exc:
                errors.append(exc)

        t = threading.Thread(target=writer)
        t.start()
        try:
            seen = []
            for _ in range(5):
                with open_read_only(path, impl) as ro:
                    seen.append(check_prefix(ro, "TopicW", (0, 1), lambda q: writer_bodies(q, n)))
        finally:
            stop.set()
            t.join()
        assert not errors, errors
        assert seen[0] >= 1


WRITER_CHILD = r"""
import sys
from rocketstore import MessageStore
path, impl, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = MessageStore(path, implementation=impl, commitlog_file_size=16 * 4096, store_host="10.0.0.7",
                 consume_queue_units=64, index_slots=64, index_count=256)
body = lambda i: b"w-%06d" % i + bytes(i % 97)
s.put("TopicW", body(0), queue_id=0)
sys.stdout.write("READY\n"); sys.stdout.flush()
for i in range(1, n):
    s.put("TopicW", body(i), keys="k%d" % i, queue_id=i % 2)
s.close()
"""


@pytest.mark.slow  # a writer subprocess; the in-process test above is the fast one
def test_read_only_store_beside_a_writer_process_sees_a_prefix(tmp_path, impl):
    path = tmp_path / "store"
    n = 30000
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER_CHILD, str(path), impl.name, str(n)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        first = child.stdout.readline()
        assert first == b"READY\n", child.stderr.read() if child.poll() is not None else first
        seen = []
        for _ in range(5):
            with open_read_only(path, impl) as ro:
                seen.append(check_prefix(ro, "TopicW", (0, 1), lambda q: writer_bodies(q, n)))
        _, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert seen[0] >= 1
    with open_read_only(path, impl) as ro:
        assert check_prefix(ro, "TopicW", (0, 1), lambda q: writer_bodies(q, n)) == n


@pytest.mark.slow  # kills a writer subprocess mid-put, repeatedly
def test_read_only_store_beside_a_writer_killed_mid_put_sees_only_whole_messages(tmp_path, impl):
    """kill -9 of the writer while readers open and read: every reader, before and after the
    kill, sees a prefix of whole, CRC-valid messages; the killed writer's store then recovers."""
    path = tmp_path / "store"
    n = 200000  # more than it writes before the kill
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER_CHILD, str(path), impl.name, str(n)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert child.stdout.readline() == b"READY\n", child.stderr.read()
        seen = []
        for round_ in range(6):
            if round_ == 1:  # early: a reader that follows the writer takes longer each round
                child.send_signal(signal.SIGKILL)
                child.wait()
            with open_read_only(path, impl) as ro:
                seen.append(check_prefix(ro, "TopicW", (0, 1), lambda q: writer_bodies(q, n)))
                report = ro.verify()
                assert report["ok"], report["problems"]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    assert seen == sorted(seen) and seen[-1] == seen[-2] > 0  # after the kill nothing moves
    with MessageStore(
        path,
        implementation=impl.name,
        store_host="10.0.0.7",
        consume_queue_units=64,
        index_slots=64,
        index_count=256,
    ) as store:
        assert not store.last_shutdown_clean
        assert check_prefix(store, "TopicW", (0, 1), lambda q: writer_bodies(q, n)) >= seen[-1]
