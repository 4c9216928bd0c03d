"""SendMessage for the v2 protocol: validate, pick the queue, store, answer one entry per
message. An adapter over the messaging core (``broker/core/send.py``): the topic admission,
the round-robin counter (shared with wharf.v1), the tag/key/property rules, the dedupe window
and the store calls are the core's; the message types, FIFO groups, delivery times and the
codes are v2's.

- A request's messages must share one topic (RocketMQ's batch rule; BAD_REQUEST otherwise),
  at most ``MAX_BATCH`` (1024). Every message is validated before anything is stored: one bad
  message fails the request with its code and nothing is written.
- Topic: ILLEGAL_TOPIC for a bad name or one of the broker's own (``SCHEDULE_TOPIC_XXXX``,
  ``TBW102``, ``%RETRY%*``, ``%DLQ%*``, ``rmq_sys_*``: refused even once they exist, since the
  schedule and timer services read records there they wrote themselves), TOPIC_NOT_FOUND when unknown and
  autoCreateTopicEnable is off (else created, as a wharf.v1 send does), FORBIDDEN when the
  topic is not writable; MESSAGE_PROPERTY_CONFLICT_WITH_TYPE when the topic's message.type does
  not accept the message's type.
- Types: NORMAL (round-robin over the write queues, one queue per request), FIFO (queue =
  crc32(message_group) mod write queues: stable across restarts, same group -> same queue) and
  DELAY (a ``delivery_timestamp``, NORMAL routing, held by the store's timer until then: at
  most ``timerMaxDelaySec`` ahead, ILLEGAL_DELIVERY_TIME otherwise; its entry carries a
  ``recall_handle`` for RecallMessage) and TRANSACTION (a half message, invisible until
  EndTransaction commits it; its entry's ``transaction_id`` is the half-queue offset). PRIORITY
  and LITE answer UNSUPPORTED.
- De-duplication: the official producer retries with the same message_id after a lost reply.
  The last ``DEDUPE_WINDOW`` (65536) stored (topic, message_id) pairs are remembered with
  their entry, and a retry gets that entry back without a second copy; a retry that arrives
  while the first attempt is still being stored waits for it. The window is in memory: a retry
  across a broker restart may store a second copy.
- Store results: PUT_OK -> OK; FLUSH_DISK_TIMEOUT -> MASTER_PERSISTENCE_TIMEOUT (the record is
  stored: a retry gets the remembered entry with OK); store errors per codes.ERROR_CODES.
  Messages of one request that land in several queues are several appends; if some fail, each
  entry carries its own status and the response MULTIPLE_RESULTS.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from google.protobuf.timestamp_pb2 import Timestamp
from wharf.broker.core import Failed, Planned, Reason, Refused, SendCore, SendOutcome, Stored
from wharf.broker.core.send import DEDUPE_WINDOW, group_queue
from wharf.broker.frontends.v2.codes import (
    PUT_STATUS_CODES,
    PUT_STATUS_MESSAGES,
    Code,
    V2Error,
    code_for,
)
from wharf.broker.frontends.v2.convert import message_group, message_id, to_input
from wharf.broker.frontends.v2.route import accepted_types
from wharf.rocketmq.v2 import definition_pb2, service_pb2
from wharf.store.codec.ids import recall_handle
from wharf.store.codec.properties import PROPERTY_TIMER_DELIVER_MS, PROPERTY_TRANSACTION_PREPARED
from wharf.store.model import MessageInput

MessageType = definition_pb2.MessageType
# Plain ints: ``MessageType.X`` is a Python-level enum wrapper lookup (~0.9 µs each).
UNSPECIFIED: int = MessageType.Value("MESSAGE_TYPE_UNSPECIFIED")
NORMAL: int = MessageType.Value("NORMAL")
FIFO: int = MessageType.Value("FIFO")
DELAY: int = MessageType.Value("DELAY")
TRANSACTION: int = MessageType.Value("TRANSACTION")
PRIORITY: int = MessageType.Value("PRIORITY")
LITE: int = MessageType.Value("LITE")
MAX_BATCH = 1024
_UNSUPPORTED_TYPES = {
    PRIORITY: "priority messages",
    LITE: "lite topics",
}
_OK = Code.Value("OK")


fifo_queue = group_queue  # the queue of a FIFO message group (the core's, stable: crc32)


def message_type(message: definition_pb2.Message, group: str) -> int:
    """The message's type, checked against what it carries. UNSPECIFIED is inferred."""
    sysp = message.system_properties
    declared: int = sysp.message_type
    timed = sysp.HasField("delivery_timestamp")
    if declared == NORMAL and not group and not timed:  # the common case, checked at once
        return NORMAL
    if timed and declared in (UNSPECIFIED, DELAY):
        declared = DELAY
    if declared == UNSPECIFIED and sysp.HasField("lite_topic"):
        declared = LITE
    if declared == UNSPECIFIED:
        declared = FIFO if group else NORMAL
    if declared in _UNSUPPORTED_TYPES:
        raise V2Error(
            Code.UNSUPPORTED, f"{_UNSUPPORTED_TYPES[declared]} are not supported by Wharf yet"
        )
    if declared == DELAY:
        if group:
            raise V2Error(
                Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                "a DELAY message has no message_group (FIFO messages cannot be timed)",
            )
        if not timed:
            raise V2Error(Code.ILLEGAL_DELIVERY_TIME, "a DELAY message needs delivery_timestamp")
        return declared
    if declared == TRANSACTION:
        if timed:
            raise V2Error(
                Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                "a TRANSACTION message cannot carry a delivery_timestamp",
            )
        return declared
    if declared == FIFO and not group:
        raise V2Error(Code.ILLEGAL_MESSAGE_GROUP, "a FIFO message needs a message_group")
    if declared == NORMAL and group:
        raise V2Error(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            "a NORMAL message has no message_group (send it as FIFO)",
        )
    if declared not in (NORMAL, FIFO):
        raise V2Error(Code.BAD_REQUEST, f"unknown message_type {declared}")
    if timed:
        raise V2Error(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            "delivery_timestamp is only for DELAY messages",
        )
    return declared


