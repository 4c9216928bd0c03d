"""Run deploy/'s compose stacks on the tests' own engine, with host networking.

A stack is a shipped compose file plus its host-network override (``docker-compose.hostnet.yml``
and its siblings). Compose cannot delete list entries in an override and refuses ``ports:``
with host networking, so the two are merged with ``docker-compose config`` and the published
ports dropped; the stack runs from that merged file. Debian's docker-compose 1.29 drives it
(the same files run on Compose v2: no ``name:`` key, the project given with ``-p``).
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.harness import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy"


def run(
    command: list[str], env: dict[str, str], timeout: float = 600, check: bool = True
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        command, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout
    )
    if check and done.returncode != 0:
        raise AssertionError(
            f"{' '.join(command)} -> {done.returncode}\n{done.stdout}{done.stderr}"
        )
    return done


def build_images(env: dict[str, str], *targets: str) -> float:
    """``make <targets>`` (the images, no registry): seconds taken."""
    started = time.monotonic()
    run(["make", "-s", *targets], env, timeout=1200)
    # Each source change leaves the previous build's untagged images (~1 GB a rebuild).
    run(["docker", "image", "prune", "-f"], env)
    return time.monotonic() - started


def make_secrets(env: dict[str, str]) -> Path:
    run(["make", "-s", "deploy-secrets"], env, timeout=300)
    return DEPLOY / "secrets"


@dataclass
class Stack:
    """One compose project from a merged host-network file."""

    project: str
    file: Path
    env: dict[str, str]

    @classmethod
    def merged(
        cls, project: str, shipped: str, override: str, out: Path, env: dict[str, str]
    ) -> Stack:
        config = run(
            ["docker-compose", "-f", str(DEPLOY / shipped), "-f", str(DEPLOY / override), "config"],
            env,
        ).stdout
        merged: dict[str, Any] = yaml.safe_load(config)
        for service in merged["services"].values():
            service.pop("ports", None)
            assert service.get("network_mode") == "host", service
        out.write_text(yaml.safe_dump(merged, sort_keys=False))
        return cls(project, out, env)

    def compose(self, *args: str, timeout: float = 600, check: bool = True) -> str:
        command = ["docker-compose", "-p", self.project, "-f", str(self.file), *args]
        return run(command, self.env, timeout=timeout, check=check).stdout

    def container(self, service: str) -> str:
        return self.compose("ps", "-q", service).strip()

    def inspect(self, service: str) -> dict[str, Any]:
        out = run(["docker", "inspect", self.container(service)], self.env).stdout
        state: dict[str, Any] = json.loads(out)[0]
        return state

    def wait_healthy(self, *services: str, timeout: float = 120) -> float:
        """Seconds until every service's health check passes."""
        started = time.monotonic()
        pending = set(services)
        while pending:
            for service in sorted(pending):
                state = self.inspect(service)["State"]
                health = state.get("Health", {}).get("Status")
                if health == "healthy":
                    pending.discard(service)
                elif time.monotonic() - started > timeout:
                    log = self.compose("logs", "--tail", "40", service, check=False)
                    raise AssertionError(f"{service} not healthy ({state}):\n{log}")
            time.sleep(0.5)
        return time.monotonic() - started

    def logs(self, service: str) -> str:
        return self.compose("logs", "--no-color", service, check=False)

    def down(self) -> None:
        self.compose("down", "-v", "--remove-orphans", "-t", "30", check=False)
