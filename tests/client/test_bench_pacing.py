"""The e2e benchmarks' open-loop pacing: the rate holds whatever the wake-up lateness."""

from __future__ import annotations

import pytest
from wharf.client.bench import pacing


class FakeClock:
    """perf_counter and asyncio.sleep in one: every sleep advances time by ``step_s``."""

    def __init__(self, step_s: float) -> None:
        self.now = 100.0
        self.step_s = step_s
        self.sleeps = 0

    def perf_counter(self) -> float:
        return self.now

    async def sleep(self, _seconds: float) -> None:
        self.sleeps += 1
        self.now += self.step_s


@pytest.mark.parametrize("step_s", [0.001, 0.0037, 0.05])  # on time, late, very late wake-ups
async def test_due_batches_keep_the_rate_and_catch_up(
    monkeypatch: pytest.MonkeyPatch, step_s: float
) -> None:
    clock = FakeClock(step_s)
    monkeypatch.setattr(pacing.time, "perf_counter", clock.perf_counter)
    monkeypatch.setattr(pacing.asyncio, "sleep", clock.sleep)
    batches, yielded_at = [], []
    async for due in pacing.due_batches(10_000, 1.0):
        batches.append(due)
        yielded_at.append(clock.now)
    # Every message due by the last tick is sent, none early: int(elapsed * rate) in total.
    assert sum(batches) == int((yielded_at[-1] - 100.0) * 10_000)
    assert sum(batches) > 10_000 * (1.0 - step_s) - 1
    assert all(due > 0 for due in batches)
    # One wake-up per tick, not one per message.
    assert clock.sleeps <= 1.0 / step_s + 1


async def test_due_batches_refuse_a_rate_below_one() -> None:
    with pytest.raises(ValueError, match="rate"):
        async for _ in pacing.due_batches(0, 1.0):
            pass
