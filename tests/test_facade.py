"""MessageStore is a facade: its public methods are the class's own, whatever the process's role
(owning, joined, following, forked), and what differs between those is the role object the
facade delegates to, chosen at open and swapped only when the store opens again or takes over."""

import inspect
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import rocketstore
from rocketstore import MessageStore
from rocketstore.errors import StoreClosedError

TOPIC = "Facade"
SRC = str(pathlib.Path(rocketstore.__file__).resolve().parents[1])

#: Every public method of the class (properties left out).
PUBLIC = sorted(
    name
    for name in dir(MessageStore)
    if not name.startswith("_")
    and (
        inspect.isfunction(getattr(MessageStore, name))
        or inspect.ismethoddescriptor(getattr(MessageStore, name))
    )
)

CHECK = """
def check(store):
    import inspect
    from rocketstore import MessageStore
    found = []
    for name in dir(MessageStore):
        value = getattr(MessageStore, name)
        if name.startswith("_") or not (inspect.isfunction(value) or type(value).__name__ == "method_descriptor"):
            continue
        if name in vars(store):
            found.append(name + " in vars")
        elif inspect.isfunction(value):
            if getattr(store, name).__func__ is not value:
                found.append(name + " is not the class's")
        elif getattr(store, name).__self__ is not store:  # the compiled base's method
            found.append(name + " is not the class's")
    return found
"""


def check(store):
    namespace: dict = {}
    exec(CHECK, namespace)
    return namespace["check"](store)


def test_the_class_has_the_methods_an_application_calls():
    for name in (
        "put",
        "put_batch",
        "put_messages",
        "read",
        "get_by_msg_id",
        "get_by_queue_offset",
        "query_by_key",
        "query_by_unique_key",
        "get_message",
        "receive",
        "ack",
    ):
        assert name in PUBLIC, name
    # help() shows the class's method with its own signature and docstring (the compiled base's
    # methods take theirs from the pure twin's)
    assert "commitlog_offset" in str(inspect.signature(MessageStore.read))
    assert "zero_copy" in str(inspect.signature(MessageStore.read))
    assert "message at a CommitLog offset" in (MessageStore.read.__doc__ or "")
    assert "tags" in str(inspect.signature(MessageStore.put))


def test_an_owning_store_keeps_the_class_methods(tmp_path, impl):
    with MessageStore(tmp_path / "s", implementation=impl.name) as store:
        store.put(TOPIC, b"x")
        store.receive("g", TOPIC, 1)
        assert check(store) == []
        assert type(store).read is MessageStore.read and store.read.__self__ is store
        assert store._role.kind == "owner"


def test_a_read_only_store_keeps_the_class_methods(tmp_path, impl):
    path = tmp_path / "s"
    MessageStore(path, implementation=impl.name).close()
    with MessageStore(path, implementation=impl.name, read_only=True) as store:
        assert check(store) == []
        assert store._role.kind in ("following", "read-only")
    with MessageStore(path, implementation=impl.name) as w:
        w.put(TOPIC, b"x", queue_id=0)
        with MessageStore(path, implementation=impl.name, read_only=True) as store:
            assert store._role.kind == "following"
            assert store.get_by_queue_offset(TOPIC, 0, 0).body == b"x"
            assert check(store) == []


def test_a_closed_store_keeps_the_class_methods_and_raises(tmp_path, impl):
    store = MessageStore(tmp_path / "s", implementation=impl.name)
    r = store.put(TOPIC, b"x")
    store.close()
    assert check(store) == []
    assert store._role.kind == "closed"
    with pytest.raises(StoreClosedError):
        store.read(r.commitlog_offset)
    with pytest.raises(StoreClosedError):
        store.put(TOPIC, b"y")


