"""Fixtures shared by the fault tests: a powerfs mount (tests/fault/powerfs.py) that skips the
test, with the reason, where FUSE cannot be mounted (no /dev/fuse, no libfuse 3, no mfusepy, a
mount refused)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fault.powerfs import MountError, PowerFS

Mount = Callable[..., PowerFS]


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[Mount]:
    """``mount(base=tmp_path, backing_sync=False)``: a powerfs over ``base/backing`` mounted at
    ``base/mnt`` (skips when it cannot mount); every mount made is unmounted at the end. The
    same ``base`` can be mounted again once stopped (a restarted daemon)."""
    made: list[PowerFS] = []

    def _mount(base: Path | None = None, backing_sync: bool = False) -> PowerFS:
        if not os.path.exists("/dev/fuse"):
            pytest.skip(
                "powerfs needs FUSE: /dev/fuse is missing (modprobe fuse; apt-get install fuse3)"
            )
        base = tmp_path if base is None else base
        fs = PowerFS(base / "backing", base / "mnt", backing_sync=backing_sync)
        try:
            fs.start()
        except MountError as exc:
            pytest.skip(f"powerfs could not mount: {exc}")
        made.append(fs)
        return fs

    try:
        yield _mount
    finally:
        for fs in reversed(made):
            fs.stop()  # idempotent: a test may have stopped it already


@pytest.fixture
def fs(mount: Mount) -> PowerFS:
    """A fresh powerfs at ``tmp_path/mnt`` over ``tmp_path/backing``."""
    return mount()
