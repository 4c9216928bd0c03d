"""The Kafka listener's connections: one ``asyncio.Protocol`` each, no thread per connection.

- Bytes are cut into size-prefixed frames (``codec.FrameReader``; a frame over
  ``max_frame`` closes the connection with one log line, as Kafka's
  ``socket.request.max.bytes``).
- Each request becomes a task running its handler at once, so a long-polling Fetch does not
  stop the next request from starting; responses are written IN REQUEST ORDER (Kafka clients
  match responses to requests by order as well as by correlation id), a finished response
  waiting for the ones before it. Tasks start in arrival order: a handler's work before its
  first await happens in request order (Produce takes its turn to append there: the
  connection's ``appended``, the previous Produce's appends done).
- A header that does not parse, or a body that does not match its schema, closes the
  connection with one log line (what Kafka does); a version not served is answered with
  UNSUPPORTED_VERSION where the API's lowest version can say so (``codec.unsupported_version``),
  else the connection closes. Produce with acks=0 gets no response.
- SASL: while ``sasl_required`` and the connection is not authenticated, any request but
  ApiVersions, SaslHandshake and SaslAuthenticate closes the connection.
- Back-pressure: past ``MAX_IN_FLIGHT`` requests not yet answered (``calls_before_auth``,
  maxCallsBeforeAuth, while SASL is required and not done), past ``max_buffered_bytes`` of
  their frames (maxBufferedBytesPerConnection), or while the transport's write buffer is over
  its high-water mark, the connection is not read.
- Before SASL authentication a connection may buffer ``bytes_before_auth`` bytes
  (maxBytesBeforeAuth, 512 KiB: Kafka's sasl.server.max.receive.size); past it, it is closed.
- Time and connections: the listener's guard (broker/kit/bounds.py) closes a connection
  with no request in flight silent for kafkaConnectionsMaxIdleMs (Kafka's
  connections.max.idle.ms, 10 min; clients close theirs at 9), or slower than
  frameReadTimeoutMs to send a frame (``busy``, ``receiving``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
import struct
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from wharf.broker.frontends.kafka.apis import APIS, Api
from wharf.broker.frontends.kafka.codec import (
    FrameError,
    FrameReader,
    RequestHeader,
    decode_request,
    encode_response,
    parse_header,
    unsupported_version,
)
from wharf.broker.frontends.kafka.wire import DecodeError

if TYPE_CHECKING:
    from wharf.broker.kit.acl.rules import Account

__all__ = ["Handler", "KafkaConnection", "KafkaServer"]

log = logging.getLogger("broker.kafka")

MAX_IN_FLIGHT = 64  # requests read and not yet answered before the connection stops reading
CALLS_BEFORE_AUTH = 16  # the same before SASL (maxCallsBeforeAuth; SASL itself needs 3)
BYTES_BEFORE_AUTH = 512 * 1024  # Kafka's sasl.server.max.receive.size
MAX_BUFFERED_BYTES = 8 << 20  # frame bytes of requests not yet answered
OPEN_APIS = frozenset({18, 17, 36})  # ApiVersions, SaslHandshake, SaslAuthenticate

# (connection, version, request body) -> the response body, or None for no response
Handler = Callable[
    ["KafkaConnection", int, dict[str, Any]], Coroutine[Any, Any, dict[str, Any] | None]
]
Observe = Callable[[str, str, float], None]
# SaslHandshake v0: (connection, raw SASL token) -> the raw answer, or None to close
RawSasl = Callable[["KafkaConnection", bytes], Coroutine[Any, Any, bytes | None]]


class _Slot:
    """One request's place in the response order."""

    __slots__ = ("api", "header", "nbytes", "raw", "reply", "started", "task")

    def __init__(
        self, api: Api | None, header: RequestHeader, raw: bool = False, nbytes: int = 0
    ) -> None:
        self.api = api
        self.header = header
        self.nbytes = nbytes  # its frame's (counted against max_buffered_bytes until answered)
        self.raw = raw  # a raw SASL token's answer (SaslHandshake v0), not a Kafka response
        self.task: asyncio.Task[Any] | None = None
        self.reply: bytes | None = None
        self.started = time.perf_counter()

    def done(self) -> bool:
        return self.task is None or self.task.done()


