"""Whole store directories mutated at random, then opened.

A small store — a few hundred messages in four topics, 16 KiB CommitLog segments, ConsumeQueue files
of 16 units, index files of 64 items, the four config files with their ``.bak`` — is copied and
damaged: bits flipped and lengths, magic codes and flags overwritten in segments, queue, index and
config files; files truncated, emptied, grown past their size, deleted from the middle, swapped,
replaced by garbage, by a directory or by a FIFO; garbage JSON; a checkpoint of 0, 10 or 8192
bytes; junk files and directories in ``commitlog/``, ``consumequeue/`` and ``index/``; an abort
file (a crash). Then the store is opened, read-only and writable, with each twin. It must:

* open and return only intact messages — every message ``iter_messages``, ``read``,
  ``get_message`` and ``query_by_key`` hand out decodes from the segment bytes with
  ``decode_record(..., check_crc=True)`` — or refuse with a :class:`RocketStoreError`;
* never crash the interpreter and never hang: a watchdog (``faulthandler``) ends a hung example
  with every thread's stack, and a child process runs a batch of damaged stores so that a
  segfault or an abort is reported as a failure with the damage that caused it;
* after a writable open, take a put, close, and reopen read-only with everything intact.

The suite runs a modest number of examples; ``ROCKETSTORE_FUZZ_EXAMPLES=N`` runs N per test. Long
runs, each batch in a child process::

    PYTHONPATH=src python tests/test_fuzz_store.py --iterations 1000 [--seed S] [--impl c|py|both]
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import random
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import zlib

import pytest

if __name__ == "__main__" and "--child" not in sys.argv:
    # script mode from a checkout: the package in src/ (a child the tests start gets the parent's
    # package through PYTHONPATH: under CI that is the installed, compiled one)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "src"))

from rocketstore import MessageStore, _impl
from rocketstore.consume import GetMessageStatus
from rocketstore.errors import (
    CompressionUnavailableError,
    CorruptRecordError,
    MessageNotFoundError,
    RocketStoreError,
    StoreConfigError,
)
from rocketstore.files.checkpoint import CHECKPOINT_SIZE, Checkpoint
from rocketstore.files.configfiles import (
    MAX_QUEUE_NUMS,
    ConsumerOffsetTable,
    DelayOffsetTable,
    SubscriptionGroupTable,
    TopicConfigTable,
    dumps_fastjson,
)

OPTIONS = dict(commitlog_file_size=16 * 1024, consume_queue_units=16, index_slots=16, index_count=64)
FIXED = dict(
    store_host="127.0.0.1", dispatch_interval_ms=0, schedule_interval_ms=0
)  # nothing moves while checked
TOPICS = ["T0", "T1", "T2", "%RETRY%g1"]
MESSAGES = 300
WATCHDOG_S = 120  # one example (open, read everything, put, reopen) taking longer is a hang
CHILD_TIMEOUT_S = 300

_EXAMPLES = int(os.environ.get("ROCKETSTORE_FUZZ_EXAMPLES", "0") or 0)

TWIN_NAMES = ["py"] + (["c"] if _impl.COMPILED is not None else [])


# ---- the base store ---------------------------------------------------------------------------------


def build_store(path: str, implementation: str) -> list[tuple[int, str, int, str]]:
    """Write the base store; returns (commitlog offset, topic, queue id, key) of every message."""
    rng = random.Random(20240611)
    written = []
    with MessageStore(path, implementation=implementation, **OPTIONS, **FIXED) as store:
        for i in range(MESSAGES):
            topic = TOPICS[i % len(TOPICS)]
            key = f"k{i}"
            body = rng.randbytes(rng.choice([0, 1, 20, 200, 700]))
            args = (
                topic,
                body,
                f"tag{i % 3}",
                f"{key} shared{i % 5}",
                {"DELAY": "3"} if i % 17 == 0 else None,
                (i // len(TOPICS)) % 2,
                0,
                None,
                0,
            )
            # a user's put cannot reach %RETRY%g1 (a system topic): the store's internal path can
            r = store._putter._put(store, *args)
            written.append((r.commitlog_offset, topic, r.queue_id, key))
        store.put_batch("T1", [b"batch-%d" % i for i in range(20)], tags="batch", queue_id=0)
        store.commit_offset("g1", "T0", 0, 5)
        store.commit_offset("g2", "T1", 1, 3)
    config = os.path.join(path, "config")
    for cls in (DelayOffsetTable, SubscriptionGroupTable):
        table = cls.open(os.path.join(config, cls.FILE_NAME))
        for level in (1, 2):  # twice, so a .bak exists too
            if cls is DelayOffsetTable:
                table.update(level, 10 * level)
            else:
                table.create(f"g{level}")
            table.persist()
    for cls in (TopicConfigTable, ConsumerOffsetTable):
        table = cls.open(os.path.join(config, cls.FILE_NAME))
        table.persist(force=True)  # a .bak of each
    return written


# ---- damage ------------------------------------------------------------------------------------------

CATEGORIES = [
    "commitlog",
    "commitlog",
    "commitlog",
    "consumequeue",
    "consumequeue",
    "index",
    "config",
    "root",
]
INTERESTING_INTS = [
    -1,
    0,
    1,
    8,
    90,
    91,
    92,
    127,
    128,
    255,
    32767,
    65535,
    16384,
    16383,
    16385,
    (1 << 31) - 1,
    -(1 << 31),
    -626843481,
    -626843477,
    -875286124,
    0x10,
    0x20,
    0x30,
]
GARBAGE_JSON = [
    "",
    " ",
    "{",
    "}",
    "[]",
    "null",
    "0",
    '"x"',
    "{]",
    '{"a":}',
    "\x00\x01",
    "\xff\xfe",
    '{"topicConfigTable":{"T0":{"writeQueueNums":-3,"readQueueNums":-3}}}',
    '{"topicConfigTable":{"T0":{"writeQueueNums":2147483647}}}',
    '{"topicConfigTable":{"T0":{"writeQueueNums":"12"}},"dataVersion":{"counter":"x"}}',
    '{"topicConfigTable":{"T0":[]}}',
    '{"topicConfigTable":[1,2]}',
    '{"topicConfigTable":{"../x":{"writeQueueNums":1},"\\ud800":{}}}',
    '{"offsetTable":{"T0@g1":{0:-5,1:99999999999999999999999}}}',
    '{"offsetTable":{"T0@g1":{-1:5},"nogroup":{0:1}}}',
    '{"offsetTable":{"T0@g1":{"a":1}}}',
    '{"offsetTable":{' + "1" * 5000 + ":1}}",
    '{"dataVersion":{"counter":' + "9" * 5000 + "}}",
    "[" * 5000 + "]" * 5000,
    '{"a":' * 300 + "1" + "}" * 300,
    '{"x":1e999999,"y":-1e400}',
    '{"subscriptionGroupTable":{"g":{"retryMaxTimes":"many"}}}',
    '{"offsetTable":{1:2}}',
]


class Draw:
    """What the damage generator needs from a source of choices (hypothesis or random.Random)."""

    def __init__(self, source):
        self.source = source
        self.hypothesis = not isinstance(source, random.Random)

    def int(self, lo: int, hi: int) -> int:
        if self.hypothesis:
            from hypothesis import strategies as st

            return self.source.draw(st.integers(lo, hi))
        return self.source.randint(lo, hi)

    def pick(self, items):
        return items[self.int(0, len(items) - 1)]

    def bytes(self, lo: int, hi: int) -> bytes:
        if self.hypothesis:
            from hypothesis import strategies as st

            return self.source.draw(st.binary(min_size=lo, max_size=hi))
        return self.source.randbytes(self.source.randint(lo, hi))


def draw_damage(d: Draw, written) -> list[tuple]:
    """1 to 4 edits, each a tuple naming what it does (shown when an example fails)."""
    ops = []
    for _ in range(d.int(1, 4)):
        kind = d.pick(
            [
                "flip",
                "flip",
                "field",
                "set32",
                "truncate",
                "extend",
                "delete",
                "garbage",
                "zero",
                "json",
                "checkpoint",
                "junk",
                "special",
                "swap",
                "abort",
            ]
        )
        category = d.pick(CATEGORIES)
        which = d.int(0, 1 << 16)
        if kind == "flip":
            ops.append(("flip", category, which, d.int(0, 1 << 16), d.int(0, 7)))
        elif kind == "field":  # a length, magic or flag field of one record
            offset = written[d.int(0, len(written) - 1)][0]
            ops.append(("field", offset, d.pick([0, 4, 36, 84, 88]), d.pick(INTERESTING_INTS)))
        elif kind == "set32":
            ops.append(("set32", category, which, d.int(0, 1 << 16), d.pick(INTERESTING_INTS)))
        elif kind == "truncate":
            ops.append(("truncate", category, which, d.pick([0, 1, 7, 19, 20, 100, 4096, 8000, 16383])))
        elif kind == "extend":
            ops.append(("extend", category, which, d.pick([1, 20, 4096, 16384]), d.int(0, 255)))
        elif kind == "delete":
            ops.append(("delete", category, which))
        elif kind == "garbage":
            ops.append(("garbage", category, which, d.bytes(0, 64), d.pick([0, 20, 1384, 16384])))
        elif kind == "zero":
            ops.append(("zero", category, which, d.int(0, 1 << 16), d.pick([1, 8, 91, 4096])))
        elif kind == "json":
            ops.append(
                (
                    "json",
                    d.pick(
                        ["topics.json", "consumerOffset.json", "delayOffset.json", "subscriptionGroup.json"]
                    ),
                    d.pick(["", ".bak"]),
                    d.pick(GARBAGE_JSON),
                )
            )
        elif kind == "checkpoint":
            ops.append(("checkpoint", d.pick([0, 10, 40, 8192]), d.int(0, 255)))
        elif kind == "junk":
            ops.append(
                (
                    "junk",
                    d.pick(
                        [
                            "commitlog",
                            "consumequeue",
                            "consumequeue/T0",
                            "consumequeue/T0/0",
                            "index",
                            "config",
                            "",
                        ]
                    ),
                    d.pick(
                        [
                            "junk",
                            "0000000000000000000x",
                            "00000000000000000001",
                            "00000000000000032768",
                            "99999999999999999999",
                            "20991231235959999",
                            "2099123123595999x",
                            "7",
                            "-1",
                            "bad topic!",
                            ".hidden",
                        ]
                    ),
                    d.pick(["file", "dir"]),
                    d.bytes(0, 32),
                )
            )
        elif kind == "special":
            ops.append(("special", category, which, d.pick(["dir", "fifo", "symlink-loop"])))
        elif kind == "swap":
            ops.append(("swap", category, which, d.int(0, 1 << 16)))
        else:
            ops.append(("abort",))
    return ops


def _files(root: str, category: str) -> list[str]:
    """The files of one part of the store, sorted (paths)."""
    if category == "root":
        names = ["checkpoint", "lock", "abort"]
        return [os.path.join(root, n) for n in names if os.path.lexists(os.path.join(root, n))]
    found = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, category)):
        dirnames.sort()
        found += [os.path.join(dirpath, n) for n in sorted(filenames)]
    return found


def _pick(root: str, category: str, which: int):
    files = _files(root, category)
    return files[which % len(files)] if files else None


def _regular(path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _write_at(path: str, pos: int, data: bytes) -> None:
    if not _regular(path):
        return
    size = os.path.getsize(path)
    if size == 0:
        return
    pos %= size
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data[: size - pos])


def apply_damage(root: str, ops) -> None:  # noqa: C901 (one branch per kind of damage)
    for op in ops:
        kind = op[0]
        if kind == "field":
            offset, field, value = op[1:]
            segment = os.path.join(
                root, "commitlog", f"{offset - offset % OPTIONS['commitlog_file_size']:020d}"
            )
            if _regular(segment):
                with open(segment, "r+b") as f:
                    f.seek(offset % OPTIONS["commitlog_file_size"] + field)
                    f.write((value & 0xFFFFFFFF).to_bytes(4, "big"))
            continue
        if kind == "json":
            name, suffix, text = op[1:]
            path = os.path.join(root, "config", name + suffix)
            if os.path.lexists(path) and not _regular(path):
                continue  # a FIFO put there by an earlier edit: opening it would block
            with open(path, "wb") as f:
                f.write(text.encode("utf-8", "surrogatepass"))
            continue
        if kind == "checkpoint":
            size, fill = op[1:]
            path = os.path.join(root, "checkpoint")
            if os.path.lexists(path) and not _regular(path):
                continue
            with open(path, "wb") as f:
                f.write(bytes([fill]) * size)
            continue
        if kind == "junk":
            where, name, what, data = op[1:]
            directory = os.path.join(root, where)
            path = os.path.join(directory, name)
            if not os.path.isdir(directory) or os.path.lexists(path):
                continue
            if what == "dir":
                os.mkdir(path)
            else:
                with open(path, "wb") as f:
                    f.write(data)
            continue
        if kind == "abort":
            path = os.path.join(root, "abort")
            if not os.path.lexists(path):
                open(path, "wb").close()
            continue
        path = _pick(root, op[1], op[2])
        if path is None or not _regular(path):
            continue
        if kind == "flip":
            size = os.path.getsize(path)
            if size:
                with open(path, "r+b") as f:
                    f.seek(op[3] % size)
                    byte = f.read(1)[0]
                    f.seek(op[3] % size)
                    f.write(bytes([byte ^ (1 << op[4])]))
        elif kind == "set32":
            _write_at(path, op[3], (op[4] & 0xFFFFFFFF).to_bytes(4, "big"))
        elif kind == "truncate":
            os.truncate(path, min(op[3], os.path.getsize(path)))
        elif kind == "extend":
            with open(path, "ab") as f:
                f.write(bytes([op[4]]) * op[3])
        elif kind == "delete":
            os.unlink(path)
        elif kind == "garbage":
            data, length = op[3], op[4]
            with open(path, "wb") as f:
                f.write((data * (length // max(1, len(data)) + 1))[:length] if length else data)
        elif kind == "zero":
            _write_at(path, op[3], bytes(op[4]))
        elif kind == "special":
            os.unlink(path)
            if op[3] == "dir":
                os.mkdir(path)
            elif op[3] == "fifo":
                os.mkfifo(path)
            else:
                os.symlink(os.path.basename(path), path)  # a link to itself: ELOOP
        elif kind == "swap":
            other = _pick(root, op[1], op[3])
            if other is not None and other != path and _regular(other):
                shutil.copyfile(other, path)


# ---- the checks ----------------------------------------------------------------------------------------


class Violation(AssertionError):
    pass


def _segments(root: str) -> dict:
    """{start offset: bytes} of the CommitLog segments as they are on disk now."""
    found = {}
    directory = os.path.join(root, "commitlog")
    for name in os.listdir(directory) if os.path.isdir(directory) else ():
        path = os.path.join(directory, name)
        if len(name) == 20 and name.isdigit() and _regular(path):
            with open(path, "rb") as f:
                found[int(name)] = f.read()
    return found


_COMPRESSION_FLAGS = 0x701  # COMPRESSED_FLAG and the codec bits (a producer's compressed body)
_MAGICS = [v.to_bytes(4, "big", signed=True) for v in (-626843481, -626843477)]  # V1, V2


def _decodes_at(codec, segments: dict, at: int, m) -> bool:
    size = OPTIONS["commitlog_file_size"]
    data = segments.get(at - at % size)
    if data is None:
        return False
    try:
        return codec.decode_record(data, at % size, check_crc=True) == m
    except RocketStoreError:
        return False


def _check_intact(codec, segments: dict, m, where: str, at=None) -> None:
    """``m`` is, field for field, a record on disk that decodes with ``check_crc=True``.

    ``at`` is where it was read (default: the PHYSICALOFFSET it carries, which a damaged record may
    misstate: then every record start on disk is tried). A message whose sysFlag, which no CRC
    covers, says its body is compressed when it is not raises a typed error when its body is
    read: that says it is damaged (nothing wrong is handed out), and is accepted."""
    try:
        body = bytes(m.body)
    except (CorruptRecordError, CompressionUnavailableError):
        if not m.sys_flag & _COMPRESSION_FLAGS:
            raise
        return
    if body and zlib.crc32(body) & 0x7FFFFFFF != m.body_crc:
        raise Violation(
            f"{where}: the message at {at if at is not None else m.commitlog_offset} fails its body CRC"
        )
    for candidate in (at, m.commitlog_offset):
        if candidate is not None and _decodes_at(codec, segments, candidate, m):
            return
    for start, data in segments.items():
        for magic in _MAGICS:
            p = data.find(magic, 4)
            while p >= 0:
                if _decodes_at(codec, segments, start + p - 4, m):
                    return
                p = data.find(magic, p + 1)
    raise Violation(
        f"{where}: the message read at {at} (commitlog_offset {m.commitlog_offset}) is no "
        f"CRC-valid record on disk"
    )


def check_readable(store, codec, root: str, written) -> int:
    """Every message the store hands out is intact; returns how many records it scans."""
    segments = _segments(root)
    count = 0
    for start, rows in store.scan():
        for row in rows:
            at = start + int(row["position"])
            _check_intact(
                codec,
                segments,
                codec.record_from_row(segments.get(start, b""), row) if start in segments else store.read(at),
                "scan/iter_messages",
                at,
            )
            count += 1
    if sum(1 for _ in store.iter_messages()) != count:
        raise Violation("iter_messages and scan disagree on the number of records")
    for offset, _topic, _qid, _key in written[::7]:
        try:
            m = store.read(offset)
        except MessageNotFoundError:
            continue
        _check_intact(codec, segments, m, "read", offset)
    for (topic, queue_id), (lo, _hi) in sorted(store.queues().items()):
        offset = lo
        for _ in range(50):
            result = store.get_message("fuzz", topic, queue_id, offset, max_msgs=32)
            for m, unit in zip(result.messages, result.units):
                _check_intact(
                    codec, segments, m, f"get_message({topic}, {queue_id})", int(unit["commitlog_offset"])
                )
            if result.status != GetMessageStatus.FOUND or result.next_begin_offset <= offset:
                break
            offset = result.next_begin_offset
    for _offset, topic, _qid, key in written[::41]:
        for m in store.query_by_key(topic, key):
            _check_intact(codec, segments, m, f"query_by_key({topic}, {key})")
    return count


def open_damaged(root: str, implementation: str, read_only: bool, detect: bool, written) -> str:
    """Open the damaged store and check it; returns "refused", "opened" or "opened+reopened"."""
    options = dict(FIXED) if detect else dict(OPTIONS, **FIXED)
    codec = _impl.get(implementation).codec
    try:
        store = MessageStore(root, read_only=read_only, implementation=implementation, **options)
    except RocketStoreError:
        return "refused"
    with store:
        check_readable(store, codec, root, written)
        if read_only:
            return "opened"
        try:
            r = store.put("T0", b"after the damage", keys="fresh-key")
        except RocketStoreError:  # e.g. a directory where the next segment goes: a clear error
            r = None
    # what a writable open repaired stays repaired: it reopens with everything intact
    try:
        store = MessageStore(root, read_only=True, implementation=implementation, **options)
    except RocketStoreError as exc:
        raise Violation(f"the store opened for writing, then refused to reopen: {exc!r}") from None
    with store:
        check_readable(store, codec, root, written)
        if r is None:
            return "opened+reopened (put refused)"
        try:
            body = store.read(r.commitlog_offset).body
        except MessageNotFoundError:
            body = None
        if body != b"after the damage":
            raise Violation("the put made after the damage is gone after a reopen")
    return "opened+reopened"


class _Watchdog:
    """Ends the process with every thread's stack if the block runs longer than ``seconds``."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def __enter__(self):
        faulthandler.dump_traceback_later(self.seconds, exit=True)

    def __exit__(self, *exc):
        faulthandler.cancel_dump_traceback_later()


