"""``tests.bench.protocol_latency`` as a program: a short run through the real daemon with the
official RocketMQ 5 client and the RocketMQ 4.x C++ client in their venvs, beside Wharf's SDK
over the wire port, delivers every timed message once and prints each protocol's figures
(values are not asserted: timings belong in benchmark output)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.bench.remoting import RMQ4_PYTHON, RMQ_PYTHON
from tests.harness import REPO_ROOT

pytestmark = pytest.mark.slow


def test_a_short_run_delivers_everything_and_prints_each_protocol() -> None:
    for python, target in ((RMQ_PYTHON, "rmq-client"), (RMQ4_PYTHON, "rmq4-client")):
        if not python.exists():
            pytest.skip(f"{python.parent.parent.name} is missing: run `make {target}`")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.bench.protocol_latency", "--rate", "50", "--seconds", "2",
         "--settle-max", "0"],
        capture_output=True, text=True, timeout=400, cwd=REPO_ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    figures = r"p50 +[\d.]+ +p99 +[\d.]+ +max +[\d.]+ ms"
    # the two RocketMQ clients: all 100 timed messages sent and each delivered once
    for label in ("official v2 client, gRPC", "C++ 4.x client, remoting"):
        match = re.search(rf"^  {re.escape(label)} +{figures}, send [\d.]+ +delivered (\d+)/(\d+)"
                          r"(.*)$", out, re.M)  # fmt: skip
        assert match, out
        assert match.group(1) == match.group(2) == "100", out
        assert "duplicates" not in match.group(3) and "failed" not in match.group(3), out
    # the SDK's run counts its own deliveries (wharf bench e2e reports no sent count)
    match = re.search(rf"^  Wharf SDK, wire port +{figures} +delivered (\d+)/~100 ", out, re.M)
    assert match and int(match.group(1)) > 0, out
