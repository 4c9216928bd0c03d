"""Disk full (ENOSPC) injected at each write, allocation and sync of the store (issue 12).

The seams are the OS calls themselves (``os.pwrite``, ``os.posix_fallocate`` and the
``mapped_file.fdatasync`` hook), failing only for files under one directory of the store, so
each path is hit precisely. What must hold: a clear DiskFullError, nothing acknowledged is lost,
nothing unacknowledged is served (not even after a restart), and writes resume once the
"disk" has room again. tests/broker/test_disk_fill.py fills a real tmpfs through the daemon.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import grpc
import pytest
from wharf.broker.errors import status_for
from wharf.store.config import ASYNC_FLUSH, SYNC_FLUSH
from wharf.store.errors import DiskFullError, FlushFailedError, SyncDiskFullError
from wharf.store.index.index_file import IndexFile
from wharf.store.log import commit_log as commit_log_module
from wharf.store.log import mapped_file
from wharf.store.message_store import MessageStore
from wharf.store.model import PutStatus
from wharf.store.queue import consume_queue
from wharf.store.queue.consume_queue import ConsumeQueue
from wharf.store.service import Service

from tests.store.helpers import msg, small_config

REAL_PWRITE = os.pwrite
REAL_FALLOCATE = os.posix_fallocate


def _path_of(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


class FullDisk:
    """``os.pwrite`` / ``os.posix_fallocate`` that fail with ENOSPC for files whose path holds
    ``part`` while ``full``. ``partial``: the first failing pwrite writes half its bytes (a
    short write) and the next raises, as Linux does when space runs out mid-write. Writes of
    zeros pass: overwriting written blocks needs no space (the undo of a partial write), and so
    do writes into a range posix_fallocate backed before (what it is for: a queue's units
    gathered in memory are written into space allocated when they came)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, part: str, partial: bool = False) -> None:
        self.part = part
        self.partial = partial
        self.full = False
        self.failures = 0
        self.half_written = 0
        self.allocated: dict[str, list[tuple[int, int]]] = {}
        monkeypatch.setattr(os, "pwrite", self.pwrite)
        monkeypatch.setattr(os, "posix_fallocate", self.posix_fallocate)

    def _hit(self, fd: int) -> bool:
        return self.full and self.part in _path_of(fd)

    def _backed(self, fd: int, offset: int, end: int) -> bool:
        ranges = self.allocated.get(_path_of(fd), [])
        return any(start <= offset and end <= stop for start, stop in ranges)

    def pwrite(self, fd: int, data, offset: int) -> int:  # type: ignore[no-untyped-def]
        if (
            self._hit(fd)
            and bytes(data) != bytes(len(data))
            and not self._backed(fd, offset, offset + len(data))
        ):
            if self.partial and not self.half_written and len(data) > 1:
                self.half_written = len(data) // 2
                return REAL_PWRITE(fd, memoryview(data)[: self.half_written], offset)
            self.failures += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return REAL_PWRITE(fd, data, offset)

    def posix_fallocate(self, fd: int, offset: int, length: int) -> None:
        if self._hit(fd):
            self.failures += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        REAL_FALLOCATE(fd, offset, length)
        self.allocated.setdefault(_path_of(fd), []).append((offset, offset + length))


def _bodies(store: MessageStore, topic: str = "T", queue_id: int = 0) -> list[bytes]:
    return [m.body for m in store.get_messages(topic, queue_id, 0, 10_000).messages]


async def _restart(store: MessageStore, root: Path, **overrides: object) -> MessageStore:
    await store.shutdown()
    again = MessageStore(small_config(root, **overrides))
    await again.start()
    return again


@pytest.fixture(autouse=True)
def no_retry_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """Appends may try again at once after a disk-full failure (1 s in production)."""
    monkeypatch.setattr(commit_log_module, "DISK_FULL_RETRY_S", 0.0)


