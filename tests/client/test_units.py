"""Unit tests of the SDK pieces that need no broker."""

from __future__ import annotations

import asyncio
import re
import zlib

import grpc
import pytest
from wharf.client.batcher import AutoBatcher
from wharf.client.channel import parse_endpoints
from wharf.client.compression import COMPRESS_THRESHOLD, decompress, maybe_compress
from wharf.client.consumer.process_queue import ProcessQueue
from wharf.client.errors import (
    DeadlineExceededError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
    WharfError,
    error_for_status,
    error_for_status_number,
)
from wharf.client.ids import UniqueIdGenerator, new_unique_id
from wharf.client.message import MessageQueue, ReceivedMessage, to_wire
from wharf.client.rebalance import allocate_averagely
from wharf.client.selector import SelectMessageQueueByHash
from wharf.v1 import common_pb2


def queues(n: int, topic: str = "t") -> list[MessageQueue]:
    return [MessageQueue(topic, i) for i in range(n)]


# ---------------------------------------------------------------- allocation
@pytest.mark.parametrize("n_queues", [1, 3, 8, 9, 16])
@pytest.mark.parametrize("n_clients", [1, 2, 3, 5, 10])
def test_allocation_is_a_partition_balanced_within_one(n_queues: int, n_clients: int) -> None:
    clients = [f"c{i}" for i in range(n_clients)]
    shares = [allocate_averagely(c, clients, queues(n_queues)) for c in clients]
    flat = [q for share in shares for q in share]
    assert sorted(flat) == queues(n_queues)  # every queue exactly once
    sizes = [len(s) for s in shares]
    assert max(sizes) - min(sizes) <= 1


def test_allocation_matches_rocketmq_averagely() -> None:
    # 8 queues over 3 clients: 3, 3, 2 in contiguous ranges (RocketMQ's layout).
    clients = ["a", "b", "c"]
    got = [[q.queue_id for q in allocate_averagely(c, clients, queues(8))] for c in clients]
    assert got == [[0, 1, 2], [3, 4, 5], [6, 7]]


def test_allocation_ignores_input_order_and_unknown_client() -> None:
    assert allocate_averagely("b", ["b", "a"], list(reversed(queues(4)))) == queues(4)[2:]
    assert allocate_averagely("zz", ["a", "b"], queues(4)) == []


# ---------------------------------------------------------------- ids, compression, wire
def test_unique_ids_are_32_hex_and_distinct() -> None:
    ids = {new_unique_id() for _ in range(20_000)}
    assert len(ids) == 20_000
    assert all(re.fullmatch(r"[0-9A-F]{32}", i) for i in ids)


def test_unique_id_embeds_ip_and_pid() -> None:
    gen = UniqueIdGenerator(ip=bytes([10, 1, 2, 3]), pid=0x1234)
    assert gen.next_id().startswith("0A0102031234")


def test_bodies_over_threshold_are_compressed_and_round_trip() -> None:
    body = b"abc" * 4000
    payload, compressed = maybe_compress(body)
    assert compressed and len(payload) < len(body)
    assert zlib.decompress(payload) == body
    small, flag = maybe_compress(b"x" * COMPRESS_THRESHOLD)
    assert not flag and small == b"x" * COMPRESS_THRESHOLD
    assert decompress(payload, True) == body


def test_incompressible_body_is_sent_raw() -> None:
    import os

    body = os.urandom(8192)
    assert maybe_compress(body) == (body, False)


def test_to_wire_sets_unique_id_and_rejects_bad_input() -> None:
    wire = to_wire("héllo", tags="a", keys="k1", properties={"p": "v"})
    assert wire.body == "héllo".encode() and wire.keys == ["k1"] and len(wire.unique_id) == 32
    with pytest.raises(InvalidArgumentError, match="empty"):
        to_wire(b"")
    with pytest.raises(InvalidArgumentError, match="delay_level"):
        to_wire(b"x", delay_level=-1)


