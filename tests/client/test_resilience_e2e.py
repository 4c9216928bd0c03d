"""The SDK survives a broker restart on the same address: producers retry on a new stream,
push consumers re-register and resume from their committed offsets."""

from __future__ import annotations

import asyncio
from pathlib import Path

from wharf.client import (
    ConsumeResult,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
    ReceivedMessage,
)

from tests.client.conftest import BROKER_SETTINGS
from tests.harness import Daemons, free_port


async def test_producer_and_push_consumer_continue_across_a_broker_restart(
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
        assert broker.endpoint.endswith(f":{port}")
        seen: list[bytes] = []

        async def handler(msg: ReceivedMessage) -> ConsumeResult:
            seen.append(msg.body)
            return ConsumeResult.SUCCESS

        consumer = PushConsumer(
            broker.endpoint, "survivors", handler=handler, consume_from_where="FIRST",
            rebalance_interval_s=0.5, heartbeat_interval_s=0.2, commit_interval_s=0.2,
            long_poll_ms=300,
        )  # fmt: skip
        consumer.subscribe("restarts")
        async with Producer(broker.endpoint, send_timeout=10.0) as producer, consumer:
            before = await producer.send("restarts", b"before")
            queue = MessageQueue("restarts", before.queue_id)
            async with PullConsumer(broker.endpoint, "survivors") as reader:
                for _ in range(300):  # consumed and committed (periodic commit, 0.2 s)
                    if seen == [b"before"] and await reader.committed(queue) == 1:
                        break
                    await asyncio.sleep(0.05)
            assert seen == [b"before"]
            await asyncio.to_thread(broker.stop)
            await asyncio.to_thread(broker.start)
            result = await producer.send("restarts", b"after")  # old stream broken: retried
            assert result.msg_id
            for _ in range(300):
                if b"after" in seen:
                    break
                await asyncio.sleep(0.05)
        assert seen == [b"before", b"after"]
    finally:
        broker.kill()
