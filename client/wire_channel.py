"""``WireChannel``: a grpc.aio Channel look-alike over the Wharf wire protocol (``wharf.wire``:
the framing and why), so the SDK's stubs and streams run unchanged on an endpoint written
``wire://host:port`` (the broker's ``wireListen`` port).

One TCP (or TLS) connection per channel, opened on the first call and again on the first call
after it broke, and used once the broker's preface has arrived (so a port of another protocol
is named by what it sent); calls are multiplexed on it by call id. What the SDK uses of grpc.aio is
offered: the four multi-callables (``metadata`` and ``timeout`` keywords), a stream call's
``write`` / ``done_writing`` / ``read`` / ``cancel`` / async iteration, ``await`` on a unary
call, and errors as ``grpc.aio.AioRpcError`` with the broker's status code, so
``errors.from_rpc_error`` maps them as for gRPC. A lost connection fails the calls on it with
UNAVAILABLE (retriable: the SDK's retries open a new one).

Flow control: a write returns once the bytes are handed to the socket, and waits while the
transport's buffer is above 1 MiB; the bytes of responses not yet read are counted per
connection and above 16 MiB the connection stops reading until they are taken (TCP then holds
the broker; the SDK's stream read loops take replies as they come, so this bounds a process
too busy to keep up).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import itertools
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from wharf import wire

MAX_QUEUED_BYTES = 16 << 20
MAX_FRAME_BYTES = 64 * 1024 * 1024  # as the gRPC channel's receive limit (client/channel.py)
# A broker writes its preface as it accepts; a peer silent this long is not a wire port (an
# HTTP/1 server waits for the client to speak first).
PREFACE_WAIT_S = 10.0
_UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
_CODES = {code.value[0]: code for code in grpc.StatusCode}
_END = object()
_EOF = grpc.aio.EOF  # type: ignore[attr-defined]  # what read() answers at the end (grpc.aio's)


def _error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details, None)


def client_ssl_context(
    ca_pem: bytes | None, cert_pem: bytes | None, key_pem: bytes | None
) -> ssl.SSLContext:
    """An SSLContext verifying the broker (``ca_pem`` or the system roots), presenting a client
    certificate when given (mutual TLS)."""
    context = ssl.create_default_context(cadata=ca_pem.decode("ascii") if ca_pem else None)
    if cert_pem is not None and key_pem is not None:
        wire.load_cert_chain_pem(context, cert_pem, key_pem)
    return context


class _Connection(wire.FramedProtocol):
    def __init__(self, target: str) -> None:
        super().__init__(MAX_FRAME_BYTES, MAX_QUEUED_BYTES)
        self.target = target
        self.calls: dict[int, _Call] = {}
        self.broken: grpc.aio.AioRpcError | None = None
        # Done once the peer's preface has arrived or the connection ended: no call is sent
        # before, so a peer of another protocol is named by what it sent (a gRPC port's
        # SETTINGS frame), not by the broken pipe our first call would meet as it closes.
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ids = itertools.count(1)

    def open_call(self, deserialize: Callable[[bytes], Any] | None) -> _Call:
        """A new call on this connection, registered for its frames."""
        call_id = next(self._ids)
        forget = functools.partial(self.calls.pop, call_id, None)
        call = _Call(call_id, deserialize, self.send, self.queued, self.drained, forget)
        self.calls[call_id] = call
        return call

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self.broken is None:
            reason = f": {exc}" if exc else ""
            if not self.reader.preface_seen:
                reason += " before its Wharf wire preface: is it the broker's wireListen port?"
            self.broken = _error(_UNAVAILABLE, f"connection to wire://{self.target} lost{reason}")
        if not self.ready.done():
            self.ready.set_result(None)
        calls, self.calls = self.calls, {}
        for call in calls.values():
            call.ended(self.broken)

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.reader.feed(data)
        except wire.ProtocolError as exc:
            self.broken = _error(_UNAVAILABLE, f"wire://{self.target}: {exc}")
            assert self.transport is not None
            self.transport.close()
            return
        if not self.ready.done() and self.reader.preface_seen:
            self.ready.set_result(None)
        calls = self.calls
        for kind, call_id, payload in frames:
            call = calls.get(call_id)
            if call is None:
                continue  # cancelled here: late frames are dropped
            if kind == wire.MESSAGE:
                call.message(payload)
            elif kind == wire.STATUS:
                del calls[call_id]
                try:
                    number, details = wire.decode_status(payload)
                except wire.ProtocolError as exc:
                    number, details = grpc.StatusCode.INTERNAL.value[0], str(exc)
                code = _CODES.get(number, grpc.StatusCode.UNKNOWN)
                call.ended(None if code is grpc.StatusCode.OK else _error(code, details))

    def send(self, data: bytes | tuple[bytes, ...]) -> None:
        if self.broken is not None:
            raise self.broken
        assert self.transport is not None
        if type(data) is tuple:
            self.transport.writelines(data)
        else:
            self.transport.write(data)  # type: ignore[arg-type]


class _Call:
    """One call's responses and end, whatever its kind."""

    __slots__ = (
        "_deserialize",
        "_done",
        "_forget",
        "_items",
        "_queued",
        "_waiter",
        "call_id",
        "drained",
        "error",
        "send",
        "sink",
    )

    def __init__(
        self,
        call_id: int,
        deserialize: Callable[[bytes], Any] | None,
        send: Callable[[bytes | tuple[bytes, ...]], None],
        queued: Callable[[int], None],
        drained: Callable[[], Awaitable[None]],
        forget: Callable[[], object],
    ) -> None:
        self.call_id = call_id
        self._deserialize = deserialize
        # The connection's parts a call uses: its writes, its count of response bytes not yet
        # read, its write gate, and dropping this call from its table (frames then ignored).
        self.send = send
        self._queued = queued
        self.drained = drained
        self._forget = forget
        self._items: collections.deque[Any] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._done = False
        self.error: BaseException | None = None
        # Set by ``_StreamCall.deliver``: responses go to it from the connection's read
        # callback instead of the queue (no task wake-up between a reply and its reader).
        self.sink: Callable[[Any], None] | None = None

    def message(self, payload: bytes) -> None:
        if self.sink is not None:
            self._to_sink(self.sink, payload)
            return
        self._items.append(payload)
        self._queued(len(payload))
        self._wake()

    def sink_into(self, sink: Callable[[Any], None]) -> None:
        """From now on hand responses to ``sink`` as they arrive, those queued first."""
        items = self._items
        while items and items[0] is not _END and not self._done:
            payload = items.popleft()
            self._queued(-len(payload))
            self._to_sink(sink, payload)
        if not self._done:
            self.sink = sink

    def _to_sink(self, sink: Callable[[Any], None], payload: bytes) -> None:
        """A sink that raises (or a response that does not decode) ends the call with that
        error, here only: the connection and its other calls go on."""
        try:
            sink(payload if self._deserialize is None else self._deserialize(payload))
        except Exception as exc:
            self.sink = None
            self.cancel()
            self.error = exc

    def ended(self, error: BaseException | None) -> None:
        self._done = True
        self.error = error
        self._items.append(_END)
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def next(self) -> Any:
        """The next response, or _END once the call ended (``error`` then says how)."""
        items = self._items
        while not items:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        item = items[0]
        if item is _END:
            return _END
        items.popleft()
        self._queued(-len(item))
        deserialize = self._deserialize
        return item if deserialize is None else deserialize(item)

    def cancel(self) -> bool:
        if self._done:
            return False
        self._done = True
        self._forget()
        with contextlib.suppress(grpc.aio.AioRpcError):
            self.send(wire.frame(wire.CANCEL, self.call_id))
        self._queued(-sum(len(item) for item in self._items if item is not _END))
        self._items.clear()
        self.error = asyncio.CancelledError()
        self._items.append(_END)
        self._wake()
        return True

    @property
    def done(self) -> bool:
        return self._done


