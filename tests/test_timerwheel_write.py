"""RocketMQ 5.x's timer files written by rocketstore (rocketstore.queues.timerwheel's
TimerWheelWriter and the timer service that keeps them): the bytes 5.3.3 writes, and what a
broker reading them would deliver."""

from __future__ import annotations

import hashlib
import os
import shutil

from rocketmq5 import manifest, unpack

from rocketstore import MessageStore
from rocketstore.queues.timerwheel import (
    MAGIC_DEFAULT,
    MAGIC_DELETE,
    TimerWheelWriter,
    java_string_hash,
    read_timer_check,
)

FIXTURE = "v5-timer"


def _fixture_units():
    """The timer queue's records of the fixture, in queue order, as the writer takes them."""
    man = manifest(FIXTURE)
    recs = sorted(
        (r for r in man["records"] if r["topic"] == "rmq_sys_wheel_timer"), key=lambda r: r["queue_offset"]
    )
    sizes = {p["commitlog_offset"]: p["size"] for p in man["puts"]}
    store_ts = {p["commitlog_offset"]: p["store_timestamp"] for p in man["puts"]}
    out = []
    for r in recs:
        props = r["properties"]
        magic = MAGIC_DEFAULT | (MAGIC_DELETE if "TIMER_DEL_UNIQKEY" in props else 0)
        write_ms = store_ts[r["commitlog_offset"]] // 1000 * 1000  # the broker's currWriteTimeMs then
        out.append(
            (
                int(props["TIMER_OUT_MS"]),
                r["commitlog_offset"],
                sizes[r["commitlog_offset"]],
                java_string_hash(props["REAL_TOPIC"]),
                magic,
                write_ms,
            )
        )
    return out


def _sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_java_string_hash():
    assert java_string_hash("FixtureTimerTopic") == 286554035  # the fixture's units hold it
    assert java_string_hash("") == 0
    assert java_string_hash("TopicTest#OrderID001") == -1231272886  # spec §14 vector 1


def test_writer_reproduces_the_fixture_bytes(tmp_path):
    """The 24 units 5.3.3 enqueued from the fixture's timer queue, given to the writer with the
    broker's settings (1024-byte timer log files, 1 s precision, a 2-day roll window), give the
    same timerlog/, timerwheel and timercheck bytes."""
    fixture = unpack(tmp_path / "fx", FIXTURE)
    mine = tmp_path / "mine"
    mine.mkdir()
    writer = TimerWheelWriter(mine, file_size=1024, roll_window_slots=172800)
    for delayed, offset, size, topic_hash, magic, write_ms in _fixture_units():
        writer.append([(delayed, offset, size, topic_hash, magic)], write_ms)
    check = read_timer_check(fixture)
    writer.checkpoint(check.read_time_ms, check.queue_offset)
    writer.close()
    names = sorted(os.listdir(fixture / "timerlog"))
    assert sorted(os.listdir(mine / "timerlog")) == names
    for name in names:
        assert (mine / "timerlog" / name).read_bytes() == (fixture / "timerlog" / name).read_bytes(), name
    assert os.path.getsize(mine / "timerwheel") == os.path.getsize(fixture / "timerwheel")
    assert _sha(mine / "timerwheel") == _sha(fixture / "timerwheel")
    ours = (mine / "config" / "timercheck").read_bytes()
    theirs = (fixture / "config" / "timercheck").read_bytes()
    assert len(ours) == len(theirs) == 4096
    assert ours[:32] == theirs[:32]  # the four longs; then the data version (stateVersion, time, counter)


def test_writer_batches_like_single_appends(tmp_path):
    """Units given in one call chain exactly as given one at a time (the vectorized chaining)."""
    units = _fixture_units()
    one, many = tmp_path / "one", tmp_path / "many"
    for root in (one, many):
        root.mkdir()
    w1 = TimerWheelWriter(one, file_size=1024)
    for u in units:
        w1.append([u[:5]], 1795896366000)
    w1.checkpoint(1795896372000, 24)
    w1.close()
    w2 = TimerWheelWriter(many, file_size=1024)
    w2.append([u[:5] for u in units], 1795896366000)
    w2.checkpoint(1795896372000, 24)
    w2.close()
    for name in sorted(os.listdir(one / "timerlog")):
        assert (one / "timerlog" / name).read_bytes() == (many / "timerlog" / name).read_bytes()
    assert _sha(one / "timerwheel") == _sha(many / "timerwheel")


