"""Helpers for the browser tests and `make console-screenshots`: the real `wharf console`
process, and headless Debian chromium driven by Selenium through Debian's chromedriver.

No browser or driver is downloaded: ``chromium_driver`` names /usr/bin/chromium and
/usr/bin/chromedriver (``make system-deps`` installs the `chromium` and `chromium-driver`
packages), so Selenium Manager is never asked to fetch one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from tests.harness import REPO_ROOT, free_port

CHROMIUM = os.environ.get("WHARF_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("WHARF_CHROMEDRIVER", "/usr/bin/chromedriver")


def browser_missing() -> str | None:
    """Why the browser tests cannot run here (None: they can)."""
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not (Path(path).exists() or shutil.which(path)):
            return f"{path} not found: apt-get install {package} (make system-deps does)"
    return None


def chromium_driver(width: int = 1400, height: int = 900):  # type: ignore[no-untyped-def]
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    return driver


class ConsoleProcess:
    """``wharf console`` on a free loopback port; ``url`` once it answers."""

    def __init__(self, endpoints: str, log_path: Path, *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.cmd = [
            sys.executable, "-m", "wharf.client.cli.main", "console",
            "--endpoints", endpoints, "--listen", f"127.0.0.1:{self.port}",
            "--sample-interval", "0.5", *extra,
        ]  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ConsoleProcess:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(self.cmd, cwd=REPO_ROOT, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"console exited: {self.log_path.read_text()}")
            try:
                with urllib.request.urlopen(f"{self.url}/static/console.css", timeout=1):
                    return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.1)
        self.__exit__(None, None, None)
        raise TimeoutError(f"console not serving after 30 s: {self.log_path.read_text()}")

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
