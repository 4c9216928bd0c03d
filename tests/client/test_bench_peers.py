"""``tests.bench.peers --smoke`` as a program (``make bench-peers`` in short): Apache Kafka
(one KRaft node) and Apache RocketMQ's NameServer and broker, started from their Maven Central
jars (``make peers``), and a Wharf broker each, every one fed and drained a few hundred 1 KiB
messages by Apache's own clients (kafka-tools' ProducerPerformance and ConsumerPerformance; the
4.x remoting client through PeerBench). Keeps the program from rotting; figures are not
asserted (timings belong in benchmark output). ~60-90 s on 2 cores, JVM starts mostly. Then
``--wharf-groups 2 --wharf-only``: Wharf as a NameServer and two broker groups, the same
clients, no peer broker (~20-30 s more: no peer JVM to start)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.bench.peers import PEERS, parse_line
from tests.harness import REPO_ROOT

pytestmark = pytest.mark.slow


# JVM starts dominate: ~60-90 s on 2 cores; 5 min when others kept the machine at load 20.


def _run_smoke(*flags: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("java") is None:
        pytest.skip("no java on the PATH: install a JDK >= 17 (e.g. openjdk-17-jdk-headless)")
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("the program runs in a network namespace of its own: root, unshare and ip")
    if not all((PEERS / m / "classpath.txt").exists() for m in ("kafka", "rocketmq", "clients")):
        pytest.skip("the peers are not fetched: run `make peers` (needs mvn)")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.bench.peers", "--smoke", *flags],
        capture_output=True, text=True, timeout=420, cwd=REPO_ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.mark.timeout(480)
def test_smoke_run_feeds_and_drains_kafka_rocketmq_and_wharf() -> None:
    proc = _run_smoke()
    rounds = re.findall(r"^round 1 (\S+)\s+(\S+)\s+start ", proc.stdout, re.M)
    assert sorted(rounds) == [
        ("kafka", "kafka"), ("kafka", "wharf"), ("rmq4", "rocketmq"), ("rmq4", "wharf"),
    ], proc.stdout  # fmt: skip
    assert "smoke: 4 brokers produced and consumed (300 messages each" in proc.stdout


# Wharf's side alone (no peer JVM broker): ~57 s at load 14, 21 s of CPU in all; the client
# JVMs' starts and three Python processes' imports per path.
@pytest.mark.timeout(480)
def test_smoke_run_spreads_over_two_wharf_broker_groups() -> None:
    """``--wharf-groups 2``: a wharf-namesrv and two broker groups; Kafka's tools bootstrapped
    from both brokers and the 4.x client routed by the NameServer each store messages on both
    groups (GET_MAX_OFFSET per group) and consume them back; CPU and RSS are summed over the
    three processes."""
    proc = _run_smoke("--wharf-groups", "2", "--wharf-only")
    lines = [parse_line(line) for line in proc.stdout.splitlines() if line.startswith("round ")]
    assert [(f.path, f.broker) for f in lines] == [("kafka", "wharf"), ("rmq4", "wharf")]
    for fig in lines:
        notes = fig.notes
        assert notes["groups"] == 2, proc.stdout
        assert set(notes["rss_mb_each"]) == {"namesrv", "broker-a", "broker-b"}, proc.stdout
        assert fig.rss_mb == pytest.approx(sum(notes["rss_mb_each"].values()), abs=0.5)
        stored = notes["stored_each"]
        assert stored["broker-a"] > 0 and stored["broker-b"] > 0, proc.stdout
        # ProducerPerformance fails the run unless all 300 are sent; PeerBench sends one more
        # (its warm-up); ``failed`` counts sends failed and messages not consumed back.
        low, high = (300, 300) if fig.path == "kafka" else (301 - fig.failed, 301)
        assert low <= sum(stored.values()) <= high, proc.stdout
    assert "smoke: 2 brokers produced and consumed (300 messages each" in proc.stdout
