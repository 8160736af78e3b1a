"""A stateful property test of MessageStore against an in-memory model, on both twins.

Random puts (single, batch, ``put_messages``, transactional sysFlags) over a few topics, queues,
keys and tags — with Java-hash collisions among the topics ("Aa"/"BB"), the keys and the tags —
interleaved with every query (getMessage, key, UNIQ_KEY, queue offset, offsetMsgId), consumer
offset commits and close/reopen; each answer is checked against the model. ConsumeQueue files of
8 units and index files of 31 items make every run roll both.
"""

import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from rocketstore import GetMessageStatus, Message, MessageStore
from rocketstore.errors import MessageNotFoundError
from rocketstore.format._codec_py import java_hash

S = GetMessageStatus
CQ_UNITS = 8
OPTIONS = dict(
    commitlog_file_size=16 * 1024,
    consume_queue_units=CQ_UNITS,
    index_slots=16,
    index_count=32,
    store_host="10.0.0.7",
    store_port=10911,
    default_queues=2,
)
TX_MASK, PREPARED, ROLLBACK = 0x0C, 0x04, 0x0C

TOPICS = ["TopicA", "Aa", "BB"]  # "Aa#k" and "BB#k" collide in the index
GROUPS = ["g1", "g2"]
KEYS = ["k1", "k2", "Aa", "BB", "AaBB", "BBAa", "OrderID1yoiddi"]
TAGS = [None, "TagA", "Aa", "BB", "Aa", "BB"]
EXPRESSIONS = [None, "*", "TagA", "Aa", "BB", "Aa", "BB", "TagA || BB", "TagB||Aa", "Nope"]

topics = st.sampled_from(TOPICS)
queue_ids = st.sampled_from([-1, 0, 1])
bodies = st.binary(max_size=48)
tags_st = st.sampled_from(TAGS)
keys_st = st.lists(st.sampled_from(KEYS), unique=True, max_size=3).map(lambda ks: ks or None)
sys_flags = st.sampled_from([0, 0, 0, PREPARED, 0x08, ROLLBACK])


def index_hash(topic, key):
    """§5.2 keyHash: abs(hashCode), Integer.MIN_VALUE -> 0."""
    h = java_hash(topic + "#" + key)
    return 0 if h == -(1 << 31) else abs(h)


class Rec:
    """One stored record as the model knows it."""

    __slots__ = (
        "topic",
        "queue_id",
        "queue_offset",
        "body",
        "tags",
        "keys",
        "sys_flag",
        "commitlog_offset",
        "msg_id",
        "unique_key",
    )

    def __init__(self, topic, body, tags, keys, sys_flag, result):
        self.topic, self.body, self.tags, self.sys_flag = topic, bytes(body), tags, sys_flag
        self.keys = keys
        self.queue_id, self.queue_offset = result.queue_id, result.queue_offset
        self.commitlog_offset, self.msg_id = result.commitlog_offset, result.msg_id
        self.unique_key = result.unique_key

    @property
    def consumable(self):
        return self.sys_flag & TX_MASK not in (PREPARED, ROLLBACK)

    @property
    def indexed(self):
        return self.sys_flag & TX_MASK != ROLLBACK

    def index_keys(self):
        return [self.unique_key] + list(self.keys or [])

    def __repr__(self):
        return f"Rec({self.topic}-{self.queue_id}@{self.queue_offset} clog={self.commitlog_offset})"


def check_same(m, rec):
    assert (m.topic, m.body, m.tags, m.commitlog_offset, m.msg_id, m.unique_key) == (
        rec.topic,
        rec.body,
        rec.tags,
        rec.commitlog_offset,
        rec.msg_id,
        rec.unique_key,
    ), (m, rec)
    assert m.keys == (" ".join(rec.keys) if rec.keys else None)
    assert m.sys_flag & TX_MASK == rec.sys_flag & TX_MASK
    if rec.consumable:
        assert (m.queue_id, m.queue_offset) == (rec.queue_id, rec.queue_offset)


def tag_set(expression):
    if expression in (None, "", "*"):
        return None
    return {t.strip() for t in expression.split("||") if t.strip()}


