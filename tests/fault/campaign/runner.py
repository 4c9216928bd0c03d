"""The campaign loop: a cluster, a workload, faults drawn from the nemesis table, a verdict.

One fault at a time: draw a nemesis (seeded, weighted), inject it, wait ``window`` seconds,
heal it, wait ``gap`` seconds, next (the last fault is a failover held until a second replica
has acknowledged, when the drawn ones made only one: ``_until_new_writer``). Effects overlap
anyway (a restarted master still catching up when the next fault comes), which is the point.
After the last fault or the deadline: heal everything, wait for one master with both replicas
in sync, let the workload run 3 s more, stop it, read every queue from the master, and
``checker.check`` the history; the replica's copy of every queue must then be the master's
(once caught up, within 60 s).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.fault.campaign.cluster import Cluster
from tests.fault.campaign.nemeses import TABLE, Context
from tests.fault.campaign.nemeses.partition import IsolateMaster
from tests.fault.campaign.protocols import KAFKA_GROUP, RMQ4_GROUP, observe_commits
from tests.fault.campaign.summary import Summary, summarize
from tests.fault.campaign.workload import TOPIC, Workload, copies_differing, read_all
from tests.fault.checker import OK, History, Send, check
from tests.fault.nemesis import Nemesis as Partitions
from tests.fault.netns import Network

# The last fault's failover, when it must produce a second writer: past the lease (3 s), the
# replica's election, its sync-state set shrunk (2 s) and the producers' new route, with room.
FAILOVER_S = 30.0


def _writers(history: History) -> set[str]:
    """The replicas that acknowledged a send as master."""
    return {
        op.replica for op in history.ops if isinstance(op, Send) and op.status == OK and op.replica
    }


async def _until_new_writer(history: History, at_least_s: float) -> None:
    """Hold the last fault (the master cut off) at least ``at_least_s`` and until another
    replica has acknowledged a send, at most FAILOVER_S. On a loaded 2-core machine the
    campaign's drawn windows once never let the replica take over (seed 36: every
    acknowledgement by one replica), leaving the two-masters rule nothing to judge; a
    failover that does not happen within FAILOVER_S still fails the test."""
    before = _writers(history)
    began = time.monotonic()
    while time.monotonic() - began < FAILOVER_S:
        if time.monotonic() - began >= at_least_s and _writers(history) - before:
            return
        await asyncio.sleep(0.2)


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
    workload: Workload | None = None
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
                # The two-masters rule needs two writers to judge: if the drawn faults made
                # none, the last one is a failover held until it does (_until_new_writer).
                forced = injected == settings.faults - 1 and len(_writers(history)) < 2
                if forced:
                    # Only a replica in the sync-state set may be elected (it has every
                    # acknowledged write); after a drawn fault it may not be back in it yet.
                    nemesis = IsolateMaster()
                    await cluster.in_sync(ctx.master(), within_s=settings.settle_s)
                what = await nemesis.inject(ctx)
                injected += 1
                try:
                    if forced:
                        await _until_new_writer(
                            history, rng.uniform(*(IsolateMaster.window or settings.window))
                        )
                    else:
                        await asyncio.sleep(rng.uniform(*(nemesis.window or settings.window)))
                finally:
                    await nemesis.heal(ctx)
                held = " (held until a second replica acknowledged)" if forced else ""
                log(f"fault {injected}: {what}{held}; healed")  # type: ignore[operator]
                await asyncio.sleep(rng.uniform(*settings.gap))
        finally:
            await cluster.heal_all()
        master = await cluster.master(within_s=settings.settle_s)
        await cluster.in_sync(master, within_s=settings.settle_s)
        await asyncio.sleep(3)  # writes acknowledged by the settled group
        await workload.stop()
        final = await read_all(cluster.processes["ns"].daemon.endpoint, history)
        # Each group's committed offsets as the settled master answers them: below an
        # acknowledged commit is "offsets moved back".
        observe_commits(history, KAFKA_GROUP, await asyncio.to_thread(workload.kafka.committed))
        observe_commits(history, RMQ4_GROUP, await workload.remoting.committed(master))
        replica = next(p for p in cluster.replicas if p is not master)
        differing = await copies_differing(master.daemon.endpoint, replica.daemon.endpoint)
    except BaseException:
        log(cluster.logs())  # type: ignore[operator]
        raise
    finally:
        if workload is not None:
            workload.kafka.done.set()  # its threads stop with the cluster (a raise included)
        cluster.stop()
    report = check(history.ops, final)
    failed = [why for p in cluster.processes.values() for why in p.failed_starts]
    summary = summarize(report, history.ops, settings.seed, time.monotonic() - began, failed)
    summary.client_errors = dict(sorted(workload.errors.items()))
    summary.copies_differing = differing
    return summary, history
