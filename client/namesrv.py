"""NameServerClient: topic routes and cluster membership from the NameServers of a cluster.

``namesrv`` is RocketMQ's ``namesrvAddr``: ``"host:port;host2:port2"`` (env ``NAMESRV_ADDR``).
NameServers are stateless copies of each other: a call goes to the one that answered last and
moves on to the next on UNAVAILABLE or a deadline, so a dead NameServer costs one timeout
(``call_timeout_s``, 3 s) once, not on every call. ``watch`` opens a WatchRoutes stream
(``wharf.client.route_watch`` follows it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import grpc
from wharf.client.channel import TlsConfig
from wharf.client.connection import Connection
from wharf.client.errors import InvalidArgumentError, from_rpc_error
from wharf.v1 import namesrv_pb2, namesrv_pb2_grpc

_FAIL_OVER = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def parse_namesrv(text: str) -> list[str]:
    addresses = [a.strip() for a in text.replace(",", ";").split(";") if a.strip()]
    if not addresses:
        raise InvalidArgumentError(f"namesrv must list host:port addresses, got {text!r}")
    return addresses


@dataclass(frozen=True, slots=True)
class BrokerGroup:
    cluster: str
    broker_name: str
    addresses: dict[int, str]  # broker id -> address; 0 = master

    @property
    def master(self) -> str | None:
        return self.addresses.get(0)

    @property
    def reader(self) -> str | None:
        """Where to read: the master, or while it is gone its lowest-id replica (a replica
        serves reads and consumer offsets; the master's offsets win again when it returns)."""
        if not self.addresses:
            return None
        return self.addresses.get(0) or self.addresses[min(self.addresses)]


@dataclass(frozen=True, slots=True)
class TopicRoute:
    topic: str
    queues: dict[str, namesrv_pb2.QueueData]  # broker name -> its queues of the topic
    groups: dict[str, BrokerGroup]  # broker name -> group
    version: int

    @classmethod
    def from_proto(cls, reply: namesrv_pb2.TopicRoute) -> TopicRoute:
        return cls(
            reply.topic,
            {q.broker_name: q for q in reply.queues},
            {
                b.broker_name: BrokerGroup(b.cluster, b.broker_name, dict(b.addresses))
                for b in reply.brokers
            },
            reply.version,
        )


class NameServerClient:
    @classmethod
    def of(cls, connection: Connection) -> NameServerClient:
        """The NameServers a client's Connection names (InvalidArgumentError without one)."""
        if not connection.namesrv:
            raise InvalidArgumentError("this connection names no NameServers (namesrv=)")
        return cls(connection.namesrv, connection=connection)

    def __init__(
        self,
        namesrv: str,
        call_timeout_s: float = 3.0,
        *,
        tls: TlsConfig | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        connection: Connection | None = None,
    ) -> None:
        """``tls`` / ``access_key`` / ``secret_key``: as the brokers' (a NameServer with
        tlsEnable / aclEnable; keys default to the environment's WHARF_ACCESS_KEY / ...);
        or ``connection``: a client's Connection, dialing the NameServers as it says
        (``namesrv_tls``)."""
        self.addresses = parse_namesrv(namesrv)
        self._index = random.randrange(len(self.addresses))  # spread clients over them
        self._timeout = call_timeout_s
        self._channels: dict[str, grpc.aio.Channel] = {}
        if connection is None:
            connection = Connection(
                namesrv=namesrv,
                access_key=access_key,
                secret_key=secret_key,
                tls=tls,
                namesrv_tls=tls is not None,
            )
        elif tls is not None or access_key is not None or secret_key is not None:
            raise InvalidArgumentError("give connection= or tls / access_key / secret_key")
        self.connection = connection

    def _stub(self, address: str) -> namesrv_pb2_grpc.NameServiceStub:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = self.connection.open_namesrv_channel(address)
        return namesrv_pb2_grpc.NameServiceStub(channel)

    async def _call(self, method: str, request: object) -> object:
        last: grpc.RpcError | None = None
        for step in range(len(self.addresses)):
            index = (self._index + step) % len(self.addresses)
            stub = self._stub(self.addresses[index])
            try:
                reply = await getattr(stub, method)(request, timeout=self._timeout)
            except grpc.RpcError as exc:
                if exc.code() not in _FAIL_OVER:
                    raise from_rpc_error(exc) from None
                last = exc
                continue
            self._index = index
            return reply
        assert last is not None
        raise from_rpc_error(last) from None

    async def query_route(self, topic: str) -> TopicRoute:
        """NotFoundError when no live master holds the topic."""
        reply = await self._call("QueryRoute", namesrv_pb2.QueryTopicRouteRequest(topic=topic))
        assert isinstance(reply, namesrv_pb2.TopicRoute)
        return TopicRoute.from_proto(reply)

    def watch(self, topics: list[str]) -> tuple[str, grpc.aio.UnaryStreamCall]:
        """Open a WatchRoutes stream for ``topics`` on the NameServer that answered last (the
        next one on each call after a failure: ``watch_failed``): (its address, the call)."""
        address = self.addresses[self._index]
        call = self._stub(address).WatchRoutes(namesrv_pb2.WatchRoutesRequest(topics=topics))
        return address, call

    def watch_failed(self, address: str) -> None:
        """The watch on ``address`` broke: the next ``watch`` (and call) tries another."""
        if self.addresses[self._index] == address:
            self._index = (self._index + 1) % len(self.addresses)

    async def cluster_info(self) -> list[namesrv_pb2.BrokerInfo]:
        reply = await self._call("GetClusterInfo", namesrv_pb2.GetClusterInfoRequest())
        assert isinstance(reply, namesrv_pb2.ClusterInfo)
        return list(reply.brokers)

    async def masters(self, cluster: str | None = None) -> dict[str, str]:
        """broker name -> master address, of one cluster or all."""
        return {
            b.broker_name: b.address
            for b in await self.cluster_info()
            if b.broker_id == 0 and cluster in (None, b.cluster)
        }

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close(None)
        self._channels.clear()

    async def __aenter__(self) -> NameServerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
