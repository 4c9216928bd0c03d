"""Build the C accelerators that read client bytes or files for fuzzing, into build/fuzz/.

Each module of ``FUZZED`` is compiled by clang from its ``[[tool.setuptools.ext-modules]]``
entry in pyproject.toml (sources, libraries) with AddressSanitizer, UndefinedBehaviorSanitizer
and libFuzzer's coverage counters (``-fsanitize=fuzzer-no-link``), into
``build/fuzz/ext/<name>.so``, never next to the sources: the editable install's plain ``.so``
files there are what the rest of the suite (and other people's runs) load. The sanitizer and
libFuzzer runtimes are atheris's ``asan_with_fuzzer.so`` (LD_PRELOADed by ``tests.fuzz.run``),
which also holds UBSan's handlers; atheris itself (pinned, from PyPI) is installed into
``build/fuzz/site`` with ``pip --target`` so that the project's .venv is not changed.

    .venv/bin/python -m tests.fuzz.build          # or: make fuzz-build

A module is rebuilt only when its sources, headers or this file are newer than its .so.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FUZZ_DIR = REPO / "build" / "fuzz"
EXT_DIR = FUZZ_DIR / "ext"
SITE_DIR = FUZZ_DIR / "site"
ATHERIS = "atheris==3.0.0"  # the newest with a cp311 manylinux wheel (no libFuzzer build here)

# The modules that parse client bytes or files; _syncer (fsync thread) parses nothing.
FUZZED = (
    "wharf.store.fast._kafka_convert",
    "wharf.store.fast._record_check",
    "wharf.store.fast._log_scan",
    "wharf.store.fast._record_decoder",
    "wharf.store.fast._record_encoder",
)

# -O1: ASan's recommended level (stack traces stay readable, runs ~2x faster than -O0);
# no-recover: a UBSan report aborts like an ASan one, so libFuzzer saves the input.
CFLAGS = [
    "-g",
    "-O1",
    "-fno-omit-frame-pointer",
    "-fPIC",
    "-shared",
    "-fsanitize=address,undefined,fuzzer-no-link",
    "-fno-sanitize-recover=all",
    "-Wall",
]


def clang() -> str | None:
    """The clang to build with (CC if it is a clang), or None when there is none."""
    for name in ("clang", "clang-16", "clang-15", "clang-14"):
        path = shutil.which(name)
        if path:
            return path
    return None


def ext_modules() -> dict[str, dict]:
    with (REPO / "pyproject.toml").open("rb") as f:
        entries = tomllib.load(f)["tool"]["setuptools"]["ext-modules"]
    return {entry["name"]: entry for entry in entries}


def so_path(name: str) -> Path:
    return EXT_DIR / (name.rsplit(".", 1)[1] + sysconfig.get_config_var("EXT_SUFFIX"))


def _stale(target: Path, inputs: list[Path]) -> bool:
    if not target.exists():
        return True
    built = target.stat().st_mtime
    return any(path.stat().st_mtime > built for path in inputs)


def build_module(cc: str, name: str, entry: dict, force: bool = False) -> Path:
    target = so_path(name)
    sources = [REPO / s for s in entry["sources"]]
    inputs = sources + [REPO / d for d in entry.get("depends", [])] + [Path(__file__)]
    if not force and not _stale(target, inputs):
        return target
    EXT_DIR.mkdir(parents=True, exist_ok=True)
    cmd = [cc, *CFLAGS, "-I", sysconfig.get_paths()["include"], *map(str, sources)]
    cmd += [f"-l{lib}" for lib in entry.get("libraries", [])]
    cmd += ["-o", str(target)]
    subprocess.run(cmd, check=True, cwd=REPO)
    return target


def ensure_atheris() -> None:
    if (SITE_DIR / "atheris").is_dir() and (SITE_DIR / "asan_with_fuzzer.so").exists():
        return
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(SITE_DIR)]
    subprocess.run([*pip, ATHERIS], check=True)


def build(force: bool = False) -> list[Path]:
    cc = clang()
    if cc is None:
        raise SystemExit("clang is missing: apt-get install clang libclang-rt-14-dev")
    ensure_atheris()
    entries = ext_modules()
    return [build_module(cc, name, entries[name], force) for name in FUZZED]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild every module")
    args = parser.parse_args()
    for path in build(args.force):
        print(path.relative_to(REPO))


if __name__ == "__main__":
    main()
