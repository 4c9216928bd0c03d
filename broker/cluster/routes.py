"""A topic's queues across every broker group of the cluster, as the NameServers know them:
what this broker answers a RocketMQ 5 client's QueryRoute / QueryAssignment with, so one
access point is enough for the official clients to spread over the cluster (RocketMQ 5's
proxy does the same lookup).

``groups(topic)`` asks the NameServers of ``namesrvAddr`` in turn (1 s each); None when none
answers (the caller falls back to this broker's own queues, logged once per outage), [] when
no live master holds the topic.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import grpc
from wharf.v1 import namesrv_pb2, namesrv_pb2_grpc

log = logging.getLogger("wharf.broker.cluster.routes")
CALL_TIMEOUT_S = 1.0


@dataclass(frozen=True, slots=True)
class GroupQueues:
    broker_name: str
    address: str  # the group's master
    read_queue_nums: int
    write_queue_nums: int
    perm: int


class ClusterRoutes:
    def __init__(
        self,
        namesrv_addresses: list[str],
        open_channel: Callable[[str], grpc.aio.Channel] = grpc.aio.insecure_channel,
    ) -> None:
        self._open_channel = open_channel
        self._addresses = namesrv_addresses
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._failing = False

    async def groups(self, topic: str) -> list[GroupQueues] | None:
        request = namesrv_pb2.QueryTopicRouteRequest(topic=topic)
        for address in self._addresses:
            channel = self._channels.get(address)
            if channel is None:
                channel = self._channels[address] = self._open_channel(address)
            try:
                reply = await namesrv_pb2_grpc.NameServiceStub(channel).QueryRoute(
                    request, timeout=CALL_TIMEOUT_S
                )
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND:
                    return []
                continue
            if self._failing:
                log.info("NameServers answer routes again")
                self._failing = False
            masters = {b.broker_name: b.addresses.get(0, "") for b in reply.brokers}
            return [
                GroupQueues(q.broker_name, masters[q.broker_name], q.read_queue_nums,
                            q.write_queue_nums, q.perm)
                for q in reply.queues
                if masters.get(q.broker_name)
            ]  # fmt: skip
        if not self._failing:
            log.warning("no NameServer answers; RocketMQ 5 routes list this broker's queues only")
            self._failing = True
        return None

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close(None)
        self._channels.clear()
