"""verify() checks every record field it can cross-check, not only the body CRC.

A byte flipped in a record header, topic or properties passes a body CRC. Each case below flips
one byte of one field of a record in the middle of a closed store and asserts that verify()
reports a problem at that record (read-only and writable opens, both twins), and that clean
stores (both twins, injected clocks, delayed delivery, the Java-written store) report none.
"""

import os
import shutil
import subprocess
import sys

import pytest

import rocketstore
from rocketstore import Message, MessageStore

SEGMENT = 64 * 1024
HOST = "10.0.0.7"
N = 40
TARGET = 20  # the record damaged: neighbours on both sides


def open_store(path, impl, **options):
    options.setdefault("commitlog_file_size", SEGMENT)
    options.setdefault("consume_queue_units", 64)
    options.setdefault("index_slots", 64)
    options.setdefault("index_count", 256)
    options.setdefault("schedule_interval_ms", 0)
    return MessageStore(path, implementation=impl.name, store_host=HOST, **options)


@pytest.fixture
def clean(tmp_path, impl):
    """A closed store of N records in two topics; returns (path, [(offset, size)])."""
    path = tmp_path / "clean"
    records = []
    with open_store(path, impl) as s:
        for i in range(N):
            r = s.put(
                "TopicA" if i % 3 else "TopicB",
                b"body %d" % i,
                tags="TagA",
                keys=f"k{i}",
                properties={"user": f"value-{i}"},
            )
            records.append((r.commitlog_offset, r.size))
    return path, records


def _segment(path):
    return path / "commitlog" / f"{0:020d}"


def _find(data, needle, start, size):
    at = data.index(needle, start, start + size)
    return at


# (name, where to flip: a function (record bytes start, record bytes) -> index, xor mask)
FIELDS = {
    "TOTALSIZE": (lambda s, d: s + 3, 0x04),
    "MAGICCODE": (lambda s, d: s + 7, 0x01),
    "BODYCRC": (lambda s, d: s + 11, 0x01),
    "QUEUEID": (lambda s, d: s + 15, 0x01),
    "QUEUEOFFSET": (lambda s, d: s + 27, 0x01),
    "PHYSICALOFFSET": (lambda s, d: s + 35, 0x08),
    "SYSFLAG unknown bit": (lambda s, d: s + 38, 0x08),
    "SYSFLAG compression type": (lambda s, d: s + 38, 0x04),
    "SYSFLAG IPv6 born host": (lambda s, d: s + 39, 0x10),
    "SYSFLAG IPv6 store host": (lambda s, d: s + 39, 0x20),
    "STORETIMESTAMP high byte": (lambda s, d: s + 57, 0x01),
    "STORETIMESTAMP top byte": (lambda s, d: s + 56, 0x80),
    "PREPAREDTRANSACTIONOFFSET": (lambda s, d: s + 79, 0x10),
    "BODY": (lambda s, d: _find(d, b"body", s, 200) + 2, 0x01),
    "TOPIC length": (lambda s, d: _find(d, b"Topic", s, 200) - 1, 0x01),
    "TOPIC bad character": (lambda s, d: _find(d, b"Topic", s, 200) + 2, 0x4C),  # 'p' -> '<'
    "TOPIC other valid topic": (lambda s, d: _find(d, b"Topic", s, 200) + 5, 0x03),  # A -> B
    "PROPERTIES length": (lambda s, d: _find(d, b"Topic", s, 200) + 7, 0x01),
    "PROPERTIES not UTF-8": (lambda s, d: _find(d, b"value-", s, 200), 0x80),
}
# Not detectable without the CRC32 property (see the README): FLAG, BORNTIMESTAMP, the hosts,
# RECONSUMETIMES, a property value that stays valid UTF-8 (TAGS "TagA" -> "TagB").


#: Damage the decoder itself sees (lengths, magic): a writable open treats what follows as a
#: torn tail (recovery's business), so these are checked read-only only.
STRUCTURAL = {
    "TOTALSIZE",
    "MAGICCODE",
    "SYSFLAG IPv6 born host",
    "SYSFLAG IPv6 store host",
    "TOPIC length",
    "PROPERTIES length",
}
CASES = [(f, ro) for f in FIELDS for ro in (True, False) if ro or f not in STRUCTURAL]


