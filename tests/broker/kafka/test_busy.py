"""Produce against a busy store (the dispatch back-pressure: ``maxDispatchLagBytes``,
``waitTimeMillsInSendQueue``, StoreBusyError "broker busy"): every partition is answered
REQUEST_TIMED_OUT, nothing is written, the connection stays open, the requests pipelined
behind an idempotent producer's refused batch are refused alike (no
OUT_OF_ORDER_SEQUENCE_NUMBER for the gap), and a
real client (confluent-kafka) retries until the dispatch has room. Before, the StoreBusyError
escaped the handler and the connection was closed. Also: the OUT_OF_ORDER_SEQUENCE_NUMBER
log line is one a minute per cause.

In process (the real store, its dispatch stalled as tests/client/test_busy_e2e.py does)."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from wharf.broker.frontends.kafka.errors import Code, KafkaError, code_for
from wharf.broker.frontends.kafka.producers import ProducerTable
from wharf.store.errors import (
    DiskFullError,
    FlushFailedError,
    InSyncReplicasNotEnoughError,
    MasterFencedError,
    NotMasterError,
    ResourceLimitError,
    StoreBusyError,
    StoreShutDownError,
)

from tests.broker.kafka.kafka_helpers import start_kafka
from tests.broker.kafka.test_idempotence import PRODUCE, high, idempotent, new_pid, send
from tests.client.test_busy_e2e import Stall
from tests.inproc import InProcFactory

REQUEST_TIMED_OUT = 7
BUSY = {"max_dispatch_lag_bytes": "4096", "wait_time_mills_in_send_queue": "200"}


def _body(records: bytes) -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": "idem", "partition_data": [{"index": 0, "records": records}]}],
    }


async def test_busy_is_request_timed_out_and_the_pipelined_requests_are_refused_alike(
    inproc_broker: InProcFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batch 1 is refused busy while 2 and 3 are pipelined behind it; the dispatch has room
    again by their turn, and still they are refused alike (appended, 2 would have been
    OUT_OF_ORDER_SEQUENCE_NUMBER: a gap where 1 was refused). The client re-sends 1, 2, 3 in
    order on the same connection and each is stored once."""
    kafka = await start_kafka(inproc_broker)
    store = kafka.controller.ctx.store
    client = await kafka.client()
    pid = await new_pid(client)
    assert await send(client, idempotent(pid, 0, 0, b"zero")) == (0, 0)

    core = kafka.controller.ctx.port.send
    refusals = 0

    async def refuse_once() -> None:
        nonlocal refusals
        refusals += 1
        monkeypatch.setattr(core, "dispatch_lagging", lambda: False)  # room from now on
        raise StoreBusyError("broker busy: a test's refusal")

    monkeypatch.setattr(core, "dispatch_lagging", lambda: True)
    monkeypatch.setattr(core, "dispatch_room", refuse_once)
    batches = [idempotent(pid, 0, seq, b"v%d" % seq) for seq in (1, 2, 3)]
    sent = [client.send(PRODUCE, 8, _body(batch)) for batch in batches]
    await client.writer.drain()
    messages = []
    for correlation in sent:
        got, response = await client.receive(PRODUCE, 8)  # v8: error_message
        row = response["responses"][0]["partition_responses"][0]
        assert (got, row["error_code"], row["base_offset"]) == (correlation, REQUEST_TIMED_OUT, -1)
        messages.append(row["error_message"])
    assert refusals == 1  # the store was busy for batch 1 only
    assert "broker busy" in messages[0]
    assert all("follows sequence 1, refused before it was written" in m for m in messages[1:])
    assert await high(store) == 1  # nothing of them written

    for seq, batch in zip((1, 2, 3), batches, strict=True):  # the client's retries
        assert await send(client, batch) == (0, seq)
    assert await high(store) == 4
    producers = kafka.part.handlers.producers  # type: ignore[union-attr]
    assert not producers.out_of_order
    assert kafka.part.server.failures == 0  # type: ignore[union-attr]
    await client.close()
    await kafka.close()


def _produce_blocking(bootstrap: str, idempotence: bool, count: int) -> dict[str, Any]:
    """confluent-kafka (librdkafka) producing ``count`` records one by one (pipelined), acks
    all; its delivery reports and error callbacks (a dropped connection is one)."""
    errors: list[str] = []
    delivered: list[tuple[str | None, int, bytes]] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": idempotence,
            "acks": "all",
            "linger.ms": 0,
            "retry.backoff.ms": 50,
            "message.timeout.ms": 30_000,
            "error_cb": lambda err: errors.append(str(err)),
        }
    )

    def report(err: Any, msg: Any) -> None:
        delivered.append((None if err is None else str(err), msg.offset(), msg.value()))

    for i in range(count):
        producer.produce("busy", b"v%03d" % i, partition=0, on_delivery=report)
        producer.poll(0)
    left = producer.flush(40)
    return {"left": left, "errors": errors, "delivered": delivered}


