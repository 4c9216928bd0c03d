"""Remoting (RocketMQ 4.x) benchmark: one broker daemon with ``--remoting-listen``, and in the
same run the remoting sends and pulls beside the wharf.v1 SDK (gRPC and the wire port), the
RocketMQ 4.x C++ client and the official RocketMQ 5 (v2) client (issue 35's performance item).

    .venv/bin/python -m tests.bench.remoting [--count 40000] [--window 32] [--size 1024]
        [--batch 16] [--rounds 3] [--cpp-count 3000] [--v2-count 3000] [--no-cpp] [--no-v2]

Phases (each a fixed message count; the broker's CPU, user + system from /proc, is read before
and after each, so ``us/msg`` is broker CPU per message, the figure that stays meaningful on a
shared 2-core machine where msg/s does not). The send phases run ``--rounds`` times, in
alternating order (the first and last phase of a round do not always meet the same neighbours'
load), and print their medians with the lowest and highest round; the pulls, the C++ and the v2
phases run once, after them. About 5 minutes with the defaults on 2 cores.

- ``remoting 310 x1``: SEND_MESSAGE_V2, one message per request, ``--window`` requests in
  flight on one connection (a raw asyncio client of this module over the codec of
  broker/frontends/remoting: frame.py, headers.py, batch.py), properties as a Java producer sets them
  (UNIQ_KEY, WAIT), queues round-robin.
- ``remoting 320 x16``: SEND_BATCH_MESSAGE, ``--batch`` messages per request
  (``encodeMessages``), the same window.
- ``remoting pull x32``: PULL_MESSAGE of everything the two phases above sent, one task per
  queue on one connection, maxMsgNums 32 (the Java client's pullBatchSize); records counted.
- ``sdk <transport> send x1``: wharf.v1 ``Producer.send`` from ``--window`` tasks with
  ``batch_max_messages=1`` (one message per request, like the remoting x1 phase), over the
  wire port (``wire://``) and over gRPC.
- ``sdk <transport> send_batch x16``: ``send_batch`` of ``--batch`` from ``--window`` tasks,
  ``batch_max_messages=--batch`` so that requests carry the same 16 messages as the remoting
  batches (the SDK's batcher would otherwise merge concurrent batches into larger requests).
- ``sdk <transport> send (auto)``: ``send`` from ``--window`` tasks with the SDK's defaults
  (auto-batched): what an SDK user gets, for reference.
- ``sdk wire pull x32``: PullConsumer.pull of the remoting topic, 32 per pull, one task per
  queue, over the wire port.
- ``cpp sync``: the C++ client (PyPI ``rocketmq==0.4.4`` in .venv-rmq4) ``send_sync``, one
  after another (``--cpp-count``), namesrvAddr = the broker's remoting port; its route look-up
  and start-up are outside the timed part.
- ``v2 official async``: the official RocketMQ 5 Python client (.venv-rmq) ``send_async``
  with ``--window`` futures pending, over gRPC (tests/bench/rmq_v2_client_script.py).

Ratios (issue 35's targets): broker CPU per remoting message / per wire-port message for the
same request shape (x1 and x16), target <= 1.5x; remoting batched sends / SDK ``send_batch`` in
broker CPU per message (and in msg/s, the other way round), target <= 1.2x.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import uvloop
from wharf.broker.frontends.remoting.batch import BatchMessage, encode_messages
from wharf.broker.frontends.remoting.headers import SEND_V2_FIELD_NAMES
from wharf.broker.kit.remoting.codes import PULL_FLAG_SUBSCRIPTION, RequestCode, ResponseCode
from wharf.broker.kit.remoting.frame import FrameDecoder, RemotingCommand, encode
from wharf.client import Producer
from wharf.client.consumer.pull import PullConsumer, PullStatus
from wharf.client.message import MessageQueue
from wharf.store.codec.properties import properties_to_string

from tests.bench.broker_send import process_cpu_seconds
from tests.harness import REPO_ROOT, BrokerProcess, Daemons

MIB = 1024 * 1024
QUEUES = 8
RMQ4_PYTHON = REPO_ROOT / ".venv-rmq4" / "bin" / "python"
RMQ_PYTHON = REPO_ROOT / ".venv-rmq" / "bin" / "python"
_SIZE = struct.Struct(">i")

# The C++ client's phase, run with .venv-rmq4's interpreter: start, warm up (route, first
# send), print READY, wait for a line, then ``count`` sync sends; one JSON line; os._exit (the
# wrapper's destructors can hang the library at interpreter exit).
CPP_SCRIPT = r"""
import json, os, sys, time
from rocketmq.client import Message, Producer
namesrv, topic, count, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
producer = Producer("bench-cpp", timeout=10000)
producer.set_namesrv_addr(namesrv)
producer.start()
body = b"x" * size
def one():
    msg = Message(topic)
    msg.set_body(body)
    return producer.send_sync(msg)