@pytest.mark.parametrize("mode", [ASYNC_FLUSH, SYNC_FLUSH])
async def test_a_write_failing_part_way_acknowledges_nothing_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    config = {"flush_disk_type": mode, "mapped_file_size_commit_log": 1 << 20}
    store = MessageStore(small_config(tmp_path, **config))
    await store.start()
    disk = FullDisk(monkeypatch, "commitlog", partial=True)
    try:
        assert (await store.put("T", 0, [msg("a0"), msg("a1")])).status is PutStatus.PUT_OK
        end = store.insides.commit_log.wrote_offset
        disk.full = True
        caplog.clear()
        with pytest.raises(DiskFullError, match="disk full"):
            await store.put("T", 0, [msg(b"x" * 3000) for _ in range(8)])
        assert disk.half_written > 1000  # whole records of the failed batch had been written
        for _ in range(3):  # refused, one log line for the whole episode
            with pytest.raises(DiskFullError):
                await store.put("T", 0, [msg("refused")])
        assert store.insides.commit_log.wrote_offset == end
        assert not store.writable and "disk full" in store.not_writable_reason
        segment = store.insides.commit_log.queue.last()
        assert segment is not None
        assert segment.read_unchecked(end, disk.half_written) == bytes(disk.half_written)
        lines = [r for r in caplog.records if "refuses writes" in r.getMessage()]
        assert len(lines) == 1 and not any(r.exc_info for r in caplog.records)
        # Space is back: the next append goes through and ends the episode.
        disk.full = False
        assert (await store.put("T", 0, [msg("b0")])).status is PutStatus.PUT_OK
        assert store.writable
        assert await store.wait_dispatched()
        assert _bodies(store) == [b"a0", b"a1", b"b0"]
        store = await _restart(store, tmp_path, **config)
        assert _bodies(store) == [b"a0", b"a1", b"b0"]
    finally:
        await store.shutdown()


async def test_a_roll_on_a_full_disk_is_disk_full_and_writes_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = MessageStore(small_config(tmp_path))  # 16 KiB segments
    await store.start()
    disk = FullDisk(monkeypatch, "commitlog")
    acked: list[bytes] = []
    try:
        disk.full = True  # no segment can be created (preallocation nor the roll)
        caplog.clear()
        refused = 0
        for i in range(40):
            body = b"m%03d" % i + b"." * 900
            try:
                await store.put("T", 0, [msg(body)])
                acked.append(body)
            except DiskFullError:
                refused += 1
        assert refused and disk.failures
        assert not any(r.exc_info for r in caplog.records), "a traceback for a full disk"
        stats = store.stats()
        assert not stats.writable and "disk full" in stats.not_writable_reason
        assert stats.disk_full_episodes == 1  # one episode, however many refusals
        disk.full = False
        body = b"after" + b"." * 900
        await store.put("T", 0, [msg(body)])
        acked.append(body)
        assert await store.wait_dispatched()
        assert _bodies(store) == acked
        store = await _restart(store, tmp_path)
        assert _bodies(store) == acked
    finally:
        await store.shutdown()


async def test_dispatch_retries_a_consume_queue_write_that_hit_a_full_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(consume_queue, "ALLOCATE_AHEAD", 0)  # every write allocates
    store = MessageStore(small_config(tmp_path))
    await store.start()
    disk = FullDisk(monkeypatch, "consumequeue")
    try:
        await store.put("T", 0, [msg("q0")])
        assert await store.wait_dispatched()
        disk.full = True
        caplog.clear()
        await store.put("T", 0, [msg(f"q{i}") for i in range(1, 9)])  # acknowledged
        assert not await store.wait_dispatched(0.3)
        assert store.get_max_offset("T", 0) == 1  # not a unit more: nothing half-served
        assert not any(r.exc_info for r in caplog.records), "a traceback for a full disk"
        # Writes are refused while dispatch cannot write: they would pile up unseen.
        assert not store.writable and "consume queue" in store.not_writable_reason
        with pytest.raises(DiskFullError):
            await store.put("T", 0, [msg("refused")])
        disk.full = False
        assert await store.wait_dispatched(5)
        assert store.writable
        await store.put("T", 0, [msg("q9")])
        assert await store.wait_dispatched()
        assert _bodies(store) == [f"q{i}".encode() for i in range(10)]  # none skipped
    finally:
        await store.shutdown()


