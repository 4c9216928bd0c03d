"""The wire port's TLS: the broker's certificate (broker/tls.py) in an ``ssl.SSLContext``.

grpcio takes replaced certificate files through its fetch callback (broker/tls_reload.py); the
ssl module has no such hook, so each handshake's SNI callback (run for every client hello,
with or without a server name) asks ``current()`` (the reloader's check of the files: a stat
of each) and moves the connection to a context built from the material in force: a replaced
certificate serves new wire connections at once, whether or not a gRPC handshake came first.
A context is built from the PEM bytes the reloader checked (the key matches the certificate),
never from the files as they are at that moment; one that cannot be built keeps the previous.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable

from wharf import wire
from wharf.broker.tls_material import ServerTls

log = logging.getLogger("wharf.broker.wire")


def _context(tls: ServerTls) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    wire.load_cert_chain_pem(context, tls.cert_pem, tls.key_pem)
    if tls.trust_pem is not None:  # tlsClientAuth = require
        context.load_verify_locations(cadata=tls.trust_pem.decode("ascii"))
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def server_ssl_context(current: Callable[[], ServerTls]) -> ssl.SSLContext:
    """A context serving ``current()``'s material, following its reloads."""
    built: dict[tuple[bytes, bytes | None], ssl.SSLContext] = {}

    def context_for(tls: ServerTls) -> ssl.SSLContext:
        key = (tls.cert_pem, tls.trust_pem)
        context = built.get(key)
        if context is None:
            context = _context(tls)
            context.sni_callback = on_hello
            built.clear()  # only the material in force is kept
            built[key] = context
        return context

    def on_hello(connection: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> None:
        try:
            connection.context = context_for(current())
        except Exception:  # never into the handshake: the connection keeps the context it has
            log.exception("wire port: cannot serve the reloaded certificate; keeping the last")

    return context_for(current())
