"""The benchmarks' verdict rule (tests/bench/pooled.py): the median's distribution-free
interval is the sign test's order statistics, and a verdict needs the whole interval on one
side of the target."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.bench.pooled import decide, median_interval, round_lines


def test_interval_is_the_sign_tests_order_statistics() -> None:
    # Textbook 95% intervals for the median: n=20 -> x(6)..x(15), n=32 -> x(10)..x(23).
    assert median_interval([float(i) for i in range(1, 21)]) == (6.0, 15.0)
    assert median_interval([float(i) for i in range(1, 33)]) == (10.0, 23.0)
    # Too few rounds for a narrower interval than the whole range (8: P(all on one side) 2/256).
    assert median_interval([float(i) for i in range(1, 9)]) == (1.0, 8.0)
    shuffled = [float(i) for i in range(1, 33)]
    random.Random(7).shuffle(shuffled)
    assert median_interval(shuffled) == (10.0, 23.0)


def test_verdict_needs_the_whole_interval_on_one_side() -> None:
    above = [1.10, 1.20, 1.15, 0.90, 1.30, 1.25, 1.12, 1.18, 1.05, 1.22, 1.16, 1.40]
    assert decide(above, ">=", 1.0) == "met"
    assert decide(above, "<=", 1.0) == "missed"
    # A median above the line whose interval spans it decides nothing.
    straddling = [0.8, 0.9, 0.95, 1.05, 1.1, 1.2, 1.3, 1.4]
    assert decide(straddling, ">=", 1.0) == "undecided"
    assert decide(straddling, "<=", 1.0) == "undecided"


def test_too_few_rounds_decide_nothing() -> None:
    # Five rounds all far above the line: the whole range holds the median with 94% only.
    assert decide([2.0, 2.1, 2.2, 2.3, 2.4], ">=", 1.0).startswith("undecided")
    assert decide([2.0, 2.1, 2.2, 2.3, 2.4, 2.5], ">=", 1.0) == "met"


def test_lone_pool_reads_back_the_rounds_it_printed(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """``tests.bench.lone --pool``: rounds saved from two programs are judged together, each
    peer's figures read back as printed (a peer missing from a round leaves its targets out)."""
    from tests.bench import lone

    first, second = tmp_path / "a.log", tmp_path / "b.log"
    first.write_text(
        "round 1: wire p50 0.80 p99 3.00 ms (load 0.40)  redis p50 1.00 p99 4.00 ms (load 0.5)\n"
        "round 2: wire p50 0.90 p99 9.00 ms (load 1.40)  redis p50 0.90 p99 3.00 ms (load 1.2)\n"
        "some other line\n"
    )
    second.write_text(
        "round 1: wire p50 0.70 p99 2.00 ms (load 0.3)  redis p50 1.40 p99 2.00 ms (load 0.3)\n"
    )
    rounds = lone.printed_rounds([str(first), str(second)])
    assert rounds == [
        {"wire": {"p50_ms": 0.8, "p99_ms": 3.0}, "redis": {"p50_ms": 1.0, "p99_ms": 4.0}},
        {"wire": {"p50_ms": 0.9, "p99_ms": 9.0}, "redis": {"p50_ms": 0.9, "p99_ms": 3.0}},
        {"wire": {"p50_ms": 0.7, "p99_ms": 2.0}, "redis": {"p50_ms": 1.4, "p99_ms": 2.0}},
    ]
    lone.judge(rounds, ("wire", "redis"), "3 rounds")
    out = capsys.readouterr().out
    assert "wire/redis p50: median 0.80x" in out and "over 3 rounds" in out
    assert "grpc/wire" not in out  # no gRPC figures: its target is left out


