"""The compose files' `console` service without Docker: its structure in docker-compose.yml and
docker-compose.cluster.yml, then the service as processes -- `make deploy-secrets` writes the
console token, a broker runs with the compose's TLS + ACL environment, and `wharf console` runs
with the compose's command and environment (secret paths rebased, the broker's address and a
free port swapped in): it refuses requests without the token and shows the broker with it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.harness import REPO_ROOT, Daemons, free_port
from tests.ops.deploy_files import DEPLOY, load_yaml

COMPOSE = load_yaml(DEPLOY / "docker-compose.yml")
CLUSTER = load_yaml(DEPLOY / "docker-compose.cluster.yml")


@pytest.mark.parametrize("compose", [COMPOSE, CLUSTER], ids=["single", "cluster"])
def test_console_service_runs_the_image_with_a_token_over_tls(compose: dict) -> None:  # type: ignore[type-arg]
    services = compose["services"]
    console = services["console"]
    broker_image = next(s["image"] for n, s in services.items() if n != "console" and "image" in s)
    assert console["image"] == broker_image  # the same image, with the console extra
    assert console["entrypoint"] == ["wharf"]
    command = console["command"]
    assert command[0] == "console"
    listen = command[command.index("--listen") + 1]
    assert listen.startswith("0.0.0.0:")  # public inside the container: the token is required
    container_port = listen.rpartition(":")[2]
    assert any(p.endswith(f":{container_port}") for p in console["ports"])
    for endpoint in command[command.index("--endpoints") + 1].split(";"):
        host, _, port = endpoint.partition(":")
        assert host in services and port == "8081", endpoint
    env = console["environment"]
    for variable, secret in (
        ("WHARF_CA_FILE", "wharf_tls_cert"),
        ("WHARF_CONSOLE_TOKEN_FILE", "wharf_console_token"),
    ):
        assert env[variable] == f"/run/secrets/{secret}"
        assert secret in console["secrets"]
        assert Path(compose["secrets"][secret]["file"]).parent.name == "secrets"
    assert console["env_file"] == ["./secrets/admin.env"]  # the ACL admin keys
    published = [p.split(":")[-2] for s in services.values() for p in s.get("ports", [])]
    assert len(published) == len(set(published))  # no host port twice


def test_the_image_builds_the_console_extra() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert '/opt/wharf/bin/pip install -q --no-cache-dir $index ".[console]"' in text


def _get(url: str, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_console_service_runs_as_processes(daemons: Daemons, tmp_path: Path) -> None:
    secrets_dir = tmp_path / "secrets"
    subprocess.run(["make", "-s", "deploy-secrets", f"SECRETS_DIR={secrets_dir}"],
                   cwd=REPO_ROOT, check=True, capture_output=True, timeout=120)  # fmt: skip
    mounted = {
        f"/run/secrets/{name}": str(secrets_dir / Path(spec["file"]).name)
        for name, spec in COMPOSE["secrets"].items()
    }
    token = Path(mounted["/run/secrets/wharf_console_token"]).read_text().strip()
    assert len(token) >= 32
    broker_env = {k: mounted.get(str(v), str(v))
                  for k, v in COMPOSE["services"]["broker"]["environment"].items()}  # fmt: skip
    broker_env.pop("WHARF_ADVERTISED_ADDRESS")
    service = COMPOSE["services"]["console"]
    keys = dict(line.split("=", 1) for line in (secrets_dir / "admin.env").read_text().split())
    with daemons.broker(tmp_path / "broker", env=broker_env) as broker:
        port = free_port()
        command = [
            broker.endpoint if part == "broker:8081" else part.replace(":8082", f":{port}")
            for part in service["command"]
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("WHARF_")}
        env.update({k: mounted.get(str(v), str(v)) for k, v in service["environment"].items()})
        env.update(keys)
        log = (tmp_path / "console.log").open("wb")
        proc = subprocess.Popen([sys.executable, "-m", "wharf.client.cli.main", *command],
                                cwd=REPO_ROOT, env=env, stdout=log, stderr=log)  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while True:
                assert proc.poll() is None, (tmp_path / "console.log").read_text()
                try:
                    status, _ = _get(f"{url}/static/console.css")
                    break
                except (urllib.error.URLError, ConnectionError):
                    assert time.monotonic() < deadline, "console did not start"
                    time.sleep(0.1)
            assert status == 200
            assert _get(url)[0] == 401
            status, page = _get(url, token)
            assert status == 200, page
            assert ">UP<" in page and broker.endpoint in page  # TLS + ACL calls succeeded
            assert _get(f"{url}/topics", token)[0] == 200
        finally:
            proc.terminate()
            proc.wait(10)
            log.close()
