"""The ``rocketstore`` command line, driven as a user drives it: the real console script in a
subprocess (``python -m rocketstore`` when the package runs from ``src/``).

Stores are tiny (16 KiB segments, small ConsumeQueue and index files). Every read-only command
is checked to leave the store's bytes untouched, including on a copy of the Java broker's store.
"""

import base64
import fcntl
import hashlib
import json
import os
import pathlib
import select
import shutil
import struct
import subprocess
import sys
import termios
import time

import pytest

import rocketstore
import rocketstore.lowlevel
from rocketstore import MessageStore
from rocketstore.cli import Progress, message_dict

SEGMENT = 16 * 1024
SMALL = dict(
    commitlog_file_size=SEGMENT,
    consume_queue_units=64,
    index_slots=64,
    index_count=256,
    store_host="10.0.0.7",
    store_port=10911,
)
JAVA_LAST_MSG_ID = "C0A8470100001FBB0000000000001EE8"  # 192.168.71.1:8123, offset 7912
OLD_MESSAGES, NEW_MESSAGES = 200, 100


def _cli_command():
    """The console script installed next to this interpreter, unless the package under test
    runs from the source tree (then ``python -m rocketstore`` with that tree on PYTHONPATH)."""
    package_dir = pathlib.Path(rocketstore.__file__).resolve().parent
    source_tree = pathlib.Path(__file__).resolve().parents[1] / "src"
    script = pathlib.Path(sys.executable).parent / "rocketstore"
    if source_tree not in package_dir.parents and script.is_file():
        return [str(script)], {}
    path = os.pathsep.join(filter(None, [str(package_dir.parent), os.environ.get("PYTHONPATH")]))
    return [sys.executable, "-m", "rocketstore"], {"PYTHONPATH": path}


COMMAND, COMMAND_ENV = _cli_command()


def _env(tmp_path, **extra):
    env = dict(os.environ, **COMMAND_ENV)
    env["ROCKETSTORE_HOME"] = str(tmp_path / "no-default-store")  # a forgotten --store fails
    env["PYTHONIOENCODING"] = "utf-8"
    env.pop("COLUMNS", None)
    env.update(extra)
    return env


@pytest.fixture
def run(tmp_path):
    """``run(*args, input=None, env=None)``: the CLI's CompletedProcess (text stdout/stderr)."""

    def run(*args, input=None, env=None, check=None):
        proc = subprocess.run(
            COMMAND + [str(a) for a in args],
            input=input,
            capture_output=True,
            env=env or _env(tmp_path),
            timeout=120,
            stdin=subprocess.DEVNULL if input is None else None,
        )
        proc.stdout, proc.stderr = proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8")
        if check is not None:
            assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
        return proc

    return run


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def tree_digest(root):
    """Every path, size and content hash under ``root``: equal digests, not one byte written."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        h.update(os.path.relpath(dirpath, root).encode() + b"/\0")
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                h.update(name.encode() + b"\0" + hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def make_store(path):
    """Topic T (4 queues): OLD_MESSAGES then, 30 ms later, NEW_MESSAGES, tagged A/B, keys k<i>;
    topic Bin: one binary body. Group g1 has committed queue 0 up to 10."""
    with MessageStore(path, **SMALL) as store:
        for i in range(OLD_MESSAGES):
            store.put("T", f"body {i}".encode(), tags="A" if i % 2 else "B", keys=f"k{i} shared")
        time.sleep(0.03)
        for i in range(OLD_MESSAGES, OLD_MESSAGES + NEW_MESSAGES):
            store.put("T", f"body {i}".encode(), tags="A" if i % 2 else "B", keys=f"k{i}")
        store.put("Bin", bytes(range(256)), queue_id=0)
        store.commit_offset("g1", "T", 0, 10)
    return path


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory):
    """One store for the read-only tests (each checks it is left unchanged)."""
    return make_store(tmp_path_factory.mktemp("cli") / "store")


@pytest.fixture
def store(shared_store, tmp_path):
    """A private copy, for the tests that write."""
    copy = tmp_path / "store"
    shutil.copytree(shared_store, copy)
    return copy


@pytest.fixture
def unchanged(shared_store):
    """The shared store, checked to be byte-for-byte unchanged when the test ends."""
    before = tree_digest(shared_store)
    yield shared_store
    assert tree_digest(shared_store) == before, "a read-only command wrote into the store"


@pytest.fixture
def java_copy(java_store, tmp_path):
    """A writable copy of the Java broker's store (tests/data)."""
    copy = tmp_path / "java-store"
    shutil.copytree(java_store, copy)
    for dirpath, _dirs, files in os.walk(copy):
        os.chmod(dirpath, 0o755)
        for name in files:
            os.chmod(os.path.join(dirpath, name), 0o644)
    return copy


