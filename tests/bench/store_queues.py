"""Benchmark of the queue half of the store: dispatch, the pull read path, and recovery after
kill -9. A program that prints figures, not a test.

    python -m tests.bench.store_queues                       # read + dispatch, 200k x 1 KiB
    python -m tests.bench.store_queues --messages 500000 --recovery-mib 2048

Figures are given as wall-clock rates and as CPU-time rates of the event loop's thread
(``time.thread_time``): the machine is shared, and CPU time is what a figure costs on an idle
core. (Process CPU time would also count the allocation thread prefaulting the next 1 GiB
segments while the loop works.)

- read: ``get_messages`` in batches of 32 and 256 over one queue written in producer batches
  (records adjacent in the log) and over 8 interleaved queues, fully decoding every message
  into a StoredMessage; best of 3 passes.
- put: the facade's write path (64 writers, batches of 16, dispatch on the same loop).
- dispatch: the ReputService's rate from CommitLog records to ConsumeQueue units + index
  entries (``--props full``: TAGS, one KEYS entry and a UNIQ_KEY per message; ``--props
  uniq``: only the UNIQ_KEY every SDK message carries), and its loop-thread CPU per message.
- recovery: a child process appends ``--recovery-mib`` of 1 KiB messages (ASYNC_FLUSH, real
  1 GiB segments), waits for dispatch, keeps putting for 3 s (dispatch falls behind up to
  ``max_dispatch_lag_bytes``) and is SIGKILLed mid-load; the parent then times
  ``MessageStore.start()`` (abnormal recovery) and prints its phases.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wharf.store.config import StoreConfig
from wharf.store.message_store import MessageStore
from wharf.store.model import MessageInput

BODY = b"x" * 1024
BATCH = 64
REPEATS = 3


def _config(root: str, messages: int) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=1024 * 1024 * 1024,
        max_hash_slot_num=max(messages // 4, 1024),
        max_index_num=max(messages * 3, 4096),
    )


def _batch(seq: int, props: str = "full") -> list[MessageInput]:
    """``full``: TAGS, one KEYS entry and a UNIQ_KEY per message; ``uniq``: only the UNIQ_KEY
    (what every SDK message carries)."""
    batch = []
    for j in range(BATCH):
        properties = {"UNIQ_KEY": f"7F000001{seq:012X}{j:04X}"}
        if props == "full":
            properties = {"TAGS": "TagA", "KEYS": f"order-{seq}-{j}", **properties}
        batch.append(MessageInput(BODY, properties))
    return batch


class Clock:
    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = time.thread_time()

    def rates(self, count: int) -> str:
        wall = time.perf_counter() - self.wall
        cpu = time.thread_time() - self.cpu
        return f"{count / wall:>10,.0f} msg/s wall  {count / max(cpu, 1e-9):>10,.0f} msg/s cpu"

    def us_per(self, count: int) -> str:
        cpu = time.thread_time() - self.cpu
        return f"{cpu / max(count, 1) * 1e6:5.2f} us/msg cpu"


def _read_all(store: MessageStore, topic: str, queues: int, batch: int) -> int:
    read = 0
    for queue_id in range(queues):
        offset = 0
        while True:
            got = store.get_messages(topic, queue_id, offset, batch)
            if not got.messages:
                break
            read += len(got.messages)
            offset = got.next_begin_offset
    return read


async def bench_read_and_dispatch(
    messages: int, root: str, reads: bool = True, props: str = "full", chunk_kib: int = 0
) -> None:
    store = MessageStore(_config(root, messages))
    await store.start()
    try:
        for layout, queues in (("1 queue ", 1), ("8 queues", 8)):
            topic = f"Bench{queues}"
            reput = store.insides.reput_service
            await reput.stop()  # pause dispatch to time it alone
            if chunk_kib:
                reput.chunk_bytes = chunk_kib * 1024
            for seq in range(messages // BATCH):
                store.append(topic, seq % queues, _batch(seq, props))
            total = messages // BATCH * BATCH
            clock = Clock()
            reput.start()
            assert await store.wait_dispatched(600), "dispatch did not finish"
            print(f"dispatch  {layout}            {clock.rates(total)}  {clock.us_per(total)}")
            for batch in (32, 256) if reads else ():
                best = ""
                best_cpu = float("inf")
                for _ in range(REPEATS):  # best of N: the machine is shared
                    clock = Clock()
                    read = _read_all(store, topic, queues, batch)
                    assert read == total, (read, total)
                    cpu = time.thread_time() - clock.cpu
                    if cpu < best_cpu:
                        best_cpu, best = cpu, clock.rates(read)
                print(f"read      {layout} batch {batch:>3}  {best}")
    finally:
        await store.shutdown()


async def bench_put(messages: int, root: str, mode: str, writers: int = 64) -> None:
    """The broker's write path through the facade: ``writers`` tasks each putting batches of
    16, dispatch running on the same loop (so its cost is included), until ``messages``."""
    store = MessageStore(_config(root, messages).replace(flush_disk_type=mode))
    await store.start()
    per_writer = messages // writers // 16
    body = [MessageInput(BODY, {"TAGS": "TagA"}) for _ in range(16)]

    async def writer(queue_id: int) -> None:
        for _ in range(per_writer):
            await store.put("Put", queue_id % 8, body)

    try:
        # Not timed: the first segment (1 GiB, preallocated and pre-faulted in a thread) and
        # the segments after it are still being made right after start.
        await store.put("Put", 0, body)
        for _ in range(600):
            if store.insides.commit_log.allocator.idle:
                break
            await asyncio.sleep(0.05)
        clock = Clock()
        await asyncio.gather(*(writer(n) for n in range(writers)))
        assert await store.wait_dispatched(600)
        total = per_writer * writers * 16
        print(f"put       {mode:<11} {writers} writers   {clock.rates(total)}  (incl. dispatch)")
    finally:
        await store.shutdown()


async def recovery_loader(root: str, target_bytes: int) -> None:
    """The child of the recovery run (``--recovery-loader ROOT BYTES``): append until the log
    holds ``target_bytes``, wait for dispatch, say ``loaded``, then keep putting until killed."""
    store = MessageStore(_config(root, target_bytes // 1100))
    await store.start()
    seq = 0
    while store.stats().commit_log_max_offset < target_bytes:
        store.append("Recover", seq % 8, _batch(seq))
        seq += 1
        if seq % 64 == 0:
            await asyncio.sleep(0)
    await store.wait_dispatched(600)
    print("loaded", flush=True)
    while True:  # keep writing (as the broker does, through put) until killed mid-load
        await store.put("Recover", seq % 8, _batch(seq))
        seq += 1


def _load_and_kill_blocking(root: str, target_bytes: int) -> float:
    started = time.perf_counter()
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.bench.store_queues",
            "--recovery-loader",
            root,
            str(target_bytes),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        if line != "loaded":
            raise RuntimeError(f"loader child failed (said {line!r})")
        time.sleep(3.0)  # long enough for the dispatch backlog to reach its bound
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    return time.perf_counter() - started


def _dir_bytes_blocking(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir())


async def bench_recovery(mib: int, root: str) -> None:
    target = mib * 1024 * 1024
    load_s = await asyncio.to_thread(_load_and_kill_blocking, root, target)
    log_bytes = await asyncio.to_thread(_dir_bytes_blocking, Path(root, "commitlog"))
    print(f"recovery  loaded {mib} MiB in {load_s:.1f} s, killed -9 mid-load")
    # The page cache is warm (as after a process crash; not after a power loss).
    store = MessageStore(_config(root, target // 1100))
    clock = time.perf_counter()
    await store.start()
    seconds = time.perf_counter() - clock
    try:
        state = store.recovered
        assert state is not None and state.abnormal
        stats = store.stats()
        phases = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in state.timings.items())
        print(
            f"recovery  {stats.commit_log_max_offset / 2**20:,.0f} MiB of data "
            f"({log_bytes / 2**30:.1f} GiB of segments), {len(store.insides.queues)} queues: "
            f"start() {seconds:.2f} s; re-dispatched {state.redispatched_messages} messages "
            f"from {state.redispatch_from:,}; {phases}"
        )
        # Only opening the queue/index files and correcting min offsets grow with the log;
        # the commit log phase reads from the checkpoint on and the re-dispatch is bounded by
        # max_dispatch_lag_bytes (plus up to a second of unflushed queue data).
        gib = stats.commit_log_max_offset / 2**30
        scaling = state.timings.get("load", 0.0) + state.timings.get("min_offsets", 0.0)
        if gib > 0:
            estimate = seconds + scaling * (10 / gib - 1)
            print(
                f"recovery  extrapolated to a 10 GiB log: {estimate:.2f} s (the size-dependent "
                f"phases, {scaling * 1000:.0f} ms here, scaled x{10 / gib:.1f}; the rest is bounded "
                "by the checkpoint and the dispatch-lag limit, not by the log size)"
            )
    finally:
        await store.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--recovery-mib", type=int, default=0, help="0 skips the recovery run")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    parser.add_argument(
        "--dispatch-only", action="store_true", help="only the dispatch section (profiling)"
    )
    parser.add_argument(
        "--props",
        choices=("full", "uniq"),
        default="full",
        help="message properties: TAGS + one KEYS + UNIQ_KEY (full) or only UNIQ_KEY (uniq)",
    )
    parser.add_argument(
        "--chunk-kib", type=int, default=0, help="dispatch chunk size (default: the reput's)"
    )
    parser.add_argument("--recovery-loader", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.recovery_loader:
        asyncio.run(recovery_loader(args.recovery_loader[0], int(args.recovery_loader[1])))
        return
    base = tempfile.mkdtemp(prefix="wharf-bench-", dir=args.dir)
    try:
        print(
            f"store bench (queues): {args.messages:,} x 1 KiB messages, batches of {BATCH}, "
            f"properties {args.props}"
        )
        root = os.path.join(base, "read")
        asyncio.run(
            bench_read_and_dispatch(
                args.messages, root, not args.dispatch_only, args.props, args.chunk_kib
            )
        )
        for mode in () if args.dispatch_only else ("ASYNC_FLUSH", "SYNC_FLUSH"):
            asyncio.run(bench_put(args.messages, os.path.join(base, f"put-{mode}"), mode))
        if args.recovery_mib:
            asyncio.run(bench_recovery(args.recovery_mib, os.path.join(base, "recovery")))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
