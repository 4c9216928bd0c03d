"""The wire port (wharf.wire, broker/frontends/wire/) against the real daemon: the same calls and errors
as gRPC, the SDK end to end over it (ordering, long-poll wake-up, a broker restart), ACL and
TLS on it, bad peers refused with a clear error while the broker goes on, a frame over the
limit, a stalled reader holding bounded memory, and the setting's start-up errors."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from wharf import wire
from wharf.broker.kit.tls.certs import fingerprint_sha256
from wharf.broker.kit.tls.contexts import CHECK_S
from wharf.client import (
    ConsumeResult,
    Producer,
    PullConsumer,
    PushConsumer,
    ReceivedMessage,
    UnauthenticatedError,
)
from wharf.client.admin import Admin
from wharf.client.channel import open_channel
from wharf.client.errors import InvalidArgumentError, PermissionDeniedError, UnavailableError
from wharf.client.wire_channel import WireChannel
from wharf.rocketmq.v2 import service_pb2 as v2_pb2
from wharf.rocketmq.v2 import service_pb2_grpc as v2_grpc
from wharf.v1 import messaging_pb2, messaging_pb2_grpc

from tests.broker.acl_helpers import ACL_SETTINGS, ADMIN, NOBODY, PRODUCER, TOPIC, write_acl
from tests.broker.test_pull_stream import growth_behind_a_stalled_reader, parked_pulls
from tests.broker.test_tls import replace_atomically, served_fingerprint
from tests.client.conftest import BROKER_SETTINGS
from tests.harness import REPO_ROOT, BrokerProcess, Daemons, free_port
from tests.tls_certs import CertAuthority

# Small files (start-up stays cheap), two queues a topic.
SMALL = {**BROKER_SETTINGS, "defaultTopicQueueNums": 2}


@pytest.fixture(scope="module")
def broker(module_daemons: Daemons, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    with module_daemons.broker(tmp_path_factory.mktemp("wire"), settings=SMALL) as process:
        yield process


def wire_target(broker: BrokerProcess) -> str:
    return broker.wire_endpoint.removeprefix(wire.SCHEME)


async def test_the_ready_file_names_the_wire_port_and_it_serves_the_grpc_methods(
    broker: BrokerProcess,
) -> None:
    assert broker.wire_endpoint.startswith("wire://127.0.0.1:")
    async with WireChannel(wire_target(broker)) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        sent = await stub.SendMessage(
            messaging_pb2.SendMessageRequest(
                topic="WireUnary", queue_id=1, messages=[{"body": b"u1"}]
            ),
            timeout=10,
        )
        assert sent.results[0].status == messaging_pb2.SEND_OK
        assert (sent.results[0].queue_id, sent.results[0].queue_offset) == (1, 0)
        pulled = await stub.PullMessage(
            messaging_pb2.PullMessageRequest(
                consumer_group="g", topic="WireUnary", queue_id=1, queue_offset=0
            ),
            timeout=10,
        )
        assert pulled.status == messaging_pb2.FOUND
        assert [m.body for m in pulled.messages] == [b"u1"]
        # A reply of default fields only is zero bytes long and still a reply.
        committed = await stub.UpdateConsumerOffset(
            messaging_pb2.UpdateConsumerOffsetRequest(
                consumer_group="g", topic="WireUnary", queue_id=1, offset=1
            ),
            timeout=10,
        )
        assert committed.ByteSize() == 0
        # The RocketMQ 5 service is there too (every service the gRPC port serves).
        v2 = v2_grpc.MessagingServiceStub(channel)
        route = await v2.QueryRoute(
            v2_pb2.QueryRouteRequest(topic={"name": "WireUnary"}),
            timeout=10,
            metadata=(("x-mq-client-id", "wire-test"),),  # metadata travels too
        )
        assert route.status.code == 20000 and len(route.message_queues) >= 2
        # Its connection shows in the metrics.
        url = f"http://{broker.metrics_endpoint}/metrics"
        text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read())
        assert re.search(rb"^wharf_wire_connections ([1-9]\d*)\.0$", text, re.M), text[-500:]


async def test_errors_carry_the_grpc_status_and_message(broker: BrokerProcess) -> None:
    async with WireChannel(wire_target(broker)) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await stub.SendMessage(messaging_pb2.SendMessageRequest(topic="T"), timeout=10)
        assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "messages is empty" in (bad.value.details() or "")
        # A request that does not parse: INVALID_ARGUMENT naming the type, as over gRPC.
        raw = channel.unary_unary(
            "/wharf.v1.MessagingService/SendMessage",
            request_serializer=None,
            response_deserializer=messaging_pb2.SendMessageResponse.FromString,
        )
        with pytest.raises(grpc.aio.AioRpcError) as garbled:
            await raw(b"\xff\xff\xff", timeout=10)
        assert garbled.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "wharf.v1.SendMessageRequest" in (garbled.value.details() or "")
        unknown = channel.unary_unary("/wharf.v1.MessagingService/Nope")
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await unknown(b"", timeout=10)
        assert missing.value.code() is grpc.StatusCode.UNIMPLEMENTED
        # The connection survived every error (its own topic: the test runs alone too).
        sent = await stub.SendMessage(
            messaging_pb2.SendMessageRequest(topic="WireErrors", messages=[{"body": b"e"}]),
            timeout=10,
        )
        assert sent.results[0].status == messaging_pb2.SEND_OK
        route = await stub.QueryRoute(messaging_pb2.QueryRouteRequest(topic="WireErrors"))
        assert route.exists and route.write_queue_nums == 2


async def test_sdk_end_to_end_over_the_wire_in_order_with_long_poll_wake_up(
    broker: BrokerProcess,
) -> None:
    endpoint = broker.wire_endpoint
    got: list[tuple[int, bytes]] = []
    done = asyncio.Event()

    async def handler(message: ReceivedMessage) -> ConsumeResult:
        got.append((message.queue_offset, message.body))
        if len(got) == 40:
            done.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(endpoint, "wire-push", handler=handler, consume_from_where="LAST")
    consumer.subscribe("WireOrder", "*")
    async with Admin(endpoint) as admin:
        await admin.create_topic("WireOrder", queue_nums=2)
    async with Producer(endpoint) as producer, consumer:
        await asyncio.sleep(1.0)  # the consumer's pulls are parked (caught up)
        started = time.monotonic()
        for i in range(40):  # one queue: queue order is send order
            await producer.send("WireOrder", b"m%02d" % i, queue_id=0)
        await asyncio.wait_for(done.wait(), 20)
        woken_after = time.monotonic() - started
    assert [body for _, body in got] == [b"m%02d" % i for i in range(40)]
    assert [offset for offset, _ in got] == list(range(40))
    assert woken_after < 10  # parked pulls were woken, not left to their 20 s poll
    async with PullConsumer(endpoint, "wire-pull") as puller:
        queues = await puller.queues("WireOrder")
        result = await puller.pull(queues[0], 0, max_messages=100)
        assert [m.body for m in result.messages] == [b"m%02d" % i for i in range(40)]
    async with Admin(endpoint) as admin:
        stats = await admin.topic_stats("WireOrder")
        assert stats.total_messages == 40


async def test_a_dead_broker_is_unavailable_and_a_restart_is_picked_up(
    daemons: Daemons, tmp_path: Path
) -> None:
    port = free_port()
    extra = ["--wire-listen", f"127.0.0.1:{port}"]
    with daemons.broker(tmp_path, settings=SMALL, extra_args=extra) as broker:
        endpoint = broker.wire_endpoint
        assert endpoint == f"wire://127.0.0.1:{port}"
        got: list[bytes] = []

        async def handler(message: ReceivedMessage) -> ConsumeResult:
            got.append(message.body)
            return ConsumeResult.SUCCESS

        consumer = PushConsumer(endpoint, "wire-restart", handler=handler, long_poll_ms=2000)
        consumer.subscribe("WireRestart", "*")
        async with Admin(endpoint) as admin:
            await admin.create_topic("WireRestart", queue_nums=2)
        async with Producer(endpoint, send_timeout=20) as producer, consumer:
            await producer.send("WireRestart", b"before")
            await _until(lambda: got == [b"before"])
            broker.kill()
            with pytest.raises(UnavailableError):
                async with Producer(endpoint, retry_times=0) as lone:
                    await lone.send("WireRestart", b"lost", deadline_s=2)
            broker.start()
            await producer.send("WireRestart", b"after")  # retried on a new connection
            await _until(lambda: got[-1:] == [b"after"], 30)
        assert got[0] == b"before" and got[-1] == b"after"
        # What was acknowledged before the kill -9 is still stored after it.
        async with PullConsumer(endpoint, "wire-restart-audit") as puller:
            stored = []
            for queue in await puller.queues("WireRestart"):
                stored += [m.body for m in (await puller.pull(queue, 0, max_messages=32)).messages]
        assert b"before" in stored and b"after" in stored


async def test_sync_flush_sends_over_the_wire_survive_kill_9_in_order(
    daemons: Daemons, tmp_path: Path
) -> None:
    """SYNC_FLUSH over the wire port: the send stream takes requests in the connection's read
    callback (lone sends) and through its reader (concurrent ones beyond what one read holds);
    every acknowledged message is stored in send order per queue and still there after
    kill -9."""
    port = free_port()
    settings = {**SMALL, "flushDiskType": "SYNC_FLUSH"}
    extra = ["--wire-listen", f"127.0.0.1:{port}"]
    with daemons.broker(tmp_path, settings=settings, extra_args=extra) as broker:
        endpoint = broker.wire_endpoint
        async with Producer(endpoint) as producer:
            lone = [await producer.send("WireSync", b"l%02d" % i, queue_id=0) for i in range(20)]
            burst = await asyncio.gather(
                *(producer.send("WireSync", b"b%02d" % i, queue_id=1) for i in range(200))
            )
        assert [r.queue_offset for r in lone] == list(range(20))
        assert sorted(r.queue_offset for r in burst) == list(range(200))
        broker.kill()
        broker.start()
        async with PullConsumer(endpoint, "wire-sync-audit") as puller:
            queues = {q.queue_id: q for q in await puller.queues("WireSync")}
            first = await puller.pull(queues[0], 0, max_messages=64)
            assert [m.body for m in first.messages] == [b"l%02d" % i for i in range(20)]
            second: list[ReceivedMessage] = []
            offset = 0
            while len(second) < 200:
                result = await puller.pull(queues[1], offset, max_messages=256)
                assert result.messages, "acknowledged messages missing after kill -9"
                second += result.messages
                offset = result.next_begin_offset
        by_offset = {m.queue_offset: m.body for m in second}
        assert sorted(by_offset.values()) == sorted(b"b%02d" % i for i in range(200))
        assert {r.queue_offset: r.msg_id for r in burst} == {
            m.queue_offset: m.msg_id for m in second
        }


async def _until(check, within_s: float = 15) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything the peer sends until it closes (a reset counts as closed: a peer that
    closes with our bytes unread resets the connection), however the bytes are split."""
    received = bytearray()
    while True:
        try:
            chunk = sock.recv(4096)
        except ConnectionResetError:
            return bytes(received)
        if not chunk:
            return bytes(received)
        received += chunk