# ---------------------------------------------------------------------------------------------
# the Java broker's store


def test_java_store_copy_answers_every_lookup_without_writing_a_byte(run, java_copy):
    data = (java_copy / "commitlog" / "00000000000000000000").read_bytes()
    rows, _, _ = rocketstore.lowlevel.decode_batch(data)
    tenth = rocketstore.lowlevel.decode_record(data, int(rows[10]["position"]))
    before = tree_digest(java_copy)
    s = ("--store", java_copy)

    found = json_lines(run(*s, "--json", "query-by-key", "abc", tenth.keys, check=0).stdout)
    assert [(m["queue_offset"], m["keys"]) for m in found] == [(10, tenth.keys)]

    by_id = run(*s, "query-by-id", JAVA_LAST_MSG_ID, check=0).stdout
    assert "192.168.71.1:8123" in by_id and "Queue offset:     46" in by_id
    assert "Once, there was a chance for me!" in by_id

    last = json_lines(run(*s, "--json", "query-by-offset", "abc", 0, 46, check=0).stdout)
    assert len(last) == 1
    assert (last[0]["msg_id"], last[0]["commitlog_offset"], last[0]["queue_offset"]) == (
        JAVA_LAST_MSG_ID,
        7912,
        46,
    )
    assert last[0]["store_host"] == "192.168.71.1:8123" and last[0]["tags"] == "TAG1"
    assert last[0]["properties"]["0"] == "imagoodperson0"

    verified = run(*s, "verify", check=0)
    assert verified.stdout.startswith("OK: 47 records") and verified.stderr == ""

    stats = json.loads(run(*s, "stats", "--json", check=0).stdout)
    assert stats["messages"] == 47
    assert stats["topics"]["abc"]["queues"] == [
        {"queue_id": 0, "min_offset": 0, "max_offset": 47, "messages": 47}
    ]

    dumped = json_lines(run(*s, "--json", "dump", check=0).stdout)
    assert [m["queue_offset"] for m in dumped] == list(range(47))
    consumed = json_lines(run(*s, "--json", "consume", "abc", "--group", "g", "--max", "100", check=0).stdout)
    assert len(consumed) == 47

    assert tree_digest(java_copy) == before, "a read-only command wrote into the Java store"


def test_recover_rebuilds_the_java_stores_consume_queue_and_index(run, java_copy):
    assert not (java_copy / "consumequeue").exists()
    out = json.loads(run("--store", java_copy, "--json", "recover", check=0).stdout)
    assert out["end_offset"] == 8192 and out["messages"] == 47 and out["dispatched_records"] == 47
    assert (java_copy / "consumequeue" / "abc" / "0").is_dir()
    assert any((java_copy / "index").iterdir())
    again = run("--store", java_copy, "recover", check=0).stdout  # nothing left to rebuild
    assert "last shutdown: clean" in again and "47 messages in 1 queue of 1 topic" in again


# ---------------------------------------------------------------------------------------------
# lookups


