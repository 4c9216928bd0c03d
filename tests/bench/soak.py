"""Soak: mixed load on a SYNC_FLUSH and an ASYNC_FLUSH broker for a given time, with a restart of
each in the middle, printing every interval what drifts in a long run: the brokers' RSS, open
file descriptors, event-loop tasks, threads and CPU (and this load process's own CPU), p50/p99 send and end-to-end latency, and
dispatch lag. A program that prints figures, not a test.

    python -m tests.bench.soak --duration 1800            # the 30-minute run, a row a minute
    python -m tests.bench.soak --duration 120 --interval 20   # a smoke run

Load on each broker, all from this process (one uvloop event loop):
- ``send()`` of one message every 1/``--rate`` s to an e2e topic (its body carries the send time),
  consumed by a PushConsumer that records send -> handler latency;
- ``send_batch()`` of ``--batch`` messages every 100 ms to a bulk topic, read by a PullConsumer
  that commits its offsets;
- lookups every second (QueryMessage by key, ViewMessage by id of a recent message);
- topic churn every 5 s (create a topic, send 10 messages to it, delete it);
- at half time the SYNC_FLUSH broker is killed with SIGKILL and the ASYNC_FLUSH broker stopped
  with SIGTERM, both restarted on the same ports; clients reconnect on their own and errors
  during the gap are counted, not fatal.

The summary compares the first and the last five intervals after a warm-up of one interval:
RSS and fd growth, and p99 last / p99 first (the soak target is <= 1.5x).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import tempfile
import time
import urllib.request
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvloop
from wharf.client import Admin, ConsumeResult, Producer, PullConsumer, PushConsumer, WharfError

from tests.bench.broker_send import process_cpu_seconds
from tests.harness import BrokerProcess, free_port

E2E_TOPIC = "SoakE2E"
SLOW_E2E_MS = 100.0
BULK_TOPIC = "SoakBulk"


@dataclass
class Window:
    """Figures of one broker during one interval."""

    # Arrays, not lists: an array is one object the garbage collector never walks. Lists of
    # ~60k floats a minute, kept for the summary, made the soak's own full collections grow
    # with the run and showed up as a slowly rising p99 measured by this very process.
    send_ms: array[float] = field(default_factory=lambda: array("d"))
    e2e_ms: array[float] = field(default_factory=lambda: array("d"))
    sent: int = 0
    bulk_sent: int = 0
    pulled: int = 0
    lookups: int = 0
    churned: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def error(self, what: str, exc: BaseException) -> None:
        key = f"{what}:{type(exc).__name__}"
        self.errors[key] = self.errors.get(key, 0) + 1


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def process_figures(pid: int) -> dict[str, float]:
    """RSS (MiB: anonymous memory, the heap a leak grows, and file-backed pages of the mapped
    segments, which grow with the data read through the maps until retention unmaps them), open
    fds and threads of a process, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    fields = dict(line.split(":", 1) for line in status if ":" in line)
    return {
        "rss_mib": int(fields["VmRSS"].split()[0]) / 1024,
        "anon_mib": int(fields["RssAnon"].split()[0]) / 1024,
        "file_mib": int(fields["RssFile"].split()[0]) / 1024,
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "threads": int(fields["Threads"]),
        "cpu_s": process_cpu_seconds(pid),
    }


