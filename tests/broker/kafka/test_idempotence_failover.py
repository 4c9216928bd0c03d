"""The idempotent producer across what a failover does to it: a retry is acknowledged only
when its first copy is durable as any acks=all answer must be (on the sync-state set), and
a new master rebuilds from the replicated log the windows of producers whose ids it handed
out while it was a replica (the fault campaign stored such retries twice)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from wharf.broker.frontends.kafka.producers import SLOTS, ProducerTable
from wharf.broker.frontends.kafka.records import Batch
from wharf.store.codec.kafka_records import KAFKA_PRODUCER

from tests.broker.kafka.kafka_helpers import start_kafka
from tests.broker.kafka.test_idempotence import PRODUCE, high, idempotent, new_pid, send
from tests.inproc import InProcFactory

NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
REQUEST_TIMED_OUT = 7
NOT_LEADER_OR_FOLLOWER = 6


async def test_a_retry_is_answered_only_once_its_first_copy_is_replicated(
    inproc_broker: InProcFactory,
) -> None:
    """A SYNC_MASTER whose replica is gone stores a batch and answers
    NOT_ENOUGH_REPLICAS_AFTER_APPEND; the producer's retry is a duplicate (not stored
    again) and gets the same answer, not an acknowledgement of an offset no replica has
    (before: answered at once, and the next master gave the offset to another record).
    Once the sync-state set is this master alone (what etcd would publish), the retry is
    acknowledged at the first copy's offset."""
    kafka = await start_kafka(inproc_broker, broker_role="SYNC_MASTER", ha_listen_port="0")
    store = kafka.controller.ctx.store
    client = await kafka.client()
    pid = await new_pid(client)
    batch = idempotent(pid, 0, 0, b"a", b"b")
    assert await send(client, batch) == (NOT_ENOUGH_REPLICAS_AFTER_APPEND, 0)
    assert await send(client, batch) == (NOT_ENOUGH_REPLICAS_AFTER_APPEND, 0)
    assert await high(store) == 2  # stored once
    assert store.ha_master is not None
    store.ha_master.require(set())  # the sync-state set shrank to this master
    assert await send(client, batch) == (0, 0)
    assert await send(client, batch) == (0, 0)  # known durable now: answered at once
    assert await high(store) == 2
    await client.close()
    await kafka.close()


def _batch(pid: int, sequence: int, count: int) -> Batch:
    return SimpleNamespace(  # type: ignore[return-value]  # the fields check() reads
        producer_id=pid, producer_epoch=0, base_sequence=sequence, count=count,
        last_sequence=sequence + count - 1,
    )  # fmt: skip


async def test_ids_handed_out_as_a_replica_have_their_windows_rebuilt(tmp_path: Path) -> None:
    """Replica a2 hands out a producer id; the producer writes through master a1, whose
    log a2 copies; a1 fails and a2 leads. The producer's retry of its last batch must be
    found in the log a2 copied: before, an id of a2's own slot from this run was taken for
    a producer a2 had seen whole, its missing window for a fresh one, and the retry was
    stored a second time."""
    leading = False
    log: list[Any] = []  # the partition as replicated: messages with their producer marks
    reads = 0

    def read(topic: str, queue_id: int, offset: int, count: int) -> list[Any]:
        nonlocal reads
        reads += 1
        return log[offset : offset + count]

    table = ProducerTable(
        tmp_path, read, lambda t, q: (0, len(log)), broker_id=2, leading=lambda: leading
    )
    table.load_blocking()
    pid = await table.allocate()
    assert pid % SLOTS == 2
    for offset, (sequence, count) in enumerate([(0, 3), (3, 2)]):  # a1 stored two batches
        mark = f"{pid}:0:{sequence}:{count}"
        log.append(SimpleNamespace(queue_offset=offset, properties={KAFKA_PRODUCER: mark}))
    leading = True  # a2 is promoted
    seen = table.check("t", 0, _batch(pid, 3, 2))
    assert seen is not None and seen.base_offset == 1 and seen.written is None
    assert table.check("t", 0, _batch(pid, 5, 1)) is None  # the next one is new

    # An id handed out while leading: its producer wrote here only, no scan for it.
    fresh = await table.allocate()
    before = reads
    assert table.check("t", 0, _batch(fresh, 0, 1)) is None
    assert reads == before


async def test_a_retry_racing_its_first_copy_waits_for_it(inproc_broker: InProcFactory) -> None:
    """A retry on a second connection while the first copy still waits for its replicas
    is not answered before that wait is over."""
    kafka = await start_kafka(inproc_broker, broker_role="SYNC_MASTER", ha_listen_port="0")
    store = kafka.controller.ctx.store
    first, second = await kafka.client(), await kafka.client()
    pid = await new_pid(first)
    batch = idempotent(pid, 0, 0, b"x")
    assert store.ha_master is not None
    store.ha_master.require({9})  # a replica every acknowledgement needs, not connected
    one = asyncio.create_task(send(first, batch))
    await asyncio.sleep(0.2)
    two = asyncio.create_task(send(second, batch))
    await asyncio.sleep(0.2)
    assert not one.done() and not two.done()  # both wait for replica 9
    store.ha_master.require(set())  # the sync-state set shrank: the wait is over
    assert await one == (0, 0)
    assert await two == (0, 0)
    assert await send(first, batch) == (0, 0)
    assert await high(store) == 1
    for client in (first, second):
        await client.close()
    await kafka.close()


