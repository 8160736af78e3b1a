"""Bad input, table-driven, on both twins: every call raises the documented class (from
``rocketstore.errors``, or ``TypeError`` / ``ValueError`` for arguments of the wrong type or
value that are not message content), and no byte of the store changes."""

import hashlib
import math
import os

import numpy as np
import pytest

from rocketstore import Message, MessageStore
from rocketstore.errors import InvalidMessageError, InvalidQueueIdError, InvalidTopicError, RocketStoreError

TOPIC = "T"
QUEUES = 4
HUGE = [2**31, 2**63, 2**64, -(2**31) - 1, -(2**63) - 1]
NON_INTS = [1.5, 1.0, math.inf, math.nan, True, False, "1", b"1", [1], np.float64(1.0)]
STRIDED = memoryview(bytes(range(20)))[::2]

# (label, call(store), expected exception class)
CASES = []


def case(label, expected, call):
    CASES.append(pytest.param(call, expected, id=label))


for v in HUGE + [-2, QUEUES]:
    case(f"put-queue_id-{v}", InvalidQueueIdError, lambda s, v=v: s.put(TOPIC, b"x", queue_id=v))
    case(
        f"put-tags-queue_id-{v}", InvalidQueueIdError, lambda s, v=v: s.put(TOPIC, b"x", tags="a", queue_id=v)
    )
    case(
        f"put_pipelined-queue_id-{v}",
        InvalidQueueIdError,
        lambda s, v=v: s.put_pipelined(TOPIC, b"x", queue_id=v),
    )
    case(
        f"put_batch-queue_id-{v}", InvalidQueueIdError, lambda s, v=v: s.put_batch(TOPIC, [b"x"], queue_id=v)
    )
    case(
        f"put_messages-queue_id-{v}",
        InvalidQueueIdError,
        lambda s, v=v: s.put_messages([Message(TOPIC, b"x", queue_id=v)]),
    )
    case(
        f"put-Message-queue_id-{v}",
        InvalidQueueIdError,
        lambda s, v=v: s.put(Message(TOPIC, b"x", queue_id=v)),
    )
for v in NON_INTS:
    case(f"put-queue_id-{v!r}", InvalidQueueIdError, lambda s, v=v: s.put(TOPIC, b"x", queue_id=v))
    case(
        f"put_batch-queue_id-{v!r}",
        InvalidQueueIdError,
        lambda s, v=v: s.put_batch(TOPIC, [b"x"], queue_id=v),
    )
    case(
        f"put_messages-queue_id-{v!r}",
        InvalidQueueIdError,
        lambda s, v=v: s.put_messages([Message(TOPIC, b"x", queue_id=v)]),
    )
for v in HUGE[:3] + HUGE[3:4] + NON_INTS + [None]:
    case(f"put-flag-{v!r}", InvalidMessageError, lambda s, v=v: s.put(TOPIC, b"x", flag=v))
    case(f"put-tags-flag-{v!r}", InvalidMessageError, lambda s, v=v: s.put(TOPIC, b"x", tags="a", flag=v))
    case(f"put_batch-flag-{v!r}", InvalidMessageError, lambda s, v=v: s.put_batch(TOPIC, [b"x"], flag=v))
    case(
        f"put_pipelined-flag-{v!r}", InvalidMessageError, lambda s, v=v: s.put_pipelined(TOPIC, b"x", flag=v)
    )
    case(f"Message-flag-{v!r}", InvalidMessageError, lambda s, v=v: s.put(Message(TOPIC, b"x", flag=v)))
    case(
        f"Message-reconsume-{v!r}",
        InvalidMessageError,
        lambda s, v=v: s.put(Message(TOPIC, b"x", reconsume_times=v)),
    )
    case(
        f"Message-sys_flag-{v!r}", InvalidMessageError, lambda s, v=v: s.put(Message(TOPIC, b"x", sys_flag=v))
    )
for v in HUGE[1:3] + NON_INTS + [None]:
    case(
        f"Message-born-{v!r}",
        InvalidMessageError,
        lambda s, v=v: s.put(Message(TOPIC, b"x", born_timestamp=v)),
    )
for v in [0, 1025, True, 1.0, 2**64, "2"]:
    case(f"create_topic-queues-{v!r}", InvalidMessageError, lambda s, v=v: s.create_topic(TOPIC, v))
for v in [None, 1, "", "a b", "x" * 128, b"T"]:
    case(f"put-topic-{v!r}", InvalidTopicError, lambda s, v=v: s.put(v, b"x"))
    case(f"put-tags-topic-{v!r}", InvalidTopicError, lambda s, v=v: s.put(v, b"x", tags="a"))
    case(f"put_batch-topic-{v!r}", InvalidTopicError, lambda s, v=v: s.put_batch(v, [b"x"]))
    case(f"put_batch-topic=-{v!r}", InvalidTopicError, lambda s, v=v: s.put_batch(topic=v, bodies=[b"x"]))
