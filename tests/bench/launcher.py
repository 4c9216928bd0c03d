"""Start the peers of a comparison run as subprocesses on loopback: the Wharf daemon (the
same way tests/harness.py does: ready file, ephemeral ports) and Debian's redis-server."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


class ServerProcess:
    def __init__(self, name: str, proc: subprocess.Popen[bytes], endpoint: str, log: Path) -> None:
        self.name = name
        self.proc = proc
        self.endpoint = endpoint
        self.log = log

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))


def start_wharf(root: Path, settings: dict[str, object], timeout: float = 60.0) -> ServerProcess:
    root.mkdir(parents=True, exist_ok=True)
    config = root / "broker.toml"
    config.write_text("".join(f"{k} = {_toml(v)}\n" for k, v in settings.items()))
    ready = root / "ready.json"
    ready.unlink(missing_ok=True)
    log = root / "broker.log"
    with log.open("ab") as handle:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "wharf.broker",
                "--config", str(config),
                "--store-dir", str(root / "store"),
                "--listen", "127.0.0.1:0",
                "--metrics-listen", "127.0.0.1:0",
                "--ready-file", str(ready),
                "--log-level", "WARNING",
            ],
            cwd=REPO_ROOT, stdout=handle, stderr=handle,
        )  # fmt: skip
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"wharf broker exited with {proc.returncode}: see {log}")
        if ready.exists():
            try:
                info = json.loads(ready.read_text())
                return ServerProcess("wharf", proc, info["grpc"], log)
            except (json.JSONDecodeError, KeyError):
                pass
        time.sleep(0.05)
    proc.kill()
    raise TimeoutError(f"wharf broker not ready after {timeout}s")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_redis(root: Path, appendfsync: str, timeout: float = 20.0) -> ServerProcess:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError(
            "redis-server not found: apt-get install -y redis-server (make system-deps)"
        )
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = root / "redis.log"
    with log.open("ab") as handle:
        proc = subprocess.Popen(
            [
                binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(root),
                "--save", "", "--appendonly", "yes", "--appendfsync", appendfsync,
                "--protected-mode", "yes", "--daemonize", "no",
            ],
            stdout=handle, stderr=handle, env={**os.environ},
        )  # fmt: skip
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with {proc.returncode}: see {log}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return ServerProcess("redis", proc, f"127.0.0.1:{port}", log)
        except OSError:
            pass
        time.sleep(0.05)
    proc.kill()
    raise TimeoutError("redis-server not ready")
