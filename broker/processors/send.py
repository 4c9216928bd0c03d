"""Send processor: SendMessage (unary) and SendMessageStream (bidi, many requests in flight).

One request = one validated batch = ONE store append into one queue = one reply. Per-message
work is limited to building the store input and the result entry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from functools import lru_cache

import grpc
from wharf import hops
from wharf.broker.context import BrokerContext
from wharf.broker.errors import (
    InvalidArgumentError,
    PermissionDeniedError,
    UnauthenticatedError,
    UnavailableError,
    status_for,
)
from wharf.broker.handlers import MalformedRequest, RefusedRequest
from wharf.broker.processors.convert import to_inputs
from wharf.store.config import SYNC_FLUSH
from wharf.store.model import PutStatus
from wharf.v1 import common_pb2, messaging_pb2

log = logging.getLogger("wharf.broker.processors.send")
_STATUS = {
    PutStatus.PUT_OK: messaging_pb2.SEND_OK,
    PutStatus.FLUSH_DISK_TIMEOUT: messaging_pb2.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: messaging_pb2.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: messaging_pb2.SLAVE_NOT_AVAILABLE,
}
_END = object()


@lru_cache(maxsize=4096)
def born_host_of(peer: str) -> str:
    """grpc peer 'ipv4:127.0.0.1:5555' -> '127.0.0.1:5555' (ipv6 peers keep the port only)."""
    kind, _, address = peer.partition(":")
    if kind == "ipv4":
        return address
    _, _, port = address.rpartition(":")
    return f"0.0.0.0:{port if port.isdigit() else 0}"


class SendProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self._next_queue: dict[str, int] = {}
        self._sync_flush = ctx.store.config.flush_disk_type == SYNC_FLUSH
        self._max_message_size = ctx.store.config.max_message_size
        self._store_host = ctx.store.config.store_host

    async def send(
        self, request: messaging_pb2.SendMessageRequest, born_host: str
    ) -> messaging_pb2.SendMessageResponse:
        ctx = self.ctx
        if ctx.shutting_down:
            raise UnavailableError("the broker is shutting down; retry on another broker")
        messages = request.messages
        if not messages and not request.records:
            raise InvalidArgumentError("messages is empty: send at least one message")
        topic_name = request.topic
        topic = ctx.topics.for_send(topic_name)
        if not topic.writable:
            raise PermissionDeniedError(
                f"topic {topic_name!r} is not writable (perm={topic.perm}); "
                "UpdateTopic perm=6 to allow sends"
            )
        if request.HasField("queue_id"):
            queue_id = request.queue_id
            if not 0 <= queue_id < topic.write_queue_nums:
                raise InvalidArgumentError(
                    f"queue_id {queue_id} is out of range: topic {topic_name!r} has "
                    f"{topic.write_queue_nums} write queues (0..{topic.write_queue_nums - 1})"
                )
        else:
            turn = self._next_queue.get(topic_name, 0)
            self._next_queue[topic_name] = turn + 1
            queue_id = turn % topic.write_queue_nums
        if request.records:
            if messages:
                raise InvalidArgumentError(
                    "set either messages or records in a SendMessageRequest, not both"
                )
            return await self._send_records(request, topic_name, queue_id, born_host)
        inputs, unique_ids, _ = to_inputs(
            messages,
            ctx.unique_ids,
            self._max_message_size,
            len(ctx.delay_levels_ms),
            born_host,
        )
        result = await ctx.store.put(topic_name, queue_id, inputs)
        status = _STATUS[result.status]
        append = result.append
        fmt = ctx.offset_ids.format
        response = messaging_pb2.SendMessageResponse(request_id=request.request_id)
        add = response.results.add  # in place: no intermediate message objects to copy
        # Attribute writes on the added entry: ~18% cheaper than add(**fields) on upb.
        for queue_offset, uid, offset in zip(
            range(append.first_queue_offset, append.first_queue_offset + len(inputs)),
            unique_ids,
            append.offsets,
            strict=True,
        ):
            entry = add()
            entry.status = status
            entry.msg_id = uid
            entry.offset_msg_id = fmt(offset)
            entry.queue_id = queue_id
            entry.queue_offset = queue_offset
            entry.commit_log_offset = offset
        ctx.messages_in += len(inputs)
        ctx.metrics.on_messages_in(topic_name, [len(m.body) for m in inputs])
        return response

    async def _send_records(
        self,
        request: messaging_pb2.SendMessageRequest,
        topic_name: str,
        queue_id: int,
        born_host: str,
    ) -> messaging_pb2.SendMessageResponse:
        """Producer-encoded records (store.record_batch): checked and appended by the store;
        the reply is the compact form, O(1) in the number of records."""
        ctx = self.ctx
        result = await ctx.store.put_records(topic_name, queue_id, request.records, born_host)
        append = result.append
        count = len(append.sizes)
        ctx.messages_in += count
        ctx.metrics.on_messages_in(topic_name, append.sizes)
        return messaging_pb2.SendMessageResponse(
            request_id=request.request_id,
            status=_STATUS[result.status],
            queue_id=queue_id,
            first_queue_offset=append.first_queue_offset,
            first_commit_log_offset=append.offsets[0],
            store_host=self._store_host,
            count=count,
        )

    async def _send_or_error(
        self, request: messaging_pb2.SendMessageRequest, born_host: str
    ) -> messaging_pb2.SendMessageResponse:
        """Stream flavour: an error becomes the reply's ``error``; the stream goes on.
        Each request is observed as one RPC for the latency metrics."""
        started = time.perf_counter()
        if hops.ENABLED:
            hops.stamp("b.send_in")
        try:
            if type(request) is MalformedRequest:
                raise InvalidArgumentError(request.message)
            if type(request) is RefusedRequest:  # by the ACL (broker/acl/guard.py)
                if request.unauthenticated:
                    raise UnauthenticatedError(request.message)
                raise PermissionDeniedError(request.message)
            reply = await self.send(request, born_host)
            if hops.ENABLED:
                hops.stamp("b.send_done")
            self.ctx.metrics.observe_rpc("SendMessageStream", "OK", time.perf_counter() - started)
            return reply
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            code, message = status_for(exc)
            request_id = getattr(request, "request_id", 0)  # 0 when it did not even parse
            if code is grpc.StatusCode.INTERNAL:
                log.exception("SendMessageStream request %d failed", request_id)
            self.ctx.metrics.observe_rpc(
                "SendMessageStream", code.name, time.perf_counter() - started
            )
            return messaging_pb2.SendMessageResponse(
                request_id=request_id,
                error=common_pb2.ErrorInfo(code=code.value[0], message=message),
            )

    async def stream(
        self,
        requests: AsyncIterator[messaging_pb2.SendMessageRequest],
        born_host: str,
    ) -> AsyncIterator[messaging_pb2.SendMessageResponse]:
        if not self._sync_flush:
            # ASYNC_FLUSH: a put never waits for the disk, so handling requests in order on
            # this task is the cheapest path (no task or queue per request).
            async for request in requests:
                response = await self._send_or_error(request, born_host)
                if hops.ENABLED:
                    hops.stamp("b.ack_yield")
                yield response
            return
        # SYNC_FLUSH: many requests wait on group commits at once; one fdatasync serves them
        # all. At most max_inflight_stream_requests in flight (a slot is freed when its reply
        # is written), so a fast writer cannot grow memory without bound.
        slots = asyncio.Semaphore(self.ctx.config.max_inflight_stream_requests)
        replies: asyncio.Queue[object] = asyncio.Queue()
        tasks: set[asyncio.Task[None]] = set()

        async def handle(request: messaging_pb2.SendMessageRequest) -> None:
            replies.put_nowait(await self._send_or_error(request, born_host))

        async def read_requests() -> None:
            try:
                async for request in requests:
                    await slots.acquire()
                    task = asyncio.create_task(handle(request))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                if tasks:
                    await asyncio.gather(*list(tasks))
            finally:
                replies.put_nowait(_END)

        reader = asyncio.create_task(read_requests())
        try:
            while True:
                reply = await replies.get()
                if reply is _END:
                    break
                if hops.ENABLED:
                    hops.stamp("b.ack_yield")
                yield reply  # type: ignore[misc]
                slots.release()
            await reader  # surfaces a broken request stream as the RPC's error
        finally:
            reader.cancel()
            for task in list(tasks):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