def test_query_by_key_lists_matches_as_table_and_json(run, unchanged):
    s = ("--store", unchanged)
    table = run(*s, "query-by-key", "T", "k7", check=0).stdout.splitlines()
    assert table[0].split() == [
        "COMMITLOG",
        "SIZE",
        "TOPIC",
        "QUEUE",
        "OFFSET",
        "STORED",
        "MSG_ID",
        "TAGS",
        "KEYS",
        "BODY",
    ]
    assert len(table) == 2 and table[1].endswith("body 7")
    shared = json_lines(run(*s, "queryMsgByKey", "T", "shared", "--json", "--max", "5", check=0).stdout)
    assert len(shared) == 5 and all(m["keys"].endswith(" shared") for m in shared)
    # --begin after the old messages' time: the key 'shared' is only on old messages
    first_new = json_lines(run(*s, "--json", "query-by-key", "T", f"k{OLD_MESSAGES}", check=0).stdout)[0]
    gone = run(*s, "query-by-key", "T", "shared", "--begin", first_new["store_timestamp"])
    assert gone.returncode == 1 and gone.stdout == ""
    assert gone.stderr == "rocketstore: error: no message of topic 'T' with key 'shared'\n"


def test_query_by_id_and_unique_key_find_the_same_message(run, unchanged):
    s = ("--store", unchanged)
    m = json_lines(run(*s, "--json", "query-by-key", "T", "k42", check=0).stdout)[0]
    assert set(m) >= {
        "topic",
        "queue_id",
        "queue_offset",
        "commitlog_offset",
        "size",
        "msg_id",
        "unique_key",
        "keys",
        "tags",
        "flag",
        "sys_flag",
        "born_timestamp",
        "born_host",
        "store_timestamp",
        "store_host",
        "reconsume_times",
        "body_crc",
        "properties",
        "body",
    }
    assert m["store_host"] == "10.0.0.7:10911" and m["keys"] == "k42 shared" and m["tags"] == "B"
    by_id = json_lines(run(*s, "--json", "queryMsgById", m["msg_id"].lower(), check=0).stdout)
    by_unique = json_lines(run(*s, "--json", "queryMsgByUniqueKey", "T", m["unique_key"], check=0).stdout)
    # mqadmin's queryMsgById also takes a client msgId
    by_client_id = json_lines(run(*s, "--json", "query-by-id", m["unique_key"], check=0).stdout)
    assert by_id == by_unique == by_client_id == [m]
    text = run(*s, "query-by-unique-key", "T", m["unique_key"], check=0).stdout
    assert f"Message ID:       {m['msg_id']}" in text and "Body:             body 42" in text


def test_query_by_offset_and_binary_bodies(run, unchanged):
    s = ("--store", unchanged)
    text = run(*s, "query-by-offset", "Bin", 0, 0, check=0).stdout
    assert "Body:             <256 bytes, not UTF-8 text: --json prints it as base64>" in text
    m = json_lines(run(*s, "--json", "query-by-offset", "Bin", 0, 0, check=0).stdout)[0]
    assert m["body_encoding"] == "base64" and base64.b64decode(m["body"]) == bytes(range(256))


# ---------------------------------------------------------------------------------------------
# put, consume


def test_put_prints_where_the_message_went_and_it_can_be_found(run, store):
    s = ("--store", store)
    put = json.loads(
        run(
            *s,
            "--json",
            "put",
            "T",
            "héllo",
            "--tags",
            "X",
            "--keys",
            "a b",
            "--property",
            "p=1",
            "--property",
            "q=x=y",
            "--queue",
            2,
            "--sync",
            check=0,
        ).stdout
    )
    assert put["status"] == "PUT_OK" and put["queue_id"] == 2 and put["queue_offset"] == 75
    assert set(put) >= {"msg_id", "unique_key", "commitlog_offset"}
    m = json_lines(run(*s, "--json", "query-by-id", put["msg_id"], check=0).stdout)[0]
    assert (m["body"], m["tags"], m["keys"], m["properties"]["p"], m["properties"]["q"]) == (
        "héllo",
        "X",
        "a b",
        "1",
        "x=y",
    )
    assert m["unique_key"] == put["unique_key"] and m["commitlog_offset"] == put["commitlog_offset"]
    text = run(*s, "put", "Fresh", "-", input=b"\xff\x00binary from stdin", check=0).stdout
    fields = dict(line.split(":", 1) for line in text.splitlines())
    assert fields["Status"].strip() == "PUT_OK" and fields["Topic"].strip() == "Fresh"
    queue = int(fields["Queue"])
    assert 0 <= queue < 4 and fields["Queue offset"].strip() == "0"
    got = json_lines(run(*s, "--json", "query-by-offset", "Fresh", queue, 0, check=0).stdout)[0]
    assert base64.b64decode(got["body"]) == b"\xff\x00binary from stdin"


