"""Retention policies: ``retention_ms``, ``retention_bytes`` (store and topic) and
``delete_when_consumed``, per store and per topic (topic attributes in ``topics.json``).

Segment ages are file mtimes set with ``os.utime``; the cleaner's clock, disk and hour are
injected, as in test_retention.py.
"""

import json
import os

import pytest

from rocketstore import MessageStore
from rocketstore.cli import main as cli_main
from rocketstore.config import StoreConfig
from rocketstore.errors import MessageNotFoundError, StoreConfigError, StoreReadOnlyError
from rocketstore.files.configfiles import loads_fastjson
from rocketstore.services.retention import Cleaner, topic_policy

SEGMENT = 8192
HOUR_MS = 3_600_000
NOW = 1_900_000_000_000


def open_store(path, impl, **options):
    options.setdefault("commitlog_file_size", SEGMENT)
    options.setdefault("consume_queue_units", 16)
    options.setdefault("clean_resource_interval_ms", 0)
    options.setdefault("default_queues", 2)
    return MessageStore(path, implementation=impl.name, store_host="10.0.0.7", **options)


def cleaner(store, hour=5, now=NOW):
    """A cleaner at ``now`` whose local hour is 5 (not a delete_when hour) and disk half full."""
    return Cleaner(
        store._opened.parts, clock=lambda: now, disk_usage=lambda p: 0.5, local_hour=lambda ms: hour
    )


def age(store, hours, now=NOW):
    when = (now - hours * HOUR_MS) / 1000
    for mf in store._opened.segments.files:
        os.utime(mf.path, (when, when))


def fill(store, segments, topics=("A",), body=300):
    """Put round-robin into ``topics`` (queue id = i % 2) until there are ``segments`` segments;
    returns [(topic, queue id, queue offset, commitlog offset)]."""
    out = []
    i = 0
    while len(store._opened.segments.files) < segments:
        topic = topics[i % len(topics)]
        r = store.put(topic, b"%05d" % i + b"x" * (body - 5), queue_id=i % 2)
        out.append((topic, i % 2, r.queue_offset, r.commitlog_offset))
        i += 1
    return out


def starts(store):
    return [mf.file_from_offset for mf in store._opened.segments.files]


@pytest.fixture
def store(tmp_path, impl):
    s = open_store(tmp_path / "s", impl)
    yield s
    s.close()


# ---- configuration: store options, topic attributes ----


@pytest.mark.parametrize(
    "options",
    [
        dict(retention_ms=-1),
        dict(retention_ms="1h"),
        dict(retention_ms=True),
        dict(retention_bytes=1.5),
        dict(topic_retention_bytes=-5),
        dict(delete_when_consumed="yes"),
    ],
)
def test_bad_retention_policy_options_raise_store_config_error(options):
    with pytest.raises(StoreConfigError):
        StoreConfig(store_host="10.0.0.7", **options)


def test_topic_retention_is_kept_as_topic_attributes_in_topics_json(tmp_path, impl):
    path = tmp_path / "s"
    with open_store(path, impl) as s:
        got = s.set_topic_retention(
            "A", retention_ms=3_600_000, retention_bytes=-1, delete_when_consumed=True
        )
        assert got["retention_ms"] == 3_600_000 and got["retention_bytes"] == -1
        assert got["delete_when_consumed"] is True and got["source"]["retention_ms"] == "topic"
        assert s.topics["A"] == 2  # created with default_queues
    text = (path / "config" / "topics.json").read_text()
    entry = json.loads(text)["topicConfigTable"]["A"]
    # a 5.x TopicConfig's attributes map: string keys and string values
    assert entry["attributes"] == {
        "delete.when.consumed": "true",
        "retention.bytes": "-1",
        "retention.ms": "3600000",
    }
    assert entry["readQueueNums"] == entry["writeQueueNums"] == 2 and entry["perm"] == 6
    with open_store(path, impl) as s:
        assert s.topic_retention("A")["retention_ms"] == 3_600_000
        s.set_topic_retention("A", retention_ms=None)  # back to the store's option
        s.create_topic("A", 3)  # changing the queue count keeps the attributes
        policy = s.topic_retention("A")
        assert policy["retention_ms"] is None and policy["source"]["retention_ms"] == "file_reserved_time"
        assert policy["delete_when_consumed"] is True
    with open_store(path, impl, read_only=True) as s:
        assert s.topic_retention("A")["delete_when_consumed"] is True
        with pytest.raises(StoreReadOnlyError):
            s.set_topic_retention("A", retention_ms=1)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(retention_ms=-2),
        dict(retention_ms=1.0),
        dict(retention_bytes="10"),
        dict(retention_bytes=True),
        dict(delete_when_consumed=1),
    ],
)
def test_bad_topic_retention_raises_and_writes_nothing(tmp_path, impl, kwargs):
    with open_store(tmp_path / "s", impl) as s:
        s.set_topic_retention("A", retention_ms=5)
        before = (tmp_path / "s" / "config" / "topics.json").read_bytes()
        with pytest.raises(StoreConfigError):
            s.set_topic_retention("A", **kwargs)
        assert (tmp_path / "s" / "config" / "topics.json").read_bytes() == before
        assert s.topic_retention("A")["retention_ms"] == 5


