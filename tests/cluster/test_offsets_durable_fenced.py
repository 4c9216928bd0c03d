"""wharf.v1 UpdateConsumerOffset with ``durable`` (what a Kafka coordinator forwards to another
broker group's master, ``broker/cluster/peer_offsets.py``) in controller mode, as processes:
etcd, a NameServer, broker-a as two replicas (SYNC_MASTER + SYNC_FLUSH, lease 3000 ms).

- The master answers once the in-sync replica applied the offset: the replica has it the
  moment the answer arrives (a failover right after cannot take it back).
- The replica refuses it (FAILED_PRECONDITION): its table is the master's copy.
- With etcd killed the master cannot renew its lease and fences itself within it: it refuses
  the durable form (UNAVAILABLE, "lease was not renewed"), where the plain form would answer
  a commit a new master never saw."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from wharf.v1 import messaging_pb2, messaging_pb2_grpc

from tests.cluster.failover_helpers import TTL_MS, Group, running_group
from tests.harness import BrokerProcess, Daemons

pytestmark = pytest.mark.slow


@pytest.fixture
def group(daemons: Daemons, tmp_path: Path) -> Iterator[Group]:
    with running_group(tmp_path, daemons=daemons, other=False) as made:
        yield made


def _update(broker: BrokerProcess, offset: int) -> None:
    with grpc.insecure_channel(broker.endpoint) as channel:
        messaging_pb2_grpc.MessagingServiceStub(channel).UpdateConsumerOffset(
            messaging_pb2.UpdateConsumerOffsetRequest(
                consumer_group="g", topic="t", queue_id=0, offset=offset, durable=True
            ),
            timeout=10,
        )


def _committed(broker: BrokerProcess) -> int:
    with grpc.insecure_channel(broker.endpoint) as channel:
        reply = messaging_pb2_grpc.MessagingServiceStub(channel).QueryConsumerOffset(
            messaging_pb2.QueryConsumerOffsetRequest(consumer_group="g", topic="t"), timeout=10
        )
    return int(reply.offset)


async def test_durable_offset_commits_wait_for_the_replica_and_a_fenced_master_refuses(
    group: Group,
) -> None:
    master = await group.master()
    await group.in_sync(master)
    replica = next(r for r in group.replicas.values() if r is not master)
    for offset in (4, 9):
        _update(master, offset)
        assert _committed(replica) == offset  # applied there before the answer

    with pytest.raises(grpc.RpcError) as refused:
        _update(replica, 20)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION

    killed_at = time.monotonic()
    group.etcd.kill()
    while True:  # the master fences itself within the lease
        assert time.monotonic() - killed_at < TTL_MS / 1000 + 1, "the master never fenced"
        try:
            _update(master, 30)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc
            assert "lease was not renewed" in (exc.details() or ""), exc.details()
            break
        await asyncio.sleep(0.05)