def run_case(
    base: str, scratch: str, ops, implementation: str, read_only: bool, detect: bool, written
) -> str:
    """Copy the base store into ``scratch``, damage it with ``ops``, open and check it."""
    root = os.path.join(scratch, "store")
    if os.path.lexists(root):
        shutil.rmtree(root)
    shutil.copytree(base, root, symlinks=True)
    try:
        apply_damage(root, ops)
        with _Watchdog(WATCHDOG_S):
            return open_damaged(root, implementation, read_only, detect, written)
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---- pytest ----------------------------------------------------------------------------------------------


class BaseStores(dict):
    """{twin: (base store path, written)}, with a short repr for hypothesis' failure reports."""

    def __repr__(self) -> str:
        return f"<base stores of {sorted(self)}>"


@pytest.fixture(scope="module")
def base_stores(tmp_path_factory):
    """The undamaged stores, built once per module."""
    out = BaseStores()
    for name in TWIN_NAMES:
        path = str(tmp_path_factory.mktemp(f"base-{name}") / "store")
        out[name] = (path, build_store(path, name))
    return out


def test_base_store_is_readable_and_every_message_is_found(base_stores, tmp_path):
    """Sanity of the harness: undamaged, every message comes back through every read path."""
    for name, (base, written) in base_stores.items():
        for read_only in (True, False):
            assert run_case(base, str(tmp_path), [], name, read_only, False, written) != "refused"
        with MessageStore(base, read_only=True, implementation=name, **OPTIONS, **FIXED) as store:
            assert check_readable(store, _impl.get(name).codec, base, written) == MESSAGES + 20


