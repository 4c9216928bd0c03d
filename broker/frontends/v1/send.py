"""Send processor: SendMessage (unary) and SendMessageStream (bidi, many requests in flight).

The wharf.v1 adapter over the messaging core (``broker/core/send.py``): request -> store inputs
(``convert.to_inputs``) -> the core's admission (topic, queue, message rules) -> the core's
append and durability wait -> reply; errors through ``broker/errors.py`` ``status_for``.

One request = one validated batch = ONE store append into one queue = one reply. Per-message
work is limited to building the store input and the result entry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Iterator
from functools import partial
from typing import Any, NamedTuple

import grpc
from wharf import hops
from wharf.broker.core.model import Written
from wharf.broker.errors import InvalidArgumentError, status_for
from wharf.broker.frontends.frontend_kit import FrontEndKit
from wharf.broker.frontends.grpc.handlers import check_stream_item
from wharf.broker.frontends.v1.convert import SEND_STATUS, error_into, to_inputs
from wharf.broker.frontends.v1.send_columns import ColumnsSender
from wharf.store.model import MessageInput, PutResult, PutStatus
from wharf.v1 import common_pb2, messaging_pb2

log = logging.getLogger("wharf.broker.frontends.v1.send")
# PutStatus is an Enum: its __hash__ is a Python call (~0.3 us), paid per part of a parts
# request (32 per request at 256 topics) for a lookup whose answer is nearly always SEND_OK.
_PUT_OK, _SEND_OK = PutStatus.PUT_OK, messaging_pb2.SEND_OK
_END = object()


class _Accepted(NamedTuple):
    """A checked request, ready to append: either store inputs or producer-encoded records."""

    topic: str
    queue_id: int
    inputs: list[MessageInput] | None
    unique_ids: list[str] | None
    records: bytes | None
    born_host: str


class SendProcessor:
    def __init__(self, ctx: FrontEndKit) -> None:
        self.ctx = ctx
        # THE send core of this broker: the v2 front end shares it (one round-robin counter).
        self.core = ctx.port.send
        store_config = ctx.port.store_config
        self._sync_flush = store_config.flush_disk_type == "SYNC_FLUSH"
        self._max_message_size = store_config.max_message_size
        self._store_host = store_config.store_host
        self._columns = ColumnsSender(ctx)

    async def send(
        self, request: messaging_pb2.SendMessageRequest, born_host: str
    ) -> messaging_pb2.SendMessageResponse:
        if request.batch_topics:
            return await self._columns.send(request, born_host)
        if request.parts:
            return await self._send_parts(request, born_host)
        accepted = self._accept(request, born_host)
        core = self.core
        if accepted.records is not None:
            put = await core.put_records(
                accepted.topic, accepted.queue_id, accepted.records, born_host
            )
        else:
            assert accepted.inputs is not None
            put = await core.put(accepted.topic, accepted.queue_id, accepted.inputs)
        return self._reply(request, accepted, put)

    async def _send_parts(
        self, request: messaging_pb2.SendMessageRequest, born_host: str
    ) -> messaging_pb2.SendMessageResponse:
        """A request of several send batches (``parts``): each checked as a request of its own
        would be, then appended, in order, all before the first durability wait (one group
        commit serves them under SYNC_FLUSH); one reply part each, an error failing its part
        alone. Parts of producer-encoded records (the SDK's) are appended together, one
        commit log write for all (``append_records_many``)."""
        if request.topic or request.messages or request.records or request.HasField("queue_id"):
            raise InvalidArgumentError(
                "a SendMessageRequest with parts sets no topic, queue_id, messages, records "
                "or batch_topics"
            )
        core = self.core
        await core.dispatch_room()  # once for the whole request, as put() for one batch
        parts = request.parts
        accepted: list[_Accepted | Exception] = []
        for part in parts:
            try:
                if part.parts or part.request_id:
                    raise InvalidArgumentError("a part of a request has no parts or request_id")
                accepted.append(self._accept(part, born_host))
            except Exception as exc:
                accepted.append(exc)
        ready = [a for a in accepted if not isinstance(a, Exception)]
        if len(ready) > 1 and all(a.records is not None for a in ready):
            results = await self._append_together(accepted, ready, born_host)
        else:
            results = await self._append_each(accepted)
        response = messaging_pb2.SendMessageResponse(request_id=request.request_id)
        add = response.parts.add
        for accepted_part, result in zip(accepted, results, strict=True):
            if isinstance(result, Exception):
                self._part_error(add(), result)
            else:
                assert not isinstance(accepted_part, Exception)
                self._reply_into(add(), accepted_part, result)
        return response

    async def _append_together(
        self, accepted: list[_Accepted | Exception], ready: list[_Accepted], born_host: str
    ) -> list[PutResult | Exception]:
        """Parts of records appended in one commit log write, then one durability wait."""
        try:
            many = self.core.append_records_many(
                [(a.topic, a.queue_id, a.records) for a in ready],  # type: ignore[misc]
                born_host,
            )
        except Exception as exc:  # the write failed: nothing of it stored
            return [a if isinstance(a, Exception) else exc for a in accepted]
        failed: Exception | None = None
        status = PutStatus.PUT_OK
        try:
            if many.stored:
                status = await many.durable()
        except Exception as exc:
            failed = exc
        results: list[PutResult | Exception] = []
        index = 0
        for part in accepted:
            if isinstance(part, Exception):
                results.append(part)
                continue
            error = many.errors.get(index)
            if error is None and failed is None:
                results.append(PutResult(status, many.appended(index)))
            else:
                results.append(error if error is not None else failed)  # type: ignore[arg-type]
            index += 1
        return results

    async def _append_each(
        self, accepted: list[_Accepted | Exception]
    ) -> list[PutResult | Exception]:
        """Parts appended one by one, in order, then one durability wait (the last one's)."""
        written = [a if isinstance(a, Exception) else self._append_or_error(a) for a in accepted]
        stored = [w for w in written if not isinstance(w, Exception)]
        verdicts: Iterator[PutResult | Exception]
        try:
            # One durability wait for all: the last append's covers the others' (offsets
            # grow); its status (a flush or replica time-out) is every part's.
            verdicts = iter(await self.core.durable_many(stored) if stored else [])
        except Exception as exc:
            verdicts = iter([exc] * len(stored))
        return [w if isinstance(w, Exception) else next(verdicts) for w in written]

    def _append_or_error(self, accepted: _Accepted) -> Written | Exception:
        try:
            return self._append(accepted)
        except Exception as exc:
            return exc

    def _part_error(self, part: messaging_pb2.SendMessageResponse, exc: Exception) -> None:
        if error_into(part.error, exc) is grpc.StatusCode.INTERNAL:
            log.error("a part of a send request failed", exc_info=exc)

    def _accept(self, request: messaging_pb2.SendMessageRequest, born_host: str) -> _Accepted:
        """Everything before the append, synchronous: raises the request's error."""
        core = self.core
        core.check_open()
        messages = request.messages
        # Read once: each read of a bytes field copies it (upb: ~1 us per 16 KiB, 30 us for
        # the 512 KiB of a full request).
        records = request.records
        if not messages and not records:
            raise InvalidArgumentError("messages is empty: send at least one message")
        topic, queue_id = core.admit(
            request.topic, request.queue_id if request.HasField("queue_id") else None
        )
        # The broker's own string (equal to the request's): the store's and the metrics'
        # keys made from it then match later lookups by identity (``admit_round_robin``).
        topic_name = topic.name
        if records:
            if messages:
                raise InvalidArgumentError(
                    "set either messages or records in a SendMessageRequest, not both"
                )
            # Producer-encoded records (store.record_batch): checked by the store's append.
            return _Accepted(topic_name, queue_id, None, None, records, born_host)
        ctx = self.ctx
        inputs, unique_ids, _ = to_inputs(
            messages,
            ctx.unique_ids,
            self._max_message_size,
            len(ctx.delay_levels_ms),
            born_host,
        )
        core.check_inputs(inputs)  # the rules every protocol shares (tags, keys, properties)
        return _Accepted(topic_name, queue_id, inputs, unique_ids, None, born_host)

    def _append(self, accepted: _Accepted) -> Written:
        """The store append of an accepted request, now (no dispatch back-pressure wait)."""
        core = self.core
        if accepted.records is not None:
            return core.append_records(
                accepted.topic, accepted.queue_id, accepted.records, accepted.born_host
            )
        assert accepted.inputs is not None
        return core.append(accepted.topic, accepted.queue_id, accepted.inputs)

    def _reply(
        self,
        request: messaging_pb2.SendMessageRequest,
        accepted: _Accepted,
        result: PutResult,
    ) -> messaging_pb2.SendMessageResponse:
        response = messaging_pb2.SendMessageResponse(request_id=request.request_id)
        self._reply_into(response, accepted, result)
        return response

    def _reply_into(
        self,
        response: messaging_pb2.SendMessageResponse,
        accepted: _Accepted,
        result: PutResult,
    ) -> None:
        """Fill ``response`` (a request's reply, or a part added in place to a parts reply:
        no copy of a built part into the repeated field)."""
        ctx = self.ctx
        topic_name, queue_id = accepted.topic, accepted.queue_id
        append = result.append
        if accepted.records is not None:
            # The compact form, O(1) in the number of records.
            count = len(append.sizes)
            ctx.counters.messages_in += count
            ctx.metrics.on_messages_in(topic_name, append.sizes)
            put_status = result.status
            response.status = _SEND_OK if put_status is _PUT_OK else SEND_STATUS[put_status]
            response.queue_id = queue_id
            response.first_queue_offset = append.first_queue_offset
            response.first_commit_log_offset = append.offsets[0]
            response.store_host = self._store_host
            response.count = count
            return
        inputs, unique_ids = accepted.inputs, accepted.unique_ids
        assert inputs is not None and unique_ids is not None
        status = SEND_STATUS[result.status]
        fmt = ctx.offset_ids.format
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
        ctx.counters.messages_in += len(inputs)
        ctx.metrics.on_messages_in(topic_name, [len(m.body) for m in inputs])

    def _answered(
        self, reply: messaging_pb2.SendMessageResponse, started: float
    ) -> messaging_pb2.SendMessageResponse:
        """A stream request answered: each is observed as one RPC for the latency metrics."""
        if hops.ENABLED:
            hops.stamp("b.send_done")
        self.ctx.metrics.observe_rpc("SendMessageStream", "OK", time.perf_counter() - started)
        return reply

    def _error_reply(
        self, request: messaging_pb2.SendMessageRequest, exc: Exception, started: float
    ) -> messaging_pb2.SendMessageResponse:
        """Stream flavour of an error: the reply's ``error`` (the stream goes on)."""
        code, message = status_for(exc)
        request_id = getattr(request, "request_id", 0)  # 0 when it did not even parse
        if code is grpc.StatusCode.INTERNAL:
            log.error("SendMessageStream request %d failed", request_id, exc_info=exc)
        self.ctx.metrics.observe_rpc("SendMessageStream", code.name, time.perf_counter() - started)
        return messaging_pb2.SendMessageResponse(
            request_id=request_id,
            error=common_pb2.ErrorInfo(code=code.value[0], message=message),
        )

    async def _send_or_error(
        self, request: messaging_pb2.SendMessageRequest, born_host: str
    ) -> messaging_pb2.SendMessageResponse:
        """Stream flavour of ``send``: an error becomes the reply's ``error``."""
        started = time.perf_counter()
        if hops.ENABLED:
            hops.stamp("b.send_in")
        try:
            check_stream_item(request)
            return self._answered(await self.send(request, born_host), started)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return self._error_reply(request, exc, started)

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
        # aclosing: when the call ends while a reply waits at the yield, the stream's waits
        # are withdrawn now, not when the garbage collector finalizes the inner generator.
        async with contextlib.aclosing(_SyncFlushStream(self, born_host).serve(requests)) as out:
            async for reply in out:
                yield reply


class _SyncFlushStream:
    """SendMessageStream under SYNC_FLUSH: many requests wait on group commits at once; one
    fdatasync serves them all.

    Each request is taken INLINE by the reader as soon as it is read: checks, the store
    append and the group commit request (so the sync starts in the same loop step); an
    ACL-refused, malformed or invalid request is answered at once. Only the durability wait
    stays asynchronous, as a done-callback on the group commit's future that builds the reply
    and queues it: no task per request. Measured on the 2-core VM (uvloop): the mechanism
    alone costs 3.7-4.7 us per request with a task, 2.0-2.3 with a callback, 2.3-2.6 with one
    task per stream awaiting the futures in order from a queue (the alternative: it also needs
    the synchronous filing, else the sync starts a step late, plus a queue hand-off per
    request). The whole stream in-process (real store, one-record requests): 94-105 -> 73-93
    us of process CPU per request; a lone message over the wire port reaches the append
    ~20-80 us sooner after the client's write (``tests.bench.read_path`` hop tables).

    Still awaited, by a task for that request: a request that arrives while dispatch lags
    (``store.dispatch_lagging()``: ``put`` would hold it) goes through ``put`` as before, and
    while any such request is held, later ones follow it there (a later request must not be
    appended before an earlier one); on a SYNC_MASTER the replicas' wait (and the fence
    check after it) runs in a task after the inline append.

    Over the wire port the requests do not even wait for the reader's task: the call's
    request queue hands each one to ``_take_now`` in the connection's read callback (one task
    wake-up less before the append, ~20 us of a lone message's path on the 2-core VM), unless
    a request is queued already, no slot is free, or the reader waits for one (order kept).

    Replies may complete out of request order (the SDK matches them by ``request_id``). At
    most ``max_inflight_stream_requests`` requests are in flight: a slot is freed when its
    reply is written, so a client that stops reading replies stops the reader. When the call
    ends (the client went away), every group commit wait of this stream is cancelled (the
    next sync drops it from the pending list) and every task cancelled."""

    def __init__(self, processor: SendProcessor, born_host: str) -> None:
        self.processor = processor
        self.core = processor.core  # the store calls go through the messaging core
        self.born_host = born_host
        # Request slots: free ones, and the reader's wait for one (``room``, ``waiting``).
        self.free = processor.ctx.config.max_inflight_stream_requests
        self.room = asyncio.Event()
        self.waiting = False
        self.replies: asyncio.Queue[object] = asyncio.Queue()
        self.waiters: set[asyncio.Future[bool]] = set()  # group commit futures of this stream
        self.tasks: set[asyncio.Task[None]] = set()
        self.held = 0  # requests awaiting dispatch back-pressure in a task
        self.read = 0  # requests taken: each gets exactly one reply

    async def serve(
        self, requests: AsyncIterator[messaging_pb2.SendMessageRequest]
    ) -> AsyncGenerator[messaging_pb2.SendMessageResponse, None]:
        sink_into = getattr(requests, "sink_into", None)  # the wire port's request queue
        if sink_into is not None:
            sink_into(self._take_now)
        reader = asyncio.create_task(self._read(requests))
        replies = self.replies
        ended = False
        written = 0
        try:
            while not ended or written < self.read:
                reply = await replies.get()
                if reply is _END:
                    ended = True
                    await reader  # surfaces a broken request stream as the RPC's error
                    continue
                if hops.ENABLED:
                    hops.stamp("b.ack_yield")
                yield reply  # type: ignore[misc]
                written += 1
                self.free += 1
                self.room.set()
        finally:
            reader.cancel()
            for waiter in list(self.waiters):
                waiter.cancel()
            for task in list(self.tasks):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    async def _read(self, requests: AsyncIterator[messaging_pb2.SendMessageRequest]) -> None:
        try:
            async for request in requests:
                while self.free <= 0:
                    self.waiting = True  # holding a request: the sink must not overtake it
                    self.room.clear()
                    try:
                        await self.room.wait()
                    finally:
                        self.waiting = False
                self._take(request)
        finally:
            self.replies.put_nowait(_END)

    def _take_now(self, request: messaging_pb2.SendMessageRequest) -> bool:
        """The wire port's request sink: take ``request`` here and now when a slot is free
        and the reader holds none; False leaves it to the reader."""
        if self.free <= 0 or self.waiting:
            return False
        self._take(request)
        return True

    def _take(self, request: messaging_pb2.SendMessageRequest) -> None:
        """Take ``request`` into a free slot (reader or sink, synchronous): one reply for it
        is queued now or later."""
        self.free -= 1
        self.read += 1
        processor, core = self.processor, self.core
        if (
            self.held
            or core.dispatch_lagging()
            or getattr(request, "parts", None)
            or getattr(request, "batch_topics", None)
        ):
            # (A request of several batches is awaited whole in a task: its appends, then
            # the one group commit they share.)
            self.held += 1
            self._spawn(self._put_awaited(request))  # stamps b.send_in when it runs
            return
        started = time.perf_counter()
        if hops.ENABLED:
            hops.stamp("b.send_in")
        try:
            check_stream_item(request)
            accepted = processor._accept(request, self.born_host)
            result = processor._append(accepted)
            waiter = core.flush_waiter(result)
        except Exception as exc:
            self.replies.put_nowait(processor._error_reply(request, exc, started))
            return
        if waiter is None:  # a SYNC_MASTER: the replicas too
            self._spawn(self._durable(request, accepted, result, started))
            return
        self.waiters.add(waiter)
        waiter.add_done_callback(partial(self._flushed, request, accepted, result, started))

    def _flushed(
        self,
        request: messaging_pb2.SendMessageRequest,
        accepted: _Accepted,
        result: Written,
        started: float,
        waiter: asyncio.Future[bool],
    ) -> None:
        """Done-callback of a group commit wait: build the reply and queue it."""
        self.waiters.discard(waiter)
        if waiter.cancelled():  # the call ended
            return
        processor = self.processor
        try:
            put = self.core.flushed_result(result, waiter)
            reply = processor._answered(processor._reply(request, accepted, put), started)
        except Exception as exc:  # FlushFailedError, MasterFencedError, ...
            reply = processor._error_reply(request, exc, started)
        self.replies.put_nowait(reply)

    async def _durable(
        self,
        request: messaging_pb2.SendMessageRequest,
        accepted: _Accepted,
        result: Written,
        started: float,
    ) -> None:
        processor = self.processor
        try:
            put = await self.core.durable(result)
            reply = processor._answered(processor._reply(request, accepted, put), started)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            reply = processor._error_reply(request, exc, started)
        self.replies.put_nowait(reply)

    async def _put_awaited(self, request: messaging_pb2.SendMessageRequest) -> None:
        try:
            reply = await self.processor._send_or_error(request, self.born_host)
        finally:
            self.held -= 1
        self.replies.put_nowait(reply)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