class StoreMachine(RuleBasedStateMachine):
    IMPL = None

    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="rocketstore-model-")
        self.path = os.path.join(self.dir, "store")
        self.store = MessageStore(self.path, implementation=self.IMPL, **OPTIONS)
        self.records = []
        self.queues = {}  # (topic, queue_id) -> [Rec] in queue order
        self.offsets = {}  # (group, topic, queue_id) -> committed offset

    def teardown(self):
        try:
            self.store.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- model bookkeeping --------------------------------------------------------------------

    def _stored(self, topic, body, tags, keys, sys_flag, result):
        assert result.ok, result
        rec = Rec(topic, body, tags, keys, sys_flag, result)
        if rec.consumable:
            queue = self.queues.setdefault((topic, rec.queue_id), [])
            assert rec.queue_offset == len(queue), (rec, len(queue))
            queue.append(rec)
        self.records.append(rec)

    # -- puts ---------------------------------------------------------------------------------

    @rule(topic=topics, qid=queue_ids, body=bodies, tags=tags_st, keys=keys_st)
    def put(self, topic, qid, body, tags, keys):
        r = self.store.put(topic, body, tags=tags, keys=keys, queue_id=qid)
        self._stored(topic, body, tags, keys, 0, r)

    @rule(topic=topics, qid=queue_ids, batch=st.lists(bodies, min_size=1, max_size=5), tags=tags_st)
    def put_batch(self, topic, qid, batch, tags):
        b = self.store.put_batch(topic, batch, tags=tags, queue_id=qid)
        assert len(b) == len(batch)
        for k, body in enumerate(batch):
            self._stored(topic, body, tags, None, 0, b[k])

    @rule(
        items=st.lists(
            st.tuples(topics, queue_ids, bodies, tags_st, keys_st, sys_flags), min_size=1, max_size=4
        )
    )
    def put_messages(self, items):
        msgs = [
            Message(t, body, tags=tags, keys=keys, queue_id=q, sys_flag=f)
            for t, q, body, tags, keys, f in items
        ]
        results = self.store.put_messages(msgs)
        for (t, _q, body, tags, keys, f), r in zip(items, results):
            self._stored(t, body, tags, keys, f, r)

    @rule(topic=topics, qid=queue_ids, body=bodies, keys=keys_st, flag=sys_flags)
    def put_message_object(self, topic, qid, body, keys, flag):
        r = self.store.put(Message(topic, body, tags="TagA", keys=keys, queue_id=qid, sys_flag=flag))
        self._stored(topic, body, "TagA", keys, flag, r)

    # -- queries ------------------------------------------------------------------------------

    @rule(
        group=st.sampled_from(GROUPS),
        topic=topics,
        qid=st.integers(0, 2),
        where=st.one_of(st.none(), st.integers(0, 12)),
        max_msgs=st.integers(1, 8),
        expression=st.sampled_from(EXPRESSIONS),
    )
    def get_message(self, group, topic, qid, where, max_msgs, expression):
        queue = self.queues.get((topic, qid), [])
        r = self.store.get_message(group, topic, qid, offset=where, max_msgs=max_msgs, tags=expression)
        if not queue:
            assert r.status in (S.NO_MATCHED_LOGIC_QUEUE, S.NO_MESSAGE_IN_QUEUE), r
            assert r.next_begin_offset == 0 and r.messages == []
            return
        hi = len(queue)
        offset = where if where is not None else self.offsets.get((group, topic, qid), 0)
        assert (r.min_offset, r.max_offset) == (0, hi)
        if offset == hi:
            assert r.status is S.OFFSET_OVERFLOW_ONE and r.next_begin_offset == hi, r
            return
        if offset > hi:
            assert r.status is S.OFFSET_OVERFLOW_BADLY and r.next_begin_offset == 0, r
            return
        wanted = tag_set(expression)
        nxt = r.next_begin_offset
        assert offset < nxt <= hi, (offset, r)
        expected = [rec for rec in queue[offset:nxt] if wanted is None or rec.tags in wanted]
        assert len(r.messages) == len(expected) <= max_msgs, (r, expected)
        for m, rec in zip(r.messages, expected):
            check_same(m, rec)
        assert list(r.queue_offsets) == [rec.queue_offset for rec in expected]
        if len(expected) == max_msgs:
            assert nxt == expected[-1].queue_offset + 1
        else:  # the scan ran to the queue's end or stopped at a ConsumeQueue file end
            assert nxt == hi or nxt % CQ_UNITS == 0, (offset, nxt, hi)
        assert r.status is (S.FOUND if expected else S.NO_MATCHED_MESSAGE)

    @rule(topic=topics, key=st.sampled_from(KEYS))
    def query_by_key(self, topic, key):
        found = self.store.query_by_key(topic, key, max_num=64)
        expected = [
            rec for rec in self.records if rec.topic == topic and rec.indexed and key in (rec.keys or [])
        ]
        offsets = [m.commitlog_offset for m in found]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), offsets
        by_offset = {rec.commitlog_offset: rec for rec in expected}
        for m in found:
            assert m.commitlog_offset in by_offset, (m, key)
            check_same(m, by_offset[m.commitlog_offset])
        target = index_hash(topic, key)
        same_hash = sum(
            1
            for rec in self.records
            if rec.indexed
            for k in rec.index_keys()
            if index_hash(rec.topic, k) == target
        )
        if same_hash <= 64:  # an index walk of 64 hash hits sees every candidate
            assert offsets == [rec.commitlog_offset for rec in expected], (key, expected)

    @precondition(lambda self: self.records)
    @rule(pick=st.integers(0, 10**6), other_topic=st.booleans())
    def query_by_unique_key(self, pick, other_topic):
        rec = self.records[pick % len(self.records)]
        topic = rec.topic
        if other_topic:
            topic = next(t for t in TOPICS if t != rec.topic)
        if rec.indexed and topic == rec.topic:
            check_same(self.store.query_by_unique_key(topic, rec.unique_key), rec)
        else:
            with pytest.raises(MessageNotFoundError):
                self.store.query_by_unique_key(topic, rec.unique_key)

    @rule(topic=topics, qid=st.integers(0, 2), q=st.integers(0, 20))
    def get_by_queue_offset(self, topic, qid, q):
        queue = self.queues.get((topic, qid), [])
        if q < len(queue):
            check_same(self.store.get_by_queue_offset(topic, qid, q), queue[q])
        else:
            with pytest.raises(MessageNotFoundError):
                self.store.get_by_queue_offset(topic, qid, q)

    @precondition(lambda self: self.records)
    @rule(pick=st.integers(0, 10**6))
    def get_by_msg_id(self, pick):
        rec = self.records[pick % len(self.records)]
        check_same(self.store.get_by_msg_id(rec.msg_id), rec)

    # -- consumer offsets and lifetime --------------------------------------------------------

    @rule(group=st.sampled_from(GROUPS), topic=topics, qid=st.integers(0, 2), delta=st.integers(-3, 2))
    def commit_offset(self, group, topic, qid, delta):
        offset = max(0, len(self.queues.get((topic, qid), [])) + delta)
        self.store.commit_offset(group, topic, qid, offset)
        self.offsets[(group, topic, qid)] = offset

    @rule(group=st.sampled_from(GROUPS), topic=topics, qid=st.integers(0, 2))
    def committed_offset(self, group, topic, qid):
        assert self.store.committed_offset(group, topic, qid) == self.offsets.get((group, topic, qid), -1)

    @rule()
    def reopen(self):
        self.store.close()
        self.store = MessageStore(self.path, implementation=self.IMPL, **OPTIONS)

    @invariant()
    def queue_bounds(self):
        for (topic, qid), queue in self.queues.items():
            assert self.store.min_queue_offset(topic, qid) == 0
            assert self.store.max_queue_offset(topic, qid) == len(queue)


SETTINGS = settings(
    max_examples=30,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_store_agrees_with_the_model(impl):
    machine = type(f"StoreMachine_{impl.name}", (StoreMachine,), {"IMPL": impl.name})
    run_state_machine_as_test(machine, settings=SETTINGS)
