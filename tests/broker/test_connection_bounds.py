"""Connection bounds on every listener (broker/kit/bounds.py, the wire, remoting and Kafka
connections' own, gRPC's server options, the metrics server): a slowloris is cut after the
read deadline, idle connections past the per-address cap are refused and the rest closed
once idle while a normal client goes on, and a flood of calls without credentials on the
wire port stays bounded in calls, bytes and the normal client's latency.

Small limits set here (read deadline 2 s, idle 3 s, 30 connections an address, 50 a
listener), so nothing needs thousands of connections or minutes; tests/bench/connection_flood.py
runs the 5,000-connection form."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from wharf import wire
from wharf.broker.kit.bounds import FrameBudget, ListenerGuard, ListenerLimits
from wharf.broker.kit.remoting.codes import RequestCode
from wharf.broker.kit.remoting.frame import FrameDecoder, RemotingCommand, encode
from wharf.client import MessageQueue, Producer, PullConsumer

from tests.broker.acl_helpers import ACL_SETTINGS, ADMIN, GROUP, TOPIC, write_acl
from tests.harness import BrokerProcess, Daemons

READ_S, IDLE_S = 2.0, 3.0
PER_ADDRESS, PER_LISTENER = 30, 50
SETTINGS = {
    **ACL_SETTINGS,
    "remotingListen": "127.0.0.1:0",
    "kafkaListen": "127.0.0.1:0",
    "frameReadTimeoutMs": int(READ_S * 1000),
    "connectionMaxIdleMs": int(IDLE_S * 1000),
    "serverChannelMaxIdleTimeSeconds": int(IDLE_S),
    "kafkaConnectionsMaxIdleMs": int(IDLE_S * 1000),
    "maxConnectionsPerAddress": PER_ADDRESS,
    "maxConnectionsPerListener": PER_LISTENER,
}
METRICS_READ_S = 10.0  # broker/metrics/http.py METRICS_LIMITS


@pytest.fixture(scope="module")
def broker(
    module_daemons: Daemons, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("bounds")
    write_acl(root / "store")
    with module_daemons.broker(root, settings=SETTINGS) as proc:
        yield proc


def _address(broker: BrokerProcess, listener: str) -> tuple[str, int]:
    endpoint = {
        "grpc": broker.endpoint,
        "wire": broker.wire_endpoint.removeprefix(wire.SCHEME),
        "remoting": broker.remoting_endpoint,
        "kafka": broker.kafka_endpoint,
        "metrics": broker.metrics_endpoint.removeprefix("http://").split("/")[0],
    }[listener]
    host, port = endpoint.rsplit(":", 1)
    return host, int(port)


# The first bytes of a frame of each protocol, and the one byte a second that follows them.
_FRAME_HEADS = {
    "wire": wire.PREFACE + wire.header(wire.OPEN, 1, 200),
    "remoting": struct.pack(">i", 200),
    "kafka": struct.pack(">i", 200),
    "metrics": b"GET /metrics HTTP/1.1\r\n",
    "grpc": b"PRI * HTTP/2.0\r\n",  # the HTTP/2 preface, half of it
}


def _closed_within(sock: socket.socket, timeout: float) -> bool:
    """True when the peer closed ``sock`` (EOF or reset) within ``timeout``."""
    deadline = time.monotonic() + timeout
    try:
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            if not sock.recv(65536):  # what it answers (gRPC's SETTINGS) is read and dropped
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return False


@pytest.mark.parametrize("listener", ["wire", "remoting", "kafka", "grpc", "metrics"])
def test_a_slowloris_is_cut_after_the_read_deadline(broker: BrokerProcess, listener: str) -> None:
    read_s = METRICS_READ_S if listener == "metrics" else READ_S
    # gRPC: the rest of its HTTP/2 preface, byte by byte (a wrong byte is refused at once).
    dribble = b"\r\nSM\r\n\r\n" + b"\0" * 20 if listener == "grpc" else b"x" * 60
    started = time.monotonic()
    cut = False
    with socket.create_connection(_address(broker, listener), timeout=5) as sock:
        sock.sendall(_FRAME_HEADS[listener])
        for byte in dribble:  # one byte a second
            try:
                sock.sendall(bytes([byte]))
            except (ConnectionResetError, BrokenPipeError):
                cut = True
                break
            if _closed_within(sock, 1.0):
                cut = True
                break
            if time.monotonic() - started > read_s + 4:
                break
        elapsed = time.monotonic() - started
    assert cut, f"{listener}: a 1 byte/s frame still open after {elapsed:.1f} s"
    assert read_s - 0.5 <= elapsed <= read_s + 3, elapsed
    if listener != "grpc":  # gRPC core closes it without a line of ours
        _wait_for_log(broker, "frameReadTimeoutMs")


def _wait_for_log(broker: BrokerProcess, text: str, timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in broker.log():
        assert time.monotonic() < deadline, f"no log line with {text!r}"
        time.sleep(0.05)


def _first_bytes(listener: str) -> bytes:
    """What a client sends before it idles: the wire preface; nothing for the others (they
    are then cut by the read deadline, which a new connection must meet)."""
    return wire.PREFACE if listener == "wire" else b""


@pytest.mark.parametrize("listener", ["wire", "remoting", "kafka"])
def test_idle_connections_past_the_address_cap_are_refused_and_the_rest_closed(
    broker: BrokerProcess, listener: str
) -> None:
    address = _address(broker, listener)
    idle: list[socket.socket] = []
    try:
        for _ in range(PER_ADDRESS + 10):  # from 127.0.0.2: the normal client is 127.0.0.1
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.2", 0))
            sock.connect(address)
            sock.sendall(_first_bytes(listener))
            idle.append(sock)
        refused = [s for s in idle[PER_ADDRESS:] if _closed_within(s, 1.0)]
        assert len(refused) == 10
        kept = idle[:PER_ADDRESS]
        assert not any(_closed_within(s, 0.01) for s in kept[:3])
        # A normal client, from another address, goes on meanwhile.
        if listener == "wire":
            asyncio.run(_send_and_receive(broker.wire_endpoint, rounds=3))
        else:
            with socket.create_connection(address, timeout=2) as other:
                assert not _closed_within(other, 0.2)
        # The idle ones are closed within the idle time (or the read deadline) and a sweep.
        limit = (IDLE_S if listener == "wire" else READ_S) + 2.0
        started = time.monotonic()
        assert all(_closed_within(s, max(0.01, limit - (time.monotonic() - started))) for s in kept)
    finally:
        for sock in idle:
            sock.close()
    _wait_for_log(broker, "maxConnectionsPerAddress is 30")


def test_the_listener_cap_and_the_frame_budget_in_process() -> None:
    """Past maxConnectionsPerListener a connection is closed at accept; a connection whose
    unfinished frame takes all connections' past maxBufferedFrameBytes is closed, the others
    go on (the 8 x 60 MiB Kafka frames that held 592 MB of RSS)."""

    class Frames(asyncio.Protocol):
        def __init__(self) -> None:
            self.held = 0

        def data_received(self, data: bytes) -> None:
            self.held += len(data)  # every byte an unfinished frame

        def busy(self) -> bool:
            return False

        def receiving(self) -> int:
            return self.held

    async def main() -> None:
        limits = ListenerLimits("testListen", idle_s=0, read_s=0, max_connections=3,
                                max_per_address=0)  # fmt: skip
        guard = ListenerGuard(limits, FrameBudget(100_000))
        server = await asyncio.get_running_loop().create_server(guard.wrap(Frames), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        streams = [await asyncio.open_connection("127.0.0.1", port) for _ in range(4)]
        await asyncio.sleep(0.2)
        assert guard.refused == 1 and len(guard.connections) == 3
        assert await asyncio.wait_for(streams[3][0].read(), 2) == b""
        for _, writer in streams[:2]:
            writer.write(b"x" * 40_000)
            await writer.drain()
        await asyncio.sleep(0.2)
        streams[2][1].write(b"x" * 40_000)  # 120,000 > 100,000: this one goes
        assert await asyncio.wait_for(streams[2][0].read(), 2) == b""
        assert guard.budget is not None and guard.budget.held == 80_000
        assert len(guard.connections) == 2
        for _, writer in streams:
            writer.close()
        server.close()
        guard.close()

    asyncio.run(main())


async def _send_and_receive(
    endpoint: str, rounds: int, between: Callable[[int], None] | None = None, blocks: int = 1
) -> list[list[float]]:
    """The normal client: a send then the pull of that message, ``rounds`` times in each of
    ``blocks`` blocks (``between(i)`` before block i); seconds, by block."""
    key, secret = ADMIN
    took: list[list[float]] = []
    async with (
        Producer(endpoint, access_key=key, secret_key=secret) as producer,
        PullConsumer(endpoint, GROUP, access_key=key, secret_key=secret) as consumer,
    ):
        await producer.send(TOPIC, b"warm")
        for block in range(blocks):
            if between is not None:
                between(block)
            took.append([])
            for i in range(rounds):
                started = time.perf_counter()
                sent = await producer.send(TOPIC, f"m{i}".encode())
                pulled = await consumer.pull(
                    MessageQueue(TOPIC, sent.queue_id), sent.queue_offset, max_messages=1
                )
                took[-1].append(time.perf_counter() - started)
                assert [m.body for m in pulled.messages] == [f"m{i}".encode()]
    return took


def test_a_parked_long_poll_and_an_open_stream_are_not_idle(broker: BrokerProcess) -> None:
    """A pull parked longer than the idle time comes back empty, not cut; a client whose
    connection was closed for idling reconnects on its next call."""

    async def main() -> None:
        key, secret = ADMIN
        async with (
            Producer(broker.wire_endpoint, access_key=key, secret_key=secret) as producer,
            PullConsumer(broker.wire_endpoint, GROUP, access_key=key, secret_key=secret) as c,
        ):
            sent = await producer.send(TOPIC, b"first")
            queue = MessageQueue(TOPIC, sent.queue_id)
            started = time.monotonic()
            pulled = await c.pull(queue, sent.queue_offset + 1, max_messages=1,
                                  max_wait_ms=int((IDLE_S + 2) * 1000))  # fmt: skip
            assert not pulled.messages and time.monotonic() - started >= IDLE_S + 1.5
            await asyncio.sleep(IDLE_S + 1.5)  # now idle: closed, reopened by the next call
            again = await producer.send(TOPIC, b"after idling")
            assert again.queue_offset >= 0

    asyncio.run(main())
    _wait_for_log(broker, "idle for")


_FLOOD = r"""
import socket, sys, time
from wharf import wire
host, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
opening = wire.encode_open("/wharf.v1.MessagingService/SendMessage", (), None)
burst = wire.PREFACE + b"".join(wire.frame(wire.OPEN, i, opening) for i in range(1, 10_001))
partial = wire.PREFACE + wire.header(wire.MESSAGE, 1, 4 << 20) + b"x" * (400 << 10)
end = time.monotonic() + seconds
socks = []
while time.monotonic() < end:
    for s in socks:
        s.close()
    socks = []
    for n in range(5):  # 5 connections of 10,000 calls, and 5 holding 400 KiB of a frame
        for data in (burst, partial):
            try:
                s = socket.create_connection((host, port), timeout=2)
                s.setblocking(False)
                try:
                    s.send(data)
                except OSError:
                    pass
                socks.append(s)
            except OSError:
                pass
    time.sleep(2.0)
