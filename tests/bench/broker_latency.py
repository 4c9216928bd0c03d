"""Send-to-receive latency through the broker alone (raw gRPC stubs, no SDK): start the daemon,
send at a fixed rate into one queue while a consumer long-polls it, print percentiles for
ASYNC_FLUSH and SYNC_FLUSH.

    .venv/bin/python -m tests.bench.broker_latency [--rate 5000] [--seconds 5] [--batch 10]

Each message carries its send time (ns) in a property; latency = receive time - send time, so
it covers the send RPC, the store append (and the group commit under SYNC_FLUSH), dispatch,
the long-poll wake-up and the pull reply. Use it to tell broker latency from SDK latency.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import grpc
import uvloop
from wharf.v1 import common_pb2, messaging_pb2, messaging_pb2_grpc

from tests.bench.broker_send import bench_broker


async def measure(endpoint: str, rate: int, seconds: float, batch: int) -> list[float]:
    latencies_ms: list[float] = []
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        warm = messaging_pb2.SendMessageRequest(
            topic="latency", queue_id=0, messages=[common_pb2.Message(body=b"warm-up")]
        )
        await stub.SendMessage(warm)
        # Wait until the warm-up is visible, so the consumer's first pull at offset 1 is not
        # "ahead of the queue" (which would send it back to offset 0).
        await stub.PullMessage(
            messaging_pb2.PullMessageRequest(
                consumer_group="latency", topic="latency", queue_id=0, max_wait_ms=5000
            )
        )
        done = asyncio.Event()

        async def consume() -> None:
            offset = 1
            while not done.is_set():
                reply = await stub.PullMessage(
                    messaging_pb2.PullMessageRequest(
                        consumer_group="latency", topic="latency", queue_id=0,
                        queue_offset=offset, max_messages=1024, max_wait_ms=500,
                    )
                )  # fmt: skip
                now = time.time_ns()
                latencies_ms.extend((now - int(m.properties["t"])) / 1e6 for m in reply.messages)
                offset = reply.next_begin_offset

        async def produce() -> None:
            # One SendMessageStream, requests written on schedule without waiting for acks (as
            # the SDK's producer does): under SYNC_FLUSH a sender waiting for each fdatasync
            # could not hold the rate.
            body = b"x" * 1024
            call = stub.SendMessageStream()

            async def read_acks() -> None:
                async for reply in call:
                    if reply.HasField("error"):
                        raise RuntimeError(reply.error.message)

            acks = asyncio.create_task(read_acks())
            started = time.monotonic()
            sent = 0
            while time.monotonic() - started < seconds:
                stamp = str(time.time_ns())
                messages = [common_pb2.Message(body=body, properties={"t": stamp})] * batch
                await call.write(
                    messaging_pb2.SendMessageRequest(
                        topic="latency", queue_id=0, messages=messages, request_id=sent
                    )
                )
                sent += batch
                delay = started + sent / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            await call.done_writing()
            await acks
            await asyncio.sleep(0.6)  # let the consumer drain
            done.set()

        await asyncio.gather(consume(), produce())
    return sorted(latencies_ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=5000, help="messages per second")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--batch", type=int, default=10, help="messages per send request")
    parser.add_argument("--modes", default="ASYNC_FLUSH,SYNC_FLUSH")
    args = parser.parse_args()
    print(
        f"send -> long-poll receive, {args.rate} msg/s in batches of {args.batch}, 1 KiB, "
        f"{args.seconds:g} s per mode"
    )
    for flush in args.modes.split(","):
        with (
            tempfile.TemporaryDirectory(prefix="wharf-latency-") as tmp,
            bench_broker(Path(tmp), flush) as broker,
        ):
            lat = uvloop.run(measure(broker.endpoint, args.rate, args.seconds, args.batch))
        if not lat:
            print(f"{flush:12s} no messages received")
            continue

        def pct(q: float, lat: list[float] = lat) -> float:
            return lat[min(len(lat) - 1, int(len(lat) * q))]

        print(
            f"{flush:12s} p50 {pct(0.5):6.2f} ms  p99 {pct(0.99):6.2f} ms  "
            f"p999 {pct(0.999):6.2f} ms  max {lat[-1]:6.2f} ms  ({len(lat):,} messages)"
        )


if __name__ == "__main__":
    main()
