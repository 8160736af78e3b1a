"""Model-based test of the retention policies on both twins.

A hypothesis state machine puts into three topics, commits offsets for two groups, changes
store-wide and per-topic policies, ages segments and runs passes. Before each pass a reference
model, written from the rules in docs/guide/retention.md over a plain list of records, predicts
exactly which segments the pass deletes; after it, the store must have deleted those and no
others, every deleted record of a ``delete_when_consumed`` topic must have been consumed by
every group (unless the pass was a forced manual clean), and what is left must read back.
"""

import os
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from rocketstore import MessageStore
from rocketstore.services.retention import UNCHANGED, Cleaner

SEGMENT = 4096
HOUR_MS = 3_600_000
NOW = 1_900_000_000_000
TOPICS = ("A", "B", "C")
GROUPS = ("G1", "G2")
QUEUES = (0, 1)
STATS: Counter = Counter()  # what the runs exercised, printed with -s
BATCH = 3  # delete_files_batch_max: small, so the batch limit is part of the model


@dataclass
class Rec:
    topic: str
    queue_id: int
    queue_offset: int
    phy: int
    size: int


class Policy:
    def __init__(self, ms=None, size=None, consumed=False):
        self.ms, self.size, self.consumed = ms, size, consumed


class RetentionMachine(RuleBasedStateMachine):
    impl_name = "py"  # set by make_machine

    @initialize(
        retention_ms=st.sampled_from([None, 0, HOUR_MS]),
        retention_bytes=st.sampled_from([None, 3 * SEGMENT, 6 * SEGMENT]),
        topic_bytes=st.sampled_from([None, 2500]),
        consumed=st.booleans(),
    )
    def open(self, retention_ms, retention_bytes, topic_bytes, consumed):
        self.dir = tempfile.mkdtemp(prefix="rs-retention-model-", dir="/tmp")
        self.store = MessageStore(
            os.path.join(self.dir, "s"),
            implementation=self.impl_name,
            store_host="10.0.0.7",
            commitlog_file_size=SEGMENT,
            consume_queue_units=16,
            default_queues=len(QUEUES),
            clean_resource_interval_ms=0,
            dispatch_interval_ms=0,
            delete_files_batch_max=BATCH,
            retention_ms=retention_ms,
            retention_bytes=retention_bytes,
            topic_retention_bytes=topic_bytes,
            delete_when_consumed=consumed,
        )
        self.store_policy = Policy(retention_ms, topic_bytes, consumed)
        self.total_cap = retention_bytes
        self.topic_attrs = {t: {} for t in TOPICS}  # what set_topic_retention set
        self.records: list[Rec] = []  # live records
        self.next_qo = {(t, q): 0 for t in TOPICS for q in QUEUES}
        self.commits: dict[tuple[str, str, int], int] = {}
        self.mtimes: dict[int, float] = {}

    def teardown(self):
        store = getattr(self, "store", None)
        if store is not None:
            store.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- the model's policy rules --

    def policy(self, topic):
        attrs = self.topic_attrs[topic]
        p = Policy(self.store_policy.ms, self.store_policy.size, self.store_policy.consumed)
        if "ms" in attrs:
            p.ms = attrs["ms"]
        if "size" in attrs:
            p.size = attrs["size"]
        if "consumed" in attrs:
            p.consumed = attrs["consumed"]
        return p

    def active(self):
        sp = self.store_policy
        return (
            sp.ms is not None
            or sp.size is not None
            or sp.consumed
            or self.total_cap is not None
            or any(self.topic_attrs.values())
        )

    def segment_mtime_ms(self, start):
        return os.stat(os.path.join(self.store.path, "commitlog", "%020d" % start)).st_mtime_ns // 1_000_000

    def consumed_past(self, topic, end):
        """Every group with an offset for the topic has consumed every record below ``end``."""
        groups = {g for (g, t, _) in self.commits if t == topic}
        if not groups:
            return False
        for g in groups:
            for q in QUEUES:
                live = [r for r in self.records if r.topic == topic and r.queue_id == q]
                if not live:
                    continue
                position = max(self.commits.get((g, topic, q), -1), min(r.queue_offset for r in live))
                nxt = [r for r in live if r.queue_offset == position]
                if nxt and nxt[0].phy < end:
                    return False
        return True

    def allows(self, topic, start, scheduled, forced):
        end = start + SEGMENT
        p = (
            self.policy(topic)
            if topic is not None
            else Policy(self.store_policy.ms, self.store_policy.size, False)
        )
        if p.consumed and topic is not None and not forced and not self.consumed_past(topic, end):
            return False
        if forced:
            return True
        if self.total_cap is not None and self.store.max_offset - start > self.total_cap:
            return True
        capped = topic is not None and p.size not in (None, -1)
        if capped and sum(r.size for r in self.records if r.topic == topic and r.phy >= start) > p.size:
            return True
        age = NOW - self.segment_mtime_ms(start)
        if p.ms is None:
            return scheduled and age >= 72 * HOUR_MS
        if p.ms == -1:
            return False
        return age >= p.ms

    def expected(self, hour, manual, force):
        scheduled = manual or hour == 4
        forced = manual and force
        active = self.active()
        if not scheduled and not active:
            return []
        files = [mf.file_from_offset for mf in self.store._opened.segments.files]
        wrote = self.store.max_offset
        out = []
        for start in files[:-1]:
            if len(out) >= BATCH or start + SEGMENT > wrote:
                break
            if not active:
                if not forced and NOW - self.segment_mtime_ms(start) < 72 * HOUR_MS:
                    break
                out.append(start)
                continue
            topics = {r.topic for r in self.records if start <= r.phy < start + SEGMENT}
            if not all(self.allows(t, start, scheduled, forced) for t in (topics or {None})):
                break
            out.append(start)
        return out

    # -- rules --

    @rule(
        topic=st.sampled_from(TOPICS),
        queue_id=st.sampled_from(QUEUES),
        n=st.integers(1, 30),
        body=st.integers(40, 400),
    )
    def put(self, topic, queue_id, n, body):
        for _ in range(n):
            r = self.store.put(topic, b"b" * body, queue_id=queue_id)
            assert r.ok
            self.records.append(Rec(topic, queue_id, r.queue_offset, r.commitlog_offset, r.size))
            self.next_qo[topic, queue_id] = r.queue_offset + 1

    @rule(
        group=st.sampled_from(GROUPS),
        topic=st.sampled_from(TOPICS),
        queue_id=st.sampled_from(QUEUES),
        data=st.data(),
    )
    def commit(self, group, topic, queue_id, data):
        offset = data.draw(st.integers(0, self.next_qo[topic, queue_id]))
        self.store.commit_offset(group, topic, queue_id, offset)
        self.commits[group, topic, queue_id] = offset

    @rule(
        topic=st.sampled_from(TOPICS),
        ms=st.sampled_from([UNCHANGED, None, -1, 0, HOUR_MS, 3 * HOUR_MS]),
        size=st.sampled_from([UNCHANGED, None, -1, 0, 2000, 6000]),
        consumed=st.sampled_from([UNCHANGED, None, True, False]),
    )
    def set_policy(self, topic, ms, size, consumed):
        self.store.set_topic_retention(
            topic, retention_ms=ms, retention_bytes=size, delete_when_consumed=consumed
        )
        attrs = self.topic_attrs[topic]
        for key, value in (("ms", ms), ("size", size), ("consumed", consumed)):
            if value is UNCHANGED:
                continue
            if value is None:
                attrs.pop(key, None)
            else:
                attrs[key] = value

    @rule(
        old=st.sampled_from([0, 2, 4, 100]), young=st.sampled_from([0, 2, 4, 100]), split=st.integers(0, 20)
    )
    def age(self, old, young, split):
        """The first ``split`` segments ``old`` hours old, the rest ``young`` (never older)."""
        files = self.store._opened.segments.files
        for i, mf in enumerate(files):
            hours = old if i < split else min(old, young)
            when = (NOW - hours * HOUR_MS) / 1000
            os.utime(mf.path, (when, when))

    @rule(hour=st.sampled_from([4, 5]), manual=st.booleans(), force=st.booleans())
    def clean_pass(self, hour, manual, force):
        force = force and manual
        self.store.queues()  # dispatched, so the model and the queues see the same records
        want = self.expected(hour, manual, force)
        cleaner = Cleaner(
            self.store._opened.parts, clock=lambda: NOW, disk_usage=lambda p: 0.5, local_hour=lambda ms: hour
        )
        result = cleaner.run_once(manual=manual, force=force)
        assert result["commitlog"] == want, (result, want)
        STATS["passes"] += 1
        STATS["passes that deleted"] += bool(want)
        if want and any(self.policy(t).consumed for t in TOPICS):
            STATS["deleting passes with a delete_when_consumed topic"] += 1
        gone = [r for r in self.records if want and r.phy < want[-1] + SEGMENT]
        for r in gone:
            p = self.policy(r.topic)
            if p.consumed and not force:
                groups = {g for (g, t, _) in self.commits if t == r.topic}
                assert groups and all(
                    self.commits.get((g, r.topic, r.queue_id), -1) > r.queue_offset for g in groups
                ), ("an unconsumed record was deleted", r)
        self.records = [r for r in self.records if r not in gone]

    @invariant()
    def what_is_left_reads_back(self):
        if not hasattr(self, "store"):
            return
        files = self.store._opened.segments.files
        if files:  # no hole: the oldest segment goes first
            assert self.store.min_offset == files[0].file_from_offset
        for r in self.records[:: max(1, len(self.records) // 8)]:
            msg = self.store.get_by_queue_offset(r.topic, r.queue_id, r.queue_offset)
            assert msg.commitlog_offset == r.phy


def make_machine(impl_name):
    return type(f"RetentionMachine_{impl_name}", (RetentionMachine,), {"impl_name": impl_name})


def test_retention_policies_match_the_model(impl):
    run_state_machine_as_test(
        make_machine(impl.name),
        settings=settings(
            max_examples=50,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
    print(dict(STATS))
