"""The pull loop of one assigned queue: long-poll, hand messages to the consumer, flow control.

Over a pull stream the reply is handled (decoded, added to the process queue, dispatched) by
the stream's read loop as it arrives, one loop turn before this loop resumes to pull again: a
lone message's handler task starts that turn sooner. A pull answered after ``stop()`` is not
handled (the process queue is dropped first). Unary replies are handled here, as before."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import grpc
from wharf.client.consumer.process_queue import ProcessQueue
from wharf.client.consumer.pull_stream import Puller
from wharf.client.consumer.pull_wire import PullReply
from wharf.client.errors import WharfError, from_rpc_error
from wharf.client.message import MessageQueue, ReceivedMessage
from wharf.client.records import messages_from_reply
from wharf.v1 import messaging_pb2, messaging_pb2_grpc

log = logging.getLogger(__name__)

Dispatch = Callable[["QueueWorker", list[ReceivedMessage]], None]


class QueueWorker:
    def __init__(
        self,
        *,
        stub: messaging_pb2_grpc.MessagingServiceStub,
        pull: Puller | grpc.aio.UnaryUnaryMultiCallable | None = None,
        group: str,
        queue: MessageQueue,
        tag_expression: str,
        sql_expression: str = "",
        start_offset: Callable[[], Awaitable[int]],
        pending_commit: Callable[[], int | None],
        on_committed: Callable[[int], None],
        dispatch: Dispatch,
        pull_batch_size: int,
        max_in_flight: int,
        pull_batch_bytes: int = 0,
        long_poll_ms: int,
        error_backoff_s: float = 1.0,
        start_delay_s: float = 0.0,
    ) -> None:
        self.queue = queue
        self.process_queue: ProcessQueue | None = None
        # ``pull``: a Puller (pull_stream: the stream, else unary PullMessage) or PullMessage
        # with the zero-copy reply decoder (pull_wire.pull_callable).
        self._pull = pull if pull is not None else stub.PullMessage
        self._group = group
        self._tag_expression = tag_expression
        self._sql_expression = sql_expression  # filtered by the broker
        self._start_offset = start_offset
        self._pending_commit = pending_commit
        self._on_committed = on_committed
        self._dispatch = dispatch
        self._batch = pull_batch_size
        self._batch_bytes = pull_batch_bytes
        self.max_in_flight = max_in_flight
        self._long_poll_ms = long_poll_ms
        self._error_backoff_s = error_backoff_s
        self.start_delay_s = start_delay_s
        self._task: asyncio.Task[None] | None = None
        self.started = asyncio.Event()
        self.order_lock = asyncio.Lock()  # orderly consumption: one handler at a time

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"pull {self.queue}")

    async def stop(self) -> None:
        """Stop pulling (an in-flight long poll is cancelled); handlers keep running."""
        if self.process_queue is not None:
            self.process_queue.dropped = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        if self.start_delay_s > 0:
            # Handover: the previous owner drops and commits this queue when its next
            # heartbeat reports the membership change; reading the offset after that
            # avoids re-consuming everything it processed since its last commit.
            await asyncio.sleep(self.start_delay_s)
        while True:
            try:
                offset = await self._start_offset()
                break
            except WharfError as exc:
                log.warning("cannot read start offset of %s: %s", self.queue, exc)
                await asyncio.sleep(self._error_backoff_s)
        pq = ProcessQueue(offset)
        self.process_queue = pq
        self.started.set()
        while True:
            await pq.wait_for_space(self.max_in_flight)
            room = self.max_in_flight - len(pq)
            request = messaging_pb2.PullMessageRequest(
                consumer_group=self._group,
                topic=self.queue.topic,
                queue_id=self.queue.queue_id,
                queue_offset=pq.next_offset,
                max_messages=max(1, min(self._batch, room)),
                max_wait_ms=self._long_poll_ms,
                tag_expression=self._tag_expression,
                sql_expression=self._sql_expression,
                raw_records=True,  # stored record bytes, decoded lazily (client.records)
                max_bytes=self._batch_bytes,
            )
            commit = self._pending_commit()
            if commit is not None:
                request.commit_offset = commit
            timeout = self._long_poll_ms / 1000.0 + 10.0
            handled: list[object] = []

            def on_reply(
                reply: PullReply, pq: ProcessQueue = pq, handled: list[object] = handled
            ) -> None:
                if not pq.dropped:
                    self._handle(pq, reply)
                handled.append(reply)

            try:
                if isinstance(self._pull, Puller):
                    reply = await self._pull(request, timeout=timeout, on_reply=on_reply)
                else:
                    reply = await self._pull(request, timeout=timeout)
            except (grpc.RpcError, WharfError) as exc:
                error = from_rpc_error(exc) if isinstance(exc, grpc.RpcError) else exc
                log.warning("pull %s failed: %s", self.queue, error)
                await asyncio.sleep(self._error_backoff_s)
                continue
            if commit is not None:
                self._on_committed(commit)
            if not handled:
                self._handle(pq, reply)

    def _handle(
        self, pq: ProcessQueue, reply: messaging_pb2.PullMessageResponse | PullReply
    ) -> None:
        if reply.status == messaging_pb2.FOUND:
            messages = messages_from_reply(reply, self._tag_expression)
            pq.add(messages, reply.next_begin_offset)
            if messages:
                self._dispatch(self, messages)
        elif reply.status == messaging_pb2.OFFSET_ILLEGAL:
            log.warning(
                "offset %d of %s is illegal; moving to %d",
                pq.next_offset,
                self.queue,
                reply.next_begin_offset,
            )
            pq.next_offset = reply.next_begin_offset
        else:  # NO_NEW_MSG / NO_MATCHED_MSG: move past filtered-out messages
            pq.next_offset = reply.next_begin_offset
