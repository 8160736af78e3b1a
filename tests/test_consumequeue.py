"""ConsumeQueue (spec §4): unit layout, dispatch rules, recovery, truncation, retention, views."""

import logging
import os
import pathlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore.errors import (
    InvalidMessageError,
    InvalidQueueIdError,
    InvalidTopicError,
    MessageNotFoundError,
    StoreClosedError,
    StoreConfigError,
    StoreReadOnlyError,
)
from rocketstore.format._codec_py import tags_code
from rocketstore.queues.consumequeue import (
    CQ_UNIT_DTYPE,
    CQ_UNIT_SIZE,
    DEFAULT_CQ_FILE_SIZE,
    DEFAULT_CQ_UNITS,
    PLACEHOLDER_SIZE,
    PLACEHOLDER_UNIT,
    ConsumeQueue,
    encode_unit,
    roll_next_file,
    unit_location,
)
from rocketstore.queues.cqstore import ConsumeQueueStore

UNITS = 10  # small files for most tests: 200 bytes each
MSG = 137  # the record size of vector 6


def open_cq(root, units=UNITS, topic="TopicTest", qid=0, read_only=False):
    cq = ConsumeQueue(str(root), topic, qid, units_per_file=units, read_only=read_only)
    cq.load()
    cq.recover()
    return cq


def fill(cq, start_q, count, start_phys=0, size=MSG, tags=7):
    """Append ``count`` in-order units: queue offset start_q + i at CommitLog start_phys + i*size."""
    for i in range(count):
        assert cq.append(start_q + i, start_phys + i * size, size, tags)


def file_bytes(cq, name):
    with open(os.path.join(cq.directory, name), "rb") as f:
        return f.read()


def files(cq):
    return sorted(os.listdir(cq.directory))


def name(byte_offset):
    return f"{byte_offset:020d}"


# -- layout and the §14 vectors ------------------------------------------------------------------


def test_unit_dtype_is_the_20_byte_big_endian_layout():
    assert CQ_UNIT_SIZE == 20 and CQ_UNIT_DTYPE.itemsize == 20
    assert [CQ_UNIT_DTYPE.fields[f][1] for f in CQ_UNIT_DTYPE.names] == [0, 8, 12]
    assert CQ_UNIT_DTYPE["commitlog_offset"] == np.dtype(">i8")
    assert CQ_UNIT_DTYPE["size"] == np.dtype(">i4")
    assert CQ_UNIT_DTYPE["tags_code"] == np.dtype(">i8")
    assert DEFAULT_CQ_UNITS == 300_000 and DEFAULT_CQ_FILE_SIZE == 6_000_000


def test_unit_for_record_6_matches_vector_7(tmp_path):
    expected = bytes.fromhex("000000000000000000000089000000000027A807")
    assert tags_code("TagA") == 2598919
    assert encode_unit(0, MSG, tags_code("TagA")) == expected
    cq = open_cq(tmp_path)
    assert cq.append(0, 0, MSG, tags_code("TagA"))
    cq.flush()
    assert file_bytes(cq, name(0))[:20] == expected
    assert cq.unit(0) == (0, MSG, 2598919)
    view = cq.units(0, 1)
    assert view.tobytes() == expected
    assert view[0].item() == (0, 137, 2598919)


def test_placeholder_unit_matches_vector_7():
    assert bytes.fromhex("00000000000000007FFFFFFF0000000000000000") == PLACEHOLDER_UNIT
    assert PLACEHOLDER_SIZE == 0x7FFFFFFF


def test_negative_tags_code_is_sign_extended():
    h = tags_code("TopicTest#OrderID001")  # -1231272886, vector 1
    assert encode_unit(5, 10, h)[12:] == (h & (2**64 - 1)).to_bytes(8, "big")


