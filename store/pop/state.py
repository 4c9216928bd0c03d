"""The pop state of every (group, topic, queue), in memory, changed only by journal records.

Per queue (``QueueState``):

- ``pop_offset``: every offset below it is finished (acked, dead-lettered, filtered out, or
  below the queue's minimum offset);
- ``in_flight``: offset -> ``InFlight`` (visible_at_ms, attempt, handle nonce) for messages
  handed out and not finished; a message is visible again once ``visible_at_ms`` has passed;
- ``acked``: finished offsets at or above ``pop_offset`` (acked out of order);
- ``high``: every offset at or above it was never handed out nor finished. Offsets in
  ``[pop_offset, high)`` that are neither in flight nor finished are "gaps": messages a FIFO
  pop passed over because their message group was busy; they are handed out like new ones.

RESET drops a queue's state (its topic or group was deleted: a re-created one starts over).

``PopState.apply(record)`` is the ONLY way the state changes: the service builds a record,
applies it and appends it to the journal; recovery applies the journal's records in order, so
the state after a restart is the state that was journaled. ``snapshot_records()`` is the
state as records (compaction writes them as a new journal): DONE [0, pop_offset), DONE for
each run of acked offsets, POP for each message in flight.

Sans-IO; ``message_group`` of an entry is known in memory only (None after a restart: the
service reads the message when FIFO needs it).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass

from wharf.store.codec.layout import (
    POP_RECORD_ACK,
    POP_RECORD_CHANGE,
    POP_RECORD_DONE,
    POP_RECORD_POP,
    POP_RECORD_RESET,
)
from wharf.store.pop.records import PopRecord

QueueKey = tuple[str, str, int]  # (group, topic, queue id)


@dataclass(slots=True)
class InFlight:
    visible_at_ms: int
    attempt: int
    nonce: int
    message_group: str | None = None  # None: not known (replayed); "" = no message group
    dead_lettering: bool = False  # a DLQ copy is being written: not handed out meanwhile


class QueueState:
    __slots__ = ("acked", "expiry", "high", "in_flight", "pop_offset")

    def __init__(self) -> None:
        self.pop_offset = 0
        self.high = 0
        self.in_flight: dict[int, InFlight] = {}
        self.acked: set[int] = set()
        # (visible_at_ms, offset, nonce), lazily pruned: an item is live while the entry at
        # ``offset`` still has that nonce and visible time.
        self.expiry: list[tuple[int, int, int]] = []

    # --- changes (through PopState.apply only) --------------------------------------------
    def deliver(self, offset: int, visible_at_ms: int, attempt: int, nonce: int) -> None:
        if offset < self.pop_offset or offset in self.acked:
            return  # finished already (a replayed POP before its DONE range was compacted)
        self.in_flight[offset] = InFlight(visible_at_ms, attempt, nonce)
        heapq.heappush(self.expiry, (visible_at_ms, offset, nonce))
        if offset >= self.high:
            self.high = offset + 1

    def change(self, offset: int, visible_at_ms: int, nonce: int) -> None:
        entry = self.in_flight.get(offset)
        if entry is None:
            return
        entry.visible_at_ms = visible_at_ms
        entry.nonce = nonce
        heapq.heappush(self.expiry, (visible_at_ms, offset, nonce))

    def finish(self, offset: int, count: int) -> None:
        end = offset + count
        if end > self.high:
            self.high = end
        if offset <= self.pop_offset:
            if end > self.pop_offset:
                self._raise_floor(end)
        elif count <= 4096:
            for finished in range(offset, end):
                self.in_flight.pop(finished, None)
                self.acked.add(finished)
        else:  # a huge range above the pop offset: touch only what exists
            for finished in [o for o in self.in_flight if offset <= o < end]:
                del self.in_flight[finished]
            self.acked.update(range(offset, end))
        while self.pop_offset in self.acked:
            self.acked.discard(self.pop_offset)
            self.pop_offset += 1

    def _raise_floor(self, floor: int) -> None:
        """Everything below ``floor`` is finished: cost O(min(floor - pop offset, entries))."""
        old, self.pop_offset = self.pop_offset, floor
        in_flight, acked = self.in_flight, self.acked
        if not in_flight and not acked:
            return
        if floor - old <= len(in_flight) + len(acked):
            for finished in range(old, floor):
                in_flight.pop(finished, None)
                acked.discard(finished)
        else:
            for finished in [o for o in in_flight if o < floor]:
                del in_flight[finished]
            if acked:
                self.acked = {o for o in acked if o >= floor}

    # --- queries ----------------------------------------------------------------------------
    def live(self, item: tuple[int, int, int]) -> InFlight | None:
        visible_at, offset, nonce = item
        entry = self.in_flight.get(offset)
        if entry is None or entry.nonce != nonce or entry.visible_at_ms != visible_at:
            return None
        return entry

    def next_visible_at(self) -> int | None:
        """The earliest visible time of a message in flight (stale heap items pruned)."""
        heap = self.expiry
        while heap and self.live(heap[0]) is None:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def expired(self, now_ms: int, limit: int) -> list[int]:
        """Up to ``limit`` offsets in flight whose invisible time has passed (the earliest
        expiries first), returned ascending."""
        found: list[int] = []
        heap = self.expiry
        kept = []
        while heap and heap[0][0] <= now_ms and len(found) < limit:
            item = heapq.heappop(heap)
            if self.live(item) is not None:
                found.append(item[1])
                kept.append(item)
        for item in kept:  # still in flight until redelivered (a new item then)
            heapq.heappush(heap, item)
        found.sort()
        return found

    def gaps(self) -> Iterator[int]:
        """Offsets in [pop_offset, high) neither in flight nor finished, ascending."""
        if not self.has_gaps:
            return
        in_flight, acked = self.in_flight, self.acked
        for offset in range(self.pop_offset, self.high):
            if offset not in in_flight and offset not in acked:
                yield offset

    @property
    def has_gaps(self) -> bool:
        return self.high - self.pop_offset != len(self.in_flight) + len(self.acked)

    @property
    def window(self) -> int:
        return self.high - self.pop_offset


class PopState:
    """Every queue's state, keyed by (group, topic, queue id)."""

    def __init__(self) -> None:
        self.queues: dict[QueueKey, QueueState] = {}

    def queue(self, key: QueueKey) -> QueueState:
        state = self.queues.get(key)
        if state is None:
            state = self.queues[key] = QueueState()
        return state

    def apply(self, record: PopRecord) -> None:
        state = self.queue((record.group, record.topic, record.queue_id))
        kind = record.kind
        if kind == POP_RECORD_POP:
            state.deliver(record.queue_offset, record.visible_at, record.attempt, record.nonce)
        elif kind == POP_RECORD_ACK:
            entry = state.in_flight.get(record.queue_offset)
            if entry is not None and entry.nonce == record.nonce:
                state.finish(record.queue_offset, 1)
        elif kind == POP_RECORD_CHANGE:
            state.change(record.queue_offset, record.visible_at, record.nonce)
        elif kind == POP_RECORD_DONE:
            state.finish(record.queue_offset, record.span)
        elif kind == POP_RECORD_RESET:
            del self.queues[(record.group, record.topic, record.queue_id)]

    def snapshot_records(self) -> Iterator[PopRecord]:
        """The whole state as records: applied to an empty state they rebuild it."""
        for (group, topic, queue_id), state in self.queues.items():
            if state.pop_offset == 0 and not state.in_flight and not state.acked:
                continue
            if state.pop_offset > 0:
                yield PopRecord(POP_RECORD_DONE, group, topic, queue_id, 0, state.pop_offset)
            run_start = run_end = -1
            for offset in sorted(state.acked):
                if offset == run_end:
                    run_end += 1
                    continue
                if run_start >= 0:
                    yield PopRecord(
                        POP_RECORD_DONE, group, topic, queue_id, run_start, run_end - run_start
                    )
                run_start, run_end = offset, offset + 1
            if run_start >= 0:
                yield PopRecord(
                    POP_RECORD_DONE, group, topic, queue_id, run_start, run_end - run_start
                )
            for offset, entry in state.in_flight.items():
                yield PopRecord(
                    POP_RECORD_POP,
                    group,
                    topic,
                    queue_id,
                    offset,
                    1,
                    entry.visible_at_ms,
                    entry.nonce,
                    entry.attempt,
                )
