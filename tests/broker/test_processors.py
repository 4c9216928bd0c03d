"""The processors and their gRPC wiring, in-process over an in-memory fake store (the real
daemon with the real store is tested in test_daemon*.py). Fast: no subprocess, no disk."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from wharf.broker.controller import BrokerController
from wharf.v1 import admin_pb2, admin_pb2_grpc, common_pb2, messaging_pb2, messaging_pb2_grpc

from tests.fakes import FakeStore
from tests.inproc import InProcFactory

Msg = common_pb2.Message


class Broker:
    def __init__(self, controller: BrokerController, channel: grpc.aio.Channel) -> None:
        self.controller = controller
        self.channel = channel
        self.msg = messaging_pb2_grpc.MessagingServiceStub(channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(channel)

    async def send(
        self, topic: str, *bodies: bytes, **kw: Any
    ) -> messaging_pb2.SendMessageResponse:
        messages = [Msg(body=b, **kw) for b in bodies]
        return await self.msg.SendMessage(
            messaging_pb2.SendMessageRequest(topic=topic, messages=messages, queue_id=0)
        )

    async def pull(
        self, topic: str, offset: int = 0, **kw: Any
    ) -> messaging_pb2.PullMessageResponse:
        request = messaging_pb2.PullMessageRequest(
            consumer_group="g", topic=topic, queue_id=0, queue_offset=offset, **kw
        )
        return await self.msg.PullMessage(request)


async def start_broker(inproc_broker: InProcFactory, **settings: str) -> Broker:
    started = await inproc_broker(FakeStore, **settings)
    return Broker(started.controller, started.channel)


@pytest.fixture
async def broker(inproc_broker: InProcFactory) -> Broker:
    return await start_broker(inproc_broker)


async def test_send_batch_then_pull_returns_the_messages_with_metadata(broker: Broker) -> None:
    sent = await broker.send(
        "orders", b"a", b"b", tags="TagA", keys=["k1", "k2"], properties={"p": "v"}
    )
    assert [r.queue_offset for r in sent.results] == [0, 1]
    assert all(r.status == messaging_pb2.SEND_OK and len(r.msg_id) == 32 for r in sent.results)
    pulled = await broker.pull("orders")
    assert pulled.status == messaging_pb2.FOUND
    assert pulled.next_begin_offset == 2 and pulled.max_offset == 2
    first = pulled.messages[0]
    assert (first.body, first.tags, list(first.keys)) == (b"a", "TagA", ["k1", "k2"])
    assert dict(first.properties) == {"p": "v"}
    assert first.msg_id == sent.results[0].msg_id
    assert first.offset_msg_id == sent.results[0].offset_msg_id
    assert (await broker.pull("orders", offset=2)).status == messaging_pb2.NO_NEW_MSG


async def test_queue_is_round_robin_when_absent(broker: Broker) -> None:
    queues = []
    for _ in range(9):
        reply = await broker.msg.SendMessage(
            messaging_pb2.SendMessageRequest(topic="rr", messages=[Msg(body=b"x")])
        )
        queues.append(reply.results[0].queue_id)
    assert queues == [0, 1, 2, 3, 4, 5, 6, 7, 0]


async def test_tag_expression_filters(broker: Broker) -> None:
    await broker.send("t", b"1", tags="a")
    await broker.send("t", b"2", tags="b")
    await broker.send("t", b"3", tags="c")
    pulled = await broker.pull("t", tag_expression="a || c")
    assert [m.body for m in pulled.messages] == [b"1", b"3"]


async def test_long_poll_returns_on_arrival_not_before(broker: Broker) -> None:
    started = time.monotonic()
    pull = asyncio.create_task(broker.pull("lp", max_wait_ms=5000))
    await asyncio.sleep(0.3)
    assert not pull.done()
    sent_at = time.monotonic()
    await broker.send("lp", b"wake")
    reply = await pull
    assert reply.status == messaging_pb2.FOUND and reply.messages[0].body == b"wake"
    assert time.monotonic() - started >= sent_at - started
    assert time.monotonic() - sent_at < 1.0


async def test_long_poll_times_out_with_no_new_msg(broker: Broker) -> None:
    started = time.monotonic()
    reply = await broker.pull("idle", max_wait_ms=200)
    assert reply.status == messaging_pb2.NO_NEW_MSG
    assert time.monotonic() - started >= 0.19
    assert broker.controller.long_poll.parked_count == 0


async def test_send_stream_correlates_replies_and_reports_errors_inline(broker: Broker) -> None:
    requests = [
        messaging_pb2.SendMessageRequest(topic="s", messages=[Msg(body=b"x")] * 3, request_id=1),
        messaging_pb2.SendMessageRequest(
            topic="bad topic", messages=[Msg(body=b"x")], request_id=2
        ),
        messaging_pb2.SendMessageRequest(topic="s", messages=[Msg(body=b"y")], request_id=3),
    ]
    replies = {r.request_id: r async for r in broker.msg.SendMessageStream(iter(requests))}
    assert len(replies[1].results) == 3 and not replies[1].HasField("error")
    assert replies[2].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "topic name" in replies[2].error.message
    assert len(replies[3].results) == 1


async def test_flush_timeout_is_reported_not_ok(broker: Broker) -> None:
    from wharf.store.model import PutStatus

    broker.controller.store.put_status = PutStatus.FLUSH_DISK_TIMEOUT  # type: ignore[attr-defined]
    reply = await broker.send("ft", b"x")
    assert reply.results[0].status == messaging_pb2.FLUSH_DISK_TIMEOUT


async def test_unknown_topic_is_not_found_when_auto_create_is_off(
    inproc_broker: InProcFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = await start_broker(inproc_broker, auto_create_topic_enable="false")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await b.send("unknown", b"x")
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert "CreateTopic" in (info.value.details() or "")


async def test_send_back_goes_to_retry_then_dlq(broker: Broker) -> None:
    sent = await broker.send("work", b"job")
    offset = sent.results[0].commit_log_offset
    back = await broker.msg.SendMessageBack(
        messaging_pb2.SendMessageBackRequest(
            consumer_group="g", commit_log_offset=offset, max_reconsume_times=1
        )
    )
    assert (back.sent_to_dlq, back.topic, back.reconsume_times) == (False, "%RETRY%g", 1)
    store = broker.controller.store
    retried = next(m for q in store.queues.values() for m in q if m.reconsume_times == 1)  # type: ignore[attr-defined]
    assert retried.properties["RETRY_TOPIC"] == "work"
    assert retried.properties["ORIGIN_MESSAGE_ID"] == sent.results[0].msg_id
    assert retried.properties["DELAY"] == "3"
    again = await broker.msg.SendMessageBack(
        messaging_pb2.SendMessageBackRequest(
            consumer_group="g", commit_log_offset=retried.commit_log_offset, max_reconsume_times=1
        )
    )
    assert (again.sent_to_dlq, again.topic, again.reconsume_times) == (True, "%DLQ%g", 2)
    dead = (
        await broker.msg.PullMessage(
            messaging_pb2.PullMessageRequest(consumer_group="x", topic="%DLQ%g")
        )
    ).messages
    assert dead[0].body == b"job" and dead[0].properties["RETRY_TOPIC"] == "work"


async def test_view_by_offset_id_and_by_unique_id(broker: Broker) -> None:
    sent = (await broker.send("v", b"seen", unique_id="ABC123")).results[0]
    by_offset = await broker.msg.ViewMessage(
        messaging_pb2.ViewMessageRequest(msg_id=sent.offset_msg_id)
    )
    assert by_offset.message.body == b"seen"
    by_uid = await broker.msg.ViewMessage(
        messaging_pb2.ViewMessageRequest(msg_id="ABC123", topic="v")
    )
    assert by_uid.message.commit_log_offset == sent.commit_log_offset


async def test_offsets_commit_query_and_piggy_back(broker: Broker) -> None:
    q = messaging_pb2.QueryConsumerOffsetRequest(consumer_group="g", topic="o", queue_id=0)
    assert (await broker.msg.QueryConsumerOffset(q)).offset == -1
    await broker.pull("o", commit_offset=5)
    assert (await broker.msg.QueryConsumerOffset(q)).offset == 5


async def test_heartbeat_membership_and_route(broker: Broker) -> None:
    data = messaging_pb2.ConsumerData(
        group="cg", subscriptions=[messaging_pb2.Subscription(topic="t")]
    )
    hb = await broker.msg.Heartbeat(
        messaging_pb2.HeartbeatRequest(client_id="c1", consumers=[data])
    )
    members = await broker.msg.GetConsumerList(
        messaging_pb2.GetConsumerListRequest(consumer_group="cg")
    )
    assert list(members.client_ids) == ["c1"] and members.version == hb.consumer_list_versions["cg"]
    route = await broker.msg.QueryRoute(messaging_pb2.QueryRouteRequest(topic="t"))
    assert route.endpoint == broker.controller.endpoint and route.write_queue_nums == 8


async def test_admin_topics_progress_and_status(broker: Broker) -> None:
    created = await broker.admin.CreateTopic(
        admin_pb2.CreateTopicRequest(name="adm", read_queue_nums=2, write_queue_nums=2)
    )
    assert created.perm == 6
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await broker.admin.CreateTopic(admin_pb2.CreateTopicRequest(name="adm"))
    assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS
    await broker.send("adm", b"1", b"2", b"3")
    await broker.pull("adm", commit_offset=1)
    progress = await broker.admin.GetConsumerProgress(
        admin_pb2.GetConsumerProgressRequest(consumer_group="g")
    )
    lag = {(q.topic, q.queue_id): q.lag for q in progress.queues}
    assert lag[("adm", 0)] == 2
    status = await broker.admin.GetBrokerStatus(admin_pb2.GetBrokerStatusRequest())
    assert status.messages_in_total == 3 and status.topic_count >= 1
    names = [t.name for t in (await broker.admin.ListTopics(admin_pb2.ListTopicsRequest())).topics]
    assert "adm" in names and "SCHEDULE_TOPIC_XXXX" not in names
    await broker.admin.UpdateTopic(admin_pb2.UpdateTopicRequest(name="adm", perm=4))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await broker.send("adm", b"x")
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_undecodable_bytes_are_invalid_argument_and_do_not_break_a_stream(
    broker: Broker,
) -> None:
    raw = broker.channel.unary_unary("/wharf.v1.MessagingService/SendMessage")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await raw(b"\xff\xff\xff")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "SendMessageRequest" in (info.value.details() or "")
    stream = broker.channel.stream_stream("/wharf.v1.MessagingService/SendMessageStream")
    good = messaging_pb2.SendMessageRequest(
        topic="s", messages=[Msg(body=b"x")], request_id=7
    ).SerializeToString()
    replies = [
        messaging_pb2.SendMessageResponse.FromString(r)
        async for r in stream(iter([b"\xff\xff\xff", good]))
    ]
    assert replies[0].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert replies[1].request_id == 7 and len(replies[1].results) == 1


async def test_client_deadline_on_a_parked_pull_leaves_nothing_parked(broker: Broker) -> None:
    request = messaging_pb2.PullMessageRequest(
        consumer_group="g", topic="dl", queue_id=0, max_wait_ms=10_000
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await broker.msg.PullMessage(request, timeout=0.3)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    for _ in range(50):  # the server side sees the cancellation a moment later
        if broker.controller.long_poll.parked_count == 0:
            break
        await asyncio.sleep(0.02)
    assert broker.controller.long_poll.parked_count == 0
    await broker.send("dl", b"after")
    assert (await broker.pull("dl")).messages[0].body == b"after"


async def test_advertised_address_is_what_clients_are_told_to_dial(
    inproc_broker: InProcFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = await start_broker(inproc_broker, advertised_address="mq.example.com:9999")
    route = await b.msg.QueryRoute(messaging_pb2.QueryRouteRequest(topic="t"))
    assert route.endpoint == "mq.example.com:9999" and not route.exists
    status = await b.admin.GetBrokerStatus(admin_pb2.GetBrokerStatusRequest())
    assert status.endpoint == "mq.example.com:9999"
    # Records hold an ipv4 store host: a host name falls back to loopback, same port.
    assert b.controller.config.store.store_host == "127.0.0.1:9999"


async def test_consume_enable_is_switched_off_and_on_through_the_admin_api(
    broker: Broker,
) -> None:
    create = broker.admin.CreateSubscriptionGroup
    created = await create(admin_pb2.SubscriptionGroupConfig(group_name="g"))
    assert created.consume_enable  # a new group consumes
    disabled = await create(admin_pb2.SubscriptionGroupConfig(group_name="g", consume_enable=False))
    assert not disabled.consume_enable
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await broker.pull("t")
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "consume_enable off" in (info.value.details() or "")
    # An update that does not mention the switch keeps it off (proto3 `optional` presence).
    kept = await create(admin_pb2.SubscriptionGroupConfig(group_name="g", retry_max_times=3))
    assert not kept.consume_enable and kept.retry_max_times == 3
    with pytest.raises(grpc.aio.AioRpcError):
        await broker.pull("t")
    enabled = await create(admin_pb2.SubscriptionGroupConfig(group_name="g", consume_enable=True))
    assert enabled.consume_enable
    await broker.pull("t")  # allowed again


async def test_metadata_is_persisted_periodically_without_a_shutdown(
    inproc_broker: InProcFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = await start_broker(inproc_broker, flush_consumer_offset_interval="100")
    await b.pull("periodic", commit_offset=3)
    path = tmp_path / "config" / "consumerOffset.json"
    for _ in range(100):
        if path.exists():
            break
        await asyncio.sleep(0.02)
    assert json.loads(path.read_text()) == {"offsetTable": {"periodic@g": {"0": 3}}}
    groups = json.loads((tmp_path / "config" / "subscriptionGroup.json").read_text())
    assert groups["subscriptionGroupTable"]["g"]["retryMaxTimes"] == 16  # auto-created


async def test_metadata_on_a_full_disk_is_retried_with_one_log_line_per_episode(
    inproc_broker: InProcFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import errno

    import wharf.broker.meta.persister as controller_module

    b = await start_broker(inproc_broker)
    # Only this test's persist() calls write: the broker's own persist loop, woken by the
    # commits, raced them (its write of an older capture landing after the test's, or its
    # failed write re-marking the table dirty after the test's last persist had found it clean).
    await b.controller.persister.stop()
    real_write = controller_module.write_text_atomic_blocking
    full = True

    def write(path: Path, text: str) -> None:
        if full:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(path, text)

    monkeypatch.setattr(controller_module, "write_text_atomic_blocking", write)
    with caplog.at_level("INFO", logger="broker"):
        for offset in range(1, 6):
            await b.pull("full", commit_offset=offset)
            await b.controller.persister.persist()
        full = False
        await b.controller.persister.persist()
    path = tmp_path / "config" / "consumerOffset.json"
    assert json.loads(path.read_text()) == {"offsetTable": {"full@g": {"0": 5}}}
    failed = [r for r in caplog.records if "cannot persist consumerOffset.json" in r.message]
    assert len(failed) == 1 and failed[0].exc_info is None
    assert any("persisted consumerOffset.json again" in r.message for r in caplog.records)


async def test_sync_flush_stream_overlaps_requests_within_the_inflight_bound(
    inproc_broker: InProcFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = await start_broker(
        inproc_broker, flush_disk_type="SYNC_FLUSH", max_inflight_stream_requests="4"
    )
    store = b.controller.store
    store.put_delay_s = 0.05  # type: ignore[attr-defined]
    requests = [
        messaging_pb2.SendMessageRequest(topic="s", messages=[Msg(body=b"x")], request_id=i)
        for i in range(1, 21)
    ]
    started = time.monotonic()
    replies = [r async for r in b.msg.SendMessageStream(iter(requests))]
    elapsed = time.monotonic() - started
    assert sorted(r.request_id for r in replies) == list(range(1, 21))
    assert all(len(r.results) == 1 and not r.HasField("error") for r in replies)
    # Overlapped (20 x 50 ms serially would take 1 s) but never more than 4 at once.
    assert store.max_puts_in_flight == 4  # type: ignore[attr-defined]
    assert elapsed < 0.9


async def test_auto_created_topic_is_persisted_at_once_not_after_the_interval(
    broker: Broker, tmp_path: Path
) -> None:
    from wharf.broker.meta.persist import load_json_blocking

    await broker.send("fresh", b"x")  # the 5 s periodic persistence has not run yet
    path = tmp_path / "config" / "topics.json"  # the snapshot, or its journal beside it

    def persisted() -> dict[str, Any]:
        return (load_json_blocking(path) or {}).get("topicConfigTable", {})

    for _ in range(100):
        if "fresh" in await asyncio.to_thread(persisted):
            break
        await asyncio.sleep(0.01)
    assert (await asyncio.to_thread(persisted))["fresh"]["writeQueueNums"] == 8


def test_default_endpoint_never_advertises_a_wildcard_address() -> None:
    from wharf.broker.controller import default_endpoint

    assert default_endpoint("127.0.0.1", 8081) == "127.0.0.1:8081"
    host, _, port = default_endpoint("0.0.0.0", 8081).rpartition(":")
    assert port == "8081" and host not in ("0.0.0.0", "")


class LaggingDispatchStore(FakeStore):
    """Acks before reads can see the data, as the real store's ReputService does: appended
    messages stay invisible until ``wait_dispatched`` lets dispatch run."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hidden: dict[tuple[str, int], int] = {}  # queue -> messages not dispatched yet
        self.dispatch_waits = 0

    @property
    def dispatch_pending(self) -> bool:  # type: ignore[override]
        return any(self.hidden.values())

    def append(self, topic: str, queue_id: int, messages: Any) -> Any:
        result = super().append(topic, queue_id, messages)
        self.hidden[(topic, queue_id)] = self.hidden.get((topic, queue_id), 0) + len(messages)
        return result

    def get_messages(self, topic: str, queue_id: int, offset: int, *args: Any, **kw: Any) -> Any:
        queue = self.queues.get((topic, queue_id), [])
        hidden = self.hidden.get((topic, queue_id), 0)
        visible, self.queues[(topic, queue_id)] = queue, queue[: len(queue) - hidden]
        try:
            return super().get_messages(topic, queue_id, offset, *args, **kw)
        finally:
            self.queues[(topic, queue_id)] = visible

    async def wait_dispatched(self, timeout_s: float = 5.0) -> bool:
        self.dispatch_waits += 1
        self.hidden.clear()
        return await super().wait_dispatched(timeout_s)


async def test_a_pull_right_after_the_send_ack_sees_the_message(
    inproc_broker: InProcFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = await inproc_broker(LaggingDispatchStore)
    controller = started.controller
    b = Broker(controller, started.channel)
    sent = await b.send("ryw", b"first", b"second")
    assert [r.status for r in sent.results] == [messaging_pb2.SEND_OK] * 2
    pulled = await b.pull("ryw", max_wait_ms=0)  # no long polling: answer at once
    assert pulled.status == messaging_pb2.FOUND
    assert [m.body for m in pulled.messages] == [b"first", b"second"]
    store = controller.store
    assert isinstance(store, LaggingDispatchStore) and store.dispatch_waits == 1
    # Nothing pending: an empty pull answers at once, without waiting for dispatch.
    assert (await b.pull("ryw", offset=2)).status == messaging_pb2.NO_NEW_MSG
    assert store.dispatch_waits == 1
