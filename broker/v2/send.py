"""SendMessage for the v2 protocol: validate, pick the queue, store, answer one entry per
message.

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

import asyncio
import dataclasses
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from google.protobuf.timestamp_pb2 import Timestamp
from wharf.broker.errors import InvalidArgumentError, NotFoundError
from wharf.broker.meta.topics import RESERVED_FOR_SEND, TopicConfigManager, is_system_topic
from wharf.broker.v2.codes import PUT_STATUS_CODES, PUT_STATUS_MESSAGES, Code, V2Error, code_for
from wharf.broker.v2.convert import message_group, message_id, to_input
from wharf.broker.v2.route import accepted_types
from wharf.rocketmq.v2 import definition_pb2, service_pb2
from wharf.store.codec.ids import recall_handle
from wharf.store.codec.properties import PROPERTY_TIMER_DELIVER_MS, PROPERTY_TRANSACTION_PREPARED
from wharf.store.model import MessageInput

if TYPE_CHECKING:
    from wharf.store.message_store import MessageStore

MessageType = definition_pb2.MessageType
SYSTEM_TOPIC_PREFIX = "rmq_sys_"  # RocketMQ's TopicValidator.SYSTEM_TOPIC_PREFIX (the timer's)
DEDUPE_WINDOW = 65536
MAX_BATCH = 1024
_UNSUPPORTED_TYPES = {
    MessageType.PRIORITY: "priority messages",
    MessageType.LITE: "lite topics",
}


def fifo_queue(group: str, write_queue_nums: int) -> int:
    """The queue of a FIFO message group: stable (crc32, not Python's salted hash)."""
    return zlib.crc32(group.encode()) % write_queue_nums


def message_type(message: definition_pb2.Message, group: str) -> int:
    """The message's type, checked against what it carries. UNSPECIFIED is inferred."""
    sysp = message.system_properties
    declared = sysp.message_type
    if sysp.HasField("delivery_timestamp") and declared in (
        MessageType.MESSAGE_TYPE_UNSPECIFIED,
        MessageType.DELAY,
    ):
        declared = MessageType.DELAY
    if sysp.HasField("lite_topic") and declared == MessageType.MESSAGE_TYPE_UNSPECIFIED:
        declared = MessageType.LITE
    if declared == MessageType.MESSAGE_TYPE_UNSPECIFIED:
        declared = MessageType.FIFO if group else MessageType.NORMAL
    if declared in _UNSUPPORTED_TYPES:
        raise V2Error(
            Code.UNSUPPORTED, f"{_UNSUPPORTED_TYPES[declared]} are not supported by Wharf yet"
        )
    if declared == MessageType.DELAY:
        if group:
            raise V2Error(
                Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                "a DELAY message has no message_group (FIFO messages cannot be timed)",
            )
        if not sysp.HasField("delivery_timestamp"):
            raise V2Error(Code.ILLEGAL_DELIVERY_TIME, "a DELAY message needs delivery_timestamp")
        return declared
    if declared == MessageType.TRANSACTION:
        if sysp.HasField("delivery_timestamp"):
            raise V2Error(
                Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                "a TRANSACTION message cannot carry a delivery_timestamp",
            )
        return declared
    if declared == MessageType.FIFO and not group:
        raise V2Error(Code.ILLEGAL_MESSAGE_GROUP, "a FIFO message needs a message_group")
    if declared == MessageType.NORMAL and group:
        raise V2Error(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            "a NORMAL message has no message_group (send it as FIFO)",
        )
    if declared not in (MessageType.NORMAL, MessageType.FIFO):
        raise V2Error(Code.BAD_REQUEST, f"unknown message_type {declared}")
    if sysp.HasField("delivery_timestamp"):
        raise V2Error(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            "delivery_timestamp is only for DELAY messages",
        )
    return declared


class V2SendProcessor:
    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        max_message_size: int,
        on_stored: Callable[[str, list[int]], None] | None = None,
        dedupe_window: int = DEDUPE_WINDOW,
        max_delay_s: int = 3 * 24 * 3600,
    ) -> None:
        """``on_stored(topic, body_sizes)`` is told about every stored batch (metrics)."""
        self._store = store
        self._topics = topics
        self._max_size = max_message_size
        self._on_stored = on_stored
        self._window = dedupe_window
        self._max_delay_ms = max_delay_s * 1000
        self._next_queue: dict[str, int] = {}
        self._done: OrderedDict[tuple[str, str], service_pb2.SendResultEntry] = OrderedDict()
        self._pending: dict[tuple[str, str], asyncio.Future[service_pb2.SendResultEntry]] = {}

    def _topic(self, name: str):  # type: ignore[no-untyped-def]
        if (
            is_system_topic(name)
            or name in RESERVED_FOR_SEND
            or name.startswith(SYSTEM_TOPIC_PREFIX)
        ):
            raise V2Error(
                Code.ILLEGAL_TOPIC,
                f"topic {name!r} is the broker's own: producers cannot send to it",
            )
        try:
            return self._topics.for_send(name)
        except InvalidArgumentError as exc:
            raise V2Error(Code.ILLEGAL_TOPIC, str(exc)) from None
        except NotFoundError as exc:
            raise V2Error(Code.TOPIC_NOT_FOUND, str(exc)) from None

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
        topic = self._topic(topic_name)
        if not topic.writable:
            raise V2Error(
                Code.FORBIDDEN, f"topic {topic_name!r} is not writable (perm={topic.perm})"
            )
        accepted = accepted_types(topic)
        # Validate everything first: nothing is stored for a request with a bad message.
        planned: list[tuple[str, int, MessageInput]] = []
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
                queue_id = fifo_queue(group, topic.write_queue_nums)
            else:
                if normal_queue < 0:
                    turn = self._next_queue.get(topic_name, 0)
                    self._next_queue[topic_name] = turn + 1
                    normal_queue = turn % topic.write_queue_nums
                queue_id = normal_queue
            stored = to_input(m, uid, group, self._max_size, born_host)
            if kind == MessageType.DELAY:
                stored = self._timed(stored, m.system_properties.delivery_timestamp)
            elif kind == MessageType.TRANSACTION:  # a half message until EndTransaction
                stored = dataclasses.replace(
                    stored, properties={**stored.properties, PROPERTY_TRANSACTION_PREPARED: "true"}
                )
            planned.append((uid, queue_id, stored))
        entries = await self._store_all(topic_name, planned)
        response = service_pb2.SendMessageResponse(entries=entries)
        codes = {e.status.code for e in entries}
        if len(codes) == 1:
            response.status.CopyFrom(entries[0].status)
        else:
            response.status.code = Code.MULTIPLE_RESULTS
            response.status.message = "the messages have different results: see entries"
        return response

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

    async def _store_all(
        self, topic: str, planned: Sequence[tuple[str, int, MessageInput]]
    ) -> list[service_pb2.SendResultEntry]:
        results: list[service_pb2.SendResultEntry | None] = [None] * len(planned)
        waits: list[tuple[int, asyncio.Future[service_pb2.SendResultEntry]]] = []
        # One append per queue and kind: the store makes half messages of a batch as a whole
        # (timed messages may share a batch: each record keeps its own time).
        by_queue: dict[tuple[int, bool, str | None], list[int]] = {}
        for index, (uid, queue_id, stored) in enumerate(planned):
            key = (topic, uid)
            done = self._done.get(key)
            if done is not None:
                results[index] = done
            elif key in self._pending:
                waits.append((index, self._pending[key]))
            else:
                self._pending[key] = asyncio.get_running_loop().create_future()
                props = stored.properties
                batch_key = (
                    queue_id,
                    PROPERTY_TIMER_DELIVER_MS in props,
                    props.get(PROPERTY_TRANSACTION_PREPARED),
                )
                by_queue.setdefault(batch_key, []).append(index)
        try:
            for (queue_id, _, _), indexes in by_queue.items():
                entries = await self._put(topic, queue_id, [planned[i] for i in indexes])
                for index, entry in zip(indexes, entries, strict=True):
                    results[index] = entry
        finally:
            # Cancelled half-way: the appends not started answer their waiters (a retry
            # stores them) instead of leaving them parked forever.
            for indexes in by_queue.values():
                for index in indexes:
                    future = self._pending.pop((topic, planned[index][0]), None)
                    if future is not None and not future.done():
                        future.set_exception(V2Error(Code.INTERNAL_SERVER_ERROR, "cancelled"))
                        future.exception()
        for index, future in waits:
            try:
                results[index] = await asyncio.shield(future)
            except V2Error as exc:
                results[index] = _error_entry(planned[index][0], exc.code, exc.message)
        return [r for r in results if r is not None]

    async def _put(
        self, topic: str, queue_id: int, batch: Sequence[tuple[str, int, MessageInput]]
    ) -> list[service_pb2.SendResultEntry]:
        keys = [(topic, uid) for uid, _, _ in batch]
        try:
            result = await self._store.put(topic, queue_id, [m for _, _, m in batch])
        except BaseException as exc:
            code, message = code_for(exc)
            for key in keys:
                future = self._pending.pop(key, None)
                if future is not None and not future.done():
                    future.set_exception(V2Error(code, message))
                    future.exception()  # retrieved: a lone failure is not "never retrieved"
            if not isinstance(exc, Exception):
                raise
            return [_error_entry(uid, code, message) for uid, _, _ in batch]
        code = PUT_STATUS_CODES[result.status]
        text = PUT_STATUS_MESSAGES[result.status]
        entries = []
        first = result.append.first_queue_offset
        for i, ((uid, _, stored), key) in enumerate(zip(batch, keys, strict=True)):
            entry = service_pb2.SendResultEntry(message_id=uid, offset=first + i)
            if PROPERTY_TIMER_DELIVER_MS in stored.properties:
                entry.recall_handle = recall_handle(first + i, uid)
            elif PROPERTY_TRANSACTION_PREPARED in stored.properties:
                entry.transaction_id = str(first + i)  # the half-queue offset
            entry.status.code = code  # type: ignore[assignment]
            entry.status.message = text
            entries.append(entry)
            remembered = service_pb2.SendResultEntry()
            remembered.CopyFrom(entry)
            remembered.status.code = Code.OK
            remembered.status.message = "OK (a retry of a stored message)"
            self._remember(key, remembered)
            self._pending.pop(key).set_result(remembered)
        if self._on_stored is not None:
            self._on_stored(topic, [len(m.body) for _, _, m in batch])
        return entries

    def _remember(self, key: tuple[str, str], entry: service_pb2.SendResultEntry) -> None:
        self._done[key] = entry
        if len(self._done) > self._window:
            self._done.popitem(last=False)


def _error_entry(uid: str, code: int, message: str) -> service_pb2.SendResultEntry:
    entry = service_pb2.SendResultEntry(message_id=uid)
    entry.status.code = code  # type: ignore[assignment]
    entry.status.message = message
    return entry
