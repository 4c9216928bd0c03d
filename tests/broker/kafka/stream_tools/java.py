"""Kafka's Java stream tools (``tests/java/kafka-tools``: Connect and Streams, each its own
class path, built by ``make java-clients``) run by the project's programs there, one JVM
each, with ``tests/javaclients.py``'s JVM options; without a JDK or that build the tests
skip, saying what to run."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests import javaclients

TOOLS = javaclients.JAVA_DIR / "target" / "kafka-tools"
MAINS = {
    "connect": "dev.wharf.kafkatools.ConnectTool",
    "streams": "dev.wharf.kafkatools.StreamsTool",
}


def require() -> None:
    """Skips without a JDK or the programs' build."""
    if shutil.which("java") is None:
        pytest.skip("no java on the PATH: install a JDK >= 17 (e.g. openjdk-17-jdk-headless)")
    for module in MAINS:
        if (
            not (TOOLS / module / "classes").exists()
            or not (TOOLS / module / "classpath.txt").exists()
        ):
            pytest.skip("Kafka's stream tools are not built: run `make java-clients` (needs mvn)")


def command(module: str, bootstrap: str, work: Path) -> list[str]:
    require()
    classes, jars = TOOLS / module / "classes", TOOLS / module / "classpath.txt"
    work.mkdir(parents=True, exist_ok=True)
    classpath = f"{classes}:{jars.read_text().strip()}"
    return ["java", *javaclients.JVM, "-cp", classpath, MAINS[module], bootstrap, str(work)]


def run_all(bootstrap: str, root: Path, timeout: float = 200.0) -> dict[str, dict[str, Any]]:
    """Both programs at once, one JVM each (most of their time is start-ups and group
    joins); each one's result line by module name, with ``_stderr`` (its log: warnings and
    errors) and ``_wall`` (seconds)."""
    procs = {}
    start = time.monotonic()
    for module in MAINS:
        cmd = command(module, bootstrap, root / module)
        with (root / f"{module}.err").open("wb") as err:
            procs[module] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
    out: dict[str, dict[str, Any]] = {}
    for module, proc in procs.items():
        try:
            stdout, _ = proc.communicate(timeout=max(timeout - (time.monotonic() - start), 1))
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, _ = proc.communicate()
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        result = (
            json.loads(lines[-1]) if lines else {"ok": False, "error": f"exit {proc.returncode}"}
        )
        result["_stderr"] = (root / f"{module}.err").read_text(errors="replace")
        result["_wall"] = time.monotonic() - start
        out[module] = result
    return out


def result(runs: dict[str, dict[str, Any]], module: str) -> dict[str, Any]:
    """The module's result, or an AssertionError with its error and the JVM's last warnings."""
    out = runs[module]
    if not out["ok"]:
        raise AssertionError(f"{module}: {out['error']}\n--- stderr ---\n{out['_stderr'][-4000:]}")
    return out
