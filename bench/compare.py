"""rocketstore side by side with the stores users would pick, and with the machine's own limits.

    pip install ".[bench]"            # rocketstore itself, the peers and matplotlib (peers optional)
    python bench/compare.py [--quick] [--messages N] [--rounds R] [--cap S] [--out DIR]

It measures the installed rocketstore (``src/`` is never put on ``sys.path``; without an install
it exits saying so); the report names the build (compiled or pure Python) and its CRC-32 path.
rocketstore runs with its default settings (index size, segment size, ...), one topic of 4 queues.

One command, one process, one run. The same workload for every contender: ``--messages``
(default 1,000,000) 128-byte random bodies, each under its own 20-character key, and the same
work: rocketstore keeps a CommitLog, consume queues and a key index; every peer keeps a message
log (sequence number -> body) AND a key index (key -> sequence number), both written in the same
transaction or write batch (LMDB: two named databases; RocksDB: two column families; LevelDB:
two key prefixes; sqlite3: two tables; diskcache: integer and string keys of one cache). A peer
that cannot keep an index (persist-queue, a FIFO) is shown with "log only" and is never the
"best peer".

(a) keyed put, one call per message, not durable (each store's default write path, no fsync),
    until indexed; (a') rocketstore's put without a key;
(b) keyed batch, 1,000 messages per call (``put_messages`` of ``Message`` objects; a peer's batch
    or transaction writing log and index); (b') rocketstore's ``put_batch`` of 10,000 bodies;
(c) durable keyed put from 4, 16 and 64 threads for a fixed time each, every put waiting until
    it is on disk (rocketstore: group commit; the others: their per-write sync option); and
    rocketstore's pipelined durable put (one thread, a window of futures);
then, on the store the batch phase left:
(e) ``--lookups`` random lookups by key (``query_by_key(topic, key)``; a peer: two gets,
    key -> seq -> body);
(f) as many random reads by position: rocketstore by CommitLog offset (``read``), by msgId
    (``get_by_msg_id``) and by queue offset (``get_by_queue_offset``); a peer: a get by seq,
    measured once and shown in all three rows;
(g) consuming every queue through ``get_message(..., max_msgs=32)`` (rocketstore only);
(d) every message read in order as an object (``iter_messages()``; a peer: a cursor over its
    log), and rocketstore's columnar ``scan()``;
plus rocketstore's recovery scan (open of a closed store) and verify() in GB/s. The "goal"
column holds rocketstore [c]'s speed goals, absolute and as multiples of LMDB or LevelDB in the same run.

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
machine limit named in the row, the goal) and, under ``--out`` (default ``bench/results/``), the
JSON of every number measured and a PNG bar chart (skipped, with a note, when matplotlib is
missing). The load average (``os.getloadavg()``) before and after the run is printed and recorded.
"""

from __future__ import annotations

import argparse
import collections
import functools
import gc
import itertools
import json
import os
import random
import shutil
import sqlite3
import statistics
import struct
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
import probes  # noqa: E402
from engine import GiB, MiB, log  # noqa: E402

from rocketstore import Message, MessageStore, _impl  # noqa: E402

BUILD = buildinfo.describe()
TOPIC = "BenchTopic"
QUEUES = 4
BODY_SIZE = 128
KEY_SIZE = 20
KEYED_BATCH = 1_000  # messages per call of the keyed batch (put_messages; a peer's transaction)
BODIES_BATCH = 10_000  # bodies per call of put_batch (rocketstore only: no keys)
THREADS = (4, 16, 64)
CHECK_EVERY = 1024  # a capped loop looks at the clock once per this many operations