one()
print("READY", flush=True)
sys.stdin.readline()
started = time.perf_counter()
failed = 0
for _ in range(count):
    if int(one().status) != 0:
        failed += 1
print(json.dumps({"count": count, "seconds": time.perf_counter() - started, "failed": failed}),
      flush=True)
os._exit(0)
"""


@dataclass
class Phase:
    name: str
    count: int
    seconds: float
    broker_cpu_s: float
    errors: int = 0
    client_cpu_s: float | None = None  # this process's CPU (in-process clients only)
    spread: tuple[float, float] | None = None  # broker us/msg, lowest and highest round

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0

    @property
    def cpu_us(self) -> float:
        return self.broker_cpu_s / self.count * 1e6 if self.count else 0.0

    @property
    def client_us(self) -> str:
        if self.client_cpu_s is None or not self.count:
            return "-"
        return f"{self.client_cpu_s / self.count * 1e6:.1f}"


async def measured(broker: BrokerProcess, name: str, run: Awaitable[tuple[int, int]]) -> Phase:
    """Await ``run`` (-> messages, errors; a coroutine not yet started) between two readings of
    the broker's CPU."""
    cpu_before = process_cpu_seconds(broker.pid)
    client_before = time.process_time()
    started = time.perf_counter()
    count, errors = await run
    seconds = time.perf_counter() - started
    client = time.process_time() - client_before
    broker_cpu = process_cpu_seconds(broker.pid) - cpu_before
    return Phase(name, count, seconds, broker_cpu, errors, client)


# --- the raw remoting client ------------------------------------------------------------------


