"""``tests.bench.topics`` as a program (a --quick run through the real daemon and SDK prints a
row and a ratio for every configuration; figures are not asserted: timings belong in
benchmark output) and its memory confinement (``tests.bench.memory.page_cache_bound``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.bench.memory import _own_memory_cgroup, cgroup_usage, memory_cgroup_of, page_cache_bound
from tests.harness import REPO_ROOT


@pytest.mark.slow
def test_quick_run_prints_every_configuration_with_its_ratio() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.bench.topics", "--quick", "--page-cache-gib", "0.5"],
        capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert re.search(r"dispatch caught up [\d.]+ s later", out), out
    assert "0.5 GiB cgroup" in out or "no cgroup" in out, out
    rows = {
        int(m.group(1).replace(",", "")): float(m.group(3))
        for m in re.finditer(r"^\s+([\d,]+)\s+([\d,]+)\s+([\d.]+)\s+[\d.]+\s", out, re.M)
    }
    assert set(rows) == {1, 16, 256}, out
    assert rows[1] == 1.0 and all(ratio > 0 for ratio in rows.values())
    # one round: each configuration's one pair, the ratio its row shows
    pairs = {
        int(m.group(1).replace(",", "")): [float(r) for r in m.group(2).split()]
        for m in re.finditer(r"^pairs\s+([\d,]+): ([\d. ]+)$", out, re.M)
    }
    assert pairs == {16: [rows[16]], 256: [rows[256]]}, out


def test_page_cache_bound_confines_a_process_for_the_block_or_says_it_cannot() -> None:
    """Where a memory cgroup can be made (root, a memory controller) the process is in it for
    the block, under the limit asked, and the group is gone after it; elsewhere it yields
    None, and only there."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with page_cache_bound(child.pid, 64 << 20) as usage:
            if usage is None:
                assert os.geteuid() != 0 or _own_memory_cgroup() is None
                return
            group = usage.parent
            found = memory_cgroup_of(child.pid)
            assert found is not None and found[0] == group
            assert int((group / found[1]).read_text()) == 64 << 20
            assert cgroup_usage(usage) >= 0
        assert not group.exists()
        after = memory_cgroup_of(child.pid)
        assert after is not None and after[0] == group.parent
    finally:
        child.kill()
        child.wait()


def test_each_configuration_runs_beside_a_base_run_in_alternating_order() -> None:
    """Every configuration's run is paired with a run of the base next to it (its ratio's
    denominator), the base first in even rounds and second, in reverse order, in odd ones."""
    from tests.bench.topics import round_pairs

    assert round_pairs([1, 16, 256], 0) == [(1, 16), (1, 256)]
    assert round_pairs([1, 16, 256], 1) == [(256, 1), (16, 1)]
    assert round_pairs([1], 0) == [(1,)]
