"""wharf-probe against a real gRPC health service: SERVING, NOT_SERVING, unreachable."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from wharf.broker.kit import probe

Serving = health_pb2.HealthCheckResponse.ServingStatus


@pytest.fixture
def health_server() -> Iterator[tuple[str, health.HealthServicer]]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", servicer
    finally:
        server.stop(None).wait()


def run_probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wharf.broker.kit.probe", *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_probe_command_prints_serving_and_exits_zero(health_server) -> None:
    endpoint, servicer = health_server
    servicer.set("", Serving.SERVING)
    result = run_probe("--endpoint", endpoint, "--timeout", "5")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "SERVING"


def test_probe_fails_while_the_server_reports_not_serving(health_server) -> None:
    endpoint, servicer = health_server
    servicer.set("", Serving.NOT_SERVING)
    assert probe.check(endpoint, 5.0) == (probe.EXIT_NOT_SERVING, "NOT_SERVING")


def test_probe_fails_for_an_unknown_service_name(health_server) -> None:
    endpoint, _ = health_server
    code, text = probe.check(endpoint, 5.0, service="wharf.v1.Nope")
    assert code == probe.EXIT_NOT_SERVING and "SERVICE_UNKNOWN" in text


def test_probe_command_fails_when_nothing_listens() -> None:
    result = run_probe("--endpoint", f"127.0.0.1:{closed_port()}", "--timeout", "0.5")
    assert result.returncode == probe.EXIT_UNREACHABLE
    assert "UNREACHABLE" in result.stderr


def test_probe_rejects_a_malformed_endpoint() -> None:
    result = run_probe("--endpoint", "localhost", "--timeout", "1")
    assert result.returncode == 2
    assert "HOST:PORT" in result.stderr
