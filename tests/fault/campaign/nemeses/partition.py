"""Partitions (nftables drops on the namespaces' bridge), through tests/fault/nemesis.py: each
enters one of its context managers at ``inject`` and leaves it (the heal) at ``heal``."""

from __future__ import annotations

import contextlib

from tests.fault.campaign.nemeses.base import Context
from tests.fault.checker import Fault


class _Partition:
    kind: str
    window: tuple[float, float] | None = None
    _cm: contextlib.AbstractContextManager[None] | None = None

    def make(self, ctx: Context) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    async def inject(self, ctx: Context) -> str:
        self._cm = self.make(ctx)
        self._cm.__enter__()
        # The Fault just recorded: the last one (the Kafka load's threads append ops too).
        return next(op.what for op in reversed(ctx.history.ops) if isinstance(op, Fault))

    async def heal(self, ctx: Context) -> None:
        if self._cm is not None:
            self._cm.__exit__(None, None, None)
            self._cm = None


class IsolateMaster(_Partition):
    """The master loses etcd (its lease) and its replica; clients still reach it."""

    kind = "master cut from etcd and replicas"
    # past the lease: the master fences itself, the replica is elected
    window: tuple[float, float] | None = (3.5, 5.0)

    def make(self, ctx: Context) -> contextlib.AbstractContextManager[None]:
        master, h = ctx.master(), ctx.cluster.hosts
        return ctx.partitions.isolate_master(
            master.host, [h["etcd"]], [ctx.replica_of(master).host]
        )


class IsolateReplica(_Partition):
    """The replica reaches nothing (clients, master, etcd)."""

    kind = "replica isolated"

    def make(self, ctx: Context) -> contextlib.AbstractContextManager[None]:
        return ctx.partitions.isolate(ctx.replica_of(ctx.master()).host, self.kind)


class MasterToReplicaOneWay(_Partition):
    """Packets from the master to its replica dropped, the other way through."""

    kind = "split one way"

    def make(self, ctx: Context) -> contextlib.AbstractContextManager[None]:
        master = ctx.master()
        return ctx.partitions.split([master.host], [ctx.replica_of(master).host], one_way=True)


class SplitNamesrv(_Partition):
    """The NameServer and the brokers cannot talk (registrations, route updates stop)."""

    kind = "split"

    def make(self, ctx: Context) -> contextlib.AbstractContextManager[None]:
        h = ctx.cluster.hosts
        return ctx.partitions.split([h["ns"]], [h["a1"], h["a2"]])


class BrokersToNamesrvOneWay(_Partition):
    """Brokers -> NameServer dropped only (registrations lost, the NameServer still asks)."""

    kind = "split one way"

    def make(self, ctx: Context) -> contextlib.AbstractContextManager[None]:
        h = ctx.cluster.hosts
        return ctx.partitions.split([h["a1"], h["a2"]], [h["ns"]], one_way=True)


class IsolateEtcd(_Partition):
    """etcd reaches nobody: no lease is granted or refreshed, the master fences itself."""

    kind = "etcd isolated"
    # sometimes past the lease: the master fences itself, no election
    window: tuple[float, float] | None = (1.0, 4.5)

    def make(self, ctx: Context) -> contextlib.AbstractContextManager[None]:
        return ctx.partitions.isolate_etcd_member(ctx.cluster.hosts["etcd"])
