"""The benchmarks' verdict rule (tests/bench/pooled.py): the median's distribution-free
interval is the sign test's order statistics, and a verdict needs the whole interval on one
side of the target."""

from __future__ import annotations

import random

from tests.bench.pooled import decide, median_interval


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