def test_consume_reads_without_committing_then_commits_with_commit(run, store):
    s = ("--store", store)
    before = tree_digest(store)
    peek = json_lines(
        run(*s, "--json", "consume", "T", "--group", "g1", "--queue", 0, "--max", 3, check=0).stdout
    )
    assert [m["queue_offset"] for m in peek] == [10, 11, 12]  # from g1's committed offset
    assert tree_digest(store) == before
    text = run(*s, "consume", "T", "--group", "g2", "--tags", "A", "--max", 4, "--commit", check=0).stdout
    lines = text.splitlines()
    assert lines[0].startswith("COMMITLOG") and all(" T " in line and " A " in line for line in lines[1:5])
    assert lines[5] == "4 messages of T for group g2; next offsets (committed):"
    again = json_lines(
        run(*s, "--json", "consume", "T", "--group", "g2", "--tags", "A", "--max", 1, check=0).stdout
    )
    assert again[0]["queue_offset"] == 4 and again[0]["tags"] == "A"  # queue 0 holds only B
    stats = json.loads(run(*s, "--json", "stats", check=0).stdout)
    g2 = stats["groups"]["g2"]["queues"]
    assert [(q["queue_id"], q["committed"]) for q in g2] == [(0, 75), (1, 4)]
    assert stats["groups"]["g1"]["lag"] == 65
    from_end = run(*s, "consume", "T", "--group", "g3", "--queue", 1, "--from", 75, check=0).stdout
    assert from_end.startswith("0 messages of T for group g3")


# ---------------------------------------------------------------------------------------------
# stats, verify, recover


def test_stats_table_and_json(run, unchanged):
    text = run("--store", unchanged, "stats", check=0).stdout
    assert f"messages:      {OLD_MESSAGES + NEW_MESSAGES + 1} in 2 topics, 5 queues" in text
    assert "GROUP  TOPIC  QUEUE  COMMITTED  MAX_OFFSET  LAG" in text
    assert text.splitlines()[-1].split() == ["g1", "T", "0", "10", "75", "65"]
    stats = json.loads(run("--store", unchanged, "info", "--json", check=0).stdout)
    assert stats["messages"] == OLD_MESSAGES + NEW_MESSAGES + 1 and stats["segments"] >= 3
    assert stats["segment_size"] == SEGMENT and stats["bytes"] == stats["max_offset"] - stats["min_offset"]
    assert {t: e["messages"] for t, e in stats["topics"].items()} == {"Bin": 1, "T": 300}


def test_verify_passes_and_reports_a_damaged_record(run, unchanged, store):
    ok = json.loads(run("--store", unchanged, "verify", "--json", check=0).stdout)
    assert ok["ok"] is True and ok["records"] == OLD_MESSAGES + NEW_MESSAGES + 1 and ok["problems"] == []
    m = json_lines(run("--store", store, "--json", "query-by-key", "T", "k5", check=0).stdout)[0]
    segment = store / "commitlog" / f"{m['commitlog_offset'] // SEGMENT * SEGMENT:020d}"
    data = bytearray(segment.read_bytes())
    data[data.index(b"body 5", m["commitlog_offset"] % SEGMENT)] ^= 0xFF  # a byte of its body
    segment.write_bytes(bytes(data))
    bad = run("--store", store, "verify")
    assert bad.returncode == 1 and bad.stdout.startswith("FAILED: 1 problem")
    assert f"  offset {m['commitlog_offset']}: " in bad.stdout and "CRC" in bad.stdout
    assert json.loads(run("--store", store, "--json", "verify", check=1).stdout)["ok"] is False


