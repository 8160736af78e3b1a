"""Keyed puts without Python per message: ``put(topic, body, tags=, keys=, properties=)`` and
``put_messages`` of plain :class:`Message` objects encode a properties dict, TAGS and KEYS in the
core (``put_keyed``, ``put_plain_messages``). They store the records the general path stores,
byte for byte, and hand every other shape to it, so bad input raises the same typed error and
writes nothing."""

from types import MappingProxyType

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore import Message, MessageStore, _impl
from rocketstore.errors import InvalidMessageError, InvalidQueueIdError, PropertiesTooLargeError
from rocketstore.processes.puts import _SCHEDULING

TOPIC = "KeyedTopic"
#: A mapping that is not a dict: the general path encodes it (in Python), the reference here.
GENERAL = MappingProxyType({})


@pytest.fixture
def store(tmp_path, impl):
    s = MessageStore(tmp_path / "store", implementation=impl.name, dispatch_interval_ms=0)
    s.create_topic(TOPIC, 2)
    yield s
    s.close()


def stored(store, result):
    """What the store holds of a put: properties in file order (but the generated UNIQ_KEY),
    the record's size, body, topic and flag."""
    m = store.read(result.commitlog_offset)
    props = [(k, v) for k, v in m.properties.items() if k != "UNIQ_KEY"]
    return props, m.size, bytes(m.body), m.topic, m.flag


PLAIN_SHAPES = [
    dict(keys="order-1"),
    dict(tags="TagA"),
    dict(tags="TagA", keys="k1 k2"),
    dict(keys=["k1", "k2", "k3"]),
    dict(keys=("only",)),
    dict(tags="é", keys=["ключ", "鍵"]),
    dict(tags="t" * 700, keys="k" * 900),  # longer than the compiled twin's stack buffer
]


@pytest.mark.parametrize("shape", PLAIN_SHAPES, ids=lambda d: ",".join(sorted(d)))
def test_keyed_put_stores_what_the_general_path_stores(store, shape):
    fast = store.put(TOPIC, b"body", queue_id=1, flag=7, **shape)
    general = store.put(TOPIC, b"body", queue_id=1, flag=7, properties=GENERAL, **shape)
    assert stored(store, fast) == stored(store, general)
    assert fast.queue_offset + 1 == general.queue_offset
    assert store.read(fast.commitlog_offset).unique_key == fast.unique_key


@pytest.mark.parametrize("shape", PLAIN_SHAPES, ids=lambda d: ",".join(sorted(d)))
def test_keyed_batch_stores_what_the_general_path_stores(store, shape):
    bodies = [b"a", b"bb", b"ccc"]
    fast = store.put_messages([Message(TOPIC, b, **shape) for b in bodies])
    # one message whose properties are not a dict sends the whole batch down the general path
    general = store.put_messages(
        [Message(TOPIC, b, **shape) for b in bodies] + [Message(TOPIC, b"x", properties=GENERAL)]
    )
    assert [stored(store, r) for r in fast] == [stored(store, r) for r in general[:3]]
    for r in fast:
        assert store.read(r.commitlog_offset).unique_key == r.unique_key


def test_keyed_batch_keeps_each_message_s_fields(store):
    messages = [
        Message(TOPIC, b"one", keys="a", queue_id=0, flag=3, born_timestamp=1_700_000_000_000),
        Message(TOPIC, b"two", tags="T", queue_id=1),
        Message(TOPIC, b"three"),
    ]
    results = store.put_messages(messages)
    for m, r in zip(messages, results):
        got = store.read(r.commitlog_offset)
        assert (got.body, got.tags, got.keys, got.flag) == (m.body, m.tags, m.keys, m.flag)
        if m.queue_id >= 0:
            assert got.queue_id == m.queue_id
    assert store.read(results[0].commitlog_offset).born_timestamp == 1_700_000_000_000
    store._opened.dispatcher.catch_up()
    assert [bytes(m.body) for m in store.query_by_key(TOPIC, "a")] == [b"one"]


