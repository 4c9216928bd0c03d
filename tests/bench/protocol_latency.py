"""A lone message's latency through each protocol's client, side by side (issue 67).

    python -m tests.bench.protocol_latency [--rate 100] [--seconds 20] [--rounds 1]
        [--only wire,v2,cpp]

One SYNC_FLUSH broker (``BrokerProcess``, remoting port on, logging at WARNING) for the whole
program; each round measures, in turn, at ``--rate`` msg/s of 1 KiB for ``--seconds``, the time
from the send call to the consumer's callback of each message, with one clock (sender and
consumer in one process):

- ``wire``: Wharf's SDK, ``wharf bench e2e`` over the wire port (``compare.wharf_bench``, as
  ``lone``: 4 in flight, its own 0.5 s warm-up unrecorded). Its consumer is the SDK's
  ``PullConsumer`` long-polling every queue (``max_wait_ms=500``: an idle poll is renewed
  every 0.5 s, a message wakes the parked poll at once). ``wharf bench`` does not report how
  many it sent: the table shows rate x seconds.
- ``v2``: the official RocketMQ 5 client (rocketmq-python-client 5.1.2, .venv-rmq) over gRPC:
  ``Producer.send`` one at a time and a ``PushConsumer`` with the library's defaults
  (tests/bench/lone_client_script.py). What shapes its figure on the client side: the push
  consumer keeps one ``ReceiveMessage`` long poll per assigned queue (batch 32, the long-poll
  timeout the broker's settings give it, 20 s) and re-issues it when the previous one returns;
  received messages go to its consumption pool (20 threads) and the callback runs there, the
  ack after it (not timed). Queue assignments are re-scanned every 5 s.
- ``cpp``: Apache's RocketMQ 4.x C++ client (PyPI ``rocketmq==0.4.4``, .venv-rmq4) over the
  remoting port (also its NameServer): ``Producer.send_sync`` and a ``PushConsumer`` with the
  library's defaults (same script). Client side: librocketmq's push consumer long-polls each
  queue with PULL_MESSAGE (suspendTimeoutMillis 15000, seen with strace: the broker holds the
  pull up to 15 s and answers when a message arrives), hands what it pulled to its consume
  thread pool (the wrapper's callback gets one message) and re-issues the pull.

The two clients' sends are synchronous from one thread, paced open loop (message i due at
start + i / rate); their warm-up sends at the same rate until every message sent more than
0.5 s earlier has been delivered (the consumer owns its queues), none of it recorded. Every run
starts on a quiet disk (``compare.settle_disk``). Per protocol the program prints p50, p99 and
max (``wharf bench``'s percentile), delivered / sent, the send call's own p50 (v2 and cpp) and
the load average; with ``--rounds`` > 1 the order is reversed every other round and each
protocol's median and range follow. No targets: the figures are to be known.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from wharf.client.bench.stats import percentile

from tests.bench.compare import settle_disk, wharf_bench
from tests.bench.remoting import RMQ4_PYTHON, RMQ_PYTHON
from tests.harness import BrokerProcess, bench_broker

PROTOCOLS = ("wire", "v2", "cpp")
LABELS = {
    "wire": "Wharf SDK, wire port",
    "v2": "official v2 client, gRPC",
    "cpp": "C++ 4.x client, remoting",
}
SCRIPT = Path(__file__).with_name("lone_client_script.py")
SIZE = 1024
WARMUP_S = 2.0


def script_run(
    client: str, address: str, home: Path, topic: str, args: argparse.Namespace
) -> dict[str, Any]:
    """One run of lone_client_script.py in the client's venv; its report with p50/p99/max."""
    python = RMQ_PYTHON if client == "v2" else RMQ4_PYTHON
    if not python.exists():
        target = "rmq-client" if client == "v2" else "rmq4-client"
        raise SystemExit(f"{python.parent.parent.name} is missing: run `make {target}`")
    home.mkdir(parents=True, exist_ok=True)  # both clients log under ~/logs
    env = {**os.environ, "HOME": str(home)}
    env.pop("PYTHONPATH", None)
    cmd = [
        str(python), str(SCRIPT), client, address, topic, f"{topic}-group", str(args.rate),
        str(args.seconds), str(SIZE), str(WARMUP_S),
    ]  # fmt: skip
    timeout = args.seconds + 300
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{client} client failed ({proc.returncode}): {proc.stderr[-1500:]}")
    report = json.loads(lines[-1])
    latencies = sorted(report.pop("latencies_ms"))
    sends = sorted(report.pop("send_ms"))
    return {
        **report,
        "p50_ms": percentile(latencies, 0.5),
        "p99_ms": percentile(latencies, 0.99),
        "max_ms": latencies[-1] if latencies else 0.0,
        "send_p50_ms": percentile(sends, 0.5),
    }