def test_bad_peers_get_a_clear_error_and_the_broker_goes_on(broker: BrokerProcess) -> None:
    host, port = wire_target(broker).rsplit(":", 1)
    for garbage in (b"GET / HTTP/1.1\r\n\r\n", wire.HTTP2_PREFACE, os.urandom(64)):
        with socket.create_connection((host, int(port)), timeout=15) as sock:
            sock.sendall(garbage)
            # The broker's own preface, nothing else, then it closes the connection.
            assert _read_until_closed(sock) == wire.PREFACE
    # A frame over the limit (grpcMaxMessageSize): the connection ends before it is buffered.
    with socket.create_connection((host, int(port)), timeout=15) as sock:
        sock.sendall(wire.PREFACE + wire.header(wire.MESSAGE, 1, 1 << 30))
        assert _read_until_closed(sock) == wire.PREFACE
    log = broker.log()
    assert "the peer speaks HTTP/2 (gRPC)" in log and "over this side's limit" in log
    assert "Traceback" not in log

    async def both_ways() -> tuple[str, str]:
        # The SDK pointed at the wrong port either way gets UNAVAILABLE naming the mix-up.
        async with Producer(f"wire://{broker.endpoint}", retry_times=0) as producer:
            with pytest.raises(UnavailableError) as to_grpc:
                await producer.send("T", b"x", deadline_s=5)
        async with Producer(wire_target(broker), retry_times=0) as producer:
            with pytest.raises(UnavailableError) as to_wire:
                await producer.send("T", b"x", deadline_s=5)
        return str(to_grpc.value), str(to_wire.value)

    to_grpc, _ = asyncio.run(both_ways())
    assert "speaks HTTP/2 (gRPC)" in to_grpc
    sent = asyncio.run(_send_one(broker.wire_endpoint))  # and the broker serves on
    assert sent == "SEND_OK"


