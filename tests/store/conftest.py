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
from wharf.store import ConsumerLink, message_store
from wharf.store.message_store import MessageStore

from tests.store.helpers import small_config
from tests.store.hooked import hooked_store


@pytest.fixture(autouse=True)
def half_full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(message_store, "statvfs_used_ratio", lambda path: 0.5)


@pytest.fixture
def committed() -> dict[tuple[str, str, int], int]:
    """The committed offsets ``store`` is given, by (group, topic, queue id): a test sets them
    (the broker's offset table in a broker)."""
    return {}


@pytest.fixture
async def store(
    tmp_path: Path, committed: dict[tuple[str, str, int], int]
) -> AsyncIterator[MessageStore]:
    """A started store with small files (``helpers.small_config``) and the broker's put hook
    (``hooked.py``); modules may define their own."""
    consumers = ConsumerLink(committed=lambda group, topic, queue_id: committed.get(
        (group, topic, queue_id), -1))  # fmt: skip
    s = hooked_store(small_config(tmp_path / "store"), consumers=consumers)
    await s.start()
    yield s
    await s.shutdown()
