"""Send-path benchmark: start the real daemon, drive SendMessageStream with batches from a few
concurrent streams, print msg/s for ASYNC_FLUSH and SYNC_FLUSH.

    .venv/bin/python -m tests.bench.broker_send [--seconds 5] [--streams 4] [--batch 64]
        [--window 8] [--size 1024] [--modes ASYNC_FLUSH,SYNC_FLUSH] [--no-pull]

Each stream keeps ``window`` requests in flight (pipelined); one reply per batch. The client
runs in this process on uvloop, so on a 2-core box client and broker compete for CPU: the
figures are for the whole loop (what an SDK on the same host would see). After each send
phase everything is pulled back (8 queues in parallel, 1024 per pull) and timed.

Peer, measured in the same run with the same client: a bare grpc.aio server process that
parses each request and answers a prebuilt reply of the same shape, with no store behind it
(``--peer`` mode of this module). broker/peer is the share of raw gRPC throughput the broker
keeps; the rest is the broker's and the store's Python work per message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import uvloop
from wharf.store.codec.send_records import encode_record, topic_tail
from wharf.v1 import common_pb2, messaging_pb2, messaging_pb2_grpc

from tests.harness import REPO_ROOT, BrokerProcess, Daemons

MIB = 1024 * 1024


def bench_broker(root: Path, flush: str) -> BrokerProcess:
    """The daemon under test: 256 MiB commit-log segments, logging at WARNING."""
    settings = {"flushDiskType": flush, "mappedFileSizeCommitLog": 256 * MIB, "logLevel": "WARNING"}
    return Daemons(root).broker(root, settings=settings, ready_timeout=60.0, start=False)


PEER_REPLIES: dict[int, bytes] = {}


async def serve_peer(ready: Path, batch: int) -> None:
    """The bare gRPC peer: parse each SendMessageRequest, answer one prebuilt reply."""

    def reply_for(request: messaging_pb2.SendMessageRequest) -> bytes:
        if request.records:  # compact reply; counting records costs the peer nothing here
            return messaging_pb2.SendMessageResponse(
                status=messaging_pb2.SEND_OK, count=batch
            ).SerializeToString()
        count = len(request.messages)
        if count not in PEER_REPLIES:
            entry = messaging_pb2.SendResultEntry(
                status=messaging_pb2.SEND_OK, msg_id="0" * 32, offset_msg_id="0" * 32,
                queue_id=0, queue_offset=123456, commit_log_offset=123456789,
            )  # fmt: skip
            PEER_REPLIES[count] = messaging_pb2.SendMessageResponse(
                results=[entry] * count
            ).SerializeToString()
        return PEER_REPLIES[count]

    async def stream(requests, context):  # type: ignore[no-untyped-def]
        async for request in requests:
            yield reply_for(request)

    async def unary(request, context):  # type: ignore[no-untyped-def]
        return reply_for(request)

    handler = grpc.method_handlers_generic_handler(
        "wharf.v1.MessagingService",
        {
            "SendMessageStream": grpc.stream_stream_rpc_method_handler(
                stream, request_deserializer=messaging_pb2.SendMessageRequest.FromString
            ),
            "SendMessage": grpc.unary_unary_rpc_method_handler(
                unary, request_deserializer=messaging_pb2.SendMessageRequest.FromString
            ),
        },
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    await asyncio.to_thread(ready.write_text, json.dumps({"grpc": f"127.0.0.1:{port}"}))
    await server.wait_for_termination()


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (Linux /proc; 0.0 elsewhere). CPU per message is the
    figure that stays meaningful when other work shares the machine; wall msg/s is not."""
    return sum(process_cpu_split(pid))