def test_received_message_is_decompressed_and_retry_topic_restored() -> None:
    view = common_pb2.MessageView(
        topic="%RETRY%g",
        body=zlib.compress(b"payload" * 1000),
        compressed=True,
        properties={"RETRY_TOPIC": "orders"},
        reconsume_times=2,
    )
    msg = ReceivedMessage.from_view(view)
    assert msg.body == b"payload" * 1000
    assert msg.topic == "orders" and msg.queue_topic == "%RETRY%g"


def test_hash_selector_is_stable() -> None:
    sel = SelectMessageQueueByHash()
    picks = {sel.select(queues(8), "order-42").queue_id for _ in range(10)}
    assert len(picks) == 1


# ---------------------------------------------------------------- errors, endpoints
def test_status_codes_map_to_typed_errors_with_message() -> None:
    err = error_for_status(grpc.StatusCode.NOT_FOUND, "topic 'x' not found")
    assert isinstance(err, NotFoundError) and str(err) == "topic 'x' not found"
    assert err.code == "NOT_FOUND" and not err.retriable
    assert isinstance(error_for_status_number(14, "down"), UnavailableError)
    assert error_for_status_number(14, "down").retriable
    assert isinstance(error_for_status_number(4, ""), DeadlineExceededError)
    assert type(error_for_status_number(12, "nope")) is WharfError  # UNIMPLEMENTED
    assert error_for_status_number(12, "nope").code == "UNIMPLEMENTED"


def test_endpoints_are_validated() -> None:
    assert parse_endpoints("127.0.0.1:8081") == "127.0.0.1:8081"
    assert parse_endpoints("http://h:1;h2:2") == "h:1"
    for bad in ("nohost", "h:0", "h:abc", ":80"):
        with pytest.raises(InvalidArgumentError, match="host:port"):
            parse_endpoints(bad)


# ---------------------------------------------------------------- batcher
async def test_batcher_groups_concurrent_sends_per_key_and_keeps_order() -> None:
    calls: list[tuple[object, list[int]]] = []

    async def send(key: object, items: list[int]) -> list[int]:
        calls.append((key, list(items)))
        await asyncio.sleep(0)
        return [i * 10 for i in items]

    batcher = AutoBatcher(send, max_messages=100)
    futures = [batcher.submit("a" if i % 2 else "b", i, 1) for i in range(50)]
    results = await asyncio.gather(*futures)
    assert results == [i * 10 for i in range(50)]
    assert sorted(str(k) for k, _ in calls) == ["a", "b"]  # one request per key
    assert all(items == sorted(items) for _, items in calls)


async def test_batcher_closes_batches_at_size_limit_and_caps_in_flight() -> None:
    active = 0
    peak = 0
    sizes: list[int] = []

    async def send(key: object, items: list[int]) -> list[int]:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        sizes.append(len(items))
        await asyncio.sleep(0.01)
        active -= 1
        return items

    batcher = AutoBatcher(send, max_messages=10, max_in_flight=2)
    results = await asyncio.gather(*(batcher.submit("k", i, 1) for i in range(95)))
    assert results == list(range(95))
    assert max(sizes) <= 10 and sum(sizes) == 95
    assert peak <= 2


async def test_batcher_linger_waits_for_more_messages() -> None:
    sizes: list[int] = []

    async def send(key: object, items: list[int]) -> list[int]:
        sizes.append(len(items))
        return items

    batcher = AutoBatcher(send, linger_s=0.05)
    first = batcher.submit("k", 1, 1)
    await asyncio.sleep(0.01)
    second = batcher.submit("k", 2, 1)
    assert await asyncio.gather(first, second) == [1, 2]
    assert sizes == [2]


