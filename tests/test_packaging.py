"""The distribution as a user installs it: one wheel, one top-level import package, ``wharf``.

The wheel is built from the repository's package folders, installed into a fresh virtual
environment (its dependencies come from the test's own environment through a path entry, not
from the network), and used from outside the checkout: imports, console scripts, and a message
sent to and read back from the installed broker by the installed SDK.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# Folders that become the `wharf` package (pyproject.toml [tool.setuptools] package-dir).
PACKAGE_DIRS = {"wharf": "proto/wharf", "wharf.store": "store", "wharf.broker": "broker"}
PACKAGE_DIRS["wharf.client"] = "client"

pytestmark = pytest.mark.slow


def _package_folders() -> set[str]:
    """Every folder with an __init__.py under the package roots, as a dotted package name."""
    names = set()
    for package, folder in PACKAGE_DIRS.items():
        root = REPO_ROOT / folder
        for init in root.rglob("__init__.py"):
            rel = init.parent.relative_to(root).parts
            names.add(".".join((package, *rel)))
    return names


def test_pyproject_lists_every_package_folder() -> None:
    """The package list is explicit (no finder maps four folders into one namespace): a new
    subpackage missing from it would be left out of the wheel."""
    setuptools = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"] == PACKAGE_DIRS
    assert set(setuptools["packages"]) == _package_folders()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.pyc")
    for folder in ("proto", "store", "broker", "client"):
        shutil.copytree(REPO_ROOT / folder, source / folder, ignore=ignore)
    out = tmp_path_factory.mktemp("wheels")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "--wheel-dir", str(out), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    (path,) = out.glob("wharf-*.whl")
    return path


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    before = set(os.listdir(purelib))
    result = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    added = set(os.listdir(purelib)) - before
    (root / "added.json").write_text(json.dumps(sorted(added)))
    # The dependencies (grpcio, protobuf, numpy ...) from this environment's site-packages: a
    # path entry appended after the venv's own, so `wharf` resolves to the installed wheel.
    # .pth files inside an appended entry are not processed: the checkout's editable finder
    # is not loaded.
    (Path(purelib) / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return root


def test_the_wheel_installs_exactly_one_top_level_package(venv: Path, wheel: Path) -> None:
    dist_info = "-".join(wheel.name.split("-")[:2]) + ".dist-info"  # wharf-0.1.0.dist-info
    added = json.loads((venv / "added.json").read_text())
    assert sorted(added) == sorted(["wharf", dist_info])
    top = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert top == {"wharf", dist_info}


def _run(venv: Path, *args: str, cwd: Path, timeout: float = 60) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [str(venv / "bin" / args[0]), *args[1:]],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_the_installed_sdk_broker_and_stubs_import_from_the_wheel(
    venv: Path, tmp_path: Path
) -> None:
    out = _run(
        venv, "python", "-c",
        "import wharf.store, wharf.broker.__main__, wharf.v1.messaging_pb2, wharf.client.spark\n"
        "from wharf.client import Producer, PushConsumer, PullConsumer, Admin, Message\n"
        "from wharf.store.fast import load\n"
        "print(wharf.store.__file__)\n"
        "print(load('_log_scan') is not None)\n",
        cwd=tmp_path,
    )  # fmt: skip
    path, built = out.split()
    assert Path(path).is_relative_to(venv), path
    assert built == "True"  # the compiled accelerators are in the wheel
    for script in ("wharf", "wharf-broker", "wharf-probe"):
        assert "usage" in _run(venv, script, "--help", cwd=tmp_path).lower()


def test_the_installed_broker_serves_the_installed_sdk(venv: Path, tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    log = (tmp_path / "broker.log").open("wb")
    broker = subprocess.Popen(
        [str(venv / "bin" / "wharf-broker"), "--store-dir", str(tmp_path / "store"),
         "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
         "--ready-file", str(ready)],
        cwd=tmp_path, env=env, stdout=log, stderr=log,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert broker.poll() is None, (tmp_path / "broker.log").read_text()
            assert time.monotonic() < deadline, "broker not ready"
            time.sleep(0.05)
        time.sleep(0.05)  # the ready file is written whole, but let the writer finish
        endpoint = json.loads(ready.read_text())["grpc"]
        _run(venv, "wharf", "--endpoints", endpoint, "topic", "create", "Packaged", cwd=tmp_path)
        _run(venv, "wharf", "--endpoints", endpoint, "send", "Packaged", "hello", cwd=tmp_path)
        out = _run(
            venv, "wharf", "--endpoints", endpoint, "--json", "consume", "Packaged",
            "--from", "beginning", "--max", "1", cwd=tmp_path,
        )  # fmt: skip
        assert "hello" in out
    finally:
        broker.terminate()
        broker.wait(30)
        log.close()
