"""What the Kafka handlers share (``KafkaEnv``): the broker's context, this broker as a Kafka
node (id, advertised host and port), where partitions and groups live, the ACL checker, and
the per-connection authorization helper (``allowed``).

Without NameServers a single broker is node 0, the leader of every partition (partition =
queue id) and the coordinator of every group. With ``namesrvAddr`` the numbering, leaders,
node ids and coordinators are ``cluster.py``'s (``layout``, ``nodes``, ``coordinator``,
``queue_of``); handlers ask only these.

ACL (``serving.acl`` set): a connection authenticates with SASL (``sasl.py``) as one of the ACL
accounts; then Produce needs PUB on the topic, Fetch, ListOffsets and OffsetFetch/Commit SUB
on the topic, group operations SUB on the group (``%RETRY%g`` topics count as group g, as
everywhere), Metadata lists only topics the account may PUB or SUB, and CreateTopics,
DeleteTopics, DescribeConfigs, DescribeGroups and ListGroups need an admin account.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wharf.broker.core.port import RequestContext
from wharf.broker.frontends.kafka.cluster import (
    NO_LEADER,
    KafkaCluster,
    Layout,
    Span,
    member_node_id,
)
from wharf.broker.frontends.kafka.errors import Code
from wharf.broker.kit.acl.accounts import Denied
from wharf.broker.kit.acl.rules import Perm
from wharf.broker.kit.acl.table import ADMIN, Need

if TYPE_CHECKING:
    from wharf.broker.cluster.peer_offsets import PeerOffsets
    from wharf.broker.frontends.frontend_kit import FrontEndKit
    from wharf.broker.frontends.kafka.server import KafkaConnection
    from wharf.broker.kit.acl.accounts import AccountChecker

__all__ = ["KAFKA_REQUEST", "KafkaEnv", "Node"]

NODE_ID = 0
KAFKA_REQUEST = RequestContext("kafka")  # what the port's calls carry (no deadline of their own)


@dataclass(frozen=True, slots=True)
class Node:
    node_id: int
    host: str
    port: int


@dataclass
class KafkaEnv:
    ctx: FrontEndKit
    host: str  # advertised
    port: int
    acl: AccountChecker | None = None
    fixed_node_id: int = NODE_ID  # without NameServers (else the cluster's, see node_id)
    # The TLS listener beside a plaintext one (kafkaTlsListen): what its clients are told.
    tls_address: tuple[str, int] | None = None
    # The links to other groups' Kafka listeners (txn/link.py) dial TLS with this when this
    # broker's own Kafka listener is TLS-only: a cluster's brokers share one TLS setting, as
    # Kafka's security.inter.broker.protocol, and a registration names no protocol.
    link_tls: ssl.SSLContext | None = None
    cluster: KafkaCluster | None = None  # with namesrvAddr
    # Controller mode: the front end leads once the store is promoted and this is true too
    # (the transaction coordinator replayed the replicated logs: the partitions' LSO and
    # aborted runs are the leader's; set by KafkaHandlers).
    settled: Callable[[], bool] = lambda: True

    def __post_init__(self) -> None:
        config = self.ctx.config
        if config.namesrv_addr and self.cluster is None:
            ctx = self.ctx

            def local_queues(topic: str) -> int | None:
                held = ctx.port.topic(topic)
                return held.read_queue_nums if held is not None else None

            def elected() -> bool:  # controller mode: this replica is the master now
                return self.promoted() and self.settled()

            self.cluster = KafkaCluster(
                ctx.cluster_routes, config.broker_cluster_name, config.broker_name,
                config.broker_id, local_queues, elected=elected,
                kafka_address=f"{self.host}:{self.port}",
            )  # fmt: skip

    def promoted(self) -> bool:
        """The store leads the group's partitions (controller mode: elected and promoted;
        otherwise a master, broker id 0), whatever the Kafka front end's own state."""
        if self.cluster is None or self.cluster.broker_id == 0:
            return True
        failover = self.ctx.failover
        return failover is not None and failover.leads

    @property
    def node_id(self) -> int:
        """This broker's node id; in controller mode it becomes the master's once elected
        (before, a master with brokerId 1 never led the partitions Metadata gave it)."""
        return self.cluster.node_id if self.cluster is not None else self.fixed_node_id

    def node_for(self, conn: KafkaConnection) -> Node:
        """This broker as the connection's listener is reached (plaintext or TLS)."""
        if conn.secure and self.tls_address is not None:
            return Node(self.node_id, *self.tls_address)
        return Node(self.node_id, self.host, self.port)

    async def nodes(self, conn: KafkaConnection, leaders: Iterable[int] = ()) -> list[Node]:
        """Every broker Metadata names: this one, the cluster's live brokers with a Kafka
        address, and the ``leaders`` it names (peers ordered by node id)."""
        own = self.node_for(conn)
        cluster = self.cluster
        if cluster is None:
            return [own]
        ids = set(leaders)
        for member in await cluster.members():
            ids.add(member_node_id(member.broker_name, member.broker_id, member.kafka_address))
        ids.discard(own.node_id)
        peers = [cluster.peers[i] for i in sorted(ids) if i in cluster.peers]
        return [own, *(Node(p.node_id, p.host, p.port) for p in peers)]

    async def layout(self, topic: str, fresh: bool = False) -> Layout:
        """The topic's partitions: this broker's queues alone, or the cluster's numbering."""
        if self.cluster is not None:
            return await self.cluster.layout(topic, fresh)
        held = self.ctx.port.topic(topic)
        if held is None:
            return Layout()
        return Layout((Span(self.ctx.config.broker_name, 0, held.read_queue_nums, self.node_id),))

    async def queue_of(self, topic: str, partition: int) -> tuple[int, Code]:
        """This broker's queue id of a partition, or -1 and why not: UNKNOWN_TOPIC_OR_PARTITION
        (no such partition), NOT_LEADER_OR_FOLLOWER (another broker leads it, or none does:
        the client refreshes its metadata and retries)."""
        found = (await self.layout(topic)).locate(partition)
        if found is None and self.cluster is not None:
            found = (await self.layout(topic, fresh=True)).locate(partition)
        if found is None:
            return -1, Code.UNKNOWN_TOPIC_OR_PARTITION
        span, queue = found
        if span.leader != self.node_id:
            return -1, Code.NOT_LEADER_OR_FOLLOWER
        return queue, Code.NONE

    async def txn_home(self, topic: str, partition: int) -> tuple[str | None, int, Code]:
        """Where a transaction's partition is: (None, queue id) this broker leads it, (the
        group's brokerName, its queue id) another group does (its markers go there, led or
        not at the moment: they are retried), or UNKNOWN_TOPIC_OR_PARTITION."""
        found = (await self.layout(topic)).locate(partition)
        if found is None and self.cluster is not None:
            found = (await self.layout(topic, fresh=True)).locate(partition)
        if found is None:
            return None, -1, Code.UNKNOWN_TOPIC_OR_PARTITION
        span, queue = found
        if span.leader == self.node_id:
            return None, queue, Code.NONE
        if self.cluster is None or span.broker_name == self.cluster.broker_name:
            return None, -1, Code.NOT_LEADER_OR_FOLLOWER  # this group's, not led here now
        return span.broker_name, queue, Code.NONE

    async def offsets_home(self, topic: str, partition: int) -> tuple[str | None, int] | None:
        """Where a partition's committed offsets live: (None, queue id) in this broker's table,
        (the owning master's gRPC address, its queue id) on another group ("" while that
        master is gone, and for this broker's own group when it does not lead it); None for
        no such partition."""
        found = (await self.layout(topic)).locate(partition)
        if found is None:
            return None
        span, queue = found
        if self.cluster is None or span.leader == self.node_id:
            return None, queue
        if span.broker_name == self.cluster.broker_name:
            # This broker's own group, not led here (it stepped down after the coordinator
            # check): never over the peer path, which answers before the offset is durable;
            # the NameServer still naming a stepping-down master sent it to itself, and the
            # commit, answered, was gone once the broker came back as a replica.
            return "", queue
        return span.master, queue

    async def txn_offset_home(self, topic: str, partition: int) -> tuple[str, int] | None:
        """A transaction's offset of a partition is kept as (home, queue id): home "" for
        this broker's group's table, else the brokerName of the group holding the queue (its
        master found when the offset is applied: it may have failed over by then); None for
        no such partition."""
        found = (await self.layout(topic)).locate(partition)
        if found is None and self.cluster is not None:
            found = (await self.layout(topic, fresh=True)).locate(partition)
        if found is None:
            return None
        span, queue = found
        if self.cluster is None or span.broker_name == self.cluster.broker_name:
            return "", queue
        return span.broker_name, queue

    async def master_of(self, topic: str, broker_name: str) -> str:
        """The gRPC address of group ``broker_name``'s master as the topic's routes name it
        ("": gone)."""
        for span in (await self.layout(topic, fresh=True)).spans:
            if span.broker_name == broker_name:
                return span.master
        return ""

    async def group_coordinator(self, group_id: str) -> str | None:
        """The brokerName of another broker group coordinating ``group_id``, "" when this
        broker does, None when no master is known."""
        if self.cluster is None:
            return ""
        name = await self.cluster.coordinator_group(group_id)
        if name is None:
            return None
        return "" if name == self.cluster.broker_name else name

    def peer_offsets(self) -> PeerOffsets | None:
        routes = self.ctx.cluster_routes()
        return routes.offsets if routes is not None else None

    async def coordinator(
        self, conn: KafkaConnection, group_id: str, fresh: bool = False
    ) -> Node | None:
        """The node coordinating ``group_id`` (this one without a cluster); None when no
        master is known and this broker is none."""
        own = self.node_for(conn)
        if self.cluster is None:
            return own
        chosen = await self.cluster.coordinator(group_id, fresh)
        if chosen == NO_LEADER:
            return None
        peer = self.cluster.peers.get(chosen)
        if chosen == own.node_id or peer is None:
            return own
        return Node(peer.node_id, peer.host, peer.port)

    async def coordinates(self, group_id: str) -> bool:
        """Does this broker coordinate ``group_id``? (NOT_COORDINATOR otherwise.)"""
        if self.cluster is None:
            return True
        return await self.cluster.coordinator(group_id) == self.node_id

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
