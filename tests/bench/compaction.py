"""Compaction of a big queue: its cost (time, memory) and what it does to SYNC_FLUSH produce
latency while it runs, in pooled alternating rounds.

    .venv/bin/python -m tests.bench.compaction [--records 1000000] [--keys 100000]
        [--rounds 8] [--seconds 6] [--map-mib 32] [--io-mibps 32] [--dir DIR]
    .venv/bin/python -m tests.bench.compaction --pool LOG [LOG ...]

In process, on a real store (SYNC_FLUSH) in ``--dir`` (the system temp dir by default):

1. A compacted topic gets ``--records`` records (256-byte bodies) over ``--keys`` keys, cycled.
2. Rounds, the order reversed every other round (drift falls on both alike): ``without``:
   ``--writers`` (8) producers each ``put`` one message at a time to another topic and wait for
   its fsync, for ``--seconds``; ``with``: the same while a compaction pass of the big queue
   runs (started fresh each round: the kept log is dropped, so every round compacts from the
   start). Each round prints both p99 latencies and their ratio; the target is a median ratio
   <= 2 (``pooled.py``'s interval decides).
3. Then one full compaction, pass after pass, until the queue is clean: seconds, passes,
   records a second, the peak RSS growth over the store's (the key map is bounded by
   ``--map-mib``: 160 bytes a key, so 32 MiB holds 209,715 keys and a queue of more keys needs
   several passes), and the kept records (one per key).

The default here is 1 million records and 100,000 keys; 10 million and 1 million (with
``--map-mib 168``: one pass) take ~3 minutes to fill and ~8 to compact on the 2-core VM
(tests/bench/README.md has each run's size).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from wharf.store.config import StoreConfig
from wharf.store.message_store import MessageStore
from wharf.store.model import MessageInput
from wharf.store.retention.compactor import MAP_ENTRY_BYTES
from wharf.store.retention.kept_log import remove_kept_log_blocking
from wharf.store.retention.policy import TopicPolicy

from tests.bench import pooled

TOPIC = "compacted"
POLICY = TopicPolicy(compact=True, delete=False, segment_ms=1, min_cleanable_dirty_ratio=0.01)
TARGET = 2.0  # p99 with compaction at most twice the p99 without
BODY = b"x" * 256


def _rss_kib() -> int:
    """Anonymous resident memory (the heap: the key map, buffers), not the commit log's pages
    a pass maps in to read (RssFile: page cache, counted in VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    return 0


async def _fill(store: MessageStore, records: int, keys: int) -> None:
    batch = 1000
    for first in range(0, records, batch):
        messages = [
            MessageInput(BODY, {"KEYS": f"key-{i % keys}"})
            for i in range(first, min(first + batch, records))
        ]
        await store.put(TOPIC, 0, messages)
    await store.wait_dispatched(60)


async def _produce(store: MessageStore, writers: int, seconds: float) -> list[float]:
    latencies: list[float] = []
    deadline = time.monotonic() + seconds

    async def writer(n: int) -> None:
        message = [MessageInput(BODY, {"KEYS": f"w{n}"})]
        while time.monotonic() < deadline:
            began = time.perf_counter()
            await store.put("produce", n % 4, message)
            latencies.append(time.perf_counter() - began)

    await asyncio.gather(*(writer(n) for n in range(writers)))
    return latencies


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) > 1 else float("nan")


class Peak:
    """Samples anonymous RSS every 0.2 s while running: the peak over a phase."""

    def __init__(self) -> None:
        self.peak = _rss_kib()
        self.task = asyncio.get_running_loop().create_task(self._sample())

    async def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, _rss_kib())
            await asyncio.sleep(0.2)

    def stop(self) -> int:
        self.task.cancel()
        return max(self.peak, _rss_kib())