def test_recover_rebuilds_deleted_consume_queues(run, store):
    shutil.rmtree(store / "consumequeue")
    text = run("--store", store, "recover", check=0).stdout
    assert "last shutdown: clean" in text and "301 messages in 5 queues of 2 topics" in text
    assert sorted(os.listdir(store / "consumequeue" / "T")) == ["0", "1", "2", "3"]


# ---------------------------------------------------------------------------------------------
# dump, export


def test_dump_ranges_topics_and_limits(run, unchanged):
    s = ("--store", unchanged)
    everything = json_lines(run(*s, "--json", "dump", check=0).stdout)
    assert len(everything) == OLD_MESSAGES + NEW_MESSAGES + 1
    offsets = [m["commitlog_offset"] for m in everything]
    assert offsets == sorted(offsets)
    mid = offsets[100] + 1  # inside a record: starts at the next one
    part = json_lines(run(*s, "dump", "--json", "--from", mid, "--to", offsets[110], check=0).stdout)
    assert [m["commitlog_offset"] for m in part] == offsets[101:110]
    table = run(*s, "dump", "--topic", "Bin", check=0).stdout.splitlines()
    assert len(table) == 2 and "<256 bytes, binary>" in table[1]
    assert len(run(*s, "dump", "--max", 3, check=0).stdout.splitlines()) == 4


def test_export_json_lines_filtered_by_topic_and_time(run, unchanged, tmp_path):
    s = ("--store", unchanged)
    first_new = json_lines(run(*s, "--json", "query-by-key", "T", f"k{OLD_MESSAGES}", check=0).stdout)[0]
    out = tmp_path / "new.jsonl"
    summary = run(*s, "export", "--topic", "T", "--begin", first_new["store_timestamp"], "-o", out, check=0)
    assert summary.stdout == f"exported {NEW_MESSAGES} messages to {out} (jsonl)\n"
    exported = json_lines(out.read_text())
    assert [m["body"] for m in exported] == [
        f"body {i}" for i in range(OLD_MESSAGES, OLD_MESSAGES + NEW_MESSAGES)
    ]
    old = json_lines(run(*s, "export", "--end", first_new["store_timestamp"] - 1, check=0).stdout)
    assert len(old) == OLD_MESSAGES
    stamp = first_new["store_timestamp"]
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(stamp // 1000)) + f".{stamp % 1000:03d}+00:00"
    assert json_lines(run(*s, "export", "--begin", iso, "--topic", "T", check=0).stdout) == exported
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".rocketstore-export")]


def test_export_parquet(run, unchanged, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "all.parquet"
    summary = json.loads(run("--store", unchanged, "--json", "export", "-o", out, check=0).stdout)
    assert summary == {"exported": OLD_MESSAGES + NEW_MESSAGES + 1, "format": "parquet", "file": str(out)}
    table = pq.read_table(out)
    assert table.num_rows == OLD_MESSAGES + NEW_MESSAGES + 1
    rows = table.to_pylist()
    assert rows[0]["body"] == b"body 0" and rows[-1]["body"] == bytes(range(256))
    assert dict(rows[0]["properties"])["KEYS"] == "k0 shared"


def test_export_parquet_without_pyarrow_is_one_clear_error(run, unchanged, tmp_path):
    fake = tmp_path / "fake-site"
    (fake / "pyarrow").mkdir(parents=True)
    (fake / "pyarrow" / "__init__.py").write_text("raise ImportError('No module named pyarrow')\n")
    env = _env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(fake), env.get("PYTHONPATH")]))
    out = tmp_path / "x.parquet"
    proc = run("--store", unchanged, "export", "--format", "parquet", "-o", out, env=env, check=1)
    assert proc.stderr.startswith("rocketstore: error: Parquet export needs pyarrow")
    assert proc.stderr.count("\n") == 1 and not out.exists()