# The speed goals, per row of the main table: an absolute rate of rocketstore [c] and/or a
# multiple of a peer measured in the same run (the "goal" column).
ROW_GOALS = {
    "single": dict(rate=1_000_000),
    "batch": dict(rate=3_000_000),
    "durable_64": dict(peer=("LevelDB", 1.5)),
    "read": dict(rate=4_000_000, peer=("LMDB", 1.2)),
    "get_message": dict(rate=4_000_000),
    "read_offset": dict(rate=1_500_000),
    "read_msg_id": dict(rate=1_500_000),
    "read_queue_offset": dict(rate=1_500_000),
    "lookup": dict(rate=1_000_000, peer=("LMDB", 4.0)),
}
# The earlier goals, in the table below the main one.
GOALS = dict(
    single=2_000_000,
    batch=8_000_000,
    durable=0.7,
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
    """One store under test. Subclasses open it in ``path`` and hand out callables for each phase.

    Every peer does rocketstore's work, not a key-value store's: it keeps a message log (sequence
    number -> body, the seq an 8-byte big-endian counter the contender assigns) AND a key index
    (key -> seq), both written in the same transaction or write batch; a lookup by key is two gets
    (key -> seq -> body). ``log_only`` marks a peer that cannot keep an index (a FIFO queue): its
    cells say so and it is never the "best peer"."""

    name = "?"
    package = None  # the pip name, for "not installed"
    module = None  # the import name
    bytes_keys = True  # keys as bytes (else str)
    log_only = False

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
        """callable(key, body): one non-durable put of one message (log + index)."""
        raise NotImplementedError

    def batch_putter(self):
        """callable(keys, bodies): one call (transaction) storing them all, log + index."""
        raise Unsupported("no batch API")

    def durable_putter(self):
        """A thread-safe callable(key, body) that returns once the put is on disk."""
        raise Unsupported("no durable put")

    def settle(self) -> None:
        """Whatever must happen before the written data is queryable (timed with the puts)."""

    def read_all(self, cap: float) -> int:
        """Every stored message read in log order (peers: a cursor over the log): how many."""
        raise NotImplementedError

    def getter(self):
        """callable(key) -> the message (None if absent), through the key index."""
        raise Unsupported("no lookup by key")

    def point_reads(self, sample: list[int]) -> dict:
        """row -> callable(cap) -> count: random reads of the stored messages numbered ``sample``
        (0 = first stored). Peers: one "get by seq" row, shown under every read-by-position row."""
        raise Unsupported("no read by position")

    def consume_all(self, cap: float) -> int:
        """Every message pulled through the consume queues: how many."""
        raise Unsupported("no consume queues (a log and a key index only)")


def _reads(fn, args, cap: float) -> int:
    """fn(arg) for each arg until done or ``cap`` seconds; a None result is an error."""
    done = 0
    deadline = time.perf_counter() + cap
    for done, arg in enumerate(args, 1):
        if fn(arg) is None:
            raise RuntimeError(f"{arg!r} not found")
        if not done % CHECK_EVERY and time.perf_counter() > deadline:
            break
    return done


class Rocket(Contender):
    module = None
    bytes_keys = False

    def __init__(self, impl: str):
        self.impl = impl
        self.name = f"rocketstore [{impl}]"
        self.store = None

    def missing(self):
        if self.impl == "c" and _impl.COMPILED is None:
            return f"not built: the installed rocketstore is pure Python ({BUILD['why_pure']})"
        return None

    def open(self, path, durable=False):
        self.path = path
        # the defaults (index_slots, index_count, segment size, ...): what a user gets
        self.store = MessageStore(path, implementation=self.impl)
        self.store.create_topic(TOPIC, QUEUES)

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
        self.store._opened.dispatcher.catch_up()

    def read_all(self, cap):
        return count_until(self.store.iter_messages(), cap)

    def scan_all(self) -> int:
        return sum(len(records) for _start, records in self.store.scan())

    def getter(self):
        query = self.store.query_by_key

        def get(key):
            return query(TOPIC, key) or None

        return get

    def point_reads(self, sample):
        """The sampled messages' CommitLog offsets, msgIds and (queue, queue offset), gathered
        untimed (a columnar scan, then one read per sampled message for its msgId)."""
        store = self.store
        offsets, queue_ids, queue_offsets = probes.message_positions(store)
        at = [int(offsets[i]) for i in sample]
        read, by_id, by_queue = store.read, store.get_by_msg_id, store.get_by_queue_offset
        ids = [read(offset).msg_id for offset in at]
        positions = [(int(queue_ids[i]), int(queue_offsets[i])) for i in sample]

        def by_queue_offset(cap):
            done = 0
            deadline = time.perf_counter() + cap
            for done, (queue_id, queue_offset) in enumerate(positions, 1):
                by_queue(TOPIC, queue_id, queue_offset)
                if not done % CHECK_EVERY and time.perf_counter() > deadline:
                    break
            return done

        return {
            "read_offset": lambda cap: _reads(read, at, cap),
            "read_msg_id": lambda cap: _reads(by_id, ids, cap),
            "read_queue_offset": by_queue_offset,
        }

    def consume_all(self, cap):
        get_message = self.store.get_message
        done = pulls = 0
        deadline = time.perf_counter() + cap
        for queue_id in range(QUEUES):
            offset = 0
            while True:
                result = get_message("bench", TOPIC, queue_id, offset, max_msgs=32)
                got = len(result.messages)
                if not got:
                    break
                done += got
                offset = result.next_begin_offset
                pulls += 1
                if not pulls % 32 and time.perf_counter() > deadline:
                    return done
        return done


_SEQ = struct.Struct(">Q").pack  # a log key: the sequence number, 8 bytes big-endian (log order)


class Lmdb(Contender):
    """Two named databases in one environment, "log" (seq -> body, appended) and "index"
    (key -> seq), written in the same write transaction."""

    name, package, module = "LMDB", "lmdb", "lmdb"

    def open(self, path, durable=False):
        import lmdb

        os.makedirs(path, exist_ok=True)
        # sync=False: commits reach the page cache only (durable=True: every commit fsyncs)
        self.env = lmdb.open(
            path, map_size=8 * GiB, sync=durable, metasync=durable, max_spare_txns=128, max_dbs=2
        )
        self.log = self.env.open_db(b"log")
        self.index = self.env.open_db(b"index")
        self.seq = 0  # taken inside the write transaction, which LMDB serializes

    def close(self):
        txn = getattr(self, "_read_txn", None)
        if txn is not None:
            txn.abort()
            self._read_txn = None
        self.env.close()

    def putter(self):
        begin, log, index = self.env.begin, self.log, self.index

        def one(key, body):
            with begin(write=True) as txn:
                seq = _SEQ(self.seq)
                self.seq += 1
                txn.put(seq, body, db=log, append=True)
                txn.put(key, seq, db=index)

        return one

    def batch_putter(self):
        begin, log, index = self.env.begin, self.log, self.index

        def batch(keys, bodies):
            with begin(write=True) as txn:
                seqs = [_SEQ(s) for s in range(self.seq, self.seq + len(keys))]
                self.seq += len(keys)
                txn.cursor(db=log).putmulti(zip(seqs, bodies), append=True)
                txn.cursor(db=index).putmulti(zip(keys, seqs))

        return batch

    durable_putter = putter

    def _reader(self):
        txn = getattr(self, "_read_txn", None)
        if txn is None:
            txn = self._read_txn = self.env.begin()
        return txn

    def read_all(self, cap):
        with self.env.begin() as txn:
            return count_until(txn.cursor(db=self.log).iternext(keys=False, values=True), cap)

    def getter(self):
        get, log, index = self._reader().get, self.log, self.index

        def by_key(key):
            seq = get(key, db=index)
            return None if seq is None else get(seq, db=log)

        return by_key

    def point_reads(self, sample):
        get = functools.partial(self._reader().get, db=self.log)
        seqs = [_SEQ(i) for i in sample]
        return {"read_offset": lambda cap: _reads(get, seqs, cap)}


class _LogAndIndex(Contender):
    """A peer whose ``log`` (seq -> body) and ``index`` (key -> seq) both have ``get``: a lookup
    by key is two gets, a read by position one."""

    def getter(self):
        log_get, index_get = self.log.get, self.index.get

        def by_key(key):
            seq = index_get(key)
            return None if seq is None else log_get(seq)

        return by_key

    def point_reads(self, sample):
        get = self.log.get
        seqs = [_SEQ(i) for i in sample]
        return {"read_offset": lambda cap: _reads(get, seqs, cap)}


class Rocks(_LogAndIndex):
    """Two column families, "log" and "index", written through one WriteBatch per put."""

    name, package, module = "RocksDB", "rocksdict", "rocksdict"

    def open(self, path, durable=False):
        import rocksdict

        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        self.db = rocksdict.Rdict(path, options)
        self.log = self.db.create_column_family("log", rocksdict.Options(raw_mode=True))
        self.index = self.db.create_column_family("index", rocksdict.Options(raw_mode=True))
        self.handles = self.db.get_column_family_handle("log"), self.db.get_column_family_handle("index")
        self.sync = rocksdict.WriteOptions()
        self.sync.sync = True
        self.next_seq = itertools.count().__next__  # atomic under the GIL: safe across threads

    def close(self):
        for db in (self.log, self.index, self.db):
            db.close()

    def _writer(self, write_opt=None):
        import rocksdict

        batch_class, write, next_seq = rocksdict.WriteBatch, self.db.write, self.next_seq
        log, index = self.handles

        def one(key, body):
            seq = _SEQ(next_seq())
            wb = batch_class(raw_mode=True)
            wb.put(seq, body, log)
            wb.put(key, seq, index)
            write(wb, write_opt)

        return one

    def putter(self):
        return self._writer()

    def batch_putter(self):
        import rocksdict

        batch_class, write, next_seq = rocksdict.WriteBatch, self.db.write, self.next_seq
        log, index = self.handles

        def batch(keys, bodies):
            wb = batch_class(raw_mode=True)
            put = wb.put
            for key, body in zip(keys, bodies):
                seq = _SEQ(next_seq())
                put(seq, body, log)
                put(key, seq, index)
            write(wb)

        return batch

    def durable_putter(self):
        return self._writer(self.sync)

    def read_all(self, cap):
        return count_until(self.log.values(), cap)


class Level(_LogAndIndex):
    """One database, the log under prefix b"l" and the index under b"k", written through one
    write batch per put."""

    name, package, module = "LevelDB", "plyvel", "plyvel"

    def open(self, path, durable=False):
        import plyvel

        self.db = plyvel.DB(path, create_if_missing=True)
        self.log, self.index = self.db.prefixed_db(b"l"), self.db.prefixed_db(b"k")
        self.next_seq = itertools.count().__next__

    def close(self):
        self.db.close()

    def _writer(self, sync):
        write_batch, next_seq = self.db.write_batch, self.next_seq

        def one(key, body):
            seq = _SEQ(next_seq())
            with write_batch(sync=sync) as wb:
                wb.put(b"l" + seq, body)
                wb.put(b"k" + key, seq)

        return one

    def putter(self):
        return self._writer(False)

    def batch_putter(self):
        write_batch, next_seq = self.db.write_batch, self.next_seq

        def batch(keys, bodies):
            with write_batch() as wb:
                put = wb.put
                for key, body in zip(keys, bodies):
                    seq = _SEQ(next_seq())
                    put(b"l" + seq, body)
                    put(b"k" + key, seq)

        return batch

    def durable_putter(self):
        return self._writer(True)

    def read_all(self, cap):
        return count_until(self.log.iterator(include_key=False), cap)


class Sqlite(Contender):
    """Tables ``log(seq INTEGER PRIMARY KEY, body)`` and ``idx(key PRIMARY KEY, seq) WITHOUT
    ROWID``, both inserted in one transaction."""

    name, module = "sqlite3 WAL", None
    bytes_keys = False
    INSERT_LOG = "INSERT INTO log VALUES (?, ?)"
    INSERT_IDX = "INSERT INTO idx VALUES (?, ?)"

    def _connect(self):
        conn = sqlite3.connect(self.file, isolation_level=None, check_same_thread=False, timeout=60)
        conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL: a WAL commit does not fsync (the non-durable default); FULL: every commit does
        conn.execute(f"PRAGMA synchronous={'FULL' if self.durable else 'NORMAL'}")
        return conn

    def open(self, path, durable=False):
        os.makedirs(path, exist_ok=True)
        self.file = os.path.join(path, "log.sqlite")
        self.durable = durable
        self.conn = self._connect()
        self.conn.execute("CREATE TABLE IF NOT EXISTS log (seq INTEGER PRIMARY KEY, body BLOB)")
        self.conn.execute("CREATE TABLE IF NOT EXISTS idx (key TEXT PRIMARY KEY, seq INTEGER) WITHOUT ROWID")
        self.local = threading.local()
        self.conns = [self.conn]
        self.next_seq = itertools.count().__next__

    def close(self):
        for conn in self.conns:
            conn.close()

    def _one(self, conn):
        execute, next_seq = conn.execute, self.next_seq

        def one(key, body):
            seq = next_seq()
            execute("BEGIN IMMEDIATE")
            execute(self.INSERT_LOG, (seq, body))
            execute(self.INSERT_IDX, (key, seq))
            execute("COMMIT")

        return one

    def putter(self):
        return self._one(self.conn)

    def batch_putter(self):
        conn, next_seq = self.conn, self.next_seq

        def batch(keys, bodies):
            seqs = [next_seq() for _ in keys]
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(self.INSERT_LOG, zip(seqs, bodies))
            conn.executemany(self.INSERT_IDX, zip(keys, seqs))
            conn.execute("COMMIT")

        return batch

    def durable_putter(self):
        lock = threading.Lock()

        def one(key, body):
            put = getattr(self.local, "put", None)
            if put is None:  # one connection per thread, as sqlite wants
                conn = self._connect()
                with lock:
                    self.conns.append(conn)
                put = self.local.put = self._one(conn)
            put(key, body)

        return one

    def read_all(self, cap):
        return count_until(self.conn.execute("SELECT body FROM log ORDER BY seq"), cap)

    def getter(self):
        execute = self.conn.execute

        def by_key(key):
            row = execute("SELECT seq FROM idx WHERE key = ?", (key,)).fetchone()
            return None if row is None else execute("SELECT body FROM log WHERE seq = ?", row).fetchone()

        return by_key

    def point_reads(self, sample):
        execute = self.conn.execute

        def get(seq):
            return execute("SELECT body FROM log WHERE seq = ?", (seq,)).fetchone()

        return {"read_offset": lambda cap: _reads(get, list(sample), cap)}

    def verify(self) -> None:
        if self.conn.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
            raise RuntimeError("sqlite integrity_check failed")


class DiskCache(Contender):
    """One Cache: the log under integer keys (seq), the index under the string keys, both set in
    one ``transact()``."""

    name, package, module = "diskcache", "diskcache", "diskcache"
    bytes_keys = False

    def open(self, path, durable=False):
        import diskcache

        # its defaults: SQLite in WAL mode, synchronous NORMAL; durable=True asks for FULL
        self.cache = diskcache.Cache(
            path, size_limit=64 * GiB, cull_limit=0, sqlite_synchronous=2 if durable else 1
        )
        self.next_seq = itertools.count().__next__
        self.stored = 0

    def close(self):
        self.cache.close()

    def putter(self):
        cache, next_seq = self.cache, self.next_seq

        def one(key, body):
            seq = next_seq()
            with cache.transact():
                cache.set(seq, body)
                cache.set(key, seq)

        return one

    def batch_putter(self):
        cache, next_seq = self.cache, self.next_seq

        def batch(keys, bodies):
            with cache.transact():
                put = cache.set
                for key, body in zip(keys, bodies):
                    seq = next_seq()
                    put(seq, body)
                    put(key, seq)

        return batch

    durable_putter = putter

    def read_all(self, cap):
        # no value iterator and the keys mix log and index: a get per seq, in log order
        get = self.cache.get
        return count_until((get(seq) for seq in range(len(self.cache) // 2)), cap)

    def getter(self):
        get = self.cache.get

        def by_key(key):
            seq = get(key)
            return None if seq is None else get(seq)

        return by_key

    def point_reads(self, sample):
        return {"read_offset": lambda cap: _reads(self.cache.get, list(sample), cap)}


class PersistQueue(Contender):
    name, package, module = "persist-queue", "persist-queue", "persistqueue"
    log_only = True

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

    def point_reads(self, sample):
        raise Unsupported("a FIFO queue: no read by position")


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


def _capped_batches(fn, keys, bodies, cap: float, size: int = KEYED_BATCH) -> tuple[int, float]:
    n = len(keys)
    start = time.perf_counter()
    deadline = start + cap
    done = 0
    while done < n:
        stop = min(n, done + size)
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
    """results[row] = fn(), or the reason it could not run. The cyclic GC collects first
    (untimed): otherwise the first phase that allocates objects by the thousand (a batch of
    ``Message`` objects) pays for collections walking the harness's own young million-item
    lists, 170 ns a message in a 1M run, whichever contender or phase that falls on."""
    gc.collect()
    try:
        results[row] = fn()
    except Unsupported as exc:
        results[row] = dict(na=str(exc))
    except Exception as exc:  # a peer failing is reported in its cell, the run goes on
        results[row] = dict(error=f"{type(exc).__name__}: {exc}")
        log(f"    {row}: {results[row]['error']}")


POINT_READS = ("read_offset", "read_msg_id", "read_queue_offset")


def _read_phases(c: Contender, r: dict, keys: list, stored: int, p: dict) -> None:
    """The read rows, on the store the batch phase (or phase (a)) left: lookups by key, random
    reads by position, consuming the queues, reading everything as objects."""
    cap = p["cap"]
    rng = random.Random(11)
    # (e) random lookups by key among the stored keys
    sample = rng.choices(keys[:stored], k=p["lookups"]) if stored else []

    def lookups():
        get = c.getter()
        t0 = time.perf_counter()
        done = _reads(get, sample, cap)
        return _result(done, time.perf_counter() - t0, len(sample))

    # lookups first: persist-queue's read consumes its queue
    _attempt(r, "lookup", lookups)
    # (f) random reads by position: the same messages, numbered in store order
    positions = rng.choices(range(stored), k=p["lookups"]) if stored else []
    try:
        readers = c.point_reads(positions)
    except Unsupported as exc:
        for row in POINT_READS:
            r[row] = dict(na=str(exc))
    else:
        for row, run in readers.items():

            def timed(run=run):
                t0 = time.perf_counter()
                done = run(cap)
                return _result(done, time.perf_counter() - t0, len(positions))

            _attempt(r, row, timed)
        for row in POINT_READS:  # a peer's one "get by seq" stands for all three
            if row not in readers:
                r[row] = dict(r["read_offset"], note="get by seq")

    # (g) consume every queue through get_message, 32 per pull
    def consume():
        t0 = time.perf_counter()
        done = c.consume_all(cap)
        if done < stored and time.perf_counter() - t0 < cap:
            raise RuntimeError(f"get_message delivered {done:,} of {stored:,} messages")
        return _result(done, time.perf_counter() - t0, stored)

    _attempt(r, "get_message", consume)

    # (d) every message read in log order, as an object
    def read():
        t0 = time.perf_counter()
        count = c.read_all(cap)
        return _result(count, time.perf_counter() - t0, stored)

    _attempt(r, "read", read)


def run_contender(c: Contender, root: str, data: dict, p: dict) -> dict:
    """Every phase for one contender, each store in a fresh directory removed afterwards."""
    n, cap = p["messages"], p["cap"]
    keys = data["bkeys"] if c.bytes_keys else data["skeys"]
    bodies = data["bodies"]
    r: dict = {}

    os.makedirs(root, exist_ok=True)
    # (a) one keyed put per call
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
    # (b) keyed batch put
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
                functools.partial(_capped_batches, size=BODIES_BATCH),
                lambda store: lambda k, b, put_batch=store.put_batch: put_batch(TOPIC, b),
            ),
        )
    try:
        _read_phases(c, r, keys, stored, p)
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

    # (c) durable keyed puts
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
    if c.log_only:  # not the same work: said in every cell it measured
        for cell in r.values():
            if isinstance(cell, dict) and "rate" in cell:
                cell["partial"] = "log only: no key index"
    return r


# ---- aggregation and report ----

ROWS = [
    # key, label, unit, hardware limit for rocketstore's ratio
    (
        "single",
        "(a) keyed put, 1 per call, until indexed: put(topic, body, keys=k); peers: log + index, one transaction",
        "msg",
        "raw_write",
    ),
    ("single_no_key", "(a') put, 1 per call, no key: put(topic, body)", "msg", "raw_write"),
    (
        "batch",
        f"(b) keyed batch, {KEYED_BATCH:,} per call: put_messages([Message(topic, body, keys=k), ...]); "
        "peers: one transaction of log + index",
        "msg",
        "raw_write",
    ),
    (
        "batch_bodies",
        f"(b') batch put, {BODIES_BATCH:,} bodies per call, no key: put_batch()",
        "msg",
        "raw_write",
    ),
    ("durable_4", "(c) durable keyed put, 4 threads", "msg", "fsync_4"),
    ("durable_16", "(c) durable keyed put, 16 threads", "msg", "fsync_16"),
    ("durable_64", "(c) durable keyed put, 64 threads", "msg", "fsync_64"),
    ("pipelined", "(c) durable put, pipelined, 1 thread", "msg", "raw_write"),
    (
        "read",
        "(d) read every message as an object: iter_messages(); peers: cursor over the log",
        "msg",
        "memcpy",
    ),
    ("scan", "(d') read everything, columnar: scan()", "msg", "memcpy"),
    (
        "get_message",
        "(g) consume every queue: get_message(group, topic, qid, offset, max_msgs=32)",
        "msg",
        "memcpy",
    ),
    ("read_offset", "(f) random read by CommitLog offset: read(offset); peers: get by seq", "read", "dict"),
    ("read_msg_id", "(f) random read by msgId: get_by_msg_id(id); peers: get by seq", "read", "dict"),
    (
        "read_queue_offset",
        "(f) random read by queue offset: get_by_queue_offset(topic, qid, qoff); peers: get by seq",
        "read",
        "dict",
    ),
    (
        "lookup",
        "(e) random lookup by key, on-disk index: query_by_key(topic, key); peers: key → seq → body, two gets",
        "lookup",
        "dict",
    ),
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
    for why in (cell.get("note"), cell.get("partial")):
        if why:
            text += f" ({why})"
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


def goal_text(row: str, ours: float | None, agg: dict) -> tuple[str, dict | None]:
    """The goal cell of ``row`` ("" when it has none) and its verdict for the JSON."""
    goal = ROW_GOALS.get(row)
    if goal is None:
        return "", None
    wants, got, met = [], [], True
    if "rate" in goal:
        wants.append(f"≥ {_fmt_rate(goal['rate'], 'msg')}")
        if ours is not None:
            got.append(f"{ours / goal['rate']:.2f} of it")
            met &= ours >= goal["rate"]
    if "peer" in goal:
        peer, factor = goal["peer"]
        wants.append(f"≥ {factor:g}× {peer}")
        theirs = _value(agg[peer].get(row), "msg") if isinstance(agg.get(peer), dict) else None
        if theirs is None:
            got.append(f"{peer} not measured")
            met = False
        elif ours is not None:
            got.append(f"{ours / theirs:.2f}× {peer}")
            met &= ours >= factor * theirs
    want = " and ".join(wants)
    if ours is None:
        return f"{want}: not measured", dict(goal=want, met=None)
    verdict = "met" if met else "MISSED"
    return f"{want}: {verdict} ({'; '.join(got)})", dict(goal=want, met=met, measured=ours)


def build_table(agg: dict, names: list[str], limits: dict, record_bytes: float) -> tuple[list[str], dict]:
    head = (
        "| workload | "
        + " | ".join(names)
        + " | rocketstore [c] ÷ best peer | rocketstore [c] ÷ machine limit | goal |"
    )
    lines = [head, "|" + "---|" * (len(names) + 4)]
    ratios = {}
    # a peer doing less than the same work (no key index) is shown, never the "best peer"
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
            if isinstance(agg.get(n), dict)
            and not agg[n].get(row, {}).get("partial")
            and (v := _value(agg[n].get(row), unit)) is not None
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
        goal, verdict = goal_text(row, ours, agg)
        if verdict is not None:
            ratios.setdefault(row, {})["goal"] = verdict
        lines.append(f"| {label} | " + " | ".join(texts) + f" | {vs_peer} | {vs_limit} | {goal} |")
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
    goal("batch read (columnar scan)", _value(ours.get("scan"), "msg"), GOALS["batch_read"], m)
    crc = limits.get("rocketstore_crc32_gbps")
    goal("CRC32, 1 MiB", crc, GOALS["crc_gbps"], lambda x: f"{x:.1f} GB/s")
    goal("verify", _value(ours.get("verify"), "GB"), GOALS["verify_gbps"], lambda x: f"{x:.2f} GB/s")
    return ["| earlier goal | measured | target | verdict |", "|---|---|---|---|"] + rows


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