async def test_batcher_fails_every_future_of_a_failed_batch() -> None:
    async def send(key: object, items: list[int]) -> list[int]:
        raise UnavailableError("broker gone")

    batcher = AutoBatcher(send)
    futures = [batcher.submit("k", i, 1) for i in range(5)]
    outcomes = await asyncio.gather(*futures, return_exceptions=True)
    assert all(isinstance(o, UnavailableError) for o in outcomes)
    await asyncio.wait_for(batcher.drain(), 1)
    assert batcher.buffered == 0


async def test_batcher_rejects_mismatched_result_count() -> None:
    async def send(key: object, items: list[int]) -> list[int]:
        return items[:-1]

    batcher = AutoBatcher(send)
    futures = [batcher.submit("k", i, 1) for i in range(3)]
    outcomes = await asyncio.gather(*futures, return_exceptions=True)
    assert all(isinstance(o, RuntimeError) for o in outcomes)


# ---------------------------------------------------------------- process queue
def _msg(offset: int) -> ReceivedMessage:
    return ReceivedMessage.from_view(common_pb2.MessageView(topic="t", queue_offset=offset))


async def test_committable_offset_never_skips_an_unfinished_message() -> None:
    pq = ProcessQueue(0)
    pq.add([_msg(i) for i in range(5)], next_offset=5)
    assert pq.committable_offset() == 0
    pq.done(1, 100)
    pq.done(2, 100)
    assert pq.committable_offset() == 0
    pq.done(0, 100)
    assert pq.committable_offset() == 3
    pq.done(3, 100)
    pq.done(4, 100)
    assert pq.committable_offset() == 5


async def test_process_queue_flow_control_blocks_until_space() -> None:
    pq = ProcessQueue(0)
    pq.add([_msg(i) for i in range(3)], next_offset=3)
    waiter = asyncio.ensure_future(pq.wait_for_space(3))
    await asyncio.sleep(0.01)
    assert not waiter.done()
    pq.done(0, 3)
    await asyncio.wait_for(waiter, 1)


async def test_batcher_fails_a_batch_past_its_deadline_with_one_timer() -> None:
    async def never_answers(key: object, items: list[int]) -> list[int]:
        await asyncio.sleep(10)
        return items

    batcher = AutoBatcher(never_answers)
    deadline = asyncio.get_running_loop().time() + 0.05
    futures = [batcher.submit("k", i, 1, deadline) for i in range(3)]
    outcomes = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 2)
    assert all(isinstance(o, DeadlineExceededError) for o in outcomes)
    assert batcher.buffered == 0


# ---------------------------------------------------------------- CLI parsing
def test_cli_parses_global_options_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from wharf.client.cli.main import build_parser

    monkeypatch.setenv("WHARF_ENDPOINTS", "10.0.0.1:9000")
    args = build_parser().parse_args(["--json", "send", "t", "body", "--key", "a", "--key", "b"])
    assert args.endpoints == "10.0.0.1:9000" and args.json and args.keys == ["a", "b"]
    args = build_parser().parse_args(["--endpoints", "h:1", "bench", "produce", "--tasks", "3"])
    assert (args.endpoints, args.workload, args.tasks, args.batch) == ("h:1", "produce", 3, 1)
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["topic", "create"])  # NAME missing
    assert exit_info.value.code == 2


def test_cli_timestamps_and_attributes() -> None:
    from wharf.client.cli.group_commands import parse_timestamp
    from wharf.client.cli.topic_commands import parse_attributes

    assert parse_timestamp("1700000000000") == 1_700_000_000_000
    assert parse_timestamp("2023-11-14T22:13:20") == 1_700_000_000_000  # naive = UTC
    assert parse_timestamp("2023-11-14T23:13:20+01:00") == 1_700_000_000_000
    with pytest.raises(ValueError, match="ISO 8601"):
        parse_timestamp("yesterday")
    assert parse_attributes(["a=1", "b="]) == {"a": "1", "b": ""}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_attributes(["novalue"])