async def _send_one(endpoint: str, **kwargs: object) -> str:
    async with Producer(endpoint, **kwargs) as producer:  # type: ignore[arg-type]
        return str((await producer.send(TOPIC, b"x", deadline_s=10)).status.name)


def test_acl_holds_on_the_wire_port(daemons: Daemons, tmp_path: Path) -> None:
    write_acl(tmp_path / "store")
    with daemons.broker(tmp_path, settings=ACL_SETTINGS) as broker:
        endpoint = broker.wire_endpoint
        with pytest.raises(UnauthenticatedError):
            asyncio.run(_send_one(endpoint, retry_times=0))
        with pytest.raises(PermissionDeniedError) as denied:
            asyncio.run(_send_one(endpoint, access_key=NOBODY[0], secret_key=NOBODY[1]))
        assert "nobody" in str(denied.value) and TOPIC in str(denied.value)
        ok = asyncio.run(_send_one(endpoint, access_key=PRODUCER[0], secret_key=PRODUCER[1]))
        assert ok == "SEND_OK"

        async def admin_count() -> int:
            async with Admin(endpoint, access_key=ADMIN[0], secret_key=ADMIN[1]) as admin:
                for _ in range(100):  # stats count dispatched messages: dispatch trails acks
                    total = (await admin.topic_stats(TOPIC)).total_messages
                    if total:
                        return total
                    await asyncio.sleep(0.05)
                return 0

        assert asyncio.run(admin_count()) == 1


