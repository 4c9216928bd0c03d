"""The store services' loops end when stopped even if their wake-up event is set in the same
loop step as the cancel. Python 3.11's ``asyncio.wait_for`` returned the event's result then
and dropped the cancel: the loop went on and ``stop()`` awaited it forever (CI 2026-11-27, the
timer service at a store's shutdown; the code now waits with ``asyncio.timeout``, and ruff's
TID251 bans ``wait_for`` outside tests)."""

from __future__ import annotations

import asyncio

import pytest
from wharf.store.codec import SCHEDULE_TOPIC
from wharf.store.codec.properties import TIMER_TOPIC
from wharf.store.config import parse_delay_levels
from wharf.store.message_store import MessageStore
from wharf.store.services.ledger import checkpoint_loop


async def test_a_checkpoint_loop_cancelled_as_its_dirty_event_is_set_ends() -> None:
    dirty = asyncio.Event()
    writes: list[int] = []

    async def write() -> None:
        writes.append(1)

    task = asyncio.create_task(checkpoint_loop(write, dirty, 0.0, lambda: False, "test", 30.0))
    await asyncio.sleep(0.01)  # waiting on ``dirty``
    dirty.set()
    task.cancel()  # the same step: the event's waiter is done before the cancel lands
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await task
    assert writes == []  # cancelled before the write, not after it


async def test_the_timer_service_stops_when_a_wakeup_meets_the_stop(store: MessageStore) -> None:
    timer = store.timer
    await asyncio.sleep(0.05)  # both loops idle, waiting on their events
    timer.on_arrival(TIMER_TOPIC, 0, 1)  # sets the delivery loop's wake-up event
    async with asyncio.timeout(5):  # the bug: stop() never returned
        await timer.stop()


async def test_the_schedule_service_stops_when_wakeups_meet_the_stop(
    store: MessageStore,
) -> None:
    schedule = store.insides.schedule_service
    assert schedule is not None
    await asyncio.sleep(0.05)
    for queue_id in range(len(parse_delay_levels(store.config.message_delay_level))):
        schedule.on_arrival(SCHEDULE_TOPIC, queue_id, 1)  # every level's wake-up event
    async with asyncio.timeout(5):
        await schedule.stop()
