"""ConsumerOffsetManager: committed offsets per group, topic and queue, persisted as RocketMQ's
``config/consumerOffset.json`` (``{"offsetTable": {"topic@group": {"0": n}}}``)."""

from __future__ import annotations

from typing import Any

from wharf.broker.errors import InvalidArgumentError

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetManager:
    FILE_NAME = "consumerOffset.json"

    def __init__(self) -> None:
        # (topic, group) -> {queue_id: offset}
        self.table: dict[tuple[str, str], dict[int, int]] = {}
        self.dirty = False

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        if offset < 0:
            raise InvalidArgumentError(f"offset must be >= 0, got {offset}")
        queues = self.table.get((topic, group))
        if queues is None:
            queues = self.table[(topic, group)] = {}
        queues[queue_id] = offset
        self.dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed for this queue."""
        queues = self.table.get((topic, group))
        if queues is None:
            return -1
        return queues.get(queue_id, -1)

    def by_queue(self) -> dict[tuple[str, int], dict[str, int]]:
        """``(topic, queue_id) -> {group: committed offset}``: what retention needs to count
        the messages it deletes before a group consumed them."""
        out: dict[tuple[str, int], dict[str, int]] = {}
        for (topic, group), queues in self.table.items():
            for queue_id, offset in queues.items():
                out.setdefault((topic, queue_id), {})[group] = offset
        return out

    def of_group(self, group: str) -> dict[str, dict[int, int]]:
        """topic -> {queue_id: offset} for one group."""
        return {t: dict(q) for (t, g), q in self.table.items() if g == group}

    def groups(self) -> set[str]:
        return {g for _, g in self.table}

    def remove_topic(self, topic: str) -> None:
        for key in [k for k in self.table if k[0] == topic]:
            del self.table[key]
            self.dirty = True

    def remove_group(self, group: str) -> None:
        for key in [k for k in self.table if k[1] == group]:
            del self.table[key]
            self.dirty = True

    def to_json(self) -> dict[str, Any]:
        return {
            "offsetTable": {
                f"{topic}{TOPIC_GROUP_SEPARATOR}{group}": {str(q): o for q, o in queues.items()}
                for (topic, group), queues in self.table.items()
            }
        }

    def load(self, data: dict[str, Any] | None) -> None:
        if not data:
            return
        for key, queues in data.get("offsetTable", {}).items():
            # Topics never contain '@'; groups do not either, so the split is unambiguous.
            topic, _, group = str(key).partition(TOPIC_GROUP_SEPARATOR)
            self.table[(topic, group)] = {int(q): int(o) for q, o in queues.items()}