def test_tls_port_serves_the_wire_over_tls(daemons: Daemons, tmp_path: Path) -> None:
    with daemons.broker(tmp_path, settings={**SMALL, "tlsEnable": True}) as broker:
        ca = tmp_path / "store" / "config" / "tls" / "broker.crt"
        assert json.loads((tmp_path / "ready.json").read_text())["wire"]
        log = broker.log()
        assert "wire port on" in log and "(TLS;" in log

        async def round_trip() -> list[bytes]:
            got: list[bytes] = []
            async with Producer(broker.wire_endpoint, ca_file=ca) as producer:
                await producer.send("WireTls", b"secret", queue_id=0)
            async with PullConsumer(broker.wire_endpoint, "wtls", ca_file=ca) as puller:
                queues = await puller.queues("WireTls")
                result = await puller.pull(queues[0], 0)
                got += [m.body for m in result.messages]
            return got

        assert asyncio.run(round_trip()) == [b"secret"]
        with pytest.raises(UnavailableError) as plain:  # a plaintext client: told why
            asyncio.run(_send_one(broker.wire_endpoint, retry_times=0))
        assert "TLS" in str(plain.value) or "lost" in str(plain.value)


def test_the_default_wire_port_is_the_listen_port_plus_two(
    daemons: Daemons, tmp_path: Path
) -> None:
    port = free_port()
    settings = {**SMALL, "wireListen": ""}  # the default: derived from listen
    extra = ["--listen", f"127.0.0.1:{port}"]
    with daemons.broker(tmp_path, settings=settings, extra_args=extra) as broker:
        assert broker.wire_endpoint == f"wire://127.0.0.1:{port + 2}"
        assert asyncio.run(_send_one(broker.wire_endpoint)) == "SEND_OK"