for v in [None, 1, 1.5, "text", [1, 2]]:
    case(
        f"put-body-{v!r}",
        TypeError,
        lambda s, v=v: s.put(TOPIC, v) if v is not None else s.put(TOPIC, None, tags="a"),
    )
    case(f"put_batch-bodies-item-{v!r}", TypeError, lambda s, v=v: s.put_batch(TOPIC, [b"ok", v]))
    case(f"put_messages-body-{v!r}", TypeError, lambda s, v=v: s.put_messages([Message(TOPIC, v)]))
for v in [1, ["a", 1], {"k": "v"}]:
    case(f"put-keys-{v!r}", InvalidMessageError, lambda s, v=v: s.put(TOPIC, b"x", keys=v))
for v in [1, "a", [("a", "b")]]:
    case(f"put-properties-{v!r}", InvalidMessageError, lambda s, v=v: s.put(TOPIC, b"x", properties=v))
for v in [{1: "a"}, {"a": 1}, {"a": b"b"}, {"": "b"}, {"a\x01": "b"}]:
    case(f"put-properties-{v!r}", InvalidMessageError, lambda s, v=v: s.put(TOPIC, b"x", properties=v))
    case(
        f"put_batch-properties-{v!r}",
        InvalidMessageError,
        lambda s, v=v: s.put_batch(TOPIC, [b"x"], properties=v),
    )
for v in [1, True, 1.5]:
    case(f"put-tags-{v!r}", InvalidMessageError, lambda s, v=v: s.put(TOPIC, b"x", tags=v))
for v in [[2**63, 4], [1.5, 2.5], ["a"], [[2, 2]], [-1, 5], [3, 3], math.inf]:
    case(
        f"put_batch-lengths-{v!r}", InvalidMessageError, lambda s, v=v: s.put_batch(TOPIC, b"xxxx", lengths=v)
    )
for v in [-1.0, math.nan]:
    case(f"flush-{v!r}", ValueError, lambda s, v=v: s.flush(v))
for v in ["1", b"1", True, [1]]:
    case(f"flush-{v!r}", TypeError, lambda s, v=v: s.flush(v))
for v in [1, "m", None]:
    case(f"put_messages-item-{v!r}", TypeError, lambda s, v=v: s.put_messages([Message(TOPIC, b"ok"), v]))
for v in HUGE[1:3] + [-1, 1.5, True, "0"]:
    case(f"read-{v!r}", RocketStoreError, lambda s, v=v: s.read(v))  # MessageNotFoundError: none there
    case(
        f"get_by_queue_offset-offset-{v!r}",
        RocketStoreError,
        lambda s, v=v: s.get_by_queue_offset(TOPIC, 0, v),
    )
    case(
        f"get_by_queue_offset-queue-{v!r}",
        RocketStoreError,
        lambda s, v=v: s.get_by_queue_offset(TOPIC, v, 0),
    )
    if v != -1:  # a pull from -1, a queue -1 or a time -1 answers "nothing there", not an error
        case(f"get_message-offset-{v!r}", RocketStoreError, lambda s, v=v: s.get_message("g", TOPIC, 0, v))
        case(f"get_message-queue-{v!r}", RocketStoreError, lambda s, v=v: s.get_message("g", TOPIC, v, 0))
        case(
            f"queue_offset_of_time-{v!r}",
            RocketStoreError,
            lambda s, v=v: s.queue_offset_of_time(TOPIC, 0, v),
        )
    case(f"query_by_key-begin-{v!r}", RocketStoreError, lambda s, v=v: s.query_by_key(TOPIC, "k", begin=v))
    case(f"query_by_key-end-{v!r}", RocketStoreError, lambda s, v=v: s.query_by_key(TOPIC, "k", end=v))
for v in [0, -1, 1.5, True, 2**64]:
    case(
        f"get_message-max_msgs-{v!r}",
        RocketStoreError,
        lambda s, v=v: s.get_message("g", TOPIC, 0, 0, max_msgs=v),
    )
    case(
        f"query_by_key-max_num-{v!r}", RocketStoreError, lambda s, v=v: s.query_by_key(TOPIC, "k", max_num=v)
    )
for v in [None, 1, ""]:
    case(f"query_by_key-key-{v!r}", (TypeError, RocketStoreError), lambda s, v=v: s.query_by_key(TOPIC, v))


def _digest(path) -> dict:
    """{file: sha256} of the store, but the lock, the abort marker and the checkpoints (which
    background threads rewrite with new timestamps)."""
    out = {}
    for root, _dirs, names in os.walk(path):
        for name in names:
            if name in ("lock", "abort", "checkpoint", "indexResume") or name.endswith(".tmp"):
                continue
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = hashlib.sha256(f.read()).hexdigest()
    return out


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """One store per twin, shared by the cases (none of them may change it)."""
    from rocketstore import _impl

    opened = {}
    for name in ("c", "py"):
        if name == "c" and _impl.COMPILED is None:
            continue
        path = tmp_path_factory.mktemp(f"bad-input-{name}")
        store = MessageStore(
            path,
            implementation=name,
            commitlog_file_size=1 << 20,
            consume_queue_units=64,
            index_slots=32,
            index_count=128,
        )
        store.create_topic(TOPIC, QUEUES)
        store.put(TOPIC, b"seed", keys="k", queue_id=0)
        opened[name] = (path, store)
    yield opened
    for _path, store in opened.values():
        store.close()


