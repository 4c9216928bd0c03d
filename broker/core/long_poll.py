"""PullRequestHoldService, asyncio style: pulls that found nothing park here until the store's
dispatch reports an arrival on their queue, their wait runs out, or the broker shuts down.

Woken by ``on_arrival`` (registered as the store's arrival listener), never by a sleep loop.
Bounded by ``max_parked``: beyond it ``park`` raises ResourceExhaustedError, so a flood of idle
consumers cannot grow memory without limit. A cancelled pull (client deadline or disconnect)
removes its own entry in ``finally``: nothing leaks.

Answer in place: a pull may park with an ``answer`` callable. ``on_arrival`` calls it right
there, synchronously, inside the store's dispatch callback that reported the arrival (the pull
reads and writes its reply without waiting for its task to be resumed: a lone message's reply
leaves ~50 us sooner on the 2-core VM, one loop step and the timeout's unwinding less). What
``answer`` returns (not None) is what ``park`` returns instead of True; None (or an exception,
logged) wakes the pull as usual and it reads itself. ``answer`` is called only for a pull still
waiting (its future not done: not timed out, not cancelled), at most once, and for at most
``MAX_IN_PLACE`` pulls per arrival.

Ahead of the sync: a pull may also park with an ``ahead`` callable. Under SYNC_FLUSH the store
reports, while a sync's fdatasync runs, the queues that sync will advance (``on_planned``);
``ahead`` then reads those records and hands its reply to the sync thread, which writes it to
the client's socket right after the fdatasync (``ReadCore.write_when_durable``): the reply
leaves without the loop's wake-up, dispatch and in-place answer in between (~140 us of a lone
message's ~0.9 ms on the wire port, tests/bench/README.md "e2e_hops"), and never before the
records are durable. Not None = answered, as for ``answer``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

from wharf import hops
from wharf.broker.errors import ResourceExhaustedError, UnavailableError

log = logging.getLogger("wharf.broker.core.long_poll")
# A parked pull's in-place answer: called with the queue's new max offset; not None = answered.
Answer = Callable[[int], Any]
# In-place answers per arrival: the rest resume as tasks and read themselves. A reply costs
# ~40 us of loop time: 1000 consumers parked on one queue answered in one callback would hold
# the loop ~40 ms, where tasks let other connections' callbacks run in between.
MAX_IN_PLACE = 16


# A parked pull's answer ahead of the sync: called with the queue's max offset once the
# running sync's records are applied and the log offset that sync makes durable; not None =
# answered (its reply leaves from the sync thread once durable).
Ahead = Callable[[int, int], Any]


class _Parked:
    __slots__ = ("ahead", "answer", "future", "offset")

    def __init__(
        self,
        future: asyncio.Future[Any],
        offset: int,
        answer: Answer | None,
        ahead: Ahead | None,
    ) -> None:
        self.future = future
        self.offset = offset
        self.answer = answer
        self.ahead = ahead


class LongPollHolder:
    def __init__(self, max_parked: int) -> None:
        self.max_parked = max_parked
        self._parked: dict[tuple[str, int], list[_Parked]] = {}
        self._count = 0
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0

    @property
    def parked_count(self) -> int:
        """Pulls parked right now (read by the metrics collector)."""
        return self._count

    @property
    def closed(self) -> bool:
        return self._closed

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()

    async def park(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        timeout_s: float,
        answer: Answer | None = None,
        ahead: Ahead | None = None,
    ) -> Any:
        """Wait until the queue's max offset passes ``offset``. True: woken by an arrival;
        False: the time ran out or the broker is shutting down; anything else: what
        ``answer`` returned when the arrival called it (see "Answer in place")."""
        if self._closed:
            raise UnavailableError("the broker is shutting down; retry on another broker")
        if self._count >= self.max_parked:
            raise ResourceExhaustedError(
                f"too many parked pulls ({self.max_parked}, maxParkedPulls); retry later or "
                "use shorter max_wait_ms"
            )
        key = (topic, queue_id)
        entry = _Parked(asyncio.get_running_loop().create_future(), offset, answer, ahead)
        waiters = self._parked.get(key)
        if waiters is None:
            waiters = self._parked[key] = []
        waiters.append(entry)
        self._count += 1
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for resumes its caller one
            # loop turn after the future is set (its inner waiter), and the loop turn in
            # between runs every other ready callback first.
            async with asyncio.timeout(timeout_s):
                woken = await entry.future
            if hops.ENABLED and woken is True:
                hops.stamp("b.pull_woken")
            return woken
        except TimeoutError:
            future = entry.future
            if future.done() and not future.cancelled():
                # Woken (or answered in place) just as the time ran out: an answered pull
                # has written its reply, and must not read and answer again.
                return future.result()
            return False
        finally:
            self._remove(key, entry)

    def _remove(self, key: tuple[str, int], entry: _Parked) -> None:
        waiters = self._parked.get(key)
        if waiters is None:
            return
        try:
            waiters.remove(entry)
        except ValueError:
            return  # already taken by on_arrival / close
        self._count -= 1
        if not waiters:
            del self._parked[key]

    def quiet(self) -> bool:
        """No pull is parked: dispatch's report leaves ``on_arrival`` out (``Arrivals.add``)."""
        return not self._parked

    def on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """The store's ArrivalListener: wake pulls of this queue waiting below ``max_offset``.
        Cheap when nobody waits (one dict lookup): dispatch calls it for every batch."""
        if not self._parked:
            return
        if self._loop is not None and threading.get_ident() != self._loop_thread:
            self._loop.call_soon_threadsafe(self.on_arrival, topic, queue_id, max_offset)
            return
        key = (topic, queue_id)
        waiters = self._parked.get(key)
        if not waiters:
            return
        if hops.ENABLED:
            hops.stamp("b.arrival")
        keep = []
        woken = []
        for entry in waiters:
            if entry.offset < max_offset:
                self._count -= 1
                woken.append(entry)
            else:
                keep.append(entry)
        if keep:
            self._parked[key] = keep
        else:
            del self._parked[key]
        in_place = 0
        for entry in woken:  # taken off the lists first: an answer may park another pull
            future = entry.future
            if future.done():
                continue
            result = None
            if entry.answer is not None and in_place < MAX_IN_PLACE:
                in_place += 1
                if hops.ENABLED:
                    hops.stamp("b.pull_woken")
                try:
                    result = entry.answer(max_offset)
                except Exception:
                    log.exception("a parked pull's answer failed; it reads again itself")
            future.set_result(True if result is None else result)

    def on_planned(self, topic: str, queue_id: int, max_offset: int, durable_end: int) -> None:
        """The store's PlannedListener (SYNC_FLUSH, during a sync): a pull of this queue
        waiting below ``max_offset`` with an ``ahead`` builds its reply now, for the sync
        thread to write once ``durable_end`` is on disk ("Ahead of the sync")."""
        waiters = self._parked.get((topic, queue_id))
        if not waiters:
            return
        answered = 0
        for entry in list(waiters):
            if answered >= MAX_IN_PLACE:
                break
            if entry.ahead is None or entry.offset >= max_offset or entry.future.done():
                continue
            answered += 1
            try:
                result = entry.ahead(max_offset, durable_end)
            except Exception:
                log.exception("a parked pull's answer ahead failed; it waits as usual")
                continue
            if result is not None:
                self._remove((topic, queue_id), entry)
                entry.future.set_result(result)

    def close(self) -> int:
        """Shutdown: answer every parked pull now (they reply with what they have)."""
        self._closed = True
        answered = 0
        for waiters in self._parked.values():
            for entry in waiters:
                if not entry.future.done():
                    entry.future.set_result(False)
                    answered += 1
        self._parked.clear()
        self._count = 0
        return answered