def test_wire_listen_off_and_a_taken_port(daemons: Daemons, tmp_path: Path) -> None:
    with daemons.broker(tmp_path / "off", settings={**SMALL, "wireListen": "off"}) as broker:
        assert broker.wire_endpoint == ""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        failed = daemons.broker(
            tmp_path / "taken", settings={**SMALL, "wireListen": f"127.0.0.1:{port}"}, start=False
        )
        with pytest.raises(RuntimeError):
            failed.start(timeout=30)
        assert f"cannot listen on 127.0.0.1:{port} (wireListen" in failed.log()
        failed.kill()
    bad = daemons.broker(tmp_path / "bad", settings={**SMALL, "wireListen": "nowhere"}, start=False)
    with pytest.raises(RuntimeError):
        bad.start(timeout=30)
    assert "wireListen" in bad.log()


STALLED_WIRE_STREAM = """
import asyncio, sys
from wharf.client.wire_channel import WireChannel
from wharf.v1 import messaging_pb2
async def main():
    channel = WireChannel(sys.argv[1])
    call = channel.stream_stream("/wharf.v1.MessagingService/PullMessageStream",
        response_deserializer=messaging_pb2.PullMessageResponse.FromString)()
    for i in range(int(sys.argv[2])):
        await call.write(messaging_pb2.PullMessageRequest(
            request_id=i + 1, consumer_group="stalled", topic="Big", queue_id=0, queue_offset=0,
            max_messages=1024, max_wait_ms=30000, raw_records=True).SerializeToString())
    await call.read()
    print("reading", flush=True)
    await asyncio.sleep(600)
asyncio.run(main())
"""


@pytest.mark.slow
def test_a_wire_stream_that_stops_reading_holds_bounded_memory(
    daemons: Daemons, tmp_path: Path
) -> None:
    settings = {**SMALL, "maxMessageSize": 1 << 20, "defaultTopicQueueNums": 1}
    with daemons.broker(tmp_path, settings=settings) as broker:
        bodies = [os.urandom(500_000) for _ in range(8)]

        async def fill() -> None:
            async with Producer(broker.wire_endpoint) as producer:
                for body in bodies:
                    await producer.send("Big", body)

        asyncio.run(fill())
        stalled = subprocess.Popen(
            [sys.executable, "-c", STALLED_WIRE_STREAM, wire_target(broker), "400"],
            stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT,
        )  # fmt: skip
        try:
            grown = growth_behind_a_stalled_reader(broker, stalled)
            # Unbounded, 400 replies of ~3 MiB would queue (1.2 GB); the stream holds at most
            # maxUnreadPullBytesPerClient (16 MiB) + the socket's 1 MiB write buffer.
            assert grown < 100, f"broker grew {grown:.0f} MiB for one stalled wire stream"

            async def other() -> int:  # another consumer is served at once
                async with PullConsumer(broker.wire_endpoint, "healthy") as puller:
                    queues = await puller.queues("Big")
                    result = await puller.pull(queues[0], 0, max_messages=8)
                    assert result.messages[0].body == bodies[0]
                    return len(result.messages)

            assert asyncio.run(other()) == 6  # 3 MiB maxPullBytes
        finally:
            stalled.kill()
            stalled.wait()


