"""Per-queue bookkeeping of messages pulled but not yet consumed.

The committable offset is the smallest offset still in flight (or, with nothing in flight,
the next offset to pull): committing it never skips an unprocessed message, which is what
makes the push consumer at-least-once even though handlers finish out of order.
"""

from __future__ import annotations

import asyncio
import collections

from wharf.client.message import ReceivedMessage


class ProcessQueue:
    def __init__(self, next_offset: int) -> None:
        # Offsets arrive in increasing order, so the first key is always the minimum.
        self._in_flight: collections.OrderedDict[int, ReceivedMessage] = collections.OrderedDict()
        self.next_offset = next_offset
        self.dropped = False
        self._space = asyncio.Event()
        self._space.set()
        self._empty = asyncio.Event()
        self._empty.set()

    def __len__(self) -> int:
        return len(self._in_flight)

    def add(self, messages: list[ReceivedMessage], next_offset: int) -> None:
        for message in messages:
            self._in_flight[message.queue_offset] = message
        if self._in_flight:
            self._empty.clear()
        self.next_offset = next_offset

    def done(self, queue_offset: int, limit: int) -> None:
        self._in_flight.pop(queue_offset, None)
        if len(self._in_flight) < limit:
            self._space.set()
        if not self._in_flight:
            self._empty.set()

    def committable_offset(self) -> int:
        if self._in_flight:
            return next(iter(self._in_flight))
        return self.next_offset

    async def wait_for_space(self, limit: int) -> None:
        """Flow control: block the pull loop while ``limit`` messages are unprocessed."""
        while len(self._in_flight) >= limit:
            self._space.clear()
            await self._space.wait()

    async def wait_empty(self) -> None:
        await self._empty.wait()
