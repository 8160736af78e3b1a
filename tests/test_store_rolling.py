"""Segment rolling and the BLANK end-of-file rule (spec §1.4, §1.5) as MessageStore writes them."""

import os
import struct

from rocketstore import MessageStore

SEGMENT = 64 * 1024
HOST = "10.0.0.7"
MAGIC_V1 = -626843481
MAGIC_BLANK = -875286124
MIN_BLANK = 8
UNIQ_PROPERTY = len("UNIQ_KEY\x01") + 32 + 1
_HEAD = struct.Struct(">ii")


def open_store(path, impl, **options):
    options.setdefault("commitlog_file_size", SEGMENT)
    return MessageStore(path, implementation=impl.name, store_host=HOST, **options)


def record_length(body_len, topic):
    """TOTALSIZE of a record put without properties (the store adds UNIQ_KEY only)."""
    return 91 + body_len + len(topic) + UNIQ_PROPERTY


def segment_files(path):
    directory = os.path.join(path, "commitlog")
    return [os.path.join(directory, n) for n in sorted(os.listdir(directory))]


def walk_segment(data):
    """[(position, total size, magic)] of the records in one segment file, up to a BLANK or zeros."""
    out = []
    pos = 0
    while pos + MIN_BLANK <= len(data):
        total, magic = _HEAD.unpack_from(data, pos)
        if magic not in (MAGIC_V1, MAGIC_BLANK):
            break
        out.append((pos, total, magic))
        if magic == MAGIC_BLANK:
            break
        assert 0 < total <= len(data) - pos, f"record at {pos} of {total} bytes runs past the file"
        pos += total
    return out


def test_rolling_fills_contiguous_segments_each_ending_in_a_blank(tmp_path, impl, rng):
    path = tmp_path / "store"
    bodies = []
    with open_store(path, impl) as store:
        results = []
        while store.max_offset < 5 * SEGMENT + 1000:
            body = rng.randbytes(rng.randrange(0, 4000))
            bodies.append(body)
            results.append(store.put("TopicRoll", body))
        assert store.stats()["segments"] >= 6
        # no record spans two files, and each leaves room for a BLANK in its own file
        for r in results:
            start = r.commitlog_offset // SEGMENT * SEGMENT
            assert r.commitlog_offset + r.size + MIN_BLANK <= start + SEGMENT
        assert [m.body for m in store.iter_messages()] == bodies
        assert [m.commitlog_offset for m in store.iter_messages()] == [r.commitlog_offset for r in results]

    files = segment_files(path)
    assert len(files) >= 6
    starts = [int(os.path.basename(f)) for f in files]
    assert starts[0] == 0
    assert all(len(os.path.basename(f)) == 20 for f in files)
    assert all(b == a + SEGMENT for a, b in zip(starts, starts[1:])), starts
    assert all(os.path.getsize(f) == SEGMENT for f in files)

    by_offset = {r.commitlog_offset: r for r in results}
    seen = 0
    for index, f in enumerate(files):
        with open(f, "rb") as fh:
            data = fh.read()
        records = walk_segment(data)
        messages = [rec for rec in records if rec[2] == MAGIC_V1]
        seen += len(messages)
        for pos, total, _ in messages:
            assert by_offset[starts[index] + pos].size == total
        if index == len(files) - 1:
            assert not records or records[-1][2] == MAGIC_V1
            continue
        # a full segment: its last record is a BLANK whose length reaches the end exactly ...
        blank_pos, blank_len, magic = records[-1]
        assert magic == MAGIC_BLANK
        assert blank_pos + blank_len == SEGMENT
        assert blank_len >= MIN_BLANK
        # ... and it was needed: the record that went to the next file did not fit with 8 to spare
        next_first = by_offset[starts[index + 1]]
        assert next_first.size + MIN_BLANK > blank_len
    assert seen == len(results)


