"""The broker's CPU per apache.rocketmq.v2 call of the official clients, against gRPC's floor.

    .venv/bin/python -m tests.bench.v2_floor [--calls 10000] [--size 1024] [--inflight 32]
        [--chunks 5] [--receive-batch 32] [--profile DIR [--profiler perf] [--native] [--gil]]
        [--broker-options] [--output FILE]

The official RocketMQ 5 clients make one unary call per send, per ack and per
change-invisible, and one ReceiveMessage per batch (one message per call when they receive
one at a time). What a core serves of them is decided by the broker's CPU per call. This
program drives the broker (``BrokerProcess``: ASYNC_FLUSH, 8 queues per topic, logging at
WARNING) with a plain grpc.aio client over the generated ``wharf.rocketmq.v2`` messages,
requests built and serialized before they are timed (distinct message ids; the receipt
handles of the previous phase), ``--inflight`` calls in flight, the official Python client's
eight ``x-mq-*``/``authorization`` headers on every call. Phases, ``--calls`` each:

- ``SendMessage``: one NORMAL message of ``--size`` bytes with a tag and a key (twice
  ``--calls`` of them with a batch receive: it reads the second half);
- ``ReceiveMessage``: ``batch_size`` 1 (status, message, delivery timestamp: three replies);
- ``ChangeInvisibleDuration``: of every handle just received (the new handle is kept);
- ``AckMessage``: one entry, the handle ChangeInvisibleDuration returned;
- ``SendMessage, refused``: no message (BAD_REQUEST at once): the v2 layer's fixed cost
  per call (headers, status, metrics) with nothing stored;
- ``ReceiveMessage xN``: ``batch_size`` ``--receive-batch`` (``--calls`` / N calls of N more
  stored messages; figures per call, and per message against the 1-message floor).

The floor: a bare grpc.aio server in its own process (uvloop, like the broker; default server
options, or the broker's with ``--broker-options``) whose handler returns fixed bytes, no
deserializer or serializer, called with the very same request bytes and answering as many
bytes as the broker did: one unary reply (for ReceiveMessage the stream's replies' total: the
target's floor), and for ReceiveMessage also the same replies as a server stream (the floor of
the protocol's shape). Each phase runs in ``--chunks`` chunks, a broker chunk then the same
requests to the floor, so both see the same machine; the CPU of each server process (the sum
of its threads' on-CPU time, /proc/PID/task/*/schedstat, ns) over its chunks, per call, and
the ratio broker/floor are printed. On a shared 2-core machine the client competes with the
servers for CPU: the per-call figures move less than the rates, the ratio less than either.

``--profile DIR``: then one more pass of the broker phases, each under ``py-spy record``
(``--nonblocking`` raw collapsed stacks, DIR/<call>.txt; ``--native``: with C frames, which
pauses the broker per sample; ``--gil``: only the thread holding the GIL, i.e. where the
Python CPU goes) with the 25 functions holding the most samples (inclusive)
printed, and the floor's the same (DIR/floor-<call>.txt); ``--profiler perf``: ``perf record
-g`` instead (DIR/<call>.perf: ``perf report -i FILE --sort dso``). Profiling costs the server
CPU: those passes are not in the table.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import uvloop
from grpc import aio
from wharf.rocketmq.v2 import definition_pb2, service_pb2

from tests.bench.broker_send import process_cpu_seconds as cpu_seconds
from tests.harness import REPO_ROOT, BrokerProcess, bench_broker

QUEUES = 8
TOPIC = "bench-v2-floor"
GROUP = "bench-v2-floor-group"
INVISIBLE_S = 600  # nothing comes back during a run
V2 = "/apache.rocketmq.v2.MessagingService/"
FLOOR = "/floor.Floor/"
# What the official Python client (5.1.2, rocketmq/v5/util/signature.py) sends on every call.
METADATA = (
    ("x-mq-language", "PYTHON"),
    ("x-mq-protocol", "GRPC_V2"),
    ("x-mq-client-version", "5.1.2"),
    ("x-mq-date-time", "20261124T120000Z"),
    ("x-mq-request-id", "0b5b4f3e-4a36-4bb3-9c7d-0d3c4b1f7a11"),
    ("x-mq-client-id", "bench-host@4242@0@abcdefgh"),
    ("x-mq-namespace", ""),
    (
        "authorization",
        "MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, "
        "Signature=6d8f3c2a1b0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c",
    ),
)


# --- the floor server (its own process) ----------------------------------------------------------
class FloorHandlers(grpc.GenericRpcHandler):
    """``/floor.Floor/U<n>``: a unary call answering n fixed bytes; ``/floor.Floor/S<a>_<b>..``:
    a server stream answering replies of a, b, ... bytes. Handlers are made once per path."""

    def __init__(self) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method: str = details.method  # type: ignore[attr-defined]
        handler = self.handlers.get(method)
        if handler is None and method.startswith(FLOOR):
            handler = self.handlers[method] = self._make(method[len(FLOOR) :])
        return handler

    @staticmethod
    def _make(name: str) -> grpc.RpcMethodHandler:
        if name.startswith("U"):
            reply = b"r" * int(name[1:])

            async def unary(request: bytes, context: object) -> bytes:
                return reply

            return grpc.unary_unary_rpc_method_handler(unary)
        replies = [b"r" * int(n) for n in name[1:].split("_")]

        async def stream(request: bytes, context: object) -> AsyncIterator[bytes]:
            for r in replies:
                yield r

        return grpc.unary_stream_rpc_method_handler(stream)


def broker_server_options() -> tuple[int, list[tuple[str, Any]]]:
    """The broker's grpc.aio server options (broker/controller.py) at their defaults:
    (maximum_concurrent_rpcs, options). Measured on the floor: within the noise."""
    from wharf import keepalive

    return 20_000, [
        ("grpc.max_receive_message_length", 16 << 20),
        ("grpc.max_send_message_length", 16 << 20),
        ("grpc.http2.max_frame_size", 4 * 1024 * 1024),
        ("grpc.so_reuseport", 0),
        *keepalive.server_options(),
        ("grpc.keepalive_time_ms", 60_000),
        ("grpc.keepalive_timeout_ms", 20_000),
    ]


async def serve_floor(port_file: Path, broker_options: bool) -> None:
    if broker_options:
        limit, options = broker_server_options()
        server = aio.server(maximum_concurrent_rpcs=limit, options=options)
    else:
        server = aio.server()
    server.add_generic_rpc_handlers((FloorHandlers(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    write_text_blocking(port_file, str(port))
    await server.wait_for_termination()


def write_text_blocking(path: Path, text: str) -> None:
    path.write_text(text)


def start_floor(root: Path, broker_options: bool) -> tuple[subprocess.Popen[bytes], str]:
    port_file = root / "floor.port"
    flags = ["--broker-options"] if broker_options else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.bench.v2_floor", "--serve-floor", str(port_file), *flags],
        cwd=REPO_ROOT,
    )
    deadline = time.monotonic() + 30
    while not port_file.exists() or not port_file.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the floor server did not start")
        time.sleep(0.05)
    return proc, f"127.0.0.1:{port_file.read_text()}"


# --- requests -----------------------------------------------------------------------------------
def send_request(uid: str, body: bytes) -> bytes:
    request = service_pb2.SendMessageRequest()
    m = request.messages.add()
    m.topic.name = TOPIC
    m.body = body
    sysp = m.system_properties
    sysp.tag = "bench"
    sysp.keys.append("key-" + uid[-8:])
    sysp.message_id = uid
    sysp.message_type = definition_pb2.NORMAL
    sysp.born_timestamp.seconds = int(time.time())
    sysp.born_host = "127.0.0.1"
    sysp.body_encoding = definition_pb2.IDENTITY
    return request.SerializeToString()


def receive_request(batch: int = 1) -> bytes:
    request = service_pb2.ReceiveMessageRequest()
    request.group.name = GROUP
    request.message_queue.topic.name = TOPIC
    request.message_queue.id = 0
    request.message_queue.permission = definition_pb2.READ_WRITE
    request.message_queue.broker.name = "broker-a"
    request.filter_expression.type = definition_pb2.TAG
    request.filter_expression.expression = "*"
    request.batch_size = batch
    request.invisible_duration.seconds = INVISIBLE_S
    request.long_polling_timeout.seconds = 1
    request.auto_renew = False
    return request.SerializeToString()


def change_request(message_id: str, handle: str) -> bytes:
    request = service_pb2.ChangeInvisibleDurationRequest()
    request.topic.name = TOPIC
    request.group.name = GROUP
    request.receipt_handle = handle
    request.invisible_duration.seconds = INVISIBLE_S
    request.message_id = message_id
    return request.SerializeToString()


def ack_request(message_id: str, handle: str) -> bytes:
    request = service_pb2.AckMessageRequest()
    request.group.name = GROUP
    request.topic.name = TOPIC
    entry = request.entries.add()
    entry.message_id = message_id
    entry.receipt_handle = handle
    return request.SerializeToString()


# --- driving ------------------------------------------------------------------------------------
def cpu_ns(pid: int) -> int:
    """On-CPU time of every thread of ``pid`` in ns (/proc/PID/task/*/schedstat); the
    ``process_cpu_seconds`` figure (clock ticks) where schedstat is missing."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return int(cpu_seconds(pid) * 1e9)
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended meanwhile
    return total


async def drive(
    requests: list[bytes], inflight: int, call: Callable[[bytes], Awaitable[Any]]
) -> list[Any]:
    """Every request, ``inflight`` at a time; the answers in request order."""
    answers: list[Any] = [None] * len(requests)
    it = iter(range(len(requests)))

    async def worker() -> None:
        for i in it:
            answers[i] = await call(requests[i])

    await asyncio.gather(*(worker() for _ in range(min(inflight, len(requests)))))
    return answers


async def timed(
    pid: int, requests: list[bytes], inflight: int, call: Callable[[bytes], Awaitable[Any]]
) -> tuple[int, float, list[Any]]:
    """(server CPU ns, wall seconds, answers)."""
    before = cpu_ns(pid)
    started = time.perf_counter()
    answers = await drive(requests, inflight, call)
    seconds = time.perf_counter() - started
    return cpu_ns(pid) - before, seconds, answers


def unary(channel: aio.Channel, path: str) -> Callable[[bytes], Awaitable[bytes]]:
    stub = channel.unary_unary(path)
    return lambda request: stub(request, metadata=METADATA)


def streaming(channel: aio.Channel, path: str) -> Callable[[bytes], Awaitable[list[bytes]]]:
    stub = channel.unary_stream(path)

    async def call(request: bytes) -> list[bytes]:
        return [reply async for reply in stub(request, metadata=METADATA)]

    return call


def check_ok(name: str, status: definition_pb2.Status) -> None:
    if status.code != definition_pb2.OK:
        raise SystemExit(f"{name} answered {definition_pb2.Code.Name(status.code)}: {status}")


@dataclass
class Row:
    name: str
    calls: int = 0
    broker_ns: int = 0
    floor_ns: int = 0
    stream_floor_ns: int = 0  # ReceiveMessage: the floor as a server stream
    broker_s: float = 0.0
    request_bytes: int = 0
    response_bytes: int = 0
    replies: int = 1

    def us(self, ns: int) -> float:
        return ns / self.calls / 1e3 if self.calls else 0.0


class Bench:
    def __init__(self, broker: BrokerProcess, floor_pid: int, floor_endpoint: str, args: Any):
        self.broker = broker
        self.floor_pid = floor_pid
        self.floor_endpoint = floor_endpoint
        self.args = args
        self.body = b"x" * args.size
        self.rows: dict[str, Row] = {}
        self.sent = 0
        self.idle_us_per_s = 0.0

    def requests(self, count: int) -> list[bytes]:
        first, self.sent = self.sent, self.sent + count
        return [send_request(f"BENCH{i:027X}", self.body) for i in range(first, first + count)]

    async def phase(
        self,
        name: str,
        requests: list[bytes],
        path: str,
        stream: bool,
        record: bool,
        profile: Path | None,
    ) -> list[Any]:
        """The requests against the broker in chunks, each chunk replayed to the floor right
        after (with ``profile``: the broker's chunks only, under the profiler)."""
        args = self.args
        call = (streaming if stream else unary)(self.v2, V2 + path)
        size = len(requests)
        chunks = 1 if profile else max(1, min(args.chunks, size))
        bounds = [size * k // chunks for k in range(chunks + 1)]
        row = self.rows.setdefault(name, Row(name))
        spy = start_profiler(self.broker.pid, profile / f"{name}.txt") if profile else None
        answers: list[Any] = []
        for lo, hi in itertools.pairwise(bounds):
            part = requests[lo:hi]
            ns, seconds, got = await timed(self.broker.pid, part, args.inflight, call)
            answers += got
            if profile or not record:
                continue
            row.calls += len(part)
            row.broker_ns += ns
            row.broker_s += seconds
            sizes = [len(r) for r in got[0]] if stream else [len(got[0])]
            row.request_bytes, row.response_bytes, row.replies = (
                len(part[0]),
                sum(sizes),
                len(sizes),
            )
            floor_call = unary(self.floor, FLOOR + f"U{sum(sizes)}")
            row.floor_ns += (await timed(self.floor_pid, part, args.inflight, floor_call))[0]
            if stream:
                path_s = FLOOR + "S" + "_".join(map(str, sizes))
                stream_call = streaming(self.floor, path_s)
                row.stream_floor_ns += (
                    await timed(self.floor_pid, part, args.inflight, stream_call)
                )[0]
        if spy is not None:
            stop_profiler(spy)
            await self.profile_floor(name, requests, answers, stream, profile)  # type: ignore[arg-type]
        return answers

    async def profile_floor(
        self, name: str, requests: list[bytes], answers: list[Any], stream: bool, profile: Path
    ) -> None:
        sizes = [len(r) for r in answers[0]] if stream else [len(answers[0])]
        spy = start_profiler(self.floor_pid, profile / f"floor-{name}.txt")
        floor_call = unary(self.floor, FLOOR + f"U{sum(sizes)}")
        await timed(self.floor_pid, requests, self.args.inflight, floor_call)
        stop_profiler(spy)

    async def round(self, count: int, record: bool, profile: Path | None = None) -> None:
        """The calls over ``count`` messages (and ``count`` more for the batch receive)."""
        phase = functools.partial(self.phase, record=record, profile=profile)
        batch = self.args.receive_batch
        answers = await phase(
            "SendMessage", self.requests(2 * count if batch else count), "SendMessage", False
        )
        for raw in answers:
            check_ok("SendMessage", service_pb2.SendMessageResponse.FromString(raw).status)
        await asyncio.sleep(0.5)  # every message dispatched to its queue before the receives
        streams = await phase("ReceiveMessage", [receive_request()] * count, "ReceiveMessage", True)
        handles = received(streams, count)
        answers = await phase(
            "ChangeInvisibleDuration",
            [change_request(uid, handle) for uid, handle in handles],
            "ChangeInvisibleDuration",
            False,
        )
        renewed = []
        for (uid, _), raw in zip(handles, answers, strict=True):
            response = service_pb2.ChangeInvisibleDurationResponse.FromString(raw)
            check_ok("ChangeInvisibleDuration", response.status)
            renewed.append((uid, response.receipt_handle))
        answers = await phase(
            "AckMessage", [ack_request(uid, handle) for uid, handle in renewed], "AckMessage", False
        )
        for raw in answers:
            check_ok("AckMessage", service_pb2.AckMessageResponse.FromString(raw).status)
        empty = service_pb2.SendMessageRequest().SerializeToString()
        await phase("SendMessage, refused", [empty] * count, "SendMessage", False)  # BAD_REQUEST
        if batch:
            calls = max(1, count // batch)
            streams = await phase(
                f"ReceiveMessage x{batch}",
                [receive_request(batch)] * calls,
                "ReceiveMessage",
                True,
            )
            received(streams, calls * batch)

    async def run(self) -> None:
        args = self.args
        self.v2 = aio.insecure_channel(self.broker.endpoint)
        self.floor = aio.insecure_channel(self.floor_endpoint)
        await self.round(min(500, args.calls), record=False)  # warm-up: topic, group, channels
        idle_before = cpu_ns(self.broker.pid)
        await asyncio.sleep(1.0)
        self.idle_us_per_s = (cpu_ns(self.broker.pid) - idle_before) / 1e3
        await self.round(args.calls, record=True)
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
            await self.round(args.calls, record=False, profile=args.profile)
        await self.v2.close()
        await self.floor.close()


def received(streams: list[list[bytes]], expected: int) -> list[tuple[str, str]]:
    """(message id, receipt handle) of every message the ReceiveMessage streams delivered."""
    handles = []
    for replies in streams:
        first = service_pb2.ReceiveMessageResponse.FromString(replies[0])
        if first.status.code == definition_pb2.MESSAGE_NOT_FOUND and len(replies) == 2:
            continue  # not dispatched yet (a slowed broker: py-spy --native)
        check_ok("ReceiveMessage", first.status)
        for raw in replies[1:-1]:
            sysp = service_pb2.ReceiveMessageResponse.FromString(raw).message.system_properties
            handles.append((sysp.message_id, sysp.receipt_handle))
    if len(handles) < 0.99 * expected:
        raise SystemExit(f"ReceiveMessage: {len(handles)} of {expected} messages came")
    return handles


# --- profilers ------------------------------------------------------------------------------
PROFILER = {"name": "py-spy", "native": False, "gil": False}


def start_profiler(pid: int, out: Path) -> subprocess.Popen[bytes]:
    if PROFILER["name"] == "perf":  # on-CPU samples of every thread, C and kernel frames
        cmd = [
            "perf",
            "record",
            "-F",
            "999",
            "-g",
            "-p",
            str(pid),
            "-o",
            str(out.with_suffix(".perf")),
        ]
    else:
        py_spy = str(Path(sys.executable).with_name("py-spy"))
        mode = ["--native"] if PROFILER["native"] else ["--nonblocking"]
        if PROFILER["gil"]:  # only the thread holding the GIL: where Python's CPU goes
            mode.append("--gil")
        cmd = [
            py_spy,
            "record",
            "-p",
            str(pid),
            "--format",
            "raw",
            "-o",
            str(out),
            "-r",
            "500",
            *mode,
        ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached before the phase starts
    return proc


def stop_profiler(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)  # both write their output and exit
    proc.wait(timeout=60)


def summarize_profile(path: Path, top: int = 25) -> str:
    """The functions on the most samples (inclusive, once per stack), and the leaves (self)."""
    inclusive: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = stack.split(";")
        count = int(n)
        total += count
        for frame in set(frames):
            inclusive[_short(frame)] += count
        leaves[_short(frames[-1])] += count
    lines = [f"{path.stem}: {total} samples"]
    for frame, count in inclusive.most_common(top):
        lines.append(f"  {100 * count / total:5.1f}% incl  {frame}")
    for frame, count in leaves.most_common(12):
        lines.append(f"  {100 * count / total:5.1f}% self  {frame}")
    return "\n".join(lines)


def _short(frame: str) -> str:
    # "fn (path/to/file.py:12)" -> "fn (to/file.py)"
    name, _, where = frame.partition(" (")
    file = where.rsplit(":", 1)[0].rsplit("/", 2)
    return f"{name} ({'/'.join(file[-2:])})"


# --- report ---------------------------------------------------------------------------------
def table(rows: dict[str, Row], inflight: int) -> str:
    header = (
        f"{'v2 call':<24} {'calls':>6} {'req B':>6} {'resp B':>6} {'broker µs':>10} "
        f"{'floor µs':>9} {'ratio':>6} {'broker calls/s':>15}"
    )
    lines = [header, "-" * len(header)]
    for row in rows.values():
        if not row.calls:
            continue
        broker, floor = row.us(row.broker_ns), row.us(row.floor_ns)
        lines.append(
            f"{row.name:<24} {row.calls:>6} {row.request_bytes:>6} {row.response_bytes:>6} "
            f"{broker:>10.0f} {floor:>9.0f} {broker / floor:>5.2f}x "
            f"{row.calls / row.broker_s:>15.0f}"
        )
        if row.stream_floor_ns:
            stream = row.us(row.stream_floor_ns)
            label = f"  floor as a {row.replies}-reply stream"
            lines.append(f"{label:<56} {stream:>9.0f} {broker / stream:>5.2f}x")
        one = rows.get("ReceiveMessage")
        if row.replies > 3 and one is not None and one.calls:  # a batch receive
            per_message = broker / (row.replies - 2)
            label = "  per message delivered, against the 1-message unary floor"
            lines.append(
                f"{label:<45} {per_message:>10.0f} {one.us(one.floor_ns):>9.0f} "
                f"{per_message / one.us(one.floor_ns):>5.2f}x"
            )
    lines.append(
        f"\nserver CPU per call (every thread's on-CPU time, /proc/PID/task/*/schedstat); "
        f"floor: a bare grpc.aio unary call, same request bytes, same response size; "
        f"{inflight} in flight"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--inflight", type=int, default=32)
    parser.add_argument("--chunks", type=int, default=5)
    parser.add_argument("--receive-batch", type=int, default=32, help="0: no batch receive")
    parser.add_argument("--broker-options", action="store_true")
    parser.add_argument("--profile", type=Path)
    parser.add_argument("--profiler", choices=("py-spy", "perf"), default="py-spy")
    parser.add_argument("--native", action="store_true", help="py-spy --native")
    parser.add_argument("--gil", action="store_true", help="py-spy --gil")
    parser.add_argument("--output", type=Path)
    parser.add_argument("--serve-floor", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_floor:
        uvloop.run(serve_floor(args.serve_floor, args.broker_options))
        return
    PROFILER.update(name=args.profiler, native=args.native, gil=args.gil)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="wharf-v2-floor-") as tmp:
        root = Path(tmp)
        settings = {
            "defaultTopicQueueNums": QUEUES,
            "mappedFileSizeCommitLog": 64 * 1024 * 1024,
        }
        floor, floor_endpoint = start_floor(root, args.broker_options)
        try:
            with bench_broker(root / "broker", settings=settings, ready_timeout=60.0) as broker:
                bench = Bench(broker, floor.pid, floor_endpoint, args)
                uvloop.run(bench.run())
                if "Traceback" in broker.log():
                    raise SystemExit(f"the broker logged a traceback:\n{broker.log()[-4000:]}")
        finally:
            floor.terminate()
            floor.wait(timeout=10)
    print(table(bench.rows, args.inflight))
    print(
        f"broker idle CPU {bench.idle_us_per_s:.0f} µs/s; load average "
        f"{os.getloadavg()[0]:.2f}; {time.monotonic() - started:.0f} s"
    )
    if args.profile and args.profiler == "py-spy":
        for name in bench.rows:
            for file in (args.profile / f"{name}.txt", args.profile / f"floor-{name}.txt"):
                if file.exists():
                    print("\n" + summarize_profile(file))
    if args.output:
        figures = {
            name: {
                "calls": row.calls,
                "broker_us": row.us(row.broker_ns),
                "floor_us": row.us(row.floor_ns),
                "stream_floor_us": row.us(row.stream_floor_ns),
                "ratio": row.broker_ns / row.floor_ns if row.floor_ns else None,
                "request_bytes": row.request_bytes,
                "response_bytes": row.response_bytes,
                "replies": row.replies,
            }
            for name, row in bench.rows.items()
        }
        report = {"size": args.size, "inflight": args.inflight, "chunks": args.chunks}
        args.output.write_text(json.dumps({**report, "calls": figures}, indent=2))


if __name__ == "__main__":
    main()