def process_age(pid: int) -> float:
    """Seconds since a process started (field 22 of /proc/PID/stat, in ticks since boot)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    started = int(stat[stat.rindex(")") + 2 :].split()[19]) / os.sysconf("SC_CLK_TCK")
    return float(Path("/proc/uptime").read_text().split()[0]) - started


def scrape(metrics_endpoint: str, names: tuple[str, ...]) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{metrics_endpoint}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    found = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name in names:
            found[name] = float(rest)
    return found


class BrokerLoad:
    """One broker and the clients that load it."""

    def __init__(self, name: str, flush: str, root: Path, args: argparse.Namespace) -> None:
        self.name = name
        self.args = args
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.broker = BrokerProcess(
            root,
            settings={
                "flushDiskType": flush,
                "defaultTopicQueueNums": 4,
                "mappedFileSizeCommitLog": 64 << 20,
                # Retention at its shortest (sealed segments expire at once, every hour is a
                # deletion hour, a pass every 10 s) holds each store at a few segments, so mapped
                # pages and open files reach a steady state within minutes: growth past it is a
                # leak, not data. Both consumers keep up, so nothing unread is deleted.
                "fileReservedTime": 0,
                "deleteWhen": ";".join(f"{hour:02d}" for hour in range(24)),
                "cleanResourceInterval": 10_000,
            },
            extra_args=["--listen", self.endpoint],
        )
        self.window = Window()
        self.recent: list[tuple[str, str]] = []  # (key, msg_id) of recent e2e messages
        self.restarting = False
        self.slow: list[tuple[float, float]] = []  # (send time s, e2e ms) above SLOW_E2E_MS
        self.cpu_mark: tuple[int, float, float] = (0, 0.0, 0.0)  # (pid, cpu s, monotonic s)

    def take_window(self) -> Window:
        window, self.window = self.window, Window()
        return window

    async def run(self, stop: asyncio.Event) -> None:
        async with Admin(self.endpoint) as admin:
            for topic in (E2E_TOPIC, BULK_TOPIC):
                await admin.create_topic(topic, queue_nums=4)
        producer = Producer(self.endpoint, send_timeout=5.0)
        push = PushConsumer(self.endpoint, "soak-push", handler=self._on_message)
        push.subscribe(E2E_TOPIC)
        pull = PullConsumer(self.endpoint, "soak-pull")
        async with producer, push, pull, Admin(self.endpoint) as admin:
            tasks = [
                asyncio.create_task(self._paced_sends(producer, stop)),
                asyncio.create_task(self._bulk_sends(producer, stop)),
                asyncio.create_task(self._pulls(pull, stop)),
                asyncio.create_task(self._lookups(admin, stop)),
                asyncio.create_task(self._churn(admin, producer, stop)),
            ]
            await stop.wait()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _on_message(self, msg: Any) -> ConsumeResult:
        sent_ns = int.from_bytes(msg.body[:8], "big")
        e2e_ms = (time.time_ns() - sent_ns) / 1e6
        self.window.e2e_ms.append(e2e_ms)
        if e2e_ms > SLOW_E2E_MS:  # when the slow ones were sent: finds a periodic stall
            self.slow.append((round(sent_ns / 1e9, 3), round(e2e_ms, 1)))
        return ConsumeResult.SUCCESS

    async def _paced_sends(self, producer: Producer, stop: asyncio.Event) -> None:
        period = 1.0 / self.args.rate
        padding = b"x" * max(0, self.args.body_size - 8)
        next_at = time.monotonic()
        n = 0
        while not stop.is_set():
            next_at += period
            delay = next_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            key = f"k{n}"
            n += 1
            started = time.perf_counter()
            try:
                body = time.time_ns().to_bytes(8, "big") + padding
                result = await producer.send(E2E_TOPIC, body, keys=[key])
            except WharfError as exc:
                self.window.error("send", exc)
                next_at = time.monotonic()  # no catch-up burst after an outage
                continue
            self.window.send_ms.append((time.perf_counter() - started) * 1000)
            self.window.sent += 1
            if n % 100 == 0:
                self.recent = [*self.recent[-9:], (key, result.msg_id)]

    async def _bulk_sends(self, producer: Producer, stop: asyncio.Event) -> None:
        bodies = [b"b" * self.args.body_size] * self.args.batch
        while not stop.is_set():
            await asyncio.sleep(0.1)
            try:
                await producer.send_batch(BULK_TOPIC, bodies)
                self.window.bulk_sent += len(bodies)
            except WharfError as exc:
                self.window.error("batch", exc)

    async def _pulls(self, pull: PullConsumer, stop: asyncio.Event) -> None:
        queues = await pull.queues(BULK_TOPIC)
        positions = {q: await pull.committed(q) for q in queues}
        while not stop.is_set():
            got = 0
            for queue in queues:
                try:
                    result = await pull.pull(queue, max(positions[queue], 0), max_messages=256)
                    got += len(result.messages)
                    if result.messages:
                        positions[queue] = result.next_begin_offset
                        await pull.commit(queue, result.next_begin_offset)
                except WharfError as exc:
                    self.window.error("pull", exc)
                    await asyncio.sleep(0.5)
            self.window.pulled += got
            if not got:
                await asyncio.sleep(0.05)

    async def _lookups(self, admin: Admin, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.sleep(1.0)
            if not self.recent:
                continue
            key, msg_id = self.recent[-1]
            try:
                await admin.query_messages(E2E_TOPIC, key)
                await admin.view_message(msg_id, E2E_TOPIC)
                self.window.lookups += 2
            except WharfError as exc:
                self.window.error("lookup", exc)

    async def _churn(self, admin: Admin, producer: Producer, stop: asyncio.Event) -> None:
        n = 0
        while not stop.is_set():
            await asyncio.sleep(5.0)
            topic = f"SoakChurn{n % 1000}"
            n += 1
            try:
                await admin.create_topic(topic, queue_nums=2)
                await producer.send_batch(topic, [b"c" * 64] * 10)
                await admin.delete_topic(topic)
                self.window.churned += 1
            except WharfError as exc:
                self.window.error("churn", exc)

    def figures(self) -> dict[str, float]:
        pid = self.broker.pid
        figures = process_figures(pid)
        now = time.monotonic()
        mark_pid, mark_cpu, mark_at = self.cpu_mark
        if mark_pid != pid:  # a (re)started broker: since it started
            mark_cpu, mark_at = 0.0, now - process_age(pid)
        figures["cpu_pct"] = 100 * (figures["cpu_s"] - mark_cpu) / max(now - mark_at, 1e-3)
        self.cpu_mark = (pid, figures["cpu_s"], now)
        names = ("wharf_event_loop_tasks", "wharf_store_dispatch_behind_bytes")
        with contextlib.suppress(OSError):
            scraped = scrape(self.broker.metrics_endpoint, names)
            figures["tasks"] = scraped.get("wharf_event_loop_tasks", float("nan"))
            figures["dispatch_lag"] = scraped.get("wharf_store_dispatch_behind_bytes", float("nan"))
        return figures

    async def restart(self, kill: bool) -> None:
        self.restarting = True
        try:
            if kill:
                self.broker.kill()
                await asyncio.to_thread(self.broker.start)
            else:
                await asyncio.to_thread(self.broker.restart)
        finally:
            self.restarting = False


def row(
    minute: float, load: BrokerLoad, window: Window, figures: dict[str, float]
) -> dict[str, Any]:
    return {
        "t_s": round(minute),
        "broker": load.name,
        "rss_mib": round(figures.get("rss_mib", float("nan")), 1),
        "anon_mib": round(figures.get("anon_mib", float("nan")), 1),
        "file_mib": round(figures.get("file_mib", float("nan")), 1),
        "fds": figures.get("fds"),
        "tasks": figures.get("tasks"),
        "threads": figures.get("threads"),
        "cpu_pct": round(figures.get("cpu_pct", float("nan")), 1),
        "load_cpu_pct": round(figures.get("load_cpu_pct", float("nan")), 1),
        "send_p50_ms": round(percentile(window.send_ms, 0.50), 2),
        "send_p99_ms": round(percentile(window.send_ms, 0.99), 2),
        "e2e_p50_ms": round(percentile(window.e2e_ms, 0.50), 2),
        "e2e_p99_ms": round(percentile(window.e2e_ms, 0.99), 2),
        "dispatch_lag_bytes": figures.get("dispatch_lag"),
        "sent": window.sent,
        "bulk_sent": window.bulk_sent,
        "pulled": window.pulled,
        "received_e2e": len(window.e2e_ms),
        "lookups": window.lookups,
        "churned": window.churned,
        "errors": dict(window.errors),
        "_send": window.send_ms,
        "_e2e": window.e2e_ms,
    }


COLUMNS = ("t_s", "broker", "rss_mib", "anon_mib", "file_mib", "fds", "tasks", "threads", "cpu_pct",
           "load_cpu_pct", "send_p50_ms", "send_p99_ms",
           "e2e_p50_ms", "e2e_p99_ms", "dispatch_lag_bytes", "sent", "bulk_sent", "pulled",
           "lookups", "churned")  # fmt: skip


def print_row(r: dict[str, Any]) -> None:
    cells = [str(r[c]) for c in COLUMNS]
    errors = ",".join(f"{k}={v}" for k, v in r["errors"].items())
    print(" | ".join(cells) + (f" | errors {errors}" if errors else ""), flush=True)


def summary(rows: list[dict[str, Any]], broker: str, span: int) -> dict[str, Any]:
    mine = [r for r in rows if r["broker"] == broker][1:]  # the first interval is warm-up
    if len(mine) < 2:
        return {}
    span = max(1, min(span, len(mine) // 2))
    first, last = mine[:span], mine[-span:]

    def p99(rs: list[dict[str, Any]], key: str) -> float:
        return percentile([v for r in rs for v in r[key]], 0.99)

    out = {
        "broker": broker,
        "rss_mib_first": mine[0]["rss_mib"],
        "rss_mib_last": mine[-1]["rss_mib"],
        "anon_mib_first": mine[0]["anon_mib"],
        "anon_mib_last": mine[-1]["anon_mib"],
        "fds_first": mine[0]["fds"],
        "fds_last": mine[-1]["fds"],
        "tasks_first": mine[0]["tasks"],
        "tasks_last": mine[-1]["tasks"],
        "intervals_compared": span,
    }
    for key, name in (("_send", "send"), ("_e2e", "e2e")):
        a, b = p99(first, key), p99(last, key)
        out[f"{name}_p99_first_ms"] = round(a, 2)
        out[f"{name}_p99_last_ms"] = round(b, 2)
        out[f"{name}_p99_ratio"] = round(b / a, 2) if a > 0 else None
    out["errors_total"] = sum(sum(r["errors"].values()) for r in mine)
    return out


async def soak(args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    loads = [
        BrokerLoad("sync", "SYNC_FLUSH", root / "sync", args),
        BrokerLoad("async", "ASYNC_FLUSH", root / "async", args),
    ]
    for load in loads:
        await asyncio.to_thread(load.broker.start)
    stop = asyncio.Event()
    runners = [asyncio.create_task(load.run(stop)) for load in loads]
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    restarted = False
    print(" | ".join(COLUMNS), flush=True)
    load_cpu = (time.process_time(), time.monotonic())  # this process: the clients' side
    try:
        while (elapsed := time.monotonic() - started) < args.duration:
            await asyncio.sleep(min(args.interval, args.duration - elapsed))
            now = (time.process_time(), time.monotonic())
            load_cpu_pct = 100 * (now[0] - load_cpu[0]) / (now[1] - load_cpu[1])
            load_cpu = now
            for load in loads:
                window = load.take_window()
                try:
                    figures = await asyncio.to_thread(load.figures)
                except OSError:
                    figures = {}
                figures["load_cpu_pct"] = load_cpu_pct
                r = row(time.monotonic() - started, load, window, figures)
                rows.append(r)
                print_row(r)
            for task in runners:
                if task.done():
                    task.result()  # a load task died: raise its error
            if not restarted and time.monotonic() - started >= args.duration / 2:
                restarted = True
                print("-- restart: sync broker SIGKILL, async broker SIGTERM --", flush=True)
                await asyncio.gather(loads[0].restart(kill=True), loads[1].restart(kill=False))
    finally:
        stop.set()
        await asyncio.gather(*runners, return_exceptions=True)
        for load in loads:
            await asyncio.to_thread(load.broker.stop)
    for load in loads:
        stalls = _stalls(load.slow)
        print(f"{load.name}: {len(load.slow)} messages over {SLOW_E2E_MS:.0f} ms end to end, "
              f"in {len(stalls)} stalls (send time, messages, worst ms): {stalls[:40]}", flush=True)  # fmt: skip
    return rows


def _stalls(slow: list[tuple[float, float]]) -> list[tuple[str, int, float]]:
    """Slow messages grouped into stalls (sent within 1 s of each other)."""
    stalls: list[tuple[str, int, float]] = []
    start = last = worst = 0.0
    count = 0
    for sent, ms in sorted(slow):
        if count and sent - last > 1.0:
            stalls.append((time.strftime("%H:%M:%S", time.gmtime(start)), count, worst))
            count, worst = 0, 0.0
        if not count:
            start = sent
        count, last, worst = count + 1, sent, max(worst, ms)
    if count:
        stalls.append((time.strftime("%H:%M:%S", time.gmtime(start)), count, worst))
    return stalls


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench.soak", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--duration", type=float, default=1800.0, help="seconds (default 1800)")
    parser.add_argument("--interval", type=float, default=60.0, help="seconds per row (default 60)")
    parser.add_argument(
        "--rate",
        type=float,
        default=200.0,
        # A SYNC_FLUSH send waits for its fsync: sequential sends reach ~300/s on this 2-core
        # box, so a higher pace is a flood, and at 500/s the two brokers and this process used
        # 160% of the 200% CPU, making p99 a measure of contention rather than of drift.
        help="paced sends per second per broker (default 200)",
    )
    parser.add_argument(
        "--batch", type=int, default=64, help="messages per bulk send (10 per second)"
    )
    parser.add_argument("--body-size", type=int, default=1024)
    parser.add_argument("--compare", type=int, default=5, help="intervals compared first vs last")
    parser.add_argument("--output", default="", help="write rows and summary as JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wharf-soak-") as tmp:
        rows = uvloop.run(soak(args, Path(tmp)))
    summaries = [summary(rows, name, args.compare) for name in ("sync", "async")]
    print(json.dumps(summaries, indent=2))
    if args.output:
        public = [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]
        Path(args.output).write_text(json.dumps({"rows": public, "summary": summaries}, indent=2))


if __name__ == "__main__":
    main()
