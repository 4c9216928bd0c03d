"""The front-end part: the one interface every protocol front end implements (gRPC with
wharf.v1 + apache.rocketmq.v2, the wire port, RocketMQ 4.x remoting, Kafka), and what the
composition root (``broker/controller.py``) hands each one. The root holds a list of parts
(``broker/frontends/roster.py``) and nothing protocol-specific; a new protocol is a folder with a
``part.py`` and one line in that list.

A part's life, in the root's order (``BrokerController.start``; each step for every part
before the next step for any):

1. ``make(config)`` (the list's callables): the part from its own settings, or None when
   they turn it off. No I/O.
2. ``reserve(ports, tls)``: bind its listeners without listening (``PortBook``), before the
   store starts, so a taken port fails before seconds of recovery and the real port can go
   into the store host (``store_host``). A port taken is ``FrontEndUnavailable``: the root
   stops, or, for a part that listens on its default address only, logs one line and goes on
   without it (``optional``).
3. ``attach(serving)``: build its handlers over the core (``Serving.kit``), the ACL guard and
   TLS, add what it contributes (check-back sources, health names). Nothing can call yet.
4. ``serve()``: listen on the reserved sockets. A part that fails here has the parts already
   serving stopped in reverse order by the root.
5. Shutdown: ``close_listener()`` on every part before any ``stop(grace)`` (no port takes new
   connections while another drains), then ``stop`` in reverse order.

Metrics: ``connections()`` feeds ``wharf_frontend_connections{frontend=name}``; each part
times its requests through ``Serving.kit.metrics.observe_rpc`` under its own names.
"""

from __future__ import annotations

import re
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from wharf.broker.config import Config, parse_host_port
from wharf.broker.kit.health import HealthBoard
from wharf.broker.kit.sockets import NoFreePort, bind_unlistened

if TYPE_CHECKING:
    import grpc
    from wharf.broker.frontends.acl_guard import AclGuard
    from wharf.broker.frontends.frontend_kit import FrontEndKit

__all__ = [
    "FrontEnd",
    "FrontEndUnavailable",
    "Part",
    "PortBook",
    "Reserved",
    "Serving",
    "TlsSource",
    "flag_of",
]


class FrontEndUnavailable(RuntimeError):
    """A front end cannot serve for a reason the operator can fix (its port is taken, its
    address is not local). ``setting`` names the setting to change."""

    def __init__(self, message: str, setting: str = "") -> None:
        super().__init__(message)
        self.setting = setting


def flag_of(setting: str) -> str:
    """The command-line flag of a setting: tlsListen -> --tls-listen."""
    return "--" + "-".join(part.lower() for part in re.findall(r"[a-z]+|[A-Z][a-z]*", setting))


@dataclass
class Reserved:
    """One reserved address: sockets bound (one per address family of the host), not
    listening. ``address`` is host:real port."""

    address: str
    port: int
    sockets: list[socket.socket] = field(default_factory=list)

    @property
    def host(self) -> str:
        return self.address.rpartition(":")[0].strip("[]")


