"""Reading a consume queue by offset (spec §11) with tag filters (§4.3): statuses, next offsets,
filtering, collisions, file boundaries, batch limits, and a model-based property test."""

import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore import MessageStore
from rocketstore.consume import (
    MIN_SCAN_UNITS,
    GetMessageResult,
    GetMessageStatus,
    TagFilter,
    get_message,
    get_units,
    scan_budget,
)
from rocketstore.errors import InvalidMessageError, MessageNotFoundError
from rocketstore.format._codec_py import java_hash, tags_code
from rocketstore.queues.consumequeue import CQ_UNIT_DTYPE, PLACEHOLDER_SIZE, ConsumeQueue

S = GetMessageStatus
UNITS = 4  # units per ConsumeQueue file: boundaries every 4 offsets
SIZE = 100  # record size of the fake CommitLog


class Rec:
    """What the fake CommitLog returns: just enough of a MessageExt."""

    def __init__(self, tags, queue_offset, commitlog_offset):
        self.tags, self.queue_offset, self.commitlog_offset = tags, queue_offset, commitlog_offset

    def __repr__(self):
        return f"Rec({self.tags!r}, q={self.queue_offset})"


class FakeCommitLog:
    """commitlog offset -> Rec; offsets in ``gone`` read as None; counts reads."""

    def __init__(self):
        self.records, self.gone, self.reads = {}, set(), []

    def __call__(self, commitlog_offset, size):
        self.reads.append((commitlog_offset, size))
        if commitlog_offset in self.gone:
            return None
        return self.records[commitlog_offset]


def build(root, tags, start=0, units=UNITS, gone=(), sizes=None):
    """A ConsumeQueue whose queue offset start+i holds a message tagged tags[i]."""
    cq = ConsumeQueue(str(root), "TopicTest", 0, units_per_file=units)
    log = FakeCommitLog()
    phys = 0
    for i, tag in enumerate(tags):
        size = SIZE if sizes is None else sizes[i]
        assert cq.append(start + i, phys, size, tags_code(tag))
        log.records[phys] = Rec(tag, start + i, phys)
        if start + i in gone:
            log.gone.add(phys)
        phys += size
    return cq, log


def offsets_of(result):
    return [m.queue_offset for m in result.messages]


# -- the enum and the hash the filters rely on ---------------------------------------------------


def test_status_enum_follows_rocketmq_get_message_status_order():
    assert [s.name for s in GetMessageStatus] == [
        "FOUND",
        "NO_MATCHED_MESSAGE",
        "MESSAGE_WAS_REMOVING",
        "OFFSET_FOUND_NULL",
        "OFFSET_OVERFLOW_BADLY",
        "OFFSET_OVERFLOW_ONE",
        "OFFSET_TOO_SMALL",
        "NO_MATCHED_LOGIC_QUEUE",
        "NO_MESSAGE_IN_QUEUE",
        "OFFSET_RESET",
    ]
    assert [int(s) for s in GetMessageStatus] == list(range(10))
    assert str(S.OFFSET_OVERFLOW_ONE) == "OFFSET_OVERFLOW_ONE"


def test_java_hash_of_aa_equals_bb_so_their_tags_codes_collide():
    # 'A'*31 + 'a' = 65*31 + 97 = 2112 = 66*31 + 66 = 'B'*31 + 'B'
    assert java_hash("Aa") == java_hash("BB") == 2112
    assert tags_code("Aa") == tags_code("BB")


# -- TagFilter ----------------------------------------------------------------------------------


@pytest.mark.parametrize("expression", [None, "", "*"])
def test_none_empty_and_star_subscribe_to_everything(expression):
    f = TagFilter.parse(expression)
    assert f.match_all and f.tags == frozenset() and f.codes == frozenset()
    assert f.matches_code(12345) and f.matches_code(0) and f.matches_tag(None)
    assert f.mask(np.array([1, 0, -5], dtype=np.int64)).tolist() == [True, True, True]


