"""A power cut of a controller-mode group's master (issue 36), the short form of
``python -m tests.fault.power_campaign --sync-master``: etcd, a NameServer and broker-a as two
replicas (SYNC_MASTER + SYNC_FLUSH) on 127.0.0.1, each replica's store on a powerfs of its own.
Under a small load (one producer of two senders through the NameServer, one attempt per send,
unique bodies checked byte for byte; a consumer pulling and committing), the master's power is
cut: SIGKILL and powerfs cut in the same instant, the abort marker given a new boot id (the
restart recovers as after a machine crash). The replica must be elected, the old master must
come back as its replica and catch up; then every queue is read from both replicas and the
checker must find no acknowledged message lost, misplaced or duplicated, no offset holding two
messages (the live consumer's reads included), no committed offset moving back, and the two
copies identical. Skips (with the reason) without FUSE or etcd (~25 s)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.fault.power_campaign import GroupCut, Result, run_group_campaign
from tests.fault.powerfs import MountError

pytestmark = pytest.mark.slow


@pytest.fixture
def campaign(tmp_path: Path) -> Result:
    if not os.path.exists("/dev/fuse"):
        pytest.skip(
            "powerfs needs FUSE: /dev/fuse is missing (modprobe fuse; apt-get install fuse3)"
        )
    if shutil.which("etcd") is None:
        pytest.skip("etcd is not installed: run `make system-deps` (Debian etcd-server)")
    try:
        return run_group_campaign(
            tmp_path, cuts=1, between=(2.0, 3.0), seed=36, log=print, producers=1, pause=0.01
        )
    except MountError as exc:
        pytest.skip(f"powerfs could not mount: {exc}")


@pytest.mark.timeout(180)
def test_a_power_cut_of_the_sync_master_loses_no_acknowledged_message(campaign: Result) -> None:
    table = campaign.table()
    print(table)
    [cut] = campaign.cuts
    assert isinstance(cut, GroupCut), table
    assert cut.new not in (0, cut.old), table  # the replica was elected
    assert cut.boot_id_rewritten, table  # the restart took the machine-crash path
    assert not campaign.failed_starts, table  # the old master came back (as a replica)
    assert campaign.report.acknowledged >= 200, table
    assert not campaign.report.lost, table
    assert not campaign.report.misplaced, table
    assert not campaign.report.duplicated, table
    assert not campaign.report.conflicting_offsets, table
    assert not campaign.report.offsets_moved_back, table
    assert not campaign.corrupted, table
    assert not campaign.replica_mismatches, table
    assert campaign.ok, table
