"""The campaign loop: a cluster, a workload, faults drawn from the nemesis table, a verdict.

One fault at a time: draw a nemesis (seeded, weighted), inject it, wait ``window`` seconds,
heal it, wait ``gap`` seconds, next. Effects overlap anyway (a restarted master still catching
up when the next fault comes), which is the point. After the last fault or the deadline: heal
everything, wait for one master with both replicas in sync, let the workload run 3 s more,
stop it, read every queue from the master, and ``checker.check`` the history; the replica's
copy of every queue must then be the master's (once caught up, within 60 s).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.fault.campaign.cluster import Cluster
from tests.fault.campaign.nemeses import TABLE, Context
from tests.fault.campaign.summary import Summary, summarize
from tests.fault.campaign.workload import TOPIC, Workload, copies_differing, read_all
from tests.fault.checker import History, check
from tests.fault.nemesis import Nemesis as Partitions
from tests.fault.netns import Network


@dataclass
class Settings:
    faults: int = 100  # stop after this many faults ...
    seconds: float = float("inf")  # ... or once this long has passed, whichever comes first
    window: tuple[float, float] = (1.0, 2.0)  # how long a fault lasts (unless it says)
    gap: tuple[float, float] = (0.3, 1.0)  # between a heal and the next fault
    seed: int = 0
    producers: int = 2
    settle_s: float = 120.0  # after the heal: one master, both replicas in sync, within this
    log: object = field(default=print)


async def run(
    net: Network, root: Path, settings: Settings, history: History | None = None
) -> tuple[Summary, History]:
    """The summary (``summary.ok``: no violation) and the full history (``history``, when
    given: the caller keeps what was recorded even if the run raises)."""
    log = settings.log
    rng = random.Random(settings.seed)
    history = History() if history is None else history
    cluster = await Cluster.start(net, root)
    try:
        master = await cluster.master(within_s=60)
        await cluster.in_sync(master, within_s=60)
        from wharf.client import Admin

        async with Admin(master.daemon.endpoint) as admin:
            await admin.create_topic(TOPIC, queue_nums=2)
        # The workload draws from a generator of its own: the faults drawn depend on the seed
        # only, not on how many sends the run happened to make.
        load_rng = random.Random(settings.seed ^ 0x5EED)
        workload = Workload(cluster, history, load_rng, producers=settings.producers)
        ctx = Context(cluster, history, rng, Partitions(net, history), workload.master)
        kinds, weights = zip(*TABLE, strict=True)
        began = time.monotonic()
        injected = 0
        await asyncio.sleep(2)  # the workload under way first
        try:
            while injected < settings.faults and time.monotonic() - began < settings.seconds:
                nemesis = rng.choices(kinds, weights)[0]()
                what = await nemesis.inject(ctx)
                injected += 1
                try:
                    await asyncio.sleep(rng.uniform(*(nemesis.window or settings.window)))
                finally:
                    await nemesis.heal(ctx)
                log(f"fault {injected}: {what}; healed")  # type: ignore[operator]
                await asyncio.sleep(rng.uniform(*settings.gap))
        finally:
            await cluster.heal_all()
        master = await cluster.master(within_s=settings.settle_s)
        await cluster.in_sync(master, within_s=settings.settle_s)
        await asyncio.sleep(3)  # writes acknowledged by the settled group
        await workload.stop()
        final = await read_all(cluster.processes["ns"].daemon.endpoint, history)
        replica = next(p for p in cluster.replicas if p is not master)
        differing = await copies_differing(master.daemon.endpoint, replica.daemon.endpoint)
    except BaseException:
        log(cluster.logs())  # type: ignore[operator]
        raise
    finally:
        cluster.stop()
    report = check(history.ops, final)
    failed = [why for p in cluster.processes.values() for why in p.failed_starts]
    summary = summarize(report, history.ops, settings.seed, time.monotonic() - began, failed)
    summary.client_errors = dict(sorted(workload.errors.items()))
    summary.copies_differing = differing
    return summary, history