@pytest.mark.parametrize(
    "expression", ["TagA || TagB", "TagA||TagB", "  TagA ||TagB||", "||TagA|| ||TagB", "\tTagA\n||\x00TagB "]
)
def test_expression_splits_on_double_bar_trims_and_drops_empty_tags(expression):
    f = TagFilter.parse(expression)
    assert not f.match_all
    assert f.tags == {"TagA", "TagB"}
    assert f.codes == {java_hash("TagA"), java_hash("TagB")}
    assert f == TagFilter.parse("TagB || TagA") and hash(f) == hash(TagFilter.parse("TagA||TagB"))


def test_trim_is_javas_not_unicode_whitespace():
    assert TagFilter.parse("\u3000TagA").tags == {"\u3000TagA"}


def test_spaced_star_is_a_literal_tag_and_bars_alone_match_nothing():
    star = TagFilter.parse(" * ")
    assert not star.match_all and star.tags == {"*"}
    assert star.matches_tag("*") and not star.matches_tag("TagA")
    nothing = TagFilter.parse("||")
    assert not nothing.match_all and nothing.tags == frozenset()
    assert not nothing.matches_code(0) and not nothing.matches_tag("")
    assert not nothing.mask(np.array([0, 1], dtype=np.int64)).any()


@pytest.mark.parametrize("bad", [b"TagA", 5, ["TagA"], 1.5])
def test_non_str_expression_is_refused(bad):
    with pytest.raises(InvalidMessageError, match="tag expression must be a str"):
        TagFilter.parse(bad)


def test_matches_code_compares_the_int_narrowing_of_the_long_tags_code():
    f = TagFilter.parse("TagA")
    h = java_hash("TagA")
    assert f.matches_code(h)
    assert f.matches_code(h + (5 << 32))  # (int) keeps the low 32 bits only
    assert not f.matches_code(h + 1)
    assert not f.matches_code(0)  # a message without a tag
    # a ConsumeQueueExt address has no ext file to resolve it: RocketMQ lets it through
    assert f.matches_code(-(1 << 31) - 1) and f.matches_code(-(1 << 63))
    assert not f.matches_code(-(1 << 31))  # Integer.MIN_VALUE is a hash, not an address


def test_mask_agrees_with_matches_code_on_big_endian_int64(rng):
    tags = ["TagA", "BB", "ü", "\U0001f600"]
    f = TagFilter.parse(" || ".join(tags[:3]))
    values = [java_hash(t) for t in tags] + [
        java_hash("Aa") + (7 << 32),
        0,
        -(1 << 31),
        -(1 << 31) - 1,
        (1 << 63) - 1,
        -(1 << 63),
    ]
    values += [rng.randrange(-(1 << 63), 1 << 63) for _ in range(500)]
    codes = np.array(values, dtype=">i8")
    assert f.mask(codes).tolist() == [f.matches_code(v) for v in values]
    assert f.mask(codes)[:5].tolist() == [True, True, True, False, True]


def test_matches_tag_is_exact_and_case_sensitive():
    f = TagFilter.parse("TagA || Aa")
    assert f.matches_tag("TagA") and f.matches_tag("Aa")
    assert not f.matches_tag("BB") and not f.matches_tag("taga") and not f.matches_tag(" TagA")
    assert not f.matches_tag(None) and not f.matches_tag("")
    assert repr(f) == "TagFilter('TagA || Aa')"


# -- statuses and next_begin_offset -------------------------------------------------------------


