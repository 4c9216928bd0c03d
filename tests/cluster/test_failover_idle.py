"""An idle controller-mode group fails over as fast as a busy one: etcd (Debian's etcd-server), a
NameServer and broker-a as two replicas (SYNC_MASTER + SYNC_FLUSH), left without a send for
longer than haMaxTimeSlaveNotCatchup (the default 15 s; the other failover tests raise it to
60 s), then its master killed (SIGKILL) or stopped (SIGTERM): the caught-up replica is still in
the sync-state set, so it is elected within the lease plus a second, and every acknowledged
message is on it. Before the in-sync rule judged the replica's acknowledged offset against the
log end, an idle replica left the set 15 s after the last write and nobody was ever elected."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from wharf.client import Admin, Producer, SendStatus

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

NOT_CATCHUP_MS = 15_000  # haMaxTimeSlaveNotCatchup's default, RocketMQ's too
IDLE_S = 20.0  # longer than that window: the old rule had dropped the replica 15 s in
ACKED = 40


@pytest.fixture
def group(daemons: Daemons, tmp_path: Path) -> Iterator[Group]:
    # One group only (broker-b adds nothing here and 2 cores are shared).
    settings = {"haMaxTimeSlaveNotCatchup": NOT_CATCHUP_MS}
    with running_group(tmp_path, daemons=daemons, other=False, settings=settings) as made:
        yield made


async def _sync_state_set(endpoint: str) -> list[int]:
    async with Admin(endpoint) as admin:
        return sorted((await admin.broker_status()).replication.sync_state_set)


@pytest.mark.parametrize("stop", ["SIGKILL", "SIGTERM"])
async def test_an_idle_group_elects_its_caught_up_replica_within_the_lease(
    group: Group, stop: str
) -> None:
    old = await group.master()
    await create_topic(group, old)
    await group.in_sync(old)
    acked: list[bytes] = []
    async with Producer(namesrv=group.ns.endpoint) as producer:
        for i in range(ACKED):
            body = b"before-the-night-%d" % i
            result = await producer.send("orders", body)
            assert result.status == SendStatus.SEND_OK, result
            acked.append(body)
    await asyncio.sleep(IDLE_S)  # nobody writes
    assert await _sync_state_set(old.endpoint) == [1, 2], "the idle replica left the set"
    stopped_at = time.monotonic()
    if stop == "SIGKILL":
        old.kill()
    else:
        os.kill(old.pid, signal.SIGTERM)  # hands over: the replica has everything already
    new = await group.master(within_s=TTL_MS / 1000 + 5, other_than=old)
    elected_after = time.monotonic() - stopped_at
    print(f"{stop}: the replica was master {elected_after:.2f} s later")
    assert elected_after < TTL_MS / 1000 + 1, f"a new master after {elected_after:.1f} s"
    if stop == "SIGTERM":
        assert old.proc is not None and old.proc.wait(30) == 0
        assert "handed over: lease of term 1 revoked" in old.log()
    assert "not campaigning" not in new.log()
    async with Producer(new.endpoint, retry_times=0) as direct:  # the new master acknowledges
        assert (await direct.send("orders", b"after the night")).status == SendStatus.SEND_OK
    acked.append(b"after the night")
    bodies = check_exactly_once_per_offset(await read_everything(group.ns.endpoint))
    missing = [body for body in acked if body not in bodies]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged messages lost"
