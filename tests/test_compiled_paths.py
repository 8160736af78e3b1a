"""On the compiled build the point reads and the one-call pull are answered by the compiled code,
which reads the managers' state in C (the segment table, the queues, the dispatcher, the index
services are instances of the compiled codec's state classes): not one call is handed to the
class's method (the careful path), on every Python the package supports. A compiled read that
could not read that state would decline each call, and the counts below would show it."""

import pytest

from rocketstore import MessageStore, _impl

pytestmark = pytest.mark.skipif(_impl.COMPILED is None, reason="the compiled modules are not built")

TOPIC = "CompiledPaths"
COUNT = 40


def _fill(path):
    with MessageStore(path, implementation="c", default_queues=2) as s:
        return [s.put(TOPIC, b"body%d" % i, keys="k%d" % i, queue_id=i % 2) for i in range(COUNT)]


def _read_everything(s, put):
    """Each point read of every message, and a pull of each queue: how many calls."""
    calls = 0
    for i, r in enumerate(put):
        body = b"body%d" % i
        assert s.read(r.commitlog_offset).body == body
        assert s.get_by_msg_id(r.msg_id).body == body
        assert s.get_by_queue_offset(TOPIC, r.queue_id, r.queue_offset).body == body
        assert [m.body for m in s.query_by_key(TOPIC, "k%d" % i)] == [body]
        uniq = s.read(r.commitlog_offset).unique_key
        assert s.query_by_unique_key(TOPIC, uniq).body == body
        calls += 6
    for queue_id in (0, 1):
        got = s.get_message("g", TOPIC, queue_id, 0, 32)
        assert [m.body for m in got.messages] == [b"body%d" % i for i in range(queue_id, COUNT, 2)]
        calls += 1
    return calls


def test_the_managers_hot_state_is_the_compiled_codecs(tmp_path):
    codec = _impl.COMPILED.codec
    with MessageStore(str(tmp_path / "s"), implementation="c", default_queues=2) as s:
        s.put(TOPIC, b"body", keys="k", queue_id=1)
        assert s.get_by_queue_offset(TOPIC, 1, 0).body == b"body"
        assert isinstance(s._opened.segments, codec.SegmentTable)
        assert s._opened.segments.files and all(
            isinstance(f, codec.MappedState) for f in s._opened.segments.files
        )
        assert isinstance(s._opened.queues, codec.QueueTable)
        cq = s._opened.queues.get(TOPIC, 1)
        assert isinstance(cq, codec.QueueState) and isinstance(cq._files, codec.SegmentTable)
        assert isinstance(s._opened.dispatcher, codec.DispatchState)
        services = [x for x in (s._opened.disk_index, s._opened.index) if x is not None]
        assert services and all(isinstance(x, codec.IndexState) for x in services)
        assert all(isinstance(f, codec.IndexFileState) for x in services for f in x._files)


def test_every_point_read_of_a_writable_store_takes_the_compiled_path(tmp_path):
    path = str(tmp_path / "s")
    with MessageStore(path, implementation="c", default_queues=2) as s:
        put = [s.put(TOPIC, b"body%d" % i, keys="k%d" % i, queue_id=i % 2) for i in range(COUNT)]
        s._opened.dispatcher.catch_up()  # (a queue read of a unit not dispatched yet is the careful path's)
        fast = s._role.fast_reads
        assert type(fast) is _impl.COMPILED.codec.FastReads
        calls = _read_everything(s, put)
        assert (fast.fast_calls, fast.careful_calls) == (calls, 0)


def test_every_point_read_of_a_reopened_and_a_read_only_store_takes_the_compiled_path(tmp_path):
    path = str(tmp_path / "s")
    put = _fill(path)
    for read_only in (False, True):
        with MessageStore(path, implementation="c", read_only=read_only) as s:
            fast = s._role.fast_reads
            calls = _read_everything(s, put)
            assert (fast.fast_calls, fast.careful_calls) == (calls, 0), read_only
