"""Pull consumer: you choose queues and offsets; nothing is committed unless you say so.

async with PullConsumer("127.0.0.1:8081", "audit") as consumer:
    queues = await consumer.queues("orders")
    result = await consumer.pull(queues[0], offset=0, max_messages=100)
    for msg in result.messages:
        print(msg.queue_offset, msg.body)
    await consumer.commit(queues[0], result.next_begin_offset)

# or track positions per assigned queue:
    consumer.assign(queues)
    await consumer.seek_to_beginning()
    batch = await consumer.poll(max_wait_ms=1000)   # advances positions
    await consumer.commit_positions()
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Unpack

import grpc
from wharf.client.cluster import ClusterQueues
from wharf.client.connection import Connection, ConnectionOptions, connection_of
from wharf.client.consumer.pull_stream import Puller
from wharf.client.consumer.start_offset import queue_bounds, search_offset
from wharf.client.errors import (
    ClientClosedError,
    InvalidArgumentError,
    from_rpc_error,
)
from wharf.client.message import MessageQueue, ReceivedMessage
from wharf.client.records import messages_from_reply
from wharf.client.route import RouteCache
from wharf.v1 import messaging_pb2, messaging_pb2_grpc


class PullStatus(enum.IntEnum):
    FOUND = messaging_pb2.FOUND
    NO_NEW_MSG = messaging_pb2.NO_NEW_MSG
    NO_MATCHED_MSG = messaging_pb2.NO_MATCHED_MSG
    OFFSET_ILLEGAL = messaging_pb2.OFFSET_ILLEGAL
    UNKNOWN = 0


@dataclass(frozen=True, slots=True)
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[ReceivedMessage]


class PullConsumer:
    def __init__(
        self,
        endpoints: str | Connection | None = None,
        group: str = "DEFAULT_PULL",
        *,
        connection: Connection | None = None,
        stream_pulls: bool = True,
        **connect: Unpack[ConnectionOptions],
    ) -> None:
        """``connection``: where and how to dial (``wharf.client.connection.Connection``; the
        keyword arguments ``endpoints``, ``namesrv``, ``access_key`` / ``secret_key``, TLS,
        ``namesrv_tls`` still build one, as the Producer's). With a cluster's NameServers
        (``namesrv``): ``queues()`` lists (topic, queue, broker name) of every group and every
        call on a queue goes to its group's master (``wharf.client.cluster``).
        ``stream_pulls``: pulls share one PullMessageStream call (unary PullMessage against a
        broker without it, ``consumer.pull_stream``); False: one unary call per pull."""
        self.connection = connection_of(endpoints, connection, connect)
        self._cluster: ClusterQueues[PullConsumer] | None = None
        if self.connection.namesrv:
            self._cluster = ClusterQueues(
                self.connection,
                lambda address: PullConsumer(
                    connection=self.connection.to(address), group=group, stream_pulls=stream_pulls
                ),
            )
        self.endpoints = self.connection.endpoints
        self.tls = self.connection.tls
        self.group = group
        self._channel: grpc.aio.Channel | None = None
        self._stub: messaging_pb2_grpc.MessagingServiceStub | None = None
        self._stream_pulls = stream_pulls
        self._pull: Puller | None = None
        self._routes: RouteCache | None = None
        self._positions: dict[MessageQueue, int] = {}
        self._tags: dict[str, str] = {}
        self._cursor = 0

    async def __aenter__(self) -> PullConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        if self._cluster is None and self._channel is None:  # a cluster's start on first use
            self._channel = self.connection.open_channel()
            self._stub = messaging_pb2_grpc.MessagingServiceStub(self._channel)
            self._pull = Puller(self._channel, stream=self._stream_pulls)
            self._routes = RouteCache(self._stub)

    async def close(self) -> None:
        if self._cluster is not None:
            await self._cluster.close()
        if self._pull is not None:
            self._pull.close()
        if self._channel is not None:
            await self._channel.close(None)
            self._channel = None
            self._stub = None
            self._pull = None

    def _require(self) -> messaging_pb2_grpc.MessagingServiceStub:
        if self._stub is None:
            raise ClientClosedError("pull consumer not started: use 'async with'")
        return self._stub

    # ------------------------------------------------------------------ stateless calls
    async def queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues (from QueryRoute; in a cluster, of every group)."""
        if self._cluster is not None:
            return await self._cluster.queues(topic)
        self._require()
        assert self._routes is not None
        return (await self._routes.get(topic, refresh=True)).read_queues()

    async def pull(
        self,
        queue: MessageQueue,
        offset: int,
        *,
        max_messages: int = 32,
        max_wait_ms: int = 0,
        tag_expression: str = "*",
        max_bytes: int = 0,
        sql_expression: str = "",
    ) -> PullResult:
        """Read up to ``max_messages`` from ``offset`` and at most ``max_bytes`` of records (0:
        the broker's maxPullBytes; the first message always comes); long-polls up to
        ``max_wait_ms``. ``sql_expression``: a SQL92 property filter the broker applies
        (instead of ``tag_expression``; the tag is the property ``TAGS``)."""
        if offset < 0:
            raise InvalidArgumentError(f"offset must be >= 0, got {offset}")
        if self._cluster is not None:
            sub, local = await self._cluster.client(queue)
            return await sub.pull(
                local, offset, max_messages=max_messages, max_wait_ms=max_wait_ms,
                tag_expression=tag_expression, max_bytes=max_bytes, sql_expression=sql_expression,
            )  # fmt: skip
        request = messaging_pb2.PullMessageRequest(
            consumer_group=self.group,
            topic=queue.topic,
            queue_id=queue.queue_id,
            queue_offset=offset,
            max_messages=max_messages,
            max_wait_ms=max_wait_ms,
            tag_expression=tag_expression,
            sql_expression=sql_expression,
            raw_records=True,  # stored record bytes, decoded lazily here (client.records)
            max_bytes=max_bytes,
        )
        self._require()
        assert self._pull is not None
        reply = await self._pull(request, timeout=max_wait_ms / 1000.0 + 10.0)
        try:
            status = PullStatus(reply.status)
        except ValueError:
            status = PullStatus.UNKNOWN
        messages = messages_from_reply(reply, tag_expression)
        if status is PullStatus.FOUND and not messages:
            # Raw mode: only tag-hash collisions were found; the exact check dropped them.
            status = PullStatus.NO_MATCHED_MSG
        return PullResult(
            status, reply.next_begin_offset, reply.min_offset, reply.max_offset, messages
        )

    async def committed(self, queue: MessageQueue) -> int:
        """The group's committed offset for ``queue``; -1 if none."""
        if self._cluster is not None:
            sub, local = await self._cluster.client(queue)
            return await sub.committed(local)
        try:
            reply = await self._require().QueryConsumerOffset(
                messaging_pb2.QueryConsumerOffsetRequest(
                    consumer_group=self.group, topic=queue.topic, queue_id=queue.queue_id
                ),
                timeout=5.0,
            )
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        return reply.offset

    async def commit(self, queue: MessageQueue, offset: int) -> None:
        """Store ``offset`` (the NEXT offset to consume) as the group's progress."""
        if self._cluster is not None:
            sub, local = await self._cluster.client(queue)
            return await sub.commit(local, offset)
        try:
            await self._require().UpdateConsumerOffset(
                messaging_pb2.UpdateConsumerOffsetRequest(
                    consumer_group=self.group,
                    topic=queue.topic,
                    queue_id=queue.queue_id,
                    offset=offset,
                ),
                timeout=5.0,
            )
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None

    async def bounds(self, queue: MessageQueue) -> tuple[int, int]:
        """(min offset, max offset) of ``queue``; max is the next offset to be written."""
        if self._cluster is not None:
            sub, local = await self._cluster.client(queue)
            return await sub.bounds(local)
        return await queue_bounds(self._require(), queue)

    async def offset_for_time(self, queue: MessageQueue, timestamp_ms: int) -> int:
        if self._cluster is not None:
            sub, local = await self._cluster.client(queue)
            return await sub.offset_for_time(local, timestamp_ms)
        return await search_offset(self._require(), queue, timestamp_ms)

    # ------------------------------------------------------------------ positions
    def assign(self, queues: Iterable[MessageQueue], tag_expression: str = "*") -> None:
        """Track positions for ``queues`` (start: the committed offset, else 0)."""
        for queue in queues:
            self._positions.setdefault(queue, -1)
            self._tags[queue.topic] = tag_expression

    def position(self, queue: MessageQueue) -> int:
        return self._positions[queue]

    def seek(self, queue: MessageQueue, offset: int) -> None:
        if queue not in self._positions:
            raise InvalidArgumentError(f"{queue} is not assigned")
        if offset < 0:
            raise InvalidArgumentError(f"offset must be >= 0, got {offset}")
        self._positions[queue] = offset

    async def seek_to_beginning(self) -> None:
        for queue in self._positions:
            self._positions[queue] = (await self.bounds(queue))[0]

    async def seek_to_end(self) -> None:
        for queue in self._positions:
            self._positions[queue] = (await self.bounds(queue))[1]

    async def poll(self, *, max_messages: int = 32, max_wait_ms: int = 0) -> list[ReceivedMessage]:
        """Pull from the next assigned queue (round robin) that has messages; advance it."""
        queues = list(self._positions)
        if not queues:
            raise InvalidArgumentError("assign() queues before poll()")
        for step in range(len(queues)):
            queue = queues[(self._cursor + step) % len(queues)]
            if self._positions[queue] < 0:
                committed = await self.committed(queue)
                self._positions[queue] = committed if committed >= 0 else 0
            last = step == len(queues) - 1
            result = await self.pull(
                queue,
                self._positions[queue],
                max_messages=max_messages,
                max_wait_ms=max_wait_ms if last else 0,
                tag_expression=self._tags.get(queue.topic, "*"),
            )
            self._positions[queue] = result.next_begin_offset
            if result.messages:
                self._cursor = (self._cursor + step + 1) % len(queues)
                return result.messages
        return []

    async def commit_positions(self) -> None:
        for queue, offset in self._positions.items():
            if offset >= 0:
                await self.commit(queue, offset)
