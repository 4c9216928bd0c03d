"""The SDK's pulls over PullMessageStream against the real daemon: ordering, long-poll wake-up,
cancellation, many pulls beyond the broker's in-flight limit, a broker restart mid-stream, and
the fallback to unary PullMessage against a broker without the stream (UNIMPLEMENTED)."""

from __future__ import annotations

import asyncio
import json
import random
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from wharf.client import (
    ConsumeResult,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
    ReceivedMessage,
)
from wharf.client.consumer.pull import PullStatus
from wharf.client.errors import DeadlineExceededError
from wharf.v1 import messaging_pb2

from tests.client.conftest import BROKER_SETTINGS
from tests.harness import REPO_ROOT, BrokerProcess, Daemons, free_port


def metrics(broker: BrokerProcess) -> str:
    url = f"http://{broker.metrics_endpoint}/metrics"
    return str(urllib.request.urlopen(url, timeout=10).read().decode())


def parked(broker: BrokerProcess) -> float:
    found = re.search(r"^wharf_long_poll_parked_requests (\S+)$", metrics(broker), re.M)
    assert found is not None
    return float(found.group(1))


def pulls_served(broker: BrokerProcess, method: str = "PullMessageStream") -> float:
    """Pulls of ``method`` the broker answered OK (its per-pull RPC metric)."""
    pattern = rf'^rocketmq_rpc_latency_count\{{method="{method}",status="OK"\}} (\S+)$'
    found = re.search(pattern, metrics(broker), re.M)
    return float(found.group(1)) if found else 0.0


def stream_pulls_served(broker: BrokerProcess) -> float:
    return pulls_served(broker)


@pytest.fixture(params=["grpc", "wire"])
def endpoint(request: pytest.FixtureRequest, broker: BrokerProcess) -> str:
    """The broker's gRPC port, then its wire port: the stream's semantics hold on both."""
    return broker.endpoint if request.param == "grpc" else broker.wire_endpoint


async def test_pull_consumer_reads_in_order_over_the_stream(
    broker: BrokerProcess, endpoint: str, name: str
) -> None:
    before = stream_pulls_served(broker)
    async with Producer(endpoint) as producer, PullConsumer(endpoint, name) as c:
        queue = MessageQueue(name, 0)
        sent = [f"m{i}".encode() for i in range(500)]
        for start in range(0, len(sent), 50):
            await producer.send_batch(name, sent[start : start + 50], queue_id=0)
        got: list[bytes] = []
        offset = 0
        while len(got) < len(sent):
            result = await c.pull(queue, offset, max_messages=64)
            assert [m.queue_offset for m in result.messages] == list(
                range(offset, offset + len(result.messages))
            )
            got.extend(m.body for m in result.messages)
            offset = result.next_begin_offset
        assert got == sent
        # Pulls sized by bytes: 3 records of ~2 bytes of body fit in 300 bytes, not 64.
        sized = await c.pull(queue, 0, max_messages=64, max_bytes=300)
        assert 1 <= len(sized.messages) < 5 and sized.next_begin_offset == len(sized.messages)
    assert stream_pulls_served(broker) - before >= 9  # the pulls went over the stream


async def test_long_poll_wakes_on_send_and_many_pulls_share_one_stream(
    broker: BrokerProcess, endpoint: str, name: str
) -> None:
    async with Producer(endpoint) as producer, PullConsumer(endpoint, name) as c:
        await producer.send(name, b"create", queue_id=0)
        queues = await c.queues(name)
        # One long poll per queue on the one stream, all parked together.
        polls = [
            asyncio.ensure_future(c.pull(q, 1 if q.queue_id == 0 else 0, max_wait_ms=20_000))
            for q in queues
        ]
        await asyncio.sleep(0.3)
        assert not any(p.done() for p in polls)
        started = time.monotonic()
        await producer.send(name, b"wake", queue_id=3)
        woken = await asyncio.wait_for(polls[3], 5.0)
        assert [m.body for m in woken.messages] == [b"wake"]
        assert time.monotonic() - started < 2.0
        assert not any(p.done() for i, p in enumerate(polls) if i != 3)
        for i in range(len(polls)):
            if i != 3:
                await producer.send(name, b"q%d" % i, queue_id=i)
        results = await asyncio.wait_for(asyncio.gather(*polls), 5.0)
        assert [r.messages[-1].body for i, r in enumerate(results) if i != 3] == [
            b"q%d" % i for i in range(len(queues)) if i != 3
        ]


