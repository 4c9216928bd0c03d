"""A topic's queues across every broker group of the cluster, as the NameServers know them:
what this broker answers a RocketMQ 5 client's QueryRoute / QueryAssignment with, so one
access point is enough for the official clients to spread over the cluster (RocketMQ 5's
proxy does the same lookup), and what Kafka Metadata lists as a topic's partitions.

``groups(topic)`` asks the NameServers of ``namesrvAddr`` in turn (1 s each); None when none
answers (the caller falls back to this broker's own queues, logged once per outage), [] when
no live master holds the topic. ``members()`` lists every live broker (GetClusterInfo), None
when no NameServer answers. ``offsets`` reaches other groups' consumer offsets
(``peer_offsets.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from wharf.broker.cluster.peer_offsets import PeerOffsets
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
    kafka_address: str = ""  # the master's advertised Kafka address ("": none)


@dataclass(frozen=True, slots=True)
class Member:
    """A live broker as the NameServers list it."""

    cluster: str
    broker_name: str
    broker_id: int
    address: str
    kafka_address: str  # "": no Kafka listener


class ClusterRoutes:
    def __init__(
        self,
        namesrv_addresses: list[str],
        open_channel: Callable[[str], grpc.aio.Channel] = grpc.aio.insecure_channel,
    ) -> None:
        self._open_channel = open_channel
        self._addresses = namesrv_addresses
        self.offsets = PeerOffsets(open_channel)  # other groups' consumer offsets
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._failing = False

    async def groups(self, topic: str) -> list[GroupQueues] | None:
        request = namesrv_pb2.QueryTopicRouteRequest(topic=topic)
        try:
            reply = await self._ask("QueryRoute", request)
        except LookupError:
            return []
        if reply is None:
            return None
        masters = {b.broker_name: b for b in reply.brokers if b.addresses.get(0)}
        return [
            GroupQueues(q.broker_name, masters[q.broker_name].addresses[0], q.read_queue_nums,
                        q.write_queue_nums, q.perm,
                        masters[q.broker_name].kafka_addresses.get(0, ""))
            for q in reply.queues
            if q.broker_name in masters
        ]  # fmt: skip

    async def members(self) -> list[Member] | None:
        reply = await self._ask("GetClusterInfo", namesrv_pb2.GetClusterInfoRequest())
        if reply is None:
            return None
        return [
            Member(b.cluster, b.broker_name, b.broker_id, b.address, b.kafka_address)
            for b in reply.brokers
        ]

    async def _ask(self, method: str, request: object) -> Any:
        """The first NameServer's answer; None when none answers, LookupError on NOT_FOUND."""
        for address in self._addresses:
            channel = self._channels.get(address)
            if channel is None:
                channel = self._channels[address] = self._open_channel(address)
            call = getattr(namesrv_pb2_grpc.NameServiceStub(channel), method)
            try:
                reply = await call(request, timeout=CALL_TIMEOUT_S)
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND:
                    raise LookupError(method) from None
                continue
            if self._failing:
                log.info("NameServers answer routes again")
                self._failing = False
            return reply
        if not self._failing:
            log.warning("no NameServer answers; routes list this broker's queues only")
            self._failing = True
        return None

    async def close(self) -> None:
        await self.offsets.close()
        for channel in self._channels.values():
            await channel.close(None)
        self._channels.clear()
