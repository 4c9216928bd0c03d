"""What every nemesis gets (``Context``) and is (``Nemesis``)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tests.fault.campaign.cluster import Cluster, Process
from tests.fault.checker import Fault, History
from tests.fault.nemesis import Nemesis as Partitions


@dataclass
class Context:
    cluster: Cluster
    history: History
    rng: random.Random
    partitions: Partitions  # tests/fault/nemesis.py over the cluster's network
    master: Callable[[], Process]  # the replica that last reported the highest term

    def replica_of(self, master: Process) -> Process:
        return next(p for p in self.cluster.replicas if p is not master)


class Nemesis(Protocol):
    kind: str
    # How long it lasts, s (None: the campaign's window). Longer than the 3 s lease where the
    # point is a lapsed lease: a fenced master, an election.
    window: tuple[float, float] | None

    async def inject(self, ctx: Context) -> str: ...

    async def heal(self, ctx: Context) -> None: ...


class ProcessFault:
    """A fault of one process (kill, pause, power cut): ``self.fault`` is its window."""

    fault: Fault
    target: Process
    window: tuple[float, float] | None = None

    def pick(self, ctx: Context) -> str:
        """Draw the process to hit (``self.target``): the master most often, then its replica,
        the NameServer or etcd; returns its role."""
        master = ctx.master()
        choices = {"master": master, "replica": ctx.replica_of(master),
                   "namesrv": ctx.cluster.processes["ns"], "etcd": ctx.cluster.processes["etcd"]}  # fmt: skip
        role = ctx.rng.choices(list(choices), weights=[4, 3, 1, 1])[0]
        self.target = choices[role]
        return role

    def begin(self, ctx: Context, what: str, kind: str) -> None:
        self.fault = ctx.history.fault(what, kind)