# ---------------------------------------------------------------------------------------------
# errors, options, pipes


@pytest.mark.parametrize(
    "args, status, message",
    [
        (("--store", "{tmp}/missing", "stats"), 1, "no store at {tmp}/missing"),
        (("--store", "{tmp}", "verify"), 1, "{tmp} is not a store: it has no commitlog/ directory"),
        (("--store", "{tmp}/file", "dump"), 1, "{tmp}/file is not a store: it is not a directory"),
        (("--store", "{tmp}", "put", "T", "x"), 1, "{tmp} is not a store: it has no commitlog/ directory"),
        (("--store", "{store}", "query-by-id", "XYZ"), 1, "bad msgId: offsetMsgId 'XYZ' is not 32 or 56 hex"),
        (
            ("--store", "{store}", "query-by-id", "0A00000700002A9F00000000DEADBEEF"),
            1,
            "no message with msgId",
        ),
        (("--store", "{store}", "query-by-key", "Nope", "k1"), 1, "unknown topic 'Nope' (topics: Bin, T)"),
        (
            ("--store", "{store}", "query-by-offset", "T", "9", "0"),
            1,
            "unknown queue 9 of topic 'T' (queues: 0..3)",
        ),
        (
            ("--store", "{store}", "query-by-offset", "T", "1", "75"),
            1,
            "offset 75 is out of range: queue 1 of 'T' holds offsets 0..74",
        ),
        (
            ("--store", "{store}", "consume", "T", "--group", "g", "--from", "99"),
            1,
            "offset 99 is out of range",
        ),
        (
            ("--store", "{store}", "dump", "--from", "99999999"),
            1,
            "offset 99999999 is out of range: the CommitLog",
        ),
        (
            ("--store", "{store}", "query-by-unique-key", "T", "00FF"),
            1,
            "no message of topic 'T' with UNIQ_KEY '00FF'",
        ),
        (("--store", "{store}", "put", "bad topic", "x"), 1, "topic 'bad topic' has characters outside"),
        (
            ("--store", "{store}", "put", "T", "x", "--queue", "4"),
            1,
            "queue id 4 out of range: topic 'T' has 4 queues",
        ),
        (
            ("--store", "{store}", "put", "T", "x", "--property", "novalue"),
            2,
            "--property 'novalue': expected KEY=VALUE",
        ),
        (
            ("--store", "{store}", "query-by-offset", "T", "x", "0"),
            2,
            "argument QUEUE_ID: 'x' is not a queue id",
        ),
        (("--store", "{store}", "query-by-key", "T", "k", "--max", "0"), 2, "0"),
        (
            ("--store", "{store}", "query-by-key", "T", "k", "--begin", "yesterday"),
            2,
            "'yesterday' is neither",
        ),
        (("frobnicate",), 2, "invalid choice: 'frobnicate'"),
        # numbers too large for the store's fields: one line, exit 2 (they printed OverflowError tracebacks)
        (
            ("--store", "{store}", "put", "T", "x", "--queue", "99999999999999999999999"),
            2,
            "is above 2147483647",
        ),
        (
            ("--store", "{store}", "query-by-key", "T", "k", "--begin", "99999999999999999999"),
            2,
            "is above 9223372036854775807",
        ),
        (("--store", "{store}", "query-by-key", "T", "k", "--end", "99999999999999999999"), 2, "is above"),
        (("--store", "{store}", "query-by-offset", "T", "0", "99999999999999999999"), 2, "is above"),
        (("--store", "{store}", "query-by-offset", "T", "99999999999", "0"), 2, "is above 2147483647"),
        (
            ("--store", "{store}", "consume", "T", "--group", "g", "--max", "99999999999999999999"),
            2,
            "is above",
        ),
        (("--store", "{store}", "consume", "T", "--group", "g", "--queue", "2147483648"), 2, "is above"),
        (("--store", "{store}", "dump", "--from", "99999999999999999999"), 2, "is above"),
        (("--store", "{store}", "dump", "--to", "99999999999999999999"), 2, "is above"),
        (("--store", "{tmp}/new", "quickstart", "--body-size", "99999999999999999999"), 2, "is above"),
    ],
)
def test_user_mistakes_are_one_line_on_stderr(run, store, tmp_path, args, status, message):
    (tmp_path / "file").write_text("not a store")
    args = [a.format(tmp=tmp_path, store=store) for a in args]
    before = tree_digest(store)
    proc = run(*args)
    assert proc.returncode == status, (proc.stdout, proc.stderr)
    prefix = "rocketstore: error: " if status == 1 else "rocketstore"
    assert proc.stderr.startswith(prefix) and message.format(tmp=tmp_path) in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stdout == ""
    assert tree_digest(store) == before


