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


def classpath(own: bool = True) -> str:
    """The resolved jars (in ~/.m2), after the project's compiled test programs when ``own``
    (Apache's tools run without them: mqadmin reads its own logback configuration)."""
    if shutil.which("java") is None:
        pytest.skip("no java on the PATH: install a JDK >= 17 (e.g. openjdk-17-jdk-headless)")
    if not DEPENDENCIES.exists() or not CLASSES.exists():
        pytest.skip("the Java clients are not built: run `make java-clients` (needs mvn)")
    jars = DEPENDENCIES.read_text().strip()
    return f"{CLASSES}{os.pathsep}{jars}" if own else jars


def command(home: Path, *args: str, own: bool = True) -> list[str]:
    """``java`` with ``user.home`` = ``home`` (the RocketMQ clients write logs and offsets
    under it; Java takes it from the password database, not $HOME)."""
    home.mkdir(parents=True, exist_ok=True)
    return ["java", *JVM, f"-Duser.home={home}", "-cp", classpath(own), *args]


def env(home: Path) -> dict[str, str]:
    """$HOME and $ROCKETMQ_HOME in ``home``; no NAMESRV_ADDR of the caller's (the programs
    and mqadmin are given theirs)."""
    out = {**os.environ, "HOME": str(home), "ROCKETMQ_HOME": str(home)}
    out.pop("NAMESRV_ADDR", None)
    return out


def run(
    home: Path, *args: str, timeout: float, own: bool = True
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(home, *args, own=own), capture_output=True, text=True, env=env(home),
        timeout=timeout, check=False,
    )  # fmt: skip


def results(proc: subprocess.CompletedProcess[str], seconds: float) -> dict[str, Any]:
    """Every scenario's JSON line by name; ``_proc`` and ``_seconds`` for the reports."""
    out: dict[str, Any] = {"_proc": proc, "_seconds": seconds}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            line_out = json.loads(line)
            out[line_out["scenario"]] = line_out
    return out


def scenario(results: dict[str, Any], name: str, home: Path | None = None) -> dict[str, Any]:
    """One scenario's result, or an AssertionError with its error, the JVM's stderr and the
    RocketMQ client's logs under ``home`` (when given)."""
    out = results.get(name)
    proc = results["_proc"]
    if out is None or not out["ok"]:
        detail = out["error"] if out else f"exit {proc.returncode}\n{proc.stdout[-3000:]}"
        logs = (
            ""
            if home is None
            else "\n".join(p.read_text(errors="replace")[-3000:] for p in home.glob("logs/*/*.log"))
        )
        raise AssertionError(f"{name}: {detail}\n--- stderr ---\n{proc.stderr[-3000:]}\n{logs}")
    return out