def _hypothesis_test():
    from hypothesis import HealthCheck, given, note, settings
    from hypothesis import strategies as st

    @pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writable"])
    @pytest.mark.parametrize("implementation", TWIN_NAMES)
    @settings(
        max_examples=_EXAMPLES or 12,
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.function_scoped_fixture,
            HealthCheck.data_too_large,
        ],
    )
    @given(data=st.data(), detect=st.booleans())
    def test_damaged_store_opens_with_only_intact_messages_or_refuses(
        base_stores, tmp_path, implementation, read_only, data, detect
    ):
        base, written = base_stores[implementation]
        ops = draw_damage(Draw(data), written)
        note(f"damage: {ops!r}")
        run_case(base, str(tmp_path), ops, implementation, read_only, detect, written)

    return test_damaged_store_opens_with_only_intact_messages_or_refuses


test_damaged_store_opens_with_only_intact_messages_or_refuses = _hypothesis_test()


@pytest.mark.parametrize(
    "ops",
    [
        [("checkpoint", 0, 0)],
        [("checkpoint", 10, 7)],
        [("checkpoint", 8192, 255)],
        [("json", "topics.json", "", '{"topicConfigTable":{"T0":{"writeQueueNums":-3,"readQueueNums":-3}}}')],
        [("json", "topics.json", "", '{"topicConfigTable":{"T0":{"writeQueueNums":2147483647}}}')],
        [("json", "topics.json", ".bak", "{")],
        [("json", "consumerOffset.json", "", "[" * 5000)],
        [("json", "consumerOffset.json", "", '{"offsetTable":{' + "1" * 5000 + ":1}}")],
        [("special", "config", 0, "dir")],
        [("special", "config", 6, "fifo")],
        [("special", "root", 0, "fifo")],
        [("special", "root", 1, "fifo")],
        [("special", "root", 1, "dir")],
        [("special", "root", 2, "fifo"), ("abort",)],
        [("special", "commitlog", 1, "fifo")],
        [("special", "commitlog", 4, "fifo")],
        [("special", "consumequeue", 7, "fifo")],
        [("special", "index", 3, "fifo")],
        [("special", "commitlog", 2, "symlink-loop")],
        [("special", "root", 0, "dir")],
        [("delete", "commitlog", 2)],
        [("truncate", "commitlog", 4, 8000)],
        [("extend", "commitlog", 0, 4096, 0)],
        [("truncate", "consumequeue", 3, 7)],
        [("garbage", "index", 2, b"\xff", 1384)],
        [("junk", "commitlog", "00000000000000000001", "file", b"x")],
        [("junk", "commitlog", "00000000000000032768", "dir", b"")],
        [("junk", "consumequeue", "bad topic!", "dir", b"")],
        [("junk", "index", "20991231235959999", "dir", b"")],
        [("field", 0, 84, -1), ("abort",)],
        [("field", 0, 36, 1)],  # sysFlag says compressed (zlib): no CRC covers it
        [("field", 0, 36, 0x201)],  # ... lz4
        [("field", 0, 0, (1 << 31) - 1)],
    ],
    ids=lambda ops: "+".join(str(part) for op in ops for part in op[:2])[:60],
)
@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writable"])
@pytest.mark.parametrize("implementation", TWIN_NAMES)
def test_known_hostile_stores(base_stores, tmp_path, implementation, read_only, ops):
    """The damage the issue names, each on its own (hypothesis explores the mixtures)."""
    base, written = base_stores[implementation]
    run_case(base, str(tmp_path), ops, implementation, read_only, False, written)


