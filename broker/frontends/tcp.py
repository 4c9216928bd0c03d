"""The listeners of an asyncio front end (wire, remoting, Kafka), made once for all of them:
its address reserved in step 2 (``PortBook``), served on the very sockets reserved (no window
where another process takes the port), TLS by ``TlsSource``'s one rule: TLS-only when the
broker's listen port is, a second TLS listener on ``<name>TlsListen`` (default: tlsListen's
host, an ephemeral port) when tlsListen keeps plaintext beside TLS. Every connection of both
is bounded by the listener's ``ListenerGuard`` (bounds.py: caps, read deadline, idle timeout,
the broker's budget of partial frames, kept by the ``PortBook``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from wharf.broker.frontends.frontend import FrontEndUnavailable, PortBook, Reserved, TlsSource
from wharf.broker.kit.bounds import FrameBudget, ListenerGuard, ListenerLimits

__all__ = ["TcpListeners", "drain"]

HANDSHAKE_TIMEOUT_S = 10.0  # a peer that opens TLS and stalls is dropped after this
_WILDCARDS = ("", "0.0.0.0", "::")


async def drain(running: Callable[[], list[asyncio.Task[object]]], grace_s: float) -> None:
    """A front end's stop: wait (at most ``grace_s``) until the requests ``running()`` names
    have ended, requests that start meanwhile included; the caller then closes what is left.
    Waits on the tasks themselves: no polling."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
    while tasks := running():
        left = deadline - loop.time()
        if left <= 0:
            return
        await asyncio.wait(tasks, timeout=left)


class TcpListeners:
    """``reserve`` then ``serve(protocol_factory)``; ``ready(key)`` reports ``key`` (the
    plaintext or TLS-only listener) and ``key_tls`` (the separate TLS one, or None)."""

    def __init__(
        self,
        setting: str,
        address: str,
        tls_setting: str,
        tls_address: str,
        limits: ListenerLimits | None = None,
        frame_budget: int = 0,
    ) -> None:
        """``limits``: the bounds of every connection (None: none); ``frame_budget``: the
        broker's maxBufferedFrameBytes, one ``FrameBudget`` per ``PortBook`` (per broker)."""
        self.setting, self.address = setting, address
        self.limits = limits
        self.frame_budget = frame_budget
        self.guard: ListenerGuard | None = None
        self.tls_setting, self.tls_address = tls_setting, tls_address
        self.main: Reserved | None = None
        self.main_tls = False
        self.second: Reserved | None = None  # the TLS listener beside a plaintext one
        self._ports: PortBook | None = None
        self._tls = TlsSource()
        self._servers: list[asyncio.Server] = []

    def reserve(self, ports: PortBook, tls: TlsSource) -> None:
        self._ports, self._tls = ports, tls
        if self.limits is not None:
            budget = None
            if self.frame_budget:
                budget = ports.shared.setdefault("frame_budget", FrameBudget(self.frame_budget))
            self.guard = ListenerGuard(self.limits, budget)
        self.main = ports.reserve(self.address, self.setting)
        self.main_tls = tls.tls_only
        if tls.enabled and tls.separate_port:
            address = self.tls_address or f"{tls.tls_listen_host or self.main.host}:0"
            self.second = ports.reserve(address, self.tls_setting)

    async def serve(self, protocol_factory: Callable[[], asyncio.BaseProtocol]) -> None:
        """Listen on every reserved socket (the book no longer holds them)."""
        loop = asyncio.get_running_loop()
        if self.guard is not None:
            protocol_factory = self.guard.wrap(protocol_factory)
        for reserved, secure in ((self.main, self.main_tls), (self.second, True)):
            if reserved is None:
                continue
            context = self._tls.ssl_context() if secure else None
            for sock in reserved.sockets:
                try:
                    server = await loop.create_server(
                        protocol_factory,
                        sock=sock,
                        backlog=1024,
                        ssl=context,
                        ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if context else None,
                    )
                except OSError as exc:
                    raise FrontEndUnavailable(
                        f"cannot listen on {reserved.address}: {exc}", self.setting
                    ) from None
                self._servers.append(server)
            if self._ports is not None:
                self._ports.release(reserved)

    @staticmethod
    def dial_host(reserved: Reserved, advertised_host: str) -> str:
        """The host a client dials for ``reserved``: its own, or for a wildcard listen
        ``advertised_host`` (127.0.0.1 when that is empty too)."""
        host = reserved.host
        return (advertised_host or "127.0.0.1") if host in _WILDCARDS else host

    def dial_address(self, reserved: Reserved | None, advertised_host: str) -> str | None:
        """host:port a client dials for ``reserved`` (None when not reserved)."""
        if reserved is None:
            return None
        return f"{self.dial_host(reserved, advertised_host)}:{reserved.port}"

    def ready(self, key: str, advertised_host: str = "") -> dict[str, str | None]:
        return {
            key: self.dial_address(self.main, advertised_host),
            f"{key}_tls": self.dial_address(self.second, advertised_host),
        }

    def close_listener(self) -> None:
        for server in self._servers:
            server.close()
        if self.guard is not None:
            self.guard.close()  # the connections left are the drain's to end

    async def wait_closed(self, timeout_s: float = 5.0) -> None:
        for server in self._servers:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(timeout_s):
                    await server.wait_closed()
        self._servers = []