@pytest.mark.parametrize(
    "field, read_only", CASES, ids=[f"{f}-{'read-only' if ro else 'writable'}" for f, ro in CASES]
)
def test_a_flipped_byte_in_a_checkable_field_is_reported(clean, tmp_path, impl, field, read_only):
    path, records = clean
    damaged = tmp_path / "damaged"
    shutil.copytree(path, damaged)
    offset, size = records[TARGET]
    where, mask = FIELDS[field]
    data = bytearray(_segment(damaged).read_bytes())
    at = where(offset, data)
    assert offset <= at < offset + size
    data[at] ^= mask
    _segment(damaged).write_bytes(bytes(data))
    with open_store(damaged, impl, read_only=read_only) as s:
        result = s.verify()
    assert result["ok"] is False, field
    assert any(p["offset"] == offset for p in result["problems"]), (field, result["problems"])


def test_verify_names_the_field_and_its_values(clean, tmp_path, impl):
    path, records = clean
    offset, _size = records[TARGET]
    data = bytearray(_segment(path).read_bytes())
    data[offset + 57] ^= 0x01  # the 72059389494330416-like time
    data[offset + 35] ^= 0x08
    _segment(path).write_bytes(bytes(data))
    with open_store(path, impl, read_only=True) as s:
        problems = [p["reason"] for p in s.verify()["problems"] if p["offset"] == offset]
    assert any("store timestamp" in r for r in problems), problems
    assert any("PhysicalOffset" in r and str(offset ^ 8) in r for r in problems), problems


def test_a_clean_store_reports_ok(clean, impl):
    path, records = clean
    for read_only in (True, False):
        with open_store(path, impl, read_only=read_only) as s:
            result = s.verify()
        assert result["ok"] is True and result["problems"] == [] and result["records"] == N


def test_a_store_written_with_an_injected_clock_reports_ok(tmp_path, impl):
    # a clock that jumps forward by days, stands still and goes back: store timestamps never
    # decrease in file order, and gaps between records are no damage
    ticks = iter(
        [1000, 1000, 5 * 86_400_000, 5 * 86_400_000 + 1, 3, 3, 40 * 86_400_000, 7, 7 * 365 * 86_400_000, 12]
        + [7 * 365 * 86_400_000 + 5] * 100
    )
    path = tmp_path / "s"
    with open_store(path, impl, clock=lambda: next(ticks)) as s:
        for i in range(10):
            s.put("TopicC", b"x%d" % i, tags="T")
    with open_store(path, impl) as s:  # then the real clock
        s.put("TopicC", b"real", tags="T")
        result = s.verify()
    assert result["ok"] is True, result["problems"]


def test_a_store_with_delayed_delivery_and_retries_reports_ok(tmp_path, impl):
    now = [1_700_000_000_000]
    path = tmp_path / "s"
    with open_store(path, impl, clock=lambda: now[0]) as s:
        s.put(Message("TopicD", b"late", tags="T", properties={"p": "v"}), delay_level=3)
        s.put("TopicD", b"now", tags="T", keys="a b")
        now[0] += 10_000
        assert s.deliver_delayed() == 1
        msg = [x for x in s.iter_messages() if x.topic == "TopicD"][0]
        s.send_back("GroupD", msg)
        now[0] += 30_000
        s.deliver_delayed()
        result = s.verify()
    assert result["ok"] is True, result["problems"]


def test_the_java_written_store_reports_ok(java_store, impl):
    with MessageStore(java_store, implementation=impl.name, read_only=True) as s:
        result = s.verify()
    assert result["ok"] is True, result["problems"]
    assert result["records"] == 47


