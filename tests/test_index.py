"""IndexFile slot chaining (spec §5, vectors §14.1/7/8): both twins, and the two against each other."""

import mmap
import os
import pathlib
import random
import re
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore import _impl
from rocketstore.errors import StoreConfigError, StoreReadOnlyError
from rocketstore.format import _codec_py
from rocketstore.queues import _index_py

try:
    from rocketstore.queues import _index as _index_c
except ImportError:  # pragma: no cover - depends on the build
    _index_c = None

CEXT = pathlib.Path(__file__).resolve().parents[1] / "cext"
TWINS = [_index_py] + ([_index_c] if _index_c is not None else [])
needs_compiled = pytest.mark.skipif(_index_c is None, reason="rocketstore.queues._index is not built")

VECTOR1_KEY = "TopicTest#OrderID001"
MIN_VALUE_KEYS = ("polygenelubricants", "TopicTest#OrderID1yoiddi")
T0 = 1_700_000_000_000
INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
ITEM = struct.Struct(">iqii")

CONSTANT_NAMES = [
    "POS_BEGIN_TIMESTAMP",
    "POS_END_TIMESTAMP",
    "POS_BEGIN_PHY_OFFSET",
    "POS_END_PHY_OFFSET",
    "POS_HASH_SLOT_COUNT",
    "POS_INDEX_COUNT",
    "HEADER_SIZE",
    "HASH_SLOT_SIZE",
    "ITEM_POS_KEY_HASH",
    "ITEM_POS_PHY_OFFSET",
    "ITEM_POS_TIME_DIFF",
    "ITEM_POS_PREV_INDEX",
    "INDEX_ITEM_SIZE",
    "DEFAULT_SLOT_COUNT",
    "DEFAULT_INDEX_COUNT",
    "INVALID_INDEX",
    "MAX_TIME_DIFF",
]


@pytest.fixture
def index(impl):
    return impl.index


def new_file(index, slots, items):
    buf = bytearray(index.index_file_size(slots, items))
    return index.IndexFile(buf, slots, items), buf


def item_at(buf, slots, n):
    """(keyHash, phyOffset, timeDiff, prevIndex) of item n."""
    return ITEM.unpack_from(buf, 40 + 4 * slots + 20 * n)


def slot_at(buf, slot):
    return struct.unpack_from(">i", buf, 40 + 4 * slot)[0]


class _Prev:
    """Stands in for a previous index file: only its end values are read."""

    def __init__(self, end_phy_offset, end_timestamp):
        self.end_phy_offset = end_phy_offset
        self.end_timestamp = end_timestamp


def _rolled(index, slots, items, end_phy, end_ts):
    f, buf = new_file(index, slots, items)
    f.init_from(_Prev(end_phy, end_ts))
    return f, buf


@pytest.fixture
def sparse_map(tmp_path):
    """A writable map of a sparse file of the default index size (420,000,040 bytes)."""
    path = tmp_path / "20231114221320000"
    with open(path, "wb") as fh:
        fh.truncate(_index_py.index_file_size())
    fd = os.open(path, os.O_RDWR)
    mm = mmap.mmap(fd, 0)
    os.close(fd)
    yield mm
    mm.close()


# ---- constants and layout: written down once, mirrored three times ----


def test_default_file_size_is_420000040(index):
    assert (index.HEADER_SIZE, index.HASH_SLOT_SIZE, index.INDEX_ITEM_SIZE) == (40, 4, 20)
    assert (index.DEFAULT_SLOT_COUNT, index.DEFAULT_INDEX_COUNT) == (5_000_000, 20_000_000)
    assert index.index_file_size() == 420_000_040
    assert index.index_file_size(500_000, 2_000_000) == 40 + 2_000_000 + 40_000_000
    assert index.index_file_size(1, 1) == 64


def test_index_h_and_pxd_name_every_constant():
    header = (CEXT / "index.h").read_text()
    pxd = (CEXT / "_index.pxd").read_text()
    for name in CONSTANT_NAMES:
        assert f"#define RS_INDEX_{name} " in header, name
        assert f"RS_INDEX_{name}\n" in pxd, name


