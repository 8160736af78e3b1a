"""What engine.py, compare.py and regress.py share: the machine's own limits that they divide by
(page-cache write bandwidth, the fdatasync rate), a timed run of worker threads, and where a
store's messages are (for random reads). Importing it
has no side effects (regress.py must measure the installed package, not whatever ``src/``
holds)."""

from __future__ import annotations

import fcntl
import os
import statistics
import threading
import time

import numpy as np

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def data_sync(fd: int) -> None:
    """The data sync the store's flush uses: F_FULLFSYNC where it exists (macOS, whose fsync
    leaves data in the drive cache), else fdatasync, else fsync."""
    full_sync = getattr(fcntl, "F_FULLFSYNC", None)
    if full_sync is not None:
        fcntl.fcntl(fd, full_sync)
    else:
        getattr(os, "fdatasync", os.fsync)(fd)


def _allocate(fd: int, size: int) -> None:
    if hasattr(os, "posix_fallocate"):
        os.posix_fallocate(fd, 0, size)
    else:  # macOS: sparse, like the store's segments there
        os.ftruncate(fd, size)


def fdatasync_baseline(directory: str, seconds: float, size: int = GiB) -> dict:
    """Back-to-back write-4KiB + fdatasync to fresh blocks of a posix_fallocate'd file of
    ``size`` bytes (reused round-robin)."""
    path = os.path.join(directory, "fdatasync.probe")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _allocate(fd, size)
        data_sync(fd)
        block = b"\x5a" * (4 * KiB)
        latencies = []
        pos = 0
        start = time.perf_counter()
        deadline = start + seconds
        now = start
        while now < deadline:
            os.pwrite(fd, block, pos)
            data_sync(fd)
            after = time.perf_counter()
            latencies.append(after - now)
            now = after
            pos = (pos + len(block)) % size
        elapsed = now - start
    finally:
        os.close(fd)
        os.unlink(path)
    latencies.sort()
    return dict(
        ops=len(latencies),
        seconds=elapsed,
        rate=len(latencies) / elapsed,
        median_us=statistics.median(latencies) * 1e6,
        p99_us=latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1e6,
    )


def write_bandwidth(directory: str, total: int, *, sync: bool = True) -> dict:
    """write() of 1 MiB chunks to a new file, then (``sync``) fdatasync: GB/s into the page
    cache (``page_cache_gbps``) and, with the sync, to the disk (``gbps``)."""
    path = os.path.join(directory, "write.probe")
    chunk = np.random.default_rng(1).integers(0, 256, MiB, dtype=np.uint8).tobytes()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(total // MiB):
            os.write(fd, chunk)
        written = time.perf_counter()
        if sync:
            data_sync(fd)
        synced = time.perf_counter()
    finally:
        os.close(fd)
        os.unlink(path)
    result = dict(bytes=total, page_cache_gbps=total / (written - start) / 1e9)
    if sync:
        result["gbps"] = total / (synced - start) / 1e9
    return result


def run_threads(threads: int, seconds: float, work) -> tuple[list, float]:
    """Run ``work(i, end)`` on ``threads`` threads released together by a barrier, each until
    ``time.perf_counter()`` passes ``end`` (``seconds`` after the release). Returns (what each
    call returned, wall seconds from the release until the last thread finished)."""
    results = [None] * threads
    barrier = threading.Barrier(threads + 1)
    deadline = [0.0]

    def worker(i: int) -> None:
        barrier.wait()
        results[i] = work(i, deadline[0])

    pool = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for t in pool:
        t.start()
    start = time.perf_counter()
    deadline[0] = start + seconds
    barrier.wait()
    for t in pool:
        t.join()
    return results, time.perf_counter() - start


def message_positions(store) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every message's (CommitLog offset, queue id, queue offset), in CommitLog order, from one
    columnar scan of ``store``."""
    offsets, queue_ids, queue_offsets = [], [], []
    for start, records in store.scan():
        offsets.append(start + records["position"])
        queue_ids.append(records["queue_id"])
        queue_offsets.append(records["queue_offset"])
    return tuple(np.concatenate(a) for a in (offsets, queue_ids, queue_offsets))  # type: ignore[return-value]
