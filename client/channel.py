"""gRPC channel construction shared by every client (one place for options).

TLS: ``tls_config(tls, ca_file, cert_file, key_file)`` turns a client's keyword arguments into a
``TlsConfig`` (None = plaintext): ``tls=True`` alone trusts the system roots (gRPC's, or the
file in ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``); ``ca_file`` (a PEM bundle, e.g. the broker's
development certificate) implies TLS; ``cert_file`` + ``key_file`` present a client certificate
for a broker with ``tlsClientAuth = require``. Missing or unreadable files are an
InvalidArgumentError naming the argument, raised when the client is made.

Clients hold these settings in one ``wharf.client.connection.Connection`` and open their
channels through it: ``open_channel`` (grpc.aio) and ``open_sync_channel`` (blocking, the Spark
connector) are the only places channels are made.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from wharf import keepalive, wire
from wharf.client.auth import Credentials, SignedChannel, resolve_credentials, sign_sync_channel
from wharf.client.errors import InvalidArgumentError
from wharf.client.wire_channel import WireChannel, client_ssl_context

DEFAULT_ENDPOINTS = "127.0.0.1:8081"
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # pulls of 1024 x 4 MiB bodies must not hit gRPC's 4 MiB cap

_OPTIONS: list[tuple[str, int | str]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # 4 MiB HTTP/2 frames (default 16 KiB): large send batches and pull replies travel in one
    # frame instead of dozens (~10% less CPU per 400 KiB message measured here).
    ("grpc.http2.max_frame_size", 4 * 1024 * 1024),
    # The SDK does its own retries (with idempotent UNIQ_KEYs); gRPC's would double them.
    ("grpc.enable_retries", 0),
    # Reconnect quickly after a broker restart (gRPC's default starts at 1 s and grows to
    # 120 s, longer than a send's whole retry budget).
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2_000),
]


def parse_endpoints(endpoints: str) -> str:
    """Validate ``host:port`` (a ``;``-separated list takes its first entry) and return a target."""
    first = endpoints.strip().split(";")[0].strip()
    for prefix in ("http://", "grpc://"):
        if first.startswith(prefix):
            first = first[len(prefix) :]
    host, sep, port = first.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidArgumentError(f"endpoints must look like host:port, got {endpoints!r}")
    return first


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """PEM bytes (read once, so a Spark task can be pickled with it); None = not given."""

    ca_pem: bytes | None = None  # None: the system roots
    cert_pem: bytes | None = None  # client certificate chain (mutual TLS)
    key_pem: bytes | None = None

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(self.ca_pem, self.key_pem, self.cert_pem)

    def __repr__(self) -> str:
        """Never the key (options and clients get printed in errors and logs)."""
        ca = "file" if self.ca_pem is not None else "system roots"
        return f"TlsConfig(ca={ca}, client_certificate={self.cert_pem is not None})"


def _read_pem(path: str | Path, argument: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InvalidArgumentError(f"{argument}: cannot read {path}: {exc.strerror}") from None
    if b"-----BEGIN " not in data:
        raise InvalidArgumentError(f"{argument}: {path} is not a PEM file")
    return data


def tls_config(
    tls: bool | TlsConfig | None = False,
    ca_file: str | Path | None = None,
    cert_file: str | Path | None = None,
    key_file: str | Path | None = None,
) -> TlsConfig | None:
    """A client's TLS arguments as one value; None = plaintext (see the module docstring)."""
    if isinstance(tls, TlsConfig):
        return tls
    if (cert_file is None) != (key_file is None):
        raise InvalidArgumentError("cert_file and key_file go together (mutual TLS)")
    if not tls and ca_file is None and cert_file is None:
        return None
    return TlsConfig(
        ca_pem=_read_pem(ca_file, "ca_file") if ca_file is not None else None,
        cert_pem=_read_pem(cert_file, "cert_file") if cert_file is not None else None,
        key_pem=_read_pem(key_file, "key_file") if key_file is not None else None,
    )


def open_channel(
    endpoints: str,
    *,
    dedicated: bool = False,
    tls: TlsConfig | None = None,
    access_key: str | None = None,
    secret_key: str | None = None,
) -> grpc.aio.Channel:
    """An asyncio channel, over TLS when ``tls`` is given; ``wire://host:port`` dials a
    broker's wire port (client/wire_channel.py) instead of gRPC. ``dedicated`` gives it its own TCP
    connection (a local subchannel pool): several producer streams on separate connections
    use both cores' worth of gRPC I/O. Calls are signed for aclEnable brokers when
    credentials are given or in the environment (wharf.client.auth)."""
    credentials = resolve_credentials(access_key, secret_key)
    if endpoints.strip().startswith(wire.SCHEME):
        # The broker's wireListen port: the same calls over the Wharf wire protocol.
        target = parse_endpoints(endpoints.strip()[len(wire.SCHEME) :])
        ssl_context = None
        if tls is not None:
            ssl_context = client_ssl_context(tls.ca_pem, tls.cert_pem, tls.key_pem)
        wire_channel = WireChannel(target, ssl_context)
        return wire_channel if credentials is None else SignedChannel(wire_channel, credentials)
    # Keepalive as the broker and the NameServer accept it (wharf.keepalive), read per channel so
    # WHARF_GRPC_KEEPALIVE_MS applies to a client made after it is set.
    options = [*_OPTIONS, *keepalive.client_options()]
    if dedicated:
        options.append(("grpc.use_local_subchannel_pool", 1))
    target = parse_endpoints(endpoints)
    if tls is not None:
        channel = grpc.aio.secure_channel(target, tls.credentials(), options=options)
    else:
        channel = grpc.aio.insecure_channel(target, options=options)
    return channel if credentials is None else SignedChannel(channel, credentials)


def open_sync_channel(
    address: str,
    options: Sequence[tuple[str, Any]] = (),
    *,
    tls: TlsConfig | None = None,
    credentials: Credentials | None = None,
) -> grpc.Channel:
    """A blocking channel (the Spark connector's): TLS when ``tls`` is given, every call
    signed with ``credentials`` (None: unsigned), keepalive as ``open_channel``'s unless
    ``options`` set it (wharf.keepalive)."""
    given = {name for name, _ in options}
    merged = [*options, *(o for o in keepalive.client_options() if o[0] not in given)]
    if tls is not None:
        plain = grpc.secure_channel(address, tls.credentials(), options=merged)
    else:
        plain = grpc.insecure_channel(address, options=merged)
    return sign_sync_channel(plain, credentials)
