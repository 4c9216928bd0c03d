"""The /metrics HTTP endpoint: connections on the event loop, the exposition's WSGI app on a
pool of ``RENDER_THREADS`` threads.

Connections are read by the event loop (no thread per connection: a thread each, before the
token was checked, made 2,000 half-sent requests 2,016 threads) and bounded by the listener
guard (broker/kit/bounds.py): ``METRICS_LIMITS``, a request head of ``MAX_HEAD_BYTES``.
A request whose head is whole is rendered on the pool (the render hands its snapshot to the
loop, ``BrokerMetrics``); one request per connection, answered with ``Connection: close``, as
the wsgiref server did (Prometheus reconnects each scrape). Binding port 0 picks an ephemeral
port; ``start`` returns the port really bound.

With a bearer token (``metricsBearerTokenFile``, read once at start) every request must carry
``Authorization: Bearer <token>`` (the scheme in any case, RFC 7235): otherwise 401 with
``WWW-Authenticate: Bearer`` and no metric in the body. The comparison is constant-time (``hmac.compare_digest``); the token is
never logged. Without a token the endpoint is open, as before.

With tlsEnable (and ``metricsTlsEnable``, on by default) the endpoint is HTTPS only, on the
broker's certificate and following its reloads (the context every asyncio port uses), so the
token is never sent in clear.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hmac
import logging
import socket
import ssl
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from wharf.broker.kit.bounds import ListenerGuard, ListenerLimits
from wharf.broker.metrics.exposition import WsgiApp, metrics_app

log = logging.getLogger("broker.metrics")

MAX_TOKEN_BYTES = 4096
# Scrapes are rendered one at a time anyway (a render holds the interpreter lock most of its
# time); a second thread lets a 401 or an OPTIONS be answered during a long render.
RENDER_THREADS = 2
MAX_HEAD_BYTES = 16 * 1024  # a request line and headers; a scrape's are ~300 bytes
# A Prometheus server or two and a curl: 64 connections; the head within 10 s (Prometheus's
# default scrape_timeout), and nothing longer waits idle (one request per connection).
HEAD_TIMEOUT_S = 10.0
METRICS_LIMITS = ListenerLimits(
    name="metricsListen",
    idle_s=HEAD_TIMEOUT_S,
    read_s=HEAD_TIMEOUT_S,
    max_connections=64,
    max_per_address=0,
)
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large", 500: "Internal Server Error"}  # fmt: skip


def read_token_file_blocking(path: str | Path) -> str:
    """The token in ``path`` (surrounding whitespace stripped). ValueError naming the setting
    for an unreadable, empty or oversized file or one with inner whitespace."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"metricsBearerTokenFile: cannot read {path}: {exc.strerror}") from None
    token = raw.decode("utf-8", errors="replace").strip()
    if not token or len(raw) > MAX_TOKEN_BYTES or any(c.isspace() for c in token):
        raise ValueError(
            f"metricsBearerTokenFile: {path} must hold one token of 1..{MAX_TOKEN_BYTES} "
            "bytes without spaces"
        )
    return token


def bearer_guard(app: WsgiApp, token: str) -> WsgiApp:
    expected = token.encode()

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        scheme, _, given = environ.get("HTTP_AUTHORIZATION", "").strip().partition(" ")
        # RFC 7235 section 2.1: the scheme is case-insensitive ("bearer" is "Bearer").
        if scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode("utf-8", errors="replace"), expected
        ):
            return app(environ, start_response)
        body = b"401 Unauthorized: send Authorization: Bearer <metrics token>\n"
        start_response(
            "401 Unauthorized",
            [
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", str(len(body))),
                ("WWW-Authenticate", 'Bearer realm="wharf-metrics"'),
            ],
        )
        return [body]

    return guarded


