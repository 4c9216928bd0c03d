"""Benchmark hygiene for a VM that hands free memory back to its host: ``page_cache_bound``
for the broker's page cache, ``recycle_memory`` for the rest.

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

``page_cache_bound(pid, n)`` instead puts the broker into a memory cgroup of its own limited to
``n`` bytes: once its page cache reaches the limit the kernel reclaims the broker's own clean
pages for its next writes, pages that never went back to the host, as on a long-running broker
whose page cache fills memory. 75 s of produce at 256 topics (2026-11-26, 1 KiB messages, ~22
GB written): unbounded, ~300k msg/s for 23 s and then ~160k for the rest (the memory freed
before the run used up); in a 2 GiB cgroup, 230-350k msg/s in every half second but two, with
no step. It needs a writable cgroup memory controller (root, cgroup v1 or v2); without one it
yields None and does nothing (the recycling still narrows the spread).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import time
from collections.abc import Iterator
from pathlib import Path

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


def memory_cgroup_of(pid: int | str = "self") -> tuple[Path, str, str] | None:
    """(the memory cgroup directory of process ``pid``, its limit file, its usage file): the
    memory controller's line of /proc/PID/cgroup (cgroup v1), else the unified one (v2)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):  # cgroup v1
            return (
                Path("/sys/fs/cgroup/memory" + path),
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
            )
    for line in lines:
        if line.startswith("0::"):
            return Path("/sys/fs/cgroup" + line[3:]), "memory.max", "memory.current"
    return None


def _own_memory_cgroup() -> tuple[Path, str, str] | None:
    """``memory_cgroup_of`` this process, where a child group of it can limit memory (v2: its
    memory controller is enabled for its children), or None."""
    found = memory_cgroup_of()
    if found is not None and found[1] == "memory.max":
        try:
            if "memory" not in (found[0] / "cgroup.subtree_control").read_text().split():
                return None
        except OSError:
            return None
    return found


@contextlib.contextmanager
def page_cache_bound(pid: int, nbytes: int) -> Iterator[Path | None]:
    """Process ``pid`` in a memory cgroup of its own limited to ``nbytes`` for the block (see the
    module docstring); yields its usage file, or None where none could be made (nothing done)."""
    found = _own_memory_cgroup() if nbytes > 0 else None
    if found is None:
        yield None
        return
    parent, limit_file, usage_file = found
    group = parent / f"wharf-bench-{os.getpid()}"
    try:
        group.mkdir(exist_ok=True)
        (group / limit_file).write_text(str(nbytes))
        (group / "cgroup.procs").write_text(str(pid))
    except OSError:
        with contextlib.suppress(OSError):
            group.rmdir()
        yield None
        return
    try:
        yield group / usage_file
    finally:
        with contextlib.suppress(OSError):  # gone already when the broker has stopped
            (parent / "cgroup.procs").write_text(str(pid))
        for _ in range(50):  # its last pages leave with the process
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def cgroup_usage(usage_file: Path) -> int:
    """Bytes charged to a ``page_cache_bound`` cgroup now."""
    return int(usage_file.read_text())
