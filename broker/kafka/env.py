"""What the Kafka handlers share (``KafkaEnv``): the broker's context, this broker as a Kafka
node (id, advertised host and port), the ACL checker, and the per-connection authorization
helper (``allowed``).

Node ids: a single broker is node 0, the leader of every partition and the coordinator of
every group. ``nodes()`` / ``node_for()`` / ``leader_of()`` are the one place a cluster
(``ctx.cluster_routes``) would add the other brokers of the topic's route.

ACL (``serving.acl`` set): a connection authenticates with SASL (``sasl.py``) as one of the ACL
accounts; then Produce needs PUB on the topic, Fetch, ListOffsets and OffsetFetch/Commit SUB
on the topic, group operations SUB on the group (``%RETRY%g`` topics count as group g, as
everywhere), Metadata lists only topics the account may PUB or SUB, and CreateTopics,
DeleteTopics, DescribeConfigs, DescribeGroups and ListGroups need an admin account.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from wharf.broker.acl.accounts import Denied
from wharf.broker.acl.rules import Perm
from wharf.broker.acl.table import ADMIN, Need

if TYPE_CHECKING:
    from wharf.broker.acl.accounts import AccountChecker
    from wharf.broker.context import BrokerContext
    from wharf.broker.kafka.server import KafkaConnection

__all__ = ["KafkaEnv", "Node"]

NODE_ID = 0


@dataclass(frozen=True, slots=True)
class Node:
    node_id: int
    host: str
    port: int


@dataclass
class KafkaEnv:
    ctx: BrokerContext
    host: str  # advertised
    port: int
    acl: AccountChecker | None = None
    node_id: int = NODE_ID
    # The TLS listener beside a plaintext one (kafkaTlsListen): what its clients are told.
    tls_address: tuple[str, int] | None = None

    def node_for(self, conn: KafkaConnection) -> Node:
        """This broker as the connection's listener is reached (plaintext or TLS)."""
        if conn.secure and self.tls_address is not None:
            return Node(self.node_id, *self.tls_address)
        return Node(self.node_id, self.host, self.port)

    def nodes(self, conn: KafkaConnection) -> list[Node]:
        """Every broker Metadata names (this one; a cluster would add its route's brokers)."""
        return [self.node_for(conn)]

    def leader_of(self, topic: str, partition: int) -> int:
        return self.node_id

    # --- authorization ------------------------------------------------------------------------
    def allowed(self, conn: KafkaConnection, kind: str, name: str, perm: Perm) -> bool:
        """May the connection's account use resource ``kind`` ("topic", "group", "admin")?"""
        if self.acl is None:
            return True
        account = conn.account
        if account is None:
            return False
        need = ADMIN if kind == "admin" else Need(kind, name, perm)
        try:
            self.acl.authorize(account, [need], "kafka")
        except Denied:
            return False
        return True
