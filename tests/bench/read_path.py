"""The read path, measured: consume throughput and CPU per message over PullMessageStream against
unary PullMessage, and where a lone message's time goes from ``send()`` to the handler.

    .venv/bin/python -m tests.bench.read_path [--messages 200000] [--pullers 50] [--pulls 20000]
        [--lone 200] [--no-hops]

Part 1 (consume): one daemon, ``--messages`` of 1 KiB produced, then read back by
``--pullers`` tasks of one PullConsumer (100 per pull, queue ranges split as ``wharf bench
consume`` does), once over the stream and once unary, alternately ``--rounds`` times. It
prints msg/s and the broker's and the client's CPU per message (the figure that stays
meaningful when other work shares the machine).

Part 2 (per pull): ``--pulls`` pulls of one message each by 8 tasks: broker and client CPU per
pull, stream against unary (the per-call cost, before the first message).

Part 3 (lone message): ``--lone`` messages sent one at a time (the next only after the
previous reached the handler, so nothing queues) by a Producer to a PushConsumer, under
ASYNC_FLUSH and SYNC_FLUSH, pulls over the stream, unary, and (``wire``) sends and pulls over
the wire port. Each message's time is split at the send ack: send() -> ack (client encode +
RPC + store append, and the group commit's fdatasync under SYNC_FLUSH) and ack -> handler
(dispatch, long-poll wake-up, pull reply, client decode and hand-off to the handler, minus
what overlapped the ack's way back; under SYNC_FLUSH the handler usually runs before the ack
is back: < 0). Percentiles per stage; the machine's fdatasync and a bare gRPC round trip are
printed first as the floor. Then, for the runs over gRPC streams and over the wire port, the
per-hop breakdown: the broker runs with ``WHARF_HOP_TRACE`` (``wharf.hops``) and this process
stamps the SDK's hops, so each lone message's time from ``send()`` to its handler is split at
every hand-off (batcher, stream write, broker handler, append, group commit and its fdatasync
thread, dispatch, long-poll wake-up, pull reply, client read, handler): per hop, its time
since ``send()`` and since the hop it follows (p50 / p99, us). ``--no-hops`` leaves the
stamps off.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop
from wharf import hops
from wharf.client import ConsumeResult, MessageQueue, Producer, PullConsumer, PushConsumer
from wharf.client.message import ReceivedMessage

from tests.bench.broker_send import process_cpu_seconds
from tests.harness import bench_broker


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def produce(endpoint: str, topic: str, count: int, size: int) -> None:
    body = os.urandom(size)
    async with Producer(endpoint, max_in_flight=2) as producer:
        remaining = count

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                n = min(16, remaining)
                remaining -= n
                await producer.send_batch(topic, [body] * n)

        await asyncio.gather(*(worker() for _ in range(50)))


async def consume(endpoint: str, topic: str, pullers: int, stream: bool) -> tuple[int, float]:
    """Read the whole topic; (messages, seconds)."""
    async with PullConsumer(endpoint, f"rp-{time.time_ns()}", stream_pulls=stream) as consumer:
        work: list[tuple[MessageQueue, int, int]] = []
        for queue in await consumer.queues(topic):
            low, high = await consumer.bounds(queue)
            work.extend((queue, lo, min(lo + 1600, high)) for lo in range(low, high, 1600))
        work.reverse()
        total = 0

        async def worker() -> None:
            nonlocal total
            while work:
                queue, offset, end = work.pop()
                while offset < end:
                    result = await consumer.pull(queue, offset, max_messages=min(100, end - offset))
                    for message in result.messages:  # what an application does at the least
                        if not message.body or not message.msg_id:
                            raise RuntimeError("empty message")
                    total += len(result.messages)
                    offset = result.next_begin_offset

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(pullers)))
        return total, time.perf_counter() - started


async def consume_part(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="wharf-readpath-") as tmp:
        broker = bench_broker(Path(tmp)).start()
        try:
            await produce(broker.endpoint, "rp", args.messages, args.size)
            figures: dict[str, list[dict[str, float]]] = {"stream": [], "unary": []}
            for _ in range(args.rounds):
                for mode in ("stream", "unary"):
                    broker_cpu = process_cpu_seconds(broker.pid)
                    client_cpu = time.process_time()
                    count, seconds = await consume(
                        broker.endpoint, "rp", args.pullers, mode == "stream"
                    )
                    figures[mode].append(
                        {
                            "msgs_per_s": count / seconds,
                            "broker_us_per_msg": (process_cpu_seconds(broker.pid) - broker_cpu)
                            / count
                            * 1e6,
                            "client_us_per_msg": (time.process_time() - client_cpu) / count * 1e6,
                        }
                    )
        finally:
            broker.stop()
    summary = {
        mode: {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        for mode, runs in figures.items()
    }
    for mode, row in summary.items():
        print(
            f"consume {mode:6s}: {row['msgs_per_s']:>9,.0f} msg/s  broker "
            f"{row['broker_us_per_msg']:.2f} us/msg  client {row['client_us_per_msg']:.2f} us/msg"
            f"  (median of {args.rounds})"
        )
    ratio = summary["stream"]["msgs_per_s"] / summary["unary"]["msgs_per_s"]
    print(f"consume stream/unary: {ratio:.2f}x")
    return summary


async def small_pulls(endpoint: str, topic: str, pulls: int, stream: bool) -> float:
    """``pulls`` pulls of ONE message each by 8 tasks: the per-pull cost. Seconds taken."""
    async with PullConsumer(endpoint, f"sp-{time.time_ns()}", stream_pulls=stream) as consumer:
        queue = (await consumer.queues(topic))[0]
        per_task = pulls // 8

        async def worker(start: int) -> None:
            for i in range(per_task):
                result = await consumer.pull(queue, start + i, max_messages=1)
                if len(result.messages) != 1:
                    raise RuntimeError(f"pull at {start + i}: {result.status}")

        started = time.perf_counter()
        await asyncio.gather(*(worker(k * per_task) for k in range(8)))
        return time.perf_counter() - started


async def per_pull_part(args: argparse.Namespace) -> dict[str, Any]:
    """Broker and client CPU per pull of one message: the per-call cost the stream cuts."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="wharf-pulls-") as tmp:
        settings = {"defaultTopicQueueNums": 1}
        with bench_broker(Path(tmp), settings=settings) as broker:
            await produce(broker.endpoint, "sp", args.pulls, args.size)
            for mode in ("stream", "unary", "stream", "unary"):
                broker_cpu = process_cpu_seconds(broker.pid)
                client_cpu = time.process_time()
                seconds = await small_pulls(broker.endpoint, "sp", args.pulls, mode == "stream")
                row = {
                    "pulls_per_s": args.pulls / seconds,
                    "broker_us_per_pull": (process_cpu_seconds(broker.pid) - broker_cpu)
                    / args.pulls
                    * 1e6,
                    "client_us_per_pull": (time.process_time() - client_cpu) / args.pulls * 1e6,
                }
                out[mode] = row  # the second round of each (warm)
    for mode, row in out.items():
        print(
            f"pull of 1 message, {mode:6s}: {row['pulls_per_s']:>8,.0f} pulls/s  broker "
            f"{row['broker_us_per_pull']:.0f} us/pull  client {row['client_us_per_pull']:.0f} "
            "us/pull"
        )
    return out


