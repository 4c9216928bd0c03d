"""The OFFICIAL RocketMQ 5 Python client against Wharf's own SDK, through one daemon, same run.

    .venv/bin/python -m tests.bench.v2_clients [--messages 10000] [--size 1024] [--inflight 64]
        [--output FILE]

One broker (``BrokerProcess``: ASYNC_FLUSH, 8 queues per topic, logging at WARNING). Phases,
each over ``--messages`` messages of ``--size`` bytes (1 KiB):

- official (rocketmq-python-client 5.1.2 in .venv-rmq/, one subprocess per phase that times
  itself, tests/bench/rmq_v2_client_script.py): ``Producer.send`` one at a time;
  ``send_async`` with at most ``--inflight`` pending; ``SimpleConsumer.receive`` in batches of
  32 by a second group that acks nothing (the ReceiveMessage calls alone: what building the
  v2 ``Message`` of each record costs shows here); then ``SimpleConsumer.receive`` in batches
  of 32 with every message acked (on ``--inflight`` threads) until all of them came back;
- SDK (``wharf.client`` in this process): ``Producer.send`` awaited one at a time;
  ``Producer.send`` with ``--inflight`` concurrent (they share requests: auto-batching);
  ``send_batch`` of 32 (another topic; no official counterpart); then ``PullConsumer.pull`` of
  32 per request over every queue with the offsets committed, until all of them came back.

For every phase: msg/s (the phase's own wall clock) and the broker's CPU per message in µs
(utime + stime of the broker process from /proc/PID/stat around the phase, as soak.py's
``cpu_seconds``; client start-up is outside the window). The table pairs each official phase
with the SDK's and gives official/SDK for both figures: a rate ratio below 1 and a CPU ratio
above 1 mean the v2 path costs more. On a shared 2-core machine the rates move with the
neighbours and the clients compete with the broker for CPU; the µs/msg figures move less.
``--output`` writes every figure as JSON.

The floor (issue 37): after the phases, a bare grpc.aio server (tests/bench/v2_floor.py's, its
own process) answers the v2 calls the official client makes per message with fixed bytes of
the same sizes (one SendMessage per message sent; one ReceiveMessage of 32 per 32 messages
received; one AckMessage per message acked), ``--inflight`` at a time; its CPU per call gives
each official phase a floor µs/msg and the ratio official/floor. ``tests.bench.v2_floor``
measures each call against its floor chunk by chunk, with profiles.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from wharf.client import Producer
from wharf.client.consumer.pull import PullConsumer, PullStatus

from tests.bench import v2_floor
from tests.bench.broker_send import process_cpu_seconds as cpu_seconds
from tests.harness import REPO_ROOT, BrokerProcess, bench_broker

RMQ_PYTHON = REPO_ROOT / ".venv-rmq" / "bin" / "python"
SCRIPT = Path(__file__).with_name("rmq_v2_client_script.py")
QUEUES = 8
PULL_BATCH = 32


@dataclass
class Phase:
    name: str
    client: str  # "official" or "sdk"
    count: int
    seconds: float
    broker_cpu_s: float

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0

    @property
    def cpu_us(self) -> float:
        return self.broker_cpu_s / self.count * 1e6 if self.count else 0.0


def official_phase(
    broker: BrokerProcess,
    home: Path,
    phase: str,
    topic: str,
    count: int,
    size: int,
    inflight: int,
    group: str = "bench-official",
) -> Phase:
    """Run one phase of the official client in its own interpreter; the broker's CPU is read
    between its READY line and its JSON result line."""
    if not RMQ_PYTHON.exists():
        raise SystemExit("the official client's venv is missing: run `make rmq-client`")
    home.mkdir(exist_ok=True)  # the client logs to ~/logs/rocketmq_python/
    env = {**os.environ, "HOME": str(home)}
    env.pop("PYTHONPATH", None)
    args = [broker.endpoint, phase, topic, group, str(count), str(size), str(inflight)]
    proc = subprocess.Popen(
        [str(RMQ_PYTHON), str(SCRIPT), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    result: dict[str, float] | None = None
    cpu_before = 0.0
    for line in proc.stdout:
        if line.strip() == "READY":
            cpu_before = cpu_seconds(broker.pid)
            proc.stdin.write("\n")
            proc.stdin.flush()
        elif line.startswith("{"):
            cpu_after = cpu_seconds(broker.pid)
            result = json.loads(line)
            break
    proc.stdin.close()
    if proc.wait(timeout=120) != 0 or result is None:
        raise SystemExit(f"official client phase {phase} failed (exit {proc.returncode})")
    return Phase(phase, "official", count, float(result["seconds"]), cpu_after - cpu_before)


async def sdk_phase(
    broker: BrokerProcess, name: str, count: int, run: Callable[[], Awaitable[int]]
) -> Phase:
    cpu_before = cpu_seconds(broker.pid)
    started = time.perf_counter()
    done = await run()
    seconds = time.perf_counter() - started
    cpu_after = cpu_seconds(broker.pid)
    if done != count:
        raise SystemExit(f"SDK phase {name}: {done} of {count} messages")
    return Phase(name, "sdk", count, seconds, cpu_after - cpu_before)


async def sdk_phases(broker: BrokerProcess, count: int, size: int, inflight: int) -> list[Phase]:
    body = b"x" * size
    topic = "bench-sdk"
    phases = []
    async with Producer(broker.endpoint) as producer:
        await producer.send(topic, body)  # warm-up: route and stream, not counted

        async def one_at_a_time() -> int:
            for _ in range(count):
                await producer.send(topic, body)
            return count

        async def concurrent() -> int:
            window = asyncio.Semaphore(inflight)

            async def one() -> None:
                async with window:
                    await producer.send(topic, body)

            await asyncio.gather(*(one() for _ in range(count)))
            return count

        async def batches() -> int:
            sent = 0
            while sent < count:
                n = min(PULL_BATCH, count - sent)
                sent += len(await producer.send_batch("bench-sdk-batch", [body] * n))
            return sent

        phases.append(await sdk_phase(broker, "sync", count, one_at_a_time))
        phases.append(await sdk_phase(broker, "async", count, concurrent))
        phases.append(await sdk_phase(broker, "send_batch", count, batches))

    async with PullConsumer(broker.endpoint, "bench-sdk-pull") as consumer:
        queues = await consumer.queues(topic)
        total = 2 * count + 1

        async def pull_all() -> int:
            got = 0
            for queue in queues:
                offset = 0
                while True:
                    result = await consumer.pull(queue, offset, max_messages=PULL_BATCH)
                    if result.status is not PullStatus.FOUND:
                        break
                    got += len(result.messages)
                    offset = result.next_begin_offset
                await consumer.commit(queue, offset)
            return got

        phases.append(await sdk_phase(broker, "receive", total, pull_all))
    return phases


# The v2 calls the official client makes per message in each phase: (floor call, calls per
# message). The floor calls are bare grpc.aio unary calls of the v2 calls' sizes
# (tests/bench/v2_floor.py: request bytes, response bytes at 1 KiB bodies).
FLOOR_CALLS = {
    "sync": (("send", 1.0),),
    "async": (("send", 1.0),),
    "receive_only": (("receive32", 1 / PULL_BATCH),),
    "receive": (("receive32", 1 / PULL_BATCH), ("ack", 1.0)),
}


def floor_sizes(size: int) -> dict[str, tuple[bytes, int]]:
    """(request bytes, response size) of each floor call: a SendMessage of one ``size``-byte
    message (a 59-byte reply), an AckMessage of one entry (103 -> 81 bytes), a ReceiveMessage
    of 32 (76 bytes -> 32 messages of ``size`` + 210 bytes of properties and framing)."""
    return {
        "send": (v2_floor.send_request("F" * 32, b"x" * size), 59),
        "ack": (b"a" * 103, 81),
        "receive32": (b"r" * 76, PULL_BATCH * (size + 210) + 40),
    }


async def floor_per_call(
    pid: int, endpoint: str, size: int, calls: int, inflight: int
) -> dict[str, float]:
    """The floor server's CPU µs per call of each kind (after 200 untimed calls)."""
    from grpc import aio

    out: dict[str, float] = {}
    async with aio.insecure_channel(endpoint) as channel:
        for name, (request, reply) in floor_sizes(size).items():
            call = v2_floor.unary(channel, f"{v2_floor.FLOOR}U{reply}")
            await v2_floor.drive([request] * 200, inflight, call)
            ns, _, _ = await v2_floor.timed(pid, [request] * calls, inflight, call)
            out[name] = ns / calls / 1e3
    return out