class RemotingPipe(asyncio.Protocol):
    """One remoting connection, requests pipelined and matched by opaque."""

    def __init__(self) -> None:
        self.decoder = FrameDecoder()
        self.waiters: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.transport: asyncio.Transport | None = None
        self.opaque = 0

    @classmethod
    async def open(cls, address: str) -> RemotingPipe:
        host, _, port = address.rpartition(":")
        loop = asyncio.get_running_loop()
        _, pipe = await loop.create_connection(cls, host, int(port))
        return pipe

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        for cmd in self.decoder.feed(data):
            waiter = self.waiters.pop(cmd.opaque, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(cmd)

    def connection_lost(self, exc: Exception | None) -> None:
        for waiter in self.waiters.values():
            if not waiter.done():
                waiter.set_exception(ConnectionError("remoting connection lost"))
        self.waiters.clear()

    def request(
        self, code: int, fields: dict[str, str], body: bytes = b""
    ) -> asyncio.Future[RemotingCommand]:
        assert self.transport is not None
        self.opaque += 1
        cmd = RemotingCommand(code=code, opaque=self.opaque, ext_fields=fields, body=body)
        waiter: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self.waiters[self.opaque] = waiter
        self.transport.write(encode(cmd))
        return waiter

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def send_v2_fields(topic: str, queue_id: int, properties: str, batch: bool) -> dict[str, str]:
    """SendMessageRequestHeaderV2 as a Java producer fills it (one-letter names)."""
    long_names = {
        "producerGroup": "bench-remoting",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": str(queue_id),
        "sysFlag": "0",
        "bornTimestamp": str(int(time.time() * 1000)),
        "flag": "0",
        "properties": properties,
        "reconsumeTimes": "0",
        "unitMode": "false",
        "maxReconsumeTimes": "16",
        "batch": "true" if batch else "false",
    }
    return {SEND_V2_FIELD_NAMES[k]: v for k, v in long_names.items()}


class UniqKeys:
    """32-hex UNIQ_KEYs, as the 4.x clients make them (MessageClientIDSetter)."""

    def __init__(self) -> None:
        self.prefix = os.urandom(10).hex().upper()
        self.counter = 0

    def next(self) -> str:
        self.counter += 1
        return f"{self.prefix}{self.counter:012X}"


async def remoting_sends(
    address: str, topic: str, count: int, window: int, size: int, batch: int
) -> tuple[int, int]:
    """``count`` messages as SEND_MESSAGE_V2 (batch 1) or SEND_BATCH_MESSAGE, ``window``
    requests in flight on one connection."""
    pipe = await RemotingPipe.open(address)
    body = os.urandom(size)
    keys = UniqKeys()
    requests = count // batch
    next_request = 0
    sent = errors = 0

    def one_request() -> asyncio.Future[RemotingCommand]:
        nonlocal next_request
        queue_id = next_request % QUEUES
        next_request += 1
        if batch == 1:
            props = properties_to_string({"UNIQ_KEY": keys.next(), "WAIT": "true"})
            fields = send_v2_fields(topic, queue_id, props, False)
            return pipe.request(RequestCode.SEND_MESSAGE_V2, fields, body)
        messages = [
            BatchMessage(0, body, {"UNIQ_KEY": keys.next(), "WAIT": "true"}) for _ in range(batch)
        ]
        fields = send_v2_fields(topic, queue_id, properties_to_string({"WAIT": "true"}), True)
        return pipe.request(RequestCode.SEND_BATCH_MESSAGE, fields, encode_messages(messages))

    async def worker() -> None:
        nonlocal sent, errors
        while next_request < requests:
            reply = await one_request()
            if reply.code == ResponseCode.SUCCESS:
                sent += batch
            else:
                errors += 1
                if errors == 1:
                    print(f"  first error reply: {reply.code} {reply.remark}", file=sys.stderr)

    try:
        await asyncio.gather(*(worker() for _ in range(window)))
    finally:
        pipe.close()
    return sent, errors


async def remoting_pulls(address: str, topic: str, max_msgs: int) -> tuple[int, int]:
    """Everything in ``topic`` pulled back with PULL_MESSAGE, one task per queue."""
    pipe = await RemotingPipe.open(address)
    received = errors = 0

    async def one_queue(queue_id: int) -> None:
        nonlocal received, errors
        offset = 0
        while True:
            fields = {
                "consumerGroup": "bench-remoting-pull",
                "topic": topic,
                "queueId": str(queue_id),
                "queueOffset": str(offset),
                "maxMsgNums": str(max_msgs),
                "sysFlag": str(PULL_FLAG_SUBSCRIPTION),
                "commitOffset": "0",
                "suspendTimeoutMillis": "0",
                "subscription": "*",
                "subVersion": "0",
                "expressionType": "TAG",
            }
            reply = await pipe.request(RequestCode.PULL_MESSAGE, fields)
            if reply.code != ResponseCode.SUCCESS:
                if reply.code not in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_OFFSET_MOVED):
                    errors += 1
                return
            body, pos = reply.body, 0
            while pos < len(body):  # count the records, as a client walks them
                pos += _SIZE.unpack_from(body, pos)[0]
                received += 1
            offset = int(reply.ext_fields["nextBeginOffset"])

    try:
        await asyncio.gather(*(one_queue(q) for q in range(QUEUES)))
    finally:
        pipe.close()
    return received, errors