# ---- the config tables on their own: garbage files and .bak files ------------------------------------

CONFIG_TABLES = [TopicConfigTable, ConsumerOffsetTable, DelayOffsetTable, SubscriptionGroupTable]


def _garbage_json(i: int) -> str:
    return GARBAGE_JSON[i]


def _config_text_strategy():
    from hypothesis import strategies as st

    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(1 << 70), 1 << 70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=6),
    )
    values = st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(
                st.one_of(
                    st.text(max_size=5),
                    st.integers(-3, 3),
                    st.sampled_from(
                        ["T0", "T0@g1", "writeQueueNums", "readQueueNums", "counter", "dataVersion"]
                    ),
                ),
                inner,
                max_size=4,
            ),
        ),
        max_leaves=12,
    )
    shaped = st.fixed_dictionaries(
        {},
        optional={
            "dataVersion": values,
            "topicConfigTable": values,
            "offsetTable": values,
            "subscriptionGroupTable": values,
            "extra": values,
        },
    ).map(lambda d: dumps_fastjson(d))
    return st.one_of(
        st.integers(0, len(GARBAGE_JSON) - 1).map(_garbage_json),
        st.text(max_size=40),
        shaped,
        st.tuples(shaped, st.integers(0, 200), st.text(max_size=3)).map(
            lambda t: t[0][: t[1]] + t[2] + t[0][t[1] :]
        ),
    )


