"""The /metrics HTTP endpoint: prometheus_client's threaded WSGI server on its own thread.

A scrape never runs on the event loop: each request is served on a server thread, and the
only loop work is the short snapshot call ``BrokerMetrics`` schedules there. Binding port 0
picks an ephemeral port; ``start_blocking`` returns the port really bound.
"""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server


class MetricsHttpServer:
    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry
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
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=self._registry)
        except OSError as exc:
            raise OSError(
                exc.errno, f"cannot serve metrics on {host}:{port}: {exc.strerror}"
            ) from exc
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
