"""Talk to a test broker with the raw generated stubs: send fixtures, read topics back
independently of the Spark source (so sink tests do not trust the code they test)."""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
from wharf.v1 import common_pb2, messaging_pb2, messaging_pb2_grpc


@contextmanager
def stub(endpoint: str) -> Iterator[messaging_pb2_grpc.MessagingServiceStub]:
    channel = grpc.insecure_channel(endpoint)
    try:
        yield messaging_pb2_grpc.MessagingServiceStub(channel)
    finally:
        channel.close()


def send(
    endpoint: str,
    topic: str,
    bodies: list[bytes],
    queue_id: int | None = None,
    tags: str = "",
    keys: list[str] | None = None,
    properties: dict[str, str] | None = None,
    compress: bool = False,
    batch: int = 128,
) -> list[messaging_pb2.SendResultEntry]:
    results: list[messaging_pb2.SendResultEntry] = []
    with stub(endpoint) as s:
        for i in range(0, len(bodies), batch):
            messages = [
                common_pb2.Message(
                    body=zlib.compress(b) if compress else b,
                    compressed=compress,
                    tags=tags,
                    keys=keys or [],
                    properties=properties or {},
                )
                for b in bodies[i : i + batch]
            ]
            request = messaging_pb2.SendMessageRequest(topic=topic, messages=messages)
            if queue_id is not None:
                request.queue_id = queue_id
            results.extend(s.SendMessage(request, timeout=10).results)
    return results


def queue_offsets(endpoint: str, topic: str) -> dict[int, tuple[int, int]]:
    with stub(endpoint) as s:
        reply = s.GetQueueOffsets(messaging_pb2.GetQueueOffsetsRequest(topic=topic), timeout=10)
    return {q.queue_id: (q.min_offset, q.max_offset) for q in reply.queues}


def read_topic(endpoint: str, topic: str) -> dict[int, list[messaging_pb2.MessageView]]:
    """Every stored message of ``topic`` per queue, in queue order."""
    out: dict[int, list[messaging_pb2.MessageView]] = {}
    with stub(endpoint) as s:
        reply = s.GetQueueOffsets(messaging_pb2.GetQueueOffsetsRequest(topic=topic), timeout=10)
        for q in reply.queues:
            offset, views = q.min_offset, []
            while offset < q.max_offset:
                pulled = s.PullMessage(
                    messaging_pb2.PullMessageRequest(
                        consumer_group="spark-test-verify",
                        topic=topic,
                        queue_id=q.queue_id,
                        queue_offset=offset,
                        max_messages=1024,
                    ),
                    timeout=10,
                )
                views.extend(pulled.messages)
                offset = pulled.next_begin_offset
            out[q.queue_id] = views
    return out


def wait_until_visible(endpoint: str, topic: str, count: int, timeout: float = 10.0) -> None:
    """Dispatch (CommitLog -> ConsumeQueue) is asynchronous: wait until ``count`` are pullable."""
    deadline = time.monotonic() + timeout
    while True:
        total = sum(hi - lo for lo, hi in queue_offsets(endpoint, topic).values())
        if total >= count:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}: {total} of {count} messages visible")
        time.sleep(0.05)


def committed_offsets(endpoint: str, group: str, topic: str) -> dict[int, int]:
    with stub(endpoint) as s:
        queues = queue_offsets(endpoint, topic)
        return {
            q: s.QueryConsumerOffset(
                messaging_pb2.QueryConsumerOffsetRequest(
                    consumer_group=group, topic=topic, queue_id=q
                ),
                timeout=10,
            ).offset
            for q in queues
        }


def open_halves(endpoint: str, topic: str) -> list[str]:
    """Message ids of the half messages (uncommitted transactional rows) open for ``topic``."""
    from wharf.v1 import admin_pb2, admin_pb2_grpc

    with grpc.insecure_channel(endpoint) as channel:
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        reply = admin.ListHalfMessages(admin_pb2.ListHalfMessagesRequest(topic=topic), timeout=10)
    return [m.msg_id for m in reply.messages]