def _config_test():
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @settings(
        max_examples=_EXAMPLES or 300,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(
        cls=st.sampled_from(CONFIG_TABLES),
        primary=st.one_of(st.none(), _config_text_strategy()),
        bak=st.one_of(st.none(), _config_text_strategy()),
        read_only=st.booleans(),
    )
    def test_config_tables_load_garbage_and_bak_files_or_refuse(tmp_path, cls, primary, bak, read_only):
        path = os.path.join(str(tmp_path), cls.FILE_NAME)
        for name in (path, path + ".bak"):
            if os.path.exists(name):
                os.unlink(name)
        for name, text in ((path, primary), (path + ".bak", bak)):
            if text is not None:
                with open(name, "wb") as f:
                    f.write(text.encode("utf-8", "surrogatepass"))
        table = cls(path, read_only=read_only)
        try:
            table.load()
        except StoreConfigError:
            return
        text = table.to_json()  # whatever loaded can be written back ...
        again = cls(path)
        again.from_json(text)  # ... and reads back the same
        assert again.to_json() == text
        if cls is TopicConfigTable:
            for topic in table.topics:
                assert 1 <= table.queues(topic) <= MAX_QUEUE_NUMS
        if not read_only:
            table.persist(force=True)
            assert cls.open(path).to_json() == text

    return test_config_tables_load_garbage_and_bak_files_or_refuse


test_config_tables_load_garbage_and_bak_files_or_refuse = _config_test()


@pytest.mark.parametrize("value", [-3, -1, MAX_QUEUE_NUMS + 1, (1 << 31) - 1])
def test_topics_json_with_a_queue_count_out_of_range_falls_back_to_the_bak(tmp_path, value):
    """Regression: a negative count made the compiled append path index its queue table at -1
    (heap corruption, glibc abort); 2**31-1 made it allocate and clear 16 GiB."""
    path = tmp_path / "topics.json"
    path.write_text('{"topicConfigTable":{"T0":{"writeQueueNums":%d}}}' % value)
    with pytest.raises(StoreConfigError, match="writeQueueNums"):
        TopicConfigTable.open(path)
    (tmp_path / "topics.json.bak").write_text('{"topicConfigTable":{"T0":{"writeQueueNums":3}}}')
    assert TopicConfigTable.open(path).queues("T0") == 3


@pytest.mark.parametrize("implementation", TWIN_NAMES)
def test_store_whose_topics_json_has_a_negative_queue_count_refuses_to_open(tmp_path, implementation):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "topics.json").write_text('{"topicConfigTable":{"T0":{"writeQueueNums":-3}}}')
    with pytest.raises(StoreConfigError, match="writeQueueNums"):
        MessageStore(tmp_path, implementation=implementation, **OPTIONS, **FIXED)