def test_no_queue_is_no_matched_logic_queue_with_next_zero():
    r = get_message(None, 7, 32, "*", FakeCommitLog())
    assert (r.status, r.next_begin_offset, r.min_offset, r.max_offset) == (S.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
    assert len(r) == 0 and list(r) == []


def test_queue_that_never_held_a_unit_is_no_message_in_queue(tmp_path):
    cq = ConsumeQueue(str(tmp_path), "TopicTest", 0, units_per_file=UNITS)
    for offset in (0, 5, -1):
        r = get_message(cq, offset, 32, None, FakeCommitLog())
        assert (r.status, r.next_begin_offset) == (S.NO_MESSAGE_IN_QUEUE, 0)


@pytest.mark.parametrize("offset", [-3, 0, 9])
def test_offset_below_min_is_too_small_and_points_at_min(tmp_path, offset):
    cq, log = build(tmp_path, ["A"] * 5, start=10)
    r = get_message(cq, offset, 32, None, log)
    assert (r.status, r.next_begin_offset, r.min_offset, r.max_offset) == (S.OFFSET_TOO_SMALL, 10, 10, 15)
    assert log.reads == []


def test_offset_at_max_is_overflow_one_and_stays(tmp_path):
    cq, log = build(tmp_path, ["A"] * 5, start=10)
    r = get_message(cq, 15, 32, None, log)
    assert (r.status, r.next_begin_offset) == (S.OFFSET_OVERFLOW_ONE, 15)


def test_offset_past_max_is_overflow_badly_with_the_43_rule(tmp_path):
    from_zero, log0 = build(tmp_path / "a", ["A"] * 5)
    r = get_message(from_zero, 9, 32, None, log0)
    assert (r.status, r.next_begin_offset) == (S.OFFSET_OVERFLOW_BADLY, 0)  # min == 0: min
    from_ten, log10 = build(tmp_path / "b", ["A"] * 5, start=10)
    r = get_message(from_ten, 99, 32, None, log10)
    assert (r.status, r.next_begin_offset) == (S.OFFSET_OVERFLOW_BADLY, 15)  # else max


class VanishingQueue:
    """A queue whose file disappears between reading the bounds and mapping the units."""

    def __init__(self, cq):
        self.cq = cq
        self.min_offset, self.max_offset = cq.min_offset, cq.max_offset

    def roll_next_file(self, offset):
        return self.cq.roll_next_file(offset)

    def units(self, start, count):
        raise MessageNotFoundError(f"the file of queue offset {start} is gone")


def test_units_gone_under_the_pull_is_offset_found_null_pointing_at_the_next_file(tmp_path):
    cq, log = build(tmp_path, ["A"] * 10)
    r = get_message(VanishingQueue(cq), 5, 32, None, log)
    assert (r.status, r.next_begin_offset) == (S.OFFSET_FOUND_NULL, 8)
    r = get_units(VanishingQueue(cq), 0, 32)
    assert (r.status, r.next_begin_offset) == (S.OFFSET_FOUND_NULL, 4)


def test_found_returns_messages_units_and_queue_offsets_in_order(tmp_path):
    cq, log = build(tmp_path, ["A", "B", "A"], units=10)
    r = get_message(cq, 0, 32, "*", log)
    assert isinstance(r, GetMessageResult) and (r.status, r.next_begin_offset) == (S.FOUND, 3)
    assert offsets_of(r) == [0, 1, 2] and r.queue_offsets.tolist() == [0, 1, 2]
    assert r.units.dtype == CQ_UNIT_DTYPE and r.units["commitlog_offset"].tolist() == [0, 100, 200]
    assert r.message_count == len(r) == 3 and r.buffer_total_size == 300
    assert list(r) == r.messages
    assert repr(r) == "<GetMessageResult FOUND next=3 count=3 queue=[0, 3)>"


def test_all_units_filtered_is_no_matched_message_and_consumes_them(tmp_path):
    cq, log = build(tmp_path, ["B", "C", "B"], units=10)
    r = get_message(cq, 0, 32, "A", log)
    assert (r.status, r.next_begin_offset, len(r)) == (S.NO_MATCHED_MESSAGE, 3, 0)
    assert log.reads == []  # rejected by tagsCode: the CommitLog is not touched


def test_every_record_gone_is_message_was_removing(tmp_path):
    cq, log = build(tmp_path, ["A"] * 3, units=10, gone={0, 1, 2})
    r = get_message(cq, 0, 32, None, log)
    assert (r.status, r.next_begin_offset, len(r)) == (S.MESSAGE_WAS_REMOVING, 3, 0)
    assert len(log.reads) == 3


def test_read_raising_message_not_found_counts_as_gone(tmp_path):
    cq, _ = build(tmp_path, ["A"] * 3, units=10)

    def read(offset, size):
        raise MessageNotFoundError(f"no message at commitlog offset {offset}")

    r = get_message(cq, 0, 32, None, read)
    assert (r.status, r.next_begin_offset) == (S.MESSAGE_WAS_REMOVING, 3)


@pytest.mark.parametrize(
    "tags, gone, expected",
    [
        (["A", "B"], {0}, S.NO_MATCHED_MESSAGE),  # gone, then filtered: filtered is last
        (["B", "A"], {1}, S.MESSAGE_WAS_REMOVING),  # filtered, then gone
        (["A", "BB"], {0}, S.NO_MATCHED_MESSAGE),  # gone, then a collision rejected on re-check
        (["BB", "A"], {1}, S.MESSAGE_WAS_REMOVING),  # collision rejected, then gone
    ],
)
def test_while_nothing_is_collected_the_last_unit_examined_decides_the_status(tmp_path, tags, gone, expected):
    # RocketMQ 4.3 overwrites the status on each filtered or gone unit until one is collected
    cq, log = build(tmp_path, tags, units=10, gone=gone)
    r = get_message(cq, 0, 32, "A || Aa", log)
    assert (r.status, r.next_begin_offset, len(r)) == (expected, len(tags), 0)


def test_gone_records_before_a_found_one_still_give_found(tmp_path):
    cq, log = build(tmp_path, ["A", "A", "A", "B"], units=10, gone={0, 1})
    r = get_message(cq, 0, 32, "A", log)
    assert (r.status, r.next_begin_offset, offsets_of(r)) == (S.FOUND, 4, [2])


# -- tag filtering and collisions ---------------------------------------------------------------


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("TagA || TagB", [0, 1, 4]),
        ("  TagB||TagA  ", [0, 1, 4]),
        ("TagC", [3]),
        ("*", [0, 1, 2, 3, 4, 5]),
        ("", [0, 1, 2, 3, 4, 5]),
        (None, [0, 1, 2, 3, 4, 5]),
        ("TagZ", []),
    ],
)
def test_tag_expression_selects_matching_messages(tmp_path, expression, expected):
    cq, log = build(tmp_path, ["TagA", "TagB", None, "TagC", "TagA", ""], units=10)
    r = get_message(cq, 0, 32, expression, log)
    assert offsets_of(r) == expected and r.next_begin_offset == 6
    assert r.status is (S.FOUND if expected else S.NO_MATCHED_MESSAGE)
    assert r.queue_offsets.tolist() == expected
    assert get_units(cq, 0, 32, expression).queue_offsets.tolist() == expected


