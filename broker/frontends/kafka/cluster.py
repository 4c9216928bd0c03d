"""Where a Kafka partition lives when several broker groups serve a topic (``namesrvAddr``
set): the routes come from the NameServers through ``ctx.cluster_routes`` (the cluster layer,
as for RocketMQ 5's QueryRoute); this module only numbers them the Kafka way.

- **Partitions** of a topic = the queues (``readQueueNums``) of every group that holds it,
  concatenated in broker-name order: with broker-a holding 8 queues and broker-b 4, partitions
  0-7 are broker-a's queues 0-7 and 8-11 broker-b's queues 0-3. Every broker computes the
  same numbering from the same NameServer answer.
- **Leader** of a partition = its group's master (broker id 0). A group this broker has seen
  whose master is gone keeps its place (Kafka never renumbers partitions; the next groups'
  partitions would otherwise shift under committed offsets): its partitions are listed
  leaderless (LEADER_NOT_AVAILABLE) until the master is back. This memory is per process: a
  broker started while a group was down numbers without it until that group returns.
- **Node ids** are stable per broker and name one address each: a replica (brokerId > 0)
  ``crc32(brokerName) mod 2^20 * 1024 + brokerId mod 1024`` (a collision between two group
  names has probability ~n^2 / 2^21); a group's master (broker id 0, and a controller-mode
  replica once elected) ``2^30 + crc32(brokerName "@" host:port) mod 2^30`` over its
  advertised Kafka address (``master_node_id``), so a failover to another replica is a
  new node, as in Kafka, where a node id never moves to another address. An id of the group
  alone would move with its master: librdkafka's transaction (and group) coordinator
  connection, bound to the id, would dial the old master's address for ever (its
  FindCoordinator answers naming the same id, nothing changes for it). Without
  NameServers the single broker is node 0.
- **Coordinator** of a group id = rendezvous hashing over the live masters with a Kafka
  address: the master with the highest ``crc32(groupId/brokerName)``. Every broker picks the
  same one, and a group moves only when its own coordinator leaves (not when any broker does,
  as ``hash mod n`` would). None (``NO_LEADER``) while no master is known to a broker that is
  not one itself: a replica or a master stepping down never coordinates.

Lookups are cached for ``TTL_S`` (Produce and Fetch check leadership on every request);
Metadata and FindCoordinator ask the NameServers afresh. When no NameServer answers, the last
answer stands (or this broker alone, before any).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wharf.broker.cluster.routes import ClusterRoutes, GroupQueues, Member

__all__ = [
    "NO_LEADER", "KafkaCluster", "Layout", "Peer", "Span", "coordinator_of", "master_node_id",
    "member_node_id", "node_id",
]  # fmt: skip

NODE_SPAN = 1024  # broker ids per group name in a node id
NAME_BUCKETS = 1 << 20  # 2^20 * 1024 = 2^30 < 2^31: node ids stay positive int32
MASTER_IDS = 1 << 30  # masters' node ids: 2^30 + a hash below 2^30 (< 2^31, beside replicas')
NO_LEADER = -1
TTL_S = 1.0


def node_id(broker_name: str, broker_id: int) -> int:
    """The Kafka node id of broker ``broker_id`` of group ``broker_name`` (stable, documented)."""
    return (zlib.crc32(broker_name.encode()) % NAME_BUCKETS) * NODE_SPAN + broker_id % NODE_SPAN


def master_node_id(broker_name: str, kafka_address: str) -> int:
    """The node id of group ``broker_name``'s master at ``kafka_address`` (host:port; an IPv6
    host bracketed or not: one id)."""
    host, _, port = kafka_address.rpartition(":")
    key = f"{broker_name}@{host.strip('[]')}:{port}"
    return MASTER_IDS + zlib.crc32(key.encode()) % MASTER_IDS


def member_node_id(broker_name: str, broker_id: int, kafka_address: str) -> int:
    """A broker's node id as the NameServers list it (broker id 0: the group's master)."""
    if broker_id == 0 and kafka_address:
        return master_node_id(broker_name, kafka_address)
    return node_id(broker_name, broker_id)


@dataclass(frozen=True, slots=True)
class Peer:
    """A broker as Kafka clients reach it."""

    node_id: int
    host: str
    port: int


def parse_peer(broker_name: str, broker_id: int, address: str) -> Peer | None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return None
    return Peer(member_node_id(broker_name, broker_id, address), host.strip("[]"), int(port))


@dataclass(frozen=True, slots=True)
class Span:
    """One group's queues within a topic's partitions."""

    broker_name: str
    first: int  # its queue 0's partition number
    count: int
    leader: int  # node id of the group's master; NO_LEADER when it is gone
    master: str = ""  # the master's gRPC address, where the group's offsets live ("": gone)


@dataclass(frozen=True, slots=True)
class Layout:
    spans: tuple[Span, ...] = ()

    @property
    def total(self) -> int:
        return sum(s.count for s in self.spans)

    def locate(self, partition: int) -> tuple[Span, int] | None:
        """(the group's span, its queue id) of a partition; None beyond the last."""
        for span in self.spans:
            if span.first <= partition < span.first + span.count:
                return span, partition - span.first
        return None


Live = dict[str, tuple[int, int, str]]  # group name -> (queue count, leader node id, master)


def build_layout(known: Layout, live: Live) -> Layout:
    """The numbering over ``live`` groups and the groups of ``known`` no longer live (kept,
    leaderless, with their last queue count)."""
    counts: Live = {s.broker_name: (s.count, NO_LEADER, "") for s in known.spans}
    counts.update(live)
    spans, first = [], 0
    for name in sorted(counts):
        count, leader, master = counts[name]
        spans.append(Span(name, first, count, leader, master))
        first += count
    return Layout(tuple(spans))


def coordinator_of(group_id: str, masters: Iterable[str]) -> str | None:
    """The group name (of ``masters``) that coordinates ``group_id`` (rendezvous hashing)."""
    return max(masters, key=lambda name: (zlib.crc32(f"{group_id}/{name}".encode()), name),
               default=None)  # fmt: skip


class KafkaCluster:
    """The cluster as this broker's Kafka handlers see it (see the module doc)."""

    def __init__(
        self,
        routes: Callable[[], ClusterRoutes | None],
        cluster: str,
        broker_name: str,
        broker_id: int,
        local_queues: Callable[[str], int | None],
        clock: Callable[[], float] = time.monotonic,
        elected: Callable[[], bool] = lambda: False,
        kafka_address: str = "",
    ) -> None:
        self._routes = routes
        self.kafka_address = kafka_address  # advertised host:port: the master's node id
        self.cluster = cluster
        self.broker_name = broker_name
        self.broker_id = broker_id
        # Controller mode: brokerId is 1, 2 ... and the elected replica is its group's master,
        # routed as broker id 0; its node id is then the master's, the leader Metadata names.
        self._elected = elected
        self._local_queues = local_queues  # this broker's queue count of a topic, None: absent
        self._clock = clock
        self._layouts: dict[str, tuple[float, Layout]] = {}
        self._members: tuple[float, list[Member]] = (-TTL_S, [])
        self.peers: dict[int, Peer] = {}  # every broker named so far, by node id

    @property
    def is_master(self) -> bool:
        return self.broker_id == 0 or self._elected()

    @property
    def node_id(self) -> int:
        """This broker's node id: its master id while it is its group's master."""
        if self.is_master:
            return member_node_id(self.broker_name, 0, self.kafka_address)
        return node_id(self.broker_name, self.broker_id)

    # --- topics -------------------------------------------------------------------------------
    async def layout(self, topic: str, fresh: bool = False) -> Layout:
        cached = self._layouts.get(topic)
        if cached is not None and not fresh and self._clock() - cached[0] < TTL_S:
            return cached[1]
        known = cached[1] if cached is not None else Layout()
        routes = self._routes()
        groups = await routes.groups(topic) if routes is not None else None
        if groups is None:  # no NameServer answers: the last numbering, else this broker alone
            groups = [] if cached is None else None
        live = self._live(topic, groups or [])
        if groups is None:
            layout = known
        elif not live:
            layout = Layout()  # no live group holds it (deleted): forget its numbering
        else:
            layout = build_layout(known, live)
        if layout.spans:
            self._layouts[topic] = (self._clock(), layout)
        else:
            self._layouts.pop(topic, None)
        return layout

    def _live(self, topic: str, groups: list[GroupQueues]) -> Live:
        live: Live = {}
        for g in groups:
            peer = parse_peer(g.broker_name, 0, g.kafka_address)
            if peer is not None:
                self.peers[peer.node_id] = peer
            leader = peer.node_id if peer else NO_LEADER
            live[g.broker_name] = (g.read_queue_nums, leader, g.address)
        own = self._local_queues(topic)
        if own is not None and self.is_master:
            # This broker's own queues are fresher than its registration (a topic created a
            # moment ago is registered within ~50 ms).
            live[self.broker_name] = (own, self.node_id, "")
        return live

    def forget(self, topic: str) -> None:
        self._layouts.pop(topic, None)

    # --- brokers ------------------------------------------------------------------------------
    async def members(self, fresh: bool = False) -> list[Member]:
        """The live brokers of this cluster with a Kafka address."""
        at, members = self._members
        if fresh or self._clock() - at >= TTL_S:
            routes = self._routes()
            found = await routes.members() if routes is not None else None
            if found is not None:
                members = [m for m in found if m.cluster == self.cluster and m.kafka_address]
                for m in members:
                    peer = parse_peer(m.broker_name, m.broker_id, m.kafka_address)
                    if peer is not None:
                        self.peers[peer.node_id] = peer
                self._members = (self._clock(), members)
        return members

    async def coordinator(self, group_id: str, fresh: bool = False) -> int:
        """The node id of the group's coordinator: one of the live masters, this broker among
        them while it is one; NO_LEADER when none is known and this broker is none (a
        replica, or a controller-mode master stepping down, never coordinates: a commit it
        answered would be in no master's table)."""
        masters = await self._masters(fresh)
        name = coordinator_of(group_id, masters)
        return masters[name] if name is not None else NO_LEADER

    async def coordinator_group(self, group_id: str, fresh: bool = False) -> str | None:
        """The brokerName of the group's coordinator (None: no master known)."""
        return coordinator_of(group_id, await self._masters(fresh))

    async def _masters(self, fresh: bool) -> dict[str, int]:
        """brokerName -> node id of each live master (this broker while it is one)."""
        masters = {
            m.broker_name: member_node_id(m.broker_name, 0, m.kafka_address)
            for m in await self.members(fresh)
            if m.broker_id == 0
        }
        if self.is_master:
            masters[self.broker_name] = self.node_id
        return masters

    async def master(self, broker_name: str) -> Peer | None:
        """Group ``broker_name``'s master as Kafka clients reach it (None: gone), asked afresh."""
        for m in await self.members(fresh=True):
            if m.broker_name == broker_name and m.broker_id == 0:
                return parse_peer(m.broker_name, 0, m.kafka_address)
        return None
