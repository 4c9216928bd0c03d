"""What committed reads cost (issue 63): send-to-receive latency of a lone message in a
SYNC_MASTER + SYNC_FLUSH group, read from the master and read from its replica, at a fixed
rate through raw gRPC stubs (``broker_latency.py``'s method: each message carries its send
time).

    .venv/bin/python -m tests.bench.committed_reads [--rate 1000] [--seconds 5] [--rounds 3]

A master's reads already stopped at its flushed offset and its in-sync replicas' confirm
offset; what issue 63 changed is the replica: it now reads only up to the master's committed
offset, which reaches it in the master's next frame (sent at once when a sync or a report
moves it), one more hop than reading what it had copied. Rounds alternate master and replica
reads on the same pair (a second send stream keeps both warm); the program prints each
round and the medians of the rounds' p50 and p99.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import grpc
from wharf.v1 import common_pb2, messaging_pb2, messaging_pb2_grpc

from tests.harness import BrokerProcess, Daemons, free_port

TOPIC = "committed"


async def measure(
    send_to: str, read_from: str, offset: int, rate: int, seconds: float
) -> tuple[list[float], int]:
    """Latencies (ms) of ``rate`` lone 1 KiB messages a second sent to ``send_to`` and
    long-polled from ``read_from`` from queue ``offset`` on, for ``seconds``; and the offset
    after them."""
    latencies: list[float] = []
    async with (
        grpc.aio.insecure_channel(send_to) as sender,
        grpc.aio.insecure_channel(read_from) as reader,
    ):
        send = messaging_pb2_grpc.MessagingServiceStub(sender)
        read = messaging_pb2_grpc.MessagingServiceStub(reader)
        done = asyncio.Event()

        async def consume() -> None:
            nonlocal offset
            while not done.is_set():
                reply = await read.PullMessage(
                    messaging_pb2.PullMessageRequest(
                        consumer_group="bench", topic=TOPIC, queue_id=0, queue_offset=offset,
                        max_messages=1024, max_wait_ms=500,
                    )
                )  # fmt: skip
                now = time.time_ns()
                latencies.extend((now - int(m.properties["t"])) / 1e6 for m in reply.messages)
                offset = reply.next_begin_offset

        async def produce() -> None:
            call = send.SendMessageStream()

            async def acks() -> None:
                async for reply in call:
                    if reply.HasField("error"):
                        raise RuntimeError(reply.error.message)

            reading = asyncio.create_task(acks())
            started, sent, body = time.monotonic(), 0, b"x" * 1024
            while time.monotonic() - started < seconds:
                message = common_pb2.Message(body=body, properties={"t": str(time.time_ns())})
                await call.write(
                    messaging_pb2.SendMessageRequest(
                        topic=TOPIC, queue_id=0, messages=[message], request_id=sent
                    )
                )
                sent += 1
                delay = started + sent / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            await call.done_writing()
            await reading
            await asyncio.sleep(0.6)
            done.set()

        await asyncio.gather(consume(), produce())
    return sorted(latencies), offset


def _pair(root: Path) -> tuple[BrokerProcess, BrokerProcess]:
    common = {"flushDiskType": "SYNC_FLUSH", "mappedFileSizeCommitLog": 256 << 20,
              "defaultTopicQueueNums": 1}  # fmt: skip
    daemons = Daemons(root)
    master = daemons.broker(
        "master", {**common, "brokerRole": "SYNC_MASTER", "haListenPort": free_port()}
    )
    replica = daemons.broker(
        "replica",
        {**common, "brokerRole": "SLAVE", "brokerId": 1, "haMasterAddress": master.ha_endpoint},
    )
    return master, replica


async def _warm(master: str) -> None:
    async with grpc.aio.insecure_channel(master) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        await stub.SendMessage(
            messaging_pb2.SendMessageRequest(
                topic=TOPIC, queue_id=0, messages=[common_pb2.Message(body=b"warm-up")]
            )
        )
    await asyncio.sleep(2.0)  # the replica connects, copies it and learns the topic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=1000, help="messages per second")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wharf-committed-") as tmp:
        master, replica = _pair(Path(tmp))
        try:
            asyncio.run(_warm(master.endpoint))
            figures: dict[str, list[tuple[float, float]]] = {"master": [], "replica": []}
            offset = 1  # after the warm-up message
            for round_no in range(args.rounds):
                for where, endpoint in (("master", master.endpoint),
                                        ("replica", replica.endpoint)):  # fmt: skip
                    lat, offset = asyncio.run(
                        measure(master.endpoint, endpoint, offset, args.rate, args.seconds)
                    )
                    q = statistics.quantiles(lat, n=100)
                    figures[where].append((q[49], q[98]))
                    print(f"round {round_no + 1} read from {where:7s}: {len(lat)} messages, "
                          f"p50 {q[49]:.2f} ms, p99 {q[98]:.2f} ms", flush=True)  # fmt: skip
        finally:
            replica.stop()
            master.stop()
    for where, rows in figures.items():
        p50 = statistics.median(r[0] for r in rows)
        p99 = statistics.median(r[1] for r in rows)
        print(f"read from {where:7s} at {args.rate} msg/s: p50 {p50:.2f} ms, p99 {p99:.2f} ms "
              f"(medians of {len(rows)} rounds)")  # fmt: skip


if __name__ == "__main__":
    main()
