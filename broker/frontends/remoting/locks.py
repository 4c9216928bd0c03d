"""LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42): the queue locks of orderly push consumers
(RocketMQ's ``RebalanceLockManager``). The broker has no other queue-lock table: wharf.v1 and
RocketMQ 5 FIFO consumption orders by message group in the pop service, not by queue locks.

An orderly consumer locks the queues its rebalance gave it before it pulls them and re-locks
them every 20 s; a lock held by another client is refused until that client unlocks it or the
lock expires, ``LOCK_MAX_LIVE_MS`` (60 s, RocketMQ's ``rebalanceLockMaxLiveTime``) after its
last lock. Bodies are JSON: the request ``{consumerGroup, clientId, mqSet: [{topic, brokerName,
queueId}]}``; the answer to 41 ``{lockOKMQSet: [...]}`` (the queues this client holds now), to
42 nothing. The table is in memory: a restarted broker starts unlocked, as RocketMQ's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wharf.broker.errors import InvalidArgumentError
from wharf.broker.kit.remoting.codes import ResponseCode
from wharf.broker.kit.remoting.frame import RemotingCommand, response_to

if TYPE_CHECKING:
    from wharf.broker.kit.remoting.server import Connection

__all__ = ["LOCK_MAX_LIVE_MS", "QueueLocks", "RemotingLocks"]

LOCK_MAX_LIVE_MS = 60_000
MAX_QUEUES_PER_REQUEST = 4096

# (topic, brokerName, queueId): a MessageQueue as the clients name it.
Queue = tuple[str, str, int]


@dataclass(slots=True)
class _Lock:
    client_id: str
    last_ms: int


class QueueLocks:
    """group -> queue -> the client holding it; a lock lives ``max_live_ms`` after its last
    (re)lock."""

    def __init__(
        self,
        max_live_ms: int = LOCK_MAX_LIVE_MS,
        clock_ms: Callable[[], int] = lambda: int(time.monotonic() * 1000),
    ) -> None:
        self.max_live_ms = max_live_ms
        self._clock = clock_ms
        self._groups: dict[str, dict[Queue, _Lock]] = {}

    def _held(self, lock: _Lock | None, now: int) -> bool:
        return lock is not None and now - lock.last_ms <= self.max_live_ms

    def try_lock(self, group: str, queues: list[Queue], client_id: str) -> list[Queue]:
        """Lock what is free (or expired, or this client's already): the queues this client
        holds afterwards, in the order asked."""
        now = self._clock()
        table = self._groups.setdefault(group, {})
        out: list[Queue] = []
        for queue in queues:
            lock = table.get(queue)
            if lock is not None and lock.client_id == client_id:
                lock.last_ms = now
            elif self._held(lock, now):
                continue
            else:
                table[queue] = _Lock(client_id, now)
            out.append(queue)
        return out

    def unlock(self, group: str, queues: list[Queue], client_id: str) -> None:
        table = self._groups.get(group)
        if not table:
            return
        for queue in queues:
            lock = table.get(queue)
            if lock is not None and lock.client_id == client_id:
                del table[queue]
        if not table:
            del self._groups[group]

    def holder(self, group: str, queue: Queue) -> str | None:
        """The client holding ``queue`` now, or None."""
        lock = self._groups.get(group, {}).get(queue)
        return lock.client_id if lock is not None and self._held(lock, self._clock()) else None

    def expire(self) -> int:
        """Drop expired locks (the table stays small); how many."""
        now = self._clock()
        dropped = 0
        for group in list(self._groups):
            table = self._groups[group]
            for queue in [q for q, lock in table.items() if not self._held(lock, now)]:
                del table[queue]
                dropped += 1
            if not table:
                del self._groups[group]
        return dropped


def _parse_body(body: bytes) -> tuple[str, str, list[Queue]]:
    try:
        data = json.loads(body.decode("utf-8", "replace").strip() or "{}")
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
        raise InvalidArgumentError(f"body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidArgumentError("the lock body must be a JSON object")
    group = data.get("consumerGroup")
    client_id = data.get("clientId")
    if not isinstance(group, str) or not group:
        raise InvalidArgumentError("consumerGroup is required")
    if not isinstance(client_id, str) or not client_id:
        raise InvalidArgumentError("clientId is required")
    raw = data.get("mqSet") or []
    if not isinstance(raw, list) or len(raw) > MAX_QUEUES_PER_REQUEST:
        raise InvalidArgumentError(f"mqSet must be a list of at most {MAX_QUEUES_PER_REQUEST}")
    queues: list[Queue] = []
    for item in raw:
        if not isinstance(item, dict):
            raise InvalidArgumentError("mqSet items are {topic, brokerName, queueId}")
        topic, broker, queue_id = item.get("topic"), item.get("brokerName"), item.get("queueId")
        if isinstance(queue_id, str) and queue_id.strip().lstrip("-").isdigit():
            queue_id = int(queue_id)
        if (
            not isinstance(topic, str)
            or not isinstance(broker, str)
            or not isinstance(queue_id, int)
            or isinstance(queue_id, bool)
        ):
            raise InvalidArgumentError("mqSet items are {topic, brokerName, queueId}")
        queue = (topic, broker, queue_id)
        if queue not in queues:
            queues.append(queue)
    return group, client_id, queues


def _queue_json(queue: Queue) -> dict[str, Any]:
    topic, broker, queue_id = queue
    return {"brokerName": broker, "queueId": queue_id, "topic": topic}


class RemotingLocks:
    """The two handlers over one ``QueueLocks``."""

    def __init__(self, locks: QueueLocks | None = None) -> None:
        self.locks = locks if locks is not None else QueueLocks()

    async def lock(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        group, client_id, queues = _parse_body(request.body)
        locks = self.locks
        locks.expire()
        held = locks.try_lock(group, queues, client_id)
        body = json.dumps({"lockOKMQSet": [_queue_json(q) for q in held]}, separators=(",", ":"))
        return response_to(request, ResponseCode.SUCCESS, body=body.encode())

    async def unlock(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        group, client_id, queues = _parse_body(request.body)
        self.locks.unlock(group, queues, client_id)
        return response_to(request, ResponseCode.SUCCESS)
