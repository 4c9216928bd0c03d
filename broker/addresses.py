"""The broker's addresses, derived once at start: what clients are told to dial (the
advertised endpoint) and the store host written into every record and offset message id."""

from __future__ import annotations

import logging
import socket

from wharf.broker.config import parse_host_port
from wharf.store.config import StoreConfig

__all__ = ["default_endpoint", "store_config_for", "store_host_for"]

log = logging.getLogger("broker")


def _is_ipv4(host: str) -> bool:
    try:
        socket.inet_aton(host)
    except OSError:
        return False
    return host.count(".") == 3


def store_host_for(endpoint: str, listen_host: str) -> str:
    """The 'ipv4:port' written into records and offset msg ids. Records hold only ipv4, so a
    host name or ipv6 endpoint falls back to the listen host, then to 127.0.0.1."""
    host, port = parse_host_port(endpoint, "advertisedAddress")
    for candidate in (host, listen_host):
        if _is_ipv4(candidate) and candidate != "0.0.0.0":
            return f"{candidate}:{port}"
    return f"127.0.0.1:{port}"


def default_endpoint(listen_host: str, port: int) -> str:
    """What clients are told to dial when advertisedAddress is not set: the listen address,
    except that a wildcard (0.0.0.0, ::) is not dialable: use this host's name's address."""
    if listen_host not in ("0.0.0.0", "::", ""):
        return f"{listen_host}:{port}"
    try:
        host = socket.gethostbyname(socket.gethostname())
    except OSError:
        host = "127.0.0.1"
    log.warning(
        "listening on all interfaces; advertising %s:%d to clients (set advertisedAddress / "
        "--advertise to the address they can reach)", host, port,
    )  # fmt: skip
    return f"{host}:{port}"


def store_config_for(store_config: StoreConfig, address: str, listen_host: str) -> StoreConfig:
    """The store's settings with what only the reserved ports tell: the store host (in every
    record and offset message id; from ``address``, a front end's that must own it or the
    advertised one) and the replication listener's host."""
    if store_config.store_host == StoreConfig().store_host:
        store_config = store_config.replace(store_host=store_host_for(address, listen_host))
    if store_config.ha_listen_host == StoreConfig().ha_listen_host and listen_host not in (
        "127.0.0.1",
        "localhost",
        "",
    ):
        store_config = store_config.replace(ha_listen_host=listen_host)  # as gRPC binds
    return store_config
