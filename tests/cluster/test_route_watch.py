"""Clients follow the NameServers' pushed route changes (WatchRoutes) instead of polling: a
topic created on a second group reaches a running producer (route cache 30 s) and a running
PushConsumer (poll 5 s) within about a second, also after the NameServer they watched died."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest
from wharf.client import ConsumeResult, Producer, PushConsumer, ReceivedMessage

from tests.cluster.test_namesrv import cli, route, wait_for

pytestmark = pytest.mark.slow
PUSHED_WITHIN_S = 1.5  # the change's registration (~50 ms) + the push + a send or reconcile
REOPEN_S = 2.5  # a watch on a dead NameServer: the break, 1 s retry pause, the next one


async def _until(check: Callable[[], Awaitable[bool]], within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while not await check():
        assert time.monotonic() < deadline, f"not within {within_s:.2f} s"
        await asyncio.sleep(0.02)


async def _handle(msg: ReceivedMessage) -> ConsumeResult:
    return ConsumeResult.SUCCESS


async def _a_second_group_reaches_clients(
    names, brokers, topic: str, kill_a_name_server: bool
) -> float:  # type: ignore[no-untyped-def]
    ns = ";".join(n.endpoint for n in names)
    cli(ns, "topic", "create", topic, "--broker", "broker-a", "--queues", "1")
    for n in names:
        wait_for(lambda n=n: route(n.endpoint, topic) == {"broker-a": 1}, 5, "on broker-a")
    consumer = PushConsumer(namesrv=ns, group=f"g-{topic}", handler=_handle)
    consumer.subscribe(topic)
    cluster = consumer._cluster
    assert cluster is not None
    stores: set[str] = set()

    async def producer_on_b() -> bool:
        stores.add((await producer.send(topic, b"after")).offset_msg_id[:16])
        return len(stores) == 2

    async def consumer_on_b() -> bool:
        return brokers["broker-b"].endpoint in cluster.consumers

    async with Producer(namesrv=ns) as producer:
        await consumer.start()
        try:
            for _ in range(4):  # the route is cached: every send on broker-a
                stores.add((await producer.send(topic, b"before")).offset_msg_id[:16])
            assert len(stores) == 1
            assert list(cluster.consumers) == [brokers["broker-a"].endpoint]
            if kill_a_name_server:  # maybe the watched one: the watch moves over
                names[0].kill()
                await asyncio.sleep(0.2)
            await asyncio.to_thread(
                cli, ns, "topic", "create", topic, "--broker", "broker-b", "--queues", "1"
            )
            created = time.monotonic()
            limit = PUSHED_WITHIN_S + (REOPEN_S if kill_a_name_server else 0)
            await _until(producer_on_b, limit)
            await _until(consumer_on_b, limit - (time.monotonic() - created))
            return time.monotonic() - created
        finally:
            await consumer.close()


async def test_a_new_group_reaches_running_clients_within_a_second(cluster) -> None:  # type: ignore[no-untyped-def]
    names, brokers = cluster
    ns = ";".join(n.endpoint for n in names)
    wait_for(lambda: len(cli(ns, "cluster", "list")) == 2, 10, "both brokers registered")
    took = await _a_second_group_reaches_clients(names, brokers, "grow", False)
    print(f"both clients on broker-b {took:.2f} s after the create")
    took = await _a_second_group_reaches_clients(names, brokers, "grow-again", True)
    print(f"with a NameServer killed: {took:.2f} s")
