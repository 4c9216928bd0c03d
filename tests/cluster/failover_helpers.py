"""A controller-mode broker group as processes on 127.0.0.1, shared by the failover tests and
the failover benchmark: etcd (Debian's etcd-server), a NameServer, broker-a as two replicas
(ids 1 and 2) electing their master on etcd (SYNC_MASTER + SYNC_FLUSH by default) and, unless
``other=False``, broker-b as a plain master; a load that records what was acknowledged, and
the audit that reads everything back (every queue offset once, contiguous).

Each replica keeps its gRPC and HA ports across restarts (``free_port`` at construction), so a
restarted former master is found where it was; ``controllerHeartBeatTimeoutMills`` (the etcd
lease) is ``ttl_ms``, 3000 by default.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from wharf.client import Admin, Producer, PullConsumer, SendStatus
from wharf.client.errors import NotFoundError, WharfError
from wharf.client.namesrv import NameServerClient

from tests.harness import BrokerProcess, Daemons, EtcdProcess, free_port

TTL_MS = 3000
SMALL = {"mappedFileSizeCommitLog": 4 << 20, "maxMessageSize": 64 * 1024}


class Group:
    def __init__(
        self,
        root: Path,
        *,
        ttl_ms: int = TTL_MS,
        other: bool = True,
        settings: dict[str, Any] | None = None,
        daemons: Daemons | None = None,
    ) -> None:
        """``settings`` override the replicas' (e.g. ``flushDiskType``, store sizes); ``daemons``
        launches the NameServer and the brokers (a test's fixture; a factory of its own under
        ``root`` for the benchmarks and campaigns)."""
        self.ttl_ms = ttl_ms
        launch = daemons if daemons is not None else Daemons(root)
        self.etcd = EtcdProcess(root / "etcd").start()
        self.ns = launch.namesrv(root / "ns")
        common = {**SMALL, "namesrvAddr": self.ns.endpoint, "brokerClusterName": "C",
                  "autoCreateTopicEnable": False}  # fmt: skip
        self.replicas = {
            i: launch.broker(
                root / f"a{i}",
                {**common, "brokerName": "broker-a", "brokerId": i, "brokerRole": "SYNC_MASTER",
                 "flushDiskType": "SYNC_FLUSH", "enableControllerMode": True,
                 "controllerAddr": self.etcd.endpoint,
                 "controllerHeartBeatTimeoutMills": ttl_ms,
                 "haListenPort": 0,  # ephemeral: the master publishes it in etcd
                 "haMaxTimeSlaveNotCatchup": 60_000, **(settings or {})},
                extra_args=["--listen", f"127.0.0.1:{free_port()}"],  # the same across restarts
                start=False,
            )
            for i in (1, 2)
        }  # fmt: skip
        self.other = (
            launch.broker(root / "b", {**common, "brokerName": "broker-b"}, start=False)
            if other
            else None
        )
        for process in self.brokers():
            process.start()

    def brokers(self) -> list[BrokerProcess]:
        return [*self.replicas.values(), *([self.other] if self.other else [])]

    def processes(self) -> list[Any]:
        return [*self.brokers(), self.ns, self.etcd]

    def kill_all(self) -> None:
        for process in self.processes():
            if process.proc is not None and process.proc.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
                process.kill()

    async def master(
        self, within_s: float = 15.0, other_than: BrokerProcess | None = None
    ) -> BrokerProcess:
        """The replica the NameServer routes broker-a's writes to (id 0; not ``other_than``)."""
        deadline = time.monotonic() + within_s
        async with NameServerClient(self.ns.endpoint) as namesrv:
            while True:
                for broker in await namesrv.cluster_info():
                    if broker.broker_name == "broker-a" and broker.broker_id == 0:
                        for replica in self.replicas.values():
                            if (
                                replica.endpoint == broker.address
                                and replica.proc is not None
                                and replica.proc.poll() is None
                                and replica is not other_than
                            ):
                                return replica
                assert time.monotonic() < deadline, "broker-a has no master"
                await asyncio.sleep(0.05)

    async def in_sync(self, master: BrokerProcess, within_s: float = 20.0) -> None:
        """Until the master's sync-state set holds both replicas."""
        deadline = time.monotonic() + within_s
        while True:
            with contextlib.suppress(WharfError):  # a broker still starting
                async with Admin(master.endpoint) as admin:
                    rep = (await admin.broker_status()).replication
                if sorted(rep.sync_state_set) == [1, 2]:
                    return
            assert time.monotonic() < deadline, "the sync-state set never held both replicas"
            await asyncio.sleep(0.1)


