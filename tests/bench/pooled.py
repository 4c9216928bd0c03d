"""Deciding a ratio near its target from pooled rounds: the median of per-round ratios and its
distribution-free confidence interval (the order statistics a sign test gives: no assumption
about the shape of the noise, which on this shared VM is anything but normal).

A target is met when the whole interval lies on its side, missed when the whole interval lies on
the other, undecided otherwise: more rounds narrow the interval, repeating runs until one lands
above the line does not.
"""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """The narrowest order-statistic interval [x(k), x(n-k+1)] that holds the median with at
    least ``confidence`` (binomial(n, 1/2) tails); the whole range when n is too small (below
    6 rounds even that holds it with less than 95%: ``decide`` then answers undecided)."""
    ordered = sorted(values)
    n = len(ordered)
    k = 0  # x(k+1) .. x(n-k), 0-based: ordered[k] .. ordered[n - 1 - k]
    while k + 1 <= n // 2:
        # The interval one narrower misses the median when k + 1 or fewer values lie below it
        # (or above): P(Bin(n, 1/2) <= k + 1) on each side.
        tail = sum(math.comb(n, i) for i in range(k + 2)) / 2**n
        if 1 - 2 * tail < confidence:
            break
        k += 1
    return ordered[k], ordered[n - 1 - k]


def decide(values: list[float], op: str, bound: float, confidence: float = 0.95) -> str:
    """Met, missed or undecided for ``median(values) op bound``, op "<=" or ">="."""
    if 1 - 2 / 2 ** len(values) < confidence:  # even the whole range is too narrow (n < 6)
        return "undecided (too few rounds)"
    low, high = median_interval(values, confidence)
    if op == ">=":
        return "met" if low >= bound else ("missed" if high < bound else "undecided")
    return "met" if high <= bound else ("missed" if low > bound else "undecided")


def describe(values: list[float], op: str, bound: float, unit: str = "x") -> str:
    low, high = median_interval(values)
    return (f"median {statistics.median(values):.2f}{unit}, 95% interval {low:.2f}-{high:.2f}"
            f"{unit}, range {min(values):.2f}-{max(values):.2f}{unit} over {len(values)} rounds, "
            f"target {op} {bound}{unit}: {decide(values, op, bound)}")  # fmt: skip


_ROUND = re.compile(r"round (\d+)")
_JSON_ROUND = re.compile(r'"round": (\d+)')


def round_lines(paths: list[str]) -> list[str]:
    """The "round N ..." lines of these saved program outputs, in order (what ``--pool``
    re-reads), renumbered so each file's rounds follow the previous files' (a second run's
    round 1 becomes round 5 after a run of 4): the programs pair a round's Wharf and peer
    figures by its number, and two files both counting from 1 would pair a run's Wharf with
    another run's peer. A ``"round": N`` in the line's JSON is renumbered alike."""
    lines: list[str] = []
    offset = 0
    for path in paths:
        last = 0
        for line in Path(path).read_text().splitlines():
            match = _ROUND.match(line)
            if match is None:
                continue
            number = int(match.group(1))
            last = max(last, number)
            if offset:
                line = f"round {number + offset}{line[match.end() :]}"
                line = _JSON_ROUND.sub(f'"round": {number + offset}', line, count=1)
            lines.append(line)
        offset += last
    return lines
