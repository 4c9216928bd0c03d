"""Producer, pull consumer, admin and errors against the real daemon."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import pytest
from wharf.client import (
    Admin,
    AlreadyExistsError,
    DeadlineExceededError,
    InvalidArgumentError,
    Message,
    NotFoundError,
    Producer,
    PullConsumer,
    SelectMessageQueueByHash,
    SendStatus,
    UnavailableError,
)
from wharf.client.consumer.pull import PullStatus
from wharf.client.message import MessageQueue, ReceivedMessage

from tests.harness import BrokerProcess


async def pull_all(endpoint: str, topic: str, group: str = "reader") -> list[ReceivedMessage]:
    out: list[ReceivedMessage] = []
    async with PullConsumer(endpoint, group) as consumer:
        for queue in await consumer.queues(topic):
            offset = 0
            while True:
                result = await consumer.pull(queue, offset, max_messages=256)
                out.extend(result.messages)
                if result.status != PullStatus.FOUND:
                    break
                offset = result.next_begin_offset
    return out


async def test_round_trip_keeps_tags_keys_properties_and_compressed_body(
    broker: BrokerProcess, name: str
) -> None:
    big = ("wharf " * 2000).encode()  # 12 KB: compressed on the wire and on disk
    async with Producer(broker.endpoint) as producer:
        small = await producer.send(
            name, b"hello", tags="paid", keys=("order-1", "cust-9"), properties={"region": "eu"}
        )
        large = await producer.send(name, big, tags="bulk")
    assert small.status == SendStatus.SEND_OK and len(small.msg_id) == 32
    received = {m.msg_id: m for m in await pull_all(broker.endpoint, name)}
    got = received[small.msg_id]
    assert (got.body, got.tags, got.keys) == (b"hello", "paid", ("order-1", "cust-9"))
    assert got.properties.get("region") == "eu"
    assert (got.queue_id, got.queue_offset) == (small.queue_id, small.queue_offset)
    assert received[large.msg_id].body == big
    async with Admin(broker.endpoint) as admin:
        raw = (await admin.view_message(large.offset_msg_id)).message
    assert raw.compressed and len(raw.body) < len(big) // 5


async def test_concurrent_sends_are_batched_and_each_gets_its_own_result(
    broker: BrokerProcess, name: str
) -> None:
    async with Producer(broker.endpoint) as producer:
        results = await asyncio.gather(*(producer.send(name, f"m{i}") for i in range(2000)))
    assert len({r.msg_id for r in results}) == 2000
    positions = {(r.queue_id, r.queue_offset) for r in results}
    assert len(positions) == 2000  # no two results claim the same slot
    bodies = {m.msg_id: m.body for m in await pull_all(broker.endpoint, name)}
    assert all(bodies[r.msg_id] == f"m{i}".encode() for i, r in enumerate(results))


async def test_send_batch_lands_contiguously_in_one_queue(broker: BrokerProcess, name: str) -> None:
    async with Producer(broker.endpoint) as producer:
        results = await producer.send_batch(
            name, [b"a", Message(name, b"b", tags="t", keys=("k",)), "c"], queue_id=2
        )
    assert [r.queue_id for r in results] == [2, 2, 2]
    offsets = [r.queue_offset for r in results]
    assert offsets == list(range(offsets[0], offsets[0] + 3))


@pytest.mark.parametrize("form", ["columns", "parts"])
async def test_send_batches_to_many_topics_share_requests_and_keep_their_results(
    broker: BrokerProcess, name: str, form: str
) -> None:
    """Concurrent batches to 24 topics travel in few requests (issue 33), in columns or, to a
    broker without them, as parts: each still lands contiguously in one queue of its own
    topic and gets its own results; a refused batch (a read-only topic) fails alone."""
    topics = [f"{name}-{i}" for i in range(24)]
    requests: list[int] = []
    async with Admin(broker.endpoint) as admin, Producer(broker.endpoint) as producer:
        await admin.create_topic(topics[-1], queue_nums=4, perm=4)  # read-only
        producer._many = form
        stream = producer._stream(0)
        method = "request_columns" if form == "columns" else "request_parts"
        send = getattr(stream, method)

        async def counted(*args: Any):  # type: ignore[no-untyped-def]
            requests.append(len(args[-1]))
            return await send(*args)

        setattr(stream, method, counted)
        outcomes = await asyncio.gather(
            *(producer.send_batch(t, [f"{t}:{j}" for j in range(5)]) for t in topics),
            return_exceptions=True,
        )
    assert max(requests) > 1  # batches of several topics shared a request
    *stored, refused = outcomes
    assert isinstance(refused, Exception) and "perm" in str(refused)
    for topic, results in zip(topics, stored, strict=False):
        assert isinstance(results, list) and {r.topic for r in results} == {topic}
        assert len({r.queue_id for r in results}) == 1
        offsets = [r.queue_offset for r in results]
        assert offsets == list(range(offsets[0], offsets[0] + 5))
    for topic, results in list(zip(topics, stored, strict=False))[:3]:
        bodies = {m.msg_id: m.body for m in await pull_all(broker.endpoint, topic)}
        assert [bodies[r.msg_id] for r in results] == [f"{topic}:{j}".encode() for j in range(5)]


async def test_a_broker_that_refuses_columns_gets_the_batches_as_parts(
    broker: BrokerProcess, name: str
) -> None:
    """A broker before columns reads a columns request as one of no topic and refuses it
    (INVALID_ARGUMENT, nothing stored): the producer sends those batches as parts, and parts
    from then on; every batch is stored once."""
    topics = [f"{name}-{i}" for i in range(6)]
    refused: list[int] = []
    async with Producer(broker.endpoint) as producer:
        stream = producer._stream(0)

        async def old_broker(group: bytes, topics: list[bytes], batches: list[Any]) -> Any:
            refused.append(len(batches))
            raise InvalidArgumentError("topic name must not be empty")

        stream.request_columns = old_broker  # type: ignore[method-assign]
        outcomes = await asyncio.gather(
            *(producer.send_batch(t, [f"{t}:{j}" for j in range(3)]) for t in topics)
        )
        assert refused and producer._many == "parts"
    for topic, results in zip(topics, outcomes, strict=True):
        assert [m.body for m in await pull_all(broker.endpoint, topic)] == [
            f"{topic}:{j}".encode() for j in range(3)
        ]
        assert len(results) == 3


async def test_selector_keeps_a_sharding_key_in_one_queue_in_order(
    broker: BrokerProcess, name: str
) -> None:
    selector = SelectMessageQueueByHash()
    async with Producer(broker.endpoint) as producer:
        for i in range(20):
            await producer.send(
                name, f"{i % 2}:{i}", selector=selector, selector_arg=f"order-{i % 2}"
            )
    by_queue: dict[int, list[str]] = collections.defaultdict(list)
    for msg in sorted(await pull_all(broker.endpoint, name), key=lambda m: m.queue_offset):
        by_queue[msg.queue_id].append(msg.body.decode())
    for bodies in by_queue.values():
        keys = {b.split(":")[0] for b in bodies}
        assert len(keys) == 1  # one sharding key per queue here (two keys, distinct queues)
        assert [int(b.split(":")[1]) for b in bodies] == sorted(
            int(b.split(":")[1]) for b in bodies
        )
    assert sum(len(v) for v in by_queue.values()) == 20


async def test_oneway_and_unary_transport_deliver(broker: BrokerProcess, name: str) -> None:
    async with Producer(broker.endpoint, transport="unary") as producer:
        await producer.send(name, b"unary")
        await producer.send_oneway(name, b"oneway")
    bodies = sorted(m.body for m in await pull_all(broker.endpoint, name))
    assert bodies == [b"oneway", b"unary"]


async def test_query_by_key_and_view_by_unique_id(broker: BrokerProcess, name: str) -> None:
    async with Producer(broker.endpoint) as producer:
        result = await producer.send(name, b"findme", keys=("invoice-77",))
    async with Admin(broker.endpoint) as admin:
        found: list = []
        for _ in range(50):  # the index is built by dispatch, just after the append
            found = list((await admin.query_messages(name, "invoice-77")).messages)
            if found:
                break
            await asyncio.sleep(0.05)
        assert [m.msg_id for m in found] == [result.msg_id]
        viewed = (await admin.view_message(result.msg_id, name)).message
        assert viewed.body == b"findme" and viewed.offset_msg_id == result.offset_msg_id


async def test_pull_consumer_commit_seek_and_poll(broker: BrokerProcess, name: str) -> None:
    async with Producer(broker.endpoint) as producer:
        await producer.send_batch(name, [f"p{i}" for i in range(10)], queue_id=0)
    async with PullConsumer(broker.endpoint, name) as consumer:
        queue = MessageQueue(name, 0)
        assert await consumer.committed(queue) == -1
        consumer.assign([queue])
        first = await consumer.poll(max_messages=4)
        assert [m.body for m in first] == [b"p0", b"p1", b"p2", b"p3"]
        await consumer.commit_positions()
        assert await consumer.committed(queue) == 4
        consumer.seek(queue, 8)
        assert [m.body for m in await consumer.poll()] == [b"p8", b"p9"]
        assert await consumer.poll() == []


async def test_broker_errors_become_typed_exceptions_with_the_message(
    broker: BrokerProcess, name: str
) -> None:
    async with Producer(broker.endpoint) as producer:
        await producer.send(name + "-auto", b"creates the topic with the default queues")
        with pytest.raises(InvalidArgumentError) as bad_queue:
            await producer.send(name + "-auto", b"x", queue_id=99)
        assert bad_queue.value.from_broker and "queue_id 99 is out of range" in str(bad_queue.value)
        with pytest.raises(InvalidArgumentError) as bad_topic:
            await producer.send("bad topic name!", b"x")  # checked while encoding the record
        assert not bad_topic.value.from_broker and "is invalid" in str(bad_topic.value)
        with pytest.raises(InvalidArgumentError):
            await producer.send(name, b"")  # rejected locally before any RPC
    async with Admin(broker.endpoint) as admin:
        await admin.create_topic(name, queue_nums=2)
        with pytest.raises(AlreadyExistsError):
            await admin.create_topic(name)
        with pytest.raises(NotFoundError):
            await admin.topic_stats(name + "-missing")


async def test_unreachable_broker_fails_fast_after_retries() -> None:
    from tests.harness import free_port

    async with Producer(f"127.0.0.1:{free_port()}", send_timeout=1.5) as producer:
        with pytest.raises((UnavailableError, DeadlineExceededError)):
            await producer.send("t", b"x")


def test_sync_wrappers_send_and_pull(broker: BrokerProcess, name: str) -> None:
    from wharf.client import sync

    with sync.Producer(broker.endpoint) as producer:
        result = producer.send(name, b"from a script", queue_id=0)
    with sync.PullConsumer(broker.endpoint, "g") as consumer:
        pulled = consumer.pull(MessageQueue(name, 0), 0)
    assert [m.msg_id for m in pulled.messages] == [result.msg_id]
