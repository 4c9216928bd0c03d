"""AdminCore's topic creation: a batch answers every topic in its slot and waits for the disk
once; a single creation raises the refusal; a failed write is the error of what the call made."""

from __future__ import annotations

import pytest
from wharf.broker.core.admin import TopicSpec
from wharf.broker.errors import AlreadyExistsError, InvalidArgumentError

from tests.inproc import InProcFactory


async def test_a_batch_waits_for_the_disk_once_and_keeps_each_refusal(
    inproc_broker: InProcFactory,
) -> None:
    broker = await inproc_broker()
    ctx = broker.controller.ctx
    assert ctx is not None
    waits = 0
    durable = ctx.topics.durable

    async def counted() -> None:
        nonlocal waits
        waits += 1
        await durable()

    ctx.topics.durable = counted
    await ctx.admin.create_topic("first", 2, 2, 6, {})
    assert waits == 1
    with pytest.raises(AlreadyExistsError):
        await ctx.admin.create_topic("first", 2, 2, 6, {})

    outcomes = await ctx.admin.create_topics(
        [TopicSpec("b1", 3, 3, 6, {}), TopicSpec("first", 1, 1, 6, {}),
         TopicSpec("b3", 2, 2, 99, {}), TopicSpec("b2", 0, 0, 6, {})]
    )  # fmt: skip
    assert waits == 2  # the refused creation made nothing to wait for; the batch of two once
    made, exists, bad_perm, defaulted = outcomes
    assert not isinstance(made, Exception) and made.read_queue_nums == 3
    assert isinstance(exists, AlreadyExistsError)
    assert isinstance(bad_perm, InvalidArgumentError)
    assert not isinstance(defaulted, Exception)
    assert defaulted.read_queue_nums == ctx.topics.default_queue_nums
    assert await ctx.admin.create_topics([TopicSpec("first", 1, 1, 6, {})]) != []
    assert waits == 2  # nothing made: nothing to wait for


async def test_a_failed_write_is_the_error_of_every_topic_the_call_made(
    inproc_broker: InProcFactory,
) -> None:
    broker = await inproc_broker()
    ctx = broker.controller.ctx
    assert ctx is not None

    async def full() -> None:
        raise OSError(28, "No space left on device")

    ctx.topics.durable = full
    made, exists = await ctx.admin.create_topics(
        [TopicSpec("x1", 1, 1, 6, {}), TopicSpec("x1", 1, 1, 6, {})]
    )
    assert isinstance(made, OSError) and "No space" in str(made)
    assert isinstance(exists, AlreadyExistsError)