def test_cli_exit_codes_follow_the_error_kind() -> None:
    from wharf.client.cli.exit_codes import exit_code_for

    assert exit_code_for(error_for_status(grpc.StatusCode.UNAVAILABLE, "")) == 3
    assert exit_code_for(error_for_status(grpc.StatusCode.DEADLINE_EXCEEDED, "")) == 3
    assert exit_code_for(error_for_status(grpc.StatusCode.NOT_FOUND, "")) == 4
    assert exit_code_for(error_for_status(grpc.StatusCode.ALREADY_EXISTS, "")) == 5
    assert exit_code_for(error_for_status(grpc.StatusCode.INVALID_ARGUMENT, "")) == 1


# ---------------------------------------------------------------- benchmark bookkeeping
def test_bench_stats_percentiles_and_rates() -> None:
    from wharf.client.bench.stats import BenchStats, percentile

    values = [float(v) for v in range(1, 1001)]
    assert percentile(values, 0.5) == 501.0 and percentile(values, 0.99) == 990.0
    assert percentile([], 0.5) == 0.0
    stats = BenchStats()
    for latency in values:
        stats.record(2, 2048, latency)
    summary = stats.summary()
    assert summary["messages"] == 2000 and summary["p999_ms"] == 999.0
    assert summary["msgs_per_s"] > 0 and summary["mb_per_s"] > 0


def test_compare_ratios_are_wharf_over_peer() -> None:
    import argparse

    from tests.bench.compare import Comparison

    comparison = Comparison(argparse.Namespace(quick=True, duration=1.0))
    comparison.measures = {
        "produce_async": {
            "wharf": {"msgs_per_s": 50.0},
            "redis_benchmark": {"msgs_per_s": 200.0},
            "redis_py": {"msgs_per_s": 25.0},
        },
        "e2e_sync": {"wharf": {"p99_ms": 3.0}, "redis_py": {"p99_ms": 2.0}},
    }
    comparison.compute_ratios()
    assert comparison.measures["produce_async"]["ratios"] == {
        "throughput_vs_redis_benchmark": 0.25,
        "throughput_vs_redis_py": 2.0,
    }
    assert comparison.measures["e2e_sync"]["ratios"] == {"p99_vs_redis_py": 1.5}


async def test_batcher_grows_batches_while_all_slots_are_busy() -> None:
    sizes: list[int] = []

    async def slow_send(key: object, items: list[int]) -> list[int]:
        sizes.append(len(items))
        await asyncio.sleep(0.02)
        return items

    batcher = AutoBatcher(slow_send, max_in_flight=1)
    futures = []
    for i in range(100):  # a paced sender: one message per loop turn, over ~2 replies' time
        futures.append(batcher.submit("k", i, 1))
        await asyncio.sleep(0.0005)
    assert await asyncio.gather(*futures) == list(range(100))
    # Without growth this would be ~100 one-message requests queued behind the slot.
    assert len(sizes) < 20 and max(sizes) > 10


def test_cli_json_keeps_strings_strings_and_int64_numbers() -> None:
    from wharf.client.cli.output import proto_dict
    from wharf.v1 import admin_pb2

    topic = proto_dict(admin_pb2.TopicConfig(name="123", read_queue_nums=3, attributes={"a": "1"}))
    assert topic == {
        "name": "123",
        "read_queue_nums": 3,
        "write_queue_nums": 0,
        "perm": 0,
        "attributes": {"a": "1"},
    }
    status = proto_dict(admin_pb2.BrokerStatus(uptime_ms=2**40))
    assert status["uptime_ms"] == 2**40 and status["runtime"] == {}
    group = proto_dict(admin_pb2.SubscriptionGroupConfig(consume_from_where=2))
    assert group["consume_from_where"] == "CONSUME_FROM_FIRST_OFFSET"
    assert proto_dict(admin_pb2.ResetConsumerOffsetResponse(offsets={1: 5})) == {
        "offsets": {"1": 5}
    }
