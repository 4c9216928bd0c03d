"""The client JVM sampler (tests/bench/jvm_threads.py) splits JIT threads from the rest and
keeps each thread's last figure, so a thread that ended still counts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.bench import jvm_threads
from tests.bench.jvm_threads import JvmThreads, thread_ticks


def _thread(proc: Path, pid: int, tid: int, name: str, user: int, system: int) -> None:
    task = proc / str(pid) / "task" / str(tid)
    task.mkdir(parents=True, exist_ok=True)
    # fields after the name: state, then 10 more, then utime and stime (14th and 15th)
    rest = ["S"] + ["0"] * 10 + [str(user), str(system)] + ["0"] * 5
    (task / "stat").write_text(f"{tid} ({name}) {' '.join(rest)}\n")


def test_thread_ticks_reads_names_with_spaces_and_parentheses(tmp_path: Path) -> None:
    _thread(tmp_path, 7, 8, "C2 CompilerThre", 300, 20)
    _thread(tmp_path, 7, 9, "weird) name", 5, 1)
    assert thread_ticks(7, tmp_path) == {8: ("C2 CompilerThre", 320), 9: ("weird) name", 6)}
    assert thread_ticks(99, tmp_path) == {}  # gone


def test_seconds_split_jit_from_the_rest_and_keep_ended_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Ran:
        stdout = "7\n"  # pgrep's answer: the JVM's pid

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: Ran())
    _thread(tmp_path, 7, 1, "C1 CompilerThre", 100, 0)
    _thread(tmp_path, 7, 2, "C2 CompilerThre", 200, 100)
    _thread(tmp_path, 7, 3, "grpc-default-wo", 50, 50)
    _thread(tmp_path, 7, 4, "Thread-12", 40, 0)
    jvm = JvmThreads("PeerBench", proc=tmp_path)
    jvm.sample()
    # thread 4 ends; thread 3 works on: the last figures count
    (tmp_path / "7" / "task" / "4" / "stat").unlink()
    _thread(tmp_path, 7, 3, "grpc-default-wo", 150, 50)
    jvm.sample()
    tick = jvm_threads._TICK
    assert jvm.seconds() == {"jit": 400 / tick, "other": (200 + 40) / tick}
