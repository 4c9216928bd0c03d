"""End to end against the real daemon (subprocess, real store on disk, 127.0.0.1:0)."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from wharf.v1 import admin_pb2, common_pb2, messaging_pb2

from tests.broker.daemon_helpers import SMALL_STORE, Client
from tests.harness import BrokerProcess, Daemons


@pytest.fixture(scope="module")
def daemon(
    module_daemons: Daemons, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    with module_daemons.broker(tmp_path_factory.mktemp("daemon"), settings=SMALL_STORE) as broker:
        yield broker


@pytest.fixture
def client(daemon: BrokerProcess) -> Iterator[Client]:
    c = Client(daemon.endpoint)
    yield c
    c.close()


def test_send_pull_query_view_round_trip(client: Client) -> None:
    sent = client.send("rt", b"one", b"two", tags="TagA", keys=["order-1"], properties={"p": "1"})
    assert [r.status for r in sent.results] == [messaging_pb2.SEND_OK] * 2
    assert [r.queue_offset for r in sent.results] == [0, 1]
    pulled = client.pull("rt", max_wait_ms=2000)
    assert pulled.status == messaging_pb2.FOUND
    assert [m.body for m in pulled.messages] == [b"one", b"two"]
    view = pulled.messages[0]
    assert (view.tags, list(view.keys), dict(view.properties)) == ("TagA", ["order-1"], {"p": "1"})
    assert view.msg_id == sent.results[0].msg_id
    assert view.offset_msg_id == sent.results[0].offset_msg_id
    assert view.commit_log_offset == sent.results[0].commit_log_offset
    assert pulled.next_begin_offset == 2

    by_offset = client.msg.ViewMessage(
        messaging_pb2.ViewMessageRequest(msg_id=sent.results[1].offset_msg_id)
    )
    assert by_offset.message.body == b"two"
    deadline = time.monotonic() + 5
    while True:  # the index may trail the consume queue a little: both are built by dispatch
        try:
            by_unique = client.msg.ViewMessage(
                messaging_pb2.ViewMessageRequest(msg_id=sent.results[1].msg_id, topic="rt")
            )
            break
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND or time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    assert by_unique.message.commit_log_offset == sent.results[1].commit_log_offset
    found: list[bytes] = []
    while time.monotonic() < deadline and len(found) < 2:  # the index is built by dispatch
        reply = client.msg.QueryMessage(
            messaging_pb2.QueryMessageRequest(topic="rt", key="order-1")
        )
        found = sorted(m.body for m in reply.messages)
    assert found == [b"one", b"two"]
    offsets = client.msg.GetQueueOffsets(messaging_pb2.GetQueueOffsetsRequest(topic="rt"))
    assert len(offsets.queues) == 8 and offsets.queues[0].max_offset == 2


Msg = common_pb2.Message
BAD_INPUTS = [
    (
        "SendMessage",
        messaging_pb2.SendMessageRequest(topic="a b", messages=[Msg(body=b"x")]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "topic",
    ),
    (
        "SendMessage",
        messaging_pb2.SendMessageRequest(topic="t", messages=[Msg(body=b"")]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "empty",
    ),
    (
        "SendMessage",
        messaging_pb2.SendMessageRequest(topic="t", messages=[]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "at least one",
    ),
    (
        "SendMessage",
        messaging_pb2.SendMessageRequest(topic="t", messages=[Msg(body=b"x" * (64 * 1024 + 1))]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "maxMessageSize",
    ),
    (
        "SendMessage",
        messaging_pb2.SendMessageRequest(topic="t", queue_id=8, messages=[Msg(body=b"x")]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "queue_id",
    ),
    (
        "SendMessage",
        messaging_pb2.SendMessageRequest(
            topic="t", messages=[Msg(body=b"x", properties={"a\x01": "b"})]
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "reserved",
    ),
    (
        "PullMessage",
        messaging_pb2.PullMessageRequest(consumer_group="g", topic="t", queue_offset=-1),
        grpc.StatusCode.INVALID_ARGUMENT,
        "queue_offset",
    ),
    (
        "PullMessage",
        messaging_pb2.PullMessageRequest(consumer_group="g", topic="t", tag_expression="a || || b"),
        grpc.StatusCode.INVALID_ARGUMENT,
        "tag expression",
    ),
    (
        "PullMessage",
        messaging_pb2.PullMessageRequest(consumer_group="", topic="t"),
        grpc.StatusCode.INVALID_ARGUMENT,
        "group",
    ),
    (
        "PullMessage",
        messaging_pb2.PullMessageRequest(consumer_group="g", topic="t", queue_id=99),
        grpc.StatusCode.INVALID_ARGUMENT,
        "queue_id",
    ),
    (
        "ViewMessage",
        messaging_pb2.ViewMessageRequest(msg_id="nope"),
        grpc.StatusCode.NOT_FOUND,
        "needs its topic",
    ),
    (
        "UpdateConsumerOffset",
        messaging_pb2.UpdateConsumerOffsetRequest(consumer_group="g", topic="t", offset=-3),
        grpc.StatusCode.INVALID_ARGUMENT,
        "offset",
    ),
    (
        "SendMessageBack",
        messaging_pb2.SendMessageBackRequest(consumer_group="g", commit_log_offset=123456),
        grpc.StatusCode.NOT_FOUND,
        "commit log offset",
    ),
    (
        "GetQueueOffsets",
        messaging_pb2.GetQueueOffsetsRequest(topic="never"),
        grpc.StatusCode.NOT_FOUND,
        "never",
    ),
    (
        "Heartbeat",
        messaging_pb2.HeartbeatRequest(client_id=""),
        grpc.StatusCode.INVALID_ARGUMENT,
        "client_id",
    ),
]


@pytest.mark.parametrize(("method", "request_", "code", "text"), BAD_INPUTS)
def test_bad_inputs_get_the_right_status(
    client: Client, method: str, request_: Any, code: grpc.StatusCode, text: str
) -> None:
    with pytest.raises(grpc.RpcError) as info:
        getattr(client.msg, method)(request_, timeout=10)
    assert info.value.code() == code
    assert text in (info.value.details() or "")


def test_undecodable_request_bytes_are_invalid_argument(daemon: BrokerProcess) -> None:
    with grpc.insecure_channel(daemon.endpoint) as channel:
        raw = channel.unary_unary("/wharf.v1.MessagingService/PullMessage")
        with pytest.raises(grpc.RpcError) as info:
            raw(b"\x0a\xff\xff\xff", timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_long_poll_wakes_on_arrival(client: Client) -> None:
    result: dict[str, object] = {}

    def parked_pull() -> None:
        result["reply"] = client.pull("lp", max_wait_ms=5000)
        result["at"] = time.monotonic()

    started = time.monotonic()
    thread = threading.Thread(target=parked_pull)
    thread.start()
    time.sleep(0.5)
    assert "reply" not in result  # parked, not answered before the send
    sent_at = time.monotonic()
    client.send("lp", b"wake up")
    thread.join(10)
    reply = result["reply"]
    assert isinstance(reply, messaging_pb2.PullMessageResponse)
    assert reply.status == messaging_pb2.FOUND and reply.messages[0].body == b"wake up"
    answered_at = result["at"]
    assert isinstance(answered_at, float)
    assert answered_at >= sent_at
    assert answered_at - started < 3.0  # well before the 5 s wait


def test_delay_level_message_arrives_after_its_delay(client: Client) -> None:
    sent_at = time.monotonic()
    client.send("later", b"delayed", delay_level=3)  # 1 s in SMALL_STORE
    early = client.pull("later")
    assert early.status == messaging_pb2.NO_NEW_MSG and not early.messages
    reply = client.pull("later", max_wait_ms=5000)
    assert reply.status == messaging_pb2.FOUND
    assert reply.messages[0].body == b"delayed"
    assert time.monotonic() - sent_at >= 0.95


def _pull_one(client: Client, topic: str, offset: int, group: str) -> messaging_pb2.MessageView:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        reply = client.pull(topic, offset, group=group, max_wait_ms=2000)
        if reply.messages:
            return reply.messages[0]
    raise AssertionError(f"nothing arrived in {topic} at offset {offset}")


def test_retry_then_dlq_after_max_reconsume_times(client: Client) -> None:
    group = "retry-group"
    sent = client.send("jobs", b"fails", unique_id="JOB-1")
    message = _pull_one(client, "jobs", 0, group)
    retry_topic = f"%RETRY%{group}"
    for attempt in range(1, 3):
        back = client.msg.SendMessageBack(
            messaging_pb2.SendMessageBackRequest(
                consumer_group=group,
                commit_log_offset=message.commit_log_offset,
                max_reconsume_times=2,
            )
        )
        assert (back.sent_to_dlq, back.topic, back.reconsume_times) == (False, retry_topic, attempt)
        message = _pull_one(client, retry_topic, attempt - 1, group)
        assert message.reconsume_times == attempt
        assert message.properties["RETRY_TOPIC"] == "jobs"
        assert message.properties["ORIGIN_MESSAGE_ID"] == sent.results[0].msg_id
    back = client.msg.SendMessageBack(
        messaging_pb2.SendMessageBackRequest(
            consumer_group=group, commit_log_offset=message.commit_log_offset, max_reconsume_times=2
        )
    )
    assert back.sent_to_dlq and back.topic == f"%DLQ%{group}"
    dead = _pull_one(client, f"%DLQ%{group}", 0, "inspector")
    assert dead.body == b"fails" and dead.reconsume_times == 3
    assert dead.properties["RETRY_TOPIC"] == "jobs"


def test_admin_topic_lifecycle_and_status(client: Client) -> None:
    client.admin.CreateTopic(
        admin_pb2.CreateTopicRequest(name="adm", read_queue_nums=2, write_queue_nums=2)
    )
    with pytest.raises(grpc.RpcError) as info:
        client.admin.CreateTopic(admin_pb2.CreateTopicRequest(name="adm"))
    assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS
    client.send("adm", b"a", b"b", queue_id=1)
    deadline = time.monotonic() + 5
    while True:  # queue offsets move when dispatch has run, a moment after the ack
        stats = client.admin.GetTopicStats(admin_pb2.GetTopicStatsRequest(name="adm"))
        if stats.total_messages == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert stats.total_messages == 2 and stats.queues[1].max_offset == 2
    status = client.admin.GetBrokerStatus(admin_pb2.GetBrokerStatusRequest())
    assert status.writable and status.flush_disk_type == "ASYNC_FLUSH"
    assert status.commit_log_max_offset > 0
    route = client.msg.QueryRoute(messaging_pb2.QueryRouteRequest(topic="adm"))
    assert (
        route.exists
        and route.read_queue_nums == 2
        and route.endpoint.endswith(status.endpoint.rpartition(":")[2])
    )


def test_consumer_offsets_survive_a_restart(daemons: Daemons, tmp_path: Path) -> None:
    with daemons.broker(tmp_path, settings=SMALL_STORE) as broker:
        client = Client(broker.endpoint)
        client.send("keep", b"x", b"y", b"z")
        client.msg.UpdateConsumerOffset(
            messaging_pb2.UpdateConsumerOffsetRequest(
                consumer_group="g1", topic="keep", queue_id=0, offset=2
            )
        )
        client.close()
        assert broker.stop() == 0
        broker.start()
        client = Client(broker.endpoint)
        query = messaging_pb2.QueryConsumerOffsetRequest(consumer_group="g1", topic="keep")
        assert client.msg.QueryConsumerOffset(query).offset == 2
        pulled = client.pull("keep", 2, group="g1")
        assert [m.body for m in pulled.messages] == [b"z"]
        client.close()
    assert (broker.store_dir / "config" / "consumerOffset.json").exists()


def test_graceful_shutdown_answers_parked_pulls_and_exits_0(
    daemons: Daemons,
) -> None:
    broker = daemons.broker(settings=SMALL_STORE)
    client = Client(broker.endpoint)
    replies: list[messaging_pb2.PullMessageResponse] = []
    threads = [
        threading.Thread(
            target=lambda q=q: replies.append(client.pull("idle", queue_id=q, max_wait_ms=20_000))
        )
        for q in range(3)
    ]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    assert (broker.store_dir / "abort").exists()
    started = time.monotonic()
    assert broker.stop() == 0
    for thread in threads:
        thread.join(10)
    assert time.monotonic() - started < 10
    assert [r.status for r in replies] == [messaging_pb2.NO_NEW_MSG] * 3
    assert not (broker.store_dir / "abort").exists()
    client.close()


GRPCURL = Path(sys.executable).parent / "grpcurl"


def grpcurl(endpoint: str, target: str, data: dict[str, object] | None = None) -> str:
    """Run the real grpcurl binary: ``target`` is 'list' or 'package.Service/Method'."""
    flags = ["-d", json.dumps(data)] if data is not None else []
    proc = subprocess.run(
        [str(GRPCURL), "-plaintext", *flags, endpoint, target],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_grpcurl_lists_services_and_sends_and_pulls_json(daemon: BrokerProcess) -> None:
    services = grpcurl(daemon.endpoint, "list").split()
    for name in ("wharf.v1.MessagingService", "wharf.v1.AdminService", "grpc.health.v1.Health"):
        assert name in services
    body = base64.b64encode(b"hello grpcurl").decode()
    request = {"topic": "curl", "queueId": 0, "messages": [{"body": body, "tags": "T"}]}
    sent = json.loads(grpcurl(daemon.endpoint, "wharf.v1.MessagingService/SendMessage", request))
    assert sent["results"][0]["status"] == "SEND_OK"
    pull = {"consumerGroup": "curl-group", "topic": "curl", "queueId": 0, "maxWaitMs": 2000}
    pulled = json.loads(grpcurl(daemon.endpoint, "wharf.v1.MessagingService/PullMessage", pull))
    assert pulled["status"] == "FOUND"
    assert base64.b64decode(pulled["messages"][0]["body"]) == b"hello grpcurl"
    assert pulled["messages"][0]["tags"] == "T"
    health = json.loads(grpcurl(daemon.endpoint, "grpc.health.v1.Health/Check"))
    assert health["status"] == "SERVING"


def test_search_offset_progress_and_reset_by_timestamp(client: Client) -> None:
    client.admin.CreateTopic(
        admin_pb2.CreateTopicRequest(name="prog", read_queue_nums=1, write_queue_nums=1)
    )
    client.send("prog", b"old-1", b"old-2")
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    client.send("prog", b"new-1")
    assert client.pull("prog", 2, group="probe", max_wait_ms=5000).messages  # dispatched
    search = messaging_pb2.SearchOffsetRequest(topic="prog", queue_id=0, timestamp=cut)
    assert client.msg.SearchOffset(search).offset == 2
    client.pull("prog", 0, group="pg", commit_offset=1)
    progress = client.admin.GetConsumerProgress(
        admin_pb2.GetConsumerProgressRequest(consumer_group="pg", topic="prog")
    )
    assert [(q.queue_id, q.consumer_offset, q.broker_offset, q.lag) for q in progress.queues] == [
        (0, 1, 3, 2)
    ]
    assert progress.total_lag == 2
    reset = client.admin.ResetConsumerOffset(
        admin_pb2.ResetConsumerOffsetRequest(consumer_group="pg", topic="prog", timestamp=cut)
    )
    assert dict(reset.offsets) == {0: 2}
    query = messaging_pb2.QueryConsumerOffsetRequest(consumer_group="pg", topic="prog")
    assert client.msg.QueryConsumerOffset(query).offset == 2


def test_health_goes_not_serving_on_sigterm_and_a_second_signal_forces_exit(
    daemons: Daemons,
) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    # A long grace period keeps the first shutdown waiting on the open Watch stream.
    broker = daemons.broker(settings={**SMALL_STORE, "shutdownGracePeriod": 60_000})
    channel = grpc.insecure_channel(broker.endpoint)
    watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(), timeout=60)
    assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
    assert broker.proc is not None
    broker.proc.send_signal(signal.SIGTERM)
    assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
    time.sleep(0.3)
    assert broker.proc.poll() is None  # still draining: the grace period holds the stream
    broker.proc.send_signal(signal.SIGTERM)
    assert broker.proc.wait(10) == 130
    channel.close()


def test_a_full_pull_fits_a_plain_grpc_client_default_4_mib_limit(client: Client) -> None:
    body = b"x" * 4096
    for _ in range(40):  # 1280 x 4 KiB = 5 MiB in the queue (batches fit a 256 KiB segment)
        client.send("big-pull", *([body] * 32))
    reply = client.pull("big-pull", max_messages=1024, max_wait_ms=5000)  # default 4 MiB limit
    assert reply.status == messaging_pb2.FOUND
    assert 600 < len(reply.messages) < 1024  # cut by maxPullBytes, not by the count
    assert reply.ByteSize() < 4 * 1024 * 1024


def _pull_into(client: Client, result: dict[str, Any], topic: str, offset: int) -> None:
    result["reply"] = client.pull(topic, offset, max_wait_ms=5000)


def test_long_poll_at_the_offset_after_a_fresh_ack_parks_instead_of_offset_illegal(
    client: Client,
) -> None:
    for round_ in range(5):  # acks precede dispatch: the pull may arrive before the message
        ack = client.send(f"fresh-ack-{round_}", b"first").results[0]
        result: dict[str, messaging_pb2.PullMessageResponse] = {}
        thread = threading.Thread(
            target=_pull_into, args=(client, result, f"fresh-ack-{round_}", ack.queue_offset + 1)
        )
        thread.start()
        time.sleep(0.2)
        client.send(f"fresh-ack-{round_}", b"second")
        thread.join(10)
        assert result["reply"].status == messaging_pb2.FOUND
        assert [m.body for m in result["reply"].messages] == [b"second"]


def test_a_queue_file_removed_while_down_fails_that_queue_until_a_restart_rebuilds_it(
    daemons: Daemons, tmp_path: Path
) -> None:
    """Through the daemon: after a clean stop, a queue's file goes; the start (from the
    positions journal) serves, a pull of that queue gets DATA_LOSS naming it, sends to it and
    the other queues are stored and the others dispatched; the next restart rebuilds it."""
    with daemons.broker(tmp_path, settings=SMALL_STORE) as broker:
        client = Client(broker.endpoint)
        client.send("hurt", b"a", b"b", b"c")
        client.send("fine", b"x")
        client.close()
        assert broker.stop() == 0
        for path in (broker.store_dir / "consumequeue" / "hurt" / "0").iterdir():
            path.unlink()
        broker.start()
        client = Client(broker.endpoint)
        with pytest.raises(grpc.RpcError) as refused:
            client.pull("hurt")
        assert refused.value.code() == grpc.StatusCode.DATA_LOSS
        assert "consume queue hurt/0 is damaged" in str(refused.value.details())
        client.send("hurt", b"d")
        client.send("fine", b"y")
        assert [m.body for m in client.pull("fine", max_wait_ms=5000).messages] == [b"x", b"y"]
        client.close()
        assert broker.stop() == 0
        broker.start()
        client = Client(broker.endpoint)
        assert [m.body for m in client.pull("hurt").messages] == [b"a", b"b", b"c", b"d"]
        client.close()
