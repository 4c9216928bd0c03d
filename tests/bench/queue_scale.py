"""Queues at scale on one broker: descriptors, maps, memory, restart time and the cost of a
queue's first message, through the real daemon and the SDK.

    .venv/bin/python -m tests.bench.queue_scale [--topics 25000] [--queues 4] [--tasks 256]
    .venv/bin/python -m tests.bench.queue_scale --quick      # 2,000 topics x 4 (CI-sized)

Steps: start a broker on its defaults (``defaultTopicQueueNums`` = ``--queues``, 1 GiB commit
log segments, a fresh store under /tmp), send one small message to every queue (the first
message of each: topic auto-creation, queue file creation), then one more to every queue (the
second), each pass timed with ``--tasks`` concurrent single sends; read each queue's two
messages back; then read the broker's open descriptors and maps (/proc/PID/fd, /proc/PID/maps)
and anonymous RSS (RssAnon) against the same broker before the first send; stop it (SIGTERM) and
time a restart (from the positions journal), kill -9 it and time the restart (the journal
again: snapshot + changes). The peer of the first-message figure is the second message in the same
run (target: first <= 2x second).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

import uvloop
from wharf.client import Producer, PullConsumer
from wharf.client.route import MessageQueue

from tests.harness import BrokerProcess


def _proc(pid: int) -> dict[str, int]:
    fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
    maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    status = {
        line.split(":")[0]: int(line.split()[1])
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith(("RssAnon", "VmRSS"))
    }
    return {
        "fds": fds,
        "maps": len(maps),
        "queue_maps": sum("/consumequeue/" in line for line in maps),
        "rss_anon_kib": status.get("RssAnon", 0),
    }


async def _send_all(endpoint: str, topics: int, queues: int, tasks: int, tag: str) -> float:
    """One message to every queue; returns msg/s."""
    keys = [(t, q) for t in range(topics) for q in range(queues)]
    async with Producer(endpoint) as producer:

        async def worker(index: int) -> None:
            for t, q in keys[index::tasks]:
                await producer.send(f"qs{t}", f"{tag}{t}/{q}".encode(), queue_id=q)

        started = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(tasks)))
        return len(keys) / (time.perf_counter() - started)


async def _check_all(endpoint: str, topics: int, queues: int, tasks: int) -> int:
    """Queues whose two messages read back as sent (pulls of ``tasks`` at a time)."""
    keys = [(t, q) for t in range(topics) for q in range(queues)]
    good = 0
    async with PullConsumer(endpoint, "queue-scale") as consumer:

        async def worker(index: int) -> None:
            nonlocal good
            for t, q in keys[index::tasks]:
                result = await consumer.pull(MessageQueue(f"qs{t}", q), 0, max_wait_ms=2000)
                if [m.body for m in result.messages] == [
                    f"a{t}/{q}".encode(),
                    f"b{t}/{q}".encode(),
                ]:
                    good += 1

        await asyncio.gather(*(worker(i) for i in range(tasks)))
    return good


def _timed_start(broker: BrokerProcess) -> float:
    started = time.perf_counter()
    broker.start(timeout=600)
    return time.perf_counter() - started


def _loaded_line(broker: BrokerProcess) -> str:
    lines = [line for line in broker.log().splitlines() if "consume queues in" in line]
    return lines[-1].split("] ")[-1] if lines else "(no load line)"


def run(topics: int, queues: int, tasks: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="wharf-queue-scale-"))
    settings = {
        "defaultTopicQueueNums": queues,
        "mappedFileSizeCommitLog": 1024 * 1024 * 1024,
        "maxHashSlotNum": 5_000_000,
        "maxIndexNum": 20_000_000,
    }
    broker = BrokerProcess(root, settings=settings, ready_timeout=600)
    try:
        broker.start()
        idle = _proc(broker.pid)
        count = topics * queues
        first = asyncio.run(_send_all(broker.endpoint, topics, queues, tasks, "a"))
        second = asyncio.run(_send_all(broker.endpoint, topics, queues, tasks, "b"))
        good = asyncio.run(_check_all(broker.endpoint, topics, queues, tasks))
        loaded = _proc(broker.pid)
        broker.stop(timeout=600)
        clean_s = _timed_start(broker)
        after_clean = _proc(broker.pid)
        clean_line = _loaded_line(broker)
        broker.kill()
        crash_s = _timed_start(broker)
        after_crash = _proc(broker.pid)
        crash_line = _loaded_line(broker)
        good_after = asyncio.run(_check_all(broker.endpoint, topics, queues, tasks))
    finally:
        broker.kill()
        shutil.rmtree(root, ignore_errors=True)
    per_queue = (loaded["rss_anon_kib"] - idle["rss_anon_kib"]) * 1024 / count
    print(f"{topics:,} topics x {queues} queues = {count:,} queues, {tasks} concurrent sends")
    print(f"  first message to each queue   {first:9,.0f} msg/s")
    print(
        f"  second message to each queue  {second:9,.0f} msg/s   first costs {second / first:.2f}x"
    )
    print(f"  queues read back intact       {good:,} of {count:,} (after kill -9: {good_after:,})")
    print(f"  {'':28} {'fds':>6} {'maps':>6} {'queue maps':>10} {'RssAnon MiB':>12}")
    for name, figures in (
        ("idle, before any queue", idle),
        ("all queues written + read", loaded),
        ("restarted after SIGTERM", after_clean),
        ("restarted after kill -9", after_crash),
    ):
        print(
            f"  {name:28} {figures['fds']:6} {figures['maps']:6} {figures['queue_maps']:10} "
            f"{figures['rss_anon_kib'] / 1024:12.1f}"
        )
    print(f"  anonymous RSS per queue       {per_queue:9,.0f} bytes")
    print(f"  restart after SIGTERM         {clean_s:9.2f} s to ready  ({clean_line})")
    print(f"  restart after kill -9         {crash_s:9.2f} s to ready  ({crash_line})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=25_000)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=256)
    parser.add_argument("--quick", action="store_true", help="2,000 topics x 4")
    args = parser.parse_args()
    uvloop.install()
    run(2000 if args.quick else args.topics, args.queues, args.tasks)


if __name__ == "__main__":
    main()
