"""rocketstore side by side with the stores users would pick, and with the machine's own limits.

    pip install ".[bench]"            # rocketstore itself, the peers and matplotlib (peers optional)
    python bench/compare.py [--quick] [--messages N] [--rounds R] [--cap S] [--out DIR]

It measures the installed rocketstore (``src/`` is never put on ``sys.path``; without an install
it exits saying so); the report names the build (compiled or pure Python) and its CRC-32 path.

One command, one process, one run. The same workload for every contender: ``--messages``
(default 1,000,000) 128-byte random bodies, each under its own 20-character key:

(a) put, one call per message, not durable (each store's default write path, no fsync);
(b) batch put, 10,000 messages per call, through the store's batch or transaction API;
(c) durable put from 4, 16 and 64 threads for a fixed time each, every put waiting until it is
    on disk (rocketstore: group commit; the others: their per-write sync option); and
    rocketstore's pipelined durable put (one thread, a window of futures);
(d) sequential read of everything the batch phase stored (or phase (a), without a batch API);
(e) 100,000 random lookups by key among the stored keys;
plus rocketstore's recovery scan (open of a closed store) and verify() in GB/s.

Contenders: rocketstore compiled (``c``) and pure Python (``py``), LMDB (py-lmdb), RocksDB
(rocksdict), LevelDB (plyvel), sqlite3 in WAL mode, diskcache, persist-queue (its file queue).
A peer whose package is missing is reported "not installed"; a peer without the feature a row
needs gets "n/a" with the reason; nothing is emulated. Every timed phase stops at ``--cap``
seconds: a capped cell shows the count it reached.

The machine's limits are measured in the same run, before the first round and after every round
(the table shows their medians): raw sequential write (1 MiB write() + fdatasync), serial
fdatasync (4 KiB to fresh blocks; median and p99 latency), memcpy (numpy copy of 64 MiB),
``zlib.crc32`` of 1 MiB, and a fixed Python dict-lookup loop. Contenders run in a rotated order
in every round (``--rounds``, default 2; 1 with ``--quick``), so slow drift of a shared machine
(other tenants, disk throttling) spreads over all of them; a cell is the median over rounds.

Output: a Markdown table on stdout (absolute rates, rocketstore ÷ best peer, rocketstore ÷ the
machine limit named in the row) and, under ``--out`` (default ``bench/results/``), the JSON of
every number measured and a PNG bar chart (skipped, with a note, when matplotlib is missing).
The load average (``os.getloadavg()``) before and after the run is printed and recorded.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
if BENCH_DIR not in sys.path:
    sys.path.insert(0, BENCH_DIR)

import buildinfo  # noqa: E402

buildinfo.require("bench/compare.py")

import engine  # noqa: E402
import numpy as np  # noqa: E402
from engine import GiB, MiB, log  # noqa: E402

from rocketstore import Message, MessageStore, _impl  # noqa: E402

BUILD = buildinfo.describe()

TOPIC = "BenchTopic"
BODY_SIZE = 128
KEY_SIZE = 20
BATCH = 10_000
THREADS = (4, 16, 64)
CHECK_EVERY = 1024  # a capped loop looks at the clock once per this many operations

GOALS = dict(
    single=2_000_000,
    batch=8_000_000,
    durable=0.7,
    lookup=1_000_000,
    batch_read=10_000_000,
    crc_gbps=20.0,
    verify_gbps=2.0,
)


class Unsupported(Exception):
    """A contender lacks what a phase needs; the message says what ("no batch API")."""


def count_until(items, cap: float) -> int:
    """How many of ``items`` are taken before ``cap`` seconds pass (the clock is read once per
    CHECK_EVERY items), or all of them."""
    n = 0
    deadline = time.perf_counter() + cap
    for n, _item in enumerate(items, 1):
        if not n % CHECK_EVERY and time.perf_counter() > deadline:
            break
    return n


def _key(i: int) -> str:
    return f"key-{i:016d}"  # 20 characters


# ---- contenders ----


class Contender:
    """One store under test. Subclasses open it in ``path`` and hand out callables for each phase."""

    name = "?"
    package = None  # the pip name, for "not installed"
    module = None  # the import name
    bytes_keys = True  # keys as bytes (else str)

    def missing(self) -> str | None:
        if self.module is None:
            return None
        try:
            __import__(self.module)
        except ImportError:
            return f"not installed (pip install {self.package})"
        return None

    def open(self, path: str, durable: bool = False) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def putter(self):
        """callable(key, body): one non-durable put."""
        raise NotImplementedError

    def batch_putter(self):
        """callable(keys, bodies): one call storing them all."""
        raise Unsupported("no batch API")

    def durable_putter(self):
        """A thread-safe callable(key, body) that returns once the put is on disk."""
        raise Unsupported("no durable put")

    def settle(self) -> None:
        """Whatever must happen before the written data is queryable (timed with the puts)."""

    def read_all(self, cap: float) -> int:
        raise NotImplementedError

    def getter(self):
        """callable(key) -> the body, for the lookups."""
        raise Unsupported("no lookup by key")


class Rocket(Contender):
    module = None

    def __init__(self, impl: str):
        self.impl = impl
        self.name = f"rocketstore [{impl}]"
        self.store = None

    def missing(self):
        if self.impl == "c" and _impl.COMPILED is None:
            return f"not built: the installed rocketstore is pure Python ({BUILD['why_pure']})"
        return None

    bytes_keys = False

    def open(self, path, durable=False):
        self.path = path
        self.store = MessageStore(
            path, implementation=self.impl, index_slots=2_000_000, index_count=8_000_000
        )
        self.store.create_topic(TOPIC, 4)

    def close(self):
        if self.store is not None:
            self.store.close()
            self.store = None

    def putter(self):
        put = self.store.put

        def one(key, body):
            put(TOPIC, body, keys=key)

        return one

    def batch_putter(self):
        put_messages = self.store.put_messages

        def batch(keys, bodies):
            put_messages([Message(TOPIC, body, keys=key) for key, body in zip(keys, bodies)])

        return batch

    def durable_putter(self):
        put = self.store.put

        def one(key, body):
            if not put(TOPIC, body, keys=key, durable=True).ok:
                raise RuntimeError("durable put was not PUT_OK")

        return one

    def settle(self):
        # keys are queryable once the dispatcher has indexed them: the put phase includes that
        self.store._dispatcher.catch_up()

    def read_all(self, cap):
        return count_until(self.store.iter_messages(), cap)

    def scan_all(self) -> int:
        return sum(len(records) for _start, records in self.store.scan())

    def getter(self):
        query = self.store.query_by_key

        def get(key):
            return query(TOPIC, key, 1)[0].body

        return get


class Lmdb(Contender):
    name, package, module = "LMDB", "lmdb", "lmdb"

    def open(self, path, durable=False):
        import lmdb

        os.makedirs(path, exist_ok=True)
        # sync=False: commits reach the page cache only (durable=True: every commit fsyncs)
        self.env = lmdb.open(path, map_size=8 * GiB, sync=durable, metasync=durable, max_spare_txns=128)

    def close(self):
        txn = getattr(self, "_read_txn", None)
        if txn is not None:
            txn.abort()
            self._read_txn = None
        self.env.close()

    def putter(self):
        begin = self.env.begin

        def one(key, body):
            with begin(write=True) as txn:
                txn.put(key, body)

        return one

    def batch_putter(self):
        begin = self.env.begin

        def batch(keys, bodies):
            with begin(write=True) as txn:
                txn.cursor().putmulti(zip(keys, bodies))

        return batch

    durable_putter = putter

    def read_all(self, cap):
        with self.env.begin() as txn:
            return count_until(txn.cursor(), cap)

    def getter(self):
        txn = self.env.begin()
        self._read_txn = txn
        return txn.get


class Rocks(Contender):
    name, package, module = "RocksDB", "rocksdict", "rocksdict"

    def open(self, path, durable=False):
        import rocksdict

        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        self.db = rocksdict.Rdict(path, options)
        self.sync = rocksdict.WriteOptions()
        self.sync.sync = True

    def close(self):
        self.db.close()

    def putter(self):
        return self.db.put

    def batch_putter(self):
        import rocksdict

        write = self.db.write

        def batch(keys, bodies):
            wb = rocksdict.WriteBatch(raw_mode=True)
            put = wb.put
            for key, body in zip(keys, bodies):
                put(key, body)
            write(wb)

        return batch

    def durable_putter(self):
        put, sync = self.db.put, self.sync

        def one(key, body):
            put(key, body, sync)

        return one

    def read_all(self, cap):
        return count_until(self.db.items(), cap)

    def getter(self):
        return self.db.get


class Level(Contender):
    name, package, module = "LevelDB", "plyvel", "plyvel"

    def open(self, path, durable=False):
        import plyvel

        self.db = plyvel.DB(path, create_if_missing=True)

    def close(self):
        self.db.close()

    def putter(self):
        return self.db.put

    def batch_putter(self):
        write_batch = self.db.write_batch

        def batch(keys, bodies):
            with write_batch() as wb:
                put = wb.put
                for key, body in zip(keys, bodies):
                    put(key, body)

        return batch

    def durable_putter(self):
        put = self.db.put

        def one(key, body):
            put(key, body, sync=True)

        return one

    def read_all(self, cap):
        return count_until(self.db, cap)

    def getter(self):
        return self.db.get


class Sqlite(Contender):
    name, module = "sqlite3 WAL", None
    bytes_keys = False

    def _connect(self):
        conn = sqlite3.connect(self.file, isolation_level=None, check_same_thread=False, timeout=60)
        conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL: a WAL commit does not fsync (the non-durable default); FULL: every commit does
        conn.execute(f"PRAGMA synchronous={'FULL' if self.durable else 'NORMAL'}")
        return conn

    def open(self, path, durable=False):
        os.makedirs(path, exist_ok=True)
        self.file = os.path.join(path, "kv.sqlite")
        self.durable = durable
        self.conn = self._connect()
        self.conn.execute("CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB)")
        self.local = threading.local()
        self.conns = [self.conn]

    def close(self):
        for conn in self.conns:
            conn.close()

    def putter(self):
        execute = self.conn.execute
        sql = "INSERT INTO kv VALUES (?, ?)"

        def one(key, body):
            execute(sql, (key, body))  # autocommit: one transaction per put

        return one

    def batch_putter(self):
        conn = self.conn

        def batch(keys, bodies):
            conn.execute("BEGIN")
            conn.executemany("INSERT INTO kv VALUES (?, ?)", zip(keys, bodies))
            conn.execute("COMMIT")

        return batch

    def durable_putter(self):
        lock = threading.Lock()
        sql = "INSERT INTO kv VALUES (?, ?)"

        def one(key, body):
            conn = getattr(self.local, "conn", None)
            if conn is None:  # one connection per thread, as sqlite wants
                conn = self.local.conn = self._connect()
                with lock:
                    self.conns.append(conn)
            conn.execute(sql, (key, body))

        return one

    def read_all(self, cap):
        return count_until(self.conn.execute("SELECT key, value FROM kv"), cap)

    def getter(self):
        execute = self.conn.execute
        sql = "SELECT value FROM kv WHERE key = ?"

        def get(key):
            return execute(sql, (key,)).fetchone()[0]

        return get

    def verify(self) -> None:
        if self.conn.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
            raise RuntimeError("sqlite integrity_check failed")


class DiskCache(Contender):
    name, package, module = "diskcache", "diskcache", "diskcache"
    bytes_keys = False

    def open(self, path, durable=False):
        import diskcache

        # its defaults: SQLite in WAL mode, synchronous NORMAL; durable=True asks for FULL
        self.cache = diskcache.Cache(
            path, size_limit=64 * GiB, cull_limit=0, sqlite_synchronous=2 if durable else 1
        )

    def close(self):
        self.cache.close()

    def putter(self):
        return self.cache.set

    def batch_putter(self):
        cache = self.cache

        def batch(keys, bodies):
            with cache.transact():
                put = cache.set
                for key, body in zip(keys, bodies):
                    put(key, body)

        return batch

    durable_putter = putter

    def read_all(self, cap):
        # no value iterator: keys in insertion order, then a get each
        get = self.cache.get
        return count_until((get(key) for key in self.cache.iterkeys()), cap)

    def getter(self):
        return self.cache.get


class PersistQueue(Contender):
    name, package, module = "persist-queue", "persist-queue", "persistqueue"

    def open(self, path, durable=False):
        import persistqueue

        self.queue = persistqueue.Queue(path, autosave=True)

    def close(self):
        pass

    def putter(self):
        put = self.queue.put

        def one(key, body):
            put((key, body))

        return one

    def durable_putter(self):
        raise Unsupported("no per-put sync (fsyncs only when a chunk file fills)")

    def read_all(self, cap):
        n = 0
        deadline = time.perf_counter() + cap
        get, done = self.queue.get_nowait, self.queue.task_done
        import persistqueue

        try:
            while True:
                get()
                done()
                n += 1
                if not n % CHECK_EVERY and time.perf_counter() > deadline:
                    break
        except persistqueue.Empty:
            pass
        return n

    def getter(self):
        raise Unsupported("a FIFO queue: no lookup by key")


def all_contenders() -> list[Contender]:
    return [Rocket("c"), Rocket("py"), Lmdb(), Rocks(), Level(), Sqlite(), DiskCache(), PersistQueue()]


# ---- the machine's limits ----


def memcpy_gbps(seconds: float = 0.3) -> float:
    src = np.random.default_rng(3).integers(0, 256, 64 * MiB, dtype=np.uint8)
    dst = np.zeros_like(src)
    dst[::4096] = 1  # fault the destination in first: a copy, not page faults
    best = float("inf")
    deadline = time.perf_counter() + seconds
    copies = 0
    while time.perf_counter() < deadline or copies < 3:
        copies += 1
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return src.nbytes / best / 1e9


def dict_lookup_rate(count: int = 100_000) -> float:
    """A fixed Python loop of dict.get over 20-character keys: the interpreter's lookup ceiling."""
    keys = [_key(i) for i in range(count)]
    table = dict.fromkeys(keys, b"")
    sample = random.Random(5).choices(keys, k=count)
    best = float("inf")
    for _ in range(3):
        get = table.get
        t0 = time.perf_counter()
        for key in sample:
            get(key)
        best = min(best, time.perf_counter() - t0)
    return count / best