@pytest.mark.parametrize("call, expected", CASES)
def test_bad_input_raises_its_documented_error_and_changes_nothing(impl, stores, call, expected):
    path, store = stores[impl.name]
    store.queues()  # dispatch caught up: nothing in flight that could change a file
    store.flush()
    before, end, offsets = _digest(path), store.max_offset, store.queue_offsets()
    with pytest.raises(expected) as info:
        result = call(store)
        if hasattr(result, "add_done_callback"):
            result.result()
    err = info.value
    assert isinstance(err, (RocketStoreError, TypeError, ValueError)), repr(err)
    assert not isinstance(err, (OverflowError, BufferError)), repr(err)
    assert type(err).__module__ in ("rocketstore.errors", "builtins"), repr(err)
    store.queues()
    store.flush()
    assert store.max_offset == end and store.queue_offsets() == offsets
    assert _digest(path) == before
    assert store.topics == {TOPIC: QUEUES}


def test_a_strided_body_is_stored_as_its_bytes(impl, tmp_path):
    """A non-contiguous buffer (a strided memoryview, a numpy slice) is copied, not refused."""
    with MessageStore(tmp_path / "s", implementation=impl.name, commitlog_file_size=1 << 20) as store:
        expect = bytes(STRIDED)
        column = np.arange(12, dtype=np.uint8).reshape(3, 4)[:, 1]
        results = [
            store.put(TOPIC, STRIDED),
            store.put(TOPIC, STRIDED, tags="a"),
            store.put_pipelined(TOPIC, STRIDED).result(),
            *store.put_batch(TOPIC, [STRIDED, column]),
            store.put_messages([Message(TOPIC, STRIDED)])[0],
        ]
        bodies = [bytes(store.read(r.commitlog_offset).body) for r in results]
        assert bodies == [expect] * 4 + [column.tobytes(), expect]
        whole = store.put_batch(TOPIC, STRIDED, lengths=[4, 6])
        assert [bytes(store.read(int(o)).body) for o in whole.commitlog_offsets] == [expect[:4], expect[4:]]


def test_an_int_like_but_not_int_queue_id_is_refused_not_truncated(impl, tmp_path):
    with MessageStore(tmp_path / "s", implementation=impl.name, commitlog_file_size=1 << 20) as store:
        store.create_topic(TOPIC, QUEUES)
        with pytest.raises(InvalidQueueIdError):
            store.put(TOPIC, b"x", queue_id=1.5)
        assert store.max_offset == 0
        r = store.put(TOPIC, b"x", queue_id=np.int32(2))  # numpy ints are ints
        assert r.queue_id == 2
        assert store.flush(math.inf) and store.flush(0.5) and store.flush(0)


@pytest.mark.parametrize("sys_flag", [0x800, -1, 0x400 | 0x300, 1 << 30])
def test_a_sys_flag_rocketmq_does_not_define_is_refused(tmp_path, impl, sys_flag):
    """verify() reports such a record (unknown bits, compression type 4..7): refuse it instead."""
    from rocketstore import Message, MessageStore
    from rocketstore.errors import InvalidMessageError

    with MessageStore(str(tmp_path / "s"), implementation=impl.name) as store:
        with pytest.raises(InvalidMessageError):
            store.put(Message("T", b"x", sys_flag=sys_flag))
        assert store.max_offset == 0
        store.put(Message("T", b"x", sys_flag=0x1))  # compressed: a bit RocketMQ defines


def test_a_topic_that_is_not_a_str_is_the_same_error_in_both_twins(tmp_path):
    """put_batch(topic=None) raised TypeError in the compiled twin and InvalidTopicError in the
    pure one; put(None, ...) a TypeError with a different message in each."""
    from rocketstore import _impl

    if _impl.COMPILED is None:
        pytest.skip("the compiled twin is not built")
    calls = {
        "put": lambda s: s.put(None, b"x"),
        "put_tags": lambda s: s.put(None, b"x", tags="a"),
        "put_batch": lambda s: s.put_batch(None, [b"x"]),
        "put_batch_keyword": lambda s: s.put_batch(topic=None, bodies=[b"x"]),
        "put_batch_int": lambda s: s.put_batch(7, [b"x"]),
    }
    seen = {}
    for impl in ("c", "py"):
        with MessageStore(tmp_path / impl, implementation=impl) as store:
            for name, call in calls.items():
                with pytest.raises(InvalidTopicError) as info:
                    call(store)
                seen[impl, name] = str(info.value)
                assert "topic" in seen[impl, name]
            assert store.max_offset == 0
    assert {name: seen["c", name] for name in calls} == {name: seen["py", name] for name in calls}
