"""Running the project's Java test programs (``tests/java/src``, built by ``make java-clients``
against Apache's clients fetched by ``tests/java/pom.xml``) from pytest: the class path, a JVM
with its own home, and the programs' JSON result lines (one per scenario, from
``Scenarios.java``). Without a JDK, Maven or that build the tests skip, saying what to run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.harness import REPO_ROOT

JAVA_DIR = REPO_ROOT / "tests" / "java"
CLASSES = JAVA_DIR / "target" / "classes"
DEPENDENCIES = JAVA_DIR / "target" / "classpath.txt"  # written by `mvn package`
# A short-lived client JVM: C1 only and the serial collector start faster and leave the
# broker its share of the 2 cores.
JVM = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xmx512m"]


def classpath() -> str:
    """The project's compiled test programs and the resolved jars (in ~/.m2)."""
    if shutil.which("java") is None:
        pytest.skip("no java on the PATH: install a JDK >= 17 (e.g. openjdk-17-jdk-headless)")
    if not DEPENDENCIES.exists() or not CLASSES.exists():
        pytest.skip("the Java clients are not built: run `make java-clients` (needs mvn)")
    return f"{CLASSES}{os.pathsep}{DEPENDENCIES.read_text().strip()}"


def command(home: Path, *args: str) -> list[str]:
    """``java`` with ``user.home`` = ``home`` (the RocketMQ clients write logs and offsets
    under it; Java takes it from the password database, not $HOME)."""
    home.mkdir(parents=True, exist_ok=True)
    return ["java", *JVM, f"-Duser.home={home}", "-cp", classpath(), *args]


def env(home: Path) -> dict[str, str]:
    return {**os.environ, "HOME": str(home), "ROCKETMQ_HOME": str(home)}


def run(home: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(home, *args), capture_output=True, text=True, env=env(home), timeout=timeout,
        check=False,
    )  # fmt: skip


def results(proc: subprocess.CompletedProcess[str], seconds: float) -> dict[str, Any]:
    """Every scenario's JSON line by name; ``_proc`` and ``_seconds`` for the reports."""
    out: dict[str, Any] = {"_proc": proc, "_seconds": seconds}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            line_out = json.loads(line)
            out[line_out["scenario"]] = line_out
    return out


def scenario(results: dict[str, Any], name: str) -> dict[str, Any]:
    """One scenario's result, or an AssertionError with its error and the JVM's stderr."""
    out = results.get(name)
    proc = results["_proc"]
    if out is None or not out["ok"]:
        detail = out["error"] if out else f"exit {proc.returncode}\n{proc.stdout[-3000:]}"
        raise AssertionError(f"{name}: {detail}\n--- stderr ---\n{proc.stderr[-3000:]}")
    return out