def machine_limits(root: str, p: dict) -> dict:
    fsync = engine.fdatasync_baseline(root, p["fsync_seconds"])
    crc = engine.crc_bandwidth(0.2)
    return dict(
        raw_write_gbps=engine.write_bandwidth(root, p["raw_bytes"])["gbps"],
        fdatasync_rate=fsync["rate"],
        fdatasync_median_us=fsync["median_us"],
        fdatasync_p99_us=fsync["p99_us"],
        memcpy_gbps=memcpy_gbps(),
        zlib_crc32_gbps=crc["zlib"],
        rocketstore_crc32_gbps=crc.get("c"),
        dict_lookup_rate=dict_lookup_rate(),
    )


# ---- phases ----


def _capped(fn, keys, bodies, cap: float) -> tuple[int, float]:
    """fn(key, body) over the pairs until done or ``cap`` seconds: (count, seconds)."""
    n = len(keys)
    start = time.perf_counter()
    deadline = start + cap
    done = 0
    while done < n:
        stop = min(n, done + CHECK_EVERY)
        for key, body in zip(keys[done:stop], bodies[done:stop]):
            fn(key, body)
        done = stop
        if time.perf_counter() > deadline:
            break
    return done, time.perf_counter() - start


def _capped_batches(fn, keys, bodies, cap: float) -> tuple[int, float]:
    n = len(keys)
    start = time.perf_counter()
    deadline = start + cap
    done = 0
    while done < n:
        stop = min(n, done + BATCH)
        fn(keys[done:stop], bodies[done:stop])
        done = stop
        if time.perf_counter() > deadline:
            break
    return done, time.perf_counter() - start