class WirePullStream:
    """One PullMessageStream call on the wire port, read stream message by stream message (a
    coalesced ``batch`` is one message: which replies went out together shows)."""

    def __init__(self, channel: WireChannel) -> None:
        self.call = channel.stream_stream(
            "/wharf.v1.MessagingService/PullMessageStream",
            request_serializer=messaging_pb2.PullMessageRequest.SerializeToString,
            response_deserializer=messaging_pb2.PullMessageResponse.FromString,
        )(timeout=60)

    async def pull(self, request_id: int, **fields: object) -> None:
        await self.call.write(
            messaging_pb2.PullMessageRequest(request_id=request_id, consumer_group="g", **fields)
        )

    async def message(self) -> list[messaging_pb2.PullMessageResponse]:
        """The replies of the next stream message; [] when the call has ended."""
        message = await asyncio.wait_for(self.call.read(), 15)
        if message is grpc.aio.EOF:
            return []
        return list(message.batch) or [message]


async def test_a_woken_pull_writes_its_reply_at_once_and_the_ones_behind_it_stay_in_order(
    broker: BrokerProcess,
) -> None:
    """A pull woken from a long poll whose reply is ready while the stream's writer is idle
    writes it itself; pulls completing in the same loop step behind it queue and go out
    batched after it: each answered once, in the order they completed (the order they parked
    in). Pulls answered without parking are batched as before."""
    topic = "WireDirect"
    async with WireChannel(wire_target(broker)) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)

        async def send(body: bytes, queue_id: int) -> None:
            request = messaging_pb2.SendMessageRequest(
                topic=topic, queue_id=queue_id, messages=[{"body": body}]
            )
            sent = await stub.SendMessage(request, timeout=10)
            assert sent.results[0].status == messaging_pb2.SEND_OK

        stream = WirePullStream(channel)
        base = await asyncio.to_thread(parked_pulls, broker)
        for request_id in range(1, 21):  # all parked on one queue: woken in one step
            await stream.pull(request_id, topic=topic, queue_offset=0, max_wait_ms=20_000)
        await stream.pull(21, topic=topic, queue_id=1, queue_offset=0, max_wait_ms=20_000)
        await _until(lambda: parked_pulls(broker) == base + 21)
        await send(b"lone", queue_id=1)
        lone = await stream.message()
        assert [(r.request_id, [m.body for m in r.messages]) for r in lone] == [(21, [b"lone"])]
        await send(b"many", queue_id=0)
        messages = [await stream.message()]
        while sum(map(len, messages)) < 20:
            messages.append(await stream.message())
        replies = [reply for message in messages for reply in message]
        assert [r.request_id for r in replies] == list(range(1, 21))
        assert all([m.body for m in r.messages] == [b"many"] for r in replies)
        # The first woken wrote its own reply at once; the rest were queued and coalesced.
        assert len(messages[0]) == 1 and max(map(len, messages[1:])) > 1
        # Pulls answered without parking stay batched with their request's neighbours: the
        # five of one request message go out as one reply message.
        await stream.call.write(
            messaging_pb2.PullMessageRequest(
                batch=[
                    messaging_pb2.PullMessageRequest(
                        request_id=request_id, consumer_group="g", topic=topic, queue_offset=0
                    )
                    for request_id in range(22, 27)
                ]
            )
        )
        assert [r.request_id for r in await stream.message()] == list(range(22, 27))
        # Ready at once, one request message each: answered, each once, in order.
        for request_id in range(27, 47):
            await stream.pull(request_id, topic=topic, queue_offset=0)
        answered: list[int] = []
        while len(answered) < 20:
            answered += [r.request_id for r in await stream.message()]
        assert answered == list(range(27, 47))
        await stream.call.done_writing()
        assert await stream.message() == []  # and the call ends


