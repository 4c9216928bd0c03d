"""A batch refused before its append by a state that passes (a master's lease run out, which a
renewal ends; too few in-sync replicas) leaves a gap in its producer's sequences: the requests
pipelined behind it are refused alike (REQUEST_TIMED_OUT) until it is re-sent, never
OUT_OF_ORDER_SEQUENCE_NUMBER once the state passed. librdkafka takes that answer for "skipped
sequence numbers" and bumps its epoch: every batch it had no answer for, on any partition, is
then re-sent under new sequences, and one that was stored (its acknowledgement failed) is
stored twice. The fault campaign saw it after a 2 s SIGSTOP of the master (seed 20261129: the
fence tripped on resume, lifted by the next renewal between two buffered requests) and under
a replica's power cut (seed 31337).

In process: the real store and handler, the refusal staged on the core's ``check_writable``
(the fence), an acknowledgement failure on its ``durable_many``."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from wharf.store.errors import InSyncReplicasNotEnoughError, MasterFencedError
from wharf.store.model import PutResult, PutStatus

from tests.broker.kafka.kafka_helpers import start_kafka
from tests.broker.kafka.test_idempotence import PRODUCE, high, idempotent, new_pid, send
from tests.inproc import InProcFactory

NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS = 6, 7, 19


def _body(records: bytes) -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": "idem", "partition_data": [{"index": 0, "records": records}]}],
    }


@pytest.mark.parametrize(
    ("refusal", "code"),
    [
        (MasterFencedError("the lease ran out (a test's)"), NOT_LEADER_OR_FOLLOWER),
        (InSyncReplicasNotEnoughError("too few in sync (a test's)"), NOT_ENOUGH_REPLICAS),
    ],
    ids=["fenced", "in-sync"],
)
async def test_a_passing_refusal_refuses_the_pipelined_batches_alike(
    inproc_broker: InProcFactory,
    monkeypatch: pytest.MonkeyPatch,
    refusal: Exception,
    code: int,
) -> None:
    """Batch 1 is refused (the master fenced) while 2 and 3 are pipelined behind it; the fence
    is lifted by their turn (a renewal answered), and still they are refused alike: appended,
    2 was OUT_OF_ORDER_SEQUENCE_NUMBER. The client re-sends 1, 2, 3 and each is stored once."""
    kafka = await start_kafka(inproc_broker)
    store = kafka.controller.ctx.store
    client = await kafka.client()
    pid = await new_pid(client)
    assert await send(client, idempotent(pid, 0, 0, b"zero")) == (0, 0)

    core = kafka.controller.ctx.port.send
    writable = core.check_writable
    refusals = 0

    def refuse_once() -> None:
        nonlocal refusals
        refusals += 1
        monkeypatch.setattr(core, "check_writable", writable)  # lifted from now on
        raise refusal

    monkeypatch.setattr(core, "check_writable", refuse_once)
    batches = [idempotent(pid, 0, seq, b"v%d" % seq) for seq in (1, 2, 3)]
    sent = [client.send(PRODUCE, 8, _body(batch)) for batch in batches]
    await client.writer.drain()
    rows = []
    for correlation in sent:
        got, response = await client.receive(PRODUCE, 8)  # v8: error_message
        row = response["responses"][0]["partition_responses"][0]
        assert got == correlation
        rows.append((row["error_code"], row["base_offset"], row["error_message"]))
    assert refusals == 1
    assert [r[:2] for r in rows] == [(code, -1), (REQUEST_TIMED_OUT, -1), (REQUEST_TIMED_OUT, -1)]
    assert all("follows sequence 1, refused before it was written" in r[2] for r in rows[1:])
    assert await high(store) == 1  # nothing of them written

    for seq, batch in zip((1, 2, 3), batches, strict=True):  # the client's retries
        assert await send(client, batch) == (0, seq)
    assert await high(store) == 4
    assert not kafka.part.handlers.producers.out_of_order  # type: ignore[union-attr]
    await client.close()
    await kafka.close()


def _create_topic_blocking(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic("gap", 2, 1)]).values():
        future.result(15)


def _produce_blocking(bootstrap: str, count: int, errors: list[str]) -> list[Any]:
    """confluent-kafka producing ``count`` records alternately to partitions 0 and 1 (a
    record every 20 ms; pipelined once the broker stalls), acks all; its delivery reports."""
    delivered: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 0,
            "retry.backoff.ms": 50,
            "message.timeout.ms": 60_000,
            "error_cb": lambda err: errors.append(str(err)),
        }
    )

    def report(err: Any, msg: Any) -> None:
        delivered.append((None if err is None else str(err), msg.partition(), msg.value()))

    for i in range(count):
        producer.produce("gap", b"v%04d" % i, partition=i % 2, on_delivery=report)
        producer.poll(0.02)
    assert producer.flush(50) == 0
    return delivered


async def test_confluent_kafka_stores_each_record_once_across_a_stall_and_a_fence(
    inproc_broker: InProcFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fault campaign's SIGSTOP of a master, staged: the event loop stalls 0.5 s (the
    pause) while librdkafka keeps sending; the acknowledgement of what was waiting fails
    (NOT_ENOUGH_REPLICAS_AFTER_APPEND: stored, "possibly persisted"), and the first request
    read after the stall finds the lease run out (fenced, NOT_LEADER_OR_FOLLOWER), lifted for
    the next one. Every record is delivered and stored once, and librdkafka never sees
    OUT_OF_ORDER_SEQUENCE_NUMBER (it would bump its epoch and re-send the stored batches
    under new sequences: stored twice)."""
    kafka = await start_kafka(inproc_broker)
    store = kafka.controller.ctx.store
    await asyncio.to_thread(_create_topic_blocking, kafka.address)
    core = kafka.controller.ctx.port.send
    durable_many, writable = core.durable_many, core.check_writable
    state = {"armed": False, "stalled": 0, "failed": 0, "fenced": 0}

    async def stalling_durable(written: Any) -> Any:
        results = await durable_many(written)
        if not state["armed"] or state["failed"] >= 2:
            return results
        if not state["stalled"]:
            state["stalled"] = 1
            # the pause, as SIGSTOP makes it: nothing of the loop runs, the requests queue up
            time.sleep(0.5)  # noqa: ASYNC251
            monkeypatch.setattr(core, "check_writable", fence_once)
        state["failed"] += 1  # stored; its acknowledgement fails
        return [PutResult(PutStatus.FLUSH_SLAVE_TIMEOUT, r.append) for r in results]

    def fence_once() -> None:
        state["fenced"] += 1
        monkeypatch.setattr(core, "check_writable", writable)  # the renewal answered
        raise MasterFencedError("the lease ran out during the pause (a test's)")

    monkeypatch.setattr(core, "durable_many", stalling_durable)
    errors: list[str] = []
    count = 200
    producing = asyncio.create_task(
        asyncio.to_thread(_produce_blocking, kafka.address, count, errors)
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        await asyncio.sleep(0.01)  # polls the store (no event to wait on)
        if store.get_max_offset("gap", 0) >= count // 8:
            break
    # past the first requests (the first batch holds what queued up while connecting): one
    # record a request from now on, pipelined up to 5 once the stall holds the answers
    state["armed"] = True
    delivered = await asyncio.wait_for(producing, 90)
    assert state == {"armed": True, "stalled": 1, "failed": 2, "fenced": 1}
    assert errors == []
    assert sorted(delivered) == sorted((None, i % 2, b"v%04d" % i) for i in range(count)), delivered
    await store.wait_dispatched(5)
    stored = [store.get_max_offset("gap", q) for q in (0, 1)]
    assert stored == [count // 2, count // 2]  # each record once
    assert not kafka.part.handlers.producers.out_of_order  # type: ignore[union-attr]
    await kafka.close()
