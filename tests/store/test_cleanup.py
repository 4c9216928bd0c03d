"""Retention thresholds with a simulated disk (76 / 86 / 91 %) and queue/index cleanup."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from wharf.store import ConsumerLink
from wharf.store.config import SYNC_FLUSH, parse_delete_when
from wharf.store.errors import DiskFullError
from wharf.store.message_store import MessageStore
from wharf.store.model import GetStatus
from wharf.store.observer import FlushTally
from wharf.store.parts import StoreParts
from wharf.store.paths import StorePaths
from wharf.store.recovery import recover_blocking
from wharf.store.services.cleanup import CleanupService, statvfs_used_ratio

from tests.store.helpers import msg, small_config

HOUR_MS = 3_600_000


class FakeDisk:
    def __init__(self) -> None:
        self.ratio = 0.5

    def __call__(self, path: str) -> float:
        assert os.path.isdir(path)
        return self.ratio


@pytest.fixture
def disk() -> FakeDisk:
    return FakeDisk()


@pytest.fixture
def consumed() -> dict[tuple[str, int], dict[str, int]]:
    """The committed offsets the store's retention reads, (topic, queue id) -> {group: offset}."""
    return {}


@pytest.fixture
async def store(
    tmp_path: Path, disk: FakeDisk, consumed: dict[tuple[str, int], dict[str, int]]
) -> AsyncIterator[MessageStore]:
    not_now = (time.localtime().tm_hour + 12) % 24
    config = small_config(
        tmp_path,
        flush_disk_type=SYNC_FLUSH,
        delete_when=f"{not_now:02d}",
        clean_resource_interval=3_600_000,  # tests drive the passes
        delete_commit_log_files_interval=0,
    )
    s = MessageStore(config, disk_usage=disk, consumers=ConsumerLink(progress=lambda: consumed))
    await s.start()
    for i in range(12):
        await s.put("T", 0, [msg(b"x" * 900, uniq=f"U{i}-{j}") for j in range(10)])
    assert await s.wait_dispatched()
    yield s
    await s.shutdown()


def _age_segments(store: MessageStore, hours: float) -> None:
    past = time.time() - hours * 3600
    for path in (store.insides.paths.commit_log_dir).iterdir():
        if not (len(path.name) == 20 and path.name.isdigit()):
            continue  # a preallocation's temporary file, renamed or removed concurrently
        os.utime(path, (past, past))


async def test_nothing_is_deleted_below_the_thresholds_outside_delete_when(
    store: MessageStore, disk: FakeDisk
) -> None:
    _age_segments(store, 100)
    segments = store.stats().commit_log_segments
    assert await store.insides.cleanup_service.clean_commit_log() == 0
    assert store.stats().commit_log_segments == segments
    assert store.stats().disk_used_ratio == 0.5


async def test_above_75_percent_expired_segments_go_and_queues_follow(
    store: MessageStore, disk: FakeDisk
) -> None:
    disk.ratio = 0.76
    segments = store.stats().commit_log_segments
    assert segments > 4
    # Unexpired files stay even though the disk is over 75 %.
    assert await store.insides.cleanup_service.clean_commit_log() == 0
    _age_segments(store, 73)
    assert await store.insides.cleanup_service.clean_commit_log() > 0
    # Between the log's and the queues' cleanup, units point at deleted data.
    removing = store.get_messages("T", 0, 0, 4)
    assert removing.status is GetStatus.MESSAGE_WAS_REMOVING
    assert (removing.next_begin_offset, removing.messages) == (4, [])
    await store.insides.cleanup_service.clean_queues_and_index()
    stats = store.stats()
    assert 1 <= stats.commit_log_segments < segments
    log_min = stats.commit_log_min_offset
    assert log_min > 0
    # ConsumeQueue: files wholly below the log's min offset are gone, min offset corrected.
    queue = store.insides.queues.find("T", 0)
    assert queue is not None
    min_offset = store.get_min_offset("T", 0)
    assert min_offset > 0
    first_unit = queue.get_unit(min_offset)
    assert first_unit is not None and first_unit[0] >= log_min
    assert queue.files[0].start // 20 <= min_offset
    too_small = store.get_messages("T", 0, 0, 5)
    assert (too_small.status, too_small.next_begin_offset) == (
        GetStatus.OFFSET_TOO_SMALL,
        min_offset,
    )
    assert store.get_messages("T", 0, min_offset, 5).status is GetStatus.FOUND
    # Index files whose entries all point below the minimum are gone too.
    index = store.insides.index
    assert index is not None
    assert all(f.end_phy_offset >= log_min for f in index.files[:-1])
    assert store.insides.cleanup_service.deleted_queue_files > 0


