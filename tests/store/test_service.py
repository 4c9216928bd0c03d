"""The background-service base (store/service.py): back-off and logging of repeated failures."""

from __future__ import annotations

import asyncio
import logging

import pytest
from wharf.store.service import Service


class Flaky(Service):
    def __init__(self, failures: int) -> None:
        super().__init__("Flaky", interval_s=0.001)
        self.left = failures
        self.calls = 0

    async def run_once(self) -> None:
        self.calls += 1
        if self.left:
            self.left -= 1
            raise OSError(24, "Too many open files")


async def test_repeated_failures_back_off_and_log_one_traceback_then_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = Flaky(failures=10**6)
    with caplog.at_level(logging.INFO, logger="wharf.store.service"):
        service.start()
        for _ in range(200):  # woken as often as a busy dispatch would be
            service.wakeup()
            await asyncio.sleep(0.002)
        service.left = 0  # the cause goes away: the next run succeeds
        for _ in range(300):
            if service.runs:
                break
            await asyncio.sleep(0.01)
        await service.stop()
    # ~0.4 s of failing with a 1 ms interval: doubling back-off allows ~10 runs, not ~400.
    assert 3 <= service.failures <= 15, service.failures
    failed = [r for r in caplog.records if "Flaky failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is not None
    assert any("Flaky recovered after" in r.getMessage() for r in caplog.records)
    assert service.consecutive_failures == 0
