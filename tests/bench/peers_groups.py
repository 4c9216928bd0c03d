"""Wharf as N broker groups on one host, for ``peers.py --wharf-groups N``: one
``wharf-namesrv`` and N brokers, each its own group (``broker-a``, ``broker-b``, ...; a master,
broker id 0) of one cluster, with its own store directory and ports, registered with the
NameServer. One broker is one event loop (one core); N groups are N processes the kernel
spreads over the cores, each serving its share of a topic's queues (broker/README.md, "Using
N cores").

- Started together (the NameServer and every broker spawned at once, as the RocketMQ path
  spawns its NameServer and broker), timed until every group serves: each broker's ready file,
  the NameServer's cluster info (GET_BROKER_CLUSTER_INFO, what 4.x clients route by) listing
  all N groups, and for ``kafka`` each broker's Metadata listing N nodes, for ``rmq5`` each
  broker's gRPC port open.
- Topics: the total queue count of one broker's topic (8), split over the groups (8 over 2:
  4 each; a 1-partition topic on the first group), not 8 per group: the clients then see the
  same queues as against one broker or a peer (the 4.x producer rotates over 8, Kafka's
  producer batches per partition over 8), and only the number of serving processes changes.
  Made with UPDATE_AND_CREATE_TOPIC at each group's master, as ``mqadmin updateTopic -c``
  does (Kafka's CreateTopics makes a topic on the receiving group only and refuses a name
  another group holds), then waited for until the NameServer routes every queue (a broker
  registers again within ~50 ms of a topic change).
- Clients: 4.x get the NameServer's remoting port, Kafka a bootstrap list of every broker,
  5.x one broker's gRPC port (its QueryRoute lists every group's queues, each with its own
  group's endpoint, so the client sends to every group).
- ``pids``: the NameServer's and every broker's, so CPU and RSS are summed over all of them.
- Stopped by pid: the brokers first (they unregister), then the NameServer.
"""

from __future__ import annotations

import functools
import string
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.bench.peers_probes import (
    create_rmq_topic,
    kafka_serving,
    port_open,
    remoting_groups,
    routed_queues,
    stored_messages,
    wait_until,
)
from tests.harness import BrokerProcess, NamesrvProcess, bench_broker, free_port

CLUSTER = "DefaultCluster"
STOP_GRACE_S = 60.0


@dataclass
class Groups:
    """A running NameServer and its N broker groups."""

    namesrv: NamesrvProcess
    brokers: dict[str, BrokerProcess]  # by broker name, in name order
    start_seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def pids(self) -> dict[str, int]:
        return {"namesrv": self.namesrv.pid, **{n: b.pid for n, b in self.brokers.items()}}

    @property
    def kafka(self) -> str:
        return ",".join(b.kafka_endpoint for b in self.brokers.values())

    @property
    def remoting(self) -> dict[str, str]:
        return {n: b.remoting_endpoint for n, b in self.brokers.items()}

    def stop(self) -> None:
        """Every broker, then the NameServer, each by its pid; one that fails to stop does not
        keep the others running."""
        for process in [*self.brokers.values(), self.namesrv]:
            try:
                process.stop(STOP_GRACE_S)
            except Exception as exc:  # stop() SIGKILLs it after the grace, then raises
                self.errors.append(f"{process.log_path.parent.name}: {exc!r}")


def broker_names(n: int) -> list[str]:
    """broker-a, broker-b, ... (name order is Kafka's partition order: cluster.py)."""
    if not 1 <= n <= len(string.ascii_lowercase):
        raise ValueError(f"--wharf-groups {n}: 1 to 26")
    return [f"broker-{c}" for c in string.ascii_lowercase[:n]]


def start_groups(root: Path, n: int, settings: dict[str, Any], path: str) -> Groups:
    """The NameServer and ``n`` brokers with ``settings`` (the single broker's), until every
    group serves ``path`` (module docstring)."""
    ns_port = free_port()
    namesrv = NamesrvProcess(
        root / "namesrv",
        settings={"remotingListen": f"127.0.0.1:{free_port()}", "logLevel": "WARNING"},
        port=ns_port,
    )  # fmt: skip
    namesrv.ready_timeout = 120.0
    group = {"namesrvAddr": f"127.0.0.1:{ns_port}", "brokerClusterName": CLUSTER, "brokerId": 0}
    brokers = {
        name: bench_broker(
            root / name, {**settings, **group, "brokerName": name}, ready_timeout=120
        )
        for name in broker_names(n)
    }
    groups = Groups(namesrv, brokers)
    started = time.monotonic()
    processes: list[BrokerProcess] = [namesrv, *brokers.values()]
    try:
        # Spawned at once: start() blocks until the process's ready file (~1-3 s of imports).
        with ThreadPoolExecutor(len(processes)) as pool:
            for future in [pool.submit(p.start) for p in processes]:
                future.result()
        wait_until(lambda: _serving(groups, path), 60, "wharf groups",
                   lambda: all(p.running for p in processes))  # fmt: skip
    except BaseException:
        for process in processes:
            if process.proc is not None:
                process.kill()
        raise
    groups.start_seconds = time.monotonic() - started
    return groups


def _serving(groups: Groups, path: str) -> bool:
    n = len(groups.brokers)
    if remoting_groups(groups.namesrv.remoting_endpoint) < n:
        return False
    if path == "kafka":
        return all(kafka_serving(b.kafka_endpoint, n) for b in groups.brokers.values())
    if path == "rmq5":
        return all(port_open(b.endpoint) for b in groups.brokers.values())
    return True


def shares(total: int, n: int) -> list[int]:
    """``total`` queues over ``n`` groups in name order, the first ones taking the remainder
    (8 over 2: [4, 4]; 1 over 2: [1, 0]; 8 over 3: [3, 3, 2])."""
    return [total // n + (1 if i < total % n else 0) for i in range(n)]


def create_topics(groups: Groups, topics: dict[str, int],
                  alive: Callable[[], bool] = lambda: True) -> None:  # fmt: skip
    """Each topic's queues split over the groups (``shares``), then every queue routed by the
    NameServer."""
    masters = list(groups.remoting.values())
    for topic, total in topics.items():
        for address, queues in zip(masters, shares(total, len(masters)), strict=True):
            if queues:
                create_rmq_topic(address, topic, queues)
    namesrv = groups.namesrv.remoting_endpoint
    for topic, total in topics.items():
        wait_until(functools.partial(_routed, namesrv, topic, total), 30, f"route of {topic}",
                   alive)  # fmt: skip


def stored_each(groups: Groups, topic: str, total: int) -> dict[str, int]:
    """The messages each group holds of ``topic`` (made by ``create_topics`` with ``total``
    queues): the proof that the clients spread over every group."""
    masters = groups.remoting
    return {
        name: stored_messages(address, topic, queues) if queues else 0
        for (name, address), queues in zip(
            masters.items(), shares(total, len(masters)), strict=True
        )
    }


def _routed(namesrv: str, topic: str, queues: int) -> bool:
    return routed_queues(namesrv, topic) == queues
