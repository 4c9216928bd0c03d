"""Kafka's Java stream tools (``tests/java/kafka-tools``: Connect and Streams, each its own
class path, built by ``make java-clients``) run by the project's programs there, one JVM
each, with ``tests/javaclients.py``'s JVM options; without a JDK or that build the tests
skip, saying what to run."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests import javaclients

TOOLS = javaclients.JAVA_DIR / "target" / "kafka-tools"
MAINS = {
    "connect": "dev.wharf.kafkatools.ConnectTool",
    "streams": "dev.wharf.kafkatools.StreamsTool",
}
# The runs: name -> (module, JVM options); streams-eos is the word count under exactly_once_v2.
RUNS: dict[str, tuple[str, list[str]]] = {
    "connect": ("connect", []),
    "streams": ("streams", []),
    "streams-eos": ("streams", ["-Dprocessing.guarantee=exactly_once_v2"]),
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


def command(run: str, bootstrap: str, work: Path) -> list[str]:
    require()
    module, options = RUNS[run]
    classes, jars = TOOLS / module / "classes", TOOLS / module / "classpath.txt"
    work.mkdir(parents=True, exist_ok=True)
    classpath = f"{classes}:{jars.read_text().strip()}"
    return [
        "java",
        *javaclients.JVM,
        *options,
        "-cp",
        classpath,
        MAINS[module],
        bootstrap,
        str(work),
    ]


def run_one(run: str, bootstrap: str, root: Path, timeout: float) -> dict[str, Any]:
    """One program's result line, with ``_stderr`` (its log: warnings and errors) and
    ``_wall`` (seconds)."""
    start = time.monotonic()
    with (root / f"{run}.err").open("wb") as err:
        proc = subprocess.Popen(
            command(run, bootstrap, root / run), stdout=subprocess.PIPE, stderr=err, text=True
        )
    try:
        stdout, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, _ = proc.communicate()
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"ok": False, "error": f"exit {proc.returncode}"}
    result["_stderr"] = (root / f"{run}.err").read_text(errors="replace")
    result["_wall"] = time.monotonic() - start
    return result


def run_all(bootstrap: str, root: Path) -> dict[str, dict[str, Any]]:
    """Connect beside the two word counts, one after the other (Connect's two workers take
    as long as both), a JVM each: each run's result by name."""
    with ThreadPoolExecutor(2) as pool:
        connect = pool.submit(run_one, "connect", bootstrap, root, 200.0)
        streams = pool.submit(
            lambda: {
                run: run_one(run, bootstrap, root, 100.0) for run in ("streams", "streams-eos")
            }
        )
        return {"connect": connect.result(), **streams.result()}


def result(runs: dict[str, dict[str, Any]], module: str) -> dict[str, Any]:
    """The module's result, or an AssertionError with its error and the JVM's last warnings."""
    out = runs[module]
    if not out["ok"]:
        raise AssertionError(f"{module}: {out['error']}\n--- stderr ---\n{out['_stderr'][-4000:]}")
    return out
