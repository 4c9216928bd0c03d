"""``tests.bench.thorough_flush`` as a program: a small run times a thorough pass over every
queue file by file and, where the filesystem gets a syncfs, with one (figures are not
asserted: timings belong in benchmark output)."""

from __future__ import annotations

import re
import subprocess
import sys

from wharf.store.services import syncfs

from tests.harness import REPO_ROOT


def test_a_small_run_times_both_ways_of_a_thorough_pass() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.bench.thorough_flush", "--topics", "150", "--rounds", "2"],
        capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    passes = re.findall(r"round \d: +(file by file|one syncfs): ([\d,]+) queues", out)
    whole = syncfs.whole_fs_sync("/tmp") is not None  # the program's store is under /tmp
    modes = {"file by file", "one syncfs"} if whole else {"file by file"}
    assert {mode for mode, _ in passes} == modes, out
    assert len(passes) == 2 * len(modes) and {count for _, count in passes} == {"600"}, out
    assert re.search(r"^file by file +[\d.]+ +[\d.]+$", out, re.M), out
