"""The RocketMQ 4.x remoting listener (``--remoting-listen HOST:PORT``): asyncio, one
``asyncio.Protocol`` per connection, no thread per connection.

- Bytes go through the sans-IO ``FrameDecoder``; each request becomes a task that runs its
  handler (a table: request code -> coroutine), so several requests are in flight on one
  connection and each is answered as soon as it completes, matched by its ``opaque``
  (pipelined: replies in completion order, not request order). The replies completed in one
  turn of the event loop go out in one write (``_queue``: a store batch completes many sends).
- Replies are JSON whatever the request's serialize type (RocketMQ 4.x's default
  ``serializeTypeConfigInThisServer``): the 4.x C++ client and ali-ons parse nothing else.
- A request flagged oneway gets no reply (the 4.x clients rarely flag them: see
  ``RemotingCommand.is_oneway``); an unknown request code gets ``REQUEST_CODE_NOT_SUPPORTED``
  with the code in the remark; a handler that raises gets the error table's answer
  (``handlers.error_response``), never a dropped connection.
- A frame whose framing is lost (a bad length: ``FrameError.recoverable`` False) closes the
  connection with one log line; a frame that is well delimited but does not decode (a bad
  header) is skipped with one log line and the connection goes on. Nothing a peer sends can
  raise out of the protocol callbacks.
- Back-pressure: past ``max_in_flight`` requests, or ``max_buffered_bytes`` of their frames
  (maxBufferedBytesPerConnection), the connection stops reading until half of them are
  answered; past the transport's write buffer limits, handlers' replies wait in the
  kernel/transport buffer and reading pauses too. With aclEnable a connection none of whose
  requests has passed the ACL yet has ``calls_before_auth`` requests in flight at most
  (maxCallsBeforeAuth); its frames are bounded by the frame limit only, as RocketMQ 4 signs
  the whole frame, body included.
- Time and connections: the listener's guard (broker/kit/bounds.py) closes a connection
  with no request in flight silent for serverChannelMaxIdleTimeSeconds (RocketMQ's 120 s; its
  clients heartbeat every 30 s), or slower than frameReadTimeoutMs to send a frame
  (``busy``, ``receiving``).
- Responses from a peer (flag bit 0) answer the broker's own requests (NOTIFY_CONSUMER_IDS_CHANGED
  is oneway, so nothing waits for one today): they are ignored.
- aclEnable: ``acl`` (``acl.py``) checks each request that has a handler before it runs (RocketMQ
  4's signed extFields, the ACL's accounts and permissions); a refusal is the answer (16
  NO_PERMISSION) and the connection goes on.
- TLS: ``ssl_context`` makes every connection TLS (a plaintext peer fails the handshake and is
  closed; a handshake not done in ``HANDSHAKE_TIMEOUT_S`` too).

The listening sockets are bound early (``reserve``: the port is part of the store host written
into every record, before the store starts) and listen only once the broker serves (``start``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

from wharf.broker.kit.bounds import ListenerGuard
from wharf.broker.kit.remoting.acl import RemotingAcl
from wharf.broker.kit.remoting.codes import (
    DEFAULT_MAX_FRAME_LENGTH,
    FLAG_ONEWAY,
    ResponseCode,
    SerializeType,
    request_code_name,
    response_code_name,
)
from wharf.broker.kit.remoting.frame import (
    FrameDecoder,
    FrameError,
    RemotingCommand,
    encode,
    encode_prefix,
    response_to,
)
from wharf.broker.kit.sockets import NoUsableAddress, bind_unlistened

__all__ = ["Connection", "Handler", "RemotingServer", "RemotingStartError"]

log = logging.getLogger("broker.remoting")

# A request handler: (connection, request) -> the response, or None for no response.
Handler = Callable[["Connection", RemotingCommand], Awaitable[RemotingCommand | None]]
# Maps a handler's exception to its response (handlers.error_response).
ErrorMapper = Callable[[RemotingCommand, BaseException], RemotingCommand]

MAX_IN_FLIGHT = 1024  # requests running per connection before reading pauses
CALLS_BEFORE_AUTH = 16  # the same before a request passed the ACL (maxCallsBeforeAuth)
MAX_BUFFERED_BYTES = 8 << 20  # frame bytes of the requests running (maxBufferedBytesPerConnection)
LARGE_BODY = 64 * 1024  # bodies written after their prefix, not copied into one frame
OUT_FLUSH_BYTES = 256 * 1024  # queued replies written at once past this (a pull's records: 4 MiB)
HANDSHAKE_TIMEOUT_S = 10.0  # TLS: a peer that does not finish its handshake is closed


class RemotingStartError(RuntimeError):
    """The remoting listener cannot start (address taken, not local, unsupported setting)."""


def _default_error(request: RemotingCommand, exc: BaseException) -> RemotingCommand:
    return response_to(request, ResponseCode.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}")


class Connection(asyncio.Protocol):
    """One client connection: decode, dispatch, answer by opaque."""

    def __init__(self, server: RemotingServer) -> None:
        self.server = server
        self.decoder = FrameDecoder(server.max_frame_length)
        self.transport: asyncio.Transport | None = None
        self.peer = "0.0.0.0:0"  # "ip:port" of the client (the born host of its sends)
        self.peer_host = ""  # the client's IP as connected, ipv6 included (ACL allow-lists)
        self.tasks: set[asyncio.Task[None]] = set()
        self.closed = False
        self._reading_paused = False
        self._write_paused = False
        self.authenticated = server.acl is None  # aclEnable: once a request passed it
        self.in_flight_bytes = 0  # frame bytes of the requests running (bodies and headers)
        self._opaque = itertools.count(1)
        self.client_ids: set[str] = set()  # the clients that heartbeated on this connection
        # opaque -> the answer awaited of a broker -> client request (``call``)
        self._calls: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._out: list[bytes] = []  # frames to write at the next turn (``_queue``)
        self._out_bytes = 0

    # --- asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            host = str(peer[0])
            self.peer_host = host[7:] if host.startswith("::ffff:") else host
            if host.startswith("::ffff:"):
                host = host[7:]
            if ":" in host:  # ipv6: records hold ipv4 born hosts only
                host = "0.0.0.0"
            self.peer = f"{host}:{peer[1]}"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        chunk: bytes = data
        while True:
            try:
                commands = self.decoder.feed(chunk)
            except FrameError as exc:
                for cmd in exc.commands:
                    self._dispatch(cmd)
                if not exc.recoverable:
                    log.warning("remoting: closing connection from %s: %s", self.peer, exc)
                    self.close()
                    return
                log.warning("remoting: skipped a frame from %s: %s", self.peer, exc)
                chunk = b""  # go on with the bytes after the bad frame
                continue
            except Exception:  # never raise out of the protocol: close instead
                log.exception("remoting: closing connection from %s", self.peer)
                self.close()
                return
            for cmd in commands:
                self._dispatch(cmd)
            return

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        for task in self.tasks:
            task.cancel()
        for future in self._calls.values():
            if not future.done():
                future.set_exception(ConnectionError(f"connection from {self.peer} closed"))
        if self.server.on_connection_lost is not None:
            try:
                self.server.on_connection_lost(self)
            except Exception:
                log.exception("remoting: connection-lost hook failed")

    def pause_writing(self) -> None:
        self._write_paused = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._below_half():
            self._resume_reading()

    # --- what the listener's guard asks (broker/kit/bounds.py) -------------------------------
    def busy(self) -> bool:
        return bool(self.tasks or self._calls)

    def receiving(self) -> int:
        return self.decoder.buffered

    def _calls_limit(self) -> int:
        return self.server.max_in_flight if self.authenticated else self.server.calls_before_auth

    def _below_half(self) -> bool:
        return (
            not self._write_paused
            and len(self.tasks) < max(1, self._calls_limit() // 2)
            and self.in_flight_bytes <= self.server.max_buffered_bytes // 2
        )

    # --- dispatch ------------------------------------------------------------------------------
    def _dispatch(self, cmd: RemotingCommand) -> None:
        if cmd.is_response:  # an answer to a broker -> client request: ``call``'s, or none
            future = self._calls.get(cmd.opaque)
            if future is not None and not future.done():
                future.set_result(cmd)
            return
        nbytes = len(cmd.body) + 64  # + the header's own, roughly
        self.in_flight_bytes += nbytes
        task = asyncio.get_running_loop().create_task(self._serve(cmd))
        self.tasks.add(task)
        task.add_done_callback(functools.partial(self._done, nbytes))
        if (
            len(self.tasks) >= self._calls_limit()
            or self.in_flight_bytes > self.server.max_buffered_bytes
        ):
            self._pause_reading()

    def _done(self, nbytes: int, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self.in_flight_bytes -= nbytes
        if self._reading_paused and self._below_half():
            self._resume_reading()

    async def _serve(self, request: RemotingCommand) -> None:
        server = self.server
        started = time.perf_counter()
        handler = server.handlers.get(request.code)
        response: RemotingCommand | None
        if handler is None:
            response = response_to(
                request,
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                remark=f"request code {request.code} not supported",
            )
        else:
            try:
                response = None
                if server.acl is not None:  # aclEnable: refused = the refusal to answer
                    response = await server.acl.check(self.peer_host, request)
                    if response is None and not self.authenticated:
                        self.authenticated = True  # past maxCallsBeforeAuth from now on
                        if self._reading_paused and self._below_half():
                            self._resume_reading()
                if response is None:
                    response = await handler(self, request)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                response = server.error_mapper(request, exc)
        if server.observe is not None:  # the RPC metrics, as remoting.<REQUEST CODE>
            status = "OK" if response is None else response_code_name(response.code)
            server.observe(f"remoting.{request_code_name(request.code)}", status,
                           time.perf_counter() - started)  # fmt: skip
        if response is None or request.flag & FLAG_ONEWAY:
            return
        self.send(response)

    # --- writing -------------------------------------------------------------------------------
    def send(self, cmd: RemotingCommand) -> None:
        """Queue one command (a response, or a broker -> client request) if still connected;
        the frames queued in one turn of the event loop go out in one write (``_flush``)."""
        transport = self.transport
        if self.closed or transport is None or transport.is_closing():
            return
        try:
            # Always JSON, as a RocketMQ 4.x broker answers by default: every client decodes
            # it (the C++ client and ali-ons decode nothing else), whatever the request's type.
            if len(cmd.body) >= LARGE_BODY:
                self._queue(encode_prefix(cmd, SerializeType.JSON), cmd.body)
            else:
                self._queue(encode(cmd, SerializeType.JSON))
        except (ValueError, TypeError) as exc:  # a value the header cannot carry: a bug
            log.error("remoting: cannot encode %s for %s: %s", request_code_name(cmd.code),
                      self.peer, exc)  # fmt: skip
            if not cmd.is_response:
                return
            fallback = RemotingCommand(
                code=ResponseCode.SYSTEM_ERROR,
                opaque=cmd.opaque,
                flag=cmd.flag,
                remark=f"cannot encode the response: {exc}",
                serialize_type=cmd.serialize_type,
            )
            self._queue(encode(fallback, SerializeType.JSON))

    def _queue(self, *frames: bytes) -> None:
        # One write a turn, not one a response: a store batch completes its sends' tasks in the
        # same turn, and a write is a syscall (18% of the broker's CPU under 64 Java senders'
        # 1 KiB sends on one connection, one write each). The flush runs at the next turn,
        # without waiting for I/O in between; OUT_FLUSH_BYTES bounds what waits for it.
        out = self._out
        if not out:
            asyncio.get_running_loop().call_soon(self._flush)
        out.extend(frames)
        self._out_bytes += sum(len(frame) for frame in frames)
        if self._out_bytes >= OUT_FLUSH_BYTES:
            self._flush()

    def _flush(self) -> None:
        out = self._out
        if not out:
            return
        self._out, self._out_bytes = [], 0
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if len(out) == 1:
            transport.write(out[0])
        else:
            transport.writelines(out)

    def request(
        self, code: int, ext_fields: dict[str, str], body: bytes = b"", *, oneway: bool = True
    ) -> None:
        """Send a broker -> client request (oneway: nothing waits for its answer)."""
        self.send(
            RemotingCommand(
                code=code,
                opaque=next(self._opaque),
                flag=FLAG_ONEWAY if oneway else 0,
                ext_fields=ext_fields,
                body=body,
            )
        )

    async def call(self, code: int, ext_fields: dict[str, str], body: bytes) -> RemotingCommand:
        """A broker -> client request the client answers (GET_CONSUMER_RUNNING_INFO, relayed
        for mqadmin and the Dashboard): its response, matched by opaque (the caller bounds the
        wait); ConnectionError when the connection closes first."""
        if self.closed:
            raise ConnectionError(f"connection from {self.peer} closed")
        opaque = next(self._opaque)
        future: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._calls[opaque] = future
        try:
            self.send(RemotingCommand(code=code, opaque=opaque, ext_fields=ext_fields, body=body))
            return await future
        finally:
            self._calls.pop(opaque, None)

    def close(self) -> None:
        self._flush()  # what was answered before the close still goes out
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None and not self.closed:
            self._reading_paused = True
            with contextlib.suppress(RuntimeError):
                self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._reading_paused and self.transport is not None and not self.closed:
            self._reading_paused = False
            with contextlib.suppress(RuntimeError):
                self.transport.resume_reading()


class RemotingServer:
    """The listener: ``reserve(address)`` binds (not listening), ``start(handlers)`` listens,
    ``close_listener`` stops accepting, ``stop`` closes every connection."""

    def __init__(
        self,
        max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        self.max_frame_length = max_frame_length
        self.max_in_flight = max_in_flight
        self.calls_before_auth = CALLS_BEFORE_AUTH  # set by the part from the settings
        self.max_buffered_bytes = MAX_BUFFERED_BYTES
        self.handlers: dict[int, Handler] = {}
        self.error_mapper: ErrorMapper = _default_error
        self.on_connection_lost: Callable[[Connection], None] | None = None
        self.acl: RemotingAcl | None = None  # aclEnable: checked before every handler
        self.ssl: ssl.SSLContext | None = None  # TLS: every connection
        # (method, status, seconds) of every request answered: the broker's RPC metrics.
        self.observe: Callable[[str, str, float], None] | None = None
        self.connections: set[Connection] = set()
        self.host = ""
        self.port = 0
        self._sockets: list[socket.socket] = []
        self._servers: list[asyncio.base_events.Server] = []

    @property
    def address(self) -> str:
        """host:port bound ('' before ``reserve``)."""
        return f"{self.host}:{self.port}" if self.port else ""

    def reserve(self, host: str, port: int) -> int:
        """Bind ``host:port`` (port 0: the OS picks one) without listening; returns the port.
        RemotingStartError if the address is taken or not local."""
        try:
            sockets = bind_unlistened(host, port)
        except socket.gaierror as exc:
            raise RemotingStartError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
        except NoUsableAddress:
            raise RemotingStartError(f"cannot listen on {host}:{port}: no usable address") from None
        except OSError as exc:
            raise RemotingStartError(
                f"cannot listen on {host}:{port}: {exc.strerror}; pick another with "
                "--remoting-listen HOST:PORT"
            ) from None
        self._sockets = sockets
        self.host, self.port = host, sockets[0].getsockname()[1]
        return self.port

    async def start(
        self,
        handlers: dict[int, Handler],
        error_mapper: ErrorMapper | None,
        *,
        acl: RemotingAcl | None = None,
        ssl_context: ssl.SSLContext | None = None,
        guard: ListenerGuard | None = None,
    ) -> None:
        """Listen on the reserved sockets with ``handlers``; ``acl`` checks every request that
        has a handler before it runs; ``ssl_context``: TLS only (a plaintext peer fails the
        handshake and is closed); ``guard`` bounds every connection (the NameServer's; the
        broker's remoting part listens through ``TcpListeners`` with its own)."""
        self.handlers = dict(handlers)
        if error_mapper is not None:
            self.error_mapper = error_mapper
        self.acl = acl
        self.ssl = ssl_context
        loop = asyncio.get_running_loop()
        factory: Callable[[], asyncio.BaseProtocol] = lambda: Connection(self)  # noqa: E731
        if guard is not None:
            factory = guard.wrap(factory)
        try:
            for sock in self._sockets:
                server = await loop.create_server(
                    factory,
                    sock=sock,
                    backlog=1024,
                    ssl=ssl_context,
                    ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if ssl_context else None,
                )
                self._servers.append(server)
        except OSError as exc:
            raise RemotingStartError(f"cannot listen on {self.address}: {exc}") from None
        self._sockets = []  # owned by the servers now

    def close_sockets(self) -> None:
        for sock in self._sockets:
            sock.close()
        self._sockets = []

    def close_listener(self) -> None:
        """Stop accepting new connections (the open ones keep being served)."""
        for server in self._servers:
            server.close()
        self.close_sockets()

    def running(self) -> list[asyncio.Task[Any]]:
        """The requests running on every connection (``drain`` at stop)."""
        return [task for c in self.connections for task in c.tasks]

    async def stop(self) -> None:
        """Close the listener and every connection; cancel the requests still running."""
        self.close_listener()
        for conn in list(self.connections):
            conn.close()
        tasks: list[asyncio.Task[Any]] = [t for c in list(self.connections) for t in c.tasks]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for server in self._servers:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await server.wait_closed()
        self._servers = []
