"""Store benchmark: a program that prints figures (no asserts). ``python -m tests.bench.store_append``.

Sections (``--sections a,b``; all by default), each printing ``section | figure | value`` lines
and, where it makes sense, a ratio against a peer measured in the same run:

- ``append``: ASYNC_FLUSH appends of 1 KiB messages in batches, direct mmap writes with and
  without segment warm-up, and the transient store pool; peer: writing the same pre-encoded
  bytes with ``os.write`` (what the store adds on top of the page-cache copy).
- ``sync``: SYNC_FLUSH with N concurrent writer tasks, each awaiting its group commit; peer:
  one fdatasync per append (no group commit).
- ``read``: raw batched reads (``read_bytes`` + record framing), dispatch decoding
  (``iter_dispatch``) and full decoding (``read_messages`` -> StoredMessage).
- ``start``: the first append on a fresh store (does it wait for a segment on the loop?) and
  an abnormal restart whose checkpoint is at the data end with empty preallocated segments
  after it (is the tail rescanned?).
- ``recovery``: a subprocess fills a log of ``--log-gib`` GiB with ASYNC_FLUSH and is SIGKILLed
  mid-load; then the time to reopen and recover (abnormal, from the checkpoint) is printed;
  peer: the same recovery validating every segment (no checkpoint), as a full rescan would.

Extra sections: a module ``tests.bench.store_queues`` exposing ``SECTIONS: dict[str, coroutine
function(args)]`` is picked up automatically (ConsumeQueue / pull-level figures).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

from wharf.store.codec import records as fmt
from wharf.store.codec.layout import MESSAGE_MAGIC_CODE
from wharf.store.codec.records import encode_batch
from wharf.store.config import ASYNC_FLUSH, SYNC_FLUSH, StoreConfig
from wharf.store.log.checkpoint import StoreCheckpoint
from wharf.store.log.commit_log import CommitLog
from wharf.store.log.mapped_file_queue import create_segment_blocking
from wharf.store.model import MessageInput

MIB = 1024 * 1024
GIB = 1024 * MIB
BODY_SIZE = 1024

Section = Callable[[argparse.Namespace], Awaitable[None]]


def report(section: str, figure: str, value: str) -> None:
    print(f"{section:9s} | {figure:58s} | {value}", flush=True)


def make_batch(batch: int, seed: int = 0) -> list[MessageInput]:
    """1 KiB bodies with the properties a real producer sends (TAGS, KEYS, UNIQ_KEY)."""
    body = (b"wharf-bench-%08d-" % seed) * (BODY_SIZE // 21 + 1)
    return [
        MessageInput(
            body[:BODY_SIZE],
            {
                "TAGS": "TagA",
                "KEYS": f"order-{i}",
                "UNIQ_KEY": f"7F000001000012340000{seed:06d}{i:06d}",
            },
            born_host="127.0.0.1:50000",
        )
        for i in range(batch)
    ]


def bench_config(root: str, args: argparse.Namespace, **overrides: Any) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=args.segment_mib * MIB,
        **overrides,
    )


class SyncTimer:
    """Observer summing the time spent inside syncs (how disk-bound a run is)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def on_flush(self, kind: str, seconds: float, nbytes: int) -> None:
        self.seconds += seconds

    def on_group_commit(self, waiters: int) -> None:
        pass


async def open_log(config: StoreConfig, checkpoint: bool = True, observer: Any = None) -> CommitLog:
    cp = (
        StoreCheckpoint(os.path.join(config.store_path_root_dir, "checkpoint"))
        if checkpoint
        else None
    )
    log = CommitLog(config, observer, checkpoint=cp)
    await asyncio.to_thread(log.load_blocking)
    await asyncio.to_thread(log.recover_blocking, False, cp)
    log.start()
    await wait_preallocated(log)
    return log


