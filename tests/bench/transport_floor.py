"""The transport's own round trip on this machine: what a lone message's latency cannot go below.

    .venv/bin/python -m tests.bench.transport_floor [--samples 3000]

One process, uvloop, 127.0.0.1, a 4-byte payload echoed: a raw asyncio TCP connection
(streams API: what a Redis client's request costs the transport), a grpc.aio bidi-stream
message (Wharf's SendMessageStream and PullMessageStream hops) and a grpc.aio unary call, and
the same two over Wharf's wire port (broker/frontends/wire/server.py serving the same handlers,
client/wire_channel.py).
Prints p50 and p99 of each after 100 untimed round trips, and each one's ratio to raw TCP.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import uvloop
from grpc import aio
from wharf.broker.frontends.wire.server import WireServer
from wharf.client.wire_channel import WireChannel

WARMUP = 100


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def timed(samples: int, round_trip: Callable[[], Awaitable[object]]) -> list[float]:
    """Microseconds per round trip, the warm-up left out."""
    out: list[float] = []
    for i in range(samples + WARMUP):
        start = time.perf_counter()
        await round_trip()
        if i >= WARMUP:
            out.append((time.perf_counter() - start) * 1e6)
    return out


async def raw_tcp(samples: int) -> list[float]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                writer.write(await reader.readexactly(4))
        except asyncio.IncompleteReadError:
            writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def round_trip() -> bytes:
        writer.write(b"ping")
        return await reader.readexactly(4)

    try:
        return await timed(samples, round_trip)
    finally:
        writer.close()
        server.close()


async def grpc_echo(samples: int, streaming: bool) -> list[float]:
    server = aio.server()
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("floor.Echo", echo_handlers()),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        return await echo_rounds(channel, samples, streaming)
    finally:
        await channel.close()
        await server.stop(None)


async def echo_rounds(channel: aio.Channel, samples: int, streaming: bool) -> list[float]:
    """Timed echoes over ``channel`` (grpc.aio's or the wire port's look-alike)."""
    if not streaming:
        call = channel.unary_unary("/floor.Echo/Unary")
        return await timed(samples, lambda: call(b"ping"))
    bidi = channel.stream_stream("/floor.Echo/Stream")()

    async def round_trip() -> object:
        await bidi.write(b"ping")
        return await bidi.read()

    return await timed(samples, round_trip)


def echo_handlers() -> dict[str, grpc.RpcMethodHandler]:
    async def unary(request: bytes, context: object) -> bytes:
        return request

    async def stream(requests: AsyncIterator[bytes], context: object) -> AsyncIterator[bytes]:
        async for request in requests:
            yield request

    return {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "Stream": grpc.stream_stream_rpc_method_handler(stream),
    }


async def wire_echo(samples: int, streaming: bool) -> list[float]:
    server = WireServer(1 << 20)
    server.add_method_handlers("floor.Echo", echo_handlers())
    port = await server.start("127.0.0.1", 0)
    channel = WireChannel(f"127.0.0.1:{port}")
    try:
        return await echo_rounds(channel, samples, streaming)
    finally:
        await channel.close()
        await server.stop()


async def run(samples: int) -> None:
    print(f"transport round trips, 4-byte echo, load average {os.getloadavg()[0]:.2f}")
    raw = await raw_tcp(samples)
    rows = [
        ("raw asyncio TCP", raw),
        ("grpc.aio bidi-stream message", await grpc_echo(samples, True)),
        ("grpc.aio unary call", await grpc_echo(samples, False)),
        ("wire port stream message", await wire_echo(samples, True)),
        ("wire port unary call", await wire_echo(samples, False)),
    ]
    base = percentile(raw, 0.5)
    for name, values in rows:
        p50 = percentile(values, 0.5)
        print(
            f"{name:30s} p50 {p50:7.0f} us  p99 {percentile(values, 0.99):7.0f} us  "
            f"{p50 / base:5.1f}x raw TCP"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=3000)
    uvloop.run(run(parser.parse_args().samples))


if __name__ == "__main__":
    main()
