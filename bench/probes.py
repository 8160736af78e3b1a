"""The machine's own limits that the benchmarks divide by: page-cache write bandwidth and the
fdatasync rate. Shared by engine.py, compare.py and regress.py; importing it has no side effects
(regress.py must measure the installed package, not whatever ``src/`` holds)."""

from __future__ import annotations

import os
import statistics
import time

import numpy as np

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def fdatasync_baseline(directory: str, seconds: float, size: int = GiB) -> dict:
    """Back-to-back write-4KiB + fdatasync to fresh blocks of a posix_fallocate'd file of
    ``size`` bytes (reused round-robin)."""
    path = os.path.join(directory, "fdatasync.probe")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
        os.fdatasync(fd)
        block = b"\x5a" * (4 * KiB)
        latencies = []
        pos = 0
        start = time.perf_counter()
        deadline = start + seconds
        now = start
        while now < deadline:
            os.pwrite(fd, block, pos)
            os.fdatasync(fd)
            after = time.perf_counter()
            latencies.append(after - now)
            now = after
            pos = (pos + len(block)) % size
        elapsed = now - start
    finally:
        os.close(fd)
        os.unlink(path)
    latencies.sort()
    return dict(ops=len(latencies), seconds=elapsed, rate=len(latencies) / elapsed,
                median_us=statistics.median(latencies) * 1e6,
                p99_us=latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1e6)


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
            os.fdatasync(fd)
        synced = time.perf_counter()
    finally:
        os.close(fd)
        os.unlink(path)
    result = dict(bytes=total, page_cache_gbps=total / (written - start) / 1e9)
    if sync:
        result["gbps"] = total / (synced - start) / 1e9
    return result
