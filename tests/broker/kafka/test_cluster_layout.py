"""The Kafka numbering of a cluster's queues (``broker/frontends/kafka/cluster.py``): partitions = each
group's queues in broker-name order, leaders = the groups' masters, a gone group kept in place
without a leader, stable node ids, and the coordinator every broker agrees on."""

from __future__ import annotations

import asyncio
import random
import zlib

from wharf.broker.cluster.routes import GroupQueues, Member
from wharf.broker.frontends.kafka.cluster import (
    NO_LEADER,
    KafkaCluster,
    Layout,
    build_layout,
    coordinator_of,
    master_node_id,
    node_id,
)


def test_node_ids_are_stable_distinct_and_int32() -> None:
    names = [f"broker-{c}" for c in "abcdefghij"]
    ids = {node_id(n, i) for n in names for i in range(3)}
    assert len(ids) == 30
    assert all(0 <= i < 2**31 for i in ids)
    # the documented formula, so an operator can compute a broker's node id by hand
    assert node_id("broker-a", 1) == (zlib.crc32(b"broker-a") % 2**20) * 1024 + 1


def test_partitions_concatenate_groups_in_name_order() -> None:
    a, b = node_id("broker-a", 0), node_id("broker-b", 0)
    # the NameServer's answer in any order gives the same numbering
    layout = build_layout(Layout(), {"broker-b": (3, b, "h:2"), "broker-a": (2, a, "h:1")})
    assert [(s.broker_name, s.first, s.count, s.leader) for s in layout.spans] == [
        ("broker-a", 0, 2, a),
        ("broker-b", 2, 3, b),
    ]
    assert layout.total == 5
    assert [layout.locate(p) for p in range(5)] == [
        (layout.spans[0], 0), (layout.spans[0], 1),
        (layout.spans[1], 0), (layout.spans[1], 1), (layout.spans[1], 2),
    ]  # fmt: skip
    assert layout.locate(5) is None and layout.locate(-1) is None


def test_a_gone_group_keeps_its_partitions_leaderless() -> None:
    a, b, c = (node_id(f"broker-{x}", 0) for x in "abc")
    live = {"broker-a": (2, a, "h:1"), "broker-b": (2, b, "h:2"), "broker-c": (2, c, "h:3")}
    before = build_layout(Layout(), live)
    after = build_layout(before, {k: v for k, v in live.items() if k != "broker-a"})  # it died
    # broker-b and broker-c keep partitions 2-5: committed offsets still name the same queues
    assert [(s.broker_name, s.first, s.leader) for s in after.spans] == [
        ("broker-a", 0, NO_LEADER),
        ("broker-b", 2, b),
        ("broker-c", 4, c),
    ]
    assert after.spans[0].master == ""  # nowhere to reach its offsets
    assert build_layout(after, live) == before


def test_coordinator_is_agreed_and_moves_only_with_its_broker() -> None:
    masters = ["broker-a", "broker-b", "broker-c"]
    groups = [f"g{i}" for i in range(300)]
    chosen = {g: coordinator_of(g, masters) for g in groups}
    shuffled = masters[:]
    random.Random(7).shuffle(shuffled)
    assert chosen == {g: coordinator_of(g, shuffled) for g in groups}  # order-independent
    counts = {m: list(chosen.values()).count(m) for m in masters}
    assert min(counts.values()) > 60, counts  # spread (100 each on average)
    # broker-c leaves: only its groups move
    after = {g: coordinator_of(g, ["broker-a", "broker-b"]) for g in groups}
    assert {g for g in groups if after[g] != chosen[g]} == {
        g for g in groups if chosen[g] == "broker-c"
    }
    assert coordinator_of("g", []) is None


class FakeRoutes:
    """ClusterRoutes' two calls, answered from fields a test sets (None: no NameServer)."""

    def __init__(self) -> None:
        self.route: list[GroupQueues] | None = []
        self.live: list[Member] | None = []
        self.calls = 0

    async def groups(self, topic: str) -> list[GroupQueues] | None:
        self.calls += 1
        return self.route

    async def members(self) -> list[Member] | None:
        return self.live