def _result(count: int, seconds: float, target: int | None = None, **extra) -> dict:
    out = dict(count=count, seconds=seconds, rate=count / seconds if seconds > 0 else 0.0, **extra)
    if target is not None and count < target:
        out["capped"] = True
    return out


def durable_run(c: Contender, threads: int, seconds: float) -> dict:
    put = c.durable_putter()
    errors = []

    def work(t: int, end: float) -> int:
        n = 0
        body = os.urandom(BODY_SIZE)
        try:
            while time.perf_counter() < end:
                put(f"t{t:02d}-{n:016d}", body) if not c.bytes_keys else put(b"t%02d-%016d" % (t, n), body)
                n += 1
        except Exception as exc:  # reported in the cell, never hidden
            errors.append(f"{type(exc).__name__}: {exc}")
        return n

    counts, elapsed = engine.run_threads(threads, seconds, work)
    if errors:
        raise RuntimeError(errors[0])
    return _result(sum(counts), elapsed, threads=threads)


def pipelined_run(c: Rocket, count: int, cap: float, window: int = 10_000) -> dict:
    put = c.store.put_pipelined
    inflight = collections.deque()
    body = os.urandom(BODY_SIZE)
    start = time.perf_counter()
    deadline = start + cap
    done = 0
    while done < count:
        inflight.append(put(TOPIC, body, keys=_key(done)))
        done += 1
        if len(inflight) > window and not inflight.popleft().result().ok:
            raise RuntimeError("pipelined put was not PUT_OK")
        if not done % CHECK_EVERY and time.perf_counter() > deadline:
            break
    while inflight:
        if not inflight.popleft().result().ok:
            raise RuntimeError("pipelined put was not PUT_OK")
    return _result(done, time.perf_counter() - start, count, window=window)