# The core's refusals in v2 codes (``codes.code_for`` would say BAD_REQUEST for most: the
# protocol has a code per rule). With ERROR_CODES, this is v2's error table for sends.
REASON_CODES: dict[Reason, int] = {
    Reason.SHUTTING_DOWN: Code.INTERNAL_SERVER_ERROR,
    Reason.EMPTY: Code.BAD_REQUEST,
    Reason.ILLEGAL_TOPIC: Code.ILLEGAL_TOPIC,
    Reason.OWN_TOPIC: Code.ILLEGAL_TOPIC,
    Reason.TOPIC_NOT_FOUND: Code.TOPIC_NOT_FOUND,
    Reason.NOT_WRITABLE: Code.FORBIDDEN,
    Reason.NOT_READABLE: Code.FORBIDDEN,
    Reason.ILLEGAL_QUEUE: Code.BAD_REQUEST,
    Reason.BODY_EMPTY: Code.MESSAGE_BODY_EMPTY,
    Reason.BODY_TOO_LARGE: Code.MESSAGE_BODY_TOO_LARGE,
    Reason.ILLEGAL_TAG: Code.ILLEGAL_MESSAGE_TAG,
    Reason.ILLEGAL_KEY: Code.ILLEGAL_MESSAGE_KEY,
    Reason.ILLEGAL_PROPERTY: Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
    Reason.PROPERTIES_TOO_LARGE: Code.MESSAGE_PROPERTIES_TOO_LARGE,
}


def _v2_error(exc: Refused) -> V2Error:
    return V2Error(REASON_CODES[exc.reason], str(exc))


