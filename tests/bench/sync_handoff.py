"""What keeping fdatasync off the event loop costs a lone message (issue 67's wire floor).

    python -m tests.bench.sync_handoff [--rate 1000] [--seconds 4] [--rounds 6]

Redis with ``appendfsync always`` writes and fdatasyncs its AOF in its one thread before it
replies: a lone XADD pays the sync and nothing else. Wharf may not block its loop (a slow
fdatasync, 20-500 ms under a neighbour's writes, would stall every client), so the group
commit hands the sync to a thread (``wharf.store.fast._syncer``: the loop submits, the thread
wakes, syncs, writes an eventfd, the loop wakes). This program measures the two on one file,
in one uvloop process, at ``--rate`` lone 1 KiB appends a second, in alternating rounds:

- ``inline``: ``os.pwrite`` + ``os.fdatasync`` on the loop, as Redis does;
- ``handoff``: ``os.pwrite`` on the loop, the fdatasync through the ``Syncer`` thread and its
  eventfd, as the store does (``store/log/sync_engine.py``);
- ``poll``: the same, the loop also reading the eventfd every loop turn while the sync runs
  instead of sleeping in epoll (busy polling: does it take the wake-up off?).

Each sample is the time from the write to the loop knowing the record durable. The p50
difference is what the design costs per message at low rates, the floor under the wire port's
ratio to redis-py that no change in Wharf's Python can remove while the loop never blocks.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import uvloop
from wharf.store.fast import load

from tests.bench.compare import settle_disk
from tests.bench.read_path import pct

BLOCK = os.urandom(1024)


async def inline(fd: int, rate: int, seconds: float) -> list[float]:
    """Microseconds from the write to the record on disk, the sync on the loop."""
    out: list[float] = []
    offset = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.perf_counter()
        os.pwrite(fd, BLOCK, offset)
        os.fdatasync(fd)
        out.append((time.perf_counter() - start) * 1e6)
        offset += len(BLOCK)
        await asyncio.sleep(1 / rate)
    return out


async def handoff(fd: int, rate: int, seconds: float, poll: bool = False) -> list[float]:
    """The same, the sync by the Syncer thread, the loop told by its eventfd (``poll``: the
    loop also looks at the eventfd every loop turn while a sync runs, never sleeping in
    epoll meanwhile)."""
    fast = load("_syncer")
    if fast is None:
        raise SystemExit("wharf.store.fast._syncer is not built (make build)")
    syncer = fast.Syncer()
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] | None = None

    def ready() -> None:
        syncer.take()
        if done is not None and not done.done():
            done.set_result(None)

    loop.add_reader(syncer.fileno(), ready)
    out: list[float] = []
    offset = 0
    job = 0
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            done = loop.create_future()
            start = time.perf_counter()
            os.pwrite(fd, BLOCK, offset)
            job += 1
            syncer.submit(job, (fd,))
            if poll:
                loop.call_soon(_look, syncer.fileno(), done, ready, loop)
            await done
            out.append((time.perf_counter() - start) * 1e6)
            offset += len(BLOCK)
            await asyncio.sleep(1 / rate)
    finally:
        loop.remove_reader(syncer.fileno())
        syncer.close()
    return out


def _look(
    efd: int, done: asyncio.Future[None], ready: Callable[[], None], loop: asyncio.AbstractEventLoop
) -> None:
    """``poll``: read the eventfd now; not yet, look again next loop turn."""
    if done.done():
        return
    try:
        os.read(efd, 8)
    except BlockingIOError:
        loop.call_soon(_look, efd, done, ready, loop)
        return
    ready()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    rows: dict[str, list[tuple[float, float]]] = {"inline": [], "handoff": [], "poll": []}
    with tempfile.TemporaryDirectory(dir=os.environ.get("WHARF_BENCH_DIR")) as tmp:
        path = Path(tmp) / "log"
        for round_ in range(args.rounds):
            order = ("inline", "handoff", "poll")
            order = order if round_ % 2 == 0 else order[::-1]
            for way in order:
                settle_disk(Path(tmp))
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    if way == "inline":
                        samples = uvloop.run(inline(fd, args.rate, args.seconds))
                    else:
                        samples = uvloop.run(handoff(fd, args.rate, args.seconds, way == "poll"))
                finally:
                    os.close(fd)
                p50, p99 = pct(samples, 0.50), pct(samples, 0.99)
                rows[way].append((p50, p99))
                load_avg = os.getloadavg()[0]
                print(f"round {round_ + 1} {way:7s} p50 {p50:6.0f} us  p99 {p99:7.0f} us  "
                      f"n={len(samples)}  load {load_avg:.2f}", flush=True)  # fmt: skip
    diffs = [h[0] - i[0] for h, i in zip(rows["handoff"], rows["inline"], strict=True)]
    polled = [p[0] - h[0] for p, h in zip(rows["poll"], rows["handoff"], strict=True)]
    print(f"{args.rounds} rounds at {args.rate}/s, 1 KiB pwrite + fdatasync:")
    for way, figures in rows.items():
        p50s = [f[0] for f in figures]
        print(f"  {way:7s} p50 median {statistics.median(p50s):.0f} us "
              f"(range {min(p50s):.0f}-{max(p50s):.0f})")  # fmt: skip
    print(f"  handoff - inline, p50 per round: median {statistics.median(diffs):.0f} us "
          f"(range {min(diffs):.0f}-{max(diffs):.0f})")  # fmt: skip
    print(f"  poll - handoff, p50 per round: median {statistics.median(polled):.0f} us "
          f"(range {min(polled):.0f}-{max(polled):.0f})")  # fmt: skip


if __name__ == "__main__":
    main()
