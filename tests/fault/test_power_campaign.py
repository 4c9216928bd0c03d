"""The power-loss campaign (tests/fault/power_campaign.py), short form for CI: 5 cuts under
SYNC_FLUSH while three producers send, each cut a SIGKILL of the broker and a powerfs cut in
the same instant, the restart recovering as after a machine crash (new boot id). Every
acknowledged message must be read back, at its offset, byte for byte. Skips (with the reason)
where FUSE cannot be mounted, as the other tests/fault tests do (~30 s)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fault.power_campaign import SYNC_FLUSH, Result, run_campaign
from tests.fault.powerfs import MountError

pytestmark = pytest.mark.slow


@pytest.fixture
def campaign(tmp_path: Path) -> Result:
    if not os.path.exists("/dev/fuse"):
        pytest.skip(
            "powerfs needs FUSE: /dev/fuse is missing (modprobe fuse; apt-get install fuse3)"
        )
    try:
        return run_campaign(
            tmp_path, cuts=5, flush=SYNC_FLUSH, between=(0.5, 1.5), seed=36, log=lambda _: None
        )
    except MountError as exc:
        pytest.skip(f"powerfs could not mount: {exc}")


@pytest.mark.timeout(180)
def test_five_power_cuts_under_load_lose_no_acknowledged_message(campaign: Result) -> None:
    table = campaign.table()
    assert len(campaign.cuts) == 5, table
    assert campaign.report.acknowledged > 0, table
    assert all(c.boot_id_rewritten for c in campaign.cuts), table
    assert not campaign.report.lost, table
    assert not campaign.corrupted, table
    assert not campaign.report.conflicting_offsets, table
    assert not campaign.report.misplaced, table
    assert not campaign.report.duplicated, table
    assert not campaign.failed_starts, table  # every restart after a cut came up
