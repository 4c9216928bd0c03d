"""A cluster as processes on 127.0.0.1: two NameServers (ephemeral but fixed ports, so one can
restart on its port) and two broker groups (broker-a, broker-b of cluster C, masters only)
registered with both; auto-create off, so topics exist where a test creates them."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import BrokerProcess, NamesrvProcess, free_port

SILENCE_MS = 2000  # brokerNotActiveTimeoutMillis of the test NameServers


@pytest.fixture
def cluster(
    tmp_path: Path,
) -> Iterator[tuple[list[NamesrvProcess], dict[str, BrokerProcess]]]:
    settings = {"brokerNotActiveTimeoutMillis": SILENCE_MS}
    names = [NamesrvProcess(tmp_path / f"ns{i}", settings, port=free_port()) for i in range(2)]
    for ns in names:
        ns.start()
    addr = ";".join(ns.endpoint for ns in names)
    brokers = {
        name: BrokerProcess(
            tmp_path / name,
            settings={
                "namesrvAddr": addr,
                "brokerClusterName": "C",
                "brokerName": name,
                "autoCreateTopicEnable": False,
                # Heartbeats well inside SILENCE_MS: a SIGSTOPped broker's last one is at most
                # 0.2 s old, so its drop comes after SILENCE_MS - 0.2 s at the earliest.
                "brokerHeartbeatInterval": 200,
                # Transaction check-backs after 0.5 s (the cluster transaction tests).
                "transactionTimeOut": 500,
                "transactionCheckInterval": 500,
            },
        )
        for name in ("broker-a", "broker-b")
    }
    try:
        for broker in brokers.values():
            broker.start()
        yield names, brokers
    finally:
        for process in [*brokers.values(), *names]:
            if process.proc is not None and process.proc.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
                process.kill()