def test_a_joined_store_keeps_the_class_methods(tmp_path, impl):
    path = str(tmp_path / "s")
    code = textwrap.dedent(CHECK) + textwrap.dedent(
        """
        import json, sys
        from rocketstore import MessageStore
        s = MessageStore(sys.argv[1], implementation=sys.argv[2])
        s.put("Facade", b"joined")
        print(json.dumps({"kind": s._role.kind, "found": check(s)}))
        s.close()
        """
    )
    with MessageStore(path, implementation=impl.name) as owner:
        owner.put(TOPIC, b"x")
        env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
        out = subprocess.run(
            [sys.executable, "-c", code, path, impl.name],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == {"kind": "joined", "found": []}
        assert owner.max_queue_offset(TOPIC, 0) + owner.max_queue_offset(TOPIC, 1) >= 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_keeps_the_class_methods(tmp_path, impl):
    store = MessageStore(tmp_path / "s", implementation=impl.name)
    try:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            try:
                found = check(store)
                try:
                    store.put(TOPIC, b"x")
                    found.append("put did not raise")
                except StoreClosedError:
                    pass
                found.append(store._role.kind)
                os.write(w, json.dumps(found).encode())
            finally:
                os._exit(0)
        os.close(w)
        got = os.read(r, 65536)
        os.waitpid(pid, 0)
        os.close(r)
        assert json.loads(got) == ["closed"]
    finally:
        store.close()


def test_patching_the_class_after_open_takes_effect(tmp_path, impl, monkeypatch):
    with MessageStore(tmp_path / "s", implementation=impl.name) as store:
        monkeypatch.setattr(MessageStore, "read", lambda self, offset, **kw: "patched")
        assert store.read(0) == "patched"


def test_a_compiled_build_takes_the_compiled_base():
    """The hot calls pass through the compiled base, without a Python frame, wherever it is built;
    its methods carry the pure twin's docstrings and signatures."""
    from rocketstore import _facade_py, _impl

    base = MessageStore.__mro__[1]
    if _impl.COMPILED is None:
        assert base is _facade_py.FacadeBase
        return
    assert base.__module__ == "rocketstore._facade"
    for name in _facade_py.HOT:
        method = getattr(MessageStore, name)
        assert type(method).__name__ == "method_descriptor", name
        assert method.__doc__ == inspect.cleandoc(getattr(_facade_py.FacadeBase, name).__doc__), name
    assert "keys" in str(inspect.signature(MessageStore.put))


def test_the_role_is_replaced_whole_and_a_held_method_follows_it(tmp_path, impl):
    store = MessageStore(tmp_path / "s", implementation=impl.name)
    put = store.put  # bound to the store: the role it calls is the one at call time
    r = put(TOPIC, b"x")
    store.close()
    with pytest.raises(StoreClosedError):
        put(TOPIC, b"y")
    assert store._role.kind == "closed"
    with MessageStore(tmp_path / "s", implementation=impl.name, read_only=True) as ro:
        assert ro.read(r.commitlog_offset).body == b"x"


def test_the_facade_mixes_in_nothing():
    """MessageStore is its compiled (or pure) base and StoreBase, which extends nothing: what
    several processes writing a store need is an object the store holds (rocketstore.joined)."""
    from rocketstore import _facade_py
    from rocketstore.joined import Joined
    from rocketstore.storebase import StoreBase

    assert StoreBase.__bases__ == (object,)
    assert MessageStore.__mro__[2:] == (StoreBase, object)
    assert MessageStore.__mro__[1].__name__ == _facade_py.FacadeBase.__name__
    assert Joined.__bases__ == (object,)


# The pure append core's functions split out of log/_core_py by concern, as the compiled twin's
# cext/store/*.pxi are functions of its cdef class: they work on its fields, which the compiled
# twin's functions reach as C fields. No other module is let off.
PURE_CORE_PARTS = [
    "src/rocketstore/log/_topics_py.py",
    "src/rocketstore/log/_shared_py.py",
    "src/rocketstore/log/_batches_py.py",
]


def test_no_facade_module_is_exempt_from_the_private_access_rule():
    """ruff's SLF001 holds in every src/ module: an exception is an inline noqa saying why, not a
    whole file let off (the facade's modules were, while the store's parts reached into it),
    but for the pure append core's own parts."""
    pyproject = pathlib.Path(SRC).parent / "pyproject.toml"
    if not pyproject.exists():
        pytest.skip("not a checkout")
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        tomllib = pytest.importorskip("tomli")
    ignores = tomllib.loads(pyproject.read_text())["tool"]["ruff"]["lint"]["per-file-ignores"]
    exempt = [path for path, rules in ignores.items() if path.startswith("src/") and "SLF001" in rules]
    assert exempt == PURE_CORE_PARTS
