"""deploy/docker-compose.cluster.yml without Docker: its structure, then the same topology as
processes on 127.0.0.1 -- two NameServers and the two brokers with the compose's environment
(secrets from `make deploy-secrets`, /run/secrets paths rebased, the NameServer addresses
replaced by the processes' ports): both brokers register over TLS+ACL-protected groups, a topic
created with --cluster spans them, and the SDK's namesrv= producer sends to both."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from wharf.client import Producer, PullConsumer

from tests.harness import REPO_ROOT, BrokerProcess, Daemons
from tests.ops.deploy_files import DEPLOY, load_yaml

CLUSTER = load_yaml(DEPLOY / "docker-compose.cluster.yml")
BROKERS = ("broker-a", "broker-b")
SLAVE = "broker-a-s"  # broker-a's replica
NAMESRVS = ("namesrv-1", "namesrv-2")


def test_cluster_compose_runs_two_name_servers_and_two_secured_broker_groups() -> None:
    services = CLUSTER["services"]
    assert set(services) == {*NAMESRVS, *BROKERS, SLAVE, "console"}
    slave = services[SLAVE]["environment"]
    assert slave["WHARF_BROKER_ROLE"] == "SLAVE" and slave["WHARF_BROKER_NAME"] == "broker-a"
    master_ha = services["broker-a"]["environment"]["WHARF_HA_LISTEN_PORT"]
    assert slave["WHARF_HA_MASTER_ADDRESS"] == f"broker-a:{master_ha}"
    assert not any(p.endswith(f":{master_ha}") for p in services["broker-a"]["ports"])
    # Replication over TLS (the slave trusting the broker certificate), with the replication
    # account (aclEnable on the master refuses any other replica).
    assert services["broker-a"]["environment"]["WHARF_HA_TLS_ENABLE"] == "true"
    assert slave["WHARF_HA_TLS_ENABLE"] == "true"
    assert slave["WHARF_HA_TLS_CA_FILE"] == "/run/secrets/wharf_tls_cert"
    assert services[SLAVE]["env_file"] == "./secrets/broker.env"
    addr = services["broker-a"]["environment"]["WHARF_NAMESRV_ADDR"].split(";")
    assert addr == [f"{name}:9876" for name in NAMESRVS]  # every broker registers with both
    for name in NAMESRVS:
        service = services[name]
        assert service["entrypoint"] == ["wharf-namesrv"]
        assert "127.0.0.1:9876" in service["healthcheck"]["test"]
        assert all(p.startswith("127.0.0.1:") for p in service["ports"])  # loopback only
    names = set()
    for name in (*BROKERS, SLAVE):
        env = services[name]["environment"]
        names.add(name if name == SLAVE else env["WHARF_BROKER_NAME"])
        assert env["WHARF_TLS_ENABLE"] == "true" and env["WHARF_ACL_ENABLE"] == "true"
        for secret in services[name]["secrets"]:
            assert (DEPLOY / CLUSTER["secrets"][secret]["file"]).parent.name == "secrets"
        assert {"condition": "service_healthy"} in services[name]["depends_on"].values()
    assert names == {*BROKERS, SLAVE}
    published = [p.split(":")[-2] for s in services.values() for p in s.get("ports", [])]
    assert len(published) == len(set(published))  # no host port twice


def test_the_cluster_compose_topology_runs_as_processes(daemons: Daemons, tmp_path: Path) -> None:
    secrets_dir = tmp_path / "secrets"
    subprocess.run(["make", "-s", "deploy-secrets", f"SECRETS_DIR={secrets_dir}"],
                   cwd=REPO_ROOT, check=True, capture_output=True, timeout=120)  # fmt: skip
    mounted = {
        f"/run/secrets/{name}": str(secrets_dir / Path(spec["file"]).name)
        for name, spec in CLUSTER["secrets"].items()
    }
    keys = dict(line.split("=", 1) for line in (secrets_dir / "admin.env").read_text().split())
    ca_file = mounted["/run/secrets/wharf_tls_cert"]
    names = [
        daemons.namesrv(tmp_path / n, env={k: mounted.get(str(v), str(v)) for k, v in
                                         CLUSTER["services"][n]["environment"].items()}, start=False)
        for n in NAMESRVS
    ]  # fmt: skip
    brokers: list[BrokerProcess] = []
    try:
        for ns in names:
            ns.start()
        addr = ";".join(ns.endpoint for ns in names)
        for name in (*BROKERS, SLAVE):
            env = {k: mounted.get(str(v), str(v)) for k, v in
                   CLUSTER["services"][name]["environment"].items()}  # fmt: skip
            if "env_file" in CLUSTER["services"][name]:
                ha_env = secrets_dir / Path(CLUSTER["services"][name]["env_file"]).name
                env.update(line.split("=", 1) for line in ha_env.read_text().split())
            env.pop("WHARF_ADVERTISED_ADDRESS")  # the harness's ephemeral port instead
            env["WHARF_NAMESRV_ADDR"] = addr
            if "WHARF_HA_LISTEN_PORT" in env:
                env["WHARF_HA_LISTEN_PORT"] = "0"
            if "WHARF_HA_MASTER_ADDRESS" in env:
                env["WHARF_HA_MASTER_ADDRESS"] = brokers[0].ha_endpoint  # broker-a's
            brokers.append(daemons.broker(tmp_path / name, env=env))

        cli = [sys.executable, "-m", "wharf.client.cli.main", "--namesrv", addr, "--json",
               "--namesrv-tls", "--ca-file", ca_file]  # fmt: skip
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("WHARF_", "NAMESRV"))}
        run_env = {**clean, **keys}
        deadline = time.monotonic() + 15
        while True:
            listed = json.loads(subprocess.run([*cli, "cluster", "list"], capture_output=True,
                                               text=True, check=True, env=run_env).stdout)  # fmt: skip
            if len(listed) == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert sorted((b["broker_name"], b["broker_role"]) for b in listed) == [
            ("broker-a", "ASYNC_MASTER"),
            ("broker-a", "SLAVE"),
            ("broker-b", "ASYNC_MASTER"),
        ]
        made = subprocess.run([*cli, "topic", "create", "orders", "--cluster", "DefaultCluster",
                               "--queues", "2"], capture_output=True, text=True, env=run_env)  # fmt: skip
        assert made.returncode == 0, made.stderr
        time.sleep(1.5)  # the NameServers learn the topic within a heartbeat

        async def send() -> list[int]:
            async with Producer(namesrv=addr, namesrv_tls=True, ca_file=ca_file,
                                access_key=keys["WHARF_ACCESS_KEY"],
                                secret_key=keys["WHARF_SECRET_KEY"]) as producer:  # fmt: skip
                results = [await producer.send("orders", f"o-{i}".encode()) for i in range(20)]
            return [int(r.offset_msg_id[8:16], 16) for r in results]  # the store host's port

        ports = asyncio.run(send())
        masters = [int(b.endpoint.rpartition(":")[2]) for b in brokers[:2]]
        assert set(ports) == set(masters)  # both groups

        async def replicated() -> int:  # broker-a's messages reach its slave (TLS + ACL reads)
            async with PullConsumer(brokers[2].endpoint, "check", ca_file=ca_file,
                                    access_key=keys["WHARF_ACCESS_KEY"],
                                    secret_key=keys["WHARF_SECRET_KEY"]) as reader:  # fmt: skip
                return sum([len((await reader.pull(q, 0, max_messages=50)).messages)
                            for q in await reader.queues("orders")])  # fmt: skip

        on_a = asyncio.run(replicated())
        deadline = time.monotonic() + 10
        while on_a != ports.count(masters[0]) and time.monotonic() < deadline:
            time.sleep(0.2)
            on_a = asyncio.run(replicated())
        assert on_a == ports.count(masters[0])
    finally:
        for process in [*brokers, *names]:
            process.stop()
