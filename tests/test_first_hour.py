"""What a newcomer meets in the first hour: a pure-Python build that says so, caps that are not silent."""

import os
import subprocess
import sys

import pytest

# A process in which the compiled modules cannot import, as after an install without a C compiler.
_NO_COMPILER = "import sys; sys.modules['rocketstore.format._codec'] = None; sys.modules['rocketstore.format._crc32'] = None\n"


def _run(code, **env_changes):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKETSTORE_")}
    env.update(env_changes)
    return subprocess.run(
        [sys.executable, "-c", _NO_COMPILER + code], env=env, capture_output=True, text=True, timeout=120
    )


def test_a_fallback_nobody_asked_for_warns_once_at_import():
    done = _run(
        "import rocketstore, rocketstore.store; import rocketstore; print(rocketstore.IMPLEMENTATION)"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "py"
    assert done.stderr.count("PureBuildWarning") == 1, done.stderr
    assert "compiled modules" in done.stderr and "ROCKETSTORE_NO_EXTENSIONS=1" in done.stderr


def test_asking_for_the_pure_build_is_quiet():
    done = _run("import rocketstore; print(rocketstore.IMPLEMENTATION)", ROCKETSTORE_NO_EXTENSIONS="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "py"
    assert "Warning" not in done.stderr


def test_requiring_the_compiled_build_makes_the_fallback_an_error():
    done = _run("import rocketstore", ROCKETSTORE_REQUIRE_EXTENSIONS="1")
    assert done.returncode != 0
    assert "rocketstore.format._codec" in done.stderr.splitlines()[-1], done.stderr


@pytest.mark.parametrize(
    "code",
    [
        "from rocketstore.cli import main; main(['--version'])",
        "from rocketstore.cli import main; main(['stats', '--store', STORE])",
    ],
    ids=["version", "stats"],
)
def test_the_cli_says_the_build_is_the_slow_fallback(tmp_path, code):
    store = tmp_path / "s"
    code = f"STORE = {str(store)!r}\nimport rocketstore\nrocketstore.MessageStore(STORE).close()\n" + code
    done = _run("import warnings; warnings.simplefilter('ignore')\n" + code)
    assert "fallback" in done.stdout, done.stdout + done.stderr


def test_query_by_key_gives_as_many_as_asked_past_rocketmqs_64(tmp_path, impl):
    from rocketstore import MessageStore

    with MessageStore(tmp_path / "s", implementation=impl.name) as store:
        for i in range(100):
            store.put("K", b"m%d" % i, keys="kk")
        assert len(store.query_by_key("K", "kk")) == 32  # the default, documented
        assert len(store.query_by_key("K", "kk", max_num=64)) == 64
        every = store.query_by_key("K", "kk", max_num=1000)
        assert sorted(bytes(m.body) for m in every) == sorted(b"m%d" % i for i in range(100))
        assert len(store.query_by_key("K", "kk", max_num=70)) == 70


def test_stats_is_the_document_the_cli_prints(tmp_path, impl):
    import json

    from rocketstore import MessageStore
    from rocketstore.cli import main

    path = tmp_path / "s"
    with MessageStore(path, implementation=impl.name) as store:
        store.create_topic("abc", 2)
        for i in range(6):
            store.put("abc", b"m%d" % i, queue_id=i % 2)
        store.get_message("g", "abc", 0, 0)
        store.commit_offset("g", "abc", 0, 2)
    with MessageStore(path, implementation=impl.name, read_only=True) as store:
        api = store.stats()
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--json", "stats", "--store", str(path)]) == 0
    cli = json.loads(out.getvalue())
    assert set(cli) <= set(api), set(cli) - set(api)
    assert isinstance(api["topics"], dict) and api["topics"]["abc"]["messages"] == 6
    for key in (
        "topics",
        "groups",
        "messages",
        "segments",
        "min_offset",
        "max_offset",
        "bytes",
        "dead_letters",
    ):
        assert json.loads(json.dumps(api[key])) == cli[key], key


@pytest.mark.parametrize(
    "call, names",
    [
        (lambda s: s.put("T", "hello"), ("body", "str", "bytes")),
        (lambda s: s.put("T", None), ("body", "None")),
        (lambda s: s.put_batch("T", ["a"]), ("bodies", "str", "bytes")),
        (lambda s: s.put_batch("T", [b"a", None]), ("bodies", "NoneType", "bytes")),
        (lambda s: s.put_pipelined("T", "x"), ("body", "str", "bytes")),
    ],
    ids=["str-body", "no-body", "str-in-batch", "none-in-batch", "pipelined-str-body"],
)
def test_a_wrong_type_names_the_argument_what_it_got_and_what_it_takes(tmp_path, impl, call, names):
    from rocketstore import MessageStore

    with MessageStore(tmp_path / "s", implementation=impl.name) as store:
        with pytest.raises(TypeError) as caught:
            call(store)
        for name in names:
            assert name in str(caught.value), str(caught.value)
        assert store.max_offset == 0  # nothing written


@pytest.mark.parametrize(
    "option, value, takes",
    [
        ("commitlog_file_size", "1G", "int"),
        ("flush_interval_ms", "x", "int"),
        ("shared_writers", "yes", "bool"),
        ("file_reserved_time", "3d", "number"),
        ("broker_cluster_name", 5, "str"),
    ],
)
def test_a_wrong_option_type_names_the_option(tmp_path, impl, option, value, takes):
    from rocketstore import MessageStore
    from rocketstore.errors import StoreConfigError

    with pytest.raises(StoreConfigError) as caught:
        MessageStore(tmp_path / "s", implementation=impl.name, **{option: value})
    text = str(caught.value)
    assert option in text and takes in text and repr(value) in text, text
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    "option, near",
    [("commitlog_segment_size", "commitlog_file_size"), ("flushdisktype", "flush_disk_type"), ("zzz", None)],
)
def test_an_unknown_option_is_a_typed_error_that_names_it_and_its_near_names(tmp_path, impl, option, near):
    from rocketstore import MessageStore
    from rocketstore.errors import StoreConfigError

    with pytest.raises(StoreConfigError) as caught:
        MessageStore(tmp_path / "s", implementation=impl.name, **{option: 1})
    assert isinstance(caught.value, TypeError)  # as any unknown keyword argument is
    text = str(caught.value)
    assert repr(option) in text and (near is None or near in text) and "StoreConfig" in text, text
    assert not (tmp_path / "s").exists()


def test_the_package_exports_what_an_application_uses_and_the_format_level_names_moved():
    import rocketstore
    import rocketstore.lowlevel

    for name in (
        "crc32",
        "java_hash",
        "encode_record",
        "decode_record",
        "decode_batch",
        "CQ_UNIT_DTYPE",
        "open_store",
    ):
        assert name not in rocketstore.__all__
        with pytest.warns(DeprecationWarning, match="moved"):
            old = getattr(rocketstore, name)
        if name != "open_store":
            assert old is getattr(rocketstore.lowlevel, name)
    assert rocketstore.lowlevel.crc32(b"abc") == 0x352441C2
    with pytest.raises(AttributeError):
        rocketstore.no_such_name  # noqa: B018
