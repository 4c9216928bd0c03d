"""decode_dispatches (the ReputService's batch decoder) against decode_dispatch, its reference."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wharf.store import codec as fmt
from wharf.store.errors import CorruptRecordError
from wharf.store.model import MessageInput

BASE = 1 << 40  # commit log offset of the buffer's first byte

_chars = st.characters(exclude_characters="\x01\x02", exclude_categories=("Cs",))
_keys = st.lists(st.text(st.sampled_from("ab-1 é"), max_size=6), max_size=3).map(" ".join)
properties = st.fixed_dictionaries(
    {},
    optional={"TAGS": st.text(_chars, max_size=8), "KEYS": _keys, "UNIQ_KEY": st.text(_chars)},
) | st.dictionaries(st.text(_chars, min_size=1, max_size=8), st.text(_chars, max_size=12))
messages = st.lists(
    st.builds(
        MessageInput,
        body=st.binary(min_size=1, max_size=64),
        properties=properties,
        sys_flag=st.sampled_from([0, 2, 4, 8, 12]),
        born_timestamp=st.integers(0, 2**40),
        prepared_transaction_offset=st.integers(0, 2**40),
    ),
    min_size=1,
    max_size=8,
)


def encode(topic: str, batch: list[MessageInput], lead: int = 0) -> tuple[bytes, list[int]]:
    encoded = fmt.encode_batch(topic, 3, 77, batch, BASE + lead, 1234, "10.0.0.9:8081", 1 << 20)
    return bytes(lead) + bytes(encoded.data), [o - BASE for o in encoded.offsets]


def _fields(req: fmt.DispatchRequest) -> tuple[object, ...]:
    return tuple(getattr(req, name) for name in fmt.DispatchRequest.__slots__)


@settings(max_examples=80, deadline=None)
@given(messages, st.sampled_from(["T", "TopicA", "%RETRY%g"]), st.integers(0, 16))
def test_batch_dispatch_decode_equals_one_by_one_decode(batch, topic, lead):
    data, positions = encode(topic, batch, lead)
    expected = [_fields(fmt.decode_dispatch(data, pos, BASE)) for pos in positions]
    for buf in (data, bytearray(data), memoryview(data)):
        assert [_fields(r) for r in fmt.decode_dispatches(buf, positions, BASE)] == expected


def test_batch_dispatch_decode_splits_keys_as_rocketmq():
    data, positions = encode("T", [MessageInput(b"x", {"KEYS": " k1  k2 ", "UNIQ_KEY": "U"})])
    (req,) = fmt.decode_dispatches(data, positions, BASE)
    assert req.keys == ["k1", "k2"] and req.uniq_key == "U" and req.tags == ""
    assert req.commit_log_offset == BASE and req.queue_offset == 77


def test_batch_dispatch_decode_keeps_the_reference_errors():
    data, positions = encode("T", [MessageInput(b"abc", {"TAGS": "t"})] * 2)
    broken = bytearray(data)
    broken[positions[1] + 4] ^= 0xFF  # magic of the second record
    with pytest.raises(CorruptRecordError, match="magic"):
        fmt.decode_dispatches(bytes(broken), positions, BASE)
    with pytest.raises(CorruptRecordError, match="add up"):
        fmt.decode_dispatches(data[:-1], positions, BASE)
    with pytest.raises(CorruptRecordError, match="truncated"):
        fmt.decode_dispatches(data, [len(data) - 10], BASE)
