"""TLS on the NameServer's remoting port: its certificate (``tlsEnable``) in an
``ssl.SSLContext`` that follows the files' replacements, as its gRPC port does.

The broker's asyncio ports use ``wharf.broker.tls.contexts`` (the checks
in a thread); the NameServer may not import the broker's wire package, and takes few
handshakes (a client connects once), so here each client hello's SNI callback (run with or
without a server name) checks the files at most every ``CHECK_S`` on the event loop:
``current()`` is three ``stat`` calls, and on a change the read and check of the new pair
(~0.3 ms) and the build of its context (~2-3 ms), once. A pair that cannot serve keeps the
previous (the reloader logs why); open connections keep theirs.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable

from wharf import wire
from wharf.broker.tls.material import ServerTls

__all__ = ["CHECK_S", "server_context"]

log = logging.getLogger("broker.remoting")

CHECK_S = 1.0


def _context(tls: ServerTls) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    wire.load_cert_chain_pem(context, tls.cert_pem, tls.key_pem)
    if tls.trust_pem is not None:  # tlsClientAuth = require
        context.load_verify_locations(cadata=tls.trust_pem.decode("ascii"))
        context.verify_mode = ssl.CERT_REQUIRED
    return context


class _Rotating:
    def __init__(self, current: Callable[[], ServerTls]) -> None:
        self._current = current
        tls = current()
        self._key = (tls.cert_pem, tls.key_pem, tls.trust_pem)
        self.context = self._built(tls)
        self._checked_at = time.monotonic()

    def _built(self, tls: ServerTls) -> ssl.SSLContext:
        context = _context(tls)
        context.sni_callback = self.on_hello
        return context

    def on_hello(
        self, connection: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext
    ) -> None:
        now = time.monotonic()
        if now - self._checked_at >= CHECK_S:
            self._checked_at = now
            try:  # never into the handshake: the pair in force stays
                tls = self._current()
                key = (tls.cert_pem, tls.key_pem, tls.trust_pem)
                if key != self._key:
                    self.context = self._built(tls)
                    self._key = key
            except Exception:
                log.exception("cannot serve the reloaded certificate (remoting); keeping the last")
        connection.context = self.context


def server_context(current: Callable[[], ServerTls]) -> ssl.SSLContext:
    """A server context serving ``current()``'s material and following its reloads (built at
    once: call it before the port serves)."""
    return _Rotating(current).context
