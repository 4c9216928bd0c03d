"""``to_inputs``'s fast path (a message with only body + unique id, what the SDK sends for a bare
``send()``) must build exactly what the general path builds, and keep the same checks."""

from __future__ import annotations

import pytest
from wharf.broker.errors import InvalidArgumentError
from wharf.broker.frontends.v1.convert import to_inputs
from wharf.store.codec import PROPERTY_DELAY_TIME_LEVEL, PROPERTY_TAGS, PROPERTY_UNIQ_KEY
from wharf.store.codec.ids import UniqueIdGenerator
from wharf.store.model import PutStatus
from wharf.v1 import common_pb2, messaging_pb2

from tests.broker.test_processors import Broker, start_broker
from tests.inproc import InProcFactory

Msg = common_pb2.Message
HOST = "10.0.0.9:5555"


def convert(messages: list[common_pb2.Message], max_size: int = 1024) -> tuple:  # type: ignore[type-arg]
    return to_inputs(messages, UniqueIdGenerator(), max_size, 18, HOST)


def test_bare_messages_get_only_their_unique_id_property() -> None:
    inputs, ids, delay = convert([Msg(body=b"a", unique_id="U1"), Msg(body=b"bb", unique_id="U2")])
    assert ids == ["U1", "U2"] and delay == 0
    assert [(i.body, i.properties) for i in inputs] == [
        (b"a", {PROPERTY_UNIQ_KEY: "U1"}),
        (b"bb", {PROPERTY_UNIQ_KEY: "U2"}),
    ]
    assert all(
        (i.flag, i.sys_flag, i.born_timestamp, i.born_host) == (0, 0, 0, HOST) for i in inputs
    )


def test_fast_and_general_paths_mix_in_one_batch_in_order() -> None:
    inputs, ids, _ = convert(
        [
            Msg(body=b"plain", unique_id="U1"),
            Msg(body=b"tagged", unique_id="U2", tags="t"),
            Msg(body=b"no-id"),  # no unique id: the broker makes one
            Msg(body=b"plain2", unique_id="U4"),
        ]
    )
    assert [i.body for i in inputs] == [b"plain", b"tagged", b"no-id", b"plain2"]
    assert ids[0] == "U1" and ids[1] == "U2" and ids[3] == "U4" and len(ids[2]) == 32
    assert inputs[1].properties == {PROPERTY_TAGS: "t", PROPERTY_UNIQ_KEY: "U2"}
    assert inputs[2].properties == {PROPERTY_UNIQ_KEY: ids[2]}


def test_two_field_messages_that_are_not_body_and_id_take_the_general_path() -> None:
    inputs, ids, _ = convert([Msg(body=b"x", tags="only-tag")])
    assert inputs[0].properties[PROPERTY_TAGS] == "only-tag" and len(ids[0]) == 32
    inputs, _, _ = convert([Msg(body=b"x", flag=7)])
    assert inputs[0].flag == 7


def test_fast_path_still_rejects_oversized_bodies_with_the_index() -> None:
    with pytest.raises(InvalidArgumentError, match=r"message #1: body is 11 bytes"):
        convert([Msg(body=b"ok", unique_id="U1"), Msg(body=b"x" * 11, unique_id="U2")], 10)


def test_empty_body_with_an_id_is_still_rejected() -> None:
    with pytest.raises(InvalidArgumentError, match="body is empty"):
        convert([Msg(unique_id="U1")])


def test_delayed_batches_keep_their_delay_property() -> None:
    inputs, _, delay = convert([Msg(body=b"a", unique_id="U1", delay_level=3)])
    assert delay == 3
    assert inputs[0].properties == {PROPERTY_UNIQ_KEY: "U1", PROPERTY_DELAY_TIME_LEVEL: "3"}


# ---------------------------------------------------------------- replies, over the real server
@pytest.fixture
async def fake_store_broker(inproc_broker: InProcFactory) -> Broker:
    return await start_broker(inproc_broker)


async def test_every_reply_entry_describes_its_own_message(fake_store_broker: Broker) -> None:
    broker = fake_store_broker
    messages = [Msg(body=b"m%d" % i, unique_id=f"{i:032X}") for i in range(40)]
    messages[7] = Msg(body=b"m7")  # the broker makes this one's id
    request = messaging_pb2.SendMessageRequest(
        topic="entries", queue_id=2, messages=messages, request_id=9
    )
    replies = [r async for r in broker.msg.SendMessageStream(iter([request]))]
    assert len(replies) == 1 and replies[0].request_id == 9
    results = replies[0].results
    assert len(results) == 40
    assert [r.queue_offset for r in results] == list(range(40))
    assert all(r.status == messaging_pb2.SEND_OK and r.queue_id == 2 for r in results)
    assert [r.msg_id for i, r in enumerate(results) if i != 7] == [
        f"{i:032X}" for i in range(40) if i != 7
    ]
    assert len(results[7].msg_id) == 32 and results[7].msg_id != f"{7:032X}"
    offsets = [r.commit_log_offset for r in results]
    assert offsets == sorted(set(offsets))
    pulled = await broker.msg.PullMessage(
        messaging_pb2.PullMessageRequest(
            consumer_group="g", topic="entries", queue_id=2, queue_offset=0, max_messages=64
        )
    )
    assert [(m.body, m.msg_id, m.offset_msg_id, m.commit_log_offset) for m in pulled.messages] == [
        (b"m%d" % i, r.msg_id, r.offset_msg_id, r.commit_log_offset) for i, r in enumerate(results)
    ]


async def test_a_flush_timeout_marks_every_entry_of_the_stream_reply(
    fake_store_broker: Broker,
) -> None:
    broker = fake_store_broker
    broker.controller.store.put_status = PutStatus.FLUSH_DISK_TIMEOUT  # type: ignore[attr-defined]
    request = messaging_pb2.SendMessageRequest(
        topic="ft", messages=[Msg(body=b"x", unique_id=f"U{i}") for i in range(5)]
    )
    replies = [r async for r in broker.msg.SendMessageStream(iter([request]))]
    assert [r.status for r in replies[0].results] == [messaging_pb2.FLUSH_DISK_TIMEOUT] * 5
