"""Pulls over one ``PullMessageStream`` call, falling back to unary ``PullMessage``.

The multiplexing (request ids, the in-flight map, one writer, the failure of every pending
pull when the call ends, a new call on the next use) is ``wharf.client.stream_mux``'s.

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
from collections.abc import Callable

import grpc
from wharf import hops
from wharf.client.consumer.pull_wire import PullReply, decode_pull_reply, pull_callable
from wharf.client.errors import (
    DeadlineExceededError,
    WharfError,
    error_for_status_number,
    from_rpc_error,
)
from wharf.client.stream_mux import MuxStream, StreamSlot
from wharf.v1 import messaging_pb2

STREAM_METHOD = "/wharf.v1.MessagingService/PullMessageStream"
_CANCEL_TAG = b"\x60\x01"  # PullMessageRequest.cancel = true (field 12, varint)
_REQUEST_ID_TAG = b"\x50"  # PullMessageRequest.request_id (field 10, varint)
_BATCH_TAG = b"\x6a"  # PullMessageRequest.batch (field 13, length-delimited)
# Requests coalesced into one stream message at most (a message costs the broker ~80 us of
# gRPC work whatever it carries; requests are ~60 bytes).
MAX_BATCH = 64


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class PullStream(MuxStream[PullReply]):
    """One PullMessageStream call; ``broken`` once it ended (then make a new one). Requests
    always go out through a writer task (``MuxStream.write_later``)."""

    name = "pull stream"

    def __init__(self, channel: grpc.aio.Channel) -> None:
        super().__init__(channel, STREAM_METHOD, decode_pull_reply)
        # Per pending pull, optionally: called by the read loop with a reply without an
        # error, before the pull's future is resolved (see ``pull``).
        self._on_reply: dict[int, Callable[[PullReply], None]] = {}

    async def pull(
        self,
        request: messaging_pb2.PullMessageRequest,
        timeout: float,  # noqa: ASYNC109  # the pull's own timer: a cancel follows it
        on_reply: Callable[[PullReply], None] | None = None,
    ) -> PullReply:
        """The pull's reply. ``on_reply(reply)``, when given, runs where the stream reads as
        soon as a reply without an error arrives (one loop turn before the awaiting task
        resumes); if it raises, the pull raises that."""
        request_id = self.next_id()
        future = self.expect(request_id)
        request.request_id = request_id
        if on_reply is not None:
            self._on_reply[request_id] = on_reply
        timer = asyncio.get_running_loop().call_later(timeout, _expire, future, timeout)
        answered = False
        try:
            # Written by a writer task, never by this caller: grpc.aio cancels the whole call
            # when a write is cancelled, and this caller may be cancelled at any time.
            self.write_later(request.SerializeToString())
            reply = await future
            answered = True
        finally:
            timer.cancel()
            self.forget(request_id)
            self._on_reply.pop(request_id, None)
            if not answered and self.broken is None:
                self.write_later(_REQUEST_ID_TAG + _varint(request_id) + _CANCEL_TAG)
        if reply.error is not None:
            raise error_for_status_number(*reply.error)
        return reply

    def _frame(self, backlog: collections.deque[bytes]) -> bytes:
        """One request, or what queued up while the last write went out as one message."""
        if len(backlog) == 1:
            return backlog.popleft()
        parts: list[bytes] = []
        for _ in range(min(len(backlog), MAX_BATCH)):
            item = backlog.popleft()
            parts += (_BATCH_TAG, _varint(len(item)), item)
        return b"".join(parts)

    def _on_response(self, reply: PullReply) -> None:
        if hops.ENABLED:
            hops.stamp("c.pull_read")
        callbacks = self._on_reply
        for each in reply.batch or (reply,):
            future = self.waiter(each.request_id)
            if future is None:
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
        """Cancel the call now: pending pulls fail with ClientClosedError."""
        self.abort()


def _expire(future: asyncio.Future[PullReply], timeout: float) -> None:
    if not future.done():
        future.set_exception(DeadlineExceededError(f"no pull reply within {timeout:.1f}s"))


class Puller:
    """``await puller(request, timeout=s)`` -> PullReply over the stream, or unary once the
    broker answered UNIMPLEMENTED (``streaming`` turns False). ``stream=False``: unary only."""

    def __init__(self, channel: grpc.aio.Channel, *, stream: bool = True) -> None:
        self._unary = pull_callable(channel)
        self._streams: StreamSlot[PullStream] = StreamSlot(lambda: PullStream(channel))
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
            stream = self._streams.get()
            try:
                return await stream.pull(request, timeout, on_reply)
            except WharfError as exc:
                if exc.code != "UNIMPLEMENTED":
                    raise
                self.streaming = False  # an older broker: unary from now on
                stream.close()
                self._streams.take()
        request.request_id = 0
        try:
            reply: PullReply = await self._unary(request, timeout=timeout)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        return reply

    def close(self) -> None:
        stream = self._streams.take()
        if stream is not None:
            stream.close()
