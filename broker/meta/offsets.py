"""ConsumerOffsetManager: committed offsets per group, topic and queue, persisted as RocketMQ's
``config/consumerOffset.json`` (``{"offsetTable": {"topic@group": {"0": n}}}``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from wharf.broker.errors import InvalidArgumentError
from wharf.broker.meta.persist import PendingWrite, TableJournal, nothing_to_write

TOPIC_GROUP_SEPARATOR = "@"


def _json_key(key: tuple[str, str]) -> str:
    return f"{key[0]}{TOPIC_GROUP_SEPARATOR}{key[1]}"


def _queues_json(queues: dict[int, int]) -> dict[str, int]:
    return {str(q): o for q, o in queues.items()}


class ConsumerOffsetManager:
    FILE_NAME = "consumerOffset.json"

    def __init__(self) -> None:
        # (topic, group) -> {queue_id: offset}
        self.table: dict[tuple[str, str], dict[int, int]] = {}
        self.dirty = False
        # The (topic, group) entries changed since the last persist, journaled beside the
        # snapshot (broker/meta/persist.py): one commit does not rewrite every offset.
        self.journal = TableJournal("offsetTable", _queues_json, _json_key, dict)
        # What a commit answered only once durable awaits (Kafka's OffsetCommit): the
        # controller's MetadataPersister.table_durable, a group commit of this table's file
        # (fsynced under SYNC_FLUSH). RocketMQ-protocol commits do not wait (broker/README.md).
        self.durable: Callable[[], Awaitable[None]] = nothing_to_write

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        if offset < 0:
            raise InvalidArgumentError(f"offset must be >= 0, got {offset}")
        queues = self.table.get((topic, group))
        if queues is None:
            queues = self.table[(topic, group)] = {}
        queues[queue_id] = offset
        self.journal.changed((topic, group))
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

    def groups_of_topic(self, topic: str) -> set[str]:
        """The groups with an offset on ``topic`` (RocketMQ's whichGroupByTopic)."""
        return {g for t, g in self.table if t == topic}

    def remove_topic(self, topic: str) -> None:
        for key in [k for k in self.table if k[0] == topic]:
            del self.table[key]
            self.journal.changed(key)
            self.dirty = True

    def remove_group(self, group: str) -> None:
        for key in [k for k in self.table if k[1] == group]:
            del self.table[key]
            self.journal.changed(key)
            self.dirty = True

    def remove_queues(self, group: str, topic: str, queue_ids: set[int]) -> None:
        """The group's committed offsets of those queues of ``topic`` (Kafka's OffsetDelete)."""
        queues = self.table.get((topic, group))
        if queues is None:
            return
        for queue_id in queue_ids:
            queues.pop(queue_id, None)
        if not queues:
            del self.table[(topic, group)]
        self.journal.changed((topic, group))
        self.dirty = True

    def to_json(self) -> dict[str, Any]:
        return {"offsetTable": {_json_key(k): _queues_json(q) for k, q in self.table.items()}}

    def capture(self) -> PendingWrite:
        """See TopicConfigManager.capture: the changed (topic, group) entries, copied."""
        return self.journal.capture(self.table, {})

    def load(self, data: dict[str, Any] | None) -> None:
        self.journal.reset()  # the next persist compares the whole table with the files
        if not data:
            return
        for key, queues in data.get("offsetTable", {}).items():
            # Topics never contain '@'; groups do not either, so the split is unambiguous.
            topic, _, group = str(key).partition(TOPIC_GROUP_SEPARATOR)
            self.table[(topic, group)] = {int(q): int(o) for q, o in queues.items()}
