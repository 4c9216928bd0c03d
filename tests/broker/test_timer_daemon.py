"""Delivery at any time through the daemon: the SDK's ``deliver_at`` / ``delay``, RocketMQ 5's
DELAY messages (``delivery_timestamp``) with RecallMessage, and kill -9 between the timer's write
and its delivery, and right after a delivery (delivered once, never twice)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from wharf.client import Admin, Producer, PullConsumer
from wharf.client.errors import InvalidArgumentError, NotFoundError
from wharf.rocketmq.v2 import definition_pb2 as d
from wharf.rocketmq.v2 import service_pb2 as s
from wharf.rocketmq.v2 import service_pb2_grpc

from tests.harness import BrokerProcess, Daemons

TOPIC = "Timed"
META = (("x-mq-client-id", "host@1@0@timer"),)


async def bodies(endpoint: str) -> list[bytes]:
    async with PullConsumer(endpoint, "timer-check") as puller:
        out: list[bytes] = []
        for queue in await puller.queues(TOPIC):
            result = await puller.pull(queue, 0, max_messages=100)
            out += [m.body for m in result.messages]
        return sorted(out)


async def eventually(endpoint: str, want: list[bytes], timeout_s: float = 8.0) -> float:
    started = time.monotonic()
    while (got := await bodies(endpoint)) != want:
        assert time.monotonic() - started < timeout_s, f"got {got}, want {want}"
        await asyncio.sleep(0.05)
    return time.monotonic() - started


@pytest.fixture
def broker(daemons: Daemons) -> BrokerProcess:
    return daemons.broker(settings={"defaultTopicQueueNums": 2})


async def _create(endpoint: str) -> None:
    async with Admin(endpoint) as admin:
        await admin.create_topic(TOPIC, queue_nums=2)


async def test_sdk_deliver_at_delay_and_recall(broker: BrokerProcess) -> None:
    await _create(broker.endpoint)
    async with Producer(broker.endpoint) as producer:
        await producer.send(TOPIC, b"in-1.5s", deliver_at=time.time() + 1.5)
        await producer.send(TOPIC, b"delay-1s", delay=1.0)
        recalled = await producer.send(TOPIC, b"recalled", delay=1.0)
        await producer.send(TOPIC, b"now")
        assert await producer.recall(TOPIC, recalled.recall_handle) == recalled.msg_id
        with pytest.raises(NotFoundError):  # once recalled (or delivered): nothing to cancel
            await producer.recall(TOPIC, recalled.recall_handle)
        with pytest.raises(InvalidArgumentError):
            await producer.recall(TOPIC, "not-a-handle")
    assert await bodies(broker.endpoint) == [b"now"]
    await eventually(broker.endpoint, [b"delay-1s", b"in-1.5s", b"now"])
    await asyncio.sleep(0.5)
    assert await bodies(broker.endpoint) == [b"delay-1s", b"in-1.5s", b"now"]


@pytest.mark.parametrize("when", ["before delivery", "after delivery"])
async def test_kill_9_neither_loses_nor_repeats_a_timer(
    daemons: Daemons, when: str, tmp_path: Path
) -> None:
    with daemons.broker(tmp_path / "b", settings={"flushDiskType": "SYNC_FLUSH"}) as broker:
        await _create(broker.endpoint)
        async with Producer(broker.endpoint) as producer:
            await producer.send(TOPIC, b"timed", delay=1.5)
        if when == "after delivery":
            await eventually(broker.endpoint, [b"timed"])
        broker.kill()
        broker.start()
        await eventually(broker.endpoint, [b"timed"])
        await asyncio.sleep(1.0)  # a second copy would have come by now
        assert await bodies(broker.endpoint) == [b"timed"]


async def test_v2_delay_message_recall_and_limits(broker: BrokerProcess) -> None:
    await _create(broker.endpoint)
    async with grpc.aio.insecure_channel(broker.endpoint) as channel:
        v2 = service_pb2_grpc.MessagingServiceStub(channel)

        async def send(body: str, seconds_ahead: float) -> s.SendMessageResponse:
            m = d.Message(body=body.encode())
            m.topic.name = TOPIC
            m.system_properties.message_id = f"id-{body}"
            m.system_properties.message_type = d.DELAY
            m.system_properties.body_encoding = d.IDENTITY
            at = time.time() + seconds_ahead
            m.system_properties.delivery_timestamp.CopyFrom(
                Timestamp(seconds=int(at), nanos=int(at % 1 * 1e9))
            )
            return await v2.SendMessage(s.SendMessageRequest(messages=[m]), metadata=META)

        kept = await send("kept", 1.5)
        recalled = await send("recalled", 1.5)
        assert kept.status.code == recalled.status.code == d.Code.OK
        handle = recalled.entries[0].recall_handle
        assert handle and kept.entries[0].recall_handle != handle

        def recall(h: str, topic: str = TOPIC) -> s.RecallMessageRequest:
            return s.RecallMessageRequest(topic=d.Resource(name=topic), recall_handle=h)

        wrong_topic = await v2.RecallMessage(recall(handle, "Other"), metadata=META)
        assert wrong_topic.status.code == d.Code.NOT_FOUND
        done = await v2.RecallMessage(recall(handle), metadata=META)
        assert (done.status.code, done.message_id) == (d.Code.OK, "id-recalled")
        again = await v2.RecallMessage(recall(handle), metadata=META)
        assert again.status.code == d.Code.NOT_FOUND
        forged = await v2.RecallMessage(recall("garbage"), metadata=META)
        assert forged.status.code == d.Code.BAD_REQUEST

        too_far = await send("too-far", 4 * 24 * 3600)
        assert too_far.status.code == d.Code.ILLEGAL_DELIVERY_TIME

        await eventually(broker.endpoint, [b"kept"])
        await asyncio.sleep(0.5)
        assert await bodies(broker.endpoint) == [b"kept"]  # the recalled one never comes
