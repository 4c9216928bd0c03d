"""One broker's admin client: one method per ``wharf.v1.AdminService`` RPC (replies are the
proto messages). Users make it as ``wharf.client.admin.Admin("host:port")``:

async with Admin("127.0.0.1:8081") as admin:
    await admin.create_topic("orders", queue_nums=4)
    for topic in (await admin.list_topics()).topics:
        print(topic.name, topic.write_queue_nums)

A cluster's ``ClusterAdmin`` (``wharf.client.cluster_admin``) delegates to one of these per
master; this module knows neither it nor ``Admin`` (``wharf.client.admin`` chooses).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Self, TypeVar, Unpack

import grpc
from wharf.client.connection import Connection, ConnectionOptions, connection_of
from wharf.client.errors import ClientClosedError, from_rpc_error
from wharf.v1 import admin_pb2, admin_pb2_grpc, common_pb2, messaging_pb2, messaging_pb2_grpc

T = TypeVar("T")

_WHERE = {
    "LAST": common_pb2.CONSUME_FROM_LAST_OFFSET,
    "FIRST": common_pb2.CONSUME_FROM_FIRST_OFFSET,
    "TIMESTAMP": common_pb2.CONSUME_FROM_TIMESTAMP,
}


def page_topics(
    reply: admin_pb2.ListTopicsResponse, *, prefix: str = "", after: str = "", limit: int = 0
) -> admin_pb2.ListTopicsResponse:
    """One page of a ListTopics reply: the topics named ``prefix``..., after ``after`` (the
    last name of the previous page), at most ``limit`` of them (0: all), sorted by name, with
    their ``stats`` when the reply has them. Made on the client: ListTopicsRequest has no such
    fields (a proto change, ``make proto``), and the broker answers 25,000 topics in ~1 ms
    from its cached reply (broker/frontends/v1/admin.py), ~0.5 MB."""
    stats = {s.name: s for s in reply.stats}
    names = sorted(
        (t.name, i)
        for i, t in enumerate(reply.topics)
        if t.name.startswith(prefix) and t.name > after
    )
    if limit > 0:
        names = names[:limit]
    page = admin_pb2.ListTopicsResponse()
    page.topics.extend(reply.topics[i] for _, i in names)
    page.stats.extend(stats[name] for name, _ in names if name in stats)
    return page


class BrokerAdmin:
    """One broker's admin calls (``Admin("host:port")`` is one)."""

    def __init__(
        self,
        endpoints: str | Connection | None = None,
        *,
        connection: Connection | None = None,
        rpc_timeout_s: float = 10.0,
        **connect: Unpack[ConnectionOptions],
    ) -> None:
        """``connection``: where and how to dial (``wharf.client.connection.Connection``; the
        keyword arguments ``endpoints``, ``access_key`` / ``secret_key``, TLS, ``namesrv``,
        ``namesrv_tls`` still build one, as the Producer's). NameServers in it are not dialed
        here: ``Admin`` makes a ``wharf.client.cluster_admin.ClusterAdmin`` for them."""
        self.connection = connection_of(endpoints, connection, connect)
        self.endpoints = self.connection.endpoints
        self.tls = self.connection.tls
        self.rpc_timeout_s = rpc_timeout_s
        self._channel: grpc.aio.Channel | None = None
        self._admin: admin_pb2_grpc.AdminServiceStub | None = None
        self._messaging: messaging_pb2_grpc.MessagingServiceStub | None = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        if self._channel is None:
            self._channel = self.connection.open_channel()
            self._admin = admin_pb2_grpc.AdminServiceStub(self._channel)
            self._messaging = messaging_pb2_grpc.MessagingServiceStub(self._channel)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close(None)
            self._channel = None

    async def _call(self, method: Callable[..., Awaitable[T]], request: Any) -> T:
        if self._channel is None:
            raise ClientClosedError("admin client not started: use 'async with'")
        try:
            return await method(request, timeout=self.rpc_timeout_s)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None

    @property
    def _a(self) -> admin_pb2_grpc.AdminServiceStub:
        if self._admin is None:
            raise ClientClosedError("admin client not started: use 'async with'")
        return self._admin

    @property
    def _m(self) -> messaging_pb2_grpc.MessagingServiceStub:
        if self._messaging is None:
            raise ClientClosedError("admin client not started: use 'async with'")
        return self._messaging

    # ------------------------------------------------------------------ topics
    async def create_topic(
        self,
        name: str,
        *,
        queue_nums: int = 0,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int = 0,
        attributes: Mapping[str, str] | None = None,
    ) -> admin_pb2.TopicConfig:
        """``queue_nums`` sets both read and write counts (0 = the broker's default, 8)."""
        request = admin_pb2.CreateTopicRequest(
            name=name,
            read_queue_nums=read_queue_nums if read_queue_nums is not None else queue_nums,
            write_queue_nums=write_queue_nums if write_queue_nums is not None else queue_nums,
            perm=perm,
            attributes=dict(attributes or {}),
        )
        return await self._call(self._a.CreateTopic, request)

    async def update_topic(
        self,
        name: str,
        *,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int | None = None,
        attributes: Mapping[str, str] | None = None,
    ) -> admin_pb2.TopicConfig:
        request = admin_pb2.UpdateTopicRequest(name=name, attributes=dict(attributes or {}))
        if read_queue_nums is not None:
            request.read_queue_nums = read_queue_nums
        if write_queue_nums is not None:
            request.write_queue_nums = write_queue_nums
        if perm is not None:
            request.perm = perm
        return await self._call(self._a.UpdateTopic, request)

    async def delete_topic(self, name: str) -> None:
        await self._call(self._a.DeleteTopic, admin_pb2.DeleteTopicRequest(name=name))

    async def list_topics(
        self, *, include_system: bool = False, with_stats: bool = False
    ) -> admin_pb2.ListTopicsResponse:
        """``with_stats``: the reply's ``stats`` holds each topic's message count and messages
        written (in the order of ``topics``), so a listing costs one call, not one per topic."""
        request = admin_pb2.ListTopicsRequest(include_system=include_system, with_stats=with_stats)
        return await self._call(self._a.ListTopics, request)

    async def list_topics_page(
        self,
        *,
        prefix: str = "",
        after: str = "",
        limit: int = 0,
        include_system: bool = False,
        with_stats: bool = False,
    ) -> admin_pb2.ListTopicsResponse:
        """One page of ``list_topics``, sorted by name: the topics named ``prefix``..., after
        ``after`` (the previous page's last name), at most ``limit`` (0: all); see
        ``page_topics``. A cluster's ``ClusterAdmin`` pages its merged listing alike."""
        reply = await self.list_topics(include_system=include_system, with_stats=with_stats)
        return page_topics(reply, prefix=prefix, after=after, limit=limit)

    async def topic_stats(self, name: str) -> admin_pb2.GetTopicStatsResponse:
        return await self._call(self._a.GetTopicStats, admin_pb2.GetTopicStatsRequest(name=name))

    async def topic_route(self, name: str) -> messaging_pb2.QueryRouteResponse:
        return await self._call(self._m.QueryRoute, messaging_pb2.QueryRouteRequest(topic=name))

    async def topic_routes(self, name: str) -> list[messaging_pb2.QueryRouteResponse]:
        """The topic's route on each broker group (one broker: its own)."""
        return [await self.topic_route(name)]

    # ------------------------------------------------------------------ groups
    async def create_group(
        self,
        name: str,
        *,
        retry_max_times: int = 0,
        retry_queue_nums: int = 0,
        consume_from_where: str = "LAST",
        consume_timestamp_ms: int = 0,
        consume_broadcast_enable: bool = False,
        consume_enable: bool | None = None,
        fifo: bool | None = None,
    ) -> admin_pb2.SubscriptionGroupConfig:
        """Create or update a subscription group (0 = the broker's defaults: 16 retries, 1 queue).

        ``consume_enable``: False stops the group's consumers from pulling (they get
        FAILED_PRECONDITION) until an update sets it back to True; None leaves it as it is
        (enabled for a new group). ``fifo``: RocketMQ's consumeMessageOrderly, a FIFO group for
        RocketMQ 5 clients (one in-flight message per message group); None leaves it as it is
        (off for a new group)."""
        request = admin_pb2.SubscriptionGroupConfig(
            group_name=name,
            consume_broadcast_enable=consume_broadcast_enable,
            retry_max_times=retry_max_times,
            retry_queue_nums=retry_queue_nums,
            consume_from_where=_WHERE[consume_from_where],
            consume_timestamp=consume_timestamp_ms,
        )
        if consume_enable is not None:
            request.consume_enable = consume_enable
        if fifo is not None:
            request.consume_message_orderly = fifo
        return await self._call(self._a.CreateSubscriptionGroup, request)

    async def list_groups(self) -> admin_pb2.ListSubscriptionGroupsResponse:
        return await self._call(
            self._a.ListSubscriptionGroups, admin_pb2.ListSubscriptionGroupsRequest()
        )

    async def delete_group(self, name: str) -> None:
        await self._call(
            self._a.DeleteSubscriptionGroup,
            admin_pb2.DeleteSubscriptionGroupRequest(group_name=name),
        )

    async def list_half_messages(self, topic: str = "") -> admin_pb2.ListHalfMessagesResponse:
        """Transactional messages not yet committed or rolled back ("" = every topic)."""
        return await self._call(
            self._a.ListHalfMessages, admin_pb2.ListHalfMessagesRequest(topic=topic)
        )

    async def resolve_half_message(self, transaction_id: str, commit: bool) -> str:
        """Commit or roll back an open half message by hand; how it was resolved."""
        reply = await self._call(
            self._a.ResolveHalfMessage,
            admin_pb2.ResolveHalfMessageRequest(transaction_id=transaction_id, commit=commit),
        )
        return str(reply.resolution)

    async def consumer_progress(
        self, group: str, topic: str = ""
    ) -> admin_pb2.GetConsumerProgressResponse:
        return await self._call(
            self._a.GetConsumerProgress,
            admin_pb2.GetConsumerProgressRequest(consumer_group=group, topic=topic),
        )

    async def reset_offsets(
        self, group: str, topic: str, timestamp_ms: int
    ) -> admin_pb2.ResetConsumerOffsetResponse:
        return await self._call(
            self._a.ResetConsumerOffset,
            admin_pb2.ResetConsumerOffsetRequest(
                consumer_group=group, topic=topic, timestamp=timestamp_ms
            ),
        )

    async def reset_offsets_by_queue(
        self, group: str, topic: str, timestamp_ms: int
    ) -> list[admin_pb2.QueueOffset]:
        """``reset_offsets`` as one entry per queue named by its broker group ("" here; over a
        cluster, where queue ids repeat across groups, each group's name)."""
        reply = await self.reset_offsets(group, topic, timestamp_ms)
        return [
            admin_pb2.QueueOffset(queue_id=q, offset=o) for q, o in sorted(reply.offsets.items())
        ]

    async def consumer_list(self, group: str) -> messaging_pb2.GetConsumerListResponse:
        return await self._call(
            self._m.GetConsumerList, messaging_pb2.GetConsumerListRequest(consumer_group=group)
        )

    # ------------------------------------------------------------------ broker and messages
    async def broker_status(self) -> admin_pb2.BrokerStatus:
        return await self._call(self._a.GetBrokerStatus, admin_pb2.GetBrokerStatusRequest())

    async def broker_statuses(self) -> list[admin_pb2.BrokerStatus]:
        """Every master's status (one broker: its own)."""
        return [await self.broker_status()]

    async def transfer_master(self, to_broker_id: int = 0) -> admin_pb2.TransferMasterResponse:
        """Controller mode, sent to the master: hand the group to replica ``to_broker_id`` (0 =
        any in-sync one); returns the new master's id and term (FailedPreconditionError when
        this broker is no master or the replica is not caught up)."""
        request = admin_pb2.TransferMasterRequest(to_broker_id=to_broker_id)
        return await self._call(self._a.TransferMaster, request)

    async def query_messages(
        self, topic: str, key: str, *, begin_ms: int = 0, end_ms: int = 0, max_num: int = 32
    ) -> messaging_pb2.QueryMessageResponse:
        return await self._call(
            self._m.QueryMessage,
            messaging_pb2.QueryMessageRequest(
                topic=topic,
                key=key,
                begin_timestamp=begin_ms,
                end_timestamp=end_ms,
                max_num=max_num,
            ),
        )

    async def view_message(self, msg_id: str, topic: str = "") -> messaging_pb2.ViewMessageResponse:
        return await self._call(
            self._m.ViewMessage, messaging_pb2.ViewMessageRequest(msg_id=msg_id, topic=topic)
        )

    async def queue_offsets(self, topic: str) -> messaging_pb2.GetQueueOffsetsResponse:
        return await self._call(
            self._m.GetQueueOffsets, messaging_pb2.GetQueueOffsetsRequest(topic=topic)
        )
