"""A lone message through a relay that stores nothing: the transports' own share of the latency.

    python -m tests.bench.relay_floor [--rate 1000] [--seconds 3] [--rounds 4]

A relay process (uvloop) serves the same two handlers on grpc.aio and on Wharf's wire port
(``WireServer``, the broker's): ``Send`` (a bidi stream: each message is handed to every
subscriber and answered with an 8-byte ack) and ``Subscribe`` (a bidi stream that yields every
message handed to it, woken through an ``asyncio.Queue``: the broker's long poll is one such
task wake-up too). A client process, as ``wharf bench e2e``, sends 1 KiB messages stamped with
their send time at ``--rate`` (open loop, ``client.bench.pacing``) and subscribes on the same
transport; the figure is send -> receive, p50 and p99, the warm-up left out.

Why (issue 67): the target gRPC p50 <= 1.3x the wire port's leaves gRPC's two hops 0.3x the
wire port's whole end-to-end time over the wire port's two hops. The relay measures exactly
that difference, with the same handler code on both servers and the broker's work left out:
whatever the broker does, its gRPC path pays its wire path's work (or more: the wire port's
reply skips the loop, ``broker/core/long_poll.py`` "Ahead of the sync") plus this difference.
``tests.bench.lone`` runs both relays in every round and prints the ratio they allow.

A third server, ``durable`` (the wire port), is the floor of Wharf's design rather than of a
transport: its ``Send`` appends each message to a zero-filled file (``os.pwrite``) and hands
the file's fdatasync to the store's own sync engine (``NativeSyncEngine``: the compiled
thread, the loop never blocked), which writes the message to each subscriber right after the
sync, as the broker's pull reply built ahead of the sync leaves (``WireContext.write_durable``);
the sender's ack follows the sync on the loop. Everything Wharf's lone message does besides
that (admission, the record's checks and patching, the queues' offsets, the consume queue, the
long poll, the SDK's record encoding and decoding) is left out, so ``lone``'s wire p50 over it
is what the broker's and the SDK's own code adds to the design, and its p50 over redis-py's
says whether any broker built this way (Python on one event loop, fdatasync off it) reaches
Redis's lone message on this machine.

Figures: tests/bench/README.md "relay_floor".
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import uvloop
from grpc import aio
from wharf.broker.frontends.wire.server import WireServer
from wharf.client.bench.pacing import WARMUP_S, due_batches
from wharf.client.wire_channel import WireChannel
from wharf.store.log.sync_engine import NativeSyncEngine, SyncPlan, native_syncer_type

from tests.bench.read_path import pct

SERVICE = "relay.Relay"
_STAMP = struct.Struct(">q")  # bodies start with the send time, ns since the epoch
_ACK = b"\0" * 8
KINDS = ("grpc", "wire", "durable")
LOG_BYTES = 64 << 20  # the durable relay's file, zero-filled once, written round and round


def handlers() -> dict[str, grpc.RpcMethodHandler]:
    subscribers: set[asyncio.Queue[bytes]] = set()

    async def send(requests: AsyncIterator[bytes], context: object) -> AsyncIterator[bytes]:
        async for body in requests:
            for queue in subscribers:
                queue.put_nowait(body)
            yield _ACK

    async def subscribe(requests: AsyncIterator[bytes], context: object) -> AsyncIterator[bytes]:
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        subscribers.add(queue)
        try:
            yield b"subscribed"
            while True:
                yield await queue.get()
        finally:
            subscribers.discard(queue)

    return {
        "Send": grpc.stream_stream_rpc_method_handler(send),
        "Subscribe": grpc.stream_stream_rpc_method_handler(subscribe),
    }


class DurableLog:
    """A file appended with ``os.pwrite`` and made durable by the store's sync engine (its
    compiled thread), as the commit log is under SYNC_FLUSH; ``after(end, callback)`` runs
    ``callback`` on the loop once everything below ``end`` is on disk."""

    def __init__(self, path: Path) -> None:
        make_syncer = native_syncer_type()
        if make_syncer is None:
            raise RuntimeError("the compiled sync thread is not built (make setup)")
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        chunk = bytes(1 << 20)  # zero-filled, as the store's segments (zeroFillAheadMbps)
        for offset in range(0, LOG_BYTES, len(chunk)):
            os.pwrite(self.fd, chunk, offset)
        os.fsync(self.fd)
        self.end = 0  # bytes appended, ever (the file is written round and round)
        self.flushed = 0
        self._waiters: list[tuple[int, Callable[[], None]]] = []
        self.engine = NativeSyncEngine(make_syncer, self._plan, self._settle, lambda: self.flushed)

    def start(self) -> None:
        self.engine.start(self._served, self._failed)

    def append(self, data: bytes) -> int:
        """Write ``data`` and request its sync; the end it is durable at."""
        position = self.end % (LOG_BYTES - len(data))
        os.pwrite(self.fd, data, position)
        self.end += len(data)
        self.engine.request(self.end)
        return self.end

    def after(self, end: int, callback: Callable[[], None]) -> None:
        if end <= self.flushed:
            callback()
        else:
            self._waiters.append((end, callback))

    def _plan(self, max_fds: int) -> SyncPlan:
        return SyncPlan((self.fd,), self.end, self.end)

    def _settle(self, token: Any) -> int:
        self.flushed = max(self.flushed, int(token))
        return self.flushed

    def _served(self, flushed: int, seconds: float, nbytes: int) -> None:
        due = [w for w in self._waiters if w[0] <= flushed]
        self._waiters = [w for w in self._waiters if w[0] > flushed]
        for _, callback in due:
            callback()

    def _failed(self, exc: BaseException) -> None:
        raise SystemExit(f"the durable relay's fdatasync failed: {exc}")

    def close(self) -> None:
        self.engine.close()
        os.close(self.fd)


def durable_handlers(log: DurableLog) -> dict[str, grpc.RpcMethodHandler]:
    """``handlers()`` with each message durable before anyone sees it: taken in the wire
    port's read callback (``sink_into``, as the broker's send stream takes a request), appended,
    its sync requested, handed to each subscriber's socket through the sync thread (else queued
    for after the sync), and acknowledged after the sync."""
    subscribers: dict[asyncio.Queue[bytes], Any] = {}

    async def send(requests: Any, context: object) -> AsyncIterator[bytes]:
        acks: asyncio.Queue[bytes] = asyncio.Queue()

        def take(body: bytes) -> bool:
            end = log.append(body)
            for queue, sub_context in subscribers.items():
                if not sub_context.write_durable(body, end):
                    log.after(end, functools.partial(queue.put_nowait, body))
            log.after(end, functools.partial(acks.put_nowait, _ACK))
            return True

        requests.sink_into(take)
        reader = asyncio.ensure_future(_drain(requests))
        try:
            while True:
                yield await acks.get()
        finally:
            reader.cancel()

    async def subscribe(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        subscribers[queue] = context
        try:
            yield b"subscribed"
            while True:
                yield await queue.get()
        finally:
            subscribers.pop(queue, None)

    return {
        "Send": grpc.stream_stream_rpc_method_handler(send),
        "Subscribe": grpc.stream_stream_rpc_method_handler(subscribe),
    }


async def _drain(requests: AsyncIterator[bytes]) -> None:
    async for _ in requests:  # what the sink did not take (none: it takes every message)
        pass


async def serve(directory: Path) -> None:
    """The three servers on ephemeral ports; prints {kind: port}, runs until stdin closes
    (the parent's ``relay()`` ends). The durable relay's file goes in ``directory``."""
    grpc_server = aio.server()
    grpc_server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE, handlers()),)
    )
    grpc_port = grpc_server.add_insecure_port("127.0.0.1:0")
    await grpc_server.start()
    wire_server = WireServer(1 << 20)
    wire_server.add_method_handlers(SERVICE, handlers())
    wire_port = await wire_server.start("127.0.0.1", 0)
    log = DurableLog(directory / "durable-relay.log")
    log.start()
    durable_server = WireServer(1 << 20)
    durable_server.durable_writer = log.engine.write_when_durable
    durable_server.add_method_handlers(SERVICE, durable_handlers(log))
    durable_port = await durable_server.start("127.0.0.1", 0)
    print(json.dumps({"grpc": grpc_port, "wire": wire_port, "durable": durable_port}), flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)
    await durable_server.stop()
    await log.engine.wait_idle()
    log.close()
    await wire_server.stop()
    await grpc_server.stop(None)


async def client(kind: str, port: int, rate: int, seconds: float, size: int) -> dict[str, Any]:
    """Send at ``rate`` for the warm-up then ``seconds``; send -> receive latencies."""
    target = f"127.0.0.1:{port}"
    channel: Any = aio.insecure_channel(target) if kind == "grpc" else WireChannel(target)
    latencies: list[float] = []
    measured_from_ns = time.time_ns() + 10**18
    try:
        subscription = channel.stream_stream(f"/{SERVICE}/Subscribe")()
        await subscription.write(b"subscribe")
        await subscription.read()  # registered: nothing sent from here on is missed
        sender = channel.stream_stream(f"/{SERVICE}/Send")()
        padding = b"\0" * max(0, size - _STAMP.size)
        counts = {"sent": 0, "received": 0}
        sending = True
        all_received = asyncio.Event()

        async def acks() -> None:
            while isinstance(await sender.read(), bytes):  # an ack; else the stream's end
                pass

        async def receive() -> None:
            while True:
                body = await subscription.read()
                now = time.time_ns()
                counts["received"] += 1
                stamp = _STAMP.unpack_from(body)[0]
                if stamp >= measured_from_ns:
                    latencies.append((now - stamp) / 1e6)
                if not sending and counts["received"] >= counts["sent"]:
                    all_received.set()

        async def send_for(duration: float) -> None:
            async for due in due_batches(rate, duration):
                for _ in range(due):
                    await sender.write(_STAMP.pack(time.time_ns()) + padding)
                    counts["sent"] += 1

        ack_task = asyncio.ensure_future(acks())
        receive_task = asyncio.ensure_future(receive())
        await send_for(WARMUP_S)
        measured_from_ns = time.time_ns()
        await send_for(seconds)
        sending = False
        if counts["received"] < counts["sent"]:
            await asyncio.wait_for(all_received.wait(), 10.0)
        await sender.done_writing()
        for task in (ack_task, receive_task):
            task.cancel()
        subscription.cancel()
    finally:
        await channel.close()
    return {"p50_ms": pct(latencies, 0.5), "p99_ms": pct(latencies, 0.99), "count": len(latencies)}


@contextmanager
def relay(directory: Path) -> Iterator[dict[str, int]]:
    """The relay process for as long as the block runs (the durable relay's file in
    ``directory``); yields each kind's port."""
    directory.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.bench.relay_floor", "--serve", "--dir", str(directory)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        ports = json.loads(proc.stdout.readline())
        yield {kind: int(ports[kind]) for kind in KINDS}
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run(kind: str, port: int, rate: int, seconds: float, size: int = 1024) -> dict[str, Any]:
    """One client run in its own process (as ``wharf bench e2e``); its figures."""
    cmd = [
        sys.executable, "-m", "tests.bench.relay_floor", "--client", kind, "--port", str(port),
        "--rate", str(rate), "--seconds", str(seconds), "--size", str(size),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    if proc.returncode != 0:
        raise RuntimeError(f"relay client {kind} failed ({proc.returncode}): {proc.stderr[-800:]}")
    return dict(json.loads(proc.stdout.splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        uvloop.run(serve(args.dir))
        return
    if args.client:
        figures = uvloop.run(client(args.client, args.port, args.rate, args.seconds, args.size))
        print(json.dumps(figures))
        return
    with tempfile.TemporaryDirectory(prefix="wharf-relay-") as tmp, relay(Path(tmp)) as ports:
        for round_ in range(args.rounds):
            order = KINDS if round_ % 2 == 0 else tuple(reversed(KINDS))
            figures = {kind: run(kind, ports[kind], args.rate, args.seconds) for kind in order}
            print(
                f"round {round_ + 1} (load {os.getloadavg()[0]:.2f}): "
                + "  ".join(
                    f"{kind} p50 {figures[kind]['p50_ms']:.3f} p99 {figures[kind]['p99_ms']:.3f} ms"
                    for kind in KINDS
                )
                + f"  grpc - wire p50 {figures['grpc']['p50_ms'] - figures['wire']['p50_ms']:.3f} ms"
                + f"  durable - wire p50 "
                f"{figures['durable']['p50_ms'] - figures['wire']['p50_ms']:.3f} ms",
                flush=True,
            )


if __name__ == "__main__":
    main()
