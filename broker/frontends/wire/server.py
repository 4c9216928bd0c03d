"""The broker's wire port: the gRPC method handlers of ``handlers.add_servicer`` (ACL-wrapped
when aclEnable) served over the Wharf wire protocol (``wharf.wire``: framing, why).

One ``_Connection`` (an asyncio Protocol) per client connection; a task per call runs the
method's behavior with a ``WireContext`` that offers what the handlers use of grpc.aio's
ServicerContext (peer, invocation_metadata, abort, time_remaining, add_done_callback).
Errors become a STATUS frame with gRPC's code number: ``context.abort`` (the RPC wrapper and
the ACL), UNIMPLEMENTED for an unknown method, INTERNAL (logged) for a handler bug.

One addition of its own: ``context.write_now(reply)`` for a response-streaming call writes a
reply at once from any task (the pull stream's pulls: one loop step sooner than waking the
call's task to write it); it declines (False) once the call has ended or been cancelled, the
connection is closing, or the write gate below is shut. The call's task writes every reply
its handler yields at once (it waits only after writing), so a direct write overtakes no
reply the task holds; the handler keeps its own replies in order (it writes directly only
while it has none queued). And ``context.write_durable(reply, end)`` (plaintext only): the
reply is handed to the store's sync thread, which writes it to this socket right after the
fdatasync that makes the log durable to ``end`` (broker/core/long_poll.py "Ahead of the
sync"); the connection's other writes wait meanwhile (``_held``: one fdatasync, ~0.3 ms), so
the thread's bytes are the next on the stream and nothing interleaves with them. A disk whose
fdatasync hangs holds them for at most ``OWED_LIMIT_S``: then the connection is shut down (its
client reconnects and pulls again from its offsets) rather than left stalled.

Bounds (a client that stops reading, or floods requests, cannot grow the broker's memory):
- writes: the transport's buffer pauses the writer above ``WRITE_HIGH_WATER`` (1 MiB): a
  stream's handler then waits in its yield, so the pull stream's own windows (64 pulls, 16 MiB
  of replies per client) stop reading further pulls; ``write_now`` writes only below the
  mark, so a call writes at most two messages past it (one direct, one by its task);
- reads: the bytes of requests parsed and not yet taken by their handlers are counted per
  connection; above ``MAX_QUEUED_BYTES`` (8 MiB) the connection stops reading the socket until
  they fall to half, so TCP holds the client's writes (as HTTP/2 flow control does for gRPC);
- a frame longer than ``max_message_bytes`` (the gRPC limit) ends the connection;
- calls: at most ``max_calls`` open on a connection (maxCallsPerConnection), a call past it is
  answered RESOURCE_EXHAUSTED;
- before authentication (aclEnable: until an OPEN carries metadata the ACL accepts, checked
  at once with ``AclGuard.authenticate``, memoized, ~1 us) a connection may hold
  ``calls_before_auth`` calls and ``bytes_before_auth`` bytes (an unfinished frame or queued
  requests; past it the connection ends): five connections without credentials holding
  10,000 calls each took the broker from 228 to 637 MiB and another client's send+receive
  from 2-3 ms to 4.4 s. The calls of such a connection are still answered by the handlers'
  ACL (UNAUTHENTICATED, with its reason);
- time and connections: the listener's guard (broker/kit/bounds.py) closes a connection
  idle (no call open) for connectionMaxIdleMs or slower than frameReadTimeoutMs to send a
  frame, or a unary call's request after its OPEN (``receiving``).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc
from wharf import wire
from wharf.broker.core.read import DEFERRED, DURABLE, DurableWriter

if TYPE_CHECKING:
    from wharf.broker.frontends.acl_guard import AclGuard

log = logging.getLogger("wharf.broker.frontends.wire")
MAX_QUEUED_BYTES = 8 << 20
# Calls open at once on one authenticated connection (the SDK keeps a handful; each holds a
# task): maxCallsPerConnection's default. Before authentication: maxCallsBeforeAuth's.
MAX_CALLS = 10_000
CALLS_BEFORE_AUTH = 16
_PRE_AUTH_SLICE = 4096  # bytes parsed at a time before authentication (``data_received``)
BYTES_BEFORE_AUTH = 512 * 1024
# How long a connection's writes may wait behind a reply the sync thread owes it: an fdatasync
# here takes ~0.4 ms, p99 1-3 ms, its stalls 20-50 ms (tests/bench/README.md "lone"); 5 s is
# syncFlushTimeout's default, past which the send of those records answered FLUSH_DISK_TIMEOUT,
# so the disk is not slow but hung and the connection's other calls should fail over.
OWED_LIMIT_S = 5.0
_END = object()
_OK = grpc.StatusCode.OK.value[0]
_CANCELLED = grpc.StatusCode.CANCELLED.value[0]


class WireContext:
    """What the handlers use of grpc.aio.ServicerContext, for one wire call, and
    ``write_now`` (the wire port's own)."""

    __slots__ = (
        "_callbacks", "_deadline", "_direct", "_durable", "_metadata", "_peer", "code", "details",
    )  # fmt: skip

    def __init__(self, peer: str, metadata: tuple[tuple[str, str], ...], timeout: float | None):
        self._peer = peer
        self._metadata = metadata
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._callbacks: list[Callable[[Any], None]] = []
        # The connection's writer for this call's replies (set by it for a streaming reply).
        self._direct: Callable[[Any], bool] | None = None
        self._durable: Callable[[Any, int], bool] | None = None
        self.code = _OK
        self.details = ""

    def write_now(self, reply: Any) -> bool:
        """Write one reply of this response-streaming call now, from any task: True when
        written; False (nothing written) when the call has ended or was cancelled, the
        connection is closing, or its write gate is shut (the caller then hands the reply to
        its handler's generator as usual). The caller keeps its replies in order."""
        direct = self._direct
        return direct is not None and direct(reply)

    def write_durable(self, reply: Any, end: int) -> bool:
        """Have one reply of this response-streaming call written by the store's sync thread
        once the log is durable to ``end`` ("Ahead of the sync"): True when taken (it will be
        written, or was: durable already); False (nothing written, nor to be) when the call
        or connection is over, the socket is TLS or has bytes queued or owed, or the store
        declined."""
        durable = self._durable
        return durable is not None and durable(reply, end)

    def peer(self) -> str:
        return self._peer

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        self._callbacks.append(callback)

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        self.code = code.value[0]
        self.details = details
        raise grpc.aio.AbortError(details)

    def done(self) -> None:
        self._direct = self._durable = None  # the call is over: both decline from now on
        for callback in self._callbacks:
            try:
                callback(self)
            except Exception:
                log.exception("a wire call's done callback failed")


class _Requests:
    """A streaming call's requests as an async iterator (what grpc.aio hands a handler), and
    ``sink_into``: the wire port's own, for a handler that can take a request synchronously."""

    __slots__ = ("_items", "_queued", "_sink", "_waiter")

    def __init__(self, queued: Callable[[int], None]) -> None:
        self._queued = queued  # the connection's count of request bytes not yet taken
        self._items: collections.deque[Any] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._sink: Callable[[Any], bool] | None = None

    def sink_into(self, sink: Callable[[Any], bool]) -> None:
        """From now on offer each request, while none is queued, to ``sink`` in the
        connection's read callback: True = taken there (the handler's iterator never sees
        it), False = queued for the iterator as usual. A sink that raises (a bug) is logged
        and the request counts as taken: it may have been acted on, so it is not handed on."""
        self._sink = sink

    def put(self, item: Any, nbytes: int = 0) -> bool:
        """Hand over a request (or _END); False when a sink took it, True when it was queued
        (its ``nbytes`` then count against the connection until the iterator takes it)."""
        sink = self._sink
        if sink is not None and item is not _END and not self._items:
            try:
                if sink(item):
                    return False
            except Exception:
                log.exception("a wire call's request sink failed")
                return False
        self._items.append((item, nbytes))
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        return True

    def __aiter__(self) -> _Requests:
        return self

    async def __anext__(self) -> Any:
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        item, nbytes = self._items[0]
        if item is _END:
            raise StopAsyncIteration  # and stays ended
        self._items.popleft()
        self._queued(-nbytes)
        return item

    def discard(self) -> None:
        self._queued(-sum(nbytes for _, nbytes in self._items))
        self._items.clear()


class _Call:
    __slots__ = ("context", "handler", "requests", "task")

    def __init__(self, handler: Any, context: WireContext) -> None:
        self.handler = handler
        self.context = context
        self.requests: _Requests | None = None
        self.task: asyncio.Task[None] | None = None


class _Connection(wire.FramedProtocol):
    def __init__(
        self,
        methods: dict[str, Any],
        connections: set[_Connection],
        max_message_bytes: int,
        durable_writer: DurableWriter | None = None,
        server: WireServer | None = None,
    ) -> None:
        limits = server or WireServer(max_message_bytes)
        self._acl = limits.acl
        self._authenticated = limits.acl is None
        self._max_calls = limits.max_calls
        self._calls_before_auth = limits.calls_before_auth
        self._bytes_before_auth = limits.bytes_before_auth
        self._queue_after_auth = limits.queue_limit
        queue_limit = limits.queue_limit if self._authenticated else limits.bytes_before_auth
        super().__init__(max_message_bytes, queue_limit)
        self._methods = methods
        self._connections = connections  # the server's open connections (stop closes them)
        self._awaiting = 0  # unary-request calls opened whose request has not come
        self._refused_before_auth = 0  # calls refused past maxCallsBeforeAuth
        self._calls: dict[int, _Call] = {}
        self._peer = "unknown"
        self._durable_writer = durable_writer
        self._fd = -1  # the socket's, for the sync thread: plaintext TCP or Unix only
        # Writes held while the sync thread owes this socket a reply ("Ahead of the sync"),
        # and the timer that gives up on a hung disk (``_owed_overdue``).
        self._held: list[bytes] | None = None
        self._owed_timer: asyncio.TimerHandle | None = None

    # --- transport events -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        address = transport.get_extra_info("peername")
        if isinstance(address, tuple) and len(address) == 2:
            self._peer = f"ipv4:{address[0]}:{address[1]}"
        elif isinstance(address, tuple):
            self._peer = f"ipv6:[{address[0]}]:{address[1]}"
        self._connections.add(self)
        sock = transport.get_extra_info("socket")
        plaintext = transport.get_extra_info("ssl_object") is None
        if self._durable_writer is not None and sock is not None and plaintext:
            self._fd = sock.fileno()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._connections.discard(self)
        for call in self._calls.values():
            if call.task is not None:
                call.task.cancel()
        self._calls.clear()
        self._awaiting = 0
        self._release_owed()

    @property
    def calls(self) -> dict[int, _Call]:
        return self._calls

    # --- what the listener's guard asks (broker/kit/bounds.py) -------------------------------
    def busy(self) -> bool:
        return bool(self._calls)

    def receiving(self) -> int:
        return self.reader.buffered + self._awaiting

    def data_received(self, data: bytes) -> None:
        if self._authenticated or len(data) <= _PRE_AUTH_SLICE:
            self._received(data)
            return
        # Before authentication, in slices: a flood of OPENs is closed after its first few
        # dozen frames instead of every frame of a 256 KiB read being parsed first (~3,600
        # OPENs, ~3 ms of the loop per connection).
        view = memoryview(data)
        for start in range(0, len(data), _PRE_AUTH_SLICE):
            if self._authenticated:
                self._received(view[start:])
                return
            self._received(view[start : start + _PRE_AUTH_SLICE])
            if self.closed:
                return

    def _received(self, data: bytes | memoryview) -> None:
        try:
            frames = self.reader.feed(data)  # type: ignore[arg-type]  # a buffer will do
        except wire.ProtocolError as exc:
            self._fail(str(exc))
            return
        for kind, call_id, payload in frames:
            if kind == wire.MESSAGE:
                self._on_message(call_id, payload)
            elif kind == wire.OPEN:
                self._on_open(call_id, payload)
            elif kind == wire.HALF_CLOSE:
                call = self._calls.get(call_id)
                if call is not None and call.requests is not None:
                    call.requests.put(_END)
            elif kind == wire.CANCEL:
                call = self._calls.pop(call_id, None)
                if call is not None and call.task is not None:
                    call.task.cancel()
                elif call is not None and call.requests is None:
                    self._awaiting -= 1
            else:
                self._fail(f"a client sent frame kind {kind}, which only a server sends")
                return
            if self.closed:
                return
        if (
            not self._authenticated
            and self.reader.buffered + self._queued > self._bytes_before_auth
        ):
            self._fail(
                f"{self.reader.buffered + self._queued} bytes buffered before any call "
                f"authenticated (maxBytesBeforeAuth is {self._bytes_before_auth})"
            )

    def _fail(self, reason: str) -> None:
        if self.closed:
            return
        log.warning("wire connection from %s closed: %s", self._peer, reason)
        self.closed = True  # the frames after it in this read are not looked at
        if self.transport is not None:
            self.transport.close()

    # --- calls ----------------------------------------------------------------------------------
    def _on_open(self, call_id: int, payload: bytes) -> None:
        try:
            method, metadata, timeout = wire.decode_open(payload)
        except wire.ProtocolError as exc:
            self._fail(str(exc))
            return
        if call_id in self._calls:
            self._fail(f"call id {call_id} opened twice")
            return
        handler = self._methods.get(method)
        if not self._authenticated:
            self._authenticate(metadata)
        limit = self._max_calls if self._authenticated else self._calls_before_auth
        if len(self._calls) >= limit:
            setting = "maxCallsPerConnection" if self._authenticated else "maxCallsBeforeAuth"
            if not self._authenticated:
                self._refused_before_auth += 1
                if self._refused_before_auth > limit:
                    # A flood, not a client: answering each OPEN would cost the loop more
                    # than the peer (5 x 10,000 OPENs ~0.5 s of writes).
                    self._fail(f"{limit} calls refused before any call authenticated ({setting})")
                    return
            self._write_status(
                call_id,
                grpc.StatusCode.RESOURCE_EXHAUSTED.value[0],
                f"{len(self._calls)} calls are open on this connection ({setting} is {limit}); "
                "end some first",
            )
            return
        if handler is None:
            self._write_status(
                call_id, grpc.StatusCode.UNIMPLEMENTED.value[0], f"unknown method {method}"
            )
            return
        context = WireContext(self._peer, metadata, timeout)
        call = _Call(handler, context)
        if handler.response_streaming:
            serialize = handler.response_serializer or _as_bytes
            context._direct = functools.partial(self._write_direct, call_id, call, serialize)
            if self._fd >= 0:
                context._durable = functools.partial(self._write_durable, call_id, call, serialize)
        self._calls[call_id] = call
        if handler.request_streaming:
            call.requests = _Requests(self.queued)
            call.task = asyncio.get_running_loop().create_task(self._run(call_id, call, None))
        else:
            self._awaiting += 1  # its request is due at once (the guard's read deadline)

    def _authenticate(self, metadata: tuple[tuple[str, str], ...]) -> None:
        """aclEnable: the connection counts as authenticated from its first OPEN whose
        metadata the ACL accepts (the calls themselves are still checked by the handlers)."""
        acl = self._acl
        try:
            if acl is not None:
                acl.authenticate(metadata, self._peer)
        except Exception:  # Unauthenticated, Denied: the handler's check answers the call
            return
        self._authenticated = True
        self._queue_limit = self._queue_after_auth
        if self._reading_paused and self._queued <= self._queue_limit // 2:
            self.queued(0)

    def _on_message(self, call_id: int, payload: bytes) -> None:
        call = self._calls.get(call_id)
        if call is None:
            return  # cancelled or ended: late requests are dropped
        deserialize = call.handler.request_deserializer
        request = payload if deserialize is None else deserialize(payload)  # None: bytes
        if call.requests is not None:
            if call.requests.put(request, len(payload)):
                self.queued(len(payload))
        elif call.task is None:
            self._awaiting -= 1
            call.task = asyncio.get_running_loop().create_task(self._run(call_id, call, request))

    async def _run(self, call_id: int, call: _Call, request: Any) -> None:
        handler: Any = call.handler
        context = call.context
        serialize = handler.response_serializer or _as_bytes  # None: the handler gives bytes
        code, details = _OK, ""
        last: bytes | None = None  # a unary reply: written with its STATUS in one write
        try:
            if handler.response_streaming:
                if call.requests is not None:
                    replies = handler.stream_stream(call.requests, context)
                else:
                    replies = handler.unary_stream(request, context)
                try:
                    async for reply in replies:
                        await self._write_message(call_id, serialize(reply))
                finally:
                    await replies.aclose()  # its finally blocks give stream budgets back now
            else:
                if call.requests is not None:
                    reply = await handler.stream_unary(call.requests, context)
                else:
                    reply = await handler.unary_unary(request, context)
                last = serialize(reply)
        except asyncio.CancelledError:
            code, details = _CANCELLED, "cancelled"  # by the client or the broker's stop
        except grpc.aio.AbortError:
            code, details = context.code, context.details
        except Exception:
            log.exception("wire call %s failed", _method_name(handler))
            code, details = grpc.StatusCode.INTERNAL.value[0], "internal error (see the broker log)"
        finally:
            if call.requests is not None:
                call.requests.discard()
            context.done()
        if self._calls.get(call_id) is call:
            del self._calls[call_id]
            if code != _CANCELLED or not self.closed:
                self._write_status(call_id, code, details, last)

    async def _write_message(self, call_id: int, data: bytes) -> None:
        self._write_message_now(call_id, data)
        await self.drained()

    def _write_direct(
        self, call_id: int, call: _Call, serialize: Callable[[Any], bytes], reply: Any
    ) -> bool:
        """``WireContext.write_now``: the reply's MESSAGE frame written now when the call is
        still open (not ended, not cancelled), the connection too and its write gate open."""
        if not self._open_for(call_id, call):
            return False
        self._write_message_now(call_id, serialize(reply))
        return True

    def _open_for(self, call_id: int, call: _Call) -> bool:
        """A direct write may go: the call is still open (not ended, not cancelled), the
        connection too and its write gate open."""
        transport = self.transport
        return not (
            self.closed
            or self.paused
            or transport is None
            or transport.is_closing()
            or self._calls.get(call_id) is not call
        )

    def _write_durable(
        self, call_id: int, call: _Call, serialize: Callable[[Any], bytes], reply: Any, end: int
    ) -> bool:
        """``WireContext.write_durable``: the reply's MESSAGE frame handed to the store's
        sync thread, which writes it to this socket (a dup of its fd) right after the
        fdatasync that makes the log durable to ``end``; this connection's own writes wait
        in ``_held`` until the loop hears the outcome (``_owed_written``). Only on an idle
        socket (nothing in the transport's buffer, no reply owed already), so the thread's
        bytes are the next on the stream."""
        transport = self.transport
        writer = self._durable_writer
        if (
            writer is None
            or self._held is not None
            or not self._open_for(call_id, call)
            or transport is None
            or transport.get_write_buffer_size()
        ):
            return False
        data = serialize(reply)
        frame = wire.header(wire.MESSAGE, call_id, len(data)) + data
        outcome = writer(end, self._fd, frame, functools.partial(self._owed_written, frame))
        if outcome == DEFERRED:
            self._held = []
            loop = asyncio.get_running_loop()
            self._owed_timer = loop.call_later(OWED_LIMIT_S, self._owed_overdue)
            return True
        if outcome == DURABLE:  # the sync ended meanwhile: the loop writes it
            transport.write(frame)
            return True
        return False

    def _owed_written(self, frame: bytes, outcome: int) -> None:
        """The sync thread's write of ``frame`` ended (``outcome``: bytes written, or < 0 when
        nothing was: the sync failed, the store closed, or the socket broke): the rest of the
        frame, then the writes held meanwhile. A reply lost that way ends the connection, as
        a broken stream does: the client pulls again from its offset."""
        held = self._release_owed()
        transport = self.transport
        if held is None or self.closed or transport is None or transport.is_closing():
            return
        if outcome < 0:
            log.warning(
                "wire connection from %s closed: a pull reply could not be written after the "
                "sync (outcome %d); the client pulls again", self._peer, outcome,
            )  # fmt: skip
            transport.close()
            return
        if outcome < len(frame):
            held.insert(0, frame[outcome:])
        if held:
            transport.writelines(held)

    def _release_owed(self) -> list[bytes] | None:
        """The writes held behind the owed reply (None: nothing was owed); stops its timer."""
        held, self._held = self._held, None
        if self._owed_timer is not None:
            self._owed_timer.cancel()
            self._owed_timer = None
        return held

    def _owed_overdue(self) -> None:
        """The owed reply's fdatasync has not ended in ``OWED_LIMIT_S``: shut the socket down
        (the sync thread's dup of it included: its late send then fails, EPIPE) and drop the
        held writes, so the client sees the connection end now, reconnects and pulls again
        from its offsets, instead of waiting on a hung disk for every call it shares."""
        if self._release_owed() is None:
            return
        log.warning(
            "wire connection from %s closed: a pull reply waited %.0f s for the commit log's "
            "fdatasync (a hung disk?); the client reconnects and pulls again",
            self._peer, OWED_LIMIT_S,
        )  # fmt: skip
        transport = self.transport
        if transport is None or transport.is_closing():
            return  # closing already (and its fd number may be closed and reused meanwhile)
        # Through a dup: shutdown acts on the socket, not the fd, and uvloop's transports do
        # not offer shutdown() on the socket they expose.
        try:
            with socket.fromfd(self._fd, socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already gone: the abort below is all there is to do
        transport.abort()

    def _send(self, parts: tuple[bytes, ...]) -> None:
        """Every write of this connection: held while the sync thread owes the socket a reply."""
        held = self._held
        if held is not None:
            held.extend(parts)
        else:
            assert self.transport is not None
            self.transport.writelines(parts)

    def _write_message_now(self, call_id: int, data: bytes) -> None:
        if self.closed or self.transport is None:
            raise asyncio.CancelledError  # the client went away
        self._send((wire.header(wire.MESSAGE, call_id, len(data)), data))

    def _write_status(
        self, call_id: int, code: int, details: str, reply: bytes | None = None
    ) -> None:
        """The call's STATUS, after its unary ``reply`` when given (one write for both)."""
        if self.closed or self.transport is None:
            return
        status = wire.frame(wire.STATUS, call_id, wire.encode_status(code, details))
        if reply is not None:  # b"" too: a reply of default fields
            self._send((wire.header(wire.MESSAGE, call_id, len(reply)), reply, status))
        else:
            self._send((status,))


def _as_bytes(reply: bytes) -> bytes:
    return reply


def _method_name(handler: Any) -> str:
    behavior = (
        handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream
    )
    return getattr(behavior, "__qualname__", "?")


class WireServer:
    """Method handlers by path, served on one listening socket (plaintext or TLS)."""

    def __init__(self, max_message_bytes: int) -> None:
        self.max_message_bytes = max_message_bytes
        self.methods: dict[str, Any] = {}  # grpc.RpcMethodHandler by "/service/method"
        # Per connection (the module's "Bounds"): set by the part from the settings.
        self.acl: AclGuard | None = None  # aclEnable: connections start unauthenticated
        self.max_calls = MAX_CALLS
        self.calls_before_auth = CALLS_BEFORE_AUTH
        self.bytes_before_auth = BYTES_BEFORE_AUTH
        self.queue_limit = MAX_QUEUED_BYTES
        self.connections: set[_Connection] = set()
        self._server: asyncio.Server | None = None
        # ReadCore.write_when_durable (set by the part at attach): replies ahead of the sync.
        self.durable_writer: DurableWriter | None = None

    def add_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        for name, handler in handlers.items():
            self.methods[f"/{service}/{name}"] = handler

    def running_calls(self) -> list[asyncio.Task[object]]:
        """The tasks of the calls in flight (``drain`` at stop)."""
        return [c.task for conn in self.connections for c in conn.calls.values() if c.task]

    def protocol(self) -> asyncio.Protocol:
        """One connection's protocol (the wire part serves it on its reserved sockets)."""
        return _Connection(
            self.methods, self.connections, self.max_message_bytes, self.durable_writer, self
        )

    async def start(self, host: str, port: int, ssl: Any = None) -> int:
        """Listen; returns the bound port (``port`` 0 = ephemeral). OSError when taken."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self.protocol,
            host or None,
            port,
            ssl=ssl,
            reuse_address=True,
        )
        return int(self._server.sockets[0].getsockname()[1])

    def close_listener(self) -> None:
        """Stop accepting connections (calls in flight go on)."""
        if self._server is not None:
            self._server.close()

    async def stop(self) -> None:
        """Close every connection (their calls are cancelled) and the listener."""
        self.close_listener()
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close()
        if self._server is not None:
            await self._server.wait_closed()
