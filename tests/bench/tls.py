"""The cost of TLS on SDK produce and consume throughput: plaintext and TLS through one daemon,
same run.

    .venv/bin/python -m tests.bench.tls [--messages 100000] [--size 1024] [--tasks 64]
        [--rounds 2] [--output FILE]

One broker (``BrokerProcess``: ASYNC_FLUSH, 8 queues per topic, logging at WARNING) with
``tlsEnable`` and ``tlsListen``: its plaintext port and its TLS port (the generated development
certificate, ECDSA P-256; TLS 1.3 with TLS_AES_256_GCM_SHA384, as ``openssl s_client`` reports)
serve the same store. Each round runs, on each port: ``wharf bench produce`` of ``--messages``
messages of ``--size`` bytes from ``--tasks`` concurrent ``send()`` calls (the SDK auto-batches
them), then ``wharf bench consume`` of the same topic from its beginning (8 pullers, 256
messages or 256 KiB a pull). The client is the ``wharf`` CLI in its own process (``--ca-file``
for TLS), so the broker and the client each get their own interpreter as in production. Phases
alternate plaintext / TLS, so drift from the neighbours on a shared machine hits both.

For every phase: msg/s (the CLI's own figure, client start-up excluded), the broker's CPU per
message (utime + stime from /proc/PID/stat around the phase) and the client's (the child's
rusage, its start-up included: ~0.5 s of imports, 5 us/msg at 100,000 messages). The table gives the median of the rounds and TLS/plaintext for each figure.
``--output`` writes every figure as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.bench.broker_send import process_cpu_seconds as cpu_seconds
from tests.harness import REPO_ROOT, BrokerProcess, Daemons

QUEUES = 8


@dataclass
class Phase:
    transport: str  # "plaintext" | "tls"
    workload: str  # "produce" | "consume"
    round: int
    messages: int
    msgs_per_s: float
    p99_ms: float
    broker_cpu_us: float  # per message
    client_cpu_us: float  # per message


def consume_batch(size: int) -> int:
    """Messages per pull: 256, or 256 KiB of bodies for larger messages (8 pullers x 3 MiB
    replies would pass the broker's 16 MiB maxUnreadPullBytesPerClient)."""
    return max(1, min(256, 256 * 1024 // size))


def run_phase(
    broker: BrokerProcess, transport: str, workload: str, topic: str, args: argparse.Namespace,
    round_no: int,
) -> Phase:  # fmt: skip
    endpoint = broker.tls_endpoint if transport == "tls" else broker.plaintext_endpoint
    tls = ["--ca-file", str(broker.store_dir / "config" / "tls" / "broker.crt")]
    extra = (
        ["--tasks", str(args.tasks), "--batch", "1", "--streams", "1", "--max-in-flight", "4"]
        if workload == "produce"
        else ["--tasks", "8", "--batch", str(consume_batch(args.size))]
    )
    cmd = [
        sys.executable, "-m", "wharf.client.cli.main", "--endpoints", endpoint,
        *(tls if transport == "tls" else []), "--json", "bench", workload, "--topic", topic,
        "--count", str(args.messages), "--size", str(args.size), "--interval", "3600", *extra,
    ]  # fmt: skip
    before_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    broker_before = cpu_seconds(broker.pid)
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)
    broker_after = cpu_seconds(broker.pid)
    after_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    result = next(
        json.loads(line) for line in reversed(proc.stdout.splitlines()) if '"workload"' in line
    )["result"]
    count = int(result["messages"])
    client_cpu = (after_children.ru_utime + after_children.ru_stime) - (
        before_children.ru_utime + before_children.ru_stime
    )
    return Phase(
        transport, workload, round_no, count, float(result["msgs_per_s"]),
        float(result["p99_ms"]), (broker_after - broker_before) / count * 1e6,
        client_cpu / count * 1e6,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.tls", description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    phases: list[Phase] = []
    with tempfile.TemporaryDirectory(prefix="wharf-bench-tls-") as tmp:
        settings = {
            "tlsEnable": True,
            "tlsListen": "127.0.0.1:0",
            "defaultTopicQueueNums": QUEUES,
            "logLevel": "WARNING",
        }
        with Daemons(Path(tmp)).broker(Path(tmp), settings=settings) as broker:
            for round_no in range(args.rounds):
                order = ("plaintext", "tls") if round_no % 2 == 0 else ("tls", "plaintext")
                for workload in ("produce", "consume"):
                    for transport in order:
                        topic = f"bench-{transport}-{round_no}"
                        phase = run_phase(broker, transport, workload, topic, args, round_no)
                        phases.append(phase)
                        print(
                            f"round {round_no} {workload:<8} {transport:<9} "
                            f"{phase.msgs_per_s:>10,.0f} msg/s  p99 {phase.p99_ms:7.2f} ms  "
                            f"broker {phase.broker_cpu_us:6.1f} us/msg  "
                            f"client {phase.client_cpu_us:6.1f} us/msg",
                            flush=True,
                        )
    print()
    print(f"{args.messages} x {args.size} B per phase, median of {args.rounds} round(s)")
    header = f"{'':<8} {'figure':<16} {'plaintext':>12} {'TLS':>12} {'TLS/plain':>10}"
    print(header)
    summary: dict[str, dict[str, float]] = {}
    for workload in ("produce", "consume"):
        for figure in ("msgs_per_s", "broker_cpu_us", "client_cpu_us", "p99_ms"):
            values = {
                transport: statistics.median(
                    getattr(p, figure)
                    for p in phases
                    if p.workload == workload and p.transport == transport
                )
                for transport in ("plaintext", "tls")
            }
            ratio = values["tls"] / values["plaintext"] if values["plaintext"] else 0.0
            summary[f"{workload}.{figure}"] = {**values, "ratio": ratio}
            print(
                f"{workload:<8} {figure:<16} {values['plaintext']:>12,.1f} "
                f"{values['tls']:>12,.1f} {ratio:>9.2f}x"
            )
    if args.output:
        args.output.write_text(
            json.dumps({"phases": [asdict(p) for p in phases], "summary": summary}, indent=1)
        )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
