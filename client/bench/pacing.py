"""Open-loop pacing for the e2e benchmarks (Wharf's and the redis-py peer's alike).

A sleep per message at 10k msg/s is 10k timer wake-ups a second: on this 2-core box that was a
large share of the benchmark client's own CPU, and the loop it kept busy delayed the receive
side it measures. Waking once per millisecond and sending whatever is due keeps the same
average rate (a late wake-up sends more, as an open-loop load generator must), and every
message is still stamped when it is created.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

TICK_S = 0.001
# Sent at the target rate but not recorded: connections, streams and long polls settle first.
WARMUP_S = 0.5


async def due_batches(rate: int, duration_s: float) -> AsyncIterator[int]:
    """Yield how many messages are due since the last yield, for ``duration_s`` seconds."""
    if rate < 1:
        raise ValueError("rate must be at least 1 message per second")
    start = time.perf_counter()
    end = start + duration_s
    sent = 0
    while (now := time.perf_counter()) < end:
        due = int((now - start) * rate) - sent
        if due > 0:
            sent += due
            yield due
        await asyncio.sleep(TICK_S)
