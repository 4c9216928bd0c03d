"""A Kafka commit a SYNC_MASTER answered is on its slave when the master dies right after
the answer (confluent-kafka; master and slave as processes): the answer waits until the
slave applied it. Before, commits reached the slave with the metadata snapshot checked every
second, and the fault campaign saw a group restart from offset 0 after a failover took back
an acknowledged commit of 103."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from wharf.client import PullConsumer

from tests.broker.kafka.test_offsets_kill9 import GROUP, PARTITIONS, TOPIC, _commit
from tests.harness import Daemons, free_port

pytestmark = pytest.mark.slow

SMALL = {"mappedFileSizeCommitLog": 1 << 20, "maxMessageSize": 64 * 1024}
KAFKA = ["--kafka-listen", "127.0.0.1:0"]


def _commit_acknowledged(bootstrap: str, offsets: dict[int, int]) -> None:
    """Commit until acknowledged: a restarted master answers COORDINATOR_NOT_AVAILABLE
    until its slave is back (it redials every second), never an acknowledgement."""
    deadline = time.monotonic() + 20
    while True:
        try:
            return _commit(bootstrap, offsets)
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


async def _committed_on(endpoint: str) -> dict[int, int]:
    async with PullConsumer(endpoint, GROUP) as consumer:
        return {q.queue_id: await consumer.committed(q) for q in await consumer.queues(TOPIC)}


async def test_a_commit_answered_by_a_sync_master_is_on_its_slave_when_the_master_dies(
    daemons: Daemons, tmp_path: Path
) -> None:
    master = daemons.broker(
        tmp_path / "master",
        # a fixed HA port: the slave dials it again after each restart of the master
        {**SMALL, "brokerRole": "SYNC_MASTER", "haListenPort": free_port(), "slaveTimeout": 3000},
        extra_args=KAFKA,
    )
    slave = daemons.broker(
        tmp_path / "slave",
        {**SMALL, "brokerRole": "SLAVE", "brokerId": 1, "haMasterAddress": master.ha_endpoint},
    )
    admin = AdminClient({"bootstrap.servers": master.kafka_endpoint})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(15)
    for round_ in range(3):
        wanted = {p: 10 * round_ + p + 1 for p in range(PARTITIONS)}
        _commit_acknowledged(master.kafka_endpoint, wanted)
        master.kill()  # SIGKILL right after the answer: the slave is what is left
        assert await _committed_on(slave.endpoint) == wanted, f"round {round_}"
        master.start()
