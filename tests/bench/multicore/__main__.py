"""Multi-core prototype, measured: v2 SendMessage through N SO_REUSEPORT front-end processes
feeding one store process over the wire protocol, against today's single-process broker.

    .venv/bin/python -m tests.bench.multicore [--rounds 5] [--calls 6000] [--loaders 2]
        [--inflight 32] [--channels 4] [--size 1024] [--window 1]
        [--configs single,front1,front2,store1,store8,store64]
        [--output FILE]

One broker (``BrokerProcess``: ASYNC_FLUSH, 8 queues per topic, logging at WARNING, its wire
port on) is both today's broker and the prototype's store process. Configurations, each run
alternately ``--rounds`` times so all see the same neighbours on a shared machine:

- ``single``: ``--loaders`` client processes call the broker's gRPC port: one unary
  apache.rocketmq.v2 ``SendMessage`` of one ``--size`` message per call (``load`` ``v2``);
- ``front1`` / ``front2``: the same calls to 1 or 2 front-end processes (``front``) sharing one
  port with SO_REUSEPORT, which forward coalesced records to the broker's wire port;
- ``store<B>`` (``store1``, ``store8``, ``store64``): the store process alone fed B-record
  batches over the wire (``load`` ``records``, ``--calls`` / B calls per loader): the serial
  part's cost per message, which is a cost per request over B plus a cost per record.

Broker-side CPU is the on-CPU time of every thread of the serving processes (fronts + store,
/proc/PID/task/*/schedstat) from the loaders' start until the servers are idle again
(``settled``), per message; the loaders' own CPU (getrusage) is printed apart. Throughput is
messages over the span from the first loader's start to the last one's end. Each figure: the
median over rounds and the range. Every reply is checked (v2 status OK; the store's count of
records) and at the end the topic must hold exactly the messages sent, warm-ups included. The
model (``model``) turns the medians into msg/s for 2 to 16 cores: the store process is serial
(one core at most), the fronts scale with the cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import grpc
from wharf.client.admin import Admin

from tests.bench.v2_floor import TOPIC, cpu_ns
from tests.harness import REPO_ROOT, BrokerProcess, bench_broker

STATS = "/bench.Front/Stats"  # a front's counters, on its own port
CONFIGS = ("single", "front1", "front2", "store1", "store8", "store64")


@dataclass
class Front:
    proc: subprocess.Popen[bytes]
    port: int
    stats_port: int

    def stats(self) -> dict[str, int]:
        with grpc.insecure_channel(f"127.0.0.1:{self.stats_port}") as channel:
            raw = channel.unary_unary(STATS)(b"", timeout=10)  # type: ignore[call-arg]
        return json.loads(raw)  # type: ignore[no-any-return]


def start_front(root: Path, name: str, store: str, port: int, window: int) -> Front:
    ready = root / f"{name}.json"
    cmd = [
        sys.executable, "-m", "tests.bench.multicore.front",
        "--store", store, "--listen", f"127.0.0.1:{port}", "--ready", str(ready), "--window", str(window),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT)
    deadline = time.monotonic() + 30
    while not ready.exists() or not ready.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"front {name} did not start")
        time.sleep(0.05)
    info = json.loads(ready.read_text())
    return Front(proc, info["port"], info["stats"])


@dataclass
class Sample:
    messages: int
    seconds: float
    server_ns: dict[str, int]  # "store" and "fronts"
    client_s: float
    batch: float = 0.0  # records per store request (fronts)
    split: list[int] = field(default_factory=list)  # calls per front

    def us_per_message(self, part: str | None = None) -> float:
        ns = sum(self.server_ns.values()) if part is None else self.server_ns[part]
        return ns / self.messages / 1e3


class Bench:
    def __init__(self, broker: BrokerProcess, fronts: dict[str, list[Front]], args: Any):
        self.broker = broker
        self.fronts = fronts
        self.args = args
        self.next_id = 0
        self.sent = 0  # messages, warm-ups included: the topic must hold exactly these
        self.samples: dict[str, list[Sample]] = {name: [] for name in args.configs}

    def run(self, config: str) -> Sample:
        args = self.args
        fronts = self.fronts.get(config, [])
        batch = 1
        if config == "single":
            target, mode, calls = self.broker.endpoint, "v2", args.calls
        elif config.startswith("store"):
            target = self.broker.wire_endpoint.removeprefix("wire://")
            batch = int(config[len("store") :])
            mode, calls = "records", max(1, args.calls // batch)  # as many messages
        else:
            target, mode, calls = f"127.0.0.1:{fronts[0].port}", "v2", args.calls
        loaders: list[subprocess.Popen[str]] = []
        for _ in range(args.loaders):
            cmd = [
                sys.executable, "-m", "tests.bench.multicore.load",
                "--target", target, "--mode", mode, "--calls", str(calls),
                "--inflight", str(args.inflight), "--channels", str(args.channels),
                "--first", str(self.next_id), "--size", str(args.size),
                "--batch", str(batch),
            ]  # fmt: skip
            self.next_id += (calls + 200) * batch
            loaders.append(
                subprocess.Popen(
                    cmd, cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
                )
            )
        for loader in loaders:
            if _line(loader.stdout) != "ready":
                raise SystemExit(f"a loader of {config} did not warm up")
        before_stats = [f.stats() for f in fronts]
        pids = {"store": [self.broker.pid], "fronts": [f.proc.pid for f in fronts]}
        before = {part: sum(map(cpu_ns, p)) for part, p in pids.items()}
        for loader in loaders:
            assert loader.stdin is not None
            loader.stdin.write("go\n")
            loader.stdin.flush()
        lines = [_line(loader.stdout) for loader in loaders]
        if not all(lines):
            raise SystemExit(f"a loader of {config} failed (its traceback is above)")
        reports = [json.loads(line) for line in lines]
        after = settled(pids)
        for loader in loaders:
            loader.wait(timeout=30)
        if failed := sum(r["failed"] for r in reports):
            raise SystemExit(f"{config}: {failed} calls were not answered OK")
        self.sent += sum(r["sent"] for r in reports)
        sample = Sample(
            messages=sum(r["messages"] for r in reports),
            seconds=max(r["end"] for r in reports) - min(r["start"] for r in reports),
            server_ns={part: after[part] - before[part] for part in pids},
            client_s=sum(r["cpu_s"] for r in reports),
        )
        if fronts:
            after_stats = [f.stats() for f in fronts]
            records = sum(
                a["records"] - b["records"] for a, b in zip(after_stats, before_stats, strict=True)
            )
            batches = sum(
                a["batches"] - b["batches"] for a, b in zip(after_stats, before_stats, strict=True)
            )
            sample.batch = records / batches if batches else 0.0
            sample.split = [
                a["calls"] - b["calls"] for a, b in zip(after_stats, before_stats, strict=True)
            ]
        self.samples[config].append(sample)
        return sample


async def stored_messages(endpoint: str) -> int:
    async with Admin(endpoint) as admin:
        offsets = await admin.queue_offsets(TOPIC)
    return sum(q.max_offset - q.min_offset for q in offsets.queues)


def settled(pids: dict[str, list[int]]) -> dict[str, int]:
    """CPU ns per part once the servers are idle again: the store dispatches (ConsumeQueue,
    index) behind its replies, and that work belongs to the run. Idle: a 200 ms interval with
    under 20 ms of CPU (10% of a core; the broker idles at ~1%), at most 10 s."""
    now = {part: sum(map(cpu_ns, p)) for part, p in pids.items()}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.2)
        then, now = now, {part: sum(map(cpu_ns, p)) for part, p in pids.items()}
        if sum(now.values()) - sum(then.values()) < 20_000_000:
            break
    return now


def _line(stream: IO[str] | None) -> str:
    assert stream is not None
    return stream.readline().strip()


def spread(values: list[float], digits: int = 0) -> str:
    """'median (min-max)'."""
    fmt = f"{{:,.{digits}f}}"
    median = fmt.format(statistics.median(values))
    return f"{median} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def report(samples: dict[str, list[Sample]]) -> str:
    header = (
        f"{'config':<8} {'runs':>4} {'msg/s':>22} {'server µs/msg':>20} {'store µs/msg':>20} "
        f"{'fronts µs/msg':>20} {'client µs/msg':>14} {'batch':>6}"
    )
    lines = [header, "-" * len(header)]
    for name, runs in samples.items():
        if not runs:
            continue
        fronts = [s.us_per_message("fronts") for s in runs]
        lines.append(
            f"{name:<8} {len(runs):>4} {spread([s.messages / s.seconds for s in runs]):>22} "
            f"{spread([s.us_per_message() for s in runs]):>20} "
            f"{spread([s.us_per_message('store') for s in runs]):>20} "
            f"{spread(fronts) if any(fronts) else '-':>20} "
            f"{statistics.median(s.client_s * 1e6 / s.messages for s in runs):>14.0f} "
            f"{statistics.median(s.batch for s in runs) if runs[0].batch else 0:>6.1f}"
        )
        if runs[0].split and len(runs[0].split) > 1:
            lines.append(f"{'':<8} calls per front, each run: {[s.split for s in runs]}")
    return "\n".join(lines)


def model(samples: dict[str, list[Sample]]) -> str:
    """Messages/s on C cores counting only the measured server CPU (clients elsewhere).

    The store process is serial: per message it costs ``req / b + rec`` µs (``req`` per request,
    ``rec`` per record, fitted on the ``store<B>`` medians; b: records per request). The fronts
    cost F µs/msg (``front2``'s median) on any core. With every front keeping one request in
    flight, requests grow while the store is busy, so the store keeps up as long as some b
    does: rate = min((C - 1) * 1e6 / F, 1e6 / rec), the store holding one core, at the batch
    b = req / (1e6 / rate - rec). Today's broker is one process: 1e6 / its µs/msg."""

    def median(config: str, part: str | None = None) -> float | None:
        runs = samples.get(config) or []
        return statistics.median(s.us_per_message(part) for s in runs) if runs else None

    single = median("single")
    front = median("front2", "fronts") or median("front1", "fronts")
    points = [
        (1 / int(name[len("store") :]), us)
        for name in samples
        if name.startswith("store") and (us := median(name)) is not None
    ]
    if not (single and front) or len(points) < 2:
        return ""
    fit = statistics.linear_regression([x for x, _ in points], [y for _, y in points])
    req, rec = fit.slope, max(fit.intercept, 0.1)
    lines = [
        f"model, server CPU only: store = {req:.0f} µs/request + {rec:.1f} µs/record; "
        f"fronts {front:.0f} µs/msg; today's single process {single:.0f} µs/msg = "
        f"{1e6 / single:,.0f} msg/s on any number of cores"
    ]
    fed = median("front2", "store")
    if fed:
        rate = 2e6 / (front + fed)
        lines.append(
            f"   2 cores: 2e6 / (fronts + store as fed, {fed:.0f} µs/msg) = {rate:,.0f} msg/s "
            f"= {rate * single / 1e6:.1f}x today"
        )
    for cores in (4, 8, 16):
        rate = min((cores - 1) * 1e6 / front, 1e6 / rec)
        batch = req / max(1e6 / rate - rec, 1e-9)
        lines.append(
            f"  {cores:>2} cores: {rate:,.0f} msg/s = {rate * single / 1e6:.1f}x today (the "
            f"store keeps up with requests of {max(batch, 1):.0f}+ records)"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=6000, help="per loader and run")
    parser.add_argument("--loaders", type=int, default=2)
    parser.add_argument("--inflight", type=int, default=32, help="per loader")
    parser.add_argument("--channels", type=int, default=4, help="TCP connections per loader")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--window", type=int, default=1, help="a front's requests in flight")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    args.configs = [c for c in args.configs.split(",") if c]
    for config in args.configs:
        if config not in ("single", "front1", "front2") and not (
            config.startswith("store") and config[len("store") :].isdigit()
        ):
            raise SystemExit(f"unknown configuration {config!r}")
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="wharf-multicore-") as tmp:
        root = Path(tmp)
        settings = {
            "defaultTopicQueueNums": 8,
            "mappedFileSizeCommitLog": 256 * 1024 * 1024,
        }
        with bench_broker(root / "broker", settings=settings, ready_timeout=60.0) as broker:
            store = broker.wire_endpoint.removeprefix("wire://")
            fronts: dict[str, list[Front]] = {}
            try:
                if "front1" in args.configs:
                    fronts["front1"] = [start_front(root, "front1", store, 0, args.window)]
                if "front2" in args.configs:
                    first = start_front(root, "front2a", store, 0, args.window)
                    second = start_front(root, "front2b", store, first.port, args.window)
                    fronts["front2"] = [first, second]
                bench = Bench(broker, fronts, args)
                for round_no in range(args.rounds):
                    for config in args.configs:
                        s = bench.run(config)
                        print(
                            f"round {round_no + 1} {config}: {s.messages / s.seconds:,.0f} msg/s, "
                            f"server {s.us_per_message():.0f} µs/msg "
                            f"(store {s.us_per_message('store'):.0f}), batch {s.batch:.1f}",
                            flush=True,
                        )
            finally:
                for group in fronts.values():
                    for front in group:
                        front.proc.terminate()
                        front.proc.wait(timeout=10)
            stored = asyncio.run(stored_messages(broker.endpoint))
            if stored != bench.sent:
                raise SystemExit(f"the topic holds {stored} messages; {bench.sent} were sent")
            print(f"the topic holds the {stored:,} messages sent, warm-ups included")
            if "Traceback" in broker.log():
                raise SystemExit(f"the broker logged a traceback:\n{broker.log()[-4000:]}")
    print(report(bench.samples))
    print(model(bench.samples))
    print(
        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(started))} UTC, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f}, {time.time() - started:.0f} s"
    )
    if args.output:
        args.output.write_text(
            json.dumps(
                {name: [vars(s) for s in runs] for name, runs in bench.samples.items()},
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