class KafkaServer:
    """What every connection shares: the handler table, limits, the live connections."""

    def __init__(
        self,
        handlers: dict[int, Handler],
        *,
        max_frame: int,
        sasl_required: bool = False,
        observe: Observe | None = None,
        raw_sasl: RawSasl | None = None,
    ) -> None:
        self.handlers = handlers
        self.raw_sasl = raw_sasl
        self.max_frame = max_frame
        self.sasl_required = sasl_required
        self.observe = observe or (lambda method, status, seconds: None)
        self.connections: set[KafkaConnection] = set()
        self.failures = 0  # handlers that raised (a bug: each is logged with its traceback)
        # Per connection (the module's back-pressure): set by the part from the settings.
        self.calls_before_auth = CALLS_BEFORE_AUTH
        self.bytes_before_auth = BYTES_BEFORE_AUTH
        self.max_buffered_bytes = MAX_BUFFERED_BYTES
        self.on_connection_lost: Callable[[KafkaConnection], None] | None = None

    def protocol(self) -> KafkaConnection:
        return KafkaConnection(self)

    def running(self) -> list[asyncio.Task[Any]]:
        """The requests running on every connection (``drain`` at stop)."""
        return [slot.task for c in self.connections for slot in c.pending if slot.task is not None]

    async def close_all(self) -> None:
        tasks = self.running()
        for conn in list(self.connections):
            conn.close()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task


