"""Empty, None and non-UTF-8 property values are refused, never dropped or mangled.

RocketMQ's properties string cannot carry an empty value: ``string2messageProperties`` (4.9.8)
keeps a piece only when its value is non-empty, so ``TAGS=""`` written to disk reads back as no
TAGS at all, in Java as here. A store a Java broker must read therefore refuses such a value
(``InvalidMessageError``) instead of storing something that reads back different; so does a
``None`` value, which Java's ``putUserProperty`` refuses too. Every put path, both twins, and a
refused call writes nothing.
"""

import pytest

from rocketstore import Message, MessageStore
from rocketstore.errors import InvalidMessageError

SEGMENT = 64 * 1024
T = "TopicEmpty"


@pytest.fixture
def store(tmp_path, impl):
    s = MessageStore(
        tmp_path / "store", implementation=impl.name, commitlog_file_size=SEGMENT, store_host="10.0.0.7"
    )
    s.put(T, b"before", tags="TagA", queue_id=0)
    yield s
    s.close()


def _future(f):
    return f.result() if hasattr(f, "result") else f


BAD = {
    "put tags=''": lambda s: s.put(T, b"x", tags=""),
    "put keys=''": lambda s: s.put(T, b"x", keys=""),
    "put keys=[]": lambda s: s.put(T, b"x", keys=[]),
    "put keys=['']": lambda s: s.put(T, b"x", keys=[""]),
    "put property ''": lambda s: s.put(T, b"x", properties={"p": ""}),
    "put property None": lambda s: s.put(T, b"x", properties={"k": None}),
    "put property None among good ones": lambda s: s.put(T, b"x", properties={"a": "1", "k": None}),
    "put tags='' with a delay": lambda s: s.put(T, b"x", tags="", delay_level=1),
    "put property '' with a delay": lambda s: s.put(T, b"x", properties={"p": ""}, delay_level=2),
    "put Message tags=''": lambda s: s.put(Message(T, b"x", tags="")),
    "put Message keys=''": lambda s: s.put(Message(T, b"x", keys="")),
    "put Message property ''": lambda s: s.put(Message(T, b"x", properties={"p": ""})),
    "put Message property None": lambda s: s.put(Message(T, b"x", properties={"k": None})),
    "put_pipelined tags=''": lambda s: _future(s.put_pipelined(T, b"x", tags="")),
    "put_pipelined property ''": lambda s: _future(s.put_pipelined(T, b"x", properties={"p": ""})),
    "put_pipelined property None": lambda s: _future(s.put_pipelined(T, b"x", properties={"k": None})),
    "put_pipelined Message keys=''": lambda s: _future(s.put_pipelined(Message(T, b"x", keys=""))),
    "put_batch tags=''": lambda s: s.put_batch(T, [b"a", b"b"], tags=""),
    "put_batch property ''": lambda s: s.put_batch(T, [b"a", b"b"], properties={"p": ""}),
    "put_batch property None": lambda s: s.put_batch(T, [b"a", b"b"], properties={"k": None}),
    "put_batch pipelined tags=''": lambda s: _future(s.put_batch(T, [b"a"], tags="", pipelined=True)),
    "put_messages with one tags=''": lambda s: s.put_messages(
        [Message(T, b"ok", tags="TagA"), Message(T, b"x", tags="")]
    ),
    "put_messages with one property None": lambda s: s.put_messages(
        [Message(T, b"ok"), Message(T, b"x", properties={"k": None})]
    ),
    "put_messages with one keys=''": lambda s: s.put_messages([Message(T, b"ok"), Message(T, b"x", keys="")]),
    # not UTF-8 (a lone surrogate): Java would read back U+FFFD, verify() would call it damage
    "put property value not UTF-8": lambda s: s.put(T, b"x", properties={"p": "\udcff"}),
    "put property name not UTF-8": lambda s: s.put(T, b"x", properties={"\ud800": "v"}),
    "put tags not UTF-8": lambda s: s.put(T, b"x", tags="a\udcffb"),
    "put_batch keys not UTF-8": lambda s: s.put_batch(T, [b"a"], properties={"KEYS": "\udcff"}),
}


@pytest.mark.parametrize("case", list(BAD))
def test_an_empty_or_none_value_is_refused_and_writes_nothing(store, case):
    before = store.max_offset
    queues = store.queue_offsets()
    with pytest.raises(InvalidMessageError):
        BAD[case](store)
    assert store.max_offset == before
    assert store.queue_offsets() == queues
    assert [m.body for m in store.iter_messages()] == [b"before"]
    r = store.put(T, b"after", tags="TagB", queue_id=0)
    assert r.commitlog_offset == before
    assert store.read(r.commitlog_offset).tags == "TagB"


@pytest.mark.parametrize(
    "props", [{"p": ""}, {"k": None}, {"a": "1", "b": ""}, {"TAGS": ""}, {"p": "\udcff"}, {"\udc80k": "v"}]
)
def test_codec_refuses_empty_and_none_values_in_both_twins(impl, props):
    with pytest.raises(InvalidMessageError):
        impl.codec.encode_properties(props)
    with pytest.raises(InvalidMessageError):
        impl.codec.encode_record(topic="T", body=b"x", properties=props)


def test_values_that_java_keeps_round_trip(store):
    # a blank but non-empty value is a value to Java's parser: stored and read back as given
    r = store.put(T, b"x", tags=" ", keys="k1 k2", properties={"p": " ", "q": "v"})
    m = store.read(r.commitlog_offset)
    assert (m.tags, m.keys, m.properties["p"], m.properties["q"]) == (" ", "k1 k2", " ", "v")
