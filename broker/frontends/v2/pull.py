"""PullMessage, UpdateOffset, GetOffset and QueryOffset: RocketMQ 5's offset-based consumption
(the pull consumers of newer official clients) over the same read and the same committed offsets
as wharf.v1's pull consumers, so a RocketMQ 5 client and a Wharf SDK consumer of one group share
its progress (``consumerOffset.json``). Nothing is in flight: no receipt handle, no invisible
time; the consumer moves its own offset and commits it with UpdateOffset.

- PullMessage streams ``status`` -> one ``message`` each -> ``next_offset``: OK with messages;
  MESSAGE_NOT_FOUND when nothing new or nothing matched the tag filter before the long poll ran
  out (``long_polling_timeout``, at most 20 s and the call's deadline minus 200 ms, as
  ReceiveMessage); ILLEGAL_OFFSET when the offset is outside the queue (``next_offset`` says
  where to go on). The queue is the request's (id within the topic's read queues).
- UpdateOffset commits; GetOffset answers the committed offset or OFFSET_NOT_FOUND;
  QueryOffset answers BEGINNING (min offset), END (max offset) or the first offset stored at or
  after a TIMESTAMP.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from wharf.broker.core.port import Messaging
from wharf.broker.core.read import Read, ReadStatus
from wharf.broker.frontends.v2 import codes
from wharf.broker.frontends.v2.codes import Code, V2Error
from wharf.broker.frontends.v2.receive import (
    batch_of,
    polling_ms_of,
    readable_topic,
    tag_filter_of,
    to_v2_message,
)
from wharf.rocketmq.v2 import definition_pb2, service_pb2
from wharf.store.model import TagFilter

# (topic, queue id, offset, max messages, tag filter, max wait ms) -> the core's read
ReadWaiting = Callable[[str, int, int, int, TagFilter, int], Awaitable[Read]]

# The core's neutral read outcome as v2 codes.
_PULL_CODES = {
    ReadStatus.FOUND: Code.OK,
    ReadStatus.NO_NEW: Code.MESSAGE_NOT_FOUND,
    ReadStatus.NO_MATCHED: Code.MESSAGE_NOT_FOUND,
    ReadStatus.OFFSET_ILLEGAL: Code.ILLEGAL_OFFSET,
}


class V2PullProcessor:
    """``group_check(name)`` validates (or auto-creates) a consumer group, raising what the
    code table maps; ``on_out(topic, group, count, bytes)`` counts delivered messages."""

    def __init__(
        self,
        port: Messaging,
        read_waiting: ReadWaiting,
        group_check: Callable[[str], object],
        min_offset: Callable[[str, int], int],
        max_offset: Callable[[str, int], int],
        offset_by_time: Callable[[str, int, int], int],
        on_out: Callable[[str, str, int, int], None],
        property_filter: bool = True,
    ) -> None:
        self._property_filter = property_filter  # enablePropertyFilter
        self._port = port
        self._read_waiting = read_waiting
        self._group_check = group_check
        self._min_offset = min_offset
        self._max_offset = max_offset
        self._offset_by_time = offset_by_time
        self._on_out = on_out

    def _queue(self, queue: definition_pb2.MessageQueue) -> tuple[str, int]:
        name = queue.topic.name
        topic = readable_topic(self._port, name)
        if not 0 <= queue.id < topic.read_queue_nums:
            raise V2Error(
                Code.BAD_REQUEST,
                f"queue id {queue.id} is out of range: topic {name!r} has "
                f"{topic.read_queue_nums} read queues",
            )
        return name, queue.id

    async def pull(
        self, request: service_pb2.PullMessageRequest, time_remaining: float | None
    ) -> list[service_pb2.PullMessageResponse]:
        topic, queue_id = self._queue(request.message_queue)
        group = request.group.name
        self._group_check(group)
        if request.offset < 0:
            raise V2Error(Code.ILLEGAL_OFFSET, f"offset must be >= 0, got {request.offset}")
        batch = batch_of(request.batch_size)
        tag_filter = tag_filter_of(request.filter_expression, self._property_filter)
        polling_ms = polling_ms_of(request.long_polling_timeout, time_remaining)
        result, status = await self._read_waiting(
            topic, queue_id, request.offset, batch, tag_filter, polling_ms
        )
        code = _PULL_CODES[status]
        if code == Code.OK:
            first = service_pb2.PullMessageResponse(status=codes.ok())
        elif code == Code.ILLEGAL_OFFSET:
            first = service_pb2.PullMessageResponse(
                status=codes.status(
                    code,
                    f"offset {request.offset} is outside queue {queue_id} of {topic!r} "
                    f"[{result.min_offset}, {result.max_offset}]; go on from next_offset",
                )
            )
        else:
            first = service_pb2.PullMessageResponse(status=codes.status(code, "no new message"))
        replies = [first]
        messages = getattr(result, "messages", [])
        for m in messages:
            reply = service_pb2.PullMessageResponse()
            to_v2_message(m, into=reply.message)
            replies.append(reply)
        replies.append(service_pb2.PullMessageResponse(next_offset=result.next_begin_offset))
        if messages:
            self._on_out(topic, group, len(messages), sum(len(m.body) for m in messages))
        return replies

    def update_offset(
        self, request: service_pb2.UpdateOffsetRequest
    ) -> service_pb2.UpdateOffsetResponse:
        topic, queue_id = self._queue(request.message_queue)
        self._group_check(request.group.name)
        if request.offset < 0:
            raise V2Error(Code.ILLEGAL_OFFSET, f"offset must be >= 0, got {request.offset}")
        self._port.commit_offset(request.group.name, topic, queue_id, request.offset)
        return service_pb2.UpdateOffsetResponse(status=codes.ok())

    def get_offset(self, request: service_pb2.GetOffsetRequest) -> service_pb2.GetOffsetResponse:
        topic, queue_id = self._queue(request.message_queue)
        group = request.group.name
        self._group_check(group)
        offset = self._port.committed_offset(group, topic, queue_id)
        if offset < 0:
            raise V2Error(
                Code.OFFSET_NOT_FOUND,
                f"group {group!r} has committed no offset for queue {queue_id} of {topic!r}",
            )
        return service_pb2.GetOffsetResponse(status=codes.ok(), offset=offset)

    def query_offset(
        self, request: service_pb2.QueryOffsetRequest
    ) -> service_pb2.QueryOffsetResponse:
        topic, queue_id = self._queue(request.message_queue)
        policy = request.query_offset_policy
        if policy == definition_pb2.BEGINNING:
            offset = self._min_offset(topic, queue_id)
        elif policy == definition_pb2.END:
            offset = self._max_offset(topic, queue_id)
        elif policy == definition_pb2.TIMESTAMP:
            if not request.HasField("timestamp"):
                raise V2Error(Code.BAD_REQUEST, "query_offset_policy TIMESTAMP needs a timestamp")
            stamp = request.timestamp
            ms = stamp.seconds * 1000 + stamp.nanos // 1_000_000
            offset = self._offset_by_time(topic, queue_id, ms)
        else:
            raise V2Error(Code.BAD_REQUEST, f"unknown query_offset_policy {policy}")
        return service_pb2.QueryOffsetResponse(status=codes.ok(), offset=offset)