def test_topic_attributes_override_store_options_and_5x_reserve_time_is_read():
    cfg = StoreConfig(
        store_host="10.0.0.7", retention_ms=10, topic_retention_bytes=100, delete_when_consumed=True
    )
    p = topic_policy(cfg, {})
    assert (p.retention_ms, p.retention_bytes, p.delete_when_consumed) == (10, 100, True)
    p = topic_policy(cfg, {"retention.ms": "-1", "retention.bytes": "7", "delete.when.consumed": "false"})
    assert (p.retention_ms, p.retention_bytes, p.delete_when_consumed) == (-1, 7, False)
    p = topic_policy(cfg, {"reserve.time": "2"})  # RocketMQ 5.x: hours
    assert p.retention_ms == 2 * HOUR_MS and p.source["retention_ms"] == "topic reserve.time"
    p = topic_policy(cfg, {"reserve.time": "-1"})  # 5.x's "the store's"
    assert p.retention_ms == 10


def test_unreadable_attribute_values_keep_data_and_are_reported():
    cfg = StoreConfig(store_host="10.0.0.7", retention_ms=10, topic_retention_bytes=100)
    p = topic_policy(cfg, {"retention.ms": "ten", "retention.bytes": "", "delete.when.consumed": "maybe"})
    assert (p.retention_ms, p.retention_bytes, p.delete_when_consumed) == (-1, -1, True)
    assert set(p.bad_attributes) == {"retention.ms", "retention.bytes", "delete.when.consumed"}


# ---- age ----


def test_topic_retention_ms_deletes_at_any_hour_and_the_file_reserved_time_rule_waits_for_its_hour(store):
    fill(store, 5)
    age(store, 2)
    c = cleaner(store)
    assert c.run_once()["commitlog"] == []  # 2 h < 72 h, and 5 o'clock is not delete_when
    store.set_topic_retention("A", retention_ms=3 * HOUR_MS)
    assert c.run_once()["commitlog"] == []
    store.set_topic_retention("A", retention_ms=HOUR_MS)
    result = c.run_once()
    assert result["trigger"] == "policy" and result["commitlog"] == [0, SEGMENT, 2 * SEGMENT, 3 * SEGMENT]
    assert starts(store) == [4 * SEGMENT]  # the last segment never goes


def test_a_shared_segment_goes_only_when_every_topic_in_it_lets_it_go(store):
    fill(store, 4, topics=("A", "B"))
    store.put("C", b"only in the last segment")
    age(store, 2)
    c = cleaner(store)
    store.set_topic_retention("A", retention_ms=HOUR_MS)
    result = c.run_once()
    assert result["commitlog"] == []  # B shares every segment and keeps the 72 h rule
    assert result["held"]["start"] == 0
    assert result["held"]["held_by"] == {
        "B": [{"policy": "file_reserved_time", "age_ms": 2 * HOUR_MS, "retention_ms": 72 * HOUR_MS}]
    }
    age(store, 100)  # old enough for the 72 h rule, which waits for a delete_when hour
    assert c.run_once()["held"]["held_by"] == {"B": [{"policy": "delete_when", "hours": [4]}]}
    age(store, 2)
    store.set_topic_retention("B", retention_ms=-1)  # no age limit at all
    held = c.run_once()["held"]["held_by"]["B"]
    assert held[0]["policy"] == "retention_ms" and held[0]["retention_ms"] == -1
    store.set_topic_retention("B", retention_ms=HOUR_MS)  # C has no record in those segments
    assert c.run_once()["commitlog"] == [0, SEGMENT, 2 * SEGMENT]


def test_the_store_retention_ms_applies_to_topics_without_their_own(tmp_path, impl):
    with open_store(tmp_path / "s", impl, retention_ms=HOUR_MS) as s:
        fill(s, 3, topics=("A", "B"))
        s.set_topic_retention("B", retention_ms=5 * HOUR_MS)
        age(s, 2)
        assert cleaner(s).run_once()["held"]["held_by"] == {
            "B": [{"policy": "retention_ms", "age_ms": 2 * HOUR_MS, "retention_ms": 5 * HOUR_MS}]
        }
        age(s, 6)
        assert cleaner(s).run_once()["commitlog"] == [0, SEGMENT]


# ---- size ----


