"""Client-side queue allocation (RocketMQ's AllocateMessageQueueAveragely).

Every member of a group sees the same sorted member list and the same sorted queue list,
so each computes its own share without talking to the others:

    >>> qs = [MessageQueue("t", i) for i in range(5)]
    >>> [q.queue_id for q in allocate_averagely("b", ["a", "b"], qs)]
    [3, 4]
"""

from __future__ import annotations

from collections.abc import Sequence

from wharf.client.message import MessageQueue


def allocate_averagely(
    client_id: str, client_ids: Sequence[str], queues: Sequence[MessageQueue]
) -> list[MessageQueue]:
    """Contiguous, balanced ranges: the first ``len(queues) % len(clients)`` members get one
    extra queue; members beyond the queue count get none. Unknown ``client_id`` -> none."""
    members = sorted(client_ids)
    ordered = sorted(queues)
    if client_id not in members or not ordered:
        return []
    index = members.index(client_id)
    count, n = len(ordered), len(members)
    mod = count % n
    if count <= n:
        average = 1
    elif mod > 0 and index < mod:
        average = count // n + 1
    else:
        average = count // n
    start = index * average if mod > 0 and index < mod else index * average + mod
    span = min(average, count - start)
    return [ordered[(start + i) % count] for i in range(max(span, 0))]
