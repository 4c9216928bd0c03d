"""The consume queues' thorough flush over many busy queues: file by file against one syncfs of
their filesystem, in the same run (``wharf.store.services.syncfs``). A program that prints figures.

    .venv/bin/python -m tests.bench.thorough_flush [--topics 10000] [--rounds 3]

One store (the real ``MessageStore``, 256 MiB commit log segments, queue files of 20,000
units as ``tests.bench.topics`` has them) under /tmp; ``--topics`` x 4 queues get a message
each, so every queue file exists, then a first thorough pass syncs them and their new
directories (untimed). Each round then puts a message into every queue, waits for dispatch
and times a thorough pass (``FlushConsumeQueueService.flush_all``: the tails spilled, every
dirty queue synced, the index, the checkpoint) once file by file and once with one syncfs,
in turn (the order alternating by round): its wall time and this process's CPU (user +
system; the syncs' thread included, the kernel's write-back threads not). Where the store's
filesystem gets no syncfs (``whole_fs_sync`` None: FUSE, overlay, tmpfs, Linux before 5.8)
only the file-by-file figures are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import tempfile
import time

import uvloop
from wharf.store.config import StoreConfig
from wharf.store.message_store import MessageStore
from wharf.store.model import MessageInput
from wharf.store.services.queue_flush import FlushConsumeQueueService

QUEUES = 4


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _touch_every_queue(store: MessageStore, topics: int, body: bytes) -> None:
    """A message into every queue (write() does not wait: the whole pass goes at once)."""
    message = [MessageInput(body, {})]
    for t in range(topics):
        for queue_id in range(QUEUES):
            store.write(f"tf{t}", queue_id, message)
        if t % 256 == 0:
            await asyncio.sleep(0)  # the dispatch's turn
    if not await store.wait_dispatched(600):
        raise SystemExit("dispatch did not catch up in 600 s")


async def _timed_pass(flush: FlushConsumeQueueService) -> tuple[int, float, float]:
    """(queues synced, wall s, CPU s) of one thorough pass."""
    await flush.parts.queues.spill_tails()  # its first step, so the count below is the pass's
    queues = len(flush.parts.queues.unflushed(0))
    cpu, started = _cpu_s(), time.perf_counter()
    await flush.flush_all()
    return queues, time.perf_counter() - started, _cpu_s() - cpu


async def _run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="wharf-bench-flush-", dir="/tmp") as tmp:
        config = StoreConfig(
            store_path_root_dir=tmp,
            mapped_file_size_commit_log=256 << 20,
            mapped_file_size_consume_queue=20_000 * 20,
            flush_consume_queue_thorough_interval=3_600_000,  # only the passes timed here
        )
        store = MessageStore(config)
        await store.start()
        try:
            flush = store.insides.queue_flush_service
            whole = flush.sync_filesystem
            body = b"x" * 100
            started = time.perf_counter()
            await _touch_every_queue(store, args.topics, body)
            await flush.flush_all()  # the new files and directories, untimed
            print(
                f"Thorough flush of {args.topics * QUEUES:,} busy queues ({args.topics:,} topics "
                f"x {QUEUES}), {args.rounds} rounds; set-up {time.perf_counter() - started:.1f} s; "
                f"syncfs here: {'yes' if whole is not None else 'no (file by file only)'}\n"
            )
            modes = {"file by file": None, "one syncfs": whole} if whole else {"file by file": None}
            figures: dict[str, list[tuple[float, float]]] = {mode: [] for mode in modes}
            for round_ in range(args.rounds):
                order = list(modes) if round_ % 2 == 0 else list(reversed(modes))
                for mode in order:
                    await _touch_every_queue(store, args.topics, body)
                    flush.sync_filesystem = modes[mode]
                    flush_queues, wall, cpu = await _timed_pass(flush)
                    figures[mode].append((wall, cpu))
                    print(f"  round {round_}: {mode:>12}: {flush_queues:,} queues, "
                          f"{wall:.2f} s wall, {cpu:.2f} s CPU")  # fmt: skip
            flush.sync_filesystem = whole
            print(f"\n{'mode':>12} {'wall s':>8} {'CPU s':>7}  (median of the rounds)")
            for mode, runs in figures.items():
                wall = statistics.median(w for w, _ in runs)
                cpu = statistics.median(c for _, c in runs)
                print(f"{mode:>12} {wall:>8.2f} {cpu:>7.2f}")
        finally:
            await store.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    uvloop.run(_run(parser.parse_args()))


if __name__ == "__main__":
    main()
