"""Repeated kill -9 of the master in controller mode, as processes on 127.0.0.1 (etcd, a
NameServer, broker-a as two replicas SYNC_MASTER + SYNC_FLUSH, broker-b a plain master):
``WHARF_FAILOVER_CYCLES`` times (5 by default, ~6 s each) the current master is SIGKILLed
under a produce load, the other replica takes over within the lease plus two seconds, and the
killed one is restarted and rejoins the sync-state set before the next cycle. Afterwards every
acknowledged message is readable exactly once per queue offset (each queue's offsets run from
0 without a gap), the producers kept being acknowledged in every cycle, and both replicas'
CommitLogs are byte-identical: every former master cut its unacknowledged tail."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

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
from tests.harness import Daemons

pytestmark = pytest.mark.slow

CYCLES = int(os.environ.get("WHARF_FAILOVER_CYCLES", "5"))


@pytest.fixture
def group(daemons: Daemons, tmp_path: Path) -> Iterator[Group]:
    with running_group(tmp_path, daemons=daemons) as made:
        yield made


async def test_repeated_kill_9_of_the_master_loses_no_acknowledged_message(group: Group) -> None:
    first = await group.master()
    await create_topic(group, first)
    await group.in_sync(first)
    load = Load(group.ns.endpoint)
    try:
        for cycle in range(CYCLES):
            old = await group.master()
            await group.in_sync(old, within_s=30)
            acked_before = len(load.acked)
            await asyncio.sleep(1.0)  # the load runs against this master
            assert len(load.acked) > acked_before, f"cycle {cycle}: no acknowledgement in 1 s"
            killed_at = time.monotonic()
            old.kill()
            await group.master(within_s=TTL_MS / 1000 + 5, other_than=old)
            took = time.monotonic() - killed_at
            assert took < TTL_MS / 1000 + 2, f"cycle {cycle}: a new master after {took:.1f} s"
            await asyncio.to_thread(old.start)  # rejoins as a replica of the new master
        last = await group.master()
        await group.in_sync(last, within_s=30)
        await asyncio.sleep(0.5)
    finally:
        await load.stop()
    assert not load.failed, load.failed[:3]
    read = await read_everything(group.ns.endpoint)
    for queue, messages in read.items():
        assert not messages or messages[0][0] == 0, f"{queue} starts at offset {messages[0][0]}"
    bodies = check_exactly_once_per_offset(read)
    missing = [body for body, _ in load.acked if body not in bodies]
    assert not missing, f"{len(missing)} of {len(load.acked)} acknowledged messages lost"
    standby = next(r for r in group.replicas.values() if r is not last)
    deadline = time.monotonic() + 15
    while segments(standby) != segments(last):
        assert time.monotonic() < deadline, "the replicas' CommitLogs differ"
        await asyncio.sleep(0.2)
