"""deploy/docker-compose.ha.yml without Docker: its structure (etcd, a NameServer, broker-a as
two controller-mode replicas that find etcd, each other and the NameServer by the compose's
names), then the same topology as processes on 127.0.0.1 -- the compose's etcd command with
Debian's etcd, a NameServer, both replicas with the compose's environment (secrets from `make
deploy-secrets`, /run/secrets paths rebased, etcd / NameServer / replication addresses replaced
by the processes' ports; the compose's 10 s lease kept): one replica is master with the other
in its sync-state set, a topic created with --cluster takes TLS + ACL sends, kill -9 of the
master hands the group to the other replica within the lease plus a few seconds with every
acknowledged message readable there, and the killed replica rejoins the sync-state set."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from wharf.broker.settings import load_settings
from wharf.client import Admin, Producer, PullConsumer, SendStatus
from wharf.client.channel import tls_config
from wharf.client.namesrv import NameServerClient

from tests.harness import REPO_ROOT, BrokerProcess, Daemons, free_port
from tests.ops.deploy_files import DEPLOY, load_yaml

HA = load_yaml(DEPLOY / "docker-compose.ha.yml")
REPLICAS = ("broker-a-1", "broker-a-2")


def _compose_env(env: dict[str, Any]) -> dict[str, str]:
    """The environment as Compose passes it: ``${VAR:-default}`` with VAR unset."""
    return {str(k): re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(v)) for k, v in env.items()}


def _env_file(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().split())


def _flags(command: list[str]) -> dict[str, str]:
    return dict(arg.removeprefix("--").split("=", 1) for arg in command[1:])


def test_ha_compose_runs_etcd_a_name_server_and_two_controller_mode_replicas() -> None:
    services = HA["services"]
    assert set(services) == {"namesrv", "etcd", *REPLICAS}
    etcd = services["etcd"]
    flags = _flags(etcd["command"])
    advertised = flags["advertise-client-urls"].removeprefix("http://")
    assert advertised == "etcd:2379"
    assert flags["initial-cluster"] == f"{flags['name']}={flags['initial-advertise-peer-urls']}"
    data = next(v for v in etcd["volumes"] if v.endswith(":" + flags["data-dir"]))
    assert data.split(":")[0] in HA["volumes"]  # the elections' state survives a re-create
    assert "endpoint" in etcd["healthcheck"]["test"]
    assert all(p.startswith("127.0.0.1:") for p in etcd["ports"])  # loopback only
    ids = set()
    for name in REPLICAS:
        service = services[name]
        env = service["environment"]
        assert env["WHARF_ENABLE_CONTROLLER_MODE"] == "true"
        assert env["WHARF_CONTROLLER_ADDR"] == advertised
        assert env["WHARF_BROKER_NAME"] == "broker-a"
        assert env["WHARF_NAMESRV_ADDR"] == "namesrv:9876"
        # The HA address a master publishes in etcd: its own service name, not 0.0.0.0.
        assert env["WHARF_HA_LISTEN_HOST"] == name
        assert not any(p.endswith(":" + env["WHARF_HA_LISTEN_PORT"]) for p in service["ports"])
        assert env["WHARF_TLS_ENABLE"] == "true" and env["WHARF_ACL_ENABLE"] == "true"
        # Replication over TLS, trusting the broker certificate, with the replication account.
        assert env["WHARF_HA_TLS_ENABLE"] == "true"
        assert env["WHARF_HA_TLS_CA_FILE"] == "/run/secrets/wharf_tls_cert"
        assert service["env_file"] == "./secrets/broker.env"  # the `broker` account's keys
        assert env["WHARF_NAMESRV_TLS_ENABLE"] == "true"
        assert env["WHARF_NAMESRV_TLS_CA_FILE"] == "/run/secrets/wharf_tls_cert"
        for secret in service["secrets"]:
            assert (DEPLOY / HA["secrets"][secret]["file"]).parent.name == "secrets"
        assert service["depends_on"] == {
            "namesrv": {"condition": "service_healthy"},
            "etcd": {"condition": "service_healthy"},
        }
        config = load_settings(DEPLOY / "broker.toml", env=_compose_env(env))
        assert config.broker.enable_controller_mode
        assert config.broker.controller_addr == "etcd:2379"
        assert config.store.broker_role == "SYNC_MASTER"
        assert config.store.flush_disk_type == "SYNC_FLUSH"
        assert config.store.in_sync_replicas == 2  # a send waits for the other replica
        assert config.store.ha_listen_host == name
        ids.add(config.broker.broker_id)
    assert ids == {1, 2}
    published = [p.split(":")[-2] for s in services.values() for p in s.get("ports", [])]
    assert len(published) == len(set(published))  # no host port twice


class _Etcd:
    """The compose's etcd command with Debian's etcd binary on 127.0.0.1 ports."""

    def __init__(self, root: Path) -> None:
        binary = shutil.which("etcd")
        if binary is None:
            raise RuntimeError("etcd is not installed: run `make system-deps` (Debian etcd-server)")
        client, peer = free_port(), free_port()
        self.endpoint = f"127.0.0.1:{client}"
        swaps = {"0.0.0.0:2379": self.endpoint, "etcd:2379": self.endpoint,
                 "0.0.0.0:2380": f"127.0.0.1:{peer}", "etcd:2380": f"127.0.0.1:{peer}",
                 "/var/lib/etcd": str(root / "data")}  # fmt: skip
        cmd = [binary]
        for arg in HA["services"]["etcd"]["command"][1:]:
            for old, new in swaps.items():
                arg = arg.replace(old, new)
            cmd.append(arg)
        root.mkdir(parents=True)
        with open(root / "etcd.log", "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            assert self.proc.poll() is None, (root / "etcd.log").read_text()
            try:
                with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=1) as reply:
                    if b'"true"' in reply.read():
                        return
            except OSError:
                pass
            assert time.monotonic() < deadline, "etcd not healthy"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.mark.slow
def test_the_ha_compose_topology_runs_as_processes_and_fails_over(
    daemons: Daemons, tmp_path: Path
) -> None:
    secrets_dir = tmp_path / "secrets"
    subprocess.run(["make", "-s", "deploy-secrets", f"SECRETS_DIR={secrets_dir}"],
                   cwd=REPO_ROOT, check=True, capture_output=True, timeout=120)  # fmt: skip
    mounted = {
        f"/run/secrets/{name}": str(secrets_dir / Path(spec["file"]).name)
        for name, spec in HA["secrets"].items()
    }
    keys = dict(line.split("=", 1) for line in (secrets_dir / "admin.env").read_text().split())
    ca_file = mounted["/run/secrets/wharf_tls_cert"]
    secure: dict[str, Any] = {"ca_file": ca_file, "access_key": keys["WHARF_ACCESS_KEY"],
                              "secret_key": keys["WHARF_SECRET_KEY"]}  # fmt: skip
    namesrv_keys = {"tls": tls_config(ca_file=ca_file), "access_key": secure["access_key"],
                    "secret_key": secure["secret_key"]}  # fmt: skip
    ttl_s = int(HA["services"]["broker-a-1"]["environment"]["WHARF_CONTROLLER_HEART_BEAT_TIMEOUT_MILLS"]) / 1000  # fmt: skip
    etcd = _Etcd(tmp_path / "etcd")
    ns_env = {k: mounted.get(str(v), str(v)) for k, v in
              HA["services"]["namesrv"]["environment"].items()}  # fmt: skip
    ns = daemons.namesrv(tmp_path / "namesrv", env=ns_env, start=False)
    replicas: dict[str, BrokerProcess] = {}
    try:
        ns.start()
        for name in REPLICAS:
            env = {k: mounted.get(str(v), str(v)) for k, v in
                   HA["services"][name]["environment"].items()}  # fmt: skip
            env.update(_env_file(secrets_dir / Path(HA["services"][name]["env_file"]).name))
            env.pop("WHARF_ADVERTISED_ADDRESS")  # the harness's ephemeral port instead
            env["WHARF_NAMESRV_ADDR"] = ns.endpoint
            env["WHARF_CONTROLLER_ADDR"] = etcd.endpoint
            env["WHARF_HA_LISTEN_HOST"] = "127.0.0.1"
            env["WHARF_HA_LISTEN_PORT"] = str(free_port())
            replicas[name] = daemons.broker(tmp_path / name, env=env)

        cli = [sys.executable, "-m", "wharf.client.cli.main", "--namesrv", ns.endpoint, "--json",
               "--namesrv-tls", "--ca-file", ca_file]  # fmt: skip
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("WHARF_", "NAMESRV"))}
        run_env = {**clean, **keys}
        deadline = time.monotonic() + 20
        while True:
            listed = json.loads(subprocess.run([*cli, "cluster", "list"], capture_output=True,
                                               text=True, check=True, env=run_env).stdout)  # fmt: skip
            roles = sorted((b["broker_id"], b.get("broker_role")) for b in listed)
            sss = [b["replication"].get("sync_state_set") for b in listed if b["broker_id"] == 0]
            if (len(roles) == 2 and roles[0] == (0, "SYNC_MASTER") and roles[1][1] == "SLAVE"
                    and sss and sorted(map(int, sss[0])) == [1, 2]):  # fmt: skip
                break
            assert time.monotonic() < deadline, listed
            time.sleep(0.3)
        made = subprocess.run([*cli, "topic", "create", "orders", "--cluster", "DefaultCluster",
                               "--queues", "2"], capture_output=True, text=True, env=run_env)  # fmt: skip
        assert made.returncode == 0, made.stderr

        async def master(other_than: str = "", within_s: float = 10) -> str:
            """The replica name the NameServer routes broker-a's writes to."""
            by_endpoint = {b.endpoint: n for n, b in replicas.items()}
            deadline = time.monotonic() + within_s
            async with NameServerClient(ns.endpoint, **namesrv_keys) as namesrv:
                while True:
                    for b in await namesrv.cluster_info():
                        name = by_endpoint.get(b.address, "")
                        alive = name and replicas[name].proc.poll() is None  # type: ignore[union-attr]
                        if b.broker_id == 0 and alive and name != other_than:
                            return name
                    assert time.monotonic() < deadline, "broker-a has no master"
                    await asyncio.sleep(0.1)

        async def send(prefix: str) -> list[bytes]:
            async with Producer(
                namesrv=ns.endpoint, namesrv_tls=True, send_timeout=10, **secure
            ) as producer:
                sent = [b"%s-%d" % (prefix.encode(), i) for i in range(20)]
                for body in sent:
                    assert (await producer.send("orders", body)).status == SendStatus.SEND_OK
            return sent

        async def sync_state_set(name: str) -> list[int]:
            async with Admin(replicas[name].endpoint, **secure) as admin:
                return sorted((await admin.broker_status()).replication.sync_state_set)

        async def scenario() -> None:
            deadline = time.monotonic() + 10  # the NameServer learns the topic
            async with NameServerClient(ns.endpoint, **namesrv_keys) as namesrv:
                while True:
                    try:
                        await namesrv.query_route("orders")
                        break
                    except Exception:
                        assert time.monotonic() < deadline
                        await asyncio.sleep(0.2)
            old = await master()
            acked = await send("before")
            killed_at = time.monotonic()
            replicas[old].kill()
            new = await master(other_than=old, within_s=ttl_s + 10)
            took = time.monotonic() - killed_at
            assert took < ttl_s + 3, f"a new master after {took:.1f} s (lease {ttl_s} s)"
            acked += await send("after")
            async with PullConsumer(replicas[new].endpoint, "audit", **secure) as reader:
                read = [m.body for q in await reader.queues("orders")
                        for m in (await reader.pull(q, 0, max_messages=100)).messages]  # fmt: skip
            assert sorted(read) == sorted(acked)  # every acknowledged message, once
            await asyncio.to_thread(replicas[old].start)  # rejoins as the new master's replica
            deadline = time.monotonic() + 30
            while await sync_state_set(new) != [1, 2]:
                assert time.monotonic() < deadline, "the restarted replica never caught up"
                await asyncio.sleep(0.2)

        asyncio.run(scenario())
    finally:
        for process in [*replicas.values(), ns]:
            process.kill()
        etcd.stop()