def test_a_written_store_takes_writes_through_its_writer_but_refuses_recover(run, store):
    with MessageStore(store) as holder:
        holder.put("T", b"while locked")
        proc = run("--store", store, "recover")  # recovery is the writer's
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1
        assert "is locked by another writer" in proc.stderr and "read-only commands work" in proc.stderr
        run("--store", store, "put", "T", "joined", "--queue", "3", check=0)  # joins the holder
        assert holder.get_by_queue_offset("T", 3, holder.max_queue_offset("T", 3) - 1).body == b"joined"
        consume = ("consume", "T", "--group", "g9", "--queue", "3", "--max", "1000", "--commit")
        run("--store", store, *consume, check=0)
        assert holder.committed_offset("g9", "T", 3) == holder.max_queue_offset("T", 3)
        stats = json.loads(run("--store", store, "--json", "stats", check=0).stdout)
        assert stats["topics"]["T"]["messages"] == OLD_MESSAGES + NEW_MESSAGES + 2


def test_defaults_to_rocketstore_home_and_takes_options_after_the_command(run, unchanged, tmp_path):
    proc = run("stats", "--json", env=_env(tmp_path, ROCKETSTORE_HOME=str(unchanged)), check=0)
    assert json.loads(proc.stdout)["store"] == str(unchanged)
    proc = run("query-by-key", "T", "k1", "--store", unchanged, "--json", check=0)
    assert json_lines(proc.stdout)[0]["keys"] == "k1 shared"