def test_pure_twin_docstring_table_lists_the_layout():
    doc = _index_py.__doc__
    for pos, size, name in (
        (0, 8, "beginTimestamp"),
        (8, 8, "endTimestamp"),
        (16, 8, "beginPhyOffset"),
        (24, 8, "endPhyOffset"),
        (32, 4, "hashSlotCount"),
        (36, 4, "indexCount"),
        (0, 4, "keyHash"),
        (4, 8, "phyOffset"),
        (12, 4, "timeDiff"),
        (16, 4, "prevIndex"),
    ):
        assert re.search(rf"\b{pos}\s+{size}\s+{name}\b", doc), name
    assert "40 + 4*slots + 20*items" in doc


@needs_compiled
@pytest.mark.parametrize("name", CONSTANT_NAMES)
def test_compiled_and_pure_constants_agree(name):
    assert getattr(_index_c, name) == getattr(_index_py, name)


@needs_compiled
def test_compiled_and_pure_public_names_agree():
    assert _index_c.__all__ == _index_py.__all__
    methods = {n for n in dir(_index_py.IndexFile) if not n.startswith("_")}
    assert methods <= set(dir(_index_c.IndexFile))


def test_required_extensions_really_loaded_the_compiled_index():
    if not _impl.REQUIRE_EXTENSIONS:
        pytest.skip("ROCKETSTORE_REQUIRE_EXTENSIONS=1 is not set: nothing to check (.ci/run sets it)")
    assert _impl.COMPILED.index.__file__.endswith((".so", ".pyd"))


# ---- §14 vectors ----


def test_vector1_key_lands_in_slot_1272886_of_a_default_sparse_file(index, sparse_map):
    f = index.IndexFile(sparse_map)
    try:
        assert (f.slot_num, f.index_num, f.index_count) == (5_000_000, 20_000_000, 1)
        assert f.put_key(VECTOR1_KEY, 4096, T0 + 123)
        assert sparse_map[5091584:5091588] == (1).to_bytes(4, "big")  # slot 1272886
        assert sparse_map[20000060:20000080] == bytes.fromhex("4963BBB6 0000000000001000 00000000 00000000")
        assert f.select(VECTOR1_KEY, 32, 0, INT64_MAX) == [4096]
        assert f.index_count == 2
    finally:
        f.release()


def test_vector7_index_item_bytes(index):
    f, buf = _rolled(index, 16, 4, 0, T0)
    assert f.put_key(VECTOR1_KEY, 0, T0 + 123)
    assert buf[40 + 64 + 20 : 40 + 64 + 40] == bytes.fromhex("4963BBB6 0000000000000000 00000000 00000000")
    assert slot_at(buf, 1231272886 % 16) == 1


@pytest.mark.parametrize("key", MIN_VALUE_KEYS)
def test_vector8_min_value_key_hashes_to_slot_zero(index, key):
    assert _codec_py.java_hash(key) == -(2**31)
    f, buf = new_file(index, 7, 8)
    assert f.put_key(key, 77, T0)
    assert slot_at(buf, 0) == 1
    assert item_at(buf, 7, 1) == (0, 77, 0, 0)