def _attempt(results: dict, row: str, fn) -> None:
    """results[row] = fn(), or the reason it could not run."""
    try:
        results[row] = fn()
    except Unsupported as exc:
        results[row] = dict(na=str(exc))
    except Exception as exc:  # a peer failing is reported in its cell, the run goes on
        results[row] = dict(error=f"{type(exc).__name__}: {exc}")
        log(f"    {row}: {results[row]['error']}")


def run_contender(c: Contender, root: str, data: dict, p: dict) -> dict:
    """Every phase for one contender, each store in a fresh directory removed afterwards."""
    n, cap = p["messages"], p["cap"]
    keys = data["bkeys"] if c.bytes_keys else data["skeys"]
    bodies = data["bodies"]
    r: dict = {}

    os.makedirs(root, exist_ok=True)
    # (a) one put per call
    path = os.path.join(root, "single")
    c.open(path)
    try:

        def single():
            count, seconds = _capped(c.putter(), keys, bodies, cap)
            t0 = time.perf_counter()
            c.settle()
            return _result(count, seconds + time.perf_counter() - t0, n)

        _attempt(r, "single", single)
        if isinstance(c, Rocket):
            size = c.store.max_offset - c.store.min_offset
            r["record_bytes"] = size / max(1, r["single"].get("count", 1))
    except BaseException:
        c.close()
        raise
    read_path = path
    # (b) batch put
    try:
        c.batch_putter()
    except Unsupported as exc:
        r["batch"] = dict(na=str(exc))
    else:
        c.close()
        shutil.rmtree(path, ignore_errors=True)
        path = read_path = os.path.join(root, "batch")
        c.open(path)

        def batch():
            count, seconds = _capped_batches(c.batch_putter(), keys, bodies, cap)
            t0 = time.perf_counter()
            c.settle()
            return _result(count, seconds + time.perf_counter() - t0, n)

        _attempt(r, "batch", batch)
    # what the store kept for reading holds: the batch phase's count, or phase (a)'s without one
    stored = (r["batch"] if "count" in r.get("batch", {}) else r.get("single", {})).get("count", 0)
    if isinstance(c, Rocket):

        def in_scratch_store(name, timed, make_call):
            """``timed`` over ``make_call(store)`` in a store of its own, then back to reading."""

            def run():
                c.close()
                bpath = os.path.join(root, name)
                c.open(bpath)
                try:
                    count, seconds = timed(make_call(c.store), keys, bodies, cap)
                    return _result(count, seconds, n)
                finally:
                    c.close()
                    shutil.rmtree(bpath, ignore_errors=True)
                    c.open(read_path)

            return run

        _attempt(
            r,
            "single_no_key",
            in_scratch_store("no-key", _capped, lambda store: lambda k, b, put=store.put: put(TOPIC, b)),
        )
        _attempt(
            r,
            "batch_bodies",
            in_scratch_store(
                "bodies-only",
                _capped_batches,
                lambda store: lambda k, b, put_batch=store.put_batch: put_batch(TOPIC, b),
            ),
        )
    try:
        # (d) sequential read of what is stored
        def read():
            t0 = time.perf_counter()
            count = c.read_all(cap)
            return _result(count, time.perf_counter() - t0, stored)

        # (e) random lookups by key among the stored keys
        sample = random.Random(11).choices(keys[:stored], k=p["lookups"]) if stored else []

        def lookups():
            get = c.getter()
            t0 = time.perf_counter()
            deadline = t0 + cap
            done = 0
            for done, key in enumerate(sample, 1):
                if get(key) is None:
                    raise RuntimeError(f"key {key!r} not found")
                if not done % CHECK_EVERY and time.perf_counter() > deadline:
                    break
            return _result(done, time.perf_counter() - t0, len(sample))

        # lookups before the read: persist-queue's read consumes its queue
        _attempt(r, "lookup", lookups)
        _attempt(r, "read", read)
        if isinstance(c, Rocket):

            def scan():
                t0 = time.perf_counter()
                count = c.scan_all()
                return _result(count, time.perf_counter() - t0)

            _attempt(r, "scan", scan)
            size = c.store.max_offset - c.store.min_offset

            def verify():
                t0 = time.perf_counter()
                v = c.store.verify()
                if not v["ok"]:
                    raise RuntimeError(f"verify found problems: {v['problems'][:3]}")
                return _result(
                    v["records"],
                    time.perf_counter() - t0,
                    bytes=v["bytes"],
                    gbps=v["bytes"] / (time.perf_counter() - t0) / 1e9,
                )

            _attempt(r, "verify", verify)
        elif isinstance(c, Sqlite):

            def verify():
                size = os.path.getsize(c.file) + os.path.getsize(c.file + "-wal")
                t0 = time.perf_counter()
                c.verify()
                seconds = time.perf_counter() - t0
                return _result(
                    stored, seconds, bytes=size, gbps=size / seconds / 1e9, note="PRAGMA integrity_check"
                )

            _attempt(r, "verify", verify)
        else:
            r["verify"] = dict(na="no verify API")
    finally:
        c.close()
    if isinstance(c, Rocket):

        def recovery():
            t0 = time.perf_counter()
            c.open(read_path)
            seconds = time.perf_counter() - t0
            c.close()
            return _result(stored, seconds, bytes=size, gbps=size / seconds / 1e9)

        _attempt(r, "recovery", recovery)
    else:
        r["recovery"] = dict(na="opens without a checksum scan")
    shutil.rmtree(read_path, ignore_errors=True)

    # (c) durable puts
    for threads in p["threads"]:
        path = os.path.join(root, f"durable-{threads}")
        try:
            c.durable_putter  # noqa: B018 (raises AttributeError when the contender has none)
            c.open(path, durable=True)
        except Exception as exc:
            r[f"durable_{threads}"] = dict(error=f"{type(exc).__name__}: {exc}")
            continue
        try:
            _attempt(r, f"durable_{threads}", lambda t=threads: durable_run(c, t, p["durable_seconds"]))
        finally:
            c.close()
            shutil.rmtree(path, ignore_errors=True)
    if isinstance(c, Rocket):
        path = os.path.join(root, "pipelined")
        c.open(path, durable=True)
        try:
            _attempt(r, "pipelined", lambda: pipelined_run(c, n, cap))
        finally:
            c.close()
            shutil.rmtree(path, ignore_errors=True)
    else:
        r["pipelined"] = dict(na="no asynchronous durable put")
    return r


