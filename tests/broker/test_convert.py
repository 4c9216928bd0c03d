"""Wire <-> store conversions (the hot-path code in broker/frontends/v1/convert.py)."""

from __future__ import annotations

import pytest
from wharf.broker.errors import InvalidArgumentError
from wharf.broker.frontends.v1.convert import add_views, to_inputs
from wharf.store.codec import create_offset_msg_id
from wharf.store.codec.ids import OffsetMsgIdFormatter, UniqueIdGenerator
from wharf.store.model import StoredMessage
from wharf.v1 import common_pb2, messaging_pb2

Msg = common_pb2.Message
IDS = UniqueIdGenerator()


def convert(*messages: Msg, max_delay: int = 18) -> tuple[list, list[str], int]:  # type: ignore[type-arg]
    return to_inputs(list(messages), IDS, 100, max_delay, "10.0.0.1:5000")


def test_fields_become_store_properties_and_flags() -> None:
    inputs, uids, delay = convert(
        Msg(body=b"a", tags="T", keys=["k1", "k2"], properties={"p": "1", "TAGS": "spoof"},
            flag=7, compressed=True, unique_id="U1", born_timestamp=123),
        Msg(body=b"b"),
    )  # fmt: skip
    first, second = inputs
    assert first.properties == {"p": "1", "TAGS": "T", "KEYS": "k1 k2", "UNIQ_KEY": "U1"}
    assert (first.flag, first.sys_flag, first.born_timestamp) == (7, 1, 123)
    assert first.born_host == "10.0.0.1:5000"
    assert second.sys_flag == 0 and second.properties["UNIQ_KEY"] == uids[1]
    assert len(uids[1]) == 32 and uids[0] == "U1" and delay == 0


def test_delay_level_is_shared_by_the_batch_and_clamped() -> None:
    inputs, _, delay = convert(Msg(body=b"a", delay_level=40), Msg(body=b"b", delay_level=40))
    assert delay == 40 and [i.properties["DELAY"] for i in inputs] == ["18", "18"]
    with pytest.raises(InvalidArgumentError, match="share a delay level"):
        convert(Msg(body=b"a", delay_level=2), Msg(body=b"b"))
    with pytest.raises(InvalidArgumentError, match="delay_level"):
        convert(Msg(body=b"a", delay_level=-1))


@pytest.mark.parametrize(
    ("message", "text"),
    [
        (Msg(body=b""), "#0: body is empty"),
        (Msg(body=b"x" * 101), "maxMessageSize is 100"),
        (Msg(body=b"x", properties={"a": "b\x02"}), "reserved"),
    ],
)
def test_bad_messages_are_refused(message: Msg, text: str) -> None:
    with pytest.raises(InvalidArgumentError, match=text):
        convert(message)


def test_views_lift_system_properties_and_match_the_store_offset_id() -> None:
    stored = StoredMessage(
        "t", 2, 5, 4096, 200, b"body", {"UNIQ_KEY": "U", "TAGS": "T", "KEYS": "a b", "x": "y"},
        3, 1, 0, 10, "1.2.3.4:5", 11, "127.0.0.1:8081", 2, 0,
    )  # fmt: skip
    response = messaging_pb2.PullMessageResponse()
    add_views(response.messages, [stored], OffsetMsgIdFormatter("127.0.0.1:8081"))
    view = response.messages[0]
    assert (view.msg_id, view.tags, list(view.keys)) == ("U", "T", ["a", "b"])
    assert dict(view.properties) == {"x": "y"}
    assert view.offset_msg_id == create_offset_msg_id("127.0.0.1:8081", 4096)
    assert (view.compressed, view.flag, view.reconsume_times) == (True, 3, 2)
    assert (view.queue_id, view.queue_offset, view.store_size) == (2, 5, 200)