def test_vector8_min_value_keys_chain_and_select(index):
    f, buf = new_file(index, 5_000_000 // 1000, 16)
    f.put_key(MIN_VALUE_KEYS[0], 100, T0)
    f.put_key("TopicTest#Other", 150, T0)
    f.put_key(MIN_VALUE_KEYS[1], 200, T0 + 1000)
    assert slot_at(buf, 0) == 3 and item_at(buf, 5000, 3)[3] == 1
    # Same hash (0): both keys are candidates for either; the store re-checks the real key.
    assert f.select(MIN_VALUE_KEYS[0], 32, 0, INT64_MAX) == [200, 100]
    assert f.select(MIN_VALUE_KEYS[1], 1, 0, INT64_MAX) == [200]


# ---- putKey ----


def test_put_key_updates_header_as_java_4_9_8(index):
    f, buf = new_file(index, 4, 10)
    assert (f.begin_timestamp, f.end_timestamp, f.hash_slot_count, f.index_count) == (0, 0, 0, 1)
    assert f.put_key("k#a", 500, T0)
    assert f.put_key("k#a", 900, T0 + 2500)  # same slot: hashSlotCount counts it once
    assert (f.begin_phy_offset, f.begin_timestamp) == (500, T0)
    assert (f.end_phy_offset, f.end_timestamp) == (900, T0 + 2500)
    assert (f.hash_slot_count, f.index_count) == (1, 3)
    assert buf[:40] == struct.pack(">qqqqii", T0, T0 + 2500, 500, 900, 1, 3)
    h = _codec_py.index_key_hash("k#a")
    # an empty file's begin is 0: the first item's timeDiff is 0; then seconds, truncated
    assert item_at(buf, 4, 1) == (h, 500, 0, 0)
    assert item_at(buf, 4, 2) == (h, 900, 2, 1)
    assert slot_at(buf, h % 4) == 2


def test_first_item_time_diff_is_against_the_previous_files_end(index):
    f, buf = _rolled(index, 4, 10, 1000, T0)
    f.put_key("k", 2000, T0 + 10_999)
    assert item_at(buf, 4, 1)[2] == 10  # quirk: not 0, though begin becomes T0 + 10999
    assert f.begin_timestamp == T0 + 10_999
    f.put_key("k", 3000, T0 + 12_000)
    assert item_at(buf, 4, 2)[2] == 1


@pytest.mark.parametrize(
    "store_ts, expected",
    [
        (T0 - 5000, 0),  # before begin: clamped to 0
        (T0 - 999, 0),  # -0.999 s truncates toward 0
        (T0 + 999, 0),
        (T0 + 1000 * INT32_MAX + 5000, INT32_MAX),
        (INT64_MIN, INT32_MAX),  # the long subtraction wraps to a large positive: clamped
    ],
)
def test_time_diff_is_clamped_seconds(index, store_ts, expected):
    f, buf = _rolled(index, 2, 4, 1, T0)
    f.put_key("k", 1, store_ts)
    assert item_at(buf, 2, 1)[2] == expected


def test_header_index_count_of_zero_or_less_reads_as_one(index):
    f, buf = new_file(index, 2, 4)
    struct.pack_into(">i", buf, 36, -5)
    assert f.index_count == 1
    assert f.put_key("k", 8, T0)
    assert f.index_count == 2 and item_at(buf, 2, 1)[1] == 8


def test_invalid_slot_value_is_treated_as_empty(index):
    f, buf = new_file(index, 1, 8)
    f.put_key("a", 1, T0)
    struct.pack_into(">i", buf, 40, 99)  # beyond indexCount
    f.put_key("a", 2, T0)
    assert item_at(buf, 1, 2)[3] == 0
    struct.pack_into(">i", buf, 40, -3)
    f.put_key("a", 3, T0)
    assert item_at(buf, 1, 3)[3] == 0


def test_hash_slot_count_counts_the_slots_found_empty_as_4_7_1_and_later():
    # IndexFile.putKey (4.7.1+) increments hashSlotCount only when the slot held no valid item:
    # 400 keys over 100 slots count each occupied slot once, not 400 times as 4.3 did.
    keys = [f"TopicTest#key-{i}" for i in range(400)] + ["Aa", "BB"]  # "Aa", "BB": one hash
    occupied = {_codec_py.index_key_hash(k) % 100 for k in keys}
    files = []
    for twin in TWINS:
        f, buf = new_file(twin, 100, 500)
        for phy, key in enumerate(keys, start=1):
            assert f.put_key(key, phy, T0 + phy)
        assert f.hash_slot_count == len(occupied) < len(keys)
        assert struct.unpack_from(">i", buf, 32)[0] == len(occupied)
        files.append(bytes(buf))
    assert all(b == files[0] for b in files)


def test_a_slot_with_an_invalid_item_number_counts_as_empty_again(index):
    f, buf = new_file(index, 1, 8)
    f.put_key("a", 1, T0)
    f.put_key("a", 2, T0)
    assert f.hash_slot_count == 1
    struct.pack_into(">i", buf, 40, 99)  # beyond indexCount: read as empty
    f.put_key("a", 3, T0)
    assert f.hash_slot_count == 2


def test_full_file_put_returns_false_and_writes_nothing(index):
    f, buf = new_file(index, 2, 5)
    for i in range(4):  # item 0 is unused: 4 of 5
        assert f.put_key(f"k{i}", i, T0)
    assert f.is_full
    before = bytes(buf)
    assert f.put_key("k9", 9, T0) is False
    assert f.put_keys(["x", "y"], 9, T0) == 0
    assert bytes(buf) == before


def test_put_keys_stores_in_order_and_stops_when_full(index):
    f, buf = new_file(index, 3, 4)
    assert f.put_keys(["t#a", "t#b"], 10, T0) == 2
    assert f.put_keys(("t#c", "t#d", "t#e"), 20, T0) == 1
    assert f.put_keys(iter([]), 30, T0) == 0
    assert [item_at(buf, 3, n)[:2] for n in (1, 2, 3)] == [
        (_codec_py.index_key_hash(k), phy) for k, phy in (("t#a", 10), ("t#b", 10), ("t#c", 20))
    ]


def test_put_keys_with_a_bad_key_stores_none(index):
    f, buf = new_file(index, 3, 8)
    before = bytes(buf)
    with pytest.raises(TypeError, match="index key must be str, not int"):
        f.put_keys(["t#a", 5], 10, T0)
    with pytest.raises(TypeError, match="index key must be str, not bytes"):
        f.put_key(b"t#a", 10, T0)
    with pytest.raises(OverflowError):
        f.put_key("t#a", 2**63, T0)
    assert bytes(buf) == before


def test_non_ascii_keys_hash_over_utf16_units(index):
    f, buf = new_file(index, 1, 8)
    for n, key in enumerate(("é", "😀", "t#\udc80", "ÿ"), start=1):
        f.put_key(key, n, T0)
        assert item_at(buf, 1, n)[0] == _codec_py.index_key_hash(key)
    assert item_at(buf, 1, 1)[0] == 233 and item_at(buf, 1, 2)[0] == 1772899


def test_init_from_rolls_begin_and_end_to_the_previous_end(index):
    for twin in TWINS:  # the previous file may be either twin's
        prev, _ = new_file(twin, 4, 8)
        prev.put_key("k", 300, T0)
        prev.put_key("k", 700, T0 + 9000)
        nxt, _ = new_file(index, 4, 8)
        nxt.init_from(prev)
        assert (nxt.begin_phy_offset, nxt.end_phy_offset) == (700, 700)
        assert (nxt.begin_timestamp, nxt.end_timestamp) == (T0 + 9000, T0 + 9000)
        assert (nxt.index_count, nxt.hash_slot_count) == (1, 0)


def test_init_from_sets_only_the_positive_end_values(index):
    f, buf = new_file(index, 2, 4)
    f.init_from(_Prev(0, T0))
    assert (f.begin_phy_offset, f.end_phy_offset, f.begin_timestamp, f.end_timestamp) == (0, 0, T0, T0)
    f.init_from(_Prev(55, -1))
    assert (f.begin_phy_offset, f.end_phy_offset, f.begin_timestamp, f.end_timestamp) == (55, 55, T0, T0)


# ---- selectPhyOffset ----


def test_colliding_keys_share_a_chain_and_select_returns_hash_equal_candidates(index):
    assert _codec_py.java_hash("Aa") == _codec_py.java_hash("BB")
    f, buf = new_file(index, 1, 16)  # one slot: every key in one chain
    for phy, key in enumerate(["Aa", "x", "BB", "y", "Aa", "z"], start=1):
        f.put_key(key, phy * 10, T0)
    assert slot_at(buf, 0) == 6
    assert [item_at(buf, 1, n)[3] for n in range(1, 7)] == [0, 1, 2, 3, 4, 5]
    assert f.select("Aa", 32, 0, INT64_MAX) == [50, 30, 10]
    assert f.select("BB", 32, 0, INT64_MAX) == [50, 30, 10]
    assert f.select("x", 32, 0, INT64_MAX) == [20]
    assert f.select("never", 32, 0, INT64_MAX) == []


def test_select_on_an_empty_slot_or_file_finds_nothing(index):
    f, _ = new_file(index, 1000, 16)
    assert f.select("k", 32, 0, INT64_MAX) == []
    f.put_key("k", 1, T0)
    assert f.select("other key", 32, 0, INT64_MAX) == []


def test_select_filters_by_time_window(index):
    f, _ = _rolled(index, 4, 32, 1, T0)
    for s in range(10):
        f.put_key("k", s, T0 + s * 1000)
    # the first item took timeDiff 0 against T0, and begin is still T0
    assert f.select("k", 32, T0 + 3000, T0 + 6000) == [6, 5, 4, 3]
    assert f.select("k", 32, T0 + 3001, T0 + 5999) == [5, 4]
    assert f.select("k", 32, T0 + 20_000, INT64_MAX) == []
    assert f.select("k", 32, 0, T0 - 1) == []


def test_select_stops_at_the_first_item_older_than_begin(index):
    f, _ = new_file(index, 4, 32)
    f.put_key("k", 0, T0)  # the first item makes T0 the file's begin
    f.put_key("k", 5, T0 + 5000)
    f.put_key("k", 1, T0 + 1000)  # out of order: the walk stops here for begin > 1 s
    f.put_key("k", 6, T0 + 6000)
    assert f.select("k", 32, T0 + 3000, T0 + 10_000) == [6]
    assert f.select("k", 32, T0, T0 + 10_000) == [6, 1, 5, 0]


@pytest.mark.parametrize("max_num", [0, -1, 1, 10, 63, 64, 65, 70, 129])
def test_select_returns_at_most_max_num_newest_first(index, max_num):
    f, _ = new_file(index, 8, 200)
    for phy in range(150):
        f.put_key("k", phy, T0)
    assert f.select("k", max_num, 0, INT64_MAX) == list(range(149, -1, -1))[: max(max_num, 0)]


def test_is_time_matched(index):
    f, _ = _rolled(index, 2, 8, 1, 1000)
    f.put_key("k", 1, 1000)
    f.put_key("k", 2, 5000)
    assert (f.begin_timestamp, f.end_timestamp) == (1000, 5000)
    assert f.is_time_matched(0, 6000)  # covers the file
    assert f.is_time_matched(1000, 1000)  # begin inside
    assert f.is_time_matched(0, 5000)  # end inside
    assert f.is_time_matched(4999, 9000)
    assert not f.is_time_matched(0, 999)
    assert not f.is_time_matched(5001, 9000)


# ---- buffers: sizes, read-only maps, lifetime ----


def test_wrong_buffer_size_raises_store_config_error(index):
    with pytest.raises(
        StoreConfigError, match="index file buffer is 63 bytes, expected 64 for 1 slots and 1 items"
    ):
        index.IndexFile(bytearray(63), 1, 1)
    with pytest.raises(StoreConfigError, match="slot_count must be in 1..2147483647, got 0"):
        index.IndexFile(bytearray(64), 0, 1)
    with pytest.raises(StoreConfigError, match="index_count must be in 1..2147483647, got 2147483648"):
        index.IndexFile(bytearray(64), 1, 2**31)
    with pytest.raises(TypeError):
        index.IndexFile(bytearray(64), 1.0, 1)


def test_read_only_buffer_allows_queries_only(index):
    f, buf = new_file(index, 4, 8)
    f.put_key("k", 42, T0)
    ro = index.IndexFile(bytes(buf), 4, 8)
    assert not ro.writable and f.writable
    assert ro.select("k", 32, 0, INT64_MAX) == [42]
    assert (ro.index_count, ro.end_phy_offset) == (2, 42)
    with pytest.raises(StoreReadOnlyError, match="index file buffer is read-only"):
        ro.put_key("k", 43, T0)
    with pytest.raises(StoreReadOnlyError):
        ro.put_keys(["k"], 43, T0)
    with pytest.raises(StoreReadOnlyError):
        ro.init_from(f)


def test_release_unpins_the_map(index, tmp_path):
    path = tmp_path / "ix"
    path.write_bytes(bytes(index.index_file_size(4, 8)))
    with open(path, "r+b") as fh:
        mm = mmap.mmap(fh.fileno(), 0)
    with index.IndexFile(mm, 4, 8) as f:
        f.put_key("k", 7, T0)
        with pytest.raises(BufferError):
            mm.close()  # pinned while in use
    assert "released" in repr(f)
    mm.close()
    f.release()  # idempotent
    for call in (lambda: f.select("k", 1, 0, 1), lambda: f.put_key("k", 1, 1), lambda: f.index_count):
        with pytest.raises(ValueError, match="IndexFile is released"):
            call()
    reopened = index.IndexFile(path.read_bytes(), 4, 8)
    assert reopened.select("k", 32, 0, INT64_MAX) == [7]


def test_repr_names_the_sizes(index):
    f, _ = new_file(index, 4, 8)
    assert repr(f) == "<IndexFile slots=4 items=8 index_count=1>"


# ---- corrupt files: bounded, in-bounds, and the twins agree ----


def _both(slots, items, raw):
    return [twin.IndexFile(bytearray(raw), slots, items) for twin in TWINS]


def test_self_loop_and_cycle_end_the_walk(index):
    f, buf = new_file(index, 1, 8)
    for phy in range(1, 4):
        f.put_key("k", phy, T0)
    struct.pack_into(">i", buf, 40 + 4 + 20 * 1 + 16, 3)  # item 1 -> 3 -> 2 -> 1: a cycle
    got = f.select("k", 10**9, 0, INT64_MAX)
    assert got[:4] == [3, 2, 1, 3] and len(got) <= f.index_count
    struct.pack_into(">i", buf, 40 + 4 + 20 * 3 + 16, 3)  # item 3 -> 3: Java's own stop
    assert f.select("k", 10**9, 0, INT64_MAX) == [3]


def test_corrupt_header_count_never_reads_past_the_map(index):
    f, buf = new_file(index, 1, 4)
    f.put_key("k", 1, T0)
    struct.pack_into(">i", buf, 36, INT32_MAX)  # indexCount far beyond the file
    struct.pack_into(">i", buf, 40, 4)  # slot -> item 4: one past the end
    assert f.select("k", 32, 0, INT64_MAX) == []
    struct.pack_into(">i", buf, 40, 1)
    struct.pack_into(">i", buf, 40 + 4 + 20 + 16, 4)  # item 1's prev -> past the end
    assert f.select("k", 32, 0, INT64_MAX) == [1]
    assert f.is_full and f.put_key("k", 2, T0) is False


@pytest.mark.parametrize("seed", [1, 2, 3, None], ids=["seed1", "seed2", "seed3", "fresh-seed"])
def test_random_bytes_never_crash_or_hang_and_twins_agree(seed):
    if seed is None:
        seed = random.randrange(2**32)
    print("seed", seed)
    rng = random.Random(seed)
    for _ in range(20):
        slots, items = rng.randint(1, 9), rng.randint(1, 40)
        size = _index_py.index_file_size(slots, items)
        raw = bytearray(rng.randbytes(size))
        if rng.random() < 0.7:  # keep pointers small, so chains are long and often cyclic
            for pos in range(40, size, 4):
                if rng.random() < 0.5:
                    struct.pack_into(">i", raw, pos, rng.randint(-2, items + 2))
            struct.pack_into(">i", raw, 36, rng.choice([items - 1, items, items + 5, INT32_MAX, 0, -1]))
            struct.pack_into(">q", raw, 0, rng.choice([0, T0, -T0, INT64_MAX, INT64_MIN]))
        files = _both(slots, items, raw)
        keys = [f"k{i}" for i in range(12)] + list(MIN_VALUE_KEYS)
        for key in keys:
            window = rng.choice([(INT64_MIN, INT64_MAX), (0, INT64_MAX), (T0, T0 + 10**6)])
            results = {repr(f.select(key, rng.choice([1, 5, 10**6]), *window)) for f in files}
            assert len(results) == 1, (key, results)
            assert len({f.put_key(key, 5, T0) for f in files}) == 1
            assert len({(f.index_count, f.hash_slot_count, f.is_full) for f in files}) == 1


@needs_compiled
def test_twins_write_identical_bytes_on_a_corrupt_file():
    rng = random.Random(7)
    raw = bytearray(rng.randbytes(_index_py.index_file_size(5, 30)))
    struct.pack_into(">i", raw, 36, 3)
    bufs = [bytearray(raw), bytearray(raw)]
    files = [twin.IndexFile(b, 5, 30) for twin, b in zip(TWINS, bufs)]
    for i in range(40):
        assert files[0].put_key(f"k{i % 7}", i, T0 + i) == files[1].put_key(f"k{i % 7}", i, T0 + i)
    assert bufs[0] == bufs[1]


# ---- properties: the twins agree byte for byte ----

_keys = st.sampled_from(["a", "b", "Aa", "BB", "t#1", "t#2", "é", "😀", MIN_VALUE_KEYS[0], ""])
_i64 = st.integers(INT64_MIN, INT64_MAX)
_ts = st.one_of(st.integers(T0 - 10**7, T0 + 10**8), _i64)
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), _keys, _i64, _ts),
        st.tuples(st.just("puts"), st.lists(_keys, max_size=4), _i64, _ts),
        st.tuples(st.just("select"), _keys, st.integers(-1, 70), _ts, _ts),
        st.tuples(st.just("roll"), _i64, _i64),
    ),
    max_size=60,
)