def test_a_busy_queue_file_is_allocated_geometrically_ahead_up_to_sixteen_blocks(
    tmp_path: Path,
) -> None:
    """One block ahead for a queue's first units (100,000 queues of one message: 400 MB),
    then ahead by what the file holds, up to 16 blocks: a busy queue allocates rarely and a
    file never holds more than 64 KiB unused."""
    queue = ConsumeQueue("T", 0, tmp_path / "consumequeue" / "T" / "0", 20 * 300_000)
    block = consume_queue.ALLOCATE_AHEAD
    try:
        queue.append_units(0, [(0, 100, 0)])
        file = queue.files[0]
        assert file.allocated == 20 + block
        allocations, last = 0, file.allocated
        for first in range(1, 40_001, 16):  # dispatch runs of 16 units: 800 KB of units
            queue.append_units(first, [(100 * (first + i), 100, 0) for i in range(16)])
            if file.allocated != last:
                allocations += 1
                ahead = file.allocated - (first + 16) * 20
                assert 0 < ahead <= consume_queue.ALLOCATE_GROWTH * block
                last = file.allocated
        assert file.allocated - queue.max_offset * 20 <= consume_queue.ALLOCATE_GROWTH * block
        assert allocations <= 20  # 195 with one block at a time
    finally:
        queue.close()


def test_a_consume_queue_file_is_allocated_before_units_are_stored_into_its_map(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consume_queue, "ALLOCATE_AHEAD", 40)  # two units ahead
    queue = ConsumeQueue("T", 0, tmp_path / "consumequeue" / "T" / "0", 20 * 8)
    try:
        queue.append_units(0, [(0, 100, 0), (100, 100, 0)])
        assert queue.files[0].allocated == 80
        # The filesystem must back the pages before the map is stored into.
        assert os.stat(queue.files[0].path).st_blocks > 0
        disk = FullDisk(monkeypatch, "consumequeue")
        disk.full = True
        with pytest.raises(DiskFullError, match="consume queue file"):
            queue.append_units(2, [(200 + 100 * i, 100, 0) for i in range(3)])
        assert queue.max_offset == 2 and disk.failures == 1
        assert queue.read_unit_bytes(2, 3) == b""
        with open(queue.files[0].path, "rb") as file:
            assert file.read()[40:100] == bytes(60)  # nothing stored
        disk.full = False
        queue.append_units(2, [(200 + 100 * i, 100, 0) for i in range(3)])
        assert [u[0] for u in queue.read_units(0, 10)] == [0, 100, 200, 300, 400]
    finally:
        queue.close()


def test_an_index_file_that_cannot_be_allocated_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = FullDisk(monkeypatch, "index")
    disk.full = True
    with pytest.raises(DiskFullError, match="index file"):
        IndexFile.create_blocking(tmp_path / "index", 64, 100_000, 0, 0)
    assert not (tmp_path / "index").exists()
    disk.full = False
    index = IndexFile.create_blocking(tmp_path / "index", 64, 100_000, 0, 0)
    try:
        index.put_entries([(7, 100, 1_000)])
        disk.full = True  # the entries are allocated ahead: the next 1 MiB needs more
        far = [(7, 200 + i, 1_000) for i in range(60_000)]
        with pytest.raises(DiskFullError):
            index.put_entries(far)
        assert index.index_count == 2  # nothing of the failed batch
        disk.full = False
        assert index.put_entries(far) == 60_000
        out: list[int] = []
        index.select_phy_offsets(7, 0, 10_000, 5, out)
        assert out and out[0] == 200 + 59_999
    finally:
        index.close()


