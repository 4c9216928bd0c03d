"""The group commit's compiled sync thread (store/fast/_syncer.c through sync_engine's
NativeSyncEngine): chosen when it should be, durable acks, back-to-back jobs, errno -> sticky
failure (ENOSPC as disk full), shutdown serving parked waiters. The Python twin
(ThreadSyncEngine) runs tests/store/test_group_commit.py through the fdatasync seam."""

from __future__ import annotations

import asyncio
import errno
import os
import select
import time

import pytest
from wharf import hops
from wharf.store import fast
from wharf.store.config import ASYNC_FLUSH, SYNC_FLUSH, StoreConfig
from wharf.store.errors import FlushFailedError, SyncDiskFullError
from wharf.store.log import mapped_file as mf_module
from wharf.store.log.commit_log import CommitLog
from wharf.store.log.sync_engine import NativeSyncEngine, ThreadSyncEngine
from wharf.store.model import MessageInput

_syncer = fast.load("_syncer")


def make_log(tmp_path, **overrides) -> CommitLog:
    config = StoreConfig(
        store_path_root_dir=str(tmp_path),
        mapped_file_size_commit_log=1 << 20,
        flush_disk_type=overrides.pop("flush_disk_type", SYNC_FLUSH),
        **overrides,
    )
    log = CommitLog(config)
    log.load_blocking()
    log.recover_blocking(abnormal=False)
    return log


def wait_readable(fd: int) -> None:
    ready, _, _ = select.select([fd], [], [], 5)
    assert ready, "the sync thread did not report within 5 s"


def test_the_compiled_syncer_is_built_and_used(tmp_path, monkeypatch) -> None:
    assert _syncer is not None  # built by `pip install -e .`
    assert isinstance(make_log(tmp_path / "a").group_commit.engine, NativeSyncEngine)
    # Its reference twin: no compiled module wanted, a replaced seam, or ASYNC_FLUSH.
    monkeypatch.setenv("WHARF_NO_SPEEDUPS", "1")
    assert isinstance(make_log(tmp_path / "b").group_commit.engine, ThreadSyncEngine)
    monkeypatch.delenv("WHARF_NO_SPEEDUPS")
    assert isinstance(
        make_log(tmp_path / "c", flush_disk_type=ASYNC_FLUSH).group_commit.engine,
        ThreadSyncEngine,
    )
    monkeypatch.setattr(mf_module, "fdatasync", lambda fd: os.fdatasync(fd))
    assert isinstance(make_log(tmp_path / "d").group_commit.engine, ThreadSyncEngine)


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))  # the compiled thread is no Python thread


async def test_the_sync_thread_lives_from_start_to_shutdown(tmp_path) -> None:
    before = _threads()
    log = make_log(tmp_path)
    assert _threads() == before  # built, never started: no thread to leak
    log.start()
    try:
        assert _threads() > before
        result = log.append("T", 0, 0, [MessageInput(b"one")])
        assert await log.wait_flushed(result.end_offset)
    finally:
        await log.shutdown()
        log.close()
    make_log(tmp_path / "unstarted").close()  # a log never started closes without a thread


def test_syncer_runs_the_newest_job_and_reports_errno(tmp_path) -> None:
    assert _syncer is not None
    syncer = _syncer.Syncer()
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    read_end, write_end = os.pipe()
    try:
        os.write(fd, b"x" * 1024)
        for job in range(1, 101):  # jobs not started yet are replaced by newer ones
            syncer.submit(job, (fd,))
        deadline = time.monotonic() + 5
        while True:
            wait_readable(syncer.fileno())
            done_id, _, seconds, start_ns, done_ns, failed_id, _, busy = syncer.take()
            if done_id == 100 and not busy:
                break
            assert time.monotonic() < deadline
        assert failed_id == 0 and 0 < seconds < 5 and start_ns <= done_ns
        assert abs(done_ns - time.time_ns()) < 10 * 10**9  # the wall clock of wharf.hops
        syncer.submit(101, (fd, read_end))  # fdatasync on a pipe: EINVAL
        wait_readable(syncer.fileno())
        done_id, _, _, _, _, failed_id, failed_errno, _ = syncer.take()
        assert (done_id, failed_id, failed_errno) == (100, 101, errno.EINVAL)
        with pytest.raises(ValueError, match="1 to 16 fds"):
            syncer.submit(102, ())
        with pytest.raises(ValueError, match="invalid file descriptor"):
            syncer.submit(102, (-1,))
        syncer.close()
        syncer.close()  # idempotent
        with pytest.raises(ValueError, match="closed"):
            syncer.submit(102, (fd,))
    finally:
        syncer.close()
        for each in (fd, read_end, write_end):
            os.close(each)


def _thread_id(syncer) -> int:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 5
    while not syncer.thread_id():  # set once the thread runs
        assert time.monotonic() < deadline
        time.sleep(0.001)
    return int(syncer.thread_id())


def test_the_sync_thread_is_kept_off_the_submitting_cpu(tmp_path) -> None:
    """Its wake-up would otherwise preempt the event loop on the loop's own CPU (the module
    docstring of _syncer.c): after a submit the thread may run on every CPU of the process but
    one, the caller's; with one CPU allowed its affinity is left alone."""
    assert _syncer is not None
    syncer = _syncer.Syncer()
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        tid = _thread_id(syncer)
        allowed = os.sched_getaffinity(0)
        assert os.sched_getaffinity(tid) == allowed
        os.write(fd, b"x")
        syncer.submit(1, (fd,))
        wait_readable(syncer.fileno())
        assert syncer.take()[0] == 1
        kept = os.sched_getaffinity(tid)
        if len(allowed) > 1:
            assert kept < allowed and len(kept) == len(allowed) - 1
        else:
            assert kept == allowed
    finally:
        syncer.close()
        os.close(fd)


