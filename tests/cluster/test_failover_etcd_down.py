"""Controller mode with its one etcd killed (SIGKILL), as processes on 127.0.0.1: etcd, a
NameServer, broker-a as two replicas (SYNC_MASTER + SYNC_FLUSH, lease 3000 ms). No election
can happen, so the replica stays a replica and refuses writes; the master, unable to renew its
lease, fences itself within the lease (a send answers UNAVAILABLE, "lease was not renewed")
and stays fenced while etcd is down (seven times the lease: long enough for gRPC's default
reconnect backoff to have grown past the lease etcd restarts with); when etcd comes back on
its port with its data, the same master (same term) acknowledges writes again, and
every message it acknowledged is readable."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from wharf.client import Admin, Producer, SendStatus
from wharf.client.errors import FailedPreconditionError, UnavailableError, WharfError

from tests.cluster.failover_helpers import (
    TTL_MS,
    Group,
    check_exactly_once_per_offset,
    create_topic,
    read_everything,
    running_group,
)
from tests.harness import Daemons

pytestmark = pytest.mark.slow

TTL_S = TTL_MS / 1000


@pytest.fixture
def group(daemons: Daemons, tmp_path: Path) -> Iterator[Group]:
    with running_group(tmp_path, daemons=daemons, other=False) as made:
        yield made


async def _epoch(endpoint: str) -> int:
    async with Admin(endpoint) as admin:
        return int((await admin.broker_status()).replication.epoch)


async def test_with_etcd_down_no_failover_the_master_fences_and_resumes_when_etcd_returns(
    group: Group,
) -> None:
    master = await group.master()
    await create_topic(group, master)
    await group.in_sync(master)
    replica = next(r for r in group.replicas.values() if r is not master)
    term = await _epoch(master.endpoint)
    acked: list[bytes] = []
    async with (
        Producer(master.endpoint, retry_times=0, send_timeout=5) as to_master,
        Producer(replica.endpoint, retry_times=0, send_timeout=5) as to_replica,
    ):
        for i in range(5):
            assert (await to_master.send("orders", b"before %d" % i)).status == SendStatus.SEND_OK
            acked.append(b"before %d" % i)

        killed_at = time.monotonic()
        group.etcd.kill()
        # The master fences once its last renewal + lease - margin has passed: within the lease.
        fenced: UnavailableError | None = None
        i = 0
        while fenced is None:
            assert time.monotonic() - killed_at < TTL_S + 1, "the master never fenced itself"
            body = b"while etcd dies %d" % i
            i += 1
            try:
                result = await to_master.send("orders", body)
            except UnavailableError as exc:
                fenced = exc
                break
            assert result.status == SendStatus.SEND_OK, result.status
            acked.append(body)
            await asyncio.sleep(0.05)
        assert "lease was not renewed" in str(fenced), fenced

        # Seven times the lease without etcd: no election (the replica refuses writes), the
        # master stays fenced.
        until = killed_at + 7 * TTL_S
        while time.monotonic() < until:
            with pytest.raises(UnavailableError):
                await to_master.send("orders", b"fenced")
            with pytest.raises(FailedPreconditionError):
                await to_replica.send("orders", b"to the replica")
            await asyncio.sleep(0.2)
        assert await _epoch(replica.endpoint) == term

        group.etcd.start()  # the same port and data: the master key and its lease are there
        back_at = time.monotonic()
        while True:
            try:
                result = await to_master.send("orders", b"after")
            except WharfError as exc:
                assert time.monotonic() - back_at < 2 * TTL_S, f"writes never resumed: {exc}"
                await asyncio.sleep(0.1)
                continue
            assert result.status == SendStatus.SEND_OK, result.status
            acked.append(b"after")
            break
    assert await group.master() is master
    assert await _epoch(master.endpoint) == term, "an election happened"
    await group.in_sync(master)
    bodies = check_exactly_once_per_offset(await read_everything(group.ns.endpoint))
    missing = [body for body in acked if body not in bodies]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged messages lost"