async def test_enospc_from_a_sync_is_sticky_and_reported_as_disk_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full = False

    def full_fdatasync(fd: int) -> None:
        if full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        os.fdatasync(fd)

    # Replaced before the start: the Python sync thread runs the syncs (the compiled one's
    # errno path: tests/store/test_sync_engine.py).
    monkeypatch.setattr(mapped_file, "fdatasync", full_fdatasync)
    store = MessageStore(small_config(tmp_path, flush_disk_type=SYNC_FLUSH))
    await store.start()
    try:
        full = True
        with pytest.raises(SyncDiskFullError) as failed:
            await store.put("T", 0, [msg("never acknowledged")])
        full = False
        assert isinstance(failed.value, FlushFailedError)  # sticky
        with pytest.raises(SyncDiskFullError):
            store.append("T", 0, [msg("after")])
        code, message = status_for(failed.value)
        assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "disk full" in message and "restart" in message
        assert store.get_max_offset("T", 0) == 0
    finally:
        await store.shutdown()


async def test_a_transient_pool_commit_on_a_full_disk_is_retried_not_sticky(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = {
        "flush_disk_type": ASYNC_FLUSH,
        "transient_store_pool_enable": True,
        "commit_interval_commit_log": 20,
        "commit_commit_log_least_pages": 0,
    }
    store = MessageStore(small_config(tmp_path, **config))
    await store.start()
    disk = FullDisk(monkeypatch, "commitlog")
    try:
        disk.full = True
        await store.put("T", 0, [msg("buffered")])  # acknowledged (ASYNC), in the pool's buffer
        assert not await store.wait_dispatched(0.3)
        assert not store.writable and "disk full" in store.not_writable_reason
        with pytest.raises(DiskFullError):
            store.append("T", 0, [msg("refused")])
        disk.full = False
        assert await store.wait_dispatched(5)
        assert store.writable
        await store.put("T", 0, [msg("after")])
        assert await store.wait_dispatched()
        assert _bodies(store) == [b"buffered", b"after"]
    finally:
        await store.shutdown()


async def test_a_service_logs_a_disk_full_episode_once_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outcomes = [DiskFullError("disk full: a"), DiskFullError("disk full: b"), None]
    outcomes += [DiskFullError("disk full: c")]

    class Flaky(Service):
        async def run_once(self) -> None:
            outcome = outcomes.pop(0) if outcomes else None
            if outcome is not None:
                raise outcome
            if not outcomes:
                self._stopping = True

    service = Flaky("Flaky", interval_s=0.001)
    with caplog.at_level(logging.ERROR):
        service.start()
        assert service._task is not None
        await service._task
    lines = [r.getMessage() for r in caplog.records if "Flaky" in r.getMessage()]
    # Two episodes (a success in between): two lines, no traceback.
    assert lines == [
        "Flaky: disk full: a (retrying with back-off)",
        "Flaky: disk full: c (retrying with back-off)",
    ]
    assert not any(r.exc_info for r in caplog.records)
    assert service.failures == 3


async def test_a_store_starts_on_a_full_disk_and_writes_once_there_is_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = FullDisk(monkeypatch, "commitlog")
    disk.full = True  # not even the first segment can be created
    store = MessageStore(small_config(tmp_path))
    await store.start()
    try:
        with pytest.raises(DiskFullError):
            await store.put("T", 0, [msg("refused")])
        disk.full = False
        await store.put("T", 0, [msg("stored")])
        assert await store.wait_dispatched()
        assert _bodies(store) == [b"stored"]
    finally:
        await store.shutdown()


async def test_a_store_restarts_while_its_queues_cannot_grow_and_catches_up_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consume_queue, "ALLOCATE_AHEAD", 0)  # every write allocates
    disk = FullDisk(monkeypatch, "consumequeue")
    store = MessageStore(small_config(tmp_path))
    await store.start()
    try:
        await store.put("T", 0, [msg("d0")])
        assert await store.wait_dispatched()
        disk.full = True
        await store.put("T", 0, [msg(f"d{i}") for i in range(1, 4)])  # acknowledged
        # Restarted with those records not dispatched and the queues still unable to grow:
        # recovery's re-dispatch stops at the full disk instead of failing the start.
        store = await _restart(store, tmp_path)
        assert _bodies(store) == [b"d0"]
        disk.full = False
        assert await store.wait_dispatched(5)
        assert _bodies(store) == [b"d0", b"d1", b"d2", b"d3"]
    finally:
        await store.shutdown()
