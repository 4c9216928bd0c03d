"""Run Debian's real Prometheus server on loopback for a test, with a config derived from
deploy/prometheus.yml (target rewritten to the test daemon, 1 s scrapes, temp storage)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.ops.deploy_files import DEPLOY, load_yaml


def free_port() -> int:
    # Prometheus reports no bound port for :0, so pick one; a lost race fails loudly at start.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def derive_config(metrics_endpoint: str, token_file: Path | None = None) -> dict[str, Any]:
    """``token_file``: the broker's metricsBearerTokenFile, in place of the compose secret's
    path; None: a broker without a token (the bearer header is left out)."""
    config = load_yaml(DEPLOY / "prometheus.yml")
    config["global"]["scrape_interval"] = "1s"
    config["global"]["evaluation_interval"] = "1s"
    config["rule_files"] = [str(DEPLOY / "alerts.yml")]
    (job,) = config["scrape_configs"]
    del job["scheme"], job["tls_config"]  # the test daemons' /metrics is plaintext (no TLS)
    job["static_configs"][0]["targets"] = [metrics_endpoint]
    if token_file is None:
        del job["authorization"]
    else:
        job["authorization"]["credentials_file"] = str(token_file)
    return config


class PrometheusServer:
    def __init__(self, root: Path, metrics_endpoint: str, token_file: Path | None = None) -> None:
        self.root = root
        self.config_path = root / "prometheus.yml"
        self.config_path.write_text(json.dumps(derive_config(metrics_endpoint, token_file)))
        self.port = free_port()
        self.log_path = root / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> PrometheusServer:
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("prometheus is not installed: apt-get install prometheus")
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={self.config_path}",
             f"--storage.tsdb.path={self.root / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=log, stderr=log,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as reply:
                    if reply.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"prometheus not ready after {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as reply:
            body = json.loads(reply.read())
        if body.get("status") != "success":
            raise AssertionError(f"prometheus API {path} {params}: {body}")
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        return self.api("query", query=promql)["result"]

    def wait_for(self, promql: str, timeout: float = 30) -> list[dict[str, Any]]:
        """Poll until the instant query returns a non-empty result."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = self.query(promql)
            if result:
                return result
            time.sleep(0.5)
        raise AssertionError(f"no result for {promql!r} after {timeout}s:\n{self.log()[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
