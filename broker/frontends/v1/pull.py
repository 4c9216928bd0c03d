"""wharf.v1 PullMessage: checks the request, then the core's read (``broker/core/read.py``: one
queue from an offset, filtered, long-polling while caught up) and maps its neutral outcome to
wharf.v1's PullStatus and reply.

``pull(request, replies, deliver)``: with ``deliver`` (the pull stream's direct writer), a
parked pull is answered in place (``LongPollHolder`` "Answer in place"): the arrival's
callback reads the queue, builds the reply and hands it to ``deliver``; the pull then returns
None (delivered) or, when ``deliver`` declined, that reply. A read there that finds nothing
(everything new filtered out) leaves the pull to wake and go on as usual. With
``deliver_durable`` too, a raw pull is answered ahead of the sync (``LongPollHolder``): its
reply is built from the records a running sync will make durable and handed over to be
written after it; a declined hand-over leaves the pull parked, nothing held or counted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from wharf.broker.core.errors import TopicNotFound
from wharf.broker.core.read import Read, ReadStatus
from wharf.broker.core.tags import filter_of
from wharf.broker.errors import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
)
from wharf.broker.frontends.frontend_kit import FrontEndKit
from wharf.broker.frontends.reply_budget import CallReplies, NoReplyBudget, PullReplies
from wharf.broker.frontends.v1.convert import add_views
from wharf.broker.meta.groups import validate_group_name
from wharf.broker.meta.topics import is_system_topic, validate_topic_name
from wharf.store.model import RawGetResult
from wharf.v1 import messaging_pb2

# The core's neutral read outcome as wharf.v1's PullStatus.
_STATUS = {
    ReadStatus.FOUND: messaging_pb2.FOUND,
    ReadStatus.NO_NEW: messaging_pb2.NO_NEW_MSG,
    ReadStatus.NO_MATCHED: messaging_pb2.NO_MATCHED_MSG,
    ReadStatus.OFFSET_ILLEGAL: messaging_pb2.OFFSET_ILLEGAL,
}

_NO_BUDGET = NoReplyBudget()
Replies = CallReplies | NoReplyBudget | PullReplies
# A reply's direct writer: True when it wrote (or took) the reply, False to leave it to the caller.
Deliver = Callable[[messaging_pb2.PullMessageResponse], bool]
# A reply built ahead of the sync: True when its writer took it to write once the log is
# durable to the offset given (or wrote it: durable already); False when it declined.
DeliverDurable = Callable[[messaging_pb2.PullMessageResponse, int], bool]


class Answered(NamedTuple):
    """A parked pull answered in place: its reply, and whether ``deliver`` took it."""

    response: messaging_pb2.PullMessageResponse
    delivered: bool


class PullProcessor:
    def __init__(self, ctx: FrontEndKit) -> None:
        self.ctx = ctx

    def _validate(self, request: messaging_pb2.PullMessageRequest) -> None:
        ctx = self.ctx
        validate_group_name(request.consumer_group)
        topic_name = request.topic
        try:  # TopicNotReadable: PERMISSION_DENIED
            max_queues = ctx.port.readable_topic(topic_name).read_queue_nums
        except TopicNotFound:  # wharf.v1 pulls from a topic a send would make (auto-create)
            validate_topic_name(topic_name)
            defaults = ctx.port.topic_defaults
            if not defaults.auto_create and not is_system_topic(topic_name):
                raise NotFoundError(
                    f"topic {topic_name!r} does not exist; create it with CreateTopic"
                ) from None
            max_queues = defaults.queue_nums
        if not 0 <= request.queue_id < max_queues:
            raise InvalidArgumentError(
                f"queue_id {request.queue_id} is out of range: topic {topic_name!r} has "
                f"{max_queues} read queues"
            )
        if request.queue_offset < 0:
            raise InvalidArgumentError(f"queue_offset must be >= 0, got {request.queue_offset}")
        if request.max_messages < 0 or request.max_wait_ms < 0 or request.max_bytes < 0:
            raise InvalidArgumentError("max_messages, max_wait_ms and max_bytes must be >= 0")

    async def pull(
        self,
        request: messaging_pb2.PullMessageRequest,
        replies: Replies = _NO_BUDGET,
        deliver: Deliver | None = None,
        deliver_durable: DeliverDurable | None = None,
    ) -> messaging_pb2.PullMessageResponse | None:
        """``replies`` accounts the reply against the client's budget of unread pull replies
        (broker/frontends/reply_budget.py): ResourceExhaustedError before a read when it is spent.
        ``deliver``: answer a long poll in place (module docstring); None = delivered.
        ``deliver_durable``: answer a raw long poll ahead of the sync (module docstring)."""
        ctx = self.ctx
        self._validate(request)
        group = request.consumer_group
        topic = request.topic
        queue_id = request.queue_id
        tag_filter = filter_of(request.tag_expression, request.sql_expression, ctx.config)
        if not ctx.port.group_for_use(group).consume_enable:
            raise PermissionDeniedError(
                f"consumer group {group!r} has consume_enable off; re-enable it with "
                "CreateSubscriptionGroup"
            )
        if request.HasField("commit_offset"):
            ctx.port.commit_offset(group, topic, queue_id, request.commit_offset)

        def respond(read: Read) -> messaging_pb2.PullMessageResponse:
            return self._response(topic, group, read, replies)

        early = None
        if deliver is not None:

            def early(read: Read) -> Answered:
                response = respond(read)
                return Answered(response, deliver(response))

        durable = None
        if deliver_durable is not None:

            def durable(read: Read, end: int) -> Answered | None:
                response = self._response(topic, group, read, _NO_BUDGET, counted=False)
                if not deliver_durable(response, end):
                    return None  # nothing held, nothing counted: the pull waits on
                self._count_out(topic, group, read)
                return Answered(response, True)

        outcome = await ctx.port.read.read_answering(
            topic,
            queue_id,
            request.queue_offset,
            request.max_messages,
            tag_filter,
            request.max_wait_ms,
            request.raw_records,
            replies,
            request.max_bytes,
            early,
            durable,
        )
        if isinstance(outcome, Answered):
            return None if outcome.delivered else outcome.response
        return respond(outcome)

    def _count_out(self, topic: str, group: str, read: Read) -> None:
        """A raw reply delivered (``_response`` with ``counted=False``): its messages out."""
        result = read.result
        assert isinstance(result, RawGetResult)
        self.ctx.counters.messages_out += result.count
        self.ctx.metrics.on_messages_out(topic, group, result.count, result.body_bytes)

    def _response(
        self, topic: str, group: str, read: Read, replies: Replies, counted: bool = True
    ) -> messaging_pb2.PullMessageResponse:
        """The reply to a pull that read ``read``, held against the client's budget (and its
        messages counted out unless ``counted`` is False)."""
        ctx = self.ctx
        result, status = read
        response = messaging_pb2.PullMessageResponse(
            status=_STATUS[status],
            next_begin_offset=result.next_begin_offset,
            min_offset=result.min_offset,
            max_offset=result.max_offset,
        )
        held = 0
        if isinstance(result, RawGetResult):
            count, nbytes = result.count, result.body_bytes
            if count:
                response.records = result.records
                held = len(result.records)  # not response.records: each read copies it
        else:
            count = len(result.messages)
            nbytes = sum(len(m.body) for m in result.messages)
            if count:
                add_views(response.messages, result.messages, ctx.offset_ids)
        if count and counted:
            replies.hold(held or nbytes)
            ctx.counters.messages_out += count
            ctx.metrics.on_messages_out(topic, group, count, nbytes)
        return response
