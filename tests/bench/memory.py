"""Benchmark hygiene for a VM that hands free memory back to its host: ``recycle_memory``.

This VM (Firecracker, ``virtio_balloon`` free page reporting) returns guest memory that sat
free to the host, and the guest's first touch of such a page costs ~10 us per 4 KiB: writing
2 GiB into new page cache took 5.1 s of system time, into pages just freed 0.4 s (a 64 KiB
write loop, 2026-11-25). A broker writes every message into new page cache (the commit log), so
a run that lands on handed-back memory pays ~2.4 us more per 1 KiB message than one that lands
on pages freed a moment ago: under ``tests.bench.topics`` the same configuration measured
306k msg/s in one round and 166k in the next, the difference all system time in
``copy_folio_from_iter_atomic``. A long-running broker does not see it (its page cache fills
memory, and reclaim recycles pages the guest holds), so a benchmark that compares
configurations must give each the same memory, not whatever the previous run left.

``recycle_memory(n)`` touches ``n`` bytes of anonymous memory and frees them at once: the
pages are the guest's again, and the page cache takes freed pages before the host gets them
back. Called before each timed run, every run starts from the same place. Only roughly: this
kernel reports freed memory as soon as 1 GiB of it waits
(``/sys/module/page_reporting/parameters``: ``max_waiting_mib`` 1024, ``min_free_ms`` 0), so
part of it can be gone before the run gets to it (a run after a recycle still paid 0.84 us
a message in the page cache copy, another 0.14).
"""

from __future__ import annotations

import mmap
import time

CHUNK = 1 << 20
# Never more than this share of what the kernel says is available (a small VM stays safe).
MAX_SHARE = 0.5


def available_bytes() -> int:
    """MemAvailable from /proc/meminfo (0 where there is none)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def recycle_memory(nbytes: int) -> tuple[int, float]:
    """Touch then free up to ``nbytes`` of anonymous memory; returns (bytes, seconds)."""
    nbytes = min(nbytes, int(available_bytes() * MAX_SHARE)) // CHUNK * CHUNK
    started = time.perf_counter()
    if nbytes <= 0:
        return 0, 0.0
    block = mmap.mmap(-1, nbytes)
    try:
        ones = b"\x01" * CHUNK
        for offset in range(0, nbytes, CHUNK):
            block[offset : offset + CHUNK] = ones
    finally:
        block.close()
    return nbytes, time.perf_counter() - started