def _create_topic_blocking(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic("busy", 1, 1)]).values():
        future.result(15)


@pytest.mark.parametrize("idempotence", [True, False], ids=["idempotent", "plain"])
async def test_confluent_kafka_is_refused_busy_and_retries_until_stored(
    inproc_broker: InProcFactory, idempotence: bool
) -> None:
    """The store's dispatch stalled past maxDispatchLagBytes: librdkafka's produce requests
    are answered REQUEST_TIMED_OUT (each after the 200 ms hold) and retried; once the
    dispatch resumes every record is delivered once, in order, no error reported, no
    connection dropped (the broker's handler never raised)."""
    kafka = await start_kafka(inproc_broker, **BUSY)
    store = kafka.controller.ctx.store
    await asyncio.to_thread(_create_topic_blocking, kafka.address)
    stall = Stall(store)
    count = 40
    try:
        producing = asyncio.create_task(
            asyncio.to_thread(_produce_blocking, kafka.address, idempotence, count)
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # polls the store's counter (no event to wait on)
            if store.stats().sends_refused_busy >= 3:
                break
        assert store.stats().sends_refused_busy >= 3  # refused, and retried, several times
        assert not producing.done()
        assert store.get_max_offset("busy", 0) == 0  # nothing of them written meanwhile
    finally:
        stall.end()
    result = await asyncio.wait_for(producing, 60)
    assert result["left"] == 0 and result["errors"] == [], result
    delivered = result["delivered"]
    assert [err for err, _, _ in delivered] == [None] * count, delivered
    assert sorted((offset, value) for _, offset, value in delivered) == [
        (i, b"v%03d" % i) for i in range(count)
    ]
    await store.wait_dispatched(5)
    assert store.get_max_offset("busy", 0) == count  # each stored once
    assert kafka.part.server.failures == 0  # type: ignore[union-attr]
    assert not kafka.part.handlers.producers.out_of_order  # type: ignore[union-attr]
    await kafka.close()


def _batch(pid: int, sequence: int) -> Any:
    return SimpleNamespace(
        producer_id=pid, producer_epoch=0, base_sequence=sequence, count=1,
        last_sequence=sequence,
    )  # fmt: skip


async def test_out_of_order_is_logged_once_a_minute_per_cause(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client answered OUT_OF_ORDER_SEQUENCE_NUMBER for every batch it sends does not
    flood the log: one line a minute per cause ("ahead": a gap, "behind"), with the count of
    the answers since the last line; every answer counted."""
    table = ProducerTable(tmp_path, lambda *a: [], lambda t, q: (0, 0))
    table.load_blocking()
    pid = await table.allocate()
    table.remember("t", 0, _batch(pid, 0), 0, None)  # type: ignore[arg-type]
    table.remember("t", 0, _batch(pid, 10), 1, None)  # type: ignore[arg-type]
    now = [1000.0]
    monkeypatch.setattr("wharf.broker.frontends.kafka.producers.time.monotonic", lambda: now[0])
    caplog.set_level(logging.INFO, "broker.kafka")

    def refuse(sequence: int) -> None:
        with pytest.raises(KafkaError, match="expected 11"):
            table.check("t", 0, _batch(pid, sequence))  # type: ignore[arg-type]

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if "OUT_OF_ORDER" in r.getMessage()]

    for _ in range(500):
        refuse(20)  # ahead of 11
    for _ in range(3):
        refuse(5)  # behind it, not in the window
    assert table.out_of_order == {"ahead": 500, "behind": 3}
    assert len(lines()) == 2 and "(ahead)" in lines()[0] and "(behind)" in lines()[1]
    now[0] += 59.0
    refuse(20)
    assert len(lines()) == 2  # within the minute
    now[0] += 1.5
    refuse(20)
    assert len(lines()) == 3
    assert "501 such answer(s) since the last line (502 in all" in lines()[2]


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (StoreBusyError("broker busy"), Code.REQUEST_TIMED_OUT),
        (ResourceLimitError("open files"), Code.REQUEST_TIMED_OUT),
        (NotMasterError("a SLAVE"), Code.NOT_LEADER_OR_FOLLOWER),
        (MasterFencedError("lease"), Code.NOT_LEADER_OR_FOLLOWER),
        (StoreShutDownError("stopping"), Code.NOT_LEADER_OR_FOLLOWER),
        (InSyncReplicasNotEnoughError("1 of 2"), Code.NOT_ENOUGH_REPLICAS),
        (DiskFullError("full"), Code.KAFKA_STORAGE_ERROR),
        (FlushFailedError("fsync"), Code.KAFKA_STORAGE_ERROR),
    ],
)
def test_store_errors_are_retriable_kafka_codes(exc: Exception, code: Code) -> None:
    """Each refusal of the store before an append is the code Kafka answers the same state
    with, all retriable in the clients."""
    assert code_for(exc) is code
