"""Pure pieces of the console: body rendering, time parsing, rates between views, endpoints."""

from __future__ import annotations

import pytest
from wharf.client import InvalidArgumentError
from wharf.client.console.brokers import RateSampler, Sample, split_endpoints
from wharf.client.console.rates import CounterRates
from wharf.client.console.render import (
    MAX_HEX_BYTES,
    MAX_SHOWN_BYTES,
    body_view,
    fmt_duration,
    fmt_time,
    parse_time,
    time_input,
)


def test_body_view_picks_json_then_text_then_hex() -> None:
    assert body_view(b'{"a": [1, 2]}').format == "json"
    assert body_view(b'{"a": [1, 2]}').text == '{\n  "a": [\n    1,\n    2\n  ]\n}'
    assert body_view(b"42").format == "text"  # a bare JSON scalar is just text
    assert body_view("héllo".encode()).format == "text"
    binary = body_view(b"\x00\xff\x10abc")
    assert binary.format == "hex"
    assert binary.text == "00000000  " + "00 ff 10 61 62 63".ljust(47) + "  ...abc"
    assert body_view(b"not json", "json").format == "text"  # asked json, cannot: text


def test_large_bodies_are_cut() -> None:
    body = b"x" * (MAX_SHOWN_BYTES + 10)
    view = body_view(body)
    assert view.truncated and view.shown == MAX_SHOWN_BYTES and view.size == len(body)
    hexed = body_view(body, "hex")
    assert hexed.shown == MAX_HEX_BYTES and hexed.text.count("\n") == MAX_HEX_BYTES // 16 - 1
    # a cut in the middle of a UTF-8 character is still text
    euro = "€".encode() * (MAX_SHOWN_BYTES // 3 + 1)
    assert body_view(euro).format == "text"


def test_times_are_utc_both_ways() -> None:
    assert parse_time("2026-11-22T10:00") == 1_795_341_600_000
    assert parse_time("2026-11-22 10:00:00+01:00") == 1_795_341_600_000 - 3_600_000
    assert parse_time("1795341600000") == 1_795_341_600_000
    assert fmt_time(1_795_341_600_123) == "2026-11-22 10:00:00.123"
    assert time_input(1_795_341_600_000) == "2026-11-22T10:00:00"
    assert fmt_time(0) == "-"
    assert fmt_duration(90_061_000) == "1d 1h 1m"
    with pytest.raises(ValueError, match="not a time"):
        parse_time("tomorrow")


def test_counter_rates_compare_with_an_older_view() -> None:
    rates = CounterRates(min_gap_s=1.0, max_age_s=60.0)
    assert rates.observe("t", 100, now=0.0) is None  # first view
    assert rates.observe("t", 150, now=0.5) is None  # too soon: no reference yet
    assert rates.observe("t", 300, now=2.0) == 100.0  # against 0.5 s: (300 - 150) / 1.5 s
    assert rates.observe("t", 310, now=2.2) == 94.1  # still against 0.5 s: 160 / 1.7 s
    assert rates.observe("t", 5, now=4.0) is None  # went backwards (a reset)
    assert rates.observe("t", 25, now=100.0) is None  # reference too old


def test_rate_sampler_series_has_gaps_for_a_down_broker() -> None:
    sampler = RateSampler.__new__(RateSampler)
    sampler.samples = {0: []}  # type: ignore[dict-item]
    sampler.samples[0].extend(
        [
            Sample(10.0, 100, 50),
            Sample(12.0, 300, 70),
            Sample(14.0, None, None),
            Sample(16.0, 700, 90),
        ]
    )
    series = sampler.series(0)
    assert [p["in"] for p in series] == [100.0, None, None]
    assert [p["out"] for p in series] == [10.0, None, None]


def test_split_endpoints() -> None:
    assert split_endpoints("a:1; b:2,a:1") == ["a:1", "b:2"]
    with pytest.raises(ValueError, match="names no broker"):
        split_endpoints(" ; ")
    with pytest.raises(InvalidArgumentError, match="host:port"):
        split_endpoints("nohost")


async def test_topic_counts_fall_back_to_per_topic_stats() -> None:
    """A broker that leaves ListTopicsResponse.stats empty: one topic_stats per shown topic."""
    from wharf.client.console.topics import _counts
    from wharf.v1 import admin_pb2

    class FakeAdmin:
        asked: list[str] = []

        async def topic_stats(self, name: str) -> admin_pb2.GetTopicStatsResponse:
            self.asked.append(name)
            queues = [admin_pb2.QueueStats(queue_id=0, min_offset=2, max_offset=9)]
            return admin_pb2.GetTopicStatsResponse(name=name, queues=queues, total_messages=7)

    topics = [admin_pb2.TopicConfig(name=n) for n in ("a", "b", "c")]
    old_broker = admin_pb2.ListTopicsResponse(topics=topics)
    admin = FakeAdmin()
    assert await _counts(admin, old_broker, topics[:2]) == {"a": (7, 9), "b": (7, 9)}  # type: ignore[arg-type]
    assert admin.asked == ["a", "b"]
    new_broker = admin_pb2.ListTopicsResponse(
        topics=topics,
        stats=[admin_pb2.TopicSummary(name="a", total_messages=1, written_messages=3)],
    )
    assert await _counts(admin, new_broker, topics[:1]) == {"a": (1, 3)}  # type: ignore[arg-type]
    assert admin.asked == ["a", "b"]  # no extra calls
