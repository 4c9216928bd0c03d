"""Pulls over one ``PullMessageStream`` call, falling back to unary ``PullMessage``.

``Puller(channel)`` is what consumers await: ``reply = await puller(request, timeout=s)``
answers a ``pull_wire.PullReply`` (records left in the received buffer) or raises a
``WharfError``. Many pulls share one bidirectional call (one per queue is the consumers'
use; the broker serves at most 64 at a time per call and holds the rest of the requests in
HTTP/2 flow control), each matched to its reply by ``request_id``; a pull costs one stream
message each way instead of a call (~145 + 150 us of broker and client CPU against ~330 +
230 us measured for a unary call).

- Requests that queue up while a write is in progress go out as one stream message
  (``batch``); the broker does the same with replies that are ready together.
- A pull given up on (its ``timeout`` passed, or the awaiting task was cancelled) sends a
  ``cancel`` request, so a long poll does not stay parked on the broker for nothing.
- A broken call (broker restart, network) fails every pending pull with the mapped error
  (UNAVAILABLE: retriable); the next pull opens a new call.
- ``on_reply`` (optional, per pull): the read loop hands it the reply (one without an error)
  before resolving the pull, so the caller's work on a reply starts one loop turn sooner
  (the push consumer decodes and dispatches there: its lone message's handler starts ~0.1 ms
  sooner); an exception it raises is what the pull raises.
- Over the wire port (``WireChannel``) replies are handled as they arrive, in the connection's
  read callback (``deliver``), not by a read task a loop step later.
- A broker that answers UNIMPLEMENTED (it predates the stream) switches this Puller to unary
  ``PullMessage`` for good; the pulls that were pending are re-sent that way.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from collections.abc import Callable

import grpc
from wharf import hops
from wharf.client.consumer.pull_wire import PullReply, decode_pull_reply, pull_callable
from wharf.client.errors import (
    ClientClosedError,
    DeadlineExceededError,
    UnavailableError,
    WharfError,
    error_for_status_number,
    from_rpc_error,
)
from wharf.client.wire_channel import each_response
from wharf.v1 import messaging_pb2

STREAM_METHOD = "/wharf.v1.MessagingService/PullMessageStream"
_CANCEL_TAG = b"\x60\x01"  # PullMessageRequest.cancel = true (field 12, varint)
_REQUEST_ID_TAG = b"\x50"  # PullMessageRequest.request_id (field 10, varint)
_BATCH_TAG = b"\x6a"  # PullMessageRequest.batch (field 13, length-delimited)
# Requests coalesced into one stream message at most (a message costs the broker ~80 us of
# gRPC work whatever it carries; requests are ~60 bytes).
MAX_BATCH = 64
# A write on a call that already ended raises one of these (see client/send_stream.py).
_CALL_ENDED = (grpc.RpcError, grpc.aio.BaseError, asyncio.InvalidStateError)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class PullStream:
    """One PullMessageStream call; ``broken`` once it ended (then make a new one)."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        factory = channel.stream_stream(
            STREAM_METHOD, request_serializer=None, response_deserializer=decode_pull_reply
        )
        self._call = factory()  # type: ignore[call-arg]  # no iterator: we write()
        self._pending: dict[int, asyncio.Future[PullReply]] = {}
        # Per pending pull, optionally: called by the read loop with a reply without an
        # error, before the pull's future is resolved (see ``pull``).
        self._on_reply: dict[int, Callable[[PullReply], None]] = {}
        self._ids = itertools.count(1)
        self._backlog: collections.deque[bytes] = collections.deque()
        self._writing = False
        self._orphans: set[asyncio.Task[None]] = set()
        self.broken: WharfError | None = None
        self._reader = asyncio.get_running_loop().create_task(self._read_loop())

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def pull(
        self,
        request: messaging_pb2.PullMessageRequest,
        timeout: float,  # noqa: ASYNC109  # the pull's own timer: a cancel follows it
        on_reply: Callable[[PullReply], None] | None = None,
    ) -> PullReply:
        """The pull's reply. ``on_reply(reply)``, when given, runs where the stream reads as
        soon as a reply without an error arrives (one loop turn before the awaiting task
        resumes); if it raises, the pull raises that."""
        if self.broken is not None:
            raise self.broken
        request_id = next(self._ids)
        request.request_id = request_id
        loop = asyncio.get_running_loop()
        future: asyncio.Future[PullReply] = loop.create_future()
        self._pending[request_id] = future
        if on_reply is not None:
            self._on_reply[request_id] = on_reply
        timer = loop.call_later(timeout, _expire, future, timeout)
        answered = False
        try:
            # Written by a writer task, never by this caller: grpc.aio cancels the whole call
            # when a write is cancelled, and this caller may be cancelled at any time.
            self._send_later(request.SerializeToString())
            reply = await future
            answered = True
        finally:
            timer.cancel()
            self._pending.pop(request_id, None)
            self._on_reply.pop(request_id, None)
            if not answered and self.broken is None:
                self._send_later(_REQUEST_ID_TAG + _varint(request_id) + _CANCEL_TAG)
        if reply.error is not None:
            raise error_for_status_number(*reply.error)
        return reply

    def _send_later(self, data: bytes) -> None:
        self._backlog.append(data)
        if not self._writing:
            self._spawn_writer()

    def _spawn_writer(self) -> None:
        self._writing = True  # from now: one writer at a time (grpc allows one write)
        task = asyncio.get_running_loop().create_task(self._write_backlog())
        self._orphans.add(task)
        task.add_done_callback(self._orphans.discard)

    async def _write_backlog(self) -> None:
        backlog = self._backlog
        try:
            while backlog and self.broken is None:
                if len(backlog) == 1:
                    data = backlog.popleft()
                else:  # what queued up while the last write went out: one message
                    parts: list[bytes] = []
                    for _ in range(min(len(backlog), MAX_BATCH)):
                        item = backlog.popleft()
                        parts += (_BATCH_TAG, _varint(len(item)), item)
                    data = b"".join(parts)
                await self._call.write(data)
        except _CALL_ENDED:
            pass  # the call ended: the read loop fails every pending pull with the cause
        finally:
            self._writing = False

    async def _read_loop(self) -> None:
        error: WharfError = UnavailableError("pull stream ended by the broker")
        try:
            await each_response(self._call, self._on_stream_reply)
        except grpc.RpcError as exc:
            error = from_rpc_error(exc)
        except asyncio.CancelledError:
            error = ClientClosedError("pull stream closed")
        finally:
            self.broken = error
            self._backlog.clear()
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(error)

    def _on_stream_reply(self, reply: PullReply) -> None:
        if hops.ENABLED:
            hops.stamp("c.pull_read")
        pending, callbacks = self._pending, self._on_reply
        for each in reply.batch or (reply,):
            future = pending.get(each.request_id)
            if future is None or future.done():
                continue
            on_reply = callbacks.pop(each.request_id, None)
            if on_reply is not None and each.error is None:
                try:
                    on_reply(each)
                except Exception as exc:  # the pull raises it
                    future.set_exception(exc)
                    continue
            future.set_result(each)

    def close(self) -> None:
        if self.broken is None:
            self.broken = ClientClosedError("pull stream closed")
        self._call.cancel()
        self._reader.cancel()
        for task in list(self._orphans):
            task.cancel()