class _HttpConnection(asyncio.Protocol):
    """One request: its head read here, the app run on the pool, the answer, then close."""

    def __init__(self, server: MetricsHttpServer) -> None:
        self._server = server
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self._serving = False  # the head is whole: rendering or answering

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def busy(self) -> bool:
        return self._serving

    def receiving(self) -> int:
        return 0 if self._serving else len(self._buffer)

    def data_received(self, data: bytes) -> None:
        if self._serving:
            return  # a body or a pipelined request: one request per connection
        self._buffer += data
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > MAX_HEAD_BYTES:
                self._answer_now(431, b"request head too large\n")
            return
        head = bytes(self._buffer[:end])
        self._buffer = bytearray()
        self._serving = True
        environ = _environ(head, self._transport)
        if environ is None:
            self._answer_now(400, b"bad request\n")
            return
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._server.pool, _run_app, self._server.app, environ)
        future.add_done_callback(self._rendered)

    def _rendered(self, future: asyncio.Future[tuple[str, list[tuple[str, str]], bytes]]) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        if exc is not None:
            log.error("metrics: rendering a scrape failed", exc_info=exc)
            self._answer_now(500, b"internal error (see the broker log)\n")
            return
        status, headers, body = future.result()
        self._write(status, headers, body)

    def _answer_now(self, code: int, body: bytes) -> None:
        self._serving = True
        self._write(f"{code} {_REASONS[code]}", [("Content-Type", "text/plain")], body)

    def _write(self, status: str, headers: list[tuple[str, str]], body: bytes) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        lines = [f"HTTP/1.1 {status}"]
        lines += [f"{name}: {value}" for name, value in headers
                  if name.lower() not in ("content-length", "connection")]  # fmt: skip
        lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
        transport.writelines(("\r\n".join(lines).encode("latin-1"), body))
        transport.close()  # after the buffered bytes are written


def _environ(head: bytes, transport: asyncio.Transport | None) -> dict[str, Any] | None:
    """The WSGI environ of a request head (None when it does not parse)."""
    try:
        text = head.decode("latin-1")
        request_line, *header_lines = text.split("\r\n")
        method, target, version = request_line.split(" ")
    except ValueError:
        return None
    if not version.startswith("HTTP/"):
        return None
    path, _, query = target.partition("?")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "PATH_INFO": unquote(path),
        "QUERY_STRING": query,
        "SERVER_PROTOCOL": version,
        "wsgi.url_scheme": "https"
        if transport and transport.get_extra_info("sslcontext")
        else "http",
    }
    for line in header_lines:
        name, sep, value = line.partition(":")
        if not sep:
            return None
        key = name.strip().upper().replace("-", "_")
        if key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            environ[key] = value.strip()
        else:
            environ[f"HTTP_{key}"] = value.strip()
    if transport is not None:
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and peer:
            environ["REMOTE_ADDR"] = str(peer[0])
    return environ


def _run_app(app: WsgiApp, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
    """On a pool thread: the app's status, headers and body."""
    started: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        started[:] = [status, headers]

    body = b"".join(app(environ, start_response))
    status, headers = started
    return status, headers, body


class MetricsHttpServer:
    def __init__(
        self,
        render: Callable[[], bytes],
        bearer_token: str | None = None,
        limits: ListenerLimits = METRICS_LIMITS,
    ) -> None:
        """``render``: the whole exposition, called on a pool thread per scrape."""
        app: WsgiApp = metrics_app(render)
        if bearer_token:
            app = bearer_guard(app, bearer_token)
        self.app = app
        self.guard = ListenerGuard(limits)
        self.pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._server: asyncio.Server | None = None
        self._port = 0

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("metrics server is not running")
        return self._port

    async def start(self, host: str, port: int, ssl_context: ssl.SSLContext | None = None) -> int:
        """Bind and start serving; returns the bound port. Raises OSError if the address is
        in use or not local, with the address in the message. ``ssl_context``: HTTPS only (a
        plaintext request fails the handshake)."""
        if not 0 <= port <= 65535:
            raise ValueError(f"metrics port must be 0..65535, got {port}")
        loop = asyncio.get_running_loop()
        sock = socket.socket(_family(host), socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.setblocking(False)
            server = await loop.create_server(
                self.guard.wrap(lambda: _HttpConnection(self)),
                sock=sock,
                backlog=128,
                ssl=ssl_context,
                # a handshake is a request head's worth of bytes: the head's own deadline
                ssl_handshake_timeout=HEAD_TIMEOUT_S if ssl_context else None,
            )
        except OSError as exc:
            sock.close()
            raise OSError(
                exc.errno, f"cannot serve metrics on {host}:{port}: {exc.strerror}"
            ) from exc
        self.pool = concurrent.futures.ThreadPoolExecutor(RENDER_THREADS, "metrics-http")
        self._server = server
        self._port = int(sock.getsockname()[1])
        return self._port

    async def stop(self) -> None:
        """Stop accepting scrapes, close the socket and the connections, end the pool."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        self.guard.close()
        for conn in list(self.guard.connections):
            conn.close()
        pool, self.pool = self.pool, None
        if pool is not None:
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)


def _family(host: str) -> socket.AddressFamily:
    try:
        return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][0]
    except OSError:
        return socket.AF_INET