# --- the wharf.v1 SDK ---------------------------------------------------------------------------


async def sdk_sends(
    endpoint: str, topic: str, count: int, window: int, size: int, batch: int, cap: int | None
) -> tuple[int, int]:
    """``window`` tasks of ``send`` (batch 1) or ``send_batch``; ``cap``: batch_max_messages
    (None: the SDK's default, auto-batching concurrent sends)."""
    body = os.urandom(size)
    options = {} if cap is None else {"batch_max_messages": cap}
    async with Producer(
        endpoint, compress_threshold=1 << 30, send_timeout=30.0, **options
    ) as producer:
        await producer.send(topic, b"warm-up")  # route, stream, topic: not counted
        remaining = count // batch
        sent = errors = 0

        async def worker() -> None:
            nonlocal remaining, sent, errors
            while remaining > 0:
                remaining -= 1
                try:
                    if batch == 1:
                        await producer.send(topic, body)
                    else:
                        await producer.send_batch(topic, [body] * batch)
                    sent += batch
                except Exception:
                    errors += 1

        await asyncio.gather(*(worker() for _ in range(window)))
        return sent, errors


async def sdk_pulls(endpoint: str, topic: str, max_msgs: int) -> tuple[int, int]:
    received = 0
    async with PullConsumer(endpoint, group="bench-sdk-pull") as consumer:

        async def one_queue(queue_id: int) -> None:
            nonlocal received
            queue, offset = MessageQueue(topic, queue_id), 0
            while True:
                result = await consumer.pull(queue, offset, max_messages=max_msgs)
                if result.status is not PullStatus.FOUND or not result.messages:
                    return
                received += len(result.messages)
                offset = result.next_begin_offset

        await asyncio.gather(*(one_queue(q) for q in range(QUEUES)))
    return received, 0


# --- other clients in their own interpreters ---------------------------------------------------


def script_phase(broker: BrokerProcess, name: str, cmd: list[str], home: Path) -> Phase | str:
    """A client process that prints READY, waits for a line, runs, prints one JSON line
    ``{"count", "seconds"[, "failed"]}``; the broker's CPU is read around the timed part."""
    home.mkdir(parents=True, exist_ok=True)  # the clients log under ~/logs
    env = {**os.environ, "HOME": str(home)}
    env.pop("PYTHONPATH", None)
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    result: dict[str, float] | None = None
    cpu_before = cpu_after = 0.0
    try:
        for line in proc.stdout:
            if line.strip() == "READY":
                cpu_before = process_cpu_seconds(broker.pid)
                proc.stdin.write("\n")
                proc.stdin.flush()
            elif line.startswith("{"):
                cpu_after = process_cpu_seconds(broker.pid)
                result = json.loads(line)
                break
        proc.stdin.close()
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
    if result is None:
        err = proc.stderr.read() if proc.stderr else ""
        return f"{name}: failed (exit {proc.returncode}): {err.strip()[-300:]}"
    count = int(result["count"])
    return Phase(
        name, count, float(result["seconds"]), cpu_after - cpu_before, int(result.get("failed", 0))
    )


# --- the run ----------------------------------------------------------------------------------


def bench_broker(root: Path) -> BrokerProcess:
    settings = {
        "mappedFileSizeCommitLog": 256 * MIB,
        "logLevel": "WARNING",
        "defaultTopicQueueNums": QUEUES,
    }
    return Daemons(root).broker(
        root,
        settings=settings,
        extra_args=["--remoting-listen", "127.0.0.1:0"],
        ready_timeout=60.0,
        start=False,
    )


