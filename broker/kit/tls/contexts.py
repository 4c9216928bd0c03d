"""TLS of the asyncio listeners (the wire port, remoting, Kafka, replication): the broker's

grpcio takes replaced certificate files through its fetch callback (broker/kit/tls/reload.py), on
its own threads; the ssl module has no such hook. Here each handshake's SNI callback (run for
every client hello, with or without a server name) moves the connection to the context of the
material last found in force, and at most every ``CHECK_S`` starts a check in a thread:
``current()`` (the reloader's look at the files: three ``stat`` calls, and on a change the read
and check of the new pair, ~0.3 ms) and, when the material changed, the build of its context
(certificate chain and key through temporary files, 1.7-3.4 ms here). Neither runs on the event
loop, which serves every other connection meanwhile: a replaced certificate serves the
connections that start once the check that noticed it has finished (~ms after the first
handshake past ``CHECK_S``). A context is built from the PEM bytes the reloader checked (the
key matches the certificate), never from the files as they are at that moment; one that cannot
be built keeps the previous. The replication listener (``haTlsEnable``) serves its TLS the
same way.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
import time
from collections.abc import Callable

from wharf import wire
from wharf.broker.kit.tls.material import ServerTls

log = logging.getLogger("wharf.broker.kit.tls")

CHECK_S = 1.0  # handshakes between two checks of the files are served without one


def build_context(tls: ServerTls) -> ssl.SSLContext:
    """A server context of ``tls``: TLS 1.2+, its chain, mutual TLS when it has a trust store."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    wire.load_cert_chain_pem(context, tls.cert_pem, tls.key_pem)
    if tls.trust_pem is not None:  # tlsClientAuth = require
        context.load_verify_locations(cadata=tls.trust_pem.decode("ascii"))
        context.verify_mode = ssl.CERT_REQUIRED
    return context


class _Served:
    """The context in force and the checks that replace it (one at a time, in a thread)."""

    def __init__(self, current: Callable[[], ServerTls]) -> None:
        self._current = current
        tls = current()
        self._key = (tls.cert_pem, tls.trust_pem)
        self.context = self._built(tls)  # at start, before the port serves
        self._checked_at = time.monotonic()
        self._checking = threading.Lock()

    def _built(self, tls: ServerTls) -> ssl.SSLContext:
        context = build_context(tls)
        context.sni_callback = self.on_hello
        return context

    def on_hello(
        self, connection: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext
    ) -> None:
        """Loop, inside a handshake: the context in force; a check in a thread when due."""
        connection.context = self.context
        if time.monotonic() - self._checked_at < CHECK_S or not self._checking.acquire(False):
            return
        self._checked_at = time.monotonic()
        try:
            asyncio.get_running_loop().run_in_executor(None, self._check_blocking)
        except Exception:  # never into the handshake (no loop, executor shut down)
            self._checking.release()
            log.exception("cannot start the certificate check (wire or replication port)")

    def _check_blocking(self) -> None:
        """Thread: the files' material; its context built when it changed."""
        try:
            tls = self._current()
            key = (tls.cert_pem, tls.trust_pem)
            if key != self._key:
                self.context = self._built(tls)  # one reference: handshakes see old or new
                self._key = key
        except Exception:
            log.exception(
                "cannot serve the reloaded certificate (wire or replication port); keeping the last"
            )
        finally:
            self._checking.release()


def server_ssl_context(current: Callable[[], ServerTls]) -> ssl.SSLContext:
    """A context serving ``current()``'s material, following its reloads (built here, at start:
    call it before the port serves)."""
    return _Served(current).context