class Compacting:
    """One pass of the big queue in the background, stoppable (the store's own pass)."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.stop = False
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        compaction = self.store.retention.compaction
        assert compaction is not None
        queue = self.store.insides.queues.find(TOPIC, 0)
        assert queue is not None
        self.stop = False
        self.task = asyncio.get_running_loop().create_task(
            compaction.compact(
                queue,
                POLICY,
                queue.max_offset,
                int(time.time() * 1000),
                asyncio.to_thread,
                lambda: self.stop,
            )
        )

    async def finish(self) -> None:
        self.stop = True
        if self.task is not None:
            await self.task
        await reset(self.store)


async def reset(store: MessageStore) -> None:
    """Drop the queue's kept log: the next pass starts from the queue's beginning."""
    compaction = store.retention.compaction
    assert compaction is not None
    kept = compaction.kept.pop((TOPIC, 0), None)
    if kept is not None:
        kept.close()
        await asyncio.to_thread(remove_kept_log_blocking, kept.directory)


async def _round(store: MessageStore, n: int, args: argparse.Namespace) -> float:
    p99 = {}
    throughout = False
    order = ("without", "with") if n % 2 == 0 else ("with", "without")
    for variant in order:
        compacting = Compacting(store)
        if variant == "with":
            compacting.start()
        latencies = await _produce(store, args.writers, args.seconds)
        if variant == "with":
            assert compacting.task is not None
            throughout = not compacting.task.done()  # else the pass ended within the phase
            await compacting.finish()
        p99[variant] = _p99(latencies)
    ratio = p99["with"] / p99["without"]
    ran = "ran throughout" if throughout else "ENDED EARLY: raise --records"
    print(
        f"round {n}: p99 without {p99['without'] * 1e3:.2f} ms, with {p99['with'] * 1e3:.2f} ms,"
        f" ratio {ratio:.2f} (compaction {ran})",
        flush=True,
    )
    return ratio


async def _full(store: MessageStore) -> None:
    await reset(store)
    rss0 = _rss_kib()
    peak = rss0
    map_keys = min(store.config.compaction_map_bytes // MAP_ENTRY_BYTES, 2**63)
    began = time.monotonic()
    stats = store.retention.stats()
    passes0, read0, cpu0 = stats.passes, stats.records_read, stats.cpu_seconds
    compaction = store.retention.compaction
    assert compaction is not None
    queue = store.insides.queues.find(TOPIC, 0)
    assert queue is not None
    while compaction.cleaned_to(queue) < queue.max_offset:
        task = asyncio.get_running_loop().create_task(
            compaction.compact(
                queue,
                POLICY,
                queue.max_offset,
                int(time.time() * 1000),
                asyncio.to_thread,
                lambda: False,
            )
        )
        while not task.done():
            await asyncio.sleep(0.2)
            peak = max(peak, _rss_kib())
        task.result()
    seconds = time.monotonic() - began
    kept = compaction.kept[(TOPIC, 0)].state
    print(
        f"full compaction: {queue.max_offset} records -> {kept.records} kept in "
        f"{stats.passes - passes0} passes, {seconds:.1f} s "
        f"({(stats.records_read - read0) / seconds:,.0f} dirty records read a second; "
        f"{(stats.cpu_seconds - cpu0) / max(stats.records_read - read0, 1) * 1e6:.1f} us of "
        f"the pass thread's CPU a record), anonymous RSS {rss0 / 1024:.0f} MiB, "
        f"peak growth {(peak - rss0) / 1024:.0f} MiB (the key map holds at most {map_keys:,} "
        f"keys, {store.config.compaction_map_bytes >> 20} MiB)",
        flush=True,
    )


async def run(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="wharf-compaction-", dir=args.dir))
    config = StoreConfig(
        store_path_root_dir=str(root),
        flush_disk_type="SYNC_FLUSH",
        mapped_file_size_commit_log=256 << 20,
        compaction_check_interval=10**9,  # passes are started here, not by the service
        compaction_map_bytes=args.map_mib << 20,
        compaction_io_bytes_per_second=args.io_mibps << 20,
    )
    store = MessageStore(config)
    await store.start()
    try:
        began = time.monotonic()
        await _fill(store, args.records, args.keys)
        print(f"filled {args.records} records / {args.keys} keys in "
              f"{time.monotonic() - began:.0f} s", flush=True)  # fmt: skip
        filled = _rss_kib()
        peak = Peak()
        ratios = [await _round(store, n, args) for n in range(args.rounds)]
        if args.rounds:
            print(f"anonymous RSS after the fill {filled / 1024:.0f} MiB, peak during the "
                  f"rounds {peak.stop() / 1024:.0f} MiB", flush=True)  # fmt: skip
        else:
            peak.stop()
        if ratios:
            print(pooled.describe(ratios, "<=", TARGET), flush=True)
        if not args.no_full:
            await _full(store)
    finally:
        await store.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--map-mib", type=int, default=32)
    parser.add_argument("--io-mibps", type=int, default=32)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--no-full", action="store_true", help="skip the full compaction")
    parser.add_argument("--pool", nargs="+", metavar="LOG", help="pool saved outputs' rounds")
    args = parser.parse_args()
    if args.pool:
        ratios = [
            float(m.group(1))
            for line in pooled.round_lines(args.pool)
            if (m := re.search(r"ratio ([0-9.]+)", line))
        ]
        print(pooled.describe(ratios, "<=", TARGET))
        return
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