# ---- aggregation and report ----

ROWS = [
    # key, label, unit, hardware limit for rocketstore's ratio
    ("single", "(a) put, 1 per call, not durable", "msg", "raw_write"),
    ("single_no_key", "(a') put, 1 per call, no key: put(topic, body)", "msg", "raw_write"),
    ("batch", f"(b) batch put, {BATCH:,} per call, keyed", "msg", "raw_write"),
    ("batch_bodies", f"(b') batch put, {BATCH:,} bodies per call, no per-message key", "msg", "raw_write"),
    ("durable_4", "(c) durable put, 4 threads", "msg", "fsync_4"),
    ("durable_16", "(c) durable put, 16 threads", "msg", "fsync_16"),
    ("durable_64", "(c) durable put, 64 threads", "msg", "fsync_64"),
    ("pipelined", "(c) durable put, pipelined, 1 thread", "msg", "raw_write"),
    ("read", "(d) sequential read, objects", "msg", "memcpy"),
    ("scan", "(d') sequential read, columnar scan", "msg", "memcpy"),
    ("lookup", "(e) random lookup by key", "lookup", "dict"),
    ("verify", "verify (checksums of everything)", "GB", "memcpy"),
    ("recovery", "recovery scan (open of a closed store)", "GB", "memcpy"),
]


def _median_cell(cells: list[dict]) -> dict:
    ok = [c for c in cells if "rate" in c]
    if not ok:
        return cells[0]
    rates = sorted(c["rate"] for c in ok)
    cell = dict(min(ok, key=lambda c: abs(c["rate"] - statistics.median(rates))))
    cell["rate"] = statistics.median(rates)
    if "gbps" in cell:
        cell["gbps"] = statistics.median(c["gbps"] for c in ok)
    cell["rounds"] = [c["rate"] for c in ok]
    return cell


def aggregate(rounds: list[dict]) -> dict:
    """contender -> row -> the median cell over rounds (a reason string where none ran)."""
    out: dict = {}
    for per_round in rounds:
        for name, rows in per_round.items():
            for row, cell in rows.items():
                out.setdefault(name, {}).setdefault(row, []).append(cell)
    return {
        name: {
            row: (_median_cell(cells) if isinstance(cells[0], dict) else statistics.median(cells))
            for row, cells in rows.items()
        }
        for name, rows in out.items()
    }


def _fmt_rate(x: float, unit: str) -> str:
    if unit == "GB":
        return f"{x:.2f} GB/s"
    if x >= 1e6:
        return f"{x / 1e6:.2f} M/s"
    if x >= 1e3:
        return f"{x / 1e3:.1f} k/s"
    return f"{x:.0f} /s"


def cell_text(cell, unit: str) -> str:
    if isinstance(cell, str):
        return cell
    if cell is None:
        return "—"
    if "na" in cell:
        return f"n/a — {cell['na']}"
    if "error" in cell:
        return f"failed: {cell['error'][:60]}"
    value = cell["gbps"] if unit == "GB" else cell["rate"]
    text = _fmt_rate(value, unit)
    if cell.get("capped"):
        text += f" (capped: {cell['count']:,} in {cell['seconds']:.0f} s)"
    return text


