"""ReplicationStatus: what metrics, BrokerStatus and ``wharf cluster list`` show of replication
(plain values, read on the store's loop by ``MessageStore.replication_status``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from wharf.store.ha.master import HAMaster
from wharf.store.ha.slave import HASlave


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """One replica as its master sees it."""

    broker_id: int
    address: str
    acked_offset: int
    lag_bytes: int  # the master's log end - what the replica reported
    lag_seconds: float  # 0 while caught up; else since it last was (since connecting if never)
    in_sync: bool


@dataclass(frozen=True, slots=True)
class ReplicationStatus:
    role: str  # ASYNC_MASTER, SYNC_MASTER, SLAVE
    max_offset: int  # this log's end
    confirm_offset: int  # master: on every in-sync replica; replica: the master's, last heard
    replicas: list[ReplicaStatus] = field(default_factory=list)  # master
    master_address: str = ""  # replica: its master's HA address while connected
    lag_bytes: int = 0  # replica: behind the master's end as last heard
    last_frame_age_seconds: float = -1.0  # replica: since the master's last frame (-1: never)
    epoch: int = 0  # controller mode: the term of the newest master this log knows (0: none)
    sync_state_set: list[int] = field(default_factory=list)  # controller mode, a master: ids


def master_status(
    role: str, ha: HAMaster | None, max_offset: int, epoch: int = 0, me: int = 0
) -> ReplicationStatus:
    if ha is None:
        return ReplicationStatus(role, max_offset, max_offset, epoch=epoch)
    role = "SYNC_MASTER" if ha.sync_master else "ASYNC_MASTER"
    required = ha.required()
    sss = sorted({me, *required}) if required is not None else []
    now = time.monotonic()
    replicas = []
    for replica in ha.replicas():
        behind = max(0, max_offset - replica.acked)
        since = replica.caught_up_at or (now - (time.time() - replica.connected_at))
        replicas.append(
            ReplicaStatus(
                replica.broker_id,
                replica.address,
                replica.acked,
                behind,
                0.0 if behind == 0 else max(0.0, now - since),
                ha.in_sync(replica, now),
            )
        )
    return ReplicationStatus(
        role, max_offset, ha.confirm_offset(), replicas, epoch=epoch, sync_state_set=sss
    )


def replica_status(ha: HASlave | None, max_offset: int, epoch: int = 0) -> ReplicationStatus:
    if ha is None:
        return ReplicationStatus("SLAVE", max_offset, 0, epoch=epoch)
    age = time.time() - ha.last_frame_at if ha.last_frame_at else -1.0
    return ReplicationStatus(
        "SLAVE",
        max_offset,
        ha.confirm_offset,
        master_address=ha.connected_to,
        lag_bytes=ha.lag_bytes,
        last_frame_age_seconds=age,
        epoch=epoch,
    )
