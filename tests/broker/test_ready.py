"""Ready means ready (issue 33): a daemon's gRPC port accepts connections only once it serves.

The broker and the NameServer are started as subprocesses on a fixed port while the test dials
that port over and over: a raw TCP connection that sends the HTTP/2 preface (a gRPC server
answers with its SETTINGS frame at once) and a Health/Check on a fresh channel, each with a
short deadline. Every attempt must be refused (nothing listens yet: the client retries) or
answered; an attempt whose connection is accepted but never answered is the bug: a client
then waits for its whole deadline ("timed out before receiving SETTINGS frame").

The broker runs with the production commit log segment size (1 GiB): its first start takes a
noticeable time (recovery reads the fresh, preallocated segment; ~2 s here), the window in
which it used to accept without answering.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.harness import Daemons, free_port

ATTEMPT_TIMEOUT_S = 1.0  # generous for a served daemon on a loaded machine, far below start-up
START_TIMEOUT_S = 60.0
REFUSED, SERVED = "refused", "served"
# The client's connection preface (RFC 9113, section 3.4): the magic, then an empty SETTINGS.
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
H2_SETTINGS = 4


def tcp_attempt(port: int) -> str:
    """Connect and send the HTTP/2 preface: REFUSED, SERVED (the server's first frame is its
    SETTINGS), or what went wrong ('hung': accepted, nothing answered in time)."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=ATTEMPT_TIMEOUT_S)
    except ConnectionRefusedError:
        return REFUSED
    except TimeoutError:
        return "hung in connect"
    with sock:
        try:
            sock.sendall(H2_PREFACE)
            header = b""
            while len(header) < 9:
                chunk = sock.recv(9 - len(header))
                if not chunk:
                    return f"closed after {header!r}"
                header += chunk
        except TimeoutError:
            return "hung: accepted, no SETTINGS frame"
        except ConnectionResetError:
            return "reset after accepting"
    return SERVED if header[3] == H2_SETTINGS else f"unexpected first frame {header!r}"


def grpc_attempt(port: int) -> str:
    """Health/Check on a channel of its own (a local subchannel pool: a new connection, not
    one another attempt left): REFUSED (UNAVAILABLE), SERVED (SERVING), or the failure."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=ATTEMPT_TIMEOUT_S)
        except grpc.RpcError as exc:
            code = exc.code()
            if code == grpc.StatusCode.UNAVAILABLE:
                return REFUSED
            return f"{code.name}: {exc.details()}"
    if reply.status == health_pb2.HealthCheckResponse.SERVING:
        return SERVED
    return f"health {health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)}"


def dial_while_starting(start: Callable[[], object], port: int) -> dict[str, list[str]]:
    """Run ``start`` (it returns once the daemon's ready file exists) in a thread while dialing
    ``port`` both ways; keep dialing until both ways are served after it returned. Returns the
    outcomes of each way, in order."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            start()
        except BaseException as exc:  # reported by the test thread
            failure.append(exc)

    starter = threading.Thread(target=run, name="daemon-start")
    starter.start()
    outcomes: dict[str, list[str]] = {"tcp": [], "grpc": []}
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            ready = not starter.is_alive()
            outcomes["tcp"].append(tcp_attempt(port))
            outcomes["grpc"].append(grpc_attempt(port))
            if failure:
                raise AssertionError("the daemon did not start") from failure[0]
            if ready and outcomes["tcp"][-1] == SERVED and outcomes["grpc"][-1] == SERVED:
                return outcomes
            time.sleep(0.02)
    finally:
        starter.join(START_TIMEOUT_S)
    raise AssertionError(f"not served within {START_TIMEOUT_S} s: {outcomes}")


def assert_refused_or_served(outcomes: dict[str, list[str]]) -> None:
    for way, seen in outcomes.items():
        wrong = [(i, o) for i, o in enumerate(seen) if o not in (REFUSED, SERVED)]
        assert not wrong, f"{way}: attempts neither refused nor served {wrong} of {seen}"
        # Dialed during start-up (refused), then served from its first answer on.
        assert seen[0] == REFUSED, seen
        first = seen.index(SERVED)
        assert all(o == SERVED for o in seen[first:]), seen


def test_broker_port_refuses_until_it_serves(daemons: Daemons, tmp_path: Path) -> None:
    port = free_port()
    broker = daemons.broker(
        tmp_path,
        # The production segment size: a first start long enough to dial into (see above).
        settings={"mappedFileSizeCommitLog": 1024 * 1024 * 1024},
        extra_args=["--listen", f"127.0.0.1:{port}"],
        ready_timeout=START_TIMEOUT_S,
        start=False,
    )
    try:
        outcomes = dial_while_starting(broker.start, port)
        assert broker.endpoint == f"127.0.0.1:{port}"
    finally:
        broker.kill()
    assert_refused_or_served(outcomes)


def test_namesrv_port_refuses_until_it_serves(daemons: Daemons, tmp_path: Path) -> None:
    port = free_port()
    namesrv = daemons.namesrv(tmp_path, port=port, start=False)
    try:
        outcomes = dial_while_starting(namesrv.start, port)
        assert namesrv.endpoint == f"127.0.0.1:{port}"
    finally:
        namesrv.kill()
    assert_refused_or_served(outcomes)
