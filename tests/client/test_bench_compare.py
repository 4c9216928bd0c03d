"""``make bench-compare`` as a program: a --quick run against real Wharf and redis-server
daemons writes every measure with figures and ratios (values are not asserted: timings
belong in benchmark output, not in tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import REPO_ROOT


@pytest.mark.slow
def test_quick_comparison_writes_every_measure_and_ratio(tmp_path: Path) -> None:
    output = tmp_path / "bench-results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.bench.compare", "--quick", "--output", str(output)],
        capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Wharf vs Redis Streams" in proc.stdout
    results = json.loads(output.read_text())
    measures = results["measures"]
    # Every latency run (4 of Wharf's, 2 of redis-py's) and both fsync-bound produce runs
    # (Wharf SYNC_FLUSH, Redis `always`) waited for a quiet disk first.
    settled = [entry["run"] for entry in results["disk_settle"]]
    assert len(settled) == 8 and sum(run.startswith("redis-py") for run in settled) == 2
    assert {"wharf-sync produce", "redis-always produce"} <= set(settled)
    # The produce targets are judged beside the read path's, from the same medians.
    targets = results["targets"]
    durable = measures["produce_sync"]["ratios"]
    assert targets["produce_sync_vs_redis_benchmark_p16"]["met"] == (
        durable["throughput_vs_redis_benchmark_p16"] >= 1.0
    )
    assert {"produce_async_vs_redis_benchmark", "produce_sync_vs_redis_benchmark"} <= set(targets)
    assert set(measures) == {
        "produce_async", "produce_sync", "consume", "e2e_sync", "e2e_sync_low_rate",
    }  # fmt: skip
    for name, entry in measures.items():
        assert entry["wharf"]["messages"] > 0, name
        assert entry["redis_py"]["msgs_per_s"] > 0, name
        assert entry["ratios"], name
        assert all(value is not None and value > 0 for value in entry["ratios"].values()), name
    for name in ("produce_async", "produce_sync", "consume"):
        assert measures[name]["redis_benchmark"]["msgs_per_s"] > 0
        assert "throughput_vs_redis_benchmark" in measures[name]["ratios"]
    # Each produce measure has the unpipelined send() variant next to the headline figure,
    # and SYNC_FLUSH is also compared with Redis `always` at the same pipelining.
    assert measures["produce_async"]["wharf_send"]["msgs_per_s"] > 0
    assert measures["produce_sync"]["wharf_send"]["msgs_per_s"] > 0
    assert measures["produce_sync"]["ratios"]["throughput_vs_redis_benchmark_p16"] > 0
