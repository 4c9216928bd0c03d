"""Push consumer: the SDK pulls, your async handler consumes.

    async def handle(msg: ReceivedMessage) -> ConsumeResult:
        print(msg.topic, msg.tags, msg.body)
        return ConsumeResult.SUCCESS          # raise or return RECONSUME_LATER to retry

    consumer = PushConsumer("127.0.0.1:8081", "billing", handler=handle)
    consumer.subscribe("orders", "paid || refunded")
    async with consumer:
        await asyncio.sleep(60)

Delivery is AT-LEAST-ONCE: offsets are committed after handlers finish (periodically, piggy-
backed on pulls, on rebalance and on close), so a crash or a rebalance can deliver a message
again. Make handlers idempotent (``msg.msg_id`` is stable across redeliveries).

CLUSTERING (default): the group's members split the queues (AllocateMessageQueueAveragely over
GetConsumerList, re-run when the broker reports a membership change and every
``rebalance_interval_s``); failed messages go back through SendMessageBack to
``%RETRY%<group>`` (subscribed automatically) and to ``%DLQ%<group>`` after max reconsume
times. BROADCASTING: every member gets every message; offsets are kept locally
(``offset_store_path`` or memory); a failed message is logged and skipped, as in RocketMQ.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Unpack

import grpc
from wharf.client.cluster import ClusterConsumers
from wharf.client.connection import Connection, ConnectionOptions, connection_of
from wharf.client.consumer.consume_service import ConcurrentConsumeService, Handler
from wharf.client.consumer.membership import GroupMembership
from wharf.client.consumer.offset_store import LocalOffsetStore, RemoteOffsetStore
from wharf.client.consumer.pull_stream import Puller
from wharf.client.consumer.queue_worker import QueueWorker
from wharf.client.consumer.start_offset import compute_start_offset
from wharf.client.errors import InvalidArgumentError, WharfError
from wharf.client.message import MessageQueue, retry_topic
from wharf.client.rebalance import allocate_averagely
from wharf.client.route import RouteCache
from wharf.v1 import common_pb2, messaging_pb2, messaging_pb2_grpc

log = logging.getLogger(__name__)

CLUSTERING = common_pb2.CLUSTERING
BROADCASTING = common_pb2.BROADCASTING
CONSUME_FROM_LAST_OFFSET = common_pb2.CONSUME_FROM_LAST_OFFSET
CONSUME_FROM_FIRST_OFFSET = common_pb2.CONSUME_FROM_FIRST_OFFSET
CONSUME_FROM_TIMESTAMP = common_pb2.CONSUME_FROM_TIMESTAMP


def _new_client_id() -> str:
    return f"{os.uname().nodename}@{os.getpid()}@{uuid.uuid4().hex[:8]}"


def _checked_modes(
    message_model: str, consume_from_where: str, group: str
) -> tuple[common_pb2.MessageModel, common_pb2.ConsumeFromWhere]:
    """The message model's and the start position's constants (InvalidArgumentError for an
    unknown one, or no group)."""
    models = {"CLUSTERING": CLUSTERING, "BROADCASTING": BROADCASTING}
    wheres = {
        "LAST": CONSUME_FROM_LAST_OFFSET,
        "FIRST": CONSUME_FROM_FIRST_OFFSET,
        "TIMESTAMP": CONSUME_FROM_TIMESTAMP,
    }
    if message_model not in models:
        raise InvalidArgumentError(f"message_model must be one of {sorted(models)}")
    if consume_from_where not in wheres:
        raise InvalidArgumentError(f"consume_from_where must be one of {sorted(wheres)}")
    if not group:
        raise InvalidArgumentError("a consumer group name is required")
    return models[message_model], wheres[consume_from_where]


class PushConsumer:
    """Consume a group's share of one or more topics with an async handler.

    Args:
        endpoints: broker ``host:port`` (or give ``connection``).
        group: consumer group.
        handler: ``async (ReceivedMessage) -> ConsumeResult`` (``None`` counts as SUCCESS).
        message_model: ``"CLUSTERING"`` or ``"BROADCASTING"``.
        consume_from_where: ``"LAST"``, ``"FIRST"`` or ``"TIMESTAMP"`` (new groups only).
        consume_timestamp_ms: start time for ``"TIMESTAMP"``.
        consume_concurrency: handlers running at once (RocketMQ's consumeThreadMax).
        max_in_flight_per_queue: flow control per queue (RocketMQ's pullThresholdForQueue).
        pull_batch_size: messages per pull (32).
        pull_batch_bytes: record bytes per pull (256 KiB, RocketMQ's pullBatchSizeInBytes; the
            first message always comes; 0 = the broker's maxPullBytes).
        stream_pulls: pulls of every queue share one PullMessageStream call (unary
            PullMessage against a broker without it, ``consumer.pull_stream``).
        long_poll_ms: how long a pull waits on the broker for new messages.
        rebalance_interval_s / heartbeat_interval_s / commit_interval_s: 20 / 3 / 5 s.
        handover_delay_s: how long a queue taken over from another member waits before
            its first pull, so the previous owner can commit (default 1.5 heartbeats).
        max_reconsume_times: retries before the DLQ (``None`` = the group's setting, 16).
        offset_store_path: broadcasting only: JSON file for local offsets (``None`` = memory).
        shutdown_grace_s: how long close() waits for running handlers.
        orderly: one handler at a time per queue, in offset order (RocketMQ's
            MessageListenerOrderly); a failure is retried in place every
            ``orderly_retry_pause_s`` and goes to the DLQ after max reconsume times.
        connection: where and how to dial (``wharf.client.connection.Connection``); the
            keyword arguments ``endpoints``, ``namesrv``, ``access_key`` / ``secret_key``,
            ``tls`` / ``ca_file`` / ``cert_file`` / ``key_file``, ``namesrv_tls`` still build
            one, as the Producer's.
    """

    def __init__(
        self,
        endpoints: str | Connection | None = None,
        group: str = "DEFAULT_CONSUMER",
        *,
        connection: Connection | None = None,
        handler: Handler | None = None,
        message_model: str = "CLUSTERING",
        consume_from_where: str = "LAST",
        consume_timestamp_ms: int = 0,
        consume_concurrency: int = 20,
        max_in_flight_per_queue: int = 1000,
        pull_batch_size: int = 32,
        pull_batch_bytes: int = 256 * 1024,
        stream_pulls: bool = True,
        long_poll_ms: int = 15_000,
        rebalance_interval_s: float = 20.0,
        heartbeat_interval_s: float = 3.0,
        handover_delay_s: float | None = None,
        commit_interval_s: float = 5.0,
        max_reconsume_times: int | None = None,
        offset_store_path: str | Path | None = None,
        shutdown_grace_s: float = 10.0,
        client_id: str | None = None,
        orderly: bool = False,
        orderly_retry_pause_s: float = 1.0,
        **connect: Unpack[ConnectionOptions],
    ) -> None:
        self.connection = connection_of(endpoints, connection, connect)
        self._cluster: ClusterConsumers[PushConsumer] | None = None
        if self.connection.namesrv:
            options = dict(
                handler=handler, consume_from_where=consume_from_where,
                consume_timestamp_ms=consume_timestamp_ms,
                consume_concurrency=consume_concurrency,
                max_in_flight_per_queue=max_in_flight_per_queue, pull_batch_size=pull_batch_size,
                pull_batch_bytes=pull_batch_bytes, stream_pulls=stream_pulls,
                long_poll_ms=long_poll_ms, rebalance_interval_s=rebalance_interval_s,
                heartbeat_interval_s=heartbeat_interval_s, handover_delay_s=handover_delay_s,
                commit_interval_s=commit_interval_s, max_reconsume_times=max_reconsume_times,
                shutdown_grace_s=shutdown_grace_s, client_id=client_id, orderly=orderly,
                orderly_retry_pause_s=orderly_retry_pause_s,
            )  # fmt: skip
            self._cluster = self._cluster_consumers(message_model, options)
        model, where = _checked_modes(message_model, consume_from_where, group)
        self.endpoints = self.connection.endpoints
        self.tls = self.connection.tls
        self.group = group
        self.client_id = client_id or _new_client_id()
        self.handler = handler
        self.message_model = model
        self.consume_from_where = where
        self.consume_timestamp_ms = consume_timestamp_ms
        self.max_in_flight_per_queue = max_in_flight_per_queue
        self.pull_batch_size = pull_batch_size
        self.pull_batch_bytes = pull_batch_bytes
        self.stream_pulls = stream_pulls
        self.long_poll_ms = long_poll_ms
        self.rebalance_interval_s = rebalance_interval_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self.handover_delay_s = (
            1.5 * heartbeat_interval_s if handover_delay_s is None else handover_delay_s
        )
        self.commit_interval_s = commit_interval_s
        self.max_reconsume_times = max_reconsume_times
        self.shutdown_grace_s = shutdown_grace_s
        self._offset_store_path = Path(offset_store_path) if offset_store_path else None
        self.consume_concurrency = consume_concurrency
        self.orderly = orderly
        self.orderly_retry_pause_s = orderly_retry_pause_s
        self._empty_state()

    def _cluster_consumers(
        self, message_model: str, options: dict[str, Any]
    ) -> ClusterConsumers[PushConsumer]:
        """namesrv=: a consumer of each broker of the topics' routes, built with ``options``."""
        if message_model != "CLUSTERING":
            raise InvalidArgumentError("namesrv= consumes in CLUSTERING mode only, for now")
        return ClusterConsumers(
            self.connection,
            lambda: list(self._subscriptions),
            lambda address: self._broker_consumer(address, options),
        )

    def _empty_state(self) -> None:
        """What the consumer builds and runs, none of it yet (``start`` does)."""
        self._consume: ConcurrentConsumeService | None = None
        self._subscriptions: dict[str, str] = {}
        self._sql: dict[str, str] = {}  # topic -> SQL92 expression (instead of its tags)
        self._workers: dict[MessageQueue, QueueWorker] = {}
        self._background: list[asyncio.Task[None]] = []
        self._rebalance_now = asyncio.Event()
        self._membership: GroupMembership | None = None
        self._channel: grpc.aio.Channel | None = None
        self._stub: messaging_pb2_grpc.MessagingServiceStub | None = None
        self._pull: Puller | None = None
        self._offsets: RemoteOffsetStore | LocalOffsetStore | None = None
        self._routes: RouteCache | None = None
        self._running = False
        self.rebalance_count = 0

    # ------------------------------------------------------------------ lifecycle
    def subscribe(self, topic: str, tag_expression: str = "*", *, sql: str | None = None) -> None:
        """Subscribe before start(); ``tag_expression`` is ``*`` or ``"tagA || tagB"``, or
        ``sql`` a SQL92 property expression the broker evaluates (RocketMQ's
        ``MessageSelector.bySql``: ``"amount > 100 AND region IN ('eu', 'us')"``; the tag is
        the property ``TAGS``)."""
        if not topic:
            raise InvalidArgumentError("topic must not be empty")
        if sql is not None and tag_expression.strip() not in ("", "*"):
            raise InvalidArgumentError("subscribe by tags or by sql, not both")
        self._subscriptions[topic] = tag_expression or "*"
        if sql is not None:
            self._sql[topic] = sql
        else:
            self._sql.pop(topic, None)

    def _broker_consumer(self, address: str, options: dict[str, Any]) -> PushConsumer:
        """The single-broker consumer of one group master (``namesrv=``)."""
        consumer = PushConsumer(connection=self.connection.to(address), group=self.group, **options)
        for topic, expression in self._subscriptions.items():
            consumer.subscribe(topic, expression, sql=self._sql.get(topic))
        return consumer

    @property
    def assigned_queues(self) -> list[MessageQueue]:
        if self._cluster is not None:  # (broker, queue) pairs of every group
            return sorted(
                MessageQueue(q.topic, q.queue_id, address)
                for address, c in self._cluster.consumers.items()
                for q in c.assigned_queues
            )
        return sorted(self._workers)

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        if self.handler is None:
            raise InvalidArgumentError("PushConsumer needs a handler")
        if not self._subscriptions:
            raise InvalidArgumentError("subscribe to at least one topic before start()")
        if self._cluster is not None:
            await self._cluster.start()
            self._running = True
            return
        if self.message_model == CLUSTERING:
            self._subscriptions.setdefault(retry_topic(self.group), "*")
        self._channel = self.connection.open_channel()
        self._stub = messaging_pb2_grpc.MessagingServiceStub(self._channel)
        self._pull = Puller(self._channel, stream=self.stream_pulls)
        self._routes = RouteCache(self._stub, ttl_s=0.0)
        self._membership = GroupMembership(
            self._stub,
            self.client_id,
            messaging_pb2.ConsumerData(
                group=self.group,
                subscriptions=[
                    messaging_pb2.Subscription(
                        topic=t, tag_expression=e, sql_expression=self._sql.get(t, "")
                    )
                    for t, e in self._subscriptions.items()
                ],
                message_model=self.message_model,
                consume_from_where=self.consume_from_where,
                consume_timestamp=self.consume_timestamp_ms,
            ),
        )
        self._consume = ConcurrentConsumeService(
            handler=self.handler,
            stub=self._stub,
            group=self.group,
            broadcasting=self.message_model == BROADCASTING,
            concurrency=self.consume_concurrency,
            max_reconsume_times=self.max_reconsume_times,
            on_sent_back=self._after_send_back,
            orderly=self.orderly,
            orderly_retry_pause_s=self.orderly_retry_pause_s,
        )
        if self.message_model == CLUSTERING:
            self._offsets = RemoteOffsetStore(self._stub, self.group)
        else:
            self._offsets = LocalOffsetStore(self._offset_store_path)
        self._running = True
        await self._heartbeat()
        await self._rebalance()
        await self._wait_initial_positions()
        loop = asyncio.get_running_loop()
        self._background = [
            loop.create_task(self._every(self.heartbeat_interval_s, self._heartbeat)),
            loop.create_task(self._rebalance_loop()),
            loop.create_task(self._every(self.commit_interval_s, self.commit)),
        ]

    async def _wait_initial_positions(self, timeout_s: float = 5.0) -> None:
        """Return from start() only once the queues we own outright know where they start:
        with CONSUME_FROM_LAST_OFFSET a message sent right after start() would otherwise race
        the lazy start-offset lookup and be skipped. Queues in a handover delay are not waited
        for (their previous owner is still committing)."""
        waits = [
            asyncio.ensure_future(w.started.wait())
            for w in self._workers.values()
            if not w.start_delay_s
        ]
        if waits:
            _, pending = await asyncio.wait(waits, timeout=timeout_s)
            for task in pending:  # a worker still retrying its lookup: it goes on by itself
                task.cancel()

    async def close(self) -> None:
        """Stop pulling, let running handlers finish (``shutdown_grace_s``), commit, leave."""
        if not self._running:
            return
        self._running = False
        if self._cluster is not None:
            await self._cluster.close()
            return
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await asyncio.gather(*(w.stop() for w in self._workers.values()))
        assert self._consume is not None
        await self._consume.shutdown(self.shutdown_grace_s)
        self._record_progress(list(self._workers))
        await self.commit()
        assert self._stub is not None and self._channel is not None
        if self.message_model == CLUSTERING and self._membership is not None:
            await self._membership.leave()
        self._workers.clear()
        if self._pull is not None:
            self._pull.close()
        await self._channel.close(None)

    async def commit(self) -> None:
        """Commit the progress of every assigned queue now."""
        if self._cluster is not None:
            await self._cluster.each(lambda c: c.commit())
            return
        if self._offsets is None:
            return
        self._record_progress(list(self._workers))
        await self._offsets.persist()

    # ------------------------------------------------------------------ membership
    async def _every(self, interval: float, action: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await action()
            except WharfError as exc:
                log.warning("%s failed: %s", getattr(action, "__name__", action), exc)

    async def _heartbeat(self) -> None:
        assert self._membership is not None
        if await self._membership.heartbeat():
            self._rebalance_now.set()

    async def _rebalance_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.rebalance_interval_s):
                    await self._rebalance_now.wait()
            self._rebalance_now.clear()
            try:
                await self._rebalance()
            except WharfError as exc:
                log.warning("rebalance of %s failed: %s", self.group, exc)

    async def _rebalance(self) -> None:
        assert self._stub is not None and self._routes is not None
        wanted: dict[MessageQueue, str] = {}
        members: list[str] = []
        if self.message_model == CLUSTERING:
            members = await self._members()
            if self.client_id not in members:
                # The broker forgot us (it restarted, or expired our heartbeats): register
                # again rather than dropping every queue until the next heartbeat.
                await self._heartbeat()
                members = await self._members()
        for topic, expression in self._subscriptions.items():
            route = await self._routes.get(topic, refresh=True)
            queues = route.read_queues()
            if self.message_model == CLUSTERING:
                queues = allocate_averagely(self.client_id, members, queues)
            for queue in queues:
                wanted[queue] = expression
        removed = [q for q in self._workers if q not in wanted]
        added = [q for q in wanted if q not in self._workers]
        if not removed and not added:
            return
        self.rebalance_count += 1
        log.info("%s rebalance: +%s -%s", self.client_id, added, removed)
        await self._drop_queues(removed)
        # With other members around, a queue we gain may still be owned by one of them
        # until its next heartbeat: start it after the handover delay.
        delay = self.handover_delay_s if len(members) > 1 else 0.0
        for queue in added:
            self._start_worker(queue, wanted[queue], delay)

    async def _members(self) -> list[str]:
        assert self._membership is not None
        return await self._membership.members()

    async def _drop_queues(self, queues: list[MessageQueue]) -> None:
        if not queues:
            return
        workers = [self._workers[q] for q in queues]
        await asyncio.gather(*(w.stop() for w in workers))
        # Give running handlers a moment so their progress is committed before another
        # member starts from it (fewer duplicates; correctness does not depend on it).
        waits = [w.process_queue.wait_empty() for w in workers if w.process_queue is not None]
        if waits:
            await asyncio.wait([asyncio.ensure_future(w) for w in waits], timeout=2.0)
        self._record_progress(queues)
        assert self._offsets is not None
        await self._offsets.persist(queues)
        for queue in queues:
            del self._workers[queue]
            self._offsets.forget(queue)

    def _start_worker(self, queue: MessageQueue, expression: str, delay_s: float) -> None:
        assert self._stub is not None and self._offsets is not None and self._consume is not None
        offsets = self._offsets

        async def start_offset() -> int:
            assert self._stub is not None
            offset = await compute_start_offset(
                self._stub,
                offsets,
                queue,
                self.consume_from_where,
                self.consume_timestamp_ms,
                is_retry_topic=queue.topic == retry_topic(self.group),
            )
            offsets.update(queue, offset)
            return offset

        worker = QueueWorker(
            stub=self._stub,
            pull=self._pull,
            group=self.group,
            queue=queue,
            tag_expression=expression,
            sql_expression=self._sql.get(queue.topic, ""),
            start_offset=start_offset,
            pending_commit=lambda: self._pending_commit(queue),
            on_committed=lambda offset: offsets.mark_committed(queue, offset),
            dispatch=self._consume.dispatch,
            pull_batch_size=self.pull_batch_size,
            pull_batch_bytes=self.pull_batch_bytes,
            max_in_flight=self.max_in_flight_per_queue,
            long_poll_ms=self.long_poll_ms,
            start_delay_s=delay_s,
        )
        self._workers[queue] = worker
        worker.start()

    def _pending_commit(self, queue: MessageQueue) -> int | None:
        if self.message_model != CLUSTERING:
            return None
        self._record_progress([queue])
        assert isinstance(self._offsets, RemoteOffsetStore)
        return self._offsets.pending(queue)

    def _record_progress(self, queues: list[MessageQueue]) -> None:
        assert self._offsets is not None
        for queue in queues:
            worker = self._workers.get(queue)
            if worker is not None and worker.process_queue is not None:
                self._offsets.update(queue, worker.process_queue.committable_offset())

    def _after_send_back(self, reply: messaging_pb2.SendMessageBackResponse) -> None:
        if not reply.sent_to_dlq and MessageQueue(retry_topic(self.group), 0) not in self._workers:
            self._rebalance_now.set()  # the retry topic may just have been created
