"""Sync engines: who runs a group commit's fdatasync, and how its end reaches the event loop.

``GroupCommitService`` decides WHEN a sync is needed (a waiter past the durable offset) and
answers the waiters; an engine runs the syncs, back to back while requests keep coming. Two
engines keep one contract:

- ``NativeSyncEngine``: the compiled thread of ``store/fast/_syncer.c``, which never holds the
  GIL. The loop plans each sync (the segments' file descriptors and positions, read where the
  appends happen) and hands it over under a mutex; the thread runs fdatasync and writes an
  eventfd the loop watches. A Python thread needs the GIL to start the sync after its wake-up
  and again to post the result, and a busy loop holds it until it next blocks (or the 5 ms
  switch interval): at 1k msg/s SYNC_FLUSH, request -> fdatasync start p50 76 us / p99 1.9 ms,
  fdatasync done -> loop told p99 1.3 ms.
- ``ThreadSyncEngine``: a long-lived Python thread parked on a Condition (the reference twin).
  Used when the compiled module is not built or ``WHARF_NO_SPEEDUPS`` is set, when
  ``mapped_file.fdatasync`` is not ``os.fdatasync`` when the CommitLog is built (the seam
  through which tests slow down or break syncs), and with the transient store pool (its
  commit is Python code).

Contract, on the loop: ``start(served, failed)``; ``request(end)``: make at least everything
below ``end`` durable soon (everything appended so far is planned); ``busy``; ``wait_idle()``;
``close()`` (once idle). ``served(flushed, seconds, nbytes)`` runs after each sync that
completes, in order; ``failed(exc)`` once, for the first sync that raised (the caller makes it
sticky; no ``served`` follows).

``write_when_durable(end, fd, data, done)``: send ``data`` on the socket ``fd`` once everything
below ``end`` is durable. The native engine hands it to its thread, which sends right after the
fdatasync that covers ``end``, before the loop even learns of it (a pull answer built ahead of
time leaves without waiting for the loop's wake-up): DEFERRED, and ``done(outcome)`` runs later
on the loop with the bytes written (the caller writes ``data[outcome:]``), ``-errno``,
NOT_SYNCED or CLOSED (nothing written). DURABLE: on disk already, the caller writes itself;
REFUSED: not taken (no sync covers ``end``, failed, closed, full), the caller writes once
``wait_flushed`` says so. While a write deferred on a socket is not reported, the caller writes
nothing else on it itself: one stream's bytes keep their order only if every write goes
through here (the thread keeps the order of the entries of one socket, and reports those it
could not write in order, for the caller to write in that order).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from wharf import hops
from wharf.store import fast
from wharf.store.log import mapped_file
from wharf.store.model import DEFERRED, DURABLE, REFUSED

log = logging.getLogger(__name__)

Served = Callable[[int, float, int], None]
Failed = Callable[[BaseException], None]
Done = Callable[[int], None]

# write_when_durable's answers are values of the store's boundary (``wharf.store.model``).
# Outcomes (besides the bytes written, >= 0, and -errno) of writes never attempted.
NOT_SYNCED = -1000  # the sync failed: the data is not durable
CLOSED = -1001  # the engine closed first


class SyncEngine(Protocol):
    @property
    def busy(self) -> bool: ...

    def start(self, served: Served, failed: Failed) -> None: ...

    def request(self, end: int) -> None: ...

    def prewake(self) -> None: ...

    def write_when_durable(self, end: int, fd: int, data: bytes, done: Done) -> int: ...

    async def wait_idle(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class SyncPlan:
    """One native sync: the fds to fdatasync, the offset it makes durable, and what the owner
    needs back to record it (``settle``)."""

    fds: tuple[int, ...]
    mark: int
    token: Any


def native_syncer_type() -> Callable[[], Any] | None:
    """The compiled ``Syncer`` type (calling it starts its thread), or None when the reference
    thread must run (not built, ``WHARF_NO_SPEEDUPS``, or the ``mapped_file.fdatasync`` seam
    replaced)."""
    if mapped_file.fdatasync is not os.fdatasync:
        return None
    module = fast.load("_syncer")
    return None if module is None else module.Syncer


class NativeSyncEngine:
    """Syncs on the compiled thread; ``plan()`` and ``settle(token) -> flushed`` run on the
    loop (they read and move the log's positions where its appends do). The thread is made
    (``make_syncer()``) by ``start`` and joined by ``close``: a log built and never started
    holds none."""

    def __init__(
        self,
        make_syncer: Callable[[], Any],
        plan: Callable[[int], SyncPlan | None],
        settle: Callable[[Any], int],
        flushed_offset: Callable[[], int],
    ) -> None:
        self._make_syncer = make_syncer
        self._syncer: Any = None
        self._plan = plan  # (max fds) -> the plan of a sync of everything appended so far
        self._settle = settle
        self._flushed_offset = flushed_offset
        self._jobs: deque[tuple[int, SyncPlan]] = deque()  # submitted, not reported
        self._next_id = 0
        self._done_id = 0
        self._planned = 0  # the highest mark submitted
        self._idle = asyncio.Event()
        self._idle.set()
        self._served: Served | None = None
        self._failed: Failed | None = None
        self._failure_reported = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._deferred: dict[int, Done] = {}  # token -> done, for writes the thread holds
        self._next_token = 0

    @property
    def busy(self) -> bool:
        return bool(self._jobs)

    def start(self, served: Served, failed: Failed) -> None:
        self._served, self._failed = served, failed
        self._loop = asyncio.get_running_loop()
        self._syncer = self._make_syncer()
        self._loop.add_reader(self._syncer.fileno(), self._ready)

    def request(self, end: int) -> None:
        if end <= self._planned or self._failure_reported or self._syncer is None:
            return  # a job submitted already covers it (or not started: nothing runs jobs)
        plan = self._plan(self._syncer.MAX_FDS)
        if plan is None:
            return
        self._next_id += 1
        self._jobs.append((self._next_id, plan))
        self._planned = plan.mark
        self._idle.clear()
        if hops.ENABLED:
            hops.stamp("b.sync_kick")
        # Replaces a job the thread has not started: this one covers it.
        self._syncer.submit(self._next_id, plan.fds)

    def prewake(self) -> None:
        """An append is coming whose sync will be requested in a moment: wake the idle
        thread now, to spin for it, so its wake-up (~50 us from an idle vCPU here) overlaps
        the append instead of delaying the fdatasync."""
        if self._syncer is not None and not self._failure_reported:
            self._syncer.prewake()

    def write_when_durable(self, end: int, fd: int, data: bytes, done: Done) -> int:
        """Send ``data`` on ``fd`` once everything below ``end`` is durable: DEFERRED (the sync
        thread sends it after the sync of the oldest submitted job covering ``end``;
        ``done(outcome)`` follows), DURABLE or REFUSED (the caller writes); see the module
        docstring."""
        syncer = self._syncer
        if end <= self._flushed_offset():
            if not self._deferred or syncer is None or self._failure_reported:
                return DURABLE
            # A write deferred earlier may be on this socket: the thread answers DURABLE if
            # not, else queues this one behind it (its job is done: sent as soon as it may).
            job_id = self._done_id
        else:
            if self._failure_reported or syncer is None or self._loop is None:
                return REFUSED
            job_id = next((id_ for id_, plan in self._jobs if plan.mark >= end), 0)
            if not job_id:
                return REFUSED  # no submitted sync covers it (yet)
        self._next_token += 1
        token = self._next_token
        result = syncer.defer(job_id, fd, data, token)
        if result == 0:
            self._deferred[token] = done
            return DEFERRED
        return DURABLE if result == 1 else REFUSED

    def _ready(self) -> None:
        """The eventfd fired: report the newest sync done (it covers every older job), then
        the deferred writes finished."""
        self._take_jobs()
        self._report_deferred()

    def _take_jobs(self) -> None:
        done_id, _, seconds, start_ns, done_ns, failed_id, errno_, _ = self._syncer.take()
        if failed_id and not self._failure_reported:
            self._failure_reported = True
            self._jobs.clear()
            self._idle.set()
            assert self._failed is not None
            self._failed(OSError(errno_, f"fdatasync failed: {os.strerror(errno_)}"))
            return
        if done_id > self._done_id and not self._failure_reported:
            self._done_id = done_id
            plan: SyncPlan | None = None
            while self._jobs and self._jobs[0][0] <= done_id:
                _, plan = self._jobs.popleft()
            if hops.ENABLED:
                hops.stamp_at("b.sync_start", start_ns)
                hops.stamp_at("b.sync_done", done_ns)
            if plan is not None:
                before = self._flushed_offset()
                flushed = self._settle(plan.token)
                assert self._served is not None
                self._served(flushed, seconds, flushed - before)
        if not self._jobs:
            self._idle.set()

    def _report_deferred(self) -> None:
        """Loop: ``done(outcome)`` of each deferred write finished, in the thread's order."""
        for token, outcome in self._syncer.take_deferred():
            done = self._deferred.pop(token, None)
            if done is None:
                continue
            try:
                done(outcome)
            except Exception:
                log.exception("a deferred write's done callback failed (outcome %d)", outcome)

    async def wait_idle(self) -> None:
        await self._idle.wait()

    def close(self) -> None:
        if self._syncer is None:
            return  # never started: no thread
        if self._loop is not None:
            self._loop.remove_reader(self._syncer.fileno())
            self._loop = None
        self._syncer.close()  # idle by now: the join is immediate
        self._report_deferred()  # those still queued finish as CLOSED
        leftover, self._deferred = self._deferred, {}
        for done in leftover.values():  # none expected: the syncer reports every entry
            try:
                done(CLOSED)
            except Exception:
                log.exception("a deferred write's done callback failed (closed)")


class ThreadSyncEngine:
    """Syncs on a long-lived Python thread parked on a Condition between group commits (an
    executor submit cost ~85 us from the request to the fdatasync's start here). The thread
    syncs again at once while a request waits past what it made durable; a request made after
    its last look is picked up when its run ends (``_completed``)."""

    def __init__(self, sync_blocking: Callable[[], int], flushed_offset: Callable[[], int]):
        self._sync_blocking = sync_blocking  # sync everything appended; the flushed offset
        self._flushed_offset = flushed_offset
        self._wake = threading.Condition(threading.Lock())
        self._job: tuple[asyncio.AbstractEventLoop, asyncio.Future[int]] | None = None
        self._closing = False
        self._thread: threading.Thread | None = None
        # The highest end offset requested: read by the thread to decide whether to sync again
        # (an int attribute: a consistent read under the GIL).
        self._requested_end = 0
        self._in_flight: asyncio.Future[int] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._served: Served | None = None
        self._failed: Failed | None = None
        self._stopped = False

    @property
    def busy(self) -> bool:
        return self._in_flight is not None

    def start(self, served: Served, failed: Failed) -> None:
        self._served, self._failed = served, failed
        self._stopped = False
        with self._wake:
            self._closing = False
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._thread_main, name="group-commit", daemon=True
            )
            self._thread.start()

    def request(self, end: int) -> None:
        if end > self._requested_end:
            self._requested_end = end
        if self._in_flight is not None or self._stopped:
            return
        if hops.ENABLED:
            hops.stamp("b.sync_kick")
        loop = asyncio.get_running_loop()
        in_flight: asyncio.Future[int] = loop.create_future()
        self._in_flight = in_flight
        self._idle.clear()
        in_flight.add_done_callback(self._completed)
        with self._wake:
            self._job = (loop, in_flight)
            self._wake.notify()

    def _thread_main(self) -> None:
        """The sync thread: wait for a job, sync while requested, settle the loop's future."""
        while True:
            with self._wake:
                while self._job is None and not self._closing:
                    self._wake.wait()
                job, self._job = self._job, None
            if job is None:
                return  # closing, nothing asked
            loop, future = job
            try:
                result: tuple[int | None, BaseException | None] = (
                    self._sync_while_requested(loop),
                    None,
                )
            except BaseException as exc:  # the loop reports it
                result = (None, exc)
            try:
                loop.call_soon_threadsafe(_settle, future, *result)
            except RuntimeError:  # the loop is closed: nobody waits any more
                return

    def _sync_while_requested(self, loop: asyncio.AbstractEventLoop) -> int:
        """Thread: sync, report to the loop, and sync again at once while a request waits past
        the durable offset."""
        while True:
            before = self._flushed_offset()
            if hops.ENABLED:
                hops.stamp("b.sync_start")
            started = time.perf_counter()
            flushed = self._sync_blocking()
            if hops.ENABLED:
                hops.stamp("b.sync_done")
            assert self._served is not None
            loop.call_soon_threadsafe(
                self._served, flushed, time.perf_counter() - started, flushed - before
            )
            if self._requested_end <= flushed or self._stopped:
                return flushed

    def _completed(self, done: asyncio.Future[int]) -> None:
        """Loop, after the run's last ``served`` (callbacks posted by the thread run in
        order)."""
        self._in_flight = None
        exc = done.exception()
        if exc is not None:
            self._stopped = True
            self._idle.set()
            assert self._failed is not None
            self._failed(exc)
            return
        if self._requested_end > self._flushed_offset():
            self.request(self._requested_end)  # requested after the thread's last look
        else:
            self._idle.set()

    def prewake(self) -> None:
        """Nothing: a Python thread could not start its sync any sooner."""

    def write_when_durable(self, end: int, fd: int, data: bytes, done: Done) -> int:
        """REFUSED, always: this reference twin (tests, no compiled module, the fdatasync seam
        replaced, the transient pool) has no thread that may send without the GIL, and a send
        posted through the loop would be no sooner than the caller's own write once
        ``wait_flushed`` answers (at once when ``end`` is on disk already)."""
        return REFUSED

    async def wait_idle(self) -> None:
        await self._idle.wait()

    def close(self) -> None:
        self._stopped = True
        with self._wake:
            self._closing = True
            self._wake.notify()


def _settle(future: asyncio.Future[int], flushed: int | None, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        assert flushed is not None
        future.set_result(flushed)
