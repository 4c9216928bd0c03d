"""Where a consumer keeps its progress: on the broker (clustering) or locally (broadcasting)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Protocol

import grpc
from wharf.client.errors import from_rpc_error
from wharf.client.message import MessageQueue
from wharf.v1 import messaging_pb2, messaging_pb2_grpc

log = logging.getLogger(__name__)


class OffsetStore(Protocol):
    async def read(self, queue: MessageQueue) -> int:
        """The committed offset, or -1 when there is none."""
        ...

    def update(self, queue: MessageQueue, offset: int) -> None:
        """Record progress in memory (persisted by :meth:`persist`)."""
        ...

    def mark_committed(self, queue: MessageQueue, offset: int) -> None:
        """The broker already has ``offset`` (it was piggy-backed on a pull)."""
        ...

    async def persist(self, queues: list[MessageQueue] | None = None) -> None: ...


class RemoteOffsetStore:
    """Clustering mode: offsets live on the broker (UpdateConsumerOffset / QueryConsumerOffset)."""

    def __init__(self, stub: messaging_pb2_grpc.MessagingServiceStub, group: str) -> None:
        self._stub = stub
        self._group = group
        self._offsets: dict[MessageQueue, int] = {}
        self._committed: dict[MessageQueue, int] = {}

    async def read(self, queue: MessageQueue) -> int:
        try:
            reply = await self._stub.QueryConsumerOffset(
                messaging_pb2.QueryConsumerOffsetRequest(
                    consumer_group=self._group, topic=queue.topic, queue_id=queue.queue_id
                ),
                timeout=5.0,
            )
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        if reply.offset >= 0:
            self._committed[queue] = reply.offset
        return reply.offset

    def update(self, queue: MessageQueue, offset: int) -> None:
        self._offsets[queue] = offset

    def mark_committed(self, queue: MessageQueue, offset: int) -> None:
        self._committed[queue] = offset

    def pending(self, queue: MessageQueue) -> int | None:
        """The offset to piggy-back on the next pull, if it moved since the last commit."""
        offset = self._offsets.get(queue)
        if offset is None or self._committed.get(queue) == offset:
            return None
        return offset

    def forget(self, queue: MessageQueue) -> None:
        self._offsets.pop(queue, None)
        self._committed.pop(queue, None)

    async def persist(self, queues: list[MessageQueue] | None = None) -> None:
        for queue in list(queues if queues is not None else self._offsets):
            offset = self._offsets.get(queue)
            if offset is None or self._committed.get(queue) == offset:
                continue
            try:
                await self._stub.UpdateConsumerOffset(
                    messaging_pb2.UpdateConsumerOffsetRequest(
                        consumer_group=self._group,
                        topic=queue.topic,
                        queue_id=queue.queue_id,
                        offset=offset,
                    ),
                    timeout=5.0,
                )
                self._committed[queue] = offset
            except grpc.RpcError as exc:
                log.warning("offset commit %s=%d failed: %s", queue, offset, from_rpc_error(exc))


class LocalOffsetStore:
    """Broadcasting mode: every member keeps its own offsets, in memory or in a JSON file
    (written atomically: temp file + rename, off the event loop)."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._offsets: dict[MessageQueue, int] = {}
        self._loaded = path is None
        self._dirty = False

    async def read(self, queue: MessageQueue) -> int:
        if not self._loaded:
            self._offsets.update(await asyncio.to_thread(self._load_blocking))
            self._loaded = True
        return self._offsets.get(queue, -1)

    def update(self, queue: MessageQueue, offset: int) -> None:
        if self._offsets.get(queue) != offset:
            self._offsets[queue] = offset
            self._dirty = True

    def mark_committed(self, queue: MessageQueue, offset: int) -> None:
        """Local offsets are never sent to the broker."""

    def pending(self, queue: MessageQueue) -> int | None:
        return None

    def forget(self, queue: MessageQueue) -> None:
        """Broadcast members keep every queue's offset."""

    async def persist(self, queues: list[MessageQueue] | None = None) -> None:
        if self._path is None or not self._dirty:
            return
        snapshot = {f"{q.topic}#{q.queue_id}": off for q, off in self._offsets.items()}
        self._dirty = False
        await asyncio.to_thread(self._write_blocking, snapshot)

    def _load_blocking(self) -> dict[MessageQueue, int]:
        assert self._path is not None
        if not self._path.exists():
            return {}
        raw = json.loads(self._path.read_text())
        result = {}
        for name, offset in raw.items():
            topic, _, queue_id = name.rpartition("#")
            result[MessageQueue(topic, int(queue_id))] = int(offset)
        return result

    def _write_blocking(self, snapshot: dict[str, int]) -> None:
        assert self._path is not None
        self._path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._path.with_suffix(".tmp")
        tmp.write_text(json.dumps(snapshot, sort_keys=True))
        os.replace(tmp, self._path)