def _value(cell, unit):
    if not isinstance(cell, dict) or "rate" not in cell:
        return None
    return cell["gbps"] if unit == "GB" else cell["rate"]


def limit_for(kind: str, limits: dict, record_bytes: float, unit: str) -> tuple[float, str]:
    """(the machine limit in the row's unit, its description)."""
    if kind == "raw_write":
        return (
            limits["raw_write_gbps"] * 1e9 / record_bytes,
            f"raw write {limits['raw_write_gbps']:.2f} GB/s = {limits['raw_write_gbps'] * 1e9 / record_bytes / 1e6:.2f} M records/s",
        )
    if kind.startswith("fsync_"):
        t = int(kind.split("_")[1])
        return t * limits["fdatasync_rate"], f"{t} × fdatasync {limits['fdatasync_rate']:,.0f}/s"
    if kind == "memcpy":
        if unit == "GB":
            return limits["memcpy_gbps"], f"memcpy {limits['memcpy_gbps']:.1f} GB/s"
        return (
            limits["memcpy_gbps"] * 1e9 / record_bytes,
            f"memcpy {limits['memcpy_gbps']:.1f} GB/s = {limits['memcpy_gbps'] * 1e9 / record_bytes / 1e6:.0f} M records/s",
        )
    if kind == "dict":
        return limits["dict_lookup_rate"], f"dict lookup loop {limits['dict_lookup_rate'] / 1e6:.2f} M/s"
    raise ValueError(kind)


def build_table(agg: dict, names: list[str], limits: dict, record_bytes: float) -> tuple[list[str], dict]:
    head = (
        "| workload | "
        + " | ".join(names)
        + " | rocketstore [c] ÷ best peer | rocketstore [c] ÷ machine limit |"
    )
    lines = [head, "|" + "---|" * (len(names) + 3)]
    ratios = {}
    peers = [n for n in names if not n.startswith("rocketstore")]
    for row, label, unit, kind in ROWS:
        cells = [agg[n].get(row) if isinstance(agg.get(n), dict) else None for n in names]
        if all(c is None for c in cells):
            continue
        texts = [
            cell_text(c if c is not None else (agg[n] if isinstance(agg.get(n), str) else None), unit)
            for n, c in zip(names, cells)
        ]
        ours = _value(
            agg.get("rocketstore [c]", {}).get(row) if isinstance(agg.get("rocketstore [c]"), dict) else None,
            unit,
        )
        peer_values = [
            (v, n)
            for n in peers
            if isinstance(agg.get(n), dict) and (v := _value(agg[n].get(row), unit)) is not None
        ]
        vs_peer = vs_limit = ""
        if ours is not None and peer_values:
            best, best_name = max(peer_values)
            vs_peer = f"{ours / best:.2f}× ({best_name})"
            ratios.setdefault(row, {})["best_peer"] = dict(ratio=ours / best, peer=best_name)
        if ours is not None:
            lim, desc = limit_for(kind, limits, record_bytes, unit)
            vs_limit = f"{ours / lim:.2f} of {desc}"
            ratios.setdefault(row, {})["limit"] = dict(ratio=ours / lim, limit=desc)
        lines.append(f"| {label} | " + " | ".join(texts) + f" | {vs_peer} | {vs_limit} |")
    return lines, ratios


