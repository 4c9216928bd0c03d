"""The one launcher of the real broker daemon, for tests and benchmarks: a subprocess on
127.0.0.1 with ephemeral ports.

    with BrokerProcess(tmp_path, settings={"flushDiskType": "SYNC_FLUSH"}) as broker:
        channel = grpc.insecure_channel(broker.endpoint)

``settings`` are RocketMQ-named TOML settings written to ``<root>/broker.toml``; the store is
``<root>/store`` and the broker's stdout and stderr go to ``<root>/broker.log``. The broker
writes ``--ready-file`` (JSON: grpc, metrics, pid) once it serves; ``start`` waits for that
file, so ``endpoint`` is the port the OS picked. With ``tlsEnable`` it also names the ``tls``
and ``plaintext`` ports (``tls_endpoint``, ``plaintext_endpoint``; ``endpoint`` is TLS-only
without ``tlsListen``). ``stop`` is a graceful SIGTERM, ``kill`` a crash (SIGKILL). A restart reuses the root, so the store survives it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A loopback port free right now (for a broker that must keep its port across restarts,
    or for an address nothing listens on)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))


class BrokerProcess:
    def __init__(
        self,
        root: Path,
        settings: dict[str, Any] | None = None,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        ready_timeout: float = 30.0,
    ) -> None:
        self.root = Path(root)
        self.store_dir = self.root / "store"
        self.settings = dict(settings or {})
        self.extra_args = list(extra_args or [])
        self.env = dict(env or {})
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.endpoint = ""
        self.metrics_endpoint = ""
        # With tlsEnable: the port serving TLS (= endpoint without tlsListen), and the
        # plaintext one ("" when listen is TLS-only).
        self.tls_endpoint = ""
        self.plaintext_endpoint = ""
        self.log_path = self.root / "broker.log"

    def start(self, timeout: float | None = None) -> BrokerProcess:
        timeout = self.ready_timeout if timeout is None else timeout
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "broker.toml"
        config.write_text("".join(f"{k} = {_toml_value(v)}\n" for k, v in self.settings.items()))
        ready = self.root / "ready.json"
        ready.unlink(missing_ok=True)
        cmd = [
            sys.executable, "-m", "wharf.broker",
            "--config", str(config),
            "--store-dir", str(self.store_dir),
            "--listen", "127.0.0.1:0",
            "--metrics-listen", "127.0.0.1:0",
            "--ready-file", str(ready),
            *self.extra_args,
        ]  # fmt: skip
        env = {**os.environ, **self.env}
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log()}")
            if ready.exists():
                try:
                    info = json.loads(ready.read_text())
                except json.JSONDecodeError:  # caught mid-write
                    time.sleep(0.02)
                    continue
                self.endpoint = info["grpc"]
                self.metrics_endpoint = info.get("metrics", "")
                self.tls_endpoint = info.get("tls") or ""
                self.plaintext_endpoint = info.get("plaintext") or ""
                return self
            time.sleep(0.02)
        self.kill()
        raise TimeoutError(f"broker not ready after {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self, timeout: float = 30.0) -> int:
        """Graceful stop (SIGTERM); returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def kill(self) -> None:
        """Crash it: SIGKILL, no shutdown hooks run."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.stop()
            except Exception:
                self.kill()
