"""All ConsumeQueues of a store (RocketMQ's consumeQueueTable): loading the
``consumequeue/<topic>/<queueId>/`` tree, lookup, creation on first dispatch, topic removal."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from wharf.store.queue.consume_queue import ConsumeQueue


class ConsumeQueueTable:
    """All ConsumeQueues of a store, created on first use (RocketMQ's consumeQueueTable)."""

    def __init__(self, root: Path, file_size: int) -> None:
        self.root = root
        self.file_size = file_size
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}

    @classmethod
    def load_blocking(cls, root: Path, file_size: int) -> ConsumeQueueTable:
        table = cls(root, file_size)
        if root.is_dir():
            for topic_dir in sorted(root.iterdir()):
                if not topic_dir.is_dir():
                    continue
                if topic_dir.name.startswith(".deleted-"):
                    shutil.rmtree(topic_dir, ignore_errors=True)  # a deletion cut short
                    continue
                for queue_dir in sorted(topic_dir.iterdir()):
                    if queue_dir.is_dir() and queue_dir.name.isdigit():
                        queue_id = int(queue_dir.name)
                        table.queues[(topic_dir.name, queue_id)] = ConsumeQueue.load_blocking(
                            topic_dir.name, queue_id, queue_dir, file_size
                        )
        return table

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = self.queues.get((topic, queue_id))
        if queue is None:
            queue = ConsumeQueue(topic, queue_id, self.root / topic / str(queue_id), self.file_size)
            self.queues[(topic, queue_id)] = queue
        return queue

    def of_topic(self, topic: str) -> list[ConsumeQueue]:
        return sorted(
            (q for (t, _), q in self.queues.items() if t == topic), key=lambda q: q.queue_id
        )

    def remove_topic(self, topic: str) -> list[ConsumeQueue]:
        """Forget the topic's queues and move its directory aside (one rename, so a queue
        re-created at once starts in a fresh directory); the caller destroys the returned
        queues in a thread."""
        removed = [q for (t, _), q in self.queues.items() if t == topic]
        for queue in removed:
            del self.queues[(queue.topic, queue.queue_id)]
        topic_dir = self.root / topic
        if topic_dir.is_dir():
            trash = self.root / f".deleted-{topic}-{uuid.uuid4().hex[:8]}"
            os.rename(topic_dir, trash)
            for queue in removed:
                queue.directory = trash / str(queue.queue_id)
                for file in queue.files:
                    file.path = queue.directory / file.path.name
        return removed

    def __iter__(self) -> Iterator[ConsumeQueue]:
        return iter(list(self.queues.values()))

    def __len__(self) -> int:
        return len(self.queues)

    @property
    def max_physical_offset(self) -> int:
        """The end of the newest record any queue points at (where re-dispatch resumes)."""
        return max((q.max_physical_offset for q in self.queues.values()), default=0)

    @property
    def file_count(self) -> int:
        return sum(len(q.files) for q in self.queues.values())

    def close(self) -> None:
        for queue in self.queues.values():
            queue.close()
