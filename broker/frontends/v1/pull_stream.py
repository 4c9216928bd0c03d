"""PullMessageStream: many pulls in flight on one bidirectional call, each answered once by its
``request_id``.

Each request runs ``PullProcessor.pull`` as its own task (statuses, long polling and the
``commit_offset`` piggy-back are PullMessage's; a long poll parks only its own pull); replies
go out in the order they complete through the one writer (the handler's generator). An error
of one pull becomes its reply's ``error`` (the gRPC code number and message PullMessage would
have failed with) and the stream goes on.

Direct write (the wire port only): a transport that can write a reply from outside the call's
task (``write_now``, broker/frontends/wire/server.py) lets a pull woken from a long poll, whose reply
is ready while the writer is idle (it waits for a reply, none is queued), write its reply
itself, at once, instead of waking the writer to do it a loop step later (a lone message
reaches its parked pull's client one task step sooner). It does the writer's bookkeeping
after the write (the reply's bytes and slot are given back). One reply a loop step goes this
way: the pulls completing behind it in the same step (a wake-up of many) queue and go out
batched, one write for all. A pull answered without parking is queued as always: it
completes in the step its request was read in, with its neighbours, and batching them keeps
the stream in step with the client's coalesced requests (written directly, 1-message pulls
by 8 tasks cost the broker ~25% more CPU a pull: the client's pulls fell out of step into
more, smaller writes). Otherwise too (replies queued; the transport's write gate shut; gRPC,
which has no such method) the reply is queued for the writer. A reply is written directly
only when nothing is queued and the writer holds nothing, so replies are written in the
order they complete either way. A raw pull may go further (``write_durable``, the wire port
over plaintext): answered ahead of the sync (broker/core/long_poll.py), its reply is taken
by the store's sync thread to write right after the fdatasync, with the same bookkeeping.

Bounds, so a client that stops reading cannot make the broker buffer without limit:
- at most ``maxInflightStreamRequests`` (64) pulls in flight: a slot is freed when its reply
  has been handed to gRPC (or the pull was cancelled); without a slot the broker reads no
  further request, and HTTP/2 flow control then holds the client's writes;
- while the replies built and not yet taken by gRPC reach ``maxUnreadPullBytesPerClient``
  (16 MiB), no pull of the stream reads (``reply_budget.StreamReplies``): it waits for room
  instead of failing. A stream therefore holds at most that plus one reply of maxPullBytes.

``cancel``: a request with ``cancel`` set cancels the pull in flight with its ``request_id``
(a long poll the client gave up on); neither gets a reply. A request whose ``request_id`` is
already in flight gets INVALID_ARGUMENT under request_id 0 (under its own id the client would
take it for the answer to the pull in flight). When the client half-closes, the
pulls in flight are answered and then the call ends.

Batching: a stream message costs the broker ~80 us of gRPC work whatever it carries (measured
with 1-message pulls), so requests may come several to a message (``batch``, as the SDK
coalesces what waits to be written) and replies that are ready together go out as one message
(``batch``, up to 1 MiB of records).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import grpc
from wharf import hops
from wharf.broker.errors import (
    status_for,
)
from wharf.broker.frontends.frontend_kit import FrontEndKit
from wharf.broker.frontends.grpc.handlers import MalformedRequest, check_stream_item
from wharf.broker.frontends.reply_budget import PullReplies, StreamReplies
from wharf.broker.frontends.v1.pull import PullProcessor
from wharf.v1 import common_pb2, messaging_pb2

log = logging.getLogger("wharf.broker.pull_stream")
METHOD = "PullMessageStream"
_END = object()
BATCH_REPLY_BYTES = 1 << 20  # records coalesced into one stream message at most


_BATCH_TAG = b"\x4a"  # PullMessageResponse.batch: field 9, length-delimited


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_batch(replies: list[messaging_pb2.PullMessageResponse]) -> bytes:
    """The wire bytes of PullMessageResponse(batch=replies), each reply serialized once and
    joined (building the message first would copy every reply's records into it, then again
    when serialized)."""
    parts: list[bytes] = []
    for reply in replies:
        data = reply.SerializeToString()
        parts += (_BATCH_TAG, _varint(len(data)), data)
    return b"".join(parts)


class _Outbox:
    """Replies ready to be written, (reply, bytes held) in completion order, and _END.

    ``idle``: the writer waits in ``get()``, nothing is queued (so it holds no reply it took
    and has not written) and no reply was written directly yet in this loop step. A reply
    written directly now overtakes none; the replies completing behind it in the same step
    are queued, so that a burst still goes out as one batch (one write, not one each)."""

    def __init__(self) -> None:
        self.items: collections.deque[Any] = collections.deque()
        self._ready = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._waiting = False  # the writer waits in get()
        self._wrote = False  # a reply was written directly in this loop step

    @property
    def idle(self) -> bool:
        return self._waiting and not self._wrote and not self.items

    def written_directly(self) -> None:
        self._wrote = True
        self._loop.call_soon(self._next_step)  # runs once this step's ready tasks have run

    def _next_step(self) -> None:
        self._wrote = False

    def put(self, item: Any) -> None:
        self.items.append(item)
        self._ready.set()

    async def get(self) -> Any:
        while not self.items:
            self._ready.clear()
            self._waiting = True
            try:
                await self._ready.wait()
            finally:
                self._waiting = False
        return self.items.popleft()


def _written(
    write: Callable[..., bool], reply: messaging_pb2.PullMessageResponse, *args: Any
) -> bool:
    """``write(reply, *args)`` (``write_now``, ``write_durable``); a failure (a bug) is logged
    and the reply left to the writer, whose write then fails the call as any reply that cannot
    be written does."""
    try:
        return write(reply, *args)
    except Exception:
        log.exception("%s: a reply could not be written directly", METHOD)
        return False


async def _read_requests(
    requests: AsyncIterator[Any],
    start: Callable[[Any], Awaitable[None]],
    alive: set[asyncio.Task[None]],
    out: _Outbox,
) -> None:
    """The stream's reader: ``start`` for each request (each item of a batch); once the client
    half-closed and the pulls in flight are answered, ``_END`` (also when the stream breaks)."""
    try:
        async for request in requests:
            batch = getattr(request, "batch", None)
            if batch:
                for item in batch:
                    await start(item)
            else:
                await start(request)
        while alive:  # the client half-closed: answer what is in flight, then end
            await asyncio.gather(*list(alive), return_exceptions=True)
    finally:
        out.put(_END)


class _StreamPulls:
    """The pulls in flight on one stream: ``start(request)`` runs a pull as a task (in
    ``alive``) once a slot is free, or cancels the pull a ``cancel`` request names; a reply
    goes into ``out`` for the writer or is written directly ("Direct write"); the slot and
    the reply's bytes are given back when the pull ends."""

    def __init__(
        self,
        pull: Callable[..., Awaitable[messaging_pb2.PullMessageResponse | None]],
        out: _Outbox,
        slots: asyncio.Semaphore,
        window: StreamReplies,
        alive: set[asyncio.Task[None]],
    ) -> None:
        self._pull = pull  # PullStreamProcessor._pull_or_error
        self._out, self._slots, self._window, self._alive = out, slots, window, alive
        self.write_now: Callable[[messaging_pb2.PullMessageResponse], bool] | None = None
        self.write_durable: Callable[[messaging_pb2.PullMessageResponse, int], bool] | None = None
        self._tasks: dict[int, asyncio.Task[None]] = {}  # by request_id: what a cancel names

    async def start(self, request: Any) -> None:
        if type(request) is messaging_pb2.PullMessageRequest and request.cancel:
            task = self._tasks.get(request.request_id)
            if task is not None:
                task.cancel()
            return
        await self._slots.acquire()
        request_id = getattr(request, "request_id", 0)
        if request_id in self._tasks:
            request = MalformedRequest(
                "PullMessageRequest", f"request_id {request_id} is already in flight"
            )
        replies = self._window.for_pull()
        task = asyncio.create_task(self._handle(request, replies))
        self._alive.add(task)
        if type(request) is not MalformedRequest:
            self._tasks[request_id] = task
        task.add_done_callback(partial(self._finished, request_id, replies))

    async def _handle(self, request: Any, replies: PullReplies) -> None:
        reply = await self._pull(
            request,
            replies,
            None if self.write_now is None else partial(self._direct, replies=replies),
            None if self.write_durable is None else partial(self._durable, replies=replies),
        )
        # No await from here on (since the hold): the reply is never lost.
        if reply is None:
            return  # written in place by the arrival that answered its long poll
        if replies.long_polled and self._direct(reply, replies):
            return
        self._out.put((reply, replies.nbytes))

    def _direct(self, reply: messaging_pb2.PullMessageResponse, replies: PullReplies) -> bool:
        """A long-polled pull's reply written now, if the writer is idle (it holds and waits
        for nothing); then the writer's bookkeeping. False: nothing written."""
        if self.write_now is None or not self._out.idle:
            return False
        if hops.ENABLED:
            # Before the write, as the writer stamps (after it, the client the write woke may
            # run first). A declined write (write gate shut, call over) leaves it a little
            # early: the writer's later stamp is the second.
            hops.stamp("b.pull_yield")
        if not _written(self.write_now, reply):
            return False
        self._taken(replies)
        return True

    def _durable(
        self, reply: messaging_pb2.PullMessageResponse, end: int, replies: PullReplies
    ) -> bool:
        """A reply built ahead of the sync, handed to the transport to be written once the
        log is durable to ``end`` (it holds no budget: taken at once, as a direct write).
        False: declined, nothing written nor to be."""
        if self.write_durable is None or not self._out.idle:
            return False
        if hops.ENABLED:
            hops.stamp("b.pull_ahead")
        if not _written(self.write_durable, reply, end):
            return False
        self._taken(replies)  # its nbytes are 0: nothing was held
        return True

    def _taken(self, replies: PullReplies) -> None:
        """A reply written (or handed over) directly, before any reply completed after it:
        the writer's bookkeeping."""
        self._out.written_directly()
        self._window.taken(replies.nbytes)
        self._slots.release()
        replies.delivered = True

    def _finished(self, request_id: int, replies: PullReplies, task: asyncio.Task[None]) -> None:
        self._alive.discard(task)
        if self._tasks.get(request_id) is task:
            del self._tasks[request_id]
        if task.cancelled() and not replies.delivered:
            self._slots.release()  # no reply to wait for