async def test_a_slow_admission_does_not_reorder_a_connection_s_appends(
    inproc_broker: InProcFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two pipelined batches of one producer: the first one's partition lookup is slow (a
    NameServer cut off: ~1 s in the fault campaign). The second must not be appended first:
    then the first was OUT_OF_ORDER_SEQUENCE_NUMBER, fatal to librdkafka."""
    kafka = await start_kafka(inproc_broker)
    assert kafka.part.handlers is not None
    env = kafka.part.handlers.env
    lookups = 0
    real = env.queue_of

    async def slow_first(topic: str, partition: int) -> tuple[int, Any]:
        nonlocal lookups
        lookups += 1
        if lookups == 1:
            await asyncio.sleep(0.3)
        return await real(topic, partition)

    client = await kafka.client()
    pid = await new_pid(client)
    monkeypatch.setattr(env, "queue_of", slow_first)
    body: dict[str, Any] = {"transactional_id": None, "acks": -1, "timeout_ms": 5000}
    sent = []
    for sequence in (0, 2):
        records = idempotent(pid, 0, sequence, b"a%d" % sequence, b"b%d" % sequence)
        partition = {"index": 0, "records": records}
        sent.append(client.send(PRODUCE, 7, {**body, "topic_data": [
            {"name": "idem", "partition_data": [partition]}]}))  # fmt: skip
    for sequence, correlation in zip((0, 2), sent, strict=True):
        got, response = await client.receive(PRODUCE, 7)
        row = response["responses"][0]["partition_responses"][0]
        assert (got, row["error_code"], row["base_offset"]) == (correlation, 0, sequence)
    await client.close()
    await kafka.close()


async def test_a_batch_stored_by_a_master_fenced_before_its_ack_is_possibly_persisted(
    inproc_broker: InProcFactory,
) -> None:
    """Stored, then the master's lease ran out before the acknowledgement: the answer is
    REQUEST_TIMED_OUT ("possibly persisted" to librdkafka), not KAFKA_STORAGE_ERROR, which
    librdkafka reads as "not persisted" and may re-send under new sequences."""
    kafka = await start_kafka(inproc_broker, broker_role="SYNC_MASTER", ha_listen_port="0")
    store = kafka.controller.ctx.store
    client = await kafka.client()
    pid = await new_pid(client)
    assert store.ha_master is not None
    store.ha_master.require({9})  # the acknowledgement waits for replica 9
    answer = asyncio.create_task(send(client, idempotent(pid, 0, 0, b"x")))
    await asyncio.sleep(0.2)
    store.role.set_write_fence(lambda: "the lease ran out")
    store.ha_master.require(set())
    assert await answer == (REQUEST_TIMED_OUT, 0)
    await client.close()
    await kafka.close()


async def test_after_a_refusal_the_next_batches_are_refused_alike_not_out_of_order(
    inproc_broker: InProcFactory,
) -> None:
    """The master's lease runs out while batch 0 waits for its replica: batch 1 is refused
    (not appended), and batch 2 must be refused the same way. Before, batch 2 was
    OUT_OF_ORDER_SEQUENCE_NUMBER (a gap after 0), on which librdkafka bumps its epoch and
    re-sends batch 0, maybe stored, under new sequences: a second copy."""
    kafka = await start_kafka(inproc_broker, broker_role="SYNC_MASTER", ha_listen_port="0")
    store = kafka.controller.ctx.store
    first, second = await kafka.client(), await kafka.client()
    pid = await new_pid(first)
    assert store.ha_master is not None
    store.ha_master.require({9})  # batch 0's acknowledgement waits for replica 9
    zero = asyncio.create_task(send(first, idempotent(pid, 0, 0, b"zero")))
    await asyncio.sleep(0.2)
    store.role.set_write_fence(lambda: "the lease ran out")
    # fenced: not the leader any more (Kafka's answer; librdkafka refreshes and retries)
    assert await send(second, idempotent(pid, 0, 1, b"one")) == (NOT_LEADER_OR_FOLLOWER, -1)
    assert await send(second, idempotent(pid, 0, 2, b"two")) == (NOT_LEADER_OR_FOLLOWER, -1)
    store.ha_master.require(set())
    assert await zero == (REQUEST_TIMED_OUT, 0)  # stored, its ack refused: possibly persisted
    for client in (first, second):
        await client.close()
    await kafka.close()
