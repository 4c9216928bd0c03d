"""Runs the application's handler on pulled messages (RocketMQ's ConsumeMessageConcurrentlyService
and, with ``orderly=True``, ConsumeMessageOrderlyService).

Each message is one task, at most ``concurrency`` handlers run at once. Orderly: one handler
at a time per queue, in offset order; a failure is retried in place after a pause (the queue
waits, so order holds) and after ``max_reconsume_times`` the message goes to the DLQ.
Otherwise: A failure (exception or
RECONSUME_LATER) is given back to the broker with SendMessageBack (retry topic, then DLQ); if
that RPC fails the message is consumed again locally after a pause, and it stays uncommitted
meanwhile, so nothing is lost. Broadcasting has no retry topic: failures are logged, skipped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import grpc
from wharf.client.consumer.queue_worker import QueueWorker
from wharf.client.errors import from_rpc_error
from wharf.client.message import ConsumeResult, ReceivedMessage
from wharf.v1 import messaging_pb2, messaging_pb2_grpc

log = logging.getLogger(__name__)

Handler = Callable[[ReceivedMessage], Awaitable[ConsumeResult | None]]

LOCAL_RETRY_PAUSE_S = 1.0  # after a failed SendMessageBack (RocketMQ waits 5 s)
ORDERLY_RETRY_PAUSE_S = 1.0  # RocketMQ's suspendCurrentQueueTimeMillis
DEFAULT_MAX_RECONSUME_TIMES = 16
SEND_TO_DLQ = -1  # SendMessageBack delay_level: straight to %DLQ%<group>


class ConcurrentConsumeService:
    def __init__(
        self,
        *,
        handler: Handler,
        stub: messaging_pb2_grpc.MessagingServiceStub,
        group: str,
        broadcasting: bool,
        concurrency: int,
        max_reconsume_times: int | None,
        on_sent_back: Callable[[messaging_pb2.SendMessageBackResponse], None],
        orderly: bool = False,
        orderly_retry_pause_s: float = ORDERLY_RETRY_PAUSE_S,
    ) -> None:
        self._handler = handler
        self._stub = stub
        self._group = group
        self._broadcasting = broadcasting
        self._slots = asyncio.Semaphore(concurrency)
        self._max_reconsume_times = max_reconsume_times or 0
        self._on_sent_back = on_sent_back
        self._orderly = orderly
        self._orderly_retry_pause_s = orderly_retry_pause_s
        self._tasks: set[asyncio.Task[None]] = set()
        self.running = True

    def dispatch(self, worker: QueueWorker, messages: list[ReceivedMessage]) -> None:
        loop = asyncio.get_running_loop()
        for message in messages:
            task = loop.create_task(self._consume(worker, message))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def shutdown(self, grace_s: float) -> None:
        """Let running handlers finish for ``grace_s``; cancel the rest (left uncommitted)."""
        self.running = False
        if self._tasks:
            _, slow = await asyncio.wait(set(self._tasks), timeout=grace_s)
            for task in slow:
                task.cancel()

    async def _consume(self, worker: QueueWorker, message: ReceivedMessage) -> None:
        if self._orderly:
            # asyncio.Lock wakes waiters FIFO and tasks start in creation (= offset) order.
            async with worker.order_lock:
                await self._consume_in_order(worker, message)
            return
        pq = worker.process_queue
        assert pq is not None
        while True:
            if await self._run_handler(worker, message):
                break
            if self._broadcasting:
                log.warning("broadcast message %s not consumed; skipped", message.msg_id)
                break
            if await self._send_back(message):
                break
            await asyncio.sleep(LOCAL_RETRY_PAUSE_S)
            if not self.running:
                return  # not committed: redelivered after a restart
        pq.done(message.queue_offset, worker.max_in_flight)

    async def _consume_in_order(self, worker: QueueWorker, message: ReceivedMessage) -> None:
        pq = worker.process_queue
        assert pq is not None
        limit = self._max_reconsume_times or DEFAULT_MAX_RECONSUME_TIMES
        failures = 0
        while self.running:
            if await self._run_handler(worker, message):
                break
            if self._broadcasting:
                log.warning("broadcast message %s not consumed; skipped", message.msg_id)
                break
            failures += 1
            if failures > limit and await self._send_back(message, delay_level=SEND_TO_DLQ):
                break
            await asyncio.sleep(self._orderly_retry_pause_s)
        else:
            return  # shutting down: not committed, redelivered later
        pq.done(message.queue_offset, worker.max_in_flight)

    async def _run_handler(self, worker: QueueWorker, message: ReceivedMessage) -> bool:
        async with self._slots:
            try:
                result = await self._handler(message)
            except Exception:
                log.exception("handler failed on %s (%s)", message.msg_id, worker.queue)
                return False
        return result is None or result == ConsumeResult.SUCCESS

    async def _send_back(self, message: ReceivedMessage, delay_level: int = 0) -> bool:
        request = messaging_pb2.SendMessageBackRequest(
            consumer_group=self._group,
            commit_log_offset=message.commit_log_offset,
            origin_msg_id=message.msg_id,
            origin_topic=message.topic,
            max_reconsume_times=self._max_reconsume_times,
            delay_level=delay_level,
        )
        try:
            reply = await self._stub.SendMessageBack(request, timeout=5.0)
        except grpc.RpcError as exc:
            log.warning("SendMessageBack of %s failed: %s", message.msg_id, from_rpc_error(exc))
            return False
        self._on_sent_back(reply)
        return True
