"""Fuzz the C accelerators: each target (tests/fuzz/targets.py) for a while under atheris's
libFuzzer, with AddressSanitizer and UndefinedBehaviorSanitizer (tests/fuzz/README.md).

    .venv/bin/python -m tests.fuzz.run                       # every target, 60 s each
    .venv/bin/python -m tests.fuzz.run log_scan --seconds 600
    .venv/bin/python -m tests.fuzz.run --seconds 3600 --jobs 2   # make fuzz

Builds what is stale (tests.fuzz.build), writes the seeds into build/fuzz/corpus/<target>/
(kept between runs: a long run goes on from the corpus the last one grew), then runs each
target in a child process with atheris's ASan + libFuzzer runtime preloaded. A crash, a
sanitizer report or a divergence from the Python twin stops that target and leaves the input
in build/fuzz/findings/<target>/; the exit status is then 1. Replay one input with
``--replay FILE`` (the target runs it once and prints the report).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tests.fuzz import build

CORPUS_DIR = build.FUZZ_DIR / "corpus"
FINDINGS_DIR = build.FUZZ_DIR / "findings"
TARGET_NAMES = ("kafka_convert", "record_check", "log_scan", "record_decoder", "record_encoder")
MAX_LEN = 16384  # bytes an input may grow to: the seeds' largest (~5 KiB) with room to grow


@dataclass
class Result:
    target: str
    returncode: int
    seconds: float
    execs: int
    coverage: int  # libFuzzer's "cov:" (edges of the instrumented C, and Python's pseudo-edges)
    features: int
    corpus: int
    log: Path

    def line(self) -> str:
        state = "ok" if self.returncode == 0 else f"FAILED (exit {self.returncode}, {self.log})"
        return (
            f"{self.target:15} {self.seconds:6.0f} s {self.execs:>9,} execs "
            f"({self.execs / max(self.seconds, 1e-9):7.0f}/s) cov {self.coverage:5} "
            f"ft {self.features:6} corpus {self.corpus:5}  {state}"
        )


def sanitizer_env() -> dict[str, str]:
    env = dict(os.environ)
    env["LD_PRELOAD"] = str(build.SITE_DIR / "asan_with_fuzzer.so")
    # The interpreter is not instrumented and frees little at exit: no leak report. Python's
    # small-object allocator would hide overflows inside its arenas: every object by malloc.
    env["ASAN_OPTIONS"] = "detect_leaks=0:allocator_may_return_null=1:abort_on_error=0"
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    env["PYTHONMALLOC"] = "malloc"
    # The twins run pure Python; the compiled code under test is loaded from build/fuzz/ext.
    env["WHARF_NO_SPEEDUPS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(build.SITE_DIR), str(build.REPO)])
    return env


def write_seeds(target: str) -> Path:
    from tests.fuzz.targets import TARGETS

    corpus = CORPUS_DIR / target
    corpus.mkdir(parents=True, exist_ok=True)
    for seed in TARGETS[target].seeds():
        (corpus / ("seed-" + hashlib.sha1(seed).hexdigest())).write_bytes(seed)
    return corpus


_STAT = re.compile(r"^stat::(\w+):\s*(\d+)", re.M)
_COV = re.compile(r"#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)")


REGRESSIONS_DIR = Path(__file__).parent / "regressions"


def fuzz(target: str, seconds: int, extra: list[str]) -> Result:
    """One target for ``seconds``; new inputs go to its corpus (the first directory), the
    saved findings are read as seeds too."""
    corpus = write_seeds(target)
    saved = REGRESSIONS_DIR / target
    dirs = [str(corpus)] + ([str(saved)] if saved.is_dir() else [])
    findings = FINDINGS_DIR / target
    findings.mkdir(parents=True, exist_ok=True)
    log = build.FUZZ_DIR / f"{target}.log"
    cmd = [
        sys.executable, "-m", "tests.fuzz.child", target,
        f"-max_total_time={seconds}", f"-max_len={MAX_LEN}", "-timeout=20",
        "-rss_limit_mb=3072", "-print_final_stats=1",
        f"-artifact_prefix={findings}/", *extra, *dirs,
    ]  # fmt: skip
    began = time.monotonic()
    with log.open("wb") as out:
        rc = subprocess.run(cmd, env=sanitizer_env(), stdout=out, stderr=out, cwd=build.REPO)
    text = log.read_text(errors="replace")
    stats = {k: int(v) for k, v in _STAT.findall(text)}
    last = _COV.findall(text)
    cov, ft, corp = (int(x) for x in last[-1][1:]) if last else (0, 0, 0)
    return Result(
        target, rc.returncode, time.monotonic() - began, stats.get("number_of_executed_units", 0),
        cov, ft, corp, log,
    )  # fmt: skip


def fuzz_all(targets: list[str], seconds: int, jobs: int) -> list[Result]:
    with ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(lambda t: fuzz(t, seconds, []), targets))


def replay(target: str, path: Path) -> int:
    cmd = [sys.executable, "-m", "tests.fuzz.child", target, str(path)]
    return subprocess.run(cmd, env=sanitizer_env(), cwd=build.REPO).returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*", choices=[[], *TARGET_NAMES], default=[])
    parser.add_argument("--seconds", type=int, default=60, help="per target (default 60)")
    parser.add_argument("--jobs", type=int, default=1, help="targets run at once (default 1)")
    parser.add_argument("--replay", type=Path, help="run the target on this one input")
    args = parser.parse_args()
    targets = list(args.targets) or list(TARGET_NAMES)
    build.build()
    if args.replay is not None:
        raise SystemExit(replay(targets[0], args.replay))
    results = fuzz_all(targets, args.seconds, args.jobs)
    for result in results:
        print(result.line())
    raise SystemExit(0 if all(r.returncode == 0 for r in results) else 1)


if __name__ == "__main__":
    main()
