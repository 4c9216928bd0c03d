"""``to_inputs``'s fast path (a message with only body + unique id, what the SDK sends for a bare
``send()``) must build exactly what the general path builds, and keep the same checks."""

from __future__ import annotations

import pytest
from wharf.v1 import common_pb2

from broker.convert import to_inputs
from broker.errors import InvalidArgumentError
from broker.message_ids import UniqueIdGenerator
from store.format import PROPERTY_DELAY_TIME_LEVEL, PROPERTY_TAGS, PROPERTY_UNIQ_KEY

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