async def test_a_pull_given_up_on_is_cancelled_on_the_broker(
    broker: BrokerProcess, endpoint: str, name: str
) -> None:
    async with Producer(endpoint) as producer, PullConsumer(endpoint, name) as c:
        await producer.send(name, b"x", queue_id=0)
        queue = MessageQueue(name, 0)
        base = parked(broker)
        poll = asyncio.ensure_future(c.pull(queue, 1, max_wait_ms=30_000))
        for _ in range(100):
            if parked(broker) > base:
                break
            await asyncio.sleep(0.05)
        assert parked(broker) == base + 1
        poll.cancel()
        with pytest.raises(asyncio.CancelledError):
            await poll
        for _ in range(100):
            if parked(broker) == base:
                break
            await asyncio.sleep(0.05)
        assert parked(broker) == base  # the cancel reached the broker: nothing stays parked
        again = await c.pull(queue, 0)
        assert [m.body for m in again.messages] == [b"x"]


async def test_a_pull_past_its_timeout_fails_and_leaves_the_stream_usable(
    broker: BrokerProcess, endpoint: str, name: str
) -> None:
    async with Producer(endpoint) as producer, PullConsumer(endpoint, name) as c:
        await producer.send(name, b"y", queue_id=0)
        assert c._pull is not None
        request = messaging_pb2.PullMessageRequest(
            consumer_group=name, topic=name, queue_id=0, queue_offset=1, max_wait_ms=10_000
        )
        with pytest.raises(DeadlineExceededError):
            await c._pull(request, timeout=0.3)
        result = await c.pull(MessageQueue(name, 0), 0)
        assert result.status is PullStatus.FOUND and c._pull.streaming


async def test_more_pulls_than_the_broker_serves_at_once_all_complete(
    daemons: Daemons, tmp_path: Path
) -> None:
    settings = {**BROKER_SETTINGS, "maxInflightStreamRequests": 4, "defaultTopicQueueNums": 16}
    with daemons.broker(tmp_path, settings=settings) as broker:
        async with Producer(broker.endpoint) as producer, PullConsumer(broker.endpoint, "bp") as c:
            await producer.send("bp", b"first", queue_id=0)
            queues = await c.queues("bp")
            # 16 long polls on a stream that serves 4 at a time: the first 4 park and hold
            # their slots; the rest wait in flow control and are served as slots free.
            polls = [asyncio.ensure_future(c.pull(q, 0, max_wait_ms=15_000)) for q in queues]
            await asyncio.sleep(0.3)
            for q in queues[1:]:
                await producer.send("bp", b"q%d" % q.queue_id, queue_id=q.queue_id)
            results = await asyncio.wait_for(asyncio.gather(*polls), 20.0)
        assert [r.messages[0].body for r in results] == [b"first"] + [
            b"q%d" % q.queue_id for q in queues[1:]
        ]


async def test_push_consumer_resumes_over_a_new_stream_after_a_broker_restart(
    daemons: Daemons,
    tmp_path: Path,
) -> None:
    port = free_port()
    broker = daemons.broker(
        tmp_path / "broker",
        settings=BROKER_SETTINGS,
        extra_args=["--listen", f"127.0.0.1:{port}"],
        start=False,
    )
    broker.start()
    try:
        seen: list[bytes] = []

        async def handler(msg: ReceivedMessage) -> ConsumeResult:
            seen.append(msg.body)
            return ConsumeResult.SUCCESS

        consumer = PushConsumer(
            broker.endpoint, "restart-stream", handler=handler, consume_from_where="FIRST",
            rebalance_interval_s=0.5, heartbeat_interval_s=0.2, commit_interval_s=0.2,
            long_poll_ms=5_000,  # long polls in flight on the stream when the broker stops
        )  # fmt: skip
        consumer.subscribe("rs")
        async with Producer(broker.endpoint, send_timeout=10.0) as producer, consumer:
            for i in range(20):
                await producer.send("rs", b"before-%d" % i, queue_id=i % 4)
            for _ in range(200):
                if len(seen) == 20:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # committed; pulls parked again on the stream
            await asyncio.to_thread(broker.stop)
            await asyncio.to_thread(broker.start)
            for i in range(20):
                await producer.send("rs", b"after-%d" % i, queue_id=i % 4)
            for _ in range(300):
                if sum(body.startswith(b"after") for body in seen) == 20:
                    break
                await asyncio.sleep(0.05)
        after = [body for body in seen if body.startswith(b"after")]
        assert sorted(after) == sorted(b"after-%d" % i for i in range(20))
        # Per queue, in order.
        for q in range(4):
            mine = [b for b in after if int(b.split(b"-")[1]) % 4 == q]
            assert mine == sorted(mine, key=lambda b: int(b.split(b"-")[1]))
    finally:
        broker.kill()


