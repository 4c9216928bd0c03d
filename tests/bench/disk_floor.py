"""The latency floor this disk sets for a durable message under group commit, with no software
cost at all (issue 67's 10k msg/s p99 target).

    python -m tests.bench.disk_floor [--rate 10000] [--seconds 5] [--rounds 3] [--dir PATH]

One loop appends to a preallocated file and fdatasyncs, back to back, as a group commit
under steady load does: before each sync it writes what ``--rate`` messages of 1 KiB would
have added since the previous one. Every sync's start and end are recorded; then each message
of a steady ``--rate`` stream (its arrival times spread evenly over the run) is given the
earliest moment it could be acknowledged: the end of the first sync that started after it
arrived. The p50 / p99 / max of those waits are what a broker with free CPU, free network and
an instant consumer would show on this disk; every real path adds its own steps to them.
Rounds run one after another on a settled disk (``compare.settle_disk``), in ``--dir``
(default: a temporary directory on the file system of the working directory, as the
brokers' stores in the other benchmarks).
"""

from __future__ import annotations

import argparse
import bisect
import os
import statistics
import tempfile
import time
from pathlib import Path

from tests.bench.compare import settle_disk
from tests.bench.read_path import pct

SEGMENT = 256 << 20  # preallocated as the commit log's segments are (posix_fallocate)
RECORD = 1024


def sync_loop(path: Path, rate: int, seconds: float) -> list[tuple[float, float]]:
    """(start, end) of each fdatasync, perf_counter seconds, while appending at ``rate``."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, SEGMENT)
        os.fsync(fd)
        syncs: list[tuple[float, float]] = []
        position = 0
        last = time.perf_counter()
        end = last + seconds
        while True:
            now = time.perf_counter()
            if now >= end:
                break
            size = max(RECORD, int((now - last) * rate) * RECORD)
            if position + size > SEGMENT:
                position = 0
            os.pwrite(fd, b"m" * size, position)
            position += size
            last = now
            started = time.perf_counter()
            os.fdatasync(fd)
            syncs.append((started, time.perf_counter()))
        return syncs
    finally:
        os.close(fd)


def waits(syncs: list[tuple[float, float]], rate: int) -> list[float]:
    """Each evenly spread arrival's wait (ms) for the end of the first sync started after it."""
    starts = [start for start, _ in syncs]
    first, last = syncs[0][0], syncs[-1][0]
    out = []
    count = int((last - first) * rate)
    for i in range(count):
        arrival = first + i / rate
        k = bisect.bisect_right(starts, arrival)
        if k < len(syncs):
            out.append((syncs[k][1] - arrival) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    p99s = []
    with tempfile.TemporaryDirectory(prefix="wharf-disk-floor-", dir=args.dir or ".") as tmp:
        root = Path(tmp)
        for round_ in range(args.rounds):
            settle_disk(root, max_s=5.0)
            syncs = sync_loop(root / "log", args.rate, args.seconds)
            durations = [(end - start) * 1000 for start, end in syncs]
            lat = waits(syncs, args.rate)
            p99s.append(pct(lat, 0.99))
            print(
                f"round {round_ + 1}: {len(syncs)} fdatasyncs, p50 {pct(durations, 0.5):.3f} "
                f"p99 {pct(durations, 0.99):.3f} max {max(durations):.3f} ms; a message at "
                f"{args.rate} msg/s waits p50 {pct(lat, 0.5):.3f} p99 {pct(lat, 0.99):.3f} "
                f"max {max(lat):.3f} ms (load {os.getloadavg()[0]:.2f})",
                flush=True,
            )
    print(
        f"floor at {args.rate} msg/s: p99 median {statistics.median(p99s):.3f} ms "
        f"(range {min(p99s):.3f}-{max(p99s):.3f}) over {args.rounds} rounds"
    )


if __name__ == "__main__":
    main()
