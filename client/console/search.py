"""Browse a topic's messages stored in a time range, a page at a time.

For each queue of the topic the range is the offsets [first stored at/after ``begin_ms``,
first stored at/after ``end_ms``) (``PullConsumer.offset_for_time``; ``begin_ms`` 0 = the
queue's min offset, ``end_ms`` 0 = its max). The pages run over the queues in queue-id order,
then offset order: page ``p`` of size ``n`` is the messages numbered ``(p-1)*n .. p*n-1`` of that
sequence, read with as few pulls as the page crosses queues. A page therefore costs one
``topic_stats``, two ``SearchOffset`` calls per queue and one or two pulls, whatever the number
of messages stored. Messages a pull does not return (deleted by retention in the meantime) are
simply missing from the page.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from wharf.client import Admin, MessageQueue, PullConsumer, ReceivedMessage


@dataclass
class Page:
    messages: list[ReceivedMessage]
    total: int  # messages in the range, every queue
    page: int  # 1-based, clamped to [1, pages]
    pages: int


async def browse(
    admin: Admin,
    pull: PullConsumer,
    topic: str,
    begin_ms: int,
    end_ms: int,
    page: int,
    page_size: int,
) -> Page:
    stats = await admin.topic_stats(topic)  # NotFoundError for an unknown topic

    async def bound(queue_id: int, low: int, high: int, at_ms: int, default: int) -> int:
        if not at_ms:
            return default
        offset = await pull.offset_for_time(MessageQueue(topic, queue_id), at_ms)
        return min(max(offset, low), high)

    ranges = []
    for q in stats.queues:
        if q.max_offset <= q.min_offset:
            continue
        lo, hi = await asyncio.gather(
            bound(q.queue_id, q.min_offset, q.max_offset, begin_ms, q.min_offset),
            bound(q.queue_id, q.min_offset, q.max_offset, end_ms, q.max_offset),
        )
        if hi > lo:
            ranges.append((q.queue_id, lo, hi))
    total = sum(hi - lo for _, lo, hi in ranges)
    pages = max(1, -(-total // page_size))
    page = min(max(page, 1), pages)
    skip = (page - 1) * page_size
    wanted = min(page_size, total - skip)
    messages: list[ReceivedMessage] = []
    for queue_id, lo, hi in ranges:
        if wanted <= 0:
            break
        if skip >= hi - lo:
            skip -= hi - lo
            continue
        offset = lo + skip
        skip = 0
        stop = min(hi, offset + wanted)
        wanted -= stop - offset  # positions of this page, found or not
        while offset < stop:
            result = await pull.pull(
                MessageQueue(topic, queue_id), offset, max_messages=stop - offset
            )
            got = [m for m in result.messages if m.queue_offset < stop]
            if not got:
                break
            messages.extend(got)
            offset = got[-1].queue_offset + 1
    return Page(messages, total, page, pages)
