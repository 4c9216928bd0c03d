"""The v2 servicer in a real BrokerController (FakeStore) through wharf.rocketmq.v2 stubs:
metadata, route, telemetry, send validation and storage as a wharf.v1 pull sees it."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from wharf.broker.controller import BrokerController
from wharf.broker.frontends.v2.send import fifo_queue
from wharf.rocketmq.v2 import definition_pb2 as d
from wharf.rocketmq.v2 import service_pb2 as s
from wharf.rocketmq.v2 import service_pb2_grpc
from wharf.store.model import PutStatus
from wharf.v1 import messaging_pb2, messaging_pb2_grpc

from tests.fakes import FakeStore
from tests.inproc import InProcFactory

Code = d.Code
META = (("x-mq-client-id", "host@1@0@abc"), ("authorization", "MQv2-HMAC-SHA1 Credential=, x"))


class Broker:
    def __init__(self, controller: BrokerController, channel: grpc.aio.Channel) -> None:
        self.controller = controller
        self.channel = channel
        self.v2 = service_pb2_grpc.MessagingServiceStub(channel)
        self.v1 = messaging_pb2_grpc.MessagingServiceStub(channel)

    @property
    def store(self) -> FakeStore:
        return self.controller.store  # type: ignore[return-value]

    async def send(self, *messages: d.Message) -> s.SendMessageResponse:
        return await self.v2.SendMessage(s.SendMessageRequest(messages=messages), metadata=META)

    async def pull(self, topic: str, queue_id: int) -> list[Any]:
        reply = await self.v1.PullMessage(
            messaging_pb2.PullMessageRequest(
                consumer_group="g", topic=topic, queue_id=queue_id, queue_offset=0
            )
        )
        return list(reply.messages)


def message(
    topic: str = "orders", body: bytes = b"hello", mid: str = "01AB", **sysp: Any
) -> d.Message:
    m = d.Message(body=body)
    m.topic.name = topic
    m.system_properties.message_id = mid
    m.system_properties.message_type = sysp.pop("message_type", d.NORMAL)
    m.system_properties.body_encoding = d.IDENTITY
    for key, value in sysp.items():
        if key == "keys":
            m.system_properties.keys.extend(value)
        elif key == "props":
            m.user_properties.update(value)
        else:
            setattr(m.system_properties, key, value)
    return m


async def start(inproc_broker: InProcFactory, **settings: str) -> Broker:
    started = await inproc_broker(FakeStore, max_message_size="1024", **settings)
    return Broker(started.controller, started.channel)


@pytest.fixture
async def broker(inproc_broker: InProcFactory) -> Broker:
    return await start(inproc_broker)


async def test_reflection_lists_the_v2_service(broker: Broker) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(broker.channel)
    replies = stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")])
    )
    names = [svc.name async for r in replies for svc in r.list_services_response.service]
    assert "apache.rocketmq.v2.MessagingService" in names
    assert "wharf.v1.MessagingService" in names


async def test_client_id_is_required_on_every_rpc(broker: Broker) -> None:
    reply = await broker.v2.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name="orders")))
    assert reply.status.code == Code.CLIENT_ID_REQUIRED
    sent = await broker.v2.SendMessage(s.SendMessageRequest(messages=[message()]))
    assert sent.status.code == Code.CLIENT_ID_REQUIRED and not sent.entries
    assert not broker.store.queues  # nothing stored
    stream = broker.v2.Telemetry(iter([s.TelemetryCommand()]))
    assert [r.status.code async for r in stream] == [Code.CLIENT_ID_REQUIRED]


async def test_query_route_echoes_the_dialled_endpoint_with_master_read_write_queues(
    broker: Broker,
) -> None:
    endpoints = d.Endpoints(scheme=d.DOMAIN_NAME, addresses=[d.Address(host="mq.example", port=9)])
    request = s.QueryRouteRequest(topic=d.Resource(name="orders"), endpoints=endpoints)
    reply = await broker.v2.QueryRoute(request, metadata=META)
    assert reply.status.code == Code.OK
    assert [q.id for q in reply.message_queues] == list(range(8))  # defaultTopicQueueNums
    for q in reply.message_queues:
        assert q.broker.id == 0 and q.broker.endpoints == endpoints
        assert q.permission == d.READ_WRITE and q.topic.name == "orders"
        assert list(q.accept_message_types) == [d.NORMAL, d.FIFO, d.DELAY, d.TRANSACTION]
    bad = await broker.v2.QueryRoute(
        s.QueryRouteRequest(topic=d.Resource(name="a b")), metadata=META
    )
    assert bad.status.code == Code.ILLEGAL_TOPIC


async def test_unknown_topic_without_auto_create_is_topic_not_found(
    inproc_broker: InProcFactory, tmp_path: Path
) -> None:
    b = await start(inproc_broker, auto_create_topic_enable="false")
    reply = await b.v2.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name="nope")), metadata=META)
    assert reply.status.code == Code.TOPIC_NOT_FOUND
    sent = await b.send(message("nope"))
    assert sent.status.code == Code.TOPIC_NOT_FOUND


async def test_typed_topic_route_and_send_validation(broker: Broker) -> None:
    topic = broker.controller.topics.for_send("fifo-only")
    topic.attributes["message.type"] = "FIFO"
    reply = await broker.v2.QueryRoute(
        s.QueryRouteRequest(topic=d.Resource(name="fifo-only")), metadata=META
    )
    assert list(reply.message_queues[0].accept_message_types) == [d.FIFO]
    sent = await broker.send(message("fifo-only"))
    assert sent.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


async def test_telemetry_answers_every_settings_frame_and_keeps_the_stream_open(
    broker: Broker,
) -> None:
    outgoing: asyncio.Queue[Any] = asyncio.Queue()

    async def commands() -> AsyncIterator[s.TelemetryCommand]:
        while (item := await outgoing.get()) is not None:
            yield item

    settings = d.Settings(client_type=d.PRODUCER)
    settings.publishing.topics.add(name="orders")
    call = broker.v2.Telemetry(commands(), metadata=META)
    for _ in range(2):
        await outgoing.put(s.TelemetryCommand(settings=settings))
        reply = await asyncio.wait_for(call.read(), 5)
        assert reply.status.code == Code.OK
        assert reply.settings.publishing.max_body_size == 1024  # the broker's maxMessageSize
    service = broker.controller.front_end("grpc").servicer("apache.rocketmq.v2.MessagingService")
    assert service.clients.get("host@1@0@abc") is not None
    await outgoing.put(s.TelemetryCommand(settings=d.Settings(client_type=d.PRODUCER)))
    assert (await asyncio.wait_for(call.read(), 5)).status.code == Code.BAD_REQUEST
    await outgoing.put(None)  # the client half-closes: the server ends the stream
    assert await asyncio.wait_for(call.read(), 5) is grpc.aio.EOF
    await asyncio.sleep(0.05)
    assert service.clients.get("host@1@0@abc") is None


async def test_heartbeat_and_termination(broker: Broker) -> None:
    beat = await broker.v2.Heartbeat(s.HeartbeatRequest(client_type=d.PRODUCER), metadata=META)
    assert beat.status.code == Code.OK
    bye = await broker.v2.NotifyClientTermination(s.NotifyClientTerminationRequest(), metadata=META)
    assert bye.status.code == Code.OK


async def test_send_stores_what_a_wharf_v1_pull_shows(broker: Broker) -> None:
    m = message(body=b"payload", mid="ID-1", tag="TagA", keys=["k1", "k2"], props={"p": "v"})
    sent = await broker.send(m)
    assert sent.status.code == Code.OK
    assert len(sent.entries) == 1 and sent.entries[0].message_id == "ID-1"
    assert sent.entries[0].status.code == Code.OK
    found = [(queue_id, v) for queue_id in range(8) for v in await broker.pull("orders", queue_id)]
    assert len(found) == 1
    _, view = found[0]
    assert (view.body, view.tags, list(view.keys), view.msg_id) == (
        b"payload",
        "TagA",
        ["k1", "k2"],
        "ID-1",
    )
    assert dict(view.properties) == {"p": "v"}


async def test_fifo_send_goes_to_the_queue_of_its_message_group(broker: Broker) -> None:
    for i in range(6):
        group = f"g{i % 3}"
        sent = await broker.send(message(mid=f"F{i}", message_type=d.FIFO, message_group=group))
        assert sent.status.code == Code.OK
    for i in range(3):
        queue = fifo_queue(f"g{i}", 8)
        views = [
            v
            for v in await broker.pull("orders", queue)
            if v.properties["__SHARDINGKEY"] == f"g{i}"
        ]
        assert [v.msg_id for v in views] == [f"F{i}", f"F{i + 3}"]


async def test_a_retried_message_id_is_stored_once(broker: Broker) -> None:
    first = await broker.send(message(mid="DUP"))
    again = await broker.send(message(mid="DUP"))
    broker.store.put_delay_s = 0.05  # the retry arrives while the first is being stored
    both = await asyncio.gather(broker.send(message(mid="DUP2")), broker.send(message(mid="DUP2")))
    assert first.entries[0].offset == again.entries[0].offset
    assert again.status.code == Code.OK and all(r.status.code == Code.OK for r in both)
    stored = [m for q in broker.store.queues.values() for m in q]
    assert sorted(m.properties["UNIQ_KEY"] for m in stored) == ["DUP", "DUP2"]


BAD_SENDS = [
    (message(body=b""), Code.MESSAGE_BODY_EMPTY),
    (message(body=b"x" * 1025), Code.MESSAGE_BODY_TOO_LARGE),
    (message(topic="bad topic"), Code.ILLEGAL_TOPIC),
    (message(topic="TBW102"), Code.ILLEGAL_TOPIC),
    (message(mid=""), Code.ILLEGAL_MESSAGE_ID),
    (message(tag="a|b"), Code.ILLEGAL_MESSAGE_TAG),
    (message(keys=["a b"]), Code.ILLEGAL_MESSAGE_KEY),
    (message(props={"TAGS": "x"}), Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    (message(props={f"k{i}": "v" for i in range(129)}), Code.MESSAGE_PROPERTIES_TOO_LARGE),
    (message(message_type=d.FIFO), Code.ILLEGAL_MESSAGE_GROUP),
    (message(message_type=d.FIFO, message_group="x" * 65), Code.ILLEGAL_MESSAGE_GROUP),
    (message(message_type=d.NORMAL, message_group="g"), Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    (message(message_type=d.DELAY), Code.ILLEGAL_DELIVERY_TIME),  # no delivery_timestamp
    (message(message_type=d.DELAY, message_group="g"), Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    (message(message_type=d.PRIORITY), Code.UNSUPPORTED),
]


async def test_gzip_bodies_are_stored_inflated_and_truncated_ones_refused(broker: Broker) -> None:
    packed = gzip.compress(b"z" * 300)
    sent = await broker.send(message(mid="gz", body=packed, body_encoding=d.GZIP))
    assert sent.status.code == Code.OK
    # Found by test_fuzz.py: a stream cut before its trailer inflated "fine" and was stored
    # without its CRC ever being checked.
    for cut in (packed[:-8], packed[:-1], packed[: len(packed) // 2]):
        bad = await broker.send(message(mid="cut", body=cut, body_encoding=d.GZIP))
        assert bad.status.code == Code.MESSAGE_CORRUPTED, bad.status
    stored = [m for q in broker.store.queues.values() for m in q]
    assert [m.body for m in stored] == [b"z" * 300]


async def test_the_brokers_own_topics_refuse_v2_sends_even_once_they_exist(broker: Broker) -> None:
    # Found by test_fuzz.py: SCHEDULE_TOPIC_XXXX exists from the start, so a send reached it and
    # the schedule service later failed on a record without REAL_TOPIC/REAL_QID.
    names = ["SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer", "%RETRY%g", "%DLQ%g", "TBW102"]
    for name in names:
        broker.controller.topics.ensure_system(name, 2)
    for name in names:
        sent = await broker.send(message(topic=name))
        assert sent.status.code == Code.ILLEGAL_TOPIC, (name, sent.status)
        assert "broker's own" in sent.status.message
    assert not broker.store.queues


async def test_bad_sends_get_their_code_and_store_nothing(broker: Broker) -> None:
    for msg, code in BAD_SENDS:
        sent = await broker.send(msg)
        assert sent.status.code == code, (Code.Name(code), sent.status.message)
        assert sent.status.message
    # A batch with one bad message stores none of them.
    sent = await broker.send(message(mid="ok-1"), message(mid="bad", body=b""))
    assert sent.status.code == Code.MESSAGE_BODY_EMPTY
    assert not broker.store.queues


async def test_flush_timeout_and_disk_full_are_mapped(broker: Broker) -> None:
    broker.store.put_status = PutStatus.FLUSH_DISK_TIMEOUT
    sent = await broker.send(message(mid="T1"))
    assert sent.status.code == Code.MASTER_PERSISTENCE_TIMEOUT
    assert sent.entries[0].status.code == Code.MASTER_PERSISTENCE_TIMEOUT
    broker.store.put_status = PutStatus.PUT_OK
    retried = await broker.send(message(mid="T1"))  # stored already: not a second copy
    assert retried.status.code == Code.OK
    assert sum(len(q) for q in broker.store.queues.values()) == 1

    from wharf.store.errors import DiskFullError

    async def full(*_: Any) -> Any:
        raise DiskFullError("no space left on device")

    broker.store.put = full  # type: ignore[method-assign]
    sent = await broker.send(message(mid="T2"))
    assert sent.status.code == Code.TOO_MANY_REQUESTS and "disk full" in sent.status.message
    assert sent.entries[0].message_id == "T2"


async def test_pop_rpcs_on_an_unknown_topic_answer_topic_not_found(broker: Broker) -> None:
    ack = await broker.v2.AckMessage(s.AckMessageRequest(), metadata=META)
    assert ack.status.code == Code.TOPIC_NOT_FOUND
    change = await broker.v2.ChangeInvisibleDuration(
        s.ChangeInvisibleDurationRequest(receipt_handle="h1"), metadata=META
    )
    # The clients copy the handle before checking the status: it comes back even on error.
    assert change.status.code == Code.TOPIC_NOT_FOUND and change.receipt_handle == "h1"
    received = [r async for r in broker.v2.ReceiveMessage(s.ReceiveMessageRequest(), metadata=META)]
    assert [r.status.code for r in received] == [Code.TOPIC_NOT_FOUND]


async def test_unimplemented_rpcs_answer_an_explicit_code(broker: Broker) -> None:
    for rpc, request in ((broker.v2.SyncLiteSubscription, s.SyncLiteSubscriptionRequest()),):
        reply = await rpc(request, metadata=META)
        assert reply.status.code == Code.NOT_IMPLEMENTED


async def test_query_assignment_gives_a_push_consumer_a_queue(broker: Broker) -> None:
    reply = await broker.v2.QueryAssignment(
        s.QueryAssignmentRequest(topic=d.Resource(name="orders"), group=d.Resource(name="cg")),
        metadata=META,
    )
    assert reply.status.code == Code.OK
    assert [a.message_queue.id for a in reply.assignments] == [-1]
    assert reply.assignments[0].message_queue.broker.id == 0


async def test_undecodable_requests_get_bad_request_and_the_broker_keeps_serving(
    broker: Broker,
) -> None:
    garbage = b"\xff\xff\xff\xff\x0f\x12"
    for method in ("SendMessage", "QueryRoute", "Heartbeat", "ChangeInvisibleDuration"):
        call = broker.channel.unary_unary(
            f"/apache.rocketmq.v2.MessagingService/{method}",
            request_serializer=lambda b: b,
            response_deserializer=getattr(s, f"{method}Response").FromString,
        )
        reply = await call(garbage, metadata=META)
        assert reply.status.code == Code.BAD_REQUEST, method
    assert (await broker.send(message(mid="after"))).status.code == Code.OK


async def test_born_timestamp_is_kept_in_ms_and_absurd_ones_fall_back(broker: Broker) -> None:
    good = message(mid="B1")
    good.system_properties.born_timestamp.seconds = 1_700_000_000
    absurd = message(mid="B2")
    absurd.system_properties.born_timestamp.seconds = 2**62
    for m in (good, absurd):
        assert (await broker.send(m)).status.code == Code.OK
    stored = {m.properties["UNIQ_KEY"]: m for q in broker.store.queues.values() for m in q}
    assert stored["B1"].born_timestamp == 1_700_000_000_000
    assert stored["B2"].born_timestamp == stored["B2"].store_timestamp


async def test_normal_sends_round_robin_and_a_batch_is_one_append(broker: Broker) -> None:
    for i in range(8):
        assert (await broker.send(message(mid=f"R{i}"))).status.code == Code.OK
    assert sorted(q for (_, q), msgs in broker.store.queues.items() if msgs) == list(range(8))
    batch = await broker.send(*(message(mid=f"B{i}") for i in range(3)))
    assert batch.status.code == Code.OK and [e.message_id for e in batch.entries] == [
        "B0",
        "B1",
        "B2",
    ]
    queues = {
        q
        for (_, q), msgs in broker.store.queues.items()
        for m in msgs
        if m.properties["UNIQ_KEY"].startswith("B")
    }
    assert len(queues) == 1
