"""``Admin(namesrv=...)``: the admin calls over every broker group of a cluster (RocketMQ's
mqadmin with ``-n``), returning the same proto replies as one broker's ``Admin``.

Where each call goes (the masters the NameServers list; a slave takes no admin writes):

- topic writes -- ``update_topic``, ``delete_topic``, ``reset_offsets`` -- every master whose
  group holds the topic (its route); ``create_topic`` every master of ``cluster`` (all
  clusters when None), a master that has the topic already counting as done
  (AlreadyExistsError only when every master had it);
- group writes -- ``create_group``, ``delete_group`` -- every master of the cluster (a group's
  offsets live on each queue's broker);
- reads merge every group's answer: ``list_topics`` / ``list_groups`` by name (a topic's queue
  numbers summed over its groups), ``topic_stats`` one row per (broker, queue) with
  ``broker_name`` set and ``total_messages`` summed, ``consumer_progress`` one row per
  (broker, topic, queue) with ``total_lag`` summed (``online_clients``: the most any group
  saw; a member is online on every group), ``reset_offsets_by_queue`` one entry per
  (broker, queue), ``queue_offsets`` / ``list_half_messages`` rows with ``broker_name``,
  ``consumer_list`` the union, ``query_messages`` sorted by store time, ``view_message`` the
  first group that has it.

Calls on the groups run concurrently; the first error of any group is raised (a write is then
done on some groups only: re-running it is safe, every write here is idempotent). Transaction
ids are per broker, so ``resolve_half_message`` names the ``broker`` unless the cluster has
one master. A topic has one route per group: ``topic_routes`` (``topic_route`` answers for a
single broker only).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar, Unpack

from wharf.client.broker_admin import BrokerAdmin, page_topics
from wharf.client.cluster import BrokerClients
from wharf.client.connection import Connection, ConnectionOptions, connection_of
from wharf.client.errors import (
    AlreadyExistsError,
    ClientClosedError,
    InvalidArgumentError,
    NotFoundError,
)
from wharf.client.namesrv import NameServerClient
from wharf.v1 import admin_pb2, messaging_pb2

T = TypeVar("T")


class ClusterAdmin:
    """The admin calls of ``BrokerAdmin`` over the masters of a cluster (see the module): a
    delegate ``BrokerAdmin`` per master, chosen by the routes, as the producer's and the
    consumers' per-broker clients (``wharf.client.cluster``). ``Admin(namesrv=...)`` is one
    (``isinstance(admin, Admin)`` holds)."""

    def __init__(
        self,
        endpoints: str | Connection | None = None,
        *,
        connection: Connection | None = None,
        cluster: str | None = None,
        rpc_timeout_s: float = 10.0,
        **connect: Unpack[ConnectionOptions],
    ) -> None:
        connection = connection_of(endpoints, connection, connect)
        if not connection.namesrv:
            raise InvalidArgumentError("ClusterAdmin needs namesrv='host:port;host2:port2'")
        self.connection = connection
        self.endpoints = connection.endpoints
        self.tls = connection.tls
        self.rpc_timeout_s = rpc_timeout_s
        self.namesrv = connection.namesrv
        self.namesrv_tls = connection.namesrv_tls
        self.cluster = cluster
        self._ns: NameServerClient | None = None
        # One started single-broker admin per master, as the other cluster clients' (cluster.py).
        self._admins: BrokerClients[BrokerAdmin] = BrokerClients(
            lambda address: BrokerAdmin(
                connection=connection.to(address), rpc_timeout_s=rpc_timeout_s
            )
        )

    async def __aenter__(self) -> ClusterAdmin:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        if self._ns is None:  # the NameServers with the brokers' keys (and TLS: namesrv_tls)
            self._ns = NameServerClient.of(self.connection)

    async def close(self) -> None:
        await self._admins.close()
        if self._ns is not None:
            await self._ns.close()
            self._ns = None

    # ------------------------------------------------------------------ where calls go
    @property
    def names(self) -> NameServerClient:
        if self._ns is None:
            raise ClientClosedError("admin client not started: use 'async with'")
        return self._ns

    async def masters(self, topic: str | None = None) -> dict[str, str]:
        """broker name -> master address: of the groups holding ``topic``, else of the cluster.
        NotFoundError when there is none."""
        if topic is None:
            found = await self.names.masters(self.cluster)
            where = f"cluster {self.cluster!r}" if self.cluster else "the cluster"
            if not found:
                raise NotFoundError(f"no live master in {where}: see `wharf cluster list`")
            return found
        route = await self.names.query_route(topic)
        return {name: g.master for name, g in sorted(route.groups.items()) if g.master}

    async def _broker_admin(self, address: str) -> BrokerAdmin:
        return await self._admins.get(address)

    async def _each(
        self, masters: Mapping[str, str], call: Callable[[BrokerAdmin], Awaitable[T]]
    ) -> list[tuple[str, T]]:
        """``call`` on every master at once: [(broker name, reply)] in broker name order."""
        names = sorted(masters)

        async def one(name: str) -> T:
            return await call(await self._broker_admin(masters[name]))

        replies = await asyncio.gather(*(one(n) for n in names))
        return list(zip(names, replies, strict=True))

    # ------------------------------------------------------------------ topics
    async def create_topic_on_masters(
        self,
        name: str,
        *,
        broker: str | None = None,
        **options: Any,
    ) -> list[tuple[str, str, admin_pb2.TopicConfig | None]]:
        """RocketMQ's ``updateTopic -c`` / ``-b``: the topic on every master of the cluster
        (or on ``broker``'s): [(broker, address, config or None when it existed already)]."""
        masters = await self.masters()
        if broker is not None:
            masters = {n: a for n, a in masters.items() if n == broker}
            if not masters:
                raise NotFoundError(
                    f"no live master of broker {broker!r}: see `wharf cluster list`"
                )

        async def create(admin: BrokerAdmin) -> admin_pb2.TopicConfig | None:
            try:
                return await admin.create_topic(name, **options)
            except AlreadyExistsError:
                return None

        return [(n, masters[n], c) for n, c in await self._each(masters, create)]

    async def create_topic(self, name: str, **options: Any) -> admin_pb2.TopicConfig:
        made = await self.create_topic_on_masters(name, **options)
        configs = [c for _, _, c in made if c is not None]
        if not configs:
            raise AlreadyExistsError(f"topic {name!r} exists on every master already")
        return _sum_configs(configs)

    async def update_topic(self, name: str, **options: Any) -> admin_pb2.TopicConfig:
        replies = await self._each(
            await self.masters(name), lambda a: a.update_topic(name, **options)
        )
        return _sum_configs([c for _, c in replies])

    async def delete_topic(self, name: str) -> None:
        await self._each(await self.masters(name), lambda a: a.delete_topic(name))

    async def list_topics(
        self, *, include_system: bool = False, with_stats: bool = False
    ) -> admin_pb2.ListTopicsResponse:
        replies = await self._each(
            await self.masters(),
            lambda a: a.list_topics(include_system=include_system, with_stats=with_stats),
        )
        by_name: dict[str, list[admin_pb2.TopicConfig]] = {}
        totals: dict[str, list[int]] = {}  # name -> [total, written] summed over the groups
        for _, reply in replies:
            for topic in reply.topics:
                by_name.setdefault(topic.name, []).append(topic)
            for summary in reply.stats:
                sums = totals.setdefault(summary.name, [0, 0])
                sums[0] += summary.total_messages
                sums[1] += summary.written_messages
        names = sorted(by_name)
        stats = [
            admin_pb2.TopicSummary(
                name=n, total_messages=totals[n][0], written_messages=totals[n][1]
            )
            for n in names
            if with_stats and n in totals
        ]
        return admin_pb2.ListTopicsResponse(
            topics=[_sum_configs(by_name[n]) for n in names], stats=stats
        )

    async def topic_stats(self, name: str) -> admin_pb2.GetTopicStatsResponse:
        replies = await self._each(await self.masters(name), lambda a: a.topic_stats(name))
        merged = admin_pb2.GetTopicStatsResponse(name=name)
        for broker, reply in replies:
            for q in sorted(reply.queues, key=lambda q: q.queue_id):
                row = merged.queues.add()
                row.CopyFrom(q)
                row.broker_name = broker
            merged.total_messages += reply.total_messages
        return merged

    async def list_topics_page(
        self,
        *,
        prefix: str = "",
        after: str = "",
        limit: int = 0,
        include_system: bool = False,
        with_stats: bool = False,
    ) -> admin_pb2.ListTopicsResponse:
        """One page of the merged ``list_topics`` (``BrokerAdmin.list_topics_page``)."""
        reply = await self.list_topics(include_system=include_system, with_stats=with_stats)
        return page_topics(reply, prefix=prefix, after=after, limit=limit)

    async def topic_route(self, name: str) -> messaging_pb2.QueryRouteResponse:
        raise InvalidArgumentError(
            f"topic {name!r} has one route per broker group in a cluster: use topic_routes()"
        )

    async def topic_routes(self, name: str) -> list[messaging_pb2.QueryRouteResponse]:
        replies = await self._each(await self.masters(name), lambda a: a.topic_route(name))
        return [reply for _, reply in replies]

    # ------------------------------------------------------------------ groups
    async def create_group(self, name: str, **options: Any) -> admin_pb2.SubscriptionGroupConfig:
        replies = await self._each(await self.masters(), lambda a: a.create_group(name, **options))
        return replies[0][1]

    async def list_groups(self) -> admin_pb2.ListSubscriptionGroupsResponse:
        replies = await self._each(await self.masters(), lambda a: a.list_groups())
        by_name: dict[str, admin_pb2.SubscriptionGroupConfig] = {}
        for _, reply in replies:
            for group in reply.groups:
                by_name.setdefault(group.group_name, group)
        return admin_pb2.ListSubscriptionGroupsResponse(
            groups=[g for _, g in sorted(by_name.items())]
        )

    async def delete_group(self, name: str) -> None:
        await self._each(await self.masters(), lambda a: a.delete_group(name))

    async def consumer_progress(
        self, group: str, topic: str = ""
    ) -> admin_pb2.GetConsumerProgressResponse:
        masters = await self.masters(topic or None)
        replies = await self._each(masters, lambda a: a.consumer_progress(group, topic))
        merged = admin_pb2.GetConsumerProgressResponse(consumer_group=group)
        for broker, reply in replies:
            for q in sorted(reply.queues, key=lambda q: (q.topic, q.queue_id)):
                row = merged.queues.add()
                row.CopyFrom(q)
                row.broker_name = broker
            merged.total_lag += reply.total_lag
            merged.online_clients = max(merged.online_clients, reply.online_clients)
        return merged

    async def reset_offsets(
        self, group: str, topic: str, timestamp_ms: int
    ) -> admin_pb2.ResetConsumerOffsetResponse:
        raise InvalidArgumentError(
            "queue ids repeat across the broker groups of a cluster: use reset_offsets_by_queue()"
        )

    async def reset_offsets_by_queue(
        self, group: str, topic: str, timestamp_ms: int
    ) -> list[admin_pb2.QueueOffset]:
        replies = await self._each(
            await self.masters(topic), lambda a: a.reset_offsets(group, topic, timestamp_ms)
        )
        return [
            admin_pb2.QueueOffset(broker_name=broker, queue_id=queue_id, offset=offset)
            for broker, reply in replies
            for queue_id, offset in sorted(reply.offsets.items())
        ]

    async def consumer_list(self, group: str) -> messaging_pb2.GetConsumerListResponse:
        replies = await self._each(await self.masters(), lambda a: a.consumer_list(group))
        ids = sorted({c for _, reply in replies for c in reply.client_ids})
        return messaging_pb2.GetConsumerListResponse(
            client_ids=ids, version=max((r.version for _, r in replies), default=0)
        )

    async def list_half_messages(self, topic: str = "") -> admin_pb2.ListHalfMessagesResponse:
        masters = await self.masters(topic or None)
        replies = await self._each(masters, lambda a: a.list_half_messages(topic))
        merged = admin_pb2.ListHalfMessagesResponse()
        for broker, reply in replies:
            for half in reply.messages:
                row = merged.messages.add()
                row.CopyFrom(half)
                row.broker_name = broker
        return merged

    async def resolve_half_message(
        self, transaction_id: str, commit: bool, *, broker: str | None = None
    ) -> str:
        """Transaction ids are per broker: ``broker`` names the group (its master resolves it);
        it may be left out when the cluster has one master."""
        masters = await self.masters()
        if broker is None and len(masters) > 1:
            raise InvalidArgumentError(
                f"transaction ids are per broker: name the broker (one of {sorted(masters)})"
            )
        name = broker if broker is not None else next(iter(masters))
        if name not in masters:
            raise NotFoundError(f"no live master of broker {name!r}")
        admin = await self._broker_admin(masters[name])
        return await admin.resolve_half_message(transaction_id, commit)

    # ------------------------------------------------------------------ brokers and messages
    async def broker_status(self) -> admin_pb2.BrokerStatus:
        raise InvalidArgumentError("a cluster has one status per broker: use broker_statuses()")

    async def broker_statuses(self) -> list[admin_pb2.BrokerStatus]:
        return [s for _, s in await self._each(await self.masters(), lambda a: a.broker_status())]

    async def transfer_master(self, to_broker_id: int = 0) -> admin_pb2.TransferMasterResponse:
        raise InvalidArgumentError(
            "transfer_master is sent to one group's master: Admin(connection.to(address))"
        )

    async def query_messages(
        self, topic: str, key: str, *, begin_ms: int = 0, end_ms: int = 0, max_num: int = 32
    ) -> messaging_pb2.QueryMessageResponse:
        replies = await self._each(
            await self.masters(topic),
            lambda a: a.query_messages(
                topic, key, begin_ms=begin_ms, end_ms=end_ms, max_num=max_num
            ),
        )
        views = sorted(
            (v for _, reply in replies for v in reply.messages), key=lambda v: v.store_timestamp
        )
        return messaging_pb2.QueryMessageResponse(messages=views[:max_num])

    async def view_message(self, msg_id: str, topic: str = "") -> messaging_pb2.ViewMessageResponse:
        masters = await self.masters(topic or None)
        for name in sorted(masters):
            try:
                return await (await self._broker_admin(masters[name])).view_message(msg_id, topic)
            except NotFoundError:
                continue
        raise NotFoundError(f"no broker group of the cluster has message {msg_id!r}")

    async def queue_offsets(self, topic: str) -> messaging_pb2.GetQueueOffsetsResponse:
        replies = await self._each(await self.masters(topic), lambda a: a.queue_offsets(topic))
        merged = messaging_pb2.GetQueueOffsetsResponse(topic=topic)
        for broker, reply in replies:
            for q in reply.queues:
                row = merged.queues.add()
                row.CopyFrom(q)
                row.broker_name = broker
        return merged


def _sum_configs(configs: list[admin_pb2.TopicConfig]) -> admin_pb2.TopicConfig:
    """One topic's configs of several groups: queue numbers summed, the first's permission and
    attributes (``update_topic`` keeps them the same on every group)."""
    out = admin_pb2.TopicConfig()
    out.CopyFrom(configs[0])
    out.read_queue_nums = sum(c.read_queue_nums for c in configs)
    out.write_queue_nums = sum(c.write_queue_nums for c in configs)
    return out
