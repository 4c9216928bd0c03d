"""The gRPC front end as a part (frontend.py): one ``grpc.aio.Server`` serving the mounts
(wharf.v1 messaging and admin, apache.rocketmq.v2: mounts.py), the standard health service
(mirroring the broker's ``HealthBoard``) and reflection, on ``listen`` and, with tlsEnable,
TLS-only there or on ``tlsListen`` beside plaintext.

Ports: reserved in step 2 as SO_REUSEADDR sockets (PortBook); gRPC binds the same port next
to them in ``serve`` (``add_*_port`` listens at once, so it is called right before
``server.start()`` with no await between: a port that accepts before its server runs leaves a
client waiting for SETTINGS, where a refused connection is retried at once).
"""

from __future__ import annotations

import logging
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from wharf import keepalive
from wharf.broker.config import BrokerConfig, Config
from wharf.broker.frontends.frontend import (
    FrontEndUnavailable,
    PortBook,
    Reserved,
    Serving,
    TlsSource,
    flag_of,
)
from wharf.broker.frontends.mounts import mounts_for

__all__ = ["GrpcFrontEnd", "grpc_part", "grpc_server", "server_options"]

log = logging.getLogger("broker")


def grpc_server(broker: BrokerConfig, max_size: int) -> grpc.aio.Server:
    """The gRPC server, not listening yet."""
    return grpc.aio.server(
        maximum_concurrent_rpcs=broker.max_concurrent_rpcs,
        options=server_options(broker, max_size),
    )


def server_options(broker: BrokerConfig, max_size: int) -> list[tuple[str, int]]:
    """The gRPC port's options (the v2 fronts take the same, with SO_REUSEPORT on)."""
    return [
        ("grpc.max_receive_message_length", max_size),
        ("grpc.max_send_message_length", max_size),
        # Announce 4 MiB HTTP/2 frames (default 16 KiB): a 400 KiB send batch arrives
        # in one frame instead of 25 (~10% less receive CPU measured here).
        ("grpc.http2.max_frame_size", 4 * 1024 * 1024),
        ("grpc.so_reuseport", 0),
        # Accept the SDK's keepalive pings (every 30 s, idle connections too): the one
        # client/server pairing is wharf.keepalive (gRPC's 5 min default would answer
        # them with GOAWAY "too_many_pings").
        *keepalive.server_options(),
        # Ping clients every 60 s: a vanished client's parked pulls and streams are
        # cancelled within ~80 s instead of lingering on a half-open connection.
        ("grpc.keepalive_time_ms", 60_000),
        ("grpc.keepalive_timeout_ms", 20_000),
        *bound_options(broker),
    ]


def bound_options(broker: BrokerConfig) -> list[tuple[str, int]]:
    """The connection bounds (broker/kit/bounds.py) in gRPC core's own terms: no HTTP/2
    of ours. Settings at 0 leave gRPC's default (none)."""
    options = [
        # Streams open at once on one connection; a client queues its streams past it.
        ("grpc.max_concurrent_streams", broker.max_calls_per_connection),
    ]
    if broker.connection_max_idle_ms:
        # GOAWAY to a connection with no call outstanding for this long (a parked long poll or
        # an open stream is outstanding; keepalive pings do not make it busy): its client
        # reconnects on its next call.
        options.append(("grpc.max_connection_idle_ms", broker.connection_max_idle_ms))
    if broker.frame_read_timeout_ms:
        # The TLS handshake, the HTTP/2 preface and the client's first SETTINGS within this
        # (gRPC's default 120 s): a slowloris of the preface is cut.
        options.append(("grpc.server_handshake_timeout_ms", broker.frame_read_timeout_ms))
    if broker.max_connections_per_listener:
        # gRPC core's cap on the connections of the whole server (its listen and tlsListen
        # ports together): past it new connections are closed at accept.
        options.append(("grpc.max_allowed_incoming_connections",
                        broker.max_connections_per_listener))  # fmt: skip
    if broker.grpc_max_connection_age_ms:
        options.append(("grpc.max_connection_age_ms", broker.grpc_max_connection_age_ms))
        # Calls open at the GOAWAY get 30 s: a pull long poll waits at most ~30 s.
        options.append(("grpc.max_connection_age_grace_ms", 30_000))
    return options


