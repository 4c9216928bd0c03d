"""SYNC_FLUSH group commit: one sync for many waiters, timeouts, sticky sync failures.

Syncs are observed and slowed/broken through the ``wharf.store.log.mapped_file.fdatasync`` seam.
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import time

import pytest
from wharf.store.config import SYNC_FLUSH, StoreConfig
from wharf.store.errors import FlushFailedError
from wharf.store.log import mapped_file as mf_module
from wharf.store.log.commit_log import CommitLog
from wharf.store.log.sync_engine import ThreadSyncEngine
from wharf.store.model import MessageInput


class SyncSpy:
    """Counts fdatasync calls; optionally delays or fails them."""

    def __init__(self, delay_s: float = 0.0, fail: bool = False) -> None:
        self.calls = 0
        self.delay_s = delay_s
        self.fail = fail
        self.lock = threading.Lock()

    def __call__(self, fd: int) -> None:
        with self.lock:
            self.calls += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.fail:
            raise OSError(errno.EIO, "injected I/O error")
        os.fdatasync(fd)


class Recorder:
    def __init__(self) -> None:
        self.group_sizes: list[int] = []
        self.flushes: list[tuple[str, int]] = []

    def on_flush(self, kind: str, seconds: float, nbytes: int) -> None:
        self.flushes.append((kind, nbytes))

    def on_group_commit(self, waiters: int) -> None:
        self.group_sizes.append(waiters)


def make_log(tmp_path, observer=None, **overrides) -> CommitLog:
    config = StoreConfig(
        store_path_root_dir=str(tmp_path),
        mapped_file_size_commit_log=1 << 20,
        flush_disk_type=SYNC_FLUSH,
        **overrides,
    )
    log = CommitLog(config, observer)
    log.load_blocking()
    log.recover_blocking(abnormal=False)
    return log


async def test_many_waiters_share_one_sync(tmp_path, monkeypatch):
    spy = SyncSpy(delay_s=0.05)  # a slow disk makes the group obvious
    monkeypatch.setattr(mf_module, "fdatasync", spy)
    recorder = Recorder()
    log = make_log(tmp_path, recorder)
    log.start()
    try:
        first = log.append("T", 0, 0, [MessageInput(b"first")])
        first_wait = asyncio.create_task(log.wait_flushed(first.end_offset))
        await asyncio.sleep(0.01)  # the first sync is now in progress

        async def writer(i: int) -> bool:
            result = log.append("T", 0, 1 + i, [MessageInput(b"m%d" % i)])
            return await log.wait_flushed(result.end_offset)

        oks = await asyncio.gather(*(writer(i) for i in range(50)))
        assert await first_wait
        assert all(oks)
        # 51 waiters, served by the first sync plus very few more (the 50 arrived during it)
        assert spy.calls <= 3, spy.calls
        assert sum(recorder.group_sizes) == 51 and max(recorder.group_sizes) >= 50
        assert log.flushed_offset == log.wrote_offset
        assert recorder.flushes and all(kind == "sync" for kind, _ in recorder.flushes)
    finally:
        await log.shutdown()
        log.close()


async def test_requests_waiting_after_a_sync_are_synced_again_by_the_same_thread_run(
    tmp_path, monkeypatch
):
    # The sync thread does not hand back to the loop between consecutive group commits: the
    # writers that appended during the first sync are covered by a second sync in the same
    # thread run (one executor hand-off for both).
    spy = SyncSpy(delay_s=0.05)
    monkeypatch.setattr(mf_module, "fdatasync", spy)  # the Python sync thread (the seam)
    runs = 0
    sync_while_requested = ThreadSyncEngine._sync_while_requested

    def counting(self, loop):
        nonlocal runs
        runs += 1
        return sync_while_requested(self, loop)

    monkeypatch.setattr(ThreadSyncEngine, "_sync_while_requested", counting)
    recorder = Recorder()
    log = make_log(tmp_path, recorder)
    log.start()
    try:
        first = log.append("T", 0, 0, [MessageInput(b"first")])
        first_wait = asyncio.create_task(log.wait_flushed(first.end_offset))
        await asyncio.sleep(0.01)  # the first sync is in progress
        later = [log.append("T", 0, 1 + i, [MessageInput(b"m%d" % i)]) for i in range(20)]
        oks = await asyncio.gather(*(log.wait_flushed(r.end_offset) for r in later))
        assert await first_wait and all(oks)
        assert (runs, spy.calls) == (1, 2)
        assert recorder.group_sizes == [1, 20]  # each sync answered the waiters it covered
        assert log.flushed_offset == log.wrote_offset
    finally:
        await log.shutdown()
        log.close()


async def test_already_flushed_offsets_return_at_once_without_a_sync(tmp_path, monkeypatch):
    spy = SyncSpy()
    monkeypatch.setattr(mf_module, "fdatasync", spy)
    log = make_log(tmp_path)
    log.start()
    try:
        result = log.append("T", 0, 0, [MessageInput(b"x")])
        assert await log.wait_flushed(result.end_offset)
        calls = spy.calls
        assert await log.wait_flushed(result.end_offset)
        assert spy.calls == calls
    finally:
        await log.shutdown()
        log.close()


async def test_slow_sync_past_the_timeout_reports_flush_disk_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(mf_module, "fdatasync", SyncSpy(delay_s=0.6))
    log = make_log(tmp_path, sync_flush_timeout=150)
    log.start()
    try:
        result = log.append("T", 0, 0, [MessageInput(b"x")])
        started = time.monotonic()
        assert await log.wait_flushed(result.end_offset) is False  # FLUSH_DISK_TIMEOUT
        assert time.monotonic() - started < 0.5
        # the data still becomes durable; the store stays writable
        for _ in range(100):
            if log.flushed_offset >= result.end_offset:
                break
            await asyncio.sleep(0.02)
        assert log.flushed_offset >= result.end_offset
        assert log.writable
    finally:
        await log.shutdown()
        log.close()


async def test_failing_sync_makes_the_log_sticky_not_writable(tmp_path, monkeypatch):
    spy = SyncSpy(fail=True)
    monkeypatch.setattr(mf_module, "fdatasync", spy)
    log = make_log(tmp_path)
    log.start()
    try:
        results = [log.append("T", 0, i, [MessageInput(b"x")]) for i in range(3)]
        outcomes = await asyncio.gather(
            *(log.wait_flushed(r.end_offset) for r in results), return_exceptions=True
        )
        assert all(isinstance(o, FlushFailedError) for o in outcomes), outcomes
        assert "injected I/O error" in str(outcomes[0]) and "restarted" in str(outcomes[0])
        assert not log.writable and isinstance(log.write_error, FlushFailedError)
        with pytest.raises(FlushFailedError):
            log.append("T", 0, 3, [MessageInput(b"later")])
        with pytest.raises(FlushFailedError):
            await log.wait_flushed(results[-1].end_offset)
        # the disk "recovers": the error stays sticky, nothing is silently acknowledged
        spy.fail = False
        with pytest.raises(FlushFailedError):
            log.append("T", 0, 3, [MessageInput(b"later")])
        assert log.group_commit.failures >= 1
    finally:
        await log.shutdown()
        log.close()


async def test_waiters_parked_at_shutdown_are_served_by_a_last_sync(tmp_path, monkeypatch):
    monkeypatch.setattr(mf_module, "fdatasync", SyncSpy(delay_s=0.05))
    log = make_log(tmp_path)
    log.start()
    results = [log.append("T", 0, i, [MessageInput(b"x")]) for i in range(5)]
    waits = [asyncio.create_task(log.wait_flushed(r.end_offset)) for r in results]
    await asyncio.sleep(0)
    await log.shutdown()
    assert all(await asyncio.gather(*waits))
    assert log.flushed_offset == log.wrote_offset
    log.close()


async def test_on_durable_runs_before_the_waiters_are_answered(tmp_path, monkeypatch):
    """The store hangs its reput here: dispatch must see the sync before any writer resumes."""
    monkeypatch.setattr(mf_module, "fdatasync", SyncSpy())
    log = make_log(tmp_path)
    seen: list[tuple[int, bool]] = []
    waits: list[asyncio.Task[bool]] = []
    log.group_commit.on_durable = lambda: seen.append(
        (log.flushed_offset, any(w.done() for w in waits))
    )
    log.start()
    try:
        result = log.append("T", 0, 0, [MessageInput(b"one")])
        waits.append(asyncio.create_task(log.wait_flushed(result.end_offset)))
        assert await waits[0]
        assert seen and seen[0] == (result.end_offset, False)
    finally:
        await log.shutdown()
        log.close()


async def test_group_commits_run_on_one_long_lived_sync_thread_that_ends_at_stop(
    tmp_path, monkeypatch
):
    # No executor submit per group commit: one thread, parked between syncs, does them all;
    # shutdown ends it.
    threads: list[threading.Thread] = []
    real = os.fdatasync

    def recording(fd: int) -> None:
        threads.append(threading.current_thread())
        real(fd)

    monkeypatch.setattr(mf_module, "fdatasync", recording)
    log = make_log(tmp_path)
    log.start()
    engine = log.group_commit.engine
    assert isinstance(engine, ThreadSyncEngine)  # the fdatasync seam is replaced
    thread = engine._thread
    try:
        assert thread is not None and thread.is_alive() and thread.name == "group-commit"
        for i in range(3):
            result = log.append("T", 0, i, [MessageInput(b"m%d" % i)])
            assert await log.wait_flushed(result.end_offset)
            await asyncio.sleep(0.01)  # idle between group commits: the thread parks
        synced_by = {t for t in threads if t.name == "group-commit"}
        assert synced_by == {thread} and len([t for t in threads if t is thread]) >= 3
    finally:
        await log.shutdown()
        log.close()
    thread.join(5)
    assert not thread.is_alive()