def test_lone_judges_the_grpc_target_against_the_relays_floor(capsys) -> None:  # type: ignore[no-untyped-def]
    """The relays' figures give the least gRPC / wire p50 the transports allow: the wire
    port's p50 plus what gRPC's hops cost over the wire port's in the relay. Above 1.3x in
    every round's interval, the target is printed as out of reach."""
    from tests.bench import lone

    def round_(wire: float, wire_relay: float, grpc_relay: float) -> dict[str, dict[str, float]]:
        figures = {"wire": wire, "grpc": 2 * wire, "redis": wire, "wire-relay": wire_relay}
        figures["grpc-relay"] = grpc_relay
        return {peer: {"p50_ms": p50, "p99_ms": 4 * p50} for peer, p50 in figures.items()}

    assert lone.grpc_floor(round_(0.6, 0.1, 0.4)) == pytest.approx(1.5)
    rounds = [round_(0.6, 0.1, 0.4 + i / 100) for i in range(12)]
    lone.judge(rounds, ("wire", "grpc", "redis", "wire-relay", "grpc-relay"), "12 rounds")
    out = capsys.readouterr().out
    assert "the transports' floor for grpc/wire p50: median 1.5" in out
    assert "missed (out of reach)" in out
    close = [round_(0.6, 0.1, 0.2 + (i % 2) / 10) for i in range(12)]  # 1.17x and 1.33x
    lone.judge(close, ("wire", "grpc", "redis", "wire-relay", "grpc-relay"), "12 rounds")
    assert "out of reach" not in capsys.readouterr().out


@pytest.mark.slow
def test_relay_floor_delivers_every_message_over_each_relay(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The relays the floors are measured with (gRPC, the wire port, and the wire port with
    each message durable first): each client gets back every message it sent after the
    warm-up, with a latency measured from its send; the durable relay's file holds them."""
    import struct
    import time

    from tests.bench import relay_floor

    started_ns = time.time_ns()
    with relay_floor.relay(tmp_path) as ports:
        for kind in relay_floor.KINDS:
            figures = relay_floor.run(kind, ports[kind], rate=200, seconds=1.0)
            assert 150 <= figures["count"] <= 260, figures
            assert 0 < figures["p50_ms"] <= figures["p99_ms"] < 1000, figures
    with open(tmp_path / "durable-relay.log", "rb") as log:
        first_stamp = struct.unpack(">q", log.read(8))[0]  # the durable relay's first message
    assert started_ns < first_stamp < time.time_ns()


def test_consume_pool_reads_back_the_rounds_it_printed(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """``tests.bench.consume --pool``: each round's rates read back as main() prints them,
    and the gRPC / redis-py ratio judged against 1.5x per round (not as a ratio of medians)."""
    from tests.bench import consume

    log = tmp_path / "c.log"
    log.write_text(
        "".join(
            f"round {i}: grpc {grpc} msg/s  wire 300000 msg/s  redis {redis} msg/s  (load 1.07)\n"
            for i, (grpc, redis) in enumerate(
                [(300000, 100000), (200000, 200000)] + [(310000, 155000)] * 8, start=1
            )
        )
        + "16 rounds of 600000 messages, 50 readers, pulls of 100:\n"
    )
    rounds = consume.printed_rounds([str(log)])
    assert rounds[:2] == [
        {"grpc": 300000.0, "wire": 300000.0, "redis": 100000.0},
        {"grpc": 200000.0, "wire": 300000.0, "redis": 200000.0},
    ]
    assert len(rounds) == 10
    consume.judge(rounds, "10 rounds")
    out = capsys.readouterr().out
    # Per-round ratios 3.0, 1.0 and eight of 2.0: median 2.0x, its interval (the 2nd to the
    # 9th of 10) 2.0-2.0x: met.
    grpc_line = next(line for line in out.splitlines() if "grpc/redis-py" in line)
    assert "median 2.00x, 95% interval 2.00-2.00x" in grpc_line and "over 10 rounds" in grpc_line
    assert grpc_line.endswith("target >= 1.5x: met")


def test_pooled_files_are_renumbered_so_each_run_pairs_with_itself(tmp_path: Path) -> None:
    """Two saved runs both count rounds from 1: pooled, the second's rounds follow the first's
    (prefix and JSON alike), so a round's Wharf figure meets its own run's peer."""
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text('# header\nround 1: {"round": 1, "x": 1}\nround 2: {"round": 2, "x": 2}\n')
    second.write_text('round 1: {"round": 1, "x": 3}\nnoise\nround 1 rmq5 wharf start 1 s\n')
    assert round_lines([str(first), str(second)]) == [
        'round 1: {"round": 1, "x": 1}',
        'round 2: {"round": 2, "x": 2}',
        'round 3: {"round": 3, "x": 3}',
        "round 3 rmq5 wharf start 1 s",
    ]