def _bind(
    server: grpc.aio.Server, address: str, setting: str, tls: grpc.ServerCredentials | None
) -> int:
    """Add a plaintext (``tls`` None) or TLS port; returns the bound port."""
    try:
        port = server.add_secure_port(address, tls) if tls else server.add_insecure_port(address)
    except RuntimeError:
        port = 0
    if port == 0:
        raise FrontEndUnavailable(
            f"cannot listen on {address} ({setting}): the port is taken or the address is "
            f"not local; pick another with {flag_of(setting)}",
            setting,
        )
    return port


class GrpcFrontEnd:
    name = "grpc"
    optional = False

    def __init__(self, config: Config) -> None:
        self.config = config
        self.listen: Reserved | None = None
        self.tls_listen: Reserved | None = None
        self.tls = TlsSource()
        self.server: grpc.aio.Server | None = None
        self.mounts: list[Any] = []
        self._health = health.aio.HealthServicer()  # type: ignore[attr-defined]

    @property
    def port(self) -> int:
        return self.listen.port if self.listen is not None else 0

    @property
    def tls_port(self) -> int:
        """The port serving TLS: the listen port when TLS-only, tlsListen's, or 0."""
        if self.tls.tls_only:
            return self.port
        return self.tls_listen.port if self.tls_listen is not None else 0

    def servicer(self, service: str) -> Any:
        """The servicer mounted as ``service`` (a full name), for tests and benchmarks."""
        return next(m.servicer for m in self.mounts if m.service.full_name == service)

    def reserve(self, ports: PortBook, tls: TlsSource) -> None:
        self.tls = tls
        self.listen = ports.reserve(self.config.broker.listen, "listen")
        if tls.separate_port:
            self.tls_listen = ports.reserve(self.config.broker.tls_listen, "tlsListen")

    def store_host(self, advertised: str) -> str | None:
        return None

    def attach(self, serving: Serving) -> None:
        server = self.server = grpc_server(self.config.broker, self.config.rpc_max_message_size)
        self.mounts = mounts_for(serving)
        for mount in self.mounts:
            server.add_generic_rpc_handlers(
                (grpc.method_handlers_generic_handler(mount.service.full_name, mount.handlers),)
            )
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        names = [m.service.full_name for m in self.mounts]
        health_name = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
        reflection.enable_server_reflection((*names, health_name, reflection.SERVICE_NAME), server)
        serving.health.listen(self._show_health)

    async def _show_health(self, names: list[str], serving: bool) -> None:
        if not serving:  # every name NOT_SERVING, and it stays so
            await self._health.enter_graceful_shutdown()
            return
        for name in names:
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def serve(self) -> None:
        server, listen = self.server, self.listen
        assert server is not None and listen is not None
        credentials = self.tls.credentials() if self.tls.enabled else None
        _bind(server, listen.address, "listen", credentials if self.tls.tls_only else None)
        if credentials is not None and self.tls_listen is not None:
            _bind(server, self.tls_listen.address, "tlsListen", credentials)
        await server.start()
        log.info("gRPC on %s (%s)%s", listen.address, "TLS" if self.tls.tls_only else "plaintext",
                 f", gRPC over TLS on {self.tls_listen.host}:{self.tls_listen.port}"
                 if self.tls_listen is not None else "")  # fmt: skip

    def ready(self) -> dict[str, str | None]:
        listen = self.config.broker.listen
        grpc_address = f"{listen.rpartition(':')[0].strip('[]')}:{self.port}"
        tls = None
        if self.tls.tls_only:
            tls = grpc_address
        elif self.tls_listen is not None:
            tls = f"{self.tls_listen.host}:{self.tls_listen.port}"
        return {"grpc": grpc_address, "tls": tls, "plaintext": None if tls == grpc_address
                else grpc_address}  # fmt: skip

    def connections(self) -> int:
        return 0  # grpc.aio does not count its connections

    def close_listener(self) -> None:
        """gRPC stops accepting in ``stop`` (its grace period lets calls in flight finish)."""

    async def stop(self, grace_s: float) -> None:
        if self.server is not None:
            await self.server.stop(grace_s)


def grpc_part(config: Config) -> GrpcFrontEnd:
    return GrpcFrontEnd(config)
