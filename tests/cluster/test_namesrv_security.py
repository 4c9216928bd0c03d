"""A NameServer with aclEnable and tlsEnable, as processes on 127.0.0.1: a broker registers
over TLS signed with an admin account (one signed by a non-admin is refused and never listed);
clients need TLS and a signature (unsigned: UNAUTHENTICATED; plaintext: no connection) and see
only the topics their account may use (QueryRoute / WatchRoutes), from the SDK, the CLI and
the Spark connector."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from wharf.client.auth import Credentials
from wharf.client.channel import TlsConfig
from wharf.client.errors import (
    PermissionDeniedError,
    UnauthenticatedError,
    UnavailableError,
)
from wharf.client.namesrv import NameServerClient

from tests.harness import REPO_ROOT, Daemons

pytestmark = pytest.mark.slow
ADMIN = ("ns-admin", "admin-secret-1")
READER = ("reader", "reader-secret-1")
ACL = f"""
accounts:
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
  - accessKey: {READER[0]}
    secretKey: {READER[1]}
    topicPerms: ["orders=SUB"]
"""


async def _until(check, within_s: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within_s
    while not await check():
        assert time.monotonic() < deadline, "not in time"
        await asyncio.sleep(0.05)


async def test_name_server_with_acl_and_tls(daemons: Daemons, tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    cert, key = tmp_path / "ns" / "ns.crt", tmp_path / "ns" / "ns.key"
    ns = daemons.namesrv(
        tmp_path / "ns",
        {"aclEnable": True, "aclFile": str(acl), "tlsEnable": True,
         "tlsCertPath": str(cert), "tlsKeyPath": str(key)},
    )  # fmt: skip
    brokers = []
    try:
        assert cert.exists()  # the development pair, generated at start
        tls = TlsConfig(ca_pem=cert.read_bytes())
        for name, keys in (("broker-a", ADMIN), ("broker-b", READER)):
            broker = daemons.broker(
                tmp_path / name,
                settings={"namesrvAddr": ns.endpoint, "brokerClusterName": "C",
                          "brokerName": name, "namesrvAccessKey": keys[0],
                          "namesrvSecretKey": keys[1], "namesrvTlsEnable": True,
                          "namesrvTlsCaFile": str(cert)}, start=False,
            )  # fmt: skip
            brokers.append(broker.start())
        admin = brokers[0]
        from wharf.client.admin import Admin

        async with Admin(admin.endpoint) as a:
            await a.create_topic("orders", queue_nums=2)
            await a.create_topic("secret", queue_nums=2)

        async with NameServerClient(
            ns.endpoint, tls=tls, access_key=READER[0], secret_key=READER[1]
        ) as reader:

            async def registered() -> bool:
                return [b.broker_name for b in await reader.cluster_info()] == ["broker-a"]

            await _until(registered, 10)
            route = await reader.query_route("orders")
            assert set(route.groups) == {"broker-a"}
            with pytest.raises(PermissionDeniedError, match="reader"):
                await reader.query_route("secret")
            _, call = reader.watch(["orders"])  # a watch of its own topic opens
            first = await asyncio.wait_for(call.read(), 5)
            assert first.topic == "orders" and first.version > 0
            call.cancel()
            _, call = reader.watch([])  # every topic: admins only
            with pytest.raises(grpc.RpcError) as refused:
                await asyncio.wait_for(call.read(), 5)
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            await asyncio.sleep(1.0)  # broker-b (signed by a non-admin) is still refused
            assert [b.broker_name for b in await reader.cluster_info()] == ["broker-a"]

        async with NameServerClient(ns.endpoint, tls=tls, access_key="", secret_key="") as anon:
            with pytest.raises(UnauthenticatedError):
                await anon.cluster_info()
        async with NameServerClient(ns.endpoint, access_key=ADMIN[0], secret_key=ADMIN[1]) as plain:
            with pytest.raises(UnavailableError):  # a plaintext client: no TLS handshake
                await plain.cluster_info()

        # The CLI: --namesrv-tls takes --ca-file to the NameServers; the keys sign their calls.
        proc = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "wharf.client.cli.main", "--namesrv", ns.endpoint,
             "--namesrv-tls", "--ca-file", str(cert), "--json", "cluster", "list"],
            capture_output=True, text=True, cwd=REPO_ROOT, timeout=60, check=False,
            env={"PATH": "/usr/bin:/bin", "WHARF_ACCESS_KEY": READER[0],
                 "WHARF_SECRET_KEY": READER[1]},
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert [b["broker_name"] for b in json.loads(proc.stdout)] == ["broker-a"]

        # The Spark connector's cluster client.
        from wharf.client.spark.cluster_rpc import ClusterRpc

        with ClusterRpc(ns.endpoint, 5.0, Credentials(*READER), tls, namesrv_tls=True) as rpc:
            assert rpc._route("orders") == {"broker-a": admin.endpoint}
    finally:
        for broker in brokers:
            broker.kill()
        ns.kill()
