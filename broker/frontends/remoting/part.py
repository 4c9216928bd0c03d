"""The RocketMQ 4.x remoting port as a part (broker/frontends/frontend.py): ``remotingListen``
(127.0.0.1:10911, RocketMQ's broker port; "off" = none), TLS by the broker's one rule
(broker/frontends/tcp.py), the handlers (``handlers.py``) over the core, the ACL as RocketMQ 4
signs requests (``acl.py``), every request timed in the RPC metrics as
``remoting.<REQUEST_CODE>``. Its address is the store host (in every record and offset
message id): 4.x tools that decode an offset id dial it, and it must speak remoting.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from wharf.broker.config import BrokerConfig, Config
from wharf.broker.frontends.frontend import PortBook, Serving, TlsSource
from wharf.broker.frontends.frontend_kit import FrontEndKit
from wharf.broker.frontends.remoting.handlers import RemotingHandlers, error_response
from wharf.broker.frontends.tcp import TcpListeners, drain
from wharf.broker.kit.acl.rules import Perm
from wharf.broker.kit.acl.table import Need
from wharf.broker.kit.bounds import ListenerLimits
from wharf.broker.kit.remoting.acl import RemotingAcl
from wharf.broker.kit.remoting.codes import TRANSACTION_NOT_TYPE, RequestCode
from wharf.broker.kit.remoting.frame import RemotingCommand
from wharf.broker.kit.remoting.server import Connection, RemotingServer

__all__ = ["RemotingFrontEnd", "remoting_part"]

log = logging.getLogger("broker.remoting")
DEFAULT_LISTEN = BrokerConfig().remoting_listen  # taken: serve without remoting, one warning


class RemotingFrontEnd:
    name = "remoting"

    def __init__(self, config: Config) -> None:
        broker = config.broker
        self.optional = broker.remoting_listen == DEFAULT_LISTEN
        self.server = RemotingServer()
        self.server.calls_before_auth = broker.max_calls_before_auth
        self.server.max_buffered_bytes = broker.max_buffered_bytes_per_connection
        self.listeners = TcpListeners(
            "remotingListen", broker.remoting_listen,
            "remotingTlsListen", broker.remoting_tls_listen,
            ListenerLimits.of(broker, "remotingListen"), broker.max_buffered_frame_bytes,
        )  # fmt: skip
        self.address = ""  # what clients dial (namesrvAddr), set by store_host()
        self.handlers: RemotingHandlers | None = None

    def reserve(self, ports: PortBook, tls: TlsSource) -> None:
        self.listeners.reserve(ports, tls)

    def store_host(self, advertised: str) -> str | None:
        """Its address: the listen host, or the advertised host when listening on all."""
        self.address = (
            self.listeners.dial_address(
                self.listeners.main, advertised.rpartition(":")[0].strip("[]")
            )
            or ""
        )
        return self.address

    def attach(self, serving: Serving) -> None:
        ctx = serving.kit
        if not self.address:
            self.store_host(ctx.endpoint)
        # Adds its producers' channels to the check-back targets, before the checker runs.
        handlers = self.handlers = RemotingHandlers(ctx, self.address)
        server = self.server
        server.handlers = dict(handlers.table())
        server.error_mapper = error_response
        server.on_connection_lost = handlers.connection_lost
        server.observe = ctx.metrics.observe_rpc
        if serving.acl is not None:
            resolvers = {int(RequestCode.END_TRANSACTION): _end_transaction_needs(ctx)}
            server.acl = RemotingAcl(serving.acl, resolvers=resolvers,
                                     observe=ctx.metrics.observe_rpc)  # fmt: skip

    async def serve(self) -> None:
        await self.listeners.serve(lambda: Connection(self.server))
        ready = self.listeners.ready("remoting")
        log.info("remoting (RocketMQ 4.x) on %s (clients: namesrvAddr=%s)%s%s%s",
                 self.listeners.main.address if self.listeners.main else "?", self.address,
                 " over TLS" if self.listeners.main_tls else "",
                 f", TLS on {ready['remoting_tls']}" if ready["remoting_tls"] else "",
                 " with ACL" if self.server.acl is not None else "")  # fmt: skip

    def ready(self) -> dict[str, str | None]:
        ready = self.listeners.ready("remoting")
        ready["remoting"] = self.address or ready["remoting"]
        return ready

    def connections(self) -> int:
        return len(self.server.connections)

    def close_listener(self) -> None:
        self.listeners.close_listener()

    async def stop(self, grace_s: float) -> None:
        """Requests in flight get up to the grace period, then every connection closes."""
        await drain(self.server.running, grace_s)
        await self.server.stop()
        await self.listeners.wait_closed()


def remoting_part(config: Config) -> RemotingFrontEnd | None:
    return None if config.broker.remoting_listen == "off" else RemotingFrontEnd(config)


def _end_transaction_needs(
    ctx: FrontEndKit,
) -> Callable[[RemotingCommand], Awaitable[list[Need]]]:
    """END_TRANSACTION names no topic: PUB on the topic of the open half at
    ``tranStateTableOffset`` (wharf.v1 EndTransaction's need). UNKNOWN, a half that is not open
    (resolved already: the END changes nothing) or a bad offset: none (the handler answers)."""

    async def needs(request: RemotingCommand) -> list[Need]:
        fields = request.ext_fields
        try:
            offset = int(fields.get("tranStateTableOffset", ""))
            how = int(fields.get("commitOrRollback", ""))
        except ValueError:
            return []
        if offset < 0 or how == TRANSACTION_NOT_TYPE:
            return []
        topic = await ctx.port.transactions.destination_of(offset)  # dispatched first if just sent
        return [Need("topic", topic, Perm.PUB)] if topic is not None else []

    return needs
