"""client.records: raw CommitLog records -> ReceivedMessage (lazy decode, exact tag re-check),
and the SDK consumers' raw pulls against the real daemon with tag-hash collisions."""

from __future__ import annotations

import asyncio
import zlib

import grpc
import pytest
from wharf.client import ConsumeResult, PullConsumer, PushConsumer, ReceivedMessage
from wharf.client.errors import BrokerInternalError
from wharf.client.message import MessageQueue, to_wire
from wharf.client.records import RecordMessage, exact_tags, parse_records
from wharf.store.codec.hashes import java_string_hash
from wharf.store.codec.ids import create_offset_msg_id
from wharf.store.codec.layout import SYSFLAG_COMPRESSED
from wharf.store.codec.records import encode_batch
from wharf.store.model import MessageInput
from wharf.v1 import common_pb2, messaging_pb2, messaging_pb2_grpc

from tests.harness import BrokerProcess

STORE_HOST = "10.1.2.3:10911"
TAGS = ["BB", "Aa", "BB", "x", "Aa"]


async def send(endpoint: str, topic: str, wires: list[common_pb2.Message]) -> None:
    """Straight through the stub (one batch into queue 0), independent of the Producer."""
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        await stub.SendMessage(
            messaging_pb2.SendMessageRequest(topic=topic, queue_id=0, messages=wires), timeout=10
        )


def encoded(*inputs: MessageInput, start: int = 4096) -> bytes:
    return encode_batch(
        "orders", 3, 40, list(inputs), start, 1_700_000_000_123, STORE_HOST, 1 << 20
    ).data


def test_parse_records_decodes_every_field_like_the_view_path() -> None:
    inputs = [
        MessageInput(b"first", {"TAGS": "paid", "KEYS": "k1 k2", "UNIQ_KEY": "U1", "x": "y"},
                     flag=7, born_timestamp=1_600_000_000_000, born_host="192.168.0.9:5000",
                     reconsume_times=2),
        MessageInput(zlib.compress(b"z" * 9000), {"UNIQ_KEY": "U2", "RETRY_TOPIC": "orig"},
                     sys_flag=SYSFLAG_COMPRESSED),
    ]  # fmt: skip
    data = encoded(*inputs)
    first, second = parse_records(data)
    assert isinstance(first, RecordMessage) and isinstance(first, ReceivedMessage)
    assert first.body == b"first" and first.text() == "first"
    assert (first.tags, first.keys, first.msg_id) == ("paid", ("k1", "k2"), "U1")
    assert first.properties == {"x": "y"}  # KEYS / TAGS / UNIQ_KEY are fields, as in a view
    assert (first.topic, first.queue_topic, first.queue_id, first.queue_offset) == (
        "orders", "orders", 3, 40,
    )  # fmt: skip
    assert first.commit_log_offset == 4096 and first.store_size == len(data) - second.store_size
    assert first.offset_msg_id == create_offset_msg_id(STORE_HOST, 4096)
    assert (first.born_timestamp, first.store_timestamp) == (1_600_000_000_000, 1_700_000_000_123)
    assert (first.born_host, first.store_host) == ("192.168.0.9:5000", STORE_HOST)
    assert (first.flag, first.reconsume_times) == (7, 2)
    # Compressed bodies are inflated; a retried message reports its original topic.
    assert second.body == b"z" * 9000 and second.view.compressed
    assert (second.topic, second.queue_topic, second.queue_offset) == ("orig", "orders", 41)
    assert second.commit_log_offset == 4096 + first.store_size
    # The equivalent MessageView, for code that reads ``.view``.
    view = first.view
    assert (view.body, view.tags, list(view.keys), view.msg_id) == (
        b"first",
        "paid",
        ["k1", "k2"],
        "U1",
    )
    assert ReceivedMessage.from_view(view).properties == first.properties


