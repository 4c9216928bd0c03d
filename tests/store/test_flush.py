"""ASYNC_FLUSH: FlushRealTimeService cadence, least pages, checkpoint advance, sticky failure;
and the Service base it stands on."""

from __future__ import annotations

import asyncio
import errno
import os

import pytest
from wharf.store.config import StoreConfig
from wharf.store.errors import FlushFailedError
from wharf.store.log import mapped_file as mf_module
from wharf.store.log.checkpoint import StoreCheckpoint
from wharf.store.log.commit_log import CommitLog
from wharf.store.model import MessageInput
from wharf.store.service import Service


class FlushRecorder:
    def __init__(self) -> None:
        self.flushes: list[tuple[str, int]] = []

    def on_flush(self, kind: str, seconds: float, nbytes: int) -> None:
        self.flushes.append((kind, nbytes))

    def on_group_commit(self, waiters: int) -> None:
        raise AssertionError("no group commit in ASYNC_FLUSH")


def make_log(tmp_path, observer=None, **overrides) -> CommitLog:
    config = StoreConfig(
        store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=1 << 20, **overrides
    )
    checkpoint = StoreCheckpoint(os.path.join(tmp_path, "checkpoint"))
    log = CommitLog(config, observer, checkpoint=checkpoint)
    log.load_blocking()
    log.recover_blocking(abnormal=False)
    return log


async def wait_until(predicate, timeout_s=3.0):
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


async def test_async_flush_syncs_enough_dirty_pages_and_writes_the_checkpoint(tmp_path):
    recorder = FlushRecorder()
    log = make_log(tmp_path, recorder, flush_interval_commit_log=20, flush_commit_log_least_pages=4)
    log.start()
    try:
        log.append("T", 0, 0, [MessageInput(b"x" * 100)], 111)
        log.wakeup_flush()
        await asyncio.sleep(0.15)
        assert log.flushed_offset == 0  # under 4 dirty pages: wait for more
        result = log.append("T", 0, 1, [MessageInput(b"y" * 5000) for _ in range(4)], 222)
        log.wakeup_flush()
        assert await wait_until(lambda: log.flushed_offset == result.end_offset)
        assert await wait_until(lambda: log.checkpoint.physic_offset == result.end_offset)
        on_disk = StoreCheckpoint(log.checkpoint.path)
        assert await wait_until(
            lambda: (on_disk.load_blocking(), on_disk.physic_offset)[1] == result.end_offset
        )
        assert on_disk.valid and on_disk.physic_msg_timestamp == 222
        assert recorder.flushes[0] == ("async", result.end_offset)  # one sync, all the bytes
        assert log.flush_count >= 1
    finally:
        await log.shutdown()
        log.close()


async def test_thorough_interval_flushes_even_a_few_bytes(tmp_path):
    log = make_log(
        tmp_path,
        flush_interval_commit_log=20,
        flush_commit_log_least_pages=4,
        flush_commit_log_thorough_interval=100,
    )
    log.start()
    try:
        result = log.append("T", 0, 0, [MessageInput(b"tiny")], 5)
        assert await wait_until(lambda: log.flushed_offset == result.end_offset, timeout_s=2.0)
    finally:
        await log.shutdown()
        log.close()


async def test_shutdown_flushes_everything_and_persists_the_checkpoint(tmp_path):
    log = make_log(tmp_path, flush_interval_commit_log=10_000)
    log.start()
    result = log.append("T", 0, 0, [MessageInput(b"last words")], 77)
    await log.shutdown()
    assert log.flushed_offset == result.end_offset
    on_disk = StoreCheckpoint(log.checkpoint.path)
    on_disk.load_blocking()
    assert (on_disk.physic_offset, on_disk.physic_msg_timestamp) == (result.end_offset, 77)
    assert log.read_message(0).body == b"last words"  # readable until close()
    log.close()


async def test_failed_async_flush_is_sticky(tmp_path, monkeypatch):
    def broken(fd: int) -> None:
        raise OSError(errno.ENOSPC, "injected: no space")

    monkeypatch.setattr(mf_module, "fdatasync", broken)
    log = make_log(tmp_path, flush_interval_commit_log=10, flush_commit_log_least_pages=0)
    log.start()
    try:
        log.append("T", 0, 0, [MessageInput(b"x")], 1)
        log.wakeup_flush()
        assert await wait_until(lambda: not log.writable)
        with pytest.raises(FlushFailedError, match="no space"):
            log.append("T", 0, 1, [MessageInput(b"y")], 1)
        with pytest.raises(FlushFailedError):
            await log.flush()
        assert (
            log.flush_service.failures >= 1
            and "no space" in log.flush_service.health()["last_error"]
        )
    finally:
        await log.shutdown()
        log.close()


# --- the service base ----------------------------------------------------------------------------


class Counting(Service):
    def __init__(self, fail_first: int = 0) -> None:
        super().__init__("Counting", interval_s=10.0)
        self.count = 0
        self.fail_first = fail_first
        self.stopped = False

    async def run_once(self) -> None:
        self.count += 1
        if self.count <= self.fail_first:
            raise RuntimeError(f"boom {self.count}")

    async def on_stop(self) -> None:
        self.stopped = True


async def test_service_wakeup_cuts_the_wait_short_and_stop_runs_on_stop():
    service = Counting()
    service.start()
    await asyncio.sleep(0.01)
    assert service.count == 1  # then waiting 10 s
    service.wakeup()
    await asyncio.sleep(0.01)
    assert service.count == 2
    await service.stop()
    assert service.stopped and not service.running


async def test_service_failures_are_recorded_and_the_loop_goes_on(caplog):
    service = Counting(fail_first=2)
    service.interval_s = 0.01
    service.start()
    assert await wait_until(lambda: service.count >= 3)
    await service.stop()
    assert service.failures == 2
    assert "boom 2" in repr(service.last_error)
    assert any("Counting failed" in r.getMessage() for r in caplog.records)


def test_service_refuses_a_non_positive_interval():
    with pytest.raises(ValueError):
        Service("bad", 0)