async def test_above_85_percent_unexpired_segments_are_deleted_too(
    store: MessageStore, disk: FakeDisk
) -> None:
    disk.ratio = 0.86
    segments = store.stats().commit_log_segments
    await store.insides.cleanup_service.run_once()
    assert store.stats().commit_log_segments < segments
    assert store.writable


async def test_forced_deletion_counts_unconsumed_messages_per_topic_and_group(
    store: MessageStore,
    disk: FakeDisk,
    consumed: dict[tuple[str, int], dict[str, int]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Observer:
        def __init__(self) -> None:
            self.deleted: dict[tuple[str, str], int] = {}

        def on_flush(self, kind: str, seconds: float, nbytes: int) -> None:
            pass

        def on_group_commit(self, waiters: int) -> None:
            pass

        def on_unconsumed_deleted(self, topic: str, group: str, count: int) -> None:
            self.deleted[(topic, group)] = self.deleted.get((topic, group), 0) + count

    observer = Observer()
    store.insides.cleanup_service.parts.observer.observer = observer  # the facade's tally forwards
    # "billing" has read 30 of the 120 messages of T/0, "audit" all of them.
    consumed[("T", 0)] = {"billing": 30, "audit": 120}
    disk.ratio = 0.86
    with caplog.at_level("WARNING", logger="wharf.store.services.cleanup"):
        await store.insides.cleanup_service.run_once()
    new_min = store.get_min_offset("T", 0)
    assert new_min > 30
    assert observer.deleted == {("T", "billing"): new_min - 30}
    assert store.insides.cleanup_service.unconsumed_deleted == new_min - 30
    line = next(r.getMessage() for r in caplog.records if "not yet consumed" in r.getMessage())
    assert f"T/billing: {new_min - 30}" in line and "audit" not in line


async def test_with_clean_file_forcibly_off_writes_are_refused_instead_of_deleting(
    tmp_path: Path, disk: FakeDisk
) -> None:
    not_now = (time.localtime().tm_hour + 12) % 24
    config = small_config(
        tmp_path,
        flush_disk_type=SYNC_FLUSH,
        delete_when=f"{not_now:02d}",
        clean_resource_interval=3_600_000,
        delete_commit_log_files_interval=0,
        clean_file_forcibly_enable=False,
    )
    s = MessageStore(config, disk_usage=disk)
    await s.start()
    try:
        for _ in range(6):
            await s.put("T", 0, [msg(b"w" * 900) for _ in range(10)])
        segments = s.stats().commit_log_segments
        disk.ratio = 0.86
        await s.insides.cleanup_service.run_once()
        assert s.stats().commit_log_segments == segments  # nothing unexpired was deleted
        assert not s.writable
        with pytest.raises(DiskFullError, match="cleanFileForciblyEnable is off"):
            await s.put("T", 0, [msg("refused")])
        disk.ratio = 0.7
        await s.insides.cleanup_service.run_once()
        assert s.writable
    finally:
        await s.shutdown()


async def test_above_90_percent_writes_are_refused_until_back_under(
    store: MessageStore, disk: FakeDisk
) -> None:
    disk.ratio = 0.91
    await store.insides.cleanup_service.run_once()
    assert not store.writable
    assert "disk full" in store.stats().not_writable_reason
    with pytest.raises(DiskFullError, match="disk full"):
        await store.put("T", 0, [msg("refused")])
    disk.ratio = 0.6
    await store.insides.cleanup_service.run_once()
    assert store.writable
    assert (await store.put("T", 0, [msg("accepted")])).append.first_queue_offset == 120


async def test_the_guard_samples_the_disk_after_enough_bytes_not_only_on_its_timer(
    store: MessageStore, disk: FakeDisk
) -> None:
    # The periodic pass runs once an hour here; a filling disk must still be caught at once.
    store.insides.writer.disk_check_bytes = 64 * 1024  # 1 % of a 6.4 MiB filesystem
    disk.ratio = 0.95
    accepted = 0
    with pytest.raises(DiskFullError, match="diskSpaceWarningLevelRatio"):
        for _ in range(100):
            await store.put("T", 0, [msg(b"f" * 8000)])
            accepted += 1
            await asyncio.sleep(0.005)  # the sample runs in the cleanup task
    assert accepted <= 12  # refused within ~64 KiB (8 records) plus the sample's latency
    assert store.insides.cleanup_service.deleted_segments == 0  # a sample, not a deletion pass


async def test_delete_when_hour_deletes_expired_segments(tmp_path: Path, disk: FakeDisk) -> None:
    now_hour = time.localtime().tm_hour
    config = small_config(
        tmp_path,
        flush_disk_type=SYNC_FLUSH,
        delete_when=f"{(now_hour + 5) % 24:02d};{now_hour:02d}",
        clean_resource_interval=3_600_000,
        delete_commit_log_files_interval=0,
    )
    s = MessageStore(config, disk_usage=disk)
    await s.start()
    try:
        for _ in range(6):
            await s.put("T", 0, [msg(b"y" * 900) for _ in range(10)])
        before = s.stats().commit_log_segments
        _age_segments(s, 80)
        await s.insides.cleanup_service.run_once()
        assert s.stats().commit_log_segments < before
    finally:
        await s.shutdown()


def test_delete_when_parsing() -> None:
    assert parse_delete_when("04") == {4}
    assert parse_delete_when("04;16") == {4, 16}
    with pytest.raises(ValueError):
        parse_delete_when("25")


def test_disk_usage_leaves_root_reserved_blocks_out_as_df_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The volume this broker was measured on: 66.05M blocks, 48.21M free, of which only 8.76M
    # are available to unprivileged users. df (and RocketMQ) say 68% used; (total - available)
    # / total said 87%, above the 85% force-clean threshold, and deleted unconsumed segments.
    stat = os.statvfs_result((4096, 4096, 66_053_021, 48_211_725, 8_756_432, 0, 0, 0, 0, 255))
    monkeypatch.setattr(os, "statvfs", lambda path: stat)
    used = 66_053_021 - 48_211_725
    assert statvfs_used_ratio(str(tmp_path)) == pytest.approx(used / (used + 8_756_432))
    assert 0.67 < statvfs_used_ratio(str(tmp_path)) < 0.68


async def test_a_pass_on_store_parts_reports_disk_state_and_keeps_undispatched_segments(
    tmp_path: Path, disk: FakeDisk
) -> None:
    # The service runs on what recovery opened plus two callables, with no facade: it reports
    # the disk state through on_disk_state and asks dispatch_offset() on every pass.
    config = small_config(tmp_path, flush_disk_type=SYNC_FLUSH, delete_commit_log_files_interval=0)
    filled = MessageStore(config, disk_usage=disk)
    await filled.start()
    for _ in range(6):
        await filled.put("T", 0, [msg(b"z" * 900) for _ in range(10)])
    await filled.shutdown()
    paths = StorePaths.of(config.store_path_root_dir)
    state = await asyncio.to_thread(recover_blocking, config, paths, [1000, 2000])
    parts = StoreParts(
        config=config,
        paths=paths,
        commit_log=state.commit_log,
        checkpoint=state.checkpoint,
        queues=state.queues,
        index=state.index,
        maintenance=asyncio.Lock(),
        observer=FlushTally(None),
    )
    reports: list[tuple[float, str]] = []
    dispatched = {"offset": 0}
    cleanup = CleanupService(
        parts,
        disk,
        dispatch_offset=lambda: dispatched["offset"],
        on_disk_state=lambda ratio, reason: reports.append((ratio, reason)),
    )
    try:
        segments = state.commit_log.segment_count
        assert segments > 2
        disk.ratio = 0.95  # above the force-clean and the refuse-writes levels
        assert await cleanup.clean_commit_log() == 0  # nothing dispatched: every segment kept
        assert reports[-1][0] == 0.95 and "disk full: 95.0%" in reports[-1][1]
        dispatched["offset"] = state.commit_log.max_offset
        assert await cleanup.clean_commit_log() > 0
        assert state.commit_log.segment_count < segments
        disk.ratio = 0.5
        await cleanup.clean_commit_log()
        assert reports[-1] == (0.5, "")  # writable again
    finally:
        state.queues.close()
        if state.index is not None:
            state.index.close()
        state.commit_log.close()


async def test_a_retention_pass_over_new_queues_opens_no_file_and_lets_the_loop_run(
    tmp_path: Path, disk: FakeDisk
) -> None:
    """A queue knows where its first unit points from the write that made it, so the pass
    after 600 queues appeared reads none of their files (each read was an open, a pread and a
    close, and evicted a busy queue's descriptor from the cache); and the pass yields to the
    loop between steps of ``SCAN_STEP`` queues."""
    config = small_config(tmp_path, clean_resource_interval=3_600_000)
    s = MessageStore(config, disk_usage=disk)
    await s.start()
    try:
        for topic in range(150):
            for queue_id in range(4):
                await s.put(f"T{topic}", queue_id, [msg(b"x", uniq=f"U{topic}-{queue_id}")])
        assert await s.wait_dispatched()
        await s.insides.queues.spill_tails()  # units in the files, as after a flush
        cache = s.insides.queues.cache
        cache.close()  # idle queues hold no descriptor
        opens = cache.opens
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        ticks = 0
        await s.insides.cleanup_service.clean_queues_and_index()
        task.cancel()
        assert cache.opens == opens
        assert ticks >= 2  # 600 queues: at least two steps of 256 gave the loop back
        assert all(s.get_min_offset(f"T{t}", q) == 0 for t in range(150) for q in range(4))
    finally:
        await s.shutdown()