async def lone_messages(
    endpoint: str, count: int, stream: bool
) -> tuple[dict[str, list[float]], list[tuple[int, int]]]:
    """Send one message at a time to a PushConsumer; the stages of each, in ms, and each
    measured message's (send ns, handler ns) window (for the hop breakdown)."""
    stages: dict[str, list[float]] = {"send->ack": [], "ack->handler": [], "send->handler": []}
    windows: list[tuple[int, int]] = []
    arrived: asyncio.Queue[tuple[ReceivedMessage, int]] = asyncio.Queue()

    async def handler(message: ReceivedMessage) -> ConsumeResult:
        if hops.ENABLED:
            hops.stamp("c.handler")
        handled_ns = time.time_ns()
        arrived.put_nowait((message, handled_ns))
        return ConsumeResult.SUCCESS

    strays = 0

    async def handled(body: bytes) -> int:
        """When the handler got ``body`` (each body is unique: a late or repeated delivery of
        another message, e.g. the topic-creating one, is counted, not taken for this one's)."""
        nonlocal strays
        while True:
            message, handled_ns = await asyncio.wait_for(arrived.get(), 10.0)
            if message.body == body:
                return handled_ns
            strays += 1

    topic = f"lone-{time.time_ns()}"
    async with Producer(endpoint) as producer:
        await producer.send(topic, b"create", queue_id=0)
        consumer = PushConsumer(
            endpoint, topic, handler=handler, consume_from_where="LAST", stream_pulls=stream
        )
        consumer.subscribe(topic)
        async with consumer:
            await asyncio.sleep(0.5)  # pulls parked
            for i in range(count + 20):
                sent_ns = time.time_ns()
                if hops.ENABLED:
                    hops.stamp("c.send")
                body = i.to_bytes(8, "big") + b"x" * 1016
                await producer.send(topic, body, queue_id=0)
                acked_ns = time.time_ns()
                if hops.ENABLED:
                    hops.stamp("c.ack")
                handled_ns = await handled(body)
                if i < 20:
                    continue  # warm-up
                windows.append((sent_ns, handled_ns))
                stages["send->ack"].append((acked_ns - sent_ns) / 1e6)
                # The handler may run before the ack is back (dispatch races the ack): < 0.
                stages["ack->handler"].append((handled_ns - acked_ns) / 1e6)
                stages["send->handler"].append((handled_ns - sent_ns) / 1e6)
                await asyncio.sleep(0.002)
    if strays:
        print(f"  ({strays} deliveries of other messages than the one just sent, skipped)")
    return stages, windows