@pytest.mark.parametrize(
    "text",
    [
        '{"offsetTable":{"T@g":{0:' + "9" * 5000 + "}}}",
        '{"offsetTable":{"T@g":{' + "1" * 5000 + ":0}}}",
        '{"offsetTable":{"T@g":{"0":"' + "1" * 5000 + '"}}}',
        '{"offsetTable":{},"x":1e999}',
        '{"offsetTable":{},"x":-1e400}',
        '{"offsetTable":{},1:2}',
    ],
)
def test_config_numbers_python_cannot_hold_or_write_back_are_bad_config(tmp_path, text):
    """Regression: 5000-digit integers raised a bare ValueError (Python's int-string limit), 1e999
    loaded as inf and failed only when written back, an integer property name failed sorting."""
    path = tmp_path / "consumerOffset.json"
    path.write_text(text)
    with pytest.raises(StoreConfigError):
        ConsumerOffsetTable.open(path)


@pytest.mark.parametrize(
    "size, fill, expect",
    [(0, 0, 0), (10, 1, 0x0101010101010101), (40, 2, 0x0202020202020202), (8192, 3, 0x0303030303030303)],
)
def test_checkpoint_of_the_wrong_size_reads_whole_fields_and_flushes_4096_bytes(tmp_path, size, fill, expect):
    path = tmp_path / "checkpoint"
    path.write_bytes(bytes([fill]) * size)
    cp = Checkpoint(str(path))
    assert cp.physic_msg_timestamp == expect
    assert cp.logics_msg_timestamp == (expect if size >= 16 else 0)  # 10 bytes: one whole field
    cp.flush()
    assert path.stat().st_size == CHECKPOINT_SIZE
    assert Checkpoint(str(path)).physic_msg_timestamp == expect


