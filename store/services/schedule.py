"""ScheduleMessageService: delay-level messages (RocketMQ's ScheduleMessageService).

A message put with ``DELAY`` level L is stored under ``SCHEDULE_TOPIC_XXXX`` queue L-1 (the
facade rewrites it) and its ConsumeQueue unit carries the deliver time as tagsCode. One asyncio
task per level walks its queue from the level's progress offset and, once a unit is due, re-puts
the message to its REAL_TOPIC / REAL_QID without the DELAY property. A level's task sleeps until
the next deliver time (at most ``POLL_INTERVAL_S``) or until dispatch announces a new delayed
message. Progress persists in ``config/delayOffset.json`` (``{"offsetTable": {"1": n}}``, atomic
write + ``.bak``) every ``persist_interval_s`` and at shutdown; after a crash a few messages may
be delivered twice (at-least-once, as RocketMQ).

The service reads and re-puts through the store's ``StoreHost`` (``services/host.py``), which
the facade provides (structurally; nothing here imports it). The level grammar
(``parse_delay_levels``) lives with the settings in ``wharf.store.config``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from wharf.store.codec.parking import unpark
from wharf.store.codec.properties import (
    PROPERTY_DELAY_TIME_LEVEL,
    SCHEDULE_TOPIC,
)
from wharf.store.errors import StoreError, StoreNotWritableError
from wharf.store.model import MessageInput, StoredMessage
from wharf.store.paths import read_json_with_backup_blocking, write_json_atomic_blocking
from wharf.store.services.host import StoreHost

log = logging.getLogger(__name__)

POLL_INTERVAL_S = 0.1  # RocketMQ's DELAY_FOR_A_WHILE
RETRY_AFTER_FAILURE_S = 1.0
BATCH_UNITS = 32


def restore_real_message(msg: StoredMessage) -> tuple[str, int, MessageInput]:
    """The (topic, queue id, message) to re-put for a due delayed message (REAL_TOPIC and
    REAL_QID stay in its properties, as RocketMQ leaves them)."""
    return unpark(msg, drop=(PROPERTY_DELAY_TIME_LEVEL,), keep_destination=True)


class ScheduleMessageService:
    def __init__(
        self,
        host: StoreHost,
        delay_levels_ms: list[int],
        offset_file: Path,
        persist_interval_s: float = 10.0,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.host = host
        self.delay_levels_ms = delay_levels_ms
        self.offset_file = offset_file
        self.persist_interval_s = persist_interval_s
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.offset_table: dict[int, int] = {}
        self.delivered = 0
        self.failures = 0
        self._wakeups = {level: asyncio.Event() for level in range(1, len(delay_levels_ms) + 1)}
        self._tasks: list[asyncio.Task[None]] = []
        self._dirty = False
        self._persist_lock = asyncio.Lock()
        self._persist_task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    # --- persistence ---------------------------------------------------------------------
    def load_blocking(self) -> None:
        data = read_json_with_backup_blocking(self.offset_file)
        table = data.get("offsetTable", {}) if isinstance(data, dict) else {}
        self.offset_table = {
            int(level): int(offset)
            for level, offset in table.items()
            if str(level).isdigit() and 1 <= int(level) <= len(self.delay_levels_ms)
        }

    def encode(self) -> Mapping[str, object]:
        return {"offsetTable": {str(k): v for k, v in sorted(self.offset_table.items())}}

    async def persist(self) -> None:
        # One writer at a time: two would race on the same temporary file.
        async with self._persist_lock:
            self._dirty = False
            await asyncio.to_thread(write_json_atomic_blocking, self.offset_file, self.encode())

    def health(self) -> dict[str, object]:
        return {
            "name": "ScheduleMessageService",
            "running": bool(self._tasks) and any(not task.done() for task in self._tasks),
            "runs": self.delivered,
            "failures": self.failures,
            "last_error": "",
        }

    # --- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        loop = asyncio.get_running_loop()
        for level in range(1, len(self.delay_levels_ms) + 1):
            self._tasks.append(
                loop.create_task(self._run_level(level), name=f"delay-level-{level}")
            )
        self._persist_task = loop.create_task(self._persist_loop(), name="delay-offset-persist")

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # The persist loop is asked to end, not cancelled: a write in flight in its thread
        # completes before the final one starts.
        self._stopping.set()
        if self._persist_task is not None:
            await self._persist_task
        await self.persist()

    def on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Arrival listener: a delayed message was dispatched to level queue_id + 1."""
        if topic == SCHEDULE_TOPIC:
            event = self._wakeups.get(queue_id + 1)
            if event is not None:
                event.set()

    # --- the per-level timer -------------------------------------------------------------
    async def _persist_loop(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.persist_interval_s):
                    await self._stopping.wait()
            if self._dirty and not self._stopping.is_set():
                try:
                    await self.persist()
                except OSError:
                    log.exception("persisting %s failed; will retry", self.offset_file)

    async def _run_level(self, level: int) -> None:
        event = self._wakeups[level]
        while True:
            event.clear()
            try:
                wait_s = await self.deliver_due(level)
            except asyncio.CancelledError:
                raise
            except Exception:
                self.failures += 1
                log.exception("delay level %d: delivery failed; retrying", level)
                wait_s = RETRY_AFTER_FAILURE_S
            if wait_s > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait_s):
                        await event.wait()

    async def deliver_due(self, level: int) -> float:
        """Re-put every due message of ``level``; returns seconds to wait before looking again.
        Due messages of one read are put concurrently, so with SYNC_FLUSH one group commit
        covers the lot instead of one fdatasync per message."""
        host = self.host
        queue_id = level - 1
        while True:
            offset = self.offset_table.get(level, 0)
            min_offset = host.get_min_offset(SCHEDULE_TOPIC, queue_id)
            if offset < min_offset:  # retention removed them: skip ahead, as RocketMQ
                offset = min_offset
                self._set_offset(level, offset)
            units = host.read_consume_queue(SCHEDULE_TOPIC, queue_id, offset, BATCH_UNITS)
            if not units:
                return POLL_INTERVAL_S * 10
            due: list[int] = []
            wait_s = 0.0
            now = self.clock_ms()
            for phy_offset, _size, deliver_ms in units:
                # A deliver time further out than the level allows means the clock went back:
                # deliver now (RocketMQ's correctDeliverTimestamp).
                if deliver_ms > now + self.delay_levels_ms[level - 1]:
                    deliver_ms = now
                if deliver_ms > now:
                    wait_s = min((deliver_ms - now) / 1000, POLL_INTERVAL_S * 10)
                    break
                due.append(phy_offset)
            done = await self._deliver_batch(level, due) if due else 0
            self._set_offset(level, offset + done)
            if done < len(due):
                return RETRY_AFTER_FAILURE_S  # the store refused writes: retry from there
            if wait_s:
                return wait_s

    async def _deliver_batch(self, level: int, phy_offsets: list[int]) -> int:
        """Re-put the messages; returns how many, from the first, are done (delivered, or
        skipped for good). Stops at the first refusal for a full/failed/stopping store."""
        puts = [self._deliver(level, phy_offset) for phy_offset in phy_offsets]
        results = await asyncio.gather(*puts, return_exceptions=True)
        for done, result in enumerate(results):
            if isinstance(result, StoreNotWritableError):
                return done
            if isinstance(result, BaseException):
                raise result
        return len(results)

    async def _deliver(self, level: int, phy_offset: int) -> None:
        msg = self.host.look_message_by_offset(phy_offset)
        if msg is None:
            log.warning("delay level %d: message at %d is gone; skipping it", level, phy_offset)
            return
        try:
            topic, queue_id, real = restore_real_message(msg)
        except ValueError:
            log.exception("delay level %d: cannot restore message; skipping it", level)
            return
        try:
            await self.host.put(topic, queue_id, [real])
            self.delivered += 1
        except StoreNotWritableError:
            raise  # disk full / flush failure / shutdown: the caller keeps the offset
        except StoreError:
            log.exception("delay level %d: re-put of %d refused; skipping it", level, phy_offset)

    def _set_offset(self, level: int, offset: int) -> None:
        self.offset_table[level] = offset
        self._dirty = True
