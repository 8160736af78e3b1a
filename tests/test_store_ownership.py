"""MessageStore opens a store, or creates one in a missing or empty directory; any other path is
refused with NotAStoreError and nothing in it is written, created or truncated."""

import os
import pathlib
import shutil

import pytest

import rocketstore
from rocketstore import MessageStore
from rocketstore.errors import NotAStoreError, StoreConfigError

SEGMENT = 64 * 1024


def snapshot(root):
    """{relative path: (kind, bytes or None)} of everything under ``root`` (and its mtimes)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            data = pathlib.Path(path).read_bytes() if os.path.isfile(path) else None
            out[os.path.relpath(path, root)] = (st.st_mode, st.st_mtime_ns, data)
    return out


def _tensorflow(root):
    (root / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-1"\n')
    (root / "model.ckpt-1.index").write_bytes(b"\x00" * 100)


def _etc(root):
    (root / "hosts").write_text("127.0.0.1 localhost\n")
    (root / "lock").write_text("mine\n")
    (root / "config").mkdir()


def _store_names_with_foreign_content(root):
    (root / "checkpoint").write_text("not a RocketMQ checkpoint\n")
    (root / "lock").write_text("someone else's lock\n")


def _commitlog_with_foreign_files(root):
    (root / "commitlog").mkdir()
    (root / "commitlog" / "notes.txt").write_text("hello\n")


def _commitlog_is_a_file(root):
    (root / "commitlog").write_text("a file\n")


def _project_with_a_config_dir(root):
    (root / "config").mkdir()
    (root / "config" / "settings.yaml").write_text("debug: true\n")


FOREIGN = {
    "a project's config/ only": _project_with_a_config_dir,
    "tensorflow checkpoint dir": _tensorflow,
    "a copy of /etc": _etc,
    "store names, foreign content": _store_names_with_foreign_content,
    "commitlog/ with foreign files": _commitlog_with_foreign_files,
    "commitlog is a file": _commitlog_is_a_file,
}


@pytest.mark.parametrize("read_only", [False, True])
@pytest.mark.parametrize("case", list(FOREIGN))
def test_a_directory_that_is_not_a_store_is_refused_and_untouched(tmp_path, impl, case, read_only):
    root = tmp_path / "dir"
    root.mkdir()
    FOREIGN[case](root)
    before = snapshot(root)
    with pytest.raises(NotAStoreError) as raised:
        MessageStore(root, implementation=impl.name, read_only=read_only, commitlog_file_size=SEGMENT)
    assert str(root) in str(raised.value)
    assert snapshot(root) == before


@pytest.mark.parametrize("read_only", [False, True])
def test_a_regular_file_is_not_a_store(tmp_path, impl, read_only):
    path = tmp_path / "file"
    path.write_text("data\n")
    with pytest.raises(NotAStoreError):
        MessageStore(path, implementation=impl.name, read_only=read_only, commitlog_file_size=SEGMENT)
    assert path.read_text() == "data\n" and sorted(os.listdir(tmp_path)) == ["file"]


def test_an_empty_directory_is_refused_read_only_and_becomes_a_store_writable(tmp_path, impl):
    root = tmp_path / "empty"
    root.mkdir()
    with pytest.raises(NotAStoreError):
        MessageStore(root, implementation=impl.name, read_only=True)
    assert os.listdir(root) == []
    with MessageStore(root, implementation=impl.name, commitlog_file_size=SEGMENT) as s:
        s.put("T", b"x")
    with MessageStore(root, implementation=impl.name, read_only=True) as s:
        assert [m.body for m in s.iter_messages()] == [b"x"]


def test_a_missing_directory_becomes_a_store(tmp_path, impl):
    with MessageStore(tmp_path / "a" / "b", implementation=impl.name, commitlog_file_size=SEGMENT) as s:
        s.put("T", b"x")
    assert (tmp_path / "a" / "b" / "commitlog").is_dir()


@pytest.mark.parametrize(
    "files",
    [
        ("config/", "lock", "abort"),
        ("config/", "lock", "abort", "checkpoint"),
        ("config/", "config/topics.json", "config/topics.json.tmp", "lock", "abort"),
        ("config/", "lock", "abort", "checkpoint", "commitlog/"),
        ("config/",),
    ],
)
def test_a_store_killed_before_its_first_segment_reopens(tmp_path, impl, files):
    root = tmp_path / "store"
    root.mkdir()
    for name in files:
        if name.endswith("/"):
            (root / name).mkdir()
        elif name.startswith("config/"):
            (root / name).write_text('{\n\t"topicConfigTable":{}\n}' if name.endswith(".json") else "{")
        elif name == "checkpoint":
            (root / name).write_bytes(bytes(4096))
        else:
            (root / name).write_bytes(b"lock" if name == "lock" else b"")
    with MessageStore(root, implementation=impl.name, read_only=True) as s:
        assert list(s.iter_messages()) == []
    with MessageStore(root, implementation=impl.name, commitlog_file_size=SEGMENT) as s:
        s.put("T", b"x")
    with MessageStore(root, implementation=impl.name, commitlog_file_size=SEGMENT) as s:
        assert [m.body for m in s.iter_messages()] == [b"x"]


def test_a_java_broker_store_opens_read_only_and_writable_on_a_copy(java_store, tmp_path, impl):
    with MessageStore(java_store, implementation=impl.name, read_only=True) as s:
        count = len(list(s.iter_messages()))
    assert count > 0
    copy = tmp_path / "copy"
    shutil.copytree(java_store, copy)
    os.chmod(copy, 0o755)
    for dirpath, dirnames, filenames in os.walk(copy):
        for name in dirnames:
            os.chmod(os.path.join(dirpath, name), 0o755)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o644)
    with MessageStore(copy, implementation=impl.name) as s:
        assert len(list(s.iter_messages())) == count
        s.put("T", b"x")


def test_not_a_store_error_is_a_store_config_error_and_exported():
    assert issubclass(NotAStoreError, StoreConfigError)
    assert rocketstore.NotAStoreError is NotAStoreError and "NotAStoreError" in rocketstore.__all__


def test_a_directory_with_only_the_spark_sinks_staging_becomes_a_store(tmp_path, impl):
    root = tmp_path / "dst"
    (root / ".spark-staging" / "job").mkdir(parents=True)
    with pytest.raises(NotAStoreError):
        MessageStore(root, implementation=impl.name, read_only=True)
    with MessageStore(root, implementation=impl.name, commitlog_file_size=SEGMENT) as s:
        s.put("T", b"x")