def test_cli_verify_exits_non_zero_on_a_header_flip(clean, impl):
    path, records = clean
    offset, _size = records[TARGET]
    data = bytearray(_segment(path).read_bytes())
    data[offset + 56] ^= 0x80
    _segment(path).write_bytes(bytes(data))
    src = os.path.dirname(os.path.dirname(rocketstore.__file__))
    env = dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if impl.name == "py":
        env["ROCKETSTORE_NO_EXTENSIONS"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "rocketstore", "--store", str(path), "verify"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert f"offset {offset}: " in proc.stdout


# ---- the RocketMQ 5.2+ CRC32 property (spec §1.6) ----


def _raw_records(path):
    """(offset, record bytes) of every record in the store's first segment."""
    data = _segment(path).read_bytes()
    out, pos = [], 0
    while pos + 8 <= len(data):
        size = int.from_bytes(data[pos : pos + 4], "big", signed=True)
        if size <= 0 or int.from_bytes(data[pos + 4 : pos + 8], "big") not in (0xDAA320A7,):
            break
        out.append((pos, data[pos : pos + size]))
        pos += size
    return out


def test_prop_crc_digits_are_least_significant_first():
    from rocketstore.format._verify import prop_crc_digits

    assert prop_crc_digits(198614610) == b"0164168910"
    assert prop_crc_digits(0) == b"0" * 10 and prop_crc_digits(-1) == b"7463847412"


def test_append_prop_crc_writes_a_crc_over_each_record_and_verify_checks_it(tmp_path, impl):
    import zlib

    now = [1_700_000_000_000]
    path = tmp_path / "s"
    with open_store(path, impl, append_prop_crc=True, clock=lambda: now[0]) as s:
        s.put("TopicE", b"plain")
        s.put("TopicE", b"tagged", tags="T", keys="a b", properties={"p": "v"})
        s.put_batch("TopicE", [b"b1", b"b2"], tags="T")
        s.put_messages([Message("TopicE", b"m1", properties={"UNIQ_KEY": "0A0000070000" + "0" * 20})])
        s.put_pipelined("TopicE", b"piped", tags="T").result()
        s.put("TopicE", b"late", tags="T", delay_level=1)
        now[0] += 1000
        assert s.deliver_delayed() == 1
        assert s.verify()["ok"] is True
    records = _raw_records(path)
    assert len(records) == 8
    for _offset, rec in records:
        tail = rec[-20:]
        assert tail[:9] == b"__CRC32#\x01" and tail[-1:] == b"\x02", rec
        crc = zlib.crc32(rec[:-20]) & 0x7FFFFFFF
        assert tail[9:19] == str(crc).encode()[::-1].ljust(10, b"0")
        assert rec.count(b"__CRC32#") == 1  # the delivered copy has only its own
    offset = records[3][0]
    data = bytearray(_segment(path).read_bytes())
    data[offset + 19] ^= 0x01  # FLAG: nothing else can see this
    _segment(path).write_bytes(bytes(data))
    with open_store(path, impl, read_only=True) as s:
        problems = s.verify()["problems"]
    assert [p["offset"] for p in problems] == [offset] and "CRC" in problems[0]["reason"]


def test_prop_crc_is_off_by_default(clean):
    path, _records = clean
    assert all(b"__CRC32#" not in rec for _o, rec in _raw_records(path))


UTF8_SAMPLES = [
    b"",
    b"a\x01b\x02",
    "é😀".encode(),
    b"\xc0\x80",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\xe2\x82",
    b"ok\xe2\x82\xac",
    b"\xf0\x9f\x98\x80" * 3,
    b"12345678\xff",
    b"\x80",
    b"abcdefgh" * 3 + b"\xc3",
    b"\xf5\x80\x80\x80",
    b"\xef\xbf\xbf",
    b"\xc2\x80",
]
TOPIC_SAMPLES = [b"TopicA", b"%RETRY%g-1|x", b"a#b", "é".encode(), b"a b", b"T" * 127]


def test_field_problems_twins_agree_with_pythons_utf8_and_topic_rule():
    from rocketstore import _impl
    from rocketstore.message import is_valid_topic

    codecs = [_impl.get(name).codec for name in ("c", "py") if name == "py" or _impl.COMPILED]
    scans = [_impl.get(name).scan for name in ("c", "py") if name == "py" or _impl.COMPILED]
    buf = b"".join(
        codecs[-1].encode_record(topic=t, body=b"x", properties=p)
        for t in TOPIC_SAMPLES
        for p in UTF8_SAMPLES
    )
    rows = codecs[-1].decode_batch(buf)[0]
    expected = []
    for t in TOPIC_SAMPLES:
        for p in UTF8_SAMPLES:
            try:
                p.decode("utf-8")
                ok = True
            except UnicodeDecodeError:
                ok = False
            expected.append((0 if is_valid_topic(t.decode("utf-8")) else 1) | (0 if ok else 2))
    text = scans[0].BAD_TOPIC | scans[0].BAD_PROPERTIES_UTF8
    results = [scan.field_problems(buf, rows) for scan in scans]
    for flags, keys in results:
        assert (flags & text).tolist() == expected
        assert keys.tolist() == scans[0].queue_keys(buf, rows).tolist()
    assert all(f.tolist() == results[0][0].tolist() for f, _k in results)


def test_prop_crc_after_properties_without_a_final_separator_inserts_one(tmp_path, impl):
    # §1.6: properties that do not end in 0x02 get one before the reserved 20 bytes (only raw
    # properties given to the append core with their own UNIQ_KEY can lack it)
    path = tmp_path / "s"
    with open_store(path, impl, append_prop_crc=True) as s:
        s.create_topic("TopicF", 1)
        r = s._opened.core.put("TopicF", b"x", b"a\x01b", 0, 0, 0, 0, 0, 0, "UK", 0)
        assert s.read(r.commitlog_offset).properties == {
            "a": "b",
            "__CRC32#": s.read(r.commitlog_offset).properties["__CRC32#"],
        }
        assert s.verify()["ok"] is True
    [(_offset, rec)] = _raw_records(path)
    assert rec.endswith(b"a\x01b\x02__CRC32#\x01" + rec[-11:-1] + b"\x02")
    assert len(rec) == 91 + 1 + len("TopicF") + len(b"a\x01b") + 1 + 20


def test_reserved_columns_keep_every_row_in_order_when_more_come_than_reserved():
    import numpy as np

    from rocketstore.log.recordscan import ReservedColumns

    columns = ReservedColumns((np.int64, np.bool_), 3)
    assert [len(c) for c in columns.filled()] == [0, 0]
    want_a, want_b = [], []
    for n in (2, 0, 5, 1, 9):  # past the reserve (3 rows) twice
        a = np.arange(len(want_a), len(want_a) + n, dtype=np.int64)
        b = a % 3 == 0
        columns.append((a, b))
        want_a += a.tolist()
        want_b += b.tolist()
    a, b = columns.filled()
    assert a.dtype == np.int64 and b.dtype == np.bool_
    assert a.tolist() == want_a and b.tolist() == want_b


def test_stamp_check_chunk_by_chunk_finds_what_one_pass_over_every_record_finds():
    """verify keeps store timestamps only from the first chunk that steps back (with the two
    records before it): the problems are those of timestamp_problems over every record."""
    import numpy as np
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from rocketstore.format._verify import TIMESTAMP_WINDOW_MS
    from rocketstore.log.recordscan import StampCheck

    w = TIMESTAMP_WINDOW_MS
    step = st.sampled_from([0, 1, 5, w + 1, -1, -(w + 1), 3 * w, -3 * w])

    @settings(max_examples=300, deadline=None)
    @given(st.integers(-2, 3 * w), st.lists(step, max_size=25), st.lists(st.integers(1, 6), min_size=1))
    def check(start, steps, chunk_sizes):
        stamps = np.cumsum([start, *steps]).astype(np.int64)
        offsets = np.arange(len(stamps), dtype=np.int64) * 100 + 7
        want = [{"offset": o, "reason": r} for o, r in timestamp_problems(offsets, stamps)]
        check = StampCheck(len(stamps))
        at, sizes = 0, iter(chunk_sizes * (len(stamps) + 1))
        while at < len(stamps):
            n = next(sizes)
            check.add(offsets[at : at + n], stamps[at : at + n], at)
            at += n
        assert check.problems() == want

    from rocketstore.format._verify import timestamp_problems

    check()