"""


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_flood_without_credentials_on_the_wire_port_is_bounded(broker: BrokerProcess) -> None:
    """5 connections x 10,000 calls without credentials (and 5 holding 400 KiB of a frame),
    reopened every 2 s: each is closed past maxCallsBeforeAuth / the read deadline, the
    broker's RSS stays within 64 MiB of its quiet figure, and a normal client's send+receive
    p99 within 3x of its quiet p99 (the flood held 10,000 calls a connection and made it
    4.4 s at p50). Quiet and flooded blocks alternate (the flood stopped and continued), so
    what else runs on the machine weighs on both alike."""
    assert broker.proc is not None
    host, port = _address(broker, "wire")
    flood = subprocess.Popen([sys.executable, "-c", _FLOOD, host, str(port), "120"])
    os.kill(flood.pid, signal.SIGSTOP)
    rss = {"quiet": 0.0, "flood": 0.0}

    def between(block: int) -> None:
        kind = "flood" if block % 2 else "quiet"
        if block:
            rss[kind] = max(rss[kind], _rss_mib(pid))  # the other kind's block just ended
        os.kill(flood.pid, signal.SIGCONT if kind == "flood" else signal.SIGSTOP)
        time.sleep(0.5)

    pid = broker.proc.pid
    try:
        asyncio.run(_send_and_receive(broker.wire_endpoint, rounds=20))  # warm
        blocks = asyncio.run(_send_and_receive(broker.wire_endpoint, 60, between, blocks=8))
        rss["flood"] = max(rss["flood"], _rss_mib(pid))
    finally:
        flood.kill()
        flood.wait()
    quiet = [t for block in blocks[0::2] for t in block]
    attacked = [t for block in blocks[1::2] for t in block]
    p99_quiet = statistics.quantiles(quiet, n=100)[98]
    p99_attacked = statistics.quantiles(attacked, n=100)[98]
    print(f"send+receive p99 quiet {p99_quiet * 1000:.2f} ms, under the flood "
          f"{p99_attacked * 1000:.2f} ms; RSS {rss['quiet']:.0f} -> {rss['flood']:.0f} MiB")  # fmt: skip
    # 3x, or 100 ms over quiet: this runs beside another test worker on 2 cores, where a quiet
    # p99 of 2-10 ms moved by as much with no flood at all; the unbounded broker took 4.4 s
    # (p50). The 3x figure itself is decided by `python -m tests.bench.connection_flood`.
    assert p99_attacked <= max(3 * p99_quiet, p99_quiet + 0.1), (p99_quiet, p99_attacked)
    assert rss["flood"] - rss["quiet"] < 64, rss
    _wait_for_log(broker, "maxCallsBeforeAuth")


def test_the_name_server_bounds_its_listeners_too(
    module_daemons: Daemons, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The NameServer is what every client dials first: its remoting port cuts a slowloris
    after the read deadline and refuses connections past the per-address cap, and its gRPC
    port cuts a dribbled HTTP/2 preface, while a route query from another address is served."""
    settings = {
        "remotingListen": "127.0.0.1:0",
        "frameReadTimeoutMs": int(READ_S * 1000),
        "serverChannelMaxIdleTimeSeconds": int(IDLE_S),
        "maxConnectionsPerAddress": 5,
    }
    with module_daemons.namesrv(tmp_path_factory.mktemp("ns-bounds"), settings) as ns:
        host, port = json.loads((ns.root / "ready.json").read_text())["remoting"].rsplit(":", 1)
        started = time.monotonic()
        with socket.create_connection((host, int(port)), timeout=5) as slow:
            slow.sendall(struct.pack(">i", 200) + b"x")  # a frame begun, never finished
            assert _closed_within(slow, READ_S + 2.5)
        assert READ_S - 0.5 <= time.monotonic() - started <= READ_S + 2.5
        crowd = []
        try:
            for _ in range(8):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.bind(("127.0.0.2", 0))
                sock.connect((host, int(port)))
                crowd.append(sock)
            assert sum(_closed_within(s, 1.0) for s in crowd[5:]) == 3
            # Another address is served meanwhile.
            with socket.create_connection((host, int(port)), timeout=5) as other:
                other.sendall(encode(RemotingCommand(code=RequestCode.GET_KV_CONFIG, opaque=1,
                                                     ext_fields={"namespace": "n", "key": "k"})))  # fmt: skip
                decoder = FrameDecoder(1 << 20)
                other.settimeout(5)
                replies: list[RemotingCommand] = []
                while not replies:
                    replies = decoder.feed(other.recv(65536))
                assert replies[0].opaque == 1
        finally:
            for sock in crowd:
                sock.close()
        grpc_host, grpc_port = ns.endpoint.rsplit(":", 1)
        with socket.create_connection((grpc_host, int(grpc_port)), timeout=5) as sock:
            sock.sendall(_FRAME_HEADS["grpc"])
            assert _closed_within(sock, READ_S + 3)
    assert "maxConnectionsPerAddress is 5" in ns.log_path.read_text()