def test_a_tags_code_collision_is_filtered_by_the_real_tag(tmp_path):
    assert java_hash("Aa") == java_hash("BB")
    cq, log = build(tmp_path, ["Aa", "BB", "Aa", "BB"], units=10)
    r = get_message(cq, 0, 32, "Aa", log)
    assert offsets_of(r) == [0, 2] and r.next_begin_offset == 4
    assert [m.tags for m in r] == ["Aa", "Aa"]
    assert len(log.reads) == 4  # the hash let the BB units through to the CommitLog read
    # without the re-check the broker-side answer includes the colliding tag, as in RocketMQ
    assert offsets_of(get_message(cq, 0, 32, "Aa", log, recheck_tags=False)) == [0, 1, 2, 3]
    assert get_units(cq, 0, 32, "Aa").queue_offsets.tolist() == [0, 1, 2, 3]


def test_only_colliding_messages_is_no_matched_message(tmp_path):
    cq, log = build(tmp_path, ["BB", "BB"], units=10)
    r = get_message(cq, 0, 32, TagFilter.parse("Aa"), log)
    assert (r.status, r.next_begin_offset, len(r)) == (S.NO_MATCHED_MESSAGE, 2, 0)


def test_collision_rejected_after_a_message_does_not_stop_the_batch(tmp_path):
    cq, log = build(tmp_path, ["Aa", "BB", "Aa"], units=10)
    r = get_message(cq, 0, 2, "Aa", log)
    assert (r.status, r.next_begin_offset, offsets_of(r)) == (S.FOUND, 3, [0, 2])


