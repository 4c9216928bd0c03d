"""Message ids (wharf.store.codec.ids): the one unique-id generator (rolls over at month starts
as RocketMQ's MessageClientIDSetter) and the one offset message id formatter."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from wharf.store.codec.hosts import encode_host
from wharf.store.codec.ids import (
    OffsetMsgIdFormatter,
    UniqueIdGenerator,
    create_offset_msg_id,
    decode_offset_msg_id,
    format_offset_msg_id,
    host_bytes_prefix,
    month_bounds_ms,
    offset_msg_id_prefix,
)


def _ms(*args: int) -> int:
    return int(datetime(*args, tzinfo=UTC).timestamp() * 1000)


class Clock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000


def _elapsed(unique_id: str) -> int:
    return int(unique_id[20:28], 16)  # ms since the month start, after ip/pid/random


def test_month_bounds_are_utc_month_starts() -> None:
    assert month_bounds_ms(_ms(2026, 1, 31, 23, 59, 59)) == (_ms(2026, 1, 1), _ms(2026, 2, 1))
    assert month_bounds_ms(_ms(2026, 12, 15)) == (_ms(2026, 12, 1), _ms(2027, 1, 1))
    assert month_bounds_ms(_ms(2028, 2, 29, 12)) == (_ms(2028, 2, 1), _ms(2028, 3, 1))


@pytest.mark.parametrize("batch", [False, True])
def test_an_id_after_a_month_boundary_counts_from_the_new_month(batch: bool) -> None:
    clock = Clock(_ms(2026, 1, 31, 23, 59, 59) + 500)
    gen = UniqueIdGenerator(b"\x0a\x00\x00\x01", 7, clock=clock)
    before = gen.next_ids(1)[0] if batch else gen.next_id()
    assert _elapsed(before) == clock.ms - _ms(2026, 1, 1)
    clock.ms = _ms(2026, 2, 1) + 1234  # 1.734 s later, in February
    after = gen.next_ids(1)[0] if batch else gen.next_id()
    assert _elapsed(after) == 1234  # not ms since January 1st (which would be 31 days more)
    assert after[:20] == before[:20]  # same ip + pid + random


def test_a_clock_stepped_back_before_the_month_start_gives_zero() -> None:
    clock = Clock(_ms(2026, 2, 1) + 10)
    gen = UniqueIdGenerator("10.0.0.1", 7, clock=clock)
    assert _elapsed(gen.next_id()) == 10
    clock.ms = _ms(2026, 2, 1) - 300  # NTP stepped 310 ms back, into January
    assert _elapsed(gen.next_id()) == 0  # as MessageClientIDSetter (diff < 0 -> 0)


def test_ip_as_text_or_bytes() -> None:
    assert UniqueIdGenerator("10.1.2.3", 0x1234).next_id().startswith("0A0102031234")
    assert UniqueIdGenerator(bytes([10, 1, 2, 3]), 0x1234).next_id().startswith("0A0102031234")
    assert UniqueIdGenerator("::1", 1).next_id().startswith("000000000001")  # not ipv4


def test_the_batch_formatter_is_injected() -> None:
    seen = []

    def counter_ids(head: str, start: int, count: int) -> list[str]:
        seen.append((head, start, count))
        return [f"{head}{(start + i) & 0xFFFF:04X}" for i in range(count)]

    gen = UniqueIdGenerator("10.0.0.1", 1, clock=Clock(_ms(2026, 3, 2)), counter_ids=counter_ids)
    ids = gen.next_ids(3)
    assert len(seen) == 1 and seen[0][2] == 3 and len(set(ids)) == 3


def test_every_offset_msg_id_form_is_the_same() -> None:
    host, offset = "10.1.2.3:10911", 123456789
    expected = "0A01020300002A9F00000000075BCD15"
    assert create_offset_msg_id(host, offset) == expected
    assert OffsetMsgIdFormatter(host).format(offset) == expected
    assert format_offset_msg_id(offset_msg_id_prefix(host), offset) == expected
    assert format_offset_msg_id(host_bytes_prefix(encode_host(host)), offset) == expected
    assert decode_offset_msg_id(expected) == (host, offset)


def test_a_negative_offset_has_no_offset_msg_id() -> None:
    with pytest.raises(ValueError, match="negative"):
        create_offset_msg_id("10.1.2.3:10911", -1)
