"""A Docker engine of the tests' own, that never makes a bridge network.

This machine (and CI's) must never get a bridge: no 172.16-31.x, 10.x or 192.168.x address may be
created or contacted. So the engine runs with ``bridge: none`` and no iptables, builds use
``--network host``, containers use host networking, and compose's default network is declared
external (``host``; compose 1.29 made ``<project>_default`` 172.17.0.1/16 once without it). Every
start and stop checks the interfaces and deletes any private address the engine made anyway.

The engine is ``dockerd`` from Debian's ``docker.io`` (installed when missing, as root), with its
own socket, pid file and exec root under ``STATE``; its data root is kept between runs
(``DATA_ROOT``) so images built once are reused. ``dockerd`` and ``containerd`` are stopped by
process id, never by name.

    python -m tests.ops.docker_engine start|stop|env
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

STATE = Path(os.environ.get("WHARF_DOCKER_STATE", "/run/wharf-docker"))
DATA_ROOT = Path(os.environ.get("WHARF_DOCKER_DATA_ROOT", "/var/lib/wharf-docker"))
SOCKET = STATE / "docker.sock"
DOCKER_HOST = f"unix://{SOCKET}"
# Debian bookworm's engine (20.10), compose 1.29, and mmdebstrap for the base images.
PACKAGES = {"dockerd": "docker.io", "docker-compose": "docker-compose", "mmdebstrap": "mmdebstrap"}
PRIVATE = [ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")]


class EngineUnavailable(RuntimeError):
    """No engine can run here (not root, no packages): the tests that need one skip."""


def private_interfaces() -> dict[str, list[str]]:
    """Interface -> its private IPv4 addresses (the ones that must never exist here)."""
    out = subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True, check=True).stdout
    found: dict[str, list[str]] = {}
    for link in json.loads(out):
        for addr in link.get("addr_info", []):
            if addr.get("family") != "inet":
                continue
            ip = ipaddress.ip_address(addr["local"])
            if any(ip in net for net in PRIVATE):
                found.setdefault(link["ifname"], []).append(f"{addr['local']}/{addr['prefixlen']}")
    return found


def remove_private_interfaces() -> dict[str, list[str]]:
    """Delete every interface holding a private address (a bridge or veth the engine made)."""
    found = private_interfaces()
    for name in found:
        subprocess.run(["ip", "link", "delete", name], capture_output=True, check=False)
    return found


def ensure_packages() -> None:
    missing = [pkg for cmd, pkg in PACKAGES.items() if shutil.which(cmd) is None]
    if not missing:
        return
    if os.geteuid() != 0:
        raise EngineUnavailable(
            f"install Debian packages: sudo apt-get install {' '.join(missing)}"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )


def docker_env() -> dict[str, str]:
    """The environment for docker / docker-compose / make against this engine."""
    # The Debian client (/usr/bin/docker) first: a newer client on PATH speaks a newer API.
    path = "/usr/bin:" + os.environ.get("PATH", "")
    return dict(os.environ, DOCKER_HOST=DOCKER_HOST, PATH=path, COMPOSE_DOCKER_CLI_BUILD="1")


def _pid(name: str) -> int | None:
    try:
        pid = int((STATE / name).read_text().strip())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def _ready(timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        probe = subprocess.run(
            ["docker", "version", "--format", "{{.Server.Version}}"],
            env=docker_env(),
            capture_output=True,
        )
        if probe.returncode == 0:
            return True
        time.sleep(0.25)
    return False


def start(timeout: float = 30.0) -> None:
    """Start dockerd (and its containerd) unless ours already runs."""
    if os.geteuid() != 0:
        raise EngineUnavailable("dockerd needs root here")
    ensure_packages()
    remove_private_interfaces()
    if _pid("dockerd.pid") is not None and _ready(5):
        remove_containers()
        return
    STATE.mkdir(parents=True, exist_ok=True)
    DATA_ROOT.mkdir(parents=True, exist_ok=True)
    config = {
        "bridge": "none",
        "iptables": False,
        "ip6tables": False,
        "ip-forward": False,
        "ip-masq": False,
        "data-root": str(DATA_ROOT),
        "exec-root": str(STATE / "exec"),
        "pidfile": str(STATE / "dockerd.pid"),
        "hosts": [DOCKER_HOST],
        "containerd": str(STATE / "containerd.sock"),
    }
    (STATE / "daemon.json").write_text(json.dumps(config, indent=1))
    # containerd of our own (its pid known), then dockerd on it: both stopped by pid.
    containerd_toml = STATE / "containerd.toml"
    containerd_toml.write_text(
        f'version = 2\nroot = "{DATA_ROOT}/containerd"\nstate = "{STATE}/containerd"\n'
        f'[grpc]\n  address = "{STATE}/containerd.sock"\n'
    )
    log = (STATE / "containerd.log").open("ab")
    containerd = subprocess.Popen(
        ["containerd", "--config", str(containerd_toml)],
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    (STATE / "containerd.pid").write_text(str(containerd.pid))
    deadline = time.monotonic() + timeout
    while not (STATE / "containerd.sock").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    log = (STATE / "dockerd.log").open("ab")
    subprocess.Popen(
        ["dockerd", "--config-file", str(STATE / "daemon.json")],
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    if not _ready(timeout):
        stop()
        raise EngineUnavailable(
            f"dockerd did not answer in {timeout:.0f} s: see {STATE}/dockerd.log"
        )
    remove_containers()
    made = remove_private_interfaces()
    if made:
        raise RuntimeError(f"the engine made private interfaces (deleted): {made}")


def remove_containers() -> None:
    """Remove every container of this engine (it is the tests' own): one a crashed run left
    would be restarted by its restart policy at the next start and hold its ports."""
    listed = subprocess.run(
        ["docker", "ps", "-aq"], env=docker_env(), capture_output=True, text=True, check=False
    )
    ids = listed.stdout.split()
    if ids:
        subprocess.run(["docker", "rm", "-f", "-v", *ids], env=docker_env(), capture_output=True)


def _stop_pid(name: str, timeout: float) -> None:
    pid = _pid(name)
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


def stop() -> None:
    """Stop dockerd, then containerd, by process id, with no container left running (a
    container's processes outlive containerd: their shims are reparented); delete any private
    interface left."""
    if _pid("dockerd.pid") is not None:
        remove_containers()
    _stop_pid("dockerd.pid", 30.0)
    _stop_pid("containerd.pid", 15.0)
    remove_private_interfaces()


@contextmanager
def engine() -> Iterator[dict[str, str]]:
    """An engine for the duration: yields the environment its clients need."""
    before = private_interfaces()
    if before:
        raise RuntimeError(f"private interfaces exist before the engine starts: {before}")
    start()
    try:
        yield docker_env()
    finally:
        stop()
        after = private_interfaces()
        if after:
            raise RuntimeError(f"private interfaces left after the engine stopped: {after}")


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "env"
    if command == "start":
        start()
    elif command == "stop":
        stop()
    print(f"export DOCKER_HOST={DOCKER_HOST}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