@contextlib.contextmanager
def running_group(root: Path, **kwargs: Any) -> Iterator[Group]:
    """A ``Group`` killed (SIGCONT first, for a paused one) at the end, whatever happened."""
    group = Group(root, **kwargs)
    try:
        yield group
    finally:
        group.kill_all()


async def create_topic(group: Group, master: BrokerProcess, topic: str = "orders") -> None:
    """``topic`` with two queues on broker-a's master (and broker-b), once routed."""
    brokers = [master, *([group.other] if group.other else [])]
    for broker in brokers:
        async with Admin(broker.endpoint) as admin:
            await admin.create_topic(topic, queue_nums=2)
    names = {"broker-a", *(["broker-b"] if group.other else [])}
    async with NameServerClient(group.ns.endpoint) as namesrv:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(NotFoundError):  # until a broker re-registers with it
                if names <= set((await namesrv.query_route(topic)).queues):
                    return
            assert time.monotonic() < deadline, f"{topic} not routed"
            await asyncio.sleep(0.1)


class Load:
    """Producers sending through the NameServer, recording what was acknowledged (SEND_OK)."""

    def __init__(self, namesrv: str, workers: int = 3, topic: str = "orders") -> None:
        self.namesrv = namesrv
        self.topic = topic
        self.acked: list[tuple[bytes, str]] = []  # (body, offset message id)
        self.failed: list[str] = []
        self.acked_at: list[float] = []  # time.monotonic() of each ack, in order
        self._stop = asyncio.Event()
        self._tasks = [asyncio.create_task(self._run(w)) for w in range(workers)]

    async def _run(self, worker: int) -> None:
        async with Producer(namesrv=self.namesrv, send_timeout=10.0) as producer:
            i = 0
            while not self._stop.is_set():
                body = b"w%d-%d" % (worker, i)
                i += 1
                try:
                    result = await producer.send(self.topic, body)
                except WharfError as exc:  # paced like a send: a failing one can be instant
                    self.failed.append(f"{type(exc).__name__}: {exc}")
                else:
                    if result.status == SendStatus.SEND_OK:
                        self.acked.append((body, result.offset_msg_id))
                        self.acked_at.append(time.monotonic())
                await asyncio.sleep(0.005)

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)


async def read_everything(
    namesrv: str, topic: str = "orders"
) -> dict[tuple[str, int], list[tuple[int, bytes]]]:
    """(broker name, queue) -> [(queue offset, body)] of every message of every group."""
    out: dict[tuple[str, int], list[tuple[int, bytes]]] = {}
    async with PullConsumer(namesrv=namesrv, group="audit") as consumer:
        for queue in await consumer.queues(topic):
            offset, got = 0, []
            while True:
                result = await consumer.pull(queue, offset, max_messages=500)
                if not result.messages:
                    break
                got += [(m.queue_offset, m.body) for m in result.messages]
                offset = result.next_begin_offset
            out[(queue.broker_name, queue.queue_id)] = got
    return out


def check_exactly_once_per_offset(
    read: dict[tuple[str, int], list[tuple[int, bytes]]],
) -> set[bytes]:
    """The bodies read; asserts every queue's offsets are contiguous (one message each)."""
    bodies: set[bytes] = set()
    for queue, messages in read.items():
        offsets = [o for o, _ in messages]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))) if offsets else True, (
            f"{queue}: queue offsets not contiguous"
        )
        bodies |= {b for _, b in messages}
    return bodies


def segments(broker: BrokerProcess) -> dict[str, str]:
    """sha256 of every CommitLog segment holding data (a preallocated one is all zeros)."""
    out = {}
    for f in sorted((broker.store_dir / "commitlog").iterdir()):
        try:
            data = f.read_bytes()
        except FileNotFoundError:  # a preallocation (temporary name) renamed meanwhile
            continue
        if f.name.isdigit() and data.count(0) != len(data):
            out[f.name] = hashlib.sha256(data).hexdigest()
    return out
