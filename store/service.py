"""A background-service base on asyncio tasks (RocketMQ's ServiceThread, minus the thread).

A service is a loop: ``run_once()``, then ``wait_for_running(interval)`` until a ``wakeup()`` or
the interval passes. Subclasses do blocking work through ``run_blocking`` (a thread), never on
the event loop.

Failure policy: an exception from ``run_once`` is logged with the service name and recorded
(``failures``, ``last_error``) for health and metrics, then the loop backs off and continues:
failures in a row wait from one interval doubling up to 1 s, wakeups ignored (a dispatch that
fails on a full disk or an exhausted fd table, woken by every append, retried ~60 times in the
first 10 ms). An error with ``log_once`` (disk full, store/errors.py) is logged once per episode
(until a run succeeds), without a traceback; any other failure that repeats (same type and
text) logs its traceback once, then one line a minute with the count; the first success after
failures logs that the service recovered. A subclass whose failures must stop the world (the
flush services: a failed fdatasync leaves the file state unknown) handles that itself in
``on_failure`` -- nothing is swallowed silently.

``BackgroundTasks``: the store's fire-and-forget coroutines (a sync nobody awaits, a persist, a
deleted topic's files), kept until they end and awaited at shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class Service:
    """Subclass and implement ``run_once``. ``interval_s`` is the idle wait between runs."""

    MAX_FAILURE_BACKOFF_S = 1.0
    REPEAT_LOG_INTERVAL_S = 60.0

    def __init__(
        self,
        name: str,
        interval_s: float,
        executor: Executor | None = None,
        min_gap_s: float = 0.0,
    ) -> None:
        """``min_gap_s``: runs start at least this far apart even when woken more often, so a
        wakeup per append coalesces into one run (bounded coalescing, as NATS' flushLoop)."""
        if interval_s <= 0:
            raise ValueError(f"{name}: interval must be > 0, got {interval_s}")
        self.name = name
        self.interval_s = interval_s
        self.min_gap_s = min_gap_s
        self._executor = executor
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._notified = False
        self._waiter: asyncio.Future[None] | None = None
        self.failures = 0
        self.consecutive_failures = 0
        self._repeat_key: tuple[type, str] | None = None
        self._repeat_logged_at = 0.0
        self._repeats = 0
        self.last_error: BaseException | None = None
        self.last_error_at = 0.0  # time.time() of the last failure, 0 if none
        self.runs = 0

    # --- lifecycle ----------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the loop on the running event loop (idempotent)."""
        if self.running:
            return
        self._stopping = False
        self._task = asyncio.get_running_loop().create_task(self._loop(), name=self.name)

    async def stop(self) -> None:
        """Ask the loop to end, wait for the current run and ``on_stop`` to finish."""
        self._stopping = True
        self.wakeup()
        task, self._task = self._task, None
        if task is not None:
            await task

    @property
    def stopping(self) -> bool:
        return self._stopping

    # --- waiting ------------------------------------------------------------------------------
    def wakeup(self) -> None:
        """Make the current (or next) ``wait_for_running`` return at once. Loop thread only."""
        self._notified = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait_for_running(self, timeout_s: float) -> None:
        """Wait until ``wakeup()`` or ``timeout_s``; a wakeup that came earlier counts."""
        if self._notified or self._stopping:
            self._notified = False
            return
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._waiter = waiter
        timer = loop.call_later(timeout_s, _resolve, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None
            self._notified = False

    async def run_blocking(self, fn: Callable[..., T], *args: object) -> T:
        """Run a ``*_blocking`` function in this service's executor (a thread)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # --- the loop -----------------------------------------------------------------------------
    async def run_once(self) -> None:
        raise NotImplementedError

    async def on_stop(self) -> None:
        """Final work after the loop ends (a last flush, failing parked waiters ...)."""

    def on_failure(self, exc: BaseException) -> None:
        """Hook called after a failure was logged and recorded."""

    async def _loop(self) -> None:
        last_start = 0.0
        while not self._stopping:
            if self.min_gap_s > 0:
                gap = last_start + self.min_gap_s - time.monotonic()
                if gap > 0:
                    await asyncio.sleep(gap)
                last_start = time.monotonic()
            try:
                await self.run_once()
                self.runs += 1
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._record_failure(exc)
                await self._back_off()
                continue
            if self.consecutive_failures:
                log.info("%s recovered after %d failures", self.name, self.consecutive_failures)
                self.consecutive_failures = 0
                self._repeat_key = None
            if not self._stopping:
                await self.wait_for_running(self.interval_s)
        try:
            await self.on_stop()
        except Exception as exc:
            self._record_failure(exc)

    async def _back_off(self) -> None:
        """Wait after a failure, from one interval doubling up to MAX_FAILURE_BACKOFF_S; wakeups
        do not shorten it, stop() does."""
        doublings = min(self.consecutive_failures - 1, 16)
        delay = min(self.MAX_FAILURE_BACKOFF_S, self.interval_s * (1 << doublings))
        until = time.monotonic() + max(delay, self.interval_s)
        while not self._stopping and (remaining := until - time.monotonic()) > 0:
            await self.wait_for_running(remaining)

    def _record_failure(self, exc: BaseException) -> None:
        self.failures += 1
        self.consecutive_failures += 1
        self.last_error = exc
        self.last_error_at = time.time()
        # An expected, lasting condition (log_once: disk full) is one episode whatever its
        # text says, logged once without a traceback; any other failure repeats when its type
        # and text do.
        quiet = getattr(exc, "log_once", False)
        key: tuple[type, str] = (type(exc), "" if quiet else str(exc))
        now = time.monotonic()
        if key != self._repeat_key:
            self._repeat_key, self._repeat_logged_at, self._repeats = key, now, 0
            if quiet:
                log.error("%s: %s (retrying with back-off)", self.name, exc)
            else:
                log.error(
                    "%s failed (failure #%d): %r", self.name, self.failures, exc, exc_info=exc
                )
        elif not quiet:
            self._repeats += 1
            if now - self._repeat_logged_at >= self.REPEAT_LOG_INTERVAL_S:
                log.error("%s still failing: %r (%d more times since the last line)",
                          self.name, exc, self._repeats)  # fmt: skip
                self._repeat_logged_at, self._repeats = now, 0
        self.on_failure(exc)

    def health(self) -> dict[str, object]:
        return {
            "name": self.name,
            "running": self.running,
            "runs": self.runs,
            "failures": self.failures,
            "last_error": repr(self.last_error) if self.last_error else "",
        }


class BackgroundTasks:
    """Work the store starts and nobody awaits (a sync nobody waits for, a persist, a topic's
    files deleted): ``spawn`` keeps each task until it ends, ``wait`` awaits those running at
    shutdown."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait(self) -> None:
        for task in list(self._tasks):
            await task


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
