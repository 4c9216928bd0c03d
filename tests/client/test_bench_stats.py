"""`wharf bench` statistics and the comparison's ratios."""

from __future__ import annotations


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


def test_compare_takes_the_median_of_runs_and_counts_stalls() -> None:
    from tests.bench.compare import median_of_runs

    runs = [
        {"e2e_sync": {"wharf": {"p50_ms": p50, "p99_ms": p99, "max_ms": top, "how": "h"}}}
        for p50, p99, top in ((1.0, 4.0, 9.0), (3.0, 90.0, 400.0), (2.0, 5.0, 12.0))
    ]
    merged = median_of_runs(runs)["e2e_sync"]["wharf"]
    assert (merged["p50_ms"], merged["p99_ms"], merged["max_ms"]) == (2.0, 5.0, 12.0)
    assert merged["stalls"] == 1 and merged["how"] == "h"
    assert [r["p99_ms"] for r in merged["runs"]] == [4.0, 90.0, 5.0]


def test_e2e_hops_tail_names_the_widest_gap_of_each_slow_message() -> None:
    from tests.bench.e2e_hops import sync_times, tail

    def message(sent_us: int, sync_us: int) -> list[tuple[str, int]]:
        hops = [("c.send", 0), ("c.write", 50), ("b.send_in", 130), ("b.sync_start", 250)]
        hops += [("b.sync_done", 250 + sync_us), ("b.pull_yield", 300 + sync_us)]
        hops += [("c.handler", 400 + sync_us)]
        return [(name, (sent_us + at) * 1000) for name, at in hops]

    # Three warm-up messages (the first third), then two fast ones and one slow fdatasync.
    stamps = [s for i in range(6) for s in message(i * 10_000, 4_000 if i == 5 else 200)]
    slow, measured, where = tail(stamps)
    assert (slow, measured) == (1, 4) and where == {"b.sync_start -> b.sync_done": 1}
    assert sorted(sync_times(stamps)) == [200.0] * 5 + [4000.0]