def test_writer_reopens_at_the_end_of_the_valid_units(tmp_path):
    """A writer opened on a timer log continues after its last whole unit (a torn one is cut),
    chaining into the slots the wheel file holds."""
    units = _fixture_units()
    full, split = tmp_path / "full", tmp_path / "split"
    for root in (full, split):
        root.mkdir()
    w = TimerWheelWriter(full, file_size=1024)
    w.append([u[:5] for u in units], 1795896366000)
    w.checkpoint(1795896372000, 24)
    w.close()
    w = TimerWheelWriter(split, file_size=1024)
    w.append([u[:5] for u in units[:20]], 1795896366000)
    w.checkpoint(1795896366000, 20)
    w.close()
    # a torn unit after the last whole one: its first bytes only
    last = sorted(os.listdir(split / "timerlog"))[-1]
    with open(split / "timerlog" / last, "r+b") as f:
        f.seek(52)  # after unit 19, the first of file 1024
        f.write(b"\x00\x00\x00\x34\xff\xff")
    w = TimerWheelWriter(split, file_size=1024, valid=lambda offset, size: size > 0)
    assert w.end == 1024 + 52
    w.append([u[:5] for u in units[20:]], 1795896366000)
    w.checkpoint(1795896372000, 24)
    w.close()
    for name in sorted(os.listdir(full / "timerlog")):
        assert (full / "timerlog" / name).read_bytes() == (split / "timerlog" / name).read_bytes()
    assert _sha(full / "timerwheel") == _sha(split / "timerwheel")


T0 = 1_800_000_000_000  # on a slot's start


def _broker_view(root, impl):
    """The uniq keys a 5.x broker opening ``root`` would deliver, as rocketstore reads its timer
    files (the slots from lastReadTimeMs on, then the timer queue from the checkpoint's
    offset), and the checkpoint's read time."""
    with MessageStore(root, implementation=impl.name, read_only=True) as store:
        wheel = store.timer_stats()["rocketmq"]
    return {p["uniq_key"] for p in wheel["pending"]}, wheel["read_time_ms"]


def _put_timers(store, delays):
    return {d: store.put("T", str(d).encode(), delay_ms=d).unique_key for d in delays}


def test_a_broker_finds_exactly_the_timers_rocketstore_left_pending(tmp_path, impl):
    """rocketstore's timer files, read as a broker reads them, hold each pending timer once and
    none rocketstore delivered (no waiting unit shares a slot with a delivered one)."""
    now = [T0]
    root = tmp_path / "s"
    delays = [1500, 2500, 3_600_000, 7_200_000, 86_400_000, 2 * 86_400_000 + 5]
    with MessageStore(root, implementation=impl.name, clock=lambda: now[0], timer_interval_ms=0) as store:
        store.create_topic("T", 2)
        keys = _put_timers(store, delays)
        assert store.deliver_timers(T0 + 3000) == 2
    pending, read_time = _broker_view(root, impl)
    assert pending == {keys[d] for d in delays[2:]}
    assert read_time == T0 + 3000  # past the slot of the last delivered: none waits in it
    # and again after more puts and deliveries on a reopened store: the log goes on, chained
    now[0] = T0 + 10_000
    with MessageStore(root, implementation=impl.name, clock=lambda: now[0], timer_interval_ms=0) as store:
        more = {d: store.put("T", b"m%d" % d, delay_ms=d).unique_key for d in (500, 3_600_000, 40_000)}
        assert store.deliver_timers(T0 + 3_700_000) == 4  # 500, 40_000 and the two at 1 h
    pending, read_time = _broker_view(root, impl)
    assert pending == {keys[d] for d in delays[3:]}
    assert more[3_600_000] not in pending and read_time == T0 + 3_611_000  # the slot after the last delivered


def test_a_broker_repeats_only_the_delivered_timers_of_a_partly_delivered_slot(tmp_path, impl):
    """A pass delivers to the millisecond, a broker a slot (1 s) at a time: lastReadTimeMs stays
    at the slot that still holds a waiting timer, and a broker taking over would deliver again
    the ones rocketstore delivered from that slot (docs/guide/timers.md), no others."""
    now = [T0]
    root = tmp_path / "s"
    with MessageStore(root, implementation=impl.name, clock=lambda: now[0], timer_interval_ms=0) as store:
        store.create_topic("T", 2)
        keys = _put_timers(store, [200, 1200, 1800, 5000])
        assert store.deliver_timers(T0 + 1500) == 2  # 200 and 1200
    pending, read_time = _broker_view(root, impl)
    assert read_time == T0 + 1000
    assert pending == {keys[1200], keys[1800], keys[5000]}  # 1200: delivered, in 1800's slot


def test_a_writable_open_of_a_store_without_the_files_writes_them_for_what_waits(tmp_path, impl):
    """A store whose timers ran before rocketstore kept the broker's files (no timerlog/) gets
    units for the timers still waiting when it opens: a broker finds those, not the delivered."""
    now = [T0]
    root = tmp_path / "s"
    with MessageStore(root, implementation=impl.name, clock=lambda: now[0], timer_interval_ms=0) as store:
        store.create_topic("T", 2)
        keys = _put_timers(store, [100, 900, 60_000, 120_000])
        assert store.deliver_timers(T0 + 1000) == 2
    for name in ("timerlog", "timerwheel", "config/timercheck"):
        path = root / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    with MessageStore(root, implementation=impl.name, clock=lambda: now[0], timer_interval_ms=0):
        pass
    pending, _read_time = _broker_view(root, impl)
    assert pending == {keys[60_000], keys[120_000]}


