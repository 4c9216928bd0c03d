"""The Kafka front end as a part of the broker (``broker/frontends/frontend.py``): its listeners
(``kafkaListen``, and ``kafkaTlsListen`` beside it when tlsListen keeps plaintext), its
handlers over the broker's context, and what it reports.

- ``kafkaListen = "off"``: no part. On its default address (127.0.0.1:9092) a taken port is
  one warning and the broker goes on without Kafka (``optional``); set explicitly, it stops
  the broker.
- Advertised address (what Metadata and FindCoordinator name): ``kafkaAdvertisedAddress``,
  else the listen address with a wildcard host replaced by the host of the broker's
  advertised endpoint; a client on the TLS listener is told the TLS listener's address.
- Shutdown: ``close_listener`` stops accepting; ``stop`` answers the group requests waiting on
  a rebalance (NOT_COORDINATOR), waits up to the grace period for the other requests in
  flight (long-polling fetches are answered at once: the core's long poll is closed by then),
  then closes every connection.
"""

from __future__ import annotations

import asyncio
import logging

from wharf.broker.config import BrokerConfig, Config, parse_host_port
from wharf.broker.frontends.frontend import FrontEnd, PortBook, Serving, TlsSource
from wharf.broker.frontends.kafka.env import KafkaEnv
from wharf.broker.frontends.kafka.handlers import KafkaHandlers
from wharf.broker.frontends.kafka.server import KafkaServer
from wharf.broker.frontends.kafka.txn.link import link_tls_context
from wharf.broker.frontends.tcp import TcpListeners, drain
from wharf.broker.kit.bounds import ListenerLimits

__all__ = ["KafkaPart", "kafka_part"]

log = logging.getLogger("broker.kafka")

MAX_FRAME = 64 * 1024 * 1024  # Kafka's socket.request.max.bytes is 100 MiB


def kafka_part(config: Config) -> FrontEnd | None:
    if config.broker.kafka_listen.strip().lower() == "off":
        return None
    return KafkaPart(config)


class KafkaPart:
    name = "kafka"

    def __init__(self, config: Config) -> None:
        broker = config.broker
        self.config = config
        self.optional = broker.kafka_listen == BrokerConfig().kafka_listen
        self.listeners = TcpListeners(
            "kafkaListen", broker.kafka_listen, "kafkaTlsListen", broker.kafka_tls_listen,
            ListenerLimits.of(broker, "kafkaListen"), broker.max_buffered_frame_bytes,
        )  # fmt: skip
        self.server: KafkaServer | None = None
        self.handlers: KafkaHandlers | None = None
        self._advertised_host = ""

    def reserve(self, ports: PortBook, tls: TlsSource) -> None:
        self.listeners.reserve(ports, tls)

    def store_host(self, advertised: str) -> str | None:
        return None  # records keep the broker's own store host

    def attach(self, serving: Serving) -> None:
        ctx = serving.kit
        listeners = self.listeners
        assert listeners.main is not None, "reserve first"
        endpoint_host = ctx.endpoint.rpartition(":")[0].strip("[]")
        self._advertised_host = endpoint_host
        advertised = self.config.broker.kafka_advertised_address
        if advertised:
            host, port = parse_host_port(advertised, "kafkaAdvertisedAddress")
        else:
            host, port = listeners.dial_host(listeners.main, endpoint_host), listeners.main.port
        env = KafkaEnv(ctx, host, port, acl=serving.acl)
        second = listeners.second
        if second is not None:
            env.tls_address = (listeners.dial_host(second, host), second.port)
        if listeners.main_tls:
            env.link_tls = link_tls_context(self.config.broker.namesrv_tls_ca_file)
        self.handlers = KafkaHandlers(env)
        self.server = KafkaServer(
            self.handlers.table(),
            max_frame=MAX_FRAME,
            sasl_required=serving.acl is not None,
            observe=ctx.metrics.observe_rpc,
            raw_sasl=self.handlers.sasl.raw_token,
        )
        broker = self.config.broker
        self.server.calls_before_auth = broker.max_calls_before_auth
        self.server.bytes_before_auth = broker.max_bytes_before_auth
        self.server.max_buffered_bytes = broker.max_buffered_bytes_per_connection

    async def serve(self) -> None:
        assert self.server is not None and self.handlers is not None, "attach first"
        await asyncio.to_thread(self.handlers.load_blocking)
        await self.handlers.replay()
        self.handlers.start()
        await self.listeners.serve(self.server.protocol)
        ready = self.ready()
        env = self.handlers.env
        log.info("kafka on %s (advertised %s:%d)%s%s%s",
                 ready["kafka"], env.host, env.port,
                 " over TLS" if self.listeners.main_tls else "",
                 f", TLS on {ready['kafka_tls']}" if ready["kafka_tls"] else "",
                 " with SASL (ACL)" if self.server.sasl_required else "")  # fmt: skip

    def ready(self) -> dict[str, str | None]:
        return self.listeners.ready("kafka", self._advertised_host)

    def connections(self) -> int:
        return len(self.server.connections) if self.server is not None else 0

    def close_listener(self) -> None:
        self.listeners.close_listener()

    async def stop(self, grace_s: float) -> None:
        # Groups first: joins and syncs waiting on a rebalance are answered NOT_COORDINATOR
        # now instead of holding the grace period (a rebalance may wait minutes).
        if self.handlers is not None:
            self.handlers.stop()
        server = self.server
        if server is not None:
            await drain(server.running, grace_s)
            await server.close_all()
        await self.listeners.wait_closed()
