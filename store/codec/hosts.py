"""Host fields of a record (BORNHOST, STOREHOST): ``"ipv4:port"`` <-> 8 bytes (ip 4 + port as a
big-endian int 4). The v1 record holds ipv4 only. Sans-IO, numpy-free; every form is cached
(hosts repeat: a broker has one store host, a batch usually one born host)."""

from __future__ import annotations

import functools
import socket

from wharf.store.errors import InvalidMessageError


@functools.lru_cache(maxsize=4096)
def encode_host(host: str) -> bytes:
    """``"ipv4:port"`` -> 8 bytes (ip 4 + port as a big-endian int 4). InvalidMessageError if not."""
    ip, sep, port_text = host.rpartition(":")
    try:
        if not sep:
            raise ValueError("missing ':port'")
        port = int(port_text)
        if not 0 <= port <= 65535:
            raise ValueError("port out of range")
        if ip.count(".") != 3:
            raise ValueError("not a dotted ipv4 address")
        return socket.inet_aton(ip) + port.to_bytes(4, "big")
    except (OSError, ValueError) as exc:
        raise InvalidMessageError(f"host {host!r} is not 'ipv4:port' ({exc})") from None


@functools.lru_cache(maxsize=4096)
def born_host_bytes(host: str) -> bytes:
    """Born hosts come from peer addresses (maybe ipv6): the v1 record only holds ipv4, so
    anything else is stored as 0.0.0.0 with the port when there is one, rather than refusing
    the message."""
    try:
        return encode_host(host)
    except InvalidMessageError:
        _, _, port_text = host.rpartition(":")
        port = int(port_text) if port_text.isdigit() and int(port_text) <= 65535 else 0
        return b"\0\0\0\0" + port.to_bytes(4, "big")


@functools.lru_cache(maxsize=4096)
def decode_host(raw: bytes) -> str:
    """8 bytes -> ``"ipv4:port"``."""
    return f"{socket.inet_ntoa(raw[:4])}:{int.from_bytes(raw[4:8], 'big')}"