# -- placeholders and file boundaries -----------------------------------------------------------


class QueueFromFileStart(ConsumeQueue):
    """A queue that reports its first file's start as min_offset, exposing the placeholders."""

    @property
    def min_offset(self):
        return 0


def test_queue_starting_at_10_skips_the_placeholders_before_it(tmp_path):
    cq, log = build(tmp_path, ["A", "B", "A"], start=10)
    assert (cq.min_offset, cq.max_offset) == (10, 13)
    r = get_message(cq, 10, 32, None, log)
    assert (r.status, r.next_begin_offset, offsets_of(r)) == (S.FOUND, 13, [10, 11, 12])
    r = get_message(cq, 10, 32, None, log, max_files=1)  # the first file ends at 12
    assert (r.status, r.next_begin_offset, offsets_of(r)) == (S.FOUND, 12, [10, 11])

    exposed = QueueFromFileStart(str(tmp_path), "TopicTest", 0, units_per_file=UNITS)
    exposed.load()
    exposed.recover()
    head = exposed.units(8, 2)
    assert head["size"].tolist() == [PLACEHOLDER_SIZE] * 2 and head["commitlog_offset"].tolist() == [0, 0]
    del head
    log.reads.clear()
    r = get_message(exposed, 8, 32, None, log)
    assert (r.status, r.next_begin_offset, offsets_of(r)) == (S.FOUND, 13, [10, 11, 12])
    assert (0, PLACEHOLDER_SIZE) not in log.reads and len(log.reads) == 3
    r = get_units(exposed, 8, 32, max_files=1)
    assert r.queue_offsets.tolist() == [10, 11] and r.units["size"].tolist() == [SIZE, SIZE]
    r = get_message(exposed, 8, 32, "Z", log)  # placeholders alone match nothing
    assert (r.status, r.next_begin_offset) == (S.NO_MATCHED_MESSAGE, 13)
    exposed.close()


def test_scan_crosses_one_file_boundary_but_not_two(tmp_path):
    cq, log = build(tmp_path, ["A"] * 14)
    r = get_message(cq, 2, 100, None, log)
    assert (r.status, r.next_begin_offset) == (S.FOUND, 8)
    assert offsets_of(r) == [2, 3, 4, 5, 6, 7]
    r = get_message(cq, 2, 100, None, log, max_files=1)  # RocketMQ 4.3: one file only
    assert (r.next_begin_offset, offsets_of(r)) == (4, [2, 3])
    r = get_units(cq, 8, 100, max_files=3)
    assert r.next_begin_offset == 14 and r.queue_offsets.tolist() == list(range(8, 14))


def test_matches_only_in_the_next_file_are_found(tmp_path):
    cq, log = build(tmp_path, ["B", "B", "B", "B", "B", "A", "B", "B", "A"])
    r = get_message(cq, 1, 32, "A", log)
    assert (r.status, r.next_begin_offset, offsets_of(r)) == (S.FOUND, 8, [5])
    r = get_message(cq, 1, 32, "A", log, max_files=1)
    assert (r.status, r.next_begin_offset) == (S.NO_MATCHED_MESSAGE, 4)


def test_batch_full_inside_the_first_file_does_not_touch_the_second(tmp_path):
    cq, log = build(tmp_path, ["A"] * 8)
    r = get_message(cq, 0, 2, None, log)
    assert (r.next_begin_offset, offsets_of(r)) == (2, [0, 1])
    r = get_message(cq, 0, 4, None, log)
    assert (r.next_begin_offset, offsets_of(r)) == (4, [0, 1, 2, 3])


# -- batch limits and the scan budget -----------------------------------------------------------


