"""Topic route cache (QueryRoute), refreshed after ``ttl_s`` like RocketMQ's 30 s route poll."""

from __future__ import annotations

import time
from dataclasses import dataclass

import grpc
from wharf.client.errors import from_rpc_error
from wharf.client.message import MessageQueue
from wharf.v1 import messaging_pb2, messaging_pb2_grpc

# A topic that does not exist yet is auto-created by the broker with defaultTopicQueueNums.
DEFAULT_QUEUE_NUMS = 8


@dataclass(frozen=True, slots=True)
class TopicRoute:
    topic: str
    exists: bool
    read_queue_nums: int
    write_queue_nums: int
    perm: int

    def write_queues(self) -> list[MessageQueue]:
        count = self.write_queue_nums or DEFAULT_QUEUE_NUMS
        return [MessageQueue(self.topic, q) for q in range(count)]

    def read_queues(self) -> list[MessageQueue]:
        return [MessageQueue(self.topic, q) for q in range(self.read_queue_nums)]


class RouteCache:
    def __init__(self, stub: messaging_pb2_grpc.MessagingServiceStub, ttl_s: float = 30.0) -> None:
        self._stub = stub
        self._ttl_s = ttl_s
        self._routes: dict[str, tuple[float, TopicRoute]] = {}

    async def get(
        self, topic: str, *, rpc_timeout_s: float = 5.0, refresh: bool = False
    ) -> TopicRoute:
        cached = self._routes.get(topic)
        now = time.monotonic()
        if cached is not None and not refresh and now - cached[0] < self._ttl_s:
            return cached[1]
        try:
            reply = await self._stub.QueryRoute(
                messaging_pb2.QueryRouteRequest(topic=topic), timeout=rpc_timeout_s
            )
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        route = TopicRoute(
            topic, reply.exists, reply.read_queue_nums, reply.write_queue_nums, reply.perm
        )
        self._routes[topic] = (now, route)
        return route