BAD_SHAPES = [
    (dict(keys=["k", 3]), InvalidMessageError),
    (dict(keys=[]), InvalidMessageError),
    (dict(keys=""), InvalidMessageError),
    (dict(tags=""), InvalidMessageError),
    (dict(keys="a\x01b"), InvalidMessageError),
    (dict(tags="a\x02b"), InvalidMessageError),
    (dict(keys="\ud800"), InvalidMessageError),
    (dict(keys={"k"}), InvalidMessageError),
    (dict(tags=5), InvalidMessageError),
    (dict(keys="k" * 40_000), PropertiesTooLargeError),
]


@pytest.mark.parametrize("shape,error", BAD_SHAPES, ids=lambda x: repr(x)[:40])
def test_bad_keys_raise_the_general_path_s_error_and_write_nothing(store, shape, error):
    before = store.max_offset
    with pytest.raises(error) as one:
        store.put(TOPIC, b"body", **shape)
    with pytest.raises(error) as general:
        store.put(TOPIC, b"body", properties=GENERAL, **shape)
    assert str(one.value) == str(general.value)
    with pytest.raises(error) as batch:
        store.put_messages([Message(TOPIC, b"fine", keys="k"), Message(TOPIC, b"body", **shape)])
    assert str(batch.value) == str(general.value)
    assert store.max_offset == before


def test_a_bad_queue_id_in_a_plain_batch_writes_nothing(store):
    before = store.max_offset
    with pytest.raises(InvalidQueueIdError):
        store.put_messages([Message(TOPIC, b"a", keys="k"), Message(TOPIC, b"b", keys="k", queue_id=5)])
    assert store.max_offset == before


def test_a_message_with_an_unset_field_is_refused_as_before(store):
    m = Message(TOPIC, b"a", keys="k")
    del m.keys
    before = store.max_offset
    with pytest.raises(AttributeError):
        store.put_messages([Message(TOPIC, b"b", keys="k"), m])
    assert store.max_offset == before


NOT_PLAIN = [
    Message(TOPIC, b"x", properties=MappingProxyType({"a": "b"})),
    Message(TOPIC, b"x", properties={"WAIT": "false"}),
    Message(TOPIC, bytearray(b"x")),
    Message(TOPIC, b"x", sys_flag=0x4),
    Message(TOPIC, b"x", reconsume_times=1),
    Message(TOPIC, b"x", queue_id=np.int32(1)),
    Message("UnseenTopic", b"x"),
    Message(TOPIC, b"x", keys=["a", ""]),
]


@pytest.mark.parametrize("odd", NOT_PLAIN, ids=repr)
def test_core_hands_a_batch_that_is_not_plain_back_untouched(store, odd):
    core = store._opened.core
    before = core.wrote_offset
    assert core.put_plain_messages([Message(TOPIC, b"fine", keys="k"), odd], {TOPIC}, 0) is None
    assert core.put_plain_messages([], {TOPIC}, 0) is None
    assert core.wrote_offset == before
    # and the store stores it through the general path
    results = store.put_messages([Message(TOPIC, b"fine", keys="k"), odd])
    assert len(results) == 2


def test_core_hands_keys_that_are_not_plain_back_untouched(store):
    core = store._opened.core
    before = core.wrote_offset
    for tags, keys in [(None, ["a", 1]), ("", None), (None, "\ud800"), ("x", "a\x02")]:
        assert core.put_keyed(TOPIC, b"x", tags, keys, -1, 0, 0) is None
    assert core.wrote_offset == before


def test_a_subclass_of_message_takes_the_general_path(store):
    class Tagged(Message):
        __slots__ = ("note",)

    m = Tagged(TOPIC, b"sub", keys="k")
    r = store.put_messages([m])[0]
    assert store.read(r.commitlog_offset).keys == "k"


_text = st.text(st.characters(blacklist_categories=("Cs",)), min_size=0, max_size=12) | st.sampled_from(
    ["", "a\x01", "\x02", "\ud800", "k k"]
)
_keys = st.none() | _text | st.lists(_text, max_size=4) | st.tuples(_text, _text) | st.integers()


@settings(max_examples=300, deadline=None)
@given(tags=st.none() | _text | st.integers(), keys=_keys)
def test_twins_encode_keyed_properties_alike_and_as_put_properties(tags, keys):
    pure = _impl.PURE.store.keyed_properties(tags, keys)
    if _impl.COMPILED is not None:
        assert _impl.COMPILED.store.keyed_properties(tags, keys) == pure
    if pure is not None:
        assert _impl.PURE.codec.put_properties(tags, keys, None) == (pure, None, -1)


