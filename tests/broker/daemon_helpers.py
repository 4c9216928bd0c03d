"""Helpers for tests against the real daemon (tests.harness.BrokerProcess + generated stubs)."""

from __future__ import annotations

from typing import Any

import grpc
from wharf.client import PullConsumer
from wharf.client.route import MessageQueue
from wharf.v1 import admin_pb2_grpc, common_pb2, messaging_pb2, messaging_pb2_grpc

# Delay levels of 1 s: a failed message comes back after level 3 + reconsume times, 1 s here
# instead of RocketMQ's 10 s (tests wait for retries), and level 1 keeps its 1 s.
FAST_RETRIES = "1s 1s 1s 1s 1s 1s"

# Small files so segments roll and tests stay light; short delay levels so retries run fast.
SMALL_STORE = {
    "mappedFileSizeCommitLog": 256 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 1000,
    "maxHashSlotNum": 1000,
    "maxIndexNum": 4000,
    "maxMessageSize": 64 * 1024,
    "messageDelayLevel": FAST_RETRIES,
}


class Client:
    def __init__(self, endpoint: str) -> None:
        self.channel = grpc.insecure_channel(endpoint)
        self.msg = messaging_pb2_grpc.MessagingServiceStub(self.channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def send(
        self, topic: str, *bodies: bytes, queue_id: int | None = 0, **fields: Any
    ) -> messaging_pb2.SendMessageResponse:
        messages = [common_pb2.Message(body=b, **fields) for b in bodies]
        request = messaging_pb2.SendMessageRequest(topic=topic, messages=messages)
        if queue_id is not None:
            request.queue_id = queue_id
        return self.msg.SendMessage(request, timeout=10)

    def pull(
        self, topic: str, offset: int = 0, group: str = "g", queue_id: int = 0, **fields: Any
    ) -> messaging_pb2.PullMessageResponse:
        request = messaging_pb2.PullMessageRequest(
            consumer_group=group, topic=topic, queue_id=queue_id, queue_offset=offset, **fields
        )
        return self.msg.PullMessage(request, timeout=30)


async def pull_bodies(endpoint: str, topic: str, group: str, count: int) -> list[bytes]:
    """Queue 0's bodies from its first offset until at least ``count`` (all the last pull
    gave: a caller that wrote more trims), through the SDK's pulls; fails on an empty one."""
    async with PullConsumer(endpoint, group) as consumer:
        bodies: list[bytes] = []
        while len(bodies) < count:
            result = await consumer.pull(MessageQueue(topic, 0), len(bodies), max_wait_ms=3000)
            assert result.messages, f"nothing at {len(bodies)}"
            bodies += [m.body for m in result.messages]
        return bodies
