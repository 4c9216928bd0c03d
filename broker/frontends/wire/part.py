"""The wire port as a part (broker/frontends/frontend.py): the gRPC mounts' very handlers
(broker/frontends/mounts.py) over Wharf's framed TCP protocol (``server.py``), on
``wireListen`` ("" = the listen host and the gRPC port + 2, ephemeral when that port is 0, as
RocketMQ derives its fast remoting port from the listen port; "off" = none), TLS by the
broker's one rule (broker/frontends/tcp.py), beside plaintext on ``wireTlsListen`` with
tlsListen. Listed after the gRPC part: its default port is derived from gRPC's."""

from __future__ import annotations

import logging

from wharf.broker.config import Config, parse_host_port
from wharf.broker.frontends.frontend import PortBook, Serving, TlsSource
from wharf.broker.frontends.mounts import mounts_for
from wharf.broker.frontends.tcp import TcpListeners, drain
from wharf.broker.frontends.wire.server import WireServer
from wharf.broker.kit.bounds import ListenerLimits

__all__ = ["WireFrontEnd", "wire_part"]

log = logging.getLogger("broker")


class WireFrontEnd:
    name = "wire"
    optional = False

    def __init__(self, config: Config) -> None:
        self.config = config
        self.server = WireServer(config.rpc_max_message_size)  # frames sized as gRPC's
        broker = config.broker
        server = self.server
        server.max_calls, server.queue_limit = (
            broker.max_calls_per_connection,
            broker.max_buffered_bytes_per_connection,
        )
        server.calls_before_auth = broker.max_calls_before_auth
        server.bytes_before_auth = broker.max_bytes_before_auth
        self.listeners = TcpListeners(
            "wireListen", broker.wire_listen, "wireTlsListen", broker.wire_tls_listen,
            ListenerLimits.of(broker, "wireListen"), broker.max_buffered_frame_bytes,
        )  # fmt: skip

    def reserve(self, ports: PortBook, tls: TlsSource) -> None:
        broker = self.config.broker
        if not broker.wire_listen:
            host, listen_port = parse_host_port(broker.listen, "listen")
            grpc_port = ports.by_setting["listen"].port
            self.listeners.address = f"{host}:{grpc_port + 2 if listen_port else 0}"
        self.listeners.reserve(ports, tls)

    def store_host(self, advertised: str) -> str | None:
        return None

    def attach(self, serving: Serving) -> None:
        self.server.durable_writer = serving.kit.port.read.write_when_durable
        self.server.acl = serving.acl  # aclEnable: connections start unauthenticated
        for mount in mounts_for(serving):
            self.server.add_method_handlers(mount.service.full_name, mount.handlers)

    async def serve(self) -> None:
        await self.listeners.serve(self.server.protocol)
        address = self.listeners.ready("wire")["wire"]
        tls_address = self.listeners.ready("wire")["wire_tls"]
        log.info("wire port on %s (%s; clients dial wire://%s)%s", address,
                 "TLS" if self.listeners.main_tls else "plaintext", address,
                 f", over TLS on wire://{tls_address}" if tls_address else "")  # fmt: skip

    def ready(self) -> dict[str, str | None]:
        return self.listeners.ready("wire")

    def connections(self) -> int:
        return len(self.server.connections)

    def close_listener(self) -> None:
        self.listeners.close_listener()

    async def stop(self, grace_s: float) -> None:
        """Calls in flight get up to the grace period, then every connection is closed."""
        await drain(self.server.running_calls, grace_s)
        await self.server.stop()
        await self.listeners.wait_closed()


def wire_part(config: Config) -> WireFrontEnd | None:
    return None if config.broker.wire_listen == "off" else WireFrontEnd(config)
