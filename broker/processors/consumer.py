"""Consumer processor: heartbeats and membership, committed offsets, and SendMessageBack
(retry via ``%RETRY%<group>`` with a delay level, dead letters to ``%DLQ%<group>``)."""

from __future__ import annotations

from wharf.broker.context import BrokerContext
from wharf.broker.core.tags import filter_of
from wharf.broker.errors import InvalidArgumentError, NotFoundError
from wharf.broker.meta.groups import validate_group_name
from wharf.broker.meta.topics import validate_topic_name
from wharf.store.codec import (
    DLQ_GROUP_TOPIC_PREFIX,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_UNIQ_KEY,
    RETRY_GROUP_TOPIC_PREFIX,
)
from wharf.store.model import MessageInput
from wharf.v1 import messaging_pb2

MAX_CLIENT_ID_LENGTH = 255
FIRST_RETRY_DELAY_LEVEL = 3  # RocketMQ: delay level 3 + reconsume times (10 s, 30 s, 1 m ...)


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def _validate_client_id(client_id: str) -> None:
    if not client_id or len(client_id) > MAX_CLIENT_ID_LENGTH:
        raise InvalidArgumentError(f"client_id is required (1..{MAX_CLIENT_ID_LENGTH} chars)")


class ConsumerProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
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
            ctx.groups.for_use(group)
            ctx.topics.ensure_system(retry_topic(group), 1)
            versions[group] = ctx.clients.heartbeat(
                request.client_id,
                group,
                subscriptions,
                int(data.message_model),
                int(data.consume_from_where),
            )
        for group in request.producer_groups:
            ctx.clients.producer_heartbeat(request.client_id, group)
        return messaging_pb2.HeartbeatResponse(consumer_list_versions=versions)

    def unregister(
        self, request: messaging_pb2.UnregisterClientRequest
    ) -> messaging_pb2.UnregisterClientResponse:
        _validate_client_id(request.client_id)
        self.ctx.clients.unregister(
            request.client_id, list(request.consumer_groups), list(request.producer_groups)
        )
        return messaging_pb2.UnregisterClientResponse()

    def consumer_list(
        self, request: messaging_pb2.GetConsumerListRequest
    ) -> messaging_pb2.GetConsumerListResponse:
        validate_group_name(request.consumer_group)
        ids, version = self.ctx.clients.members(request.consumer_group)
        return messaging_pb2.GetConsumerListResponse(client_ids=ids, version=version)

    # --- offsets --------------------------------------------------------------------------------
    def _check_queue(self, group: str, topic: str, queue_id: int) -> None:
        validate_group_name(group)
        validate_topic_name(topic)
        if queue_id < 0 or queue_id >= 1024:
            raise InvalidArgumentError(f"queue_id must be 0..1023, got {queue_id}")

    def update_offset(
        self, request: messaging_pb2.UpdateConsumerOffsetRequest
    ) -> messaging_pb2.UpdateConsumerOffsetResponse:
        self._check_queue(request.consumer_group, request.topic, request.queue_id)
        self.ctx.groups.for_use(request.consumer_group)
        self.ctx.offsets.commit(
            request.consumer_group, request.topic, request.queue_id, request.offset
        )
        return messaging_pb2.UpdateConsumerOffsetResponse()

    def query_offset(
        self, request: messaging_pb2.QueryConsumerOffsetRequest
    ) -> messaging_pb2.QueryConsumerOffsetResponse:
        self._check_queue(request.consumer_group, request.topic, request.queue_id)
        offset = self.ctx.offsets.query(request.consumer_group, request.topic, request.queue_id)
        return messaging_pb2.QueryConsumerOffsetResponse(offset=offset)

    # --- retry / DLQ ----------------------------------------------------------------------------
    async def send_back(
        self, request: messaging_pb2.SendMessageBackRequest
    ) -> messaging_pb2.SendMessageBackResponse:
        ctx = self.ctx
        group_name = request.consumer_group
        validate_group_name(group_name)
        if request.commit_log_offset < 0 or request.max_reconsume_times < 0:
            raise InvalidArgumentError("commit_log_offset and max_reconsume_times must be >= 0")
        if request.delay_level < -1:
            raise InvalidArgumentError("delay_level must be -1 (DLQ), 0 (automatic) or a level")
        group = ctx.groups.for_use(group_name)
        original = ctx.store.look_message_by_offset(request.commit_log_offset)
        if original is None or original.commit_log_offset != request.commit_log_offset:
            raise NotFoundError(
                f"no message at commit log offset {request.commit_log_offset}; pass the "
                "consumed message's commit_log_offset"
            )
        max_times = request.max_reconsume_times or group.retry_max_times
        reconsume_times = original.reconsume_times + 1
        to_dlq = request.delay_level < 0 or original.reconsume_times >= max_times
        properties = dict(original.properties)
        properties.pop(PROPERTY_DELAY_TIME_LEVEL, None)
        # The first hop records where the message came from; later hops keep it.
        origin_topic = request.origin_topic or original.topic
        properties.setdefault(PROPERTY_RETRY_TOPIC, origin_topic)
        properties.setdefault(
            PROPERTY_ORIGIN_MESSAGE_ID,
            request.origin_msg_id or original.properties.get(PROPERTY_UNIQ_KEY, ""),
        )
        if to_dlq:
            topic = dlq_topic(group_name)
        else:
            topic = retry_topic(group_name)
            level = request.delay_level or FIRST_RETRY_DELAY_LEVEL + original.reconsume_times
            properties[PROPERTY_DELAY_TIME_LEVEL] = str(min(level, len(ctx.delay_levels_ms)))
        ctx.topics.ensure_system(topic, 1)
        message = MessageInput(
            body=original.body,
            properties=properties,
            flag=original.flag,
            sys_flag=original.sys_flag,
            born_timestamp=original.born_timestamp,
            born_host=original.born_host,
            reconsume_times=reconsume_times,
        )
        await ctx.store.put(topic, 0, [message])
        if to_dlq:
            ctx.metrics.on_send_to_dlq(properties[PROPERTY_RETRY_TOPIC], group_name)
        return messaging_pb2.SendMessageBackResponse(
            sent_to_dlq=to_dlq, topic=topic, reconsume_times=reconsume_times
        )
