"""SendMessage calls merged into one forwarded request, the front's saving: the broker pays
one wire call, one validation pass and one append for the calls that arrived while the
previous request was out, instead of one each.

Measured (tests/bench/v2_ceiling: Apache's Java client, 64 threads of 1 KiB sync sends, one
front): the broker's CPU a message fell from ~580 us forwarded call by call to ~400-450 us at
the 2.6-3.3 calls a request that load makes, and grows cheaper as load grows the batches.

Which calls merge: those whose messages are all NORMAL (no message_group, delivery time or
lite topic; TRANSACTION, FIFO and DELAY keep their own request and the broker's routing),
to one topic, with the same headers but the request id (the same client, namespace and
signature), while ``inflight`` merged requests of that key are already out. A merged request
is one append into one queue (one round-robin turn, RocketMQ's batch rule) holding at most
``MAX_BATCH`` messages and ``max_bytes`` of request.

Answers: the response's entries are split back in order, each call getting its own and its
status (one code for all its entries, else MULTIPLE_RESULTS, as the broker answers one
request). A merged request refused as a whole (a bad message among them: the broker stores
nothing then) is forwarded again call by call, so each caller gets its own answer and only the
bad call fails. A transport error fails every call of the request; the official producer
retries with the same message ids, which the broker's dedupe window answers once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

import grpc
from grpc import aio
from wharf.broker.fronts.forward import SEND, Headers, headers_of
from wharf.client.wire_channel import WireChannel
from wharf.rocketmq.v2 import definition_pb2, service_pb2

__all__ = ["MAX_BATCH", "Coalescer"]

MAX_BATCH = 1024  # messages a request may carry (broker/frontends/v2/send.py MAX_BATCH)
_NORMAL = definition_pb2.MessageType.Value("NORMAL")
_UNSPECIFIED = definition_pb2.MessageType.Value("MESSAGE_TYPE_UNSPECIFIED")
_MERGED_ANSWERED = (definition_pb2.OK, definition_pb2.MULTIPLE_RESULTS)
_PER_CALL = frozenset({"x-mq-request-id"})
_MIXED = "the messages have different results: see entries"


def plain_topic(request: service_pb2.SendMessageRequest) -> tuple[str, str] | None:
    """The (namespace, topic) of a request whose messages are all NORMAL and to one topic:
    what may share an append with others. None otherwise."""
    topic = None
    for m in request.messages:
        sysp = m.system_properties
        if (
            sysp.message_type not in (_NORMAL, _UNSPECIFIED)
            or sysp.HasField("message_group")
            or sysp.HasField("delivery_timestamp")
            or sysp.HasField("lite_topic")
        ):
            return None
        named = (m.topic.resource_namespace, m.topic.name)
        if topic is None:
            topic = named
        elif named != topic:
            return None
    return topic


@dataclass(slots=True)
class _Call:
    request: service_pb2.SendMessageRequest
    raw: bytes
    headers: Headers
    timeout: float | None
    answer: asyncio.Future[bytes]


class Coalescer:
    """The SendMessage handler of a front (the module docstring). ``merged`` and ``requests``
    count the calls and the forwarded requests they made (their ratio: the batching)."""

    def __init__(self, channel: WireChannel, max_bytes: int, inflight: int = 1) -> None:
        self._stub = channel.unary_unary(SEND)
        self._max_bytes = max_bytes
        self._inflight = inflight
        self._waiting: dict[Any, list[_Call]] = {}
        self._out: dict[Any, int] = {}  # merged requests out, by key
        self._tasks: set[asyncio.Task[None]] = set()
        self.merged = 0
        self.requests = 0

    async def send(self, raw: bytes, context: aio.ServicerContext) -> bytes:
        headers = headers_of(context)
        request = service_pb2.SendMessageRequest.FromString(raw)
        topic = plain_topic(request)
        timeout = context.time_remaining()
        if topic is None or len(raw) >= self._max_bytes:
            call = self._forward_one(raw, headers, timeout)
        else:
            key = (topic, tuple(h for h in headers if h[0] not in _PER_CALL))
            answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
            self._waiting.setdefault(key, []).append(_Call(request, raw, headers, timeout, answer))
            if self._out.get(key, 0) < self._inflight:
                self._out[key] = self._out.get(key, 0) + 1
                task = asyncio.ensure_future(self._drain(key))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            call = answer
        try:
            return await call
        except grpc.aio.AioRpcError as exc:
            await context.abort(exc.code(), exc.details() or "")
            raise

    def _forward_one(self, raw: bytes, headers: Headers, timeout: float | None) -> Awaitable[bytes]:
        return self._stub(raw, metadata=headers, timeout=timeout)  # type: ignore[no-any-return]

    async def _drain(self, key: Any) -> None:
        try:
            while calls := self._waiting.get(key):
                batch, rest = self._take(calls)
                if rest:
                    self._waiting[key] = rest
                else:
                    del self._waiting[key]
                await self._forward(batch)
        finally:
            self._out[key] -= 1
            if not self._out[key]:
                del self._out[key]

    def _take(self, calls: list[_Call]) -> tuple[list[_Call], list[_Call]]:
        """The first calls that fit one request (at least one)."""
        messages = size = 0
        for i, call in enumerate(calls):
            messages += len(call.request.messages)
            size += len(call.raw)
            if i and (messages > MAX_BATCH or size > self._max_bytes):
                return calls[:i], calls[i:]
        return calls, []

    async def _forward(self, batch: list[_Call]) -> None:
        self.requests += 1
        self.merged += len(batch)
        if len(batch) == 1:
            await _settle(
                batch[0], self._forward_one(batch[0].raw, batch[0].headers, batch[0].timeout)
            )
            return
        merged = service_pb2.SendMessageRequest()
        for call in batch:
            merged.messages.extend(call.request.messages)
        timeouts = [c.timeout for c in batch if c.timeout is not None]
        try:
            raw = await self._stub(
                merged.SerializeToString(),
                metadata=batch[0].headers,
                timeout=min(timeouts) if timeouts else None,
            )
        except grpc.aio.AioRpcError as exc:
            for call in batch:
                if not call.answer.done():
                    call.answer.set_exception(exc)
            return
        reply = service_pb2.SendMessageResponse.FromString(raw)
        if reply.status.code not in _MERGED_ANSWERED or len(reply.entries) != len(merged.messages):
            # Refused as a whole (nothing stored): each call alone gets its own answer.
            await asyncio.gather(
                *(_settle(c, self._forward_one(c.raw, c.headers, c.timeout)) for c in batch)
            )
            return
        _split(reply, batch)


def _split(reply: service_pb2.SendMessageResponse, batch: list[_Call]) -> None:
    entries = reply.entries
    at = 0
    for call in batch:
        count = len(call.request.messages)
        mine = entries[at : at + count]
        at += count
        answer = service_pb2.SendMessageResponse()
        answer.entries.extend(mine)
        first = mine[0].status
        if all(entry.status.code == first.code for entry in mine):
            answer.status.CopyFrom(first)
        else:
            answer.status.code = definition_pb2.MULTIPLE_RESULTS
            answer.status.message = _MIXED
        if not call.answer.done():
            call.answer.set_result(answer.SerializeToString())


async def _settle(call: _Call, forwarded: Awaitable[bytes]) -> None:
    try:
        result = await forwarded
    except Exception as exc:
        if not call.answer.done():
            call.answer.set_exception(exc)
        return
    if not call.answer.done():
        call.answer.set_result(result)
