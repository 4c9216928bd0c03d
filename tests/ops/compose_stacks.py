"""The cluster and HA compose stacks under a real engine: a program beside the benchmarks.

    .venv/bin/python -m tests.ops.compose_stacks [cluster] [ha]     (root; ~4-6 min for both)

As tests/ops/test_compose_single.py does for the single broker (its own bridge-less dockerd,
images from Debian packages, host networking through the ``*.hostnet.yml`` overrides), with
the slower stacks CI does not run:

- cluster (2 NameServers, broker-a + its slave, broker-b): a topic created on the cluster
  through the NameServers; sends through them land on both groups; every message read back
  through the NameServers and from each group; broker-a's slave holds broker-a's messages.
- HA (etcd + a controller-mode group of two replicas, SYNC_MASTER + SYNC_FLUSH): the master
  stopped (SIGTERM hand-over), the other replica master, sends through the NameServer go on;
  the stopped one started again as the replica; then the new master killed with kill -9 (a
  crash: Docker restarts it) and the first one master again; every acknowledged message there.

Prints what it did and how long each step took; exits 1 on the first failed check.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.ops import docker_engine
from tests.ops.compose import Stack, build_images, make_secrets

NAMESRV = {"cluster": "localhost:29876;localhost:29877", "ha": "localhost:29876"}
BROKERS = {
    "broker-a": "localhost:28181",
    "broker-a-s": "localhost:28281",
    "broker-b": "localhost:28381",
}
REPLICAS = {"broker-a-1": "localhost:28181", "broker-a-2": "localhost:28281"}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def users(secrets: Path, namesrv: str) -> dict[str, str]:
    env = dict(os.environ, WHARF_CA_FILE=str(secrets / "broker.crt"))
    env.update(NAMESRV_ADDR=namesrv, NAMESRV_TLS="true")
    for line in (secrets / "admin.env").read_text().splitlines():
        name, _, value = line.partition("=")
        env[name] = value
    return env


def wharf(env: dict[str, str], *args: str, stdin: str | None = None, check: bool = True) -> str:
    command = [sys.executable, "-m", "wharf.client.cli.main", "--json", *args]
    done = subprocess.run(command, env=env, input=stdin, capture_output=True, text=True, timeout=90)
    if check and done.returncode != 0:
        raise AssertionError(f"wharf {' '.join(args)}: rc {done.returncode}\n{done.stderr}")
    return done.stdout if done.returncode == 0 else ""


def bodies_of(out: str) -> list[str]:
    return sorted(json.loads(line)["body"] for line in out.splitlines() if line.strip())


def direct(env: dict[str, str], endpoint: str) -> dict[str, str]:
    """The same keys and CA, dialing one broker (no NameServer)."""
    one = {k: v for k, v in env.items() if k not in ("NAMESRV_ADDR", "NAMESRV_TLS")}
    return dict(one, WHARF_ENDPOINTS=endpoint)


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.5)


def send(env: dict[str, str], topic: str, bodies: list[str]) -> None:
    wharf(env, "send", topic, stdin="\n".join(bodies) + "\n")


def cluster(env: dict[str, str], secrets: Path, work: Path) -> None:
    stack = Stack.merged(
        "wharf-cluster-ci", "docker-compose.cluster.yml", "docker-compose.cluster.hostnet.yml",
        work / "cluster.yml", env,
    )  # fmt: skip
    try:
        started = time.monotonic()
        stack.compose("up", "-d")
        stack.wait_healthy(
            "namesrv-1", "namesrv-2", "broker-a", "broker-a-s", "broker-b", "console"
        )
        log(f"cluster: up and healthy in {time.monotonic() - started:.1f} s")
        user = users(secrets, NAMESRV["cluster"])
        wharf(user, "topic", "create", "orders", "--cluster", "DefaultCluster", "--queues", "4")
        sent = [f"order-{i}" for i in range(40)]
        send(user, "orders", sent)
        everything = wharf(user, "consume", "orders", "--from", "beginning", "--max", "40")
        assert bodies_of(everything) == sorted(sent), everything
        per_group = {
            name: bodies_of(wharf(direct(user, BROKERS[name]), "consume", "orders",
                                  "--from", "beginning", "--max", "40"))
            for name in ("broker-a", "broker-b")
        }  # fmt: skip
        assert all(per_group.values()), per_group  # the NameServer spread them over both groups
        assert sorted(per_group["broker-a"] + per_group["broker-b"]) == sorted(sent)
        slave = direct(user, BROKERS["broker-a-s"])
        wait_for(
            lambda: bodies_of(wharf(slave, "consume", "orders", "--from", "beginning", "--max", "40"))
            == per_group["broker-a"],
            30, "broker-a's slave holding broker-a's messages",
        )  # fmt: skip
        log(f"cluster: 40 sent through the NameServers, {len(per_group['broker-a'])} on broker-a "
            f"(and its slave), {len(per_group['broker-b'])} on broker-b; all read back")  # fmt: skip
    finally:
        stack.down()


def master_of(env: dict[str, str]) -> str | None:
    """The replica the NameServer lists as broker-a's master (id 0), by its service name."""
    out = wharf(env, "cluster", "list", check=False)
    for row in json.loads(out or "[]"):
        if row.get("broker_id", row.get("brokerId", -1)) == 0:
            address = row.get("address", "")
            return next((n for n, a in REPLICAS.items() if a.split(":")[1] in address), None)
    return None