@needs_compiled
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    slots=st.integers(1, 6),
    items=st.integers(1, 40),
    header=st.binary(min_size=40, max_size=40),
    fresh=st.booleans(),
    ops=_ops,
)
def test_twins_produce_identical_buffers_and_selects(slots, items, header, fresh, ops):
    size = _index_py.index_file_size(slots, items)
    raw = bytearray(size)
    if not fresh:
        raw[:40] = header
    bufs = [bytearray(raw) for _ in TWINS]
    files = [twin.IndexFile(b, slots, items) for twin, b in zip(TWINS, bufs)]
    for op in ops:
        if op[0] == "put":
            results = [f.put_key(op[1], op[2], op[3]) for f in files]
        elif op[0] == "puts":
            results = [f.put_keys(op[1], op[2], op[3]) for f in files]
        elif op[0] == "select":
            results = [f.select(op[1], op[2], op[3], op[4]) for f in files]
        else:
            prev = _Prev(op[1], op[2])
            results = [f.init_from(prev) for f in files]
        assert results[0] == results[1], op
        assert bufs[0] == bufs[1], op
    for key in ("a", "Aa", MIN_VALUE_KEYS[0], "é"):
        assert files[0].select(key, 100, INT64_MIN, INT64_MAX) == files[1].select(
            key, 100, INT64_MIN, INT64_MAX
        )
    for name in (
        "begin_timestamp",
        "end_timestamp",
        "begin_phy_offset",
        "end_phy_offset",
        "hash_slot_count",
        "index_count",
        "is_full",
    ):
        assert getattr(files[0], name) == getattr(files[1], name), name


