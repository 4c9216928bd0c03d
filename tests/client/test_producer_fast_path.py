"""Semantics the producer's hot path must keep: the bare-body fast path of ``send()``, the
inlined retry loop, the direct SendResult building and the once-per-ms unique id head."""

from __future__ import annotations

import asyncio
import itertools
import re
from typing import Any

import pytest
from wharf.v1 import common_pb2, messaging_pb2

import client.ids as ids_module
from client import (
    ClientClosedError,
    InvalidArgumentError,
    Producer,
    PullConsumer,
    SendResult,
    SendStatus,
    UnavailableError,
)
from client.consumer.pull import PullStatus
from client.ids import UniqueIdGenerator
from tests.harness import BrokerProcess

_HEX32 = re.compile(r"[0-9A-F]{32}")


# ---------------------------------------------------------------- unique ids (no sockets)
def test_ids_stay_distinct_and_follow_the_clock_across_milliseconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1_700_000_000.000]
    monkeypatch.setattr(ids_module.time, "time", lambda: clock[0])
    gen = UniqueIdGenerator(ip=b"\x0a\x00\x00\x01", pid=7)
    first = [gen.next_id() for _ in range(3)]
    clock[0] += 0.005  # 5 ms later: the time part of the head must move
    later = gen.next_id()
    batch = gen.next_ids(4)
    after_batch = gen.next_id()
    every = [*first, later, *batch, after_batch]
    assert len(set(every)) == len(every)
    assert all(_HEX32.fullmatch(i) for i in every)
    assert all(i.startswith("0A0000010007") for i in every)  # ip + pid
    elapsed = [int(i[20:28], 16) for i in every]
    assert elapsed[0] == elapsed[1] == elapsed[2]
    assert elapsed[3] == elapsed[0] + 5
    counters = [int(i[28:], 16) for i in every]
    assert all((b - a) & 0xFFFF == 1 for a, b in itertools.pairwise(counters))


def test_id_counter_wraps_at_16_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ids_module.time, "time", lambda: 1_700_000_000.0)
    gen = UniqueIdGenerator()
    gen._counter = 0xFFFE
    assert [gen.next_id()[28:] for _ in range(3)] == ["FFFF", "0000", "0001"]


# ---------------------------------------------------------------- producer with a fake wire
class FakeWire:
    """Stands in for the broker: records each batch, answers per message (or fails)."""

    def __init__(self, status: int = messaging_pb2.SEND_OK, failures: int = 0) -> None:
        self.batches: list[list[common_pb2.Message]] = []
        self.status = status
        self.failures = failures

    async def __call__(self, key: Any, wires: list[common_pb2.Message]) -> list[Any]:
        self.batches.append([common_pb2.Message.FromString(w.SerializeToString()) for w in wires])
        await asyncio.sleep(0)
        if self.failures:
            self.failures -= 1
            raise UnavailableError("connection reset (simulated)")
        reply = messaging_pb2.SendMessageResponse()
        for i, wire in enumerate(wires):
            reply.results.add(
                status=self.status,
                msg_id=wire.unique_id,
                offset_msg_id=f"{i:032X}",
                queue_id=key[1] or 0,
                queue_offset=100 + i,
                commit_log_offset=1000 * i,
            )
        return list(reply.results)


async def started_producer(fake: FakeWire, **options: Any) -> Producer:
    producer = Producer("127.0.0.1:1", **options)
    await producer.start()
    assert producer._batcher is not None
    producer._batcher._send_batch = fake
    return producer


async def test_bare_body_goes_out_with_only_body_and_a_fresh_unique_id() -> None:
    fake = FakeWire()
    producer = await started_producer(fake)
    results = await asyncio.gather(*(producer.send("t", b"m%d" % i) for i in range(50)))
    wires = [w for batch in fake.batches for w in batch]
    assert [w.body for w in wires] == [b"m%d" % i for i in range(50)]
    assert all(w.ListFields()[0][0].name == "body" for w in wires)
    assert all(len(w.ListFields()) == 2 and _HEX32.fullmatch(w.unique_id) for w in wires)
    assert len({w.unique_id for w in wires}) == 50
    # Every call gets ITS OWN entry, as a real SendResult tuple.
    assert all(type(r) is SendResult for r in results)
    assert [r.msg_id for r in results] == [w.unique_id for w in wires]
    assert [r.queue_offset for r in results] == [100 + i for i in range(50)]
    assert all(r.status is SendStatus.SEND_OK and r.topic == "t" for r in results)


