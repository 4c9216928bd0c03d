"""TimerMessageService: delivery at any time (RocketMQ 5's timer, RIP-43), durable across
restarts and kill -9, each due message delivered once.

WHERE TIMERS LIVE. A message whose ``TIMER_DELIVER_MS`` (or ``TIMER_DELAY_SEC``) lies ahead is
stored under ``rmq_sys_wheel_timer`` queue 0 (``to_timer_topic``;
the facade rewrites it, the destination kept in REAL_TOPIC / REAL_QID as for delay levels).
A recall writes a cancel marker to queue 1 naming the timer's queue offset and unique key.
The commit log is the only durable record of timers, deliveries and cancels: this service has
no log of its own, only a small checkpoint.

IN MEMORY. The pending timers (timer queue offset -> deliver ms and record offset) in an
``OffsetLedger`` (``services/ledger.py``: open and closed offsets, watermark, checkpoint), a heap
by time (what is due next), and the cursor of the cancel queue.

DELIVERY. One task sleeps until the earliest deliver time (woken when an earlier timer
arrives); due timers are re-put in time order, grouped by destination queue into one put each
(thousands due in one second cost one put per queue, not one per message). Each copy carries
``TIMER_QUEUE_OFFSET``: the copy itself is the record that the timer was delivered.

CHECKPOINT (``config/timerCheckpoint.json``, the ledger's, after a burst of deliveries or
cancels, at most every ``checkpoint_interval_s``; the cancel cursor rides in it). START (of a
master, or when a replica is promoted: only a master delivers): load it; walk the commit log
from its P for copies (deliveries after the checkpoint); read queue 1 from its cursor (cancels
after it); read queue 0 from the watermark, skipping closed offsets.
So after kill -9 a delivered timer is never delivered again and a pending one is delivered
when due -- at once if its time passed while the broker was down.

LIMITS. ``timerMaxDelaySec`` (3 days) bounds how far ahead a timer may be (the facade refuses
later ones). Start-up reads every pending timer's record once (~10 us each: 100k pending timers
~1 s). A 3-day timer in front of a million short ones keeps their offsets until it is due (the
ledger's bound).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from wharf.store.codec.parking import TIMER_QUEUE, unpark
from wharf.store.codec.properties import (
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_QUEUE_OFFSET,
    TIMER_TOPIC,
)
from wharf.store.errors import (
    InvalidMessageError,
    StoreError,
    StoreNotWritableError,
    StoreShutDownError,
)
from wharf.store.model import MessageInput
from wharf.store.services.host import StoreHost
from wharf.store.services.ledger import OffsetLedger, checkpoint_loop

log = logging.getLogger(__name__)

CANCEL_QUEUE = 1
READ_BATCH = 256  # units read per step when loading or following a queue
RETRY_AFTER_FAILURE_S = 1.0
IDLE_WAIT_S = 60.0  # nothing pending: sleep until an arrival wakes the task


def cancel_marker(timer_offset: int, unique_key: str) -> MessageInput:
    """The queue-1 record of a recall: which timer (offset and unique key) is cancelled."""
    return MessageInput(
        body=b"recall",  # a record needs a body; the properties say it all
        properties={
            PROPERTY_TIMER_DEL_UNIQKEY: unique_key,
            PROPERTY_TIMER_QUEUE_OFFSET: str(timer_offset),
        },
    )


class TimerMessageService:
    def __init__(
        self,
        host: StoreHost,
        checkpoint_file: Path,
        checkpoint_interval_s: float = 0.2,
        clock_ms: Callable[[], int] | None = None,
        max_put_bytes: int = 4 << 20,
    ) -> None:
        self.host = host
        # A put must fit a commit log segment: due timers of one queue go out in chunks.
        self.max_put_bytes = max_put_bytes
        self.checkpoint_file = checkpoint_file
        self.checkpoint_interval_s = checkpoint_interval_s
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        # pending timers: timer offset -> (deliver ms, commit log offset); closed by copies
        self.ledger: OffsetLedger[tuple[int, int]] = OffsetLedger(checkpoint_file)
        self.pending = self.ledger.open
        self._by_time: list[tuple[int, int]] = []  # (deliver ms, offset), lazily pruned
        self._cancel_cursor = 0  # queue 1 units below it are applied
        self.behind = False  # the last follow stopped at its limit
        self._wakeup = asyncio.Event()
        self._dirty = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self.delivered = 0
        self.cancelled = 0
        self.failures = 0
        self.last_error = ""

    # --- start / stop ---------------------------------------------------------------------
    def load_blocking(self, marks_since: Callable[[int, str], list[int]]) -> None:
        """Checkpoint + the commit log since it + both queues since their cursors (in a
        thread at start, before anything is put). ``marks_since(offset, prop)``: the integer
        value of property ``prop`` in every record of the log from ``offset`` on."""
        ledger = self.ledger
        ledger.load_blocking()
        self._cancel_cursor = int(str(ledger.extra.get("cancelCursor", 0)))
        ledger.close_marked(marks_since(ledger.log_offset, PROPERTY_TIMER_QUEUE_OFFSET))
        self._follow_cancels()
        self._follow_timers()

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._run(), name="timer-delivery"),
            loop.create_task(
                checkpoint_loop(
                    self.checkpoint,
                    self._dirty,
                    self.checkpoint_interval_s,
                    self._log_moved,
                    "timer",
                ),
                name="timer-checkpoint",
            ),
        ]

    async def stop(self) -> None:
        self._stopping = True
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if tasks:  # never started (a replica's): the ledger does not describe this log
            await self.checkpoint()

    def on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Arrival listener: new timers or cancel markers were dispatched."""
        if topic == TIMER_TOPIC:
            self._wakeup.set()

    def health(self) -> dict[str, object]:
        return {
            "name": "TimerMessageService",
            "running": any(not t.done() for t in self._tasks),
            "runs": self.delivered,
            "failures": self.failures,
            "last_error": self.last_error,
        }

    def stats(self) -> dict[str, int]:
        return {
            "pending": len(self.pending),
            "delivered_total": self.delivered,
            "cancelled_total": self.cancelled,
        }

    # --- recall ---------------------------------------------------------------------------
    async def cancel(self, timer_offset: int, unique_key: str, topic: str | None = None) -> None:
        """Recall a pending timer (of ``topic`` when given): it is never delivered.
        InvalidMessageError when no pending timer has that offset, unique key and topic
        (delivered, cancelled, or not a timer). Returns once the cancel marker is stored
        (durable per the flush mode)."""
        if timer_offset >= self.ledger.cursor:  # a recall right after its send: read it first
            await self.host.wait_dispatched()
            self._follow_timers()
        entry = self.pending.get(timer_offset)
        msg = self.host.look_message_by_offset(entry[1]) if entry else None
        if (
            msg is None
            or msg.unique_id != unique_key
            or (topic is not None and msg.properties.get(PROPERTY_REAL_TOPIC) != topic)
        ):
            raise InvalidMessageError(
                f"no pending timer message {unique_key!r} at timer offset {timer_offset}: "
                "it was delivered or recalled already, or the handle is not from this broker"
            )
        self._finish(timer_offset)  # before the put: a due delivery must not race it
        self.cancelled += 1
        await self.host.put(TIMER_TOPIC, CANCEL_QUEUE, [cancel_marker(timer_offset, unique_key)])
        self._dirty.set()

    # --- following the queues -------------------------------------------------------------
    def _follow_timers(self, limit: int | None = None) -> bool:
        """Read queue 0 units past the cursor into ``pending`` (all, or at most ``limit``:
        ``self.behind`` says whether more remain); True if an earlier deliver time than the
        heap's head arrived."""
        earlier = False
        read = 0
        self.behind = False
        while True:
            if limit is not None and read >= limit:
                self.behind = True
                return earlier
            ledger = self.ledger
            units = self.host.read_consume_queue(
                TIMER_TOPIC, TIMER_QUEUE, ledger.cursor, READ_BATCH
            )
            if not units:
                return earlier
            read += len(units)
            for phy_offset, _size, _code in units:
                offset = ledger.cursor
                ledger.cursor += 1
                if offset in ledger.closed:
                    continue
                msg = self.host.look_message_by_offset(phy_offset)
                text = msg.properties.get(PROPERTY_TIMER_DELIVER_MS, "") if msg else ""
                try:
                    # A negative time (stored before past times were clamped) is simply due.
                    deliver_ms = int(text)
                except ValueError:
                    log.warning("timer offset %d has no readable delivery time; dropped", offset)
                    ledger.close(offset)
                    continue
                head = self._by_time[0][0] if self._by_time else None
                earlier |= head is None or deliver_ms < head
                ledger.add(offset, (deliver_ms, phy_offset))
                heapq.heappush(self._by_time, (deliver_ms, offset))

    def _follow_cancels(self) -> None:
        while True:
            units = self.host.read_consume_queue(
                TIMER_TOPIC, CANCEL_QUEUE, self._cancel_cursor, READ_BATCH
            )
            if not units:
                return
            for phy_offset, _size, _code in units:
                self._cancel_cursor += 1
                msg = self.host.look_message_by_offset(phy_offset)
                text = msg.properties.get(PROPERTY_TIMER_QUEUE_OFFSET, "") if msg else ""
                if text.isdigit():
                    target = int(text)
                    if target in self.pending or target >= self.ledger.cursor:
                        self._finish(target)

    def _finish(self, offset: int) -> None:
        self.ledger.close(offset)

    # --- delivery -------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            self._wakeup.clear()
            try:
                self._follow_cancels()
                # ~8 us per unit: a burst of timers is read in ~16 ms slices, delivering
                # what is due in between.
                self._follow_timers(READ_BATCH * 8)
                wait_s = await self.deliver_due()
                if self.behind:
                    wait_s = 0.0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.failures += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("timer delivery failed; retrying")
                wait_s = RETRY_AFTER_FAILURE_S
            if wait_s > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait_s):
                        await self._wakeup.wait()
            else:
                await asyncio.sleep(0)

    async def deliver_due(self) -> float:
        """Deliver every due timer; seconds until the next one (IDLE_WAIT_S when none)."""
        now = self.clock_ms()
        due: list[int] = []
        heap = self._by_time
        pending = self.pending
        while heap and (heap[0][0] <= now or heap[0][1] not in pending):
            deliver_ms, offset = heapq.heappop(heap)
            entry = pending.get(offset)
            if entry is not None and entry[0] == deliver_ms:
                due.append(offset)
        if due:
            delivered = await self._deliver(due)
            self._dirty.set()
            if not delivered:
                return RETRY_AFTER_FAILURE_S
        if not heap:
            return IDLE_WAIT_S
        return max(heap[0][0] - self.clock_ms(), 0) / 1000

    async def _deliver(self, offsets: list[int]) -> bool:
        """Re-put the due timers, one put per destination queue, in time order. False when the
        store refused writes (disk full, flush failure, stopping): the rest stay pending and
        are retried after RETRY_AFTER_FAILURE_S, with one log line per episode."""
        groups: dict[tuple[str, int], list[tuple[int, MessageInput]]] = {}
        for offset in offsets:
            msg = self.host.look_message_by_offset(self.pending[offset][1])
            try:
                if msg is None:
                    raise ValueError("its record is gone (retention)")
                topic, queue_id, copy = unpark(msg, {PROPERTY_TIMER_QUEUE_OFFSET: str(offset)})
            except ValueError as exc:
                log.warning("timer offset %d cannot be delivered: %s; dropped", offset, exc)
                self._finish(offset)
                continue
            groups.setdefault((topic, queue_id), []).append((offset, copy))
        failed: BaseException | None = None
        for (topic, queue_id), items in self._chunks(groups):
            if failed is not None:
                self._retry_later(offset for offset, _ in items)
                continue
            write_id = self.ledger.begin_write(self.host.commit_log_end())
            try:
                await self.host.put(topic, queue_id, [copy for _, copy in items])
            except StoreNotWritableError as exc:
                failed = exc
                self._retry_later(offset for offset, _ in items)
                if not self.last_error:
                    # A stop is no fault: its timers stay pending, and the next start delivers
                    # them (a WARNING at every normal shutdown that met a due timer misled).
                    stopping = isinstance(exc, StoreShutDownError)
                    log.log(
                        logging.INFO if stopping else logging.WARNING,
                        "timer delivery paused: %s; %s", exc,
                        "pending timers are delivered after the next start" if stopping
                        else f"retrying every {RETRY_AFTER_FAILURE_S:.0f} s",
                    )  # fmt: skip
                self.last_error = f"{type(exc).__name__}: {exc}"
                continue
            except StoreError as exc:  # refused for good (topic name, size): not retried
                log.warning("timer messages for %s/%d refused: %s; dropped", topic, queue_id, exc)
            finally:
                self.ledger.end_write(write_id)
            for offset, _ in items:
                if offset in self.pending:
                    self._finish(offset)
                    self.delivered += 1
        if failed is None:
            self.last_error = ""
        return failed is None

    def _chunks(
        self, groups: dict[tuple[str, int], list[tuple[int, MessageInput]]]
    ) -> Iterable[tuple[tuple[str, int], list[tuple[int, MessageInput]]]]:
        """Each destination's timers in puts of at most ``max_put_bytes`` (bodies and
        properties plus ~100 bytes of record header each) and 1024 messages."""
        for key, items in groups.items():
            chunk: list[tuple[int, MessageInput]] = []
            size = 0
            for item in items:
                m = item[1]
                cost = 100 + len(m.body) + sum(len(k) + len(v) + 2 for k, v in m.properties.items())
                if chunk and (size + cost > self.max_put_bytes or len(chunk) >= 1024):
                    yield key, chunk
                    chunk, size = [], 0
                chunk.append(item)
                size += cost
            if chunk:
                yield key, chunk

    def _retry_later(self, offsets: Iterable[int]) -> None:
        for offset in offsets:
            entry = self.pending.get(offset)
            if entry is not None:
                heapq.heappush(self._by_time, (entry[0], offset))

    # --- checkpoint -----------------------------------------------------------------------
    def _log_moved(self) -> bool:
        return self.host.commit_log_end() != self.ledger.log_offset

    async def checkpoint(self) -> None:
        """Write W, done ranges >= W, cursors and P (see the module docstring)."""
        self.ledger.extra["cancelCursor"] = self._cancel_cursor
        payload = self.ledger.snapshot(self.host.commit_log_end())
        await asyncio.to_thread(self.ledger.write_blocking, payload)
