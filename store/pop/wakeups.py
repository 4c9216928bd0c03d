"""Wake-ups of long-polling pops: an arrival on one of their queues, a change of their group's
pop state (ack, dead-letter: a FIFO message group or a full window may be free now; a new
earlier expiry), or their timer (the earliest in-flight expiry or their deadline). No polling
loop: a waiter is a future plus one ``call_later`` timer.

A waiter is registered BEFORE the pop attempt it follows up on, so an arrival that lands while
that pop runs (or waits for its journal sync) is not lost: the waiter is already woken and the
next ``wait`` returns at once. ``pop_wait`` registers one only after a first pop found nothing
(most receives under load find messages at once): that pop did not await, unless it
dead-lettered, and then the service pops once more with the waiter registered.

Cost when nobody waits: one dict lookup per arrival (dispatch calls ``on_arrival`` for every
queue it advances). The caller bounds how many pops wait (the broker's long-poll limit).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


class Waiter:
    __slots__ = ("group", "queue_ids", "topic", "wake_at_ms", "woken")

    def __init__(self, group: str, topic: str, queue_ids: frozenset[int] | None) -> None:
        self.group = group
        self.topic = topic
        self.queue_ids = queue_ids  # None: every queue of the topic
        # The in-flight expiry its timer is armed for (None: only its deadline): a new
        # expiry earlier than this one wakes it so that it re-arms.
        self.wake_at_ms: int | None = None
        self.woken: asyncio.Event = asyncio.Event()

    def covers(self, queue_id: int) -> bool:
        return self.queue_ids is None or queue_id in self.queue_ids

    async def wait(self, timeout_s: float) -> bool:
        """True when woken, False when ``timeout_s`` ran out. Clears the wake-up."""
        if not self.woken.is_set() and timeout_s > 0:
            loop = asyncio.get_running_loop()
            timer = loop.call_later(timeout_s, self.woken.set)
            try:
                await self.woken.wait()
            finally:
                timer.cancel()
        woken = self.woken.is_set()
        self.woken.clear()
        return woken


class Wakeups:
    def __init__(self) -> None:
        self._by_topic: dict[str, set[Waiter]] = {}
        self._closed = False

    @property
    def waiting(self) -> int:
        return sum(len(waiters) for waiters in self._by_topic.values())

    def register(self, group: str, topic: str, queue_ids: Iterable[int] | None) -> Waiter:
        waiter = Waiter(group, topic, frozenset(queue_ids) if queue_ids is not None else None)
        self._by_topic.setdefault(topic, set()).add(waiter)
        if self._closed:
            waiter.woken.set()
        return waiter

    def unregister(self, waiter: Waiter) -> None:
        waiters = self._by_topic.get(waiter.topic)
        if waiters is not None:
            waiters.discard(waiter)
            if not waiters:
                del self._by_topic[waiter.topic]

    def quiet(self) -> bool:
        """Nobody waits: arrivals need not be reported (``Arrivals.add``)."""
        return not self._by_topic

    def on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """The store's arrival listener: wake every waiter of that topic and queue."""
        waiters = self._by_topic.get(topic)
        if not waiters:
            return
        for waiter in waiters:
            if waiter.covers(queue_id):
                waiter.woken.set()

    def on_state_change(self, group: str, topic: str, queue_id: int) -> None:
        """Wake the group's waiters of that queue: they re-pop (and re-arm their timer)."""
        waiters = self._by_topic.get(topic)
        if not waiters:
            return
        for waiter in waiters:
            if waiter.group == group and waiter.covers(queue_id):
                waiter.woken.set()

    def on_expiry(self, group: str, topic: str, queue_id: int, visible_at_ms: int) -> None:
        """A message of the group became invisible until ``visible_at_ms`` (pop, change):
        wake the group's waiters whose timer is armed for later, so they re-arm."""
        waiters = self._by_topic.get(topic)
        if not waiters:
            return
        for waiter in waiters:
            if (
                waiter.group == group
                and waiter.covers(queue_id)
                and (waiter.wake_at_ms is None or waiter.wake_at_ms > visible_at_ms)
            ):
                waiter.woken.set()

    def close(self) -> None:
        """Shutdown: wake everyone (they answer with what they have)."""
        self._closed = True
        for waiters in self._by_topic.values():
            for waiter in waiters:
                waiter.woken.set()