def ha(env: dict[str, str], secrets: Path, work: Path) -> None:
    env = dict(env, WHARF_ETCD_IMAGE="wharf/etcd:debian")
    stack = Stack.merged(
        "wharf-ha-ci",
        "docker-compose.ha.yml",
        "docker-compose.ha.hostnet.yml",
        work / "ha.yml",
        env,
    )
    try:
        started = time.monotonic()
        stack.compose("up", "-d")
        stack.wait_healthy("namesrv", "etcd", "broker-a-1", "broker-a-2")
        user = users(secrets, NAMESRV["ha"])
        first = wait_for(lambda: master_of(user), 60, "a master elected")
        log(f"ha: up, {first} master, in {time.monotonic() - started:.1f} s")
        wharf(user, "topic", "create", "orders", "--cluster", "DefaultCluster", "--queues", "4")
        acked = [f"before-{i}" for i in range(30)]
        send(user, "orders", acked)

        other = next(n for n in REPLICAS if n != first)
        started = time.monotonic()
        stack.compose("stop", first)  # SIGTERM: the master hands over before it exits
        wait_for(lambda: master_of(user) == other, 30, f"{other} master after stop of {first}")
        log(f"ha: stop {first}: {other} master after {time.monotonic() - started:.1f} s")
        more = [f"after-stop-{i}" for i in range(10)]
        wait_for(lambda: wharf(user, "send", "orders", more[0], check=False), 30, "sends resume")
        send(user, "orders", more[1:])
        acked += more
        stack.compose("start", first)
        stack.wait_healthy(first)

        started = time.monotonic()
        os.kill(stack.inspect(other)["State"]["Pid"], signal.SIGKILL)  # a crash of the master
        wait_for(lambda: master_of(user) == first, 60, f"{first} master after kill -9 of {other}")
        log(f"ha: kill -9 {other}: {first} master after {time.monotonic() - started:.1f} s")
        last = [f"after-kill-{i}" for i in range(10)]
        wait_for(lambda: wharf(user, "send", "orders", last[0], check=False), 30, "sends resume")
        send(user, "orders", last[1:])
        acked += last
        stack.wait_healthy(other, timeout=120)  # Docker's restart policy brought it back
        got = wharf(user, "consume", "orders", "--from", "beginning", "--max", str(len(acked)))
        assert bodies_of(got) == sorted(acked), (len(bodies_of(got)), len(acked))
        log(f"ha: all {len(acked)} acknowledged messages read back; {other} restarted by Docker")
    finally:
        stack.down()


def main(argv: list[str]) -> int:
    stacks = argv or ["cluster", "ha"]
    with docker_engine.engine() as env, tempfile.TemporaryDirectory() as work:
        log(f"images (make images): {build_images(env, 'images'):.1f} s")
        secrets = make_secrets(env)
        for name in stacks:
            {"cluster": cluster, "ha": ha}[name](env, secrets, Path(work))
    log("no private interface before, during or after: " + str(docker_engine.private_interfaces()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
