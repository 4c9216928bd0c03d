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

from tests.bench.broker_send import process_cpu_seconds as cpu_seconds
from tests.harness import REPO_ROOT, BrokerProcess

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


PAIRS = (
    ("sync", "send, one at a time"),
    ("async", "send, {inflight} in flight"),
    ("send_batch", "send_batch of 32 (SDK only)"),
    ("receive_only", "receive, no ack (official only), 32 a time"),
    ("receive", "receive+ack (official) / pull+commit (SDK), 32 a time"),
)


def table(phases: list[Phase], inflight: int) -> str:
    by = {(p.client, p.name): p for p in phases}
    header = (
        f"{'phase':<56} {'official msg/s':>14} {'SDK msg/s':>10} {'ratio':>6} "
        f"{'official µs/msg':>16} {'SDK µs/msg':>11} {'ratio':>6}"
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
        lines.append(
            f"{label.format(inflight=inflight):<56} {rate} {sdk_rate} {rate_ratio} "
            f"{cpu} {sdk_cpu} {cpu_ratio}"
        )
    return "\n".join(lines)


def run(messages: int, size: int, inflight: int) -> list[Phase]:
    with tempfile.TemporaryDirectory(prefix="wharf-v2-bench-") as tmp:
        root = Path(tmp)
        settings = {
            "defaultTopicQueueNums": QUEUES,
            "mappedFileSizeCommitLog": 64 * 1024 * 1024,
            "logLevel": "WARNING",
        }
        with BrokerProcess(root / "broker", settings=settings, ready_timeout=60.0) as broker:
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
    phases = run(args.messages, args.size, args.inflight)
    print(table(phases, args.inflight))
    print(
        f"\n{args.messages} messages of {args.size} B per phase; {time.monotonic() - started:.0f} s"
    )
    if args.output:
        figures = [
            {**asdict(p), "msg_per_s": p.rate, "broker_cpu_us_per_msg": p.cpu_us} for p in phases
        ]
        report = {"messages": args.messages, "size": args.size, "inflight": args.inflight}
        args.output.write_text(json.dumps({**report, "phases": figures}, indent=2))


if __name__ == "__main__":
    main()
