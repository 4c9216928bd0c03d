"""Retention never deletes a commit log segment holding records not yet dispatched: their
ConsumeQueue units do not exist yet, so consumers would never see them."""

from __future__ import annotations

import os
import time
from pathlib import Path

from wharf.store.config import SYNC_FLUSH
from wharf.store.message_store import MessageStore
from wharf.store.model import GetStatus

from tests.store.helpers import msg, small_config

BATCHES = 12
PER_BATCH = 10


class FullDisk:
    """86 % used: above diskSpaceCleanForciblyRatio, so even unexpired segments may go."""

    def __call__(self, path: str) -> float:
        return 0.86


def _store(tmp_path: Path) -> MessageStore:
    not_now = (time.localtime().tm_hour + 12) % 24
    config = small_config(
        tmp_path,
        flush_disk_type=SYNC_FLUSH,
        delete_when=f"{not_now:02d}",
        clean_resource_interval=3_600_000,  # the test drives the passes
        delete_commit_log_files_interval=0,
        file_reserved_time=0,
    )
    return MessageStore(config, disk_usage=FullDisk())


async def _put_all(store: MessageStore, first_batch: int, batches: int) -> None:
    for i in range(first_batch, first_batch + batches):
        await store.put("T", 0, [msg(b"x" * 900, uniq=f"U{i}-{j}") for j in range(PER_BATCH)])


def _segment_ends(store: MessageStore) -> list[int]:
    """The end offset of every segment (the allocator's ``<name>.alloc-<id>`` file of the next
    one, made in a thread, is not a segment yet)."""
    size = store.config.mapped_file_size_commit_log
    names = os.listdir(store.insides.paths.commit_log_dir)
    return sorted(int(name) + size for name in names if name.isdigit())


async def test_forced_retention_keeps_every_undispatched_segment(tmp_path: Path) -> None:
    store = _store(tmp_path)
    await store.start()
    try:
        await store.insides.reput_service.stop()  # dispatch stalls (a slow reput under load)
        await _put_all(store, 0, BATCHES)
        assert store.dispatch_offset == 0
        assert store.insides.commit_log.flushed_offset == store.insides.commit_log.max_offset
        segments = store.stats().commit_log_segments
        assert segments > 4

        await store.insides.cleanup_service.run_once()

        assert store.stats().commit_log_segments == segments
        assert store.insides.commit_log.min_offset == 0
        store.insides.reput_service.start()
        assert await store.wait_dispatched()
        assert store.get_min_offset("T", 0) == 0
        assert store.get_max_offset("T", 0) == BATCHES * PER_BATCH
        got = store.get_messages("T", 0, 0, 32)
        assert got.status == GetStatus.FOUND
        assert [m.queue_offset for m in got.messages] == list(range(32))
    finally:
        await store.shutdown()


async def test_forced_retention_deletes_only_below_the_dispatch_offset(tmp_path: Path) -> None:
    store = _store(tmp_path)
    await store.start()
    try:
        await _put_all(store, 0, BATCHES // 2)
        assert await store.wait_dispatched()
        await store.insides.reput_service.stop()
        await _put_all(store, BATCHES // 2, BATCHES // 2)
        dispatched = store.dispatch_offset
        assert 0 < dispatched < store.insides.commit_log.max_offset

        await store.insides.cleanup_service.run_once()

        assert store.insides.commit_log.min_offset > 0  # dispatched segments did go
        assert store.insides.commit_log.min_offset <= dispatched
        assert all(end > dispatched for end in _segment_ends(store))
        store.insides.reput_service.start()
        assert await store.wait_dispatched()
        total = BATCHES * PER_BATCH
        assert store.get_max_offset("T", 0) == total
        first = store.get_min_offset("T", 0)
        got = store.get_messages("T", 0, first, total)
        assert got.status == GetStatus.FOUND
        assert [m.queue_offset for m in got.messages][-1] == total - 1
        # Every message from the first undispatched one on is still readable.
        assert first <= (BATCHES // 2) * PER_BATCH
    finally:
        await store.shutdown()
