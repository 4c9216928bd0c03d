"""A compacted topic takes keyed messages only, as Kafka refuses a record without a key on a
``cleanup.policy=compact`` topic (INVALID_RECORD, "Compacted topic cannot accept message
without key"): compaction keeps the latest record of each key, and a keyless one has none, so
Kafka's cleaner drops it (``retention/compactor.py`` does too). Checked at the store's write
(``write.py``), the one place every protocol's sends pass, for the topics
``RetentionService.refresh`` keeps in ``CompactedTopics``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from wharf.store.codec.properties import KAFKA_CONTROL_PROPERTY, compaction_key
from wharf.store.codec.records import record_properties
from wharf.store.errors import InvalidMessageError
from wharf.store.model import MessageInput


class CompactedTopics:
    """The names of the compacted topics, as the writer reads them: one attribute load and a
    set lookup a write (a call into the policies cost ~0.3-2 us a write). Replaced whole by
    ``RetentionService.refresh`` when the broker's topics change."""

    __slots__ = ("topics",)

    def __init__(self) -> None:
        self.topics: frozenset[str] = frozenset()


def _refusal(topic: str, index: int) -> InvalidMessageError:
    return InvalidMessageError(
        f"Compacted topic cannot accept message without key in topic {topic} (message "
        f"{index}: {topic} has cleanup.policy=compact, so every message needs a key: a Kafka "
        "record key, or RocketMQ's KEYS)"
    )


def check_keyed_messages(topic: str, messages: Sequence[MessageInput]) -> None:
    """Keyless messages refused; a Kafka transaction's marker (the broker's own, no key, as in
    Kafka) passes."""
    for index, message in enumerate(messages):
        props = message.properties
        if compaction_key(props) is None and KAFKA_CONTROL_PROPERTY not in props:
            raise _refusal(topic, index)


def check_keyed_records(topic: str, data: bytes | memoryview, positions: Iterable[int]) -> None:
    """Producer-encoded records (stored layout) at ``positions`` of ``data``."""
    for index, pos in enumerate(positions):
        props = record_properties(data, pos)
        if compaction_key(props) is None and KAFKA_CONTROL_PROPERTY not in props:
            raise _refusal(topic, index)
