"""The remoting port of a broker, as the controller runs it: reserve the address early (its
port is the store host written into every record and offset message id, so tools that decode
an id dial an address that speaks remoting), serve once the broker serves, stop with it."""

from __future__ import annotations

import logging

from wharf.broker.config import parse_host_port
from wharf.broker.context import BrokerContext
from wharf.broker.remoting.handlers import RemotingHandlers, error_response
from wharf.broker.remoting.server import RemotingServer, RemotingStartError

__all__ = ["RemotingService", "RemotingStartError"]

log = logging.getLogger("broker.remoting")
_WILDCARDS = ("", "0.0.0.0", "::", "[::]")


class RemotingService:
    """``RemotingService(listen, endpoint)`` binds ``listen`` (HOST:PORT, port 0 = free port)
    at once; ``address`` is what clients dial (the listen host, or the advertised endpoint's
    host when listening on a wildcard). RemotingStartError when it cannot."""

    def __init__(self, listen: str, endpoint: str) -> None:
        try:
            host, port = parse_host_port(listen, "remotingListen")
        except ValueError as exc:
            raise RemotingStartError(f"--remoting-listen {listen!r}: {exc}") from None
        self.server = RemotingServer()
        bound = self.server.reserve(host.strip("[]"), port)
        advertised = host.strip("[]")
        if advertised in _WILDCARDS:
            advertised = endpoint.rpartition(":")[0].strip("[]") or "127.0.0.1"
        self.address = f"{advertised}:{bound}"
        self.handlers: RemotingHandlers | None = None

    async def start(self, ctx: BrokerContext) -> None:
        if ctx.config.acl_enable:
            self.server.close_sockets()
            raise RemotingStartError(
                "remoting (--remoting-listen) does not check RocketMQ 4 ACL signatures yet: "
                "turn it off while aclEnable is on"
            )
        handlers = RemotingHandlers(ctx, self.address)
        self.handlers = handlers
        self.server.on_connection_lost = handlers.connection_lost
        await self.server.start(handlers.table(), error_response)
        log.info("remoting (RocketMQ 4.x) on %s (clients: namesrvAddr=%s)", self.server.address,
                 self.address)  # fmt: skip

    def close_listener(self) -> None:
        self.server.close_listener()

    async def stop(self) -> None:
        await self.server.stop()
