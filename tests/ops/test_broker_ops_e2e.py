"""The real daemon under operations tooling: its /metrics after sends, pulls, commits, a DLQ
move and a parked pull; promtool on the scrape; a real Prometheus scraping it with the alert
rules and evaluating every dashboard query; the health probe; the advertised address."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from wharf.v1 import common_pb2, messaging_pb2, messaging_pb2_grpc

from tests.harness import BrokerProcess, Daemons
from tests.ops.deploy_files import (
    DASHBOARD,
    DEPLOY,
    dashboard_queries,
    metric_names_in,
    runnable_query,
)
from tests.ops.exposition import parse_samples, sample_names, value
from tests.ops.prometheus_server import PrometheusServer

TOPIC = "orders"
SETTINGS = {
    "flushDiskType": "SYNC_FLUSH",  # exercises group commit and the sync flush histogram
    "mappedFileSizeCommitLog": 256 * 1024,
    "mappedFileSizeConsumeQueue": 2000,
    "maxMessageSize": 64 * 1024,
    "maxHashSlotNum": 1000,
    "maxIndexNum": 4000,
}


def scrape(broker: BrokerProcess) -> str:
    url = f"http://{broker.metrics_endpoint}/metrics"
    with urllib.request.urlopen(url, timeout=10) as reply:
        return reply.read().decode()


def send(stub: Any, queue_id: int, sizes: list[int]) -> messaging_pb2.SendMessageResponse:
    messages = [common_pb2.Message(body=b"x" * size, tags="t") for size in sizes]
    request = messaging_pb2.SendMessageRequest(topic=TOPIC, queue_id=queue_id, messages=messages)
    return stub.SendMessage(request, timeout=10)


def commit(stub: Any, group: str, queue_id: int, offset: int) -> None:
    stub.UpdateConsumerOffset(
        messaging_pb2.UpdateConsumerOffsetRequest(
            consumer_group=group, topic=TOPIC, queue_id=queue_id, offset=offset
        ),
        timeout=10,
    )


@pytest.fixture(scope="module")
def loaded_broker(
    module_daemons: Daemons, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    """A daemon with: queue 0 = 10 x 100 B, queue 1 = 5 x 2000 B; group billing pulled 4 and
    committed 4 of queue 0 and all of queue 1 (lag 6); group audit fully committed (lag 0);
    one message sent back straight to billing's DLQ."""
    with module_daemons.broker(tmp_path_factory.mktemp("ops-broker"), settings=SETTINGS) as broker:
        with grpc.insecure_channel(broker.endpoint) as channel:
            stub = messaging_pb2_grpc.MessagingServiceStub(channel)
            send(stub, 0, [100] * 10)
            send(stub, 1, [2000] * 5)
            pulled = stub.PullMessage(
                messaging_pb2.PullMessageRequest(
                    consumer_group="billing", topic=TOPIC, queue_id=0, queue_offset=0,
                    max_messages=4,
                ),
                timeout=10,
            )  # fmt: skip
            assert len(pulled.messages) == 4
            commit(stub, "billing", 0, 4)
            commit(stub, "billing", 1, 5)
            commit(stub, "audit", 0, 10)
            commit(stub, "audit", 1, 5)
            stub.SendMessageBack(
                messaging_pb2.SendMessageBackRequest(
                    consumer_group="billing",
                    commit_log_offset=pulled.messages[0].commit_log_offset,
                    delay_level=-1,  # straight to %DLQ%billing
                ),
                timeout=10,
            )
        yield broker


