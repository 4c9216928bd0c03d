"""Redis Streams as the peer: Debian's redis-server on loopback (``RedisServer``), driven by
its own C client (redis-benchmark, pipelined) and by redis-py with hiredis (pipelined,
asyncio: the same language and loop as our SDK). The Wharf side is started by
tests/harness.py."""

from __future__ import annotations

import asyncio
import csv
import io
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from wharf.client.bench.pacing import WARMUP_S, due_batches
from wharf.client.bench.stats import BenchStats

from tests.harness import free_port

STREAM = "bench"


class RedisServer:
    """redis-server with an append-only file under ``root`` and ``appendfsync`` as given
    (``everysec`` is the peer of ASYNC_FLUSH, ``always`` of SYNC_FLUSH); no RDB snapshots."""

    def __init__(self, root: Path, appendfsync: str, ready_timeout: float = 20.0) -> None:
        self.root = Path(root)
        self.appendfsync = appendfsync
        self.ready_timeout = ready_timeout
        self.log_path = self.root / "redis.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.endpoint = ""

    def start(self) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server not found: apt-get install -y redis-server (make system-deps)"
            )
        self.root.mkdir(parents=True, exist_ok=True)
        port = free_port()
        with self.log_path.open("ab") as handle:
            self.proc = subprocess.Popen(
                [
                    binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(self.root),
                    "--save", "", "--appendonly", "yes", "--appendfsync", self.appendfsync,
                    "--protected-mode", "yes", "--daemonize", "no",
                ],
                stdout=handle, stderr=handle, env={**os.environ},
            )  # fmt: skip
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"redis-server exited with {self.proc.returncode}: see {self.log_path}"
                )
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        self.endpoint = f"127.0.0.1:{port}"
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise TimeoutError("redis-server not ready")

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def redis_benchmark(
    endpoint: str, args: list[str], *, clients: int, requests: int, pipeline: int
) -> dict[str, float]:
    """Run redis-benchmark with --csv; returns rps and latency figures (ms)."""
    binary = shutil.which("redis-benchmark")
    if binary is None:
        raise RuntimeError("redis-benchmark not found (Debian package redis-tools / redis-server)")
    host, _, port = endpoint.rpartition(":")
    cmd = [
        binary,
        "-h",
        host,
        "-p",
        port,
        "-c",
        str(clients),
        "-n",
        str(requests),
        "-P",
        str(pipeline),
        "--csv",
        *args,
    ]
    output = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True).stdout
    rows = [r for r in csv.reader(io.StringIO(output)) if r and r[0] != "test"]
    if not rows:
        raise RuntimeError(f"no figures from redis-benchmark: {output[-300:]}")
    row = rows[-1]
    return {
        "rps": float(row[1]),
        "p50_ms": float(row[4]),
        "p99_ms": float(row[6]),
        "max_ms": float(row[7]),
    }


def xadd_args(size: int) -> list[str]:
    return ["XADD", STREAM, "*", "f", "x" * size]


def _client(endpoint: str):  # type: ignore[no-untyped-def]
    import redis.asyncio as aioredis  # optional dependency: the 'bench' extra

    host, _, port = endpoint.rpartition(":")
    return aioredis.Redis(host=host, port=int(port), max_connections=256)


async def redispy_produce(
    endpoint: str, *, tasks: int, pipeline: int, count: int, size: int
) -> dict[str, float]:
    """``tasks`` connections, each sending pipelines of ``pipeline`` XADDs until ``count``."""
    client = _client(endpoint)
    body = b"x" * size
    stats = BenchStats()
    remaining = count

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            n = min(pipeline, remaining)
            remaining -= n
            started = time.perf_counter()
            async with client.pipeline(transaction=False) as pipe:
                for _ in range(n):
                    pipe.xadd(STREAM, {"f": body})
                await pipe.execute()
            stats.record(n, n * size, (time.perf_counter() - started) * 1000)

    try:
        await asyncio.gather(*(worker() for _ in range(tasks)))
    finally:
        await client.aclose()
    return stats.summary()


async def redispy_consume(
    endpoint: str, *, tasks: int, count_per_read: int, reads: int, pipeline: int = 8
) -> dict[str, float]:
    """``tasks`` connections, each issuing (pipelined) ``XRANGE - + COUNT n`` until ``reads``."""
    client = _client(endpoint)
    stats = BenchStats()
    remaining = reads

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            n = min(pipeline, remaining)
            remaining -= n
            started = time.perf_counter()
            async with client.pipeline(transaction=False) as pipe:
                for _ in range(n):
                    pipe.xrange(STREAM, "-", "+", count=count_per_read)
                results = await pipe.execute()
            got = sum(len(r) for r in results)
            stats.record(got, got * 1024, (time.perf_counter() - started) * 1000)

    try:
        await asyncio.gather(*(worker() for _ in range(tasks)))
    finally:
        await client.aclose()
    return stats.summary()


async def redispy_e2e(
    endpoint: str, *, rate: int, duration_s: float, size: int
) -> dict[str, float]:
    """XADD at ``rate`` msg/s with the send time in a field; XREAD BLOCK receives. The first
    ``WARMUP_S`` are sent but not recorded, as in Wharf's e2e runner."""
    producer = _client(endpoint)
    consumer = _client(endpoint)
    stream = STREAM + "-e2e"
    stats = BenchStats()
    stop = asyncio.Event()
    padding = b"x" * max(0, size - 20)
    measured_from_ns = time.time_ns() + 10**18  # set when the warm-up ends

    async def receive() -> None:
        last = "$"
        while not stop.is_set():
            reply = await consumer.xread({stream: last}, count=1000, block=200)
            now = time.time_ns()
            for _, entries in reply or []:
                stamps = [int(fields[b"t"]) for _, fields in entries]
                lat = [(now - stamp) / 1e6 for stamp in stamps if stamp >= measured_from_ns]
                stats.record(len(lat), len(lat) * size)
                stats.record_latencies(lat)
                last = entries[-1][0]

    async def send() -> None:
        nonlocal measured_from_ns
        in_flight: set[asyncio.Task[None]] = set()
        slots = asyncio.Semaphore(128)  # below the pool's 256 connections

        async def xadd() -> None:
            async with slots:
                await producer.xadd(stream, {"t": str(time.time_ns()), "p": padding})

        def start_xadds(count: int) -> None:
            for _ in range(count):
                future = asyncio.ensure_future(xadd())
                in_flight.add(future)
                future.add_done_callback(in_flight.discard)

        async for due in due_batches(rate, WARMUP_S):
            start_xadds(due)
        measured_from_ns = time.time_ns()
        stats.restart_clock()
        async for due in due_batches(rate, duration_s):
            start_xadds(due)
        await asyncio.gather(*in_flight, return_exceptions=True)
        await asyncio.sleep(0.5)
        stop.set()

    receiver = asyncio.ensure_future(receive())
    await asyncio.sleep(0.1)
    try:
        await send()
        await receiver
    finally:
        await producer.aclose()
        await consumer.aclose()
    return stats.summary()
