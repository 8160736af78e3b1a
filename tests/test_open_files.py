"""Open files: a store keeps a descriptor (or two) per segment and queue file, so a store of a few
hundred queues outgrows the common soft limit of 1,024. An open raises the soft limit to the
hard limit, as the JVM does for a Java broker (``-XX:+MaxFDLimit``); when the limit is reached
anyway, every call says so with a typed error, and a put of a new topic writes nothing."""

import os
import subprocess
import sys
import textwrap

import pytest

from rocketstore import MessageStore
from rocketstore.errors import OpenFilesLimitError, RocketStoreError

resource = pytest.importorskip("resource")


def run_child(code: str, tmp_path) -> str:
    """Run ``code`` in a fresh interpreter (its open-files limit is its own), returning stdout."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("raise_limit", [True, False])
def test_open_raises_the_soft_limit_to_the_hard_limit(tmp_path, impl, raise_limit):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"the hard limit ({hard}) leaves nothing to raise")
    out = run_child(
        f"""
        import resource
        from rocketstore import MessageStore
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        store = MessageStore("store", implementation={impl.name!r}, raise_open_files_limit={raise_limit})
        store.close()
        print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        """,
        tmp_path,
    )
    now = int(out.split()[-1])
    if raise_limit:
        assert now > 256
        assert hard == resource.RLIM_INFINITY or now == hard
    else:
        assert now == 256


def test_running_out_of_descriptors_is_a_typed_error_and_a_new_topic_is_not_kept(tmp_path, impl):
    """With a low limit and raising turned off, puts to ever more topics run out of descriptors:
    each failing call raises a RocketStoreError (never a bare OSError), and a topic whose put
    failed is neither in topics() nor in topics.json."""
    out = run_child(
        f"""
        import json, resource
        from rocketstore import MessageStore
        from rocketstore.errors import OpenFilesLimitError, RocketStoreError
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (160, hard))
        store = MessageStore("store", implementation={impl.name!r}, raise_open_files_limit=False,
                             default_queues=4, dispatch_interval_ms=0, consume_queue_units=1024)
        stored, failed = [], []
        for t in range(200):
            topic = f"T{{t}}"
            step = "put"
            try:
                store.put(topic, b"x")
                stored.append(topic)
                step = "dispatch"
                store.queues()  # dispatch now: its queue files are what runs out
            except RocketStoreError as exc:
                failed.append((topic, step, isinstance(exc, OpenFilesLimitError)))
            if len(failed) >= 5:
                break
        known = set(store.topics)
        try:
            store.close()
        except RocketStoreError:
            pass
        with open("store/config/topics.json") as f:
            on_disk = set(json.load(f)["topicConfigTable"])
        print(json.dumps({{"stored": stored, "failed": failed, "known": sorted(known),
                          "on_disk": sorted(on_disk)}}))
        """,
        tmp_path,
    )
    import json

    report = json.loads(out.splitlines()[-1])
    failed = report["failed"]
    assert failed, "the limit was never reached: the test proves nothing"
    assert all(typed for _, _, typed in failed), failed
    assert any(step == "put" for _, step, _ in failed), failed
    for topic, step, _ in failed:
        if step == "put":  # a put that raised stored nothing, and its new topic was not kept
            assert topic not in report["known"] and topic not in report["on_disk"], topic


def test_a_read_only_store_keeps_one_descriptor_per_segment(tmp_path, impl):
    path = str(tmp_path / "store")
    store = MessageStore(path, implementation=impl.name, commitlog_file_size=4096, prefault_bytes=0)
    for i in range(200):
        store.put("T", b"x" * 100, keys=f"k{i}")
    store.close()
    segments = len(os.listdir(os.path.join(path, "commitlog")))
    assert segments > 5
    before = len(os.listdir("/proc/self/fd"))
    reader = MessageStore(path, implementation=impl.name, read_only=True)
    try:
        used = len(os.listdir("/proc/self/fd")) - before
        assert [m.body for m in reader.iter_messages()][-1] == b"x" * 100
        # one per CommitLog segment (the map's own), not two; queue and index files besides
        assert used < segments * 2, (used, segments)
        assert used <= segments + 10, (used, segments)
    finally:
        reader.close()


def test_a_writable_store_keeps_one_descriptor_per_sealed_segment(tmp_path, impl):
    """Segments sealed while writing, and those found at an open, keep only their map's own."""
    path = str(tmp_path / "store")
    before = len(os.listdir("/proc/self/fd"))
    store = MessageStore(path, implementation=impl.name, commitlog_file_size=4096, prefault_bytes=0)
    try:
        for i in range(1000):
            store.put("T", b"x" * 100, keys=f"k{i}", queue_id=0)
        segments = len(os.listdir(os.path.join(path, "commitlog")))
        assert segments > 8
        used = len(os.listdir("/proc/self/fd")) - before
        assert used <= segments + 30, (used, segments)
    finally:
        store.close()
    store = MessageStore(path, implementation=impl.name)
    try:
        used = len(os.listdir("/proc/self/fd")) - before
        assert used <= segments + 30, (used, segments)
        for _ in range(1000):
            store.put("T", b"y" * 100, queue_id=0)
        assert store.get_by_queue_offset("T", 0, 0).body == b"x" * 100
        assert store.get_by_queue_offset("T", 0, 1999).body == b"y" * 100
    finally:
        store.close()


def test_the_error_names_the_limit():
    from rocketstore.files.mapped_file import space_error

    exc = space_error(24, "cannot open segment", "/x/00000000000000000000")
    assert isinstance(exc, OpenFilesLimitError)
    assert isinstance(exc, RocketStoreError) and isinstance(exc, OSError)
    assert "ulimit -n" in str(exc)


def test_the_option_is_checked(tmp_path):
    from rocketstore.errors import StoreConfigError

    with pytest.raises(StoreConfigError):
        MessageStore(str(tmp_path / "s"), raise_open_files_limit="yes")