@settings(max_examples=300, deadline=None)
@given(key=st.text(st.characters(codec=None, exclude_categories=()), max_size=30))
def test_stored_key_hash_is_the_codec_index_key_hash(key):
    expected = _codec_py.index_key_hash(key)
    for twin in TWINS:
        f, buf = new_file(twin, 3, 2)
        f.put_key(key, 1, T0)
        assert item_at(buf, 3, 1)[0] == expected
        assert slot_at(buf, expected % 3) == 1
        assert f.select(key, 1, 0, INT64_MAX) == [1]


# ---- file names (§5.1, extra vector) ----


@pytest.fixture
def local_zone(monkeypatch):
    def use(zone):
        monkeypatch.setenv("TZ", zone)
        time.tzset()

    yield use
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(
    "zone, name",
    [
        ("UTC", "20231114221320000"),
        ("Asia/Shanghai", "20231115061320000"),
        ("America/New_York", "20231114171320000"),
    ],
)
def test_index_file_name_is_local_time(index, local_zone, zone, name):
    local_zone(zone)
    assert index.index_file_name(T0) == name
    assert index.index_file_name(T0 + 123) == name[:-3] + "123"
    assert index.parse_index_file_name(name) == T0
    assert index.parse_index_file_name(name[:-3] + "123") == T0 + 123


def test_index_file_name_of_a_local_wall_time(index):
    ms = int(time.mktime((2023, 11, 14, 22, 13, 20, 0, 0, -1))) * 1000
    assert index.index_file_name(ms) == "20231114221320000"


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "2023111422132000",
        "202311142213200001",
        "2023111422132000x",
        "20231314221320000",
        "20231114241320000",
        "２0231114221320000",
        20231114221320000,
    ],
)
def test_parse_index_file_name_rejects_malformed(index, bad):
    with pytest.raises(ValueError, match="not an index file name"):
        index.parse_index_file_name(bad)