def test_the_store_size_cap_deletes_the_oldest_segments_whatever_their_age(tmp_path, impl):
    with open_store(tmp_path / "s", impl, retention_bytes=2 * SEGMENT) as s:
        fill(s, 6)
        age(s, 0)
        result = cleaner(s).run_once()
        assert result["trigger"] == "policy"
        assert s.max_offset - s.min_offset <= 2 * SEGMENT
        assert s.max_offset - result["commitlog"][-1] > 2 * SEGMENT  # no segment more than needed
        with pytest.raises(MessageNotFoundError):
            s.read(0)


def test_a_topic_size_cap_deletes_its_oldest_segments_down_to_the_cap(store):
    fill(store, 6)
    age(store, 0)
    queues = store.queues()
    total = sum(store.queue_units("A", q, lo, hi - lo)["size"].sum() for (t, q), (lo, hi) in queues.items())
    store.set_topic_retention("A", retention_bytes=int(total) // 2)
    deleted = cleaner(store).run_once()["commitlog"]
    assert deleted and deleted == starts_before(deleted)
    left = 0
    for (_, q), (lo, hi) in store.queues().items():
        left += int(store.queue_units("A", q, lo, hi - lo)["size"].sum()) if hi > lo else 0
    assert left <= total // 2
    assert left + SEGMENT > total // 2  # it stopped as soon as the topic fit


def starts_before(deleted):
    return [i * SEGMENT for i in range(len(deleted))]


def test_a_topic_size_cap_does_not_delete_a_segment_another_topic_keeps(store):
    fill(store, 5, topics=("A", "B"))
    age(store, 0)
    store.set_topic_retention("A", retention_bytes=0)
    result = cleaner(store).run_once()
    assert result["commitlog"] == []
    assert list(result["held"]["held_by"]) == ["B"]


# ---- consumption ----


def test_delete_when_consumed_keeps_segments_until_every_group_consumed_past_them(store):
    records = fill(store, 6)
    age(store, 100)
    store.set_topic_retention("A", retention_ms=0, delete_when_consumed=True)
    c = cleaner(store)
    result = c.run_once()
    assert result["commitlog"] == []  # no group yet: nobody consumed anything
    assert result["held"]["held_by"]["A"][0] == {
        "policy": "delete_when_consumed",
        "groups": {},
        "no_group": True,
    }
    # G1 consumed everything, G2 the first 10 messages of each queue
    for q in (0, 1):
        store.commit_offset("G1", "A", q, store.max_queue_offset("A", q))
        store.commit_offset("G2", "A", q, 10)
    result = c.run_once()
    first_unconsumed = min(phy for t, q, qo, phy in records if qo >= 10)
    assert result["commitlog"] == [s for s in range(0, first_unconsumed - SEGMENT + 1, SEGMENT)]
    assert result["held"]["held_by"]["A"][0]["groups"] == {"G2": {0: 10, 1: 10}}
    for _topic, q, qo, _phy in records:  # nothing unconsumed went
        if qo >= 10:
            assert store.get_by_queue_offset("A", q, qo).queue_offset == qo
    on_disk = loads_fastjson((pathlib_of(store) / "config" / "consumerOffset.json").read_text())
    assert on_disk["offsetTable"]["A@G2"] == {0: 10, 1: 10}  # persisted before the deletion


def pathlib_of(store):
    import pathlib

    return pathlib.Path(store.path)


def test_a_group_without_an_offset_for_a_queue_holds_that_queue(store):
    fill(store, 4)
    age(store, 100)
    store.set_topic_retention("A", retention_ms=0, delete_when_consumed=True)
    store.commit_offset("G", "A", 0, store.max_queue_offset("A", 0))  # queue 1 never consumed
    result = cleaner(store).run_once()
    assert result["commitlog"] == [] and result["held"]["held_by"]["A"][0]["groups"] == {
        "G": {0: store.max_queue_offset("A", 0)}
    }


def test_no_size_cap_or_full_disk_deletes_unconsumed_data_but_a_forced_manual_clean_does(tmp_path, impl):
    with open_store(
        tmp_path / "s",
        impl,
        retention_bytes=SEGMENT,
        delete_when_consumed=True,
        delete_unexpired_when_disk_full=True,
    ) as s:
        fill(s, 5)
        age(s, 100)
        s.commit_offset("G", "A", 0, 0)
        s.commit_offset("G", "A", 1, 0)
        c = Cleaner(s._opened.parts, clock=lambda: NOW, disk_usage=lambda p: 0.88, local_hour=lambda ms: 4)
        result = c.run_once()  # above the forcible ratio, at the delete_when hour, over the cap
        assert result["forced"] and result["commitlog"] == []
        assert result["held"]["held_by"]["A"][0]["policy"] == "delete_when_consumed"
        assert c.clean()["commitlog"] == []  # a manual clean keeps to the policies too
        assert len(c.clean(force=True)["commitlog"]) == 4  # the operator's force does not


def test_the_consumption_gate_checks_the_record_at_the_groups_position(store, monkeypatch):
    records = fill(store, 4)
    age(store, 100)
    store.set_topic_retention("A", retention_ms=0, delete_when_consumed=True)
    # the group's position in each queue: its first record in the third segment
    position = {q: min(qo for t, qq, qo, phy in records if qq == q and phy >= 2 * SEGMENT) for q in (0, 1)}
    for q in (0, 1):
        store.commit_offset("G", "A", q, position[q])
    store.queues()  # dispatched
    cq = store._opened.queues.get("A", 0)
    real = cq.unit

    def damaged(queue_offset):  # the unit at the group's position points at another record
        phy, size, tags = real(queue_offset)
        return (phy + SEGMENT, size, tags) if queue_offset == position[0] else (phy, size, tags)

    monkeypatch.setattr(cq, "unit", damaged)
    assert cleaner(store).run_once()["commitlog"] == []
    monkeypatch.setattr(cq, "unit", real)
    assert cleaner(store).run_once()["commitlog"] == [0, SEGMENT]


# ---- reporting ----


def test_stats_and_the_cli_show_what_holds_each_topics_oldest_segment(tmp_path, impl, capsys):
    path = tmp_path / "s"
    with open_store(path, impl) as s:
        fill(s, 3, topics=("A", "B"))
        s.set_topic_retention("A", delete_when_consumed=True, retention_ms=0)
        s.commit_offset("G", "A", 0, 1)
        s.commit_offset("G", "A", 1, 1)
        report = s.stats()["retention"]
        a = report["topics"]["A"]
        assert a["oldest_segment"] == 0
        assert a["held_by"] == [
            {"policy": "delete_when_consumed", "groups": {"G": {0: 1, 1: 1}}, "no_group": False}
        ]
        b = report["topics"]["B"]
        assert b["held_by"][0]["policy"] == "file_reserved_time"
        assert set(report["oldest_segment"]["held_by"]) == {"A", "B"}
        s.persist_offsets()
    assert cli_main(["--store", str(path), "stats"]) == 0
    out = capsys.readouterr().out
    assert "RETENTION" in out and "delete_when_consumed: G" in out and "file_reserved_time" in out
    assert cli_main(["--store", str(path), "stats", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["retention"]["topics"]["A"]["held_by"][0]["groups"] == {"G": {"0": 1, "1": 1}}


def test_without_policies_passes_keep_rocketmqs_rules(store):
    fill(store, 4)
    age(store, 100)
    assert cleaner(store, hour=5).run_once()["commitlog"] == []  # not the hour
    assert cleaner(store, hour=4).run_once()["commitlog"] == [0, SEGMENT, 2 * SEGMENT]


def test_the_store_wide_consumption_policy_leaves_system_topics_to_age_and_size(tmp_path, impl):
    with open_store(tmp_path / "s", impl, delete_when_consumed=True, retention_ms=0) as s:
        records = fill(s, 2)
        msg = s.get_by_queue_offset("A", 0, 0)
        s.send_back("G", msg, delay_level=-1)  # straight to %DLQ%G, which no group consumes
        s.send_back("G", msg)  # into SCHEDULE_TOPIC_XXXX
        fill(s, 4)
        for q in (0, 1):
            s.commit_offset("G", "A", q, s.max_queue_offset("A", q))
        assert s.topic_retention("%DLQ%G")["delete_when_consumed"] is False
        assert s.topic_retention("%DLQ%G")["source"]["delete_when_consumed"] == "system topic"
        age(s, 1)
        deleted = cleaner(s).run_once()["commitlog"]
        assert deleted == [0, SEGMENT, 2 * SEGMENT]  # the DLQ and delayed records did not hold them
        assert records  # (the first records were A's)
        s.set_topic_retention("%DLQ%G", delete_when_consumed=True)  # its own attribute applies
        assert s.topic_retention("%DLQ%G")["delete_when_consumed"] is True


def test_a_failed_write_of_the_offsets_that_release_segments_deletes_nothing(store, monkeypatch):
    fill(store, 4)
    age(store, 100)
    store.set_topic_retention("A", retention_ms=0, delete_when_consumed=True)
    for q in (0, 1):
        store.commit_offset("G", "A", q, store.max_queue_offset("A", q))

    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store._opened.parts.offsets, "persist", no_space)
    result = cleaner(store).run_once()
    assert result["commitlog"] == [] and isinstance(result["dispatch_error"], OSError)
    monkeypatch.undo()
    assert cleaner(store).run_once()["commitlog"] == [0, SEGMENT, 2 * SEGMENT]
