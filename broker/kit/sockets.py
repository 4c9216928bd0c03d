"""Binding a listen address without listening, once for every listener of the broker and the
NameServer (``PortBook.reserve`` in frontend.py, ``RemotingServer.reserve``): a socket bound to
each address of the host (SO_REUSEADDR, ipv6 sockets v6-only), port 0 meaning one port free on
all of them. No setting or error wording of its own: callers name their setting."""

from __future__ import annotations

import errno
import socket

__all__ = ["NoFreePort", "NoUsableAddress", "bind_unlistened"]

_FAMILIES = (socket.AF_INET, socket.AF_INET6)
_PORT_ZERO_TRIES = 10  # port 0: the port picked on one address may be taken on another


class NoUsableAddress(OSError):
    """``host`` resolved to no address this machine can bind."""


class NoFreePort(OSError):
    """Port 0: no port was free on every address of ``host`` in a few tries."""


def bind_unlistened(host: str, port: int) -> list[socket.socket]:
    """Non-blocking sockets bound to every address of ``host`` at ``port`` (port 0: the
    same free port on all), not listening. socket.gaierror when ``host`` does not resolve,
    NoUsableAddress, NoFreePort, or the bind's OSError (EADDRINUSE, EADDRNOTAVAIL ...) when
    the port is taken or not local."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    targets = list(dict.fromkeys((f, a) for f, _, _, _, a in infos if f in _FAMILIES))
    for _ in range(_PORT_ZERO_TRIES):
        sockets: list[socket.socket] = []
        chosen = port
        try:
            for family, sockaddr in targets:
                sock = socket.socket(family, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:  # the ipv4 address, if listed, has its own
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                try:
                    sock.bind((sockaddr[0], chosen, *sockaddr[2:]))
                except OSError as exc:
                    sock.close()
                    # An address of a name this host does not have (localhost's ::1
                    # without ipv6): the others serve.
                    if exc.errno == errno.EADDRNOTAVAIL and len(targets) > 1:
                        continue
                    raise
                sock.setblocking(False)
                sockets.append(sock)
                chosen = sock.getsockname()[1]
        except OSError as exc:
            for sock in sockets:
                sock.close()
            if port == 0 and sockets and exc.errno == errno.EADDRINUSE:
                continue
            raise
        if not sockets:
            raise NoUsableAddress(errno.EADDRNOTAVAIL, "no usable address")
        return sockets
    raise NoFreePort(errno.EADDRINUSE, "no port free on every address")