async def wait_preallocated(log: CommitLog, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not log.allocator.idle and time.monotonic() < deadline:  # noqa: ASYNC110 - a bench polls
        await asyncio.sleep(0.01)


@contextlib.contextmanager
def scratch_dir(args: argparse.Namespace, name: str):
    path = tempfile.mkdtemp(prefix=f"wharf-bench-{name}-", dir=args.dir)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# === append ===================================================================================


async def append_run(
    config: StoreConfig, args: argparse.Namespace
) -> tuple[float, float, float, CommitLog]:
    """Append ``args.messages`` in batches; returns (msg/s wall, process CPU s per msg,
    event-loop-thread CPU s per msg, log). The loop thread's CPU does not depend on what else
    runs on the machine: 1 / it is the rate on an idle core."""
    log = await open_log(config)
    batches = [make_batch(args.batch, seed) for seed in range(4)]
    count = args.messages // args.batch
    queue_offset = 0
    started, cpu_started = time.perf_counter(), time.process_time()
    loop_cpu_started = time.thread_time()
    for i in range(count):
        log.append("BenchTopic", i % 8, queue_offset, batches[i % 4])
        queue_offset += args.batch
        log.wakeup_flush()
        if i % 4 == 3:
            await asyncio.sleep(0)  # let the flush / commit / allocation services run
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    loop_cpu = time.thread_time() - loop_cpu_started
    total = count * args.batch
    return total / wall, cpu / total, loop_cpu / total, log


async def section_append(args: argparse.Namespace) -> None:
    # Codec only (no I/O): the floor of the append path.
    batch = make_batch(args.batch)
    rounds = max(1, args.messages // args.batch // 4)
    started = time.perf_counter()
    for i in range(rounds):
        encode_batch("BenchTopic", 0, i * args.batch, batch, i * MIB, 1, "127.0.0.1:8081", 4 * MIB)
    encode_rate = rounds * args.batch / (time.perf_counter() - started)
    report("append", f"encode_batch only (batch {args.batch}, 1 KiB)", f"{encode_rate:,.0f} msg/s")

    results: dict[str, float] = {}
    for label, overrides in (
        ("direct mmap, default segments (read-prefaulted)", {"warm_mapped_file_enable": False}),
        ("direct mmap, warmMapedFileEnable", {"warm_mapped_file_enable": True}),
        (
            "transient store pool, default segments",
            {"transient_store_pool_enable": True, "warm_mapped_file_enable": False},
        ),
        (
            "transient store pool, warmMapedFileEnable",
            {"transient_store_pool_enable": True, "warm_mapped_file_enable": True},
        ),
    ):
        with scratch_dir(args, "append") as root:
            config = bench_config(
                root, args, flush_disk_type=ASYNC_FLUSH, transient_store_pool_size=3, **overrides
            )
            rate, cpu_per_msg, loop_per_msg, log = await append_run(config, args)
            await log.shutdown()
            log.close()
            results[label] = rate
            report(
                "append",
                f"ASYNC {label}",
                f"{rate:,.0f} msg/s wall; loop thread {loop_per_msg * 1e6:.2f} us CPU/msg "
                f"(= {1 / loop_per_msg:,.0f} msg/s on an idle core); process "
                f"{cpu_per_msg * 1e6:.2f} us CPU/msg; sync segment creations "
                f"{log.sync_segment_creations}",
            )
    # Peer: the same bytes written with os.write, pre-encoded (the page-cache copy alone).
    with scratch_dir(args, "peer") as root:
        data = encode_batch("BenchTopic", 0, 0, batch, 0, 1, "127.0.0.1:8081", 4 * MIB).data
        count = args.messages // args.batch
        fd = os.open(os.path.join(root, "peer"), os.O_WRONLY | os.O_CREAT, 0o644)
        started = time.perf_counter()
        for _ in range(count):
            os.write(fd, data)
        peer = count * args.batch / (time.perf_counter() - started)
        os.close(fd)
    best = max(results, key=lambda k: results[k])
    report("append", "peer: os.write of pre-encoded batches (no encode)", f"{peer:,.0f} msg/s")
    report("append", f"best store path / peer ({best})", f"{results[best] / peer:.2f}x")
    direct = results["direct mmap, default segments (read-prefaulted)"]
    pooled = results["transient store pool, default segments"]
    report("append", "transient pool / direct mmap (default segments)", f"{pooled / direct:.2f}x")


# === sync =====================================================================================


async def sync_run(args: argparse.Namespace, root: str, batch_size: int, total: int) -> None:
    config = bench_config(root, args, flush_disk_type=SYNC_FLUSH, warm_mapped_file_enable=True)
    timer = SyncTimer()
    log = await open_log(config, observer=timer)
    batch = make_batch(batch_size)
    per_writer = max(1, total // (args.writers * batch_size))
    latencies: list[float] = []
    syncs_before = log.group_commit.syncs
    timeouts = 0

    async def writer(w: int) -> None:
        nonlocal timeouts
        queue_offset = 0
        for _ in range(per_writer):
            began = time.perf_counter()
            result = log.append("BenchTopic", w, queue_offset, batch)
            queue_offset += batch_size
            if not await log.wait_flushed(result.end_offset):
                timeouts += 1
            latencies.append(time.perf_counter() - began)

    started, loop_cpu_started = time.perf_counter(), time.thread_time()
    await asyncio.gather(*(writer(w) for w in range(args.writers)))
    wall = time.perf_counter() - started
    loop_cpu = time.thread_time() - loop_cpu_started
    messages = per_writer * args.writers * batch_size
    syncs = log.group_commit.syncs - syncs_before
    latencies.sort()
    report(
        "sync",
        f"SYNC_FLUSH {args.writers} writers x batch {batch_size} (1 KiB)",
        f"{messages / wall:,.0f} msg/s wall; loop thread {loop_cpu / messages * 1e6:.2f} us "
        f"CPU/msg (= {messages / loop_cpu:,.0f} msg/s on an idle core); "
        f"{syncs} syncs, {messages / max(syncs, 1):.0f} msg/sync, "
        f"a sync in flight {timer.seconds / wall:.0%} of the time, "
        f"ack p50 {latencies[len(latencies) // 2] * 1e3:.2f} ms, "
        f"p99 {latencies[int(len(latencies) * 0.99)] * 1e3:.2f} ms, timeouts {timeouts})",
    )
    await log.shutdown()
    log.close()


async def section_sync(args: argparse.Namespace) -> None:
    for batch_size in (args.sync_batch, 1):
        total = args.messages // 2 if batch_size > 1 else args.messages // 8
        with scratch_dir(args, "sync") as root:
            await sync_run(args, root, batch_size, total)
    # Peer: one fdatasync per append, one writer (no group commit).
    with scratch_dir(args, "sync-peer") as root:
        config = bench_config(root, args, flush_disk_type=SYNC_FLUSH, warm_mapped_file_enable=True)
        log = await open_log(config)
        batch = make_batch(1)
        count = 2000
        started = time.perf_counter()
        for i in range(count):
            log.append("BenchTopic", 0, i, batch)
            await log.flush()
        rate = count / (time.perf_counter() - started)
        report("sync", "peer: one fdatasync per message, no group commit", f"{rate:,.0f} msg/s")
        await log.shutdown()
        log.close()


# === read =====================================================================================


def frame_records(data: bytes, base: int) -> list[tuple[int, int]]:
    """Split a chunk into (offset, size) of whole message records (the raw pull path)."""
    records = []
    pos = 0
    unpack = fmt.BLANK_HEADER.unpack_from
    limit = len(data) - 8
    while pos <= limit:
        total, magic = unpack(data, pos)
        if magic != MESSAGE_MAGIC_CODE or pos + total > len(data):
            break
        records.append((base + pos, total))
        pos += total
    return records


class Clock:
    """Wall time and this thread's CPU time of one measured loop."""

    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = time.thread_time()

    def rates(self, count: int) -> str:
        wall = time.perf_counter() - self.wall
        cpu = time.thread_time() - self.cpu
        return (
            f"{count / wall:,.0f} msg/s wall; {cpu / count * 1e6:.2f} us CPU/msg "
            f"(= {count / cpu:,.0f} msg/s on an idle core)"
        )


async def section_read(args: argparse.Namespace) -> None:
    chunk = args.read_chunk_kib * 1024
    with scratch_dir(args, "read") as root:
        config = bench_config(root, args, flush_disk_type=ASYNC_FLUSH, warm_mapped_file_enable=True)
        _, _, _, log = await append_run(config, args)
        await log.flush()
        end = log.max_offset

        clock = Clock()
        offset, count = 0, 0
        while offset < end:
            mapped = log.queue.find(offset)
            assert mapped is not None
            chunk_end = min(end, offset + chunk, mapped.file_from_offset + mapped.read_position)
            data = log.read_bytes(offset, chunk_end - offset)
            assert data is not None
            records = frame_records(data, offset)
            if not records:  # blank tail: next segment
                offset = mapped.file_from_offset + log.file_size
                continue
            count += len(records)
            offset = records[-1][0] + records[-1][1]
        report(
            "read",
            f"raw batched reads: read_bytes {args.read_chunk_kib} KiB + framing",
            clock.rates(count),
        )

        clock = Clock()
        offset, count = 0, 0
        while offset < end:
            batch = log.iter_dispatch(offset, chunk)
            count += len(batch.requests)
            if batch.next_offset == offset:
                break
            offset = batch.next_offset
        report(
            "read", f"dispatch decode: iter_dispatch {args.read_chunk_kib} KiB", clock.rates(count)
        )

        clock = Clock()
        offset, count = 0, 0
        while offset < end:
            messages = log.read_messages(offset, 1 << 20, chunk)
            if not messages:
                offset = (offset // log.file_size + 1) * log.file_size
                continue
            count += len(messages)
            offset = messages[-1].commit_log_offset + messages[-1].store_size
        report("read", "full decode: read_messages -> StoredMessage", clock.rates(count))
        await log.shutdown()
        log.close()


# === recovery =================================================================================


async def _recovery_writer(root: str, segment_mib: int) -> None:
    """Subprocess: append as fast as possible with ASYNC_FLUSH, print the max offset."""
    config = StoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=segment_mib * MIB,
        warm_mapped_file_enable=True,
    )
    log = await open_log(config)
    batches = [make_batch(256, seed) for seed in range(4)]
    queue_offset = 0
    i = 0
    while True:
        log.append("BenchTopic", i % 8, queue_offset, batches[i % 4])
        queue_offset += 256
        log.wakeup_flush()
        i += 1
        if i % 4 == 0:
            await asyncio.sleep(0)
        if i % 64 == 0:
            print(log.max_offset, flush=True)


def timed_recovery(
    root: str, args: argparse.Namespace, use_checkpoint: bool
) -> tuple[float, int, int]:
    started = time.perf_counter()
    checkpoint = StoreCheckpoint(os.path.join(root, "checkpoint"))
    if use_checkpoint:
        checkpoint.load_blocking()
    config = StoreConfig(
        store_path_root_dir=root, mapped_file_size_commit_log=args.recovery_segment_mib * MIB
    )
    log = CommitLog(config, checkpoint=checkpoint)
    log.load_blocking()
    end = log.recover_blocking(abnormal=True, checkpoint=checkpoint)
    seconds = time.perf_counter() - started
    log.close()
    return seconds, end, checkpoint.physic_offset


async def section_recovery(args: argparse.Namespace) -> None:
    target = int(args.log_gib * GIB)
    with scratch_dir(args, "recovery") as root:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.bench.store_append",
            "--recovery-writer",
            root,
            "--recovery-segment-mib",
            str(args.recovery_segment_mib),
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        started = time.perf_counter()
        reached = 0
        async for line in proc.stdout:
            reached = int(line)
            if reached >= target:
                break
        write_seconds = time.perf_counter() - started
        proc.send_signal(signal.SIGKILL)  # kill -9 mid-load
        await proc.wait()
        report(
            "recovery",
            f"log written before kill -9 ({args.recovery_segment_mib} MiB segments)",
            f"{reached / GIB:.2f} GiB in {write_seconds:.1f} s ({reached / write_seconds / MIB:,.0f} MiB/s)",
        )
        fast, end, physic = await asyncio.to_thread(timed_recovery, root, args, True)
        report(
            "recovery",
            "restart after kill -9: load + recover from checkpoint",
            f"{fast:.3f} s (validated {(end - physic) / MIB:,.1f} MiB past the checkpoint; end {end:,})",
        )
        full, end_full, _ = await asyncio.to_thread(timed_recovery, root, args, False)
        report(
            "recovery",
            "peer: same recovery validating every segment (no checkpoint)",
            f"{full:.3f} s (end {end_full:,})",
        )
        report("recovery", "full rescan / checkpoint recovery", f"{full / max(fast, 1e-9):.1f}x")


# === start ====================================================================================


async def section_start(args: argparse.Namespace) -> None:
    """What a (re)start costs the writer: the first append on a fresh store (a roll that found
    its segment still being prefaulted used to block the loop), and an abnormal restart whose
    checkpoint sits at the end of data with empty preallocated segments after it."""
    segment = args.start_segment_mib * MIB
    batch = make_batch(64)
    with scratch_dir(args, "start") as root:
        config = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=segment)
        cp = StoreCheckpoint(os.path.join(root, "checkpoint"))
        log = CommitLog(config, checkpoint=cp)
        started = time.perf_counter()
        await asyncio.to_thread(log.load_blocking)
        await asyncio.to_thread(log.recover_blocking, False, cp)
        log.start()
        ready = time.perf_counter()
        await asyncio.sleep(0.05)  # the first producer connects: preallocation is under way
        before_append = time.perf_counter()
        log.append("T", 0, 0, batch)
        first = time.perf_counter() - before_append
        report(
            "start",
            f"fresh store, {args.start_segment_mib} MiB segments: load+recover+start",
            f"{(ready - started) * 1e3:,.0f} ms",
        )
        report(
            "start",
            "first append after start (event loop blocked)",
            f"{first * 1e3:,.1f} ms; segments created on the loop: {log.sync_segment_creations}",
        )
        offset = len(batch)
        for _ in range(args.start_restart_mib * MIB // (len(batch) * (BODY_SIZE + 200))):
            log.append("T", 0, offset, batch)
            offset += len(batch)
        last_start = log.queue.files[-1].file_from_offset
        await log.shutdown(close_files=True)  # writes the checkpoint at the data end
        for n in (1, 2):  # the segments a kill -9 leaves behind, preallocated and empty
            mapped = await asyncio.to_thread(
                create_segment_blocking, log.store_path, last_start + n * segment, segment, False
            )
            mapped.close()
        segments = len(os.listdir(log.store_path))
        cp = StoreCheckpoint(os.path.join(root, "checkpoint"))
        await asyncio.to_thread(cp.load_blocking)
        log = CommitLog(config, checkpoint=cp)
        await asyncio.to_thread(log.load_blocking)
        started = time.perf_counter()
        end = await asyncio.to_thread(log.recover_blocking, True, cp)
        seconds = time.perf_counter() - started
        log.close()
        report(
            "start",
            f"abnormal restart, {args.start_restart_mib} MiB of data, {segments} segment files "
            "(checkpoint at the data end)",
            f"{seconds * 1e3:,.0f} ms recovery (end {end:,})",
        )


# === main =====================================================================================

SECTIONS: dict[str, Section] = {
    "append": section_append,
    "sync": section_sync,
    "read": section_read,
    "recovery": section_recovery,
    "start": section_start,
}


def all_sections() -> dict[str, Section]:
    sections = dict(SECTIONS)
    from tests.bench import store_queues

    sections.update(getattr(store_queues, "SECTIONS", {}))
    return sections


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench.store_append", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--sections", default="", help="comma-separated; default: all")
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages per append run")
    parser.add_argument("--batch", type=int, default=128, help="messages per append batch")
    parser.add_argument("--segment-mib", type=int, default=256, help="commit log segment size")
    parser.add_argument("--writers", type=int, default=64, help="concurrent SYNC_FLUSH writers")
    parser.add_argument("--sync-batch", type=int, default=16, help="messages per SYNC_FLUSH append")
    parser.add_argument("--read-chunk-kib", type=int, default=256, help="bytes per read call")
    parser.add_argument("--log-gib", type=float, default=2.0, help="log size for the recovery run")
    parser.add_argument(
        "--recovery-segment-mib", type=int, default=1024, help="segment size for recovery"
    )
    parser.add_argument(
        "--start-segment-mib", type=int, default=1024, help="segment size for the start section"
    )
    parser.add_argument(
        "--start-restart-mib", type=int, default=256, help="data written before the restart"
    )
    parser.add_argument("--dir", default=None, help="scratch directory (default: system temp)")
    parser.add_argument("--recovery-writer", default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="# %(levelname)s %(name)s: %(message)s")
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    if args.recovery_writer:
        runner(_recovery_writer(args.recovery_writer, args.recovery_segment_mib))
        return
    sections = all_sections()
    chosen = [s for s in args.sections.split(",") if s] or list(sections)
    unknown = [s for s in chosen if s not in sections]
    if unknown:
        raise SystemExit(f"unknown section(s) {unknown}; choose from {sorted(sections)}")
    print(
        f"# store bench: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}, "
        f"python {sys.version.split()[0]}, crc32 {fmt._crc32.__module__}",
        flush=True,
    )
    for name in chosen:
        runner(sections[name](args))


if __name__ == "__main__":
    main()
