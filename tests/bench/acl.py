"""Cost of aclEnable: produce, consume and small unary calls through Wharf's SDK, with ACL on
vs off, in the same run (interleaved rounds: off, on, off, on ...).

    .venv/bin/python -m tests.bench.acl [--messages 40000] [--size 1024] [--rounds 2]
        [--unary 3000] [--concurrency 64]

Per round and mode a fresh daemon (ASYNC_FLUSH, 4 queues) is started; with ACL on it has one
account with PUB|SUB on the topic and group, and every client call is signed
(wharf.client.auth) and checked (wharf.broker.kit.acl). Phases:

- produce: ``--messages`` sends of ``--size`` bytes, all issued at once through one Producer
  (its stream batches them: one signature check per batch request / stream, not per message);
- consume: everything pulled back over the 4 queues with PullConsumer, 256 per pull (one check
  per pull);
- unary: ``--unary`` QueryRoute calls, ``--concurrency`` at a time (one check per call: the
  worst case for the ACL's per-call cost);

plus the broker's CPU seconds for the whole round (from /proc). Printed: one line per phase
and mode with the best rate over the rounds, and the on/off ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

import uvloop
from wharf.client import MessageQueue, Producer, PullConsumer
from wharf.client.channel import open_channel
from wharf.v1 import messaging_pb2, messaging_pb2_grpc

from tests.bench.broker_send import process_cpu_seconds
from tests.harness import Daemons

TOPIC = "bench-acl"
GROUP = "bench-acl-g"
KEYS = ("bench", "bench-secret")
ACL_FILE = f"""accounts:
  - accessKey: {KEYS[0]}
    secretKey: {KEYS[1]}
    topicPerms: ["{TOPIC}=PUB|SUB"]
    groupPerms: ["{GROUP}=SUB"]
"""
SETTINGS = {"defaultTopicQueueNums": 4, "flushDiskType": "ASYNC_FLUSH"}


async def run_phases(endpoint: str, acl: bool, args: argparse.Namespace) -> dict[str, float]:
    keys = {"access_key": KEYS[0], "secret_key": KEYS[1]} if acl else {}
    body = os.urandom(args.size)
    out: dict[str, float] = {}
    async with Producer(endpoint, **keys) as producer:  # type: ignore[arg-type]
        await producer.send(TOPIC, body)  # route + stream warm-up
        started = time.perf_counter()
        results = await asyncio.gather(*(producer.send(TOPIC, body) for _ in range(args.messages)))
        out["produce msg/s"] = len(results) / (time.perf_counter() - started)
    async with PullConsumer(endpoint, GROUP, **keys) as consumer:  # type: ignore[arg-type]
        started = time.perf_counter()
        total = 0

        async def drain(queue_id: int) -> int:
            offset, got = 0, 0
            while True:
                result = await consumer.pull(
                    MessageQueue(TOPIC, queue_id), offset, max_messages=256
                )
                if not result.messages:
                    return got
                got += len(result.messages)
                offset = result.next_begin_offset

        total = sum(await asyncio.gather(*(drain(q) for q in range(4))))
        out["consume msg/s"] = total / (time.perf_counter() - started)
        assert total == args.messages + 1, (total, args.messages + 1)
    channel = open_channel(
        endpoint, access_key=keys.get("access_key"), secret_key=keys.get("secret_key")
    )
    stub = messaging_pb2_grpc.MessagingServiceStub(channel)
    request = messaging_pb2.QueryRouteRequest(topic=TOPIC)
    await stub.QueryRoute(request)
    pending = iter(range(args.unary))
    started = time.perf_counter()

    async def worker() -> None:
        for _ in pending:
            await stub.QueryRoute(request)

    await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    out["unary calls/s"] = args.unary / (time.perf_counter() - started)
    await channel.close()
    return out


def one_round(acl: bool, args: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="wharf-bench-acl-") as tmp:
        root = Path(tmp)
        settings = dict(SETTINGS)
        if acl:
            settings["aclEnable"] = True
            (root / "store" / "config").mkdir(parents=True)
            (root / "store" / "config" / "plain_acl.yml").write_text(ACL_FILE)
        with Daemons(root).broker(root, settings=settings) as broker:
            cpu0 = process_cpu_seconds(broker.pid)
            out = uvloop.run(run_phases(broker.endpoint, acl, args))
            out["broker CPU µs/msg"] = (
                (process_cpu_seconds(broker.pid) - cpu0) * 1e6 / (2 * args.messages + args.unary)
            )
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=40_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--unary", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    best: dict[bool, dict[str, float]] = {False: {}, True: {}}
    for _ in range(args.rounds):
        for acl in (False, True):
            for name, value in one_round(acl, args).items():
                keep = min if "CPU" in name else max
                best[acl][name] = keep(best[acl].get(name, value), value)
    print(f"{'phase':<22} {'ACL off':>12} {'ACL on':>12} {'on/off':>8}")
    for name in best[False]:
        off, on = best[False][name], best[True][name]
        print(f"{name:<22} {off:>12,.0f} {on:>12,.0f} {on / off:>8.2f}")


if __name__ == "__main__":
    main()