def _expire(future: asyncio.Future[PullReply], timeout: float) -> None:
    if not future.done():
        future.set_exception(DeadlineExceededError(f"no pull reply within {timeout:.1f}s"))


class Puller:
    """``await puller(request, timeout=s)`` -> PullReply over the stream, or unary once the
    broker answered UNIMPLEMENTED (``streaming`` turns False). ``stream=False``: unary only."""

    def __init__(self, channel: grpc.aio.Channel, *, stream: bool = True) -> None:
        self._channel = channel
        self._unary = pull_callable(channel)
        self._stream: PullStream | None = None
        self.streaming = stream

    async def __call__(
        self,
        request: messaging_pb2.PullMessageRequest,
        *,
        timeout: float,  # noqa: ASYNC109  # grpc's callable signature (QueueWorker calls both)
        on_reply: Callable[[PullReply], None] | None = None,
    ) -> PullReply:
        """``on_reply``: see ``PullStream.pull`` (over the stream only: a unary reply is
        returned without it, so the caller checks whether it ran)."""
        if self.streaming:
            stream = self._stream
            if stream is None or stream.broken is not None:
                stream = self._stream = PullStream(self._channel)
            try:
                return await stream.pull(request, timeout, on_reply)
            except WharfError as exc:
                if exc.code != "UNIMPLEMENTED":
                    raise
                self.streaming = False  # an older broker: unary from now on
                stream.close()
                self._stream = None
        request.request_id = 0
        try:
            reply: PullReply = await self._unary(request, timeout=timeout)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        return reply

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
