"""What a page costs the first time this machine's guest touches it: anonymous memory written
100 MB at a time, each chunk's rate and kernel time, until ``--gb`` are in use.

    .venv/bin/python -m tests.bench.touch_pages [--gb 4] [--chunk-mb 100]

Why it is a benchmark of its own: on this VM (virtio_balloon, free page reporting) the first
~2.4 GB a program touches write at ~1 GB/s, every page beyond at ~0.2 GB/s with ~6x the kernel
time (the host backs a guest page on its first touch). A broker writing its log fills fresh
page-cache pages the same way, so any benchmark that piles up more than about that much data
measures the host, not the broker (``tests.bench.kafka`` starts its brokers afresh every round
for this reason). The memory is given back when the program exits.
"""

from __future__ import annotations

import argparse
import mmap
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.touch_pages", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--gb", type=float, default=4.0)
    parser.add_argument("--chunk-mb", type=int, default=100)
    args = parser.parse_args(argv)
    chunk = args.chunk_mb << 20
    data = b"x" * chunk
    maps: list[mmap.mmap] = []  # kept: the point is memory in use
    print(f"{'in use':>8} {'GB/s':>6} {'kernel s':>9}")
    while len(maps) * chunk < args.gb * (1 << 30):
        started, before = time.perf_counter(), os.times()
        region = mmap.mmap(-1, chunk)
        region.write(data)
        maps.append(region)
        kernel = os.times().system - before.system
        rate = chunk / (time.perf_counter() - started) / 1e9
        print(f"{len(maps) * args.chunk_mb:>5} MB {rate:6.2f} {kernel:9.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
