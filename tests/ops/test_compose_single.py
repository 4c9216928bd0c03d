"""The single-broker compose stack under a real engine, used as a user uses it.

Images built with no registry (``make images``: Debian-made bases, the host's wheelhouse), the
stack of deploy/docker-compose.yml started by Debian's docker-compose 1.29 with host networking
(deploy/docker-compose.hostnet.yml) on a ``dockerd`` of the test's own that has no bridge. Then,
from the host: ``wharf send`` / ``wharf consume`` over TLS with the ACL keys of admin.env,
``wharf-probe``, Prometheus seeing the broker's target up, the console through its login, a
``stop`` (SIGTERM drain: a parked pull answered, exit 0) and ``start`` with every message and
committed offset kept, and a ``kill -9`` of the broker process that Docker's restart policy
answers with nothing acknowledged lost. No private (bridge) address exists before or after.

Marked ``docker``: it needs root and Debian's packages (installed when missing); ``make test``
runs it on its own after the rest (~5 min on 2 cores from nothing, ~2 min with cached images).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from wharf.client import PullConsumer

from tests.ops import docker_engine
from tests.ops.compose import DEPLOY, Stack, build_images, make_secrets

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

GRPC = "localhost:28081"
PROMETHEUS = "http://127.0.0.1:29090"
CONSOLE = "http://127.0.0.1:28082"
TOPIC = "compose-orders"
GROUP = "compose-billing"


@pytest.fixture(scope="module")
def engine() -> Iterator[dict[str, str]]:
    if os.geteuid() != 0:
        pytest.skip("starts its own dockerd: needs root")
    try:
        with docker_engine.engine() as env:
            yield env
    except docker_engine.EngineUnavailable as why:
        pytest.skip(str(why))


def client_env(secrets: Path) -> dict[str, str]:
    """What a user exports from the host: the endpoint, the CA and admin.env's keys."""
    env = dict(os.environ, WHARF_ENDPOINTS=GRPC, WHARF_CA_FILE=str(secrets / "broker.crt"))
    for line in (secrets / "admin.env").read_text().splitlines():
        name, _, value = line.partition("=")
        env[name] = value
    return env


