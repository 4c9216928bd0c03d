"""The daemon's collector policy (broker/gc_policy.py): a long full collection is
followed by a freeze of its survivors; a short one, or a young one, is not; garbage made
after the freeze is still collected."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest
from wharf.broker.gc_policy import FreezeSurvivors


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """Only the tests' own collections run (an automatic one would be counted too), and
    whatever a test freezes goes back to the collector (the worker process goes on)."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()


async def _policy(after_ms: float) -> FreezeSurvivors:
    policy = FreezeSurvivors(asyncio.get_running_loop(), after_ms=after_ms)
    policy.install()
    return policy


async def test_a_long_full_collection_freezes_its_survivors_and_later_garbage_still_goes(
    unfrozen: None,
) -> None:
    policy = await _policy(after_ms=0.0)  # every full collection counts as long
    try:
        kept = [[i] for i in range(20_000)]  # long-lived state, as new queues are
        before = gc.get_freeze_count()
        gc.collect(1)  # a young collection: nothing
        await asyncio.sleep(0)
        assert policy.freezes == 0 and gc.get_freeze_count() == before
        gc.collect()
        await asyncio.sleep(0)  # the freeze runs on the loop, after the collection
        assert policy.freezes == 1
        assert gc.get_freeze_count() >= before + len(kept)
        # A cycle made after the freeze is collected as before.
        policy.remove()
        cycle = _Node()
        gone = weakref.ref(cycle)
        del cycle
        gc.collect()
        assert gone() is None
    finally:
        policy.remove()


async def test_a_short_full_collection_freezes_nothing(unfrozen: None) -> None:
    policy = await _policy(after_ms=60_000.0)
    try:
        before = gc.get_freeze_count()
        gc.collect()
        await asyncio.sleep(0)
        assert policy.freezes == 0 and gc.get_freeze_count() == before
    finally:
        policy.remove()