def test_metrics_endpoint_reports_traffic_lag_and_store_state(loaded_broker) -> None:
    samples = parse_samples(scrape(loaded_broker))
    assert value(samples, "rocketmq_messages_in_total", topic=TOPIC) == 15
    assert value(samples, "rocketmq_throughput_in_total", topic=TOPIC) == 10 * 100 + 5 * 2000
    assert value(samples, "rocketmq_message_size_count", topic=TOPIC) == 15
    assert value(samples, "rocketmq_message_size_bucket", topic=TOPIC, le="256.0") == 10
    billing = {"topic": TOPIC, "consumer_group": "billing"}
    assert value(samples, "rocketmq_messages_out_total", **billing) == 4
    assert value(samples, "rocketmq_throughput_out_total", **billing) == 400
    assert value(samples, "rocketmq_send_to_dlq_messages_total", **billing) == 1
    assert value(samples, "rocketmq_consumer_lag_messages", **billing) == 6
    assert 0 <= value(samples, "rocketmq_consumer_lag_latency", **billing) < 120
    audit = {"topic": TOPIC, "consumer_group": "audit"}
    assert value(samples, "rocketmq_consumer_lag_messages", **audit) == 0
    assert value(samples, "rocketmq_consumer_lag_latency", **audit) == 0
    assert value(samples, "rocketmq_topic_number") == 1  # %DLQ%/%RETRY% are system topics
    assert value(samples, "rocketmq_consumer_group_number") == 2
    assert value(samples, "rocketmq_rpc_latency_count", method="SendMessage", status="OK") == 2
    assert value(samples, "rocketmq_rpc_latency_count", method="PullMessage", status="OK") == 1
    assert value(samples, "rocketmq_storage_size") > 0
    assert value(samples, "wharf_store_writable") == 1
    assert value(samples, "wharf_store_disk_full_episodes_total") == 0
    assert value(samples, "wharf_store_segments", kind="commitlog") >= 1
    assert value(samples, "wharf_store_segments", kind="consumequeue") >= 2
    assert 0 < value(samples, "wharf_store_disk_used_ratio") < 1
    assert value(samples, "wharf_store_disk_used_ratio_threshold", kind="clean_forcibly") == 0.85
    assert value(samples, "wharf_store_flush_latency_seconds_count", kind="sync") >= 1
    assert value(samples, "wharf_store_group_commit_batch_size_count") >= 1
    assert value(samples, "wharf_store_recovery_seconds") >= 0
    assert value(samples, "wharf_store_messages_put_total") >= 16  # 15 + the DLQ copy
    assert value(samples, "wharf_long_poll_parked_requests") == 0
    assert value(samples, "wharf_metrics_snapshot_failures_total") == 0


def test_parked_long_poll_pull_shows_in_the_gauge(daemons: Daemons, tmp_path: Path) -> None:
    # Its own daemon: the exact counts of the loaded broker stay independent of test order.
    with daemons.broker(tmp_path, settings=SETTINGS) as broker:
        with grpc.insecure_channel(broker.endpoint) as channel:
            stub = messaging_pb2_grpc.MessagingServiceStub(channel)
            send(stub, 0, [100])
            idle_tasks = value(parse_samples(scrape(broker)), "wharf_event_loop_tasks")
            assert idle_tasks >= 1  # the broker's own services run as tasks
            request = messaging_pb2.PullMessageRequest(
                consumer_group="audit", topic=TOPIC, queue_id=0, queue_offset=1,
                max_wait_ms=20_000,
            )  # fmt: skip
            future = stub.PullMessage.future(request, timeout=30)  # offset 1 == max: parks
            deadline = time.monotonic() + 10
            parked = 0.0
            while time.monotonic() < deadline and parked < 1:
                parked = value(parse_samples(scrape(broker)), "wharf_long_poll_parked_requests")
                time.sleep(0.05)
            assert parked == 1
            with_parked = value(parse_samples(scrape(broker)), "wharf_event_loop_tasks")
            send(stub, 0, [100])  # wakes the parked pull
            assert len(future.result(timeout=10).messages) == 1
            # The parked call was a task of its own on the broker's loop: gone once answered.
            # The least of a few scrapes: a call just answered (the send's, the pull's) may
            # still be ending; the count before the pull parked had the first send's (a CI run
            # saw 62 against 62 there).
            after = []
            for _ in range(5):
                after.append(value(parse_samples(scrape(broker)), "wharf_event_loop_tasks"))
                time.sleep(0.1)
            assert with_parked > min(after), (with_parked, after)
        samples = parse_samples(scrape(broker))
        assert value(samples, "wharf_long_poll_parked_requests") == 0
        assert (
            value(samples, "rocketmq_messages_out_total", topic=TOPIC, consumer_group="audit") == 1
        )


