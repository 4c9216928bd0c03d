"""ReceiveMessage, AckMessage and ChangeInvisibleDuration over the core's pop
(``broker/core/pop.py``, on the store's durable pop state ``wharf.store.pop``): RocketMQ 5's
consumption with invisible time.

ReceiveMessage pops up to ``batch_size`` visible messages of the subscription from ANY readable
queue of the topic (the request's queue is a hint the official clients pick at random: the proxy
ignores its id too), makes them invisible for ``invisible_duration``, and long-polls up to the
request's ``long_polling_timeout`` (clamped to 20 s, and to the call's deadline minus a 200 ms
reserve, so the client never sees DEADLINE_EXCEEDED); the pop store wakes it on an arrival or an
in-flight expiry. The stream is ``status OK`` -> one ``message`` each -> ``delivery_timestamp``, or
``status MESSAGE_NOT_FOUND`` -> ``delivery_timestamp`` (reference §6). Each message carries its
receipt handle, delivery attempt (1, then +1 per redelivery), queue id/offset, store time and
host, its type (DELAY with the ``delivery_timestamp`` it was sent with, as the proxy's
GrpcConverter does: the clients show it as the delivery time; else FIFO with a message group,
else NORMAL), and an uppercase-hex MD5 body digest (the only digest every official client
checks alike); bodies leave IDENTITY-encoded (the store's zlib bodies inflated by the codec's ``plain_body``).

Limits: invisible time ``MIN_INVISIBLE_MS`` (1 s; RocketMQ's proxy defaults to 10 s) to 12 h
(ILLEGAL_INVISIBLE_TIME); ``auto_renew`` (the PushConsumer) gets 60 s; batch 1..1024 (0 = 32);
TAG filter expressions (``*``, ``a||b``) and SQL92 ones (evaluated on the broker). After the group's
``retryMaxTimes`` + 1 deliveries a message goes to ``%DLQ%<group>`` (the pop store does it).
An AckMessage's entries are journaled together (``PopService.ack_many``: one write, one
fdatasync). Ack, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue map a stale or
forged handle to INVALID_RECEIPT_HANDLE; ChangeInvisibleDuration returns the new handle (the
duration counts from the call); ForwardMessageToDeadLetterQueue dead-letters a delivery whatever
its attempt.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from wharf.broker.core.errors import TopicNotFound, TopicNotReadable
from wharf.broker.core.pop import PopConsumer, PopCore
from wharf.broker.core.port import Messaging
from wharf.broker.core.tags import parse_filter, parse_tag_expression
from wharf.broker.errors import InvalidArgumentError, NotFoundError
from wharf.broker.frontends.v2 import codes
from wharf.broker.frontends.v2.codes import Code, V2Error
from wharf.broker.frontends.v2.convert import PROPERTY_MESSAGE_GROUP, RESERVED_PROPERTY_NAMES
from wharf.broker.frontends.v2.route import not_found_group
from wharf.broker.meta.topics import TopicConfig
from wharf.rocketmq.v2 import definition_pb2, service_pb2
from wharf.store.codec.bodies import plain_body
from wharf.store.codec.properties import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_KEY,
)
from wharf.store.errors import InvalidReceiptHandleError
from wharf.store.model import StoredMessage, TagFilter

_OK = codes.OK
MIN_INVISIBLE_MS = 1_000
MAX_INVISIBLE_MS = 12 * 3_600_000
AUTO_RENEW_INVISIBLE_MS = 60_000
MAX_POLLING_MS = 20_000
DEADLINE_RESERVE_S = 0.2
DEFAULT_BATCH = 32
MAX_BATCH = 1024


def _ms(duration: Duration) -> int:
    return duration.seconds * 1000 + duration.nanos // 1_000_000


def readable_topic(port: Messaging, name: str) -> TopicConfig:
    """The topic a consumer reads (the core's rule): TOPIC_NOT_FOUND, or FORBIDDEN when not
    readable."""
    try:
        return port.readable_topic(name)
    except TopicNotFound as exc:
        raise V2Error(Code.TOPIC_NOT_FOUND, str(exc)) from None
    except TopicNotReadable as exc:
        raise V2Error(Code.FORBIDDEN, str(exc)) from None


def tag_filter_of(
    expression: definition_pb2.FilterExpression, property_filter: bool = True
) -> TagFilter:
    """A TAG expression (``*`` when empty) or a SQL92 one (enablePropertyFilter);
    InvalidFilterError (ILLEGAL_FILTER_EXPRESSION) for a bad one."""
    if expression.type == definition_pb2.SQL:
        return parse_filter(expression.expression, sql=True, property_filter=property_filter)
    return parse_tag_expression(expression.expression or "*")


def polling_ms_of(duration: Duration, time_remaining: float | None) -> int:
    """A long poll's wait: at most MAX_POLLING_MS and the call's deadline minus the reserve."""
    polling_ms = min(max(_ms(duration), 0), MAX_POLLING_MS)
    if time_remaining is not None:
        polling_ms = min(polling_ms, max(int((time_remaining - DEADLINE_RESERVE_S) * 1000), 0))
    return polling_ms


def batch_of(batch_size: int) -> int:
    batch = batch_size or DEFAULT_BATCH
    if not 1 <= batch <= MAX_BATCH:
        raise V2Error(Code.BAD_REQUEST, f"batch_size must be 1..{MAX_BATCH}, got {batch}")
    return batch


def _invisible_ms(duration: Duration) -> int:
    """A requested invisible time in ms, within the broker's bounds (ILLEGAL_INVISIBLE_TIME)."""
    invisible_ms = _ms(duration)
    if not MIN_INVISIBLE_MS <= invisible_ms <= MAX_INVISIBLE_MS:
        raise V2Error(
            Code.ILLEGAL_INVISIBLE_TIME,
            f"invisible_duration must be {MIN_INVISIBLE_MS // 1000} s to "
            f"{MAX_INVISIBLE_MS // 3_600_000} h, got {invisible_ms} ms",
        )
    return invisible_ms


def _ok() -> definition_pb2.Status:
    return definition_pb2.Status(code=_OK, message="OK")  # type: ignore[arg-type]


_IDENTITY = definition_pb2.IDENTITY
_MD5 = definition_pb2.MD5
_DELAY = definition_pb2.DELAY
_FIFO = definition_pb2.FIFO
_NORMAL = definition_pb2.NORMAL


def to_v2_message(
    stored: StoredMessage,
    handle: str = "",
    attempt: int = 0,
    invisible_ms: int = 0,
    into: definition_pb2.Message | None = None,
) -> definition_pb2.Message:
    """A popped record as the official clients read it (reference §6, GrpcConverter); a
    pulled one (PullMessage) has no handle, attempt or invisible time. Built field by field in
    place, into ``into`` when given (a reply's ``message``: no copy of the finished message,
    nor of intermediate Timestamps; this runs once per delivery)."""
    body = plain_body(stored.body, stored.sys_flag)
    props = stored.properties
    message = definition_pb2.Message() if into is None else into
    message.body = body
    message.topic.name = stored.topic
    user = {k: v for k, v in props.items() if k not in RESERVED_PROPERTY_NAMES}
    if user:
        message.user_properties.update(user)
    sysp = message.system_properties
    sysp.message_id = props.get(PROPERTY_UNIQ_KEY, "")
    tag = props.get(PROPERTY_TAGS)
    if tag:
        sysp.tag = tag
    keys = props.get(PROPERTY_KEYS)
    if keys:
        sysp.keys.extend(keys.split(" "))
    group = props.get(PROPERTY_MESSAGE_GROUP)
    if group:
        sysp.message_group = group
    deliver_ms = props.get(PROPERTY_TIMER_DELIVER_MS)
    if deliver_ms and deliver_ms.isdigit():  # a DELAY message (the timer's copy keeps its time)
        _set_ms(sysp.delivery_timestamp, int(deliver_ms))
        sysp.message_type = _DELAY
    else:
        sysp.message_type = _FIFO if group else _NORMAL
    sysp.body_encoding = _IDENTITY
    digest = sysp.body_digest
    digest.type = _MD5
    digest.checksum = hashlib.md5(body).hexdigest().upper()
    _set_ms(sysp.born_timestamp, stored.born_timestamp or stored.store_timestamp)
    sysp.born_host = stored.born_host
    _set_ms(sysp.store_timestamp, stored.store_timestamp)
    sysp.store_host = stored.store_host
    sysp.queue_id = stored.queue_id
    sysp.queue_offset = stored.queue_offset
    if handle:
        sysp.receipt_handle = handle
        sysp.delivery_attempt = attempt
        _set_ms(sysp.invisible_duration, invisible_ms)
    return message


def _set_ms(field: Timestamp | Duration, ms: int) -> None:
    """A Timestamp or Duration field set to ``ms`` in place."""
    field.seconds = ms // 1000
    field.nanos = (ms % 1000) * 1_000_000


class V2ReceiveProcessor:
    """The pop-based half of the v2 servicer, an adapter over the core's ``PopCore``:
    ``on_delivered(topic, group, count, bytes)`` counts what leaves."""

    def __init__(
        self,
        core: PopCore,
        port: Messaging,
        on_delivered: Callable[[str, str, int, int], None] = lambda *_: None,
        property_filter: bool = True,
    ) -> None:
        self._core = core
        self._port = port
        self._on_delivered = on_delivered
        self._property_filter = property_filter  # enablePropertyFilter

    def _consumer(self, group: str) -> PopConsumer:
        """The group (auto-created when allowed), its refusals in v2 codes."""
        try:
            return self._core.consumer(group)
        except (NotFoundError, InvalidArgumentError) as exc:
            raise not_found_group(exc) from None

    def _topic(self, name: str) -> None:
        readable_topic(self._port, name)

    async def receive(
        self, request: service_pb2.ReceiveMessageRequest, time_remaining: float | None
    ) -> list[service_pb2.ReceiveMessageResponse]:
        """The replies of one ReceiveMessage call, delivery timestamp last (raises V2Error and
        store errors for the code table)."""
        topic = request.message_queue.topic.name
        self._topic(topic)
        consumer = self._consumer(request.group.name)
        tag_filter = tag_filter_of(request.filter_expression, self._property_filter)
        if request.auto_renew:
            invisible_ms = AUTO_RENEW_INVISIBLE_MS
        else:
            invisible_ms = _invisible_ms(request.invisible_duration)
        polling_ms = polling_ms_of(request.long_polling_timeout, time_remaining)
        batch = batch_of(request.batch_size)
        found = await self._core.receive(
            consumer, topic, tag_filter, batch, invisible_ms, polling_ms
        )
        response = service_pb2.ReceiveMessageResponse
        if found:
            self._on_delivered(
                topic, request.group.name, len(found), sum(len(m.message.body) for m in found)
            )
            replies = [response(status=_ok())]
            for m in found:
                reply = response()
                to_v2_message(m.message, m.receipt_handle, m.attempt, invisible_ms, reply.message)
                replies.append(reply)
        else:
            replies = [response(status=codes.status(codes.MESSAGE_NOT_FOUND, "no new message"))]
        last = response()
        _set_ms(last.delivery_timestamp, int(time.time() * 1000))
        replies.append(last)
        return replies

    async def ack(self, request: service_pb2.AckMessageRequest) -> service_pb2.AckMessageResponse:
        """Ack every entry; the top status is OK when all were, else the first failure's code
        (per-entry statuses say which)."""
        group, topic = request.group.name, request.topic.name
        self._topic(topic)
        response = service_pb2.AckMessageResponse()
        add = response.entries.add
        first_error: tuple[int, str] | None = None
        entries = request.entries
        # one journal write and fdatasync for every entry (PopService.ack_many)
        outcomes = await self._core.ack_many(group, topic, [e.receipt_handle for e in entries])
        for entry, failure in zip(entries, outcomes, strict=True):
            handle = entry.receipt_handle
            if failure is None:
                code, message = _OK, "OK"
            else:
                code, message = codes.INVALID_RECEIPT_HANDLE, str(failure)
                if first_error is None:
                    first_error = code, message
            status = add(message_id=entry.message_id, receipt_handle=handle).status
            status.code = code  # type: ignore[assignment]
            status.message = message
        status = response.status
        status.code, status.message = first_error or (_OK, "OK")  # type: ignore[assignment]
        return response

    async def change_invisible(
        self, request: service_pb2.ChangeInvisibleDurationRequest
    ) -> service_pb2.ChangeInvisibleDurationResponse:
        topic = request.topic.name
        self._topic(topic)
        invisible_ms = _invisible_ms(request.invisible_duration)
        try:
            handle = await self._core.change_invisible(
                request.group.name, topic, request.receipt_handle, invisible_ms
            )
        except InvalidReceiptHandleError as exc:
            raise V2Error(codes.INVALID_RECEIPT_HANDLE, str(exc)) from None
        response = service_pb2.ChangeInvisibleDurationResponse(receipt_handle=handle)
        status = response.status
        status.code = _OK  # type: ignore[assignment]
        status.message = "OK"
        return response

    async def forward_to_dead_letter(
        self, request: service_pb2.ForwardMessageToDeadLetterQueueRequest
    ) -> service_pb2.ForwardMessageToDeadLetterQueueResponse:
        """The consumer gave up on a delivery (a push consumer after its local attempts): copy
        it to ``%DLQ%<group>`` now and finish it for the group. The request's attempt figures
        are the client's; the broker's own count goes into the copy."""
        group, topic = request.group.name, request.topic.name
        self._topic(topic)
        consumer = self._consumer(group)  # it exists (or is auto-created) with its DLQ topic
        try:
            await self._core.dead_letter(consumer, topic, request.receipt_handle)
        except InvalidReceiptHandleError as exc:
            raise V2Error(Code.INVALID_RECEIPT_HANDLE, str(exc)) from None
        return service_pb2.ForwardMessageToDeadLetterQueueResponse(status=codes.ok())
