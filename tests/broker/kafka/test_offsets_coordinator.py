"""Only a master coordinates a Kafka group, and a commit of its own group's partition is never
forwarded (``cluster.py`` ``coordinator``, ``env.py`` ``offsets_home``, ``offsets.py``).

The fault campaign (seed 20261129): a controller-mode master lost its lease and stepped down
(``failover.leads`` false: its node id went back to brokerId 1's); for ~0.5 s the NameServer
named it its group's master again, while its one-second cache of members held no master. It
took itself for the coordinator ("this broker when it alone is known"), saw the partition led
by the master node the NameServer named, and forwarded the OffsetCommit to that master's
gRPC address, its own, as to another group's: UpdateConsumerOffset stores in memory and
answers at once. The commit of 125 was acknowledged, in no file and on no replica, and gone
once the broker came back as a replica; the group re-read from offset 0. These tests set up
that view with the NameServer's two answers (the caches' skew) given by a fake; the last one
has another group's master refuse the forwarded (durable) commit."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from wharf.broker.cluster.peer_offsets import PeerOffsetError
from wharf.broker.cluster.routes import GroupQueues, Member
from wharf.broker.frontends.kafka.cluster import NO_LEADER, KafkaCluster, master_node_id
from wharf.broker.frontends.kafka.env import KafkaEnv
from wharf.broker.frontends.kafka.errors import Code
from wharf.broker.frontends.kafka.metadata import MetadataHandlers
from wharf.broker.frontends.kafka.offsets import OffsetHandlers

OWN = "10.77.24.4:8081"  # this broker's gRPC address, as the NameServer lists it
TOPIC, GROUP = "FaultCampaign", "fault-campaign-kafka"


class Routes:
    """The NameServer as the broker sees it: ``live`` members (GetClusterInfo) and ``route``
    (QueryRoute); ``offsets`` records what would go over the peer path."""

    def __init__(self, live: list[Member], route: list[GroupQueues]) -> None:
        self.live, self.route = live, route
        self.offsets = self
        self.forwarded: list[tuple[Any, ...]] = []

    async def groups(self, topic: str) -> list[GroupQueues]:
        return self.route

    async def members(self) -> list[Member]:
        return self.live

    async def commit(self, address: str, group: str, topic: str, queue: int, offset: int) -> None:
        self.forwarded.append((address, group, topic, queue, offset))

    async def query(self, address: str, group: str, topic: str, queue: int) -> int:
        self.forwarded.append((address, group, topic, queue))
        return 125


class Port:
    """The core's calls the offset handlers make (a group no RocketMQ consumer uses)."""

    def __init__(self) -> None:
        self.committed: dict[tuple[str, str, int], int] = {}
        self.clients = SimpleNamespace(members=lambda group: ([], 0))

    def group(self, name: str) -> Any:
        return SimpleNamespace(consume_enable=True)

    def commit_offset(self, group: str, topic: str, queue: int, offset: int) -> None:
        self.committed[(group, topic, queue)] = offset

    def committed_offset(self, group: str, topic: str, queue: int) -> int:
        return self.committed.get((group, topic, queue), -1)

    async def offsets_durable(self) -> None:
        return None


class AnyMember:
    def check_commit(self, group_id: str, generation: int, member_id: str) -> Code:
        return Code.NONE


def _env(routes: Routes, elected: list[bool]) -> KafkaEnv:
    """broker-a's replica 1 (controller mode), master while ``elected[0]``."""
    cluster = KafkaCluster(
        lambda: routes, "C", "broker-a", 1, lambda topic: 2, elected=lambda: elected[0]
    )
    ctx = SimpleNamespace(
        config=SimpleNamespace(namesrv_addr="10.77.24.3:9876", broker_name="broker-a"),
        port=Port(),
        cluster_routes=lambda: routes,
    )
    return KafkaEnv(ctx, "10.77.24.4", 9092, cluster=cluster)  # type: ignore[arg-type]


def _ns_names_it_master() -> list[GroupQueues]:
    return [GroupQueues("broker-a", OWN, 2, 2, 6, "10.77.24.4:9092")]


def _commit_body(offsets: dict[int, int]) -> dict[str, Any]:
    return {
        "group_id": GROUP, "generation_id": 3, "member_id": "m",
        "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": p, "committed_offset": o} for p, o in offsets.items()]}],
    }  # fmt: skip


def test_a_broker_that_is_no_master_never_coordinates() -> None:
    async def run() -> None:
        routes, elected = Routes([], []), [False]
        cluster = _env(routes, elected).cluster
        assert cluster is not None
        # no master known: a replica (or a master stepping down) does not name itself
        assert await cluster.coordinator(GROUP, fresh=True) == NO_LEADER
        elected[0] = True  # elected: it coordinates, under its node id as the master
        assert await cluster.coordinator(GROUP, fresh=True) == cluster.node_id
        elected[0] = False  # a master the NameServer lists: that one
        routes.live = [Member("C", "broker-a", 0, OWN, "10.77.24.4:9092")]
        listed = master_node_id("broker-a", "10.77.24.4:9092")
        assert await cluster.coordinator(GROUP, fresh=True) == listed

    asyncio.run(run())


