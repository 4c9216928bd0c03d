"""What answering a consumer-offset commit only once it is in the files costs, against the
periodic flush (flushConsumerOffsetInterval), in alternating rounds: the figure that decides,
per protocol, whether a commit waits for ``MetadataPersister.table_durable``.

    .venv/bin/python -m tests.bench.offset_commits [--rounds 8] [--seconds 1.5]
    .venv/bin/python -m tests.bench.offset_commits --pool LOG [LOG ...]

In process, on the real ``ConsumerOffsetManager`` and ``MetadataPersister`` over a directory on
the store's filesystem (``--dir``; the system temp dir by default), each round runs, in turn
(the order reversed every other round so a neighbour's load falls on each alike):

- ``periodic``: ``commit()`` alone, the answer at once (RocketMQ's protocols; the persister's
  round writes the file later);
- ``write``: ``commit()`` then ``table_durable(sync=False)`` (a Kafka OffsetCommit under
  ASYNC_FLUSH: written, not fsynced);
- ``fsync``: the same with ``sync=True`` (SYNC_FLUSH);

each with ``--committers`` concurrent committers (a fleet of consumers, each committing as soon
as its previous commit is answered, over ``--groups`` groups of 8 queues) for ``--seconds``,
then one committer alone (a single consumer's latency). A round prints commits/s and the lone
p50 per variant, and the ratios write/periodic and fsync/periodic of commits/s: the target for
"costs nothing measurable" is a median ratio >= 0.95 (``pooled.py``'s interval decides).

The ratio leaves out the network: a commit over remoting or Kafka also pays ~100-300 us of
decoding and a round trip, so the end-to-end share of the cost is smaller than the ratio says;
the lone latencies are the absolute figure to set against that round trip.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from wharf.broker.meta.offsets import ConsumerOffsetManager
from wharf.broker.meta.persister import MetadataPersister

from tests.bench import pooled

VARIANTS = ("periodic", "write", "fsync")
TARGET = 0.95  # durable commits/s at least 95% of the periodic ones: "nothing measurable"


async def _run_variant(
    directory: Path, variant: str, committers: int, groups: int, seconds: float
) -> tuple[float, float, int]:
    """commits/s with ``committers`` concurrent, the lone committer's p50 (us), writes."""
    os.makedirs(directory)  # a fresh directory per variant (untimed)
    offsets = ConsumerOffsetManager()
    # The periodic round as the broker runs it (5 s), so "periodic" pays its share too.
    persister = MetadataPersister(directory, [offsets], interval_s=5.0)
    persister.start()
    for g in range(groups):  # the table a broker holds, written once (the first snapshot)
        for q in range(8):
            offsets.commit(f"group{g}", "topic", q, 0)
    await persister.table_durable(offsets, sync=True)
    sync = variant == "fsync"

    async def commit_once(group: str, queue: int, offset: int) -> None:
        offsets.commit(group, "topic", queue, offset)
        if variant != "periodic":
            await persister.table_durable(offsets, sync)
        else:
            await asyncio.sleep(0)  # an answer is a loop turn too

    done = 0
    deadline = time.perf_counter() + seconds

    async def committer(worker: int) -> None:
        nonlocal done
        offset = 0
        while time.perf_counter() < deadline:
            offset += 1
            await commit_once(f"group{worker % groups}", worker % 8, offset)
            done += 1

    start = time.perf_counter()
    await asyncio.gather(*(committer(w) for w in range(committers)))
    rate = done / (time.perf_counter() - start)
    lone: list[float] = []
    lone_deadline = time.perf_counter() + min(seconds, 0.5)
    while time.perf_counter() < lone_deadline or len(lone) < 20:
        began = time.perf_counter()
        await commit_once("group0", 0, len(lone) + 1)
        lone.append((time.perf_counter() - began) * 1e6)
    writes = persister.table_writes
    await persister.stop()
    return rate, statistics.median(lone), writes


async def _rounds(args: argparse.Namespace) -> list[str]:
    lines: list[str] = []
    base = Path(tempfile.mkdtemp(prefix="offset-commits-", dir=args.dir))
    try:
        for round_ in range(args.rounds):
            order = VARIANTS if round_ % 2 == 0 else tuple(reversed(VARIANTS))
            figures: dict[str, tuple[float, float, int]] = {}
            for variant in order:
                figures[variant] = await _run_variant(
                    base / f"{variant}-{round_}",
                    variant,
                    args.committers,
                    args.groups,
                    args.seconds,
                )
            periodic = figures["periodic"][0]
            parts = [f"{v} {figures[v][0]:.0f}/s lone {figures[v][1]:.0f}us" for v in VARIANTS]
            lines.append(
                f"round {round_ + 1}: " + ", ".join(parts)
                + f"; write/periodic {figures['write'][0] / periodic:.3f}"
                + f" fsync/periodic {figures['fsync'][0] / periodic:.3f}"
                + f" (writes: write {figures['write'][2]}, fsync {figures['fsync'][2]};"
                + f" load {os.getloadavg()[0]:.1f})"
            )  # fmt: skip
            print(lines[-1], flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return lines


ROUND = re.compile(r"write/periodic ([\d.]+) fsync/periodic ([\d.]+)")


def judge(lines: list[str], what: str) -> None:
    write, fsync = [], []
    for line in lines:
        match = ROUND.search(line)
        if match:
            write.append(float(match.group(1)))
            fsync.append(float(match.group(2)))
    print(f"{what}:")
    print(f"  write/periodic commits/s: {pooled.describe(write, '>=', TARGET)}")
    print(f"  fsync/periodic commits/s: {pooled.describe(fsync, '>=', TARGET)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--committers", type=int, default=64)
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--dir", default=None, help="where the files go (the store's disk)")
    parser.add_argument("--pool", nargs="+", metavar="LOG", help="judge saved rounds, pooled")
    args = parser.parse_args()
    if args.pool:
        judge(pooled.round_lines(args.pool), f"rounds pooled from {len(args.pool)} programs")
        return
    lines = asyncio.run(_rounds(args))
    judge(lines, f"{len(lines)} rounds")


if __name__ == "__main__":
    main()
