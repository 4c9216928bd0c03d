"""The OFFICIAL RocketMQ clients over TLS against the real daemon with tlsEnable: the Python
client (5.1.2, .venv-rmq/, ``tls_enable=True``) and the Node.js client (1.0.8, ``sslEnabled:
true``) trust the system roots only, so the tests point GRPC_DEFAULT_SSL_ROOTS_FILE_PATH at the
broker's generated development certificate (what an operator does with a private CA). A
Producer sends, a SimpleConsumer receives and acks, and Wharf's own SDK reads the same messages
back over TLS."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from wharf.client import Admin, PullConsumer
from wharf.client.consumer.pull import PullStatus

from tests.broker.v2.test_official_client import RMQ_PYTHON
from tests.harness import Daemons

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).with_name("rmq_tls_script.py")
NODE_DIR = Path(__file__).with_name("node")


def run_tls_client(
    endpoint: str, ca: Path, home: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    if not RMQ_PYTHON.exists():
        pytest.skip("the official client's venv is missing: run `make rmq-client`")
    home.mkdir(exist_ok=True)  # the client logs to ~/logs/rocketmq_python/
    env = {**os.environ, "HOME": str(home), "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(ca)}
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [str(RMQ_PYTHON), str(SCRIPT), endpoint, *args],
        capture_output=True, text=True, env=env, timeout=90, check=False,
    )  # fmt: skip


async def test_official_python_client_sends_and_receives_over_tls(
    daemons: Daemons, tmp_path: Path
) -> None:
    settings = {"tlsEnable": True, "defaultTopicQueueNums": 4}
    with daemons.broker(tmp_path / "broker", settings=settings) as broker:
        ca = broker.store_dir / "config" / "tls" / "broker.crt"
        proc = run_tls_client(broker.endpoint, ca, tmp_path / "home", "TlsTopic", "tls-group")
        logs = "\n".join(
            p.read_text() for p in (tmp_path / "home").glob("logs/rocketmq_python/*.log")
        )
        assert proc.returncode == 0, (
            f"{proc.stdout}\n{proc.stderr}\n--- client log ---\n{logs[-4000:]}"
        )
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert len(out["sent"]) == 5
        assert sorted(m["id"] for m in out["received"]) == sorted(out["sent"])
        assert {m["body"] for m in out["received"]} == {f"tls-{i}" for i in range(5)}
        assert {m["tag"] for m in out["received"]} == {"TLS"}

        assert sorted(await sdk_read(broker.endpoint, ca, "TlsTopic")) == sorted(out["sent"])


async def sdk_read(endpoint: str, ca: Path, topic: str) -> list[str]:
    got = []
    async with PullConsumer(endpoint, "check", ca_file=str(ca)) as consumer:
        for queue in await consumer.queues(topic):
            result = await consumer.pull(queue, 0, max_messages=100)
            if result.status == PullStatus.FOUND:
                got.extend(m.msg_id for m in result.messages)
    return got


def run_node_tls(
    node: str, endpoint: str, ca: Path, home: Path
) -> subprocess.CompletedProcess[str]:
    home.mkdir()
    return subprocess.run(
        [node, str(NODE_DIR / "tls.js"), endpoint, "NodeTls", "node-tls-group"],
        capture_output=True, text=True, cwd=NODE_DIR, timeout=100, check=False,
        env={**os.environ, "HOME": str(home), "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(ca)},
    )  # fmt: skip


async def test_official_node_client_sends_and_receives_over_tls(
    daemons: Daemons, tmp_path: Path
) -> None:
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "rocketmq-client-nodejs").is_dir():
        pytest.fail("the Node.js client is missing: install node and npm, run `make rmq-client`")
    settings = {"tlsEnable": True, "defaultTopicQueueNums": 4}
    with daemons.broker(tmp_path / "broker", settings=settings) as broker:
        ca = broker.store_dir / "config" / "tls" / "broker.crt"
        async with Admin(broker.endpoint, ca_file=str(ca)) as admin:
            await admin.create_topic("NodeTls", queue_nums=4)
        proc = run_node_tls(node, broker.endpoint, ca, tmp_path / "home")
        assert proc.returncode == 0, f"{proc.stdout}\n--- client log ---\n{proc.stderr[-6000:]}"
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert len(out["sent"]) == 4
        assert sorted(m["id"] for m in out["received"]) == sorted(out["sent"])
        assert {m["body"] for m in out["received"]} == {f"node-tls-{i}" for i in range(4)}
        assert sorted(await sdk_read(broker.endpoint, ca, "NodeTls")) == sorted(out["sent"])
