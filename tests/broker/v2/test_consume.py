"""RocketMQ 5 consumption through a real BrokerController and MessageStore, over
wharf.rocketmq.v2 stubs: FIFO groups set by the admin API, dead-lettering (forwarded by the
consumer, and after the group's max attempts) into a listed, readable ``%DLQ%<group>``, the
offset-based RPCs sharing offsets with wharf.v1, and topic message types checked on create."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from wharf.broker.controller import BrokerController
from wharf.rocketmq.v2 import definition_pb2 as d
from wharf.rocketmq.v2 import service_pb2 as s
from wharf.rocketmq.v2 import service_pb2_grpc
from wharf.v1 import admin_pb2, admin_pb2_grpc, messaging_pb2, messaging_pb2_grpc

from tests.inproc import InProcFactory

Code = d.Code
META = (("x-mq-client-id", "host@1@0@consume"),)
TOPIC = "orders"


class Broker:
    def __init__(self, controller: BrokerController, channel: grpc.aio.Channel) -> None:
        self.controller = controller
        self.channel = channel
        self.v2 = service_pb2_grpc.MessagingServiceStub(channel)
        self.v1 = messaging_pb2_grpc.MessagingServiceStub(channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(channel)

    async def send(self, body: str, group: str = "", mid: str = "") -> None:
        m = d.Message(body=body.encode())
        m.topic.name = TOPIC
        m.system_properties.message_id = mid or f"id-{body}"
        m.system_properties.body_encoding = d.IDENTITY
        m.system_properties.message_type = d.FIFO if group else d.NORMAL
        if group:
            m.system_properties.message_group = group
        reply = await self.v2.SendMessage(s.SendMessageRequest(messages=[m]), metadata=META)
        assert reply.status.code == Code.OK, reply.status

    async def receive(
        self, group: str, batch: int = 32, invisible_s: float = 30, polling_s: float = 0.5
    ) -> tuple[int, list[d.Message]]:
        request = s.ReceiveMessageRequest(
            group=d.Resource(name=group),
            message_queue=d.MessageQueue(topic=d.Resource(name=TOPIC)),
            filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
            batch_size=batch,
            invisible_duration=_duration(invisible_s),
            long_polling_timeout=_duration(polling_s),
        )
        replies = [r async for r in self.v2.ReceiveMessage(request, metadata=META, timeout=10)]
        return replies[0].status.code, [r.message for r in replies if r.HasField("message")]

    async def ack(self, group: str, *messages: d.Message) -> s.AckMessageResponse:
        entries = [
            s.AckMessageEntry(
                message_id=m.system_properties.message_id,
                receipt_handle=m.system_properties.receipt_handle,
            )
            for m in messages
        ]
        return await self.v2.AckMessage(
            s.AckMessageRequest(
                group=d.Resource(name=group), topic=d.Resource(name=TOPIC), entries=entries
            ),
            metadata=META,
        )

    async def v1_pull(self, topic: str, queue_id: int, group: str = "check") -> list[Any]:
        reply = await self.v1.PullMessage(
            messaging_pb2.PullMessageRequest(
                consumer_group=group, topic=topic, queue_id=queue_id, queue_offset=0
            )
        )
        return list(reply.messages)


def _duration(seconds: float) -> Duration:
    return Duration(seconds=int(seconds), nanos=int(seconds % 1 * 1e9))


def _queue(queue_id: int) -> d.MessageQueue:
    return d.MessageQueue(topic=d.Resource(name=TOPIC), id=queue_id)


@pytest.fixture
async def broker(inproc_broker: InProcFactory) -> Broker:
    started = await inproc_broker(default_topic_queue_nums="2")
    b = Broker(started.controller, started.channel)
    await b.admin.CreateTopic(
        admin_pb2.CreateTopicRequest(name=TOPIC, read_queue_nums=2, write_queue_nums=2)
    )
    return b


async def test_a_fifo_group_gets_one_message_of_a_message_group_at_a_time_in_order(
    broker: Broker,
) -> None:
    await broker.admin.CreateSubscriptionGroup(
        admin_pb2.SubscriptionGroupConfig(group_name="fifo-g", consume_message_orderly=True)
    )
    plain = await broker.admin.CreateSubscriptionGroup(
        admin_pb2.SubscriptionGroupConfig(group_name="plain-g")
    )
    assert not plain.consume_message_orderly
    for i in range(3):
        for group in ("a", "b"):
            await broker.send(f"{group}{i}", group=group)
    assert await broker.controller.store.wait_dispatched()  # sends are acked before dispatch

    received: list[str] = []
    for _ in range(3):
        code, messages = await broker.receive("fifo-g")
        assert code == Code.OK
        bodies = sorted(m.body.decode() for m in messages)
        assert len(bodies) == 2 and {b[0] for b in bodies} == {"a", "b"}  # one per group
        code, none = await broker.receive("fifo-g", polling_s=0)
        assert code == Code.MESSAGE_NOT_FOUND and not none  # both groups are in flight
        received += bodies
        assert (await broker.ack("fifo-g", *messages)).status.code == Code.OK
    assert [b for b in received if b[0] == "a"] == ["a0", "a1", "a2"]
    assert [b for b in received if b[0] == "b"] == ["b0", "b1", "b2"]

    # A concurrent group on the same topic takes all six at once.
    code, messages = await broker.receive("plain-g")
    assert code == Code.OK and len(messages) == 6
    # A wharf.v1 pull consumer of its own group reads all of them too: pop groups keep their
    # state apart from committed offsets.
    pulled = [v.body for q in (0, 1) for v in await broker.v1_pull(TOPIC, q, group="v1-g")]
    assert sorted(pulled) == sorted(f"{g}{i}".encode() for g in "ab" for i in range(3))

    # An update that does not name the flag keeps it (as consume_enable).
    kept = await broker.admin.CreateSubscriptionGroup(
        admin_pb2.SubscriptionGroupConfig(group_name="fifo-g", retry_max_times=3)
    )
    assert kept.consume_message_orderly and kept.retry_max_times == 3


async def test_pop_progress_is_committed_and_a_deleted_group_starts_over(
    broker: Broker,
) -> None:
    """A pop group's acknowledged prefix becomes its committed offset (what replicas follow
    and ``consumer progress`` shows); deleting the group forgets its pop state and offsets,
    so a group created again under that name receives every message again."""
    for i in range(4):
        await broker.send(f"p{i}")
    assert await broker.controller.store.wait_dispatched()
    code, messages = await broker.receive("pop-g")
    assert code == Code.OK and len(messages) == 4
    assert (await broker.ack("pop-g", *messages)).status.code == Code.OK
    offsets = broker.controller.offsets
    deadline = time.monotonic() + 5
    while sum(max(0, offsets.query("pop-g", TOPIC, q)) for q in (0, 1)) != 4:
        assert time.monotonic() < deadline, "pop progress was not committed"
        await asyncio.sleep(0.1)
    await broker.admin.DeleteSubscriptionGroup(
        admin_pb2.DeleteSubscriptionGroupRequest(group_name="pop-g")
    )
    await asyncio.sleep(1.5)  # a progress round: the forgotten state commits nothing back
    assert [offsets.query("pop-g", TOPIC, q) for q in (0, 1)] == [-1, -1]
    code, again = await broker.receive("pop-g")
    assert code == Code.OK and sorted(m.body for m in again) == [b"p0", b"p1", b"p2", b"p3"]


async def test_a_delay_message_is_received_as_delay_with_its_delivery_time(
    broker: Broker,
) -> None:
    # As the proxy's GrpcConverter: the clients show delivery_timestamp as the message's
    # delivery time (Node's MessageView.deliveryTimestamp, Python's delivery_timestamp).
    deliver_ms = int(time.time() * 1000) + 1_000
    m = d.Message(body=b"later", user_properties={"k": "v"})
    m.topic.name = TOPIC
    m.system_properties.message_id = "id-later"
    m.system_properties.message_type = d.DELAY
    m.system_properties.delivery_timestamp.CopyFrom(
        Timestamp(seconds=deliver_ms // 1000, nanos=deliver_ms % 1000 * 1_000_000)
    )
    reply = await broker.v2.SendMessage(s.SendMessageRequest(messages=[m]), metadata=META)
    assert reply.status.code == Code.OK, reply.status
    await broker.send("now", group="g1")
    messages: dict[bytes, d.Message] = {}
    for _ in range(20):
        if len(messages) == 2:
            break
        _, more = await broker.receive("cg", polling_s=0.5)
        messages.update((x.body, x) for x in more)
    later, fifo = messages[b"later"].system_properties, messages[b"now"].system_properties
    assert later.message_type == d.DELAY
    stamp = later.delivery_timestamp
    assert stamp.seconds * 1000 + stamp.nanos // 1_000_000 == deliver_ms
    assert dict(messages[b"later"].user_properties) == {"k": "v"}  # the timer's keys stay hidden
    assert fifo.message_type == d.FIFO and not fifo.HasField("delivery_timestamp")


async def test_forward_to_dead_letter_moves_the_message_to_a_listed_dlq(broker: Broker) -> None:
    await broker.send("poison")
    await broker.send("fine")
    messages: list[d.Message] = []
    while len(messages) < 2:  # a send is acked before dispatch: the second may come later
        code, more = await broker.receive("cg", polling_s=2)
        assert code == Code.OK
        messages += more
    poison = next(m for m in messages if m.body == b"poison")
    reply = await broker.v2.ForwardMessageToDeadLetterQueue(
        s.ForwardMessageToDeadLetterQueueRequest(
            group=d.Resource(name="cg"),
            topic=d.Resource(name=TOPIC),
            receipt_handle=poison.system_properties.receipt_handle,
            message_id=poison.system_properties.message_id,
            delivery_attempt=1,
            max_delivery_attempts=16,
        ),
        metadata=META,
    )
    assert reply.status.code == Code.OK, reply.status
    # The delivery is over: its handle no longer acks, and it never comes back.
    stale = await broker.ack("cg", poison)
    assert stale.status.code == Code.INVALID_RECEIPT_HANDLE
    assert (
        await broker.ack("cg", *(m for m in messages if m is not poison))
    ).status.code == Code.OK
    code, _ = await broker.receive("cg", polling_s=0)
    assert code == Code.MESSAGE_NOT_FOUND

    topics = await broker.admin.ListTopics(admin_pb2.ListTopicsRequest(include_system=True))
    assert "%DLQ%cg" in {t.name for t in topics.topics}
    dead = await broker.v1_pull("%DLQ%cg", 0)
    assert [v.body for v in dead] == [b"poison"]
    assert dead[0].properties["DLQ_ORIGIN_TOPIC"] == TOPIC
    assert dead[0].properties["DLQ_ORIGIN_MESSAGE_ID"] == "id-poison"

    forged = await broker.v2.ForwardMessageToDeadLetterQueue(
        s.ForwardMessageToDeadLetterQueueRequest(
            group=d.Resource(name="cg"), topic=d.Resource(name=TOPIC), receipt_handle="nope"
        ),
        metadata=META,
    )
    assert forged.status.code == Code.INVALID_RECEIPT_HANDLE


async def test_after_the_groups_max_attempts_the_message_is_dead_lettered(broker: Broker) -> None:
    # retryMaxTimes 1: two deliveries, then %DLQ%.
    await broker.admin.CreateSubscriptionGroup(
        admin_pb2.SubscriptionGroupConfig(group_name="twice", retry_max_times=1)
    )
    await broker.send("never-acked")
    attempts = []
    for _ in range(2):
        code, messages = await broker.receive("twice", invisible_s=1, polling_s=3)
        assert code == Code.OK and len(messages) == 1
        attempts.append(messages[0].system_properties.delivery_attempt)
    assert attempts == [1, 2]
    code, messages = await broker.receive("twice", invisible_s=1, polling_s=1.5)
    assert code == Code.MESSAGE_NOT_FOUND and not messages
    for _ in range(50):  # the copy is written by the pop that found the expired delivery
        dead = await broker.v1_pull("%DLQ%twice", 0)
        if dead:
            break
        await asyncio.sleep(0.05)
    assert [v.body for v in dead] == [b"never-acked"]


async def test_pull_and_offsets_share_the_wharf_v1_committed_offsets(broker: Broker) -> None:
    for i in range(3):
        await broker.send(f"p{i}", group="same")  # one message group: one queue
    assert await broker.controller.store.wait_dispatched()
    queue_id = 0 if await broker.v1_pull(TOPIC, 0) else 1

    async def pull(offset: int, polling_s: float = 0) -> list[s.PullMessageResponse]:
        request = s.PullMessageRequest(
            group=d.Resource(name="puller"),
            message_queue=_queue(queue_id),
            offset=offset,
            batch_size=10,
            filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
            long_polling_timeout=_duration(polling_s),
        )
        return [r async for r in broker.v2.PullMessage(request, metadata=META, timeout=10)]

    replies = await pull(0)
    assert replies[0].status.code == Code.OK
    assert [r.message.body for r in replies[1:-1]] == [b"p0", b"p1", b"p2"]
    assert not replies[1].message.system_properties.HasField("receipt_handle")
    assert replies[-1].next_offset == 3

    caught_up = await pull(3)
    assert caught_up[0].status.code == Code.MESSAGE_NOT_FOUND and caught_up[-1].next_offset == 3
    illegal = await pull(100)
    # RocketMQ's correction past the end: the queue's min offset when it is 0, else its max.
    assert illegal[0].status.code == Code.ILLEGAL_OFFSET and illegal[-1].next_offset == 0

    # A long poll is answered by the next arrival.
    waiting = asyncio.create_task(pull(3, polling_s=5))
    await asyncio.sleep(0.2)
    await broker.send("p3", group="same")
    woken = await waiting
    assert woken[0].status.code == Code.OK and woken[1].message.body == b"p3"

    group = d.Resource(name="puller")
    missing = await broker.v2.GetOffset(
        s.GetOffsetRequest(group=group, message_queue=_queue(queue_id)), metadata=META
    )
    assert missing.status.code == Code.OFFSET_NOT_FOUND
    updated = await broker.v2.UpdateOffset(
        s.UpdateOffsetRequest(group=group, message_queue=_queue(queue_id), offset=2),
        metadata=META,
    )
    assert updated.status.code == Code.OK
    got = await broker.v2.GetOffset(
        s.GetOffsetRequest(group=group, message_queue=_queue(queue_id)), metadata=META
    )
    assert (got.status.code, got.offset) == (Code.OK, 2)
    v1 = await broker.v1.QueryConsumerOffset(
        messaging_pb2.QueryConsumerOffsetRequest(
            consumer_group="puller", topic=TOPIC, queue_id=queue_id
        )
    )
    assert v1.offset == 2  # one committed offset for both protocols

    async def query(policy: int, **kw: Any) -> s.QueryOffsetResponse:
        return await broker.v2.QueryOffset(
            s.QueryOffsetRequest(message_queue=_queue(queue_id), query_offset_policy=policy, **kw),
            metadata=META,
        )

    assert (await query(d.BEGINNING)).offset == 0
    assert (await query(d.END)).offset == 4
    future = await query(d.TIMESTAMP, timestamp=Timestamp(seconds=4_000_000_000))
    assert (future.status.code, future.offset) == (Code.OK, 4)
    assert (await query(d.TIMESTAMP)).status.code == Code.BAD_REQUEST

    out_of_range = await broker.v2.GetOffset(
        s.GetOffsetRequest(group=group, message_queue=_queue(7)), metadata=META
    )
    assert out_of_range.status.code == Code.BAD_REQUEST
    assert "2 read queues" in out_of_range.status.message


async def test_topic_message_type_is_checked_and_normalised(broker: Broker) -> None:
    created = await broker.admin.CreateTopic(
        admin_pb2.CreateTopicRequest(name="typed", attributes={"message.type": "fifo"})
    )
    assert created.attributes["message.type"] == "FIFO"
    with pytest.raises(grpc.aio.AioRpcError) as bad:
        await broker.admin.CreateTopic(
            admin_pb2.CreateTopicRequest(name="typo", attributes={"message.type": "FIFOO"})
        )
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "NORMAL, FIFO, DELAY, TRANSACTION, MIXED" in (bad.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as bad_update:
        await broker.admin.UpdateTopic(
            admin_pb2.UpdateTopicRequest(name="typed", attributes={"message.type": "x"})
        )
    assert bad_update.value.code() == grpc.StatusCode.INVALID_ARGUMENT
