"""``tests.bench.peers --smoke`` as a program (``make bench-peers`` in short): Apache Kafka
(one KRaft node) and Apache RocketMQ's NameServer and broker, started from their Maven Central
jars (``make peers``), and a Wharf broker each, every one fed and drained a few hundred 1 KiB
messages by Apache's own clients (kafka-tools' ProducerPerformance and ConsumerPerformance; the
4.x remoting client through PeerBench). Keeps the program from rotting; figures are not
asserted (timings belong in benchmark output). ~60-90 s on 2 cores, JVM starts mostly."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.bench.peers import PEERS
from tests.harness import REPO_ROOT

pytestmark = pytest.mark.slow


# JVM starts dominate: ~60-90 s on 2 cores; 5 min when others kept the machine at load 20.


@pytest.mark.timeout(480)
def test_smoke_run_feeds_and_drains_kafka_rocketmq_and_wharf() -> None:
    if shutil.which("java") is None:
        pytest.skip("no java on the PATH: install a JDK >= 17 (e.g. openjdk-17-jdk-headless)")
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("the program runs in a network namespace of its own: root, unshare and ip")
    if not all((PEERS / m / "classpath.txt").exists() for m in ("kafka", "rocketmq", "clients")):
        pytest.skip("the peers are not fetched: run `make peers` (needs mvn)")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.bench.peers", "--smoke"],
        capture_output=True, text=True, timeout=420, cwd=REPO_ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rounds = re.findall(r"^round 1 (\S+)\s+(\S+)\s+start ", proc.stdout, re.M)
    assert sorted(rounds) == [
        ("kafka", "kafka"), ("kafka", "wharf"), ("rmq4", "rocketmq"), ("rmq4", "wharf"),
    ], proc.stdout  # fmt: skip
    assert "smoke: 4 brokers produced and consumed (300 messages each" in proc.stdout