@pytest.mark.parametrize("kind", ["dir", "fifo", "symlink-loop"])
def test_checkpoint_that_is_not_a_file_is_a_store_config_error_not_a_hang(tmp_path, kind):
    path = tmp_path / "checkpoint"
    if kind == "dir":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("checkpoint")
    with _Watchdog(60), pytest.raises(StoreConfigError):
        Checkpoint(str(path))


def _child_command(iterations: int, seed: int, implementation: str) -> list[str]:
    return [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        "--iterations",
        str(iterations),
        "--seed",
        str(seed),
        "--impl",
        implementation,
    ]


def _child_env() -> dict:
    env = dict(os.environ)
    src = os.path.dirname(os.path.dirname(os.path.abspath(_impl.__file__)))
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.mark.parametrize("implementation", TWIN_NAMES)
def test_damaged_stores_never_crash_the_interpreter(implementation, tmp_path):
    """A batch of damaged stores in a child process: it ends normally, never by a signal, a hang
    or a sanitizer report. (What it finds short of a crash, it prints: the in-process test above
    asserts on those.)"""
    seed = random.randrange(2**32)
    iterations = _EXAMPLES or 16
    print(f"seed={seed} iterations={iterations}")
    env = _child_env()
    env["TMPDIR"] = str(tmp_path)
    try:
        proc = subprocess.run(
            _child_command(iterations, seed, implementation),
            capture_output=True,
            timeout=CHILD_TIMEOUT_S,
            env=env,
        )
    except subprocess.TimeoutExpired as exc:
        cases = [
            line
            for line in (exc.stdout or b"").decode(errors="replace").splitlines()
            if line.startswith("CASE")
        ]
        pytest.fail(f"the child hung (no end after {CHILD_TIMEOUT_S} s) in {cases[-1:]}")
    out, err = proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")
    for finding in _findings(out):
        print(finding)
    last = [line for line in out.splitlines() if line.startswith("CASE")][-1:]
    sanitizer = [line for line in err.splitlines() if "Sanitizer" in line or "runtime error:" in line]
    assert proc.returncode in (0, 1) and not sanitizer, (
        f"child ended with {proc.returncode} in {last}\n--- stderr tail\n{err[-3000:]}"
    )
    assert f"done iterations={iterations}" in out, out[-2000:]


