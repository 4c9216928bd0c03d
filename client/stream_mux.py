"""One bidi stream call carrying many requests, each matched to its reply by ``request_id``:
what the producer's ``SendMessageStream`` (``wharf.client.send_stream``) and the consumers'
``PullMessageStream`` (``wharf.client.consumer.pull_stream``) share, over gRPC or the wire port
(``wire_channel``).

- Request ids: ``next_id()`` counts from 1 per call (the broker echoes each in its reply).
- In flight: ``expect(id)`` registers the waiter's future, ``resolve(id, reply)`` answers it,
  ``forget(id)`` drops it (always, in the waiter's ``finally``): the map holds only the
  requests being awaited, so it is bounded by the callers (the batcher's ``max_in_flight``,
  one pull per queue).
- Writes: grpc allows one write at a time, so requests queue in a backlog drained by one writer.
  ``write_now`` lets the caller be that writer when none is running (the producer's way: a
  hop through a writer task made a round trip ~0.6 ms slower); ``write_later`` always hands it
  to a writer task (the pulls' way: grpc.aio cancels the whole call when a write is cancelled,
  and a pull's caller may be cancelled at any time). A writer that goes away with requests
  left hands them to a new writer task, so none is stranded. ``_frame`` takes the next stream
  message from the backlog (one request; the pull stream packs what queued up into one).
- Loss: when the call ends (the broker, the network, ``abort``) ``broken`` becomes the mapped
  error (UNAVAILABLE and friends are retriable) and every waiter fails with it at once.
- Reconnect: a broken stream is never reused; ``StreamSlot`` holds a channel's current stream
  and opens a new call on the first use after it broke (no backoff here: the callers' retries,
  with their own backoff and deadlines, pace the reconnects).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

import grpc
from wharf.client.errors import ClientClosedError, UnavailableError, WharfError, from_rpc_error
from wharf.client.wire_channel import each_response

R = TypeVar("R")  # a reply of the stream

# A write on a call the broker already ended (it refused the stream at once: ACL, shutdown)
# raises one of these; grpc.aio's BaseError ("Internal error from Core") is not an RpcError.
CALL_ENDED = (grpc.RpcError, grpc.aio.BaseError, asyncio.InvalidStateError)


class MuxStream(Generic[R]):
    """One ``method`` bidi call on ``channel``; requests are bytes the subclass encodes (with
    its ``request_id``), replies are decoded by ``deserializer`` and dispatched by
    ``_on_response``. ``name`` names the stream in the errors of its end."""

    name = "stream"

    def __init__(
        self, channel: grpc.aio.Channel, method: str, deserializer: Callable[[bytes], R]
    ) -> None:
        factory = channel.stream_stream(
            method, request_serializer=None, response_deserializer=deserializer
        )
        self._call = factory()  # type: ignore[call-arg]  # no iterator: we write()
        self._pending: dict[int, asyncio.Future[R]] = {}
        self._ids = itertools.count(1)
        self._backlog: collections.deque[bytes] = collections.deque()
        self._writing = False
        self._orphans: set[asyncio.Task[None]] = set()
        self.broken: WharfError | None = None
        self._reader = asyncio.get_running_loop().create_task(self._read_loop())

    # ------------------------------------------------------------------ in flight
    @property
    def pending(self) -> int:
        """Requests awaiting their reply."""
        return len(self._pending)

    def next_id(self) -> int:
        return next(self._ids)

    def expect(self, request_id: int) -> asyncio.Future[R]:
        """A future for the reply to ``request_id``; raises ``broken`` once the call ended."""
        if self.broken is not None:
            raise self.broken
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        return future

    def forget(self, request_id: int) -> None:
        self._pending.pop(request_id, None)

    def waiter(self, request_id: int) -> asyncio.Future[R] | None:
        """The unanswered future of ``request_id``, or None (answered, given up, unknown)."""
        future = self._pending.get(request_id)
        return None if future is None or future.done() else future

    def resolve(self, request_id: int, reply: R) -> None:
        future = self.waiter(request_id)
        if future is not None:
            future.set_result(reply)

    def _on_response(self, reply: R) -> None:
        """Dispatch one reply read from the call (default: by its ``request_id``)."""
        self.resolve(reply.request_id, reply)  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ writing
    async def write_now(self, data: bytes) -> None:
        """Queue ``data``; write the backlog here when no write is in progress."""
        self._backlog.append(data)
        if not self._writing:
            await self._write_backlog()

    def write_later(self, data: bytes) -> None:
        """Queue ``data`` for a writer task (never written by the caller)."""
        self._backlog.append(data)
        if not self._writing:
            self._spawn_writer()

    def _frame(self, backlog: collections.deque[bytes]) -> bytes:
        """The next stream message taken from ``backlog`` (not empty): one request."""
        return backlog.popleft()

    def _spawn_writer(self) -> None:
        self._writing = True  # from now: one writer at a time
        task = asyncio.get_running_loop().create_task(self._write_backlog())
        self._orphans.add(task)
        task.add_done_callback(self._orphans.discard)

    async def _write_backlog(self) -> None:
        self._writing = True
        backlog = self._backlog
        try:
            while backlog and self.broken is None:
                await self._call.write(self._frame(backlog))
        except CALL_ENDED:
            pass  # the call ended: the read loop fails every pending request with the cause
        finally:
            self._writing = False
            if backlog and self.broken is None:
                # This writer was cancelled (its caller's deadline): hand the rest over.
                self._spawn_writer()

    # ------------------------------------------------------------------ the end
    async def _read_loop(self) -> None:
        error: WharfError = UnavailableError(f"{self.name} ended by the broker")
        try:
            await each_response(self._call, self._on_response)
        except grpc.RpcError as exc:
            error = from_rpc_error(exc)
        except asyncio.CancelledError:
            error = self.closed_error()
        finally:
            self._fail_all(error)

    def closed_error(self) -> WharfError:
        """What waiters get when this side closed the stream."""
        return ClientClosedError(f"{self.name} closed")

    def _fail_all(self, error: WharfError) -> None:
        if self.broken is None:
            self.broken = error
        self._backlog.clear()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(self.broken)

    async def finish(self, grace_s: float = 5.0) -> None:
        """End gracefully: write what is queued, half-close, and give the broker ``grace_s``
        to answer what is in flight before cancelling the call."""
        try:
            while self._writing or self._backlog:
                if not self._writing:
                    await self._write_backlog()
                else:
                    await asyncio.sleep(0.001)
            if self.broken is None:
                await self._call.done_writing()  # the broker ends the stream after its replies
        except CALL_ENDED:
            pass
        try:
            async with asyncio.timeout(grace_s):
                await asyncio.shield(self._reader)
        except (TimeoutError, asyncio.CancelledError):
            self._call.cancel()
            self._reader.cancel()

    def abort(self) -> None:
        """End now: cancel the call; every waiter fails with ``closed_error``."""
        if self.broken is None:
            self.broken = self.closed_error()
        self._call.cancel()
        self._reader.cancel()
        for task in list(self._orphans):
            task.cancel()


class _Breakable(Protocol):
    broken: Any


S = TypeVar("S", bound=_Breakable)


class StreamSlot(Generic[S]):
    """A channel's current stream: ``get()`` opens one with ``open_stream`` on first use and
    again on the first use after it broke (reconnect on demand, paced by the callers)."""

    def __init__(self, open_stream: Callable[[], S]) -> None:
        self._open = open_stream
        self.current: S | None = None

    def get(self) -> S:
        stream = self.current
        if stream is None or stream.broken is not None:
            stream = self.current = self._open()
        return stream

    def take(self) -> S | None:
        """The current stream, no longer held here (to close it)."""
        stream, self.current = self.current, None
        return stream


__all__ = ["CALL_ENDED", "MuxStream", "StreamSlot"]
