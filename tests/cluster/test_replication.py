"""Master/slave replication in static mode (brokerRole, haListenPort, haMasterAddress), with
both brokers as processes on 127.0.0.1: the slave's CommitLog is a byte copy of the master's,
it serves reads and refuses writes, follows the master's metadata, and SYNC_MASTER
acknowledges only what the slave has (else FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE, never a
silent SEND_OK); after kill -9 of the master every acknowledged message is on the slave."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from wharf.client import Admin, Producer, PullConsumer, SendStatus
from wharf.client.errors import WharfError
from wharf.store.ha import frames

from tests.broker.acl_helpers import ACL_SETTINGS, ADMIN, PRODUCER, write_acl
from tests.cluster.failover_helpers import segments
from tests.harness import BrokerProcess, Daemons, free_port

SEGMENT = 1 << 20  # small segments: a few hundred KiB of load rolls several
SMALL = {"mappedFileSizeCommitLog": SEGMENT, "maxMessageSize": 64 * 1024}


def _pair(
    daemons: Daemons,
    root: Path,
    master: dict[str, Any] | None = None,
    slave: dict[str, Any] | None = None,
) -> tuple[BrokerProcess, BrokerProcess]:
    m = daemons.broker(  # an ephemeral HA port unless a test needs it fixed across restarts
        root / "master",
        {**SMALL, "brokerRole": "ASYNC_MASTER", "haListenPort": 0, **(master or {})},
    )
    s = daemons.broker(
        root / "slave",
        {**SMALL, "brokerRole": "SLAVE", "brokerId": 1, "haMasterAddress": m.ha_endpoint,
         **(slave or {})},
    )  # fmt: skip
    return m, s


async def _read_all(endpoint: str, topic: str) -> list[bytes]:
    bodies: list[bytes] = []
    async with PullConsumer(endpoint, "reader") as consumer:
        for queue in await consumer.queues(topic):
            offset = 0
            while True:
                result = await consumer.pull(queue, offset, max_messages=500)
                if not result.messages:
                    break
                bodies.extend(m.body for m in result.messages)
                offset = result.next_begin_offset
    return bodies


async def _eventually(check: Any, within_s: float = 20.0) -> Any:
    deadline = time.monotonic() + within_s
    while True:
        try:
            value = await check()
            if value:
                return value
        except (WharfError, grpc.RpcError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.1)


async def test_the_slave_is_a_byte_copy_serves_reads_and_refuses_writes(
    daemons: Daemons, tmp_path: Path
) -> None:
    master, slave = _pair(daemons, tmp_path)
    sent = [f"m{i}".encode() + b"." * 900 for i in range(2500)]  # ~2.3 MiB: 3 segments
    async with Producer(master.endpoint, retry_times=0) as producer:
        for i in range(0, len(sent), 50):
            for body in sent[i : i + 50]:
                await producer.send("copied", body, keys=(body.split(b".")[0].decode(),))

    async def slave_has_all() -> bool:
        return len(await _read_all(slave.endpoint, "copied")) == len(sent)

    await _eventually(slave_has_all)
    assert sorted(await _read_all(slave.endpoint, "copied")) == sorted(sent)
    on_master = segments(master)
    assert len(on_master) >= 3
    assert segments(slave) == on_master  # every segment, blank tails included
    async with Admin(slave.endpoint) as admin:  # the slave's own index answers key queries
        found = await admin.query_messages("copied", "m1234")
        assert [m.body for m in found.messages] == [sent[1234]]
    with pytest.raises(WharfError) as refused:
        async with Producer(slave.endpoint, retry_times=0) as producer:
            await producer.send("copied", b"not here")
    assert refused.value.code == "FAILED_PRECONDITION"
    assert "SLAVE" in str(refused.value)

    # A stopped slave continues where it stopped (no copy from scratch).
    slave.stop()
    async with Producer(master.endpoint, retry_times=0) as producer:
        for i in range(300):
            await producer.send("copied", b"later-%d" % i)
    slave.start()
    await _eventually(lambda: _count_is(slave.endpoint, "copied", len(sent) + 300))
    assert segments(slave) == segments(master)
    assert "at offset 0 " not in slave.log().split("SIGTERM")[-1]


async def _count_is(endpoint: str, topic: str, count: int) -> bool:
    return len(await _read_all(endpoint, topic)) == count


async def test_the_slave_follows_the_master_s_topics_groups_and_offsets(
    daemons: Daemons, tmp_path: Path
) -> None:
    master, slave = _pair(daemons, tmp_path, master={"autoCreateTopicEnable": False})
    async with Admin(master.endpoint) as admin:
        await admin.create_topic("followed", queue_nums=3)
        await admin.create_group("followers")
    async with Producer(master.endpoint, retry_times=0) as producer:
        await producer.send("followed", b"one")
    async with PullConsumer(master.endpoint, "followers") as consumer:
        queue = next(q for q in await consumer.queues("followed") if q.queue_id == 0)
        await consumer.commit(queue, 7)

    async def replicated() -> bool:
        async with Admin(slave.endpoint) as admin:
            topics = {t.name: t for t in (await admin.list_topics()).topics}
            groups = {g.group_name for g in (await admin.list_groups()).groups}
        async with PullConsumer(slave.endpoint, "followers") as consumer:
            queue = next(q for q in await consumer.queues("followed") if q.queue_id == 0)
            committed = await consumer.committed(queue)
        return (
            "followed" in topics
            and topics["followed"].write_queue_nums == 3
            and "followers" in groups
            and committed == 7
        )

    await _eventually(replicated)
    # Survives a restart of the slave (persisted like its own metadata).
    slave.stop()
    slave.start()
    async with Admin(slave.endpoint) as admin:
        assert "followed" in {t.name for t in (await admin.list_topics()).topics}


async def test_sync_master_acknowledges_only_what_the_slave_has(
    daemons: Daemons, tmp_path: Path
) -> None:
    master, slave = _pair(
        daemons,
        tmp_path,
        master={
            "brokerRole": "SYNC_MASTER",
            "slaveTimeout": 1000,
            "haMaxTimeSlaveNotCatchup": 3000,
        },
    )
    async with Producer(master.endpoint, retry_times=0) as producer:
        ok = await producer.send("synced", b"both have it")
        assert ok.status == SendStatus.SEND_OK
        # The slave is paused: stored on the master, not acknowledged as replicated.
        os.kill(slave.pid, signal.SIGSTOP)
        started = time.monotonic()
        late = await producer.send("synced", b"only the master has it")
        assert late.status == SendStatus.FLUSH_SLAVE_TIMEOUT
        assert time.monotonic() - started >= 0.9
        # Consumers do not see it while the in-sync slave lacks it ...
        assert await _read_all(master.endpoint, "synced") == [b"both have it"]
        # ... until the slave has not caught up for haMaxTimeSlaveNotCatchup: it leaves the
        # in-sync set and stops holding back what consumers see.
        await _eventually(lambda: _count_is(master.endpoint, "synced", 2), within_s=15)
        os.kill(slave.pid, signal.SIGCONT)
        await _eventually(lambda: _count_is(slave.endpoint, "synced", 2))
        again = await producer.send("synced", b"both again")
        assert again.status == SendStatus.SEND_OK
        # No slave at all: SLAVE_NOT_AVAILABLE at once (stored, never SEND_OK).
        slave.kill()

        async def refused_at_once() -> bool:
            began = time.monotonic()
            result = await producer.send("synced", b"alone")
            return (
                result.status == SendStatus.SLAVE_NOT_AVAILABLE and time.monotonic() - began < 0.5
            )

        await _eventually(refused_at_once)


@pytest.mark.slow
async def test_kill_9_of_a_sync_master_loses_no_acknowledged_message(
    daemons: Daemons, tmp_path: Path
) -> None:
    master, slave = _pair(
        daemons,
        tmp_path,
        master={"brokerRole": "SYNC_MASTER", "flushDiskType": "SYNC_FLUSH",
                "haListenPort": free_port()},  # the restarted master must be found again
    )  # fmt: skip
    acked: list[bytes] = []
    stop = asyncio.Event()

    async def produce(worker: int) -> None:
        async with Producer(master.endpoint, retry_times=0) as producer:
            i = 0
            while not stop.is_set():
                body = b"w%d-%d" % (worker, i)
                i += 1
                try:
                    result = await producer.send("durable", body, deadline_s=2)
                except (WharfError, grpc.RpcError, TimeoutError):
                    return  # the master is gone
                if result.status == SendStatus.SEND_OK:
                    acked.append(body)

    workers = [asyncio.create_task(produce(w)) for w in range(4)]
    await asyncio.sleep(2.5)
    master.kill()  # SIGKILL under load
    stop.set()
    await asyncio.gather(*workers)
    assert len(acked) > 100
    on_slave = set(await _read_all(slave.endpoint, "durable"))
    missing = [body for body in acked if body not in on_slave]
    assert not missing, f"{len(missing)} acknowledged messages missing on the slave"
    # The master comes back: the slave continues from where it was, nothing refused.
    master.start()
    async with Producer(master.endpoint, retry_times=0) as producer:

        async def acknowledged() -> bool:  # once the slave has redialled (every second)
            result = await producer.send("durable", b"after restart")
            return result.status == SendStatus.SEND_OK

        await _eventually(acknowledged)
    total = len(await _read_all(master.endpoint, "durable"))
    assert total >= len(on_slave) + 1
    await _eventually(lambda: _count_is(slave.endpoint, "durable", total), within_s=20)
    assert segments(slave) == segments(master)
    assert "refuses this replica" not in slave.log()


async def test_with_acl_only_a_replica_proving_an_admin_account_gets_the_log(
    daemons: Daemons, tmp_path: Path
) -> None:
    """aclEnable on the master: the replication port gives the log and the metadata only to a
    replica proving an admin account (haAccessKey / haSecretKey); a stranger's HELLO and a
    replica with a wrong secret or a non-admin account get an ERROR and no byte of the log."""
    for name in ("master", "slave", "wrong", "plain"):
        write_acl(tmp_path / name / "store")
    acl = {**ACL_SETTINGS, "aclEnable": True}
    keys = {"haAccessKey": ADMIN[0], "haSecretKey": ADMIN[1]}
    master, slave = _pair(daemons, tmp_path, master=acl, slave={**acl, **keys})

    def replica(name: str, account: tuple[str, str]) -> BrokerProcess:
        settings = {**SMALL, **acl, "brokerRole": "SLAVE", "brokerId": 2,
                    "haMasterAddress": master.ha_endpoint, "haAccessKey": account[0],
                    "haSecretKey": account[1]}  # fmt: skip
        return daemons.broker(tmp_path / name, settings)

    wrong, plain = replica("wrong", (ADMIN[0], "guessed")), replica("plain", PRODUCER)
    await _produce_and_copy(master, slave, "secret", access_key=ADMIN[0], secret_key=ADMIN[1])
    host, _, port = master.ha_endpoint.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        kind, _ = await frames.read_frame(reader)
        assert kind == frames.FrameType.CHALLENGE
        stranger = frames.Hello(SEGMENT, 0, 9, "DefaultCluster", "broker-a")
        writer.write(frames.encode_hello(stranger, lambda signed: bytes(32)))
        kind, text = await frames.read_frame(reader)
        assert (kind, text) == (
            frames.FrameType.ERROR,
            b"not authenticated: this master needs haAccessKey / haSecretKey",
        )
    finally:
        writer.close()
    await _eventually(lambda: _logged(wrong, "haSecretKey does not match"))
    await _eventually(lambda: _logged(plain, "is not an admin: replication needs admin"))
    assert segments(wrong) == segments(plain) == {}
    assert "secret-" not in wrong.log() + plain.log()


async def _logged(process: BrokerProcess, text: str) -> bool:
    return text in process.log()


async def _produce_and_copy(
    master: BrokerProcess, replica: BrokerProcess, prefix: str, **keys: str
) -> None:
    """20 messages ``<prefix>-<i>`` to topic ``prefix`` on ``master``, then wait until
    ``replica``'s CommitLog segments equal the master's."""
    async with Producer(master.endpoint, retry_times=0, **keys) as producer:
        for i in range(20):
            await producer.send(prefix, b"%s-%d" % (prefix.encode(), i))

    async def copied() -> bool:
        return segments(replica) == segments(master)

    await _eventually(copied)


async def test_with_ha_tls_a_replica_copies_only_a_master_whose_certificate_it_trusts(
    daemons: Daemons, tmp_path: Path
) -> None:
    """haTlsEnable: the replication listener speaks TLS only (a plain connection gets no
    CHALLENGE), a replica trusting the master's certificate (haTlsCaFile) copies the log, and
    one that does not trust it (the system roots) refuses the master and copies nothing."""
    tls = {"haTlsEnable": True}
    master = daemons.broker(
        tmp_path / "master", {**SMALL, **tls, "brokerRole": "ASYNC_MASTER", "haListenPort": 0}
    )
    cert = master.store_dir / "config" / "tls" / "broker.crt"  # the development pair
    assert "(TLS, ASYNC_MASTER" in master.log()

    def replica(name: str, broker_id: int, **more: Any) -> BrokerProcess:
        settings = {**SMALL, **tls, "brokerRole": "SLAVE", "brokerId": broker_id,
                    "haMasterAddress": master.ha_endpoint, **more}  # fmt: skip
        return daemons.broker(tmp_path / name, settings)

    trusting = replica("trusting", 1, haTlsCaFile=str(cert))
    stranger = replica("stranger", 2)
    await _produce_and_copy(master, trusting, "sealed")
    host, _, port = master.ha_endpoint.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(
            frames.encode_hello(frames.Hello(SEGMENT, 0, 9, "C", "b"), lambda _: bytes(32))
        )
        assert await asyncio.wait_for(reader.read(64), 10) == b""  # no CHALLENGE: closed
    finally:
        writer.close()
    await _eventually(lambda: _logged(stranger, "CERTIFICATE_VERIFY_FAILED"))
    assert segments(stranger) == {}
