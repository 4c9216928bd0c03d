"""What failover needs of the store, as typed seams: ``StoreRole`` (promotion, following a new
master, the write fence, the log end) and ``Replication`` (the master's replication listener:
the replicas acknowledgements need, which ones are in sync, how far each has acknowledged).

``wharf.store.role.Role`` (``MessageStore.role``) and ``wharf.store.ha.master.HAMaster``
satisfy them as they are (mypy checks it where the controller builds ``Failover``); the
election's unit tests pass small fakes (tests/broker/test_election.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol


class ReplicaProgress(Protocol):
    """One connected replica as the master sees it (``store.ha.master.Replica``)."""

    @property
    def broker_id(self) -> int: ...

    @property
    def acked(self) -> int:
        """Its written end, as last reported."""
        ...


class Replication(Protocol):
    """A master's replication listener (``store.ha.master.HAMaster``)."""

    @property
    def port(self) -> int:
        """The port it listens on (published in etcd's ``master`` key for replicas)."""
        ...

    def require(self, replica_ids: set[int] | None) -> None:
        """Acknowledgements need exactly these replicas from now on."""
        ...

    def in_sync_ids(self) -> set[int]:
        """Replicas that caught up within haMaxTimeSlaveNotCatchup."""
        ...

    def replicas(self) -> Sequence[ReplicaProgress]: ...


class ListenHost(Protocol):
    @property
    def ha_listen_host(self) -> str: ...


class StoreRole(Protocol):
    """The store's role as failover drives it (``store.role.Role``: ``MessageStore.role``)."""

    @property
    def config(self) -> ListenHost: ...

    @property
    def ha_master(self) -> Replication | None:
        """The replication listener once this store is a master (None on a replica)."""
        ...

    def set_write_fence(self, fence: Callable[[], str] | None) -> None:
        """``fence()`` says why this master must not acknowledge now ('' = it may)."""
        ...

    def replica_redial(self) -> None:
        """A replica's master moved: reconnect to where the replica link now points."""
        ...

    async def promote(self, epoch: int, sync_master: bool) -> None:
        """This replica becomes the master of term ``epoch`` (the epoch recorded before any
        write; ``sync_master``: acknowledge only replicated puts)."""
        ...

    def commit_log_end(self) -> int:
        """The end of this store's log (a handing-over master waits for its replicas to have
        it all)."""
        ...
