"""Clients follow the NameServers' pushed route changes (WatchRoutes) instead of polling: a
topic created on a second group reaches a running producer (route cache 30 s) and a running
PushConsumer (poll 5 s) within about a second, also after the NameServer they watched died."""

from __future__ import annotations

import asyncio
import time

import pytest
from wharf.client import ConsumeResult, Producer, PushConsumer, ReceivedMessage

from tests.cluster.test_namesrv import cli, route, wait_for

pytestmark = pytest.mark.slow
PUSHED_WITHIN_S = 1.5  # the change's registration (~50 ms) + the push + a send or reconcile


async def _until(check, timeout: float) -> float:  # type: ignore[no-untyped-def]
    start = time.monotonic()
    while not await check():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout} s")
        await asyncio.sleep(0.02)
    return time.monotonic() - start


async def test_a_new_group_reaches_running_clients_within_a_second(cluster) -> None:  # type: ignore[no-untyped-def]
    names, brokers = cluster
    ns = ";".join(n.endpoint for n in names)
    wait_for(lambda: len(cli(ns, "cluster", "list")) == 2, 10, "both brokers registered")
    b_address = brokers["broker-b"].endpoint

    async def handle(msg: ReceivedMessage) -> ConsumeResult:
        return ConsumeResult.SUCCESS

    for round_, topic in enumerate(("grow", "grow-again")):
        cli(ns, "topic", "create", topic, "--broker", "broker-a", "--queues", "1")
        for n in names:
            wait_for(lambda n=n, t=topic: route(n.endpoint, t) == {"broker-a": 1}, 5, "on a")
        consumer = PushConsumer(namesrv=ns, group=f"g-{topic}", handler=handle)
        consumer.subscribe(topic)
        async with Producer(namesrv=ns) as producer:
            await consumer.start()
            try:
                first = await producer.send(topic, b"before")
                assert (
                    first.offset_msg_id[:16]
                    == (await producer.send(topic, b"x")).offset_msg_id[:16]
                )
                assert list(consumer._cluster.consumers) == [brokers["broker-a"].endpoint]  # type: ignore[union-attr]
                if round_ == 1:  # the watched NameServer may be this one: the watch moves over
                    names[0].kill()
                    await asyncio.sleep(0.2)
                await asyncio.to_thread(
                    cli, ns, "topic", "create", topic, "--broker", "broker-b", "--queues", "1"
                )
                created = time.monotonic()

                async def consumer_on_b() -> bool:
                    return b_address in consumer._cluster.consumers  # type: ignore[union-attr]

                stores: set[str] = set()

                async def producer_on_b() -> bool:
                    result = await producer.send(topic, b"after")
                    stores.add(result.offset_msg_id[:16])
                    return len(stores) == 2

                limit = PUSHED_WITHIN_S + (2.5 if round_ == 1 else 0)  # + the watch's reopening
                await _until(producer_on_b, limit - (time.monotonic() - created))
                await _until(consumer_on_b, limit - (time.monotonic() - created))
                took = time.monotonic() - created
                print(f"round {round_}: both clients on broker-b {took:.2f} s after the create")
            finally:
                await consumer.close()