def floor_us_per_message(phase: str, floor: dict[str, float]) -> float | None:
    calls = FLOOR_CALLS.get(phase)
    return sum(floor[name] * per for name, per in calls) if calls and floor else None


PAIRS = (
    ("sync", "send, one at a time"),
    ("async", "send, {inflight} in flight"),
    ("send_batch", "send_batch of 32 (SDK only)"),
    ("receive_only", "receive, no ack (official only), 32 a time"),
    ("receive", "receive+ack (official) / pull+commit (SDK), 32 a time"),
)


def table(phases: list[Phase], inflight: int, floor: dict[str, float] | None = None) -> str:
    by = {(p.client, p.name): p for p in phases}
    header = (
        f"{'phase':<56} {'official msg/s':>14} {'SDK msg/s':>10} {'ratio':>6} "
        f"{'official µs/msg':>16} {'SDK µs/msg':>11} {'ratio':>6} {'floor µs/msg':>13} "
        f"{'official/floor':>15}"
    )
    lines = [header, "-" * len(header)]
    for name, label in PAIRS:
        official, sdk = by.get(("official", name)), by.get(("sdk", name))
        if official is None and sdk is None:
            continue
        rate = f"{official.rate:>14.0f}" if official else f"{'-':>14}"
        cpu = f"{official.cpu_us:>16.0f}" if official else f"{'-':>16}"
        sdk_rate = f"{sdk.rate:>10.0f}" if sdk else f"{'-':>10}"
        sdk_cpu = f"{sdk.cpu_us:>11.0f}" if sdk else f"{'-':>11}"
        both = official is not None and sdk is not None
        rate_ratio = f"{official.rate / sdk.rate:>6.2f}" if both else f"{'-':>6}"
        cpu_ratio = f"{official.cpu_us / sdk.cpu_us:>6.2f}" if both and sdk.cpu_us else f"{'-':>6}"
        floor_us = floor_us_per_message(name, floor or {})
        floor_col = f"{floor_us:>13.0f}" if floor_us else f"{'-':>13}"
        floor_ratio = (
            f"{official.cpu_us / floor_us:>14.2f}x" if floor_us and official else f"{'-':>15}"
        )
        lines.append(
            f"{label.format(inflight=inflight):<56} {rate} {sdk_rate} {rate_ratio} "
            f"{cpu} {sdk_cpu} {cpu_ratio} {floor_col} {floor_ratio}"
        )
    if floor:
        lines.append(
            "floor: the broker-side CPU of the same v2 calls per message (one SendMessage; one "
            "ReceiveMessage of 32 per 32 messages; one AckMessage) answered by a bare grpc.aio "
            "server (tests/bench/v2_floor.py), µs per call: "
            + ", ".join(f"{name} {us:.0f}" for name, us in floor.items())
        )
    return "\n".join(lines)