async def each_response(call: Any, handle: Callable[[Any], None]) -> None:
    """Run ``handle`` on each response of a stream ``call`` until it ends (raising its error):
    as they arrive on a wire call (``deliver``), by iteration on a grpc.aio one."""
    deliver = getattr(call, "deliver", None)
    if deliver is not None:
        await deliver(handle)
    else:
        async for response in call:
            handle(response)


def _retrieve(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _opening(
    call_id: int, method: str, metadata: Any, timeout: float | None, request: bytes | None = None
) -> tuple[bytes, ...]:
    """The frames that open a call; with a unary ``request`` OPEN + MESSAGE + HALF_CLOSE, to go
    out in one write."""
    frames: tuple[bytes, ...] = (
        wire.frame(wire.OPEN, call_id, wire.encode_open(method, metadata, timeout)),
    )
    if request is not None:
        frames += (
            wire.header(wire.MESSAGE, call_id, len(request)),
            request,
            wire.frame(wire.HALF_CLOSE, call_id),
        )
    return frames


class _StreamCall:
    """A streaming call (grpc.aio's StreamStreamCall / UnaryStreamCall surface)."""

    def __init__(
        self,
        channel: WireChannel,
        method: str,
        serialize: Callable[[Any], bytes] | None,
        deserialize: Callable[[bytes], Any] | None,
        metadata: Any,
        timeout: float | None,
        first: Any = None,
        has_first: bool = False,
    ) -> None:
        self._serialize = serialize
        self._deserialize = deserialize
        self._call: _Call | None = None
        self._cancelled = False
        self.feeder: asyncio.Task[None] | None = None  # writes a request iterator (kept alive)
        self._opened = asyncio.get_running_loop().create_task(
            self._open(channel, method, metadata, timeout, first, has_first)
        )
        # A failure to connect is raised by the call's next write or read; one never made
        # must not be logged as "never retrieved".
        self._opened.add_done_callback(_retrieve)

    async def _open(
        self,
        channel: WireChannel,
        method: str,
        metadata: Any,
        timeout: float | None,  # noqa: ASYNC109  # the call's deadline, sent to the broker
        first: Any,
        has_first: bool,
    ) -> _Call:
        conn = await channel.connection()
        call = self._call = conn.open_call(self._deserialize)
        data = None
        if has_first:  # a unary request
            data = first if self._serialize is None else self._serialize(first)
        conn.send(_opening(call.call_id, method, metadata, timeout, data))
        return call

    async def _ready(self) -> _Call:
        if self._cancelled:
            raise asyncio.CancelledError
        return self._call if self._call is not None else await self._opened

    async def write(self, request: Any) -> None:
        call = await self._ready()
        if call.done:
            raise asyncio.InvalidStateError("the call has ended")
        data = request if self._serialize is None else self._serialize(request)
        call.send((wire.header(wire.MESSAGE, call.call_id, len(data)), data))
        await call.drained()

    async def done_writing(self) -> None:
        call = await self._ready()
        if not call.done:
            call.send(wire.frame(wire.HALF_CLOSE, call.call_id))

    async def read(self) -> Any:
        call = await self._ready()
        item = await call.next()
        if item is _END:
            if call.error is not None:
                raise call.error
            return _EOF
        return item

    async def deliver(self, sink: Callable[[Any], None]) -> None:
        """Hand each response to ``sink`` as it arrives, inside the connection's read callback
        (a reader task would wake a loop step later, on the path of every reply), until the
        call ends; raises the call's error as iteration does. A response that arrived before
        goes first. Not in grpc.aio: the SDK's stream read loops use it when offered."""
        call = await self._ready()
        call.sink_into(sink)
        while (item := await call.next()) is not _END:  # only when the sink failed
            sink(item)
        if call.error is not None:
            raise call.error

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Any]:
        call = await self._ready()
        while True:
            item = await call.next()
            if item is _END:
                if call.error is not None:
                    raise call.error
                return
            yield item

    def cancel(self) -> bool:
        if self._cancelled:
            return False
        self._cancelled = True
        if self._call is not None:
            return self._call.cancel()
        self._opened.cancel()
        return True

    def cancelled(self) -> bool:
        return self._cancelled

    def done(self) -> bool:
        return self._cancelled or (self._call is not None and self._call.done)


