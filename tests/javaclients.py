"""Running the project's Java test programs (``tests/java/src``, built by ``make java-clients``
against Apache's clients fetched by ``tests/java/pom.xml``) from pytest: the class path, a JVM
with its own home, and the programs' JSON result lines (one per scenario, from
``Scenarios.java``), a JVM steered line by line (``Steered``, ``Rmq4Members.java``), and
Apache's ``mqadmin``. Without a JDK, Maven or that build the tests skip, saying what to run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
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
    # cwd: the tools write relative files (consumerStatus: <ms>/<clientId> for each consumer).
    return subprocess.run(
        command(home, *args, own=own), capture_output=True, text=True, env=env(home),
        timeout=timeout, check=False, cwd=home,
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


class Steered:
    """A Java program that reads commands on stdin and prints one JSON event a line
    (``Rmq4Members``): ``send`` a command, ``wait_for`` an event, ``kill`` it (SIGKILL);
    ``events`` holds every line read so far, in order."""

    def __init__(self, home: Path, main: str, *args: str) -> None:
        self.home = home
        self.proc = subprocess.Popen(
            command(home, main, *args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=env(home), cwd=home,
        )  # fmt: skip
        self.events: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        self._eof = False  # its stdout closed: it exited
        self._changed = threading.Condition(threading.RLock())  # of() inside wait_for()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._drain, daemon=True).start()
        self.wait_for(lambda: bool(self.of("ready")), 60)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                with self._changed:  # no wake-up per line: waiters look 10 times a second
                    self.events.append(json.loads(line))
        with self._changed:
            self._eof = True
            self._changed.notify_all()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        self.stderr.extend(self.proc.stderr)

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def of(self, kind: str, **fields: Any) -> list[dict[str, Any]]:
        """The events of ``kind`` whose fields have the given values."""
        with self._changed:
            return [
                e for e in self.events
                if e["event"] == kind and all(e.get(k) == v for k, v in fields.items())
            ]  # fmt: skip

    def wait_for(self, done: Callable[[], bool], timeout: float) -> None:
        """Until ``done()`` (asked every 0.1 s: it may scan thousands of lines), else an
        AssertionError with the JVM's last output."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not done():
                left = deadline - time.monotonic()
                if left <= 0 or self._eof:
                    raise AssertionError(f"not seen in {timeout} s\n{self.report()}")
                self._changed.wait(min(left, 0.1))

    def report(self) -> str:
        tail = "\n".join(json.dumps(e) for e in self.events[-15:])
        return f"exit {self.proc.poll()}\n{tail}\n--- stderr ---\n{''.join(self.stderr)[-3000:]}"

    def kill(self) -> None:
        """SIGKILL: no shutdown hook, no offset persisted, no unregister."""
        self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("quit")
                self.proc.wait(15)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()


MQADMIN = "org.apache.rocketmq.tools.command.MQAdminStartup"
# mqadmin reads $ROCKETMQ_HOME/conf/logback_tools.xml before any command (MQAdminStartup's
# initLogback) and runs none without it: the file a RocketMQ installation ships, reduced to
# warnings on stderr.
LOGBACK_TOOLS = """<configuration>
  <appender name="STDERR" class="ch.qos.logback.core.ConsoleAppender">
    <target>System.err</target>
    <encoder><pattern>%d{HH:mm:ss.SSS} %-5level %logger{20} - %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="STDERR"/></root>
</configuration>
"""


# mqadmin's own time-outs (3-5 s a request; its command line has no setting for them) ran out
# on a VM at load average ~20 on 2 cores (a write not even flushed in time reads as "send
# request failed"; a route lookup that could not take the client's route lock within 3 s,
# its log's "tryLock timeout", reads as "not matched route info"): a command failing with one
# of these is run once more, as a user would. A route really missing fails twice.
MQADMIN_TIMEOUTS = (
    "RemotingTimeoutException",
    "RemotingSendRequestException",
    "not matched route info",
)


def mqadmin(home: Path, namesrv: str) -> Callable[..., str]:
    """``mqadmin(cmd, *args)``: its stdout, run as Apache's ``bin/mqadmin`` runs it (``java
    -cp <rocketmq lib> org.apache.rocketmq.tools.command.MQAdminStartup cmd ... -n ADDR``).
    MQAdminStartup exits 0 even when a command fails (it prints the stack trace): stderr must
    be clean (after one retry of a time-out)."""
    (home / "conf").mkdir(parents=True, exist_ok=True)
    (home / "conf" / "logback_tools.xml").write_text(LOGBACK_TOOLS)

    def run_one(*args: str) -> str:
        for attempt in (1, 2):
            proc = run(home, MQADMIN, *args, "-n", namesrv, timeout=60, own=False)
            if attempt == 2 or not any(e in proc.stderr for e in MQADMIN_TIMEOUTS):
                break
        assert proc.returncode == 0, proc.stderr
        assert "Exception" not in proc.stderr and "failed" not in proc.stdout, (
            f"{args}\n{proc.stdout}\n{proc.stderr}"
        )
        return proc.stdout

    return run_one
