"""SQL92 subscriptions through the SDK and the daemon (wharf.v1, gRPC and the wire port): a pull
and a push consumer get exactly the messages whose properties pass the expression, the broker
filtering raw records before they leave; a malformed expression is InvalidArgumentError saying
where it is wrong."""

from __future__ import annotations

import asyncio

import pytest
from wharf.client import Admin, ConsumeResult, Producer, PullConsumer, PushConsumer, ReceivedMessage
from wharf.client.errors import InvalidArgumentError
from wharf.client.message import MessageQueue

from tests.harness import BrokerProcess

EXPRESSION = "amount BETWEEN 20 AND 60 AND (region = 'eu' OR TAGS = 'vip')"


def _wanted(i: int) -> bool:
    return 20 <= i * 10 <= 60 and (i % 2 == 0 or i % 3 == 0)


async def _fill(endpoint: str, topic: str) -> list[bytes]:
    async with Admin(endpoint) as admin:
        await admin.create_topic(topic, queue_nums=1)
    async with Producer(endpoint) as producer:
        for i in range(10):
            await producer.send(
                topic,
                f"m{i}".encode(),
                tags="vip" if i % 3 == 0 else "plain",
                properties={"amount": str(i * 10), "region": "eu" if i % 2 == 0 else "ap"},
            )
    return [f"m{i}".encode() for i in range(10) if _wanted(i)]


@pytest.mark.parametrize("wire", [False, True])
async def test_a_pull_with_a_sql92_expression_gets_only_what_passes(
    broker: BrokerProcess, name: str, wire: bool
) -> None:
    expected = await _fill(broker.endpoint, name)
    endpoint = broker.wire_endpoint if wire else broker.endpoint
    async with PullConsumer(endpoint, f"{name}-g") as consumer:
        got: list[bytes] = []
        offset = 0
        for _ in range(20):
            result = await consumer.pull(
                MessageQueue(name, 0), offset, max_messages=4, sql_expression=EXPRESSION
            )
            got += [m.body for m in result.messages]
            if result.next_begin_offset >= 10:
                break
            offset = result.next_begin_offset
        assert got == expected
        with pytest.raises(InvalidArgumentError, match="SQL92"):
            await consumer.pull(MessageQueue(name, 0), 0, sql_expression="amount >")


async def test_a_push_consumer_subscribed_by_sql92_gets_only_what_passes(
    broker: BrokerProcess, name: str
) -> None:
    expected = await _fill(broker.endpoint, name)
    seen: list[bytes] = []

    async def handle(msg: ReceivedMessage) -> ConsumeResult:
        seen.append(msg.body)
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(
        broker.endpoint, f"{name}-push", handler=handle, consume_from_where="FIRST"
    )
    consumer.subscribe(name, sql=EXPRESSION)
    async with consumer:
        for _ in range(200):
            if len(seen) >= len(expected):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # nothing else arrives
    assert sorted(seen) == sorted(expected)