def test_max_msgs_stops_after_the_last_accepted_unit(tmp_path):
    cq, log = build(tmp_path, ["B", "A", "B", "A", "B", "A", "B"], units=10)
    r = get_message(cq, 0, 2, "A", log)
    # filtered units before the batch filled are consumed; the one after the last is not
    assert (r.status, r.next_begin_offset, offsets_of(r)) == (S.FOUND, 4, [1, 3])
    r = get_message(cq, r.next_begin_offset, 2, "A", log)
    assert (r.next_begin_offset, offsets_of(r)) == (7, [5])
    assert get_units(cq, 0, 2, "A").next_begin_offset == 4


def test_scan_budget_is_max_of_800_units_and_max_msgs(tmp_path):
    assert MIN_SCAN_UNITS == 800 and scan_budget(32) == 800 and scan_budget(1000) == 1000
    cq, log = build(tmp_path, ["B"] * 1200, units=3000)
    r = get_message(cq, 10, 32, "A", log)
    assert (r.status, r.next_begin_offset) == (S.NO_MATCHED_MESSAGE, 810)
    assert get_message(cq, 10, 1000, "A", log).next_begin_offset == 1010
    assert get_units(cq, 10, 32, "A").next_begin_offset == 810
    assert get_message(cq, 10, 32, "A", log, max_scan_units=5).next_begin_offset == 15


def test_scan_budget_is_shared_across_the_file_boundary(tmp_path):
    cq, log = build(tmp_path, ["A"] * 12)
    r = get_message(cq, 2, 100, None, log, max_scan_units=3)
    assert (r.next_begin_offset, offsets_of(r)) == (5, [2, 3, 4])


def test_byte_limit_is_off_by_default_and_opt_in(tmp_path):
    cq, log = build(tmp_path, ["A"] * 6, units=10, sizes=[100, 100, 100, 500, 100, 100])
    assert len(get_message(cq, 0, 32, None, log)) == 6
    r = get_message(cq, 0, 32, None, log, max_bytes=250)
    assert (r.next_begin_offset, offsets_of(r), r.buffer_total_size) == (2, [0, 1], 200)
    r = get_message(cq, 0, 32, None, log, max_bytes=200)  # exactly at the limit still fits
    assert (r.next_begin_offset, offsets_of(r)) == (2, [0, 1])
    assert get_units(cq, 0, 32, None, max_bytes=300).next_begin_offset == 3
    # never full before the first message, however large
    r = get_message(cq, 3, 32, None, log, max_bytes=250)
    assert (r.next_begin_offset, offsets_of(r)) == (4, [3])
    r = get_units(cq, 0, 32, None, max_bytes=250)
    assert (r.next_begin_offset, r.queue_offsets.tolist()) == (2, [0, 1])


def test_byte_limit_looks_at_every_unit_even_a_filtered_one(tmp_path):
    # 4.3 tests batch-full before the tag filter, so a large filtered unit ends the batch
    cq, log = build(tmp_path, ["A", "B", "A"], units=10, sizes=[100, 500, 100])
    r = get_message(cq, 0, 32, "A", log, max_bytes=300)
    assert (r.next_begin_offset, offsets_of(r)) == (1, [0])
    assert get_units(cq, 0, 32, "A", max_bytes=300).next_begin_offset == 1


# -- get_units: the zero-copy path ---------------------------------------------------------------


def test_get_units_returns_a_read_only_view_when_every_unit_is_accepted(tmp_path):
    cq, log = build(tmp_path, ["A", "B", "A", "A"], units=10)
    r = get_units(cq, 1, 32)
    assert (r.status, r.next_begin_offset, r.messages) == (S.FOUND, 4, [])
    assert not r.units.flags.owndata and not r.units.flags.writeable
    assert r.units["commitlog_offset"].tolist() == [100, 200, 300]
    assert r.queue_offsets.tolist() == [1, 2, 3] and len(r) == 3
    assert [int(u["size"]) for u in r] == [SIZE] * 3
    filtered = get_units(cq, 0, 32, "A")
    assert filtered.units["commitlog_offset"].tolist() == [0, 200, 300]
    assert filtered.queue_offsets.tolist() == [0, 2, 3]
    assert log.reads == []