def print_table(phases: list[Phase]) -> None:
    print(
        f"| {'phase':26s} | {'messages':>9s} | {'msg/s':>9s} | {'broker CPU us/msg':>17s} "
        f"| {'rounds (low-high)':>17s} | {'client CPU us/msg':>17s} |"
    )
    print(f"|{'-' * 28}|{'-' * 11}|{'-' * 11}|{'-' * 19}|{'-' * 19}|{'-' * 19}|")
    for p in phases:
        errors = f" ({p.errors} errors)" if p.errors else ""
        spread = f"{p.spread[0]:.1f}-{p.spread[1]:.1f}" if p.spread else "-"
        print(
            f"| {p.name:26s} | {p.count:>9,} | {p.rate:>9,.0f} | {p.cpu_us:>17.1f} "
            f"| {spread:>17s} | {p.client_us:>17s} |{errors}"
        )


def print_ratios(by: dict[str, Phase]) -> None:
    def ratio(a: str, b: str, what: str, target: float | None) -> None:
        if a not in by or b not in by:
            return
        cpu = by[a].cpu_us / by[b].cpu_us if by[b].cpu_us else float("nan")
        rate = by[b].rate / by[a].rate if by[a].rate else float("nan")
        verdict = ""
        if target is not None:
            verdict = f"  target <= {target}x: {'met' if cpu <= target else 'MISSED'}"
        print(f"| {what:42s} | {cpu:8.2f}x | {rate:8.2f}x |{verdict}")

    print("Ratios: broker CPU per message a / b, and msg/s b / a (> 1: a is slower)")
    print(f"| {'a / b':42s} | {'CPU/msg':>9s} | {'msg/s':>9s} |")
    print(f"|{'-' * 44}|{'-' * 11}|{'-' * 11}|")
    ratio("remoting 310 x1", "sdk wire send x1", "remoting x1 / wire-port x1", 1.5)
    ratio("remoting 320 x16", "sdk wire send_batch x16", "remoting x16 / wire-port x16", 1.5)
    ratio(
        "remoting 320 x16",
        "sdk wire send_batch x16",
        "remoting batched / SDK send_batch (wire)",
        1.2,
    )
    ratio(
        "remoting 320 x16",
        "sdk grpc send_batch x16",
        "remoting batched / SDK send_batch (gRPC)",
        1.2,
    )
    ratio("remoting 310 x1", "sdk grpc send x1", "remoting x1 / gRPC x1", None)
    ratio("remoting pull x32", "sdk wire pull x32", "remoting pull / wire-port pull", None)
    ratio("cpp sync", "remoting 310 x1", "C++ client sync / raw remoting x1", None)
    ratio("v2 official async", "remoting 310 x1", "official v2 async / raw remoting x1", None)


def median_phase(runs: list[Phase]) -> Phase:
    """One row for the rounds of a phase: median msg/s and median CPU per message (each on its
    own), the per-round count; ``spread`` the lowest and highest broker CPU per message."""
    first = runs[0]
    rate = statistics.median(p.rate for p in runs)
    cpu_us = statistics.median(p.cpu_us for p in runs)
    clients = [p.client_cpu_s / p.count for p in runs if p.client_cpu_s is not None and p.count]
    client = statistics.median(clients) * first.count if clients else None
    seconds = first.count / rate if rate else 0.0
    phase = Phase(
        first.name, first.count, seconds, cpu_us * first.count / 1e6, max(p.errors for p in runs),
        client,
    )  # fmt: skip
    phase.spread = (min(p.cpu_us for p in runs), max(p.cpu_us for p in runs))
    return phase