def test_offset_to_file_mapping_matches_vector_9():
    assert unit_location(300000) == ("00000000000006000000", 0)
    assert unit_location(123456789) == ("00000000002466000000", 3135780)
    assert unit_location(0) == ("00000000000000000000", 0)
    assert unit_location(13, 10) == ("00000000000000000200", 60)
    assert roll_next_file(123456789) == 123600000
    assert roll_next_file(300000) == 600000


def test_queue_offset_300000_opens_file_6000000_at_position_0(tmp_path):
    cq = open_cq(tmp_path, units=DEFAULT_CQ_UNITS)
    assert cq.append(300000, 4096, MSG, tags_code("TagA"))
    assert files(cq) == ["00000000000006000000"]
    assert os.path.getsize(os.path.join(cq.directory, "00000000000006000000")) == 6_000_000
    cq.flush()
    assert file_bytes(cq, "00000000000006000000")[:20] == encode_unit(4096, MSG, 2598919)
    assert (cq.min_offset, cq.max_offset) == (300000, 300001)
    cq.close()


def test_first_offset_inside_a_file_is_padded_with_placeholders_vector_9(tmp_path):
    cq = open_cq(tmp_path, units=DEFAULT_CQ_UNITS)
    assert cq.append(123456789, 0, MSG, tags_code("TagA"))
    assert files(cq) == ["00000000002466000000"]
    cq.flush()
    data = file_bytes(cq, "00000000002466000000")
    assert data[:3135780] == PLACEHOLDER_UNIT * (3135780 // 20)
    assert data[3135780:3135800] == encode_unit(0, MSG, 2598919)
    assert data[3135800:3135820] == bytes(20)
    assert (cq.min_offset, cq.max_offset) == (123456789, 123456790)
    cq.close()
    cq = open_cq(tmp_path, units=DEFAULT_CQ_UNITS)  # placeholders are valid, but not offsets
    assert (cq.min_offset, cq.max_offset) == (123456789, 123456790)
    assert cq.max_physic_offset == MSG
    cq.close()


# -- dispatch rules (§4.2) ---------------------------------------------------------------------


def test_placeholder_fill_in_small_files_and_reopen(tmp_path):
    cq = open_cq(tmp_path)
    fill(cq, 13, 3)
    assert files(cq) == [name(200)]
    assert (cq.min_offset, cq.max_offset) == (13, 16)
    with pytest.raises(MessageNotFoundError):
        cq.unit(12)  # a placeholder is not a readable offset
    cq.close()
    assert file_bytes(cq, name(200))[:60] == PLACEHOLDER_UNIT * 3
    cq = open_cq(tmp_path)
    assert (cq.min_offset, cq.max_offset) == (13, 16)
    assert cq.max_physic_offset == 3 * MSG
    assert cq.unit(13) == (0, MSG, 7)


def test_a_re_dispatched_unit_is_skipped(tmp_path):
    cq = open_cq(tmp_path)
    fill(cq, 0, 3)
    assert cq.max_physic_offset == 3 * MSG
    assert cq.append(2, 2 * MSG, MSG, 7) is False  # already there: a re-dispatch
    assert cq.append(0, 0, MSG, 7) is False
    assert cq.max_offset == 3
    assert cq.append(3, 3 * MSG, MSG, 7) is True


def test_a_wrong_unit_below_the_end_is_rewritten_at_its_queue_offset(tmp_path, caplog):
    """RocketMQ skips it ("built repeatedly"), leaving a unit that points at another record."""
    cq = open_cq(tmp_path)
    fill(cq, 0, 5)
    with caplog.at_level(logging.WARNING, logger="rocketstore.queues.consumequeue"):
        assert cq.append(2, 2 * MSG + 1, MSG - 1, 9) is True
    assert "rewritten" in caplog.text
    assert cq.max_offset == 5 and cq.unit(2) == (2 * MSG + 1, MSG - 1, 9) and cq.unit(3) == (3 * MSG, MSG, 7)


def test_a_record_out_of_order_with_its_neighbours_does_not_take_their_position(tmp_path, caplog):
    """A record whose queue fields are damaged claims a position below the end, but lies after
    the next unit's record (or before the previous one's) in the CommitLog: it is not that
    position's record, and the unit there stays."""
    cq = open_cq(tmp_path)
    fill(cq, 0, 5)
    with caplog.at_level(logging.WARNING, logger="rocketstore.queues.consumequeue"):
        assert cq.append(2, 10_000, MSG, 9) is False
        assert cq.append(3, MSG, MSG, 9) is False
        assert cq.append_many([1, 2], [10_000, 10_000 + MSG], [MSG, MSG], [9, 9]) == 0
    assert "out of order with its neighbours" in caplog.text
    assert [cq.unit(q) for q in range(5)] == [(q * MSG, MSG, 7) for q in range(5)]


def test_a_unit_past_the_end_goes_to_its_queue_offset_and_the_gap_is_a_hole(tmp_path, caplog):
    """RocketMQ writes it at the end ("order maybe wrong"): every later unit then sits at the
    wrong queue offset. Here the gap is padded with placeholders and recorded for repair."""
    cq = open_cq(tmp_path)
    fill(cq, 0, 2)
    with caplog.at_level(logging.WARNING, logger="rocketstore.queues.consumequeue"):
        assert cq.append(7, 10_000, MSG, 9) is True
    assert "past the end" in caplog.text
    assert cq.max_offset == 8 and cq.unit(7) == (10_000, MSG, 9)
    assert cq.unit(2) == (0, PLACEHOLDER_SIZE, 0) and cq.holes == [(2, 7)]
    cq.repair([0, 1, 3, 7], [0, MSG, 3 * MSG, 10_000], [MSG] * 4, [7, 7, 7, 9])
    assert cq.holes == [] and cq.unit(3) == (3 * MSG, MSG, 7) and cq.unit(2) == (0, PLACEHOLDER_SIZE, 0)


def test_appends_roll_into_new_files(tmp_path):
    cq = open_cq(tmp_path)
    fill(cq, 0, 25)
    assert files(cq) == [name(0), name(200), name(400)]
    assert cq.max_offset == 25
    assert cq.unit(10) == (10 * MSG, MSG, 7)
    assert cq.roll_next_file(13) == 20


def test_append_rejects_bad_input_and_writes_nothing(tmp_path):
    cq = open_cq(tmp_path)
    for args in [
        (-1, 0, 1, 0),
        (0, -1, 1, 0),
        (0, 0, 0, 0),
        (0, 0, -5, 0),
        (0, 0, 2**31, 0),
        (0, 0, 1, 2**63),
        (0, 0, 1, -(2**63) - 1),
    ]:
        with pytest.raises(InvalidMessageError):
            cq.append(*args)
    assert cq.max_offset == 0
    assert not os.path.exists(cq.directory) or files(cq) == []
    with pytest.raises(InvalidTopicError):
        ConsumeQueue(str(tmp_path), "../evil", 0)
    with pytest.raises(InvalidQueueIdError):
        ConsumeQueue(str(tmp_path), "TopicTest", -1)
    with pytest.raises(StoreConfigError):
        ConsumeQueue(str(tmp_path), "TopicTest", 0, units_per_file=0)
    assert isinstance(InvalidMessageError("x"), ValueError)


def test_append_many_writes_the_same_bytes_as_append(tmp_path, rng):
    q, phys, sizes, tags = [], [], [], []
    qo, po = 5, 1000
    for _ in range(300):
        r = rng.random()
        size = rng.randrange(50, 300)
        if r < 0.05 and q:  # a duplicate of the previous record
            q.append(q[-1])
            phys.append(phys[-1])
            sizes.append(sizes[-1])
            tags.append(tags[-1])
            continue
        if r < 0.08:  # a gap in queue offsets
            qo += rng.randrange(1, 4)
        q.append(qo)
        phys.append(po)
        sizes.append(size)
        tags.append(rng.randrange(-(2**63), 2**63))
        qo += 1
        po += size
    one = open_cq(tmp_path / "one")
    many = open_cq(tmp_path / "many")
    written = sum(one.append(*args) for args in zip(q, phys, sizes, tags))
    assert (
        many.append_many(q[:100], phys[:100], sizes[:100], tags[:100])
        + many.append_many(
            np.array(q[100:]),
            np.array(phys[100:]),
            np.array(sizes[100:]),
            np.array(tags[100:], dtype=np.int64),
        )
        == written
    )
    assert (many.min_offset, many.max_offset, many.max_physic_offset) == (
        one.min_offset,
        one.max_offset,
        one.max_physic_offset,
    )
    expected_max = one.max_offset
    one.close()
    many.close()
    assert files(one) == files(many)
    for f in files(one):
        assert file_bytes(one, f) == file_bytes(many, f)
    reopened = open_cq(tmp_path / "many")
    assert (reopened.min_offset, reopened.max_offset) == (q[0], expected_max)  # q[0] > 5 after an early gap


def test_append_many_checks_everything_before_writing(tmp_path):
    cq = open_cq(tmp_path)
    with pytest.raises(InvalidMessageError):
        cq.append_many([0, 1, 2], [0, 10, 20], [10, 0, 10], [0, 0, 0])
    with pytest.raises(InvalidMessageError):
        cq.append_many([0, 1], [0, 10], [10, 10], [0])
    with pytest.raises(InvalidMessageError):
        cq.append_many([0], [0], [10], [2**64])
    assert cq.max_offset == 0
    assert cq.append_many([], [], [], []) == 0


# -- recovery (§4.4) ---------------------------------------------------------------------------


def test_reopen_recovers_end_and_max_physic_offset(tmp_path):
    cq = open_cq(tmp_path)
    fill(cq, 0, 23, start_phys=500)
    cq.close()
    cq = ConsumeQueue(str(tmp_path), "TopicTest", 0, units_per_file=UNITS)
    cq.load()
    assert cq.recover() == 500 + 23 * MSG
    assert (cq.min_offset, cq.max_offset) == (0, 23)
    assert cq.append(23, 500 + 23 * MSG, MSG, 7)
    assert cq.unit(23)[0] == 500 + 23 * MSG


def test_recover_keeps_the_units_after_a_corrupt_one_and_records_a_hole(tmp_path):
    """After a clean stop zeros follow the last unit, so an invalid unit before it is damage:
    RocketMQ ends the queue there and drops every later file; here they are kept and the
    invalid unit is recorded for repair."""
    cq = open_cq(tmp_path)
    fill(cq, 0, 25)
    cq.close()
    path = os.path.join(cq.directory, name(200))
    with open(path, "r+b") as f:  # unit 14: size 0
        f.seek(4 * 20 + 8)
        f.write((0).to_bytes(4, "big"))
    cq = ConsumeQueue(str(tmp_path), "TopicTest", 0, units_per_file=UNITS)
    cq.load()
    assert cq.recover() == 25 * MSG
    assert cq.max_offset == 25 and cq.holes == [(14, 15)]
    assert files(cq) == [name(0), name(200), name(400)]


def test_recover_treats_a_negative_commitlog_offset_as_a_hole(tmp_path):
    cq = open_cq(tmp_path)
    fill(cq, 0, 6)
    cq.close()
    with open(os.path.join(cq.directory, name(0)), "r+b") as f:
        f.seek(3 * 20)
        f.write((-1).to_bytes(8, "big", signed=True))
    cq = open_cq(tmp_path)
    assert cq.max_offset == 6 and cq.holes == [(3, 4)]


def test_recover_prefix_keeps_the_units_the_checkpoint_vouches_for(tmp_path):
    """After an abnormal stop: every file is searched, not only the last ones, and a zero file
    does not stop the cut."""
    cq = open_cq(tmp_path)
    fill(cq, 0, 45)  # files 0..4
    cq.close()
    with open(os.path.join(cq.directory, name(400)), "r+b") as f:
        f.write(bytes(200))  # never written back: zeros
    cq = ConsumeQueue(str(tmp_path), "TopicTest", 0, units_per_file=UNITS)
    cq.load()
    assert cq.recover_prefix(13 * MSG) == 13 * MSG
    assert cq.max_offset == 13 and files(cq) == [name(0), name(200)]
    raw = pathlib.Path(cq.directory, name(200)).read_bytes()
    assert raw[3 * 20 :] == bytes(len(raw) - 3 * 20)  # nothing stale left after the cut
    assert cq.append(13, 13 * MSG, MSG, 7) and cq.unit(13) == (13 * MSG, MSG, 7)


def test_recover_scans_only_from_the_third_last_file(tmp_path):
    cq = open_cq(tmp_path)
    fill(cq, 0, 45)  # files 0..4, the last half full
    cq.close()
    with open(os.path.join(cq.directory, name(0)), "r+b") as f:
        f.write(bytes(20))  # not scanned: before the third-last
    cq = open_cq(tmp_path)
    assert cq.max_offset == 45 and len(files(cq)) == 5


def test_recover_of_a_zero_filled_queue_is_empty_and_appends_from_scratch(tmp_path):
    d = tmp_path / "consumequeue" / "TopicTest" / "0"
    d.mkdir(parents=True)
    (d / name(0)).write_bytes(bytes(200))
    cq = ConsumeQueue(str(tmp_path), "TopicTest", 0, units_per_file=UNITS)
    cq.load()
    assert cq.recover() == -1
    assert (cq.min_offset, cq.max_offset) == (0, 0)
    assert cq.append(12, 0, MSG, 7)  # an empty leftover file is replaced
    assert files(cq) == [name(200)]
    assert (cq.min_offset, cq.max_offset) == (12, 13)


def test_read_only_recovery_deletes_nothing(tmp_path):
    cq = open_cq(tmp_path)
    fill(cq, 0, 25)
    cq.close()
    with open(os.path.join(cq.directory, name(0)), "r+b") as f:
        f.seek(5 * 20 + 8)
        f.write(bytes(4))
    ro = open_cq(tmp_path, read_only=True)
    assert ro.max_offset == 25 and ro.holes == [(5, 6)]
    assert files(ro) == [name(0), name(200), name(400)]
    with pytest.raises(StoreReadOnlyError):
        ro.append(5, 5 * MSG, MSG, 7)
    with pytest.raises(StoreReadOnlyError):
        ro.truncate_dirty(0)
    assert ro.flush() is False


def test_files_of_another_size_are_refused(tmp_path):
    cq = open_cq(tmp_path)
    fill(cq, 0, 3)
    cq.close()
    other = ConsumeQueue(str(tmp_path), "TopicTest", 0, units_per_file=20)
    with pytest.raises(StoreConfigError):
        other.load()


# -- truncateDirtyLogicFiles -------------------------------------------------------------------


def test_truncate_dirty_cuts_units_at_or_past_the_commitlog_end(tmp_path):
    cq = open_cq(tmp_path)
    fill(cq, 0, 25)
    cq.truncate_dirty(17 * MSG)
    assert cq.max_offset == 17
    assert cq.max_physic_offset == 17 * MSG
    assert files(cq) == [name(0), name(200)]
    assert cq.append(17, 17 * MSG, 50, 1)  # dispatch resumes at the cut
    cq.close()
    assert open_cq(tmp_path).max_offset == 18


def test_truncate_dirty_deletes_whole_files_whose_first_unit_is_past_the_end(tmp_path):
    cq = open_cq(tmp_path)
    fill(cq, 0, 25)
    cq.truncate_dirty(10 * MSG)
    assert files(cq) == [name(0)] and cq.max_offset == 10
    cq.truncate_dirty(0)
    assert files(cq) == [] and (cq.min_offset, cq.max_offset) == (0, 0)
    assert cq.max_physic_offset == -1


def test_truncated_units_do_not_come_back_after_a_crash(tmp_path):
    cq = open_cq(tmp_path)
    fill(cq, 0, 8)
    cq.truncate_dirty(3 * MSG)
    cq.close()
    assert open_cq(tmp_path).max_offset == 3


# -- minLogicOffset (§4.5) and deletion (§4.6) -------------------------------------------------


def test_correct_min_offset_finds_the_first_live_unit(tmp_path):
    cq = open_cq(tmp_path)
    fill(cq, 0, 25, start_phys=1000)
    cq.correct_min_offset(1000 + 4 * MSG)
    assert cq.min_offset == 4
    cq.correct_min_offset(1000 + 4 * MSG + 1)  # between records: the next one
    assert cq.min_offset == 5
    cq.correct_min_offset(0)  # never moves back
    assert cq.min_offset == 5
    cq.correct_min_offset(1000 + 12 * MSG)  # past the first file: its end
    assert cq.min_offset == 10


def test_correct_min_offset_with_no_live_unit_sets_min_to_max(tmp_path):
    cq = open_cq(tmp_path)
    fill(cq, 0, 7)
    cq.correct_min_offset(7 * MSG)
    assert cq.min_offset == cq.max_offset == 7
    with pytest.raises(MessageNotFoundError):
        cq.units(6, 1)
    assert len(cq.units(7, 5)) == 0
    fill(cq, 7, 2, start_phys=7 * MSG)  # new messages are readable from 7
    assert cq.units(7, 5)["commitlog_offset"].tolist() == [7 * MSG, 8 * MSG]


def test_delete_expired_removes_leading_files_but_never_the_last(tmp_path):
    cq = open_cq(tmp_path)
    fill(cq, 0, 35)
    assert cq.delete_expired(15 * MSG) == 1  # file 0 ends at unit 9 < 15
    assert files(cq) == [name(200), name(400), name(600)]
    assert cq.min_offset == 15
    assert cq.unit(15)[0] == 15 * MSG
    assert cq.delete_expired(10**9) == 2
    assert files(cq) == [name(600)]
    assert cq.min_offset == cq.max_offset == 35
    cq.close()
    cq = open_cq(tmp_path)
    assert cq.max_offset == 35 and cq.min_offset == 30
    cq.correct_min_offset(10**9)
    assert cq.min_offset == 35


# -- zero-copy views -----------------------------------------------------------------------------


def test_units_view_is_zero_copy_and_sees_later_writes(tmp_path):
    cq = open_cq(tmp_path)
    fill(cq, 0, 5)
    view = cq.units(0, 5)
    assert view.dtype == CQ_UNIT_DTYPE and not view.flags.writeable and not view.flags.owndata
    assert view["commitlog_offset"].tolist() == [i * MSG for i in range(5)]
    cq.truncate_dirty(2 * MSG)
    cq.append(2, 5000, 11, 42)
    assert int(view[2]["commitlog_offset"]) == 5000 and int(view[2]["tags_code"]) == 42
    assert int(view[3]["size"]) == 0  # cut off (and zeroed) under the view


def test_view_keeps_its_map_alive_after_close_and_deletion(tmp_path):
    cq = open_cq(tmp_path)
    fill(cq, 0, 25)
    first = cq.units(0, 10)
    last = cq.units(20, 5)
    cq.delete_expired(12 * MSG)  # file 0 deleted while `first` lives
    assert not os.path.exists(os.path.join(cq.directory, name(0)))
    cq.close()
    assert first["commitlog_offset"].tolist() == [i * MSG for i in range(10)]
    assert last["commitlog_offset"].tolist() == [i * MSG for i in range(20, 25)]
    with pytest.raises(StoreClosedError):
        cq.units(20, 1)


def test_units_stop_at_a_file_boundary_and_callers_loop(tmp_path):
    cq = open_cq(tmp_path)
    fill(cq, 0, 25)
    assert len(cq.units(7, 10)) == 3
    assert len(cq.units(20, 100)) == 5
    assert len(cq.units(25, 100)) == 0
    collected, offset = [], 0
    while offset < cq.max_offset:
        view = cq.units(offset, 1000)
        collected.extend(view["commitlog_offset"].tolist())
        offset += len(view)
    assert collected == [i * MSG for i in range(25)]
    chunks = list(cq.iter_units(chunk=4))
    assert [c[0] for c in chunks] == [0, 4, 8, 10, 14, 18, 20, 24]
    assert np.concatenate([c[1] for c in chunks])["commitlog_offset"].tolist() == collected


def test_reads_outside_the_queue_raise(tmp_path):
    cq = open_cq(tmp_path)
    fill(cq, 0, 3)
    with pytest.raises(MessageNotFoundError):
        cq.unit(3)
    with pytest.raises(MessageNotFoundError):
        cq.units(4, 1)
    with pytest.raises(InvalidMessageError):
        cq.units(0, -1)
    assert isinstance(MessageNotFoundError("x"), LookupError)


def test_offset_of_time_binary_searches_store_times(tmp_path):
    cq = open_cq(tmp_path)
    fill(cq, 0, 25)
    times = {i * MSG: 1000 + 10 * (i // 2) for i in range(25)}  # pairs share a timestamp
    assert cq.offset_of_time(0, times.get) == 0
    assert cq.offset_of_time(1000, times.get) == 0
    assert cq.offset_of_time(1030, times.get) == 6  # the first of the pair
    assert cq.offset_of_time(1031, times.get) == 8
    assert cq.offset_of_time(10**6, times.get) == 25
    gone = {k: (None if k < 10 * MSG else v) for k, v in times.items()}
    assert cq.offset_of_time(0, gone.get) == 10


# -- flushing and lifetime ---------------------------------------------------------------------


def test_flush_reports_work_and_honours_least_pages(tmp_path):
    cq = open_cq(tmp_path, units=DEFAULT_CQ_UNITS)
    assert cq.flush() is False
    fill(cq, 0, 10)
    assert cq.flush(least_pages=2) is False  # 200 bytes dirty: less than 2 pages
    assert cq.flush() is True
    assert cq.flush() is False
    fill(cq, 10, 500, start_phys=10 * MSG)  # 10,000 bytes: two page boundaries
    assert cq.flush(least_pages=2) is True
    cq.close()
    cq.close()  # idempotent
    with pytest.raises(StoreClosedError):
        cq.append(510, 510 * MSG, MSG, 0)


def test_start_flush_is_only_a_hint_and_the_store_flush_still_flushes_every_queue(tmp_path, monkeypatch):
    from rocketstore.files.mapped_file import MappedFile
    from rocketstore.queues.consumequeue import ConsumeQueue

    calls, hinted = [], []
    for name in ("start_flush", "flush"):
        real = getattr(ConsumeQueue, name)
        monkeypatch.setattr(
            ConsumeQueue,
            name,
            lambda cq, *a, _r=real, _n=name, **k: (calls.append((_n, cq.topic)), _r(cq, *a, **k))[1],
        )
    real_hint = MappedFile.start_writeback
    monkeypatch.setattr(
        MappedFile,
        "start_writeback",
        lambda mf, lo=0, hi=None: (hinted.append((lo, hi)), real_hint(mf, lo, hi)),
    )
    with ConsumeQueueStore(str(tmp_path), DEFAULT_CQ_UNITS) as store:
        a, b = store.find_or_create("TopicA", 0), store.find_or_create("TopicB", 1)
        fill(a, 0, 500)  # 10,000 bytes: two whole pages and a partial one
        fill(b, 0, 3, start_phys=10_000)
        a.start_flush()
        assert hinted == [(0, 8192)]  # whole pages only: the page being appended to is left out
        assert a.flush() is True and a.flush() is False  # the hint flushed nothing by itself
        calls.clear()
        fill(a, 500, 10, start_phys=500 * MSG)
        assert store.flush() is True  # every queue hinted first, then each flushed
        assert [n for n, _t in calls] == ["start_flush", "start_flush", "flush", "flush"]
        assert store.flush() is False
        hinted.clear()
        store.start_flush()  # nothing written since: no hint
        assert hinted == []
    a.start_flush()  # closed: no-op


def test_destroy_removes_the_queue_directory(tmp_path):
    cq = open_cq(tmp_path)
    fill(cq, 0, 12)
    cq.destroy()
    assert not os.path.exists(cq.directory)


# -- ConsumeQueueStore -------------------------------------------------------------------------


def test_store_loads_every_queue_and_skips_foreign_directories(tmp_path):
    with ConsumeQueueStore(str(tmp_path), UNITS) as store:
        assert len(store) == 0
        fill(store.find_or_create("TopicA", 0), 0, 12)
        fill(store.find_or_create("TopicA", 3), 0, 2, start_phys=10_000)
        fill(store.find_or_create("%RETRY%group", 0), 0, 1, start_phys=20_000)
        assert store.find_or_create("TopicA", 0) is store.get("TopicA", 0)
        store.find_or_create("Unused", 1)  # nothing on disk until an append
    cq_dir = tmp_path / "consumequeue"
    (cq_dir / "TopicA" / "notaqueue").mkdir()
    (cq_dir / "TopicA" / "7.bak").mkdir()
    (cq_dir / "TopicA" / "stray-file").write_text("x")
    (cq_dir / "README").write_text("x")
    with ConsumeQueueStore(str(tmp_path), UNITS) as store:
        assert store.recover() == 20_000 + MSG
        assert store.max_offsets() == {("%RETRY%group", 0): 1, ("TopicA", 0): 12, ("TopicA", 3): 2}
        assert store.topics() == ["%RETRY%group", "TopicA"]
        assert {(cq.topic, cq.queue_id) for cq in store} == set(store.max_offsets())
        assert ("TopicA", 3) in store and store.get("TopicA", 9) is None
        store.truncate_dirty(10_000 + MSG)
        assert store.max_offsets() == {("%RETRY%group", 0): 0, ("TopicA", 0): 12, ("TopicA", 3): 1}
        assert store.delete_expired(10**9) == 1
        assert store.get("TopicA", 0).min_offset == 12


def test_read_only_store_on_a_missing_directory_is_empty(tmp_path):
    store = ConsumeQueueStore(str(tmp_path / "nothing"), UNITS, read_only=True)
    assert len(store) == 0 and store.recover() == -1
    assert not (tmp_path / "nothing").exists()
    store.close()


@given(
    st.sampled_from([1, 100, 4096, 4097, 8192, 20000, (1 << 20) + 300]),
    st.lists(st.tuples(st.integers(0, 2**21), st.integers(1, 40000)), max_size=6),
    st.integers(0, 2**21),
    st.integers(0, 2**21),
)
@settings(max_examples=300, deadline=None)
def test_zero_pages_zeroes_the_range_and_writes_only_pages_that_held_data(size, spans, a, b):
    import mmap

    from rocketstore.queues.unitfiles import zero_pages as _zero_pages

    mm = mmap.mmap(-1, size)
    for at, n in spans:
        at %= size
        mm[at : min(size, at + n)] = b"\x07" * (min(size, at + n) - at)
    lo, hi = sorted((a % (size + 1), b % (size + 1)))
    before = bytes(mm)
    first, last = _zero_pages(mm, lo, hi)
    after = bytes(mm)
    assert after[:lo] == before[:lo] and after[hi:] == before[hi:]  # nothing outside touched
    assert after[lo:hi] == bytes(hi - lo)
    held = [i for i in range(lo, hi) if before[i]] if any(before[lo:hi]) else []
    if not held:
        assert first == last  # nothing written: nothing to msync
        return
    assert lo <= first <= held[0] and held[-1] < last <= hi
    # what is msynced starts and ends at page boundaries (or the range's ends) and skips the
    # zero pages before the first and after the last page that held data
    assert first == lo or (first % 4096 == 0 and first > held[0] - 4096)
    assert last == hi or (last % 4096 == 0 and last <= held[-1] + 4096)
