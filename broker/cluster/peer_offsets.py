"""Consumer offsets of queues another broker group holds, kept where RocketMQ keeps them: in
that group's master's offset table, through its ``wharf.v1.MessagingService``
(UpdateConsumerOffset / QueryConsumerOffset, one call per queue, ``CALL_TIMEOUT_S`` each).
The Kafka group coordinator commits and fetches a group's offsets of every partition this
way, so each group's table holds the offsets of its own queues (``wharf group progress`` and
the lag metric are right on every broker) and a coordinator that moves loses nothing.

``commit`` sends the durable form (``durable`` set, the default): that master answers once the
offset is in its offsets file (fsynced under SYNC_FLUSH) and, under SYNC_MASTER, on its in-sync
replicas, and a replica or a master whose lease ran out refuses it (FAILED_PRECONDITION,
UNAVAILABLE: ``PeerOffsetError.code``), so a Kafka commit of another group's partition is
acknowledged on the same terms as one of the coordinator's own. The plain form answers once
in memory: a kill -9 of that master within flushConsumerOffsetInterval (5 s) takes an
acknowledged commit back, and a replica, or a master stepping down, takes one it would lose.
The wait is bounded by ``DURABLE_TIMEOUT_S`` (slaveTimeout, 3 s by default, plus the write).
A broker older than the field ignores it and answers as before (in memory).

Calls go over the NameServer dialer (``links.namesrv_dialer_blocking``: TLS with
namesrvTlsEnable, signed with namesrvAccessKey / namesrvSecretKey under the brokers' ACL).
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
from wharf.v1 import messaging_pb2, messaging_pb2_grpc

__all__ = ["PeerOffsetError", "PeerOffsets"]

CALL_TIMEOUT_S = 2.0
# A durable commit waits for the file and, under SYNC_MASTER, up to slaveTimeout (3 s by
# default) for the replicas: 5 s keeps it under librdkafka's 30 s request timeout.
DURABLE_TIMEOUT_S = 5.0


class PeerOffsetError(Exception):
    """The master did not take or answer the call (its gRPC status name in the message and in
    ``code``: FAILED_PRECONDITION no master, UNAVAILABLE not durable or unreachable,
    DEADLINE_EXCEEDED no answer in time)."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class PeerOffsets:
    def __init__(self, open_channel: Callable[[str], grpc.aio.Channel]) -> None:
        self._open_channel = open_channel
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _stub(self, address: str) -> messaging_pb2_grpc.MessagingServiceStub:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = self._open_channel(address)
        return messaging_pb2_grpc.MessagingServiceStub(channel)

    async def commit(
        self, address: str, group: str, topic: str, queue: int, offset: int, durable: bool = True
    ) -> None:
        """Store ``offset`` at the master ``address`` (durable: in its file and on its
        in-sync replicas when this returns); PeerOffsetError when it cannot."""
        request = messaging_pb2.UpdateConsumerOffsetRequest(
            consumer_group=group, topic=topic, queue_id=queue, offset=offset, durable=durable
        )
        timeout = DURABLE_TIMEOUT_S if durable else CALL_TIMEOUT_S
        try:
            await self._stub(address).UpdateConsumerOffset(request, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            raise PeerOffsetError(f"{exc.code().name}: {exc.details()}", exc.code().name) from None

    async def query(self, address: str, group: str, topic: str, queue: int) -> int:
        """The committed offset at the master ``address`` (-1: none); PeerOffsetError."""
        request = messaging_pb2.QueryConsumerOffsetRequest(
            consumer_group=group, topic=topic, queue_id=queue
        )
        try:
            reply = await self._stub(address).QueryConsumerOffset(request, timeout=CALL_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            raise PeerOffsetError(f"{exc.code().name}: {exc.details()}", exc.code().name) from None
        return int(reply.offset)

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close(None)
        self._channels.clear()
