"""Download, on the host, every wheel Wharf's image installs, for the image's own Python.

    python deploy/wheelhouse.py --python 3.11 --out build/wheelhouse

The Dockerfile installs from this folder with ``pip install --no-index``, so ``docker build``
needs no network (a machine with no image registry often has no PyPI inside builds either; and
a build that needs the network must not get a bridge here). What is fetched: the project's
dependencies with the ``console`` extra (the image also runs ``wharf console``) and its build
requirements (setuptools, wheel: the project's own wheel, with its C accelerators, is compiled
inside the build stage against the image's Python headers). Binary wheels only, for CPython of
the given version on glibc x86_64: manylinux 2.17 to 2.36, what Debian bookworm's glibc (2.36)
and the official python:3.12-slim run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GLIBC_MINORS = range(17, 37)


def requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [
        *project["build-system"]["requires"],
        *project["project"]["dependencies"],
        *project["project"]["optional-dependencies"]["console"],
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", required=True, help="the image's Python, e.g. 3.11")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    platforms = [f"manylinux_2_{minor}_x86_64" for minor in reversed(GLIBC_MINORS)]
    platforms += ["manylinux2014_x86_64"]
    command = [sys.executable, "-m", "pip", "download", "-q", "--dest", str(args.out)]
    command += ["--only-binary=:all:", "--python-version", args.python, "--implementation", "cp"]
    for platform in platforms:
        command += ["--platform", platform]
    subprocess.run([*command, *requirements()], check=True)
    wheels = sorted(p.name for p in args.out.glob("*.whl"))
    print(f"wheelhouse {args.out}: {len(wheels)} wheels for CPython {args.python}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
