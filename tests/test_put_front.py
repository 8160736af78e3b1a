"""A writing store's ``put`` is the implementation's ``PutFront``: ``put(topic, body)`` and keyed
puts of a checked topic go into the core in one call, every other call through
``MessageStore.put``. It must store what that method stores, refuse what it refuses (same typed
error, nothing written), and step aside wherever the store's own ``put`` must run (a subclass's
``put``, a closed store, a child after fork, a read-only store). Also: ``Message`` objects of
atomic fields are left out of the cyclic GC (compiled build) without leaking a cycle."""

import functools
import gc
import os
import weakref

import pytest

from rocketstore import Message, MessageStore, _impl, message
from rocketstore.errors import (
    InvalidMessageError,
    InvalidQueueIdError,
    InvalidTopicError,
    StoreClosedError,
    SystemTopicError,
)
from rocketstore.storebase import StoreBase

TOPIC = "FrontTopic"


@pytest.fixture
def store(tmp_path, impl):
    s = MessageStore(tmp_path / "store", implementation=impl.name, dispatch_interval_ms=0)
    s.create_topic(TOPIC, 2)
    yield s
    s.close()


def record(store, result):
    m = store.read(result.commitlog_offset)
    props = {k: v for k, v in m.properties.items() if k != "UNIQ_KEY"}
    return m.topic, bytes(m.body), props, m.queue_id, m.flag, m.size, m.unique_key == result.unique_key


def test_a_writing_store_puts_through_the_front(store, impl):
    assert isinstance(store._role.put.__self__, impl.store.PutFront)
    assert "put" not in vars(store) and type(store).put is MessageStore.put


@pytest.mark.parametrize("host", ["10.1.2.3", "2001:db8::1"])
def test_the_unique_key_written_is_the_host_then_time_then_counter(tmp_path, impl, host):
    """The UNIQ_KEY property a put writes is the upper-case hex of the store host, the process,
    the milliseconds and a counter, as its result says, for one put, a keyed one and a batch."""
    import ipaddress

    s = MessageStore(tmp_path / "s", implementation=impl.name, store_host=host, dispatch_interval_ms=0)
    try:
        results = [s.put(TOPIC, b"x"), s.put(TOPIC, b"y", keys="k", tags="T")]
        batch = s.put_batch(TOPIC, [b"a", b"b"])
        keys = [r.unique_key for r in results] + list(batch.unique_keys)
        offsets = [r.commitlog_offset for r in results] + list(batch.commitlog_offsets)
        stored = [s.read(o).properties["UNIQ_KEY"] for o in offsets]
    finally:
        s.close()
    assert stored == keys and len(set(keys)) == 4
    host_hex = ipaddress.ip_address(host).packed.hex().upper()
    for key in keys:
        assert key.startswith(host_hex) and key == key.upper() and len(key) == len(host_hex) + 24
        int(key, 16)
    counters = [int(k[-4:], 16) for k in keys]
    assert counters == [(counters[0] + i) % 65536 for i in range(4)]


CALLS = [
    dict(),
    dict(queue_id=1, flag=-5),
    dict(keys="k1"),
    dict(tags="TagA", keys=["k1", "k2"], queue_id=0),
    dict(tags="TagA", durable=True),
    dict(keys=("a",), durable=False),
]


@pytest.mark.parametrize("kwargs", CALLS, ids=lambda d: ",".join(sorted(d)) or "plain")
def test_front_stores_what_the_method_stores(store, kwargs):
    kwargs = {"queue_id": 1, **kwargs}  # (round robin would give the two different queues)
    fast = store.put(TOPIC, b"body", **kwargs)
    general = StoreBase.put(store, TOPIC, b"body", **kwargs)
    assert record(store, fast) == record(store, general)
    assert general.queue_offset == fast.queue_offset + 1
    assert general.commitlog_offset == fast.commitlog_offset + fast.size


