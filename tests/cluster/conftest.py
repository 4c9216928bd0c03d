"""A cluster as processes on 127.0.0.1: two NameServers (ephemeral but fixed ports, so one can
restart on its port) and two broker groups (broker-a, broker-b of cluster C, masters only)
registered with both; auto-create off, so topics exist where a test creates them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import BrokerProcess, Daemons, NamesrvProcess, free_port

SILENCE_MS = 2000  # brokerNotActiveTimeoutMillis of the test NameServers


@pytest.fixture
def cluster(
    daemons: Daemons, tmp_path: Path
) -> tuple[list[NamesrvProcess], dict[str, BrokerProcess]]:
    settings = {"brokerNotActiveTimeoutMillis": SILENCE_MS}
    names = [
        daemons.namesrv(tmp_path / f"ns{i}", settings=settings, port=free_port()) for i in range(2)
    ]
    addr = ";".join(ns.endpoint for ns in names)
    brokers = {
        name: daemons.broker(
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
    for ns in names:  # a cluster-wide create reaches only the masters registered by then
        ns.wait_registered(list(brokers.values()))
    return names, brokers
