"""/metrics behind a bearer token (metricsBearerTokenFile) on the real daemon: 401 without the
token or with a wrong one, 200 with it; the gRPC health service stays open; the token is never
logged; an unusable token file stops the broker with the setting named."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.harness import Daemons
from tests.ops.prometheus_server import PrometheusServer

TOKEN = "s3cr3t-token-for-prometheus_0123456789"


def scrape(endpoint: str, authorization: str | None) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(f"http://{endpoint}/metrics")
    if authorization is not None:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, dict(reply.headers), reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def test_metrics_require_the_bearer_token_when_configured(daemons: Daemons, tmp_path: Path) -> None:
    token_file = tmp_path / "metrics_token"
    token_file.write_text(TOKEN + "\n")  # a trailing newline, as `echo` writes it
    settings = {"metricsBearerTokenFile": str(token_file)}
    with daemons.broker(tmp_path / "broker", settings=settings) as broker:
        status, headers, body = scrape(broker.metrics_endpoint, None)
        assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
        assert "rocketmq_" not in body and "wharf_" not in body
        for wrong in (f"Bearer {TOKEN[:-1]}", f"Bearer {TOKEN}x", TOKEN, f"Basic {TOKEN}", ""):
            assert scrape(broker.metrics_endpoint, wrong)[0] == 401, wrong
        status, _, body = scrape(broker.metrics_endpoint, f"Bearer {TOKEN}")
        assert status == 200 and "wharf_store_disk_used_ratio" in body
        # The health service answers without anything.
        with grpc.insecure_channel(broker.endpoint) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=5
            )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    assert TOKEN not in broker.log()


@pytest.mark.ops
def test_prometheus_with_the_deploy_config_scrapes_a_broker_requiring_the_token(
    daemons: Daemons,
    tmp_path: Path,
) -> None:
    """deploy/prometheus.yml's authorization block, its credentials_file rebased onto the
    broker's token file (both are the same compose secret)."""
    token_file = tmp_path / "metrics_token"
    token_file.write_text(TOKEN)
    settings = {"metricsBearerTokenFile": str(token_file)}
    with (
        daemons.broker(tmp_path / "broker", settings=settings) as broker,
        PrometheusServer(tmp_path, broker.metrics_endpoint, token_file) as prom,
    ):
        (up,) = prom.wait_for('up{job="wharf"} == 1')
        assert up["metric"]["instance"] == broker.metrics_endpoint
        assert prom.wait_for("wharf_broker_uptime_seconds > 0")


def test_metrics_stay_open_without_a_token(daemons: Daemons, tmp_path: Path) -> None:
    with daemons.broker(tmp_path / "broker") as broker:
        status, _, body = scrape(broker.metrics_endpoint, None)
        assert status == 200 and "wharf_store_disk_used_ratio" in body


@pytest.mark.parametrize(
    ("content", "problem"),
    [(None, "cannot read"), ("", "must hold one token"), ("two words", "must hold one token")],
)
def test_an_unusable_token_file_stops_the_broker(
    daemons: Daemons, tmp_path: Path, content: str | None, problem: str
) -> None:
    token_file = tmp_path / "metrics_token"
    if content is not None:
        token_file.write_text(content)
    broker = daemons.broker(
        tmp_path / "broker", settings={"metricsBearerTokenFile": str(token_file)}, start=False
    )
    with pytest.raises(RuntimeError, match="broker exited with 1") as caught:
        broker.start()
    message = str(caught.value)
    assert "metricsBearerTokenFile" in message and str(token_file) in message
    assert problem in message
    assert "store started" not in message  # refused before the store opens