@pytest.mark.ops
def test_promtool_accepts_the_live_scrape(loaded_broker) -> None:
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=scrape(loaded_broker), capture_output=True,
        text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_and_alerts_name_only_metrics_the_live_broker_exports(loaded_broker) -> None:
    exported = sample_names(scrape(loaded_broker))
    dashboard = json.loads(DASHBOARD.read_text())
    used = set().union(*(metric_names_in(query) for query in dashboard_queries(dashboard)))
    used |= metric_names_in((DEPLOY / "alerts.yml").read_text())
    assert used, "no metric names found in the dashboard and alert rules"
    assert used <= exported, f"not exported by the broker: {sorted(used - exported)}"


@pytest.mark.ops
def test_prometheus_scrapes_the_broker_loads_the_rules_and_runs_dashboard_queries(
    loaded_broker, tmp_path: Path
) -> None:
    with PrometheusServer(tmp_path, loaded_broker.metrics_endpoint) as prometheus:
        (up,) = prometheus.wait_for('up{job="wharf"} == 1')
        assert up["metric"]["instance"] == loaded_broker.metrics_endpoint
        (messages_in,) = prometheus.wait_for(f'rocketmq_messages_in_total{{topic="{TOPIC}"}} > 0')
        assert float(messages_in["value"][1]) >= 15
        rules = _wait_for_rule_evaluation(prometheus)
        assert {"WharfStoreNotWritable", "WharfDiskUsageHigh", "WharfFlushLatencyHigh",
                "WharfConsumerLagGrowing"} <= set(rules)  # fmt: skip
        assert set(rules.values()) == {"ok"}, rules
        # A healthy broker raises nothing (disk usage depends on the host running the test).
        active = {alert["labels"]["alertname"] for alert in prometheus.api("alerts")["alerts"]}
        assert active <= {"WharfDiskUsageHigh"}, active
        for query in dashboard_queries(json.loads(DASHBOARD.read_text())):
            prometheus.query(runnable_query(query))  # raises unless Prometheus accepts it


def _wait_for_rule_evaluation(prometheus: PrometheusServer, timeout: float = 30) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        groups = prometheus.api("rules")["groups"]
        health = {rule["name"]: rule["health"] for group in groups for rule in group["rules"]}
        if (health and "unknown" not in health.values()) or time.monotonic() > deadline:
            return health
        time.sleep(0.5)


def test_probe_reports_serving_then_fails_once_the_broker_stops(
    daemons: Daemons, tmp_path: Path
) -> None:
    probe = [sys.executable, "-m", "wharf.broker.kit.probe", "--timeout", "3"]
    broker = daemons.broker(tmp_path, settings=SETTINGS, env={"WHARF_ADVERTISED_ADDRESS": "mq.example.com:8081"}, start=False)  # fmt: skip
    with broker:
        serving = subprocess.run([*probe, "--endpoint", broker.endpoint], capture_output=True, text=True, timeout=60)  # fmt: skip
        assert serving.returncode == 0, serving.stderr
        assert serving.stdout.strip() == "SERVING"
        # docker-compose sets WHARF_ADVERTISED_ADDRESS: clients are told to dial it.
        with grpc.insecure_channel(broker.endpoint) as channel:
            route = messaging_pb2_grpc.MessagingServiceStub(channel).QueryRoute(
                messaging_pb2.QueryRouteRequest(topic=TOPIC), timeout=10
            )
        assert route.endpoint == "mq.example.com:8081"
        assert broker.stop() == 0
    stopped = subprocess.run([*probe, "--endpoint", broker.endpoint], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert stopped.returncode != 0
    assert "SERVING" not in stopped.stdout