def test_a_stepping_down_master_answers_no_commit_it_cannot_keep() -> None:
    """The campaign's view: no master in the (cached) members, the route naming this broker
    as its group's master. Before: the commit was forwarded to OWN and answered NONE."""

    async def run() -> None:
        routes = Routes([], _ns_names_it_master())
        env = _env(routes, [False])
        handlers = OffsetHandlers(env, AnyMember())  # type: ignore[arg-type]
        conn: Any = SimpleNamespace(account=None, secure=False)
        reply = await handlers.offset_commit(conn, 8, _commit_body({1: 125, 0: 132}))
        codes = {p["error_code"] for t in reply["topics"] for p in t["partitions"]}
        assert codes == {Code.NOT_COORDINATOR}
        assert routes.forwarded == [] and env.ctx.port.committed == {}  # type: ignore[attr-defined]
        fetched = await handlers.offset_fetch(
            conn, 8, {"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [1]}],
                      "require_stable": False},
        )  # fmt: skip
        assert fetched["error_code"] == Code.NOT_COORDINATOR and routes.forwarded == []
        # and FindCoordinator does not send the client here
        found = await MetadataHandlers(env).find_coordinator(conn, 1, {"key": GROUP, "key_type": 0})
        assert (found["error_code"], found["node_id"]) == (Code.COORDINATOR_NOT_AVAILABLE, -1)

    asyncio.run(run())


def test_own_groups_partition_not_led_here_is_never_forwarded() -> None:
    """Coordinator checked while leading, stepped down before the partition's home is looked
    up: its own group's partition has no home here (REQUEST_TIMED_OUT), never the peer path
    (it answers before the offset is durable, and here named this very broker)."""

    async def run() -> None:
        routes, elected = Routes([], _ns_names_it_master()), [True]
        env = _env(routes, elected)
        assert await env.offsets_home(TOPIC, 1) == (None, 1)  # leading: its own table
        elected[0] = False
        assert env.cluster is not None
        env.cluster.forget(TOPIC)
        assert await env.offsets_home(TOPIC, 1) == ("", 1)
        # another group's partition still goes to that group's master
        routes.route = [*_ns_names_it_master(), GroupQueues("broker-b", "h:2", 2, 2, 6, "h:9")]
        env.cluster.forget(TOPIC)
        assert await env.offsets_home(TOPIC, 3) == ("h:2", 1)

    asyncio.run(run())


def test_a_refused_forwarded_commit_is_answered_with_a_retriable_code() -> None:
    """Another group's master refuses the durable forwarded commit: not durable or fenced
    there (UNAVAILABLE) is COORDINATOR_NOT_AVAILABLE, a replica (FAILED_PRECONDITION: stale
    routes) REQUEST_TIMED_OUT with the partition's layout looked up again; never NONE."""

    async def run() -> None:
        route = [*_ns_names_it_master(), GroupQueues("broker-b", "h:2", 2, 2, 6, "h:9")]
        routes = RefusingRoutes([], route)
        env = _env(routes, [True])
        handlers = OffsetHandlers(env, AnyMember())  # type: ignore[arg-type]
        conn: Any = SimpleNamespace(account=None, secure=False)
        for status, code in (("UNAVAILABLE", Code.COORDINATOR_NOT_AVAILABLE),
                             ("FAILED_PRECONDITION", Code.REQUEST_TIMED_OUT),
                             ("DEADLINE_EXCEEDED", Code.REQUEST_TIMED_OUT)):  # fmt: skip
            routes.refusal, routes.looked_up = status, 0
            reply = await handlers.offset_commit(conn, 8, _commit_body({3: 40, 1: 41}))
            codes = {
                p["partition_index"]: p["error_code"] for p in reply["topics"][0]["partitions"]
            }
            assert codes == {3: code, 1: Code.NONE}, status  # its own partition is kept
            assert routes.forwarded[-1] == ("h:2", GROUP, TOPIC, 1, 40)
            if status == "FAILED_PRECONDITION":
                await env.offsets_home(TOPIC, 3)
                assert routes.looked_up == 1  # forgotten: the next try asks the NameServer

    asyncio.run(run())


class RefusingRoutes(Routes):
    """Another group's master that refuses the forwarded commit with gRPC status ``refusal``."""

    refusal = ""
    looked_up = 0

    async def groups(self, topic: str) -> list[GroupQueues]:
        self.looked_up += 1
        return self.route

    async def commit(self, address: str, group: str, topic: str, queue: int, offset: int) -> None:
        self.forwarded.append((address, group, topic, queue, offset))
        raise PeerOffsetError(f"{self.refusal}: refused", self.refusal)
