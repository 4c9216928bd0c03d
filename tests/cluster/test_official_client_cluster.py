"""The OFFICIAL RocketMQ Python client against a cluster through ONE access point (broker-a):
the route it gets lists the queues of both groups with their own endpoints, so its producer
spreads over both groups and its PushConsumer receives from both, every message once."""

from __future__ import annotations

import grpc
import pytest
from wharf.v1 import messaging_pb2, messaging_pb2_grpc

from tests.broker.v2.test_official_client import run_script
from tests.broker.v2.test_official_scenarios import SCRIPT
from tests.cluster.test_namesrv import cli, route, wait_for

pytestmark = pytest.mark.slow
QUEUES = 2


def stored(endpoint: str, topic: str) -> list[bytes]:
    """Every message of the topic on one broker (its own wharf.v1 pulls)."""
    out: list[bytes] = []
    with grpc.insecure_channel(endpoint) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        for queue_id in range(QUEUES):
            offset = 0
            while True:
                reply = stub.PullMessage(
                    messaging_pb2.PullMessageRequest(
                        consumer_group="check", topic=topic, queue_id=queue_id,
                        queue_offset=offset, max_messages=100,
                    ),
                    timeout=10,
                )  # fmt: skip
                if not reply.messages:
                    break
                out += [m.body for m in reply.messages]
                offset = reply.next_begin_offset
    return out


def test_official_client_spreads_over_the_cluster_from_one_access_point(cluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    names, brokers = cluster
    ns = ";".join(n.endpoint for n in names)
    wait_for(lambda: len(cli(ns, "cluster", "list")) == 2, 10, "both brokers registered")
    cli(ns, "topic", "create", "spread", "--cluster", "C", "--queues", str(QUEUES))
    wait_for(lambda: route(names[0].endpoint, "spread") == {"broker-a": 2, "broker-b": 2}, 5, "")
    wait_for(lambda: route(names[1].endpoint, "spread") == {"broker-a": 2, "broker-b": 2}, 5, "")

    a = brokers["broker-a"].endpoint
    out = run_script(SCRIPT, a, tmp_path / "home", "push", "spread", "g-spread", "40")
    bodies = [f"push-{i}" for i in range(40)]
    on_a, on_b = stored(a, "spread"), stored(brokers["broker-b"].endpoint, "spread")
    assert sorted(b.decode() for b in on_a + on_b) == sorted(bodies)  # each stored once
    assert on_a and on_b, f"sends did not spread: {len(on_a)} on a, {len(on_b)} on b"
    seen = sorted(body for body, _ in out["seen"])
    assert seen == sorted(bodies)  # the consumer received from both groups, each once