class KafkaConnection(asyncio.Protocol):
    def __init__(self, server: KafkaServer) -> None:
        self.server = server
        self.frames = FrameReader(server.max_frame)
        self.transport: asyncio.Transport | None = None
        self.peer = "0.0.0.0:0"  # ipv4:port (the born host of its records)
        self.peer_host = ""  # the client's IP (ACL allow-lists, DescribeGroups)
        self.client_id = ""
        self.pending: collections.deque[_Slot] = collections.deque()
        self.closed = False
        # the last Produce's appends done: the next one's turn (request order, produce.py)
        self.appended: asyncio.Future[None] | None = None
        self.account: Account | None = None  # SASL: the authenticated account
        self.sasl_mechanism = ""  # after SaslHandshake
        self.sasl_state: Any = None  # a SCRAM exchange in progress
        self.sasl_raw = False  # after SaslHandshake v0: frames are raw SASL tokens
        self.authenticated = False
        self.secure = False  # on a TLS listener
        self._paused = False
        self._write_paused = False
        self.pending_bytes = 0  # frame bytes of the requests in ``pending``

    # --- asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            host = str(peer[0])
            if host.startswith("::ffff:"):
                host = host[7:]
            self.peer_host = host
            self.peer = f"{host if ':' not in host else '0.0.0.0'}:{peer[1]}"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.secure = transport.get_extra_info("ssl_object") is not None
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        for slot in self.pending:
            if slot.task is not None:
                slot.task.cancel()
        hook = self.server.on_connection_lost
        if hook is not None:
            try:
                hook(self)
            except Exception:
                log.exception("kafka: connection-lost hook failed")

    def pause_writing(self) -> None:
        self._write_paused = True
        self._pause()

    def resume_writing(self) -> None:
        self._write_paused = False
        if len(self.pending) < self._calls_limit():
            self._resume()

    # --- what the listener's guard asks (broker/kit/bounds.py) -------------------------------
    def busy(self) -> bool:
        return bool(self.pending)

    def receiving(self) -> int:
        return self.frames.buffered

    def _calls_limit(self) -> int:
        if self.server.sasl_required and not self.authenticated:
            return self.server.calls_before_auth
        return MAX_IN_FLIGHT

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            frames = self.frames.feed(data)
        except FrameError as exc:
            self._drop(f"{exc}")
            return
        for frame in frames:
            if self.closed:
                return
            try:
                self._dispatch(frame)
            except Exception:  # never raise out of the protocol
                log.exception("kafka: closing connection from %s", self.peer)
                self.close()
                return
        if (
            self.server.sasl_required
            and not self.authenticated
            and not self.closed
            and self.frames.buffered > self.server.bytes_before_auth
        ):
            self._drop(
                f"{self.frames.buffered} bytes of a frame before SASL authentication "
                f"(maxBytesBeforeAuth is {self.server.bytes_before_auth})"
            )

    # --- requests -----------------------------------------------------------------------------
    def _dispatch(self, frame: bytes) -> None:
        raw_sasl = self.server.raw_sasl
        if self.sasl_raw and raw_sasl is not None:
            slot = _Slot(None, RequestHeader(-1, -1, -1, None), raw=True)
            slot.task = asyncio.get_running_loop().create_task(raw_sasl(self, frame))
            slot.task.add_done_callback(self._on_done)
            self._queue(slot, len(frame))
            return
        try:
            header, reader = parse_header(frame)
        except DecodeError as exc:
            self._drop(f"request header does not parse: {exc}")
            return
        if header.client_id:
            self.client_id = header.client_id
        api = APIS.get(header.api_key)
        handler = self.server.handlers.get(header.api_key)
        slot = _Slot(api, header)
        if (
            self.server.sasl_required
            and not self.authenticated
            and len(frame) > (self.server.bytes_before_auth)
        ):
            self._drop(
                f"a frame of {len(frame)} bytes before SASL authentication "
                f"(maxBytesBeforeAuth is {self.server.bytes_before_auth})"
            )
            return
        if (
            api is None
            or handler is None
            or not api.min_version <= header.api_version <= api.max_version
        ):
            reply = unsupported_version(header)
            if reply is None:
                self._drop(
                    f"api key {header.api_key} v{header.api_version} is not served "
                    "(see ApiVersions)"
                )
                return
            slot.reply = reply
            self._queue(slot, 0)
            self._flush()
            return
        if self.server.sasl_required and not self.authenticated and api.key not in OPEN_APIS:
            self._drop(f"{api.name} before SASL authentication")
            return
        try:
            body = decode_request(api, header, reader)
        except DecodeError as exc:
            self._drop(f"{api.name} v{header.api_version} does not parse: {exc}")
            return
        slot.task = asyncio.get_running_loop().create_task(handler(self, header.api_version, body))
        slot.task.add_done_callback(self._on_done)
        self._queue(slot, len(frame))

    def _queue(self, slot: _Slot, nbytes: int) -> None:
        slot.nbytes = nbytes
        self.pending_bytes += nbytes
        self.pending.append(slot)
        if (
            len(self.pending) >= self._calls_limit()
            or self.pending_bytes > self.server.max_buffered_bytes
        ):
            self._pause()

    def _on_done(self, task: asyncio.Task[Any]) -> None:
        self._flush()

    def _flush(self) -> None:
        pending = self.pending
        while pending and pending[0].done():
            slot = pending.popleft()
            self.pending_bytes -= slot.nbytes
            if not self._answer(slot):
                return
        if (
            len(pending) < max(1, self._calls_limit() // 2)
            and self.pending_bytes <= self.server.max_buffered_bytes // 2
            and not self._write_paused
        ):
            self._resume()

    def _answer(self, slot: _Slot) -> bool:
        """Write one finished slot's response; False when the connection is closed by it."""
        header, api = slot.header, slot.api
        reply = slot.reply
        status = "OK"
        if slot.raw and slot.task is not None:
            if slot.task.cancelled() or slot.task.exception() is not None:
                self._drop("SASL token handling failed")
                return False
            token = slot.task.result()
            if token is None:
                self._drop("SASL authentication failed")
                return False
            reply = struct.pack(">i", len(token)) + token
        elif slot.task is not None:
            assert api is not None
            if slot.task.cancelled():
                return not self.closed
            exc = slot.task.exception()
            if exc is not None:
                self.server.failures += 1
                log.error("kafka: %s failed for %s", api.name, self.peer, exc_info=exc)
                self.server.observe(f"kafka.{api.name}", "ERROR", 0.0)
                self.close()
                return False
            body = slot.task.result()
            if body is None:
                return True  # acks=0: no response
            code = body.get("error_code", 0)
            if code:
                status = str(code)
            reply = encode_response(api, header.api_version, header.correlation_id, body)
        if api is not None:
            self.server.observe(f"kafka.{api.name}", status, time.perf_counter() - slot.started)
        transport = self.transport
        if reply is None or self.closed or transport is None or transport.is_closing():
            return not self.closed
        transport.write(reply)
        return True

    # --- state --------------------------------------------------------------------------------
    def _drop(self, why: str) -> None:
        log.warning("kafka: closing connection from %s: %s", self.peer, why)
        self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _pause(self) -> None:
        if not self._paused and self.transport is not None and not self.closed:
            self._paused = True
            with contextlib.suppress(RuntimeError):
                self.transport.pause_reading()

    def _resume(self) -> None:
        if self._paused and self.transport is not None and not self.closed:
            self._paused = False
            with contextlib.suppress(RuntimeError):
                self.transport.resume_reading()
