"""Query processor: QueryMessage (by key), ViewMessage (by offset or unique id), SearchOffset,
GetQueueOffsets and QueryRoute."""

from __future__ import annotations

import time

from wharf.broker.errors import InvalidArgumentError, NotFoundError
from wharf.broker.frontends.frontend_kit import FrontEndKit
from wharf.broker.frontends.v1.convert import add_views, to_view
from wharf.broker.meta.topics import PERM_READ_WRITE, validate_topic_name
from wharf.store.codec import PROPERTY_REAL_TOPIC, decode_offset_msg_id
from wharf.store.errors import InvalidMessageError
from wharf.store.model import StoredMessage
from wharf.v1 import messaging_pb2

DEFAULT_QUERY_MAX = 32  # RocketMQ's defaultQueryMaxNum
QUERY_MAX_CAP = 1024


class QueryProcessor:
    def __init__(self, ctx: FrontEndKit) -> None:
        self.ctx = ctx

    def _existing_topic(self, name: str) -> None:
        validate_topic_name(name)
        if self.ctx.port.topic(name) is None:
            raise NotFoundError(f"topic {name!r} does not exist")

    def query_message(
        self, request: messaging_pb2.QueryMessageRequest
    ) -> messaging_pb2.QueryMessageResponse:
        validate_topic_name(request.topic)
        if not request.key:
            raise InvalidArgumentError("key is required (a KEYS entry or a unique id)")
        if request.max_num < 0 or request.begin_timestamp < 0 or request.end_timestamp < 0:
            raise InvalidArgumentError("max_num and timestamps must be >= 0")
        max_num = min(request.max_num or DEFAULT_QUERY_MAX, QUERY_MAX_CAP)
        end = request.end_timestamp or int(time.time() * 1000) + 1000
        found = self.ctx.port.query_by_key(
            request.topic, request.key, max_num, request.begin_timestamp, end
        )
        response = messaging_pb2.QueryMessageResponse()
        add_views(response.messages, found, self.ctx.offset_ids)
        return response

    def _by_offset(self, msg_id: str, topic: str) -> StoredMessage | None:
        try:
            host, offset = decode_offset_msg_id(msg_id)
        except InvalidMessageError:
            return None
        message = self.ctx.port.message_at(offset)
        if message is None:
            return None  # not a record boundary: the id was a unique id after all
        if message.store_host != host:
            # Another broker's id (a cluster has one commit log per group): a record that
            # happens to start at that offset here is not that message.
            return None
        if topic and topic not in (message.topic, message.properties.get(PROPERTY_REAL_TOPIC)):
            return None
        return message

    def view_message(
        self, request: messaging_pb2.ViewMessageRequest
    ) -> messaging_pb2.ViewMessageResponse:
        msg_id = request.msg_id.strip()
        if not msg_id:
            raise InvalidArgumentError("msg_id is required (offset msg id or unique id)")
        topic = request.topic
        if topic:
            validate_topic_name(topic)
        # A 32-hex id may be an offset id or a unique id: try the direct read first.
        message = self._by_offset(msg_id, topic)
        if message is None and topic:
            message = self.ctx.port.message_by_unique_id(topic, msg_id)
        if message is None:
            hint = "" if topic else " (a unique id also needs its topic)"
            raise NotFoundError(f"no message with id {msg_id!r}{hint}")
        return messaging_pb2.ViewMessageResponse(message=to_view(message, self.ctx.offset_ids))

    def search_offset(
        self, request: messaging_pb2.SearchOffsetRequest
    ) -> messaging_pb2.SearchOffsetResponse:
        self._existing_topic(request.topic)
        self._check_queue(request.topic, request.queue_id)
        if request.timestamp < 0:
            raise InvalidArgumentError(f"timestamp must be >= 0, got {request.timestamp}")
        offset = self.ctx.port.offset_at(request.topic, request.queue_id, request.timestamp)
        return messaging_pb2.SearchOffsetResponse(offset=offset)

    def _check_queue(self, topic: str, queue_id: int) -> None:
        config = self.ctx.port.topic(topic)
        limit = config.read_queue_nums if config else 0
        if not 0 <= queue_id < limit:
            raise InvalidArgumentError(
                f"queue_id {queue_id} is out of range: topic {topic!r} has {limit} queues"
            )

    def get_queue_offsets(
        self, request: messaging_pb2.GetQueueOffsetsRequest
    ) -> messaging_pb2.GetQueueOffsetsResponse:
        self._existing_topic(request.topic)
        config = self.ctx.port.topic(request.topic)
        assert config is not None
        stats = {s.queue_id: s for s in self.ctx.port.queue_stats(request.topic)}
        queues = []
        for queue_id in range(max(config.read_queue_nums, config.write_queue_nums)):
            stat = stats.get(queue_id)
            queues.append(
                messaging_pb2.QueueOffsets(
                    queue_id=queue_id,
                    min_offset=stat.min_offset if stat else 0,
                    max_offset=stat.max_offset if stat else 0,
                    last_update_timestamp=stat.last_update_timestamp if stat else 0,
                )
            )
        return messaging_pb2.GetQueueOffsetsResponse(topic=request.topic, queues=queues)

    def query_route(
        self, request: messaging_pb2.QueryRouteRequest
    ) -> messaging_pb2.QueryRouteResponse:
        ctx = self.ctx
        config = ctx.port.routable_topic(request.topic)  # TopicNotFound: NOT_FOUND
        default = ctx.port.topic_defaults.queue_nums
        return messaging_pb2.QueryRouteResponse(
            topic=request.topic,
            exists=config is not None,
            read_queue_nums=config.read_queue_nums if config else default,
            write_queue_nums=config.write_queue_nums if config else default,
            perm=config.perm if config else PERM_READ_WRITE,
            broker_name=ctx.config.broker_name,
            endpoint=ctx.endpoint,
        )