class _UnaryUnary:
    def __init__(self, channel: WireChannel, method: str, serialize: Any, deserialize: Any):
        self._channel = channel
        self._method = method
        self._serialize = serialize
        self._deserialize = deserialize

    def __call__(
        self, request: Any, *, timeout: float | None = None, metadata: Any = None, **_: Any
    ) -> Any:
        return self._invoke(request, timeout, metadata)

    async def _invoke(self, request: Any, timeout: float | None, metadata: Any) -> Any:  # noqa: ASYNC109
        conn = await self._channel.connection()
        call = conn.open_call(self._deserialize)
        data = request if self._serialize is None else self._serialize(request)
        conn.send(_opening(call.call_id, self._method, metadata, timeout, data))
        try:
            async with asyncio.timeout(timeout):
                reply = await call.next()
                if reply is _END:
                    raise call.error or _error(
                        grpc.StatusCode.INTERNAL, "the broker ended a unary call without a reply"
                    )
                end = await call.next()
        except TimeoutError:
            call.cancel()
            raise _error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
        except asyncio.CancelledError:
            call.cancel()
            raise
        if end is _END and call.error is not None:
            raise call.error
        return reply


class _Streaming:
    def __init__(
        self, channel: WireChannel, method: str, serialize: Any, deserialize: Any, unary_in: bool
    ) -> None:
        self._channel = channel
        self._method = method
        self._serialize = serialize
        self._deserialize = deserialize
        self._unary_in = unary_in

    def __call__(
        self,
        request: Any = None,
        *,
        timeout: float | None = None,
        metadata: Any = None,
        **_: Any,
    ) -> _StreamCall:
        unary_in = self._unary_in
        call = _StreamCall(
            self._channel,
            self._method,
            self._serialize,
            self._deserialize,
            metadata,
            timeout,
            request if unary_in else None,
            unary_in,
        )
        if not unary_in and request is not None:  # a request iterator, as grpc.aio takes one
            call.feeder = asyncio.get_running_loop().create_task(_feed(call, request))
        return call