class PortBook:
    """Step 2's reservations, closed by the root once every part serves (or on failure)."""

    def __init__(self) -> None:
        self.held: list[socket.socket] = []
        self.by_setting: dict[str, Reserved] = {}  # what each setting reserved (wire: listen's)
        # What the listeners of one broker share (bounds.py's FrameBudget), by name.
        self.shared: dict[str, Any] = {}

    def reserve(self, address: str, setting: str) -> Reserved:
        """Bind ``address`` (port 0: the OS picks one, the same on every address family)
        without listening. SO_REUSEADDR, as gRPC's own sockets: gRPC binds the port next to
        these when it serves; an asyncio part listens on these very sockets. A client dialing
        now is refused (nothing listens). FrontEndUnavailable when taken or not local."""
        try:
            host, port = parse_host_port(address, setting)
        except ValueError as exc:
            raise FrontEndUnavailable(f"{setting} {address!r}: {exc}", setting) from None
        taken = (
            f"cannot listen on {address} ({setting}): the port is taken or the address is not "
            f"local; pick another with {flag_of(setting)}"
        )
        try:
            sockets = bind_unlistened(host.strip("[]"), port)
        except socket.gaierror as exc:
            raise FrontEndUnavailable(
                f"cannot listen on {address} ({setting}): {exc.strerror}", setting
            ) from None
        except NoFreePort:
            raise FrontEndUnavailable(
                f"cannot listen on {address} ({setting}): no port free on every address",
                setting,
            ) from None
        except OSError:
            raise FrontEndUnavailable(taken, setting) from None
        self.held.extend(sockets)
        chosen = sockets[0].getsockname()[1]
        reserved = Reserved(f"{address.rpartition(':')[0]}:{chosen}", chosen, sockets)
        self.by_setting[setting] = reserved
        return reserved

    def release(self, reserved: Reserved) -> None:
        """A part took ``reserved``'s sockets (an asyncio server listens on them now) or gave
        them up: the book no longer closes them."""
        for sock in reserved.sockets:
            if sock in self.held:
                self.held.remove(sock)

    def close(self) -> None:
        for sock in self.held:
            sock.close()
        self.held.clear()


@dataclass(frozen=True)
class TlsSource:
    """TLS as every front end applies it, one rule for all (tlsEnable, tlsListen):

    - off: plaintext listeners only;
    - tlsEnable without tlsListen: every listener is TLS-only;
    - tlsEnable with tlsListen: every front end keeps its plaintext listener and adds a TLS
      one (gRPC on tlsListen, the others on their own ``<name>TlsListen``), so turning TLS on
      never leaves a protocol without an encrypted port.

    ``ssl_context()`` (asyncio servers) and ``credentials()`` (gRPC) follow certificate
    reloads."""

    enabled: bool = False
    separate_port: bool = False  # tlsListen given: plaintext stays, TLS on its own port
    tls_listen_host: str = ""  # the host of tlsListen (the default host of the others' TLS)
    make_context: Callable[[], ssl.SSLContext] | None = None
    make_credentials: Callable[[], grpc.ServerCredentials] | None = None

    @property
    def tls_only(self) -> bool:
        return self.enabled and not self.separate_port

    def ssl_context(self) -> ssl.SSLContext:
        assert self.make_context is not None, "TLS is off"
        return self.make_context()

    def credentials(self) -> grpc.ServerCredentials:
        assert self.make_credentials is not None, "TLS is off"
        return self.make_credentials()


@dataclass
class Serving:
    """What a part gets at ``attach``: the port and the shared kit (``kit.py``: never the
    broker's context, the store or the metadata tables), the ACL guard (aclEnable, else None), TLS,
    the broker's health (a part adds the service names it serves), and ``shared``: what
    parts build once for several transports (``mounts.py``: the gRPC services the gRPC
    front end and the wire port both serve)."""

    kit: FrontEndKit
    acl: AclGuard | None
    tls: TlsSource
    health: HealthBoard = field(default_factory=HealthBoard)
    shared: dict[str, Any] = field(default_factory=dict)


class FrontEnd(Protocol):
    """One protocol front end as the root composes it (the module docstring: the order)."""

    name: str  # "grpc" | "wire" | "remoting" | "kafka": logs and the connection gauge's label
    optional: bool  # on its default address only: a taken port is one warning, not a stop

    def reserve(self, ports: PortBook, tls: TlsSource) -> None: ...

    def store_host(self, advertised: str) -> str | None:
        """The address stamped into records and offset message ids if this part must own it
        (remoting: 4.x tools dial the id's address), else None; ``advertised`` is the
        broker's advertised endpoint (its host replaces a wildcard listen host)."""
        ...

    def attach(self, serving: Serving) -> None: ...

    async def serve(self) -> None: ...

    def ready(self) -> dict[str, str | None]:
        """Its ready-file keys (``{"kafka": "127.0.0.1:9092", "kafka_tls": None}``)."""
        ...

    def connections(self) -> int: ...

    def close_listener(self) -> None: ...

    async def stop(self, grace_s: float) -> None: ...


# The list's callables: a part from the resolved settings, None when they turn it off.
Part = Callable[[Config], FrontEnd | None]
