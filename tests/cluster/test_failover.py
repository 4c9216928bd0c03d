"""Controller mode as processes on 127.0.0.1: etcd (Debian's etcd-server), a NameServer,
broker-a as two replicas electing their master on etcd (SYNC_MASTER + SYNC_FLUSH) and broker-b
as a plain master. A master killed with SIGKILL under load is replaced within the lease plus a
second, no acknowledged message is lost and every queue offset holds one message; a master
paused (SIGSTOP, a partition) for twice the lease is replaced and steps down when it wakes;
a former master with a tail the group never acknowledged truncates it, crash-safely."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from wharf.client import Admin, Producer, PullConsumer, SendStatus
from wharf.client.errors import WharfError
from wharf.client.namesrv import NameServerClient
from wharf.rocketmq.v2 import definition_pb2 as v2d
from wharf.rocketmq.v2 import service_pb2 as v2
from wharf.rocketmq.v2 import service_pb2_grpc as v2_grpc

from tests.cluster.failover_helpers import (
    TTL_MS,
    Group,
    Load,
    check_exactly_once_per_offset,
    create_topic,
    read_everything,
    running_group,
    segments,
)
from tests.harness import REPO_ROOT, BrokerProcess, Daemons

pytestmark = pytest.mark.slow


@pytest.fixture
def group(daemons: Daemons, tmp_path: Path) -> Iterator[Group]:
    with running_group(tmp_path, daemons=daemons) as made:
        yield made


async def test_kill_9_of_the_master_elects_a_replica_and_loses_no_acknowledged_message(
    group: Group,
) -> None:
    old = await group.master()
    await create_topic(group, old)
    await group.in_sync(old)
    load = Load(group.ns.endpoint)
    async with PullConsumer(old.endpoint, "billing") as consumer:  # a committed offset
        queue = next(q for q in await consumer.queues("orders") if q.queue_id == 1)
        await consumer.commit(queue, 3)
    await asyncio.sleep(1.5)  # consumer offsets reach the replicas every second
    killed_at = time.monotonic()
    old.kill()
    new = await group.master(within_s=TTL_MS / 1000 + 5)
    elected_after = time.monotonic() - killed_at
    async with Admin(new.endpoint) as admin:  # the topic and the group's offset came along
        assert "orders" in {t.name for t in (await admin.list_topics()).topics}
    async with PullConsumer(new.endpoint, "billing") as consumer:
        queue = next(q for q in await consumer.queues("orders") if q.queue_id == 1)
        assert await consumer.committed(queue) == 3
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
    read = await read_everything(group.ns.endpoint)
    bodies = check_exactly_once_per_offset(read)
    missing = [body for body, _ in load.acked if body not in bodies]
    assert not missing, f"{len(missing)} of {len(load.acked)} acknowledged messages lost"
    assert "refuses this replica" not in old.log()


async def test_a_promoted_replica_delivers_each_timer_once(group: Group) -> None:
    """Timers the old master delivered are not delivered again by the replica that takes over
    (it reads its master's deliveries from the log when promoted), and one still pending when
    the master dies is delivered once, by the new master."""
    old = await group.master()
    await create_topic(group, old)
    await group.in_sync(old)
    async with Producer(old.endpoint, retry_times=0) as producer:
        for i in range(5):
            sent = await producer.send("orders", b"early %d" % i, queue_id=0, delay=0.5)
            assert sent.status == SendStatus.SEND_OK
        sent = await producer.send("orders", b"late", queue_id=0, delay=TTL_MS / 1000 + 4)
        assert sent.status == SendStatus.SEND_OK
    replica = next(r for r in group.replicas.values() if r is not old)

    async def bodies(broker: BrokerProcess) -> list[bytes]:
        async with PullConsumer(broker.endpoint, "audit") as consumer:
            queue = next(q for q in await consumer.queues("orders") if q.queue_id == 0)
            return [m.body for m in (await consumer.pull(queue, 0, max_messages=100)).messages]

    deadline = time.monotonic() + 15
    while len(await bodies(replica)) < 5:  # the deliveries reached the replica
        assert time.monotonic() < deadline, "the early timers were not delivered"
        await asyncio.sleep(0.1)
    old.kill()
    new = await group.master(within_s=TTL_MS / 1000 + 10, other_than=old)
    assert new is replica
    deadline = time.monotonic() + 15
    while b"late" not in (got := await bodies(new)):
        assert time.monotonic() < deadline, f"the pending timer was not delivered: {got}"
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.5)  # room for a duplicate to show up
    got = await bodies(new)
    assert sorted(got) == sorted([b"early %d" % i for i in range(5)] + [b"late"]), got


async def test_a_promoted_replica_pops_from_where_the_old_master_s_acks_had_finished(
    group: Group,
) -> None:
    """RocketMQ 5 pop consumption across a failover: acknowledged messages are not delivered
    again by the new master, and the ones in flight (received, never acknowledged) are.
    (The pop journal is the master's own; its progress reaches the replica as the group's
    committed offset.)"""
    old = await group.master()
    await create_topic(group, old)
    await group.in_sync(old)
    async with Producer(old.endpoint, retry_times=0) as producer:
        for i in range(20):
            sent = await producer.send("orders", b"m%02d" % i, queue_id=0)
            assert sent.status == SendStatus.SEND_OK
    received = await _receive(old.endpoint, 20)
    assert sorted(m.body for m in received) == [b"m%02d" % i for i in range(20)]
    done = sorted(received, key=lambda m: m.body)[:12]
    await _ack(old.endpoint, done)
    replica = next(r for r in group.replicas.values() if r is not old)

    async def committed_on_replica() -> int:
        async with Admin(replica.endpoint) as admin:
            progress = await admin.consumer_progress(POP_GROUP, "orders")
        return max((q.consumer_offset for q in progress.queues if q.queue_id == 0), default=-1)

    deadline = time.monotonic() + 10
    while await committed_on_replica() != 12:  # pop progress -> offsets -> replicated
        assert time.monotonic() < deadline, "the pop progress did not reach the replica"
        await asyncio.sleep(0.2)
    old.kill()
    new = await group.master(within_s=TTL_MS / 1000 + 10, other_than=old)
    assert new is replica
    again = await _receive(new.endpoint, 8)
    assert sorted(m.body for m in again) == [b"m%02d" % i for i in range(12, 20)]
    assert await _receive(new.endpoint, 1, polling_s=1.0) == []  # and nothing more


POP_GROUP = "pop-readers"
V2_META = (("x-mq-client-id", "failover-test@1@0@abc"),)


async def _receive(endpoint: str, count: int, polling_s: float = 2.0) -> list[Any]:
    """v2 ReceiveMessage on ``endpoint`` until ``count`` messages (or an empty answer)."""
    request = v2.ReceiveMessageRequest(
        group=v2d.Resource(name=POP_GROUP),
        message_queue=v2d.MessageQueue(topic=v2d.Resource(name="orders")),
        filter_expression=v2d.FilterExpression(type=v2d.TAG, expression="*"),
        batch_size=32,
        invisible_duration=Duration(seconds=60),
        long_polling_timeout=Duration(seconds=int(polling_s), nanos=int(polling_s % 1 * 1e9)),
    )
    out: list[Any] = []
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = v2_grpc.MessagingServiceStub(channel)
        while len(out) < count:
            replies = [r async for r in stub.ReceiveMessage(request, metadata=V2_META, timeout=10)]
            got = [r.message for r in replies if r.HasField("message")]
            if not got:
                break
            out += got
    return out


async def _ack(endpoint: str, messages: list[Any]) -> None:
    entries = [
        v2.AckMessageEntry(
            message_id=m.system_properties.message_id,
            receipt_handle=m.system_properties.receipt_handle,
        )
        for m in messages
    ]
    async with grpc.aio.insecure_channel(endpoint) as channel:
        reply = await v2_grpc.MessagingServiceStub(channel).AckMessage(
            v2.AckMessageRequest(
                group=v2d.Resource(name=POP_GROUP), topic=v2d.Resource(name="orders"),
                entries=entries,
            ),
            metadata=V2_META,
        )  # fmt: skip
    assert reply.status.code == v2d.Code.OK, reply


async def test_a_paused_master_is_replaced_and_steps_down_when_it_wakes(group: Group) -> None:
    old = await group.master()
    await create_topic(group, old)
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
    read = await read_everything(group.ns.endpoint)
    bodies = check_exactly_once_per_offset(read)
    missing = [body for body, _ in load.acked if body not in bodies]
    assert not missing, f"{len(missing)} acknowledged messages lost"


@pytest.mark.parametrize("fault", ["crash-after-truncation-marker", "crash-during-truncation"])
async def test_a_former_master_cuts_its_unacknowledged_tail_even_across_a_crash(
    group: Group, fault: str
) -> None:
    old = await group.master()
    await create_topic(group, old)
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
    while segments(old) != segments(new):
        assert time.monotonic() < deadline, "the former master's log is no copy of the new one's"
        await asyncio.sleep(0.2)
    assert "truncated at" in old.log()


async def test_transfer_master_hands_the_group_over_without_a_failed_send(group: Group) -> None:
    old = await group.master()
    await create_topic(group, old)
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
    read = await read_everything(group.ns.endpoint)
    bodies = check_exactly_once_per_offset(read)
    assert not [body for body, _ in load.acked if body not in bodies]


async def test_sigterm_on_the_master_hands_over_at_once(group: Group) -> None:
    old = await group.master()
    await create_topic(group, old)
    await group.in_sync(old)
    load = Load(group.ns.endpoint)
    await asyncio.sleep(1.0)
    stopped_at = time.monotonic()
    os.kill(old.pid, signal.SIGTERM)  # graceful: wait for the replica, revoke the lease
    new = await group.master(within_s=TTL_MS / 1000, other_than=old)
    handed_over_after = time.monotonic() - stopped_at
    async with Producer(new.endpoint, retry_times=0) as direct:  # the successor acknowledges
        assert (await direct.send("orders", b"after the handover")).status == SendStatus.SEND_OK
    assert handed_over_after < TTL_MS / 1000 - 0.5, f"took {handed_over_after:.1f} s: no handover"
    assert old.proc is not None and old.proc.wait(30) == 0
    await asyncio.sleep(1.0)
    await load.stop()
    assert not load.failed, load.failed[:3]
    read = await read_everything(group.ns.endpoint)
    bodies = check_exactly_once_per_offset(read)
    assert not [body for body, _ in load.acked if body not in bodies]
    assert "handed over: lease of term 1 revoked" in old.log()


async def test_producers_of_a_lone_group_wait_out_the_election(tmp_path: Path) -> None:
    # No other group to send to: sends wait for the new master (their deadline is 10 s, the
    # lease 3 s) instead of failing for the whole election.
    with running_group(tmp_path, other=False) as lone:
        old = await lone.master()
        await create_topic(lone, old)
        await lone.in_sync(old)
        load = Load(lone.ns.endpoint)
        await asyncio.sleep(1.0)
        old.kill()
        new = await lone.master(within_s=TTL_MS / 1000 + 5, other_than=old)
        acked_before = len(load.acked)
        await asyncio.sleep(1.5)
        await load.stop()
        assert not load.failed, load.failed[:3]
        assert len(load.acked) > acked_before  # the new master took the waiting sends
        new_port = int(new.endpoint.rpartition(":")[2])
        assert any(int(msg_id[8:16], 16) == new_port for _, msg_id in load.acked if msg_id)
        bodies = check_exactly_once_per_offset(await read_everything(lone.ns.endpoint))
        assert not [body for body, _ in load.acked if body not in bodies]