_names = _text | st.sampled_from(sorted(_impl.PURE.store.SPECIAL_PROPERTIES)) | st.integers()
_properties = st.none() | st.dictionaries(_names, _text | st.integers(), max_size=4) | st.just(GENERAL)


@settings(max_examples=500, deadline=None)
@given(tags=st.none() | _text, keys=_keys, properties=_properties)
def test_twins_encode_a_properties_dict_alike_and_as_put_properties(tags, keys, properties):
    pure = _impl.PURE.store.keyed_properties(tags, keys, properties)
    if _impl.COMPILED is not None:
        assert _impl.COMPILED.store.keyed_properties(tags, keys, properties) == pure
    if pure is not None:
        assert type(properties) is not MappingProxyType
        assert not _impl.PURE.store.SPECIAL_PROPERTIES.intersection(properties or ())
        assert _impl.PURE.codec.put_properties(tags, keys, properties) == (pure, None, -1)


def test_the_special_property_names_are_the_ones_the_general_path_acts_on():
    special = {"WAIT", "UNIQ_KEY", "TAGS", "KEYS", *_SCHEDULING}
    assert special == _impl.PURE.store.SPECIAL_PROPERTIES
    if _impl.COMPILED is not None:
        assert special == _impl.COMPILED.store.SPECIAL_PROPERTIES


PROPERTY_SHAPES = [
    dict(properties={"region": "eu"}),
    dict(properties={"region": "eu", "tenant": "t-1"}, keys="order-1"),
    dict(properties={"é": "ü", "z": "a"}, tags="TagA", keys=["k1", "k2"]),
    dict(properties={}, tags="TagA"),
    dict(properties={}),
    dict(properties={"p" * 300: "v" * 3000}, keys="k"),  # longer than the compiled twin's stack buffer
]


@pytest.mark.parametrize("shape", PROPERTY_SHAPES, ids=repr)
def test_a_put_with_a_properties_dict_stores_what_the_general_path_stores(store, shape):
    core = store._opened.core
    plain = core.put_keyed(TOPIC, b"body", shape.get("tags"), shape.get("keys"), 1, 7, 0, shape["properties"])
    assert plain is not None  # the core took it: no Python per message
    fast = store.put(TOPIC, b"body", queue_id=1, flag=7, **shape)
    general = store.put(
        TOPIC, b"body", queue_id=1, flag=7, **{**shape, "properties": MappingProxyType(shape["properties"])}
    )
    assert stored(store, plain) == stored(store, fast) == stored(store, general)
    got = store.read(fast.commitlog_offset)
    assert {k: got.properties[k] for k in shape["properties"]} == shape["properties"]
    assert got.unique_key == fast.unique_key
    batch = store.put_messages([Message(TOPIC, b"body", queue_id=1, flag=7, **shape) for _ in range(3)])
    # (each core's own Message type; the compiled core reads the pure one's too)
    assert (
        core.put_plain_messages([store._impl.store.Message(TOPIC, b"body", **shape)], {TOPIC}, 0) is not None
    )
    assert [stored(store, r) for r in batch] == [stored(store, general)] * 3


def test_special_properties_keep_their_meaning(store):
    core = store._opened.core
    before = core.wrote_offset
    for name in _impl.PURE.store.SPECIAL_PROPERTIES:
        assert core.put_keyed(TOPIC, b"x", None, None, -1, 0, 0, {"a": "b", name: "1"}) is None
        assert core.put_plain_messages([Message(TOPIC, b"x", properties={name: "1"})], {TOPIC}, 0) is None
    assert core.wrote_offset == before
    r = store.put(TOPIC, b"own", properties={"UNIQ_KEY": "my-own-unique-key"})
    assert r.unique_key == store.read(r.commitlog_offset).unique_key == "my-own-unique-key"
    r = store.put(TOPIC, b"tags", tags="given", properties={"a": "1", "TAGS": "replaced", "b": "2"})
    assert list(store.read(r.commitlog_offset).properties)[:3] == ["a", "TAGS", "b"]
    assert store.read(r.commitlog_offset).tags == "given"
    r = store.put(TOPIC, b"later", properties={"DELAY": "1"})
    assert store.read(r.commitlog_offset).topic == "SCHEDULE_TOPIC_XXXX"
    [r] = store.put_messages([Message(TOPIC, b"later", properties={"DELAY": "1"})])
    assert store.read(r.commitlog_offset).topic == "SCHEDULE_TOPIC_XXXX"