def test_record_leaving_exactly_eight_bytes_stays_in_its_segment(tmp_path, impl):
    path = tmp_path / "store"
    with open_store(path, impl) as store:
        second_len = record_length(100, "T")
        first_body = SEGMENT - MIN_BLANK - second_len - record_length(0, "T")
        r1 = store.put("T", b"a" * first_body)
        r2 = store.put("T", b"b" * 100)
        assert r2.commitlog_offset == r1.size
        assert r2.commitlog_offset + r2.size == SEGMENT - MIN_BLANK
        r3 = store.put("T", b"")
        assert r3.commitlog_offset == SEGMENT
        assert [m.body for m in store.iter_messages()] == [b"a" * first_body, b"b" * 100, b""]
    with open(segment_files(path)[0], "rb") as fh:
        data = fh.read()
    assert _HEAD.unpack_from(data, SEGMENT - MIN_BLANK) == (MIN_BLANK, MAGIC_BLANK)


def test_record_leaving_seven_bytes_goes_to_the_next_segment(tmp_path, impl):
    path = tmp_path / "store"
    with open_store(path, impl) as store:
        second_len = record_length(100, "T")
        first_body = SEGMENT - (MIN_BLANK - 1) - second_len - record_length(0, "T")
        r1 = store.put("T", b"a" * first_body)
        r2 = store.put("T", b"b" * 100)
        assert r2.commitlog_offset == SEGMENT
        assert store.read(r2.commitlog_offset).body == b"b" * 100
        assert [m.body for m in store.iter_messages()] == [b"a" * first_body, b"b" * 100]
    with open(segment_files(path)[0], "rb") as fh:
        data = fh.read()
    blank_len = SEGMENT - r1.size
    assert blank_len == second_len + MIN_BLANK - 1
    assert _HEAD.unpack_from(data, r1.size) == (blank_len, MAGIC_BLANK)


def test_largest_record_that_fits_a_segment_fills_it_but_for_the_blank(tmp_path, impl):
    with open_store(tmp_path / "store", impl) as store:
        body_len = SEGMENT - MIN_BLANK - record_length(0, "T")
        r = store.put("T", b"z" * body_len)
        assert (r.commitlog_offset, r.size) == (0, SEGMENT - MIN_BLANK)
        r2 = store.put("T", b"next")
        assert r2.commitlog_offset == SEGMENT
        assert store.read(0).body == b"z" * body_len


def test_iter_messages_from_a_start_offset_skips_blanks_across_segments(tmp_path, impl, rng):
    with open_store(tmp_path / "store", impl) as store:
        results = [store.put("TopicIt", rng.randbytes(rng.randrange(500, 3000))) for _ in range(80)]
        middle = results[len(results) // 2]
        tail = [m.commitlog_offset for m in store.iter_messages(middle.commitlog_offset)]
        assert tail == [r.commitlog_offset for r in results[len(results) // 2 :]]
        window_end = results[60].commitlog_offset
        window = [m.commitlog_offset for m in store.iter_messages(middle.commitlog_offset, window_end)]
        assert window == [r.commitlog_offset for r in results[len(results) // 2 : 60]]


def test_iter_messages_reads_table_after_table_and_skips_a_damaged_body_in_a_later_one(tmp_path, impl):
    from rocketstore.log.recordscan import MESSAGE_CHUNK

    n = MESSAGE_CHUNK * 2 + 300  # three tables of decoded records
    path = tmp_path / "store"
    with MessageStore(path, implementation=impl.name) as store:
        store.create_topic("TopicTables", 1)
        store.put_batch("TopicTables", [b"body-%06d" % i for i in range(n)], queue_id=0)
    damaged = MESSAGE_CHUNK + 17  # in the second table
    (segment,) = segment_files(path)
    with open(segment, "r+b") as f:
        data = f.read()
        at = data.index(b"body-%06d" % damaged)
        f.seek(at)
        f.write(b"BODY")  # the body no longer matches its CRC
    with MessageStore(path, implementation=impl.name) as store:
        bodies = [bytes(m.body) for m in store.iter_messages()]
        assert bodies == [b"body-%06d" % i for i in range(n) if i != damaged]
        start = store.read(0).size * 5  # (equal records) from the sixth on
        assert len(list(store.iter_messages(start))) == n - 5 - 1