def test_get_units_view_outlives_the_queue(tmp_path):
    cq, _ = build(tmp_path, ["A"] * 3, units=10)
    units = get_units(cq, 0, 32).units
    cq.close()
    assert units["commitlog_offset"].tolist() == [0, 100, 200]


def test_get_units_statuses_for_bounds_and_no_match(tmp_path):
    cq, _ = build(tmp_path, ["B"] * 3, start=10)
    assert get_units(None, 0, 1).status is S.NO_MATCHED_LOGIC_QUEUE
    assert (get_units(cq, 3, 1).status, get_units(cq, 3, 1).next_begin_offset) == (S.OFFSET_TOO_SMALL, 10)
    assert get_units(cq, 13, 1).status is S.OFFSET_OVERFLOW_ONE
    r = get_units(cq, 10, 5, "A")
    assert (r.status, r.next_begin_offset, len(r.units)) == (S.NO_MATCHED_MESSAGE, 13, 0)


# -- argument checks ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_msgs": 0}, "max_msgs must be >= 1"),
        ({"max_msgs": True}, "max_msgs must be an int"),
        ({"offset": "3"}, "offset must be an int"),
        ({"offset": 1.0}, "offset must be an int"),
        ({"max_scan_units": 0}, "max_scan_units must be >= 1"),
        ({"max_bytes": 0}, "max_bytes must be >= 1"),
        ({"max_files": 0}, "max_files must be >= 1"),
        ({"tag_filter": b"A"}, "tag expression must be a str"),
        ({"read": None}, "needs a read callback"),
        ({"read": 42}, "read must be callable"),
    ],
)
def test_bad_arguments_raise_invalid_message_error(tmp_path, kwargs, match):
    cq, log = build(tmp_path, ["A"], units=10)
    args = {"cq": cq, "offset": 0, "max_msgs": 1, "tag_filter": None, "read": log, **kwargs}
    with pytest.raises(InvalidMessageError, match=match):
        get_message(**args)


def test_numpy_integers_are_accepted_as_offsets(tmp_path):
    cq, log = build(tmp_path, ["A", "A"], units=10)
    r = get_message(cq, np.int64(1), np.int32(5), None, log)
    assert offsets_of(r) == [1] and isinstance(r.next_begin_offset, int)


# -- a real store: MessageExt from the CommitLog ------------------------------------------------


def test_get_message_reads_message_ext_from_a_real_store(tmp_path, impl):
    store = MessageStore(tmp_path / "store", implementation=impl.name, commitlog_file_size=64 * 1024)
    cq = ConsumeQueue(str(tmp_path / "cq"), "TopicTest", 0, units_per_file=UNITS)
    try:
        tags = ["Aa", "BB", None, "TagA", "Aa", "BB"]
        for i, tag in enumerate(tags):
            put = store.put("TopicTest", b"body-%d" % i, tags=tag, queue_id=0)
            assert put.ok and put.queue_offset == i
            assert cq.append(put.queue_offset, put.commitlog_offset, put.size, tags_code(tag))

        def read(offset, size):
            return store.read(offset)

        r = get_message(cq, 0, 32, "Aa || TagA", read)
        assert (r.status, r.next_begin_offset) == (S.FOUND, 6)
        assert [(m.queue_offset, m.tags, bytes(m.body)) for m in r] == [
            (0, "Aa", b"body-0"),
            (3, "TagA", b"body-3"),
            (4, "Aa", b"body-4"),
        ]
        assert r.units["size"].tolist() == [m.size for m in r]
    finally:
        cq.close()
        store.close()


# -- model-based property test ------------------------------------------------------------------

TAGS = ["A", "B", "Aa", "BB", None, "", "C"]
EXPRESSIONS = [None, "", "*", "A", "Aa", "BB", "A || B", " Aa ||BB ", "||", "C || A || Aa", "Z"]