BAD = [
    ((TOPIC, b"x"), dict(queue_id=2), InvalidQueueIdError),
    ((TOPIC, b"x"), dict(queue_id=-2), InvalidQueueIdError),
    ((TOPIC, b"x"), dict(queue_id=True), InvalidQueueIdError),
    ((TOPIC, b"x"), dict(flag=1 << 31), InvalidMessageError),
    ((TOPIC, b"x"), dict(keys="a\x01b"), InvalidMessageError),
    ((TOPIC, b"x"), dict(tags=""), InvalidMessageError),
    (("%DLQ%g", b"x"), dict(), SystemTopicError),
    (("bad topic", b"x"), dict(), InvalidTopicError),
    ((TOPIC, b"x"), dict(tags=7), InvalidMessageError),
]


@pytest.mark.parametrize("args,kwargs,error", BAD, ids=lambda v: repr(v)[:30])
def test_front_refuses_what_the_method_refuses_and_writes_nothing(store, args, kwargs, error):
    end = store._opened.core.wrote_offset
    with pytest.raises(error) as via_front:
        store.put(*args, **kwargs)
    with pytest.raises(error) as via_method:
        StoreBase.put(store, *args, **kwargs)
    assert str(via_front.value) == str(via_method.value)
    assert store._opened.core.wrote_offset == end


def test_front_hands_other_shapes_to_the_method(store):
    # a Message, properties, a delay level, a truthy durable: MessageStore.put decides
    r1 = store.put(Message(TOPIC, b"m", keys="km"))
    r2 = store.put(TOPIC, b"p", properties={"a": "b"})
    r3 = store.put(TOPIC, b"d", delay_level=1)
    r4 = store.put(TOPIC, b"t", durable=1)
    assert store.read(r1.commitlog_offset).keys == "km"
    assert store.read(r2.commitlog_offset).properties["a"] == "b"
    assert store.read(r3.commitlog_offset).topic == "SCHEDULE_TOPIC_XXXX"
    assert bytes(store.read(r4.commitlog_offset).body) == b"t"
    with pytest.raises(TypeError):
        store.put(TOPIC, b"x", nonsense=1)
    with pytest.raises(TypeError):
        store.put()


def test_a_closed_store_refuses_through_the_front(store):
    put = store.put
    store.close()
    with pytest.raises(StoreClosedError):
        put(TOPIC, b"x")
    with pytest.raises(StoreClosedError):
        store.put(TOPIC, b"x", keys="k")


def test_the_front_does_not_keep_the_store_alive(tmp_path, impl):
    s = MessageStore(tmp_path / "s", implementation=impl.name, dispatch_interval_ms=0)
    put, ref = s._role.put, weakref.ref(s)  # PutFront.put
    s.close()
    del s
    gc.collect()
    assert ref() is None
    with pytest.raises(StoreClosedError):
        put(TOPIC, b"x")


def test_a_subclass_put_is_not_bypassed(tmp_path, impl):
    class Counting(MessageStore):
        calls = 0

        def put(self, *args, **kwargs):
            Counting.calls += 1
            return super().put(*args, **kwargs)

    s = Counting(tmp_path / "s", implementation=impl.name, dispatch_interval_ms=0)
    try:
        assert isinstance(s._role.put.__self__, impl.store.PutFront)
        s.put(TOPIC, b"x")
        s.put(TOPIC, b"y", keys="k")
        assert Counting.calls == 2
    finally:
        s.close()


