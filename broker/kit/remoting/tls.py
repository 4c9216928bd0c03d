"""TLS on the NameServer's remoting port: its certificate (``tlsEnable``) in an
``ssl.SSLContext`` that follows the files' replacements, as its gRPC port does.

The context is built as the broker's asyncio ports build theirs
(``wharf.broker.kit.tls.contexts.build_context``); those check the files in a thread, while the
NameServer takes few handshakes (a client connects once), so here each client hello's SNI
callback (run with or without a server name) checks the files at most every ``CHECK_S`` on
the event loop:
``current()`` is three ``stat`` calls, and on a change the read and check of the new pair
(~0.3 ms) and the build of its context (~2-3 ms), once. A pair that cannot serve keeps the
previous (the reloader logs why); open connections keep theirs.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable

from wharf.broker.kit.tls.contexts import build_context
from wharf.broker.kit.tls.material import ServerTls

__all__ = ["CHECK_S", "server_context"]

log = logging.getLogger("broker.remoting")

CHECK_S = 1.0


class _Rotating:
    def __init__(self, current: Callable[[], ServerTls]) -> None:
        self._current = current
        tls = current()
        self._key = (tls.cert_pem, tls.key_pem, tls.trust_pem)
        self.context = self._built(tls)
        self._checked_at = time.monotonic()

    def _built(self, tls: ServerTls) -> ssl.SSLContext:
        context = build_context(tls)
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