def limits_table(limits_runs: list[dict]) -> list[str]:
    med = {
        k: statistics.median(r[k] for r in limits_runs)
        for k in limits_runs[0]
        if limits_runs[0][k] is not None
    }
    every = lambda k, f: ", ".join(f.format(r[k]) for r in limits_runs)  # noqa: E731
    rows = [
        (
            "raw sequential write (1 MiB write() + fdatasync)",
            f"{med['raw_write_gbps']:.2f} GB/s",
            every("raw_write_gbps", "{:.2f}"),
        ),
        (
            "serial fdatasync (4 KiB to fresh blocks)",
            f"{med['fdatasync_rate']:,.0f} /s (median {med['fdatasync_median_us']:.0f} µs, p99 {med['fdatasync_p99_us']:.0f} µs)",
            every("fdatasync_rate", "{:,.0f}"),
        ),
        ("memcpy (numpy copy, 64 MiB)", f"{med['memcpy_gbps']:.1f} GB/s", every("memcpy_gbps", "{:.1f}")),
        ("zlib.crc32, 1 MiB", f"{med['zlib_crc32_gbps']:.2f} GB/s", every("zlib_crc32_gbps", "{:.2f}")),
        (
            "dict lookup loop, 20-char keys",
            f"{med['dict_lookup_rate'] / 1e6:.2f} M/s",
            every("dict_lookup_rate", "{:,.0f}"),
        ),
    ]
    if "rocketstore_crc32_gbps" in med:
        rows.append(
            (
                "rocketstore CRC32 [c], 1 MiB",
                f"{med['rocketstore_crc32_gbps']:.1f} GB/s "
                f"({med['rocketstore_crc32_gbps'] / med['memcpy_gbps']:.2f} of memcpy, "
                f"{med['rocketstore_crc32_gbps'] / med['zlib_crc32_gbps']:.1f}× zlib)",
                every("rocketstore_crc32_gbps", "{:.1f}"),
            )
        )
    lines = ["| machine limit | median | every measurement |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return lines


def goals_table(agg: dict, limits: dict) -> list[str]:
    ours = agg.get("rocketstore [c]")
    if not isinstance(ours, dict):
        return []
    rows = []

    def goal(what, value, target, fmt, verdict_value=None):
        if value is None:
            rows.append(f"| {what} | not measured | {fmt(target)} | |")
            return
        v = value if verdict_value is None else verdict_value
        t = target if verdict_value is None else 1.0
        verdict = "met" if v >= t else f"missed: {v / t:.2f} of the goal"
        rows.append(f"| {what} | {fmt(value)} | {fmt(target)} | {verdict} |")

    m = lambda x: f"{x / 1e6:.2f} M msg/s"  # noqa: E731
    goal("single put, put(topic, body)", _value(ours.get("single_no_key"), "msg"), GOALS["single"], m)
    goal("single put, keyed, until indexed", _value(ours.get("single"), "msg"), GOALS["single"], m)
    goal("batch put (bodies only)", _value(ours.get("batch_bodies"), "msg"), GOALS["batch"], m)
    for t in THREADS:
        v = _value(ours.get(f"durable_{t}"), "msg")
        target = GOALS["durable"] * t * limits["fdatasync_rate"]
        if v is None:
            continue
        rows.append(
            f"| durable put, {t} threads | {v / 1e3:.1f} k msg/s | ≥ 0.7 × {t} × {limits['fdatasync_rate']:,.0f}/s"
            f" = {target / 1e3:.1f} k msg/s | "
            + ("met" if v >= target else f"missed: {v / target:.2f} of the goal")
            + " |"
        )
    goal(
        "lookups by key",
        _value(ours.get("lookup"), "lookup"),
        GOALS["lookup"],
        lambda x: f"{x / 1e6:.2f} M/s",
    )
    goal("batch read (columnar scan)", _value(ours.get("scan"), "msg"), GOALS["batch_read"], m)
    crc = limits.get("rocketstore_crc32_gbps")
    goal("CRC32, 1 MiB", crc, GOALS["crc_gbps"], lambda x: f"{x:.1f} GB/s")
    goal("verify", _value(ours.get("verify"), "GB"), GOALS["verify_gbps"], lambda x: f"{x:.2f} GB/s")
    return ["| goal | measured | target | verdict |", "|---|---|---|---|"] + rows


def chart(path: str, agg: dict, names: list[str], title: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib): no chart"
    rows = [
        (row, label, unit)
        for row, label, unit, _ in ROWS
        if any(_value(agg.get(n, {}).get(row) if isinstance(agg.get(n), dict) else None, unit) for n in names)
    ]
    fig, axes = plt.subplots(len(rows), 1, figsize=(9, 1.0 + 1.55 * len(rows)))
    colors = plt.get_cmap("tab10").colors
    for ax, (row, label, unit) in zip(np.atleast_1d(axes), rows):
        values = [
            (_value(agg[n].get(row), unit) if isinstance(agg.get(n), dict) else None) or 0 for n in names
        ]
        positive = [v for v in values if v > 0]
        low, high = min(positive) / 4, max(positive) * 6  # room for the labels on a log axis
        bars = ax.barh(
            range(len(names)),
            [v or low for v in values],
            color=[colors[i % 10] if v else "none" for i, v in enumerate(values)],
        )
        ax.set_yticks(range(len(names)), names, fontsize=7)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlim(low, high)
        ax.set_title(
            label + (" (GB/s)" if unit == "GB" else " (per second, log scale)"), fontsize=8, loc="left"
        )
        ax.tick_params(axis="x", labelsize=7)
        for bar, v, n in zip(bars, values, names):
            cell = agg.get(n, {}).get(row) if isinstance(agg.get(n), dict) else None
            if v:
                text = _fmt_rate(v, unit)
            elif isinstance(cell, dict) and "na" in cell:
                text = "n/a — " + cell["na"]
            elif isinstance(agg.get(n), str):
                text = agg[n]
            else:
                text = "—"
            ax.text(v or low, bar.get_y() + bar.get_height() / 2, " " + text, va="center", fontsize=6)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def make_data(n: int) -> dict:
    blob = os.urandom(n * BODY_SIZE)
    bodies = [blob[i * BODY_SIZE : (i + 1) * BODY_SIZE] for i in range(n)]
    skeys = [_key(i) for i in range(n)]
    random.Random(2).shuffle(skeys)  # keys arrive unordered, as real keys do
    return dict(bodies=bodies, skeys=skeys, bkeys=[k.encode() for k in skeys])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--quick", action="store_true", help="100k messages, 1 round, 5 s caps, 1 s durable phases"
    )
    ap.add_argument(
        "--messages", type=int, help="messages per phase (default 1,000,000; 100,000 with --quick)"
    )
    ap.add_argument("--lookups", type=int, help="random lookups (default 100,000; 20,000 with --quick)")
    ap.add_argument(
        "--rounds", type=int, help="rounds, contenders rotated each round (default 2; 1 with --quick)"
    )
    ap.add_argument("--cap", type=float, help="seconds at most per timed phase (default 20; 5 with --quick)")
    ap.add_argument(
        "--durable-seconds", type=float, help="seconds per durable phase (default 3; 1 with --quick)"
    )
    ap.add_argument("--only", help="comma-separated contender names to run (substring match)")
    ap.add_argument("--dir", help="where stores go (default: a temp dir under /tmp, removed at the end)")
    ap.add_argument("--out", default=os.path.join(BENCH_DIR, "results"), help="where JSON and PNG go")
    args = ap.parse_args(argv)
    q = args.quick
    p = dict(
        messages=args.messages or (100_000 if q else 1_000_000),
        lookups=args.lookups or (20_000 if q else 100_000),
        rounds=args.rounds or (1 if q else 2),
        cap=args.cap or (5.0 if q else 20.0),
        durable_seconds=args.durable_seconds or (1.0 if q else 3.0),
        threads=THREADS,
        fsync_seconds=0.5 if q else 1.5,
        raw_bytes=(128 if q else 512) * MiB,
        quick=q,
    )
    p["lookups"] = min(p["lookups"], p["messages"])

    contenders = all_contenders()
    if args.only:
        wanted = [w.strip().lower() for w in args.only.split(",")]
        contenders = [c for c in contenders if any(w in c.name.lower() for w in wanted)]
    names = [c.name for c in contenders]
    missing = {c.name: m for c in contenders if (m := c.missing())}
    runnable = [c for c in contenders if c.name not in missing]

    os.makedirs(args.out, exist_ok=True)
    root = tempfile.mkdtemp(prefix="rocketstore-compare-", dir=args.dir)
    facts = engine.machine_facts(root)
    load_before = os.getloadavg()
    log(buildinfo.header(BUILD))
    log(f"load average before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
    if facts["filesystem"] in ("tmpfs", "ramfs"):
        log(f"WARNING: {root} is on {facts['filesystem']}: fdatasync does nothing there")
    for name, why in missing.items():
        log(f"{name}: {why}")
    wall = time.perf_counter()
    cpu_before = engine.cpu_sample()
    rounds, limits_runs = [], []
    try:
        log(f"making {p['messages']:,} keys and bodies")
        data = make_data(p["messages"])
        log("machine limits")
        limits_runs.append(machine_limits(root, p))
        for rnd in range(p["rounds"]):
            shift = rnd % max(1, len(runnable))
            order = runnable[shift:] + runnable[:shift]
            if rnd % 2:
                order.reverse()
            per_round = {}
            for c in order:
                log(f"round {rnd + 1}/{p['rounds']}: {c.name}")
                t0 = time.perf_counter()
                per_round[c.name] = run_contender(c, os.path.join(root, "stores"), data, p)
                shutil.rmtree(os.path.join(root, "stores"), ignore_errors=True)
                log(f"    {time.perf_counter() - t0:.0f} s")
            rounds.append(per_round)
            log("machine limits")
            limits_runs.append(machine_limits(root, p))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    wall = time.perf_counter() - wall
    load_after = os.getloadavg()
    others = engine.other_load(cpu_before, engine.cpu_sample())

    agg = aggregate(rounds)
    agg.update(missing)
    limits = {
        k: statistics.median(r[k] for r in limits_runs)
        for k in limits_runs[0]
        if limits_runs[0][k] is not None
    }
    record_bytes = 0.0
    for per_round in rounds:
        rb = per_round.get("rocketstore [c]", per_round.get("rocketstore [py]", {})).get("record_bytes")
        record_bytes = rb or record_bytes
    record_bytes = record_bytes or (BODY_SIZE + KEY_SIZE + 150)
    table, ratios = build_table(agg, names, limits, record_bytes)

    stamp = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    lines = [
        f"rocketstore compare ({'quick' if q else 'full'}), {stamp}, {wall:.0f} s; "
        f"{p['messages']:,} × {BODY_SIZE}-byte random bodies, {KEY_SIZE}-character keys, "
        f"{p['rounds']} round(s), cap {p['cap']:g} s per phase, durable phases {p['durable_seconds']:g} s",
        f"machine: {facts['nproc']} CPUs, {facts['cpu']}, Linux {facts['kernel']}, Python {facts['python']}; "
        f"stores on {facts['filesystem']} ({facts['device']} at {facts['mount']})",
        buildinfo.header(BUILD),
        f"load average before {load_before[0]:.2f} / {load_before[1]:.2f} / {load_before[2]:.2f}, "
        f"after {load_after[0]:.2f} / {load_after[1]:.2f} / {load_after[2]:.2f} (1/5/15 min); other processes used "
        f"{others['others']:.0%} of the machine's CPU during the run, the host stole {others['steal']:.0%}",
        f"rocketstore record size: {record_bytes:.0f} bytes per message (body, key, UNIQ_KEY and RocketMQ's header)",
        "",
    ]
    lines += table + [""] + limits_table(limits_runs) + [""] + goals_table(agg, limits)
    report = "\n".join(lines)
    print(report)

    base = os.path.join(args.out, "compare-quick" if q else "compare")
    with open(base + ".json", "w") as f:
        json.dump(
            dict(
                when=stamp,
                machine=facts,
                params={k: list(v) if isinstance(v, tuple) else v for k, v in p.items()},
                loadavg_before=load_before,
                loadavg_after=load_after,
                other_load=others,
                wall_seconds=wall,
                limits=limits,
                limits_runs=limits_runs,
                record_bytes=record_bytes,
                rounds=rounds,
                median=agg,
                ratios=ratios,
            ),
            f,
            indent=1,
            default=str,
        )
    with open(base + ".md", "w") as f:
        f.write(report + "\n")
    note = chart(
        base + ".png",
        agg,
        names,
        f"{p['messages']:,} messages × {BODY_SIZE} B, {facts['nproc']} CPUs, load {load_before[0]:.1f}→{load_after[0]:.1f}",
    )
    log(note or f"wrote {base}.json, {base}.md and {base}.png")
    if note:
        log(f"wrote {base}.json and {base}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
