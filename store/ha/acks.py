"""ReplicaAcks: SYNC_MASTER's wait for replicas (RocketMQ's GroupTransferService, done as Wharf's
GroupCommitService: futures on the event loop, no thread, no per-waiter timer).

A put appends, then ``await wait(end_offset)``: resolved True once ``advance(watermark)``
reports a watermark at or past ``end_offset`` (the master computes it from the replicas'
REPORTs), False after ``timeout_s`` (slaveTimeout, 3 s: FLUSH_SLAVE_TIMEOUT; the message stays
stored). Every waiter has the same timeout, so deadlines are in FIFO order and one timer at the
oldest deadline serves them all; waiters resolve in end-offset order because appends are.
``fail_all()`` answers every waiter False at once (the master stops, or loses its last replica
so nobody is going to report).
"""

from __future__ import annotations

import asyncio
from collections import deque


class ReplicaAcks:
    def __init__(self, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        # (end offset, deadline, future), in append order = end-offset order = deadline order.
        self._waiters: deque[tuple[int, float, asyncio.Future[bool]]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self.watermark = 0
        self.timeouts = 0

    def __len__(self) -> int:
        return len(self._waiters)

    def wait(self, end_offset: int) -> asyncio.Future[bool]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        if end_offset <= self.watermark:
            future.set_result(True)
            return future
        self._waiters.append((end_offset, loop.time() + self._timeout_s, future))
        if self._timer is None:
            self._arm(loop)
        return future

    def advance(self, watermark: int) -> None:
        """Replicas hold everything below ``watermark``: answer the waiters it covers."""
        if watermark <= self.watermark:
            return
        self.watermark = watermark
        waiters = self._waiters
        while waiters and waiters[0][0] <= watermark:
            future = waiters.popleft()[2]
            if not future.done():
                future.set_result(True)

    def fail_all(self) -> None:
        while self._waiters:
            future = self._waiters.popleft()[2]
            if not future.done():
                future.set_result(False)
        self._cancel_timer()

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = loop.call_at(self._waiters[0][1], self._expire)

    def _expire(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        waiters = self._waiters
        while waiters and waiters[0][1] <= now:
            future = waiters.popleft()[2]
            if not future.done():
                self.timeouts += 1
                future.set_result(False)
        if waiters:
            self._arm(loop)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