# The hops of a lone message (wharf.hops stamps; c. = client, b. = broker): name, what,
# and the hops it follows (the first of them present: ASYNC_FLUSH has no b.sync_* nor
# b.put_resumed). After the append (ASYNC) or the sync (SYNC) two chains run side by side:
# the ack (b.send_done ... c.ack) and the dispatch (b.reput_run ... c.handler).
HOPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("c.send", "send() called", ()),
    ("c.batch_run", "batcher: batch request task runs", ("c.send",)),
    ("c.write", "send stream: write starts", ("c.batch_run",)),
    ("b.send_in", "broker: send handler has the request", ("c.write",)),
    ("b.appended", "broker: appended to the CommitLog", ("b.send_in",)),
    ("b.sync_kick", "broker: group commit requested", ("b.appended",)),
    ("b.sync_start", "flush thread: fdatasync starts", ("b.sync_kick", "b.appended")),
    ("b.sync_done", "flush thread: fdatasync done", ("b.sync_start",)),
    ("b.sync_served", "broker loop: sync waiters answered", ("b.sync_done",)),
    ("b.put_resumed", "broker: put resumes after the sync", ("b.sync_served",)),
    ("b.send_done", "broker: send reply built", ("b.put_resumed", "b.appended")),
    ("b.ack_yield", "broker: send reply handed to transport", ("b.send_done",)),
    ("c.ack_read", "client: send reply read", ("b.ack_yield",)),
    ("c.ack", "send() returned", ("c.ack_read",)),
    ("b.reput_run", "broker: reput run starts", ("b.sync_served", "b.appended")),
    ("b.dispatched", "broker: ConsumeQueue advanced", ("b.reput_run",)),
    ("b.arrival", "broker: parked pulls woken", ("b.dispatched",)),
    ("b.pull_woken", "broker: the pull resumes", ("b.arrival",)),
    ("b.pull_yield", "broker: pull reply handed to transport", ("b.pull_woken",)),
    ("c.pull_read", "client: pull reply read", ("b.pull_yield",)),
    ("c.handler", "handler called", ("c.pull_read", "b.pull_yield")),
)


def hop_breakdown(stamps: list[tuple[str, int]], windows: list[tuple[int, int]]) -> list[str]:
    """Per lone message, the first stamp of each hop inside its (send, handler) window; a line
    per hop: its time since send() (p50) and since the hop it follows (p50 / p99), in us."""
    ordered = sorted(stamps, key=lambda s: s[1])
    times = [ns for _, ns in ordered]
    names = {name for name, _, _ in HOPS}
    since_send: dict[str, list[float]] = {name: [] for name in names}
    step: dict[str, list[float]] = {name: [] for name in names}
    for start, end in windows:
        first: dict[str, int] = {}
        for name, ns in ordered[bisect.bisect_left(times, start) : bisect.bisect_right(times, end)]:
            if name in names and name not in first:
                first[name] = ns
        if "c.send" not in first:
            continue
        for name, _, after in HOPS:
            if name not in first:
                continue
            at = first[name]
            since_send[name].append((at - first["c.send"]) / 1000)
            previous = next((first[p] for p in after if p in first), at)
            step[name].append((at - previous) / 1000)
    lines = [f"{'hop':14s} {'what':38s} {'at p50':>7s} {'step p50':>9s} {'step p99':>9s}  (us)"]
    for name, what, _ in HOPS:
        if since_send[name]:
            lines.append(
                f"{name:14s} {what:38s} {pct(since_send[name], 0.5):7.0f} "
                f"{pct(step[name], 0.5):9.0f} {pct(step[name], 0.99):9.0f}"
            )
    return lines


