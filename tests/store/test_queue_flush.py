"""FlushConsumeQueueService: which files a periodic pass syncs and which only a thorough one."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from wharf.store.errors import DiskFullError
from wharf.store.message_store import MessageStore
from wharf.store.queue.consume_queue import ConsumeQueue, ConsumeQueueFile
from wharf.store.services import queue_flush, syncfs

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

        def no_space(queues: object, index: object, whole: object) -> int:
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


async def test_a_thorough_pass_over_many_queues_syncs_their_filesystem_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At SYNCFS_MIN_QUEUES queues and more a thorough pass makes one whole-filesystem sync
    instead of an fdatasync a file (``wharf.store.services.syncfs`` says why), then counts
    every queue synced up to where it was when the sync began and moves the checkpoint; below
    it, in a periodic pass, and where no such sync is reliable, file by file as before. A failed
    sync leaves every queue unflushed and the checkpoint where it was."""
    monkeypatch.setattr(queue_flush, "SYNCFS_MIN_QUEUES", 8)
    store = MessageStore(small_config(tmp_path, flush_interval_consume_queue=3_600_000))
    await store.start()
    try:
        flush = store.insides.queue_flush_service
        whole_syncs: list[int] = []
        file_syncs: list[str] = []
        real_file_sync = ConsumeQueueFile.flush_blocking

        def whole() -> None:
            whole_syncs.append(1)

        def file_sync(self: ConsumeQueueFile) -> None:
            file_syncs.append(self.path)
            real_file_sync(self)

        monkeypatch.setattr(flush, "sync_filesystem", whole)
        monkeypatch.setattr(ConsumeQueueFile, "flush_blocking", file_sync)
        for queue_id in range(4):  # below the bound: file by file
            await store.put("Few", queue_id, [msg("a")] * 3)
        assert await store.wait_dispatched()
        await flush.flush_all()
        assert whole_syncs == [] and len(file_syncs) == 4
        assert flush.filesystem_syncs == 0

        for topic in ("T1", "T2", "T3"):
            for queue_id in range(4):
                await store.put(topic, queue_id, [msg("b")] * 5)
        assert await store.wait_dispatched()
        queues = store.insides.queues.unflushed(0)
        before = store.insides.checkpoint.logics_offset
        file_syncs.clear()
        monkeypatch.setattr(flush, "max_queues", 64)  # a periodic pass taking all twelve
        await flush.flush(1)
        assert whole_syncs == [] and len(file_syncs) == 12  # never the whole filesystem
        assert store.insides.checkpoint.logics_offset == before  # vouches for nothing
        for topic in ("T1", "T2", "T3"):
            for queue_id in range(4):
                await store.put(topic, queue_id, [msg("c")] * 5)
        assert await store.wait_dispatched()
        file_syncs.clear()

        def failing() -> None:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(flush, "sync_filesystem", failing)
        with pytest.raises(OSError, match="Input/output"):
            await flush.flush_all()
        assert all(queue.unflushed_bytes > 0 for queue in queues)
        assert store.insides.checkpoint.logics_offset == before

        monkeypatch.setattr(flush, "sync_filesystem", whole)
        await flush.flush_all()
        assert whole_syncs == [1] and file_syncs == []  # one sync for all twelve queues
        assert flush.filesystem_syncs == 1
        assert all(queue.unflushed_bytes == 0 for queue in queues)
        assert store.insides.queues.unflushed(0) == []
        assert store.insides.checkpoint.logics_offset == store.dispatch_offset > before
    finally:
        await store.shutdown()


def test_the_whole_filesystem_sync_is_used_only_where_it_is_reliable(tmp_path: Path) -> None:
    """ext4, xfs, btrfs, f2fs on Linux 5.8+ (write-back errors reported); not FUSE (the
    power-loss filesystem of the fault campaign knows only fsync), overlay, NFS or tmpfs."""
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n"
        "30 22 0:40 / /data rw shared:9 - xfs /dev/vdb rw\n"
        "31 30 0:41 / /data/power\\040cut rw - fuse.powerfs powerfs rw,user_id=0\n"
        "32 22 0:42 / /tmp rw - tmpfs tmpfs rw\n"
        "33 30 0:43 / /data/caf\u00e9\\040b rw - fuse.powerfs powerfs rw\n",
        encoding="utf-8",
    )
    table = str(mountinfo)
    assert syncfs.filesystem_type("/var/lib/wharf", table) == "ext4"
    assert syncfs.filesystem_type("/data/store", table) == "xfs"
    assert syncfs.filesystem_type("/data/power cut/store", table) == "fuse.powerfs"
    assert syncfs.filesystem_type("/data/powerx", table) == "xfs"  # a prefix, not a parent
    assert syncfs.filesystem_type("/tmp", table) == "tmpfs"
    assert syncfs.filesystem_type("/data/caf\u00e9 b/store", table) == "fuse.powerfs"
    assert syncfs.filesystem_type("/x", str(tmp_path / "absent")) is None
    assert {"ext4", "xfs"} <= syncfs.SYNCFS_TYPES
    assert not {"fuse.powerfs", "tmpfs", "overlay", "nfs4"} & syncfs.SYNCFS_TYPES
    assert syncfs.kernel_version("5.8.0-63-generic") == (5, 8)
    assert syncfs.kernel_version("6.1.0-28-cloud-amd64") == (6, 1)
    assert syncfs.kernel_version("5.4.0") < syncfs.MIN_KERNEL <= syncfs.kernel_version("5.10.1")
    sync = syncfs.whole_fs_sync(str(tmp_path))
    if syncfs.filesystem_type(str(tmp_path)) in syncfs.SYNCFS_TYPES and (
        syncfs.kernel_version() >= syncfs.MIN_KERNEL
    ):
        assert sync is not None
        sync()  # a real syncfs of the test's filesystem
    else:
        assert sync is None