class V2SendProcessor:
    """The apache.rocketmq.v2 adapter over the messaging core (``broker/core/send.py``): v2
    messages -> store inputs (``convert.to_input``) and a plan (queue per message: the core's
    round-robin turn or FIFO group queue) -> the core's de-duplicated put -> one entry per
    message; the core's refusals in v2 codes (``REASON_CODES``), store errors by ``code_for``."""

    def __init__(
        self,
        core: SendCore,
        max_message_size: int,
        on_stored: Callable[[str, list[int]], None] | None = None,
        dedupe_window: int = DEDUPE_WINDOW,
        max_delay_s: int = 3 * 24 * 3600,
    ) -> None:
        """``on_stored(topic, body_sizes)`` is told about every stored batch (metrics).
        ``core``: THE send core of the broker (the port's ``send``), which the wharf.v1 front
        end shares (one round-robin counter per topic, one dedupe window)."""
        self._core = core
        self._core.dedupe_window = dedupe_window
        self._max_size = max_message_size
        self._on_stored = on_stored
        self._max_delay_ms = max_delay_s * 1000

    async def send(
        self, request: service_pb2.SendMessageRequest, born_host: str
    ) -> service_pb2.SendMessageResponse:
        messages = request.messages
        if not messages:
            raise V2Error(Code.BAD_REQUEST, "messages is empty: send at least one message")
        if len(messages) > MAX_BATCH:
            raise V2Error(Code.BAD_REQUEST, f"{len(messages)} messages; at most {MAX_BATCH}")
        topic_name = messages[0].topic.name
        if any(m.topic.name != topic_name for m in messages):
            raise V2Error(Code.BAD_REQUEST, "the messages of one request must share a topic")
        try:
            planned = self._plan(messages, topic_name, born_host)
        except Refused as exc:
            raise _v2_error(exc) from None
        outcomes = await self._core.put_once(topic_name, planned)
        if self._on_stored is not None:
            sizes = [
                len(item.message.body)
                for item, outcome in zip(planned, outcomes, strict=True)
                if isinstance(outcome, Stored) and not outcome.retried
            ]
            if sizes:
                self._on_stored(topic_name, sizes)
        # Entries filled in place (a response built from finished entries copies each one).
        response = service_pb2.SendMessageResponse()
        add = response.entries.add
        code, message = _fill_entry(add(), outcomes[0])
        mixed = False
        for outcome in outcomes[1:]:
            mixed |= _fill_entry(add(), outcome)[0] != code
        status = response.status
        if mixed:
            status.code = Code.MULTIPLE_RESULTS
            status.message = "the messages have different results: see entries"
        else:
            status.code = code  # type: ignore[assignment]
            status.message = message
        return response

    def _plan(
        self, messages: Sequence[definition_pb2.Message], topic_name: str, born_host: str
    ) -> list[Planned]:
        """Validate everything first: nothing is stored for a request with a bad message."""
        core = self._core
        topic = core.topic(topic_name, own_topics=False)
        accepted = accepted_types(topic)
        planned: list[Planned] = []
        normal_queue = -1  # one round-robin turn per request: its NORMAL messages are one append
        for m in messages:
            group = message_group(m)
            kind = message_type(m, group)
            if kind not in accepted:
                raise V2Error(
                    Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                    f"topic {topic_name!r} does not accept {MessageType.Name(kind)} messages",  # type: ignore[arg-type]
                )
            uid = message_id(m)
            if group:
                queue_id = group_queue(group, topic.write_queue_nums)
            else:
                if normal_queue < 0:
                    normal_queue = core.next_queue(topic)
                queue_id = normal_queue
            stored = to_input(m, uid, group, self._max_size, born_host)
            if kind == DELAY:
                stored = self._timed(stored, m.system_properties.delivery_timestamp)
            elif kind == TRANSACTION:  # a half message until EndTransaction
                stored = dataclasses.replace(
                    stored, properties={**stored.properties, PROPERTY_TRANSACTION_PREPARED: "true"}
                )
            planned.append(Planned(uid, queue_id, stored))
        core.check_inputs([item.message for item in planned])
        return planned

    def _timed(self, stored: MessageInput, stamp: Timestamp) -> MessageInput:
        deliver_ms = stamp.seconds * 1000 + stamp.nanos // 1_000_000
        ahead_ms = deliver_ms - int(time.time() * 1000)
        if ahead_ms > self._max_delay_ms:
            raise V2Error(
                Code.ILLEGAL_DELIVERY_TIME,
                f"delivery_timestamp is {ahead_ms // 1000} s ahead; the limit is "
                f"timerMaxDelaySec = {self._max_delay_ms // 1000} s",
            )
        return dataclasses.replace(
            stored, properties={**stored.properties, PROPERTY_TIMER_DELIVER_MS: str(deliver_ms)}
        )


def _fill_entry(entry: service_pb2.SendResultEntry, outcome: SendOutcome) -> tuple[int, str]:
    """A core outcome -> its v2 entry (a retry answered from the window: OK); the entry's
    (code, message)."""
    if isinstance(outcome, Failed):
        code, message = code_for(outcome.error)
        entry.message_id = outcome.message_id
    else:
        entry.message_id = outcome.message_id
        entry.offset = outcome.queue_offset
        if outcome.timed:
            entry.recall_handle = recall_handle(outcome.queue_offset, outcome.message_id)
        elif outcome.prepared:
            entry.transaction_id = str(outcome.queue_offset)  # the half-queue offset
        if outcome.retried:
            code, message = _OK, "OK (a retry of a stored message)"
        else:
            code, message = PUT_STATUS_CODES[outcome.status], PUT_STATUS_MESSAGES[outcome.status]
    status = entry.status
    status.code = code  # type: ignore[assignment]
    status.message = message
    return code, message
