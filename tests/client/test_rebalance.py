"""AllocateMessageQueueAveragely: the queue split of a consumer group."""

from __future__ import annotations

import pytest
from wharf.client.message import MessageQueue
from wharf.client.rebalance import allocate_averagely


def queues(n: int, topic: str = "t") -> list[MessageQueue]:
    return [MessageQueue(topic, i) for i in range(n)]


# ---------------------------------------------------------------- allocation
@pytest.mark.parametrize("n_queues", [1, 3, 8, 9, 16])
@pytest.mark.parametrize("n_clients", [1, 2, 3, 5, 10])
def test_allocation_is_a_partition_balanced_within_one(n_queues: int, n_clients: int) -> None:
    clients = [f"c{i}" for i in range(n_clients)]
    shares = [allocate_averagely(c, clients, queues(n_queues)) for c in clients]
    flat = [q for share in shares for q in share]
    assert sorted(flat) == queues(n_queues)  # every queue exactly once
    sizes = [len(s) for s in shares]
    assert max(sizes) - min(sizes) <= 1


def test_allocation_matches_rocketmq_averagely() -> None:
    # 8 queues over 3 clients: 3, 3, 2 in contiguous ranges (RocketMQ's layout).
    clients = ["a", "b", "c"]
    got = [[q.queue_id for q in allocate_averagely(c, clients, queues(8))] for c in clients]
    assert got == [[0, 1, 2], [3, 4, 5], [6, 7]]


def test_allocation_ignores_input_order_and_unknown_client() -> None:
    assert allocate_averagely("b", ["b", "a"], list(reversed(queues(4)))) == queues(4)[2:]
    assert allocate_averagely("zz", ["a", "b"], queues(4)) == []
