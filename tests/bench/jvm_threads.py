"""A client JVM's CPU by kind of thread, sampled from /proc while it runs: the JIT compiler
threads apart from the rest.

Why: a 20,000-message run of Apache's 5.x Java client lasts ~25 s, and its JIT compiles for
most of it (7-15 s of CPU on this 2-core machine: ``v2_ceiling``), on the same cores as the
broker. How much of the client's CPU was warm-up, and how much the calls' own work, decides
whether a gap is the server's or the run's length (tests/bench/README.md, "The client's JIT").

The sampler keeps each thread's last user + system ticks (``/proc/PID/task/TID/stat``); a
JVM halted at the end (PeerBench) loses at most the last interval (0.2 s).
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from types import TracebackType

from tests.bench.broker_send import stat_ticks

__all__ = ["JvmThreads", "thread_ticks"]

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
JIT_PREFIXES = ("C1 CompilerThre", "C2 CompilerThre")  # HotSpot's names, cut to 15 bytes


def thread_ticks(pid: int, proc: Path = Path("/proc")) -> dict[int, tuple[str, int]]:
    """Each thread of ``pid``: (its name, user + system ticks); {} once the process is gone."""
    found: dict[int, tuple[str, int]] = {}
    try:
        tids = os.listdir(proc / str(pid) / "task")
    except OSError:
        return found
    for tid in tids:
        try:
            stat = (proc / str(pid) / "task" / tid / "stat").read_text()
        except OSError:
            continue  # the thread ended between the listing and the read
        found[int(tid)] = (stat[stat.index("(") + 1 : stat.rindex(")")], sum(stat_ticks(stat)))
    return found


class JvmThreads:
    """``with JvmThreads("dev.wharf.peers.PeerBench") as jvm: ...`` then ``jvm.seconds()``:
    CPU seconds of the matching processes' JIT threads and of the rest."""

    def __init__(self, pattern: str, interval: float = 0.2, proc: Path = Path("/proc")) -> None:
        self._pattern, self._interval, self._proc = pattern, interval, proc
        self._last: dict[tuple[int, int], tuple[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jvm-threads", daemon=True)

    def __enter__(self) -> JvmThreads:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:  # fmt: skip
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    def sample(self) -> None:
        pids = subprocess.run(["pgrep", "-f", self._pattern], capture_output=True, text=True,
                              check=False).stdout.split()  # fmt: skip
        for pid in map(int, pids):
            for tid, seen in thread_ticks(pid, self._proc).items():
                self._last[(pid, tid)] = seen

    def seconds(self) -> dict[str, float]:
        jit = sum(t for name, t in self._last.values() if name.startswith(JIT_PREFIXES))
        every = sum(t for _, t in self._last.values())
        return {"jit": jit / _TICK, "other": (every - jit) / _TICK}