class PullStreamProcessor:
    def __init__(self, ctx: FrontEndKit, puller: PullProcessor) -> None:
        self.ctx = ctx
        self.puller = puller

    async def _pull_or_error(
        self,
        request: Any,
        replies: PullReplies,
        direct: Callable[[messaging_pb2.PullMessageResponse], bool] | None = None,
        direct_durable: Callable[[messaging_pb2.PullMessageResponse, int], bool] | None = None,
    ) -> messaging_pb2.PullMessageResponse | None:
        """The pull's reply (an error too, as its ``error``), or None when ``direct`` wrote it
        in place, from the arrival that answered the long poll (see "Direct write")."""
        started = time.perf_counter()
        request_id = getattr(request, "request_id", 0)  # 0 when it did not even parse
        metrics = self.ctx.metrics
        deliver = None
        if direct is not None:

            def deliver(reply: messaging_pb2.PullMessageResponse) -> bool:
                reply.request_id = request_id
                if not direct(reply):
                    return False
                metrics.observe_rpc(METHOD, "OK", time.perf_counter() - started)
                return True

        deliver_durable = None
        if direct_durable is not None:

            def deliver_durable(reply: messaging_pb2.PullMessageResponse, end: int) -> bool:
                reply.request_id = request_id
                if not direct_durable(reply, end):
                    return False
                metrics.observe_rpc(METHOD, "OK", time.perf_counter() - started)
                return True

        try:
            check_stream_item(request)
            reply = await self.puller.pull(request, replies, deliver, deliver_durable)
            if reply is None:
                return None  # delivered
            reply.request_id = request_id
            metrics.observe_rpc(METHOD, "OK", time.perf_counter() - started)
            return reply
        except asyncio.CancelledError:
            if not replies.delivered:
                metrics.observe_rpc(METHOD, "CANCELLED", time.perf_counter() - started)
            raise
        except Exception as exc:
            code, message = status_for(exc)
            if code is grpc.StatusCode.INTERNAL:
                log.exception("%s request %d failed", METHOD, request_id)
            self.ctx.metrics.observe_rpc(METHOD, code.name, time.perf_counter() - started)
            return messaging_pb2.PullMessageResponse(
                request_id=request_id,
                error=common_pb2.ErrorInfo(code=code.value[0], message=message),
            )

    async def serve(
        self,
        requests: AsyncIterator[Any],
        peer: str,
        write_now: Callable[[messaging_pb2.PullMessageResponse], bool] | None = None,
        write_durable: Callable[[messaging_pb2.PullMessageResponse, int], bool] | None = None,
    ) -> AsyncIterator[messaging_pb2.PullMessageResponse | bytes]:
        """The stream's replies, to be written in order. ``write_now(reply)``, when the
        transport has it, writes one reply now from a pull's task (True) or declines (False:
        the call is over, or its transport's write gate is shut); see "Direct write"."""
        cfg = self.ctx.config
        slots = asyncio.Semaphore(cfg.max_inflight_stream_requests)
        window = StreamReplies(self.ctx.replies, peer, cfg.max_unread_pull_bytes_per_client)
        out = _Outbox()
        alive: set[asyncio.Task[None]] = set()  # every pull task (error replies too)
        pulls = _StreamPulls(self._pull_or_error, out, slots, window, alive)
        pulls.write_now, pulls.write_durable = write_now, write_durable
        start = pulls.start  # runs each pull as a task, once a slot is free
        reader = asyncio.create_task(_read_requests(requests, start, alive, out))
        ended = False
        try:
            while not ended:
                item = await out.get()
                if item is _END:
                    break
                reply, nbytes = item
                count = 1
                ready = out.items
                if ready and nbytes < BATCH_REPLY_BYTES:
                    # Replies ready together go out as one stream message (a message costs
                    # far more than its bytes): up to BATCH_REPLY_BYTES of records.
                    batch = [reply]
                    while ready:
                        following = ready[0]
                        if following is _END:
                            ended = True
                            break
                        if nbytes + following[1] > BATCH_REPLY_BYTES:
                            break
                        ready.popleft()
                        batch.append(following[0])
                        nbytes += following[1]
                    count = len(batch)
                    if count > 1:
                        reply = encode_batch(batch)
                if hops.ENABLED:
                    hops.stamp("b.pull_yield")
                try:
                    yield reply
                finally:
                    window.taken(nbytes)
                    for _ in range(count):
                        slots.release()
            await reader  # surfaces a broken request stream as the RPC's error
        finally:
            reader.cancel()
            for task in list(alive):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
            for item in out.items:  # replies never sent: give their bytes back
                if item is not _END:
                    window.taken(item[1])
