"""A consumer's side of group membership: Heartbeat, GetConsumerList, UnregisterClient.

Tracks the group's membership version (``consumer_list_versions`` in heartbeat replies,
``version`` in GetConsumerList) so the consumer rebalances as soon as a member joins or leaves.
"""

from __future__ import annotations

import logging

import grpc
from wharf.client.errors import from_rpc_error
from wharf.v1 import messaging_pb2, messaging_pb2_grpc

log = logging.getLogger(__name__)


class GroupMembership:
    def __init__(
        self,
        stub: messaging_pb2_grpc.MessagingServiceStub,
        client_id: str,
        consumer: messaging_pb2.ConsumerData,
    ) -> None:
        self._stub = stub
        self._client_id = client_id
        self._consumer = consumer
        self.version: int | None = None

    async def heartbeat(self) -> bool:
        """Register / stay registered. True when the membership changed since last seen."""
        try:
            reply = await self._stub.Heartbeat(
                messaging_pb2.HeartbeatRequest(
                    client_id=self._client_id, consumers=[self._consumer]
                ),
                timeout=5.0,
            )
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        version = reply.consumer_list_versions.get(self._consumer.group)
        changed = version is not None and self.version is not None and version != self.version
        if version is not None:
            self.version = version
        return changed

    async def members(self) -> list[str]:
        """The group's client ids (sorted by the broker)."""
        try:
            reply = await self._stub.GetConsumerList(
                messaging_pb2.GetConsumerListRequest(consumer_group=self._consumer.group),
                timeout=5.0,
            )
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        self.version = reply.version
        return list(reply.client_ids)

    async def leave(self) -> None:
        try:
            await self._stub.UnregisterClient(
                messaging_pb2.UnregisterClientRequest(
                    client_id=self._client_id, consumer_groups=[self._consumer.group]
                ),
                timeout=3.0,
            )
        except grpc.RpcError as exc:
            log.warning("unregister failed: %s", from_rpc_error(exc))
