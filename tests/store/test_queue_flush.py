"""FlushConsumeQueueService: which files a periodic pass syncs and which only a thorough one."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from wharf.store.errors import DiskFullError
from wharf.store.message_store import MessageStore
from wharf.store.queue.consume_queue import ConsumeQueue

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


async def test_a_periodic_pass_syncs_the_most_unflushed_queues_up_to_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Periodic passes vouch for nothing (the checkpoint waits for a thorough one): without a
    # bound they ran one fdatasync per busy queue a second (~700 a second at 1,024 queues).
    store = MessageStore(
        small_config(
            tmp_path,
            flush_interval_consume_queue=3_600_000,
            flush_consume_queue_max_queues=3,
            mapped_file_size_commit_log=1 << 20,
            mapped_file_size_consume_queue=20 * 4096,
        )
    )
    await store.start()
    try:
        flush = store.insides.queue_flush_service
        per_page = 4096 // 20 + 1  # units (20 B) to fill a page
        sizes = {f"T{i}": (2 + i) * per_page for i in range(8)}  # all past least_pages (2)
        for topic, count in sizes.items():
            for start in range(0, count, 100):
                await store.put(topic, 0, [msg("x")] * min(100, count - start))
        assert await store.wait_dispatched()
        queues = {topic: store.insides.queues.find(topic, 0) for topic in sizes}
        assert all(
            q is not None and q.unflushed_bytes >= flush.least_bytes for q in queues.values()
        )
        synced: list[str] = []
        sync = ConsumeQueue.flush_blocking

        def counting_sync(queue: ConsumeQueue) -> int:
            synced.append(queue.topic)
            return sync(queue)

        monkeypatch.setattr(ConsumeQueue, "flush_blocking", counting_sync)
        before = store.insides.checkpoint.logics_offset
        await flush.flush(flush.least_bytes)
        assert sorted(synced) == ["T5", "T6", "T7"]  # the three with the most unflushed
        for topic, queue in queues.items():
            assert queue is not None
            assert (queue.unflushed_bytes == 0) == (topic in synced)
        assert store.insides.checkpoint.logics_offset == before  # a periodic pass vouches not
        synced.clear()
        await flush.flush_all()  # thorough: every queue left, and the checkpoint moves
        assert sorted(synced) == [f"T{i}" for i in range(5)]
        assert all(queue is not None and queue.unflushed_bytes == 0 for queue in queues.values())
        assert store.insides.checkpoint.logics_offset > before
    finally:
        await store.shutdown()