def one_run(
    protocol: str, broker: BrokerProcess, root: Path, args: argparse.Namespace, n: int
) -> dict[str, Any]:
    topic = f"lone-{protocol}-{n}"
    if protocol == "wire":
        got = wharf_bench(
            broker.wire_endpoint, "e2e", topic=topic, rate=args.rate, size=SIZE,
            duration=args.seconds, max_in_flight=4,
        )  # fmt: skip
        return {**got, "delivered": got["messages"], "sent": None}
    address = broker.endpoint if protocol == "v2" else broker.remoting_endpoint
    return script_run(protocol, address, root / f"home-{protocol}", topic, args)


def line(protocol: str, got: dict[str, Any], args: argparse.Namespace) -> str:
    sent = f"{got['sent']}" if got["sent"] is not None else f"~{round(args.rate * args.seconds)}"
    send = f", send {got['send_p50_ms']:.2f}" if "send_p50_ms" in got else ""
    extra = ""
    if got.get("duplicates"):
        extra += f", {got['duplicates']} duplicates"
    if got.get("send_failed"):
        extra += f", {got['send_failed']} sends failed"
    return (
        f"  {LABELS[protocol]:26s} p50 {got['p50_ms']:7.2f}  p99 {got['p99_ms']:7.2f}  "
        f"max {got['max_ms']:7.2f} ms{send}  delivered {got['delivered']}/{sent}{extra}"
        f"  (load {got['load']:.2f})"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", default=",".join(PROTOCOLS), help="protocols, comma-separated")
    parser.add_argument(
        "--settle-max", type=float, default=30.0, help="longest wait for a quiet disk, s"
    )
    args = parser.parse_args(argv)
    protocols = tuple(p for p in PROTOCOLS if p in args.only.split(","))
    print(
        f"A lone message, send call -> consumer callback: {args.rate} msg/s of {SIZE} B, "
        f"{args.seconds:g} s per protocol, SYNC_FLUSH, {os.cpu_count()} CPUs, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        flush=True,
    )
    rounds: list[dict[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="wharf-protocol-latency-") as tmp:
        root = Path(tmp)
        with bench_broker(
            root / "broker",
            settings={"flushDiskType": "SYNC_FLUSH"},
            extra_args=["--remoting-listen", "127.0.0.1:0"],
            ready_timeout=60.0,
        ) as broker:
            for n in range(args.rounds):
                order = protocols if n % 2 == 0 else protocols[::-1]
                figures: dict[str, dict[str, Any]] = {}
                print(f"round {n + 1}:", flush=True)
                for protocol in order:
                    settle_disk(root / "broker", max_s=args.settle_max)
                    figures[protocol] = one_run(protocol, broker, root, args, n)
                    figures[protocol]["load"] = os.getloadavg()[0]
                    print(line(protocol, figures[protocol], args), flush=True)
                rounds.append(figures)
            if "Traceback" in broker.log():
                raise SystemExit(f"the broker logged a traceback:\n{broker.log()[-4000:]}")
    if args.rounds > 1:
        print(f"{args.rounds} rounds, median (range):")
        for protocol in protocols:
            p50s = [r[protocol]["p50_ms"] for r in rounds]
            p99s = [r[protocol]["p99_ms"] for r in rounds]
            print(
                f"  {LABELS[protocol]:26s} p50 {statistics.median(p50s):.2f} ms "
                f"({min(p50s):.2f}-{max(p50s):.2f}), p99 {statistics.median(p99s):.2f} ms "
                f"({min(p99s):.2f}-{max(p99s):.2f})"
            )


if __name__ == "__main__":
    main()
