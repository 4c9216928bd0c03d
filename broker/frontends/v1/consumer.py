"""Consumer processor: heartbeats and membership, committed offsets, and SendMessageBack (the
core's retry: ``broker/core/retry.py``).

UpdateConsumerOffset has two forms. Plain (the RocketMQ clients'): answered once the offset is
in memory, the file written every flushConsumerOffsetInterval, taken by a replica too.
``durable`` (what a Kafka coordinator sets when it forwards an OffsetCommit of a partition
this broker group holds, ``broker/cluster/peer_offsets.py``): refused unless this broker is its
group's master with its lease (FAILED_PRECONDITION on a replica, UNAVAILABLE fenced), and
answered once the offset is in the file (fsynced under SYNC_FLUSH) and, under SYNC_MASTER,
applied by the in-sync replicas (UNAVAILABLE when not within slaveTimeout or when the write
failed); the same port calls the Kafka front end's own commits wait for."""

from __future__ import annotations

from wharf.broker.core.clients import ConsumeFrom, MessageModel
from wharf.broker.core.tags import filter_of
from wharf.broker.errors import InvalidArgumentError
from wharf.broker.frontends.frontend_kit import FrontEndKit
from wharf.broker.kit.acl.caller import caller
from wharf.broker.meta.groups import validate_group_name
from wharf.broker.meta.topics import validate_topic_name
from wharf.v1 import common_pb2, messaging_pb2

MAX_CLIENT_ID_LENGTH = 255
# wharf.v1's enums -> the client registry's neutral values (UNSPECIFIED: the defaults).
_MESSAGE_MODELS = {common_pb2.BROADCASTING: MessageModel.BROADCASTING}
_CONSUME_FROM = {
    common_pb2.CONSUME_FROM_FIRST_OFFSET: ConsumeFrom.FIRST_OFFSET,
    common_pb2.CONSUME_FROM_TIMESTAMP: ConsumeFrom.TIMESTAMP,
}


def _validate_client_id(client_id: str) -> None:
    if not client_id or len(client_id) > MAX_CLIENT_ID_LENGTH:
        raise InvalidArgumentError(f"client_id is required (1..{MAX_CLIENT_ID_LENGTH} chars)")


class ConsumerProcessor:
    def __init__(self, ctx: FrontEndKit) -> None:
        self.ctx = ctx

    # --- membership -----------------------------------------------------------------------------
    def heartbeat(self, request: messaging_pb2.HeartbeatRequest) -> messaging_pb2.HeartbeatResponse:
        ctx = self.ctx
        _validate_client_id(request.client_id)
        versions = {}
        for data in request.consumers:
            group = data.group
            validate_group_name(group)
            subscriptions = {}
            for sub in data.subscriptions:
                validate_topic_name(sub.topic)
                filter_of(sub.tag_expression, sub.sql_expression, ctx.config)
                subscriptions[sub.topic] = (
                    f"SQL92: {sub.sql_expression}"
                    if sub.sql_expression
                    else sub.tag_expression or "*"
                )
            ctx.port.join_group(group)
            versions[group] = ctx.port.clients.heartbeat(
                request.client_id,
                group,
                subscriptions,
                _MESSAGE_MODELS.get(data.message_model, MessageModel.CLUSTERING),
                _CONSUME_FROM.get(data.consume_from_where, ConsumeFrom.LAST_OFFSET),
                caller=caller(),
            )
        for group in request.producer_groups:
            ctx.port.clients.producer_heartbeat(request.client_id, group)
        return messaging_pb2.HeartbeatResponse(consumer_list_versions=versions)

    def unregister(
        self, request: messaging_pb2.UnregisterClientRequest
    ) -> messaging_pb2.UnregisterClientResponse:
        _validate_client_id(request.client_id)
        self.ctx.port.clients.unregister(
            request.client_id,
            list(request.consumer_groups),
            list(request.producer_groups),
            caller(),
        )
        return messaging_pb2.UnregisterClientResponse()

    def consumer_list(
        self, request: messaging_pb2.GetConsumerListRequest
    ) -> messaging_pb2.GetConsumerListResponse:
        validate_group_name(request.consumer_group)
        ids, version = self.ctx.port.clients.members(request.consumer_group)
        return messaging_pb2.GetConsumerListResponse(client_ids=ids, version=version)

    # --- offsets --------------------------------------------------------------------------------
    def _check_queue(self, group: str, topic: str, queue_id: int) -> None:
        validate_group_name(group)
        validate_topic_name(topic)
        if queue_id < 0 or queue_id >= 1024:
            raise InvalidArgumentError(f"queue_id must be 0..1023, got {queue_id}")

    async def update_offset(
        self, request: messaging_pb2.UpdateConsumerOffsetRequest
    ) -> messaging_pb2.UpdateConsumerOffsetResponse:
        """Plain: in memory, the file written by the periodic round (RocketMQ's design).
        ``durable`` (a Kafka coordinator's forwarded OffsetCommit): a master only, answered
        once the offset is in the file and on the in-sync replicas, as the Kafka path's own
        commits (the port's ``offsets_durable``)."""
        port = self.ctx.port
        self._check_queue(request.consumer_group, request.topic, request.queue_id)
        if request.durable:
            port.check_offsets_master()  # NotMasterError, MasterFencedError: nothing taken
        port.group_for_use(request.consumer_group)
        port.commit_offset(request.consumer_group, request.topic, request.queue_id, request.offset)
        if request.durable:
            await port.offsets_durable()
        return messaging_pb2.UpdateConsumerOffsetResponse()

    def query_offset(
        self, request: messaging_pb2.QueryConsumerOffsetRequest
    ) -> messaging_pb2.QueryConsumerOffsetResponse:
        self._check_queue(request.consumer_group, request.topic, request.queue_id)
        offset = self.ctx.port.committed_offset(
            request.consumer_group, request.topic, request.queue_id
        )
        return messaging_pb2.QueryConsumerOffsetResponse(offset=offset)

    # --- retry / DLQ: the core's (broker/core/retry.py) ------------------------------------------
    async def send_back(
        self, request: messaging_pb2.SendMessageBackRequest
    ) -> messaging_pb2.SendMessageBackResponse:
        back = await self.ctx.port.retry.send_back(
            request.consumer_group,
            request.commit_log_offset,
            delay_level=request.delay_level,
            origin_topic=request.origin_topic,
            origin_msg_id=request.origin_msg_id,
            max_reconsume_times=request.max_reconsume_times,
        )
        return messaging_pb2.SendMessageBackResponse(
            sent_to_dlq=back.sent_to_dlq, topic=back.topic, reconsume_times=back.reconsume_times
        )
