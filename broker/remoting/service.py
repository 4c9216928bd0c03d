"""The remoting port of a broker, as the controller runs it: reserve the address early (its
port is the store host written into every record and offset message id, so tools that decode
an id dial an address that speaks remoting), serve once the broker serves, stop with it."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable

from wharf.broker.acl.accounts import AccountChecker
from wharf.broker.acl.rules import Perm
from wharf.broker.acl.table import Need
from wharf.broker.config import parse_host_port
from wharf.broker.context import BrokerContext
from wharf.broker.remoting.acl import RemotingAcl
from wharf.broker.remoting.codes import TRANSACTION_NOT_TYPE, RequestCode
from wharf.broker.remoting.frame import RemotingCommand
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

    async def start(
        self,
        ctx: BrokerContext,
        acl: AccountChecker | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """Serve: ``acl`` (aclEnable: the broker's guard) checks every request's RocketMQ 4
        signature and permissions (``acl.py``); ``ssl_context``: TLS only."""
        handlers = RemotingHandlers(ctx, self.address)
        self.handlers = handlers
        self.server.on_connection_lost = handlers.connection_lost
        guard = None
        if acl is not None:
            resolvers = {int(RequestCode.END_TRANSACTION): _end_transaction_needs(ctx)}
            guard = RemotingAcl(acl, resolvers=resolvers, observe=ctx.metrics.observe_rpc)
        await self.server.start(
            handlers.table(), error_response, acl=guard, ssl_context=ssl_context
        )
        log.info("remoting (RocketMQ 4.x) on %s (clients: namesrvAddr=%s)%s%s",
                 self.server.address, self.address, " over TLS" if ssl_context else "",
                 " with ACL" if guard else "")  # fmt: skip

    def close_listener(self) -> None:
        self.server.close_listener()

    async def stop(self) -> None:
        await self.server.stop()


def _end_transaction_needs(
    ctx: BrokerContext,
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
        tx = ctx.store.transactions
        if offset >= tx.ledger.cursor:  # an END right after its SEND: dispatch it first
            await ctx.store.wait_dispatched()
        await tx.catch_up()
        half = tx.open.get(offset)
        return [Need("topic", half.topic, Perm.PUB)] if half is not None else []

    return needs