def test_a_read_only_store_has_no_front(tmp_path, impl):
    path = tmp_path / "s"
    MessageStore(path, implementation=impl.name).close()
    ro = MessageStore(path, implementation=impl.name, read_only=True)
    try:
        assert type(ro._role.put).__name__ == "CarefulCall"
        with pytest.raises(Exception) as info:
            ro.put(TOPIC, b"x")
        assert type(info.value).__module__ == "rocketstore.errors"
    finally:
        ro.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_put_through_the_parents_core(store):
    store.put(TOPIC, b"before", queue_id=0)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its put must raise, never append into the parent's map
        try:
            store.put(TOPIC, b"child")
            os.write(w, b"stored")
        except StoreClosedError:
            os.write(w, b"closed")
        except BaseException:
            os.write(w, b"other")
        os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    answer = os.read(r, 16)
    os.close(r)
    assert answer == b"closed"
    assert store.put(TOPIC, b"after", queue_id=0).queue_offset == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_methods_held_from_before_a_fork_do_not_append_in_the_child(store):
    """A bound method taken before the fork keeps the parent's core: its append must raise in
    the child, or the child writes records the parent then overwrites (an acknowledged put
    lost), or leaves behind for a crash's recovery to take as real."""
    store.put_batch(TOPIC, [b"a", b"b"], queue_id=0)
    got = store.receive("forkGroup", TOPIC, 2, 60_000)
    held = {
        "put": (store.put, (TOPIC, b"child")),
        "keyed put": (functools.partial(store.put, keys="k"), (TOPIC, b"child")),
        "put_batch": (store.put_batch, (TOPIC, [b"child"])),
        "put_messages": (store.put_messages, ([Message(TOPIC, b"child")],)),
        "ack": (store.ack, (got[0].handle,)),
        "receive": (store.receive, ("forkGroup", TOPIC, 1, 60_000)),
        "core put": (store._opened.core.put, (TOPIC, b"child", None, 0)),
    }
    end = store.max_offset
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: every held method must raise StoreClosedError, writing nothing
        answers = []
        for name, (method, args) in held.items():
            try:
                method(*args)
                answers.append(f"{name}: stored")
            except StoreClosedError:
                answers.append(f"{name}: closed")
            except BaseException as exc:
                answers.append(f"{name}: {type(exc).__name__}")
        os.write(w, "; ".join(answers).encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    answer = os.read(r, 4096).decode()
    os.close(r)
    assert answer == "; ".join(f"{name}: closed" for name in held)
    assert store.max_offset == end
    segment = os.path.join(
        store.path, "commitlog", sorted(os.listdir(os.path.join(store.path, "commitlog")))[0]
    )
    with open(segment, "rb") as f:  # nothing the child wrote past the parent's end
        f.seek(end)
        assert f.read(4096) == bytes(4096)
    assert store.ack(got[0].handle) is True  # the parent's state: untouched by the child
    assert store.put(TOPIC, b"after", queue_id=0).queue_offset == 2


# ---- Message objects and the cyclic GC ----


def test_the_pure_message_is_tracked_by_the_gc_whatever_its_fields():
    for m in (
        message.Message(TOPIC, b"x", tags="t", keys="k", queue_id=1),
        message.Message(TOPIC, b"x", keys=["k"]),
        message.Message(TOPIC, bytearray(b"x")),
    ):
        assert gc.is_tracked(m)


@pytest.mark.skipif(_impl.COMPILED is None, reason="compiled modules not built")
def test_atomic_compiled_messages_are_left_out_of_the_gc_and_tracked_again_when_they_could_cycle():
    compiled = _impl.COMPILED.store.Message
    m = compiled(TOPIC, b"x", tags="t", keys="k", queue_id=1)
    assert not gc.is_tracked(m)
    assert gc.is_tracked(compiled(TOPIC, b"x", keys=["k"]))  # a list: it could cycle
    assert gc.is_tracked(compiled(TOPIC, bytearray(b"x")))

    class Sub(compiled):  # its __dict__ could hold anything
        pass

    assert gc.is_tracked(Sub(TOPIC, b"x"))
    m.keys = "still atomic"
    assert not gc.is_tracked(m)
    m.properties = {"a": "b"}
    assert gc.is_tracked(m)
    m.__init__(TOPIC, b"x")  # atomic again: left out again
    assert not gc.is_tracked(m)
    m.__init__(TOPIC, b"x", keys=("k",))
    assert gc.is_tracked(m)


@pytest.mark.parametrize("message_type", _impl.MESSAGE_TYPES, ids=lambda t: t.__module__)
@pytest.mark.parametrize("via", ["setattr", "init"])
def test_a_cycle_through_a_message_is_collected(via, message_type):
    class Holder(list):  # (a list that weakref can point at)
        pass

    m = message_type(TOPIC, b"x", keys="k")
    holder = Holder([m])
    if via == "setattr":
        m.keys = holder  # m -> holder -> m
    else:
        m.__init__(TOPIC, b"x", keys=holder)
    ref = weakref.ref(holder)
    del m, holder
    gc.collect()
    assert ref() is None


def test_the_front_has_the_methods_signature(store):
    import inspect

    method = inspect.signature(StoreBase.put)
    front = inspect.signature(store._role.put)
    assert [(p.name, p.kind, p.default) for p in front.parameters.values()] == [
        (p.name, p.kind, p.default) for p in list(method.parameters.values())[1:]
    ]


# ---- put_pipelined through the front ----


def test_a_writing_store_puts_pipelined_through_the_front(store, impl):
    assert isinstance(store._role.put_pipelined.__self__, impl.store.PutFront)
    assert "put_pipelined" not in vars(store)


PIPELINED_CALLS = [c for c in CALLS if "durable" not in c]


@pytest.mark.parametrize("kwargs", PIPELINED_CALLS, ids=lambda d: ",".join(sorted(d)) or "plain")
def test_front_stores_pipelined_what_the_method_stores(store, kwargs):
    kwargs = {"queue_id": 1, **kwargs}
    fast = store.put_pipelined(TOPIC, b"body", **kwargs)
    general = StoreBase.put_pipelined(store, TOPIC, b"body", **kwargs)
    assert type(fast) is type(general)
    fast, general = fast.result(), general.result()
    assert record(store, fast) == record(store, general)
    assert general.queue_offset == fast.queue_offset + 1
    assert general.commitlog_offset == fast.commitlog_offset + fast.size


@pytest.mark.parametrize("args,kwargs,error", BAD, ids=lambda v: repr(v)[:30])
def test_front_refuses_pipelined_what_the_method_refuses_and_writes_nothing(store, args, kwargs, error):
    end = store._opened.core.wrote_offset
    with pytest.raises(error) as via_front:
        store.put_pipelined(*args, **kwargs)
    with pytest.raises(error) as via_method:
        StoreBase.put_pipelined(store, *args, **kwargs)
    assert str(via_front.value) == str(via_method.value)
    assert store._opened.core.wrote_offset == end


def test_front_hands_other_pipelined_shapes_to_the_method(store):
    f1 = store.put_pipelined(Message(TOPIC, b"m", keys="km"))
    f2 = store.put_pipelined(TOPIC, b"p", properties={"a": "b"})
    f3 = store.put_pipelined(TOPIC, b"d", delay_level=1)
    f4 = store.put_pipelined("NewTopicOfThisCall", b"n")
    assert store.read(f1.result().commitlog_offset).keys == "km"
    assert store.read(f2.result().commitlog_offset).properties["a"] == "b"
    assert store.read(f3.result().commitlog_offset).topic == "SCHEDULE_TOPIC_XXXX"
    assert store.read(f4.result().commitlog_offset).topic == "NewTopicOfThisCall"
    with pytest.raises(TypeError):
        store.put_pipelined(TOPIC, b"x", durable=True)
    with pytest.raises(TypeError):
        store.put_pipelined()


def test_a_closed_store_refuses_pipelined_puts(store):
    store.close()
    with pytest.raises(StoreClosedError):
        store.put_pipelined(TOPIC, b"x")


@pytest.mark.skipif(_impl.COMPILED is None, reason="compiled modules not built")
def test_a_compiled_future_in_flight_is_left_out_of_the_gc(tmp_path):
    """Thousands of futures in flight are the pipelined put's point: the cyclic GC need not walk
    them while they hold no error (nothing of theirs can point back at them)."""
    s = MessageStore(tmp_path / "s", implementation="c", dispatch_interval_ms=0)
    try:
        s.create_topic(TOPIC, 2)
        for future in (s.put_pipelined(TOPIC, b"x"), s.put_pipelined(TOPIC, b"y", keys="k")):
            assert not gc.is_tracked(future)
            assert future.result().ok
            assert not gc.is_tracked(future)
    finally:
        s.close()


def test_the_pipelined_front_has_the_methods_signature(store):
    import inspect

    method = inspect.signature(StoreBase.put_pipelined)
    front = inspect.signature(store._role.put_pipelined)
    assert [(p.name, p.kind, p.default) for p in front.parameters.values()] == [
        (p.name, p.kind, p.default) for p in list(method.parameters.values())[1:]
    ]
    assert "durable" not in inspect.signature(MessageStore.put_pipelined).parameters
