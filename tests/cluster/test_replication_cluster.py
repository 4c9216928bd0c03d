"""A replicated group in a cluster, as processes on 127.0.0.1: a NameServer, broker-a (master +
slave, static roles) and broker-b (master). Routes list both replicas of broker-a, `wharf
cluster list` shows each broker's role and its replicas' lag; when broker-a's master dies
(kill -9) its queues stay routable read-only through the slave: producers keep sending (to
broker-b) without a failed send, and consumers read what broker-a had from its slave."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from wharf.client import Admin, Producer, PullConsumer, SendStatus
from wharf.client.namesrv import NameServerClient

from tests.cluster.test_namesrv import cli
from tests.harness import BrokerProcess, Daemons, NamesrvProcess

pytestmark = pytest.mark.slow


@pytest.fixture
def replicated(daemons: Daemons, tmp_path: Path) -> tuple[NamesrvProcess, dict[str, BrokerProcess]]:
    ns = daemons.namesrv(tmp_path / "ns", {"brokerNotActiveTimeoutMillis": 2000})
    common = {"namesrvAddr": ns.endpoint, "brokerClusterName": "C", "autoCreateTopicEnable": False}
    brokers: dict[str, BrokerProcess] = {}
    brokers["a0"] = daemons.broker(
        tmp_path / "a0", {**common, "brokerName": "broker-a", "haListenPort": 0}
    )
    brokers["a1"] = daemons.broker(
        tmp_path / "a1",
        {**common, "brokerName": "broker-a", "brokerId": 1, "brokerRole": "SLAVE",
         "haMasterAddress": brokers["a0"].ha_endpoint},
    )  # fmt: skip
    brokers["b0"] = daemons.broker(tmp_path / "b0", {**common, "brokerName": "broker-b"})
    return ns, brokers


async def test_a_replicated_group_serves_reads_from_its_slave_when_its_master_dies(
    replicated: tuple[NamesrvProcess, dict[str, BrokerProcess]],
) -> None:
    ns, brokers = replicated
    for master in ("a0", "b0"):
        async with Admin(brokers[master].endpoint) as admin:
            await admin.create_topic("spread", queue_nums=2)
    async with NameServerClient(ns.endpoint) as namesrv:

        async def both_replicas_routed() -> bool:
            route = await namesrv.query_route("spread")
            group = route.groups.get("broker-a")
            return group is not None and set(group.addresses) == {0, 1}

        await _eventually(both_replicas_routed)
    listing = {(b["broker_name"], b["broker_id"]): b for b in cli(ns.endpoint, "cluster", "list")}
    assert listing[("broker-a", 1)]["broker_role"] == "SLAVE"
    assert listing[("broker-a", 0)]["broker_role"] == "ASYNC_MASTER"
    replicas = listing[("broker-a", 0)]["replication"]["replicas"]
    assert [int(r["broker_id"]) for r in replicas] == [1]

    async with Producer(namesrv=ns.endpoint) as producer:
        first = [await producer.send("spread", b"before-%d" % i) for i in range(60)]
    assert {r.status for r in first} == {SendStatus.SEND_OK}
    on_a = sum(1 for r in first if r.offset_msg_id and _stored_by(r, brokers["a0"]))
    assert 0 < on_a < 60  # spread over both groups

    async def slave_caught_up() -> bool:
        async with PullConsumer(brokers["a1"].endpoint, "probe") as reader:
            total = 0
            for queue in await reader.queues("spread"):
                total += len((await reader.pull(queue, 0, max_messages=100)).messages)
            return total == on_a

    await _eventually(slave_caught_up)
    brokers["a0"].kill()  # kill -9: the session breaks, the NameServer drops it at once

    async with NameServerClient(ns.endpoint) as namesrv:

        async def read_only_through_the_slave() -> bool:
            route = await namesrv.query_route("spread")
            group, queues = route.groups.get("broker-a"), route.queues.get("broker-a")
            return (
                group is not None
                and set(group.addresses) == {1}
                and queues is not None
                and not queues.perm & 2
            )

        await _eventually(read_only_through_the_slave)
    async with Producer(namesrv=ns.endpoint) as producer:
        later = [await producer.send("spread", b"after-%d" % i) for i in range(40)]
    assert {r.status for r in later} == {SendStatus.SEND_OK}  # no failed send: broker-b took them

    bodies: list[bytes] = []
    async with PullConsumer(namesrv=ns.endpoint, group="everything") as consumer:
        queues = await consumer.queues("spread")
        assert {q.broker_name for q in queues} == {"broker-a", "broker-b"}
        for queue in queues:
            result = await consumer.pull(queue, 0, max_messages=200)
            bodies += [m.body for m in result.messages]
    assert sorted(bodies) == sorted(
        [b"before-%d" % i for i in range(60)] + [b"after-%d" % i for i in range(40)]
    )


def _stored_by(result: object, broker: BrokerProcess) -> bool:
    """Whether the offset message id names ``broker``'s store host (its gRPC port)."""
    port = int(broker.endpoint.rpartition(":")[2])
    return int(result.offset_msg_id[8:16], 16) == port  # type: ignore[attr-defined]


async def _eventually(check, within_s: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not await check():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)