def test_python_dash_m_runs_the_same_command_line(unchanged, tmp_path):
    env = _env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(pathlib.Path(rocketstore.__file__).parents[1]), os.environ.get("PYTHONPATH")])
    )
    proc = subprocess.run(
        [sys.executable, "-m", "rocketstore", "--store", str(unchanged), "--version"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stdout.startswith(f"rocketstore {rocketstore.__version__} (")


def test_a_closed_pipe_ends_quietly(unchanged, tmp_path):
    proc = subprocess.Popen(
        COMMAND + ["--store", str(unchanged), "--json", "dump"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=_env(tmp_path),
    )
    first = proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does
    _, err = proc.communicate(timeout=60)
    assert json.loads(first)["commitlog_offset"] == 0
    assert err == b"" and proc.returncode == 141


def test_quickstart_writes_consumes_and_queries(run, tmp_path):
    path = tmp_path / "qs"
    with MessageStore(
        path,
        **dict(
            SMALL,
            commitlog_file_size=256 * 1024,
            consume_queue_units=1024,
            index_slots=4096,
            index_count=16384,
        ),
    ) as setup:
        setup.put("Setup", b"x", keys="k")  # files whose sizes quickstart's open detects
    proc = run("--store", path, "quickstart", "--count", 2000, "--body-size", 16, check=0)
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"rocketstore {rocketstore.__version__}") and str(path) in lines[0]
    for start in (
        "put, one per call",
        "put, tags + keys",
        "put_batch",
        "put_pipelined, durable",
        "consume, get_message",
        "query_by_key",
        "scan (columnar)",
        "read by offset",
        "first tagged message: msg_id",
        "store: ",
    ):
        assert any(line.startswith(start) for line in lines), start
    assert "2,000 messages" in proc.stdout and proc.stderr == ""
    stats = json.loads(run("--store", path, "--json", "stats", check=0).stdout)
    assert stats["topics"]["QuickStart"]["messages"] == 2000 + 2000 + 2000 + 200
    assert stats["groups"]["QuickStartGroup"]["lag"] == 2000 + 200


# ---------------------------------------------------------------------------------------------
# the progress bar


def _run_on_terminal(args, tmp_path, columns=100):
    """Run the CLI with stderr on a pseudo-terminal; returns (status, stdout, terminal bytes)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    proc = subprocess.Popen(
        COMMAND + [str(a) for a in args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        env=_env(tmp_path),
    )
    os.close(slave)
    screen = bytearray()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            screen += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    stdout = proc.stdout.read().decode()
    proc.stdout.close()
    return proc.wait(timeout=60), stdout, bytes(screen)


@pytest.mark.parametrize("command, label", [("verify", b"verify"), ("recover", b"dispatch")])
def test_progress_bar_renders_on_a_terminal_and_is_erased(store, tmp_path, command, label):
    if command == "recover":
        shutil.rmtree(store / "consumequeue")  # something to dispatch
    status, stdout, screen = _run_on_terminal(["--store", store, command], tmp_path)
    assert status == 0, (stdout, screen)
    frames = screen.split(b"\r")
    assert any(f.startswith(label) and b"100%" in f for f in frames), screen
    assert all(len(f.decode().replace("\x1b[K", "").replace("\x1b[2K", "")) < 100 for f in frames)
    assert screen.endswith(b"\r\x1b[2K"), screen  # the line is cleared at the end
    assert b"\n" not in screen  # nothing else was written to the terminal
    assert stdout.startswith("OK: 301 records") if command == "verify" else "dispatched:" in stdout


def test_progress_stays_quiet_off_a_terminal():
    class Pipe:
        written = ""

        def isatty(self):
            return False

        def write(self, s):
            self.written += s

        def flush(self):
            pass

    pipe = Pipe()
    with Progress("verify", stream=pipe) as bar:
        bar("verify", 1, 2)
        bar("verify", 2, 2)
    assert pipe.written == ""


def test_message_dict_gives_text_bodies_as_text_and_others_as_base64(impl):
    for body, expected, encoding in ((b"caf\xc3\xa9", "café", None), (b"\xff\xfe", "//4=", "base64")):
        record = impl.codec.encode_record(
            topic="T",
            body=body,
            properties=impl.codec.encode_properties({"TAGS": "t"}),
            store_host=("10.0.0.7", 10911),
            born_host=("10.0.0.8", 5),
        )
        d = message_dict(impl.codec.decode_record(record))
        assert (d["body"], d.get("body_encoding"), d["tags"], d["born_host"]) == (
            expected,
            encoding,
            "t",
            "10.0.0.8:5",
        )
        assert json.loads(json.dumps(d)) == d


def test_stats_shows_delayed_and_dead_letter_counts(run, tmp_path):
    store_dir = tmp_path / "delays"
    with MessageStore(store_dir, store_host="10.0.0.1", schedule_interval_ms=0) as store:
        store.put("TopicA", b"a", delay_level=3)
        store.put("TopicA", b"b", delay_level=5)
        store.put("TopicA", b"c", delay_level=5)
        failed = store.read(store.put("TopicA", b"d").commitlog_offset)
        store.send_back("G1", failed, -1)
    text = run("--store", store_dir, "stats", check=0).stdout
    assert "delayed:       3 (level 3: 1, level 5: 2)" in text
    assert "dead letters:  1 (G1: 1)" in text
    report = json.loads(run("--store", store_dir, "--json", "stats", check=0).stdout)
    assert report["delayed"] == {"3": 1, "5": 2}
    assert report["dead_letters"] == {"G1": 1}