class UnaryOnlyProxy:
    """An 'older broker': forwards every unary wharf.v1 MessagingService call to the daemon;
    PullMessageStream (and the other streams) are not served, so gRPC answers UNIMPLEMENTED."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.calls: dict[str, int] = {}

    async def start(self) -> str:
        self._upstream = grpc.aio.insecure_channel(self.target)
        self._server = grpc.aio.server()
        handlers = {}
        for method in messaging_pb2.DESCRIPTOR.services_by_name["MessagingService"].methods:
            if method.client_streaming or method.server_streaming:
                continue
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(self._forward(method.name))
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("wharf.v1.MessagingService", handlers),)
        )
        port = self._server.add_insecure_port("127.0.0.1:0")
        await self._server.start()
        return f"127.0.0.1:{port}"

    def _forward(self, name: str) -> Any:
        call = self._upstream.unary_unary(f"/wharf.v1.MessagingService/{name}")

        async def forward(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            self.calls[name] = self.calls.get(name, 0) + 1
            try:
                return bytes(await call(request, timeout=30))
            except grpc.aio.AioRpcError as exc:
                await context.abort(exc.code(), exc.details() or "")
                raise

        return forward

    async def stop(self) -> None:
        await self._server.stop(None)
        await self._upstream.close()


@pytest.fixture
async def old_broker(broker: BrokerProcess) -> AsyncIterator[tuple[str, UnaryOnlyProxy]]:
    proxy = UnaryOnlyProxy(broker.endpoint)
    endpoint = await proxy.start()
    yield endpoint, proxy
    await proxy.stop()


async def test_consumers_fall_back_to_unary_pulls_against_an_older_broker(
    broker: BrokerProcess, old_broker: tuple[str, UnaryOnlyProxy], name: str
) -> None:
    endpoint, proxy = old_broker
    async with Producer(broker.endpoint) as producer:
        for i in range(10):
            await producer.send(name, b"old-%d" % i, queue_id=0)
        async with PullConsumer(endpoint, name) as c:
            result = await c.pull(MessageQueue(name, 0), 0, max_messages=4)
            assert [m.body for m in result.messages] == [b"old-%d" % i for i in range(4)]
            assert c._pull is not None and not c._pull.streaming
            # Several pulls pending when UNIMPLEMENTED arrives are all re-sent unary.
            more = await asyncio.gather(
                *(c.pull(MessageQueue(name, 0), i, max_messages=1) for i in range(4, 10))
            )
            assert [r.messages[0].body for r in more] == [b"old-%d" % i for i in range(4, 10)]
        seen: list[bytes] = []

        async def handler(msg: ReceivedMessage) -> ConsumeResult:
            seen.append(msg.body)
            return ConsumeResult.SUCCESS

        consumer = PushConsumer(
            endpoint, name, handler=handler, consume_from_where="FIRST",
            heartbeat_interval_s=0.2, long_poll_ms=500,
        )  # fmt: skip
        consumer.subscribe(name)
        async with consumer:
            for _ in range(200):
                if len(seen) == 10:
                    break
                await asyncio.sleep(0.05)
            await producer.send(name, b"late", queue_id=0)  # a long poll (unary) wakes
            for _ in range(200):
                if b"late" in seen:
                    break
                await asyncio.sleep(0.05)
    assert seen == [b"old-%d" % i for i in range(10)] + [b"late"]
    assert proxy.calls["PullMessage"] >= 3


async def test_pulls_cancelled_at_random_never_stall_the_others(
    broker: BrokerProcess, endpoint: str, name: str
) -> None:
    """Cancelled pulls write cancels while other pulls write requests: one write at a time
    (two at once broke the call), and no write is ever cancelled (that cancels the call)."""
    rng = random.Random(7)
    async with Producer(endpoint) as producer, PullConsumer(endpoint, name) as c:
        await producer.send(name, b"z", queue_id=0)
        queues = await c.queues(name)

        async def loop(queue: MessageQueue) -> int:
            answered = 0
            for _ in range(12):
                poll = asyncio.ensure_future(c.pull(queue, 1, max_wait_ms=200))
                if rng.random() < 0.4:
                    await asyncio.sleep(rng.random() * 0.01)
                    poll.cancel()
                try:
                    await asyncio.wait_for(poll, 5.0)
                    answered += 1
                except asyncio.CancelledError:
                    pass
            return answered

        answered = await asyncio.gather(*(loop(q) for q in queues))
        assert sum(answered) > 0
        assert c._pull is not None and c._pull.streaming
        assert (await c.pull(MessageQueue(name, 0), 0)).messages[0].body == b"z"
    for _ in range(100):
        if parked(broker) == 0:
            break
        await asyncio.sleep(0.05)
    assert parked(broker) == 0


async def test_wharf_consume_reads_over_the_stream(
    broker: BrokerProcess, endpoint: str, name: str
) -> None:
    async with Producer(endpoint) as producer:
        await producer.send_batch(name, [b"c%d" % i for i in range(5)], queue_id=0)
    streamed, unary = pulls_served(broker), pulls_served(broker, "PullMessage")
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "wharf.client.cli.main", "--endpoints", endpoint,
         "--json", "consume", name],
        capture_output=True, text=True, timeout=60, cwd=REPO_ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    bodies = [json.loads(line)["body"] for line in proc.stdout.splitlines() if line.strip()]
    assert bodies == [f"c{i}" for i in range(5)]
    assert pulls_served(broker) > streamed
    assert pulls_served(broker, "PullMessage") == unary  # no unary pull
