"""The /metrics HTTP endpoint: the exposition's WSGI app on a threaded server thread.

A scrape never runs on the event loop: each request is served on a server thread, and the
only loop work is the short snapshot call ``BrokerMetrics`` schedules there. Binding port 0
picks an ephemeral port; ``start_blocking`` returns the port really bound.

With a bearer token (``metricsBearerTokenFile``, read once at start) every request must carry
``Authorization: Bearer <token>`` (the scheme in any case, RFC 7235): otherwise 401 with
``WWW-Authenticate: Bearer`` and no metric in the body. The comparison is constant-time (``hmac.compare_digest``); the token is
never logged. Without a token the endpoint is open, as before.
"""

from __future__ import annotations

import hmac
import socket
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client.exposition import ThreadingWSGIServer
from wharf.broker.metrics.exposition import WsgiApp, metrics_app

MAX_TOKEN_BYTES = 4096


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


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log on stderr (a scrape every 15 s would fill the broker's log)."""


class MetricsHttpServer:
    def __init__(self, render: Callable[[], bytes], bearer_token: str | None = None) -> None:
        """``render``: the whole exposition, called on this server's thread per scrape."""
        self._render = render
        self._bearer_token = bearer_token
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("metrics server is not running")
        return int(self._server.server_port)

    def start_blocking(self, host: str, port: int) -> int:
        """Bind and start serving; returns the bound port. Raises OSError if the address is
        in use or not local, with the address in the message."""
        if not 0 <= port <= 65535:
            raise ValueError(f"metrics port must be 0..65535, got {port}")
        app: WsgiApp = metrics_app(self._render)
        if self._bearer_token:
            app = bearer_guard(app, self._bearer_token)
        family = _family(host)

        class _Server(ThreadingWSGIServer):
            address_family = family  # a class attribute: one subclass per server

        try:
            server = make_server(host, port, app, _Server, handler_class=_QuietHandler)
        except OSError as exc:
            raise OSError(
                exc.errno, f"cannot serve metrics on {host}:{port}: {exc.strerror}"
            ) from exc
        thread = threading.Thread(target=server.serve_forever, daemon=True, name="metrics-http")
        thread.start()
        self._server, self._thread = server, thread
        return self.port

    def stop_blocking(self) -> None:
        """Stop accepting scrapes and close the socket (waits up to the 0.5 s poll interval)."""
        server, thread = self._server, self._thread
        self._server, self._thread = None, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)


def _family(host: str) -> socket.AddressFamily:
    try:
        return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][0]
    except OSError:
        return socket.AF_INET