def test_exact_tags_drop_hash_collisions() -> None:
    assert java_string_hash("Aa") == java_string_hash("BB")
    data = encoded(
        MessageInput(b"1", {"TAGS": "Aa"}), MessageInput(b"2", {"TAGS": "BB"}),
        MessageInput(b"3", {}), MessageInput(b"4", {"TAGS": "c"}),
    )  # fmt: skip
    assert [m.body for m in parse_records(data)] == [b"1", b"2", b"3", b"4"]
    assert [m.body for m in parse_records(data, exact_tags("Aa"))] == [b"1"]
    assert [m.body for m in parse_records(data, exact_tags(" BB || c "))] == [b"2", b"4"]
    assert exact_tags("*") is None and exact_tags("") is None


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d[:-1],  # torn: TOTALSIZE runs past the reply
        lambda d: d[:50],  # truncated header
        lambda d: d[:4] + b"\0\0\0\0" + d[8:],  # bad magic
        lambda d: (10).to_bytes(4, "big") + d[4:],  # TOTALSIZE too small
        lambda d: d[:84] + (len(d)).to_bytes(4, "big") + d[88:],  # BODYLENGTH past the end
    ],
)
def test_malformed_records_raise_a_clear_error(damage) -> None:  # type: ignore[no-untyped-def]
    data = encoded(MessageInput(b"body", {"TAGS": "t", "UNIQ_KEY": "U"}))
    with pytest.raises(BrokerInternalError, match="malformed raw record"):
        parse_records(damage(data))


async def test_pull_consumer_rechecks_tags_the_broker_matched_by_hash(
    broker: BrokerProcess, name: str
) -> None:
    wires = [to_wire(f"m{i}", tags=tag, keys=(f"k{i}",)) for i, tag in enumerate(TAGS)]
    wires.append(to_wire(b"y" * 9000, tags="Aa"))  # compressed on the wire
    assert wires[-1].compressed
    await send(broker.endpoint, name, wires)
    queue = MessageQueue(name, 0)
    async with PullConsumer(broker.endpoint, name) as consumer:
        result = await consumer.pull(queue, 0, max_messages=64, tag_expression="Aa")
        assert [m.body for m in result.messages] == [b"m1", b"m4", b"y" * 9000]
        assert [m.queue_offset for m in result.messages] == [1, 4, 5]
        assert [m.keys for m in result.messages[:2]] == [("k1",), ("k4",)]
        # Only a colliding tag in range: FOUND by hash on the broker, nothing after the check.
        only_bb = await consumer.pull(queue, 0, max_messages=1, tag_expression="Aa")
        assert only_bb.messages == [] and only_bb.next_begin_offset == 1
        assert only_bb.status.name == "NO_MATCHED_MSG"


async def test_push_consumer_gets_exact_tags_only(broker: BrokerProcess, name: str) -> None:
    seen: list[ReceivedMessage] = []
    done = asyncio.Event()

    async def handle(msg: ReceivedMessage) -> ConsumeResult:
        seen.append(msg)
        if len(seen) >= 3:
            done.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(
        broker.endpoint, name, handler=handle, consume_from_where="FIRST", long_poll_ms=500
    )
    consumer.subscribe(name, "BB")
    tags = ["Aa", "BB", "Aa", "BB", "BB", "Aa"]
    await send(broker.endpoint, name, [to_wire(f"m{i}", tags=t) for i, t in enumerate(tags)])
    async with consumer:
        await asyncio.wait_for(done.wait(), 20)
        await asyncio.sleep(0.3)  # anything wrongly delivered would show up meanwhile
    assert sorted(m.body for m in seen) == [b"m1", b"m3", b"m4"]
    assert all(m.tags == "BB" for m in seen)


def test_bad_properties_length_is_reported_when_first_read() -> None:
    data = encoded(MessageInput(b"body", {"TAGS": "t", "UNIQ_KEY": "U"}))
    props_length_pos = 88 + 4 + 1 + len("orders")  # header, body, topic length byte, topic
    damaged = data[:props_length_pos] + b"\0\0" + data[props_length_pos + 2 :]
    (message,) = parse_records(damaged)  # sizes are fine: walking does not read properties
    assert message.body == b"body" and message.queue_offset == 40
    with pytest.raises(BrokerInternalError, match="do not add up"):
        _ = message.tags
    with pytest.raises(BrokerInternalError, match="do not add up"):
        parse_records(damaged, exact_tags("t"))  # a tag filter reads them at once
