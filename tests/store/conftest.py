"""Store tests see a half-full disk unless they inject their own ``disk_usage``.

Retention reads the real filesystem by default: on a box whose disk is above 75% used (a CI
runner, or this machine after benchmarks), cleanup deleted segments in the middle of tests that
had nothing to do with retention. Tests of retention pass their own fake (``test_cleanup``).
"""

from __future__ import annotations

import pytest
from wharf.store import message_store


@pytest.fixture(autouse=True)
def half_full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(message_store, "statvfs_used_ratio", lambda path: 0.5)
