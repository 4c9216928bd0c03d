"""SQL92 subscriptions over apache.rocketmq.v2, through a real BrokerController and store: a
ReceiveMessage (pop) and an offset PullMessage with a SQL92 FilterExpression deliver exactly
the messages whose properties (tag included, as ``TAGS``) pass; a malformed expression is
ILLEGAL_FILTER_EXPRESSION with where it is wrong; with ``enablePropertyFilter`` off, SQL92 is
refused."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from wharf.broker.controller import BrokerController
from wharf.rocketmq.v2 import definition_pb2 as d
from wharf.rocketmq.v2 import service_pb2 as s
from wharf.rocketmq.v2 import service_pb2_grpc
from wharf.v1 import admin_pb2, admin_pb2_grpc

from tests.broker.v2.test_consume import META, _duration
from tests.inproc import InProcFactory

TOPIC = "sql-orders"


async def _broker(
    inproc_broker: InProcFactory, property_filter: bool
) -> tuple[BrokerController, grpc.aio.Channel]:
    started = await inproc_broker(enable_property_filter="true" if property_filter else "false")
    controller, channel = started.controller, started.channel
    admin = admin_pb2_grpc.AdminServiceStub(channel)
    await admin.CreateTopic(
        admin_pb2.CreateTopicRequest(name=TOPIC, read_queue_nums=1, write_queue_nums=1)
    )
    return controller, channel


@pytest.fixture
async def v2(
    inproc_broker: InProcFactory,
) -> tuple[BrokerController, service_pb2_grpc.MessagingServiceStub]:
    controller, channel = await _broker(inproc_broker, True)
    return controller, service_pb2_grpc.MessagingServiceStub(channel)


async def _send(stub: service_pb2_grpc.MessagingServiceStub, i: int, tag: str, region: str) -> None:
    m = d.Message(body=f"m{i}".encode())
    m.topic.name = TOPIC
    m.system_properties.message_id = f"sql-{i}"
    m.system_properties.tag = tag
    m.system_properties.body_encoding = d.IDENTITY
    m.system_properties.message_type = d.NORMAL
    m.user_properties["amount"] = str(i * 10)
    m.user_properties["region"] = region
    reply = await stub.SendMessage(s.SendMessageRequest(messages=[m]), metadata=META)
    assert reply.status.code == d.Code.OK, reply.status


EXPRESSION = "amount >= 30 AND region IN ('eu', 'us') AND TAGS <> 'skip'"


def _expected() -> list[str]:
    return [f"m{i}" for i in range(10) if i * 10 >= 30 and i % 3 != 2 and i != 7]


async def _fill(controller: BrokerController, stub: service_pb2_grpc.MessagingServiceStub) -> None:
    for i in range(10):
        region = ("eu", "us", "ap")[i % 3]
        await _send(stub, i, "skip" if i == 7 else "t", region)
    assert await controller.store.wait_dispatched()


async def test_receive_and_pull_deliver_only_what_the_sql92_expression_passes(
    v2: tuple[BrokerController, service_pb2_grpc.MessagingServiceStub],
) -> None:
    controller, stub = v2
    await _fill(controller, stub)
    sql = d.FilterExpression(type=d.SQL, expression=EXPRESSION)
    received: list[str] = []
    for _ in range(5):
        request = s.ReceiveMessageRequest(
            group=d.Resource(name="sql-g"),
            message_queue=d.MessageQueue(topic=d.Resource(name=TOPIC)),
            filter_expression=sql,
            batch_size=32,
            invisible_duration=_duration(30),
            long_polling_timeout=_duration(0.2),
        )
        replies = [r async for r in stub.ReceiveMessage(request, metadata=META, timeout=10)]
        received += [r.message.body.decode() for r in replies if r.HasField("message")]
        if replies[0].status.code == d.Code.MESSAGE_NOT_FOUND:
            break
    assert sorted(received, key=lambda b: int(b[1:])) == _expected()

    pull = s.PullMessageRequest(
        group=d.Resource(name="sql-pull"),
        message_queue=d.MessageQueue(topic=d.Resource(name=TOPIC), id=0),
        offset=0,
        batch_size=32,
        filter_expression=sql,
        long_polling_timeout=_duration(0),
    )
    replies = [r async for r in stub.PullMessage(pull, metadata=META, timeout=10)]
    assert [r.message.body.decode() for r in replies if r.HasField("message")] == _expected()


async def test_a_malformed_sql92_expression_is_an_illegal_filter_expression(
    v2: tuple[BrokerController, service_pb2_grpc.MessagingServiceStub],
) -> None:
    _, stub = v2
    request = s.ReceiveMessageRequest(
        group=d.Resource(name="sql-g"),
        message_queue=d.MessageQueue(topic=d.Resource(name=TOPIC)),
        filter_expression=d.FilterExpression(type=d.SQL, expression="amount >> 3"),
        batch_size=1,
        invisible_duration=_duration(30),
        long_polling_timeout=_duration(0),
    )
    replies = [r async for r in stub.ReceiveMessage(request, metadata=META, timeout=10)]
    assert replies[0].status.code == d.Code.ILLEGAL_FILTER_EXPRESSION
    assert "amount >> 3" in replies[0].status.message


async def test_with_the_property_filter_off_sql92_is_refused(
    inproc_broker: InProcFactory, tmp_path: Path
) -> None:
    controller, channel = await _broker(inproc_broker, False)
    stub = service_pb2_grpc.MessagingServiceStub(channel)
    await _fill(controller, stub)
    request = s.ReceiveMessageRequest(
        group=d.Resource(name="sql-g"),
        message_queue=d.MessageQueue(topic=d.Resource(name=TOPIC)),
        filter_expression=d.FilterExpression(type=d.SQL, expression=EXPRESSION),
        batch_size=1,
        invisible_duration=_duration(30),
        long_polling_timeout=_duration(0),
    )
    replies = [r async for r in stub.ReceiveMessage(request, metadata=META, timeout=10)]
    assert replies[0].status.code == d.Code.ILLEGAL_FILTER_EXPRESSION
    assert "enablePropertyFilter" in replies[0].status.message
