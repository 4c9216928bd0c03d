"""``Etcd`` (``kv.py``) on aetcd: the broker's connection to the controller's etcd cluster. The
only module of the broker that imports aetcd; each method is one etcd request."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from typing import Any

import aetcd
from wharf.broker.failover.kv import Absent, Compare, CreatedAt, Entry, ModifiedAt, Op, Put, ValueIs

ETCD_TIMEOUT_S = 2
# gRPC's reconnect backoff starts at 1 s and grows x1.6 per failed attempt (to 120 s): after
# ~6-12 s without etcd its next attempt came 3-4 s after etcd was back (measured), while etcd
# gives a lease only its TTL (+ ~1 s) from its restart: a master lost its key to a lapse it could
# have prevented and stepped down. Capped at 0.5 s, it reaches etcd within ~0.5 s of its return.
# Several members: gRPC's default ``pick_first`` kept the one connection it had, to a member
# cut from its peers (no leader: every request timed out) or whose packets were dropped, so the
# master's lease lapsed and no replica could be elected until the heal, although the other
# members had a quorum all along (tests/fault/README.md: 4.6-7.1 s without an acknowledgement
# per fault, up to 15 s on a loaded machine). ``round_robin`` sends each request to the next
# member: a renewal that times out on one (2 s) is retried, 0.25 s later, on another. Keepalive
# pings find a silent member's dead connection: every 10 s, twice etcd's smallest accepted
# interval (``--grpc-keepalive-min-time``, 5 s; closer and it answers GOAWAY too_many_pings).
ETCD_CHANNEL_OPTIONS = {
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.min_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 500,
    "grpc.lb_policy_name": "round_robin",
    "grpc.keepalive_time_ms": 10_000,
    "grpc.keepalive_timeout_ms": 2000,
}


def _ipv4_endpoint(endpoint: str) -> str:
    """ "host:port" with the host as an IPv4 address (a name resolved: blocking, at start)."""
    host, _, port = endpoint.rpartition(":")
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        host = socket.gethostbyname(host)
    return f"{host}:{port}"


class AetcdEtcd:
    """The endpoints of one etcd cluster ("host:port" each). The channel opens at the first
    request (aetcd connects lazily) and redials on its own after etcd restarts."""

    def __init__(self, endpoints: list[str]) -> None:
        if not endpoints:
            raise ValueError("controllerAddr names no etcd endpoint")
        self._endpoints = list(endpoints)
        host, _, port = self._endpoints[-1].rpartition(":")
        if len(self._endpoints) > 1:
            # aetcd dials one target, f"{host}:{port}": gRPC's ipv4: URI lists every member,
            # the last one's port appended by aetcd (cluster.md, section 3). That URI takes
            # addresses only: names are resolved here, once, at start.
            addresses = [_ipv4_endpoint(endpoint) for endpoint in self._endpoints]
            host = "ipv4:" + ",".join([*addresses[:-1], addresses[-1].rpartition(":")[0]])
        self._client = aetcd.Client(
            host=host, port=int(port), timeout=ETCD_TIMEOUT_S, options=ETCD_CHANNEL_OPTIONS
        )

    @property
    def target(self) -> str:
        return ",".join(self._endpoints)

    async def grant(self, ttl_s: int) -> int:
        lease = await self._client.lease(ttl_s)
        return int(lease.id)

    async def refresh(self, lease: int) -> int:
        reply = await self._client.refresh_lease(lease)
        return 0 if reply is None else int(reply.TTL)

    async def revoke(self, lease: int) -> None:
        await self._client.revoke_lease(lease)

    async def get(self, key: bytes) -> Entry | None:
        result = await self._client.get(key)
        if result is None:
            return None
        return Entry(result.value, result.create_revision, result.mod_revision)

    async def put(self, key: bytes, value: bytes, lease: int = 0) -> None:
        await self._client.put(key, value, lease or None)

    async def transaction(self, compare: Sequence[Compare], success: Sequence[Op]) -> bool:
        t = self._client.transactions
        conditions: list[Any] = []
        for c in compare:
            if isinstance(c, Absent):
                conditions.append(t.create(c.key) == 0)
            elif isinstance(c, ValueIs):
                conditions.append(t.value(c.key) == c.value)
            elif isinstance(c, CreatedAt):
                conditions.append(t.create(c.key) == c.revision)
            else:
                assert isinstance(c, ModifiedAt)
                conditions.append(t.mod(c.key) == c.revision)
        ops = [
            t.put(op.key, op.value, op.lease or None) if isinstance(op, Put) else t.delete(op.key)
            for op in success
        ]
        succeeded, _ = await self._client.transaction(compare=conditions, success=ops, failure=[])
        return bool(succeeded)

    async def close(self) -> None:
        await self._client.close()
