"""Consumer offsets of queues another broker group holds, kept where RocketMQ keeps them: in
that group's master's offset table, through its ``wharf.v1.MessagingService``
(UpdateConsumerOffset / QueryConsumerOffset, one call per queue, ``CALL_TIMEOUT_S`` each).
The Kafka group coordinator commits and fetches a group's offsets of every partition this
way, so each group's table holds the offsets of its own queues (``wharf group progress`` and
the lag metric are right on every broker) and a coordinator that moves loses nothing.

Calls go over the NameServer dialer (``links.namesrv_dialer_blocking``: TLS with
namesrvTlsEnable, signed with namesrvAccessKey / namesrvSecretKey under the brokers' ACL).
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
from wharf.v1 import messaging_pb2, messaging_pb2_grpc

__all__ = ["PeerOffsetError", "PeerOffsets"]

CALL_TIMEOUT_S = 2.0


class PeerOffsetError(Exception):
    """The master did not take or answer the call (its gRPC status name in the message)."""


class PeerOffsets:
    def __init__(self, open_channel: Callable[[str], grpc.aio.Channel]) -> None:
        self._open_channel = open_channel
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _stub(self, address: str) -> messaging_pb2_grpc.MessagingServiceStub:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = self._open_channel(address)
        return messaging_pb2_grpc.MessagingServiceStub(channel)

    async def commit(self, address: str, group: str, topic: str, queue: int, offset: int) -> None:
        """Store ``offset`` at the master ``address``; PeerOffsetError when it cannot."""
        request = messaging_pb2.UpdateConsumerOffsetRequest(
            consumer_group=group, topic=topic, queue_id=queue, offset=offset
        )
        try:
            await self._stub(address).UpdateConsumerOffset(request, timeout=CALL_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            raise PeerOffsetError(f"{exc.code().name}: {exc.details()}") from None

    async def query(self, address: str, group: str, topic: str, queue: int) -> int:
        """The committed offset at the master ``address`` (-1: none); PeerOffsetError."""
        request = messaging_pb2.QueryConsumerOffsetRequest(
            consumer_group=group, topic=topic, queue_id=queue
        )
        try:
            reply = await self._stub(address).QueryConsumerOffset(request, timeout=CALL_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            raise PeerOffsetError(f"{exc.code().name}: {exc.details()}") from None
        return int(reply.offset)

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close(None)
        self._channels.clear()