async def test_many_pulls_on_one_wire_stream_are_each_answered_once(
    broker: BrokerProcess,
) -> None:
    """240 pulls on one stream while messages arrive: answered at once, parked and woken
    alone or with others, beyond the 64 in flight: every one answered exactly once, with the
    message at its offset, whether its reply was written directly or queued."""
    topic, pulls = "WireDirectMix", 240
    rng = random.Random(5)
    async with WireChannel(wire_target(broker)) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        stream = WirePullStream(channel)
        produced = [0, 0]  # acknowledged messages per queue: a pull at that offset parks
        wanted: dict[int, tuple[int, int]] = {}
        requested = asyncio.Event()

        async def send_round() -> None:
            for queue_id in (0, 1):
                body = b"%d-%d" % (queue_id, produced[queue_id])
                request = messaging_pb2.SendMessageRequest(
                    topic=topic, queue_id=queue_id, messages=[{"body": body}]
                )
                sent = await stub.SendMessage(request, timeout=10)
                assert sent.results[0].queue_offset == produced[queue_id]
                produced[queue_id] += 1

        async def produce() -> None:
            while not requested.is_set():
                await send_round()
                await asyncio.sleep(0.002)
            await send_round()  # wakes the pulls parked at the end

        async def request() -> None:
            for request_id in range(1, pulls + 1):
                queue_id = request_id % 2
                end = produced[queue_id]  # at the end (parks) or up to 3 before it (at once)
                wanted[request_id] = queue_id, rng.randint(max(0, end - 3), end)
                await stream.pull(
                    request_id, topic=topic, queue_id=queue_id,
                    queue_offset=wanted[request_id][1], max_messages=1, max_wait_ms=20_000,
                )  # fmt: skip
                if request_id % 8 == 0:
                    await asyncio.sleep(0.001)
            requested.set()

        await send_round()
        got, _, _ = await asyncio.gather(_replies(stream, pulls), produce(), request())
        assert sorted(got) == sorted(wanted) and all(len(r) == 1 for r in got.values())
        for request_id, (queue_id, offset) in wanted.items():
            (reply,) = got[request_id]
            assert reply.status == messaging_pb2.FOUND, (request_id, reply)
            assert [(m.queue_offset, m.body) for m in reply.messages] == [
                (offset, b"%d-%d" % (queue_id, offset))
            ]
        await stream.call.done_writing()
        assert await stream.message() == []


async def test_an_arrival_wakes_every_pull_parked_on_its_queue_beyond_those_answered_in_place(
    broker: BrokerProcess,
) -> None:
    """40 pulls parked at one queue's end, more than the 16 an arrival answers in place
    (broker/core/long_poll.py MAX_IN_PLACE): one message wakes them all, the rest through their own
    tasks, and each gets it once."""
    topic, pulls = "WireManyParked", 40
    async with WireChannel(wire_target(broker)) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        stream = WirePullStream(channel)

        async def send(body: bytes) -> int:
            request = messaging_pb2.SendMessageRequest(
                topic=topic, queue_id=0, messages=[{"body": body}]
            )
            return int((await stub.SendMessage(request, timeout=10)).results[0].queue_offset)

        end = await send(b"first") + 1
        for request_id in range(1, pulls + 1):
            await stream.pull(
                request_id, topic=topic, queue_id=0, queue_offset=end, max_messages=1,
                max_wait_ms=30_000,
            )  # fmt: skip
        with pytest.raises(TimeoutError):  # all parked: nothing to answer yet
            await asyncio.wait_for(stream.message(), 0.5)
        assert await send(b"wakes them") == end

        got = await asyncio.wait_for(_replies(stream, pulls), 10)  # not a forgotten 30 s poll
        assert sorted(got) == list(range(1, pulls + 1))
        for replies in got.values():
            assert [(m.queue_offset, m.body) for r in replies for m in r.messages] == [
                (end, b"wakes them")
            ]
        await stream.call.done_writing()
        assert await stream.message() == []


async def _replies(
    stream: WirePullStream, pulls: int
) -> dict[int, list[messaging_pb2.PullMessageResponse]]:
    """Replies read from ``stream`` by request id, until ``pulls`` of them came."""
    got: dict[int, list[messaging_pb2.PullMessageResponse]] = {}
    while sum(map(len, got.values())) < pulls:
        for reply in await stream.message():
            got.setdefault(reply.request_id, []).append(reply)
    return got


