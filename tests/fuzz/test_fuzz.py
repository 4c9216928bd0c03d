"""The C accelerators under a coverage-guided fuzzer (tests/fuzz/README.md).

- every saved finding (tests/fuzz/regressions/<target>/) replays clean through its target's
  differential oracle on the installed, uninstrumented module (fast, every run);
- a short run of every target with ASan + UBSan (slow: ~1.5 minutes on 2 cores with the
  build), from the seeds and the saved findings; skipped only where clang is missing.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from tests.fuzz import build, run
from tests.fuzz.targets import TARGETS

REGRESSIONS = Path(__file__).parent / "regressions"
# Per target; five targets two at a time: three rounds of ~20 s with libFuzzer's start and
# the seeds, ~11 s of clang for the five modules, and atheris's install once (~10 s).
SHORT_SECONDS = 15


def _findings() -> list[tuple[str, Path]]:
    return [
        (target.name, path)
        for target in sorted(REGRESSIONS.iterdir())
        if target.is_dir()
        for path in sorted(target.iterdir())
    ]


@pytest.mark.parametrize(("target", "path"), _findings(), ids=lambda v: getattr(v, "name", v))
def test_a_saved_finding_replays_clean_on_the_installed_module(target: str, path: Path) -> None:
    cls = TARGETS[target]
    cls(importlib.import_module(cls.name))(path.read_bytes())


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_short_fuzz_run_of_every_module_finds_nothing() -> None:
    if build.clang() is None:
        pytest.skip("clang is missing: `make system-deps` installs Debian's clang and compiler-rt")
    build.build()
    results = run.fuzz_all(list(run.TARGET_NAMES), SHORT_SECONDS, jobs=2)
    report = "\n".join(r.line() for r in results)
    assert all(r.returncode == 0 for r in results), report
    assert all(r.execs > 0 for r in results), report
