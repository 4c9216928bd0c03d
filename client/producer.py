"""Asyncio producer with auto-batching over a bidi stream, retries and per-call deadlines.

    async with Producer("127.0.0.1:8081") as producer:
        result = await producer.send("orders", b"hello", tags="paid", keys=("order-17",))
        results = await asyncio.gather(*(producer.send("orders", b"x") for _ in range(10_000)))

Many concurrent ``send()`` calls share multi-message requests on ``SendMessageStream``
(see :mod:`wharf.client.batcher`); every call still gets its own :class:`SendResult`. Each message
carries a client-generated UNIQ_KEY, so a retried send is recognisable downstream
(delivery is at-least-once: a retry after a lost reply may store a message twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import logging
import random
from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any, Unpack

import grpc
from wharf.client.batcher import AutoBatcher
from wharf.client.cluster import ClusterSender
from wharf.client.compression import COMPRESS_THRESHOLD
from wharf.client.connection import Connection, ConnectionOptions, connection_of
from wharf.client.errors import (
    ClientClosedError,
    DeadlineExceededError,
    InvalidArgumentError,
    WharfError,
    error_for_status_number,
    from_rpc_error,
)
from wharf.client.ids import new_unique_id as _next_unique_id
from wharf.client.ids import new_unique_ids
from wharf.client.message import (
    TIMER_DELIVER_MS,
    TRANSACTION_PREPARED,
    Message,
    SendResult,
    SendStatus,
    timer_property,
    to_wire,
)
from wharf.client.record_encoder import RecordEncoder, column_results, results_maker, results_of
from wharf.client.route import RouteCache
from wharf.client.selector import MessageQueueSelector
from wharf.client.send_stream import SendStream, group_field, topic_field
from wharf.client.stream_mux import StreamSlot
from wharf.client.transaction import CheckListener, Transaction, TransactionChecker
from wharf.v1 import common_pb2, messaging_pb2, messaging_pb2_grpc

log = logging.getLogger(__name__)

_FIRST, _SECOND = itemgetter(0), itemgetter(1)
_WireMessage = common_pb2.Message
_STATUS_OF = {status.value: status for status in SendStatus}.get
_new_tuple = tuple.__new__


def _result_of(entry: messaging_pb2.SendResultEntry, topic: str) -> SendResult:
    """``SendResult.from_entry`` for the per-message hot path: building the tuple directly
    skips the NamedTuple's Python-level ``__new__`` (about 2x cheaper)."""
    return _new_tuple(  # type: ignore[no-any-return]
        SendResult,
        (
            _STATUS_OF(entry.status, SendStatus.UNKNOWN),
            entry.msg_id,
            entry.offset_msg_id,
            entry.queue_id,
            entry.queue_offset,
            topic,
        ),
    )


# (topic, pinned queue or None, kind): records (the fast path, kind "") and proto messages
# (delayed, timed and transactional ones, which the broker re-addresses) never share a request,
# nor do messages of different kinds (a batch is one append: one delay-level queue, all half
# messages or none); timed ones share batches (each record keeps its own time).
_BatchKey = tuple[str, int | None, str]


def _message_kind(delay_level: int, properties: Mapping[str, str] | None) -> str:
    if delay_level:
        return f"delay{delay_level}"
    if properties:
        if properties.get(TRANSACTION_PREPARED) == "true":
            return "half"
        if TIMER_DELIVER_MS in properties:
            return "timed"
    return ""