def _cluster(routes: FakeRoutes, local: dict[str, int], clock: list[float]) -> KafkaCluster:
    return KafkaCluster(
        lambda: routes,
        "C",
        "broker-b",
        0,
        local.get,
        clock=lambda: clock[0],  # type: ignore[arg-type,return-value]
    )


def test_cluster_layout_merges_own_queues_caches_and_survives_outages() -> None:
    async def run() -> None:
        routes, local, clock = FakeRoutes(), {"t": 4}, [0.0]
        cluster = _cluster(routes, local, clock)
        a = master_node_id("broker-a", "127.0.0.1:9001")
        routes.route = [GroupQueues("broker-a", "h:1", 2, 2, 6, "127.0.0.1:9001")]
        # broker-b's own queues are not registered yet: added from its own table
        layout = await cluster.layout("t")
        assert [(s.broker_name, s.first, s.count, s.leader, s.master) for s in layout.spans] == [
            ("broker-a", 0, 2, a, "h:1"),
            ("broker-b", 2, 4, cluster.node_id, ""),
        ]
        assert cluster.peers[a].port == 9001
        # cached for TTL_S: Produce and Fetch do not ask the NameServers each time
        await cluster.layout("t")
        assert routes.calls == 1
        clock[0] = 5.0
        routes.route = None  # no NameServer answers: the last numbering stands
        assert await cluster.layout("t") == layout
        routes.route = []  # no group holds it any more and this broker neither: forgotten
        local.clear()
        assert (await cluster.layout("t", fresh=True)).spans == ()

    asyncio.run(run())


def test_coordinator_from_live_masters_of_this_cluster() -> None:
    async def run() -> None:
        routes, clock = FakeRoutes(), [0.0]
        cluster = _cluster(routes, {}, clock)
        routes.live = [
            Member("C", "broker-a", 0, "h:1", "127.0.0.1:9001"),
            Member("C", "broker-a", 1, "h:2", "127.0.0.1:9002"),  # a replica: never coordinator
            Member("OTHER", "broker-z", 0, "h:3", "127.0.0.1:9003"),  # another cluster
            Member("C", "broker-c", 0, "h:4", ""),  # no Kafka listener
        ]
        ids = {"broker-a": master_node_id("broker-a", "127.0.0.1:9001"),
               "broker-b": cluster.node_id}  # fmt: skip
        for g in (f"g{i}" for i in range(50)):
            expected = coordinator_of(g, ["broker-a", "broker-b"])
            assert await cluster.coordinator(g, fresh=True) == ids[expected or ""]

    asyncio.run(run())


def test_a_controller_mode_replica_takes_the_masters_node_id_once_elected() -> None:
    """brokerId 1 of a controller-mode group: routed as broker id 0 once elected, so its node
    id must then be the master's (the leader Metadata names), else it refuses every Produce
    as NOT_LEADER_OR_FOLLOWER for partitions it leads."""
    elected = [False]
    cluster = KafkaCluster(
        lambda: None, "C", "broker-a", 1, lambda topic: 4, elected=lambda: elected[0],
        kafka_address="127.0.0.1:9002",
    )  # fmt: skip
    assert (cluster.is_master, cluster.node_id) == (False, node_id("broker-a", 1))
    elected[0] = True
    master = master_node_id("broker-a", "127.0.0.1:9002")
    assert (cluster.is_master, cluster.node_id) == (True, master)


def test_a_masters_node_id_names_one_address() -> None:
    """Two replicas of one group, each master in turn: two node ids (a failover is a new
    node, as in Kafka). One id that moved between addresses left librdkafka's transaction
    coordinator connection dialling the old master (the failover test's SIGTERM run)."""
    one, two = (master_node_id("broker-a", f"127.0.0.1:{p}") for p in (9001, 9002))
    assert one != two
    assert one == master_node_id("broker-a", "127.0.0.1:9001")  # stable
    assert master_node_id("b", "[::1]:9092") == master_node_id("b", "::1:9092")
    replicas = {node_id(n, i) for n in ("broker-a", "broker-b") for i in range(1, 4)}
    masters = {master_node_id(n, f"10.0.0.{i}:9092") for n in ("broker-a", "x") for i in range(50)}
    assert len(masters) == 100 and not masters & replicas
    assert all(2**30 <= i < 2**31 for i in masters)