# ---- script mode -------------------------------------------------------------------------------------------


def child_main(iterations: int, seed: int, implementation: str) -> int:
    """Run ``iterations`` damaged stores in this process; one CASE line before each, a VIOLATION
    or UNTYPED line for each finding, and a summary. Exit status 1 when anything was found."""
    scratch = tempfile.mkdtemp(prefix="rocketstore-fuzz-")
    try:
        base = os.path.join(scratch, "base")
        written = build_store(base, implementation)
        counts: dict = {}
        for i in range(iterations):
            rng = random.Random(seed * 1_000_003 + i)
            ops = draw_damage(Draw(rng), written)
            read_only, detect = rng.random() < 0.5, rng.random() < 0.2
            print(
                f"CASE {i} impl={implementation} read_only={read_only} detect={detect} ops={ops!r}",
                flush=True,
            )
            try:
                outcome = run_case(base, scratch, ops, implementation, read_only, detect, written)
            except Violation as exc:
                print(f"VIOLATION {i}: {exc}", flush=True)
                outcome = "violations"
            except Exception as exc:  # not a RocketStoreError: an untyped error is a finding too
                print(f"UNTYPED {i}: {exc!r}", flush=True)
                outcome = "untyped"
            counts[outcome] = counts.get(outcome, 0) + 1
        print(
            f"done iterations={iterations} " + " ".join(f"{k}={v}" for k, v in sorted(counts.items())),
            flush=True,
        )
        return 1 if counts.get("violations") or counts.get("untyped") else 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _findings(out: str) -> list[str]:
    """The VIOLATION and UNTYPED lines of a child's output, each with the CASE line it belongs to."""
    found, case = [], None
    for line in out.splitlines():
        if line.startswith("CASE"):
            case = line
        elif line.startswith(("VIOLATION", "UNTYPED")):
            found.append(f"{line}\n    {case}")
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Damage small stores at random and open them.")
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--impl", choices=["c", "py", "both"], default="both")
    parser.add_argument("--batch", type=int, default=100, help="iterations per child process")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    seed = random.randrange(2**32) if args.seed is None else args.seed
    if args.child:
        return child_main(args.iterations, seed, args.impl)
    impls = TWIN_NAMES if args.impl == "both" else [args.impl]
    print(f"seed={seed} iterations={args.iterations} twins={impls}", flush=True)
    totals: dict = {}
    crashes = 0
    started = time.monotonic()
    for implementation in impls:
        done = batch = 0
        while done < args.iterations:
            n = min(args.batch, args.iterations - done)
            batch_seed = seed + batch
            try:
                proc = subprocess.run(
                    _child_command(n, batch_seed, implementation),
                    capture_output=True,
                    timeout=CHILD_TIMEOUT_S,
                    env=_child_env(),
                )
                out, err, code = (
                    proc.stdout.decode(errors="replace"),
                    proc.stderr.decode(errors="replace"),
                    proc.returncode,
                )
            except subprocess.TimeoutExpired as exc:
                out, err, code = (
                    (exc.stdout or b"").decode(errors="replace"),
                    (exc.stderr or b"").decode(errors="replace"),
                    "timeout",
                )
            summary = [line for line in out.splitlines() if line.startswith("done")]
            for finding in _findings(out):
                print(finding, flush=True)
            sanitizer = [line for line in err.splitlines() if "Sanitizer" in line or "runtime error:" in line]
            if code not in (0, 1) or not summary or sanitizer:  # a signal, a hang, a sanitizer report
                crashes += 1
                cases = [line for line in out.splitlines() if line.startswith("CASE")]
                print(
                    f"CRASH impl={implementation} batch seed={batch_seed} exit={code} last={cases[-1:]}\n"
                    f"{err[-3000:]}",
                    flush=True,
                )
            for part in summary[-1].split()[2:] if summary else []:
                key, value = part.split("=")
                totals[key] = totals.get(key, 0) + int(value)
            print(
                f"impl={implementation} batch seed={batch_seed} exit={code}: {summary[-1:] or 'no summary'}",
                flush=True,
            )
            done += n
            batch += 1
    print(
        f"total iterations={args.iterations * len(impls)} crashes/hangs/sanitizer reports={crashes} "
        + " ".join(f"{k}={v}" for k, v in sorted(totals.items()))
        + f" seconds={time.monotonic() - started:.0f}",
        flush=True,
    )
    return 1 if crashes or totals.get("violations") or totals.get("untyped") else 0


if __name__ == "__main__":
    sys.exit(main())
