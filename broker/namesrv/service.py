"""The NameServer's gRPC surface (``wharf.v1.NameService``) over one ``RouteTable``.

BrokerSession: a broker's registration lives as long as its stream. The first message must be
a full registration (else the broker is told ``need_register``); heartbeats refresh it; a full
registration replaces its topics; ``unregister`` or the end of the stream drops it at once --
a killed broker's TCP connection resets, so its routes vanish in well under a second instead
of RocketMQ's 120 s. ``expire_loop`` drops brokers silent past ``not_active_timeout_ms`` (a
SIGSTOPped or partitioned broker keeps its connection open), scanning every second.

QueryRoute answers NOT_FOUND for a topic no live master holds; WatchRoutes pushes
(topic, version) when a watched route changes, 0 when it is gone.

With an ``AccountChecker`` (aclEnable) every call is authenticated first, as the broker's
calls are (``wharf.broker.kit.acl.accounts``), and authorized: BrokerSession needs an admin
account, QueryRoute PUB or SUB on the topic, WatchRoutes the same on each watched topic (an
admin to watch every topic), GetClusterInfo any account. Refusals: UNAUTHENTICATED /
PERMISSION_DENIED naming the user and what it lacks (logged at most once a minute per kind).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc
from wharf.broker.kit.acl.accounts import AccountChecker, Denied, Unauthenticated
from wharf.broker.kit.acl.rules import Perm
from wharf.broker.kit.acl.table import ADMIN, Need
from wharf.broker.namesrv.routes import BrokerKey, RouteTable, TopicQueues
from wharf.v1 import namesrv_pb2, namesrv_pb2_grpc

log = logging.getLogger("wharf.namesrv")

SCAN_INTERVAL_S = 1.0  # RocketMQ scans every 5 s (scanNotActiveBrokerInterval); 1 s is cheap
WATCH_QUEUE_MAX = 1024  # pending changes per watcher; beyond it the watcher is cut off


def _key(reg: namesrv_pb2.BrokerRegistration) -> BrokerKey:
    return reg.cluster, reg.broker_name, reg.broker_id


def _check(reg: namesrv_pb2.BrokerRegistration) -> str:
    """Why a registration is unusable, or ''."""
    if not reg.cluster or not reg.broker_name:
        return "a registration names its cluster and broker name"
    if reg.broker_id < 0:
        return f"broker id {reg.broker_id} is negative"
    if not reg.heartbeat and not reg.unregister and not reg.address:
        return "a full registration carries the broker's address"
    return ""


class NameService(namesrv_pb2_grpc.NameServiceServicer):
    def __init__(
        self,
        table: RouteTable,
        not_active_timeout_ms: int,
        acl: AccountChecker | None = None,
    ) -> None:
        self.table = table
        self.not_active_timeout_s = not_active_timeout_ms / 1000
        self.acl = acl

    async def _allow(
        self, context: grpc.aio.ServicerContext, method: str, needs: list[Need]
    ) -> None:
        """Authenticate and authorize a call (aclEnable); abort it when refused."""
        if self.acl is None:
            return
        try:
            account = self.acl.authenticate(context.invocation_metadata(), context.peer)
            self.acl.authorize(account, needs, f"wharf.v1.NameService/{method}")
            return
        except Unauthenticated as exc:
            code, kind, message = (
                grpc.StatusCode.UNAUTHENTICATED,
                "UNAUTHENTICATED",
                f"unauthenticated: {exc}",
            )
        except Denied as exc:
            code, kind, message = (
                grpc.StatusCode.PERMISSION_DENIED,
                "DENIED",
                f"permission denied: {exc}",
            )
        self.acl.log_refusal(f"{method} {kind}", f"NameService/{method}: {message}")
        await context.abort(code, message)

    async def BrokerSession(
        self,
        request_iterator: AsyncIterator[namesrv_pb2.BrokerRegistration],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[namesrv_pb2.SessionEvent]:
        await self._allow(context, "BrokerSession", [ADMIN])
        table = self.table
        key: BrokerKey | None = None
        session = object()
        try:
            async for reg in request_iterator:
                problem = _check(reg)
                if problem:
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
                if key is not None and _key(reg) != key:
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"a session registers one broker: {key}, not {_key(reg)}",
                    )
                if reg.unregister:
                    if key is not None and table.drop(key, session):
                        log.info("broker %s/%s/%d unregistered", *key)
                    key = None
                    return
                if reg.heartbeat:
                    if not table.heartbeat(_key(reg), reg.data_version, session):
                        yield namesrv_pb2.SessionEvent(need_register=True)
                    continue
                new = _key(reg) not in table.brokers
                key = _key(reg)
                taken = table.register(
                    key,
                    reg.address,
                    reg.data_version,
                    {
                        t.topic: TopicQueues(t.read_queue_nums, t.write_queue_nums, t.perm)
                        for t in reg.topics
                    },
                    session,
                    reg.epoch,
                    reg.remoting_address,
                    reg.kafka_address,
                )
                if not taken:
                    log.warning("broker %s/%s/%d at %s claims epoch %d, older than the "
                                "registered one: ignored", *key, reg.address, reg.epoch)  # fmt: skip
                elif new:
                    log.info(
                        "broker %s/%s/%d registered at %s with %d topics", *key, reg.address,
                        len(reg.topics),
                    )  # fmt: skip
        finally:
            if key is not None and table.drop(key, session):
                log.info("broker %s/%s/%d dropped: its session ended", *key)

    async def QueryRoute(
        self, request: namesrv_pb2.QueryTopicRouteRequest, context: grpc.aio.ServicerContext
    ) -> namesrv_pb2.TopicRoute:
        await self._allow(context, "QueryRoute", [Need("topic", request.topic, Perm.ANY)])
        route = self.table.route(request.topic)
        if route is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"no live broker holds topic {request.topic[:255]!r}: create it on the cluster "
                "(wharf topic create TOPIC --cluster NAME)",
            )
        assert route is not None
        reply = namesrv_pb2.TopicRoute(topic=route.topic, version=route.version)
        for name, q in route.queues:
            reply.queues.add(
                broker_name=name,
                read_queue_nums=q.read_queue_nums,
                write_queue_nums=q.write_queue_nums,
                perm=q.perm,
            )
        live = self.table.brokers
        for cluster, name, addresses in route.brokers:
            members = (live.get((cluster, name, i)) for i in addresses)
            reply.brokers.add(
                cluster=cluster,
                broker_name=name,
                addresses=addresses,
                kafka_addresses={
                    b.broker_id: b.kafka_address for b in members if b and b.kafka_address
                },
            )
        return reply

    async def GetClusterInfo(
        self, request: namesrv_pb2.GetClusterInfoRequest, context: grpc.aio.ServicerContext
    ) -> namesrv_pb2.ClusterInfo:
        await self._allow(context, "GetClusterInfo", [])
        reply = namesrv_pb2.ClusterInfo()
        for b in self.table.listing():
            reply.brokers.add(
                cluster=b.cluster,
                broker_name=b.broker_name,
                broker_id=b.broker_id,
                address=b.address,
                topics=len(b.topics),
                last_seen_ms_ago=self.table.seen_ago_ms(b),
                registered_at_ms=b.registered_at_ms,
                remoting_address=b.remoting_address,
                kafka_address=b.kafka_address,
            )
        return reply

    async def WatchRoutes(
        self, request: namesrv_pb2.WatchRoutesRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[namesrv_pb2.RouteChange]:
        wanted = set(request.topics)
        needs = [Need("topic", t, Perm.ANY) for t in sorted(wanted)] if wanted else [ADMIN]
        await self._allow(context, "WatchRoutes", needs)
        changes: asyncio.Queue[set[str]] = asyncio.Queue(WATCH_QUEUE_MAX)

        def on_change(topics: set[str]) -> None:
            hit = topics & wanted if wanted else topics
            if hit:
                try:
                    changes.put_nowait(hit)
                except asyncio.QueueFull:
                    log.warning("route watcher too slow; cutting it off")

        table = self.table
        table.watch(on_change)
        try:
            for topic in sorted(wanted):
                yield namesrv_pb2.RouteChange(topic=topic, version=table.topic_version(topic))
            while True:
                topics = await changes.get()
                for topic in sorted(topics):
                    yield namesrv_pb2.RouteChange(topic=topic, version=table.topic_version(topic))
        finally:
            table.unwatch(on_change)

    async def expire_loop(self) -> None:
        while True:
            await asyncio.sleep(SCAN_INTERVAL_S)
            for broker in self.table.expire(self.not_active_timeout_s):
                log.warning(
                    "broker %s/%s/%d at %s dropped: silent for more than %.0f ms",
                    broker.cluster, broker.broker_name, broker.broker_id, broker.address,
                    self.not_active_timeout_s * 1000,
                )  # fmt: skip
