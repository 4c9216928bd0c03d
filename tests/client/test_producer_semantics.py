"""Semantics the producer's hot path must keep: the bare-body fast path of ``send()``, the
inlined retry loop, the direct SendResult building and the once-per-ms unique id head."""

from __future__ import annotations

import asyncio
import itertools
import re
import zlib
from typing import Any, NamedTuple

import pytest
import wharf.client.ids as ids_module
from wharf.client import (
    ClientClosedError,
    InvalidArgumentError,
    Message,
    Producer,
    PullConsumer,
    SendResult,
    SendStatus,
    UnavailableError,
)
from wharf.client.consumer.pull import PullStatus
from wharf.client.ids import UniqueIdGenerator
from wharf.store.codec.records import decode_record
from wharf.v1 import common_pb2, messaging_pb2

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
class Sent(NamedTuple):
    """What the fake broker saw of one message (decoded from the record, or the proto)."""

    body: bytes
    unique_id: str
    properties: dict[str, str]
    sys_flag: int
    as_message: common_pb2.Message | None  # set for the message form (delayed messages)


class FakeWire:
    """Stands in for the broker: decodes each batch, answers per message (or fails)."""

    def __init__(self, status: SendStatus = SendStatus.SEND_OK, failures: int = 0) -> None:
        self.batches: list[list[Sent]] = []
        self.status = status
        self.failures = failures

    async def __call__(self, key: Any, items: list[Any]) -> list[SendResult]:
        topic, queue_id, as_messages = key
        if as_messages:
            sent = [Sent(w.body, w.unique_id, {}, int(w.compressed), w) for w in items]
        else:
            sent = []
            for record, uid in items:
                stored = decode_record(record)  # the store's own decoder reads it back
                assert stored.topic == topic and stored.properties["UNIQ_KEY"] == uid
                sent.append(Sent(stored.body, uid, stored.properties, stored.sys_flag, None))
        self.batches.append(sent)
        await asyncio.sleep(0)
        if self.failures:
            self.failures -= 1
            raise UnavailableError("connection reset (simulated)")
        return [
            SendResult(self.status, m.unique_id, f"{i:032X}", queue_id or 0, 100 + i, topic)
            for i, m in enumerate(sent)
        ]


async def started_producer(fake: FakeWire, **options: Any) -> Producer:
    producer = Producer("127.0.0.1:1", **options)
    await producer.start()
    assert producer._batcher is not None
    producer._batcher._send_batch = fake
    return producer


async def test_bare_body_goes_out_as_a_record_with_a_fresh_unique_id() -> None:
    fake = FakeWire()
    producer = await started_producer(fake)
    results = await asyncio.gather(*(producer.send("t", b"m%d" % i) for i in range(50)))
    sent = [m for batch in fake.batches for m in batch]
    assert [m.body for m in sent] == [b"m%d" % i for i in range(50)]
    assert all(m.properties == {"UNIQ_KEY": m.unique_id} for m in sent)
    assert all(_HEX32.fullmatch(m.unique_id) and m.as_message is None for m in sent)
    assert len({m.unique_id for m in sent}) == 50
    # Every call gets ITS OWN entry, as a real SendResult tuple.
    assert all(type(r) is SendResult for r in results)
    assert [r.msg_id for r in results] == [m.unique_id for m in sent]
    assert [r.queue_offset for r in results] == [100 + i for i in range(50)]
    assert all(r.status is SendStatus.SEND_OK and r.topic == "t" for r in results)


async def test_options_land_in_the_record_and_delays_take_the_message_form() -> None:
    fake = FakeWire()
    big = b"abc" * 4000  # over the 4 KiB threshold: compressed
    producer = await started_producer(fake)
    await producer.send("t", "text body", tags="paid", keys=("k1", "k2"), properties={"p": "v"})
    await producer.send("t", big)
    await producer.send("t", b"later", delay_level=2)
    text, compressed, delayed = (batch[0] for batch in fake.batches)
    assert (text.body, text.properties) == (
        b"text body",
        {"p": "v", "TAGS": "paid", "KEYS": "k1 k2", "UNIQ_KEY": text.unique_id},
    )
    assert compressed.sys_flag == 1 and len(compressed.body) < len(big)
    assert zlib.decompress(compressed.body) == big
    assert delayed.as_message is not None and delayed.as_message.delay_level == 2
    assert all(_HEX32.fullmatch(m.unique_id) for m in (text, compressed, delayed))
    with pytest.raises(InvalidArgumentError, match="separator"):
        await producer.send("t", b"x", properties={"a\x01b": "v"})
    with pytest.raises(InvalidArgumentError, match="invalid"):
        await producer.send("bad topic!", b"x")


async def test_send_batch_shares_requests_but_stays_contiguous() -> None:
    fake = FakeWire()
    producer = await started_producer(fake)
    batches = await asyncio.gather(
        *(producer.send_batch("t", [b"%d-%d" % (g, i) for i in range(5)]) for g in range(4))
    )
    assert len(fake.batches) == 1  # the four groups went out in one request
    for g, results in enumerate(batches):
        assert [r.queue_offset for r in results] == [100 + 5 * g + i for i in range(5)]
    bodies = [m.body for m in fake.batches[0]]
    assert bodies == [b"%d-%d" % (g, i) for g in range(4) for i in range(5)]
    with pytest.raises(InvalidArgumentError, match="mixed"):
        await producer.send_batch("t", [b"now", Message("t", b"later", delay_level=1)])


async def test_flush_disk_timeout_is_reported_as_such_not_ok() -> None:
    producer = await started_producer(FakeWire(status=SendStatus.FLUSH_DISK_TIMEOUT))
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
    # offset_msg_id is derived by the SDK from the compact reply (first commit log offset +
    # the sizes of the records before): it must name where the broker really stored each one.
    sent = {
        r.msg_id: (body, r.queue_id, r.queue_offset, r.offset_msg_id)
        for r, body in zip(results, bodies, strict=True)
    }
    received = {}
    async with PullConsumer(broker.endpoint, "fast-path-reader") as consumer:
        for queue in await consumer.queues(name):
            offset = 0
            while True:
                pulled = await consumer.pull(queue, offset, max_messages=256)
                received.update(
                    {
                        m.msg_id: (m.body, m.queue_id, m.queue_offset, m.offset_msg_id)
                        for m in pulled.messages
                    }
                )
                if pulled.status != PullStatus.FOUND:
                    break
                offset = pulled.next_begin_offset
    assert received == sent


# ---------------------------------------------------------------- pre-encoded stream requests
@pytest.mark.parametrize("count", [1, 3, 200])
def test_encoded_request_parses_as_the_same_request(count: int) -> None:
    from wharf.client.send_stream import encode_request, encode_varint

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
