"""FlushConsumeQueueService: which files a periodic pass syncs and which only a thorough one."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from wharf.store.errors import DiskFullError
from wharf.store.message_store import MessageStore

from tests.store.helpers import msg, small_config


async def test_index_is_synced_only_by_thorough_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A periodic pass that synced the index too ran a burst of random 4 KiB writes (hash slots)
    # every second, and the commit log's group-commit fdatasync queued behind it: end-to-end
    # p99 at 10k msg/s went from ~7.5 ms to ~15 ms. The checkpoint only vouches for the index
    # after a thorough pass, so syncing it more often bought nothing for recovery.
    store = MessageStore(small_config(tmp_path, flush_interval_consume_queue=3_600_000))
    await store.start()
    try:
        index_syncs = 0
        sync_index = store.insides.index.flush_blocking

        def counting_sync() -> None:
            nonlocal index_syncs
            index_syncs += 1
            sync_index()

        monkeypatch.setattr(store.insides.index, "flush_blocking", counting_sync)
        for _ in range(50):  # 500 units: more than least_pages of the queue dirty
            await store.put("T", 0, [msg("a", keys="k1"), msg("b", keys="k2")] * 5)
        assert await store.wait_dispatched()
        flush = store.insides.queue_flush_service
        queue = store.insides.queues.find("T", 0)
        assert queue is not None and queue.unflushed_bytes >= flush.least_bytes
        await flush.flush(flush.least_bytes)  # periodic: the busy queue, not the index
        assert queue.unflushed_bytes == 0
        assert index_syncs == 0
        await flush.flush_all()  # thorough: everything, the index included
        assert index_syncs == 1
    finally:
        await store.shutdown()


async def test_a_full_disk_during_the_sync_is_disk_full_and_the_checkpoint_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MessageStore(small_config(tmp_path, flush_interval_consume_queue=3_600_000))
    await store.start()
    try:
        await store.put("T", 0, [msg("a")] * 10)
        assert await store.wait_dispatched()
        flush = store.insides.queue_flush_service
        before = store.insides.checkpoint.logics_offset

        def no_space(queues: object, index: object) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(flush, "_flush_blocking", no_space)
        with pytest.raises(DiskFullError, match="syncing consume queue"):
            await flush.flush_all()
        # Recovery after a machine crash still re-dispatches the unsynced units.
        assert store.insides.checkpoint.logics_offset == before
        monkeypatch.undo()
    finally:
        await store.shutdown()