async def async_phases(broker: BrokerProcess, args: argparse.Namespace) -> list[Phase]:
    """The send phases ``--rounds`` times, alternating their order (a phase is not always
    first or last), then the pulls of what the remoting phases sent."""
    address, wire, grpc_endpoint = broker.remoting_endpoint, broker.wire_endpoint, broker.endpoint
    count, window, size, batch = args.count, args.window, args.size, args.batch
    topic = "bench-remoting"
    # Warm-up: the topics are made by their first send; the first segment is mapped.
    await remoting_sends(address, topic, 64, 4, size, 1)
    sends: list[tuple[str, Callable[[], Awaitable[tuple[int, int]]]]] = [
        ("remoting 310 x1", lambda: remoting_sends(address, topic, count, window, size, 1)),
        (
            f"remoting 320 x{batch}",
            lambda: remoting_sends(address, topic, count * 4, window, size, batch),
        ),
    ]
    for transport, endpoint in (("wire", wire), ("grpc", grpc_endpoint)):
        t = f"bench-sdk-{transport}"
        sends += [
            (
                f"sdk {transport} send x1",
                functools.partial(sdk_sends, endpoint, t, count, window, size, 1, 1),
            ),
            (
                f"sdk {transport} send_batch x{batch}",
                functools.partial(sdk_sends, endpoint, t, count * 4, window, size, batch, batch),
            ),
            (
                f"sdk {transport} send (auto)",
                functools.partial(sdk_sends, endpoint, t, count * 4, window, size, 1, None),
            ),
        ]
    runs: dict[str, list[Phase]] = {name: [] for name, _ in sends}
    for round_no in range(args.rounds):
        for name, make in sends if round_no % 2 == 0 else sends[::-1]:
            runs[name].append(await measured(broker, name, make()))
    phases = [median_phase(runs[name]) for name, _ in sends]
    phases[2:2] = [
        await measured(
            broker, "remoting pull x32", remoting_pulls(address, topic, args.pull_batch)
        ),
        await measured(broker, "sdk wire pull x32", sdk_pulls(wire, topic, args.pull_batch)),
    ]
    return phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=40_000, help="messages of the x1 phases")
    parser.add_argument("--window", type=int, default=32, help="requests in flight")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--pull-batch", type=int, default=32)
    parser.add_argument("--cpp-count", type=int, default=3000)
    parser.add_argument("--v2-count", type=int, default=3000)
    parser.add_argument("--no-cpp", dest="cpp", action="store_false")
    parser.add_argument("--no-v2", dest="v2", action="store_false")
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds of the send phases (medians printed)"
    )
    args = parser.parse_args()
    print(
        f"Remoting benchmark: {args.size} B messages, {args.window} requests in flight, batches "
        f"of {args.batch}, x1 phases {args.count:,} messages, batched {args.count * 4:,}, "
        f"{args.rounds} rounds; "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    notes: list[str] = []
    with (
        tempfile.TemporaryDirectory(prefix="wharf-bench-remoting-") as tmp,
        bench_broker(Path(tmp)) as broker,
    ):
        phases = uvloop.run(async_phases(broker, args))
        if args.cpp:
            if RMQ4_PYTHON.exists():
                cmd = [str(RMQ4_PYTHON), "-c", CPP_SCRIPT, broker.remoting_endpoint,
                       "bench-cpp", str(args.cpp_count), str(args.size)]  # fmt: skip
                got = script_phase(broker, "cpp sync", cmd, Path(tmp) / "home-cpp")
                phases.append(got) if isinstance(got, Phase) else notes.append(got)
            else:
                notes.append("cpp sync: .venv-rmq4 missing (`make rmq4-client`)")
        if args.v2:
            script = REPO_ROOT / "tests" / "bench" / "rmq_v2_client_script.py"
            if RMQ_PYTHON.exists():
                cmd = [str(RMQ_PYTHON), str(script), broker.endpoint, "async", "bench-v2",
                       "bench-v2", str(args.v2_count), str(args.size), str(args.window)]  # fmt: skip
                got = script_phase(broker, "v2 official async", cmd, Path(tmp) / "home-v2")
                phases.append(got) if isinstance(got, Phase) else notes.append(got)
            else:
                notes.append("v2 official: .venv-rmq missing (`make rmq-client`)")
    print_table(phases)
    print_ratios({p.name.replace(f"x{args.batch}", "x16"): p for p in phases})
    for note in notes:
        print(f"  note: {note}")


if __name__ == "__main__":
    main()
