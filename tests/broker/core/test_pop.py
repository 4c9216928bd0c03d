"""Pop orchestration in the core (broker/core/pop.py): the group's rules and its dead-letter
topic before the pop store's calls (the daemon path: tests/broker/v2/test_consume.py)."""

from __future__ import annotations

from typing import Any

import pytest
from wharf.broker.core.pop import PopConsumer, PopCore
from wharf.broker.errors import NotFoundError
from wharf.broker.meta.groups import SubscriptionGroup, SubscriptionGroupManager
from wharf.broker.meta.topics import TopicConfigManager
from wharf.store.read.filter import MATCH_ALL


class FakePop:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def pop_wait(self, *args: Any) -> list[Any]:
        self.calls.append(("pop_wait", *args))
        return []

    async def dead_letter(self, *args: Any) -> None:
        self.calls.append(("dead_letter", *args))

    async def change_invisible(self, *args: Any) -> str:
        self.calls.append(("change_invisible", *args))
        return "new-handle"


def core_of(pop: FakePop, auto_create: bool = True) -> tuple[PopCore, TopicConfigManager]:
    topics = TopicConfigManager(8, True)
    groups = SubscriptionGroupManager(auto_create, default_retry_max_times=16)
    groups.put(SubscriptionGroup("fifo", retry_max_times=3, consume_message_orderly=True))
    return PopCore(lambda: pop, groups, topics), topics


def test_a_consumer_carries_its_delivery_limit_and_fifo_and_gets_its_dlq_topic() -> None:
    core, topics = core_of(FakePop())
    assert core.consumer("fifo") == PopConsumer("fifo", 4, True)
    assert core.consumer("auto") == PopConsumer("auto", 17, False)  # auto-created: 16 + 1
    for group in ("fifo", "auto"):
        dlq = topics.get(f"%DLQ%{group}")
        assert dlq is not None and dlq.read_queue_nums == 1


def test_an_unknown_group_is_refused_before_any_store_call() -> None:
    pop = FakePop()
    core, topics = core_of(pop, auto_create=False)
    with pytest.raises(NotFoundError):
        core.consumer("missing")
    assert topics.get("%DLQ%missing") is None and pop.calls == []


async def test_receive_and_dead_letter_pass_the_groups_rules_to_the_pop_store() -> None:
    pop = FakePop()
    core, _ = core_of(pop)
    consumer = core.consumer("fifo")
    assert await core.receive(consumer, "t", MATCH_ALL, 8, 30_000, 5_000) == []
    await core.dead_letter(consumer, "t", "handle")
    assert await core.change_invisible("fifo", "t", "handle", 1_000) == "new-handle"
    assert pop.calls == [
        ("pop_wait", "fifo", "t", None, MATCH_ALL, 8, 30_000, 4, True, 5_000),
        ("dead_letter", "fifo", "t", "handle"),
        ("change_invisible", "fifo", "t", "handle", 1_000),
    ]