async def test_other_options_still_take_the_full_wire_path() -> None:
    fake = FakeWire()
    big = b"abc" * 4000  # over the 4 KiB threshold: compressed
    producer = await started_producer(fake)
    await producer.send("t", "text body", tags="paid", keys=("k1",), properties={"p": "v"})
    await producer.send("t", big)
    await producer.send("t", b"later", delay_level=2)
    text, compressed, delayed = (batch[0] for batch in fake.batches)
    assert (text.body, text.tags, list(text.keys), dict(text.properties)) == (
        b"text body",
        "paid",
        ["k1"],
        {"p": "v"},
    )
    assert compressed.compressed and len(compressed.body) < len(big)
    assert delayed.delay_level == 2
    assert all(_HEX32.fullmatch(w.unique_id) for w in (text, compressed, delayed))


async def test_flush_disk_timeout_is_reported_as_such_not_ok() -> None:
    producer = await started_producer(FakeWire(status=messaging_pb2.FLUSH_DISK_TIMEOUT))
    result = await producer.send("t", b"x")
    assert result.status is SendStatus.FLUSH_DISK_TIMEOUT


async def test_a_retried_send_resends_the_same_unique_id() -> None:
    fake = FakeWire(failures=1)
    producer = await started_producer(fake)
    result = await producer.send("t", b"x")
    assert len(fake.batches) == 2
    assert fake.batches[0][0].unique_id == fake.batches[1][0].unique_id == result.msg_id


async def test_bad_bodies_and_closed_producers_fail_clearly() -> None:
    producer = await started_producer(FakeWire())
    with pytest.raises(InvalidArgumentError):
        await producer.send("t", b"")
    with pytest.raises(InvalidArgumentError):
        await producer.send("t", 123)  # type: ignore[arg-type]
    await producer.close()
    with pytest.raises(ClientClosedError):
        await producer.send("t", b"x")
    with pytest.raises(ClientClosedError):
        await Producer("127.0.0.1:1").send("t", b"x")  # never started


# ---------------------------------------------------------------- against the real daemon
async def test_concurrent_bare_sends_round_trip_with_their_own_ids(
    broker: BrokerProcess, name: str
) -> None:
    bodies = [b"fast-%04d" % i for i in range(400)]
    async with Producer(broker.endpoint) as producer:
        results = await asyncio.gather(*(producer.send(name, body) for body in bodies))
    assert len({r.msg_id for r in results}) == len(bodies)
    assert all(r.status is SendStatus.SEND_OK for r in results)
    sent = {
        r.msg_id: (body, r.queue_id, r.queue_offset)
        for r, body in zip(results, bodies, strict=True)
    }
    received = {}
    async with PullConsumer(broker.endpoint, "fast-path-reader") as consumer:
        for queue in await consumer.queues(name):
            offset = 0
            while True:
                pulled = await consumer.pull(queue, offset, max_messages=256)
                received.update(
                    {m.msg_id: (m.body, m.queue_id, m.queue_offset) for m in pulled.messages}
                )
                if pulled.status != PullStatus.FOUND:
                    break
                offset = pulled.next_begin_offset
    assert received == sent


# ---------------------------------------------------------------- pre-encoded stream requests
@pytest.mark.parametrize("count", [1, 3, 200])
def test_encoded_request_parses_as_the_same_request(count: int) -> None:
    from client.send_stream import encode_request, encode_varint

    wires = [
        common_pb2.Message(body=b"b" * (i * 97 + 1), unique_id=f"{i:032X}", tags="t" * (i % 2))
        for i in range(count)
    ]
    head = messaging_pb2.SendMessageRequest(
        topic="orders", queue_id=0, producer_group="G"
    ).SerializeToString()
    parsed = messaging_pb2.SendMessageRequest.FromString(encode_request(head, 300 + count, wires))
    expected = messaging_pb2.SendMessageRequest(
        topic="orders", queue_id=0, producer_group="G", request_id=300 + count, messages=wires
    )
    assert parsed == expected and parsed.HasField("queue_id")
    assert encode_varint(0) == b"\x00"
    for value in (1, 127, 128, 300, 16383, 16384, 2**35 + 5):
        wire = messaging_pb2.SendMessageRequest(request_id=value).SerializeToString()
        assert encode_varint(value) == wire[1:]  # the wire minus the field tag
