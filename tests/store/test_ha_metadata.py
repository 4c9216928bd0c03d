"""Metadata to the replicas, acknowledged (store/ha/metadata.py): a SYNC_MASTER's
``metadata_replicated()`` is True only once the replica applied a snapshot taken after the
call (what a Kafka OffsetCommit answer waits for), False after slaveTimeout when the replica
does not apply it, at once when no replica is needed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from wharf.store.ha import ReplicaLink
from wharf.store.message_store import MessageStore

from tests.store.helpers import small_config, until


async def test_a_change_is_reported_replicated_only_once_the_replica_applied_it(
    tmp_path: Path,
) -> None:
    table = {"offset": 0}
    applied: list[dict[str, int]] = []

    def apply(payload: bytes) -> None:
        applied.append(json.loads(payload))

    master = MessageStore(
        small_config(tmp_path / "m", broker_role="SYNC_MASTER", ha_listen_port=0,
                     slave_timeout=500),
        replication=ReplicaLink(metadata=lambda: json.dumps(table).encode()),
    )  # fmt: skip
    await master.start()
    ha = master.ha_master
    assert ha is not None
    replica = MessageStore(
        small_config(tmp_path / "s", broker_role="SLAVE",
                     ha_master_address=f"127.0.0.1:{ha.port}"),
        replication=ReplicaLink(broker_id=1, apply_metadata=apply),
    )  # fmt: skip
    await replica.start()
    try:
        await until(lambda: len(ha.replicas()) == 1 and applied)
        for offset in (41, 42, 43):
            table["offset"] = offset
            assert await ha.metadata_replicated() is True
            assert applied[-1] == {"offset": offset}  # the replica had it before the answer
        # Nothing changed: still answered (the replica holds these very bytes).
        assert await ha.metadata_replicated() is True
        # The replica stops applying (stopped): the wait times out (slaveTimeout, 0.5 s).
        await replica.shutdown()
        table["offset"] = 44
        assert await ha.metadata_replicated() is False
        # A sync-state set of this master alone (controller mode): nothing to wait for.
        ha.require(set())
        assert await ha.metadata_replicated() is True
    finally:
        await replica.shutdown()
        await master.shutdown()


async def test_an_async_master_does_not_wait(tmp_path: Path) -> None:
    master = MessageStore(
        small_config(tmp_path / "m", broker_role="ASYNC_MASTER", ha_listen_port=0),
        replication=ReplicaLink(metadata=lambda: b"{}"),
    )
    await master.start()
    try:
        assert master.ha_master is not None
        assert await master.ha_master.metadata_replicated() is True
    finally:
        await master.shutdown()


async def test_a_static_sync_master_without_its_replica_says_no_at_once(tmp_path: Path) -> None:
    master = MessageStore(
        small_config(tmp_path / "m", broker_role="SYNC_MASTER", ha_listen_port=0,
                     slave_timeout=60_000),
        replication=ReplicaLink(metadata=lambda: b"{}"),
    )  # fmt: skip
    await master.start()
    try:
        assert master.ha_master is not None
        assert await asyncio.wait_for(master.ha_master.metadata_replicated(), 1) is False
    finally:
        await master.shutdown()