def fdatasync_ms(samples: int = 200) -> list[float]:
    with tempfile.NamedTemporaryFile(dir=tempfile.gettempdir()) as handle:
        times = []
        for i in range(samples):
            os.pwrite(handle.fileno(), b"x" * 1024, i * 1024)
            started = time.perf_counter()
            os.fdatasync(handle.fileno())
            times.append((time.perf_counter() - started) * 1000)
    return times


async def route_rtt_ms(endpoint: str, samples: int = 300) -> list[float]:
    """A bare unary round trip (QueryRoute: no store work)."""
    import grpc
    from wharf.v1 import messaging_pb2, messaging_pb2_grpc

    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        request = messaging_pb2.QueryRouteRequest(topic="rtt")
        times = []
        for i in range(samples + 50):
            started = time.perf_counter()
            await stub.QueryRoute(request)
            if i >= 50:
                times.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(0.001)
    return times


async def lone_part(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sync = fdatasync_ms()
    print(f"floor: fdatasync of 1 KiB p50 {pct(sync, 0.5):.3f} p99 {pct(sync, 0.99):.3f} ms")
    for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        with tempfile.TemporaryDirectory(prefix="wharf-lone-") as tmp:
            settings = {"flushDiskType": flush}
            trace = Path(tmp) / "broker-hops.txt"
            env = {"WHARF_HOP_TRACE": str(trace)} if args.hops else {}
            hops.ENABLED = args.hops  # this process's stamps (the SDK's hops)
            with bench_broker(Path(tmp), settings=settings, env=env) as broker:
                if flush == "ASYNC_FLUSH":
                    rtt = await route_rtt_ms(broker.endpoint)
                    print(
                        f"floor: bare gRPC round trip p50 {pct(rtt, 0.5):.3f} "
                        f"p99 {pct(rtt, 0.99):.3f} ms"
                    )
                windows: dict[str, list[tuple[int, int]]] = {}
                # stream / unary: pulls over a PullMessageStream or PullMessage (gRPC); wire:
                # the same stream over the wire port (send and pull alike).
                for mode, endpoint in (
                    ("stream", broker.endpoint),
                    ("unary", broker.endpoint),
                    ("wire", broker.wire_endpoint),
                ):
                    stages, windows[mode] = await lone_messages(
                        endpoint, args.lone, mode != "unary"
                    )
                    out[f"{flush} {mode}"] = {
                        name: {"p50_ms": pct(v, 0.5), "p99_ms": pct(v, 0.99)}
                        for name, v in stages.items()
                    }
                    row = "  ".join(
                        f"{name} p50 {pct(v, 0.5):.3f} p99 {pct(v, 0.99):.3f}"
                        for name, v in stages.items()
                    )
                    print(f"lone {flush:11s} {mode:6s}: {row}")
            hops.ENABLED = False
            if args.hops and trace.exists():
                stamps = hops.read(str(trace)) + hops.STAMPS
                hops.STAMPS.clear()
                for mode in ("stream", "wire"):
                    print(f"hops of a lone message, {flush}, pulls over the {mode}:")
                    for line in hop_breakdown(stamps, windows[mode]):
                        print("  " + line)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--pullers", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lone", type=int, default=200, help="lone messages (0: skip part 2)")
    parser.add_argument("--pulls", type=int, default=20_000, help="one-message pulls (0: skip)")
    parser.add_argument("--skip-consume", action="store_true")
    parser.add_argument(
        "--no-hops",
        dest="hops",
        action="store_false",
        help="part 3 without the per-hop breakdown (WHARF_HOP_TRACE stamps)",
    )
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f} (2 cores shared)")
    uvloop.run(run_parts(args))  # one loop: grpc.aio binds its poller to the first one


async def run_parts(args: argparse.Namespace) -> None:
    if not args.skip_consume:
        await consume_part(args)
    if args.pulls:
        await per_pull_part(args)
    if args.lone:
        await lone_part(args)


if __name__ == "__main__":
    main()
