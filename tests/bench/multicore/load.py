"""One load process of the prototype: requests built and serialized before they are timed, a
warm-up, then ``ready`` on stdout; on a line from stdin the timed calls; then one JSON line
(monotonic start and end, calls, messages, all messages sent, replies not OK, this
process's CPU seconds).

    python -m tests.bench.multicore.load --target HOST:PORT --mode v2|records --calls N
        [--inflight 32] [--channels 4] [--first 0] [--size 1024] [--batch 64]

``v2``: unary apache.rocketmq.v2 ``SendMessage`` of one message (``v2_floor``'s request, with
the official Python client's headers), over ``--channels`` gRPC channels each on its own TCP
connection (a local subchannel pool: SO_REUSEPORT spreads connections, not calls).
``records``: wharf.v1 ``SendMessage`` of ``--batch`` producer-encoded records over the wire
protocol straight to the store process: the store's cost per message when fed batches.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import json
import resource
import sys
import time
from collections.abc import Awaitable, Callable

import uvloop
from grpc import aio
from wharf.client.wire_channel import WireChannel
from wharf.rocketmq.v2 import definition_pb2, service_pb2
from wharf.store.codec.send_records import encode_record, topic_tail
from wharf.v1 import messaging_pb2

from tests.bench.v2_floor import METADATA, TOPIC, V2, send_request

STORE_SEND = "/wharf.v1.MessagingService/SendMessage"
Call = Callable[[bytes], Awaitable[bytes]]


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def v2_ok(reply: bytes) -> bool:
    return service_pb2.SendMessageResponse.FromString(reply).status.code == definition_pb2.OK


def records_ok(batch: int) -> Callable[[bytes], bool]:
    return lambda reply: messaging_pb2.SendMessageResponse.FromString(reply).count == batch


def v2_calls(args: argparse.Namespace) -> tuple[list[bytes], list[Call]]:
    body = b"x" * args.size
    total = args.warmup + args.calls
    requests = [send_request(f"MC{i:030X}", body) for i in range(args.first, args.first + total)]
    options = [("grpc.use_local_subchannel_pool", 1)]
    channels = [aio.insecure_channel(args.target, options=options) for _ in range(args.channels)]
    stubs = [c.unary_unary(V2 + "SendMessage") for c in channels]  # type: ignore[call-arg]
    calls: list[Call] = [functools.partial(s, metadata=METADATA) for s in stubs]
    return requests, calls


def records_calls(
    args: argparse.Namespace,
) -> tuple[list[bytes], list[Call]]:
    body = b"x" * args.size
    tail = topic_tail(TOPIC)
    requests = []
    for n in range(args.warmup + args.calls):
        first = args.first + n * args.batch
        records = b"".join(
            encode_record(tail, body, b"UNIQ_KEY\x01MC%030X\x02" % i)
            for i in range(first, first + args.batch)
        )
        request = messaging_pb2.SendMessageRequest(topic=TOPIC, queue_id=n % 8, records=records)
        requests.append(request.SerializeToString())
    channels = [WireChannel(args.target) for _ in range(args.channels)]
    calls: list[Call] = [c.unary_unary(STORE_SEND) for c in channels]  # type: ignore[call-arg]
    return requests, calls


async def drive(
    requests: list[bytes],
    calls: list[Call],
    inflight: int,
    ok: Callable[[bytes], bool],
) -> int:
    """Every request, ``inflight`` at a time spread over ``calls``; the replies not OK."""
    it = iter(requests)
    failed = 0

    async def worker(call: Call) -> None:
        nonlocal failed
        for request in it:
            if not ok(await call(request)):
                failed += 1

    spread = itertools.cycle(calls)
    await asyncio.gather(*(worker(next(spread)) for _ in range(inflight)))
    return failed


async def run(args: argparse.Namespace) -> None:
    ok: Callable[[bytes], bool]
    if args.mode == "v2":
        requests, calls = v2_calls(args)
        ok, per_call = v2_ok, 1
    else:
        args.warmup = -(-args.warmup // args.batch)  # as many warm-up messages
        requests, calls = records_calls(args)
        ok, per_call = records_ok(args.batch), args.batch
    failed = await drive(requests[: args.warmup], calls, args.inflight, ok)
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    cpu, start = cpu_s(), time.monotonic()
    failed += await drive(requests[args.warmup :], calls, args.inflight, ok)
    end = time.monotonic()
    report = {
        "start": start,
        "end": end,
        "calls": args.calls,
        "messages": args.calls * per_call,
        "sent": (args.warmup + args.calls) * per_call,  # the warm-up's too
        "failed": failed,
        "cpu_s": cpu_s() - cpu,
    }
    print(json.dumps(report), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--mode", choices=("v2", "records"), default="v2")
    parser.add_argument("--calls", type=int, required=True)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--inflight", type=int, default=32)
    parser.add_argument("--channels", type=int, default=4)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=64)
    uvloop.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
