"""Controller mode: a broker group elects its master on etcd (the rules: ``election.py``).

- ``election.py``: ``Failover``, the election rules (campaign, keeping the lease and the
  sync-state set, fencing, stepping down, TransferMaster) over two typed seams:
- ``kv.py``: ``Etcd``, the few etcd operations the rules use (leases, get, put, one
  compare-and-swap transaction), with ``etcd.py`` (``AetcdEtcd``, the broker's, on aetcd) and
  ``memory.py`` (``MemoryEtcd``, in memory: the rules' unit tests, tests/broker/test_election.py);
- ``role.py``: ``StoreRole`` / ``Replication``, what the rules drive of the store (promotion,
  following a new master, the write fence, the replicas in sync).
"""

from __future__ import annotations

from typing import Protocol

from wharf.broker.failover.election import Failover, Timing, campaign_rank
from wharf.broker.failover.etcd import AetcdEtcd
from wharf.broker.failover.kv import Etcd
from wharf.broker.failover.role import Replication, StoreRole


class MasterTransfer(Protocol):
    """What TransferMaster (broker/frontends/v1/admin.py) uses of failover, and the Kafka front end's
    leadership (``leads``: elected, the store promoted, the term not lost)."""

    is_master: bool

    @property
    def leads(self) -> bool: ...

    async def transfer(self, to: int) -> tuple[int, int]: ...


__all__ = [
    "AetcdEtcd",
    "Etcd",
    "Failover",
    "MasterTransfer",
    "Replication",
    "StoreRole",
    "Timing",
    "campaign_rank",
]
