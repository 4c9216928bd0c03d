"""Two NameServers and two broker groups as processes on 127.0.0.1: registration, cluster
listing, topics created across the cluster, routes that follow brokers' deaths at once (kill
-9: the session breaks), their silence (SIGSTOP: after brokerNotActiveTimeoutMillis) and their
goodbye (SIGTERM), a NameServer restart, and clients that fail over between NameServers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from wharf.v1 import namesrv_pb2, namesrv_pb2_grpc

from tests.cluster.conftest import SILENCE_MS
from tests.harness import REPO_ROOT

pytestmark = pytest.mark.slow


def route(ns: str, topic: str) -> dict[str, int]:
    """broker name -> write queues of the topic's route on NameServer ``ns`` ({} if none)."""
    with grpc.insecure_channel(ns) as channel:
        stub = namesrv_pb2_grpc.NameServiceStub(channel)
        try:
            reply = stub.QueryRoute(namesrv_pb2.QueryTopicRouteRequest(topic=topic), timeout=5)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return {}
            raise
    return {q.broker_name: q.write_queue_nums for q in reply.queues}


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> float:
    """Seconds until ``check`` held (polled every 20 ms); AssertionError after ``timeout``."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.02)
    return time.monotonic() - start


def cli(namesrv: str, *args: str) -> Any:
    proc = subprocess.run(
        [sys.executable, "-m", "wharf.client.cli.main", "--namesrv", namesrv, "--json", *args],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def cli_lines(namesrv: str, *args: str) -> list[Any]:
    """A command printing one JSON document per line (consume --json)."""
    proc = subprocess.run(
        [sys.executable, "-m", "wharf.client.cli.main", "--namesrv", namesrv, "--json", *args],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def test_routes_follow_registration_death_silence_and_goodbye(cluster) -> None:  # type: ignore[no-untyped-def]
    names, brokers = cluster
    ns = ";".join(n.endpoint for n in names)

    def listed() -> list[tuple[str, str, int]]:
        return sorted((b["cluster"], b["broker_name"], int(b.get("broker_id", 0)))
                      for b in cli(ns, "cluster", "list"))  # fmt: skip

    wait_for(lambda: len(listed()) == 2, 10, "both brokers registered")
    assert listed() == [("C", "broker-a", 0), ("C", "broker-b", 0)]
    rows = {b["broker_name"]: b for b in cli(ns, "cluster", "list")}
    assert rows["broker-a"]["address"] == brokers["broker-a"].endpoint
    assert rows["broker-a"]["role"] == "MASTER"

    made = cli(ns, "topic", "create", "orders", "--cluster", "C", "--queues", "4")
    assert sorted(b["broker"] for b in made["brokers"] if b["created"]) == ["broker-a", "broker-b"]
    for n in names:  # the re-registration after a topic change reaches every NameServer
        wait_for(lambda n=n: route(n.endpoint, "orders") == {"broker-a": 4, "broker-b": 4},
                 5, "orders routed on both groups")  # fmt: skip
    cli(ns, "topic", "create", "only-b", "--broker", "broker-b", "--queues", "2")
    wait_for(lambda: route(names[0].endpoint, "only-b") == {"broker-b": 2}, 5, "only-b")

    # kill -9: the session's connection resets, the route loses the group at once.
    brokers["broker-b"].kill()
    for n in names:
        took = wait_for(lambda n=n: route(n.endpoint, "orders") == {"broker-a": 4}, 1.0,
                        "a killed broker's route gone within 1 s")  # fmt: skip
        print(f"route without broker-b after {took:.3f} s")
    assert route(names[0].endpoint, "only-b") == {}

    # SIGSTOP: the connection stays open; silence drops it after brokerNotActiveTimeoutMillis.
    os.kill(brokers["broker-a"].pid, signal.SIGSTOP)
    took = wait_for(lambda: route(names[0].endpoint, "orders") == {}, SILENCE_MS / 1000 + 3,
                    "a silent broker dropped")  # fmt: skip
    assert took >= SILENCE_MS / 1000 - 0.5, "dropped before brokerNotActiveTimeoutMillis"
    os.kill(brokers["broker-a"].pid, signal.SIGCONT)  # it heartbeats again, is told to register
    wait_for(lambda: route(names[0].endpoint, "orders") == {"broker-a": 4}, 5, "back")

    # A NameServer restarted (same port, empty tables): brokers register again by themselves.
    names[1].kill()
    names[1].start()
    wait_for(lambda: route(names[1].endpoint, "orders") == {"broker-a": 4}, 5, "re-registered")

    # SIGTERM: the broker unregisters before it exits.
    brokers["broker-a"].stop()
    assert route(names[0].endpoint, "orders") == {}
    assert listed() == []


def test_clients_use_the_other_name_server_when_one_is_dead(cluster) -> None:  # type: ignore[no-untyped-def]
    names, _brokers = cluster
    ns = ";".join(n.endpoint for n in names)
    wait_for(lambda: len(cli(ns, "cluster", "list")) == 2, 10, "both brokers registered")
    names[0].kill()
    for _ in range(3):  # whichever NameServer a client starts with
        assert len(cli(ns, "cluster", "list")) == 2


def test_broker_metrics_name_its_cluster_and_its_name_server_sessions(cluster) -> None:  # type: ignore[no-untyped-def]
    import urllib.request

    names, brokers = cluster
    ns = ";".join(n.endpoint for n in names)
    wait_for(lambda: len(cli(ns, "cluster", "list")) == 2, 10, "both brokers registered")
    url = f"http://{brokers['broker-a'].metrics_endpoint}/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    assert 'wharf_broker_info{broker="broker-a",broker_id="0",cluster="C"} 1.0' in text
    for n in names:
        assert f'wharf_namesrv_session_up{{namesrv="{n.endpoint}"}} 1.0' in text
    names[0].kill()
    time.sleep(0.5)
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    assert f'wharf_namesrv_session_up{{namesrv="{names[0].endpoint}"}} 0.0' in text


def test_cli_sends_through_the_cluster_and_queries_fan_out_over_its_groups(cluster) -> None:  # type: ignore[no-untyped-def]
    names, _brokers = cluster
    ns = ";".join(n.endpoint for n in names)
    wait_for(lambda: len(cli(ns, "cluster", "list")) == 2, 10, "both brokers registered")
    cli(ns, "topic", "create", "audit", "--cluster", "C", "--queues", "1")
    for n in names:
        wait_for(lambda n=n: route(n.endpoint, "audit") == {"broker-a": 1, "broker-b": 1}, 5, "")
    # Each `wharf send` is a process of its own that starts at a random group (as RocketMQ's
    # ThreadLocalIndex): six sends all went to one group 1 time in 32. Send until both groups
    # took some, at least six (24 sends all to one group: 1 time in 8 million).
    sent: list[dict[str, str]] = []
    while len(sent) < 6 or (len({s["offset_msg_id"][:16] for s in sent}) < 2 and len(sent) < 24):
        sent.append(cli(ns, "send", "audit", f"entry-{len(sent)}", "--key", "k-1"))
    bodies = [f"entry-{i}" for i in range(len(sent))]
    assert len({s["offset_msg_id"][:16] for s in sent}) == 2  # the sends went to both groups
    found = []
    deadline = time.monotonic() + 10
    while len(found) < len(bodies) and time.monotonic() < deadline:  # dispatch builds the index
        found = cli(ns, "query", "--topic", "audit", "--key", "k-1")
    assert sorted(m["body"] for m in found) == sorted(bodies)
    consumed = cli_lines(ns, "consume", "audit", "--group", "g-audit", "--commit")
    assert sorted(m["body"] for m in consumed) == sorted(bodies)
    assert cli_lines(ns, "consume", "audit", "--group", "g-audit", "--from", "committed") == []
    for s in sent:  # by unique id (with the topic) and by offset id: whichever group has it
        assert cli(ns, "view", "--msg-id", s["msg_id"], "--topic", "audit")["body"].startswith(
            "entry-"
        )
        assert cli(ns, "view", "--msg-id", s["offset_msg_id"])["msg_id"] == s["msg_id"]
