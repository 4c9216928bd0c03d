"""Pull processor: reads one queue from an offset, filtered by a tag expression, and long-polls
(parks in LongPollHolder, woken by the store's arrival listener) when nothing is there yet.

``pull(request, replies, deliver)``: with ``deliver`` (the pull stream's direct writer), a
parked pull is answered in place (``LongPollHolder`` "Answer in place"): the arrival's
callback reads the queue, builds the reply and hands it to ``deliver``; the pull then returns
None (delivered) or, when ``deliver`` declined, that reply. A read there that finds nothing
(everything new filtered out) leaves the pull to wake and go on as usual.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

from wharf.broker.context import BrokerContext
from wharf.broker.core.tags import filter_of
from wharf.broker.errors import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
)
from wharf.broker.meta.groups import validate_group_name
from wharf.broker.meta.topics import is_system_topic, validate_topic_name
from wharf.broker.processors.convert import add_views
from wharf.broker.serving.reply_budget import CallReplies, NoReplyBudget, PullReplies
from wharf.store.model import GetResult, GetStatus, TagFilter
from wharf.store.read.get_raw import RawGetResult
from wharf.v1 import messaging_pb2

MAX_WAIT_MS = 60_000  # longer waits would outlive typical client deadlines
DISPATCH_WAIT_S = 1.0  # how long a pull that finds nothing waits for pending dispatch, once

_STATUS = {
    GetStatus.FOUND: messaging_pb2.FOUND,
    GetStatus.NO_MATCHED_MESSAGE: messaging_pb2.NO_MATCHED_MSG,
    GetStatus.OFFSET_OVERFLOW_ONE: messaging_pb2.NO_NEW_MSG,
    GetStatus.OFFSET_OVERFLOW_BADLY: messaging_pb2.OFFSET_ILLEGAL,
    GetStatus.OFFSET_TOO_SMALL: messaging_pb2.OFFSET_ILLEGAL,
    # The unit points below the commit log's min offset, or retention is deleting it: skip
    # ahead to next_begin_offset like a filtered-out range.
    GetStatus.OFFSET_FOUND_NULL: messaging_pb2.NO_MATCHED_MSG,
    GetStatus.MESSAGE_WAS_REMOVING: messaging_pb2.NO_MATCHED_MSG,
}


def pull_status(result: GetResult | RawGetResult, offset: int) -> messaging_pb2.PullStatus:
    if result.status is GetStatus.NO_MESSAGE_IN_QUEUE:
        # An empty queue: offset 0 simply waits; any other offset is illegal (RocketMQ:
        # PULL_OFFSET_MOVED), the reply's next_begin_offset says where to go.
        return messaging_pb2.NO_NEW_MSG if offset == 0 else messaging_pb2.OFFSET_ILLEGAL
    return _STATUS[result.status]


_NO_BUDGET = NoReplyBudget()
Replies = CallReplies | NoReplyBudget | PullReplies
Read = tuple[GetResult | RawGetResult, messaging_pb2.PullStatus]
# A reply's direct writer: True when it wrote (or took) the reply, False to leave it to the caller.
Deliver = Callable[[messaging_pb2.PullMessageResponse], bool]


class Answered(NamedTuple):
    """A parked pull answered in place: its reply, and whether ``deliver`` took it."""

    response: messaging_pb2.PullMessageResponse
    delivered: bool


class PullProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def _validate(self, request: messaging_pb2.PullMessageRequest) -> None:
        ctx = self.ctx
        validate_group_name(request.consumer_group)
        topic_name = request.topic
        topic = ctx.topics.get(topic_name)
        if topic is None:
            validate_topic_name(topic_name)
            if not ctx.topics.auto_create and not is_system_topic(topic_name):
                raise NotFoundError(
                    f"topic {topic_name!r} does not exist; create it with CreateTopic"
                )
            max_queues = ctx.topics.default_queue_nums
        else:
            if not topic.readable:
                raise PermissionDeniedError(
                    f"topic {topic_name!r} is not readable (perm={topic.perm})"
                )
            max_queues = topic.read_queue_nums
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
    ) -> messaging_pb2.PullMessageResponse | None:
        """``replies`` accounts the reply against the client's budget of unread pull replies
        (broker/serving/reply_budget.py): ResourceExhaustedError before a read when it is spent.
        ``deliver``: answer a long poll in place (module docstring); None = delivered."""
        ctx = self.ctx
        self._validate(request)
        group = request.consumer_group
        topic = request.topic
        queue_id = request.queue_id
        tag_filter = filter_of(request.tag_expression, request.sql_expression, ctx.config)
        if not ctx.groups.for_use(group).consume_enable:
            raise PermissionDeniedError(
                f"consumer group {group!r} has consume_enable off; re-enable it with "
                "CreateSubscriptionGroup"
            )
        if request.HasField("commit_offset"):
            ctx.offsets.commit(group, topic, queue_id, request.commit_offset)

        def respond(read: Read) -> messaging_pb2.PullMessageResponse:
            return self._response(topic, group, read, replies)

        early = None
        if deliver is not None:

            def early(read: Read) -> Answered:
                response = respond(read)
                return Answered(response, deliver(response))

        outcome = await self._read_waiting(
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
        )
        if isinstance(outcome, Answered):
            return None if outcome.delivered else outcome.response
        return respond(outcome)

    def _response(
        self, topic: str, group: str, read: Read, replies: Replies
    ) -> messaging_pb2.PullMessageResponse:
        """The reply to a pull that read ``read``, held against the client's budget."""
        ctx = self.ctx
        result, status = read
        response = messaging_pb2.PullMessageResponse(
            status=status,
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
        if count:
            replies.hold(held or nbytes)
            ctx.messages_out += count
            ctx.metrics.on_messages_out(topic, group, count, nbytes)
        return response

    async def read_waiting(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int,
        tag_filter: TagFilter,
        max_wait_ms: int,
        raw: bool = False,
        replies: Replies = _NO_BUDGET,
        max_bytes: int = 0,
    ) -> Read:
        """Read one queue from ``offset`` (at most ``max_messages``, 0 = the default batch,
        and ``max_bytes``, 0 = maxPullBytes, which also caps it), long-polling up to
        ``max_wait_ms`` while caught up: the read both protocols' pulls share. ``raw``:
        stored record bytes, tag HASH filter only (the client re-checks). A stream's
        ``replies`` may be ``full``: the read then waits for its client to take replies."""
        outcome = await self._read_waiting(
            topic, queue_id, offset, max_messages, tag_filter, max_wait_ms, raw, replies, max_bytes
        )
        assert not isinstance(outcome, Answered)  # only with ``early``
        return outcome

    async def _read_waiting(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int,
        tag_filter: TagFilter,
        max_wait_ms: int,
        raw: bool,
        replies: Replies,
        max_bytes: int,
        early: Callable[[Read], Answered] | None = None,
    ) -> Read | Answered:
        """``read_waiting``; with ``early``, a long poll is answered in place by the
        arrival: ``early`` gets what the arrival's read found and its Answered is returned."""
        ctx = self.ctx
        cfg = ctx.config
        max_count = min(max_messages or cfg.default_pull_batch_size, cfg.max_pull_batch_size)
        byte_cap = min(max_bytes, cfg.max_pull_bytes) if max_bytes > 0 else cfg.max_pull_bytes
        wait_ms = min(max_wait_ms, MAX_WAIT_MS) if cfg.long_polling_enable else 0
        deadline = time.monotonic() + wait_ms / 1000
        store = ctx.store
        read = store.get_raw_records if raw else store.get_messages
        waited_for_dispatch = False
        while True:
            if replies.full:
                await replies.room()
            replies.admit()
            result = read(topic, queue_id, offset, max_count, tag_filter, byte_cap)
            status = pull_status(result, offset)
            if result.status is GetStatus.FOUND:
                break
            # Park only when caught up (nothing new, or everything new filtered out).
            caught_up = status == messaging_pb2.NO_NEW_MSG or (
                status == messaging_pb2.NO_MATCHED_MSG
                and result.next_begin_offset >= result.max_offset
            )
            remaining = deadline - time.monotonic()
            can_park = wait_ms > 0 and caught_up and remaining > 0 and not ctx.long_poll.closed
            if not can_park and not waited_for_dispatch and store.dispatch_pending:
                # Read-your-writes: acks precede dispatch, so a pull right after a send ack (or
                # at an offset taken from one) can miss that message. Let dispatch catch up to
                # what is written now, once, before answering NO_NEW_MSG / OFFSET_ILLEGAL.
                # A pull that parks needs no such wait: dispatching this queue's data wakes
                # it at once, whereas waiting for the whole log to be dispatched cost every
                # empty long poll under SYNC_FLUSH load a sync plus 5 ms polling steps.
                waited_for_dispatch = True
                await store.wait_dispatched(DISPATCH_WAIT_S)
                continue
            if not can_park:
                break
            offset = max(offset, result.next_begin_offset)
            replies.long_polling()
            answer = None
            if early is not None:
                answer = self._answer(
                    early, read, topic, queue_id, offset, max_count, tag_filter, byte_cap, replies
                )
            woken = await ctx.long_poll.park(topic, queue_id, offset, remaining, answer)
            if isinstance(woken, Answered):
                return woken
            if not woken and (ctx.long_poll.closed or time.monotonic() >= deadline):
                if replies.full:
                    await replies.room()
                replies.admit()
                result = read(topic, queue_id, offset, max_count, tag_filter, byte_cap)
                status = pull_status(result, offset)
                break
        return result, status

    @staticmethod
    def _answer(
        early: Callable[[Read], Answered],
        read: Callable[..., GetResult | RawGetResult],
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tag_filter: TagFilter,
        byte_cap: int,
        replies: Replies,
    ) -> Callable[[int], Answered | None]:
        """A parked pull's in-place answer (LongPollHolder): the read it would do once
        resumed, answered through ``early`` when it finds messages; None (the pull resumes
        and goes on as usual) when its stream's replies are full or nothing matched."""

        def answer(_max_offset: int) -> Answered | None:
            if replies.full:
                return None
            try:
                replies.admit()
            except ResourceExhaustedError:
                return None  # the pull resumes and meets the refusal itself
            result = read(topic, queue_id, offset, max_count, tag_filter, byte_cap)
            if result.status is not GetStatus.FOUND:
                return None
            return early((result, messaging_pb2.FOUND))

        return answer
