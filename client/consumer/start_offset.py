"""Where a queue starts for a group: the committed offset, else consume_from_where."""

from __future__ import annotations

import grpc
from wharf.client.consumer.offset_store import LocalOffsetStore, RemoteOffsetStore
from wharf.client.errors import from_rpc_error
from wharf.client.message import MessageQueue
from wharf.v1 import common_pb2, messaging_pb2, messaging_pb2_grpc


async def queue_bounds(
    stub: messaging_pb2_grpc.MessagingServiceStub, queue: MessageQueue
) -> tuple[int, int]:
    """(min, max) offsets of one queue; (0, 0) for a queue the broker does not list."""
    try:
        reply = await stub.GetQueueOffsets(
            messaging_pb2.GetQueueOffsetsRequest(topic=queue.topic), timeout=5.0
        )
    except grpc.RpcError as exc:
        raise from_rpc_error(exc) from None
    for entry in reply.queues:
        if entry.queue_id == queue.queue_id:
            return entry.min_offset, entry.max_offset
    return 0, 0


async def search_offset(
    stub: messaging_pb2_grpc.MessagingServiceStub, queue: MessageQueue, timestamp_ms: int
) -> int:
    try:
        reply = await stub.SearchOffset(
            messaging_pb2.SearchOffsetRequest(
                topic=queue.topic, queue_id=queue.queue_id, timestamp=timestamp_ms
            ),
            timeout=5.0,
        )
    except grpc.RpcError as exc:
        raise from_rpc_error(exc) from None
    return reply.offset


async def compute_start_offset(
    stub: messaging_pb2_grpc.MessagingServiceStub,
    offsets: RemoteOffsetStore | LocalOffsetStore,
    queue: MessageQueue,
    consume_from_where: int,
    consume_timestamp_ms: int,
    *,
    is_retry_topic: bool = False,
) -> int:
    """RocketMQ's computePullFromWhere. A retry topic always starts at its beginning: the
    messages in it were put there for this group."""
    committed = await offsets.read(queue)
    if committed >= 0:
        return committed
    low, high = await queue_bounds(stub, queue)
    if is_retry_topic or consume_from_where == common_pb2.CONSUME_FROM_FIRST_OFFSET:
        return low
    if consume_from_where == common_pb2.CONSUME_FROM_TIMESTAMP:
        return await search_offset(stub, queue, consume_timestamp_ms)
    return high