def test_open_channel_picks_the_transport_by_scheme() -> None:
    async def kinds() -> tuple[str, str]:
        wire_channel = open_channel("wire://127.0.0.1:1")
        grpc_channel = open_channel("127.0.0.1:1")
        try:
            return type(wire_channel).__name__, type(grpc_channel).__name__
        finally:
            await wire_channel.close()
            await grpc_channel.close()

    assert asyncio.run(kinds()) == ("WireChannel", "Channel")
    with pytest.raises(InvalidArgumentError):
        open_channel("wire://nope")


def test_calls_open_on_one_connection_are_bounded(broker: BrokerProcess) -> None:
    """Unary calls opened and never given their request hold a slot each: beyond 10,000 on
    one connection an OPEN gets RESOURCE_EXHAUSTED, and the connection goes on."""
    host, port = wire_target(broker).rsplit(":", 1)
    opening = wire.encode_open("/wharf.v1.MessagingService/QueryRoute", (), None)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            wire.PREFACE + b"".join(wire.frame(wire.OPEN, i, opening) for i in range(1, 10_002))
        )
        reader = wire.FrameReader(1 << 20)
        frames: list[tuple[int, int, bytes]] = []
        while not frames:
            frames = reader.feed(sock.recv(65536))
        kind, call_id, payload = frames[0]
        assert (kind, call_id) == (wire.STATUS, 10_001)
        code, details = wire.decode_status(payload)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0] and "10000 calls" in details
        # Call 1 still works: its request arrives, its reply comes back.
        request = messaging_pb2.QueryRouteRequest(topic="WireUnary").SerializeToString()
        sock.sendall(wire.frame(wire.MESSAGE, 1, request) + wire.frame(wire.HALF_CLOSE, 1))
        while len(frames) < 3:
            frames += reader.feed(sock.recv(65536))
        assert [(k, i) for k, i, _ in frames[1:3]] == [(wire.MESSAGE, 1), (wire.STATUS, 1)]
        assert wire.decode_status(frames[2][2])[0] == 0


def test_wire_tls_follows_certificate_reloads_and_mutual_tls(
    daemons: Daemons, tmp_path: Path
) -> None:
    ca = CertAuthority.create(tmp_path / "ca")
    first = ca.issue(tmp_path / "first", "first", server=True)
    second = ca.issue(tmp_path / "second", "second", server=True)
    client = ca.issue(tmp_path / "client", "client-a", server=False)
    live = tmp_path / "live"
    live.mkdir()
    cert, key = live / "broker.crt", live / "broker.key"
    replace_atomically(cert, first.cert)
    replace_atomically(key, first.key)
    settings = {
        **SMALL, "tlsEnable": True, "tlsCertPath": str(cert), "tlsKeyPath": str(key),
        "tlsClientAuth": "require", "tlsTrustCertPath": str(ca.cert),
    }  # fmt: skip
    with daemons.broker(tmp_path / "broker", settings=settings) as broker:
        endpoint = broker.wire_endpoint
        mutual = {"ca_file": ca.cert, "cert_file": client.cert, "key_file": client.key}
        assert asyncio.run(_send_one(endpoint, **mutual)) == "SEND_OK"
        with pytest.raises(UnavailableError):  # no client certificate: refused
            asyncio.run(_send_one(endpoint, ca_file=ca.cert, retry_times=0))
        # The files replaced (key first, then the certificate), no gRPC handshake in between:
        # new wire connections are served the new certificate once the port's check (a
        # thread, at most every CHECK_S) has seen it.
        replace_atomically(key, second.key)
        replace_atomically(cert, second.cert)
        fingerprint = fingerprint_sha256(second.cert.read_bytes())
        # (TLS 1.3: the client's side of the handshake ends before the broker checks the
        # client's certificate, so the served certificate is seen without one.)
        deadline = time.monotonic() + CHECK_S + 5
        while served_fingerprint(wire_target(broker), ca.cert) != fingerprint:
            assert time.monotonic() < deadline, "the wire port still serves the old certificate"
            time.sleep(0.05)
        assert "TLS certificate reloaded" in broker.log()
        assert asyncio.run(_send_one(endpoint, **mutual)) == "SEND_OK"