def wharf(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    command = [sys.executable, "-m", "wharf.client.cli.main", "--json", *args]
    done = subprocess.run(command, env=env, input=stdin, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"wharf {' '.join(args)}: {done.returncode}\n{done.stderr}"
    return done.stdout


def consumed(env: dict[str, str], *args: str) -> list[str]:
    out = wharf(env, "consume", TOPIC, *args)
    return sorted(json.loads(line)["body"] for line in out.splitlines() if line.strip())


def http_get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def wait_for(check, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
            if value:
                return value
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.5)


def prometheus_sees_the_broker_up() -> bool:
    query = urllib.parse.quote('up{job="wharf"}')
    status, body = http_get(f"{PROMETHEUS}/api/v1/query?query={query}")
    results = json.loads(body)["data"]["result"] if status == 200 else []
    return bool(results) and results[0]["value"][1] == "1"


async def parked_pull_during(stop: subprocess.Popen[str], env: dict[str, str]) -> int:
    """A pull parked at the queue's end is answered (empty) by the draining broker."""
    keys = {"access_key": env["WHARF_ACCESS_KEY"], "secret_key": env["WHARF_SECRET_KEY"]}
    async with PullConsumer(GRPC, GROUP, ca_file=env["WHARF_CA_FILE"], **keys) as puller:
        queue = (await puller.queues(TOPIC))[0]
        end = (await puller.pull(queue, 0, max_messages=1000)).max_offset
        pull = asyncio.ensure_future(puller.pull(queue, end, max_wait_ms=20_000))
        await asyncio.sleep(1.0)
        stop.stdin.close()  # type: ignore[union-attr]  # the go signal: stop the broker now
        result = await asyncio.wait_for(pull, 15)
        return len(result.messages)


def test_single_stack_serves_drains_restarts_and_keeps_everything(
    engine: dict[str, str], tmp_path: Path
) -> None:
    assert docker_engine.private_interfaces() == {}
    seconds = {"images": build_images(engine, "images")}
    secrets = make_secrets(engine)
    env = dict(engine, WHARF_PROMETHEUS_IMAGE="wharf/prometheus:debian")
    stack = Stack.merged(
        "wharf-ci", "docker-compose.yml", "docker-compose.hostnet.yml", tmp_path / "stack.yml", env
    )
    try:
        started = time.monotonic()
        stack.compose("up", "-d")
        stack.wait_healthy("broker", "console", "prometheus")
        seconds["up to healthy"] = time.monotonic() - started
        users = client_env(secrets)

        # Send and consume over TLS with the ACL keys (auto-create is on in broker.toml).
        bodies = [f"order-{i}" for i in range(20)]
        wharf(users, "send", TOPIC, stdin="\n".join(bodies[:10]) + "\n")
        assert consumed(users, "--from", "beginning", "--max", "10") == sorted(bodies[:10])
        wharf(
            users,
            "consume",
            TOPIC,
            "--group",
            GROUP,
            "--from",
            "beginning",
            "--max",
            "10",
            "--commit",
        )
        unsigned = {
            k: v
            for k, v in users.items()
            if not k.startswith("WHARF_") or k in ("WHARF_ENDPOINTS", "WHARF_CA_FILE")
        }
        refused = subprocess.run(
            [sys.executable, "-m", "wharf.client.cli.main", "topic", "list"],
            env=unsigned, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert refused.returncode != 0  # no keys, no access (ACL on)

        probe = subprocess.run(
            [sys.executable, "-m", "wharf.broker.kit.probe", "--endpoint", GRPC,
             "--ca-file", str(secrets / "broker.crt"), "--timeout", "5"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert probe.returncode == 0 and "SERVING" in probe.stdout, probe.stdout + probe.stderr

        wait_for(prometheus_sees_the_broker_up, 60, "Prometheus scraping the broker")
        token = (secrets / "console_token").read_text().strip()
        assert http_get(f"{CONSOLE}/")[0] == 401
        login = urllib.request.Request(  # the login form's POST (same-origin)
            f"{CONSOLE}/login", data=urllib.parse.urlencode({"token": token}).encode(),
            headers={"Origin": CONSOLE},
        )  # fmt: skip
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        with opener.open(login, timeout=10) as page:  # 303 to / with the session cookie
            assert page.status == 200 and "broker-a" in page.read().decode()

        # The rest of the messages, then a graceful stop with a pull parked, then start.
        wharf(users, "send", TOPIC, stdin="\n".join(bodies[10:]) + "\n")
        stopper = subprocess.Popen(
            ["sh", "-c", f"read _; exec docker-compose -p {stack.project} -f {stack.file} stop broker"],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        assert asyncio.run(parked_pull_during(stopper, users)) == 0
        stopper.wait(60)
        state = stack.inspect("broker")["State"]
        assert (state["Status"], state["ExitCode"]) == ("exited", 0), state
        assert "answered 1 parked pulls" in stack.logs("broker")
        started = time.monotonic()
        stack.compose("start", "broker")
        stack.wait_healthy("broker")
        seconds["start to healthy"] = time.monotonic() - started
        assert consumed(users, "--from", "beginning", "--max", "20") == sorted(bodies)
        committed = consumed(users, "--group", GROUP, "--from", "committed", "--max", "10")
        assert committed == sorted(bodies[10:])  # the group's committed offsets survived

        # A crash: kill -9 of the broker process from the host. Docker restarts it (a stop or
        # kill through the engine would not be restarted: Docker's rule for unless-stopped).
        more = [f"after-{i}" for i in range(10)]
        wharf(users, "send", TOPIC, stdin="\n".join(more) + "\n")
        before = stack.inspect("broker")
        os.kill(before["State"]["Pid"], signal.SIGKILL)
        started = time.monotonic()
        wait_for(
            lambda: stack.inspect("broker")["RestartCount"] > before["RestartCount"], 60, "restart"
        )
        stack.wait_healthy("broker")
        seconds["kill -9 to healthy"] = time.monotonic() - started
        assert consumed(users, "--from", "beginning", "--max", "30") == sorted(bodies + more)
        print("compose single stack, seconds:", {k: round(v, 1) for k, v in seconds.items()})
    finally:
        stack.down()
    assert docker_engine.private_interfaces() == {}
    assert DEPLOY.exists()