def run(messages: int, size: int, inflight: int) -> tuple[list[Phase], dict[str, float]]:
    with tempfile.TemporaryDirectory(prefix="wharf-v2-bench-") as tmp:
        root = Path(tmp)
        floor_proc, floor_endpoint = v2_floor.start_floor(root, broker_options=False)
        try:
            phases = run_broker(root, messages, size, inflight)
            floor = asyncio.run(
                floor_per_call(floor_proc.pid, floor_endpoint, size, min(messages, 5000), inflight)
            )
        finally:
            floor_proc.terminate()
            floor_proc.wait(timeout=10)
    return phases, floor


def run_broker(root: Path, messages: int, size: int, inflight: int) -> list[Phase]:
    settings = {
        "defaultTopicQueueNums": QUEUES,
        "mappedFileSizeCommitLog": 64 * 1024 * 1024,
    }
    with bench_broker(root / "broker", settings=settings, ready_timeout=60.0) as broker:
        home = root / "home"
        topic = "bench-official"
        phases = [
            official_phase(broker, home, "sync", topic, messages, size, inflight),
            official_phase(broker, home, "async", topic, messages, size, inflight),
            # both send phases stored one warm-up message too; a second group reads them
            # all without acking first, then the acking group
            official_phase(
                broker,
                home,
                "receive_only",
                topic,
                2 * messages + 2,
                size,
                inflight,
                group="bench-official-peek",
            ),
            official_phase(broker, home, "receive", topic, 2 * messages + 2, size, inflight),
        ]
        phases += asyncio.run(sdk_phases(broker, messages, size, inflight))
        if "Traceback" in broker.log():
            raise SystemExit(f"the broker logged a traceback:\n{broker.log()[-4000:]}")
    return phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=10000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--inflight", type=int, default=64)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    started = time.monotonic()
    phases, floor = run(args.messages, args.size, args.inflight)
    print(table(phases, args.inflight, floor))
    print(
        f"\n{args.messages} messages of {args.size} B per phase; {time.monotonic() - started:.0f} s"
    )
    if args.output:
        figures = [
            {**asdict(p), "msg_per_s": p.rate, "broker_cpu_us_per_msg": p.cpu_us} for p in phases
        ]
        report = {
            "messages": args.messages,
            "size": args.size,
            "inflight": args.inflight,
            "floor_us_per_call": floor,
        }
        args.output.write_text(json.dumps({**report, "phases": figures}, indent=2))


if __name__ == "__main__":
    main()
