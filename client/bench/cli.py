"""``wharf bench produce|consume|e2e``: periodic and final figures as a table and as JSON.

wharf bench produce --topic bench --tasks 64 --size 1024 --duration 10
wharf bench consume --topic bench --batch 256
wharf bench e2e --topic bench-e2e --rate 10000 --duration 10 --json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import sys
from collections.abc import Awaitable, Callable

from wharf.client.admin import Admin
from wharf.client.bench.runners import BenchOptions, run_consume, run_e2e, run_produce
from wharf.client.bench.stats import BenchStats
from wharf.client.cli.cluster_commands import connection_of_args
from wharf.client.cli.output import Output
from wharf.client.connection import Connection

WORKLOADS: dict[str, Callable[[BenchOptions, BenchStats], Awaitable[None]]] = {
    "produce": run_produce,
    "consume": run_consume,
    "e2e": run_e2e,
}
COLUMNS = ["msgs_per_s", "mb_per_s", "p50_ms", "p99_ms", "p999_ms", "max_ms", "messages"]


def add_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    bench = sub.add_parser("bench", help="benchmarks: produce, consume, end-to-end latency")
    bsub = bench.add_subparsers(dest="workload", required=True, metavar="WORKLOAD")
    for name, default_batch, text in (
        ("produce", 1, "send as fast as possible (batch 1 = auto-batched send())"),
        ("consume", 256, "read a topic from its beginning"),
        ("e2e", 1, "send at --rate and measure send-to-receive latency"),
    ):
        parser = bsub.add_parser(name, help=text)
        parser.add_argument("--topic", default="wharf-bench")
        parser.add_argument("--tasks", type=int, default=64, help="concurrent senders/pullers")
        parser.add_argument("--size", type=int, default=1024, help="message size, bytes")
        parser.add_argument("--batch", type=int, default=default_batch, help="messages per call")
        parser.add_argument("--duration", type=float, default=10.0, help="seconds")
        parser.add_argument("--count", type=int, default=0, help="messages (instead of --duration)")
        parser.add_argument("--streams", type=int, default=1, help="producer send streams")
        parser.add_argument("--linger-ms", type=float, default=0.0)
        parser.add_argument("--max-in-flight", type=int, default=2, help="requests per stream")
        parser.add_argument("--rate", type=int, default=10_000, help="e2e target msg/s")
        parser.add_argument("--interval", type=float, default=2.0, help="report every N s")
        parser.add_argument(
            "--unary-pulls", action="store_true", help="one PullMessage call per pull (no stream)"
        )
        parser.set_defaults(run=bench_command)


async def bench_command(args: argparse.Namespace, out: Output) -> int:
    if args.size < 8 or args.tasks < 1 or args.batch < 1 or args.duration <= 0:
        raise ValueError("--size >= 8, --tasks >= 1, --batch >= 1 and --duration > 0 required")
    options = BenchOptions(
        endpoints=args.endpoints,
        topic=args.topic,
        tasks=args.tasks,
        size=args.size,
        batch=args.batch,
        duration_s=args.duration,
        count=args.count,
        streams=args.streams,
        linger_ms=args.linger_ms,
        max_in_flight=args.max_in_flight,
        rate=args.rate,
        stream_pulls=not args.unary_pulls,
        # One broker (--endpoints) with the global options' keys and TLS, as ever.
        connection=connection_of_args(args).to(args.endpoints),
    )
    flush_mode = await _flush_mode(options.client_connection())
    stats = BenchStats()
    # Start-up objects (modules, descriptors) live as long as the process; out of the
    # collector's generations, a full collection no longer pauses the measured loop for ms.
    gc.collect()
    gc.freeze()
    reporter = asyncio.ensure_future(_report_every(args.interval, stats, out))
    try:
        await WORKLOADS[args.workload](options, stats)
    finally:
        reporter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reporter
    summary = stats.summary()
    result = {
        "workload": args.workload,
        "flush_disk_type": flush_mode,
        "options": {
            k: v
            for k, v in vars(options).items()
            if k not in ("endpoints", "connect", "connection")
        },
        "tls": options.client_connection().tls is not None,
        "result": summary,
    }
    if out.as_json:
        out.data(result)
    else:
        out.table(
            f"wharf bench {args.workload} ({flush_mode}, {args.size} B, tasks={args.tasks}, "
            f"batch={args.batch})",
            COLUMNS,
            [[summary[c] for c in COLUMNS]],
        )
        sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    return 0 if summary["messages"] > 0 else 1


async def _flush_mode(connection: Connection) -> str:
    try:
        async with Admin(connection=connection, rpc_timeout_s=3.0) as admin:
            return (await admin.broker_status()).flush_disk_type or "unknown"
    except Exception:
        return "unknown"


async def _report_every(interval: float, stats: BenchStats, out: Output) -> None:
    while True:
        await asyncio.sleep(interval)
        snap = stats.snapshot()
        if out.as_json:
            out.data({"interval": snap})
        else:
            out.err_console.print(
                f"[{snap['elapsed_s']:>6.1f}s] {snap['msgs_per_s']:>10,.0f} msg/s "
                f"{snap['mb_per_s']:>7.1f} MB/s  p50 {snap['p50_ms']:.2f} ms  "
                f"p99 {snap['p99_ms']:.2f} ms  p999 {snap['p999_ms']:.2f} ms",
                markup=False,
            )
