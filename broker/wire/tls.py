"""The wire port's TLS: the broker's certificate (broker/tls.py) in an ``ssl.SSLContext``.

grpcio takes replaced certificate files through its fetch callback (broker/tls_reload.py); the
ssl module has no such hook, so each handshake's SNI callback (run for every client hello,
with or without a server name) checks the material in force and moves the connection to a
context built from it: a reloaded certificate serves new wire connections at once too.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable

from wharf.broker.tls_material import ServerTls


def _context(tls: ServerTls) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(tls.cert_path, tls.key_path)
    if tls.trust_path is not None:  # tlsClientAuth = require
        context.load_verify_locations(cafile=str(tls.trust_path))
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def server_ssl_context(current: Callable[[], ServerTls]) -> ssl.SSLContext:
    """A context serving ``current()``'s material, following its reloads."""
    built: dict[tuple[bytes, bytes | None], ssl.SSLContext] = {}

    def context_for(tls: ServerTls) -> ssl.SSLContext:
        key = (tls.cert_pem, tls.trust_pem)
        context = built.get(key)
        if context is None:
            built.clear()  # only the material in force is kept
            context = built[key] = _context(tls)
            context.sni_callback = on_hello
        return context

    def on_hello(connection: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> None:
        connection.context = context_for(current())

    return context_for(current())
