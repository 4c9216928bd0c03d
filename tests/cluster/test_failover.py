"""Controller mode as processes on 127.0.0.1: etcd (Debian's etcd-server), a NameServer,
broker-a as two replicas electing their master on etcd (SYNC_MASTER + SYNC_FLUSH) and broker-b
as a plain master. A master killed with SIGKILL under load is replaced within the lease plus a
second, no acknowledged message is lost and every queue offset holds one message; a master
paused (SIGSTOP, a partition) for twice the lease is replaced and steps down when it wakes;
a former master with a tail the group never acknowledged truncates it, crash-safely."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from wharf.client import Admin, Producer, PullConsumer, SendStatus
from wharf.client.errors import WharfError
from wharf.client.namesrv import NameServerClient

from tests.harness import REPO_ROOT, BrokerProcess, EtcdProcess, NamesrvProcess, free_port

pytestmark = pytest.mark.slow

TTL_MS = 3000
SMALL = {"mappedFileSizeCommitLog": 4 << 20, "maxMessageSize": 64 * 1024}


class Group:
    def __init__(self, root: Path) -> None:
        self.etcd = EtcdProcess(root / "etcd").start()
        self.ns = NamesrvProcess(root / "ns").start()
        common = {**SMALL, "namesrvAddr": self.ns.endpoint, "brokerClusterName": "C",
                  "autoCreateTopicEnable": False}  # fmt: skip
        self.replicas = {
            i: BrokerProcess(
                root / f"a{i}",
                {**common, "brokerName": "broker-a", "brokerId": i, "brokerRole": "SYNC_MASTER",
                 "flushDiskType": "SYNC_FLUSH", "enableControllerMode": True,
                 "controllerAddr": self.etcd.endpoint,
                 "controllerHeartBeatTimeoutMills": TTL_MS, "haListenPort": free_port(),
                 "haMaxTimeSlaveNotCatchup": 60_000},
                extra_args=["--listen", f"127.0.0.1:{free_port()}"],  # the same across restarts
            )
            for i in (1, 2)
        }  # fmt: skip
        self.other = BrokerProcess(root / "b", {**common, "brokerName": "broker-b"})
        for process in (*self.replicas.values(), self.other):
            process.start()

    def processes(self) -> list[Any]:
        return [*self.replicas.values(), self.other, self.ns, self.etcd]

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
            async with Admin(master.endpoint) as admin:
                rep = (await admin.broker_status()).replication
            if sorted(rep.sync_state_set) == [1, 2]:
                return
            assert time.monotonic() < deadline, f"sync-state set {list(rep.sync_state_set)}"
            await asyncio.sleep(0.1)


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Group]:
    made = Group(tmp_path)
    try:
        yield made
    finally:
        for process in made.processes():
            if process.proc is not None and process.proc.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
                process.kill()


async def _create_topic(group: Group, master: BrokerProcess) -> None:
    for broker in (master, group.other):
        async with Admin(broker.endpoint) as admin:
            await admin.create_topic("orders", queue_nums=2)
    async with NameServerClient(group.ns.endpoint) as namesrv:
        deadline = time.monotonic() + 10
        while len((await namesrv.query_route("orders")).queues) < 2:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)


class Load:
    """Producers sending through the NameServer, recording what was acknowledged (SEND_OK)."""

    def __init__(self, namesrv: str, workers: int = 3) -> None:
        self.namesrv = namesrv
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
                    result = await producer.send("orders", body)
                except WharfError as exc:
                    self.failed.append(f"{type(exc).__name__}: {exc}")
                    continue
                if result.status == SendStatus.SEND_OK:
                    self.acked.append((body, result.offset_msg_id))
                    self.acked_at.append(time.monotonic())
                await asyncio.sleep(0.005)

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)


async def _read_everything(namesrv: str) -> dict[tuple[str, int], list[tuple[int, bytes]]]:
    """(broker name, queue) -> [(queue offset, body)] of every message of both groups."""
    out: dict[tuple[str, int], list[tuple[int, bytes]]] = {}
    async with PullConsumer(namesrv=namesrv, group="audit") as consumer:
        for queue in await consumer.queues("orders"):
            offset, got = 0, []
            while True:
                result = await consumer.pull(queue, offset, max_messages=500)
                if not result.messages:
                    break
                got += [(m.queue_offset, m.body) for m in result.messages]
                offset = result.next_begin_offset
            out[(queue.broker_name, queue.queue_id)] = got
    return out


def _check_exactly_once_per_offset(
    read: dict[tuple[str, int], list[tuple[int, bytes]]],
) -> set[bytes]:
    bodies: set[bytes] = set()
    for queue, messages in read.items():
        offsets = [o for o, _ in messages]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))) if offsets else True, (
            f"{queue}: queue offsets not contiguous"
        )
        bodies |= {b for _, b in messages}
    return bodies


def _segments(broker: BrokerProcess) -> dict[str, str]:
    out = {}
    for f in sorted((broker.store_dir / "commitlog").iterdir()):
        data = f.read_bytes()
        if data.count(0) != len(data):
            out[f.name] = hashlib.sha256(data).hexdigest()
    return out


async def test_kill_9_of_the_master_elects_a_replica_and_loses_no_acknowledged_message(
    group: Group,
) -> None:
    old = await group.master()
    await _create_topic(group, old)
    await group.in_sync(old)
    load = Load(group.ns.endpoint)
    await asyncio.sleep(1.5)
    killed_at = time.monotonic()
    old.kill()
    new = await group.master(within_s=TTL_MS / 1000 + 5)
    elected_after = time.monotonic() - killed_at
    assert new is not old
    assert elected_after < TTL_MS / 1000 + 2, f"a new master after {elected_after:.1f} s"
    async with Producer(new.endpoint, retry_times=0) as direct:  # the new master acknowledges
        assert (await direct.send("orders", b"to the new master")).status == SendStatus.SEND_OK
    load.acked.append((b"to the new master", ""))
    load.acked_at.append(time.monotonic())
    await asyncio.sleep(1.0)  # producers go on meanwhile
    old.start()  # rejoins as a replica of the new master
    await group.in_sync(new)
    await asyncio.sleep(0.5)
    await load.stop()
    assert not load.failed, load.failed[:3]
    read = await _read_everything(group.ns.endpoint)
    bodies = _check_exactly_once_per_offset(read)
    missing = [body for body, _ in load.acked if body not in bodies]
    assert not missing, f"{len(missing)} of {len(load.acked)} acknowledged messages lost"
    assert "refuses this replica" not in old.log()


async def test_a_paused_master_is_replaced_and_steps_down_when_it_wakes(group: Group) -> None:
    old = await group.master()
    await _create_topic(group, old)
    await group.in_sync(old)
    load = Load(group.ns.endpoint)
    await asyncio.sleep(1.0)
    os.kill(old.pid, signal.SIGSTOP)  # a partition: alive, silent
    paused_at = time.monotonic()
    new = await group.master(within_s=TTL_MS / 1000 + 15, other_than=old)
    await asyncio.sleep(max(0.0, 2 * TTL_MS / 1000 - (time.monotonic() - paused_at)))
    woke_at = time.monotonic()
    os.kill(old.pid, signal.SIGCONT)
    # It finds its term over, acknowledges nothing, restarts as a replica and catches up.
    await group.in_sync(new, within_s=30)
    await load.stop()
    assert "stepping down as master of term" in old.log()
    old_port = int(old.endpoint.rpartition(":")[2])
    late = [
        body
        for (body, msg_id), at in zip(load.acked, load.acked_at, strict=True)
        if at > woke_at and int(msg_id[8:16], 16) == old_port
    ]
    assert not late, f"the deposed master acknowledged {len(late)} messages after waking"
    async with NameServerClient(group.ns.endpoint) as namesrv:
        deadline = time.monotonic() + 5
        while True:  # one master in the routes: the elected one
            masters = [b.address for b in await namesrv.cluster_info()
                       if b.broker_name == "broker-a" and b.broker_id == 0]  # fmt: skip
            if masters == [new.endpoint]:
                break
            assert time.monotonic() < deadline, masters
            await asyncio.sleep(0.1)
    read = await _read_everything(group.ns.endpoint)
    bodies = _check_exactly_once_per_offset(read)
    missing = [body for body, _ in load.acked if body not in bodies]
    assert not missing, f"{len(missing)} acknowledged messages lost"


@pytest.mark.parametrize("fault", ["crash-after-truncation-marker", "crash-during-truncation"])
async def test_a_former_master_cuts_its_unacknowledged_tail_even_across_a_crash(
    group: Group, fault: str
) -> None:
    old = await group.master()
    await _create_topic(group, old)
    await group.in_sync(old)
    replica = next(r for r in group.replicas.values() if r is not old)
    async with Admin(replica.endpoint) as admin:  # the topic reached the replica
        deadline = time.monotonic() + 5
        while "orders" not in {t.name for t in (await admin.list_topics()).topics}:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
    await asyncio.sleep(0.3)  # and its metadata file
    async with Producer(old.endpoint, retry_times=0, send_timeout=10) as producer:
        assert (
            await producer.send("orders", b"replicated", queue_id=0)
        ).status == SendStatus.SEND_OK
        replica.kill()  # the replica dies: what follows reaches the master alone, unacked
        for i in range(3):
            result = await producer.send("orders", b"never acked %d" % i, queue_id=0)
            assert result.status == SendStatus.FLUSH_SLAVE_TIMEOUT
    old.kill()
    replica.start()  # still in the sync-state set: elected once the old lease runs out
    new = await group.master(within_s=TTL_MS / 1000 + 10)
    assert new is replica
    old.env = {"WHARF_TEST_FAULT": fault}
    try:  # it learns it must truncate at the handshake, and dies at the fault (as kill -9)
        old.start()
    except RuntimeError as exc:  # the fault struck before it was ready (inside recovery)
        assert "exited with 99" in str(exc)
    else:
        assert old.proc is not None and old.proc.wait(30) == 99
    assert (old.store_dir / "truncate.json").exists()  # the decision survived the crash
    old.env = {}
    old.start()  # the next start finishes the cut before recovery
    await group.in_sync(new)
    async with PullConsumer(old.endpoint, "check") as consumer:
        queue = next(q for q in await consumer.queues("orders") if q.queue_id == 0)
        bodies = [m.body for m in (await consumer.pull(queue, 0, max_messages=100)).messages]
    assert bodies == [b"replicated"]
    deadline = time.monotonic() + 10
    while _segments(old) != _segments(new):
        assert time.monotonic() < deadline, "the former master's log is no copy of the new one's"
        await asyncio.sleep(0.2)
    assert "truncated at" in old.log()


async def test_transfer_master_hands_the_group_over_without_a_failed_send(group: Group) -> None:
    old = await group.master()
    await _create_topic(group, old)
    await group.in_sync(old)
    target = next(i for i, r in group.replicas.items() if r is not old)
    load = Load(group.ns.endpoint)
    await asyncio.sleep(1.0)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "wharf.client.cli.main", "--endpoints", old.endpoint, "--json",
        "admin", "transfer-master", "--to", str(target),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=REPO_ROOT,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    reply = json.loads(out)
    assert int(reply["new_master_id"]) == target and int(reply["epoch"]) == 2
    new = await group.master(other_than=old)
    assert new is group.replicas[target]
    await group.in_sync(new, within_s=30)  # the former master came back as a replica
    await load.stop()
    assert not load.failed, load.failed[:3]
    async with Producer(old.endpoint, retry_times=0) as producer:  # it takes no writes now
        with pytest.raises(WharfError, match=r"SLAVE|replica"):
            await producer.send("orders", b"to a replica")
    read = await _read_everything(group.ns.endpoint)
    bodies = _check_exactly_once_per_offset(read)
    assert not [body for body, _ in load.acked if body not in bodies]
