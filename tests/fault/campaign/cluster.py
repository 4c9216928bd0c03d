"""The campaign's cluster: a controller-mode broker group in network namespaces, each replica's
store on a powerfs of its own (tests/fault/netns.py, tests/fault/powerfs.py).

    etcd (10.77.n.2)   ns: NameServer (.3)   a1, a2: broker-a replicas 1 and 2 (.4, .5)
    the campaign process (root namespace, .1): the workload, the term monitor

Replicas are SYNC_MASTER + SYNC_FLUSH with a 3 s lease; ``haMaxTimeSlaveNotCatchup`` is 2 s, so
a master whose replica is cut off drops it from the sync-state set and acknowledges alone.
Every daemon is a ``Process``: it can be killed (SIGKILL), paused (SIGSTOP / SIGCONT) and
started again; a replica's power can be cut (``power_cut``: SIGKILL and powerfs cut in one
event-loop step, then a new boot id in the abort marker, as ``power_campaign`` does).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fault.daemons import NetnsBroker, NetnsNamesrv
from tests.fault.netns import Host, Network, etcd
from tests.fault.power_campaign import fsync_dir, new_boot_id
from tests.fault.powerfs import PowerFS

BROKER = "broker-a"
TTL_MS = 3000  # controllerHeartBeatTimeoutMills: the master's lease
MAX_START_ATTEMPTS = 3


@dataclass
class Process:
    """One daemon of the cluster: ``daemon`` is a ``BrokerProcess``, ``NamesrvProcess`` or
    ``EtcdProcess`` (each has ``proc`` and a way to start again)."""

    name: str
    host: Host
    daemon: Any
    fs: PowerFS | None = None  # a replica's store mount
    paused: bool = False
    failed_starts: list[str] = field(default_factory=list)

    @property
    def alive(self) -> bool:
        proc = self.daemon.proc
        return proc is not None and proc.poll() is None

    def kill(self) -> None:
        self.daemon.kill()
        self.paused = False

    def pause(self) -> None:
        os.kill(self.daemon.proc.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.paused and self.alive:
            os.kill(self.daemon.proc.pid, signal.SIGCONT)
        self.paused = False

    def power_cut(self) -> dict[str, Any]:
        """SIGKILL then, with nothing in between, drop what the mount never made durable; the
        restart recovers as after a machine crash (a new boot id). What the cut dropped."""
        assert self.fs is not None, f"{self.name} has no powerfs"
        self.daemon.kill()
        pending = self.fs.pending()
        self.fs.cut()
        new_boot_id(self.fs.mountpoint / "store" / "abort")
        return pending

    async def start(self) -> float:
        """Start it again (up to MAX_START_ATTEMPTS); the seconds the start that worked took.
        A start that fails is recorded in ``failed_starts`` (a violation for the campaign)."""
        while True:
            began = time.monotonic()
            try:
                if hasattr(self.daemon, "wait_healthy"):  # etcd
                    await asyncio.to_thread(lambda: self.daemon.launch().wait_healthy(30))
                else:
                    await asyncio.to_thread(self.daemon.start)
                return time.monotonic() - began
            except (RuntimeError, TimeoutError) as exc:
                self.failed_starts.append(f"{self.name}: {str(exc)[-300:]}")
                if len(self.failed_starts) >= MAX_START_ATTEMPTS:
                    raise


class Cluster:
    """Built by ``await Cluster.start(net, root)``; ``stop()`` kills every daemon and unmounts."""

    def __init__(self, net: Network, root: Path) -> None:
        self.net = net
        self.root = root
        self.hosts = {name: net.host(name) for name in ("etcd", "ns", "a1", "a2")}
        self.processes: dict[str, Process] = {}

    @classmethod
    async def start(cls, net: Network, root: Path) -> Cluster:
        cluster = cls(net, root)
        try:
            await asyncio.to_thread(cluster._start)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _start(self) -> None:
        h = self.hosts
        member = etcd(self.root / "etcd", h["etcd"]).start()
        self.processes["etcd"] = Process("etcd", h["etcd"], member)
        ns = NetnsNamesrv(self.root / "ns", h["ns"]).start()
        self.processes["ns"] = Process("ns", h["ns"], ns)
        common = {"mappedFileSizeCommitLog": 4 << 20, "maxMessageSize": 64 * 1024,
                  "namesrvAddr": ns.endpoint, "brokerClusterName": "C",
                  "autoCreateTopicEnable": False, "brokerName": BROKER,
                  "brokerRole": "SYNC_MASTER", "flushDiskType": "SYNC_FLUSH",
                  "enableControllerMode": True, "controllerAddr": member.endpoint,
                  "controllerHeartBeatTimeoutMills": TTL_MS, "haListenPort": 0,
                  "haMaxTimeSlaveNotCatchup": 2000}  # fmt: skip
        for i in (1, 2):
            name = f"a{i}"
            fs = PowerFS(
                self.root / "powerfs" / name / "backing", self.root / "powerfs" / name / "mnt"
            )
            fs.start()
            (fs.mountpoint / "store").mkdir()
            fsync_dir(fs.mountpoint)  # the store's root is the campaign's: durable from the start
            (self.root / name).mkdir(parents=True)
            (self.root / name / "store").symlink_to(fs.mountpoint / "store")
            broker = NetnsBroker(self.root / name, h[name], {**common, "brokerId": i})
            self.processes[name] = Process(name, h[name], broker, fs)
            broker.start()

    @property
    def replicas(self) -> list[Process]:
        return [self.processes["a1"], self.processes["a2"]]

    def stop(self) -> None:
        for process in self.processes.values():
            with contextlib.suppress(Exception):
                process.resume()
                process.kill()
        for process in self.processes.values():
            if process.fs is not None:
                with contextlib.suppress(Exception):
                    process.fs.stop()

    def logs(self, lines: int = 40) -> str:
        return "\n".join(
            f"--- {p.name} ---\n" + "\n".join(p.daemon.log().splitlines()[-lines:])
            for p in self.replicas
        )

    async def master(self, within_s: float = 30.0) -> Process:
        """The replica the NameServer routes broker-a's writes to (one only)."""
        from wharf.client.namesrv import NameServerClient

        by_address = {p.daemon.endpoint: p for p in self.replicas}
        deadline = time.monotonic() + within_s
        while True:
            with contextlib.suppress(Exception):
                async with NameServerClient(self.processes["ns"].daemon.endpoint) as namesrv:
                    masters = [b.address for b in await namesrv.cluster_info()
                               if b.broker_name == BROKER and b.broker_id == 0]  # fmt: skip
                if len(masters) == 1 and masters[0] in by_address:
                    return by_address[masters[0]]
            if time.monotonic() > deadline:
                raise AssertionError(f"{BROKER} has no single master after {within_s} s")
            await asyncio.sleep(0.2)

    async def in_sync(self, master: Process, within_s: float = 60.0) -> None:
        from wharf.client import Admin

        deadline = time.monotonic() + within_s
        while True:
            with contextlib.suppress(Exception):
                async with Admin(master.daemon.endpoint) as admin:
                    rep = (await asyncio.wait_for(admin.broker_status(), 2)).replication
                if sorted(rep.sync_state_set) == [1, 2]:
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f"the sync-state set of {master.name} never held both")
            await asyncio.sleep(0.2)

    async def heal_all(self) -> None:
        """Every partition healed, every paused daemon resumed, every dead one started."""
        self.net.heal()
        for process in self.processes.values():
            process.resume()
        for process in self.processes.values():
            if not process.alive:
                await process.start()