async def _feed(call: _StreamCall, requests: Any) -> None:
    with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
        if hasattr(requests, "__aiter__"):
            async for request in requests:
                await call.write(request)
        else:
            for request in requests:
                await call.write(request)
        await call.done_writing()


class _StreamUnary:
    def __init__(self, channel: WireChannel, method: str, serialize: Any, deserialize: Any):
        self._streaming = _Streaming(channel, method, serialize, deserialize, False)

    def __call__(self, request_iterator: Any = None, **kwargs: Any) -> Any:
        return self._invoke(self._streaming(request_iterator, **kwargs))

    async def _invoke(self, call: _StreamCall) -> Any:
        reply = await call.read()
        if reply is _EOF:
            raise _error(grpc.StatusCode.INTERNAL, "the broker ended the call without a reply")
        return reply


class WireChannel(grpc.aio.Channel):
    """Calls to ``target`` (host:port of a wireListen port) over one wire connection."""

    def __init__(self, target: str, ssl_context: ssl.SSLContext | None = None) -> None:
        self._target = target
        self._host, _, port = target.rpartition(":")
        self._port = int(port)
        self._ssl = ssl_context
        self._conn: _Connection | None = None
        self._connecting: asyncio.Future[_Connection] | None = None
        self._closed = False

    async def connection(self) -> _Connection:
        conn = self._conn
        if conn is not None and conn.broken is None:
            return conn
        if self._closed:
            raise _error(grpc.StatusCode.CANCELLED, "the channel is closed")
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._connect())
        try:
            return await asyncio.shield(self._connecting)
        finally:
            if self._connecting is not None and self._connecting.done():
                self._connecting = None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        host = self._host.strip("[]")
        try:
            _, conn = await loop.create_connection(
                lambda: _Connection(self._target),
                host,
                self._port,
                ssl=self._ssl,
                server_hostname=host if self._ssl is not None else None,
            )
        except (OSError, ssl.SSLError) as exc:
            raise _error(_UNAVAILABLE, f"cannot connect to wire://{self._target}: {exc}") from None
        try:
            async with asyncio.timeout(PREFACE_WAIT_S):
                await conn.ready
        except TimeoutError:
            conn.broken = _error(
                _UNAVAILABLE,
                f"wire://{self._target} accepted the connection but sent no Wharf wire preface "
                f"in {PREFACE_WAIT_S:g} s: is it the broker's wireListen port?",
            )
            assert conn.transport is not None
            conn.transport.close()
        if conn.broken is not None:
            raise conn.broken
        self._conn = conn
        return conn

    # --- grpc.aio.Channel ------------------------------------------------------------------------
    def unary_unary(self, method: str, request_serializer: Any = None, response_deserializer: Any = None, **_: Any) -> Any:  # type: ignore[override]  # fmt: skip
        return _UnaryUnary(self, method, request_serializer, response_deserializer)

    def unary_stream(self, method: str, request_serializer: Any = None, response_deserializer: Any = None, **_: Any) -> Any:  # type: ignore[override]  # fmt: skip
        return _Streaming(self, method, request_serializer, response_deserializer, True)

    def stream_unary(self, method: str, request_serializer: Any = None, response_deserializer: Any = None, **_: Any) -> Any:  # type: ignore[override]  # fmt: skip
        return _StreamUnary(self, method, request_serializer, response_deserializer)

    def stream_stream(self, method: str, request_serializer: Any = None, response_deserializer: Any = None, **_: Any) -> Any:  # type: ignore[override]  # fmt: skip
        return _Streaming(self, method, request_serializer, response_deserializer, False)

    async def __aenter__(self) -> WireChannel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self, grace: float | None = None) -> None:
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None and conn.transport is not None:
            conn.broken = conn.broken or _error(grpc.StatusCode.CANCELLED, "the channel is closed")
            conn.transport.close()

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        if self._conn is not None and self._conn.broken is None:
            return grpc.ChannelConnectivity.READY
        return grpc.ChannelConnectivity.IDLE

    async def wait_for_state_change(self, last_observed_state: grpc.ChannelConnectivity) -> None:
        await asyncio.sleep(0.1)

    async def channel_ready(self) -> None:
        while True:
            try:
                await self.connection()
                return
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.1)