UNITS_PER_FILE = 8
TIMER_LOG_FILE = 52 * UNITS_PER_FILE + 16  # 8 units and the blank that ends a full file


def _small_timer_log(root, impl, now):
    """A new store whose timer log files hold 8 units each (the writer keeps an existing
    log's file size)."""
    with _open(root, impl, now):
        pass
    os.makedirs(root / "timerlog")
    with open(root / "timerlog" / f"{0:020d}", "wb") as f:
        f.truncate(TIMER_LOG_FILE)


def _timer_log_files(root):
    return sorted(int(n) for n in os.listdir(root / "timerlog"))


def _open(root, impl, now):
    return MessageStore(
        root,
        implementation=impl.name,
        clock=lambda: now[0],
        timer_interval_ms=0,
        commitlog_file_size=64 * 1024,
        consume_queue_units=64,
    )


def _fill(store, n=120):
    """Plain messages after the timers, so that the segments holding the timers' records are
    no longer the last (retention may delete them)."""
    for _ in range(n):
        store.put("Filler", b"f" * 2048)


def test_retention_deletes_the_timer_log_files_whose_records_it_deleted(tmp_path, impl):
    """As a 5.x broker's TimerMessageStore (every 30 s, MappedFileQueue's
    deleteExpiredFileByOffsetForTimerLog): a timer log file whose units all name CommitLog
    records retention deleted goes, oldest first; the files a broker's recovery rescans (the
    one holding the checkpoint's flush position, the one before it) and the last stay, and the
    timers still waiting are delivered, here and by a broker opening the store."""
    now = [T0]
    root = tmp_path / "s"
    _small_timer_log(root, impl, now)
    with _open(root, impl, now) as store:
        for i in range(40):  # 5 files of units, delivered
            store.put("T", b"t%d" % i + b"x" * 2048, delay_ms=5)
        assert store.deliver_timers(T0 + 5) == 40
        _fill(store)
        waiting = {store.put("T", b"w%d" % d, delay_ms=d).unique_key for d in (60_000, 120_000, 180_000)}
        assert store.deliver_timers(T0 + 10) == 0  # read into the log: a sixth file
        assert _timer_log_files(root) == [i * TIMER_LOG_FILE for i in range(6)]
        result = store.clean(force=True)
        assert result["commitlog"], result
        # files 0..3 name only deleted records; 4 holds the flush position less a file, 5 is written
        assert _timer_log_files(root) == [4 * TIMER_LOG_FILE, 5 * TIMER_LOG_FILE]
        assert result["timer_log_files"] == 4
        assert store.stats()["deleted_timer_log_files"] == 4
        assert store.clean(force=True)["timer_log_files"] == 0
    pending, _read_time = _broker_view(root, impl)
    assert pending == waiting
    with _open(root, impl, now) as store:  # a reopen finds the log's end in what is left
        more = store.put("T", b"later", delay_ms=1000).unique_key
        assert store.deliver_timers(T0 + 200_000) == 4
        assert _timer_log_files(root)[-1] == 5 * TIMER_LOG_FILE
    pending, _read_time = _broker_view(root, impl)
    assert more not in pending and not pending & waiting


def test_a_timer_log_file_holding_a_waiting_timer_stays(tmp_path, impl):
    """A file holding the unit of a timer not yet delivered stays, and every file after it,
    even once retention deleted that timer's record (it is dropped when due, as a broker drops
    it); once it is, the files go."""
    now = [T0]
    root = tmp_path / "s"
    _small_timer_log(root, impl, now)
    with _open(root, impl, now) as store:
        store.put("T", b"long", delay_ms=86_400_000)  # the first unit of file 0
        for i in range(40):
            store.put("T", b"t%d" % i + b"x" * 2048, delay_ms=5)
        assert store.deliver_timers(T0 + 5) == 40
        _fill(store)
        store.put("T", b"w", delay_ms=60_000)
        store.deliver_timers(T0 + 10)
        files = _timer_log_files(root)
        assert len(files) == 6
        result = store.clean(force=True)
        assert result["commitlog"] and result["timer_log_files"] == 0
        assert _timer_log_files(root) == files
        assert store.deliver_timers(T0 + 86_400_000) == 1  # the long one's record is gone: dropped
        assert store.timer_stats()["dropped"] == 1
        assert store.clean(force=True)["timer_log_files"] == 4
        assert _timer_log_files(root) == files[4:]
