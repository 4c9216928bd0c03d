"""The idempotent producer: a retried batch is stored once and answered with its first offset,
a gap is OUT_OF_ORDER_SEQUENCE_NUMBER, an old epoch INVALID_PRODUCER_EPOCH, an id never
assigned UNKNOWN_PRODUCER_ID; across a restart producer ids never repeat and a retry of a
batch stored before the restart is still recognised (its sequence rebuilt from the log)."""

from __future__ import annotations

from pathlib import Path

from wharf.broker.frontends.kafka.producers import SLOTS
from wharf.broker.frontends.kafka.records import Record, encode_batch

from tests.broker.kafka.kafka_helpers import SMALL_STORE, KafkaClient, attach_kafka, start_kafka
from tests.inproc import InProcFactory, start_inproc

PRODUCE, FETCH, INIT_PID = 0, 1, 22


def idempotent(pid: int, epoch: int, sequence: int, *values: bytes) -> bytes:
    records = [Record(i, 5_000, b"k", v, []) for i, v in enumerate(values)]
    return encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=sequence)


async def send(client: KafkaClient, records: bytes, partition: int = 0) -> tuple[int, int]:
    response = await client.call(
        PRODUCE,
        7,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 5000,
            "topic_data": [
                {"name": "idem", "partition_data": [{"index": partition, "records": records}]}
            ],
        },
    )
    row = response["responses"][0]["partition_responses"][0]
    return row["error_code"], row["base_offset"]


async def high(store: object) -> int:
    """The partition's high watermark once the store's dispatch has caught up."""
    await store.wait_dispatched(5)  # type: ignore[attr-defined]
    return int(store.get_max_offset("idem", 0))  # type: ignore[attr-defined]


async def new_pid(client: KafkaClient) -> int:
    reply = await client.call(INIT_PID, 1, {"transactional_id": None, "transaction_timeout_ms": 1})
    assert reply["error_code"] == 0 and reply["producer_epoch"] == 0
    return int(reply["producer_id"])


async def test_duplicates_gaps_epochs(inproc_broker: InProcFactory) -> None:
    kafka = await start_kafka(inproc_broker)
    store = kafka.controller.ctx.store
    client = await kafka.client()
    pid = await new_pid(client)
    first = idempotent(pid, 0, 0, b"a", b"b", b"c")
    assert await send(client, first) == (0, 0)
    assert await send(client, first) == (0, 0)  # a retry: the first offset, not stored again
    assert await high(store) == 3
    assert await send(client, idempotent(pid, 0, 3, b"d")) == (0, 3)
    assert await send(client, idempotent(pid, 0, 3, b"d")) == (0, 3)
    assert await send(client, first) == (0, 0)  # still within the last 5 batches
    assert (await send(client, idempotent(pid, 0, 9, b"x")))[0] == 45  # a gap
    assert (await send(client, idempotent(pid, 0, 2, b"c", b"d")))[0] == 45  # overlaps
    # sequences are per partition: partition 1 starts anywhere
    assert await send(client, idempotent(pid, 0, 0, b"p1"), partition=1) == (0, 0)
    # a new epoch restarts the sequence; the old epoch is fenced
    assert await send(client, idempotent(pid, 1, 0, b"e")) == (0, 4)
    assert (await send(client, idempotent(pid, 0, 4, b"f")))[0] == 47
    # an id of this broker's slot never handed out: unknown; another replica's slot: its
    # window is rebuilt from the log (a new master serving its predecessor's producers)
    assert (await send(client, idempotent(pid + 500 * SLOTS, 0, 0, b"g")))[0] == 59
    assert await high(store) == 5
    assert await send(client, idempotent(pid + 1, 0, 0, b"g")) == (0, 5)
    assert await send(client, idempotent(pid + 1, 0, 0, b"g")) == (0, 5)  # a retry: stored once
    assert await high(store) == 6
    # a plain producer (no id) is never checked
    assert await send(client, idempotent(-1, -1, -1, b"h")) == (0, 6)
    assert await send(client, idempotent(-1, -1, -1, b"h")) == (0, 7)
    await client.close()
    await kafka.close()


async def test_state_survives_a_restart(tmp_path: Path) -> None:
    broker = await start_inproc(tmp_path, **SMALL_STORE)
    kafka = await attach_kafka(broker.controller)
    client = await kafka.client()
    pid = await new_pid(client)
    batches = [idempotent(pid, 0, 2 * i, b"x%d" % i, b"y%d" % i) for i in range(3)]
    for i, batch in enumerate(batches):
        assert await send(client, batch) == (0, 2 * i)
    await client.close()
    await kafka.close()
    await broker.close()

    broker = await start_inproc(tmp_path, **SMALL_STORE)
    try:
        kafka = await attach_kafka(broker.controller)
        client = await kafka.client()
        assert await new_pid(client) > pid  # ids from a new block: never reused
        # the producer retries its last batch after the restart: recognised, not stored again
        assert await send(client, batches[2]) == (0, 4)
        assert await send(client, batches[1]) == (0, 2)
        assert await high(broker.controller.ctx.store) == 6
        assert (await send(client, idempotent(pid, 0, 9, b"gap")))[0] == 45
        assert await send(client, idempotent(pid, 0, 6, b"next")) == (0, 6)
        await client.close()
        await kafka.close()
    finally:
        await broker.close()


async def test_pipelined_batches_append_in_request_order(inproc_broker: InProcFactory) -> None:
    """max.in.flight 5: five batches of one producer sent without waiting are appended in
    the order sent (a reordering would be OUT_OF_ORDER_SEQUENCE_NUMBER), answered in order."""
    kafka = await start_kafka(inproc_broker)
    client = await kafka.client()
    pid = await new_pid(client)
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": "idem", "partition_data": [{"index": 0, "records": b""}]}],
    }
    sent = []
    for i in range(5):
        records = idempotent(pid, 0, 2 * i, b"a%d" % i, b"b%d" % i)
        body["topic_data"][0]["partition_data"][0]["records"] = records
        sent.append(client.send(PRODUCE, 7, body))
    for i, correlation in enumerate(sent):
        got, response = await client.receive(PRODUCE, 7)
        row = response["responses"][0]["partition_responses"][0]
        assert (got, row["error_code"], row["base_offset"]) == (correlation, 0, 2 * i)
    await client.close()
    await kafka.close()
