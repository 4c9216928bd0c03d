"""The facade against a plain-list model: random puts, pulls (with and without tag filters),
clean restarts and concurrent producers, checked message by message."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from wharf.store.config import SYNC_FLUSH
from wharf.store.message_store import MessageStore
from wharf.store.model import GetStatus
from wharf.store.read.filter import parse_tag_expression

from tests.store.helpers import msg, small_config

TAGS = ["a", "b", "c", ""]
FILTERS = [None, "a", "a || b", "c"]
QUEUES = 3


def _check_pull(
    store: MessageStore, model: list[tuple[bytes, str]], queue_id: int, rng: random.Random
) -> None:
    offset = rng.randint(0, len(model) + 2)
    count = rng.randint(1, 10)
    expression = rng.choice(FILTERS)
    got = store.get_messages("T", queue_id, offset, count, parse_tag_expression(expression))
    assert (got.min_offset, got.max_offset) == (0, len(model))
    if not model:
        assert got.status is GetStatus.NO_MESSAGE_IN_QUEUE
        return
    if offset == len(model):
        assert got.status is GetStatus.OFFSET_OVERFLOW_ONE
        return
    if offset > len(model):
        assert got.status is GetStatus.OFFSET_OVERFLOW_BADLY
        return
    wanted = None if expression is None else set(parse_tag_expression(expression).tags)
    scanned = model[offset : got.next_begin_offset]
    matching = [body for body, tag in scanned if wanted is None or tag in wanted]
    # Everything scanned that matches is returned, in order, and nothing else.
    assert [m.body for m in got.messages] == matching
    assert [m.queue_offset for m in got.messages] == [
        offset + i for i, (_, tag) in enumerate(scanned) if wanted is None or tag in wanted
    ]
    assert len(got.messages) <= count
    assert got.status is (GetStatus.FOUND if matching else GetStatus.NO_MATCHED_MESSAGE)
    if wanted is None:
        assert got.next_begin_offset == min(offset + count, len(model))


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_random_operations_match_the_model(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    models: list[list[tuple[bytes, str]]] = [[] for _ in range(QUEUES)]
    store = MessageStore(small_config(tmp_path))
    await store.start()
    try:
        for step in range(120):
            action = rng.random()
            queue_id = rng.randrange(QUEUES)
            if action < 0.5:
                batch = [
                    (f"{seed}-{step}-{i}".encode(), rng.choice(TAGS))
                    for i in range(rng.randint(1, 5))
                ]
                result = await store.put(
                    "T", queue_id, [msg(body, tags=tag) for body, tag in batch]
                )
                assert result.append.first_queue_offset == len(models[queue_id])
                models[queue_id].extend(batch)
                assert await store.wait_dispatched()
            elif action < 0.95:
                _check_pull(store, models[queue_id], queue_id, rng)
            else:
                await store.shutdown()
                store = MessageStore(small_config(tmp_path))
                await store.start()
        for queue_id in range(QUEUES):
            bodies = [m.body for m in store.get_messages("T", queue_id, 0, 10_000).messages]
            assert bodies == [body for body, _ in models[queue_id]]
    finally:
        await store.shutdown()


async def test_concurrent_producers_get_distinct_consecutive_offsets(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path, flush_disk_type=SYNC_FLUSH))
    await store.start()
    arrivals: list[int] = []
    store.add_arrival_listener(lambda topic, queue_id, max_offset: arrivals.append(max_offset))
    try:

        async def producer(name: int) -> list[int]:
            firsts = []
            for i in range(25):
                result = await store.put("T", 0, [msg(f"{name}-{i}-{j}") for j in range(3)])
                firsts.append(result.append.first_queue_offset)
            return firsts

        results = await asyncio.gather(*(producer(n) for n in range(8)))
        firsts = sorted(f for batch in results for f in batch)
        assert firsts == list(range(0, 8 * 25 * 3, 3))
        assert await store.wait_dispatched()
        got = store.get_messages("T", 0, 0, 10_000)
        assert [m.queue_offset for m in got.messages] == list(range(600))
        # Each producer's messages appear in its own order.
        for name in range(8):
            mine = [m.body for m in got.messages if m.body.startswith(f"{name}-".encode())]
            assert mine == [f"{name}-{i}-{j}".encode() for i in range(25) for j in range(3)]
        assert arrivals == sorted(arrivals) and arrivals[-1] == 600
    finally:
        await store.shutdown()