def model_get(
    entries,
    start,
    units_per_file,
    offset,
    max_msgs,
    expression,
    budget,
    max_files,
    max_bytes,
    recheck,
    reading=True,
):
    """A per-unit transcription of RocketMQ 4.3's getMessage over a plain list.

    entries[i] = (tag, gone, size) at queue offset start + i. Returns (status, next, offsets).
    """
    lo, hi = (start, start + len(entries)) if entries else (0, 0)
    if hi == 0:
        return S.NO_MESSAGE_IN_QUEUE, 0, []
    if offset < lo:
        return S.OFFSET_TOO_SMALL, lo, []
    if offset == hi:
        return S.OFFSET_OVERFLOW_ONE, offset, []
    if offset > hi:
        return S.OFFSET_OVERFLOW_BADLY, lo if lo == 0 else hi, []
    match_all = expression in (None, "", "*")
    wanted = {p.strip() for p in (expression or "").split("||") if p.strip()}
    codes = {java_hash(t) for t in wanted}
    budget = max(800, max_msgs) if budget is None else budget
    file_start = offset - offset % units_per_file
    end = min(hi, file_start + units_per_file * max_files, offset + budget)
    status, got, total, q = S.NO_MATCHED_MESSAGE, [], 0, offset
    while q < end:
        tag, gone, size = entries[q - lo]
        if got and (len(got) >= max_msgs or (max_bytes is not None and total + size > max_bytes)):
            break
        q += 1
        if not match_all and tags_code(tag) not in codes:
            status = status if got else S.NO_MATCHED_MESSAGE
            continue
        if reading and gone:
            status = status if got else S.MESSAGE_WAS_REMOVING
            continue
        if reading and recheck and not match_all and tag not in wanted:
            status = status if got else S.NO_MATCHED_MESSAGE
            continue
        got.append(q - 1)
        total += size
        status = S.FOUND
    return status, q, got


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    units_per_file=st.integers(2, 6),
    start=st.integers(0, 9),
    entries=st.lists(st.tuples(st.sampled_from(TAGS), st.booleans(), st.integers(1, 300)), max_size=25),
    offset_delta=st.integers(-11, 4),
    max_msgs=st.integers(1, 6),
    expression=st.sampled_from(EXPRESSIONS),
    budget=st.one_of(st.none(), st.integers(1, 12)),
    max_files=st.integers(1, 3),
    max_bytes=st.one_of(st.none(), st.integers(50, 700)),
    recheck=st.booleans(),
)
def test_get_message_and_get_units_agree_with_a_list_model(
    units_per_file, start, entries, offset_delta, max_msgs, expression, budget, max_files, max_bytes, recheck
):
    with tempfile.TemporaryDirectory() as root:
        tags = [tag for tag, _, _ in entries]
        gone = {start + i for i, (_, g, _) in enumerate(entries) if g}
        cq, log = build(
            root, tags, start=start, units=units_per_file, gone=gone, sizes=[size for _, _, size in entries]
        )
        try:
            offset = (start + len(entries) if entries else 0) + offset_delta
            options = dict(max_scan_units=budget, max_files=max_files, max_bytes=max_bytes)
            want = model_get(
                entries,
                start,
                units_per_file,
                offset,
                max_msgs,
                expression,
                budget,
                max_files,
                max_bytes,
                recheck,
            )
            r = get_message(cq, offset, max_msgs, expression, log, recheck_tags=recheck, **options)
            assert (r.status, r.next_begin_offset, offsets_of(r)) == want
            assert r.queue_offsets.tolist() == want[2]
            assert r.units["commitlog_offset"].tolist() == [m.commitlog_offset for m in r.messages]
            if entries:
                assert (r.min_offset, r.max_offset) == (start, start + len(entries))

            want_units = model_get(
                entries,
                start,
                units_per_file,
                offset,
                max_msgs,
                expression,
                budget,
                max_files,
                max_bytes,
                recheck,
                reading=False,
            )
            u = get_units(cq, offset, max_msgs, expression, **options)
            assert (u.status, u.next_begin_offset, u.queue_offsets.tolist()) == want_units
            assert len(u.units) == len(want_units[2])
        finally:
            cq.close()