def test_a_prewoken_thread_runs_the_job_that_follows_and_sleeps_again_without_one(
    tmp_path,
) -> None:  # type: ignore[no-untyped-def]
    assert _syncer is not None
    syncer = _syncer.Syncer()
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        _thread_id(syncer)
        syncer.prewake()
        os.write(fd, b"x")
        syncer.submit(1, (fd,))  # found by the spinning thread
        wait_readable(syncer.fileno())
        assert syncer.take()[0] == 1
        syncer.prewake()  # no job follows: the thread spins 0.2 ms, then sleeps again
        time.sleep(0.05)
        syncer.submit(2, (fd,))  # woken from its sleep as usual
        wait_readable(syncer.fileno())
        assert syncer.take()[0] == 2
    finally:
        syncer.close()
        os.close(fd)


async def test_concurrent_writers_share_syncs_and_every_ack_is_durable(tmp_path) -> None:
    log = make_log(tmp_path)
    assert isinstance(log.group_commit.engine, NativeSyncEngine)
    log.start()
    try:

        async def write(i: int) -> tuple[bool, int]:
            await asyncio.sleep(0.001 * (i % 7))
            result = log.append("T", 0, i, [MessageInput(b"m%d" % i)])
            return await log.wait_flushed(result.end_offset), result.end_offset

        outcomes = await asyncio.gather(*(write(i) for i in range(200)))
        for acked, end in outcomes:
            assert acked
            assert log.flushed_offset >= end
        syncs = log.group_commit.syncs
        assert 0 < syncs < 200  # group commits: a sync covers the writers of its time
        assert log.flushed_offset == log.wrote_offset
        segment = log.queue.files[0]
        assert segment.flushed_position == log.wrote_offset  # settled on the loop
    finally:
        await log.shutdown()
        log.close()


async def test_waiters_parked_at_shutdown_are_served(tmp_path) -> None:
    log = make_log(tmp_path)
    log.start()
    result = log.append("T", 0, 0, [MessageInput(b"last")])
    waiter = asyncio.create_task(log.wait_flushed(result.end_offset))
    await asyncio.sleep(0)
    await log.shutdown()
    assert await waiter
    assert log.flushed_offset == result.end_offset
    log.close()


class FailingSyncer:
    """A Syncer look-alike whose every job fails with ``code`` (a pipe wakes the loop)."""

    MAX_FDS = 16

    def __init__(self, code: int) -> None:
        self.code = code
        self.read_end, self.write_end = os.pipe()
        self.failed_id = 0
        self.closed = False

    def fileno(self) -> int:
        return self.read_end

    def submit(self, job_id: int, fds: tuple[int, ...]) -> None:
        assert fds
        self.failed_id = self.failed_id or job_id
        os.write(self.write_end, b"x")

    def take(self) -> tuple[int, int, float, int, int, int, int, int]:
        os.read(self.read_end, 64)
        return (0, 0, 0.0, 0, 0, self.failed_id, self.code, 0)

    def take_deferred(self) -> list[tuple[int, int]]:
        return []  # nothing is ever deferred on it

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.read_end)
            os.close(self.write_end)


@pytest.mark.parametrize(
    ("code", "error"), [(errno.EIO, FlushFailedError), (errno.ENOSPC, SyncDiskFullError)]
)
async def test_a_failed_native_sync_is_sticky_with_its_errno(tmp_path, code, error) -> None:
    log = make_log(tmp_path)
    log.group_commit.engine = NativeSyncEngine(
        lambda: FailingSyncer(code), log._sync_plan, log._settle_sync, log._flushed_where
    )
    log.start()
    try:
        first = log.append("T", 0, 0, [MessageInput(b"never acknowledged")])
        with pytest.raises(error) as failed:
            await log.wait_flushed(first.end_offset)
        assert os.strerror(code) in str(log.group_commit.last_error)
        assert not log.writable  # sticky: the state of the file is unknown
        with pytest.raises(FlushFailedError):
            log.append("T", 0, 1, [MessageInput(b"after")])
        with pytest.raises(type(failed.value)):
            await log.wait_flushed(first.end_offset)
        assert log.flushed_offset == 0
    finally:
        await log.shutdown()
        log.close()


async def test_native_syncs_leave_their_hop_stamps(tmp_path, monkeypatch) -> None:
    # tests/bench/read_path.py splits a lone message's time at b.sync_start / b.sync_done,
    # taken by the compiled thread on the wall clock and recorded when the loop learns of them.
    monkeypatch.setattr(hops, "ENABLED", True)
    monkeypatch.setattr(hops, "STAMPS", [])
    log = make_log(tmp_path)
    log.start()
    try:
        before = time.time_ns()
        result = log.append("T", 0, 0, [MessageInput(b"one")])
        assert await log.wait_flushed(result.end_offset)
        stamps = dict(hops.STAMPS)
        assert before <= stamps["b.sync_kick"] <= stamps["b.sync_start"]
        assert stamps["b.sync_start"] <= stamps["b.sync_done"] <= stamps["b.sync_served"]
    finally:
        await log.shutdown()
        log.close()
