"""Wharf daemons inside a network namespace (tests/fault/netns.py): a broker or a NameServer
on a ``Host``, listening on the host's address with fixed ports (every host has an address of
its own, so fixed ports never collide). Both launch with no ``preexec_fn`` (``_launch``), so
restarting one beside running gRPC clients is safe."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tests.fault.netns import Host
from tests.harness import BrokerProcess, NamesrvProcess, _launch, _toml_value

GRPC_PORT = 8081
NAMESRV_PORT = 9876
REMOTING_PORT = 10911  # RocketMQ 4.x remoting: the campaign reads through it too
KAFKA_PORT = 9092  # Kafka: the campaign's idempotent producer and consumer group


class NetnsBroker(BrokerProcess):
    """BrokerProcess inside ``host``, gRPC on host:8081 (HA binds that host too)."""

    def __init__(self, root: Path, host: Host, settings: dict[str, Any]) -> None:
        super().__init__(root, settings)
        self.host = host

    def start(self, timeout: float | None = None) -> NetnsBroker:
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "broker.toml"
        config.write_text("".join(f"{k} = {_toml_value(v)}\n" for k, v in self.settings.items()))
        ready = self.root / "ready.json"
        ready.unlink(missing_ok=True)
        cmd = self.host.command([
            sys.executable, "-m", "wharf.broker", "--config", str(config),
            "--store-dir", str(self.store_dir), "--listen", f"{self.host.address}:{GRPC_PORT}",
            "--metrics-listen", "127.0.0.1:0", "--wire-listen", "127.0.0.1:0",
            "--remoting-listen", f"{self.host.address}:{REMOTING_PORT}",
            "--kafka-listen", f"{self.host.address}:{KAFKA_PORT}",
            "--ready-file", str(ready),
        ])  # fmt: skip
        self.proc, info = _launch(cmd, {}, self.log_path, ready, timeout or 30.0, "broker")
        self.endpoint, self.ha_endpoint = info["grpc"], info.get("ha") or ""
        self.remoting_endpoint = info.get("remoting") or ""
        self.kafka_endpoint = info.get("kafka") or ""
        return self


class NetnsNamesrv(NamesrvProcess):
    def __init__(self, root: Path, host: Host) -> None:
        super().__init__(root)
        self.host = host

    def start(self, timeout: float | None = None) -> NetnsNamesrv:
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "namesrv.toml"
        config.write_text("")
        ready = self.root / "ready.json"
        ready.unlink(missing_ok=True)
        cmd = self.host.command([
            sys.executable, "-m", "wharf.broker.namesrv", "--config", str(config),
            "--listen", f"{self.host.address}:{NAMESRV_PORT}", "--ready-file", str(ready),
        ])  # fmt: skip
        self.proc, info = _launch(cmd, {}, self.log_path, ready, timeout or 30.0, "namesrv")
        self.endpoint = info["grpc"]
        return self
