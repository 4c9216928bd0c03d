"""LongPollHolder: woken by arrivals (not timers), bounded, answered at shutdown, no leaks."""

from __future__ import annotations

import asyncio
import time

import pytest
from wharf.broker.core.long_poll import LongPollHolder
from wharf.broker.errors import ResourceExhaustedError, UnavailableError


async def test_parked_pull_wakes_on_arrival_past_its_offset() -> None:
    holder = LongPollHolder(max_parked=10)
    holder.bind_loop(asyncio.get_running_loop())
    started = time.monotonic()
    waiter = asyncio.create_task(holder.park("t", 0, 5, timeout_s=5.0))
    await asyncio.sleep(0.05)
    assert holder.parked_count == 1
    holder.on_arrival("t", 1, 99)  # other queue: no effect
    holder.on_arrival("t", 0, 5)  # not past offset 5 yet
    await asyncio.sleep(0.01)
    assert not waiter.done()
    holder.on_arrival("t", 0, 6)
    assert await waiter is True
    assert time.monotonic() - started < 1.0
    assert holder.parked_count == 0


async def test_parked_pull_times_out_false_and_cleans_up() -> None:
    holder = LongPollHolder(max_parked=10)
    assert await holder.park("t", 0, 0, timeout_s=0.05) is False
    assert holder.parked_count == 0


async def test_cancelled_pull_leaves_nothing_parked() -> None:
    holder = LongPollHolder(max_parked=10)
    waiter = asyncio.create_task(holder.park("t", 0, 0, timeout_s=5.0))
    await asyncio.sleep(0.01)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert holder.parked_count == 0
    holder.on_arrival("t", 0, 1)  # nothing left to wake, no error


async def test_too_many_parked_pulls_is_resource_exhausted() -> None:
    holder = LongPollHolder(max_parked=2)
    waiters = [asyncio.create_task(holder.park("t", q, 0, 5.0)) for q in range(2)]
    await asyncio.sleep(0.01)
    with pytest.raises(ResourceExhaustedError, match="maxParkedPulls"):
        await holder.park("t", 9, 0, 5.0)
    assert holder.close() == 2
    assert [await w for w in waiters] == [False, False]
    assert holder.parked_count == 0
    with pytest.raises(UnavailableError):
        await holder.park("t", 0, 0, 1.0)


async def test_arrival_from_another_thread_is_marshalled_to_the_loop() -> None:
    holder = LongPollHolder(max_parked=10)
    holder.bind_loop(asyncio.get_running_loop())
    waiter = asyncio.create_task(holder.park("t", 0, 0, timeout_s=5.0))
    await asyncio.sleep(0.01)
    await asyncio.to_thread(holder.on_arrival, "t", 0, 1)
    assert await asyncio.wait_for(waiter, 2.0) is True


async def test_a_woken_pull_resumes_on_the_next_loop_turn() -> None:
    """The park awaits its future directly (asyncio.timeout): one loop turn after the arrival
    the pull is running again, not two (wait_for's inner waiter on Python 3.11)."""
    holder = LongPollHolder(max_parked=10)
    holder.bind_loop(asyncio.get_running_loop())
    waiter = asyncio.create_task(holder.park("t", 0, 0, timeout_s=5.0))
    await asyncio.sleep(0)
    assert holder.parked_count == 1
    holder.on_arrival("t", 0, 1)
    await asyncio.sleep(0)  # one loop turn
    assert waiter.done() and waiter.result() is True
    assert holder.parked_count == 0


async def test_an_arrival_answers_at_most_max_in_place_pulls_and_wakes_the_rest() -> None:
    """Many pulls parked on one queue: the arrival's callback answers a bounded number in
    place (each reply is loop time) and wakes the others to read for themselves."""
    from wharf.broker.core.long_poll import MAX_IN_PLACE

    holder = LongPollHolder(max_parked=100)
    holder.bind_loop(asyncio.get_running_loop())
    calls: list[int] = []

    def answer(n: int) -> str:
        calls.append(n)
        return f"answer {n}"

    count = MAX_IN_PLACE + 5
    waiters = [
        asyncio.create_task(holder.park("t", 0, 0, 5.0, lambda _max, n=n: answer(n)))
        for n in range(count)
    ]
    await asyncio.sleep(0.01)
    holder.on_arrival("t", 0, 1)
    results = await asyncio.gather(*waiters)
    assert len(calls) == MAX_IN_PLACE
    assert results.count(True) == count - MAX_IN_PLACE
    assert sorted(r for r in results if r is not True) == sorted(f"answer {n}" for n in calls)
    assert holder.parked_count == 0
