"""Replication: a master streams its CommitLog to replicas byte for byte (RocketMQ's HA).

- ``frames.py``: the wire format (plain TCP on ``haListenPort``; why not gRPC: measured there).
- ``auth.py``: the handshake's proofs: both ends hold the same replication account's secret.
- ``master.py``: ``HAMaster``, the listener, senders, acknowledgements (SYNC_MASTER), the
  in-sync set and the confirm offset.
- ``slave.py``: ``HASlave``, the replica's connection: HELLO, appends, REPORTs.
- ``acks.py``: ``ReplicaAcks``, the waiters of SYNC_MASTER puts.
- ``metadata.py``: the metadata (topics, groups, consumer offsets) shipped to replicas and
  acknowledged (``HAMaster.metadata_replicated``: what a Kafka commit's answer waits for).
- ``epochs.py``: master terms and the consistent point of two logs (controller mode).
- ``truncation.py``: a replica's crash-safe truncation, applied at start before recovery.
- ``status.py``: what metrics and BrokerStatus show.

Roles are RocketMQ's ``brokerRole``: ASYNC_MASTER (acknowledges after the local flush policy;
replicas follow), SYNC_MASTER (acknowledges only after the local flush policy AND
``inSyncReplicas - 1`` replicas have the message -- written, or synced when the master is
SYNC_FLUSH; default 2, so a SYNC_MASTER really waits for one replica: RocketMQ 5's default of
1 would acknowledge alone), SLAVE (appends only what its
master sends, refuses writes, serves reads). The store's ``Role`` (``store/role.py``) builds one
HAMaster (when ``haListenPort`` is set, or at promotion) or one HASlave and wires them with
``ReplicaLink``: what the broker above gives (identity, metadata to ship and to apply, the
master's address).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass

SLAVE = "SLAVE"
SYNC_MASTER = "SYNC_MASTER"
ASYNC_MASTER = "ASYNC_MASTER"
ROLES = (ASYNC_MASTER, SYNC_MASTER, SLAVE)


@dataclass(frozen=True, slots=True)
class ReplicaLink:
    """What the layers above give replication (all optional but the identity)."""

    cluster: str = "DefaultCluster"
    broker_name: str = "broker-a"
    broker_id: int = 0
    # Master: the metadata replicas must follow (topics, groups, consumer offsets), as bytes.
    metadata: Callable[[], bytes] | None = None
    # Replica: apply the master's metadata bytes.
    apply_metadata: Callable[[bytes], None] | None = None
    # Replica: the master's HA address ('' while unknown); default: haMasterAddress.
    master_address: Callable[[], str] | None = None
    # Controller mode: roles come from outside (elections on etcd). The store starts as a
    # replica whatever brokerRole says, a ``promote()`` makes it the master, and ``restart``
    # is how it gets out of a state only a restart leaves cleanly (a truncation to apply).
    controller: bool = False
    restart: Callable[[str], None] | None = None
    # Master: (access key, replica host) -> the secret of the account a replica must prove
    # (PermissionError: refused, with why); None = replicas are not authenticated.
    replica_secret: Callable[[str, str], str] | None = None
    # Replica: (access key, secret) of its replication account; ("", "") = none.
    credentials: tuple[str, str] = ("", "")
    # haTlsEnable: the master's listener serves TLS with this context, a replica dials with
    # this one (verifying the master's certificate and host name); None = plain TCP.
    server_ssl: ssl.SSLContext | None = None
    client_ssl: ssl.SSLContext | None = None


__all__ = ["ASYNC_MASTER", "ROLES", "SLAVE", "SYNC_MASTER", "ReplicaLink"]
