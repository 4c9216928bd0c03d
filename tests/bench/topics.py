"""Produce throughput across topics: the same load spread over 1 to 10,000 topics, one daemon,
one run, with the ratio of each to one topic (issue 33).

    .venv/bin/python -m tests.bench.topics [--topics 1,16,64,256,1024,10000] [--seconds 5]
        [--rounds 3] [--tasks 64] [--batch 16] [--size 1024] [--form columns]
        [--page-cache-gib 2] [--tail-budget BYTES] [--quick]

One ``wharf-broker`` daemon (tests/harness.py, default flush: ASYNC_FLUSH, auto-created topics
with ``defaultTopicQueueNums = 4``) serves every configuration: topics ``t<N>-<i>`` for each N,
all created and warmed up first (one message into every queue, pinned by ``queue_id``), so
every queue has had a message before anything is timed. Then rounds: in each round every
configuration runs once, in turn (alternating, so a neighbour's load moves all of them alike),
for ``--seconds``: ``--tasks`` tasks share one SDK ``Producer`` (defaults) and loop on
``send_batch(--batch)`` of ``--size`` byte bodies, task i's k-th batch going to topic
``(i + k * tasks) % N`` (every topic gets traffic). A configuration's figure is the median of
its rounds; the client runs in this process on uvloop and shares the 2 cores with the broker.
Also printed: broker and client CPU per message (less sensitive to the neighbours than msg/s),
and the broker's user part of it: the system part moves with the VM's memory (below), the user
part with the code.

Memory: on this VM a run that writes into memory the host took back pays ~2.4 us more per
message than one writing into pages freed a moment ago, which decided the ratios more than the
configurations did (the same one measured 306k and 166k msg/s in consecutive rounds). So the
broker runs in a memory cgroup of ``--page-cache-gib`` (2; ``tests.bench.memory.
page_cache_bound``): its page cache is reclaimed and reused within it, as on a long-running
broker, and an untimed run fills it before the first timed one (without it, runs slowed down
over a program as the page cache grew into memory the host had taken back). And before each
run ``--recycle-gib`` (2) of memory is touched and freed (``recycle_memory``) for what is not
page cache (without it the SDK's CPU a message was ~0.7 us higher in a cgroup-bound program:
2.7-3.1 against 2.0-2.2 us, socket buffers and the like). Where no cgroup can be made (not
root), or with ``--page-cache-gib 0``, only the recycling is done.

Ratio: a configuration's run over the one-topic run beside it (a round runs each configuration
next to a run of one topic: 1, 16 | 1, 64 | ... ), median of the rounds. The VM's slow phases
last longer than a run (at 256 topics one run went from ~300k to ~160k msg/s in one step and
stayed there for 50 s): paired with the round's single one-topic run, as before 2026-11-27,
the 256-topic run of a full program lay 3 runs (~20 s) from its base, and full programs gave
256 topics 0.77-0.87 where programs of 1 and 256 topics gave a median of 0.87-0.88. Also
printed: the ratio of the medians, which mixes runs of different phases, and each
configuration's pairs (``pairs N:``, in round order): a pair spreads more than the margins
being judged (how far a program of 5 or 15 rounds lands from the central ratio: bench README,
"Produce across topics"), so programs compare and pool by their pairs.

Settling (``settle``): each run starts a journal period after the run before it ended, once
the dirty pages are synced and the broker's CPU is under 10 % (``wait_quiet``): what a run at
10,000 topics leaves behind (40,000 changed queues for the positions journal to record and
sync, ~270 MiB of dirty pages) was charged to the runs after it.

Order: every other round runs its pairs in reverse, and each pair too (1, 16 | 1, 64 | ... |
1, 10000, then 10000, 1 | ... | 16, 1). Runs slow down over a program (the page cache takes
memory the VM's host has to back: a configuration's first and last rounds differ by up to
1.5x), and a fixed order charged that to the one measured second.

``--form``: how the SDK sends several topics' batches in one request: ``columns`` (its
default, ``SendMessageRequest.batch_topics``), ``parts`` (a sub-request each, the form before
2026-11-25) or ``none`` (a request per batch, the SDK before issue 33). ``--quick``: 1, 16,
256 topics, 1 s, 1 round. ``--tail-budget``: the broker's ``consumeQueueTailBudget`` (0: every
dispatch writes its units at once, the store before 2026-11-25's queue tails).
The temporary directory (under /tmp) goes at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

import uvloop
from wharf.client import Producer
from wharf.store.queue.journal import RECORD_INTERVAL_S

from tests.bench.broker_send import process_cpu_split
from tests.bench.memory import cgroup_usage, page_cache_bound, recycle_memory
from tests.bench.soak import scrape
from tests.harness import BrokerProcess, Daemons

MIB = 1024 * 1024
QUEUES = 4


def topic_names(n: int) -> list[str]:
    return [f"t{n}-{i}" for i in range(n)]


def bench_broker(root: Path, tail_budget: int | None = None) -> BrokerProcess:
    settings: dict[str, object] = {
        "defaultTopicQueueNums": QUEUES,
        "mappedFileSizeCommitLog": 256 * MIB,
        # A program writes ~0.6 GB/s for minutes: once the disk passes 85 %, forced retention
        # must delete faster than that or the broker refuses writes at 90 % (a round of every
        # program fell to 110k-290k msg/s). 40 segments of 256 MiB a 10 s pass are the bytes
        # of RocketMQ's 10 of 1 GiB: 1 GiB/s.
        "deleteFileBatchMax": 40,
        "mappedFileSizeConsumeQueue": 20_000 * 20,  # sparse anyway; 10,000s of files
        "logLevel": "WARNING",
    }
    if tail_budget is not None:
        settings["consumeQueueTailBudget"] = tail_budget
    return Daemons(root).broker(root, settings=settings, ready_timeout=60.0, start=False)


async def warm_up(endpoint: str, counts: list[int], body: bytes) -> float:
    """Create every topic (auto-creation by its first send) and put one message into each of
    its queues; returns the seconds it took."""
    started = time.perf_counter()
    async with Producer(endpoint, send_timeout=60.0) as producer:
        gate = asyncio.Semaphore(256)

        async def one(topic: str, queue_id: int) -> None:
            async with gate:
                await producer.send(topic, body, queue_id=queue_id)

        for n in counts:
            names = topic_names(n)
            await asyncio.gather(*(one(t, 0) for t in names))  # creates the topics
            await asyncio.gather(*(one(t, q) for t in names for q in range(1, QUEUES)))
    return time.perf_counter() - started


async def measure(endpoint: str, n: int, args: argparse.Namespace) -> tuple[float, float]:
    """msg/s of one configuration over ``args.seconds``, and the client CPU per message (us)."""
    names = topic_names(n)
    bodies = [os.urandom(args.size) for _ in range(args.batch)]
    done = 0
    stop = False
    async with Producer(endpoint) as producer:
        producer._many = "" if args.form == "none" else args.form

        async def task(i: int) -> None:
            nonlocal done
            k = 0
            while not stop:
                await producer.send_batch(names[(i + k * args.tasks) % n], bodies)
                done += args.batch
                k += 1

        tasks = [asyncio.create_task(task(i)) for i in range(args.tasks)]
        await asyncio.sleep(args.lead_in)  # streams open, routes and batch sizes settle
        count0, wall0, cpu0 = done, time.perf_counter(), time.process_time()
        await asyncio.sleep(args.seconds)
        count1, wall1, cpu1 = done, time.perf_counter(), time.process_time()
        stop = True
        await asyncio.gather(*tasks)
    sent = count1 - count0
    return sent / (wall1 - wall0), (cpu1 - cpu0) / max(sent, 1) * 1e6


def wait_dispatched(metrics_endpoint: str, limit_s: float = 300.0) -> float:
    """Seconds until the broker's dispatch has caught up (``wharf_store_dispatch_behind_bytes``
    0): after the warm-up it still creates the new queues' files (45,000 queues: several
    seconds), and a send meanwhile is held by the dispatch back-pressure, then answered busy
    and retried (a timed run must not start there)."""
    started = time.perf_counter()
    name = "wharf_store_dispatch_behind_bytes"
    while time.perf_counter() - started < limit_s and scrape(metrics_endpoint, (name,)).get(name):
        time.sleep(0.1)
    return time.perf_counter() - started


def fill_page_cache(
    endpoint: str, usage: Path, limit: int, n: int, args: argparse.Namespace
) -> float:
    """Untimed runs of ``n`` topics until the broker's cgroup is at its ``limit`` (at most 60
    s), so that no timed run writes into pages the host took back; returns the seconds taken."""
    started = time.perf_counter()
    run = argparse.Namespace(**{**vars(args), "seconds": 1.0, "lead_in": 0.0})
    while cgroup_usage(usage) < 0.95 * limit and time.perf_counter() - started < 60:
        uvloop.run(measure(endpoint, n, run))
    return time.perf_counter() - started


def wait_quiet(pid: int, limit_s: float = 30.0, window_s: float = 0.5) -> float:
    """Seconds until the broker's CPU over ``window_s`` is under 10 % (at most ``limit_s``):
    what a run leaves behind is not charged to the next one. After a run at 10,000 topics the
    broker still records 40,000 changed queues (the positions journal, every 5 s) and syncs
    their files; with no wait the configurations measured after it ran ~0.3x slower (256
    topics 0.60x in a full program, 0.91x in one without 1,024 and 10,000, 2026-11-26)."""
    started = time.perf_counter()
    while time.perf_counter() - started < limit_s:
        before = sum(process_cpu_split(pid))
        time.sleep(window_s)
        if sum(process_cpu_split(pid)) - before < 0.1 * window_s:
            break
    return time.perf_counter() - started


def settle(pid: int, ended: float) -> float:
    """Seconds spent before a run so that what the run before left is not charged to it: a
    positions journal record of its queues (every ``RECORD_INTERVAL_S``; after a 10,000-topic
    run 40,000 queues, ~0.3-0.5 s of the broker's CPU 2-5 s after the run ended), its dirty
    pages (~270 MiB after a 10,000-topic run, written back by the kernel ~30 s later, inside
    later runs) and the broker's CPU (``wait_quiet``). Until 2026-11-27 only ``wait_quiet``
    ran: the first quiet half second came before the journal's record."""
    started = time.monotonic()
    time.sleep(max(0.0, ended + RECORD_INTERVAL_S + 0.5 - started))
    os.sync()
    wait_quiet(pid)
    return time.monotonic() - started


def round_pairs(counts: list[int], round_: int) -> list[tuple[int, ...]]:
    """A round's runs, as pairs: each configuration beside a run of the base (``counts[0]``),
    the base first in even rounds and second in odd ones, the configurations in reverse order
    then ("Ratio" and "Order" in the module docstring). Only the base: one run."""
    base, others = counts[0], counts[1:]
    if not others:
        return [(base,)]
    if round_ % 2 == 0:
        return [(base, n) for n in others]
    return [(n, base) for n in reversed(others)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", default="1,16,64,256,1024,10000")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=64, help="concurrent send_batch loops")
    parser.add_argument("--batch", type=int, default=16, help="messages per send_batch")
    parser.add_argument("--size", type=int, default=1024, help="body bytes")
    parser.add_argument("--lead-in", type=float, default=0.5, help="untimed seconds per run")
    parser.add_argument("--quick", action="store_true", help="1,16,256 topics, 1 s, 1 round")
    parser.add_argument(
        "--page-cache-gib",
        type=float,
        default=2.0,
        help="the broker's memory cgroup limit (tests/bench/memory.py); 0: none (recycling only)",
    )
    parser.add_argument(
        "--recycle-gib",
        type=float,
        default=2.0,
        help="anonymous memory touched and freed before each run (tests/bench/memory.py); 0: off",
    )
    parser.add_argument(
        "--form",
        choices=("columns", "parts", "none"),
        default="columns",
        help="several topics' batches per request: in columns, as parts, or none",
    )
    parser.add_argument(
        "--tail-budget",
        type=int,
        default=None,
        help="the broker's consumeQueueTailBudget in bytes (0: no queue tails); its default if unset",
    )
    args = parser.parse_args()
    if args.quick:
        args.topics, args.seconds, args.rounds = "1,16,256", 1.0, 1
    counts = [int(n) for n in args.topics.split(",")]
    body = os.urandom(args.size)
    rates: dict[int, list[float]] = {n: [] for n in counts}
    client_us: dict[int, list[float]] = {n: [] for n in counts}
    broker_us: dict[int, list[float]] = {n: [] for n in counts}
    broker_user_us: dict[int, list[float]] = {n: [] for n in counts}
    paired: dict[int, list[float]] = {n: [] for n in counts[1:]}  # "Ratio" in the docstring
    print(
        f"Produce across topics: {args.tasks} tasks x send_batch({args.batch}) of {args.size} B, "
        f"{QUEUES} queues per topic, {args.seconds:g} s per run, {args.rounds} rounds "
        f"(alternating), one broker (ASYNC_FLUSH) for all"
        + f", batches of several topics per request: {args.form}"
        + ("" if args.tail_budget is None else f", consumeQueueTailBudget {args.tail_budget}")
    )
    page_cache = int(args.page_cache_gib * (1 << 30))  # the broker's cgroup limit
    with (
        tempfile.TemporaryDirectory(prefix="wharf-bench-topics-", dir="/tmp") as tmp,
        bench_broker(Path(tmp), args.tail_budget) as broker,
        page_cache_bound(broker.pid, page_cache) as usage,
    ):
        took = uvloop.run(warm_up(broker.endpoint, counts, body))
        total = sum(counts)
        caught_up = wait_dispatched(broker.metrics_endpoint)
        print(f"warm-up: {total:,} topics, {total * QUEUES:,} queues, one message each: "
              f"{took:.1f} s; dispatch caught up {caught_up:.1f} s later")  # fmt: skip
        if usage is not None:
            filled = fill_page_cache(broker.endpoint, usage, page_cache, counts[0], args)
            print(f"memory: the broker in a {args.page_cache_gib:g} GiB cgroup, filled by "
                  f"{filled:.1f} s of untimed produce")  # fmt: skip
        else:
            print(f"memory: no cgroup; {args.recycle_gib:g} GiB recycled before each run")
        settled = 0.0
        ended = time.monotonic()
        for round_ in range(args.rounds):
            for pair in round_pairs(counts, round_):
                rate_of: dict[int, float] = {}
                for n in pair:
                    settled += settle(broker.pid, ended)
                    recycle_memory(int(args.recycle_gib * (1 << 30)))
                    user0, sys0 = process_cpu_split(broker.pid)
                    rate, client = uvloop.run(measure(broker.endpoint, n, args))
                    user1, sys1 = process_cpu_split(broker.pid)
                    ended = time.monotonic()
                    rate_of[n] = rate
                    rates[n].append(rate)
                    client_us[n].append(client)
                    # Broker CPU over the timed window and the lead-in: per message of the
                    # window, scaled to the whole run's length.
                    whole = max(rate * (args.seconds + args.lead_in), 1)
                    broker_us[n].append((user1 - user0 + sys1 - sys0) / whole * 1e6)
                    broker_user_us[n].append((user1 - user0) / whole * 1e6)
                if len(pair) == 2:
                    n = pair[0] if pair[1] == counts[0] else pair[1]
                    paired[n].append(rate_of[n] / rate_of[counts[0]])
        print(
            f"settling: {settled:.1f} s in all before the runs (a journal period, sync, CPU quiet)"
        )
    one = statistics.median(rates[counts[0]])
    print(f"\n{'topics':>7} {'msg/s':>10} {'ratio':>6} {'of medians':>10} {'broker us/msg':>14} "
          f"{'of it user':>10} {'client us/msg':>14}  runs (msg/s)")  # fmt: skip
    for n in counts:
        rate = statistics.median(rates[n])
        ratio = statistics.median(paired[n]) if n != counts[0] else 1.0
        runs = ", ".join(f"{r:,.0f}" for r in rates[n])
        print(
            f"{n:>7,} {rate:>10,.0f} {ratio:>6.2f} {rate / one:>10.2f} "
            f"{statistics.median(broker_us[n]):>14.1f} "
            f"{statistics.median(broker_user_us[n]):>10.2f} "
            f"{statistics.median(client_us[n]):>14.1f}  {runs}"
        )
    print(f"(ratio: to the {counts[0]}-topic{'s' if counts[0] != 1 else ''} run next to it, median "
          "of the rounds; of medians: median msg/s over the base's)")  # fmt: skip
    # Each round's pair too ("Ratio" in the module docstring): programs compare and pool by them.
    for n in counts[1:]:
        print(f"pairs {n:>7,}: " + " ".join(f"{r:.2f}" for r in paired[n]))


if __name__ == "__main__":
    main()