BAD_PROPERTIES = [
    ({"a": ""}, InvalidMessageError),
    ({"a": 1}, InvalidMessageError),
    ({1: "a"}, InvalidMessageError),
    ({"": "a"}, InvalidMessageError),
    ({"a\x01": "b"}, InvalidMessageError),
    ({"a": "b\x02"}, InvalidMessageError),
    ({"a": "\ud800"}, InvalidMessageError),
    ({"a": "x" * 40_000}, PropertiesTooLargeError),
    ({"a": "x" * 32_000, "b": "y" * 760}, PropertiesTooLargeError),  # over with its UNIQ_KEY
]


@pytest.mark.parametrize("properties,error", BAD_PROPERTIES, ids=lambda x: repr(x)[:40])
def test_bad_properties_raise_the_general_path_s_error_and_write_nothing(store, properties, error):
    before = store.max_offset
    with pytest.raises(error) as one:
        store.put(TOPIC, b"body", keys="k", properties=properties)
    with pytest.raises(error) as general:
        store.put(TOPIC, b"body", keys="k", properties=MappingProxyType(properties))
    assert str(one.value) == str(general.value)
    with pytest.raises(error) as batch:
        store.put_messages(
            [
                Message(TOPIC, b"fine", properties={"p": "v"}),
                Message(TOPIC, b"body", keys="k", properties=properties),
            ]
        )
    assert str(batch.value) == str(general.value)
    assert store.max_offset == before


#: run in a fresh interpreter: rocketstore.Message beside a copy of its module executed alone (no
#: compiled module imported), after every compiled module is imported
PLAIN_MESSAGE_CHECK = r"""
import gc, importlib.util, sys, types
import rocketstore, rocketstore.format._codec, rocketstore.format._crc32, rocketstore.queues._index, rocketstore.log._store
from rocketstore import message

spec = importlib.util.spec_from_file_location("alone", message.__file__)
alone = importlib.util.module_from_spec(spec)
spec.loader.exec_module(alone)
M, A = message.Message, alone.Message
assert type(M) is type(A) is type and rocketstore.Message in (M, rocketstore.log._store.Message)
assert sorted(M.__dict__) == sorted(A.__dict__)
for name, value in M.__dict__.items():
    if isinstance(A.__dict__[name], types.FunctionType):
        assert isinstance(value, types.FunctionType) and value.__code__ == A.__dict__[name].__code__, name


def constructor_frames(cls):
    seen = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename == message.__file__:
            seen.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        m = cls("T", b"x", keys="k")
    finally:
        sys.setprofile(None)
    return m, seen


m, frames = constructor_frames(M)
assert frames == ["__init__"], frames  # the class's own __init__ ran, as Python calls it
assert gc.is_tracked(m) and gc.is_tracked(A("T", b"x"))
print("plain")
"""


@pytest.mark.skipif(_impl.COMPILED is None, reason="compiled modules not built")
def test_importing_the_compiled_modules_leaves_message_a_plain_class():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", PLAIN_MESSAGE_CHECK], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "plain"


FIELDS = (
    "topic",
    "body",
    "tags",
    "keys",
    "properties",
    "flag",
    "queue_id",
    "born_timestamp",
    "reconsume_times",
    "sys_flag",
)
MESSAGE_TYPES = pytest.mark.parametrize("message_type", _impl.MESSAGE_TYPES, ids=lambda t: t.__module__)

MESSAGE_CALLS = [
    (("T", b"b"), {}),
    (("T", b"b", "tag", ["k1", "k2"], {"p": "v"}, 1, 2, 3, 4, 5), {}),
    (("T",), {"body": b"b", "keys": "k", "sys_flag": 8}),
    ((), {"topic": "T", "body": b"b", "born_timestamp": 7, "reconsume_times": 1, "queue_id": 0}),
    ((), {}),
    (("T",), {}),
    (("T", b"b", None, None, None, 0, -1, 0, 0, 0, "extra"), {}),
    (("T", b"b"), {"nope": 1}),
    (("T", b"b"), {"topic": "again"}),
]


