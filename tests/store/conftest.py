"""Store tests see a half-full disk unless they inject their own ``disk_usage``; ``store`` is a
started store with small files (a module may define its own).

Retention reads the real filesystem by default: on a box whose disk is above 75% used (a CI
runner, or this machine after benchmarks), cleanup deleted segments in the middle of tests that
had nothing to do with retention. Tests of retention pass their own fake (``test_cleanup``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from wharf.store import message_store
from wharf.store.message_store import MessageStore

from tests.store.helpers import small_config


@pytest.fixture(autouse=True)
def half_full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(message_store, "statvfs_used_ratio", lambda path: 0.5)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[MessageStore]:
    """A started store with small files (``helpers.small_config``); modules may define their own."""
    s = MessageStore(small_config(tmp_path / "store"))
    await s.start()
    yield s
    await s.shutdown()