def process_cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process (Linux /proc; zeros elsewhere). On this VM the
    system part moves with the host's memory (tests/bench/memory.py), the user part with
    the code."""
    try:
        user, system = stat_ticks(Path(f"/proc/{pid}/stat").read_text())
    except OSError:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    return user / tick, system / tick


def stat_ticks(stat: str) -> tuple[int, int]:
    """(user, system) clock ticks of a /proc ``stat`` line, a process's or a thread's (the
    fields after the name, which may hold spaces and parentheses)."""
    fields = stat.rpartition(")")[2].split()
    return int(fields[11]), int(fields[12])


def start_peer(root: Path, batch: int) -> tuple[subprocess.Popen[bytes], str]:
    ready = root / "peer.json"
    cmd = [
        sys.executable,
        "-m",
        "tests.bench.broker_send",
        "--peer",
        str(ready),
        "--batch",
        str(batch),
    ]
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT)
    deadline = time.monotonic() + 30
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the gRPC peer did not start")
        time.sleep(0.05)
    return proc, json.loads(ready.read_text())["grpc"]


async def drive(endpoint: str, args: argparse.Namespace) -> tuple[int, float, int]:
    body = os.urandom(args.size)
    if args.form == "records":  # producer-encoded records: what the SDK sends
        tail = topic_tail("bench")
        records = b"".join(
            encode_record(tail, body, b"UNIQ_KEY\x01%032X\x02" % i) for i in range(args.batch)
        )
        request = messaging_pb2.SendMessageRequest(topic="bench", records=records)
    else:
        request = messaging_pb2.SendMessageRequest(
            topic="bench", messages=[common_pb2.Message(body=body)] * args.batch
        )
    sent = 0
    errors = 0
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        # Warm up (topic auto-create, first segment) outside the timed window.
        await stub.SendMessage(request)
        deadline = time.monotonic() + args.seconds

        async def one_stream() -> None:
            nonlocal sent, errors
            call = stub.SendMessageStream()
            in_flight = 0
            stopping = False
            while True:
                while not stopping and in_flight < args.window:
                    await call.write(request)
                    in_flight += 1
                if in_flight == 0:
                    break
                reply = await call.read()
                in_flight -= 1
                if reply.HasField("error"):
                    errors += 1
                else:
                    sent += reply.count or len(reply.results)
                if time.monotonic() >= deadline and not stopping:
                    stopping = True
                    await call.done_writing()

        started = time.monotonic()
        await asyncio.gather(*(one_stream() for _ in range(args.streams)))
        elapsed = time.monotonic() - started
    return sent, elapsed, errors


async def drain(endpoint: str, queues: int = 8, batch: int = 1024) -> tuple[int, float]:
    """Pull everything in topic 'bench' back, one task per queue, max_messages=batch."""
    received = 0
    async with grpc.aio.insecure_channel(
        endpoint, options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)]
    ) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)

        async def one_queue(queue_id: int) -> None:
            nonlocal received
            offset = 0
            while True:
                reply = await stub.PullMessage(
                    messaging_pb2.PullMessageRequest(
                        consumer_group="bench", topic="bench", queue_id=queue_id,
                        queue_offset=offset, max_messages=batch,
                    )
                )  # fmt: skip
                if not reply.messages:
                    return
                received += len(reply.messages)
                offset = reply.next_begin_offset

        started = time.monotonic()
        await asyncio.gather(*(one_queue(q) for q in range(queues)))
        return received, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--window", type=int, default=8)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument(
        "--form",
        choices=("records", "messages"),
        default="records",
        help="records: producer-encoded (the SDK's form); messages: protos the broker encodes",
    )
    parser.add_argument("--modes", default="ASYNC_FLUSH,SYNC_FLUSH")
    parser.add_argument(
        "--no-pull", dest="pull", action="store_false", help="skip pulling everything back"
    )
    parser.add_argument("--peer", metavar="READY_FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        uvloop.run(serve_peer(Path(args.peer), args.batch))
        return
    print(
        f"SendMessageStream ({args.form}): {args.streams} streams x {args.window} in flight, batches of "
        f"{args.batch} x {args.size} B, {args.seconds:g} s per mode"
    )
    with tempfile.TemporaryDirectory(prefix="wharf-bench-peer-") as tmp:
        peer, endpoint = start_peer(Path(tmp), args.batch)
        try:
            peer_cpu_before = process_cpu_seconds(peer.pid)
            peer_sent, peer_elapsed, _ = uvloop.run(drive(endpoint, args))
            peer_cpu = process_cpu_seconds(peer.pid) - peer_cpu_before
        finally:
            peer.terminate()
            peer.wait(30)
    peer_rate = peer_sent / peer_elapsed
    print(
        f"{'grpc peer':12s} {peer_rate:>10,.0f} msg/s  (bare grpc.aio, no store: the ceiling; "
        f"server CPU {peer_cpu * 1e6 / max(peer_sent, 1):.1f} us/msg)"
    )
    for flush in args.modes.split(","):
        with (
            tempfile.TemporaryDirectory(prefix="wharf-bench-") as tmp,
            bench_broker(Path(tmp), flush) as broker,
        ):
            cpu_before = process_cpu_seconds(broker.pid)
            sent, elapsed, errors = uvloop.run(drive(broker.endpoint, args))
            broker_cpu = process_cpu_seconds(broker.pid) - cpu_before
            pulled, pull_elapsed = uvloop.run(drain(broker.endpoint)) if args.pull else (0, 0.0)
        rate = sent / elapsed
        print(
            f"{flush:12s} {rate:>10,.0f} msg/s  {rate * args.size / 1e6:7.1f} MB/s  "
            f"({sent:,} msgs in {elapsed:.1f} s, {errors} error replies; "
            f"broker/peer {rate / peer_rate:.2f}; broker CPU "
            f"{broker_cpu * 1e6 / max(sent, 1):.1f} us/msg)"
        )
        if args.pull:
            print(
                f"{'  then pull':12s} {pulled / pull_elapsed:>10,.0f} msg/s  "
                f"({pulled:,} msgs back in {pull_elapsed:.1f} s, 8 queues x 1024 per pull)"
            )


if __name__ == "__main__":
    main()