@pytest.mark.parametrize("args,kwargs", MESSAGE_CALLS, ids=repr)
def test_both_message_types_build_alike(args, kwargs):
    results = []
    for message_type in _impl.MESSAGE_TYPES:
        try:
            m = message_type(*args, **kwargs)
        except TypeError:
            results.append(TypeError)
        else:
            results.append([getattr(m, n) for n in FIELDS])
    assert all(r == results[0] for r in results), results


def test_both_message_types_have_one_signature():
    import inspect

    signatures = {
        tuple((p.name, p.kind, p.default) for p in inspect.signature(t).parameters.values())
        for t in _impl.MESSAGE_TYPES
    }
    assert len(signatures) == 1
    assert [name for name, _, _ in signatures.pop()] == list(FIELDS)


@MESSAGE_TYPES
def test_message_pickles_copies_and_shows_as_itself(message_type):
    import copy
    import pickle

    m = message_type("T", b"body" * 10, tags="t", keys=["a", "b"], flag=3)
    for back in (pickle.loads(pickle.dumps(m)), copy.copy(m), copy.deepcopy(m)):
        assert type(back) is message_type
        assert [getattr(back, n) for n in FIELDS] == [getattr(m, n) for n in FIELDS]
    assert m != back and m == m  # compared by identity, as a plain class is
    m.keys = "changed"
    assert m.keys == "changed"
    assert repr(m) == (
        "Message(topic='T', body=b'bodybodybodybodybodybodybodybody'..., tags='t', keys='changed')"
    )
    assert isinstance(m, _impl.MESSAGE_TYPES)


@MESSAGE_TYPES
def test_a_deleted_message_field_reads_as_missing_until_set_again(message_type):
    m = message_type("T", b"b", keys="k")
    del m.keys
    with pytest.raises(AttributeError, match="keys"):
        _ = m.keys
    with pytest.raises(AttributeError, match="keys"):
        del m.keys
    m.keys = "again"
    assert m.keys == "again"


@MESSAGE_TYPES
def test_messages_of_either_type_are_stored_alike(store, message_type):
    general = store.put_messages(
        [message_type(TOPIC, b"one", keys="k1"), message_type(TOPIC, b"2", tags="t")]
    )
    mixed = store.put_messages(
        [t(TOPIC, b"one", keys="k1", queue_id=general[0].queue_id) for t in _impl.MESSAGE_TYPES]
    )
    assert stored(store, mixed[0]) == stored(store, general[0]) == stored(store, mixed[-1])
    if store._impl.compiled:  # the compiled core reads both types itself
        both = [t(TOPIC, b"x", keys="k") for t in _impl.MESSAGE_TYPES]
        assert store._opened.core.put_plain_messages(both, {TOPIC}, 0) is not None
    single = store.put(message_type(TOPIC, b"one", keys="k1", queue_id=general[0].queue_id))
    assert stored(store, single) == stored(store, general[0])
    with pytest.raises(TypeError, match="expected a Message"):
        store.put_messages([message_type(TOPIC, b"x"), object()])


@MESSAGE_TYPES
def test_messages_of_a_subclass_or_with_a_field_unset_take_the_general_path(store, message_type):
    class Audited(message_type):
        __slots__ = ("by",)

    sub = Audited(TOPIC, b"sub", keys="k1")
    unset = message_type(TOPIC, b"unset", keys="k2")
    del unset.flag
    assert store._opened.core.put_plain_messages([sub], {TOPIC}, 0) is None
    assert store._opened.core.put_plain_messages([message_type(TOPIC, b"x"), unset], {TOPIC}, 0) is None
    done = store.put_messages([sub])
    assert store.read(done[0].commitlog_offset).body == b"sub"
    with pytest.raises(AttributeError):
        store.put_messages([unset])


@pytest.mark.skipif(_impl.COMPILED is None, reason="compiled modules not built")
def test_the_compiled_general_path_reads_either_message_type_in_one_pass():
    messages = [t(TOPIC, b"x", keys="k") for t in _impl.MESSAGE_TYPES] + [Message("Other", b"y")]
    items, slow = _impl.COMPILED.codec.plain_message_items(messages, {TOPIC}, _impl.MESSAGE_TYPES)
    assert slow == [len(messages) - 1]
    assert items[0] == items[1] == (TOPIC, b"x", b"KEYS\x01k\x02", -1, 0, 0, 0, 0, None)
