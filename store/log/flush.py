"""ASYNC_FLUSH services: FlushRealTimeService and CommitRealTimeService (RocketMQ's names).

FlushRealTimeService: every ``flushIntervalCommitLog`` (500 ms), or at once when woken, sync the
commit log if at least ``flushCommitLogLeastPages`` (4) pages are dirty; every
``flushCommitLogThoroughInterval`` (10 s) sync whatever is dirty. The sync (fdatasync) runs in a
thread. After a sync that moved the flushed offset, the checkpoint's physic fields advance and
the checkpoint file is written (``persist_checkpoint``), so abnormal recovery can start at the
flushed offset. A failing sync is sticky (``on_failed``), as for group commit.

CommitRealTimeService (transientStorePoolEnable): every ``commitIntervalCommitLog`` (200 ms) copy
at least ``commitCommitLogLeastPages`` (4) pages of buffered appends into the files (pwrite in a
thread: the copy leaves the event loop's core), then wake the flush service. Readers and dispatch
only see committed data, so when ``commitCommitLogThoroughInterval`` (200 ms) has passed since the
last commit that moved data, the next run commits whatever is buffered (RocketMQ's
commitDataThoroughInterval): a lone small message becomes visible within ~200 ms.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Executor

from wharf.store.service import Service

_FINAL_FLUSH_ATTEMPTS = 10  # RocketMQ's RETRY_TIMES_OVER on shutdown
# Appends wake the services once per batch; each run costs the event loop a thread hand-off
# (~30-50 us) and an fdatasync/pwrite. Measured at 300k msg/s in batches of 128, a flush per
# batch cost ~2.5 us of CPU per message; these gaps bound the runs to 100 (flush) and 500
# (commit) per second while keeping the ASYNC durability window at ~10 ms under load.
FLUSH_MIN_GAP_S = 0.010
COMMIT_MIN_GAP_S = 0.002


class FlushRealTimeService(Service):
    def __init__(
        self,
        flush_blocking: Callable[[int], int],
        flushed_offset: Callable[[], int],
        interval_ms: int,
        least_pages: int,
        thorough_interval_ms: int,
        on_flushed: Callable[[int, float, int], None],
        on_failed: Callable[[BaseException], object],
        executor: Executor | None = None,
        flush_data: bool = True,
    ) -> None:
        """``flush_blocking(least_pages) -> flushed offset``; ``on_flushed(offset, seconds,
        nbytes)`` runs on the loop after a sync that moved the offset. ``flush_data=False``
        (SYNC_FLUSH: group commit owns the data syncs) only runs ``on_flushed`` bookkeeping."""
        super().__init__(
            "FlushRealTimeService",
            interval_s=interval_ms / 1000,
            executor=executor,
            min_gap_s=min(FLUSH_MIN_GAP_S, interval_ms / 1000),
        )
        self._flush_blocking = flush_blocking
        self._flushed_offset = flushed_offset
        self._least_pages = least_pages
        self._thorough_s = thorough_interval_ms / 1000
        self._on_flushed = on_flushed
        self._on_failed = on_failed
        self._flush_data = flush_data
        self._last_thorough = time.monotonic()
        self._reported = flushed_offset()
        self.flushes = 0

    async def run_once(self) -> None:
        least = self._least_pages
        now = time.monotonic()
        if now - self._last_thorough >= self._thorough_s:
            self._last_thorough = now
            least = 0
        await self._flush(least)

    async def _flush(self, least_pages: int) -> None:
        started = time.perf_counter()
        if self._flush_data:
            try:
                await self.run_blocking(self._flush_blocking, least_pages)
            except Exception as exc:
                self._on_failed(exc)
                raise
        flushed = self._flushed_offset()
        if flushed > self._reported:
            nbytes, self._reported = flushed - self._reported, flushed
            self.flushes += 1
            self._on_flushed(flushed, time.perf_counter() - started, nbytes)

    async def on_stop(self) -> None:
        for _ in range(_FINAL_FLUSH_ATTEMPTS):
            before = self._flushed_offset()
            await self._flush(0)
            if self._flushed_offset() == before:
                break


class CommitRealTimeService(Service):
    def __init__(
        self,
        commit_blocking: Callable[[int], int],
        interval_ms: int,
        least_pages: int,
        after_commit: Callable[[], None],
        on_failed: Callable[[BaseException], object],
        executor: Executor | None = None,
        thorough_interval_ms: int = 200,
    ) -> None:
        """``commit_blocking(least_pages) -> committed offset``."""
        super().__init__(
            "CommitRealTimeService",
            interval_s=interval_ms / 1000,
            executor=executor,
            min_gap_s=min(COMMIT_MIN_GAP_S, interval_ms / 1000),
        )
        self._commit_blocking = commit_blocking
        self._least_pages = least_pages
        self._after_commit = after_commit
        self._on_failed = on_failed
        self._thorough_s = thorough_interval_ms / 1000
        self._last_progress = time.monotonic()  # of the last commit that moved data
        self._committed = -1
        self.commits = 0

    async def run_once(self) -> None:
        least = self._least_pages
        if time.monotonic() - self._last_progress >= self._thorough_s:
            least = 0
        await self._commit(least)

    async def _commit(self, least_pages: int) -> None:
        try:
            committed = await self.run_blocking(self._commit_blocking, least_pages)
        except Exception as exc:
            self._on_failed(exc)
            raise
        if committed != self._committed:
            self._committed = committed
            self._last_progress = time.monotonic()
        self.commits += 1
        self._after_commit()

    async def on_stop(self) -> None:
        await self._commit(0)
