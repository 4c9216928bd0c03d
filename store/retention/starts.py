"""Log start offsets: per queue, the first offset a reader may get, as topic retention
(``retention.ms`` / ``retention.bytes``) and Kafka's DeleteRecords moved it.

Kept in ``config/logStartOffsets.json`` (``{"topic": {"queueId": offset}}``), written whole and
atomically (``write_json_atomic_blocking``: tmp, fsync, rename, directory fsync) before the
move is applied or answered, so a kill -9 never brings deleted records back. A start only
grows; a deleted topic's entries go with it. A replica's table follows its master's
(``services/retention.py``: ``replicated_starts``, ``follow_starts``), written the same way.
"""

from __future__ import annotations

from pathlib import Path

from wharf.store.paths import read_json_with_backup_blocking, write_json_atomic_blocking

QueueKey = tuple[str, int]


class LogStarts:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._starts: dict[QueueKey, int] = {}

    def load_blocking(self) -> dict[QueueKey, int]:
        data = read_json_with_backup_blocking(self.path)
        starts: dict[QueueKey, int] = {}
        if isinstance(data, dict):
            for topic, queues in data.items():
                if isinstance(queues, dict):
                    for queue_id, offset in queues.items():
                        starts[(str(topic), int(queue_id))] = int(offset)
        self._starts = starts
        return dict(starts)

    def get(self, topic: str, queue_id: int) -> int:
        return self._starts.get((topic, queue_id), 0)

    def items(self) -> list[tuple[QueueKey, int]]:
        return list(self._starts.items())

    def merged(self, moves: dict[QueueKey, int], gone: set[str]) -> dict[QueueKey, int]:
        """The table after ``moves`` (each kept only if it grows a start) without the topics
        in ``gone``: what ``save_blocking`` writes and ``adopt`` then takes."""
        table = {k: v for k, v in self._starts.items() if k[0] not in gone}
        for key, offset in moves.items():
            if offset > table.get(key, 0):
                table[key] = offset
        return table

    def save_blocking(self, table: dict[QueueKey, int]) -> None:
        payload: dict[str, dict[str, int]] = {}
        for (topic, queue_id), offset in sorted(table.items()):
            payload.setdefault(topic, {})[str(queue_id)] = offset
        write_json_atomic_blocking(self.path, payload)

    def adopt(self, table: dict[QueueKey, int]) -> None:
        """On the loop, once ``save_blocking(table)`` returned."""
        self._starts = table
