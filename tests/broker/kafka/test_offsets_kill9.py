"""A committed Kafka offset survives a kill -9 of the broker right after the commit's answer,
with a real client (confluent-kafka / librdkafka), under ASYNC_FLUSH and SYNC_FLUSH: an
OffsetCommit is answered once the offset is in consumerOffset.json's journal (fsynced under
SYNC_FLUSH). Before, the answer went out at once and the file was written by the next periodic
round (flushConsumerOffsetInterval, 5 s): a kill within that window took the commit back and
the group re-read what it had committed."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness import Daemons

pytestmark = pytest.mark.slow

TOPIC = "offsets-kill9"
PARTITIONS = 3
GROUP = "kill9-group"


def _consumer(bootstrap: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                     "enable.auto.commit": False})  # fmt: skip


def _commit(bootstrap: str, offsets: dict[int, int]) -> None:
    """Commit synchronously (returns once the broker answered), as a simple consumer (no
    group membership: generation -1)."""
    consumer = _consumer(bootstrap)
    try:
        answered = consumer.commit(
            offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()],
            asynchronous=False,
        )
        assert answered is not None
        assert all(tp.error is None for tp in answered), answered
    finally:
        consumer.close()


def _committed(bootstrap: str) -> dict[int, int]:
    consumer = _consumer(bootstrap)
    try:
        got = consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], 15)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in got}


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_a_committed_offset_survives_a_kill_9_right_after_its_answer(
    daemons: Daemons, tmp_path: Path, flush: str
) -> None:
    broker = daemons.broker(
        tmp_path, settings={"flushDiskType": flush},
        extra_args=["--kafka-listen", "127.0.0.1:0"],
    )  # fmt: skip
    admin = AdminClient({"bootstrap.servers": broker.kafka_endpoint})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(15)
    _commit(broker.kafka_endpoint, {0: 10, 1: 10, 2: 10})
    broker.kill()  # SIGKILL before the periodic round: the first commit's snapshot
    broker.start()
    assert _committed(broker.kafka_endpoint) == {0: 10, 1: 10, 2: 10}
    for round_ in range(3):  # journal appends (the snapshot exists now), one kill each
        wanted = {p: 37 + 10 * round_ + p for p in range(PARTITIONS)}
        _commit(broker.kafka_endpoint, wanted)
        broker.kill()  # right after the answer: well inside the 5 s periodic interval
        broker.start()
        assert _committed(broker.kafka_endpoint) == wanted, f"round {round_}"
