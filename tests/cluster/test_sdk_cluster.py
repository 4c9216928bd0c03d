"""Wharf's SDK over a cluster of two broker groups (``namesrv=``): sends spread over both
groups, a group of three PushConsumers consumes everything exactly once across both, ordered
sends keep their (broker, queue), and a producer keeps sending with no failed send() while one
group's broker is killed with SIGKILL."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import pytest
from wharf.client import ConsumeResult, Producer, PushConsumer, ReceivedMessage
from wharf.client.selector import SelectMessageQueueByHash

from tests.cluster.test_namesrv import cli, route, wait_for
from tests.cluster.test_official_client_cluster import stored

pytestmark = pytest.mark.slow
FAST: dict[str, Any] = dict(
    rebalance_interval_s=0.5, heartbeat_interval_s=0.3, long_poll_ms=500, commit_interval_s=0.2
)


def make_topic(names, topic: str) -> str:  # type: ignore[no-untyped-def]
    ns = ";".join(n.endpoint for n in names)
    wait_for(lambda: len(cli(ns, "cluster", "list")) == 2, 10, "both brokers registered")
    cli(ns, "topic", "create", topic, "--cluster", "C", "--queues", "2")
    for n in names:
        wait_for(lambda n=n: route(n.endpoint, topic) == {"broker-a": 2, "broker-b": 2}, 5, topic)
    return ns


async def test_sends_spread_and_a_group_of_three_consumes_each_message_once(cluster) -> None:  # type: ignore[no-untyped-def]
    names, brokers = cluster
    ns = make_topic(names, "orders")
    seen: collections.Counter[bytes] = collections.Counter()

    async def handle(msg: ReceivedMessage) -> ConsumeResult:
        seen[msg.body] += 1
        return ConsumeResult.SUCCESS

    members = [
        PushConsumer(
            namesrv=ns, group="billing", handler=handle, consume_from_where="FIRST", **FAST
        )
        for _ in range(3)
    ]
    for member in members:
        member.subscribe("orders")
        await member.start()
    try:
        # Settled: the 4 (broker, queue) pairs of the topic have one owner each.
        for _ in range(100):
            owned = [q for m in members for q in m.assigned_queues if q.topic == "orders"]
            if len(owned) == 4 and len(set(owned)) == 4:
                break
            await asyncio.sleep(0.1)
        assert len({q.broker_name for q in owned}) == 2 and len(set(owned)) == len(owned) == 4

        bodies = [f"order-{i}".encode() for i in range(200)]
        async with Producer(namesrv=ns) as producer:
            results = await asyncio.gather(*(producer.send("orders", b) for b in bodies))
            ordered = [
                await producer.send("orders", f"o-{i}".encode(), selector=SelectMessageQueueByHash(),
                                    selector_arg="customer-7")
                for i in range(5)
            ]  # fmt: skip
        assert all(r.status.name == "SEND_OK" for r in results)
        on_a = stored(brokers["broker-a"].endpoint, "orders")
        on_b = stored(brokers["broker-b"].endpoint, "orders")
        assert len(on_a) + len(on_b) == 205 and min(len(on_a), len(on_b)) >= 50  # spread
        ordered_on = next(b for b in (on_a, on_b) if b"o-0" in b)
        assert all(f"o-{i}".encode() in ordered_on for i in range(5))  # one group
        assert len({r.queue_id for r in ordered}) == 1  # and one queue

        for _ in range(200):
            if sum(seen.values()) >= 205:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # nothing more may come
        assert sorted(seen) == sorted([*bodies, *(f"o-{i}".encode() for i in range(5))])
        assert set(seen.values()) == {1}  # each message once in the group
    finally:
        for member in members:
            await member.close()


async def test_sends_go_on_without_a_failure_when_a_broker_is_killed(cluster) -> None:  # type: ignore[no-untyped-def]
    names, brokers = cluster
    ns = make_topic(names, "payments")
    sent: list[str] = []
    async with Producer(namesrv=ns, send_timeout=5.0) as producer:
        for i in range(300):
            if i == 100:
                brokers["broker-b"].kill()
            result = await producer.send("payments", f"p-{i}".encode())  # never raises
            sent.append(result.msg_id)
            await asyncio.sleep(0.002)
    on_a = stored(brokers["broker-a"].endpoint, "payments")
    assert len(sent) == 300
    assert {f"p-{i}".encode() for i in range(100, 300)} <= set(on_a)  # all after the kill on a