class Producer:
    """Send messages to a Wharf broker.

    Args:
        endpoints: ``host:port`` of the broker (or give ``connection``).
        group: producer group name (reported in heartbeats / requests).
        send_timeout: default deadline of one ``send`` call in seconds, retries included.
        retry_times: retries on retriable errors (RocketMQ's retryTimesWhenSendFailed = 2).
        linger_ms: how long an open batch waits for more messages (0 = next loop turn).
        batch_max_messages / batch_max_bytes: close a batch when it reaches either.
        max_in_flight: outstanding batch requests per stream before batches queue up.
        streams: number of SendMessageStream calls, each on its own connection.
        transport: ``"stream"`` (bidi, default) or ``"unary"`` (one SendMessage per batch).
        compress_threshold: bodies larger than this are zlib-compressed (4 KiB).
        connection: where and how to dial (``wharf.client.connection.Connection``):
            one broker or a cluster's NameServers, the keys, TLS. The keyword arguments
            ``endpoints`` (positional too), ``namesrv``, ``access_key`` / ``secret_key``,
            ``tls`` / ``ca_file`` / ``cert_file`` / ``key_file`` and ``namesrv_tls``
            (``ConnectionOptions``) still build one; give one or the other.
            With ``namesrv`` (a cluster's NameServers ``"host:port;host2:port2"``):
            sends spread over every broker group of the topic, avoid failing ones and retry on
            another group within the deadline (``wharf.client.cluster``); transactions end on
            the broker that stored each half, a ``transaction_checker`` answers every master
            of ``transaction_topics``, ``recall`` asks the masters of the topic.
    """

    def __init__(
        self,
        endpoints: str | Connection | None = None,
        *,
        connection: Connection | None = None,
        group: str = "DEFAULT_PRODUCER",
        send_timeout: float = 3.0,
        retry_times: int = 2,
        linger_ms: float = 0.0,
        batch_max_messages: int = 512,
        batch_max_bytes: int = 1 << 20,
        max_in_flight: int = 2,
        streams: int = 1,
        transport: str = "stream",
        compress_threshold: int = COMPRESS_THRESHOLD,
        max_buffered: int = 65536,
        transaction_checker: TransactionChecker | None = None,
        transaction_topics: Iterable[str] = (),
        **connect: Unpack[ConnectionOptions],
    ) -> None:
        self.connection = connection_of(endpoints, connection, connect)
        self._cluster: ClusterSender[Producer] | None = None
        if self.connection.namesrv:
            if transaction_checker is not None and not transaction_topics:
                raise InvalidArgumentError("a transaction_checker needs transaction_topics")
            options = dict(
                transaction_checker=transaction_checker,
                transaction_topics=list(transaction_topics),
                group=group, send_timeout=send_timeout, retry_times=0, linger_ms=linger_ms,
                batch_max_messages=batch_max_messages, batch_max_bytes=batch_max_bytes,
                max_in_flight=max_in_flight, streams=streams, transport=transport,
                compress_threshold=compress_threshold, max_buffered=max_buffered,
            )  # fmt: skip
            self._cluster = ClusterSender(
                self.connection,
                lambda address: Producer(connection=self.connection.to(address), **options),  # type: ignore[arg-type]
                send_timeout,
                retry_times,
            )
        if transport not in ("stream", "unary"):
            raise InvalidArgumentError(f"transport must be 'stream' or 'unary', got {transport!r}")
        if streams < 1:
            raise InvalidArgumentError("streams must be >= 1")
        self.endpoints = self.connection.endpoints
        self.tls = self.connection.tls
        self.group = group
        self.send_timeout = send_timeout
        self.retry_times = retry_times
        self.compress_threshold = compress_threshold
        self._encoder = RecordEncoder(compress_threshold)
        self._transport = transport
        self._stream_count = streams
        self._batcher_options: dict[str, Any] = dict(
            linger_s=linger_ms / 1000.0,
            max_messages=batch_max_messages,
            max_bytes=batch_max_bytes,
            max_in_flight=max_in_flight * streams,
            max_buffered=max_buffered,
        )
        self._channels: list[grpc.aio.Channel] = []
        self._stubs: list[messaging_pb2_grpc.MessagingServiceStub] = []
        self._streams: list[StreamSlot[SendStream]] = []  # one per channel, reopened on use
        self._next_stream = 0
        self._heads: dict[_BatchKey, bytes] = {}  # encoded request fields other than messages
        # How batches of several topics share a request: "columns" (``batch_topics``),
        # "parts" for a broker without columns, "" for one without either (one each).
        self._many = "columns"
        self._group_field = group_field(self.group)
        self._topic_fields: dict[str, bytes] = {}  # encoded batch_topics entries, bounded
        self._batcher: AutoBatcher | None = None
        self._routes: RouteCache | None = None
        self._oneway_tasks: set[asyncio.Future[Any]] = set()
        self._closed = False
        self._checker = transaction_checker
        self._transaction_topics = list(transaction_topics)
        self._check_listener: CheckListener | None = None

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        if self._cluster is not None:
            # A cluster's clients start on first use, except those answering check-backs:
            # one on every master holding the transaction topics, following the routes.
            if self._checker is not None:
                await self._cluster.keep_connected(self._transaction_topics)
            return
        if self._stubs:
            return
        for _ in range(self._stream_count):
            channel = self.connection.open_channel(dedicated=self._stream_count > 1)
            self._channels.append(channel)
            self._stubs.append(messaging_pb2_grpc.MessagingServiceStub(channel))
            self._streams.append(StreamSlot(functools.partial(SendStream, channel)))
        self._routes = RouteCache(self._stubs[0])
        self._batcher = AutoBatcher(
            self._send_request,
            send_many=self._send_parts if self._transport == "stream" else None,
            mergeable=self._mergeable,
            **self._batcher_options,
        )
        if self._checker is not None:
            self._check_listener = CheckListener(
                self._stubs[0], self._transaction_topics, self._checker, self.send_timeout,
                self.group,
            )  # fmt: skip
            self._check_listener.start()

    async def recall(self, topic: str, recall_handle: str) -> str:
        """Cancel a timed message (sent with ``deliver_at`` / ``delay``) before it is due, by
        its ``SendResult.recall_handle``; returns its message id. NotFoundError once it was
        delivered or recalled."""
        if self._cluster is not None:  # the handle names its message: only its broker has it
            return await self._cluster.first_answer(topic, lambda p: p.recall(topic, recall_handle))
        self._require_started()
        request = messaging_pb2.RecallMessageRequest(topic=topic, recall_handle=recall_handle)
        try:
            reply = await self._stubs[0].RecallMessage(request, timeout=self.send_timeout)
        except grpc.aio.AioRpcError as exc:
            raise from_rpc_error(exc) from None
        return str(reply.msg_id)

    def transaction(self) -> Transaction:
        """Half messages resolved together: ``async with producer.transaction() as tx:
        await tx.send(...)`` commits on a clean exit and rolls back when the block raises
        (``wharf.client.transaction``)."""
        if self._cluster is None:
            self._require_started()
        return Transaction(self._send_routed, self.send_timeout)

    async def _send_routed(
        self, topic: str, body: bytes | str, **options: Any
    ) -> tuple[SendResult, messaging_pb2_grpc.MessagingServiceStub]:
        """``send``, and the stub of the broker that stored the message."""
        if self._cluster is None:
            return await self.send(topic, body, **options), self._stubs[0]
        queue_id = options.pop("queue_id", None)
        selector = options.pop("selector", None)
        selector_arg = options.pop("selector_arg", None)
        deadline_s = options.pop("deadline_s", None)
        stored_on: list[Producer] = []

        async def call(p: Producer, q: int | None, budget: float) -> SendResult:
            result = await p.send(topic, body, queue_id=q, deadline_s=budget, **options)
            stored_on.append(p)
            return result

        result = await self._cluster.send(topic, call, queue_id, selector, selector_arg, deadline_s)
        return result, stored_on[-1]._stubs[0]

    async def close(self) -> None:
        """Send what is buffered, wait for the answers, then close the connections."""
        if self._closed:
            return
        self._closed = True
        if self._cluster is not None:
            await self._cluster.close()
            return
        if self._check_listener is not None:
            await self._check_listener.close()
        if self._batcher is not None:
            try:
                async with asyncio.timeout(self.send_timeout + 1):
                    await self._batcher.drain()
            except TimeoutError:
                log.warning("producer closed with unanswered messages")
        for slot in self._streams:
            stream = slot.take()
            if stream is not None:
                await stream.close()
        for channel in self._channels:
            await channel.close(None)

    # ------------------------------------------------------------------ public API
    async def send(
        self,
        topic: str,
        body: bytes | str,
        *,
        tags: str | None = None,
        keys: Iterable[str] = (),
        properties: Mapping[str, str] | None = None,
        delay_level: int = 0,
        queue_id: int | None = None,
        selector: MessageQueueSelector | None = None,
        selector_arg: object = None,
        deadline_s: float | None = None,
        deliver_at: float | dt.datetime | None = None,
        delay: float | None = None,
    ) -> SendResult:
        """Send one message and wait until the broker stored it.

        ``queue_id`` pins a queue; ``selector`` + ``selector_arg`` pick one from the topic's
        route (ordered messages: the same arg always lands in the same queue). ``deliver_at``
        (a datetime, or seconds since the epoch) or ``delay`` (seconds from now) makes the
        message visible to consumers only from then on (the broker's timer: at most
        ``timerMaxDelaySec`` ahead, 3 days by default; the result's queue fields are then the
        timer's). Raises a :class:`~client.errors.WharfError` subclass after ``retry_times``
        retries."""
        if deliver_at is not None or delay is not None:
            properties = {**(properties or {}), **timer_property(deliver_at, delay)}
        if self._cluster is not None:
            return await self._cluster.send(
                topic,
                lambda p, q, budget: p.send(
                    topic, body, tags=tags, keys=keys, properties=properties,
                    delay_level=delay_level, queue_id=q, deadline_s=budget,
                ),
                queue_id, selector, selector_arg, deadline_s,
            )  # fmt: skip
        if (
            body.__class__ is bytes
            and tags is None
            and not keys
            and not properties
            and not delay_level
            and selector is None
            and 0 < len(body) <= self.compress_threshold
        ):
            # Fast path (a bare body, the common high-rate case): no option checks.
            uid = _next_unique_id()
            item: Any = (self._encoder.encode_bare(self._encoder.tail(topic), body, uid), uid)
            key: _BatchKey = (topic, queue_id, "")
        else:
            item, key = self._item_of(topic, body, tags, keys, properties, delay_level, queue_id)
            if selector is not None:
                key = (topic, await self._select_queue(topic, selector, selector_arg), key[2])
        # The retry loop is inlined (no helper coroutine): one coroutine frame per send.
        batcher = self._batcher
        if batcher is None or self._closed:
            batcher = self._require_started()
        deadline = batcher.loop_time() + (deadline_s or self.send_timeout)
        nbytes = len(item[0]) if not key[2] else len(item.body)
        attempt = 0
        answer: WharfError | None = None  # the broker's last refusal (the deadline names it)
        while True:
            if batcher.buffered >= batcher.max_buffered:
                await batcher.wait_for_space()
            # The batcher enforces the deadline with one timer per batch: a timer (or a
            # wait_for task) per message dominated the client's CPU at high rates.
            future = batcher.submit(key, item, nbytes, deadline)
            try:
                return await future  # type: ignore[no-any-return]
            except WharfError as exc:
                attempt += 1
                if not exc.retriable or attempt > self.retry_times:
                    raise
                answer = exc if exc.from_broker else answer
                await self._backoff(attempt, deadline, exc, answer)

    def _item_of(
        self,
        topic: str,
        body: bytes | str,
        tags: str | None,
        keys: Iterable[str],
        properties: Mapping[str, str] | None,
        delay_level: int,
        queue_id: int | None,
        flag: int = 0,
        unique_id: str | None = None,
    ) -> tuple[Any, _BatchKey]:
        """A batcher item and its key: a (record, unique id) pair, or a proto message for a
        delayed, timed or transactional message (the broker re-addresses those, so they travel
        as messages)."""
        uid = unique_id or _next_unique_id()
        kind = _message_kind(delay_level, properties)
        if kind:
            wire = to_wire(
                body,
                tags=tags,
                keys=keys,
                properties=properties,
                delay_level=delay_level,
                flag=flag,
                compress_threshold=self.compress_threshold,
                unique_id=uid,
            )
            return wire, (topic, queue_id, kind)
        record = self._encoder.encode(
            topic, body, uid, tags=tags, keys=keys, properties=properties, flag=flag
        )
        return (record, uid), (topic, queue_id, "")

    async def send_message(self, message: Message, **options: Any) -> SendResult:
        """Send a :class:`Message` (same options as :meth:`send`)."""
        return await self.send(
            message.topic,
            message.body,
            tags=message.tags,
            keys=message.keys,
            properties=message.properties,
            delay_level=message.delay_level,
            **options,
        )

    async def send_oneway(
        self,
        topic: str,
        body: bytes | str,
        *,
        tags: str | None = None,
        keys: Iterable[str] = (),
        properties: Mapping[str, str] | None = None,
        queue_id: int | None = None,
    ) -> None:
        """Fire and forget: no result, no retry, errors only logged (RocketMQ's sendOneway)."""
        if self._cluster is not None:
            task = asyncio.ensure_future(
                self.send(topic, body, tags=tags, keys=keys, properties=properties,
                          queue_id=queue_id)
            )  # fmt: skip
            self._oneway_tasks.add(task)
            task.add_done_callback(self._oneway_tasks.discard)
            task.add_done_callback(_log_oneway_failure)
            return
        batcher = self._require_started()
        item, key = self._item_of(topic, body, tags, keys, properties, 0, queue_id)
        await batcher.wait_for_space()
        deadline = asyncio.get_running_loop().time() + self.send_timeout
        future = batcher.submit(key, item, len(item[0]), deadline)
        future.add_done_callback(_log_oneway_failure)

    async def send_batch(
        self,
        topic: str,
        messages: Sequence[bytes | str | Message],
        *,
        queue_id: int | None = None,
        deadline_s: float | None = None,
    ) -> list[SendResult]:
        """Send many messages of one topic together: one store append into one queue
        (consecutive queue offsets), possibly sharing a request with other sends.

        Items are bodies or :class:`Message` objects (their ``topic`` must match). A batch of
        delayed messages must share one delay level."""
        if not messages:
            raise InvalidArgumentError("send_batch needs at least one message")
        if self._cluster is not None:
            return await self._cluster.send(
                topic,
                lambda p, q, budget: p.send_batch(topic, messages, queue_id=q, deadline_s=budget),
                queue_id,
                deadline_s=deadline_s,
            )
        batcher = self._require_started()
        items, key = self._batch_items(topic, messages, queue_id)
        nbytes = sum(len(item[0]) for item in items) if not key[2] else 0
        deadline = batcher.loop_time() + (deadline_s or self.send_timeout)
        attempt = 0
        answer: WharfError | None = None  # the broker's last refusal (the deadline names it)
        while True:
            if batcher.buffered >= batcher.max_buffered:
                await batcher.wait_for_space()
            try:
                return await batcher.submit_group(key, items, nbytes, deadline)  # type: ignore[no-any-return]
            except WharfError as exc:
                attempt += 1
                if not exc.retriable or attempt > self.retry_times:
                    raise
                answer = exc if exc.from_broker else answer
                await self._backoff(attempt, deadline, exc, answer)

    # ------------------------------------------------------------------ internals
    def _batch_items(
        self, topic: str, messages: Sequence[bytes | str | Message], queue_id: int | None
    ) -> tuple[list[Any], _BatchKey]:
        """send_batch's items and their one batch key (a batch is one append into one queue:
        immediate records and delayed messages cannot share it)."""
        ids = new_unique_ids(len(messages))
        threshold = self.compress_threshold
        if all(m.__class__ is bytes and 0 < len(m) <= threshold for m in messages):
            # Fast path: bare bodies (the bulk-loading case), no per-message option checks.
            encoder = self._encoder
            bodies: Sequence[bytes] = messages  # type: ignore[assignment]
            records = encoder.encode_bare_many(encoder.tail(topic), bodies, ids)
            return list(zip(records, ids, strict=True)), (topic, queue_id, "")
        items: list[Any] = []
        key: _BatchKey | None = None
        for message, uid in zip(messages, ids, strict=True):
            item, item_key = self._batch_item_of(topic, message, uid, queue_id)
            if key is None:
                key = item_key
            elif item_key != key:
                raise InvalidArgumentError(
                    "a batch is one append into one queue: delayed and immediate messages "
                    "cannot be mixed; send them in separate batches"
                )
            items.append(item)
        assert key is not None  # messages is not empty
        return items, key

    def _batch_item_of(
        self, topic: str, item: bytes | str | Message, unique_id: str, queue_id: int | None
    ) -> tuple[Any, _BatchKey]:
        if isinstance(item, Message):
            if item.topic != topic:
                raise InvalidArgumentError(f"batch message topic {item.topic!r} != {topic!r}")
            return self._item_of(
                topic,
                item.body,
                item.tags,
                item.keys,
                item.properties,
                item.delay_level,
                queue_id,
                flag=item.flag,
                unique_id=unique_id,
            )
        return self._item_of(topic, item, None, (), None, 0, queue_id, unique_id=unique_id)

    def _require_started(self) -> AutoBatcher:
        if self._closed:
            raise ClientClosedError("producer is closed")
        if self._batcher is None:
            raise ClientClosedError("producer not started: use 'async with' or await start()")
        return self._batcher

    async def _select_queue(self, topic: str, selector: MessageQueueSelector, arg: object) -> int:
        self._require_started()
        assert self._routes is not None
        route = await self._routes.get(topic)
        return selector.select(route.write_queues(), arg).queue_id

    async def _backoff(
        self, attempt: int, deadline: float, error: WharfError, answer: WharfError | None = None
    ) -> None:
        """Sleep before retry ``attempt`` after ``error``; DeadlineExceededError if the send's
        deadline comes first, naming ``answer``, the broker's last refusal if any ("broker
        busy: ..."), else ``error``: why the time was spent."""
        loop = asyncio.get_running_loop()
        delay = min(0.05 * (2 ** (attempt - 1)), 1.0) * (0.5 + random.random())
        if loop.time() + delay >= deadline:
            why = answer or error
            raise DeadlineExceededError(
                f"send deadline reached while backing off after: {why}"
            ) from why
        await asyncio.sleep(delay)
        if error.code == "UNAVAILABLE":
            # The connection is down: wait (within the deadline) until it is back instead of
            # spending the remaining retries on fail-fast calls during the reconnect.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(deadline - 0.05):
                    await asyncio.gather(*(c.channel_ready() for c in self._channels))

    async def _send_request(self, key: _BatchKey, items: list[Any]) -> list[SendResult]:
        """One request for a batch of items; one SendResult per item, in order."""
        topic, queue_id, as_messages = key
        if queue_id is None:
            index = self._next_stream
            self._next_stream = (index + 1) % len(self._stubs)
        else:
            # A pinned queue (ordered messages) always uses the same stream, so its batches
            # reach the broker in the order they were sent.
            index = hash(key) % len(self._stubs)
        if as_messages:
            entries = await self._send_messages(index, key, items)
            return [_result_of(entry, topic) for entry in entries]
        records = [item[0] for item in items]
        unique_ids = [item[1] for item in items]
        if self._transport == "unary":
            request = self._request_of(key)
            request.records = b"".join(records)
            response = await self._send_unary(index, request)
        else:
            stream = self._stream(index)
            response = _checked(await stream.request_records(self._head_of(key), records))
        return results_of(response, topic, records, unique_ids)

    def _mergeable(self, key: _BatchKey) -> bool:
        """Batches that may share a request with other topics' (``parts``): records for a
        queue the broker picks. A pinned queue's batches keep their own requests on their
        own stream (ordered messages); messages (delayed, timed, half) keep theirs."""
        return bool(self._many) and key[1] is None and not key[2]

    async def _send_parts(
        self, batches: list[tuple[_BatchKey, list[Any]]]
    ) -> list[list[SendResult] | Exception]:
        """Several topics' batches (``_mergeable`` keys) in one request, in columns (or one
        part each); per batch its results or its own error."""
        index = self._next_stream
        self._next_stream = (index + 1) % len(self._stubs)
        stream = self._stream(index)
        try:
            if self._many == "columns":
                # Passes of C (map) over the ~32 batches of a request at 256 topics.
                topics = list(map(_FIRST, map(_FIRST, batches)))
                item_lists = list(map(_SECOND, batches))
                known = list(map(self._topic_fields.get, topics))
                fields = known if None not in known else list(map(self._topic_field, topics))
                response = _checked(
                    await stream.request_columns(self._group_field, fields, item_lists)  # type: ignore[arg-type]
                )
                return self._column_outcomes(batches, topics, item_lists, response)
            records_of = [[item[0] for item in items] for _, items in batches]
            parts = [
                (self._head_of(key), records)
                for (key, _), records in zip(batches, records_of, strict=True)
            ]
            response = _checked(await stream.request_parts(parts))
        except InvalidArgumentError:
            # A broker without this form read a request of no topic: the older form from now
            # (columns -> parts -> one request per batch).
            self._many = "parts" if self._many == "columns" else ""
            if self._many:
                return await self._send_parts(batches)
            fallback: list[list[SendResult] | Exception] = []
            for key, items in batches:
                try:
                    fallback.append(await self._send_request(key, items))
                except WharfError as exc:
                    fallback.append(exc)
            return fallback
        if len(response.parts) != len(batches):
            raise WharfError(
                f"broker answered {len(response.parts)} parts for {len(batches)} batches"
            )
        outcomes: list[list[SendResult] | Exception] = []
        for (key, items), records, part in zip(batches, records_of, response.parts, strict=True):
            try:
                outcomes.append(
                    results_of(_checked(part), key[0], records, [item[1] for item in items])
                )
            except WharfError as exc:
                outcomes.append(exc)
        return outcomes

    @staticmethod
    def _column_outcomes(
        batches: list[tuple[_BatchKey, list[Any]]],
        topics: list[str],
        item_lists: list[list[Any]],
        response: messaging_pb2.SendMessageResponse,
    ) -> list[list[SendResult] | Exception]:
        """Per batch its results from the reply's batch columns, or its error."""
        queue_ids = list(response.batch_queue_ids)  # lists: an item of a repeated field costs more
        if len(queue_ids) != len(batches):
            raise WharfError(f"broker answered {len(queue_ids)} batches of the {len(batches)} sent")
        firsts = list(response.batch_first_queue_offsets)
        offsets = list(response.batch_first_commit_log_offsets)
        errors = response.batch_errors
        if not errors:  # the usual reply: every batch stored, results in one compiled call
            sent = sum(map(len, item_lists))
            if sent != response.count:
                raise WharfError(f"broker stored {response.count} records of the {sent} sent")
            return column_results(  # type: ignore[return-value]
                response.status, response.store_host, queue_ids, firsts, offsets, topics,
                item_lists,
            )  # fmt: skip
        results = results_maker(response.status, response.store_host)
        outcomes: list[list[SendResult] | Exception] = []
        stored = 0
        for i, ((key, _), items) in enumerate(zip(batches, item_lists, strict=True)):
            if i in errors:
                error = errors[i]
                outcomes.append(error_for_status_number(error.code, error.message))
                continue
            stored += len(items)
            outcomes.append(
                results(
                    queue_ids[i],
                    firsts[i],
                    offsets[i],
                    key[0],
                    [item[0] for item in items],
                    [item[1] for item in items],
                )
            )
        if stored != response.count:
            raise WharfError(f"broker stored {response.count} records of the {stored} sent")
        return outcomes

    def _topic_field(self, topic: str) -> bytes:
        field = self._topic_fields.get(topic)
        if field is None:
            if len(self._topic_fields) >= 4096:  # bounded: one entry per topic in use
                self._topic_fields.clear()
            field = self._topic_fields[topic] = topic_field(topic)
        return field

    async def _send_messages(
        self, index: int, key: _BatchKey, wires: list[common_pb2.Message]
    ) -> list[messaging_pb2.SendResultEntry]:
        """The message form (delayed messages): each message a proto, one entry each."""
        if self._transport == "unary":
            request = self._request_of(key)
            request.messages.extend(wires)
            return list((await self._send_unary(index, request)).results)
        response = await self._stream(index).request_encoded(self._head_of(key), wires)
        return list(_checked(response).results)

    def _stream(self, index: int) -> SendStream:
        return self._streams[index].get()

    def _head_of(self, key: _BatchKey) -> bytes:
        """The request's fixed fields, encoded once per (topic, queue): the stream appends
        request_id and the payload (building a request proto per batch copied every message)."""
        head = self._heads.get(key)
        if head is None:
            if len(self._heads) >= 4096:  # bounded: one entry per (topic, queue) in use
                self._heads.clear()
            head = self._heads[key] = self._request_of(key).SerializeToString()
        return head

    def _request_of(self, key: _BatchKey) -> messaging_pb2.SendMessageRequest:
        topic, queue_id, _ = key
        return messaging_pb2.SendMessageRequest(
            topic=topic, queue_id=queue_id, producer_group=self.group
        )

    async def _send_unary(
        self, index: int, request: messaging_pb2.SendMessageRequest
    ) -> messaging_pb2.SendMessageResponse:
        try:
            return await self._stubs[index].SendMessage(request, timeout=self.send_timeout)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None


def _checked(response: messaging_pb2.SendMessageResponse) -> messaging_pb2.SendMessageResponse:
    """A stream reply, or the typed error it carries (streams report errors per request)."""
    if response.HasField("error") and response.error.code != 0:
        raise error_for_status_number(response.error.code, response.error.message)
    return response


def _log_oneway_failure(future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.debug("oneway send failed: %s", future.exception())
