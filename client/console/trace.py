"""A message's trace: where it is stored and which consumer groups are past it.

``trace_of`` asks every subscription group for its progress on the message's topic (one
``consumer_progress`` call per group, at most 64 in flight) and sorts the groups into
- consumed: the group's committed offset on the message's queue is past the message's offset;
- not consumed: the group has an offset on that queue but it is at or before the message (its
  lag on the queue is shown);
- groups with no offset on the topic at all are only counted (they never read it).
A committed offset is the next offset a group will read, so "consumed" means acknowledged up to
and including this message (RocketMQ's definition), not merely delivered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wharf.client import Admin, NotFoundError, ReceivedMessage
from wharf.client.console.context import gather_limited


@dataclass
class GroupState:
    group: str
    committed: int  # -1: none
    lag: int
    online_clients: int


@dataclass
class Trace:
    consumed: list[GroupState] = field(default_factory=list)
    pending: list[GroupState] = field(default_factory=list)
    unrelated: int = 0  # groups with no offset on the topic
    errors: list[str] = field(default_factory=list)


async def trace_of(admin: Admin, message: ReceivedMessage) -> Trace:
    topic = message.queue_topic
    groups = [g.group_name for g in (await admin.list_groups()).groups]
    replies = await gather_limited(admin.consumer_progress(g, topic) for g in groups)
    trace = Trace()
    for group, reply in zip(groups, replies, strict=True):
        if isinstance(reply, BaseException):
            if isinstance(reply, NotFoundError):
                trace.unrelated += 1
            else:
                trace.errors.append(f"{group}: {reply}")
            continue
        rows = [q for q in reply.queues if q.topic == topic and q.queue_id == message.queue_id]
        committed = rows[0].consumer_offset if rows else -1
        if committed < 0:
            trace.unrelated += 1
            continue
        state = GroupState(group, committed, rows[0].lag if rows else 0, reply.online_clients)
        if committed > message.queue_offset:
            trace.consumed.append(state)
        else:
            trace.pending.append(state)
    return trace
